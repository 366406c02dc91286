"""Alert rules over HTTP: ``chorus alert create|list|show|delete|firings`` (docs/alerts.md)."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from chorus_collector.cli.common import call_collector, collector_api, token_option, url_option
from chorus_collector.cli.root import main


@main.group()
def alert() -> None:
    """Alert rules: a webhook called when a comparison turns significant (admin writes,
    analyst reads)."""


@alert.command("create")
@click.argument("name")
@click.option("--campaign", required=True, help="The campaign the rule watches.")
@click.option("--window", required=True, metavar="D",
              help="The last D against the D before: seconds, or 30m, 6h, 1d, 2w (whole time "
                   "buckets of the campaign).")
@click.option("--webhook", required=True, metavar="URL", help="http:// or https:// URL to POST to.")
@click.option("--value", "values", multiple=True,
              help="A value to watch (repeat; default every value; for open strings, the "
                   "candidates).")
@click.option("--correction", type=click.Choice(["benjamini-hochberg", "bonferroni"]),
              default="benjamini-hochberg", show_default=True)
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significant: adjusted p-value below this.")
@click.option("--min-change", type=float, default=0.0, show_default=True,
              help="…and a change at least this large in absolute value.")
@click.option("--resolved", is_flag=True, help="Also notify when a value stops being "
                                               "significant.")
@click.option("--secret-env", metavar="VARIABLE", default=None,
              help="The environment variable holding the secret that signs notifications "
                   "(never on the command line, where ps shows it).")
@click.option("--json", "as_json", is_flag=True, help="Print the rule as JSON.")
@url_option
@token_option
def alert_create(name: str, campaign: str, window: str, webhook: str, values: tuple[str, ...],
                 correction: str, alpha: float, min_change: float, resolved: bool,
                 secret_env: str | None, as_json: bool, url: str, token: str | None) -> None:
    """Create an alert rule NAME (admin token)."""
    rule: dict[str, Any] = {"name": name, "campaign": campaign,
                            "window": int(window) if window.isdigit() else window,
                            "webhook": webhook, "values": list(values),
                            "correction": correction, "alpha": alpha,
                            "min_change": min_change, "resolved": resolved}
    if secret_env is not None:
        secret = os.environ.get(secret_env)
        if not secret:
            raise click.ClickException(f"--secret-env: {secret_env} is not set")
        rule["secret"] = secret
    created = call_collector(lambda: collector_api(url, token).create_alert(rule))
    click.echo(json.dumps(created, indent=2) if as_json else f"created {_line(created)}")


def _line(rule: dict[str, Any]) -> str:
    values = ", ".join(rule["values"]) or "every value"
    extra = f", |change| >= {rule['min_change']:g}" if rule["min_change"] else ""
    return (f"alert {rule['name']!r} on {rule['campaign']}: the last {rule['window']} s "
            f"against the {rule['window']} s before, {values}, {rule['correction']} at alpha "
            f"{rule['alpha']:g}{extra} → {rule['webhook']}"
            f"{' (signed)' if rule['signed'] else ''}")


@alert.command("list")
@click.option("--campaign", default=None, help="Only this campaign's rules.")
@url_option
@token_option
def alert_list(campaign: str | None, url: str, token: str | None) -> None:
    """List alert rules, each with its last evaluation (analyst token)."""
    rules = call_collector(lambda: collector_api(url, token).list_alerts(campaign))
    if not rules:
        click.echo("no alert rules yet: `chorus alert create` makes one")
    for rule in rules:
        click.echo(_line(rule))
        if rule["last_error"]:
            click.echo(f"    last evaluation: {rule['last_error']}")


@alert.command("show")
@click.argument("name")
@url_option
@token_option
def alert_show(name: str, url: str, token: str | None) -> None:
    """A rule as JSON, with its values significant now (analyst token)."""
    rule = call_collector(lambda: collector_api(url, token).get_alert(name))
    click.echo(json.dumps(rule, indent=2, ensure_ascii=False))


@alert.command("delete")
@click.argument("name")
@url_option
@token_option
def alert_delete(name: str, url: str, token: str | None) -> None:
    """Delete a rule with its notifications, delivered or not (admin token)."""
    call_collector(lambda: collector_api(url, token).delete_alert(name))
    click.echo(f"deleted alert {name!r}")


@alert.command("firings")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@url_option
@token_option
def alert_firings(name: str, limit: int, url: str, token: str | None) -> None:
    """A rule's recent notifications, newest first, and how their delivery went."""
    firings = call_collector(lambda: collector_api(url, token).alert_firings(name, limit))
    if not firings:
        click.echo(f"{name}: no notifications yet")
    for firing in firings:
        payload = firing["payload"]
        click.echo(f"{firing['event']:<9} {firing['status']:<9} attempts {firing['attempts']}"
                   f"  {payload['summary']}")
        if firing["last_error"]:
            click.echo(f"    last error: {firing['last_error']}")
