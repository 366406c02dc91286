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
A batch the collector refuses as too large is split in the pool, in one transaction, before
either half is sent (:meth:`ShufflerPool.split`); one that cannot be split without going
below ``MIN_BATCH`` is kept, with the time of its next try (:meth:`ShufflerPool.hold`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from chorus_collector.storage import SchemaError, SQLiteStorage
from chorus_collector.storage.sqlite_library import Migrations, sqlite_utils

__all__ = ["PoolCounts", "PooledReport", "ShufflerPool", "batch_body", "pool_migrations"]

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


@pool_migrations()
def m003_held(db: sqlite_utils.Database) -> None:
    # Batches the collector refused as too large that cannot be split without going below
    # MIN_BATCH: kept whole, tried again after a back-off. One row per batch, never per report,
    # and gone with the batch once the collector takes it.
    db.execute("""CREATE TABLE held (
            batch TEXT PRIMARY KEY,
            reports INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            refusals INTEGER NOT NULL,
            retry_at REAL NOT NULL
        ) STRICT, WITHOUT ROWID""")


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


# The envelope of a forwarded body, and the bytes of one report's wire JSON besides its
# payload and time (the comma that joins it to the next one included).
_BODY_HEAD, _BODY_TAIL = b'{"reports":[', b"]}"
_REPORT_FRAME = len(PooledReport("0" * 32, "0" * 64, 0, "").wire_json().encode()) - len("0") + 1


def batch_body(members: Sequence[PooledReport]) -> bytes:
    """The body of a forwarded batch: the collector's wire format, in the order given."""
    return _BODY_HEAD + ",".join(m.wire_json() for m in members).encode() + _BODY_TAIL


def _report_bytes(payload_bytes: int, time: int) -> int:
    """What one report adds to :func:`batch_body` (with its comma)."""
    return _REPORT_FRAME + payload_bytes + len(str(time))


def _body_bytes(report_bytes: int) -> int:
    """The size of a batch body whose reports add ``report_bytes`` (commas included)."""
    return len(_BODY_HEAD) + max(report_bytes - 1, 0) + len(_BODY_TAIL)


@dataclass(frozen=True)
class PoolCounts:
    waiting: int  # not yet claimed for a batch
    claimed: int  # claimed for a batch that the collector has not acknowledged yet
    held_batches: int = 0  # claimed batches the collector refuses as too large (split no more)
    held_reports: int = 0


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

    def claim(self, min_batch: int, max_batch: int,
              max_bytes: int | None = None) -> list[str]:
        """Claim every full group and return the new batch IDs.

        Reports of admitted senders and reports without admission (pooled before it was
        configured) form separate groups. An admitted group (digest, time) is full with
        ``min_batch`` *distinct senders*, however many reports they sent: reports do not
        count, so a party holding few credentials cannot complete a batch. A group without
        admission is full with ``min_batch`` reports, as before admission existed.

        A group larger than ``max_batch`` reports, or whose body would exceed ``max_bytes``,
        is split, at random, into near-equal batches, each sender's reports whole into one of
        them; every batch still has ``min_batch`` senders (or reports). Nothing smaller is ever
        claimed: where the floor and ``max_bytes`` disagree, the floor wins (and the collector's
        413, if it comes, is handled by :meth:`split` and :meth:`hold`).
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
                    "SELECT report_id, sender, length(CAST(payload AS BLOB)) FROM pool "
                    "WHERE batch IS NULL AND digest = ? AND time = ? "
                    "AND (sender IS NOT NULL) = ?", (digest, time, with_senders)).fetchall()
                # Each sender (without admission: each report) goes whole into one batch.
                by_sender: dict[str, list[str]] = {}
                unit_bytes: dict[str, int] = {}
                for report_id, sender, payload_bytes in rows:
                    unit = sender if sender is not None else report_id
                    by_sender.setdefault(unit, []).append(report_id)
                    unit_bytes[unit] = unit_bytes.get(unit, 0) + _report_bytes(payload_bytes,
                                                                               time)
                units = list(by_sender)
                shuffle(units)
                most = max(1, senders // min_batch)  # more parts would break the floor
                parts = max(1, min(-(-size // max_batch), most))
                if max_bytes is not None:
                    total = _body_bytes(sum(unit_bytes.values()))
                    parts = max(parts, min(-(-total // max_bytes), most))
                chosen = [units[part::parts] for part in range(parts)]
                # The deal is round-robin, so a part may still be a little over max_bytes:
                # one more part, as long as the floor allows. A few tries at most; a part
                # still too large meets the collector's 413, and split() then.
                for _ in range(8):
                    if max_bytes is None or parts >= most or all(
                            _body_bytes(sum(unit_bytes[u] for u in part)) <= max_bytes
                            for part in chosen):
                        break
                    parts += 1
                    chosen = [units[part::parts] for part in range(parts)]
                for part_units in chosen:
                    assert len(part_units) >= min_batch
                    batch = secrets.token_hex(16)
                    conn.executemany(
                        "UPDATE pool SET batch = ? WHERE digest = ? AND report_id = ?",
                        [(batch, digest, report_id) for unit in part_units
                         for report_id in by_sender[unit]])
                    claimed.append(batch)
        return claimed

    def split(self, batch: str, min_batch: int) -> list[str]:
        """Split a claimed batch in two at random, each sender's reports whole into one half,
        and return the new batch IDs; [] (nothing changes) if a half would have fewer than
        ``min_batch`` senders (without admission: reports).

        One transaction: after a crash the pool holds either the batch or its two halves,
        each complete, so a retry sends the same reports, which the collector counts once.
        """
        with self._storage.write() as conn:
            rows = conn.execute("SELECT digest, report_id, sender FROM pool WHERE batch = ?",
                                (batch,)).fetchall()
            by_sender: dict[str, list[tuple[str, str]]] = {}
            for digest, report_id, sender in rows:
                by_sender.setdefault(sender if sender is not None else report_id,
                                     []).append((digest, report_id))
            units = list(by_sender.values())
            if len(units) < 2 * min_batch:
                return []
            secrets.SystemRandom().shuffle(units)
            halves = [secrets.token_hex(16), secrets.token_hex(16)]
            conn.executemany(
                "UPDATE pool SET batch = ? WHERE digest = ? AND report_id = ?",
                [(halves[index % 2], digest, report_id)
                 for index, unit in enumerate(units) for digest, report_id in unit])
            conn.execute("DELETE FROM held WHERE batch = ?", (batch,))
        return halves

    def hold(self, batch: str, *, reports: int, size: int, now: float,
             backoff: tuple[float, float]) -> tuple[int, float]:
        """Record that the collector refused ``batch`` (``size`` bytes) as too large once more:
        (refusals so far, the time of the next try). The delay starts at ``backoff[0]`` and
        doubles up to ``backoff[1]``."""
        first, most = backoff
        with self._storage.write() as conn:
            row = conn.execute("SELECT refusals FROM held WHERE batch = ?", (batch,)).fetchone()
            refusals = 1 if row is None else row[0] + 1
            retry_at = now + min(first * 2 ** min(refusals - 1, 32), most)
            conn.execute("INSERT INTO held (batch, reports, bytes, refusals, retry_at) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (batch) DO UPDATE SET "
                         "reports = excluded.reports, bytes = excluded.bytes, "
                         "refusals = excluded.refusals, retry_at = excluded.retry_at",
                         (batch, reports, size, refusals, retry_at))
        return refusals, retry_at

    def backing_off(self, now: float) -> set[str]:
        """The held batches whose next try is still to come."""
        rows = self.connect().execute("SELECT batch FROM held WHERE retry_at > ?", (now,))
        return {r[0] for r in rows}

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
            conn.execute("DELETE FROM held WHERE batch = ?", (batch,))
            return conn.execute("DELETE FROM pool WHERE batch = ?", (batch,)).rowcount

    def counts(self) -> PoolCounts:
        conn = self.connect()
        waiting, claimed = conn.execute(
            "SELECT count(*) - count(batch), count(batch) FROM pool").fetchone()
        held_batches, held_reports = conn.execute(
            "SELECT count(*), coalesce(sum(reports), 0) FROM held").fetchone()
        return PoolCounts(waiting=waiting, claimed=claimed, held_batches=held_batches,
                          held_reports=held_reports)
