"""The demo's kept folder: a database is reused only when its record says it holds what is
asked for and the record was written (last) by a run that finished; two demos never share
the folder at once; the record, which holds the tokens, is the owner's only."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from chorus_collector.cli.demo import fingerprint
from chorus_collector.cli.demo_store import DemoFolder, DemoRecord, FolderBusy


def _record(users: int = 300) -> DemoRecord:
    return DemoRecord(fingerprint(users, 7), users, 7, 1.0e9, 3000, "admin-token",
                      "analyst-token")


def _simulated(folder: DemoFolder) -> None:
    """What a run leaves before its record: the database and SQLite's side files."""
    for name in ("demo.db", "demo.db-wal", "demo.db-shm", "demo.db-writer.lock", "demo.log"):
        (folder.path / name).write_bytes(b"x")


def test_a_finished_run_is_reused_for_the_same_demo_only(tmp_path: Path) -> None:
    folder = DemoFolder(tmp_path / ".demo")
    with folder.lock():
        assert folder.load(fingerprint(300, 7)) is None  # nothing there yet
        _simulated(folder)
        assert folder.load(fingerprint(300, 7)) is None  # cut short: no record
        folder.save(_record())
        assert folder.load(fingerprint(300, 7)) == _record()
        assert stat.S_IMODE(folder.record_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(folder.path.stat().st_mode) == 0o700
        # Another population, seed or version of the demo is another fingerprint.
        assert fingerprint(300, 7) == fingerprint(300, 7)
        assert len({fingerprint(300, 7), fingerprint(301, 7), fingerprint(300, 8)}) == 3
        assert folder.load(fingerprint(301, 7)) is None
        folder.clear()
        assert sorted(p.name for p in folder.path.iterdir()) == ["lock"]


def test_a_record_without_its_database_or_unreadable_is_not_reused(tmp_path: Path) -> None:
    folder = DemoFolder(tmp_path)
    with folder.lock():
        folder.save(_record())
        assert folder.load(fingerprint(300, 7)) is None  # no demo.db beside it
        _simulated(folder)
        folder.record_path.write_text('{"fingerprint": "')  # cut short mid-write
        assert folder.load(fingerprint(300, 7)) is None
        folder.record_path.write_text('{"fingerprint": "x", "other": 1}')  # another format
        assert folder.load(fingerprint(300, 7)) is None


def test_two_demos_never_use_one_folder_at_once(tmp_path: Path) -> None:
    first, second = DemoFolder(tmp_path), DemoFolder(tmp_path)
    with first.lock(), pytest.raises(FolderBusy, match="another chorus demo is using"), \
            second.lock():
        pass
    with second.lock():  # free again once the first has ended
        pass
