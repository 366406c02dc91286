"""What waits in the outbox, and when it may leave: :meth:`Client.waiting`.

A report leaves once the time bucket it was made in has ended, at a random moment of the next
window (``send_delay``), so that when it leaves says nothing about when in its bucket it was
made. With daily buckets a new app's first report therefore leaves hours later; this module
says so in words, so that a developer does not take a full outbox for a broken client.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["CampaignWaiting", "Waiting", "utc_time"]


def utc_time(moment: float, now: float) -> str:
    """``14:00 UTC`` within a day of ``now``, ``2026-12-03 14:00 UTC`` further away."""
    stamp = time.gmtime(moment)
    if abs(moment - now) < 86400:
        return time.strftime("%H:%M UTC", stamp)
    return time.strftime("%Y-%m-%d %H:%M UTC", stamp)


@dataclass(frozen=True)
class CampaignWaiting:
    """One campaign's queued reports."""

    reports: int
    first_due: float  # Unix time when the earliest may leave
    last_due: float


@dataclass(frozen=True)
class Waiting:
    """The outbox: reports made (their ε spent) and not yet acknowledged by the collector.

    ``held_until``: the collector asked to wait (``Retry-After``) or could not be reached, so
    nothing is sent before this Unix time whatever is due.
    """

    now: float
    campaigns: Mapping[str, CampaignWaiting] = field(default_factory=dict)
    held_until: float | None = None

    @property
    def reports(self) -> int:
        return sum(c.reports for c in self.campaigns.values())

    @property
    def next_due(self) -> float | None:
        """When the earliest report may leave (None: nothing waits)."""
        return min((c.first_due for c in self.campaigns.values()), default=None)

    def __bool__(self) -> bool:
        return self.reports > 0

    def __str__(self) -> str:
        if not self.campaigns:
            return "nothing waits in the outbox"
        parts = []
        for name, waiting in sorted(self.campaigns.items()):
            when = self._when(waiting.first_due)
            if waiting.last_due > waiting.first_due and waiting.last_due > self.now:
                when += f" to {utc_time(waiting.last_due, self.now)}"
            parts.append(f"{name}: {_reports(waiting.reports)} {when}")
        text = f"{_reports(self.reports)} {'waits' if self.reports == 1 else 'wait'} (" \
            + "; ".join(parts) + ")"
        if self.held_until is not None and self.held_until > self.now:
            text += (f"; the collector asked to wait or could not be reached: nothing leaves "
                     f"before {utc_time(self.held_until, self.now)}")
        return text

    def _when(self, due: float) -> str:
        if due <= self.now:
            return "due now"
        return f"leaving from {utc_time(due, self.now)}"

    def explained(self) -> str:
        """The summary, and why reports wait: for a log line or a developer's console."""
        if not self.campaigns:
            return str(self)
        return (f"{self}. A report leaves after the time bucket it was made in has ended, at "
                "a random moment of the next, so that when it leaves says nothing about when "
                "it was made; an app that stops sooner sends it on a later run "
                "(docs/client.md, 'When reports leave').")


def _reports(count: int) -> str:
    return f"{count} report" if count == 1 else f"{count} reports"
