"""Admin and analyst calls over HTTP: ``campaign create|list|retire|show`` and
``estimates``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from chorus_client.policy import DEFAULT_LIFETIME_BUDGET
from chorus_collector.cli.common import (
    call_collector,
    collector_api,
    counted,
    token_option,
    url_option,
)
from chorus_collector.cli.formatting import format_estimates
from chorus_collector.cli.root import main
from chorus_collector.cli.timespec import campaign_window, requested_window, window_options
from chorus_shared.campaign import campaign_from_spec
from chorus_shared.errors import CampaignError
from chorus_shared.privacy import reports_within


@main.group()
def campaign() -> None:
    """Create and list campaigns (admin token)."""


@campaign.command("create")
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print the campaign's public config as JSON instead of a summary.")
@url_option
@token_option
def campaign_create(spec_file: Path, as_json: bool, url: str, token: str | None) -> None:
    """Create a campaign from a JSON definition file (again with the same file: nothing
    changes, and it says so)."""
    try:
        spec = json.loads(spec_file.read_text())
    except ValueError as error:
        raise click.ClickException(f"{spec_file}: not JSON: {error}") from None
    if not isinstance(spec, dict):
        raise click.ClickException(f"{spec_file}: a campaign definition is a JSON object")
    config, created = call_collector(lambda: collector_api(url, token).ensure_campaign(spec))
    for warning in config.get("warnings", []):
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    click.secho(worst_case_line(config), err=True)
    click.secho(reporting_line(config), err=True)
    if as_json:
        click.echo(json.dumps(config, indent=2, ensure_ascii=False))
    else:
        click.echo(creation_summary(config, created))


def creation_summary(config: dict[str, Any], created: bool) -> str:
    """One line: what was created, or that this very campaign was already there."""
    what = (f"{config['mechanism']}, ε = {config['epsilon']:.4g}, "
            f"digest {config['digest'][:12]}")
    if created:
        return (f"created campaign {config['name']!r} ({what}); "
                f"`chorus campaign show {config['name']}` prints the config to ship")
    return (f"campaign {config['name']!r} already exists with this definition ({what}): "
            "nothing changed")


#: ``campaign list``'s columns: (header, width); the last one takes the rest of the line.
_LIST_COLUMNS = (("NAME", 24), ("MECHANISM", 9), ("ε", 8), ("DOMAIN", 10), ("DIGEST", 12),
                 ("STATE", 0))


@campaign.command("list")
@url_option
@token_option
def campaign_list(url: str, token: str | None) -> None:
    """List campaigns, each with how one install reports (the indented line below it)."""
    campaigns = call_collector(lambda: collector_api(url, token).list_campaigns())
    if not campaigns:
        click.echo("no campaigns yet: `chorus campaign create SPEC.json` makes one")
        return
    click.echo(_list_row([header for header, _ in _LIST_COLUMNS]))
    for c in campaigns:
        state = "retired" if c.get("retired_at") is not None else "active"
        click.echo(_list_row([c["name"], c["mechanism"], f"{c['epsilon']:.4g}",
                              c["domain"]["kind"], c["digest"][:12], state]))
        click.echo(f"    {reporting_of(c)}")


def _list_row(cells: list[str]) -> str:
    return " ".join(f"{cell:<{width}}" if width else cell
                    for cell, (_, width) in zip(cells, _LIST_COLUMNS, strict=True))


@campaign.command("retire")
@click.argument("name")
@url_option
@token_option
def campaign_retire(name: str, url: str, token: str | None) -> None:
    """Retire a campaign: no new reports; its estimates stay readable, its name taken."""
    retired = call_collector(lambda: collector_api(url, token).retire_campaign(name))
    click.echo(f"{name}: retired at {retired['retired_at']:.0f} (Unix seconds); estimates "
               "stay readable")


@campaign.command("show")
@click.argument("name")
@url_option
def campaign_show(name: str, url: str) -> None:
    """Show a campaign's public config and the most ε it can take from one install."""
    config = call_collector(lambda: collector_api(url, None).get_campaign(name))
    click.echo(json.dumps(config, indent=2, ensure_ascii=False))  # the config, to ship as is
    click.echo(worst_case_line(config), err=True)
    click.echo(reporting_line(config), err=True)


def worst_case_line(config: dict[str, Any]) -> str:
    """The campaign's own worst case, then the client's lifetime budget, which caps it (and
    silences a campaign without a schedule once spent)."""
    bound, unit = config["worst_case"], config["privacy"]["unit"]
    period = "in its lifetime" if unit == "lifetime" else "per UTC day"
    lifetime = DEFAULT_LIFETIME_BUDGET
    reports = reports_within(lifetime, bound["per_report"], 10**6)
    if unit == "lifetime":  # the campaign's own count may be the smaller
        reports = min(reports, bound["reports_per_period"])
    return (f"worst case for one install: ε = {bound['per_report']:.4g} per report, "
            f"{counted(bound['reports_per_period'], 'report')} and "
            f"ε = {bound['per_period']:.4g} {period}, "
            f"ε = {bound['per_365_days']:.4g} in any 365 days by the campaign's own policy; "
            f"the client's lifetime budget ({lifetime:g} by default, for all of the app's "
            f"campaigns) caps it at {counted(reports, 'report')}, ε = "
            f"{min(lifetime, reports * bound['per_report']):.4g} in all")


def reporting_of(config: dict[str, Any]) -> str:
    """How many reports one install makes, and when, in words (``Campaign.reporting``): the
    collector's list says it beside each config; from a config alone it is recomputed."""
    if isinstance(config.get("reporting"), str):
        return str(config["reporting"])
    known = {key: value for key, value in config.items()
             if key not in ("reporting", "retired_at", "warnings")}
    try:
        return campaign_from_spec(known, warn=False).reporting
    except CampaignError as error:  # another version's config: say so, do not guess
        return f"(how often it reports cannot be read from this config: {error})"


def reporting_line(config: dict[str, Any]) -> str:
    return f"reporting: {reporting_of(config)}"


@main.command()
@click.argument("name")
@click.option("--candidate", "candidates", multiple=True,
              help="A candidate string (repeat): required for campaigns over open strings "
                   "(rappor, cms, …); for discovery campaigns (pem, treehist), optional: "
                   "without one they list what their walk found, with them they re-estimate "
                   "the list (the second stage).")
@click.option("--candidates-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Candidate strings, one per line.")
@window_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
              help="table: full values, with the window, n, ε and variance model above; csv: "
                   "the same columns as the collector's CSV, window_start, window_end, n and "
                   "epsilon on every row.")
@click.option("--postprocessing", default=None,
              help="none (unbiased; the default), norm-sub, projection, ibu (rr, krr, hr, "
                   "shist), mle (the other frequency oracles), nnls (RAPPOR-like); ems (the "
                   "default) or em for sw; norm-mul (record campaigns); consistent (record "
                   "campaigns of mechanism marginals: the collected tables made to agree, "
                   "CALM-style).")
@click.option("--quantiles", default=None, metavar="Q[,Q…]",
              help="Distribution campaigns: the quantiles to read, e.g. 0.5,0.95,0.99 (the "
                   "default).")
@click.option("--range", "ranges", multiple=True, metavar="A:B",
              help="Distribution campaigns: estimate the share of values in [A, B] (repeat).")
@click.option("--joint", "joints", multiple=True, metavar="A,B",
              help="Record campaigns of mechanism marginals: the joint distribution of these "
                   "attributes, with conditionals and an independence test for a pair "
                   "(repeat; default: every pair, up to 10).")
@url_option
@token_option
def estimates(name: str, candidates: tuple[str, ...], candidates_file: Path | None,
              start: int | None, end: int | None, last: int | None, fmt: str,
              postprocessing: str | None, quantiles: str | None, ranges: tuple[str, ...],
              joints: tuple[str, ...], url: str, token: str | None) -> None:
    """Print a campaign's estimates with standard errors and 95% intervals, over all data or
    over a window (--start/--end or --last). A discovery campaign (pem, treehist) prints the
    values its walk found, each flagged detected or not, and a line on the walk; with
    --candidate it re-estimates those strings instead. A distribution campaign prints its quantiles,
    mean, the shares in --range and a coarse histogram; a record campaign each attribute's
    marginal, then each joint (--joint) cell by cell with both conditionals and the test of
    independence."""
    wanted = list(candidates)
    if candidates_file is not None:
        wanted += [line for line in candidates_file.read_text().splitlines() if line]
    levels = _numbers(quantiles.split(","), "--quantiles") if quantiles else None
    pairs = [_range(text) for text in ranges]
    tuples = [_joint(text) for text in joints]
    api = collector_api(url, token)
    window = campaign_window(api, name, requested_window(start, end, last))
    if fmt == "csv":
        click.echo(call_collector(lambda: api.estimates_csv(
            name, candidates=wanted, start=window.start, end=window.end,
            postprocessing=postprocessing, quantiles=levels, ranges=pairs, joints=tuples)),
            nl=False)
        return
    result = call_collector(lambda: api.estimates(
        name, candidates=wanted, start=window.start, end=window.end,
        postprocessing=postprocessing, quantiles=levels, ranges=pairs, joints=tuples))
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(format_estimates(result))


def _numbers(texts: list[str], option: str) -> list[float]:
    try:
        return [float(text) for text in texts]
    except ValueError:
        raise click.BadParameter(f"{','.join(texts)!r}: expected numbers such as 0.5,0.95",
                                 param_hint=option) from None


def _range(text: str) -> tuple[float, float]:
    parts = text.split(":")
    if len(parts) != 2:
        raise click.BadParameter(f"{text!r}: expected A:B, e.g. 100:250", param_hint="--range")
    low, high = _numbers(parts, "--range")
    return low, high


def _joint(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if len(names) < 2 or not all(names):
        raise click.BadParameter(f"{text!r}: expected attribute names A,B (or A,B,C), e.g. "
                                 "browser,os", param_hint="--joint")
    return names
