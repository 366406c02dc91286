"""The designer page's form, read into the designer's request
(``chorus_collector.design.designer``):
the same fields the ``chorus design`` command and its JSON take. A plan over time (installs,
cadence, start, periods and the campaign's share of the lifetime budget) is optional; with it,
ε per report and the users per window may be left empty (the designer recommends the first
and derives the second)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from chorus_collector.design.distribution_text import DistributionTextError, parse_distribution
from chorus_collector.problems import Problem

__all__ = ["DEFAULTS", "PLAN_FIELDS", "design_request"]

DEFAULTS = {"kind": "categories", "categories": "chrome\nfirefox\nsafari\nedge\nother",
            "lo": "0", "hi": "1000", "dimensions": "3", "candidates": "100",
            "epsilon": "1", "users": "100000", "frequency": "0.1", "distribution": "",
            "time_precision": "3600", "installs": "", "cadence": "day", "start": "",
            "periods": "", "budget": "", "min_batch_size": ""}
#: The form's fields of a plan over time: any of them filled asks for one.
PLAN_FIELDS = ("installs", "start", "periods", "budget")
_SPLIT = re.compile(r"[\n,]")


def _number(values: Mapping[str, str], name: str, label: str) -> float:
    text = values.get(name, "").strip()
    try:
        return float(text)
    except ValueError:
        raise Problem("invalid-campaign", f"{label} must be a number, not {text!r}") from None


def _whole(values: Mapping[str, str], name: str, label: str) -> int:
    text = values.get(name, "").strip().replace("_", "").replace(",", "")
    if not text.isdigit():
        raise Problem("invalid-campaign", f"{label} must be a whole number, not {text!r}")
    return int(text)


def design_request(values: Mapping[str, str]) -> dict[str, Any]:
    """The designer's JSON request from the page's form (strings, as typed)."""
    kind = values.get("kind") or DEFAULTS["kind"]
    body: dict[str, Any] = {"kind": kind, "time_precision": _whole(values, "time_precision",
                                                                   "the time precision")}
    planned = any(values.get(name, "").strip() for name in PLAN_FIELDS)
    if planned:
        body["installs"] = _whole(values, "installs", "the number of installs")
        body["schedule"] = {"cadence": values.get("cadence") or "day",
                            "start": values.get("start", "").strip()}
        if values.get("periods", "").strip():
            body["schedule"]["periods"] = _whole(values, "periods", "the number of periods")
        body["privacy"] = {"budget": _number(values, "budget", "the campaign's share of the "
                                                               "lifetime budget")}
    if values.get("min_batch_size", "").strip():
        body["min_batch_size"] = _whole(values, "min_batch_size", "the fewest reports")
    if not planned or values.get("epsilon", "").strip():
        body["epsilon"] = _number(values, "epsilon", "ε")
    if not planned or values.get("users", "").strip():
        body["users"] = _whole(values, "users", "the number of users")
    if values.get("frequency", "").strip():
        body["frequency"] = _number(values, "frequency", "the frequency of interest")
    if kind == "categories":
        names = [n.strip() for n in _SPLIT.split(values.get("categories", "")) if n.strip()]
        if len(names) == 1 and names[0].isdigit():
            body["domain_size"] = int(names[0])
        else:
            body["categories"] = names
    elif kind in ("numeric", "vector"):
        body["lo"], body["hi"] = _number(values, "lo", "lo"), _number(values, "hi", "hi")
        if kind == "vector":
            body["dimensions"] = _whole(values, "dimensions", "the number of attributes")
    elif kind == "strings":
        body["candidates"] = _whole(values, "candidates", "the number of candidates")
    else:
        raise Problem("invalid-campaign", "kind must be categories, numeric, vector or strings")
    distribution = values.get("distribution", "").strip()
    if distribution:
        body["distribution"] = _distribution(kind, distribution)
    return body


def _distribution(kind: str, text: str) -> Any:
    """``name = share`` per line or ``chrome=0.6,safari=0.25`` on one (categories, strings),
    ``value = weight`` (numbers; a vector's numbers separated by spaces or colons): the CLI's
    reader too (``design.distribution_text``)."""
    try:
        return parse_distribution(kind, text)
    except DistributionTextError as error:
        raise Problem("invalid-campaign", f"the distribution: {error}") from None
