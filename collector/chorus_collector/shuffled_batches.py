"""Batches from the shuffler: recorded per campaign and time bucket, stated with estimates.

A request to ``/v1/reports`` with ``Authorization: Bearer <SHUFFLER_KEY>`` and
``Chorus-Shuffled-Batch: <n>`` is one shuffled batch. For each campaign and time bucket it
touches, the collector adds one batch of as many reports as it *newly* stored: a report it
already had (the shuffler retrying after a crash) was released before and hides nobody now.
Only per-bucket totals are kept (batches, reports, smallest batch), never a mark per report.

An estimate over a window that holds shuffled reports gains a ``shuffling`` object: the
reports that came through the shuffler and those sent directly, the smallest batch n, the
campaign's per-report ε₀ and the central (ε, δ) of :func:`central_privacy` at (ε₀, n), which
covers the shuffled reports only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chorus_collector.shuffling import central_privacy
from chorus_collector.storage import Storage, StoredCampaign

__all__ = ["SHUFFLED_BATCH_HEADER", "ShuffledTotals", "read_shuffled", "shuffling_summary"]

# Sent by the shuffler with the size of its batch; echoed by the collector once recorded.
SHUFFLED_BATCH_HEADER = "Chorus-Shuffled-Batch"


@dataclass(frozen=True)
class ShuffledTotals:
    batches: int
    reports: int
    smallest: int | None  # the smallest batch in the window; None without any


def read_shuffled(storage: Storage, campaign_id: int, start: int | None,
                  end: int | None) -> ShuffledTotals:
    """Shuffled batches of the buckets with start <= time < end."""
    return ShuffledTotals(*storage.shuffled_totals(campaign_id, start, end))


def shuffling_summary(storage: Storage, stored: StoredCampaign, n: int, start: int | None,
                      end: int | None) -> dict[str, Any] | None:
    """The ``shuffling`` object of an estimate over ``n`` reports, or None if none of them
    came through the shuffler."""
    totals = read_shuffled(storage, stored.id, start, end)
    if totals.reports == 0 or totals.smallest is None:
        return None
    epsilon0 = stored.campaign.epsilon
    direct = max(0, n - totals.reports)
    central = central_privacy(epsilon0, totals.smallest)
    coverage = ("all reports in this window came through the shuffler" if direct == 0 else
                f"the central bound covers only the {totals.reports} reports that came through "
                f"the shuffler; the {direct} sent directly have the local ε₀ = {epsilon0:g} "
                "only")
    notes = [coverage, f"central (ε, δ) at the smallest batch, n = {totals.smallest}: larger "
                       "batches are at least as private"]
    if stored.campaign.policy.unit == "day" or stored.campaign.policy.budget > epsilon0:
        notes.append("one install may send several reports of this campaign (its policy allows "
                     f"{stored.campaign.worst_case.reports_per_period} per "
                     f"{stored.campaign.policy.unit}): each batch is amplified on its own, and "
                     "the central losses of the batches one person is in add up")
    return {"reports_shuffled": totals.reports, "reports_direct": direct,
            "batches": totals.batches, "smallest_batch": totals.smallest,
            "epsilon0": epsilon0, "central": central, "notes": notes}
