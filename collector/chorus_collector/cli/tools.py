"""``chorus demo`` and ``chorus mechanisms``."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import click

from chorus_collector.cli.root import main


@main.command()
@click.option("--users", type=click.IntRange(min=100), default=20_000, show_default=True,
              help="Simulated users (estimates need 100 reports per campaign).")
@click.option("--seed", type=int, default=7, show_default=True,
              help="Seed of the simulated population (the client's noise is always the CSPRNG).")
@click.option("--serve", is_flag=True,
              help="Keep the collector and its dashboard serving on loopback until Ctrl-C.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Port on 127.0.0.1 (default: a free one).")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              default=".demo", show_default=True,
              help="Folder that keeps the demo's database: a later run with the same --users "
                   "and --seed serves it without simulating again.")
@click.option("--fresh", is_flag=True, help="Simulate again even if the folder holds the "
                                            "same demo.")
def demo(users: int, seed: int, serve: bool, port: int | None, folder: Path,
         fresh: bool) -> None:
    """Start a collector, create seven campaigns (one a daily series over 90 days),
    simulate users, print the estimates beside the truth and
    the dashboard's address; with --serve, keep serving until Ctrl-C. The database stays
    in --dir for the next run."""
    from chorus_collector.cli.demo import run_demo
    from chorus_collector.cli.demo_store import FolderBusy

    if port is not None and not _port_is_free(port):
        raise click.ClickException(f"port {port} on 127.0.0.1 is in use: choose another, or "
                                   "leave --port out for a free one")
    try:
        run_demo(users=users, seed=seed, echo=click.echo, serve=serve, port=port,
                 folder=folder, fresh=fresh)
    except FolderBusy as error:
        raise click.ClickException(str(error)) from None
    except RuntimeError as error:  # the server did not start, or died while serving
        lines = [line for line in str(error).splitlines() if line.strip()]
        # What happened, and the server log's last word on why (a port in use, say).
        raise click.ClickException(" ".join(dict.fromkeys([lines[0], lines[-1]]))) from None


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        # As gunicorn binds: a port whose last connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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

    tables: list[tuple[str, list[dict[str, Any]], str]] = []
    try:
        if d is not None:
            tables.append((f"frequency oracles, d = {d}: n·Var[f̂] as f → 0",
                           frequency_table(epsilon, d), "variance_per_user"))
        tables.append(("one number: worst-case n·Var of the mean on [−1, 1]",
                       mean_table(epsilon), "worst_case_variance"))
        if dimensions is not None:
            tables.append((f"{dimensions} numbers: worst-case n·Var per attribute on [−1, 1]",
                           vector_table(epsilon, dimensions), "worst_case_variance"))
    except CampaignError as error:
        raise click.ClickException(str(error)) from None
    for number, (title, rows, key) in enumerate(tables):
        if number:  # a blank line between tables, none before the first
            click.echo()
        _print_comparison(title, rows, key)
    if epsilon > 10:
        click.echo(f"\nwarning: ε = {epsilon:g} protects little (above 10)")


def _print_comparison(title: str, rows: list[dict[str, Any]], key: str) -> None:
    best = min(row[key] for row in rows)
    click.echo(title)
    click.echo(f"  {'mechanism':<12}{'variance':>12}{'bits':>8}")
    for row in sorted(rows, key=lambda r: (r[key], r["report_bits"])):
        mark = "  ← least variance" if row[key] <= best * (1 + 1e-9) else ""
        click.echo(f"  {row['mechanism']:<12}{row[key]:>12.4g}{row['report_bits']:>8}{mark}")
