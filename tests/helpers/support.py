"""Test helpers: a clock, an in-process transport to the collector, a scripted transport."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask

from chorus_client.errors import TransportError
from chorus_client.transport import Response

ADMIN = "admin-secret-token"
ANALYST = "analyst-secret-token"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
ANALYST_HEADERS = {"Authorization": f"Bearer {ANALYST}"}
#: The suites whose tests may follow ``--backend`` (tests/conftest.py): the rest never runs in
#: the PostgreSQL pass, which `make test` therefore points at these alone (collecting the
#: others only to deselect them cost each of its workers seconds of imports).
BACKEND_SUITES = ("tests/collector", "tests/e2e")
NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a multiple of an hour


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Sent:
    method: str
    url: str
    body: bytes | None
    headers: dict[str, str]


class FlaskBridge:
    """An in-process bridge from the client to a collector app; records every request."""

    def __init__(self, app: Flask, base: str = "http://collector.test") -> None:
        self.client = app.test_client()
        self.base = base
        self.sent: list[Sent] = []

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        assert timeout > 0, "timeouts are always on"
        self.sent.append(Sent(method, url, body, dict(headers)))
        path = url.removeprefix(self.base)
        reply = self.client.open(path, method=method, data=body, headers=dict(headers))
        return Response(reply.status_code, reply.get_data(), dict(reply.headers))


@dataclass
class ScriptedTransport:
    """Answers from a script: a Response, or an exception to raise, per call."""

    script: list[Response | Exception]
    sent: list[Sent] = field(default_factory=list)
    fallback: Callable[[Sent], Response] | None = None

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        assert timeout > 0
        call = Sent(method, url, body, dict(headers))
        self.sent.append(call)
        if not self.script:
            if self.fallback is None:
                raise AssertionError(f"unexpected request {method} {url}")
            return self.fallback(call)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def timeout_error() -> TransportError:
    return TransportError("timed out")


def z_threshold(alpha: float, tests: int = 1) -> float:
    """Two-sided normal quantile for a per-test false alarm ``alpha`` over ``tests`` tests."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - alpha / (2 * tests))


def chi2_band(dof: int, alpha: float) -> tuple[float, float]:
    """Acceptance band for s²/σ² with dof degrees of freedom (Wilson–Hilferty)."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - alpha / 2)
    a = 2 / (9 * dof)

    def quantile(zq: float) -> float:
        return (1 - a + zq * math.sqrt(a)) ** 3

    return quantile(-z), quantile(z)


def campaign_spec(name: str, **overrides: Any) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = {
        "krr": {"mechanism": "krr", "epsilon": 1.5, "domain": ["a", "b", "c", "d"]},
        "rr": {"mechanism": "rr", "epsilon": 1.0, "domain": ["no", "yes"]},
        "rappor": {"mechanism": "rappor", "epsilon": 2.0, "domain": {"kind": "strings"},
                   "params": {"k": 32, "h": 2, "m": 8}},
        "duchi": {"mechanism": "duchi", "epsilon": 1.0,
                  "domain": {"kind": "numeric", "lo": 0, "hi": 100}},
    }
    mechanism = overrides.pop("mechanism", "krr")
    # Tests send many reports per client: a generous per-install policy unless overridden.
    spec = {"name": name, **specs[mechanism], "min_batch_size": 1,
            "privacy": {"budget": 1e6, "max_reports": 1_000_000}}
    spec.update(overrides)
    return spec


def flatten(items: Iterable[Iterable[Any]]) -> list[Any]:
    return [x for group in items for x in group]


def make_report(config: dict[str, Any], value: Any, rng: Any, now: float = NOW,
                **overrides: Any) -> dict[str, Any]:
    """A report as the client would send it (perturbed with ``rng``)."""
    from chorus_shared import campaign_from_config
    from chorus_shared.wire import new_report

    campaign = campaign_from_config(config)
    mechanism = campaign.mechanism
    payload = mechanism.randomize(mechanism.encode(value), rng)
    report = new_report(campaign, payload, now).to_json()
    report.update(overrides)
    return report


class FaultInjector:
    """WSGI middleware: make the next requests fail before the handler, or lose the response
    after the handler has run (the work is done but the client sees a 500)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.mode: str | None = None
        self.remaining = 0

    def fail(self, mode: str, times: int = 1) -> None:
        assert mode in ("before", "after")
        self.mode, self.remaining = mode, times

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self.remaining <= 0:
            return self.app(environ, start_response)
        self.remaining -= 1
        if self.mode == "after":
            chunks = self.app(environ, lambda *args, **kwargs: None)
            b"".join(chunks)  # the handler runs to completion; its answer is dropped
            if hasattr(chunks, "close"):
                chunks.close()
        start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
        return [b"injected fault"]


def query(database: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run one statement on a test's database, SQLite file or PostgreSQL URL (autocommit),
    with ``?`` placeholders; returns its rows (none for a write)."""
    from chorus_collector.storage import open_storage

    storage = open_storage(database)
    try:
        cursor = storage.connect().execute(sql, args)
        return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
    finally:
        storage.close()
