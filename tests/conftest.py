from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector import create_app
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    BACKEND_SUITES,
    FakeClock,
    campaign_spec,
)

BACKENDS = ("sqlite", "postgresql")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backend", choices=BACKENDS, default="sqlite",
                     help="storage the collector tests run on (postgresql: a real server "
                          "started for the session)")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _one_blas_thread_per_worker()


def _one_blas_thread_per_worker() -> None:
    """Under pytest-xdist every core already runs a worker: BLAS threads on top of them
    oversubscribe the cores and spin against each other (the project measured a threaded BLAS
    on busy cores 10× slower). One thread each, here and in the processes tests start."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    from threadpoolctl import threadpool_limits

    _BLAS_LIMITS.append(threadpool_limits(limits=1, user_api="blas"))


# Held for the session: threadpoolctl restores the old limits when its object is collected.
_BLAS_LIMITS: list[Any] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # On PostgreSQL only the tests whose storage follows --backend run, minus the tests that
    # read the SQLite file itself (marked sqlite_only). Tests of what only PostgreSQL does
    # (postgresql_only) run in that pass only.
    if config.getoption("--backend") != "postgresql":
        only_postgres = [item for item in items if item.get_closest_marker("postgresql_only")]
        if only_postgres:
            config.hook.pytest_deselected(items=only_postgres)
            items[:] = [item for item in items if item not in only_postgres]
        return
    selected, deselected = [], []
    for item in items:
        if _runs_on_the_backend(item) and item.get_closest_marker("sqlite_only") is None:
            selected.append(item)
        else:
            deselected.append(item)
    config.hook.pytest_deselected(items=deselected)
    items[:] = selected


def _runs_on_the_backend(item: pytest.Item) -> bool:
    """Whether a test of the storage-facing suites (collector, end to end) has storage that
    follows ``--backend``: it asks for ``database`` or ``backend`` (directly or through another
    fixture), or tests what only PostgreSQL does. The rest runs the same in either pass (the
    tests that take both engines as parameters run both in the SQLite pass), so the PostgreSQL
    pass leaves it out rather than run it twice. The browser, client and statistics suites run
    on SQLite only: what they test is not the storage."""
    path = item.path.as_posix()
    if not any(f"/{suite}/" in path for suite in BACKEND_SUITES):
        return False
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & {"database", "backend"}) or \
        item.get_closest_marker("postgresql_only") is not None


@pytest.fixture(scope="session")
def postgres(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A PostgreSQL server for the session (started on first use, stopped at the end)."""
    from helpers.postgres import running_postgres

    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--backend"))


@pytest.fixture
def database(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[str]:
    """The collector's DATABASE setting for this test: a SQLite file, or a fresh schema on
    the session's PostgreSQL server; for a test that uses a ``seeded_template`` fixture
    (``helpers.seeded``), its own copy of that filled database."""
    if "seeded_template" in request.fixturenames:
        template = request.getfixturevalue("seeded_template")
        copy = str(template.copy(tmp_path))
        yield copy
        template.discard(copy)
    elif backend == "postgresql":
        yield str(request.getfixturevalue("postgres").new_schema())
    else:
        yield str(tmp_path / "chorus.db")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("CHORUS_"):
            monkeypatch.delenv(key)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_app(database: str, clock: FakeClock) -> Callable[..., Flask]:
    def factory(**config: Any) -> Flask:
        settings = {"DATABASE": database, "ADMIN_TOKEN": ADMIN,
                    "ANALYST_TOKEN": ANALYST, **config}
        return create_app(settings, clock=clock)

    return factory


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


@pytest.fixture
def http(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def create(http: FlaskClient) -> Callable[..., dict[str, Any]]:
    """Create a campaign through the API and return its public config."""

    def factory(name: str = "survey", **overrides: Any) -> dict[str, Any]:
        reply = http.post("/v1/campaigns", json=campaign_spec(name, **overrides),
                          headers=ADMIN_HEADERS)
        assert reply.status_code == 201, reply.get_json()
        body: dict[str, Any] = reply.get_json()
        return body

    return factory


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20261129)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "chorus.db"
