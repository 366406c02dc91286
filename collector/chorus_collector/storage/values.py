"""What goes in and out of storage, whichever engine holds it: the values the interface
(:mod:`chorus_collector.storage.interface`) takes and returns, and its one error."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from chorus_shared.campaign import Campaign

__all__ = ["AlertEvaluation", "AlertFiring", "AlertState", "Annotation", "BucketSnapshot",
           "CampaignRetired", "FoldChunk", "FoldLeaseState", "FoldStatus", "FoldedStatistics",
           "NewFiring", "PayloadGroup", "SchemaError", "StoredAlertRule", "StoredCampaign",
           "StoredReport",
           "TailPage", "WindowSnapshot", "report_rows", "state_array", "state_bytes",
           "stored_reports"]


class SchemaError(RuntimeError):
    """The database was written by a newer or different version of Chorus."""


class CampaignRetired(Exception):
    """An append found its campaign retired: nothing of it was stored."""

    def __init__(self, campaign_id: int) -> None:
        super().__init__(f"campaign {campaign_id} is retired")
        self.campaign_id = campaign_id


@dataclass(frozen=True)
class StoredCampaign:
    id: int
    campaign: Campaign


class StoredReport(NamedTuple):
    """A validated report ready to insert: its ID as bytes and its canonical payload (a
    tuple: a batch of them is sorted and transposed at C speed)."""

    report_id: bytes
    time: int
    payload_json: str


def stored_reports(report_ids: Iterable[bytes], times: Iterable[int],
                   payload_jsons: Iterable[str]) -> list[StoredReport]:
    """StoredReports from three columns, made at C speed: ``tuple.__new__`` fills each
    directly, where the named tuple's own constructor is a Python call per report."""
    return list(map(tuple.__new__, repeat(StoredReport),
                    zip(report_ids, times, payload_jsons, strict=True)))


def report_rows(campaign_id: int,
                reports: Sequence[StoredReport]) -> Iterator[tuple[int, bytes, int, str]]:
    """(campaign id, report ID, time, payload) rows ordered by report ID, which fills the ID
    index in order (the order within a request is not kept): sorted and transposed without
    a Python step per report."""
    if not reports:
        return iter(())
    ids, times, payloads = zip(*sorted(reports), strict=True)
    return zip(repeat(campaign_id), ids, times, payloads, strict=False)


@dataclass(frozen=True)
class FoldStatus:
    watermark: int  # the last folded report's seq
    folded_at: float | None  # when a fold last moved the watermark (None: never)
    unfolded: int  # reports appended past the watermark
    moves: int  # how many times the watermark has moved (``commit_fold``'s check)


@dataclass(frozen=True)
class FoldLeaseState:
    holder: str | None  # who claimed the fold lease last (None: nobody ever did)
    until: float  # when it runs out (0: released)


@dataclass(frozen=True)
class WindowSnapshot:
    n: int  # folded reports in the window
    state: np.ndarray  # their summed statistics
    # (time bucket, payload) of the window's unfolded reports; empty when a TailReader took
    # the tail page by page instead
    tail: list[tuple[int, str]]
    folded_at: float | None


@dataclass(frozen=True)
class BucketSnapshot:
    """A window's statistics bucket by bucket (a time series' input), not summed."""

    buckets: list[tuple[int, int, bytes]]  # (time bucket, n, state blob) of folded reports
    tail: list[tuple[int, str]]  # as WindowSnapshot.tail
    folded_at: float | None


@dataclass(frozen=True)
class FoldedStatistics:
    watermark: int
    buckets: list[tuple[int, int, bytes]]  # (time bucket, n, state blob)
    retired: dict[int, int]  # time bucket → reports dropped by gc


def state_bytes(state: np.ndarray) -> bytes:
    """A statistics vector as stored: little-endian int64."""
    return np.ascontiguousarray(state, dtype="<i8").tobytes()


def state_array(blob: bytes) -> np.ndarray:
    """A stored statistics vector as an int64 array."""
    return np.frombuffer(blob, dtype="<i8").astype(np.int64)


class PayloadGroup(NamedTuple):
    """The stored payloads of one campaign and time bucket in a range of the append order."""

    campaign_id: int
    time: int
    reports: int
    payloads: str  # canonical JSON payloads joined with commas: "[" + this + "]" parses

    def parsed(self) -> list[Any]:
        return json.loads("[" + self.payloads + "]")  # type: ignore[no-any-return]


class FoldChunk(NamedTuple):
    """The reports a fold step takes: watermark < seq <= through, ``reports`` of them."""

    watermark: int
    through: int
    reports: int
    groups: list[PayloadGroup]
    #: How many times the watermark had moved when it was read (``commit_fold``'s check).
    moves: int


class TailPage(NamedTuple):
    """One page of a campaign's unfolded tail: its reports with after < seq <= through (at
    most ``Storage.tail_page`` of them), grouped by time bucket."""

    after: int
    through: int
    groups: list[PayloadGroup]


@dataclass(frozen=True)
class Annotation:
    """A mark on the time axis ("v2.3 shipped"): on one campaign's series, or on every
    campaign's (``campaign_id`` None)."""

    id: int
    time: int  # Unix seconds
    text: str
    campaign_id: int | None
    created_at: float


# -- alerts (chorus_collector.alerts says what they mean) -------------------------------------

@dataclass(frozen=True)
class StoredAlertRule:
    """An alert rule as stored. ``definition`` is what ``alerts.rules`` validated (values,
    window, correction, alpha, min_change, resolved); the webhook URL and its secret are
    columns of their own, so that nothing that renders a definition can show them."""

    id: int
    name: str
    campaign_id: int
    definition: dict[str, Any]
    webhook: str
    secret: str | None
    created_at: float
    evaluated_at: float | None  # when an evaluation last committed (None: never)
    last_end: int  # the end of the windows last evaluated (0: never): each end once
    last_error: str | None  # why the last evaluation could not compare (None: it could)


@dataclass(frozen=True)
class AlertState:
    """A rule's last evaluated window end and its values significant now (value → since),
    read in one snapshot."""

    last_end: int
    active: dict[str, float]


@dataclass(frozen=True)
class NewFiring:
    """A notification to deliver: its event ("triggered", "resolved"), its idempotency key
    and its JSON body."""

    event: str
    key: str
    payload: str


@dataclass(frozen=True)
class AlertEvaluation:
    """What one evaluation of a rule decided, committed in one transaction by compare-and-set
    on the rule's ``last_end`` (``expected_end``): a second evaluator of the same windows
    (another worker, another replica, a restart) changes nothing and sends nothing."""

    rule_id: int
    expected_end: int
    end: int
    now: float
    raised: Sequence[str] = ()  # values significant from now on
    cleared: Sequence[str] = ()  # values no longer significant
    firings: Sequence[NewFiring] = field(default=())
    error: str | None = None


@dataclass(frozen=True)
class AlertFiring:
    """One notification in the delivery outbox (and its history)."""

    id: int
    rule_id: int
    event: str
    key: str
    created_at: float
    payload: str
    status: str  # "pending", "delivered" or "failed" (gave up)
    attempts: int
    next_attempt_at: float
    delivered_at: float | None
    last_error: str | None
