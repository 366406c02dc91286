"""The SQLite engine (the embedded default): its connections, schema and migrations, and
the statements it runs its own way; the SQL it shares with PostgreSQL is in
:mod:`chorus_collector.storage.sql`.

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
import functools
import json
import os
import sqlite3
import weakref
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from itertools import chain

from chorus_collector.storage.interface import Connection
from chorus_collector.storage.sql import SQLStorage
from chorus_collector.storage.sqlite_library import Migrations, sqlite_utils
from chorus_collector.storage.values import SchemaError, StoredReport, report_rows
from chorus_shared.campaign import campaign_from_spec, canonical_json

__all__ = ["SQLiteStorage", "migrations"]

#: SQLite's schema, one function per version (applied in order, recorded in the database).
migrations = Migrations("chorus")


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


@migrations()
def m007_lean_reports(db: sqlite_utils.Database) -> None:
    """Two B-trees per report instead of three and no counter row: a single report's commit
    wrote four pages (the table, the ID index, the time index and ``sqlite_sequence``, which
    AUTOINCREMENT rewrites on every insert) and writes two.

    The time index served only ``gc``, which now walks the append order instead. Without
    AUTOINCREMENT SQLite hands out one more than the highest seq in the table, so once gc
    deleted the newest rows (every one of them folded) a new report could land at or below
    the watermark and never be folded: wherever that is so, here and after each of gc's
    deletes (``drop_expired``), the watermark comes down to the highest seq left. Nothing
    above it was folded or is stored, so no report is counted twice or missed, and the next
    seq lands above it. The table is copied once, in seq order.
    """
    db.execute(
        """CREATE TABLE reports_m007 (
            seq INTEGER PRIMARY KEY,
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            report_id BLOB NOT NULL,
            time INTEGER NOT NULL,
            payload TEXT NOT NULL,
            UNIQUE (campaign_id, report_id)
        ) STRICT"""
    )
    db.execute("INSERT INTO reports_m007 (seq, campaign_id, report_id, time, payload) "
               "SELECT seq, campaign_id, report_id, time, payload FROM reports ORDER BY seq")
    db.execute("DROP TABLE reports")  # its time index and its sqlite_sequence row with it
    db.execute("ALTER TABLE reports_m007 RENAME TO reports")
    # The watermark to the highest seq left, as _WATERMARK_TO_TOP (before m011's moves).
    db.execute("UPDATE fold_state SET seq = (SELECT coalesce(max(seq), 0) FROM reports) "
               "WHERE id = 1 AND seq > (SELECT coalesce(max(seq), 0) FROM reports)")


@migrations()
def m008_annotations(db: sqlite_utils.Database) -> None:
    # Marks on the time axis ("v2.3 shipped"): one campaign's, or every campaign's (NULL).
    db.execute("""CREATE TABLE annotations (
        id INTEGER PRIMARY KEY,
        time INTEGER NOT NULL,
        text TEXT NOT NULL,
        campaign_id INTEGER REFERENCES campaigns(id),
        created_at REAL NOT NULL) STRICT""")
    db.execute("CREATE INDEX annotations_by_time ON annotations (time)")


@migrations()
def m009_alerts(db: sqlite_utils.Database) -> None:
    """Alert rules (``chorus_collector.alerts``): each rule, its values significant now, and
    its notifications, an outbox that deliverers claim one attempt at a time. The webhook URL
    and its signing secret are columns of their own, never part of the definition shown."""
    db.execute(
        """CREATE TABLE alert_rules (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            definition TEXT NOT NULL,
            webhook TEXT NOT NULL,
            secret TEXT,
            created_at REAL NOT NULL,
            evaluated_at REAL,
            last_end INTEGER NOT NULL DEFAULT 0,
            last_error TEXT
        ) STRICT"""
    )
    db.execute(
        """CREATE TABLE alert_state (
            rule_id INTEGER NOT NULL REFERENCES alert_rules(id),
            value TEXT NOT NULL,
            since REAL NOT NULL,
            PRIMARY KEY (rule_id, value)
        ) STRICT, WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE alert_firings (
            id INTEGER PRIMARY KEY,
            rule_id INTEGER NOT NULL REFERENCES alert_rules(id),
            event TEXT NOT NULL,
            key TEXT NOT NULL UNIQUE,
            created_at REAL NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL,
            claimed_until REAL NOT NULL DEFAULT 0,
            delivered_at REAL,
            last_error TEXT
        ) STRICT"""
    )
    db.execute("CREATE INDEX alert_firings_due ON alert_firings (status, next_attempt_at)")
    db.execute("CREATE INDEX alert_firings_by_rule ON alert_firings (rule_id, id)")


@migrations()
def m010_saved_work(db: sqlite_utils.Database) -> None:
    # The dashboard's saved work (storage/saved.py): candidate lists and page queries per
    # campaign, and boards of panels, each a campaign's section (and, optionally, a view).
    db.execute("""CREATE TABLE saved_lists (
        id INTEGER PRIMARY KEY,
        campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
        name TEXT NOT NULL,
        candidates TEXT NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (campaign_id, name)) STRICT""")
    db.execute("""CREATE TABLE saved_views (
        id INTEGER PRIMARY KEY,
        campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
        name TEXT NOT NULL,
        query TEXT NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (campaign_id, name)) STRICT""")
    db.execute("""CREATE TABLE boards (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL) STRICT""")
    db.execute("""CREATE TABLE board_panels (
        id INTEGER PRIMARY KEY,
        board_id INTEGER NOT NULL REFERENCES boards(id),
        campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
        section TEXT NOT NULL,
        view_id INTEGER REFERENCES saved_views(id)) STRICT""")
    db.execute("CREATE INDEX board_panels_by_board ON board_panels (board_id)")


@migrations()
def m011_watermark_moves(db: sqlite_utils.Database) -> None:
    # How many times the watermark has moved, for the fold's compare-and-set: gc lowers the
    # watermark to the highest seq left after deleting the newest reports (_WATERMARK_TO_TOP),
    # so its value alone can come back to one a stalled fold read, which then committed over
    # a fold of the same reports (counted twice; the next appends, seqs at or below the
    # watermark it set, never folded).
    db.execute("ALTER TABLE fold_state ADD COLUMN moves INTEGER NOT NULL DEFAULT 0")


#: The watermark down to the highest seq stored, if it is above: the next seq (one more than
#: the highest) then lands above it. Only after the newest reports were deleted, all folded.
#: A move as a fold's is (``moves``): a fold that read the watermark before cannot commit.
_WATERMARK_TO_TOP = ("UPDATE fold_state SET seq = (SELECT coalesce(max(seq), 0) FROM reports), "
                     "moves = moves + 1 "
                     "WHERE id = 1 AND seq > (SELECT coalesce(max(seq), 0) FROM reports)")


WAL_BACKSTOP_PAGES = 8192  # 32 MB of 4 KiB pages
ROWS_PER_INSERT = 100  # 400 bound values, far under SQLite's limit of 32,766


@functools.lru_cache(maxsize=ROWS_PER_INSERT)
def _insert_rows(rows: int) -> str:
    """An INSERT of ``rows`` reports (each a distinct text, which sqlite3 caches prepared)."""
    return ("INSERT INTO reports (campaign_id, report_id, time, payload) VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * rows))


@functools.lru_cache(maxsize=ROWS_PER_INSERT)
def _insert_live_rows(rows: int) -> str:
    """``_insert_rows``, but none if the campaign (the last parameter) is retired: one
    statement, so a single report's request reads the retirement without a query more."""
    return ("INSERT INTO reports (campaign_id, report_id, time, payload) SELECT * FROM (VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * rows) + ") WHERE NOT EXISTS (SELECT 1 FROM "
            "campaigns WHERE id = ? AND retired_at IS NOT NULL)")

# SQLite's primary result codes of an outage: BUSY, LOCKED, READONLY, IOERR, FULL, CANTOPEN.
_OUTAGE_CODES = frozenset({5, 6, 8, 10, 13, 14})


class _WriterLock:
    """An open lock file of one thread, closed with ``close`` or when the thread's storage
    state is dropped (a thread that ends)."""

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._finalizer = weakref.finalize(self, os.close, self.fd)

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


class SQLiteStorage(SQLStorage[sqlite3.Connection]):
    """One SQLite database; a connection per thread, opened lazily."""

    retryable_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)
    joined_payloads = "group_concat(payload)"

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

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        lock = getattr(self._local, "writer_lock", None)
        if lock is not None:
            lock.close()
            self._local.writer_lock = None

    def db(self) -> sqlite_utils.Database:
        """This thread's connection as a sqlite-utils Database (migrations; the shuffler's
        pool, a SQLite file of its own, runs its own on it)."""
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

    def maintain(self, now: float) -> None:
        """A checkpoint, off the requests' path.

        PASSIVE: it copies what no reader still needs and never waits for the write lock, so
        ingest goes on meanwhile. Without it, every commit past SQLite's default 4 MB of WAL
        checkpoints inside a request; and with writers in several processes that never
        pause, SQLite's own checkpoints seldom finish (the bare endpoint of the benchmark
        grew its WAL to 483 MB over 900,000 reports), which this one, run between rounds of
        writes, does.
        """
        del now
        self.connect().execute("PRAGMA wal_checkpoint(PASSIVE)")

    # -- transactions -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writer_turn(self) -> Iterator[None]:
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
            # A transaction that could not be ended closes the thread's connection and its
            # lock file with it (``close``), which gave the turn back; its descriptor number
            # may be another file's by now.
            if not lock.closed:
                fcntl.flock(lock.fd, fcntl.LOCK_UN)

    def _begin_write(self, conn: sqlite3.Connection) -> None:
        # IMMEDIATE: take the write lock at once, so writers queue instead of failing later.
        conn.execute("BEGIN IMMEDIATE")

    def _begin_read(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN")  # in WAL mode: one snapshot from the first read on

    def _fold_horizon(self) -> int | None:
        # One writer at a time commits SQLite's seqs in order, so every seq a reader sees
        # has all smaller ones committed.
        return None

    def _is_outage(self, error: BaseException) -> bool:
        # Locked past the busy timeout, a failing or full disk, a file that cannot be opened
        # or written: the database, not the request. Other errors (a missing table, a
        # malformed statement, a corrupt file) are bugs or damage, answered 500.
        code = getattr(error, "sqlite_errorcode", None)
        return isinstance(error, sqlite3.OperationalError) and code is not None \
            and code & 0xFF in _OUTAGE_CODES

    # -- reports ------------------------------------------------------------------------------

    def existing_reports(self, conn: Connection, campaign_id: int,
                         report_ids: Sequence[bytes]) -> dict[bytes, tuple[int, str]]:
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

    def insert_reports(self, conn: Connection, campaign_id: int,
                       reports: Sequence[StoredReport]) -> None:
        self._append_live(conn, campaign_id, reports, check_retired=False)

    def _append_live(self, conn: Connection, campaign_id: int,
                     reports: Sequence[StoredReport], check_retired: bool = True) -> bool:
        # Rows ordered by ID (the ID index is filled in order), ROWS_PER_INSERT to a
        # statement: an executemany, a statement per row, paid SQLite's per-statement work
        # per report (measured: 4.3 → 3.4 µs a report on a 1,000-report batch). The first
        # statement reads the retirement; the write lock, held until COMMIT, keeps it true.
        values = list(chain.from_iterable(report_rows(campaign_id, reports)))
        width = 4 * ROWS_PER_INSERT
        for start in range(0, len(values), width):
            part = values[start:start + width]
            if start == 0 and check_retired:
                if not conn.execute(_insert_live_rows(len(part) // 4),
                                    [*part, campaign_id]).rowcount:
                    return False
            else:
                conn.execute(_insert_rows(len(part) // 4), part)
        return True

    def _append_is_atomic(self, count: int) -> bool:
        # One statement: SQLite backs out a statement that fails, and nothing else.
        return count <= ROWS_PER_INSERT

    def stream_reports(self, campaign_id: int, through_seq: int,
                       batch: int) -> Generator[list[tuple[int, int, str]], None, None]:
        # One statement reads one snapshot until it is done. "+campaign_id": walk the seq
        # order (the rowid), filtering, rather than sort the campaign's index entries.
        cursor = self.connect().execute(
            "SELECT seq, time, payload FROM reports WHERE seq <= ? AND +campaign_id = ? "
            "ORDER BY seq", (through_seq, campaign_id))
        try:
            while rows := cursor.fetchmany(batch):
                yield rows
        finally:
            cursor.close()

    # -- retention ----------------------------------------------------------------------------

    def drop_expired(self, now: float, margin: float, batch: int = 10_000) -> int:
        """Row by row, in one walk of the append order (there is no time index since m007):
        each transaction looks at the next ``batch`` reports at or below the watermark and
        deletes the expired ones, counting them as retired per bucket, so ingest never waits
        long for the write lock and no row is read twice.

        SQLite gives a new row one more than the highest seq in the table (no AUTOINCREMENT
        since m007): where gc deletes the newest reports (all folded), the watermark comes
        down to the highest seq left in the same transaction, so that the next seq is above
        it. Nothing between was folded or stored, so nothing is counted twice or missed; a
        process's tail cache starts again when it sees the watermark go back (jobs/tail.py).
        """
        cutoffs = [(stored.id, now - stored.campaign.report_expiry - margin)
                   for stored in self.list_campaigns()]
        if not cutoffs:
            return 0
        # A campaign created meanwhile is in no WHEN: NULL, and none of its rows goes.
        expired = ("time < CASE campaign_id "
                   + " ".join("WHEN ? THEN ?" for _ in cutoffs) + " END")
        cutoff_args = [value for pair in cutoffs for value in pair]
        dropped, after = 0, -1
        while True:
            with self.write() as conn:
                watermark = conn.execute(
                    "SELECT seq FROM fold_state WHERE id = 1").fetchone()[0]
                through = conn.execute(
                    "SELECT max(seq) FROM (SELECT seq FROM reports WHERE seq > ? AND seq <= ? "
                    "ORDER BY seq LIMIT ?)", (after, watermark, batch)).fetchone()[0]
                if through is None:
                    break
                times = conn.execute(
                    f"DELETE FROM reports WHERE seq > ? AND seq <= ? AND {expired} "
                    "RETURNING campaign_id, time", (after, through, *cutoff_args)).fetchall()
                conn.executemany(
                    "INSERT INTO retired (campaign_id, time, reports) VALUES (?, ?, ?) "
                    "ON CONFLICT (campaign_id, time) DO UPDATE SET "
                    "reports = retired.reports + excluded.reports",
                    [(*key, count) for key, count in Counter(map(tuple, times)).items()])
                if times:
                    conn.execute(_WATERMARK_TO_TOP)
                dropped += len(times)
            after = through
        return dropped
