"""PostgreSQL storage (psycopg 3), chosen by a ``postgresql://`` database URL.

Several collector replicas share one database: report-ID uniqueness is the reports table's
exclusion constraint on (campaign_id, report_id), acknowledgement is the commit of the request's
transaction (grouped per process, as on SQLite), and the fold job's compare-and-set on the
watermark keeps folds exact whichever replica runs them. The SQL it shares with SQLite is in
:mod:`chorus_collector.storage.sql`; this module holds what PostgreSQL does its own way:

* One table, not partitions: PostgreSQL has no index across partitions, so a table
  partitioned by day could only hold an ID unique within a day (the same ID with another
  time was stored twice), and checking the other days costs an index probe per partition
  and report (15 times the insert's own lookup, measured). The key is checked by the index
  itself, under any concurrency, as on SQLite.
* Compact (p009; 99–116 bytes per report, 142–146 before, of which the row is 68): the key is
  a hash exclusion constraint on ``int4send(campaign_id) || report_id`` (an entry holds the
  key's hash code, and a match is checked on the row: a second copy is an
  ``ExclusionViolation``), and the append order a BRIN on ``seq``, which finds a seq range's
  blocks but gives no order: pages of the append order are read as seq windows
  (``_seq_page``), not ``ORDER BY seq LIMIT``.
* ``gc`` deletes expired rows in runs of heap blocks and then vacuums, so the space they held
  is reused by the reports that follow and the files stay flat under a steady load; the BRIN
  ranges it deleted from are summarized again, to cover the seqs they hold now.
* Sequence numbers are taken at insert but committed in any order by concurrent
  transactions. Appending transactions hold a shared advisory lock from before their first
  insert to their end; the fold job reads its horizon under the exclusive lock, so no append
  is in flight: every seq the sequence handed out is committed or rolled back, and any later
  append takes a higher one. The horizon is the sequence's last value (``LAST_SEQ``; a
  ``max(seq)`` would read the whole table through a BRIN), so every seq at or below it is
  committed or never will be, and none can appear later below the watermark.
* Migrations run under an advisory lock: replicas starting together apply them once.
* A database that cannot be reached (stopped, restarting, refusing connections) is an
  outage: :meth:`PostgresStorage.unavailable` tells it from a bug, and a broken connection is
  replaced on next use.
"""

from __future__ import annotations

import contextlib
import re
import threading
import weakref
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any

from chorus_collector.storage.interface import Connection
from chorus_collector.storage.sql import SQLStorage
from chorus_collector.storage.values import FoldStatus, SchemaError, StoredReport, report_rows

__all__ = ["PostgresStorage", "is_postgres_url"]

BRIN_RANGE = 32  # heap blocks per range of the seq BRIN (p009)
SUMMARY_WAIT = "2s"  # the longest _summarize_seqs waits for a VACUUM's lock
GC_BLOCKS = 8_192  # heap blocks (64 MiB) gc deletes from in one transaction
SMALL_INSERT = 64  # up to this many reports: one INSERT (one round trip), else COPY
APPEND_LOCK = 0x43686F72  # advisory lock key ("Chor"): appends shared, the fold horizon excl.
MIGRATION_LOCK = APPEND_LOCK + 1
# A write transaction's start: appends hold the lock shared, from before their first seq.
WRITE_BEGIN = ("BEGIN", f"SELECT pg_advisory_xact_lock_shared({APPEND_LOCK})")
# The same lock taken inside an append statement that is a transaction of its own
# (``_Connection.execute_as_transaction``). A volatile function's CTE is evaluated once and
# never inlined, and the rows to insert are joined to it, so the lock is held before the
# first row takes its seq (the column's default, computed as the row is inserted).
APPEND_LOCK_CTE = f"lock AS (SELECT pg_advisory_xact_lock_shared({APPEND_LOCK}))"
# The last seq the sequence handed out (0 before the first: a fresh sequence's last_value is
# the first it will hand out). Read under the exclusive APPEND_LOCK it is the append horizon:
# see the module docstring. The sequence caches no values (CACHE 1, p001), so no session can
# hold seqs below it to hand out later.
LAST_SEQ = ("SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END "
            "FROM reports_seq")

MIGRATIONS: list[tuple[str, list[str]]] = [
    ("p001_initial", [
        """CREATE TABLE campaigns (
            id BIGSERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            digest TEXT NOT NULL UNIQUE,
            config TEXT NOT NULL)""",
        "CREATE SEQUENCE reports_seq",
        """CREATE TABLE reports (
            seq BIGINT NOT NULL DEFAULT nextval('reports_seq'),
            campaign_id BIGINT NOT NULL REFERENCES campaigns(id),
            report_id BYTEA NOT NULL,
            time BIGINT NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (campaign_id, report_id, time)
        ) PARTITION BY RANGE (time)""",
        "CREATE INDEX reports_by_seq ON reports (seq)",
        "CREATE INDEX reports_by_time ON reports (campaign_id, time)",
        "CREATE TABLE reports_default PARTITION OF reports DEFAULT",
        """CREATE TABLE aggregates (
            campaign_id BIGINT NOT NULL REFERENCES campaigns(id),
            time BIGINT NOT NULL,
            n BIGINT NOT NULL,
            state BYTEA NOT NULL,
            PRIMARY KEY (campaign_id, time))""",
        """CREATE TABLE shuffled_batches (
            campaign_id BIGINT NOT NULL REFERENCES campaigns(id),
            time BIGINT NOT NULL,
            batches BIGINT NOT NULL,
            reports BIGINT NOT NULL,
            smallest BIGINT NOT NULL,
            PRIMARY KEY (campaign_id, time))""",
        """CREATE TABLE retired (
            campaign_id BIGINT NOT NULL REFERENCES campaigns(id),
            time BIGINT NOT NULL,
            reports BIGINT NOT NULL,
            PRIMARY KEY (campaign_id, time))""",
        """CREATE TABLE fold_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            seq BIGINT NOT NULL,
            folded_at DOUBLE PRECISION,
            holder TEXT,
            lease_until DOUBLE PRECISION NOT NULL DEFAULT 0)""",
        "INSERT INTO fold_state (id, seq) VALUES (1, 0)",
    ]),
    ("p002_retired_campaigns", [
        "ALTER TABLE campaigns ADD COLUMN retired_at DOUBLE PRECISION",
    ]),
    # As SQLite's m006: batches with a sender count the shuffler vouched for.
    ("p003_vouched_senders", [
        "ALTER TABLE shuffled_batches ADD COLUMN vouched_batches BIGINT NOT NULL DEFAULT 0",
        "ALTER TABLE shuffled_batches ADD COLUMN smallest_senders BIGINT",
    ]),
    # One reports table keyed by (campaign_id, report_id), as SQLite's: the daily partitions
    # keyed the ID with its time, so an ID sent again with another time was stored twice.
    # Each ID keeps its first copy (the lowest seq); a later copy already folded into the
    # statistics is counted as retired (it cannot be recomputed), an unfolded one was never
    # counted and goes. Columns ordered and sized so a row has no padding (72 bytes with a
    # short payload, 80 before), and no foreign key: ingest resolves the campaign first and
    # campaigns are never deleted, while the key's check cost a lookup per row.
    ("p004_one_report_per_id", [
        """CREATE TABLE reports_p004 (
            seq BIGINT NOT NULL DEFAULT nextval('reports_seq'),
            time BIGINT NOT NULL,
            campaign_id INTEGER NOT NULL,
            report_id BYTEA NOT NULL,
            payload TEXT NOT NULL)""",
        """INSERT INTO retired (campaign_id, time, reports)
           SELECT campaign_id, time, count(*) FROM (
               SELECT campaign_id, time, seq, row_number() OVER (
                   PARTITION BY campaign_id, report_id ORDER BY seq) AS copy
               FROM reports) AS copies
           WHERE copy > 1 AND seq <= (SELECT seq FROM fold_state WHERE id = 1)
           GROUP BY campaign_id, time
           ON CONFLICT (campaign_id, time) DO UPDATE SET
               reports = retired.reports + excluded.reports""",
        """INSERT INTO reports_p004 (seq, time, campaign_id, report_id, payload)
           SELECT seq, time, campaign_id, report_id, payload FROM (
               SELECT DISTINCT ON (campaign_id, report_id) * FROM reports
               ORDER BY campaign_id, report_id, seq) AS first_copies
           ORDER BY seq""",
        "DROP TABLE reports",
        "ALTER TABLE reports_p004 RENAME TO reports",
        "ALTER TABLE reports ADD CONSTRAINT reports_pkey PRIMARY KEY (campaign_id, report_id)",
        "CREATE INDEX reports_by_seq ON reports (seq)",
        "ALTER SEQUENCE reports_seq OWNED BY reports.seq",
    ]),
    # As SQLite's m008: marks on the time axis, one campaign's or every campaign's (NULL).
    ("p005_annotations", [
        """CREATE TABLE annotations (
            id BIGSERIAL PRIMARY KEY,
            time BIGINT NOT NULL,
            text TEXT NOT NULL,
            campaign_id INTEGER REFERENCES campaigns(id),
            created_at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX annotations_by_time ON annotations (time)",
    ]),
    # As SQLite's m009: alert rules, their state and their notification outbox.
    ("p007_alerts", [
        """CREATE TABLE alert_rules (
            id BIGSERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            campaign_id BIGINT NOT NULL REFERENCES campaigns(id),
            definition TEXT NOT NULL,
            webhook TEXT NOT NULL,
            secret TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            evaluated_at DOUBLE PRECISION,
            last_end BIGINT NOT NULL DEFAULT 0,
            last_error TEXT)""",
        """CREATE TABLE alert_state (
            rule_id BIGINT NOT NULL REFERENCES alert_rules(id),
            value TEXT NOT NULL,
            since DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (rule_id, value))""",
        """CREATE TABLE alert_firings (
            id BIGSERIAL PRIMARY KEY,
            rule_id BIGINT NOT NULL REFERENCES alert_rules(id),
            event TEXT NOT NULL,
            key TEXT NOT NULL UNIQUE,
            created_at DOUBLE PRECISION NOT NULL,
            payload TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending',
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at DOUBLE PRECISION NOT NULL,
            claimed_until DOUBLE PRECISION NOT NULL DEFAULT 0,
            delivered_at DOUBLE PRECISION,
            last_error TEXT)""",
        "CREATE INDEX alert_firings_due ON alert_firings (status, next_attempt_at)",
        "CREATE INDEX alert_firings_by_rule ON alert_firings (rule_id, id)",
    ]),
    # As SQLite's m010: the dashboard's saved lists, views and boards.
    ("p008_saved_work", [
        """CREATE TABLE saved_lists (
            id BIGSERIAL PRIMARY KEY,
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            name TEXT NOT NULL,
            candidates TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            UNIQUE (campaign_id, name))""",
        """CREATE TABLE saved_views (
            id BIGSERIAL PRIMARY KEY,
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            name TEXT NOT NULL,
            query TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            UNIQUE (campaign_id, name))""",
        """CREATE TABLE boards (
            id BIGSERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE board_panels (
            id BIGSERIAL PRIMARY KEY,
            board_id BIGINT NOT NULL REFERENCES boards(id),
            campaign_id INTEGER NOT NULL REFERENCES campaigns(id),
            section TEXT NOT NULL,
            view_id BIGINT REFERENCES saved_views(id))""",
        "CREATE INDEX board_panels_by_board ON board_panels (board_id)",
    ]),
    # Fewer bytes per report (142–146 to 99–116, held 188 to 138 under a steady load): the ID's
    # uniqueness is a hash exclusion constraint, whose entries hold a 4-byte hash code (20
    # bytes with the line pointer, against the btree's 36 of key), rechecked against the
    # row, and the append order a BRIN (a few bytes per 32 heap blocks, against 22 per row):
    # rows are appended in seq order, so each block range holds a narrow run of seqs.
    # minmax-multi (PostgreSQL 14 and later), not minmax: gc's freed space is refilled by new
    # reports beside folded ones, and a range summarized by one interval then spanned every
    # day between (a page of a steady load's tail read 1,220 blocks for its 45, 6 times the
    # btree's time); intervals of its own keep the old and the new runs apart. The rows stay
    # where they are; the key's expression is the one ``existing_reports`` probes.
    ("p009_compact_reports", [
        "ALTER TABLE reports DROP CONSTRAINT reports_pkey",
        """ALTER TABLE reports ADD CONSTRAINT reports_key
           EXCLUDE USING hash ((int4send(campaign_id) || report_id) WITH =)
           WITH (fillfactor = 100)""",
        "DROP INDEX reports_by_seq",
        """CREATE INDEX reports_by_seq ON reports USING brin (seq int8_minmax_multi_ops)
           WITH (pages_per_range = 32, autosummarize = on)""",
    ]),
    # As SQLite's m011: the fold's compare-and-set also on how many times the watermark
    # moved (PostgreSQL never lowers it, but the engines share the fold's SQL).
    ("p010_watermark_moves", [
        "ALTER TABLE fold_state ADD COLUMN moves BIGINT NOT NULL DEFAULT 0",
    ]),
]


def _campaign_key(campaign_id: int) -> bytes:
    """``int4send(campaign_id)``: the first bytes of a report's key (p009)."""
    return campaign_id.to_bytes(4, "big", signed=True)


def _close_all(connections: list[Any]) -> None:
    for connection in connections:
        with contextlib.suppress(Exception):
            connection.close()


def is_postgres_url(database: str) -> bool:
    return database.startswith(("postgresql://", "postgres://"))


_PLACEHOLDER = re.compile(r"\?")


def _raw(conn: Connection) -> Any:
    """The psycopg connection under one of this engine's connections, with every statement
    it was given sent."""
    assert isinstance(conn, _Connection), conn
    conn.flush()
    return conn.raw


_DEFERRED = ("SAVEPOINT ", "RELEASE ")


class _Connection:
    """A psycopg connection that speaks the storage's SQL: ``?`` placeholders, and the
    ``BEGIN`` variants the engine-neutral code issues.

    ``SAVEPOINT`` and ``RELEASE`` (and a write's ``BEGIN``, ``defer``) wait and go with the
    next statement, in one pipeline: a single report's request took 8 round trips to the
    server, each costing more than the insert itself, and takes 2 so. Nothing is lost by
    waiting: none of them answers anything, and a statement that fails after them fails
    where it did.
    """

    def __init__(self, raw: Any, owner: PostgresStorage) -> None:
        self.raw = raw
        self.owner = owner  # the storage closes its connections when it goes: keep it
        self._pending: list[str] = []

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        if not args and sql.startswith(_DEFERRED):
            self._pending.append(sql)
            return None
        if sql in ("ROLLBACK", "COMMIT") and self.interrupted:
            # An exception raised between sending a statement and reading its answer (a
            # signal handler's SystemExit, Ctrl-C's KeyboardInterrupt) left the protocol
            # mid-command, so only such an exception, unwinding through an ``except`` or a
            # ``finally`` that ends the transaction, gets here. A statement sent now fails
            # ("another command is already in progress") and its error replaced the one
            # unwinding: `chorus aggregate` exited 1 on SIGTERM mid-fold instead of 143. The
            # connection goes instead: the server rolls its transaction back (a COMMIT here
            # commits nothing), and the next ``connect`` opens a fresh one.
            self._pending.clear()
            self.raw.close()
            return None
        if sql == "ROLLBACK":  # the whole transaction goes: its savepoints do not matter
            self._pending.clear()
            if not self.in_transaction:  # its BEGIN was never sent
                return None
        sql = _PLACEHOLDER.sub("%s", sql)
        if not self._pending:
            return self.raw.execute(sql, tuple(args))
        pending, self._pending = self._pending, []
        if not args:  # one simple query; its cursor moved on to the last statement's result
            cursor = self.raw.execute("; ".join([*pending, sql]))
            for _ in pending:
                cursor.nextset()
            return cursor
        with self.raw.pipeline():
            for statement in pending:
                self.raw.execute(statement)
            cursor = self.raw.execute(sql, tuple(args))
        return cursor

    def execute_as_transaction(self, sql: str, args: Sequence[Any]) -> Any:
        """Run ``sql`` as a transaction of its own, in place of the write's deferred start
        (``WRITE_BEGIN``), which must be all that waits: ``sql`` takes the append lock
        itself. The connection is in autocommit, so the server commits the statement before
        it answers (the WAL flushed, as a COMMIT's); if it fails, nothing of it is durable
        and no transaction is left open. One statement with one answer: the BEGIN, the lock,
        the statement and the COMMIT in a pipeline cost four answers in the server and
        psycopg's pipeline machinery here, about a tenth of a single report's CPU
        (``docs/benchmarks.md``)."""
        if self._pending != list(WRITE_BEGIN):
            raise RuntimeError(f"a transaction of its own after {self._pending!r}")
        self._pending.clear()
        return self.raw.execute(_PLACEHOLDER.sub("%s", sql), tuple(args))

    def defer(self, *statements: str) -> None:
        """Send these (without parameters) with the next statement, in its round trip."""
        self._pending.extend(statements)

    def flush(self) -> None:
        """Send the statements waiting for the next one."""
        if self._pending:
            pending, self._pending = self._pending, []
            self.raw.execute("; ".join(pending))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        self.flush()
        cursor = self.raw.cursor()
        cursor.executemany(_PLACEHOLDER.sub("%s", sql), rows)
        return cursor

    @property
    def interrupted(self) -> bool:
        """Whether a statement was sent and its answer never read (libpq's "active")."""
        from psycopg.pq import TransactionStatus

        return bool(self.raw.info.transaction_status == TransactionStatus.ACTIVE)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        # A BEGIN still waiting to be sent counts: a ROLLBACK then drops it.
        return bool(self._pending) or bool(
            self.raw.info.transaction_status != TransactionStatus.IDLE)

    def close(self) -> None:
        self._pending.clear()
        self.raw.close()

    def __del__(self) -> None:
        # A thread's connection goes with its thread-local: close it, quietly.
        with contextlib.suppress(Exception):
            self.raw.close()


class PostgresStorage(SQLStorage["_Connection"]):
    """One PostgreSQL database; a connection per thread, opened lazily."""

    def __init__(self, url: str, *, synchronous: str = "FULL") -> None:
        super().__init__(url, synchronous=synchronous)
        import psycopg

        # Two replicas appending overlapping IDs in different orders deadlock; PostgreSQL
        # aborts one statement, and ingest retries it.
        # The ID's key is an exclusion constraint (p009): a second copy is an exclusion
        # violation; UniqueViolation stays for a database not migrated yet.
        self.retryable_errors = (psycopg.errors.ExclusionViolation,
                                 psycopg.errors.UniqueViolation,
                                 psycopg.errors.DeadlockDetected)
        self._settled = 0  # the highest append horizon found yet (_settled_horizon)
        self._summarized_blocks = 0  # the heap's size when _summarize_seqs last summarized
        self._connections_lock = threading.Lock()
        # Closed when this storage goes, even in a garbage cycle (weakref callbacks run
        # before finalizers): a connection left to its own __del__ warns.
        self._raw_connections: list[Any] = []
        weakref.finalize(self, _close_all, self._raw_connections)

    def connect(self) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.raw.closed:
            import psycopg

            # autocommit: transactions are opened by explicit BEGIN, as on SQLite.
            # A connection the server dropped (an outage, a restart) is replaced here.
            raw = psycopg.connect(self.path, autocommit=True, connect_timeout=10)
            # FULL: a commit returns after the WAL is flushed (synchronous_commit=on); NORMAL
            # lets PostgreSQL acknowledge before the flush, like SQLite's NORMAL.
            setting = "off" if self.synchronous == "NORMAL" else "on"
            raw.execute(f"SET synchronous_commit = {setting}")
            with self._connections_lock:
                self._raw_connections[:] = [c for c in self._raw_connections if not c.closed]
                self._raw_connections.append(raw)
            conn = _Connection(raw, self)
            self._local.conn = conn
            self.outage.up()
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    joined_payloads = "string_agg(payload, ',')"

    def _writer_turn(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # PostgreSQL's writers do not take turns

    def _begin_write(self, conn: _Connection) -> None:
        # Sent with the transaction's first statement, in its round trip (a single report's
        # request took four round trips: the retirement, these, the insert, COMMIT). A group
        # of single reports sends neither: its one statement is the transaction and takes
        # the lock itself (``_append_together``'s ``commit``).
        conn.defer(*WRITE_BEGIN)

    def _begin_read(self, conn: _Connection) -> None:
        # One snapshot for every statement of the read, as SQLite's WAL read gives. No
        # sequential scan: a read of a seq range must go through the BRIN, which the planner
        # prices by the correlation of seq with the rows' places, low before the first
        # ANALYZE and once gc's freed space is refilled by new seqs (each page of a tail of
        # 10⁶ reports read the whole table: 46 s instead of 2). Nor parallel workers: a page
        # reads a few block ranges, and the planner, which guesses a range's rows before the
        # first ANALYZE, started two per page (85 ms each, to read 64 blocks). Nor JIT: a
        # disabled sequential scan is priced at 10¹⁰, past every JIT threshold, so each read
        # of a small table (the sequence) was compiled first: 30–110 ms for a
        # statement that runs in 0.05 (a window comparison 6 s → 230 s). Sent with the read's
        # first statement, in its round trip.
        conn.defer("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                   "SET LOCAL enable_seqscan = off",
                   "SET LOCAL max_parallel_workers_per_gather = 0",
                   "SET LOCAL jit = off")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """The statements of this thread's connection in one read transaction."""
        conn = self.connect()
        self._begin_read(conn)
        try:
            yield
        finally:
            conn.execute("COMMIT")

    def any_unfolded(self) -> bool:
        with self._reading():  # through the BRIN (_begin_read)
            return super().any_unfolded()

    def fold_status(self) -> FoldStatus:
        with self._reading():  # through the BRIN (_begin_read)
            return super().fold_status()

    def _summarize_seqs(self, conn: _Connection) -> None:
        """Summarize the seq BRIN's block ranges that have no summary yet (the ones appended
        to since the last call, the last one even if partly filled: later appends to it widen
        its summary): a range without one is read whole by every query of a seq range, and
        the newest, the unfolded tail, is what the fold and the tail's queries read.

        Only when the heap has grown into a block range this process has not summarized (a
        range summarized while partly filled stays summarized: appends widen its summary).
        It waits for the lock a ``VACUUM`` holds for at most ``SUMMARY_WAIT``: past the
        server's ``deadlock_timeout`` (1 s by default) PostgreSQL cancels an autovacuum in
        the way (one often runs on a table that is appended to, and without summaries a
        query over 10⁶ unfolded reports took 44 s instead of 2), while gc's ``VACUUM`` is not
        waited for: the ranges stay readable, only slower, until the next call."""
        import psycopg

        blocks = int(conn.execute(
            "SELECT pg_relation_size('reports') / current_setting('block_size')::bigint"
        ).fetchone()[0])
        if -(-blocks // BRIN_RANGE) <= -(-self._summarized_blocks // BRIN_RANGE):
            return
        conn.execute("BEGIN")
        try:
            conn.execute(f"SET LOCAL lock_timeout = '{SUMMARY_WAIT}'")
            conn.execute("SELECT brin_summarize_new_values('reports_by_seq')")
        except psycopg.errors.LockNotAvailable:
            conn.execute("ROLLBACK")
            return
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._summarized_blocks = max(self._summarized_blocks, blocks)

    def _fold_horizon(self) -> int | None:
        conn = self.connect()
        self._summarize_seqs(conn)
        conn.execute("BEGIN")
        try:
            # Waits for the appending transactions in flight; holds new ones for a moment.
            conn.execute("SELECT pg_advisory_xact_lock(?)", (APPEND_LOCK,))
            horizon = conn.execute(LAST_SEQ).fetchone()[0]
        finally:
            conn.execute("COMMIT")
        self._settled = max(self._settled, int(horizon))
        return int(horizon)

    def _settled_horizon(self) -> int:
        # A query does not wait for the appends in flight (nor hold new ones behind it): it
        # takes the exclusive lock only if it is free at once, and otherwise the last horizon
        # this process found (a fold step's, every FOLD_INTERVAL): what is settled stays so.
        conn = self.connect()
        self._summarize_seqs(conn)
        conn.execute("BEGIN")
        try:
            if conn.execute("SELECT pg_try_advisory_xact_lock(?)",
                            (APPEND_LOCK,)).fetchone()[0]:
                horizon = conn.execute(LAST_SEQ).fetchone()[0]
                self._settled = max(self._settled, int(horizon))
        finally:
            conn.execute("COMMIT")
        return self._settled

    # -- schema ------------------------------------------------------------------------------

    def migrate(self) -> None:
        conn = self.connect()
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS chorus_migrations ("
                         "name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            applied = {row[0] for row in conn.execute("SELECT name FROM chorus_migrations")}
            known = {name for name, _ in MIGRATIONS}
            unknown = sorted(applied - known)
            if unknown:
                raise SchemaError(
                    f"the database has schema migrations this version of Chorus does not "
                    f"know ({', '.join(unknown)}); it was written by a newer version. "
                    "Refusing to start.")
            for name, statements in MIGRATIONS:
                if name in applied:
                    continue
                for statement in statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO chorus_migrations (name) VALUES (?)", (name,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def maintain(self, now: float) -> None:
        """Nothing: autovacuum keeps the tables, and ``gc`` vacuums after it deletes."""
        del now

    # -- reports ------------------------------------------------------------------------------

    def existing_reports(self, conn: Connection, campaign_id: int,
                         report_ids: Sequence[bytes]) -> dict[bytes, tuple[int, str]]:
        # One array parameter, not an IN list of hundreds: one plan for any batch. The keys
        # are the exclusion constraint's expression, so that its hash index is probed; the
        # campaign is checked again on the rows found.
        prefix = _campaign_key(campaign_id)
        rows = conn.execute(
            "SELECT report_id, time, payload FROM reports "
            "WHERE (int4send(campaign_id) || report_id) = ANY(?::bytea[]) AND campaign_id = ?",
            ([prefix + report_id for report_id in report_ids], campaign_id))
        return {bytes(report_id): (time, payload) for report_id, time, payload in rows}

    def insert_reports(self, conn: Connection, campaign_id: int,
                       reports: Sequence[StoredReport]) -> None:
        # An ID stored before, or inserted by another replica meanwhile, fails the statement
        # with a unique violation (after waiting for that replica's commit), which ingest
        # answers by looking again. Ordered by the random IDs: the order within a request is
        # not kept.
        if len(reports) <= SMALL_INSERT:
            # One statement with arrays: a COPY takes a round trip more, which is most of a
            # single report's cost.
            ordered = sorted(reports)
            conn.execute(
                "INSERT INTO reports (campaign_id, report_id, time, payload) "
                "SELECT ?, * FROM unnest(?::bytea[], ?::bigint[], ?::text[])",
                (campaign_id, [r.report_id for r in ordered], [r.time for r in ordered],
                 [r.payload_json for r in ordered]))
            return
        # COPY: one stream for the whole batch instead of a statement per report.
        with _raw(conn).cursor() as cursor, cursor.copy(
                "COPY reports (campaign_id, report_id, time, payload) FROM STDIN") as copy:
            for row in report_rows(campaign_id, reports):
                copy.write_row(row)

    def _append_live(self, conn: Connection, campaign_id: int,
                     reports: Sequence[StoredReport]) -> bool:
        if len(reports) <= SMALL_INSERT:
            # The retirement read in the INSERT itself: a query of its own was a round trip
            # more per request.
            ordered = sorted(reports)
            cursor = conn.execute(
                "INSERT INTO reports (campaign_id, report_id, time, payload) "
                "SELECT ?, * FROM unnest(?::bytea[], ?::bigint[], ?::text[]) "
                "WHERE NOT EXISTS (SELECT 1 FROM campaigns WHERE id = ? "
                "AND retired_at IS NOT NULL)",
                (campaign_id, [r.report_id for r in ordered], [r.time for r in ordered],
                 [r.payload_json for r in ordered], campaign_id))
            return bool(cursor.rowcount)
        # A COPY cannot be conditional: one statement first, over the whole batch.
        row = conn.execute("SELECT retired_at FROM campaigns WHERE id = ?",
                           (campaign_id,)).fetchone()
        if row is not None and row[0] is not None:
            return False
        self.insert_reports(conn, campaign_id, reports)
        return True

    # A group commit's single reports go in one statement: a statement each cost a round trip
    # to the server each, which under load waits for the server's process to be scheduled.
    combines_appends = True

    def _append_together(self, conn: _Connection, appends: list[tuple[int, StoredReport]], *,
                         commit: bool = False) -> list[bool | None]:
        # Inserted in key order, as every append here: two replicas never wait for each
        # other's keys in opposite orders. ON CONFLICT DO NOTHING: an ID stored before, or by
        # another replica meanwhile (waited for), is skipped rather than failing the others.
        # With ``commit``, the statement is the transaction (it takes the append lock in
        # APPEND_LOCK_CTE); without, it runs in the write transaction, which holds it
        # already: taken again, a lock held is only counted.
        run = conn.execute_as_transaction if commit else conn.execute
        if len(appends) == 1:
            # One report (a request alone in its group): scalars, not arrays; a third of the
            # arrays' CPU on both sides of the connection.
            campaign_id, report = appends[0]
            added = run(
                f"WITH {APPEND_LOCK_CTE} "
                "INSERT INTO reports (campaign_id, report_id, time, payload) "
                "SELECT id, ?, ?, ? FROM campaigns, lock WHERE id = ? AND retired_at IS NULL "
                "ON CONFLICT DO NOTHING RETURNING campaign_id, report_id",
                (report.report_id, report.time, report.payload_json, campaign_id)).fetchall()
        else:
            order = sorted(appends, key=lambda append: (append[0], append[1].report_id))
            added = run(
                f"WITH {APPEND_LOCK_CTE} "
                "INSERT INTO reports (campaign_id, report_id, time, payload) "
                "SELECT n.campaign_id, n.report_id, n.time, n.payload FROM lock, "
                "  unnest(?::integer[], ?::bytea[], ?::bigint[], ?::text[]) WITH ORDINALITY "
                "  AS n (campaign_id, report_id, time, payload, item) "
                "JOIN campaigns c ON c.id = n.campaign_id AND c.retired_at IS NULL "
                "ORDER BY n.item ON CONFLICT DO NOTHING RETURNING campaign_id, report_id",
                ([c for c, _ in order], [r.report_id for _, r in order],
                 [r.time for _, r in order], [r.payload_json for _, r in order])).fetchall()
        # Only the insert, returning what it appended: a report it skipped (its ID stored, or
        # its campaign retired, both rare) takes a second look, after the statement.
        # Retirement is final: a campaign retired now was retired at the insert, or retired
        # after it, and so after the report's ID was found stored (it is answered as
        # retired then, and was acknowledged when it was stored).
        appended = {(campaign_id, bytes(report_id)) for campaign_id, report_id in added}
        skipped = sorted({c for c, r in appends if (c, r.report_id) not in appended})
        live = {row[0] for row in conn.execute(
            "SELECT id FROM campaigns WHERE id = ANY(?::integer[]) AND retired_at IS NULL",
            (skipped,))} if skipped else set()
        return [True if (c, r.report_id) in appended else (False if c in live else None)
                for c, r in appends]

    # -- the append order: a BRIN, which finds seq ranges but gives no order -----------------

    def _seq_page(self, conn: _Connection, after: int, through: int | None, limit: int,
                  campaign_id: int | None = None) -> tuple[int, int] | None:
        # ORDER BY seq LIMIT would read and sort everything past ``after`` for every page
        # (the BRIN finds the rows, not their order). The same page is read in seq windows
        # instead: one as wide as a page cannot hold more reports than a page (seqs are
        # distinct); after one that did not fill it (a gap in the seqs, another campaign's
        # run), one twice as wide; one that holds more than the page still needs gives its
        # first ones by sorting itself.
        if through is None:  # any committed seq: none is past the last the sequence gave
            through = int(conn.execute(LAST_SEQ).fetchone()[0])
        where = "seq > ? AND seq <= ?" + ("" if campaign_id is None else " AND +campaign_id = ?")
        more = () if campaign_id is None else (campaign_id,)
        start, width, last, taken = after, limit, after, 0
        while start < through and taken < limit:
            end = min(start + width, through)
            high, count = conn.execute(f"SELECT max(seq), count(*) FROM reports WHERE {where}",
                                       (start, end, *more)).fetchone()
            if count > limit - taken:
                high, count = conn.execute(
                    f"SELECT max(seq), count(*) FROM (SELECT seq FROM reports WHERE {where} "
                    "ORDER BY seq LIMIT ?) AS page", (start, end, *more, limit - taken)
                ).fetchone()
            if count:
                last, taken = int(high), taken + int(count)
            start, width = end, width * 2
        return (last, taken) if taken else None

    def report_range(self, after_seq: int, through_seq: int, campaign_id: int | None = None,
                     limit: int | None = None) -> list[tuple[int, int, int, str]]:
        if limit is None:
            return super().report_range(after_seq, through_seq, campaign_id)
        conn = self.connect()
        self._begin_read(conn)
        try:
            page = self._seq_page(conn, after_seq, through_seq, limit, campaign_id)
            if page is None:
                return []
            where = "seq > ? AND seq <= ?" + (
                "" if campaign_id is None else " AND +campaign_id = ?")
            args = (after_seq, page[0]) + (() if campaign_id is None else (campaign_id,))
            return conn.execute(  # type: ignore[no-any-return]
                f"SELECT seq, campaign_id, time, payload FROM reports WHERE {where} "
                "ORDER BY seq", args).fetchall()
        finally:
            conn.execute("COMMIT")

    # -- retention ----------------------------------------------------------------------------

    def stream_reports(self, campaign_id: int, through_seq: int,
                       batch: int) -> Generator[list[tuple[int, int, str]], None, None]:
        # A server-side cursor, in a transaction of its own: one query planned once, read
        # as it goes (paging with LIMIT merged the partitions' seq indexes again per page).
        raw = _raw(self.connect())
        with raw.transaction(), raw.cursor(name="chorus_stream_reports") as cursor:
            cursor.execute("SELECT seq, time, payload FROM reports WHERE seq <= %s "
                           "AND campaign_id = %s ORDER BY seq", (through_seq, campaign_id))
            while rows := cursor.fetchmany(batch):
                yield rows

    def drop_expired(self, now: float, margin: float, batch: int = 10_000) -> int:
        """Row by row, as SQLite, but in one pass over the table: each transaction deletes the
        expired folded reports of every campaign within a run of heap blocks (``GC_BLOCKS``),
        so no transaction is long and no row is read twice; then ``VACUUM``, so the space is
        reused by the next reports instead of growing the files.

        Deleting takes no advisory lock: it hands out no seq, so appends and folds go on.
        """
        del batch  # bounded by heap blocks instead
        cutoffs = [(stored.id, int(now - stored.campaign.report_expiry - margin))
                   for stored in self.list_campaigns()]
        if not cutoffs:
            return 0
        conn = self.connect()
        blocks = int(conn.execute(
            "SELECT pg_relation_size('reports') / current_setting('block_size')::bigint"
        ).fetchone()[0])
        values = ", ".join("(?::integer, ?::bigint)" for _ in cutoffs)
        args = [value for pair in cutoffs for value in pair]
        dropped = 0
        ranges: set[int] = set()  # the BRIN's block ranges rows were deleted from
        for start in range(0, blocks, GC_BLOCKS):
            # The heap's tail grows meanwhile: rows past the last run are new, not expired.
            count, emptied = conn.execute(
                "WITH expiry (campaign_id, cutoff) AS (VALUES " + values + "), "
                "gone AS (DELETE FROM reports r USING expiry e "
                "  WHERE r.ctid >= ?::tid AND r.ctid < ?::tid "
                "  AND +r.campaign_id = e.campaign_id AND r.time < e.cutoff "
                "  AND r.seq <= (SELECT seq FROM fold_state WHERE id = 1) "
                "  RETURNING r.campaign_id, r.time, r.ctid), "
                "counted AS (SELECT campaign_id, time, count(*) AS n FROM gone "
                "  GROUP BY campaign_id, time), "
                "kept AS (INSERT INTO retired (campaign_id, time, reports) "
                "  SELECT campaign_id, time, n FROM counted "
                "  ON CONFLICT (campaign_id, time) DO UPDATE SET "
                "  reports = retired.reports + excluded.reports) "
                "SELECT coalesce(sum(n), 0), (SELECT array_agg(DISTINCT "
                "  (ctid::text::point)[0]::bigint / ?) FROM gone) FROM counted",
                (*args, f"({start},0)", f"({start + GC_BLOCKS},0)", BRIN_RANGE)).fetchone()
            dropped += int(count)
            ranges.update(emptied or ())
        if dropped:
            conn.execute("VACUUM (ANALYZE) reports")
            # A BRIN range's summary only widens: the space freed here is filled by new
            # reports, and the range would cover both the old seqs and the new ones, read by
            # every page of the tail. Summarized again, it covers what it holds now.
            for number in sorted(ranges):
                conn.execute("SELECT brin_desummarize_range('reports_by_seq', ?)",
                             (number * BRIN_RANGE,))
            conn.execute("SELECT brin_summarize_new_values('reports_by_seq')")
        return dropped

    # -- outages ------------------------------------------------------------------------------

    def _is_outage(self, error: BaseException) -> bool:
        import psycopg

        # OperationalError: the server cannot be reached, shut down, restarts, or dropped the
        # connection; never a mistake in a statement (those are ProgrammingError and kin).
        return isinstance(error, psycopg.OperationalError)
