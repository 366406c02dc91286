"""The Flask app factory.

``create_app(config=None)`` resolves the settings (defaults, then ``CHORUS_*`` environment
variables, then ``config``), migrates the database (refusing one it does not understand) and
registers the API. Tests build their own app on a temporary database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from chorus_collector.dashboard import init_dashboard
from chorus_collector.http.api import api
from chorus_collector.http.auth import TokenVerifier
from chorus_collector.http.metrics import Metrics
from chorus_collector.http.ratelimit import RateLimiter
from chorus_collector.jobs.folding import BackgroundFolder
from chorus_collector.problems import Problem, problem_response
from chorus_collector.settings import SETTINGS, resolve_settings
from chorus_collector.storage import open_storage

__all__ = ["create_app", "start_background_work"]

log = logging.getLogger("chorus.collector")

# Problems that refuse a whole report request; counted as chorus_requests_rejected{reason}.
REQUEST_LEVEL_REJECTIONS = frozenset({
    "malformed-json", "invalid-request", "too-many-reports", "body-too-large",
    "unsupported-media-type", "rate-limited", "unauthorized", "forbidden", "unknown-campaign",
})

_HTTP_KINDS = {400: "bad-request", 404: "not-found", 405: "method-not-allowed",
               413: "body-too-large", 415: "unsupported-media-type"}


def create_app(config: Mapping[str, Any] | None = None, *,
               clock: Callable[[], float] = time.time) -> Flask:
    settings = resolve_settings(config)
    app = Flask("chorus_collector", static_folder=None)  # the dashboard serves its own
    app.config["MAX_CONTENT_LENGTH"] = settings["MAX_BODY_BYTES"]
    # Tokens are hashed at once; the raw values are not kept in app.config.
    secret = {s.name for s in SETTINGS if s.secret}
    safe = {k: v for k, v in settings.items() if k not in secret}
    app.config["CHORUS"] = safe
    logging.getLogger("chorus").setLevel(settings["LOG_LEVEL"])

    storage = open_storage(settings["DATABASE"], synchronous=settings["SQLITE_SYNCHRONOUS"])
    storage.migrate()
    storage.close()  # no connection may cross a fork into server workers
    app.extensions["chorus.storage"] = storage
    verifier = app.extensions["chorus.tokens"] = TokenVerifier(
        admin=settings["ADMIN_TOKEN"], analyst=settings["ANALYST_TOKEN"],
        ingest=settings["INGEST_KEY"], metrics=settings["METRICS_TOKEN"],
        shuffler=settings["SHUFFLER_KEY"])
    app.extensions["chorus.clock"] = clock
    # Started by the server in each worker after the fork (start_background_work).
    app.extensions["chorus.folder"] = BackgroundFolder(storage, settings["FOLD_INTERVAL"])
    # Memory per query is bounded by the decoders; memory per worker by this gate.
    app.extensions["chorus.query_gate"] = threading.BoundedSemaphore(
        max(1, settings["QUERY_CONCURRENCY"]))
    app.extensions["chorus.metrics"] = Metrics()
    app.extensions["chorus.ratelimit"] = (
        RateLimiter(settings["RATE_LIMIT"], settings["RATE_BURST"], time.monotonic)
        if settings["RATE_LIMIT"] else None)
    if settings["PROXY_HOPS"]:
        # Behind N reverse proxies the client address is in X-Forwarded-For (for the rate
        # limit); it is never logged or stored.
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=settings["PROXY_HOPS"])
    app.register_blueprint(api)
    init_dashboard(app, verifier, settings)
    register_error_handlers(app)
    _register_request_log(app)
    return app


def start_background_work(app: Flask) -> None:
    """Start what runs beside the requests in this process: folding new reports into the
    statistics. Call it in each server process after any fork."""
    folder: BackgroundFolder = app.extensions["chorus.folder"]
    folder.start()


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(Problem)
    def on_problem(problem: Problem) -> Response:
        return problem_response(problem)

    @app.errorhandler(HTTPException)
    def on_http_exception(error: HTTPException) -> Response:
        status = error.code or 500
        detail = error.description or ""
        if status == 413:
            detail = (f"request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes; "
                      "send fewer reports per request")
        # Keep Werkzeug's headers that matter to the client, e.g. Allow on a 405.
        headers = {k: v for k, v in error.get_headers() if k.lower() in ("allow",
                                                                           "retry-after")}
        return problem_response(Problem(_HTTP_KINDS.get(status, "http-error"), detail,
                                        status=status, headers=headers))

    @app.errorhandler(Exception)
    def on_unexpected(error: Exception) -> Response:
        # Never leak internals: log the traceback (no request body), answer a generic 500.
        log.exception("unhandled error in %s %s", request.method, request.path)
        return problem_response(Problem("internal-error"))


def _register_request_log(app: Flask) -> None:
    # Method, path, status and latency only: no client address, no body, no headers.
    @app.before_request
    def start_timer() -> None:
        g.chorus_started = time.perf_counter()

    @app.after_request
    def log_request(response: Response) -> Response:
        elapsed = time.perf_counter() - g.get("chorus_started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics: Metrics = app.extensions["chorus.metrics"]
        metrics.observe_latency(request.method, route, response.status_code, elapsed)
        if response.status_code >= 400 and request.path.endswith("/reports"):
            kind = (response.get_json(silent=True) or {}).get("type", "")
            reason = kind.rsplit("/", 1)[-1] or str(response.status_code)
            if reason in REQUEST_LEVEL_REJECTIONS:
                metrics.count_rejected_request(reason)
        log.info("%s %s %d %.1fms", request.method, request.path, response.status_code,
                 elapsed * 1000)
        # Every answer is what its Content-Type says: never sniffed into HTML or script.
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
