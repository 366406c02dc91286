"""One error shape on the wire: RFC 9457 ``application/problem+json``.

Every error response, including Werkzeug's own (404, 405, 413…), goes through
:func:`problem_response`, with a stable ``type`` URI that clients can switch on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from flask import Response

from chorus_shared.wire import PROBLEM_BASE

__all__ = ["KINDS", "PROBLEM_BASE", "Kind", "Problem", "problem_response"]

MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True)
class Kind:
    """One kind of error: its usual status, its title (written once, here) and its meaning."""

    status: int
    title: str
    meaning: str


_REJECTED = "Report rejected"
_UNANSWERABLE = "Query cannot be answered"

#: Every error the collector and the shuffler answer, by the kind in its ``type`` URI. The
#: docs/http-api.md's error table lists them all (a test checks it).
KINDS: Mapping[str, Kind] = MappingProxyType({
    # The request as a whole.
    "malformed-json": Kind(400, "Malformed JSON", "the body is not JSON"),
    "invalid-request": Kind(400, "Invalid request", "JSON, but not the shape the route takes"),
    "unsupported-media-type": Kind(415, "Unsupported Media Type",
                                   "the body is not sent as application/json"),
    "body-too-large": Kind(413, "Request Entity Too Large",
                           "the body is larger than CHORUS_MAX_BODY_BYTES"),
    "too-many-reports": Kind(413, "Too many reports",
                             "more reports than CHORUS_MAX_REPORTS_PER_REQUEST"),
    "bad-request": Kind(400, "Bad Request", "the HTTP request itself is malformed"),
    "not-found": Kind(404, "Not Found", "no such route"),
    "method-not-allowed": Kind(405, "Method Not Allowed", "the route does not take the method"),
    "http-error": Kind(400, "HTTP error", "any other HTTP-level error (its own status)"),
    # Refused by the reverse proxy in front (deploy/nginx-errors.conf), before a collector.
    "request-timeout": Kind(408, "Request Timeout", "the proxy did not receive the request in "
                                                    "time (a slow client)"),
    "uri-too-long": Kind(414, "URI Too Long", "the request line is longer than 8 KiB"),
    "headers-too-large": Kind(431, "Request Header Fields Too Large",
                              "a request header is longer than 8 KiB"),
    # Who may ask.
    "unauthorized": Kind(401, "Authentication required", "the route needs a bearer token"),
    "forbidden": Kind(403, "Forbidden", "the token does not grant this route"),
    "rate-limited": Kind(429, "Too many requests",
                         "the address is over CHORUS_RATE_LIMIT; see Retry-After"),
    # Campaigns.
    "invalid-campaign": Kind(400, "Invalid campaign", "the campaign definition is refused"),
    "campaign-exists": Kind(409, "Campaign exists", "the name is taken by another config"),
    "unknown-campaign": Kind(404, "Unknown campaign", "no campaign has this name or digest"),
    "campaign-retired": Kind(410, "Campaign retired", "an admin retired the campaign: it "
                                                      "takes no new reports"),
    # One report (in a batch's results, or the whole answer for a single report).
    "invalid-report": Kind(400, _REJECTED, "the report does not fit the wire format"),
    "digest-mismatch": Kind(400, _REJECTED, "the report was made for another config version"),
    "report-conflict": Kind(409, _REJECTED, "the report ID was stored with other bytes"),
    "report-too-large": Kind(413, _REJECTED, "the payload exceeds CHORUS_MAX_PAYLOAD_BYTES"),
    "report-expired": Kind(400, _REJECTED, "the report is older than the campaign's expiry"),
    "report-too-early": Kind(400, _REJECTED, "the report's time is more than a bucket ahead"),
    "report-outside-schedule": Kind(400, _REJECTED, "the campaign has a schedule and the "
                                                    "report's time is outside it"),
    "sender-limit": Kind(409, _REJECTED, "the shuffler already holds "
                                         "CHORUS_SHUFFLER_MAX_REPORTS_PER_SENDER reports of this "
                                         "admitted sender, campaign and time bucket"),
    "invalid-shuffled-batch": Kind(400, "Invalid shuffled batch",
                                   "a batch header does not match the batch"),
    # Queries.
    "invalid-query": Kind(400, "Invalid query", "a query parameter is missing or malformed"),
    "window-misaligned": Kind(400, "Misaligned window",
                              "start and end must be multiples of the time precision"),
    "too-many-candidates": Kind(413, "Too many candidates",
                                "more candidates than CHORUS_MAX_CANDIDATES"),
    "invalid-batch-size": Kind(409, "Not enough reports",
                               "fewer reports in the window than the campaign's minimum"),
    "candidates-required": Kind(422, _UNANSWERABLE, "open strings need a candidate list "
                                "(discovery campaigns do not)"),
    "invalid-candidate": Kind(422, _UNANSWERABLE, "a candidate is invalid or listed twice"),
    "candidates-not-identifiable": Kind(422, _UNANSWERABLE,
                                        "the candidates cannot be told apart by the reports"),
    "query-too-large": Kind(422, _UNANSWERABLE, "too costly to decode in one query"),
    "too-many-points": Kind(422, _UNANSWERABLE, "a series of more than 1,000 points"),
    "windows-overlap": Kind(422, _UNANSWERABLE, "a comparison's two windows share time; "
                                                "its standard error assumes they do not"),
    "query-busy": Kind(503, "Query busy", "this worker's query threads are taken "
                                          "(CHORUS_QUERY_THREADS), or no query slot "
                                          "(CHORUS_QUERY_CONCURRENCY) freed within "
                                          "CHORUS_QUERY_WAIT; see Retry-After"),
    # Alert rules.
    "invalid-alert": Kind(400, "Invalid alert rule", "the alert rule is refused (its field "
                                                    "and why in detail)"),
    "alert-exists": Kind(409, "Alert rule exists", "another alert rule has this name"),
    "unknown-alert": Kind(404, "Unknown alert rule", "no alert rule has this name"),
    # The service.
    "internal-error": Kind(500, "Internal Server Error", "a bug: logged, never detailed"),
    "storage-unavailable": Kind(503, "Storage unavailable", "the database cannot be used now "
                                                       "(down, locked, full); see Retry-After"),
    "collector-unavailable": Kind(502, "Collector unavailable",
                                  "the shuffler or the proxy cannot reach a collector"),
})


class Problem(Exception):
    """An error the API reports to the caller; raised anywhere in a request handler.

    ``kind`` must be in :data:`KINDS`, which gives the status and the title; ``status``
    overrides the status only where one kind covers several (``http-error``).
    """

    def __init__(self, kind: str, detail: str = "", *, status: int | None = None,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        spec = KINDS[kind]  # an unknown kind is a bug: every kind is documented
        super().__init__(detail or spec.title)
        self.status = status or spec.status
        self.kind = kind
        self.title = spec.title
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": PROBLEM_BASE + self.kind, "title": self.title,
                                "status": self.status}
        if self.detail:
            body["detail"] = self.detail
        body.update(self.extra)
        return body


def problem_response(problem: Problem) -> Response:
    response = Response(json.dumps(problem.to_json()), status=problem.status, mimetype=MEDIA_TYPE)
    for key, value in problem.headers.items():
        response.headers[key] = value
    return response
