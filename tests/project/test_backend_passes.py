"""Which tests the PostgreSQL pass runs (tests/conftest.py): those whose storage follows
``--backend``, so the durability and replica tests run on both engines while a test that never
touches storage runs once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.support import BACKEND_SUITES

ROOT = Path(__file__).resolve().parents[2]
FILES = ["tests/e2e/test_crash.py", "tests/e2e/test_query_admission.py",
         "tests/collector/storage/test_model.py", "tests/collector/storage/test_storage.py",
         "tests/collector/design/test_designer.py"]


def collected(backend: str) -> set[str]:
    reply = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                            "-p", "no:cacheprovider", "-p", "no:xdist", "--backend", backend,
                            *FILES], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert reply.returncode == 0, reply.stdout[-2000:] + reply.stderr[-2000:]
    return {line for line in reply.stdout.splitlines() if "::" in line}


def test_the_postgresql_pass_runs_the_tests_that_follow_the_backend_and_no_others() -> None:
    on_postgres, on_sqlite = collected("postgresql"), collected("sqlite")
    for test in ["tests/e2e/test_crash.py::test_kill_9_under_load_loses_no_acknowledged_report",
                 "tests/collector/storage/test_model.py::test_collector_model"]:
        assert test in on_postgres and test in on_sqlite, test
    # A module-scoped server that reads the backend (through the session fixture) counts.
    assert any("test_query_admission.py::" in test for test in on_postgres)
    # Both engines as parameters: both run in the SQLite pass, neither again.
    engines = {t for t in on_sqlite if "test_storage.py::" in t and t.endswith("[postgresql]")}
    assert engines and not engines & on_postgres
    # Pure statistics (the designer's predictions against simulation): once.
    designer = {t for t in on_sqlite
                if "test_designer.py::test_predicted_standard_error_matches" in t}
    assert designer and not designer & on_postgres


def test_make_test_points_the_postgresql_pass_at_every_suite_that_follows_the_backend() -> None:
    """`make test` runs the PostgreSQL pass on the suites where tests/conftest.py lets a test
    follow ``--backend`` (and no others, whose tests it would only deselect): a suite added to
    one list and not the other would run on SQLite alone, or be collected for nothing."""
    makefile = (ROOT / "Makefile").read_text()
    (line,) = [line for line in makefile.splitlines() if line.startswith("PG_SUITES :=")]
    assert line.split(":=")[1].split() == list(BACKEND_SUITES)
    (command,) = [line for line in makefile.splitlines()
                  if "$(BIN)/pytest" in line and "--backend postgresql" in line]
    assert "--backend postgresql $(PG_SUITES)" in command
