"""Admin and analyst calls to a collector: campaigns, estimates, series, comparisons and
alert rules.

The CLI is a thin layer over :class:`CollectorAPI`; tests call it too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from chorus_client.errors import APIError, ClientError
from chorus_client.retry import RetryPolicy, send_with_retries
from chorus_client.transport import RequestsTransport, Response, Transport

__all__ = ["MAX_GET_URL", "CollectorAPI"]

#: A question whose URL would be longer than this goes as a POST body: proxies and servers
#: refuse URLs past a few kilobytes, and a long candidate list makes one.
MAX_GET_URL = 2000
#: body field → the repeatable query parameter that carries it in a GET
_LIST_PARAMETERS = {"candidates": "candidate", "values": "value"}


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

    def _ask(self, path: str, question: Mapping[str, Any], accept: str) -> Response:
        """An analyst question as a GET (cacheable, readable in logs), or as a POST with the
        same fields when its URL would be too long. Fields that are None are left out."""
        pairs: list[tuple[str, str]] = []
        for name, value in question.items():
            if name in _LIST_PARAMETERS:
                pairs += [(_LIST_PARAMETERS[name], str(item)) for item in value]
            elif value is not None:
                pairs.append((name, str(value)))
        query = urlencode(pairs)
        if len(self.url + path) + 1 + len(query) <= MAX_GET_URL:
            return self._call("GET", f"{path}?{query}" if query else path, accept=accept)
        body = {name: (list(value) if name in _LIST_PARAMETERS else value)
                for name, value in question.items() if value is not None}
        return self._call("POST", path, body, accept=accept)

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", "/healthz")
        return result

    def create_campaign(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create a campaign (admin). Returns its public config, with any warnings."""
        return self.ensure_campaign(spec)[0]

    def ensure_campaign(self, spec: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create a campaign (admin), or find it already there with this very definition
        (campaigns are immutable: a different one under the name is an error). Returns its
        public config with any warnings, and whether this call created it."""
        if not isinstance(spec, Mapping):
            raise ClientError("a campaign definition is a JSON object")
        response = self._call("POST", "/v1/campaigns", dict(spec))
        result: dict[str, Any] = json.loads(response.body)
        return result, response.status == 201

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
                  end: int | None = None, postprocessing: str | None = None,
                  quantiles: Sequence[float] | None = None,
                  ranges: Sequence[tuple[float, float]] = (),
                  joints: Sequence[Sequence[str]] = ()) -> dict[str, Any]:
        """Estimates as JSON (analyst). ``postprocessing`` None is the campaign's default
        ("none", the unbiased estimate, except Square Wave's "ems"); ``quantiles`` and
        ``ranges`` are for distribution campaigns (default quantiles 0.5, 0.95, 0.99);
        ``joints`` for record campaigns of mechanism "marginals": the attribute tuples whose
        joint distributions to answer, e.g. ``[("browser", "os")]`` (default: every pair, up
        to 10)."""
        result: dict[str, Any] = self._json(
            "POST", f"/v1/campaigns/{quote(name, safe='')}/estimates",
            self._estimate_body(candidates, start, end, "json", postprocessing, quantiles,
                                ranges, joints))
        return result

    def estimates_csv(self, name: str, *, candidates: Sequence[str] = (),
                      start: int | None = None, end: int | None = None,
                      postprocessing: str | None = None,
                      quantiles: Sequence[float] | None = None,
                      ranges: Sequence[tuple[float, float]] = (),
                      joints: Sequence[Sequence[str]] = ()) -> str:
        response = self._call(
            "POST", f"/v1/campaigns/{quote(name, safe='')}/estimates",
            self._estimate_body(candidates, start, end, "csv", postprocessing, quantiles,
                                ranges, joints),
            accept="text/csv",
        )
        return response.body.decode()

    @staticmethod
    def _estimate_body(candidates: Sequence[str], start: int | None, end: int | None,
                       fmt: str, postprocessing: str | None, quantiles: Sequence[float] | None,
                       ranges: Sequence[tuple[float, float]],
                       joints: Sequence[Sequence[str]]) -> dict[str, Any]:
        body: dict[str, Any] = {"candidates": list(candidates), "start": start, "end": end,
                                "format": fmt, "postprocessing": postprocessing}
        if quantiles is not None:
            body["quantiles"] = list(quantiles)
        if ranges:
            body["ranges"] = [list(pair) for pair in ranges]
        if joints:  # only when asked: a collector without record campaigns refuses the field
            body["joints"] = [list(names) for names in joints]
        return body

    def series(self, name: str, *, start: int | None = None, end: int | None = None,
               step: int | str = "bucket", values: Sequence[str] = (), top: int | None = None,
               candidates: Sequence[str] = ()) -> dict[str, Any]:
        """Estimates per point of ``step`` ("bucket", "day", "week" or seconds) over
        [start, end), one series per value (analyst): the ``kind: "series"`` JSON answer."""
        question = _series_question(start, end, step, values, top, candidates)
        result: dict[str, Any] = json.loads(self._ask(
            f"/v1/campaigns/{quote(name, safe='')}/series", {**question, "format": "json"},
            "application/json").body)
        return result

    def series_csv(self, name: str, *, start: int | None = None, end: int | None = None,
                   step: int | str = "bucket", values: Sequence[str] = (),
                   top: int | None = None, candidates: Sequence[str] = ()) -> str:
        """The series as the collector's CSV: one row per (value, point)."""
        question = _series_question(start, end, step, values, top, candidates)
        return self._ask(f"/v1/campaigns/{quote(name, safe='')}/series",
                         {**question, "format": "csv"}, "text/csv").body.decode()

    def compare(self, name: str, *, baseline_start: int | None = None,
                baseline_end: int | None = None, start: int | None = None,
                end: int | None = None, candidates: Sequence[str] = (),
                correction: str = "benjamini-hochberg", alpha: float = 0.05,
                ) -> dict[str, Any]:
        """Each value's change from the baseline window to the current one [start, end), with
        p-values adjusted by ``correction`` (analyst): the ``kind: "comparison"`` JSON answer."""
        question = _compare_question(baseline_start, baseline_end, start, end, candidates,
                                     correction, alpha)
        result: dict[str, Any] = json.loads(self._ask(
            f"/v1/campaigns/{quote(name, safe='')}/compare", {**question, "format": "json"},
            "application/json").body)
        return result

    def compare_csv(self, name: str, *, baseline_start: int | None = None,
                    baseline_end: int | None = None, start: int | None = None,
                    end: int | None = None, candidates: Sequence[str] = (),
                    correction: str = "benjamini-hochberg", alpha: float = 0.05) -> str:
        """The comparison as the collector's CSV: one row per value."""
        question = _compare_question(baseline_start, baseline_end, start, end, candidates,
                                     correction, alpha)
        return self._ask(f"/v1/campaigns/{quote(name, safe='')}/compare",
                         {**question, "format": "csv"}, "text/csv").body.decode()

    def create_alert(self, rule: Mapping[str, Any]) -> dict[str, Any]:
        """Create an alert rule (admin; docs/alerts.md). Returns it as the collector shows it:
        the webhook's origin only, never the secret."""
        result: dict[str, Any] = self._json("POST", "/v1/alerts", dict(rule))
        return result

    def list_alerts(self, campaign: str | None = None) -> list[dict[str, Any]]:
        """The alert rules (of one campaign) (analyst)."""
        path = "/v1/alerts"
        if campaign is not None:
            path += "?" + urlencode({"campaign": campaign})
        result: list[dict[str, Any]] = self._json("GET", path)["alerts"]
        return result

    def get_alert(self, name: str) -> dict[str, Any]:
        """One alert rule, with the values significant now (analyst)."""
        result: dict[str, Any] = self._json("GET", f"/v1/alerts/{quote(name, safe='')}")
        return result

    def delete_alert(self, name: str) -> None:
        """Delete an alert rule and its notifications (admin)."""
        self._call("DELETE", f"/v1/alerts/{quote(name, safe='')}")

    def alert_firings(self, name: str, limit: int = 50) -> list[dict[str, Any]]:
        """An alert rule's recent notifications, newest first (analyst)."""
        result: list[dict[str, Any]] = self._json(
            "GET", f"/v1/alerts/{quote(name, safe='')}/firings?limit={int(limit)}")["firings"]
        return result


def _series_question(start: int | None, end: int | None, step: int | str,
                     values: Sequence[str], top: int | None,
                     candidates: Sequence[str]) -> dict[str, Any]:
    if isinstance(values, str) or isinstance(candidates, str):
        raise ClientError("values and candidates are lists of strings, not one string")
    return {"start": start, "end": end, "step": step, "values": list(values), "top": top,
            "candidates": list(candidates)}


def _compare_question(baseline_start: int | None, baseline_end: int | None,
                      start: int | None, end: int | None, candidates: Sequence[str],
                      correction: str, alpha: float) -> dict[str, Any]:
    if isinstance(candidates, str):
        raise ClientError("candidates is a list of strings, not one string")
    return {"baseline_start": baseline_start, "baseline_end": baseline_end, "start": start,
            "end": end, "candidates": list(candidates), "correction": correction,
            "alpha": alpha}
