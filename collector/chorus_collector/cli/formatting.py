"""Estimates as a terminal table, for the CLI and the demo.

A header line says what the numbers are: the campaign, mechanism, ε, n, the window in UTC, the
variance model and the post-processing; the table below it is the answer's kind's
(:meth:`chorus_collector.kinds.EstimateKind.table_lines`), built from
:mod:`chorus_collector.results.tables`: a value is never cut, and a value that could be
mistaken for another is printed as a JSON string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chorus_collector.cli.common import counted
from chorus_collector.kinds import KINDS
from chorus_collector.results.tables import (
    describe_window,
)

__all__ = ["format_estimates", "shuffling_lines"]


def format_estimates(result: dict[str, Any], truth: dict[str, float] | None = None) -> str:
    """A human-readable table of an estimate result, optionally beside the true values."""
    lines = [_header(result), *shuffling_lines(result.get("shuffling"))]
    if result.get("estimand"):  # a campaign with a schedule: what the numbers estimate
        lines.append(f"  estimates {result['estimand']}")
    lines += KINDS[result["kind"]].table_lines(result, truth)
    lines.extend(f"  warning: {warning}" for warning in result.get("warnings", []))
    return "\n".join(lines)


def shuffling_lines(shuffling: Mapping[str, Any] | None) -> list[str]:
    """The central (ε, δ) of shuffled batches, with what its n rests on: a table must not
    show the amplified figure without the caveat the JSON answer carries."""
    if not shuffling:
        return []
    central = shuffling["central"]
    line = (f"  shuffled: {counted(shuffling['reports_shuffled'], 'report')} in "
            f"{counted(shuffling['batches'], 'batch', 'batches')}; "
            f"central ε = {central['epsilon']:.4g}, δ = {central['delta']:.0e} at "
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
