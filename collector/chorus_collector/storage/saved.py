"""The dashboard's saved work, in the collector's database (migrations m010 / p008).

* A saved **list**: a campaign's candidate strings under a name (RAPPOR's, a discovery
  campaign's re-estimated list), so that its page is a GET link (``?list=ID``).
* A saved **view**: a campaign page's query (its URL's query string, a list's id included)
  under a name.
* A **board**: panels from several campaigns on one page, each a campaign's section
  (estimates or series) asked with a saved view's query or the page's defaults.

Names are unique per campaign (lists, views) or overall (boards): saving under a name again
replaces what it holds and keeps its id, so links to it keep working. Campaigns are never
deleted, so nothing here outlives its campaign. The SQL is the engines' common dialect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chorus_collector.storage.interface import Storage

__all__ = ["SECTIONS", "Board", "Panel", "SavedList", "SavedView", "SavedWork"]

#: What a board's panel shows of its campaign's page.
SECTIONS = ("estimates", "series")


@dataclass(frozen=True)
class SavedList:
    id: int
    campaign_id: int
    name: str
    candidates: tuple[str, ...]
    created_at: float


@dataclass(frozen=True)
class SavedView:
    id: int
    campaign_id: int
    name: str
    query: str  # the page's URL query string, e.g. "last=7d&step=day" or "list=3"
    created_at: float


@dataclass(frozen=True)
class Panel:
    id: int
    board_id: int
    campaign_id: int
    section: str  # one of SECTIONS
    view_id: int | None


@dataclass(frozen=True)
class Board:
    id: int
    name: str
    created_at: float
    panels: tuple[Panel, ...] = ()


class SavedWork:
    """Saved lists, views and boards in ``storage``'s database."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    # -- lists ------------------------------------------------------------------------------

    def save_list(self, campaign_id: int, name: str, candidates: tuple[str, ...],
                  now: float) -> SavedList:
        with self._storage.write() as conn:
            row = conn.execute(
                "INSERT INTO saved_lists (campaign_id, name, candidates, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (campaign_id, name) DO UPDATE SET "
                "candidates = excluded.candidates, created_at = excluded.created_at "
                "RETURNING id", (campaign_id, name, "\n".join(candidates), now)).fetchone()
        return SavedList(int(row[0]), campaign_id, name, candidates, now)

    def lists(self, campaign_id: int) -> list[SavedList]:
        rows = self._storage.connect().execute(
            "SELECT id, campaign_id, name, candidates, created_at FROM saved_lists "
            "WHERE campaign_id = ? ORDER BY name, id", (campaign_id,)).fetchall()
        return [_list(row) for row in rows]

    def get_list(self, list_id: int) -> SavedList | None:
        if not _fits(list_id):
            return None
        row = self._storage.connect().execute(
            "SELECT id, campaign_id, name, candidates, created_at FROM saved_lists "
            "WHERE id = ?", (list_id,)).fetchone()
        return None if row is None else _list(row)

    def delete_list(self, list_id: int) -> bool:
        if not _fits(list_id):
            return False
        with self._storage.write() as conn:
            row = conn.execute("DELETE FROM saved_lists WHERE id = ? RETURNING id",
                               (list_id,)).fetchone()
        return row is not None

    # -- views ------------------------------------------------------------------------------

    def save_view(self, campaign_id: int, name: str, query: str, now: float) -> SavedView:
        with self._storage.write() as conn:
            row = conn.execute(
                "INSERT INTO saved_views (campaign_id, name, query, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (campaign_id, name) DO UPDATE SET "
                "query = excluded.query, created_at = excluded.created_at RETURNING id",
                (campaign_id, name, query, now)).fetchone()
        return SavedView(int(row[0]), campaign_id, name, query, now)

    def views(self, campaign_id: int | None = None) -> list[SavedView]:
        """A campaign's views by name, or every campaign's (``None``)."""
        sql = "SELECT id, campaign_id, name, query, created_at FROM saved_views"
        args: tuple[int, ...] = ()
        if campaign_id is not None:
            sql, args = sql + " WHERE campaign_id = ?", (campaign_id,)
        rows = self._storage.connect().execute(sql + " ORDER BY name, id", args).fetchall()
        return [_view(row) for row in rows]

    def get_view(self, view_id: int) -> SavedView | None:
        if not _fits(view_id):
            return None
        row = self._storage.connect().execute(
            "SELECT id, campaign_id, name, query, created_at FROM saved_views WHERE id = ?",
            (view_id,)).fetchone()
        return None if row is None else _view(row)

    def delete_view(self, view_id: int) -> bool:
        """Remove a view and the board panels that showed it."""
        if not _fits(view_id):
            return False
        with self._storage.write() as conn:
            conn.execute("DELETE FROM board_panels WHERE view_id = ?", (view_id,))
            row = conn.execute("DELETE FROM saved_views WHERE id = ? RETURNING id",
                               (view_id,)).fetchone()
        return row is not None

    # -- boards -----------------------------------------------------------------------------

    def create_board(self, name: str, now: float) -> Board:
        """A board of this name (the one there is, if any: names are unique)."""
        with self._storage.write() as conn:
            row = conn.execute(
                "INSERT INTO boards (name, created_at) VALUES (?, ?) ON CONFLICT (name) "
                "DO UPDATE SET name = excluded.name RETURNING id, created_at",
                (name, now)).fetchone()
        board = self.get_board(int(row[0]))
        assert board is not None
        return board

    def boards(self) -> list[Board]:
        """Every board by name, without its panels."""
        rows = self._storage.connect().execute(
            "SELECT id, name, created_at FROM boards ORDER BY name, id").fetchall()
        return [Board(int(i), str(n), float(at)) for i, n, at in rows]

    def get_board(self, board_id: int) -> Board | None:
        if not _fits(board_id):
            return None
        conn = self._storage.connect()
        row = conn.execute("SELECT id, name, created_at FROM boards WHERE id = ?",
                           (board_id,)).fetchone()
        if row is None:
            return None
        panels = conn.execute(
            "SELECT id, board_id, campaign_id, section, view_id FROM board_panels "
            "WHERE board_id = ? ORDER BY id", (board_id,)).fetchall()
        return Board(int(row[0]), str(row[1]), float(row[2]), tuple(
            Panel(int(i), int(b), int(c), str(s), None if v is None else int(v))
            for i, b, c, s, v in panels))

    def delete_board(self, board_id: int) -> bool:
        if not _fits(board_id):
            return False
        with self._storage.write() as conn:
            conn.execute("DELETE FROM board_panels WHERE board_id = ?", (board_id,))
            row = conn.execute("DELETE FROM boards WHERE id = ? RETURNING id",
                               (board_id,)).fetchone()
        return row is not None

    def add_panel(self, board_id: int, campaign_id: int, section: str,
                  view_id: int | None) -> Panel:
        if section not in SECTIONS:
            raise ValueError(f"a panel shows one of {', '.join(SECTIONS)}, not {section!r}")
        with self._storage.write() as conn:
            row = conn.execute(
                "INSERT INTO board_panels (board_id, campaign_id, section, view_id) "
                "VALUES (?, ?, ?, ?) RETURNING id",
                (board_id, campaign_id, section, view_id)).fetchone()
        return Panel(int(row[0]), board_id, campaign_id, section, view_id)

    def remove_panel(self, board_id: int, panel_id: int) -> bool:
        if not (_fits(board_id) and _fits(panel_id)):
            return False
        with self._storage.write() as conn:
            row = conn.execute("DELETE FROM board_panels WHERE id = ? AND board_id = ? "
                               "RETURNING id", (panel_id, board_id)).fetchone()
        return row is not None


def _fits(row_id: int) -> bool:
    """An id a row can have: a URL's or a body's number past 64 bits finds none (and the
    engines would refuse to bind it)."""
    return 0 < row_id < 2 ** 63


def _list(row: Any) -> SavedList:
    i, c, name, text, at = row
    return SavedList(int(i), int(c), str(name),
                     tuple(line for line in str(text).split("\n") if line), float(at))


def _view(row: Any) -> SavedView:
    i, c, name, query, at = row
    return SavedView(int(i), int(c), str(name), str(query), float(at))
