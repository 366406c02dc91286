"""Hypothesis-generated bodies, queries and headers against every endpoint: never a 5xx."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chorus_collector.ingest.reports import parse_body
from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS, campaign_spec, make_report

# Leaves include lone surrogates (json.dumps escapes them as \udxxx) and integers far beyond
# 64 bits: both once reached SQLite or float() and made a 500.
TEXT = st.text(st.characters(categories=["L", "N", "P", "Cs"]), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**40), 10**40) | st.floats(allow_nan=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=20,
)
FUZZ = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def seeded(app: Flask) -> tuple[FlaskClient, dict[str, dict[str, Any]]]:
    http = app.test_client()
    configs = {}
    for mechanism in ("krr", "rr", "rappor", "duchi"):
        spec = campaign_spec(mechanism, mechanism=mechanism)
        configs[mechanism] = http.post("/v1/campaigns", json=spec,
                                       headers=ADMIN_HEADERS).get_json()
    return http, configs


def _report_like(configs: dict[str, dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Mostly-valid reports with one field replaced by arbitrary JSON."""
    def mutate(mechanism: str, field: str, value: Any, seed: int) -> dict[str, Any]:
        report = make_report(configs[mechanism], {"krr": "a", "rr": "yes", "rappor": "x",
                                                  "duchi": 3.0}[mechanism], random.Random(seed))
        report[field] = value
        return report

    return st.builds(mutate, st.sampled_from(sorted(configs)),
                     st.sampled_from(["report_id", "digest", "time", "payload", "other"]),
                     JSON, st.integers(0, 2**16))


def test_fuzz_report_endpoints(seeded: tuple[FlaskClient, dict[str, dict[str, Any]]]) -> None:
    http, configs = seeded

    @FUZZ
    @given(body=st.one_of(JSON, st.lists(_report_like(configs), max_size=4).map(
        lambda r: {"reports": r}), _report_like(configs)),
        path=st.sampled_from(["/v1/reports", "/v1/campaigns/krr/reports",
                              "/v1/campaigns/rappor/reports", "/v1/campaigns/duchi/reports"]))
    def check(body: Any, path: str) -> None:
        reply = http.post(path, data=json.dumps(body), content_type="application/json")
        assert reply.status_code < 500, reply.get_data(as_text=True)

    check()


def test_fuzz_raw_bytes_and_headers(seeded: tuple[FlaskClient, dict[str, Any]]) -> None:
    http, _ = seeded

    @FUZZ
    @given(body=st.binary(max_size=200),
           content_type=st.sampled_from(["application/json", "text/plain", "", "x/y",
                                         "application/json; charset=latin-1"]),
           auth=st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s))
    def check(body: bytes, content_type: str, auth: str) -> None:
        headers = {"Authorization": auth}
        for path in ("/v1/reports", "/v1/campaigns", "/v1/campaigns/rappor/estimates"):
            reply = http.post(path, data=body, content_type=content_type, headers=headers)
            assert reply.status_code < 500, reply.get_data(as_text=True)

    check()


def test_fuzz_estimate_queries(seeded: tuple[FlaskClient, dict[str, Any]]) -> None:
    http, configs = seeded
    rng = random.Random(0)
    for mechanism, config in configs.items():
        value = {"krr": "a", "rr": "no", "rappor": "x", "duchi": 1.0}[mechanism]
        reports = [make_report(config, value, rng) for _ in range(20)]
        http.post("/v1/reports", json={"reports": reports})

    @FUZZ
    @given(name=st.sampled_from(["krr", "rr", "rappor", "duchi", "nope"]),
           query=st.dictionaries(st.sampled_from(["start", "end", "format", "candidate",
                                                  "candidates"]),
                                 st.text(max_size=12), max_size=4),
           body=JSON)
    def check(name: str, query: dict[str, str], body: Any) -> None:
        url = f"/v1/campaigns/{name}/estimates"
        got = http.get(url, query_string=query, headers=ANALYST_HEADERS)
        assert got.status_code < 500, got.get_data(as_text=True)
        posted = http.post(url, json=body, headers=ANALYST_HEADERS)
        assert posted.status_code < 500, posted.get_data(as_text=True)

    check()


def test_fuzz_campaign_specs(app: Flask) -> None:
    http = app.test_client()

    @FUZZ
    @given(spec=st.fixed_dictionaries(
        {"name": st.from_regex(r"[a-z]{1,8}", fullmatch=True),
         "mechanism": st.sampled_from(["krr", "rr", "rappor", "duchi", "x"])},
        optional={"epsilon": JSON, "domain": JSON, "params": JSON, "time_precision": JSON,
                  "min_batch_size": JSON, "report_expiry": JSON}))
    def check(spec: dict[str, Any]) -> None:
        reply = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
        assert reply.status_code < 500, (spec, reply.get_data(as_text=True))

    check()


@pytest.mark.parametrize("text", [
    "123456789012345678901", "[123456789012345678901]", '{"a":-123456789012345678901}',
    '{"a": [1,\n123456789012345678901]}', '{"a":\t99999999999999999999}',
    '{"id": "12345678901234567890123", "n": 123456789012345678901}',
])
def test_integers_over_19_digits_are_refused_wherever_they_stand(text: str) -> None:
    """Regression guard for the fast path that skips the per-integer check when no long
    number can be in the text: every long number, in any position, is still refused."""
    with pytest.raises(ValueError, match="out of range"):
        parse_body(text.encode())


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)  # no lone surrogates


@given(st.recursive(st.integers() | _TEXT | st.booleans() | st.none(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=12))
def test_parse_body_accepts_exactly_the_json_whose_integers_fit(value: object) -> None:
    text = json.dumps(value)
    too_long = any(len(token.lstrip("-")) > 19
                   for token in _integer_tokens(value))
    if too_long:
        with pytest.raises(ValueError, match="out of range"):
            parse_body(text.encode())
    else:
        assert parse_body(text.encode()) == value


def _integer_tokens(value: object) -> list[str]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, list):
        return [t for item in value for t in _integer_tokens(item)]
    assert isinstance(value, dict)
    return [t for item in value.values() for t in _integer_tokens(item)]
