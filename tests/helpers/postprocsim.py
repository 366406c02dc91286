"""Paired simulations of the frequency oracles' post-processing options against the unbiased
answer (issue 34: "every post-processing option never worse than the unbiased answer on each
statistic it is offered for").

Each trial draws one aggregated state from the mechanism's exact output distribution under
i.i.d. sampling and reads it through the real ``finalize`` once per option, so the options'
errors are paired (same reports). The statistics compared are the answer's per-value
frequencies (a count is n × its frequency, so its MSE ratio is the same).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.common import frequency_estimate, pure_frequencies
from chorus_collector.estimators.consistency import KRRChannel
from chorus_shared import Campaign, campaign_from_spec


def populations(d: int) -> dict[str, np.ndarray]:
    """Skewed (Zipf 1.1), flat, and flat over a quarter of the categories (the rest 0)."""
    zipf = 1.0 / np.arange(1, d + 1) ** 1.1
    sparse = np.zeros(d)
    sparse[: d // 4] = 1.0
    return {"zipf": zipf / zipf.sum(), "flat": np.full(d, 1.0 / d),
            "zeros": sparse / sparse.sum()}


def campaign(mechanism: str, d: int, epsilon: float = 1.0) -> Campaign:
    return campaign_from_spec({"name": "pp", "mechanism": mechanism, "epsilon": epsilon,
                               "domain": [f"v{i}" for i in range(d)]})


def _subset_counts(c: Campaign, held: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Support counts of Subset Selection drawn user by user (vectorised): a user holding x
    reports x with probability p* and ω − 1 (else ω) uniform others, as the mechanism does."""
    mechanism = c.mechanism
    d, omega = mechanism.d, mechanism.omega  # type: ignore[attr-defined]
    p_star, _ = mechanism.support_probabilities()  # type: ignore[attr-defined]
    n = len(held)
    keys = rng.random((n, d))
    keys[np.arange(n), held] = 2.0  # never among the others unless forced in below
    others = np.argsort(keys, axis=1)
    include = rng.random(n) < p_star
    chosen = np.zeros((n, d), dtype=bool)
    rows = np.arange(n)[:, None]
    chosen[rows, others[:, : omega - 1]] = True  # ω − 1 others in any case
    last = others[:, omega - 1]
    chosen[np.arange(n), np.where(include, held, last)] = True
    return chosen.sum(axis=0).astype(np.float64)


def _dbitflip_state(c: Campaign, pi: np.ndarray, n: int, rng: np.random.Generator
                    ) -> np.ndarray:
    """dBitFlip's state [C_v, S_v] with b = 1, exactly: (held value, sampled bucket) pairs are
    Multinomial(n, π ⊗ uniform); a bucket's bit is 1 with p_bit for its holders, 1 − p_bit for
    the others."""
    mechanism = c.mechanism
    d = len(pi)
    assert mechanism.b == 1  # type: ignore[attr-defined]
    pairs = rng.multinomial(n, np.outer(pi, np.full(d, 1.0 / d)).ravel()).reshape(d, d)
    sampled = pairs.sum(axis=0)
    hot = np.diag(pairs)
    p_bit = mechanism.p_bit  # type: ignore[attr-defined]
    ones = rng.binomial(hot, p_bit) + rng.binomial(sampled - hot, 1 - p_bit)
    return np.concatenate([ones, sampled]).astype(np.int64)


def draw(c: Campaign, pi: np.ndarray, n: int, rng: np.random.Generator,
         options: Sequence[str]) -> dict[str, np.ndarray]:
    """One trial: each option's per-value frequencies, from one exactly drawn state."""
    mechanism = c.mechanism
    name = mechanism.name
    estimator = estimator_for(name)
    d = len(pi)
    if name in ("krr", "rr", "hr", "shist"):
        # The state is the output histogram: Multinomial(n, A·π), exactly.
        if name in ("krr", "rr"):
            p, q = mechanism.support_probabilities()  # type: ignore[attr-defined]
            output = KRRChannel(d, p, q).forward(pi)
        else:
            output = estimator.channel(mechanism).forward(pi)  # type: ignore[attr-defined]
        state = rng.multinomial(n, output / output.sum()).astype(np.int64)
        return {m: np.array([r.frequency for r in
                             estimator.finalize(c, n, state, Query(postprocessing=m)).rows])
                for m in options}
    if name == "dbitflip":
        state = _dbitflip_state(c, pi, n, rng)
        return {m: np.array([r.frequency for r in
                             estimator.finalize(c, n, state, Query(postprocessing=m)).rows])
                for m in options}
    held_counts = rng.multinomial(n, pi)
    if name == "ss":
        counts = _subset_counts(c, np.repeat(np.arange(d), held_counts), rng)
    else:
        # Independent support bits given the held value (unary encodings, basic RAPPOR; OLH
        # and BLH with an ideal hash): C_v = Bin(n_v, p*) + Bin(n − n_v, q*).
        p, q = mechanism.support_probabilities()  # type: ignore[attr-defined]
        counts = (rng.binomial(held_counts, p) + rng.binomial(n - held_counts, q)).astype(
            np.float64)
    p_star, q_star = mechanism.support_probabilities()  # type: ignore[attr-defined]
    frequency, std_error = pure_frequencies(counts, n, p_star, q_star)
    return {m: np.array([r.frequency for r in frequency_estimate(
        c, n, frequency, std_error, Query(postprocessing=m), {}, support_counts=counts).rows])
        for m in options}


def paired_errors(c: Campaign, pi: np.ndarray, n: int, trials: int, seed: int,
                  options: Sequence[str]) -> dict[str, np.ndarray]:
    """Squared errors, trials × values, for each option (paired: the same draws)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[np.ndarray]] = {m: [] for m in options}
    for _ in range(trials):
        answers = draw(c, pi, n, rng, options)
        for m in options:
            out[m].append((answers[m] - pi) ** 2)
    return {m: np.array(v) for m, v in out.items()}
