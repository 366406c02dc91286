"""The wire format of reports (JSON over HTTP).

One report::

    {"report_id": "<32 hex digits>",   16 random bytes from the client's CSPRNG
     "digest": "<64 hex digits>",      the campaign config digest it was made for
     "time": 1767225600,               Unix seconds, truncated to the campaign's time precision
     "payload": ...}                   the mechanism's perturbed output

A batch is ``{"reports": [report, ...]}``. The true value never appears: only the payload,
which the mechanism has already randomized on the device.
"""

from __future__ import annotations

import json
import operator
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from chorus_shared.campaign import Campaign, canonical_json
from chorus_shared.errors import DigestMismatch, WireError

__all__ = ["PROBLEM_BASE", "REFUSED_REPORT_KINDS", "REPORT_FIELDS", "Report", "ReportColumns",
           "new_report", "new_report_id", "parse_batch", "parse_report"]

#: Every error answer is RFC 9457 problem+json whose ``type`` is this prefix plus a kind.
PROBLEM_BASE = "https://chorus.dev/problems/"
#: The kinds with which a collector refuses a whole batch of reports for what they are: sending
#: the same bytes again cannot succeed. Any other refusal (a proxy's page, a missing key, a
#: busy server) is not the reports' fault.
REFUSED_REPORT_KINDS = frozenset({
    "malformed-json", "invalid-request", "unsupported-media-type", "invalid-report",
    "digest-mismatch", "report-conflict", "report-too-large", "body-too-large",
    "too-many-reports", "campaign-retired"})
REPORT_FIELDS = frozenset({"report_id", "digest", "time", "payload"})
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_TIME = 1 << 40


def new_report_id() -> str:
    """A fresh report ID: 16 bytes from the OS CSPRNG, as lowercase hex."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Report:
    report_id: str
    digest: str
    time: int
    payload: Any

    def to_json(self) -> dict[str, Any]:
        return {"report_id": self.report_id, "digest": self.digest, "time": self.time,
                "payload": self.payload}

    def canonical_bytes(self) -> bytes:
        """The bytes two submissions of one report must share to count as the same report."""
        return canonical_json(self.to_json())

    def to_wire(self) -> str:
        """The report as sent: compact JSON, sent byte for byte again on every retry."""
        return json.dumps(self.to_json(), separators=(",", ":"))


def new_report(campaign: Campaign, payload: Any, now: float) -> Report:
    """The one place a report is made: a fresh random ID, the campaign's digest, the time
    truncated to the campaign's precision, and the already randomized payload."""
    return Report(report_id=new_report_id(), digest=campaign.digest,
                  time=campaign.time_bucket(now), payload=payload)


def parse_report(obj: object, campaign: Campaign) -> Report:
    """Validate one received report against ``campaign``. Raises :class:`WireError`."""
    if not isinstance(obj, Mapping):
        raise WireError("a report must be a JSON object")
    if obj.keys() != REPORT_FIELDS:  # the usual case costs one comparison
        missing = REPORT_FIELDS - set(obj)
        if missing:
            raise WireError(f"report is missing {sorted(missing)}")
        raise WireError(f"report has unknown fields {sorted(set(obj) - REPORT_FIELDS)}")
    report_id = obj["report_id"]
    if not isinstance(report_id, str) or not _HEX32.fullmatch(report_id):
        raise WireError("report_id must be 32 lowercase hex digits (16 random bytes)")
    digest = obj["digest"]
    if digest == campaign.digest:
        pass  # the usual case: equal to a valid digest, so valid itself
    elif not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise WireError("digest must be 64 lowercase hex digits")
    else:
        raise DigestMismatch(
            f"report was made for campaign config {digest[:12]}…, not the current "
            f"{campaign.digest[:12]}… of {campaign.name!r}; refetch the config"
        )
    time = obj["time"]
    if isinstance(time, bool) or not isinstance(time, int) or not 0 <= time < MAX_TIME:
        raise WireError("time must be a non-negative integer (Unix seconds)")
    if time % campaign.time_precision:
        raise WireError(
            f"time must be truncated to the campaign's time precision "
            f"({campaign.time_precision} s)"
        )
    payload = campaign.mechanism.check_payload(obj["payload"])
    return Report(report_id=report_id, digest=digest, time=time, payload=payload)


@dataclass(frozen=True, slots=True)
class ReportColumns:
    """A batch of valid reports for one campaign, a column per field, in batch order."""

    report_ids: Sequence[str]
    times: Sequence[int]
    payloads: Sequence[Any]


def _only_lowercase_hex(text: str) -> bool:
    """Whether ``text`` is lowercase hex digits only: what is left after deleting them."""
    try:
        return not text.encode("ascii").translate(None, b"0123456789abcdef")
    except UnicodeEncodeError:
        return False


_COLUMNS = operator.itemgetter("report_id", "digest", "time", "payload")


def parse_batch(objs: Sequence[object], campaign: Campaign) -> ReportColumns | None:
    """Validate a whole batch for ``campaign`` at once, or return None if any report is not
    valid (:func:`parse_report` then says which and why, one report at a time).

    The rules are exactly :func:`parse_report`'s, checked a column at a time: each check is a
    ``map`` or ``set`` over a column, with no Python step per report. A 1,000-report batch is
    the usual upload, and checking it report by report costs more than storing it.
    """
    if not objs or set(map(type, objs)) != {dict}:
        return None
    rows = cast("Sequence[dict[str, Any]]", objs)
    # Four keys each, none but the four: so each has exactly the four.
    if set(map(len, rows)) != {len(REPORT_FIELDS)} or set().union(*rows) != REPORT_FIELDS:
        return None
    report_ids, digests, times, payloads = zip(*map(_COLUMNS, rows), strict=True)
    # Types first: a set of JSON lists would not even hash.
    if set(map(type, digests)) != {str} or set(digests) != {campaign.digest}:
        return None
    if set(map(type, report_ids)) != {str} or set(map(len, report_ids)) != {32} or \
            not _only_lowercase_hex("".join(report_ids)):
        return None
    if set(map(type, times)) != {int}:  # not bool, a subclass of int
        return None
    precision = campaign.time_precision
    if any(not 0 <= t < MAX_TIME or t % precision for t in set(times)):  # one or two times
        return None
    checked = campaign.mechanism.check_payloads(payloads)
    if checked is None:
        return None
    return ReportColumns(report_ids, times, checked)
