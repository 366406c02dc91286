"""The versioned HTTP API (``/v1``).

=================================================  =========  ==========================
``GET  /healthz``                                    none       liveness and database check
``GET  /metrics``                                    metrics    Prometheus text format
``GET  /openapi.json``                               none       this API, as OpenAPI 3.1
``GET  /v1/campaigns``                               admin      list campaigns
``POST /v1/campaigns``                               admin      create a campaign
``GET  /v1/campaigns/<name>``                        none       a campaign's public config
``POST /v1/campaigns/<name>/retire``                 admin      retire: no new reports
``POST /v1/campaigns/<name>/reports``                none       submit one report or a batch
``POST /v1/reports``                                 none       reports for any campaigns
                                                                (shuffler key: one shuffled batch)
``GET|POST /v1/campaigns/<name>/estimates``          analyst    estimates (JSON or CSV)
``GET|POST /v1/campaigns/<name>/series``             analyst    estimates per bucket, day,
                                                                week or n seconds
``GET|POST /v1/campaigns/<name>/compare``            analyst    each value's change between
                                                                two windows
=================================================  =========  ==========================
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from chorus_collector.analysis import compare_windows, estimate_series, estimate_window
from chorus_collector.analysis.periods import describe_window
from chorus_collector.http.admission import admission
from chorus_collector.http.auth import Role, TokenVerifier
from chorus_collector.http.metrics import Metrics
from chorus_collector.http.openapi import openapi_document
from chorus_collector.http.query_args import compare_query, estimate_query, series_query
from chorus_collector.http.ratelimit import RateLimiter
from chorus_collector.ingest.reports import (
    ReportStatus,
    batch_answer,
    ingest_reports,
    outcome_counts,
    parse_body,
)
from chorus_collector.ingest.shuffled_batches import (
    SHUFFLED_BATCH_HEADER,
    SHUFFLED_SENDERS_HEADER,
    shuffling_summary,
)
from chorus_collector.problems import Problem
from chorus_collector.storage import Storage, StoredCampaign
from chorus_collector.version import VERSION
from chorus_shared.campaign import campaign_from_spec
from chorus_shared.errors import CampaignError, PrivacyWarning

__all__ = ["api"]

api = Blueprint("chorus_api", __name__)
_DIGITS = re.compile(r"[0-9]{1,13}")


def storage() -> Storage:
    """This app's storage (every route module reads it here)."""
    found: Storage = current_app.extensions["chorus.storage"]
    return found


def require(role: Role) -> None:
    """Refuse the request (401/403) unless its bearer token grants ``role``."""
    verifier: TokenVerifier = current_app.extensions["chorus.tokens"]
    verifier.check(request.headers.get("Authorization"), role)


def report_body(limit: int) -> tuple[bool, list[Any]]:
    """The reports of a request: one report object, or ``{"reports": [...]}`` of at most
    ``limit`` (the collector and the shuffler take the same body). (single, raw reports)."""
    body = json_body()
    single = isinstance(body, dict) and "reports" not in body
    if single:
        raw_reports: list[Any] = [body]
    elif isinstance(body, dict) and isinstance(body.get("reports"), list) and len(body) == 1:
        raw_reports = body["reports"]
    else:
        raise Problem("invalid-request", 'send one report object, or {"reports": [report, ...]}')
    if len(raw_reports) > limit:
        raise Problem("too-many-reports",
                      f"{len(raw_reports)} reports in one request; at most {limit} are allowed")
    if not raw_reports:
        raise Problem("invalid-request", "the batch has no reports")
    return single, raw_reports


def json_body() -> Any:
    if request.mimetype and request.mimetype not in ("application/json", "text/plain") \
            and not request.mimetype.endswith("+json"):
        raise Problem("unsupported-media-type",
                      f"send JSON (Content-Type: application/json), not {request.mimetype}")
    try:
        return parse_body(_read_body())
    except ValueError as error:
        raise Problem("malformed-json", str(error)) from None


def _read_body() -> bytes:
    """The request body, refusing one over the limit whether or not it declared a length.

    Werkzeug stops a body with Content-Length over the limit (413). A chunked body has no
    length: read it ourselves up to one byte past the limit, so it is refused, not cut short.
    """
    limit: int = current_app.config["MAX_CONTENT_LENGTH"]
    length = request.content_length
    stream = request.environ["wsgi.input"]
    if length is not None:
        # Read straight from the server's stream: Werkzeug's wrapper around it cost more
        # than a single report's validation. A short read leaves malformed JSON (400).
        if length > limit:
            raise RequestEntityTooLarge()
        return stream.read(length) if length else b""
    data: bytes = stream.read(limit + 1)
    if len(data) > limit:
        raise Problem("body-too-large",
                      f"request body is larger than {limit} bytes; send fewer reports per "
                      "request")
    return data


def storable_text(text: str) -> bool:
    """Text every engine stores: UTF-8 (JSON's escapes can carry lone surrogates) without
    NUL (PostgreSQL's TEXT refuses it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def campaign_named(name: str) -> StoredCampaign:
    """The campaign of this name, or 404 ``unknown-campaign``."""
    stored = storage().get_campaign(name)
    if stored is None:
        raise Problem("unknown-campaign", f"no campaign is named {name!r}")
    return stored


@api.get("/healthz")
def healthz() -> Response:
    storage().ping()
    return jsonify(status="ok", version=VERSION)


@api.get("/openapi.json")
def openapi() -> Response:
    return jsonify(openapi_document())


@api.get("/v1/campaigns")
def list_campaigns() -> Response:
    require("admin")
    stored = storage()
    # Beside each public config, not in it: clients verify a config field by field.
    return jsonify(campaigns=[{**s.campaign.public_config(),
                               "retired_at": stored.retired_at(s.id),
                               "reporting": s.campaign.reporting}
                              for s in stored.list_campaigns()])


@api.post("/v1/campaigns/<name>/retire")
def retire_campaign(name: str) -> Response:
    """No new reports from now on; estimates stay readable and the name stays taken."""
    require("admin")
    stored = campaign_named(name)
    retired_at = storage().retire_campaign(stored.id, current_app.extensions["chorus.clock"]())
    return jsonify({**stored.campaign.public_config(), "retired_at": retired_at,
                    "reporting": stored.campaign.reporting})


@api.post("/v1/campaigns")
def create_campaign() -> tuple[Response, int]:
    require("admin")
    spec = json_body()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrivacyWarning)
        try:
            campaign = campaign_from_spec(spec, require_consent=True)
            campaign.public_config()  # must render before anything is stored
        except CampaignError as error:
            raise Problem("invalid-campaign", str(error)) from None
    try:
        stored, created = storage().insert_campaign(campaign)
    except FileExistsError:
        raise Problem("campaign-exists",
                      f"a different campaign is already named {campaign.name!r}; campaigns are "
                      "immutable, so create a new one under a new name") from None
    body = stored.campaign.public_config()
    body["warnings"] = sorted({str(w.message) for w in caught} | set(body["warnings"]))
    return jsonify(body), 201 if created else 200


@api.get("/v1/campaigns/<name>")
def get_campaign(name: str) -> Response:
    stored = campaign_named(name)
    retired_at = storage().retired_at(stored.id)
    if retired_at is not None:  # clients stop: their reports would be refused
        raise Problem("campaign-retired", f"campaign {name!r} was retired and takes no new "
                      "reports; its estimates stay readable", retired_at=retired_at)
    response = jsonify(stored.campaign.public_config())
    response.headers["ETag"] = f'"{stored.campaign.digest}"'
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


@api.post("/v1/reports")
def submit_any_reports() -> tuple[Response, int]:
    """Reports for any campaigns: each report's digest selects its campaign."""
    shuffled = _shuffled_batch()
    return _submit(None, admitted=shuffled, shuffled=shuffled)


def _shuffled_batch() -> bool:
    """Whether this request is a batch from the shuffler: the header with the shuffler key.

    Without the key the header is ignored (the reports count as sent directly). With it, the
    shuffler is admitted without the ingest key or the per-address rate limit.
    """
    if SHUFFLED_BATCH_HEADER not in request.headers:
        return False
    verifier: TokenVerifier = current_app.extensions["chorus.tokens"]
    return verifier.grants(request.headers.get("Authorization"), "shuffler")


def _check_batch_size(declared: str | None, count: int) -> None:
    if declared is None or not _DIGITS.fullmatch(declared.strip()) \
            or int(declared) != count:
        raise Problem("invalid-shuffled-batch",
                      f"{SHUFFLED_BATCH_HEADER} must be the number of reports in the request "
                      f"({count}), got {declared!r}")


def _vouched_senders(declared: str | None, count: int) -> int | None:
    """The distinct admitted senders the shuffler vouches for (None: it sent no count, and
    the central bound will say that it assumes no injected reports)."""
    if declared is None:
        return None
    if not _DIGITS.fullmatch(declared.strip()) or not 1 <= int(declared) <= count:
        raise Problem("invalid-shuffled-batch",
                      f"{SHUFFLED_SENDERS_HEADER} must be the number of distinct senders, from "
                      f"1 to the {count} reports of the batch, got {declared!r}")
    return int(declared)


@api.post("/v1/campaigns/<name>/reports")
def submit_reports(name: str) -> tuple[Response, int]:
    _admit_reporter()  # the key and the rate limit before any lookup
    return _submit(campaign_named(name), admitted=True)


def _admit_reporter() -> None:
    """The optional ingest key, then the optional per-address rate limit."""
    require("ingest")
    limiter: RateLimiter | None = current_app.extensions["chorus.ratelimit"]
    if limiter is not None:
        wait = limiter.check(request.remote_addr or "")
        if wait is not None:
            seconds = max(1, math.ceil(wait))
            raise Problem("rate-limited",
                          f"this address is over the report rate limit; retry in {seconds} s",
                          headers={"Retry-After": str(seconds)})


def _submit(stored: StoredCampaign | None, admitted: bool = False,
            shuffled: bool = False) -> tuple[Response, int]:
    if not admitted:
        _admit_reporter()
    single, raw_reports = report_body(current_app.config["CHORUS"]["MAX_REPORTS_PER_REQUEST"])
    senders = None
    if shuffled:
        _check_batch_size(request.headers.get(SHUFFLED_BATCH_HEADER), len(raw_reports))
        senders = _vouched_senders(request.headers.get(SHUFFLED_SENDERS_HEADER),
                                   len(raw_reports))
    now = current_app.extensions["chorus.clock"]()
    statuses = ingest_reports(storage(), raw_reports, now, campaign=stored,
                              max_payload_bytes=current_app.config["CHORUS"]
                              ["MAX_PAYLOAD_BYTES"], shuffled=shuffled, senders=senders)
    _count_outcomes(statuses)
    if single:
        status = statuses[0]
        if status.status == "rejected":
            raise Problem(status.error or "invalid-report", status.detail or "",
                          report_id=status.report_id)
        # As jsonify writes it, without the JSON encoder: a stored report's ID was checked
        # to be 32 hex digits.
        return (Response(f'{{"report_id":"{status.report_id}","status":"{status.status}"}}\n',
                         mimetype="application/json"),
                201 if status.status == "accepted" else 200)
    response = Response(batch_answer(statuses), mimetype="application/json")
    if shuffled:  # tells the shuffler its key was recognised and the batch recorded
        response.headers[SHUFFLED_BATCH_HEADER] = str(len(raw_reports))
        if senders is not None:  # and that its sender count was recorded with it
            response.headers[SHUFFLED_SENDERS_HEADER] = str(senders)
    return response, 200


def _count_outcomes(statuses: Sequence[ReportStatus]) -> None:
    metrics: Metrics = current_app.extensions["chorus.metrics"]
    if len(statuses) == 1:  # a single report: no Counter
        (status,) = statuses
        metrics.count_reports(status.campaign or "", status.error or status.status, 1)
        return
    for (campaign, outcome), count in outcome_counts(statuses).items():
        metrics.count_reports(campaign, outcome, count)


@api.get("/metrics")
def metrics() -> Response:
    require("metrics")
    metrics: Metrics = current_app.extensions["chorus.metrics"]
    body, content_type = metrics.render()
    status = storage().fold_status()
    body += metrics.render_fold_state(status.unfolded, status.folded_at,
                                      current_app.extensions["chorus.clock"]())
    return Response(body, content_type=content_type)


def _answer(result: Any, fmt: str, filename: str, extra: dict[str, Any] | None = None
            ) -> Response:
    """A result as JSON (with ``extra`` fields) or as a CSV attachment."""
    if fmt == "csv":  # campaign names are [a-z0-9_.-]: safe in the header
        return Response(result.to_csv(), mimetype="text/csv",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})
    return Response(json.dumps({**result.to_json(), **(extra or {})}),
                    mimetype="application/json")


T = TypeVar("T")


def _gated(work: Callable[[], T]) -> T:
    """Run a query within the worker's bounds on the threads queries hold and on the
    queries computed at once (http/admission.py)."""
    return admission().run(work)


def _question_body() -> Any:
    return json_body() if request.method == "POST" else None


@api.route("/v1/campaigns/<name>/estimates", methods=["GET", "POST"])
def estimates(name: str) -> Response:
    require("analyst")
    stored = campaign_named(name)
    query, fmt = estimate_query(stored, _question_body(), _max_candidates())
    result, inputs = _gated(lambda: estimate_window(storage(), stored, query))
    extra: dict[str, Any] = {"freshness": inputs.freshness()}
    estimand = describe_window(stored.campaign, query.start, query.end)
    if estimand is not None:
        extra["estimand"] = estimand
    if fmt == "json":
        shuffling = shuffling_summary(storage(), stored, inputs.n, query.start, query.end)
        if shuffling is not None:
            extra["shuffling"] = shuffling
    return _answer(result, fmt, f"{name}-estimates.csv", extra)


@api.route("/v1/campaigns/<name>/series", methods=["GET", "POST"])
def series(name: str) -> Response:
    """Estimates per time bucket, day, week or n seconds (analysis/series.py)."""
    require("analyst")
    stored = campaign_named(name)
    query, fmt = series_query(stored, _question_body(), _max_candidates())
    result = _gated(lambda: estimate_series(
        storage(), stored, start=query.start, end=query.end, step=query.step,
        values=query.values, top=query.top, candidates=query.candidates,
        now=current_app.extensions["chorus.clock"](), align=query.align))
    return _answer(result, fmt, f"{name}-series.csv")


@api.route("/v1/campaigns/<name>/compare", methods=["GET", "POST"])
def compare(name: str) -> Response:
    """Each value's change between two windows (analysis/compare.py)."""
    require("analyst")
    stored = campaign_named(name)
    query, fmt = compare_query(stored, _question_body(), _max_candidates())
    result = _gated(lambda: compare_windows(
        storage(), stored, baseline=query.baseline, current=query.current,
        candidates=query.candidates, correction=query.correction, alpha=query.alpha))
    return _answer(result, fmt, f"{name}-compare.csv")


def _max_candidates() -> int:
    return int(current_app.config["CHORUS"]["MAX_CANDIDATES"])
