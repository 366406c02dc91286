"""``chorus demo`` and ``chorus mechanisms``."""

from __future__ import annotations

from typing import Any

import click

from chorus_collector.cli.root import main


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
