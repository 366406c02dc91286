"""Side-by-side figures for choosing a mechanism, computed from the mechanisms themselves.

* Frequency oracles over d categories at ε: Var* = n·Var[f̂_v] as f_v → 0 (exact, with each
  oracle's real parameters) and the report size in bits.
* Means of one number at ε: the worst-case n·Var of the mean on the [−1, 1] scale.
* Means of D numbers at ε: the worst-case n·Var per attribute on the [−1, 1] scale.

``chorus mechanisms`` prints these tables and docs/mechanisms.md shows them at a few (ε, d).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chorus_shared.domain import MAX_CATEGORIES, Categories, NumericRange, NumericVector
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import REGISTRY, PureOracle
from chorus_shared.mechanisms.base import check_epsilon
from chorus_shared.mechanisms.krr import KRR

__all__ = ["FREQUENCY_ORACLES", "MEAN_MECHANISMS", "VECTOR_MECHANISMS", "frequency_table",
           "markdown_table", "mean_table", "vector_table"]

FREQUENCY_ORACLES = ("krr", "oue", "sue", "olh", "blh", "ss", "hr", "shist", "dbitflip")
MEAN_MECHANISMS = ("duchi", "pm", "hm", "laplace")
VECTOR_MECHANISMS = ("duchi_md", "harmony", "pm_md", "hm_md")


def frequency_table(epsilon: float, d: int) -> list[dict[str, Any]]:
    epsilon = check_epsilon(epsilon)
    if not 2 <= d <= MAX_CATEGORIES:
        raise CampaignError(f"the domain size must be in [2, {MAX_CATEGORIES}], got {d}")
    domain = Categories(tuple(f"v{i}" for i in range(d)))
    rows = []
    for name in FREQUENCY_ORACLES:
        try:
            mechanism = REGISTRY[name].resolve(epsilon=epsilon, domain=domain, params={})
        except CampaignError:
            continue
        if isinstance(mechanism, KRR):
            p, q = mechanism.support_probabilities()
            variance = q * (1 - q) / (p - q) ** 2
        else:
            assert isinstance(mechanism, PureOracle)
            variance = mechanism.approximate_variance()
        rows.append({"mechanism": name, "variance_per_user": variance,
                     "report_bits": mechanism.report_bits})
    return rows


def mean_table(epsilon: float) -> list[dict[str, Any]]:
    epsilon = check_epsilon(epsilon)
    domain = NumericRange(-1.0, 1.0)
    rows = []
    for name in MEAN_MECHANISMS:
        mechanism: Any = REGISTRY[name].resolve(epsilon=epsilon, domain=domain, params={})
        rows.append({"mechanism": name, "worst_case_variance": mechanism.worst_case_variance(),
                     "report_bits": mechanism.report_bits})
    return rows


def vector_table(epsilon: float, dimensions: int) -> list[dict[str, Any]]:
    epsilon = check_epsilon(epsilon)
    unit = NumericRange(-1.0, 1.0)
    domain = NumericVector(tuple(f"a{i}" for i in range(dimensions)), (unit,) * dimensions)
    rows = []
    for name in VECTOR_MECHANISMS:
        mechanism: Any = REGISTRY[name].resolve(epsilon=epsilon, domain=domain, params={})
        rows.append({"mechanism": name, "worst_case_variance": mechanism.worst_case_variance(),
                     "report_bits": mechanism.report_bits})
    return rows


def markdown_table(columns: Sequence[str], settings: Sequence[str],
                   cells: dict[tuple[str, str], str]) -> str:
    """Rows = ``columns`` entries (mechanisms), columns = ``settings``; missing cells: —."""
    lines = ["| mechanism | " + " | ".join(settings) + " |",
             "|---|" + "---|" * len(settings)]
    for name in columns:
        lines.append(f"| `{name}` | " + " | ".join(cells.get((name, s), "—")
                                                 for s in settings) + " |")
    return "\n".join(lines)


FREQUENCY_SETTINGS = ((0.5, 4), (1.0, 16), (1.0, 1024), (2.0, 64), (4.0, 16), (4.0, 1024))
MEAN_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
VECTOR_DIMENSIONS = 4
VECTOR_EPSILONS = (1.0, 2.0, 4.0, 8.0)


def _cells(rows_by_setting: dict[str, list[dict[str, Any]]],
           key: str) -> dict[tuple[str, str], str]:
    """'value (bits b)' per cell, the least value of each setting in bold."""
    cells = {}
    for setting, rows in rows_by_setting.items():
        best = min(row[key] for row in rows)
        for row in rows:
            text = f"{row[key]:.4g} ({row['report_bits']} b)"
            cells[(row["mechanism"], setting)] = f"**{text}**" if row[key] <= best * (
                1 + 1e-9) else text
    return cells


def docs_tables() -> str:
    """The comparison tables of docs/mechanisms.md (a test keeps the page in sync)."""
    frequency = {f"ε = {e:g}, d = {d}": frequency_table(e, d) for e, d in FREQUENCY_SETTINGS}
    means = {f"ε = {e:g}": mean_table(e) for e in MEAN_EPSILONS}
    vectors = {f"ε = {e:g}": vector_table(e, VECTOR_DIMENSIONS) for e in VECTOR_EPSILONS}
    return "\n\n".join([
        "Frequency oracles: Var* = n·Var[f̂_v] as f_v → 0 (report bits); least in bold.",
        markdown_table(FREQUENCY_ORACLES, list(frequency), _cells(frequency,
                                                                   "variance_per_user")),
        "One number: worst-case n·Var of the mean on the [−1, 1] scale (report bits).",
        markdown_table(MEAN_MECHANISMS, list(means), _cells(means, "worst_case_variance")),
        f"D = {VECTOR_DIMENSIONS} numbers: worst-case n·Var per attribute on the [−1, 1] "
        "scale (report bits).",
        markdown_table(VECTOR_MECHANISMS, list(vectors), _cells(vectors,
                                                                "worst_case_variance")),
    ])
