"""The terminal tables' building blocks, for every kind's table and the analysis tables.

The table never cuts a value. The first column is as wide as its longest value, up to
``MAX_VALUE_WIDTH`` columns; a longer value continues on the lines below its row, marked
``↳`` in the margin.
A value that would print like another one (surrounding spaces, a control or invisible
character, a leading quote, the empty string) is printed as a JSON string instead, so two
different values never print the same.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["ALGORITHMS", "CONTINUED", "MAX_VALUE_WIDTH", "column_width", "describe_window",
           "discovery_lines", "format_instant", "number", "pad", "shown_value", "table_row",
           "text_width", "wrap_note"]

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


#: What the final frequencies of a discovery campaign are estimated from, by algorithm.
FINAL_REPORTS = {"pem": "reports of the estimation group (never read by the walk)",
                  "treehist": "whole-string reports (randomized apart from the prefixes)"}
ALGORITHMS = {"pem": "PEM", "treehist": "TreeHist"}


def discovery_lines(discovery: Mapping[str, Any]) -> list[str]:
    """What a discovery campaign's answer rests on: the walk (its prefix lengths and the
    reports of each group) or the second stage, the final oracle, and the false-positive
    control of the ``detected`` flags."""
    algorithm = ALGORITHMS.get(discovery["algorithm"], discovery["algorithm"])
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
    final = FINAL_REPORTS.get(discovery["algorithm"], "reports")
    detection = discovery["detection"]
    method = {"holm": "Holm's"}.get(detection["method"], detection["method"])
    lines.append(f"  frequencies from {discovery['final_reports']:,} {final}; detected: "
                 f"{method} one-sided z-tests, family-wise false-positive rate "
                 f"{detection['alpha']:g} over the {discovery['values_tested']} values tested")
    return lines


def table_row(label: str, width: int, numbers: str) -> list[str]:
    """The row's line, then the rest of a value wider than the column on lines of its own."""
    first, *rest = chunks(label, width)
    return [f"  {pad(first, width)}{numbers}", *(f"{CONTINUED} {chunk}" for chunk in rest)]


def wrap_note(labels: list[str], width: int) -> list[str]:
    if any(text_width(label) > width for label in labels):
        return [f"  ({CONTINUED} continues the value above it: a value wider than {width} columns "
                "goes on, whole, on the lines below its row)"]
    return []


def number(value: float | None, spec: str) -> str:
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


def column_width(title: str, labels: list[str]) -> int:
    return min(max([text_width(title), *(text_width(label) for label in labels)]),
               max(MAX_VALUE_WIDTH, text_width(title)))


def text_width(text: str) -> int:
    """Terminal columns: East Asian wide characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) else
               2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int) -> str:
    return text + " " * (width - text_width(text) + 2)  # two spaces before the numbers


def chunks(text: str, width: int) -> list[str]:
    """The text in pieces of at most ``width`` columns (at least one character each)."""
    chunks, current, used = [], "", 0
    for ch in text:
        columns = text_width(ch)
        if current and used + columns > width:
            chunks.append(current)
            current, used = "", 0
        current += ch
        used += columns
    return [*chunks, current]
