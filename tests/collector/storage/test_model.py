"""A property-based model of the collector (after Janus's simulation tests).

Two collector replicas share one database. Random sequences of uploads, replays,
conflicting replays, invalid reports, lost responses, clock advances, retention runs, folds
(some crashing at a random step), replica switches and queries are checked against a model.
Every report's payload is unique (an index into a large k-RR domain), so the collector's
aggregate must be exactly the indicator of the accepted set: any entry above one is a replay
or a double count.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from chorus_collector import create_app
from chorus_collector.jobs.folding import fold_once
from chorus_collector.jobs.tail import estimate_inputs
from chorus_shared import campaign_from_config, new_report_id
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    NOW,
    FakeClock,
    FaultInjector,
)

HOUR = 3600
FOLD_STEPS = ["read", "map", "begin", "merge", "watermark", "commit"]
DOMAIN = 600
EXPIRY = 3 * HOUR


class CollectorModel(RuleBasedStateMachine):
    # Set by the test below: a new, empty database per example (a SQLite file or a
    # PostgreSQL schema), which two replicas of the collector share.
    new_database: Callable[[], str]

    @initialize()
    def start(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.clock = FakeClock(NOW)
        database = type(self).new_database()
        self.replicas = []
        for _ in range(2):
            app = create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN,
                              "ANALYST_TOKEN": ANALYST}, clock=self.clock)
            faults = FaultInjector(app.wsgi_app)
            app.wsgi_app = faults  # type: ignore[method-assign]
            self.replicas.append((app, faults, app.test_client()))
        self.app, self.faults, self.http = self.replicas[0]
        spec = {"name": "m", "mechanism": "krr", "epsilon": 1.0, "min_batch_size": 1,
                "domain": [f"v{i}" for i in range(DOMAIN)], "report_expiry": EXPIRY}
        config = self.http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
        self.campaign = campaign_from_config(config)
        self.accepted: dict[str, dict[str, Any]] = {}  # report_id → report
        self.next_payload = 0
        self.rng = random.Random(0)

    @rule(replica=st.integers(0, 1))
    def switch_replica(self, replica: int) -> None:
        """Later operations go to the other collector (each has its own group commit,
        connections and campaign cache; they share only the database)."""
        self.app, self.faults, self.http = self.replicas[replica]

    def teardown(self) -> None:
        self.tmp.cleanup()

    # -- helpers --------------------------------------------------------------------------------

    def _new_report(self, offset_buckets: int) -> dict[str, Any]:
        payload = self.next_payload
        self.next_payload += 1
        time = self.campaign.time_bucket(self.clock.now) + offset_buckets * HOUR
        return {"report_id": new_report_id(), "digest": self.campaign.digest,
                "time": time, "payload": payload}

    def _expected(self, report: dict[str, Any]) -> str:
        now = self.clock.now
        if report["time"] > self.campaign.time_bucket(now) + HOUR:
            return "report-too-early"
        if report["time"] < now - EXPIRY:
            return "report-expired"
        return "ok"

    def _post(self, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
        reply = self.http.post("/v1/reports", json={"reports": reports})
        assert reply.status_code == 200, reply.get_data(as_text=True)
        results: list[dict[str, Any]] = reply.get_json()["results"]
        return results

    # -- operations ----------------------------------------------------------------------------

    @rule(offset=st.integers(-4, 2), count=st.integers(1, 4))
    def upload(self, offset: int, count: int) -> None:
        reports = [self._new_report(offset) for _ in range(count)]
        expected = self._expected(reports[0])
        for report, result in zip(reports, self._post(reports), strict=True):
            if expected == "ok":
                assert result["status"] == "accepted"
                self.accepted[report["report_id"]] = report
            else:
                assert (result["status"], result["error"]) == ("rejected", expected)

    @precondition(lambda self: self.accepted)
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        report = self.accepted[data.draw(st.sampled_from(sorted(self.accepted)))]
        result = self._post([report])[0]
        expected = self._expected(report)
        assert result["status"] == ("duplicate" if expected == "ok" else "rejected")

    @precondition(lambda self: self.accepted)
    @rule(data=st.data())
    def replay_with_other_bytes(self, data: st.DataObject) -> None:
        report = self.accepted[data.draw(st.sampled_from(sorted(self.accepted)))]
        altered = {**report, "payload": (report["payload"] + 1) % DOMAIN}
        result = self._post([altered])[0]
        assert result["status"] == "rejected"
        expected = self._expected(report)
        assert result["error"] == ("report-conflict" if expected == "ok" else expected)

    @rule(kind=st.sampled_from(["payload", "digest", "time", "id"]))
    def upload_invalid(self, kind: str) -> None:
        report = self._new_report(0)
        report.update({"payload": {"payload": DOMAIN}, "digest": {"digest": "ab" * 32},
                       "time": {"time": report["time"] + 1},
                       "id": {"report_id": "xyz"}}[kind])
        assert self._post([report])[0]["status"] == "rejected"

    @rule(mode=st.sampled_from(["before", "after"]))
    def upload_with_a_lost_answer_then_retry(self, mode: str) -> None:
        report = self._new_report(0)
        self.faults.fail(mode)
        lost = self.http.post("/v1/reports", json={"reports": [report]})
        assert lost.status_code == 500
        result = self._post([report])[0]
        assert result["status"] == ("duplicate" if mode == "after" else "accepted")
        self.accepted[report["report_id"]] = report

    @rule(hours=st.integers(0, 3), seconds=st.integers(0, HOUR - 1))
    def advance_clock(self, hours: int, seconds: int) -> None:
        self.clock.now += hours * HOUR + seconds

    @rule()
    def collect_garbage(self) -> None:
        # No margin: the tightest the rule allows (dropped exactly when ingest refuses them).
        self.app.extensions["chorus.storage"].drop_expired(self.clock.now, margin=0)

    @rule(limit=st.integers(1, 5))
    def fold_some(self, limit: int) -> None:
        fold_once(self.app.extensions["chorus.storage"], limit=limit, clock=self.clock)

    @rule(limit=st.integers(1, 5), at=st.sampled_from(FOLD_STEPS))
    def fold_and_crash(self, limit: int, at: str) -> None:
        def crash(step: str) -> None:
            if step == at:
                raise RuntimeError(f"injected crash at {step}")

        with contextlib.suppress(RuntimeError):
            fold_once(self.app.extensions["chorus.storage"], limit=limit, clock=self.clock,
                      step=crash)

    @rule()
    def query_twice(self) -> None:
        url = "/v1/campaigns/m/estimates"
        first = self.http.get(url, headers=ANALYST_HEADERS)
        second = self.http.get(url, headers=ANALYST_HEADERS)
        if not self.accepted:
            assert first.status_code == 409
            return
        assert first.get_json()["n"] == len(self.accepted)
        assert first.get_data() == second.get_data()

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def aggregate_is_exactly_the_accepted_set(self) -> None:
        if not hasattr(self, "campaign"):
            return
        storage = self.app.extensions["chorus.storage"]
        stored = storage.get_campaign("m")
        inputs = estimate_inputs(storage, stored, None, None)
        n, state = inputs.n, inputs.state
        expected = np.zeros(DOMAIN, dtype=np.int64)
        for report in self.accepted.values():
            expected[report["payload"]] += 1
        assert int(state.max(initial=0)) <= 1, "a report was counted twice"
        assert n == len(self.accepted)
        assert np.array_equal(state, expected)

    @precondition(lambda self: self.accepted)
    @rule(data=st.data())
    def query_one_bucket(self, data: st.DataObject) -> None:
        times = sorted({r["time"] for r in self.accepted.values()})
        t = data.draw(st.sampled_from(times))
        window = self.http.get(f"/v1/campaigns/m/estimates?start={t}&end={t + HOUR}",
                               headers=ANALYST_HEADERS).get_json()
        assert window["n"] == sum(r["time"] == t for r in self.accepted.values())


def test_collector_model(database: str, request: pytest.FixtureRequest,
                         tmp_path: Path) -> None:
    """Two replicas sharing one database, on the backend the suite runs on."""
    if database.startswith("postgresql:"):
        server = request.getfixturevalue("postgres")
        CollectorModel.new_database = staticmethod(server.new_schema)  # type: ignore[method-assign]
    else:
        paths = (str(tmp_path / f"m{i}.db") for i in range(10**6))
        CollectorModel.new_database = staticmethod(lambda: next(paths))  # type: ignore[method-assign]
    run_state_machine_as_test(CollectorModel, settings=settings(
        max_examples=30, stateful_step_count=25, deadline=None))
