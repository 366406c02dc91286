"""An empirical distinguishing audit of every mechanism (issue: "Clopper–Pearson lower bound
on ε stays below the claimed ε").

For each example campaign: take the pair of inputs and the output event S that the declared
output table makes most distinguishing (S = {y : P(y | x₀) > P(y | x₁)}), then *sample* the
randomizer that runs on devices N times from each input and bound ε from below with
Clopper–Pearson intervals: ε_lb = ln(lower(P̂(S | x₀)) / upper(P̂(S | x₁))), each bound at
confidence 1 − 1e-7. A randomizer that leaks more than it declares (a biased coin, a wrong
scale, a forgotten branch) pushes ε_lb above ε; the last test shows the audit catches one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from scipy.special import bdtr, bdtrc

from chorus_shared import Campaign
from helpers.examples import example_campaigns
from helpers.statcheck import payload_key, privacy_inputs

DRAWS = 6_000
CONFIDENCE_TAIL = 1e-7
CAMPAIGNS = example_campaigns()


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) ≤ k), from the regularized incomplete beta function (scipy's ``bdtr``):
    exact to double precision, where a sum of k + 1 terms in pure Python took most of this
    module's time."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    return float(bdtr(k, n, p))


def _binomial_sf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) > k), computed directly (``bdtrc``), not as 1 − CDF: at the 1e-7 tail the
    subtraction would keep only nine digits."""
    if p <= 0:
        return 0.0
    if p >= 1:
        return 0.0 if k >= n else 1.0
    return float(bdtrc(k, n, p))


def _bisect(predicate: Callable[[float], bool]) -> float:
    """The boundary in [0, 1] where ``predicate`` turns from True to False."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicate(mid) else (lo, mid)
    return (lo + hi) / 2


def clopper_pearson(successes: int, n: int, tail: float) -> tuple[float, float]:
    """One-sided bounds: P(p < lower) ≤ tail and P(p > upper) ≤ tail."""
    lower = 0.0 if successes == 0 else _bisect(
        lambda p: _binomial_sf(successes - 1, n, p) < tail)
    upper = 1.0 if successes == n else _bisect(
        lambda p: _binomial_cdf(successes, n, p) >= tail)
    return lower, upper


def audit(campaign: Campaign, randomize: Callable[[Any, random.Random], Any],
          seed: int = 1) -> float:
    """ε_lb for the most distinguishing declared pair and event, from sampled reports."""
    mechanism = campaign.mechanism
    outputs = list(mechanism.outputs())
    inputs = privacy_inputs(campaign)
    table = {x_index: [mechanism.output_probability(y, x) for y in outputs]
             for x_index, x in enumerate(inputs)}
    best, pair, event = -1.0, (0, 1), set()
    for a, row_a in table.items():
        for b, row_b in table.items():
            chosen = {i for i in range(len(outputs)) if row_a[i] > row_b[i]}
            pa, pb = sum(row_a[i] for i in chosen), sum(row_b[i] for i in chosen)
            if chosen and pb > 0 and pa / pb > best and pa > 0.02:
                best, pair, event = pa / pb, (a, b), chosen
    keys = {payload_key(outputs[i]) for i in event}
    rng = random.Random(seed)
    hits = [sum(payload_key(randomize(inputs[x], rng)) in keys for _ in range(DRAWS)) for x in pair]
    lower, _ = clopper_pearson(hits[0], DRAWS, CONFIDENCE_TAIL)
    _, upper = clopper_pearson(hits[1], DRAWS, CONFIDENCE_TAIL)
    return math.log(lower / upper) if lower > 0 else -math.inf


def _device_randomizer(campaign: Campaign) -> Callable[[Any, random.Random], Any]:
    mechanism = campaign.mechanism
    cohorts = "cohort" in mechanism.assign(random.Random(0))
    assignment = {"cohort": 0} if cohorts else {}
    if cohorts:  # the declared table covers every cohort; draw the cohort as devices do
        return lambda x, rng: mechanism.randomize(x, rng, mechanism.assign(rng))
    return lambda x, rng: mechanism.randomize(x, rng, assignment)


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=lambda c: c.name)
def test_sampled_lower_bound_on_epsilon_stays_below_the_claim(campaign: Campaign) -> None:
    lower_bound = audit(campaign, _device_randomizer(campaign))
    assert lower_bound <= campaign.epsilon, (lower_bound, campaign.epsilon)


def test_the_audit_catches_a_randomizer_that_leaks_more_than_it_claims() -> None:
    """k-RR that keeps the true value a little too often: the claimed ε is wrong."""
    campaign = next(c for c in CAMPAIGNS if c.mechanism.name == "krr")
    mechanism = campaign.mechanism
    d = len(mechanism.domain.values)  # type: ignore[union-attr]
    keep = math.exp(campaign.epsilon + 1.0) / (math.exp(campaign.epsilon + 1.0) + d - 1)

    def leaky(x: int, rng: random.Random) -> int:
        if rng.random() < keep:
            return x
        other = rng.randrange(d - 1)
        return other + (other >= x)

    assert audit(campaign, leaky) > campaign.epsilon
