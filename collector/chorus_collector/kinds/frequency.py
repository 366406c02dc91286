"""Kind "frequency": each category's share, or each candidate's of open strings, or (a discovery
campaign asked without candidates) each value its walk found."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from chorus_collector.kinds.base import (
    MAX_CHART_BARS,
    Bar,
    Bars,
    EstimateKind,
    ValueEstimate,
    schema_ref,
)
from chorus_collector.results.estimates import FrequencyEstimate
from chorus_collector.results.tables import (
    column_width,
    discovery_lines,
    number,
    pad,
    shown_value,
    table_row,
    wrap_note,
)
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import DISCOVERY_MECHANISMS

__all__ = ["FrequencyKind", "frequency_table"]


class FrequencyKind(EstimateKind):
    name: ClassVar[str] = "frequency"
    answer_type: ClassVar[type] = FrequencyEstimate
    value_title: ClassVar[str] = "value"
    number_format: ClassVar[str] = ".4f"
    ranked: ClassVar[bool] = True
    schemas: ClassVar[Mapping[str, Any]] = {
        "FrequencyRow": {
            "type": "object",
            "description": "one category's, candidate's or discovered value's estimate "
                           "(frequencies are fractions of n, counts n × frequency)",
            "required": ["value", "frequency", "frequency_std_error", "frequency_ci_low",
                         "frequency_ci_high"],
            "properties": {
                "value": {"type": "string"},
                **{name: {"type": ["number", "null"]} for name in (
                    "count", "count_std_error", "count_ci_low", "count_ci_high", "frequency",
                    "frequency_std_error", "frequency_ci_low", "frequency_ci_high")},
                "detected": {"type": ["boolean", "null"],
                             "description": "open strings: whether the value passes the "
                                            "estimator's test of f > 0 (discovery campaigns: "
                                            "Holm's one-sided z-tests, family-wise error 0.05 "
                                            "over the rows); null elsewhere"},
            },
        },
        "Discovery": {
            "type": "object",
            "description": "A discovery campaign's (mechanism pem or treehist) answer: without "
                           "candidates (stage 'discovery') the rows are the top values the walk "
                           "down the prefixes found, each re-fit jointly in the final table (PEM's "
                           "estimation group, TreeHist's whole-string reports); with candidates "
                           "(stage 're-estimate', the second stage) the rows are the candidates, "
                           "estimated from the final table beside what the walk found (fit, "
                           "not reported: also_fit), so a frequent value left off the list "
                           "biases none.",
            "required": ["stage", "algorithm", "steps", "final_reports", "values_tested",
                         "detection"],
            "properties": {
                "stage": {"enum": ["discovery", "re-estimate"]},
                "algorithm": {"enum": ["pem", "treehist"]},
                "steps": {"type": "array", "items": schema_ref("DiscoveryStep"),
                          "description": "the walk's steps (it also runs when re-estimating)"},
                "final_reports": {"type": "integer", "minimum": 0,
                                  "description": "the reports the rows' frequencies rest on"},
                "values_tested": {"type": "integer", "minimum": 0,
                                  "description": "the values fit and tested, the family of the "
                                                 "detected flags: every survivor of the walk that "
                                                 "is a string (at least the rows), or the "
                                                 "candidates"},
                "also_fit": {"type": "integer", "minimum": 0,
                             "description": "values the walk found that were fit beside the "
                                            "candidates and not reported (0 in discovery)"},
                "detection": schema_ref("DiscoveryDetection"),
            },
        },
        # Named, not inline: TrackedValues extends Discovery (allOf), and a generator that
        # names inline objects after their parent would make each of these twice.
        "DiscoveryStep": {
            "type": "object",
            "description": "one step of a discovery walk",
            "required": ["prefix_bits", "reports", "candidates", "kept"],
            "properties": {
                "prefix_bits": {"type": "integer", "minimum": 1,
                                "description": "the prefix length this step ranks"},
                "reports": {"type": "integer", "minimum": 0,
                            "description": "the reports of the step's group"},
                "candidates": {"type": "integer", "minimum": 0,
                               "description": "prefixes evaluated"},
                "kept": {"type": "integer", "minimum": 0,
                         "description": "prefixes carried to the next step"}},
        },
        "DiscoveryDetection": {
            "type": "object",
            "description": "how the rows' detected flags were decided",
            "required": ["method", "alpha", "family_wise"],
            "properties": {"method": {"const": "holm"},
                           "alpha": {"type": "number"},
                           "family_wise": {"type": "boolean"}},
        },
        "TrackedValues": {
            "type": "object",
            "description": "A series or comparison of a discovery campaign asked without "
                           "candidates: the values it tracks, found once by the walk over all "
                           "the query covers (the series' whole window; both windows of a "
                           "comparison), then re-estimated in each point or window.",
            # Discovery's fields and its own, both in allOf: a generator reads an allOf of
            # one reference as that reference and would drop the fields beside it.
            "allOf": [schema_ref("Discovery"), {
                "type": "object",
                "required": ["values", "n", "windows"],
                "properties": {
                    "values": {"type": "array", "items": {"type": "string"}},
                    "n": {"type": "integer", "minimum": 0,
                          "description": "the reports the walk read"},
                    "windows": {"type": "array", "items": {"type": "object"}},
                    "warnings": {"type": "array", "items": {"type": "string"}},
                },
            }],
        },
    }
    template: ClassVar[str] = "kinds/frequency.html"

    def query_parameters(self, campaign: Campaign) -> frozenset[str]:
        """Open strings are estimated for candidates (a discovery campaign's are optional)."""
        return frozenset({"candidates"}) if campaign.domain.kind == "strings" else frozenset()

    def needs_candidates(self, campaign: Campaign) -> bool:
        """Open strings decoded only against a list (RAPPOR, CMS, …): every mechanism but the
        discovery ones (PEM, TreeHist), which find their values themselves."""
        return (campaign.domain.kind == "strings"
                and campaign.mechanism.name not in DISCOVERY_MECHANISMS)

    def labels(self, campaign: Campaign, candidates: tuple[str, ...]) -> list[str]:
        domain = campaign.domain
        if domain.kind == "categories":
            return list(domain.values)  # type: ignore[union-attr]
        return list(candidates)

    def value_estimates(self, result: FrequencyEstimate) -> dict[str, ValueEstimate]:
        return {row.value: ValueEstimate(row.frequency, row.frequency_std_error,
                                         row.frequency_ci_low, row.frequency_ci_high,
                                         row.detected)
                for row in result.rows}

    def table_lines(self, answer: Mapping[str, Any],
                    truth: Mapping[str, float] | None) -> list[str]:
        extra = answer.get("extra", {})
        if "discovery" in extra:
            lines = discovery_lines(extra["discovery"])
            lines += frequency_table(answer["rows"], truth, detected_column=True)
        else:
            lines = frequency_table(answer["rows"], truth)
        if "unexplained_frequency" in extra:
            lines.append(f"  unexplained share {extra['unexplained_frequency']:.4f} ± "
                         f"{extra['unexplained_std_error']:.4f}; residual χ²/dof "
                         f"{extra['residual_chi2_per_dof']:.2f}; detected: "
                         f"{extra['detection_threshold']}")
        return lines

    def chart(self, answer: Mapping[str, Any]) -> Bars:
        """A bar per row (the largest ``MAX_CHART_BARS``); a discovery campaign's detected
        values in the accent colour."""
        title = f"Estimates of {answer['campaign']} with 95% intervals"
        found = (answer.get("extra") or {}).get("discovery")
        rows = answer["rows"]
        if found is not None and found.get("stage") == "discovery":
            title = f"Values discovered in {answer['campaign']}, with 95% intervals"
        if len(rows) > MAX_CHART_BARS:
            rows = sorted(rows, key=lambda r: -(r["frequency"] or 0.0))[:MAX_CHART_BARS]
            title += (f" (the {MAX_CHART_BARS} largest of {len(answer['rows'])}; the table "
                      "lists all)")
        bars = [Bar(r["value"], r["frequency"], _if_se(r, "frequency_ci_low"),
                    _if_se(r, "frequency_ci_high"),
                    flagged=found is not None and bool(r.get("detected")))
                for r in rows]
        what = "value" if found is not None else "category"
        description = (f"{len(bars)} bars, one per {what}, from n = {answer['n']} reports; "
                       "each whisker spans the 95% interval."
                       + (" Bars in the accent colour are detected (Holm, family-wise 5%)."
                          if found is not None else "")
                       + " The table below gives every value.")
        return Bars(bars, title, description)


def _if_se(row: Mapping[str, Any], key: str) -> float | None:
    # A value not selected by a constrained fit has no standard error and no interval.
    return None if row.get("frequency_std_error") is None else row.get(key)


def frequency_table(rows: list[dict[str, Any]], truth: Mapping[str, float] | None,
                    detected_column: bool = False) -> list[str]:
    """The rows; ``detected_column`` gives every row a yes/no ``detected`` column (a discovery
    campaign's answer), otherwise only an undetected row says so."""
    labels = [shown_value(row["value"]) for row in rows]
    width = column_width("value", labels)
    interval_width = 22  # "[-0.0012, 0.3456]" and room to spare, so the flags line up
    lines = [f"  {pad('value', width)}" + (f"{'true':>8}" if truth is not None else "")
             + f"{'estimate':>10}{'std err':>9}   "
             + (f"{'95% interval':<{interval_width}}detected" if detected_column
                else "95% interval")]
    for row, label in zip(rows, labels, strict=True):
        true = f"{truth.get(row['value'], 0.0):>8.4f}" if truth is not None else ""
        if row["frequency_std_error"] is None:  # not selected by the constrained fit
            numbers = f"{true}{number(row['frequency'], '>10.4f')}{'-':>9}   (not selected)"
        else:
            interval = (f"[{number(row['frequency_ci_low'], '.4f')}, "
                        f"{number(row['frequency_ci_high'], '.4f')}]")
            if detected_column:
                flag = "yes" if row.get("detected") else "no"
                interval = f"{interval:<{interval_width}}{flag}"
            elif row.get("detected") is False:
                interval += "  (not detected)"
            numbers = (f"{true}{number(row['frequency'], '>10.4f')}"
                       f"{number(row['frequency_std_error'], '>9.4f')}   {interval}")
        lines += table_row(label, width, numbers)
    return lines + wrap_note(labels, width)
