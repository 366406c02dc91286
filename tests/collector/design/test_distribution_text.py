"""One reader for the distribution a designer simulates: the CLI's one-line form and the
dashboard's one-per-line form are both accepted by both."""

from __future__ import annotations

from typing import Any

import pytest

from chorus_collector.design.distribution_text import DistributionTextError, parse_distribution

SHARES = {"chrome": 0.6, "safari": 0.25, "other": 0.15}


@pytest.mark.parametrize("text", [
    "chrome=0.6,safari=0.25,other=0.15",
    "chrome = 0.6, safari = 0.25, other = 0.15",
    "chrome = 0.6\nsafari = 0.25\nother = 0.15\n",
    "\n  chrome=0.6\r\n\nsafari=0.25\nother=0.15",
    '{"chrome": 0.6, "safari": 0.25, "other": 0.15}',
])
def test_categories_in_either_form(text: str) -> None:
    assert parse_distribution("categories", text) == SHARES


def test_a_name_with_a_comma_takes_the_line_form() -> None:
    assert parse_distribution("strings", "a, b = 0.5\nc = 0.5") == {"a, b": 0.5, "c": 0.5}


@pytest.mark.parametrize(("kind", "text", "expected"), [
    ("numeric", "1=0.2,5=0.8", {"values": [1.0, 5.0], "weights": [0.2, 0.8]}),
    ("numeric", "1 = 0.2\n5 = 0.8", {"values": [1.0, 5.0], "weights": [0.2, 0.8]}),
    ("numeric", "1,5", {"values": [1.0, 5.0]}),
    ("numeric", "1\n5", {"values": [1.0, 5.0]}),
    ("vector", "1:2=0.5,3:4=0.5", {"values": [[1.0, 2.0], [3.0, 4.0]], "weights": [0.5, 0.5]}),
    ("vector", "1 2 = 0.5\n3 4 = 0.5", {"values": [[1.0, 2.0], [3.0, 4.0]],
                                        "weights": [0.5, 0.5]}),
])
def test_numbers_and_vectors_in_either_form(kind: str, text: str, expected: Any) -> None:
    assert parse_distribution(kind, text) == expected


@pytest.mark.parametrize(("kind", "text", "message"), [
    ("categories", "chrome=lots", "cannot read 'chrome=lots': write chrome = 0.6 per line, "
                                  "or chrome=0.6,safari=0.4"),
    ("categories", "=0.5", "a share without a name"),
    ("categories", "  \n ", "nothing to read"),
    ("numeric", "1=0.2,5", "give a weight to every value, or to none"),
    ("vector", "1:x=0.5", "1 2 = 0.5, or 1:2=0.5,3:4=0.5"),
    ("categories", "{oops", "not JSON"),
    ("table", "a=1", "no distribution for kind 'table'"),
])
def test_what_cannot_be_read_says_how_to_write_it(kind: str, text: str, message: str) -> None:
    with pytest.raises(DistributionTextError, match=message.replace("(", r"\(")):
        parse_distribution(kind, text)
