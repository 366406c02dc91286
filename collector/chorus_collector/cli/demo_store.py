"""Where the demo keeps its work, so that a second run (``make serve-demo`` after ``make
demo``) serves the same data at once instead of simulating it again.

A folder (``.demo`` in the current directory unless ``--dir`` says otherwise) holds the
collector's SQLite database (``demo.db``), its log and ``demo.json``: what the database holds
(a fingerprint of the demo's campaigns, Chorus's version, the users and the seed), when it
was simulated, and the two tokens its collector answers to. A run uses the database as it is
when ``demo.json`` matches what it was asked for, and otherwise removes it and simulates
afresh. ``demo.json`` is written last, so a run cut short leaves nothing that is reused.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["DEFAULT_FOLDER", "DemoFolder", "DemoRecord", "FolderBusy"]

DEFAULT_FOLDER = Path(".demo")


class FolderBusy(RuntimeError):
    """Another ``chorus demo`` is using the folder."""


@dataclass(frozen=True)
class DemoRecord:
    """What the folder's database holds (``demo.json``)."""

    fingerprint: str
    users: int
    seed: int
    simulated_at: float
    reports: int
    admin_token: str
    analyst_token: str


class DemoFolder:
    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        self.database = self.path / "demo.db"
        self.record_path = self.path / "demo.json"

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder for this run: two demos simulating into one database would mix
        their reports, and one would remove the other's."""
        # Owner-only: demo.json holds the tokens of the demo's collector.
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.path / "lock", "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise FolderBusy(f"another chorus demo is using {self.path}; wait for it to "
                                 "end, or give this one another --dir") from None
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def load(self, fingerprint: str) -> DemoRecord | None:
        """The record, if the database is complete and holds what ``fingerprint`` names."""
        try:
            record = DemoRecord(**json.loads(self.record_path.read_text()))
        except (OSError, ValueError, TypeError):  # absent, cut short or of another format
            return None
        if record.fingerprint != fingerprint or not self.database.exists():
            return None
        return record

    def clear(self) -> None:
        """Remove the database and everything said about it, before simulating afresh."""
        # The record first: a database without one is never reused.
        for path in [self.record_path, *self.path.glob("demo.db*"), self.path / "demo.log"]:
            path.unlink(missing_ok=True)  # demo.db and SQLite's -wal, -shm, -writer.lock

    def save(self, record: DemoRecord) -> None:
        """Write the record atomically, readable by the owner only."""
        partial = self.record_path.with_suffix(".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(asdict(record), handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        partial.replace(self.record_path)
