"""Exact privacy: enumerate each mechanism's output distribution on small domains.

For every example campaign: the probabilities sum to one, the worst-case likelihood ratio
max P(y|x)/P(y|x') equals e^ε (tight, not merely below) and the randomizer actually samples
that distribution (χ² goodness of fit, seeded, α = 1e-6), so the privacy check is about the
code that runs, not about a formula beside it.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from itertools import pairwise
from typing import Any

import pytest

from chorus_shared import REGISTRY, Campaign, CampaignError, campaign_from_spec
from chorus_shared.hashing import bloom_mask
from chorus_shared.mechanisms import KRR, PureOracle, Rappor
from helpers.examples import EXAMPLES, example_campaigns, example_ids
from helpers.statcheck import assert_goodness_of_fit
from helpers.statcheck import payload_key as _key
from helpers.statcheck import privacy_inputs as _inputs
from helpers.support import campaign_spec, chi2_band, z_threshold

CAMPAIGNS = example_campaigns()


def test_every_mechanism_has_examples() -> None:
    assert set(EXAMPLES) == set(REGISTRY)
    for mechanism, specs in EXAMPLES.items():
        assert len(specs) >= 2, f"{mechanism}: need two ε or two domain sizes"


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=example_ids())
def test_probabilities_sum_to_one(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    outputs = list(mechanism.outputs())
    for x in _inputs(campaign):
        total = math.fsum(mechanism.output_probability(y, x) for y in outputs)
        assert total == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=example_ids())
def test_worst_case_ratio_is_exactly_e_to_the_epsilon(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    outputs = list(mechanism.outputs())
    inputs = _inputs(campaign)
    table = [[mechanism.output_probability(y, x) for y in outputs] for x in inputs]
    # max over input pairs (a, b) of p(y|a)/p(y|b) is, per output, the largest probability
    # over the smallest: the same float (division rounds monotonically), without the
    # inputs² × outputs loop (33 million quotients for TreeHist).
    worst = max(max(column) / min(column) for column in zip(*table, strict=True))
    assert math.log(worst) == pytest.approx(campaign.epsilon, rel=1e-9)


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=example_ids())
def test_randomizer_samples_the_declared_distribution(campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    rng = random.Random(7)
    draws = 40_000
    for x in _inputs(campaign)[:2]:
        cohorts = "cohort" in mechanism.assign(random.Random(0))  # RAPPOR, O-RR, O-RAPPOR
        assignment = {"cohort": 0} if cohorts else {}
        observed = Counter(_key(mechanism.randomize(x, rng, assignment))
                           for _ in range(draws))
        expected: dict[Any, float] = {}
        for y in mechanism.outputs():
            if isinstance(y, dict) and y.get("cohort", 0) != 0:
                continue
            p = mechanism.output_probability(y, x) * (
                mechanism.m if assignment else 1)  # type: ignore[attr-defined]
            expected[_key(y)] = p * draws
        assert_goodness_of_fit(observed, expected, f"for x={x!r}")


@pytest.mark.parametrize("campaign", [c for c in CAMPAIGNS if c.mechanism.name in
                                      ("krr", "rr")], ids=lambda c: c.name)
def test_pure_protocol_support_probabilities(campaign: Campaign) -> None:
    """P(v ∈ Support(Y) | x) is p* when x = v and q* otherwise, exactly (§16.1 item 3)."""
    mechanism = campaign.mechanism
    p_star, q_star = mechanism.support_probabilities()  # type: ignore[attr-defined]
    for x in mechanism.inputs():
        for v in mechanism.outputs():
            expected = p_star if v == x else q_star
            assert mechanism.output_probability(v, x) == pytest.approx(expected, rel=1e-15)
    assert math.log(p_star / q_star) == pytest.approx(campaign.epsilon, rel=1e-12)


@pytest.mark.parametrize("campaign", [c for c in CAMPAIGNS if isinstance(c.mechanism,
                                                                         PureOracle)],
                         ids=lambda c: c.name)
def test_pure_oracles_support_has_exactly_p_star_and_q_star(campaign: Campaign) -> None:
    """Summing the exact output table over each report's support (§16.1 item 3): a wrong
    "other value" sampler, support function or q* fails here."""
    mechanism = campaign.mechanism
    assert isinstance(mechanism, PureOracle)
    p_star, q_star = mechanism.support_probabilities()
    outputs = list(mechanism.outputs())
    supports = [mechanism.support(y) for y in outputs]
    for x in mechanism.inputs():
        probabilities = [mechanism.output_probability(y, x) for y in outputs]
        for v in mechanism.inputs():
            rate = math.fsum(p for p, s in zip(probabilities, supports, strict=True) if v in s)
            assert rate == pytest.approx(p_star if v == x else q_star, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("campaign", [c for c in CAMPAIGNS if c.mechanism.name ==
                                      "basic_rappor"], ids=lambda c: c.name)
def test_basic_rappor_bits_have_the_pure_support_probabilities(campaign: Campaign) -> None:
    """Summing the exact output table: bit v is 1 with r1 when x = v, r0 otherwise."""
    mechanism = campaign.mechanism
    p_star, q_star = mechanism.support_probabilities()  # type: ignore[attr-defined]
    outputs = list(mechanism.outputs())
    for x in mechanism.inputs():
        for v in mechanism.inputs():
            rate = math.fsum(mechanism.output_probability(y, x) for y in outputs
                             if (int(y["bits"], 16) >> v) & 1)
            assert rate == pytest.approx(p_star if v == x else q_star, rel=1e-12)


def test_batched_uniforms_are_uniform_and_independent() -> None:
    """RAPPOR draws its k uniforms in one call; check their mean, spread and lag correlation."""
    from chorus_shared.rng import uniforms

    rng = random.Random(5)
    draws = [u for _ in range(2000) for u in uniforms(rng, 50)]
    n = len(draws)
    mean = sum(draws) / n
    assert abs(mean - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert all(0 <= u < 1 for u in draws)
    centred = [u - 0.5 for u in draws]
    lag1 = sum(a * b for a, b in pairwise(centred)) / (n - 1) / (1 / 12)
    assert abs(lag1) < 5 / math.sqrt(n)
    counts = Counter(int(u * 10) for u in draws)
    chi2 = sum((counts[b] - n / 10) ** 2 / (n / 10) for b in range(10))
    assert chi2 / 9 < chi2_band(9, 2e-6)[1]


@pytest.mark.parametrize("campaign", [c for c in CAMPAIGNS if c.mechanism.name == "rappor"],
                         ids=lambda c: c.name)
def test_rappor_prr_then_irr_has_the_one_report_rates(campaign: Campaign) -> None:
    """Memoized RAPPOR splits the randomizer in two stages; with fresh coins for both, each
    report bit must be 1 with probability r1 (Bloom bit set) or r0, as the single-stage
    randomizer and the ε₁ claim assume."""
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    rng = random.Random(9)
    draws = 20_000
    value = "value-3"
    bloom = bloom_mask(value, 1, mechanism.k, mechanism.h)
    ones = [0] * mechanism.k
    for _ in range(draws):
        prr = mechanism.permanent(value, rng, {"cohort": 1})
        bits = int(mechanism.instantaneous(prr, rng)["bits"], 16)
        for i in range(mechanism.k):
            ones[i] += (bits >> i) & 1
    limit = z_threshold(1e-6, mechanism.k)
    for i in range(mechanism.k):
        rate = mechanism.r1 if (bloom >> i) & 1 else mechanism.r0
        z = (ones[i] - draws * rate) / math.sqrt(draws * rate * (1 - rate))
        assert abs(z) < limit, (i, z)


@pytest.mark.parametrize("probability", [0.5, 0.1192, 0.7310585786300049, 1e-3])
def test_bit_parallel_bernoulli_bits_have_the_rate_and_are_independent(
        probability: float) -> None:
    """Unary encoding, RAPPOR and CMS draw their bits with ``bernoulli_bits``: every bit must
    be 1 at rate p (binomial z-test, Bonferroni over the bits) and pairs independent."""
    from chorus_shared.rng import bernoulli_bits

    rng = random.Random(3)
    draws, width = 20_000, 70  # 70: lanes cross byte and word boundaries
    ones = [0] * width
    both = 0
    for _ in range(draws):
        bits = bernoulli_bits(rng, width, probability)
        assert bits >> width == 0
        for i in range(width):
            ones[i] += (bits >> i) & 1
        both += (bits & 1) & (bits >> 69) & 1
    limit = z_threshold(1e-6, width + 1)
    sd = math.sqrt(draws * probability * (1 - probability))
    for count in ones:
        assert abs(count - draws * probability) / sd < limit
    pair = probability**2
    assert abs(both - draws * pair) / math.sqrt(draws * pair * (1 - pair)) < limit


def test_bit_parallel_bernoulli_bits_edges() -> None:
    from chorus_shared.rng import bernoulli_bits

    rng = random.Random(1)
    assert bernoulli_bits(rng, 0, 0.5) == 0
    assert bernoulli_bits(rng, 100, 0.0) == 0
    assert bernoulli_bits(rng, 100, 1.0) == (1 << 100) - 1

    class Fixed(random.Random):
        """Every 63-bit lane draws the value just below or at the threshold."""

        def __init__(self, lane: int) -> None:
            super().__init__(0)
            self.lane = lane

        def getrandbits(self, k: int, /) -> int:
            return sum(self.lane << (64 * i) for i in range(k // 64))

    p = 0.3
    threshold = int(p * 2.0**63)
    assert bernoulli_bits(Fixed(threshold - 1), 5, p) == 0b11111  # u < T: a one
    assert bernoulli_bits(Fixed(threshold), 5, p) == 0  # u = T: a zero


def test_first_category_is_reachable_and_indices_are_zero_based() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    pure-LDP's default index mapper is x − 1 (1-based): category 0 silently broke."""
    campaign = campaign_from_spec(campaign_spec("c", domain=["first", "second", "third"]))
    mechanism = campaign.mechanism
    assert isinstance(mechanism, KRR)
    assert mechanism.encode("first") == 0
    rng = random.Random(0)
    outputs = Counter(mechanism.randomize(0, rng) for _ in range(20_000))
    assert set(outputs) == {0, 1, 2}
    assert outputs[0] / 20_000 == pytest.approx(mechanism.p, abs=5 * math.sqrt(
        mechanism.p * (1 - mechanism.p) / 20_000))


def test_krr_lie_never_draws_the_true_value() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    Drawing the lie from all d values (a common slip) changes p; the lie excludes x."""
    campaign = campaign_from_spec(campaign_spec("c", epsilon=0.01))
    mechanism = campaign.mechanism
    assert isinstance(mechanism, KRR)

    class NeverKeep(random.Random):
        def random(self) -> float:
            return 0.999999  # always lie

    rng = NeverKeep(1)
    for x in range(mechanism.d):
        assert all(mechanism.randomize(x, rng) != x for _ in range(500))


def test_rappor_report_bits_are_zero_or_one() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    LoDiPCoR wrote the IRR flip as `bit - 1`, yielding −1/0; Chorus bits are 0/1 only."""
    campaign = campaign_from_spec(campaign_spec("u", mechanism="rappor"))
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    rng = random.Random(3)
    for i in range(300):
        payload = mechanism.randomize(f"v{i}", rng)
        assert mechanism.check_payload(payload) == payload
        assert int(payload["bits"], 16) < 2**mechanism.k


def test_rappor_f_is_used_exactly_not_quantised() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    google/rappor's Python client rounds f up to a multiple of 1/128; pure-LDP rounds f to
    two decimals. Chorus uses f as given, and ε is computed from that exact f."""
    campaign = campaign_from_spec(campaign_spec("u", mechanism="rappor", epsilon=None,
                                                params={"h": 2, "f": 0.1, "p": 0.4,
                                                        "q": 0.6}))
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    assert mechanism.f == 0.1
    assert mechanism.epsilon_longitudinal == pytest.approx(4 * math.log(0.95 / 0.05))
    r1 = 0.05 * 1.0 + 0.9 * 0.6
    r0 = 0.05 * 1.0 + 0.9 * 0.4
    assert mechanism.epsilon == pytest.approx(2 * math.log(r1 * (1 - r0) / (r0 * (1 - r1))))


def test_rappor_allows_more_than_32_bits_and_16_hashes() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    google/rappor's Python client supports at most 32 Bloom bits and 16 hashes."""
    campaign = campaign_from_spec(campaign_spec("u", mechanism="rappor",
                                                params={"k": 256, "h": 20, "m": 4}))
    mechanism = campaign.mechanism
    payload = mechanism.randomize("x", random.Random(0))
    assert len(payload["bits"]) == 64
    with pytest.raises(CampaignError, match="exceeds"):
        campaign_from_spec(campaign_spec("u", mechanism="rappor",
                                         params={"k": 4096, "m": 4096}))
