"""What the ``chorus`` subcommands share: options, the collector client, storage
and how failures are said."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from chorus_client.api import CollectorAPI
    from chorus_collector.storage import Storage

DEFAULT_URL = "http://127.0.0.1:8000"


def collector_api(url: str, token: str | None) -> CollectorAPI:
    # Imported here: the database commands (export, gc …) do without the HTTP client.
    from chorus_client.api import CollectorAPI

    return CollectorAPI(url, token)


url_option = click.option("--url", envvar="CHORUS_URL", default=DEFAULT_URL, show_default=True,
                          help="Collector base URL (or CHORUS_URL).")
token_option = click.option("--token", envvar="CHORUS_TOKEN", default=None,
                            help="Bearer token (or CHORUS_TOKEN).")
database_option = click.option("--database", envvar="CHORUS_DATABASE", default="chorus.db",
                               show_default=True,
                               help="SQLite file or postgresql:// URL (or CHORUS_DATABASE).")
scheduler_option = click.option(
    "--scheduler", default=None, metavar="tcp://HOST:PORT",
    help="Run the map step on this Dask scheduler's cluster (needs the dask extra).")


def open_database(database: str) -> Storage:
    from chorus_collector.storage import open_storage
    from chorus_collector.storage.postgres import is_postgres_url

    if not is_postgres_url(database) and not Path(database).exists():
        raise click.ClickException(f"{database}: no such database")
    storage = open_storage(database)
    storage.migrate()
    return storage


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 report``, ``2 reports``, ``20,000 reports``."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def call_collector(fn: Any) -> Any:
    """A call to the collector, its failure said in one line that names what to change."""
    from chorus_client.errors import APIError, ClientError, TransportError

    try:
        return fn()
    except TransportError as error:
        raise click.ClickException(f"cannot reach the collector (check --url or CHORUS_URL): "
                                   f"{error}") from None
    except APIError as error:
        hint = {401: " (set CHORUS_TOKEN or pass --token)",
                403: " (this call needs another role's token: the admin token creates and "
                     "retires campaigns, the analyst or admin token reads estimates)"}
        raise click.ClickException(f"{error}{hint.get(error.status, '')}") from None
    except ClientError as error:
        raise click.ClickException(str(error)) from None


def fail(message: str) -> NoReturn:
    """A configuration error at start-up: one line and exit status 2, no traceback."""
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(2)


@contextlib.contextmanager
def startup_errors() -> Iterator[None]:
    from chorus_collector.settings import SettingsError
    from chorus_collector.storage import SchemaError

    try:
        yield
    except (SettingsError, SchemaError) as error:
        fail(str(error))
