"""Sparse candidate selection and the constrained fit for RAPPOR decoding.

google/rappor (``analysis/R/decode.R``) selects candidates with a non-negative LASSO when they
are many, then fits a constrained least squares (β ≥ 0, Σβ ≤ 1). The same here, both solved
by accelerated projected gradient (FISTA, Beck and Teboulle 2009), which needs only
matrix-vector products and a cheap projection, so it stays fast with a thousand candidates:

* :func:`lasso_select`: min ‖A β − b‖² + λ Σβ over β ≥ 0, down a geometric path of λ,
  keeping the smallest λ whose solution has at most ``max_nonzero`` non-zeros. Each λ's
  problem is a non-negative quadratic program, solved exactly by Lawson and Hanson's active
  set (1974, ch. 23) on the Gram matrix, warm-started from the λ before: a solve of the
  passive set's small system per column that enters or leaves. FISTA took 300 iterations of
  a full Gram product per λ for the same supports (12 s of CPU against 1 s for 1,800
  candidates, 2,048 cohort bits and 225 selected, measured); it stays as the fallback;
* :func:`constrained_fit`: min ‖A β − b‖² over {β ≥ 0, Σβ ≤ 1}.

Both act on the weighted system A = √w·X, b = √w·Y. Constrained estimates are biased (shrunk
towards zero at the boundary); that is why the unbiased fit stays the default.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["constrained_fit", "lasso_select", "project_capped_simplex"]

PATH_STEPS = 25
MAX_ITERATIONS = 5000
TOLERANCE = 1e-10


def project_capped_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {x ≥ 0, Σx ≤ 1} (sort-based, O(M log M))."""
    clipped: np.ndarray = np.clip(v, 0.0, None)
    if clipped.sum() <= 1.0:
        return clipped
    ordered = np.sort(v)[::-1]  # projection onto the simplex {x ≥ 0, Σx = 1}
    cumulative = np.cumsum(ordered) - 1.0
    ranks = np.arange(1, len(v) + 1)
    last = np.flatnonzero(ordered - cumulative / ranks > 0)[-1]
    theta = cumulative[last] / (last + 1)
    projected: np.ndarray = np.clip(v - theta, 0.0, None)
    return projected


def _lipschitz(ata: np.ndarray) -> float:
    """2·λ_max(AᵀA), the gradient's Lipschitz constant, by power iteration (with a margin)."""
    if not ata.size:
        return 1.0
    vector = np.ones(ata.shape[0]) / np.sqrt(ata.shape[0])
    value = 0.0
    for _ in range(100):
        product = ata @ vector
        norm = float(np.linalg.norm(product))
        if norm == 0:
            return 1.0
        vector, previous, value = product / norm, value, norm
        if abs(value - previous) <= 1e-9 * value:
            break
    return 2.0 * value * 1.05  # power iteration approaches λ_max from below


def _fista(ata: np.ndarray, atb: np.ndarray, prox: Callable[[np.ndarray, float], np.ndarray],
           start: np.ndarray, iterations: int = MAX_ITERATIONS) -> np.ndarray:
    """min βᵀ(AᵀA)β − 2(Aᵀb)ᵀβ + g(β), with prox(v, step) the proximal map of g."""
    step = 1.0 / max(_lipschitz(ata), 1e-12)
    beta = prox(start, step)
    momentum, t = beta.copy(), 1.0
    for _ in range(iterations):
        gradient = 2 * (ata @ momentum - atb)
        updated = prox(momentum - step * gradient, step)
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        momentum = updated + ((t - 1) / t_next) * (updated - beta)
        change = float(np.max(np.abs(updated - beta), initial=0.0))
        beta, t = updated, t_next
        if change <= TOLERANCE * max(1.0, float(np.max(np.abs(beta), initial=0.0))):
            break
    return beta


def _soft_threshold(lam: float) -> Callable[[np.ndarray, float], np.ndarray]:
    """The proximal map of λΣβ on β ≥ 0: shift down by step·λ, clip at zero."""
    def prox(v: np.ndarray, step: float) -> np.ndarray:
        shrunk: np.ndarray = np.clip(v - step * lam, 0.0, None)
        return shrunk
    return prox


class _NoActiveSetSolution(Exception):
    """The active set did not settle (a singular or numerically degenerate passive set)."""


def _nonnegative_quadratic(q: np.ndarray, c: np.ndarray, start: np.ndarray) -> np.ndarray:
    """min βᵀQβ − 2cᵀβ over β ≥ 0 (Q positive semi-definite), exactly: Lawson–Hanson's
    active set on the Gram matrix, from a feasible ``start``.

    The passive set P holds the positive coordinates. The outer loop adds the coordinate
    whose negative half-gradient cᵢ − (Qβ)ᵢ is largest while one is positive (the KKT
    condition of every zero coordinate fails there); the inner loop solves Q_PP s = c_P and,
    where some sᵢ ≤ 0, steps from β towards s only as far as the first coordinate reaching
    zero, which leaves P."""
    size = len(c)
    beta = np.where(start > 0, start, 0.0)
    passive = beta > 0
    tolerance = 1e-10 * max(1.0, float(np.max(np.abs(c), initial=0.0)))
    for _ in range(3 * size + 10):  # each column enters a few times at most
        while passive.any():
            p = np.flatnonzero(passive)
            try:
                s = np.linalg.solve(q[np.ix_(p, p)], c[p])
            except np.linalg.LinAlgError:
                raise _NoActiveSetSolution from None
            if np.all(s > 0):
                beta = np.zeros(size)
                beta[p] = s
                break
            current = beta[p]
            blocking = np.flatnonzero(s <= 0)
            ratios = current[blocking] / (current[blocking] - s[blocking])
            first = blocking[int(np.argmin(ratios))]
            current = current + float(ratios.min()) * (s - current)
            leaving = (current <= 0) | (np.arange(len(p)) == first)
            passive[p[leaving]] = False
            beta = np.zeros(size)
            beta[p[~leaving]] = current[~leaving]
        gradient = c - q @ beta
        gradient[passive] = -np.inf
        entering = int(np.argmax(gradient)) if size else 0
        if not size or gradient[entering] <= tolerance:
            return beta
        passive[entering] = True
    raise _NoActiveSetSolution


def lasso_select(a: np.ndarray, b: np.ndarray, max_nonzero: int) -> np.ndarray:
    """Indices of the columns a non-negative LASSO keeps, at most ``max_nonzero`` of them."""
    ata, atb = a.T @ a, a.T @ b
    lam_max = float(np.max(2 * atb, initial=0.0))
    if lam_max <= 0:
        return np.array([], dtype=int)
    beta = np.zeros(a.shape[1])
    chosen = np.array([], dtype=int)
    for lam in lam_max * np.geomspace(1.0, 1e-4, PATH_STEPS):
        # ‖Aβ − b‖² + λΣβ is βᵀ(AᵀA)β − 2(Aᵀb − λ/2)ᵀβ plus a constant.
        try:
            beta = _nonnegative_quadratic(ata, atb - lam / 2, beta)
            support = np.flatnonzero(beta > 0)
        except _NoActiveSetSolution:
            # Selection needs the support, not a precise solution: a short, warm-started run.
            beta = _fista(ata, atb, _soft_threshold(float(lam)), beta, iterations=300)
            support = np.flatnonzero(beta > 1e-10)
        if len(support) > max_nonzero:
            break
        chosen = support
    return chosen


def constrained_fit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ‖A β − b‖² subject to β ≥ 0 and Σβ ≤ 1."""
    ata, atb = a.T @ a, a.T @ b
    return _fista(ata, atb, lambda v, s: project_capped_simplex(v), np.zeros(a.shape[1]))
