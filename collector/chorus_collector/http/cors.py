"""Cross-origin access for browser clients, on the routes a client uses and no other.

A web app's page runs on its own origin and reports to the collector's: the browser lets the
page read the answer (accepted, duplicate, 413 split, 503 retry later) only when the answer
says so (CORS), and asks first (a preflight ``OPTIONS``) for a JSON body or an ingest key.
Only the client's routes are opened: fetching a campaign's public config and sending
reports. Everything an analyst or an admin calls stays same-origin, so a page elsewhere can
never read estimates through a signed-in browser.

Never ``Access-Control-Allow-Credentials``: a Chorus client sends no cookies
(``credentials: "omit"``), and a collector that allowed them would invite a page to link
reports to a browser's session. ``CORS_ORIGINS`` is ``*`` by default, which is safe for
these routes because they need no credentials, and anyone can send reports with curl anyway;
list origins to let only your own sites' pages read the answers, or leave it empty to open
nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from flask import Flask, Response, request

from chorus_collector.settings import SettingsError

__all__ = ["CLIENT_PATHS", "CorsPolicy", "install_cors", "policy_from_setting"]

#: The client's routes: a campaign's public config, and reports (any campaign, or one).
CLIENT_PATHS = re.compile(r"^/v1/(reports|campaigns/[^/]+|campaigns/[^/]+/reports)$")

#: What a client sends beyond a simple request: a JSON body and, where the collector asks for
#: one, the ingest key.
_ALLOWED_HEADERS = "Content-Type, Authorization"
#: What a client reads besides the body: when to retry, and the config's digest.
_EXPOSED_HEADERS = "Retry-After, ETag"
#: A day: browsers cap it lower (Chromium at two hours), which only costs a preflight.
_MAX_AGE = "86400"


class CorsPolicy:
    """Which origins may read the client routes' answers: every one (``*``), a list, or none."""

    def __init__(self, origins: str | Iterable[str]) -> None:
        listed = origins.split(",") if isinstance(origins, str) else list(origins)
        cleaned = [o.strip().rstrip("/") for o in listed if o.strip()]
        self.any = "*" in cleaned
        self.origins = frozenset(o for o in cleaned if o != "*")
        for origin in self.origins:
            if not re.fullmatch(r"https?://[^/\s]+", origin):
                raise ValueError(f"CORS_ORIGINS: {origin!r} is not an origin "
                                 "(scheme://host[:port], no path), nor *")

    @property
    def opens_anything(self) -> bool:
        return self.any or bool(self.origins)

    def allowed(self, origin: str | None) -> str | None:
        """The Access-Control-Allow-Origin value for a request from ``origin``, or None."""
        if origin is None:
            return None
        if self.any:
            return "*"
        return origin if origin in self.origins else None


def policy_from_setting(text: str | None) -> CorsPolicy:
    """The ``CORS_ORIGINS`` setting as a policy, or :class:`SettingsError` saying what is wrong."""
    try:
        return CorsPolicy(text or "")
    except ValueError as error:
        raise SettingsError(str(error)) from None


def install_cors(app: Flask, policy: CorsPolicy, paths: re.Pattern[str] = CLIENT_PATHS) -> None:
    """Answer preflights and mark answers on ``paths`` readable by the allowed origins; errors
    too (problem documents), so a client can tell a refusal from a network failure."""
    if not policy.opens_anything:
        return

    @app.after_request
    def allow_cross_origin(response: Response) -> Response:
        if not paths.match(request.path):
            return response
        if not policy.any:
            # The answer differs by Origin: a cache must not serve one origin's to another.
            response.vary.add("Origin")
        allowed = policy.allowed(request.headers.get("Origin"))
        if allowed is None:
            return response
        response.headers["Access-Control-Allow-Origin"] = allowed
        response.headers["Access-Control-Expose-Headers"] = _EXPOSED_HEADERS
        if request.method == "OPTIONS":
            # Flask answers OPTIONS for every route itself (with Allow): a preflight.
            response.headers["Access-Control-Allow-Methods"] = response.headers.get(
                "Allow", "GET, POST, OPTIONS")
            response.headers["Access-Control-Allow-Headers"] = _ALLOWED_HEADERS
            response.headers["Access-Control-Max-Age"] = _MAX_AGE
        return response
