"""Marks on the time axis ("v2.3 shipped"), drawn on every series they fall in: the admin adds
and removes them, anyone who reads estimates reads them.

``POST /v1/annotations`` {time, text, campaign?}, ``GET /v1/annotations?campaign&start&end``,
``DELETE /v1/annotations/{id}``. A mark without a campaign shows on every campaign's series.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from chorus_collector.http.api import campaign_named, json_body, require, storage
from chorus_collector.problems import Problem
from chorus_collector.storage import Annotation

__all__ = ["MAX_TEXT", "annotation_json", "annotation_routes"]

annotation_routes = Blueprint("chorus_annotations", __name__)

#: The longest mark: a release name and a few words, drawn beside a series.
MAX_TEXT = 200
MAX_TIME = 1 << 40  # as a report's time


def annotation_json(mark: Annotation) -> dict[str, Any]:
    name = None if mark.campaign_id is None else \
        storage().get_campaign_by_id(mark.campaign_id).campaign.name
    return {"id": mark.id, "time": mark.time, "text": mark.text, "campaign": name,
            "created_at": mark.created_at}


def _time(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value < MAX_TIME:
        raise Problem("invalid-request", f"{what} is Unix seconds, an integer from 0 to 2^40")
    return value


@annotation_routes.post("/v1/annotations")
def create_annotation() -> tuple[Response, int]:
    require("admin")
    body = json_body()
    if not isinstance(body, dict) or not {"time", "text"} <= body.keys() \
            or not body.keys() <= {"time", "text", "campaign"}:
        raise Problem("invalid-request", 'send {"time": UNIX_SECONDS, "text": "v2.3 shipped"} '
                                         'and optionally "campaign": NAME')
    time = _time(body["time"], "time")
    text = body["text"]
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT \
            or any(ord(c) < 32 for c in text):
        raise Problem("invalid-request", f"text is one line of 1 to {MAX_TEXT} characters")
    campaign = body.get("campaign")
    if campaign is not None and not isinstance(campaign, str):
        raise Problem("invalid-request", "campaign is a campaign's name, or left out for all")
    campaign_id = None if campaign is None else campaign_named(campaign).id
    mark = storage().add_annotation(time, text.strip(), campaign_id,
                                     current_app.extensions["chorus.clock"]())
    return jsonify(annotation_json(mark)), 201


@annotation_routes.get("/v1/annotations")
def list_annotations() -> Response:
    require("analyst")
    name = request.args.get("campaign")
    campaign_id = None if not name else campaign_named(name).id
    bounds = {}
    for key in ("start", "end"):
        text = request.args.get(key)
        if text is not None:
            if not text.isdigit():
                raise Problem("invalid-query", f"{key} is Unix seconds")
            bounds[key] = _time(int(text), key)
    marks = storage().annotations(campaign_id, bounds.get("start"), bounds.get("end"))
    return jsonify(annotations=[annotation_json(m) for m in marks])


@annotation_routes.delete("/v1/annotations/<int:id>")
def delete_annotation(id: int) -> tuple[str, int]:
    require("admin")
    # An id past 64 bits names no row (and would overflow the database's integer).
    if id >= 1 << 63 or not storage().delete_annotation(id):
        raise Problem("not-found", f"no annotation has id {id}")
    return "", 204
