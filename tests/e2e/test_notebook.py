"""The example notebook (examples/estimates-in-pandas.ipynb) runs on a Jupyter kernel against
a live collector on 127.0.0.1 without an error, draws its series with the band, and its
frames hold the very numbers the collector's JSON answers give."""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chorus_client import CollectorAPI
from chorus_collector import create_app
from helpers.live import (
    BROWSER_SHARES,
    BROWSER_SHARES_AFTER,
    BROWSERS,
    SEED_SPECS,
    LiveCollector,
    categorical,
    seed_campaign,
    serving,
)
from helpers.support import ADMIN, ANALYST, FakeClock

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "estimates-in-pandas.ipynb"
DAYS = 4
#: Printed by a cell the test appends: the frames' numbers as JSON (floats as their shortest
#: round-trip repr, NaN as NaN), to be compared with the collector's own answers.
PROBE = """import json
print(json.dumps({
    "shares": shares[["value", "frequency", "frequency_ci_low", "frequency_ci_high"]]
        .values.tolist(),
    "daily": [[row.value, int(row.start.timestamp()), row.n, row.estimate, row.ci_low,
               row.ci_high] for row in daily.itertuples()],
    "change": change[["value", "difference", "adjusted_p_value"]].values.tolist(),
    "arrow_rows": table.num_rows,
}))"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCollector]:
    """A collector on 127.0.0.1 with ``browser`` (k-RR, 5 categories): four days of 3,000
    simulated users, safari gaining 10 points from chrome on the last day; folded."""
    clock = FakeClock()
    app = create_app({"DATABASE": str(tmp_path / "chorus.db"), "ADMIN_TOKEN": ADMIN,
                      "ANALYST_TOKEN": ANALYST, "FOLD_INTERVAL": 3600}, clock=clock)
    with serving(app, clock) as collector:
        draws = [categorical(BROWSERS, BROWSER_SHARES)] * (DAYS - 1) \
            + [categorical(BROWSERS, BROWSER_SHARES_AFTER)]
        seed_campaign(collector, SEED_SPECS["browser"], draws, 3_000,
                      np.random.default_rng(20261215))
        collector.fold()
        yield collector


def _run(live: LiveCollector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import nbclient
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    # Jupyter's files (connection files, the IPython profile) in the test's folder, not HOME;
    # platformdirs paths, as jupyter_core warns it will move to.
    for name, value in (("JUPYTER_RUNTIME_DIR", tmp_path / "runtime"),
                        ("JUPYTER_DATA_DIR", tmp_path / "data"),
                        ("IPYTHONDIR", tmp_path / "ipython"), ("JUPYTER_PLATFORM_DIRS", "1")):
        monkeypatch.setenv(name, str(value))
    # The kernel imports this checkout's packages, whatever its working folder.
    path = [str(ROOT / root) for root in ("client", "collector", "shared")]
    env = {**os.environ, "CHORUS_URL": live.url, "CHORUS_TOKEN": ANALYST,
           "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)  # raises CellExecutionError on any cell's error
    return notebook


def _png_size(cell: Any) -> tuple[int, int]:
    """(width, height) of the PNG a cell displays (its IHDR chunk)."""
    (png,) = [output["data"]["image/png"] for output in cell.outputs
              if "image/png" in output.get("data", {})]
    data = base64.b64decode(png)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_committed_notebook_carries_no_outputs() -> None:
    """The example is stored clean: what it shows comes from a run, never from the file."""
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


def test_the_example_notebook_runs_plots_and_holds_the_apis_numbers(
        live: LiveCollector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notebook = _run(live, tmp_path, monkeypatch)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [output for cell in code for output in cell.outputs
              if output["output_type"] == "error"]
    assert errors == []
    plot = next(cell for cell in code if "fill_between" in cell.source)
    width, height = _png_size(plot)
    assert width > 400 and height > 200  # an 8 × 4 in figure
    (probe,) = [output["text"] for output in code[-1].outputs if output.get("name") == "stdout"]
    seen = json.loads(probe)

    api = CollectorAPI(live.url, ANALYST)
    estimates = api.estimates("browser")
    assert seen["shares"] == [[row["value"], row["frequency"], row["frequency_ci_low"],
                               row["frequency_ci_high"]] for row in estimates["rows"]]
    series = api.series("browser", step="day")
    points = [[one["value"], point["start"], point["n"], point["estimate"], point["ci_low"],
               point["ci_high"]] for one in series["series"] for point in one["points"]]
    assert seen["daily"] == points and len(points) == DAYS * len(BROWSERS)
    assert seen["arrow_rows"] == len(points)
    last = series["window"]["end"] - 86_400
    change = api.compare("browser", baseline_start=last - 86_400, baseline_end=last,
                         start=last, end=last + 86_400)
    assert seen["change"] == [[row["value"], row["difference"], row["adjusted_p_value"]]
                              for row in change["rows"]]
