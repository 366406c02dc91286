"""Several collectors on one database: what each backend promises when replicas race.

On SQLite, two collectors share a file; on PostgreSQL (``--backend postgresql``) two replicas
share a database. Tests marked ``postgresql_only`` check what only PostgreSQL does
(migrations under an advisory lock) and run in the PostgreSQL pass; ``test_report_ids`` holds
the report-ID races, ``test_outages`` a database that goes away.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from flask import Flask

from chorus_collector import create_app
from chorus_collector.jobs.folding import fold
from chorus_collector.storage import open_storage
from chorus_collector.storage.postgres import MIGRATIONS
from helpers.support import (
    ADMIN,
    ADMIN_HEADERS,
    ANALYST,
    ANALYST_HEADERS,
    FakeClock,
    make_report,
    query,
)

SPEC = {"name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b", "c"],
        "min_batch_size": 1}


def _replica(database: str, clock: FakeClock) -> Flask:
    return create_app({"DATABASE": database, "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST},
                      clock=clock)


def test_the_same_reports_sent_to_two_replicas_at_once_are_stored_once(
        database: str, clock: FakeClock) -> None:
    replicas = [_replica(database, clock) for _ in range(2)]
    config = replicas[0].test_client().post("/v1/campaigns", json=SPEC,
                                            headers=ADMIN_HEADERS).get_json()
    # The other replica creates the same campaign: the same answer, not a conflict.
    again = replicas[1].test_client().post("/v1/campaigns", json=SPEC, headers=ADMIN_HEADERS)
    assert again.status_code == 200 and again.get_json()["digest"] == config["digest"]
    rng = random.Random(3)
    batches = [[make_report(config, rng.choice("abc"), rng) for _ in range(50)]
               for _ in range(6)]
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send(replica: Flask, batch: list[dict[str, Any]]) -> None:
        reply = replica.test_client().post("/v1/reports", json={"reports": batch})
        assert reply.status_code == 200, reply.get_data(as_text=True)
        with lock:
            answers.append(reply.get_json())

    # Every batch goes to both replicas at the same moment, from several threads.
    threads = [threading.Thread(target=send, args=(replica, batch))
               for batch in batches for replica in replicas for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 4 * len(batches)
    assert sum(a["accepted"] for a in answers) == 300  # each report accepted exactly once
    assert sum(a["duplicate"] for a in answers) == 3 * 300
    assert query(database, "SELECT count(*) FROM reports") == [(300,)]
    fold(open_storage(database))
    estimate = replicas[1].test_client().get("/v1/campaigns/k/estimates",
                                             headers=ANALYST_HEADERS).get_json()
    assert estimate["n"] == 300


@pytest.mark.postgresql_only
def test_replicas_starting_together_migrate_once(postgres: Any) -> None:
    url = postgres.new_schema()
    errors: list[BaseException] = []

    def start() -> None:
        try:
            open_storage(url).migrate()
        except BaseException as error:  # collected for the assertion below
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert query(url, "SELECT name FROM chorus_migrations ORDER BY name") == sorted(
        (name,) for name, _ in MIGRATIONS)
