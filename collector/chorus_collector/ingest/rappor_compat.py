"""Reading google/rappor's files, so data from existing RAPPOR clients can be decoded.

* Parameters: its CSV ``k,h,m,p,q,f`` (one row) becomes a Chorus campaign definition with
  ``hash = "google-md5"`` (its Bloom hashing). Its Python client quantises f to multiples of
  1/128, rounding up (``(byte >> 1) < f·128`` over a 7-bit draw), so the campaign uses that
  effective f: the decoding and the ε it states are those of the reports actually made.
* Reports: its client report CSV ``client,cohort,bloom,prr,irr`` (bit strings written most
  significant bit first, as ``tests/rappor_sim.py`` does and ``sum_bits.py`` reads) becomes
  Chorus reports carrying only the cohort and the IRR. A report ID is derived from what
  identifies the report (campaign, client, cohort, report bits, time bucket) and how many
  equal rows came before it in the file, never from its line: importing the same file twice
  (into the same time bucket), or in another order, counts it once; two equal rows in one
  file are two reports (a client that sends several reports an hour repeats its bits: with
  google/rappor's 8 bits, 128 cohorts and 10 reports a client, 1.9% of the rows); and the
  next day's file with the same client names makes new reports. The first of equal rows
  keeps the ID it had before the occurrence counted, so re-importing a file imported then
  (into the same time bucket) adds exactly the rows it dropped.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from chorus_shared.campaign import Campaign
from chorus_shared.errors import ChorusError
from chorus_shared.mechanisms import Rappor
from chorus_shared.wire import Report

__all__ = ["CompatError", "reports_from_google_csv", "spec_from_google_params"]


class CompatError(ChorusError, ValueError):
    """A google/rappor file does not have the expected shape."""


def spec_from_google_params(text: str, name: str, **fields: Any) -> dict[str, Any]:
    """A campaign definition from google/rappor's ``k,h,m,p,q,f`` parameter CSV."""
    rows = [row for row in csv.reader(io.StringIO(text)) if row]
    header = [cell.strip() for cell in rows[0]] if rows else []
    if header != ["k", "h", "m", "p", "q", "f"] or len(rows) != 2:
        raise CompatError("expected a header 'k,h,m,p,q,f' and one row of values")
    try:
        k, h, m = (int(rows[1][i]) for i in range(3))
        p, q, f = (float(rows[1][i]) for i in range(3, 6))
    except (ValueError, IndexError):
        raise CompatError("k, h, m must be integers and p, q, f numbers") from None
    for label, value in (("p", p), ("q", q), ("f", f)):
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise CompatError(f"{label} must be a probability in [0, 1], got {value}")
    effective_f = math.ceil(f * 128) / 128
    return {
        "name": name, "mechanism": "rappor", "domain": {"kind": "strings"},
        "params": {"k": k, "h": h, "m": m, "p": p, "q": q, "f": effective_f,
                   "hash": "google-md5"},
        "description": f"imported from google/rappor parameters (f = {f} quantised to "
                       f"{effective_f})",
        **fields,
    }


def reports_from_google_csv(lines: Iterable[str], campaign: Campaign,
                            time: int) -> Iterator[dict[str, Any]]:
    """Chorus reports from google/rappor's ``client,cohort,bloom,prr,irr`` report CSV."""
    mechanism = campaign.mechanism
    if not isinstance(mechanism, Rappor) or mechanism.hash != "google-md5":
        raise CompatError(f"campaign {campaign.name!r} is not a google-md5 RAPPOR campaign")
    reader = csv.reader(lines)
    header = [cell.strip() for cell in next(reader, [])]
    if header[:2] != ["client", "cohort"] or header[-1] != "irr":
        raise CompatError("expected a header 'client,cohort,...,irr'")
    seen: Counter[tuple[str, int, str]] = Counter()  # equal rows so far
    for number, row in enumerate(reader, start=2):
        if not row:
            continue
        client, cohort_text, irr = row[0], row[1].strip(), row[-1].strip()
        if len(irr) != mechanism.k or set(irr) - {"0", "1"}:
            raise CompatError(f"line {number}: irr must be {mechanism.k} characters of 0/1")
        try:
            cohort = int(cohort_text)
        except ValueError:
            raise CompatError(f"line {number}: cohort must be an integer") from None
        if not 0 <= cohort < mechanism.m:
            raise CompatError(f"line {number}: cohort {cohort} is outside [0, {mechanism.m})")
        occurrence = seen[client, cohort, irr]
        seen[client, cohort, irr] += 1
        identity = f"{campaign.digest}\n{client}\n{cohort}\n{irr}\n{time}"
        if occurrence:  # the first keeps its earlier ID (see the module's docstring)
            identity += f"\n{occurrence}"
        # The first character is the most significant bit: int(irr, 2) gives bit i = 1 << i.
        payload = {"cohort": cohort, "bits": mechanism.bits_to_hex(int(irr, 2))}
        yield Report(report_id=hashlib.sha256(identity.encode()).hexdigest()[:32],
                     digest=campaign.digest, time=time, payload=payload).to_json()
