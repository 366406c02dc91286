"""Fixtures for the TypeScript client's pytest side: the package built once per module, and a
live collector on 127.0.0.1 (``live``; a module overrides ``live_config`` for its settings)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from helpers.client_ts import build_client_ts
from helpers.live import LiveCollector, serving
from helpers.support import FakeClock


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """client-ts compiled from its sources into this module's folder."""
    return build_client_ts(tmp_path_factory.mktemp("client-ts-build"))


@pytest.fixture
def live_config() -> dict[str, Any]:
    """Settings for ``live`` beyond the suite's tokens and this test's database."""
    return {}


@pytest.fixture
def live(make_app: Callable[..., Flask], clock: FakeClock,
         live_config: dict[str, Any]) -> Iterator[LiveCollector]:
    """A collector served on 127.0.0.1 at a free port until the test ends."""
    with serving(make_app(**live_config), clock) as collector:
        yield collector
