"""The privacy plan over time: each install reports in a few periods drawn once, at random,
over the campaign's horizon, and the budget is shared between campaigns as the app says.

The schedule is the client's to keep: drawn before any value is seen, stored, never redrawn
on restart, and a period once passed never reopens (../shared/docs/LONGITUDINAL.md §2, §7).
"""

from __future__ import annotations

import json
import math
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from chorus_client import Client, PrivacyPlan, Response, RollingWindow
from chorus_client.state import FILE_NAME
from chorus_shared import campaign_from_spec
from helpers.support import NOW, FakeClock, ScriptedTransport

BASE = "http://collector.test"
DAY = 86400


def scheduled(name: str = "daily", *, epsilon: float = 2.0, budget: float = 8.0,
              periods: int = 30, cadence: str = "day", start: str = "2026-01-01",
              domain: Any = ("no", "yes"), description: str = "") -> dict[str, Any]:
    return campaign_from_spec({
        "name": name, "mechanism": "krr", "epsilon": epsilon, "domain": list(domain),
        "description": description, "privacy": {"budget": budget},
        "schedule": {"cadence": cadence, "start": start, "periods": periods}},
    ).public_config()


def install(campaigns: dict[str, Any], *, clock: FakeClock, seed: int | None = None,
            state_dir: Path | None = None, **kwargs: Any) -> Client:
    rng = {} if seed is None else {"rng": random.Random(seed), "allow_insecure_rng": True}
    return Client(BASE, state_dir=state_dir, ephemeral=state_dir is None,
                  transport=ScriptedTransport([]), campaigns=campaigns, send_delay=0.0,
                  clock=clock, **rng, **kwargs)


def sent_days(client: Client, clock: FakeClock, name: str, values: list[object]) -> list[int]:
    """Report one value a day; the days whose report was charged and queued."""
    days = []
    start = clock.now
    for day, value in enumerate(values):
        clock.now = start + day * DAY + 3600
        if client.report(name, value) in ("queued", "substituted"):
            days.append(day)
    return days


# -- the symptoms ----------------------------------------------------------------------


def test_a_daily_campaign_keeps_flowing_all_year_at_the_default_caps() -> None:
    """Issue 32: at ε = 1 a day, installs went silent for good after day 8. Planned, the
    installs at the default caps (ε ≤ 2 per report, 8 for life) report 4 times each over the
    year, every report inside the horizon, none suppressed, the days spread over the year (100
    installs: a plan that bunched its days in the first half would leave the second half none
    of the 199 reports it expects, 14 standard deviations off)."""
    clock = FakeClock()
    config = scheduled(periods=365)
    installs = [install({"daily": config}, clock=clock, seed=seed) for seed in range(100)]
    per_day: Counter[int] = Counter()
    for day in range(365):
        clock.now = NOW + day * DAY + 7200
        for client in installs:
            if client.report("daily", "yes") == "queued":
                per_day[day] += 1
    assert all(client.spent() == pytest.approx(8.0) for client in installs)
    assert sum(per_day.values()) == 4 * 100
    assert all(not client.suppressed for client in installs)
    # Each day's count is Binomial(100, 4/365): the second half of the year gets its half.
    late = sum(count for day, count in per_day.items() if day >= 183)
    expected = 400 * 182 / 365
    assert abs(late - expected) < 4 * math.sqrt(expected)
    words = installs[0].plan()[0].reporting
    assert words.startswith("4 reports at ε = 2, one in each of the days starting 2026-")


def test_the_default_policy_says_one_report_not_a_thousand() -> None:
    config = campaign_from_spec({"name": "c", "mechanism": "krr", "epsilon": 1.0,
                                 "domain": ["a", "b"]}).public_config()
    assert config["privacy"]["max_reports"] == 1
    assert campaign_from_spec(config).reporting.startswith("at most 1 report per install, ever")


# -- the plan is fixed, stored and value-free ---------------------------------------------------


def test_the_plan_is_drawn_once_kept_across_restarts_and_followed(tmp_path: Path) -> None:
    clock = FakeClock(NOW + 3600)
    config = scheduled(periods=30)
    first = install({"daily": config}, clock=clock, state_dir=tmp_path)
    (plan,) = first.plan()
    assert (plan.reports, plan.epsilon, plan.budget, plan.forfeited) == (4, 2.0, 8.0, 0)
    assert plan.periods is not None and len(set(plan.periods)) == 4
    del first  # killed, no close()
    again = install({"daily": config}, clock=clock, state_dir=tmp_path)
    assert again.plan()[0].periods == plan.periods  # never redrawn
    dates = {time.strftime("%Y-%m-%d", time.gmtime(NOW + d * DAY)): d for d in range(30)}
    days = sent_days(again, clock, "daily", ["yes"] * 30)
    assert days == sorted(dates[p] for p in plan.periods)
    assert again.spent() == pytest.approx(8.0) and again.skipped == 26
    assert again.plan()[0].reported == 4
    assert again.worst_case("daily").lifetime == pytest.approx(8.0)
    assert again.worst_case("daily").per_period == pytest.approx(2.0)


def test_a_late_install_keeps_the_draws_ahead_of_it_and_is_never_charged_for_the_rest() -> None:
    """The virtual schedule: drawn over the whole horizon; periods already past are forfeited,
    not moved, so every active install reports in a period with the same probability."""
    reports, forfeits = Counter[int](), 0
    for seed in range(400):
        clock = FakeClock(NOW + 20 * DAY + 3600)  # day 20 of 30
        client = install({"daily": scheduled(periods=30)}, clock=clock, seed=seed)
        (plan,) = client.plan()
        assert plan.reports + plan.forfeited == 4
        forfeits += plan.forfeited
        days = sent_days(client, clock, "daily", ["no"] * 10)
        assert len(days) == plan.reports
        assert client.spent() == pytest.approx(2.0 * plan.reports)
        reports.update(days)
    # Each of the 10 remaining days: Binomial(400, 4/30), not the 4/10 of "spread the rest".
    expected = 400 * 4 / 30
    assert all(abs(reports[d] - expected) < 5 * math.sqrt(expected) for d in range(10))
    # Forfeits: Hypergeometric(30, 4, 20) per install, mean 4·20/30.
    assert abs(forfeits / 400 - 8 / 3) < 5 * math.sqrt(4 * 20 / 30 * 10 / 30 * 10 / 29 / 400)


def test_which_days_an_install_reports_never_depends_on_its_values() -> None:
    """Exact: with the same coins, installs with different value histories (constant,
    changing, starting late, outside the domain) report on exactly the same days."""
    histories: list[list[object]] = [
        ["yes"] * 30, ["no"] * 30, ["no", "yes"] * 15, ["no"] * 12 + ["yes"] * 18,
        ["maybe"] * 30, [None, 3.5, "yes"] * 10]
    for seed in range(40):
        patterns = set()
        for values in histories:
            clock = FakeClock(NOW)
            client = install({"daily": scheduled(periods=30)}, clock=clock, seed=seed)
            patterns.add(tuple(sent_days(client, clock, "daily", values)))
        assert len(patterns) == 1, seed


def test_reporting_periods_are_independent_of_the_value_by_chi_square() -> None:
    """With the OS CSPRNG (no seed to share): 600 installs in three value classes, one of
    whose values only arrives on day 12. (a) per-day counts fit Binomial(N, r/T); (b) the first
    reporting day is independent of the value class; (c) pairs of days are reported together
    at the rate r(r−1)/(T(T−1)). A client that anchored its slots on the first value fails (b)
    (the negative control below).

    Size by power, each at its α = 10⁻³ (T = 30, r = 4). (a) is the tightest: a slot draw
    that misses one day (an off-by-one in the range) leaves it at 0 against N·r/T and gives a
    noncentrality of N·(r/T)/(1 − r/T)·T/(T − 1) = 95 at N = 600, where χ²(30; 95) stays
    below the 59.7 threshold with probability 1.0·10⁻⁴ (power 0.9999; 0.994 at N = 450).
    (b) the anchored schedule gives p < 10⁻⁷⁰ at N = 600 in all of 3,000 simulations, far
    below the negative control's 10⁻⁶. (c) a schedule of r consecutive days (days 0 and 1
    together at (r − 1)/T = 0.10 against 0.014) is caught with power 1 − 10⁻⁹; a subtler
    pair rate, (r/T)² from independent days, is out of this test's reach at any N it could
    afford (power 0.02 at the former N = 1,500). Simulated under the null at N = 600, each
    p ≤ 10⁻³ occurs at its nominal rate or below (2·10⁴ runs: 1.0, 0.8, 0.4 ·10⁻³).
    """
    periods, reports, n = 30, 4, 600
    first_day: dict[str, list[int]] = {"always-yes": [], "always-no": [], "late-value": []}
    anchored: dict[str, list[int]] = {key: [] for key in first_day}
    per_day, both = Counter[int](), 0
    for i in range(n):
        kind = list(first_day)[i % 3]
        clock = FakeClock(NOW)
        client = install({"daily": scheduled(periods=periods)}, clock=clock)
        values: list[object] = {"always-yes": ["yes"] * 30, "always-no": ["no"] * 30,
                                "late-value": ["no"] * 12 + ["yes"] * 18}[kind]
        days = sent_days(client, clock, "daily", values)
        assert len(days) == reports
        per_day.update(days)
        both += {0, 1} <= set(days)
        first_day[kind].append(days[0])
        # A value-anchored schedule: the same draws, shifted to start with the value.
        shift = 12 if kind == "late-value" else 0
        anchored[kind].append(min(shift + d for d in days) % periods)
    # (a) goodness of fit of the 30 daily counts to Binomial(n, r/T)
    expected = n * reports / periods
    chi2 = sum((per_day[d] - expected) ** 2 / (expected * (1 - reports / periods))
               for d in range(periods))
    assert stats.chi2.sf(chi2, periods) > 1e-3
    # (b) value class × first reporting day (in 4 bins)
    assert _independence_p(first_day) > 1e-3
    assert _independence_p(anchored) < 1e-6  # the negative control is caught
    # (c) days 0 and 1 together
    rate = reports * (reports - 1) / (periods * (periods - 1))
    assert stats.binomtest(both, n, rate).pvalue > 1e-3


def _independence_p(first_day: dict[str, list[int]]) -> float:
    # Days 0-5, 6-11, 12-17 and 18 on: a first report after day 17 is already rare (1.8%).
    table = [[sum(1 for d in days if min(d // 6, 3) == b) for b in range(4)]
             for days in first_day.values()]
    return float(stats.chi2_contingency(table).pvalue)


# -- the ledger never exceeds the plan -----------------------------------------------------------


EVENTS = st.lists(st.one_of(
    st.tuples(st.just("report"), st.sampled_from(["no", "yes", "other", None])),
    st.tuples(st.just("next-day"), st.just(0)),
    st.tuples(st.just("jump"), st.integers(-20, 20)),
    st.tuples(st.just("restart"), st.just(0)),
    st.tuples(st.just("version"), st.integers(0, 2)),
), min_size=1, max_size=60)
VERSIONS = [scheduled(periods=20),
            scheduled(periods=20, description="the same plan, another config version"),
            scheduled(periods=20, epsilon=1.0)]  # another basis: what is left is redrawn


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, seed=st.integers(0, 2**32 - 1))
def test_the_ledger_never_exceeds_the_plan_across_restarts_clock_jumps_and_versions(
        events: list[tuple[str, Any]], seed: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        state_dir = Path(directory)
        clock = FakeClock(NOW + 3600)
        version = 0
        rng = random.Random(seed)

        def start() -> Client:
            return Client(BASE, state_dir=state_dir,
                          transport=ScriptedTransport([], fallback=_accept),
                          campaigns={"daily": VERSIONS[version]}, send_delay=0.0, clock=clock,
                          rng=rng, allow_insecure_rng=True, plan={"daily": 6.0})

        client = start()
        asked: list[int] = []  # periods report() was called in, in order
        for kind, arg in events:
            if kind == "report":
                period = math.floor((clock.now - NOW) / DAY)
                outcome = client.report("daily", arg)
                if outcome in ("queued", "substituted"):
                    # Never a period earlier than one already asked for.
                    assert all(period >= earlier for earlier in asked)
                asked.append(period)
            elif kind == "next-day":
                clock.now += DAY
            elif kind == "jump":
                clock.now += arg * DAY
            else:
                if kind == "version":
                    version = arg
                client.close()
                client = start()
            _check_ledger(state_dir, share=6.0)
        client.close()


def _check_ledger(state_dir: Path, *, share: float) -> None:
    with sqlite3.connect(state_dir / FILE_NAME) as db:
        spent, made = db.execute("SELECT coalesce(sum(epsilon), 0), coalesce(sum(reports), 0) "
                                 "FROM ledger").fetchone()
        used = db.execute("SELECT basis, slot FROM slot_used").fetchall()
        queued = db.execute("SELECT count(*) FROM outbox").fetchone()[0]
    db.close()
    assert spent <= share + 1e-9  # never above the campaign's share of the plan
    assert made == len(used) == len(set(used))  # one charge per period used, once
    # Every version here has the same calendar: no period charged twice, under any basis.
    assert len({slot for _, slot in used}) == len(used)
    assert queued <= made
    epsilons = {b: json.loads(b)["epsilon"] for b, _ in used}
    assert spent == pytest.approx(sum(epsilons[b] for b, _ in used))


def test_a_new_version_with_another_epsilon_never_reports_a_period_again(
        tmp_path: Path) -> None:
    """Found by the benchmark's review: a version with another ε drew a new plan whose first
    period was today, so a period already reported under the old version reopened (86 of 400
    seeds). Now the remaining reports are drawn over the periods after the latest one asked."""
    for seed in range(150):
        state_dir = tmp_path / str(seed)
        clock = FakeClock(NOW + 3600)
        rng = random.Random(seed)

        def start(version: int, state_dir: Path = state_dir, clock: FakeClock = clock,
                  rng: random.Random = rng) -> Client:
            return Client(BASE, state_dir=state_dir,
                          transport=ScriptedTransport([], fallback=_accept),
                          campaigns={"daily": VERSIONS[version]}, send_delay=0.0, clock=clock,
                          rng=rng, allow_insecure_rng=True)

        old = start(0)
        (plan,) = old.plan()
        assert plan.periods is not None
        first_day = int(plan.periods[0][-2:]) - 1  # January: the day of the month
        clock.now = NOW + first_day * DAY + 3600
        assert old.report("daily", "yes") == "queued"
        old.close()
        new = start(2)  # ε = 1: another basis, the same day
        assert new.report("daily", "yes") == "skipped"
        clock.now -= 5 * DAY  # nor any earlier day
        assert new.report("daily", "yes") == "skipped"
        (replan,) = new.plan()
        assert replan.periods is not None and all(
            date > plan.periods[0] for date in replan.periods)
        assert replan.reports == min(6, 20 - first_day - 1)  # (8 − 2) / 1 left, after today
        new.close()


CHILD = """
import json, math, sys
sys.path[:0] = sys.argv[4].split(":")
from chorus_client import Client, Response
state_dir, config, start = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])

class Accepting:
    def request(self, method, url, *, body, headers, timeout):
        reports = json.loads(body)["reports"]
        results = [{"report_id": r["report_id"], "status": "accepted"} for r in reports]
        return Response(200, json.dumps({"results": results}).encode())

now = [start]
client = Client("http://collector.test", state_dir=state_dir, transport=Accepting(),
                campaigns={"daily": config}, send_delay=0.0, clock=lambda: now[0])
while True:  # one report an hour, the clock running 2 h ahead and 1 h back in turn
    client.report("daily", "yes")
    client.flush()
    now[0] += 7200 if int(now[0]) % 7200 == 0 else -3600
"""


def test_kill_9_never_charges_a_period_twice(tmp_path: Path) -> None:
    """A process reporting every hour of a 10-day campaign (4 reports planned) is killed at
    random moments and restarted, each time from a clock a day earlier than where it stopped:
    the ledger holds at most the plan, each period charged once."""
    config = scheduled(periods=10)
    state_dir = tmp_path / "state"
    paths = ":".join(str(Path(__file__).resolve().parents[2] / p)
                     for p in ("client", "shared"))
    jitter = random.Random(1)
    start = NOW
    for _ in range(4):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(state_dir),
                                  json.dumps(config), str(start), paths])
        try:
            deadline = time.monotonic() + 30
            while not _has_plan(state_dir / FILE_NAME):
                assert child.poll() is None and time.monotonic() < deadline, "no progress"
                time.sleep(0.02)
            time.sleep(jitter.uniform(0.0, 0.3))
        finally:
            child.send_signal(signal.SIGKILL)
            assert child.wait(10) == -signal.SIGKILL
        _check_ledger(state_dir, share=8.0)
        start += 2 * DAY
    with sqlite3.connect(state_dir / FILE_NAME) as db:
        made = db.execute("SELECT coalesce(sum(reports), 0) FROM ledger").fetchone()[0]
    db.close()
    assert 1 <= made <= 4


def _has_plan(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        with sqlite3.connect(path, timeout=5) as db:
            found = db.execute("SELECT count(*) FROM plan").fetchone()[0] > 0
        db.close()
        return bool(found)
    except sqlite3.OperationalError:  # not created yet
        return False


# -- sharing the lifetime budget ----------------------------------------------------------------


def hostile_unpinned(name: str = "hostile") -> dict[str, Any]:
    return campaign_from_spec({"name": name, "mechanism": "krr", "epsilon": 2.0,
                               "domain": ["a", "b"],
                               "privacy": {"unit": "day", "budget": 2.0}}).public_config()


def test_an_unpinned_campaign_never_reduces_a_pinned_campaigns_reports() -> None:
    """Issue 32: a hostile unpinned campaign cut the app's pinned one from 15 reports in 30
    days to 4. Now unpinned campaigns draw from their own allowance."""
    pinned = scheduled("mine", epsilon=0.5, budget=7.5, periods=30)

    def reports_of_mine(with_hostile: bool) -> tuple[int, float]:
        served = {"hostile": hostile_unpinned()}
        transport = ScriptedTransport([], fallback=lambda call: _serve(call, served))
        clock = FakeClock(NOW + 3600)
        client = Client(BASE, ephemeral=True, transport=transport, campaigns={"mine": pinned},
                        allow_unpinned=True, send_delay=0.0, clock=clock,
                        rng=random.Random(7), allow_insecure_rng=True,
                        plan=PrivacyPlan(budgets={"mine": 7.5}, unpinned=0.5))
        mine = 0
        for day in range(30):
            clock.now = NOW + day * DAY + 3600
            if with_hostile:
                for _ in range(5):
                    client.report("hostile", "a")
            mine += client.report("mine", "yes") == "queued"
        return mine, client.spent("hostile")

    alone, _ = reports_of_mine(with_hostile=False)
    beside, hostile_spent = reports_of_mine(with_hostile=True)
    assert alone == beside == 15
    assert hostile_spent == 0.0  # one report of ε = 2 does not fit an allowance of 0.5


def test_the_default_plan_keeps_an_eighth_for_unpinned_campaigns_and_never_more() -> None:
    pinned = scheduled("mine", periods=30)
    served = {f"hostile-{i}": hostile_unpinned(f"hostile-{i}") for i in range(3)}
    transport = ScriptedTransport([], fallback=lambda call: _serve(call, served))
    clock = FakeClock(NOW + 3600)
    client = Client(BASE, ephemeral=True, transport=transport, campaigns={"mine": pinned},
                    allow_unpinned=True, send_delay=0.0, clock=clock,
                    lifetime_budget=16.0)
    for day in range(30):
        clock.now = NOW + day * DAY + 3600
        for name in served:
            client.report(name, "a")
        client.report("mine", "yes")
    unpinned = sum(client.spent(name) for name in served)
    assert unpinned == pytest.approx(2.0)  # 16 / 8: one report of ε = 2, whoever came first
    assert client.spent("mine") == pytest.approx(8.0)  # the campaign's policy: 4 reports
    plans = {plan.campaign: plan for plan in client.plan()}
    assert plans["mine"].budget == pytest.approx(14.0) and plans["mine"].pinned
    assert client.worst_case("hostile-1").lifetime == pytest.approx(2.0)


def _accept(call: Any) -> Response:
    reports = json.loads(call.body)["reports"]
    return Response(200, json.dumps({"results": [
        {"report_id": r["report_id"], "status": "accepted"} for r in reports]}).encode())


def _serve(call: Any, served: dict[str, dict[str, Any]]) -> Response:
    name = call.url.rsplit("/", 1)[-1]
    if name in served:
        return Response(200, json.dumps(served[name]).encode())
    return Response(404, b'{"type": "not-found"}')


def test_a_plan_that_names_unpinned_campaigns_or_overspends_is_refused() -> None:
    config = scheduled("mine")
    with pytest.raises(ValueError, match="not pinned"):
        install({"mine": config}, clock=FakeClock(), plan={"other": 1.0})
    with pytest.raises(ValueError, match="more than the lifetime budget"):
        install({"mine": config}, clock=FakeClock(), plan={"mine": 9.0})
    with pytest.raises(ValueError, match="shares but none for"):
        install({"mine": config, "b": scheduled("b")}, clock=FakeClock(),
                plan=PrivacyPlan.from_shares({"mine": 1}))
    shared = install({"mine": config, "b": scheduled("b")}, clock=FakeClock(),
                     plan=PrivacyPlan.from_shares({"mine": 3, "b": 1}))
    assert {p.campaign: p.budget for p in shared.plan()} == {"mine": 6.0, "b": 2.0}
    assert {p.campaign: p.reports for p in shared.plan()} == {"mine": 3, "b": 1}


# -- a weaker unit, only on request ---------------------------------------------------------------


def test_a_rolling_window_is_an_explicit_rate_and_says_it_is_weaker_than_a_lifetime_bound(
        ) -> None:
    config = campaign_from_spec({"name": "daily", "mechanism": "krr", "epsilon": 1.0,
                                 "domain": ["a", "b"],
                                 "privacy": {"unit": "day", "budget": 1.0}}).public_config()
    clock = FakeClock(NOW + 3600)
    client = install({"daily": config}, clock=clock, lifetime_budget=math.inf,
                     rolling_window=RollingWindow(budget=2.0, days=3))
    made = []
    for day in range(12):
        clock.now = NOW + day * DAY + 3600
        made.append(client.report("daily", "a") == "queued")
    # One a day by the campaign, at most 2 in any 3 days by the window: 2 of every 3 days.
    assert made == [True, True, False] * 4
    assert client.suppressed["window-budget"] == 4
    clock.now -= 5 * DAY  # the clock goes back: later charges still count in every window
    assert client.report("daily", "a") == "suppressed"
    bound = client.worst_case("daily")
    assert "weaker than a lifetime bound" in bound.window
    assert "nothing caps the total" in bound.window and bound.lifetime == math.inf
    capped = install({"daily": config}, clock=clock, rolling_window=RollingWindow(2.0, 3))
    assert "the lifetime budget of 8 still caps the total" in capped.worst_case("daily").window
    assert install({"daily": config}, clock=clock).worst_case("daily").window == ""
    with pytest.raises(ValueError, match="whole number of days"):
        RollingWindow(budget=1.0, days=0)
