"""The contract every mechanism implements on the protocol side.

A :class:`Mechanism` holds *resolved* parameters: everything both sides need, derived once
from (ε, domain, user parameters) and frozen into the campaign config, so the client and the
collector read the same numbers from the same digest-protected document and can never
disagree. Its four duties:

* ``epsilon``: the privacy claim, computed from the parameters actually used;
* ``encode``: turn an app's value into the mechanism's input (category index, clipped number…);
* ``randomize``: the local randomizer, run on the device;
* ``check_payload``: validate a report payload received over the wire.

Discrete mechanisms also give their exact output distribution (``output_probability``) so
that tests can check privacy exactly, by enumeration. The estimator half of each mechanism
lives in ``chorus_collector.estimators`` under the same name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

from chorus_shared.domain import Domain, finite_float
from chorus_shared.errors import CampaignError, WireError
from chorus_shared.rng import RandomSource

MIN_EPSILON = 1e-4

__all__ = ["EMPTY", "MIN_EPSILON", "IntParam", "Mechanism", "Payload", "check_epsilon",
           "check_params", "required_epsilon"]

Payload = Any  # JSON-compatible: int, str, list or dict, as each mechanism defines.
EMPTY: Mapping[str, int] = MappingProxyType({})


def check_epsilon(epsilon: object) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise CampaignError(f"epsilon must be a number, got {epsilon!r}")
    number = finite_float(epsilon)
    if number is None or not number > 0:
        raise CampaignError(f"epsilon must be a finite number > 0, got {epsilon!r:.40}")
    epsilon = number
    if epsilon < MIN_EPSILON:
        raise CampaignError(f"epsilon = {epsilon:g} is below {MIN_EPSILON:g}: the reports would "
                            "be pure noise (no estimate could use them)")
    if epsilon > 50:
        raise CampaignError(f"epsilon = {epsilon} is meaningless (> 50); no protection is left")
    return epsilon


def required_epsilon(mechanism: str, epsilon: object) -> float:
    """ε for a mechanism whose parameters all follow from it."""
    if epsilon is None:
        raise CampaignError(f"mechanism {mechanism!r} needs epsilon")
    return check_epsilon(epsilon)


def check_params(params: Mapping[str, Any], allowed: Iterable[str], mechanism: str) -> None:
    unknown = set(params) - set(allowed)
    if unknown:
        raise CampaignError(
            f"unknown parameters for mechanism {mechanism!r}: {sorted(unknown)}; "
            f"allowed: {sorted(allowed)}"
        )


#: A parameter's default: a constant, or computed from ε, the domain and the parameters read
#: before it (OLH's g from ε and the prime, Subset Selection's ω from ε and d).
Default = int | Callable[[float, Domain, Mapping[str, int]], int]


@dataclass(frozen=True, kw_only=True)
class IntParam:
    """An integer parameter a campaign may set, declared once on its mechanism class."""

    name: str
    help: str
    lo: int
    hi: int
    default: Default

    def read(self, mechanism: str, params: Mapping[str, Any], eps: float, domain: Domain,
             earlier: Mapping[str, int]) -> int:
        value = params.get(self.name)
        if value is None:
            return self.default(eps, domain, earlier) if callable(self.default) \
                else self.default
        if isinstance(value, bool) or not isinstance(value, int) \
                or not self.lo <= value <= self.hi:
            raise CampaignError(f"{mechanism} parameter {self.name} ({self.help}) must be an "
                                f"integer in [{self.lo}, {self.hi}], got {value!r:.40}")
        return value


class Mechanism(ABC):
    """One LDP mechanism with resolved parameters. Subclasses are frozen dataclasses whose
    fields are the domain, ``eps`` and their declared :attr:`parameters`; rules that tie
    several fields together are checked in ``__post_init__``, so no instance is ever invalid.
    """

    #: Registry name, used in campaign configs and on the wire.
    name: ClassVar[str]
    #: Domain kinds this mechanism accepts (``Categories.kind`` etc.).
    domain_kinds: ClassVar[tuple[str, ...]]
    #: ``"frequency"`` (categorical or string estimates) or ``"mean"``.
    estimate_kind: ClassVar[str]

    #: The parameters a campaign may set, read in this order (a default may use earlier ones).
    parameters: ClassVar[tuple[IntParam, ...]] = ()

    domain: Domain

    @classmethod
    def resolve(cls, *, epsilon: float | None, domain: Domain, params: Mapping[str, Any]) -> Self:
        """Validate user input and derive every parameter. Raises :class:`CampaignError`.

        The common case, for mechanisms whose only inputs are ε, the domain and their declared
        parameters; RAPPOR (ε or f, p, q) and the attribute-sampling ones override it.
        """
        check_params(params, [p.name for p in cls.parameters], cls.name)
        eps = required_epsilon(cls.name, epsilon)
        cls.check_domain(domain)
        values: dict[str, int] = {}
        for parameter in cls.parameters:
            values[parameter.name] = parameter.read(cls.name, params, eps, domain, values)
        return cls(domain=domain, epsilon=eps, **values)  # type: ignore[call-arg]

    @classmethod
    def check_domain(cls, domain: Domain) -> None:
        """Refuse a domain this mechanism cannot take (beyond its kind)."""
        if domain.kind not in cls.domain_kinds:
            raise CampaignError(f"mechanism {cls.name!r} takes a {' or '.join(cls.domain_kinds)} "
                                f"domain, not {domain.kind!r}")

    def params(self) -> dict[str, Any]:
        """The resolved parameters, as written into the campaign config."""
        return {p.name: getattr(self, p.name) for p in self.parameters}

    if TYPE_CHECKING:
        # ε of one report, under one name everywhere: a field of most mechanisms (the ε they
        # were resolved for), a property computed from f, p, q for RAPPOR. Declared for the
        # type checker only: at run time a property here would shadow the dataclass fields.
        @property
        def epsilon(self) -> float: ...

    @abstractmethod
    def encode(self, value: object) -> Any:
        """Map an app value to the randomizer's input. Raises ``ValueDomainError``."""

    def assign(self, rng: RandomSource) -> dict[str, int]:
        """A public assignment drawn independently of any value (RAPPOR's cohort).

        The client never keeps one: :meth:`randomize` without an assignment draws a fresh one
        for every report, so nothing in a report is stable per install. Tests and simulations
        pass one to enumerate or to control the cohorts.
        """
        return {}

    @abstractmethod
    def randomize(
        self, x: Any, rng: RandomSource, assignment: Mapping[str, int] = EMPTY
    ) -> Payload:
        """The local randomizer: one perturbed report payload for input ``x``."""

    @abstractmethod
    def check_payload(self, payload: object) -> Payload:
        """Validate a received payload and return it in canonical form. Raises ``WireError``."""

    def check_payloads(self, payloads: Sequence[object]) -> list[Payload] | None:
        """Validate many payloads at once: their canonical forms, or None if any is invalid
        (:meth:`check_payload` then says which and why). The same rule as one at a time; for
        an integer payload, a whole batch is checked in three passes at C speed."""
        bounds = self.payload_bounds()
        if bounds is not None:
            low, high = bounds
            if payloads and set(map(type, payloads)) != {int}:  # not bool, a subclass of int
                return None
            integers = cast("list[int]", list(payloads))
            if integers and not low <= min(integers) <= max(integers) <= high:
                return None
            return integers
        try:
            return [self.check_payload(p) for p in payloads]
        except WireError:
            return None

    def payload_bounds(self) -> tuple[int, int] | None:
        """``(low, high)``, inclusive, when a payload is one integer in that range and nothing
        else (exactly what :meth:`check_payload` accepts); None for any other payload."""
        return None

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Size of the perturbed payload in bits (excluding the envelope)."""

    def output_probability(self, payload: Payload, x: Any) -> float:
        """Exact P[randomize(x) = payload], for discrete mechanisms (exact privacy tests)."""
        raise TypeError(f"{self.name} has no discrete output distribution")

    def outputs(self) -> Iterable[Payload]:
        """Every possible payload (small parameter sets only; used by exhaustive tests)."""
        raise TypeError(f"{self.name} has no enumerable output space")

    def inputs(self) -> Iterable[Any]:
        """Representative encoded inputs for exhaustive privacy tests."""
        raise TypeError(f"{self.name} has no enumerable input space")

    def describe(self) -> dict[str, Any]:
        """Public facts for the campaign config: privacy and size, for humans."""
        return {"epsilon": self.epsilon, "report_bits": self.report_bits}
