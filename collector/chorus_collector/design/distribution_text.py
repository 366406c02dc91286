"""The distribution a designer simulates, as people type it: one reader for the CLI's
``--distribution`` and the dashboard's text box, so that either accepts what the other's
help shows.

* ``chrome = 0.6`` per line, or ``chrome=0.6,safari=0.25`` on one line (a name that holds a
  comma needs the line form), for categories and strings;
* ``value = weight`` (weights optional: equal), per line or comma-separated, for numbers;
* a vector's numbers separated by spaces or colons: ``1 2 = 0.5`` or ``1:2=0.5``;
* or the JSON the designer's API takes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DistributionTextError", "parse_distribution"]

EXAMPLES = {"categories": "chrome = 0.6 per line, or chrome=0.6,safari=0.4",
            "strings": "example.com = 0.6 per line, or a=0.6,b=0.4",
            "numeric": "value = weight per line (weights optional), or 1=0.2,5=0.8",
            "vector": "the numbers of a value separated by spaces or colons, then = weight: "
                      "1 2 = 0.5, or 1:2=0.5,3:4=0.5"}


class DistributionTextError(ValueError):
    """The text cannot be read; the message says how to write it."""


def _entries(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1:  # one line: entries separated by commas
        return [part.strip() for part in lines[0].split(",") if part.strip()]
    return lines


def parse_distribution(kind: str, text: str) -> Any:
    """The designer's ``distribution`` for a campaign of ``kind`` (categories, strings,
    numeric or vector)."""
    if kind not in EXAMPLES:
        raise DistributionTextError(f"no distribution for kind {kind!r}")
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError as error:
            raise DistributionTextError(f"not JSON: {error}") from None
    pairs = []
    for entry in _entries(text):
        left, sep, right = entry.rpartition("=")
        pairs.append((left.strip(), right.strip()) if sep else (entry, ""))
    if not pairs:
        raise DistributionTextError(f"nothing to read: write {EXAMPLES[kind]}")
    if kind in ("categories", "strings"):
        shares: dict[str, float] = {}
        for name, share in pairs:
            try:
                shares[name] = float(share)
            except ValueError:
                raise DistributionTextError(
                    f"cannot read {name + ('=' + share if share else '')!r}: write "
                    f"{EXAMPLES[kind]}") from None
            if not name:
                raise DistributionTextError(f"a share without a name: write {EXAMPLES[kind]}")
        return shares
    try:
        points: list[Any] = [
            [float(x) for x in value.replace(":", " ").split()] if kind == "vector"
            else float(value) for value, _ in pairs]
        weights = [float(weight) for _, weight in pairs if weight]
    except ValueError:
        raise DistributionTextError(f"cannot read {text.strip()!r}: write "
                                    f"{EXAMPLES[kind]}") from None
    body: dict[str, Any] = {"values": points}
    if weights:
        if len(weights) != len(points):
            raise DistributionTextError("give a weight to every value, or to none")
        body["weights"] = weights
    return body
