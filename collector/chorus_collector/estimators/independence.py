"""The Wald test of independence of two attributes from an unbiased joint, calibrated by
simulation, and the power of every independence test Chorus offers.

The residual is r = S·J − J₁⊗J₂ (S = ΣJ, J₁ and J₂ the margins of the unbiased joint J). It is
0 for every multiple of a product, so the noise in OUE's total S (SD 0.25 over 12 cells at
ε = 0.5, n = 3,000) does not enter it, and its rows and columns sum to 0 exactly: it lives in
the (k₁ − 1)(k₂ − 1)-dimensional space V spanned by Q = H₁ ⊗ H₂ (H orthonormal contrasts).
The statistic is T = zᵀ C⁻¹ z with z = Qᵀr and C = QᵀGΣGᵀQ, G = ∂r/∂J at the **null fit**
π̂₀ = a⊗b (the margins of J/S projected onto the simplex) and Σ the table's propagated
covariance.

The previous test (r = J − J₁⊗J₂, G at the estimate, the top df eigenvalues) was conservative
at small ε: 0.5–2.5% instead of 5% on OUE reports at ε = 0.5, n = 1,000–3,000 (rank df + 1
once S ≠ 1, and G at the noisy margins overstates r's variance). The new statistic's χ²
reference is anti-conservative there instead (8–13% at n = 1,000): the null set of products
is curved on the scale of the noise. So T's null distribution is taken by simulation: J* drawn
from N(π̂₀, Σ) and T recomputed on each draw, its own null fit included (a parametric
bootstrap of the studentised statistic); p = (1 + #{T* ≥ T})/(B + 1). The draws are seeded from
the table, so one answer always gives one p-value. Size at 5%: see docs/mechanisms/records.md,
with the settings. Past CALIBRATED_MAX_CELLS cells simulation costs too much per query and the
χ² reference is far off at every ε measured, so such a pair gets no test.

Power: each answer states the chance of rejecting at LEVEL against an association of Cohen's
w (w² = Σ d²/π₀) for w in EFFECTS, averaged over directions d uniform in that metric
(:func:`directions`). The Wald test's power is simulated like its p-value: the same Gaussian
draws shifted by w·d, one direction per draw, each T* recomputed and compared with the
simulated critical value the test itself uses (:func:`wald_power` for one given d). The
non-central χ² with λ = dᵀC⁻¹d, which this replaced, overstated it at small ε (0.72 against
0.42 measured for a 3 × 4 OUE pair at ε = 0.5, n = 3,000, w = 0.70): OUE's noisy total S
scales r by S², which widens T's spread under both hypotheses, and the simulated critical
value lies above χ²'s. Pearson's test on k-RR reports keeps the non-central χ² (its total is
exact, and simulation agrees), averaged over the same directions (:func:`table_power`).
"""

from __future__ import annotations

import functools
import hashlib
import math

import numpy as np
from scipy.special import chdtri, chndtr

from chorus_collector.results.record import IndependenceTest, Power

__all__ = ["CALIBRATED_MAX_CELLS", "CALIBRATION_DRAWS", "EFFECTS", "LEVEL", "calibrated_wald",
           "contrast_covariance", "contrasts", "directions", "noncentrality", "table_power",
           "wald_power"]

#: The largest joint that gets a Wald test: its simulated null distribution takes ≈ 0.2 s at
#: 64 cells (and 2 s at 100). Larger joints get no test, since the χ² reference is far off
#: there: 17–85% of 400-cell independent pairs rejected at 5% (OUE, ε = 0.5 to 4).
CALIBRATED_MAX_CELLS = 64
#: B: p < 0.05 then rejects with probability 19/400 = 0.0475 under the simulated null.
CALIBRATION_DRAWS = 399
#: The strengths of association (Cohen's w: small, medium) whose power every test reports.
EFFECTS = (0.1, 0.3)
LEVEL = 0.05
#: A margin share below this is held here when power divides by the null shares.
MIN_SHARE = 1e-6


def contrasts(k: int) -> np.ndarray:
    """Helmert's k − 1 orthonormal contrasts (rows orthogonal to 1), k − 1 × k."""
    h = np.zeros((k - 1, k))
    for i in range(1, k):
        h[i - 1, :i] = 1.0
        h[i - 1, i] = -float(i)
        h[i - 1] /= math.sqrt(i * (i + 1))
    return h


def _simplex_rows(x: np.ndarray) -> np.ndarray:
    """Each row's Euclidean projection onto the probability simplex (sort-based)."""
    ordered = -np.sort(-x, axis=1)
    cumulative = np.cumsum(ordered, axis=1) - 1.0
    ranks = np.arange(1, x.shape[1] + 1)
    positive = ordered - cumulative / ranks > 0
    last = x.shape[1] - 1 - np.argmax(positive[:, ::-1], axis=1)
    theta = cumulative[np.arange(len(x)), last] / (last + 1)
    projected: np.ndarray = np.maximum(x - theta[:, None], 0.0)
    return projected


def _null_fit(joints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The margins (a, b) of each joint divided by its total, on the simplex: (B, k₁), (B, k₂).
    A total ≤ 0 (possible only in pure noise) gives uniform margins."""
    total = joints.sum(axis=(1, 2))
    scale = np.where(total > 0, total, 1.0)[:, None]
    first = np.where(total[:, None] > 0, joints.sum(axis=2) / scale, 1.0)
    second = np.where(total[:, None] > 0, joints.sum(axis=1) / scale, 1.0)
    return _simplex_rows(first), _simplex_rows(second)


def _statistics(joints: np.ndarray, v: np.ndarray, u: np.ndarray, q: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """T for each joint in ``joints`` (B, k₁, k₂), and C of the last one; Σ = diag(v) − UUᵀ
    over the flattened cells, q = Q (K × df)."""
    statistics, c, _, _ = _statistics_and_fits(joints, v, u, q)
    return statistics, c


def _statistics_and_fits(joints: np.ndarray, v: np.ndarray, u: np.ndarray, q: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_statistics` and the null fits (a, b) it computed on the way."""
    b_count, k1, k2 = joints.shape
    size = k1 * k2
    total = joints.sum(axis=(1, 2))
    residual = (total[:, None, None] * joints
                - np.einsum("bi,bj->bij", joints.sum(axis=2), joints.sum(axis=1)))
    z = residual.reshape(b_count, size) @ q
    first, second = _null_fit(joints)
    c = _contrast_covariance(first, second, v, u, q)
    solved = np.linalg.solve(c, z[..., None])[..., 0]
    return np.einsum("bd,bd->b", z, solved), c[-1], first, second


def _contrast_covariance(first: np.ndarray, second: np.ndarray, v: np.ndarray, u: np.ndarray,
                         q: np.ndarray) -> np.ndarray:
    """QᵀGΣGᵀQ at each null fit a⊗b, G e = e + (a⊗b)·Σe − e₁⊗b − a⊗e₂, built from that
    structure: M = QᵀG has entries Q[(l, m), d] + Σ_ij Q[(i, j), d]·a_i·b_j
    − Σ_j Q[(l, j), d]·b_j − Σ_i Q[(i, m), d]·a_i, in O(df·K) per fit."""
    b_count, k1 = first.shape
    k2 = second.shape[1]
    grid = q.reshape(k1, k2, -1)
    rows = np.einsum("ljd,bj->bdl", grid, second)
    columns = np.einsum("imd,bi->bdm", grid, first)
    centre = np.einsum("bdl,bl->bd", rows, first)
    m = (q.T[None, :, :] + centre[:, :, None]
         - (rows[:, :, :, None] + columns[:, :, None, :]).reshape(b_count, -1, k1 * k2))
    mu = m @ u
    c: np.ndarray = (m * v) @ np.transpose(m, (0, 2, 1)) - mu @ np.transpose(mu, (0, 2, 1))
    # Symmetric but for rounding, which np.linalg.solve would carry into T.
    symmetric: np.ndarray = (c + np.transpose(c, (0, 2, 1))) / 2
    return symmetric


@functools.lru_cache(maxsize=256)
def _basis(k1: int, k2: int) -> np.ndarray:
    # Built once per shape (every test and every simulated power asks for it), read-only
    # since it is shared.
    basis: np.ndarray = np.kron(contrasts(k1), contrasts(k2)).T
    basis.flags.writeable = False
    return basis


class _Calibration:
    """The seeded Gaussian draws of a joint's parametric bootstrap: T* under the fitted
    independent null, and T* under that null shifted by an association, both from the same
    standard normal draws (common random numbers), so a power is read against the very
    critical value the test uses."""

    def __init__(self, f: np.ndarray, v: np.ndarray, u: np.ndarray) -> None:
        if f.size > CALIBRATED_MAX_CELLS:
            raise ValueError(f"a joint of {f.size} cells has no calibrated test (at most "
                             f"{CALIBRATED_MAX_CELLS})")
        self.shape = f.shape
        k1, k2 = f.shape
        self.df = (k1 - 1) * (k2 - 1)
        self.q = _basis(k1, k2)
        self.v, self.u = v.reshape(f.size), u.reshape(f.size, -1)
        # The observed statistic's null fit is the one the draws are centred at.
        observed, self.c, first, second = _statistics_and_fits(f[None], self.v, self.u, self.q)
        self.statistic = float(observed[0])
        self.first, self.second = first[0], second[0]
        covariance = np.diag(self.v) - self.u @ self.u.T
        values, vectors = np.linalg.eigh((covariance + covariance.T) / 2)
        root = vectors * np.sqrt(np.maximum(values, 0.0))
        self.rng = np.random.default_rng(_seed(f, v))
        self.noise = self.rng.standard_normal((CALIBRATION_DRAWS, f.size)) @ root.T
        self.centre = np.outer(self.first, self.second)
        self.null = self.simulate(np.zeros(f.shape))
        # p = (1 + #{T* ≥ T})/(B + 1) < LEVEL exactly when T exceeds the r-th largest T*.
        rank = math.ceil(LEVEL * (CALIBRATION_DRAWS + 1)) - 1
        self.critical = float(np.sort(self.null)[::-1][rank - 1])

    def simulate(self, shifts: np.ndarray) -> np.ndarray:
        """T* on the draws centred at the null fit plus ``shifts`` (one k₁ × k₂ association,
        or one per draw)."""
        centre = (self.centre + shifts).reshape(-1, self.centre.size)
        draws = (centre + self.noise).reshape(CALIBRATION_DRAWS, *self.shape)
        statistics, _ = _statistics(draws, self.v, self.u, self.q)
        return statistics

    def p_value(self) -> float:
        return (1 + int(np.sum(self.null >= self.statistic))) / (CALIBRATION_DRAWS + 1)

    def power_against(self, association: np.ndarray) -> float:
        """The share of draws shifted by ``association`` (one, or one per draw) that the test
        rejects."""
        return float(np.mean(self.simulate(association) > self.critical))

    def powers(self, effects: tuple[float, ...] = EFFECTS) -> list[Power]:
        """:func:`power_against` for associations of each Cohen's w, one random direction per
        draw (:func:`directions`): the power averaged over the directions."""
        unit = directions(self.first, self.second, self.rng, CALIBRATION_DRAWS)
        return [Power(w, self.power_against(w * unit)) for w in effects]


def calibrated_wald(f: np.ndarray, v: np.ndarray, u: np.ndarray, *,
                    with_power: bool = True) -> IndependenceTest:
    """The test of the module docstring for an unbiased k₁ × k₂ joint ``f`` with covariance
    diag(v) − UUᵀ (``v`` shaped like ``f``, ``u`` with one more trailing axis). Its power
    costs twice the p-value's simulation; ``with_power=False`` leaves it out (size studies)."""
    calibration = _Calibration(f, v, u)
    return IndependenceTest(calibration.statistic, calibration.df, calibration.p_value(),
                            "wald statistic of S·J − J₁⊗J₂ at the null fit, p-value from "
                            f"{CALIBRATION_DRAWS} simulated joints under the fitted "
                            "independent null (parametric bootstrap)",
                            calibration.powers() if with_power else [])


def wald_power(f: np.ndarray, v: np.ndarray, u: np.ndarray, association: np.ndarray) -> float:
    """The calibrated test's power at the joint ``f`` (covariance diag(v) − UUᵀ) against the
    k₁ × k₂ ``association`` (rows and columns summing to 0) added to its independent fit, by
    the same simulation as its p-value."""
    return _Calibration(f, v, u).power_against(association)


def directions(first: np.ndarray, second: np.ndarray, rng: np.random.Generator,
               count: int) -> np.ndarray:
    """``count`` associations d (count × k₁ × k₂, rows and columns summing to 0) of Cohen's
    w = 1 at π₀ = first⊗second, their directions uniform in that metric: d = Qz with
    z = L⁻ᵀg/|g|, g standard normal and LLᵀ = P = Qᵀ diag(π₀)⁻¹ Q, so zᵀPz = Σd²/π₀ = 1."""
    k1, k2 = len(first), len(second)
    q = _basis(k1, k2)
    first = np.maximum(first, MIN_SHARE) / np.maximum(first, MIN_SHARE).sum()
    second = np.maximum(second, MIN_SHARE) / np.maximum(second, MIN_SHARE).sum()
    metric = (q.T / np.outer(first, second).ravel()) @ q
    lower = np.linalg.cholesky(metric)
    g = rng.standard_normal((count, q.shape[1]))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    z = np.linalg.solve(lower.T, g.T).T
    unit: np.ndarray = (z @ q.T).reshape(count, k1, k2)
    return unit


def contrast_covariance(f: np.ndarray, v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """C = QᵀGΣGᵀQ at the null fit of the joint ``f`` (the covariance of z = Qᵀr)."""
    k1, k2 = f.shape
    first, second = _null_fit(f[None])
    c: np.ndarray = _contrast_covariance(first, second, v.reshape(f.size),
                                         u.reshape(f.size, -1), _basis(k1, k2))[0]
    return c


def _seed(f: np.ndarray, v: np.ndarray) -> int:
    return int.from_bytes(hashlib.sha256(f.tobytes() + v.tobytes()).digest()[:8], "big")


def table_power(f: np.ndarray, v: np.ndarray, u: np.ndarray,
                effects: tuple[float, ...] = EFFECTS) -> list[Power]:
    """The power at LEVEL of a test whose statistic is χ²((k₁ − 1)(k₂ − 1)) under H₀ (Pearson's
    on k-RR reports) against associations of each Cohen's w in ``effects``: the non-central χ²
    with λ = w²·dᵀC⁻¹d averaged over CALIBRATION_DRAWS directions d (:func:`directions`,
    seeded from the table), C at the null fit of the unbiased joint ``f`` with covariance
    diag(v) − UUᵀ. Measured within 1.3 binomial SEs of simulation at ε = 0.5–2 (the docs)."""
    k1, k2 = f.shape
    df = (k1 - 1) * (k2 - 1)
    first, second = _null_fit(f[None])
    c = contrast_covariance(f, v, u)
    unit = directions(first[0], second[0], np.random.default_rng(_seed(f, v)),
                      CALIBRATION_DRAWS)
    z = unit.reshape(CALIBRATION_DRAWS, -1) @ _basis(k1, k2)
    per_unit = np.einsum("bd,bd->b", z, np.linalg.solve(c, z.T).T)
    critical = float(chdtri(df, LEVEL))
    return [Power(w, float(np.mean(1.0 - chndtr(critical, df, w * w * per_unit))))
            for w in effects]


def noncentrality(c: np.ndarray, association: np.ndarray) -> float:
    """λ = dᵀC⁻¹d for an association d (k₁ × k₂, rows and columns summing to 0)."""
    k1, k2 = association.shape
    z = association.ravel() @ _basis(k1, k2)
    return float(z @ np.linalg.solve(c, z))
