"""Report ingest: validate, deduplicate and append, in one short transaction.

No statistics are computed here: the reports are folded into them later, outside any request
(``chorus_collector.jobs.folding``), so a request holds the write lock only while its own rows are
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
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypeVar, overload

from chorus_collector.ingest.shuffled_batches import vouched_senders
from chorus_collector.storage import (
    CampaignRetired,
    Connection,
    Storage,
    StoredCampaign,
    StoredReport,
    stored_reports,
)
from chorus_shared.campaign import Campaign, canonical_json
from chorus_shared.errors import DigestMismatch, WireError
from chorus_shared.wire import Report, parse_batch, parse_report

__all__ = ["AllAccepted", "ReportStatus", "batch_answer", "ingest_reports", "outcome_counts"]

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


class AllAccepted(Sequence[ReportStatus]):
    """The statuses of a batch stored whole (the usual one): every report accepted, for one
    campaign. Kept as the checked report IDs; a :class:`ReportStatus` is made only when one
    is asked for, and the answer and the metrics read the IDs directly (a Python object per
    report cost more than storing the report)."""

    def __init__(self, report_ids: Sequence[str], campaign: str) -> None:
        self.report_ids = report_ids
        self.campaign = campaign

    def __len__(self) -> int:
        return len(self.report_ids)

    @overload
    def __getitem__(self, index: int) -> ReportStatus: ...

    @overload
    def __getitem__(self, index: slice) -> list[ReportStatus]: ...

    def __getitem__(self, index: int | slice) -> ReportStatus | list[ReportStatus]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        position = range(len(self))[index]  # IndexError past the end, as a list
        return ReportStatus(position, self.report_ids[position], "accepted",
                            campaign=self.campaign)


def outcome_counts(statuses: Sequence[ReportStatus]) -> Counter[tuple[str, str]]:
    """How many reports had each (campaign, outcome): accepted, duplicate or the refusal."""
    if isinstance(statuses, AllAccepted):
        return Counter({(statuses.campaign, "accepted"): len(statuses)})
    return Counter((s.campaign or "", s.error or s.status) for s in statuses)


def batch_answer(statuses: Sequence[ReportStatus]) -> str:
    """The answer to a batch, as JSON text: each report's status in request order, then how
    many were accepted, duplicates and rejected.

    This is the answer to every batch, so it is put together from pieces: an accepted or
    duplicate report's ID was checked to be 32 hex digits and needs no escaping; only a
    refusal, which may quote anything the client sent, goes through the JSON encoder.
    """
    if isinstance(statuses, AllAccepted):  # one join at C speed
        results = '","status":"accepted"},{"report_id":"'.join(statuses.report_ids)
        return (f'{{"results":[{{"report_id":"{results}","status":"accepted"}}],'
                f'"accepted":{len(statuses)},"duplicate":0,"rejected":0}}')
    counts = Counter(s.status for s in statuses)
    results = ",".join(
        f'{{"report_id":"{s.report_id}","status":"{s.status}"}}'
        if s.error is None and s.report_id is not None
        else json.dumps(s.to_json()) for s in statuses)
    return (f'{{"results":[{results}],"accepted":{counts["accepted"]},'
            f'"duplicate":{counts["duplicate"]},"rejected":{counts["rejected"]}}}')


def _time_refusal(time: int, campaign: Campaign, now: float) -> tuple[str, str] | None:
    """(problem kind, detail) if a report of this time is refused now, else None."""
    latest = _latest_bucket(campaign.time_precision, now)
    if time > latest:
        return "report-too-early", f"report time {time} is after the next time bucket ({latest})"
    if time < now - campaign.report_expiry:
        return "report-expired", (f"report time {time} is older than the campaign's report "
                                  f"expiry of {campaign.report_expiry} s")
    schedule = campaign.schedule
    if schedule is not None and not schedule.start <= time < schedule.end:
        # No honest client reports outside its calendar (it draws its periods within it), and
        # a report there would count in no period's estimate yet in an all-time window's.
        return "report-outside-schedule", (
            f"report time {time} is outside the campaign's schedule, from {schedule.start} "
            f"(inclusive) to {schedule.end} (exclusive)")
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
                   shuffled: bool = False, senders: int | None = None,
                   ) -> Sequence[ReportStatus]:
    """Ingest reports; one status per report, in request order.

    With ``campaign`` every report must be for that campaign; without it each report's digest
    selects its campaign (a digest names exactly one campaign configuration). ``shuffled``:
    the request is one batch from the shuffler, recorded per campaign and time bucket with
    the number of reports it newly added (duplicates hide nobody) and, from ``senders`` (the
    distinct admitted senders the shuffler vouches for; None: no count), a lower bound on the
    senders among them.
    """
    batch = _BatchRecord(len(raw_reports), senders) if shuffled else None
    # Retirement is read by the append itself (insert_new_reports raises CampaignRetired,
    # having stored nothing): the usual request makes no query of its own for it.
    retired: set[int] = set()
    if len(raw_reports) == 1:
        one = _ingest_one(storage, raw_reports[0], now, campaign, max_payload_bytes, batch)
        if one is not None:
            return [one]
    elif len(raw_reports) > 1:
        try:
            uniform = _ingest_uniform(storage, raw_reports, now, campaign, max_payload_bytes,
                                      batch)
        except CampaignRetired as gone:
            retired.add(gone.campaign_id)
        else:
            if uniform is not None:
                return uniform
    statuses: list[ReportStatus | None] = [None] * len(raw_reports)
    fresh: dict[tuple[int, bytes], Fresh] = {}  # by (campaign id, report id bytes)
    repeats: list[tuple[int, int, str, bool]] = []  # (index, index of first copy, id, same)
    seen: dict[str, StoredCampaign | None] = {}
    resolved = [_resolve_campaign(storage, raw, campaign, seen) for raw in raw_reports]
    checks = [_check_report(index, raw, stored, now, max_payload_bytes,
                            retired=stored is not None and stored.id in retired)
              for index, (raw, stored) in enumerate(zip(raw_reports, resolved, strict=True))]
    # A campaign with a refused report may append nothing to read its retirement with, and
    # every report of a retired campaign is refused as retired: look it up first (once per
    # campaign and batch).
    doubtful = {stored.id for stored, check in zip(resolved, checks, strict=True)
                if stored is not None and isinstance(check, ReportStatus)} - retired
    retired.update(cid for cid in doubtful if storage.retired_at(cid) is not None)
    for index, (raw, stored) in enumerate(zip(raw_reports, resolved, strict=True)):
        checked = checks[index]
        if stored is not None and stored.id in retired:
            checked = _retired(index, raw, stored)
        if isinstance(checked, ReportStatus):
            statuses[index] = checked
            continue
        assert stored is not None  # a report without a campaign was refused above
        report, payload_json = checked
        key = (stored.id, bytes.fromhex(report.report_id))
        earlier = fresh.get(key)
        if earlier is not None:
            same = (earlier.time, earlier.payload_json) == (report.time, payload_json)
            repeats.append((index, earlier.position, report.report_id, same))
            continue
        fresh[key] = Fresh(index, report.report_id, report.time, payload_json)
    while fresh:
        try:
            _store(storage, fresh, statuses, batch)
            break
        except CampaignRetired as gone:  # rolled back whole: again without that campaign
            retired.add(gone.campaign_id)
            fresh = {key: item for key, item in fresh.items() if key[0] != gone.campaign_id}
    _settle_repeats(statuses, repeats)
    for index, (raw, stored) in enumerate(zip(raw_reports, resolved, strict=True)):
        if stored is not None and stored.id in retired:  # its repeats in the batch too
            statuses[index] = _retired(index, raw, stored)
    return _labelled(statuses, resolved)


class _BatchRecord(NamedTuple):
    """A shuffled batch: its size and the sender count the shuffler vouched for."""

    size: int
    senders: int | None

    def record(self, storage: Storage, conn: Connection, campaign_id: int,
               new_by_time: Mapping[int, int]) -> None:
        storage.record_shuffled_batch(conn, campaign_id, new_by_time,
                                      vouched_senders(new_by_time, self.senders, self.size))


class Fresh(NamedTuple):
    """A valid report not seen before in its batch, to be stored unless stored before."""

    position: int  # in the batch
    report_id: str
    time: int
    payload_json: str


def _ingest_uniform(storage: Storage, raw_reports: Sequence[object], now: float,
                    campaign: StoredCampaign | None, max_payload_bytes: int,
                    batch: _BatchRecord | None) -> AllAccepted | None:
    """The usual batch, checked a column at a time (``parse_batch``) and appended in one
    statement: every report well formed, for one live campaign, in its time window, under an
    ID new to the batch and to the collector.

    None, having stored nothing, for any other batch (a retry of one already stored among
    them): then each report is checked and looked up on its own, which finds every refusal,
    duplicate and conflict. The outcome is the same either way. ``CampaignRetired``, having
    stored nothing, if the campaign is retired.
    """
    stored = _resolve_campaign(storage, raw_reports[0], campaign, {})
    if stored is None:
        return None
    columns = parse_batch(raw_reports, stored.campaign)
    if columns is None or len(set(columns.report_ids)) != len(raw_reports) or any(
            _time_refusal(t, stored.campaign, now) for t in set(columns.times)):
        return None
    texts = list(map(_canonical_text, columns.payloads))
    if max(map(len, texts)) > max_payload_bytes // 4 and any(
            len(text.encode()) > max_payload_bytes for text in texts):  # ≤ 4 bytes a character
        return None
    rows = stored_reports(map(bytes.fromhex, columns.report_ids), columns.times, texts)

    def work(conn: Connection) -> bool:
        if not storage.insert_new_reports(conn, stored.id, rows):
            return False
        if batch is not None:
            batch.record(storage, conn, stored.id, Counter(columns.times))
        return True

    if not _write(storage, work):
        return None
    return AllAccepted(columns.report_ids, stored.campaign.name)


def _ingest_one(storage: Storage, raw: object, now: float, campaign: StoredCampaign | None,
                max_payload_bytes: int, batch: _BatchRecord | None) -> ReportStatus | None:
    """The usual single report, with the checks of the general path and none of its
    bookkeeping for many: valid, for a known campaign, under an ID new to the collector.
    Accepted, or refused as retired (having stored nothing); None, having stored nothing, for
    any other report (a refusal, a retry): the general path then finds out which."""
    stored = _resolve_campaign(storage, raw, campaign, {})
    if stored is None:
        return None
    checked = _check_report(0, raw, stored, now, max_payload_bytes, retired=False)
    if isinstance(checked, ReportStatus):
        return None
    report, payload_json = checked
    row = StoredReport(bytes.fromhex(report.report_id), report.time, payload_json)

    def work(conn: Connection) -> bool:
        if not storage.insert_new_reports(conn, stored.id, [row]):
            return False
        if batch is not None:
            batch.record(storage, conn, stored.id, {report.time: 1})
        return True

    try:
        # Without a shuffled batch to record, the engine may append it with the others of
        # its group commit in one statement.
        if not (_retried(storage, lambda: storage.grouped_append(stored.id, row))
                if batch is None else _write(storage, work)):
            return None
    except CampaignRetired:
        status = _retired(0, raw, stored)
    else:
        status = ReportStatus(0, report.report_id, "accepted")
    status.campaign = stored.campaign.name  # the metrics label
    return status


def _canonical_text(payload: object) -> str:
    """A checked payload's canonical JSON; an integer, the usual payload, is its own."""
    return str(payload) if type(payload) is int else canonical_json(payload).decode()


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
        return _retired(index, raw, stored)
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
    out_of_window = _time_refusal(report.time, stored.campaign, now)
    if out_of_window is not None:
        return ReportStatus(index, report.report_id, "rejected", *out_of_window)
    # check_payload returns the canonical form; an integer is its own canonical form.
    payload_json = raw_json if raw_json is not None and type(report.payload) is int \
        else canonical_json(report.payload).decode()
    return report, payload_json


def _retired(index: int, raw: object, stored: StoredCampaign) -> ReportStatus:
    return ReportStatus(index, _raw_field(raw, "report_id"), "rejected", "campaign-retired",
                        f"campaign {stored.campaign.name!r} was retired: it takes no new "
                        "reports")


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


def _store(storage: Storage, fresh: dict[tuple[int, bytes], Fresh],
           statuses: list[ReportStatus | None], batch: _BatchRecord | None = None) -> None:
    by_campaign: dict[int, list[tuple[bytes, Fresh]]] = defaultdict(list)
    for (campaign_id, key), item in fresh.items():
        by_campaign[campaign_id].append((key, item))

    def work(conn: Connection) -> None:
        for campaign_id, items in by_campaign.items():
            if _append_all_new(storage, conn, campaign_id, items, statuses, batch):
                continue
            existing = storage.existing_reports(conn, campaign_id, [i[0] for i in items])
            new: list[StoredReport] = []
            by_time: dict[int, int] = defaultdict(int)
            for key, item in items:
                if key in existing:
                    same = existing[key] == (item.time, item.payload_json)
                    statuses[item.position] = _repeat_status(item.position, item.report_id, same)
                    continue
                new.append(StoredReport(key, item.time, item.payload_json))
                by_time[item.time] += 1
                statuses[item.position] = ReportStatus(item.position, item.report_id, "accepted")
            if not new:
                continue
            storage.insert_reports(conn, campaign_id, new)
            if batch is not None:
                batch.record(storage, conn, campaign_id, by_time)

    _write(storage, work)


ATTEMPTS = 5
T = TypeVar("T")


def _write(storage: Storage, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in a write transaction, retried if another collector got in the way.

    Concurrent requests share one transaction and one fsync (group commit); this returns
    once the reports are durable. On PostgreSQL, several collectors inserting the same report
    IDs at once can make one insert fail (the ID was inserted since the lookup) or deadlock
    with another (each waits for IDs the other holds): this request's savepoint is rolled
    back, and a new attempt looks the IDs up again, finding duplicates.
    """
    return _retried(storage, lambda: storage.grouped_write(work))


def _retried(storage: Storage, call: Callable[[], T]) -> T:
    """``call()``, again after a short wait if another collector got in the way."""
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except storage.retryable_errors:
            if attempt == ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, 0.01 * 2**attempt))  # let the other one commit
    raise AssertionError("unreachable")


def _append_all_new(storage: Storage, conn: Connection, campaign_id: int,
                    items: list[tuple[bytes, Fresh]],
                    statuses: list[ReportStatus | None], batch: _BatchRecord | None) -> bool:
    """The usual case, in one statement: every report is new. Returns False, having changed
    nothing, if any report ID was stored before (a retry): then each is looked up."""
    if not storage.insert_new_reports(conn, campaign_id,
                                      [StoredReport(key, item.time, item.payload_json)
                                       for key, item in items]):
        return False
    by_time: dict[int, int] = defaultdict(int)
    for _, item in items:
        statuses[item.position] = ReportStatus(item.position, item.report_id, "accepted")
        by_time[item.time] += 1
    if batch is not None:
        batch.record(storage, conn, campaign_id, by_time)
    return True


MAX_INTEGER_DIGITS = 19  # every accepted integer fits in SQLite's 64-bit integers


def _digits_as_zero() -> bytes:
    """A ``bytes.translate`` table: each digit becomes ``0``; each byte after which a JSON
    number can start (``:``, ``,``, ``[``, ``-``, white space) becomes ``:``; anything else a
    space. A number of more than 19 digits then shows as ``:`` and 20 zeros."""
    table = bytearray(b" " * 256)
    table[ord("0"):ord("9") + 1] = b"0" * 10
    for byte in b":,[- \t\r\n":
        table[byte] = ord(":")
    return bytes(table)


_NUMBER_MARKS = _digits_as_zero()
_LONG_NUMBER = b":" + b"0" * (MAX_INTEGER_DIGITS + 1)


def _may_hold_long_integer(body: bytes) -> bool:
    """Whether the JSON text may hold an integer of more than 19 digits: one translate and
    one substring search at C speed (a regex scan costs 20 times more on a 1,000-report
    batch). A run of digits inside a string after one of those marks is a false alarm that
    only costs the slower, exact parse."""
    return _LONG_NUMBER in b":" + body.translate(_NUMBER_MARKS)


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
        # run of digits long enough to be an integer over the limit.
        parse_int = _bounded_int if _may_hold_long_integer(body) else int
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
