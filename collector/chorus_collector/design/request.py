"""What an admin tells the campaign designer, validated from a JSON-like dict.

``DesignRequest.from_json`` takes the fields a form or the CLI gives:

* ``kind``: ``categories``, ``numeric``, ``vector`` or ``strings``;
* the domain: ``categories`` (a list of names) or ``domain_size`` (names v0, v1, …) for
  categories; ``lo`` and ``hi`` for one number; ``attributes`` (``[{"name", "lo", "hi"}]``) or
  ``dimensions`` with ``lo`` and ``hi`` for a vector; ``candidates`` (how many strings the
  analyst expects to decode against) for strings;
* ``epsilon`` (ε of one report), ``users`` (reports in one time window, one per user);
* optional ``frequency`` (the share whose standard error to show beside f → 0; 0.1 by
  default), ``privacy`` (the campaign's per-install policy, as in a campaign definition),
  ``time_precision`` (seconds) and ``distribution`` (what to simulate): ``{category: share}``
  (shares summing to 1) for categories and strings, ``{"values": [...], "weights": [...]}`` for
  numbers (a vector's values are lists of D numbers; weights sum to 1, equal when omitted);
* a plan over time (docs/designing.md, "Over time"): ``schedule`` (as in a campaign
  definition: ``cadence``, ``start``, ``periods`` or ``end``), ``installs`` (the installs
  active in a period) and ``privacy.budget`` (the campaign's share of each install's lifetime
  budget), with ``min_batch_size`` optional. With a plan, ``epsilon`` defaults to the
  recommended ε per report and ``users`` to the reports one period expects, n·r/T.

Every problem is a :class:`~chorus_shared.errors.CampaignError` (a ``ValueError``) that names
the field and what it must be.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chorus_client.policy import DEFAULT_LIFETIME_BUDGET, DEFAULT_MAX_EPSILON
from chorus_shared.campaign import DEFAULT_TIME_PRECISION
from chorus_shared.domain import (
    MAX_ATTRIBUTES,
    MAX_CATEGORIES,
    Categories,
    Domain,
    NumericRange,
    NumericVector,
    OpenStrings,
    finite_float,
)
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms.base import check_epsilon
from chorus_shared.privacy import PrivacyPolicy, policy_from_json, reports_within
from chorus_shared.schedule import Schedule, schedule_from_json

__all__ = ["DEFAULT_FREQUENCY", "KINDS", "PER_REPORT_CAP", "DesignRequest", "Distribution",
           "recommended_plan"]

KINDS = ("categories", "numeric", "vector", "strings")
DEFAULT_FREQUENCY = 0.1
MAX_USERS = 10**12
#: Shares typed by hand (0.33, 0.33, 0.34) may miss 1 by rounding; more than this is a mistake.
SHARE_TOLERANCE = 1e-3
_FIELDS = {"kind", "categories", "domain_size", "lo", "hi", "attributes", "dimensions",
           "candidates", "epsilon", "users", "frequency", "privacy", "time_precision",
           "distribution", "schedule", "installs", "min_batch_size"}
#: The client's default max_epsilon: it refuses campaigns whose one report spends more.
PER_REPORT_CAP = DEFAULT_MAX_EPSILON


def recommended_plan(budget: float, periods: int, cap: float = PER_REPORT_CAP
                     ) -> tuple[float, int]:
    """(ε per report, reports per install) that spends ``budget`` best over ``periods``.

    The variance-optimal ε per report is above the cap for (nearly) every mechanism
    (``planning``), so: as few reports as the cap allows, r = ⌈budget / cap⌉ (at most one
    per period), each at budget / r ≤ cap, which spends the budget exactly.
    """
    fit = reports_within(budget, cap, 10**6)  # ⌊budget / cap⌋, with the client's float slack
    reports = fit if fit * cap >= budget * (1 - 1e-9) else fit + 1
    reports = max(1, min(reports, periods))
    return min(cap, budget / reports), reports


@dataclass(frozen=True)
class Distribution:
    """What the simulated users hold: ``values[i]`` with probability ``weights[i]``.

    Values are category or string names, numbers, or tuples of D numbers; weights sum to 1.
    """

    values: tuple[Any, ...]
    weights: tuple[float, ...]

    def to_json(self, kind: str) -> Any:
        if kind in ("categories", "strings"):
            return dict(zip(self.values, self.weights, strict=True))
        values = [list(v) for v in self.values] if kind == "vector" else list(self.values)
        return {"values": values, "weights": list(self.weights)}


@dataclass(frozen=True)
class DesignRequest:
    kind: str
    domain: Domain
    epsilon: float
    users: int
    frequency: float = DEFAULT_FREQUENCY
    candidates: int | None = None
    policy: PrivacyPolicy | None = None
    time_precision: int | None = None
    distribution: Distribution | None = None
    schedule: Schedule | None = None  # a plan over time: the campaign's calendar
    installs: int | None = None  # installs active in a period
    min_batch_size: int | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DesignRequest:
        if not isinstance(obj, Mapping):
            raise CampaignError("a design request is a JSON object")
        unknown = set(obj) - _FIELDS
        if unknown:
            raise CampaignError(f"unknown design fields: {sorted(unknown)}; known: "
                                f"{sorted(_FIELDS)}")
        kind = obj.get("kind")
        if kind not in KINDS:
            raise CampaignError(f"kind must be one of {list(KINDS)}, got {kind!r:.40}")
        precision = obj.get("time_precision")
        if precision is not None:
            precision = _integer(obj, "time_precision", 1, 366 * 86400)
        schedule, installs, budget = _plan(obj, precision)
        if obj.get("epsilon") is None and schedule is not None and budget is not None:
            epsilon = check_epsilon(recommended_plan(budget, schedule.periods)[0])
        else:
            epsilon = check_epsilon(obj.get("epsilon"))
        frequency = _number(obj, "frequency", DEFAULT_FREQUENCY)
        if not 0 <= frequency <= 1:
            raise CampaignError(f"frequency must be a share in [0, 1], got {frequency:g}")
        domain, candidates = _domain(kind, obj)
        privacy = obj.get("privacy")
        policy = None if privacy is None else policy_from_json(privacy, epsilon)
        if schedule is not None and policy is not None and policy.unit != "lifetime":
            raise CampaignError("a plan over time spends the campaign's share of each "
                                "install's lifetime budget: privacy.unit must be 'lifetime'")
        if obj.get("users") is None and schedule is not None and installs is not None \
                and policy is not None:
            reports = min(policy.reports_per_period(epsilon), schedule.periods)
            users = max(1, round(installs * reports / schedule.periods))
        else:
            users = _integer(obj, "users", 1, MAX_USERS)
        batch = obj.get("min_batch_size")
        if batch is not None:
            batch = _integer(obj, "min_batch_size", 1, 10**9)
        distribution = None
        if obj.get("distribution") is not None:
            distribution = _distribution(kind, domain, obj["distribution"])
        return cls(kind=kind, domain=domain, epsilon=epsilon, users=users,
                   frequency=frequency, candidates=candidates, policy=policy,
                   time_precision=precision, distribution=distribution, schedule=schedule,
                   installs=installs, min_batch_size=batch)

    def to_json(self) -> dict[str, Any]:
        """The request in the form :meth:`from_json` reads (a round trip)."""
        body: dict[str, Any] = {"kind": self.kind, "epsilon": self.epsilon,
                                "users": self.users, "frequency": self.frequency}
        domain = self.domain
        if isinstance(domain, Categories):
            body["categories"] = list(domain.values)
        elif isinstance(domain, NumericRange):
            body.update(lo=domain.lo, hi=domain.hi)
        elif isinstance(domain, NumericVector):
            body["attributes"] = domain.to_json()["attributes"]
        else:
            body["candidates"] = self.candidates
        if self.policy is not None:
            body["privacy"] = self.policy.to_json()
        if self.time_precision is not None:
            body["time_precision"] = self.time_precision
        if self.distribution is not None:
            body["distribution"] = self.distribution.to_json(self.kind)
        if self.schedule is not None:
            body["schedule"] = self.schedule.to_json()
        if self.installs is not None:
            body["installs"] = self.installs
        if self.min_batch_size is not None:
            body["min_batch_size"] = self.min_batch_size
        return body


def _plan(obj: Mapping[str, Any], precision: int | None
          ) -> tuple[Schedule | None, int | None, float | None]:
    """(schedule, installs, the campaign's share of the lifetime budget) of a plan over
    time; all None without one. A plan needs all three."""
    has = [name for name in ("schedule", "installs") if obj.get(name) is not None]
    if not has:
        return None, None, None
    if len(has) == 1:
        missing = "installs (the installs active in a period)" if has == ["schedule"] \
            else 'schedule (e.g. {"cadence": "day", "start": "2026-01-01", "periods": 365})'
        raise CampaignError(f"a plan over time needs {missing} as well")
    schedule = schedule_from_json(obj["schedule"], precision or DEFAULT_TIME_PRECISION)
    installs = _integer(obj, "installs", 1, MAX_USERS)
    privacy = obj.get("privacy")
    budget = privacy.get("budget") if isinstance(privacy, Mapping) else None
    if budget is None:
        raise CampaignError("a plan over time needs the campaign's share of each install's "
                            "lifetime budget: privacy.budget (ε; the client's whole lifetime "
                            f"budget is {DEFAULT_LIFETIME_BUDGET:g} by default, shared by all of "
                            "the app's campaigns)")
    number = finite_float(budget)
    if number is None or isinstance(budget, bool) or number <= 0:
        raise CampaignError(f"privacy.budget must be a finite number > 0, got {budget!r:.40}")
    return schedule, installs, number


def _number(obj: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = obj.get(name, default)
    number = finite_float(value)
    if number is None:
        raise CampaignError(f"{name} must be a finite number, got {value!r:.40}")
    return number


def _integer(obj: Mapping[str, Any], name: str, lo: int, hi: int) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CampaignError(f"{name} must be an integer in [{lo}, {hi}], got {value!r:.40}")
    return value


def _domain(kind: str, obj: Mapping[str, Any]) -> tuple[Domain, int | None]:
    if kind == "categories":
        if obj.get("categories") is not None:
            names = obj["categories"]
            if isinstance(names, str) or not isinstance(names, Sequence):
                raise CampaignError("categories must be a list of names")
            domain = Categories(tuple(names))
        elif obj.get("domain_size") is not None:
            size = _integer(obj, "domain_size", 2, MAX_CATEGORIES)
            domain = Categories(tuple(f"v{i}" for i in range(size)))
        else:
            raise CampaignError("a categories design needs categories (a list of names) or "
                                "domain_size (how many)")
        if domain.size < 2:
            raise CampaignError(f"a categories design needs at least 2 categories (d ≥ 2), "
                                f"got {domain.size}")
        return domain, None
    if kind == "numeric":
        return NumericRange(_number(obj, "lo"), _number(obj, "hi")), None
    if kind == "vector":
        return _vector(obj), None
    candidates = _integer(obj, "candidates", 1, MAX_CATEGORIES)
    return OpenStrings(), candidates


def _vector(obj: Mapping[str, Any]) -> NumericVector:
    attributes = obj.get("attributes")
    if attributes is None:
        dimensions = _integer(obj, "dimensions", 1, MAX_ATTRIBUTES)
        unit = NumericRange(_number(obj, "lo", -1.0), _number(obj, "hi", 1.0))
        return NumericVector(tuple(f"a{i}" for i in range(dimensions)), (unit,) * dimensions)
    if not isinstance(attributes, list) or not attributes or not all(
            isinstance(a, Mapping) and set(a) == {"name", "lo", "hi"} for a in attributes):
        raise CampaignError('attributes must be a list of {"name": ..., "lo": ..., "hi": ...}')
    return NumericVector(tuple(a["name"] for a in attributes),
                         tuple(NumericRange(a["lo"], a["hi"]) for a in attributes))


def _distribution(kind: str, domain: Domain, obj: object) -> Distribution:
    if kind in ("categories", "strings"):
        if not isinstance(obj, Mapping) or not obj:
            raise CampaignError("distribution must map each category to its share, e.g. "
                                '{"a": 0.5, "b": 0.5}')
        if isinstance(domain, Categories):
            unknown = [str(v) for v in obj if v not in domain.values]
            if unknown:
                raise CampaignError(f"distribution names unknown categories: {unknown[:5]}")
        elif not all(isinstance(v, str) and v for v in obj):
            raise CampaignError("distribution keys must be non-empty strings")
        # In the domain's order (strings: sorted), not the mapping's: the same distribution
        # sent as JSON with its keys reordered draws the same simulated population.
        order = [v for v in domain.values if v in obj] if isinstance(domain, Categories) \
            else sorted(obj)
        values, weights = tuple(order), [obj[v] for v in order]
    else:
        if not isinstance(obj, Mapping) or not isinstance(obj.get("values"), list) \
                or not obj["values"] or set(obj) - {"values", "weights"}:
            raise CampaignError('distribution must be {"values": [...], "weights": [...]} '
                                "(weights optional: equal)")
        values = tuple(_point(domain, v) for v in obj["values"])
        weights = obj.get("weights", [1 / len(values)] * len(values))
        if not isinstance(weights, list) or len(weights) != len(values):
            raise CampaignError("distribution weights must be a list as long as its values")
    return Distribution(values, _shares(weights))


def _shares(weights: Sequence[object]) -> tuple[float, ...]:
    numbers = [finite_float(w) for w in weights]
    if any(w is None or w < 0 for w in numbers):
        raise CampaignError("distribution shares must be finite numbers ≥ 0")
    total = math.fsum(w for w in numbers if w is not None)
    if abs(total - 1) > SHARE_TOLERANCE:
        raise CampaignError(f"distribution shares sum to {total:.6g}, not 1")
    return tuple(w / total for w in numbers if w is not None)


def _point(domain: Domain, value: object) -> Any:
    """One value of a numeric distribution, checked to lie in the domain (the device would
    clip it, so the simulated truth would not be what was typed)."""
    if isinstance(domain, NumericRange):
        return _inside(value, domain, "value")
    assert isinstance(domain, NumericVector)
    if not isinstance(value, list | tuple) or len(value) != domain.size:
        raise CampaignError(f"each distribution value is a list of {domain.size} numbers")
    return tuple(_inside(x, r, name) for x, r, name in zip(value, domain.ranges, domain.names,
                                                             strict=True))


def _inside(value: object, domain: NumericRange, name: str) -> float:
    number = finite_float(value)
    if number is None:
        raise CampaignError(f"distribution {name} must be a finite number, got {value!r:.40}")
    if not domain.lo <= number <= domain.hi:
        raise CampaignError(f"distribution {name} {number:g} is outside [{domain.lo:g}, "
                            f"{domain.hi:g}] (the device would clip it)")
    return number
