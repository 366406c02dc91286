"""The record estimators' vectorized paths equal the straightforward computations they replace,
bit for bit (issue 33 item 14: the calibration tests run them thousands of times).

* ``conditional`` computes every cell's delta-method variance and its two dot products for a
  whole row at once; the reference here is the cell-by-cell loop it replaced.
* ``Table.project`` and ``Table.projected_variance`` against np.sum and argsort(argsort).
* ``MarginalsEstimator.design_variance`` (memoized per set table and per projection) against
  the uniform table projected afresh.

Random tables of many shapes, component counts and memory layouts (the conditional reads the
joint transposed for given = 1), rows that are not estimable included.
"""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Sequence

import numpy as np
import pytest

from chorus_collector.estimators.record import (
    MarginalsEstimator,
    Table,
    conditional,
    oracle_table,
)
from chorus_collector.results.estimates import Z95
from chorus_collector.results.record import Cell, Conditional
from chorus_shared import campaign_from_spec
from chorus_shared.mechanisms import Marginals


def _reference_conditional(table: Table, names: Sequence[str],
                           labels: Sequence[Sequence[str]], given: int) -> Conditional:
    """The cell-by-cell computation ``conditional`` replaced (same arithmetic, one cell at a
    time)."""
    f = table.f if given == 0 else table.f.T
    v = table.v if given == 0 else table.v.T
    u = table.u if given == 0 else np.transpose(table.u, (1, 0, 2))
    other = 1 - given
    cells, missing = [], []
    units = np.eye(f.shape[1])
    for g, g_label in enumerate(labels[given]):
        f_g, v_g, u_g = f[g], v[g], u[g]
        row_total = float(np.sum(f_g))
        row_u = np.sum(u_g, axis=0)
        total_variance = max(float(np.sum(v_g) - row_u @ row_u), 0.0)
        bound = row_total**2 - Z95**2 * total_variance
        if not (row_total > 0 and bound > 0):
            missing.append(g_label)
            cells += [Cell((g_label, w_label), math.nan, math.nan, math.nan, math.nan)
                      for w_label in labels[other]]
            continue
        for w, w_label in enumerate(labels[other]):
            share = float(f_g[w])
            ratio = share / row_total
            gradient = (units[w] - ratio) / row_total
            variance = float(np.sum(gradient**2 * v_g) - np.sum((gradient @ u_g) ** 2))
            u_w = u_g[w]
            share_variance = max(float(v_g[w] - u_w @ u_w), 0.0)
            covariance = float(v_g[w] - u_w @ row_u)
            middle = share * row_total - Z95**2 * covariance
            spread = math.sqrt(max(middle**2 - bound * (share**2 - Z95**2 * share_variance),
                                   0.0))
            cells.append(Cell((g_label, w_label), ratio, math.sqrt(max(variance, 0.0)),
                              (middle - spread) / bound, (middle + spread) / bound))
    return Conditional(of=names[other], given=names[given], cells=cells,
                       not_estimable=tuple(missing))


def _random_table(rng: np.random.Generator, shape: tuple[int, ...], components: int,
                  layout: int) -> Table:
    cells = math.prod(shape)
    f = rng.dirichlet(np.ones(cells)).reshape(shape) + rng.normal(0, 0.02, shape)
    v = rng.uniform(1e-6, 1e-2, shape)
    u = rng.normal(0, 3e-3, (*shape, components))
    if layout == 1:  # Fortran-ordered cells, as a transposed joint is
        f, v = np.asfortranarray(f), np.asfortranarray(v)
    elif layout == 2:  # a transposed view
        axes = tuple(reversed(range(len(shape))))
        f, v = np.ascontiguousarray(f.transpose(axes)).transpose(axes), v.T.copy().T
        u = np.ascontiguousarray(np.transpose(u, (*axes, len(shape)))).transpose(
            (*axes, len(shape)))
    return Table(f, v, u)


def test_conditional_equals_the_cell_by_cell_computation() -> None:
    rng = np.random.default_rng(33)
    checked = not_estimable = 0
    for trial in range(400):
        k1, k2 = (int(k) for k in rng.integers(2, 14, size=2))
        table = _random_table(rng, (k1, k2), int(rng.integers(1, 5)), trial % 3)
        if trial % 7 == 0:  # a row the interval cannot bound
            table.f[0] *= 1e-3
        if trial % 11 == 0:  # rows of total 0 and of a tiny one (computed, then skipped)
            table.f[0], table.f[:, 0] = 0.0, 1e-170
        labels = [[f"a{i}" for i in range(k1)], [f"b{i}" for i in range(k2)]]
        for given in (0, 1):
            fast = conditional(table, ("a", "b"), labels, given)
            slow = _reference_conditional(table, ("a", "b"), labels, given)
            # pickle: every float's bits (NaN cells included) and the labels
            assert pickle.dumps(fast) == pickle.dumps(slow), (trial, k1, k2, given)
            checked += 1
            not_estimable += len(fast.not_estimable)
    assert checked == 800 and not_estimable > 0


def _reference_project(table: Table, keep: Sequence[int]) -> Table:
    drop = tuple(a for a in range(table.f.ndim) if a not in keep)
    f, v, u = (np.sum(x, axis=drop) for x in (table.f, table.v, table.u))
    order = np.argsort(np.argsort(keep))
    return Table(np.transpose(f, order), np.transpose(v, order),
                 np.transpose(u, (*order, f.ndim)))


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 2), (4, 2, 5), (8, 9), (3, 10, 4)])
def test_projections_equal_np_sum_and_argsort(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * 100 + shape[0])
    for layout, components in itertools.product(range(3), (1, 2, 3)):
        table = _random_table(rng, shape, components, layout)
        for size in range(1, len(shape) + 1):
            for keep in itertools.permutations(range(len(shape)), size):
                fast, slow = table.project(keep), _reference_project(table, keep)
                for a, b in ((fast.f, slow.f), (fast.v, slow.v), (fast.u, slow.u)):
                    assert a.shape == b.shape and a.strides == b.strides
                    assert np.array_equal(a, b)
                assert np.array_equal(table.projected_variance(keep), slow.variance)


@pytest.mark.parametrize(("sizes", "order", "epsilon"), [
    ((3, 4, 2), 2, 1.0), ((2, 3, 2, 2), 3, 1.0), ((5, 3, 4), 3, 4.0), ((2, 2, 6), 2, 0.25)])
def test_design_variance_equals_the_uniform_table_projected_afresh(
        sizes: tuple[int, ...], order: int, epsilon: float) -> None:
    campaign = campaign_from_spec({
        "name": "fast-paths", "mechanism": "marginals", "epsilon": epsilon,
        "params": {"order": order}, "domain": {"kind": "record", "attributes": [
            {"name": f"a{i}", "values": [f"v{j}" for j in range(k)]}
            for i, k in enumerate(sizes)]}})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Marginals)
    estimator = MarginalsEstimator()
    for s, members in enumerate(mechanism.sets):
        oracle = mechanism.oracles[s]
        p, q = oracle.support_probabilities()
        shape = tuple(sizes[a] for a in members)
        cells = math.prod(shape)
        for reports in (1, 7, 999, 123_457):
            expected = np.full(cells, reports * (q + (p - q) / cells))
            table = oracle_table(oracle, expected, reports).reshaped(shape)
            # twice: computed, then remembered
            for _ in range(2):
                for size in range(1, order + 1):
                    for keep in itertools.permutations(range(order), size):
                        want = float(np.mean(_reference_project(table, keep).variance))
                        assert estimator.design_variance(
                            mechanism, s, reports, list(keep)) == want
        assert estimator.design_variance(mechanism, s, 0, [0]) == math.inf
