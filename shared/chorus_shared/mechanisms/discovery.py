"""Discovery of frequent strings without a candidate list: PEM and TreeHist.

MECHANISMS.md §13 and MECHANISMS-2.md §3. A value is its UTF-8 bytes padded with zeros to the
campaign's ``max_bytes``: a bit string of m = 8·max_bytes bits. Both mechanisms walk down the
prefixes of that string, η bits (``step_bits``) at a time, keeping the ``keep`` most frequent
prefixes at each step and extending each by all 2^η continuations; the collector runs the walk
at query time, so nobody has to list candidates.

* **PEM** (Wang, Li, Jha, "Locally differentially private heavy hitter identification", IEEE
  TDSC 2021). Installs are split into ``steps + 1`` groups. Group i reports its s_i-bit prefix
  with OLH at the full ε; the last group reports the whole string and is used only to estimate
  the frequencies of what the walk found, so those estimates are unbiased (no winner's curse)
  and their z-tests are valid.
* **TreeHist** as pure-LDP implements it (a simplification of Bassily, Nissim, Stemmer,
  Thakurta, NeurIPS 2017): every report carries a prefix at the install's level with ε₁ and the
  whole string with ε₂ = ε − ε₁, so the final frequencies use every install, at half the ε.

The frequency oracle is OLH over a fixed public family of ``cohorts`` hash functions
(``chorus_shared.prefix_hash``): a report is (group, cohort, y) with y = k-RR over ``bins``
buckets of h_cohort(prefix). Fixed hash functions make the collector's statistic a fixed-size
count table (groups × cohorts × bins) that adds up across time buckets, workers and engines
like every other Chorus statistic; per-report seeds would need the raw reports at query time.
A fixed family is unbiased on average over the family (the ``salt`` draws one); the collector's
final step fits the found values jointly, which removes their collisions with one another.

The group is a public assignment independent of the value. The client derives it from its
install key for each campaign and privacy period (``keyed_assignment``), so every report of one
period lands in the same group, as PEM's analysis assumes, and a restart does not move it.
"""

from __future__ import annotations

import codecs
import functools
import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import product
from statistics import NormalDist
from typing import Any, ClassVar

from chorus_shared import prefix_hash
from chorus_shared.domain import Domain, OpenStrings
from chorus_shared.errors import CampaignError, ValueDomainError, WireError
from chorus_shared.mechanisms.base import EMPTY, IntParam, Mechanism
from chorus_shared.rng import RandomSource, bernoulli

__all__ = ["DETECTION_ALPHA", "MAX_DISCOVERY_BYTES", "PEM", "PrefixDiscovery", "TreeHist",
           "could_start", "olh_variance", "symbol_bits"]

MAX_DISCOVERY_BYTES = 64
#: keep × 2^η: what one step of the walk evaluates at most. Two characters of [a-z] a step for
#: keep ≤ 179 (top ≤ 89): PEM then has 4 walk groups where one character a step needs 7.
MAX_STEP_CANDIDATES = 131_072
#: What the default schedule lets a step evaluate with fewer than :data:`WIDE_COHORTS` hash
#: functions (OLH's buckets past 64, ε above ~4.2): there the collisions among many candidates
#: outweigh the installs that fewer groups give each step. With 16 cohorts at ε = 8 two
#: letters a step took top-50 recall from 0.74 to 0.46 (Zipf 1.5, n = 10⁵, 5 seeds).
NARROW_STEP_CANDIDATES = 16_384
WIDE_COHORTS = 64
MAX_CELLS = 1 << 20  # groups × cohorts × bins: the statistic per time bucket (8 MiB)
MAX_BINS = 1024
SALT_MAX = (1 << 31) - 1
#: The family-wise false-positive rate of the ``detected`` flags (Holm over the values tested).
DETECTION_ALPHA = 0.05


def olh_variance(epsilon: float, bins: int) -> float:
    """n·Var[f̂] of OLH with ``bins`` buckets as f → 0: q*(1 − q*)/(p − q*)², q* = 1/bins."""
    e = math.exp(epsilon)
    p = e / (e + bins - 1)
    q_star = 1 / bins
    return q_star * (1 - q_star) / (p - q_star) ** 2


def _best_bins(epsilon: float) -> int:
    """OLH's optimal bucket count near e^ε + 1 (the least exact variance), capped."""
    e = math.exp(epsilon)
    options = sorted({max(2, min(MAX_BINS, math.floor(e) + 1)),
                      max(2, min(MAX_BINS, math.ceil(e) + 1))})
    return min(options, key=lambda g: olh_variance(epsilon, g))


def symbol_bits(domain: Domain) -> int:
    """Bits per symbol of a value's encoding: a byte, or a character of the domain's alphabet
    numbered 1…|A| (0 is the padding), in ⌈log₂(|A| + 1)⌉ bits."""
    alphabet = getattr(domain, "alphabet", None)
    return 8 if alphabet is None else len(alphabet).bit_length()


def _symbol_count(domain: Domain) -> int:
    """Each symbol's code count, padding included: 2⁸ bytes, or |A| + 1."""
    alphabet = getattr(domain, "alphabet", None)
    return 256 if alphabet is None else len(alphabet) + 1


def _step_limit(earlier: Mapping[str, int]) -> int:
    """Candidates a default step may evaluate: :data:`MAX_STEP_CANDIDATES` with at least
    :data:`WIDE_COHORTS` hash functions, :data:`NARROW_STEP_CANDIDATES` with fewer."""
    return MAX_STEP_CANDIDATES if earlier["cohorts"] >= WIDE_COHORTS \
        else NARROW_STEP_CANDIDATES


def _default_first_bits(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    """16 bits (two bytes) over bytes; over an alphabet, the most whole characters whose
    prefixes number at most the step limit in at most 16 bits (three of [a-z], 19,683
    candidates, with 64 cohorts or more; two, 729, with fewer)."""
    if getattr(domain, "alphabet", None) is None:
        return 16
    width, codes = symbol_bits(domain), _symbol_count(domain)
    count = 1
    while (count + 1) * width <= 16 and codes ** (count + 1) <= _step_limit(earlier):
        count += 1
    return count * width


def _default_step_bits(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    """The largest η in 8, 4, 2, 1 with keep·2^η within the step limit (131,072 candidates
    with 64 cohorts or more, 16,384 with fewer): fewer, larger steps split the installs into
    fewer groups (MECHANISMS-2.md §8.7). Over an alphabet, the most whole characters t with
    keep·(|A| + 1)^t within it in at most 16 bits (at least one)."""
    limit = _step_limit(earlier)
    if getattr(domain, "alphabet", None) is None:
        return next((eta for eta in (8, 4, 2, 1) if earlier["keep"] << eta <= limit), 1)
    width, codes = symbol_bits(domain), _symbol_count(domain)
    count = 1
    while (count + 1) * width <= 16 and earlier["keep"] * codes ** (count + 1) <= limit:
        count += 1
    return count * width


def _default_cohorts(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    """About 4,096 cells per group: many cohorts keep hash collisions rare on average."""
    return max(16, min(512, 4096 // earlier["bins"]))


TOP = IntParam(name="top", help="how many of the most frequent values to discover", lo=1,
               hi=256, default=20)
KEEP = IntParam(name="keep", help="candidates kept at each step (at least top)", lo=1,
                hi=1024, default=lambda eps, domain, earlier: max(2 * earlier["top"], 32))
STEP_BITS = IntParam(name="step_bits", help="bits added to the prefixes at each step", lo=1,
                     hi=16, default=_default_step_bits)
BINS = IntParam(name="bins", help="OLH hash buckets", lo=2, hi=MAX_BINS,
                default=lambda eps, domain, earlier: _best_bins(eps))
COHORTS = IntParam(name="cohorts", help="public hash functions per group", lo=1, hi=4096,
                   default=_default_cohorts)
FIRST_BITS = IntParam(name="first_bits", help="prefix bits of the first step, enumerated in full",
                      lo=1, hi=16, default=_default_first_bits)
SALT = IntParam(name="salt", help="selects the public hash functions", lo=0, hi=SALT_MAX,
                default=0)


def _default_final_share(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    """A quarter of the installs, or an equal share where the walk has fewer than three
    groups: the walk decides what is found, the estimation group how precisely it is measured
    (docs/mechanisms/discovery.md, "The walk's schedule")."""
    walk = walk_lengths(domain, earlier["keep"], earlier["step_bits"], earlier["first_bits"])
    return max(25, 100 // (len(walk) + 1))


FINAL_SHARE = IntParam(name="final_share", help="percent of installs in PEM's estimation group",
                       lo=5, hi=50, default=_default_final_share)


def prefix_lengths(m: int, keep: int, step_bits: int, first_bits: int,
                   width: int = 1) -> tuple[int, ...]:
    """The prefix lengths of the walk, in bits. The first step enumerates every prefix, so it
    can be long: ``first_bits`` (16 by default: 65,536 candidates, evaluated once), and at
    least ⌊log₂ keep⌋ + 1 (MECHANISMS-2.md §3.1); each later step adds η bits (the last one
    fewer if it must); the last is m. Fewer steps mean fewer groups, so each holds more
    installs: starting at 16 bits rather than 6 raised top-10 recall from 0.8 to 1.0 at
    ε = 2, n = 10⁶ (Zipf 1.1 over 10⁵ strings of up to 8 bytes). Over an alphabet every
    length is a whole number of ``width``-bit characters."""
    least = math.floor(math.log2(keep)) + 1
    lengths = [min(m, max(first_bits, -(-least // width) * width))]
    while lengths[-1] < m:
        lengths.append(min(m, lengths[-1] + step_bits))
    return tuple(lengths)


def walk_lengths(domain: Domain, keep: int, step_bits: int, first_bits: int) -> tuple[int, ...]:
    """:func:`prefix_lengths` for a domain's encoding: whole characters over an alphabet."""
    width = symbol_bits(domain)
    unit = 1 if getattr(domain, "alphabet", None) is None else width
    return prefix_lengths(_symbols(domain) * width, keep, step_bits, first_bits, unit)


def _symbols(domain: Domain) -> int:
    alphabet = getattr(domain, "alphabet", None)
    max_bytes: int = getattr(domain, "max_bytes", 0)
    if alphabet is None:
        return max_bytes
    return max_bytes // min(len(c.encode("utf-8")) for c in alphabet)


def _codes(prefix: int, s: int, width: int) -> list[int]:
    """The whole ``width``-bit symbols of an s-bit prefix, first first."""
    whole = s // width
    mask = (1 << width) - 1
    head = prefix >> (s - whole * width)
    return [(head >> (width * (whole - 1 - i))) & mask for i in range(whole)]


def could_start(domain: OpenStrings, prefix: int, s: int) -> bool:
    """Whether an s-bit prefix can start some value's encoding: its whole symbols are valid
    (UTF-8 bytes, or characters of the alphabet within the byte limit) and only padding
    follows padding. The walk prunes the rest before estimating them."""
    alphabet = domain.alphabet
    if alphabet is not None:
        codes = _codes(prefix, s, symbol_bits(domain))
        return _padded(codes) and all(c <= len(alphabet) for c in codes) and len("".join(
            alphabet[c - 1] for c in codes if c).encode("utf-8")) <= domain.max_bytes
    # Over bytes, the whole bytes at once: bytes(_codes(prefix, s, 8)) without a Python step
    # per byte (a walk step over bytes checks 256 extensions of each survivor).
    whole = s // 8
    data = (((prefix >> (s - 8 * whole)) & ((1 << 8 * whole) - 1)).to_bytes(whole, "big")
            if whole > 0 else b"")
    text = data.rstrip(b"\0")
    if b"\0" in text:  # not _padded: something other than padding after padding
        return False
    # What UTF-8's incremental decoder does with a first chunk (final when padding follows),
    # without its Python-level object and methods: the bytes it does not consume are pending.
    try:
        consumed = codecs.utf_8_decode(text, "strict", len(text) < len(data))[1]
    except UnicodeDecodeError:
        return False
    pending = text[consumed:]  # a character begun: it must end within max_bytes
    if pending:
        lead = pending[0]
        width = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        return len(text) + width - len(pending) <= domain.max_bytes
    return True


def _padded(codes: list[int]) -> bool:
    """No symbol but padding (0) after the first padding symbol."""
    if 0 not in codes:
        return True
    return not any(codes[codes.index(0):])


@dataclass(frozen=True, kw_only=True)
class PrefixDiscovery(Mechanism):
    """What PEM and TreeHist share: the string encoding, the walk's schedule, the oracle."""

    domain_kinds: ClassVar[tuple[str, ...]] = ("strings",)
    estimate_kind: ClassVar[str] = "frequency"
    keyed_assignment: ClassVar[bool] = True

    domain: OpenStrings
    epsilon: float
    top: int
    keep: int
    first_bits: int
    step_bits: int
    bins: int
    cohorts: int
    salt: int

    def __post_init__(self) -> None:
        if self.keep < self.top:
            raise CampaignError(f"keep ({self.keep}) must be at least top ({self.top})")
        width = self.symbol_bits
        if self.domain.alphabet is not None and (self.first_bits % width
                                                 or self.step_bits % width):
            raise CampaignError(
                f"over an alphabet of {len(self.domain.alphabet)} characters ({width} bits "
                f"each) first_bits and step_bits must be whole characters: multiples of "
                f"{width}")
        if self.step_candidates > MAX_STEP_CANDIDATES:
            raise CampaignError(f"keep × the extensions of a step = {self.step_candidates} "
                                f"exceeds {MAX_STEP_CANDIDATES} candidates per step; lower "
                                "keep or step_bits")
        if self.cells > MAX_CELLS:
            raise CampaignError(f"groups × cohorts × bins = {self.cells} exceeds {MAX_CELLS}; "
                                "use fewer cohorts or a shorter max_bytes")

    @classmethod
    def check_domain(cls, domain: Domain) -> None:
        super().check_domain(domain)
        if not isinstance(domain, OpenStrings) or domain.max_bytes > MAX_DISCOVERY_BYTES:
            raise CampaignError(f"mechanism {cls.name!r} discovers strings of at most "
                                f"{MAX_DISCOVERY_BYTES} bytes: every 8 more bits add a step, "
                                "and each step costs accuracy; set domain.max_bytes")

    @property
    def symbol_bits(self) -> int:
        """Bits per byte or per character of the alphabet."""
        return symbol_bits(self.domain)

    @functools.cached_property
    def symbols(self) -> int:
        """How many bytes (or characters of the alphabet) the encoding holds."""
        return _symbols(self.domain)

    @functools.cached_property
    def m(self) -> int:
        return self.symbols * self.symbol_bits

    @property
    def step_candidates(self) -> int:
        """What one later step of the walk evaluates at most: keep × each survivor's
        extensions (every η-bit continuation, or every character of the alphabet)."""
        if self.domain.alphabet is None:
            return self.keep << self.step_bits
        extensions: int = _symbol_count(self.domain) ** (self.step_bits // self.symbol_bits)
        return self.keep * extensions

    @functools.cached_property  # read several times per report: computed once
    def lengths(self) -> tuple[int, ...]:
        """The prefix length (bits) that each level of the walk reports."""
        return walk_lengths(self.domain, self.keep, self.step_bits, self.first_bits)

    @property
    def groups(self) -> int:
        """How many public groups the installs are split into."""
        return len(self.lengths)

    @property
    def cells(self) -> int:
        return self.groups * self.cohorts * self.bins

    def group_length(self, group: int) -> int:
        return self.lengths[group]

    # -- the value -------------------------------------------------------------------------

    def encode(self, value: object) -> int:
        text = self.domain.encode(value)
        alphabet = self.domain.alphabet
        if alphabet is not None:
            return prefix_hash.symbols_value([alphabet.index(c) + 1 for c in text],
                                             self.symbol_bits, self.symbols)
        data = text.encode("utf-8")
        if b"\0" in data:  # the padding: a value with NUL could not be told from a shorter one
            raise ValueDomainError("a discovery campaign's values cannot contain NUL")
        return prefix_hash.value_bits(data, self.domain.max_bytes)

    def inputs(self) -> Iterable[int]:
        if self.m > 16:
            raise TypeError("enumerating discovery inputs needs an encoding of at most 16 bits")
        return range(1 << self.m)

    def decode(self, bits: int) -> str | None:
        """The string an m-bit value stands for, or None if no value encodes to it."""
        alphabet = self.domain.alphabet
        if alphabet is not None:
            codes = _codes(bits, self.m, self.symbol_bits)
            if not _padded(codes) or any(c > len(alphabet) for c in codes):
                return None
            text = "".join(alphabet[c - 1] for c in codes if c)
            return text if len(text.encode("utf-8")) <= self.domain.max_bytes else None
        data = bits.to_bytes(self.domain.max_bytes, "big").rstrip(b"\0")
        if b"\0" in data:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def could_start(self, prefix: int, s: int) -> bool:
        """Whether an s-bit prefix can start some value's encoding (:func:`could_start`)."""
        return could_start(self.domain, prefix, s)

    # -- the oracle ------------------------------------------------------------------------

    def oracle_bucket(self, group: int, s: int, cohort: int, bins: int, x: int) -> int:
        words = prefix_hash.prefix_words(x, s, self.m)
        chained = prefix_hash.chain(prefix_hash.seed(self.salt, group, s), words)
        return prefix_hash.bucket(chained, cohort, bins)

    @staticmethod
    def _krr(bucket: int, bins: int, epsilon: float, rng: RandomSource) -> int:
        e = math.exp(epsilon)
        if bernoulli(rng, e / (e + bins - 1)):
            return bucket
        other = rng.randrange(bins - 1)
        return other + 1 if other >= bucket else other

    @staticmethod
    def _krr_probability(y: int, bucket: int, bins: int, epsilon: float) -> float:
        e = math.exp(epsilon)
        return (e if y == bucket else 1.0) / (e + bins - 1)

    @property
    def group_weights(self) -> tuple[int, ...]:
        """Each group's share of the installs, in whole units (equal by default)."""
        return (1,) * self.groups

    def group_probability(self, group: int) -> float:
        weights = self.group_weights
        return weights[group] / sum(weights)

    def group_of(self, unit: int) -> int:
        """The group that a unit drawn uniformly from ``range(sum(group_weights))`` falls in."""
        for group, weight in enumerate(self.group_weights):
            if unit < weight:
                return group
            unit -= weight
        raise ValueError("unit out of range")

    def assign(self, rng: RandomSource) -> dict[str, int]:
        return {"group": self.group_of(rng.randrange(sum(self.group_weights)))}

    def _group(self, assignment: Mapping[str, int], rng: RandomSource) -> int:
        group = assignment.get("group")
        return self.assign(rng)["group"] if group is None else group

    def _check_ints(self, payload: object, fields: tuple[str, ...]) -> dict[str, int]:
        if not isinstance(payload, dict) or set(payload) != set(fields) or not all(
                type(payload[k]) is int for k in fields):
            shape = ", ".join(f'"{k}": int' for k in fields)
            raise WireError(f"a {self.name} payload is {{{shape}}}")
        return {k: payload[k] for k in fields}

    # -- what the config says --------------------------------------------------------------

    @abstractmethod
    def final_variance(self) -> float:
        """n·Var[f̂] of a found value's final frequency as f → 0."""

    @abstractmethod
    def walk_variance(self) -> float:
        """n·Var[f̂] of a prefix's frequency at one step of the walk as f → 0."""

    def detection_z(self) -> float:
        """The z a found value needs to be flagged at worst (Bonferroni over ``keep``)."""
        return NormalDist().inv_cdf(1 - DETECTION_ALPHA / self.keep)

    def describe(self) -> dict[str, Any]:
        z = self.detection_z()
        return {
            **super().describe(), "estimates": "discovered strings",
            "prefix_bits": list(self.lengths), "groups": self.groups,
            "candidates_per_step": self.step_candidates,
            "detection": (f"a found value is flagged detected when its final estimate passes "
                          f"Holm's one-sided z-tests at family-wise error {DETECTION_ALPHA} "
                          f"over the values tested (z ≥ {z:.3g} at worst)"),
            "threshold_at_1e6_reports": round(z * math.sqrt(max(
                self.final_variance(), self.walk_variance()) / 1e6), 6),
        }


@dataclass(frozen=True, kw_only=True)
class PEM(PrefixDiscovery):
    """Payload ``{"g": group, "c": cohort, "y": bucket}``; group ``groups − 1`` is the
    estimation group, which reports the whole string."""

    name: ClassVar[str] = "pem"
    # The schedule's defaults depend on the hash family's size, so bins and cohorts come first.
    parameters: ClassVar[tuple[IntParam, ...]] = (TOP, KEEP, BINS, COHORTS, FIRST_BITS,
                                                  STEP_BITS, FINAL_SHARE, SALT)

    final_share: int

    @property
    def group_weights(self) -> tuple[int, ...]:
        """In units of 1/(100·W), W the walk's groups: the estimation group holds
        ``final_share`` percent, and the walk's groups split the rest equally."""
        walk = self.walk_groups
        return (100 - self.final_share,) * walk + (self.final_share * walk,)

    @functools.cached_property
    def lengths(self) -> tuple[int, ...]:
        return (*walk_lengths(self.domain, self.keep, self.step_bits, self.first_bits), self.m)

    @property
    def walk_groups(self) -> int:
        return self.groups - 1

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, int]:
        group = self._group(assignment, rng)
        cohort = rng.randrange(self.cohorts)
        bucket = self.oracle_bucket(group, self.lengths[group], cohort, self.bins, x)
        return {"g": group, "c": cohort, "y": self._krr(bucket, self.bins, self.epsilon, rng)}

    def check_payload(self, payload: object) -> dict[str, int]:
        checked = self._check_ints(payload, ("g", "c", "y"))
        if not (0 <= checked["g"] < self.groups and 0 <= checked["c"] < self.cohorts
                and 0 <= checked["y"] < self.bins):
            raise WireError(f"need 0 <= g < {self.groups}, 0 <= c < {self.cohorts}, "
                            f"0 <= y < {self.bins}")
        return checked

    @property
    def report_bits(self) -> int:
        return sum(max(1, (k - 1).bit_length()) for k in (self.groups, self.cohorts, self.bins))

    def output_probability(self, payload: dict[str, int], x: int) -> float:
        group, cohort = payload["g"], payload["c"]
        bucket = self.oracle_bucket(group, self.lengths[group], cohort, self.bins, x)
        return self.group_probability(group) * (1 / self.cohorts) * self._krr_probability(
            payload["y"], bucket, self.bins, self.epsilon)

    def outputs(self) -> Iterable[dict[str, int]]:
        if self.cells > 1 << 16:
            raise TypeError("enumerating pem outputs needs few groups, cohorts and bins")
        return ({"g": g, "c": c, "y": y} for g, c, y in
                product(range(self.groups), range(self.cohorts), range(self.bins)))

    def final_variance(self) -> float:
        return olh_variance(self.epsilon, self.bins) / self.group_probability(self.groups - 1)

    def walk_variance(self) -> float:
        return olh_variance(self.epsilon, self.bins) / self.group_probability(0)


SHARE = IntParam(name="prefix_share", help="percent of ε spent on the prefix report", lo=1,
                 hi=99, default=50)


def _word_bins(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    return _best_bins(eps * (100 - earlier["prefix_share"]) / 100)


def _prefix_bins(eps: float, domain: Domain, earlier: Mapping[str, int]) -> int:
    return _best_bins(eps * earlier["prefix_share"] / 100)


@dataclass(frozen=True, kw_only=True)
class TreeHist(PrefixDiscovery):
    """Payload ``{"g": level, "c": cohort, "y": bucket, "wc": cohort, "wy": bucket}``: the
    prefix at the install's level with ε₁, and the whole string with ε₂, each by OLH.
    The whole-string reports form one more table of ``cohorts × word_bins`` cells."""

    name: ClassVar[str] = "treehist"

    prefix_share: int
    word_bins: int

    parameters: ClassVar[tuple[IntParam, ...]] = (
        TOP, KEEP, SHARE,
        IntParam(name="bins", help="OLH hash buckets of the prefix report", lo=2, hi=MAX_BINS,
                 default=_prefix_bins),
        IntParam(name="word_bins", help="OLH hash buckets of the whole-string report", lo=2,
                 hi=MAX_BINS, default=_word_bins),
        COHORTS, FIRST_BITS, STEP_BITS, SALT)

    @property
    def epsilon_prefix(self) -> float:
        return self.epsilon * self.prefix_share / 100

    @property
    def epsilon_word(self) -> float:
        return self.epsilon - self.epsilon_prefix

    @property
    def cells(self) -> int:
        return self.cohorts * (self.groups * self.bins + self.word_bins)

    def word_bucket(self, cohort: int, x: int) -> int:
        # The whole-string table uses group index ``groups`` in the hash seed: its own family.
        return self.oracle_bucket(self.groups, self.m, cohort, self.word_bins, x)

    def randomize(self, x: int, rng: RandomSource,
                  assignment: Mapping[str, int] = EMPTY) -> dict[str, int]:
        level = self._group(assignment, rng)
        cohort = rng.randrange(self.cohorts)
        bucket = self.oracle_bucket(level, self.lengths[level], cohort, self.bins, x)
        y = self._krr(bucket, self.bins, self.epsilon_prefix, rng)
        word_cohort = rng.randrange(self.cohorts)
        word_y = self._krr(self.word_bucket(word_cohort, x), self.word_bins, self.epsilon_word,
                           rng)
        return {"g": level, "c": cohort, "y": y, "wc": word_cohort, "wy": word_y}

    def check_payload(self, payload: object) -> dict[str, int]:
        checked = self._check_ints(payload, ("g", "c", "y", "wc", "wy"))
        if not (0 <= checked["g"] < self.groups and 0 <= checked["c"] < self.cohorts
                and 0 <= checked["y"] < self.bins and 0 <= checked["wc"] < self.cohorts
                and 0 <= checked["wy"] < self.word_bins):
            raise WireError(f"need 0 <= g < {self.groups}, 0 <= c, wc < {self.cohorts}, "
                            f"0 <= y < {self.bins}, 0 <= wy < {self.word_bins}")
        return checked

    @property
    def report_bits(self) -> int:
        return sum(max(1, (k - 1).bit_length()) for k in
                   (self.groups, self.cohorts, self.bins, self.cohorts, self.word_bins))

    def output_probability(self, payload: dict[str, int], x: int) -> float:
        level, cohort = payload["g"], payload["c"]
        bucket = self.oracle_bucket(level, self.lengths[level], cohort, self.bins, x)
        prefix = self._krr_probability(payload["y"], bucket, self.bins, self.epsilon_prefix)
        word = self._krr_probability(payload["wy"], self.word_bucket(payload["wc"], x),
                                     self.word_bins, self.epsilon_word)
        return prefix * word / (self.groups * self.cohorts * self.cohorts)

    def outputs(self) -> Iterable[dict[str, int]]:
        if self.groups * self.cohorts**2 * self.bins * self.word_bins > 1 << 16:
            raise TypeError("enumerating treehist outputs needs tiny parameters")
        return ({"g": g, "c": c, "y": y, "wc": wc, "wy": wy} for g, c, y, wc, wy in product(
            range(self.groups), range(self.cohorts), range(self.bins), range(self.cohorts),
            range(self.word_bins)))

    def final_variance(self) -> float:
        return olh_variance(self.epsilon_word, self.word_bins)

    def walk_variance(self) -> float:
        return self.groups * olh_variance(self.epsilon_prefix, self.bins)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "epsilon_prefix": self.epsilon_prefix,
                "epsilon_word": self.epsilon_word}
