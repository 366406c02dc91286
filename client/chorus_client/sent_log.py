"""What this device sent: :meth:`Client.sent_log`, for an app's settings or privacy page.

As Apple's Analytics Data and Microsoft's Diagnostic Data Viewer do, the client keeps a
readable log of the reports the collector answered for: the campaign, the report as it left
(its ID, time bucket and randomized payload), the ε it was charged, the answer, and the UTC day
of the answer. It holds nothing the collector does not already get (the collector has every
report, and learns the day it arrives), and no true value. The app shows it as data, as text
or as a small HTML table of its own styling.
"""

from __future__ import annotations

import html
import json
import math
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["SentLog", "SentReport"]

_EXPLANATION = ("Each report holds a value randomized on this device before it left (local "
                "differential privacy): on its own it does not say what the true value was. "
                "ε measures how much a report can reveal at most; the device stops reporting "
                "once its lifetime budget is spent.")


@dataclass(frozen=True)
class SentReport:
    """One report the collector answered for, as it left the device."""

    campaign: str
    report_id: str
    time: int  # the report's time bucket (Unix seconds), as sent
    payload: Any  # the randomized payload, as sent
    epsilon: float | None  # ε charged for it (None: queued by a client before schema 6)
    status: str  # "accepted", "duplicate" (already had it) or "refused" (ε still spent)
    answered_on: str  # the UTC day the collector answered, YYYY-MM-DD

    @classmethod
    def from_row(cls, campaign: str, report: str, epsilon: float | None, status: str,
                 day: int) -> SentReport:
        body = json.loads(report)
        return cls(campaign=campaign, report_id=str(body.get("report_id", "")),
                   time=int(body.get("time", 0)), payload=body.get("payload"),
                   epsilon=epsilon, status=status,
                   answered_on=time.strftime("%Y-%m-%d", time.gmtime(day * 86400)))

    @property
    def bucket(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.time))

    @property
    def payload_text(self) -> str:
        return json.dumps(self.payload, separators=(",", ":"), ensure_ascii=False)

    def as_dict(self) -> dict[str, Any]:
        return {"campaign": self.campaign, "report_id": self.report_id, "time": self.time,
                "payload": self.payload, "epsilon": self.epsilon, "status": self.status,
                "answered_on": self.answered_on}


@dataclass(frozen=True)
class SentLog:
    """The newest answered reports first, with the budget they came out of."""

    reports: tuple[SentReport, ...]
    spent: float  # ε this install has spent in all (sent, waiting or refused)
    lifetime_budget: float
    waiting: int  # reports made and not yet answered (see Client.waiting())

    @property
    def remaining(self) -> float:
        return max(0.0, self.lifetime_budget - self.spent)

    def budget_line(self) -> str:
        if math.isinf(self.lifetime_budget):
            budget = f"ε spent: {self.spent:.4g} (no lifetime budget set)"
        else:
            budget = (f"ε spent: {self.spent:.4g} of {self.lifetime_budget:.4g} "
                      f"({self.remaining:.4g} left)")
        if self.waiting:
            budget += (f"; {self.waiting} {'report waits' if self.waiting == 1 else 'reports wait'}"
                       " to be sent")
        return budget

    def as_dict(self) -> dict[str, Any]:
        return {"spent": self.spent, "lifetime_budget": self.lifetime_budget,
                "remaining": self.remaining, "waiting": self.waiting,
                "reports": [r.as_dict() for r in self.reports]}

    def text(self) -> str:
        lines = ["What this device sent, newest first.", _EXPLANATION, self.budget_line()]
        if not self.reports:
            return "\n".join([*lines, "Nothing sent yet."])
        for r in self.reports:
            epsilon = "ε ?" if r.epsilon is None else f"ε {r.epsilon:.4g}"
            lines.append(f"{r.answered_on}  {r.campaign}  {epsilon}  {r.status}  "
                         f"bucket {r.bucket}  payload {r.payload_text}")
        return "\n".join(lines)

    def html(self) -> str:
        """A self-contained fragment (no script, no style, every field escaped)."""
        e = html.escape
        parts = ['<section class="chorus-sent-log">',
                 f"<p>{e(_EXPLANATION)}</p>", f"<p>{e(self.budget_line())}</p>"]
        if not self.reports:
            parts.append("<p>Nothing sent yet.</p>")
        else:
            parts.append("<table><caption>What this device sent, newest first</caption>"
                         "<thead><tr><th scope=\"col\">Answered</th><th scope=\"col\">Campaign"
                         "</th><th scope=\"col\">ε</th><th scope=\"col\">Answer</th>"
                         "<th scope=\"col\">Time bucket</th><th scope=\"col\">Randomized "
                         "report</th></tr></thead><tbody>")
            for r in self.reports:
                epsilon = "?" if r.epsilon is None else f"{r.epsilon:.4g}"
                parts.append(f"<tr><td>{e(r.answered_on)}</td><td>{e(r.campaign)}</td>"
                             f"<td>{e(epsilon)}</td><td>{e(r.status)}</td>"
                             f"<td>{e(r.bucket)}</td><td><code>{e(r.payload_text)}</code></td>"
                             "</tr>")
            parts.append("</tbody></table>")
        parts.append("</section>")
        return "".join(parts)
