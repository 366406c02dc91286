"""The analysts' dashboard, served by the collector itself (Flask and Jinja, no second server).

Pages: the campaign list (``/``), a campaign's page (``/campaigns/<name>``: its estimates as a
chart and a full table, the series over time, the comparison of two windows, downloads), the
campaign designer (``/design``) and the sign-in (``/login``). Charts are SVG drawn on the server
(``charts``): the pages run no script and load nothing from another host.

Signing in takes the analyst or the admin token once, in a form; the session is a cookie
signed with the server's key (HttpOnly, SameSite=Strict), and every form that POSTs carries a
CSRF token (Flask-WTF). The token itself is never put in a URL, a cookie or a log line. The
HTTP API keeps taking bearer tokens only: a session cookie grants nothing there.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from flask import Flask, Request
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from flask_wtf.csrf import CSRFProtect

from chorus_collector.dashboard.views import dashboard
from chorus_collector.http.auth import TokenVerifier
from chorus_collector.http.ratelimit import RateLimiter

__all__ = ["init_dashboard"]

SESSION_COOKIE = "chorus_session"
API_PREFIX = "/v1/"  # the HTTP API's routes: bearer tokens only, no session
SIGN_IN_RATE, SIGN_IN_BURST = 1 / 6, 10


def init_dashboard(app: Flask, verifier: TokenVerifier, settings: dict[str, Any]) -> None:
    """Register the dashboard on ``app``; the API's blueprint stays outside CSRF checks (it
    takes bearer tokens, never cookies)."""
    key = settings["SECRET_KEY"] or verifier.session_key()
    # With no key nobody can sign in (no token is configured): a random key keeps Flask's
    # session machinery working for the sign-in page's CSRF token.
    app.secret_key = key if key is not None else _random_key()
    app.session_interface = PageSessions()
    app.config.update(
        SESSION_COOKIE_NAME=SESSION_COOKIE, SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_SECURE=bool(settings["SECURE_COOKIES"]),
        PERMANENT_SESSION_LIFETIME=timedelta(hours=settings["SESSION_HOURS"]),
        WTF_CSRF_TIME_LIMIT=settings["SESSION_HOURS"] * 3600,
        # The check is ours to call: only the dashboard's own POSTs need it.
        WTF_CSRF_CHECK_DEFAULT=False,
    )
    # Tokens are long and random; still, guesses are slowed to a burst of 10 per address,
    # then one every 6 s (per worker process).
    app.extensions["chorus.signin_limit"] = RateLimiter(SIGN_IN_RATE, SIGN_IN_BURST,
                                                        time.monotonic)
    csrf = CSRFProtect(app)
    app.extensions["chorus.csrf"] = csrf
    app.register_blueprint(dashboard)


class PageSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, opened for the dashboard's pages only.

    A request to the API gets Flask's null session (its cookie is neither read nor written):
    a session cookie grants nothing there, and opening one (a serializer built, the cookies
    parsed, then saved) cost a single report's request more than validating the report.
    """

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if request.path.startswith(API_PREFIX):
            return None  # Flask makes it a null session, never saved
        return super().open_session(app, request)


def _random_key() -> bytes:
    import secrets

    return secrets.token_bytes(32)
