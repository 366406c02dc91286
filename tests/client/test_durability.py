"""The ledger is durable before a report leaves the device, without an fsync per report.

Commits run with ``synchronous=NORMAL`` in WAL mode: they survive the process being killed,
and a power loss can only roll back the last charges together with their queued reports.
So the client fsyncs the WAL once per batch, after reading the rows to send and before
sending them (:meth:`ClientState.make_durable`).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from chorus_client import Client, Response, RetryPolicy
from chorus_client.state import FILE_NAME, ClientState
from chorus_shared import campaign_from_spec
from helpers.support import timeout_error

BASE = "http://collector.test"
CONFIG = campaign_from_spec({"name": "c", "mechanism": "krr", "epsilon": 1.0,
                             "domain": ["a", "b", "c", "d"],
                             "privacy": {"budget": 1e6, "max_reports": 10**6}}).public_config()


def _answer(body: bytes | None) -> Response:
    reports = json.loads(body or b"{}")["reports"]
    results = [{"report_id": r["report_id"], "status": "accepted"} for r in reports]
    return Response(200, json.dumps({"results": results}).encode())


def test_the_state_file_uses_wal_and_synchronous_normal(tmp_path: Path) -> None:
    state = ClientState(tmp_path)
    assert state._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert state._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    state.close()
    with sqlite3.connect(tmp_path / FILE_NAME) as other:  # WAL is a property of the file
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


class EventTransport:
    """Answers from a script (then accepts everything) and writes each request in a log."""

    def __init__(self, events: list[tuple[str, Any]],
                 script: list[Response | Exception]) -> None:
        self.events = events
        self.script = script

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        ids = [r["report_id"] for r in json.loads(body or b"{}")["reports"]]
        self.events.append(("send", ids))
        step = self.script.pop(0) if self.script else _answer(body)
        if isinstance(step, Exception):
            raise step
        return step


def test_the_wal_is_fsynced_after_reading_the_rows_and_before_every_send(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries, a split batch, several batches, and reports made between flushes: every
    request goes out after an fsync of the WAL that follows the last outbox read, and every
    report in it was charged (committed) before that fsync."""
    events: list[tuple[str, Any]] = []
    transport = EventTransport(events, [timeout_error(), timeout_error(), Response(413)])
    sdk = Client(BASE, state_dir=tmp_path, transport=transport, campaigns={"c": CONFIG},
                 send_delay=0.0, lifetime_budget=math.inf, batch_size=4,
                 retry=RetryPolicy(max_attempts=2, base_delay=0), sleep=lambda s: None)
    state = sdk._state
    wal = tmp_path / f"{FILE_NAME}-wal"
    real_fsync, real_outbox, real_charge = os.fsync, state.outbox, state.charge_and_queue

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if os.fstat(fd).st_ino == wal.stat().st_ino:
            events.append(("fsync-wal", None))

    def outbox(limit: int, due_by: float = math.inf) -> list[tuple[int, str]]:
        rows = real_outbox(limit, due_by)
        events.append(("read", None))
        return rows

    def charge_and_queue(**kwargs: Any) -> Any:
        decision = real_charge(**kwargs)  # returns once committed
        events.append(("charged", json.loads(kwargs["report"])["report_id"]))
        return decision

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(state, "outbox", outbox)
    monkeypatch.setattr(state, "charge_and_queue", charge_and_queue)
    for value in "abc":
        sdk.report("c", value)
    assert sdk.flush().pending == 3  # two timeouts: kept
    # Reporting alone never fsyncs: the first fsync follows the first read of the outbox.
    assert events.index(("fsync-wal", None)) > events.index(("read", None)) > 2
    for value in "dabcd":
        sdk.report("c", value)
    assert sdk.flush().accepted == 8  # a 413, halves, then the rest
    sdk.report("c", "a")
    assert sdk.flush().accepted == 1

    sends = [i for i, (kind, _) in enumerate(events) if kind == "send"]
    assert len(sends) == 2 + 1 + 4 + 1
    for i in sends:
        last_read = max(j for j in range(i) if events[j][0] == "read")
        synced = [j for j in range(last_read, i) if events[j][0] == "fsync-wal"]
        assert synced, f"request {events[i]} sent without an fsync after its rows were read"
        charged = {rid for kind, rid in events[:synced[-1]] if kind == "charged"}
        assert set(events[i][1]) <= charged
    sdk.close()


CHILD = """
import json, math, os, sys
from chorus_client import Client, Response

state_dir, log_path, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
kill_at = int(sys.argv[4])  # kill itself once this request is sent (0: never)
log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
requests = 0

class Recording:
    def request(self, method, url, *, body, headers, timeout):
        global requests
        reports = json.loads(body)["reports"]
        # One write per request, before the answer: what the collector would have received.
        os.write(log, (json.dumps([r["report_id"] for r in reports]) + "\\n").encode())
        requests += 1
        if requests == kill_at:
            os.kill(os.getpid(), 9)
        results = [{"report_id": r["report_id"], "status": "accepted"} for r in reports]
        return Response(200, json.dumps({"results": results}).encode())

client = Client("http://collector.test", state_dir=state_dir, transport=Recording(),
                campaigns={"c": config}, send_delay=0.0, lifetime_budget=math.inf,
                batch_size=7)
while True:
    for value in "abcdabcdab":
        client.report("c", value)
    client.flush()
"""


def _sent(log: Path) -> list[str]:
    if not log.exists():
        return []
    lines = log.read_text().splitlines(keepends=True)
    return [rid for line in lines if line.endswith("\n") for rid in json.loads(line)]


def _ledger_and_outbox(state_dir: Path) -> tuple[int, float, list[str]]:
    with sqlite3.connect(state_dir / FILE_NAME) as conn:
        count, epsilon = conn.execute(
            "SELECT coalesce(sum(reports), 0), coalesce(sum(epsilon), 0) FROM ledger").fetchone()
        queued = [json.loads(r)["report_id"] for (r,) in conn.execute("SELECT report FROM outbox")]
    conn.close()
    return int(count), float(epsilon), queued


def test_kill_9_of_the_client_neither_double_charges_nor_loses_a_sent_reports_charge(
        tmp_path: Path) -> None:
    """A client process reports and sends in a loop and is killed with SIGKILL: twice at a
    random moment, then by itself right after a request went out (before its answer could
    remove the reports from the outbox), all on the same state. Every report is charged
    exactly once: the ledger counts exactly the reports sent or still queued, and a restart
    sends the queued ones (some already sent once: the collector drops those as duplicates)
    without charging anything again."""
    state_dir, log = tmp_path / "state", tmp_path / "sent.log"
    jitter = random.Random(0)
    for kill_at in (0, 0, 3):
        before = len(_sent(log))
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(state_dir), str(log),
                                  json.dumps(CONFIG), str(kill_at)])
        try:
            deadline = time.monotonic() + 30
            while len(_sent(log)) < before + 30 and child.poll() is None:
                assert time.monotonic() < deadline, "the client process made no progress"
                time.sleep(0.01)
            time.sleep(jitter.uniform(0, 0.05))
        finally:
            child.send_signal(signal.SIGKILL)
            assert child.wait(10) == -signal.SIGKILL
        count, epsilon, queued = _ledger_and_outbox(state_dir)
        # A report killed between its send and its removal is both sent and queued.
        assert count == len(set(_sent(log)) | set(queued))  # each charged once, none lost
        assert epsilon == pytest.approx(count * 1.0)
    last_request = json.loads(log.read_text().splitlines()[-1])
    assert set(last_request) <= set(queued)  # sent, never answered: still queued

    sent = set(_sent(log))
    events: list[tuple[str, Any]] = []
    restarted = Client(BASE, state_dir=state_dir, transport=EventTransport(events, []),
                       campaigns={"c": CONFIG}, send_delay=0.0, lifetime_budget=math.inf)
    assert restarted.flush().accepted == len(queued)
    assert sorted(rid for _, ids in events for rid in ids) == sorted(queued)
    assert restarted.pending() == 0
    assert restarted.spent() == pytest.approx(count * 1.0)  # resending charged nothing
    assert len(sent | set(queued)) == count
    restarted.close()
