"""Progress (issue 13 #15, issue 35 #2): a bar on a terminal; in a pipe, a log or CI a line
every LINE_INTERVAL seconds of a long step, and nothing for a short one."""

from __future__ import annotations

import io
from pathlib import Path

from click.testing import CliRunner

from chorus_collector.cli import main as cli
from chorus_collector.cli.progress import LINE_INTERVAL, ProgressLines, progress_bar, staged


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
    assert isinstance(bar, ProgressLines)
    assert pipe.getvalue() == ""  # a short step: nothing


def test_a_long_step_prints_a_line_every_interval_where_there_is_no_terminal() -> None:
    pipe = io.StringIO()
    now = [100.0]
    lines = ProgressLines(5000, "report", "recomputing k", pipe, clock=lambda: now[0])
    for _ in range(50):  # 50 updates of 100 reports, 1 s apart: a line every 10 s
        now[0] += 1.0
        lines.update(100)
    assert pipe.getvalue().splitlines() == [
        f"recomputing k: {n:,} of 5,000 reports ({n / 5000:.0%}), {s} s"
        for n, s in ((1000, 10), (2000, 20), (3000, 30), (4000, 40), (5000, 50))]
    assert LINE_INTERVAL == 10.0
    unknown = io.StringIO()
    folding = ProgressLines(None, "report", "folding", unknown, interval=1.0,
                            clock=lambda: now[0])
    folding.set_postfix_str("bucket 3")
    now[0] += 2.0
    folding.update(1)
    assert unknown.getvalue() == "folding: 1 report [bucket 3], 2 s\n"


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
