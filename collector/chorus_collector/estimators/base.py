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
from typing import Any, ClassVar

import numpy as np

from chorus_collector.results import FrequencyEstimate, MeanEstimate, VectorMeanEstimate
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms import Mechanism

__all__ = ["Estimator", "Query", "QueryError"]


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

    @property
    def window(self) -> dict[str, int | None]:
        return {"start": self.start, "end": self.end}


class Estimator(ABC):
    name: ClassVar[str]
    #: Post-processing methods a query may ask for; "none" is the unbiased estimate.
    postprocessing: ClassVar[tuple[str, ...]] = ("none",)

    @abstractmethod
    def state_size(self, mechanism: Mechanism) -> int: ...

    @abstractmethod
    def map(self, mechanism: Mechanism, payloads: Sequence[Any]) -> np.ndarray: ...

    @abstractmethod
    def finalize(self, campaign: Campaign, n: int, state: np.ndarray,
                 query: Query) -> FrequencyEstimate | MeanEstimate | VectorMeanEstimate: ...
