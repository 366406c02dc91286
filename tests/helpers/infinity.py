"""What Grafana and its Infinity data source (yesoreyeram-infinity-datasource) do with a query
of a provisioned dashboard, step by step, so a test can send the very request Grafana would
and read the answer into the frame Grafana would chart, without a Grafana server (none is
installable here).

Each step follows the plugin's documented behaviour and its source (grafana/
grafana-infinity-datasource, pkg/infinity/request.go and headers.go; grafana/infinity-libs,
lib/go/csvframer and gframer):

1. Grafana's frontend replaces the dashboard variables (``$name``, ``${name}``).
2. The plugin's backend replaces its time macros (``${__timeFrom:date:seconds}``: the time
   range's start in whole Unix seconds; ``${__timeFrom}``: milliseconds).
3. The URL is the data source's URL followed by the query's (unless it already starts with
   it), with the query's parameters added and encoded in key order (Go's url.Values).
4. Headers: ``Accept: text/csv; charset=utf-8`` for a CSV query, ``Accept-Encoding: gzip``,
   ``Authorization: Bearer <token>`` for the bearerToken method.
5. The CSV backend parser reads the body (lazy quotes), renames each header cell that a column
   selects to the column's alias, keeps only the selected columns, in the order of their
   names, and converts each cell by the column's type: ``number`` (a float, or null where it
   does not parse: an empty cell is null), ``timestamp_epoch_s`` (whole seconds, or null),
   ``string``.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["Frame", "InfinityRequest", "csv_frame", "expand_env", "request_for", "send"]

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
_TIME_MACRO = re.compile(r"\$\{__time(From|To)(?::date(?::(\w+))?)?\}")


def expand_env(text: str, environ: Mapping[str, str]) -> str:
    """Grafana's provisioning files: ``$NAME`` and ``${NAME}`` from its environment."""
    return _VARIABLE.sub(lambda m: environ.get(m.group(1) or m.group(2), ""), text)


def _template(text: str, variables: Mapping[str, str]) -> str:
    """Grafana's frontend interpolation of dashboard variables (the plugin's own ``__``
    macros are left for its backend)."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return variables[name] if name in variables else match.group(0)

    return _VARIABLE.sub(replace, text)


def _macros(text: str, start_ms: int, end_ms: int) -> str:
    """The plugin's backend time macros."""
    def replace(match: re.Match[str]) -> str:
        ms = start_ms if match.group(1) == "From" else end_ms
        if match.group(0).endswith(":date:seconds}"):
            return str(ms // 1000)
        if ":date" in match.group(0):  # ISO 8601, as the plugin's docs show
            return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds") \
                .replace("+00:00", "Z")
        return str(ms)

    return _TIME_MACRO.sub(replace, text)


@dataclass(frozen=True)
class InfinityRequest:
    method: str
    url: str
    headers: dict[str, str]


def request_for(query: Mapping[str, Any], datasource: Mapping[str, Any],
                variables: Mapping[str, str], time_range_ms: tuple[int, int]) -> InfinityRequest:
    """The request the plugin sends for ``query`` (a panel target or a variable's
    ``infinityQuery``) with the provisioned ``datasource`` (env already expanded)."""
    base = str(datasource.get("url", ""))
    url = _template(str(query["url"]), variables)
    url = _macros(url, *time_range_ms)
    if not url.startswith(base):
        url = base + url
    parts = urllib.parse.urlsplit(url)
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    options = query.get("url_options") or {}
    for param in options.get("params", []):
        value = _macros(_template(str(param["value"]), variables), *time_range_ms)
        pairs.append((str(param["key"]), value))
    pairs.sort(key=lambda pair: pair[0])  # url.Values.Encode sorts by key, stably
    url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(pairs)))
    headers = {"Accept-Encoding": "gzip"}
    if query.get("type") == "csv":
        headers["Accept"] = "text/csv; charset=utf-8"
    elif query.get("type") == "json":
        headers["Accept"] = "application/json;q=0.9,text/plain"
    json_data = datasource.get("jsonData") or {}
    if json_data.get("auth_method") == "bearerToken":
        headers["Authorization"] = f"Bearer {datasource['secureJsonData']['bearerToken']}"
    return InfinityRequest(str(options.get("method") or "GET").upper(), url, headers)


def send(request: InfinityRequest) -> tuple[int, str]:
    """(status, body as text), a gzip body decoded as the plugin decodes it."""
    outgoing = urllib.request.Request(request.url, method=request.method,
                                      headers=request.headers)
    try:
        with urllib.request.urlopen(outgoing, timeout=60) as reply:
            status, body, encoding = reply.status, reply.read(), reply.headers.get(
                "Content-Encoding", "")
    except urllib.error.HTTPError as error:
        with error:
            status, body, encoding = error.code, error.read(), error.headers.get(
                "Content-Encoding", "")
    if encoding.lower() == "gzip":
        body = gzip.decompress(body)
    return status, body.decode()


Frame = dict[str, list[Any]]  # field name → values, in the frame's field order


def csv_frame(text: str, columns: list[Mapping[str, str]]) -> Frame:
    """The plugin's CSV backend parser with ``columns`` selected: the frame Grafana charts."""
    records = list(csv.reader(io.StringIO(text, newline="")))
    header, rows = list(records[0]), records[1:]
    for index, cell in enumerate(header):
        for column in columns:
            if column["selector"] == cell and column.get("text"):
                header[index] = column["text"]
    items = [{name: row[i] for i, name in enumerate(header) if i < len(row)} for row in rows]
    frame: Frame = {}
    for key in sorted(header):
        for column in columns:
            if column.get("text") == key or (not column.get("text")
                                             and column["selector"] == key):
                frame[key] = [_convert(item.get(key), column["type"]) for item in items]
    return frame


def _convert(cell: str | None, kind: str) -> Any:
    if cell is None:
        return None
    if kind == "number":
        try:
            return float(cell)
        except ValueError:
            return None
    if kind == "timestamp_epoch_s":
        return int(cell) if re.fullmatch(r"[+-]?[0-9]+", cell) else None
    if kind == "string":
        return cell
    raise ValueError(f"column type {kind!r} is not modelled here")
