"""What every request to a Chorus Flask app shares: errors as problem documents, and the
request log and latency metrics.

Any exception answers ``application/problem+json``: a :class:`Problem` as itself, Werkzeug's
HTTP errors under their own kind, a database outage ``503 storage-unavailable`` with
``Retry-After``, anything else a generic 500 whose traceback is logged.
The collector and the shuffler register these on their apps.
"""

from __future__ import annotations

import logging
import time

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from chorus_collector.http.metrics import Metrics
from chorus_collector.problems import Problem, problem_response

__all__ = ["DISCARD_LIMIT", "REQUEST_LEVEL_REJECTIONS", "discard_unread_body",
           "register_error_handlers", "register_request_log"]

log = logging.getLogger("chorus.collector")


# Problems that refuse a whole report request; counted as chorus_requests_rejected{reason}.
REQUEST_LEVEL_REJECTIONS = frozenset({
    "malformed-json", "invalid-request", "too-many-reports", "body-too-large",
    "unsupported-media-type", "rate-limited", "unauthorized", "forbidden", "unknown-campaign",
})

#: Most bytes of a refused body read and dropped before the 413 goes out (see
#: :func:`discard_unread_body`): above any sane proxy limit, and a bound on the work.
DISCARD_LIMIT = 64 * 1024 * 1024

STORAGE_RETRY_AFTER = 5  # seconds: a restart or a lock past its timeout is over by then

_HTTP_KINDS = {400: "bad-request", 404: "not-found", 405: "method-not-allowed",
               413: "body-too-large", 415: "unsupported-media-type"}


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(Problem)
    def on_problem(problem: Problem) -> Response:
        if problem.kind == "body-too-large":
            discard_unread_body()
        return problem_response(problem)

    @app.errorhandler(HTTPException)
    def on_http_exception(error: HTTPException) -> Response:
        status = error.code or 500
        detail = error.description or ""
        if status == 413:
            discard_unread_body()
            detail = (f"request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes; "
                      "send fewer reports per request")
        # Keep Werkzeug's headers that matter to the client, e.g. Allow on a 405.
        headers = {k: v for k, v in error.get_headers() if k.lower() in ("allow",
                                                                           "retry-after")}
        return problem_response(Problem(_HTTP_KINDS.get(status, "http-error"), detail,
                                        status=status, headers=headers))

    @app.errorhandler(Exception)
    def on_unexpected(error: Exception) -> Response:
        storage = app.extensions.get("chorus.storage")
        if storage is not None and storage.unavailable(error):
            # The database, not this request: nothing was acknowledged, the client retries.
            # The storage logs the outage once, and once when it ends; not per request.
            return problem_response(Problem(
                "storage-unavailable", "the database cannot be used now; retry later",
                headers={"Retry-After": str(STORAGE_RETRY_AFTER)}))
        # Never leak internals: log the traceback (no request body), answer a generic 500.
        log.exception("unhandled error in %s %s", request.method, request.path)
        return problem_response(Problem("internal-error"))


def discard_unread_body() -> None:
    """Read and drop what is left of the request body, so that a 413 reaches the client.

    A body over the limit is refused before it is read. Answered over the unread bytes,
    gunicorn drains 64 KiB at most and closes the socket; the kernel then resets the
    connection, and a proxy still writing the body it buffered (nginx) sees a broken pipe and
    answers 502, which a client retries whole, in place of this 413, on which it splits the
    batch (issue 33 #7). Read only where the server ends the stream at the body's end
    (gunicorn's ``wsgi.input_terminated``), and never a body that says it is over
    :data:`DISCARD_LIMIT`: that one is reset as before. A slow client could hold the thread
    while it is read, but no longer than with a body under the limit (and gunicorn does not
    face clients: docs/deployment.md).
    """
    if not request.environ.get("wsgi.input_terminated"):
        return  # the stream may not end where the body does: reading could block
    length = request.content_length
    if length is not None and length > DISCARD_LIMIT:
        return
    stream = request.environ["wsgi.input"]
    left = DISCARD_LIMIT
    try:
        while left > 0:
            chunk = stream.read(min(left, 65536))
            if not chunk:
                return
            left -= len(chunk)
    except (OSError, ValueError):
        return  # the client went away: nothing to answer it anyway


def register_request_log(app: Flask) -> None:
    # Method, path, status and latency only: no client address, no body, no headers.
    @app.before_request
    def start_timer() -> None:
        g.chorus_started = time.perf_counter()

    @app.after_request
    def log_request(response: Response) -> Response:
        elapsed = time.perf_counter() - g.get("chorus_started", time.perf_counter())
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics: Metrics = app.extensions["chorus.metrics"]
        metrics.observe_latency(request.method, route, response.status_code, elapsed)
        if response.status_code >= 400 and request.path.endswith("/reports"):
            kind = (response.get_json(silent=True) or {}).get("type", "")
            reason = kind.rsplit("/", 1)[-1] or str(response.status_code)
            if reason in REQUEST_LEVEL_REJECTIONS:
                metrics.count_rejected_request(reason)
        log.info("%s %s %d %.1fms", request.method, request.path, response.status_code,
                 elapsed * 1000)
        # Every answer is what its Content-Type says: never sniffed into HTML or script.
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response
