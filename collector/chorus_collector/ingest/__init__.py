"""Ingest: validating reports against their campaign and appending them to storage.

* ``reports``: one request's reports, validated, deduplicated by report ID and appended in
  one transaction (the acknowledgement is the commit);
* ``shuffled_batches``: batches from the shuffler, recorded per campaign and bucket, and the
  central (ε, δ) they are stated with (``shuffling``: the amplification bound);
* ``rappor_compat``: reports and parameters from google/rappor's files.
"""

from __future__ import annotations

# What chorus_collector.ingest exported when it was one module.
from chorus_collector.ingest.reports import ReportStatus, batch_answer, ingest_reports

__all__ = ["ReportStatus", "batch_answer", "ingest_reports"]
