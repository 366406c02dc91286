"""The dashboard's routes."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlencode

from flask import (
    Blueprint,
    Response,
    current_app,
    redirect,
    render_template,
    request,
    stream_template,
    url_for,
)
from flask_wtf.csrf import CSRFError, CSRFProtect, generate_csrf
from jinja2.utils import Namespace
from werkzeug.wrappers import Response as WerkzeugResponse

from chorus_collector.dashboard import designing, pages, saving
from chorus_collector.dashboard.charts import sparkline
from chorus_collector.dashboard.signin import (
    current_role,
    local_target,
    require_role,
    sign_in,
    sign_out,
)
from chorus_collector.design import designer
from chorus_collector.estimators import estimator_for
from chorus_collector.http import annotations as annotation_routes
from chorus_collector.http.admission import admission
from chorus_collector.http.ratelimit import RateLimiter
from chorus_collector.kinds import kind_of
from chorus_collector.problems import Problem
from chorus_collector.results.tables import shown_value
from chorus_collector.storage import Storage, StoredCampaign
from chorus_collector.storage.saved import Board, SavedView, SavedWork
from chorus_shared.campaign import campaign_from_spec
from chorus_shared.errors import CampaignError

__all__ = ["dashboard"]

log = logging.getLogger("chorus.dashboard")

dashboard = Blueprint("dashboard", __name__, template_folder="templates",
                      static_folder="static", static_url_path="/static")

DAY = 86400
LIST_DAYS = 30  # days of report counts drawn beside each campaign
MAX_UPLOAD_BYTES = 1024 * 1024
SIMULATION_SEED = 1  # the designer's simulated run: the same page shows the same run
# Pages load only what the collector serves, run no script, and cannot be framed.
CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'self'; img-src 'self' data:; "
                           "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def _storage() -> Storage:
    storage: Storage = current_app.extensions["chorus.storage"]
    return storage


def _now() -> float:
    now: float = current_app.extensions["chorus.clock"]()
    return now


@dashboard.before_request
def _check_csrf() -> None:
    if request.method == "POST":
        csrf: CSRFProtect = current_app.extensions["chorus.csrf"]
        csrf.protect()


@dashboard.after_request
def _page_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    if request.endpoint != "dashboard.static":
        response.headers["Cache-Control"] = "no-store"  # pages hold estimates: never cached
    return response


@dashboard.errorhandler(Problem)
def _problem_page(problem: Problem) -> tuple[str, int, dict[str, str]]:
    """A refusal as a page that says why (the API answers problem+json instead)."""
    return render_template("error.html", problem=problem), problem.status, problem.headers


@dashboard.errorhandler(CSRFError)
def _csrf_page(error: CSRFError) -> tuple[str, int]:
    problem = Problem("invalid-request", "the form had expired or did not come from this "
                      f"site ({error.description}); reload the page and send it again")
    return render_template("error.html", problem=problem), 400


@dashboard.context_processor
def _globals() -> dict[str, Any]:
    # ``noise``: whether a figure on the page was shown clipped to its bounds (templates set
    # it, the note after a table reads it); fresh for every page.
    role = current_role()
    return {"role": role, "nav_boards": _nav_boards if role else list, "iso": pages.iso,
            "duration": pages.duration_label,
            "shown": shown_value, "noise": Namespace(clipped=False),
            "sorted_rows": pages.sorted_rows, "sort_link": _sort_link}


def _nav_boards() -> list[Board]:
    """The boards, for the header's menu (read when a page draws its header)."""
    return SavedWork(_storage()).boards()


def _sort_link(table: str, column: str, current: str) -> str:
    """This page's address sorted by ``column``: descending first for figures, ascending
    for the value; the same column again flips the order. Every other question stays."""
    first = column if column == "value" else "-" + column
    flipped = column if current == "-" + column else "-" + column
    order = flipped if current.lstrip("-") == column else first
    arguments = request.args.to_dict(flat=False)
    arguments[table] = [order]
    return f"{request.path}?{urlencode(arguments, doseq=True)}"


@dashboard.route("/login", methods=["GET", "POST"])
def login() -> str | tuple[str, int] | WerkzeugResponse:
    target = local_target(request.values.get("next"))
    if request.method == "GET":
        return render_template("login.html", target=target, refused=False)
    limiter: RateLimiter = current_app.extensions["chorus.signin_limit"]
    wait = limiter.check(request.remote_addr or "")
    if wait is not None:
        seconds = max(1, math.ceil(wait))
        raise Problem("rate-limited", f"too many sign-in attempts from this address; try "
                      f"again in {seconds} s", headers={"Retry-After": str(seconds)})
    role = sign_in(request.form.get("token", ""))
    if role is None:
        log.info("dashboard sign-in refused")  # never the token, never the address
        return render_template("login.html", target=target, refused=True), 401
    log.info("dashboard sign-in as %s", role)
    return redirect(target)


@dashboard.post("/logout")
def logout() -> WerkzeugResponse:
    sign_out()
    return redirect(url_for("dashboard.login"))


@dashboard.get("/")
@require_role("analyst")
def campaigns() -> str:
    storage = _storage()
    today = int(_now()) // DAY * DAY
    counts = storage.report_counts()
    rows = []
    views: dict[int, list[SavedView]] = {}
    for view in SavedWork(storage).views():
        views.setdefault(view.campaign_id, []).append(view)
    for stored in storage.list_campaigns():
        by_time = counts.get(stored.id, {})
        per_day = [0] * LIST_DAYS
        for time, n in by_time.items():
            age = (today - time // DAY * DAY) // DAY
            if 0 <= age < LIST_DAYS:
                per_day[LIST_DAYS - 1 - age] += n
        config = stored.campaign.public_config()
        retired_at = storage.retired_at(stored.id)
        rows.append({
            "name": stored.campaign.name, "mechanism": stored.campaign.mechanism.name,
            "epsilon": stored.campaign.epsilon, "domain": pages.domain_summary(config),
            "reports": sum(by_time.values()), "last_days": sum(per_day),
            "spark": sparkline(per_day, title=f"reports per day over the last {LIST_DAYS} "
                                              f"days: {', '.join(map(str, per_day))}"),
            "state": "active" if retired_at is None else f"retired {pages.iso(int(retired_at))}",
            "views": [(view.name, saving.view_link(stored.campaign.name, view.query))
                      for view in views.get(stored.id, ())],
        })
    return render_template("campaigns.html", campaigns=rows, days=LIST_DAYS)


def _campaign(name: str) -> StoredCampaign:
    stored = _storage().get_campaign(name)
    if stored is None:
        raise Problem("unknown-campaign", f"no campaign is named {name!r}")
    return stored


def _extent(stored: StoredCampaign) -> tuple[int, int] | None:
    """The first bucket with reports and the end of the last one."""
    span = _storage().time_span(stored.id)
    if span is None:
        return None
    return span[0], span[1] + stored.campaign.time_precision


def _uploaded() -> str | None:
    """The candidate file sent with the form, if any, as text."""
    upload = request.files.get("candidates_file")
    if upload is None or not upload.filename:
        return None
    data: bytes = upload.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise Problem("invalid-query", "the candidate file is larger than 1 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem("invalid-query", "the candidate file is not UTF-8 text") from None


def _asked(stored: StoredCampaign, values: Mapping[str, str] | None = None) -> saving.Asked:
    """The page's question: from the request (its form or URL, a saved list by ``list``), or
    from ``values`` (a saved view's query)."""
    uploaded = None
    if values is None:
        uploaded = _uploaded()
        values = {key: request.values.get(key, "") for key in request.values}
    return saving.asked(_storage(), stored, values, uploaded, _extent(stored), _now())


def _parameters(stored: StoredCampaign) -> pages.PageParameters:
    return _asked(stored).parameters


def _gate() -> threading.BoundedSemaphore:
    """The worker's query gate, taken through its admission (http/admission.py): a 503
    query-busy at once past QUERY_THREADS, or when no slot frees within QUERY_WAIT."""
    queries = admission()
    queries.enter()
    return queries.slots


def _gated(work: Any) -> Any:
    """Run a computation under the worker's query gate, as the API's estimates are."""
    gate = _gate()
    try:
        return work()
    finally:
        gate.release()


class _GatedStream:
    """A streamed page's chunks, holding the query gate until the last one is sent or the
    server closes the response (the browser gone), whichever comes first: a generator's own
    ``finally`` would not run for a response closed before its first chunk."""

    def __init__(self, chunks: Iterator[str], gate: threading.BoundedSemaphore) -> None:
        self._chunks = chunks
        self._gate: threading.BoundedSemaphore | None = gate

    def __iter__(self) -> Iterator[str]:
        try:
            yield from self._chunks
        finally:
            self._release()

    def close(self) -> None:
        try:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._gate is not None:
            gate, self._gate = self._gate, None
            gate.release()


def _streamed_page(template: str, **context: Any) -> Response:
    """The page sent as its template renders: the browser shows each section, and what the
    next one is computing, while the walks of that one run (seconds on a first view)."""
    # The form's CSRF token goes into the session now: its cookie leaves with the headers,
    # before the template that asks for the token has rendered.
    generate_csrf()
    gate = _gate()
    try:
        chunks = stream_template(template, **context)
    except BaseException:
        gate.release()
        raise
    response = Response(_GatedStream(chunks, gate), mimetype="text/html")
    response.headers["X-Accel-Buffering"] = "no"  # nginx passes each chunk on as it comes
    return response


@dashboard.route("/campaigns/<name>", methods=["GET", "POST"])
@require_role("analyst")
def campaign(name: str) -> str | Response:
    stored = _campaign(name)
    question = _asked(stored)
    parameters = question.parameters
    config = stored.campaign.public_config()
    retired_at = _storage().retired_at(stored.id)
    kind = kind_of(stored.campaign)
    discovery = pages.discovers(stored)
    view = pages.campaign_view(_storage(), stored, parameters)
    saved = SavedWork(_storage())
    form = {**parameters.form_values(), "candidates": "\n".join(question.typed),
            "list": "" if question.chosen is None else str(question.chosen.id)}
    context = dict(
        stored=stored, config=config, view=view,
        domain=pages.domain_summary(config), form=form,
        strings=stored.campaign.domain.kind == "strings", discovery=discovery,
        kind=kind, asks=kind.query_parameters(stored.campaign),
        pairs=pages.joint_pairs(stored),
        postprocessing=estimator_for(stored.campaign.mechanism.name).postprocessing,
        retired_at=retired_at, max_bars=pages.MAX_CHART_BARS,
        reporting=stored.campaign.reporting, steps=pages.steps_of(stored),
        walking=discovery, ranges=pages.RANGES, refresh_choices=pages.REFRESH,
        notes=parameters.notes, refresh=parameters.refresh if not strings_page(stored) else 0,
        alerts=pages.alert_views(_storage(), stored),
        sortable=request.method == "GET", question=question,
        saved_lists=saved.lists(stored.id), saved_views=saved.views(stored.id),
        link=saving.view_link(stored.campaign.name, question.query), max_name=saving.MAX_NAME)
    if discovery:  # walks of several seconds on a first view: shown as they go
        return _streamed_page("campaign.html", **context)
    _gated(view.computed)
    return render_template("campaign.html", **context)


@dashboard.post("/campaigns/<name>/marks")
@require_role("admin")
def add_mark(name: str) -> WerkzeugResponse:
    """A mark on this campaign's series (or every campaign's): the API's annotation."""
    stored = _campaign(name)
    text = request.form.get("text", "").strip()
    if not text or len(text) > annotation_routes.MAX_TEXT or any(ord(c) < 32 for c in text):
        raise Problem("invalid-request", "a mark's text is one line of 1 to "
                      f"{annotation_routes.MAX_TEXT} characters")
    moment = pages.parse_time("the mark's time", request.form.get("time"), 1, up=False)
    if moment is None:
        raise Problem("invalid-request", "give the mark's time, e.g. 2026-11-20 14:00 (UTC)")
    every = request.form.get("every") == "on"
    _storage().add_annotation(moment, text, None if every else stored.id, _now())
    log.info("mark added on %s", "every campaign" if every else stored.campaign.name)
    return redirect(url_for("dashboard.campaign", name=name) + "#series")


@dashboard.post("/campaigns/<name>/marks/<int:mark_id>/remove")
@require_role("admin")
def remove_mark(name: str, mark_id: int) -> WerkzeugResponse:
    if mark_id >= 1 << 63 or not _storage().delete_annotation(mark_id):
        raise Problem("not-found", f"no mark has id {mark_id}")
    return redirect(url_for("dashboard.campaign", name=name) + "#series")


def strings_page(stored: StoredCampaign) -> bool:
    """A page whose form is a POST (candidate lists): a reload would not ask again."""
    return stored.campaign.domain.kind == "strings"


@dashboard.route("/campaigns/<name>/download/<what>.<fmt>", methods=["GET", "POST"])
@require_role("analyst")
def download(name: str, what: str, fmt: str) -> Response:
    """A section of the page as CSV or JSON: the API's own renderings, for the same query."""
    if what not in pages.RESULTS or fmt not in ("csv", "json"):
        raise Problem("not-found", "download estimates, series or comparison as csv or json")
    stored = _campaign(name)
    parameters = _parameters(stored)
    if pages.needs_candidates(stored) and not parameters.candidates:
        raise Problem("invalid-query", "list the candidate strings to estimate")
    result: pages.Result = _gated(lambda: pages.RESULTS[what](_storage(), stored, parameters))
    filename = f"{stored.campaign.name}-{what}.{fmt}"  # campaign names are [a-z0-9_.-]
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    if fmt == "csv":
        return Response(result.to_csv(), mimetype="text/csv", headers=headers)
    return Response(json.dumps(result.to_json(), indent=2), mimetype="application/json",
                    headers=headers)


# -- the campaign designer --------------------------------------------------------------------

@dashboard.get("/design")
@require_role("analyst")
def design() -> str | tuple[str, int]:
    """Each mechanism's expected standard error, report size and privacy over time for a
    planned campaign; with a distribution, one simulated run. Anyone signed in may look;
    creating the campaign (below) is the admin's."""
    form = {key: request.args.get(key, default) for key, default in designing.DEFAULTS.items()}
    form["simulate"] = request.args.get("simulate", "")
    plan = simulation = chart = None
    if "kind" in request.args:  # the form was sent
        try:
            body = designing.design_request(form)
            plan = designer.design(body).to_json()
            if "distribution" in body:
                mechanism = form["simulate"] or plan["recommended"]
                simulation = _gated(lambda: designer.simulate_design(body, mechanism,
                                                                      seed=SIMULATION_SEED))
                chart = pages.simulation_chart(simulation)
        except (CampaignError, Problem) as error:
            return _design_refused(form, error)
    return render_template("design.html", form=form, plan=plan, simulation=simulation,
                           chart=chart, kinds=DESIGN_KINDS)


DESIGN_KINDS = ("categories", "numeric", "vector", "strings")


def _design_refused(form: dict[str, str], error: CampaignError | Problem,
                    creating: Mapping[str, str] | None = None) -> tuple[str, int]:
    """The form again as it was typed, with what to change (400, or 409 for a taken name): a
    designer who
    mistyped one field keeps the rest. When creating failed (a bad name, say), the figures
    and the create form come back too, with what was typed there (``creating``). A refusal
    that is not the input's (a busy server) goes out as it came."""
    if isinstance(error, Problem) and error.kind not in ("invalid-campaign", "campaign-exists"):
        raise error
    message = error.detail if isinstance(error, Problem) else str(error)
    plan = None
    if creating is not None:
        with contextlib.suppress(CampaignError, Problem):
            plan = designer.design(designing.design_request(form)).to_json()
    return render_template("design.html", form=form, plan=plan, simulation=None, chart=None,
                           kinds=DESIGN_KINDS, error=message, creating=creating or {}), \
        error.status if isinstance(error, Problem) else 400


@dashboard.post("/design")
@require_role("admin")
def create_from_design() -> WerkzeugResponse | tuple[str, int]:
    form = {key: request.form.get(key, default) for key, default in designing.DEFAULTS.items()}
    name = request.form.get("name", "").strip()
    try:
        body = designing.design_request(form)
        body.pop("distribution", None)
        spec = designer.spec(body, request.form.get("mechanism") or "auto", name,
                             description=request.form.get("description", "").strip(),
                             accept_weak_privacy=request.form.get("accept_weak_privacy") == "on")
        campaign = campaign_from_spec(spec, require_consent=True, warn=False)
    except (CampaignError, Problem) as error:
        return _design_refused(form, error, creating=request.form)
    try:
        _storage().insert_campaign(campaign)
    except FileExistsError:
        return _design_refused(form, Problem(
            "campaign-exists", f"a different campaign is already named {name!r}; pick "
            "another name"), creating=request.form)
    log.info("campaign %s created from the designer", campaign.name)
    return redirect(url_for("dashboard.campaign", name=campaign.name))


# -- saved work: candidate lists, views (a page's question), boards ----------------------------
# Anyone signed in (analyst or admin) saves and removes them: they are analysts' work,
# shared by everyone who signs in, and change no campaign and no estimate.

@dashboard.post("/campaigns/<name>/lists")
@require_role("analyst")
def save_list(name: str) -> WerkzeugResponse:
    """The page's candidates (a chosen list's, typed and uploaded ones) saved under a name;
    the page then opens by GET with that list: its address is the link to share."""
    stored = _campaign(name)
    list_name = saving.check_name("a list", request.form.get("list_name"))
    question = _asked(stored)
    if not question.parameters.candidates:
        raise Problem("invalid-request", "there are no candidate strings to save: paste, "
                      "upload or choose some first")
    saved = SavedWork(_storage()).save_list(
        stored.id, list_name, saving.check_candidates(question.parameters.candidates), _now())
    log.info("list saved on %s", stored.campaign.name)
    return redirect(url_for("dashboard.campaign", name=name, list=saved.id))


@dashboard.post("/campaigns/<name>/lists/<int:list_id>/remove")
@require_role("analyst")
def remove_list(name: str, list_id: int) -> WerkzeugResponse:
    stored = _campaign(name)
    saved = SavedWork(_storage())
    found = saved.get_list(list_id)
    if found is None or found.campaign_id != stored.id:
        raise Problem("not-found", f"{name} has no saved list {list_id}")
    saved.delete_list(list_id)
    return redirect(url_for("dashboard.campaign", name=name))


@dashboard.post("/campaigns/<name>/views")
@require_role("analyst")
def save_view(name: str) -> WerkzeugResponse:
    """The page's question (``query``, as the page wrote it) saved under a name, after
    checking that it asks this campaign's page something it answers."""
    stored = _campaign(name)
    view_name = saving.check_name("a view", request.form.get("view_name"))
    query = _asked(stored, saving.page_values(request.form.get("query", ""))).query
    saved = SavedWork(_storage()).save_view(stored.id, view_name, query, _now())
    log.info("view saved on %s", stored.campaign.name)
    return redirect(saving.view_link(name, saved.query))


@dashboard.post("/campaigns/<name>/views/<int:view_id>/remove")
@require_role("analyst")
def remove_view(name: str, view_id: int) -> WerkzeugResponse:
    stored = _campaign(name)
    saved = SavedWork(_storage())
    found = saved.get_view(view_id)
    if found is None or found.campaign_id != stored.id:
        raise Problem("not-found", f"{name} has no saved view {view_id}")
    saved.delete_view(view_id)  # and the board panels that showed it
    return redirect(url_for("dashboard.campaign", name=name))


@dashboard.get("/boards")
@require_role("analyst")
def boards() -> str:
    return render_template("boards.html", boards=SavedWork(_storage()).boards(),
                           max_name=saving.MAX_NAME)


@dashboard.post("/boards")
@require_role("analyst")
def create_board() -> WerkzeugResponse:
    board = SavedWork(_storage()).create_board(
        saving.check_name("a board", request.form.get("name")), _now())
    return redirect(url_for("dashboard.board", board_id=board.id))


def _board(board_id: int) -> Board:
    board = SavedWork(_storage()).get_board(board_id)
    if board is None:
        raise Problem("not-found", f"no board has id {board_id}")
    return board


@dashboard.get("/boards/<int:board_id>")
@require_role("analyst")
def board(board_id: int) -> str:
    """Panels from several campaigns on one page: each a section of its campaign's page,
    computed by the page's own code under one query slot."""
    shown = _board(board_id)
    panels = _gated(lambda: saving.board_panels(_storage(), shown,
                                                lambda stored, values: _asked(stored, values)))
    return render_template("board.html", board=shown, panels=panels,
                           choices=saving.panel_choices(_storage()))


@dashboard.post("/boards/<int:board_id>/panels")
@require_role("analyst")
def add_panel(board_id: int) -> WerkzeugResponse:
    _board(board_id)
    section = request.form.get("section", "")
    campaign_id, view_id = saving.read_panel_choice(_storage(), request.form.get("show", ""),
                                                    section)
    panel = SavedWork(_storage()).add_panel(board_id, campaign_id, section, view_id)
    return redirect(url_for("dashboard.board", board_id=board_id) + f"#panel-{panel.id}")


@dashboard.post("/boards/<int:board_id>/panels/<int:panel_id>/remove")
@require_role("analyst")
def remove_panel(board_id: int, panel_id: int) -> WerkzeugResponse:
    if not SavedWork(_storage()).remove_panel(board_id, panel_id):
        raise Problem("not-found", f"board {board_id} has no panel {panel_id}")
    return redirect(url_for("dashboard.board", board_id=board_id))


@dashboard.post("/boards/<int:board_id>/remove")
@require_role("analyst")
def remove_board(board_id: int) -> WerkzeugResponse:
    if not SavedWork(_storage()).delete_board(board_id):
        raise Problem("not-found", f"no board has id {board_id}")
    return redirect(url_for("dashboard.boards"))
