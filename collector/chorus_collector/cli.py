"""The ``chorus`` command: a thin layer over library functions the tests also call.

* ``chorus serve``: run the collector with the production server;
* ``chorus shuffler``: run the optional shuffler (``--flush``: one forwarding pass);
* ``chorus campaign create|list``: admin calls over HTTP (``CHORUS_URL``, ``CHORUS_TOKEN``);
* ``chorus estimates NAME``: analyst call, printed as a table, JSON or CSV;
* ``chorus demo``: a collector, three campaigns and 20,000 simulated users, end to end;
* ``chorus gc``: drop reports past their campaign's expiry, keeping the statistics;
* ``chorus aggregate``: fold new reports into the statistics (``--scheduler``: on a Dask
  cluster; ``--from-parquet``: aggregate an export instead);
* ``chorus export NAME --parquet DIR``: a campaign's reports as Parquet files;
* ``chorus check-aggregates NAME``: recompute statistics from raw reports on every core
  (``--scheduler``: on a Dask cluster);
* ``chorus mechanisms``: which mechanism for this ε and domain (variance and report size);
* ``chorus rappor params|import``: campaigns and reports from google/rappor clients.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from chorus_client.api import CollectorAPI
from chorus_client.errors import APIError, ClientError, TransportError
from chorus_collector.formatting import format_estimates
from chorus_collector.progress import progress_bar
from chorus_collector.version import VERSION

if TYPE_CHECKING:
    from distributed import Client

    from chorus_collector.storage import Storage

__all__ = ["main"]

DEFAULT_URL = "http://127.0.0.1:8000"


def _api(url: str, token: str | None) -> CollectorAPI:
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


@click.group()
@click.version_option(VERSION, prog_name="chorus")
def main() -> None:
    """Chorus: local differential privacy telemetry."""


@main.command()
@click.option("--bind", default=None, help="host:port (default CHORUS_BIND or 127.0.0.1:8000).")
@click.option("--database", default=None, help="SQLite file (default CHORUS_DATABASE).")
@click.option("--workers", type=int, default=None, help="Worker processes.")
def serve(bind: str | None, database: str | None, workers: int | None) -> None:
    """Run the collector with the production WSGI server (gunicorn)."""
    from chorus_collector.server import serve as run_server

    overrides = {k: v for k, v in (("BIND", bind), ("DATABASE", database),
                                   ("WORKERS", workers)) if v is not None}
    with _startup_errors():
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
        _fail(str(error))


def _open_storage(database: str) -> Storage:
    from chorus_collector.storage import open_storage
    from chorus_collector.storage_postgres import is_postgres_url

    if not is_postgres_url(database) and not Path(database).exists():
        raise click.ClickException(f"{database}: no such database")
    storage = open_storage(database)
    storage.migrate()
    return storage


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

    from chorus_collector.folding import fold

    storage = _open_storage(database)
    fold(storage)  # only folded reports are dropped: fold what is pending first
    click.echo(f"dropped {storage.drop_expired(time.time(), margin)} expired reports")


@contextlib.contextmanager
def _cluster(scheduler: str | None) -> Iterator[Client | None]:
    """A client of the Dask scheduler, if one is named; its absence said in one line."""
    if scheduler is None:
        yield None
        return
    from chorus_collector.distributed import connect
    from chorus_collector.extras import ExtraMissing

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
    import time

    from chorus_collector.folding import BackgroundFolder

    if parquet is not None:
        _aggregate_parquet(parquet, scheduler)
        return
    storage = _open_storage(database)
    with _cluster(scheduler) as client:
        if client is None:
            run = BackgroundFolder(storage, interval).run_once
        else:
            from chorus_collector.distributed import fold_with_cluster

            run = functools.partial(fold_with_cluster, storage, client)
        while True:
            folded = run()
            status = storage.fold_status()
            click.echo(f"folded {folded} reports; {status.unfolded} waiting")
            if not follow:
                return
            time.sleep(interval)


def _aggregate_parquet(directory: Path, scheduler: str | None) -> None:
    from chorus_collector.distributed import aggregate_parquet
    from chorus_collector.extras import ExtraMissing

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
    from chorus_collector.export import export_parquet
    from chorus_collector.extras import ExtraMissing

    storage = _open_storage(database)
    try:
        done = export_parquet(storage, name, directory)
    except KeyError:
        raise click.ClickException(f"no campaign named {name!r}") from None
    except (ExtraMissing, FileExistsError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"exported {done.reports} reports of {name} (seq <= {done.watermark}) to "
               f"{directory} in {len(done.files)} files; {storage.fold_status().unfolded} "
               "newer reports wait to be folded (`chorus aggregate`) and were not exported")


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
    from chorus_collector.aggregate import check_aggregates

    if workers is not None and workers < 1:
        raise click.ClickException("--workers must be at least 1")
    storage = _open_storage(database)
    with _cluster(scheduler) as client:
        recompute_with = None
        if client is not None:
            from chorus_collector.distributed import cluster_recompute

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
    click.echo(f"{name}: {len(checks)} time buckets, {reports} reports recomputed; "
               f"{len(partial)} buckets lost expired reports to gc: their counts were "
               "checked, their statistics could not be")
    for check in bad:
        click.echo(f"  bucket {check.time}: stored n = {check.stored_n}, recomputed n = "
                   f"{check.recomputed_n}: statistics differ")
    if bad:
        raise SystemExit(1)
    click.echo("statistics match the raw reports")


@main.group()
def campaign() -> None:
    """Create and list campaigns (admin token)."""


@campaign.command("create")
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@url_option
@token_option
def campaign_create(spec_file: Path, url: str, token: str | None) -> None:
    """Create a campaign from a JSON definition file."""
    try:
        spec = json.loads(spec_file.read_text())
    except ValueError as error:
        raise click.ClickException(f"{spec_file}: not JSON: {error}") from None
    if not isinstance(spec, dict):
        raise click.ClickException(f"{spec_file}: a campaign definition is a JSON object")
    created = _call(lambda: _api(url, token).create_campaign(spec))
    for warning in created.get("warnings", []):
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    click.secho(worst_case_line(created), err=True)
    click.echo(json.dumps(created, indent=2))


@campaign.command("list")
@url_option
@token_option
def campaign_list(url: str, token: str | None) -> None:
    """List campaigns."""
    campaigns = _call(lambda: _api(url, token).list_campaigns())
    for c in campaigns:
        state = "retired" if c.get("retired_at") is not None else "active"
        click.echo(f"{c['name']:<24} {c['mechanism']:<8} ε={c['epsilon']:<8.4g} "
                   f"≤{c['worst_case']['per_365_days']:<8.4g}/365d "
                   f"{c['domain']['kind']:<10} {c['digest'][:12]} {state}")


@campaign.command("retire")
@click.argument("name")
@url_option
@token_option
def campaign_retire(name: str, url: str, token: str | None) -> None:
    """Retire a campaign: no new reports; its estimates stay readable, its name taken."""
    retired = _call(lambda: _api(url, token).retire_campaign(name))
    click.echo(f"{name}: retired at {retired['retired_at']:.0f} (Unix seconds); estimates "
               "stay readable")


@campaign.command("show")
@click.argument("name")
@url_option
def campaign_show(name: str, url: str) -> None:
    """Show a campaign's public config and the most ε it can take from one install."""
    config = _call(lambda: _api(url, None).get_campaign(name))
    click.echo(json.dumps(config, indent=2, ensure_ascii=False))  # the config, to ship as is
    click.echo(worst_case_line(config), err=True)


def worst_case_line(config: dict[str, Any]) -> str:
    """The campaign's own worst case, before any cap the app sets on its client."""
    bound, unit = config["worst_case"], config["privacy"]["unit"]
    period = "in its lifetime" if unit == "lifetime" else "per UTC day"
    return (f"worst case for one install: ε = {bound['per_report']:.4g} per report, "
            f"{bound['reports_per_period']} reports and ε = {bound['per_period']:.4g} {period}, "
            f"ε = {bound['per_365_days']:.4g} in any 365 days (the client's lifetime budget, "
            "8 by default, caps it further)")


@main.command()
@click.argument("name")
@click.option("--candidate", "candidates", multiple=True, help="A RAPPOR candidate (repeat).")
@click.option("--candidates-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="RAPPOR candidates, one per line.")
@click.option("--start", type=int, default=None, help="Window start (Unix seconds, aligned).")
@click.option("--end", type=int, default=None, help="Window end (exclusive).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table")
@click.option("--postprocessing", default="none", show_default=True,
              help="none (unbiased), norm-sub, projection, ibu (rr, krr, hr, shist), mle "
                   "(the other frequency oracles) or nnls (RAPPOR-like).")
@url_option
@token_option
def estimates(name: str, candidates: tuple[str, ...], candidates_file: Path | None,
              start: int | None, end: int | None, fmt: str, postprocessing: str, url: str,
              token: str | None) -> None:
    """Print a campaign's estimates with standard errors and 95% intervals."""
    wanted = list(candidates)
    if candidates_file is not None:
        wanted += [line for line in candidates_file.read_text().splitlines() if line]
    api = _api(url, token)
    if fmt == "csv":
        click.echo(_call(lambda: api.estimates_csv(name, candidates=wanted, start=start,
                                                   end=end, postprocessing=postprocessing)),
                   nl=False)
        return
    result = _call(lambda: api.estimates(name, candidates=wanted, start=start, end=end,
                                         postprocessing=postprocessing))
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(format_estimates(result))


@main.group()
def rappor() -> None:
    """Use data from google/rappor clients."""


@rappor.command("params")
@click.argument("params_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Name of the campaign to define.")
def rappor_params(params_csv: Path, name: str) -> None:
    """Print a campaign definition for google/rappor's k,h,m,p,q,f parameter CSV."""
    from chorus_collector.rappor_compat import CompatError, spec_from_google_params

    try:
        # utf-8-sig: a byte-order mark (spreadsheets write one) is not part of the header.
        spec = spec_from_google_params(params_csv.read_text(encoding="utf-8-sig"), name)
    except CompatError as error:
        raise click.ClickException(str(error)) from None
    click.echo(json.dumps(spec, indent=2))


@rappor.command("import")
@click.argument("name")
@click.argument("reports_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--time", "when", type=int, default=None,
              help="Report time (Unix seconds; default now), truncated to the precision.")
@click.option("--dry-run", is_flag=True, help="Check the whole file; send nothing.")
@url_option
@token_option
def rappor_import(name: str, reports_csv: Path, when: int | None, dry_run: bool, url: str,
                  token: str | None) -> None:
    """Upload google/rappor client reports (client,cohort,bloom,prr,irr) to a campaign.

    The whole file is checked before anything is sent. Prints the reports accepted, already
    there (duplicate) and rejected, with each reason; exit status 1 if any was rejected."""
    import time

    from chorus_collector.rappor_compat import CompatError, reports_from_google_csv
    from chorus_shared.campaign import campaign_from_config

    api = _api(url, token)
    campaign = campaign_from_config(_call(lambda: api.get_campaign(name)))
    stamp = campaign.time_bucket(time.time() if when is None else when)
    try:
        with reports_csv.open(newline="", encoding="utf-8-sig") as lines:
            reports = list(reports_from_google_csv(lines, campaign, stamp))
    except CompatError as error:
        raise click.ClickException(f"{reports_csv}: {error}; nothing was sent") from None
    except UnicodeDecodeError:
        raise click.ClickException(f"{reports_csv}: not UTF-8 text; nothing was sent") \
            from None
    if dry_run:
        click.echo(f"{len(reports)} reports checked; nothing sent (--dry-run)")
        return
    counts = {"accepted": 0, "duplicate": 0, "rejected": 0}
    reasons: Counter[str] = Counter()
    with progress_bar(len(reports), "report", f"uploading to {name}") as bar:
        for start in range(0, len(reports), 1000):
            batch = reports[start:start + 1000]
            answer = _call(lambda b=batch: api.submit(b))
            _tally(counts, answer)
            reasons.update(r.get("error", "") for r in answer.get("results", [])
                           if r.get("status") == "rejected")
            bar.update(len(batch))
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if reasons:
        summary += " (" + ", ".join(f"{kind}: {n}" for kind, n in reasons.most_common()) + ")"
    click.echo(summary)
    if counts["rejected"]:
        raise SystemExit(1)


def _tally(counts: dict[str, int], answer: dict[str, Any]) -> None:
    for key in counts:
        counts[key] += int(answer.get(key, 0))


@main.command()
@click.option("--users", type=int, default=20_000, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True,
              help="Seed of the simulated population (the client's noise is always the CSPRNG).")
def demo(users: int, seed: int) -> None:
    """Start a collector, create three campaigns, simulate users, print the estimates."""
    from chorus_collector.demo import run_demo

    run_demo(users=users, seed=seed, echo=click.echo)


@main.command()
@click.option("--epsilon", type=float, required=True, help="ε of one report.")
@click.option("--domain-size", "d", type=int, default=None,
              help="Number of categories (compares the frequency oracles).")
@click.option("--dimensions", type=int, default=None,
              help="Numbers reported together (compares the vector mean mechanisms).")
def mechanisms(epsilon: float, d: int | None, dimensions: int | None) -> None:
    """Compare mechanisms at ε: exact variance per user and report size."""
    from chorus_shared.compare import frequency_table, mean_table, vector_table
    from chorus_shared.errors import CampaignError

    try:
        if d is not None:
            _print_comparison(f"frequency oracles, d = {d}: n·Var[f̂] as f → 0",
                              frequency_table(epsilon, d), "variance_per_user")
        _print_comparison("one number: worst-case n·Var of the mean on [−1, 1]",
                          mean_table(epsilon), "worst_case_variance")
        if dimensions is not None:
            _print_comparison(f"{dimensions} numbers: worst-case n·Var per attribute on "
                              "[−1, 1]", vector_table(epsilon, dimensions),
                              "worst_case_variance")
    except CampaignError as error:
        raise click.ClickException(str(error)) from None
    if epsilon > 10:
        click.echo(f"\nwarning: ε = {epsilon:g} protects little (above 10)")


def _print_comparison(title: str, rows: list[dict[str, Any]], key: str) -> None:
    best = min(row[key] for row in rows)
    click.echo(f"\n{title}")
    click.echo(f"  {'mechanism':<12}{'variance':>12}{'bits':>8}")
    for row in sorted(rows, key=lambda r: (r[key], r["report_bits"])):
        mark = "  ← least variance" if row[key] <= best * (1 + 1e-9) else ""
        click.echo(f"  {row['mechanism']:<12}{row[key]:>12.4g}{row['report_bits']:>8}{mark}")


def _call(fn: Any) -> Any:
    """A call to the collector, its failure said in one line that names what to change."""
    try:
        return fn()
    except TransportError as error:
        raise click.ClickException(f"cannot reach the collector (check --url or CHORUS_URL): "
                                   f"{error}") from None
    except APIError as error:
        hint = {401: " (set CHORUS_TOKEN or pass --token)",
                403: " (this token does not grant the call: an analyst or admin token?)"}
        raise click.ClickException(f"{error}{hint.get(error.status, '')}") from None
    except ClientError as error:
        raise click.ClickException(str(error)) from None


def _fail(message: str) -> NoReturn:
    """A configuration error at start-up: one line and exit status 2, no traceback."""
    click.echo(f"Error: {message}", err=True)
    raise SystemExit(2)


@contextlib.contextmanager
def _startup_errors() -> Iterator[None]:
    from chorus_collector.settings import SettingsError
    from chorus_collector.storage import SchemaError

    try:
        yield
    except (SettingsError, SchemaError) as error:
        _fail(str(error))


if __name__ == "__main__":
    sys.exit(main())
