"""The collector's answers as pandas DataFrames and Arrow tables, for notebooks.

Every answer the analyst routes give as JSON (an estimate of each kind, a series, a
comparison) becomes one tidy frame: a row per value (estimate), per value and point (series)
or per statistic (distribution, record), with the columns of that answer's CSV
(docs/http-api.md), typed: text as pandas' ``string``, numbers as ``float64`` (NaN where the
JSON has null), counts as ``int64`` (``Int64`` where they may be missing), flags as ``bool``
(``boolean`` where they may be missing) and times as UTC timestamps in seconds
(``datetime64[s, UTC]``, NaT for an unbounded window). The series drops the CSV's
``start_iso`` (``start`` is a timestamp) and adds each point's ``reason``; a record adds the
``reports`` behind each marginal and joint and each independence test's ``method``. The rest of
the answer (campaign, mechanism, ε, variance model, warnings, freshness...) is in
``frame.attrs``, as the JSON has it. Nothing is lost: every number of the JSON is in the frame,
bit for bit (tests/collector/test_frames.py checks it on every kind against the CSV and the
JSON of a live collector).

:func:`arrow_table` makes a frame an Arrow table with the same columns and the answer's other
fields as JSON in the schema's metadata (key ``chorus``).

Needs the ``analysis`` extra (pandas, pyarrow), and nothing of the service: importing this
module imports neither Flask nor the collector's storage, so a notebook needs only
``pip install 'chorus-ldp[analysis]'``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chorus_collector.extras import require

require("pandas", "analysis", "DataFrames of Chorus answers")

import numpy as np  # noqa: E402  (after the check that says which extra brings pandas)
import pandas as pd  # noqa: E402

from chorus_client import CollectorAPI  # noqa: E402

__all__ = ["ARROW_METADATA_KEY", "answer_frame", "arrow_table", "comparison_frame",
           "estimates_frame", "series_frame"]

#: The Arrow schema metadata key holding the answer's fields beside its rows, as JSON.
ARROW_METADATA_KEY = b"chorus"

# A column's type: "str", "float", "int", "Int" (may be missing), "bool", "boolean" (may be
# missing) or "time" (Unix seconds, None for unbounded).
Column = tuple[str, str]
Rows = list[tuple[Any, ...]]

#: What ends every estimate's CSV row: the window, n and ε the numbers are of.
_CONTEXT: tuple[Column, ...] = (("window_start", "time"), ("window_end", "time"),
                                ("n", "int"), ("epsilon", "float"))


def estimates_frame(api: CollectorAPI, name: str, **question: Any) -> pd.DataFrame:
    """``api.estimates(name, **question)`` as a frame (the same arguments: ``start``, ``end``,
    ``candidates``, ``postprocessing``, ``quantiles``, ``ranges``, ``joints``)."""
    return answer_frame(api.estimates(name, **question))


def series_frame(api: CollectorAPI, name: str, **question: Any) -> pd.DataFrame:
    """``api.series(name, **question)`` as a frame: a row per value and point."""
    return answer_frame(api.series(name, **question))


def comparison_frame(api: CollectorAPI, name: str, **question: Any) -> pd.DataFrame:
    """``api.compare(name, **question)`` as a frame: a row per value."""
    return answer_frame(api.compare(name, **question))


def answer_frame(answer: Mapping[str, Any]) -> pd.DataFrame:
    """Any JSON answer of the analyst routes as a tidy, typed frame, its other fields in
    ``attrs``. Raises ``ValueError`` for a document that is not one."""
    kind = answer.get("kind") if isinstance(answer, Mapping) else None
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise ValueError(f"not a Chorus answer (kind {kind!r}); the answers with a frame are "
                         f"{', '.join(_READERS)}")
    containers, columns, rows = reader(answer)
    attrs = {key: copy.deepcopy(value) for key, value in answer.items()
             if key not in containers}
    return _frame(columns, rows, attrs)


def arrow_table(frame: pd.DataFrame) -> Any:
    """A frame made by this module as a ``pyarrow.Table``: the same columns and types (text
    as ``string``, times as ``timestamp[s, tz=UTC]``) and ``frame.attrs`` as JSON under the
    schema metadata key ``chorus``."""
    require("pyarrow", "analysis", "Arrow tables of Chorus answers")
    import pyarrow as pa

    fields = [pa.field(str(name), _arrow_type(pa, frame[name].dtype))
              for name in frame.columns]
    table = pa.Table.from_pandas(frame, schema=pa.schema(fields), preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[ARROW_METADATA_KEY] = json.dumps(frame.attrs).encode()
    return table.replace_schema_metadata(metadata)


def _arrow_type(pa: Any, dtype: Any) -> Any:
    if isinstance(dtype, pd.StringDtype):
        return pa.string()
    if isinstance(dtype, pd.DatetimeTZDtype):
        return pa.timestamp(dtype.unit, tz=str(dtype.tz))
    if pd.api.types.is_bool_dtype(dtype):
        return pa.bool_()
    if pd.api.types.is_integer_dtype(dtype):
        return pa.int64()
    if pd.api.types.is_float_dtype(dtype):
        return pa.float64()
    raise ValueError(f"no Arrow type for a column of {dtype}: not a frame of this module")


# --- building a typed frame --------------------------------------------------------------

def _frame(columns: Sequence[Column], rows: Rows, attrs: dict[str, Any]) -> pd.DataFrame:
    data = {name: _typed([row[i] for row in rows], kind)
            for i, (name, kind) in enumerate(columns)}
    frame = pd.DataFrame(data, index=pd.RangeIndex(len(rows)))
    frame.attrs = attrs
    return frame


def _typed(values: list[Any], kind: str) -> Any:
    if kind == "str":
        return pd.array(values, dtype=pd.StringDtype())
    if kind == "float":
        return np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    if kind == "int":
        return np.array(values, dtype=np.int64)
    if kind == "Int":
        return pd.array(values, dtype="Int64")
    if kind == "bool":
        return np.array(values, dtype=bool)
    if kind == "boolean":
        return pd.array(values, dtype="boolean")
    # Seconds, not pandas' default nanoseconds: report times go to 2**40 s (year 36812),
    # past the nanosecond range's end in 2262.
    seconds = np.array([np.datetime64("NaT") if v is None else np.datetime64(int(v), "s")
                        for v in values], dtype="datetime64[s]")
    return pd.Series(seconds).dt.tz_localize("UTC").array


def _context(answer: Mapping[str, Any]) -> tuple[Any, ...]:
    window = answer.get("window") or {}
    return window.get("start"), window.get("end"), answer["n"], answer["epsilon"]


# --- one reader per answer kind: (the fields holding rows, the columns, the rows) --------

Reader = Callable[[Mapping[str, Any]], tuple[set[str], tuple[Column, ...], Rows]]

_FREQUENCY: tuple[Column, ...] = (
    ("value", "str"), ("count", "float"), ("count_std_error", "float"),
    ("count_ci_low", "float"), ("count_ci_high", "float"), ("frequency", "float"),
    ("frequency_std_error", "float"), ("frequency_ci_low", "float"),
    ("frequency_ci_high", "float"), ("detected", "boolean"), *_CONTEXT)


def _frequency(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    context = _context(answer)
    names = [name for name, _ in _FREQUENCY[:-len(_CONTEXT)]]
    return {"rows"}, _FREQUENCY, [(*(row[name] for name in names), *context)
                                  for row in answer["rows"]]


_MEAN: tuple[Column, ...] = (
    ("mean", "float"), ("std_error", "float"), ("ci_low", "float"), ("ci_high", "float"),
    ("n", "int"), ("window_start", "time"), ("window_end", "time"), ("epsilon", "float"))


def _mean(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    start, end, n, epsilon = _context(answer)
    row = (answer["mean"], answer["std_error"], answer["ci_low"], answer["ci_high"], n,
           start, end, epsilon)
    return {"mean", "std_error", "ci_low", "ci_high"}, _MEAN, [row]


_MEANS: tuple[Column, ...] = (("attribute", "str"), *_MEAN)


def _means(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    start, end, n, epsilon = _context(answer)
    return {"rows"}, _MEANS, [(row["attribute"], row["mean"], row["std_error"],
                               row["ci_low"], row["ci_high"], n, start, end, epsilon)
                              for row in answer["rows"]]


_DISTRIBUTION: tuple[Column, ...] = (
    ("statistic", "str"), ("lo", "float"), ("hi", "float"), ("q", "float"),
    ("value", "float"), ("std_error", "float"), ("ci_low", "float"), ("ci_high", "float"),
    *_CONTEXT)
#: The distribution's JSON lists → the ``statistic`` its rows have in the CSV.
_STATISTICS = {"histogram": "bucket", "cdf": "cdf", "quantiles": "quantile",
               "ranges": "range", "mean": "mean"}


def _distribution(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    context = _context(answer)
    rows: Rows = []
    for field, statistic in _STATISTICS.items():
        items = answer[field]
        for item in ([items] if isinstance(items, Mapping) else items):
            rows.append((statistic, item.get("lo"), item.get("hi"), item.get("q"),
                         item["value"], item["std_error"], item["ci_low"], item["ci_high"],
                         *context))
    return set(_STATISTICS), _DISTRIBUTION, rows


_RECORD: tuple[Column, ...] = (
    ("statistic", "str"), ("attributes", "str"), ("values", "str"), ("given", "str"),
    ("estimate", "float"), ("std_error", "float"), ("ci_low", "float"), ("ci_high", "float"),
    ("df", "Int"), ("p_value", "float"), *_CONTEXT, ("reports", "Int"), ("method", "str"))
#: How a record's CSV joins several attributes or values in one cell.
_SEPARATOR = "|"


def _record(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    context = _context(answer)
    rows: Rows = []

    def share(statistic: str, attributes: str, values: str, given: str | None,
              cell: Mapping[str, Any], reports: int | None) -> None:
        rows.append((statistic, attributes, values, given, cell["frequency"],
                     cell["std_error"], cell["ci_low"], cell["ci_high"], None, None, *context,
                     reports, None))

    for marginal in answer["marginals"]:
        for row in marginal["rows"]:
            share("marginal", marginal["attribute"], row["value"], None, row,
                  marginal["reports"])
    for joint in answer["joints"]:
        names = _SEPARATOR.join(joint["attributes"])
        for cell in joint["cells"]:
            share("joint", names, _SEPARATOR.join(cell["values"]), None, cell,
                  joint["reports"])
        for conditional in joint["conditionals"]:
            for cell in conditional["cells"]:
                share("conditional", conditional["of"], cell["value"],
                      f"{conditional['given']}={cell['given_value']}", cell, None)
        test = joint["independence"]
        if test is not None:  # reject_at_0.05 is p_value < 0.05: the frame has p_value
            rows.append(("independence", names, None, None, test["statistic"], None, None,
                         None, test["df"], test["p_value"], *context, joint["reports"],
                         test["method"]))
    return {"marginals", "joints"}, _RECORD, rows


_SERIES: tuple[Column, ...] = (
    ("value", "str"), ("start", "time"), ("end", "time"), ("n", "int"), ("estimate", "float"),
    ("std_error", "float"), ("ci_low", "float"), ("ci_high", "float"), ("suppressed", "bool"),
    ("epsilon", "float"))


def _series(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    # Points carry ``detected`` for open-string candidates only; the CSV then ends with it.
    detects = any("detected" in point for one in answer["series"] for point in one["points"])
    columns = (*_SERIES, *((("detected", "boolean"),) if detects else ()), ("reason", "str"))
    rows = [(one["value"], point["start"], point["end"], point["n"], point["estimate"],
             point["std_error"], point["ci_low"], point["ci_high"], point["suppressed"],
             answer["epsilon"], *((point.get("detected"),) if detects else ()),
             point["reason"])
            for one in answer["series"] for point in one["points"]]
    return {"series"}, columns, rows


_COMPARISON: tuple[Column, ...] = (
    ("value", "str"), ("baseline_estimate", "float"), ("baseline_std_error", "float"),
    ("current_estimate", "float"), ("current_std_error", "float"), ("difference", "float"),
    ("std_error", "float"), ("ci_low", "float"), ("ci_high", "float"), ("p_value", "float"),
    ("adjusted_p_value", "float"), ("ci_excludes_zero", "bool"), ("significant", "bool"),
    ("note", "str"), ("baseline_start", "time"), ("baseline_end", "time"), ("baseline_n", "int"),
    ("current_start", "time"), ("current_end", "time"), ("current_n", "int"),
    ("epsilon", "float"))


def _comparison(answer: Mapping[str, Any]) -> tuple[set[str], tuple[Column, ...], Rows]:
    baseline, current = answer["baseline"], answer["current"]
    windows = (baseline["start"], baseline["end"], baseline["n"], current["start"],
               current["end"], current["n"], answer["epsilon"])
    names = [name for name, _ in _COMPARISON[:-len(windows)]]
    return {"rows"}, _COMPARISON, [(*(row[name] for name in names), *windows)
                                   for row in answer["rows"]]


#: The JSON answer's ``kind`` → its reader: the five estimate kinds (chorus_collector.kinds),
#: the series and the comparison.
_READERS: dict[str, Reader] = {
    "frequency": _frequency, "mean": _mean, "means": _means, "distribution": _distribution,
    "record": _record, "series": _series, "comparison": _comparison}
