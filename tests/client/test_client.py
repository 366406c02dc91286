"""The client: perturb once, retry identical bytes, never leak the raw value."""

from __future__ import annotations

import json
import logging
import math
import random
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from chorus_client import (
    CampaignUnavailable,
    Client,
    ClientError,
    FlushResult,
    Response,
    RetryPolicy,
    TransportError,
    ValueDomainError,
)
from chorus_shared import campaign_from_spec
from chorus_shared.rng import resolve_rng
from helpers.support import (
    ADMIN_HEADERS,
    ANALYST_HEADERS,
    FakeClock,
    FlaskBridge,
    ScriptedTransport,
    Sent,
    campaign_spec,
    timeout_error,
)

BASE = "http://collector.test"


def accepted(call: Sent) -> Response:
    reports = json.loads(call.body or b"{}")["reports"]
    body = {"results": [{"report_id": r["report_id"], "status": "accepted"} for r in reports]}
    return Response(200, json.dumps(body).encode())


def krr_config() -> dict[str, Any]:
    return campaign_from_spec(campaign_spec("browser")).public_config()


def unpinned(**kwargs: Any) -> Client:
    """A client that takes the configs its (scripted) collector serves: these tests are about
    transport and verification, not pinning (tests/client/test_threat_model.py covers that)."""
    kwargs.setdefault("lifetime_budget", math.inf)
    return Client(BASE, ephemeral=True, allow_unpinned=True, send_delay=0.0, **kwargs)


def make_client(transport: Any, sleeps: list[float] | None = None, **kwargs: Any) -> Client:
    sleeps = [] if sleeps is None else sleeps
    return unpinned(transport=transport, rng=random.Random(1), allow_insecure_rng=True,
                  sleep=sleeps.append, campaigns={"browser": krr_config()},
                  retry=RetryPolicy(max_attempts=4, base_delay=0.5, max_delay=8.0,
                                    jitter=random.Random(0)), **kwargs)


def test_retries_resend_identical_bytes_after_timeouts_and_5xx() -> None:
    transport = ScriptedTransport([timeout_error(), Response(503)], fallback=accepted)
    sleeps: list[float] = []
    client = make_client(transport, sleeps)
    client.report("browser", "a")
    client.report("browser", "b")
    result = client.flush()
    assert result.accepted == 2
    assert result.pending == 0
    bodies = [s.body for s in transport.sent]
    assert len(bodies) == 3
    assert bodies[0] == bodies[1] == bodies[2]
    assert len(sleeps) == 2
    assert all(0 <= s <= 8.0 for s in sleeps)


def test_a_413_splits_the_batch_and_a_401_keeps_it() -> None:
    too_big = Response(413, b'{"type": "x/too-many-reports"}')
    transport = ScriptedTransport([too_big, too_big], fallback=accepted)
    client = make_client(transport, batch_size=8)
    for value in "abcdabcd":
        client.report("browser", value)
    result = client.flush()
    assert (result.accepted, result.pending, client.dropped) == (8, 0, 0)
    sizes = [len(json.loads(s.body or b"")["reports"]) for s in transport.sent]
    assert sizes == [8, 4, 2, 2, 2, 2]
    locked = ScriptedTransport([Response(401, b"{}")], fallback=accepted)
    keyless = make_client(locked, clock=FakeClock())
    keyless.report("browser", "a")
    assert keyless.flush().pending == 1  # a missing ingest key is not the report's fault
    assert keyless.dropped == 0


def test_a_4xx_is_not_retried_and_the_batch_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    problem = {"type": "https://chorus.dev/problems/digest-mismatch", "title": "x",
               "status": 400, "detail": "stale"}
    transport = ScriptedTransport([Response(400, json.dumps(problem).encode(),
                                            {"Content-Type": "application/problem+json"})])
    client = make_client(transport)
    client.report("browser", "a")
    with caplog.at_level(logging.WARNING, logger="chorus.client"):
        result = client.flush()
    assert len(transport.sent) == 1
    assert (result.rejected, result.pending, client.dropped) == (1, 0, 1)
    assert "digest-mismatch" in caplog.text
    assert client.flush().accepted == 0  # nothing left to resend
    assert len(transport.sent) == 1


def test_retry_after_is_honoured() -> None:
    transport = ScriptedTransport([Response(429, headers={"Retry-After": "5"})],
                                  fallback=accepted)
    sleeps: list[float] = []
    client = make_client(transport, sleeps)
    client.report("browser", "a")
    assert client.flush().accepted == 1
    assert len(sleeps) == 1
    assert 5.0 <= sleeps[0] <= 8.0  # at least what the server asked, at most max_delay


def test_retry_after_beyond_the_cap_keeps_the_reports_and_is_respected() -> None:
    transport = ScriptedTransport([Response(503, headers={"Retry-After": "3600"})],
                                  fallback=accepted)
    clock = FakeClock()
    client = make_client(transport, clock=clock)
    client.report("browser", "a")
    first = client.flush()
    assert (first.accepted, first.pending) == (0, 1)
    for _ in range(5):  # a busy app flushing again and again sends nothing for an hour
        assert client.flush().pending == 1
    assert len(transport.sent) == 1
    clock.now += 3600
    second = client.flush()
    assert (second.accepted, second.pending) == (1, 0)
    assert transport.sent[0].body == transport.sent[1].body


def test_unreachable_collector_keeps_reports_and_resends_the_same_bytes() -> None:
    transport = ScriptedTransport([timeout_error()] * 4, fallback=accepted)
    clock = FakeClock()
    client = make_client(transport, clock=clock)
    for value in "abcd":
        client.report("browser", value)
    assert client.flush().pending == 4
    assert client.pending() == 4
    clock.now += 60  # past the backoff
    assert client.flush().accepted == 4
    assert len({s.body for s in transport.sent}) == 1  # five sends, one body


def test_batches_respect_batch_size() -> None:
    transport = ScriptedTransport([], fallback=accepted)
    client = make_client(transport, batch_size=3)
    for _ in range(7):
        client.report("browser", "a")  # the queue flushes itself at 3 and 6
    client.flush()
    sizes = [len(json.loads(s.body or b"")["reports"]) for s in transport.sent]
    assert sizes == [3, 3, 1]
    assert client.totals.accepted == 7


def test_values_outside_the_domain_are_sent_as_substitutes() -> None:
    """Sending must not depend on the value: a substitute goes out, and strict mode still
    tells the developer (after queuing it)."""
    client = make_client(ScriptedTransport([]))
    assert client.report("browser", "zzz") == "substituted"
    assert client.report("browser", 3) == "substituted"
    assert (client.pending(), client.substituted) == (2, 2)
    strict = make_client(ScriptedTransport([]), strict=True)
    with pytest.raises(ValueDomainError, match="not one of"):
        strict.report("browser", "zzz")
    assert strict.pending() == 1


def test_default_randomness_is_the_os_csprng() -> None:
    client = unpinned(transport=ScriptedTransport([]))
    assert isinstance(client._rng, secrets.SystemRandom)
    assert client.timeout > 0


def test_a_config_that_understates_epsilon_is_refused() -> None:
    config = campaign_from_spec(campaign_spec("urls", mechanism="rappor")).public_config()
    config["epsilon"] = 0.1  # the parameters give ε = 3
    transport = ScriptedTransport([Response(200, json.dumps(config).encode())] * 2)
    with pytest.raises(CampaignUnavailable, match="invalid campaign config"):
        unpinned(transport=transport, strict=True).report("urls", "x")
    quiet = unpinned(transport=transport)
    assert quiet.report("urls", "x") == "unavailable"  # the host app sees no exception
    assert quiet.suppressed["unavailable"] == 1
    assert quiet.pending() == 0


def test_max_epsilon_refuses_looser_campaigns() -> None:
    config = krr_config()
    transport = ScriptedTransport([Response(200, json.dumps(config).encode())])
    client = unpinned(transport=transport, max_epsilon=1.0)
    with pytest.raises(CampaignUnavailable, match="above this client's limit"):
        client.campaign("browser")


def test_unknown_campaign_is_a_clear_error() -> None:
    problem = {"type": "https://chorus.dev/problems/unknown-campaign", "title": "Unknown",
               "status": 404, "detail": "no campaign is named 'x'"}
    transport = ScriptedTransport([Response(404, json.dumps(problem).encode())] * 2)
    with pytest.raises(CampaignUnavailable, match="unknown-campaign"):
        unpinned(transport=transport, strict=True).report("x", "a")
    assert unpinned(transport=transport).report("x", "a") == "unavailable"


def test_rappor_cohort_is_drawn_for_every_report() -> None:
    """A stable cohort would be a per-install ID in every report (up to 2^20 values)."""
    config = campaign_from_spec(campaign_spec("urls", mechanism="rappor")).public_config()
    transport = ScriptedTransport([], fallback=accepted)
    client = unpinned(transport=transport, campaigns={"urls": config},
                      rng=random.Random(5), allow_insecure_rng=True)
    for _ in range(200):
        client.report("urls", "x")
    client.flush()
    cohorts = Counter(r["payload"]["cohort"] for s in transport.sent
                      for r in json.loads(s.body or b"")["reports"])
    assert sum(cohorts.values()) == 200 and len(cohorts) == 8  # m = 8: all of them appear


def test_concurrent_reports_from_many_threads_are_each_sent_once() -> None:
    lock = threading.Lock()
    seen: list[str] = []

    def record(call: Sent) -> Response:
        with lock:
            seen.extend(r["report_id"] for r in json.loads(call.body or b"")["reports"])
        return accepted(call)

    client = make_client(ScriptedTransport([], fallback=record), batch_size=25)

    def worker() -> None:
        for i in range(200):
            client.report("browser", "abcd"[i % 4])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.flush()
    assert len(seen) == 1600
    assert len(set(seen)) == 1600
    assert client.pending() == 0


def test_the_raw_value_never_leaves_the_process(make_app: Callable[..., Flask],
                                                clock: FakeClock) -> None:
    """Capture every HTTP body end to end (client → in-process collector)."""
    app = make_app()
    http = app.test_client()
    secret_url = "https://very-secret.example/a/7f3c9"
    secret_category = "category-only-on-device"
    specs = [campaign_spec("urls", mechanism="rappor"),
             campaign_spec("browser", domain=["x", "y", secret_category]),
             campaign_spec("latency", mechanism="duchi")]
    for spec in specs:
        assert http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).status_code == 201
    transport = FlaskBridge(app, BASE)
    client = unpinned(transport=transport, clock=clock)
    for _ in range(50):
        client.report("urls", secret_url)
        client.report("browser", secret_category)
        client.report("latency", 73.123456)
    client.flush()
    assert client.totals.accepted == 150
    everything = b"".join((s.url.encode() + (s.body or b"") + json.dumps(s.headers).encode())
                          for s in transport.sent)
    for raw in (secret_url, secret_category, "73.123456", "very-secret"):
        assert raw.encode() not in everything
    estimates = http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_json()
    assert estimates["n"] == 50


def test_transport_errors_are_typed() -> None:
    from chorus_client import RequestsTransport

    transport = RequestsTransport()
    with pytest.raises(TransportError):
        transport.request("GET", "http://127.0.0.1:9/", body=None, headers={}, timeout=0.5)


def test_campaign_names_are_escaped_in_urls() -> None:
    transport = ScriptedTransport([Response(404, b"{}")])
    client = unpinned(transport=transport)
    assert client.report("a/b?c=d", 1) == "unavailable"
    assert transport.sent[0].url == f"{BASE}/v1/campaigns/a%2Fb%3Fc%3Dd"


def test_report_does_not_retry_a_config_fetch() -> None:
    """report() must not hold the host app in a retry loop when the collector is down."""
    transport = ScriptedTransport([timeout_error()] * 5)
    sleeps: list[float] = []
    client = unpinned(transport=transport, sleep=sleeps.append)
    assert client.report("browser", "a") == "unavailable"
    assert len(transport.sent) == 1
    assert sleeps == []


def test_huge_numbers_are_a_value_domain_error() -> None:
    config = campaign_from_spec(campaign_spec("lat", mechanism="duchi")).public_config()
    client = unpinned(transport=ScriptedTransport([]), campaigns={"lat": config}, strict=True)
    with pytest.raises(ValueDomainError, match="non-finite"):
        client.report("lat", 10**400)


def test_the_library_wsgi_bridge_talks_to_the_collector(make_app: Callable[..., Flask],
                                                         clock: FakeClock) -> None:
    from chorus_client import WSGITransport as Bridge

    app = make_app()
    http = app.test_client()
    http.post("/v1/campaigns", json=campaign_spec("browser"), headers=ADMIN_HEADERS)
    bridge = Bridge(app)
    client = unpinned(transport=bridge, clock=clock)
    assert client.report("browser", "a") == "queued"
    assert client.flush().accepted == 1
    assert [m for m, _, _ in bridge.sent] == ["GET", "POST"]
    assert http.get("/v1/campaigns/browser/estimates", headers=ANALYST_HEADERS).get_json()[
        "n"] == 1


def test_a_failed_config_fetch_is_not_repeated_on_every_report() -> None:
    transport = ScriptedTransport([timeout_error()] * 3)
    clock = FakeClock()
    client = unpinned(transport=transport, clock=clock)
    assert [client.report("x", "a") for _ in range(5)] == ["unavailable"] * 5
    assert len(transport.sent) == 1  # the host app is not held up again for a minute
    clock.now += 61
    client.report("x", "a")
    assert len(transport.sent) == 2


def test_report_after_close_never_raises_into_the_app() -> None:
    client = make_client(ScriptedTransport([], fallback=accepted))
    client.close()
    assert client.report("browser", "a") == "unavailable"


PROBLEM = {"Content-Type": "application/problem+json"}


@pytest.mark.parametrize(("response", "dropped"), [
    (Response(400, b"<html><body>400 Bad Request</body></html>",
              {"Content-Type": "text/html"}), False),  # a proxy's page
    (Response(400, json.dumps({"type": "https://chorus.dev/problems/malformed-json"}).encode(),
              {"Content-Type": "application/json"}), False),  # not a problem document
    (Response(400, json.dumps({"type": "https://example.com/problems/invalid-request"})
              .encode(), PROBLEM), False),  # someone else's problem
    (Response(422, json.dumps({"type": "https://chorus.dev/problems/no-such-kind"}).encode(),
              PROBLEM), False),
    (Response(400, json.dumps({"type": "https://chorus.dev/problems/invalid-request"})
              .encode(), PROBLEM), True),
    (Response(415, json.dumps({"type": "https://chorus.dev/problems/unsupported-media-type"})
              .encode(), {"Content-Type": "application/problem+json; charset=utf-8"}), True),
])
def test_only_a_chorus_refusal_of_the_reports_drops_them(response: Response,
                                                         dropped: bool) -> None:
    """Issue 13 #4: a 400 with an HTML body from a proxy lost 5 reports with their ε spent."""
    clock = FakeClock()
    client = make_client(ScriptedTransport([response], fallback=accepted), clock=clock)
    for value in "abcde":
        client.report("browser", value)
    first = client.flush()
    assert (first.rejected, client.dropped) == ((5, 5) if dropped else (0, 0))
    assert first.pending == (0 if dropped else 5)
    clock.now += 3600  # past the backoff: kept reports go out and are accepted
    assert client.flush().accepted == (0 if dropped else 5)


def test_close_twice_is_harmless_and_later_calls_say_the_client_is_closed(
        tmp_path: Any) -> None:
    """Issue 13 #7: a second close() (atexit after a with block) raised sqlite3 errors."""
    for state in ({"ephemeral": True}, {"state_dir": tmp_path}):
        client = Client(BASE, transport=ScriptedTransport([], fallback=accepted),
                        campaigns={"browser": krr_config()}, send_delay=0.0, **state)
        client.report("browser", "a")
        assert client.close().accepted == 1
        assert client.close() == FlushResult()
        for call in (client.spent, client.pending, client.remaining, client.flush):
            with pytest.raises(ClientError, match="the client is closed"):
                call()
        assert client.report("browser", "a") == "unavailable"


def test_a_refusal_is_warned_once_per_campaign_and_reason_naming_the_setting(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 13 #14: budgets and unavailability were silent (INFO) or repeated every call."""
    client = make_client(ScriptedTransport([]), lifetime_budget=3.0)
    with caplog.at_level(logging.DEBUG, logger="chorus.client"):
        for _ in range(5):
            client.report("browser", "a")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # The pinned campaigns share the lifetime budget: the campaign's share ran out first.
    assert len(warnings) == 1 and "Client(plan=...)" in warnings[0]
    loose = campaign_from_spec(campaign_spec("loose", epsilon=3.0)).public_config()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chorus.client"):
        for _ in range(3):
            unpinned(transport=ScriptedTransport(
                [Response(200, json.dumps(loose).encode())])).report("loose", "a")
    assert "max_epsilon=" in caplog.text


def test_client_randomness_is_unpredictable_by_default() -> None:
    """Regression (a peer library's bug, ../shared/docs/PEERS.md §10).

    pure-LDP and multi-freq-ldpy use Mersenne Twister; predictable coins undo LDP."""
    assert isinstance(resolve_rng(None), secrets.SystemRandom)
    client = Client("http://x.test", ephemeral=True, transport=ScriptedTransport([]))
    assert isinstance(client._rng, secrets.SystemRandom)
