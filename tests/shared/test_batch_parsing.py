"""A batch is checked a column at a time (``parse_batch``, ``Mechanism.check_payloads``): it
must agree with ``parse_report`` report by report, on every mechanism. None exactly when some
report would be refused, and otherwise the very reports ``parse_report`` gives."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chorus_shared import campaign_from_spec, parse_report
from chorus_shared.campaign import Campaign, canonical_json
from chorus_shared.errors import WireError
from chorus_shared.wire import new_report, parse_batch
from helpers.examples import EXAMPLES, example_campaigns, example_ids

Mutation = Callable[[dict[str, Any], Campaign], object]


def _set(field: str, value: Callable[[Any, Campaign], Any]) -> Mutation:
    return lambda report, campaign: {**report, field: value(report[field], campaign)}


def _without(field: str) -> Mutation:
    return lambda report, _: {k: v for k, v in report.items() if k != field}


MUTATIONS: dict[str, Mutation] = {
    "time is a bool": _set("time", lambda t, c: True),
    "time is a float": _set("time", lambda t, c: float(t)),
    "time off the precision": _set("time", lambda t, c: t + 1),
    "time negative": _set("time", lambda t, c: -c.time_precision),
    "time too large": _set("time", lambda t, c: 1 << 40),
    "time is text": _set("time", lambda t, c: str(t)),
    "id upper case": _set("report_id", lambda i, c: i.upper() if i[0].isalpha()
                          else "A" + i[1:]),
    "id with a newline": _set("report_id", lambda i, c: i + "\n"),
    "id short": _set("report_id", lambda i, c: i[:31]),
    "id long": _set("report_id", lambda i, c: i + "0"),
    "id not hex": _set("report_id", lambda i, c: "g" + i[1:]),
    "id with a space": _set("report_id", lambda i, c: " " + i[1:]),
    "id non-ASCII": _set("report_id", lambda i, c: "é" + i[1:]),
    "id is a number": _set("report_id", lambda i, c: 12345),
    "id is a list": _set("report_id", lambda i, c: [i]),
    "digest of another config": _set("digest", lambda d, c: "0" * 64),
    "digest upper case": _set("digest", lambda d, c: d.upper()),
    "digest is null": _set("digest", lambda d, c: None),
    "digest is a list": _set("digest", lambda d, c: [d]),
    "payload is true": _set("payload", lambda p, c: True),
    "payload is false": _set("payload", lambda p, c: False),
    "payload is a float": _set("payload", lambda p, c: 1.0),
    "payload is text": _set("payload", lambda p, c: json.dumps(p)),
    "payload is null": _set("payload", lambda p, c: None),
    "payload wrapped in a list": _set("payload", lambda p, c: [p]),
    "payload -1": _set("payload", lambda p, c: -1),
    "payload huge": _set("payload", lambda p, c: 10**18),
    "payload an object": _set("payload", lambda p, c: {"x": 1}),
    "payload below its bounds": _set("payload", lambda p, c: _bound(c, 0) - 1),
    "payload above its bounds": _set("payload", lambda p, c: _bound(c, 1) + 1),
    "payload at its low bound": _set("payload", lambda p, c: _bound(c, 0)),
    "payload at its high bound": _set("payload", lambda p, c: _bound(c, 1)),
    "missing time": _without("time"),
    "missing payload": _without("payload"),
    "an extra field": lambda report, _: {**report, "extra": 1},
    "a field renamed": lambda report, _: {("tim" if k == "time" else k): v
                                          for k, v in report.items()},
    "not an object": lambda report, _: [report],
    "null": lambda report, _: None,
}


def _bound(campaign: Campaign, end: int) -> int:
    bounds = campaign.mechanism.payload_bounds()
    return 7 if bounds is None else bounds[end]


def _reports(campaign: Campaign, count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    mechanism = campaign.mechanism
    reports = []
    for _ in range(count):
        payload = mechanism.randomize(mechanism.encode(campaign.domain.random_value(rng)), rng)
        sent = new_report(campaign, payload, 1_767_225_600 + rng.randrange(10**6))
        reports.append(json.loads(sent.to_wire()))  # as received
    return reports


def _one_by_one(batch: list[object], campaign: Campaign) -> list[Any] | None:
    try:
        return [parse_report(report, campaign) for report in batch]
    except WireError:
        return None


CAMPAIGNS = st.sampled_from(sorted(EXAMPLES)).flatmap(
    lambda name: st.sampled_from(EXAMPLES[name]).map(
        lambda example: campaign_from_spec({"name": "c", "mechanism": name, **example},
                                           warn=False)))


@settings(max_examples=400, deadline=None)
@given(CAMPAIGNS, st.integers(1, 6), st.integers(0, 2**32),
       st.lists(st.tuples(st.integers(0, 5), st.sampled_from(sorted(MUTATIONS))), max_size=2))
def test_a_batch_is_refused_exactly_when_a_report_is(campaign: Campaign, count: int, seed: int,
                                                    mutations: list[tuple[int, str]]) -> None:
    batch: list[object] = list(_reports(campaign, count, seed))
    for index, name in mutations:
        report = batch[index % count]
        if isinstance(report, dict):
            # A mutation may not apply to a report mutated already: it is left as it is.
            with contextlib.suppress(AttributeError, KeyError, TypeError):
                batch[index % count] = MUTATIONS[name](report, campaign)
    expected = _one_by_one(batch, campaign)
    columns = parse_batch(batch, campaign)
    if expected is None:
        assert columns is None
        return
    assert columns is not None
    assert list(columns.report_ids) == [r.report_id for r in expected]
    assert list(columns.times) == [r.time for r in expected]
    # Canonical JSON tells 1 from true, which == does not.
    assert canonical_json(list(columns.payloads)) == canonical_json([r.payload for r in expected])


@pytest.mark.parametrize("campaign", example_campaigns(), ids=example_ids())
def test_integer_payload_bounds_are_exactly_what_check_payload_accepts(
        campaign: Campaign) -> None:
    mechanism = campaign.mechanism
    bounds = mechanism.payload_bounds()
    if bounds is None:
        with pytest.raises(WireError):
            mechanism.check_payload(0)  # not one of the plain-integer mechanisms
        return
    low, high = bounds
    for accepted in (low, high, (low + high) // 2):
        assert mechanism.check_payload(accepted) == accepted
        assert mechanism.check_payloads([accepted]) == [accepted]
    for refused in (low - 1, high + 1, True, float(low)):
        with pytest.raises(WireError):
            mechanism.check_payload(refused)
        assert mechanism.check_payloads([low, refused]) is None


def test_an_empty_batch_is_not_a_batch() -> None:
    campaign = example_campaigns()[0]
    assert parse_batch([], campaign) is None


def test_a_report_id_with_a_trailing_newline_is_refused() -> None:
    # "^...$" with re.match accepted "<32 hex digits>\n": bytes.fromhex skips white space,
    # so the stored ID matched a different string from the one acknowledged.
    campaign = example_campaigns()[0]
    report = _reports(campaign, 1, seed=1)[0]
    with pytest.raises(WireError, match="report_id"):
        parse_report({**report, "report_id": report["report_id"] + "\n"}, campaign)
    with pytest.raises(WireError, match="digest"):
        parse_report({**report, "digest": report["digest"] + "\n"}, campaign)
