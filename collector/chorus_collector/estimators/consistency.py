"""Consistency post-processing for frequency estimates, chosen at query time.

The unbiased estimates may be negative and need not sum to one. Post-processing trades that
unbiasedness for lower error (Wang, Lopuhaä-Zwakenberg, Li, Škorić, Li, NDSS 2020;
MECHANISMS.md §11). It is free in privacy: a function of the released estimates.

* ``norm-sub``: set negatives to 0 and subtract the same amount from every positive estimate
  until they sum to 1 and none is negative (x_v = max(f̂_v − θ, 0));
* ``projection``: the Euclidean projection onto the probability simplex (sort-based; equal to
  Norm-Sub whenever Σ max(f̂, 0) ≥ 1, the usual case);
* ``ibu``: maximum likelihood by expectation–maximisation (iterative Bayesian update), for
  mechanisms whose output histogram is a sufficient statistic (k-RR, Hadamard Response,
  S-Hist). The channel A[y, v] = P(y | v) is a linear operator, never a dense matrix for the
  structured mechanisms: k-RR's costs O(d) per iteration, the Hadamard ones O(K log K);
* ``mle``: for the pure oracles whose output histogram is too large to keep (unary encoding,
  local hashing, Subset Selection, dBitFlip): the maximum on the simplex of the composite
  likelihood Σ_v [C_v ln λ_v + (n − C_v) ln(1 − λ_v)], λ_v = q* + (p* − q*)π_v — each support
  count C_v is exactly binomial(n, λ_v) under i.i.d. sampling, so this is maximum likelihood
  for every category's count taken on its own (solved exactly through its KKT conditions).

Post-processed estimates are biased, so their rows carry the unbiased estimate's standard
error and, as interval, the unbiased 95% interval intersected with [0, 1] (which keeps its
coverage, since every frequency lies in [0, 1]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["IBU_MAX_STEPS", "IBU_MAX_WORK", "IBU_TOLERANCE", "LABELS", "Channel",
           "DenseChannel", "IBUResult", "KRRChannel", "composite_mle", "ibu", "iteration_cost",
           "norm_mul", "norm_sub", "simplex_projection"]

LABELS = {
    "norm-sub": "norm-sub: negatives set to 0, the rest shifted to sum to 1 (biased)",
    "norm-mul": "norm-mul: negatives set to 0, the rest scaled to sum to 1 (biased)",
    "projection": "projection onto the probability simplex (biased)",
    "ibu": "ibu: maximum likelihood by expectation-maximisation (biased)",
    "mle": "mle: maximum composite likelihood of the support counts on the simplex (biased)",
}


def norm_sub(estimates: np.ndarray) -> np.ndarray:
    """Norm-Sub as defined by Wang et al. (iterated until no estimate is negative)."""
    x = np.asarray(estimates, dtype=np.float64).copy()
    for _ in range(len(x) + 1):
        x = np.clip(x, 0.0, None)
        positive = x > 0
        if not positive.any():
            return np.full(len(x), 1.0 / len(x))
        x[positive] += (1.0 - x.sum()) / positive.sum()
        if (x >= 0).all():
            return x
    return np.clip(x, 0.0, None)


def norm_mul(estimates: np.ndarray) -> np.ndarray:
    """Norm-Mul (Wang et al., NDSS 2020): negatives set to 0, the rest scaled to sum to 1;
    multi-freq-ldpy's default. Better than Norm-Sub for k-RR marginals at small ε by up to a
    few percent in MSE, worse for OUE's (benchmarks/records.py)."""
    x = np.clip(np.asarray(estimates, dtype=np.float64), 0.0, None)
    total = x.sum()
    return x / total if total > 0 else np.full(len(x), 1.0 / len(x))


def simplex_projection(estimates: np.ndarray) -> np.ndarray:
    """argmin ‖x − f̂‖ over {x ≥ 0, Σx = 1} (Duchi, Shalev-Shwartz, Singer, Chandra 2008)."""
    v = np.asarray(estimates, dtype=np.float64)
    ordered = np.sort(v)[::-1]
    cumulative = np.cumsum(ordered) - 1.0
    ranks = np.arange(1, len(v) + 1)
    last = np.flatnonzero(ordered - cumulative / ranks > 0)[-1]
    projected: np.ndarray = np.clip(v - cumulative[last] / (last + 1), 0.0, None)
    return projected


class Channel(Protocol):
    """A mechanism's channel A[y, v] = P(output y | input v), as a linear operator."""

    @property
    def inputs(self) -> int: ...

    def forward(self, pi: np.ndarray) -> np.ndarray:
        """A·π: the output distribution for the input distribution π."""

    def backward(self, ratio: np.ndarray) -> np.ndarray:
        """Aᵀ·r."""


@dataclass(frozen=True)
class DenseChannel:
    matrix: np.ndarray

    @property
    def inputs(self) -> int:
        return int(self.matrix.shape[1])

    def forward(self, pi: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.matrix @ pi
        return out

    def backward(self, ratio: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.matrix.T @ ratio
        return out


@dataclass(frozen=True)
class KRRChannel:
    """A = q·𝟙𝟙ᵀ + (p − q)·I over d symbols (symmetric), in O(d)."""

    d: int
    p: float
    q: float

    @property
    def inputs(self) -> int:
        return self.d

    def forward(self, pi: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.q * pi.sum() + (self.p - self.q) * pi
        return out

    backward = forward


@dataclass(frozen=True)
class IBUResult:
    """What EM returned, and how: the same data give the same answer on any machine."""

    pi: np.ndarray
    iterations: int  # EM steps taken (evaluations of the EM map)
    converged: bool  # the last step moved no share by more than the tolerance


IBU_TOLERANCE = 1e-10  # largest change of any share in one EM step
IBU_MAX_STEPS = 20_000  # a deterministic cap: never the wall clock
IBU_MAX_WORK = 4e9  # EM steps × the channel's cost per step: refuse beyond (seconds of work)


def iteration_cost(channel: Channel) -> float:
    """Operations of one EM step through ``channel`` (one forward and one backward)."""
    if isinstance(channel, DenseChannel):
        return float(channel.matrix.size)
    size = getattr(channel, "size", None)
    if isinstance(size, int) and size > 1:  # a fast Walsh–Hadamard transform
        return float(size * math.log2(size))
    return float(channel.inputs)


def ibu(counts: np.ndarray, channel: Channel | np.ndarray, max_steps: int = IBU_MAX_STEPS,
        tolerance: float = IBU_TOLERANCE) -> IBUResult:
    """EM for the input distribution π from output counts N_y and a channel A[y, v] = P(y|v),
    accelerated by SQUAREM (Varadhan & Roland, Scand. J. Stat. 2008).

    The EM map F(π) = π ⊙ Aᵀ(N / (A π)) / n stays on the simplex and never lowers the
    likelihood. SQUAREM extrapolates from two EM steps (π₁ = F(π₀), π₂ = F(π₁)) with the step
    length α = −‖r‖/‖v‖, r = π₁ − π₀, v = π₂ − π₁ − r, clips the extrapolated point back onto
    the simplex and takes one EM step from it; when that lowers the likelihood below π₂'s it
    keeps π₂, so every cycle is at least as good as two EM steps. It stops when an EM step
    moves no share by more than ``tolerance``, or after ``max_steps`` EM steps: a count, not a
    deadline, so the answer depends on the data only. The caller bounds the cost beforehand
    (``iteration_cost`` × ``max_steps``).
    """
    if isinstance(channel, np.ndarray):
        channel = DenseChannel(channel)
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    steps = 0
    used = counts > 0
    used_counts = counts[used]

    # Every point's A·π is computed once and passed along (the EM step from a point and its
    # likelihood need the same product, and the next cycle starts from the point whose
    # likelihood was just compared): the transform is most of an EM step's cost, and reusing
    # its result changes no number.
    def em(pi: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        nonlocal steps
        steps += 1
        ratio = np.divide(counts, predicted, out=np.zeros(counts.shape), where=predicted > 0)
        updated: np.ndarray = pi * channel.backward(ratio) / n
        return updated

    def loglik(predicted: np.ndarray) -> float:
        reached = predicted[used]
        if (reached <= 0).any():
            return -math.inf
        return float(used_counts @ np.log(reached))

    def norm(x: np.ndarray) -> float:  # np.linalg.norm's own sqrt(x·x), without its dispatch
        return math.sqrt(float(x.dot(x)))

    pi = np.full(channel.inputs, 1.0 / channel.inputs)
    predicted = channel.forward(pi)
    while steps + 3 <= max_steps:
        first = em(pi, predicted)
        if np.abs(first - pi).max() < tolerance:
            return IBUResult(first, steps, True)
        second = em(first, channel.forward(first))
        r = first - pi
        v = second - first - r
        norm_v = norm(v)
        candidate, candidate_predicted = second, None
        if norm_v > 0:
            alpha = min(-norm(r) / norm_v, -1.0)
            # Shares the jump would make negative sit on the boundary instead, where the
            # maximum of a sparse distribution lies.
            # (np.maximum is what np.clip with no upper bound calls, without its wrapper.)
            jumped = np.maximum(pi - 2 * alpha * r + alpha * alpha * v, 0.0)
            mass = jumped.sum()
            if mass > 0:
                start = jumped / mass
                start_predicted = channel.forward(start)
                if math.isfinite(loglik(start_predicted)):
                    stabilised = em(start, start_predicted)
                    stabilised_predicted = channel.forward(stabilised)
                    candidate_predicted = channel.forward(second)
                    if loglik(stabilised_predicted) >= loglik(candidate_predicted):
                        candidate, candidate_predicted = stabilised, stabilised_predicted
        pi = candidate
        predicted = channel.forward(pi) if candidate_predicted is None else candidate_predicted
    last = em(pi, predicted)
    return IBUResult(last, steps, bool(np.abs(last - pi).max() < tolerance))


def composite_mle(counts: np.ndarray, n: int | np.ndarray, p_star: float,
                  q_star: float) -> np.ndarray:
    """argmax over the simplex of Σ_v C_v ln λ_v + (n_v − C_v) ln(1 − λ_v), λ_v = q + (p − q)π_v,
    with n_v = ``n`` for every v, or per value when ``n`` is an array (dBitFlip: the reports
    that sampled v, given which C_v is Bin(n_v, λ_v)).

    The objective is separable and concave, so the KKT conditions give π_v(μ) = max(0,
    (λ_v(μ) − q)/(p − q)) with λ_v(μ) the root in (0, 1) of (p − q)(C_v/λ − (n_v − C_v)/(1 − λ))
    = μ, i.e. λ = 2aC/((μ + an) + √((μ + an)² − 4μaC)), a = p − q; Σ_v π_v(μ) is decreasing
    in μ, and a bisection finds the μ where it is 1.
    """
    trials = np.broadcast_to(np.asarray(n, dtype=np.float64), np.shape(counts))
    counts = np.clip(np.asarray(counts, dtype=np.float64), 0.0, trials)
    a = p_star - q_star
    if not trials.any() or not counts.any():  # no information: the symmetric optimum
        return np.full(len(counts), 1.0 / len(counts))

    def shares(mu: float) -> np.ndarray:
        b = mu + a * trials
        root = np.sqrt(np.maximum(b * b - 4 * mu * a * counts, 0.0))
        # The same root in its two cancellation-free forms, by the sign of b (a value no
        # report sampled has b = μ: its share is 0 for μ > 0).
        lam = np.where(b > 0, 2 * a * counts / np.where(b > 0, b + root, 1.0),
                       (b - root) / (2 * mu if mu != 0 else 1.0))
        pi: np.ndarray = np.maximum((lam - q_star) / a, 0.0)  # np.clip's own call
        return pi

    lo, hi = -1.0, 1.0
    while shares(lo).sum() < 1:
        lo *= 2
    while shares(hi).sum() > 1:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if shares(mid).sum() > 1 else (lo, mid)
    pi = shares((lo + hi) / 2)
    normalised: np.ndarray = pi / pi.sum()
    return normalised
