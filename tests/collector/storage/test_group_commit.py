"""Group commit (Storage.grouped_write): concurrent writers share one transaction and one
fsync, each in its own savepoint; nothing is acknowledged before the shared COMMIT."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chorus_collector.storage import SQLiteStorage


@pytest.fixture
def storage(tmp_path: Path) -> SQLiteStorage:
    store = SQLiteStorage(str(tmp_path / "g.db"))
    store.migrate()
    with store.write() as conn:
        conn.execute("CREATE TABLE t (writer INTEGER, item INTEGER)")
    return store


def _count(path: str) -> int:
    with sqlite3.connect(path) as conn:  # a fresh connection: only committed rows
        return int(conn.execute("SELECT COUNT(*) FROM t").fetchone()[0])


def test_concurrent_writes_are_grouped_and_all_committed(storage: SQLiteStorage,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    groups: list[int] = []
    original = storage._take_group

    def spy(**options: bool) -> list[Any]:
        group = original(**options)
        groups.append(len(group))
        return group

    monkeypatch.setattr(storage, "_take_group", spy)
    writers, each = 16, 40
    barrier = threading.Barrier(writers)
    seen_after_return: list[int] = []

    def writer(w: int) -> None:
        barrier.wait()
        for i in range(each):
            storage.grouped_write(lambda conn, i=i: conn.execute(
                "INSERT INTO t VALUES (?, ?)", (w, i)))
            if i == each - 1:  # durable as soon as the call returns
                with sqlite3.connect(storage.path) as check:
                    seen_after_return.append(check.execute(
                        "SELECT COUNT(*) FROM t WHERE writer = ?", (w,)).fetchone()[0])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert _count(storage.path) == writers * each
    assert seen_after_return == [each] * writers
    assert sum(groups) == writers * each
    assert len(groups) < writers * each  # some transactions carried several writers
    assert not storage._group_leader and not storage._group_queue


def test_a_failing_writer_rolls_back_alone(storage: SQLiteStorage) -> None:
    barrier = threading.Barrier(3)
    outcomes: dict[str, object] = {}

    def good(name: str) -> None:
        barrier.wait()
        storage.grouped_write(lambda conn: conn.execute("INSERT INTO t VALUES (1, 1)"))
        outcomes[name] = "ok"

    def bad() -> None:
        barrier.wait()

        def work(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (2, 2)")
            raise ValueError("invalid")

        try:
            storage.grouped_write(work)
        except ValueError as error:
            outcomes["bad"] = error

    threads = [threading.Thread(target=good, args=("a",)), threading.Thread(target=bad),
               threading.Thread(target=good, args=("b",))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes["a"] == outcomes["b"] == "ok"
    assert isinstance(outcomes["bad"], ValueError)
    with sqlite3.connect(storage.path) as conn:
        assert conn.execute("SELECT writer FROM t ORDER BY writer").fetchall() == [(1,), (1,)]


def test_a_failed_commit_fails_every_writer_in_the_group(storage: SQLiteStorage) -> None:
    """If the shared transaction cannot commit, no caller may think its write is durable."""
    def work(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (3, 3)")
        # Leave the transaction in a state COMMIT refuses: a deferred foreign key violation.
        conn.execute("PRAGMA defer_foreign_keys=ON")
        conn.execute("INSERT INTO reports (campaign_id, report_id, time, payload) "
                     "VALUES (999, x'00', 0, '1')")

    # Each write in a thread of its own, as a server's requests: the main thread writes
    # alone (``SQLStorage._alone``), which the group's failure handling would not be.
    errors: list[BaseException] = []

    def in_a_thread(write: Any) -> None:
        def run() -> None:
            try:
                storage.grouped_write(write)
            except BaseException as error:
                errors.append(error)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()

    in_a_thread(work)
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.IntegrityError)
    assert _count(storage.path) == 0
    assert not storage._group_leader
    in_a_thread(lambda conn: conn.execute("INSERT INTO t VALUES (4, 4)"))
    assert len(errors) == 1 and _count(storage.path) == 1
    # The main thread's own write, refused at COMMIT, likewise stores nothing, and its
    # next one goes through.
    with pytest.raises(sqlite3.IntegrityError):
        storage.grouped_write(work)
    storage.grouped_write(lambda conn: conn.execute("INSERT INTO t VALUES (5, 5)"))
    assert _count(storage.path) == 2


def _failing(storage: SQLiteStorage, monkeypatch: pytest.MonkeyPatch,
             *statements: str) -> list[str]:
    """Make each of ``statements`` fail once ("disk I/O error") on this storage's
    connections; the list of those that have not failed yet."""
    failures = list(statements)
    original = storage.connect

    class Failing:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            if sql in failures:
                failures.remove(sql)
                raise sqlite3.OperationalError("disk I/O error")
            return self.conn.execute(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    monkeypatch.setattr(storage, "connect", lambda: Failing(original()))
    return failures


def test_a_write_whose_rollback_fails_raises_its_own_error_and_the_next_one_goes_through(
        storage: SQLiteStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The work fails, then the ROLLBACK too: the connection and its lock file are closed
    (which gives the writer's turn back), the work's error is the one raised (giving the
    turn back on a closed descriptor raised EBADF in its place), and the next write opens a
    fresh connection."""
    failures = _failing(storage, monkeypatch, "ROLLBACK")

    def failing_write() -> None:
        with storage.write() as conn:
            conn.execute("INSERT INTO t VALUES (1, 1)")
            raise RuntimeError("the work's own error")

    with pytest.raises(RuntimeError, match="the work's own"):
        failing_write()
    assert not failures
    assert _lock_is_free(storage.path + "-writer.lock")
    with storage.write() as conn:
        conn.execute("INSERT INTO t VALUES (2, 2)")
    assert _count(storage.path) == 1


def test_a_group_whose_rollback_fails_too_leaves_its_thread_able_to_write(
        storage: SQLiteStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The COMMIT is refused and the ROLLBACK after it fails as well (a disk that has gone):
    the connection, still in its transaction, is closed, so the thread's next group begins
    on a fresh one instead of failing ("cannot start a transaction within a transaction")."""
    failures = _failing(storage, monkeypatch, "ROLLBACK")

    def refused(conn: Any) -> None:
        conn.execute("INSERT INTO t VALUES (3, 3)")
        conn.execute("PRAGMA defer_foreign_keys=ON")  # COMMIT refuses what follows
        conn.execute("INSERT INTO reports (campaign_id, report_id, time, payload) "
                     "VALUES (999, x'00', 0, '1')")

    outcomes: list[Any] = []

    def writer() -> None:  # both writes in one thread (not the main one, which writes alone)
        for work in (refused, lambda conn: conn.execute("INSERT INTO t VALUES (4, 4)")):
            try:
                outcomes.append(storage.grouped_write(work))
            except Exception as error:
                outcomes.append(error)

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(timeout=30)
    assert not failures  # the ROLLBACK was tried, and failed
    assert isinstance(outcomes[0], sqlite3.IntegrityError)
    assert not isinstance(outcomes[1], Exception), outcomes[1]
    assert _count(storage.path) == 1


def _write_in_thread(storage: SQLiteStorage, work: Any, outcomes: dict[str, Any],
                     name: str) -> threading.Thread:
    """``storage.grouped_write(work)`` in a thread (the main thread writes alone); its
    outcome ("ok" or the exception) in ``outcomes[name]``."""
    def run() -> None:
        try:
            storage.grouped_write(work)
            outcomes[name] = "ok"
        except BaseException as error:
            outcomes[name] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_turn_that_cannot_be_taken_fails_its_group_and_hands_the_lead_on(
        storage: SQLiteStorage) -> None:
    """The lock file cannot be opened (a directory stands in for a full descriptor table or
    a permission): the group fails with that error, and the lead is not left held, or every
    later writer of the process would wait for good."""
    storage.close()  # this thread's lock file: the writer threads open their own
    lock = Path(storage.path + "-writer.lock")
    lock.unlink()
    lock.mkdir()
    outcomes: dict[str, Any] = {}
    _write_in_thread(storage, lambda conn: conn.execute("INSERT INTO t VALUES (1, 1)"),
                     outcomes, "refused").join(timeout=30)
    assert isinstance(outcomes["refused"], IsADirectoryError)
    assert not storage._group_leader
    lock.rmdir()  # the cause gone, the next writer goes through
    _write_in_thread(storage, lambda conn: conn.execute("INSERT INTO t VALUES (2, 2)"),
                     outcomes, "next").join(timeout=30)
    assert outcomes["next"] == "ok" and _count(storage.path) == 1


def test_a_full_disk_in_one_callers_work_is_every_callers_outage(
        storage: SQLiteStorage) -> None:
    """SQLite rolls the whole transaction back on a full disk (``max_page_count`` stands in
    for one), savepoints and all: each caller of the group gets the disk's error, an outage
    (503, retried), not the secondary "no such savepoint" (a 500)."""
    go = threading.Event()
    outcomes: dict[str, Any] = {}

    def holds_the_lead(conn: Any) -> None:
        assert go.wait(timeout=30)
        conn.execute("INSERT INTO t VALUES (0, 0)")

    def fills_the_disk(conn: Any) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        conn.execute("INSERT INTO t VALUES (?, 2)", (b"x" * 200_000,))

    threads = [_write_in_thread(storage, holds_the_lead, outcomes, "leader")]
    deadline = time.monotonic() + 30
    while not storage._group_leader and time.monotonic() < deadline:
        time.sleep(0.001)
    threads.append(_write_in_thread(
        storage, lambda conn: conn.execute("INSERT INTO t VALUES (1, 1)"), outcomes, "plain"))
    while len(storage._group_queue) < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    threads.append(_write_in_thread(storage, fills_the_disk, outcomes, "filler"))
    while len(storage._group_queue) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    go.set()  # the plain writer and the filler run as the next group
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes["leader"] == "ok"
    for name in ("plain", "filler"):
        error = outcomes[name]
        assert isinstance(error, sqlite3.OperationalError), (name, error)
        assert "full" in str(error) and storage._is_outage(error), (name, error)
    assert _count(storage.path) == 1  # the leader's own group's row only


def _lock_is_free(path: str) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if it was taken
    return True


def test_writers_take_turns_on_a_lock_file_beside_the_database(storage: SQLiteStorage) -> None:
    # Blocked in the kernel, a waiting writer is woken as the last one commits, instead of
    # polling SQLite's lock with sleeps of milliseconds.
    lock = storage.path + "-writer.lock"
    with storage.write():
        assert not _lock_is_free(lock)
    assert _lock_is_free(lock)
    storage.grouped_write(lambda conn: conn.execute("INSERT INTO t VALUES (1, 1)"))
    assert _lock_is_free(lock)


def test_a_forked_process_does_not_share_its_parents_turn(storage: SQLiteStorage) -> None:
    # A descriptor inherited through fork shares the parent's lock: the child must open its
    # own, or it would write while the parent does.
    turn = multiprocessing.get_context("fork").Event()
    with storage.write():  # this thread's descriptor is now open, and locked
        child = multiprocessing.get_context("fork").Process(
            target=_take_a_turn, args=(storage, turn))
        child.start()
        assert not turn.wait(0.5)  # a shared lock would let the child in at once
    assert turn.wait(30)
    child.join(30)
    assert child.exitcode == 0


def _take_a_turn(storage: SQLiteStorage, turn: Any) -> None:
    with storage._writer_turn():
        turn.set()


def test_the_background_checkpoints_and_requests_only_as_a_backstop(storage: SQLiteStorage) -> None:
    # A commit checkpoints only past 32 MB of WAL: below that, the database file grows
    # when the background upkeep copies the WAL back, not before.
    assert storage.connect().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 8192
    with storage.write() as conn:
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, i) for i in range(100_000)])
    before = os.path.getsize(storage.path)
    assert os.path.getsize(storage.path + "-wal") > 1_000_000
    storage.maintain(now=0.0)
    assert os.path.getsize(storage.path) > before + 1_000_000
    with sqlite3.connect(storage.path) as conn:  # nothing left to copy
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and frames == copied
