"""The module paths from before the collector's packages stay importable: each is the new
module itself (so a monkeypatch through either name is seen by both), with a warning that
names the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import chorus_collector
from chorus_collector.compat import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_with_a_deprecation_warning(old: str) -> None:
    new = importlib.import_module(f"chorus_collector.{MOVED[old]}")
    sys.modules.pop(f"chorus_collector.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"moved to chorus_collector\.{MOVED[old]}"):
        alias = importlib.import_module(f"chorus_collector.{old}")
    assert alias is new
    assert new.__name__ == new.__spec__.name == f"chorus_collector.{MOVED[old]}"


def test_no_alias_is_shadowed_by_a_real_module() -> None:
    """The finder is asked last: a module or package of the old name would win."""
    package = Path(chorus_collector.__file__).parent
    assert [old for old in MOVED if (package / f"{old}.py").exists()
            or (package / old).is_dir()] == []


def test_the_packages_that_kept_an_old_name_export_what_the_module_did() -> None:
    from chorus_collector.ingest import ingest_reports
    from chorus_collector.results import FrequencyEstimate, MeanEstimate
    from chorus_collector.storage import SchemaError, Storage, open_storage

    assert ingest_reports.__module__ == "chorus_collector.ingest.reports"
    assert FrequencyEstimate.__module__ == MeanEstimate.__module__ == \
        "chorus_collector.results.estimates"
    assert all(callable(name) for name in (SchemaError, Storage, open_storage))


def test_the_documented_public_names_are_importable_from_the_package() -> None:
    assert chorus_collector.create_app.__module__ == "chorus_collector.app"
    assert chorus_collector.create_shuffler_app.__module__ == "chorus_collector.shuffler.app"
    assert {"SETTINGS", "SchemaError", "SettingsError"} <= set(dir(chorus_collector)) | set(
        chorus_collector.__all__)


def test_an_old_from_import_works_in_a_fresh_interpreter() -> None:
    """``from chorus_collector.simulate import simulate``, as 0.x code wrote it."""
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    from chorus_collector.simulate import simulate\n"
            "except DeprecationWarning as w: print(w)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "chorus_collector.simulate moved to chorus_collector.design.simulate" in out
