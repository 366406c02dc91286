"""Batches from the shuffler: recorded per campaign and time bucket, stated with estimates.

A request to ``/v1/reports`` with ``Authorization: Bearer <SHUFFLER_KEY>`` and
``Chorus-Shuffled-Batch: <n>`` is one shuffled batch. For each campaign and time bucket it
touches, the collector adds one batch of as many reports as it *newly* stored: a report it
already had (the shuffler retrying after a crash) was released before and hides nobody now.
Only per-bucket totals are kept (batches, reports, smallest batch), never a mark per report.

A shuffler with admission control (docs/shuffler.md) also sends
``Chorus-Shuffled-Senders: <s>``, the distinct admitted senders in the batch: it *vouches*
for that count, which a party without credentials (the collector, say) cannot inflate. The
collector keeps, per bucket, how many batches were vouched for and the smallest count.

An estimate over a window that holds shuffled reports gains a ``shuffling`` object: the
reports that came through the shuffler and those sent directly, the campaign's per-report ε₀
and the central (ε, δ) of :func:`central_privacy`, which covers the shuffled reports only. Its
n is the smallest vouched sender count when every batch of the window was vouched for. If any
was not, n is the smallest batch's *report* count, and the answer says plainly, in its notes
and in the central bound's assumptions, that the figure assumes no injected reports: anyone
who could post to that shuffler could have filled a batch and isolated one person's report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chorus_collector.ingest.shuffling import central_privacy
from chorus_collector.storage import Storage, StoredCampaign

__all__ = ["NO_INJECTION", "SHUFFLED_BATCH_HEADER", "SHUFFLED_SENDERS_HEADER", "ShuffledTotals",
           "read_shuffled", "shuffling_summary", "vouched_senders"]

# Sent by the shuffler with the size of its batch; echoed by the collector once recorded.
SHUFFLED_BATCH_HEADER = "Chorus-Shuffled-Batch"
# Sent by a shuffler with admission control: distinct admitted senders in the batch; echoed
# by the collector once recorded. Honoured only with the batch header and the shuffler key.
SHUFFLED_SENDERS_HEADER = "Chorus-Shuffled-Senders"

#: What an unvouched central figure rests on, said where the figure is (notes, assumptions).
NO_INJECTION = ("This central (ε, δ) assumes no injected reports: n counts the reports of the "
                "smallest batch, not distinct people, because a shuffler without admission "
                "control forwarded some of these batches. Anyone who can post to such a "
                "shuffler, the collector included, can fill a batch with n − 1 reports of its "
                "own and isolate one person's report, which then has only the local ε₀.")


@dataclass(frozen=True)
class ShuffledTotals:
    batches: int
    reports: int
    smallest: int | None  # the smallest batch in the window; None without any
    vouched_batches: int = 0  # batches whose sender count the shuffler vouched for
    smallest_senders: int | None = None  # the smallest vouched count; None without any

    @property
    def all_vouched(self) -> bool:
        return self.batches > 0 and self.vouched_batches == self.batches

    def central_n(self) -> int | None:
        """The n of the central bound: the smallest vouched sender count if every batch was
        vouched for; else the smallest of the report counts and the vouched sender counts (a
        vouched batch's senders never exceed its reports, so this is exact, not loose)."""
        if self.all_vouched:
            return self.smallest_senders
        counts = [c for c in (self.smallest, self.smallest_senders) if c is not None]
        return min(counts) if counts else None


def vouched_senders(new_reports_by_time: Mapping[int, int], senders: int | None,
                    size: int) -> dict[int, int] | None:
    """Per time bucket, the distinct senders vouched for among the reports newly stored there.

    The shuffler vouches for ``senders`` in the whole batch of ``size`` reports. If only some
    of them are new in a bucket (the rest duplicates, or in other buckets), the others can
    account for at most ``size − new`` of the senders: at least ``senders − (size − new)``
    remain, and at least one, as a new report has a sender. A lower bound, never a guess.
    """
    if senders is None:
        return None
    return {time: max(1, senders - (size - count))
            for time, count in new_reports_by_time.items()}


def read_shuffled(storage: Storage, campaign_id: int, start: int | None,
                  end: int | None) -> ShuffledTotals:
    """Shuffled batches of the buckets with start <= time < end."""
    return ShuffledTotals(*storage.shuffled_totals(campaign_id, start, end))


def shuffling_summary(storage: Storage, stored: StoredCampaign, n: int, start: int | None,
                      end: int | None) -> dict[str, Any] | None:
    """The ``shuffling`` object of an estimate over ``n`` reports, or None if none of them
    came through the shuffler."""
    totals = read_shuffled(storage, stored.id, start, end)
    central_n = totals.central_n()
    if totals.reports == 0 or central_n is None:
        return None
    epsilon0 = stored.campaign.epsilon
    direct = max(0, n - totals.reports)
    central = central_privacy(epsilon0, central_n)
    coverage = ("all reports in this window came through the shuffler" if direct == 0 else
                f"the central bound covers only the {totals.reports} reports that came through "
                f"the shuffler; the {direct} sent directly have the local ε₀ = {epsilon0:g} "
                "only")
    if totals.all_vouched:
        basis = "vouched-senders"
        notes = [f"central (ε, δ) at n = {central_n} distinct admitted senders, the fewest in "
                 "any batch of the window as the shuffler's admission control vouches for "
                 "them: larger batches are at least as private. It holds as long as the app's "
                 "backend issues credentials to real installs only", coverage]
    else:
        basis = "reports-assuming-no-injection"
        unvouched = totals.batches - totals.vouched_batches
        central["assumptions"] = [NO_INJECTION, *central["assumptions"]]
        notes = [f"{NO_INJECTION} ({unvouched} of {totals.batches} batches in this window "
                 "came without a sender count vouched for by the shuffler.)", coverage,
                 f"central (ε, δ) at n = {central_n}, the smallest batch: larger batches are at "
                 "least as private"]
    if stored.campaign.policy.unit == "day" or stored.campaign.policy.budget > epsilon0:
        notes.append("one install may send several reports of this campaign (its policy allows "
                     f"{stored.campaign.worst_case.reports_per_period} per "
                     f"{stored.campaign.policy.unit}): each batch is amplified on its own, and "
                     "the central losses of the batches one person is in add up")
    return {"reports_shuffled": totals.reports, "reports_direct": direct,
            "batches": totals.batches, "smallest_batch": totals.smallest,
            "vouched_batches": totals.vouched_batches,
            "smallest_senders": totals.smallest_senders, "n_basis": basis,
            "epsilon0": epsilon0, "central": central, "notes": notes}
