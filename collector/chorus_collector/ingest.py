"""Report ingest: validate, deduplicate and append, in one short transaction.

No statistics are computed here: the reports are folded into them later, outside any request
(``chorus_collector.folding``), so a request holds the write lock only while its own rows are
inserted, whatever the campaign's mechanism or domain.

A report is *accepted* (stored and counted once), a *duplicate* (the same report ID with the
same bytes was stored before: acknowledged again, counted once) or *rejected* (with a reason).
The same ID with different bytes is a conflict and rejected: a report ID names one report.
Nothing is acknowledged before the transaction that stores it has committed.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Literal

from chorus_collector.storage import Storage, StoredCampaign, StoredReport
from chorus_shared.campaign import canonical_json
from chorus_shared.errors import DigestMismatch, WireError
from chorus_shared.wire import Report, parse_report

__all__ = ["ReportStatus", "ingest_reports"]

Status = Literal["accepted", "duplicate", "rejected"]


@dataclass(slots=True)  # one per report: cheap to make (no frozen __setattr__ per field)
class ReportStatus:
    index: int
    report_id: str | None
    status: Status
    error: str | None = None  # a problem type name, e.g. "report-conflict"
    detail: str | None = None
    campaign: str | None = field(default=None, compare=False)  # for metrics only

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"report_id": self.report_id, "status": self.status}
        if self.error is not None:
            body["error"] = self.error
            body["detail"] = self.detail
        return body


def _check_time(report: Report, stored: StoredCampaign, now: float) -> ReportStatus | None:
    campaign = stored.campaign
    latest = _latest_bucket(campaign.time_precision, now)
    if report.time > latest:
        return ReportStatus(0, report.report_id, "rejected", "report-too-early",
                            f"report time {report.time} is after the next time bucket ({latest})")
    if report.time < now - campaign.report_expiry:
        return ReportStatus(0, report.report_id, "rejected", "report-expired",
                            f"report time {report.time} is older than the campaign's report "
                            f"expiry of {campaign.report_expiry} s")
    return None


@lru_cache(maxsize=64)
def _latest_bucket(precision: int, now: float) -> int:
    """The last time bucket a report may carry: the next one (the same for a whole batch)."""
    return int(now // precision) * precision + precision


def _raw_field(obj: object, name: str) -> str | None:
    if isinstance(obj, dict):
        value = obj.get(name)
        if isinstance(value, str) and len(value) <= 64:
            return value
    return None


def _resolve_campaign(storage: Storage, raw: object, fixed: StoredCampaign | None,
                      seen: dict[str, StoredCampaign | None]) -> StoredCampaign | None:
    if fixed is not None:
        return fixed
    digest = raw.get("digest") if isinstance(raw, dict) else None
    if isinstance(digest, str) and digest in seen:  # checked when first seen in the batch
        return seen[digest]
    if _digest_is_malformed(raw):
        return None
    assert isinstance(digest, str)
    seen[digest] = storage.get_campaign_by_digest(digest)  # once per campaign and batch
    return seen[digest]


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _digest_is_malformed(raw: object) -> bool:
    digest = raw.get("digest") if isinstance(raw, dict) else None
    return not (isinstance(digest, str) and _HEX64.fullmatch(digest))


def _payload_json(payload: object) -> str | None:
    """Canonical JSON of a payload (None if it is not JSON); integers, the most common
    payload, without a round trip through the JSON encoder."""
    if type(payload) is int:
        return str(payload)
    try:
        return canonical_json(payload).decode()
    except (TypeError, ValueError):
        return None  # not canonical JSON: parse_report rejects it with the reason


def _payload_too_large(raw: object, limit: int) -> tuple[str | None, str | None]:
    """A size check before any mechanism-specific validation (a rule of its own): (reason
    to reject, the payload's canonical JSON for reuse)."""
    if not isinstance(raw, dict) or "payload" not in raw:
        return None, None
    text = _payload_json(raw["payload"])
    if text is not None and len(text.encode()) > limit:
        return f"payload is {len(text.encode())} bytes; at most {limit} are accepted", text
    return None, text


def ingest_reports(storage: Storage, raw_reports: Sequence[object], now: float, *,
                   campaign: StoredCampaign | None = None,
                   max_payload_bytes: int = 8192,
                   shuffled: bool = False) -> list[ReportStatus]:
    """Ingest reports; one status per report, in request order.

    With ``campaign`` every report must be for that campaign; without it each report's digest
    selects its campaign (a digest names exactly one campaign configuration). ``shuffled``:
    the request is one batch from the shuffler, recorded per campaign and time bucket with
    the number of reports it newly added (duplicates hide nobody).
    """
    statuses: list[ReportStatus | None] = [None] * len(raw_reports)
    # (campaign id, report id) → (index, campaign, report, payload json)
    fresh: dict[tuple[int, bytes], tuple[int, StoredCampaign, Report, str]] = {}
    repeats: list[tuple[int, int, str, bool]] = []  # (index, index of first copy, id, same)
    seen: dict[str, StoredCampaign | None] = {}
    resolved = [_resolve_campaign(storage, raw, campaign, seen) for raw in raw_reports]
    # Once per campaign and batch: retired campaigns take no reports.
    retired = {stored.id for stored in {s for s in resolved if s is not None}
               if storage.retired_at(stored.id) is not None}
    for index, (raw, stored) in enumerate(zip(raw_reports, resolved, strict=True)):
        checked = _check_report(index, raw, stored, now, max_payload_bytes,
                                retired=stored is not None and stored.id in retired)
        if isinstance(checked, ReportStatus):
            statuses[index] = checked
            continue
        assert stored is not None  # a report without a campaign was refused above
        report, payload_json = checked
        key = (stored.id, bytes.fromhex(report.report_id))
        earlier = fresh.get(key)
        if earlier is not None:
            same = (earlier[2].time, earlier[3]) == (report.time, payload_json)
            repeats.append((index, earlier[0], report.report_id, same))
            continue
        fresh[key] = (index, stored, report, payload_json)
    if fresh:
        _store(storage, fresh, statuses, shuffled)
    _settle_repeats(statuses, repeats)
    return _labelled(statuses, resolved)


def _check_report(index: int, raw: object, stored: StoredCampaign | None, now: float,
                  max_payload_bytes: int, retired: bool) -> ReportStatus | tuple[Report, str]:
    """One report's refusal, or the parsed report and its canonical payload JSON."""
    if stored is None:
        if _digest_is_malformed(raw):
            return ReportStatus(index, _raw_field(raw, "report_id"), "rejected",
                                "invalid-report", "digest must be 64 lowercase hex digits")
        return ReportStatus(index, _raw_field(raw, "report_id"), "rejected",
                            "unknown-campaign", "the report's digest names no campaign here")
    if retired:
        return ReportStatus(index, _raw_field(raw, "report_id"), "rejected",
                            "campaign-retired", f"campaign {stored.campaign.name!r} was "
                            "retired: it takes no new reports")
    oversize, raw_json = _payload_too_large(raw, max_payload_bytes)
    if oversize is not None:
        return ReportStatus(index, _raw_field(raw, "report_id"), "rejected",
                            "report-too-large", oversize)
    try:
        report = parse_report(raw, stored.campaign)
    except DigestMismatch as error:
        return ReportStatus(index, _raw_field(raw, "report_id"), "rejected",
                            "digest-mismatch", str(error))
    except WireError as error:
        return ReportStatus(index, _raw_field(raw, "report_id"), "rejected",
                            "invalid-report", str(error))
    out_of_window = _check_time(report, stored, now)
    if out_of_window is not None:
        return replace(out_of_window, index=index)
    # check_payload returns the canonical form; an integer is its own canonical form.
    payload_json = raw_json if raw_json is not None and type(report.payload) is int \
        else canonical_json(report.payload).decode()
    return report, payload_json


def _settle_repeats(statuses: list[ReportStatus | None],
                    repeats: list[tuple[int, int, str, bool]]) -> None:
    """A repeat inside the batch shares the fate of its first copy: a duplicate if that one
    was accepted or was itself a duplicate, rejected otherwise."""
    for index, first, report_id, same in repeats:
        first_status = statuses[first]
        assert first_status is not None
        if same and first_status.status != "rejected":
            statuses[index] = ReportStatus(index, report_id, "duplicate")
        elif same:
            statuses[index] = replace(first_status, index=index)
        else:
            statuses[index] = _repeat_status(index, report_id, same=False)


def _labelled(statuses: list[ReportStatus | None],
              resolved: list[StoredCampaign | None]) -> list[ReportStatus]:
    out = []
    for status, stored in zip(statuses, resolved, strict=True):
        if status is not None:
            status.campaign = stored.campaign.name if stored else None  # the metrics label
            out.append(status)
    return out


def _repeat_status(index: int, report_id: str, same: bool) -> ReportStatus:
    if same:
        return ReportStatus(index, report_id, "duplicate")
    return ReportStatus(index, report_id, "rejected", "report-conflict",
                        "a different report with this report_id was already submitted")


def _store(storage: Storage,
           fresh: dict[tuple[int, bytes], tuple[int, StoredCampaign, Report, str]],
           statuses: list[ReportStatus | None], shuffled: bool = False) -> None:
    by_campaign: dict[int, list[tuple[bytes, int, Report, str]]] = defaultdict(list)
    for (campaign_id, key), (index, _, report, payload_json) in fresh.items():
        by_campaign[campaign_id].append((key, index, report, payload_json))

    def work(conn: sqlite3.Connection) -> None:
        for campaign_id, items in by_campaign.items():
            if _append_all_new(storage, conn, campaign_id, items, statuses, shuffled):
                continue
            existing = storage.existing_reports(conn, campaign_id, [i[0] for i in items])
            new: list[StoredReport] = []
            by_time: dict[int, int] = defaultdict(int)
            for key, index, report, payload_json in items:
                if key in existing:
                    same = existing[key] == (report.time, payload_json)
                    statuses[index] = _repeat_status(index, report.report_id, same)
                    continue
                new.append(StoredReport(key, report.time, payload_json))
                by_time[report.time] += 1
                statuses[index] = ReportStatus(index, report.report_id, "accepted")
            if not new:
                continue
            storage.insert_reports(conn, campaign_id, new)
            if shuffled:
                storage.record_shuffled_batch(conn, campaign_id, by_time)

    # Concurrent requests share one transaction and one fsync (group commit); this call
    # returns once the reports are durable. On PostgreSQL, several collectors inserting the
    # same report IDs at once can make one insert fail (the ID was inserted since the lookup)
    # or deadlock with another (each waits for IDs the other holds): this request's savepoint
    # is rolled back, and a new attempt looks the IDs up again, finding duplicates.
    for attempt in range(ATTEMPTS):
        try:
            storage.grouped_write(work)
            return
        except storage.retryable_errors:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, 0.01 * 2**attempt))  # let the other one commit


ATTEMPTS = 5


def _append_all_new(storage: Storage, conn: sqlite3.Connection, campaign_id: int,
                    items: list[tuple[bytes, int, Report, str]],
                    statuses: list[ReportStatus | None], shuffled: bool) -> bool:
    """The usual case, in one statement: every report is new. Returns False, having changed
    nothing, if any report ID was stored before (a retry): then each is looked up."""
    if not storage.insert_new_reports(conn, campaign_id,
                                      [StoredReport(key, report.time, payload_json)
                                       for key, _, report, payload_json in items]):
        return False
    by_time: dict[int, int] = defaultdict(int)
    for _, index, report, _ in items:
        statuses[index] = ReportStatus(index, report.report_id, "accepted")
        by_time[report.time] += 1
    if shuffled:
        storage.record_shuffled_batch(conn, campaign_id, by_time)
    return True


MAX_INTEGER_DIGITS = 19  # every accepted integer fits in SQLite's 64-bit integers
# A JSON number of more digits than that: numbers follow ':', ',', '[', white space or the
# start of the text (a match inside a string only costs the slower, exact parse).
_LONG_DIGITS = re.compile(rf"(?:^|[:,\[\s])-?[0-9]{{{MAX_INTEGER_DIGITS + 1}}}")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise ValueError(f"integer with {len(text)} digits is out of range")
    return int(text)


def parse_body(body: bytes) -> Any:
    """Parse a JSON request body strictly; raises ``ValueError`` with a readable message.

    Strict UTF-8 (no encoded surrogates), no NaN or Infinity, integers of at most 19 digits,
    and no lone surrogate escapes: whatever passes can be stored, hashed and compared.
    """
    try:
        text = body.decode("utf-8")
        # The per-integer check costs a Python call per number: only when the text holds a
        # run of digits long enough to be an integer over the limit (a regex scan at C speed).
        parse_int = _bounded_int if _LONG_DIGITS.search(text) else int
        value = json.loads(text, parse_constant=_no_constants, parse_int=parse_int)
        if "\\u" in text:  # only an escape can produce a lone surrogate
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except UnicodeError:
        raise ValueError("malformed JSON: not valid UTF-8 text") from None
    except ValueError as error:  # JSONDecodeError, integers too long, NaN
        raise ValueError(f"malformed JSON: {error}") from None
