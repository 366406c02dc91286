"""How answers are encoded: CSV that a spreadsheet cannot run, and JSON without NaN.

Every answer type renders through these, so the rules hold for all of them: a text cell
that starts like a formula is defused, missing values are empty (CSV) or null (JSON), and
each CSV row ends with the window and n the numbers are of.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["CONTEXT_COLUMNS", "CsvWriter", "context_values", "finite_or_none", "json_safe"]

# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, CSV injection):
# a label or candidate string is one the reports' senders may have chosen.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class CsvWriter:
    """RFC 4180 CSV (CRLF rows, so a CR or LF inside a field is quoted) whose text cells can
    never run as formulas: one that starts like a formula gets a leading apostrophe. Numbers
    stay numbers, booleans are ``true``/``false``, missing values (None, NaN) are empty."""

    def __init__(self, buffer: io.StringIO) -> None:
        self._writer = csv.writer(buffer, lineterminator="\r\n")

    def writerow(self, cells: Sequence[object]) -> None:
        self._writer.writerow([_cell(cell) for cell in cells])


def _cell(value: object) -> object:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""  # missing, as in the JSON answer's null
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


#: The columns that end every CSV row: what window and how many reports the numbers are of.
CONTEXT_COLUMNS = ("window_start", "window_end", "n", "epsilon")


def context_values(window: dict[str, int | None], n: int,
             epsilon: float) -> tuple[int | None, int | None, int, float]:
    """The values of ``CONTEXT_COLUMNS``."""
    return window.get("start"), window.get("end"), n, epsilon


def finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def json_safe(obj: Any) -> Any:
    """JSON has no NaN or infinity: map them to null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [json_safe(v) for v in obj]
    return obj
