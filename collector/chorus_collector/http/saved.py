"""Saved work over the API: the dashboard's candidate lists, views and boards (analyst).

``GET/POST /v1/campaigns/{name}/lists``, ``DELETE /v1/campaigns/{name}/lists/{id}``;
``GET /v1/campaigns/{name}/views``, ``DELETE /v1/campaigns/{name}/views/{id}`` (a view is
saved from a campaign's page, which checks its question); ``GET/POST /v1/boards``,
``GET/DELETE /v1/boards/{id}``, ``POST /v1/boards/{id}/panels``,
``DELETE /v1/boards/{id}/panels/{panel}``. The rows are ``storage/saved.py``'s.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from chorus_collector.http.api import campaign_named, json_body, require, storable_text, storage
from chorus_collector.problems import Problem
from chorus_collector.storage.saved import SECTIONS, Board, SavedList, SavedView, SavedWork

__all__ = ["MAX_NAME", "check_candidates", "check_name", "saved_routes", "view_link"]

saved_routes = Blueprint("chorus_saved", __name__)

MAX_NAME = 100


def check_name(what: str, text: object) -> str:
    """A saved thing's name: one line of 1 to MAX_NAME characters (shown escaped)."""
    name = text.strip() if isinstance(text, str) else ""
    if not name or len(name) > MAX_NAME or not storable_text(name) \
            or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise Problem("invalid-request", f"{what}'s name is one line of 1 to {MAX_NAME} "
                      "characters")
    return name


def check_candidates(candidates: tuple[str, ...]) -> tuple[str, ...]:
    """A list's strings as kept: one line each (the list is stored one per line)."""
    if not all(storable_text(c) and "\n" not in c and "\r" not in c for c in candidates):
        raise Problem("invalid-request", "a candidate is one line of text, without NUL")
    return candidates



def view_link(campaign: str, query: str) -> str:
    """The campaign page that asks a saved view's question."""
    return f"/campaigns/{campaign}" + (f"?{query}" if query else "")


def _saved() -> SavedWork:
    return SavedWork(storage())


def _now() -> float:
    now: float = current_app.extensions["chorus.clock"]()
    return now


def _list_json(saved: SavedList, campaign: str) -> dict[str, Any]:
    return {"id": saved.id, "campaign": campaign, "name": saved.name,
            "candidates": list(saved.candidates), "created_at": saved.created_at,
            "link": view_link(campaign, f"list={saved.id}")}


def _view_json(view: SavedView, campaign: str) -> dict[str, Any]:
    return {"id": view.id, "campaign": campaign, "name": view.name, "query": view.query,
            "created_at": view.created_at, "link": view_link(campaign, view.query)}


def _board_json(board: Board) -> dict[str, Any]:
    names = {stored.id: stored.campaign.name for stored in storage().list_campaigns()}
    return {"id": board.id, "name": board.name, "created_at": board.created_at,
            "panels": [{"id": p.id, "campaign": names[p.campaign_id], "section": p.section,
                        "view": p.view_id} for p in board.panels]}


@saved_routes.get("/v1/campaigns/<name>/lists")
def list_lists(name: str) -> Response:
    require("analyst")
    stored = campaign_named(name)
    return jsonify(lists=[_list_json(s, name) for s in _saved().lists(stored.id)])


@saved_routes.post("/v1/campaigns/<name>/lists")
def create_list(name: str) -> tuple[Response, int]:
    require("analyst")
    stored = campaign_named(name)
    body = json_body()
    if not isinstance(body, dict) or body.keys() != {"name", "candidates"} \
            or not isinstance(body["candidates"], list) \
            or not all(isinstance(c, str) for c in body["candidates"]):
        raise Problem("invalid-request", 'send {"name": "top pages", "candidates": '
                                         '["home", "news"]}')
    list_name = check_name("a list", body["name"])
    candidates = check_candidates(tuple(dict.fromkeys(
        c.strip() for c in body["candidates"] if c.strip())))
    limit = int(current_app.config["CHORUS"]["MAX_CANDIDATES"])
    if not 1 <= len(candidates) <= limit:
        raise Problem("invalid-request", f"a list holds 1 to {limit} distinct strings")
    saved = _saved().save_list(stored.id, list_name, candidates, _now())
    return jsonify(_list_json(saved, name)), 201


@saved_routes.delete("/v1/campaigns/<name>/lists/<int:id>")
def delete_list(name: str, id: int) -> tuple[str, int]:
    require("analyst")
    stored = campaign_named(name)
    found = _saved().get_list(id)
    if found is None or found.campaign_id != stored.id:
        raise Problem("not-found", f"{name} has no saved list {id}")
    _saved().delete_list(id)
    return "", 204


@saved_routes.get("/v1/campaigns/<name>/views")
def list_views(name: str) -> Response:
    require("analyst")
    stored = campaign_named(name)
    return jsonify(views=[_view_json(v, name) for v in _saved().views(stored.id)])


@saved_routes.delete("/v1/campaigns/<name>/views/<int:id>")
def delete_view(name: str, id: int) -> tuple[str, int]:
    require("analyst")
    stored = campaign_named(name)
    found = _saved().get_view(id)
    if found is None or found.campaign_id != stored.id:
        raise Problem("not-found", f"{name} has no saved view {id}")
    _saved().delete_view(id)
    return "", 204


@saved_routes.get("/v1/boards")
def list_boards() -> Response:
    require("analyst")
    return jsonify(boards=[{"id": b.id, "name": b.name, "created_at": b.created_at}
                           for b in _saved().boards()])


@saved_routes.post("/v1/boards")
def create_board() -> tuple[Response, int]:
    require("analyst")
    body = json_body()
    if not isinstance(body, dict) or body.keys() != {"name"}:
        raise Problem("invalid-request", 'send {"name": "weekly review"}')
    board = _saved().create_board(check_name("a board", body["name"]), _now())
    return jsonify(_board_json(board)), 201


def _board(id: int) -> Board:
    board = _saved().get_board(id)
    if board is None:
        raise Problem("not-found", f"no board has id {id}")
    return board


@saved_routes.get("/v1/boards/<int:id>")
def get_board(id: int) -> Response:
    require("analyst")
    return jsonify(_board_json(_board(id)))


@saved_routes.delete("/v1/boards/<int:id>")
def delete_board(id: int) -> tuple[str, int]:
    require("analyst")
    if not _saved().delete_board(id):
        raise Problem("not-found", f"no board has id {id}")
    return "", 204


@saved_routes.post("/v1/boards/<int:id>/panels")
def add_panel(id: int) -> tuple[Response, int]:
    require("analyst")
    board = _board(id)
    body = json_body()
    if not isinstance(body, dict) or not {"campaign", "section"} <= body.keys() \
            or not body.keys() <= {"campaign", "section", "view"} \
            or not isinstance(body["campaign"], str) or body["section"] not in SECTIONS \
            or not (body.get("view") is None or type(body.get("view")) is int):
        raise Problem("invalid-request", 'send {"campaign": NAME, "section": "estimates" or '
                                         '"series"} and optionally "view": a view\'s id')
    stored = campaign_named(body["campaign"])
    view_id = body.get("view")
    if view_id is not None:
        view = _saved().get_view(view_id)
        if view is None or view.campaign_id != stored.id:
            raise Problem("invalid-request", f"{stored.campaign.name} has no saved view "
                                             f"{view_id}")
    _saved().add_panel(board.id, stored.id, body["section"], view_id)
    return jsonify(_board_json(_board(id))), 201


@saved_routes.delete("/v1/boards/<int:id>/panels/<int:panel>")
def remove_panel(id: int, panel: int) -> tuple[str, int]:
    require("analyst")
    if not _saved().remove_panel(id, panel):
        raise Problem("not-found", f"board {id} has no panel {panel}")
    return "", 204
