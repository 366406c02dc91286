"""Helpers that several estimators share: frequency and mean rows, bit unpacking, the
Walsh–Hadamard transform. Each mechanism's own estimator lives in the module named like the
mechanism's module in ``chorus_shared.mechanisms``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from chorus_collector.estimators.base import Query, QueryError
from chorus_collector.estimators.consistency import (
    IBU_MAX_STEPS,
    IBU_MAX_WORK,
    IBU_TOLERANCE,
    LABELS,
    Channel,
    composite_mle,
    ibu,
    iteration_cost,
    norm_sub,
    simplex_projection,
)
from chorus_collector.results.estimates import FrequencyEstimate, MeanEstimate, frequency_rows
from chorus_shared.campaign import Campaign
from chorus_shared.domain import NumericRange
from chorus_shared.errors import ValueDomainError
from chorus_shared.mechanisms import Mechanism

VARIANCE_MODEL_IID = "iid-sampling: plug-in binomial variance of the reported shares"


class BinomialCounts(NamedTuple):
    """Counts C_v ~ Bin(trials_v, q + (p − q)·π_v), independent across v to first order: the
    composite likelihood that ``postprocessing=mle`` maximises on the simplex."""

    counts: np.ndarray
    trials: int | np.ndarray
    p: float
    q: float


def pure_frequencies(support_counts: np.ndarray, n: int, p_star: float,
                     q_star: float) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased frequencies and their standard errors for any pure protocol (§0.1)."""
    share = support_counts / n
    frequency = (share - q_star) / (p_star - q_star)
    # The true support rate q* + (p* − q*)·f lies in [q*, p*]; clipping the plug-in there keeps
    # the variance from collapsing to 0 when a category was never (or always) reported.
    rate = np.clip(share, q_star, p_star)
    std_error = np.sqrt(rate * (1 - rate) / n) / (p_star - q_star)
    return frequency, std_error


def fixed_population_variance(n: int, frequency: float, p_star: float, q_star: float) -> float:
    """Exact Var[ĉ_v] (counts) when only the mechanism is random (model F, §0.1)."""
    gap = p_star - q_star
    return n * q_star * (1 - q_star) / gap**2 + n * frequency * (1 - p_star - q_star) / gap


def frequency_estimate(campaign: Campaign, n: int, frequency: np.ndarray,
                       std_error: np.ndarray, query: Query, extra: dict[str, Any],
                       channel: Callable[[], Channel] | None = None,
                       output_counts: np.ndarray | None = None,
                       support_counts: np.ndarray | None = None,
                       likelihood: BinomialCounts | None = None) -> FrequencyEstimate:
    """Rows for categorical estimates, post-processed as the query asks. ``mle`` maximises
    the composite likelihood of ``likelihood`` where the estimator gives one (dBitFlip's,
    given the sampled buckets), else of the support counts, Bin(n, q* + (p* − q*)π_v)."""
    mechanism = campaign.mechanism
    labels = mechanism.domain.values  # type: ignore[union-attr]
    rows = frequency_rows(labels, frequency, std_error, n)
    method = query.postprocessing
    two = False
    if method != "none":
        if method == "ibu":
            assert channel is not None and output_counts is not None
            operator = channel()
            work = iteration_cost(operator) * IBU_MAX_STEPS
            if work > IBU_MAX_WORK:
                raise QueryError("query-too-large",
                                 f"ibu on this campaign could take {work:.2g} operations "
                                 f"({IBU_MAX_STEPS} EM steps); ask for norm-sub or projection")
            fitted = ibu(output_counts, operator)
            adjusted = fitted.pi
            extra = {**extra, "ibu_iterations": fitted.iterations,
                     "ibu_converged": fitted.converged, "ibu_tolerance": IBU_TOLERANCE}
        elif method == "mle":
            if likelihood is None:
                p_star, q_star = mechanism.support_probabilities()  # type: ignore[attr-defined]
                counts = support_counts if support_counts is not None else \
                    n * (q_star + (p_star - q_star) * frequency)
                likelihood = BinomialCounts(counts, n, p_star, q_star)
            adjusted = composite_mle(likelihood.counts, likelihood.trials, likelihood.p,
                                     likelihood.q)
        elif method == "norm-sub":
            adjusted = norm_sub(frequency)
        else:
            adjusted = simplex_projection(frequency)
        rows = [row.postprocessed(float(x), n) for row, x in zip(rows, adjusted, strict=True)]
        # Two categories: the options only clip both shares into [0, 1], which brings each
        # closer to the truth, so nothing is harmed (and no warning is owed).
        two = len(frequency) == 2
        extra = {**extra, "unbiased_frequencies": [float(f) for f in frequency],
                 "postprocessed": ["frequencies", "counts"],
                 "postprocessing_improves": POSTPROCESSING_IMPROVES,
                 "postprocessing_may_harm": "nothing (two categories: both shares are only "
                                            "clipped into [0, 1])" if two
                 else POSTPROCESSING_MAY_HARM}
    return FrequencyEstimate(
        campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
        rows=rows, variance_model=VARIANCE_MODEL_IID, window=query.window,
        postprocessing=LABELS.get(method, "none (unbiased)"), extra=extra,
        warnings=[postprocessing_warning(method)] if method != "none" and not two else [],
    )


# What every consistency option does to the answer's statistics, measured paired against the
# unbiased answer (tests/mechanisms/test_postprocessing_mse.py; docs/mechanisms/frequency.md):
# the error summed over all values never rose (MSE ratio 0.20–1.00, 1.00 where no estimate
# needed clipping), and the absent values' fell, but one value's
# own error rose by up to 1.43× where many categories are empty, since the mass clipped from
# them is taken from the values that are present. So the options stay on the frequencies, and
# the answer says which statistic they are for.
POSTPROCESSING_IMPROVES = "the error summed over all values (the distribution as a whole) " \
                          "and the frequencies of rare or absent values"
POSTPROCESSING_MAY_HARM = "the frequency and count of a single common value (MSE up to 1.5x " \
                          "the unbiased one's where many categories are empty)"


def postprocessing_warning(method: str) -> str:
    return (f"{method}: lowers {POSTPROCESSING_IMPROVES}, but may raise the error of "
            f"{POSTPROCESSING_MAY_HARM}; for one value's share read "
            "extra.unbiased_frequencies, which is unbiased")


MEAN_VARIANCE_MODEL = "iid-sampling: sample variance of the debiased reports"


def mean_estimate(campaign: Campaign, n: int, mean_t: float, se_t: float, query: Query,
                  **extra: Any) -> MeanEstimate:
    """A mean of debiased reports t* ∈ [−1, 1] scale, mapped back to [lo, hi]."""
    mechanism = campaign.mechanism
    domain = mechanism.domain
    assert isinstance(domain, NumericRange)
    scale = (domain.hi - domain.lo) / 2
    return MeanEstimate.from_mean(
        mean=domain.lo + scale * (mean_t + 1), std_error=scale * se_t, campaign=campaign.name,
        mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
        variance_model=MEAN_VARIANCE_MODEL, window=query.window,
        extra={"clipping": f"values were clipped to [{domain.lo:g}, {domain.hi:g}] on the "
                           "device", **{k: scale * v for k, v in extra.items()}},
    )


def sample_std_error(total: float, squares: float, n: int) -> float:
    """SE of the mean of n values from their sum and sum of squares (sample variance)."""
    if n <= 1:
        return math.inf
    return math.sqrt(max(squares - total * total / n, 0.0) / (n - 1) / n)


def unpack_bits(hex_strings: Sequence[str], k: int) -> np.ndarray:
    """Hex report bits → (n, k) uint8 matrix, column i = bit i (1 << i)."""
    width = (k + 7) // 8
    raw = b"".join(bytes.fromhex(h.rjust(2 * width, "0")) for h in hex_strings)
    big_endian = np.frombuffer(raw, dtype=np.uint8).reshape(len(hex_strings), width)
    return np.unpackbits(big_endian[:, ::-1], axis=1, bitorder="little")[:, :k]


def grouped_sums(groups: np.ndarray, rows: np.ndarray, size: int) -> np.ndarray:
    """Σ of the rows of each group (groups[i] ∈ [0, size)), as a (size, columns) int64 table.

    One stable sort, then a contiguous column sum per group present: several times faster
    than ``np.add.at`` over the rows.
    """
    table = np.zeros((size, rows.shape[1]), dtype=np.int64)
    if not len(groups):
        return table
    order = np.argsort(groups, kind="stable")
    ordered = rows[order]
    counts = np.bincount(groups, minlength=size)
    ends = np.cumsum(counts)
    for group in np.flatnonzero(counts):
        table[group] = ordered[ends[group] - counts[group]:ends[group]].sum(axis=0,
                                                                            dtype=np.int64)
    return table


def walsh_hadamard(values: np.ndarray) -> np.ndarray:
    """H_K · values for the Sylvester Hadamard matrix, in O(K log K); along the last axis
    (a 2-D array is transformed row by row, all rows at once).

    A vector (IBU runs two transforms of one an EM step, thousands of steps a fit) goes
    through the constant-geometry form of the butterflies: every stage adds and subtracts
    the pairs (2i, 2i + 1) into positions i and i + K/2 of a second buffer. Its first stage
    pairs the indices that differ in bit 0, and the halving rotates the next bit down, so
    stage s pairs those that differ in bit s, as the in-place butterflies do: the same sums
    (top + bottom, top − bottom) in the same order, and after log₂K rotations the natural
    order again. Two ufunc calls a stage on views made once, into buffers made once: about
    1.2× faster than a gather and a multiply-add per stage at K = 64, 2–3× from K = 128."""
    if np.ndim(values) == 1:
        front = np.array(values, dtype=np.float64)  # a copy: the caller's is never written
        size = len(front)
        half = size // 2
        back = np.empty(size)
        stages = size.bit_length() - 1
        views = ((front[0::2], front[1::2], back[:half], back[half:]),
                 (back[0::2], back[1::2], front[:half], front[half:]))
        for stage in range(stages):
            even, odd, low, high = views[stage & 1]
            np.add(even, odd, low)
            np.subtract(even, odd, high)
        return back if stages & 1 else front
    out = values.astype(np.float64).copy()
    rows, size = out.shape
    half = 1
    while half < size:
        view = out.reshape(rows, -1, 2, half)
        top, bottom = view[:, :, 0, :].copy(), view[:, :, 1, :].copy()
        view[:, :, 0, :], view[:, :, 1, :] = top + bottom, top - bottom
        half *= 2
    return out


def check_candidates(mechanism: Mechanism, candidates: Sequence[str]) -> list[str]:
    """The query's candidate strings, each encodable and listed once (open-string estimates)."""
    if not candidates:
        raise QueryError("candidates-required",
                         "estimates over open strings need a candidate list "
                         "(candidate=... or a JSON body with \"candidates\")")
    seen: set[str] = set()
    for candidate in candidates:
        try:
            mechanism.encode(candidate)
        except ValueDomainError as error:
            raise QueryError("invalid-candidate", f"candidate {candidate!r}: {error}") from None
        if candidate in seen:
            raise QueryError("invalid-candidate", f"candidate {candidate!r} is listed twice")
        seen.add(candidate)
    return list(candidates)
