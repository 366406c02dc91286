"""Shared statistical checks: run the real randomizer and estimator R times and compare the
estimates with exact theory (MECHANISMS.md §16.3–4)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from chorus_collector.estimators import Query, estimator_for
from chorus_shared import Campaign
from chorus_shared.hashing import bloom_bits
from chorus_shared.mechanisms import Rappor
from helpers.support import chi2_band, z_threshold

ALPHA = 1e-6


def run_repetitions(campaign: Campaign, inputs: Sequence[Any],
                    assignments: Sequence[dict[str, int]], reps: int, query: Query,
                    extract: Callable[[Any], np.ndarray],
                    seed: int = 99) -> tuple[np.ndarray, np.ndarray]:
    """R repetitions through the real randomizer and the real estimator (map + finalize)."""
    mechanism = campaign.mechanism
    estimator = estimator_for(mechanism.name)
    rng = random.Random(seed)
    estimates, variances = [], []
    for _ in range(reps):
        payloads = [mechanism.randomize(x, rng, a) for x, a in zip(inputs, assignments,
                                                                      strict=True)]
        state = estimator.map(mechanism, payloads)
        result = estimator.finalize(campaign, len(payloads), state, query)
        values, ses = extract(result)
        estimates.append(values)
        variances.append(ses**2)
    return np.array(estimates), np.array(variances)


def assert_unbiased_with_exact_variance(estimates: np.ndarray, truth: np.ndarray,
                                         exact_var: np.ndarray) -> None:
    reps, d = estimates.shape
    z = (estimates.mean(axis=0) - truth) / np.sqrt(exact_var / reps)
    assert np.max(np.abs(z)) < z_threshold(ALPHA, d), f"bias: z = {np.round(z, 2)}"
    low, high = chi2_band(reps - 1, ALPHA / d)
    ratio = estimates.var(axis=0, ddof=1) / exact_var
    assert np.all((ratio > low) & (ratio < high)), f"variance ratio {np.round(ratio, 3)} " \
                                                   f"outside [{low:.3f}, {high:.3f}]"


def frequency_values(result: Any) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([r.frequency for r in result.rows]),
            np.array([r.frequency_std_error for r in result.rows]))


_PLAIN = frozenset({int, str, float, bool, type(None)})


def payload_key(payload: Any) -> Any:
    """A hashable form of a payload: dicts as tuples of their items sorted by key, lists as
    tuples, recursively.

    Called on every sampled report of the goodness-of-fit tests (80,000 per campaign): plain
    values are passed through without a call, and a dict's items are sorted as they are (its
    keys are distinct, so the order never depends on the values): the same keys as the
    recursive generator form this replaced, in less time."""
    if type(payload) is dict:
        return tuple([(k, v if type(v) in _PLAIN else payload_key(v))
                      for k, v in sorted(payload.items())])
    if type(payload) is list:
        return tuple([v if type(v) in _PLAIN else payload_key(v) for v in payload])
    if isinstance(payload, dict):
        return tuple(sorted((k, payload_key(v)) for k, v in payload.items()))
    return tuple(payload_key(v) for v in payload) if isinstance(payload, list) else payload


def privacy_inputs(campaign: Campaign) -> list[Any]:
    mechanism = campaign.mechanism
    if mechanism.name == "rappor":
        assert isinstance(mechanism, Rappor)
        return _rappor_inputs(mechanism)
    return list(mechanism.inputs())


def _rappor_inputs(mechanism: Rappor) -> list[str]:
    """Strings including a pair whose Bloom bits are disjoint and full in cohort 0."""
    pool = [f"value-{i}" for i in range(200)]
    full = [s for s in pool if len(set(bloom_bits(s, 0, mechanism.k, mechanism.h)))
            == mechanism.h]
    for a, b in combinations(full, 2):
        if not set(bloom_bits(a, 0, mechanism.k, mechanism.h)) & set(
                bloom_bits(b, 0, mechanism.k, mechanism.h)):
            return [a, b, *pool[:4]]
    raise AssertionError("no disjoint pair found")


def assert_goodness_of_fit(observed: Mapping[Any, int], expected: Mapping[Any, float],
                           label: str = "", alpha: float = 2e-6) -> None:
    """Pearson's χ² of sampled outputs against expected counts (cells with an expected count
    below 5 merged into one); every observed output must be a possible one."""
    assert set(observed) <= set(expected), f"impossible outputs {label}"
    small = [k for k, e in expected.items() if e < 5]
    cells = [(observed.get(k, 0), e) for k, e in expected.items() if e >= 5]
    if small:
        cells.append((sum(observed.get(k, 0) for k in small),
                      sum(expected[k] for k in small)))
    chi2 = sum((o - e) ** 2 / e for o, e in cells)
    dof = len(cells) - 1
    _, high = chi2_band(dof, alpha)
    assert chi2 / dof <= high, f"χ²/dof = {chi2 / dof:.3f} > {high:.3f} {label}"


def assert_calibrated(estimates: np.ndarray, reported_var: np.ndarray,
                      truth: np.ndarray) -> None:
    """Model (S): the reported SE must match the spread of the estimates (χ² band) and the
    estimates must be unbiased for the population truth. ``reported_var`` holds one row of
    reported SE² per repetition."""
    reps, d = estimates.shape
    mean_reported = reported_var.mean(axis=0)
    z = (estimates.mean(axis=0) - truth) / np.sqrt(mean_reported / reps)
    assert np.max(np.abs(z)) < z_threshold(ALPHA, d), np.round(z, 2)
    low, high = chi2_band(reps - 1, ALPHA / d)
    ratio = estimates.var(axis=0, ddof=1) / mean_reported
    assert np.all((ratio > low) & (ratio < high)), np.round(ratio, 3)


def identifiable_candidates(mechanism: Any, count: int, prefix: str) -> list[str]:
    """``count`` strings whose cohort × bit design columns are linearly independent."""
    from chorus_collector.estimators.rappor import design_matrix

    chosen: list[str] = []
    for i in range(500):
        trial = [*chosen, f"{prefix}-{i}"]
        if np.linalg.matrix_rank(design_matrix(mechanism, list(range(mechanism.m)), trial)) \
                == len(trial):
            chosen = trial
            if len(chosen) == count:
                return chosen
    raise AssertionError("no identifiable candidate set")
