"""Chorus beside pure-LDP 1.2.0 and multi-freq-ldpy 0.2.5: ``make bench`` (or
``python benchmarks/peers.py [--quick]`` after ``pip install -e '.[collector,bench]'``).

For every (peer, mechanism) pair both libraries implement, on one fixed Zipf-like input:

* the peer's own client perturbs the same n true values (client µs/report);
* the peer's own server aggregates and estimates them (reports/s, aggregation + estimation);
* the estimate's MSE is compared with the pure-protocol variance of that mechanism
  (Wang et al. 2017): Var[f̂_v] = q*(1−q*)/(n(p*−q*)²) + f_v(1−p*−q*)/(n(p*−q*)), averaged
  over v, with the p*, q* the peer actually uses (e.g. its rounded OLH g).

Chorus is timed in the same run. Where the mechanisms' outputs coincide (GRR, OUE, SUE, HR,
RAPPOR bit counts) Chorus aggregates the *same* perturbed reports as the peer (converted to
Chorus's wire format outside the timed region) and its estimate is cross-checked against the
peer's. OLH uses different hash families, so Chorus perturbs the same true values itself.

Every timed loop is bounded (``BUDGET_S``); a slow peer is measured on a prefix of the reports
and the row says so (``n_timed`` < n). Rows whose peer is biased or not ε-LDP say so in
``note``: their speed is not a like-for-like comparison.

The peers come from the optional ``bench`` extra (pure-LDP needs ``xxhash<4``, scikit-learn
and statsmodels to import). Without them the Chorus rows are still measured (on reports from
its own client) and the peer rows say "not installed". Writes ``bench-results/peers.json``.
"""

from __future__ import annotations

import math
import random
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chorus_collector.cli.progress import staged

BUDGET_S = 8.0  # the most any one timed loop may run
ZIPF_S = 1.1


def _installed(module: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            __import__(module)
    except ImportError:
        return False
    return True


PURE_LDP = _installed("pure_ldp.frequency_oracles")
MULTI_FREQ = _installed("multi_freq_ldpy.pure_frequency_oracles.GRR")
MISSING = "not installed (pip install -e '.[collector,bench]')"


def ident(x: int) -> int:
    return x


# -- inputs and theory ------------------------------------------------------------------------

def zipf_probabilities(d: int, s: float = ZIPF_S) -> np.ndarray:
    weights = 1.0 / np.arange(1, d + 1) ** s
    return weights / weights.sum()


def true_values(n: int, d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice(d, size=n, p=zipf_probabilities(d))


def frequencies(xs: np.ndarray, d: int) -> np.ndarray:
    return np.bincount(xs, minlength=d) / len(xs)


def pure_variance(p: float, q: float, n: int, f: np.ndarray) -> float:
    """Mean over v of the pure-protocol Var[f̂_v] (mechanism randomness only)."""
    gap = p - q
    return float(np.mean(q * (1 - q) / (n * gap**2) + f * (1 - p - q) / (n * gap)))


def grr_pq(eps: float, d: int) -> tuple[float, float]:
    e = math.exp(eps)
    return e / (e + d - 1), 1 / (e + d - 1)


def oue_pq(eps: float) -> tuple[float, float]:
    return 0.5, 1 / (math.exp(eps) + 1)


def sue_pq(eps: float) -> tuple[float, float]:
    z = math.exp(eps / 2)
    return z / (z + 1), 1 / (z + 1)


def peer_olh_g(eps: float) -> int:
    return round(math.exp(eps)) + 1  # both peers: lh_client.py:45, LH.py:38


def olh_pq(eps: float, g: int) -> tuple[float, float]:
    e = math.exp(eps)
    return e / (e + g - 1), 1 / g


def hr_pq(eps: float) -> tuple[float, float]:
    e = math.exp(eps)
    return e / (1 + e), 0.5


# -- timing helpers ---------------------------------------------------------------------------

def perturb_all(client: Callable[[int], Any], xs: np.ndarray,
                budget: float = BUDGET_S) -> tuple[list[Any], float]:
    """Reports for a prefix of xs (all of it unless the budget runs out); µs per report."""
    out: list[Any] = []
    deadline = time.perf_counter() + budget
    start = time.perf_counter()
    for i, x in enumerate(xs.tolist()):
        out.append(client(x))
        if i % 256 == 255 and time.perf_counter() > deadline:
            break
    return out, (time.perf_counter() - start) / len(out) * 1e6


def aggregate_incremental(aggregate: Callable[[Any], None], reports: Sequence[Any],
                          budget: float = BUDGET_S) -> tuple[int, float]:
    """One report at a time until done or out of budget: (count, seconds)."""
    deadline = time.perf_counter() + budget
    start = time.perf_counter()
    count = 0
    for report in reports:
        aggregate(report)
        count += 1
        if count % 64 == 0 and time.perf_counter() > deadline:
            break
    return count, time.perf_counter() - start


def batch_prefix(fn: Callable[[Sequence[Any]], Any], reports: Sequence[Any],
                 budget: float = BUDGET_S, probe: int = 200) -> int:
    """How many reports a batch aggregator can take within the budget (probed on a slice)."""
    if len(reports) <= probe:
        return len(reports)
    start = time.perf_counter()
    fn(reports[:probe])
    rate = probe / max(time.perf_counter() - start, 1e-9)
    return max(probe, min(len(reports), int(rate * budget * 0.8)))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def best_of(fn: Callable[[], tuple[Any, float]], repeats: int = 5,
            budget: float = 1.0) -> Any:
    """Run fn (which returns (value, seconds)) up to `repeats` times while the total stays
    under `budget`; keep the fastest run. Slow measurements run once."""
    best = fn()
    spent = best[-1]
    for _ in range(repeats - 1):
        if spent + best[-1] > budget:
            break
        again = fn()
        spent += again[-1]
        if again[-1] < best[-1]:
            best = again
    return best


def make_row(peer: str, mechanism: str, d: int, eps: float, n_timed: int, client_us: float | None,
             rps: float | None, estimate: np.ndarray | None, truth: np.ndarray | None,
             pq: tuple[float, float] | None, note: str, estimate_s: float | None = None,
             theory: float | None = None,
             aggregate_only: float | None = None) -> dict[str, Any]:
    mse = float(np.mean((estimate - truth) ** 2)) if estimate is not None else None
    if theory is None and pq is not None and truth is not None:
        theory = pure_variance(pq[0], pq[1], n_timed, truth)
    return {"peer": peer, "mechanism": mechanism, "d": d, "epsilon": eps, "n_timed": n_timed,
            "client_us": client_us, "aggregate_reports_per_s": rps, "mse": mse,
            "theory_var": theory, "mse_ratio": (mse / theory) if mse is not None and theory
            else None, "estimate_s": estimate_s,
            "aggregate_only_reports_per_s": aggregate_only, "note": note}


def top_bias(estimate: np.ndarray, truth: np.ndarray, pq: tuple[float, float], n: int,
             top: int = 10) -> str:
    """Mean signed error on the `top` most frequent items, in units of their theoretical SE."""
    idx = np.argsort(-truth)[:top]
    err = float(np.mean(estimate[idx] - truth[idx]))
    se = math.sqrt(pure_variance(pq[0], pq[1], n, truth[idx]) / top)
    return f"top-{top} mean error {err:+.4f} = {err / se:+.1f} SE"


def warning_summary(caught: list[warnings.WarningMessage]) -> str:
    seen = sorted({f"{w.category.__name__} ({str(w.message)[:48]}…) at "
                   f"{w.filename.rsplit('site-packages/', 1)[-1].rsplit('python3.11/', 1)[-1]}:"
                   f"{w.lineno}" for w in caught})
    return ("; warnings: " + ", ".join(seen)) if seen else ""


# -- Chorus -----------------------------------------------------------------------------------

def chorus_campaign(mechanism: str, eps: float, d: int, params: dict[str, Any] | None = None,
                    strings: bool = False) -> Any:
    from chorus_shared import campaign_from_spec

    domain: Any = {"kind": "strings"} if strings else [f"v{i}" for i in range(d)]
    spec = {"name": f"peer-{mechanism}", "mechanism": mechanism, "epsilon": eps,
            "domain": domain, "min_batch_size": 1}
    if params:
        spec["params"] = params
    return campaign_from_spec(spec, warn=False)


def chorus_estimate(campaign: Any, payloads: Sequence[Any],
                    candidates: tuple[str, ...] = ()) -> tuple[np.ndarray, Any, float, float]:
    """(frequencies, result, map seconds, finalize seconds) via map → finalize."""
    from chorus_collector.estimators import Query, estimator_for

    estimator = estimator_for(campaign.mechanism.name)
    state, map_s = best_of(lambda: timed(lambda: estimator.map(campaign.mechanism, payloads)))
    result, fin_s = best_of(lambda: timed(lambda: estimator.finalize(
        campaign, len(payloads), state, Query(candidates=candidates))), repeats=3, budget=4.0)
    return np.array([r.frequency for r in result.rows]), result, map_s, fin_s


def chorus_client_us(mechanism: Any, xs: np.ndarray, seed: int) -> tuple[float, float]:
    """µs/report with a seeded Mersenne Twister (as the peers use) and with the OS CSPRNG."""
    import secrets

    mt = random.Random(seed)
    _, us_mt = perturb_all(lambda x: mechanism.randomize(x, mt), xs, budget=BUDGET_S / 2)
    system = secrets.SystemRandom()
    _, us_os = perturb_all(lambda x: mechanism.randomize(x, system), xs[:2000],
                           budget=BUDGET_S / 4)
    return us_mt, us_os


def chorus_row(mech_label: str, campaign: Any, d: int, eps: float, xs: np.ndarray,
               payloads: Sequence[Any], seed: int, note: str,
               same_as: np.ndarray | None = None, client_xs: np.ndarray | None = None,
               candidates: tuple[str, ...] = ()) -> dict[str, Any]:
    mechanism = campaign.mechanism
    us_mt, us_os = chorus_client_us(mechanism, xs if client_xs is None else client_xs, seed)
    est, result, map_s, fin_s = chorus_estimate(campaign, payloads, candidates)
    n = len(payloads)
    truth = frequencies(xs[:n], d)
    pq = mechanism.support_probabilities() if hasattr(mechanism, "support_probabilities") \
        and mech_label != "rappor" else None
    theory = None
    if pq is None:  # RAPPOR: Chorus's own model-based standard errors
        theory = float(np.mean([r.frequency_std_error ** 2 for r in result.rows]))
    extra = f"; client {us_os:.1f} µs with the OS CSPRNG; map {n / map_s:,.0f} rep/s, " \
            f"finalize {fin_s * 1e3:.1f} ms"
    if same_as is not None:
        extra += f"; max |f̂ − peer's f̂| = {float(np.max(np.abs(est - same_as))):.1e}"
    return make_row("chorus", mech_label, d, eps, n, us_mt, n / (map_s + fin_s), est, truth, pq,
                    note + extra, estimate_s=fin_s, theory=theory, aggregate_only=n / map_s)


def hex_bits(bits: np.ndarray, d: int) -> str:
    """A 0/1 vector (bit i = category i) as Chorus's {"bits": hex} value."""
    packed = np.packbits(np.asarray(bits, dtype=np.uint8), bitorder="little").tobytes()
    return format(int.from_bytes(packed, "little"), f"0{(d + 3) // 4}x")


# -- pure-LDP ---------------------------------------------------------------------------------

def pureldp_pair(kind: str, eps: float, d: int, **kw: Any) -> tuple[Any, Any]:
    from pure_ldp.frequency_oracles import (
        DEClient,
        DEServer,
        HadamardResponseClient,
        HadamardResponseServer,
        LHClient,
        LHServer,
        RAPPORClient,
        RAPPORServer,
        UEClient,
        UEServer,
    )

    if kind == "grr":
        return DEClient(eps, d, index_mapper=ident), DEServer(eps, d, index_mapper=ident)
    if kind in ("oue", "sue"):
        oue = kind == "oue"
        return (UEClient(eps, d, use_oue=oue, index_mapper=ident),
                UEServer(eps, d, use_oue=oue, index_mapper=ident))
    if kind == "olh":
        return (LHClient(eps, d, use_olh=True, index_mapper=ident),
                LHServer(eps, d, use_olh=True, index_mapper=ident))
    if kind == "hr":
        server = HadamardResponseServer(eps, d, index_mapper=ident)
        return HadamardResponseClient(eps, d, server.get_hash_funcs(), index_mapper=ident), server
    if kind == "rappor":
        server = RAPPORServer(kw["f"], kw["bits"], kw["hashes"], d,
                              num_of_cohorts=kw["cohorts"], index_mapper=ident)
        return (RAPPORClient(kw["f"], kw["bits"], server.get_hash_funcs(), kw["cohorts"],
                             index_mapper=ident), server)
    raise ValueError(kind)


def pureldp_run(kind: str, eps: float, d: int, xs: np.ndarray,
                **kw: Any) -> tuple[list[Any], float, int, float, float, np.ndarray, Any]:
    """(reports, client µs, n aggregated, aggregate s, estimate s, frequencies, server)."""
    client, server = pureldp_pair(kind, eps, d, **kw)
    reports, client_us = perturb_all(client.privatise, xs)

    def once(server: Any = server) -> tuple[Any, ...]:
        server.reset()  # a fresh state (and, for RAPPOR, the same hash functions)
        if kind == "rappor":
            server.bloom_filters = [np.zeros(server.m) for _ in range(server.num_of_cohorts)]
            server.cohort_count = np.zeros(server.num_of_cohorts)
        count, agg_s = aggregate_incremental(server.aggregate, reports)
        est, est_s = timed(lambda: np.asarray(
            server.estimate_all(range(d), suppress_warnings=True), dtype=np.float64))
        return count, agg_s, est_s, est, agg_s + est_s

    count, agg_s, est_s, est, _ = best_of(once)
    return reports, client_us, count, agg_s, est_s, est / count, server


# -- multi-freq-ldpy ---------------------------------------------------------------------------

def seed_numba(seed: int) -> None:
    """numba-compiled clients draw from numba's own generator, seeded only from inside."""
    import numba

    @numba.njit
    def _seed(s: int) -> None:
        np.random.seed(s)

    _seed(seed)


def mfl_run(kind: str, eps: float, d: int, xs: np.ndarray) -> tuple[float, int, float,
                                                                     np.ndarray]:
    """(client µs, n aggregated, aggregate+estimate s, normalized frequencies)."""
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI, GRR_Client
    from multi_freq_ldpy.pure_frequency_oracles.LH import LH_Aggregator_MI, LH_Client
    from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Aggregator_MI, UE_Client

    if kind == "grr":
        client = lambda x: GRR_Client(x, d, eps)  # noqa: E731
        server = lambda r: GRR_Aggregator_MI(r, d, eps)  # noqa: E731
    elif kind in ("oue", "sue"):
        opt = kind == "oue"
        client = lambda x: UE_Client(x, d, eps, opt)  # noqa: E731
        server = lambda r: UE_Aggregator_MI(r, eps, opt)  # noqa: E731
    elif kind == "olh":
        client = lambda x: LH_Client(x, d, eps, True)  # noqa: E731
        server = lambda r: LH_Aggregator_MI(r, d, eps, True)  # noqa: E731
    else:
        raise ValueError(kind)
    client(int(xs[0]))  # numba compiles on the first call: keep it out of the timing
    reports, client_us = perturb_all(client, xs)
    m = batch_prefix(server, reports)
    est, agg_s = best_of(lambda: timed(lambda: np.asarray(server(reports[:m]),
                                                          dtype=np.float64)))
    return client_us, m, agg_s, est


# -- the rows ---------------------------------------------------------------------------------

MECHANISMS = ("grr", "oue", "sue", "olh", "hr", "rappor")
BIASED_MFL = ("multi-freq-ldpy MI estimator clips negatives and renormalizes "
              "(Histogram_estimator.py:25-29): biased, MSE not comparable to the unbiased theory")


def _grr_like(kind: str, n: int, d: int, eps: float, seed: int, xs: np.ndarray,
              rows: list[dict[str, Any]]) -> None:
    pq = {"grr": grr_pq(eps, d), "oue": oue_pq(eps), "sue": sue_pq(eps)}[kind]
    label = {"grr": "grr/k-rr", "oue": "oue", "sue": "sue"}[kind]
    campaign = chorus_campaign({"grr": "krr"}.get(kind, kind), eps, d)
    peer_est = None
    if PURE_LDP:
        random.seed(seed), np.random.seed(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            reports, c_us, count, agg_s, est_s, est, _ = pureldp_run(kind, eps, d, xs)
        truth = frequencies(xs[:count], d)
        name = {"grr": "DEClient/DEServer", "oue": "UEClient/UEServer(use_oue=True)",
                "sue": "UEClient/UEServer(use_oue=False)"}[kind]
        rows.append(make_row("pure-LDP 1.2.0", label, d, eps, count, c_us,
                             count / (agg_s + est_s), est, truth, pq,
                             f"{name}; incremental aggregate(); unbiased"
                             + warning_summary(caught), estimate_s=est_s,
                             aggregate_only=count / agg_s))
        peer_est = est
        if kind == "grr":
            payloads: list[Any] = [int(r) for r in reports[:count]]
        else:
            payloads = [{"bits": hex_bits(r, d)} for r in reports[:count]]
        note = "aggregates pure-LDP's reports (same reports, wire format)"
    else:
        rows.append(make_row("pure-LDP 1.2.0", label, d, eps, 0, None, None, None, None, None,
                             MISSING))
        rng = random.Random(seed)
        payloads = [campaign.mechanism.randomize(x, rng) for x in xs.tolist()]
        note = "own client (pure-LDP not installed)"

    if MULTI_FREQ:
        seed_numba(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            c_us, m, agg_s, est = mfl_run(kind, eps, d, xs)
        truth_m = frequencies(xs[:m], d)
        rows.append(make_row("multi-freq-ldpy 0.2.5", label, d, eps, m, c_us, m / agg_s, est,
                             truth_m, pq, f"BIASED: {BIASED_MFL}; "
                             f"{top_bias(est, truth_m, pq, m)}" + warning_summary(caught)))
    else:
        rows.append(make_row("multi-freq-ldpy 0.2.5", label, d, eps, 0, None, None, None,
                             None, None, MISSING))
    rows.append(chorus_row(label, campaign, d, eps, xs, payloads, seed, note,
                           same_as=peer_est))


def _olh(n: int, d: int, eps: float, seed: int, xs: np.ndarray,
         rows: list[dict[str, Any]]) -> None:
    g = peer_olh_g(eps)
    pq = olh_pq(eps, g)
    if PURE_LDP:
        random.seed(seed), np.random.seed(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            _, c_us, count, agg_s, est_s, est, _ = pureldp_run("olh", eps, d, xs)
        slice_note = f"timed on the first {count} of {len(xs)} reports (budget " \
            f"{BUDGET_S:.0f} s), rate extrapolated; " if count < len(xs) else ""
        rows.append(make_row("pure-LDP 1.2.0", "olh", d, eps, count, c_us,
                             count / (agg_s + est_s), est, frequencies(xs[:count], d), pq,
                             f"{slice_note}LHClient/LHServer(use_olh=True), g={g}; aggregate() "
                             f"hashes all d values per report in Python; unbiased"
                             + warning_summary(caught), estimate_s=est_s,
                             aggregate_only=count / agg_s))
    else:
        rows.append(make_row("pure-LDP 1.2.0", "olh", d, eps, 0, None, None, None, None, None,
                             MISSING))
    if MULTI_FREQ:
        seed_numba(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            c_us, m, agg_s, est = mfl_run("olh", eps, d, xs)
        truth_m = frequencies(xs[:m], d)
        slice_note = f"timed on the first {m} of {len(xs)} reports, rate extrapolated; " \
            if m < len(xs) else ""
        rows.append(make_row("multi-freq-ldpy 0.2.5", "olh", d, eps, m, c_us, m / agg_s, est,
                             truth_m, pq, f"{slice_note}LH_Client/LH_Aggregator_MI, g={g}; "
                             f"BIASED: {BIASED_MFL}; {top_bias(est, truth_m, pq, m)}"
                             + warning_summary(caught)))
    else:
        rows.append(make_row("multi-freq-ldpy 0.2.5", "olh", d, eps, 0, None, None, None,
                             None, None, MISSING))

    campaign = chorus_campaign("olh", eps, d)
    rng = random.Random(seed)
    payloads = [campaign.mechanism.randomize(x, rng) for x in xs.tolist()]
    rows.append(chorus_row("olh", campaign, d, eps, xs, payloads, seed,
                           f"own client on the same true values (different hash family), "
                           f"g={campaign.mechanism.g}"))


def _hr(n: int, d: int, eps: float, seed: int, xs: np.ndarray,
        rows: list[dict[str, Any]]) -> None:
    pq = hr_pq(eps)
    if not PURE_LDP:
        rows.append(make_row("pure-LDP 1.2.0", "hr", d, eps, 0, None, None, None, None, None,
                             MISSING))
        campaign = chorus_campaign("hr", eps, d)
        rng = random.Random(seed)
        payloads = [campaign.mechanism.randomize(x, rng) for x in xs.tolist()]
        rows.append(chorus_row("hr", campaign, d, eps, xs, payloads, seed, "own client"))
        return
    random.seed(seed), np.random.seed(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        reports, c_us, count, agg_s, est_s, est, _ = pureldp_run("hr", eps, d, xs)
    regime = "high-privacy HR (ε ≤ 1), same mechanism as Chorus 'hr'" if eps <= 1 else \
        "ε > 1: pure-LDP switches to a different (blocked) HR; not Chorus's mechanism"
    rows.append(make_row("pure-LDP 1.2.0", "hr", d, eps, count, c_us, count / (agg_s + est_s),
                         est, frequencies(xs[:count], d), pq,
                         f"HadamardResponseClient/Server, {regime}; aggregate() appends to a "
                         "list, estimate = histogram + FWHT; unbiased (normalization=-1)"
                         + warning_summary(caught), estimate_s=est_s,
                         aggregate_only=count / agg_s))
    if eps <= 1:
        campaign = chorus_campaign("hr", eps, d)
        rows.append(chorus_row("hr", campaign, d, eps, xs, [int(r) for r in reports[:count]],
                               seed, "aggregates pure-LDP's reports (same reports)",
                               same_as=est))


def rappor_f(eps: float, hashes: int) -> float:
    """f with pure-LDP's claimed ε = 2h·ln((1 − f/2)/(f/2)) equal to eps (rappor_server.py:134)."""
    return 2 / (1 + math.exp(eps / (2 * hashes)))


def _rappor(n: int, d: int, eps: float, seed: int, xs: np.ndarray,
            rows: list[dict[str, Any]], bits: int = 128, hashes: int = 2,
            cohorts: int = 16) -> None:
    f = rappor_f(eps, hashes)
    if not PURE_LDP:
        rows.append(make_row("pure-LDP 1.2.0", "rappor", d, eps, 0, None, None, None, None,
                             None, MISSING))
        return
    random.seed(seed), np.random.seed(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        reports, c_us, count, agg_s, est_s, est, server = pureldp_run(
            "rappor", eps, d, xs, f=f, bits=bits, hashes=hashes, cohorts=cohorts)
    # How often a true Bloom 1 is reported as 1: RAPPOR's PRR says 1 − f/2.
    kept = total = 0
    for x, (bloom, cohort) in zip(xs[:2000].tolist(), reports[:2000], strict=False):
        for h in server.hash_family[cohort]:
            total += 1
            kept += bloom[h(str(x))]
    truth = frequencies(xs[:count], d)
    rows.append(make_row(
        "pure-LDP 1.2.0", "rappor", d, eps, count, c_us, count / (agg_s + est_s), est, truth,
        None, f"NOT ε-LDP, not comparable: rappor_client.py:50 never clears a true 1 bit "
        f"(measured P(1|1) = {kept / total:.3f}, claimed 1 − f/2 = {1 - f / 2:.3f}; "
        f"f={f:.4f}, {bits} bits, {hashes} hashes, {cohorts} cohorts, claimed ε={eps}); "
        f"estimate = {'LASSO selection (d > 1000) + ' if d > 1000 else ''}non-negative "
        f"ridge ElasticNet over all d, biased; "
        f"Σf̂ = {est.sum():.3f}; bit counting alone {count / agg_s:,.0f} rep/s"
        + warning_summary(caught), estimate_s=est_s, aggregate_only=count / agg_s))

    # Chorus, same (f, p=0, q=1) PRR-only parameters, hence the same claimed ε.
    params = {"k": bits, "h": hashes, "m": cohorts, "f": f, "p": 0.0, "q": 1.0}
    campaign = chorus_campaign("rappor", eps, d, params=params, strings=True)
    from chorus_collector.estimators import estimator_for

    same = [{"cohort": c, "bits": hex_bits(np.asarray(b), bits)} for b, c in reports[:count]]
    state, map_s = timed(lambda: estimator_for("rappor").map(campaign.mechanism, same))
    table = state.reshape(cohorts, bits + 1)
    equal = bool(np.array_equal(table[:, 1:], np.array(server.bloom_filters, dtype=np.int64)))
    rng = random.Random(seed)
    strings = [str(x) for x in xs.tolist()]
    payloads = [campaign.mechanism.randomize(s, rng) for s in strings]
    candidates = tuple(str(i) for i in range(d))
    rows.append(chorus_row(
        "rappor", campaign, d, eps, xs, payloads, seed,
        f"bit counting on pure-LDP's reports: {count / map_s:,.0f} rep/s (counts identical: "
        f"{equal}); estimate from its own client on the same values, WLS over {d} candidates; "
        "theory_var = mean of its model SE²",
        client_xs=np.array(strings, dtype=object), candidates=candidates))
    rows[-1]["aggregate_only_reports_per_s"] = count / map_s  # on the peer's own reports


def peer_rows(n: int, d: int, epsilon: float, seed: int,
              mechanisms: Sequence[str] = MECHANISMS) -> list[dict[str, Any]]:
    """One row per (implementation, mechanism): Chorus, pure-LDP, multi-freq-ldpy."""
    xs = true_values(n, d, seed)
    rows: list[dict[str, Any]] = []
    for kind, _ in staged([(kind, kind) for kind in mechanisms], f"peers, d = {d}"):
        try:
            if kind in ("grr", "oue", "sue"):
                _grr_like(kind, n, d, epsilon, seed, xs, rows)
            elif kind == "olh":
                _olh(n, d, epsilon, seed, xs, rows)
            elif kind == "hr":
                _hr(n, d, epsilon, seed, xs, rows)
            elif kind == "rappor":
                _rappor(n, d, epsilon, seed, xs, rows)
        except Exception as error:  # a broken peer is a row, not a crash
            rows.append(make_row("?", kind, d, epsilon, 0, None, None, None, None, None,
                                 f"FAILED: {type(error).__name__}: {error}"))
    return rows


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    def fmt(value: Any, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    print(f"{'peer':<22}{'mech':<9}{'d':>5}{'n':>7}{'client µs':>11}{'agg+est rep/s':>15}"
          f"{'mse':>11}{'theory':>11}{'ratio':>7}  note")
    for r in rows:
        print(f"{r['peer']:<22}{r['mechanism']:<9}{r['d']:>5}{r['n_timed']:>7}"
              f"{fmt(r['client_us'], '.1f'):>11}{fmt(r['aggregate_reports_per_s'], ',.0f'):>15}"
              f"{fmt(r['mse'], '.2e'):>11}{fmt(r['theory_var'], '.2e'):>11}"
              f"{fmt(r['mse_ratio'], '.2f'):>7}  {r['note']}")


def targets(rows: Sequence[dict[str, Any]]) -> None:
    """The issue's targets: Chorus OLH ≥ 200× peers; others ≥ the faster peer.

    Rates are aggregation + estimation, except RAPPOR, whose target is bit counting (the
    aggregation alone: pure-LDP's estimate is a regression over all d, Chorus's a WLS over the
    candidates, not the same work). A peer row marked NOT ε-LDP or BIASED still gets a rate,
    flagged: it is not a like-for-like comparison.
    """
    key = {"rappor": "aggregate_only_reports_per_s"}
    by: dict[tuple[str, int], dict[str, tuple[float, str]]] = {}
    for r in rows:
        rate = r[key.get(r["mechanism"], "aggregate_reports_per_s")]
        if rate:
            flag = "NOT ε-LDP" if "NOT ε-LDP" in r["note"] else \
                "biased" if "BIASED" in r["note"] else ""
            by.setdefault((r["mechanism"], r["d"]), {})[r["peer"]] = (rate, flag)
    print("\ntargets (reports/s; RAPPOR: bit counting only):")
    for (mech, d), rates in by.items():
        chorus = rates.pop("chorus", None)
        if chorus is None or not rates:
            continue
        best_peer, (best, flag) = max(rates.items(), key=lambda kv: kv[1][0])
        need = 200.0 if mech == "olh" else 1.0
        verdict = "MET" if chorus[0] >= need * best else "NOT MET"
        print(f"  {mech:<9} d={d:<5} chorus {chorus[0]:,.0f} vs {best_peer} {best:,.0f}"
              f"{' (' + flag + ')' if flag else ''}: {chorus[0] / best:.1f}× "
              f"(need ≥ {need:g}×) {verdict}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    import argparse
    import json
    import os
    import platform
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--out", default="bench-results/peers.json")
    args = parser.parse_args(argv)
    n, d, eps, seed = (600, 32, 1.0, 1) if args.quick else (20_000, 1024, 1.0, 1)

    def installed(package: str) -> str:
        try:
            return f"{package} {version(package)}"
        except PackageNotFoundError:
            return f"{package} not installed"

    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs; " + ", ".join(
        installed(p) for p in ("pure-ldp", "multi-freq-ldpy", "numpy", "numba", "xxhash")))
    rows = peer_rows(n, d, eps, seed) + peer_rows(n, 16, eps, seed, mechanisms=("grr",))
    print_table(rows)
    targets(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1, default=str))
    print(f"\nwrote {out}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
