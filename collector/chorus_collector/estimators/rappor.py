"""RAPPOR decoding against a candidate list (MECHANISMS.md §5.3–5.4).

Statistic: per cohort j, the number of reports N_j and the count c_ij of reports with bit i set
(an m × (k + 1) table, updated at ingest, so decoding never rescans reports).

Decoding: Y_ij = (c_ij / N_j − r0) / (r1 − r0) is an unbiased estimate of the share of cohort j
whose Bloom bit i is set. With X the cohort × bit design matrix of the candidates
(X[(j,i), s] = 1 iff candidate s sets bit i in cohort j), E[Y] = X β where β_s is the share of
users holding s, provided the candidates include every reported value. Weighted least squares
(weights N_j) gives an unbiased β̂ = A·Y, and its covariance is exact under i.i.d. sampling
given the cohort sizes: Σ_j A_j Σ_j A_jᵀ / N_j, with Σ_j the covariance of one report's
debiased bits (``decoder_variances``; derived in docs/mechanisms/strings.md, "Exact
variances"). The standard error evaluates it at the estimate: each bit's report rate at its
observed share, the covariance between bits at the fitted shares. A query whose design would
be too large to decode quickly is refused (``query-too-large``) rather than left to exhaust
memory.
Candidates are flagged ``detected`` when β̂_s exceeds z_{1 − α/M}·SE_s (one-sided, Bonferroni
over the M candidates, α = 0.05). The share left unexplained, 1 − Σ β̂, is reported with its SE,
and the residual χ² (Σ residual² / Var Y over the cohort bits, with its degrees of freedom):
far above its dof, it says that reported values are missing from the candidates.

O-RAPPOR is this decoder with h = 1. O-RR's statistic has the same layout (per cohort, the
number of reports and how often each bin was reported), with r1 = p and r0 = q of k-RR; only
the within-cohort covariance differs: one report names one bin, so its indicator vector has
covariance diag(λ) − λλᵀ (λ_j = q + (p − q)·Σ_s π_s·1[h_c(s) = j]).

``postprocessing=nnls`` asks for google/rappor's fit instead: LASSO selection when there are
many candidates, then non-negative least squares with Σβ ≤ 1 (see ``rappor_fit``). Its
standard errors and intervals are those of the unbiased fit on the selected candidates: exact for
that linear fit had the selection been fixed in advance, with the covariance evaluated at the
constrained fit. They are not the error of the constrained (biased, non-linear) estimate, and
they ignore that LASSO chose the candidates from the same reports.


Basic and boolean RAPPOR: each category's share read off its own bit.

The statistic is RAPPOR's (reports, then per-bit counts; one cohort). Category v's bit is 1
with probability r1 if the user holds v and r0 otherwise, a pure protocol (MECHANISMS.md §0.1)
with p* = r1 and q* = r0, so f̂_v = (c_v/N − r0)/(r1 − r0) with the i.i.d.-sampling SE. Boolean
RAPPOR has one bit, for the second category; the first gets 1 − f̂ with the same SE.

"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, ClassVar, TypeVar

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query, QueryError
from chorus_collector.estimators.common import (
    check_candidates,
    frequency_estimate,
    grouped_sums,
    pure_frequencies,
    unpack_bits,
)
from chorus_collector.estimators.rappor_fit import constrained_fit, lasso_select
from chorus_collector.results.estimates import FrequencyEstimate, FrequencyRow
from chorus_shared.campaign import Campaign
from chorus_shared.hashing import bloom_bits, google_bloom_bits
from chorus_shared.mechanisms import BasicRappor, BooleanRappor, OpenRR, Rappor

Decodable = Rappor | OpenRR


ALPHA = 0.05
MAX_DESIGN_CELLS = 25_000_000  # cohort·bit rows × candidates: 200 MB of float64
MAX_WORK = 10_000_000_000  # rows × candidates², the cost of the standard errors
MAX_LASSO_COLUMNS = 5_000  # LASSO works on the candidates × candidates Gram matrix


def _refuse_aliases(x: np.ndarray, candidates: Sequence[str]) -> None:
    """Candidates with identical Bloom filters in every cohort cannot be told apart."""
    seen: dict[bytes, str] = {}
    for column, candidate in enumerate(candidates):
        key = np.packbits(x[:, column] > 0).tobytes()
        if key in seen:
            raise QueryError(
                "candidates-not-identifiable",
                f"candidates {seen[key]!r} and {candidate!r} set the same Bloom bits in every "
                "cohort with reports; no decoder can tell them apart: query one of them",
            )
        seen[key] = candidate
VARIANCE_MODEL = ("iid-sampling, given the cohort sizes: the exact covariance of the weighted "
                  "least-squares fit (each cohort bit's binomial variance and the covariance of "
                  "one report's bits), evaluated at the estimate; unbiased when the candidates "
                  "cover every reported value")


#: Design matrices of up to this many cells (8 MB) are kept, the last few of them: a campaign's
#: next query (a dashboard's refresh, a series' next point) hashes the same candidates into
#: the same cohorts, which was 40% of a finalize's CPU.
DESIGN_CACHE_CELLS = 1_000_000


def design_matrix(mechanism: Decodable, cohorts: Sequence[int],
                  candidates: Sequence[str]) -> np.ndarray:
    """X[(j, i), s] = 1 iff candidate s sets Bloom bit i in cohort j (rows cohort-major).
    Read-only: one may be shared by later queries."""
    if len(cohorts) * mechanism.k * len(candidates) <= DESIGN_CACHE_CELLS:
        return _kept_design_matrix(mechanism, tuple(cohorts), tuple(candidates))
    return _design_matrix(mechanism, cohorts, candidates)


@functools.lru_cache(maxsize=4)
def _kept_design_matrix(mechanism: Decodable, cohorts: tuple[int, ...],
                        candidates: tuple[str, ...]) -> np.ndarray:
    return _design_matrix(mechanism, cohorts, candidates)


def _design_matrix(mechanism: Decodable, cohorts: Sequence[int],
                   candidates: Sequence[str]) -> np.ndarray:
    k, h = mechanism.k, mechanism.h
    hasher = google_bloom_bits if mechanism.hash == "google-md5" else bloom_bits
    x = np.zeros((len(cohorts), k, len(candidates)), dtype=np.float64)
    for row, cohort in enumerate(cohorts):
        for s, candidate in enumerate(candidates):
            x[row, list(hasher(candidate, cohort, k, h)), s] = 1.0
    design = x.reshape(len(cohorts) * k, len(candidates))
    design.flags.writeable = False
    return design


def decoder_variances(operator: np.ndarray, x: np.ndarray, pi: np.ndarray,
                      var_y: np.ndarray, reports: np.ndarray, k: int,
                      categorical: tuple[float, float] | None = None
                      ) -> tuple[np.ndarray, float]:
    """Var[β̂_s] for every candidate, and Var[Σ_s β̂_s], without the full covariance matrix.

    Exact under i.i.d. sampling given the cohort sizes N_j (``reports``), when every user holds
    a candidate: β̂ = A·Y (A = ``operator``), so Cov[β̂] = Σ_j A_j Σ_j A_jᵀ / N_j, where Σ_j is
    the covariance of one report's debiased bits Z = (R − r0)/(r1 − r0) in cohort j:

    * its diagonal, λ(1 − λ)/(r1 − r0)² with λ = r0 + (r1 − r0)·X_j π the bits' report rates,
      is ``var_y``·N_j (``var_y`` = Var[Y] per cohort bit);
    * RAPPOR: given its Bloom filter B a report's bits are independent, so off the diagonal
      Σ_j = Cov[B] = X_j (diag π − π πᵀ) X_jᵀ (a user off the candidates counts as setting no
      bit; the unbiasedness above assumes there is none);
    * O-RR (``categorical = (r0, r1 − r0)``): a report names one bin, so off the diagonal
      Σ_j = −λ_i λ_l/(r1 − r0)².

    Evaluated at the truth (π and its λ) this is the exact variance; the estimator evaluates it
    at the estimate (π clipped to a distribution, ``var_y`` at the observed report shares).
    """
    pi = np.clip(pi, 0.0, None)
    if pi.sum() > 1:
        pi = pi / pi.sum()
    diagonal = (operator**2) @ var_y
    total_weights = operator.sum(axis=0)
    total = float(total_weights**2 @ var_y)
    for j, n_j in enumerate(reports):
        rows = slice(j * k, (j + 1) * k)
        o_j, x_j = operator[:, rows], x[rows]
        w_j = total_weights[rows]
        if categorical is not None:
            r0, gap = categorical
            lam = r0 + gap * (x_j @ pi)
            # Σ_{i≠l} o_i o_l λ_i λ_l = (o·λ)² − Σ_i o_i² λ_i².
            diagonal -= ((o_j @ lam) ** 2 - (o_j**2) @ lam**2) / (n_j * gap**2)
            total -= float((w_j @ lam) ** 2 - (w_j**2) @ lam**2) / (n_j * gap**2)
            continue
        g = o_j @ x_j  # M × M
        set_rate = x_j @ pi
        bit_var = set_rate * (1 - set_rate)  # the diagonal of X_j S X_jᵀ, already in var_y
        # o_t X_j S X_jᵀ o_tᵀ = Σ_s g_ts² π_s − (Σ_s g_ts π_s)², less its diagonal part.
        diagonal += ((g**2) @ pi - (g @ pi) ** 2 - (o_j**2) @ bit_var) / n_j
        w = x_j.T @ w_j
        total += float(pi @ w**2 - (pi @ w) ** 2 - w_j**2 @ bit_var) / n_j
    return np.clip(diagonal, 0.0, None), max(total, 0.0)


D = TypeVar("D", bound=Decodable)


class BloomDecoder(Estimator[D]):
    """Weighted least squares against candidates, shared by RAPPOR, O-RAPPOR and O-RR."""

    postprocessing: ClassVar[tuple[str, ...]] = ("none", "nnls")

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = self.mechanism_of(campaign)
        candidates = check_candidates(mechanism, query.candidates)
        bits = _CohortBits.of(mechanism, state)
        lasso = self._check_size(mechanism, bits, candidates, query)
        x = design_matrix(mechanism, bits.used.tolist(), candidates)
        _refuse_aliases(x, candidates)
        fit = _fit(mechanism, bits, x, lasso, query.postprocessing == "nnls")
        threshold = NormalDist().inv_cdf(1 - ALPHA / len(candidates))
        rows = _rows(candidates, fit, n, threshold, query.postprocessing == "nnls")
        residual = bits.y - x @ fit.beta
        informative = bits.var_y > 0
        chi2 = float(np.sum(residual[informative] ** 2 / bits.var_y[informative]))
        dof = int(informative.sum()) - len(fit.support)
        extra = {
            "unexplained_frequency": 1.0 - float(fit.beta.sum()),
            "unexplained_std_error": float(np.sqrt(fit.total_variance)),
            "detection_threshold": f"one-sided z > {threshold:.3f} (Bonferroni, "
                                   f"alpha = {ALPHA} over {len(candidates)} candidates)",
            "cohorts_with_reports": len(bits.used),
            "residual_chi2": chi2,
            "residual_dof": dof,
            "candidates_fitted": len(fit.support),
            "residual_chi2_per_dof": chi2 / max(1, dof),
        }
        label = "none (unbiased weighted least squares)"
        warnings = fit_warnings(chi2, dof, 1.0 - float(fit.beta.sum()),
                                float(np.sqrt(fit.total_variance)))
        if query.postprocessing == "nnls":
            label = ("nnls: non-negative least squares with sum <= 1 (biased towards 0), after "
                     "LASSO selection when candidates outnumber 0.8 x cohort bits; standard "
                     "errors from the unconstrained fit on the selected candidates")
            extra.update(NNLS_NOTE)
            warnings.append(NNLS_WARNING)
        return FrequencyEstimate(
            campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
            rows=rows, variance_model=VARIANCE_MODEL, window=query.window,
            postprocessing=label, extra=extra, warnings=warnings,
        )

    @staticmethod
    def _check_size(mechanism: Decodable, bits: _CohortBits, candidates: Sequence[str],
                    query: Query) -> bool:
        """Whether LASSO selection comes first; refuses what cannot or should not be solved."""
        design_rows, columns = len(bits.used) * mechanism.k, len(candidates)
        lasso = query.postprocessing == "nnls" and columns > 0.8 * design_rows
        if not lasso and columns > design_rows:
            raise QueryError(
                "candidates-not-identifiable",
                f"{columns} candidates but only {design_rows} cohort bits with reports: query "
                "fewer candidates, or ask for postprocessing=nnls (LASSO selection first)",
            )
        if design_rows * columns > MAX_DESIGN_CELLS or columns > MAX_LASSO_COLUMNS or (
                not lasso and design_rows * columns**2 > MAX_WORK):
            raise QueryError(
                "query-too-large",
                f"{columns} candidates over {len(bits.used)} cohorts × {mechanism.k} bits is "
                "too large to decode in one query; query fewer candidates",
            )
        return lasso


#: What ``nnls`` improves and may harm, measured paired against the unbiased fit on the same
#: reports (docs/mechanisms/strings.md, "What nnls improves"; tests/mechanisms/
#: test_rappor_decoding.py): the error summed over the candidates fell (0.27–0.47× on Zipf 1.5,
#: 0.97× on a uniform population, n = 2·10⁴), and so did the unexplained share's; one
#: candidate's rose up to 1.76× (z = 2.5, with as many decoys as values).
NNLS_NOTE: dict[str, Any] = {
    "postprocessed": ["frequencies", "counts", "detected", "unexplained_frequency"],
    "postprocessing_improves": "the error summed over all candidates, the shares of "
                               "candidates nobody holds, and the unexplained share",
    "postprocessing_may_harm": "the frequency and count of a single candidate that is held "
                               "(MSE measured up to 1.8x the unbiased fit's)",
}
NNLS_WARNING = ("nnls: lowers the error summed over all candidates, but may raise the error of "
                "the frequency of a single candidate that is held (measured up to 1.8x); for "
                "one candidate's share ask without postprocessing, which is unbiased")


#: A fit diagnostic speaks only when chance alone would say so once in a thousand queries.
WARNING_ALPHA = 1e-3


def fit_warnings(chi2: float, dof: int, unexplained: float, unexplained_se: float) -> list[str]:
    """The residual χ² and the unexplained share, said in words when they are out of range."""
    out = []
    z = NormalDist().inv_cdf(1 - WARNING_ALPHA)
    if dof > 0:
        # Wilson–Hilferty: the (1 − α) quantile of χ²_dof, accurate to a few % from dof = 3.
        upper = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
        if chi2 > upper:
            out.append(f"residual χ²/dof = {chi2 / dof:.2f}, above the {upper / dof:.2f} that "
                       f"chance reaches once in {1 / WARNING_ALPHA:.0f}: the candidates and the "
                       "campaign's parameters do not explain the reports (a frequent value is "
                       "missing from the candidates, or the reports were made with other "
                       "parameters); the estimates and detections are not to be trusted")
    two_sided = NormalDist().inv_cdf(1 - WARNING_ALPHA / 2)
    if unexplained_se > 0 and abs(unexplained) > two_sided * unexplained_se:
        out.append(f"the candidates leave {unexplained:.3f} ± {unexplained_se:.3f} of the "
                   "reports unexplained: values outside the candidate list are frequent")
    return out


@dataclass(frozen=True)
class _CohortBits:
    """Per used cohort and bit: the debiased share y, its plug-in variance and weight."""

    used: np.ndarray  # cohorts with reports
    reports: np.ndarray  # reports per used cohort
    y: np.ndarray
    var_y: np.ndarray
    weights: np.ndarray
    r0: float
    gap: float

    @classmethod
    def of(cls, mechanism: Decodable, state: np.ndarray) -> _CohortBits:
        table = state.reshape(mechanism.m, mechanism.k + 1).astype(np.float64)
        used = np.flatnonzero(table[:, 0] > 0)
        reports = table[used, 0]
        share = table[used, 1:] / reports[:, None]
        gap = mechanism.r1 - mechanism.r0
        # Every true bit rate lies in [r0, r1]: clip the plug-in so no variance collapses to 0.
        rate = np.clip(share, mechanism.r0, mechanism.r1)
        return cls(used=used, reports=reports, y=((share - mechanism.r0) / gap).ravel(),
                   var_y=(rate * (1 - rate) / (reports[:, None] * gap**2)).ravel(),
                   weights=np.repeat(reports, mechanism.k), r0=mechanism.r0, gap=gap)


@dataclass(frozen=True)
class _Fit:
    support: np.ndarray  # the fitted candidates (all, or LASSO's selection)
    unbiased: np.ndarray
    beta: np.ndarray  # the reported fit (the unbiased one, or NNLS)
    std_error: np.ndarray  # NaN where not fitted
    total_variance: float


def _fit(mechanism: Decodable, bits: _CohortBits, x: np.ndarray, lasso: bool,
         nnls: bool) -> _Fit:
    columns = x.shape[1]
    support = np.arange(columns)
    if lasso:
        root_w = np.sqrt(bits.weights)
        support = lasso_select(x * root_w[:, None], bits.y * root_w,
                               max_nonzero=min(500, int(0.8 * x.shape[0])))
    unbiased, beta = np.zeros(columns), np.zeros(columns)
    std_error = np.full(columns, np.nan)  # NaN (null in JSON): no estimate, no interval
    total_variance = 0.0
    if len(support):
        x_s = x[:, support]
        gram = x_s.T @ (x_s * bits.weights[:, None])
        if np.linalg.matrix_rank(gram) < len(support):
            raise QueryError(
                "candidates-not-identifiable",
                f"the {len(support)} candidates' Bloom filters are linearly dependent "
                f"across the {len(bits.used)} cohorts that have reports (k = {mechanism.k}); "
                "query fewer candidates, or collect with more bits or cohorts",
            )
        operator = np.linalg.solve(gram, (x_s * bits.weights[:, None]).T)  # M × rows
        fitted = operator @ bits.y
        unbiased[support] = fitted
        if nnls:
            root_w = np.sqrt(bits.weights)
            fitted = constrained_fit(x_s * root_w[:, None], bits.y * root_w)
        variance, total_variance = decoder_variances(
            operator, x_s, fitted, bits.var_y, bits.reports, mechanism.k,
            (bits.r0, bits.gap) if isinstance(mechanism, OpenRR) else None)
        beta[support] = fitted
        std_error[support] = np.sqrt(variance)
    return _Fit(support, unbiased, beta, std_error, total_variance)


def _rows(candidates: Sequence[str], fit: _Fit, n: int, threshold: float,
          nnls: bool) -> list[FrequencyRow]:
    rows = []
    for c, b, u, se in zip(candidates, fit.beta, fit.unbiased, fit.std_error, strict=True):
        if se != se:  # not selected by LASSO: 0, with no SE or interval
            rows.append(FrequencyRow.from_frequency(c, 0.0, math.nan, n, detected=False))
            continue
        # Under nnls the interval is the unconstrained fit's (on the selected candidates)
        # intersected with [0, 1], as for every other post-processing.
        row = FrequencyRow.from_frequency(c, float(u), float(se), n,
                                          detected=bool(b > threshold * se))
        rows.append(row.postprocessed(float(b), n) if nnls else row)
    return rows


class RapporEstimator(BloomDecoder[Rappor]):
    name: ClassVar[str] = "rappor"
    mechanism_type: ClassVar[MechanismTypes] = Rappor

    def state_size(self, mechanism: Rappor) -> int:
        return mechanism.m * (mechanism.k + 1)

    def map(self, mechanism: Rappor, payloads: Sequence[Any]) -> np.ndarray:
        table = np.zeros((mechanism.m, mechanism.k + 1), dtype=np.int64)
        if not payloads:
            return table.ravel()
        cohorts = np.fromiter((p["cohort"] for p in payloads), dtype=np.int64,
                              count=len(payloads))
        bits = unpack_bits([p["bits"] for p in payloads], mechanism.k)
        table[:, 0] = np.bincount(cohorts, minlength=mechanism.m)
        table[:, 1:] = grouped_sums(cohorts, bits, mechanism.m)
        return table.ravel()


class BasicRapporEstimator(Estimator[BasicRappor]):
    name: ClassVar[str] = "basic_rappor"
    mechanism_type: ClassVar[MechanismTypes] = BasicRappor
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "projection", "mle")

    def state_size(self, mechanism: BasicRappor) -> int:
        return mechanism.k + 1

    def map(self, mechanism: BasicRappor, payloads: Sequence[Any]) -> np.ndarray:
        return RapporEstimator().map(mechanism, payloads)

    def _frequencies(self, mechanism: BasicRappor, n: int,
                     state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return pure_frequencies(state[1:].astype(np.float64), n, mechanism.r1, mechanism.r0)

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = self.mechanism_of(campaign)
        frequency, std_error = self._frequencies(mechanism, n, state)
        return frequency_estimate(campaign, n, frequency, std_error, query, {})


class BooleanRapporEstimator(BasicRapporEstimator):
    name: ClassVar[str] = "boolean_rappor"
    mechanism_type: ClassVar[MechanismTypes] = BooleanRappor
    postprocessing: ClassVar[tuple[str, ...]] = ("none",)  # two shares that sum to one

    def _frequencies(self, mechanism: BasicRappor, n: int,
                     state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        second, se = pure_frequencies(state[1:2].astype(np.float64), n, mechanism.r1,
                                      mechanism.r0)
        return np.array([1.0 - second[0], second[0]]), np.array([se[0], se[0]])
