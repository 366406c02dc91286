"""Decoding reports made by google/rappor's clients (compatibility mode).

The encoder below follows google/rappor's Python client as documented
(``client/python/rappor.py``): MD5 Bloom bits over the 4-byte big-endian cohort and the word,
the PRR from HMAC-SHA256(secret, 4-byte big-endian Bloom integer) with f quantised to 1/128,
and a fresh IRR. Its reports go through the import path and Chorus's decoder.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask

from chorus_client.api import CollectorAPI
from chorus_collector.cli import main as cli
from chorus_collector.ingest.rappor_compat import (
    CompatError,
    reports_from_google_csv,
    spec_from_google_params,
)
from chorus_collector.server.process import CollectorProcess
from chorus_shared import Campaign, campaign_from_spec
from chorus_shared.hashing import google_bloom_bits
from helpers.support import ADMIN, ADMIN_HEADERS, ANALYST, ANALYST_HEADERS, NOW

PARAMS_CSV = "k,h,m,p,q,f\n16,2,8,0.25,0.75,0.5\n"
WORDS = [f"word-{i}" for i in range(8)]


def google_encode(word: str, cohort: int, secret: bytes, k: int, h: int, p: float, q: float,
                  f: float, rng: random.Random) -> tuple[int, int, int]:
    digest = hashlib.md5(struct.pack(">L", cohort) + word.encode()).digest()
    bloom = 0
    for i in range(h):
        bloom |= 1 << (digest[i] % k)
    prr_digest = hmac.new(secret, struct.pack(">L", bloom), hashlib.sha256).digest()
    uniform = f_mask = 0
    for i in range(k):
        byte = prr_digest[i]
        uniform |= (byte & 0x01) << i
        f_mask |= int((byte >> 1) < f * 128) << i
    prr = (bloom & ~f_mask) | (uniform & f_mask)
    p_bits = sum(int(rng.random() < p) << i for i in range(k))
    q_bits = sum(int(rng.random() < q) << i for i in range(k))
    irr = (p_bits & ~prr) | (q_bits & prr)
    return bloom, prr, irr


def bit_string(value: int, k: int) -> str:
    return format(value, f"0{k}b")  # most significant bit first, as rappor_sim.py writes


def test_google_bloom_bits_match_the_reference() -> None:
    for word in WORDS:
        for cohort in range(8):
            digest = hashlib.md5(struct.pack(">L", cohort) + word.encode()).digest()
            assert google_bloom_bits(word, cohort, 16, 2) == (digest[0] % 16, digest[1] % 16)


def test_params_csv_becomes_a_campaign_with_the_effective_f() -> None:
    spec = spec_from_google_params("k,h,m,p,q,f\n16,2,64,0.5,0.75,0.1\n", "legacy")
    assert spec["params"]["f"] == 13 / 128  # 0.1·128 = 12.8, rounded up
    campaign = campaign_from_spec(spec)
    assert campaign.mechanism.hash == "google-md5"
    with pytest.raises(CompatError):
        spec_from_google_params("a,b\n1,2\n", "x")
    with pytest.raises(Exception, match="k must be an integer"):
        campaign_from_spec(spec_from_google_params("k,h,m,p,q,f\n512,2,64,0.5,0.75,0.1\n",
                                                   "x"))


def test_reports_from_google_clients_decode_within_four_standard_errors(
        make_app: Callable[..., Flask], tmp_path: Path) -> None:
    app = make_app()
    http = app.test_client()
    spec = {**spec_from_google_params(PARAMS_CSV, "legacy"), "min_batch_size": 1}
    config = http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
    campaign = campaign_from_spec(spec)
    mechanism = campaign.mechanism
    rng = random.Random(12)
    weights = [8, 6, 5, 4, 3, 2, 1, 1]
    rows, truth = ["client,cohort,bloom,prr,irr"], Counter()
    for i in range(12_000):
        word = rng.choices(WORDS, weights)[0]
        truth[word] += 1
        cohort = i % mechanism.m
        bloom, prr, irr = google_encode(word, cohort, f"client-{i}".encode(), mechanism.k,
                                        mechanism.h, mechanism.p, mechanism.q, mechanism.f,
                                        rng)
        rows.append(f"client-{i},{cohort},{bit_string(bloom, 16)},{bit_string(prr, 16)},"
                    f"{bit_string(irr, 16)}")
    reports = list(reports_from_google_csv(rows, campaign, int(NOW)))
    for start in range(0, len(reports), 2000):
        body = http.post("/v1/reports", json={"reports": reports[start:start + 2000]})
        assert body.get_json()["accepted"] == len(reports[start:start + 2000])
    again = http.post("/v1/reports", json={"reports": reports[:10]}).get_json()
    assert again["duplicate"] == 10  # importing the same file twice counts it once
    result = http.post("/v1/campaigns/legacy/estimates", json={"candidates": WORDS},
                       headers=ANALYST_HEADERS).get_json()
    assert config["digest"] == campaign.digest
    assert result["n"] == 12_000
    for row in result["rows"]:
        assert abs(row["frequency"] - truth[row["value"]] / 12_000) <= 4 * row[
            "frequency_std_error"], row


def test_bad_report_files_are_refused_with_the_line() -> None:
    campaign = campaign_from_spec(spec_from_google_params(PARAMS_CSV, "legacy"))
    with pytest.raises(CompatError, match="line 2"):
        list(reports_from_google_csv(["client,cohort,bloom,prr,irr", "c,0,,,0101"], campaign,
                                     0))
    with pytest.raises(CompatError, match="header"):
        list(reports_from_google_csv(["a,b"], campaign, 0))
    other = campaign_from_spec({"name": "x", "mechanism": "rappor", "epsilon": 1.0,
                                "domain": {"kind": "strings"}})
    with pytest.raises(CompatError, match="google-md5"):
        list(reports_from_google_csv(["client,cohort,irr"], other, 0))


def test_cli_prints_the_campaign_for_a_params_file(tmp_path: Path) -> None:
    params = tmp_path / "params.csv"
    params.write_text(PARAMS_CSV)
    result = CliRunner().invoke(cli, ["rappor", "params", str(params), "--name", "legacy"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["params"]["hash"] == "google-md5"


def _google_rows(order: range | list[int]) -> list[str]:
    rows = [f"c{i},{i % 4},,,{format(i * 2654435761 % 65536, '016b')}" for i in order]
    return ["client,cohort,bloom,prr,irr", *rows]


def test_report_ids_come_from_the_report_not_its_line() -> None:
    """Regression (issue 13 #8): IDs came from the line number, so the same reports in
    another order were counted again, and the next day's file (same client names) was
    refused as thousands of conflicts."""
    campaign = campaign_from_spec(spec_from_google_params(PARAMS_CSV, "legacy"))
    forward = list(reports_from_google_csv(_google_rows(range(40)), campaign, 3600))
    backward = list(reports_from_google_csv(_google_rows(list(reversed(range(40)))),
                                            campaign, 3600))
    assert {r["report_id"] for r in forward} == {r["report_id"] for r in backward}
    assert len({r["report_id"] for r in forward}) == 40
    next_day = list(reports_from_google_csv(_google_rows(range(40)), campaign,
                                            3600 + 86400))
    assert not {r["report_id"] for r in forward} & {r["report_id"] for r in next_day}


@pytest.mark.parametrize("f", ["nan", "inf", "-0.5", "1.5"])
def test_params_that_are_not_probabilities_are_refused_in_one_line(tmp_path: Path,
                                                                  f: str) -> None:
    params = tmp_path / "params.csv"
    params.write_text(f"k,h,m,p,q,f\n16,2,4,0.25,0.75,{f}\n")
    result = CliRunner().invoke(cli, ["rappor", "params", str(params), "--name", "legacy"])
    assert result.exit_code != 0
    assert "f must be a probability in [0, 1]" in result.output
    assert "Traceback" not in result.output


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path: Path) -> None:
    params = tmp_path / "params.csv"
    params.write_bytes(b"\xef\xbb\xbf" + PARAMS_CSV.encode())
    result = CliRunner().invoke(cli, ["rappor", "params", str(params), "--name", "legacy"])
    assert result.exit_code == 0, result.output


def test_equal_rows_in_one_file_are_separate_reports_counted_once_per_import() -> None:
    """Regression (issue 33 #6): a client that sends two reports with the same bits in one
    time bucket made one ID, and the second was counted a duplicate (dropped)."""
    campaign = campaign_from_spec(spec_from_google_params(PARAMS_CSV, "legacy"))
    rows = _google_rows(range(6))
    twice = [rows[0], rows[1], rows[2], rows[1], rows[3], rows[1], rows[2]]
    ids = [r["report_id"] for r in reports_from_google_csv(twice, campaign, 3600)]
    assert len(ids) == len(set(ids)) == 6  # c0 three times and c1 twice: all of them count
    reordered = [twice[0], *reversed(twice[1:])]
    assert {r["report_id"] for r in reports_from_google_csv(reordered, campaign, 3600)} \
        == set(ids)  # the same file in another order is the same reports
    # The first of equal rows keeps the ID it had before occurrences counted, so a file
    # imported then and again now adds exactly the rows that were dropped.
    client, cohort, irr = "c0", 0, rows[1].rsplit(",", 1)[1]
    before = hashlib.sha256(f"{campaign.digest}\n{client}\n{cohort}\n{irr}\n3600".encode())
    assert ids[0] == before.hexdigest()[:32]


def google_simulation(rng: random.Random, campaign: Campaign, clients: int,
                      reports_per_client: int) -> tuple[list[str], Counter[str]]:
    """Rows as google/rappor's simulation writes them: each client in one cohort, with a
    secret of its own, reports ``reports_per_client`` values drawn from a Zipf-like
    distribution over 100 values (the PRR memoized per value, a fresh IRR each time)."""
    mechanism = campaign.mechanism
    values = [f"v{i}" for i in range(1, 101)]
    weights = [1 / i for i in range(1, 101)]
    rows, truth = ["client,cohort,bloom,prr,irr"], Counter[str]()
    for client in range(clients):
        cohort = client % mechanism.m
        for value in rng.choices(values, weights, k=reports_per_client):
            truth[value] += 1
            bloom, prr, irr = google_encode(value, cohort, f"secret-{client}".encode(),
                                            mechanism.k, mechanism.h, mechanism.p,
                                            mechanism.q, mechanism.f, rng)
            rows.append(f"client-{client},{cohort},{bit_string(bloom, mechanism.k)},"
                        f"{bit_string(prr, mechanism.k)},{bit_string(irr, mechanism.k)}")
    return rows, truth


@pytest.mark.slow
def test_an_import_of_googles_simulation_drops_nothing_and_a_second_adds_nothing(
        database: str, tmp_path: Path) -> None:
    """google/rappor's regression setting (tests/regtest_spec.py): 8 Bloom bits, 2 hashes,
    128 cohorts, eps_1_1 (p = 0.39, q = 0.61, f = 0.45) and, as in its demo, 10 reports a
    client. Through ``chorus rappor import`` into a real server on the suite's backend."""
    params = tmp_path / "params.csv"
    params.write_text("k,h,m,p,q,f\n8,2,128,0.39,0.61,0.45\n")
    runner = CliRunner()
    spec = json.loads(runner.invoke(cli, ["rappor", "params", str(params), "--name",
                                          "sim"]).output)
    campaign = campaign_from_spec(spec)
    rows, truth = google_simulation(random.Random(33), campaign, 2000, 10)
    reports = tmp_path / "reports.csv"
    reports.write_text("\n".join(rows) + "\n")
    repeats = Counter(row.split(",", 2)[0] + "," + row.rsplit(",", 1)[1] for row in rows[1:])
    dropped_before = sum(n - 1 for n in repeats.values())
    assert dropped_before > 100  # what one ID per (client, bits, hour) used to drop
    with CollectorProcess(database, settings={"ADMIN_TOKEN": ADMIN,
                                              "ANALYST_TOKEN": ANALYST}) as server:
        CollectorAPI(server.url, ADMIN).create_campaign({**spec, "min_batch_size": 1})
        env = {"CHORUS_URL": server.url}
        first = runner.invoke(cli, ["rappor", "import", "sim", str(reports)], env=env)
        assert first.exit_code == 0, first.output
        assert first.output.strip().endswith("20000 accepted, 0 duplicate, 0 rejected")
        again = runner.invoke(cli, ["rappor", "import", "sim", str(reports)], env=env)
        assert again.exit_code == 0, again.output
        assert again.output.strip().endswith("0 accepted, 20000 duplicate, 0 rejected")
        counted = CollectorAPI(server.url, ANALYST).estimates("sim", candidates=["v1"])
    assert counted["n"] == 20_000 == sum(truth.values())
