"""The shuffler's pool: reports waiting for a batch, in their own SQLite file.

What is stored is only what the collector will receive anyway: per report its campaign digest,
random report ID, truncated time bucket and perturbed payload, plus the random ID of the
batch it was claimed for (NULL until then). Nothing about the sender: no address, no headers,
no arrival time, and no arrival order either: the table is ``WITHOUT ROWID`` and keyed by
(digest, report ID), so rows sit in the order of their random IDs.

Durability: WAL, ``synchronous=FULL`` and every write in a ``BEGIN IMMEDIATE`` transaction
(through the collector's :class:`~chorus_collector.storage.Storage`, which also gives group
commit). A batch keeps its membership until the collector has acknowledged it, so a retry
after a crash sends the same set of reports again, which the collector counts as duplicates.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import sqlite_utils
from sqlite_utils.migrations import Migrations

from chorus_collector.storage import SchemaError, Storage

__all__ = ["PoolCounts", "PooledReport", "ShufflerPool", "pool_migrations"]

pool_migrations = Migrations("chorus-shuffler")
Outcome = Literal["new", "repeat", "conflict"]


@pool_migrations()
def m001_pool(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE pool (
            digest TEXT NOT NULL,
            report_id TEXT NOT NULL,
            time INTEGER NOT NULL,
            payload TEXT NOT NULL,
            batch TEXT,
            PRIMARY KEY (digest, report_id)
        ) STRICT, WITHOUT ROWID"""
    )
    # Finding full groups and the members of a batch; an index holds no arrival order either.
    db.execute("CREATE INDEX pool_by_batch ON pool (batch, digest, time)")


@dataclass(frozen=True)
class PooledReport:
    """A report as pooled and forwarded; ``payload_json`` is its canonical JSON payload."""

    report_id: str
    digest: str
    time: int
    payload_json: str

    def wire_json(self) -> str:
        """The report as the collector's wire format (keys in canonical order)."""
        return (f'{{"digest":"{self.digest}","payload":{self.payload_json},'
                f'"report_id":"{self.report_id}","time":{self.time}}}')


@dataclass(frozen=True)
class PoolCounts:
    waiting: int  # not yet claimed for a batch
    claimed: int  # claimed for a batch that the collector has not acknowledged yet


class ShufflerPool:
    """One pool database; a connection per thread (opened lazily)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._storage = Storage(path, synchronous="FULL")

    def migrate(self) -> None:
        """Create or update the schema; refuse a database that is not a shuffler pool."""
        db = self._storage.db()
        known = {m.name for m in pool_migrations._migrations}
        applied = pool_migrations.applied(db)
        unknown = [m.name for m in applied if m.name not in known]
        if unknown:
            raise SchemaError(f"{self.path} has shuffler migrations this version does not know "
                              f"({', '.join(unknown)}); refusing to start")
        tables = set(db.table_names())
        if tables and not applied:
            raise SchemaError(f"{self.path} is not a shuffler pool (tables: {sorted(tables)})")
        pool_migrations.apply(db)

    def close(self) -> None:
        self._storage.close()

    def ping(self) -> None:
        """A trivial read of the pool: raises if it cannot be read."""
        self.connect().execute("SELECT 1 FROM pool LIMIT 1").fetchall()

    def connect(self) -> sqlite3.Connection:
        return self._storage.connect()

    # -- intake ---------------------------------------------------------------------------------

    def add(self, reports: Sequence[PooledReport]) -> dict[tuple[str, str], Outcome]:
        """Store new reports; the outcome per (digest, report ID): "new", "repeat" or
        "conflict".

        A report already pooled with the same bytes is a repeat (the client retried): nothing
        changes. The same ID with other bytes conflicts. Returns only after the commit.
        """

        def work(conn: sqlite3.Connection) -> dict[tuple[str, str], Outcome]:
            outcomes: dict[tuple[str, str], Outcome] = {}
            fresh = []
            for report in reports:
                key = (report.digest, report.report_id)
                row = conn.execute("SELECT time, payload FROM pool WHERE digest = ? AND "
                                   "report_id = ?", key).fetchone()
                if row is None:
                    fresh.append((*key, report.time, report.payload_json))
                    outcomes[key] = "new"
                elif (row[0], row[1]) == (report.time, report.payload_json):
                    outcomes[key] = "repeat"
                else:
                    outcomes[key] = "conflict"
            conn.executemany("INSERT INTO pool (digest, report_id, time, payload) "
                             "VALUES (?, ?, ?, ?)", fresh)
            return outcomes

        # Concurrent requests share one transaction and one fsync (group commit).
        return self._storage.grouped_write(work)

    # -- batches --------------------------------------------------------------------------------

    def claim(self, min_batch: int, max_batch: int) -> list[str]:
        """Claim every full group: (digest, time) with at least ``min_batch`` waiting reports.

        A group larger than ``max_batch`` is split, at random, into near-equal batches; with
        ``max_batch >= 2 * min_batch`` every one of them still has ``min_batch`` reports.
        Returns the new batch IDs. Nothing smaller than ``min_batch`` is ever claimed.
        """
        shuffle = secrets.SystemRandom().shuffle
        claimed: list[str] = []
        with self._storage.write() as conn:
            groups = conn.execute(
                "SELECT digest, time, count(*) FROM pool WHERE batch IS NULL "
                "GROUP BY digest, time HAVING count(*) >= ?", (min_batch,)).fetchall()
            for digest, time, size in groups:
                parts = -(-size // max_batch)  # ceil
                ids = [r[0] for r in conn.execute(
                    "SELECT report_id FROM pool WHERE batch IS NULL AND digest = ? AND time = ?",
                    (digest, time))]
                shuffle(ids)
                for part in range(parts):
                    members = ids[part::parts]
                    assert len(members) >= min_batch
                    batch = secrets.token_hex(16)
                    conn.executemany(
                        "UPDATE pool SET batch = ? WHERE digest = ? AND report_id = ?",
                        [(batch, digest, report_id) for report_id in members])
                    claimed.append(batch)
        return claimed

    def claimed_batches(self) -> list[str]:
        """Batches claimed earlier and not yet acknowledged (a crash, or a failed forward)."""
        rows = self.connect().execute(
            "SELECT DISTINCT batch FROM pool WHERE batch IS NOT NULL")
        return [r[0] for r in rows]

    def batch(self, batch: str) -> list[PooledReport]:
        rows = self.connect().execute(
            "SELECT report_id, digest, time, payload FROM pool WHERE batch = ?", (batch,))
        return [PooledReport(*row) for row in rows]

    def delete(self, batch: str) -> int:
        """Remove an acknowledged batch from the pool."""
        with self._storage.write() as conn:
            return conn.execute("DELETE FROM pool WHERE batch = ?", (batch,)).rowcount

    def counts(self) -> PoolCounts:
        waiting, claimed = self.connect().execute(
            "SELECT count(*) - count(batch), count(batch) FROM pool").fetchone()
        return PoolCounts(waiting=waiting, claimed=claimed)
