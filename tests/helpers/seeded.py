"""A database filled once per test module (or session) and copied for each test that reads
it: a test that uses a fixture named ``seeded_template`` (a ``SeededTemplate``) gets its own
copy as its ``database`` (tests/conftest.py).

Some modules ask many questions of the same data (thousands of reports through the real
client): filling it again for every test was most of their time (2–4 s a test). A
``SeededTemplate`` is filled once, through the app like any test's data, and each test gets
its own copy, so tests stay independent: on SQLite a copy of the file, on PostgreSQL a
database made from the template database (``CREATE DATABASE … TEMPLATE``).
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from chorus_collector import create_app
from helpers.support import ADMIN, ANALYST, FakeClock

__all__ = ["SeededTemplate", "seed_template", "sqlite_template"]


@dataclass(frozen=True)
class SeededTemplate:
    """The filled database (a SQLite file, or a template database's name on the session's
    PostgreSQL server) and what the filling returned."""

    source: str
    server: Any  # helpers.postgres.PostgresServer, or None on SQLite
    data: Any

    def copy(self, tmp_path: Path) -> str:
        """A copy for one test: its DATABASE setting."""
        if self.server is None:
            target = tmp_path / "chorus.db"
            shutil.copyfile(self.source, target)
            return str(target)
        return str(self.server.new_database(template=self.source)[1])

    def discard(self, database: str) -> None:
        """Drop a copy made by ``copy`` (on SQLite its folder goes with the test's)."""
        if self.server is not None:
            self.server.drop_database(database.rsplit("/", 1)[1])


def seed_template(request: pytest.FixtureRequest, backend: str,
                  tmp_path_factory: pytest.TempPathFactory,
                  fill: Callable[[Flask, FakeClock], Any]) -> SeededTemplate:
    """Fill a new database by ``fill(app, clock)`` (an app on it, its clock at ``NOW``), once:
    call it from a module-scoped fixture named ``seeded_template``."""
    server = request.getfixturevalue("postgres") if backend == "postgresql" else None
    if server is None:
        database = str(tmp_path_factory.mktemp("seeded") / "template.db")
        source = database
    else:
        source, database = server.new_database()
    app = create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST},
                     clock=(clock := FakeClock()))
    data = fill(app, clock)
    if server is None:
        return sqlite_template(app, database, data)
    app.extensions["chorus.storage"].close()  # its connection would block the copies
    return SeededTemplate(source, server, data)


def sqlite_template(app: Flask, path: str, data: Any) -> SeededTemplate:
    """The SQLite file ``app`` filled, as a template: its connection closed and the file
    checkpointed, so that it alone holds everything (no WAL beside it to copy)."""
    app.extensions["chorus.storage"].close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return SeededTemplate(path, None, data)
