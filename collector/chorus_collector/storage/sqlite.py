"""SQLite storage through sqlite-utils: campaigns, raw reports and per-bucket statistics.

Discipline (after datasette's ``database.py``): WAL journal, one write path that opens every
transaction with ``BEGIN IMMEDIATE`` (so concurrent writers queue on SQLite's lock instead of
failing mid-transaction), STRICT tables and a versioned schema (``sqlite_utils.Migrations``).
A database that has migrations this version does not know is refused at startup.

What is stored is deliberately minimal: for each report its campaign, its 16-byte ID, its
time bucket, its perturbed payload and its place in the append order. No arrival time, no
address, no user agent. (The append order can show which reports came in one request; an
install's reports are already charged to one budget, so linking them reveals nothing the
budget does not cover, and a request's rows are appended in the order of their random IDs.)

Ingest only appends (``insert_reports``): every report gets the next ``seq``, and the write
transaction holds nothing but the request's own rows. The per-bucket statistics are folded
from the appended reports later, by a resumable job (``chorus_collector.jobs.folding``) that moves
one watermark: the statistics and the watermark change in one transaction, so a crash at any
step leaves both as they were. A read of a window (``window_snapshot``) takes the folded
statistics, the watermark and the not-yet-folded tail in one snapshot.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

import numpy as np
import sqlite_utils
from sqlite_utils.migrations import Migrations

from chorus_shared.campaign import (
    Campaign,
    campaign_from_config,
    campaign_from_spec,
    canonical_json,
)

__all__ = ["BucketSnapshot", "FoldStatus", "FoldedStatistics", "SchemaError", "Storage",
           "StoredReport", "WindowSnapshot", "migrations", "open_storage"]

migrations = Migrations("chorus")


class SchemaError(RuntimeError):
    """The database was written by a newer or different version of Chorus."""


@migrations()
def m001_initial(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE campaigns (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            digest TEXT NOT NULL UNIQUE,
            config TEXT NOT NULL
        ) STRICT"""
    )
    db.execute(
        """CREATE TABLE reports (
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            report_id BLOB NOT NULL,
            time INTEGER NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (campaign_id, report_id)
        ) STRICT, WITHOUT ROWID"""
    )
    # Sufficient statistics per campaign and time bucket: an additive int64 vector whose
    # layout the campaign's estimator defines. Since m004 folded from the appended reports.
    db.execute(
        """CREATE TABLE aggregates (
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            time INTEGER NOT NULL,
            n INTEGER NOT NULL,
            state BLOB NOT NULL,
            PRIMARY KEY (campaign_id, time)
        ) STRICT, WITHOUT ROWID"""
    )


@migrations()
def m002_shuffled_batches(db: sqlite_utils.Database) -> None:
    # Reports that came through the shuffler, per campaign and time bucket: how many, in how
    # many batches, and the smallest batch (the n of the central privacy bound). Counted per
    # batch, never per report: no report is marked as shuffled or direct.
    db.execute(
        """CREATE TABLE shuffled_batches (
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            time INTEGER NOT NULL,
            batches INTEGER NOT NULL,
            reports INTEGER NOT NULL,
            smallest INTEGER NOT NULL,
            PRIMARY KEY (campaign_id, time)
        ) STRICT, WITHOUT ROWID"""
    )


@migrations()
def m003_policies_without_memoization(db: sqlite_utils.Database) -> None:
    """Campaigns stored before memoization was withdrawn (docs/threat-model.md) carry
    ``privacy.memoize`` and, for Duchi's bit, the α-rounding grid ``params.buckets``: drop both
    and store the resulting config and digest, so that every campaign still loads. Reports
    made by clients of that version carry the old digest and are refused as stale."""
    for campaign_id, config_json in db.execute("SELECT id, config FROM campaigns").fetchall():
        config = json.loads(config_json)
        privacy, params = config.get("privacy"), config.get("params")
        legacy = isinstance(privacy, dict) and "memoize" in privacy
        if isinstance(privacy, dict):
            privacy.pop("memoize", None)
        if config.get("mechanism") in ("duchi", "one_bit_mean") and isinstance(params, dict):
            legacy = legacy or "buckets" in params
            params.pop("buckets", None)
        if legacy:
            campaign = campaign_from_spec(config, warn=False)
            db.execute("UPDATE campaigns SET config = ?, digest = ? WHERE id = ?",
                       (canonical_json(campaign.config).decode(), campaign.digest, campaign_id))


@migrations()
def m004_append_only_reports(db: sqlite_utils.Database) -> None:
    """Reports get an append sequence (the fold watermark's unit), ordered as they are laid
    out; the statistics stored so far already count every report, so the watermark starts at
    the last one. Payloads scrubbed by ``gc`` before this version are retired (dropped, with
    their count kept per bucket, as ``gc`` now does)."""
    db.execute(
        """CREATE TABLE retired (
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            time INTEGER NOT NULL,
            reports INTEGER NOT NULL,
            PRIMARY KEY (campaign_id, time)
        ) STRICT, WITHOUT ROWID"""
    )
    db.execute(
        """INSERT INTO retired (campaign_id, time, reports)
           SELECT campaign_id, time, count(*) FROM reports WHERE payload = ''
           GROUP BY campaign_id, time"""
    )
    # AUTOINCREMENT: a seq is never reused, even after gc dropped the newest rows, so a new
    # report can never land at or below the watermark.
    db.execute(
        """CREATE TABLE reports_appended (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            report_id BLOB NOT NULL,
            time INTEGER NOT NULL,
            payload TEXT NOT NULL,
            UNIQUE (campaign_id, report_id)
        ) STRICT"""
    )
    db.execute(
        """INSERT INTO reports_appended (campaign_id, report_id, time, payload)
           SELECT campaign_id, report_id, time, payload FROM reports WHERE payload != ''
           ORDER BY time, campaign_id"""
    )
    db.execute("DROP TABLE reports")
    db.execute("ALTER TABLE reports_appended RENAME TO reports")
    # gc drops expired buckets by time; estimates of a window read the tail by seq.
    db.execute("CREATE INDEX reports_by_time ON reports (campaign_id, time)")
    db.execute(
        """CREATE TABLE fold_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            seq INTEGER NOT NULL,
            folded_at REAL,
            holder TEXT,
            lease_until REAL NOT NULL DEFAULT 0
        ) STRICT"""
    )
    db.execute("INSERT INTO fold_state (id, seq) SELECT 1, coalesce(max(seq), 0) FROM reports")


@migrations()
def m005_retired_campaigns(db: sqlite_utils.Database) -> None:
    # When an admin retired the campaign (no new reports; estimates stay; the name stays).
    db.execute("ALTER TABLE campaigns ADD COLUMN retired_at REAL")


@migrations()
def m006_vouched_senders(db: sqlite_utils.Database) -> None:
    # Of a bucket's shuffled batches, how many came with a sender count the shuffler vouched
    # for (its admission control), and the smallest such count: the n of the central bound.
    # Batches recorded before have none: 0 and NULL, so they count as unvouched.
    db.execute("ALTER TABLE shuffled_batches ADD COLUMN vouched_batches INTEGER NOT NULL "
               "DEFAULT 0")
    db.execute("ALTER TABLE shuffled_batches ADD COLUMN smallest_senders INTEGER")


T = TypeVar("T")


class _GroupItem:
    """One caller's work in a group commit."""

    def __init__(self, work: Callable[[sqlite3.Connection], Any]) -> None:
        self.work = work
        self.wake = threading.Event()
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None


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


@dataclass(frozen=True)
class WindowSnapshot:
    n: int  # folded reports in the window
    state: np.ndarray  # their summed statistics
    tail: list[tuple[int, str]]  # (time bucket, payload) of the window's unfolded reports
    folded_at: float | None


@dataclass(frozen=True)
class BucketSnapshot:
    """A window's statistics bucket by bucket (a time series' input), not summed."""

    buckets: list[tuple[int, int, bytes]]  # (time bucket, n, state blob) of folded reports
    tail: list[tuple[int, str]]  # (time bucket, payload) of the window's unfolded reports
    folded_at: float | None


@dataclass(frozen=True)
class FoldedStatistics:
    watermark: int
    buckets: list[tuple[int, int, bytes]]  # (time bucket, n, state blob)
    retired: dict[int, int]  # time bucket → reports dropped by gc


def state_bytes(state: np.ndarray) -> bytes:
    return np.ascontiguousarray(state, dtype="<i8").tobytes()


def state_array(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<i8").astype(np.int64)


WAL_BACKSTOP_PAGES = 8192  # 32 MB of 4 KiB pages


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


class _WriterLock:
    """An open lock file of one thread, closed with ``close`` or when the thread's storage
    state is dropped (a thread that ends)."""

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._finalizer = weakref.finalize(self, os.close, self.fd)

    def close(self) -> None:
        self._finalizer()


class Storage:
    """One SQLite database; a connection per thread, opened lazily."""

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

    # -- connections and schema -------------------------------------------------------------

    def connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            # Checkpoints (copying the WAL back into the database) run in the background
            # (``maintain``); a committing request checkpoints only as a backstop, when the
            # WAL holds 32 MB the background has not copied yet.
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_BACKSTOP_PAGES}")
            self._local.conn = conn
        return conn

    # -- what another engine overrides (storage_postgres.py) ----------------------------------

    integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)
    # What a concurrent writer can make an ingest attempt fail with, so that it is retried.
    retryable_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)

    def _writer_turn(self) -> contextlib.AbstractContextManager[None]:
        return self._flock_turn()

    @contextlib.contextmanager
    def _flock_turn(self) -> Iterator[None]:
        """Wait for this thread's turn to write, blocked in the kernel on an exclusive
        ``flock`` beside the database, and hold it until the transaction ends.

        SQLite's own busy handler polls the write lock with sleeps of 1, 2, 5, 10 … ms, so
        server processes that take turns waste most of a turn asleep; a blocked ``flock``
        wakes the next writer as the last one commits (measured: batched ingest up from 0.72
        to 0.8 of a bare endpoint). Writers that do not take it (the sqlite3 shell) still
        queue on SQLite's lock; each thread has its own descriptor, so threads of one
        process take turns too.
        """
        lock = getattr(self._local, "writer_lock", None)
        if lock is None or lock.pid != os.getpid():  # not a descriptor inherited by a fork
            lock = _WriterLock(self.path + "-writer.lock")
            self._local.writer_lock = lock
        fcntl.flock(lock.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fd, fcntl.LOCK_UN)

    def _begin_write(self, conn: Any) -> None:
        # IMMEDIATE: take the write lock at once, so writers queue instead of failing later.
        conn.execute("BEGIN IMMEDIATE")

    def _begin_read(self, conn: Any) -> None:
        conn.execute("BEGIN")  # in WAL mode: one snapshot from the first read on

    @staticmethod
    def _in_transaction(conn: Any) -> bool:
        return bool(conn.in_transaction)

    def _fold_horizon(self) -> int | None:
        """The highest seq a fold may read (None: any). One writer at a time commits
        SQLite's seqs in order, so every seq a reader sees has all smaller ones committed."""
        return None

    def maintain(self, now: float) -> None:
        """Periodic upkeep the background folder runs: here a checkpoint, off the requests'
        path (PostgreSQL: partitions ahead).

        PASSIVE: it copies what no reader still needs and never waits for the write lock, so
        ingest goes on meanwhile. Without it, every commit past SQLite's default 4 MB of WAL
        checkpoints inside a request; and with writers in several processes that never
        pause, SQLite's own checkpoints seldom finish (the bare endpoint of the benchmark
        grew its WAL to 483 MB over 900,000 reports), which this one, run between rounds of
        writes, does.
        """
        del now
        self.connect().execute("PRAGMA wal_checkpoint(PASSIVE)")

    def append_horizon(self) -> int:
        """The highest seq at or below which every append has committed and none can still
        commit: how far a fold that plans its ranges ahead (on a cluster) may read."""
        horizon = self._fold_horizon()
        if horizon is not None:
            return horizon
        row = self.connect().execute("SELECT coalesce(max(seq), 0) FROM reports").fetchone()
        return int(row[0])

    def db(self) -> sqlite_utils.Database:
        return sqlite_utils.Database(self.connect())

    def migrate(self) -> None:
        """Apply pending migrations; refuse a database with migrations we do not know."""
        db = self.db()
        known = {m.name for m in migrations._migrations}
        unknown = [m.name for m in migrations.applied(db) if m.name not in known]
        if unknown:
            raise SchemaError(
                f"{self.path} has schema migrations this version of Chorus does not know "
                f"({', '.join(unknown)}); it was written by a newer version. Refusing to start."
            )
        tables = set(db.table_names())
        ours = migrations.applied(db) if "_sqlite_migrations" in tables else []
        if tables and not ours:
            raise SchemaError(f"{self.path} is not a Chorus database (tables: {sorted(tables)})")
        migrations.apply(db)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        lock = getattr(self._local, "writer_lock", None)
        if lock is not None:
            lock.close()
            self._local.writer_lock = None

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: BEGIN IMMEDIATE … COMMIT, rolled back on any exception."""
        conn = self.connect()
        with self._writer_turn():
            self._begin_write(conn)
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def grouped_write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(conn)`` in a write transaction shared with concurrent callers.

        Group commit: threads that write at the same time share one BEGIN … COMMIT, so one
        fsync makes all their reports durable instead of one fsync each. Each caller's work
        runs in its own SAVEPOINT: an exception rolls back only that caller's changes and is
        raised to it. Every call returns only after the shared COMMIT succeeded; if it fails,
        every caller in the group gets the error (nothing of theirs was acknowledged).

        One caller leads: it runs the group (its own work and everything queued) on its
        connection, then hands leadership to the next queued caller, so no thread stays busy
        for others under sustained load.
        """
        item = _GroupItem(work)
        with self._group_mutex:
            self._group_queue.append(item)
            lead = not self._group_leader
            self._group_leader = True
        if not lead:
            item.wake.wait()
        if not item.finished:  # leading: first caller, or promoted by the previous leader
            self._run_group()
        if item.error is not None:
            raise item.error
        return item.result  # type: ignore[no-any-return]

    def _run_group(self) -> None:
        with self._group_mutex:
            group, self._group_queue = self._group_queue, []
        conn = self.connect()
        turn = self._writer_turn()
        turn.__enter__()  # left in the finally clause, before the next leader is woken
        try:
            self._begin_write(conn)
            for number, item in enumerate(group):
                conn.execute(f"SAVEPOINT w{number}")
                try:
                    item.result = item.work(conn)
                    conn.execute(f"RELEASE w{number}")
                except Exception as error:  # this caller's problem only
                    conn.execute(f"ROLLBACK TO w{number}")
                    conn.execute(f"RELEASE w{number}")
                    item.error = error
            conn.execute("COMMIT")
        except BaseException as error:  # BEGIN or COMMIT failed: nothing here is durable
            if self._in_transaction(conn):
                conn.execute("ROLLBACK")
            for item in group:
                item.result, item.error = None, item.error or error
            if not isinstance(error, Exception):
                raise
        finally:
            turn.__exit__(None, None, None)
            with self._group_mutex:
                if self._group_queue:  # hand over to the next waiting caller
                    self._group_queue[0].wake.set()
                else:
                    self._group_leader = False
            for item in group:
                item.finished = True
                item.wake.set()

    # -- campaigns ----------------------------------------------------------------------------

    def insert_campaign(self, campaign: Campaign) -> tuple[StoredCampaign, bool]:
        """Store a new campaign. Returns (stored, created); an identical one is not an error.

        Raises ``FileExistsError`` when the name is taken by a different configuration:
        campaigns are immutable.
        """
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
            row = self.connect().execute("SELECT name FROM campaigns WHERE digest = ?",
                                         (digest,)).fetchone()
            if row is None:
                return None
            name = row[0]
            with self._campaigns_lock:
                self._names_by_digest[digest] = name
        return self.get_campaign(name)

    def retire_campaign(self, campaign_id: int, now: float) -> float:
        """Retire a campaign (once: a second call keeps the first time); returns when."""
        with self.write() as conn:
            conn.execute("UPDATE campaigns SET retired_at = ? WHERE id = ? AND retired_at IS NULL",
                         (now, campaign_id))
            retired_at = conn.execute("SELECT retired_at FROM campaigns WHERE id = ?",
                                      (campaign_id,)).fetchone()[0]
        return float(retired_at)

    def retired_at(self, campaign_id: int) -> float | None:
        """When the campaign was retired (None: it takes reports). Read from the database
        every time (a point query on a small table, once per campaign and request): a
        retirement holds at once on every collector sharing it; campaigns themselves never
        change, so they stay cached."""
        row = self.connect().execute("SELECT retired_at FROM campaigns WHERE id = ?",
                                     (campaign_id,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def get_campaign_by_id(self, campaign_id: int) -> StoredCampaign:
        """The campaign a stored report belongs to (reports reference existing campaigns)."""
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

    def existing_reports(self, conn: sqlite3.Connection, campaign_id: int,
                         report_ids: Sequence[bytes]) -> dict[bytes, tuple[int, str]]:
        """(time, payload) of the given IDs already stored for the campaign."""
        found: dict[bytes, tuple[int, str]] = {}
        for start in range(0, len(report_ids), 500):
            chunk = report_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT report_id, time, payload FROM reports "
                f"WHERE campaign_id = ? AND report_id IN ({marks})",
                (campaign_id, *chunk),
            )
            for report_id, time, payload in rows:
                found[bytes(report_id)] = (time, payload)
        return found

    def insert_reports(self, conn: sqlite3.Connection, campaign_id: int,
                       reports: Sequence[StoredReport]) -> None:
        """Append reports ordered by their random IDs: the order within a request is not
        kept (and the ID index is filled in order)."""
        conn.executemany(
            "INSERT INTO reports (campaign_id, report_id, time, payload) VALUES (?, ?, ?, ?)",
            report_rows(campaign_id, reports))

    def insert_new_reports(self, conn: sqlite3.Connection, campaign_id: int,
                           reports: Sequence[StoredReport]) -> bool:
        """Append reports if no ID among them is stored yet, in one statement; otherwise
        change nothing and return False (then the caller looks each one up)."""
        conn.execute("SAVEPOINT append_new")
        try:
            self.insert_reports(conn, campaign_id, reports)
        except self.retryable_errors:
            conn.execute("ROLLBACK TO append_new")
            conn.execute("RELEASE append_new")
            return False
        conn.execute("RELEASE append_new")
        return True

    # -- folding: the statistics job's reads and its one write ---------------------------------

    def unfolded(self, limit: int) -> FoldChunk:
        """The next chunk of at most ``limit`` reports past the watermark, in append order,
        with their payloads grouped by campaign and time bucket, read in one snapshot."""
        horizon = self._fold_horizon()
        conn = self.connect()
        self._begin_read(conn)
        try:
            watermark = conn.execute("SELECT seq FROM fold_state WHERE id = 1").fetchone()[0]
            sql = "SELECT seq FROM reports WHERE seq > ?"
            args: list[Any] = [watermark]
            if horizon is not None:
                sql += " AND seq <= ?"
                args.append(horizon)
            through, count = conn.execute(
                f"SELECT max(seq), count(*) FROM ({sql} ORDER BY seq LIMIT ?) AS chunk",
                (*args, limit)).fetchone()
            groups = [] if not count else self._payload_groups(conn, watermark, through)
        finally:
            conn.execute("COMMIT")
        return FoldChunk(int(watermark), int(through or watermark), int(count), groups)

    #: SQL that joins a group's payloads with commas (each one is a whole JSON value).
    _joined_payloads = "group_concat(payload)"

    def _payload_groups(self, conn: Any, after_seq: int, through_seq: int,
                        campaign_id: int | None = None) -> list[PayloadGroup]:
        # Grouped and joined by the database: no Python object per report (the fold's read
        # was half its time), and one JSON parse per group.
        where, args = _seq_range(after_seq, through_seq, campaign_id)
        sql = (f"SELECT campaign_id, time, count(*), {self._joined_payloads} FROM reports "
               f"WHERE {where} GROUP BY campaign_id, time")
        return [PayloadGroup(*row) for row in conn.execute(sql, args).fetchall()]

    def payload_groups(self, after_seq: int, through_seq: int,
                       campaign_id: int | None = None) -> list[PayloadGroup]:
        """The payloads of the reports with after_seq < seq <= through_seq (of one campaign
        if given), grouped by campaign and time bucket: what a fold over that range maps.

        A job that splits the append order into ranges reads each range with this from a
        connection of its own (a Dask task on another process or host), so no connection and
        no payload travels through the job's driver."""
        conn = self.connect()
        self._begin_read(conn)
        try:
            return self._payload_groups(conn, after_seq, through_seq, campaign_id)
        finally:
            conn.execute("COMMIT")

    def claim_fold(self, holder: str, now: float, lease: float) -> bool:
        """Take the fold lease unless another holder's is still running. The lease only
        saves duplicate work; ``commit_fold``'s watermark check is what keeps folds exact."""
        with self.write() as conn:
            cursor = conn.execute(
                "UPDATE fold_state SET holder = ?, lease_until = ? "
                "WHERE id = 1 AND (lease_until < ? OR holder = ?)",
                (holder, now + lease, now, holder))
            return cursor.rowcount == 1

    def release_fold(self, holder: str) -> None:
        with self.write() as conn:
            conn.execute("UPDATE fold_state SET lease_until = 0 WHERE id = 1 AND holder = ?",
                         (holder,))

    def commit_fold(self, expected: int, through: int,
                    partials: Mapping[tuple[int, int], tuple[int, np.ndarray]], now: float,
                    step: Callable[[str], None] = lambda _: None) -> bool:
        """Add partial statistics per (campaign id, time bucket) and move the watermark from
        ``expected`` to ``through``, in one transaction. Returns False, changing nothing, if
        the watermark is no longer ``expected`` (another fold got there first).

        ``step`` is called between the steps (fault injection in the tests)."""
        with self.write() as conn:
            step("begin")
            # Compare-and-set first: the row lock it takes serializes folds on any engine,
            # and a fold that lost the race changes nothing.
            moved = conn.execute(
                "UPDATE fold_state SET seq = ?, folded_at = ? WHERE id = 1 AND seq = ?",
                (through, now, expected)).rowcount
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
        """Whether any report is past the watermark (one index probe, not a count)."""
        row = self.connect().execute(
            "SELECT EXISTS (SELECT 1 FROM reports "
            "WHERE seq > (SELECT seq FROM fold_state WHERE id = 1))").fetchone()
        return bool(row[0])

    def fold_status(self) -> FoldStatus:
        row = self.connect().execute(
            "SELECT seq, folded_at, (SELECT count(*) FROM reports WHERE seq > fold_state.seq) "
            "FROM fold_state WHERE id = 1").fetchone()
        return FoldStatus(watermark=row[0], folded_at=row[1], unfolded=row[2])

    def window_snapshot(self, campaign_id: int, size: int, start: int | None,
                        end: int | None) -> WindowSnapshot:
        """The folded statistics of the buckets with start <= time < end (summed: O(buckets ×
        state size)), and the reports of those buckets past the watermark, in one snapshot:
        a fold committing meanwhile can neither double-count nor hide a report."""
        snapshot = self.bucket_snapshot(campaign_id, start, end)
        total = np.zeros(size, dtype=np.int64)
        n = 0
        for _, count, blob in snapshot.buckets:
            n += count
            total += state_array(blob)
        return WindowSnapshot(n, total, snapshot.tail, snapshot.folded_at)

    def bucket_snapshot(self, campaign_id: int, start: int | None,
                        end: int | None) -> BucketSnapshot:
        """``window_snapshot`` bucket by bucket: the folded (n, state) of each bucket with
        start <= time < end (O(buckets × state size)) and the window's unfolded reports, in
        one snapshot, so that a series' points add up to what one window's read gives."""
        conn = self.connect()
        self._begin_read(conn)
        try:
            watermark, folded_at = conn.execute(
                "SELECT seq, folded_at FROM fold_state WHERE id = 1").fetchone()
            sql, args = _in_window("SELECT time, n, state FROM aggregates WHERE campaign_id = ?",
                                   campaign_id, start, end)
            buckets = conn.execute(sql + " ORDER BY time", args).fetchall()
            sql, args = _in_window("SELECT time, payload FROM reports "
                                   "WHERE +campaign_id = ? AND seq > ?", campaign_id,
                                   start, end, watermark)
            tail = conn.execute(sql, args).fetchall()
        finally:
            conn.execute("COMMIT")
        return BucketSnapshot([(int(t), int(n), bytes(blob)) for t, n, blob in buckets],
                              [(int(t), payload) for t, payload in tail], folded_at)

    def time_span(self, campaign_id: int) -> tuple[int, int] | None:
        """The first and last time bucket holding a report of the campaign, folded or not
        (None: none), in one snapshot: a series' default window."""
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

    # -- retention ----------------------------------------------------------------------------

    # -- reads for recomputation, health and the shuffler's batches -----------------------------

    def report_counts(self, since: int | None = None) -> dict[int, dict[int, int]]:
        """Accepted reports per campaign id and time bucket (folded and not yet folded), for
        the buckets at or after ``since``: counts only, no statistics, in one snapshot."""
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

    def ping(self) -> None:
        """A trivial read: raises if the database cannot be read."""
        self.connect().execute("SELECT 1").fetchone()

    def folded_report_rows(self, campaign_id: int,
                           through: int) -> Iterator[tuple[int, str]]:
        """(time bucket, canonical payload) of a campaign's stored reports at or below the
        watermark ``through``, in time order, streamed."""
        yield from self.connect().execute(
            "SELECT time, payload FROM reports WHERE campaign_id = ? AND seq <= ? "
            "ORDER BY time", (campaign_id, through))

    def folded_statistics(self, campaign_id: int) -> FoldedStatistics:
        """A campaign's folded statistics per bucket, its retired counts per bucket and the
        watermark they correspond to, in one snapshot."""
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

    def record_shuffled_batch(self, conn: sqlite3.Connection, campaign_id: int,
                              new_reports_by_time: Mapping[int, int],
                              senders_by_time: Mapping[int, int] | None = None) -> None:
        """Add one shuffled batch to each time bucket it brought new reports to (inside the
        ingest transaction, so the record commits with the reports). ``senders_by_time``:
        the distinct admitted senders the shuffler vouched for among those new reports, per
        bucket (None: the batch came without a vouched count)."""
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

    def shuffled_totals(self, campaign_id: int, start: int | None, end: int | None,
                        ) -> tuple[int, int, int | None, int, int | None]:
        """(batches, reports, smallest batch, vouched batches, smallest vouched sender count)
        of the buckets with start <= time < end."""
        sql, args = _in_window(
            "SELECT coalesce(sum(batches), 0), coalesce(sum(reports), 0), min(smallest), "
            "coalesce(sum(vouched_batches), 0), min(smallest_senders) "
            "FROM shuffled_batches WHERE campaign_id = ?", campaign_id, start, end)
        batches, reports, smallest, vouched, senders = self.connect().execute(
            sql, args).fetchone()
        return (int(batches), int(reports), None if smallest is None else int(smallest),
                int(vouched), None if senders is None else int(senders))

    def drop_expired(self, now: float, margin: float, batch: int = 10_000) -> int:
        """Drop whole the folded reports of buckets older than their campaign's report
        expiry plus ``margin``; returns how many.

        Ingest refuses a report older than the expiry, so an expired report's ID protects
        nothing: a replay is refused as expired before any ID check. The margin covers the
        clock skew between replicas. The statistics the reports fed stay, and each bucket
        keeps the count of its dropped reports (``retired``) so that ``check-aggregates``
        knows it cannot be recomputed. Only reports at or below the watermark are dropped
        (unfolded ones have fed nothing yet), in transactions of at most ``batch`` rows so
        that ingest never waits long for the write lock.
        """
        dropped = 0
        for stored in self.list_campaigns():
            cutoff = now - stored.campaign.report_expiry - margin
            while True:
                with self.write() as conn:
                    watermark = conn.execute(
                        "SELECT seq FROM fold_state WHERE id = 1").fetchone()[0]
                    seqs = [row[0] for row in conn.execute(
                        "SELECT seq FROM reports WHERE campaign_id = ? AND time < ? "
                        "AND seq <= ? LIMIT ?", (stored.id, cutoff, watermark, batch))]
                    if not seqs:
                        break
                    marks = ",".join("?" * len(seqs))
                    # RETURNING: count what this transaction deleted, not what it selected
                    # (a concurrent gc may have deleted some first).
                    times = [row[0] for row in conn.execute(
                        f"DELETE FROM reports WHERE seq IN ({marks}) RETURNING time", seqs)]
                    counts = Counter(times)
                    conn.executemany(
                        "INSERT INTO retired (campaign_id, time, reports) VALUES (?, ?, ?) "
                        "ON CONFLICT (campaign_id, time) DO UPDATE SET "
                        "reports = retired.reports + excluded.reports",
                        [(stored.id, time, count) for time, count in counts.items()])
                    dropped += len(times)
        return dropped

    # -- reads for jobs that run elsewhere (chorus_collector.jobs.distributed) -----------------

    def report_range(self, after_seq: int, through_seq: int, campaign_id: int | None = None,
                     limit: int | None = None) -> list[tuple[int, int, int, str]]:
        """(seq, campaign id, time bucket, payload) of the reports with after_seq < seq <=
        through_seq (of one campaign if given; at most ``limit``), in append order: what an
        export writes, page by page."""
        where, args = _seq_range(after_seq, through_seq, campaign_id)
        sql = f"SELECT seq, campaign_id, time, payload FROM reports WHERE {where} ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return self.connect().execute(sql, args).fetchall()


def _seq_range(after_seq: int, through_seq: int,
               campaign_id: int | None) -> tuple[str, list[Any]]:
    """The WHERE clause and its arguments for after_seq < seq <= through_seq, of one campaign
    if given ("+campaign_id": walk the seq range, not the campaign's whole index)."""
    if campaign_id is None:
        return "seq > ? AND seq <= ?", [after_seq, through_seq]
    return "seq > ? AND seq <= ? AND +campaign_id = ?", [after_seq, through_seq, campaign_id]


def open_storage(database: str, *, synchronous: str = "FULL") -> Storage:
    """The storage a database setting names: a ``postgresql://`` URL, or a SQLite file."""
    from chorus_collector.storage.postgres import PostgresStorage, is_postgres_url

    if is_postgres_url(database):
        return PostgresStorage(database, synchronous=synchronous)
    return Storage(database, synchronous=synchronous)


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
