"""The shuffler's pool: reports waiting for a batch, in their own SQLite file.

What is stored is only what the collector will receive anyway: per report its campaign digest,
random report ID, truncated time bucket and perturbed payload, plus the random ID of the
batch it was claimed for (NULL until then). Nothing about the sender: no address, no headers,
no arrival time, and no arrival order either: the table is ``WITHOUT ROWID`` and keyed by
(digest, report ID), so rows sit in the order of their random IDs.

With admission control (docs/shuffler.md) each report also carries a *sender tag*: a keyed
hash of the admitted sender's ID together with the report's campaign digest and time bucket,
under a random key of this pool. Within one group (digest, bucket) one sender has one tag, so
the pool can count distinct senders and cap each one's reports; across groups the tags of one
sender differ, so the pool holds no ID that links an install's reports over campaigns or
hours. The tag is never forwarded. NULL: the report came in without admission.

Durability: WAL, ``synchronous=FULL`` and every write in a ``BEGIN IMMEDIATE`` transaction
(through the collector's :class:`~chorus_collector.storage.SQLiteStorage`, which also gives group
commit). A batch keeps its membership until the collector has acknowledged it, so a retry
after a crash sends the same set of reports again, which the collector counts as duplicates.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import sqlite_utils
from sqlite_utils.migrations import Migrations

from chorus_collector.storage import SchemaError, SQLiteStorage

__all__ = ["PoolCounts", "PooledReport", "ShufflerPool", "pool_migrations"]

pool_migrations = Migrations("chorus-shuffler")
# "limit": the sender already has MAX_REPORTS_PER_SENDER reports waiting in the group.
Outcome = Literal["new", "repeat", "conflict", "limit"]


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


@pool_migrations()
def m002_admitted_senders(db: sqlite_utils.Database) -> None:
    # The sender tag (module docstring); rows pooled before admission keep NULL and are
    # forwarded as before, in batches that carry no sender count.
    db.execute("ALTER TABLE pool ADD COLUMN sender TEXT")
    db.execute("DROP INDEX pool_by_batch")
    # Full groups, distinct senders and a sender's waiting reports, all from the index.
    db.execute("CREATE INDEX pool_by_batch ON pool (batch, digest, time, sender)")
    # The key of the sender tags: random per pool, so a tag says nothing outside this file.
    db.execute("CREATE TABLE pool_key (id INTEGER PRIMARY KEY CHECK (id = 1), "
               "key TEXT NOT NULL) STRICT")
    db.execute("INSERT INTO pool_key (id, key) VALUES (1, ?)", [secrets.token_hex(32)])


@dataclass(frozen=True)
class PooledReport:
    """A report as pooled and forwarded; ``payload_json`` is its canonical JSON payload.

    ``sender`` is the admitted sender's ID (None without admission); the pool stores only
    its group-bound tag, and :meth:`wire_json` never includes either.
    """

    report_id: str
    digest: str
    time: int
    payload_json: str
    sender: str | None = None

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

    def __init__(self, path: str, *, max_reports_per_sender: int = 1) -> None:
        self.path = path
        self.max_reports_per_sender = max_reports_per_sender
        self._storage = SQLiteStorage(path, synchronous="FULL")
        self._tag_key: bytes | None = None

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
        self._tag_key = None  # read again, lazily, from the pool just migrated

    def close(self) -> None:
        self._storage.close()

    def ping(self) -> None:
        """A trivial read of the pool: raises if it cannot be read."""
        self.connect().execute("SELECT 1 FROM pool LIMIT 1").fetchall()

    def connect(self) -> sqlite3.Connection:
        return self._storage.connect()

    def sender_tag(self, sender: str, digest: str, time: int) -> str:
        """The sender's tag in the group (digest, time): equal for one sender within a group,
        unlinkable across groups without this pool's key."""
        if self._tag_key is None:
            row = self.connect().execute("SELECT key FROM pool_key WHERE id = 1").fetchone()
            self._tag_key = bytes.fromhex(row[0])
        message = f"{sender}\0{digest}\0{time}".encode()
        return hmac.new(self._tag_key, message, hashlib.sha256).hexdigest()[:32]

    # -- intake ---------------------------------------------------------------------------------

    def add(self, reports: Sequence[PooledReport]) -> dict[tuple[str, str], Outcome]:
        """Store new reports; the outcome per (digest, report ID): "new", "repeat" or
        "conflict".

        A report already pooled with the same bytes is a repeat (the client retried): nothing
        changes. The same ID with other bytes conflicts. A new report of an admitted sender
        who already has ``max_reports_per_sender`` waiting in its group is refused ("limit"):
        one credential must not fill a batch. Returns only after the commit.
        """
        tags = [None if r.sender is None else self.sender_tag(r.sender, r.digest, r.time)
                for r in reports]

        def work(conn: sqlite3.Connection) -> dict[tuple[str, str], Outcome]:
            outcomes: dict[tuple[str, str], Outcome] = {}
            fresh = []
            waiting: dict[tuple[str, int, str], int] = {}  # per (group, tag), this request too
            for report, tag in zip(reports, tags, strict=True):
                key = (report.digest, report.report_id)
                row = conn.execute("SELECT time, payload FROM pool WHERE digest = ? AND "
                                   "report_id = ?", key).fetchone()
                if row is not None:
                    same = (row[0], row[1]) == (report.time, report.payload_json)
                    outcomes[key] = "repeat" if same else "conflict"
                    continue
                if tag is not None:
                    group = (report.digest, report.time, tag)
                    if group not in waiting:
                        waiting[group] = conn.execute(
                            "SELECT count(*) FROM pool WHERE batch IS NULL AND digest = ? "
                            "AND time = ? AND sender = ?", group).fetchone()[0]
                    if waiting[group] >= self.max_reports_per_sender:
                        outcomes[key] = "limit"
                        continue
                    waiting[group] += 1
                fresh.append((*key, report.time, report.payload_json, tag))
                outcomes[key] = "new"
            conn.executemany("INSERT INTO pool (digest, report_id, time, payload, sender) "
                             "VALUES (?, ?, ?, ?, ?)", fresh)
            return outcomes

        # Concurrent requests share one transaction and one fsync (group commit).
        return self._storage.grouped_write(work)

    # -- batches --------------------------------------------------------------------------------

    def claim(self, min_batch: int, max_batch: int) -> list[str]:
        """Claim every full group and return the new batch IDs.

        Reports of admitted senders and reports without admission (pooled before it was
        configured) form separate groups. An admitted group (digest, time) is full with
        ``min_batch`` *distinct senders*, however many reports they sent: reports do not
        count, so a party holding few credentials cannot complete a batch. A group without
        admission is full with ``min_batch`` reports, as before admission existed.

        A group larger than ``max_batch`` reports is split, at random, into near-equal
        batches, each sender's reports whole into one of them; every batch still has
        ``min_batch`` senders (or reports). Nothing smaller is ever claimed.
        """
        shuffle = secrets.SystemRandom().shuffle
        claimed: list[str] = []
        with self._storage.write() as conn:
            admitted = conn.execute(
                "SELECT digest, time, count(*), count(DISTINCT sender) FROM pool "
                "WHERE batch IS NULL AND sender IS NOT NULL GROUP BY digest, time "
                "HAVING count(DISTINCT sender) >= ?", (min_batch,)).fetchall()
            anonymous = conn.execute(
                "SELECT digest, time, count(*), count(*) FROM pool "
                "WHERE batch IS NULL AND sender IS NULL GROUP BY digest, time "
                "HAVING count(*) >= ?", (min_batch,)).fetchall()
            groups = [(g, True) for g in admitted] + [(g, False) for g in anonymous]
            for (digest, time, size, senders), with_senders in groups:
                rows = conn.execute(
                    "SELECT report_id, sender FROM pool WHERE batch IS NULL AND digest = ? "
                    "AND time = ? AND (sender IS NOT NULL) = ?",
                    (digest, time, with_senders)).fetchall()
                parts = max(1, min(-(-size // max_batch), senders // min_batch))
                # Each sender (without admission: each report) goes whole into one batch.
                by_sender: dict[str, list[str]] = {}
                for report_id, sender in rows:
                    by_sender.setdefault(sender if sender is not None else report_id,
                                         []).append(report_id)
                units = list(by_sender.values())
                shuffle(units)
                for part in range(parts):
                    chosen = units[part::parts]
                    assert len(chosen) >= min_batch
                    batch = secrets.token_hex(16)
                    conn.executemany(
                        "UPDATE pool SET batch = ? WHERE digest = ? AND report_id = ?",
                        [(batch, digest, report_id) for unit in chosen for report_id in unit])
                    claimed.append(batch)
        return claimed

    def claimed_batches(self) -> list[str]:
        """Batches claimed earlier and not yet acknowledged (a crash, or a failed forward)."""
        rows = self.connect().execute(
            "SELECT DISTINCT batch FROM pool WHERE batch IS NOT NULL")
        return [r[0] for r in rows]

    def batch(self, batch: str) -> list[PooledReport]:
        """The reports of a batch, as forwarded: no sender (nor its tag) comes with them."""
        rows = self.connect().execute(
            "SELECT report_id, digest, time, payload FROM pool WHERE batch = ?", (batch,))
        return [PooledReport(*row) for row in rows]

    def batch_senders(self, batch: str) -> int | None:
        """How many distinct admitted senders the batch holds; None if any of its reports
        came in without admission (then the shuffler vouches for no count)."""
        senders, tagged, size = self.connect().execute(
            "SELECT count(DISTINCT sender), count(sender), count(*) FROM pool WHERE batch = ?",
            (batch,)).fetchone()
        return int(senders) if size and tagged == size else None

    def delete(self, batch: str) -> int:
        """Remove an acknowledged batch from the pool."""
        with self._storage.write() as conn:
            return conn.execute("DELETE FROM pool WHERE batch = ?", (batch,)).rowcount

    def counts(self) -> PoolCounts:
        waiting, claimed = self.connect().execute(
            "SELECT count(*) - count(batch), count(batch) FROM pool").fetchone()
        return PoolCounts(waiting=waiting, claimed=claimed)
