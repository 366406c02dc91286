"""Square Wave (Li et al., SIGMOD 2020), decoded by EM or EMS. MECHANISMS-2.md §1.1.

The state is the count c_j of reports in each of the m̃ output buckets. The channel is the
transition matrix M (m̃ × D), M[j, i] = P(report j | v uniform in input bucket i), computed in
closed form (:func:`transition_matrix`). The bucket shares θ are fitted by

* ``em``: maximum likelihood by expectation–maximisation, θ ← θ ⊙ Mᵀ(c ⊘ Mθ)/n from the
  uniform start. It never lowers the likelihood L(θ) = Σ_j c_j ln(Mθ)_j, but with many buckets
  the MLE is spiky and slow to reach;
* ``ems`` (the default, the paper's recommendation): the same step followed by a (1, 2, 1)/4
  smoothing of θ, with the boundary rows (2, 1)/3 and (1, 2)/3 — symmetric, unlike the
  reference code, which leaves the last bucket unsmoothed (MECHANISMS-2.md §6 item 2) —
  blended with weight w(n) = min(1, 10⁴/n): θ ← (1 − w)·θ + w·Sθ.

Why the weight shrinks with n. Smoothing regularises (fewer iterations, a smaller spread of
the upper quantiles) at the price of a bias where the density bends, and at full weight that
bias does *not* shrink with n: the EM map sees the data only as c/n, so even exact expected
counts give a smoothed θ (ε = 1, D = 256, log-normal shape: W1 ≈ 0.004, most of the error at
n = 10⁶, and p50 off by 16–19 of its standard errors there, issue 34). The bias of the fixed
point falls about in proportion to w while the noise falls as n^(−1/2), so with w ∝ 1/n
the smoothing bias over the standard error falls as n^(−1/2): the paper's EMS (w = 1) up to
10⁴ reports, 0.1 at 10⁵, 0.01 at 10⁶. (w ∝ n^(−1/2) was tried first and left p50 of a bimodal
shape 1.05 SE off at 10⁶.) What bias remains as w → 0 is EM's own: the stopping rule halts it
in the directions the channel barely identifies — with m̃ = D the channel matrix is singular
(condition number ~10¹⁸ at D = 256, ε = 1), so θ is not identified at bucket resolution from
the reports alone and a quantile's precision rests on some regularisation. Measured in
tests/mechanisms/test_sw_coverage.py.

Both stop per §1.1 as corrected by §8 item 4: when |ΔL| < τ(n) after at least two
iterations (the absolute change: EMS's smoothing can lower L, and a signed reading would stop
at the first drop), when ‖Δθ‖₁ ≤ 1/n, or after 10,000 iterations. §1.1's τ = 10⁻³ holds up to
10⁴ reports; above, τ(n) = 10⁻³·10⁴/n (:func:`loglik_tolerance`). With the smoothing weight
falling as 1/n, EM crawls along the directions the channel barely identifies, each step
gaining less than 10⁻³ while θ still moves: at n = 10⁶ the fixed τ stopped after 1,474 steps
with p99 of the log grid 1.19 buckets off (0.55 of its SE; the exact expected counts, ε = 1,
D = 256) where the fit it was heading for is 0.002 off. τ(n) runs until ‖Δθ‖₁ ≤ 1/n stops it
(4,728 steps there): p99's bias 0.00 SE, its SE 14% larger (the RMSE equal).

Uncertainty: none is stated (issue 34 item 3). There is no closed form for EM/EMS, and the
parametric bootstrap it had (R report-count vectors drawn from Multinomial(n, Mθ̂), each
refitted, bias-corrected normal intervals) did not cover: drawn from an already smoothed θ̂,
the replicates reproduce the noise but only part of the fit's bias, and their spread is off
where the fitted shape is; its 95% intervals covered 75–92% at p50 and 83–100% at p90–p99
at 10⁴–10⁵ reports. One calibration was tried before giving up (the EMS estimate ± 1.96 × the
spread of unsmoothed-EM bootstrap replicates, with and without the bootstrap's bias
correction): 98–100% at p50 on a log-grid latency shape, 77% at p99 of a bimodal one, not
the 93–97% asked for (docs/mechanisms/distributions.md). An interval that is 95% in name only is
worse than none, so every answer's standard errors and intervals are None (JSON null, CSV
empty), ``extra["intervals"]`` says why, and a warning points to ``hh``, whose intervals are
analytic. The query then costs one fit instead of 201.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.distribution import DistributionEstimator, FittedDistribution
from chorus_shared.mechanisms import SquareWave

__all__ = ["EMFit", "SquareWaveEstimator", "em_fit", "loglik_tolerance", "smooth",
           "smoothing_weight", "transition_matrix"]

#: Stopping rule (MECHANISMS-2.md §1.1, §8 item 4).
LOGLIK_TOLERANCE = 1e-3
MAX_ITERATIONS = 10_000

#: Up to this many reports EMS smooths at full weight (the paper's EMS); above, the weight
#: falls as SMOOTHING_FULL_N/n, so that the smoothing bias falls faster than the noise.
SMOOTHING_FULL_N = 10_000

METHODS = {
    "ems": "Square Wave, EMS (EM with (1,2,1)/4 smoothing after every step, at weight "
           "min(1, 10⁴/n); Li et al. 2020)",
    "em": "Square Wave, EM (maximum likelihood by expectation-maximisation; Li et al. 2020)",
}


def _ramp_integral(c: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """∫_low^high max(c − v, 0) dv, elementwise (low ≤ high), without cancellation: the
    integrand is positive on [low, e] with e = clip(c, low, high), where it integrates to
    (e − low)·(c − (low + e)/2)."""
    end = np.clip(c, low, high)
    result: np.ndarray = (end - low) * (c - (low + end) / 2)
    return result


@functools.lru_cache(maxsize=32)
def transition_matrix(mechanism: SquareWave) -> np.ndarray:
    """M (m̃ × D), M[j, i] = P(output bucket j | v uniform in input bucket i), exactly.

    P(j | v) = q·w + (p − q)·|B_j ∩ [v − b, v + b]|, with B_j = [l_j, l_j + w]. The overlap of
    two intervals [x₁, x₂] and [y₁, y₂] is r(x₂ − y₁) − r(x₂ − y₂) − r(x₁ − y₁) + r(x₁ − y₂),
    r(s) = max(s, 0); as a function of v each term is r(c − v) for a constant c, so its average
    over the input bucket [a_i, a_{i+1}] is an integral of a ramp (piecewise quadratic), done
    in closed form. Read-only: it is cached per (frozen) mechanism.
    """
    b, p, q, width = mechanism.b, mechanism.p, mechanism.q, mechanism.bucket_width
    lows = (-b + width * np.arange(mechanism.output_buckets))[:, None]  # l_j
    highs = lows + width
    edges = np.linspace(0.0, 1.0, mechanism.buckets + 1)
    a, a_next = edges[None, :-1], edges[None, 1:]
    # The wave is [v − b, v + b]: with x = B_j and y = the wave, each r(x − y) is r(c − v).
    overlap = (_ramp_integral(highs + b, a, a_next) - _ramp_integral(highs - b, a, a_next)
               - _ramp_integral(lows + b, a, a_next) + _ramp_integral(lows - b, a, a_next))
    matrix: np.ndarray = q * width + (p - q) * overlap * mechanism.buckets
    matrix.setflags(write=False)
    return matrix


def smoothing_weight(n: int) -> float:
    """EMS's smoothing weight for n reports: 1 up to :data:`SMOOTHING_FULL_N`, then
    SMOOTHING_FULL_N/n (0.1 at 10⁵, 0.01 at 10⁶)."""
    return min(1.0, SMOOTHING_FULL_N / n)


def loglik_tolerance(n: int) -> float:
    """The |ΔL| below which EM/EMS stops for n reports: §1.1's 10⁻³ up to
    :data:`SMOOTHING_FULL_N`, then 10⁻³·SMOOTHING_FULL_N/n, in step with the smoothing weight
    (module docstring)."""
    return LOGLIK_TOLERANCE * min(1.0, SMOOTHING_FULL_N / n)


def smooth(theta: np.ndarray) -> np.ndarray:
    """EMS's smoothing along axis 0, then renormalised: (θ_{i−1} + 2θ_i + θ_{i+1})/4 inside,
    (2θ₀ + θ₁)/3 and (θ_{D−2} + 2θ_{D−1})/3 at the two ends (the same rule mirrored)."""
    out = np.empty_like(theta)
    out[1:-1] = (theta[:-2] + 2 * theta[1:-1] + theta[2:]) / 4
    out[0] = (2 * theta[0] + theta[1]) / 3
    out[-1] = (theta[-2] + 2 * theta[-1]) / 3
    result: np.ndarray = out / out.sum(axis=0)
    return result


@dataclass(frozen=True)
class EMFit:
    """R fits at once: θ (D × R), and per replicate the iterations taken and whether one of
    the two convergence criteria (not the iteration cap) stopped it."""

    theta: np.ndarray
    iterations: np.ndarray
    converged: np.ndarray
    #: L(θ_t) for t = 0 (the uniform start), 1, …, for the first column, when asked for.
    loglik_trace: list[float] | None = None


def em_fit(matrix: np.ndarray, counts: np.ndarray, n: int, smoothing: bool,
           max_iterations: int = MAX_ITERATIONS, tolerance: float = LOGLIK_TOLERANCE,
           trace: bool = False, weight: float = 1.0) -> EMFit:
    """EM (or EMS, with ``smoothing``: θ ← (1 − ``weight``)·θ + ``weight``·Sθ after each EM
    step) for every column of ``counts`` (m̃ × R, each summing to n), from the uniform start.
    After iteration t each column stops when |L_t − L_{t−1}| < ``tolerance`` with t ≥ 2,
    when ‖θ_t − θ_{t−1}‖₁ ≤ 1/n, or when t = ``max_iterations``.
    Columns that stop are frozen; the rest go on as a smaller matrix."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim == 1:
        counts = counts[:, None]
    buckets, columns = matrix.shape[1], counts.shape[1]
    theta_out = np.empty((buckets, columns))
    iterations = np.zeros(columns, dtype=np.int64)
    converged = np.zeros(columns, dtype=bool)
    history: list[float] | None = [] if trace else None

    active = np.arange(columns)  # the columns still iterating, in the working arrays' order
    theta = np.full((buckets, columns), 1.0 / buckets)
    work_counts = counts
    predicted = matrix @ theta  # > 0: every entry of M is at least q·w > 0
    loglik = np.einsum("jr,jr->r", work_counts, np.log(predicted))
    if history is not None:
        history.append(float(loglik[0]))
    step_limit = 1.0 / n
    for t in range(1, max_iterations + 1):
        updated = theta * (matrix.T @ (work_counts / predicted))
        updated /= updated.sum(axis=0)
        if smoothing:
            # At weight 1 this is exactly smooth(updated): 0·θ adds nothing.
            updated = (1.0 - weight) * updated + weight * smooth(updated)
        predicted = matrix @ updated
        new_loglik = np.einsum("jr,jr->r", work_counts, np.log(predicted))
        if history is not None and active[0] == 0:
            history.append(float(new_loglik[0]))
        moved = np.abs(updated - theta).sum(axis=0)
        done = (moved <= step_limit) | ((t >= 2) & (np.abs(new_loglik - loglik) < tolerance))
        theta, loglik = updated, new_loglik
        if t == max_iterations:
            theta_out[:, active] = theta
            iterations[active] = t
            converged[active] = done
            break
        if done.any():
            finished = active[done]
            theta_out[:, finished] = theta[:, done]
            iterations[finished] = t
            converged[finished] = True
            keep = ~done
            active, theta, loglik = active[keep], theta[:, keep], loglik[keep]
            predicted, work_counts = predicted[:, keep], work_counts[:, keep]
            if active.size == 0:
                break
    return EMFit(theta_out, iterations, converged, history)


#: Why a Square Wave answer states no standard error or interval (``extra["intervals"]``,
#: ``uncertainty``, and each comparison row's note), measured in
#: tests/mechanisms/test_sw_coverage.py and docs/mechanisms/distributions.md.
INTERVALS = (
    "none: Square Wave + EM/EMS has no interval that covers. Its parametric bootstrap's 95% "
    "intervals covered the true quantiles only 75–92% of the time at p50 (issue 34), and the "
    "alternatives tried (EM's spread around the EMS estimate) covered too much or too "
    "little by quantile and population; so standard errors and intervals are null")
#: Said with every answer.
NO_INTERVALS_WARNING = (
    "no standard errors or 95% intervals: Square Wave's estimates (quantiles, CDF, shares, "
    "ranges, mean) are smoothed fits whose error no interval measured here covers reliably. "
    "For error bars to rely on, collect the distribution with a hierarchical-histogram (hh) "
    "campaign")


class SquareWaveEstimator(DistributionEstimator[SquareWave]):
    """State: how many reports fell in each output bucket."""

    name: ClassVar[str] = "sw"
    mechanism_type: ClassVar[MechanismTypes] = SquareWave
    postprocessing: ClassVar[tuple[str, ...]] = ("ems", "em")
    default_postprocessing: ClassVar[str] = "ems"

    def fit_cost(self, mechanism: SquareWave) -> float:
        # EM steps cost O(D·m̃), and a query is one fit (there is no bootstrap): at 256 × 256
        # buckets 0.04 s of CPU at 10⁴ reports, 0.2 s at 10⁵ and 1 s at 10⁶ (measured on a
        # loaded core; the tolerance falls with n, so 7,000 steps there): a tenth of the unit
        # for a series point, whose window holds a fraction of the campaign's reports.
        return 0.1 * mechanism.buckets * mechanism.output_buckets / 256**2

    def state_size(self, mechanism: SquareWave) -> int:
        return mechanism.output_buckets

    def map(self, mechanism: SquareWave, payloads: Sequence[Any]) -> np.ndarray:
        return np.bincount(np.asarray(payloads, dtype=np.int64),
                           minlength=mechanism.output_buckets).astype(np.int64)

    def fit(self, mechanism: SquareWave, n: int, state: np.ndarray, method: str,
            uncertainty: bool = True) -> FittedDistribution:
        """θ̂ by ``method`` ("ems" or "em"), without uncertainty whatever ``uncertainty``
        says: no standard error or interval this fit could state covers (module docstring)."""
        # Internal callers only: a query's method has been resolved by ``method_of``, and the
        # state is the folded count vector of exactly n reports.
        if method not in METHODS:
            raise ValueError(f"Square Wave is fitted by one of {sorted(METHODS)}, not "
                             f"{method!r:.40}")
        counts = np.asarray(state, dtype=np.int64)
        if n <= 0 or int(counts.sum()) != n:
            raise ValueError(f"the state holds {int(counts.sum())} reports, not n = {n}")
        matrix = transition_matrix(mechanism)
        smoothing = method == "ems"
        weight = smoothing_weight(n) if smoothing else 0.0
        point = em_fit(matrix, counts, n, smoothing, weight=weight,
                       tolerance=loglik_tolerance(n))
        leaves = point.theta[:, 0]
        extra: dict[str, Any] = {"iterations": int(point.iterations[0]),
                                 "converged": bool(point.converged[0]),
                                 "b": mechanism.b, "output_buckets": mechanism.output_buckets,
                                 "smoothing_weight": weight,
                                 "loglik_tolerance": loglik_tolerance(n), "intervals": INTERVALS}
        warnings = [] if point.converged[0] else [
            f"the {method.upper()} fit stopped at its cap of {MAX_ITERATIONS} iterations "
            "before converging"]
        warnings.append(NO_INTERVALS_WARNING)
        return FittedDistribution(
            mechanism=mechanism, n=n, leaves=leaves, method=METHODS[method],
            uncertainty=INTERVALS, variance_model="none: no standard errors or intervals",
            extra=extra, warnings=warnings, no_intervals=INTERVALS)
