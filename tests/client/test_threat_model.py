"""The threat model as tests: a hostile collector drives the real client, which must hold.

Each test plays one attack from docs/threat-model.md (and ../shared/docs/PRIVACY-REVIEW.md)
against ``Client`` with its defaults unless the attack needs otherwise: configs rotated,
inflated, targeted or shrunk by the collector, cookies, fine time buckets, value-dependent
suppression, and linking payloads across days.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
import shutil
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chorus_client import CampaignUnavailable, Client, Response, ValueDomainError
from chorus_client.spend import FileSpendCounter
from chorus_client.state import FILE_NAME
from chorus_shared import campaign_from_spec
from chorus_shared.campaign import Campaign
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import Rappor
from helpers.examples import EXAMPLES
from helpers.support import NOW, FakeClock, ScriptedTransport

BASE = "http://evil.test"
DAY = 86400.0


def spec(name: str, mechanism: str = "krr", **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": name, "mechanism": mechanism, "epsilon": 1.0,
                            "domain": ["light", "dark", "hc", "sepia"]}
    base.update(overrides)
    return base


class EvilCollector:
    """A Transport that serves whatever config it likes and records every request."""

    def __init__(self, specs: Mapping[str, Mapping[str, Any]], rotate: bool = False) -> None:
        self.specs = dict(specs)
        self.rotate = rotate
        self.versions = itertools.count()
        self.gets: list[str] = []
        self.posts: list[tuple[dict[str, str], list[dict[str, Any]]]] = []

    def config(self, name: str) -> dict[str, Any]:
        served = dict(self.specs[name])
        if self.rotate:  # a cosmetic change: a new digest every time it is fetched
            served["description"] = f"v{next(self.versions)}"
        return campaign_from_spec(served, warn=False).public_config()

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        if method == "GET":
            name = url.rsplit("/", 1)[1]
            self.gets.append(name)
            return Response(200, json.dumps(self.config(name)).encode())
        reports = json.loads(body or b"{}")["reports"]
        self.posts.append((dict(headers), reports))
        results = [{"report_id": r["report_id"], "status": "accepted"} for r in reports]
        return Response(200, json.dumps({"results": results}).encode())

    def reports(self) -> list[dict[str, Any]]:
        return [report for _, batch in self.posts for report in batch]


def evil_client(evil: EvilCollector, state_dir: Path | None, **kwargs: Any) -> Client:
    kwargs.setdefault("send_delay", 0.0)
    if state_dir is None:
        kwargs["ephemeral"] = True
    return Client(BASE, state_dir=state_dir, transport=evil, **kwargs)


# -- the app owns the policy ----------------------------------------------------------------


def test_a_served_config_that_differs_from_the_pinned_digest_is_refused(tmp_path: Path) -> None:
    evil = EvilCollector({"theme": spec("theme")}, rotate=True)
    honest = campaign_from_spec(spec("theme"))
    client = evil_client(evil, tmp_path, campaigns={"theme": honest.digest})
    assert client.report("theme", "dark") == "unavailable"
    assert client.pending() == 0 and client.spent() == 0
    with pytest.raises(CampaignUnavailable, match="not the pinned"):
        evil_client(evil, tmp_path, campaigns={"theme": honest.digest}, strict=True) \
            .report("theme", "dark")
    # The same digest served honestly is accepted.
    fair = EvilCollector({"theme": spec("theme")})
    assert evil_client(fair, tmp_path, campaigns={"theme": honest.digest}) \
        .report("theme", "dark") == "queued"


def test_a_shipped_config_is_never_fetched_and_unpinned_campaigns_need_an_opt_in() -> None:
    evil = EvilCollector({"theme": spec("theme"), "other": spec("other")})
    shipped = campaign_from_spec(spec("theme")).public_config()
    client = evil_client(evil, None, campaigns={"theme": shipped})
    assert client.report("theme", "dark") == "queued"
    assert client.report("other", "dark") == "unavailable"
    assert evil.gets == []  # neither the pinned nor the unpinned campaign was asked for
    opted_in = evil_client(evil, None, allow_unpinned=True)
    assert opted_in.report("other", "dark") == "queued"
    assert evil.gets == ["other"]


def test_rotating_digests_do_not_reset_the_ledger(tmp_path: Path) -> None:
    """200 app starts, each served a fresh digest: the ledger is keyed by campaign name."""
    evil = EvilCollector({"theme": spec("theme")}, rotate=True)
    outcomes = Counter()
    for _ in range(200):
        client = evil_client(evil, tmp_path, allow_unpinned=True)
        outcomes[client.report("theme", "dark")] += 1
        client.flush()
        client.close()
    assert outcomes == {"queued": 1, "suppressed": 199}  # the default budget: one report's ε
    assert len({r["digest"] for r in evil.reports()}) == 1
    assert evil_client(evil, tmp_path).spent("theme") == pytest.approx(1.0)


def test_budget_inflating_configs_are_held_by_the_lifetime_budget(tmp_path: Path) -> None:
    """Daily unit, a huge budget, ten campaigns, five calls a day for a year: the default
    lifetime budget bounds the total, and each campaign states its worst case."""
    greedy = {"privacy": {"unit": "day", "budget": 1e6, "max_reports": 10**6}}
    names = [f"c{i}" for i in range(10)]
    evil = EvilCollector({n: spec(n, epsilon=2.0, **greedy) for n in names})
    clock = FakeClock()
    client = evil_client(evil, tmp_path, allow_unpinned=True, clock=clock)
    for _day in range(365):
        for name in names:
            for _ in range(5):
                client.report(name, "dark")
        clock.now += DAY
    assert client.spent() == pytest.approx(8.0)
    assert len(evil.reports()) + client.pending() == 4
    bound = client.worst_case("c0")
    assert (bound.per_report, bound.per_year, bound.lifetime) == (2.0, 8.0, 8.0)
    public = evil.config("c0")["worst_case"]
    assert public["per_365_days"] == pytest.approx(2.0 * 500_000 * 366)


@pytest.mark.parametrize(("epsilon", "accepted"), [(2.0, True), (2.0001, False), (10.0, False)])
def test_the_per_report_epsilon_ceiling_is_inclusive_and_defaults_to_two(
        epsilon: float, accepted: bool) -> None:
    evil = EvilCollector({"x": spec("x", epsilon=epsilon)})
    client = evil_client(evil, None, allow_unpinned=True)
    assert (client.report("x", "dark") == "queued") is accepted


def test_one_second_buckets_are_refused() -> None:
    evil = EvilCollector({"fine": spec("fine", time_precision=1),
                          "hourly": spec("hourly", time_precision=3600)})
    client = evil_client(evil, None, allow_unpinned=True, strict=True)
    with pytest.raises(CampaignUnavailable, match="finer than this client's limit"):
        client.report("fine", "dark")
    assert client.report("hourly", "dark") == "queued"


def test_understated_derived_facts_are_refused() -> None:
    honest = campaign_from_spec(spec("x")).public_config()
    for field, fake in (("derived", {**honest["derived"], "epsilon": 0.1}),
                        ("worst_case", {**honest["worst_case"], "per_365_days": 0.1}),
                        ("warnings", ["nothing to see"])):
        with pytest.raises(CampaignUnavailable, match=f"{field} .* does not match"):
            evil_client(EvilCollector({}), None, campaigns={"x": {**honest, field: fake}})


def test_persistent_state_or_an_explicit_ephemeral_client() -> None:
    with pytest.raises(ValueError, match="state_dir"):
        Client(BASE, transport=EvilCollector({}))
    with pytest.raises(ValueError, match="allow_insecure_rng"):
        Client(BASE, ephemeral=True, rng=random.Random(1))
    assert Client(BASE, ephemeral=True, rng=random.Random(1), allow_insecure_rng=True)


def test_memoization_cannot_be_configured() -> None:
    with pytest.raises(CampaignError, match="memoize is not supported"):
        campaign_from_spec(spec("x", privacy={"memoize": True}))


# -- sending never depends on the value -------------------------------------------------------


def _day_by_day(values: list[object], tmp_path: Path, **kwargs: Any) -> list[str]:
    """One report a day; what the network saw each day: a request, or none."""
    evil = EvilCollector({"theme": spec("theme", privacy={"budget": 4.0})})
    clock = FakeClock()
    client = evil_client(evil, tmp_path, allow_unpinned=True, clock=clock, **kwargs)
    seen = []
    for value in values:
        before = len(evil.posts)
        client.report("theme", value)
        client.flush()
        seen.append("SENT" if len(evil.posts) > before else "--")
        clock.now += DAY
    return seen


def test_whether_a_report_is_sent_does_not_depend_on_the_value(tmp_path: Path) -> None:
    """The review's daily theme: repeats, changes and an unknown value send alike, and the
    budget runs out after the same number of reports whatever the values."""
    sequences = [["dark", "dark", "light", "dark", "hc", "hc", "dark"],
                 ["dark"] * 7,
                 ["light", "dark", "hc", "sepia", "light", "dark", "hc"],
                 ["dark", "neon", None, 42, "dark", "dark", "dark"]]  # some outside the domain
    patterns = [_day_by_day(values, tmp_path / str(i)) for i, values in enumerate(sequences)]
    assert patterns == [["SENT"] * 4 + ["--"] * 3] * len(sequences)


def test_a_tiny_served_domain_still_receives_every_users_report() -> None:
    """Served domain ["firefox", "decoy"]: every user sends, not only the Firefox users."""
    evil = EvilCollector({"browser": spec("browser", domain=["firefox", "decoy"])})
    browsers = ["firefox"] * 4 + ["chrome"] * 5 + ["safari"] * 3
    outcomes = Counter(evil_client(evil, None, allow_unpinned=True).report("browser", b)
                       for b in browsers)
    assert outcomes == {"queued": 4, "substituted": 8}


def test_an_other_category_reports_every_value_and_is_estimated() -> None:
    domain = {"kind": "categories", "values": ["chrome", "firefox", "other"], "other": "other"}
    campaign = campaign_from_spec(spec("b", domain=domain))
    assert campaign.mechanism.encode("lynx") == campaign.mechanism.encode("other") == 2
    assert campaign.mechanism.encode(None) == 2
    with pytest.raises(CampaignError, match="must name one of"):
        campaign_from_spec(spec("b", domain={**domain, "other": "misc"}))
    plain = campaign_from_spec(spec("b", domain=["chrome", "firefox"]))
    assert "other" not in plain.config["domain"]  # configs without it keep their digests


@pytest.mark.parametrize("value", ["hiv-clinic", 12345.678, {"lat": 51.5}])
def test_domain_errors_never_quote_the_value(value: object) -> None:
    evil = EvilCollector({"x": spec("x", domain=["a", "b"])})
    client = evil_client(evil, None, allow_unpinned=True, strict=True)
    with pytest.raises(ValueDomainError) as error:
        client.report("x", value)
    assert str(value) not in str(error.value) and repr(value) not in str(error.value)
    assert client.pending() == 1  # the substitute was queued before the error was raised


@pytest.mark.parametrize("mechanism", ["krr", "oue", "hr", "ss"])
def test_a_substitute_report_is_epsilon_ldp_against_every_value(mechanism: str) -> None:
    """A substitute is the randomizer on a uniformly drawn value: a mixture of the real
    output distributions, so it is within e^ε of each of them (checked exactly)."""
    campaign = campaign_from_spec(spec("x", mechanism=mechanism, domain=["a", "b", "c"],
                                       epsilon=1.0))
    m = campaign.mechanism
    inputs = [m.encode(v) for v in ("a", "b", "c")]
    for y in m.outputs():
        real = [m.output_probability(y, x) for x in inputs]
        substitute = sum(real) / len(real)
        assert all(substitute <= math.exp(m.epsilon) * p * (1 + 1e-12) for p in real)
        assert all(p <= math.exp(m.epsilon) * substitute * (1 + 1e-12) for p in real)


def test_arrival_times_do_not_reveal_when_in_its_bucket_a_report_was_made(
        tmp_path: Path) -> None:
    """Reports made anywhere in an hourly bucket leave at uniformly random times during the
    next hour: never before the bucket ends, and uncorrelated with the moment of report()."""
    evil = EvilCollector({"x": spec("x", privacy={"budget": 1e4, "max_reports": 10**4})})
    clock = FakeClock()  # NOW is the start of an hour
    client = evil_client(evil, tmp_path, allow_unpinned=True, clock=clock, send_delay=None,
                         lifetime_budget=1e4, rng=random.Random(4), allow_insecure_rng=True)
    client.campaign("x")  # the app fetches the config at start-up
    made = []
    for i in range(2000):
        clock.now = NOW + (i % 20) * 180  # 20 moments spread over the bucket
        made.append(clock.now)
        assert client.report("x", "dark") == "queued"
        client.flush()
    assert evil.posts == []  # nothing leaves before the bucket ends
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        rows = db.execute("SELECT created, due FROM outbox ORDER BY seq").fetchall()
    assert {c for c, _ in rows} == {NOW}  # the file keeps the hour, not the moment
    late = [due - (NOW + 3600) for _, due in rows]
    assert all(0 <= d <= 3600 for d in late)
    counts = Counter(min(int(d / 360), 9) for d in late)
    chi2 = sum((counts[b] - 200) ** 2 / 200 for b in range(10))
    assert chi2 < 33.7  # χ²(9) quantile at 1 − 10⁻⁴: uniform over the next hour
    created = made
    mean_c, mean_d = sum(created) / len(rows), sum(late) / len(rows)
    cov = sum((c - mean_c) * (d - mean_d) for c, d in zip(created, late, strict=True))
    corr = cov / math.sqrt(sum((c - mean_c) ** 2 for c in created)
                           * sum((d - mean_d) ** 2 for d in late))
    assert abs(corr) < 4 / math.sqrt(len(rows))  # no dependence on the moment of report()
    clock.now = NOW + 3600 + 1800
    client.flush()
    assert 800 < len(evil.reports()) < 1200  # about half are due half-way through the hour
    clock.now = NOW + 7200
    client.flush()
    assert len(evil.reports()) == 2000


# -- network metadata -----------------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    """Serves configs, accepts reports, sets a tracking cookie on every answer."""

    requests: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []
    configs: ClassVar[dict[str, dict[str, Any]]] = {}

    def _answer(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "track=install-4711; Path=/")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.requests.append(("GET", self.path, dict(self.headers), b""))
        self._answer(self.configs[self.path.rsplit("/", 1)[1]])

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append(("POST", self.path, dict(self.headers), body))
        reports = json.loads(body)["reports"]
        self._answer({"results": [{"report_id": r["report_id"], "status": "accepted"}
                                  for r in reports]})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.requests = []
    _Recorder.configs = {name: campaign_from_spec(spec(name, privacy={"budget": 2.0}))
                         .public_config() for name in ("os", "theme")}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_no_cookies_generic_headers_and_one_campaign_per_request(recorder: str,
                                                                 tmp_path: Path) -> None:
    """Over real HTTP on loopback, against a server that sets a tracking cookie."""
    client = Client(recorder, state_dir=tmp_path, allow_unpinned=True, send_delay=0.0,
                    timeout=5.0)
    for value in ("dark", "light"):
        assert client.report("os", value) == "queued"
        assert client.report("theme", value) == "queued"
    client.flush()
    client.close()
    methods = Counter(method for method, *_ in _Recorder.requests)
    assert methods == {"GET": 2, "POST": 2}
    for _, _, headers, body in _Recorder.requests:
        assert "Cookie" not in headers
        assert headers["User-Agent"] == "chorus-client"
        assert headers["Connection"] == "close"
        assert set(headers) <= {"Host", "User-Agent", "Accept-Encoding", "Accept",
                                "Connection", "Content-Type", "Content-Length"}
        if body:
            assert len({r["digest"] for r in json.loads(body)["reports"]}) == 1


# -- no linkable fingerprints ---------------------------------------------------------------

LINKABILITY_SPECS = {
    "olh": spec("olh", mechanism="olh", domain=[f"v{i}" for i in range(64)]),
    "oue": spec("oue", mechanism="oue", domain=[f"v{i}" for i in range(64)]),
    "dbitflip": spec("dbitflip", mechanism="dbitflip", domain=[f"v{i}" for i in range(64)],
                     params={"b": 4}),
    "cms": spec("cms", mechanism="cms", domain={"kind": "strings"}, epsilon=2.0,
                params={"k": 16, "m": 256}),
    "rappor": {"name": "rappor", "mechanism": "rappor", "domain": {"kind": "strings"},
               "params": {"k": 16, "h": 1, "m": 64, "f": 0.5, "p": 0.25, "q": 0.75}},
}


def uniquely_linkable_share(days: list[dict[int, str]]) -> float:
    """The share of installs whose report on every day is the only one of its bytes that
    day and equal to their first day's: the collector links all their days exactly."""
    installs = list(days[0])
    counts = [Counter(day.values()) for day in days]
    linked = sum(all(day[i] == days[0][i] and count[day[i]] == 1
                     for day, count in zip(days, counts, strict=True)) for i in installs)
    return linked / len(installs)


def stable_field_shares(days: list[dict[int, Any]], rng: random.Random) -> dict[str, tuple[
        float, float]]:
    """For each payload field: the share of installs whose field is equal on every day, and
    the same share for installs paired at random across days (what chance alone gives)."""
    installs = list(days[0])
    fields = days[0][installs[0]].keys() if isinstance(days[0][installs[0]], dict) else [""]

    def field(payload: Any, key: str) -> str:
        return json.dumps(payload[key] if key else payload, sort_keys=True)

    shares = {}
    for key in fields:
        same = sum(all(field(day[i], key) == field(days[0][i], key) for day in days[1:])
                   for i in installs)
        shuffled = [dict(zip(installs, rng.sample(installs, len(installs)), strict=True))
                    for _ in days]
        chance = sum(all(field(day[shuffled[d][i]], key) == field(days[0][shuffled[0][i]], key)
                         for d, day in enumerate(days) if d) for i in installs)
        shares[key or "payload"] = (same / len(installs), chance / len(installs))
    return shares


@pytest.mark.parametrize("name", sorted(LINKABILITY_SPECS))
def test_payloads_are_not_linkable_across_days(name: str, tmp_path: Path) -> None:
    """300 installs with a stable value, 5 days: the review found 299 of 300 linkable."""
    budget = {"unit": "day", "budget": 2.0, "max_reports": 1}
    evil = EvilCollector({name: {**LINKABILITY_SPECS[name], "privacy": budget}})
    clock = FakeClock()
    clients = [evil_client(evil, None, allow_unpinned=True, clock=clock, lifetime_budget=20)
               for _ in range(300)]
    days: list[dict[int, str]] = []
    for _ in range(5):
        for i, client in enumerate(clients):
            assert client.report(name, f"v{i % 64}") == "queued"
        days.append({i: json.loads(c._state.outbox(1)[0][1])["payload"]
                     for i, c in enumerate(clients)})
        for client in clients:
            client.flush()
        clock.now += DAY
    whole = [{i: json.dumps(p, sort_keys=True) for i, p in day.items()} for day in days]
    share = uniquely_linkable_share(whole)
    print(f"{name}: {share:.3f} of installs uniquely linkable over 5 days")
    assert share <= 0.01
    # No part of a payload (a seed, a cohort, a bucket set) stays with an install more often
    # than chance makes it stay with a random other install.
    for key, (same, chance) in stable_field_shares(days, random.Random(3)).items():
        slack = 4 * math.sqrt(max(chance, 1 / 300) / 300)
        assert same <= chance + slack, (name, key, same, chance)


# -- why no memoization: the change pattern leaks -------------------------------------------


def _two_report_log_ratio(mechanism: Rappor, memoized: bool) -> tuple[float, float]:
    """Exact worst |ln P(o₁, o₂ | a, a) / P(o₁, o₂ | a, b)| over all output pairs, per bit."""
    k, f, p, q = mechanism.k, mechanism.f, mechanism.p, mechanism.q
    a, b = "alpha", "bravo"
    bloom_a, bloom_b = mechanism.bloom(a, 0), mechanism.bloom(b, 0)
    assert bloom_a != bloom_b

    def irr(o: int, prr: int) -> float:
        one = q if prr else p
        return one if o else 1 - one

    def prr_one(bit: int) -> float:
        return 1 - f / 2 if bit else f / 2

    def single(o: int, bit: int) -> float:
        return prr_one(bit) * irr(o, 1) + (1 - prr_one(bit)) * irr(o, 0)

    # The bits are independent given the values, so the worst pair is the product of the
    # per-bit worst ratios in one direction or the other.
    up = down = 0.0
    for i in range(k):
        ba, bb = (bloom_a >> i) & 1, (bloom_b >> i) & 1
        ratios = []
        for o1, o2 in itertools.product((0, 1), repeat=2):
            if memoized:  # one PRR for both reports of the same value
                same = prr_one(ba) * irr(o1, 1) * irr(o2, 1) \
                    + (1 - prr_one(ba)) * irr(o1, 0) * irr(o2, 0)
            else:
                same = single(o1, ba) * single(o2, ba)
            ratios.append(math.log(same / (single(o1, ba) * single(o2, bb))))
        up += max(ratios)
        down += -min(ratios)
    return max(up, down), 2 * mechanism.epsilon


def test_memoized_responses_would_leak_the_change_pattern() -> None:
    """Why Chorus randomizes every report afresh: with RAPPOR's memoized PRR, the pair of
    reports (a, a) and the pair (a, b) differ by more than the 2·ε₁ that two reports were
    charged, and more than ε∞; with fresh randomization the loss is within 2·ε₁ exactly."""
    campaign: Campaign = campaign_from_spec({
        "name": "x", "mechanism": "rappor", "domain": {"kind": "strings"},
        "params": {"k": 8, "h": 1, "m": 1, "f": 0.5, "p": 0.25, "q": 0.75}})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Rappor)
    memo, charged = _two_report_log_ratio(mechanism, memoized=True)
    assert memo > charged * 1.3 and memo > mechanism.epsilon_longitudinal
    fresh, charged = _two_report_log_ratio(mechanism, memoized=False)
    assert fresh <= charged + 1e-12


# -- the state file -------------------------------------------------------------------------


def test_the_state_file_holds_no_key_to_the_values(tmp_path: Path) -> None:
    evil = EvilCollector({"x": spec("x", privacy={"budget": 3.0})})
    client = evil_client(evil, tmp_path, allow_unpinned=True)
    for value in ("hc", "dark", "dark"):
        client.report("x", value)
    client.close()
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE "
                                               "type = 'table' AND name NOT LIKE 'sqlite_%'")}
        keys = db.execute("SELECT count(*) FROM assignment_key").fetchone()[0]
        configs = db.execute("SELECT campaign, body FROM config").fetchall()
    # The plan (drawn periods, value-free) and the periods used are kept too.
    assert tables == {"ledger", "outbox", "assignment_key", "config", "plan", "slot_used",
                      "daily_spend", "sent_log"}
    # The assignment key is drawn only for a discovery campaign's groups: none here.
    assert keys == 0
    # The config kept is the public one, as every install is served it.
    assert [(name, json.loads(body)) for name, body in configs] == [("x", evil.config("x"))]


def test_an_old_state_file_loses_its_fingerprints_and_keeps_what_was_spent(
        tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        db.executescript("""
            CREATE TABLE install (key TEXT PRIMARY KEY, value BLOB NOT NULL);
            INSERT INTO install VALUES ('secret', CAST('SECRET-OF-THE-INSTALL' AS BLOB));
            CREATE TABLE ledger (campaign TEXT NOT NULL, period TEXT NOT NULL,
                epsilon REAL NOT NULL, reports INTEGER NOT NULL,
                PRIMARY KEY (campaign, period));
            INSERT INTO ledger VALUES ('0123abcd', 'lifetime', 7.5, 3);
            CREATE TABLE memo (campaign TEXT NOT NULL, fingerprint BLOB NOT NULL,
                reports INTEGER NOT NULL, PRIMARY KEY (campaign, fingerprint));
            INSERT INTO memo VALUES ('0123abcd', CAST('FINGERPRINT-OF-A-VALUE' AS BLOB), 3);
            CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, report TEXT NOT NULL,
                created REAL NOT NULL);
            INSERT INTO outbox (report, created)
                VALUES ('{"report_id": "00", "digest": "00", "time": 0, "payload": 1}', 1.0);
        """)
    evil = EvilCollector({"x": spec("x")})
    client = evil_client(evil, tmp_path, allow_unpinned=True)
    # Gone from the file and its WAL at once, not at some later checkpoint.
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert b"SECRET-OF-THE-INSTALL" not in data and b"FINGERPRINT" not in data, path
    assert client._state.outbox(10, due_by=time.time() - 1) == []  # not sent at once
    assert [seq for seq, _ in client._state.outbox(10, due_by=time.time() + 3600)] == [1]
    assert client.spent() == pytest.approx(7.5)
    assert client.report("x", "dark") == "suppressed"  # 7.5 + 1 > the lifetime budget of 8
    assert client.pending() == 1
    client.close()
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE "
                                               "type = 'table' AND name NOT LIKE 'sqlite_%'")}
        keys = db.execute("SELECT count(*) FROM assignment_key").fetchone()[0]
    # The plan (drawn periods, value-free) and the periods used are kept too.
    assert tables == {"ledger", "outbox", "assignment_key", "config", "plan", "slot_used",
                      "daily_spend", "sent_log"}
    # The assignment key is drawn only for a discovery campaign's groups: none here.
    assert keys == 0


# -- hostile values and hostile configs, over every mechanism --------------------------------

HOSTILE_VALUES: list[object] = [
    "caf\udce9-secret",  # a lone surrogate (os.fsdecode of an undecodable name)
    None, object(), float("nan"), float("inf"), 10**400, "x" * 70_000, b"bytes-secret",
    {"unexpected": "mapping-secret"}, ["a", "list-secret"],
]


@pytest.mark.parametrize("mechanism", sorted(EXAMPLES))
def test_no_value_makes_report_raise_or_skip_for_any_mechanism(mechanism: str) -> None:
    """Every hostile value is sent (as a substitute), never raised into the app, and no
    message quotes it, for every mechanism's example campaign."""
    campaign = campaign_from_spec({"name": "x", "mechanism": mechanism,
                                   **EXAMPLES[mechanism][0],
                                   "privacy": {"budget": 1e6, "max_reports": 10**6}}, warn=False)
    client = evil_client(EvilCollector({}), None, campaigns={"x": campaign},
                         max_epsilon=math.inf, lifetime_budget=math.inf)
    for value in HOSTILE_VALUES:
        outcome = client.report("x", value)
        assert outcome in ("substituted", "queued"), (value, outcome)
    assert client.pending() == len(HOSTILE_VALUES)
    strict = evil_client(EvilCollector({}), None, campaigns={"x": campaign}, strict=True,
                         max_epsilon=math.inf, lifetime_budget=math.inf)
    errors: list[ValueDomainError] = []
    for value in HOSTILE_VALUES:
        try:
            strict.report("x", value)
        except ValueDomainError as error:
            errors.append(error)
    assert len(errors) >= len(HOSTILE_VALUES) - 2  # a few may fit some domains (e.g. nan)
    for error in errors:
        chained = (error.__cause__, error.__context__)
        assert "secret" not in str(error) and all(e is None for e in chained), error


def _served(body: bytes) -> Response:
    return Response(200, body)


@pytest.mark.parametrize("body", [
    b'{"name": "x", "selection": NaN}',
    b"[" * 100_000 + b"]" * 100_000,
    json.dumps({**campaign_from_spec(spec("x")).public_config(),
                "domain": {"kind": ["categories"], "values": ["a"]}}).encode(),
    json.dumps({**{k: v for k, v in campaign_from_spec(spec("x")).public_config().items()
                   if k not in ("digest", "derived", "worst_case", "warnings")},
                "privacy": {"budget": 1e308}}).encode(),
    b"\xff\xfe not even text",
])
def test_a_malformed_served_config_never_crashes_report(body: bytes) -> None:
    """A hostile collector's config makes the campaign unavailable (and is not asked for again
    at once), even for a campaign pinned by digest; it never raises into the app."""
    answers = ScriptedTransport([_served(body)] * 3)
    pinned = campaign_from_spec(spec("x")).digest
    for pins in ({"x": pinned}, {}):
        client = Client(BASE, ephemeral=True, allow_unpinned=True, transport=answers,
                        campaigns=pins, send_delay=0.0)
        assert [client.report("x", "dark") for _ in range(3)] == ["unavailable"] * 3
    assert len(answers.sent) == 2  # one fetch per client: then the hold-off


def test_an_unpinned_campaign_is_bounded_only_by_the_clients_caps(tmp_path: Path) -> None:
    """The collector may serve a bigger budget on the next start: the ledger is keyed by name,
    so the caps hold, and worst_case() says what they are, not what today's config says."""
    evil = EvilCollector({"x": spec("x")})
    clock = FakeClock()
    client = evil_client(evil, tmp_path, allow_unpinned=True, clock=clock)
    bound = client.worst_case("x")
    assert (bound.per_report, bound.per_year, bound.lifetime) == (2.0, 8.0, 8.0)
    spent_over_restarts = 0.0
    for budget in (1.0, 2.0, 8.0, 100.0):
        evil.specs["x"] = spec("x", privacy={"budget": budget, "max_reports": 100})
        clock.now += 2 * DAY  # the held config is fetched again after a day, by the sender
        restarted = evil_client(evil, tmp_path, allow_unpinned=True, clock=clock)
        restarted.flush()
        assert restarted.campaign("x").policy.budget == budget
        for _ in range(20):
            restarted.report("x", "dark")
        spent_over_restarts = restarted.spent()
        restarted.close()
    assert spent_over_restarts == pytest.approx(bound.lifetime)


@pytest.mark.parametrize("unit", ["lifetime", "day"])
def test_the_client_makes_exactly_the_published_number_of_reports(unit: str) -> None:
    """At budget boundaries the count the config publishes and the count the client allows
    are one number (a float sum and a float ratio could disagree there)."""
    rng = random.Random(11)
    for _ in range(150):
        epsilon = rng.choice([0.1, 0.3, 1 / 3, 0.7, 1.0, 1.1, 2.0]) * (1 + rng.uniform(-1, 1)
                                                                       * 1e-9)
        budget = epsilon * rng.randint(1, 12) * (1 + rng.uniform(-3e-9, 3e-9))
        try:
            campaign = campaign_from_spec(spec("x", epsilon=epsilon,
                                               privacy={"unit": unit, "budget": budget}))
        except CampaignError:
            continue  # below one report's ε: refused when the campaign is made
        client = evil_client(EvilCollector({}), None, campaigns={"x": campaign},
                             lifetime_budget=math.inf)
        made = [client.report("x", "dark") for _ in range(15)].count("queued")
        assert made == campaign.worst_case.reports_per_period >= 1, (epsilon, budget)


# -- a discovery group per config version, few groups ---------------------------------------

def _pem(name: str, final_share: int, **params: int) -> dict[str, Any]:
    """A PEM campaign of one-byte strings: two groups (the walk's and the estimation
    group), with ``final_share`` percent of the installs in the second."""
    defaults = {"top": 2, "keep": 2, "first_bits": 4, "step_bits": 4, "cohorts": 8, "bins": 3,
                "final_share": final_share}
    return spec(name, "pem", epsilon=0.5, domain={"kind": "strings", "max_bytes": 1},
                params={**defaults, **params},
                privacy={"budget": 8.0, "max_reports": 16})


def test_each_served_config_version_draws_the_discovery_group_afresh(tmp_path: Path) -> None:
    """A collector that serves another ``final_share`` on every start would intersect the
    groups of one install, were the draw shared by the versions (the same hidden u, cut at
    other places). Each version's group must be independent of the other's: χ² on the
    table of (group under version A, group under version B) over 150 installs, each
    restarted on its state file after the held config was refreshed to the new version (the
    smallest cell expects 11).

    The expected counts use the declared shares, not the table's margins, so the statistic
    has 3·3 − 1 = 8 degrees of freedom (as in tests/mechanisms/test_discovery.py), and the
    threshold is χ²(8) at 1 − 10⁻⁴, 31.8 (the 23.5 this test had is χ²(4)'s, which the
    statistic exceeds with probability 2.8·10⁻³ when the groups are independent; the
    client's key is the OS CSPRNG's, so that was a spurious failure every ~360 runs).
    Exact multinomial simulation (8·10⁶ tables) of the null at 150 installs: P(χ² ≥ 31.8) =
    1.4·10⁻⁴.

    Size by power: a shared draw makes the pair table comonotone, (0,0) .25, (0,1) .10,
    (1,1) .15, (1,2) .20, (2,2) .30, a noncentrality of 0.914 per install: λ = 137 at 150
    installs, where χ²(8; λ) falls below 31.8 with probability 4·10⁻¹¹ (simulated: the
    smallest of 10⁶ tables gave 106). Power ≥ 0.999 holds down to about 80 installs; 150 keeps
    the smallest expected cell above 10 for the χ² approximation, and still catches (at
    0.999) an install population of which 70% share the draw (λ scales with that share²).
    """
    evil = EvilCollector({"x": _pem("x", 30)})
    pairs: Counter[tuple[int, int]] = Counter()
    installs = 150
    for install in range(installs):
        clock = FakeClock()
        groups = []
        for share in (30, 50):
            evil.specs["x"] = _pem("x", share)
            client = evil_client(evil, tmp_path / str(install), allow_unpinned=True,
                                 clock=clock)
            client.flush()  # the sender refreshes a held config that is due
            assert client.report("x", "a") == "queued"
            client.flush()
            client.close()
            groups.append(evil.reports()[-1]["payload"]["g"])
            clock.now += 2 * DAY
        pairs[groups[0], groups[1]] += 1
    share = {s: [campaign_from_spec(_pem("x", s), warn=False).mechanism
                 .group_probability(g) for g in range(3)]  # type: ignore[attr-defined]
             for s in (30, 50)}
    chi2 = sum((pairs[a, b] - installs * share[30][a] * share[50][b]) ** 2
               / (installs * share[30][a] * share[50][b]) for a in range(3) for b in range(3))
    assert chi2 < 31.8, pairs  # χ²(8) at 1 − 10⁻⁴; a shared draw gives ~140 here


def test_a_config_with_too_many_or_too_small_groups_is_refused() -> None:
    """Within one version and period the group is a partial pseudonym: the client caps it at
    DEFAULT_MAX_GROUPS = 64 groups of at least 1/128 of the installs (7 bits), which the
    defaults for 64-byte strings (64 groups for PEM) meet, and refuses one of 506."""
    from chorus_client.client import DEFAULT_MAX_GROUPS
    assert DEFAULT_MAX_GROUPS == 64
    wide = spec("wide", "pem", epsilon=1.0, domain={"kind": "strings", "max_bytes": 64},
                params={"first_bits": 8, "step_bits": 1, "top": 2, "keep": 4, "cohorts": 2,
                        "bins": 4})
    default = spec("default", "pem", epsilon=1.0, domain={"kind": "strings", "max_bytes": 64})
    evil = EvilCollector({"wide": wide, "default": default})
    assert campaign_from_spec(wide, warn=False).mechanism.groups == 506  # type: ignore[attr-defined]
    assert campaign_from_spec(default, warn=False).mechanism.groups == 64  # type: ignore[attr-defined]
    client = evil_client(evil, None, allow_unpinned=True)
    with pytest.raises(CampaignUnavailable, match="506 public groups"):
        client.campaign("wide")
    assert client.report("wide", "alice") == "unavailable"
    assert client.report("default", "alice") == "queued"
    # Two groups, the estimation group holding 5%: few enough, but one is too small.
    skewed = EvilCollector({"x": _pem("x", 5, first_bits=8), "y": _pem("y", 50, first_bits=8)})
    narrow = evil_client(skewed, None, allow_unpinned=True, max_groups=2)
    with pytest.raises(CampaignUnavailable, match=r"2 public groups, the smallest holding 5\.00%"):
        narrow.campaign("x")
    assert narrow.report("y", "a") == "queued"


# -- config fetches do not time-stamp reports -----------------------------------------------

def test_config_fetches_do_not_follow_report(tmp_path: Path) -> None:
    """A campaign pinned by digest whose config is not on the device: report() makes no
    request (it used to fetch at the exact second of the report); the sender fetches the
    config at a uniformly random moment of the next hour, uncorrelated with the moment of
    report(), and keeps it, so that later starts never fetch it again."""
    evil = EvilCollector({"x": spec("x", privacy={"budget": 8.0, "max_reports": 8})})
    digest = campaign_from_spec(evil.specs["x"], warn=False).digest
    made, fetched = [], []
    rng = random.Random(5)
    for install in range(120):
        clock = FakeClock()
        client = evil_client(evil, tmp_path / str(install), campaigns={"x": digest},
                             clock=clock, send_delay=None)
        clock.now = NOW + rng.random() * 3600
        before = len(evil.gets)
        assert client.report("x", "dark") == "unavailable"
        assert len(evil.gets) == before  # no request from report()
        made.append(clock.now)
        while len(evil.gets) == before:  # a sender waking every minute
            clock.now += 60
            client.flush()
            assert clock.now < NOW + 3 * 3600
        fetched.append(clock.now)
        assert client.report("x", "dark") == "queued"
        client.close()
        restarted = evil_client(evil, tmp_path / str(install), campaigns={"x": digest},
                                clock=clock, send_delay=None)
        assert restarted.report("x", "dark") == "queued"  # held: no second fetch
        assert len(evil.gets) == before + 1
        restarted.close()
    assert all(NOW + 3600 <= f <= NOW + 7200 + 60 for f in fetched)
    n = len(made)
    mean_m, mean_f = sum(made) / n, sum(fetched) / n
    cov = sum((m - mean_m) * (f - mean_f) for m, f in zip(made, fetched, strict=True))
    corr = cov / math.sqrt(sum((m - mean_m) ** 2 for m in made)
                           * sum((f - mean_f) ** 2 for f in fetched))
    assert abs(corr) < 4 / math.sqrt(n)


def test_prepare_fetches_the_pinned_configs_at_start_up() -> None:
    evil = EvilCollector({"x": spec("x")})
    digest = campaign_from_spec(evil.specs["x"], warn=False).digest
    client = evil_client(evil, None, campaigns={"x": digest}, send_delay=None)
    assert client.prepare() == {"x": True}
    assert evil.gets == ["x"]
    assert client.report("x", "dark") == "queued"
    assert evil.gets == ["x"]


# -- smaller leaks: record keys, report times, rollbacks --------------------------------------

def test_a_records_unknown_keys_are_never_quoted(caplog: pytest.LogCaptureFixture) -> None:
    """An extra attribute named after a person is part of the value: neither the strict
    error nor the logged warning may name it."""
    domain = {"kind": "record", "attributes": [{"name": "os", "values": ["linux", "mac"]},
                                               {"name": "plan", "values": ["free", "pro"]}]}
    evil = EvilCollector({"r": spec("r", "rsfd", domain=domain)})
    value = {"os": "linux", "plan": "pro", "alice.smith@example.com": "yes"}
    strict = evil_client(evil, None, allow_unpinned=True, strict=True)
    with pytest.raises(ValueDomainError) as error:
        strict.report("r", value)
    lenient = evil_client(evil, None, allow_unpinned=True)
    with caplog.at_level(logging.DEBUG, logger="chorus"):
        assert lenient.report("r", value) == "substituted"
    assert "alice" not in str(error.value) and "1 other keys" in str(error.value)
    assert "alice" not in caplog.text and "1 other keys" in caplog.text


def test_a_restored_state_file_renews_the_budget_unless_the_app_keeps_a_counter(
        tmp_path: Path) -> None:
    """Restoring an old copy of the state file (a backup) brings the ledger back: five
    rollbacks give 48 ε where the lifetime budget is 8 (the threat model says so). A
    ``spend_counter`` kept where backups do not reach holds the budget across them."""
    evil = EvilCollector({"x": spec("x", privacy={"budget": 100.0, "max_reports": 100})})
    state, backup = tmp_path / "state", tmp_path / "backup"

    def spend_with_rollbacks(**kwargs: Any) -> float:
        for folder in (state, backup):
            shutil.rmtree(folder, ignore_errors=True)
        evil_client(evil, state, allow_unpinned=True, **kwargs).close()
        shutil.copytree(state, backup)
        total = 0.0
        for _ in range(6):
            client = evil_client(evil, state, allow_unpinned=True, **kwargs)
            before = client.spent()
            while client.report("x", "dark") == "queued":
                pass
            total += client.spent() - before
            client.close()
            shutil.rmtree(state)
            shutil.copytree(backup, state)  # the device restores its backup
        return total

    assert spend_with_rollbacks() == pytest.approx(48.0)
    counter = FileSpendCounter(tmp_path / "no-backup" / "spent")
    assert spend_with_rollbacks(spend_counter=counter) == pytest.approx(8.0)
    assert counter.spent() == pytest.approx(8.0)
    failing = evil_client(evil, None, allow_unpinned=True,
                          spend_counter=FileSpendCounter(tmp_path))  # a directory: unreadable
    assert failing.report("x", "dark") == "suppressed"
    assert failing.pending() == 0


def test_a_record_config_stating_the_old_one_attribute_epsilon_is_refused() -> None:
    """rsfd's ``epsilon_one_attribute`` was ln(1 + (e^ε − 1)/d), true only for attributes of
    equal sizes: for sizes [2, 2, 2, 8] at ε = 2 it is 1.334, not 0.954. The client re-derives
    the figure, so a collector that serves the understated one is refused."""
    domain = {"kind": "record", "attributes": [
        {"name": f"a{i}", "values": [f"v{j}" for j in range(size)]}
        for i, size in enumerate((2, 2, 2, 8))]}
    campaign = campaign_from_spec(spec("r", "rsfd", epsilon=2.0, domain=domain), warn=False)
    stated = campaign.public_config()["derived"]["epsilon_one_attribute"]
    assert round(stated, 3) == 1.334
    understated = json.loads(json.dumps(campaign.public_config()))
    understated["derived"]["epsilon_one_attribute"] = math.log1p(math.expm1(2.0) / 4)
    answers = ScriptedTransport([Response(200, json.dumps(understated).encode())])
    client = Client(BASE, ephemeral=True, allow_unpinned=True, transport=answers,
                    send_delay=0.0)
    assert client.report("r", {"a0": "v0", "a1": "v1", "a2": "v0", "a3": "v7"}) == \
        "unavailable"


def test_a_config_the_app_fetched_is_not_fetched_again_by_the_sender() -> None:
    evil = EvilCollector({"x": spec("x")})
    digest = campaign_from_spec(evil.specs["x"], warn=False).digest
    clock = FakeClock()
    client = evil_client(evil, None, campaigns={"x": digest}, send_delay=None, clock=clock)
    client.campaign("x")  # the app's own call, before the sender's scheduled fetch
    clock.now += 3 * 3600
    client.flush()
    assert evil.gets == ["x"]
    assert client.configs.next_fetch() is None
