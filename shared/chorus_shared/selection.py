"""``mechanism: "auto"``: the frequency oracle with the least exact variance (§12.2), or for
open strings the discovery mechanism by the rule of :func:`choose_discovery`.

For a categorical domain of size d at ε, every eligible oracle's Var* (n · Var[f̂_v] as
f_v → 0) is computed exactly, with its real parameters (Subset Selection at its best ω), and
the least wins, subject to an optional limit on the report size in bits. Ties go to the shorter
report. The comparison is written into the campaign's config, so anyone can see why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chorus_shared.domain import Categories, OpenStrings
from chorus_shared.errors import CampaignError
from chorus_shared.mechanisms import REGISTRY, PureOracle
from chorus_shared.mechanisms.discovery import PEM, PrefixDiscovery, TreeHist
from chorus_shared.mechanisms.krr import KRR

__all__ = ["AUTO_CANDIDATES", "choose_discovery", "choose_mechanism"]

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


def choose_discovery(epsilon: float, domain: OpenStrings,
                     params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """PEM or TreeHist for a discovery campaign over strings of ``domain.max_bytes`` at ε.

    Both walk the same prefixes; they differ in how they split what an install gives. PEM
    splits the installs: its estimation group holds ``final_share`` of them (a quarter by
    default) at the full ε, so its final frequencies have variance V(ε)/(share·n) ≤ 4·V(ε)/n,
    and the W walk groups split the rest, W·V(ε)/((1 − share)·n) each. TreeHist splits ε: its
    final frequencies, from every install, have V(ε/2)/n, and its walk W·V(ε/2)/n. OLH has
    V(ε/2) ≥ 4·V(ε) at every ε, so at PEM's default share PEM is the more precise at every
    step: this rule, the one that chose TreeHist for long strings at small ε while PEM's
    estimation group held only 1/(W + 1) of the installs, now picks PEM everywhere.

    The rule: **TreeHist when its final standard error is at most half of PEM's** (its
    frequencies at least 4× more precise in variance, worth its higher discovery threshold);
    PEM otherwise. Both figures and the thresholds go into the record. Parameters other than
    the schedule's (top, keep, first_bits, step_bits) are refused.
    """
    allowed = {"top", "keep", "first_bits", "step_bits"}
    unknown = set(params) - allowed
    if unknown:
        raise CampaignError(f"mechanism 'auto' over strings takes only {sorted(allowed)}, "
                            f"not {sorted(unknown)}")
    options: dict[str, PrefixDiscovery] = {
        cls.name: cls.resolve(epsilon=epsilon, domain=domain, params=dict(params))
        for cls in (PEM, TreeHist)}
    table = {name: {"final_std_error_at_1e6": math.sqrt(m.final_variance() / 1e6),
                    "walk_std_error_at_1e6": math.sqrt(m.walk_variance() / 1e6),
                    "groups": m.groups}
             for name, m in options.items()}
    pem, treehist = table["pem"], table["treehist"]
    ratio = treehist["final_std_error_at_1e6"] / pem["final_std_error_at_1e6"]
    chosen = "treehist" if ratio <= 0.5 else "pem"
    reason = (f"TreeHist's final standard error is {ratio:.2f}× PEM's at ε = {epsilon:g} over "
              f"strings of up to {domain.max_bytes} bytes"
              + ("" if domain.alphabet is None else
                 f" over a {len(domain.alphabet)}-character alphabet")
              + f" ({pem['groups']} PEM groups); "
              + ("at most half, so its more precise frequencies win"
                 if chosen == "treehist" else
                 "above half, so PEM wins: its walk is the finer (it finds rarer values)"
                 + (" and its frequencies are the more precise too" if ratio >= 1 else "")))
    return chosen, {"from": "auto", "reason": reason, "candidates": table,
                    "params": dict(params)}
