"""Series and comparisons as terminal tables, for ``chorus series`` and ``chorus compare``.

The same rules as :mod:`chorus_collector.cli.formatting`: a value is never cut (a long one
continues on the lines below its row, marked ``↳``), a value that could be mistaken for
another is printed as a JSON string, and a header line says what the numbers are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chorus_collector.cli.common import counted
from chorus_collector.kinds import KINDS
from chorus_collector.results.tables import (
    ALGORITHMS,
    column_width,
    describe_window,
    format_instant,
    pad,
    shown_value,
    table_row,
    wrap_note,
)

__all__ = ["format_comparison", "format_series"]

_CORRECTIONS = {"benjamini-hochberg": "Benjamini–Hochberg (false discovery rate)",
                "bonferroni": "Bonferroni (family-wise error rate)"}


def format_series(result: Mapping[str, Any]) -> str:
    """One row per (value, point): the value on its first point's row, the point's start in
    UTC, n, the estimate, its standard error and 95% interval; a suppressed point says so."""
    kind = KINDS[result["estimate_kind"]]
    spec = kind.number_format
    step = (f"{result['step_name']}" if result["step_name"].endswith("s")
            else f"{result['step_name']} ({_seconds_in_words(result['step'])})")
    lines = ["; ".join([
        f"{result['campaign']}: {result['mechanism']}, ε = {result['epsilon']:.4g}",
        f"step {step}", f"window {describe_window(result.get('window'))}",
        f"variance model {_model_name(result['variance_model'])}"])]
    if result.get("discovery"):
        lines.append(_tracked(result["discovery"], "over the whole window",
                              "re-estimated in every point"))
    if result.get("estimand"):  # a campaign with a schedule: what each point estimates
        lines.append(f"  {result['estimand']}")
    series = result["series"]
    if not series:
        return "\n".join([*lines, "  (no series: no values to show)"])
    labels = [shown_value(s["value"]) for s in series]
    title = kind.value_title
    width = column_width(title, labels)
    instant = max((len(format_instant(p["start"])) for s in series for p in s["points"]),
                  default=len("start"))
    lines.append(f"  {pad(title, width)}{'start':<{instant}}{'n':>8}{'estimate':>11}"
                 f"{'std err':>10}   95% interval")
    suppressed = 0
    for entry, label in zip(series, labels, strict=True):
        if not entry["points"]:
            lines += table_row(label, width, "(no points in the window)")
        for index, point in enumerate(entry["points"]):
            numbers = f"{format_instant(point['start']):<{instant}}{point['n']:>8}"
            # A window that cuts the grid makes its first or last point shorter than a step.
            length = point["end"] - point["start"]
            partial = (f"  (partial: {_seconds_in_words(length)} of the step)"
                       if length < result["step"] else "")
            if point["suppressed"]:
                suppressed += 1
                reason = point.get("reason") or "too few reports"
                numbers += f"{'-':>11}{'-':>10}   (suppressed: {reason}){partial}"
            else:
                flag = "" if point.get("detected") in (None, True) else "  (not detected)"
                numbers += (f"{_cell(point['estimate'], spec, 11)}"
                            f"{_cell(point['std_error'], spec, 10)}   "
                            f"[{_cell(point['ci_low'], spec)}, "
                            f"{_cell(point['ci_high'], spec)}]{flag}{partial}")
            lines += table_row(label if index == 0 else "", width, numbers)
    lines += wrap_note(labels, width)
    if suppressed:
        lines.append(f"  {suppressed} point(s) suppressed: fewer reports than the campaign's "
                     f"min_batch_size ({result['min_batch_size']}); no estimate is shown for them")
    return "\n".join(lines)


def format_comparison(result: Mapping[str, Any]) -> str:
    """One row per value: the baseline and current estimates, the change with its 95%
    interval, p, the adjusted p and ``*`` on the rows significant after the correction."""
    kind = KINDS[result["estimate_kind"]]
    spec = kind.number_format
    baseline, current = result["baseline"], result["current"]
    correction = _CORRECTIONS.get(result["correction"], result["correction"])
    rows = result["rows"]
    lines = [
        "; ".join([f"{result['campaign']}: {result['mechanism']}, ε = {result['epsilon']:.4g}",
                   f"baseline {describe_window(baseline)}, n = {baseline['n']}",
                   f"current {describe_window(current)}, n = {current['n']}"]),
        f"  change = current − baseline; p: two-sided z-test; adjusted p: {correction} "
        f"across {sum(r['p_value'] is not None for r in rows)} values; * significant: "
        f"adjusted p < α = {result['alpha']:g}",
    ]
    if result.get("discovery"):
        lines.append(_tracked(result["discovery"], "over both windows together",
                              "re-estimated in each"))
    labels = [shown_value(row["value"]) for row in rows]
    title = kind.value_title
    width = column_width(title, labels)
    lines.append(f"  {pad(title, width)}{'baseline':>10}{'current':>10}{'change':>10}"
                 f"   {'95% interval':<22}{'p':>10}{'adjusted p':>12}")
    for row, label in zip(rows, labels, strict=True):
        interval = f"[{_cell(row['ci_low'], '+' + spec)}, {_cell(row['ci_high'], '+' + spec)}]"
        numbers = (f"{_cell(row['baseline_estimate'], spec, 10)}"
                   f"{_cell(row['current_estimate'], spec, 10)}"
                   f"{_cell(row['difference'], '+' + spec, 10)}   {interval:<22}"
                   f"{_cell(row['p_value'], '.3g', 10)}{_cell(row['adjusted_p_value'], '.3g', 12)}"
                   f"{'  * significant' if row['significant'] else ''}")
        lines += table_row(label, width, numbers)
    lines += wrap_note(labels, width)
    # Each row carries its note in the JSON; the table says each distinct one once.
    for note in dict.fromkeys(row["note"] for row in rows if row.get("note")):
        untested = [shown_value(row["value"]) for row in rows if row.get("note") == note]
        lines.append(f"  {', '.join(untested)}: {note}")
    significant = sum(bool(row["significant"]) for row in rows)
    lines.append(f"  {significant} of {len(rows)} values changed significantly "
                 f"({result['correction']}, α = {result['alpha']:g})")
    model = result["variance_model"].removeprefix("Each window: ")
    lines.append(f"  variance model {_model_name(model)} in each window; the change's standard "
                 "error assumes independent windows (conservative when users report in both)")
    return "\n".join(lines)


def _tracked(discovery: Mapping[str, Any], where: str, how: str) -> str:
    """Which values a discovery campaign's series or comparison follows, and whence."""
    algorithm = ALGORITHMS.get(discovery["algorithm"], discovery["algorithm"])
    return (f"  values: the {len(discovery['values'])} that {algorithm}'s walk "
            f"discovers {where} ({counted(discovery['n'], 'report')}), {how}")


def _cell(value: float | None, spec: str, width: int = 0) -> str:
    """A number right-aligned in ``width`` columns, or ``-`` where the answer has none (JSON
    null: no estimate, or not finite)."""
    text = "-" if value is None else format(value, spec)
    return f"{text:>{width}}"


def _model_name(model: str) -> str:
    """The model's first sentence or name; its whole explanation is in the JSON answer."""
    return model.split(":")[0].split(". ")[0]


def _seconds_in_words(seconds: int) -> str:
    for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
