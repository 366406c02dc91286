"""Per-install state in one SQLite file (stdlib ``sqlite3``): the privacy ledger and the outbox.

* ``ledger``: ε spent and reports made, per campaign *name* (the app's identity for it, so a
  new config version continues the same ledger) and privacy period.
* ``outbox``: reports perturbed once and written before any send, each with the campaign it
  belongs to, the ε it was charged and the time it becomes due (a random delay after it was
  made). A report leaves the outbox only when the collector has answered for it, and is resent
  byte for byte after a restart.
* ``sent_log`` (schema 6): the newest answered reports, as they left, with their ε, the answer
  and its UTC day, for the app to show its user (``Client.sent_log``; ``sent_log_size=0``
  keeps none).

What the file reveals: no true value and no key from which one could be tested. It holds the ε
spent per campaign and day, the randomized reports not yet sent and the newest ones sent, which
are exactly what the collector receives, the public configs of the campaigns (schema 4), one
random ``assignment_key`` (schema 3), and the privacy plan (schema 5): each campaign's share,
the periods the install drew to report in and which of them it used (value-free, but never to
be sent: a shuffler's anonymity needs the collector not to know them), and, only for an app
that set a rolling window, the ε spent per UTC day. The assignment key only derives which
public group a discovery campaign's reports go to in each privacy period and config version
(``chorus_shared.rng.keyed_source``); the group is in every such report anyway, and the key is
independent of every value. Of each queued report it keeps no time finer than its time bucket
(which the report carries anyway) and the random moment it becomes due: never the second at
which the app called ``report()``. The file is created readable by its owner only.

A copy of the file restored later (a device backup) brings back the ledger as it was then:
what was spent since is forgotten. An app that must hold the lifetime budget across such
rollbacks keeps a second counter where backups do not restore it (``Client(spend_counter=)``).

Charging the ledger and writing the outbox happen in one transaction, so a crash can neither
lose a report whose budget was spent nor send one that was never charged. Commits are not
fsynced one by one (WAL with ``synchronous=NORMAL``: a commit survives the process being
killed, and power loss can only roll back the last charges together with their queued
reports); :meth:`ClientState.make_durable` puts them on disk before anything is sent.

Files written by earlier versions (schema 0: a secret, a memo table of value fingerprints and a
ledger keyed by config digest) are upgraded in place: the secret and the memo table are
deleted, and the old ledger rows stay, so what was spent still counts against the lifetime
budget.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from chorus_client.errors import ClientError
from chorus_shared.privacy import fits, reports_within

__all__ = ["ClientState", "Decision", "Limits", "PlanBuilder", "PlanRow"]

SCHEMA_VERSION = 6
SCHEMA = """
CREATE TABLE IF NOT EXISTS plan (
    campaign TEXT PRIMARY KEY, pool TEXT NOT NULL, basis TEXT NOT NULL,
    epsilon REAL NOT NULL, budget REAL NOT NULL, reports INTEGER NOT NULL,
    slots TEXT, first INTEGER NOT NULL, asked REAL);
CREATE TABLE IF NOT EXISTS daily_spend (
    day INTEGER PRIMARY KEY, epsilon REAL NOT NULL);
CREATE TABLE IF NOT EXISTS slot_used (
    campaign TEXT NOT NULL, basis TEXT NOT NULL, slot INTEGER NOT NULL,
    PRIMARY KEY (campaign, basis, slot));
CREATE TABLE IF NOT EXISTS assignment_key (
    id INTEGER PRIMARY KEY CHECK (id = 1), key BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (
    campaign TEXT NOT NULL, period TEXT NOT NULL,
    epsilon REAL NOT NULL, reports INTEGER NOT NULL,
    PRIMARY KEY (campaign, period));
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, report TEXT NOT NULL, created REAL NOT NULL,
    campaign TEXT NOT NULL DEFAULT '', due REAL NOT NULL DEFAULT 0, epsilon REAL);
CREATE TABLE IF NOT EXISTS sent_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, campaign TEXT NOT NULL, report TEXT NOT NULL,
    epsilon REAL, status TEXT NOT NULL, day INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS config (
    campaign TEXT PRIMARY KEY, body TEXT NOT NULL, refresh REAL NOT NULL);
"""
#: ``outbox.created`` holds the report's time bucket rounded down to this many seconds at most
#: (schema 4): the client's finest accepted precision, so never more than the report carries.
CREATED_PRECISION = 3600
FILE_NAME = "chorus-client.sqlite3"
_PLAN_COLUMNS = "campaign, pool, basis, epsilon, budget, reports, slots, first, asked"
_RANDOM = secrets.SystemRandom()


@dataclass(frozen=True)
class Limits:
    """What one report may spend, checked in this order; every figure is value-free."""

    period_reports: int  # reports of this ε the campaign's policy allows per period
    max_reports: int  # the policy's report cap (period_reports <= max_reports)
    period_budget: float  # the campaign's budget per period
    campaign_budget: float  # the client's cap on one campaign, all periods and versions
    lifetime_budget: float  # the client's cap on everything this install reports
    window_budget: float = float("inf")  # the app's rolling window: ε in any window_days
    window_days: int = 1


@dataclass(frozen=True)
class PlanRow:
    """One campaign's part of the install's privacy plan, fixed when it was first seen.

    ``basis`` names what the plan was drawn for (the campaign's calendar and ε): a config
    version with the same basis keeps the plan, another one draws the remaining reports
    afresh. ``slots`` are the drawn period indexes (None: a campaign without a calendar);
    those before ``first``, the period in which the install first saw the campaign, are
    forfeited and never charged. ``asked`` is the latest clock time a report was asked at
    (None: never): no period up to the one containing it opens again, whichever way the
    clock moves, and a plan drawn again for a new basis starts after it.
    """

    campaign: str
    pool: str  # "pinned" or "unpinned": which part of the lifetime budget pays
    basis: str
    epsilon: float
    budget: float  # the most ε the campaign may spend in all (its share, or its reservation)
    reports: int  # reports planned for this basis (before forfeits)
    slots: tuple[int, ...] | None
    first: int
    asked: float | None

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> PlanRow:
        campaign, pool, basis, epsilon, budget, reports, slots, first, asked = row
        return cls(campaign=str(campaign), pool=str(pool), basis=str(basis),
                   epsilon=float(epsilon), budget=float(budget),  # type: ignore[arg-type]
                   reports=int(reports),  # type: ignore[call-overload]
                   slots=None if slots is None else tuple(json.loads(str(slots))),
                   first=int(first),  # type: ignore[call-overload]
                   asked=None if asked is None else float(asked))  # type: ignore[arg-type]


#: Builds a campaign's plan from (the plan held so far or None, ε already spent on the campaign,
#: ε reserved by the other unpinned campaigns); called inside the state's transaction.
PlanBuilder = Callable[[PlanRow | None, float, float], PlanRow]


@dataclass(frozen=True)
class Decision:
    """The ledger's answer for one report."""

    allowed: bool
    reason: str = ""  # why not: "max-reports", "budget", "campaign-budget", "lifetime-budget",
    # "slot-used" (this period's report of a scheduled campaign was already made)


class ClientState:
    """Thread-safe; ``directory=None`` keeps everything in memory (lost at exit)."""

    def __init__(self, directory: str | Path | None) -> None:
        if directory is None:
            target = ":memory:"
        else:
            path = Path(directory)
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            target = str(path / FILE_NAME)
            (path / FILE_NAME).touch(mode=0o600, exist_ok=True)
            (path / FILE_NAME).chmod(0o600)
        self.persistent = directory is not None
        self.closed = False
        self._assignment_key: bytes | None = None
        self._conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False,
                                     timeout=30.0)
        self._lock = threading.RLock()
        self._wal: str | None = None  # the WAL file, whose fsync makes every commit durable
        self._wal_listed = False  # whether the WAL's directory entry was synced
        with self._lock:
            if self.persistent:
                mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode == "wal":
                    self._wal = target + "-wal"
                    self._conn.execute("PRAGMA synchronous=NORMAL")
                else:  # a file system without WAL support: fsync every commit instead
                    self._conn.execute("PRAGMA synchronous=FULL")
            self._migrate()

    def _migrate(self) -> None:
        upgraded = False
        with self._transaction() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"the client state file has schema {version}, newer than "
                                   f"this client's {SCHEMA_VERSION}: upgrade the library")
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            # One statement at a time: executescript() would commit the open transaction.
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                # Schema 0 kept a secret and value fingerprints; neither is needed any more,
                # and the fingerprints let whoever copied the file test guesses of values.
                conn.execute("DROP TABLE IF EXISTS memo")
                conn.execute("DROP TABLE IF EXISTS install")
                columns = {row[1] for row in conn.execute("PRAGMA table_info(outbox)")}
                if "outbox" in tables and "campaign" not in columns:
                    conn.execute("ALTER TABLE outbox ADD COLUMN campaign TEXT NOT NULL "
                                 "DEFAULT ''")
                    conn.execute("ALTER TABLE outbox ADD COLUMN due REAL NOT NULL DEFAULT 0")
                    self._spread_legacy_outbox(conn)
                if "outbox" in tables and "epsilon" not in columns:  # schema 6: ε charged
                    conn.execute("ALTER TABLE outbox ADD COLUMN epsilon REAL")
                if version < 4 and "outbox" in tables:
                    # Schemas 0-3 kept the second of every report() call: keep the hour.
                    conn.execute("UPDATE outbox SET created = created - created % ?",
                                 (CREATED_PRECISION,))
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                upgraded = "memo" in tables or "install" in tables or (
                    version < 4 and "outbox" in tables)
        if upgraded and self.persistent:
            with self._lock:
                # Rewrite the file so that no deleted secret or fingerprint lingers in a free
                # page, then move the rewrite out of the WAL into the main file at once.
                self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @staticmethod
    def _spread_legacy_outbox(conn: sqlite3.Connection) -> None:
        """Reports queued by schema 0 carry no campaign or due time: group them by their
        digest (one campaign per request) and let each leave within an hour, at random."""
        now = time.time()
        rows = conn.execute("SELECT seq, report FROM outbox").fetchall()
        for seq, report in rows:
            try:
                digest = str(json.loads(report).get("digest", ""))
            except (ValueError, AttributeError):
                digest = ""
            conn.execute("UPDATE outbox SET campaign = ?, due = ? WHERE seq = ?",
                         (f"digest:{digest}", now + _RANDOM.random() * 3600.0, seq))

    def check_open(self) -> None:
        if self.closed:
            raise ClientError("the client is closed")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- ledger and outbox ----------------------------------------------------------------

    def charge_and_queue(self, *, campaign: str, period: str, cost: float, limits: Limits,
                         report: str, bucket: float, due: float,
                         guard: Callable[[float], str | None] | None = None,
                         slot: tuple[str, int] | None = None, day: int = 0) -> Decision:
        """Charge one report and queue it, atomically; or refuse it and change nothing.

        ``bucket`` is the report's time bucket (kept coarse: see ``CREATED_PRECISION``).
        ``guard``, if given, is called with the cost once every limit here allows the report
        and before anything is written: it may refuse (returning the reason) or charge a
        counter of the app's own, which then holds the charge even if this file is later
        rolled back; it runs inside the transaction, so a refusal writes nothing.
        ``slot`` (the plan's basis and a period index) is marked used in the same
        transaction: a scheduled campaign's period is charged at most once, ever.
        ``day`` (the UTC day number of the report) is where the charge is counted for a
        rolling window; charges dated after it (the clock went back) count in every window.
        """
        with self._transaction() as conn:
            if slot is not None and conn.execute(
                    "SELECT 1 FROM slot_used WHERE campaign = ? AND basis = ? AND slot = ?",
                    (campaign, *slot)).fetchone() is not None:
                return Decision(False, "slot-used")
            row = conn.execute("SELECT epsilon, reports FROM ledger WHERE campaign = ? AND "
                               "period = ?", (campaign, period)).fetchone()
            spent, sent = (row[0], row[1]) if row else (0.0, 0)
            on_campaign = conn.execute("SELECT coalesce(sum(epsilon), 0) FROM ledger WHERE "
                                       "campaign = ?", (campaign,)).fetchone()[0]
            total = conn.execute("SELECT coalesce(sum(epsilon), 0) FROM ledger").fetchone()[0]
            # The count is what the campaign publishes as its worst case; the ε sum guards a
            # period in which the campaign's version (and so its ε) changed.
            if sent + 1 > limits.period_reports:
                # Name the setting that binds: the count, or the budget it was derived from.
                by_budget = reports_within(limits.period_budget, cost, limits.max_reports + 1)
                exhausted = "max-reports" if limits.max_reports < by_budget else "budget"
                return Decision(False, exhausted)
            if not fits(spent, cost, limits.period_budget):
                return Decision(False, "budget")
            # The lifetime first: when it is what ran out, the app's lifetime_budget= is the
            # setting to name, even where a campaign's share ran out with it.
            if not fits(total, cost, limits.lifetime_budget):
                return Decision(False, "lifetime-budget")
            if not fits(on_campaign, cost, limits.campaign_budget):
                return Decision(False, "campaign-budget")
            if math.isfinite(limits.window_budget):
                recent = conn.execute("SELECT coalesce(sum(epsilon), 0) FROM daily_spend "
                                      "WHERE day > ?", (day - limits.window_days,)).fetchone()[0]
                if not fits(recent, cost, limits.window_budget):
                    return Decision(False, "window-budget")
            refusal = guard(cost) if guard is not None else None
            if refusal:
                return Decision(False, refusal)
            conn.execute(
                "INSERT INTO ledger (campaign, period, epsilon, reports) VALUES (?, ?, ?, 1) "
                "ON CONFLICT (campaign, period) DO UPDATE SET epsilon = epsilon + excluded."
                "epsilon, reports = reports + 1", (campaign, period, cost))
            if math.isfinite(limits.window_budget):  # kept only for an app that set a window
                conn.execute("INSERT INTO daily_spend (day, epsilon) VALUES (?, ?) ON "
                             "CONFLICT (day) DO UPDATE SET epsilon = epsilon + "
                             "excluded.epsilon", (day, cost))
            if slot is not None:
                conn.execute("INSERT INTO slot_used (campaign, basis, slot) VALUES (?, ?, ?)",
                             (campaign, *slot))
            conn.execute("INSERT INTO outbox (report, created, campaign, due, epsilon) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (report, bucket - bucket % CREATED_PRECISION, campaign, due, cost))
            return Decision(True)

    # -- the privacy plan -------------------------------------------------------------------

    def plan(self, campaign: str) -> PlanRow | None:
        with self._lock:
            self.check_open()
            return _plan_row(self._conn, campaign)

    def plans(self) -> list[PlanRow]:
        with self._lock:
            self.check_open()
            rows = self._conn.execute(f"SELECT {_PLAN_COLUMNS} FROM plan ORDER BY campaign")
            return [PlanRow.from_row(row) for row in rows.fetchall()]

    def settle_plan(self, campaign: str, basis: str, build: PlanBuilder) -> PlanRow:
        """The campaign's plan for this basis: the one held, or one ``build`` draws now and
        which is stored before anything is reported under it (one transaction, so two
        threads or processes cannot both draw)."""
        with self._transaction() as conn:
            held = _plan_row(conn, campaign)
            if held is not None and held.basis == basis:
                return held
            spent = conn.execute("SELECT coalesce(sum(epsilon), 0) FROM ledger WHERE "
                                 "campaign = ?", (campaign,)).fetchone()[0]
            reserved = conn.execute("SELECT coalesce(sum(budget), 0) FROM plan WHERE pool = "
                                    "'unpinned' AND campaign != ?", (campaign,)).fetchone()[0]
            plan = build(held, float(spent), float(reserved))
            conn.execute(
                f"INSERT OR REPLACE INTO plan ({_PLAN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, "
                "?, ?)", (plan.campaign, plan.pool, plan.basis, plan.epsilon, plan.budget,
                          plan.reports, None if plan.slots is None else json.dumps(plan.slots),
                          plan.first, plan.asked))
            return plan

    def advance(self, campaign: str, now: float) -> float | None:
        """Record that a report was asked for at clock time ``now``; returns the latest time
        asked before (None: never), so that a period before that one stays closed."""
        with self._transaction() as conn:
            row = conn.execute("SELECT asked FROM plan WHERE campaign = ?",
                               (campaign,)).fetchone()
            if row is None:
                raise ClientError(f"campaign {campaign!r} has no plan")
            latest = None if row[0] is None else float(row[0])
            if latest is None or now > latest:
                conn.execute("UPDATE plan SET asked = ? WHERE campaign = ?", (now, campaign))
            return latest

    def reports_made(self, campaign: str) -> int:
        with self._lock:
            self.check_open()
            row = self._conn.execute("SELECT coalesce(sum(reports), 0) FROM ledger WHERE "
                                     "campaign = ?", (campaign,)).fetchone()
        return int(row[0])

    def used_slots(self, campaign: str, basis: str) -> tuple[int, ...]:
        with self._lock:
            self.check_open()
            rows = self._conn.execute("SELECT slot FROM slot_used WHERE campaign = ? AND "
                                      "basis = ? ORDER BY slot", (campaign, basis)).fetchall()
        return tuple(int(row[0]) for row in rows)

    def make_durable(self) -> None:
        """Put every charge committed so far on disk. Call it after reading the outbox rows to
        send and before sending them: their charges committed before they could be read, so
        they are then all on disk, and a power loss can no longer undo the charge of a report
        that left the device.

        One fsync of the WAL file is the cheapest way: every commit since the last checkpoint
        is in it, and a checkpoint syncs the database file before SQLite reuses the WAL.
        ``PRAGMA wal_checkpoint`` would sync the WAL too, but also copy its pages into the
        database file and sync that (three times the cost here). It runs for every batch,
        even one read again: the rows may have been charged by another connection to the file
        (a second client, or a process killed before its commits reached the disk).
        """
        with self._lock:  # so that close() cannot delete the WAL meanwhile
            self.check_open()
            if self._wal is None:
                return  # in memory, or every commit was fsynced
            fd = os.open(self._wal, os.O_RDWR)  # writable: Windows cannot flush otherwise
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if not self._wal_listed and hasattr(os, "O_DIRECTORY"):
                # SQLite created the WAL when this file was opened: its directory entry must
                # be on disk too, once (SQLite would sync it at its first WAL sync).
                directory = os.open(os.path.dirname(self._wal), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
            self._wal_listed = True

    def assignment_key(self) -> bytes:
        """This install's key for public assignments: drawn from the OS CSPRNG once, kept
        (and held in memory after the first read: every discovery report needs it)."""
        if self._assignment_key is not None:
            return self._assignment_key
        with self._transaction() as conn:
            row = conn.execute("SELECT key FROM assignment_key WHERE id = 1").fetchone()
            key = bytes(row[0]) if row is not None else secrets.token_bytes(32)
            if row is None:
                conn.execute("INSERT INTO assignment_key (id, key) VALUES (1, ?)", (key,))
        self._assignment_key = key
        return key

    def held_config(self, campaign: str) -> tuple[str, float] | None:
        """A campaign's config kept from an earlier fetch, and when to fetch it again."""
        with self._lock:
            self.check_open()
            row = self._conn.execute("SELECT body, refresh FROM config WHERE campaign = ?",
                                     (campaign,)).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def config_refreshes(self) -> dict[str, float]:
        """When each held config is to be fetched again."""
        with self._lock:
            self.check_open()
            rows = self._conn.execute("SELECT campaign, refresh FROM config").fetchall()
        return {str(name): float(refresh) for name, refresh in rows}

    def hold_config(self, campaign: str, body: str, refresh: float) -> None:
        """Keep a verified config (public: what the collector serves to every install)."""
        with self._transaction() as conn:
            conn.execute("INSERT INTO config (campaign, body, refresh) VALUES (?, ?, ?) "
                         "ON CONFLICT (campaign) DO UPDATE SET body = excluded.body, "
                         "refresh = excluded.refresh", (campaign, body, refresh))

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
            self.check_open()
            return float(self._conn.execute(sql, args).fetchone()[0])

    def outbox(self, limit: int, due_by: float = float("inf")) -> list[tuple[int, str]]:
        """The oldest due reports of one campaign: (sequence number, report JSON).

        One campaign per batch, so that one request never links an install's reports to
        different campaigns.
        """
        with self._lock:
            self.check_open()
            first = self._conn.execute("SELECT campaign FROM outbox WHERE due <= ? ORDER BY "
                                       "seq LIMIT 1", (due_by,)).fetchone()
            if first is None:
                return []
            rows = self._conn.execute(
                "SELECT seq, report FROM outbox WHERE campaign = ? AND due <= ? ORDER BY seq "
                "LIMIT ?", (first[0], due_by, limit)).fetchall()
        return [(int(seq), str(report)) for seq, report in rows]

    def outbox_size(self) -> int:
        with self._lock:
            self.check_open()
            return int(self._conn.execute("SELECT count(*) FROM outbox").fetchone()[0])

    def waiting(self) -> list[tuple[str, int, float, float]]:
        """Per campaign: (campaign, reports queued, earliest due, latest due)."""
        with self._lock:
            self.check_open()
            rows = self._conn.execute("SELECT campaign, count(*), min(due), max(due) FROM "
                                      "outbox GROUP BY campaign").fetchall()
        return [(str(c), int(n), float(first), float(last)) for c, n, first, last in rows]

    def next_due(self) -> float | None:
        """When the earliest queued report becomes due (None: the outbox is empty)."""
        with self._lock:
            self.check_open()
            row = self._conn.execute("SELECT min(due) FROM outbox").fetchone()
        return None if row[0] is None else float(row[0])

    def settle(self, answered: list[tuple[int, str]], *, day: int, keep: int) -> None:
        """Move reports the collector answered for (``(seq, status)``: accepted, duplicate
        or refused) from the outbox to the sent log, in one transaction, keeping the log's
        ``keep`` newest entries (0: no log). ``day`` is the UTC day number of the answer."""
        if not answered:
            return
        with self._transaction() as conn:
            if keep > 0:
                conn.executemany(
                    "INSERT INTO sent_log (campaign, report, epsilon, status, day) "
                    "SELECT campaign, report, epsilon, ?, ? FROM outbox WHERE seq = ?",
                    [(status, day, seq) for seq, status in answered])
            conn.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s, _ in answered])
            conn.execute("DELETE FROM sent_log WHERE seq <= (SELECT max(seq) FROM sent_log) "
                         "- ?", (max(keep, 0),))

    def sent_log(self, limit: int | None = None) -> list[tuple[str, str, float | None, str,
                                                                 int]]:
        """The newest first: (campaign, report JSON, ε charged or None, status, UTC day)."""
        with self._lock:
            self.check_open()
            rows = self._conn.execute(
                "SELECT campaign, report, epsilon, status, day FROM sent_log ORDER BY seq DESC"
                + ("" if limit is None else " LIMIT ?"),
                () if limit is None else (limit,)).fetchall()
        return [(str(c), str(r), None if e is None else float(e), str(s), int(d))
                for c, r, e, s, d in rows]

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                self._conn.close()


def _plan_row(conn: sqlite3.Connection, campaign: str) -> PlanRow | None:
    row = conn.execute(f"SELECT {_PLAN_COLUMNS} FROM plan WHERE campaign = ?",
                       (campaign,)).fetchone()
    return None if row is None else PlanRow.from_row(row)
