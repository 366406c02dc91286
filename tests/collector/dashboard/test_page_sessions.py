"""The API opens no session: a signed-cookie session is the dashboard's alone (a session cookie
grants nothing on the API, and opening one cost a single report's request more than its
validation). The dashboard's pages keep theirs."""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask
from flask.sessions import NullSession


def test_api_requests_get_a_null_session_and_pages_a_real_one(
        make_app: Callable[..., Flask]) -> None:
    app = make_app()
    for path in ("/v1/reports", "/v1/campaigns/k/reports"):
        with app.test_request_context(path, method="POST",
                                      headers={"Cookie": "chorus_session=anything"}) as ctx:
            assert isinstance(ctx.session, NullSession)
    with app.test_request_context("/login") as ctx:
        assert not isinstance(ctx.session, NullSession)
        ctx.session["probe"] = 1  # a page can write its session
