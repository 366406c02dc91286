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
grid of the gamma. The bisection's answer is computed without evaluating the CDF at most of its
midpoints (``_quantiles``): a few Newton steps bracket the root tightly, and every midpoint
outside that bracket is decided by the CDF's monotonicity, so the answer is the plain
bisection's, bit for bit, at about a third of its CDF evaluations.
"""

from __future__ import annotations

import functools

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
# A decision of the bisection (is the CDF at a midpoint below p?) is taken without evaluating
# the CDF only where the CDF at a bracketing point already clears p by this much. The computed
# CDF is monotone to within its rounding, a few 10⁻¹⁶ (256 terms, each within 2 ulp, summed
# pairwise and divided by 256 exactly), so a point below one whose CDF is under p − MARGIN has
# its CDF under p too, as the plain bisection would find.
MARGIN = 1e-13
NEWTON_STEPS = 20      # at most (quadratic from the Cornish–Fisher start: 3–5 are typical)


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
    scale = t * g / 2
    jumps = np.stack([_standard_jumps(float(v)) for v in g]) * scale[:, None]
    tail = float(special.ndtr(z))
    # Both quantiles in one solve: rows 0..P−1 the upper (probability ``tail``), P..2P−1 the
    # lower; each row's solve is its own, so they are the answers of two separate solves.
    probability = np.repeat([tail, 1 - tail], len(s))
    normal = special.ndtri(probability)
    skewness = np.tile(t**3 * g, 2)                  # S + C's, in units of the total SE
    start = normal + (normal**2 - 1) * skewness / 6  # Cornish–Fisher
    solved = _quantiles(np.concatenate([jumps, jumps]), np.tile(s, 2), probability, start)
    upper = solved[:len(s)][where.ravel()] * total[skewed]
    lower = solved[len(s):][where.ravel()] * total[skewed]
    low[skewed] = estimate[skewed] - upper
    high[skewed] = estimate[skewed] - lower
    return low, high


@functools.lru_cache(maxsize=2048)
def _standard_jumps(g: float) -> np.ndarray:
    """The gamma grid of skewness ``g`` (rounded to 3 decimals and at least 10⁻³ by the caller,
    so a few thousand values at most), centred, before its scale: gammaincinv is most of a
    solve's set-up, and queries keep meeting the same skewness. Computed from a one-element
    array exactly as for a column of them, so the grid is the same bit for bit. Read-only."""
    shape = 4 / np.array([g])**2                      # a gamma's skewness is 2/√shape
    grid = (np.arange(GAMMA_GRID) + 0.5) / GAMMA_GRID
    row: np.ndarray = (special.gammaincinv(shape[:, None], grid[None, :]) - shape[:, None])[0]
    row.setflags(write=False)
    return row


def _cdf(middle: np.ndarray, jumps: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """P(N(0, σ²) + C ≤ ``middle``) per row, C uniform on its grid ``jumps``."""
    result: np.ndarray = special.ndtr((middle[:, None] - jumps) / sigma[:, None]).mean(axis=1)
    return result


def _quantiles(jumps: np.ndarray, sigma: np.ndarray, probability: np.ndarray,
               start: np.ndarray) -> np.ndarray:
    """The ``probability`` quantile of N(0, σ²) + C per row, C given by its grid ``jumps`` (in
    units of the total standard error, so ±12 brackets every quantile wanted here): the
    bisection of [−12, 12] in BISECTION_STEPS halvings, its answer (below + above)/2.

    The bisection's answer depends only on its decisions, CDF(middle) < p, and a decision at a
    middle outside a bracket [a, b] with CDF(a) < p − MARGIN and CDF(b) > p + MARGIN is known
    without evaluating the CDF there: below a it is "short", above b it is not (MARGIN). So
    safeguarded Newton steps from ``start`` find the root, a bracket of ±4·MARGIN/density
    around it is checked by two evaluations, and the bisection then evaluates the CDF only at
    its last few middles, those inside the bracket; a row whose bracket fails the check is
    bisected with every middle evaluated. Either way each decision, and so the answer, is the
    plain bisection's."""
    lo, hi = np.full(len(sigma), -12.0), np.full(len(sigma), 12.0)
    x = np.clip(np.nan_to_num(start), -12.0, 12.0)
    density = np.zeros(len(sigma))
    with np.errstate(all="ignore"):
        for _ in range(NEWTON_STEPS):
            standard = (x[:, None] - jumps) / sigma[:, None]
            cdf = special.ndtr(standard).mean(axis=1)
            density = np.exp(-standard**2 / 2).mean(axis=1) / (sigma * np.sqrt(2 * np.pi))
            # Close enough: within MARGIN/4 of p, x is within a quarter of the bracket below.
            moving = ~(np.abs(cdf - probability) < MARGIN / 4)
            if not moving.any():
                break
            short = cdf < probability
            lo, hi = np.where(short, x, lo), np.where(short, hi, x)
            newton = x - (cdf - probability) / density
            # Safeguarded: a step leaving the bracket known so far halves it instead.
            newton = np.where(np.isfinite(newton) & (newton >= lo) & (newton <= hi), newton,
                              (lo + hi) / 2)
            x = np.where(moving, newton, x)
        reach = 4 * MARGIN / density
        a, b = x - reach, x + reach
        sure = np.isfinite(reach) & (_cdf(a, jumps, sigma) < probability - MARGIN) & \
            (_cdf(b, jumps, sigma) > probability + MARGIN)
    a, b = np.where(sure, a, -np.inf), np.where(sure, b, np.inf)
    below, above = np.full(len(sigma), -12.0), np.full(len(sigma), 12.0)
    for _ in range(BISECTION_STEPS):
        middle = (below + above) / 2
        short = middle <= a
        open_ = np.flatnonzero((middle > a) & (middle < b))
        if open_.size:
            short[open_] = _cdf(middle[open_], jumps[open_], sigma[open_]) < probability[open_]
        below = np.where(short, middle, below)
        above = np.where(short, above, middle)
    result: np.ndarray = (below + above) / 2
    return result
