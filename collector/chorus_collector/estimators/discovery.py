"""PEM and TreeHist: the walk down the prefixes, at query time, over a count table.

The statistic is a count table: for each group (a prefix length), cohort (a public hash
function) and bucket, how many reports said that bucket; TreeHist adds one table of the
whole-string reports. A query walks it:

1. at the first length every prefix that can start a value is a candidate; at each later one,
   every survivor extended by all 2^η continuations that still can (over an alphabet, every
   character of it: 27 for [a-z] where bytes have 256);
2. a candidate's frequency among the group's installs is OLH's f̂ = (S/n_g − 1/k)/(p − 1/k),
   S the reports whose cohort hashes it to the bucket they name; the ``keep`` largest
   positive ones survive (MECHANISMS-2.md §3.1);
3. the full-length survivors that are strings at all (valid UTF-8 or characters of the
   domain's alphabet, then only padding) are estimated
   in the *final* table: PEM's estimation group, which the walk never read, or TreeHist's
   whole-string reports. That fit is joint (weighted least squares over cohort × bucket), so
   the found values' hash collisions with one another do not bias it, and its covariance is
   the sandwich of the multinomial cell counts;
4. each value fit is flagged ``detected`` by Holm's one-sided z-tests at family-wise error
   :data:`DETECTION_ALPHA` over every value the walk found (``values_tested``);
5. the answer lists the ``top`` of them by the walk's last estimates (not by the final ones,
   which would bias the listed values upward), in the order of their final estimates.

With candidates, a query estimates them in the final table (the second stage), flags
included; what the walk finds is fit beside them (and not reported), so a frequent value
missing from the list does not bias the candidates its hash collides with.
"""

from __future__ import annotations

import functools
import hashlib
import math
import threading
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np
from scipy import sparse

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query, QueryError
from chorus_collector.estimators.common import check_candidates
from chorus_collector.results.estimates import FrequencyEstimate, frequency_rows
from chorus_shared import prefix_hash
from chorus_shared.campaign import Campaign
from chorus_shared.domain import OpenStrings
from chorus_shared.mechanisms.discovery import (
    DETECTION_ALPHA,
    PEM,
    PrefixDiscovery,
    TreeHist,
    could_start,
    olh_variance,
)

__all__ = ["WALKS", "PEMEstimator", "TreeHistEstimator", "WalkCache", "buckets_of",
           "holm_detected", "joint_fit"]

VARIANCE_MODEL = ("multinomial cell counts of the final table, propagated through a joint "
                  "weighted least-squares fit of the values; unbiased on average over the "
                  "public hash functions, and exactly so with respect to the other values fit")
MAX_SECOND_STAGE = 1000
#: How often a noise estimate may enter the heavy values whose collisions are cleared
#: (:func:`marginal_estimates`), per step of the walk.
HEAVY_ALPHA = 0.05
#: Candidates hashed and summed at a time: bounds the walk's (candidates × cohorts)
#: temporaries to ~8 MiB each, and keeps them in cache.
BLOCK = 2048

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = (np.uint64(s) for s in (30, 27, 31, 32))


def _mix64_in_place(z: np.ndarray) -> None:
    """SplitMix64's finalizer (``prefix_hash.mix64``) on every element, in place: the walk mixes
    candidates × cohorts words, and fresh temporaries for each operation cost as much."""
    z ^= z >> _S30
    z *= _C1
    z ^= z >> _S27
    z *= _C2
    z ^= z >> _S31


def _mix64(z: np.ndarray) -> np.ndarray:
    result = z.copy()
    _mix64_in_place(result)
    return result


def _words(prefixes: Sequence[int], s: int, m: int) -> np.ndarray:
    """Left-aligned big-endian 64-bit words of s-bit prefixes (one row per prefix)."""
    width = 64 * ((m + 63) // 64)
    if width == 64:
        # One word (values of up to 8 bytes, the common case): numpy shifts them all at once,
        # the same words as the bytes below without a Python call per prefix.
        one: np.ndarray = np.fromiter(prefixes, dtype=np.uint64, count=len(prefixes))
        return (one << np.uint64(width - s)).reshape(len(prefixes), 1)
    data = b"".join((p << (width - s)).to_bytes(width // 8, "big") for p in prefixes)
    return np.frombuffer(data, dtype=">u8").astype(np.uint64).reshape(len(prefixes),
                                                                      width // 64)


def _prefix_mask(s: int, m: int) -> np.ndarray:
    """Word masks that keep the first s bits of a left-aligned m-bit string."""
    width = 64 * ((m + 63) // 64)
    keep = ((1 << s) - 1) << (width - s)
    return np.array([(keep >> (width - 64 * (i + 1))) & prefix_hash.MASK
                     for i in range(width // 64)], dtype=np.uint64)


def report_buckets(mechanism: PrefixDiscovery, values: Sequence[int], groups: np.ndarray,
                   cohorts: np.ndarray, *, hash_group: np.ndarray | None = None,
                   lengths: Sequence[int] | None = None, bins: int | None = None) -> np.ndarray:
    """The bucket each report's value hashes to: value i's prefix of the length of its group,
    under its cohort's function (simulation: one hash per report, all in numpy)."""
    lengths = mechanism.lengths if lengths is None else lengths
    hash_group = groups if hash_group is None else hash_group
    words = _words(values, mechanism.m, mechanism.m)
    masks = np.stack([_prefix_mask(s, mechanism.m) for s in lengths])
    seeds = np.array([prefix_hash.seed(mechanism.salt, g, s) for g, s in enumerate(lengths)]
                     + [prefix_hash.seed(mechanism.salt, len(lengths), mechanism.m)],
                     dtype=np.uint64)
    z = seeds[hash_group]
    row_masks = masks[groups]
    for t in range(words.shape[1]):
        z = _mix64(z ^ (words[:, t] & row_masks[:, t]))
    steps = ((cohorts.astype(np.uint64) + np.uint64(1)) * np.uint64(prefix_hash.COHORT_STEP))
    mixed = _mix64(z ^ steps)
    width = np.uint64(mechanism.bins if bins is None else bins)
    result: np.ndarray = (((mixed >> _S32) * width) >> _S32).astype(np.int64)
    return result


def buckets_of(mechanism: PrefixDiscovery, group: int, s: int, prefixes: Sequence[int],
               bins: int) -> np.ndarray:
    """``prefix_hash`` for many prefixes at once: buckets[i, cohort], as int16 (bins ≤
    :data:`MAX_BINS`): a step of the walk holds up to 131,072 candidates × 512 cohorts."""
    words = _words(prefixes, s, mechanism.m)
    z = np.full(len(prefixes), prefix_hash.seed(mechanism.salt, group, s), dtype=np.uint64)
    for t in range(words.shape[1]):
        z = _mix64(z ^ words[:, t])
    steps = np.array([((j + 1) * prefix_hash.COHORT_STEP) & prefix_hash.MASK
                      for j in range(mechanism.cohorts)], dtype=np.uint64)
    result = np.empty((len(prefixes), mechanism.cohorts), dtype=np.int16)
    width = np.uint64(bins)
    for start in range(0, len(prefixes), BLOCK):
        mixed = z[start:start + BLOCK, None] ^ steps[None, :]
        _mix64_in_place(mixed)
        mixed >>= _S32
        mixed *= width
        mixed >>= _S32
        result[start:start + BLOCK] = mixed
    return result


def _bucket_sums(cells: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """Σ_j cells[j, buckets[i, j]] for each candidate i, a block of candidates at a time so
    that no (candidates × cohorts) array of floats is ever whole."""
    cohorts, bins = cells.shape
    flat = cells.ravel()
    offsets = np.arange(cohorts, dtype=np.int64) * bins
    result = np.empty(len(buckets), dtype=np.float64)
    for start in range(0, len(buckets), BLOCK):
        result[start:start + BLOCK] = flat[buckets[start:start + BLOCK] + offsets].sum(axis=1)
    return result


def heavy_z(candidates: int) -> float:
    """The z that the largest of ``candidates`` noise estimates exceeds with probability
    :data:`HEAVY_ALPHA` (Bonferroni): a candidate above it is frequent, not noise."""
    return NormalDist().inv_cdf(1 - HEAVY_ALPHA / candidates)


def _keep_probability(epsilon: float, bins: int) -> tuple[float, float]:
    e = math.exp(epsilon)
    return e / (e + bins - 1), 1 / (e + bins - 1)


def marginal_estimates(table: np.ndarray, buckets: np.ndarray, epsilon: float,
                       heavy: int = 0) -> np.ndarray:
    """OLH's f̂ for each candidate from one group's (cohorts × bins) table.

    With ``heavy`` > 0, each estimate is then cleared of its hash collisions with the
    ``heavy`` largest ones that no noise estimate reaches (:func:`heavy_z`):
    E[f̂_v] = f_v + Σ_w f_w (c_vw − 1/k)/(1 − 1/k), c_vw the share of
    reports whose cohort hashes v and w alike, with the f_w of the heavy ones fit jointly
    (:func:`joint_fit`), so that the heavy ones come out exactly as that fit has them. Without
    it the collisions with a few very frequent prefixes add noise as large as OLH's own.
    The heavy ones must be fit jointly, not taken at their own estimates (one Jacobi step):
    some of the largest estimates are themselves collisions with a very frequent prefix, and
    subtracting their collisions again took a value at 8% down to 3.5% (PEM, 64 cohorts,
    n = 2·10⁴: lost by the walk in 6 runs of 300).
    """
    bins = table.shape[1]
    sizes = table.sum(axis=1).astype(np.float64)
    n = sizes.sum()
    if n == 0:
        return np.zeros(len(buckets))
    support = _bucket_sums(table, buckets)
    p, _ = _keep_probability(epsilon, bins)
    estimates: np.ndarray = (support / n - 1 / bins) / (p - 1 / bins)
    if heavy <= 0 or len(estimates) < 2:
        return estimates
    top = np.argsort(-estimates, kind="stable")[:heavy]
    # Only those no noise estimate reaches: a noise candidate among them is one whose hash
    # shares many buckets with a frequent one (that is what raised its estimate), and the
    # joint fit then splits the frequent one's reports between them, biasing the frequent
    # one down (−0.13 standard errors on the true prefixes of a walk, Zipf 1.5 at ε = 1).
    floor = heavy_z(len(estimates)) * math.sqrt(olh_variance(epsilon, bins) / n)
    top = top[estimates[top] > floor]
    if len(top) == 0:
        return estimates
    fitted = joint_fit(table, buckets[top], epsilon).frequency
    # Σ_w f_w·1[h_j(v) = h_j(w)] is a lookup in a (cohorts × bins) table of the heavy
    # values per bucket: O(candidates × cohorts), like the support itself.
    by_bucket = _cell_totals(buckets[top], fitted, bins)
    collided = _bucket_sums(by_bucket * (sizes / n)[:, None], buckets)
    correction = collided - fitted.sum() / bins
    # A heavy candidate's own term (c_vv = 1) is not a collision.
    correction[top] -= (1 - 1 / bins) * fitted
    result: np.ndarray = estimates - correction / (1 - 1 / bins)
    return result


def _cell_totals(buckets: np.ndarray, values: np.ndarray, bins: int) -> np.ndarray:
    """(cohorts × bins): Σ_v values[v]·1[h_j(v) = y], each cell's terms added from zero in the
    order of the values, as ``np.add.at`` added them (bincount does the same additions in
    the same order at a fraction of its cost: 0.8 ms of a fit's 3 at 13 values × 1,024)."""
    cohorts = buckets.shape[1]
    cells = np.arange(cohorts) * bins + buckets  # value-major, as add.at's broadcast indices
    totals = np.bincount(cells.ravel(), weights=np.repeat(values, cohorts),
                         minlength=cohorts * bins)
    result: np.ndarray = totals.reshape(cohorts, bins)
    return result


@dataclass(frozen=True)
class JointFit:
    frequency: np.ndarray
    covariance: np.ndarray
    reports: int


def joint_fit(table: np.ndarray, buckets: np.ndarray, epsilon: float) -> JointFit:
    """Weighted least squares of the candidates' frequencies on one (cohorts × bins) table.

    Y[j, y] = (T[j, y]/n_j − 1/k)/(p − q) = Σ_v f_v (1[h_j(v) = y] − 1/k) + noise, weights
    n_j; the rest of the population spreads as 1/k per bucket on average over the hashes.
    Without collisions between candidates this is OLH's marginal estimator exactly.

    The covariance is that of cohort j's multinomial counts, n_j·(π_j[y]·1[y = y'] −
    π_j[y]·π_j[y']), at the *fitted* bucket shares π_j[y] = 1/k + (p − q)·Σ_v f̂_v·(1[h_j(v)
    = y] − 1/k). The observed shares T[j, y]/n_j would put n_j − 1 where n_j belongs (the
    plug-in multinomial variance is biased by (n_j − 1)/n_j, and a cohort of one report
    gives none): with hundreds of cohorts and a few reports in each, as in a short window,
    that understated the standard errors by 10–20% (the χ² calibration in
    tests/mechanisms/test_discovery.py).
    """
    cohorts, bins = table.shape
    count = buckets.shape[0]
    p, q = _keep_probability(epsilon, bins)
    gap = p - q
    sizes = table.sum(axis=1).astype(np.float64)
    n = float(sizes.sum())
    if n == 0 or count == 0:
        return JointFit(np.zeros(count), np.zeros((count, count)), int(n))
    rows = np.arange(cohorts)[None, :]
    b = ((table[rows, buckets] - sizes[None, :] / bins) / gap).sum(axis=1)
    # agree[v, w] = Σ_j n_j·1[h_j(v) = h_j(w)]: a product of sparse one-hot (value × cell)
    # matrices rather than a loop over the cohorts (0.7 s → ms for 100 values × 512), or for
    # few values the same sums from the list of shared cells (_SharedCells).
    cell_sizes = np.repeat(sizes, bins)
    shared = _SharedCells(buckets, bins) if count * count * cohorts <= DENSE_PAIRS else None
    if shared is None:
        cells = (np.arange(cohorts)[None, :] * bins + buckets).ravel()
        onehot = sparse.csr_matrix((np.ones(count * cohorts),
                                    (np.repeat(np.arange(count), cohorts), cells)),
                                   shape=(count, cohorts * bins))
        agree = _gram(onehot, cell_sizes)
    else:
        agree = shared.sums(cell_sizes)
    design = agree - n / bins
    inverse = np.linalg.pinv(design, hermitian=True)  # symmetric: eigh, not an SVD
    frequency = inverse @ b
    # Each bucket's fitted share of its cohort's reports, then each value's: π_j[h_j(v)].
    load = _cell_totals(buckets, frequency, bins)
    share = np.clip(1 / bins + gap * (load - frequency.sum() / bins), 0, 1)  # π_j[y]
    fitted = share[rows, buckets]
    # first[v, w] = Σ_j n_j·π_j[h_j(v)]·1[h_j(v) = h_j(w)]: one weight per cell, like n_j above.
    cell_weights = cell_sizes * share.ravel()
    first = _gram(onehot, cell_weights) if shared is None else shared.sums(cell_weights)
    weighted = fitted * np.sqrt(sizes)[None, :]
    cov_b = (first - weighted @ weighted.T) / gap**2
    return JointFit(frequency, inverse @ cov_b @ inverse.T, int(n))


def _gram(onehot: sparse.csr_matrix, weights: np.ndarray) -> np.ndarray:
    """onehot · diag(weights) · onehotᵀ, dense."""
    product = (onehot @ sparse.diags(weights) @ onehot.T).toarray()
    result: np.ndarray = np.asarray(product, dtype=np.float64)
    return result


#: Up to this many (value, value, cohort) comparisons, :func:`joint_fit` finds the shared
#: cells by comparing every pair of values in every cohort; beyond it the sparse product
#: (:func:`_gram`) is cheaper, as it touches only the shared cells (measured: 2.5–5× faster
#: at 8–13 values × 64–1,024 cohorts, 1.4× slower at 40 × 512, ~820,000 comparisons).
DENSE_PAIRS = 1 << 18


class _SharedCells:
    """Every (v, w, j) with h_j(v) = h_j(w) of a (values × cohorts) bucket array, for few
    values: :func:`_gram`'s sums without scipy.sparse, whose per-call overhead (~1 ms for two
    products and their conversions) was most of a walk step's fit of 8 values × 64 cohorts.

    :meth:`sums` adds each pair's terms in the sparse product's order, from the last cohort
    to the first (its first product lists each row's cells backwards, and the second sums a
    row in that order), so that the fit is the same to the last bit
    (tests/mechanisms/test_discovery_fast_paths.py holds the two equal)."""

    def __init__(self, buckets: np.ndarray, bins: int) -> None:
        count, cohorts = buckets.shape
        # Each value's cell in each cohort, the last cohort first: equal cells are the same
        # cohort's same bucket.
        cells = np.arange(cohorts - 1, -1, -1) * bins + buckets[:, ::-1]
        # Row-major: by pair (v·count + w), then by cohort from the last to the first.
        flat = np.flatnonzero(cells[:, None, :] == cells[None, :, :])
        self.count = count
        self.pair, back = np.divmod(flat, cohorts)
        self.cells = cells.ravel()[self.pair // count * cohorts + back]

    def sums(self, cell_weights: np.ndarray) -> np.ndarray:
        """Σ_j weights[j·bins + h_j(v)]·1[h_j(v) = h_j(w)]: ``_gram(onehot, weights)``."""
        # bincount adds its weights in the order given, from zero, as the sparse product does.
        total = np.bincount(self.pair, weights=cell_weights[self.cells],
                            minlength=self.count * self.count)
        result: np.ndarray = total.reshape(self.count, self.count)
        return result


def holm_detected(frequency: np.ndarray, std_error: np.ndarray,
                  alpha: float = DETECTION_ALPHA) -> np.ndarray:
    """Holm's step-down one-sided z-tests of f > 0: family-wise error ≤ alpha."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std_error > 0, frequency / std_error, -np.inf)
    p_values = np.array([0.5 * math.erfc(v / math.sqrt(2)) if math.isfinite(v) else 1.0
                         for v in z.tolist()])
    detected = np.zeros(len(z), dtype=bool)
    for rank, index in enumerate(np.argsort(p_values, kind="stable")):
        if p_values[index] > alpha / (len(z) - rank):
            break
        detected[index] = True
    return detected


@functools.lru_cache(maxsize=8)
def first_candidates(domain: OpenStrings, s: int) -> tuple[int, ...]:
    """Every s-bit prefix that could start a value: the first step's candidates, the same for
    every query over the domain (65,536 checked once, not per query)."""
    return tuple(c for c in range(1 << s) if could_start(domain, c, s))


@functools.lru_cache(maxsize=32)
def _alphabet_extensions(domain: OpenStrings, extra: int) -> tuple[int, ...]:
    """Over an alphabet: the ``extra``-bit continuations (whole characters, then only padding)
    that a prefix not ending in padding can take; one ending in padding takes only padding."""
    return tuple(e for e in range(1 << extra) if could_start(domain, e, extra))


#: Steps of up to this many bits have their extensions cached per prefix: at most 256 each,
#: so the 1,024 cached prefixes hold a few MB (a 16-bit step's 65,536 would hold gigabytes).
CACHED_EXTRA_BITS = 8


def _byte_extensions(domain: OpenStrings, prefix: int, s: int, extra: int) -> tuple[int, ...]:
    """Over bytes: the (s + extra)-bit extensions of one s-bit prefix that could start a
    value."""
    return tuple(c for c in ((prefix << extra) | e for e in range(1 << extra))
                 if could_start(domain, c, s + extra))


#: Cached because the walk keeps mostly the same prefixes from one query to the next, and
#: each costs 2^extra UTF-8 checks (a step of 8 bits: 256).
_cached_byte_extensions = functools.lru_cache(maxsize=1024)(_byte_extensions)


def extensions(mechanism: PrefixDiscovery, prefixes: Sequence[int], s: int,
               extra: int) -> list[int]:
    """Every (s + extra)-bit prefix that extends one of the s-bit ``prefixes`` and could still
    start a value (the walk's next candidates)."""
    domain, alphabet = mechanism.domain, mechanism.domain.alphabet
    if alphabet is None:
        grow = _cached_byte_extensions if extra <= CACHED_EXTRA_BITS else _byte_extensions
        return [c for p in prefixes for c in grow(domain, p, s, extra)]
    tails = _alphabet_extensions(domain, extra)
    pad = (1 << mechanism.symbol_bits) - 1
    grown = [(p << extra) | e for p in prefixes for e in (tails if p & pad else (0,))]
    if len({len(c.encode("utf-8")) for c in alphabet}) > 1:
        # Characters of several widths: the byte limit depends on the whole prefix.
        grown = [c for c in grown if could_start(domain, c, s + extra)]
    return grown


@dataclass(frozen=True)
class _Step:
    prefix_bits: int
    reports: int
    candidates: int
    kept: int

    def to_json(self) -> dict[str, int]:
        return {"prefix_bits": self.prefix_bits, "reports": self.reports,
                "candidates": self.candidates, "kept": self.kept}


_Walk = tuple[tuple[int, ...], tuple[_Step, ...]]


class WalkCache:
    """The walks this process has done, by what alone decides them: the estimator, the
    mechanism (every parameter of the config) and the bytes of the walk's count tables.

    A walk costs ~0.4 s of CPU at the demo's 512 cohorts, and one dashboard page of a
    discovery campaign asks for about a dozen (its window, the series' whole window, each
    point's and each compared window's re-estimate: 29 s on the demo's data). Keyed by the
    tables' contents, an entry is never stale: a fold that adds reports to a window changes
    its tables, so the next page walks again; a fold that only moves reports from the
    unfolded tail into the statistics leaves the window's sum, and its walk, as they were.
    Bounded (least recently used out); each entry is a few dozen integers.
    """

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, _Walk] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable, walk: Callable[[], _Walk]) -> _Walk:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
            self.misses += 1
        result = walk()  # outside the lock: other queries go on meanwhile
        with self._lock:
            self._entries[key] = result
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return result

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


#: This process's walks (every server worker has its own).
WALKS = WalkCache()


class DiscoveryEstimator(Estimator[PrefixDiscovery]):
    """The walk and the final fit; subclasses say where the tables are."""

    name: ClassVar[str]
    mechanism_type: ClassVar[MechanismTypes] = PrefixDiscovery

    def walk_tables(self, mechanism: PrefixDiscovery, state: np.ndarray) -> np.ndarray:
        """(walk groups, cohorts, bins) counts."""
        walk = len(self.walk_lengths(mechanism))
        size = walk * mechanism.cohorts * mechanism.bins
        return state[:size].reshape(walk, mechanism.cohorts, mechanism.bins)

    def walk_lengths(self, mechanism: PrefixDiscovery) -> tuple[int, ...]:
        return mechanism.lengths

    def walk_epsilon(self, mechanism: PrefixDiscovery) -> float:
        return mechanism.epsilon

    @abstractmethod
    def final_table(self, mechanism: PrefixDiscovery,
                    state: np.ndarray) -> tuple[np.ndarray, int, int, float]:
        """(cohorts × bins counts, the hash's group index, bins, ε) of the final oracle."""

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate:
        mechanism = self.mechanism_of(campaign)
        table, group, bins, epsilon = self.final_table(mechanism, state)
        warnings: list[str] = []
        if query.candidates:  # checked before the walk's work
            values = check_candidates(mechanism, query.candidates)
            if len(values) > MAX_SECOND_STAGE:
                raise QueryError("too-many-candidates",
                                 f"at most {MAX_SECOND_STAGE} candidates per re-estimate")
        found, steps = self.walk(mechanism, state)
        decoded = [(mechanism.decode(bits), bits) for bits in found]
        pairs = [(text, bits) for text, bits in decoded if text is not None]
        if query.candidates:
            prefixes = [mechanism.encode(v) for v in values]
            # What the walk found is fit beside the candidates and not reported: a frequent
            # value left off the list would otherwise bias every candidate that its hash
            # shares buckets with (a fixed hash family is unbiased only on average over the
            # salt), by about f/√(cohorts·(bins − 1)): 0.3 × 0.016 at 512 cohorts, twice the
            # standard error at 10⁶ reports, and `detected` would flag values nobody holds.
            listed = set(prefixes)
            nuisance = [bits for _, bits in pairs if bits not in listed]
            stage = "re-estimate"
        else:
            values, prefixes = [t for t, _ in pairs], [b for _, b in pairs]
            nuisance = []
            stage = "discovery"
            if any(step.reports == 0 for step in steps):
                warnings.append("a group of the walk has no reports in this window: nothing "
                                "could be discovered past it")
        fitted = prefixes + nuisance
        buckets = buckets_of(mechanism, group, mechanism.m, fitted, bins) if fitted \
            else np.zeros((0, mechanism.cohorts), dtype=np.int64)
        fit = joint_fit(table, buckets, epsilon)
        frequency = fit.frequency[:len(prefixes)]
        std_error = np.sqrt(np.clip(np.diag(fit.covariance)[:len(prefixes)], 0, None))
        # Holm over every value estimated, before the rows are cut to the ``top``: testing
        # only those tested the largest of the noise at a threshold meant for fewer values
        # (15% of runs flagged a value nobody holds, for a family-wise 5%).
        detected = holm_detected(frequency, std_error)
        # The answer's values: a discovery keeps the ``top`` survivors by the walk's own last
        # estimates (``walk`` returns them in that order). Chosen without the final table,
        # their final estimates stay unbiased; picking them by the final estimates favoured
        # the survivors whose noise there was high (a winner's curse: the noise values listed
        # came out ~0.8 standard errors high).
        chosen = np.arange(min(len(values), mechanism.top) if stage == "discovery"
                           else len(values))
        order = chosen[np.argsort(-frequency[chosen], kind="stable")]
        rows = frequency_rows([values[i] for i in order], frequency[order],
                              std_error[order], n)
        for row, flag in zip(rows, detected[order].tolist(), strict=True):
            row.detected = flag
        if fit.reports == 0:
            warnings.append("the final oracle has no reports in this window")
        return FrequencyEstimate(
            campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
            rows=rows, variance_model=VARIANCE_MODEL, window=query.window,
            extra={"discovery": {
                "stage": stage, "algorithm": mechanism.name,
                "steps": [s.to_json() for s in steps],
                "final_reports": fit.reports, "values_tested": len(values),
                "also_fit": len(nuisance),
                "detection": {"method": "holm", "alpha": DETECTION_ALPHA,
                              "family_wise": True}}},
            warnings=warnings)

    def walk(self, mechanism: PrefixDiscovery,
             state: np.ndarray) -> tuple[list[int], list[_Step]]:
        """The full-length prefixes that survive every step, with each step's record: from
        :data:`WALKS` when these tables were walked before."""
        tables = np.ascontiguousarray(self.walk_tables(mechanism, state))
        key = (self.name, mechanism, hashlib.blake2b(tables.data, digest_size=20).digest())
        survivors, steps = WALKS.get(key, lambda: self._walk(mechanism, tables))
        return list(survivors), list(steps)

    def _walk(self, mechanism: PrefixDiscovery, tables: np.ndarray) -> _Walk:
        lengths = self.walk_lengths(mechanism)
        epsilon = self.walk_epsilon(mechanism)
        survivors: list[int] = []
        steps: list[_Step] = []
        for group, s in enumerate(lengths):
            if group == 0:
                candidates = list(first_candidates(mechanism.domain, s))
            else:
                candidates = extensions(mechanism, survivors, lengths[group - 1],
                                        s - lengths[group - 1])
            table = tables[group]
            if not candidates or table.sum() == 0:
                steps.append(_Step(s, int(table.sum()), len(candidates), 0))
                return (), tuple(steps)
            estimates = marginal_estimates(
                table, buckets_of(mechanism, group, s, candidates, mechanism.bins), epsilon,
                heavy=mechanism.keep)
            best = np.argsort(-estimates, kind="stable")[:mechanism.keep]
            best = best[estimates[best] > 0]
            survivors = [candidates[i] for i in best.tolist()]
            steps.append(_Step(s, int(table.sum()), len(candidates), len(survivors)))
        return tuple(survivors), tuple(steps)


class PEMEstimator(DiscoveryEstimator):
    name: ClassVar[str] = "pem"
    mechanism_type: ClassVar[MechanismTypes] = PEM

    def state_size(self, mechanism: PrefixDiscovery) -> int:
        return mechanism.cells

    def map(self, mechanism: PrefixDiscovery, payloads: Sequence[Any]) -> np.ndarray:
        count = len(payloads)
        index = np.fromiter(((p["g"] * mechanism.cohorts + p["c"]) * mechanism.bins + p["y"]
                             for p in payloads), dtype=np.int64, count=count)
        return np.bincount(index, minlength=mechanism.cells).astype(np.int64)

    def walk_lengths(self, mechanism: PrefixDiscovery) -> tuple[int, ...]:
        return mechanism.lengths[:-1]

    def final_table(self, mechanism: PrefixDiscovery,
                    state: np.ndarray) -> tuple[np.ndarray, int, int, float]:
        last = mechanism.groups - 1
        tables = state.reshape(mechanism.groups, mechanism.cohorts, mechanism.bins)
        return tables[last], last, mechanism.bins, mechanism.epsilon


class TreeHistEstimator(DiscoveryEstimator):
    name: ClassVar[str] = "treehist"
    mechanism_type: ClassVar[MechanismTypes] = TreeHist

    def state_size(self, mechanism: PrefixDiscovery) -> int:
        return mechanism.cells

    def map(self, mechanism: PrefixDiscovery, payloads: Sequence[Any]) -> np.ndarray:
        assert isinstance(mechanism, TreeHist)
        count = len(payloads)
        cohorts = mechanism.cohorts
        prefix = np.fromiter(((p["g"] * cohorts + p["c"]) * mechanism.bins + p["y"]
                              for p in payloads), dtype=np.int64, count=count)
        offset = mechanism.groups * cohorts * mechanism.bins
        word = np.fromiter((offset + p["wc"] * mechanism.word_bins + p["wy"] for p in payloads),
                           dtype=np.int64, count=count)
        return (np.bincount(prefix, minlength=mechanism.cells)
                + np.bincount(word, minlength=mechanism.cells)).astype(np.int64)

    def walk_epsilon(self, mechanism: PrefixDiscovery) -> float:
        assert isinstance(mechanism, TreeHist)
        return mechanism.epsilon_prefix

    def final_table(self, mechanism: PrefixDiscovery,
                    state: np.ndarray) -> tuple[np.ndarray, int, int, float]:
        assert isinstance(mechanism, TreeHist)
        offset = mechanism.groups * mechanism.cohorts * mechanism.bins
        table = state[offset:].reshape(mechanism.cohorts, mechanism.word_bins)
        return table, mechanism.groups, mechanism.word_bins, mechanism.epsilon_word
