"""Record campaigns: exact privacy by enumeration, and unbiasedness, variance and interval
coverage of every answer (MECHANISMS-2.md §2.5 checks 1–4).

The registry-wide tests (test_privacy.py) already enumerate the whole-record ratio of the
example campaigns; here: the attribute-level ratio beside it, RS+FD with its paper's amplified
ε (the doc's numbers), the independence of the sampled index from the record, and, in
model S (records drawn i.i.d. from a joint distribution each repetition), the answers'
calibration: z-test of the mean against the truth, χ² band of the empirical variance against
the mean reported SE², and the binomial band of the 95% intervals' coverage, Bonferroni over
the cells (α = 1e-6, as in helpers/statcheck.py). With R = 2,000 repetitions a bias of 0.2 SE
has z ≈ 8.9 against thresholds of 5.3–5.7 (9 to 74 cells), the variance band is about
[0.83, 1.19] and the coverage band 0.95 ± 0.027. Measured (seeds as below): max |z| 2.5,
variance ratios 0.91–1.10, coverage 0.939–0.963.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.base import Estimator
from chorus_collector.estimators.record import MarginalsEstimator, Table, consistent_tables
from chorus_collector.results.record import IndependenceTest, RecordEstimate
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.domain import domain_from_json
from chorus_shared.mechanisms import Marginals, RandomSamplingFakeData, RecordMechanism
from chorus_shared.mechanisms.record import one_attribute_epsilon
from helpers.recordsim import draw_state, project
from helpers.statcheck import ALPHA, assert_calibrated
from helpers.support import z_threshold


def _domain(*sizes: int) -> dict[str, Any]:
    return {"kind": "record", "attributes": [
        {"name": f"a{i}", "values": [f"v{j}" for j in range(size)]}
        for i, size in enumerate(sizes)]}


def _campaign(mechanism: str, sizes: Sequence[int], epsilon: float,
              params: dict[str, Any] | None = None) -> Campaign:
    return campaign_from_spec({"name": f"{mechanism}-{'x'.join(map(str, sizes))}",
                               "mechanism": mechanism, "epsilon": epsilon,
                               "domain": _domain(*sizes), "params": params or {}})


def _mechanism(name: str, sizes: Sequence[int], epsilon: float,
               params: dict[str, Any] | None = None) -> RecordMechanism:
    mechanism = _campaign(name, sizes, epsilon, params).mechanism
    assert isinstance(mechanism, RecordMechanism)
    return mechanism


# -- Privacy, by enumeration ---------------------------------------------------------------

def _likelihoods(mechanism: RecordMechanism) -> tuple[list[tuple[int, ...]], list[Any],
                                                      np.ndarray]:
    """Every record, every output, and P(output | record) as a records × outputs array."""
    records = list(mechanism.inputs())
    outputs = list(mechanism.outputs())
    table = np.array([[mechanism.output_probability(y, x) for y in outputs] for x in records])
    assert np.allclose(table.sum(axis=1), 1.0, atol=1e-12)
    return records, outputs, table


def _worst_log_ratio(table: np.ndarray, rows: np.ndarray, others: np.ndarray) -> float:
    return float(np.max(np.log(table[rows] / table[others])))


def _whole_record_epsilon(table: np.ndarray) -> float:
    """The worst ln P(y|x)/P(y|x') over all pairs of records (ε-LDP for the record)."""
    return float(np.max(np.log(table.max(axis=0) / table.min(axis=0))))


def _attribute_epsilon(records: Sequence[tuple[int, ...]], table: np.ndarray) -> float:
    """The same worst ratio over records that differ in exactly one attribute."""
    pairs = np.array([(i, j) for i, j in itertools.permutations(range(len(records)), 2)
                      if sum(a != b for a, b in zip(records[i], records[j], strict=True)) == 1])
    return _worst_log_ratio(table, pairs[:, 0], pairs[:, 1])


# (mechanism, attribute sizes, ε, params): k-RR and OUE oracles both appear (smp's 7 values
# and spl's 6 values at ε/2 = 0.25 get OUE; marginals' 9 cells at ε = 0.25 too).
PRIVACY_CASES: list[tuple[str, tuple[int, ...], float, dict[str, Any]]] = [
    ("smp", (3, 4, 2), 1.0, {}), ("smp", (7, 2), 0.5, {}),
    ("spl", (2, 3), 1.0, {}), ("spl", (6, 2), 0.5, {}),
    ("rsfd", (3, 3), 1.0, {}), ("rsfd", (2, 2, 2), 1.0, {}), ("rsfd", (4, 4, 4), 0.5, {}),
    ("rsfd", (3, 4, 2), 1.0, {}),
    ("marginals", (2, 3, 2), 1.0, {}), ("marginals", (3, 3), 0.25, {}),
    ("marginals", (2, 2, 2), 2.0, {"order": 3}),
]


def _attribute_level_expected(mechanism: RecordMechanism) -> float:
    """smp and marginals report an attribute (or a set holding it) at the full ε, spl at
    ε/d; rsfd's one-attribute guarantee is ln(1 + (e^ε − 1)·w_max/Σ w_i), w_i = k_i/(e^ε +
    k_i − 1): ln(1 + (e^ε − 1)/d) when the attributes have one size."""
    eps = mechanism.epsilon
    return {"smp": eps, "marginals": eps, "spl": eps / mechanism.d,
            "rsfd": one_attribute_epsilon(eps, mechanism.domain.sizes)}[mechanism.name]


def _case_id(case: tuple[str, tuple[int, ...], float, dict[str, Any]]) -> str:
    name, sizes, epsilon, params = case
    return f"{name}-{'x'.join(map(str, sizes))}-{epsilon}" + (
        f"-order{params['order']}" if params else "")


@pytest.mark.parametrize(("name", "sizes", "epsilon", "params"), PRIVACY_CASES,
                         ids=[_case_id(c) for c in PRIVACY_CASES])
def test_whole_record_and_attribute_level_ratios_are_exact(
        name: str, sizes: tuple[int, ...], epsilon: float, params: dict[str, Any]) -> None:
    mechanism = _mechanism(name, sizes, epsilon, params)
    assert {o.name for o in mechanism.oracles} <= {"krr", "oue"}
    records, _, table = _likelihoods(mechanism)
    assert _whole_record_epsilon(table) == pytest.approx(epsilon, rel=1e-9)
    assert _attribute_epsilon(records, table) == pytest.approx(
        _attribute_level_expected(mechanism), rel=1e-9)
    if isinstance(mechanism, RandomSamplingFakeData):
        # The published figure is the enumerated one, whatever the attributes' sizes.
        assert mechanism.describe()["epsilon_one_attribute"] == pytest.approx(
            _attribute_epsilon(records, table), rel=1e-12, abs=1e-12)


def test_privacy_cases_cover_both_oracles() -> None:
    names = {o.name for name, sizes, eps, params in PRIVACY_CASES
             for o in _mechanism(name, sizes, eps, params).oracles}
    assert names == {"krr", "oue"}


@pytest.mark.parametrize(("d", "k", "epsilon", "amplified"), [
    (2, 3, 1.0, 1.4899), (3, 2, 1.0, 1.8172), (3, 4, 0.5, 1.0805)])
def test_rsfd_at_its_papers_amplified_epsilon_is_only_attribute_level_epsilon(
        d: int, k: int, epsilon: float, amplified: float) -> None:
    """MECHANISMS-2.md §2.1: RS+FD[GRR] with k-RR at ε' = ln(d(e^ε − 1) + 1) is ε-LDP only
    between records differing in one attribute; two records differing in all of them are
    told apart at exactly ε'. This is why Chorus runs k-RR at, and charges, the true ε."""
    record = domain_from_json(_domain(*[k] * d))
    prime = math.log(d * math.expm1(epsilon) + 1)
    paper = RandomSamplingFakeData.resolve(epsilon=prime, domain=record, params={})
    records, _, table = _likelihoods(paper)
    whole = _whole_record_epsilon(table)
    assert whole == pytest.approx(prime, rel=1e-9)
    assert round(whole, 4) == amplified  # the doc's enumerated numbers
    assert _attribute_epsilon(records, table) == pytest.approx(epsilon, rel=1e-9)
    # Chorus's rsfd at ε: the whole record at ε, one attribute at the weaker figure.
    chorus = RandomSamplingFakeData.resolve(epsilon=epsilon, domain=record, params={})
    records, _, table = _likelihoods(chorus)
    assert _whole_record_epsilon(table) == pytest.approx(epsilon, rel=1e-9)
    assert _attribute_epsilon(records, table) == pytest.approx(
        one_attribute_epsilon(epsilon, [k] * d), rel=1e-9)


@pytest.mark.parametrize(("sizes", "epsilon", "audited"), [
    ((2, 2, 2, 8), 2.0, 1.334), ((2, 9), 2.0, 1.712), ((2, 3, 7), 1.5, None),
    ((5, 2), 0.3, None), ((2, 2, 4), 0.5, None)])
def test_rsfd_publishes_the_exact_one_attribute_epsilon_for_unequal_sizes(
        sizes: tuple[int, ...], epsilon: float, audited: float | None) -> None:
    """derived.epsilon_one_attribute is the worst ln P(y|x)/P(y|x') over every output and
    every pair of records that differ in exactly one attribute, enumerated from the
    mechanism's own output_probability. The paper's ln(1 + (e^ε − 1)/d) holds only for
    attributes of one size: it understates sizes (2, 2, 2, 8) at ε = 2 (0.954 against the
    exact 1.334) and (2, 9) (1.434 against 1.712)."""
    mechanism = _mechanism("rsfd", sizes, epsilon)
    records, _, table = _likelihoods(mechanism)
    enumerated = _attribute_epsilon(records, table)
    published = mechanism.describe()["epsilon_one_attribute"]
    assert published == pytest.approx(enumerated, rel=0, abs=1e-9)
    assert _whole_record_epsilon(table) == pytest.approx(epsilon, rel=1e-9)  # unchanged
    equal_sizes = math.log1p(math.expm1(epsilon) / len(sizes))
    assert enumerated > equal_sizes + 1e-3  # the old, equal-size figure would fail here
    if audited is not None:
        assert round(published, 3) == audited


@pytest.mark.parametrize(("d", "k", "epsilon"), [(2, 3, 1.0), (3, 2, 1.0), (3, 4, 0.5),
                                                 (4, 8, 2.0), (2, 255, 0.1)])
def test_rsfd_one_attribute_epsilon_for_one_size_is_the_papers_to_the_bit(
        d: int, k: int, epsilon: float) -> None:
    """With every attribute of size k the exact figure is ln(1 + (e^ε − 1)/d), bit for bit,
    so the configs of such campaigns state the same number as before."""
    assert one_attribute_epsilon(epsilon, [k] * d) == math.log1p(math.expm1(epsilon) / d)


SAMPLED_INDEX_CASES = [c for c in PRIVACY_CASES if c[0] in ("smp", "marginals")]


@pytest.mark.parametrize(("name", "sizes", "epsilon", "params"), SAMPLED_INDEX_CASES,
                         ids=[_case_id(c) for c in SAMPLED_INDEX_CASES])
def test_the_sampled_index_is_independent_of_the_record(
        name: str, sizes: tuple[int, ...], epsilon: float, params: dict[str, Any]) -> None:
    """P(index = j | record) = 1/d (smp's attribute) or 1/m (marginals' set) for every
    record: the index sent in the clear says nothing about the values."""
    mechanism = _mechanism(name, sizes, epsilon, params)
    key = "a" if name == "smp" else "s"
    choices = len(mechanism.sets) if isinstance(mechanism, Marginals) else mechanism.d
    _, outputs, table = _likelihoods(mechanism)
    index = np.array([y[key] for y in outputs])
    for j in range(choices):
        assert np.allclose(table[:, index == j].sum(axis=1), 1 / choices, atol=1e-12)


# -- Unbiasedness, variance and coverage (model S) -----------------------------------------

REPETITIONS = 2_000


def _joint(sizes: Sequence[int], seed: int) -> np.ndarray:
    """A joint distribution with dependent attributes and no cell below 0.2/cells (so the
    variance's plug-in rates are never clipped)."""
    rng = np.random.default_rng(seed)
    cells = math.prod(sizes)
    return (0.8 * rng.dirichlet(np.full(cells, 2.0)) + 0.2 / cells).reshape(sizes)


def _truth_conditionals(joint2: np.ndarray) -> np.ndarray:
    """P(second | first) then P(first | second), in the order of the answer's cells."""
    given_first = joint2 / joint2.sum(axis=1, keepdims=True)
    given_second = (joint2 / joint2.sum(axis=0, keepdims=True)).T
    return np.concatenate((given_first.ravel(), given_second.ravel()))


def _answers(result: object) -> dict[str, np.ndarray]:
    """Estimate, SE and interval of every marginal row, joint cell and conditional cell, as
    (4, cells) arrays keyed by kind."""
    assert isinstance(result, RecordEstimate)
    rows = [(r.frequency, r.frequency_std_error, r.frequency_ci_low, r.frequency_ci_high)
            for m in result.marginals for r in m.rows]
    out = {"marginals": np.array(rows).T}
    cells = [(c.frequency, c.std_error, c.ci_low, c.ci_high)
             for j in result.joints for c in j.cells]
    if cells:
        out["joints"] = np.array(cells).T
    conditionals = [(c.frequency, c.std_error, c.ci_low, c.ci_high)
                    for j in result.joints for cond in j.conditionals for c in cond.cells]
    if conditionals:
        out["conditionals"] = np.array(conditionals).T
    return out


def _truth(mechanism: RecordMechanism, joint: np.ndarray,
           joints: Sequence[tuple[int, ...]]) -> dict[str, np.ndarray]:
    out = {"marginals": np.concatenate([project(joint, [a]) for a in range(mechanism.d)])}
    if joints:
        out["joints"] = np.concatenate([project(joint, j).ravel() for j in joints])
        pairs = [project(joint, j) for j in joints if len(j) == 2]
        out["conditionals"] = np.concatenate([_truth_conditionals(p) for p in pairs])
    return out


def assert_coverage(inside: np.ndarray, label: str) -> None:
    """The 95% intervals' coverage per cell, within the binomial band (Bonferroni)."""
    reps, cells = inside.shape
    coverage = inside.mean(axis=0)
    band = z_threshold(ALPHA, cells) * math.sqrt(0.95 * 0.05 / reps)
    assert np.all(np.abs(coverage - 0.95) < band), \
        f"{label}: coverage {np.round(coverage, 3)} outside 0.95 ± {band:.3f}"


class _AnswersOnlyEstimator(MarginalsEstimator):
    """The real marginals estimator with each pair's independence test left out of
    ``finalize``: the calibration tests here read the marginals, joints and conditionals
    only, and the simulated Wald test took about 60% of every finalize (its size and power
    are test_record_independence.py's subject). Everything these tests check still runs
    through the real ``finalize``, ``combined``, ``joint_answer`` and ``conditional``."""

    def independence(self, mechanism: Marginals, tables: Sequence[tuple[Table, int]],
                     state: np.ndarray, attributes: Sequence[int],
                     table: Table | None = None) -> IndependenceTest | None:
        return None


def _answers_estimator(mechanism: RecordMechanism) -> Estimator[Any]:
    return _AnswersOnlyEstimator() if isinstance(mechanism, Marginals) \
        else estimator_for(mechanism.name)


def _calibration(campaign: Campaign, joint: np.ndarray, n: int,
                 joints: Sequence[tuple[int, ...]], seed: int,
                 reps: int = REPETITIONS) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """R repetitions of exact state draws through the real ``finalize``; checks every kind of
    answer and returns the (estimates, truth) per kind for further checks."""
    mechanism = campaign.mechanism
    assert isinstance(mechanism, RecordMechanism)
    estimator = _answers_estimator(mechanism)
    names = mechanism.domain.names
    query = Query(joints=tuple(tuple(names[a] for a in j) for j in joints))
    rng = np.random.default_rng(seed)
    runs = [_answers(estimator.finalize(campaign, n, draw_state(mechanism, joint, n, rng),
                                        query)) for _ in range(reps)]
    truth = _truth(mechanism, joint, joints)
    out = {}
    for kind, values in truth.items():
        stacked = np.stack([run[kind] for run in runs])  # reps × 4 × cells
        estimates, se, low, high = (stacked[:, i] for i in range(4))
        assert_calibrated(estimates, se**2, values)
        assert_coverage((low <= values) & (values <= high), f"{campaign.name} {kind}")
        out[kind] = (estimates, values)
    return out


# Each oracle kind appears: smp's 12-value attribute and spl's 8-value one (at ε/3) get OUE,
# marginals' 12-cell sets get OUE and their 6- and 8-cell sets k-RR (at ε = 1).
MARGINAL_CASES = [("smp", (3, 12, 2), 1.0, 60_000), ("spl", (3, 8, 2), 2.0, 20_000),
                  ("rsfd", (3, 4, 2), 1.0, 20_000)]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "sizes", "epsilon", "n"), MARGINAL_CASES,
                         ids=[c[0] for c in MARGINAL_CASES])
def test_marginals_are_unbiased_calibrated_and_covered(
        name: str, sizes: tuple[int, ...], epsilon: float, n: int) -> None:
    campaign = _campaign(name, sizes, epsilon)
    assert {o.name for o in _mechanism(name, sizes, epsilon).oracles} == (
        {"krr"} if name == "rsfd" else {"krr", "oue"})
    _calibration(campaign, _joint(sizes, seed=len(sizes) * 7 + sizes[1]), n, [], seed=11)


def _all_joints(mechanism: Marginals) -> list[tuple[int, ...]]:
    return [s for size in range(2, mechanism.order + 1)
            for s in itertools.combinations(range(mechanism.d), size)]


# Conditionals are ratios, unbiased only to O(1/n): n is large enough (each set's reports
# ~10⁵) that their delta-method bias is a small fraction of the z-test's resolution SE/√R.
@pytest.mark.slow
@pytest.mark.parametrize(("sizes", "epsilon", "order", "n"),
                         [((3, 4, 2), 1.0, 2, 300_000), ((2, 3, 2, 2), 1.0, 3, 400_000)],
                         ids=["order2", "order3"])
def test_marginals_joints_and_conditionals_are_unbiased_calibrated_and_covered(
        sizes: tuple[int, ...], epsilon: float, order: int, n: int) -> None:
    campaign = _campaign("marginals", sizes, epsilon, {"order": order})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Marginals)
    assert {o.name for o in mechanism.oracles} == {"krr", "oue"}
    # Every pair lies in more than one set at order 3: its joint and marginals combine them.
    assert order == 2 or all(len(MarginalsEstimator().holders(mechanism, pair)) == 2
                             for pair in itertools.combinations(range(mechanism.d), 2))
    joints = _all_joints(mechanism)
    _calibration(campaign, _joint(sizes, seed=3 + order), n, joints, seed=12 + order)


# -- The same through the real simulator and map (a smaller R) -----------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", ["smp", "spl", "rsfd", "marginals"])
def test_answers_through_the_simulator_and_map_are_calibrated(name: str) -> None:
    """The exact state draws above stand for map(simulate(records)); this runs that path
    (the real per-report samplers and ``map``) and checks the same calibration at R = 200.
    The first repetition's reports also go through ``check_payload`` (every one of them)."""
    sizes, n, reps = (3, 4, 2), 3_000, 200
    campaign = _campaign(name, sizes, 1.0)
    mechanism = campaign.mechanism
    assert isinstance(mechanism, RecordMechanism)
    estimator = _answers_estimator(mechanism)
    joint = _joint(sizes, seed=40)
    rng = np.random.default_rng(41)
    joints = _all_joints(mechanism) if isinstance(mechanism, Marginals) else []
    names = mechanism.domain.names
    query = Query(joints=tuple(tuple(names[a] for a in j) for j in joints))
    truth = _truth(mechanism, joint, joints)
    runs = []
    for rep in range(reps):
        cells = rng.choice(joint.size, size=n, p=joint.ravel())
        records = np.stack(np.unravel_index(cells, sizes), axis=1)
        payloads = list(simulate(mechanism, records, rng))
        state = estimator.map(mechanism, payloads)
        if rep == 0:
            # The simulator's reports pass the wire check and map reads them alike; checking
            # every report of every repetition took 85% of this test.
            checked = [mechanism.check_payload(p) for p in payloads]
            assert np.array_equal(estimator.map(mechanism, checked), state)
        runs.append(_answers(estimator.finalize(campaign, n, state, query)))
    # Conditionals at n = 3,000 are too far from their asymptotics to test here.
    for kind in ("marginals", "joints") if joints else ("marginals",):
        stacked = np.stack([run[kind] for run in runs])
        assert_calibrated(stacked[:, 0], stacked[:, 1] ** 2, truth[kind])


# -- CALM-style consistency ----------------------------------------------------------------

@pytest.mark.parametrize(("sizes", "order", "epsilon"),
                         [((3, 4, 2), 2, 1.0), ((2, 3, 2, 2), 3, 1.0), ((3, 3, 3, 2), 2, 0.5)],
                         ids=["order2", "order3", "four-attributes"])
def test_consistent_postprocessing_agrees_on_shared_attributes_and_is_a_distribution(
        sizes: tuple[int, ...], order: int, epsilon: float) -> None:
    """MECHANISMS-2.md §2.5 check 4: after "consistent", every projection of a shared subset
    agrees across the sets that hold it (to 1e-9), every cell is ≥ 0 and each table sums to
    1; the answer's marginals and joints are read from those tables. Few reports, so the
    unbiased tables do have negative cells and disagree."""
    campaign = _campaign("marginals", sizes, epsilon, {"order": order})
    mechanism = campaign.mechanism
    assert isinstance(mechanism, Marginals)
    estimator = MarginalsEstimator()
    rng = np.random.default_rng(13)
    joint = _joint(sizes, seed=14)
    names = mechanism.domain.names
    for _ in range(5):
        state = draw_state(mechanism, joint, 1_500, rng)
        raw = estimator.set_tables(mechanism, state)
        assert min(float(t.f.min()) for t, _ in raw) < 0  # there is something to fix
        tables = consistent_tables(mechanism, raw, estimator)
        for table in tables:
            assert float(table.min()) >= 0.0
            assert float(table.sum()) == pytest.approx(1.0, abs=1e-9)
        for size in range(1, order):
            for subset in itertools.combinations(range(mechanism.d), size):
                projections = [project(tables[s], [mechanism.sets[s].index(a) for a in subset])
                               for s in estimator.holders(mechanism, subset)]
                for other in projections[1:]:
                    assert np.max(np.abs(other - projections[0])) < 1e-9, subset
        answer = estimator.finalize(campaign, 1_500, state, Query(
            postprocessing="consistent", joints=tuple(
                (names[a], names[b]) for a, b in itertools.combinations(range(mechanism.d), 2))))
        assert answer.postprocessing.startswith("consistent")
        marginals = [np.array([r.frequency for r in m.rows]) for m in answer.marginals]
        for m in marginals:
            assert np.all(m >= 0) and m.sum() == pytest.approx(1.0, abs=1e-9)
        for j in answer.joints:
            a, b = (names.index(x) for x in j.attributes)
            cells = np.array([c.frequency for c in j.cells]).reshape(j.shape)
            assert np.all(cells >= 0)
            assert np.allclose(cells.sum(axis=1), marginals[a], atol=1e-9)
            assert np.allclose(cells.sum(axis=0), marginals[b], atol=1e-9)


def test_record_state_draws_match_the_mechanisms_expected_counts() -> None:
    """The helper's exact draws (tests/helpers/recordsim.py) against the mechanism itself:
    for a fixed record, the mean state over many draws matches Σ_y P(y|x)·map({y}) computed
    from ``output_probability`` (z-test, Bonferroni over the state's entries)."""
    rng = np.random.default_rng(21)
    draw = random.Random(22)
    for name, sizes, eps, params in PRIVACY_CASES:
        mechanism = _mechanism(name, sizes, eps, params)
        estimator = estimator_for(name)
        outputs = list(mechanism.outputs())
        record = tuple(draw.randrange(k) for k in sizes)
        joint = np.zeros(sizes)
        joint[record] = 1.0
        per_output = np.array([estimator.map(mechanism, [y]) for y in outputs], dtype=float)
        probability = np.array([mechanism.output_probability(y, record) for y in outputs])
        mean = probability @ per_output
        spread = probability @ per_output**2 - mean**2
        reps = 4_000
        states = np.array([draw_state(mechanism, joint, 1, rng) for _ in range(reps)])
        live = spread > 0
        assert np.array_equal(states.mean(axis=0)[~live], mean[~live]), name
        z = (states.mean(axis=0)[live] - mean[live]) / np.sqrt(spread[live] / reps)
        assert np.max(np.abs(z)) < z_threshold(ALPHA, int(live.sum())), (name, np.round(z, 2))
