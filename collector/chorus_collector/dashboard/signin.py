"""Who is signed in to the dashboard: the role kept in the signed session cookie."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar
from urllib.parse import urlsplit

from flask import current_app, redirect, request, session, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from chorus_collector.http.auth import Role, TokenVerifier
from chorus_collector.problems import Problem

__all__ = ["current_role", "local_target", "require_role", "sign_in", "sign_out"]

P = ParamSpec("P")
R = TypeVar("R")


def _verifier() -> TokenVerifier:
    verifier: TokenVerifier = current_app.extensions["chorus.tokens"]
    return verifier


def current_role() -> Role | None:
    """The signed-in role, if the session names one whose token has not changed since."""
    role = session.get("role")
    if role not in ("admin", "analyst"):
        return None
    if session.get("token") != _verifier().fingerprint(role):
        return None  # the token was changed (or removed): the sign-in no longer holds
    result: Role = role
    return result


def sign_in(token: str) -> Role | None:
    """Start a session for the token's role; None (and the session as it was) for any other
    token."""
    role = _verifier().role_of(token) if token.strip() else None
    if role is not None:
        session.clear()  # nothing from before the sign-in carries over (the CSRF token too)
        session["role"] = role
        session["token"] = _verifier().fingerprint(role)
        session.permanent = True
    return role


def sign_out() -> None:
    session.clear()


def local_target(target: str | None) -> str:
    """Where to go after signing in: a path on this site only (no open redirect)."""
    if not target:
        return url_for("dashboard.campaigns")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//") \
            or "\\" in target:
        return url_for("dashboard.campaigns")
    return target


def require_role(role: Role) -> Callable[[Callable[P, R]], Callable[P, R | WerkzeugResponse]]:
    """Pages for the analyst (admins too) or the admin only: the sign-in page otherwise."""

    def decorate(view: Callable[P, R]) -> Callable[P, R | WerkzeugResponse]:
        @functools.wraps(view)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R | WerkzeugResponse:
            held = current_role()
            if held is None:
                return redirect(url_for("dashboard.login", next=request.full_path.rstrip("?")))
            if role == "admin" and held != "admin":
                raise Problem("forbidden", "this page is for the admin; you are signed in with "
                                           "the analyst token")
            return view(*args, **kwargs)

        return wrapped

    return decorate
