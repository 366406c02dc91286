"""The threat model against the TypeScript client: a hostile collector on 127.0.0.1 drives the
real client in Node, which must hold (the cases of tests/client/test_threat_model.py that apply
to what client-ts implements: configs rotated, inflated or too fine; cookies; value-dependent
sending; arrival times; malformed configs; what the state file holds).

The collector here is a scripted HTTP server, not Chorus's: it serves whatever config it likes
(optionally a new digest on every fetch, by a cosmetic change), sets a tracking cookie on
every answer, accepts every report and records every request.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from chorus_shared import campaign_from_spec
from helpers.client_ts import drive, stored_state
from helpers.support import NOW

DAY = 86400


def spec(name: str, mechanism: str = "krr", **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": name, "mechanism": mechanism, "epsilon": 1.0,
                            "domain": ["light", "dark", "hc", "sepia"]}
    base.update(overrides)
    return base


def public(definition: Mapping[str, Any]) -> dict[str, Any]:
    return dict(campaign_from_spec(dict(definition), warn=False).public_config())


@dataclass
class Hostile:
    """What the hostile collector serves and what it saw."""

    specs: dict[str, dict[str, Any]]
    rotate: bool = False
    raw: dict[str, bytes] = field(default_factory=dict)  # name → a body served as is
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    versions: Iterator[int] = field(default_factory=itertools.count)
    url: str = ""

    def config(self, name: str) -> bytes:
        if name in self.raw:
            return self.raw[name]
        served = dict(self.specs[name])
        if self.rotate:  # a cosmetic change: a new digest on every fetch
            served["description"] = f"v{next(self.versions)}"
        return json.dumps(public(served)).encode()

    def gets(self) -> list[str]:
        return [path.rsplit("/", 1)[1] for method, path, _, _ in self.requests if method == "GET"]

    def posts(self) -> list[tuple[dict[str, str], list[dict[str, Any]]]]:
        return [(headers, json.loads(body)["reports"])
                for method, _, headers, body in self.requests if method == "POST"]

    def reports(self) -> list[dict[str, Any]]:
        return [report for _, batch in self.posts() for report in batch]


def _handler(hostile: Hostile) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Set-Cookie", "track=install-4711; Path=/; Max-Age=31536000")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            hostile.requests.append(("GET", self.path, dict(self.headers), b""))
            name = self.path.rsplit("/", 1)[1]
            if name in hostile.specs or name in hostile.raw:
                self._answer(200, hostile.config(name))
            else:
                self._answer(404, b"{}")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hostile.requests.append(("POST", self.path, dict(self.headers), body))
            results = [{"report_id": r["report_id"], "status": "accepted"}
                       for r in json.loads(body)["reports"]]
            self._answer(200, json.dumps({"results": results}).encode())

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start(hostile: Hostile) -> Hostile:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hostile))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        hostile.url = f"http://127.0.0.1:{server.server_address[1]}"
        return hostile

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(5)


def run(build: Path, work: Path, hostile: Hostile, steps: list[dict[str, Any]], *,
        state: Path | None = None, **client: Any) -> dict[str, Any]:
    client.setdefault("sendDelay", 0)
    return drive(build, work, {"url": hostile.url, "state": None if state is None else str(state),
                               "now": NOW + 60, "client": client, "steps": steps})


def report(campaign: str, value: Any) -> dict[str, Any]:
    return {"op": "report", "campaign": campaign, "value": value}


# -- the app owns the policy ----------------------------------------------------------------


def test_a_served_config_that_differs_from_the_pinned_digest_is_refused(
        build: Path, tmp_path: Path, serve: Any) -> None:
    honest = public(spec("theme"))["digest"]
    evil = serve(Hostile({"theme": spec("theme")}, rotate=True))
    out = run(build, tmp_path / "evil", evil,
              [{"op": "prepare"}, report("theme", "dark"), {"op": "flush"}, {"op": "spent"}],
              campaigns={"theme": honest})
    assert out["results"][:2] == [{"theme": False}, "unavailable"]
    assert out["results"][3] == 0
    assert evil.posts() == []
    assert any("pinned" in line for line in out["log"]), out["log"]
    fair = serve(Hostile({"theme": spec("theme")}))
    out = run(build, tmp_path / "fair", fair, [{"op": "prepare"}, report("theme", "dark")],
              campaigns={"theme": honest})
    assert out["results"] == [{"theme": True}, "queued"]


def test_a_shipped_config_is_never_fetched_and_unpinned_campaigns_need_an_opt_in(
        build: Path, tmp_path: Path, serve: Any) -> None:
    evil = serve(Hostile({"theme": spec("theme"), "other": spec("other")}))
    shipped = public(spec("theme"))
    out = run(build, tmp_path / "a", evil,
              [report("theme", "dark"), report("other", "dark"), {"op": "flush"}],
              campaigns={"theme": shipped})
    assert out["results"][:2] == ["queued", "unavailable"]
    assert evil.gets() == []  # neither the pinned nor the unpinned campaign was asked for
    out = run(build, tmp_path / "b", evil, [report("other", "dark")], allowUnpinned=True)
    assert out["results"] == ["queued"]
    assert evil.gets() == ["other"]


def test_rotating_digests_do_not_reset_the_ledger(build: Path, tmp_path: Path,
                                                  serve: Any) -> None:
    """30 app starts two days apart, each refreshing the config to a fresh digest: the ledger is
    keyed by the campaign's name, so the default budget (one report's ε) still pays for one."""
    evil = serve(Hostile({"theme": spec("theme")}, rotate=True))
    out = run(build, tmp_path / "drive", evil, [
        {"op": "loop", "times": 30, "advance": 2 * DAY, "steps": [
            {"op": "flush"}, report("theme", "dark"), {"op": "flush"}, {"op": "restart"}]},
        {"op": "spent", "campaign": "theme"},
    ], state=tmp_path / "state.json", allowUnpinned=True)
    assert out["results"] == [{"queued": 1, "suppressed": 29}, 1]
    assert len(evil.gets()) >= 15  # the config was refreshed (and its digest changed) every start
    assert len(evil.reports()) == 1


def test_budget_inflating_configs_are_held_by_the_lifetime_budget(
        build: Path, tmp_path: Path, serve: Any) -> None:
    """Daily unit, a huge budget, ten campaigns, five calls a day for a year: the default
    lifetime budget (8) holds."""
    greedy = {"privacy": {"unit": "day", "budget": 1e6, "max_reports": 10**6}}
    names = [f"c{i}" for i in range(10)]
    evil = serve(Hostile({n: spec(n, epsilon=2.0, **greedy) for n in names}))
    calls = [report(name, "dark") for name in names for _ in range(5)]
    out = run(build, tmp_path / "drive", evil, [
        {"op": "loop", "times": 365, "advance": DAY, "steps": calls},
        {"op": "flush"}, {"op": "spent"},
    ], allowUnpinned=True)
    outcomes, flushed, spent = out["results"]
    assert spent == pytest.approx(8.0)
    assert outcomes["queued"] == 4 and sum(outcomes.values()) == 365 * 50
    assert len(evil.reports()) + flushed["pending"] == 4


@pytest.mark.parametrize(("epsilon", "outcome"),
                         [(2.0, "queued"), (2.0001, "unavailable"), (10.0, "unavailable")])
def test_the_per_report_epsilon_ceiling_is_inclusive_and_defaults_to_two(
        build: Path, tmp_path: Path, serve: Any, epsilon: float, outcome: str) -> None:
    evil = serve(Hostile({"x": spec("x", epsilon=epsilon)}))
    out = run(build, tmp_path, evil, [report("x", "dark")], allowUnpinned=True)
    assert out["results"] == [outcome]


def test_one_second_buckets_are_refused(build: Path, tmp_path: Path, serve: Any) -> None:
    evil = serve(Hostile({"fine": spec("fine", time_precision=1),
                          "hourly": spec("hourly", time_precision=3600)}))
    out = run(build, tmp_path, evil, [report("fine", "dark"), report("hourly", "dark")],
              allowUnpinned=True)
    assert out["results"] == ["unavailable", "queued"]
    assert any("finer than this client's limit" in line for line in out["log"]), out["log"]


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"epsilon": NaN}', b"[" * 100_000,
                                  json.dumps({**public(spec("m")), "epsilon": 0.5}).encode()])
def test_a_malformed_or_understated_config_never_crashes_report(
        build: Path, tmp_path: Path, serve: Any, body: bytes) -> None:
    evil = serve(Hostile({}, raw={"m": body}))
    out = run(build, tmp_path, evil, [report("m", "dark"), report("m", "dark")],
              allowUnpinned=True)
    assert out["results"] == ["unavailable", "unavailable"]


# -- sending never depends on the value -------------------------------------------------------

SEQUENCES = [["dark", "dark", "light", "dark", "hc", "hc", "dark"],
             ["dark"] * 7,
             ["light", "dark", "hc", "sepia", "light", "dark", "hc"],
             ["dark", "neon-secret", None, 42, "dark", "dark", "dark"]]  # some outside the domain


def test_whether_a_report_is_sent_does_not_depend_on_the_value(
        build: Path, tmp_path: Path, serve: Any) -> None:
    """One report a day; what the network saw each day. Repeats, changes and unknown values
    send alike, the budget runs out after the same count, and no log line quotes a value."""
    patterns = []
    for i, values in enumerate(SEQUENCES):
        evil = serve(Hostile({"theme": spec("theme", privacy={"budget": 4.0})}))
        steps = [step for value in values
                 for step in (report("theme", value), {"op": "flush"},
                              {"op": "advance", "seconds": DAY})]
        out = run(build, tmp_path / str(i), evil, steps, state=tmp_path / f"{i}.json",
                  allowUnpinned=True)
        patterns.append(["SENT" if flushed["accepted"] else "--"
                         for flushed in out["results"][1::3]])
        assert not any(secret in line for line in out["log"] for secret in ("neon", "42"))
    assert patterns == [["SENT"] * 4 + ["--"] * 3] * len(SEQUENCES)


def test_arrival_times_do_not_reveal_when_in_its_bucket_a_report_was_made(
        build: Path, tmp_path: Path, serve: Any) -> None:
    """Reports made anywhere in an hourly bucket leave at uniformly random times during the
    next hour: never before the bucket ends, and uncorrelated with the moment of report()."""
    n = 1000
    evil = serve(Hostile({"x": spec("x", privacy={"budget": 1e4, "max_reports": 10**4})}))
    # The app fetches the config at start-up; then NOW, an hour's start.
    steps: list[dict[str, Any]] = [{"op": "campaign", "campaign": "x"},
                                   {"op": "advance", "seconds": -60}]
    made = []
    for i in range(n):
        moment = (i % 20) * 180  # 20 moments spread over the bucket
        made.append(moment)
        steps += [{"op": "advance", "seconds": moment}, report("x", "dark"), {"op": "flush"},
                  {"op": "advance", "seconds": -moment}]
    steps += [{"op": "advance", "seconds": 5400}, {"op": "flush"},
              {"op": "advance", "seconds": 1800}, {"op": "flush"}]
    state = tmp_path / "state.json"
    # The first flush half-way through the next hour must leave the second something to send:
    # the state file is read between the two runs.
    out = run(build, tmp_path / "made", evil, steps[:-4], state=state, allowUnpinned=True,
              sendDelay=None, seed=4, caps={"lifetimeBudget": 1e4})
    assert set(out["results"][3::4]) == {"queued"}
    assert evil.posts() == []  # nothing leaves before the bucket ends
    outbox = stored_state(build, state)["outbox"]
    assert {row["bucket"] for row in outbox} == {NOW}  # the file keeps the bucket, not the moment
    assert all(set(row) == {"seq", "campaign", "wire", "bucket", "due", "epsilon"}
               for row in outbox)
    late = [row["due"] - (NOW + 3600) for row in outbox]
    assert all(0 <= d < 3600 for d in late)
    counts = Counter(min(int(d / 360), 9) for d in late)
    chi2 = sum((counts[b] - n / 10) ** 2 / (n / 10) for b in range(10))
    assert chi2 < 33.7  # χ²(9) quantile at 1 − 10⁻⁴: uniform over the next hour
    mean_c, mean_d = sum(made) / n, sum(late) / n
    cov = sum((c - mean_c) * (d - mean_d) for c, d in zip(made, late, strict=True))
    corr = cov / math.sqrt(sum((c - mean_c) ** 2 for c in made)
                           * sum((d - mean_d) ** 2 for d in late))
    assert abs(corr) < 4 / math.sqrt(n)  # no dependence on the moment of report()
    out = run(build, tmp_path / "sent", evil, [
        {"op": "advance", "seconds": 3540 + 1800}, {"op": "flush"},
        {"op": "advance", "seconds": 1800}, {"op": "flush"}],
        state=state, allowUnpinned=True, sendDelay=None, caps={"lifetimeBudget": 1e4})
    half, rest = out["results"][1]["accepted"], out["results"][3]["accepted"]
    assert abs(half - n / 2) < 4 * math.sqrt(n / 4)  # about half are due half-way through
    assert half + rest == n


# -- network metadata and what the device keeps -------------------------------------------------


def test_no_cookies_generic_headers_and_one_campaign_per_request(
        build: Path, tmp_path: Path, serve: Any) -> None:
    """Over real HTTP on loopback, against a server that sets a tracking cookie."""
    evil = serve(Hostile({name: spec(name, privacy={"budget": 2.0}) for name in ("os", "theme")}))
    run(build, tmp_path, evil, [report("os", "dark"), report("theme", "dark"),
                                report("os", "light"), report("theme", "light"),
                                {"op": "flush"}, {"op": "close"}], allowUnpinned=True)
    methods = Counter(method for method, *_ in evil.requests)
    assert methods == {"GET": 2, "POST": 2}
    generic = {"host", "connection", "content-type", "content-length", "accept",
               "accept-language", "accept-encoding", "sec-fetch-mode", "user-agent", "pragma",
               "cache-control"}
    for _, _, headers, body in evil.requests:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert "cookie" not in lowered
        assert lowered["connection"] == "close"
        assert set(lowered) <= generic, set(lowered) - generic
        assert not any(ch.isdigit() for ch in lowered.get("user-agent", ""))
        if body:
            assert len({r["digest"] for r in json.loads(body)["reports"]}) == 1


def test_the_state_file_holds_no_value(build: Path, tmp_path: Path, serve: Any) -> None:
    evil = serve(Hostile({"x": spec("x", privacy={"budget": 4.0})}))
    state = tmp_path / "state.json"
    out = run(build, tmp_path, evil, [{"op": "campaign", "campaign": "x"},
                                      report("x", "hiv-clinic"), report("x", "dark"),
                                      {"op": "flush"}, report("x", "light")],
              state=state, allowUnpinned=True, sendDelay=None)
    assert out["results"][1] == "substituted"
    # Every file the store keeps: the snapshot and the journal of the commits since.
    files = [state, state.with_name(state.name + ".journal")]
    assert files[1].stat().st_size > 0  # the last report's commit is in the journal
    text = "".join(file.read_text() for file in files)
    assert "hiv" not in text and '"dark"' not in text and '"light"' not in text
    held = stored_state(build, state)
    assert set(held) == {"format", "ledger", "plans", "slotsUsed", "outbox", "nextSeq",
                         "sentLog", "configs"}
