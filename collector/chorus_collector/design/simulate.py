"""Vectorized report simulation for benchmarks and studies (numpy, seeded).

The client perturbs one value at a time in pure Python; to simulate millions of users, this
module draws the same reports in bulk, in the wire format the collector ingests. Each sampler
is tested against the mechanism's exact output distribution
(tests/collector/design/test_simulate.py), the same check the client's randomizer passes, so both
produce the same distribution.

Supported: ``rr``, ``krr``, ``sue``, ``oue``, ``olh``, ``blh``, ``hr``, ``dbitflip``,
``duchi``, ``one_bit_mean``, ``pm``, ``duchi_md``, ``harmony``, ``rappor`` (one report per
user, no memoization), and the distribution mechanisms ``sw`` and ``hh``. Inputs are encoded
as ``mechanism.encode`` encodes them on the device: category indices; for the mean
mechanisms, numbers on the [−1, 1] scale (vector inputs an (n, D) array of them); for the
distribution mechanisms ``sw`` and ``hh``, numbers on the unit scale [0, 1] (the campaign's
linear or log mapping already applied); for the record mechanisms ``smp``, ``spl``, ``rsfd``
and ``marginals``, an (n, d) array of category indices; for the discovery mechanisms ``pem``
and ``treehist``, the encoded strings (integers of 8·max_bytes bits).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chorus_collector.estimators.discovery import report_buckets
from chorus_shared.mechanisms import (
    KRR,
    OUE,
    SUE,
    DBitFlip,
    Duchi,
    DuchiMultidim,
    HadamardResponse,
    Harmony,
    HierarchicalHistogram,
    Marginals,
    Mechanism,
    PiecewiseMechanism,
    RandomSamplingFakeData,
    Rappor,
    SampledAttribute,
    SplitBudget,
    SquareWave,
)
from chorus_shared.mechanisms.discovery import PrefixDiscovery, TreeHist
from chorus_shared.mechanisms.local_hashing import LocalHashing

__all__ = ["SIMULATORS", "simulate"]


def _hex_rows(bits: np.ndarray, width_bits: int) -> list[str]:
    """Rows of 0/1 (bit i = column i) as Chorus's lowercase hex (bit i = 1 << i)."""
    packed = np.packbits(bits.astype(np.uint8), axis=1, bitorder="little")
    digits = (width_bits + 3) // 4
    return [format(int.from_bytes(row.tobytes(), "little"), f"0{digits}x") for row in packed]


def _krr(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, KRR)
    d = mechanism.d
    p, _ = mechanism.support_probabilities()
    keep = rng.random(len(inputs)) < p
    other = rng.integers(0, d - 1, size=len(inputs))
    reports = np.where(keep, inputs, other + (other >= inputs))
    result: list[Any] = reports.tolist()
    return result


def _unary(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, SUE | OUE)
    p, q = mechanism.support_probabilities()
    d = mechanism.d
    bits = rng.random((len(inputs), d)) < q
    bits[np.arange(len(inputs)), inputs] = rng.random(len(inputs)) < p
    return [{"bits": h} for h in _hex_rows(bits, d)]


def _local_hashing(mechanism: Mechanism, inputs: np.ndarray,
                   rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, LocalHashing)
    n, g, prime = len(inputs), mechanism.g, mechanism.prime
    a = rng.integers(1, prime, size=n)
    b = rng.integers(0, prime, size=n)
    hashed = (a * inputs + b) % prime % g
    e = math.exp(mechanism.epsilon)
    keep = rng.random(n) < e / (e + g - 1)
    other = rng.integers(0, g - 1, size=n)
    y = np.where(keep, hashed, other + (other >= hashed))
    return [{"a": int(ai), "b": int(bi), "y": int(yi)} for ai, bi, yi in zip(a, b, y,
                                                                             strict=True)]


def _hadamard(mechanism: Mechanism, inputs: np.ndarray,
              rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, HadamardResponse)
    n = len(inputs)
    y = rng.integers(0, mechanism.size, size=n)
    rows = inputs + 1
    top = np.left_shift(1, np.floor(np.log2(rows)).astype(np.int64))
    partner = y ^ top
    parity = np.array([bin(int(v)).count("1") & 1 for v in (rows & y)])
    inside = np.where(parity == 0, y, partner)
    outside = np.where(parity == 0, partner, y)
    e = math.exp(mechanism.epsilon)
    result: list[Any] = np.where(rng.random(n) < e / (1 + e), inside, outside).tolist()
    return result


def _dbitflip(mechanism: Mechanism, inputs: np.ndarray,
              rng: np.random.Generator) -> list[Any]:
    """b distinct buckets uniformly (the b smallest of d uniform keys: every b-subset equally
    likely), sorted, then one bit each: 1 with p_bit on the user's own bucket, 1 − p_bit
    elsewhere."""
    assert isinstance(mechanism, DBitFlip)
    n, d, b = len(inputs), mechanism.d, mechanism.b
    if b == 1:
        buckets = rng.integers(0, d, size=(n, 1))
    else:
        # In chunks: the keys are an (rows, d) array.
        rows = max(1, 4_000_000 // d)
        buckets = np.concatenate([
            np.sort(np.argpartition(rng.random((min(rows, n - start), d)), b - 1,
                                    axis=1)[:, :b], axis=1)
            for start in range(0, n, rows)]) if n else np.zeros((0, b), dtype=np.int64)
    rate = np.where(buckets == inputs[:, None], mechanism.p_bit, 1 - mechanism.p_bit)
    bits = (rng.random((n, b)) < rate).astype(np.int64)
    return [{"buckets": j, "bits": v} for j, v in zip(buckets.tolist(), bits.tolist(),
                                                      strict=True)]


def _duchi(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, Duchi)
    e = math.exp(mechanism.epsilon)
    result: list[Any] = (rng.random(len(inputs)) < 0.5 + inputs * (e - 1) / (2 * (e + 1))
                         ).astype(np.int64).tolist()
    return result


def _piecewise(mechanism: Mechanism, inputs: np.ndarray,
               rng: np.random.Generator) -> list[Any]:
    """The client's draw (inside [l, r] or on the rest of [−C, C]), then the same randomized
    rounding to the grid."""
    assert isinstance(mechanism, PiecewiseMechanism)
    n, c, z = len(inputs), mechanism.c, mechanism.z
    left = (c + 1) * inputs / 2 - (c - 1) / 2
    right = left + c - 1
    inside = left + (right - left) * rng.random(n)
    u = (c + 1) * rng.random(n)
    below = left + c
    outside = np.where(u < below, -c + u, right + (u - below))
    s = np.where(rng.random(n) < z / (z + 1), inside, outside)
    position = np.clip(s / mechanism.step, -mechanism.resolution, mechanism.resolution)
    low = np.floor(position)
    grid = low + (rng.random(n) < position - low)
    result: list[Any] = grid.astype(np.int64).tolist()
    return result


def _duchi_md(mechanism: Mechanism, inputs: np.ndarray,
              rng: np.random.Generator) -> list[Any]:
    """v ~ signs of t, s uniform turned towards v (s·v ≥ 0), then −s with probability
    1/(e^ε + 1): the client's draw, as bit masks (bit j set when s_j = +1)."""
    assert isinstance(mechanism, DuchiMultidim)
    n, d = inputs.shape
    v = rng.random((n, d)) < (1 + inputs) / 2
    s = rng.random((n, d)) < 0.5
    dot = d - 2 * (s != v).sum(axis=1)
    s ^= (dot < 0)[:, None]
    s ^= np.greater_equal(rng.random(n), mechanism.keep)[:, None]
    weights = np.left_shift(np.int64(1), np.arange(d, dtype=np.int64))
    result: list[Any] = (s.astype(np.int64) * weights).sum(axis=1).tolist()
    return result


def _harmony(mechanism: Mechanism, inputs: np.ndarray,
             rng: np.random.Generator) -> list[Any]:
    """One attribute drawn uniformly, Duchi's bit on it at the full ε."""
    assert isinstance(mechanism, Harmony)
    n, d = len(inputs), int(inputs.shape[1])
    chosen = rng.integers(0, d, size=n)
    t = inputs[np.arange(n), chosen]
    e = math.exp(mechanism.epsilon)
    bits = np.less(rng.random(n), 0.5 + t * (e - 1) / (2 * (e + 1)))
    return [{"j": [j], "y": [int(b)]} for j, b in zip(chosen.tolist(), bits.tolist(),
                                                        strict=True)]


def _rappor(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    """``inputs`` are strings; Bloom filters are computed once per distinct (value, cohort)."""
    assert isinstance(mechanism, Rappor)
    n, k = len(inputs), mechanism.k
    cohorts = rng.integers(0, mechanism.m, size=n)
    values, index = np.unique(inputs, return_inverse=True)
    bloom = np.zeros((len(values), mechanism.m, k), dtype=bool)
    for v, value in enumerate(values.tolist()):
        for c in range(mechanism.m):
            mask = mechanism.bloom(value, c)
            bloom[v, c] = [(mask >> i) & 1 for i in range(k)]
    rates = np.where(bloom[index, cohorts], mechanism.r1, mechanism.r0)
    bits = rng.random((n, k)) < rates
    return [{"cohort": int(c), "bits": h} for c, h in zip(cohorts, _hex_rows(bits, k),
                                                            strict=True)]


def _unit_inputs(mechanism: Mechanism, inputs: np.ndarray) -> None:
    """The distribution mechanisms take v ∈ [0, 1], unlike the mean mechanisms' [−1, 1]: a
    caller that mixes the two up would otherwise get plausible-looking reports."""
    if len(inputs) and not (float(inputs.min()) >= 0.0 and float(inputs.max()) <= 1.0):
        raise ValueError(f"{mechanism.name} simulates values on the unit scale [0, 1] "
                         "(mechanism.encode), not [−1, 1]")


def _square_wave(mechanism: Mechanism, inputs: np.ndarray,
                 rng: np.random.Generator) -> list[Any]:
    """The client's draw (uniform on the wave [v − b, v + b] with probability 2b·p, else
    uniform on the rest of [−b, 1 + b], whose length is 1), then its output bucket."""
    assert isinstance(mechanism, SquareWave)
    _unit_inputs(mechanism, inputs)
    n, b = len(inputs), mechanism.b
    on_wave = rng.random(n) < 2 * b * mechanism.p
    wave = inputs - b + 2 * b * rng.random(n)
    u = rng.random(n)
    y = np.where(on_wave, wave, np.where(u < inputs, u - b, u + b))
    index = np.floor((y + b) / mechanism.bucket_width).astype(np.int64)
    result: list[Any] = np.clip(index, 0, mechanism.output_buckets - 1).tolist()
    return result


def _hierarchical(mechanism: Mechanism, inputs: np.ndarray,
                  rng: np.random.Generator) -> list[Any]:
    """A level uniformly per report, the node holding v there, and that level's oracle (the
    k-RR or OUE sampler above) on the reports drawn to it; payloads as the client's."""
    assert isinstance(mechanism, HierarchicalHistogram)
    _unit_inputs(mechanism, inputs)
    n, height = len(inputs), mechanism.height
    levels = 1 + rng.integers(0, height, size=n)
    leaves = np.minimum((inputs * mechanism.buckets).astype(np.int64), mechanism.buckets - 1)
    out: list[Any] = [None] * n
    for level, oracle in enumerate(mechanism.oracles, start=1):
        members = np.flatnonzero(levels == level)
        nodes = leaves[members] // mechanism.nodes(height - level)
        if isinstance(oracle, KRR):
            reports = [{"level": level, "index": k} for k in _krr(oracle, nodes, rng)]
        else:
            reports = [{"level": level, **r} for r in _unary(oracle, nodes, rng)]
        for i, report in zip(members.tolist(), reports, strict=True):
            out[i] = report
    return out


def _oracle(oracle: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    return _krr(oracle, inputs, rng) if isinstance(oracle, KRR) else _unary(oracle, inputs, rng)


def _grouped(count: int, groups: np.ndarray, reports: Callable[[int, np.ndarray], list[Any]],
             key: str) -> list[Any]:
    """One report per row; the rows of group g drawn together by ``reports(g, rows)``."""
    out: list[Any] = [None] * len(groups)
    for g in range(count):
        members = np.flatnonzero(groups == g)
        if len(members):
            for i, y in zip(members.tolist(), reports(g, members), strict=True):
                out[i] = {key: g, "y": y}
    return out


def _smp(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, SampledAttribute)
    chosen = rng.integers(0, mechanism.d, size=len(inputs))
    return _grouped(mechanism.d, chosen, lambda j, rows: _oracle(
        mechanism.oracles[j], inputs[rows, j], rng), "a")


def _spl(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, SplitBudget)
    columns = [_oracle(o, inputs[:, j], rng) for j, o in enumerate(mechanism.oracles)]
    return [{"y": list(ys)} for ys in zip(*columns, strict=True)]


def _rsfd(mechanism: Mechanism, inputs: np.ndarray, rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, RandomSamplingFakeData)
    n = len(inputs)
    chosen = rng.integers(0, mechanism.d, size=n)
    out = np.empty_like(inputs)
    for j, (oracle, k) in enumerate(zip(mechanism.krr_oracles, mechanism.domain.sizes,
                                        strict=True)):
        real = np.asarray(_krr(oracle, inputs[:, j], rng))
        out[:, j] = np.where(chosen == j, real, rng.integers(0, k, size=n))
    return [{"y": row} for row in out.tolist()]


def _marginals(mechanism: Mechanism, inputs: np.ndarray,
               rng: np.random.Generator) -> list[Any]:
    assert isinstance(mechanism, Marginals)
    sizes = mechanism.domain.sizes
    chosen = rng.integers(0, len(mechanism.sets), size=len(inputs))

    def cells(s: int, rows: np.ndarray) -> list[Any]:
        index = np.zeros(len(rows), dtype=np.int64)
        for a in mechanism.sets[s]:
            index = index * sizes[a] + inputs[rows, a]
        return _oracle(mechanism.oracles[s], index, rng)

    return _grouped(len(mechanism.sets), chosen, cells, "s")


def _krr_buckets(buckets: np.ndarray, bins: int, epsilon: float,
                 rng: np.random.Generator) -> np.ndarray:
    e = math.exp(epsilon)
    keep = rng.random(len(buckets)) < e / (e + bins - 1)
    other = rng.integers(0, bins - 1, size=len(buckets))
    other += other >= buckets
    result: np.ndarray = np.where(keep, buckets, other)
    return result


def _discovery(mechanism: Mechanism, inputs: np.ndarray,
               rng: np.random.Generator) -> list[Any]:
    """PEM and TreeHist; inputs are encoded values (ints of 8·max_bytes bits), and each
    report's group is drawn afresh (the client derives it from its install key)."""
    assert isinstance(mechanism, PrefixDiscovery)
    values = inputs.tolist()
    n = len(values)
    weights = np.array(mechanism.group_weights)
    units = rng.integers(0, int(weights.sum()), size=n)
    groups = np.searchsorted(np.cumsum(weights), units, side="right")
    cohorts = rng.integers(0, mechanism.cohorts, size=n)
    epsilon = mechanism.epsilon_prefix if isinstance(mechanism, TreeHist) else mechanism.epsilon
    y = _krr_buckets(report_buckets(mechanism, values, groups, cohorts), mechanism.bins,
                     epsilon, rng)
    if not isinstance(mechanism, TreeHist):
        return [{"g": g, "c": c, "y": b} for g, c, b in
                zip(groups.tolist(), cohorts.tolist(), y.tolist(), strict=True)]
    word_cohorts = rng.integers(0, mechanism.cohorts, size=n)
    full = np.full(n, mechanism.groups - 1)
    word_y = _krr_buckets(report_buckets(
        mechanism, values, full, word_cohorts, hash_group=np.full(n, mechanism.groups),
        bins=mechanism.word_bins), mechanism.word_bins, mechanism.epsilon_word, rng)
    return [{"g": g, "c": c, "y": b, "wc": wc, "wy": wy} for g, c, b, wc, wy in
            zip(groups.tolist(), cohorts.tolist(), y.tolist(), word_cohorts.tolist(),
                word_y.tolist(), strict=True)]


Simulator = Callable[[Mechanism, np.ndarray, np.random.Generator], list[Any]]
SIMULATORS: dict[str, Simulator] = {
    "rr": _krr, "krr": _krr, "sue": _unary, "oue": _unary, "olh": _local_hashing,
    "blh": _local_hashing, "hr": _hadamard, "dbitflip": _dbitflip, "duchi": _duchi,
    "one_bit_mean": _duchi, "pm": _piecewise, "duchi_md": _duchi_md, "harmony": _harmony,
    "rappor": _rappor, "sw": _square_wave, "hh": _hierarchical, "smp": _smp, "spl": _spl,
    "rsfd": _rsfd, "marginals": _marginals, "pem": _discovery, "treehist": _discovery,
}


def simulate(mechanism: Mechanism, inputs: Sequence[Any] | np.ndarray,
             rng: np.random.Generator) -> list[Any]:
    """One report payload per encoded input, drawn in bulk (seeded by ``rng``)."""
    try:
        sampler = SIMULATORS[mechanism.name]
    except KeyError:
        raise ValueError(f"no vectorized simulator for {mechanism.name!r}; known: "
                         f"{sorted(SIMULATORS)}") from None
    as_objects = mechanism.name in ("rappor", "pem", "treehist")  # strings, or big integers
    array = np.asarray(inputs, dtype=object if as_objects else None)
    return sampler(mechanism, array, rng)

