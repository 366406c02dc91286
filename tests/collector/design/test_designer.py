"""The campaign designer: its predicted standard errors are those of the real estimator on
simulated campaigns, its definitions create the campaign it describes, and bad input is said
clearly (library, CLI).

Variance model throughout: i.i.d. sampling of users (each run draws its users afresh from the
distribution), the model of the designer and of the estimators' standard errors.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from chorus_client.api import CollectorAPI
from chorus_client.transport import WSGITransport
from chorus_collector.cli import main
from chorus_collector.design.designer import (
    DesignRequest,
    design,
    frequency_variance,
    simulate_design,
    spec,
)
from chorus_shared.campaign import campaign_from_config, campaign_from_spec
from chorus_shared.compare import frequency_table, mean_table
from chorus_shared.domain import Categories
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import OUE, REGISTRY
from chorus_shared.selection import choose_mechanism
from helpers.support import ADMIN, chi2_band, z_threshold

#: Per-mechanism false-alarm rate of the variance-ratio and bias checks.
ALPHA = 1e-4
REPETITIONS = 1000
USERS = 1500
#: Users per run of the repeated simulation: its docstring's power argument.
REPEATED_USERS = 1000

CATEGORIES = {"kind": "categories", "categories": ["a", "b", "c", "d", "e"], "epsilon": 1.5,
              "users": USERS, "distribution": {"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}}
# Mean 0 on [−1, 1]: where the worst-case prediction of the design table is attained.
NUMBERS = {"kind": "numeric", "lo": 0, "hi": 10, "epsilon": 2.0, "users": USERS,
           "distribution": {"values": [0, 5, 10], "weights": [0.3, 0.4, 0.3]}}
VECTORS = {"kind": "vector", "attributes": [{"name": "cpu", "lo": 0, "hi": 100},
                                            {"name": "temp", "lo": -20, "hi": 80},
                                            {"name": "load", "lo": 0, "hi": 1}],
           "epsilon": 2.0, "users": USERS,
           "distribution": {"values": [[0, 80, 0.5], [100, -20, 1], [30, 30, 0]],
                            "weights": [0.4, 0.4, 0.2]}}


@pytest.mark.parametrize(("request_body", "mechanism"), [
    (CATEGORIES, "krr"), (CATEGORIES, "oue"), (CATEGORIES, "olh"),
    (NUMBERS, "duchi"), (NUMBERS, "pm"), (VECTORS, "duchi_md"), (VECTORS, "harmony"),
], ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_predicted_standard_error_matches_repeated_simulation(request_body: dict[str, Any],
                                                              mechanism: str) -> None:
    """R seeded runs: s²/σ² of each estimate against the predicted σ lies in the χ²(R − 1)
    band, and the mean of the estimates is within z·σ/√R of the truth (Bonferroni over the
    estimates of one run).

    Sized as tests/mechanisms/test_unbiased.py is: the band bounds a ratio to the predicted
    variance and depends on R only (a wrong variance formula is caught whatever the users),
    so the cost, users·R simulated reports, is sized through the users by the bias check's
    power. A bias above (z* + 3.09)·σ/√R fails with probability 0.999 (z* = 3.9–4.3 here);
    a sampler probability wrong by δ shifts a share by δ/(p* − q*) (k-RR, OUE, OLH at
    ε = 1.5) and a Duchi/Harmony mean by 2·C·δ·(half the range) (C = 1.31 at ε = 2).
    At 1,000 users and R = 1000 every δ of 0.0037 or more is caught that surely for the
    frequency oracles and Duchi (a mean off by 0.046 on [0, 10]; PM's σ is Duchi's within
    4%, so the same for PM), 0.0072 for the vectors (duchi_md's taken as Harmony's
    per-coordinate flip), within test_unbiased's 0.008; at the former 1,500 users,
    0.0030 and 0.0059. The report's excess kurtosis adds O(1/users) to the ratio's
    variance against its 2/R, negligible at either size.
    """
    request_body = {**request_body, "users": REPEATED_USERS}
    runs = [simulate_design(request_body, mechanism, seed) for seed in range(REPETITIONS)]
    estimates = np.array([[e["estimate"] for e in run["estimates"]] for run in runs])
    first = runs[0]["estimates"]
    predicted = np.array([e["predicted_std_error"] for e in first])
    truth = np.array([e["true"] for e in first])
    assert runs[0]["simulator"] == "vectorized" and runs[0]["simulated_users"] == REPEATED_USERS
    count = len(first)
    low, high = chi2_band(REPETITIONS - 1, ALPHA / count)
    ratio = estimates.var(axis=0, ddof=1) / predicted**2
    assert np.all((ratio > low) & (ratio < high)), \
        f"s²/σ² = {np.round(ratio, 3)} outside [{low:.3f}, {high:.3f}]"
    z = (estimates.mean(axis=0) - truth) / (predicted / math.sqrt(REPETITIONS))
    assert np.max(np.abs(z)) < z_threshold(ALPHA, count), np.round(z, 2)


def test_the_design_table_predicts_the_simulated_standard_error() -> None:
    """The table's SE at f = share (and a mean's worst case, attained at mean 0) is the one a
    simulation predicts for that distribution."""
    table = design({**CATEGORIES, "frequency": 0.3})
    krr = next(row for row in table.rows if row["mechanism"] == "krr")
    simulated = simulate_design(CATEGORIES, "krr", 0)["estimates"]
    assert krr["std_error_at_frequency"] == pytest.approx(simulated[1]["predicted_std_error"])
    assert krr["std_error"] == pytest.approx(simulated[4]["predicted_std_error"])  # f = 0
    duchi = next(row for row in design(NUMBERS).rows if row["mechanism"] == "duchi")
    assert duchi["std_error"] == pytest.approx(
        simulate_design(NUMBERS, "duchi", 0)["estimates"][0]["predicted_std_error"])


def test_rows_agree_with_the_exact_tables_and_auto() -> None:
    request = {"kind": "categories", "domain_size": 64, "epsilon": 1.0, "users": 10_000}
    result = design(request)
    by_name = {row["mechanism"]: row for row in result.rows}
    for expected in frequency_table(1.0, 64):
        row = by_name[expected["mechanism"]]
        assert row["variance_per_user"] == pytest.approx(expected["variance_per_user"])
        assert row["std_error"] == pytest.approx(math.sqrt(expected["variance_per_user"]
                                                           / 10_000))
        assert row["ci_half_width"] == pytest.approx(1.959964 * row["std_error"])
        assert row["report_bits"] == expected["report_bits"]
    domain = DesignRequest.from_json(request).domain
    assert isinstance(domain, Categories)
    chosen, _ = choose_mechanism(1.0, domain, {})
    assert result.recommended == chosen
    assert [row["mechanism"] for row in result.rows if row["recommended"]] == [chosen]
    # A mean's worst case on [−1, 1] under i.i.d. sampling: Duchi's C², the others' + 1.
    means = {row["mechanism"]: row for row in design(NUMBERS).rows}
    for expected in mean_table(2.0):
        extra = 0.0 if expected["mechanism"] == "duchi" else 1.0
        assert means[expected["mechanism"]]["variance_per_user"] == pytest.approx(
            expected["worst_case_variance"] + extra)
    assert means["duchi"]["std_error"] == pytest.approx(
        5 * math.sqrt(expected_duchi_c2(2.0) / USERS))  # 5 = half the range [0, 10]


def expected_duchi_c2(epsilon: float) -> float:
    return ((math.exp(epsilon) + 1) / (math.exp(epsilon) - 1)) ** 2


def test_frequency_variance_at_f_adds_the_sampling_term() -> None:
    """i.i.d. = fixed population + f(1 − f): Wang et al.'s exact n·Var plus sampling."""
    mechanism = REGISTRY["oue"].resolve(epsilon=1.0, domain=DesignRequest.from_json(
        CATEGORIES).domain, params={})
    assert isinstance(mechanism, OUE)
    p, q = mechanism.support_probabilities()
    f = 0.3
    fixed = q * (1 - q) / (p - q) ** 2 + f * (1 - p - q) / (p - q)
    assert frequency_variance(mechanism, f) == pytest.approx(fixed + f * (1 - f))


def test_privacy_over_time_follows_the_policy() -> None:
    daily = design({**NUMBERS, "privacy": {"unit": "day", "budget": 4.0, "max_reports": 3}})
    assert daily.privacy["reports_per_period"] == 2  # 4.0 / 2.0, below the cap of 3
    assert daily.privacy["per_utc_day"] == 4.0
    assert daily.privacy["per_30_days"] == 4.0 * 31
    assert daily.privacy["per_365_days"] == 4.0 * 366
    assert any("one report per user in the window" in note for note in daily.notes)
    # The campaign's own bound is not what one install spends: the client's lifetime budget
    # (8 by default) stops it after 4 reports of 2.
    assert daily.privacy["client_lifetime_budget"] == 8.0
    assert daily.privacy["reports_per_install"] == 4 and daily.privacy["per_install"] == 8.0
    assert "stops an install after 4 reports in all" in daily.privacy["summary"]
    lifetime = design(NUMBERS).privacy
    assert lifetime["per_report"] == lifetime["per_365_days"] == 2.0
    assert lifetime["reports_per_install"] == 1 and lifetime["per_install"] == 2.0
    assert "at most 1 report in its lifetime" in lifetime["summary"]
    assert "not offered" in lifetime["memoization"]


def test_the_spec_round_trips_and_its_digest_is_stable() -> None:
    request = {**CATEGORIES, "privacy": {"unit": "day", "budget": 1.5},
               "time_precision": 86400}
    body = spec(request, "oue", "browser", description="which browser")
    again = spec(DesignRequest.from_json(request).to_json(), "oue", "browser",
                 description="which browser")
    assert body == again
    campaign = campaign_from_spec(body)
    assert campaign.digest == campaign_from_spec(json.loads(json.dumps(again))).digest
    assert campaign_from_config(campaign.public_config()).digest == campaign.digest
    assert campaign.config["privacy"] == {"unit": "day", "budget": 1.5, "max_reports": 1}
    assert campaign.time_precision == 86400 and campaign.mechanism.name == "oue"
    auto = campaign_from_spec(spec(request, "auto", "browser"))
    assert auto.mechanism.name == design(request).recommended


@pytest.mark.parametrize(("change", "message"), [
    ({"epsilon": 0}, "epsilon must be a finite number > 0"),
    ({"epsilon": 80}, "meaningless"),
    ({"users": 0}, r"users must be an integer in \[1,"),
    ({"categories": ["only"]}, r"at least 2 categories \(d ≥ 2\)"),
    ({"categories": None, "domain_size": 1}, r"domain_size must be an integer in \[2,"),
    ({"distribution": {"a": 0.5, "b": 0.3}}, "shares sum to 0.8, not 1"),
    ({"distribution": {"a": 0.5, "zz": 0.5}}, r"unknown categories: \['zz'\]"),
    ({"distribution": {"a": -0.5, "b": 1.5}}, "finite numbers ≥ 0"),
    ({"frequency": 2}, r"frequency must be a share in \[0, 1\]"),
    ({"kind": "colours"}, "kind must be one of"),
    ({"colour": "red"}, r"unknown design fields: \['colour'\]"),
    ({"privacy": {"memoize": True}}, "memoize is not supported"),
])
def test_bad_requests_say_what_is_wrong(change: dict[str, Any], message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        design({**CATEGORIES, **change})


@pytest.mark.parametrize(("body", "message"), [
    ({**NUMBERS, "lo": 10, "hi": 0}, "lo < hi"),
    ({**NUMBERS, "distribution": {"values": [11]}}, r"11 is outside \[0, 10\]"),
    ({**NUMBERS, "distribution": {"values": [1, 2], "weights": [1]}}, "as long as its values"),
    ({**VECTORS, "distribution": {"values": [[1, 2]]}}, "a list of 3 numbers"),
    ({"kind": "strings", "epsilon": 1, "users": 10}, "candidates must be an integer"),
])
def test_bad_domains_and_distributions_say_what_is_wrong(body: dict[str, Any],
                                                         message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        design(body)


def test_simulation_needs_a_distribution_and_a_known_mechanism() -> None:
    bare = {k: v for k, v in CATEGORIES.items() if k != "distribution"}
    with pytest.raises(CampaignError, match="needs a distribution"):
        simulate_design(bare, "krr")
    with pytest.raises(CampaignError, match="not one the designer offers"):
        simulate_design(CATEGORIES, "duchi")


def test_simulation_caps_the_users_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from chorus_collector.design import simulation as design_simulation

    monkeypatch.setattr(design_simulation, "MAX_RANDOMIZER_USERS", 300)
    result = simulate_design(CATEGORIES, "ss", 1)  # no vectorized sampler: the client's
    assert result["simulator"] == "client randomizer" and result["simulated_users"] == 300
    assert "not 1500" in result["notes"][0]
    assert [e["label"] for e in result["estimates"]] == ["a", "b", "c", "d", "e"]


def test_bit_vector_reports_are_capped_by_their_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from chorus_collector.design import simulation as design_simulation

    monkeypatch.setattr(design_simulation, "MAX_SIMULATED_BITS", 5 * 1000)
    result = simulate_design(CATEGORIES, "oue", 1)  # 5 bits a report: 1000 reports
    assert result["simulator"] == "vectorized" and result["simulated_users"] == 1000
    assert simulate_design(CATEGORIES, "krr", 1)["simulated_users"] == USERS  # 3 bits


def test_weak_privacy_is_said_and_needs_consent_to_create() -> None:
    weak = {**CATEGORIES, "epsilon": 12.0}
    assert any("protects little" in note for note in design(weak).notes)
    with pytest.raises(CampaignError, match="accept_weak_privacy"):
        spec(weak, "krr", "weak")
    assert spec(weak, "krr", "weak", accept_weak_privacy=True)["accept_weak_privacy"] is True
    result = CliRunner().invoke(main, [*CLI_DESIGN, "--epsilon", "12", "--create", "weak"])
    assert result.exit_code == 1 and "--accept-weak-privacy" in result.output


def test_strings_are_decoded_against_the_distribution() -> None:
    body = {"kind": "strings", "candidates": 3, "epsilon": 2.0, "users": 2000,
            "distribution": {"example.com": 0.7, "example.org": 0.3}}
    result = simulate_design(body, "cms", 0)
    assert [e["label"] for e in result["estimates"]] == ["example.com", "example.org"]
    assert all(e["predicted_std_error"] > 0 for e in result["estimates"])
    rappor = next(row for row in design(body).rows if row["mechanism"] == "rappor")
    assert rappor["std_error"] is None and "simulate" in rappor["notes"][0]


def test_design_is_json() -> None:
    for body in (CATEGORIES, NUMBERS, VECTORS):
        assert json.loads(json.dumps(design(body).to_json(), allow_nan=False))
        assert json.loads(json.dumps(simulate_design(body, "auto" if body is CATEGORIES
                                                     else "duchi" if body is NUMBERS
                                                     else "harmony"), allow_nan=False))


CLI_DESIGN = ["design", "--kind", "categories", "--categories", "chrome,safari,firefox",
              "--epsilon", "1", "--users", "20000"]


def test_cli_prints_every_mechanism_and_the_privacy_spent() -> None:
    result = CliRunner().invoke(main, [*CLI_DESIGN, "--unit", "day", "--max-reports", "1"])
    assert result.exit_code == 0, result.output
    recommended = design({"kind": "categories", "categories": ["chrome", "safari", "firefox"],
                          "epsilon": 1.0, "users": 20000}).recommended
    assert any(line.startswith(recommended) and line.endswith("← recommended")
               for line in result.output.splitlines())
    assert "oue" in result.output and "SE f=0.1" in result.output
    # The plan the client follows: a daily campaign without a schedule goes silent once the
    # client's lifetime budget (8) is spent, and the output says so, not "366 in any 365 days".
    reporting = next(line for line in result.output.splitlines()
                     if line.startswith("reporting: "))
    assert "1 report per install per UTC day" in reporting
    assert "stops an install after 8 reports in all" in reporting
    assert "silent for good" in reporting and "366" not in reporting


def test_cli_simulates_a_typed_distribution_as_json() -> None:
    result = CliRunner().invoke(main, ["design", "--kind", "numeric", "--range", "-5,5",
                                       "--epsilon", "2", "--users", "5000", "--distribution",
                                       "-5=0.5,5=0.5", "--mechanism", "pm", "--format",
                                       "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["design"]["recommended"] == "duchi"
    assert body["simulation"]["mechanism"] == "pm"
    assert body["simulation"]["estimates"][0]["true"] == 0.0


@pytest.mark.parametrize(("extra", "message"), [
    (["--distribution", "chrome=0.5"], "shares sum to 0.5, not 1"),
    (["--distribution", "chrome=lots"], "--distribution: cannot read"),
    (["--epsilon", "0"], "epsilon must be a finite number > 0"),
    (["--mechanism", "pm", "--create", "x"], "not one the designer offers"),
])
def test_cli_says_bad_input_in_one_line(extra: list[str], message: str) -> None:
    result = CliRunner().invoke(main, [*CLI_DESIGN, *extra])
    assert result.exit_code == 1
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def _bridge(monkeypatch: pytest.MonkeyPatch, app: Flask) -> None:
    from chorus_collector.cli import design as design_cli

    monkeypatch.setattr(design_cli, "collector_api", lambda url, token: CollectorAPI(
        url, token, transport=WSGITransport(app)))


def test_cli_creates_the_designed_campaign(monkeypatch: pytest.MonkeyPatch, app: Flask,
                                           http: FlaskClient) -> None:
    _bridge(monkeypatch, app)
    result = CliRunner().invoke(main, [*CLI_DESIGN, "--create", "browser", "--mechanism",
                                       "oue", "--token", ADMIN, "--url", "http://collector"])
    assert result.exit_code == 0, result.output
    served = http.get("/v1/campaigns/browser").get_json()
    expected = campaign_from_spec(spec({"kind": "categories", "epsilon": 1.0, "users": 20000,
                                        "categories": ["chrome", "safari", "firefox"]},
                                       "oue", "browser"))
    assert served["digest"] == expected.digest
    assert f"created browser (oue, digest {expected.digest})" in result.output


def test_cli_create_needs_the_admin_token(monkeypatch: pytest.MonkeyPatch,
                                          app: Flask) -> None:
    _bridge(monkeypatch, app)
    result = CliRunner().invoke(main, [*CLI_DESIGN, "--create", "browser", "--url",
                                       "http://collector"], env={"CHORUS_TOKEN": ""})
    assert result.exit_code == 1
    assert "CHORUS_TOKEN" in result.output
