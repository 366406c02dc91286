"""``chorus shuffler``: the shuffler under gunicorn (threaded workers), like ``chorus serve``.

The app is created once in the master (migrating the pool there) and forked into the
workers; each worker then starts its own forwarding thread, and a file lock lets only one
pass run at a time (:mod:`chorus_collector.shuffler.forward`). No access log: it would record
the client addresses and arrival times the shuffler exists to drop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chorus_collector.server.gunicorn import GunicornApp, gunicorn_options
from chorus_collector.server.logs import configure_logging
from chorus_collector.shuffler.app import create_shuffler_app, start_background_forwarder
from chorus_collector.shuffler.forward import BackgroundForwarder
from chorus_collector.shuffler.settings import resolve_shuffler_settings

__all__ = ["SHUFFLER_COMMAND", "serve_shuffler"]

SHUFFLER_COMMAND = ("chorus", "shuffler")


def serve_shuffler(config: Mapping[str, Any] | None = None) -> None:
    """Run the shuffler until SIGTERM or SIGINT."""
    settings = resolve_shuffler_settings(config)
    configure_logging(settings["LOG_LEVEL"])
    app = create_shuffler_app(config)
    threads: list[BackgroundForwarder] = []

    def post_worker_init(worker: Any) -> None:
        threads.append(start_background_forwarder(app))

    def worker_exit(server: Any, worker: Any) -> None:
        for thread in threads:  # let a pass in progress finish (the pool is safe either way)
            thread.stop()

    options = {
        **gunicorn_options(settings, "chorus-shuffler", timeout=120),
        "post_worker_init": post_worker_init,
        "worker_exit": worker_exit,
    }
    GunicornApp(app, options).run()
