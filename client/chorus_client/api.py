"""Admin and analyst calls to a collector: campaigns and estimates.

The CLI is a thin layer over :class:`CollectorAPI`; tests call it too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from chorus_client.errors import APIError, ClientError
from chorus_client.retry import RetryPolicy, send_with_retries
from chorus_client.transport import RequestsTransport, Response, Transport

__all__ = ["CollectorAPI"]


class CollectorAPI:
    def __init__(self, url: str, token: str | None = None, *,
                 transport: Transport | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.transport: Transport = transport if transport is not None else RequestsTransport()
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_attempts=3)

    def _call(self, method: str, path: str, body: Any = None,
              accept: str = "application/json") -> Response:
        headers = {"Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        response = send_with_retries(self.transport, method, self.url + path, data, headers,
                                     timeout=self.timeout, policy=self.retry)
        if not 200 <= response.status < 300:
            try:
                problem = json.loads(response.body)
            except ValueError:
                problem = None
            raise APIError(response.status, problem if isinstance(problem, dict) else None,
                           response.body.decode("utf-8", "replace"))
        return response

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(self._call(method, path, body).body)

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/healthz")
        return result

    def create_campaign(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create a campaign (admin). Returns its public config, with any warnings."""
        if not isinstance(spec, Mapping):
            raise ClientError("a campaign definition is a JSON object")
        result: dict[str, Any] = self._json("POST", "/v1/campaigns", dict(spec))
        return result

    def submit(self, reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Upload already-perturbed reports as they are (no token needed unless an ingest key
        is configured, which then goes in ``token``). Returns the per-report statuses."""
        result: dict[str, Any] = self._json("POST", "/v1/reports",
                                            {"reports": [dict(r) for r in reports]})
        return result

    def list_campaigns(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._json("GET", "/v1/campaigns")["campaigns"]
        return result

    def retire_campaign(self, name: str) -> dict[str, Any]:
        """Retire a campaign (admin): its reports are refused from now on; its estimates stay
        readable. Returns its public config with ``retired_at``."""
        result: dict[str, Any] = self._json(
            "POST", f"/v1/campaigns/{quote(name, safe='')}/retire", {})
        return result

    def get_campaign(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", f"/v1/campaigns/{quote(name, safe='')}")
        return result

    def estimates(self, name: str, *, candidates: Sequence[str] = (), start: int | None = None,
                  end: int | None = None, postprocessing: str = "none") -> dict[str, Any]:
        """Estimates as JSON (analyst)."""
        result: dict[str, Any] = self._json(
            "POST", f"/v1/campaigns/{quote(name, safe='')}/estimates",
            {"candidates": list(candidates), "start": start, "end": end, "format": "json",
             "postprocessing": postprocessing},
        )
        return result

    def estimates_csv(self, name: str, *, candidates: Sequence[str] = (),
                      start: int | None = None, end: int | None = None,
                      postprocessing: str = "none") -> str:
        response = self._call(
            "POST", f"/v1/campaigns/{quote(name, safe='')}/estimates",
            {"candidates": list(candidates), "start": start, "end": end, "format": "csv",
             "postprocessing": postprocessing},
            accept="text/csv",
        )
        return response.body.decode()
