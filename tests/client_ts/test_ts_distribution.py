"""The TypeScript client's randomizers sample exactly the Python mechanisms' distributions.

Node draws seeded samples through ``client-ts`` (built here from its sources into a temporary
folder, so the test never reads a stale build) for every campaign of ``campaigns.json``, all 34
mechanisms, and each (campaign, value) is checked with Pearson's χ² (α = 2·10⁻⁶, cells of
expected count below 5 merged, rarest first, as tests/mechanisms/test_privacy.py does for the
Python side) against the exact distribution the Python mechanism gives:

* every mechanism with an enumerable output space against its exact ``output_probability``.
  That includes the "continuous" ones: no float leaves a device, so ``pm``, ``hm``, ``pm_md``,
  ``hm_md`` (grid indices after randomized rounding), ``sw`` (output buckets), ``duchi_md``
  (sign masks) and ``laplace`` (the clamped integer y) all have finite output spaces whose
  exact probabilities the Python mechanism computes. For ``laplace`` this is the discrete
  Laplace's pmf, convolved with the randomized rounding, over the whole range: the central
  values cell by cell and each tail pooled until its expected count reaches 5, so the exact
  integer sampler is tested against e^(−|z|/τ) itself, clamping included;
* Bloom-filter RAPPOR with too many outputs to list (k = 16, and k = 12 with three cohorts)
  on an exact projection: (cohort, the number of 1s among the value's Bloom bits in that
  cohort, the number of 1s elsewhere), a product of two binomials at r1 and r0 times 1/m,
  with the Bloom bits (murmur3, or MD5 for ``google-md5``) from the Python mechanism.

Power: with 20,000 draws per value a k-RR whose p is off by 0.02, or a bit rate off by 0.015,
gives a χ² far beyond the bound; ``test_the_check_catches_a_wrong_epsilon`` shows the check
rejects these very samples against the distribution of ε × 1.25 for one campaign of each
family, and ``test_the_projection_catches_the_wrong_bloom_hash`` that the RAPPOR projection
rejects google-md5 samples checked against murmur3 Bloom bits.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chorus_shared import Campaign, campaign_from_config
from chorus_shared.mechanisms import REGISTRY, Rappor
from helpers.client_ts import build_client_ts, tool
from helpers.statcheck import assert_goodness_of_fit
from helpers.statcheck import payload_key as _key

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGNS = ROOT / "docs" / "vectors" / "campaigns.json"
#: Left out: OLH over the prime 2³¹ − 1 has too many outputs to enumerate, and at ε = 12 the
#: lie of "weak-privacy" has an expected count of 0.12 in 20,000 draws, which no χ² can see.
LEFT_OUT = ("olh-default-prime", "weak-privacy")
DRAWS = 20_000
#: Beyond this many outputs a RAPPOR campaign is checked on its projection (cells would merge
#: into a test with little power).
MAX_ENUMERATED = 4096

Expected = dict[Any, float]
Keyed = Callable[[Any], Any]


@pytest.fixture(scope="module")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """client-ts compiled from its sources: the sampling script's path."""
    return build_client_ts(tmp_path_factory.mktemp("client-ts-build")) / "tools" / "sample.js"


def _configs() -> dict[str, dict[str, Any]]:
    entries = json.loads(CAMPAIGNS.read_text())["campaigns"]
    return {c["name"]: c["config"] for c in entries}


def _strings(domain: dict[str, Any]) -> list[str]:
    alphabet = domain.get("alphabet")
    if alphabet is not None:
        widest = max(len(c.encode()) for c in alphabet)
        return [alphabet[0], alphabet[-1] * min(2, domain["max_bytes"] // widest)]
    return ["alpha", "ünï 😀"] if domain["max_bytes"] >= 16 else ["a", "z"]


def _values(config: dict[str, Any]) -> list[Any]:
    """Two app values per campaign: the first and last category (or record), a low and a mid
    number (the low one clipped on the device), two strings, two vectors (as a mapping and as
    a list)."""
    domain = config["domain"]
    kind = domain["kind"]
    if kind == "numeric":
        lo, hi = domain["lo"], domain["hi"]
        return [lo - 1.0, lo + 0.3 * (hi - lo)]
    if kind == "strings":
        return _strings(domain)
    if kind == "vector":
        attributes = domain["attributes"]
        return [{a["name"]: a["lo"] - 1.0 for a in attributes},
                [a["lo"] + ((0.3 + 0.25 * j) % 1) * (a["hi"] - a["lo"])
                 for j, a in enumerate(attributes)]]
    if kind == "record":
        attributes = domain["attributes"]
        return [{a["name"]: a["values"][0] for a in attributes},
                [a["values"][-1] for a in attributes]]
    return [domain["values"][0], domain["values"][-1]]


def _sample(sampler: Path, tmp_path: Path, jobs: list[dict[str, Any]]) -> list[Counter[str]]:
    """Per job, how often each canonical payload text was drawn."""
    jobs_file, out_file = tmp_path / "jobs.json", tmp_path / "samples.jsonl"
    jobs_file.write_text(json.dumps(jobs))
    subprocess.run([tool("node"), str(sampler), str(CAMPAIGNS), str(jobs_file), str(out_file)],
                   check=True, timeout=300)
    lines = out_file.read_text().splitlines()
    assert len(lines) == len(jobs)
    return [Counter(json.loads(line)["counts"]) for line in lines]


def _rappor_projection(mechanism: Rappor, x: str) -> tuple[Keyed, Expected]:
    """(cohort, 1s among the Bloom bits, 1s elsewhere): exact, two binomials per cohort."""
    def project(payload: dict[str, Any]) -> tuple[int, int, int]:
        bloom = mechanism.bloom(x, payload["cohort"])
        bits = int(payload["bits"], 16)
        return payload["cohort"], (bits & bloom).bit_count(), (bits & ~bloom).bit_count()

    expected: Expected = {}
    for cohort in range(mechanism.m):
        inside = mechanism.bloom(x, cohort).bit_count()
        outside = mechanism.k - inside
        for a in range(inside + 1):
            p_a = math.comb(inside, a) * mechanism.r1**a * (1 - mechanism.r1) ** (inside - a)
            for b in range(outside + 1):
                p_b = math.comb(outside, b) * mechanism.r0**b * (1 - mechanism.r0) ** (outside - b)
                expected[(cohort, a, b)] = p_a * p_b / mechanism.m
    return project, expected


def _law(campaign: Campaign, value: Any) -> tuple[Keyed, Expected]:
    """How a payload is keyed, and each key's exact probability, for one app value."""
    mechanism = campaign.mechanism
    x = mechanism.encode(value)
    if isinstance(mechanism, Rappor) and mechanism.m * 2**mechanism.k > MAX_ENUMERATED:
        return _rappor_projection(mechanism, x)
    return _key, {_key(y): mechanism.output_probability(y, x) for y in mechanism.outputs()}


def _grouped(observed: Counter[Any], expected: Expected, draws: int
             ) -> tuple[dict[int, int], dict[int, float]]:
    """Outputs pooled, rarest first, into cells of expected count ≥ 5 (the χ² approximation
    needs it; a leftover joins the last cell), so that the merged cell is never tiny."""
    assert set(observed) <= set(expected), f"impossible outputs: {set(observed) - set(expected)}"
    cells: list[list[Any]] = []
    pending: list[Any] = []
    share = 0.0  # of the pending keys: the running sum adds them in the order sum() would
    for key in sorted(expected, key=lambda k: expected[k]):
        pending.append(key)
        share += expected[key]
        if share * draws >= 5:
            cells.append(pending)
            pending, share = [], 0.0
    if pending:
        cells[-1].extend(pending)
    assert len(cells) >= 2, "a single cell: nothing to test"
    return ({i: sum(observed.get(k, 0) for k in cell) for i, cell in enumerate(cells)},
            {i: draws * sum(expected[k] for k in cell) for i, cell in enumerate(cells)})


def _observed(campaign: Campaign, counts: Counter[str], keyed: Keyed) -> Counter[Any]:
    """The drawn payloads, each checked by the Python mechanism (the collector's check)."""
    observed: Counter[Any] = Counter()
    for text, count in counts.items():
        observed[keyed(campaign.mechanism.check_payload(json.loads(text)))] += count
    return observed


def _check(campaign: Campaign, value: Any, counts: Counter[str], label: str) -> None:
    keyed, expected = _law(campaign, value)
    assert math.isclose(sum(expected.values()), 1.0, rel_tol=1e-9), label
    draws = sum(counts.values())
    assert_goodness_of_fit(*_grouped(_observed(campaign, counts, keyed), expected, draws), label)


def test_every_mechanism_of_the_registry_has_campaigns() -> None:
    assert {c["mechanism"] for c in _configs().values()} == set(REGISTRY)


def test_typescript_samples_the_python_mechanisms_distribution(sampler: Path,
                                                                tmp_path: Path) -> None:
    configs = {n: c for n, c in _configs().items() if n not in LEFT_OUT}
    jobs = [{"campaign": name, "value": value, "draws": DRAWS, "seed": 1000 + i}
            for i, (name, value) in enumerate((n, v) for n, c in configs.items()
                                              for v in _values(c))]
    for job, counts in zip(jobs, _sample(sampler, tmp_path, jobs), strict=True):
        campaign = campaign_from_config(configs[job["campaign"]])
        _check(campaign, job["value"], counts, f"{job['campaign']} value={job['value']!r}")


#: One campaign of each family with ε as its own parameter (RAPPOR's follows from p and q).
WRONG_EPSILON = ["krr-0", "oue-0", "olh-0", "duchi-0", "ss-0", "hr-0", "dbitflip-1", "o_rr-1",
                 "cms-0", "hcms-0", "pm-0", "hm-0", "laplace-1", "sw-0", "hh-1", "duchi_md-1",
                 "harmony-0", "pm_md-0", "smp-0", "spl-0", "rsfd-0", "marginals-0", "pem-1",
                 "treehist-1", "shist-0", "hm_md-0"]


def test_the_check_catches_a_wrong_epsilon(sampler: Path, tmp_path: Path) -> None:
    """The same kind of samples against ε × 1.25's distribution fail: the test has power."""
    configs = _configs()
    # The first value: the extreme of a numeric range (clipped there), where a mean
    # mechanism's output depends most on ε; twice the draws, so that no control is marginal.
    jobs = [{"campaign": name, "value": _values(configs[name])[0], "draws": 2 * DRAWS,
             "seed": 7} for name in WRONG_EPSILON]
    for job, counts in zip(jobs, _sample(sampler, tmp_path, jobs), strict=True):
        config = configs[job["campaign"]]
        right = campaign_from_config(config)
        _check(right, job["value"], counts, job["campaign"])  # the control passes…
        wrong = campaign_from_config({**config, "epsilon": config["epsilon"] * 1.25,
                                      "privacy": {**config["privacy"],
                                                  "budget": config["epsilon"] * 1.25}})
        with pytest.raises(AssertionError, match="χ²"):  # …the wrong ε does not
            _check(wrong, job["value"], counts, job["campaign"])


def test_the_projection_catches_the_wrong_bloom_hash(sampler: Path, tmp_path: Path) -> None:
    """google-md5 samples checked against murmur3 Bloom bits fail the RAPPOR projection."""
    config = _configs()["rappor-google"]
    value = _values(config)[0]
    counts = _sample(sampler, tmp_path, [{"campaign": "rappor-google", "value": value,
                                          "draws": DRAWS, "seed": 8}])[0]
    _check(campaign_from_config(config), value, counts, "rappor-google")
    params = {k: v for k, v in config["params"].items() if k != "hash"}
    with pytest.raises(AssertionError, match="χ²"):
        _check(campaign_from_config({**config, "params": params}), value, counts, "murmur3")
