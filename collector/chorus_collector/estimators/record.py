"""Record estimates: marginals, joint and conditional frequencies, independence tests.

Every unbiased table here (one attribute's marginal, a collected marginal's cells) is a
:class:`Table`: the estimate f̂ and its covariance diag(v) − U·Uᵀ. That form is exact for one
oracle's reports under i.i.d. sampling (k-RR: Cov = (diag(λ) − λλᵀ)/(n(p−q)²); OUE:
Var f̂_v = λ_v(1−λ_v)/(n(p−q)²) and Cov(f̂_v, f̂_w) = −π_vπ_w/n, since OUE's bits are
independent given the value), survives summing cells (a projection) and combining independent
user groups (U gains columns). Standard errors of projections, weighted combinations and
ratios (conditional frequencies: the delta method's SE, Fieller's interval, "not estimable
at this n" where the row total is not told apart from 0) all come from it: propagated, never
assumed.

* ``smp``: attribute j's marginal from the n_j reports that sampled it (model S: those
  reports are an i.i.d. sample, so the sampling term of MECHANISMS-2.md §2.1 is in the n_j).
* ``spl``: each attribute from all n reports at ε/d.
* ``rsfd``: f̂ = d(N_v/n − q/d − (d−1)/(dk))/(p − q), Var = d²σ(1−σ)/(n(p−q)²).
* ``marginals``: each collected set's cells from its own reports; a smaller marginal is the
  inverse-variance combination of its projections from every set that holds it, with weights
  fixed by the design (not the data), so it stays unbiased.

Independence of two attributes (MECHANISMS-2.md §2.4, erratum §8.5): when one k-RR marginal of
exactly those two attributes holds them, Pearson's χ² on its *report* counts against the
maximum-likelihood fit of independent marginals (EM on the reports), (k₁−1)(k₂−1) df. Otherwise
(OUE reports, or pairs inside larger sets) a Wald test of f = f₁⊗f₂ with the propagated
covariance, its null distribution simulated (``independence``). Every test states its power
against associations of Cohen's w = 0.1 and 0.3. A χ² on the debiased counts would have the
wrong size; it is not offered.
"""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

# scipy.special, not scipy.stats: stats takes half a second to import and pulls in pandas (and
# with it pyarrow) where they are installed; chdtrc is the same χ² survival function.
from scipy.special import chdtrc

from chorus_collector.estimators.base import Estimator, MechanismTypes, Query, QueryError
from chorus_collector.estimators.consistency import (
    LABELS,
    norm_mul,
    norm_sub,
    simplex_projection,
)
from chorus_collector.estimators.independence import (
    CALIBRATED_MAX_CELLS,
    calibrated_wald,
    table_power,
)
from chorus_collector.estimators.krr import KRREstimator
from chorus_collector.estimators.unary import UnaryEstimator
from chorus_collector.results.estimates import Z95, FrequencyRow
from chorus_collector.results.record import (
    NOT_ESTIMABLE,
    Cell,
    Conditional,
    IndependenceTest,
    Joint,
    Marginal,
    RecordEstimate,
)
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import (
    KRR,
    Marginals,
    PureOracle,
    RandomSamplingFakeData,
    RecordMechanism,
    SampledAttribute,
    SplitBudget,
)

__all__ = ["MAX_DEFAULT_JOINTS", "MAX_WALD_CELLS", "Table", "pearson_independence",
           "wald_independence"]

#: Without ``joint=``, a marginals campaign answers every pair of attributes up to this many.
MAX_DEFAULT_JOINTS = 10
#: The Wald test simulates its null distribution; past this many cells it is not offered.
MAX_WALD_CELLS = CALIBRATED_MAX_CELLS
EM_TOLERANCE = 1e-10
EM_MAX_STEPS = 20_000
#: A share below this, pushed down by the likelihood, is held at 0 by the Newton step.
NEAR_ZERO = 1e-3
#: Newton solves a (k₁ + k₂)² system per step; past this many shares EM runs alone (k-RR has
#: such joint domains only at large ε, where EM converges in tens of steps).
NEWTON_MAX_SHARES = 256

#: How many design variances (:meth:`MarginalsEstimator.design_variance`) are remembered.
DESIGN_VARIANCE_MEMO = 4_096
_DESIGN_VARIANCES: dict[tuple[Any, ...], float] = {}
#: How many sets' tables at the uniform distribution (the design variance's input) are kept.
UNIFORM_TABLE_MEMO = 64
_UNIFORM_TABLES: dict[tuple[Any, ...], Table] = {}

#: The post-processing methods that map one table onto the probability simplex.
SIMPLEX_METHODS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "norm-sub": norm_sub, "norm-mul": norm_mul, "projection": simplex_projection}

#: Options applied to the joints (and the conditionals read from them) as well as the
#: marginals. Not norm-mul: on a joint with many empty cells its rescaling raised even the
#: error summed over the cells (1.64×, up to 27× for one cell; docs/mechanisms/records.md),
#: so under norm-mul the joints and conditionals stay unbiased.
JOINT_METHODS = ("norm-sub", "projection")


def postprocessing_note(method: str, changed: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """What a record answer's post-processing changed, improves and may harm (issue 34)."""
    if method == "none":
        return {}, []
    improves = "the error summed over each table's values and the shares of rare or absent " \
               "values"
    marginal = "2.8x" if method == "norm-mul" else "1.4x"
    may_harm = f"the share of a single common value or cell (measured up to {marginal} the " \
               "unbiased MSE for a marginal's value, 2.5x for a joint's cell)"
    extra = {"postprocessed": list(changed), "postprocessing_improves": improves,
             "postprocessing_may_harm": may_harm}
    text = f"{method}: lowers {improves} of the {', '.join(changed)}, but may raise the " \
           f"error of {may_harm}"
    if method == "norm-mul":  # rescaling, not shifting: it can cost a little even in sum
        text += "; where few estimates are negative it can raise a marginal's summed error " \
                "slightly (up to 3% measured)"
        if changed == ["marginals"]:
            text += "; joints and conditionals are the unbiased ones (norm-mul raised a " \
                    "joint's summed error)"
    return extra, [text]


VARIANCE_MODEL = ("iid-sampling: each table's covariance diag(v) − UUᵀ from its reports, "
                  "propagated through sums, combinations and ratios")
CONSISTENT_LABEL = ("consistent: the collected marginals made to agree on shared attributes "
                    "(inverse-variance weights) and non-negative, iterated as in CALM (biased)")


@dataclass(frozen=True)
class Table:
    """An unbiased estimate ``f`` (any shape) with covariance diag(v) − U·Uᵀ over the flattened
    cells; ``u`` has the table's shape plus one trailing axis (one column per component)."""

    f: np.ndarray
    v: np.ndarray
    u: np.ndarray

    @property
    def variance(self) -> np.ndarray:
        variance: np.ndarray = np.maximum(self.v - np.sum(self.u**2, axis=-1), 0.0)
        return variance

    @property
    def std_error(self) -> np.ndarray:
        std_error: np.ndarray = np.sqrt(self.variance)
        return std_error

    def project(self, keep: Sequence[int]) -> Table:
        """The table of the axes ``keep`` (in that order), the others summed out."""
        drop, order = _projection_axes(self.f.ndim, keep)
        return Table(_summed_out(self.f, drop, order), _summed_out(self.v, drop, order),
                     _summed_out(self.u, drop, (*order, len(keep))))

    def projected_variance(self, keep: Sequence[int]) -> np.ndarray:
        """``self.project(keep).variance`` to the bit, without projecting ``f``: the design
        variance needs only this, for every attribute subset of every set."""
        drop, order = _projection_axes(self.f.ndim, keep)
        v = _summed_out(self.v, drop, order)
        u = _summed_out(self.u, drop, (*order, len(keep)))
        variance: np.ndarray = np.maximum(v - np.sum(u**2, axis=-1), 0.0)
        return variance

    def covariance(self) -> np.ndarray:
        """The dense covariance of the flattened cells (small tables only)."""
        u = self.u.reshape(self.f.size, -1)
        covariance: np.ndarray = np.diag(self.v.ravel()) - u @ u.T
        return covariance

    def reshaped(self, shape: tuple[int, ...]) -> Table:
        """A flat table (one oracle's cells) as the joint table of ``shape``, row-major."""
        return Table(self.f.reshape(shape), self.v.reshape(shape),
                     self.u.reshape((*shape, -1)))

    def scaled(self, w: float) -> Table:
        return Table(w * self.f, w * w * self.v, w * self.u)


def _projection_axes(ndim: int, keep: Sequence[int]) -> tuple[tuple[int, ...],
                                                                tuple[int, ...]]:
    """The axes a projection on ``keep`` sums out, and the transpose that puts the kept ones
    in the caller's order (each kept axis's rank among ``keep``: what
    argsort(argsort(keep)) gives, in Python, as these run per table and per answer)."""
    drop = tuple(a for a in range(ndim) if a not in keep)
    ascending = sorted(keep)
    return drop, tuple(ascending.index(a) for a in keep)


def _summed_out(x: np.ndarray, drop: tuple[int, ...], order: tuple[int, ...]) -> np.ndarray:
    # np.add.reduce is what np.sum calls for an ndarray (the same reduction, to the bit),
    # without its keyword wrapping, which cost more than the sum of these small tables.
    summed: np.ndarray = np.transpose(np.add.reduce(x, axis=drop), order)
    return summed


def combine(tables: Sequence[Table], weights: Sequence[float]) -> Table:
    """Σ w_s·table_s for independent tables (Σ w = 1 keeps it unbiased)."""
    parts = [t.scaled(w) for t, w in zip(tables, weights, strict=True)]
    return Table(np.sum([p.f for p in parts], axis=0), np.sum([p.v for p in parts], axis=0),
                 np.concatenate([p.u for p in parts], axis=-1))


def oracle_table(oracle: PureOracle, counts: np.ndarray, n: int) -> Table:
    """The unbiased frequencies of ``n`` reports of ``oracle`` from their support counts."""
    p, q = oracle.support_probabilities()
    gap = p - q
    size = len(counts)
    if n <= 0:
        nan = np.full(size, np.nan)
        return Table(nan, np.full(size, np.inf), np.zeros((size, 1)))
    share = counts / n
    f = (share - q) / gap
    # The true support rate lies in [q, p]: clipping the plug-in keeps the variance positive.
    rate = np.clip(share, q, p)
    if isinstance(oracle, KRR):
        return Table(f, rate / (n * gap**2), (rate / (math.sqrt(n) * gap))[:, None])
    present = np.clip(f, 0.0, 1.0)
    return Table(f, rate * (1 - rate) / (n * gap**2) + present**2 / n,
                 (present / math.sqrt(n))[:, None])


def rsfd_table(oracle: KRR, d: int, counts: np.ndarray, n: int) -> Table:
    """RS+FD[GRR] for one attribute: the sampled report (1/d) mixed with uniform fakes."""
    p, q = oracle.support_probabilities()
    k = len(counts)
    gap = p - q
    base = q / d + (d - 1) / (d * k)
    share = counts / n
    f = d * (share - base) / gap
    rate = np.clip(share, base, base + gap / d)
    return Table(f, rate * d * d / (n * gap**2), (rate * d / (math.sqrt(n) * gap))[:, None])


def _oracle_counts(oracle: PureOracle, payloads: Sequence[Any]) -> np.ndarray:
    if isinstance(oracle, KRR):
        return KRREstimator().map(oracle, payloads)
    return UnaryEstimator().map(oracle, payloads)  # type: ignore[arg-type]


def _grouped_counts(oracles: Sequence[PureOracle], payloads: Sequence[Any],
                    key: str) -> np.ndarray:
    """For payloads {key: i, "y": report} of one of several oracles: per oracle, the number
    of its reports followed by their support counts."""
    groups: list[list[Any]] = [[] for _ in oracles]
    for payload in payloads:
        groups[payload[key]].append(payload["y"])
    return np.concatenate([np.concatenate(([len(g)], _oracle_counts(o, g)))
                           for o, g in zip(oracles, groups, strict=True)]).astype(np.int64)


class RecordEstimator(Estimator[RecordMechanism]):
    """What the record estimators share: state layout by blocks, answering, post-processing."""

    mechanism_type: ClassVar[MechanismTypes] = RecordMechanism
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "norm-mul", "projection")

    @abstractmethod
    def blocks(self, mechanism: RecordMechanism) -> list[int]:
        """The state's blocks: one per oracle, each [reports, support counts…] or counts."""

    def state_size(self, mechanism: RecordMechanism) -> int:
        return sum(self.blocks(mechanism))

    def split(self, mechanism: RecordMechanism, state: np.ndarray) -> list[np.ndarray]:
        ends = np.cumsum(self.blocks(mechanism))
        return [state[end - size:end] for end, size in zip(ends, self.blocks(mechanism),
                                                           strict=True)]

    @abstractmethod
    def marginal_tables(self, mechanism: RecordMechanism, n: int,
                        state: np.ndarray) -> list[tuple[Table, int]]:
        """Each attribute's unbiased marginal and the number of reports it rests on."""

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> RecordEstimate:
        mechanism = self.mechanism_of(campaign)
        if query.joints:
            raise QueryError("invalid-query",
                             f"{mechanism.name} estimates each attribute's marginal only; joint "
                             "and conditional frequencies need a campaign with mechanism "
                             "'marginals'")
        record = mechanism.domain
        note = postprocessing_note(query.postprocessing, ["marginals"])
        marginals = []
        for name, attribute, (table, reports) in zip(
                record.names, record.attributes, self.marginal_tables(mechanism, n, state),
                strict=True):
            marginals.append(Marginal(name, _rows(attribute.values, table, reports,
                                                  query.postprocessing), reports))
        return RecordEstimate(
            campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
            attributes=list(record.names), marginals=marginals, joints=[],
            variance_model=VARIANCE_MODEL, method=self.method(mechanism), window=query.window,
            postprocessing=LABELS.get(query.postprocessing, "none (unbiased)"),
            extra=note[0], warnings=_empty_warnings(marginals) + note[1])

    @abstractmethod
    def method(self, mechanism: RecordMechanism) -> str:
        """How the answer was computed, in words."""


def _rows(values: Sequence[str], table: Table, reports: int, method: str) -> list[FrequencyRow]:
    se = table.std_error
    rows = [FrequencyRow.from_frequency(v, float(f), float(s), reports)
            for v, f, s in zip(values, table.f, se, strict=True)]
    if method in ("none", "consistent") or not np.all(np.isfinite(table.f)):
        return rows
    adjusted = SIMPLEX_METHODS[method](table.f)
    return [row.postprocessed(float(x), reports) for row, x in zip(rows, adjusted, strict=True)]


def _empty_warnings(marginals: Sequence[Marginal]) -> list[str]:
    return [f"no report in this window sampled attribute {m.attribute!r}: its marginal is "
            "unknown" for m in marginals if m.reports == 0]


class SampledAttributeEstimator(RecordEstimator):
    name: ClassVar[str] = "smp"
    mechanism_type: ClassVar[MechanismTypes] = SampledAttribute

    def blocks(self, mechanism: RecordMechanism) -> list[int]:
        return [1 + k for k in mechanism.domain.sizes]

    def map(self, mechanism: RecordMechanism, payloads: Sequence[Any]) -> np.ndarray:
        return _grouped_counts(mechanism.oracles, payloads, "a")

    def marginal_tables(self, mechanism: RecordMechanism, n: int,
                        state: np.ndarray) -> list[tuple[Table, int]]:
        out = []
        for oracle, block in zip(mechanism.oracles, self.split(mechanism, state), strict=True):
            reports = int(block[0])
            out.append((oracle_table(oracle, block[1:].astype(np.float64), reports), reports))
        return out

    def method(self, mechanism: RecordMechanism) -> str:
        return ("smp: one attribute per report, drawn uniformly, at the full ε; each marginal "
                "from the reports that sampled its attribute")


class SplitBudgetEstimator(RecordEstimator):
    name: ClassVar[str] = "spl"
    mechanism_type: ClassVar[MechanismTypes] = SplitBudget

    def blocks(self, mechanism: RecordMechanism) -> list[int]:
        return list(mechanism.domain.sizes)

    def map(self, mechanism: RecordMechanism, payloads: Sequence[Any]) -> np.ndarray:
        return np.concatenate([_oracle_counts(o, [p["y"][j] for p in payloads])
                               for j, o in enumerate(mechanism.oracles)]).astype(np.int64)

    def marginal_tables(self, mechanism: RecordMechanism, n: int,
                        state: np.ndarray) -> list[tuple[Table, int]]:
        return [(oracle_table(o, block.astype(np.float64), n), n) for o, block in
                zip(mechanism.oracles, self.split(mechanism, state), strict=True)]

    def method(self, mechanism: RecordMechanism) -> str:
        return "spl: every attribute in every report, each at ε/d"


class RandomSamplingFakeDataEstimator(RecordEstimator):
    name: ClassVar[str] = "rsfd"
    mechanism_type: ClassVar[MechanismTypes] = RandomSamplingFakeData

    def blocks(self, mechanism: RecordMechanism) -> list[int]:
        return list(mechanism.domain.sizes)

    def map(self, mechanism: RecordMechanism, payloads: Sequence[Any]) -> np.ndarray:
        if not payloads:
            return np.zeros(sum(mechanism.domain.sizes), dtype=np.int64)
        reports = np.array([p["y"] for p in payloads], dtype=np.int64)
        return np.concatenate([np.bincount(reports[:, j], minlength=k) for j, k in
                               enumerate(mechanism.domain.sizes)]).astype(np.int64)

    def marginal_tables(self, mechanism: RecordMechanism, n: int,
                        state: np.ndarray) -> list[tuple[Table, int]]:
        assert isinstance(mechanism, RandomSamplingFakeData)
        return [(rsfd_table(o, mechanism.d, block.astype(np.float64), n), n) for o, block in
                zip(mechanism.krr_oracles, self.split(mechanism, state), strict=True)]

    def method(self, mechanism: RecordMechanism) -> str:
        return ("rsfd: one attribute per report by k-RR at ε, the others uniform fakes; ε is "
                "the whole-record guarantee")


class MarginalsEstimator(RecordEstimator):
    name: ClassVar[str] = "marginals"
    mechanism_type: ClassVar[MechanismTypes] = Marginals
    postprocessing: ClassVar[tuple[str, ...]] = ("none", "norm-sub", "norm-mul", "projection",
                                                 "consistent")

    def blocks(self, mechanism: RecordMechanism) -> list[int]:
        assert isinstance(mechanism, Marginals)
        return [1 + mechanism.cells(s) for s in mechanism.sets]

    def map(self, mechanism: RecordMechanism, payloads: Sequence[Any]) -> np.ndarray:
        return _grouped_counts(mechanism.oracles, payloads, "s")

    def set_tables(self, mechanism: Marginals, state: np.ndarray) -> list[tuple[Table, int]]:
        out = []
        for s, oracle, block in zip(mechanism.sets, mechanism.oracles,
                                    self.split(mechanism, state), strict=True):
            flat = oracle_table(oracle, block[1:].astype(np.float64), int(block[0]))
            out.append((flat.reshaped(tuple(mechanism.domain.sizes[a] for a in s)),
                        int(block[0])))
        return out

    def design_variance(self, mechanism: Marginals, s: int, reports: int,
                        keep: Sequence[int]) -> float:
        """The mean cell variance of set s's projection on ``keep`` at a uniform distribution:
        a weight that depends on the design only, so that the combination stays unbiased."""
        oracle = mechanism.oracles[s]
        if reports == 0:
            return math.inf
        p, q = oracle.support_probabilities()
        sizes = mechanism.domain.sizes
        shape = tuple(sizes[a] for a in mechanism.sets[s])
        # A function of these values only (oracle_table reads the oracle's kind and p, q):
        # remembered, since every answer asks for it once per set and attribute subset, with
        # the same few report counts from one answer to the next.
        design = (isinstance(oracle, KRR), p, q, shape, reports)
        key = (*design, tuple(keep))
        variance = _DESIGN_VARIANCES.get(key)
        if variance is None:
            # The report counts change from one answer to the next, so within an answer the
            # set's uniform table is what repeats: one per set, projected on each of the
            # (up to 7) attribute subsets the answer combines.
            table = _UNIFORM_TABLES.get(design)
            if table is None:
                cells = math.prod(shape)
                expected = np.full(cells, reports * (q + (p - q) / cells))
                table = oracle_table(oracle, expected, reports).reshaped(shape)
                if len(_UNIFORM_TABLES) >= UNIFORM_TABLE_MEMO:
                    _UNIFORM_TABLES.clear()
                _UNIFORM_TABLES[design] = table
            variance = float(np.mean(table.projected_variance(keep)))
            if len(_DESIGN_VARIANCES) >= DESIGN_VARIANCE_MEMO:
                _DESIGN_VARIANCES.clear()
            _DESIGN_VARIANCES[key] = variance
        return variance

    def holders(self, mechanism: Marginals, attributes: Sequence[int]) -> list[int]:
        return [s for s, members in enumerate(mechanism.sets) if set(attributes) <= set(members)]

    def combined(self, mechanism: Marginals, tables: Sequence[tuple[Table, int]],
                 attributes: Sequence[int]) -> tuple[Table, int]:
        """The inverse-design-variance combination of every collected projection on
        ``attributes`` (in that order), and the reports behind it."""
        holders = self.holders(mechanism, attributes)
        parts, weights, reports = [], [], 0
        for s in holders:
            table, count = tables[s]
            members = mechanism.sets[s]
            keep = [members.index(a) for a in attributes]
            variance = self.design_variance(mechanism, s, count, keep)
            if not math.isfinite(variance):
                continue
            parts.append(table.project(keep))
            weights.append(1.0 / variance)
            reports += count
        if not parts:
            shape = tuple(mechanism.domain.sizes[a] for a in attributes)
            return Table(np.full(shape, np.nan), np.full(shape, np.inf),
                         np.zeros((*shape, 1))), 0
        total = sum(weights)
        return combine(parts, [w / total for w in weights]), reports

    def marginal_tables(self, mechanism: RecordMechanism, n: int,
                        state: np.ndarray) -> list[tuple[Table, int]]:
        assert isinstance(mechanism, Marginals)
        tables = self.set_tables(mechanism, state)
        return [self.combined(mechanism, tables, [a]) for a in range(mechanism.d)]

    def method(self, mechanism: RecordMechanism) -> str:
        assert isinstance(mechanism, Marginals)
        return (f"marginals: one of the {len(mechanism.sets)} sets of {mechanism.order} "
                "attributes per report, drawn uniformly, its cell at the full ε; smaller "
                "marginals combine every set that holds them")

    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> RecordEstimate:
        mechanism = self.mechanism_of(campaign)
        assert isinstance(mechanism, Marginals)
        record = mechanism.domain
        joints = self.joint_attributes(mechanism, query)
        tables = self.set_tables(mechanism, state)
        consistent = consistent_tables(mechanism, tables, self) \
            if query.postprocessing == "consistent" else None
        marginals = []
        for a, (name, attribute) in enumerate(zip(record.names, record.attributes,
                                                  strict=True)):
            table, reports = self.combined(mechanism, tables, [a])
            rows = _rows(attribute.values, table, reports, query.postprocessing)
            if consistent is not None:
                rows = [row.postprocessed(float(x), reports) for row, x in
                        zip(rows, consistent_projection(mechanism, consistent, [a]).ravel(),
                            strict=True)]
            marginals.append(Marginal(name, rows, reports))
        answers, warnings = [], _empty_warnings(marginals)
        for attributes in joints:
            table, reports = self.combined(mechanism, tables, attributes)
            test = self.independence(mechanism, tables, state, attributes, table) \
                if len(attributes) == 2 else None
            adjusted = None
            if consistent is not None:
                adjusted = consistent_projection(mechanism, consistent, attributes)
            elif query.postprocessing in JOINT_METHODS and np.all(np.isfinite(table.f)):
                adjusted = SIMPLEX_METHODS[query.postprocessing](table.f.ravel()).reshape(
                    table.f.shape)
            answers.append(joint_answer(mechanism, attributes, table, reports, test, adjusted))
            warnings += _joint_warnings(answers[-1])
        changed = ["marginals"] if query.postprocessing == "norm-mul" or not answers else \
            ["marginals", "joints", "conditionals"]
        extra, notes = postprocessing_note(query.postprocessing, changed)
        warnings += notes
        if not query.joints and len(joints) < math.comb(mechanism.d, 2):
            extra["joints_note"] = (f"{math.comb(mechanism.d, 2)} pairs: ask for the ones you "
                                    "need with joint=a,b")
        return RecordEstimate(
            campaign=campaign.name, mechanism=mechanism.name, epsilon=mechanism.epsilon, n=n,
            attributes=list(record.names), marginals=marginals, joints=answers,
            variance_model=VARIANCE_MODEL, method=self.method(mechanism), window=query.window,
            postprocessing=CONSISTENT_LABEL if consistent is not None
            else LABELS.get(query.postprocessing, "none (unbiased)"),
            extra=extra, warnings=warnings)

    def joint_attributes(self, mechanism: Marginals,
                         query: Query) -> list[tuple[int, ...]]:
        record = mechanism.domain
        if not query.joints:
            pairs: list[tuple[int, ...]] = list(itertools.combinations(range(mechanism.d), 2))
            return pairs if len(pairs) <= MAX_DEFAULT_JOINTS else []
        out = []
        for names in query.joints:
            unknown = [name for name in names if name not in record.names]
            if unknown:
                raise QueryError("invalid-query", f"unknown attribute(s) {unknown}; this "
                                 f"record has {list(record.names)}")
            if len(set(names)) != len(names) or not 2 <= len(names) <= mechanism.order:
                raise QueryError("invalid-query", f"a joint names 2 to {mechanism.order} "
                                 "distinct attributes (the order of the collected marginals)")
            out.append(tuple(record.position(name) for name in names))
        return out

    def independence(self, mechanism: Marginals, tables: Sequence[tuple[Table, int]],
                     state: np.ndarray, attributes: Sequence[int],
                     table: Table | None = None) -> IndependenceTest | None:
        """The pair's test (``table``: its combined joint, when the caller has it)."""
        if table is None:
            table, _ = self.combined(mechanism, tables, attributes)
        exact = [s for s in self.holders(mechanism, attributes)
                 if sorted(mechanism.sets[s]) == sorted(attributes)]
        if exact and isinstance(mechanism.oracles[exact[0]], KRR):
            s = exact[0]
            block = self.split(mechanism, state)[s]
            oracle = mechanism.oracles[s]
            counts = block[1:].astype(np.float64).reshape(
                tuple(mechanism.domain.sizes[x] for x in mechanism.sets[s]))
            if list(mechanism.sets[s]) != list(attributes):
                counts = counts.T
            p, q = oracle.support_probabilities()
            test = pearson_independence(counts, p, q)
            return with_power(test, table) if np.all(np.isfinite(table.f)) else test
        if table.f.size > MAX_WALD_CELLS or not np.all(np.isfinite(table.f)):
            return None
        return wald_independence(table)


def _joint_warnings(joint: Joint) -> list[str]:
    """What a pair's answer cannot say: rows of a conditional not estimable at this n, and a
    test not offered because the joint is too large to calibrate."""
    out = [f"P({c.of} | {c.given}={g}): {NOT_ESTIMABLE} (the share of records with "
           f"{c.given}={g} is not told apart from 0)" for c in joint.conditionals
           for g in c.not_estimable]
    cells = math.prod(joint.shape)
    if len(joint.attributes) == 2 and joint.independence is None and cells > MAX_WALD_CELLS:
        out.append(f"no independence test for {' × '.join(joint.attributes)}: its {cells} "
                   f"cells are more than the {MAX_WALD_CELLS} whose test's size is "
                   "calibrated")
    return out


def joint_answer(mechanism: Marginals, attributes: Sequence[int], table: Table, reports: int,
                 test: IndependenceTest | None, adjusted: np.ndarray | None) -> Joint:
    record = mechanism.domain
    names = tuple(record.names[a] for a in attributes)
    labels = [record.attributes[a].values for a in attributes]
    se = table.std_error
    cells = [Cell.of(values, float(f), float(s)) for values, f, s in
             zip(itertools.product(*labels), table.f.ravel(), se.ravel(), strict=True)]
    if adjusted is not None:
        cells = [c.clipped(float(x)) for c, x in zip(cells, adjusted.ravel(), strict=True)]
    conditionals = []
    if len(attributes) == 2:
        conditionals = [conditional(table, names, labels, given=g) for g in (0, 1)]
        if adjusted is not None:  # the post-processed joint's ratios, the same SEs
            conditionals = [post_processed(c, adjusted if g == 0 else adjusted.T)
                            for g, c in enumerate(conditionals)]
    return Joint(attributes=names, shape=table.f.shape, cells=cells, reports=reports,
                 conditionals=conditionals, independence=test)


def conditional(table: Table, names: Sequence[str], labels: Sequence[Sequence[str]],
                given: int) -> Conditional:
    """P(other = v | given = g) = A/M with A = J[g, v], M = Σ_w J[g, w]; a Fieller interval.

    The delta method's SE (gradient (δ_wv − r)/M over row g) assumes M's relative error is
    small. For a row of 10% of users it is not: at OUE, ε = 1, n = 5,000 the relative SE of M
    is about 0.4, and the delta SE² overstated the spread of the ratio several times while the
    ratio itself ranged over [−2, 2]. Fieller's set {r : (A − rM)² ≤ z²·Var(A − rM)} needs
    only A − rM to be normal, which it is (linear in the cells): with
    a = M² − z²V_M, b = AM − z²C_AM, c = A² − z²V_A it is [(b − √(b² − ac))/a,
    (b + √(b² − ac))/a] when a > 0, i.e. when M/SE(M) > z. Otherwise the set is unbounded and
    the row is **not estimable at this n**: its cells are null and ``not_estimable`` names it.
    The standard error reported is still the delta method's."""
    f = table.f if given == 0 else table.f.T
    v = table.v if given == 0 else table.v.T
    u = table.u if given == 0 else np.transpose(table.u, (1, 0, 2))
    other = 1 - given
    cells, missing = [], []
    units = np.eye(f.shape[1])  # row w: the indicator of cell w
    row_totals, row_us, bounds = [], [], []
    for f_g, v_g, u_g in zip(f, v, u, strict=True):
        row_total = float(np.sum(f_g))
        row_u = np.sum(u_g, axis=0)
        total_variance = max(float(np.sum(v_g) - row_u @ row_u), 0.0)
        row_totals.append(row_total)
        row_us.append(row_u)
        bounds.append(row_total**2 - Z95**2 * total_variance)
    # Every cell's delta-method variance and its products u_w·u_w, u_w·row_u for all rows at
    # once (rows not estimable too, then skipped: hence errstate, as their totals may be 0 or
    # tiny), each to the bit what it was cell by cell: gradients[g, w] is
    # (units[w] − ratio_gw)/row_total_g elementwise, each sum over the last axis of a fresh
    # array is the reduction the 1-D sum of that row was, and matmul of stacks of 1 × c
    # (1 × K) rows against u's own views runs per cell the vector-matrix (vector-vector)
    # product ``gradient @ u_g`` (``u_w @ u_w``) ran. tests/mechanisms/
    # test_record_fast_paths.py checks it against the cell-by-cell loop.
    totals = np.array(row_totals)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gradients = (units - (f / totals[:, None])[:, :, None]) / totals[:, None, None]
        spreads = np.matmul(gradients[:, :, None, :], u[:, None])[:, :, 0, :]
        variances = (np.sum(gradients**2 * v[:, None, :], axis=2)
                     - np.sum(spreads**2, axis=2)).tolist()
    rows = u[:, :, None, :]
    own = np.matmul(rows, u[:, :, :, None])[:, :, 0, 0].tolist()
    with_row = np.matmul(rows, np.array(row_us)[:, None, :, None])[:, :, 0, 0].tolist()
    # The numbers as Python floats once (the same values; indexing numpy scalars cell by
    # cell cost more than the arithmetic).
    all_shares, all_cell_variances = f.tolist(), v.tolist()
    for g, g_label in enumerate(labels[given]):
        row_total, bound = row_totals[g], bounds[g]
        if not (row_total > 0 and bound > 0):
            missing.append(g_label)
            cells += [Cell((g_label, w_label), math.nan, math.nan, math.nan, math.nan)
                      for w_label in labels[other]]
            continue
        shares, cell_variances = all_shares[g], all_cell_variances[g]
        for w, w_label in enumerate(labels[other]):
            share = shares[w]
            ratio = share / row_total
            variance = variances[g][w]
            share_variance = max(cell_variances[w] - own[g][w], 0.0)
            covariance = cell_variances[w] - with_row[g][w]
            middle = share * row_total - Z95**2 * covariance
            spread = math.sqrt(max(middle**2 - bound * (share**2 - Z95**2 * share_variance),
                                   0.0))
            cells.append(Cell((g_label, w_label), ratio, math.sqrt(max(variance, 0.0)),
                              (middle - spread) / bound, (middle + spread) / bound))
    return Conditional(of=names[other], given=names[given], cells=cells,
                       not_estimable=tuple(missing))


def post_processed(unbiased: Conditional, joint: np.ndarray) -> Conditional:
    """The conditional read from a post-processed joint (rows: the given attribute): each
    row's shares, with the unbiased standard errors and intervals clipped to [0, 1]. A row the
    unbiased joint cannot estimate stays null: post-processing does not make it estimable."""
    totals = joint.sum(axis=1)
    cells = []
    for cell, (g, w) in zip(unbiased.cells, itertools.product(*map(range, joint.shape)),
                            strict=True):
        if cell.values[0] in unbiased.not_estimable:
            cells.append(cell)
            continue
        ratio = float(joint[g, w] / totals[g]) if totals[g] > 0 else math.nan
        cells.append(cell.clipped(ratio))
    return Conditional(of=unbiased.of, given=unbiased.given, cells=cells,
                       not_estimable=unbiased.not_estimable)


def pearson_independence(counts: np.ndarray, p: float, q: float) -> IndependenceTest:
    """Pearson's χ² on k-RR report counts (a k₁ × k₂ table of the reported cells) against
    the maximum-likelihood fit of π = π₁⊗π₂ through the channel m = q + (p − q)π (EM on the
    reports, MECHANISMS-2.md §2.4 with erratum §8.5)."""
    n = float(counts.sum())
    k1, k2 = counts.shape
    df = (k1 - 1) * (k2 - 1)
    if n <= 0:
        return IndependenceTest(math.nan, df, math.nan, "no reports")
    fitted = independent_fit(counts, p, q)
    expected = n * (q + (p - q) * fitted)
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    return IndependenceTest(statistic, df, float(chdtrc(df, statistic)),
                            "pearson chi-square on the k-RR reports against the maximum-"
                            "likelihood independent fit")


def independent_fit(counts: np.ndarray, p: float, q: float) -> np.ndarray:
    """The maximum-likelihood π₁⊗π₂ for k-RR report counts.

    EM: the E-step's expected true counts are π_x·(q·Σ_y N_y/m_y + (p − q)·N_x/m_x); the
    M-step takes their margins. EM alone converges at the rate of the information the channel
    hides, nearly all of it at small ε: it ran past EM_MAX_STEPS at ε = 0.5 over 3 × 4 cells
    and at ε = 1 over 5 × 5, and its step-size rule then stopped far from the maximum. So
    every EM step is followed by a Newton step (:func:`_newton_polish`), which converges
    quadratically near the maximum, interior or on the boundary (a margin's share at 0).

    The likelihood is not concave in the two margins (only in their product), and at small n
    and ε it has local maxima: the fit starts from the uniform margins and from the unbiased
    margins projected onto the simplex, and keeps the likelier end."""
    k1, k2 = counts.shape
    gap = p - q
    n = float(counts.sum())
    unbiased = (counts / n - q) / gap
    starts = [(np.full(k1, 1.0 / k1), np.full(k2, 1.0 / k2)),
              (simplex_projection(unbiased.sum(axis=1)),
               simplex_projection(unbiased.sum(axis=0)))]
    fits = [_ascend(counts, first, second, q, gap) for first, second in starts]
    likelihoods = [_log_likelihood(counts, first, second, q, gap) for first, second in fits]
    first, second = fits[int(np.argmax(likelihoods))]
    return np.outer(first, second)


def _ascend(counts: np.ndarray, first: np.ndarray, second: np.ndarray, q: float,
            gap: float) -> tuple[np.ndarray, np.ndarray]:
    """EM steps, each followed by a Newton step, from (first, second) until π moves by less
    than EM_TOLERANCE (or EM_MAX_STEPS)."""
    newton = len(first) + len(second) <= NEWTON_MAX_SHARES
    for _ in range(EM_MAX_STEPS):
        pi = np.outer(first, second)
        m = q + gap * pi
        ratio = counts / m
        expected = pi * (q * ratio.sum() + gap * ratio)
        # Normalised every step: the update's total is n only while Σπ = 1 exactly, and
        # without this, rounding drift grows geometrically (seen after ~60 steps).
        em_first, em_second = expected.sum(axis=1), expected.sum(axis=0)
        em_first, em_second = em_first / em_first.sum(), em_second / em_second.sum()
        first, second = _newton_polish(counts, em_first, em_second, q, gap) if newton \
            else (em_first, em_second)
        if np.max(np.abs(np.outer(first, second) - pi)) < EM_TOLERANCE:
            break
    return first, second


def _log_likelihood(counts: np.ndarray, first: np.ndarray, second: np.ndarray, q: float,
                    gap: float) -> float:
    return float(np.sum(counts * np.log(q + gap * np.outer(first, second))))


def _newton_polish(counts: np.ndarray, first: np.ndarray, second: np.ndarray, q: float,
                   gap: float) -> tuple[np.ndarray, np.ndarray]:
    """One damped, active-set Newton step from (first, second) on Σ N·log(q + gap·first⊗second)
    with Σfirst = Σsecond = 1 and every share ≥ 0, cut at the first share it drives to 0
    (which is then held there); the start itself when no step raises the likelihood.

    The likelihood is not concave in (first, second) (it is in their product), so where the
    plain Newton step fails, the Hessian is damped (Levenberg–Marquardt) towards a gradient
    step."""
    k1, k2 = counts.shape
    size = k1 + k2
    x = np.concatenate((first, second))
    m = q + gap * np.outer(first, second)
    ratio, curvature = counts / m, counts / m**2
    gradient = np.concatenate((gap * ratio @ second, gap * ratio.T @ first))
    hessian = np.zeros((size, size))
    hessian[:k1, :k1] = np.diag(-gap**2 * (curvature @ second**2))
    hessian[k1:, k1:] = np.diag(-gap**2 * (curvature.T @ first**2))
    cross = gap * ratio - gap**2 * curvature * np.outer(first, second)
    hessian[:k1, k1:], hessian[k1:, :k1] = cross, cross.T
    held = np.zeros(size, dtype=bool)
    for block in (slice(0, k1), slice(k1, size)):
        # Σ x·gradient is the simplex's multiplier (the free shares' common gradient at a
        # constrained maximum). A share whose gradient is below it would rather be smaller;
        # near 0 such a share is held at 0, since short of 0 the product makes the likelihood
        # non-concave among small shares, where Newton goes astray (and when holding it
        # there fails, it is tried free).
        multiplier = float(x[block] @ gradient[block])
        rising = gradient[block] > multiplier + 1e-9 * abs(multiplier)
        held[block] = (x[block] <= NEAR_ZERO) & ~rising
        # A share at 0 whose gradient is above it should not be 0, and EM cannot move it
        # (it scales shares): it gets mass back, which raises the likelihood to first order.
        dead = rising & (x[block] <= 0)
        if dead.any():
            x[block] = np.where(dead, 2 * NEAR_ZERO, x[block])
            x[block] /= x[block].sum()
            return x[:k1], x[k1:]
    start = _log_likelihood(counts, first, second, q, gap)
    # Rounding in the likelihood (a sum of n-sized terms) must not veto the last, tiny steps.
    slack = 1e-12 * float(np.sum(counts * np.abs(np.log(m))))
    unit = float(np.mean(np.abs(np.diag(hessian)))) + 1e-300
    for hold in (held, held & (x <= 0)):
        origin = np.where(hold, 0.0, x)
        for damping in (0.0, 1e-3, 1e-1, 10.0):
            step = _kkt_step(hessian - damping * unit * np.eye(size), gradient, origin, ~hold,
                             k1)
            if step is None:
                continue
            shrinking = step < 0
            ratios = origin[shrinking] / -step[shrinking]
            scale = min(1.0, float(ratios.min())) if len(ratios) else 1.0
            trial = np.maximum(origin + scale * step, 0.0)
            if scale < 1.0:
                # held at 0 from now on (EM keeps a zero share at zero)
                trial[np.flatnonzero(shrinking)[np.argmin(ratios)]] = 0.0
            trial_first = trial[:k1] / trial[:k1].sum()
            trial_second = trial[k1:] / trial[k1:].sum()
            if _log_likelihood(counts, trial_first, trial_second, q, gap) >= start - slack:
                return trial_first, trial_second
    return first, second


def _kkt_step(hessian: np.ndarray, gradient: np.ndarray, x: np.ndarray, free: np.ndarray,
              k1: int) -> np.ndarray | None:
    """The Newton step over the ``free`` shares (the others held where they are) that keeps
    both sums; None when it is not an ascent direction."""
    step = np.zeros(len(x))
    for _ in range(len(x)):
        index = np.flatnonzero(free)
        size = len(index)
        # [[H, Cᵀ], [C, 0]], C's rows the two sums' indicators, filled in place (np.block
        # built the same matrix at several times the cost: this runs at every Newton step).
        kkt = np.zeros((size + 2, size + 2))
        kkt[:size, :size] = hessian[index[:, None], index]
        kkt[size, :size][index < k1] = kkt[size + 1, :size][index >= k1] = 1.0
        kkt[:size, size:] = kkt[size:, :size].T
        rhs = np.zeros(size + 2)
        rhs[:size] = -gradient[index]
        try:
            solution = np.linalg.solve(kkt, rhs)
        except np.linalg.LinAlgError:
            return None
        step[:] = 0.0
        step[index] = solution[:len(index)]
        # A freed share the step would still push below 0 stays held.
        held = free & (x <= 0) & (step < 0)
        if not held.any():
            break
        free &= ~held
    if not np.all(np.isfinite(step)) or gradient @ step <= 0:
        return None
    return step


def wald_independence(table: Table, *, with_power: bool = True) -> IndependenceTest:
    """Wald's test of independence for an unbiased two-attribute joint with its propagated
    covariance, calibrated by simulation, its power simulated too (``independence``)."""
    return calibrated_wald(table.f, table.v, table.u, with_power=with_power)


def with_power(test: IndependenceTest, table: Table) -> IndependenceTest:
    """Pearson's test with the power the pair's unbiased joint gives (the score and Wald tests
    share the non-centrality to first order)."""
    return replace(test, power=table_power(table.f, table.v, table.u))


def consistent_tables(mechanism: Marginals, tables: Sequence[tuple[Table, int]],
                      estimator: MarginalsEstimator) -> list[np.ndarray]:
    """CALM's overall consistency (Zhang et al. 2018, step 3), interleaved with Norm-Sub:
    every attribute subset shared by several collected sets gets the inverse-variance mean of
    their projections, the difference spread uniformly over the cells projecting onto it."""
    current = [np.nan_to_num(t.f.copy()) for t, _ in tables]
    shared = [subset for size in range(1, mechanism.order)
              for subset in itertools.combinations(range(mechanism.d), size)]
    weights = {subset: [(s, 1.0 / v) for s in estimator.holders(mechanism, subset)
                        if math.isfinite(v := estimator.design_variance(
                            mechanism, s, tables[s][1],
                            [mechanism.sets[s].index(a) for a in subset]))]
               for subset in shared}
    for _ in range(100):
        for subset in shared:
            holders = weights[subset]
            if len(holders) < 2:
                continue
            projections = {s: _project(mechanism, s, current[s], subset) for s, _ in holders}
            total = sum(w for _, w in holders)
            target = sum(w * projections[s] for s, w in holders) / total
            for s, _ in holders:
                current[s] = _spread(mechanism, s, current[s], subset, target - projections[s])
        worst = max(float(np.max(-t)) for t in current)
        for s, t in enumerate(current):
            current[s] = norm_sub(t.ravel()).reshape(t.shape)
        if worst <= 1e-12 and _disagreement(mechanism, current, shared, weights) < 1e-10:
            break
    return current


def _project(mechanism: Marginals, s: int, table: np.ndarray,
             subset: Sequence[int]) -> np.ndarray:
    members = mechanism.sets[s]
    keep = [members.index(a) for a in subset]
    drop = tuple(i for i in range(len(members)) if i not in keep)
    return np.transpose(np.sum(table, axis=drop), np.argsort(np.argsort(keep)))


def _spread(mechanism: Marginals, s: int, table: np.ndarray, subset: Sequence[int],
            difference: np.ndarray) -> np.ndarray:
    members = mechanism.sets[s]
    keep = [members.index(a) for a in subset]
    cells = table.size // difference.size
    # Put the difference's axes where the kept attributes sit, then broadcast.
    order = np.argsort(keep)
    aligned = np.transpose(difference, order)
    shape = [table.shape[i] if i in keep else 1 for i in range(table.ndim)]
    return table + aligned.reshape(shape) / cells


def _disagreement(mechanism: Marginals, current: Sequence[np.ndarray],
                  shared: Sequence[tuple[int, ...]],
                  weights: dict[tuple[int, ...], list[tuple[int, float]]]) -> float:
    worst = 0.0
    for subset in shared:
        projections = [_project(mechanism, s, current[s], subset) for s, _ in weights[subset]]
        for other in projections[1:]:
            worst = max(worst, float(np.max(np.abs(other - projections[0]))))
    return worst


def consistent_projection(mechanism: Marginals, current: Sequence[np.ndarray],
                          attributes: Sequence[int]) -> np.ndarray:
    """A marginal read from the consistent tables (every holder now agrees; the first)."""
    for s, members in enumerate(mechanism.sets):
        if set(attributes) <= set(members):
            return _project(mechanism, s, current[s], attributes)
    raise QueryError("invalid-query", "no collected marginal holds these attributes")
