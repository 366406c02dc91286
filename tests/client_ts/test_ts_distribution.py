"""The TypeScript client's randomizers sample exactly the Python mechanisms' distributions.

Node draws seeded samples through ``client-ts`` (built here from its sources into a temporary
folder, so the test never reads a stale build), and each (campaign, value) is checked with
Pearson's χ² against the Python mechanism's exact ``output_probability`` (α = 2·10⁻⁶, cells of
expected count below 5 merged, as tests/mechanisms/test_privacy.py does for the Python side).

Power: with 20,000 draws per value a k-RR whose p is off by 0.02, or a unary bit whose rate
is off by 0.015, gives a χ² far beyond the bound; ``test_the_check_catches_a_wrong_epsilon``
shows the check rejects these very samples against the distribution of a nearby ε.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chorus_shared import Campaign, campaign_from_config
from helpers.statcheck import assert_goodness_of_fit
from helpers.statcheck import payload_key as _key

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "client-ts"
CAMPAIGNS = ROOT / "docs" / "vectors" / "campaigns.json"
#: The mechanisms client-ts implements (its SUPPORTED_MECHANISMS).
MECHANISMS = ("rr", "krr", "sue", "oue", "olh", "blh", "duchi", "one_bit_mean")
#: Left out: OLH over the prime 2³¹ − 1 has too many outputs to enumerate, and at ε = 12 the
#: lie of "weak-privacy" has an expected count of 0.12 in 20,000 draws, which no χ² can see.
LEFT_OUT = ("olh-default-prime", "weak-privacy")
DRAWS = 20_000


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: the client-ts tests need Node.js 20+ and npm "
                    "(Debian: apt-get install nodejs npm)")
    return path


@pytest.fixture(scope="module")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """client-ts compiled from its sources: the sampling script's path."""
    node = _tool("node")
    if not (PACKAGE / "node_modules" / "typescript").is_dir():
        subprocess.run([_tool("npm"), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=PACKAGE, check=True)
    out = tmp_path_factory.mktemp("client-ts-build")
    subprocess.run([node, str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"),
                    "-p", str(PACKAGE / "tsconfig.json"), "--outDir", str(out)],
                   cwd=PACKAGE, check=True)
    return out / "tools" / "sample.js"


def _configs() -> dict[str, dict[str, Any]]:
    entries = json.loads(CAMPAIGNS.read_text())["campaigns"]
    return {c["name"]: c["config"] for c in entries if c["config"]["mechanism"] in MECHANISMS}


def _values(config: dict[str, Any]) -> list[Any]:
    """Two app values per campaign: the first and last category, or a low and a mid number."""
    domain = config["domain"]
    if domain["kind"] == "numeric":
        lo, hi = domain["lo"], domain["hi"]
        return [lo - 1.0, lo + 0.3 * (hi - lo)]  # the first is clipped to lo on the device
    return [domain["values"][0], domain["values"][-1]]


def _sample(sampler: Path, tmp_path: Path, jobs: list[dict[str, Any]]) -> list[list[Any]]:
    jobs_file, out_file = tmp_path / "jobs.json", tmp_path / "samples.jsonl"
    jobs_file.write_text(json.dumps(jobs))
    subprocess.run([_tool("node"), str(sampler), str(CAMPAIGNS), str(jobs_file), str(out_file)],
                   check=True, timeout=120)
    lines = out_file.read_text().splitlines()
    assert len(lines) == len(jobs)
    return [[json.loads(p) for p in json.loads(line)["payloads"]] for line in lines]


def _expected(campaign: Campaign, value: Any, draws: int) -> dict[Any, float]:
    mechanism = campaign.mechanism
    x = mechanism.encode(value)
    return {_key(y): mechanism.output_probability(y, x) * draws for y in mechanism.outputs()}


def _grouped(observed: Counter[Any], expected: dict[Any, float]
             ) -> tuple[dict[int, int], dict[int, float]]:
    """Outputs pooled, rarest first, into cells of expected count ≥ 5 (the χ² approximation
    needs it; a leftover joins the last cell), so that the merged cell is never tiny."""
    assert set(observed) <= set(expected), f"impossible outputs: {set(observed) - set(expected)}"
    cells: list[list[Any]] = []
    pending: list[Any] = []
    for key in sorted(expected, key=lambda k: expected[k]):
        pending.append(key)
        if sum(expected[k] for k in pending) >= 5:
            cells.append(pending)
            pending = []
    if pending:
        cells[-1].extend(pending)
    assert len(cells) >= 2, "a single cell: nothing to test"
    return ({i: sum(observed.get(k, 0) for k in cell) for i, cell in enumerate(cells)},
            {i: sum(expected[k] for k in cell) for i, cell in enumerate(cells)})


def test_every_supported_mechanism_has_campaigns() -> None:
    assert {c["mechanism"] for c in _configs().values()} == set(MECHANISMS)


def test_typescript_samples_the_python_mechanisms_distribution(sampler: Path,
                                                                tmp_path: Path) -> None:
    configs = {n: c for n, c in _configs().items() if n not in LEFT_OUT}
    jobs = [{"campaign": name, "value": value, "draws": DRAWS, "seed": 1000 + i}
            for i, (name, value) in enumerate((n, v) for n, c in configs.items()
                                              for v in _values(c))]
    for job, payloads in zip(jobs, _sample(sampler, tmp_path, jobs), strict=True):
        campaign = campaign_from_config(configs[job["campaign"]])
        expected = _expected(campaign, job["value"], DRAWS)
        assert math.isclose(sum(expected.values()), DRAWS, rel_tol=1e-9)
        observed = Counter(_key(campaign.mechanism.check_payload(p)) for p in payloads)
        assert_goodness_of_fit(*_grouped(observed, expected),
                               f"{job['campaign']} value={job['value']!r}")


def test_the_check_catches_a_wrong_epsilon(sampler: Path, tmp_path: Path) -> None:
    """The same samples against a nearby ε's distribution (×1.25) fail: the test has power."""
    for name, value in [("krr-0", "a"), ("oue-0", "d"), ("olh-0", "b"), ("duchi-0", 5.0)]:
        config = _configs()[name]
        payloads = _sample(sampler, tmp_path, [{"campaign": name, "value": value,
                                                "draws": DRAWS, "seed": 7}])[0]
        wrong = campaign_from_config({**config, "epsilon": config["epsilon"] * 1.25,
                                      "privacy": {**config["privacy"],
                                                  "budget": config["epsilon"] * 1.25}})
        observed = Counter(_key(p) for p in payloads)
        with pytest.raises(AssertionError, match="χ²"):
            assert_goodness_of_fit(*_grouped(observed, _expected(wrong, value, DRAWS)), name)
