"""Count-Mean Sketch and Hadamard Count-Mean Sketch decoding (MECHANISMS.md §7.3).

Statistic per hash row j: the number of reports N_j and, for CMS, how often each sketch
coordinate was reported +1 (ones[j, i]); for HCMS, the net sum of the ±1 bits per Hadamard row
l (S[j, l]). At query time, for each candidate v:

* CMS: Σ_u Z_u = Σ_j (c·ones[j, h_j(v)] − (c − 1)/2·N_j), with c = (e^{ε/2}+1)/(e^{ε/2}−1);
* HCMS: Σ_u Z_u = c·Σ_j (H_m·S[j])[h_j(v)] (one fast Walsh–Hadamard transform per row), with
  c = (e^ε+1)/(e^ε−1);

where Z_u is report u's contribution to Apple's (1/k)·Σ_j M[j, h_j(v)], with E[Z_u | x_u] = π_u,
the share of hash rows in which u's value lands where v does. The count estimate is
ĉ(v) = m/(m − 1)·(Σ_u Z_u − n/m).

Standard errors: under i.i.d. sampling of users the Z_u are i.i.d., and with the campaign's
fixed hashes Var[Z] = (c² − 1)/4 + θ(1 − θ) for CMS and c² − θ² for HCMS, exactly, where
θ = E[Z] = Σ_x f_x·π_x(v) counts the mass of the values colliding with v. That part is
(m/(m − 1))²·Var[Z]/n, evaluated at θ̂ = Σ_u Z_u / n (clipped to [0, 1]). For fixed hashes the
estimate's mean is m/(m − 1)·(θ − 1/m), not f_v: the collisions add a bias that does not shrink
with n. Over random hash functions that bias has mean 0 and variance Σ_{x≠v} f_x²/(k(m − 1)),
which the standard error adds, with F₂ = Σ_x f_x² estimated unbiasedly from the squared cell
totals of each row (``sum_of_squares``), less f̂_v², clipped at 0; so the intervals cover f_v
over the draw of the hashes (docs/mechanisms/strings.md, "Exact variances"). That bias is a
sum of rare positive jumps, right-skewed, so the interval is equal-tailed under a normal plus a
gamma with the collisions' variance and third cumulant, from F₃ = Σ_x f_x³ estimated like F₂
(``sum_of_cubes``; estimators/skewed_interval.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query, QueryError
from chorus_collector.estimators.common import (
    check_candidates,
    grouped_sums,
    unpack_bits,
    walsh_hadamard,
)
from chorus_collector.estimators.skewed_interval import normal_plus_gamma_interval
from chorus_collector.results.estimates import Z95, FrequencyEstimate, FrequencyRow
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import CountMeanSketch, HadamardCountMeanSketch

__all__ = ["CountMeanSketchEstimator", "HadamardCountMeanSketchEstimator"]

MAX_HASHED_CELLS = 2_000_000  # candidates × hash functions per query (mmh3 calls, int64 cells)

VARIANCE_MODEL = ("iid-sampling plus hash collisions: the exact variance of the sketch "
                  "contributions for the campaign's fixed hashes, evaluated at the estimate, plus "
                  "the variance over random hashes of the other values' collisions, "
                  "(sum_of_squared_shares - f^2)/(k(m - 1)), estimated from the sketch; the "
                  "interval is equal-tailed under the collisions' skew (sum_of_cubed_shares)")


class CountMeanSketchEstimator(Estimator[CountMeanSketch]):
    name: ClassVar[str] = "cms"
    mechanism_type: ClassVar[MechanismTypes] = CountMeanSketch

    def state_size(self, mechanism: CountMeanSketch) -> int:
        return mechanism.k * (mechanism.m + 1)

    def map(self, mechanism: CountMeanSketch, payloads: Sequence[Any]) -> np.ndarray:
        table = np.zeros((mechanism.k, mechanism.m + 1), dtype=np.int64)
        if not payloads:
            return table.ravel()
        rows = np.fromiter((p["j"] for p in payloads), dtype=np.int64, count=len(payloads))
        table[:, 0] = np.bincount(rows, minlength=mechanism.k)
        bits = unpack_bits([p["bits"] for p in payloads], mechanism.m)
        table[:, 1:] = grouped_sums(rows, bits, mechanism.k)
        return table.ravel()

    def cell_totals(self, mechanism: CountMeanSketch, table: np.ndarray) -> np.ndarray:
        """T[j, i] = Σ_u Z_u over row j's reports for a value landing on cell i."""
        result: np.ndarray = mechanism.c * table[:, 1:] - (mechanism.c - 1) / 2 * table[:, :1]
        return result

    def contributions(self, mechanism: CountMeanSketch, cells: np.ndarray,
                      positions: np.ndarray) -> np.ndarray:
        """Σ_u Z_u for every candidate, from the ``cell_totals``; positions[s, j] = h_j(s)."""
        rows = np.arange(mechanism.k)
        result: np.ndarray = cells[rows[None, :], positions].sum(axis=1)
        return result

    def report_variance(self, mechanism: CountMeanSketch, theta: np.ndarray) -> np.ndarray:
        variance: np.ndarray = (mechanism.c**2 - 1) / 4 + theta * (1 - theta)
        return variance

    def cell_noise(self, mechanism: CountMeanSketch) -> float:
        """A = Σ_i Var[Z_i] + Σ_i g_i², summed over a row's m cells (g: the row's cell shares).

        CMS: Var[Z_i] = (c² − 1)/4 + g_i(1 − g_i) and Σ_i g_i = 1, so A = m(c² − 1)/4 + 1."""
        return mechanism.m * (mechanism.c**2 - 1) / 4 + 1

    def sum_of_squares(self, mechanism: CountMeanSketch, cells: np.ndarray,
                       sizes: np.ndarray) -> float:
        """An estimate of F₂ = Σ_x f_x² over every value, unbiased over random hashes.

        In row j, y_i = T[j, i]/N_j estimates the share g_i of the values landing on cell i, with
        E[Σ_i y_i²] = G(1 − 1/N_j) + A/N_j for G = Σ_i g_i² (``cell_noise``), and
        E_h[G] = F₂ + (1 − F₂)/m over random hashes. Averaged over the rows with two reports
        (``sizes``: each row's number of reports N_j)."""
        used = sizes >= 2
        if not used.any():
            return 0.0
        shares = cells[used] / sizes[used, None]
        sizes = sizes[used]
        squares = ((shares**2).sum(axis=1) - self.cell_noise(mechanism) / sizes) / (1 - 1 / sizes)
        m = mechanism.m
        return float(np.clip(((m * squares - 1) / (m - 1)).mean(), 0.0, 1.0))

    def two_point(self, mechanism: CountMeanSketch) -> tuple[float, float]:
        """A report's contribution Z_i to a cell takes two values: the lower one L and the
        spacing d to the upper. CMS: Z = c·bit − (c − 1)/2."""
        return -(mechanism.c - 1) / 2, mechanism.c

    def sum_of_cubes(self, mechanism: CountMeanSketch, cells: np.ndarray, sizes: np.ndarray,
                     squares: float) -> float:
        """An estimate of F₃ = Σ_x f_x³, for the skew of the collision term; unbiased over
        users and random hashes.

        In row j, the N_j reports' contributions to cell i are i.i.d. two-point, L or L + d,
        the upper with chance r_i, so their count U_i = (T[j, i] − N_j·L)/d is Bin(N_j, r_i)
        and g_i = L + d·r_i. g_i³ is a cubic in r_i, and r_i^a has the unbiased estimate
        U(U − 1)…(U − a + 1)/(N(N − 1)…(N − a + 1)). Over random hashes
        E_h[Σ_i g_i³] = F₃ + 3(F₂ − F₃)/m + (1 − 3F₂ + 2F₃)/m², solved for F₃ with F₂ from
        ``sum_of_squares``. Averaged over the rows with three reports."""
        used = sizes >= 3
        if not used.any():
            return 0.0
        size = sizes[used, None]
        lower, spacing = self.two_point(mechanism)
        upper = (cells[used] - size * lower) / spacing
        powers = [upper / size,
                  upper * (upper - 1) / (size * (size - 1)),
                  upper * (upper - 1) * (upper - 2) / (size * (size - 1) * (size - 2))]
        cubes = (lower**3 + 3 * lower**2 * spacing * powers[0] +
                 3 * lower * spacing**2 * powers[1] + spacing**3 * powers[2]).sum(axis=1)
        m = mechanism.m
        cubes_of_values = (cubes.mean() - 3 * squares / m - (1 - 3 * squares) / m**2) / \
            ((1 - 1 / m) * (1 - 2 / m))
        return float(np.clip(cubes_of_values, 0.0, squares))

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = self.mechanism_of(campaign)
        candidates = check_candidates(mechanism, query.candidates)
        if len(candidates) * mechanism.k > MAX_HASHED_CELLS:
            raise QueryError("query-too-large",
                             f"{len(candidates)} candidates × {mechanism.k} hash functions is too "
                             "large to decode in one query; query fewer candidates")
        table = state.reshape(mechanism.k, mechanism.m + 1).astype(np.float64)
        positions = np.array([[mechanism.position(v, j) for j in range(mechanism.k)]
                              for v in candidates], dtype=np.int64).reshape(-1, mechanism.k)
        cells, sizes = self.cell_totals(mechanism, table), table[:, 0]
        totals = self.contributions(mechanism, cells, positions)
        m = mechanism.m
        factor = m / (m - 1)
        frequency = factor * (totals / max(n, 1) - 1 / m)
        theta = np.clip(totals / max(n, 1), 0.0, 1.0)
        # Over random hashes the other values' collisions add Σ_{x≠v} f_x²/(k(m − 1)), which
        # does not shrink with n: F₂ from the sketch's rows, less the candidate's own share.
        squares = self.sum_of_squares(mechanism, cells, sizes)
        cubes = self.sum_of_cubes(mechanism, cells, sizes, squares)
        own = np.clip(frequency, 0.0, 1.0)
        others = np.maximum(squares - own**2, 0.0)
        collision = others / (mechanism.k * (m - 1))
        if not n:
            infinite = np.full(len(candidates), math.inf)
            std_error, low, high = infinite, -infinite, infinite
        else:
            sampling = np.sqrt(factor**2 * self.report_variance(mechanism, theta) / n)
            std_error = np.sqrt(sampling**2 + collision)
            # The collisions are rare positive jumps: their third cumulant over random hashes,
            # (m/(m − 1))³·Σ_{x≠v} f_x³·p(1 − p)(1 − 2p)/k² with p = 1/m, skews the error, and
            # the interval follows it (estimators/skewed_interval.py).
            p = 1 / m
            third = factor**3 * np.maximum(cubes - own**3, 0.0) * p * (1 - p) * (1 - 2 * p) \
                / mechanism.k**2
            low, high = normal_plus_gamma_interval(frequency, sampling, np.sqrt(collision),
                                                   third, Z95)
        rows = [FrequencyRow.from_frequency(v, float(f), float(se), n,
                                            interval=(float(lo), float(hi)))
                for v, f, se, lo, hi in zip(candidates, frequency, std_error, low, high,
                                            strict=True)]
        return FrequencyEstimate(
            campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
            rows=rows, variance_model=VARIANCE_MODEL, window=query.window,
            extra={"hash_functions": mechanism.k, "sketch_width": m,
                   "sum_of_squared_shares": squares,
                   "sum_of_cubed_shares": cubes})


class HadamardCountMeanSketchEstimator(CountMeanSketchEstimator):
    name: ClassVar[str] = "hcms"
    mechanism_type: ClassVar[MechanismTypes] = HadamardCountMeanSketch

    def map(self, mechanism: CountMeanSketch, payloads: Sequence[Any]) -> np.ndarray:
        width = mechanism.m + 1
        table = np.zeros(mechanism.k * width, dtype=np.int64)
        if not payloads:
            return table
        count = len(payloads)
        j = np.fromiter((p["j"] for p in payloads), dtype=np.int64, count=count)
        row = np.fromiter((p["l"] for p in payloads), dtype=np.int64, count=count)
        sign = 2 * np.fromiter((p["b"] for p in payloads), dtype=np.int64, count=count) - 1
        table += np.bincount(j * width, minlength=len(table))
        # Sums of ±1 are exact in float64 weights far beyond any batch size.
        table += np.rint(np.bincount(j * width + 1 + row, weights=sign,
                                     minlength=len(table))).astype(np.int64)
        return table

    def cell_totals(self, mechanism: CountMeanSketch, table: np.ndarray) -> np.ndarray:
        result: np.ndarray = mechanism.c * walsh_hadamard(table[:, 1:])  # every row at once
        return result

    def report_variance(self, mechanism: CountMeanSketch, theta: np.ndarray) -> np.ndarray:
        variance: np.ndarray = mechanism.c**2 - theta**2
        return variance

    def cell_noise(self, mechanism: CountMeanSketch) -> float:
        """HCMS: Var[Z_i] = c² − g_i², so A = m·c²."""
        return mechanism.m * mechanism.c**2

    def two_point(self, mechanism: CountMeanSketch) -> tuple[float, float]:
        """HCMS: Z_i = ±c."""
        return -mechanism.c, 2 * mechanism.c
