"""O-RR and O-RAPPOR (Kairouz et al.): decoded like RAPPOR against candidates, by weighted
least squares; O-RR with its own within-cohort covariance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from chorus_collector.estimators.base import MechanismTypes
from chorus_collector.estimators.rappor import BloomDecoder, RapporEstimator
from chorus_shared.mechanisms import OpenRappor, OpenRR


class OpenRapporEstimator(RapporEstimator):
    name: ClassVar[str] = "o_rappor"
    mechanism_type: ClassVar[MechanismTypes] = OpenRappor


class OpenRRDecoder(BloomDecoder[OpenRR]):
    """O-RR: statistic per cohort [reports, count of each reported bin]."""

    name: ClassVar[str] = "o_rr"
    mechanism_type: ClassVar[MechanismTypes] = OpenRR

    def state_size(self, mechanism: OpenRR) -> int:
        return mechanism.m * (mechanism.k + 1)

    def map(self, mechanism: OpenRR, payloads: Sequence[Any]) -> np.ndarray:
        count = len(payloads)
        cohorts = np.fromiter((p["cohort"] for p in payloads), dtype=np.int64, count=count)
        bins = np.fromiter((p["y"] for p in payloads), dtype=np.int64, count=count)
        width = mechanism.k + 1
        table = np.bincount(cohorts * width, minlength=mechanism.m * width)
        table += np.bincount(cohorts * width + 1 + bins, minlength=mechanism.m * width)
        return table.astype(np.int64)
