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
    from chorus_collector.server.gunicorn import serve as run_server

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
            from chorus_collector.shuffler.app import create_shuffler_app

            app = create_shuffler_app(overrides)
            report = app.extensions["chorus.shuffler.forwarder"].flush(retry_held=True)
            click.echo(json.dumps(report.to_json()))
            return
        from chorus_collector.shuffler.server import serve_shuffler

        serve_shuffler(overrides)
    except SettingsError as error:
        fail(str(error))


@main.command("mint-credential")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, help="Days until the credentials expire.")
@click.option("--count", type=click.IntRange(1, 100_000), default=1, show_default=True,
              help="Credentials to mint, one per line (one per install).")
@click.option("--secret-env", default="CHORUS_SHUFFLER_ADMISSION_SECRETS", show_default=True,
              help="Environment variable holding the secret(s); the first one mints.")
def mint_credential(days: float, count: int, secret_env: str) -> None:
    """Mint shuffler admission credentials (docs/shuffler.md), for the app's backend.

    The secret is read from the environment, never from the command line, where other
    users of the machine could read it in the process list. An app backend would rather
    call chorus_shared.admission.mint_admission_credential for each real install.
    """
    import os

    from chorus_shared.admission import mint_admission_credential

    raw = os.environ.get(secret_env, "")
    secrets = [part.strip() for part in raw.split(",") if part.strip()]
    if not secrets:
        fail(f"set {secret_env} to the admission secret the shuffler knows "
             "(CHORUS_SHUFFLER_ADMISSION_SECRETS)")
    try:
        for _ in range(count):
            click.echo(mint_admission_credential(secrets[0], lifetime=days * 86_400))
    except ValueError as error:  # a secret too short to be one
        fail(str(error))
