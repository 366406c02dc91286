"""The demo's fast installs make the reports the client makes: wire reports every campaign
accepts, noise with the mechanism's exact probabilities, and the series' days from the
client's own plan (4 distinct days of 90 at the default budget, as ``Client.plan`` draws)."""

from __future__ import annotations

import math
import time
from collections import Counter

from chorus_client import Client
from chorus_collector.cli.demo import DEMO_CAMPAIGNS, Population
from chorus_collector.cli.demo_reports import install_report
from chorus_collector.cli.demo_series import SERIES_DAYS, series_plans, series_spec
from chorus_shared import campaign_from_spec
from chorus_shared.wire import parse_report

DRAWS = 20_000
Z = 5.3  # two-sided α ≈ 10⁻⁷ for a binomial count


def test_every_demo_campaign_accepts_the_fast_reports() -> None:
    now = time.time()
    population = Population(200, seed=7)
    for index, spec in enumerate(DEMO_CAMPAIGNS):
        campaign = campaign_from_spec(spec)
        for install in range(200):
            value = population.values(install)[index]
            report = parse_report(install_report(campaign, value, now), campaign)
            assert report.digest == campaign.digest
            assert report.time == campaign.time_bucket(now)
    browser = campaign_from_spec(DEMO_CAMPAIGNS[0])
    ids = {install_report(browser, "chrome", now)["report_id"] for _ in range(1000)}
    assert len(ids) == 1000  # a fresh random ID each


def test_the_noise_has_the_mechanisms_exact_probability() -> None:
    """k-RR keeps the true category with e^ε / (e^ε + k − 1), and gives each other one
    1 / (e^ε + k − 1)."""
    campaign = campaign_from_spec(DEMO_CAMPAIGNS[0])  # browser: k-RR, ε = 1, 10 categories
    mechanism = campaign.mechanism
    k = 10
    keep = math.exp(campaign.epsilon) / (math.exp(campaign.epsilon) + k - 1)
    counts = Counter(install_report(campaign, "chrome", time.time())["payload"]
                     for _ in range(DRAWS))
    chrome = mechanism.encode("chrome")
    for category in range(k):
        p = keep if category == chrome else (1 - keep) / (k - 1)
        assert abs(counts[category] - DRAWS * p) <= Z * math.sqrt(DRAWS * p * (1 - p))


def test_the_series_days_are_the_clients_plan() -> None:
    campaign = campaign_from_spec(series_spec(time.time()))
    plans = series_plans(campaign, range(2_000))
    assert {len(days) for days in plans.values()} == {4}
    assert all(len(set(days)) == 4 and all(0 <= d < SERIES_DAYS for d in days)
               for days in plans.values())
    schedule = campaign.schedule
    assert schedule is not None
    client = Client("http://unused.test", ephemeral=True, campaigns={campaign.name: campaign},
                    clock=lambda: schedule.start + 3600.0)
    (plan,) = client.plan()
    assert plan.reports == 4
    # Uniform over the 90 days: each day is drawn by 4/90 of the installs.
    per_day = Counter(day for days in plans.values() for day in days)
    p = 4 / SERIES_DAYS
    assert all(abs(per_day[d] - 2_000 * p) <= Z * math.sqrt(2_000 * p * (1 - p))
               for d in range(SERIES_DAYS))
