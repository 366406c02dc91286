"""Transports: how the client sends bytes. Injectable, with a timeout on every request.

:class:`RequestsTransport` is the default. Tests use a scripted fake or an in-process bridge
to the collector's WSGI app; both only need to implement :class:`Transport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import requests

from chorus_client.errors import TransportError

__all__ = ["RequestsTransport", "Response", "Transport"]


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


class Transport(Protocol):
    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        """Send one request. Raise :class:`TransportError` if no response arrived."""
        ...


class RequestsTransport:
    """HTTP(S) through a pooled :class:`requests.Session`."""

    def __init__(self, session: requests.Session | None = None) -> None:
        self.session = session or requests.Session()

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        try:
            reply = self.session.request(method, url, data=body, headers=dict(headers),
                                         timeout=timeout, allow_redirects=False)
        except requests.Timeout as error:
            raise TransportError(f"timed out after {timeout} s: {method} {url}") from error
        except requests.RequestException as error:
            raise TransportError(f"{method} {url} failed: {error}") from error
        return Response(reply.status_code, reply.content, dict(reply.headers))

    def close(self) -> None:
        self.session.close()
