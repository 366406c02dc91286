from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from chorus_collector import create_app
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, FakeClock, campaign_spec


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
def make_app(tmp_path: Path, clock: FakeClock) -> Callable[..., Flask]:
    def factory(**config: Any) -> Flask:
        settings = {"DATABASE": str(tmp_path / "chorus.db"), "ADMIN_TOKEN": ADMIN,
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
