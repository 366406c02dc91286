"""A client generated from the live collector's /openapi.json by a standard generator
(openapi-python-client, the command docs/http-api.md gives) generates without a warning and
works: campaigns, reports, estimates, series and comparisons as typed models, whose numbers
are the ones ``chorus_client.CollectorAPI`` reads from the same collector, and a refusal as a
typed problem document."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import random
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from chorus_client import CollectorAPI
from chorus_collector import create_app
from helpers.live import RECORD_SPEC, LiveCollector, record_draw, serving
from helpers.support import ADMIN, ANALYST, NOW, FakeClock, campaign_spec, make_report

pytestmark = pytest.mark.slow

HOUR = 3600
#: The generated package's import name (the output folder's name).
PACKAGE = "chorus_api"
#: What the generator prints when it leaves something out of the client ("Warning(s)
#: encountered", "Unable to process schema", "Cannot parse response") or skips a step
#: ("Skipping Integration": the formatter not found).
TROUBLE = re.compile(r"warning|unable|cannot|skipping", re.IGNORECASE)


@dataclass
class Generated:
    live: LiveCollector
    api: ModuleType  # the generated package, imported
    output: str  # what the generator printed


@pytest.fixture(scope="module")
def generated(request: pytest.FixtureRequest, backend: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Generated]:
    """A collector on 127.0.0.1 (the suite's tokens; background folding off, so answers
    change only when the test folds) and the client generated from its /openapi.json,
    imported: once for the module, as generating takes a few seconds."""
    folder = tmp_path_factory.mktemp("generated-client")
    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("CHORUS_")]:
            patch.delenv(key)
        if backend == "postgresql":
            database = str(request.getfixturevalue("postgres").new_schema())
        else:
            database = str(folder / "chorus.db")
        clock = FakeClock()
        app = create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST,
                          "FOLD_INTERVAL": 3600}, clock=clock)
        with serving(app, clock) as live:
            document = folder / "openapi.json"
            document.write_text(json.dumps(live.get_json("/openapi.json")))
            output = _generate(document, folder / PACKAGE)
            patch.syspath_prepend(str(folder))
            api = importlib.import_module(PACKAGE)
            # Every module of it, so that each test finds each operation as an attribute of
            # its tag's package whichever test ran first in this process (xdist splits them).
            for module in pkgutil.walk_packages(api.__path__, PACKAGE + "."):
                importlib.import_module(module.name)
            try:
                yield Generated(live, api, output)
            finally:
                for name in [name for name in sys.modules
                             if name == PACKAGE or name.startswith(PACKAGE + ".")]:
                    del sys.modules[name]


def _generate(document: Path, package: Path) -> str:
    """docs/http-api.md's command, with this environment's scripts first on PATH (the
    generator formats its output with ruff, a dev dependency, when it finds it there)."""
    scripts = sysconfig.get_path("scripts")
    run = subprocess.run(
        [str(Path(scripts) / "openapi-python-client"), "generate", "--path", str(document),
         "--meta", "none", "--output-path", str(package)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PATH": scripts + os.pathsep + os.environ.get("PATH", "")})
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    return output


def _module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_the_generator_leaves_nothing_out(generated: Generated) -> None:
    assert TROUBLE.search(generated.output) is None, generated.output
    document = generated.live.get_json("/openapi.json")
    # Each operation is a module named after its operationId, in its tag's package, and each
    # component schema a model class of its name.
    for path_item in document["paths"].values():
        for operation in path_item.values():
            tag = operation["tags"][0]
            snake = re.sub(r"(?<!^)(?=[A-Z])", "_", operation["operationId"]).lower()
            assert callable(_module(f"api.{tag}.{snake}").sync_detailed)
    models = _module("models")
    assert all(hasattr(models, name) for name in document["components"]["schemas"])
    # What the generated package needs beyond the standard library: httpx and attrs.
    imported = set()
    for source in Path(generated.api.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert imported - sys.stdlib_module_names == {"httpx", "attrs"}


def test_the_generated_client_reads_what_collector_api_reads(generated: Generated) -> None:
    live, api = generated.live, generated.api
    models = _module("models")
    campaigns = _module("api.campaigns")
    reports = _module("api.reports")
    analysis = _module("api.analysis")
    admin = api.AuthenticatedClient(base_url=live.url, token=live.admin_token)
    analyst = api.AuthenticatedClient(base_url=live.url, token=live.analyst_token)
    anyone = api.Client(base_url=live.url)
    reference = CollectorAPI(live.url, live.analyst_token)

    # Campaigns: created (201) and typed; listed and read as CollectorAPI reads them.
    specs = [campaign_spec("gen-krr", time_precision=HOUR),
             campaign_spec("gen-mean", mechanism="duchi", time_precision=HOUR),
             {**RECORD_SPEC, "name": "gen-record", "time_precision": HOUR, "min_batch_size": 1,
              "privacy": {"budget": 1e6, "max_reports": 1_000_000}}]
    configs = {}
    for spec in specs:
        created = campaigns.create_campaign.sync_detailed(
            client=admin, body=models.CampaignSpec.from_dict(spec))
        assert created.status_code == 201
        assert isinstance(created.parsed, models.CampaignConfig)
        assert created.parsed.name == spec["name"] and len(created.parsed.digest) == 64
        configs[spec["name"]] = created.parsed.to_dict()
    listed = campaigns.list_campaigns.sync(client=admin)
    assert isinstance(listed, models.CampaignList)
    assert [config.to_dict() for config in listed.campaigns] == \
        CollectorAPI(live.url, live.admin_token).list_campaigns()
    for name, config in configs.items():
        got = campaigns.get_campaign.sync(name, client=anyone)
        assert isinstance(got, models.CampaignConfig)
        assert got.to_dict() == config == reference.get_campaign(name)

    # Reports made as the client makes them, an hour apart (baseline, then current), sent
    # through both report operations; every one accepted.
    rng = random.Random(35)
    draws = {"gen-krr": lambda: rng.choices("abcd", [4, 3, 2, 1])[0],
             "gen-mean": lambda: rng.uniform(0, 100),
             "gen-record": lambda: record_draw(1, _numpy(rng))[0]}
    for name, draw in draws.items():
        batch = [models.Report.from_dict(make_report(configs[name], draw(), rng, now=now))
                 for now in (NOW - HOUR, NOW) for _ in range(300)]
        if name == "gen-krr":
            answer = reports.submit_campaign_reports.sync(
                name, client=anyone, body=models.ReportBatch(reports=batch))
        else:
            answer = reports.submit_reports.sync(client=anyone,
                                                 body=models.ReportBatch(reports=batch))
        assert isinstance(answer, models.BatchAnswer)
        assert (answer.accepted, answer.duplicate, answer.rejected) == (600, 0, 0)
        assert {status.status.value for status in answer.results} == {"accepted"}
    live.fold()

    # Estimates, GET and POST, as typed models with the numbers CollectorAPI reads.
    estimate = analysis.get_estimates.sync("gen-krr", client=analyst)
    assert isinstance(estimate, models.Estimate)
    expected = reference.estimates("gen-krr")
    assert estimate.n == expected["n"] == 600
    assert [(row.value, row.frequency, row.frequency_std_error, row.frequency_ci_low,
             row.frequency_ci_high) for row in estimate.rows] == \
        [(row["value"], row["frequency"], row["frequency_std_error"], row["frequency_ci_low"],
          row["frequency_ci_high"]) for row in expected["rows"]]
    assert all(isinstance(row, models.FrequencyRow) for row in estimate.rows)
    assert estimate.to_dict() == expected  # nothing of the answer lost on the way
    queried = analysis.query_estimates.sync(
        "gen-krr", client=analyst, body=models.EstimateQuery(start=int(NOW)))
    assert isinstance(queried, models.Estimate)
    assert queried.to_dict() == reference.estimates("gen-krr", start=int(NOW))
    assert queried.n == 300

    mean = analysis.get_estimates.sync("gen-mean", client=analyst)
    assert isinstance(mean, models.Estimate) and mean.kind.value == "mean"
    expected = reference.estimates("gen-mean")
    assert (mean.mean, mean.std_error, mean.ci_low, mean.ci_high) == \
        (expected["mean"], expected["std_error"], expected["ci_low"], expected["ci_high"])
    assert isinstance(mean.mean, float)
    assert mean.to_dict() == expected

    record = analysis.get_estimates.sync("gen-record", client=analyst)
    assert isinstance(record, models.RecordEstimate)
    expected = reference.estimates("gen-record")
    assert [(m.attribute, [(r.value, r.frequency, r.std_error) for r in m.rows])
            for m in record.marginals] == \
        [(m["attribute"], [(r["value"], r["frequency"], r["std_error"]) for r in m["rows"]])
         for m in expected["marginals"]]
    assert record.to_dict() == expected

    # Series and comparisons, GET and POST.
    for name in draws:
        series = analysis.get_series.sync(name, client=analyst)
        assert isinstance(series, models.Series)
        expected = reference.series(name)
        assert [(line.value, [(p.start, p.n, p.estimate, p.std_error, p.ci_low, p.ci_high)
                              for p in line.points]) for line in series.series] == \
            [(line["value"], [(p["start"], p["n"], p["estimate"], p["std_error"],
                               p["ci_low"], p["ci_high"]) for p in line["points"]])
             for line in expected["series"]]
        assert [len(line.points) for line in series.series] == [2] * len(series.series)
        assert series.to_dict() == expected
        posted = analysis.query_series.sync(name, client=analyst,
                                            body=models.SeriesQuery(start=int(NOW) - HOUR))
        assert isinstance(posted, models.Series) and posted.to_dict() == expected

        windows = {"baseline_start": int(NOW) - HOUR, "baseline_end": int(NOW),
                   "start": int(NOW), "end": int(NOW) + HOUR}
        comparison = analysis.get_comparison.sync(name, client=analyst, **windows)
        assert isinstance(comparison, models.Comparison)
        expected = reference.compare(name, **windows)
        assert (comparison.baseline.n, comparison.current.n) == (300, 300)
        assert [(row.value, row.difference, row.std_error, row.p_value, row.adjusted_p_value,
                 row.significant) for row in comparison.rows] == \
            [(row["value"], row["difference"], row["std_error"], row["p_value"],
              row["adjusted_p_value"], row["significant"]) for row in expected["rows"]]
        assert comparison.to_dict() == expected
        posted = analysis.query_comparison.sync(
            name, client=analyst, body=models.CompareQuery.from_dict(windows))
        assert isinstance(posted, models.Comparison) and posted.to_dict() == expected

    # Retired: the typed config says when; the campaign refuses reports from then on.
    retired = campaigns.retire_campaign.sync("gen-mean", client=admin)
    assert isinstance(retired, models.CampaignConfig)
    assert retired.retired_at == live.clock()
    late = models.Report.from_dict(make_report(configs["gen-mean"], 1.0, rng))
    refused = reports.submit_campaign_reports.sync_detailed("gen-mean", client=anyone,
                                                            body=late)
    assert refused.status_code == 410 and isinstance(refused.parsed, models.Problem)


def test_a_refusal_is_a_typed_problem(generated: Generated) -> None:
    live, api = generated.live, generated.api
    models = _module("models")
    campaigns = _module("api.campaigns")

    wrong = api.AuthenticatedClient(base_url=live.url, token="not-a-token")
    answer = campaigns.list_campaigns.sync_detailed(client=wrong)
    assert answer.status_code == 401
    assert isinstance(answer.parsed, models.Problem)
    assert answer.parsed.status == 401
    assert answer.parsed.type_ == "https://chorus.dev/problems/unauthorized"

    analyst = api.AuthenticatedClient(base_url=live.url, token=live.analyst_token)
    answer = campaigns.create_campaign.sync_detailed(
        client=analyst, body=models.CampaignSpec.from_dict(campaign_spec("gen-refused")))
    assert answer.status_code == 403
    assert isinstance(answer.parsed, models.Problem)
    assert answer.parsed.type_ == "https://chorus.dev/problems/forbidden"


def _numpy(rng: random.Random) -> Any:
    """A numpy generator seeded from ``rng`` (record_draw draws with numpy)."""
    import numpy as np

    return np.random.default_rng(rng.getrandbits(64))
