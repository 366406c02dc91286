"""The vectorized simulator draws exactly the distribution the client's randomizer draws:
the same χ² goodness-of-fit check against the exact output table (α = 1e-6)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from chorus_collector.design.simulate import SIMULATORS, simulate
from chorus_shared import Campaign
from helpers.examples import example_campaigns
from helpers.statcheck import assert_goodness_of_fit, payload_key, privacy_inputs

CAMPAIGNS = [c for c in example_campaigns() if c.mechanism.name in SIMULATORS]


def test_every_simulator_is_exercised() -> None:
    assert {c.mechanism.name for c in CAMPAIGNS} == set(SIMULATORS)


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=lambda c: c.name)
def test_simulator_samples_the_declared_distribution(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    rng = np.random.default_rng(21)
    draws = 40_000
    outputs = list(mechanism.outputs())
    for x in privacy_inputs(campaign)[:2]:
        observed = Counter(payload_key(y) for y in simulate(mechanism, [x] * draws, rng))
        expected: dict[Any, float] = {payload_key(y): mechanism.output_probability(y, x) * draws
                                      for y in outputs}
        assert_goodness_of_fit(observed, expected, f"for x={x!r}")


DISTRIBUTIONS = [c for c in CAMPAIGNS if c.mechanism.name in ("sw", "hh")]


@pytest.mark.parametrize("campaign", DISTRIBUTIONS, ids=lambda c: c.name)
def test_distribution_simulators_sample_every_input(campaign: Campaign) -> None:
    """Inputs on the unit scale [0, 1] (mechanism.encode), all of the mechanism's own test
    points: Square Wave's both ends and interior (the wave is clipped at 0 and 1 differently
    from the middle), and every leaf of the tree (each node at each level is someone's)."""
    mechanism = campaign.mechanism
    rng = np.random.default_rng(22)
    draws = 20_000
    outputs = list(mechanism.outputs())
    inputs = privacy_inputs(campaign)
    alpha = 2e-6 / len(inputs)  # Bonferroni over the inputs
    for x in inputs:
        payloads = simulate(mechanism, [x] * draws, rng)
        observed = Counter(payload_key(y) for y in payloads)
        expected: dict[Any, float] = {payload_key(y): mechanism.output_probability(y, x) * draws
                                      for y in outputs}
        assert_goodness_of_fit(observed, expected, f"for x={x!r}", alpha=alpha)
    # The wire format is the client's: every payload passes the collector's check unchanged.
    mixed = simulate(mechanism, rng.random(2_000), rng)
    assert all(mechanism.check_payload(y) == y for y in mixed)


@pytest.mark.parametrize("campaign", DISTRIBUTIONS, ids=lambda c: c.name)
def test_distribution_simulators_refuse_the_mean_scale(campaign: Campaign) -> None:
    with pytest.raises(ValueError, match=r"unit scale \[0, 1\]"):
        simulate(campaign.mechanism, [0.5, -0.25], np.random.default_rng(0))


def test_unsupported_mechanisms_are_refused() -> None:
    campaign = next(c for c in example_campaigns() if c.mechanism.name == "cms")
    with pytest.raises(ValueError, match="no vectorized simulator"):
        simulate(campaign.mechanism, ["a"], np.random.default_rng(0))
