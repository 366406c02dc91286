"""What a folder does for the alerts: evaluate after a fold, deliver every round.

:class:`AlertWork` is handed to :class:`~chorus_collector.jobs.folding.BackgroundFolder` (the
server's, or ``chorus aggregate``'s) by whoever builds it: the folding job knows nothing of
alerts, only that something follows its folds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from chorus_collector.alerts.deliver import Deliveries, Post, deliver_due, post_webhook
from chorus_collector.alerts.evaluate import evaluate_campaigns
from chorus_collector.storage import Storage

__all__ = ["AlertWork"]


class AlertWork:
    """Alert evaluation and delivery for one folder; ``public_url``: the dashboard's address
    that notifications link to (``CHORUS_PUBLIC_URL``; None: a relative link)."""

    def __init__(self, storage: Storage, *, public_url: str | None,
                 clock: Callable[[], float] = time.time, post: Post = post_webhook) -> None:
        self.storage = storage
        self.public_url = public_url
        self.clock = clock
        self.post = post

    def after_fold(self, campaign_ids: Iterable[int]) -> int:
        """The lease holder folded reports of these campaigns: evaluate their rules."""
        return evaluate_campaigns(self.storage, campaign_ids, self.clock(), self.public_url)

    def every_round(self) -> Deliveries:
        """Deliver the notifications due now (any folder, lease or not: each is claimed)."""
        return deliver_due(self.storage, self.clock(), self.post)
