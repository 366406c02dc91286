"""Central (ε, δ) of a shuffled batch: FMT's numerical clone-model bound, and the closed form.

Source: V. Feldman, A. McMillan, K. Talwar, "Hiding Among the Clones", FOCS 2021 (arXiv
2012.12803), Appendix E; MECHANISMS-2.md §5.1 and §5.3. The reduction: shuffling n reports of
one ε₀-LDP randomizer is (ε, δ)-DP if the pair of distributions below is. With
p = e^{−ε₀}, α = e^{ε₀} / (e^{ε₀} + 1) and C ~ Bin(n − 1, p) "clones" of the victim::

    given C = c, with A ~ Bin(c, 1/2):   P = A + 1 w.p. α, A otherwise
                                          Q = A + 1 w.p. 1 − α, A otherwise

and the released statistic is (C, P) against (C, Q). Q is P mirrored (k ↦ c + 1 − k), so the
hockey-stick divergence δ(ε) = Σ max(0, P − e^ε Q) is the same in both directions, and

    δ(ε) = Σ_c Pr[C = c] · D_c(ε),   D_c(ε) = Σ_k max(0, P_c(k) − e^ε Q_c(k)).

**Why the block sum is a rigorous upper bound.** (P_{c+1}, Q_{c+1}) is (P_c, Q_c) plus an
independent fair coin: the same post-processing of both, so D_{c+1} ≤ D_c (data processing).
Summing Pr[C ∈ block] · D_{first c of the block} over blocks therefore bounds δ from above;
the mass of C outside the summed window, and of A outside the summed terms, is bounded by
geometric tails and counted in full. P_c/Q_c falls with k (the likelihood ratio of A + 1
against A), so the positive part of P − e^ε Q is exactly the terms below a cutoff; terms are
summed as non-negative numbers, with no cancellation. Log-factorials come from Stirling's
series (exact table below 1024), whose rounding (≈10⁻⁷ relative at n = 10⁷) is covered by a
relative margin of 10⁻⁵ on δ. ε for a target δ is the smallest ε on a binary search whose
bound is ≤ δ, so the ε returned always satisfies the bound (never the midpoint below it).

This is our own implementation of the procedure, not the authors' code: it uses the exact
monotonicity in c (the authors' script takes the maximum over both block ends, and for one
direction uses the upper end twice), and it sums the whole window instead of stopping early.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from chorus_shared.shuffling import fmt_closed_form

__all__ = ["ASSUMPTIONS", "central_privacy", "clone_delta", "default_delta",
           "numerical_epsilon"]

SOURCE = ("Feldman, McMillan, Talwar, 'Hiding Among the Clones: A Simple and Nearly Optimal "
          "Analysis of Privacy Amplification by Shuffling', FOCS 2021 (arXiv 2012.12803)")

# MECHANISMS-2.md §5.3's conditions, in plain words: the central ε means nothing without them.
ASSUMPTIONS: tuple[str, ...] = (
    "Every person sends at most one report per campaign into a shuffled batch, and every "
    "report comes from the same randomizer (the campaign's mechanism at its ε₀).",
    "Nothing in a report identifies its sender: no user or device ID, no address, no precise "
    "time, no rare per-user cohort or seed (Chorus clients draw cohorts and seeds afresh for "
    "every report and never memoize, docs/threat-model.md).",
    "The shuffler is trusted: it permutes each batch uniformly at random with the OS CSPRNG, "
    "hides arrival order, times and addresses, never releases a batch smaller than its "
    "threshold, and does not collude with the collector.",
    "n is a lower bound on the honest reports in each batch: fake (sybil) reports from one "
    "party count towards the batch size but not towards the crowd that hides a person, so "
    "they reduce the real n.",
    "The guarantee is worst case over everyone else's data (the collector may know it), "
    "approximate (δ > 0), and central: against the shuffler itself only the local ε₀ holds.",
    "Several batches, or several reports of one person, compose: the bound is per batch.",
)

_MARGIN = 1e-5  # relative, on δ: covers the rounding of the log-factorials (module docstring)
_TABLE = np.array([math.lgamma(i + 1.0) for i in range(1024)])
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _log_factorial(x: np.ndarray) -> np.ndarray:
    """ln(x!) for a non-negative integer array: a table below 1024, Stirling's series above
    (its error after the x⁻⁵ term is below 1/(1680 x⁷), i.e. < 10⁻²⁴ here)."""
    x = np.asarray(x, dtype=np.int64)
    out = np.empty(x.shape, dtype=np.float64)
    small = x < _TABLE.size
    out[small] = _TABLE[x[small]]
    big = x[~small].astype(np.float64)
    inv = 1.0 / big
    inv2 = inv * inv
    out[~small] = (big * np.log(big) - big + 0.5 * np.log(big) + _HALF_LOG_2PI
                   + inv * (1 / 12 - inv2 * (1 / 360 - inv2 / 1260)))
    return out


def _log_binomial_pmf(n: int, k: np.ndarray, log_p: float, log_q: float) -> np.ndarray:
    k = np.asarray(k, dtype=np.int64)
    log_pmf: np.ndarray = (math.lgamma(n + 1.0) - _log_factorial(k) - _log_factorial(n - k)
                           + k * log_p + (n - k) * log_q)
    return log_pmf


def _clone_window(epsilon0: float, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Block starts and block masses of C ~ Bin(n − 1, e^{−ε₀}) over a window around its mode,
    and a bound on the mass outside the window."""
    trials = n - 1
    p = math.exp(-epsilon0)
    if trials == 0:
        return np.array([0]), np.array([1.0]), 0.0
    log_p, log_q = -epsilon0, math.log1p(-p)
    sd = math.sqrt(trials * p * (1 - p))
    mode = min(trials, math.floor(n * p))
    half = math.ceil(12 * sd + 12)
    lo, hi = max(0, mode - half), min(trials, mode + half)
    cs = np.arange(lo, hi + 1)
    pmf = np.exp(_log_binomial_pmf(trials, cs, log_p, log_q))
    outside = 0.0
    if lo > 0:  # Σ_{c<lo} pmf ≤ pmf(lo−1) / (1 − ρ), ρ the ratio pmf(c−1)/pmf(c) at c = lo−1
        edge = math.exp(float(_log_binomial_pmf(trials, np.array([lo - 1]), log_p, log_q)[0]))
        ratio = (lo - 1) * (1 - p) / ((trials - lo + 2) * p)
        outside += edge / (1 - ratio) if ratio < 1 else 1.0
    if hi < trials:  # Σ_{c>hi} pmf ≤ pmf(hi+1) / (1 − ρ'), ρ' = pmf(c+1)/pmf(c) at hi+1
        edge = math.exp(float(_log_binomial_pmf(trials, np.array([hi + 1]), log_p, log_q)[0]))
        ratio = (trials - hi - 1) * p / ((hi + 2) * (1 - p))
        outside += edge / (1 - ratio) if ratio < 1 else 1.0
    # Blocks of about sd/16: D_c barely changes across one, so the bound stays tight.
    step = max(1, math.floor(sd / 16))
    starts = np.arange(0, cs.size, step)
    masses = np.add.reduceat(pmf, starts)
    return cs[starts], masses, outside


def _divergence_given_clones(cs: np.ndarray, epsilon: float, epsilon0: float) -> np.ndarray:
    """D_c(ε) for each c in ``cs`` (an upper bound: omitted terms are bounded, not dropped)."""
    alpha = 1 / (1 + math.exp(-epsilon0))
    a = alpha - math.exp(epsilon) * (1 - alpha)  # weight of b(k) in P − e^ε Q
    b = math.exp(epsilon) * alpha - (1 - alpha)  # weight of b(k − 1)
    if a <= 0:  # ε ≥ ε₀: the ratio never exceeds e^ε
        return np.zeros(cs.shape)
    ratio_cut = a / b  # P/Q > e^ε  ⟺  k / (c + 1 − k) < a/b
    beta = ratio_cut / (1 + ratio_cut)
    # One past the cutoff, so rounding never drops a positive term (negative ones are clipped).
    top = np.minimum(np.floor(beta * (cs + 1)).astype(np.int64) + 1, cs)
    width = math.ceil(3 * math.sqrt(float(cs.max()) + 1)) + 10
    ks = top[:, None] - np.arange(width + 1)[None, :]
    c2 = np.broadcast_to(cs[:, None], ks.shape)
    valid = ks >= 0
    k_safe = np.where(valid, ks, 0)
    log_b = (_log_factorial(c2) - _log_factorial(k_safe) - _log_factorial(c2 - k_safe)
             - c2 * math.log(2))
    weight = a - b * k_safe / (c2 - k_safe + 1)
    terms = np.where(valid & (weight > 0), np.exp(log_b) * np.maximum(weight, 0.0), 0.0)
    total = terms.sum(axis=1)
    # Terms below the window: Σ_{k<kmin} a·b(k) ≤ a·b(kmin − 1) / (1 − ρ), ρ = b(k−1)/b(k)
    # at k = kmin − 1 (the ratios fall further down, and kmin − 1 < c/2 so ρ < 1).
    kmin = ks[:, -1]
    beyond = kmin >= 1
    if np.any(beyond):
        c_b, k_b = cs[beyond], kmin[beyond] - 1
        log_edge = (_log_factorial(c_b) - _log_factorial(k_b) - _log_factorial(c_b - k_b)
                    - c_b * math.log(2))
        rho = k_b / (c_b - k_b + 1)
        total[beyond] += a * np.exp(log_edge) / np.maximum(1 - rho, 1e-300)
    bounded: np.ndarray = np.minimum(total, 1.0)
    return bounded


def clone_delta(epsilon: float, epsilon0: float, n: int) -> float:
    """An upper bound on δ(ε) of n shuffled ε₀-LDP reports (the clone model, module docstring)."""
    if not (math.isfinite(epsilon0) and epsilon0 > 0) or n < 1 or epsilon < 0:
        raise ValueError("need epsilon0 > 0, n >= 1 and epsilon >= 0")
    if epsilon >= epsilon0:
        return 0.0
    starts, masses, outside = _clone_window(epsilon0, n)
    per_block = _divergence_given_clones(starts, epsilon, epsilon0)
    return min(1.0, float(np.dot(masses, per_block)) * (1 + _MARGIN) + outside)


@lru_cache(maxsize=1024)  # estimates ask for the same (ε₀, n, δ) again and again
def numerical_epsilon(epsilon0: float, n: int, delta: float, *,
                      tolerance: float = 1e-5) -> float:
    """The smallest ε found (to ``tolerance``) whose clone-model bound on δ is ≤ ``delta``.

    Never above ε₀ (where the bound is 0) nor above the closed form's ε where that one is
    already certified by the numerical bound.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    high = epsilon0
    closed = fmt_closed_form(epsilon0, n, delta)
    if closed < epsilon0 and clone_delta(closed, epsilon0, n) <= delta:
        high = closed  # start the search there: fewer steps
    low = 0.0
    for _ in range(64):  # bounded; 64 halvings reach any float tolerance
        if high - low <= tolerance:
            break
        middle = (low + high) / 2
        if clone_delta(middle, epsilon0, n) <= delta:
            high = middle
        else:
            low = middle
    return high


def default_delta(n: int) -> float:
    """δ = min(1/n², 10⁻⁶).

    §5.3: δ must be well below 1/n to mean anything, and 1/n² is its default: the chance that
    *anyone* in the batch falls in the δ part is then at most n·δ ≤ 1/n. The cap at 10⁻⁶
    keeps small batches (a test threshold of 50 would give 4·10⁻⁴) from quoting a δ so large
    that the guarantee is hollow.
    """
    return min(1.0 / (n * n), 1e-6)


def central_privacy(epsilon0: float, n: int, delta: float | None = None) -> dict[str, Any]:
    """The central (ε, δ) of a shuffled batch of n reports of an ε₀-LDP randomizer.

    ε is the smaller of FMT's numerical bound and its closed form, never above ε₀; ``bound``
    says which one gave it ("none" when shuffling gives no amplification at these values).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not (math.isfinite(epsilon0) and epsilon0 > 0):
        raise ValueError(f"epsilon0 must be a positive finite number, got {epsilon0!r}")
    chosen_delta = default_delta(n) if delta is None else delta
    closed = fmt_closed_form(epsilon0, n, chosen_delta)
    numerical = numerical_epsilon(epsilon0, n, chosen_delta)
    epsilon = min(numerical, closed, epsilon0)
    bound = ("none" if epsilon >= epsilon0
             else "numerical" if numerical <= closed else "closed-form")
    return {
        "epsilon": epsilon,
        "delta": chosen_delta,
        "delta_rule": "given" if delta is not None else "min(1/n², 1e-6)",
        "epsilon0": epsilon0,
        "n": n,
        "bound": bound,
        "numerical_epsilon": numerical,
        "closed_form_epsilon": closed,
        "source": SOURCE,
        "assumptions": list(ASSUMPTIONS),
    }


TABLE_SIZES = (1000, 5000, 10_000, 100_000, 1_000_000)
TABLE_EPSILONS = (0.5, 1.0, 2.0, 4.0, 6.0, 8.0)


def central_table(sizes: tuple[int, ...] = TABLE_SIZES,
                  epsilons: tuple[float, ...] = TABLE_EPSILONS) -> str:
    """A Markdown table of the central ε (default δ) for batch sizes × local ε₀."""
    lines = ["| n (δ) \\ ε₀ | " + " | ".join(f"{e:g}" for e in epsilons) + " |",
             "|---|" + "---|" * len(epsilons)]
    for n in sizes:
        cells = []
        for epsilon0 in epsilons:
            result = central_privacy(epsilon0, n)
            cell = f"{result['epsilon']:.3f}"
            if result["bound"] == "none":
                cell += " (none)"
            elif result["epsilon"] > 0.99 * epsilon0:
                cell += " (≈ none)"
            cells.append(cell)
        lines.append(f"| {n:,} ({default_delta(n):.0e}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# python -m chorus_collector.ingest.shuffling: the table of docs/shuffler.md
if __name__ == "__main__":
    print(central_table())
