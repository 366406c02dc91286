"""The SQL both engines speak: the storage operations whose statements are the same on
SQLite and PostgreSQL, written once, and the group commit.

:class:`SQLStorage` is the shared base of the engines (after Django's
``db.backends.base``): each engine module subclasses it, neither subclasses the other. It
holds only what both engines do alike, in the SQL they share (``?`` placeholders, ``ON
CONFLICT … DO UPDATE``, ``RETURNING``, ``coalesce``, savepoints); what differs is declared
here as an abstract hook and written in the engine's module:

* ``connect`` / ``close``: the engine's connection (and its settings);
* ``_begin_write`` / ``_begin_read`` / ``_writer_turn``: how a write transaction starts and
  queues, and how a read gets one snapshot;
* ``_fold_horizon``: how far a fold may read the append order;
* ``joined_payloads``: the aggregate that joins a group's payloads with commas;
* ``migrate``, ``maintain``, ``existing_reports``, ``insert_reports``, ``drop_expired``:
  the schema and the statements that are the engine's own;
* ``_append_live`` / ``_append_is_atomic``: ingest's usual append, which checks in the same
  statement that the campaign is not retired, and whether a failed one needs a savepoint.

Schemas (which must keep the same tables and columns for this SQL to hold) are in the
engine modules, with their migrations.
"""

from __future__ import annotations

import contextlib
import json
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from chorus_collector.storage.alert_tables import AlertTables
from chorus_collector.storage.interface import Connection, Storage, TailReader
from chorus_collector.storage.outage import Outage
from chorus_collector.storage.values import (
    AlertEvaluation,
    AlertFiring,
    AlertState,
    Annotation,
    BucketSnapshot,
    CampaignRetired,
    FoldChunk,
    FoldedStatistics,
    FoldLeaseState,
    FoldStatus,
    PayloadGroup,
    StoredAlertRule,
    StoredCampaign,
    StoredReport,
    TailPage,
    state_array,
    state_bytes,
)
from chorus_shared.campaign import NAME_PATTERN, Campaign, campaign_from_config, canonical_json

__all__ = ["SQLStorage"]

T = TypeVar("T")
ConnT = TypeVar("ConnT", bound=Connection)


class _GroupItem:
    """One caller's work in a group commit."""

    def __init__(self, work: Callable[[Any], Any],
                 append: tuple[int, StoredReport] | None = None) -> None:
        self.work = work
        #: (campaign id, report) when the work is ``grouped_append``'s: an engine that
        #: ``combines_appends`` runs the group's appends in one statement instead.
        self.append = append
        self.wake = threading.Event()
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None


class SQLStorage(Storage, Generic[ConnT]):
    """The operations both engines run with the same SQL, on ``ConnT`` connections (one per
    thread, opened lazily by the engine's ``connect``)."""

    def __init__(self, path: str, *, synchronous: str = "FULL") -> None:
        self.path = path
        self.synchronous = synchronous
        self._local = threading.local()
        self._campaigns: dict[str, StoredCampaign] = {}
        self._names_by_digest: dict[str, str] = {}
        self._names_by_id: dict[int, str] = {}
        self._campaigns_lock = threading.Lock()
        self._group_mutex = threading.Lock()
        self._group_queue: list[_GroupItem] = []
        self._group_leader = False
        self._group_grew = threading.Condition(self._group_mutex)  # a caller queued
        self._last_group_size = 0
        #: The longest a leader waits for its group to grow, in seconds (``_take_group``;
        #: the COMMIT_WAIT_US setting); 0, the default: a leader never waits.
        self.group_linger = 0.0
        #: Told how many writers each group held, once its callers are answered (the
        #: server's metrics); None: nobody listens.
        self.on_group_commit: Callable[[int], None] | None = None
        self.outage = Outage()
        self.alerts = AlertTables(self)

    # -- what each engine provides ------------------------------------------------------------

    @abstractmethod
    def connect(self) -> ConnT:
        """This thread's connection (opened on first use)."""

    #: SQL that joins a group's payloads with commas (each one is a whole JSON value).
    joined_payloads: str

    @abstractmethod
    def _writer_turn(self) -> contextlib.AbstractContextManager[None]:
        """Wait for this thread's turn to write; held until the transaction ends."""

    @abstractmethod
    def _begin_write(self, conn: ConnT) -> None:
        """Open a write transaction."""

    @abstractmethod
    def _begin_read(self, conn: ConnT) -> None:
        """Open a read transaction: every statement until COMMIT sees one snapshot."""

    @abstractmethod
    def _fold_horizon(self) -> int | None:
        """The highest seq a fold may read (None: any committed one)."""

    @abstractmethod
    def _is_outage(self, error: BaseException) -> bool:
        """Whether ``error`` says the database cannot be used now, rather than a bug."""

    def unavailable(self, error: BaseException) -> bool:
        if not self._is_outage(error):
            return False
        self.outage.down(error)
        return True

    # -- transactions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[ConnT]:
        """A write transaction: BEGIN … COMMIT, rolled back on any exception."""
        conn = self.connect()
        with self._writer_turn():
            self._begin_write(conn)
            try:
                yield conn
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except Exception:
                    # The connection broke with the work (a signal that landed in the middle
                    # of a driver call, a lost server): the transaction dies with it, and
                    # what unwound is the error to report, not this one.
                    self.close()
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                # A COMMIT refused (a deferred constraint, a full disk) can leave the
                # transaction open, as SQLite does: rolled back here, or this thread's next
                # write would fail to begin ("cannot start a transaction within a
                # transaction"). PostgreSQL has ended it already.
                self._abandon(conn)
                raise
        self.outage.up()

    def _abandon(self, conn: ConnT) -> None:
        """End a failed transaction: rolled back if it is still open, and if even that fails,
        closed with the connection (left open, it would fail this thread's next BEGIN; the
        next ``connect`` opens a fresh one)."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except Exception:
            self.close()

    def grouped_write(self, work: Callable[[ConnT], T]) -> T:
        """Run ``work(conn)`` in a write transaction shared with concurrent callers.

        Group commit: threads that write at the same time share one BEGIN … COMMIT, so one
        fsync makes all their reports durable instead of one fsync each. Each caller's work
        runs in its own SAVEPOINT (one alone in its group: in the transaction itself): an
        exception rolls back only that caller's changes and is raised to it. (A group of
        ``grouped_append``'s single reports alone, where the engine ``combines_appends``, is
        one statement that commits with it: its failure is every caller's.) Every call
        returns only after the shared COMMIT succeeded; if it fails, every caller in the
        group gets the error (nothing of theirs was acknowledged).

        One caller leads: it runs the group (its own work and everything queued) on its
        connection, then hands leadership to the next queued caller, so no thread stays busy
        for others under sustained load. When the last group had company, the leader first
        waits up to ``group_linger`` for its group to outgrow it (``_take_group``).

        The main thread writes alone, in a transaction of its own (``_alone``).
        """
        return self._grouped(_GroupItem(work))  # type: ignore[no-any-return]

    def grouped_append(self, campaign_id: int, report: StoredReport) -> bool:
        def work(conn: ConnT) -> bool:
            return self.insert_new_reports(conn, campaign_id, [report])

        return bool(self._grouped(_GroupItem(work, (campaign_id, report))))

    #: Whether ``_append_together`` runs a group's appends in one statement.
    combines_appends = False

    def _append_together(self, conn: ConnT, appends: list[tuple[int, StoredReport]], *,
                         commit: bool = False) -> list[bool | None]:
        """Append each report unless its ID is stored or its campaign retired, in one
        statement: per report True (appended), False (its ID is stored) or None (retired).
        The reports' keys are distinct. With ``commit``, the write transaction commits with
        the statement (in its round trip); if either fails, the error is raised and nothing
        is durable."""
        raise NotImplementedError

    def _grouped(self, item: _GroupItem) -> Any:
        if threading.get_ident() == threading.main_thread().ident:
            return self._alone(item)
        with self._group_mutex:
            self._group_queue.append(item)
            if self.group_linger:  # a leader may be waiting for its group to grow
                self._group_grew.notify()
            lead = not self._group_leader
            self._group_leader = True
        if not lead:
            item.wake.wait()
        if not item.finished:  # leading: first caller, or promoted by the previous leader
            self._run_group()
        if item.error is not None:
            raise item.error
        return item.result

    def _take_group(self) -> list[_GroupItem]:
        """The callers queued, the leader's among them: when the last group held more than
        one, after waiting up to ``group_linger`` for this one to outgrow it (the wait ends
        as soon as it has). A transaction costs much the same whatever it holds (its commit
        and fsync; on PostgreSQL a round trip and the server's wake-ups too: about 36 µs of
        the server's CPU under concurrency, against 1–9 µs for each report in it), so where
        many independent clients send single reports a millisecond's wait shares it among
        more of them: 6% less CPU a report on either engine under the benchmarks' HTTP load.
        Where a few writers send in a tight loop, the group cannot outgrow the last (it
        holds them all) and every transaction waits the whole time: 2–20 times fewer
        reports a second (docs/benchmarks.md). So it is off unless set."""
        with self._group_mutex:
            if self.group_linger > 0 and self._last_group_size > 1:
                last = self._last_group_size
                self._group_grew.wait_for(lambda: len(self._group_queue) > last,
                                          timeout=self.group_linger)
            group, self._group_queue = self._group_queue, []
            self._last_group_size = len(group)
        return group

    def _run_group(self) -> None:
        group = self._take_group()
        self._commit_group(group)
        if self.on_group_commit is not None:
            self.on_group_commit(len(group))

    def _alone(self, item: _GroupItem) -> Any:
        """The main thread's grouped write, in a write transaction of its own.

        Python runs signal handlers in the main thread only, between any two of its steps,
        and a handler may raise (Ctrl-C's KeyboardInterrupt; ``chorus aggregate``'s SIGTERM
        exits). A leader interrupted between taking its group and handing the lead on would
        leave every caller queued behind it, and every later one, waiting for good; a
        transaction of its own unwinds as any ``write`` does (rolled back, the writer's turn
        given back). The group commit is for the threads that serve requests, which no
        signal interrupts; a command's main thread seldom has company to share a commit
        with.
        """
        with self.write() as conn:
            result = item.work(conn)
        if self.on_group_commit is not None:
            self.on_group_commit(1)
        return result

    def _commit_group(self, group: list[_GroupItem]) -> None:
        conn: ConnT | None = None
        turn, in_turn = self._writer_turn(), False
        try:
            # Inside: a turn that cannot be taken (SQLite's lock file cannot be opened) or a
            # database that cannot be reached fails the group, and the next leader is still
            # woken (ingest may make no query before its append).
            turn.__enter__()
            in_turn = True  # left in the finally clause, before the next leader is woken
            conn = self.connect()
            self._begin_write(conn)
            appends = [item for item in group if item.append is not None]
            if self.combines_appends and len(appends) == len(group):
                # Single reports only (a lone one too): one statement that commits with
                # them, in one round trip with the BEGIN; no savepoint, since a failure is
                # every caller's error either way.
                self._run_appends(conn, appends, commit=True)
                group_rest = []
            elif self.combines_appends and len(appends) > 1:
                # One statement for the group's single reports: a statement each was a round
                # trip to the server each.
                self._run_appends(conn, appends)
                group_rest = [item for item in group if item.append is None]
            else:
                group_rest = group
            if not group_rest:
                pass  # committed with the appends, or failed with them
            elif len(group_rest) == 1 and len(group) == 1:
                # Alone: the transaction is its savepoint (2 statements less).
                try:
                    group[0].result = group[0].work(conn)
                except Exception as error:
                    group[0].error = error
                    conn.execute("ROLLBACK")
                else:
                    conn.execute("COMMIT")
            else:
                for number, item in enumerate(group_rest):
                    conn.execute(f"SAVEPOINT w{number}")
                    try:
                        item.result = item.work(conn)
                        conn.execute(f"RELEASE w{number}")
                    except Exception as error:  # this caller's problem only
                        item.error = error
                        self._undo_savepoint(conn, f"w{number}", error)
                conn.execute("COMMIT")
        except BaseException as error:  # BEGIN or COMMIT failed: nothing here is durable
            # Every caller gets the error before anything else can fail: a ROLLBACK on a
            # connection the server dropped raises too, and must not leave a caller with its
            # work's result as if it had committed.
            for item in group:
                item.result, item.error = None, item.error or error
            if conn is not None:
                self._abandon(conn)
            if not isinstance(error, Exception):
                raise
        else:
            self.outage.up()
        finally:
            if in_turn:
                turn.__exit__(None, None, None)
            with self._group_mutex:
                if self._group_queue:  # hand over to the next waiting caller
                    self._group_queue[0].wake.set()
                else:
                    self._group_leader = False
            for item in group:
                item.finished = True
                item.wake.set()

    def _run_appends(self, conn: ConnT, items: list[_GroupItem], *, commit: bool = False,
                     ) -> None:
        """The appends of a group in one statement, in a savepoint of their own: a failure
        (a deadlock with another replica) is raised to each of their callers, and the rest
        of the group goes on. A report whose key an earlier one of the group holds is not
        appended (False): its caller looks it up after the commit. With ``commit`` (the
        group is these appends), no savepoint: the statement commits the transaction, and
        a failure of either is raised, for ``_run_group`` to give each caller."""
        first: dict[tuple[int, bytes], _GroupItem] = {}
        for item in items:
            assert item.append is not None
            campaign_id, report = item.append
            if (campaign_id, report.report_id) in first:
                item.result = False
            else:
                first[campaign_id, report.report_id] = item
        together = list(first.values())
        if commit:  # a failure is the group's (``_run_group`` rolls back and tells each)
            self._give_outcomes(together, self._append_together(
                conn, [item.append for item in together], commit=True))  # type: ignore[misc]
            return
        conn.execute("SAVEPOINT appends")
        try:
            outcomes = self._append_together(
                conn, [item.append for item in together])  # type: ignore[misc]
        except Exception as error:
            for item in together:
                item.error = error
            self._undo_savepoint(conn, "appends", error)
            return
        conn.execute("RELEASE appends")
        self._give_outcomes(together, outcomes)

    @staticmethod
    def _undo_savepoint(conn: ConnT, name: str, error: Exception) -> None:
        """Roll back to savepoint ``name`` after ``error``. Where the error took the whole
        transaction with it (SQLite rolls all of it back on a full disk; PostgreSQL's
        connection dropped), the savepoint is gone too: ``error`` is then the whole group's,
        raised, rather than the secondary "no such savepoint" that is no outage (a 500 in
        place of a 503)."""
        try:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        except Exception:
            raise error from None

    @staticmethod
    def _give_outcomes(together: list[_GroupItem], outcomes: list[bool | None]) -> None:
        for item, outcome in zip(together, outcomes, strict=True):
            if outcome is None:
                assert item.append is not None
                item.error = CampaignRetired(item.append[0])
            else:
                item.result = outcome

    def ping(self) -> None:
        self.connect().execute("SELECT 1").fetchone()
        self.outage.up()

    # -- campaigns ----------------------------------------------------------------------------

    def insert_campaign(self, campaign: Campaign) -> tuple[StoredCampaign, bool]:
        config_json = canonical_json(campaign.config).decode()
        with self.write() as conn:
            # ON CONFLICT: two collectors creating the same campaign at once both succeed.
            created = conn.execute(
                "INSERT INTO campaigns (name, digest, config) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING RETURNING id",
                (campaign.name, campaign.digest, config_json)).fetchone()
            if created is not None:
                return StoredCampaign(created[0], campaign), True
            row = conn.execute("SELECT id, digest FROM campaigns WHERE name = ?",
                               (campaign.name,)).fetchone()
            if row is None or row[1] != campaign.digest:
                raise FileExistsError(campaign.name)
            return StoredCampaign(row[0], campaign), False

    def get_campaign(self, name: str) -> StoredCampaign | None:
        cached = self._campaigns.get(name)
        if cached is not None:
            return cached  # campaigns are immutable, so the cache never goes stale
        if not NAME_PATTERN.fullmatch(name):
            # No campaign can bear it, and PostgreSQL refuses text with NUL or lone
            # surrogates outright: a lookup by any string a request carries answers None.
            return None
        row = self.connect().execute(
            "SELECT id, digest, config FROM campaigns WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            return None
        campaign = campaign_from_config(json.loads(row[2]), expected_digest=row[1])
        stored = StoredCampaign(row[0], campaign)
        with self._campaigns_lock:
            self._campaigns[name] = stored
        return stored

    def get_campaign_by_digest(self, digest: str) -> StoredCampaign | None:
        name = self._names_by_digest.get(digest)
        if name is None:
            if not digest.isascii() or not digest.isprintable():
                return None  # no digest is, and PostgreSQL refuses NUL in text
            row = self.connect().execute("SELECT name FROM campaigns WHERE digest = ?",
                                         (digest,)).fetchone()
            if row is None:
                return None
            name = row[0]
            with self._campaigns_lock:
                self._names_by_digest[digest] = name
        return self.get_campaign(name)

    def retire_campaign(self, campaign_id: int, now: float) -> float:
        with self.write() as conn:
            conn.execute("UPDATE campaigns SET retired_at = ? WHERE id = ? AND retired_at IS NULL",
                         (now, campaign_id))
            retired_at = conn.execute("SELECT retired_at FROM campaigns WHERE id = ?",
                                      (campaign_id,)).fetchone()[0]
        return float(retired_at)

    def retired_at(self, campaign_id: int) -> float | None:
        # Read from the database every time (a point query on a small table, once per
        # campaign and request); campaigns themselves never change, so they stay cached.
        row = self.connect().execute("SELECT retired_at FROM campaigns WHERE id = ?",
                                     (campaign_id,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def add_annotation(self, time: int, text: str, campaign_id: int | None,
                       now: float) -> Annotation:
        with self.write() as conn:
            row = conn.execute("INSERT INTO annotations (time, text, campaign_id, created_at) "
                               "VALUES (?, ?, ?, ?) RETURNING id",
                               (time, text, campaign_id, now)).fetchone()
        return Annotation(int(row[0]), time, text, campaign_id, now)

    def annotations(self, campaign_id: int | None, start: int | None = None,
                    end: int | None = None) -> list[Annotation]:
        sql = "SELECT id, time, text, campaign_id, created_at FROM annotations WHERE 1 = 1"
        args: list[Any] = []
        if campaign_id is not None:
            sql += " AND (campaign_id = ? OR campaign_id IS NULL)"
            args.append(campaign_id)
        if start is not None:
            sql += " AND time >= ?"
            args.append(start)
        if end is not None:
            sql += " AND time < ?"
            args.append(end)
        rows = self.connect().execute(sql + " ORDER BY time, id", args).fetchall()
        return [Annotation(int(i), int(t), str(x), None if c is None else int(c), float(at))
                for i, t, x, c, at in rows]

    def delete_annotation(self, annotation_id: int) -> bool:
        with self.write() as conn:
            row = conn.execute("DELETE FROM annotations WHERE id = ? RETURNING id",
                               (annotation_id,)).fetchone()
        return row is not None

    def get_campaign_by_id(self, campaign_id: int) -> StoredCampaign:
        name = self._names_by_id.get(campaign_id)
        if name is None:
            row = self.connect().execute("SELECT name FROM campaigns WHERE id = ?",
                                         (campaign_id,)).fetchone()
            if row is None:
                raise KeyError(campaign_id)
            name = row[0]
            with self._campaigns_lock:
                self._names_by_id[campaign_id] = name
        stored = self.get_campaign(name)
        assert stored is not None
        return stored

    def list_campaigns(self) -> list[StoredCampaign]:
        names = [r[0] for r in self.connect().execute("SELECT name FROM campaigns ORDER BY id")]
        return [c for c in (self.get_campaign(n) for n in names) if c is not None]

    # -- reports ------------------------------------------------------------------------------

    @abstractmethod
    def _append_live(self, conn: Connection, campaign_id: int,
                     reports: Sequence[StoredReport]) -> bool:
        """``insert_reports``, unless the campaign is retired (False: nothing appended),
        which the append reads itself (in its first statement where it can), so that ingest
        makes no query of its own for it."""

    def _append_is_atomic(self, count: int) -> bool:
        """Whether an append of ``count`` reports that fails leaves the transaction as it
        was without a savepoint (one statement that the engine backs out by itself)."""
        del count
        return False

    def insert_new_reports(self, conn: Connection, campaign_id: int,
                           reports: Sequence[StoredReport]) -> bool:
        savepoint = not self._append_is_atomic(len(reports))
        if savepoint:
            conn.execute("SAVEPOINT append_new")
        try:
            live = self._append_live(conn, campaign_id, reports)
        except self.retryable_errors:
            if savepoint:
                conn.execute("ROLLBACK TO append_new")
                conn.execute("RELEASE append_new")
            return False
        if savepoint:
            conn.execute("RELEASE append_new")
        if not live:
            raise CampaignRetired(campaign_id)
        return True

    def record_shuffled_batch(self, conn: Connection, campaign_id: int,
                              new_reports_by_time: Mapping[int, int],
                              senders_by_time: Mapping[int, int] | None = None) -> None:
        for time, count in new_reports_by_time.items():
            if count <= 0:
                continue
            senders = None if senders_by_time is None else senders_by_time[time]
            conn.execute(
                "INSERT INTO shuffled_batches (campaign_id, time, batches, reports, smallest, "
                "vouched_batches, smallest_senders) VALUES (?, ?, 1, ?, ?, ?, ?) "
                "ON CONFLICT (campaign_id, time) DO UPDATE SET "
                "batches = shuffled_batches.batches + 1, "
                "reports = shuffled_batches.reports + excluded.reports, "
                "smallest = CASE WHEN excluded.smallest < shuffled_batches.smallest "
                "THEN excluded.smallest ELSE shuffled_batches.smallest END, "
                "vouched_batches = shuffled_batches.vouched_batches + excluded.vouched_batches, "
                "smallest_senders = CASE WHEN excluded.smallest_senders IS NULL "
                "THEN shuffled_batches.smallest_senders "
                "WHEN shuffled_batches.smallest_senders IS NULL "
                "OR excluded.smallest_senders < shuffled_batches.smallest_senders "
                "THEN excluded.smallest_senders ELSE shuffled_batches.smallest_senders END",
                (campaign_id, time, count, count, 0 if senders is None else 1, senders))

    # -- folding: the statistics job's reads and its one write ---------------------------------

    def unfolded(self, limit: int) -> FoldChunk:
        horizon = self._fold_horizon()
        conn = self.connect()
        self._begin_read(conn)
        try:
            watermark, moves = conn.execute(
                "SELECT seq, moves FROM fold_state WHERE id = 1").fetchone()
            through, count = self._seq_page(conn, watermark, horizon, limit) or (watermark, 0)
            groups = [] if not count else self._payload_groups(conn, watermark, through)
        finally:
            conn.execute("COMMIT")
        return FoldChunk(int(watermark), int(through), int(count), groups, int(moves))

    def _seq_page(self, conn: ConnT, after: int, through: int | None, limit: int,
                  campaign_id: int | None = None) -> tuple[int, int] | None:
        """(last seq, count) of the next page: the first ``limit`` reports (of one campaign
        if given) with after < seq <= through (None: any), in append order; None if there are
        none. Here by the seq index's order; an engine whose seq index gives no order pages
        otherwise."""
        sql = "SELECT seq FROM reports WHERE "
        args: list[Any] = []
        if campaign_id is not None:
            sql += "+campaign_id = ? AND "
            args.append(campaign_id)
        sql += "seq > ?"
        args.append(after)
        if through is not None:
            sql += " AND seq <= ?"
            args.append(through)
        last, count = conn.execute(
            f"SELECT max(seq), count(*) FROM ({sql} ORDER BY seq LIMIT ?) AS page",
            (*args, limit)).fetchone()
        return None if not count else (int(last), int(count))

    def _payload_groups(self, conn: ConnT, after_seq: int, through_seq: int,
                        campaign_id: int | None = None) -> list[PayloadGroup]:
        # Grouped and joined by the database: no Python object per report (the fold's read
        # was half its time), and one JSON parse per group.
        where, args = _seq_range(after_seq, through_seq, campaign_id)
        sql = (f"SELECT campaign_id, time, count(*), {self.joined_payloads} FROM reports "
               f"WHERE {where} GROUP BY campaign_id, time")
        return [PayloadGroup(*row) for row in conn.execute(sql, args).fetchall()]

    def payload_groups(self, after_seq: int, through_seq: int,
                       campaign_id: int | None = None) -> list[PayloadGroup]:
        # A job that splits the append order into ranges reads each range with this from a
        # connection of its own (a Dask task on another process or host), so no connection
        # and no payload travels through the job's driver.
        conn = self.connect()
        self._begin_read(conn)
        try:
            return self._payload_groups(conn, after_seq, through_seq, campaign_id)
        finally:
            conn.execute("COMMIT")

    def append_horizon(self) -> int:
        horizon = self._fold_horizon()
        if horizon is not None:
            return horizon
        row = self.connect().execute("SELECT coalesce(max(seq), 0) FROM reports").fetchone()
        return int(row[0])

    def claim_fold(self, holder: str, now: float, lease: float,
                   replacing: str | None = None) -> bool:
        with self.write() as conn:
            cursor = conn.execute(
                "UPDATE fold_state SET holder = ?, lease_until = ? "
                "WHERE id = 1 AND (lease_until < ? OR holder = ? OR holder = ?)",
                (holder, now + lease, now, holder, replacing or holder))
            return cursor.rowcount == 1  # type: ignore[no-any-return]

    def fold_lease(self) -> FoldLeaseState:
        holder, until = self.connect().execute(
            "SELECT holder, lease_until FROM fold_state WHERE id = 1").fetchone()
        return FoldLeaseState(holder, float(until))

    def release_fold(self, holder: str) -> None:
        with self.write() as conn:
            conn.execute("UPDATE fold_state SET lease_until = 0 WHERE id = 1 AND holder = ?",
                         (holder,))

    def commit_fold(self, expected: int, through: int,
                    partials: Mapping[tuple[int, int], tuple[int, np.ndarray]], now: float,
                    step: Callable[[str], None] = lambda _: None, *, moves: int) -> bool:
        with self.write() as conn:
            step("begin")
            # Compare-and-set first: the row lock it takes serializes folds on any engine,
            # and a fold that lost the race changes nothing. On the count of moves too, as
            # gc can bring the watermark's value back (SQLite's _WATERMARK_TO_TOP).
            moved = conn.execute(
                "UPDATE fold_state SET seq = ?, folded_at = ?, moves = moves + 1 "
                "WHERE id = 1 AND seq = ? AND moves = ?",
                (through, now, expected, moves)).rowcount
            if moved != 1:
                return False
            for (campaign_id, time), (count, state) in partials.items():
                row = conn.execute(
                    "SELECT n, state FROM aggregates WHERE campaign_id = ? AND time = ?",
                    (campaign_id, time)).fetchone()
                if row is None:
                    conn.execute(
                        "INSERT INTO aggregates (campaign_id, time, n, state) "
                        "VALUES (?, ?, ?, ?)", (campaign_id, time, count, state_bytes(state)))
                else:
                    merged = state_array(row[1]) + state
                    conn.execute(
                        "UPDATE aggregates SET n = ?, state = ? "
                        "WHERE campaign_id = ? AND time = ?",
                        (row[0] + count, state_bytes(merged), campaign_id, time))
                step("merge")
            step("watermark")
        return True

    def any_unfolded(self) -> bool:
        # One index probe, not a count.
        row = self.connect().execute(
            "SELECT EXISTS (SELECT 1 FROM reports "
            "WHERE seq > (SELECT seq FROM fold_state WHERE id = 1))").fetchone()
        return bool(row[0])

    def fold_status(self) -> FoldStatus:
        row = self.connect().execute(
            "SELECT seq, folded_at, (SELECT count(*) FROM reports WHERE seq > fold_state.seq), "
            "moves FROM fold_state WHERE id = 1").fetchone()
        return FoldStatus(watermark=row[0], folded_at=row[1], unfolded=row[2], moves=row[3])

    # -- reads of statistics ------------------------------------------------------------------

    def bucket_snapshot(self, campaign_id: int, start: int | None, end: int | None,
                        tail: TailReader | None = None) -> BucketSnapshot:
        # Taken before the snapshot begins, so that every seq at or below it is in it.
        horizon = 0 if tail is None else self._settled_horizon()
        conn = self.connect()
        self._begin_read(conn)
        try:
            watermark, folded_at = conn.execute(
                "SELECT seq, folded_at FROM fold_state WHERE id = 1").fetchone()
            sql, args = _in_window("SELECT time, n, state FROM aggregates WHERE campaign_id = ?",
                                   campaign_id, start, end)
            buckets = conn.execute(sql + " ORDER BY time", args).fetchall()
            rows: list[tuple[int, str]] = []
            if tail is not None:
                tail.read(int(watermark), int(horizon), lambda after, through:
                          self._tail_pages(conn, campaign_id, after, through))
            else:
                sql, args = _in_window("SELECT time, payload FROM reports "
                                       "WHERE +campaign_id = ? AND seq > ?", campaign_id,
                                       start, end, watermark)
                rows = conn.execute(sql, args).fetchall()
        finally:
            conn.execute("COMMIT")
        return BucketSnapshot([(int(t), int(n), bytes(blob)) for t, n, blob in buckets],
                              [(int(t), payload) for t, payload in rows], folded_at)

    def _tail_pages(self, conn: ConnT, campaign_id: int, after: int,
                    through: int | None) -> Iterator[TailPage]:
        """Pages of at most ``tail_page`` of the campaign's reports with after < seq <=
        through, on ``conn`` (in its snapshot): each page's range is found first, then read
        grouped and joined by the database, as a fold step reads (``_payload_groups``)."""
        while (page := self._seq_page(conn, after, through, self.tail_page,
                                      campaign_id)) is not None:
            last = page[0]
            yield TailPage(after, last, self._payload_groups(conn, after, last, campaign_id))
            after = last

    def _settled_horizon(self) -> int:
        """A seq at or below which every append has committed, found without making ingest
        wait (a query must never hold it up): here the append horizon, which the engine
        may make cheaper."""
        return self.append_horizon()

    def time_span(self, campaign_id: int) -> tuple[int, int] | None:
        conn = self.connect()
        self._begin_read(conn)
        try:
            folded = conn.execute("SELECT min(time), max(time) FROM aggregates "
                                  "WHERE campaign_id = ?", (campaign_id,)).fetchone()
            unfolded = conn.execute(
                "SELECT min(time), max(time) FROM reports WHERE +campaign_id = ? "
                "AND seq > (SELECT seq FROM fold_state WHERE id = 1)", (campaign_id,)).fetchone()
        finally:
            conn.execute("COMMIT")
        firsts = [int(row[0]) for row in (folded, unfolded) if row[0] is not None]
        lasts = [int(row[1]) for row in (folded, unfolded) if row[1] is not None]
        return (min(firsts), max(lasts)) if firsts else None

    def report_counts(self, since: int | None = None) -> dict[int, dict[int, int]]:
        conn = self.connect()
        self._begin_read(conn)
        counts: dict[int, dict[int, int]] = {}
        try:
            watermark = conn.execute("SELECT seq FROM fold_state WHERE id = 1").fetchone()[0]
            floor = -1 if since is None else since
            rows = conn.execute("SELECT campaign_id, time, n FROM aggregates WHERE time >= ?",
                                (floor,)).fetchall()
            rows += conn.execute("SELECT campaign_id, time, count(*) FROM reports "
                                 "WHERE seq > ? AND time >= ? GROUP BY campaign_id, time",
                                 (watermark, floor)).fetchall()
        finally:
            conn.execute("COMMIT")
        for campaign_id, time, n in rows:
            by_time = counts.setdefault(campaign_id, {})
            by_time[time] = by_time.get(time, 0) + n
        return counts

    def folded_report_rows(self, campaign_id: int,
                           through: int) -> Iterator[tuple[int, str]]:
        yield from self.connect().execute(
            "SELECT time, payload FROM reports WHERE campaign_id = ? AND seq <= ? "
            "ORDER BY time", (campaign_id, through))

    def folded_statistics(self, campaign_id: int) -> FoldedStatistics:
        conn = self.connect()
        self._begin_read(conn)
        try:
            watermark = conn.execute("SELECT seq FROM fold_state WHERE id = 1").fetchone()[0]
            rows = conn.execute(
                "SELECT time, n, state FROM aggregates WHERE campaign_id = ? ORDER BY time",
                (campaign_id,)).fetchall()
            retired = dict(conn.execute(
                "SELECT time, reports FROM retired WHERE campaign_id = ?", (campaign_id,)))
        finally:
            conn.execute("COMMIT")
        return FoldedStatistics(watermark, rows, retired)

    def shuffled_totals(self, campaign_id: int, start: int | None, end: int | None,
                        ) -> tuple[int, int, int | None, int, int | None]:
        sql, args = _in_window(
            "SELECT coalesce(sum(batches), 0), coalesce(sum(reports), 0), min(smallest), "
            "coalesce(sum(vouched_batches), 0), min(smallest_senders) "
            "FROM shuffled_batches WHERE campaign_id = ?", campaign_id, start, end)
        batches, reports, smallest, vouched, senders = self.connect().execute(
            sql, args).fetchone()
        return (int(batches), int(reports), None if smallest is None else int(smallest),
                int(vouched), None if senders is None else int(senders))

    def report_range(self, after_seq: int, through_seq: int, campaign_id: int | None = None,
                     limit: int | None = None) -> list[tuple[int, int, int, str]]:
        where, args = _seq_range(after_seq, through_seq, campaign_id)
        sql = f"SELECT seq, campaign_id, time, payload FROM reports WHERE {where} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return self.connect().execute(sql, args).fetchall()  # type: ignore[no-any-return]

    # -- alerts: the SQL is in alert_tables.py -------------------------------------------------

    def insert_alert_rule(self, name: str, campaign_id: int, definition: Mapping[str, Any],
                          webhook: str, secret: str | None, now: float) -> StoredAlertRule:
        return self.alerts.insert_rule(name, campaign_id, definition, webhook, secret, now)

    def alert_rules(self, campaign_ids: Iterable[int] | None = None) -> list[StoredAlertRule]:
        return self.alerts.rules(campaign_ids)

    def get_alert_rule(self, name: str) -> StoredAlertRule | None:
        return self.alerts.get_rule(name)

    def delete_alert_rule(self, rule_id: int) -> bool:
        return self.alerts.delete_rule(rule_id)

    def alert_state(self, rule_id: int) -> AlertState:
        return self.alerts.state(rule_id)

    def commit_alert_evaluation(self, evaluation: AlertEvaluation) -> bool:
        return self.alerts.commit_evaluation(evaluation)

    def due_alert_firings(self, now: float, limit: int) -> list[AlertFiring]:
        return self.alerts.due_firings(now, limit)

    def claim_alert_firing(self, firing_id: int, now: float, seconds: float) -> bool:
        return self.alerts.claim_firing(firing_id, now, seconds)

    def finish_alert_firing(self, firing_id: int, now: float, *, delivered: bool,
                            error: str | None, retry_at: float | None) -> None:
        self.alerts.finish_firing(firing_id, now, delivered=delivered, error=error,
                                  retry_at=retry_at)

    def alert_firings(self, rule_id: int, limit: int) -> list[AlertFiring]:
        return self.alerts.firings(rule_id, limit)


def _seq_range(after_seq: int, through_seq: int,
               campaign_id: int | None) -> tuple[str, list[Any]]:
    """The WHERE clause and its arguments for after_seq < seq <= through_seq, of one campaign
    if given ("+campaign_id", an expression rather than the column: walk the seq range, not
    the campaign's whole index; both planners read it so)."""
    if campaign_id is None:
        return "seq > ? AND seq <= ?", [after_seq, through_seq]
    return "seq > ? AND seq <= ? AND +campaign_id = ?", [after_seq, through_seq, campaign_id]


def _in_window(sql: str, campaign_id: int, start: int | None, end: int | None,
               *more: Any) -> tuple[str, list[Any]]:
    """``sql`` (which selects one campaign's buckets; ``more`` binds its other
    placeholders) restricted to start <= time < end."""
    args: list[Any] = [campaign_id, *more]
    if start is not None:
        sql += " AND time >= ?"
        args.append(start)
    if end is not None:
        sql += " AND time < ?"
        args.append(end)
    return sql, args
