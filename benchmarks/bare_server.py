"""The baseline for the HTTP benchmark: a bare Flask + SQLite endpoint on the same server.

``POST /v1/reports`` parses the JSON body and inserts each report's ID, time and payload into
SQLite (WAL, synchronous=FULL, one transaction per request), with no validation and no
statistics; gunicorn with the collector's worker and thread settings. What Chorus adds on top
(validation, deduplication, statistics, metrics) is measured as a ratio to this, in one run.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
from typing import Any

from flask import Flask, Response, request
from gunicorn.app.base import BaseApplication


def create(database: str) -> Flask:
    app = Flask("bare")
    local = threading.local()
    with sqlite3.connect(database) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS reports (report_id BLOB PRIMARY KEY, "
                     "time INTEGER, payload TEXT) WITHOUT ROWID")

    def connection() -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(database, isolation_level=None, check_same_thread=False,
                                   timeout=30)
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=30000")
            local.conn = conn
        return conn

    @app.post("/v1/reports")
    def reports() -> Response:
        body = json.loads(request.get_data())
        items = body.get("reports", [body])
        conn = connection()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT OR IGNORE INTO reports VALUES (?, ?, ?)",
                         [(bytes.fromhex(r["report_id"]), r["time"], json.dumps(r["payload"]))
                          for r in items])
        conn.execute("COMMIT")
        return Response(json.dumps({"accepted": len(items)}), mimetype="application/json")

    return app


class _Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, app: Flask, options: dict[str, Any]) -> None:
        self.application, self.options = app, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self.application


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    _Server(create(args.database), {"bind": args.bind, "workers": args.workers,
                                    "threads": args.threads, "worker_class": "gthread",
                                    "preload_app": True, "accesslog": None,
                                    "loglevel": "warning", "keepalive": 5}).run()
