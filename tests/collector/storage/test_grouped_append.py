"""Single reports in a group commit (Storage.grouped_append): on PostgreSQL a group's single
reports are appended in one statement (one round trip instead of one each); on every backend
each caller gets its own outcome, as if it had been alone, and nothing is stored twice.

The group is made deterministic: a first writer holds the lead while the others queue, so
they all run in the next group. Run on SQLite, and on PostgreSQL with ``--backend
postgresql`` (a real server).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from chorus_collector import create_app
from chorus_collector.storage import CampaignRetired, StoredReport, open_storage
from chorus_collector.storage.sql import SQLStorage
from chorus_shared.campaign import campaign_from_spec
from helpers.support import ADMIN, ADMIN_HEADERS, FakeClock, campaign_spec, make_report, query

BUCKET = 1_700_000_000 // 3600 * 3600


def _storage(database: str) -> SQLStorage:
    storage = open_storage(database)
    assert isinstance(storage, SQLStorage)
    storage.migrate()
    return storage


def _in_one_group(storage: SQLStorage, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` (each a grouped write or append) from threads queued behind a leader
    that waits until all of them are queued: they run as the next group. Each call's
    result, or the exception it raised."""
    entered, release = threading.Event(), threading.Event()
    outcomes: list[Any] = [None] * len(calls)

    def hold(conn: Any) -> None:
        del conn
        entered.set()
        assert release.wait(timeout=30)

    leader = threading.Thread(target=storage.grouped_write, args=(hold,))
    leader.start()
    assert entered.wait(timeout=30)  # leading its group, taken off the queue
    deadline = time.monotonic() + 30

    def run(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except Exception as error:
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    while len(storage._group_queue) < len(calls) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(storage._group_queue) == len(calls)  # every call, in the next group
    release.set()
    for thread in [leader, *threads]:
        thread.join(timeout=30)
    return outcomes


def _off_main(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread of its own, as a server's request runs (the main thread writes
    alone: ``SQLStorage._alone``); its result, or the exception it raised, raised here."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert outcome, "the call did not return"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _rows(database: str) -> list[tuple[Any, ...]]:
    return [(int(c), bytes(r), str(p)) for c, r, p in query(
        database, "SELECT campaign_id, report_id, payload FROM reports "
        "ORDER BY campaign_id, report_id, payload")]


def test_each_single_report_of_a_group_gets_its_own_outcome(
        database: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    other, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("other")))
    gone, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("gone")))
    storage.retire_campaign(gone.id, 1.0)
    a, b = bytes(range(16)), bytes(range(1, 17))
    with storage.write() as conn:
        storage.insert_reports(conn, live.id, [StoredReport(b, BUCKET, "7")])
    statements: list[int] = []
    original = storage._append_together

    def spy(conn: Any, appends: list[tuple[int, StoredReport]], *,
            commit: bool = False) -> list[bool | None]:
        statements.append(len(appends))
        return original(conn, appends, commit=commit)

    monkeypatch.setattr(storage, "_append_together", spy)
    plain: list[str] = []
    outcomes = _in_one_group(storage, [
        lambda: storage.grouped_append(live.id, StoredReport(a, BUCKET, "1")),
        lambda: storage.grouped_append(live.id, StoredReport(b, BUCKET, "2")),  # stored before
        lambda: storage.grouped_append(live.id, StoredReport(a, BUCKET, "3")),  # A again
        lambda: storage.grouped_append(gone.id, StoredReport(bytes(16), BUCKET, "4")),
        lambda: storage.grouped_append(other.id, StoredReport(a, BUCKET, "5")),  # A elsewhere
        lambda: storage.grouped_write(lambda conn: plain.append("ran")),
    ])
    assert outcomes[:3] == [True, False, False]
    assert isinstance(outcomes[3], CampaignRetired) and outcomes[3].campaign_id == gone.id
    assert outcomes[4] is True and outcomes[5] is None and plain == ["ran"]
    # The first copy of A in the group is the one stored; B keeps its stored copy.
    assert _rows(database) == sorted([(live.id, a, "1"), (live.id, b, "7"),
                                      (other.id, a, "5")])
    # PostgreSQL: one statement for the four distinct keys (A's repeat never reached it).
    assert statements == ([4] if backend == "postgresql" else [])


def test_a_failed_group_append_fails_its_callers_and_the_rest_commits(
        database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadlock with another replica fails the statement: each of its callers gets the
    error (ingest retries it), and the rest of the group still commits."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))

    def fails(conn: Any, appends: list[tuple[int, StoredReport]], *,
              commit: bool = False) -> list[bool | None]:
        conn.execute("INSERT INTO reports (campaign_id, report_id, time, payload) "
                     "VALUES (?, ?, ?, ?)", (live.id, bytes(16), BUCKET, "1"))
        conn.execute("SELECT * FROM no_such_table")  # fails after writing a row
        raise AssertionError("unreachable")

    monkeypatch.setattr(storage, "combines_appends", True)  # SQLite too
    monkeypatch.setattr(storage, "_append_together", fails)
    outcomes = _in_one_group(storage, [
        lambda: storage.grouped_append(live.id, StoredReport(bytes(range(16)), BUCKET, "1")),
        lambda: storage.grouped_append(live.id, StoredReport(bytes(range(1, 17)), BUCKET, "2")),
        lambda: storage.grouped_write(lambda conn: storage.insert_reports(
            conn, live.id, [StoredReport(bytes(range(2, 18)), BUCKET, "3")])),
    ])
    assert all(isinstance(outcome, Exception) for outcome in outcomes[:2])
    assert outcomes[2] is None
    assert _rows(database) == [(live.id, bytes(range(2, 18)), "3")]  # the failed row is gone


@pytest.mark.parametrize("same", [True, False], ids=["same-report", "other-time"])
def test_one_id_sent_from_many_threads_at_once_is_stored_once(database: str,
                                                              same: bool) -> None:
    """Through the app: 8 concurrent requests with one report ID (the same report, or with
    another time each) give one 201 and, for the rest, 200 duplicate or 409 conflict."""
    app = create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN}, clock=FakeClock())
    client = app.test_client()
    reply = client.post("/v1/campaigns", headers=ADMIN_HEADERS,
                        json=campaign_spec("ids", time_precision=3600))
    assert reply.status_code == 201, reply.get_json()
    config = reply.get_json()
    storage = app.extensions["chorus.storage"]
    rng = random.Random(5)
    for trial in range(10):
        report = make_report(config, "a", rng)
        copies = [dict(report, time=report["time"] - (0 if same else i * 3600))
                  for i in range(8)]
        codes = _in_one_group(storage, [
            lambda copy=copy: app.test_client().post(  # type: ignore[misc]
                "/v1/reports", json=copy).status_code for copy in copies])
        assert sorted(codes) == sorted([201] + [200 if same else 409] * 7), (trial, codes)
        stored = query(database, "SELECT count(*) FROM reports WHERE report_id = ?",
                       bytes.fromhex(report["report_id"]))
        assert stored[0][0] == 1


def _statements(storage: SQLStorage, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """What each ``_append_together`` call gets from now on: (its reports, ``commit``)."""
    statements: list[tuple[int, bool]] = []
    original = storage._append_together

    def spy(conn: Any, appends: list[tuple[int, StoredReport]], *,
            commit: bool = False) -> list[bool | None]:
        statements.append((len(appends), commit))
        return original(conn, appends, commit=commit)

    monkeypatch.setattr(storage, "_append_together", spy)
    return statements


def test_a_report_alone_in_its_group_gets_its_outcome_committed(
        database: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single report with no other writer at the time: on PostgreSQL appended and
    committed in one round trip (``_append_together`` with ``commit``), with the same
    outcomes as in a group, each durable (read from another connection) on return."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    gone, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("gone")))
    storage.retire_campaign(gone.id, 1.0)
    statements = _statements(storage, monkeypatch)
    a, b = bytes(range(16)), bytes(range(1, 17))

    def append(campaign_id: int, report: StoredReport) -> bool:
        return bool(_off_main(lambda: storage.grouped_append(campaign_id, report)))

    assert append(live.id, StoredReport(a, BUCKET, "1")) is True
    assert _rows(database) == [(live.id, a, "1")]
    assert append(live.id, StoredReport(a, BUCKET - 3600, "2")) is False
    with pytest.raises(CampaignRetired):
        append(gone.id, StoredReport(b, BUCKET, "3"))
    assert append(live.id, StoredReport(b, BUCKET, "4")) is True
    assert _rows(database) == sorted([(live.id, a, "1"), (live.id, b, "4")])
    assert statements == ([(1, True)] * 4 if backend == "postgresql" else [])


def test_a_group_of_single_reports_commits_with_its_statement(
        database: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only single reports in the group: their statement commits them (PostgreSQL: no
    savepoint, the COMMIT in its round trip), each caller with its own outcome."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    statements = _statements(storage, monkeypatch)
    a, b = bytes(range(16)), bytes(range(1, 17))
    outcomes = _in_one_group(storage, [
        lambda: storage.grouped_append(live.id, StoredReport(a, BUCKET, "1")),
        lambda: storage.grouped_append(live.id, StoredReport(b, BUCKET, "2")),
        lambda: storage.grouped_append(live.id, StoredReport(a, BUCKET, "3")),  # A again
    ])
    assert outcomes == [True, True, False]
    assert _rows(database) == sorted([(live.id, a, "1"), (live.id, b, "2")])
    assert statements == ([(2, True)] if backend == "postgresql" else [])


def test_each_group_commit_tells_how_many_writers_it_held(database: str) -> None:
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    sizes: list[int] = []
    storage.on_group_commit = sizes.append
    ids = [bytes([i]) * 16 for i in range(1, 5)]
    assert _in_one_group(storage, [
        lambda: storage.grouped_append(live.id, StoredReport(ids[0], BUCKET, "1")),
        lambda: storage.grouped_append(live.id, StoredReport(ids[1], BUCKET, "2")),
        lambda: storage.grouped_write(lambda conn: None),
    ]) == [True, True, None]
    assert _off_main(lambda: storage.grouped_append(
        live.id, StoredReport(ids[2], BUCKET, "3"))) is True
    assert storage.grouped_append(live.id, StoredReport(ids[3], BUCKET, "4")) is True
    # The writer holding the lead, the three queued, one alone, the main thread's alone.
    assert sizes == [1, 3, 1, 1]


def _append_in_thread(storage: SQLStorage, campaign_id: int, report: StoredReport,
                      outcomes: dict[bytes, Any]) -> threading.Thread:
    def append() -> None:
        outcomes[report.report_id] = storage.grouped_append(campaign_id, report)

    thread = threading.Thread(target=append, daemon=True)  # one left waiting ends with us
    thread.start()
    return thread


def _after_a_group_of_two(database: str) -> tuple[SQLStorage, int, list[bytes]]:
    """A storage whose last group commit held two reports (writers arriving together); the
    campaign's ID, and five report IDs, the first two of them stored."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    ids = [bytes([i]) * 16 for i in range(1, 6)]
    assert _in_one_group(storage, [
        lambda: storage.grouped_append(live.id, StoredReport(ids[0], BUCKET, "1")),
        lambda: storage.grouped_append(live.id, StoredReport(ids[1], BUCKET, "2")),
    ]) == [True, True]
    assert storage._last_group_size == 2
    return storage, live.id, ids


def test_a_leader_waits_for_its_group_to_outgrow_the_last_when_writers_arrive_together(
        database: str) -> None:
    """After a group of 2, the next leader waits (``group_linger``, COMMIT_WAIT_US) until a
    third writer has queued: the three share one transaction. The wait here could last a
    minute: only its early end, once the group has outgrown the last, lets the test pass."""
    storage, live, ids = _after_a_group_of_two(database)
    storage.group_linger = 60.0

    outcomes: dict[bytes, Any] = {}
    first = _append_in_thread(storage, live, StoredReport(ids[2], BUCKET, "3"), outcomes)
    deadline = time.monotonic() + 30
    while not (storage._group_leader and storage._group_queue) and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.2)  # alone, it would have committed by now
    assert first.is_alive() and len(storage._group_queue) == 1  # leading, and waiting
    second = _append_in_thread(storage, live, StoredReport(ids[3], BUCKET, "4"), outcomes)
    while len(storage._group_queue) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.2)  # a group of 2 has not outgrown the last: still waiting
    assert first.is_alive() and second.is_alive() and len(storage._group_queue) == 2
    third = _append_in_thread(storage, live, StoredReport(ids[4], BUCKET, "5"), outcomes)
    for thread in [first, second, third]:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert outcomes == {ids[2]: True, ids[3]: True, ids[4]: True}
    assert storage._last_group_size == 3
    assert [r for _, r, _ in _rows(database)] == ids


def test_a_wait_is_bounded_and_none_follows_a_group_of_one(database: str) -> None:
    """After a group of 2, a writer alone waits ``group_linger`` at most, and commits alone;
    after that group of 1, the next writer alone does not wait at all (a minute's
    ``group_linger`` would hold it past the join's bound)."""
    storage, live, ids = _after_a_group_of_two(database)
    storage.group_linger = 0.05
    outcomes: dict[bytes, Any] = {}
    alone = _append_in_thread(storage, live, StoredReport(ids[2], BUCKET, "3"), outcomes)
    alone.join(timeout=30)
    assert not alone.is_alive() and outcomes == {ids[2]: True}
    assert storage._last_group_size == 1
    storage.group_linger = 60.0
    alone = _append_in_thread(storage, live, StoredReport(ids[3], BUCKET, "4"), outcomes)
    alone.join(timeout=30)
    assert not alone.is_alive() and outcomes[ids[3]] is True
    assert len(_rows(database)) == 4


def test_the_main_thread_writes_alone_so_a_signal_there_strands_no_group(
        database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python raises a signal handler's exception (Ctrl-C's, a SIGTERM handler's) in the
    main thread only, between any two steps. Had the main thread queued for a group and been
    handed the lead, one raised before it handed the lead on (here: as it waits for the
    writer's turn, where SQLite blocks in ``flock``) would leave the caller queued behind it,
    and every later one, waiting for good. It writes alone: the exception is its own (its
    report stored nothing and was never acknowledged) and the group commit goes on."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    ids = [bytes([i]) * 16 for i in range(1, 4)]
    original_turn = storage._writer_turn

    def turn() -> Any:
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt  # Ctrl-C, while the main thread waits for its turn
        return original_turn()

    monkeypatch.setattr(storage, "_writer_turn", turn)
    entered, release, main_done = threading.Event(), threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        del conn
        entered.set()
        assert release.wait(timeout=30)

    leader = threading.Thread(target=storage.grouped_write, args=(hold,), daemon=True)
    leader.start()
    assert entered.wait(timeout=30)  # leading its group, taken off the queue
    outcomes: dict[bytes, Any] = {}

    def queue_a_follower_then_release() -> None:
        # Behind the main thread's call, had it queued; then the lead goes on.
        deadline = time.monotonic() + 30
        while not (storage._group_queue or main_done.is_set()) \
                and time.monotonic() < deadline:
            time.sleep(0.001)
        queued = len(storage._group_queue)
        follower = _append_in_thread(storage, live.id, StoredReport(ids[1], BUCKET, "2"),
                                     outcomes)
        while len(storage._group_queue) <= queued and time.monotonic() < deadline:
            time.sleep(0.001)
        release.set()
        follower.join(timeout=30)

    helper = threading.Thread(target=queue_a_follower_then_release, daemon=True)
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        storage.grouped_append(live.id, StoredReport(ids[0], BUCKET, "1"))
    main_done.set()
    helper.join(timeout=60)
    leader.join(timeout=30)
    assert outcomes == {ids[1]: True}  # the follower's report was committed
    assert not storage._group_leader and not storage._group_queue
    assert [r for _, r, _ in _rows(database)] == [ids[1]]
    # The lead is free: the next writer, off the main thread, commits at once.
    assert _off_main(lambda: storage.grouped_append(
        live.id, StoredReport(ids[2], BUCKET, "3"))) is True


@pytest.mark.postgresql_only
def test_single_reports_whose_statement_fails_commit_nothing_and_the_next_go_through(
        database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statement fails after the transaction wrote a row (as a deadlock would): the
    COMMIT sent with it is skipped, every caller gets the error, and the connection serves
    the next group."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    original = storage._append_together

    def fails(conn: Any, appends: list[tuple[int, StoredReport]], *,
              commit: bool = False) -> list[bool | None]:
        conn.execute("INSERT INTO reports (campaign_id, report_id, time, payload) "
                     "VALUES (?, ?, ?, ?)", (live.id, bytes(range(16)), BUCKET, "0"))
        bad_time: Any = "not a bucket"  # the statement fails: time is a bigint column
        return original(conn, [(c, StoredReport(r.report_id, bad_time, r.payload_json))
                               for c, r in appends], commit=commit)

    monkeypatch.setattr(storage, "_append_together", fails)
    outcomes = _in_one_group(storage, [
        lambda: storage.grouped_append(live.id, StoredReport(bytes(16), BUCKET, "1")),
        lambda: storage.grouped_append(live.id, StoredReport(bytes(range(1, 17)), BUCKET,
                                                             "2")),
    ])
    assert all(isinstance(outcome, Exception) for outcome in outcomes), outcomes
    assert _rows(database) == []
    monkeypatch.setattr(storage, "_append_together", original)
    assert _off_main(lambda: storage.grouped_append(
        live.id, StoredReport(bytes(16), BUCKET, "3"))) is True
    assert _rows(database) == [(live.id, bytes(16), "3")]


@pytest.mark.postgresql_only
def test_a_rollback_after_a_statement_left_unanswered_closes_the_connection(
        database: str) -> None:
    """A signal's exception can unwind between sending a statement and reading its answer
    (`chorus aggregate` on SIGTERM, mid-fold): the ROLLBACK on the way out must not fail
    ("another command is already in progress", which replaced the SystemExit and made the
    command exit 1), the transaction's writes must not survive, and the storage's next
    connection must work."""
    storage = _storage(database)
    live, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("live")))
    conn = storage.connect()
    conn.execute("BEGIN")
    conn.execute("INSERT INTO reports (campaign_id, report_id, time, payload) "
                 "VALUES (?, ?, ?, ?)", (live.id, bytes(16), BUCKET, "0"))
    conn.raw.pgconn.send_query(b"SELECT pg_sleep(0.2)")  # sent, its answer never read
    assert conn.interrupted
    conn.execute("ROLLBACK")
    assert conn.raw.closed
    assert _rows(database) == []
    assert storage.grouped_append(live.id, StoredReport(bytes(16), BUCKET, "1")) is True
    assert _rows(database) == [(live.id, bytes(16), "1")]
    # A read's ``finally: COMMIT`` on the way out likewise (the fold's horizon, mid-SIGTERM).
    conn = storage.connect()
    conn.execute("BEGIN")
    conn.raw.pgconn.send_query(b"SELECT pg_sleep(0.2)")
    conn.execute("COMMIT")
    assert conn.raw.closed
    assert storage.fold_status().unfolded == 1


def test_commit_wait_us_sets_the_wait_and_a_negative_one_is_refused(database: str) -> None:
    from chorus_collector.settings import SettingsError, resolve_settings

    def linger(config: dict[str, Any]) -> float:
        app = create_app({"DATABASE": database, **config}, clock=FakeClock())
        return float(app.extensions["chorus.storage"].group_linger)

    assert linger({}) == 0  # off unless set: docs/deployment.md says when it pays
    assert linger({"COMMIT_WAIT_US": 250}) == 0.00025
    assert linger({"COMMIT_WAIT_US": 1000}) == 0.001
    with pytest.raises(SettingsError, match="COMMIT_WAIT_US must be 0"):
        resolve_settings({"COMMIT_WAIT_US": -1}, environ={})
