"""Analyst calls over time: ``series`` (estimates per bucket, day, week or n seconds) and
``compare`` (each value's change between two windows, with a multiple-testing correction)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from chorus_client.api import CollectorAPI
from chorus_collector.cli.common import (
    call_collector,
    collector_api,
    token_option,
    url_option,
)
from chorus_collector.cli.formatting_analysis import format_comparison, format_series
from chorus_collector.cli.root import main
from chorus_collector.cli.timespec import (
    INSTANT,
    Window,
    campaign_window,
    parse_duration,
    requested_window,
    window_options,
)
from chorus_collector.results.tables import format_instant

STEP_NAMES = ("period", "bucket", "day", "week")
DAY, WEEK = 86_400, 604_800
MONDAY = 4 * DAY  # 1970-01-05, the first Monday after the epoch

candidate_option = click.option("--candidate", "candidates", multiple=True,
                                help="A candidate string, for campaigns over open strings "
                                     "(repeat).")
candidates_file_option = click.option(
    "--candidates-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Candidate strings, one per line.")


def format_option(csv_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]),
                        default="table", show_default=True,
                        help=f"table: every value in full, what the numbers are above; json: "
                             f"the collector's answer; csv: {csv_help}")


def step_value(text: str) -> int | str:
    """``period``, ``bucket``, ``day``, ``week``, Unix seconds (``3600``) or a duration
    (``6h``)."""
    if text in STEP_NAMES:
        return text
    if text.isdigit():
        return int(text)
    try:
        return parse_duration(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: use period, bucket, day, week, seconds (3600) or "
                                 "a duration (6h, 2d)", param_hint="--step") from None


def _whole_steps(window: Window, step: int | str | None) -> Window:
    """``--last`` widened to whole points of a day, week or n-second step, so that its first
    and last points are not cut short (a point covers less when a window cuts it); the time
    buckets' alignment follows in ``campaign_window``. Says so on stderr. A campaign's own
    periods (the default step of a scheduled campaign) are left to the collector."""
    if step in (None, "bucket", "period") or window.start is None or window.end is None:
        return window
    size = {"day": DAY, "week": WEEK}.get(str(step), step if isinstance(step, int) else 0)
    origin = MONDAY if step == "week" else 0  # ISO weeks start on Monday (steps.py)
    shifted = Window(window.start - origin, window.end - origin).aligned(int(size))
    assert shifted.start is not None and shifted.end is not None
    widened = Window(max(0, shifted.start + origin), shifted.end + origin)
    if widened != window:
        click.echo(f"window {widened.describe()}: whole points of the step ({step}) from "
                   f"{window.describe()}", err=True)
    return widened


def wanted_candidates(candidates: tuple[str, ...], candidates_file: Path | None) -> list[str]:
    wanted = list(candidates)
    if candidates_file is not None:
        wanted += [line for line in candidates_file.read_text().splitlines() if line]
    return wanted


@main.command()
@click.argument("name")
@window_options
@click.option("--step", default=None, metavar="STEP",
              help="One point per period of a campaign's schedule (period: its cadence from "
                   "its start, the default for a campaign with a schedule, over its horizon "
                   "up to now), time bucket (the campaign's time precision; the default "
                   "otherwise), day (UTC), week (ISO, from Monday 00:00 UTC), or seconds "
                   "(3600) or a duration (6h): a multiple of the time precision.")
@click.option("--value", "values", multiple=True,
              help="Only this category's series (repeat). Default: every category.")
@click.option("--top", type=click.IntRange(min=1), default=None, metavar="K",
              help="Only the K categories estimated largest over the whole window.")
@candidate_option
@candidates_file_option
@format_option("the collector's CSV: one row per (value, point) with its start in ISO "
               "8601, n and ε.")
@url_option
@token_option
def series(name: str, start: int | None, end: int | None, last: int | None, step: str | None,
           values: tuple[str, ...], top: int | None, candidates: tuple[str, ...],
           candidates_file: Path | None, fmt: str, url: str, token: str | None) -> None:
    """Print a campaign's estimates per time step: one series per value, each point with its
    n, standard error and 95% interval; points with fewer reports than the campaign's
    min_batch_size are suppressed. Over all data or a window (--start/--end or --last; --last
    is widened to whole steps, while --start/--end are kept, so their first and last points may
    be partial, as the table says)."""
    wanted = wanted_candidates(candidates, candidates_file)
    grid = None if step is None else step_value(step)
    api = collector_api(url, token)
    window = requested_window(start, end, last)
    if last is not None:
        window = _whole_steps(window, grid)
    window = campaign_window(api, name, window)
    question: dict[str, Any] = {"start": window.start, "end": window.end, "step": grid,
                                "values": values, "top": top, "candidates": wanted}
    if fmt == "csv":
        click.echo(call_collector(lambda: api.series_csv(name, **question)), nl=False)
        return
    result = call_collector(lambda: api.series(name, **question))
    click.echo(json.dumps(result, indent=2) if fmt == "json" else format_series(result))


@main.command()
@click.argument("name")
@click.option("--baseline-start", type=INSTANT, default=None, metavar="TIME",
              help="Baseline window start (the forms of --start); rounded down to the "
                   "campaign's time precision.")
@click.option("--baseline-end", type=INSTANT, default=None, metavar="TIME",
              help="Baseline window end, excluded; rounded up to the time precision.")
@window_options
@click.option("--correction", type=click.Choice(["benjamini-hochberg", "bonferroni"]),
              default="benjamini-hochberg", show_default=True,
              help="Multiple-testing correction across the values: false discovery rate "
                   "(benjamini-hochberg) or family-wise error rate (bonferroni).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.05, show_default=True,
              help="A value's change is significant when its adjusted p is below alpha.")
@candidate_option
@candidates_file_option
@format_option("the collector's CSV: one row per value, with both windows' bounds and n and "
               "ε on every row.")
@url_option
@token_option
def compare(name: str, baseline_start: int | None, baseline_end: int | None,
            start: int | None, end: int | None, last: int | None, correction: str,
            alpha: float, candidates: tuple[str, ...], candidates_file: Path | None, fmt: str,
            url: str, token: str | None) -> None:
    """Print each value's change from a baseline window to the current one, with its 95%
    interval, p-value and p adjusted across the values; significant rows are marked.

    The windows: --baseline-start/--baseline-end and --start/--end, or --last DURATION alone,
    which compares the last DURATION up to now (aligned to the campaign's time precision)
    with the DURATION just before it: --last 7d is this week against the week before.
    """
    wanted = wanted_candidates(candidates, candidates_file)
    api = collector_api(url, token)
    baseline, current = _compared_windows(api, name, baseline_start, baseline_end, start,
                                          end, last)
    question: dict[str, Any] = {"baseline_start": baseline.start, "baseline_end": baseline.end,
                "start": current.start, "end": current.end, "candidates": wanted,
                "correction": correction, "alpha": alpha}
    if fmt == "csv":
        click.echo(call_collector(lambda: api.compare_csv(name, **question)), nl=False)
        return
    result = call_collector(lambda: api.compare(name, **question))
    click.echo(json.dumps(result, indent=2) if fmt == "json" else format_comparison(result))


def _compared_windows(api: CollectorAPI, name: str, baseline_start: int | None,
                      baseline_end: int | None, start: int | None, end: int | None,
                      last: int | None) -> tuple[Window, Window]:
    """(baseline, current), aligned to the campaign's time precision."""
    if last is not None:
        if baseline_start is not None or baseline_end is not None:
            raise click.UsageError("--last cannot be combined with --baseline-start or "
                                   "--baseline-end: it sets both windows")
        current = campaign_window(api, name, requested_window(start, end, last),
                                  label="current window")
        assert current.start is not None and current.end is not None
        length = current.end - current.start
        # The same length just before: aligned too, since both bounds are multiples of the
        # precision.
        baseline = Window(max(0, current.start - length), current.start)
        click.echo(f"baseline {baseline.describe()}, current {current.describe()}", err=True)
        return baseline, current
    if baseline_start is None and baseline_end is None:
        raise click.UsageError("say which windows to compare: --last DURATION (the last "
                               "DURATION against the one before it), or --baseline-start/"
                               "--baseline-end with --start/--end")
    if baseline_start is not None and baseline_end is not None \
            and baseline_end <= baseline_start:
        raise click.UsageError(f"--baseline-end ({format_instant(baseline_end)}) must be after "
                               f"--baseline-start ({format_instant(baseline_start)})")
    baseline = campaign_window(api, name, Window(baseline_start, baseline_end),
                               label="baseline window")
    current = campaign_window(api, name, requested_window(start, end, None),
                              label="current window")
    return baseline, current
