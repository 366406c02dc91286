"""What a campaign page shows, read from the request and computed from the stored statistics:
the same functions and JSON the HTTP API answers with, so the page and the API agree."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from markupsafe import Markup

from chorus_collector.alerts import dashboard_link
from chorus_collector.analysis import compare_windows, estimate_series, estimate_window
from chorus_collector.analysis.periods import PERIOD, describe_window
from chorus_collector.dashboard.charts import (
    HeatCell,
    Line,
    heatmap_chart,
    histogram_chart,
    interval_chart,
    line_chart,
)
from chorus_collector.estimators import Query, estimator_for
from chorus_collector.estimators.base import DEFAULT_QUANTILES
from chorus_collector.kinds import KINDS, MAX_CHART_BARS, Bar, Bars, Chart, Histogram, kind_of
from chorus_collector.problems import Problem
from chorus_collector.storage import Annotation, Storage, StoredCampaign
from chorus_shared.domain import Record
from chorus_shared.mechanisms import DISCOVERY_MECHANISMS

__all__ = ["MAX_CHART_BARS", "RESULTS", "CampaignView", "PageParameters", "Result",
           "campaign_view", "discovers", "domain_summary", "joint_pairs", "joint_views",
           "needs_candidates", "parse_time", "read_parameters", "steps_of"]

SERIES_SHOWN = 6  # lines drawn by default; the rest are in the table and the downloads
WEEK = 7 * 86400


#: The page's relative ranges ("last"): the value in its URL → (seconds, label).
RANGES = {"24h": (86400, "the last 24 hours"), "7d": (7 * 86400, "the last 7 days"),
          "30d": (30 * 86400, "the last 30 days"), "90d": (90 * 86400, "the last 90 days")}
#: Auto-refresh choices in seconds (0: off); a refreshed page asks the same question again.
REFRESH = (0, 60, 300, 900)
#: The sortable tables: the query parameter that sorts each, and its columns → row field.
SORTS = {"sort": {"value": "value", "frequency": "frequency",
                  "std_error": "frequency_std_error", "count": "count"},
         "csort": {"value": "value", "change": "difference", "p": "p_value",
                   "adjusted_p": "adjusted_p_value"}}


def sorted_rows(rows: list[dict[str, Any]], table: str, sort: str) -> list[dict[str, Any]]:
    """A table's rows in the order asked (``-frequency``: largest first); rows without the
    figure (not estimated) last either way; the answer's own order when ``sort`` is empty."""
    if not sort:
        return rows
    field = SORTS[table][sort.lstrip("-")]
    known = [r for r in rows if r.get(field) is not None]
    unknown = [r for r in rows if r.get(field) is None]
    key = (lambda r: str(r[field])) if field == "value" else (lambda r: float(r[field]))
    return sorted(known, key=key, reverse=sort.startswith("-")) + unknown


def parse_time(label: str, text: str | None, precision: int, *, up: bool,
               notes: list[str] | None = None) -> int | None:
    """A window bound from the page's form: an ISO 8601 date or date-time (UTC unless it
    says otherwise) or Unix seconds, aligned to the campaign's time precision (a start down,
    an end up), so a picked day never gets refused as misaligned; the alignment is said in
    ``notes``."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise Problem("invalid-query", f"{label} must be a date like 2026-11-01, a time "
                          f"like 2026-11-01T12:00 (UTC) or Unix seconds, not {text!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = math.floor(moment.timestamp())
    if not 0 <= seconds < 2 ** 40:
        raise Problem("invalid-query", f"{label} is out of range")
    aligned = seconds - seconds % precision
    bound = aligned + precision if up and aligned != seconds else aligned
    if bound != seconds and notes is not None:
        notes.append(f"{label} {iso(seconds).replace('T', ' ')} UTC was moved "
                     f"{'up' if up else 'down'} to {iso(bound).replace('T', ' ')} UTC, the "
                     f"{'end' if up else 'start'} of its time bucket ("
                     f"{duration_label(precision)}): estimates are kept per bucket")
    return bound


def iso(seconds: int | None) -> str:
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M")


@dataclass(frozen=True)
class PageParameters:
    """Everything a campaign page (or its downloads) is asked for."""

    start: int | None = None
    end: int | None = None
    postprocessing: str = "none"
    candidates: tuple[str, ...] = ()
    step: str = "bucket"
    top: int = SERIES_SHOWN
    baseline: tuple[int | None, int | None] = (None, None)
    current: tuple[int | None, int | None] = (None, None)
    correction: str = "benjamini-hochberg"
    #: Distribution campaigns: the quantiles and the ranges [a, b] to estimate.
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    ranges: tuple[tuple[float, float], ...] = ()
    #: Record campaigns of mechanism marginals: the pair whose joint to show (empty: the
    #: estimator's default, every pair up to 10).
    joint: tuple[str, ...] = ()
    #: When the page was asked for: a scheduled campaign's series runs up to this period.
    now: float | None = None
    #: A relative range (a key of RANGES) the window was computed from, or "".
    last: str = ""
    #: Seconds between automatic reloads of the page (0: none).
    refresh: int = 0
    #: What was done to the question as asked (a bound moved to its bucket's edge).
    notes: tuple[str, ...] = ()
    #: The estimates' and the comparison's table orders (a column of SORTS, "-" first:
    #: descending; "": the answer's own order).
    sort: str = ""
    csort: str = ""

    def form_values(self) -> dict[str, str]:
        """The values to put back into the page's form: with a relative range, no absolute
        bound, so that the page's address (bookmarked, shared, refreshed) keeps moving."""
        if self.last:
            return {**replace(self, last="", start=None, end=None, baseline=(None, None),
                              current=(None, None)).form_values(), "last": self.last}
        return {"start": iso(self.start), "end": iso(self.end),
                "postprocessing": self.postprocessing, "candidates": "\n".join(self.candidates),
                "step": self.step, "top": str(self.top),
                "baseline_start": iso(self.baseline[0]), "baseline_end": iso(self.baseline[1]),
                "current_start": iso(self.current[0]), "current_end": iso(self.current[1]),
                "correction": self.correction,
                "quantiles": ",".join(f"{q:g}" for q in self.quantiles),
                "ranges": "\n".join(f"{a:g}:{b:g}" for a, b in self.ranges),
                "joint": ",".join(self.joint), "last": self.last,
                "refresh": str(self.refresh), "sort": self.sort, "csort": self.csort}


def steps_of(stored: StoredCampaign) -> tuple[str, ...]:
    """The steps the page offers, the default first: a scheduled campaign's own periods."""
    common = ("bucket", "day", "week")
    return (PERIOD, *common) if stored.campaign.schedule is not None else common


def read_parameters(values: Mapping[str, str], uploaded: str | None,
                    stored: StoredCampaign, extent: tuple[int, int] | None, *,
                    now: float | None = None) -> PageParameters:
    """The page's parameters from its form (GET or POST), with defaults from the data's
    extent: the whole window, and for the comparison the last 7 days against the 7 before
    (or the two halves of the data when it spans less than two weeks)."""
    precision = stored.campaign.time_precision
    notes: list[str] = []
    last = values.get("last") or ""
    if last and last not in RANGES:
        raise Problem("invalid-query", f"last must be one of {', '.join(RANGES)}")
    if last:  # up to the end of the bucket now running, from the bucket a range before
        span = RANGES[last][0]
        moment = time.time() if now is None else now
        end: int | None = int(moment // precision) * precision + precision
        start: int | None = int((moment - span) // precision) * precision
    else:
        start = parse_time("start", values.get("start"), precision, up=False, notes=notes)
        end = parse_time("end", values.get("end"), precision, up=True, notes=notes)
    if start is not None and end is not None and end <= start:
        raise Problem("invalid-query", "the window's end must be after its start")
    orders = {table: values.get(table) or "" for table in SORTS}
    for table, order in orders.items():
        if order and order.lstrip("-") not in SORTS[table]:
            raise Problem("invalid-query", f"{table} must be one of "
                          f"{', '.join(SORTS[table])}, each with '-' before it for descending")
    refresh_text = values.get("refresh") or "0"
    if not refresh_text.isdigit() or int(refresh_text) not in REFRESH:
        raise Problem("invalid-query", "refresh must be one of "
                      f"{', '.join(str(r) for r in REFRESH)} seconds")
    lines = (values.get("candidates") or "").splitlines() + (uploaded or "").splitlines()
    candidates = tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))
    estimator = estimator_for(stored.campaign.mechanism.name)
    postprocessing = values.get("postprocessing") or estimator.default_postprocessing
    if postprocessing not in estimator.postprocessing:
        raise Problem("invalid-query", f"post-processing {postprocessing!r} does not apply to "
                                       "this campaign")
    steps = steps_of(stored)
    step = values.get("step") or steps[0]
    if step not in steps:
        raise Problem("invalid-query", f"step must be {', '.join(steps[:-1])} or {steps[-1]}")
    top_text = values.get("top") or str(SERIES_SHOWN)
    if not top_text.isdigit() or not 1 <= int(top_text) <= 100:
        raise Problem("invalid-query", "top must be a whole number from 1 to 100")
    correction = values.get("correction") or "benjamini-hochberg"
    if correction not in ("benjamini-hochberg", "bonferroni"):
        raise Problem("invalid-query", "correction must be benjamini-hochberg or bonferroni")
    bounds = [parse_time(name.replace("_", " "), values.get(name), precision,
                         up=name.endswith("end"), notes=notes)
              for name in ("baseline_start", "baseline_end", "current_start", "current_end")]
    if all(b is None for b in bounds) and last and start is not None and end is not None:
        bounds = [start - (end - start), start, start, end]  # the range against the one before
    elif all(b is None for b in bounds) and extent is not None:
        bounds = list(default_comparison(extent, precision))
    asks = kind_of(stored.campaign).query_parameters(stored.campaign)
    quantiles, ranges = _distribution_questions(values) \
        if "quantiles" in asks else (DEFAULT_QUANTILES, ())
    return PageParameters(start=start, end=end, postprocessing=postprocessing,
                          candidates=candidates, step=step, top=int(top_text),
                          baseline=(bounds[0], bounds[1]), current=(bounds[2], bounds[3]),
                          correction=correction, quantiles=quantiles, ranges=ranges,
                          joint=_joint_question(values, stored), now=now, last=last,
                          refresh=int(refresh_text), notes=tuple(notes),
                          sort=orders["sort"], csort=orders["csort"])


def joint_pairs(stored: StoredCampaign) -> list[tuple[str, str]]:
    """The pairs a record campaign's page offers to show the joint of: every pair of
    attributes when the mechanism collects joints (``marginals``), none otherwise."""
    domain = stored.campaign.domain
    if not isinstance(domain, Record) or stored.campaign.mechanism.name != "marginals":
        return []
    return list(itertools.combinations(domain.names, 2))


def _joint_question(values: Mapping[str, str], stored: StoredCampaign) -> tuple[str, ...]:
    """The pair picked in the form ("browser,os"), one the page offers; empty: the default."""
    text = (values.get("joint") or "").strip()
    if not text:
        return ()
    pair = tuple(name.strip() for name in text.split(","))
    offered = joint_pairs(stored)
    if pair not in offered and pair[::-1] not in offered:
        raise Problem("invalid-query", "pick a pair of this campaign's attributes for the "
                      "joint" if offered else "joints are answered for record campaigns of "
                      "mechanism 'marginals' only")
    return pair


def _distribution_questions(values: Mapping[str, str]
                            ) -> tuple[tuple[float, ...], tuple[tuple[float, float], ...]]:
    """The quantiles ("0.5, 0.95") and ranges (one "a:b" per line) from the page's form."""
    text = (values.get("quantiles") or "").strip()
    try:
        quantiles = tuple(float(q) for q in text.replace(" ", "").split(",")) if text \
            else DEFAULT_QUANTILES
        pairs = [line.split(":") for line in (values.get("ranges") or "").splitlines()
                 if line.strip()]
        ranges = tuple((float(a), float(b)) for a, b in pairs)
    except ValueError:
        raise Problem("invalid-query", "quantiles are numbers like 0.5, 0.95; a range is a:b "
                                       "with numbers, one per line") from None
    if not 1 <= len(quantiles) <= 20 or not all(0 < q < 1 for q in quantiles):
        raise Problem("invalid-query", "give 1 to 20 quantiles strictly between 0 and 1")
    if len(ranges) > 20 or not all(math.isfinite(a) and math.isfinite(b) and a < b
                                   for a, b in ranges):
        raise Problem("invalid-query", "give at most 20 ranges a:b with a < b")
    return quantiles, ranges


def default_comparison(extent: tuple[int, int], precision: int
                       ) -> tuple[int | None, int | None, int | None, int | None]:
    """The last week against the week before, or the data's two halves."""
    first, end = extent
    if end - first >= 2 * WEEK and WEEK % precision == 0:
        return end - 2 * WEEK, end - WEEK, end - WEEK, end
    buckets = (end - first) // precision
    if buckets < 2:
        return None, None, None, None
    middle = first + buckets // 2 * precision
    return first, middle, middle, end


def domain_summary(config: Mapping[str, Any]) -> str:
    domain = config["domain"]
    kind = domain.get("kind", "categories") if isinstance(domain, dict) else "categories"
    if kind == "categories":
        values = domain["values"] if isinstance(domain, dict) else domain
        return f"{len(values)} categories"
    if kind == "numeric":
        params = config.get("params", {})
        if "scale" in params:  # a distribution campaign states its grid
            return (f"a number in [{domain['lo']:g}, {domain['hi']:g}], estimated as a "
                    f"distribution over {params['buckets']} buckets on a {params['scale']} "
                    "scale")
        return f"a number in [{domain['lo']:g}, {domain['hi']:g}]"
    if kind == "vector":
        return f"{len(domain['attributes'])} numbers"
    if kind == "record":
        return f"a record of {len(domain['attributes'])} attributes: " + ", ".join(
            f"{a['name']} ({len(a['values'])})" for a in domain["attributes"])
    alphabet = domain.get("alphabet")
    return f"strings of up to {domain['max_bytes']} bytes" + (
        "" if alphabet is None else f" over the {len(alphabet)} characters {alphabet!r}")


@dataclass
class Section:
    """One part of the page: its JSON (as the API answers it) and chart, or why not."""

    json: dict[str, Any] | None = None
    chart: Markup | None = None
    error: str | None = None
    #: A record's joints: one view each, in the answer's order (``joint_views``).
    joints: list[dict[str, Any]] = field(default_factory=list)
    #: The series' annotations (releases, incidents) within its window, in time order.
    marks: list[Annotation] = field(default_factory=list)


class CampaignView:
    """A campaign page's three sections, each computed when the page first reads it.

    A discovery campaign's page is streamed (``views.campaign``): what is above a section
    has reached the browser, with a line saying what is being computed, before that section's
    walks start. Other pages compute all three first (:meth:`computed`)."""

    def __init__(self, work: Mapping[str, Callable[[Section], None]] | None = None,
                 **done: Section) -> None:
        self._work = dict(work or {})
        self._sections = dict(done)

    def _section(self, name: str) -> Section:
        if name not in self._sections:
            section = self._sections[name] = Section()
            work = self._work.pop(name, None)
            if work is not None:
                _attempt(section, lambda: work(section))
        return self._sections[name]

    @property
    def estimates(self) -> Section:
        return self._section("estimates")

    @property
    def series(self) -> Section:
        return self._section("series")

    @property
    def comparison(self) -> Section:
        return self._section("comparison")

    def computed(self) -> CampaignView:
        """Every section computed now (under the caller's query gate)."""
        for name in ("estimates", "series", "comparison"):
            self._section(name)
        return self


def _attempt(section: Section, work: Callable[[], None]) -> None:
    try:
        work()
    except Problem as problem:
        section.error = problem.detail or problem.title


class Result(Protocol):
    def to_json(self) -> dict[str, Any]: ...

    def to_csv(self) -> str: ...


def estimates_result(storage: Storage, stored: StoredCampaign,
                     parameters: PageParameters) -> Result:
    query = Query(start=parameters.start, end=parameters.end,
                  candidates=parameters.candidates, postprocessing=parameters.postprocessing,
                  quantiles=parameters.quantiles, ranges=parameters.ranges,
                  joints=(parameters.joint,) if parameters.joint else ())
    result, inputs = estimate_window(storage, stored, query)
    extra: dict[str, Any] = {"freshness": inputs.freshness()}
    estimand = describe_window(stored.campaign, parameters.start, parameters.end)
    if estimand is not None:
        extra["estimand"] = estimand
    return _WithExtra(result, extra)


@dataclass(frozen=True)
class _WithExtra:
    """An estimate whose JSON says how fresh its folded part is and, for a scheduled
    campaign, what it estimates, as the API's does."""

    result: Result
    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**self.result.to_json(), **self.extra}

    def to_csv(self) -> str:
        return self.result.to_csv()


def series_result(storage: Storage, stored: StoredCampaign,
                  parameters: PageParameters) -> Result:
    top = parameters.top if stored.campaign.domain.kind == "categories" else None
    return estimate_series(storage, stored, start=parameters.start, end=parameters.end,
                           step=parameters.step, top=top, candidates=parameters.candidates,
                           now=parameters.now)


def comparison_result(storage: Storage, stored: StoredCampaign,
                      parameters: PageParameters) -> Result:
    if None in parameters.baseline or None in parameters.current:
        raise Problem("invalid-query", "pick both windows to compare (the data spans less "
                                       "than two time buckets)")
    return compare_windows(storage, stored, baseline=parameters.baseline,
                           current=parameters.current, candidates=parameters.candidates,
                           correction=parameters.correction)


RESULTS: dict[str, Callable[[Storage, StoredCampaign, PageParameters], Result]] = {
    "estimates": estimates_result, "series": series_result, "comparison": comparison_result}


def discovers(stored: StoredCampaign) -> bool:
    """Whether the campaign finds its frequent strings itself (``pem``, ``treehist``): its
    page shows what was found, and a candidate list, if given, is re-estimated instead."""
    return stored.campaign.mechanism.name in DISCOVERY_MECHANISMS


def needs_candidates(stored: StoredCampaign) -> bool:
    """Open strings decoded only against a list the analyst gives (RAPPOR, CMS, …)."""
    return kind_of(stored.campaign).needs_candidates(stored.campaign)


def campaign_view(storage: Storage, stored: StoredCampaign,
                  parameters: PageParameters) -> CampaignView:
    """The page's sections, computed as they are first read (:class:`CampaignView`)."""
    if needs_candidates(stored) and not parameters.candidates:
        message = ("paste or upload candidate strings: this campaign's estimates are of the "
                   "strings you list")
        return CampaignView(estimates=Section(error=message), series=Section(error=message),
                            comparison=Section(error=message))

    def estimates(section: Section) -> None:
        section.json = estimates_result(storage, stored, parameters).to_json()
        section.chart = estimate_chart(section.json)
        section.joints = joint_views(section.json)

    def series(section: Section) -> None:
        section.json = series_result(storage, stored, parameters).to_json()
        window = section.json["window"]
        section.marks = storage.annotations(stored.id, window["start"], window["end"])
        section.chart = series_chart(section.json, section.marks)

    def comparison(section: Section) -> None:
        section.json = comparison_result(storage, stored, parameters).to_json()
        section.chart = comparison_chart(section.json)

    return CampaignView({"estimates": estimates, "series": series, "comparison": comparison})


def estimate_chart(body: Mapping[str, Any]) -> Markup:
    """What the answer's kind draws of it (:meth:`chorus_collector.kinds.EstimateKind.chart`)."""
    spec = KINDS[body["kind"]].chart(body)
    return _DRAW[type(spec)](spec)


def _bars(spec: Chart) -> Markup:
    assert isinstance(spec, Bars)
    return interval_chart(spec.bars, title=spec.title, description=spec.description)


def _histogram(spec: Chart) -> Markup:
    assert isinstance(spec, Histogram)
    return histogram_chart(spec.buckets, spec.markers, title=spec.title,
                           description=spec.description)


#: How each form of chart a kind asks for is drawn.
_DRAW: dict[type, Callable[[Chart], Markup]] = {Bars: _bars, Histogram: _histogram}


def joint_views(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the page shows of each joint in a record answer: for a pair, the heat map, the
    columns (the second attribute's values) and each conditional's columns; a larger joint is
    a long table of its cells."""
    views = []
    for joint in body.get("joints", ()):
        view: dict[str, Any] = {"joint": joint, "chart": None}
        if len(joint["attributes"]) == 2:
            first, second = joint["attributes"]
            rows, columns = _labels(joint, 0), _labels(joint, 1)
            cells = [HeatCell(c["values"][0], c["values"][1], c["frequency"], c["std_error"],
                              c["ci_low"], c["ci_high"]) for c in joint["cells"]]
            test = joint["independence"]
            tested = "" if test is None or test["p_value"] is None else (
                f" The test of independence gives p = {test['p_value']:.3g}.")
            view["chart"] = heatmap_chart(
                cells, rows, columns, row_name=first, column_name=second,
                title=f"Joint distribution of {first} and {second} "
                      f"({joint['reports']:,} reports)",
                description=f"{len(rows)} × {len(columns)} cells, rows {first}, columns "
                            f"{second}; each cell is shaded by its estimated share of "
                            "records (darker is larger) and gives its estimate; its 95% "
                            f"interval is in its title and in the table below.{tested}")
            view["columns"] = columns
            view["conditionals"] = [
                {**c, "columns": columns if c["given"] == first else rows}
                for c in joint["conditionals"]]
        views.append(view)
    return views


def _labels(joint: Mapping[str, Any], axis: int) -> list[str]:
    """The values of the joint's ``axis``-th attribute, in the cells' order."""
    return list(dict.fromkeys(c["values"][axis] for c in joint["cells"]))


def series_chart(body: Mapping[str, Any], marks: Sequence[Annotation] = ()) -> Markup:
    lines = [Line(s["value"], [(p["start"], p["estimate"], p["ci_low"], p["ci_high"])
                               for p in s["points"]]) for s in body["series"][:SERIES_SHOWN]]
    points = len(body["series"][0]["points"]) if body["series"] else 0
    title = f"{body['campaign']} over time, per {body['step_name']}, with 95% bands"
    description = (f"{len(lines)} lines of {points} points each; the shaded band around each "
                   "line spans the 95% interval; gaps are points with too few reports. The "
                   "table below gives every point.")
    return line_chart(lines, step=body["step"], title=title, description=description,
                      marks=[(mark.time, mark.text) for mark in marks])


def comparison_chart(body: Mapping[str, Any]) -> Markup:
    items = [Bar(r["value"], r["difference"], r["ci_low"], r["ci_high"],
                      flagged=bool(r["significant"])) for r in body["rows"][:MAX_CHART_BARS]]
    title = f"Change in {body['campaign']} between the two windows, with 95% intervals"
    description = (f"{len(items)} bars: the current window's estimate minus the baseline's; "
                   f"bars drawn in the accent colour are significant after the "
                   f"{body['correction']} correction.")
    return interval_chart(items, title=title, description=description, zero_line=True)


def simulation_chart(simulation: Mapping[str, Any]) -> Markup:
    items = [Bar(row["label"], row["estimate"], row["ci_low"], row["ci_high"])
             for row in simulation["estimates"][:MAX_CHART_BARS]]
    title = (f"One simulated run of {simulation['mechanism']} with "
             f"{simulation['simulated_users']} users: estimates with 95% intervals")
    description = (f"{len(items)} bars, one per estimate of the simulated run; the table "
                   "gives the true values beside them.")
    return interval_chart(items, title=title, description=description)


def duration_label(seconds: int) -> str:
    """3600 → "1 hour", 86400 → "1 day", 604800 → "1 week", else "N s"."""
    for unit, size in (("week", 7 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} s"


ALERT_FIRINGS_SHOWN = 5  # the most recent notifications shown beside each alert rule


def alert_views(storage: Storage, stored: StoredCampaign) -> list[dict[str, Any]]:
    """The campaign's alert rules for its page: each with its values significant now, its
    last evaluation and its recent notifications (each linking to the comparison it was
    about, on this dashboard). Never the webhook's path or the secret."""
    views = []
    for rule in storage.alert_rules([stored.id]):
        d = rule.definition
        firings = []
        for firing in storage.alert_firings(rule.id, ALERT_FIRINGS_SHOWN):
            payload = json.loads(firing.payload)
            baseline, current = payload["baseline"], payload["current"]
            firings.append({
                "event": firing.event, "created_at": int(firing.created_at),
                "status": firing.status, "attempts": firing.attempts,
                "values": [v["value"] for v in payload["values"]],
                "link": dashboard_link(None, stored, (baseline["start"], baseline["end"]),
                                       (current["start"], current["end"]), d["correction"],
                                       d["values"])})
        views.append({"name": rule.name, "window": d["window"],
                      "values": d["values"], "correction": d["correction"],
                      "alpha": d["alpha"], "min_change": d["min_change"],
                      "significant": sorted(storage.alert_state(rule.id).active),
                      "last_end": rule.last_end or None, "last_error": rule.last_error,
                      "firings": firings})
    return views
