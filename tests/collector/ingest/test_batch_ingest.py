"""A usual batch is checked a column at a time and appended in one statement; any other batch
is checked report by report. Both paths must give the same answer and store the same rows.

Each scenario runs twice on one database, on two campaigns of the same definition (report IDs
are per campaign, so the very same reports can go to both): once as the collector runs, once
with the column path switched off. The answers and the stored rows must be identical.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import example, given
from hypothesis import strategies as st

from chorus_collector.ingest import reports as ingest
from chorus_collector.ingest.reports import ReportStatus, batch_answer, parse_body
from helpers.support import ADMIN_HEADERS, NOW, campaign_spec, make_report, query

Scenario = Callable[[dict[str, Any], random.Random], list[list[dict[str, Any]]]]


def _valid(config: dict[str, Any], rng: random.Random, count: int) -> list[dict[str, Any]]:
    values = ["a", "b", "c", "d"] if config["mechanism"] == "krr" else ["x", "y", "zzz"]
    return [make_report(config, rng.choice(values), rng) for _ in range(count)]


def _fresh(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    return [_valid(config, rng, 60)]


def _one_invalid(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    batch = _valid(config, rng, 40)
    batch[7]["payload"] = 99 if config["mechanism"] == "krr" else {"bits": "zz"}
    batch[9]["time"] = True
    return [batch]


def _repeats_inside(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    batch = _valid(config, rng, 20)
    conflicting = copy.deepcopy(batch[5])
    conflicting["time"] -= 3600
    return [[*batch, copy.deepcopy(batch[3]), conflicting]]


def _retry(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    first = _valid(config, rng, 30)
    changed = copy.deepcopy(first[2])
    changed["time"] -= 3600
    return [first, first + _valid(config, rng, 10), [changed, *_valid(config, rng, 5)]]


def _out_of_window(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    batch = _valid(config, rng, 10)
    batch[0]["time"] = int(NOW) + 3 * 3600  # after the next bucket
    batch[1]["time"] = int(NOW) - 400 * 86400  # past the report expiry
    return [batch, _valid(config, rng, 3)]


def _wrong_digest(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    batch = _valid(config, rng, 10)
    batch[4]["digest"] = "0" * 64
    return [batch]


def _one_report(config: dict[str, Any], rng: random.Random) -> list[list[dict[str, Any]]]:
    return [_valid(config, rng, 1), _valid(config, rng, 1)]


SCENARIOS: dict[str, Scenario] = {
    "fresh": _fresh, "one invalid": _one_invalid, "repeats inside": _repeats_inside,
    "retry": _retry, "out of window": _out_of_window, "wrong digest": _wrong_digest,
    "one report": _one_report,
}


def _send(http: FlaskClient, name: str, digest: str, batch: list[dict[str, Any]],
          route: str) -> tuple[int, Any]:
    reports = [{**r, "digest": digest if r["digest"] != "0" * 64 else r["digest"]}
               for r in batch]
    url = "/v1/reports" if route == "any" else f"/v1/campaigns/{name}/reports"
    reply = http.post(url, json={"reports": reports})
    # A refusal's detail names the campaign and its digest: the one thing that differs.
    text = reply.get_data(as_text=True).replace(digest[:12], "<digest>")
    return reply.status_code, json.loads(text.replace(repr(name), "<name>"))


def _stored(database: str, name: str) -> list[tuple[str, int, str]]:
    rows = query(database, "SELECT r.report_id, r.time, r.payload FROM reports r "
                 "JOIN campaigns c ON c.id = r.campaign_id WHERE c.name = ?", name)
    return sorted((bytes(row[0]).hex(), row[1], row[2]) for row in rows)


@pytest.mark.parametrize("mechanism", ["krr", "rappor"])
@pytest.mark.parametrize("route", ["campaign", "any"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_column_path_and_the_per_report_path_agree(
        app: Flask, database: str, monkeypatch: pytest.MonkeyPatch, scenario: str,
        mechanism: str, route: str) -> None:
    http = app.test_client()
    digests = {}
    for name in ("columns", "reports"):
        reply = http.post("/v1/campaigns", headers=ADMIN_HEADERS,
                          json=campaign_spec(name, mechanism=mechanism))
        assert reply.status_code == 201
        digests[name] = reply.get_json()["digest"]
    config = http.get("/v1/campaigns/columns").get_json()
    requests = SCENARIOS[scenario](config, random.Random(7))

    taken: list[bool] = []
    original = ingest._ingest_uniform

    def spy(*args: Any, **kwargs: Any) -> list[ReportStatus] | None:
        statuses = original(*args, **kwargs)
        taken.append(statuses is not None)
        return statuses

    monkeypatch.setattr(ingest, "_ingest_uniform", spy)
    with_columns = [_send(http, "columns", digests["columns"], batch, route)
                    for batch in requests]
    monkeypatch.setattr(ingest, "_ingest_uniform", lambda *args, **kwargs: None)
    one_by_one = [_send(http, "reports", digests["reports"], batch, route)
                  for batch in requests]

    assert with_columns == one_by_one
    assert _stored(database, "columns") == _stored(database, "reports")
    # The scenarios exercise both paths: a fresh, valid batch takes the column path.
    if scenario == "fresh":
        assert taken == [True]
    if scenario in ("one invalid", "repeats inside", "wrong digest"):
        assert taken == [False]


def test_a_batch_for_a_retired_campaign_is_refused_by_either_path(
        http: FlaskClient, create: Callable[..., dict[str, Any]]) -> None:
    config = create("gone")
    assert http.post("/v1/campaigns/gone/retire", headers=ADMIN_HEADERS).status_code == 200
    rng = random.Random(3)
    reply = http.post("/v1/reports", json={"reports": _valid(config, rng, 5)})
    assert reply.status_code == 200
    assert {r["error"] for r in reply.get_json()["results"]} == {"campaign-retired"}
    assert reply.get_json()["rejected"] == 5


STATUSES = st.builds(
    ReportStatus, index=st.just(0),
    report_id=st.none() | st.from_regex(r"[0-9a-f]{32}", fullmatch=True) | st.text(),
    status=st.sampled_from(["accepted", "duplicate", "rejected"]),
    error=st.none() | st.sampled_from(["invalid-report", "report-conflict"]),
    detail=st.none() | st.text())


@given(st.lists(STATUSES, max_size=20))
def test_a_batch_answer_is_the_json_of_its_statuses(statuses: list[ReportStatus]) -> None:
    # As ingest makes them: accepted and duplicate reports carry a checked ID and no error.
    for status in statuses:
        if status.status != "rejected":
            status.error = status.detail = None
            # Checked means 32 lowercase hex digits, not merely 32 characters: a text of 32
            # control characters once slipped through a length-only test here.
            if status.report_id is None or not re.fullmatch(r"[0-9a-f]{32}",
                                                            status.report_id):
                status.report_id = "0" * 32
        elif status.error is None:
            status.error = "invalid-report"
    answer = json.loads(batch_answer(statuses))
    assert answer == {"results": [s.to_json() for s in statuses],
                      **{kind: sum(s.status == kind for s in statuses)
                         for kind in ("accepted", "duplicate", "rejected")}}


def _with_integers(digits: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    integers = digits.flatmap(lambda n: st.integers(10 ** (n - 1), 10**n - 1)) | \
        st.integers(-10, 10)
    signed = st.tuples(integers, st.booleans()).map(lambda t: -t[0] if t[1] else t[0])
    leaves = signed | st.text(alphabet="0123456789:,[ ", max_size=30) | st.booleans()
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                        max_leaves=12)


def _largest_integer_digits(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return len(str(abs(value)))
    if isinstance(value, list):
        return max((_largest_integer_digits(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((_largest_integer_digits(v) for v in value.values()), default=0)
    return 0


@given(_with_integers(st.integers(1, 25)), st.sampled_from([", ", ",", ",\n  "]))
@example(10**19, ",")  # the whole text, no mark before it
@example(-(10**19), ",")
@example([10**19, "a:" + "0" * 20], ",")
def test_integers_of_more_than_19_digits_are_refused_wherever_they_are(
        value: Any, separator: str) -> None:
    body = json.dumps(value, separators=(separator, ": ")).encode()
    if _largest_integer_digits(value) > 19:
        with pytest.raises(ValueError, match="digits"):
            parse_body(body)
    else:
        assert parse_body(body) == value
