"""The demo's installs made fast: each install's reports as the client library makes them,
many installs to a request.

Through the real client (``Client.report``) an install keeps an SQLite state, charges its
ledger and sends each report in a request of its own, as the privacy rules require of an app:
about 2 ms a report on 2 cores, so 160,000 reports were most of the demo's five to twelve
minutes. Here each report is made by the code the client runs for it: the campaign's
mechanism encodes and randomizes the value with the OS CSPRNG, a discovery campaign's group is
drawn from a fresh install key as the client draws it (``keyed_source``), and
``new_report`` gives it a fresh random ID, the config's digest and the bucketed time. A
scheduled campaign's periods come from the client's own plan (``draw_plan``). So every report
has exactly the distribution the client gives it; left out is only what an install does
around its reports (the state file, the ledger, one request per report). The collector
ingests them as it ingests any app's: wire reports over HTTP, ``POST /v1/reports``, checked
one by one, a batch to a request.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any

from chorus_client import CollectorAPI
from chorus_collector.cli.progress import progress_bar
from chorus_shared.campaign import Campaign
from chorus_shared.mechanisms.base import EMPTY
from chorus_shared.rng import assignment_label, keyed_source, resolve_rng
from chorus_shared.wire import new_report

__all__ = ["BATCH", "install_report", "send_reports"]

#: Reports to a request: ~400 KB of JSON, well inside the collector's limits (4 MiB and
#: 10,000 reports), and large enough that a request's fixed cost is a small part of it.
BATCH = 2_000
#: The OS CSPRNG, as ``Client(rng=None)`` resolves it: the demo's noise is never seeded.
_RNG = resolve_rng(None)
#: Install keys are 32 random bytes, as in the client's state (``ClientState``).
_KEY_BYTES = 32


def install_report(campaign: Campaign, value: object, now: float) -> dict[str, Any]:
    """One install's report of ``value`` at ``now``: the wire report ``Client.report`` makes
    (the demo's values all lie in their domains, so none is substituted)."""
    mechanism = campaign.mechanism
    x = mechanism.encode(value)
    assignment = EMPTY
    if getattr(mechanism, "keyed_assignment", False):
        # A new install's key: the group of a discovery campaign's period, as the client
        # derives it from its own key (``Client._assignment``).
        label = assignment_label(campaign.name, campaign.digest, campaign.policy.period(now))
        assignment = mechanism.assign(keyed_source(secrets.token_bytes(_KEY_BYTES), label))
    payload = mechanism.randomize(x, _RNG, assignment)
    return new_report(campaign, payload, now).to_json()


def send_reports(url: str, reports: Iterable[dict[str, Any]], total: int, what: str,
                 echo: Callable[[str], None]) -> int:
    """POST the reports in batches of :data:`BATCH`, one request in flight while the next
    batch is made (the server's workers ingest while this process randomizes); says how
    many were accepted and how fast. Any report not accepted is an error: the demo's truth
    would no longer match what the collector holds."""
    api = CollectorAPI(url)
    started = time.monotonic()
    accepted = 0
    echo(f"  {what}: {total:,} reports, {BATCH:,} to a request ...")
    with ThreadPoolExecutor(1) as pool, progress_bar(total, "report", what) as bar:
        pending: Future[dict[str, Any]] | None = None
        for batch in _batches(reports):
            upload = pool.submit(api.submit, batch)
            if pending is not None:
                accepted += _accepted(pending.result(), bar)
            pending = upload
        if pending is not None:
            accepted += _accepted(pending.result(), bar)
    if accepted != total:
        raise RuntimeError(f"the collector accepted {accepted} of {total} {what} reports")
    seconds = time.monotonic() - started
    echo(f"  {what}: {accepted:,} reports accepted in {seconds:.1f} s "
         f"({accepted / max(seconds, 1e-9):,.0f} a second)")
    return accepted


def _batches(reports: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    iterator = iter(reports)
    while batch := list(islice(iterator, BATCH)):
        yield batch


def _accepted(answer: dict[str, Any], bar: Any) -> int:
    bar.update(len(answer["results"]))
    count: int = answer["accepted"]
    return count
