"""The Dask fold on the backend the suite runs on (SQLite, or PostgreSQL with two tasks
reading seq ranges over connections of their own): the statistics it commits are exactly
what the reports give, and reports appended during the fold are left for the next one."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from distributed import Client, LocalCluster
from flask import Flask

from chorus_collector.jobs.aggregate import check_aggregates
from chorus_collector.jobs.distributed import fold_on_cluster, fold_with_cluster
from chorus_collector.jobs.tail import estimate_inputs
from chorus_collector.storage import open_storage
from helpers.support import ADMIN_HEADERS, FakeClock, make_report

SPECS = [{"name": "k", "mechanism": "krr", "epsilon": 1.0, "domain": ["a", "b", "c"],
          "min_batch_size": 1},
         {"name": "o", "mechanism": "olh", "epsilon": 2.0,
          "domain": [f"v{i}" for i in range(40)], "min_batch_size": 1}]


# With its dashboard off, the scheduler still serves /health and /metrics, on port 8787 by
# default: a second cluster (another xdist worker, another checkout's tests) would find it
# taken and warn, an error here. A free port on loopback instead.
_SCHEDULER_HTTP = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, scheduler_kwargs=_SCHEDULER_HTTP) as cluster, \
            Client(cluster, set_as_default=False) as dask_client:
        yield dask_client


def test_a_fold_on_the_cluster_is_exact_on_this_backend(
        make_app: Callable[..., Flask], clock: FakeClock, database: str,
        client: Client) -> None:
    http = make_app().test_client()
    rng = random.Random(21)
    configs = [http.post("/v1/campaigns", json=spec, headers=ADMIN_HEADERS).get_json()
               for spec in SPECS]

    def send(count: int) -> None:
        for config, values in zip(configs, ("abc", [f"v{i}" for i in range(40)]), strict=True):
            for hour in range(2):
                reports = [make_report(config, rng.choice(values), rng,
                                       now=clock.now - 3600 * hour) for _ in range(count)]
                assert http.post("/v1/reports", json={"reports": reports}).get_json()[
                    "accepted"] == count

    send(60)
    storage = open_storage(database)
    # Small tasks: the 240 reports span several seq ranges, each read by a worker process.
    assert fold_on_cluster(storage, client, task_reports=50) == 240
    send(5)  # after the fold: left for the next one
    assert storage.fold_status().unfolded == 20
    assert fold_with_cluster(storage, client, task_reports=50) == 20
    for spec in SPECS:
        checks = check_aggregates(storage, str(spec["name"]), workers=1)
        assert checks and all(check.matches for check in checks)
        stored = storage.get_campaign(str(spec["name"]))
        assert stored is not None
        assert estimate_inputs(storage, stored, None, None).n == 130
