"""``chorus design``: the campaign designer in a terminal (:mod:`chorus_collector.design.designer`).

Prints each mechanism's standard error and interval for the planned campaign, the report size
and how one install reports over time; with a schedule (``--cadence``, ``--start``,
``--periods``, ``--installs``, ``--budget``), the plan over the horizon: ε per report against
reports per install, each period's standard error and chance of being empty, and the central ε
a shuffler adds; with ``--distribution``, one simulated window; with ``--create NAME``, creates
the campaign through the collector (admin token).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import click

from chorus_collector.cli.campaigns import reporting_line, worst_case_line
from chorus_collector.cli.common import (
    call_collector,
    collector_api,
    counted,
    token_option,
    url_option,
)
from chorus_collector.cli.root import main
from chorus_collector.design.request import KINDS


@main.command("design")
@click.option("--kind", type=click.Choice(KINDS), required=True, help="The kind of data.")
@click.option("--categories", default=None, metavar="A,B,C", help="Category names.")
@click.option("--domain-size", type=int, default=None, help="How many categories (v0, v1…).")
@click.option("--range", "value_range", default=None, metavar="LO,HI",
              help="The numbers' range (for a vector: every attribute's).")
@click.option("--dimensions", type=int, default=None, help="Numbers reported together.")
@click.option("--candidates", type=int, default=None,
              help="Strings: how many candidates the analyst will decode against.")
@click.option("--epsilon", type=float, default=None,
              help="ε of one report (with a schedule, default: the recommended one).")
@click.option("--users", type=int, default=None,
              help="Users (reports) per time window (with a schedule, default: the reports "
                   "one period expects).")
@click.option("--installs", type=int, default=None,
              help="A plan over time: the installs active in a period.")
@click.option("--cadence", type=click.Choice(["day", "week"]), default=None,
              help="A plan over time: one period is a UTC day or a week.")
@click.option("--start", default=None, metavar="YYYY-MM-DD",
              help="A plan over time: the UTC date of the first period.")
@click.option("--periods", type=int, default=None,
              help="A plan over time: how many periods (default: a year of them).")
@click.option("--end", default=None, metavar="YYYY-MM-DD",
              help="A plan over time: the UTC date of the last day, instead of --periods.")
@click.option("--min-batch-size", type=int, default=None,
              help="Fewest reports an estimate may use (default 100).")
@click.option("--frequency", type=float, default=None,
              help="The share whose standard error to show beside f → 0 (default 0.1).")
@click.option("--unit", type=click.Choice(["lifetime", "day"]), default=None,
              help="Privacy period of the campaign's policy (default: lifetime).")
@click.option("--budget", type=float, default=None,
              help="ε one install may spend per period; with a schedule, the campaign's "
                   "share of each install's lifetime budget.")
@click.option("--max-reports", type=int, default=None, help="Reports per install per period.")
@click.option("--time-precision", type=int, default=None, help="Seconds per time bucket.")
@click.option("--distribution", default=None, metavar="A=0.5,B=0.5",
              help="Simulate users holding these values: category=share, number=weight, "
                   "x:y:z=weight for a vector, or JSON.")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option("--mechanism", default=None,
              help="The mechanism to simulate or create (default: the recommended one).")
@click.option("--create", "create_name", default=None, metavar="NAME",
              help="Create the campaign with this name (admin token).")
@click.option("--description", default="", help="The created campaign's description.")
@click.option("--accept-weak-privacy", is_flag=True,
              help="Create it even with ε ≥ 10 (each report then protects little).")
@click.option("--format", "output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@url_option
@token_option
def design_command(kind: str, categories: str | None, domain_size: int | None,
                   value_range: str | None, dimensions: int | None, candidates: int | None,
                   epsilon: float | None, users: int | None, installs: int | None,
                   cadence: str | None, start: str | None, periods: int | None,
                   end: str | None, min_batch_size: int | None,
                   frequency: float | None, unit: str | None,
                   budget: float | None, max_reports: int | None, time_precision: int | None,
                   distribution: str | None, seed: int, mechanism: str | None,
                   create_name: str | None, description: str, accept_weak_privacy: bool,
                   output: str, url: str, token: str | None) -> None:
    """Compare mechanisms for a planned campaign; simulate it; create it."""
    from chorus_collector.design.designer import design, simulate_design, spec
    from chorus_shared.errors import CampaignError

    request: dict[str, Any] = {"kind": kind}
    try:
        if categories is not None:
            request["categories"] = [c.strip() for c in categories.split(",")]
        optional = {"epsilon": epsilon, "users": users, "domain_size": domain_size,
                    "dimensions": dimensions, "candidates": candidates,
                    "frequency": frequency, "time_precision": time_precision,
                    "installs": installs, "min_batch_size": min_batch_size}
        request.update({k: v for k, v in optional.items() if v is not None})
        if value_range is not None:
            request["lo"], request["hi"] = _numbers(value_range, "--range", 2)
        calendar = {"cadence": cadence, "start": start, "periods": periods, "end": end}
        if any(v is not None for v in calendar.values()):
            request["schedule"] = {k: v for k, v in calendar.items() if v is not None}
        if request.get("epsilon") is None and "schedule" not in request:
            raise CampaignError("give --epsilon (ε of one report), or a plan over time "
                                "(--cadence, --start, --installs, --budget) to have it "
                                "recommended")
        if request.get("users") is None and "installs" not in request \
                and "schedule" not in request:
            raise CampaignError("give --users (reports per time window), or --installs with "
                                "a schedule")
        policy = {"unit": unit, "budget": budget, "max_reports": max_reports}
        if any(v is not None for v in policy.values()):
            request["privacy"] = {k: v for k, v in policy.items() if v is not None}
        if distribution is not None:
            request["distribution"] = parse_distribution(kind, distribution)
        result = design(request)
        chosen = mechanism or result.recommended
        simulation = simulate_design(result.request, chosen, seed) \
            if distribution is not None else None
        definition = spec(result.request, chosen, create_name, description=description,
                          accept_weak_privacy=accept_weak_privacy) \
            if create_name is not None else None
    except CampaignError as error:
        hint = " (here: --accept-weak-privacy)" if "accept_weak_privacy" in str(error) else ""
        raise click.ClickException(f"{error}{hint}") from None
    if output == "json":
        click.echo(json.dumps({"design": result.to_json(), "simulation": simulation},
                              indent=2, ensure_ascii=False))
    else:
        click.echo(design_table(result.to_json()))
        if simulation is not None:
            click.echo("\n" + simulation_table(simulation))
    if definition is not None:
        created = call_collector(lambda: collector_api(url, token).create_campaign(definition))
        for warning in created.get("warnings", []):
            click.secho(f"warning: {warning}", fg="yellow", err=True)
        click.echo(f"created {created['name']} ({created['mechanism']}, digest "
                   f"{created['digest']})", err=True)
        click.echo(worst_case_line(created), err=True)
        click.echo(reporting_line(created), err=True)


def _numbers(text: str, option: str, count: int | None = None) -> list[float]:
    try:
        numbers = [float(part) for part in text.split(",")]
    except ValueError:
        raise click.ClickException(f"{option} takes numbers separated by commas, got "
                                   f"{text!r}") from None
    if count is not None and len(numbers) != count:
        raise click.ClickException(f"{option} takes {count} numbers, got {len(numbers)}")
    return numbers


def parse_distribution(kind: str, text: str) -> Any:
    """``a=0.5,b=0.5`` or one per line (categories, strings), ``1=0.2,5=0.8`` or ``1,5``
    (numbers), ``1:2=0.5,3:4=0.5`` (vectors), or the JSON form the designer reads: the
    dashboard's reader (``design.distribution_text``), so either accepts what the other
    shows."""
    from chorus_collector.design import distribution_text

    try:
        return distribution_text.parse_distribution(kind, text)
    except distribution_text.DistributionTextError as error:
        raise click.ClickException(f"--distribution: {error}") from None


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.4g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as wide as their widest cell: nothing is ever cut."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(line, widths, strict=True))).rstrip()
             for line in (header, *rows)]
    return "\n".join(lines)


def design_table(body: dict[str, Any]) -> str:
    """The designer's answer for a terminal."""
    request = body["request"]
    frequencies = body["kind"] in ("categories", "strings")
    lines = [f"{body['kind']} at ε = {body['epsilon']:g}, {body['users']} users per window "
             f"(95% intervals; {body['variance_model']})"]
    if frequencies:
        header = ["mechanism", "SE f→0", "±95% f→0", f"SE f={request['frequency']:g}",
                  f"±95% f={request['frequency']:g}", "n·Var", "bits", ""]
    else:
        header = ["mechanism", "SE (worst)", "±95%", "n·Var [−1,1]", "bits", ""]
    rows = []
    for row in body["rows"]:
        cells = [row["mechanism"], _number(row["std_error"]), _number(row["ci_half_width"])]
        if frequencies:
            cells += [_number(row["std_error_at_frequency"]),
                      _number(row["ci_half_width_at_frequency"])]
        cells += [_number(row["variance_per_user"]), str(row["report_bits"]),
                  "← recommended" if row["recommended"] else ""]
        rows.append(cells)
    lines += ["", _table(header, rows), "", "reporting: " + body["privacy"]["summary"],
              "memoization: " + body["privacy"]["memoization"]]
    # One line per note, naming every mechanism it applies to.
    by_note: dict[str, list[str]] = {}
    for row in body["rows"]:
        for note in row["notes"]:
            by_note.setdefault(note, []).append(row["mechanism"])
    lines += [f"note: {note}" for note in body["notes"]]
    lines += [f"note ({', '.join(names)}): {note}" for note, names in by_note.items()]
    if body.get("plan") is not None:
        lines += ["", plan_table(body["plan"])]
    return "\n".join(lines)


def _share(value: float | None) -> str:
    if value is None:
        return "—"
    return "0" if value == 0 else f"{value:.3g}" if value >= 1e-3 else f"{value:.1e}"


def plan_table(plan: dict[str, Any]) -> str:
    """A plan over time: the trade-off table, the recommendation and what it means."""
    cadence = plan["cadence"]
    lines = [f"plan over time: {plan['installs']:,} installs, {plan['periods']} {cadence}s "
             f"from {plan['start']}, a share of ε = {plan['budget']:g} of each install's "
             f"lifetime budget ({plan['mechanism']}, SE of the {plan['quantity']} per "
             f"{cadence})", ""]
    header = ["ε/report", "design", "reports/install", f"reports/{cadence}",
              f"SE per {cadence}", "P(empty)", "P(< min batch)", ""]
    rows = []
    for option in plan["options"]:
        marks = [word for word, flag in (("recommended", option["recommended"]),
                                         ("planned", option["chosen"])) if flag]
        rows.append([f"{option['epsilon']:.4g}", option["design"],
                     str(option["reports_per_install"]),
                     f"{option['expected_reports_per_period']:,.1f}",
                     _number(option["std_error"]), _share(option["p_empty"]),
                     _share(option["p_below_min_batch"]),
                     f"← {', '.join(marks)}" if marks else ""])
    lines += [_table(header, rows), "",
              f"planned: {plan['reporting']}",
              f"recommended: ε = {plan['recommended_epsilon']:.4g} per report, "
              f"{counted(plan['recommended_reports'], 'report')} per install",
              f"why: {plan['optimum']}", f"estimates: {plan['estimand']}"]
    lines += [f"note: {note}" for note in plan["notes"]]
    lines += [f"warning: {warning}" for warning in plan["warnings"]]
    shuffling = plan["shuffling"]
    lines += ["", f"with a shuffler: {shuffling['summary']}"]
    lines += [f"  assuming: {assumption}" for assumption in shuffling["assumptions"]]
    lines += [f"  not given: {shuffling['not_given']}"]
    return "\n".join(lines)


def simulation_table(body: dict[str, Any]) -> str:
    header = ["", "true", "estimate", "SE", "95% interval", "predicted SE"]
    rows = [[e["label"], _number(e["true"]), _number(e["estimate"]), _number(e["std_error"]),
             f"[{_number(e['ci_low'])}, {_number(e['ci_high'])}]",
             _number(e["predicted_std_error"])] for e in body["estimates"]]
    lines = [f"simulated {body['mechanism']}: {body['simulated_users']} users "
             f"({body['simulator']}, seed {body['seed']})", "", _table(header, rows)]
    lines += [f"note: {note}" for note in body["notes"]]
    return "\n".join(lines)
