"""An alert rule: what an admin asks to be told, checked before anything is stored.

A rule watches one campaign: after folds that bring it new reports, at most once per time
bucket, it compares the last ``window`` seconds (whole buckets, up to the start of the bucket
now running) with the ``window`` before, as ``GET /v1/campaigns/<name>/compare`` does, over
the rule's ``values`` (every value the comparison answers, or a list), with the p-values
adjusted by ``correction`` across exactly the values it tests. A value is significant when its
adjusted p-value is below ``alpha`` and its change is at least ``min_change`` in absolute
value; the rule notifies its webhook when a value turns significant ("triggered") and, with
``resolved``, when it stops being so.

The webhook URL may carry a credential in its path (chat services' incoming webhooks do), so
it is write-only: a rule is shown with the URL's origin alone, and the URL never goes to a
log. The optional ``secret`` signs each notification (``alerts/deliver.py``) and is never
shown at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from chorus_collector.analysis.compare import CORRECTIONS
from chorus_collector.analysis.windows import query_labels
from chorus_collector.kinds import kind_of
from chorus_collector.problems import Problem
from chorus_collector.storage import AlertState, StoredAlertRule, StoredCampaign
from chorus_shared.campaign import NAME_PATTERN

__all__ = ["MAX_VALUES", "MAX_WINDOW", "RuleDefinition", "check_webhook", "dashboard_link",
           "parse_duration", "rule_definition", "rule_json", "takes_candidates",
           "webhook_origin"]

MAX_WINDOW = 366 * 86_400  # a year and a day: windows longer than this are not an alert's job
MAX_VALUES = 1_000
MAX_URL = 2_048
MIN_SECRET, MAX_SECRET = 16, 256  # a shared secret shorter than 16 characters is guessable
_FIELDS = {"name", "campaign", "window", "values", "correction", "alpha", "min_change",
           "resolved", "webhook", "secret"}
_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}


@dataclass(frozen=True)
class RuleDefinition:
    """A checked rule, ready to store (``definition`` is what ``StoredAlertRule`` keeps)."""

    name: str
    campaign: StoredCampaign
    definition: dict[str, Any]
    webhook: str
    secret: str | None


def parse_duration(value: Any) -> int:
    """Seconds from an integer or a duration such as ``30m``, ``6h``, ``1d``, ``2w``;
    ``ValueError`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _DURATION.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not a duration (seconds, or 30m, 6h, 1d, 2w)")
    return int(match[1]) * _UNITS[match[2]]


def _refuse(detail: str) -> Problem:
    return Problem("invalid-alert", detail)


def rule_definition(spec: Any, find_campaign: Any) -> RuleDefinition:
    """Check a rule's JSON (``POST /v1/alerts``) against its campaign, which
    ``find_campaign(name)`` gives (None: no such campaign). Raises :class:`Problem`."""
    if not isinstance(spec, Mapping):
        raise _refuse("an alert rule is a JSON object")
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise _refuse(f"unknown fields {unknown}; a rule takes {sorted(_FIELDS)}")
    name = spec.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise _refuse("name must be 1 to 64 characters of a-z, 0-9, '_', '.' and '-', "
                      "starting with a letter or digit")
    campaign_name = spec.get("campaign")
    if not isinstance(campaign_name, str):
        raise _refuse("campaign must be a campaign's name")
    stored: StoredCampaign | None = find_campaign(campaign_name)
    if stored is None:
        raise Problem("unknown-campaign", f"no campaign is named {campaign_name!r}")
    definition = {"window": _window(spec.get("window"), stored.campaign.time_precision),
                  "values": _values(spec.get("values", []), stored),
                  "correction": _correction(spec.get("correction", "benjamini-hochberg")),
                  "alpha": _number(spec.get("alpha", 0.05), "alpha", 0.0, 1.0),
                  "min_change": _number(spec.get("min_change", 0), "min_change", None, None),
                  "resolved": _flag(spec.get("resolved", False))}
    return RuleDefinition(name, stored, definition, check_webhook(spec.get("webhook")),
                          _secret(spec.get("secret")))


def _window(value: Any, precision: int) -> int:
    if value is None:
        raise _refuse("window is required: the duration compared with the one before it, "
                      "e.g. 1d")
    try:
        seconds = parse_duration(value)
    except ValueError as error:
        raise _refuse(f"window: {error}") from None
    if not 0 < seconds <= MAX_WINDOW or seconds % precision:
        raise _refuse(f"window must be a whole number of the campaign's time buckets "
                      f"({precision} s), at most {MAX_WINDOW // 86_400} days; got {seconds} s")
    return seconds


def _values(value: Any, stored: StoredCampaign) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) \
            or len(value) > MAX_VALUES:
        raise _refuse(f"values must be a list of at most {MAX_VALUES} strings (empty: every "
                      "value the comparison answers)")
    try:
        labels = query_labels(stored.campaign, tuple(value) if takes_candidates(stored) else ())
    except Problem as problem:  # candidates required, or listed twice
        raise _refuse(f"values: {problem.detail}") from None
    missing = [v for v in value if v not in labels]
    if missing or len(set(value)) != len(value):
        raise _refuse(f"values must be distinct values of the campaign ({labels[:10]}…); "
                      f"not {missing or 'a value listed twice'}")
    return list(value)


def _correction(value: Any) -> str:
    if value not in CORRECTIONS:
        raise _refuse(f"correction must be one of {list(CORRECTIONS)}")
    return str(value)


def _number(value: Any, name: str, low: float | None, high: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value \
            or value in (float("inf"), float("-inf")):
        raise _refuse(f"{name} must be a number")
    if low is not None and high is not None and not low < value < high:
        raise _refuse(f"{name} must be between {low:g} and {high:g}")
    if low is None and value < 0:
        raise _refuse(f"{name} must be at least 0")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _refuse("resolved must be true or false")
    return value


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not MIN_SECRET <= len(value) <= MAX_SECRET \
            or not value.isprintable():
        raise _refuse(f"secret must be {MIN_SECRET} to {MAX_SECRET} printable characters")
    return value


def takes_candidates(stored: StoredCampaign) -> bool:
    """Whether the campaign's values are candidates a query lists (open strings)."""
    campaign = stored.campaign
    return "candidates" in kind_of(campaign).query_parameters(campaign)


def check_webhook(value: Any) -> str:
    """An http(s) URL with a host and no user name or password (a credential in the URL's
    user part goes into every proxy's log; put it in the path, or sign with ``secret``)."""
    if not isinstance(value, str) or not value or len(value) > MAX_URL \
            or not value.isprintable() or " " in value:
        raise _refuse(f"webhook must be an http or https URL of at most {MAX_URL} characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError:
        raise _refuse("webhook is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refuse("webhook must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise _refuse("webhook must not carry a user name or password; sign notifications "
                      "with secret instead")
    if parts.fragment:
        raise _refuse("webhook must not have a fragment (#…): it is never sent")
    return value


def webhook_origin(url: str) -> str:
    """What is shown or logged of a webhook URL: its scheme and host, never its path or query
    (where a credential may be)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…"


def rule_json(rule: StoredAlertRule, campaign: str, state: AlertState | None = None
              ) -> dict[str, Any]:
    """A rule as the API shows it: never the webhook's path or the secret."""
    body: dict[str, Any] = {
        "name": rule.name, "campaign": campaign, **rule.definition,
        "webhook": webhook_origin(rule.webhook), "signed": rule.secret is not None,
        "created_at": rule.created_at, "evaluated_at": rule.evaluated_at,
        "last_end": rule.last_end or None, "last_error": rule.last_error}
    if state is not None:
        body["significant"] = sorted(state.active)
    return body


def dashboard_link(public_url: str | None, stored: StoredCampaign, baseline: tuple[int, int],
                   current: tuple[int, int], correction: str, values: list[str]) -> str:
    """The campaign page's comparison of exactly these windows (relative when no public URL
    is set)."""
    query: dict[str, Any] = {"baseline_start": baseline[0], "baseline_end": baseline[1],
                             "current_start": current[0], "current_end": current[1],
                             "correction": correction}
    if values and takes_candidates(stored):
        query["candidates"] = "\n".join(values)
    base = (public_url or "").rstrip("/")
    return (f"{base}/campaigns/{quote(stored.campaign.name, safe='')}?{urlencode(query)}"
            "#comparison")
