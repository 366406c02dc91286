"""Estimates as a terminal table, for the CLI and the demo.

The table never cuts a value. The first column is as wide as its longest value, up to
``MAX_VALUE_WIDTH`` columns; a longer value continues on the lines below its row, marked
``↳`` in the margin.
A value that would print like another one (surrounding spaces, a control or invisible
character, a leading quote, the empty string) is printed as a JSON string instead, so two
different values never print the same. A header line says what the numbers are: the campaign,
mechanism, ε, n, the window in UTC, the variance model and the post-processing.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from chorus_collector.results.distribution import quantile_label

__all__ = ["MAX_VALUE_WIDTH", "describe_window", "discovery_lines", "format_estimates",
           "format_instant", "shown_value", "shuffling_lines"]

#: Past this many terminal columns a value continues on the next lines (a long URL would
#: otherwise push the numbers off an 80- or 120-column terminal).
MAX_VALUE_WIDTH = 60
#: In the margin of a line that continues the value above it.
CONTINUED = "↳"


def format_instant(seconds: int) -> str:
    """Unix seconds as ISO 8601 in UTC, to the minute unless seconds are needed:
    ``2026-11-01T00:00Z``."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%MZ" if moment.second == 0 else "%Y-%m-%dT%H:%M:%SZ")


def describe_window(window: Mapping[str, int | None] | None) -> str:
    """A window ``{"start": ..., "end": ...}`` (Unix seconds, end excluded) in words."""
    start, end = (window or {}).get("start"), (window or {}).get("end")
    if start is None:
        return "all data" if end is None else f"all data before {format_instant(end)}"
    if end is None:
        return f"from {format_instant(start)} on"
    return f"[{format_instant(start)}, {format_instant(end)})"


def format_estimates(result: dict[str, Any], truth: dict[str, float] | None = None) -> str:
    """A human-readable table of an estimate result, optionally beside the true values."""
    lines = [_header(result), *shuffling_lines(result.get("shuffling"))]
    if result["kind"] == "mean":
        line = (f"  mean {result['mean']:.4f} ± {result['std_error']:.4f} "
                f"(95% CI {result['ci_low']:.4f} … {result['ci_high']:.4f})")
        if truth is not None:
            line = f"  true mean {truth['mean']:.4f}   estimated" + line[6:]
        return "\n".join([*lines, line])
    if result["kind"] == "record":
        from chorus_collector.results.formatting_record import (
            record_lines,  # it imports this module
        )

        lines += record_lines(result, truth)
        lines.extend(f"  warning: {warning}" for warning in result.get("warnings", []))
        return "\n".join(lines)
    if result["kind"] == "distribution":
        lines += _distribution_lines(result)
        lines.extend(f"  warning: {warning}" for warning in result.get("warnings", []))
        return "\n".join(lines)
    extra = result.get("extra", {})
    if result["kind"] == "means":
        lines += _means_table(result["rows"], truth)
    elif "discovery" in extra:
        lines += discovery_lines(extra["discovery"])
        lines += _frequency_table(result["rows"], truth, detected_column=True)
    else:
        lines += _frequency_table(result["rows"], truth)
    if "unexplained_frequency" in extra:
        lines.append(f"  unexplained share {extra['unexplained_frequency']:.4f} ± "
                     f"{extra['unexplained_std_error']:.4f}; residual χ²/dof "
                     f"{extra['residual_chi2_per_dof']:.2f}; detected: "
                     f"{extra['detection_threshold']}")
    lines.extend(f"  warning: {warning}" for warning in result.get("warnings", []))
    return "\n".join(lines)


def shuffling_lines(shuffling: Mapping[str, Any] | None) -> list[str]:
    """The central (ε, δ) of shuffled batches, with what its n rests on: a table must not
    show the amplified figure without the caveat the JSON answer carries."""
    if not shuffling:
        return []
    central = shuffling["central"]
    line = (f"  shuffled: {shuffling['reports_shuffled']} reports in {shuffling['batches']} "
            f"batches; central ε = {central['epsilon']:.4g}, δ = {central['delta']:.0e} at "
            f"n = {central['n']}")
    if shuffling.get("n_basis") == "vouched-senders":
        return [line + " distinct senders vouched for by the shuffler's admission control"]
    return [line + " reports", "  warning: this central (ε, δ) assumes no injected reports: "
            "the shuffler counted reports, not admitted senders (no admission control), so "
            "whoever could post to it, the collector included, could have isolated a report, "
            "which then has only the local ε"]


def _header(result: Mapping[str, Any]) -> str:
    parts = [f"{result['campaign']}: {result['mechanism']}, ε = {result['epsilon']:.4g}, "
             f"n = {result['n']}", f"window {describe_window(result.get('window'))}"]
    if result.get("variance_model"):
        # The model's name; its explanation after the colon is in the JSON answer.
        parts.append(f"variance model {result['variance_model'].split(':')[0]}")
    if result.get("postprocessing"):
        parts.append(f"post-processing {result['postprocessing']}")
    return "; ".join(parts)


#: What the final frequencies of a discovery campaign are estimated from, by algorithm.
_FINAL_REPORTS = {"pem": "reports of the estimation group (never read by the walk)",
                  "treehist": "whole-string reports (randomized apart from the prefixes)"}
_ALGORITHMS = {"pem": "PEM", "treehist": "TreeHist"}


def discovery_lines(discovery: Mapping[str, Any]) -> list[str]:
    """What a discovery campaign's answer rests on: the walk (its prefix lengths and the
    reports of each group) or the second stage, the final oracle, and the false-positive
    control of the ``detected`` flags."""
    algorithm = _ALGORITHMS.get(discovery["algorithm"], discovery["algorithm"])
    steps = discovery["steps"]
    if discovery["stage"] == "discovery":
        bits = ", ".join(str(step["prefix_bits"]) for step in steps)
        reports = ", ".join(f"{step['reports']:,}" for step in steps)
        kept = ", ".join(str(step["kept"]) for step in steps)
        lines = [f"  discovered by {algorithm}'s walk, without candidates: {len(steps)} steps "
                 f"at prefixes of {bits} bits; reports per group {reports}; kept per step "
                 f"{kept}"]
    else:
        lines = [f"  second stage: the {discovery['values_tested']} values listed, "
                 f"re-estimated by {algorithm} without a walk"]
    final = _FINAL_REPORTS.get(discovery["algorithm"], "reports")
    detection = discovery["detection"]
    method = {"holm": "Holm's"}.get(detection["method"], detection["method"])
    lines.append(f"  frequencies from {discovery['final_reports']:,} {final}; detected: "
                 f"{method} one-sided z-tests, family-wise false-positive rate "
                 f"{detection['alpha']:g} over the {discovery['values_tested']} values tested")
    return lines


def _frequency_table(rows: list[dict[str, Any]], truth: Mapping[str, float] | None,
                     detected_column: bool = False) -> list[str]:
    """The rows; ``detected_column`` gives every row a yes/no ``detected`` column (a discovery
    campaign's answer), otherwise only an undetected row says so."""
    labels = [_shown(row["value"]) for row in rows]
    width = _column_width("value", labels)
    interval_width = 22  # "[-0.0012, 0.3456]" and room to spare, so the flags line up
    lines = [f"  {_pad('value', width)}" + (f"{'true':>8}" if truth is not None else "")
             + f"{'estimate':>10}{'std err':>9}   "
             + (f"{'95% interval':<{interval_width}}detected" if detected_column
                else "95% interval")]
    for row, label in zip(rows, labels, strict=True):
        true = f"{truth.get(row['value'], 0.0):>8.4f}" if truth is not None else ""
        if row["frequency_std_error"] is None:  # not selected by the constrained fit
            numbers = f"{true}{_number(row['frequency'], '>10.4f')}{'-':>9}   (not selected)"
        else:
            interval = (f"[{_number(row['frequency_ci_low'], '.4f')}, "
                        f"{_number(row['frequency_ci_high'], '.4f')}]")
            if detected_column:
                flag = "yes" if row.get("detected") else "no"
                interval = f"{interval:<{interval_width}}{flag}"
            elif row.get("detected") is False:
                interval += "  (not detected)"
            numbers = (f"{true}{_number(row['frequency'], '>10.4f')}"
                       f"{_number(row['frequency_std_error'], '>9.4f')}   {interval}")
        lines += _row(label, width, numbers)
    return lines + _wrap_note(labels, width)


def _means_table(rows: list[dict[str, Any]], truth: Mapping[str, float] | None) -> list[str]:
    labels = [shown_value(row["attribute"]) for row in rows]
    width = _column_width("attribute", labels)
    lines = [f"  {_pad('attribute', width)}" + (f"{'true':>10}" if truth is not None else "")
             + f"{'mean':>12}{'std err':>10}   95% interval"]
    for row, label in zip(rows, labels, strict=True):
        true = f"{truth[row['attribute']]:>10.4g}" if truth is not None else ""
        lines += _row(label, width,
                      f"{true}{_number(row['mean'], '>12.4g')}"
                      f"{_number(row['std_error'], '>10.4g')}   "
                      f"[{_number(row['ci_low'], '.4g')}, {_number(row['ci_high'], '.4g')}]")
    return lines + _wrap_note(labels, width)


def _row(label: str, width: int, numbers: str) -> list[str]:
    """The row's line, then the rest of a value wider than the column on lines of its own."""
    first, *rest = _chunks(label, width)
    return [f"  {_pad(first, width)}{numbers}", *(f"{CONTINUED} {chunk}" for chunk in rest)]


def _wrap_note(labels: list[str], width: int) -> list[str]:
    if any(_width(label) > width for label in labels):
        return [f"  ({CONTINUED} continues the value above it: a value wider than {width} columns "
                "goes on, whole, on the lines below its row)"]
    return []


def _number(value: float | None, spec: str) -> str:
    """A number, or ``-`` where the answer has none (JSON null for NaN)."""
    return format(value, spec) if value is not None else format("-", spec.split(".")[0])


def shown_value(value: str) -> str:
    """The value as printed: itself when that cannot be mistaken for another value, else a
    JSON string literal (quotes around it, escapes for the invisible characters). A walk's
    discovered strings can be any UTF-8 text, control characters included."""
    if value and value == value.strip() and value.isprintable() and not value.startswith('"'):
        return value
    return '"' + "".join(ch if ch.isprintable() and ch not in '"\\' else json.dumps(ch)[1:-1]
                         for ch in value) + '"'


_shown = shown_value  # the name the other formatting modules import


def _column_width(title: str, labels: list[str]) -> int:
    return min(max([_width(title), *(_width(label) for label in labels)]),
               max(MAX_VALUE_WIDTH, _width(title)))


def _width(text: str) -> int:
    """Terminal columns: East Asian wide characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text) + 2)  # two spaces before the numbers


def _chunks(text: str, width: int) -> list[str]:
    """The text in pieces of at most ``width`` columns (at least one character each)."""
    chunks, current, used = [], "", 0
    for ch in text:
        columns = _width(ch)
        if current and used + columns > width:
            chunks.append(current)
            current, used = "", 0
        current += ch
        used += columns
    return [*chunks, current]


#: The coarse histogram a terminal shows (the full one is in the JSON and CSV answers).
COARSE_BARS = 16
BAR_WIDTH = 40


def _distribution_lines(result: Mapping[str, Any]) -> list[str]:
    """Quantiles, ranges and the mean with their intervals, then a coarse histogram."""
    lines = [f"  {result['method']}", f"  uncertainty: {result['uncertainty']}",
             f"  {'':<10}{'value':>14}  {'95% CI':>31}"]
    rows = [(quantile_label(q["q"]), q) for q in result["quantiles"]]
    rows.append(("mean", result["mean"]))
    for label, row in rows:
        lines.append(f"  {label:<10}{_on_scale(row['value']):>14}  "
                     f"[{_on_scale(row['ci_low']):>14}, {_on_scale(row['ci_high']):>14}]")
    for row in result["ranges"]:
        lines.append(f"  share in [{_on_scale(row['lo']).strip()}, {_on_scale(row['hi']).strip()}]"
                     f" {row['value']:.4f} ± {row['std_error']:.4f} (95% CI "
                     f"{row['ci_low']:.4f} … {row['ci_high']:.4f})")
    histogram = result["histogram"]
    group = max(1, -(-len(histogram) // COARSE_BARS))
    shares = [sum(max(0.0, b["value"]) for b in histogram[i:i + group])
              for i in range(0, len(histogram), group)]
    top = max(shares) or 1.0
    lines.append(f"  histogram ({len(histogram)} buckets on a {result['scale']} scale, shown "
                 f"{group} to a bar; every bucket with its interval is in the JSON and CSV)")
    for i, share in zip(range(0, len(histogram), group), shares, strict=True):
        low, high = histogram[i]["lo"], histogram[min(i + group, len(histogram)) - 1]["hi"]
        bar = "█" * round(BAR_WIDTH * share / top)
        lines.append(f"  [{_on_scale(low):>12}, {_on_scale(high):>12})  {share:6.3f} {bar}")
    return lines


def _on_scale(value: float | None) -> str:
    """A number on the campaign's scale, to 6 significant digits."""
    return "—" if value is None else f"{value:.6g}"
