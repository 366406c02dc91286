"""OLH / BLH support counting (``estimators.local_hashing.support_counts``) against the formula
evaluated one category at a time: the fast path must count exactly the same, for every prime
the mechanism accepts, every hash range, every block boundary and on every thread count."""

from __future__ import annotations

import numpy as np
import pytest

from chorus_collector.estimators.local_hashing import (
    BLOCK_REPORTS,
    LANE_REPORTS,
    support_counts,
)
from chorus_shared import campaign_from_spec
from chorus_shared.mechanisms.local_hashing import PRIME, LocalHashing, local_hash


def reference(a: np.ndarray, b: np.ndarray, y: np.ndarray, d: int, prime: int,
              g: int) -> np.ndarray:
    """The straightforward count: ((a·v + b) mod P) mod g = y, one category at a time
    (a·v + b < 2⁵² for v < 2²⁰: exact in int64)."""
    a, b, y = (np.asarray(x, dtype=np.int64) for x in (a, b, y))
    return np.array([np.count_nonzero((a * v + b) % prime % g == y) for v in range(d)],
                    dtype=np.int64)


def reports(n: int, prime: int, g: int, seed: int) -> tuple[np.ndarray, ...]:
    """n reports as the client draws them, with the extreme seeds among the first."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, prime, size=n)
    b = rng.integers(0, prime, size=n)
    y = rng.integers(0, g, size=n)
    edges = [(prime - 1, prime - 1), (1, 0), (prime - 1, 0), (1, prime - 1)]
    for i, (ai, bi) in enumerate(edges[:n]):
        a[i], b[i] = ai, bi
    return a, b, y


def test_the_reference_is_the_clients_hash() -> None:
    a, b, y = reports(50, PRIME, 5, seed=1)
    direct = [sum(local_hash(int(ai), int(bi), v, PRIME, 5) == yi
                  for ai, bi, yi in zip(a, b, y, strict=True)) for v in range(40)]
    assert reference(a, b, y, 40, PRIME, 5).tolist() == direct


@pytest.mark.parametrize(("prime", "g", "d"), [
    (PRIME, 2, 1024), (PRIME, 3, 1000), (PRIME, 4, 1024), (PRIME, 5, 333), (PRIME, 8, 77),
    (PRIME, 21, 1025), (PRIME, 56, 64), (PRIME, 255, 300), (PRIME, 256, 300),
    (PRIME, 65_535, 40), (PRIME, 65_536, 40), (PRIME, 1 << 20, 17),
    (7919, 2, 1000), (7919, 6, 7918), (7919, 7919, 50), (65_537, 4, 500),
    (1_000_003, 10, 2048), (3, 2, 2),
])
def test_support_counts_equal_the_formula(prime: int, g: int, d: int) -> None:
    """Mersenne and other primes, powers of two and not, every key width (uint8, uint16,
    uint32) and g = P (where the sum's wrap never changes the hash)."""
    mechanism = campaign_from_spec({
        "name": "o", "mechanism": "olh", "epsilon": 1.0, "domain": [f"c{i}" for i in range(d)],
        "params": {"prime": prime, "g": g}}, warn=False).mechanism
    assert isinstance(mechanism, LocalHashing)
    assert (mechanism.prime, mechanism.g, mechanism.d) == (prime, g, d)  # a family it allows
    a, b, y = reports(3 * LANE_REPORTS + 13, prime, g, seed=d + g)
    assert support_counts(a, b, y, d, prime, g).tolist() == \
        reference(a, b, y, d, prime, g).tolist()


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, LANE_REPORTS - 1, LANE_REPORTS,
                               LANE_REPORTS + 1, BLOCK_REPORTS, BLOCK_REPORTS + 8,
                               2 * BLOCK_REPORTS + LANE_REPORTS + 5])
def test_every_block_boundary(n: int) -> None:
    """Blocks are whole lanes of 2,040 reports (255 uint64 words of booleans) or less than
    one lane, padded to a whole word: the padding must never count."""
    a, b, y = reports(n, PRIME, 4, seed=n)
    expected = reference(a, b, y, 100, PRIME, 4)
    counts = support_counts(a, b, y, 100, PRIME, 4)
    assert counts.dtype == np.int64
    assert counts.tolist() == expected.tolist()


@pytest.mark.parametrize("d", [1, 2, 3, 31, 32, 33, 1023, 1024, 1025])
def test_every_category_count(d: int) -> None:
    """v = j·w + r with w = ⌈√d⌉: the last chunk of rows is cut at d."""
    a, b, y = reports(700, PRIME, 3, seed=d)
    assert support_counts(a, b, y, d, PRIME, 3).tolist() == \
        reference(a, b, y, d, PRIME, 3).tolist()


@pytest.mark.parametrize(("block_reports", "block_cells", "workers"), [
    (1, 1, 1), (5, 64, 3), (8, 1 << 30, 2), (LANE_REPORTS + 1, 1, 2),
    (3 * LANE_REPORTS, 1 << 18, 4)])
def test_blocking_and_threads_do_not_change_the_counts(block_reports: int, block_cells: int,
                                                       workers: int) -> None:
    a, b, y = reports(2 * BLOCK_REPORTS + 3, PRIME, 8, seed=block_reports)
    counts = support_counts(a, b, y, 50, PRIME, 8, block_cells=block_cells, workers=workers,
                            block_reports=block_reports)
    assert counts.tolist() == reference(a, b, y, 50, PRIME, 8).tolist()


def test_seeds_are_taken_mod_p_and_a_y_out_of_range_never_counts() -> None:
    a, b, y = reports(500, 7919, 5, seed=3)
    a[:100] += 7919 * 3
    b[100:200] -= 7919 * 2
    y[200:250] = 5
    y[250:300] = -1
    assert support_counts(a, b, y, 64, 7919, 5).tolist() == \
        reference(a, b, y, 64, 7919, 5).tolist()
    assert support_counts(a[200:300], b[200:300], y[200:300], 64, 7919, 5).tolist() == [0] * 64


def test_the_family_must_fit_32_bits() -> None:
    with pytest.raises(ValueError, match="prime"):
        support_counts(np.ones(1), np.ones(1), np.zeros(1), 4, 1 << 31, 2)
