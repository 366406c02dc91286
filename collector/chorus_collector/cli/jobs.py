"""Jobs on the database: ``gc``, ``aggregate``, ``export``, ``check-aggregates``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from chorus_collector.cli.common import (
    counted,
    database_option,
    open_database,
    scheduler_option,
)
from chorus_collector.cli.progress import progress_bar
from chorus_collector.cli.root import main

if TYPE_CHECKING:
    from distributed import Client

    from chorus_collector.storage import Storage


@main.command()
@click.option("--database", envvar="CHORUS_DATABASE", default="chorus.db", show_default=True,
              help="SQLite file or postgresql:// URL (or CHORUS_DATABASE).")
@click.option("--margin", type=click.IntRange(min=0), default=86_400, show_default=True,
              help="Seconds past a campaign's report expiry before its reports are dropped "
                   "(covers clock skew between collectors).")
def gc(database: str, margin: int) -> None:
    """Drop reports older than their campaign's expiry (plus a margin), keeping the
    statistics they fed and a count per time bucket.

    Ingest refuses expired reports, so their IDs protect nothing. Safe to run while the
    collector serves; schedule it (cron) daily.
    """
    import time

    from chorus_collector.jobs.folding import fold

    storage = open_database(database)
    fold(storage)  # only folded reports are dropped: fold what is pending first
    click.echo(f"dropped {counted(storage.drop_expired(time.time(), margin), 'expired report')}")


@contextlib.contextmanager
def _cluster(scheduler: str | None) -> Iterator[Client | None]:
    """A client of the Dask scheduler, if one is named; its absence said in one line."""
    if scheduler is None:
        yield None
        return
    from chorus_collector.extras import ExtraMissing
    from chorus_collector.jobs.distributed import connect

    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(connect(scheduler))
        except ExtraMissing as error:
            raise click.ClickException(str(error)) from None
        except OSError as error:
            raise click.ClickException(f"cannot reach the Dask scheduler at {scheduler} "
                                       f"(check --scheduler): {error}") from None
        yield client


@main.command()
@database_option
@click.option("--follow", is_flag=True,
              help="Keep folding new reports every --interval seconds until interrupted.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True)
@scheduler_option
@click.option("--from-parquet", "parquet", default=None,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Aggregate a `chorus export --parquet` directory instead: print its "
                   "per-bucket statistics as JSON lines (the database is not touched).")
def aggregate(database: str, follow: bool, interval: float, scheduler: str | None,
              parquet: Path | None) -> None:
    """Fold appended reports into the per-bucket statistics (the collector's server does
    this in the background; run it here on demand, or beside servers started with
    CHORUS_FOLD_INTERVAL=0). Safe beside running servers: folds never count a report twice.
    With --scheduler the map step runs on a Dask cluster whose workers can read the
    database file."""
    import functools
    import os
    import signal
    import sys
    import threading
    import time

    from chorus_collector.jobs.folding import BackgroundFolder

    if parquet is not None:
        _aggregate_parquet(parquet, scheduler)
        return
    with contextlib.ExitStack() as stack:
        if threading.current_thread() is threading.main_thread():  # where signals are handled
            # SIGTERM unwinds like Ctrl-C (the fold in hand rolls back, the lease is given
            # back) instead of ending the process where it stands, holding the lease.
            previous = signal.signal(signal.SIGTERM,
                                     lambda number, frame: sys.exit(128 + number))
            stack.callback(signal.signal, signal.SIGTERM, previous)
        storage = open_database(database)
        client = stack.enter_context(_cluster(scheduler))
        if client is None:
            from chorus_collector.alerts import AlertWork

            # Alert rules follow its folds as they follow a server's (docs/alerts.md).
            alerts = AlertWork(storage, public_url=os.environ.get("CHORUS_PUBLIC_URL"))
            run = BackgroundFolder(storage, interval, role="aggregate",
                                   follower=alerts).run_once
        else:
            from chorus_collector.jobs.distributed import fold_with_cluster

            run = functools.partial(fold_with_cluster, storage, client)
        while True:
            folded = run()
            status = storage.fold_status()
            click.echo(f"folded {counted(folded, 'report')}; {status.unfolded:,} waiting"
                       + (_lease_note(storage) if status.unfolded and not folded else ""))
            if not follow:
                return
            time.sleep(interval)


def _lease_note(storage: Storage) -> str:
    """Why nothing was folded: who holds the fold lease, and until when."""
    import datetime
    import time

    from chorus_collector.jobs.lease import Holder

    lease = storage.fold_lease()
    left = lease.until - time.time()
    if left <= 0:
        return ""
    holder = Holder.parse(lease.holder)
    who = holder.describe() if holder is not None else f"{lease.holder!r}"
    until = datetime.datetime.fromtimestamp(lease.until, datetime.UTC)
    return (f"; the fold lease is held by {who} until {until:%Y-%m-%d %H:%M:%S} UTC "
            f"({left:.0f} s from now): it folds them, or run this again after that")


def _aggregate_parquet(directory: Path, scheduler: str | None) -> None:
    from chorus_collector.extras import ExtraMissing
    from chorus_collector.jobs.distributed import aggregate_parquet

    with _cluster(scheduler) as client:
        try:
            export, buckets = aggregate_parquet(directory, client)
        except (ExtraMissing, ValueError) as error:
            raise click.ClickException(str(error)) from None
    for time, (n, state) in sorted(buckets.items()):
        click.echo(json.dumps({"campaign": export.name, "time": time, "n": n,
                               "state": state.tolist()}))


@main.command("export")
@click.argument("name")
@click.option("--parquet", "directory", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write (new or empty).")
@database_option
def export_command(name: str, directory: Path, database: str) -> None:
    """Write a campaign's reports at or below the fold watermark (seq, time bucket,
    payload) as Parquet files, with a sidecar holding its public config and the watermark
    (docs/spark.md). Needs the dask extra (pyarrow)."""
    from chorus_collector.extras import ExtraMissing
    from chorus_collector.jobs.export import export_parquet

    storage = open_database(database)
    try:
        done = export_parquet(storage, name, directory)
    except KeyError:
        raise click.ClickException(f"no campaign named {name!r}") from None
    except (ExtraMissing, FileExistsError) as error:
        raise click.ClickException(str(error)) from None
    waiting = storage.fold_status().unfolded
    click.echo(f"exported {counted(done.reports, 'report')} of {name} "
               f"(seq <= {done.watermark}) to {directory} in {counted(len(done.files), 'file')}; "
               f"{counted(waiting, 'newer report')} {'waits' if waiting == 1 else 'wait'} to be "
               "folded (`chorus aggregate`) and were not exported")


@main.command("check-aggregates")
@click.argument("name")
@database_option
@click.option("--workers", type=int, default=None, help="Processes (default: one per core).")
@scheduler_option
def check_aggregates_command(name: str, database: str, workers: int | None,
                             scheduler: str | None) -> None:
    """Recompute a campaign's statistics from its raw reports (on every core, or on a Dask
    cluster) and compare them with the folded ones, bucket by bucket. Exit status 1 on
    any mismatch."""
    from chorus_collector.jobs.aggregate import check_aggregates

    if workers is not None and workers < 1:
        raise click.ClickException("--workers must be at least 1")
    storage = open_database(database)
    with _cluster(scheduler) as client:
        recompute_with = None
        if client is not None:
            from chorus_collector.jobs.distributed import cluster_recompute

            recompute_with = cluster_recompute(client)
        try:
            # No total: the watermark counts every campaign's reports, not this one's.
            with progress_bar(None, "report", f"recomputing {name}") as bar:
                checks = check_aggregates(storage, name, workers,
                                          recompute_with=recompute_with, progress=bar.update)
        except KeyError:
            raise click.ClickException(f"no campaign named {name!r}") from None
    partial = [c for c in checks if c.retired]
    bad = [c for c in checks if not c.matches]
    reports = sum(c.recomputed_n for c in checks)
    click.echo(f"{name}: {counted(len(checks), 'time bucket')}, "
               f"{counted(reports, 'report')} recomputed; {counted(len(partial), 'bucket')} "
               "lost expired reports to gc: their counts were checked, their statistics could "
               "not be")
    for check in bad:
        click.echo(f"  bucket {check.time}: stored n = {check.stored_n}, recomputed n = "
                   f"{check.recomputed_n}: statistics differ")
    if bad:
        raise SystemExit(1)
    click.echo("statistics match the raw reports")
