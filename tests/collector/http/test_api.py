"""The HTTP API through the app factory: happy paths, every bad input, and the error shape."""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_shared import campaign_from_spec
from helpers.support import (
    ADMIN_HEADERS,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    campaign_spec,
    make_report,
    query,
)

PROBLEM = "application/problem+json"
Create = Callable[..., dict[str, Any]]


def assert_problem(reply: Any, status: int, kind: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.get_data(as_text=True)
    assert reply.mimetype == PROBLEM
    body: dict[str, Any] = json.loads(reply.get_data())
    assert body["type"] == f"https://chorus.dev/problems/{kind}"
    assert body["status"] == status
    assert isinstance(body["title"], str)
    return body


def row_counts(database: str) -> tuple[int, int, int]:
    return tuple(query(database, f"SELECT count(*) FROM {t}")[0][0]  # type: ignore[return-value]
                 for t in ("campaigns", "reports", "aggregates"))


# -- campaigns ----------------------------------------------------------------------------------


def test_create_get_and_list_campaigns(http: FlaskClient) -> None:
    spec = campaign_spec("browser")
    created = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert created.status_code == 201
    config = created.get_json()
    assert config["digest"] and config["epsilon"] == 1.5 and config["warnings"] == []
    public = http.get("/v1/campaigns/browser")  # clients need no token
    assert public.status_code == 200
    assert public.get_json()["digest"] == config["digest"]
    assert public.headers["ETag"] == f'"{config["digest"]}"'
    listed = http.get("/v1/campaigns", headers=ADMIN_HEADERS).get_json()["campaigns"]
    assert [c["name"] for c in listed] == ["browser"]


def test_creating_the_same_campaign_again_is_idempotent(http: FlaskClient) -> None:
    spec = campaign_spec("browser")
    first = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    again = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.get_json()["digest"] == again.get_json()["digest"]


def test_campaigns_are_immutable(http: FlaskClient, database: str) -> None:
    http.post("/v1/campaigns", json=campaign_spec("browser"), headers=ADMIN_HEADERS)
    before = row_counts(database)
    changed = campaign_spec("browser", epsilon=2.0)
    body = assert_problem(http.post("/v1/campaigns", json=changed, headers=ADMIN_HEADERS),
                          409, "campaign-exists")
    assert "immutable" in body["detail"]
    assert row_counts(database) == before


def test_invalid_campaign_is_a_400_that_says_why(http: FlaskClient, database: str) -> None:
    body = assert_problem(http.post("/v1/campaigns", json=campaign_spec("x", epsilon=-1),
                                    headers=ADMIN_HEADERS), 400, "invalid-campaign")
    assert "epsilon" in body["detail"]
    assert row_counts(database) == (0, 0, 0)


def test_large_epsilon_needs_explicit_consent(http: FlaskClient, database: str) -> None:
    """Regression (issue 13 #11): ε = 50 was created with a warning only, and then every
    default client refused it. Now ε ≥ 10 needs "accept_weak_privacy": true."""
    refused = http.post("/v1/campaigns", json=campaign_spec("loose", epsilon=12),
                        headers=ADMIN_HEADERS)
    body = assert_problem(refused, 400, "invalid-campaign")
    assert "accept_weak_privacy" in body["detail"] and "max_epsilon" in body["detail"]
    assert row_counts(database) == (0, 0, 0)
    just_below = http.post("/v1/campaigns", json=campaign_spec("nine", epsilon=9.9),
                           headers=ADMIN_HEADERS)
    assert just_below.status_code == 201
    reply = http.post("/v1/campaigns", json={**campaign_spec("loose", epsilon=12),
                                             "accept_weak_privacy": True},
                      headers=ADMIN_HEADERS)
    assert reply.status_code == 201
    assert any("protects little" in w for w in reply.get_json()["warnings"])
    assert "accept_weak_privacy" not in reply.get_json()  # consent, not configuration
    wrong = http.post("/v1/campaigns", json={**campaign_spec("odd", epsilon=1),
                                             "accept_weak_privacy": "yes"},
                      headers=ADMIN_HEADERS)
    assert "must be true or false" in assert_problem(wrong, 400, "invalid-campaign")["detail"]


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401),
    ({"Authorization": "Basic abc"}, 401),
    ({"Authorization": "Bearer "}, 401),
    ({"Authorization": "Bearer wrong"}, 401),  # no token this collector knows
    (ANALYST_HEADERS, 403),  # analysts cannot administer
])
def test_admin_endpoints_need_the_admin_token(http: FlaskClient, headers: dict[str, str],
                                              status: int) -> None:
    kind = "unauthorized" if status == 401 else "forbidden"
    assert_problem(http.post("/v1/campaigns", json=campaign_spec("x"), headers=headers),
                   status, kind)
    assert_problem(http.get("/v1/campaigns", headers=headers), status, kind)


def test_an_unknown_token_is_401_and_a_real_one_of_another_role_403(http: FlaskClient) -> None:
    unknown = http.get("/v1/campaigns", headers={"Authorization": "Bearer not-a-token"})
    body = assert_problem(unknown, 401, "unauthorized")
    assert "not one this collector knows" in body["detail"]
    assert 'error="invalid_token"' in unknown.headers["WWW-Authenticate"]
    scoped = http.post("/v1/campaigns", json=campaign_spec("x"), headers=ANALYST_HEADERS)
    body = assert_problem(scoped, 403, "forbidden")
    assert body["detail"] == ("the bearer token presented is valid but does not grant this "
                              "endpoint: it needs the admin bearer token")
    assert 'error="insufficient_scope"' in scoped.headers["WWW-Authenticate"]


def test_unknown_campaign_is_404(http: FlaskClient) -> None:
    assert_problem(http.get("/v1/campaigns/nope"), 404, "unknown-campaign")
    assert_problem(http.post("/v1/campaigns/nope/reports", json={"reports": []}), 404,
                   "unknown-campaign")
    assert_problem(http.get("/v1/campaigns/nope/estimates", headers=ANALYST_HEADERS), 404,
                   "unknown-campaign")


def test_unknown_route_and_method_are_problems(http: FlaskClient) -> None:
    assert_problem(http.get("/v2/anything"), 404, "not-found")
    assert_problem(http.delete("/v1/campaigns"), 405, "method-not-allowed")


# -- reports ------------------------------------------------------------------------------------


def test_single_report_accepted_then_duplicate_then_conflict(http: FlaskClient, create: Create,
                                                             rng: random.Random) -> None:
    config = create("browser")
    report = make_report(config, "b", rng)
    first = http.post("/v1/campaigns/browser/reports", json=report)
    assert (first.status_code, first.get_json()["status"]) == (201, "accepted")
    again = http.post("/v1/campaigns/browser/reports", json=report)
    assert (again.status_code, again.get_json()["status"]) == (200, "duplicate")
    different = {**report, "payload": (report["payload"] + 1) % 4}
    body = assert_problem(http.post("/v1/campaigns/browser/reports", json=different), 409,
                          "report-conflict")
    assert body["report_id"] == report["report_id"]
    estimate = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_json()
    assert estimate["n"] == 1


def test_batch_returns_a_status_per_report_in_order(http: FlaskClient, create: Create,
                                                    rng: random.Random) -> None:
    config = create("browser")
    good = [make_report(config, v, rng) for v in "abcd"]
    batch = [good[0], {"report_id": "zz"}, good[1], good[0], good[2],
             {**good[1], "payload": 99}, good[3]]
    reply = http.post("/v1/campaigns/browser/reports", json={"reports": batch})
    assert reply.status_code == 200
    body = reply.get_json()
    statuses = [(r["status"], r.get("error")) for r in body["results"]]
    assert statuses == [
        ("accepted", None), ("rejected", "invalid-report"), ("accepted", None),
        ("duplicate", None), ("accepted", None), ("rejected", "invalid-report"),
        ("accepted", None),
    ]
    assert (body["accepted"], body["duplicate"], body["rejected"]) == (4, 1, 2)


def test_same_id_with_different_bytes_in_one_batch_is_a_conflict(
        http: FlaskClient, create: Create, rng: random.Random) -> None:
    config = create("browser")
    report = make_report(config, "a", rng)
    other = {**report, "payload": (report["payload"] + 1) % 4}
    body = http.post("/v1/campaigns/browser/reports", json={"reports": [report, other]}).get_json()
    assert [r["status"] for r in body["results"]] == ["accepted", "rejected"]
    assert body["results"][1]["error"] == "report-conflict"


def test_reports_for_any_campaign_are_routed_by_digest(http: FlaskClient, create: Create,
                                                       rng: random.Random) -> None:
    krr = create("browser")
    duchi = create("latency", mechanism="duchi")
    batch = [make_report(krr, "a", rng), make_report(duchi, 42.0, rng),
             make_report(krr, "a", rng, digest="ab" * 32)]
    body = http.post("/v1/reports", json={"reports": batch}).get_json()
    assert [r["status"] for r in body["results"]] == ["accepted", "accepted", "rejected"]
    assert body["results"][2]["error"] == "unknown-campaign"
    # The same report ID may exist in two campaigns: IDs are unique per campaign.
    same_id = make_report(duchi, 1.0, rng, report_id=batch[0]["report_id"])
    assert http.post("/v1/reports", json=same_id).status_code == 201


def test_digest_of_another_campaign_version_is_rejected(http: FlaskClient, create: Create,
                                                        rng: random.Random) -> None:
    config = create("browser")
    other = create("browser2", epsilon=2.0)
    report = make_report(config, "a", rng, digest=other["digest"])
    body = assert_problem(http.post("/v1/campaigns/browser/reports", json=report), 400,
                          "digest-mismatch")
    assert "refetch" in body["detail"]


@pytest.mark.parametrize(("change", "fragment"), [
    ({"payload": 4}, "outside [0, 4)"),
    ({"payload": -1}, "outside"),
    ({"payload": "a"}, "category index"),
    ({"payload": True}, "category index"),
    ({"payload": 1.0}, "category index"),
    ({"report_id": "ABCDEF" * 6}, "32 lowercase hex"),
    ({"report_id": "00" * 15}, "32 lowercase hex"),
    ({"digest": "x"}, "64 lowercase hex"),
    ({"time": -3600}, "non-negative"),
    ({"time": "now"}, "non-negative"),
    ({"time": int(NOW) + 1}, "truncated"),
    ({"extra": 1}, "unknown fields"),
])
def test_malformed_reports_are_rejected_with_reasons(http: FlaskClient, create: Create,
                                                     rng: random.Random, database: str,
                                                     change: dict[str, Any],
                                                     fragment: str) -> None:
    config = create("browser")
    report = make_report(config, "a", rng)
    report.update(change)
    before = row_counts(database)
    body = assert_problem(http.post("/v1/campaigns/browser/reports", json=report), 400,
                          "invalid-report")
    assert fragment in body["detail"]
    assert row_counts(database) == before


@pytest.mark.parametrize("mechanism", ["rappor", "duchi", "rr"])
@pytest.mark.parametrize("payload", [{"cohort": 8, "bits": "00000000"},
                                     {"cohort": 0, "bits": "0000000g"},
                                     {"cohort": 0, "bits": "0x000000"},
                                     {"cohort": 0, "bits": "000000000"},
                                     {"cohort": 0}, 2, [1], None])
def test_payloads_out_of_range_for_each_mechanism(http: FlaskClient, create: Create,
                                                  rng: random.Random, mechanism: str,
                                                  payload: Any) -> None:
    config = create("c", mechanism=mechanism)
    report = make_report(config, {"rappor": "x", "duchi": 5.0, "rr": "yes"}[mechanism], rng,
                         payload=payload)
    assert_problem(http.post("/v1/campaigns/c/reports", json=report), 400, "invalid-report")


def test_report_time_window_boundaries(http: FlaskClient, create: Create, rng: random.Random,
                                       clock: FakeClock) -> None:
    config = create("browser", report_expiry=86400)
    bucket = int(NOW)  # NOW is bucket-aligned; the next bucket is the latest accepted
    cases = [(bucket + 3600, 201), (bucket + 7200, 400),
             (bucket - 86400, 201), (bucket - 86400 - 3600, 400)]
    for time, status in cases:
        reply = http.post("/v1/campaigns/browser/reports",
                          json=make_report(config, "a", rng, time=time))
        assert reply.status_code == status, (time, reply.get_json())
    too_early = http.post("/v1/campaigns/browser/reports",
                          json=make_report(config, "a", rng, time=bucket + 7200))
    assert assert_problem(too_early, 400, "report-too-early")
    expired = http.post("/v1/campaigns/browser/reports",
                        json=make_report(config, "a", rng, time=bucket - 90000))
    assert assert_problem(expired, 400, "report-expired")


def test_a_scheduled_campaign_takes_reports_within_its_schedule_only(
        http: FlaskClient, create: Create, rng: random.Random, clock: FakeClock) -> None:
    """Its first period's first bucket and its last period's last bucket are taken; a bucket
    before its start or from its end on is refused (an honest client never sends one)."""
    day = 86400
    start = int(NOW) - 3 * day  # 2025-12-29
    config = create("daily", time_precision=3600, report_expiry=30 * day,
                    schedule={"cadence": "day", "start": "2025-12-29", "periods": 4})
    clock.now = NOW + 2 * day
    cases = [(start - 3600, "report-outside-schedule"), (start, None),
             (start + 4 * day - 3600, None), (start + 4 * day, "report-outside-schedule")]
    for time, refusal in cases:
        reply = http.post("/v1/campaigns/daily/reports",
                          json=make_report(config, "a", rng, time=time))
        if refusal is None:
            assert reply.status_code == 201, (time, reply.get_json())
        else:
            body = assert_problem(reply, 400, refusal)
            assert body["detail"] == (f"report time {time} is outside the campaign's schedule, "
                                      f"from {start} (inclusive) to {start + 4 * day} "
                                      "(exclusive)")
    # Folded and estimated, the schedule's two reports are all there is.
    assert http.get("/v1/campaigns/daily/estimates", headers=ANALYST_HEADERS,
                    query_string={"start": start - day, "end": start + 6 * day}
                    ).get_json()["n"] == 2


@pytest.mark.parametrize(("body", "kind"), [
    (b"{not json", "malformed-json"),
    (b"\xff\xfe", "malformed-json"),
    (b"[" * 100_000 + b"]" * 100_000, "malformed-json"),
    (b"1" * 5000, "malformed-json"),
    (b'"a string"', "invalid-request"),
    (b"[]", "invalid-request"),
    (b'{"reports": {}}', "invalid-request"),
    (b'{"reports": [], "more": 1}', "invalid-request"),
    (b'{"reports": []}', "invalid-request"),
])
def test_bad_bodies_are_400_and_write_nothing(http: FlaskClient, create: Create, database: str,
                                              body: bytes, kind: str) -> None:
    create("browser")
    before = row_counts(database)
    reply = http.post("/v1/campaigns/browser/reports", data=body,
                      content_type="application/json")
    assert_problem(reply, 400, kind)
    assert row_counts(database) == before


def test_wrong_content_type_is_415(http: FlaskClient, create: Create) -> None:
    create("browser")
    reply = http.post("/v1/campaigns/browser/reports", data=b"a=b",
                      content_type="application/x-www-form-urlencoded")
    assert_problem(reply, 415, "unsupported-media-type")


def test_body_size_limit_boundary(make_app: Callable[..., Flask], rng: random.Random,
                                  database: str) -> None:
    app = make_app(MAX_BODY_BYTES=2000)
    http = app.test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b"), headers=ADMIN_HEADERS).get_json()
    report = make_report(config, "a", rng)
    body = json.dumps(report).encode()
    at_limit = body + b" " * (2000 - len(body))
    assert http.post("/v1/campaigns/b/reports", data=at_limit,
                     content_type="application/json").status_code == 201
    over = json.dumps(make_report(config, "a", rng)).encode()
    over += b" " * (2001 - len(over))
    before = row_counts(database)
    body_problem = assert_problem(http.post("/v1/campaigns/b/reports", data=over,
                                            content_type="application/json"),
                                  413, "body-too-large")
    assert "2000 bytes" in body_problem["detail"]
    assert row_counts(database) == before


def test_reports_per_request_limit_boundary(make_app: Callable[..., Flask],
                                            rng: random.Random, database: str) -> None:
    http = make_app(MAX_REPORTS_PER_REQUEST=5).test_client()
    config = http.post("/v1/campaigns", json=campaign_spec("b"), headers=ADMIN_HEADERS).get_json()
    five = [make_report(config, "a", rng) for _ in range(5)]
    assert http.post("/v1/campaigns/b/reports", json={"reports": five}).status_code == 200
    before = row_counts(database)
    six = [make_report(config, "a", rng) for _ in range(6)]
    assert_problem(http.post("/v1/campaigns/b/reports", json={"reports": six}), 413,
                   "too-many-reports")
    assert row_counts(database) == before


# -- estimates ----------------------------------------------------------------------------------


def _submit(http: FlaskClient, config: dict[str, Any], values: list[Any],
            rng: random.Random, **overrides: Any) -> None:
    reports = [make_report(config, v, rng, **overrides) for v in values]
    body = http.post("/v1/reports", json={"reports": reports}).get_json()
    assert body["accepted"] == len(values), body


def test_estimates_need_the_analyst_or_admin_token(http: FlaskClient, create: Create,
                                                   rng: random.Random) -> None:
    config = create("browser")
    _submit(http, config, ["a"] * 5, rng)
    assert_problem(http.get("/v1/campaigns/browser/estimates"), 401, "unauthorized")
    assert_problem(http.get("/v1/campaigns/browser/estimates",
                            headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
    for headers in (ANALYST_HEADERS, ADMIN_HEADERS):
        assert http.get("/v1/campaigns/browser/estimates", headers=headers).status_code == 200


def test_categorical_estimates_json_and_csv(http: FlaskClient, create: Create,
                                            rng: random.Random) -> None:
    config = create("browser")
    _submit(http, config, ["a"] * 300 + ["b"] * 100, rng)
    body = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_json()
    assert body["kind"] == "frequency" and body["n"] == 400 and body["epsilon"] == 1.5
    assert [r["value"] for r in body["rows"]] == ["a", "b", "c", "d"]
    for row in body["rows"]:
        assert row["frequency_ci_low"] < row["frequency"] < row["frequency_ci_high"]
        assert row["count"] == pytest.approx(400 * row["frequency"])
        assert row["frequency_std_error"] > 0
    assert body["variance_model"].startswith("iid-sampling")
    assert sum(r["frequency"] for r in body["rows"]) == pytest.approx(1.0)
    csv_reply = http.get("/v1/campaigns/browser/estimates?format=csv", headers=ANALYST_HEADERS)
    assert csv_reply.mimetype == "text/csv"
    lines = csv_reply.get_data(as_text=True).splitlines()
    assert lines[0].startswith("value,count,count_std_error")
    assert len(lines) == 5
    by_accept = http.get("/v1/campaigns/browser/estimates",
                         headers={**ANALYST_HEADERS, "Accept": "text/csv"})
    assert by_accept.get_data(as_text=True) == csv_reply.get_data(as_text=True)


def test_mean_estimates(http: FlaskClient, create: Create, rng: random.Random) -> None:
    config = create("latency", mechanism="duchi")
    _submit(http, config, [30.0] * 500, rng)
    body = http.get("/v1/campaigns/latency/estimates", headers=ANALYST_HEADERS).get_json()
    assert body["kind"] == "mean" and body["n"] == 500
    assert body["ci_low"] < body["mean"] < body["ci_high"]
    assert abs(body["mean"] - 30.0) < 5 * body["std_error"]


def test_rappor_estimates_need_valid_candidates(http: FlaskClient, create: Create,
                                                rng: random.Random) -> None:
    config = create("urls", mechanism="rappor")
    _submit(http, config, ["x", "y"] * 50, rng)
    url = "/v1/campaigns/urls/estimates"
    assert_problem(http.get(url, headers=ANALYST_HEADERS), 422, "candidates-required")
    assert_problem(http.post(url, json={"candidates": ["x", "x"]}, headers=ANALYST_HEADERS),
                   422, "invalid-candidate")
    assert_problem(http.post(url, json={"candidates": "x"}, headers=ANALYST_HEADERS),
                   400, "invalid-query")
    too_many = [f"c{i}" for i in range(300)]  # 8 cohorts × 32 bits = 256 equations
    assert_problem(http.post(url, json={"candidates": too_many}, headers=ANALYST_HEADERS),
                   422, "candidates-not-identifiable")
    ok = http.get(f"{url}?candidate=x&candidate=y", headers=ANALYST_HEADERS).get_json()
    assert [r["value"] for r in ok["rows"]] == ["x", "y"]
    assert "unexplained_frequency" in ok["extra"]


def test_min_batch_size_boundary(http: FlaskClient, create: Create, rng: random.Random) -> None:
    config = create("browser", min_batch_size=10)
    _submit(http, config, ["a"] * 9, rng)
    url = "/v1/campaigns/browser/estimates"
    body = assert_problem(http.get(url, headers=ANALYST_HEADERS), 409, "invalid-batch-size")
    assert body["n"] == 9 and body["min_batch_size"] == 10
    assert http.get(url, headers=ANALYST_HEADERS).headers["Retry-After"] == "3600"
    # A rejected report does not count towards the batch.
    bad = make_report(config, "a", rng, payload=17)
    http.post("/v1/reports", json={"reports": [bad]})
    assert http.get(url, headers=ANALYST_HEADERS).status_code == 409
    _submit(http, config, ["a"], rng)
    assert http.get(url, headers=ANALYST_HEADERS).status_code == 200


def test_windows_select_time_buckets_and_must_be_aligned(http: FlaskClient, create: Create,
                                                         rng: random.Random) -> None:
    config = create("browser")
    bucket = int(NOW)
    _submit(http, config, ["a"] * 3, rng, time=bucket - 3600)
    _submit(http, config, ["b"] * 5, rng, time=bucket)
    url = "/v1/campaigns/browser/estimates"
    assert http.get(url, headers=ANALYST_HEADERS).get_json()["n"] == 8
    window = http.get(f"{url}?start={bucket}&end={bucket + 3600}", headers=ANALYST_HEADERS)
    assert window.get_json()["n"] == 5
    assert window.get_json()["window"] == {"start": bucket, "end": bucket + 3600}
    earlier = http.get(f"{url}?end={bucket}", headers=ANALYST_HEADERS).get_json()
    assert earlier["n"] == 3
    body = assert_problem(http.get(f"{url}?start={bucket + 1}", headers=ANALYST_HEADERS), 400,
                          "window-misaligned")
    assert str(bucket) in body["detail"] and str(bucket + 3600) in body["detail"]
    assert_problem(http.get(f"{url}?start=abc", headers=ANALYST_HEADERS), 400, "invalid-query")
    assert_problem(http.get(f"{url}?start={bucket}&end={bucket}", headers=ANALYST_HEADERS),
                   400, "invalid-query")
    assert_problem(http.get(f"{url}?format=xml", headers=ANALYST_HEADERS), 400,
                   "invalid-query")


def test_repeated_queries_return_equal_results(http: FlaskClient, create: Create,
                                               rng: random.Random) -> None:
    config = create("browser")
    _submit(http, config, ["a", "b", "c"] * 30, rng)
    url = "/v1/campaigns/browser/estimates"
    first = http.get(url, headers=ANALYST_HEADERS).get_data()
    assert http.get(url, headers=ANALYST_HEADERS).get_data() == first


def test_healthz(http: FlaskClient) -> None:
    reply = http.get("/healthz")
    assert reply.status_code == 200 and reply.get_json()["status"] == "ok"


@pytest.mark.sqlite_only
def test_the_database_stores_no_client_metadata(http: FlaskClient, create: Create,
                                                rng: random.Random, db_path: Path) -> None:
    config = create("browser")
    http.post("/v1/campaigns/browser/reports", json=make_report(config, "a", rng),
              headers={"User-Agent": "secret-agent", "X-Forwarded-For": "203.0.113.9"},
              environ_base={"REMOTE_ADDR": "198.51.100.7"})
    with sqlite3.connect(db_path) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(reports)")}
        dump = "\n".join(conn.iterdump())
    # seq: the append order the statistics are folded in; no clock time.
    assert columns == {"seq", "campaign_id", "report_id", "time", "payload"}
    for secret in ("secret-agent", "203.0.113.9", "198.51.100.7"):
        assert secret not in dump


def test_in_batch_repeat_of_a_stored_conflicting_report_is_not_acknowledged(
        http: FlaskClient, create: Create, rng: random.Random) -> None:
    config = create("browser")
    stored = make_report(config, "a", rng)
    assert http.post("/v1/reports", json=stored).status_code == 201
    altered = {**stored, "payload": (stored["payload"] + 1) % 4}
    body = http.post("/v1/reports", json={"reports": [altered, altered]}).get_json()
    assert [r["status"] for r in body["results"]] == ["rejected", "rejected"]
    assert {r["error"] for r in body["results"]} == {"report-conflict"}
    resent = http.post("/v1/reports", json={"reports": [stored, stored]}).get_json()
    assert [r["status"] for r in resent["results"]] == ["duplicate", "duplicate"]


@pytest.mark.parametrize("payload", [1.0, 0.0, "1", None])
def test_duchi_payload_must_be_an_integer_bit(http: FlaskClient, create: Create,
                                              rng: random.Random, payload: Any) -> None:
    config = create("latency", mechanism="duchi")
    good = make_report(config, 3.0, rng)
    bad = make_report(config, 3.0, rng, payload=payload)
    body = http.post("/v1/reports", json={"reports": [good, bad]}).get_json()
    assert [r["status"] for r in body["results"]] == ["accepted", "rejected"]


def test_a_category_nobody_reported_still_has_a_positive_standard_error(
        http: FlaskClient, create: Create) -> None:
    config = create("browser", epsilon=8.0)
    # Craft reports that all say "a" (a client may legitimately send these).
    from helpers.support import make_report as mk

    reports = [mk(config, "a", random.Random(i), payload=0) for i in range(50)]
    http.post("/v1/reports", json={"reports": reports})
    rows = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_json()["rows"]
    assert all(r["frequency_std_error"] > 0 for r in rows)
    assert all(r["frequency_ci_low"] < r["frequency_ci_high"] for r in rows)


@pytest.mark.parametrize("body", [
    b'{"reports": [{"report_id": "00000000000000000000000000000000", "digest": "\\ud800", '
    b'"time": 0, "payload": 0}]}',
    b'{"report_id": "\\udfff"}',
    b'{"reports": [{"digest": "' + b"\xed\xa0\x80" + b'"}]}',  # an encoded surrogate
    b'{"reports": [{"time": 1' + b"0" * 400 + b"}]}",
    b'{"reports": [{"time": -1' + b"0" * 30 + b"}]}",
])
def test_lone_surrogates_and_huge_integers_are_400(http: FlaskClient, create: Create,
                                                   database: str, body: bytes) -> None:
    create("browser")
    before = row_counts(database)
    for path in ("/v1/reports", "/v1/campaigns/browser/reports"):
        reply = http.post(path, data=body, content_type="application/json")
        assert_problem(reply, 400, "malformed-json")
    assert row_counts(database) == before


@pytest.mark.parametrize("spec_text", [
    '{"name": "x", "mechanism": "krr", "epsilon": 1' + "0" * 400 + ', "domain": ["a", "b"]}',
    '{"name": "x", "mechanism": "duchi", "epsilon": 1, '
    '"domain": {"kind": "numeric", "lo": 0, "hi": 1' + "0" * 400 + "}}",
    '{"name": "x", "mechanism": "krr", "epsilon": 1, "domain": ["a", "\\ud800"]}',
    '{"name": "x", "mechanism": "krr", "epsilon": 1, "domain": ["a", "b"], '
    '"description": "\\udc00"}',
])
def test_campaign_bodies_that_cannot_be_numbers_or_text_are_400(http: FlaskClient,
                                                                spec_text: str) -> None:
    reply = http.post("/v1/campaigns", data=spec_text, content_type="application/json",
                      headers=ADMIN_HEADERS)
    assert reply.status_code == 400
    assert reply.mimetype == PROBLEM


def test_huge_epsilon_from_python_is_a_campaign_error() -> None:
    from chorus_shared import CampaignError

    with pytest.raises(CampaignError, match="finite"):
        campaign_from_spec(campaign_spec("x", epsilon=10**400))
    with pytest.raises(CampaignError, match="finite"):
        campaign_from_spec(campaign_spec("x", mechanism="rappor", epsilon=None,
                                         params={"p": 0.1, "q": 10**400}))


@pytest.mark.parametrize("query", ["start=３６００", "start=%2B3600", "start=3_600",
                                   "start=" + "3" * 40, "end=-3600"])
def test_window_bounds_are_plain_bounded_integers(http: FlaskClient, create: Create,
                                                  rng: random.Random, query: str) -> None:
    config = create("browser")
    _submit(http, config, ["a"], rng)
    reply = http.get(f"/v1/campaigns/browser/estimates?{query}", headers=ANALYST_HEADERS)
    assert_problem(reply, 400, "invalid-query")


def test_estimate_queries_refuse_what_does_not_apply(http: FlaskClient, create: Create,
                                                     rng: random.Random) -> None:
    config = create("browser")
    _submit(http, config, ["a"], rng)
    url = "/v1/campaigns/browser/estimates"
    assert_problem(http.get(f"{url}?candidate=x", headers=ANALYST_HEADERS), 400,
                   "invalid-query")
    assert_problem(http.post(url, json={"candidats": ["x"]}, headers=ANALYST_HEADERS), 400,
                   "invalid-query")


def test_405_says_which_methods_are_allowed(http: FlaskClient) -> None:
    reply = http.delete("/v1/reports")
    assert_problem(reply, 405, "method-not-allowed")
    assert "POST" in reply.headers["Allow"]


def test_malformed_digest_is_an_invalid_report_not_an_unknown_campaign(
        http: FlaskClient, create: Create, rng: random.Random) -> None:
    config = create("browser")
    body = http.post("/v1/reports", json={"reports": [
        make_report(config, "a", rng, digest=[1]),
        make_report(config, "a", rng, digest="f" * 64)]}).get_json()
    assert [r["error"] for r in body["results"]] == ["invalid-report", "unknown-campaign"]


def test_rappor_queries_too_large_to_decode_are_refused(make_app: Callable[..., Flask],
                                                        rng: random.Random) -> None:
    http = make_app(MAX_CANDIDATES=20_000).test_client()
    spec = campaign_spec("big", mechanism="rappor", params={"k": 1024, "h": 2, "m": 1024})
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    _submit(http, config, [f"v{i}" for i in range(3000)], rng)
    candidates = [f"v{i}" for i in range(1000)]
    reply = http.post("/v1/campaigns/big/estimates", json={"candidates": candidates},
                      headers=ANALYST_HEADERS)
    body = assert_problem(reply, 422, "query-too-large")
    assert "fewer candidates" in body["detail"]


def test_dbitflip_at_large_epsilon_is_created_and_listed(http: FlaskClient) -> None:
    spec = {"name": "d", "mechanism": "dbitflip", "epsilon": 40.0, "domain": ["a", "b", "c"],
            "accept_weak_privacy": True}
    assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
    assert http.get("/v1/campaigns", headers=ADMIN_HEADERS).status_code == 200
    assert http.get("/v1/campaigns/d").status_code == 200


def _vector(d: int) -> dict[str, Any]:
    return {"kind": "vector", "attributes": [{"name": f"a{i}", "lo": 0, "hi": 1}
                                            for i in range(d)]}


@pytest.mark.parametrize("mechanism", ["shist", "hr", "dbitflip", "harmony", "pm_md", "cms",
                                       "one_bit_mean", "laplace"])
def test_epsilon_too_small_to_be_useful_is_a_clear_400(http: FlaskClient,
                                                      mechanism: str) -> None:
    domains = {"harmony": _vector(2), "pm_md": _vector(2), "cms": {"kind": "strings"},
               "one_bit_mean": {"kind": "numeric", "lo": 0, "hi": 1},
               "laplace": {"kind": "numeric", "lo": 0, "hi": 1}}
    spec = {"name": "tiny", "mechanism": mechanism, "epsilon": 1e-17,
            "domain": domains.get(mechanism, ["a", "b", "c"])}
    reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 400 and "below" in reply.get_json()["detail"]
    assert http.get("/v1/campaigns", headers=ADMIN_HEADERS).status_code == 200


HOSTILE_LABELS = ["=HYPERLINK(\"http://evil.test\")", "+1+1", "-2+3", "@SUM(A1)", "\tTAB",
                  "\rCR-start", "mid\rCR", "line\nbreak", "plain", "-", "comma,quote\""]


def test_csv_cells_never_run_as_formulas_and_rows_never_split(http: FlaskClient) -> None:
    """Regression (issue 13 #1): 6 of 15 hostile labels came out as live formulas, and a label
    that began with a bare CR split its row."""
    import csv
    import io

    spec = {"name": "labels", "mechanism": "krr", "epsilon": 1.0, "min_batch_size": 1,
            "domain": HOSTILE_LABELS}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    rng = random.Random(3)
    reports = [make_report(config, label, rng) for label in HOSTILE_LABELS * 5]
    assert http.post("/v1/reports", json={"reports": reports}).status_code == 200
    reply = http.get("/v1/campaigns/labels/estimates?format=csv", headers=ANALYST_HEADERS)
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert reply.headers["Content-Disposition"] == 'attachment; filename="labels-estimates.csv"'
    rows = list(csv.reader(io.StringIO(reply.get_data(as_text=True), newline="")))
    header, body = rows[0], rows[1:]
    assert len(body) == len(HOSTILE_LABELS)  # one row per category, none split
    values = [row[header.index("value")] for row in body]
    for label, written in zip(HOSTILE_LABELS, values, strict=True):
        dangerous = label.startswith(("=", "+", "-", "@", "\t", "\r"))
        assert written == ("'" + label if dangerous else label)
    for row in body:  # numbers stay numbers, even negative ones; booleans are words
        float(row[header.index("frequency")])
        assert row[header.index("detected")] in ("", "true", "false")
    assert http.get("/healthz").headers["X-Content-Type-Options"] == "nosniff"
    assert http.get("/nowhere").headers["X-Content-Type-Options"] == "nosniff"


def test_unknown_query_parameters_are_refused(http: FlaskClient) -> None:
    """Regression (issue 13 #12): ?strat=...&fromat=csv answered 200 JSON for the whole
    window."""
    http.post("/v1/campaigns", json=campaign_spec("q"), headers=ADMIN_HEADERS)
    reply = http.get("/v1/campaigns/q/estimates?strat=0&fromat=csv", headers=ANALYST_HEADERS)
    assert reply.status_code == 400
    assert reply.mimetype == "application/problem+json"
    assert "fromat" in reply.get_json()["detail"] and "strat" in reply.get_json()["detail"]


def test_estimate_queries_wait_for_their_turn_then_say_busy(make_app: Any) -> None:
    """Regression (issue 13 #6): memory was bounded per query, not per worker; 16 concurrent
    RAPPOR decodes would need about 8 GB. A gate lets QUERY_CONCURRENCY run at once."""
    app = make_app(QUERY_CONCURRENCY=1, QUERY_WAIT=0)
    http = app.test_client()
    http.post("/v1/campaigns", json=campaign_spec("busy"), headers=ADMIN_HEADERS)
    config = http.get("/v1/campaigns/busy").get_json()
    rng = random.Random(1)
    http.post("/v1/reports", json={"reports": [make_report(config, "a", rng)
                                               for _ in range(5)]})
    gate = app.extensions["chorus.query_gate"]
    assert gate.acquire(timeout=1)  # a query is running
    try:
        busy = http.get("/v1/campaigns/busy/estimates", headers=ANALYST_HEADERS)
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "5"
        assert busy.get_json()["type"].endswith("/query-busy")
    finally:
        gate.release()
    assert http.get("/v1/campaigns/busy/estimates", headers=ANALYST_HEADERS).status_code == 200


def test_frequency_answers_are_the_estimate_field_for_field() -> None:
    """The JSON and CSV are built field by field (asdict's deep copies made a 65,536-category
    answer take seconds, issue 13 #6): the same content as the dataclasses, NaN as null."""
    import csv
    import dataclasses
    import io
    import math

    from chorus_collector.results.estimates import FrequencyEstimate, FrequencyRow

    rows = [FrequencyRow.from_frequency("a", 0.25, 0.01, 100),
            FrequencyRow.from_frequency("=b", float("nan"), 0.02, 100, detected=True)]
    estimate = FrequencyEstimate(campaign="c", mechanism="krr", epsilon=1.0, n=100, rows=rows,
                                 variance_model="iid", window={"start": None, "end": 3600},
                                 extra={"x": [1.0, float("inf")]}, warnings=["w"])
    body = estimate.to_json()
    expected = {f.name: getattr(estimate, f.name) for f in dataclasses.fields(estimate)}
    expected["extra"] = {"x": [1.0, None]}
    assert {k: v for k, v in body.items() if k not in ("rows", "kind")} == {
        k: v for k, v in expected.items() if k != "rows"}
    assert body["kind"] == "frequency"
    for got, row in zip(body["rows"], rows, strict=True):
        want = dataclasses.asdict(row)
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, float) and math.isnan(value):
                assert got[key] is None
            else:
                assert got[key] == value
    table = list(csv.reader(io.StringIO(estimate.to_csv())))
    assert table[0] == [*(f.name for f in dataclasses.fields(FrequencyRow)),
                        "window_start", "window_end", "n", "epsilon"]
    assert table[1][0] == "a" and table[2][0] == "'=b"  # formulas still neutralised
    # NaN is missing (empty), booleans are words, the window's open start is empty.
    assert table[2][5] == "" and table[1][9:] == ["", "", "3600", "100", "1.0"]
    assert table[2][9] == "true"
