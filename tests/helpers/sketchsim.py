"""Sketch (CMS, HCMS) answers over fresh hash placements, for the coverage test
(tests/mechanisms/test_sketch_coverage.py) and its benchmark (benchmarks/sketch_intervals.py).

Every repetition names the population's values afresh ("r<rep>-v<i>"), so the campaign's real
murmur3 hashes place them anew, as a new campaign's values would be placed; the statistic is
drawn from its exact distribution under i.i.d. sampling of users and decoded by the real
estimator. The placements are the mechanism's own h_j, computed for all values and rows at once
(``hash_positions``: murmur3 in numpy, bit for bit, checked against ``mechanism.position`` in
every repetition) rather than one Python call per value and row, which was most of the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.common import walsh_hadamard
from chorus_collector.estimators.sketch import CountMeanSketchEstimator
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.hashing import MAX_HASHES
from chorus_shared.mechanisms import CountMeanSketch, HadamardCountMeanSketch

__all__ = ["CANDIDATES", "GEOMETRIC", "Draws", "draws", "fixed_hash_std_error", "hash_positions",
           "murmur3_32", "shares_draws", "sketch_statistic"]

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    result: np.ndarray = (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    return result


def murmur3_32(data: Sequence[bytes], seeds: np.ndarray) -> np.ndarray:
    """murmur3_x86_32 (unsigned) of every byte string under every seed, vectorised over both:
    shape (len(data), len(seeds)). Bit for bit ``mmh3.hash(d, seed, signed=False)``; the
    strings are grouped by length, since the blocks and the tail depend on it."""
    seeds = np.asarray(seeds).astype(np.uint32)
    out = np.empty((len(data), len(seeds)), dtype=np.uint32)
    lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
    for size in np.unique(lengths).tolist():
        where = np.flatnonzero(lengths == size)
        raw = np.frombuffer(b"".join([data[i] for i in where]),
                            dtype=np.uint8).reshape(len(where), size)
        blocks = size // 4
        h = np.repeat(seeds[None, :], len(where), axis=0)
        words = raw[:, :4 * blocks].copy().view("<u4").astype(np.uint32)
        for b in range(blocks):
            h ^= (_rotl(words[:, b] * _C1, 15) * _C2)[:, None]
            h = _rotl(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        if size % 4:
            tail = np.zeros(len(where), dtype=np.uint32)
            for i in range(size % 4):
                tail ^= raw[:, 4 * blocks + i].astype(np.uint32) << np.uint32(8 * i)
            h ^= (_rotl(tail * _C1, 15) * _C2)[:, None]
        h ^= np.uint32(size)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
        out[where] = h
    return out


def hash_positions(mechanism: CountMeanSketch, names: Sequence[str]) -> np.ndarray:
    """``positions[value, row]`` = ``mechanism.position(value, row)`` for every name, computed
    in numpy (the sketch's h_j is ``bloom_bits(x, j, m, 1)``: murmur3 of the UTF-8 bytes under
    seed j·MAX_HASHES, mod m). The first, a middle and the last name are checked against
    ``mechanism.position`` in every row, so the shortcut cannot drift from the mechanism."""
    seeds = np.arange(mechanism.k, dtype=np.int64) * MAX_HASHES
    positions = (murmur3_32([v.encode("utf-8") for v in names], seeds)
                 % np.uint32(mechanism.m)).astype(np.int64)
    for i in {0, len(names) // 2, len(names) - 1} if names else ():
        assert positions[i].tolist() == [mechanism.position(names[i], j)
                                         for j in range(mechanism.k)], names[i]
    return positions


def _population(head: int, ratio: float, tail: int, tail_mass: float) -> np.ndarray:
    shares = np.concatenate([ratio ** np.arange(head), np.zeros(tail)])
    shares *= (1 - tail_mass) / shares.sum()
    shares[head:] = tail_mass / tail
    return shares


# A geometric head (the largest share about 0.17) over a flat tail holding 30% of the users.
GEOMETRIC = _population(40, 0.75, 300, 0.3)
CANDIDATES = 6  # the six largest, and one value nobody holds


def _campaign(name: str, epsilon: float, k: int, m: int) -> tuple[Campaign, CountMeanSketch]:
    campaign = campaign_from_spec({"name": "s", "mechanism": name, "epsilon": epsilon,
                                   "domain": {"kind": "strings"}, "params": {"k": k, "m": m}})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, CountMeanSketch)
    return campaign, mechanism


def sketch_statistic(mechanism: CountMeanSketch, positions: np.ndarray, pi: np.ndarray, n: int,
                     rng: np.random.Generator) -> np.ndarray:
    """One draw of the k × (m + 1) statistic for n users drawn i.i.d. from π, with
    ``positions[value, row]``. CMS: holders of each value per row are multinomial, and a cell's
    count is Bin(#hot, 1 − flip) + Bin(#cold, flip). HCMS: a report is (j, l, ±1) i.i.d., with
    P(+1 | j, l) = 1/2 + (keep − 1/2)·(H_m g_j)_l for g_j row j's cell shares."""
    k, m = mechanism.k, mechanism.m
    if isinstance(mechanism, HadamardCountMeanSketch):
        cells = np.zeros((k, m))
        for j in range(k):
            cells[j] = np.bincount(positions[:, j], weights=pi, minlength=m)
        plus = 0.5 + (mechanism.keep - 0.5) * walsh_hadamard(cells)
        probabilities = np.stack([plus, 1 - plus], axis=-1).ravel() / (k * m)
        counts = rng.multinomial(n, probabilities / probabilities.sum()).reshape(k, m, 2)
        return np.column_stack([counts.sum(axis=(1, 2)), counts[..., 0] - counts[..., 1]]).ravel()
    holders = rng.multinomial(n, np.outer(np.full(k, 1 / k), pi).ravel()).reshape(k, -1)
    hot = np.zeros((k, m), dtype=np.int64)
    np.add.at(hot, (np.arange(k)[:, None], positions.T), holders)
    reports = holders.sum(axis=1)
    ones = rng.binomial(hot, 1 - mechanism.flip) + \
        rng.binomial(reports[:, None] - hot, mechanism.flip)
    return np.column_stack([reports, ones]).ravel()


def fixed_hash_std_error(mechanism: CountMeanSketch, frequency: np.ndarray,
                         n: int) -> np.ndarray:
    """The standard error for the campaign's fixed hashes alone (the one before the collision
    term), from its formula at θ̂ = f̂(m − 1)/m + 1/m."""
    m, c = mechanism.m, mechanism.c
    theta = np.clip(frequency * (m - 1) / m + 1 / m, 0.0, 1.0)
    per_report = c**2 - theta**2 if isinstance(mechanism, HadamardCountMeanSketch) \
        else (c**2 - 1) / 4 + theta * (1 - theta)
    result: np.ndarray = m / (m - 1) * np.sqrt(per_report / n)
    return result


class Draws(NamedTuple):
    """Per repetition (rows) and candidate (columns), each repetition with its own hash
    placement; F̂₂ and F̂₃ per repetition."""

    frequency: np.ndarray
    std_error: np.ndarray
    fixed_std_error: np.ndarray
    low: np.ndarray
    high: np.ndarray
    squares: np.ndarray
    cubes: np.ndarray


def draws(name: str, epsilon: float, k: int, m: int, n: int, pi: np.ndarray, reps: int,
          seed: int) -> Draws:
    """The estimator's answers over ``reps`` fresh hash placements and user samples."""
    campaign, mechanism = _campaign(name, epsilon, k, m)
    estimator = estimator_for(name)
    rng = np.random.default_rng(seed)
    picked = [*range(CANDIDATES), len(pi)]  # the last one is held by nobody
    estimates, errors, lows, highs, squares, cubes = [], [], [], [], [], []
    for rep in range(reps):
        names = [f"r{rep}-v{i}" for i in range(len(pi) + 1)]
        positions = hash_positions(mechanism, names[:-1])
        result = estimator.finalize(campaign, n, sketch_statistic(mechanism, positions, pi, n,
                                                                  rng),
                                    Query(candidates=tuple(names[i] for i in picked)))
        estimates.append([r.frequency for r in result.rows])
        errors.append([r.frequency_std_error for r in result.rows])
        lows.append([r.frequency_ci_low for r in result.rows])
        highs.append([r.frequency_ci_high for r in result.rows])
        squares.append(result.extra["sum_of_squared_shares"])
        cubes.append(result.extra["sum_of_cubed_shares"])
    frequency = np.array(estimates)
    return Draws(frequency, np.array(errors), fixed_hash_std_error(mechanism, frequency, n),
                 np.array(lows), np.array(highs), np.array(squares), np.array(cubes))


def shares_draws(name: str, epsilon: float, k: int, m: int, n: int, pi: np.ndarray, reps: int,
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
    """F̂₂ and F̂₃ per repetition over fresh hash placements and user samples, as ``draws``
    gives them, without the candidates' intervals (most of ``finalize``'s time): from the
    estimator's own ``cell_totals``, ``sum_of_squares`` and ``sum_of_cubes``, the steps
    ``finalize`` takes for its ``extra``. The first repetition is also decoded by ``finalize``,
    and its two numbers must be the same, so this path cannot drift from the answer's."""
    campaign, mechanism = _campaign(name, epsilon, k, m)
    estimator = estimator_for(name)
    assert isinstance(estimator, CountMeanSketchEstimator)
    rng = np.random.default_rng(seed)
    squares, cubes = np.empty(reps), np.empty(reps)
    for rep in range(reps):
        positions = hash_positions(mechanism, [f"r{rep}-v{i}" for i in range(len(pi))])
        state = sketch_statistic(mechanism, positions, pi, n, rng)
        table = state.reshape(k, m + 1).astype(np.float64)
        cells, sizes = estimator.cell_totals(mechanism, table), table[:, 0]
        squares[rep] = estimator.sum_of_squares(mechanism, cells, sizes)
        cubes[rep] = estimator.sum_of_cubes(mechanism, cells, sizes, squares[rep])
        if rep == 0:
            extra = estimator.finalize(campaign, n, state, Query(candidates=("r0-v0",))).extra
            assert (extra["sum_of_squared_shares"], extra["sum_of_cubed_shares"]) == \
                (squares[rep], cubes[rep])
    return squares, cubes
