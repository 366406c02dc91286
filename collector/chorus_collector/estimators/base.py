"""The collector half of each mechanism: map, merge, finalize.

* ``map``: a pure function from a batch of validated payloads to a partial statistic, an int64
  vector of fixed length (``state_size``);
* merge: vector addition, so partials can be summed in any order by any engine (SQL, Spark,
  Dask, a process pool);
* ``finalize``: the O(state size) noise correction that turns a merged statistic into
  estimates with standard errors and confidence intervals.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

import numpy as np

from chorus_collector.results.answer import Answer
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import Mechanism

__all__ = ["DEFAULT_QUANTILES", "Estimator", "M", "MechanismTypes", "Query", "QueryError"]

#: p50, p95 and p99: what a latency dashboard reads.
DEFAULT_QUANTILES = (0.5, 0.95, 0.99)

#: The mechanism class an estimator decodes.
M = TypeVar("M", bound=Mechanism)
#: What ``isinstance`` checks a campaign's mechanism against.
MechanismTypes = type[Mechanism] | tuple[type[Mechanism], ...]


class QueryError(ValueError):
    """The query cannot be answered as asked (bad candidates, rank-deficient design…)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Query:
    start: int | None = None
    end: int | None = None
    candidates: tuple[str, ...] = field(default_factory=tuple)
    postprocessing: str = "none"
    #: Distribution campaigns: the quantiles to read (fractions in (0, 1)) and the ranges
    #: [a, b] (on the campaign's own scale) whose shares to estimate.
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    ranges: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    #: Record campaigns: the joint distributions to answer, each as attribute names.
    joints: tuple[tuple[str, ...], ...] = field(default_factory=tuple)

    @property
    def window(self) -> dict[str, int | None]:
        return {"start": self.start, "end": self.end}


class Estimator(ABC, Generic[M]):
    """The collector half of the mechanism class ``M``, registered under the same name."""

    name: ClassVar[str]
    #: The class (or classes) of ``M``: a campaign's mechanism is checked against it once, in
    #: :meth:`mechanism_of`, so the methods below can rely on their parameter types.
    mechanism_type: ClassVar[MechanismTypes]
    #: Post-processing methods a query may ask for; "none" is the unbiased estimate.
    postprocessing: ClassVar[tuple[str, ...]] = ("none",)
    #: What a query that names no method gets (Square Wave has no unbiased "none": EMS).
    default_postprocessing: ClassVar[str] = "none"

    def fit_cost(self, mechanism: M) -> float:
        """What one finalize costs, in units of about 1 s on one core (what a Square Wave fit of
        256 × 256 buckets with a 200-replicate bootstrap cost); 0 for the estimators that answer
        in milliseconds.
        A series refuses more points than its budget of fits allows."""
        return 0.0

    def mechanism_of(self, campaign: Campaign) -> M:
        """The campaign's mechanism, as the type this estimator decodes."""
        return self.checked(campaign.mechanism)

    def checked(self, mechanism: Mechanism) -> M:
        if not isinstance(mechanism, self.mechanism_type):
            raise TypeError(f"the {self.name!r} estimator cannot decode a "
                            f"{type(mechanism).__name__}")
        return cast(M, mechanism)

    @abstractmethod
    def state_size(self, mechanism: M) -> int: ...

    @abstractmethod
    def map(self, mechanism: M, payloads: Sequence[Any]) -> np.ndarray: ...

    @abstractmethod
    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> Answer:
        """The estimates: an instance of the answer type of the campaign's kind
        (``chorus_collector.kinds.kind_of(campaign).answer_type``)."""
