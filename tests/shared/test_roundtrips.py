"""Property-based round trips of the protocol: campaign configs and wire reports.

What a collector publishes must rebuild into the same campaign on every client (the digest is
the contract), and what a client sends must parse back into the same report.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from chorus_shared import campaign_from_config, campaign_from_spec, parse_report
from chorus_shared.wire import new_report
from helpers.examples import EXAMPLES

ROUNDTRIPS = settings(max_examples=150, deadline=None)

NAMES = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,20}", fullmatch=True)
POLICIES = st.fixed_dictionaries({}, optional={
    "unit": st.sampled_from(["lifetime", "day"]),
    "budget": st.integers(min_value=1, max_value=10**5),  # in reports of ε, set below
    "max_reports": st.integers(min_value=1, max_value=10**6),
})
CATEGORIES = st.lists(st.text(min_size=1, max_size=12), min_size=2, max_size=12, unique=True)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid campaign definition: an example mechanism, or k-RR over drawn categories (with
    an 'other' category sometimes), with drawn name, description, precision and policy."""
    mechanism = draw(st.sampled_from(sorted(EXAMPLES)))
    example = dict(draw(st.sampled_from(EXAMPLES[mechanism])))
    if mechanism == "krr":
        values = draw(CATEGORIES)
        other = draw(st.none() | st.sampled_from(values))
        example["domain"] = {"kind": "categories", "values": values,
                             **({"other": other} if other is not None else {})}
        example["epsilon"] = draw(st.floats(min_value=0.01, max_value=2.0))
    spec = {"name": draw(NAMES), "mechanism": mechanism, **example,
            "description": draw(st.text(max_size=40)),
            "time_precision": draw(st.sampled_from([3600, 7200, 86400]))}
    privacy = draw(POLICIES)
    if "budget" in privacy:  # a whole number of reports at the campaign's ε
        privacy["budget"] *= campaign_from_spec(spec, warn=False).epsilon
    return {**spec, "privacy": privacy}


@ROUNDTRIPS
@given(specs())
def test_a_published_config_rebuilds_into_the_same_campaign(spec: dict[str, Any]) -> None:
    campaign = campaign_from_spec(spec, warn=False)
    published = json.loads(json.dumps(campaign.public_config()))  # as served over HTTP
    rebuilt = campaign_from_config(published)
    assert rebuilt.digest == campaign.digest
    assert rebuilt.public_config() == campaign.public_config()
    assert rebuilt.worst_case == campaign.worst_case


@ROUNDTRIPS
@given(specs(), st.integers(min_value=0, max_value=2**32), st.integers(0, 2**40 - 1))
def test_a_sent_report_parses_back_into_the_same_report(spec: dict[str, Any], seed: int,
                                                        now: int) -> None:
    campaign = campaign_from_spec(spec, warn=False)
    mechanism = campaign.mechanism
    rng = random.Random(seed)
    payload = mechanism.randomize(mechanism.encode(campaign.domain.random_value(rng)), rng)
    sent = new_report(campaign, payload, now)
    received = parse_report(json.loads(sent.to_wire()), campaign)
    assert received == sent
    assert received.canonical_bytes() == sent.canonical_bytes()
    assert received.time % campaign.time_precision == 0 and received.time <= now
