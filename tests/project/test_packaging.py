"""Layout and import hygiene: light client, sans-IO protocol package, pinned public API."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(out.stdout.split())


def test_client_import_pulls_in_neither_numpy_nor_flask() -> None:
    loaded = _modules_after_import("chorus_client")
    assert "chorus_client" in loaded
    heavy = {m for m in loaded if m.split(".")[0] in {"numpy", "flask", "werkzeug",
                                                      "sqlite_utils", "chorus_collector"}}
    assert heavy == set()


def test_shared_is_sans_io() -> None:
    loaded = _modules_after_import("chorus_shared")
    banned = {"numpy", "flask", "requests", "sqlite3", "sqlite_utils", "urllib3", "socket",
              "http"}
    assert {m.split(".")[0] for m in loaded} & banned == set()


@pytest.mark.parametrize("package", ["chorus_client", "chorus_collector", "chorus_shared"])
def test_package_has_py_typed_and_exports(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__file__ is not None
    assert (Path(module.__file__).parent / "py.typed").exists()
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names missing {name}"


def test_public_client_surface_is_pinned() -> None:
    import chorus_client

    assert sorted(chorus_client.__all__) == sorted([
        "APIError", "BudgetExceeded", "CampaignPlan", "CampaignUnavailable", "ChorusError",
        "Client", "ClientError", "CollectorAPI", "FlushResult", "Outcome", "Pin",
        "PrivacyBound", "PrivacyPlan", "RequestsTransport", "Response", "RetryPolicy",
        "RollingWindow", "Transport", "TransportError", "ValueDomainError", "WSGITransport",
        "CampaignWaiting", "Waiting",  # what waits in the outbox: Client.waiting()
        "SentLog", "SentReport",  # what this device sent: Client.sent_log()
    ])


def test_public_shared_and_collector_surfaces_are_pinned() -> None:
    """What apps and operators import: a change here is a change of the public API."""
    import chorus_collector
    import chorus_shared

    assert sorted(chorus_shared.__all__) == sorted([
        "REGISTRY", "Campaign", "CampaignError", "Categories", "ChorusError", "DigestMismatch",
        "Mechanism", "NumericRange", "NumericVector", "OpenStrings", "PrivacyWarning", "Report",
        "ValueDomainError", "WireError", "campaign_from_config", "campaign_from_spec",
        "new_report_id", "parse_report",
    ])
    assert sorted(chorus_collector.__all__) == sorted([
        "SETTINGS", "SchemaError", "SettingsError", "create_app", "create_shuffler_app",
    ])
    for name in chorus_collector.__all__:
        assert getattr(chorus_collector, name) is not None


def test_nothing_imports_top_level_folder_names() -> None:
    offenders = []
    for path in ROOT.glob("*/chorus_*/**/*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import client", "import collector", "import shared",
                                    "from client", "from collector", "from shared")):
                offenders.append(f"{path}: {stripped}")
    assert offenders == []


def test_three_source_roots_in_pyproject() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["name"] == "chorus-ldp"
    assert config["tool"]["setuptools"]["packages"]["find"]["where"] == [
        "client", "collector", "shared"]
    base = {d.split(">")[0].split("=")[0] for d in config["project"]["dependencies"]}
    assert base == {"requests", "mmh3"}
    collector = {d.split(">")[0] for d in config["project"]["optional-dependencies"]["collector"]}
    assert {"flask", "numpy", "sqlite-utils", "gunicorn"} <= collector


def test_chorus_command_explains_a_missing_collector_extra() -> None:
    code = ("import sys; sys.modules['flask'] = None\n"
            "from chorus_collector.entry import main\nmain()")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert "pip install 'chorus-ldp[collector]'" in run.stderr
    assert "Traceback" not in run.stderr


def test_each_estimator_sits_in_the_module_named_like_its_mechanism() -> None:
    """Adding a mechanism is one module in chorus_shared.mechanisms and one same-named module
    in chorus_collector.estimators: the registries hold the same names, paired by module."""
    from chorus_collector.estimators import ESTIMATORS
    from chorus_shared.mechanisms import REGISTRY

    assert set(ESTIMATORS) == set(REGISTRY)
    for name, mechanism in REGISTRY.items():
        estimator = type(ESTIMATORS[name])
        assert mechanism.__module__.startswith("chorus_shared.mechanisms.")
        assert estimator.__module__.startswith("chorus_collector.estimators.")
        assert mechanism.__module__.rsplit(".", 1)[1] == estimator.__module__.rsplit(".", 1)[1], \
            (name, mechanism.__module__, estimator.__module__)
        assert issubclass(mechanism, estimator.mechanism_type), name  # what it checks against


def test_sql_lives_in_the_storage_package_only() -> None:
    """The collector's SQL is in the storage package, one module per engine (and the
    shuffler's own pool in shuffler/pool.py): nothing else."""
    package = ROOT / "collector" / "chorus_collector"
    offenders = [str(path.relative_to(package)) for path in package.rglob("*.py")
                 if path.parent.name != "storage" and path != package / "shuffler" / "pool.py"
                 and any(marker in path.read_text() for marker in (".execute(", "executemany("))]
    assert offenders == []


@pytest.mark.slow
def test_a_users_mypy_sees_the_packages_of_the_editable_install(tmp_path: Path) -> None:
    """Regression (issue 13 #18): mypy could not see chorus_client through the editable
    install that `make` creates (its import hook is invisible to type checkers); the
    install now also lists the source roots in a .pth file."""
    app = tmp_path / "app.py"
    app.write_text("from chorus_client import Client\nfrom chorus_collector import create_app\n"
                   "from chorus_shared import campaign_from_spec\n"
                   "client: Client\nreveal_type(campaign_from_spec)\n")
    run = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", sys.executable,
                          "--no-incremental", "--strict", str(app)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "import-not-found" not in run.stdout, run.stdout
    assert 'Revealed type is "def (spec: typing.Mapping' in run.stdout, run.stdout


#: An estimate kind's name compared, or an answer type tested, outside the kinds package: the
#: dispatch that ``chorus_collector.kinds`` replaced (``docs/adding-a-campaign-kind.md``).
_KIND_NAMES = "frequency|mean|means|distribution|record"
_ANSWER_TYPES = ("FrequencyEstimate|MeanEstimate|VectorMeanEstimate|DistributionEstimate"
                 "|RecordEstimate")
_KIND_CHAINS = [
    re.compile(r"estimate_kind\W*\s*(==|!=|\bin\b|\bnot in\b)"),  # mechanism.estimate_kind == …
    re.compile(r"""\[["']kind["']\]\s*(==|!=)\s*["'](""" + _KIND_NAMES + ")[\"']"),
    re.compile(r"""\br\.kind\s*==\s*["'](""" + _KIND_NAMES + ")[\"']"),  # the templates
    re.compile(r"(?<!assert )isinstance\([^)]*\b(" + _ANSWER_TYPES + r")\b"),
]


def test_no_estimate_kind_chains_outside_the_kinds_package() -> None:
    """Per-kind behaviour is a method of the kind, not an ``if kind == …`` or ``isinstance``
    chain elsewhere. Checks on domains or mechanisms (open strings, discovery, marginals)
    are not kind dispatch and may stay; a type narrowing (``assert isinstance``) too, and the
    designer's one refusal of the kinds it does not simulate."""
    package = ROOT / "collector" / "chorus_collector"
    allowed = {("design/simulation.py", 3),  # the refusal: one isinstance, no chain
               # the demo checks its own simulated truth (quantiles, conditionals), not a kind
               ("cli/demo.py", 1)}
    offenders = []
    for path in [*package.rglob("*.py"), *package.rglob("*.html")]:
        relative = path.relative_to(package)
        if relative.parts[0] == "kinds":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for index, pattern in enumerate(_KIND_CHAINS):
                if pattern.search(line) and (str(relative), index) not in allowed:
                    offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_make_demo_installs_the_collector_alone_and_says_so(tmp_path: Path) -> None:
    """A fresh clone's `make demo` sets up the collector's extra only (no test toolchain),
    and prints what it does first (issue 35 #2)."""
    # Run inside `make test` too: no "Entering directory" lines, none of the parent's flags.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    plan = subprocess.run(["make", "--no-print-directory", "-n", "demo",
                           f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert any("-e '.[collector]'" in line for line in installs), plan
    assert not any(extra in line for line in installs for extra in ("dev", "dask", "postgresql"))
    assert "setting up" in plan.split("pip install")[0]
    assert plan.rstrip().endswith(f"{tmp_path / 'venv'}/bin/chorus demo")
