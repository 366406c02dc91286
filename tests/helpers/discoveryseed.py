"""A small discovery campaign (PEM over strings of up to 3 bytes) with simulated reports in
a few hourly buckets: what the tests of the analyst's surfaces (HTTP, CLI, dashboard) look at.

The schedule is shortened so that a walk takes milliseconds (prefixes of 8, 16 and 24 bits,
64 hash functions), and ε = 4 with 20,000 reports per bucket puts every true value far
above the detection threshold in each bucket alone: a PEM group (4 of them) holds ~5,000
reports per bucket, and OLH's variance there is (V₀ + f·(1 − p − 1/k)/(p − 1/k))/5,000 with
V₀ ≈ 0.076 at k = 56, so the rarest true value (f = 0.10) has a standard error of ≈ 0.006
and lies ~17 of them from 0: neither its discovery nor its flag can fail by chance.
``WORDS`` holds a value with a tab (printed escaped) and one of 2 UTF-8 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import estimator_for
from chorus_collector.storage import Storage, StoredCampaign
from helpers.support import NOW

__all__ = ["HOUR", "SPEC", "T0", "WORDS", "WORD_SHARES", "seed_folded"]

HOUR = 3600
#: The first of the seeded hourly buckets; the last one holds NOW (the fake clock's time).
T0 = int(NOW) - 2 * HOUR
WORDS = ["cat", "dog", "é", "a\tb", "zoo"]
WORD_SHARES = [0.3, 0.25, 0.2, 0.15, 0.1]

SPEC: dict[str, Any] = {
    "name": "searches", "mechanism": "pem", "epsilon": 4.0,
    "domain": {"kind": "strings", "max_bytes": 3},
    "params": {"top": 8, "keep": 16, "first_bits": 8, "cohorts": 64},
    "time_precision": HOUR, "min_batch_size": 100,
    "privacy": {"budget": 1e6, "max_reports": 1_000_000},
    "description": "Search terms of up to 3 bytes, discovered without a candidate list"}


def seed_folded(storage: Storage, stored: StoredCampaign, *, buckets: int = 3,
                per_bucket: int = 20_000, shares: Sequence[Sequence[float]] | None = None,
                seed: int = 20261216) -> list[Mapping[str, float]]:
    """Simulated reports of ``WORDS`` in ``buckets`` hourly buckets from T0, folded into the
    per-bucket statistics as the aggregation job stores them; ``shares[i]`` is bucket i's
    distribution (default ``WORD_SHARES`` in every bucket). Returns each bucket's truth."""
    rng = np.random.default_rng(seed)
    mechanism = stored.campaign.mechanism
    estimator = estimator_for(mechanism.name)
    encoded = [mechanism.encode(word) for word in WORDS]
    partials, truths = {}, []
    for bucket in range(buckets):
        p = WORD_SHARES if shares is None else shares[bucket]
        draws = rng.choice(len(WORDS), size=per_bucket, p=p)
        payloads = simulate(mechanism, [encoded[i] for i in draws], rng)
        partials[(stored.id, T0 + bucket * HOUR)] = (per_bucket,
                                                      estimator.map(mechanism, payloads))
        counts = np.bincount(draws, minlength=len(WORDS))
        truths.append({word: int(c) / per_bucket for word, c in zip(WORDS, counts,
                                                                   strict=True)})
    assert storage.commit_fold(0, 0, partials, NOW, moves=storage.fold_status().moves)
    return truths
