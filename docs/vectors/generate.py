"""Write the protocol test vectors of docs/protocol.md: ``python docs/vectors/generate.py``.

Deterministic: every random draw comes from a seeded ``random.Random``, so running it twice
gives byte-identical files. ``tests/shared/test_protocol_vectors.py`` checks every vector
against the code and that regenerating them gives exactly the committed files.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _path in (ROOT / "tests", ROOT / "shared"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from chorus_shared import prefix_hash  # noqa: E402
from chorus_shared.campaign import (  # noqa: E402
    DERIVED_FIELDS,
    Campaign,
    campaign_from_spec,
    canonical_json,
)
from chorus_shared.errors import DigestMismatch, WireError  # noqa: E402
from chorus_shared.hashing import MAX_COHORTS, bloom_bits, google_bloom_bits  # noqa: E402
from chorus_shared.mechanisms.hadamard import in_block  # noqa: E402
from chorus_shared.mechanisms.local_hashing import PRIME, local_hash  # noqa: E402
from chorus_shared.mechanisms.succinct import hadamard_sign  # noqa: E402
from chorus_shared.wire import MAX_TIME, Report, parse_report  # noqa: E402
from helpers.examples import EXAMPLES  # noqa: E402

__all__ = ["FILES", "build", "campaign_specs", "main"]

SEED = 20260101
REPORT_TIME = 1767225600  # 2026-01-01T00:00:00Z, a multiple of every precision used here

#: Campaigns beyond the registry's examples, each for a trap a port may fall into.
EXTRA_SPECS: list[dict[str, Any]] = [
    {"name": "unicode-labels", "mechanism": "krr", "epsilon": 0.1,
     "description": "Non-ASCII is written as raw UTF-8: é, 日本語, 😀",
     "domain": {"kind": "categories", "other": "autre",
                "values": ["é", "e\u0301", "日本語", "😀", 'quote " and \\ backslash',
                           "tab\tnewline\ncontrol\u0001del\u007f", "\u2028", "autre"]}},
    {"name": "third-epsilon", "mechanism": "oue", "epsilon": 1 / 3,
     "domain": ["a", "b", "c"], "privacy": {"unit": "day", "budget": 2.5, "max_reports": 7},
     "time_precision": 86400, "min_batch_size": 1, "report_expiry": 86400},
    {"name": "float-formats", "mechanism": "duchi", "epsilon": 0.7,
     "domain": {"kind": "numeric", "lo": 1e-05, "hi": 1e16}},
    {"name": "float-formats-2", "mechanism": "laplace", "epsilon": 1.5e-1,
     "domain": {"kind": "numeric", "lo": -123456789.123, "hi": 0.000123},
     "params": {"resolution": 16}},
    {"name": "sampled-daily", "mechanism": "rr", "epsilon": 2.0, "domain": ["no", "yes"],
     "description": "4 reports per install over a year of days, drawn on the device",
     "privacy": {"budget": 8.0},
     "schedule": {"cadence": "day", "start": "2026-01-01", "end": "2026-12-31"}},
    {"name": "sampled-weekly", "mechanism": "duchi", "epsilon": 1.0,
     "domain": {"kind": "numeric", "lo": 0, "hi": 100}, "time_precision": 86400,
     "privacy": {"budget": 3.0}, "schedule": {"cadence": "week", "start": "2026-03-02"}},
    {"name": "float-formats-3", "mechanism": "pm_md", "epsilon": 2.0,
     "domain": {"kind": "vector", "attributes": [
         {"name": "température", "lo": -273.15, "hi": 1e22},
         {"name": "ratio", "lo": 0, "hi": 1}]},
     "params": {"resolution": 8}},
    {"name": "rappor-explicit", "mechanism": "rappor", "domain": {"kind": "strings"},
     "params": {"k": 16, "h": 2, "m": 4, "f": 0.1, "p": 0.2, "q": 0.7}},
    {"name": "rappor-bisected", "mechanism": "rappor", "epsilon": 1.0,
     "domain": {"kind": "strings", "max_bytes": 64},
     "params": {"k": 12, "h": 2, "m": 3, "f": 0.3}},
    {"name": "rappor-google", "mechanism": "rappor", "epsilon": 2.0,
     "domain": {"kind": "strings"}, "params": {"k": 16, "h": 2, "m": 4, "hash": "google-md5"}},
    {"name": "olh-default-prime", "mechanism": "olh", "epsilon": 2.0,
     "domain": ["a", "b", "c", "d", "e"]},
    {"name": "auto-choice", "mechanism": "auto", "epsilon": 1.0,
     "domain": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
    {"name": "weak-privacy", "mechanism": "rr", "epsilon": 12.0, "domain": ["no", "yes"],
     "accept_weak_privacy": True},
]


def campaign_specs() -> list[dict[str, Any]]:
    """Every example campaign of the registry's tests, then the extra ones."""
    specs = [{"name": f"{mechanism}-{i}", "mechanism": mechanism, **spec}
             for mechanism, examples in EXAMPLES.items() for i, spec in enumerate(examples)]
    return [*specs, *EXTRA_SPECS]


def _campaign(spec: dict[str, Any]) -> Campaign:
    return campaign_from_spec(spec, warn=False)


def _dump(obj: Any) -> str:
    """A vector file: indented, keys in the order written, non-ASCII as is, floats as Python
    writes them (so 1.0 stays 1.0 in the file)."""
    return json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


# --- canonical JSON ---------------------------------------------------------------------

FLOATS = [0.0, -0.0, 1.0, -1.0, 2.0, 0.1, 0.2, 0.30000000000000004, 1 / 3, 2 / 3, 0.5, 2.5,
          100.0, 1e-4, 1e-05, 0.000123, 1.5e-07, 123456789.123, 1e15, 9999999999999998.0,
          1e16, 1.2345e16, 1e21, 1e22, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308,
          1.0986122886681098, 2.1972245773362196, 0.7310585786300049, 0.2689414213699951,
          3.0000000000000004, 12.0, 1e100, -273.15, 0.6]
INTEGERS = [0, 1, -1, 7, 3600, 86400, 7776000, 2147483647, 2**40, 2**53 + 1, 2**63 - 1]
STRINGS = ["", "a", "é", "e\u0301", "日本語", "😀", '"', "\\", "/", "\b\f\n\r\t",
           "\u0000\u0001\u001f", "\u007f", "\u0080", "\u2028\u2029", "\ufeff", "<>&'"]
OBJECTS: list[Any] = [
    {"b": 1, "a": [2, 1], "c": {"z": None, "y": True, "x": False}},
    {"é": 1, "e": 2, "z": 3, "E": 4, "_": 5, "1": 6},
    {"\uff01": "U+FF01", "😀": "U+1F600", "\u00e9": "U+00E9"},
    [[], {}, [None], ""],
]


def canonical_vectors() -> dict[str, Any]:
    return {
        "description": "canonical_json: json.dumps(obj, sort_keys=True, separators=(',', ':'), "
                       "ensure_ascii=False, allow_nan=False), then UTF-8. floats: the IEEE-754 "
                       "binary64 bits (big-endian hex) and the text Python writes for them.",
        "floats": [{"bits": struct.pack(">d", x).hex(), "canonical": json.dumps(x)}
                   for x in FLOATS],
        "integers": [{"value": n, "canonical": json.dumps(n)} for n in INTEGERS],
        "strings": [{"value": s, "canonical": canonical_json(s).decode(),
                     "utf8_hex": canonical_json(s).hex()} for s in STRINGS],
        "values": [{"value": v, "canonical": canonical_json(v).decode(),
                    "utf8_hex": canonical_json(v).hex()} for v in OBJECTS],
        "refused": [{"value": "NaN", "reason": "NaN is not JSON"},
                    {"value": "Infinity", "reason": "infinity is not JSON"},
                    {"value": "-Infinity", "reason": "infinity is not JSON"}],
    }


# --- campaigns --------------------------------------------------------------------------

def campaign_vectors() -> dict[str, Any]:
    out = []
    for spec in campaign_specs():
        campaign = _campaign(spec)
        canonical = canonical_json(campaign.config)
        out.append({"name": campaign.name, "spec": spec, "config": campaign.config,
                    "canonical": canonical.decode(), "canonical_bytes": len(canonical),
                    "digest": campaign.digest, "public_config": campaign.public_config()})
    return {
        "description": "spec: the definition an admin posts; config: the resolved config; "
                       "canonical: canonical_json(config) as text; digest: its SHA-256 in "
                       "lowercase hex; public_config: what GET /v1/campaigns/{name} serves "
                       f"(the config plus digest and {', '.join(DERIVED_FIELDS)}).",
        "campaigns": out,
    }


# --- hashing ----------------------------------------------------------------------------

HASH_VALUES = ["", "a", "ab", "abc", "abcd", "hello", "value-0", "value-1", "é", "日本語",
               "😀", "e\u0301", "the quick brown fox jumps over the lazy dog 0123456789"]


def hashing_vectors() -> dict[str, Any]:
    import mmh3

    murmur = [{"utf8_hex": value.encode().hex(), "seed": seed,
               "hash": mmh3.hash(value.encode(), seed, signed=False)}
              for value in HASH_VALUES
              for seed in (0, 1, 63, 64, 4242, (MAX_COHORTS - 1) * 64 + 63)]
    bloom = [{"value": value, "cohort": cohort, "k": k, "h": h,
              "bits": list(bloom_bits(value, cohort, k, h))}
             for value in HASH_VALUES
             for cohort, k, h in ((0, 32, 2), (1, 8, 4), (15, 4096, 64), (MAX_COHORTS - 1, 10, 3),
                                  (7, 1024, 1))]
    google = [{"value": value, "cohort": cohort, "k": k, "h": h,
               "md5_input_hex": (struct.pack(">L", cohort) + value.encode()).hex(),
               "bits": list(google_bloom_bits(value, cohort, k, h))}
              for value in HASH_VALUES for cohort, k, h in ((0, 16, 2), (3, 256, 16), (1, 10, 3))]
    rng = random.Random(SEED)
    olh = [{"a": a, "b": b, "v": v, "prime": prime, "g": g,
            "hash": local_hash(a, b, v, prime, g)}
           for a, b, v, prime, g in [(1, 0, 0, 7, 4), (6, 6, 2, 7, 4), (3, 5, 1, 11, 5),
                                     (PRIME - 1, PRIME - 1, (1 << 20) - 1, PRIME, 8),
                                     (PRIME - 1, 0, 1, PRIME, 2)]
           + [(1 + rng.randrange(PRIME - 1), rng.randrange(PRIME), rng.randrange(1 << 20), PRIME,
               rng.choice([2, 3, 4, 8, 21, 1 << 20])) for _ in range(12)]]
    prefix = prefix_hash_vectors()
    hadamard = [{"row": row, "column": column, "sign": hadamard_sign(row, column)}
                for row in range(8) for column in range(8)]
    blocks = [{"x": x, "y": y, "in_block": in_block(x, y)} for x in range(3) for y in range(4)]
    return {
        "description": "murmur3_x86_32: unsigned 32-bit MurmurHash3 of the bytes with the seed. "
                       "bloom_bits: h positions, murmur3(utf8(value), cohort*64 + i) mod k. "
                       "google_bloom_bits: MD5(cohort as 4 big-endian bytes + utf8(value)), byte "
                       "i mod k. local_hash: ((a*v + b) mod prime) mod g. hadamard: sign 1 when "
                       "popcount(row & column) is even, else 0. in_block: hr's y in C_x, "
                       "popcount((x + 1) & y) even. prefix_hash: the bucket a discovery "
                       "report (pem, treehist) hashes the s-bit prefix of a value into; see "
                       "shared/chorus_shared/prefix_hash.py and the intermediate values in "
                       "each row: value_hex = utf8(value) zero-padded to max_bytes (m = "
                       "8*max_bytes bits), prefix_words_hex = its first s bits, the rest "
                       "zeroed, as big-endian 64-bit words (the last zero-filled), seed_hex = "
                       "mix64((salt*0x9E3779B97F4A7C15 + (group+1)*0xAEF17502108EF2D9 + s) mod "
                       "2^64), chain_hex = mix64 of (chain xor word) over the words starting "
                       "from the seed, bucket = ((mix64(chain xor ((cohort+1)*"
                       "0xD1B54A32D192ED03 mod 2^64)) >> 32) * bins) >> 32; mix64 is "
                       "SplitMix64's finaliser. alphabet_encoding: over a declared alphabet a "
                       "discovery value is instead its characters' codes (place in the "
                       "alphabet plus one; 0 pads) in symbol_bits = bit_length(len(alphabet)) "
                       "bits each, padded with zero codes to max_bytes // (the alphabet's "
                       "shortest UTF-8 character) characters (m bits); the prefix hash then "
                       "runs on that m-bit string as above.",
        "murmur3_x86_32": murmur,
        "bloom_bits": bloom,
        "google_bloom_bits": google,
        "local_hash": olh,
        "prefix_hash": prefix,
        "alphabet_encoding": alphabet_vectors(),
        "hadamard_sign": hadamard,
        "hr_in_block": blocks,
    }


PREFIX_VALUES = ["", "a", "abc", "hello", "é", "日本語", "😀", "e\u0301",
                 "the quick brown fox jumps over the lazy dog, naïve café 😀!!"]  # 64 bytes


def prefix_hash_vectors() -> list[dict[str, Any]]:
    """Discovery's public hash: each value at a few campaign sizes, group indices, prefix
    lengths (1 bit, a whole word, a word and a bit, the whole value), cohorts and bins."""
    rng = random.Random(SEED + 2)
    out = []
    for value in PREFIX_VALUES:
        data = value.encode()
        for max_bytes in (8, 9, 64):
            if len(data) > max_bytes:
                continue
            m = 8 * max_bytes
            bits = prefix_hash.value_bits(data, max_bytes)
            lengths = sorted({1, min(m, 64), min(m, 65), m, rng.randrange(1, m + 1)})
            for s in lengths:
                salt = rng.choice([0, 1, 2**31 - 1, rng.randrange(2**31)])
                group, cohort = rng.randrange(65), rng.randrange(4096)
                bins = rng.choice([2, 3, 8, 55, 1024])
                words = prefix_hash.prefix_words(bits, s, m)
                start = prefix_hash.seed(salt, group, s)
                chained = prefix_hash.chain(start, words)
                out.append({"value": value, "max_bytes": max_bytes,
                            "value_hex": data.ljust(max_bytes, b"\0").hex(), "salt": salt,
                            "group": group, "s": s,
                            "prefix_words_hex": [format(w, "016x") for w in words],
                            "seed_hex": format(start, "016x"),
                            "chain_hex": format(chained, "016x"), "cohort": cohort,
                            "bins": bins,
                            "bucket": prefix_hash.bucket(chained, cohort, bins)})
    return out


ALPHABET_CASES = [("abcdefghijklmnopqrstuvwxyz", 8, ["", "a", "z", "hello", "zzzzzzzz"]),
                  ("0123456789", 12, ["0", "42", "000000000000", "31415926"]),
                  ("ACGT", 20, ["ACGT", "TTTTTTTTTTTTTTTTTTTT"]),
                  ("é日a", 7, ["a", "日é", "日日a"])]


def alphabet_vectors() -> list[dict[str, Any]]:
    """Values over declared alphabets: their m-bit encodings and one prefix hash each."""
    from chorus_shared.domain import OpenStrings
    from chorus_shared.mechanisms import PEM

    rng = random.Random(SEED + 3)
    out = []
    for alphabet, max_bytes, values in ALPHABET_CASES:
        mechanism = PEM.resolve(epsilon=2.0, domain=OpenStrings(max_bytes, alphabet),
                                params={"cohorts": 16})
        for value in values:
            bits = mechanism.encode(value)
            s = rng.choice(mechanism.lengths)
            group, cohort, bins = rng.randrange(8), rng.randrange(16), rng.choice([2, 8, 55])
            out.append({"value": value, "alphabet": alphabet, "max_bytes": max_bytes,
                        "symbol_bits": mechanism.symbol_bits, "m": mechanism.m,
                        "value_bits_hex": format(bits, "x"), "salt": 0, "group": group,
                        "s": s, "cohort": cohort, "bins": bins,
                        "bucket": mechanism.oracle_bucket(group, s, cohort, bins, bits)})
    return out


# --- payloads ---------------------------------------------------------------------------

def _field_limits(campaign: Campaign) -> dict[str, tuple[int, int]]:
    """Each integer field of a dict payload: its inclusive (low, high)."""
    mech: Any = campaign.mechanism
    name = mech.name
    if name in ("olh", "blh"):
        return {"a": (1, mech.prime - 1), "b": (0, mech.prime - 1), "y": (0, mech.g - 1)}
    if name == "shist":
        return {"j": (0, mech.size - 1), "b": (0, 1)}
    if name == "o_rr":
        return {"cohort": (0, mech.m - 1), "y": (0, mech.k - 1)}
    if name in ("rappor", "o_rappor", "basic_rappor", "boolean_rappor"):
        return {"cohort": (0, mech.m - 1)}
    if name == "cms":
        return {"j": (0, mech.k - 1)}
    if name == "hcms":
        return {"j": (0, mech.k - 1), "l": (0, mech.m - 1), "b": (0, 1)}
    return {}


def _mutations(campaign: Campaign, payload: Any) -> list[tuple[str, Any]]:
    """Candidate invalid payloads made from a valid one, each with what was changed."""
    out: list[tuple[str, Any]] = [("null", None), ("a string", "0"), ("true", True),
                                  ("an empty object", {}), ("an empty list", [])]
    bounds = campaign.mechanism.payload_bounds()
    if bounds is not None:
        low, high = bounds
        out += [("below the range", low - 1), ("above the range", high + 1),
                ("a float", float(low)), ("false", False), ("a list", [low]),
                ("beyond 64 bits", 2**64)]
    if isinstance(payload, dict):
        keys = sorted(payload)
        out.append((f"without {keys[0]!r}", {k: payload[k] for k in keys[1:]}))
        out.append(("an extra field", {**payload, "x": 0}))
        for key, (low, high) in _field_limits(campaign).items():
            out += [(f"{key} below its range", {**payload, key: low - 1}),
                    (f"{key} above its range", {**payload, key: high + 1}),
                    (f"{key} a float", {**payload, key: float(payload[key])}),
                    (f"{key} true", {**payload, key: True}),
                    (f"{key} a string", {**payload, key: str(payload[key])})]
        for key in keys:
            value = payload[key]
            if isinstance(value, str):
                out += [(f"{key} uppercase", {**payload, key: value.upper().replace("0", "A")}),
                        (f"{key} one digit longer", {**payload, key: "0" + value}),
                        (f"{key} one digit shorter", {**payload, key: value[1:]}),
                        (f"{key} all f", {**payload, key: "f" * len(value)}),
                        (f"{key} not hex", {**payload, key: "g" + value[1:]}),
                        (f"{key} a number", {**payload, key: int(value, 16)})]
            if isinstance(value, list) and value:
                out += [(f"{key} one item short", {**payload, key: value[:-1]}),
                        (f"{key} one item more", {**payload, key: [*value, value[-1]]}),
                        (f"{key} reversed", {**payload, key: value[::-1]}),
                        (f"{key} with a true", {**payload, key: [True, *value[1:]]}),
                        (f"{key} first item -1", {**payload, key: [-1, *value[1:]]})]
                if all(type(v) is int for v in value):
                    out.append((f"{key} first item 2", {**payload, key: [2, *value[1:]]}))
    if isinstance(payload, list) and payload:
        out += [("one item short", payload[:-1]), ("one item more", [*payload, payload[-1]]),
                ("reversed", payload[::-1]), ("first item true", [True, *payload[1:]]),
                ("first item 2", [2, *payload[1:]]), ("last item -1", [*payload[:-1], -1]),
                ("duplicated first item", [payload[0], *payload[:-1]]),
                ("last item huge", [*payload[:-1], 10**6])]
    return out


def payload_vectors() -> dict[str, Any]:
    out = []
    for spec in campaign_specs():
        # One generator per campaign, seeded by its name: a campaign added to the examples
        # leaves every other campaign's vectors as they were.
        rng = random.Random(f"{SEED}:{spec['name']}")
        campaign = _campaign(spec)
        mechanism, domain = campaign.mechanism, campaign.domain
        valid: list[Any] = []
        seen: set[bytes] = set()
        for _ in range(24):
            payload = mechanism.randomize(mechanism.encode(domain.random_value(rng)), rng)
            text = canonical_json(payload)
            if text not in seen:
                seen.add(text)
                valid.append(payload)
            if len(valid) == 6:
                break
        invalid = []
        taken: set[bytes] = set()
        for mutation, candidate in _mutations(campaign, valid[0]):
            key = canonical_json(candidate)
            if key in taken:
                continue
            try:
                mechanism.check_payload(candidate)
            except WireError as error:
                taken.add(key)
                invalid.append({"mutation": mutation, "payload": candidate,
                                "reason": str(error)})
        out.append({"campaign": campaign.name, "mechanism": mechanism.name,
                    "digest": campaign.digest,
                    "payload_bounds": list(b) if (b := mechanism.payload_bounds()) else None,
                    "valid": [{"payload": p, "canonical": canonical_json(
                        mechanism.check_payload(p)).decode()} for p in valid],
                    "invalid": invalid})
    return {
        "description": "Per campaign of campaigns.json: valid payloads (drawn through the real "
                       "randomizer with a seeded generator; check_payload accepts each and "
                       "returns its canonical form) and invalid ones (check_payload refuses "
                       "each with the reason given; the collector answers invalid-report).",
        "payloads": out,
    }


# --- reports ----------------------------------------------------------------------------

def _refusal(obj: Any, campaign: Campaign) -> dict[str, str]:
    try:
        parse_report(obj, campaign)
    except DigestMismatch as error:
        return {"error": "digest-mismatch", "reason": str(error)}
    except WireError as error:
        return {"error": "invalid-report", "reason": str(error)}
    raise AssertionError(f"{obj!r} was accepted")


def report_vectors() -> dict[str, Any]:
    rng = random.Random(SEED + 1)
    names = ["krr-0", "rappor-0", "unicode-labels", "hm-0", "pm_md-1", "third-epsilon"]
    specs = {spec["name"]: spec for spec in campaign_specs()}
    other = _campaign(specs["krr-1"])
    valid, invalid = [], []
    for name in names:
        campaign = _campaign(specs[name])
        mechanism = campaign.mechanism
        payload = mechanism.randomize(mechanism.encode(campaign.domain.random_value(rng)), rng)
        report = Report(report_id=format(rng.getrandbits(128), "032x"), digest=campaign.digest,
                        time=REPORT_TIME, payload=payload)
        valid.append({"campaign": name, "report": report.to_json(),
                      "wire": report.to_wire(),
                      "canonical": report.canonical_bytes().decode()})
        good = report.to_json()
        cases: list[tuple[str, Any]] = [
            ("not an object", [good]),
            ("without payload", {k: v for k, v in good.items() if k != "payload"}),
            ("an extra field", {**good, "cohort": 0}),
            ("report_id uppercase", {**good, "report_id": good["report_id"].upper()
                                     .replace("0", "A")}),
            ("report_id of 31 digits", {**good, "report_id": good["report_id"][1:]}),
            ("report_id with a trailing newline", {**good, "report_id": good["report_id"] + "\n"}),
            ("report_id a UUID with dashes", {**good, "report_id": "-".join(
                [good["report_id"][:8], good["report_id"][8:12], good["report_id"][12:16],
                 good["report_id"][16:20], good["report_id"][20:]])}),
            ("digest uppercase", {**good, "digest": good["digest"].upper()}),
            ("digest of another campaign", {**good, "digest": other.digest}),
            ("time not truncated", {**good, "time": REPORT_TIME + 1}),
            ("time negative", {**good, "time": -campaign.time_precision}),
            ("time 2**40", {**good, "time": MAX_TIME}),
            ("time a float", {**good, "time": float(REPORT_TIME)}),
            ("time a string", {**good, "time": str(REPORT_TIME)}),
            ("time true", {**good, "time": True}),
            ("payload null", {**good, "payload": None}),
        ]
        if name == "krr-0":
            invalid += [{"campaign": name, "case": case, "report": obj, **_refusal(obj, campaign)}
                        for case, obj in cases]
    buckets = [{"now": now, "time_precision": precision,
                "time": int(now // precision) * precision}
               for now, precision in [(1767229199.9, 3600), (1767225600, 3600),
                                      (1767225599.999, 3600), (1767312000.5, 86400),
                                      (1767225601, 1), (59.99, 60), (0, 3600)]]
    return {
        "description": "valid: reports that parse_report accepts for the named campaign; wire: "
                       "the bytes the Python client sends (and resends unchanged); canonical: "
                       "the canonical JSON of the report. invalid: reports for krr-0 the "
                       "collector refuses, with the problem kind and the reason. time_buckets: "
                       "time = floor(now / precision) * precision.",
        "valid": valid,
        "invalid": invalid,
        "time_buckets": buckets,
        "report_id_pattern": "^[0-9a-f]{32}$",
        "digest_pattern": "^[0-9a-f]{64}$",
        "max_time": MAX_TIME,
    }


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "canonical-json.json": canonical_vectors,
    "campaigns.json": campaign_vectors,
    "hashing.json": hashing_vectors,
    "payloads.json": payload_vectors,
    "reports.json": report_vectors,
}


def build() -> dict[str, str]:
    """Every vector file's text, by file name."""
    return {name: _dump(make()) for name, make in FILES.items()}


def main() -> None:
    for name, text in build().items():
        (HERE / name).write_text(text, encoding="utf-8")
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        print(f"wrote docs/vectors/{name} ({len(text.encode())} bytes, sha256 {digest}…)")


if __name__ == "__main__":
    main()
