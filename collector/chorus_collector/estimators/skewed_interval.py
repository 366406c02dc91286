"""Equal-tailed intervals for an estimate whose error is a normal part plus a skewed part.

A sketch's estimate of f_v errs by S + C: S, the sampling noise, is normal to a good
approximation at any useful n; C, the other values' hash collisions with v, is a sum of rare
positive jumps less their mean, so it is right-skewed (skewness 3 and more at the default
sketch) and its left tail stops short at −Σ_{x≠v} f_x/(m − 1). A symmetric interval
f̂ ± z·SE then has the right total coverage but puts nearly all of its misses on one side:
measured at k = 32, m = 1024, n = 10⁶, the estimate lay above the upper reach 4–6% of the
time and below the lower 0.1–0.9% (tests/mechanisms/test_sketch_coverage.py).

C is approximated here by a centred gamma with C's variance τ² and third cumulant κ₃ (a
gamma matches a compound Poisson sum's first three cumulants and, like C, has a hard left
edge), convolved with S ~ N(0, σ²). The interval for f is [f̂ − q₀.₉₇₅, f̂ − q₀.₀₂₅] for the
quantiles q of S + C, found by bisection on the mixture's CDF evaluated on an equal-probability
grid of the gamma.
"""

from __future__ import annotations

import numpy as np

# scipy.special, not scipy.stats (the same functions: gamma's ppf is gammaincinv, the normal's
# cdf ndtr): stats takes a second to import, and every server and command imports this.
from scipy import special

__all__ = ["SKEW_THRESHOLD", "normal_plus_gamma_interval"]

GAMMA_GRID = 256       # equal-probability points of the gamma; the tails beyond 1/512 hold
                       # too little mass to move a 2.5% quantile by more than 0.2% of it
BISECTION_STEPS = 48   # halves the bracket of ±12 standard errors to 10⁻¹³ of one
SKEW_THRESHOLD = 0.02  # below this skewness of S + C the quantiles move by under 1% of an SE:
                       # the symmetric interval is kept


def normal_plus_gamma_interval(estimate: np.ndarray, sigma: np.ndarray, tau: np.ndarray,
                               third_cumulant: np.ndarray, z: float,
                               ) -> tuple[np.ndarray, np.ndarray]:
    """The interval [low, high] for f from f̂ = f + S + C, S ~ N(0, σ²) and C a centred gamma
    with variance τ² and third cumulant κ₃ ≥ 0, at the two-sided level of the normal quantile
    ``z``. Equal to f̂ ± z·√(σ² + τ²) where S + C's skewness is below ``SKEW_THRESHOLD``."""
    estimate, sigma, tau, third_cumulant = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.float64) for a in (estimate, sigma, tau, third_cumulant)))
    total = np.sqrt(sigma**2 + tau**2)
    low, high = estimate - z * total, estimate + z * total
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(total > 0, third_cumulant / total**3, 0.0)
    skewed = (skew >= SKEW_THRESHOLD) & (sigma > 0) & (tau > 0) & np.isfinite(total)
    if not skewed.any():
        return low, high
    # The quantiles in units of the total SE depend only on σ's share of it and on C's
    # skewness, which a query's candidates nearly share (they differ by their own f_v): solved
    # once per distinct pair at 3 decimals (a change of 10⁻³ in either moves a quantile by
    # about 10⁻³ SE), so a query of 60,000 candidates costs a few solves, not 60,000.
    share = np.round(sigma[skewed] / total[skewed], 3)
    gamma_skew = np.round(third_cumulant[skewed] / tau[skewed]**3, 3)
    pairs, where = np.unique(np.column_stack([share, gamma_skew]), axis=0, return_inverse=True)
    s = np.maximum(pairs[:, 0], 1e-3)
    t = np.sqrt(np.maximum(1 - s**2, 0.0))
    g = np.maximum(pairs[:, 1], 1e-3)
    shape = 4 / g**2                                   # a gamma's skewness is 2/√shape
    scale = t * g / 2
    grid = (np.arange(GAMMA_GRID) + 0.5) / GAMMA_GRID
    jumps = (special.gammaincinv(shape[:, None], grid[None, :]) - shape[:, None]) * scale[:, None]
    tail = float(special.ndtr(z))
    upper = _quantile(jumps, s, tail)[where.ravel()] * total[skewed]
    lower = _quantile(jumps, s, 1 - tail)[where.ravel()] * total[skewed]
    low[skewed] = estimate[skewed] - upper
    high[skewed] = estimate[skewed] - lower
    return low, high


def _quantile(jumps: np.ndarray, sigma: np.ndarray, probability: float) -> np.ndarray:
    """The ``probability`` quantile of N(0, σ²) + C per row, C given by its grid ``jumps``
    (in units of the total standard error, so ±12 brackets every quantile wanted here)."""
    below, above = np.full(len(sigma), -12.0), np.full(len(sigma), 12.0)
    for _ in range(BISECTION_STEPS):
        middle = (below + above) / 2
        cdf = special.ndtr((middle[:, None] - jumps) / sigma[:, None]).mean(axis=1)
        short = cdf < probability
        below = np.where(short, middle, below)
        above = np.where(short, above, middle)
    result: np.ndarray = (below + above) / 2
    return result
