"""PostgreSQL storage (psycopg 3), chosen by a ``postgresql://`` database URL.

Several collector replicas share one database: report-ID uniqueness is the table's primary
key, acknowledgement is the commit of the request's transaction (grouped per process, as on
SQLite), and the fold job's compare-and-set on the watermark keeps folds exact whichever
replica runs them. The SQL it shares with SQLite is in :mod:`chorus_collector.storage.sql`;
this module holds what PostgreSQL does its own way:

* Reports are partitioned by day of their time bucket, so ``gc`` drops a day whose reports
  are all expired and folded as one table (``DROP TABLE``), not row by row; rows that land
  in no daily partition go to a default partition and are deleted row by row.
* Sequence numbers are taken at insert but committed in any order by concurrent
  transactions. Appending transactions hold a shared advisory lock; the fold job reads its
  horizon (the highest seq) under the exclusive lock, so every seq at or below it is
  committed and none can appear later below the watermark.
* Migrations run under an advisory lock: replicas starting together apply them once.

The primary key is (campaign_id, report_id, time), as a partitioned table's unique keys must
include the partition key: a retry, which repeats its report byte for byte, is caught by the
key even when two replicas insert it at once; ingest also looks an ID up in every partition
first, so the same ID with another time is refused as a conflict unless both arrive at the
same instant on two replicas (then both count, as two reports would).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import weakref
from collections import Counter
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any

from chorus_collector.storage.interface import Connection
from chorus_collector.storage.sql import SQLStorage
from chorus_collector.storage.values import SchemaError, StoredReport, report_rows

__all__ = ["PostgresStorage", "is_postgres_url"]

DAY = 86_400
PARTITIONS_AHEAD = 2  # days of partitions created before their first report
APPEND_LOCK = 0x43686F72  # advisory lock key ("Chor"): appends shared, the fold horizon excl.
MIGRATION_LOCK = APPEND_LOCK + 1

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
]


def _close_all(connections: list[Any]) -> None:
    for connection in connections:
        with contextlib.suppress(Exception):
            connection.close()


def is_postgres_url(database: str) -> bool:
    return database.startswith(("postgresql://", "postgres://"))


_PLACEHOLDER = re.compile(r"\?")


def _raw(conn: Connection) -> Any:
    """The psycopg connection under one of this engine's connections."""
    assert isinstance(conn, _Connection), conn
    return conn.raw


class _Connection:
    """A psycopg connection that speaks the storage's SQL: ``?`` placeholders, and the
    ``BEGIN`` variants the engine-neutral code issues."""

    def __init__(self, raw: Any, owner: PostgresStorage) -> None:
        self.raw = raw
        self.owner = owner  # the storage closes its connections when it goes: keep it

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self.raw.execute(_PLACEHOLDER.sub("%s", sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        cursor = self.raw.cursor()
        cursor.executemany(_PLACEHOLDER.sub("%s", sql), rows)
        return cursor

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self.raw.info.transaction_status != TransactionStatus.IDLE)

    def close(self) -> None:
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

        self.integrity_errors = (psycopg.errors.UniqueViolation,)
        # Two replicas appending overlapping IDs in different orders deadlock; PostgreSQL
        # aborts one statement, and ingest retries it.
        self.retryable_errors = (psycopg.errors.UniqueViolation,
                                 psycopg.errors.DeadlockDetected)
        self.lock_errors: tuple[type[Exception], ...] = (psycopg.errors.LockNotAvailable,)
        self._partitions: set[int] = set()
        self._partitions_lock = threading.Lock()
        # Closed when this storage goes, even in a garbage cycle (weakref callbacks run
        # before finalizers): a connection left to its own __del__ warns.
        self._raw_connections: list[Any] = []
        weakref.finalize(self, _close_all, self._raw_connections)

    def connect(self) -> _Connection:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.raw.closed:
            import psycopg

            # autocommit: transactions are opened by explicit BEGIN, as on SQLite.
            raw = psycopg.connect(self.path, autocommit=True, connect_timeout=10)
            # FULL: a commit returns after the WAL is flushed (synchronous_commit=on); NORMAL
            # lets PostgreSQL acknowledge before the flush, like SQLite's NORMAL.
            setting = "off" if self.synchronous == "NORMAL" else "on"
            raw.execute(f"SET synchronous_commit = {setting}")
            with self._partitions_lock:
                self._raw_connections[:] = [c for c in self._raw_connections if not c.closed]
                self._raw_connections.append(raw)
            conn = _Connection(raw, self)
            self._local.conn = conn
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
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock_shared(?)", (APPEND_LOCK,))

    def _begin_read(self, conn: _Connection) -> None:
        # One snapshot for every statement of the read, as SQLite's WAL read gives.
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def _fold_horizon(self) -> int | None:
        conn = self.connect()
        conn.execute("BEGIN")
        try:
            # Waits for the appending transactions in flight; holds new ones for a moment.
            conn.execute("SELECT pg_advisory_xact_lock(?)", (APPEND_LOCK,))
            horizon = conn.execute("SELECT coalesce(max(seq), 0) FROM reports").fetchone()[0]
        finally:
            conn.execute("COMMIT")
        return int(horizon)

    # -- schema and partitions ----------------------------------------------------------------

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
        self.ensure_partitions(time.time())

    def ensure_partitions(self, now: float, behind_days: int = 0) -> None:
        """Daily partitions from ``behind_days`` before ``now`` to two days ahead."""
        today = int(now) // DAY
        for day in range(today - behind_days, today + PARTITIONS_AHEAD + 1):
            if day in self._partitions:
                continue
            conn = self.connect()
            conn.execute("BEGIN")
            try:
                # Creating a partition locks the parent table briefly: never wait long.
                conn.execute("SET LOCAL lock_timeout = '2s'")
                conn.execute(f"CREATE TABLE IF NOT EXISTS reports_d{day} PARTITION OF reports "
                             f"FOR VALUES FROM ({day * DAY}) TO ({(day + 1) * DAY})")
                conn.execute("COMMIT")
            except Exception:
                # Rows of that day already sit in the default partition, or the lock was
                # busy: they stay where they are, and gc deletes them row by row.
                conn.execute("ROLLBACK")
                continue
            with self._partitions_lock:
                self._partitions.add(day)

    def existing_reports(self, conn: Connection, campaign_id: int,
                         report_ids: Sequence[bytes]) -> dict[bytes, tuple[int, str]]:
        # One array parameter, not an IN list of hundreds: planned once for every partition.
        rows = _raw(conn).execute(
            "SELECT report_id, time, payload FROM reports "
            "WHERE campaign_id = %s AND report_id = ANY(%s)", (campaign_id, list(report_ids)))
        return {bytes(report_id): (time, payload) for report_id, time, payload in rows}

    def insert_reports(self, conn: Connection, campaign_id: int,
                       reports: Sequence[StoredReport]) -> None:
        # COPY: one stream for the whole batch instead of a statement per report. A report ID
        # another replica inserted since the lookup fails the COPY with a unique violation,
        # which ingest answers by looking again (as for INSERT).
        # Ordered by the random IDs: the order within a request is not kept.
        with _raw(conn).cursor() as cursor, cursor.copy(
                "COPY reports (campaign_id, report_id, time, payload) FROM STDIN") as copy:
            for row in report_rows(campaign_id, reports):
                copy.write_row(row)

    def maintain(self, now: float) -> None:
        """Partitions ahead (the days to come)."""
        self.ensure_partitions(now)

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
        """Drop whole daily partitions whose reports are all folded and past their
        campaign's expiry plus ``margin``; then the generic row-by-row pass for the rest
        (the default partition, and days that still hold younger reports)."""
        dropped = self._drop_partitions(now, margin)
        return dropped + self._drop_expired_rows(now, margin, batch)

    def _drop_partitions(self, now: float, margin: float) -> int:
        expiry = {stored.id: stored.campaign.report_expiry for stored in self.list_campaigns()}
        dropped = 0
        for day, table in self._daily_partitions():
            if (day + 1) * DAY > now - margin:  # the day is not over its margin yet
                continue
            try:
                dropped += self._drop_partition(table, now, margin, expiry)
            except self.lock_errors:
                continue  # ingest held the table: the next gc drops it
            with self._partitions_lock:
                self._partitions.discard(day)
        return dropped

    def _drop_partition(self, table: str, now: float, margin: float,
                        expiry: dict[int, int]) -> int:
        with self.write() as conn:
            # Dropping a partition locks the parent table: never make ingest wait long.
            conn.execute("SET LOCAL lock_timeout = '2s'")
            watermark = conn.execute("SELECT seq FROM fold_state WHERE id = 1").fetchone()[0]
            groups = conn.execute(
                f"SELECT campaign_id, time, count(*), max(seq) FROM {table} "
                "GROUP BY campaign_id, time").fetchall()
            if not all(time < now - expiry.get(campaign_id, 0) - margin and top <= watermark
                       for campaign_id, time, _, top in groups):
                return 0  # younger or unfolded reports: the row-by-row pass takes the rest
            counts = Counter({(campaign_id, time): count
                              for campaign_id, time, count, _ in groups})
            conn.executemany(
                "INSERT INTO retired (campaign_id, time, reports) VALUES (?, ?, ?) "
                "ON CONFLICT (campaign_id, time) DO UPDATE SET "
                "reports = retired.reports + excluded.reports",
                [(c, t, n) for (c, t), n in counts.items()])
            conn.execute(f"DROP TABLE {table}")
            return sum(counts.values())

    def _daily_partitions(self) -> Iterator[tuple[int, str]]:
        rows = self.connect().execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'reports' "
            "AND p.relnamespace = current_schema()::regnamespace").fetchall()
        for (name,) in sorted(rows):
            if re.fullmatch(r"reports_d\d+", name):
                yield int(name.removeprefix("reports_d")), name
