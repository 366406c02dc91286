"""Regression tests for bugs found in other LDP libraries (../shared/docs/PEERS.md §10).

Each test names the peer bug it guards against; the mechanism-specific ones for mechanisms
Chorus does not have yet (OUE, OLH, dBitFlip) come with those mechanisms.
"""

from __future__ import annotations

import math
import random
import secrets
from collections import Counter

import pytest

from chorus_client import Client
from chorus_shared import CampaignError, campaign_from_spec
from chorus_shared.mechanisms import KRR, Rappor
from chorus_shared.rng import resolve_rng
from support import ScriptedTransport, campaign_spec


def test_first_category_is_reachable_and_indices_are_zero_based() -> None:
    """pure-LDP's default index mapper is x − 1 (1-based): category 0 silently broke."""
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
    """Drawing the lie from all d values (a common slip) changes p; the lie excludes x."""
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
    """LoDiPCoR wrote the IRR flip as `bit - 1`, yielding −1/0; Chorus bits are 0/1 only."""
    campaign = campaign_from_spec(campaign_spec("u", mechanism="rappor"))
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    rng = random.Random(3)
    for i in range(300):
        payload = mechanism.randomize(f"v{i}", rng)
        assert mechanism.check_payload(payload) == payload
        assert int(payload["bits"], 16) < 2**mechanism.k


def test_rappor_f_is_used_exactly_not_quantised() -> None:
    """google/rappor's Python client rounds f up to a multiple of 1/128; pure-LDP rounds f to
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
    """google/rappor's Python client supports at most 32 Bloom bits and 16 hashes."""
    campaign = campaign_from_spec(campaign_spec("u", mechanism="rappor",
                                                params={"k": 256, "h": 20, "m": 4}))
    mechanism = campaign.mechanism
    payload = mechanism.randomize("x", random.Random(0))
    assert len(payload["bits"]) == 64
    with pytest.raises(CampaignError, match="exceeds"):
        campaign_from_spec(campaign_spec("u", mechanism="rappor",
                                         params={"k": 4096, "m": 4096}))


def test_client_randomness_is_unpredictable_by_default() -> None:
    """pure-LDP and multi-freq-ldpy use Mersenne Twister; predictable coins undo LDP."""
    assert isinstance(resolve_rng(None), secrets.SystemRandom)
    client = Client("http://x.test", ephemeral=True, transport=ScriptedTransport([]))
    assert isinstance(client._rng, secrets.SystemRandom)


def test_reported_frequencies_are_unbiased_not_clipped() -> None:
    """multi-freq-ldpy's MI estimator clips and renormalises yet is presented as unbiased.
    Chorus's default output is the raw unbiased estimate, negative values included."""
    from chorus_collector.estimators import Query, estimator_for

    campaign = campaign_from_spec(campaign_spec("c", epsilon=0.5))
    estimator = estimator_for("krr")
    state = estimator.map(campaign.mechanism, [0] * 10 + [1] * 300 + [2] * 300 + [3] * 300)
    result = estimator.finalize(campaign, 910, state, Query())
    assert result.rows[0].frequency < 0
    assert result.postprocessing.startswith("none")
    assert sum(r.frequency for r in result.rows) == pytest.approx(1.0)
