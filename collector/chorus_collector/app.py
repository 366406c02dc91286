"""The Flask app factory: where the collector is put together.

``create_app(config=None)`` resolves the settings (defaults, then ``CHORUS_*`` environment
variables, then ``config``), migrates the database (refusing one it does not understand) and
registers the API (``http``) and the dashboard (``dashboard``) with the request handlers they
share. It is the composition root, above both: neither imports it. Tests build their own app
on a temporary database.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import Rule

from chorus_collector.alerts import AlertWork
from chorus_collector.dashboard import init_dashboard
from chorus_collector.http.admission import QueryAdmission, install_admission, query_threads
from chorus_collector.http.alert_routes import alert_api
from chorus_collector.http.annotations import annotation_routes
from chorus_collector.http.api import api
from chorus_collector.http.auth import TokenVerifier
from chorus_collector.http.cors import install_cors, policy_from_setting
from chorus_collector.http.design import design_routes
from chorus_collector.http.handlers import register_error_handlers, register_request_log
from chorus_collector.http.metrics import Metrics
from chorus_collector.http.ratelimit import RateLimiter
from chorus_collector.http.saved import saved_routes
from chorus_collector.jobs.folding import BackgroundFolder
from chorus_collector.settings import SETTINGS, resolve_settings
from chorus_collector.storage import open_storage

__all__ = ["create_app", "start_background_work", "stop_background_work"]


class _LazyRule(Rule):
    """A URL rule that compiles its URL builders (``url_for``'s code) when first asked to
    build: werkzeug compiles two per rule, from an AST, as the rule is added, which was half
    the CPU of building the app (50-odd rules), and most rules never build a URL."""

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        compiled: Callable[..., tuple[str, str]] | None = None

        def build(rule: Rule, **values: Any) -> tuple[str, str]:
            nonlocal compiled
            if compiled is None:  # two threads may both compile: the same code, harmless
                compiled = Rule._compile_builder(rule, append_unknown)
            return compiled(rule, **values)

        return build


class _App(Flask):
    """Flask, deciding once per function whether it is a coroutine: it asked ``inspect`` six
    times on every request (each before, after and teardown function), and every one of the
    collector's functions is plain. At most ``KNOWN`` functions are remembered (a function
    made per request, as ``after_this_request`` takes, is asked about as before)."""

    KNOWN = 256
    url_rule_class = _LazyRule

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        plain: dict[Callable[..., Any], bool] = self.__dict__.setdefault("_chorus_plain", {})
        if plain.get(func):
            return func
        ensured = super().ensure_sync(func)
        if len(plain) < self.KNOWN:
            plain[func] = ensured is func
        return ensured


def create_app(config: Mapping[str, Any] | None = None, *,
               clock: Callable[[], float] = time.time) -> Flask:
    settings = resolve_settings(config)
    app = _App("chorus_collector", static_folder=None)  # the dashboard serves its own
    app.config["MAX_CONTENT_LENGTH"] = settings["MAX_BODY_BYTES"]
    # Tokens are hashed at once; the raw values are not kept in app.config.
    secret = {s.name for s in SETTINGS if s.secret}
    safe = {k: v for k, v in settings.items() if k not in secret}
    app.config["CHORUS"] = safe
    logging.getLogger("chorus").setLevel(settings["LOG_LEVEL"])

    storage = open_storage(settings["DATABASE"], synchronous=settings["SQLITE_SYNCHRONOUS"])
    storage.group_linger = settings["COMMIT_WAIT_US"] / 1e6
    storage.migrate()
    storage.close()  # no connection may cross a fork into server workers
    app.extensions["chorus.storage"] = storage
    verifier = app.extensions["chorus.tokens"] = TokenVerifier(
        admin=settings["ADMIN_TOKEN"], analyst=settings["ANALYST_TOKEN"],
        ingest=settings["INGEST_KEY"], metrics=settings["METRICS_TOKEN"],
        shuffler=settings["SHUFFLER_KEY"])
    app.extensions["chorus.clock"] = clock
    # Started by the server in each worker after the fork (start_background_work); alert
    # rules are evaluated after its folds and their notifications delivered every round.
    alerts = app.extensions["chorus.alerts"] = AlertWork(
        storage, public_url=settings["PUBLIC_URL"], clock=clock)
    app.extensions["chorus.folder"] = BackgroundFolder(storage, settings["FOLD_INTERVAL"],
                                                       follower=alerts)
    # Memory per query is bounded by the decoders; memory per worker by the compute slots,
    # and the threads queries hold by the admission (http/admission.py).
    install_admission(app, QueryAdmission(
        concurrency=max(1, settings["QUERY_CONCURRENCY"]), wait=settings["QUERY_WAIT"],
        threads=query_threads(settings["THREADS"], settings["QUERY_THREADS"])))
    metrics = app.extensions["chorus.metrics"] = Metrics()
    storage.on_group_commit = metrics.observe_group_commit
    app.extensions["chorus.ratelimit"] = (
        RateLimiter(settings["RATE_LIMIT"], settings["RATE_BURST"], time.monotonic)
        if settings["RATE_LIMIT"] else None)
    if settings["PROXY_HOPS"]:
        # Behind N reverse proxies the client address is in X-Forwarded-For (for the rate
        # limit); it is never logged or stored.
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=settings["PROXY_HOPS"])
    app.register_blueprint(api)
    app.register_blueprint(annotation_routes)
    app.register_blueprint(design_routes)
    app.register_blueprint(alert_api)
    app.register_blueprint(saved_routes)
    init_dashboard(app, verifier, settings)
    register_error_handlers(app)
    register_request_log(app)
    install_cors(app, policy_from_setting(settings["CORS_ORIGINS"]))
    return app


def start_background_work(app: Flask) -> None:
    """Start what runs beside the requests in this process: folding new reports into the
    statistics. Call it in each server process after any fork."""
    folder: BackgroundFolder = app.extensions["chorus.folder"]
    folder.start()


def stop_background_work(app: Flask) -> None:
    """Stop what ``start_background_work`` started, giving the fold lease back: a server
    process calls it on its way out (a graceful drain)."""
    folder: BackgroundFolder = app.extensions["chorus.folder"]
    folder.stop()
