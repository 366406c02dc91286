"""The merged state of a hierarchical histogram drawn in bulk from the exact distribution of
its counts, for statistical tests that need thousands of runs (MECHANISMS-2.md §1.2).

Variance model: i.i.d. sampling. Each of n users draws its level uniformly and its value from
the population, independently, so the level sizes are multinomial and, given them, each
level's true node counts are multinomial on the level's shares; k-RR reports are then
multinomial per true node, and OUE support counts binomial per node (the bits are independent
given the value). tests/mechanisms/test_hierarchical.py checks this sampler against exact
theory and against the client's own randomizer.
"""

from __future__ import annotations

import numpy as np

from chorus_shared.mechanisms import KRR, HierarchicalHistogram


def level_shares(mechanism: HierarchicalHistogram, leaves: np.ndarray, level: int) -> np.ndarray:
    """Each node's share at ``level``, from the leaves' shares."""
    return leaves.reshape(mechanism.nodes(level), -1).sum(axis=1)


def sample_state(mechanism: HierarchicalHistogram, leaves: np.ndarray, n: int,
                 rng: np.random.Generator) -> np.ndarray:
    """The merged state of n i.i.d. users whose values fall in the leaves with ``leaves``."""
    height = mechanism.height
    per_level = rng.multinomial(n, np.full(height, 1.0 / height))
    state: list[int] = []
    for level in range(1, height + 1):
        oracle = mechanism.oracles[level - 1]
        d, reports = mechanism.nodes(level), int(per_level[level - 1])
        true = rng.multinomial(reports, level_shares(mechanism, leaves, level))
        p, q = oracle.support_probabilities()
        if isinstance(oracle, KRR):
            rows = np.full((d, d), q)
            np.fill_diagonal(rows, p)
            counts = rng.multinomial(true, rows).sum(axis=0)
        else:
            counts = rng.binomial(true, p) + rng.binomial(reports - true, q)
        state += [reports, *counts.tolist()]
    return np.array(state, dtype=np.int64)
