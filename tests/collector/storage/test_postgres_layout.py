"""PostgreSQL's compact reports table (migration p009): what its layout promises.

The ID's key is a hash exclusion constraint and the append order a BRIN on seq, so the
storage checks here what the btrees gave for free: the bytes a report takes, a lookup of IDs
that probes the key's index, a fold horizon taken from the sequence (never below a committed
seq), pages of the append order that cross gaps in the seqs, and the upgrade of a database
that holds reports. PostgreSQL only (``--backend postgresql``).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from chorus_collector.jobs.folding import fold
from chorus_collector.storage import StoredReport, open_storage
from chorus_collector.storage.postgres import APPEND_LOCK, LAST_SEQ, MIGRATIONS, PostgresStorage
from chorus_shared.campaign import campaign_from_spec
from helpers.support import NOW, campaign_spec, query

pytestmark = pytest.mark.postgresql_only

T = int(NOW) // 3600 * 3600


def _storage(url: str) -> tuple[PostgresStorage, int]:
    storage = open_storage(url)
    assert isinstance(storage, PostgresStorage)
    storage.migrate()
    stored, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("layout")))
    return storage, stored.id


def _reports(rng: random.Random, count: int) -> list[StoredReport]:
    return [StoredReport(rng.randbytes(16), T, str(rng.randrange(8))) for _ in range(count)]


def _append(storage: PostgresStorage, campaign_id: int, reports: list[StoredReport]) -> None:
    with storage.write() as conn:
        storage.insert_reports(conn, campaign_id, reports)


def test_a_report_takes_fewer_bytes_than_with_the_btrees(postgres: Any) -> None:
    # 20,000 reports with a one-digit payload: the row is 68 bytes with its line pointer;
    # the primary key and the seq btree took 143 in all, the hash key and the BRIN 111.
    storage, campaign_id = _storage(postgres.new_schema())
    rng = random.Random(1)
    for _ in range(20):
        _append(storage, campaign_id, _reports(rng, 1000))
    conn = storage.connect()
    size = conn.execute("SELECT pg_total_relation_size('reports')").fetchone()[0]
    assert size / 20_000 < 120
    kinds = dict(conn.execute(
        "SELECT c.relname, a.amname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'reports'::regclass").fetchall())
    assert kinds == {"reports_key": "hash", "reports_by_seq": "brin"}
    storage.close()


def test_looking_up_ids_probes_the_key_index(postgres: Any) -> None:
    storage, campaign_id = _storage(postgres.new_schema())
    other, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("other")))
    rng = random.Random(2)
    reports = _reports(rng, 3000)
    _append(storage, campaign_id, reports)
    _append(storage, other.id, reports[:10])  # the same IDs in another campaign
    conn = storage.connect()
    conn.execute("ANALYZE reports")
    wanted = [r.report_id for r in reports[:5]] + [rng.randbytes(16)]
    found = storage.existing_reports(conn, campaign_id, wanted)
    assert found == {r.report_id: (r.time, r.payload_json) for r in reports[:5]}
    assert set(storage.existing_reports(conn, other.id, wanted)) == set(wanted[:5])
    # The plan of the lookup itself, with its own SQL (the keys as the constraint's expression).
    conn.execute("SET enable_seqscan = off")  # a small table: the index must be usable
    plan = "\n".join(row[0] for row in conn.execute(
        "EXPLAIN SELECT report_id FROM reports WHERE (int4send(campaign_id) || report_id) "
        "= ANY(?::bytea[]) AND campaign_id = ?",
        ([campaign_id.to_bytes(4, "big") + w for w in wanted], campaign_id)))
    assert "reports_key" in plan, plan
    storage.close()


def test_the_horizon_comes_from_the_sequence_and_covers_every_committed_seq(
        postgres: Any) -> None:
    storage, campaign_id = _storage(postgres.new_schema())
    assert storage.append_horizon() == 0  # a fresh sequence has handed out nothing
    rng = random.Random(3)
    _append(storage, campaign_id, _reports(rng, 3))
    assert storage.append_horizon() == 3
    # A rolled-back append took a seq: the horizon passes it (none can commit at it later).
    def rolled_back() -> None:
        with storage.write() as conn:
            storage.insert_reports(conn, campaign_id, _reports(rng, 2))
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert storage.append_horizon() == 5
    _append(storage, campaign_id, _reports(rng, 1))
    [(highest,)] = query(storage.path, "SELECT max(seq) FROM reports")
    assert highest == 6 and storage.append_horizon() == 6
    assert fold(storage) == 4
    assert storage.fold_status().watermark == 6
    storage.close()


@pytest.mark.parametrize("count", [1, 3], ids=["alone", "a-group"])
def test_an_append_that_commits_alone_takes_the_append_lock_before_its_seq(
        postgres: Any, count: int) -> None:
    """Single reports go in one statement that is its own transaction (no BEGIN, no
    COMMIT): the statement must hold the append lock, shared, before its rows take seqs, or
    a fold could read a horizon above a seq not committed yet and never fold that report.
    While the fold's exclusive lock is held, the append waits with no seq taken."""
    storage, campaign_id = _storage(postgres.new_schema())
    rng = random.Random(5)
    _append(storage, campaign_id, _reports(rng, 2))
    reports = _reports(rng, count)
    outcome: list[list[bool | None]] = []

    def append() -> None:
        conn = storage.connect()
        storage._begin_write(conn)
        outcome.append(storage._append_together(
            conn, [(campaign_id, r) for r in reports], commit=True))

    fold_side = PostgresStorage(storage.path)
    conn = fold_side.connect()
    conn.execute("BEGIN")
    conn.execute("SELECT pg_advisory_xact_lock(?)", (APPEND_LOCK,))
    worker = threading.Thread(target=append, daemon=True)
    worker.start()
    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    try:
        for _ in range(3000):  # up to 30 s (a loaded machine) for the append to reach it
            if conn.execute(waiting).fetchone()[0]:
                break
            time.sleep(0.01)
        assert conn.execute(waiting).fetchone()[0] == 1, "the append never waited for the lock"
        # The horizon as the fold reads it, inside the lock: no seq was handed out past it.
        assert conn.execute(LAST_SEQ).fetchone()[0] == 2
    finally:  # the lock goes whatever failed, or the append (and the schema's drop) waits
        conn.execute("COMMIT")
        worker.join(timeout=30)
    assert outcome == [[True] * count]
    assert storage.append_horizon() == 2 + count
    assert fold(storage) == 2 + count
    fold_side.close()
    storage.close()


def test_pages_of_the_append_order_cross_gaps_wider_than_a_page(postgres: Any) -> None:
    storage, campaign_id = _storage(postgres.new_schema())
    other, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("other")))
    rng = random.Random(4)
    _append(storage, campaign_id, _reports(rng, 5))
    query(storage.path, "SELECT setval('reports_seq', 1000)")  # seqs 6 to 1000: never taken
    _append(storage, other.id, _reports(rng, 40))  # another campaign's run between
    _append(storage, campaign_id, _reports(rng, 5))
    storage.tail_page = 3
    conn = storage.connect()
    storage._begin_read(conn)
    try:
        pages = list(storage._tail_pages(conn, campaign_id, 0, None))
    finally:
        conn.execute("COMMIT")
    # Full pages, as ORDER BY seq LIMIT gave: the second one found across the gap.
    assert [(page.after, page.through) for page in pages] == [
        (0, 3), (3, 1041), (1041, 1044), (1044, 1045)]
    assert [sum(group.reports for group in page.groups) for page in pages] == [3, 3, 3, 1]

    chunks = []
    while (chunk := storage.unfolded(3)).reports:
        chunks.append(chunk.reports)
        assert storage.commit_fold(chunk.watermark, chunk.through, {}, NOW,
                                      moves=chunk.moves)
    assert chunks == [3] * 16 + [2]
    assert storage.fold_status().watermark == 1045
    assert [row[0] for row in storage.report_range(0, 1045, campaign_id, limit=4)] == [1, 2, 3, 4]
    assert [row[0] for row in storage.report_range(5, 1045, campaign_id, limit=4)] == [
        1041, 1042, 1043, 1044]
    storage.close()


def _database_before_p009(url: str) -> None:
    statements = ["CREATE TABLE chorus_migrations (name TEXT PRIMARY KEY, "
                  "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"]
    for name, steps in MIGRATIONS:
        if name == "p009_compact_reports":
            break
        statements += [*steps, f"INSERT INTO chorus_migrations (name) VALUES ('{name}')"]
    for statement in statements:
        query(url, statement)


def test_an_upgrade_to_the_compact_layout_keeps_every_report(postgres: Any) -> None:
    url = postgres.new_schema()
    _database_before_p009(url)
    old = open_storage(url)  # not migrated: as the version before left it
    stored, _ = old.insert_campaign(campaign_from_spec(campaign_spec("layout")))
    rng = random.Random(5)
    reports = _reports(rng, 300)
    query(url, "INSERT INTO reports (campaign_id, report_id, time, payload) "
               "SELECT ?, * FROM unnest(?::bytea[], ?::bigint[], ?::text[])",
          stored.id, [r.report_id for r in reports], [r.time for r in reports],
          [r.payload_json for r in reports])
    query(url, "UPDATE fold_state SET seq = 100")
    before = query(url, "SELECT seq, campaign_id, report_id, time, payload FROM reports "
                        "ORDER BY seq")
    old.close()

    storage = open_storage(url)
    storage.migrate()
    assert query(url, "SELECT seq, campaign_id, report_id, time, payload FROM reports "
                      "ORDER BY seq") == before
    assert query(url, "SELECT contype FROM pg_constraint "
                      "WHERE conrelid = 'reports'::regclass") == [("x",)]
    # Upgraded: a stored ID is found and refused again, the fold goes on from its watermark.
    with storage.write() as conn:
        assert set(storage.existing_reports(conn, stored.id, [reports[0].report_id])) == {
            reports[0].report_id}
        assert not storage.insert_new_reports(conn, stored.id, [reports[7]])
        assert storage.insert_new_reports(conn, stored.id, _reports(rng, 1))
    assert query(url, "SELECT count(*) FROM reports") == [(301,)]
    assert fold(storage) == 201
    [(highest,)] = query(url, "SELECT max(seq) FROM reports")
    assert storage.fold_status().watermark == highest > 300
    storage.close()


def test_a_read_compiles_nothing_though_sequential_scans_are_priced_out(postgres: Any) -> None:
    """Reads turn sequential scans off (to go through the BRIN), which prices a scan of the
    sequence at 10¹⁰, past every JIT threshold: each such statement was
    JIT-compiled first (30–110 ms for a 0.05 ms read; a window comparison took 230 s instead
    of 6). A read's statements run without JIT, and take the plans they would otherwise."""
    storage, campaign_id = _storage(postgres.new_schema())
    _append(storage, campaign_id, _reports(random.Random(4), 50))
    conn = storage.connect()
    with storage._reading():
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) SELECT CASE WHEN is_called THEN "
                            "last_value ELSE last_value - 1 END FROM reports_seq").fetchone()[0]
    assert plan[0]["Plan"]["Total Cost"] > 1e9  # priced out, as the docstring says
    assert "JIT" not in plan[0], plan[0]["JIT"]
    storage.close()
