"""Transports: how the client sends bytes. Injectable, with a timeout on every request.

:class:`RequestsTransport` is the default. Tests use a scripted fake or an in-process bridge
to the collector's WSGI app; both only need to implement :class:`Transport`.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.cookiejar import DefaultCookiePolicy
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests

from chorus_client.errors import TransportError

__all__ = ["GENERIC_HEADERS", "RequestsTransport", "Response", "Transport", "WSGITransport"]


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None

    def json_object(self) -> dict[str, Any] | None:
        """The body as a JSON object, or None if it is not one."""
        try:
            body = json.loads(self.body)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None


class Transport(Protocol):
    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        """Send one request. Raise :class:`TransportError` if no response arrived."""
        ...


#: The only headers besides a request's own: the same for every install and every version.
GENERIC_HEADERS = {"User-Agent": "chorus-client", "Accept-Encoding": "identity",
                   "Connection": "close"}


class RequestsTransport:
    """HTTP(S) through a :class:`requests.Session` that cannot link requests.

    No cookie is ever stored or sent (a collector-set cookie would tie every later request to
    the install), no connection is reused (one TLS connection would link the requests sent
    over it), and the headers are generic: no library or platform version.
    """

    def __init__(self, session: requests.Session | None = None, *,
                 reuse_connections: bool = False) -> None:
        self.session = session or requests.Session()
        self.session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        self.session.headers.clear()
        self.session.headers.update(GENERIC_HEADERS)
        if reuse_connections:  # simulations of many devices in one process only
            del self.session.headers["Connection"]

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        # requests applies its timeout to the connection and to each read; reading the body
        # in chunks against a deadline bounds the whole exchange, even against a server that
        # trickles its answer.
        started = time.monotonic()
        try:
            reply = self.session.request(method, url, data=body, headers=dict(headers),
                                         timeout=timeout, allow_redirects=False, stream=True)
            with reply:
                chunks = []
                for chunk in reply.iter_content(65536):
                    chunks.append(chunk)
                    if time.monotonic() - started > timeout:
                        raise TransportError(f"{method} {url}: no complete answer within "
                                             f"{timeout} s")
                content = b"".join(chunks)
        except requests.Timeout as error:
            raise TransportError(f"timed out after {timeout} s: {method} {url}") from error
        except requests.ConnectionError as error:
            raise TransportError(f"{method} {url}: {_connection_failure(error)}") from error
        except requests.RequestException as error:
            raise TransportError(f"{method} {url} failed: {error}") from error
        return Response(reply.status_code, content, dict(reply.headers))

    def close(self) -> None:
        self.session.close()


def _connection_failure(error: requests.ConnectionError) -> str:
    """urllib3's chain of wrappers, said in a few words."""
    text = str(error)
    for marker, words in (("Connection refused", "connection refused"),
                          ("Name or service not known", "unknown host"),
                          ("Failed to resolve", "unknown host"),
                          ("timed out", "timed out"),
                          ("Network is unreachable", "network unreachable")):
        if marker in text:
            return words
    return "could not connect"


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WSGITransport:
    """An in-process bridge to any WSGI app, e.g. the collector's ``create_app()``: for
    end-to-end tests of an integration without a server or a socket. Records what it sent."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.sent: list[tuple[str, str, bytes | None]] = []

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        if timeout <= 0:
            raise ValueError("timeouts are always on")
        self.sent.append((method, url, body))
        parts = urlsplit(url)
        data = body or b""
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": parts.path or "/",
            "QUERY_STRING": parts.query, "SERVER_NAME": parts.hostname or "localhost",
            "SERVER_PORT": str(parts.port or 80), "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": str(len(data)),
            "wsgi.version": (1, 0), "wsgi.url_scheme": parts.scheme or "http",
            "wsgi.input": io.BytesIO(data), "wsgi.errors": io.StringIO(),
            "wsgi.multithread": True, "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        for name, value in headers.items():
            key = name.upper().replace("-", "_")
            if key == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = value
            else:
                environ[f"HTTP_{key}"] = value
        status: list[str] = []
        reply_headers: dict[str, str] = {}

        def start_response(line: str, pairs: list[tuple[str, str]], *_: Any) -> None:
            status.append(line)
            reply_headers.update(pairs)

        chunks = self.app(environ, start_response)
        try:
            content = b"".join(chunks)
        finally:
            closer = getattr(chunks, "close", None)
            if callable(closer):
                closer()
        return Response(int(status[0].split()[0]), content, reply_headers)
