"""chorus_collector.frames: every answer of a live collector (each estimate kind, series,
comparisons) as a typed DataFrame that loses nothing of the JSON, and as an Arrow table.

The oracle is the collector's own CSV of the same question, read with the csv module (not
pandas): each frame column the CSV has holds the CSV's cells, numbers bit for bit (the CSV
writes a float's shortest round-trip repr). What only the JSON has (a point's reason, a
record's reports and test method) and the answer's other fields (``attrs``) are checked
against the JSON itself.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from chorus_client import CollectorAPI
from chorus_collector import create_app
from chorus_collector.frames import (
    ARROW_METADATA_KEY,
    answer_frame,
    arrow_table,
    comparison_frame,
    estimates_frame,
    series_frame,
)
from chorus_collector.kinds import KINDS
from helpers.live import (
    DAY,
    LiveCollector,
    seed_campaign,
    seed_campaigns,
    seed_distribution,
    seed_record,
    serving,
)
from helpers.support import ADMIN, ANALYST, FakeClock

VECTOR_SPEC = {"name": "vitals", "mechanism": "duchi_md", "epsilon": 4.0,
               "domain": {"kind": "vector", "attributes": [
                   {"name": "cpu", "lo": 0.0, "hi": 1.0}, {"name": "memory", "lo": 0.0,
                                                           "hi": 2.0}]},
               "time_precision": DAY, "min_batch_size": 100}
CANDIDATES = ["https://site-00.example/", "https://site-01.example/"]
#: Each estimate kind (chorus_collector.kinds) → a seeded campaign of that kind and its
#: question. A new kind fails test_every_kind_has_a_campaign_here until it is added.
QUESTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "frequency": ("browser", {}),
    "mean": ("load_time", {}),
    "means": ("vitals", {}),
    "distribution": ("load_time_percentiles", {"quantiles": [0.5, 0.9],
                                               "ranges": [(1.0, 4.0)]}),
    "record": ("crashes", {"joints": [("browser", "crashed"), ("browser", "os")]}),
}


@dataclass
class Seeded:
    live: LiveCollector
    api: CollectorAPI
    days: list[int]  # the start of each seeded day, oldest first


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """A collector on 127.0.0.1 with a campaign of every kind, three days of a few hundred
    simulated users each (the record and distribution campaigns: two days), folded."""
    folder = tmp_path_factory.mktemp("frames")
    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("CHORUS_")]:
            patch.delenv(key)
        clock = FakeClock()
        app = create_app({"DATABASE": str(folder / "chorus.db"), "ADMIN_TOKEN": ADMIN,
                          "ANALYST_TOKEN": ANALYST, "FOLD_INTERVAL": 3600}, clock=clock)
        with serving(app, clock) as live:
            campaigns = seed_campaigns(live, days=3, users_per_day=400, seed=11)
            seed_distribution(live, days=2, users_per_day=1500, seed=12)
            seed_record(live, days=2, users_per_day=1500, seed=13)
            rng = np.random.default_rng(14)
            seed_campaign(live, VECTOR_SPEC, [lambda n, r: [
                {"cpu": float(c), "memory": float(m)}
                for c, m in zip(r.uniform(0, 1, n), r.uniform(0, 2, n), strict=True)]] * 2,
                400, rng)
            live.fold()
            yield Seeded(live, CollectorAPI(live.url, ANALYST), campaigns["browser"].buckets)


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def assert_cell(cell: str, value: Any, column: str) -> None:
    """One CSV cell equals one frame value, read by the frame column's type."""
    if cell == "":
        assert value is pd.NA or value is pd.NaT or (isinstance(value, float)
                                                     and math.isnan(value)), (column, value)
    elif isinstance(value, pd.Timestamp):
        assert value.tzname() == "UTC" and int(value.timestamp()) == int(cell), (column, value)
    elif isinstance(value, bool | np.bool_):
        assert cell == ("true" if value else "false"), (column, value)
    elif isinstance(value, float):
        assert float(cell) == value, (column, cell, value)  # the same double, bit for bit
    elif isinstance(value, int | np.integer):
        assert int(cell) == value, (column, cell, value)
    else:
        assert cell == value, (column, cell, value)


def assert_frame_is_the_csv(frame: pd.DataFrame, text: str, skip: tuple[str, ...] = ()) -> None:
    rows = csv_rows(text)
    header = [name for name in csv.reader(io.StringIO(text)).__next__() if name not in skip]
    assert list(frame.columns[:len(header)]) == header  # the CSV's columns, in its order
    assert len(frame) == len(rows) > 0
    for index, row in enumerate(rows):
        for column in header:
            assert_cell(row[column], frame[column].iloc[index], column)


def assert_attrs_are_the_rest(frame: pd.DataFrame, answer: dict[str, Any],
                              rows: set[str]) -> None:
    assert frame.attrs == {key: value for key, value in answer.items() if key not in rows}
    json.dumps(frame.attrs)  # plain JSON, as the answer was


EXPECTED_TYPES = {"value": "string", "attribute": "string", "statistic": "string",
                  "n": "int64", "window_start": "datetime64[s, UTC]",
                  "window_end": "datetime64[s, UTC]", "detected": "boolean",
                  "start": "datetime64[s, UTC]", "end": "datetime64[s, UTC]",
                  "suppressed": "bool", "df": "Int64", "reports": "Int64",
                  "estimate": "float64", "ci_low": "float64", "ci_high": "float64"}


def assert_typed(frame: pd.DataFrame) -> None:
    for column, dtype in EXPECTED_TYPES.items():
        if column == "value" and frame.attrs["kind"] == "distribution":
            dtype = "float64"  # a distribution's value is its estimate, not a label
        if column in frame.columns:
            assert str(frame[column].dtype) == dtype, (column, frame[column].dtype)


def test_every_kind_has_a_campaign_here() -> None:
    assert set(QUESTIONS) == set(KINDS)


@pytest.mark.parametrize("kind", list(QUESTIONS))
def test_an_estimate_of_every_kind_is_its_csv_typed_with_the_rest_in_attrs(
        seeded: Seeded, kind: str) -> None:
    name, question = QUESTIONS[kind]
    answer = seeded.api.estimates(name, **question)
    assert answer["kind"] == kind
    frame = estimates_frame(seeded.api, name, **question)
    assert_frame_is_the_csv(frame, seeded.api.estimates_csv(name, **question))
    assert_typed(frame)
    rows = {"frequency": {"rows"}, "means": {"rows"}, "record": {"marginals", "joints"},
            "mean": {"mean", "std_error", "ci_low", "ci_high"},
            "distribution": {"histogram", "cdf", "quantiles", "ranges", "mean"}}[kind]
    assert_attrs_are_the_rest(frame, answer, rows)
    assert pd.isna(frame["window_start"]).all()  # the whole window: unbounded both sides


def test_a_record_frame_keeps_what_only_the_json_has(seeded: Seeded) -> None:
    """Each marginal's and joint's report count, and each independence test's method and
    verdict (reject_at_0.05 is p_value < 0.05)."""
    name, question = QUESTIONS["record"]
    answer = seeded.api.estimates(name, **question)
    frame = answer_frame(answer)
    for marginal in answer["marginals"]:
        rows = frame[(frame["statistic"] == "marginal")
                     & (frame["attributes"] == marginal["attribute"])]
        assert list(rows["values"]) == [row["value"] for row in marginal["rows"]]
        assert set(rows["reports"]) == {marginal["reports"]}
    tests = frame[frame["statistic"] == "independence"]
    assert len(tests) == len(answer["joints"]) == 2
    for joint, (_, test) in zip(answer["joints"], tests.iterrows(), strict=True):
        verdict = joint["independence"]
        assert test["attributes"] == "|".join(joint["attributes"])
        assert (test["estimate"], test["df"], test["p_value"], test["method"], test["reports"]) \
            == (verdict["statistic"], verdict["df"], verdict["p_value"], verdict["method"],
                joint["reports"])
        assert (test["p_value"] < 0.05) == verdict["reject_at_0.05"]
    cells = frame[frame["statistic"] == "joint"]
    assert len(cells) == sum(len(joint["cells"]) for joint in answer["joints"])


def test_open_string_candidates_keep_their_detected_flag(seeded: Seeded) -> None:
    answer = seeded.api.estimates("homepage", candidates=CANDIDATES)
    frame = estimates_frame(seeded.api, "homepage", candidates=CANDIDATES)
    assert_frame_is_the_csv(frame, seeded.api.estimates_csv("homepage", candidates=CANDIDATES))
    assert list(frame["detected"]) == [row["detected"] for row in answer["rows"]]
    assert frame["detected"].dtype == "boolean"


def test_a_window_becomes_utc_timestamps(seeded: Seeded) -> None:
    start, end = seeded.days[1], seeded.days[2]
    frame = estimates_frame(seeded.api, "browser", start=start, end=end)
    assert set(frame["window_start"]) == {pd.Timestamp(start, unit="s", tz="UTC")}
    assert set(frame["window_end"]) == {pd.Timestamp(end, unit="s", tz="UTC")}
    assert frame.attrs["window"] == {"start": start, "end": end}


@pytest.mark.parametrize(("name", "question"), [
    ("browser", {"step": "day"}),
    ("load_time", {}),
    ("vitals", {}),
    ("load_time_percentiles", {}),
    ("crashes", {"values": ["browser=safari", "crashed=yes"]}),
    ("homepage", {"candidates": CANDIDATES}),
])
def test_a_series_is_its_csv_typed_with_reasons_and_the_rest_in_attrs(
        seeded: Seeded, name: str, question: dict[str, Any]) -> None:
    # From a day before the first report: the first point is empty, suppressed, with a reason.
    question = {"start": seeded.days[0] - DAY, "end": seeded.days[-1] + DAY, **question}
    answer = seeded.api.series(name, **question)
    frame = series_frame(seeded.api, name, **question)
    assert_frame_is_the_csv(frame, seeded.api.series_csv(name, **question), skip=("start_iso",))
    assert_typed(frame)
    assert_attrs_are_the_rest(frame, answer, {"series"})
    points = [point for one in answer["series"] for point in one["points"]]
    assert list(frame["reason"].fillna("-")) == [point["reason"] or "-" for point in points]
    assert frame["suppressed"].any() and not frame["suppressed"].all()
    assert frame.loc[frame["suppressed"], "estimate"].isna().all()
    # One row per value and point: a tidy frame pivots to one column per value.
    wide = frame.pivot(index="start", columns="value", values="estimate")
    assert wide.shape == (len(answer["series"][0]["points"]), len(answer["series"]))


def test_a_comparison_is_its_csv_typed_with_the_rest_in_attrs(seeded: Seeded) -> None:
    days = seeded.days
    question = {"baseline_start": days[0], "baseline_end": days[1], "start": days[1],
                "end": days[2]}
    answer = seeded.api.compare("browser", **question)
    frame = comparison_frame(seeded.api, "browser", **question)
    assert_frame_is_the_csv(frame, seeded.api.compare_csv("browser", **question))
    assert_attrs_are_the_rest(frame, answer, {"rows"})
    assert frame["significant"].dtype == bool and frame["baseline_n"].dtype == np.int64


ANSWERS: list[tuple[str, Callable[[Seeded], dict[str, Any]]]] = [
    *((kind, lambda s, k=kind: s.api.estimates(QUESTIONS[k][0], **QUESTIONS[k][1]))
      for kind in QUESTIONS),
    ("series", lambda s: s.api.series("homepage", candidates=CANDIDATES,
                                      start=s.days[0] - DAY, end=s.days[-1] + DAY)),
    ("comparison", lambda s: s.api.compare("browser", baseline_start=s.days[0],
                                           baseline_end=s.days[1], start=s.days[1],
                                           end=s.days[2])),
]


@pytest.mark.parametrize(("kind", "ask"), ANSWERS, ids=[kind for kind, _ in ANSWERS])
def test_an_arrow_table_has_the_frame_its_types_and_the_answer_in_metadata(
        seeded: Seeded, kind: str, ask: Callable[[Seeded], dict[str, Any]]) -> None:
    frame = answer_frame(ask(seeded))
    table = arrow_table(frame)
    assert table.column_names == list(frame.columns) and table.num_rows == len(frame)
    types = dict(zip(table.column_names, table.schema.types, strict=True))
    for name in frame.columns:
        if str(frame[name].dtype) == "string":
            assert types[name] == pa.string(), name
        if str(frame[name].dtype).startswith("datetime64"):
            assert types[name] == pa.timestamp("s", tz="UTC"), name
    assert json.loads(table.schema.metadata[ARROW_METADATA_KEY]) == frame.attrs
    back = table.to_pandas()
    back.attrs = frame.attrs
    pd.testing.assert_frame_equal(back, frame)


def test_what_is_not_an_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Chorus answer"):
        answer_frame({"type": "https://chorus.dev/problems/invalid-query", "status": 400})
    with pytest.raises(ValueError, match="kind 'histogram'"):
        answer_frame({"kind": "histogram"})
    with pytest.raises(ValueError, match="no Arrow type"):
        arrow_table(pd.DataFrame({"mixed": [1, "a"]}, dtype=object))


def test_importing_the_frames_imports_nothing_of_the_service() -> None:
    """A notebook needs the analysis extra only: no Flask, storage or SciPy on import."""
    code = ("import sys, chorus_collector.frames\n"
            "print(sorted(m for m in ('flask', 'werkzeug', 'sqlite_utils', 'scipy', "
            "'psycopg', 'chorus_collector.storage') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             p for p in sys.path if p)})
    assert out.stdout.strip() == "[]"


def _documented_columns() -> dict[str, list[str]]:
    """docs/analysts.md's table: answer → its frame's columns, in order."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "analysts.md").read_text()
    table = page.split("| function | answer |", 1)[1].split("\n\n", 1)[0]
    context = ["window_start", "window_end", "n", "epsilon"]
    documented: dict[str, list[str]] = {}
    for line in table.splitlines()[2:]:
        _, answer, _, cell = (part.strip() for part in line.strip().strip("|").split("|"))
        columns: list[str] = []
        for name, phrase in re.findall(r"`([^`]+)`|(the context|as a mean)",
                                       re.sub(r"\([^)]*\)", "", cell)):
            columns += [name] if name else context if phrase == "the context" \
                else documented["mean"]
        documented[answer] = columns
    return documented


def test_the_analysts_page_lists_each_frames_columns(seeded: Seeded) -> None:
    documented = _documented_columns()
    frames = {kind: estimates_frame(seeded.api, name, **question)
              for kind, (name, question) in QUESTIONS.items()}
    frames["series"] = series_frame(seeded.api, "homepage", candidates=CANDIDATES)
    frames["comparison"] = comparison_frame(
        seeded.api, "browser", baseline_start=seeded.days[0], baseline_end=seeded.days[1],
        start=seeded.days[1], end=seeded.days[2])
    assert set(documented) == set(frames)
    for answer, frame in frames.items():
        assert documented[answer] == list(frame.columns), answer
