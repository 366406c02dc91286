"""Prometheus metrics: reports accepted and rejected by reason, per campaign; request latency;
the writers each group commit held.

Under the production server several worker processes serve requests, so ``chorus serve``
sets ``PROMETHEUS_MULTIPROC_DIR`` before the app is created and ``/metrics`` sums every
worker's counters. ``prometheus_client`` is imported when the first :class:`Metrics` is built,
after that variable is set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

__all__ = ["Metrics"]

log = logging.getLogger("chorus.collector")

# Latency buckets from 1 ms to 10 s.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Writers a group commit held (its transaction's share: one writer alone pays it all).
GROUP_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)


class Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        from chorus_collector.version import VERSION

        # One registry per app: tests and several apps in a process do not share counters.
        self.registry = CollectorRegistry()
        self.reports = Counter(
            "chorus_reports", "Reports received, by campaign and outcome (accepted, "
            "duplicate, or the rejection reason).", ["campaign", "outcome"],
            registry=self.registry)
        self.requests_rejected = Counter(
            "chorus_requests_rejected", "Requests refused before any report was read, by "
            "reason.", ["reason"], registry=self.registry)
        self.latency = Histogram(
            "chorus_request_duration_seconds", "Request latency by route and status.",
            ["method", "route", "status"], buckets=BUCKETS, registry=self.registry)
        self.group_commits = Histogram(
            "chorus_group_commit_writers", "Writers (report requests, batches) taken into one "
            "group commit's transaction: COMMIT_WAIT_US trades a little latency for more.",
            buckets=GROUP_BUCKETS, registry=self.registry)
        self.build_info = Gauge(
            "chorus_build_info", "Always 1; the version of the running collector.",
            ["version"], registry=self.registry, multiprocess_mode="max")
        self.build_info.labels(VERSION).set(1)
        self._children: dict[tuple[object, ...], Any] = {}

    # Counting is never worth a failed request: a report already committed must not be
    # answered with a 500 because a metrics file is gone (the master removes the directory
    # while a draining worker still answers, under SIGTERM).
    def count_reports(self, campaign: str, outcome: str, count: int) -> None:
        self._safely(lambda: self._child(self.reports, campaign, outcome).inc(count))

    def count_rejected_request(self, reason: str) -> None:
        self._safely(lambda: self.requests_rejected.labels(reason).inc())

    def observe_latency(self, method: str, route: str, status: int, seconds: float) -> None:
        self._safely(lambda: self._child(self.latency, method, route, status).observe(seconds))

    def observe_group_commit(self, writers: int) -> None:
        self._safely(lambda: self.group_commits.observe(writers))

    def _child(self, metric: Any, *labels: object) -> Any:
        """The metric's child for these labels, kept: ``labels()`` checks and looks them up
        under a lock on every call, twice per report request. (The same labels always give
        the same child, so two threads that both miss store the same one.)"""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*map(str, labels))
        return child

    @staticmethod
    def _safely(update: Callable[[], None]) -> None:
        try:
            update()
        except Exception as error:  # the metric is lost, the request is not
            log.warning("metrics update failed (%s: %s); the request is unaffected",
                        type(error).__name__, error)

    @staticmethod
    def render_fold_state(unfolded: int, folded_at: float | None, now: float) -> bytes:
        """The fold job's lag, read from the database at scrape time (the same answer from
        every worker and replica, so never summed across processes)."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import GaugeMetricFamily

        class FoldState:
            def collect(self) -> Any:
                yield GaugeMetricFamily(
                    "chorus_reports_unfolded", "Reports appended but not yet folded into the "
                    "per-bucket statistics (estimates map them at query time).", unfolded)
                yield GaugeMetricFamily(
                    "chorus_fold_age_seconds", "Seconds since a fold last moved the watermark "
                    "(NaN: never).", float("nan") if folded_at is None else now - folded_at)

        registry = CollectorRegistry()
        registry.register(FoldState())
        return generate_latest(registry)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        registry: Any = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
