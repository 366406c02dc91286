"""The storage interface: what the rest of the collector may ask of a database.

Every engine (:mod:`~chorus_collector.storage.sqlite`, :mod:`~chorus_collector.storage.postgres`)
implements :class:`Storage`; nothing above the storage package knows which one it has. The
contract, whatever the engine:

* Campaigns are immutable once stored; a name names one configuration for good.
* Ingest only appends. A report is stored once per (campaign, report ID): a report whose ID
  is already stored is never counted twice. A write's rows are durable when ``write`` or
  ``grouped_write`` returns, and not before.
* Every report gets the next sequence number (``seq``) of one append order. Per-bucket
  statistics are folded from the appended reports by a job that moves one watermark
  (``commit_fold``): the statistics and the watermark change in one transaction, by
  compare-and-set, so folds stay exact however many run and wherever they crash.
* Reads of a window (``bucket_snapshot``, ``window_snapshot``, ``time_span``,
  ``report_counts``, ``folded_statistics``) see the folded statistics, the watermark and the
  not-yet-folded tail in one snapshot: a fold committing meanwhile neither double-counts nor
  hides a report. A window's tail can be handed over page by page (a :class:`TailReader`):
  a query's memory then stays bounded however far the fold has fallen behind.
* Alert rules (``chorus_collector.alerts``) keep their state here: an evaluation's decision,
  the values it marks significant and the notifications it queues commit in one transaction,
  by compare-and-set on the rule's last evaluated window end, so each end is decided once
  however many folders evaluate it; the queued notifications are an outbox, each claimed by
  one deliverer at a time.
* ``migrate`` brings the schema up to date, and refuses (``SchemaError``) a database written
  by a newer version.

Raw SQL never leaves the package: ``connect`` and ``write`` hand out a :class:`Connection`
that the collector passes back to the storage's own methods (ingest's statements run in the
transaction its caller opened).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from chorus_collector.storage.values import (
    AlertEvaluation,
    AlertFiring,
    AlertState,
    Annotation,
    BucketSnapshot,
    FoldChunk,
    FoldedStatistics,
    FoldLeaseState,
    FoldStatus,
    PayloadGroup,
    StoredAlertRule,
    StoredCampaign,
    StoredReport,
    TailPage,
    WindowSnapshot,
    state_array,
)
from chorus_shared.campaign import Campaign

__all__ = ["Connection", "Storage", "TailPages", "TailReader"]

T = TypeVar("T")


class Connection(Protocol):
    """A database connection as the storage's methods use it: DB-API statements with ``?``
    placeholders (``sqlite3.Connection``, or PostgreSQL's adapter)."""

    def execute(self, sql: str, args: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Any: ...

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


#: The pages of a campaign's unfolded tail with after < seq <= through (None: every one the
#: snapshot sees), in append order, read in the snapshot of the call that handed it out.
TailPages = Callable[[int, int | None], Iterator[TailPage]]


class TailReader(Protocol):
    """What takes a window's unfolded tail page by page (``jobs/tail.py``), inside the
    snapshot of the read: given the watermark that snapshot sees and a settled horizon (every
    report at or below it has committed and is in the snapshot; none can still appear
    there), it reads whichever seq ranges it needs, past the watermark, of the campaign's
    whole tail (not only the window's: it may keep them for later queries)."""

    def read(self, watermark: int, horizon: int, pages: TailPages) -> None: ...


class Storage(ABC):
    """One database of campaigns, appended reports and folded statistics; a connection per
    thread. Open one with :func:`chorus_collector.storage.open_storage`."""

    #: The database setting it was opened with (a SQLite file, or a PostgreSQL URL).
    path: str
    #: The longest a group commit's leader waits for its group to outgrow the last one, in
    #: seconds, after a group of more than one writer (``grouped_write``); 0: it never waits.
    group_linger: float
    #: Called with the number of writers each group commit held (the server's metrics).
    on_group_commit: Callable[[int], None] | None
    #: "FULL": a commit returns once durable; "NORMAL"/"OFF": faster, less durable.
    synchronous: str
    #: What a concurrent writer can make an ingest attempt fail with, so that it is retried.
    retryable_errors: tuple[type[Exception], ...]
    #: Most reports in one page of a tail handed to a TailReader: a query's memory bound.
    tail_page: int = 5_000

    # -- connections, schema and upkeep ------------------------------------------------------

    @abstractmethod
    def connect(self) -> Connection:
        """This thread's connection (opened on first use)."""

    @abstractmethod
    def close(self) -> None:
        """Close this thread's connection (a later call opens a new one)."""

    @abstractmethod
    def migrate(self) -> None:
        """Apply pending migrations (once, however many collectors start together); raise
        ``SchemaError`` for a database with migrations this version does not know (a newer
        version wrote it). SQLite also refuses a file another application wrote."""

    @abstractmethod
    def maintain(self, now: float) -> None:
        """Periodic upkeep the background folder runs, off the requests' path."""

    @abstractmethod
    def ping(self) -> None:
        """A trivial read: raises if the database cannot be read."""

    @abstractmethod
    def unavailable(self, error: BaseException) -> bool:
        """Whether ``error`` means the database cannot be used now (stopped, unreachable,
        locked, full: an outage, answered ``503 storage-unavailable`` and retried later)
        rather than a bug; if so, notes it, logging the outage once until the database
        answers again (which is logged once too)."""

    # -- transactions -----------------------------------------------------------------------

    @abstractmethod
    def write(self) -> contextlib.AbstractContextManager[Connection]:
        """A write transaction: committed when the block ends, rolled back on any
        exception."""

    @abstractmethod
    def grouped_write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work(conn)`` in a write transaction shared with concurrent callers (group
        commit): it returns once the shared commit succeeded. An exception in ``work`` rolls
        back that caller's changes only and is raised to it; a failed commit is raised to
        every caller of the group (nothing of theirs was acknowledged). The main thread, which
        a signal handler's exception may interrupt anywhere, writes in a transaction of its
        own."""

    @abstractmethod
    def grouped_append(self, campaign_id: int, report: StoredReport) -> bool:
        """``insert_new_reports`` of one report, in a write transaction shared with
        concurrent callers, as ``grouped_write``: True once it is committed; False, having
        stored nothing, if its ID is stored (or being stored by another caller of the group);
        ``CampaignRetired``, having stored nothing. An engine may append a group's reports in
        one statement."""

    # -- campaigns ----------------------------------------------------------------------------

    @abstractmethod
    def insert_campaign(self, campaign: Campaign) -> tuple[StoredCampaign, bool]:
        """Store a new campaign. Returns (stored, created); an identical one is not an error.

        Raises ``FileExistsError`` when the name is taken by a different configuration:
        campaigns are immutable.
        """

    @abstractmethod
    def get_campaign(self, name: str) -> StoredCampaign | None:
        """The campaign of that name (None: none)."""

    @abstractmethod
    def get_campaign_by_digest(self, digest: str) -> StoredCampaign | None:
        """The campaign whose configuration has that digest (None: none)."""

    @abstractmethod
    def get_campaign_by_id(self, campaign_id: int) -> StoredCampaign:
        """The campaign a stored report belongs to; ``KeyError`` if there is none."""

    @abstractmethod
    def list_campaigns(self) -> list[StoredCampaign]:
        """Every campaign, in the order they were created."""

    @abstractmethod
    def retire_campaign(self, campaign_id: int, now: float) -> float:
        """Retire a campaign (once: a second call keeps the first time); returns when."""

    @abstractmethod
    def retired_at(self, campaign_id: int) -> float | None:
        """When the campaign was retired (None: it takes reports), as stored now: a
        retirement holds at once on every collector sharing the database."""

    # -- annotations ------------------------------------------------------------------------

    @abstractmethod
    def add_annotation(self, time: int, text: str, campaign_id: int | None,
                       now: float) -> Annotation:
        """Mark ``time`` with ``text`` on one campaign's series, or on every campaign's."""

    @abstractmethod
    def annotations(self, campaign_id: int | None, start: int | None = None,
                    end: int | None = None) -> list[Annotation]:
        """The marks with start <= time < end, in time order: a campaign's own and those on
        every campaign (``campaign_id`` None: every mark)."""

    @abstractmethod
    def delete_annotation(self, annotation_id: int) -> bool:
        """Remove a mark; whether there was one."""

    # -- reports (inside a write transaction) -------------------------------------------------

    @abstractmethod
    def existing_reports(self, conn: Connection, campaign_id: int,
                         report_ids: Sequence[bytes]) -> dict[bytes, tuple[int, str]]:
        """(time, payload) of the given IDs already stored for the campaign."""

    @abstractmethod
    def insert_reports(self, conn: Connection, campaign_id: int,
                       reports: Sequence[StoredReport]) -> None:
        """Append reports (each gets the next seq), ordered by their random IDs: the order
        within a request is not kept. An ID already stored for the campaign raises one of
        ``retryable_errors``."""

    @abstractmethod
    def insert_new_reports(self, conn: Connection, campaign_id: int,
                           reports: Sequence[StoredReport]) -> bool:
        """Append reports if no ID among them is stored yet; otherwise change nothing and
        return False (then the caller looks each one up). Raises ``CampaignRetired``,
        changing nothing, if the campaign is retired, whether or not the IDs are stored:
        the append checks it itself, in its transaction, so ingest need not ask first."""

    @abstractmethod
    def record_shuffled_batch(self, conn: Connection, campaign_id: int,
                              new_reports_by_time: Mapping[int, int],
                              senders_by_time: Mapping[int, int] | None = None) -> None:
        """Add one shuffled batch to each time bucket it brought new reports to (inside the
        ingest transaction, so the record commits with the reports). ``senders_by_time``:
        the distinct admitted senders the shuffler vouched for among those new reports, per
        bucket (None: the batch came without a vouched count)."""

    # -- folding ------------------------------------------------------------------------------

    @abstractmethod
    def unfolded(self, limit: int) -> FoldChunk:
        """The next chunk of at most ``limit`` reports past the watermark, in append order,
        with their payloads grouped by campaign and time bucket, read in one snapshot."""

    @abstractmethod
    def payload_groups(self, after_seq: int, through_seq: int,
                       campaign_id: int | None = None) -> list[PayloadGroup]:
        """The payloads of the reports with after_seq < seq <= through_seq (of one campaign
        if given), grouped by campaign and time bucket: what a fold over that range maps,
        read from a connection of this storage's own (a job's worker may call it)."""

    @abstractmethod
    def append_horizon(self) -> int:
        """The highest seq at or below which every append has committed and none can still
        commit: how far a fold that plans its ranges ahead may read."""

    @abstractmethod
    def claim_fold(self, holder: str, now: float, lease: float,
                   replacing: str | None = None) -> bool:
        """Take (or renew) the fold lease until ``now + lease``, unless another holder's is
        still running; ``replacing``: a holder known to be dead, whose lease is taken even
        before it runs out (if it still holds it). The lease only saves duplicate work;
        ``commit_fold``'s watermark check is what keeps folds exact."""

    @abstractmethod
    def release_fold(self, holder: str) -> None:
        """Give the fold lease back (if ``holder`` holds it)."""

    @abstractmethod
    def fold_lease(self) -> FoldLeaseState:
        """Who holds the fold lease, and until when."""

    @abstractmethod
    def commit_fold(self, expected: int, through: int,
                    partials: Mapping[tuple[int, int], tuple[int, np.ndarray]], now: float,
                    step: Callable[[str], None] = lambda _: None, *, moves: int) -> bool:
        """Add partial statistics per (campaign id, time bucket) and move the watermark from
        ``expected`` to ``through``, in one transaction. Returns False, changing nothing, if
        the watermark is no longer ``expected`` or has moved since it was read (``moves``,
        from the ``FoldChunk`` or ``FoldStatus`` read with it: another fold got there
        first, or gc brought the watermark's value back).

        ``step`` is called between the steps (fault injection in the tests)."""

    @abstractmethod
    def any_unfolded(self) -> bool:
        """Whether any report is past the watermark."""

    @abstractmethod
    def fold_status(self) -> FoldStatus:
        """The watermark, when a fold last moved it, and how many reports are past it."""

    # -- reads of statistics ------------------------------------------------------------------

    @abstractmethod
    def bucket_snapshot(self, campaign_id: int, start: int | None, end: int | None,
                        tail: TailReader | None = None) -> BucketSnapshot:
        """The folded (n, state) of each bucket with start <= time < end, and the window's
        reports past the watermark, in one snapshot, so that a series' points add up to what
        one window's read gives. With ``tail``, the reports past the watermark go to it page
        by page (:class:`TailReader`), and the snapshot's ``tail`` is empty."""

    def window_snapshot(self, campaign_id: int, size: int, start: int | None,
                        end: int | None, tail: TailReader | None = None) -> WindowSnapshot:
        """The folded statistics of the buckets with start <= time < end (summed: O(buckets ×
        state size)), and the reports of those buckets past the watermark (or, to ``tail``,
        the campaign's unfolded reports page by page), in one snapshot: a fold committing
        meanwhile can neither double-count nor hide a report."""
        snapshot = self.bucket_snapshot(campaign_id, start, end, tail)
        total = np.zeros(size, dtype=np.int64)
        n = 0
        for _, count, blob in snapshot.buckets:
            n += count
            total += state_array(blob)
        return WindowSnapshot(n, total, snapshot.tail, snapshot.folded_at)

    @abstractmethod
    def time_span(self, campaign_id: int) -> tuple[int, int] | None:
        """The first and last time bucket holding a report of the campaign, folded or not
        (None: none), in one snapshot: a series' default window."""

    @abstractmethod
    def report_counts(self, since: int | None = None) -> dict[int, dict[int, int]]:
        """Accepted reports per campaign id and time bucket (folded and not yet folded), for
        the buckets at or after ``since``: counts only, no statistics, in one snapshot."""

    @abstractmethod
    def folded_statistics(self, campaign_id: int) -> FoldedStatistics:
        """A campaign's folded statistics per bucket, its retired counts per bucket and the
        watermark they correspond to, in one snapshot."""

    @abstractmethod
    def folded_report_rows(self, campaign_id: int, through: int) -> Iterator[tuple[int, str]]:
        """(time bucket, canonical payload) of a campaign's stored reports at or below the
        watermark ``through``, in time order, streamed."""

    @abstractmethod
    def report_range(self, after_seq: int, through_seq: int, campaign_id: int | None = None,
                     limit: int | None = None) -> list[tuple[int, int, int, str]]:
        """(seq, campaign id, time bucket, payload) of the reports with after_seq < seq <=
        through_seq (of one campaign if given; at most ``limit``), in append order: what an
        export writes, page by page."""

    @abstractmethod
    def stream_reports(self, campaign_id: int, through_seq: int,
                       batch: int) -> Generator[list[tuple[int, int, str]], None, None]:
        """(seq, time bucket, payload) of one campaign's reports with seq <= through_seq, in
        append order, in lists of at most ``batch``: one query read as it goes (a server-side
        cursor on PostgreSQL) in one snapshot, for an export of the whole campaign."""

    @abstractmethod
    def shuffled_totals(self, campaign_id: int, start: int | None, end: int | None,
                        ) -> tuple[int, int, int | None, int, int | None]:
        """(batches, reports, smallest batch, vouched batches, smallest vouched sender count)
        of the buckets with start <= time < end."""

    # -- retention ----------------------------------------------------------------------------

    @abstractmethod
    def drop_expired(self, now: float, margin: float, batch: int = 10_000) -> int:
        """Drop the folded reports of buckets older than their campaign's report expiry plus
        ``margin``; returns how many.

        Ingest refuses a report older than the expiry, so an expired report's ID protects
        nothing: a replay is refused as expired before any ID check. The margin covers the
        clock skew between replicas. The statistics the reports fed stay, and each bucket
        keeps the count of its dropped reports (``FoldedStatistics.retired``) so that
        ``check-aggregates`` knows it cannot be recomputed. Unfolded reports are never
        dropped (they have fed nothing yet); ingest never waits long for it.
        """

    # -- alerts -------------------------------------------------------------------------------

    @abstractmethod
    def insert_alert_rule(self, name: str, campaign_id: int, definition: Mapping[str, Any],
                          webhook: str, secret: str | None, now: float) -> StoredAlertRule:
        """Store a new alert rule; ``FileExistsError`` if the name is taken."""

    @abstractmethod
    def alert_rules(self, campaign_ids: Iterable[int] | None = None) -> list[StoredAlertRule]:
        """The alert rules (of these campaigns, if given), in the order they were created."""

    @abstractmethod
    def get_alert_rule(self, name: str) -> StoredAlertRule | None:
        """The alert rule of that name (None: none)."""

    @abstractmethod
    def delete_alert_rule(self, rule_id: int) -> bool:
        """Delete a rule with its state and its notifications, delivered or not; False if
        there was none."""

    @abstractmethod
    def alert_state(self, rule_id: int) -> AlertState:
        """The rule's last evaluated window end and its values significant now, in one
        snapshot; ``KeyError`` if there is no such rule."""

    @abstractmethod
    def commit_alert_evaluation(self, evaluation: AlertEvaluation) -> bool:
        """Record an evaluation in one transaction: move the rule's last end from
        ``expected_end`` to ``end``, set and clear its significant values and queue its
        notifications. Returns False, changing nothing, if the last end is no longer
        ``expected_end`` (another evaluator decided first) or the rule is gone."""

    @abstractmethod
    def due_alert_firings(self, now: float, limit: int) -> list[AlertFiring]:
        """Pending notifications whose next attempt is due and that no deliverer holds,
        oldest first."""

    @abstractmethod
    def claim_alert_firing(self, firing_id: int, now: float, seconds: float) -> bool:
        """Take a due notification for one delivery attempt (until ``now + seconds``),
        counting the attempt; False if another deliverer took it or it is no longer due."""

    @abstractmethod
    def finish_alert_firing(self, firing_id: int, now: float, *, delivered: bool,
                            error: str | None, retry_at: float | None) -> None:
        """Record an attempt's outcome: delivered, or failed with ``error`` and retried at
        ``retry_at`` (None: given up)."""

    @abstractmethod
    def alert_firings(self, rule_id: int, limit: int) -> list[AlertFiring]:
        """A rule's most recent notifications, newest first."""
