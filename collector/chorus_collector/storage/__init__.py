"""Storage: campaigns, appended reports and folded statistics, behind one interface.

``open_storage(url)`` opens the engine a URL names: a SQLite file (the embedded default) or
PostgreSQL (replicas). Everything above this package uses :class:`Storage` only."""

from __future__ import annotations

from chorus_collector.storage.sqlite import (
    BucketSnapshot,
    FoldedStatistics,
    FoldStatus,
    PayloadGroup,
    SchemaError,
    Storage,
    StoredCampaign,
    StoredReport,
    WindowSnapshot,
    migrations,
    open_storage,
    report_rows,
    state_array,
)

__all__ = ["BucketSnapshot", "FoldStatus", "FoldedStatistics", "PayloadGroup", "SchemaError",
           "Storage", "StoredCampaign", "StoredReport", "WindowSnapshot", "migrations",
           "open_storage", "report_rows", "state_array"]
