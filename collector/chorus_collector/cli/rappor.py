"""``chorus rappor params|import``: campaigns and reports from google/rappor clients."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import click

from chorus_collector.cli.common import (
    call_collector,
    collector_api,
    counted,
    token_option,
    url_option,
)
from chorus_collector.cli.progress import progress_bar
from chorus_collector.cli.root import main


@main.group()
def rappor() -> None:
    """Use data from google/rappor clients."""


@rappor.command("params")
@click.argument("params_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Name of the campaign to define.")
def rappor_params(params_csv: Path, name: str) -> None:
    """Print a campaign definition for google/rappor's k,h,m,p,q,f parameter CSV."""
    from chorus_collector.ingest.rappor_compat import CompatError, spec_from_google_params

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

    from chorus_collector.ingest.rappor_compat import CompatError, reports_from_google_csv
    from chorus_shared.campaign import campaign_from_config

    api = collector_api(url, token)
    campaign = campaign_from_config(call_collector(lambda: api.get_campaign(name)))
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
        click.echo(f"{counted(len(reports), 'report')} checked; nothing sent (--dry-run)")
        return
    counts = {"accepted": 0, "duplicate": 0, "rejected": 0}
    reasons: Counter[str] = Counter()
    with progress_bar(len(reports), "report", f"uploading to {name}") as bar:
        for start in range(0, len(reports), 1000):
            batch = reports[start:start + 1000]
            answer = call_collector(lambda b=batch: api.submit(b))
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
