"""Amplification by shuffling (MECHANISMS-2.md §5.4 checks 1–3): the FMT closed form, the
numerical clone-model bound against exact enumeration, monotonicity and the ε ≤ ε₀ clamp."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from chorus_collector.ingest.shuffling import (
    ASSUMPTIONS,
    central_privacy,
    clone_delta,
    default_delta,
    numerical_epsilon,
)
from chorus_shared.shuffling import fmt_closed_form, fmt_closed_form_applies


def _binomial_pmf(n: int, k: int, p: float) -> float:
    if not 0 <= k <= n:
        return 0.0
    return math.comb(n, k) * p ** k * (1 - p) ** (n - k)


def _hockey_stick(first: dict[object, float], second: dict[object, float],
                  epsilon: float) -> float:
    """max over both directions of Σ max(0, P − e^ε Q), by full enumeration."""
    keys = set(first) | set(second)
    forward = math.fsum(max(0.0, first.get(x, 0.0) - math.exp(epsilon) * second.get(x, 0.0))
                        for x in keys)
    backward = math.fsum(max(0.0, second.get(x, 0.0) - math.exp(epsilon) * first.get(x, 0.0))
                         for x in keys)
    return max(forward, backward)


def _clone_model(epsilon0: float, n: int) -> tuple[dict[object, float], dict[object, float]]:
    """The two clone-model distributions of §5.1 over (C, count), written out in full."""
    alpha = math.exp(epsilon0) / (math.exp(epsilon0) + 1)
    p_clone = math.exp(-epsilon0)
    first: dict[object, float] = {}
    second: dict[object, float] = {}
    for c in range(n):
        weight = _binomial_pmf(n - 1, c, p_clone)
        for k in range(c + 2):
            here, below = _binomial_pmf(c, k, 0.5), _binomial_pmf(c, k - 1, 0.5)
            first[(c, k)] = weight * (alpha * below + (1 - alpha) * here)
            second[(c, k)] = weight * ((1 - alpha) * below + alpha * here)
    return first, second


# -- check 1: the README example of apple/ml-shuffling-amplification ---------------------------


def test_readme_example_closed_form_and_numerical() -> None:
    assert fmt_closed_form(4.0, 10**5, 1e-6) == pytest.approx(0.5378, abs=5e-5)
    numerical = numerical_epsilon(4.0, 10**5, 1e-6)
    assert 0.1675 <= numerical <= 0.1728
    result = central_privacy(4.0, 10**5, 1e-6)
    assert result["epsilon"] == numerical
    assert result["bound"] == "numerical"
    assert result["closed_form_epsilon"] == pytest.approx(0.5378, abs=5e-5)


@pytest.mark.parametrize(("n", "row"), [
    (10**4, (0.233, 0.524, None, None)),
    (10**5, (0.075, 0.191, 0.538, 1.101)),
    (10**6, (0.024, 0.063, 0.202, 0.487)),
])
def test_closed_form_table_of_the_reference(n: int, row: tuple[float | None, ...]) -> None:
    for epsilon0, expected in zip((1.0, 2.0, 4.0, 6.0), row, strict=True):
        value = fmt_closed_form(epsilon0, n, 1e-6)
        if expected is None:  # outside the regime: no amplification claimed
            assert not fmt_closed_form_applies(epsilon0, n, 1e-6)
            assert value == epsilon0
        else:
            assert value == pytest.approx(expected, abs=5e-4)


def test_closed_form_is_the_conservative_code_form() -> None:
    """The code's factor (1 − e^{−ε₀})/(1 + e^{−ε₀−ε̃}) exceeds the quoted tanh(ε₀/2)."""
    epsilon0, n, delta = 4.0, 10**5, 1e-6
    a = 8 * math.sqrt(math.exp(epsilon0) * math.log(4 / delta) / n)
    c = 8 * math.exp(epsilon0) / n
    quoted = math.log1p(math.tanh(epsilon0 / 2) * (a + c))
    assert quoted == pytest.approx(0.5346, abs=5e-5)
    assert fmt_closed_form(epsilon0, n, delta) > quoted


# -- check 2: monotonicity and the clamp --------------------------------------------------------

SIZES = (100, 1000, 10_000, 100_000)
EPSILONS = (0.25, 1.0, 2.0, 4.0, 8.0)
DELTAS = (1e-3, 1e-6, 1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("bound", [numerical_epsilon, fmt_closed_form])
def test_epsilon_falls_with_n_rises_with_epsilon0_and_with_one_over_delta(bound: object) -> None:
    assert callable(bound)
    grid = {(n, e, d): bound(e, n, d) for n in SIZES for e in EPSILONS for d in DELTAS}
    slack = 2e-5  # the binary search's tolerance
    for (n, e, d), value in grid.items():
        assert 0 < value <= e
        bigger_n = SIZES.index(n) + 1
        if bigger_n < len(SIZES):
            assert grid[(SIZES[bigger_n], e, d)] <= value + slack
        bigger_e = EPSILONS.index(e) + 1
        if bigger_e < len(EPSILONS):
            assert grid[(n, EPSILONS[bigger_e], d)] >= value - slack
        smaller_d = DELTAS.index(d) + 1
        if smaller_d < len(DELTAS):
            assert grid[(n, e, DELTAS[smaller_d])] >= value - slack


@pytest.mark.parametrize(("epsilon0", "n"), [(0.1, 1), (1.0, 2), (5.0, 10), (10.0, 1000),
                                             (0.5, 20), (3.0, 10**6)])
def test_never_above_epsilon0(epsilon0: float, n: int) -> None:
    result = central_privacy(epsilon0, n)
    assert result["epsilon"] <= epsilon0
    assert result["numerical_epsilon"] <= epsilon0
    assert result["closed_form_epsilon"] <= epsilon0
    if result["epsilon"] == epsilon0:
        assert result["bound"] == "none"


def test_a_single_report_is_not_amplified() -> None:
    """n = 1: no clones; δ(ε) = (e^{ε₀} − e^ε)/(e^{ε₀} + 1), so ε stays close to ε₀."""
    assert clone_delta(0.5, 1.0, 1) == pytest.approx(
        (math.e - math.exp(0.5)) / (math.e + 1), rel=2e-5)
    assert central_privacy(1.0, 1)["epsilon"] > 0.999


# -- check 3: the numerical bound against exact enumeration -------------------------------------


def test_numerical_bound_is_at_least_the_exact_clone_divergence_and_tight() -> None:
    epsilon0, n = 1.0, 50
    first, second = _clone_model(epsilon0, n)
    assert math.fsum(first.values()) == pytest.approx(1.0, abs=1e-12)
    for step in range(21):
        epsilon = step * 0.05
        exact = _hockey_stick(first, second, epsilon)
        bound = clone_delta(epsilon, epsilon0, n)
        # 1e-18: at ε = ε₀ the exact δ is 0, which the enumeration's exp() rounds to ~1e-21.
        assert bound + 1e-18 >= exact, (epsilon, bound, exact)
        assert bound <= exact * (1 + 1e-3) + 1e-15, (epsilon, bound, exact)  # not vacuous


def test_the_epsilon_found_meets_its_delta_exactly() -> None:
    epsilon0, n = 1.0, 50
    first, second = _clone_model(epsilon0, n)
    for delta in (1e-2, 1e-3, 1e-4):
        epsilon = numerical_epsilon(epsilon0, n, delta)
        assert _hockey_stick(first, second, epsilon) <= delta
        assert _hockey_stick(first, second, epsilon - 1e-3) > delta  # and is nearly the least


@pytest.mark.parametrize("epsilon0", [0.5, 1.0, 2.0])
def test_shuffled_randomized_response_is_within_the_bound(epsilon0: float) -> None:
    """A real mechanism: binary ε₀-RR from n = 40 users, shuffled, is a count of ones. Its
    exact δ(ε), worst case over the others' bits, must lie below the clone-model bound."""
    n = 40
    keep = math.exp(epsilon0) / (math.exp(epsilon0) + 1)

    def count_of_ones(victim: int, others_ones: int) -> dict[object, float]:
        # Σ Bern over the others (others_ones with bit 1), plus the victim's report.
        dist = [1.0]
        bits = [1] * others_ones + [0] * (n - 1 - others_ones) + [victim]
        for bit in bits:
            one = keep if bit else 1 - keep
            dist = [(dist[i] if i < len(dist) else 0.0) * (1 - one)
                    + (dist[i - 1] * one if i >= 1 else 0.0) for i in range(len(dist) + 1)]
        return dict(enumerate(dist))

    for epsilon in (0.1, 0.3, 0.6):
        worst = max(_hockey_stick(count_of_ones(0, j), count_of_ones(1, j), epsilon)
                    for j in range(n))
        assert worst <= clone_delta(epsilon, epsilon0, n)


# -- the result object ----------------------------------------------------------------------------


def test_central_privacy_states_delta_bound_and_assumptions() -> None:
    result = central_privacy(2.0, 10_000)
    assert result["delta"] == default_delta(10_000) == 1e-8
    assert result["delta_rule"] == "min(1/n², 1e-6)"
    assert default_delta(50) == 1e-6
    assert result["bound"] == "numerical"
    assert result["epsilon"] < result["closed_form_epsilon"] < 2.0
    assert result["assumptions"] == list(ASSUMPTIONS)
    assert any("one report" in a for a in result["assumptions"])
    assert any("sybil" in a for a in result["assumptions"])
    assert "Feldman" in result["source"]


@pytest.mark.parametrize(("epsilon0", "n", "delta"), [
    (0.0, 10, 1e-6), (-1.0, 10, 1e-6), (math.inf, 10, 1e-6), (1.0, 0, 1e-6),
    (1.0, 10, 0.0), (1.0, 10, 1.0)])
def test_bad_arguments_are_refused(epsilon0: float, n: int, delta: float) -> None:
    with pytest.raises(ValueError, match="must"):
        central_privacy(epsilon0, n, delta)


def test_the_table_in_the_docs_is_what_the_code_computes() -> None:
    from pathlib import Path

    from chorus_collector.ingest.shuffling import central_table

    docs = (Path(__file__).resolve().parents[2] / "docs" / "shuffler.md").read_text()
    assert central_table() in docs
    assert "python -m chorus_collector.ingest.shuffling" in docs


def test_the_shared_closed_form_does_not_import_numpy() -> None:
    code = ("import sys, chorus_shared.shuffling as s; s.fmt_closed_form(1.0, 10**5, 1e-6); "
            "assert 'numpy' not in sys.modules, 'numpy imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
