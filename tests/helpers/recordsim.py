"""Exact, cheap draws of a record campaign's estimator state (model S: n records drawn i.i.d.
from a joint distribution over the record's cells, one report each).

Thousands of repetitions through the per-report simulator and ``map`` would take minutes;
these draws take the counts the state holds from their exact distribution instead:

* the records' cell counts are Multinomial(n, π);
* the uniform draw of an attribute (smp, rsfd) or of a marginal (marginals) splits each cell's
  count multinomially over the groups, independently of the record;
* within a group, k-RR's report counts are Σ_v Multinomial(c_v, row v of its channel), and
  OUE's bit counts are Binomial(c_v, p) + Binomial(n_g − c_v, q), independent across bits,
  because one user's bits are independent *given its value* (so the values are drawn first);
* spl's oracles run independently given the record, so each attribute's counts follow from
  that attribute's value counts alone; rsfd's fake values are uniform, independent of all.

So the state has the law of map(simulate(records)) exactly; tests/mechanisms/test_records.py
also runs the real simulator and ``map`` on a smaller scale.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from chorus_shared.mechanisms import (
    KRR,
    OUE,
    Marginals,
    PureOracle,
    RandomSamplingFakeData,
    RecordMechanism,
    SampledAttribute,
    SplitBudget,
)


def oracle_counts(oracle: PureOracle, values: np.ndarray, rng: np.random.Generator
                  ) -> np.ndarray:
    """The support counts of one report per user through ``oracle``, for users whose true
    values have counts ``values``."""
    values = np.asarray(values, dtype=np.int64)
    p, q = oracle.support_probabilities()
    if isinstance(oracle, KRR):
        k = len(values)
        stay = rng.binomial(values, p)
        # The others move to a uniform other value: q = (1 − p)/(k − 1) each.
        moved = rng.multinomial(values - stay, np.full(k - 1, 1.0 / (k - 1)))
        # moved[v] lists the other values' counts in order: summed into the values they
        # went to (integer counts, so exactly as a k × k spread summed over its rows).
        arrived = np.bincount(_others(k), weights=moved.ravel(), minlength=k)
        out: np.ndarray = stay + arrived.astype(np.int64)
        return out
    assert isinstance(oracle, OUE)
    bits: np.ndarray = rng.binomial(values, p) + rng.binomial(values.sum() - values, q)
    return bits


@functools.cache
def _others(k: int) -> np.ndarray:
    """Row-major, the columns of a k × k table's off-diagonal cells."""
    columns: np.ndarray = np.nonzero(~np.eye(k, dtype=bool))[1]
    return columns


def project(cells: np.ndarray, attributes: Sequence[int]) -> np.ndarray:
    """Counts over ``attributes`` (ascending), the others summed out, row-major as
    ``Marginals.cell`` numbers a set's cells."""
    drop = tuple(a for a in range(cells.ndim) if a not in attributes)
    summed: np.ndarray = cells.sum(axis=drop)
    return summed


def split(cells: np.ndarray, groups: int, rng: np.random.Generator) -> np.ndarray:
    """Each cell's count spread uniformly over ``groups``: shape (groups, *cells.shape)."""
    spread = rng.multinomial(cells.ravel(), np.full(groups, 1.0 / groups))
    out: np.ndarray = spread.T.reshape((groups, *cells.shape))
    return out


def draw_state(mechanism: RecordMechanism, joint: np.ndarray, n: int,
               rng: np.random.Generator) -> np.ndarray:
    """The estimator state (``map``'s layout) of n reports from records drawn from ``joint``
    (an array of the record's shape, summing to 1)."""
    sizes = mechanism.domain.sizes
    cells = rng.multinomial(n, joint.ravel()).reshape(sizes)
    blocks: list[np.ndarray] = []
    if isinstance(mechanism, SplitBudget):
        blocks = [oracle_counts(o, project(cells, [j]), rng)
                  for j, o in enumerate(mechanism.oracles)]
    elif isinstance(mechanism, SampledAttribute):
        for j, (oracle, group) in enumerate(zip(mechanism.oracles, split(cells, len(sizes), rng),
                                                strict=True)):
            blocks += [np.array([group.sum()]), oracle_counts(oracle, project(group, [j]), rng)]
    elif isinstance(mechanism, RandomSamplingFakeData):
        totals = [np.zeros(k, dtype=np.int64) for k in sizes]
        for j, group in enumerate(split(cells, len(sizes), rng)):
            for i, k in enumerate(sizes):
                totals[i] += oracle_counts(mechanism.attribute_oracles[i], project(group, [i]),
                                           rng) if i == j \
                    else rng.multinomial(group.sum(), np.full(k, 1.0 / k))
        blocks = totals
    elif isinstance(mechanism, Marginals):
        for members, oracle, group in zip(mechanism.sets, mechanism.oracles,
                                          split(cells, len(mechanism.sets), rng), strict=True):
            blocks += [np.array([group.sum()]),
                       oracle_counts(oracle, project(group, members).ravel(), rng)]
    else:
        raise TypeError(f"no state sampler for {mechanism.name}")
    return np.concatenate(blocks).astype(np.int64)
