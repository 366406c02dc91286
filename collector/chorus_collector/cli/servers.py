"""``chorus serve`` and ``chorus shuffler``: the long-running services."""

from __future__ import annotations

import json

import click

from chorus_collector.cli.common import (
    fail,
    startup_errors,
)
from chorus_collector.cli.root import main


@main.command()
@click.option("--bind", default=None, help="host:port (default CHORUS_BIND or 127.0.0.1:8000).")
@click.option("--database", default=None, help="SQLite file (default CHORUS_DATABASE).")
@click.option("--workers", type=int, default=None, help="Worker processes.")
def serve(bind: str | None, database: str | None, workers: int | None) -> None:
    """Run the collector with the production WSGI server (gunicorn)."""
    from chorus_collector.server import serve as run_server

    overrides = {k: v for k, v in (("BIND", bind), ("DATABASE", database),
                                   ("WORKERS", workers)) if v is not None}
    with startup_errors():
        run_server(overrides)


@main.command()
@click.option("--bind", default=None,
              help="host:port (default CHORUS_SHUFFLER_BIND or 127.0.0.1:8001).")
@click.option("--database", default=None, help="Pool SQLite file (CHORUS_SHUFFLER_DATABASE).")
@click.option("--flush", is_flag=True,
              help="Forward every group that has reached MIN_BATCH once, then exit.")
def shuffler(bind: str | None, database: str | None, flush: bool) -> None:
    """Run the shuffler (docs/shuffler.md); settings from CHORUS_SHUFFLER_* variables."""
    from chorus_collector.settings import SettingsError

    overrides = {k: v for k, v in (("BIND", bind), ("DATABASE", database)) if v is not None}
    try:
        if flush:
            from chorus_collector.shuffler import create_shuffler_app

            app = create_shuffler_app(overrides)
            report = app.extensions["chorus.shuffler.forwarder"].flush()
            click.echo(json.dumps(report.to_json()))
            return
        from chorus_collector.shuffler_server import serve_shuffler

        serve_shuffler(overrides)
    except SettingsError as error:
        fail(str(error))
