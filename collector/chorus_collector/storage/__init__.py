"""Storage: campaigns, appended reports and folded statistics, behind one interface.

``open_storage(url)`` opens the engine a URL names: a SQLite file (the embedded default) or
PostgreSQL (replicas). Everything above this package uses :class:`Storage` only.

The package, one module per job (after Django's database backends):

* ``interface``: :class:`Storage`, the interface (every operation and its contract);
* ``values``: what goes in and out (``StoredCampaign``, snapshots, ``SchemaError`` …);
* ``sql``: the SQL both engines share, the base each engine subclasses;
* ``alert_tables``: the alert rules' SQL (both engines alike), which ``sql`` hands over to;
* ``sqlite``, ``postgres``: one engine each, with its schema and migrations. Neither
  imports the other.
* ``sqlite_library``: sqlite-utils, imported without pandas (start-up time).
"""

from __future__ import annotations

from chorus_collector.storage.interface import Connection, Storage, TailPages, TailReader
from chorus_collector.storage.postgres import PostgresStorage, is_postgres_url
from chorus_collector.storage.sqlite import SQLiteStorage, migrations
from chorus_collector.storage.values import (
    AlertEvaluation,
    AlertFiring,
    AlertState,
    Annotation,
    BucketSnapshot,
    CampaignRetired,
    FoldedStatistics,
    FoldLeaseState,
    FoldStatus,
    NewFiring,
    PayloadGroup,
    SchemaError,
    StoredAlertRule,
    StoredCampaign,
    StoredReport,
    TailPage,
    WindowSnapshot,
    report_rows,
    state_array,
    stored_reports,
)

__all__ = ["AlertEvaluation", "AlertFiring", "AlertState", "Annotation", "BucketSnapshot",
           "CampaignRetired", "Connection", "FoldLeaseState", "FoldStatus", "FoldedStatistics",
           "NewFiring", "PayloadGroup", "PostgresStorage", "SQLiteStorage", "SchemaError",
           "Storage", "StoredAlertRule", "StoredCampaign", "StoredReport", "TailPage",
           "TailPages", "TailReader", "WindowSnapshot", "is_postgres_url", "migrations",
           "open_storage", "report_rows", "state_array", "stored_reports"]
__all__ = ["AlertEvaluation", "AlertFiring", "AlertState", "BucketSnapshot", "CampaignRetired",
           "Connection", "FoldLeaseState", "FoldStatus", "FoldedStatistics", "NewFiring",
           "PayloadGroup", "PostgresStorage", "SQLiteStorage", "SchemaError", "Storage",
           "StoredAlertRule", "StoredCampaign", "StoredReport", "TailPage", "TailPages",
           "TailReader", "WindowSnapshot", "is_postgres_url", "migrations", "open_storage",
           "report_rows", "state_array", "stored_reports"]


def open_storage(database: str, *, synchronous: str = "FULL") -> Storage:
    """The storage a database setting names: a ``postgresql://`` URL, or a SQLite file."""
    if is_postgres_url(database):
        return PostgresStorage(database, synchronous=synchronous)
    return SQLiteStorage(database, synchronous=synchronous)
