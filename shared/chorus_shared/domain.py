"""Value domains a campaign can collect over.

Error messages never quote the reported value: apps log them and crash reporters upload them.

* :class:`Categories`: a closed, ordered list of distinct category names, optionally with a
  catch-all ``other`` category that every value outside the list is reported as.
* :class:`NumericRange`: a bounded interval [lo, hi] of real numbers.
* :class:`NumericVector`: several named bounded numbers reported together (one mean each).
* :class:`OpenStrings`: any string (hashed on the device; decoded against candidates).
* :class:`Record`: several named categorical attributes reported together as one record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus_shared.errors import CampaignError, ValueDomainError
from chorus_shared.rng import RandomSource

__all__ = ["MAX_ALPHABET", "MAX_ATTRIBUTES", "MAX_CATEGORIES", "MAX_RECORD_ATTRIBUTES",
           "MAX_RECORD_CATEGORIES", "MAX_STRING_BYTES", "Categories", "Domain", "NumericRange",
           "NumericVector", "OpenStrings", "Record", "domain_from_json", "finite_float"]

MAX_CATEGORIES = 65_536
MAX_CATEGORY_CHARS = 200
MAX_STRING_BYTES = 1_024
MAX_ATTRIBUTES = 64
#: A record's attributes, and the categories of one attribute: every record mechanism can
#: then give each attribute a unary-encoding oracle (OUE takes at most 4096 categories).
MAX_RECORD_ATTRIBUTES = 16
MAX_RECORD_CATEGORIES = 4_096


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
    """A closed list of categories; a category's index is its position in the list.

    ``other`` names the category that any other value is reported as (it must be one of the
    values), so that every value is reportable and the catch-all share is estimated too.
    """

    kind: ClassVar[str] = "categories"
    values: tuple[str, ...]
    other: str | None = None

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
        if self.other is not None and self.other not in self.values:
            raise CampaignError("domain.other must name one of domain.values (the catch-all "
                                f"category), got {self.other!r:.80}")

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
            if self.other is not None:
                return self._lookup()[self.other]
            shown = ", ".join(repr(v) for v in self.values[:5])
            more = ", …" if self.size > 5 else ""
            raise ValueDomainError(
                f"the value is not one of this campaign's {self.size} categories "
                f"({shown}{more}), and the campaign has no 'other' category"
            ) from None

    def random_value(self, rng: RandomSource) -> str:
        return self.values[rng.randrange(self.size)]

    def _lookup(self) -> dict[str, int]:
        # Built lazily and cached on the frozen instance: O(1) lookups on the client's hot path.
        cached: dict[str, int] | None = self.__dict__.get("_index")
        if cached is None:
            cached = {v: i for i, v in enumerate(self.values)}
            object.__setattr__(self, "_index", cached)
        return cached

    def to_json(self) -> dict[str, Any]:
        if self.other is None:  # absent, not null: configs without it keep their digests
            return {"kind": self.kind, "values": list(self.values)}
        return {"kind": self.kind, "values": list(self.values), "other": self.other}


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

    def clipped(self, value: object) -> float:
        """A reported number, checked and clipped to [lo, hi] (on the device)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueDomainError("a numeric campaign takes a number")
        number = finite_float(value)
        if number is None:
            raise ValueDomainError("cannot report a non-finite number")
        return self.clip(number)

    def to_unit(self, value: object) -> float:
        """Clip a reported number to [lo, hi] and map it to t ∈ [−1, 1] (on the device)."""
        return 2.0 * (self.clipped(value) - self.lo) / (self.hi - self.lo) - 1.0

    def random_value(self, rng: RandomSource) -> float:
        return self.lo + rng.random() * (self.hi - self.lo)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "lo": self.lo, "hi": self.hi}


def _by_attribute(value: object, names: tuple[str, ...], kind: str, what: str) -> list[object]:
    """A several-attribute value, {name: item} or a sequence in attribute order, as the list
    of its items in attribute order; :class:`ValueDomainError` says what is missing."""
    if isinstance(value, dict):
        if set(value) != set(names):
            # The campaign's own names are public; the value's other keys are part of the
            # value (an attribute named after a person, say): counted, never quoted.
            missing = sorted(set(names) - set(value))
            extra = len(set(value) - set(names))
            raise ValueDomainError(f"a {kind} value needs exactly the attributes {list(names)}; "
                                   f"missing {missing}, and {extra} other keys")
        return [value[name] for name in names]
    if isinstance(value, list | tuple):
        if len(value) != len(names):
            raise ValueDomainError(f"a {kind} value has {len(names)} {what}, got {len(value)}")
        return list(value)
    raise ValueDomainError(f"a {kind} campaign takes a mapping of {list(names)} to {what}")


@dataclass(frozen=True)
class NumericVector:
    """D named attributes, each a bounded interval; a value is one number per attribute.

    The app reports a mapping {name: number} (or a sequence in attribute order); each number is
    clipped to its own [lo, hi] on the device and mapped to [−1, 1].
    """

    kind: ClassVar[str] = "vector"
    names: tuple[str, ...]
    ranges: tuple[NumericRange, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.names) <= MAX_ATTRIBUTES or len(self.names) != len(self.ranges):
            raise CampaignError(f"a vector domain has 1 to {MAX_ATTRIBUTES} attributes")
        for name in self.names:
            if not isinstance(name, str) or not name or len(name) > MAX_CATEGORY_CHARS:
                raise CampaignError("attribute names are non-empty strings of at most "
                                    f"{MAX_CATEGORY_CHARS} characters")
        if len(set(self.names)) != len(self.names):
            raise CampaignError("attribute names must be distinct")

    @property
    def size(self) -> int:
        return len(self.names)

    def to_unit(self, value: object) -> tuple[float, ...]:
        """Clip every attribute to its range and map it to [−1, 1] (on the device)."""
        numbers = _by_attribute(value, self.names, "vector", "numbers")
        return tuple(r.to_unit(x) for r, x in zip(self.ranges, numbers, strict=True))

    def random_value(self, rng: RandomSource) -> dict[str, float]:
        return {name: r.random_value(rng) for name, r in zip(self.names, self.ranges,
                                                             strict=True)}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "attributes": [
            {"name": name, "lo": r.lo, "hi": r.hi}
            for name, r in zip(self.names, self.ranges, strict=True)]}


@dataclass(frozen=True)
class OpenStrings:
    """Any string up to a byte limit; decoded later against candidates the analyst supplies.

    An optional ``alphabet`` (the characters a value may use, in the order that numbers them)
    narrows the domain: a value with any other character is outside it, like one that is too
    long. Discovery campaigns use it to walk whole characters rather than bytes, so each step
    tests far fewer candidates (27 extensions of ``[a-z]`` words against 256 bytes).
    """

    kind: ClassVar[str] = "strings"
    max_bytes: int = MAX_STRING_BYTES
    alphabet: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int):
            raise CampaignError("domain.max_bytes must be an integer")
        if not 1 <= self.max_bytes <= 65_536:
            raise CampaignError("domain.max_bytes must be between 1 and 65536")
        if self.alphabet is not None:
            _check_alphabet(self.alphabet)

    def encode(self, value: object) -> str:
        """The value itself, once checked to be a string within the byte limit (and over the
        alphabet, if the domain has one)."""
        if not isinstance(value, str):
            raise ValueDomainError("a strings campaign takes a str")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate; the error would quote the value
            raise ValueDomainError("the value is not valid Unicode text") from None
        if size > self.max_bytes:
            raise ValueDomainError(f"value is longer than {self.max_bytes} UTF-8 bytes")
        if self.alphabet is not None and not set(value) <= set(self.alphabet):
            raise ValueDomainError("the value has characters outside the domain's alphabet")
        return value

    def random_value(self, rng: RandomSource) -> str:
        """A random string nobody holds: it lands on random Bloom bits or hash bins."""
        if self.alphabet is None:
            return format(rng.getrandbits(64), "016x")[:self.max_bytes]
        widest = max(len(c.encode("utf-8")) for c in self.alphabet)
        length = max(1, min(16, self.max_bytes // widest))
        return "".join(self.alphabet[rng.randrange(len(self.alphabet))] for _ in range(length))

    def to_json(self) -> dict[str, Any]:
        # Without an alphabet the form (and so every existing config digest) is unchanged.
        extra = {} if self.alphabet is None else {"alphabet": self.alphabet}
        return {"kind": self.kind, "max_bytes": self.max_bytes, **extra}


MAX_ALPHABET = 255


def _check_alphabet(alphabet: object) -> None:
    if not isinstance(alphabet, str) or not 1 <= len(alphabet) <= MAX_ALPHABET:
        raise CampaignError(f"domain.alphabet must be a string of 1 to {MAX_ALPHABET} "
                            "characters")
    if len(set(alphabet)) != len(alphabet):
        raise CampaignError("domain.alphabet must not repeat a character")
    if "\0" in alphabet:
        raise CampaignError("domain.alphabet cannot hold NUL")
    try:
        alphabet.encode("utf-8")
    except UnicodeEncodeError:
        raise CampaignError("domain.alphabet must be valid Unicode text") from None


@dataclass(frozen=True)
class Record:
    """d named categorical attributes (``browser``, ``os``…), each with its own categories; a
    value is one category per attribute. The whole record is the privacy unit: a mechanism
    over it is ε-LDP for any two records, including two that differ in every attribute.

    The app reports a mapping {name: category} (or a sequence in attribute order); each
    attribute encodes as its own :class:`Categories` does (``other`` included).
    """

    kind: ClassVar[str] = "record"
    names: tuple[str, ...]
    attributes: tuple[Categories, ...]

    def __post_init__(self) -> None:
        if not 2 <= len(self.names) <= MAX_RECORD_ATTRIBUTES \
                or len(self.names) != len(self.attributes):
            raise CampaignError(f"a record domain has 2 to {MAX_RECORD_ATTRIBUTES} attributes "
                                "(one attribute is a categories domain)")
        for name in self.names:
            if not isinstance(name, str) or not name or len(name) > MAX_CATEGORY_CHARS \
                    or name != name.strip() or any(c in name for c in ",:|="):
                raise CampaignError(
                    "attribute names are non-empty strings of at most "
                    f"{MAX_CATEGORY_CHARS} characters, without surrounding spaces or any of "
                    "',', ':', '|', '=' (queries name attributes with them)")
        if len(set(self.names)) != len(self.names):
            raise CampaignError("attribute names must be distinct")
        for name, attribute in zip(self.names, self.attributes, strict=True):
            if not 2 <= attribute.size <= MAX_RECORD_CATEGORIES:
                raise CampaignError(f"attribute {name!r} needs 2 to {MAX_RECORD_CATEGORIES} "
                                    f"categories, got {attribute.size}")

    @property
    def size(self) -> int:
        """The number of attributes, d."""
        return len(self.names)

    @property
    def sizes(self) -> tuple[int, ...]:
        """k_1, …, k_d: each attribute's number of categories."""
        return tuple(a.size for a in self.attributes)

    def position(self, name: str) -> int:
        """The index of the attribute called ``name``; raises ``KeyError``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(name) from None

    def encode(self, value: object) -> tuple[int, ...]:
        """One category index per attribute, or :class:`ValueDomainError`."""
        items = _by_attribute(value, self.names, "record", "categories")
        out = []
        for name, attribute, item in zip(self.names, self.attributes, items, strict=True):
            try:
                out.append(attribute.encode(item))
            except ValueDomainError as error:
                raise ValueDomainError(f"attribute {name!r}: {error}") from None
        return tuple(out)

    def random_value(self, rng: RandomSource) -> dict[str, str]:
        return {name: a.random_value(rng) for name, a in zip(self.names, self.attributes,
                                                             strict=True)}

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "attributes": [
            {"name": name, **{k: v for k, v in a.to_json().items() if k != "kind"}}
            for name, a in zip(self.names, self.attributes, strict=True)]}


Domain = Categories | NumericRange | NumericVector | OpenStrings | Record


def domain_from_json(obj: object) -> Domain:
    """Parse a domain from its JSON form, with a clear error for anything malformed."""
    if isinstance(obj, list):  # shorthand: a bare list of categories
        obj = {"kind": "categories", "values": obj}
    if not isinstance(obj, dict):
        raise CampaignError("domain must be an object with a 'kind', or a list of categories")
    kind = obj.get("kind")
    allowed: dict[str, set[str]] = {
        "categories": {"kind", "values", "other"},
        "numeric": {"kind", "lo", "hi"},
        "strings": {"kind", "max_bytes", "alphabet"},
        "vector": {"kind", "attributes"},
        "record": {"kind", "attributes"},
    }
    if not isinstance(kind, str) or kind not in allowed:
        raise CampaignError(f"domain.kind must be one of {sorted(allowed)}, got {kind!r:.80}")
    unknown = set(obj) - allowed[kind]
    if unknown:
        raise CampaignError(f"unknown domain fields for kind {kind!r}: {sorted(unknown)}")
    if kind == "categories":
        values = obj.get("values")
        if not isinstance(values, list):
            raise CampaignError("domain.values must be a list of strings")
        other = obj.get("other")
        if other is not None and not isinstance(other, str):
            raise CampaignError("domain.other must be a category name")
        return Categories(tuple(values), other)
    if kind == "numeric":
        if "lo" not in obj or "hi" not in obj:
            raise CampaignError("a numeric domain needs both 'lo' and 'hi'")
        return NumericRange(obj["lo"], obj["hi"])
    if kind == "vector":
        return _vector_from_json(obj.get("attributes"))
    if kind == "record":
        return _record_from_json(obj.get("attributes"))
    return OpenStrings(obj.get("max_bytes", MAX_STRING_BYTES), obj.get("alphabet"))


def _vector_from_json(attributes: object) -> NumericVector:
    if not isinstance(attributes, list) or not attributes:
        raise CampaignError('domain.attributes must be a list of {"name", "lo", "hi"}')
    if len(attributes) > MAX_ATTRIBUTES:
        raise CampaignError(f"a vector domain has at most {MAX_ATTRIBUTES} attributes")
    names, ranges = [], []
    for item in attributes:
        if not isinstance(item, dict) or set(item) != {"name", "lo", "hi"}:
            raise CampaignError('each attribute is {"name": ..., "lo": ..., "hi": ...}')
        names.append(item["name"])
        ranges.append(NumericRange(item["lo"], item["hi"]))
    return NumericVector(tuple(names), tuple(ranges))


def _record_from_json(attributes: object) -> Record:
    shape = '{"name": ..., "values": [...]} (and optionally "other")'
    if not isinstance(attributes, list) or not attributes:
        raise CampaignError(f"domain.attributes must be a list of {shape}")
    if len(attributes) > MAX_RECORD_ATTRIBUTES:
        raise CampaignError(f"a record domain has at most {MAX_RECORD_ATTRIBUTES} attributes")
    names, categories = [], []
    for item in attributes:
        if not isinstance(item, dict) or not {"name", "values"} <= set(item) \
                or not set(item) <= {"name", "values", "other"}:
            raise CampaignError(f"each attribute is {shape}")
        values, other = item["values"], item.get("other")
        if not isinstance(values, list):
            raise CampaignError(f"attribute {str(item['name'])!r:.80}: values must be a list "
                                "of strings")
        if other is not None and not isinstance(other, str):
            raise CampaignError("an attribute's other must be a category name")
        names.append(item["name"])
        categories.append(Categories(tuple(values), other))
    return Record(tuple(names), tuple(categories))
