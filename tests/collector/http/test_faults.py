"""Fault injection (after Janus's simulation proxy): a request lost before the handler, and a
response lost after the commit. The client retries the same bytes; every report counts once."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from flask import Flask

from chorus_client import Client, RetryPolicy
from helpers.support import (
    ADMIN_HEADERS,
    ANALYST_HEADERS,
    FakeClock,
    FaultInjector,
    FlaskBridge,
    campaign_spec,
    query,
)


@pytest.mark.parametrize("mode", ["before", "after"])
def test_a_lost_request_or_response_never_double_counts(make_app: Callable[..., Flask],
                                                        clock: FakeClock, database: str,
                                                        mode: str) -> None:
    app = make_app()
    http = app.test_client()
    http.post("/v1/campaigns", json=campaign_spec("b"), headers=ADMIN_HEADERS)
    faults = FaultInjector(app.wsgi_app)
    app.wsgi_app = faults  # type: ignore[method-assign]
    transport = FlaskBridge(app)
    client = Client("http://collector.test", ephemeral=True, allow_unpinned=True,
                    send_delay=0.0, lifetime_budget=math.inf, transport=transport, clock=clock,
                    retry=RetryPolicy(max_attempts=3, base_delay=0), sleep=lambda s: None)
    for value in "abcdabcd":
        client.report("b", value)
    faults.fail(mode, times=2)
    result = client.flush()
    posts = [s for s in transport.sent if s.method == "POST"]
    assert len(posts) == 3
    assert len({s.body for s in posts}) == 1  # identical bytes on every retry
    if mode == "after":
        assert (result.accepted, result.duplicate) == (0, 8)  # stored by the first attempt
    else:
        assert (result.accepted, result.duplicate) == (8, 0)
    assert query(database, "SELECT count(*) FROM reports") == [(8,)]
    estimate = http.get("/v1/campaigns/b/estimates", headers=ANALYST_HEADERS).get_json()
    assert estimate["n"] == 8
