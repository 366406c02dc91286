"""The mechanism comparison (``chorus mechanisms``, docs/mechanisms): figures from the
mechanisms' own exact variances, and the docs page kept in sync with them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from chorus_collector.cli import main as cli
from chorus_shared.compare import docs_tables, frequency_table, mean_table, vector_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mechanisms" / "README.md"


def test_docs_tables_are_current() -> None:
    text = DOCS.read_text()
    start, end = "<!-- tables:start -->\n", "\n<!-- tables:end -->"
    assert start in text and end in text
    block = text.split(start, 1)[1].split(end, 1)[0]
    assert block.strip() == docs_tables().strip(), \
        "regenerate with: python -c 'from chorus_shared.compare import docs_tables; " \
        "print(docs_tables())'"


def test_figures_agree_with_the_closed_forms() -> None:
    """MECHANISMS.md §9.8 and §2–3: spot values computed independently."""
    e = math.exp(1.0)
    rows = {r["mechanism"]: r for r in frequency_table(1.0, 16)}
    assert rows["krr"]["variance_per_user"] == pytest.approx((e + 14) / (e - 1) ** 2)
    assert rows["oue"]["variance_per_user"] == pytest.approx(4 * e / (e - 1) ** 2)
    assert rows["hr"]["variance_per_user"] == pytest.approx(((e + 1) / (e - 1)) ** 2)
    means = {r["mechanism"]: r["worst_case_variance"] for r in mean_table(1.0)}
    assert means["duchi"] == pytest.approx(4.683, abs=1e-3)
    assert means["pm"] == pytest.approx(5.224, abs=1e-3)
    assert means["hm"] == pytest.approx(4.289, abs=1e-3)
    assert means["laplace"] == pytest.approx(8.0, rel=1e-4)
    vectors = {r["mechanism"]: r["worst_case_variance"] for r in vector_table(1.0, 4)}
    assert vectors["harmony"] == pytest.approx(4 * ((e + 1) / (e - 1)) ** 2)


def test_cli_compares_and_refuses_bad_input() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["mechanisms", "--epsilon", "2", "--domain-size", "64",
                                 "--dimensions", "3"])
    assert result.exit_code == 0, result.output
    assert "ss" in result.output and "least variance" in result.output
    assert "hm_md" in result.output
    lines = result.output.splitlines()  # three tables, a blank line between, none before
    assert lines[0].startswith("frequency oracles, d = 64")
    assert [i for i, line in enumerate(lines) if not line] == \
        [lines.index(title) - 1 for title in lines if title.startswith(("one number", "3 numbers"))]
    for args, message in ((["--epsilon", "0"], "epsilon"),
                          (["--epsilon", "1", "--domain-size", "1"], "domain size"),
                          (["--epsilon", "1", "--dimensions", "65"], "attributes")):
        failed = runner.invoke(cli, ["mechanisms", *args])
        assert failed.exit_code != 0 and message in failed.output, failed.output
    loud = runner.invoke(cli, ["mechanisms", "--epsilon", "12"])
    assert "protects little" in loud.output
