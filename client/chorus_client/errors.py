"""Client exceptions. All derive from :class:`chorus_shared.ChorusError`::

    ChorusError
    └── ClientError
        ├── TransportError     the request did not complete (timeout, connection refused)
        ├── BudgetExceeded     a report would exceed the privacy budget (strict mode only)
        └── APIError           the collector answered with an error (a problem+json body)
            └── CampaignUnavailable   the campaign does not exist or its config is invalid
"""

from __future__ import annotations

from typing import Any

from chorus_shared.errors import ChorusError

__all__ = ["APIError", "BudgetExceeded", "CampaignUnavailable", "ClientError",
           "TransportError"]


class ClientError(ChorusError):
    """Base class of the client's errors."""


class TransportError(ClientError):
    """The request did not complete: a timeout or a connection error. Retryable."""


class BudgetExceeded(ClientError):
    """A report was not made: it would exceed a budget or report cap (strict mode only)."""

    def __init__(self, campaign: str, reason: str) -> None:
        self.campaign = campaign
        self.reason = reason
        super().__init__(f"report for {campaign!r} not made: {reason} exhausted")


class APIError(ClientError):
    """The collector answered with an error status."""

    def __init__(self, status: int, problem: dict[str, Any] | None, text: str = "") -> None:
        self.status = status
        self.problem = problem or {}
        kind = str(self.problem.get("type", "")).rsplit("/", 1)[-1]
        self.kind = kind or f"http-{status}"
        detail = self.problem.get("detail") or self.problem.get("title") or text[:200]
        # Status 0: the client's own refusal, no request made (see Client).
        super().__init__(f"{status} {self.kind}: {detail}" if status else
                         f"{self.kind}: {detail}")


class CampaignUnavailable(APIError):
    """The campaign cannot be used: unknown, or its config fails verification."""
