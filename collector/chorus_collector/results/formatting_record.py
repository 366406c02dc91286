"""A record campaign's estimate as terminal tables, for the CLI and the demo.

Each attribute's marginal is a table like a frequency campaign's. Each joint is a long table,
one row per cell (the attributes' values, the joint share, its standard error and 95%
interval) and, for a pair, both conditional shares of the cell with their intervals: the row
(a, b) gives P(a, b), P(b | a) and P(a | b). The independence test closes the pair's table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chorus_collector.results.formatting import (
    _column_width,
    _number,
    _pad,
    _row,
    _shown,
    _wrap_note,
)

__all__ = ["record_lines"]


def record_lines(result: Mapping[str, Any], truth: Mapping[str, float] | None = None,
                 ) -> list[str]:
    """The lines after the header; ``truth`` maps ``attribute=value`` to the true share
    (printed beside the marginals)."""
    lines = [f"  {result['method']}"]
    for marginal in result["marginals"]:
        lines.append(f"  {marginal['attribute']} ({marginal['reports']:,} reports)")
        lines += _marginal_table(marginal, truth)
    for joint in result["joints"]:
        lines += _joint_lines(joint)
    note = result.get("extra", {}).get("joints_note")
    if note:
        lines.append(f"  joints: {note}")
    return lines


def _interval(row: Mapping[str, Any]) -> str:
    return f"[{_number(row['ci_low'], '.4f')}, {_number(row['ci_high'], '.4f')}]"


def _marginal_table(marginal: Mapping[str, Any], truth: Mapping[str, float] | None,
                    ) -> list[str]:
    rows = marginal["rows"]
    labels = [_shown(row["value"]) for row in rows]
    width = _column_width("value", labels)
    lines = [f"    {_pad('value', width)}" + (f"{'true':>8}" if truth is not None else "")
             + f"{'estimate':>10}{'std err':>9}   95% interval"]
    for row, label in zip(rows, labels, strict=True):
        key = f"{marginal['attribute']}={row['value']}"
        true = "" if truth is None else f"{truth.get(key, 0.0):>8.4f}"
        numbers = (f"{true}{_number(row['frequency'], '>10.4f')}"
                   f"{_number(row['std_error'], '>9.4f')}   {_interval(row)}")
        lines += ["  " + line for line in _row(label, width, numbers)]
    return lines + _wrap_note(labels, width)


def _joint_lines(joint: Mapping[str, Any]) -> list[str]:
    names: Sequence[str] = joint["attributes"]
    lines = [f"  joint of {' × '.join(names)} ({joint['reports']:,} reports)"]
    cells = joint["cells"]
    shown = [[_shown(v) for v in cell["values"]] for cell in cells]
    widths = [_column_width(name, [row[i] for row in shown]) for i, name in enumerate(names)]
    # For a pair, the row (a, b) also gives P(b | a) and P(a | b): conditionals[0] is of the
    # second attribute given the first, conditionals[1] the other way.
    given: list[dict[tuple[str, str], Mapping[str, Any]]] = []
    for conditional in joint["conditionals"]:
        first = conditional["given"] == names[0]
        given.append({((c["given_value"], c["value"]) if first else
                       (c["value"], c["given_value"])): c for c in conditional["cells"]})
    titles = [f"P({c['of']} | {c['given']})" for c in joint["conditionals"]]
    header = "    " + "".join(_pad(name, width) for name, width in zip(names, widths,
                                                                        strict=True))
    header += f"{'estimate':>8}{'std err':>9}   {'95% interval':<18}"
    header += "".join(f"   {title:<27}" for title in titles)
    lines.append(header.rstrip())
    for cell, values in zip(cells, shown, strict=True):
        line = "    " + "".join(_pad(v, width) for v, width in zip(values, widths,
                                                                    strict=True))
        line += (f"{_number(cell['frequency'], '>8.4f')}{_number(cell['std_error'], '>9.4f')}"
                 f"   {_interval(cell):<18}")
        for table in given:
            c = table[(cell["values"][0], cell["values"][1])]
            line += f"   {_number(c['frequency'], '.4f')} {_interval(c):<20}"
        lines.append(line.rstrip())
    test = joint.get("independence")
    if test is not None:
        verdict = "rejected" if test["reject_at_0.05"] else "not rejected"
        lines.append(f"    independence: χ² = {_number(test['statistic'], '.4g')}, df = "
                     f"{test['df']}, p = {_number(test['p_value'], '.4g')} ({verdict} at "
                     f"0.05); {test['method']}")
    return lines
