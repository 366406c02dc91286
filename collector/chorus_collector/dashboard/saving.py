"""Saved work on the dashboard: a page's question as a link, candidate lists by name, and the
panels of a board (the routes are in ``views``; the rows in ``storage/saved.py``).

A campaign page's question is its URL's query string. A strings page (RAPPOR's candidates, a
discovery campaign's re-estimated list) is a POST form, so its question is rebuilt here from
the form: what was asked, the chosen saved list by id (``list=3``), and any strings typed or
uploaded beside it. That query, asked by GET, answers the same page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from markupsafe import Markup

from chorus_collector.dashboard import pages
from chorus_collector.http.saved import MAX_NAME, check_candidates, check_name, view_link
from chorus_collector.problems import Problem
from chorus_collector.storage import Storage, StoredCampaign
from chorus_collector.storage.saved import SECTIONS, Board, Panel, SavedList, SavedView, SavedWork

__all__ = ["MAX_NAME", "Asked", "PanelView", "asked", "board_panels", "check_candidates",
           "check_name", "page_values", "view_link"]

#: The keys of a page's question (what its form sends), and the chosen list.
QUERY_KEYS = frozenset(pages.PageParameters().form_values()) | {"list"}


def chosen_list(saved: SavedWork, stored: StoredCampaign, text: str) -> SavedList | None:
    """The campaign's saved list named by ``text``: its id, or its name; empty: none."""
    text = text.strip()
    if not text:
        return None
    lists = saved.lists(stored.id)
    found = next((s for s in lists if str(s.id) == text), None) \
        or next((s for s in lists if s.name == text), None)
    if found is None:
        raise Problem("not-found", f"{stored.campaign.name} has no saved list {text!r}")
    return found


@dataclass(frozen=True)
class Asked:
    """A campaign page's question: its parameters, the saved list chosen, the strings typed
    or uploaded beside it, and the query string that asks all of it again by GET."""

    parameters: pages.PageParameters
    chosen: SavedList | None
    typed: tuple[str, ...]
    query: str


def asked(storage: Storage, stored: StoredCampaign, values: Mapping[str, str],
          uploaded: str | None, extent: tuple[int, int] | None, now: float) -> Asked:
    """Read a page's question (its form or a saved query) with its saved list resolved."""
    chosen = chosen_list(SavedWork(storage), stored, values.get("list", ""))
    lines = (values.get("candidates") or "").splitlines() + (uploaded or "").splitlines()
    typed = tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))
    listed = chosen.candidates if chosen is not None else ()
    merged = {**values, "candidates": "\n".join((*listed, *typed))}
    parameters = pages.read_parameters(merged, None, stored, extent, now=now)
    items = [(key, value) for key, value in values.items()
             if key in QUERY_KEYS and key not in ("candidates", "list") and value.strip()]
    if chosen is not None:
        items.append(("list", str(chosen.id)))
    if typed:
        items.append(("candidates", "\n".join(typed)))
    return Asked(parameters, chosen, typed, urlencode(items))


def page_values(query: str) -> dict[str, str]:
    """A saved query's values, as a form would send them (the last of a repeated key)."""
    return dict(parse_qsl(query, keep_blank_values=False))


@dataclass
class PanelView:
    """One panel of a board as drawn: its campaign, what it shows, its chart and figures."""

    panel: Panel
    campaign: str
    label: str
    link: str
    section: pages.Section | None = None
    error: str | None = None

    @property
    def chart(self) -> Markup | None:
        return None if self.section is None else self.section.chart


def board_panels(storage: Storage, board: Board,
                 ask: Callable[[StoredCampaign, Mapping[str, str]], Asked]) -> list[PanelView]:
    """Each panel's section, computed with the page's own code (``pages.campaign_view``) for
    its saved query, or the page's defaults. A panel that cannot be asked (its list was
    deleted) says why; the others are drawn."""
    saved = SavedWork(storage)
    drawn = []
    for panel in board.panels:
        stored = storage.get_campaign_by_id(panel.campaign_id)
        name = stored.campaign.name
        view: SavedView | None = None if panel.view_id is None else saved.get_view(panel.view_id)
        query = "" if view is None else view.query
        label = f"{name} · {panel.section}" + ("" if view is None else f" · {view.name}")
        shown = PanelView(panel, name, label, view_link(name, query) + f"#{panel.section}")
        try:
            parameters = ask(stored, page_values(query)).parameters
        except Problem as problem:
            shown.error = problem.detail or problem.title
        else:
            page = pages.campaign_view(storage, stored, parameters)
            shown.section = page.estimates if panel.section == "estimates" else page.series
            shown.error = shown.section.error
        drawn.append(shown)
    return drawn


def panel_choices(storage: Storage) -> list[tuple[str, str]]:
    """What a new panel may show: each campaign's page as it opens, and each saved view."""
    saved = SavedWork(storage)
    names = {stored.id: stored.campaign.name for stored in storage.list_campaigns()}
    choices = [(f"c{cid}", f"{name} (the page's defaults)") for cid, name in names.items()]
    choices += [(f"v{view.id}", f"{names[view.campaign_id]}: {view.name}")
                for view in saved.views() if view.campaign_id in names]
    return sorted(choices, key=lambda choice: choice[1])


def read_panel_choice(storage: Storage, choice: str, section: str) -> tuple[int, int | None]:
    """The campaign id and view id a panel form picked (``c3``: campaign 3; ``v7``: view 7)."""
    if section not in SECTIONS:
        raise Problem("invalid-request", f"a panel shows {' or '.join(SECTIONS)}")
    if choice[:1] == "v" and choice[1:].isdigit():
        view = SavedWork(storage).get_view(int(choice[1:]))
        if view is not None:
            return view.campaign_id, view.id
    elif choice[:1] == "c" and choice[1:].isdigit():
        ids = {stored.id for stored in storage.list_campaigns()}
        if int(choice[1:]) in ids:
            return int(choice[1:]), None
    raise Problem("invalid-request", "pick a campaign or a saved view for the panel")
