"""``Client.waiting()`` and ``close()`` say what waits in the outbox and when it may leave, so
a developer's first run does not look like a broken client."""

from __future__ import annotations

import json
import logging
import math
import random
from pathlib import Path
from typing import Any

import pytest

from chorus_client import Client, Response, Waiting
from chorus_shared import campaign_from_spec
from helpers.support import NOW, FakeClock, ScriptedTransport, Sent, campaign_spec

BASE = "http://collector.test"
HOUR = 3600


def accepted(call: Sent) -> Response:
    reports = json.loads(call.body or b"{}")["reports"]
    body = {"results": [{"report_id": r["report_id"], "status": "accepted"} for r in reports]}
    return Response(200, json.dumps(body).encode())


def configs() -> dict[str, Any]:
    return {name: campaign_from_spec(campaign_spec(name, time_precision=HOUR)).public_config()
            for name in ("browser", "theme")}


def client_at(clock: FakeClock, tmp_path: Path, transport: Any, **kwargs: Any) -> Client:
    return Client(BASE, state_dir=tmp_path, campaigns=configs(), transport=transport,
                  clock=clock, lifetime_budget=math.inf, background=False,
                  rng=random.Random(3), allow_insecure_rng=True, **kwargs)


def test_waiting_says_per_campaign_when_reports_may_leave(tmp_path: Path) -> None:
    clock = FakeClock(NOW + 600)  # 00:10 UTC, in the bucket [00:00, 01:00)
    client = client_at(clock, tmp_path, ScriptedTransport([], fallback=accepted))
    assert not client.waiting() and str(client.waiting()) == "nothing waits in the outbox"
    for value in "abc":
        assert client.report("browser", value) == "queued"
    client.report("theme", "a")
    waiting = client.waiting()
    assert isinstance(waiting, Waiting) and waiting.reports == 4 == client.pending()
    browser = waiting.campaigns["browser"]
    assert browser.reports == 3
    # Due once the bucket has ended, at a random moment of the next one.
    assert NOW + HOUR <= browser.first_due <= browser.last_due < NOW + 2 * HOUR
    assert waiting.next_due == min(browser.first_due, waiting.campaigns["theme"].first_due)
    text = str(waiting)
    assert text.startswith("4 reports wait (browser: 3 reports leaving from 01:")
    assert "; theme: 1 report leaving from 01:" in text and text.endswith(" UTC)")
    assert client.flush().accepted == 0  # nothing is due yet: the summary is the truth
    clock.now = NOW + 2 * HOUR
    assert str(client.waiting()).startswith("4 reports wait (browser: 3 reports due now")
    assert client.flush().accepted == 4
    assert not client.waiting()
    client.close()


def test_a_collector_that_asked_to_wait_is_said(tmp_path: Path) -> None:
    clock = FakeClock(NOW + 600)
    busy = Response(503, b"", {"Retry-After": "1800"})
    client = client_at(clock, tmp_path, ScriptedTransport([busy] * 8, fallback=accepted),
                       send_delay=0.0)
    client.report("browser", "a")
    assert client.flush().accepted == 0
    waiting = client.waiting()
    assert waiting.held_until is not None and waiting.held_until > clock.now
    assert str(waiting).endswith("; the collector asked to wait or could not be reached: "
                                 "nothing leaves before 00:40 UTC")
    client.close(timeout=0.1)


def test_close_says_what_it_leaves_loudly_until_something_was_acknowledged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(NOW + 600)
    first = client_at(clock, tmp_path / "first", ScriptedTransport([], fallback=accepted))
    first.report("browser", "a")
    with caplog.at_level(logging.INFO, logger="chorus.client"):
        first.close()
    [record] = [r for r in caplog.records if "closing with" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "chorus: closing with 1 report waits (browser: 1 report leaving from 01:")
    assert "says nothing about when it was made" in record.getMessage()
    caplog.clear()

    later = client_at(clock, tmp_path / "later", ScriptedTransport([], fallback=accepted),
                      send_delay=0.0)
    later.report("browser", "a")
    assert later.flush().accepted == 1
    later.send_delay = None  # the next report waits for its bucket
    later.report("browser", "b")
    with caplog.at_level(logging.INFO, logger="chorus.client"):
        later.close()
    [record] = [r for r in caplog.records if "closing with" in r.getMessage()]
    assert record.levelno == logging.INFO  # routine once reports get through
    caplog.clear()

    empty = client_at(clock, tmp_path / "empty", ScriptedTransport([], fallback=accepted))
    with caplog.at_level(logging.INFO, logger="chorus.client"):
        empty.close()
    assert not [r for r in caplog.records if "closing with" in r.getMessage()]
