"""The ``chorus`` command imports only what the subcommand run needs (issue 33 #11): ``chorus
export`` spent most of its time importing the estimators, scipy, Flask and the HTTP client,
none of which an export uses. Each subcommand's module is imported when it is asked for
(``cli.root.LazyGroup``), from the list in ``chorus_collector.cli.COMMANDS``."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
from click.testing import CliRunner

import chorus_collector.cli as cli_package
from chorus_collector.cli import COMMANDS, main
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import SQLiteStorage, StoredReport
from chorus_shared.campaign import campaign_from_spec
from helpers.support import campaign_spec

pytestmark = pytest.mark.sqlite_only

#: What an export never needs: the estimators (and scipy, which they import), the web
#: framework, the HTTP client and the designer.
NOT_FOR_EXPORT = ("scipy", "chorus_collector.estimators", "chorus_collector.kinds", "flask",
                  "requests", "chorus_client.api", "chorus_collector.design")


def test_every_subcommand_is_listed_with_the_module_that_registers_it() -> None:
    for module in pkgutil.iter_modules(cli_package.__path__):
        if module.name != "__main__":  # which runs the command
            import_module(f"{cli_package.__name__}.{module.name}")
    registered = {name: command.callback.__module__.rpartition(".")[2]
                  for name, command in main.commands.items() if command.callback is not None}
    assert registered == COMMANDS
    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0
    assert all(f"  {name} " in listed.output for name in COMMANDS)


def test_an_export_imports_neither_the_estimators_nor_the_web_stack(tmp_path: Path) -> None:
    database = tmp_path / "chorus.db"
    storage = SQLiteStorage(str(database))
    storage.migrate()
    stored, _ = storage.insert_campaign(campaign_from_spec(campaign_spec("k")))
    with storage.write() as conn:
        storage.insert_reports(conn, stored.id, [StoredReport(bytes([i]) * 16, 3600, str(i % 4))
                                                 for i in range(1, 41)])
    assert fold(storage) == 40
    storage.close()
    loaded = tmp_path / "modules.json"
    # The console script's own entry point, with the modules it loaded written at exit.
    code = ("import atexit, json, sys\n"
            f"atexit.register(lambda: open({str(loaded)!r}, 'w').write("
            "json.dumps(sorted(sys.modules))))\n"
            "from chorus_collector.entry import main\n"
            "sys.argv[0] = 'chorus'\n"
            "main()\n")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-c", code, "export", "k", "--parquet", str(out),
                          "--database", str(database)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "exported 40 reports of k" in run.stdout
    assert json.loads((out / "_chorus-export.json").read_text())["reports"] == 40
    modules = json.loads(loaded.read_text())
    assert "pyarrow" in modules and "chorus_collector.jobs.export" in modules
    assert [m for m in modules if m.startswith(NOT_FOR_EXPORT)] == []


def test_the_server_app_imports_scipy_special_but_not_scipy_stats() -> None:
    """Every server and query command imports the app: scipy.stats cost a second of its
    2.6 s start-up and nothing needs it (the estimators use scipy.special's functions)."""
    code = "import sys, chorus_collector.app; print(sorted(sys.modules))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    modules = run.stdout
    assert "'scipy.special'" in modules and "'chorus_collector.estimators'" in modules
    assert "'scipy.stats'" not in modules


def test_storage_imports_sqlite_utils_without_pandas_and_pandas_still_imports_after() -> None:
    """sqlite-utils imports pandas when it can (0.5 s of every server worker's start-up) for
    nothing Chorus writes: storage imports it without, and pandas, for the DataFrame helpers
    of ``chorus_collector.frames``, still imports afterwards in the same process."""
    code = ("import sys, chorus_collector.app\n"
            "print('pandas' in sys.modules, 'sqlite_utils' in sys.modules)\n"
            "import chorus_collector.frames, pandas\n"
            "print(pandas.DataFrame({'a': [1]}).shape)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["False True", "(1, 1)"]
