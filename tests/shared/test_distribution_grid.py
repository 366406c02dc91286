"""The protocol side of distribution campaigns: the grid, clipping on the device, the config
rules and the Square Wave / hierarchical-histogram parameters against MECHANISMS-2.md §1."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from chorus_shared import CampaignError, ValueDomainError, campaign_from_spec
from chorus_shared.mechanisms import HierarchicalHistogram, SquareWave
from chorus_shared.mechanisms.hierarchical import level_oracle
from chorus_shared.mechanisms.square_wave import square_wave_b


def _campaign(mechanism: str, lo: float, hi: float, **params: object) -> object:
    return campaign_from_spec({"name": "d", "mechanism": mechanism, "epsilon": 1.0,
                               "domain": {"kind": "numeric", "lo": lo, "hi": hi},
                               "params": params})


def test_values_are_clipped_and_mapped_on_the_device() -> None:
    linear = _campaign("sw", 0, 10).mechanism  # type: ignore[attr-defined]
    assert [linear.encode(x) for x in (-5, 0, 2.5, 10, 1e9)] == [0.0, 0.0, 0.25, 1.0, 1.0]
    log = _campaign("hh", 1, 1000, scale="log").mechanism  # type: ignore[attr-defined]
    assert log.encode(0.001) == 0.0 and log.encode(5000) == 1.0
    assert log.encode(10) == pytest.approx(1 / 3) and log.encode(100) == pytest.approx(2 / 3)
    for bad in (math.nan, math.inf, "3", True, None):
        with pytest.raises(ValueDomainError):
            log.encode(bad)


def test_edges_follow_the_scale_and_invert_the_mapping() -> None:
    log = _campaign("hh", 1, 1000, scale="log", buckets=16).mechanism  # type: ignore
    edges = log.edges()
    assert len(edges) == 17 and edges[0] == pytest.approx(1) and edges[-1] == pytest.approx(1000)
    ratios = {round(b / a, 9) for a, b in itertools.pairwise(edges)}
    assert len(ratios) == 1  # equal buckets on the log scale
    for u in (0.0, 0.3, 0.77, 1.0):
        assert log.to_unit(log.from_unit(u)) == pytest.approx(u)


@pytest.mark.parametrize(("params", "message"), [
    ({"scale": "sqrt"}, "scale must be one of"),
    ({"buckets": 100}, "power of the branching factor"),
    ({"branching": 4, "buckets": 32}, "power of the branching factor"),
    ({"bins": 8}, "unknown parameters"),
])
def test_bad_hierarchy_configs_are_refused_with_a_reason(params: dict[str, object],
                                                         message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        _campaign("hh", 1, 100, **params)


def test_a_log_scale_needs_a_positive_lower_bound() -> None:
    with pytest.raises(CampaignError, match=r"log scale needs domain\.lo > 0"):
        _campaign("sw", 0, 100, scale="log")


def test_the_config_records_the_grid_and_its_defaults() -> None:
    config = _campaign("hh", 0, 1).public_config()  # type: ignore[attr-defined]
    assert config["params"] == {"branching": 4, "buckets": 256, "scale": "linear"}
    assert config["derived"]["estimates"] == "distribution"
    assert config["derived"]["level_oracles"] == ["krr", "oue", "oue", "oue"]
    sw = _campaign("sw", 0, 1, buckets=64).config  # type: ignore[attr-defined]
    assert sw["params"] == {"buckets": 64, "output_buckets": 64, "scale": "linear"}


@pytest.mark.parametrize(("epsilon", "b"), [(0.1, 0.4678), (0.5, 0.3582), (1, 0.2561),
                                            (2, 0.1293), (4, 0.0304), (8, 0.0012)])
def test_square_wave_b_matches_the_reference_table(epsilon: float, b: float) -> None:
    assert square_wave_b(epsilon) == pytest.approx(b, abs=5e-5)


@pytest.mark.parametrize("epsilon", [1e-4, 0.01, 0.5, 3.0, 20.0])
def test_square_wave_density_is_normalised_with_ratio_e_to_the_epsilon(epsilon: float) -> None:
    mechanism = _campaign("sw", 0, 1).mechanism  # type: ignore[attr-defined]
    mechanism = SquareWave(domain=mechanism.domain, epsilon=epsilon, buckets=8,
                           output_buckets=8)
    assert 0 < mechanism.b <= 0.5
    assert 2 * mechanism.b * mechanism.p + mechanism.q == pytest.approx(1, rel=1e-12)
    assert mechanism.p / mechanism.q == pytest.approx(math.exp(epsilon), rel=1e-12)


def test_square_wave_sampler_matches_the_three_piece_cdf() -> None:
    """MECHANISMS-2.md §1.5 check 2, on the fine output grid: the bucket frequencies of 10⁵
    draws for v = 0.3 against the exact bucket probabilities (a χ² goodness of fit)."""
    base = _campaign("sw", 0, 1).mechanism  # type: ignore[attr-defined]
    mechanism = SquareWave(domain=base.domain, epsilon=1.0, buckets=8, output_buckets=64)
    rng, draws = random.Random(11), 100_000
    counts = Counter(mechanism.randomize(0.3, rng) for _ in range(draws))
    statistic = sum((counts[j] - draws * mechanism.output_probability(j, 0.3)) ** 2
                    / (draws * mechanism.output_probability(j, 0.3)) for j in range(64))
    # 63 degrees of freedom: mean 63, sd √126 ≈ 11.2; 6 sd is a 1e-6-level false alarm.
    assert statistic < 63 + 6 * math.sqrt(126)


def test_hierarchy_levels_use_krr_below_3e_eps_plus_2_nodes_and_oue_above() -> None:
    mechanism = _campaign("hh", 0, 1).mechanism  # type: ignore[attr-defined]
    assert isinstance(mechanism, HierarchicalHistogram)
    assert mechanism.height == 4
    assert [o.name for o in mechanism.oracles] == ["krr", "oue", "oue", "oue"]
    assert [level_oracle(n, 1.0) for n in (4, 10, 11)] == ["krr", "krr", "oue"]


def test_hierarchy_reports_the_ancestor_of_the_leaf() -> None:
    mechanism = _campaign("hh", 0, 1, branching=2, buckets=8).mechanism  # type: ignore
    assert [mechanism.node_of(0.7, level) for level in (1, 2, 3)] == [1, 2, 5]
    assert [mechanism.node_of(1.0, level) for level in (1, 2, 3)] == [1, 3, 7]


def test_every_level_is_drawn_equally_often_whatever_the_value() -> None:
    """The level is public and must not depend on the value: each value's level counts
    against the uniform 1/3, a χ² goodness of fit over the 6 cells."""
    mechanism = _campaign("hh", 0, 1, branching=2, buckets=8).mechanism  # type: ignore
    rng = random.Random(3)
    table = [[0] * 3 for _ in range(2)]
    for row, value in enumerate((0.05, 0.95)):
        for _ in range(30_000):
            table[row][mechanism.randomize(value, rng)["level"] - 1] += 1
    expected = 30_000 / 3
    statistic = sum((c - expected) ** 2 / expected for row in table for c in row)
    assert statistic < 30  # χ²(6) exceeds 30 with probability 4e-5


def test_the_cdf_is_the_isotonic_fit_not_a_running_maximum() -> None:
    """A high outlier must not lift every later point (that biases upper quantiles low)."""
    import numpy as np

    from chorus_collector.estimators.distribution import _isotonic, _monotone_cdf

    assert _isotonic(np.array([1.0, 3.0, 2.0, 4.0])).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert _isotonic(np.array([0.5, 0.4, 0.3, 0.9])).tolist() == pytest.approx([0.4] * 3 + [0.9])
    rng = np.random.default_rng(4)
    for _ in range(50):  # the least-squares property against every monotone perturbation
        values = rng.normal(size=12).cumsum() * 0.1
        fitted = _isotonic(values)
        assert np.all(np.diff(fitted) >= -1e-12)
        best = float(((fitted - values) ** 2).sum())
        for _ in range(20):
            other = np.sort(fitted + rng.normal(scale=0.05, size=12))
            assert ((other - values) ** 2).sum() >= best - 1e-12
    assert _monotone_cdf(np.array([[-0.1, 0.6, 0.5, 1.2]])).tolist() == [[0.0, 0.55, 0.55, 1.0]]
