"""The analyst routes' questions, read from a query string (GET) or a JSON body (POST).

The same fields either way: a repeatable query parameter (``candidate=a&candidate=b``) is a
list in the body (``"candidates": ["a", "b"]``). An unknown parameter or field is refused: a
misspelt one must not silently answer another question (the whole window, as JSON).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import request

from chorus_collector.analysis.windows import check_window
from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.base import DEFAULT_QUANTILES
from chorus_collector.kinds import kind_of
from chorus_collector.problems import Problem
from chorus_collector.storage import StoredCampaign
from chorus_shared.mechanisms import STRING_MECHANISMS
from chorus_shared.wire import MAX_TIME

__all__ = ["CompareQuery", "SeriesQuery", "compare_query", "estimate_query", "series_query"]

_DIGITS = re.compile(r"[0-9]{1,13}")
#: body field → its repeatable query parameter
_LISTS = {"candidates": "candidate", "values": "value", "ranges": "range", "joints": "joint"}
#: Body lists whose items are not strings (validated by their own reader).
_OWN_ITEMS = {"ranges", "joints"}
MAX_QUANTILES = 99
MAX_RANGES = 100
MAX_JOINTS = 45


@dataclass(frozen=True)
class SeriesQuery:
    start: int | None
    end: int | None
    step: int | str | None  # None: the campaign's default
    values: tuple[str, ...]
    top: int | None
    candidates: tuple[str, ...]
    align: str = "exact"  # "outer": bounds widened to whole points (a dashboard's time range)


@dataclass(frozen=True)
class CompareQuery:
    baseline: tuple[int | None, int | None]
    current: tuple[int | None, int | None]
    candidates: tuple[str, ...]
    correction: str
    alpha: float


def _source(body: Any, fields: set[str]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """(scalar fields, list fields) of the question; ``body`` is the POST body (None: GET)."""
    lists = {name: _LISTS[name] for name in fields if name in _LISTS}
    if request.method == "POST":
        if not isinstance(body, dict):
            raise Problem("invalid-query", "send a JSON object")
        unknown = set(body) - fields
        if unknown:
            raise Problem("invalid-query",
                          f"unknown fields {sorted(unknown)}; allowed: {sorted(fields)}")
        found = {name: body.get(name) or [] for name in lists}
        for name, items in found.items():
            if name in _OWN_ITEMS:
                continue
            if not isinstance(items, list) or not all(isinstance(c, str) for c in items):
                raise Problem("invalid-query", f"{name} must be a list of strings")
        return {k: v for k, v in body.items() if k not in lists}, found
    parameters = (fields - set(lists)) | set(lists.values())
    unknown = set(request.args) - parameters
    if unknown:
        raise Problem("invalid-query", f"unknown query parameters {sorted(unknown)}; "
                                       f"allowed: {sorted(parameters)}")
    source = {k: v for k, v in request.args.to_dict().items() if k not in lists.values()}
    return source, {name: request.args.getlist(parameter) for name, parameter in lists.items()}


def _int_arg(source: Mapping[str, Any], name: str) -> int | None:
    value = source.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = int(value) if _DIGITS.fullmatch(value) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TIME:
        raise Problem("invalid-query",
                      f"{name} must be a Unix time in seconds (0 <= {name} < 2**40)")
    return value


def _candidates(stored: StoredCampaign, candidates: list[str], limit: int) -> tuple[str, ...]:
    if candidates and not _accepts(stored, "candidates"):
        raise Problem("invalid-query", "candidates apply to campaigns over open strings ("
                      f"{', '.join(STRING_MECHANISMS)}) only")
    if len(candidates) > limit:
        raise Problem("too-many-candidates", f"at most {limit} candidates per query")
    return tuple(candidates)


def response_format(source: Mapping[str, Any]) -> str:
    fmt = source.get("format")
    if fmt is None:
        fmt = "csv" if request.accept_mimetypes.best == "text/csv" else "json"
    if fmt not in ("json", "csv"):
        raise Problem("invalid-query", "format must be json or csv")
    return str(fmt)


def estimate_query(stored: StoredCampaign, body: Any, limit: int) -> tuple[Query, str]:
    """The estimates route's question: (query, format)."""
    source, lists = _source(body, {"candidates", "start", "end", "format", "postprocessing",
                                   "quantiles", "ranges", "joints"})
    candidates = _candidates(stored, lists["candidates"], limit)
    quantiles, ranges = _quantiles(stored, source.get("quantiles")), \
        _ranges(stored, lists["ranges"])
    start, end = _int_arg(source, "start"), _int_arg(source, "end")
    check_window(start, end, stored.campaign.time_precision)
    fmt = response_format(source)
    estimator = estimator_for(stored.campaign.mechanism.name)
    method = source.get("postprocessing") or estimator.default_postprocessing
    allowed = estimator.postprocessing
    if method not in allowed:
        raise Problem("invalid-query",
                      f"postprocessing must be one of {list(allowed)} for this campaign")
    return Query(start=start, end=end, candidates=candidates, postprocessing=method,
                 quantiles=quantiles, ranges=ranges,
                 joints=_joints(stored, lists["joints"])), fmt


def _joints(stored: StoredCampaign, raw: list[Any]) -> tuple[tuple[str, ...], ...]:
    """``joint=browser,os`` (repeatable) or ``"joints": [["browser", "os"]]``: the joint
    distributions a record campaign is asked for (the estimator checks the names)."""
    if not raw:
        return ()
    if not _accepts(stored, "joints"):
        raise Problem("invalid-query", "joints apply to record campaigns only")
    if not isinstance(raw, list):
        raise Problem("invalid-query", 'joints is a list of attribute lists: "joints": '
                                       '[["a", "b"]]')
    if len(raw) > MAX_JOINTS:
        raise Problem("invalid-query", f"ask for at most {MAX_JOINTS} joints")
    out = []
    for item in raw:
        names = item.split(",") if isinstance(item, str) else item
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise Problem("invalid-query", 'a joint lists attribute names: joint=a,b or '
                                           '"joints": [["a", "b"]]')
        out.append(tuple(name.strip() for name in names))
    return tuple(out)


def _accepts(stored: StoredCampaign, parameter: str) -> bool:
    """Whether the campaign's kind takes the question (candidates, quantiles, ranges,
    joints)."""
    return parameter in kind_of(stored.campaign).query_parameters(stored.campaign)


def _distribution_only(stored: StoredCampaign, what: str) -> None:
    if not _accepts(stored, what):
        raise Problem("invalid-query", f"{what} apply to distribution campaigns (sw, hh) "
                                       f"only; this one estimates a "
                                       f"{kind_of(stored.campaign).name}")


def _number(text: object, what: str) -> float:
    """A finite number from JSON or from query-string text."""
    if isinstance(text, str):
        try:
            text = float(text)
        except ValueError:
            text = math.nan
    if isinstance(text, bool) or not isinstance(text, int | float) or not math.isfinite(text):
        raise Problem("invalid-query", f"{what} must be a finite number, got {str(text)!r:.40}")
    return float(text)


def _quantiles(stored: StoredCampaign, raw: object) -> tuple[float, ...]:
    """``quantiles=0.5,0.95`` (GET) or ``"quantiles": [0.5, 0.95]``; the default p50, p95, p99."""
    if raw is None or raw == "":
        return DEFAULT_QUANTILES
    _distribution_only(stored, "quantiles")
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_QUANTILES:
        raise Problem("invalid-query", f"quantiles must list 1 to {MAX_QUANTILES} levels, "
                                       "e.g. 0.5,0.95,0.99")
    levels = tuple(_number(item, "a quantile") for item in items)
    if not all(0 < q < 1 for q in levels):
        raise Problem("invalid-query", "every quantile must lie strictly between 0 and 1 "
                                       "(p95 is 0.95)")
    return levels


def _ranges(stored: StoredCampaign, raw: object) -> tuple[tuple[float, float], ...]:
    """``range=a:b`` (GET, repeatable) or ``"ranges": [[a, b], …]`` (or ``"a:b"`` strings)."""
    if not raw:
        return ()
    _distribution_only(stored, "ranges")
    if not isinstance(raw, list) or len(raw) > MAX_RANGES:
        raise Problem("invalid-query", f"ranges must be a list of at most {MAX_RANGES} [a, b]")
    out = []
    for item in raw:
        pair = item.split(":") if isinstance(item, str) else item
        if not isinstance(pair, list) or len(pair) != 2:
            raise Problem("invalid-query", f"a range is a:b (GET) or [a, b] (JSON), got "
                                           f"{str(item)!r:.40}")
        low, high = _number(pair[0], "a range's start"), _number(pair[1], "a range's end")
        if not low < high:
            raise Problem("invalid-query", f"a range needs a < b, got {low:g}:{high:g}")
        out.append((low, high))
    return tuple(out)


def series_query(stored: StoredCampaign, body: Any, limit: int) -> tuple[SeriesQuery, str]:
    """The series route's question: (query, format)."""
    source, lists = _source(body, {"start", "end", "step", "values", "top", "candidates",
                                   "format", "align"})
    step = source.get("step")
    if step == "":
        step = None  # the campaign's default: its periods if it has a schedule, else buckets
    if step is not None and (isinstance(step, bool) or not isinstance(step, str | int)):
        raise Problem("invalid-query", 'step must be "period", "bucket", "day", "week" or '
                                       'seconds')
    top = source.get("top")
    if isinstance(top, str):
        top = int(top) if _DIGITS.fullmatch(top) else -1
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise Problem("invalid-query", "top must be a whole number of at least 1")
    align = source.get("align") or "exact"
    if align not in ("exact", "outer"):
        raise Problem("invalid-query", "align must be exact (bounds on the time precision) or "
                                       "outer (bounds widened to whole points)")
    return SeriesQuery(start=_int_arg(source, "start"), end=_int_arg(source, "end"),
                       step=step, values=tuple(lists["values"]), top=top,
                       candidates=_candidates(stored, lists["candidates"], limit),
                       align=str(align)), response_format(source)


def compare_query(stored: StoredCampaign, body: Any, limit: int) -> tuple[CompareQuery, str]:
    """The comparison route's question: (query, format)."""
    source, lists = _source(body, {"baseline_start", "baseline_end", "start", "end",
                                   "candidates", "correction", "alpha", "format"})
    correction = source.get("correction") or "benjamini-hochberg"
    if not isinstance(correction, str):
        raise Problem("invalid-query", "correction must be benjamini-hochberg or bonferroni")
    alpha = source.get("alpha")
    if alpha is None or alpha == "":
        alpha = 0.05
    elif isinstance(alpha, str):
        try:
            alpha = float(alpha)
        except ValueError:
            alpha = math.nan
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) \
            or not 0 < alpha < 1:
        raise Problem("invalid-query", "alpha must be a number between 0 and 1")
    return CompareQuery(
        baseline=(_int_arg(source, "baseline_start"), _int_arg(source, "baseline_end")),
        current=(_int_arg(source, "start"), _int_arg(source, "end")),
        candidates=_candidates(stored, lists["candidates"], limit),
        correction=correction, alpha=float(alpha)), response_format(source)
