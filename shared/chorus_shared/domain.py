"""Value domains a campaign can collect over.

* :class:`Categories`: a closed, ordered list of distinct category names.
* :class:`NumericRange`: a bounded interval [lo, hi] of real numbers.
* :class:`OpenStrings`: any string (hashed on the device; decoded against candidates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.errors import CampaignError, ValueDomainError

__all__ = ["MAX_CATEGORIES", "MAX_STRING_BYTES", "Categories", "Domain", "NumericRange",
           "OpenStrings", "domain_from_json", "finite_float"]

MAX_CATEGORIES = 65_536
MAX_CATEGORY_CHARS = 200
MAX_STRING_BYTES = 1_024


def finite_float(value: object) -> float | None:
    """``value`` as a finite float, or None (bools, non-numbers, NaN, ±inf, huge integers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Categories:
    """A closed list of categories; a category's index is its position in the list."""

    kind: ClassVar[str] = "categories"
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise CampaignError("domain.values must list at least one category")
        if len(self.values) > MAX_CATEGORIES:
            raise CampaignError(
                f"domain has {len(self.values)} categories; at most {MAX_CATEGORIES} are allowed"
            )
        for value in self.values:
            if not isinstance(value, str) or not value or len(value) > MAX_CATEGORY_CHARS:
                raise CampaignError(
                    f"every category must be a non-empty string of at most {MAX_CATEGORY_CHARS} "
                    f"characters; got {value!r}"
                )
        if len(set(self.values)) != len(self.values):
            seen: set[str] = set()
            dupes = sorted({v for v in self.values if v in seen or seen.add(v)})  # type: ignore[func-returns-value]
            raise CampaignError(f"domain.values has duplicates: {dupes[:5]}")

    @property
    def size(self) -> int:
        return len(self.values)

    def index(self, value: object) -> int:
        """Return the index of ``value``; raises ``KeyError`` if it is not a category."""
        if not isinstance(value, str):
            raise KeyError(value)
        return self._lookup()[value]

    def encode(self, value: object) -> int:
        """The index of ``value``, or :class:`ValueDomainError` naming the problem."""
        try:
            return self.index(value)
        except KeyError:
            raise ValueDomainError(
                f"{value!r:.80} is not one of this campaign's {self.size} categories"
            ) from None

    def _lookup(self) -> dict[str, int]:
        # Built lazily and cached on the frozen instance: O(1) lookups on the client's hot path.
        cached: dict[str, int] | None = self.__dict__.get("_index")
        if cached is None:
            cached = {v: i for i, v in enumerate(self.values)}
            object.__setattr__(self, "_index", cached)
        return cached

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "values": list(self.values)}


@dataclass(frozen=True)
class NumericRange:
    """A bounded interval of reals; values outside it are clipped on the device."""

    kind: ClassVar[str] = "numeric"
    lo: float
    hi: float

    def __post_init__(self) -> None:
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CampaignError(f"domain.{name} must be a number, got {value!r}")
            number = finite_float(value)
            if number is None:
                raise CampaignError(f"domain.{name} must be a finite number")
            object.__setattr__(self, name, number)
        if not self.lo < self.hi:
            raise CampaignError(f"domain needs lo < hi, got lo={self.lo}, hi={self.hi}")
        if not math.isfinite(self.hi - self.lo):
            raise CampaignError("domain hi − lo must be a finite number")

    def clip(self, value: float) -> float:
        return min(max(value, self.lo), self.hi)

    def to_unit(self, value: object) -> float:
        """Clip a reported number to [lo, hi] and map it to t ∈ [−1, 1] (on the device)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueDomainError(f"a numeric campaign takes a number, got {value!r:.40}")
        number = finite_float(value)
        if number is None:
            raise ValueDomainError(f"cannot report a non-finite number: {value!r:.40}")
        return 2.0 * (self.clip(number) - self.lo) / (self.hi - self.lo) - 1.0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True)
class OpenStrings:
    """Any string up to a byte limit; decoded later against candidates the analyst supplies."""

    kind: ClassVar[str] = "strings"
    max_bytes: int = MAX_STRING_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int):
            raise CampaignError("domain.max_bytes must be an integer")
        if not 1 <= self.max_bytes <= 65_536:
            raise CampaignError("domain.max_bytes must be between 1 and 65536")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_bytes": self.max_bytes}


Domain = Categories | NumericRange | OpenStrings


def domain_from_json(obj: object) -> Domain:
    """Parse a domain from its JSON form, with a clear error for anything malformed."""
    if isinstance(obj, list):  # shorthand: a bare list of categories
        obj = {"kind": "categories", "values": obj}
    if not isinstance(obj, dict):
        raise CampaignError("domain must be an object with a 'kind', or a list of categories")
    kind = obj.get("kind")
    allowed: dict[str, set[str]] = {
        "categories": {"kind", "values"},
        "numeric": {"kind", "lo", "hi"},
        "strings": {"kind", "max_bytes"},
    }
    if kind not in allowed:
        raise CampaignError(f"domain.kind must be one of {sorted(allowed)}, got {kind!r}")
    unknown = set(obj) - allowed[kind]
    if unknown:
        raise CampaignError(f"unknown domain fields for kind {kind!r}: {sorted(unknown)}")
    if kind == "categories":
        values = obj.get("values")
        if not isinstance(values, list):
            raise CampaignError("domain.values must be a list of strings")
        return Categories(tuple(values))
    if kind == "numeric":
        if "lo" not in obj or "hi" not in obj:
            raise CampaignError("a numeric domain needs both 'lo' and 'hi'")
        return NumericRange(obj["lo"], obj["hi"])
    return OpenStrings(obj.get("max_bytes", MAX_STRING_BYTES))
