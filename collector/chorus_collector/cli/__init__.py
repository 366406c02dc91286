"""The ``chorus`` command: a thin layer over library functions the tests also call.

* ``chorus serve``: run the collector with the production server;
* ``chorus shuffler``: run the optional shuffler (``--flush``: one forwarding pass);
* ``chorus mint-credential``: shuffler admission credentials, for the app's backend;
* ``chorus campaign create|list``: admin calls over HTTP (``CHORUS_URL``, ``CHORUS_TOKEN``);
* ``chorus alert create|list|show|delete|firings``: alert rules over HTTP (docs/alerts.md);
* ``chorus estimates NAME``: analyst call, printed as a table, JSON or CSV;
* ``chorus series NAME``: estimates per bucket, day, week or n seconds (``--step``);
* ``chorus compare NAME``: each value's change between a baseline and a current window
  (``--last 7d``: the last 7 days against the 7 before), with a multiple-testing correction;
* ``chorus demo [--serve]``: a collector, seven campaigns and 30,000 simulated installs, end to end;
* ``chorus gc``: drop reports past their campaign's expiry, keeping the statistics;
* ``chorus aggregate``: fold new reports into the statistics (``--scheduler``: on a Dask
  cluster; ``--from-parquet``: aggregate an export instead);
* ``chorus export NAME --parquet DIR``: a campaign's reports as Parquet files;
* ``chorus check-aggregates NAME``: recompute statistics from raw reports on every core
  (``--scheduler``: on a Dask cluster);
* ``chorus mechanisms``: which mechanism for this ε and domain (variance and report size);
* ``chorus design``: the campaign designer: standard errors, report size and privacy over
  time per mechanism, a simulated window (``--distribution``), creation (``--create``);
* ``chorus rappor params|import``: campaigns and reports from google/rappor clients.
"""

from __future__ import annotations

from importlib import import_module

from chorus_collector.cli.root import main

__all__ = ["COMMANDS", "main"]

#: Each subcommand and the module of this package that registers it on ``main`` when
#: imported: only the module of the subcommand run is imported (a new command adds a line;
#: tests/collector/cli/test_cli_startup.py checks the list against the modules).
COMMANDS = {
    "aggregate": "jobs", "alert": "alerts", "campaign": "campaigns", "check-aggregates": "jobs",
    "compare": "analysis", "demo": "tools", "design": "design", "estimates": "campaigns",
    "export": "jobs", "gc": "jobs", "mechanisms": "tools", "mint-credential": "servers",
    "rappor": "rappor", "series": "analysis", "serve": "servers", "shuffler": "servers",
}

main.modules.update({name: f"{__name__}.{module}" for name, module in COMMANDS.items()})
main.load = import_module
