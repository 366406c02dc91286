"""Progress bars (issue 13 #15): on a terminal they show; in a pipe, a log or CI the output
stays exactly what it was."""

from __future__ import annotations

import io
from pathlib import Path

from click.testing import CliRunner

from chorus_collector.cli import main as cli
from chorus_collector.cli.progress import progress_bar, staged


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_shows_on_a_terminal_and_counts() -> None:
    terminal = Terminal()
    with progress_bar(200, "report", "recomputing k", stream=terminal) as bar:
        for _ in range(4):
            bar.update(50)
    shown = terminal.getvalue()
    assert "recomputing k" in shown and "/200" in shown and "report/s" in shown
    assert shown.endswith("\r")  # cleared when done: the command's own output follows


def test_no_bar_when_the_output_is_not_a_terminal() -> None:
    pipe = io.StringIO()
    with progress_bar(200, "report", "recomputing k", stream=pipe) as bar:
        bar.update(200)
    assert pipe.getvalue() == ""


def test_check_aggregates_prints_no_bar_into_a_pipe(tmp_path: Path) -> None:
    from chorus_collector.storage import SQLiteStorage

    database = tmp_path / "x.db"
    SQLiteStorage(str(database)).migrate()
    from chorus_shared.campaign import campaign_from_spec

    SQLiteStorage(str(database)).insert_campaign(campaign_from_spec(
        {"name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b"]}))
    result = CliRunner().invoke(cli, ["check-aggregates", "k", "--database", str(database),
                                      "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "k: 0 time buckets, 0 reports recomputed; 0 buckets lost expired reports to gc: "
        "their counts were checked, their statistics could not be",
        "statistics match the raw reports"]


def test_a_benchmark_names_each_stage_as_it_runs() -> None:
    terminal = Terminal()
    ran = [name for name, _ in staged([("client", 1), ("http", 2)], "run.py", terminal)]
    assert ran == ["client", "http"]
    shown = terminal.getvalue()
    assert "run.py" in shown and "client" in shown and "http" in shown and "1/2" in shown
    pipe = io.StringIO()
    assert [stage for _, stage in staged([("client", 1)], "run.py", pipe)] == [1]
    assert pipe.getvalue() == ""
