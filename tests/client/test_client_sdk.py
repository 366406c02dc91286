"""The embeddable client over time: budgets, the durable outbox, the sender."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chorus_client import BudgetExceeded, Client, Response, RetryPolicy, TransportError
from chorus_shared import campaign_from_spec
from helpers.support import FakeClock, ScriptedTransport, Sent, timeout_error

BASE = "http://collector.test"


def accepted(call: Sent) -> Response:
    reports = json.loads(call.body or b"{}")["reports"]
    body = {"results": [{"report_id": r["report_id"], "status": "accepted"} for r in reports]}
    return Response(200, json.dumps(body).encode())


def config(mechanism: str = "krr", **privacy: Any) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = {
        "krr": {"epsilon": 1.0, "domain": ["a", "b", "c", "d"]},
        "rappor": {"epsilon": None, "domain": {"kind": "strings"},
                   "params": {"k": 16, "h": 2, "m": 4, "f": 0.5, "p": 0.25, "q": 0.75}},
        "duchi": {"epsilon": 1.0, "domain": {"kind": "numeric", "lo": 0, "hi": 10}},
    }
    spec = {"name": "c", "mechanism": mechanism, **specs[mechanism], "privacy": privacy}
    return campaign_from_spec(spec).public_config()


def client(conf: dict[str, Any], state_dir: Path | None = None, transport: Any = None,
           **kwargs: Any) -> Client:
    kwargs.setdefault("lifetime_budget", math.inf)  # these tests exercise the campaign's budget
    kwargs.setdefault("send_delay", 0.0)
    return Client(BASE, state_dir=state_dir, ephemeral=state_dir is None,
                  transport=transport or ScriptedTransport([], fallback=accepted),
                  campaigns={"c": conf}, sleep=lambda s: None,
                  retry=RetryPolicy(max_attempts=2, base_delay=0), **kwargs)


# -- budget -------------------------------------------------------------------------------------


def test_budget_is_enforced_across_restarts(tmp_path: Path) -> None:
    conf = config(budget=2.0)
    first = client(conf, tmp_path)
    assert [first.report("c", v) for v in "aab"] == ["queued", "queued", "suppressed"]
    assert first.spent() == pytest.approx(2.0)
    assert first.suppressed["budget"] == 1
    del first  # no close(): as if the app were killed
    again = client(conf, tmp_path)
    assert again.report("c", "c") == "suppressed"
    assert again.spent("c") == pytest.approx(2.0)
    assert again.pending() == 2  # the two queued reports survived
    with pytest.raises(BudgetExceeded, match="budget exhausted"):
        client(conf, tmp_path, strict=True).report("c", "d")


def test_the_client_caps_what_a_campaign_may_spend_and_its_epsilon() -> None:
    """The collector states the budget; the client does not have to believe it."""
    greedy = client(config(budget=1000.0), campaign_budget=3.0)
    assert [greedy.report("c", "a") for _ in range(5)].count("queued") == 3
    assert greedy.spent() == pytest.approx(3.0)
    loose = campaign_from_spec({"name": "c", "mechanism": "krr", "epsilon": 11.0,
                                "domain": ["a", "b"]}, warn=False).public_config()
    with pytest.raises(Exception, match="above this client's limit"):
        Client(BASE, ephemeral=True, transport=ScriptedTransport([]), campaigns={"c": loose})


def test_daily_unit_resets_the_budget_each_utc_day() -> None:
    clock = FakeClock(86400 * 20_000 + 3600)
    daily = client(config(unit="day", budget=1.0), clock=clock)
    assert daily.report("c", "a") == "queued"
    assert daily.report("c", "a") == "suppressed"
    clock.now += 86400
    assert daily.report("c", "a") == "queued"
    assert daily.spent() == pytest.approx(2.0)


def test_report_cap_per_period() -> None:
    capped = client(config(max_reports=3, budget=100.0))
    assert [capped.report("c", "a") for _ in range(5)].count("queued") == 3
    assert capped.suppressed["max-reports"] == 2


def test_the_plan_shares_the_lifetime_budget_between_campaigns() -> None:
    confs = {name: campaign_from_spec({"name": name, "mechanism": "krr", "epsilon": 1.0,
                                       "domain": ["a", "b"], "privacy": {"budget": 5.0}}
                                      ).public_config() for name in ("one", "two")}
    limited = Client(BASE, ephemeral=True, transport=ScriptedTransport([]), campaigns=confs,
                     lifetime_budget=3.0, plan={"one": 2.0})
    outcomes = [limited.report(name, "a") for name in ("two", "two", "one", "one", "one")]
    # "one" has the 2 the plan gives it, "two" the 1 left, whoever reports first: "two"
    # cannot take what the plan gives "one".
    assert outcomes == ["queued", "suppressed", "queued", "queued", "suppressed"]
    assert limited.suppressed == {"campaign-budget": 1, "lifetime-budget": 1}
    assert limited.spent() == pytest.approx(3.0)
    assert [(p.campaign, p.budget, p.reports) for p in limited.plan()] == [("one", 2.0, 2),
                                                                           ("two", 1.0, 1)]
    with pytest.raises(ValueError, match="more than the lifetime budget of 3"):
        Client(BASE, ephemeral=True, transport=ScriptedTransport([]), campaigns=confs,
               lifetime_budget=3.0, plan={"one": 2.0, "two": 2.0})


# -- durable outbox -----------------------------------------------------------------------------


def test_outbox_resends_identical_bytes_after_a_crash(tmp_path: Path) -> None:
    conf = config(budget=100.0)
    down = ScriptedTransport([timeout_error()] * 100)
    first = client(conf, tmp_path, transport=down)
    for value in "abcdabcd":
        first.report("c", value)
    assert first.flush().pending == 8
    attempted = json.loads(down.sent[0].body or b"")["reports"]
    del first  # crash: no close, no flush
    up = ScriptedTransport([], fallback=accepted)
    second = client(conf, tmp_path, transport=up)
    result = second.flush()
    assert (result.accepted, result.pending) == (8, 0)
    resent = json.loads(up.sent[0].body or b"")["reports"]
    assert [json.dumps(r, separators=(",", ":")) for r in resent] == \
        [json.dumps(r, separators=(",", ":")) for r in attempted]
    assert up.sent[0].body == down.sent[0].body  # byte for byte
    assert client(conf, tmp_path, transport=up).pending() == 0


def test_a_permanent_refusal_is_dropped_not_retried_forever(tmp_path: Path) -> None:
    problem = json.dumps({"type": "https://chorus.dev/problems/digest-mismatch", "title": "t",
                          "status": 400}).encode()
    refusing = ScriptedTransport([Response(400, problem,
                                           {"Content-Type": "application/problem+json"})])
    sdk = client(config(budget=10.0), tmp_path, transport=refusing)
    sdk.report("c", "a")
    assert sdk.flush().rejected == 1
    assert sdk.pending() == 0
    assert sdk.dropped == 1


# -- sending ------------------------------------------------------------------------------------


def _wait_until(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_background_sender_sends_reports_as_they_become_due() -> None:
    """Reports leave after the end of their (hourly) bucket: a clock held 0.2 s before one
    while the reports are made (on a loaded machine making them can take longer than that,
    which would put them in the next hour's bucket), then running in real time."""
    bucket_end = math.ceil(time.time() / 3600) * 3600
    started: list[float] = []   # the real time the clock was let go, once the reports are in

    def clock() -> float:
        return bucket_end - 0.2 + (time.time() - started[0] if started else 0.0)

    transport = ScriptedTransport([], fallback=accepted)
    sdk = client(config(budget=100.0), transport=transport, background=True,
                 batch_size=2, send_delay=0.3, clock=clock)
    for _ in range(5):
        sdk.report("c", "a")
    assert sdk.pending() == 5
    started.append(time.time())
    assert _wait_until(lambda: sdk.pending() == 0)
    sizes = [len(json.loads(s.body or b"")["reports"]) for s in transport.sent]
    assert sum(sizes) == 5 and max(sizes) <= 2
    sdk.close()


def test_close_keeps_unsent_reports_for_the_next_run(tmp_path: Path) -> None:
    down = ScriptedTransport([timeout_error()] * 100)
    sdk = client(config(budget=10.0), tmp_path, transport=down)
    sdk.report("c", "a")
    result = sdk.close(timeout=1.0)
    assert result.pending == 1
    assert client(config(budget=10.0), tmp_path).pending() == 1


def test_many_threads_report_at_once_with_a_persistent_state(tmp_path: Path) -> None:
    transport = ScriptedTransport([], fallback=accepted)
    sdk = client(config(budget=10_000.0, max_reports=10_000), tmp_path,
                 transport=transport, batch_size=50)

    def work() -> None:
        for i in range(100):
            sdk.report("c", "abcd"[i % 4])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sdk.flush().accepted == 800
    ids = [r["report_id"] for s in transport.sent for r in json.loads(s.body or b"")["reports"]]
    assert len(ids) == len(set(ids)) == 800
    assert sdk.spent() == pytest.approx(800.0)


class SlowDownTransport:
    """Every request takes (most of) its timeout and then fails: a collector that hangs."""

    def __init__(self) -> None:
        self.calls = 0

    def request(self, method: str, url: str, *, body: bytes | None, headers: Any,
                timeout: float) -> Response:
        self.calls += 1
        time.sleep(min(timeout, 0.3))
        raise TransportError("timed out")


def test_close_is_bounded_while_the_sender_retries() -> None:
    sdk = Client(BASE, ephemeral=True, transport=SlowDownTransport(), background=True,
                 batch_size=1, timeout=0.3, campaigns={"c": config(budget=10.0)}, send_delay=0,
                 retry=RetryPolicy(max_attempts=10, base_delay=2.0, max_delay=5.0))
    sdk.report("c", "a")
    time.sleep(0.2)  # let the sender start its retry loop
    started = time.monotonic()
    result = sdk.close(timeout=1.0)
    # Without the bound this took ten attempts with multi-second waits in between.
    assert time.monotonic() - started < 4.0
    assert result.pending == 1


class FlakyTransport:
    def __init__(self) -> None:
        self.calls = 0

    def request(self, method: str, url: str, *, body: bytes | None, headers: Any,
                timeout: float) -> Response:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in a custom transport")
        return accepted(Sent(method, url, body, dict(headers)))


def test_background_sender_survives_an_unexpected_error() -> None:
    transport = FlakyTransport()
    clock = FakeClock(time.time())
    sdk = Client(BASE, ephemeral=True, transport=transport, background=True, batch_size=1,
                 clock=clock, campaigns={"c": config(budget=10.0)}, send_delay=0,
                 retry=RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0))
    sdk.report("c", "a")
    assert _wait_until(lambda: transport.calls >= 1)
    clock.now += 120  # past the hold-off after the error
    sdk.sender.wake.set()
    assert _wait_until(lambda: sdk.pending() == 0)
    assert sdk.sender.thread is not None
    assert sdk.sender.thread.is_alive()
    sdk.close()
