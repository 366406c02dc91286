"""The production server: gunicorn with threaded workers, configured from the settings.

``chorus serve`` runs exactly this, and so does the container image. The app is created once
in the master (migrating the database there, before any worker exists) and forked into the
workers. SIGTERM makes gunicorn stop accepting connections and finish in-flight requests
(``graceful_timeout``); every acknowledged report was committed before its response was sent.
Each worker then stops its folder, which gives the fold lease back after the chunk in hand.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from chorus_collector.app import create_app, start_background_work, stop_background_work
from chorus_collector.server.logs import configure_logging, logging_config
from chorus_collector.settings import resolve_settings

__all__ = ["serve"]

METRICS_PREFIX = "chorus-metrics-"


class GunicornApp(BaseApplication):  # type: ignore[misc]
    def __init__(self, app: Flask, options: Mapping[str, Any]) -> None:
        self.application = app
        self.options = dict(options)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)
        # gunicorn 24+ opens a control socket by default, at one path per user
        # (~/.gunicorn/gunicorn.ctl) that every server of that user shares; the collector
        # manages nothing through it, and closing it made each shutdown wait up to 4 s.
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)
        # A stop signal that reaches a worker before gunicorn installs the worker's own
        # handlers (init_process) went to the master's handler, forked with it, which queues
        # it in the worker's copy of the master's queue: the worker then served on until
        # graceful_timeout's SIGKILL (a SIGTERM right after start-up, under load, took 30 s
        # and exit -9). Once the master is ready, before it forks any worker, its stop
        # signals go through a handler that a fork inherits: in the master it queues the
        # signal as before, in a worker it holds it until the worker's handlers are in
        # (post_worker_init). Installing the holding handler in post_fork left the moments
        # between the fork and that hook (a suite run saw it once more).
        when_ready = self.cfg.when_ready
        after_init = self.cfg.post_worker_init

        def ready(server: Any) -> None:
            _route_stop_signals(server)
            when_ready(server)

        def post_worker_init(worker: Any) -> None:
            after_init(worker)
            _take_held_stop_signals()

        self.cfg.set("when_ready", ready)
        self.cfg.set("post_worker_init", post_worker_init)

    def load(self) -> Flask:
        return self.application


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
_held_stop_signals: list[int] = []  # this worker's, between its fork and its handlers


def _route_stop_signals(arbiter: Any) -> None:
    """In the master, before its first fork: a stop signal is the master's own where it is
    the master, and held for later in a worker that has not installed its handlers yet."""
    master = os.getpid()

    def route(signum: int, frame: Any) -> None:
        if os.getpid() == master:
            arbiter.signal(signum, frame)
        else:
            _held_stop_signals.append(signum)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, route)


def _take_held_stop_signals() -> None:
    """Send this worker the stop signals it held, now that its handlers take them."""
    for signum in _held_stop_signals:
        os.kill(os.getpid(), signum)
    _held_stop_signals.clear()


def serve(config: Mapping[str, Any] | None = None) -> None:
    """Run the collector until SIGTERM or SIGINT."""
    settings = resolve_settings(config)
    # Workers are separate processes: metrics go through files that /metrics sums up. The
    # variable must be set before prometheus_client is first imported (by create_app).
    _remove_stale_metrics_dirs()
    master = os.getpid()
    metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{master}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    configure_logging(settings["LOG_LEVEL"])
    app = create_app(config)
    logging.getLogger("chorus.server").info(startup_summary(settings))
    options = {
        **gunicorn_options(settings, "chorus-collector", timeout=60),
        "child_exit": _child_exit,
        # Threads do not survive the fork: each worker starts its own folder, and stops it
        # (giving the fold lease back) when it exits.
        "post_worker_init": lambda worker: start_background_work(app),
        "worker_exit": lambda server, worker: _worker_exit(app, worker),
    }
    try:
        GunicornApp(app, options).run()
    finally:
        # A worker leaves run() too when it exits (it is a fork of this process): only the
        # master removes the directory that every worker, and its successor, writes to.
        if os.getpid() == master:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def gunicorn_options(settings: Mapping[str, Any], name: str, *,
                     timeout: int) -> dict[str, Any]:
    """What the collector and the shuffler run gunicorn with: threaded workers, a graceful
    drain on SIGTERM, and no access log (it would record client addresses)."""
    return {
        "bind": settings["BIND"],
        "workers": settings["WORKERS"],
        "threads": settings["THREADS"],
        "worker_class": "gthread",
        "preload_app": True,
        "graceful_timeout": 30,
        "timeout": timeout,
        "keepalive": 5,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": settings["LOG_LEVEL"].lower(),
        # One format (JSON lines) for gunicorn's records and the collector's.
        "logconfig_dict": logging_config(settings["LOG_LEVEL"]),
        "proc_name": name,
        "limit_request_line": 8190,
    }


def startup_summary(settings: Mapping[str, Any]) -> str:
    """What an operator checks first: where it listens, which file, which secrets are set
    (never their values)."""
    secrets = ", ".join(f"{label} {'set' if settings.get(name) else 'unset'}" for name, label in (
        ("ADMIN_TOKEN", "admin token"), ("ANALYST_TOKEN", "analyst token"),
        ("INGEST_KEY", "ingest key"), ("METRICS_TOKEN", "metrics token"),
        ("SHUFFLER_KEY", "shuffler key")))
    return (f"chorus serve: listening on {settings['BIND']}, database {settings['DATABASE']}, "
            f"{settings['WORKERS']} workers x {settings['THREADS']} threads; {secrets}")


def _remove_stale_metrics_dirs() -> None:
    """Metrics directories of masters that died without cleaning up (SIGKILL)."""
    for path in Path(tempfile.gettempdir()).glob(f"{METRICS_PREFIX}*-*"):
        pid_text = path.name.removeprefix(METRICS_PREFIX).split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def _child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def _worker_exit(app: Flask, worker: Any) -> None:
    # gunicorn also calls this in the master, for a worker that vanished: only the worker
    # itself has a folder to stop.
    if worker.pid == os.getpid():
        stop_background_work(app)
