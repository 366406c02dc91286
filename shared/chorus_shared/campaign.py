"""Campaigns: immutable, named collections with a config digest that every report carries.

A campaign fixes the mechanism, its resolved parameters, ε, the value domain and the time
precision. Its config is a canonical JSON document; the digest is the SHA-256 of that document,
so any change to any parameter is a new digest, and a report made for one version of a campaign
is rejected by another. Changing a campaign means creating a new one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chorus_shared.domain import Categories, Domain, OpenStrings, domain_from_json
from chorus_shared.errors import CampaignError, PrivacyWarning
from chorus_shared.mechanisms import Mechanism, mechanism_class
from chorus_shared.mechanisms.base import check_epsilon
from chorus_shared.privacy import PrivacyPolicy, WorstCase, policy_from_json
from chorus_shared.schedule import Schedule, schedule_from_json
from chorus_shared.selection import choose_discovery, choose_mechanism

__all__ = [
    "CONFIG_FORMAT",
    "EPSILON_WARNING_THRESHOLD",
    "Campaign",
    "campaign_from_config",
    "campaign_from_spec",
    "canonical_json",
]

CONFIG_FORMAT = "chorus.campaign/1"
EPSILON_WARNING_THRESHOLD = 10.0
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
DEFAULT_TIME_PRECISION = 3600
DEFAULT_MIN_BATCH_SIZE = 100
DEFAULT_REPORT_EXPIRY = 90 * 86400
DERIVED_FIELDS = ("derived", "worst_case", "warnings")
_SPEC_FIELDS = {"name", "mechanism", "epsilon", "domain", "params", "time_precision",
                "min_batch_size", "report_expiry", "privacy", "description", "selection",
                "accept_weak_privacy", "schedule"}
#: A definition's explicit consent to ε ≥ EPSILON_WARNING_THRESHOLD, checked when a campaign
#: is created; not part of the config (it changes nothing the client does).
ACCEPT_WEAK_PRIVACY = "accept_weak_privacy"


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class Campaign:
    """A resolved campaign. Build one with :func:`campaign_from_spec`."""

    name: str
    mechanism: Mechanism
    time_precision: int = DEFAULT_TIME_PRECISION
    min_batch_size: int = DEFAULT_MIN_BATCH_SIZE
    report_expiry: int = DEFAULT_REPORT_EXPIRY
    description: str = ""
    policy: PrivacyPolicy = None  # type: ignore[assignment]  # None: the default policy
    selection: dict[str, Any] | None = field(default=None, compare=False)  # "auto": why
    schedule: Schedule | None = None  # cadence and horizon: reports spread over them
    config: dict[str, Any] = field(init=False, repr=False, compare=False)
    digest: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if self.policy is None:
            object.__setattr__(self, "policy", policy_from_json(None, self.mechanism.epsilon))
        config = {
            "format": CONFIG_FORMAT,
            "name": self.name,
            "description": self.description,
            "mechanism": self.mechanism.name,
            "epsilon": self.mechanism.epsilon,
            "domain": self.mechanism.domain.to_json(),
            "params": self.mechanism.params(),
            "time_precision": self.time_precision,
            "min_batch_size": self.min_batch_size,
            "report_expiry": self.report_expiry,
            "privacy": self.policy.to_json(),
        }
        if self.selection is not None:
            config["selection"] = self.selection
        if self.schedule is not None:
            config["schedule"] = self.schedule.to_json()
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "digest", hashlib.sha256(canonical_json(config)).hexdigest())

    @property
    def epsilon(self) -> float:
        return self.mechanism.epsilon

    @property
    def domain(self) -> Domain:
        return self.mechanism.domain

    @property
    def reports_per_install(self) -> int:
        """The reports one install makes: per UTC day for a ``day`` policy, else in all."""
        return self.policy.reports_per_period(self.epsilon)

    @property
    def reporting(self) -> str:
        """How many reports one install makes, and when, in words."""
        if self.schedule is not None:
            return (f"{self.schedule.describe(self.reports_per_install)}, at ε = "
                    f"{self.epsilon:.3g} each")
        return self.policy.describe(self.epsilon)

    @property
    def worst_case(self) -> WorstCase:
        """The most ε one install can spend on this campaign, per period and per year."""
        return self.policy.worst_case(self.epsilon)

    def public_config(self) -> dict[str, Any]:
        """What clients fetch: the config, its digest and derived facts for humans."""
        return {
            **self.config,
            "digest": self.digest,
            **self.derived_fields(),
        }

    def derived_fields(self) -> dict[str, Any]:
        """Facts computed from the config; a client recomputes them and refuses other values."""
        worst_case = self.worst_case.to_json()
        if self.schedule is not None:
            # Only for scheduled campaigns: a client from before schedules refuses them anyway,
            # and every other campaign's derived facts stay what such clients recompute.
            worst_case["reporting"] = self.reporting
        return {
            "derived": self.mechanism.describe(),
            "worst_case": worst_case,
            "warnings": privacy_warnings(self.epsilon),
        }

    def time_bucket(self, unix_seconds: float) -> int:
        """Truncate a timestamp to the campaign's time precision (start of its bucket)."""
        return int(unix_seconds // self.time_precision) * self.time_precision


def privacy_warnings(epsilon: float) -> list[str]:
    if epsilon >= EPSILON_WARNING_THRESHOLD:
        return [
            f"epsilon = {epsilon:g} is {EPSILON_WARNING_THRESHOLD:g} or more: each report's "
            "randomization protects little; an observer can usually tell the true value."
        ]
    return []


def campaign_from_spec(spec: Mapping[str, Any], *, warn: bool = True,
                       require_consent: bool = False) -> Campaign:
    """Validate a user's campaign definition and resolve every parameter.

    ``spec`` holds ``name``, ``mechanism``, ``epsilon`` (optional where the parameters fix it),
    ``domain``, optional ``params``, ``time_precision`` (seconds; report times are truncated to
    it), ``min_batch_size`` (fewest accepted reports an estimate may use), ``report_expiry``
    (seconds after which a report is too old to accept), ``privacy`` (the per-install policy:
    ``unit``, ``budget``, ``max_reports``; see :mod:`chorus_shared.privacy`) and
    ``description``; and ``schedule`` (``cadence``, ``start``, ``periods`` or ``end``: each
    install spreads its reports over the horizon, see :mod:`chorus_shared.schedule`).
    Issues :class:`PrivacyWarning` when ε ≥ 10. With ``require_consent`` (a new campaign),
    ε ≥ 10 is refused unless the definition says ``"accept_weak_privacy": true``.
    """
    if not isinstance(spec, Mapping):
        raise CampaignError("a campaign definition must be a JSON object")
    unknown = set(spec) - _SPEC_FIELDS - {"format", "digest", *DERIVED_FIELDS}
    if unknown:
        raise CampaignError(f"unknown campaign fields: {sorted(unknown)}")
    envelope = _envelope(spec)
    mechanism, selection = _mechanism(spec)
    consent = spec.get(ACCEPT_WEAK_PRIVACY, False)
    if not isinstance(consent, bool):
        raise CampaignError(f"{ACCEPT_WEAK_PRIVACY} must be true or false")
    if require_consent and not consent and mechanism.epsilon >= EPSILON_WARNING_THRESHOLD:
        raise CampaignError(
            f"epsilon = {mechanism.epsilon:g} is {EPSILON_WARNING_THRESHOLD:g} or more: each "
            "report protects little (an observer can usually tell the true value), and "
            "clients refuse reports above their max_epsilon (2 by default). To create it "
            f'anyway, add "{ACCEPT_WEAK_PRIVACY}": true to the definition.')
    if warn:
        for message in privacy_warnings(mechanism.epsilon):
            warnings.warn(message, PrivacyWarning, stacklevel=2)
    policy = policy_from_json(spec.get("privacy"), mechanism.epsilon)
    schedule = schedule_from_json(spec.get("schedule"), envelope["time_precision"])
    if schedule is not None and policy.unit != "lifetime":
        raise CampaignError("a campaign with a schedule spreads its reports over the horizon: "
                            "its privacy.unit must be 'lifetime' (the budget of one install "
                            "for the whole horizon)")
    try:
        return Campaign(mechanism=mechanism, policy=policy, selection=selection,
                        schedule=schedule, **envelope)
    except (ValueError, TypeError, RecursionError) as error:  # from the canonical JSON
        raise CampaignError(f"the campaign cannot be written as canonical JSON ({error}); "
                            "NaN and infinity are not allowed") from None


def _envelope(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields around the mechanism: name, description, time precision, batch, expiry."""
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CampaignError(
            "name must be 1-64 characters of a-z, 0-9, '_', '.', '-', starting with a letter "
            f"or digit; got {name!r}"
        )
    description = spec.get("description", "")
    if not isinstance(description, str) or len(description) > 2000:
        raise CampaignError("description must be a string of at most 2000 characters")
    precision = spec.get("time_precision", DEFAULT_TIME_PRECISION)
    if isinstance(precision, bool) or not isinstance(precision, int) or not (
        1 <= precision <= 366 * 86400
    ):
        raise CampaignError("time_precision must be an integer number of seconds in [1, 31622400]")
    return {"name": name, "description": description, "time_precision": precision,
            "min_batch_size": _integer_field(spec, "min_batch_size", DEFAULT_MIN_BATCH_SIZE, 1,
                                             10**9),
            "report_expiry": _integer_field(spec, "report_expiry", DEFAULT_REPORT_EXPIRY,
                                            precision, 10 * 366 * 86400)}


def _mechanism(spec: Mapping[str, Any]) -> tuple[Mechanism, dict[str, Any] | None]:
    """The resolved mechanism (``auto`` chosen by exact variance) and the selection record."""
    params = spec.get("params", {})
    if not isinstance(params, Mapping):
        raise CampaignError("params must be an object")
    epsilon = spec.get("epsilon")
    if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, int | float)):
        raise CampaignError(f"epsilon must be a number, got {epsilon!r}")
    if "domain" not in spec:
        raise CampaignError("a campaign needs a domain")
    domain = domain_from_json(spec["domain"])
    mechanism_name = spec.get("mechanism")
    selection = spec.get("selection")
    if selection is not None and not isinstance(selection, dict):
        raise CampaignError("selection must be an object")
    if mechanism_name == "auto":
        if isinstance(domain, OpenStrings) and epsilon is not None:
            mechanism_name, selection = choose_discovery(check_epsilon(epsilon), domain, params)
        elif not isinstance(domain, Categories) or epsilon is None:
            raise CampaignError("mechanism 'auto' needs epsilon and a categories domain (a "
                                "frequency oracle) or a strings domain (discovery)")
        else:
            mechanism_name, selection = choose_mechanism(check_epsilon(epsilon), domain,
                                                         params)
            params = {}
    cls = mechanism_class(mechanism_name)
    if domain.kind not in cls.domain_kinds:
        raise CampaignError(
            f"mechanism {cls.name!r} takes a {' or '.join(cls.domain_kinds)} domain, "
            f"not {domain.kind!r}"
        )
    mechanism = cls.resolve(epsilon=epsilon, domain=domain, params=params)
    if epsilon is not None and not math.isclose(mechanism.epsilon, epsilon, rel_tol=1e-9):
        raise CampaignError(
            f"epsilon = {epsilon} is inconsistent with the parameters (they give "
            f"{mechanism.epsilon:.9g})"
        )
    return mechanism, selection


def _normalised(value: Any) -> Any:
    # A JSON round trip makes 1 and 1.0 equal and tuples lists, as a fetched config has them.
    return json.loads(canonical_json(value))


def _integer_field(spec: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CampaignError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def campaign_from_config(config: Mapping[str, Any], *, expected_digest: str | None = None,
                         warn: bool = False) -> Campaign:
    """Rebuild a campaign from its stored or fetched config and check its digest.

    Resolving again re-derives ε from the parameters, so a config that claims a smaller ε than
    its parameters give is refused, whoever served it.
    """
    if config.get("format", CONFIG_FORMAT) != CONFIG_FORMAT:
        raise CampaignError(f"unsupported campaign config format {config.get('format')!r}")
    campaign = campaign_from_spec(config, warn=warn)
    if campaign.config != {k: config[k] for k in campaign.config if k in config}:
        raise CampaignError("campaign config does not round-trip: fields were altered")
    derived = campaign.derived_fields()
    for key in DERIVED_FIELDS:
        # Not covered by the digest, so checked here: a served config may not understate what
        # its parameters give (a human reads these numbers).
        if key in config and _normalised(config[key]) != _normalised(derived[key]):
            raise CampaignError(f"campaign {campaign.name!r}: {key} {config[key]!r:.200} does "
                                f"not match its parameters, which give {derived[key]!r:.200}")
    digest = expected_digest if expected_digest is not None else config.get("digest")
    if digest is not None and digest != campaign.digest:
        raise CampaignError(
            f"campaign {campaign.name!r}: digest {digest!r} does not match its config "
            f"({campaign.digest}); the config was altered or made by another version"
        )
    return campaign
