"""Per-install state in one SQLite file (stdlib ``sqlite3``): secret, ledger, memo, outbox.

* ``install``: a 32-byte secret from the OS CSPRNG, created once. Memoized responses and the
  per-install assignment (RAPPOR's cohort, Duchi's α) are derived from it, so they survive
  restarts without storing any value.
* ``ledger``: ε spent and reports sent, per campaign digest and privacy period.
* ``memo``: how often each memoized value was reported, under an HMAC fingerprint (never the
  value itself).

What the file reveals: it holds no true value, but it holds the secret, so whoever can read it
can test guesses (compute a candidate's fingerprint or memoized response and compare), exactly
as with RAPPOR's per-client secret. It is as sensitive as the app's own data: it is created
readable by its owner only, and belongs in the app's private storage. Local differential
privacy protects users against the collector and the network, not against their own device.
* ``outbox``: reports perturbed once and written before any send; a report leaves the outbox
  only when the collector has answered for it, and is resent byte for byte after a restart.

Charging the ledger and writing the outbox happen in one transaction, so a crash can neither
lose a report whose budget was spent nor send one that was never charged.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClientState", "Decision"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS install (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    campaign TEXT NOT NULL, period TEXT NOT NULL,
    epsilon REAL NOT NULL, reports INTEGER NOT NULL,
    PRIMARY KEY (campaign, period));
CREATE TABLE IF NOT EXISTS memo (
    campaign TEXT NOT NULL, fingerprint BLOB NOT NULL, reports INTEGER NOT NULL,
    PRIMARY KEY (campaign, fingerprint));
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, report TEXT NOT NULL, created REAL NOT NULL);
"""
FILE_NAME = "chorus-client.sqlite3"


@dataclass(frozen=True)
class Decision:
    """The ledger's answer for one report."""

    allowed: bool
    cost: float
    reason: str = ""  # why it was refused: "budget", "max-reports" or "total-budget"


class ClientState:
    """Thread-safe; ``directory=None`` keeps everything in memory (lost at exit)."""

    def __init__(self, directory: str | Path | None) -> None:
        if directory is None:
            target = ":memory:"
        else:
            path = Path(directory)
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            target = str(path / FILE_NAME)
            # The file holds the install secret: readable by this user only (see the module
            # docstring for what someone who can read it learns).
            (path / FILE_NAME).touch(mode=0o600, exist_ok=True)
            (path / FILE_NAME).chmod(0o600)
        self.persistent = directory is not None
        self.closed = False
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False,
                                     timeout=30.0)
        self._lock = threading.RLock()
        with self._lock:
            if self.persistent:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.executescript(SCHEMA)
            self.secret = self._load_secret()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _load_secret(self) -> bytes:
        with self._transaction() as conn:
            row = conn.execute("SELECT value FROM install WHERE key = 'secret'").fetchone()
            if row is not None:
                return bytes(row[0])
            secret = secrets.token_bytes(32)
            conn.execute("INSERT INTO install (key, value) VALUES ('secret', ?)", (secret,))
            return secret

    # -- ledger and outbox ----------------------------------------------------------------

    def charge_and_queue(self, *, campaign: str, period: str, fingerprint: bytes | None,
                         cost_of: Callable[[int], float], budget: float, max_reports: int,
                         total_budget: float, report: str, now: float) -> Decision:
        """Charge one report and queue it, atomically; or refuse it and change nothing.

        ``cost_of(earlier)`` is the ε of this report given how often the same memoized value
        was reported before (``fingerprint`` None: not memoized, earlier = 0).
        """
        with self._transaction() as conn:
            row = conn.execute("SELECT epsilon, reports FROM ledger WHERE campaign = ? AND "
                               "period = ?", (campaign, period)).fetchone()
            spent, sent = (row[0], row[1]) if row else (0.0, 0)
            earlier = 0
            if fingerprint is not None:
                memo = conn.execute("SELECT reports FROM memo WHERE campaign = ? AND "
                                    "fingerprint = ?", (campaign, fingerprint)).fetchone()
                earlier = memo[0] if memo else 0
            cost = cost_of(earlier)
            total = conn.execute("SELECT coalesce(sum(epsilon), 0) FROM ledger").fetchone()[0]
            # A relative slack absorbs float rounding in sums of equal costs.
            if sent + 1 > max_reports:
                return Decision(False, cost, "max-reports")
            if spent + cost > budget * (1 + 1e-12):
                return Decision(False, cost, "budget")
            if total + cost > total_budget * (1 + 1e-12):
                return Decision(False, cost, "total-budget")
            conn.execute(
                "INSERT INTO ledger (campaign, period, epsilon, reports) VALUES (?, ?, ?, 1) "
                "ON CONFLICT (campaign, period) DO UPDATE SET epsilon = epsilon + excluded."
                "epsilon, reports = reports + 1", (campaign, period, cost))
            if fingerprint is not None:
                conn.execute(
                    "INSERT INTO memo (campaign, fingerprint, reports) VALUES (?, ?, 1) "
                    "ON CONFLICT (campaign, fingerprint) DO UPDATE SET reports = reports + 1",
                    (campaign, fingerprint))
            conn.execute("INSERT INTO outbox (report, created) VALUES (?, ?)", (report, now))
            return Decision(True, cost)

    def spent(self, campaign: str | None = None, period: str | None = None) -> float:
        """ε spent, in total or for one campaign (and period)."""
        sql, args = "SELECT coalesce(sum(epsilon), 0) FROM ledger WHERE 1", []
        if campaign is not None:
            sql += " AND campaign = ?"
            args.append(campaign)
        if period is not None:
            sql += " AND period = ?"
            args.append(period)
        with self._lock:
            return float(self._conn.execute(sql, args).fetchone()[0])

    def outbox(self, limit: int) -> list[tuple[int, str]]:
        """The oldest queued reports: (sequence number, report JSON)."""
        with self._lock:
            rows = self._conn.execute("SELECT seq, report FROM outbox ORDER BY seq LIMIT ?",
                                      (limit,)).fetchall()
        return [(int(seq), str(report)) for seq, report in rows]

    def outbox_size(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM outbox").fetchone()[0])

    def oldest_queued(self) -> float | None:
        with self._lock:
            row = self._conn.execute("SELECT min(created) FROM outbox").fetchone()
        return None if row[0] is None else float(row[0])

    def remove(self, seqs: list[int]) -> None:
        if not seqs:
            return
        with self._transaction() as conn:
            conn.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in seqs])

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._conn.close()
