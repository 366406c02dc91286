"""Kind "record": several categorical attributes in one report (mechanisms smp, spl, rsfd,
marginals): every attribute's marginal and, for marginals, joints, conditionals and
independence tests.

The terminal table gives each attribute's marginal like a frequency campaign's. Each joint is
a long table, one row per cell (the attributes' values, the joint share, its standard error
and 95% interval) and, for a pair, both conditional shares of the cell with their intervals:
the row (a, b) gives P(a, b), P(b | a) and P(a | b). The independence test closes the pair's
table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from chorus_collector.kinds.base import Bar, Bars, EstimateKind, ValueEstimate, schema_ref
from chorus_collector.results.record import NOT_ESTIMABLE, RecordEstimate
from chorus_collector.results.tables import (
    column_width,
    number,
    pad,
    shown_value,
    table_row,
    wrap_note,
)
from chorus_shared.campaign import Campaign
from chorus_shared.domain import Record

__all__ = ["RecordKind", "record_label", "record_lines"]


def record_label(attribute: str, value: str) -> str:
    """How series and comparisons name one value of one attribute of a record: os=linux."""
    return f"{attribute}={value}"


class RecordKind(EstimateKind):
    name: ClassVar[str] = "record"
    answer_type: ClassVar[type] = RecordEstimate
    answer_schema: ClassVar[str] = "RecordEstimate"
    schemas: ClassVar[Mapping[str, Any]] = {
        "RecordEstimate": {
            "type": "object",
            "description": "kind 'record': a record campaign's answer. Every attribute's marginal; "
                           "for mechanism 'marginals' also joint distributions (cells in row-major "
                           "order, the first attribute varying slowest), both conditionals of a "
                           "pair and a test of its independence. Unknown shares are null.",
            "required": ["kind", "campaign", "mechanism", "epsilon", "n", "window", "attributes",
                         "marginals", "joints", "postprocessing", "method", "variance_model"],
            "properties": {
                "kind": {"const": "record"},
                "campaign": {"type": "string"},
                "mechanism": {"enum": ["smp", "spl", "rsfd", "marginals"]},
                "epsilon": {"type": "number"},
                "n": {"type": "integer", "minimum": 0},
                "window": {"type": "object"},
                "confidence": {"type": "number"},
                "attributes": {"type": "array", "items": {"type": "string"}},
                "method": {"type": "string"},
                "variance_model": {"type": "string"},
                "postprocessing": {"type": "string"},
                "marginals": {"type": "array", "items": schema_ref("RecordMarginal")},
                "joints": {"type": "array", "items": schema_ref("RecordJoint")},
                "extra": {"type": "object"},
                "warnings": {"type": "array", "items": {"type": "string"}},
                "freshness": {"type": "object"},
                "shuffling": {
                    "type": "object",
                    "description": "with shuffled reports in the window: the central (ε, δ) of "
                                   "shuffling. n_basis 'vouched-senders': n is the fewest "
                                   "distinct senders the shuffler's admission control vouched for; "
                                   "'reports-assuming-no-injection': n counts reports and the "
                                   "figure assumes no injected reports (see its notes)"},
            },
        },
        "RecordMarginal": {
            "type": "object",
            "required": ["attribute", "reports", "rows"],
            "properties": {
                "attribute": {"type": "string"},
                "reports": {"type": "integer", "minimum": 0,
                            "description": "the reports this marginal rests on"},
                "rows": {"type": "array", "items": schema_ref("RecordShare")},
            },
        },
        "RecordShare": {
            "type": "object",
            "description": "one share with its standard error and 95% interval: a marginal's "
                           "value, a joint's cell (values) or a conditional's (given_value, value)",
            "required": ["frequency", "std_error", "ci_low", "ci_high"],
            "properties": {
                "value": {"type": "string"},
                "values": {"type": "array", "items": {"type": "string"}},
                "given_value": {"type": "string"},
                "estimable": {"type": "boolean", "description": "a conditional's cell: false "
                              "when not estimable at this n (the values are then null)"},
                "note": {"type": "string"},
                **{name: {"type": ["number", "null"]}
                   for name in ("frequency", "std_error", "ci_low", "ci_high")},
            },
        },
        "RecordJoint": {
            "type": "object",
            "required": ["attributes", "shape", "reports", "cells", "conditionals",
                         "independence"],
            "properties": {
                "attributes": {"type": "array", "items": {"type": "string"}},
                "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "reports": {"type": "integer", "minimum": 0},
                "cells": {"type": "array", "items": schema_ref("RecordShare")},
                "conditionals": {"type": "array", "items": {
                    "type": "object", "required": ["of", "given", "cells"],
                    "description": "P(of = value | given = given_value) for every cell",
                    "properties": {"of": {"type": "string"}, "given": {"type": "string"},
                                   "interval": {"type": "string"},
                                   "not_estimable": {"type": "array", "items": {
                                       "type": "string"}, "description": "given values whose "
                                       "row total is not told apart from 0: their cells are "
                                       "null, estimable false, with a note"},
                                   "cells": {"type": "array",
                                             "items": schema_ref("RecordShare")}}}},
                "independence": {"oneOf": [{"type": "null"}, schema_ref("IndependenceTest")]},
            },
        },
        "IndependenceTest": {
            "type": "object",
            "description": "a chi-square test of H0: the pair is independent, computed on the "
                           "reports; method says which",
            "required": ["statistic", "df", "p_value", "method", "reject_at_0.05"],
            "properties": {
                "statistic": {"type": ["number", "null"]},
                "df": {"type": "integer", "minimum": 0},
                "p_value": {"type": ["number", "null"]},
                "method": {"type": "string"},
                "reject_at_0.05": {"type": "boolean"},
                "power": {"type": "array", "description": "the chance of rejecting at 0.05, at "
                          "this n, against an association of strength Cohen's w in a typical "
                          "direction (non-central chi-square at the estimated margins)",
                          "items": {"type": "object", "required": ["cohens_w", "power"],
                                    "properties": {"cohens_w": {"type": "number"},
                                                   "power": {"type": ["number", "null"]}}}},
            },
        },
    }
    template: ClassVar[str] = "kinds/record.html"

    def query_parameters(self, campaign: Campaign) -> frozenset[str]:
        """Joints (the estimator refuses them where the mechanism collects none)."""
        return frozenset({"joints"})

    def labels(self, campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
        """Each value of each attribute, as ``attribute=value``."""
        domain = campaign.domain
        assert isinstance(domain, Record)
        return [record_label(name, value) for name, attribute in
                zip(domain.names, domain.attributes, strict=True) for value in attribute.values]

    def value_estimates(self, result: RecordEstimate) -> dict[str, ValueEstimate]:
        """The marginal shares."""
        return {record_label(m.attribute, row.value):
                ValueEstimate(row.frequency, row.frequency_std_error, row.frequency_ci_low,
                              row.frequency_ci_high) for m in result.marginals for row in m.rows}

    def table_lines(self, answer: Mapping[str, Any],
                    truth: Mapping[str, float] | None) -> list[str]:
        return record_lines(answer, truth)

    def chart(self, answer: Mapping[str, Any]) -> Bars:
        """Each attribute's marginal, labelled as the series and comparisons label them (the
        joints are drawn apart, as heat maps)."""
        bars = [Bar(record_label(m["attribute"], r["value"]), r["frequency"], r["ci_low"],
                    r["ci_high"]) for m in answer["marginals"] for r in m["rows"]]
        description = (f"{len(bars)} bars, one per value of each of the "
                       f"{len(answer['marginals'])} attributes, from n = {answer['n']} reports; "
                       "each whisker spans the 95% interval. The tables below give every "
                       "value.")
        return Bars(bars, f"Marginals of {answer['campaign']} with 95% intervals", description)


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
    return f"[{number(row['ci_low'], '.4f')}, {number(row['ci_high'], '.4f')}]"


def _marginal_table(marginal: Mapping[str, Any], truth: Mapping[str, float] | None,
                    ) -> list[str]:
    rows = marginal["rows"]
    labels = [shown_value(row["value"]) for row in rows]
    width = column_width("value", labels)
    lines = [f"    {pad('value', width)}" + (f"{'true':>8}" if truth is not None else "")
             + f"{'estimate':>10}{'std err':>9}   95% interval"]
    for row, label in zip(rows, labels, strict=True):
        key = f"{marginal['attribute']}={row['value']}"
        true = "" if truth is None else f"{truth.get(key, 0.0):>8.4f}"
        numbers = (f"{true}{number(row['frequency'], '>10.4f')}"
                   f"{number(row['std_error'], '>9.4f')}   {_interval(row)}")
        lines += ["  " + line for line in table_row(label, width, numbers)]
    return lines + wrap_note(labels, width)


def _joint_lines(joint: Mapping[str, Any]) -> list[str]:
    names: Sequence[str] = joint["attributes"]
    lines = [f"  joint of {' × '.join(names)} ({joint['reports']:,} reports)"]
    cells = joint["cells"]
    shown = [[shown_value(v) for v in cell["values"]] for cell in cells]
    widths = [column_width(name, [row[i] for row in shown]) for i, name in enumerate(names)]
    # For a pair, the row (a, b) also gives P(b | a) and P(a | b): conditionals[0] is of the
    # second attribute given the first, conditionals[1] the other way.
    given: list[dict[tuple[str, str], Mapping[str, Any]]] = []
    for conditional in joint["conditionals"]:
        first = conditional["given"] == names[0]
        given.append({((c["given_value"], c["value"]) if first else
                       (c["value"], c["given_value"])): c for c in conditional["cells"]})
    titles = [f"P({c['of']} | {c['given']})" for c in joint["conditionals"]]
    header = "    " + "".join(pad(name, width) for name, width in zip(names, widths,
                                                                        strict=True))
    header += f"{'estimate':>8}{'std err':>9}   {'95% interval':<18}"
    header += "".join(f"   {title:<27}" for title in titles)
    lines.append(header.rstrip())
    for cell, values in zip(cells, shown, strict=True):
        line = "    " + "".join(pad(v, width) for v, width in zip(values, widths,
                                                                    strict=True))
        line += (f"{number(cell['frequency'], '>8.4f')}{number(cell['std_error'], '>9.4f')}"
                 f"   {_interval(cell):<18}")
        for table in given:
            c = table[(cell["values"][0], cell["values"][1])]
            line += (f"   {NOT_ESTIMABLE:<27}" if c.get("estimable") is False else
                     f"   {number(c['frequency'], '.4f')} {_interval(c):<20}")
        lines.append(line.rstrip())
    test = joint.get("independence")
    if test is not None:
        verdict = "rejected" if test["reject_at_0.05"] else "not rejected"
        lines.append(f"    independence: χ² = {number(test['statistic'], '.4g')}, df = "
                     f"{test['df']}, p = {number(test['p_value'], '.4g')} ({verdict} at "
                     f"0.05); {test['method']}")
        powers = ", ".join(f"{p['power']:.2f} at w = {p['cohens_w']:g}"
                           for p in test.get("power", []) if p["power"] is not None)
        if powers:
            lines.append(f"    power against an association of Cohen's w: {powers}")
    return lines
