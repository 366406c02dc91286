"""Campaign validation, digests and immutability (chorus_shared.campaign)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from chorus_shared import (
    CampaignError,
    PrivacyWarning,
    campaign_from_config,
    campaign_from_spec,
)
from helpers.support import campaign_spec


def spec(mechanism: str = "krr", **overrides: Any) -> dict[str, Any]:
    name = overrides.pop("name", "c1")
    if mechanism not in ("krr", "rr", "rappor", "duchi"):
        return {**campaign_spec(name), "mechanism": mechanism, **overrides}
    return campaign_spec(name, mechanism=mechanism, **overrides)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"epsilon": 0}, "epsilon must be a finite number > 0"),
    ({"epsilon": -1}, "epsilon must be a finite number > 0"),
    ({"epsilon": float("nan")}, "epsilon must be a finite number > 0"),
    ({"epsilon": float("inf")}, "epsilon must be a finite number > 0"),
    ({"epsilon": "1"}, "epsilon must be a number"),
    ({"epsilon": True}, "epsilon must be a number"),
    ({"epsilon": None}, "needs epsilon"),
    ({"domain": []}, "at least one category"),
    ({"domain": ["a", "b", "a"]}, "duplicates"),
    ({"domain": ["a", ""]}, "non-empty string"),
    ({"domain": ["a", 3]}, "non-empty string"),
    ({"domain": ["only"]}, "at least 2 categories"),
    ({"domain": [f"c{i}" for i in range(65_537)]}, "at most 65536"),
    ({"domain": {"kind": "numeric", "lo": 0, "hi": 1}}, "takes a categories domain"),
    ({"mechanism": "nope"}, "unknown mechanism"),
    ({"params": {"k": 3}}, "unknown parameters"),
    ({"name": "Bad Name"}, "name must be"),
    ({"time_precision": 0}, "time_precision"),
    ({"min_batch_size": 0}, "min_batch_size"),
    ({"surprise": 1}, "unknown campaign fields"),
    ({"privacy": {"unit": "week"}}, "privacy.unit"),
    ({"privacy": {"budget": 1.0}}, "privacy.budget"),
    ({"privacy": {"budget": float("inf")}}, "privacy.budget"),
    ({"privacy": {"memoize": True}}, "privacy.memoize is not supported"),
    ({"privacy": {"max_reports": 0}}, "privacy.max_reports"),
    ({"privacy": {"extra": 0}}, "unknown privacy fields"),
    ({"privacy": []}, "privacy must be an object"),
])
def test_invalid_categorical_campaigns_are_refused(overrides: dict[str, Any],
                                                   message: str) -> None:
    mechanism = overrides.pop("mechanism", "krr")
    with pytest.raises(CampaignError, match=message):
        campaign_from_spec(spec(mechanism, **overrides))


@pytest.mark.parametrize(("domain", "message"), [
    ({"kind": "numeric", "lo": 1, "hi": 1}, "lo < hi"),
    ({"kind": "numeric", "lo": 2, "hi": 1}, "lo < hi"),
    ({"kind": "numeric", "lo": 0, "hi": float("inf")}, "finite"),
    ({"kind": "numeric", "lo": 0}, "both 'lo' and 'hi'"),
    ({"kind": "numeric", "lo": "0", "hi": 1}, "must be a number"),
    ({"kind": "numeric", "lo": 0, "hi": 1, "step": 2}, "unknown domain fields"),
    ({"kind": "galaxy"}, "domain.kind"),
])
def test_invalid_numeric_domains_are_refused(domain: dict[str, Any], message: str) -> None:
    with pytest.raises(CampaignError, match=message):
        campaign_from_spec(spec("duchi", domain=domain))


def test_rappor_parameters_must_agree_with_epsilon() -> None:
    params = {"k": 16, "h": 2, "m": 4, "f": 0.5, "p": 0.5, "q": 0.75}
    derived = campaign_from_spec(spec("rappor", epsilon=None, params=params))
    # google/rappor's worked example (MECHANISMS.md §5.2): ε₁ = 1.0743, ε∞ = 4 ln 3.
    assert derived.epsilon == pytest.approx(1.0743, abs=1e-4)
    assert derived.mechanism.epsilon_longitudinal == pytest.approx(4 * math.log(3))
    with pytest.raises(CampaignError, match="does not match"):
        campaign_from_spec(spec("rappor", epsilon=2.0, params=params))
    with pytest.raises(CampaignError, match="both p and q"):
        campaign_from_spec(spec("rappor", params={"p": 0.5}))
    with pytest.raises(CampaignError, match="unreachable"):
        campaign_from_spec(spec("rappor", epsilon=20.0, params={"f": 0.5, "h": 1}))
    with pytest.raises(CampaignError, match="0 <= p < q <= 1"):
        campaign_from_spec(spec("rappor", epsilon=None, params={"p": 0.8, "q": 0.2}))


def test_rappor_epsilon_solves_to_the_requested_value_with_prr_noise() -> None:
    for f in (0.0, 0.25, 0.5):
        for eps in (0.5, 2.0, 4.0):
            campaign = campaign_from_spec(spec("rappor", epsilon=eps,
                                               params={"f": f, "h": 2}))
            assert campaign.epsilon == pytest.approx(eps, rel=1e-12)


def test_large_epsilon_warns_but_is_allowed() -> None:
    with pytest.warns(PrivacyWarning, match="protects little"):
        campaign = campaign_from_spec(spec(epsilon=10.5))
    assert campaign.public_config()["warnings"]
    with pytest.raises(CampaignError, match="meaningless"):
        campaign_from_spec(spec(epsilon=60))


def test_epsilon_ten_is_warned_and_just_below_is_not() -> None:
    """The threshold is inclusive: ε = 10 keeps binary RR's truth with probability 0.99995."""
    import warnings

    with pytest.warns(PrivacyWarning, match="10 or more"):
        assert campaign_from_spec(spec(epsilon=10)).public_config()["warnings"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert campaign_from_spec(spec(epsilon=9.99)).public_config()["warnings"] == []


@pytest.mark.parametrize("change", [
    {"epsilon": 1.5000001},
    {"domain": ["a", "b", "c", "e"]},
    {"domain": ["b", "a", "c", "d"]},
    {"time_precision": 60},
    {"min_batch_size": 2},
    {"report_expiry": 86400},
    {"privacy": {"unit": "day"}},
    {"privacy": {"max_reports": 999}},
    {"privacy": {"budget": 3.0}},
    {"privacy": {"max_reports": 5}},
    {"description": "x"},
    {"mechanism": "rappor", "domain": {"kind": "strings"}, "epsilon": 1.5},
])
def test_any_change_changes_the_digest(change: dict[str, Any]) -> None:
    base = campaign_from_spec(spec())
    mechanism = change.pop("mechanism", "krr")
    changed_spec = spec(mechanism, **change)
    changed = campaign_from_spec(changed_spec)
    assert changed.digest != base.digest


def test_digest_is_stable_and_config_round_trips() -> None:
    for mechanism in ("krr", "rr", "rappor", "duchi"):
        campaign = campaign_from_spec(spec(mechanism))
        again = campaign_from_spec(spec(mechanism))
        assert campaign.digest == again.digest
        public = campaign.public_config()
        assert campaign_from_config(public).digest == campaign.digest


def test_a_config_claiming_less_privacy_loss_than_its_parameters_is_refused() -> None:
    public = campaign_from_spec(spec("rappor", epsilon=None, params={
        "k": 16, "h": 2, "m": 4, "f": 0.0, "p": 0.25, "q": 0.75})).public_config()
    tampered = copy.deepcopy(public)
    tampered["epsilon"] = 0.5  # the params give ε = 2·2·ln 3 ≈ 4.39
    with pytest.raises(CampaignError):
        campaign_from_config(tampered)
    altered = copy.deepcopy(public)
    altered["params"]["q"] = 0.9
    altered["epsilon"] = campaign_from_spec(
        {k: altered[k] for k in ("name", "mechanism", "domain", "params")}).epsilon
    altered["privacy"]["budget"] = altered["epsilon"]
    with pytest.raises(CampaignError, match=r"derived .* does not match"):
        campaign_from_config(altered)  # the derived facts still describe the old parameters
    for field in ("derived", "worst_case", "warnings"):
        del altered[field]
    with pytest.raises(CampaignError, match="digest"):
        campaign_from_config(altered)


def test_time_bucket_truncates_to_precision() -> None:
    campaign = campaign_from_spec(spec(time_precision=3600))
    assert campaign.time_bucket(7199.9) == 3600
    assert campaign.time_bucket(7200) == 7200


def test_numeric_range_must_have_a_finite_width() -> None:
    with pytest.raises(CampaignError, match="finite"):
        campaign_from_spec(spec("duchi", domain={"kind": "numeric", "lo": -1e308, "hi": 1e308}))


def test_rappor_at_large_epsilon_keeps_full_precision() -> None:
    with pytest.warns(PrivacyWarning):
        campaign = campaign_from_spec(spec("rappor", epsilon=30.0, params={"h": 1}))
    assert campaign.epsilon == pytest.approx(30.0, rel=1e-9)
    assert campaign_from_config(campaign.public_config()).digest == campaign.digest
