"""Hierarchical histograms with level sampling (Cormode, Kulkarni, Srivastava, PVLDB 2019).
MECHANISMS-2.md §1.2.

The ``buckets`` = B^h leaves of the grid are the bottom of a complete B-ary tree; level ℓ
(1 … h) has B^ℓ nodes, node j covering leaves [j·B^{h−ℓ}, (j + 1)·B^{h−ℓ}). The root's
frequency is exactly 1 and is not collected. Each report draws one level uniformly (fresh per
report, independent of the value) and reports the node holding the value at that level with
a frequency oracle at the full ε: k-RR while B^ℓ < 3e^ε + 2, OUE above (the rule of
MECHANISMS.md §12, by variance). The level is independent of the value and each oracle is
exactly ε-LDP, so the report is exactly ε-LDP.

The branching factor follows the rule of §1.2: the worst range variance grows as
(B − 1)·h² = (B − 1)·(ln D/ln B)², flat between 4 and 6 and least near 4.9; B = 4 keeps the
grid a power of two.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from chorus_shared.domain import Categories, Domain
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam
from chorus_shared.mechanisms.distribution import MAX_BUCKETS, DistributionMechanism
from chorus_shared.mechanisms.krr import KRR
from chorus_shared.mechanisms.pure import PureOracle
from chorus_shared.mechanisms.unary import OUE
from chorus_shared.rng import RandomSource

__all__ = ["HierarchicalHistogram", "level_oracle"]

DEFAULT_BRANCHING = 4
DEFAULT_LEAVES = 256


def _default_buckets(epsilon: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    """The power of the branching factor nearest 256 leaves (in ratio)."""
    branching = earlier["branching"]
    height = max(1, round(math.log(DEFAULT_LEAVES) / math.log(branching)))
    while branching**height > MAX_BUCKETS:
        height -= 1
    return int(branching**height)


def level_oracle(nodes: int, epsilon: float) -> str:
    """``"krr"`` while nodes < 3e^ε + 2 (k-RR then has the lower variance), else ``"oue"``."""
    return "krr" if nodes < 3 * math.exp(epsilon) + 2 else "oue"


@dataclass(frozen=True, kw_only=True)
class HierarchicalHistogram(DistributionMechanism):
    """Payload ``{"level": ℓ, "index": k}`` on a k-RR level, ``{"level": ℓ, "bits": hex}`` on
    an OUE level (bit j is node j)."""

    name: ClassVar[str] = "hh"

    branching: int = DEFAULT_BRANCHING
    buckets: int = DEFAULT_LEAVES

    parameters: ClassVar[tuple[IntParam, ...]] = (
        IntParam(name="branching", help="children per node", lo=2, hi=16,
                 default=DEFAULT_BRANCHING),
        IntParam(name="buckets", help="leaves: a power of the branching factor", lo=2,
                 hi=MAX_BUCKETS, default=_default_buckets),
    )

    def __post_init__(self) -> None:
        powers = [self.branching**h for h in range(1, 13) if self.branching**h <= MAX_BUCKETS]
        if self.buckets not in powers:
            raise CampaignError(f"hh parameter buckets must be a power of the branching factor "
                                f"{self.branching}: one of {powers}, got {self.buckets}")

    @property
    def height(self) -> int:
        """h: the number of collected levels (leaves at level h)."""
        return round(math.log(self.buckets) / math.log(self.branching))

    def nodes(self, level: int) -> int:
        return int(self.branching**level)

    @cached_property
    def oracles(self) -> tuple[PureOracle, ...]:
        """The frequency oracle of each level 1 … h (index ℓ − 1)."""
        out: list[PureOracle] = []
        for level in range(1, self.height + 1):
            nodes = self.nodes(level)
            domain = Categories(values=tuple(str(j) for j in range(nodes)))
            kind = KRR if level_oracle(nodes, self.epsilon) == "krr" else OUE
            out.append(kind(domain=domain, epsilon=self.epsilon))
        return tuple(out)

    def node_of(self, x: float, level: int) -> int:
        """The node holding v = x at ``level`` (the leaf bucket ⌊v·D⌋, then its ancestor)."""
        leaf = min(int(x * self.buckets), self.buckets - 1)
        return leaf // self.nodes(self.height - level)

    def randomize(self, x: float, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, Any]:
        level = 1 + rng.randrange(self.height)
        report = self.oracles[level - 1].randomize(self.node_of(x, level), rng)
        if isinstance(report, int):
            return {"level": level, "index": report}
        return {"level": level, **report}

    def check_payload(self, payload: object) -> dict[str, Any]:
        if not isinstance(payload, dict) or "level" not in payload:
            raise WireError('an hh payload is {"level": l, "index": k} or {"level": l, '
                            '"bits": hex}')
        level = payload["level"]
        if isinstance(level, bool) or not isinstance(level, int) or \
                not 1 <= level <= self.height:
            raise WireError(f"level must be an integer in [1, {self.height}]")
        oracle = self.oracles[level - 1]
        rest = {k: v for k, v in payload.items() if k != "level"}
        if isinstance(oracle, KRR):
            if set(rest) != {"index"}:
                raise WireError(f'level {level} is k-RR: its payload is {{"level": {level}, '
                                '"index": k}')
            return {"level": level, "index": oracle.check_payload(rest["index"])}
        return {"level": level, **oracle.check_payload(rest)}

    def sub_payload(self, payload: Mapping[str, Any]) -> Any:
        """The level oracle's own payload inside a report."""
        return payload["index"] if "index" in payload else {"bits": payload["bits"]}

    @property
    def report_bits(self) -> int:
        """The level and the largest level's report."""
        return max(1, (self.height - 1).bit_length()) + max(o.report_bits for o in self.oracles)

    def output_probability(self, payload: dict[str, Any], x: float) -> float:
        level = payload["level"]
        oracle = self.oracles[level - 1]
        return float(oracle.output_probability(self.sub_payload(payload),
                                               self.node_of(x, level))) / self.height

    def outputs(self) -> Iterable[dict[str, Any]]:
        for level, oracle in enumerate(self.oracles, start=1):
            for sub in oracle.outputs():
                yield {"level": level, "index": sub} if isinstance(sub, int) else \
                    {"level": level, **sub}

    def inputs(self) -> Iterable[float]:
        """The middle of every leaf: every node at every level is someone's."""
        return [(j + 0.5) / self.buckets for j in range(self.buckets)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "height": self.height,
                "level_oracles": [o.name for o in self.oracles],
                "level_sampling": "each report draws one level uniformly, independent of the "
                                  "value, and spends the full ε on it"}
