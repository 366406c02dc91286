"""Noise explained where it shows (issue 35 #9): an unbiased estimate outside what the quantity
can be is shown at the nearest possible value, starred, with the unbiased figure on hover and
one line on why; the chart's data, the downloads and the API keep the unbiased figures."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from flask.testing import FlaskClient
from test_dashboard import bars, seed, sign_in

from helpers.support import ADMIN_HEADERS, ANALYST_HEADERS

_CLIPPED = re.compile(r'<span class="clipped" title="unbiased estimate: ([^"]+)">'
                      r'([^<]+)\*</span>')


@pytest.fixture
def signed_in(http: FlaskClient) -> FlaskClient:
    assert sign_in(http).status_code == 302
    return http


def _table(page: str, table_id: str) -> str:
    return page.split(f'id="{table_id}"')[1].split("</table>")[0]


def test_shares_below_zero_show_as_zero_starred_and_the_api_keeps_them(
        signed_in: FlaskClient, create: Any) -> None:
    config = create("skewed", domain=["a", "b", "c", "d", "e", "f"], epsilon=0.5)
    seed(signed_in, config, lambda bucket, i: "a", buckets=1, per_bucket=400)
    api = signed_in.get("/v1/campaigns/skewed/estimates", headers=ANALYST_HEADERS).get_json()
    negative = [row for row in api["rows"] if row["frequency"] < 0]
    assert negative, "the seed should leave some unbiased shares below 0"
    page = signed_in.get("/campaigns/skewed").get_data(as_text=True)
    table = _table(page, "estimates-table")
    starred = _CLIPPED.findall(table)
    # Each negative share shows as 0 starred, its unbiased figure on hover; its count as 0.
    for row in negative:
        assert (f"{row['frequency']:.4g}", "0") in starred
        assert (f"{row['count']:.6g}", "0") in starred
    assert all(float(shown) in (0.0, 1.0) for _, shown in starred)
    note = page.split('id="estimates-noise"')[1].split("</p>")[0]
    assert "every estimate here is unbiased" in note and "the API keep" in note
    # The chart's data and the API are the unbiased figures, bit for bit.
    for row in api["rows"]:
        assert bars(page.split('id="series"')[0])[row["value"]] == (
            row["frequency"], row["frequency_ci_low"], row["frequency_ci_high"])
    csv = signed_in.get("/campaigns/skewed/download/estimates.csv").get_data(as_text=True)
    assert f"{negative[0]['frequency']!r}"[:8] in csv


def test_a_page_with_nothing_outside_the_bounds_has_no_note(signed_in: FlaskClient,
                                                            create: Any) -> None:
    config = create("even", domain=["a", "b"], epsilon=4.0)
    seed(signed_in, config, lambda bucket, i: "ab"[i % 2], buckets=1, per_bucket=400)
    page = signed_in.get("/campaigns/even").get_data(as_text=True)
    assert 'class="clipped"' not in page and "noise-note" not in page
    counts = re.findall(r'<span title="unbiased estimate: ([^"]+)">([\d,]+)</span>',
                        _table(page, "estimates-table"))
    assert len(counts) == 2 and all(  # whole counts shown, the unbiased one on hover
        f"{round(float(unbiased)):,}" == shown for unbiased, shown in counts)
    assert html.escape("*") not in _table(page, "estimates-table")


def test_record_shares_past_their_bounds_show_clipped(signed_in: FlaskClient) -> None:
    """Every crash report says "no": unbiased marginals and conditionals of crashed=yes fall
    below 0 (and "no" above 1) in some cells; the record page clips each, starred, with the
    unbiased figure on hover, and the API keeps them."""
    domain = {"kind": "record", "attributes": [
        {"name": "browser", "values": ["chrome", "safari"]},
        {"name": "crashed", "values": ["no", "yes"]}]}
    spec = {"name": "crashes", "mechanism": "marginals", "epsilon": 1.0, "domain": domain,
            "min_batch_size": 1, "privacy": {"budget": 1e6, "max_reports": 1_000_000}}
    reply = signed_in.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS)
    assert reply.status_code == 201, reply.get_json()
    seed(signed_in, reply.get_json(), lambda bucket, i: {
        "browser": "chrome" if i % 3 else "safari", "crashed": "no"}, buckets=1,
        per_bucket=600)
    api = signed_in.get("/v1/campaigns/crashes/estimates",
                        headers=ANALYST_HEADERS).get_json()
    shares = [row[key] for m in api["marginals"] for row in m["rows"]
              for key in ("frequency", "ci_low", "ci_high")]
    outside = [x for x in shares if not 0 <= x <= 1]
    assert outside, "some marginal figure should fall outside [0, 1]"
    page = signed_in.get("/campaigns/crashes").get_data(as_text=True)
    starred = {float(unbiased) for unbiased, _ in _CLIPPED.findall(page)}
    assert {float(f"{x:.4g}") for x in outside} <= starred
    assert 'id="marginals-noise"' in page
