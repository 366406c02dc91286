"""Sortable tables (issue 35 #7): a column header is a link to the same page sorted by it, so
an order is part of the page's address and needs no script; the downloads and the API keep the
answer's own order."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from flask.testing import FlaskClient
from test_dashboard import seed, sign_in

SHARES = {"a": 5, "b": 1, "c": 3, "d": 2}  # of every 11 reports


@pytest.fixture
def signed_in(http: FlaskClient) -> FlaskClient:
    assert sign_in(http).status_code == 302
    return http


def _order(page: str, table: str) -> list[str]:
    body = page.split(f'id="{table}"')[1].split("</table>")[0]
    return re.findall(r'<tr[^>]* data-value="([^"]*)"', body)


def _link(page: str, label: str) -> str:
    match = re.search(rf'<a class="sort" href="([^"]*)">{label}', page)
    assert match is not None, label
    return html.unescape(match.group(1))


def test_headers_sort_the_estimates_and_keep_every_other_question(signed_in: FlaskClient,
                                                                  create: Any) -> None:
    config = create("survey", epsilon=4.0)
    pool = [v for v, k in SHARES.items() for _ in range(k)]
    seed(signed_in, config, lambda bucket, i: pool[i % len(pool)], buckets=2, per_bucket=550)
    page = signed_in.get("/campaigns/survey?step=day").get_data(as_text=True)
    assert _order(page, "estimates-table") == ["a", "b", "c", "d"]  # the answer's order
    link = _link(page, "Frequency")
    # The same page, every other question kept in the address.
    assert link == "/campaigns/survey?step=day&sort=-frequency"
    largest = signed_in.get(link).get_data(as_text=True)
    assert _order(largest, "estimates-table") == ["a", "c", "d", "b"]
    assert 'aria-sort="descending"' in largest
    smallest = signed_in.get(_link(largest, "Frequency"))
    assert _order(smallest.get_data(as_text=True), "estimates-table") == ["b", "d", "c", "a"]
    by_value = signed_in.get("/campaigns/survey?sort=-value").get_data(as_text=True)
    assert _order(by_value, "estimates-table") == ["d", "c", "b", "a"]
    csv = signed_in.get("/campaigns/survey/download/estimates.csv?sort=-frequency")
    assert [line.split(",")[0] for line in csv.get_data(as_text=True).splitlines()[1:5]] == \
        ["a", "b", "c", "d"]  # downloads are the API's answer, in its order
    wrong = signed_in.get("/campaigns/survey?sort=colour")
    assert wrong.status_code == 400 and "sort must be one of value, frequency, std_error, " \
        "count" in wrong.get_data(as_text=True)


def test_the_comparison_sorts_by_its_own_columns(signed_in: FlaskClient, create: Any) -> None:
    config = create("survey", epsilon=4.0)
    pool = [v for v, k in SHARES.items() for _ in range(k)]
    seed(signed_in, config, lambda bucket, i: pool[(i + 3 * bucket) % len(pool)], buckets=4,
         per_bucket=440)
    page = signed_in.get("/campaigns/survey?csort=adjusted_p").get_data(as_text=True)
    body = page.split('id="comparison-table"')[1].split("</table>")[0]
    shown = [float(p) for p in re.findall(
        r'<td class="num">[^<]*</td><td class="num">([\d.e-]+)</td>\s*<td>', body)]
    assert shown == sorted(shown) and len(shown) == 4
    assert 'aria-sort="ascending"' in page
