"""Sparse candidate selection and the constrained fit for RAPPOR decoding.

google/rappor (``analysis/R/decode.R``) selects candidates with a non-negative LASSO when they
are many, then fits a constrained least squares (β ≥ 0, Σβ ≤ 1). The same here with SciPy:

* :func:`lasso_select`: min ‖A β − b‖² + λ Σβ over β ≥ 0 (smooth on the feasible set, so
  L-BFGS-B with bounds solves it), down a geometric path of λ, keeping the smallest λ whose
  solution has at most ``max_nonzero`` non-zeros;
* :func:`constrained_fit`: min ‖A β − b‖² with β ≥ 0 (SciPy's NNLS), and Σβ ≤ 1 enforced with
  SLSQP only when the NNLS solution breaks it.

Both act on the weighted system A = √w·X, b = √w·Y. Constrained estimates are biased (shrunk
towards zero at the boundary); that is why the unbiased fit stays the default.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, nnls

__all__ = ["constrained_fit", "lasso_select"]

PATH_STEPS = 25


def _nonnegative_lasso(a: np.ndarray, b: np.ndarray, lam: float,
                       start: np.ndarray) -> np.ndarray:
    ata, atb = a.T @ a, a.T @ b

    def objective(beta: np.ndarray) -> tuple[float, np.ndarray]:
        residual = a @ beta - b
        gradient = 2 * (ata @ beta - atb) + lam
        return float(residual @ residual + lam * beta.sum()), gradient

    result = minimize(objective, start, jac=True, method="L-BFGS-B",
                      bounds=[(0.0, None)] * a.shape[1], options={"maxiter": 500})
    solution: np.ndarray = result.x
    return solution


def lasso_select(a: np.ndarray, b: np.ndarray, max_nonzero: int) -> np.ndarray:
    """Indices of the columns a non-negative LASSO keeps, at most ``max_nonzero`` of them."""
    lam_max = float(np.max(2 * a.T @ b, initial=0.0))
    if lam_max <= 0:
        return np.array([], dtype=int)
    beta = np.zeros(a.shape[1])
    chosen = np.array([], dtype=int)
    for lam in lam_max * np.geomspace(1.0, 1e-4, PATH_STEPS):
        beta = _nonnegative_lasso(a, b, float(lam), beta)
        support = np.flatnonzero(beta > 1e-10)
        if len(support) > max_nonzero:
            break
        chosen = support
    return chosen


def constrained_fit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ‖A β − b‖² subject to β ≥ 0 and Σβ ≤ 1."""
    beta, _ = nnls(a, b, maxiter=50 * a.shape[1] + 100)
    if beta.sum() <= 1.0:
        solution: np.ndarray = beta
        return solution
    ata, atb = a.T @ a, a.T @ b
    result = minimize(
        lambda x: float(x @ ata @ x - 2 * atb @ x), beta / beta.sum(),
        jac=lambda x: 2 * (ata @ x - atb), method="SLSQP",
        bounds=[(0.0, 1.0)] * a.shape[1],
        constraints=[{"type": "ineq", "fun": lambda x: 1.0 - x.sum(),
                      "jac": lambda x: -np.ones_like(x)}],
        options={"maxiter": 500},
    )
    constrained: np.ndarray = np.clip(result.x, 0.0, None)
    return constrained
