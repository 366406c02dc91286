"""The discovery estimator's fast paths give the straightforward computation's numbers bit
for bit: the shared cells' sums against the sparse product (the same additions in the same
order), bincount against ``np.add.at``, and the byte-domain ``could_start`` against the
symbol-by-symbol check with UTF-8's incremental decoder that it replaced."""

from __future__ import annotations

import codecs
import random

import numpy as np
import pytest
from scipy import sparse

from chorus_collector.estimators import discovery
from chorus_shared.domain import OpenStrings
from chorus_shared.mechanisms.discovery import could_start


def _onehot(buckets: np.ndarray, bins: int) -> sparse.csr_matrix:
    count, cohorts = buckets.shape
    cells = (np.arange(cohorts)[None, :] * bins + buckets).ravel()
    return sparse.csr_matrix((np.ones(count * cohorts),
                              (np.repeat(np.arange(count), cohorts), cells)),
                             shape=(count, cohorts * bins))


def test_the_shared_cells_sum_as_the_sparse_product_to_the_last_bit() -> None:
    # Terms of very different sizes: any other order of the additions gives other bits.
    buckets = np.zeros((2, 3), dtype=np.int64)
    ordered = np.array([1e16, 1.0, 1.0])
    assert discovery._SharedCells(buckets, 1).sums(ordered).tobytes() \
        == discovery._gram(_onehot(buckets, 1), ordered).tobytes()
    rng = np.random.default_rng(5)
    for trial in range(100):
        count, cohorts = int(rng.integers(1, 30)), int(rng.integers(1, 200))
        bins = int(rng.integers(2, 70))
        buckets = rng.integers(0, bins, size=(count, cohorts)).astype(
            np.int16 if trial % 2 else np.int64)
        weights = rng.random(cohorts * bins) * rng.choice([1e-3, 1.0, 1e6, 1e16],
                                                          size=cohorts * bins)
        weights[rng.random(weights.size) < 0.1] = 0.0
        shared = discovery._SharedCells(buckets, bins)
        for cell_weights in (weights, np.repeat(rng.integers(0, 50, cohorts).astype(float),
                                                bins)):
            assert shared.sums(cell_weights).tobytes() \
                == discovery._gram(_onehot(buckets, bins), cell_weights).tobytes()


@pytest.mark.parametrize(("count", "cohorts", "bins"), [(1, 64, 9), (8, 64, 9), (13, 512, 9),
                                                        (13, 1024, 21), (30, 64, 56)])
def test_joint_fit_is_the_same_with_and_without_the_sparse_product(
        count: int, cohorts: int, bins: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(count * cohorts + bins)
    table = rng.integers(0, 12, size=(cohorts, bins)).astype(np.int64)
    buckets = rng.integers(0, bins, size=(count, cohorts)).astype(np.int16)
    buckets[min(1, count - 1)] = buckets[0]  # two values that collide everywhere
    assert count * count * cohorts <= discovery.DENSE_PAIRS
    fast = discovery.joint_fit(table, buckets, 2.0)
    monkeypatch.setattr(discovery, "DENSE_PAIRS", -1)
    slow = discovery.joint_fit(table, buckets, 2.0)
    assert fast.frequency.tobytes() == slow.frequency.tobytes()
    assert fast.covariance.tobytes() == slow.covariance.tobytes()
    assert fast.reports == slow.reports


def test_cell_totals_add_as_add_at() -> None:
    rng = np.random.default_rng(7)
    for _ in range(100):
        count, cohorts = int(rng.integers(1, 30)), int(rng.integers(1, 200))
        bins = int(rng.integers(2, 40))
        buckets = rng.integers(0, bins, size=(count, cohorts))
        values = rng.standard_normal(count) * rng.choice([1e-3, 1.0, 1e16], size=count)
        expected = np.zeros((cohorts, bins))
        np.add.at(expected, (np.broadcast_to(np.arange(cohorts), buckets.shape), buckets),
                  values[:, None])
        assert discovery._cell_totals(buckets, values, bins).tobytes() == expected.tobytes()


def _could_start_bytes(domain: OpenStrings, prefix: int, s: int) -> bool:
    """The byte domain's check as it was: symbol by symbol, then the incremental decoder."""
    whole = s // 8
    head = prefix >> (s - whole * 8)
    codes = [(head >> (8 * (whole - 1 - i))) & 0xFF for i in range(whole)]
    if 0 in codes and any(codes[codes.index(0):]):
        return False
    text = bytes(codes).rstrip(b"\0")
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoder.decode(text, final=len(text) < len(codes))
    except UnicodeDecodeError:
        return False
    pending = decoder.getstate()[0]
    if pending:
        lead = pending[0]
        width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        return len(text) + width - len(pending) <= domain.max_bytes
    return True


@pytest.mark.parametrize("max_bytes", [2, 3, 9])
def test_could_start_over_bytes_is_the_symbol_by_symbol_check(max_bytes: int) -> None:
    """Every prefix of up to 12 bits (and a few beyond the range), then random bit strings
    and cuts of UTF-8 text of every width, at every length to a byte past the value."""
    domain = OpenStrings(max_bytes)
    rng = random.Random(max_bytes)
    texts = "aé日😀\x7f\u07ff\uffff\U0010ffff"
    for s in range(0, 8 * max_bytes + 9):
        if s <= 12:
            prefixes = list(range(-3, (1 << s) + 3))
        else:
            prefixes = [rng.getrandbits(s) for _ in range(200)]
            for _ in range(200):
                data = "".join(rng.choice(texts) for _ in range(rng.randrange(1, 6))).encode()
                data = (data + b"\0" * 20)[:s // 8 + 1]
                bits = int.from_bytes(data, "big") >> (8 * len(data) - s)
                prefixes.append(bits ^ (rng.getrandbits(3) << rng.randrange(s - 2)))
        for prefix in prefixes:
            assert could_start(domain, prefix, s) == _could_start_bytes(domain, prefix, s), \
                (max_bytes, s, prefix)
