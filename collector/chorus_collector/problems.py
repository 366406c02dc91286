"""One error shape on the wire: RFC 9457 ``application/problem+json``.

Every error response, including Werkzeug's own (404, 405, 413…), goes through
:func:`problem_response`, with a stable ``type`` URI that clients can switch on.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response

from chorus_shared.wire import PROBLEM_BASE

__all__ = ["PROBLEM_BASE", "Problem", "problem_response"]

MEDIA_TYPE = "application/problem+json"


class Problem(Exception):
    """An error the API reports to the caller; raised anywhere in a request handler."""

    def __init__(self, status: int, kind: str, title: str, detail: str = "",
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail or title)
        self.status = status
        self.kind = kind
        self.title = title
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
