"""The protocol test vectors of docs/vectors/ (docs/protocol.md) hold for the code, and are
exactly what docs/vectors/generate.py writes: a change to the digest, the hashing or a payload
rule fails here, and so must be a deliberate change of the protocol and its vectors."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import struct
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import mmh3
import pytest

from chorus_shared.campaign import (
    DERIVED_FIELDS,
    Campaign,
    campaign_from_config,
    campaign_from_spec,
    canonical_json,
)
from chorus_shared.errors import DigestMismatch, WireError
from chorus_shared.hashing import bloom_bits, google_bloom_bits
from chorus_shared.mechanisms.hadamard import in_block
from chorus_shared.mechanisms.local_hashing import local_hash
from chorus_shared.mechanisms.succinct import hadamard_sign
from chorus_shared.wire import Report, parse_report
from helpers.examples import EXAMPLES

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "vectors"


@cache
def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


@cache
def campaigns() -> dict[str, Campaign]:
    return {entry["name"]: campaign_from_spec(entry["spec"], warn=False)
            for entry in load("campaigns.json")["campaigns"]}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chorus_protocol_vectors",
                                                  VECTORS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_vectors_are_what_the_generator_writes() -> None:
    built = _generator().build()
    committed = {path.name for path in VECTORS.glob("*.json")}
    assert committed == set(built)
    for name, text in built.items():
        assert (VECTORS / name).read_text(encoding="utf-8") == text, (
            f"docs/vectors/{name} is stale: run python docs/vectors/generate.py and review "
            "the change (a changed digest or hash breaks every client in other languages)")


def test_every_example_campaign_has_a_vector() -> None:
    names = {entry["name"] for entry in load("campaigns.json")["campaigns"]}
    for mechanism, specs in EXAMPLES.items():
        for i in range(len(specs)):
            assert f"{mechanism}-{i}" in names


# --- canonical JSON ---------------------------------------------------------------------

def test_floats_are_written_as_python_writes_them() -> None:
    for vector in load("canonical-json.json")["floats"]:
        (number,) = struct.unpack(">d", bytes.fromhex(vector["bits"]))
        assert canonical_json(number).decode() == vector["canonical"]
        assert struct.pack(">d", float(vector["canonical"])).hex() == vector["bits"]
    texts = {v["canonical"] for v in load("canonical-json.json")["floats"]}
    assert {"1.0", "0.1", "1e-05", "1e+16", "0.3333333333333333", "-0.0", "5e-324"} <= texts


@pytest.mark.parametrize("group", ["integers", "strings", "values"])
def test_canonical_json_vectors(group: str) -> None:
    for vector in load("canonical-json.json")[group]:
        assert canonical_json(vector["value"]).decode() == vector["canonical"]
        if "utf8_hex" in vector:
            assert canonical_json(vector["value"]).hex() == vector["utf8_hex"]


def test_nan_and_infinity_are_refused() -> None:
    for vector in load("canonical-json.json")["refused"]:
        with pytest.raises(ValueError, match="JSON compliant"):
            canonical_json(float(vector["value"]))


# --- campaigns --------------------------------------------------------------------------

def test_each_digest_is_recomputed_from_its_spec_and_from_its_config() -> None:
    for entry in load("campaigns.json")["campaigns"]:
        campaign = campaigns()[entry["name"]]
        assert campaign.config == entry["config"]
        assert canonical_json(campaign.config).decode() == entry["canonical"]
        assert canonical_json(entry["config"]).decode() == entry["canonical"]
        assert len(entry["canonical"].encode("utf-8")) == entry["canonical_bytes"]
        assert hashlib.sha256(entry["canonical"].encode("utf-8")).hexdigest() == entry["digest"]
        assert campaign.digest == entry["digest"]
        assert json.loads(json.dumps(campaign.public_config())) == entry["public_config"]
        served = campaign_from_config(entry["public_config"])
        assert served.digest == entry["digest"]
        stripped = {k: v for k, v in entry["public_config"].items()
                    if k not in ("digest", *DERIVED_FIELDS)}
        assert stripped == entry["config"]


def test_the_float_fields_stay_floats_in_the_config() -> None:
    """Ports format these fields as floats (1.0, not 1): the vectors must show it."""
    texts = "".join(entry["canonical"] for entry in load("campaigns.json")["campaigns"])
    for fragment in ('"epsilon":1.0', '"lo":-1.0', '"hi":1e+16', '"lo":1e-05', '"hi":1e+22',
                     '"epsilon":0.3333333333333333', '"budget":2.5', '"f":0.0', '"p":0.2',
                     '"max_report_bits":null', "😀", "日本語"):
        assert fragment in texts, fragment


def test_a_changed_config_changes_the_digest() -> None:
    entry = load("campaigns.json")["campaigns"][0]
    config = {**entry["config"], "epsilon": entry["config"]["epsilon"] + 1e-15}
    assert hashlib.sha256(canonical_json(config)).hexdigest() != entry["digest"]


# --- hashing ----------------------------------------------------------------------------

def test_hashing_vectors() -> None:
    vectors = load("hashing.json")
    for v in vectors["murmur3_x86_32"]:
        assert mmh3.hash(bytes.fromhex(v["utf8_hex"]), v["seed"], signed=False) == v["hash"]
    for v in vectors["bloom_bits"]:
        assert list(bloom_bits(v["value"], v["cohort"], v["k"], v["h"])) == v["bits"]
    for v in vectors["google_bloom_bits"]:
        digest = hashlib.md5(bytes.fromhex(v["md5_input_hex"])).digest()
        assert [digest[i] % v["k"] for i in range(v["h"])] == v["bits"]
        assert list(google_bloom_bits(v["value"], v["cohort"], v["k"], v["h"])) == v["bits"]
    for v in vectors["local_hash"]:
        assert local_hash(v["a"], v["b"], v["v"], v["prime"], v["g"]) == v["hash"]
        assert v["a"] * v["v"] + v["b"] < 2**53  # exact in a binary64 double
    for v in vectors["hadamard_sign"]:
        assert hadamard_sign(v["row"], v["column"]) == v["sign"]
    for v in vectors["hr_in_block"]:
        assert in_block(v["x"], v["y"]) == v["in_block"]


def test_hashing_vectors_cover_the_traps() -> None:
    vectors = load("hashing.json")
    values = {v["value"] for v in vectors["bloom_bits"]}
    assert {"", "é", "e\u0301", "😀"} <= values
    assert max(v["seed"] for v in vectors["murmur3_x86_32"]) >= 2**26 - 1
    assert any(v["hash"] >= 2**31 for v in vectors["murmur3_x86_32"])  # unsigned


# --- payloads ---------------------------------------------------------------------------

def test_payload_vectors() -> None:
    entries = load("payloads.json")["payloads"]
    assert {e["campaign"] for e in entries} == set(campaigns())
    for entry in entries:
        campaign = campaigns()[entry["campaign"]]
        mechanism = campaign.mechanism
        assert campaign.digest == entry["digest"]
        bounds = mechanism.payload_bounds()
        assert entry["payload_bounds"] == (list(bounds) if bounds else None)
        assert entry["valid"] and entry["invalid"]
        for vector in entry["valid"]:
            checked = mechanism.check_payload(vector["payload"])
            assert canonical_json(checked).decode() == vector["canonical"]
            assert checked == json.loads(vector["canonical"])
        for vector in entry["invalid"]:
            with pytest.raises(WireError) as refused:
                mechanism.check_payload(vector["payload"])
            assert str(refused.value) == vector["reason"], (entry["campaign"], vector)


# --- reports ----------------------------------------------------------------------------

def test_report_vectors() -> None:
    vectors = load("reports.json")
    for vector in vectors["valid"]:
        campaign = campaigns()[vector["campaign"]]
        report = parse_report(json.loads(vector["wire"]), campaign)
        assert report == parse_report(vector["report"], campaign)
        assert report.to_wire() == vector["wire"]
        assert report.canonical_bytes().decode() == vector["canonical"]
        assert Report(**vector["report"]).to_json() == vector["report"]
    assert vectors["invalid"]
    for vector in vectors["invalid"]:
        campaign = campaigns()[vector["campaign"]]
        expected = DigestMismatch if vector["error"] == "digest-mismatch" else WireError
        with pytest.raises(expected) as refused:
            parse_report(vector["report"], campaign)
        assert str(refused.value) == vector["reason"]
        if vector["error"] == "invalid-report":
            assert not isinstance(refused.value, DigestMismatch)


def test_time_bucket_vectors() -> None:
    for vector in load("reports.json")["time_buckets"]:
        assert vector["time"] == math.floor(vector["now"] / vector["time_precision"]) \
            * vector["time_precision"]
        campaign = campaign_from_spec({"name": "t", "mechanism": "rr", "epsilon": 1.0,
                                       "domain": ["no", "yes"],
                                       "time_precision": vector["time_precision"],
                                       "report_expiry": 86400})
        assert campaign.time_bucket(vector["now"]) == vector["time"]
