"""SQLite's reports table since m007 (issue 33 #10): two B-trees and no counter row, so a single
report's commit writes two pages, not four, and its request makes no query of its own for the
campaign's retirement; the upgrade keeps every report counted exactly once.

These read the SQLite file itself (its WAL, its schema, its statements): SQLite only. What
both engines promise (a seq never handed out again after gc, an append to a retired campaign
refused) is in test_storage.py.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from chorus_collector.ingest.reports import ingest_reports
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import SQLiteStorage, StoredReport, migrations
from chorus_shared.campaign import campaign_from_spec, canonical_json
from helpers.support import NOW, campaign_spec, make_report

pytestmark = pytest.mark.sqlite_only

HOUR = 3600
PAGE = 4096
FRAME = PAGE + 24  # a WAL frame: its header and one page


def _storage(path: Path) -> tuple[SQLiteStorage, int, dict[str, object]]:
    storage = SQLiteStorage(str(path))
    storage.migrate()
    stored, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("k")))
    return storage, stored.id, stored.campaign.public_config()


def test_a_single_reports_commit_writes_two_pages_and_reads_no_retirement(
        tmp_path: Path) -> None:
    storage, _, config = _storage(tmp_path / "c.db")
    rng = random.Random(4)
    ingest_reports(storage, [make_report(config, "a", rng)], NOW)  # the campaign, cached
    conn = storage.connect()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    count = 200
    for _ in range(count):
        statuses = ingest_reports(storage, [make_report(config, "a", rng)], NOW)
        assert statuses[0].status == "accepted"
    conn.set_trace_callback(None)
    # The table's page and the ID index's (a page split now and then): four before m007,
    # with the time index and AUTOINCREMENT's sqlite_sequence row.
    frames = (os.path.getsize(f"{storage.path}-wal") - 32) / FRAME
    assert frames / count < 2.5
    # BEGIN, the INSERT (which reads the retirement), COMMIT: a request alone in its group
    # commit needs no savepoint.
    assert len(statements) == 3 * count
    assert not [s for s in statements if s.lstrip().upper().startswith("SELECT")]


def _old_database(path: Path) -> sqlite_utils.Database:
    """A database of the schema before m007 (AUTOINCREMENT, the time index)."""
    database = sqlite_utils.Database(str(path))
    migrations.apply(database, stop_before="m007_lean_reports")
    campaign = campaign_from_spec(campaign_spec("k"))
    database.execute("INSERT INTO campaigns (id, name, digest, config) VALUES (1, 'k', ?, ?)",
                     [campaign.digest, canonical_json(campaign.config).decode()])
    return database


@pytest.mark.parametrize("kept", [[1, 2, 5, 6], [1, 2], []])
def test_the_upgrade_keeps_seqs_and_no_report_is_missed_or_counted_twice(
        tmp_path: Path, kept: list[int]) -> None:
    """Seqs 1–6 were appended and 1–4 folded; gc then deleted the rest of them (AUTOINCREMENT
    made that safe). Whatever gc deleted, the next report lands above every seq a fold saw."""
    path = tmp_path / "old.db"
    database = _old_database(path)
    for seq in kept:
        database.execute("INSERT INTO reports (seq, campaign_id, report_id, time, payload) "
                         "VALUES (?, 1, ?, ?, '0')", [seq, bytes([seq]) * 16, HOUR])
    database.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('reports', 6) "
                     "ON CONFLICT DO NOTHING")
    database.execute("UPDATE sqlite_sequence SET seq = 6 WHERE name = 'reports'")
    database.execute("UPDATE fold_state SET seq = 4")
    database.conn.commit()
    database.close()

    storage = SQLiteStorage(str(path))
    storage.migrate()
    conn = sqlite3.connect(path)
    schema = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'reports'").fetchone()[0]
    assert "AUTOINCREMENT" not in schema
    assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                        "AND tbl_name = 'reports' AND sql IS NOT NULL").fetchall() == []
    assert [row[0] for row in conn.execute("SELECT seq FROM reports ORDER BY seq")] == kept
    unfolded = [seq for seq in kept if seq > 4]
    status = storage.fold_status()
    # Rows above the watermark keep it; if gc left none at or above it, it comes down to the
    # highest seq left (nothing above that was ever folded or stored).
    assert status.watermark == (4 if unfolded else max(kept, default=0))
    assert status.unfolded == len(unfolded)

    with storage.write() as write:
        storage.insert_reports(write, 1, [StoredReport(b"\xee" * 16, HOUR, '1')])
    new_seq = conn.execute("SELECT max(seq) FROM reports").fetchone()[0]
    assert new_seq > max([status.watermark, *kept])
    assert fold(storage) == len(unfolded) + 1
    assert storage.fold_status().unfolded == 0
    conn.close()
