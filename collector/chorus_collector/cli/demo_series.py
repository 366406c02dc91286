"""The demo's series: one app's daily campaign over the last 90 days, at the client's default
caps (ε ≤ 2 per report, 8 for life), estimated every day beside the truth.

A lifetime budget of 8 pays for 4 reports of ε = 2 per install. Each install draws its 4 days
at random over the 90 (``chorus_shared.schedule``), so every day has a random sample of about
n·4/90 installs, and the series keeps flowing to the last day; report-until-spent would fall
silent after the 4th day, and ε = 8/90 a day would drown every day in noise.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from chorus_client import APIError, Client, CollectorAPI, Transport
from chorus_client.plan import draw_plan
from chorus_client.policy import DEFAULT_LIFETIME_BUDGET
from chorus_collector.cli.demo_reports import install_report
from chorus_collector.cli.progress import progress_bar
from chorus_shared.campaign import Campaign
from chorus_shared.rng import resolve_rng

__all__ = ["SERIES_DAYS", "SeriesPopulation", "series_plans", "series_reports",
           "series_spec", "simulate_series", "summarize_series"]

DAY = 86400
SERIES_NAME = "dark_mode"
SERIES_DAYS = 90
SERIES_USERS = 10_000
#: The series' budget per install: the client's default lifetime budget, all of it for this
#: app's one campaign (4 reports of ε = 2).
SERIES_BUDGET = DEFAULT_LIFETIME_BUDGET
#: The true share of installs with dark mode on steps up on this day of the 90.
SWITCH_DAY = 60
SHARE_BEFORE, SHARE_AFTER = 0.30, 0.36


def series_start(now: float) -> int:
    """Midnight UTC 89 days before today: the 90 days end today."""
    return (int(now) // DAY - (SERIES_DAYS - 1)) * DAY


def series_spec(now: float) -> dict[str, Any]:
    start = series_start(now)
    switch = _date(start + SWITCH_DAY * DAY)
    return {
        "name": SERIES_NAME, "mechanism": "krr", "epsilon": 2.0, "domain": ["off", "on"],
        "privacy": {"budget": 8.0}, "min_batch_size": 100, "time_precision": DAY,
        "report_expiry": 120 * DAY,
        "schedule": {"cadence": "day", "start": _date(start), "periods": SERIES_DAYS},
        "description": (f"Is dark mode on? Every day for {SERIES_DAYS} days, at the client's "
                        "default caps: each install reports on 4 days drawn at random. "
                        f"Simulated truth: {SHARE_BEFORE:.0%} on until {switch}, "
                        f"{SHARE_AFTER:.0%} from then")}


@dataclass(frozen=True)
class SeriesPopulation:
    """Installs that all have the app from the first day; some turn dark mode on at the
    switch (seeded)."""

    before: list[bool]
    after: list[bool]

    @classmethod
    def draw(cls, users: int, seed: int) -> SeriesPopulation:
        rng = random.Random(seed)
        before = [rng.random() < SHARE_BEFORE for _ in range(users)]
        turn = (SHARE_AFTER - SHARE_BEFORE) / (1 - SHARE_BEFORE)
        after = [on or rng.random() < turn for on in before]
        return cls(before, after)

    def value(self, install: int, day: int) -> str:
        on = self.after[install] if day >= SWITCH_DAY else self.before[install]
        return "on" if on else "off"

    def truth(self, day: int) -> float:
        values = self.after if day >= SWITCH_DAY else self.before
        return sum(values) / len(values)


def simulate_series(url: str, campaign: Campaign, population: SeriesPopulation,
                    transport: Transport, installs: range, workers: int = 8) -> int:
    """These installs through the real client: each first sees the campaign on day 0, and
    reports on the days its plan drew (a call on any other day returns ``"skipped"`` and
    changes nothing, so the simulation makes only these)."""
    schedule = campaign.schedule
    assert schedule is not None
    start = schedule.start
    day_of = {schedule.date(day): day for day in range(schedule.periods)}

    def one_install(i: int) -> int:
        now = [start + 3600.0]
        client = Client(url, ephemeral=True, transport=transport,
                        campaigns={SERIES_NAME: campaign}, send_delay=0.0,
                        clock=lambda: now[0])
        (plan,) = client.plan()
        for date in plan.periods or ():
            day = day_of[date]
            now[0] = start + day * DAY + 3600.0
            client.report(SERIES_NAME, population.value(i, day))
        client.flush()
        return client.totals.accepted

    accepted = 0
    with ThreadPoolExecutor(workers) as pool, \
            progress_bar(len(installs), "install", "daily-series installs") as bar:
        for count in pool.map(one_install, installs, chunksize=16):
            accepted += count
            bar.update(1)
    return accepted


def series_plans(campaign: Campaign, installs: range) -> dict[int, tuple[int, ...]]:
    """The days each of these installs reports on, drawn as the client draws them when it
    first sees the campaign on day 0 (``draw_plan``, the OS CSPRNG): 4 of the 90 for a
    budget of 8 at ε = 2."""
    schedule = campaign.schedule
    assert schedule is not None
    rng = resolve_rng(None)
    return {i: draw_plan(campaign, pool="pinned", budget=SERIES_BUDGET,
                         now=schedule.start + 3600.0, rng=rng, spent=0.0,
                         reserved=0.0).slots or ()
            for i in installs}


def series_reports(campaign: Campaign, population: SeriesPopulation,
                   plans: dict[int, tuple[int, ...]]) -> Iterator[dict[str, Any]]:
    """Each install's report of its value on each of its planned days, as the client makes
    it (``demo_reports``)."""
    assert campaign.schedule is not None
    start = campaign.schedule.start
    for install, days in plans.items():
        for day in days:
            yield install_report(campaign, population.value(install, day),
                                 start + day * DAY + 3600.0)


def summarize_series(api: CollectorAPI, campaign: Campaign, population: SeriesPopulation,
                     echo: Callable[[str], None]) -> tuple[int, int]:
    """Print the series week by week beside the truth and the 14-day comparison across the
    switch; returns (days whose 95% interval covers the truth, days with an estimate)."""
    assert campaign.schedule is not None
    start = campaign.schedule.start
    end = start + SERIES_DAYS * DAY
    series = api.series(SERIES_NAME, start=start, end=end, step="day", values=["on"])
    points = series["series"][0]["points"]
    shown = [p for p in points if p["estimate"] is not None]
    covered = sum(p["ci_low"] <= population.truth((p["start"] - start) // DAY) <= p["ci_high"]
                  for p in shown)
    echo(f"\n{SERIES_NAME}: share of installs with dark mode on, every day for "
         f"{SERIES_DAYS} days ({len(population.before)} installs, 4 reports each at ε = 2: "
         "the client's default caps)")
    echo(f"  {'week from':<11} {'reports':>7}  {'mean daily estimate':>19}  {'truth':>5}")
    for week in range(0, SERIES_DAYS, 7):
        days = [p for p in points if week <= (p["start"] - start) // DAY < week + 7]
        estimates = [p["estimate"] for p in days if p["estimate"] is not None]
        truth = sum(population.truth(d) for d in range(week, min(week + 7, SERIES_DAYS)))
        mean = f"{sum(estimates) / len(estimates):.3f}" if estimates else "—"
        echo(f"  {_date(start + week * DAY):<11} {sum(p['n'] for p in days):>7}  {mean:>19}"
             f"  {truth / min(7, SERIES_DAYS - week):.3f}")
    echo(f"  {len(shown)} of {SERIES_DAYS} days have an estimate; {covered} of them lie "
         "within their 95% interval of the truth")
    switch = start + SWITCH_DAY * DAY
    try:
        comparison = api.compare(SERIES_NAME, baseline_start=switch - 14 * DAY,
                                 baseline_end=switch, start=switch, end=switch + 14 * DAY)
    except APIError as error:  # a small --users: too few reports in a window
        echo(f"  no comparison across {_date(switch)}: {error}")
        return covered, len(shown)
    row = next(r for r in comparison["rows"] if r["value"] == "on")
    echo(f"  the 14 days from {_date(switch)} against the 14 before: {row['difference']:+.3f} "
         f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}], "
         f"{'significant' if row['significant'] else 'not significant'} (true "
         f"{population.truth(SWITCH_DAY) - population.truth(SWITCH_DAY - 1):+.3f})")
    return covered, len(shown)


def _date(unix_seconds: float) -> str:
    return dt.datetime.fromtimestamp(unix_seconds, dt.UTC).date().isoformat()


