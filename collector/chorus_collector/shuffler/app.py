"""The shuffler: an optional service between clients and the collector (docs/shuffler.md).

Clients post reports here exactly as to the collector. The shuffler checks the envelope only,
pools the reports durably, and forwards each campaign's time bucket to the collector once it
holds ``MIN_BATCH`` of them, as one batch in a uniformly random order, without the senders'
addresses, headers or arrival times. The collector then sees batches, not people.

=================================  =========  =============================================
``GET  /healthz``                    none       liveness and pool check; batches held as
                                                too large for the collector
``POST /v1/reports``                 admission  reports, the collector's wire format; with
                                                ``ADMISSION_SECRETS`` a credential minted by
                                                the app's backend, else none
``GET  /v1/campaigns/<name>``        none       a campaign's config, from the collector
``POST /v1/flush``                   admin      one forwarding pass now
=================================  =========  =============================================

No access log and no request log: a log line with a timestamp per request would be the
arrival record this service exists to drop.
"""

from __future__ import annotations

import logging
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from chorus_collector.http.api import report_body
from chorus_collector.http.auth import TokenVerifier
from chorus_collector.http.cors import install_cors, policy_from_setting
from chorus_collector.http.handlers import register_error_handlers
from chorus_collector.problems import Problem
from chorus_collector.shuffler.forward import (
    USER_AGENT,
    BackgroundForwarder,
    Forwarder,
    Upstream,
    UpstreamError,
    UpstreamReply,
)
from chorus_collector.shuffler.pool import Outcome, PooledReport, ShufflerPool
from chorus_collector.shuffler.settings import resolve_shuffler_settings
from chorus_shared.admission import AdmissionError, verify_admission_credential
from chorus_shared.campaign import canonical_json
from chorus_shared.wire import MAX_TIME, REPORT_FIELDS

__all__ = ["create_shuffler_app"]

shuffler_api = Blueprint("chorus_shuffler", __name__)
log = logging.getLogger("chorus.shuffler")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
# Headers of the collector's campaign answer that the client may see; nothing else passes.
_PASSED_HEADERS = ("Content-Type", "ETag", "Cache-Control")


def create_shuffler_app(config: Mapping[str, Any] | None = None, *,
                        upstream: Upstream | None = None,
                        rng: random.Random | None = None,
                        clock: Callable[[], float] = time.monotonic,
                        wall_clock: Callable[[], float] = time.time) -> Flask:
    """The shuffler's WSGI app. Settings: defaults, ``CHORUS_SHUFFLER_*``, then ``config``.

    ``upstream`` (how to reach the collector) and ``rng`` (the shuffle; the OS CSPRNG by
    default) are for tests; ``wall_clock`` is what admission credentials expire against. No
    thread is started here: the server starts the background forwarder in each worker
    (:func:`start_background_forwarder`).
    """
    settings = resolve_shuffler_settings(config)
    app = Flask("chorus_shuffler")
    app.config["MAX_CONTENT_LENGTH"] = settings["MAX_BODY_BYTES"]
    app.config["CHORUS_SHUFFLER"] = {k: v for k, v in settings.items()
                                     if k not in ("SHUFFLER_KEY", "ADMIN_TOKEN",
                                                  "ADMISSION_SECRETS")}
    app.extensions["chorus.shuffler.admission"] = (
        _Admission(settings["ADMISSION_SECRETS"], wall_clock)
        if settings["ADMISSION_SECRETS"] else None)
    if not settings["ADMISSION_SECRETS"]:
        log.warning("no ADMISSION_SECRETS: anyone, the collector included, may post reports "
                    "and fill a batch; the collector states its central bound as assuming no "
                    "injected reports (docs/shuffler.md)")
    pool = ShufflerPool(settings["DATABASE"],
                        max_reports_per_sender=settings["MAX_REPORTS_PER_SENDER"])
    pool.migrate()
    pool.close()  # no connection may cross a fork into server workers
    app.extensions["chorus.shuffler.pool"] = pool
    app.extensions["chorus.shuffler.forwarder"] = Forwarder(
        pool, collector_url=settings["COLLECTOR_URL"], key=settings["SHUFFLER_KEY"],
        min_batch=settings["MIN_BATCH"], max_batch=settings["MAX_BATCH"],
        max_batch_bytes=settings["MAX_BATCH_BYTES"], timeout=settings["FORWARD_TIMEOUT"],
        upstream=upstream, rng=rng, clock=wall_clock)
    app.extensions["chorus.shuffler.tokens"] = TokenVerifier(admin=settings["ADMIN_TOKEN"],
                                                             analyst=None)
    app.extensions["chorus.shuffler.campaigns"] = _CampaignCache(
        settings["CAMPAIGN_CACHE_SECONDS"], clock)
    app.register_blueprint(shuffler_api)
    register_error_handlers(app)
    install_cors(app, policy_from_setting(settings["CORS_ORIGINS"]))
    return app


def start_background_forwarder(app: Flask) -> BackgroundForwarder:
    """Start the forwarding thread of this process (every ``FORWARD_INTERVAL`` seconds)."""
    background = BackgroundForwarder(app.extensions["chorus.shuffler.forwarder"],
                                     app.config["CHORUS_SHUFFLER"]["FORWARD_INTERVAL"])
    background.start()
    app.extensions["chorus.shuffler.background"] = background
    return background


def _pool() -> ShufflerPool:
    pool: ShufflerPool = current_app.extensions["chorus.shuffler.pool"]
    return pool


def _setting(name: str) -> Any:
    return current_app.config["CHORUS_SHUFFLER"][name]


@shuffler_api.get("/healthz")
def healthz() -> Response:
    counts = _pool().counts()
    # Still 200: the process is fine, and a restart would not let a held batch through; the
    # status and the counts are for the operator, whose settings must change (the log says
    # which, docs/shuffler.md).
    return jsonify(status="degraded" if counts.held_batches else "ok",
                   held={"batches": counts.held_batches, "reports": counts.held_reports})


# -- admission --------------------------------------------------------------------------------


class _Admission:
    """The secrets shared with the app's backend; never in the app config, never logged."""

    def __init__(self, keys: tuple[str, ...], wall_clock: Callable[[], float]) -> None:
        self._keys = keys
        self.wall_clock = wall_clock

    def __repr__(self) -> str:
        return f"_Admission(<{len(self._keys)} secrets>)"

    def sender(self, authorization: str | None) -> str:
        """The admitted sender of the request, or a 401 problem."""
        challenge = 'Bearer realm="chorus-shuffler"'
        if not authorization:
            raise Problem("unauthorized", "this shuffler takes reports only with an admission "
                          "credential from the app's backend (Authorization: Bearer v1....; "
                          "the client's ingest_key)", headers={"WWW-Authenticate": challenge})
        scheme, _, token = authorization.partition(" ")
        try:
            if scheme.lower() != "bearer":
                raise AdmissionError("malformed", "use 'Authorization: Bearer <credential>'")
            return verify_admission_credential(token.strip(), self._keys,
                                               now=self.wall_clock())
        except AdmissionError as error:
            # RFC 6750 §3.1: a presented but unusable token is invalid_token, with a 401.
            raise Problem("unauthorized", str(error), headers={
                "WWW-Authenticate": f'{challenge}, error="invalid_token"'}) from None


def _admitted_sender() -> str | None:
    """The request's sender when admission is configured (else None: anyone may post)."""
    admission: _Admission | None = current_app.extensions["chorus.shuffler.admission"]
    if admission is None:
        return None
    return admission.sender(request.headers.get("Authorization"))


# -- intake -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Checked:
    report: PooledReport | None
    report_id: str | None
    error: str | None = None


def _check_envelope(raw: object, max_payload_bytes: int, sender: str | None) -> _Checked:
    """The envelope of one report; the payload only as JSON of bounded size (the collector,
    which knows the campaign, checks the rest)."""
    report_id = raw.get("report_id") if isinstance(raw, dict) else None
    shown = report_id if isinstance(report_id, str) and len(report_id) <= 64 else None
    if not isinstance(raw, dict):
        return _Checked(None, None, "a report must be a JSON object")
    if raw.keys() != REPORT_FIELDS:
        missing, extra = REPORT_FIELDS - raw.keys(), raw.keys() - REPORT_FIELDS
        return _Checked(None, shown, f"report is missing {sorted(missing)}" if missing
                        else f"report has unknown fields {sorted(extra)}")
    if not isinstance(report_id, str) or not _HEX32.fullmatch(report_id):
        return _Checked(None, shown, "report_id must be 32 lowercase hex digits")
    digest = raw["digest"]
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        return _Checked(None, shown, "digest must be 64 lowercase hex digits")
    when = raw["time"]
    if isinstance(when, bool) or not isinstance(when, int) or not 0 <= when < MAX_TIME:
        return _Checked(None, shown, "time must be a non-negative integer (Unix seconds)")
    try:
        payload = canonical_json(raw["payload"]).decode()
    except (TypeError, ValueError):
        return _Checked(None, shown, "payload must be a JSON value")
    if len(payload.encode()) > max_payload_bytes:
        return _Checked(None, shown, f"payload is {len(payload.encode())} bytes; at most "
                                     f"{max_payload_bytes} are accepted")
    return _Checked(PooledReport(report_id, digest, when, payload, sender), report_id)


@shuffler_api.post("/v1/reports")
def submit_reports() -> tuple[Response, int]:
    sender = _admitted_sender()  # before the body is read: an unadmitted request costs little
    single, raw_reports = report_body(_setting("MAX_REPORTS_PER_REQUEST"))
    checked = [_check_envelope(raw, _setting("MAX_PAYLOAD_BYTES"), sender)
               for raw in raw_reports]
    first: dict[tuple[str, str], PooledReport] = {}
    repeats: list[bool] = []  # per report: a repeat of an earlier one in this request
    for item in checked:
        report = item.report
        key = (report.digest, report.report_id) if report is not None else None
        repeats.append(key is not None and key in first)
        if report is not None and key is not None and key not in first:
            first[key] = report
    try:
        outcomes = _pool().add(list(first.values())) if first else {}
    except sqlite3.Error:
        # Nothing was committed, so nothing is acknowledged; the client keeps its reports.
        raise Problem("storage-unavailable", "the reports could not be stored; retry later",
                      headers={"Retry-After": "5"}) from None
    results = [_result(item, repeat, first, outcomes)
               for item, repeat in zip(checked, repeats, strict=True)]
    if single:
        result = results[0]
        if result["status"] == "rejected":
            raise Problem(result["error"], result["detail"], report_id=result["report_id"])
        return jsonify(result), 201 if result["status"] == "accepted" else 200
    counts = {k: sum(r["status"] == k for r in results)
              for k in ("accepted", "duplicate", "rejected")}
    return jsonify(results=results, **counts), 200


def _result(item: _Checked, repeat: bool, first: Mapping[tuple[str, str], PooledReport],
            outcomes: Mapping[tuple[str, str], Outcome]) -> dict[str, Any]:
    if item.report is None:
        return {"report_id": item.report_id, "status": "rejected", "error": "invalid-report",
                "detail": item.error}
    key = (item.report.digest, item.report.report_id)
    if outcomes[key] == "conflict" or (repeat and first[key] != item.report):
        return {"report_id": item.report_id, "status": "rejected", "error": "report-conflict",
                "detail": "a different report with this report_id was already submitted"}
    if outcomes[key] == "limit":  # the first copy was refused, and so is any repeat of it
        return {"report_id": item.report_id, "status": "rejected", "error": "sender-limit",
                "detail": f"this sender already has {_setting('MAX_REPORTS_PER_SENDER')} "
                          "report(s) of this campaign and time bucket waiting for a batch"}
    new = outcomes[key] == "new" and not repeat
    return {"report_id": item.report_id, "status": "accepted" if new else "duplicate"}


# -- campaigns, from the collector ------------------------------------------------------------


class _CampaignCache:
    """Campaign configs recently fetched (200 answers only), so the collector sees fewer, and
    less timely, config requests. Bounded: cleared when full."""

    def __init__(self, seconds: float, clock: Callable[[], float], size: int = 1024) -> None:
        self.seconds = seconds
        self.clock = clock
        self.size = size
        self._entries: dict[str, tuple[float, UpstreamReply]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> UpstreamReply | None:
        with self._lock:
            entry = self._entries.get(name)
        if entry is None or entry[0] < self.clock():
            return None
        return entry[1]

    def put(self, name: str, reply: UpstreamReply) -> None:
        if self.seconds <= 0 or reply.status != 200:
            return
        with self._lock:
            if len(self._entries) >= self.size:
                self._entries.clear()
            self._entries[name] = (self.clock() + self.seconds, reply)


@shuffler_api.get("/v1/campaigns/<name>")
def get_campaign(name: str) -> Response:
    cache: _CampaignCache = current_app.extensions["chorus.shuffler.campaigns"]
    reply = cache.get(name)
    if reply is None:
        forwarder: Forwarder = current_app.extensions["chorus.shuffler.forwarder"]
        url = f"{_setting('COLLECTOR_URL')}/v1/campaigns/{quote(name, safe='')}"
        try:
            # A fresh request with fixed headers: no client header, cookie or address.
            reply = forwarder.upstream.request(
                "GET", url, body=None, timeout=10,
                headers={"Accept": "application/json", "User-Agent": USER_AGENT})
        except UpstreamError:
            raise Problem("collector-unavailable",
                          "the shuffler could not reach the collector; retry later",
                          headers={"Retry-After": "30"}) from None
        if reply.status >= 500:
            raise Problem("collector-unavailable",
                          f"the collector answered {reply.status}; retry later",
                          headers={"Retry-After": "30"})
        cache.put(name, reply)
    response = Response(reply.body, status=reply.status)
    for header in _PASSED_HEADERS:
        value = reply.header(header)
        if value is not None:
            response.headers[header] = value
    return response


# -- operations -------------------------------------------------------------------------------


@shuffler_api.post("/v1/flush")
def flush() -> Response:
    tokens: TokenVerifier = current_app.extensions["chorus.shuffler.tokens"]
    tokens.check(request.headers.get("Authorization"), "admin")
    forwarder: Forwarder = current_app.extensions["chorus.shuffler.forwarder"]
    report = forwarder.flush(retry_held=True)  # an operator's pass: held batches too
    counts = _pool().counts()
    return jsonify(**report.to_json(), waiting=counts.waiting, claimed=counts.claimed,
                   held_reports=counts.held_reports)
