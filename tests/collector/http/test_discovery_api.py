"""The HTTP surfaces of a discovery campaign (pem, treehist): estimates without candidates
(what the walk found) and with them (the second stage), bad candidates refused as problem
documents, series and comparisons that track the values found over everything they cover,
``"mechanism": "auto"`` over strings with its selection record, and answers that match the
OpenAPI description.

The data (helpers/discoveryseed.py) puts every true value ~17 standard errors above 0 in each
hourly bucket, so which values are found is not left to chance; the statistical properties
of the estimates (unbiasedness, coverage, false positives) are tested in tests/mechanisms.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector.http.openapi import openapi_document
from chorus_collector.storage import Storage, StoredCampaign
from helpers.discoveryseed import HOUR, SPEC, T0, WORDS, seed_folded
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS

PROBLEM = "application/problem+json"
SCHEMA = schemathesis.openapi.from_dict(openapi_document())
URL = "/v1/campaigns/searches"


def _problem(reply: Any, status: int, kind: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.get_data(as_text=True)
    assert reply.mimetype == PROBLEM
    body: dict[str, Any] = reply.get_json()
    assert body["type"] == f"https://chorus.dev/problems/{kind}"
    return body


def _described(reply: Any, path: str, method: str = "GET") -> dict[str, Any]:
    """The answer, once checked against the OpenAPI document's description of it."""
    assert reply.status_code == 200, reply.get_data(as_text=True)
    SCHEMA[path][method].validate_response(reply)
    body: dict[str, Any] = reply.get_json()
    return body


def _create(http: FlaskClient, **overrides: Any) -> dict[str, Any]:
    reply = http.post("/v1/campaigns", json={**SPEC, **overrides}, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    config: dict[str, Any] = reply.get_json()
    return config


@pytest.fixture
def seeded(app: Flask, http: FlaskClient) -> Callable[..., StoredCampaign]:
    """Create the campaign (SPEC, with overrides) and fold simulated buckets into it."""

    def make(*, seed_kwargs: dict[str, Any] | None = None, **overrides: Any) -> StoredCampaign:
        config = _create(http, **overrides)
        storage: Storage = app.extensions["chorus.storage"]
        stored = storage.get_campaign(config["name"])
        assert stored is not None
        seed_folded(storage, stored, **(seed_kwargs or {}))
        return stored

    return make


def _estimates(http: FlaskClient, name: str = "searches", **query: Any) -> dict[str, Any]:
    reply = http.get(f"/v1/campaigns/{name}/estimates", headers=ANALYST_HEADERS,
                     query_string=query)
    return _described(reply, "/v1/campaigns/{name}/estimates")


# -- estimates ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["pem", "treehist"])
def test_estimates_without_candidates_list_what_the_walk_found(
        http: FlaskClient, seeded: Callable[..., StoredCampaign], mechanism: str) -> None:
    stored = seeded(mechanism=mechanism)
    body = _estimates(http)
    rows = body["rows"]
    assert body["kind"] == "frequency" and body["n"] == 60_000
    assert len(rows) == SPEC["params"]["top"]
    # Every true value is found and flagged; the rows are in decreasing order of estimate.
    assert {row["value"] for row in rows if row["detected"]} == set(WORDS)
    assert [row["frequency"] for row in rows] == sorted((row["frequency"] for row in rows),
                                                        reverse=True)
    walk = body["extra"]["discovery"]
    assert walk["stage"] == "discovery" and walk["algorithm"] == mechanism
    assert [step["prefix_bits"] for step in walk["steps"]] == [8, 16, 24]
    # Holm's family: every survivor of the last step that is a string, at most keep.
    assert len(rows) <= walk["values_tested"] <= SPEC["params"]["keep"]
    assert walk["detection"] == {"method": "holm", "alpha": 0.05, "family_wise": True}
    walk_reports = sum(step["reports"] for step in walk["steps"])
    if mechanism == "pem":  # the groups partition the installs; the last one estimates
        assert walk_reports + walk["final_reports"] == body["n"]
    else:  # every TreeHist report carries one prefix and the whole string
        assert walk_reports == walk["final_reports"] == body["n"]
    assert stored.campaign.mechanism.name == mechanism


def test_candidates_are_re_estimated_beside_what_the_walk_found(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    seeded()
    found = {row["value"]: row for row in _estimates(http)["rows"]}
    listed = ["dog", "cat", "xyz"]
    body = _described(http.post(f"{URL}/estimates", json={"candidates": listed},
                                 headers=ANALYST_HEADERS), "/v1/campaigns/{name}/estimates",
                      "POST")
    walk = body["extra"]["discovery"]
    # The walk runs too: what it finds is fit beside the list (so a frequent value left off
    # it biases no candidate) and not reported.
    assert walk["stage"] == "re-estimate" and walk["steps"]
    assert walk["values_tested"] == 3 and walk["also_fit"] >= 1
    rows = {row["value"]: row for row in body["rows"]}
    assert set(rows) == set(listed)
    assert rows["dog"]["detected"] and rows["cat"]["detected"]
    # The same final table: a value fit with another list moves by a small fraction of its
    # standard error (the fits differ only in which values' collisions they remove).
    for value in ("dog", "cat"):
        assert abs(rows[value]["frequency"] - found[value]["frequency"]) \
            < found[value]["frequency_std_error"]
    # The GET form asks the same question.
    query = "&".join(f"candidate={value}" for value in listed)
    again = http.get(f"{URL}/estimates?{query}", headers=ANALYST_HEADERS).get_json()
    assert again["rows"] == body["rows"]


def test_the_csv_answer_carries_the_detected_flags(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    seeded()
    body = _estimates(http)
    reply = http.get(f"{URL}/estimates?format=csv", headers=ANALYST_HEADERS)
    assert reply.status_code == 200 and reply.mimetype == "text/csv"
    table = list(csv.DictReader(io.StringIO(reply.get_data(as_text=True))))
    assert [(r["value"], r["detected"]) for r in table] == [
        (row["value"], "true" if row["detected"] else "false") for row in body["rows"]]


@pytest.mark.parametrize(("candidates", "why"), [
    (["toolong"], "longer than 3 UTF-8 bytes"),
    (["éé"], "longer than 3 UTF-8 bytes"),  # 4 bytes in 2 characters
    (["a\0"], "cannot contain NUL"),
    (["cat", "cat"], "listed twice"),
    ([""], None),  # the empty string is a value (the padding alone) and is answered
])
def test_bad_candidates_are_problem_documents(
        http: FlaskClient, seeded: Callable[..., StoredCampaign], candidates: list[str],
        why: str | None) -> None:
    seeded()
    for reply in (http.post(f"{URL}/estimates", json={"candidates": candidates},
                            headers=ANALYST_HEADERS),
                  http.get(f"{URL}/estimates", query_string=[("candidate", c)
                                                             for c in candidates],
                           headers=ANALYST_HEADERS)):
        if why is None:
            assert reply.status_code == 200, reply.get_json()
            continue
        assert why in _problem(reply, 422, "invalid-candidate")["detail"]


def test_malformed_candidate_lists_are_4xx_never_500(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    seeded()
    lone_surrogate = b'{"candidates": ["\\ud800"]}'
    _problem(http.post(f"{URL}/estimates", data=lone_surrogate,
                       content_type="application/json", headers=ANALYST_HEADERS),
             400, "malformed-json")
    _problem(http.post(f"{URL}/estimates", json={"candidates": "cat"},
                       headers=ANALYST_HEADERS), 400, "invalid-query")
    _problem(http.post(f"{URL}/estimates", json={"candidates": [1]},
                       headers=ANALYST_HEADERS), 400, "invalid-query")
    many = [chr(0x4E00 + i) for i in range(1001)]  # 3 UTF-8 bytes each: valid values
    body = _problem(http.post(f"{URL}/estimates", json={"candidates": many},
                              headers=ANALYST_HEADERS), 413, "too-many-candidates")
    assert "at most 1000 candidates per re-estimate" in body["detail"]
    # Invalid UTF-8 in a query string is decoded with replacement characters: 3 bytes each.
    reply = http.get(f"{URL}/estimates?candidate=%FF%FE", headers=ANALYST_HEADERS)
    assert reply.status_code in (200, 422), reply.get_data(as_text=True)


# -- series and comparisons ---------------------------------------------------------------------

def test_a_series_tracks_the_values_found_over_its_whole_window(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    seeded()
    window = {"start": T0, "end": T0 + 3 * HOUR}
    whole = _estimates(http, **window)
    body = _described(http.get(f"{URL}/series", query_string=window, headers=ANALYST_HEADERS),
                      "/v1/campaigns/{name}/series")
    values = [row["value"] for row in whole["rows"]]
    assert [s["value"] for s in body["series"]] == values
    tracked = body["discovery"]
    assert tracked["values"] == values and tracked["n"] == whole["n"]
    assert tracked["windows"] == [window] and tracked["stage"] == "discovery"
    assert tracked["steps"] == whole["extra"]["discovery"]["steps"]
    # Each point is the estimates route's second stage of that list over the point.
    for index in range(3):
        start = T0 + index * HOUR
        point = _described(http.post(f"{URL}/estimates", json={
            "candidates": values, "start": start, "end": start + HOUR},
            headers=ANALYST_HEADERS), "/v1/campaigns/{name}/estimates", "POST")
        rows = {row["value"]: row for row in point["rows"]}
        for series in body["series"]:
            one = series["points"][index]
            row = rows[series["value"]]
            assert (one["start"], one["n"]) == (start, point["n"])
            assert (one["estimate"], one["std_error"], one["detected"]) == (
                row["frequency"], row["frequency_std_error"], row["detected"])


def test_a_series_narrows_to_the_largest_or_named_found_values(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    seeded()
    top = http.get(f"{URL}/series?top=2", headers=ANALYST_HEADERS).get_json()
    assert [s["value"] for s in top["series"]] == ["cat", "dog"]
    named = http.get(f"{URL}/series?value=zoo", headers=ANALYST_HEADERS).get_json()
    assert [s["value"] for s in named["series"]] == ["zoo"]
    body = _problem(http.get(f"{URL}/series?value=nothere", headers=ANALYST_HEADERS), 400,
                    "invalid-query")
    assert "unknown values" in body["detail"]
    # With candidates, the series follows them and says nothing of a walk.
    listed = http.post(f"{URL}/series", json={"candidates": ["zoo", "xyz"]},
                       headers=ANALYST_HEADERS).get_json()
    assert [s["value"] for s in listed["series"]] == ["zoo", "xyz"]
    assert "discovery" not in listed


def test_a_series_needs_enough_reports_to_discover(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    seeded(min_batch_size=100_000)
    body = _problem(http.get(f"{URL}/series", headers=ANALYST_HEADERS), 409,
                    "invalid-batch-size")
    assert "discovering the values to track needs at least 100000" in body["detail"]
    # Other open-string campaigns still need their candidate list.
    http.post("/v1/campaigns", headers=ADMIN_HEADERS, json={
        "name": "bloom", "mechanism": "rappor", "epsilon": 2.0, "domain": {"kind": "strings"},
        "params": {"k": 32, "h": 2, "m": 8}, "min_batch_size": 1})
    _problem(http.get("/v1/campaigns/bloom/series", headers=ANALYST_HEADERS), 422,
             "candidates-required")


def test_a_comparison_tracks_the_values_found_over_both_windows(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    # "new" appears only in the current window, where it is frequent: found over both.
    seeded(seed_kwargs={"shares": [[0.3, 0.3, 0.2, 0.2, 0.0]] * 2 + [[0.2, 0.2, 0.1, 0.1,
                                                                       0.4]]})
    question = {"baseline_start": T0, "baseline_end": T0 + 2 * HOUR, "start": T0 + 2 * HOUR,
                "end": T0 + 3 * HOUR}
    body = _described(http.get(f"{URL}/compare", query_string=question,
                               headers=ANALYST_HEADERS), "/v1/campaigns/{name}/compare")
    tracked = body["discovery"]
    assert tracked["n"] == body["baseline"]["n"] + body["current"]["n"] == 60_000
    assert tracked["windows"] == [{"start": T0, "end": T0 + 2 * HOUR},
                                  {"start": T0 + 2 * HOUR, "end": T0 + 3 * HOUR}]
    assert [row["value"] for row in body["rows"]] == tracked["values"]
    assert set(WORDS) <= set(tracked["values"])
    rows = {row["value"]: row for row in body["rows"]}
    assert rows["zoo"]["significant"] and rows["zoo"]["difference"] > 0.3
    # Each side is the second stage of the list over its window.
    for side, (start, end) in (("baseline", (T0, T0 + 2 * HOUR)),
                               ("current", (T0 + 2 * HOUR, T0 + 3 * HOUR))):
        window = http.post(f"{URL}/estimates", json={
            "candidates": tracked["values"], "start": start, "end": end},
            headers=ANALYST_HEADERS).get_json()
        for row in window["rows"]:
            assert rows[row["value"]][f"{side}_estimate"] == row["frequency"]
            assert rows[row["value"]][f"{side}_std_error"] == row["frequency_std_error"]


# -- campaigns ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("epsilon", "max_bytes"), [(1.0, 64), (4.0, 8)])
def test_auto_over_strings_picks_a_discovery_mechanism_and_says_why(
        http: FlaskClient, epsilon: float, max_bytes: int) -> None:
    spec = {"name": "found", "mechanism": "auto", "epsilon": epsilon,
            "domain": {"kind": "strings", "max_bytes": max_bytes}, "params": {"top": 10}}
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    SCHEMA["/v1/campaigns"]["POST"].validate_response(reply)
    created = reply.get_json()
    assert created["mechanism"] in ("pem", "treehist")
    selection = created["selection"]
    assert selection["from"] == "auto" and selection["params"] == {"top": 10}
    assert set(selection["candidates"]) == {"pem", "treehist"}
    figures = selection["candidates"]
    ratio = (figures["treehist"]["final_std_error_at_1e6"]
             / figures["pem"]["final_std_error_at_1e6"])
    assert created["mechanism"] == ("treehist" if ratio <= 0.5 else "pem")
    assert created["params"]["top"] == 10
    public = http.get("/v1/campaigns/found").get_json()  # what `chorus campaign show` prints
    assert public["selection"] == selection and public["digest"] == created["digest"]


@pytest.mark.parametrize(("domain", "params", "why"), [
    ({"kind": "strings", "max_bytes": 65}, {}, "at most 64 bytes"),
    ({"kind": "strings", "max_bytes": 8}, {"bins": 4}, "takes only"),
    ({"kind": "strings", "max_bytes": 8, "alphabet": "abca"}, {}, "must not repeat"),
    ({"kind": "strings", "max_bytes": 8, "alphabet": ""}, {}, "1 to 255 characters"),
    ({"kind": "strings", "max_bytes": 8, "alphabet": "abc"}, {"first_bits": 3},
     "multiples of 2"),
])
def test_auto_over_strings_refuses_what_it_cannot_do(http: FlaskClient, domain: dict[str, Any],
                                                     params: dict[str, Any], why: str) -> None:
    reply = http.post("/v1/campaigns", json={"name": "found", "mechanism": "auto",
                                             "epsilon": 2.0, "domain": domain,
                                             "params": params}, headers=ADMIN_HEADERS)
    assert why in _problem(reply, 400, "invalid-campaign")["detail"]


#: Every character of ``WORDS`` (a tab and a 2-byte "é" among them): 10 characters, 4 bits
#: each, so a value of up to 3 characters is 12 bits.
ALPHABET = "catdogé\tbz"


def test_a_walk_over_a_declared_alphabet_over_http(
        http: FlaskClient, seeded: Callable[..., StoredCampaign]) -> None:
    """The campaign declares its alphabet: the config carries it, the walk's prefixes are
    whole 4-bit characters, every true value is found and flagged, every row is a word over
    the alphabet, and a candidate with another character is a problem document."""
    stored = seeded(domain={"kind": "strings", "max_bytes": 3, "alphabet": ALPHABET})
    config = http.get(URL).get_json()
    assert config["domain"] == {"kind": "strings", "max_bytes": 3, "alphabet": ALPHABET}
    assert config["digest"] == stored.campaign.digest
    body = _estimates(http)
    walk = body["extra"]["discovery"]
    assert [step["prefix_bits"] for step in walk["steps"]] == [8, 12]
    # Two characters or padding (none after padding), but not "éé", 4 bytes: 10·11 + 1 − 1.
    assert walk["steps"][0]["candidates"] == 110
    assert {row["value"] for row in body["rows"] if row["detected"]} == set(WORDS)
    assert all(set(row["value"]) <= set(ALPHABET) for row in body["rows"])
    reply = http.post(f"{URL}/estimates", json={"candidates": ["cat", "cow"]},
                      headers=ANALYST_HEADERS)
    assert "alphabet" in _problem(reply, 422, "invalid-candidate")["detail"]
