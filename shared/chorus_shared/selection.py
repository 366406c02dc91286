"""``mechanism: "auto"``: the frequency oracle with the least exact variance (§12.2).

For a categorical domain of size d at ε, every eligible oracle's Var* (n · Var[f̂_v] as
f_v → 0) is computed exactly, with its real parameters (Subset Selection at its best ω), and
the least wins, subject to an optional limit on the report size in bits. Ties go to the shorter
report. The comparison is written into the campaign's config, so anyone can see why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chorus_shared.domain import Categories
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import REGISTRY, PureOracle
from chorus_shared.mechanisms.krr import KRR

__all__ = ["AUTO_CANDIDATES", "choose_mechanism"]

AUTO_CANDIDATES = ("krr", "oue", "olh", "sue", "ss", "hr", "blh")


def choose_mechanism(epsilon: float, domain: Categories,
                     params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(mechanism name, the selection record for the config)."""
    unknown = set(params) - {"max_report_bits"}
    if unknown:
        raise CampaignError(f"mechanism 'auto' takes only max_report_bits, not {sorted(unknown)}")
    limit = params.get("max_report_bits")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise CampaignError("max_report_bits must be a positive integer")
    table: dict[str, dict[str, float]] = {}
    for name in AUTO_CANDIDATES:
        try:
            mechanism = REGISTRY[name].resolve(epsilon=epsilon, domain=domain, params={})
        except CampaignError:
            continue  # e.g. a domain too large for d-bit reports
        if isinstance(mechanism, KRR):
            p, q = mechanism.support_probabilities()
            variance = q * (1 - q) / (p - q) ** 2
        else:
            assert isinstance(mechanism, PureOracle)
            variance = mechanism.approximate_variance()
        table[name] = {"variance_per_user": variance, "report_bits": mechanism.report_bits}
    eligible = {n: row for n, row in table.items() if limit is None or row["report_bits"] <= limit}
    if not eligible:
        raise CampaignError(f"no frequency oracle reports in at most {limit} bits here")
    # Variances equal to 12 digits are ties (SS with ω = 1 is k-RR): the shorter report wins,
    # then the simpler mechanism, in the order of AUTO_CANDIDATES.
    chosen = min(eligible, key=lambda n: (float(f"{eligible[n]['variance_per_user']:.12g}"),
                                          eligible[n]["report_bits"],
                                          AUTO_CANDIDATES.index(n)))
    best = eligible[chosen]["variance_per_user"]
    reason = (f"least variance per user ({best:.4g}) among {sorted(eligible)} at ε = "
              f"{epsilon:g}, d = {domain.size}"
              + (f", reports of at most {limit} bits" if limit is not None else ""))
    return chosen, {"from": "auto", "max_report_bits": limit, "reason": reason,
                    "candidates": table}
