"""The storage interface's contract, checked on every engine.

Each test runs on SQLite and on PostgreSQL in the same run (a server started for the session,
as ``--backend postgresql`` does; the SQLite case is left out of that pass, which would only
repeat it). One test per promise of :class:`chorus_collector.storage.Storage`; what a single
engine does its own way is tested beside it (``test_group_commit`` for SQLite's write turns
and checkpoints, ``test_replicas`` for replicas on one database).
"""

from __future__ import annotations

import ast
import inspect
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chorus_collector.storage as storage_package
from chorus_collector.storage import (
    CampaignRetired,
    PostgresStorage,
    SchemaError,
    SQLiteStorage,
    Storage,
    StoredCampaign,
    StoredReport,
    open_storage,
    state_array,
)
from chorus_shared import campaign_from_spec
from chorus_shared.campaign import Campaign
from helpers.support import campaign_spec

HOUR = 3600
EXPIRY = 90 * 86400  # campaigns' default report expiry

ENGINES = [pytest.param("sqlite", marks=pytest.mark.sqlite_only), "postgresql"]


@pytest.fixture(params=ENGINES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty database of each engine."""
    if request.param == "sqlite":
        return str(tmp_path / "chorus.db")
    # A real server, which `make test` installs: a missing one fails, it never skips.
    return str(request.getfixturevalue("postgres").new_schema())


@pytest.fixture
def store(url: str) -> Iterator[Storage]:
    storage = open_storage(url)
    storage.migrate()
    yield storage
    storage.close()


def _campaign(name: str = "survey", **overrides: Any) -> Campaign:
    return campaign_from_spec(campaign_spec(name, **overrides))


def _reports(count: int, time: int = HOUR, first: int = 0) -> list[StoredReport]:
    return [StoredReport(bytes([0xA0]) + (first + i).to_bytes(15, "big"), time,
                         f'"{first + i}"') for i in range(count)]


def _append(store: Storage, campaign_id: int, reports: list[StoredReport]) -> None:
    with store.write() as conn:
        store.insert_reports(conn, campaign_id, reports)


def _fold_all(store: Storage, now: float = 1.0) -> int:
    """Fold every report past the watermark, each counting one in a 1-entry state."""
    chunk = store.unfolded(10_000)
    partials = {(g.campaign_id, g.time): (g.reports, np.array([g.reports], dtype=np.int64))
                for g in chunk.groups}
    assert store.commit_fold(chunk.watermark, chunk.through, partials, now,
                             moves=chunk.moves)
    return chunk.reports


@pytest.fixture
def campaign(store: Storage) -> StoredCampaign:
    stored, created = store.insert_campaign(_campaign())
    assert created
    return stored


# -- the interface and its engines --------------------------------------------------------------

ENGINE_EXTRAS = {
    SQLiteStorage: {"db"},  # a sqlite-utils Database (migrations; the shuffler's own pool)
    PostgresStorage: set(),
}


def _public_methods(cls: type) -> set[str]:
    return {name for name, value in inspect.getmembers(cls)
            if not name.startswith("_") and callable(value) and not isinstance(value, type)}


@pytest.mark.sqlite_only
@pytest.mark.parametrize("engine", [SQLiteStorage, PostgresStorage])
def test_every_engine_implements_the_interface_and_adds_only_what_it_declares(
        engine: type[Storage]) -> None:
    assert issubclass(engine, Storage)
    assert not inspect.isabstract(engine), getattr(engine, "__abstractmethods__", ())
    extra = _public_methods(engine) - _public_methods(Storage)
    assert extra == ENGINE_EXTRAS[engine], "public methods not declared on Storage"


@pytest.mark.sqlite_only
def test_the_interface_documents_every_operation() -> None:
    undocumented = [name for name in _public_methods(Storage)
                    if not inspect.getdoc(getattr(Storage, name))]
    assert not undocumented


def _storage_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import of the storage package in a module, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module \
                and node.module.startswith("chorus_collector.storage"):
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names
                      if alias.name.startswith("chorus_collector.storage")]
    return found


@pytest.mark.sqlite_only
def test_no_engine_imports_another_and_the_package_has_no_cycle() -> None:
    package = Path(storage_package.__file__).parent
    modules = {path.stem: path for path in package.glob("*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imports = _storage_imports(path)
        targets = {module.removeprefix("chorus_collector.storage").lstrip(".") for module, _ in
                   imports}
        assert "" not in targets, f"{name} imports the package face (a cycle through it)"
        graph[name] = targets
        private = [n for _, names in imports for n in names if n.startswith("_")]
        assert not private, f"{name} imports private names {private}"
    assert "postgres" not in graph["sqlite"] and "sqlite" not in graph["postgres"]
    assert graph["interface"] <= {"values"} and graph["values"] == set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' → '.join((*path, name))}"
        for target in graph[name]:
            visit(target, (*path, name))

    for name in graph:
        visit(name, ())


# -- schema ---------------------------------------------------------------------------------------

def test_a_new_database_is_migrated_and_migrating_again_changes_nothing(url: str) -> None:
    first = open_storage(url)
    first.migrate()
    first.insert_campaign(_campaign())
    second = open_storage(url)
    second.migrate()
    assert [s.campaign.name for s in second.list_campaigns()] == ["survey"]
    assert second.fold_status().watermark == 0
    second.ping()
    first.close()
    second.close()


def test_a_database_from_a_newer_version_is_refused(store: Storage, url: str) -> None:
    with store.write() as conn:
        if isinstance(store, SQLiteStorage):
            conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                         "VALUES ('chorus', 'm999_from_the_future', 'later')")
        else:
            conn.execute("INSERT INTO chorus_migrations (name) VALUES ('p999_from_the_future')")
    with pytest.raises(SchemaError, match="does not know"):
        open_storage(url).migrate()


# -- campaigns ------------------------------------------------------------------------------------

def test_a_campaign_is_found_by_name_digest_and_id(store: Storage,
                                                    campaign: StoredCampaign) -> None:
    assert store.get_campaign("survey") == campaign
    assert store.get_campaign_by_digest(campaign.campaign.digest) == campaign
    assert store.get_campaign_by_id(campaign.id) == campaign
    assert campaign.campaign.digest == _campaign().digest


def test_an_unknown_campaign_is_none_by_name_and_digest_and_a_key_error_by_id(
        store: Storage) -> None:
    assert store.get_campaign("nobody") is None
    assert store.get_campaign_by_digest("00" * 32) is None
    with pytest.raises(KeyError):
        store.get_campaign_by_id(404)


@pytest.mark.parametrize("name", ["a\x00b", "'\u00ca\x00^\udbb2\udcc5", "Survey", "survey\n", ""])
def test_a_name_no_campaign_can_bear_is_none_on_every_backend(store: Storage,
                                                               campaign: StoredCampaign,
                                                               name: str) -> None:
    # PostgreSQL refuses NUL and lone surrogates in text; a lookup by whatever a request
    # carried answers "no such campaign" rather than raising (CI found a 500 through alerts).
    assert store.get_campaign(name) is None
    assert store.get_campaign_by_digest(name) is None


def test_the_same_campaign_again_is_no_error_and_another_under_its_name_is_refused(
        store: Storage, campaign: StoredCampaign) -> None:
    assert store.insert_campaign(_campaign()) == (campaign, False)
    with pytest.raises(FileExistsError):
        store.insert_campaign(_campaign(epsilon=0.5))
    assert store.list_campaigns() == [campaign]


def test_campaigns_are_listed_in_the_order_they_were_created(store: Storage) -> None:
    names = ["c", "a", "b"]
    for name in names:
        store.insert_campaign(_campaign(name))
    assert [s.campaign.name for s in store.list_campaigns()] == names


def test_a_campaign_is_retired_once_and_the_first_time_holds(
        store: Storage, campaign: StoredCampaign) -> None:
    assert store.retired_at(campaign.id) is None
    assert store.retire_campaign(campaign.id, 100.0) == 100.0
    assert store.retire_campaign(campaign.id, 200.0) == 100.0
    assert store.retired_at(campaign.id) == 100.0
    assert store.get_campaign("survey") == campaign  # the name and the estimates stay


def test_a_retirement_is_seen_at_once_by_another_storage_of_the_database(
        store: Storage, campaign: StoredCampaign, url: str) -> None:
    other = open_storage(url)
    assert other.retired_at(campaign.id) is None
    store.retire_campaign(campaign.id, 5.0)
    assert other.retired_at(campaign.id) == 5.0
    other.close()


# -- appending reports ----------------------------------------------------------------------------

def test_appended_reports_are_found_by_id_with_their_time_and_payload(
        store: Storage, campaign: StoredCampaign) -> None:
    reports = _reports(3)
    _append(store, campaign.id, reports)
    with store.write() as conn:
        found = store.existing_reports(conn, campaign.id, [r.report_id for r in reports[:2]]
                                       + [b"\xff" * 16])
    assert found == {r.report_id: (r.time, r.payload_json) for r in reports[:2]}


def test_a_report_id_is_stored_once_per_campaign(store: Storage,
                                                 campaign: StoredCampaign) -> None:
    reports = _reports(2)
    _append(store, campaign.id, reports)
    with pytest.raises(store.retryable_errors), store.write() as conn:
        store.insert_reports(conn, campaign.id, reports[:1])
    other, _ = store.insert_campaign(_campaign("other"))
    _append(store, other.id, reports[:1])  # another campaign's ID space
    assert store.fold_status().unfolded == 3
    assert store.report_counts() == {campaign.id: {HOUR: 2}, other.id: {HOUR: 1}}


def test_new_reports_are_appended_only_if_none_is_stored_yet(
        store: Storage, campaign: StoredCampaign) -> None:
    with store.write() as conn:
        assert store.insert_new_reports(conn, campaign.id, _reports(2))
        # One known ID among new ones: nothing of the batch is appended.
        assert not store.insert_new_reports(conn, campaign.id, _reports(3, first=1))
    assert store.fold_status().unfolded == 2


@pytest.mark.parametrize("size", [1, 150])  # one statement; several (or a COPY)
def test_an_append_to_a_retired_campaign_stores_nothing_and_says_so(
        store: Storage, campaign: StoredCampaign, size: int) -> None:
    other, _ = store.insert_campaign(_campaign("other"))
    with store.write() as conn:
        assert store.insert_new_reports(conn, campaign.id, _reports(2, first=1000))
    store.retire_campaign(campaign.id, 5.0)
    with store.write() as conn:
        # Refused as retired whether the IDs are new or stored already; the transaction
        # goes on (another campaign's append in it commits).
        for reports in (_reports(size), _reports(2, first=1000)):
            with pytest.raises(CampaignRetired) as refused:
                store.insert_new_reports(conn, campaign.id, reports)
            assert refused.value.campaign_id == campaign.id
        assert store.insert_new_reports(conn, other.id, _reports(size))
    assert store.report_counts() == {campaign.id: {HOUR: 2}, other.id: {HOUR: size}}


def test_after_gc_dropped_the_newest_reports_new_ones_land_above_the_watermark(
        store: Storage, campaign: StoredCampaign) -> None:
    """gc drops only folded reports, the newest among them too; a report appended after must
    still land above the watermark, or no fold would ever count it (SQLite hands out one
    more than the highest seq left)."""
    _append(store, campaign.id, _reports(3, time=HOUR))
    _fold_all(store)
    assert store.drop_expired(HOUR + EXPIRY + 60, margin=0) == 3
    assert store.report_range(0, 10**9) == []
    watermark = store.fold_status().watermark
    _append(store, campaign.id, _reports(2, time=3 * HOUR, first=10))
    assert [row[0] > watermark for row in store.report_range(0, 10**9)] == [True] * 2
    assert store.fold_status().unfolded == 2
    assert _fold_all(store) == 2
    assert [(t, n) for t, n, _ in store.folded_statistics(campaign.id).buckets] == [
        (HOUR, 3), (3 * HOUR, 2)]
    assert store.folded_statistics(campaign.id).retired == {HOUR: 3}
    assert store.report_counts() == {campaign.id: {HOUR: 3, 3 * HOUR: 2}}


def test_reports_take_seqs_in_append_order_ordered_by_id_within_a_write(
        store: Storage, campaign: StoredCampaign) -> None:
    first, second = _reports(3, first=10), _reports(2, first=0)
    _append(store, campaign.id, list(reversed(first)))
    _append(store, campaign.id, second)
    rows = store.report_range(0, store.append_horizon())
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)
    assert [payload for *_, payload in rows] == ['"10"', '"11"', '"12"', '"0"', '"1"']
    assert store.append_horizon() == rows[-1][0]
    assert store.report_range(rows[1][0], rows[3][0], campaign.id) == rows[2:4]
    assert store.report_range(0, rows[-1][0], limit=2) == rows[:2]


def test_a_stream_of_reports_is_one_campaigns_in_append_order_up_to_a_seq(
        store: Storage, campaign: StoredCampaign) -> None:
    other, _ = store.insert_campaign(_campaign("other"))
    for first in (0, 10, 20):  # the two campaigns' rows interleaved in the append order
        _append(store, campaign.id, _reports(3, first=first))
        _append(store, other.id, _reports(2, first=first))
    everything = store.report_range(0, store.append_horizon())
    mine = [(seq, time, payload) for seq, cid, time, payload in everything
            if cid == campaign.id]
    through = mine[-2][0]  # the last report is past the end
    batches = list(store.stream_reports(campaign.id, through, 3))
    assert [len(b) for b in batches] == [3, 3, 2]
    assert [row for b in batches for row in b] == mine[:-1]
    # Closed before its end, a stream leaves the connection usable (no open transaction).
    stream = store.stream_reports(campaign.id, through, 2)
    assert next(stream) == mine[:2]
    stream.close()
    with store.write() as conn:
        store.insert_reports(conn, campaign.id, _reports(1, first=99))


def test_a_write_commits_when_its_block_ends_and_rolls_back_on_an_exception(
        store: Storage, campaign: StoredCampaign) -> None:
    def failing() -> None:
        with store.write() as conn:
            store.insert_reports(conn, campaign.id, _reports(2))
            raise RuntimeError("fails before the commit")

    with pytest.raises(RuntimeError):
        failing()
    assert store.fold_status().unfolded == 0
    _append(store, campaign.id, _reports(2))
    assert store.fold_status().unfolded == 2


def test_a_write_whose_commit_is_refused_stores_nothing_and_the_next_one_goes_through(
        store: Storage, campaign: StoredCampaign) -> None:
    # A deferred foreign key is checked at COMMIT, which refuses it. SQLite then keeps the
    # transaction open: left so, this thread's next write failed to begin.
    with store.write() as conn:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute("CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) "
                     "DEFERRABLE INITIALLY DEFERRED)")

    def refused() -> None:
        with store.write() as conn:
            store.insert_reports(conn, campaign.id, _reports(2))
            conn.execute("INSERT INTO child VALUES (1)")  # no parent 1

    with pytest.raises(Exception, match=r"(?i)foreign key"):
        refused()
    assert store.fold_status().unfolded == 0
    _append(store, campaign.id, _reports(2))
    assert store.fold_status().unfolded == 2


def test_grouped_writes_all_commit_and_a_failing_one_rolls_back_alone(
        store: Storage, campaign: StoredCampaign) -> None:
    errors: list[BaseException] = []

    def writer(number: int) -> None:
        def work(conn: Any) -> int:
            store.insert_reports(conn, campaign.id, _reports(5, first=10 * number))
            if number == 3:
                raise ValueError("this writer's own problem")
            return number

        try:
            assert store.grouped_write(work) == number
        except ValueError as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(errors) == 1
    assert store.fold_status().unfolded == 25


def test_a_shuffled_batch_is_counted_per_bucket_with_its_smallest_size_and_senders(
        store: Storage, campaign: StoredCampaign) -> None:
    with store.write() as conn:
        store.record_shuffled_batch(conn, campaign.id, {HOUR: 30, 2 * HOUR: 0})
        store.record_shuffled_batch(conn, campaign.id, {HOUR: 20, 2 * HOUR: 5},
                                    {HOUR: 12, 2 * HOUR: 5})
    assert store.shuffled_totals(campaign.id, None, None) == (3, 55, 5, 2, 5)
    assert store.shuffled_totals(campaign.id, HOUR, 2 * HOUR) == (2, 50, 20, 1, 12)
    assert store.shuffled_totals(campaign.id, 3 * HOUR, None) == (0, 0, None, 0, None)


# -- folding --------------------------------------------------------------------------------------

def test_unfolded_reports_come_in_chunks_grouped_by_campaign_and_bucket(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(3, time=HOUR) + _reports(2, time=2 * HOUR, first=3))
    assert store.any_unfolded()
    chunk = store.unfolded(4)
    assert (chunk.watermark, chunk.reports) == (0, 4)
    assert sorted((g.campaign_id, g.time, g.reports) for g in chunk.groups) == [
        (campaign.id, HOUR, 3), (campaign.id, 2 * HOUR, 1)]
    payloads = sorted(p for g in chunk.groups for p in g.parsed())
    assert payloads == ["0", "1", "2", "3"]
    assert chunk.groups == sorted(store.payload_groups(0, chunk.through))


def test_a_fold_moves_the_watermark_and_adds_its_statistics(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(3))
    assert _fold_all(store, now=7.0) == 3
    status = store.fold_status()
    assert (status.unfolded, status.folded_at) == (0, 7.0)
    assert not store.any_unfolded()
    _append(store, campaign.id, _reports(2, first=3))
    assert _fold_all(store) == 2
    folded = store.folded_statistics(campaign.id)
    assert folded.watermark == store.fold_status().watermark
    assert [(t, n, list(state_array(s))) for t, n, s in folded.buckets] == [(HOUR, 5, [5])]
    assert store.unfolded(10).reports == 0


def test_a_fold_from_a_stale_watermark_changes_nothing(store: Storage,
                                                       campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(3))
    chunk = store.unfolded(10)
    partials = {(campaign.id, HOUR): (3, np.array([3], dtype=np.int64))}
    assert store.commit_fold(chunk.watermark, chunk.through, partials, 1.0,
                             moves=chunk.moves)
    assert not store.commit_fold(chunk.watermark, chunk.through, partials, 2.0,
                                 moves=chunk.moves)
    assert store.folded_statistics(campaign.id).buckets[0][1] == 3
    assert store.fold_status().folded_at == 1.0


def test_a_stalled_fold_cannot_commit_after_gc_brought_the_watermark_back(
        store: Storage, campaign: StoredCampaign) -> None:
    """Fold X reads seqs 2–3 and stalls; fold Y folds them; gc drops them, expired, and on
    SQLite (whose next seq is one more than the highest left) lowers the watermark back to
    1, the value X read. X's commit must still fail: it counted 2–3 twice, and the next
    report, at a seq under the watermark it set, was never folded."""
    now = 10 * EXPIRY
    _append(store, campaign.id, _reports(1, time=now // HOUR * HOUR))  # seq 1, fresh
    _fold_all(store)
    _append(store, campaign.id, _reports(2, time=HOUR, first=1))  # seqs 2 and 3, expired
    stalled = store.unfolded(10)
    partials = {(campaign.id, HOUR): (2, np.array([2], dtype=np.int64))}
    assert _fold_all(store) == 2  # fold Y
    assert store.drop_expired(now, margin=0) == 2
    assert not store.commit_fold(stalled.watermark, stalled.through, partials, 3.0,
                                 moves=stalled.moves)
    folded = store.folded_statistics(campaign.id)
    assert [(t, n) for t, n, _ in folded.buckets if t == HOUR] == [(HOUR, 2)]
    assert folded.retired == {HOUR: 2}
    _append(store, campaign.id, _reports(1, time=now // HOUR * HOUR, first=3))
    assert store.fold_status().unfolded == 1  # past the watermark, to be folded
    assert _fold_all(store) == 1
    assert sum(store.report_counts()[campaign.id].values()) == 4


def test_a_fold_that_fails_midway_leaves_statistics_and_watermark_as_they_were(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(3))
    chunk = store.unfolded(10)

    def crash(step: str) -> None:
        if step == "merge":
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        store.commit_fold(chunk.watermark, chunk.through,
                          {(campaign.id, HOUR): (3, np.array([3]))}, 1.0, step=crash,
                          moves=chunk.moves)
    assert store.fold_status().watermark == 0 and store.folded_statistics(campaign.id).buckets == []


def test_the_fold_lease_is_held_by_one_holder_until_it_expires_or_is_released(
        store: Storage) -> None:
    assert store.claim_fold("a", now=100.0, lease=10.0)
    assert store.claim_fold("a", now=101.0, lease=10.0)  # its holder renews it
    assert not store.claim_fold("b", now=105.0, lease=10.0)
    assert store.claim_fold("b", now=112.0, lease=10.0)  # a's lease ran out
    store.release_fold("a")  # not a's any more: nothing changes
    assert not store.claim_fold("a", now=113.0, lease=10.0)
    store.release_fold("b")
    assert store.claim_fold("a", now=113.0, lease=10.0)


# -- reads ----------------------------------------------------------------------------------------

def test_a_window_reads_folded_statistics_and_the_unfolded_tail_of_its_buckets(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(2, time=HOUR) + _reports(1, time=2 * HOUR, first=2))
    _fold_all(store)
    _append(store, campaign.id, _reports(1, time=2 * HOUR, first=3)
            + _reports(1, time=3 * HOUR, first=4))
    window = store.window_snapshot(campaign.id, 1, HOUR, 3 * HOUR)  # start <= time < end
    assert (window.n, list(window.state), window.tail) == (3, [3], [(2 * HOUR, '"3"')])
    buckets = store.bucket_snapshot(campaign.id, 2 * HOUR, None)
    assert [(t, n) for t, n, _ in buckets.buckets] == [(2 * HOUR, 1)]
    assert sorted(buckets.tail) == [(2 * HOUR, '"3"'), (3 * HOUR, '"4"')]
    everything = store.window_snapshot(campaign.id, 1, None, None)
    assert everything.n + len(everything.tail) == 5
    assert everything.folded_at == store.fold_status().folded_at


def test_the_time_span_covers_folded_and_unfolded_buckets(store: Storage,
                                                          campaign: StoredCampaign) -> None:
    assert store.time_span(campaign.id) is None
    _append(store, campaign.id, _reports(1, time=2 * HOUR))
    _fold_all(store)
    assert store.time_span(campaign.id) == (2 * HOUR, 2 * HOUR)
    _append(store, campaign.id, _reports(1, time=5 * HOUR, first=1)
            + _reports(1, time=HOUR, first=2))
    assert store.time_span(campaign.id) == (HOUR, 5 * HOUR)


def test_report_counts_add_folded_and_unfolded_reports_per_bucket(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(2, time=HOUR) + _reports(2, time=2 * HOUR, first=2))
    _fold_all(store)
    _append(store, campaign.id, _reports(1, time=2 * HOUR, first=4))
    assert store.report_counts() == {campaign.id: {HOUR: 2, 2 * HOUR: 3}}
    assert store.report_counts(since=2 * HOUR) == {campaign.id: {2 * HOUR: 3}}


def test_folded_reports_are_read_back_in_time_order_up_to_a_watermark(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(1, time=2 * HOUR) + _reports(1, time=HOUR, first=1))
    _fold_all(store)
    watermark = store.fold_status().watermark
    _append(store, campaign.id, _reports(1, time=HOUR, first=2))
    assert list(store.folded_report_rows(campaign.id, watermark)) == [
        (HOUR, '"1"'), (2 * HOUR, '"0"')]


# -- retention ------------------------------------------------------------------------------------

def test_gc_drops_only_folded_expired_reports_and_keeps_their_count_and_statistics(
        store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(3, time=HOUR) + _reports(2, time=3 * HOUR, first=3))
    now = HOUR + EXPIRY + 60  # the first bucket expired 60 s ago
    assert store.drop_expired(now, margin=0) == 0  # not folded: they fed nothing yet
    _fold_all(store)
    assert store.drop_expired(now, margin=HOUR) == 0  # within the margin: kept
    assert store.drop_expired(now, margin=30) == 3
    assert store.drop_expired(now, margin=30) == 0
    folded = store.folded_statistics(campaign.id)
    assert folded.retired == {HOUR: 3}
    assert [(t, n) for t, n, _ in folded.buckets] == [(HOUR, 3), (3 * HOUR, 2)]
    assert store.report_counts() == {campaign.id: {HOUR: 3, 3 * HOUR: 2}}
    assert [row[2] for row in store.report_range(0, store.append_horizon())] == [3 * HOUR] * 2
    # An ID whose report was dropped is gone from the lookup too.
    with store.write() as conn:
        assert store.existing_reports(conn, campaign.id, [_reports(1)[0].report_id]) == {}


def test_upkeep_runs_on_a_live_database(store: Storage, campaign: StoredCampaign) -> None:
    _append(store, campaign.id, _reports(2))
    store.maintain(1_767_225_600.0)
    assert store.fold_status().unfolded == 2
