"""The alert tables' SQL, which both engines speak alike: rules, their state and the
notification outbox (``alert_rules``, ``alert_state``, ``alert_firings``; the schema is in each
engine's migrations, m009 and p007).

:class:`AlertTables` runs it on a storage's own connections through the interface's public
``connect`` and ``write``; :class:`~chorus_collector.storage.sql.SQLStorage` hands its alert
operations to one. An evaluation commits by compare-and-set on the rule's ``last_end``, in
the transaction that also sets the rule's state and queues its notifications, so a window end
is decided once, whichever folder (worker, replica, ``chorus aggregate``) evaluates it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from chorus_collector.storage.interface import Storage
from chorus_collector.storage.values import (
    AlertEvaluation,
    AlertFiring,
    AlertState,
    StoredAlertRule,
)

__all__ = ["AlertTables"]

_RULE_COLUMNS = ("id, name, campaign_id, definition, webhook, secret, created_at, evaluated_at, "
                 "last_end, last_error")
_FIRING_COLUMNS = ("id, rule_id, event, key, created_at, payload, status, attempts, "
                   "next_attempt_at, delivered_at, last_error")


def _rule(row: Any) -> StoredAlertRule:
    return StoredAlertRule(int(row[0]), row[1], int(row[2]), json.loads(row[3]), row[4],
                           row[5], float(row[6]), None if row[7] is None else float(row[7]),
                           int(row[8]), row[9])


def _firing(row: Any) -> AlertFiring:
    return AlertFiring(int(row[0]), int(row[1]), row[2], row[3], float(row[4]), row[5],
                       row[6], int(row[7]), float(row[8]),
                       None if row[9] is None else float(row[9]), row[10])


class AlertTables:
    """The alert operations of :class:`Storage`, on ``storage``'s connections."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def insert_rule(self, name: str, campaign_id: int, definition: Mapping[str, Any],
                    webhook: str, secret: str | None, now: float) -> StoredAlertRule:
        with self.storage.write() as conn:
            row = conn.execute(
                "INSERT INTO alert_rules (name, campaign_id, definition, webhook, secret, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING "
                f"RETURNING {_RULE_COLUMNS}",
                (name, campaign_id, json.dumps(dict(definition), sort_keys=True), webhook,
                 secret, now)).fetchone()
        if row is None:
            raise FileExistsError(name)
        return _rule(row)

    def rules(self, campaign_ids: Iterable[int] | None = None) -> list[StoredAlertRule]:
        rows = self.storage.connect().execute(
            f"SELECT {_RULE_COLUMNS} FROM alert_rules ORDER BY id").fetchall()
        rules = [_rule(row) for row in rows]
        if campaign_ids is None:
            return rules
        wanted = set(campaign_ids)
        return [rule for rule in rules if rule.campaign_id in wanted]

    def get_rule(self, name: str) -> StoredAlertRule | None:
        row = self.storage.connect().execute(
            f"SELECT {_RULE_COLUMNS} FROM alert_rules WHERE name = ?", (name,)).fetchone()
        return None if row is None else _rule(row)

    def delete_rule(self, rule_id: int) -> bool:
        with self.storage.write() as conn:
            # Explicitly, not by the foreign keys' cascade: SQLite enforces them only on a
            # connection that asked to.
            conn.execute("DELETE FROM alert_firings WHERE rule_id = ?", (rule_id,))
            conn.execute("DELETE FROM alert_state WHERE rule_id = ?", (rule_id,))
            deleted = conn.execute("DELETE FROM alert_rules WHERE id = ?", (rule_id,)).rowcount
        return bool(deleted)

    def state(self, rule_id: int) -> AlertState:
        # One statement: one snapshot on either engine.
        rows = self.storage.connect().execute(
            "SELECT r.last_end, s.value, s.since FROM alert_rules r "
            "LEFT JOIN alert_state s ON s.rule_id = r.id WHERE r.id = ?", (rule_id,)).fetchall()
        if not rows:
            raise KeyError(rule_id)
        return AlertState(int(rows[0][0]), {value: float(since) for _, value, since in rows
                                            if value is not None})

    def commit_evaluation(self, evaluation: AlertEvaluation) -> bool:
        e = evaluation
        with self.storage.write() as conn:
            # Compare-and-set first: its row lock serializes evaluators of the rule, and the
            # one that lost changes nothing.
            moved = conn.execute(
                "UPDATE alert_rules SET last_end = ?, evaluated_at = ?, last_error = ? "
                "WHERE id = ? AND last_end = ?",
                (e.end, e.now, e.error, e.rule_id, e.expected_end)).rowcount
            if moved != 1:
                return False
            for value in e.cleared:
                conn.execute("DELETE FROM alert_state WHERE rule_id = ? AND value = ?",
                             (e.rule_id, value))
            for value in e.raised:
                conn.execute("INSERT INTO alert_state (rule_id, value, since) VALUES (?, ?, ?) "
                             "ON CONFLICT (rule_id, value) DO NOTHING", (e.rule_id, value, e.now))
            for firing in e.firings:
                conn.execute(
                    "INSERT INTO alert_firings (rule_id, event, key, created_at, payload, "
                    "next_attempt_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (e.rule_id, firing.event, firing.key, e.now, firing.payload, e.now))
        return True

    def due_firings(self, now: float, limit: int) -> list[AlertFiring]:
        rows = self.storage.connect().execute(
            f"SELECT {_FIRING_COLUMNS} FROM alert_firings WHERE status = 'pending' "
            "AND next_attempt_at <= ? AND claimed_until < ? ORDER BY id LIMIT ?",
            (now, now, limit)).fetchall()
        return [_firing(row) for row in rows]

    def claim_firing(self, firing_id: int, now: float, seconds: float) -> bool:
        with self.storage.write() as conn:
            claimed = conn.execute(
                "UPDATE alert_firings SET claimed_until = ?, attempts = attempts + 1 "
                "WHERE id = ? AND status = 'pending' AND next_attempt_at <= ? "
                "AND claimed_until < ?", (now + seconds, firing_id, now, now)).rowcount
        return bool(claimed == 1)

    def finish_firing(self, firing_id: int, now: float, *, delivered: bool, error: str | None,
                      retry_at: float | None) -> None:
        status = "delivered" if delivered else "pending" if retry_at is not None else "failed"
        with self.storage.write() as conn:
            conn.execute(
                "UPDATE alert_firings SET status = ?, delivered_at = ?, last_error = ?, "
                "next_attempt_at = ?, claimed_until = 0 WHERE id = ?",
                (status, now if delivered else None, error,
                 now if retry_at is None else retry_at, firing_id))

    def firings(self, rule_id: int, limit: int) -> list[AlertFiring]:
        rows = self.storage.connect().execute(
            f"SELECT {_FIRING_COLUMNS} FROM alert_firings WHERE rule_id = ? "
            "ORDER BY id DESC LIMIT ?", (rule_id, limit)).fetchall()
        return [_firing(row) for row in rows]
