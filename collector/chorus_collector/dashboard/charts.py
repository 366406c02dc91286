"""Charts drawn as SVG on the server: no script, no web font, nothing fetched.

Every mark carries its numbers twice: in a ``<title>`` that a screen reader or a hover reads
("a: 0.31, 95% interval 0.28 to 0.34"), and in ``data-*`` attributes holding the exact values
the JSON API answers (``repr`` of the float), so a test can check the picture against the
numbers. The table beside each chart is its full text alternative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

from chorus_collector.kinds import Bar, HistogramBucket, QuantileMarker

__all__ = ["HeatCell", "Line", "heatmap_chart",
           "histogram_chart", "interval_chart", "line_chart", "nice_ticks", "sparkline"]

# Okabe and Ito's palette: told apart with every common colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")
LABEL_CHARS = 28  # a longer category label is cut with "…" in the chart; the table has it all


@dataclass(frozen=True)
class Line:
    """One series over time: (start, estimate, low, high) points, None where suppressed."""

    label: str
    points: Sequence[tuple[int, float | None, float | None, float | None]]


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [low, high] (Heckbert's nice numbers)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    step = _nice(_nice(high - low, round_=False) / max(1, count - 1), round_=True)
    # From the tick at or below ``low`` to the one at or above ``high``: a value between the
    # last tick and ``high`` was drawn past the plot (and cut off by the picture's edge).
    first = math.floor(low / step)
    last = math.ceil(high / step - 1e-9)
    return [round(index * step, 12) for index in range(first, max(last, first + 1) + 1)]


def _nice(x: float, *, round_: bool) -> float:
    exponent = math.floor(math.log10(x))
    fraction = x / 10 ** exponent
    if round_:
        nice = 1 if fraction < 1.5 else 2 if fraction < 3 else 5 if fraction < 7 else 10
    else:
        nice = 1 if fraction <= 1 else 2 if fraction <= 2 else 5 if fraction <= 5 else 10
    return float(nice * 10 ** exponent)


def _number(value: float) -> str:
    return f"{value:.4g}"


def _interval(low: float | None, high: float | None) -> str:
    """", 95% interval a to b", or ", no interval" where the answer states none."""
    if low is None or high is None:
        return ", no interval"
    return f", 95% interval {_number(low)} to {_number(high)}"


def _data(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _short(label: str, room: float | None = None) -> str:
    """The label cut with "…" to LABEL_CHARS characters, or to what ``room`` pixels hold."""
    limit = LABEL_CHARS if room is None else max(4, min(LABEL_CHARS, int(room / 7)))
    return label if len(label) <= limit else label[:limit - 1] + "…"


def interval_chart(items: Sequence[Bar], *, title: str, description: str,
                   zero_line: bool = False) -> Markup:
    """Horizontal bars (one per item, from 0) with whiskers over the 95% intervals."""
    label_width, plot_width, row, top, bottom = 200, 460, 24, 10, 34
    values = [v for item in items for v in (item.estimate, item.low, item.high, 0.0)
              if v is not None and math.isfinite(v)]
    ticks = nice_ticks(min(values, default=0.0), max(values, default=1.0))
    lo, hi = ticks[0], ticks[-1]
    height = top + row * len(items) + bottom

    def x(value: float) -> float:
        return label_width + (value - lo) / (hi - lo) * plot_width

    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'viewBox="0 0 {label_width + plot_width + 20} {height}" '
             f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
             f'<desc>{escape(description)}</desc>']
    for tick in ticks:
        parts.append(f'<g class="tick"><line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" '
                     f'y2="{height - bottom + 4}"/><text x="{x(tick):.1f}" '
                     f'y="{height - bottom + 18}">{_number(tick)}</text></g>')
    if zero_line or lo < 0:
        parts.append(f'<line class="zero" x1="{x(0):.1f}" x2="{x(0):.1f}" y1="{top}" '
                     f'y2="{height - bottom}"/>')
    for index, item in enumerate(items):
        y = top + index * row
        middle = y + row / 2
        said = (f"{item.label}: not estimated" if item.estimate is None else
                f"{item.label}: {_number(item.estimate)}, 95% interval "
                f"{_number(item.low or 0.0)} to {_number(item.high or 0.0)}")
        parts.append(f'<g class="bar{" flagged" if item.flagged else ""}" '
                     f'data-label="{escape(item.label)}" data-estimate="{_data(item.estimate)}" '
                     f'data-ci-low="{_data(item.low)}" data-ci-high="{_data(item.high)}">'
                     f'<title>{escape(said)}</title>'
                     f'<text class="label" x="{label_width - 8}" y="{middle + 4:.1f}">'
                     f'{escape(_short(item.label))}</text>')
        if item.estimate is not None:
            left, right = sorted((x(0.0), x(item.estimate)))
            parts.append(f'<rect x="{left:.1f}" y="{y + 5}" width="{max(right - left, 1):.1f}" '
                         f'height="{row - 10}"/>')
        if item.low is not None and item.high is not None:
            a, b = x(item.low), x(item.high)
            parts.append(f'<g class="whisker"><line x1="{a:.1f}" x2="{b:.1f}" y1="{middle}" '
                         f'y2="{middle}"/><line x1="{a:.1f}" x2="{a:.1f}" y1="{middle - 5}" '
                         f'y2="{middle + 5}"/><line x1="{b:.1f}" x2="{b:.1f}" '
                         f'y1="{middle - 5}" y2="{middle + 5}"/></g>')
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))


def _date(seconds: int, span: int) -> str:
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%m-%d %H:%M" if span < 3 * 86400 else "%Y-%m-%d")


def _y_ticks(ticks: Sequence[float], y: Callable[[float], float], left: int,
             plot_width: int) -> list[str]:
    """Horizontal grid lines with their labels on the left, one per tick."""
    return [f'<g class="tick"><line x1="{left}" x2="{left + plot_width}" y1="{y(tick):.1f}" '
            f'y2="{y(tick):.1f}"/><text class="y" x="{left - 6}" y="{y(tick) + 4:.1f}">'
            f'{_number(tick)}</text></g>' for tick in ticks]


def line_chart(lines: Sequence[Line], *, step: int, title: str, description: str,
               marks: Sequence[tuple[int, str]] = ()) -> Markup:
    """One line per series over time, each point's 95% interval drawn as a band around it;
    suppressed points leave a gap. ``marks`` (time, text): dashed vertical lines with their
    text (a release), drawn where they fall within the series' span."""
    left, plot_width, plot_height, top, bottom = 60, 620, 260, 10, 40
    starts = sorted({p[0] for line in lines for p in line.points})
    values = [v for line in lines for p in line.points for v in p[1:] if v is not None]
    ticks = nice_ticks(min(values, default=0.0), max(values, default=1.0))
    lo, hi = ticks[0], ticks[-1]
    first, last = (starts[0], starts[-1]) if starts else (0, 1)
    span = max(last - first, 1)

    def x(t: int) -> float:
        # A point sits in the middle of its step; a single point in the middle of the plot.
        return left + (plot_width / 2 if last == first else (t - first) / span * plot_width)

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * plot_height

    width, height = left + plot_width + 50, top + plot_height + bottom  # room for the last date
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'viewBox="0 0 {width} {height}" aria-label="{escape(title)}">'
             f'<title>{escape(title)}</title><desc>{escape(description)}</desc>']
    parts.extend(_y_ticks(ticks, y, left, plot_width))
    shown = starts if len(starts) <= 8 else starts[:: math.ceil(len(starts) / 8)]
    for t in shown:
        parts.append(f'<text class="x" x="{x(t):.1f}" y="{top + plot_height + 18}">'
                     f'{_date(t, span + step)}</text>')
    for moment, text in marks:
        if not first <= moment < last + step or not starts:
            continue
        at = x(moment) if last != first else x(first)
        when = f"{datetime.fromtimestamp(moment, UTC):%Y-%m-%d %H:%M} UTC"
        parts.append(f'<g class="mark" data-time="{moment}" data-text="{escape(text)}">'
                     f'<title>{escape(when)}: {escape(text)}</title>'
                     f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{top}" '
                     f'y2="{top + plot_height}"/><text x="{at + 3:.1f}" y="{top + 10}">'
                     f'{escape(_short(text, 120))}</text></g>')
    for index, line in enumerate(lines):
        colour = PALETTE[index % len(PALETTE)]
        parts.append(f'<g class="series" data-label="{escape(line.label)}" stroke="{colour}" '
                     f'fill="{colour}"><title>{escape(line.label)}</title>')
        for run in _runs(line.points):
            # A band only where every point of the run has an interval (a Square Wave
            # distribution's have none: the line alone).
            bounded = [(t, low, high) for t, _, low, high in run
                       if low is not None and high is not None]
            if len(bounded) == len(run):
                band = [f"{x(t):.1f},{y(high):.1f}" for t, _, high in bounded] + \
                    [f"{x(t):.1f},{y(low):.1f}" for t, low, _ in reversed(bounded)]
                parts.append(f'<polygon class="band" points="{" ".join(band)}"/>')
            path = " ".join(f"{x(t):.1f},{y(estimate):.1f}" for t, estimate, _, _ in run)
            parts.append(f'<polyline class="line" points="{path}"/>')
        for t, estimate, low, high in line.points:
            if estimate is None:
                continue
            said = (f"{line.label}, {datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M} UTC: "
                    f"{_number(estimate)}" + _interval(low, high))
            parts.append(f'<circle class="point" cx="{x(t):.1f}" cy="{y(estimate):.1f}" r="3" '
                         f'data-start="{t}" data-estimate="{_data(estimate)}" '
                         f'data-ci-low="{_data(low)}" data-ci-high="{_data(high)}">'
                         f'<title>{escape(said)}</title></circle>')
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))


def _runs(points: Sequence[tuple[int, float | None, float | None, float | None]]
          ) -> list[list[tuple[int, float, float | None, float | None]]]:
    """The stretches of consecutive estimated points (a suppressed point breaks the line;
    a point without an interval does not)."""
    runs: list[list[tuple[int, float, float | None, float | None]]] = [[]]
    for t, estimate, low, high in points:
        if estimate is None:
            runs.append([])
        else:
            runs[-1].append((t, estimate, low, high))
    return [run for run in runs if run]


def sparkline(counts: Sequence[int], *, title: str) -> Markup:
    """Small bars, one per day, for the campaign list."""
    width, height = 3 * max(len(counts), 1), 24
    peak = max(counts, default=0) or 1
    bars = "".join(f'<rect x="{3 * i}" y="{height - c / peak * height:.1f}" width="2" '
                   f'height="{c / peak * height:.1f}"/>' for i, c in enumerate(counts))
    return Markup(f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" role="img" '
                  f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
                  f'aria-label="{escape(title)}"><title>{escape(title)}</title>{bars}</svg>')


def histogram_chart(buckets: Sequence[HistogramBucket], markers: Sequence[QuantileMarker], *,
                    title: str, description: str) -> Markup:
    """Bars of equal width, one per bucket (equal on the campaign's scale, linear or log),
    the 95% interval of each share as a shaded band, and the quantiles as vertical lines over
    their shaded intervals."""
    left, plot_width, plot_height, top, bottom = 60, 620, 240, 10, 40
    values = [v for b in buckets for v in (b.share, b.low, b.high, 0.0)
              if v is not None and math.isfinite(v)]
    ticks = nice_ticks(min(values, default=0.0), max(values, default=1.0))
    lo, hi = ticks[0], ticks[-1]
    count = max(len(buckets), 1)

    def x(position: float) -> float:
        return left + position / count * plot_width

    def y(value: float) -> float:
        return top + (hi - value) / (hi - lo) * plot_height

    width, height = left + plot_width + 50, top + plot_height + bottom
    parts = [f'<svg class="chart histogram" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'viewBox="0 0 {width} {height}" aria-label="{escape(title)}">'
             f'<title>{escape(title)}</title><desc>{escape(description)}</desc>']
    parts.extend(_y_ticks(ticks, y, left, plot_width))
    for j in range(0, count + 1, max(1, count // 8)):
        edge = buckets[j].lo if j < len(buckets) else buckets[-1].hi
        parts.append(f'<text class="x" x="{x(j):.1f}" y="{top + plot_height + 18}">'
                     f'{_number(edge)}</text>')
    # No band where the answer states no intervals (Square Wave).
    bounded = [(j, b.low, b.high) for j, b in enumerate(buckets)
               if b.low is not None and b.high is not None]
    band = [f"{x(j + s):.1f},{y(high):.1f}" for j, _, high in bounded for s in (0, 1)] + \
        [f"{x(j + s):.1f},{y(low):.1f}" for j, low, _ in reversed(bounded) for s in (1, 0)]
    if band and len(bounded) == len(buckets):
        parts.append(f'<polygon class="band" points="{" ".join(band)}"/>')
    for j, b in enumerate(buckets):
        said = f"[{_number(b.lo)}, {_number(b.hi)}): share {_number(b.share)}" + _interval(
            b.low, b.high)
        bar_top, base = sorted((y(b.share), y(0.0)))
        parts.append(f'<rect class="bucket" x="{x(j) + 0.5:.1f}" y="{bar_top:.1f}" '
                     f'width="{max(plot_width / count - 1, 0.5):.1f}" '
                     f'height="{max(base - bar_top, 0.5):.1f}" data-lo="{_data(b.lo)}" '
                     f'data-hi="{_data(b.hi)}" data-estimate="{_data(b.share)}" '
                     f'data-ci-low="{_data(b.low)}" data-ci-high="{_data(b.high)}">'
                     f'<title>{escape(said)}</title></rect>')
    for index, m in enumerate(markers):
        colour = PALETTE[(index + 1) % len(PALETTE)]
        said = f"{m.label}: {_number(m.value)}" + _interval(m.low, m.high)
        span = "" if m.low_position is None or m.high_position is None else (
            f'<rect class="span" x="{x(m.low_position):.1f}" y="{top}" '
            f'width="{max(x(m.high_position) - x(m.low_position), 1):.1f}" '
            f'height="{plot_height}"/>')
        parts.append(f'<g class="quantile" data-label="{escape(m.label)}" '
                     f'data-estimate="{_data(m.value)}" data-ci-low="{_data(m.low)}" '
                     f'data-ci-high="{_data(m.high)}" stroke="{colour}" fill="{colour}">'
                     f'<title>{escape(said)}</title>{span}'
                     f'<line x1="{x(m.position):.1f}" x2="{x(m.position):.1f}" y1="{top}" '
                     f'y2="{top + plot_height}"/>'
                     f'<text x="{x(m.position) + 3:.1f}" y="{top + 12 + 12 * index}">'
                     f'{escape(m.label)}</text></g>')
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class HeatCell:
    """One cell of a two-way table: the share of (row value, column value) with its standard
    error and 95% interval (None: unknown, no reports)."""

    row: str
    column: str
    share: float | None
    std_error: float | None
    low: float | None
    high: float | None


# ColorBrewer's sequential Blues, lightest to darkest: ordered in lightness, so the shading
# reads the same in grey and with every common colour-vision deficiency.
HEAT_LIGHT = (247, 251, 255)
HEAT_DARK = (8, 48, 107)
HEAT_UNKNOWN = "#d8d8de"
#: Past this share of the darkest shade a cell's text is drawn light.
LIGHT_TEXT_FROM = 0.55


def heat_colour(t: float) -> str:
    """The shade for ``t`` in [0, 1] (clipped), from the lightest blue to the darkest."""
    t = min(max(t, 0.0), 1.0)
    return "#" + "".join(f"{round(a + (b - a) * t):02x}"
                         for a, b in zip(HEAT_LIGHT, HEAT_DARK, strict=True))


def heatmap_chart(cells: Sequence[HeatCell], rows: Sequence[str], columns: Sequence[str], *,
                  row_name: str, column_name: str, title: str, description: str) -> Markup:
    """A two-way table as a grid, one cell per (row, column) in row-major order, shaded by
    its estimate from 0 (lightest) to the largest estimate (darkest); an unbiased estimate
    below 0 is shaded as 0. Each cell prints its estimate, and its title and data attributes
    carry the estimate with its 95% interval."""
    label_width, top, cell_height, legend_height = 150, 44, 34, 46
    cell_width = max(48.0, min(110.0, 620 / max(len(columns), 1)))
    # As wide as the grid, or as the key below it (five 60-unit shades) if that is wider: a
    # narrow grid's key was drawn past the picture's edge and cut off.
    width = label_width + max(cell_width * len(columns), 5 * 60) + 20
    height = top + cell_height * len(rows) + legend_height
    known = [c.share for c in cells if c.share is not None and math.isfinite(c.share)]
    peak = max([*known, 0.0]) or 1.0
    # Drawn at its own size (not stretched to the page's width): a 2 × 2 table stays small.
    parts = [f'<svg class="chart heatmap" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" height="{height}" '
             f'aria-label="{escape(title)}">'
             f'<title>{escape(title)}</title><desc>{escape(description)}</desc>',
             f'<text class="axis" x="{label_width + cell_width * len(columns) / 2:.1f}" '
             f'y="14">{escape(column_name)}</text>',
             f'<text class="axis label" x="{label_width - 8}" y="14">{escape(row_name)}</text>']
    for j, column in enumerate(columns):
        parts.append(f'<text class="column" x="{label_width + (j + 0.5) * cell_width:.1f}" '
                     f'y="{top - 8}">{escape(_short(column, cell_width))}</text>')
    for i, row in enumerate(rows):
        parts.append(f'<text class="label" x="{label_width - 8}" '
                     f'y="{top + (i + 0.5) * cell_height + 4:.1f}">'
                     f'{escape(_short(row, label_width))}</text>')
    for index, cell in enumerate(cells):
        i, j = divmod(index, len(columns))
        x, y = label_width + j * cell_width, top + i * cell_height
        known_share = cell.share is not None and math.isfinite(cell.share)
        t = max(cell.share, 0.0) / peak if known_share and cell.share is not None else 0.0
        if known_share and cell.low is not None and cell.high is not None:
            said = (f"{row_name}={cell.row}, {column_name}={cell.column}: "
                    f"{_number(cell.share or 0.0)} [{_number(cell.low)}, {_number(cell.high)}]")
            text = f"{cell.share:.3f}"
        else:
            said = f"{row_name}={cell.row}, {column_name}={cell.column}: unknown (no reports)"
            text = "–"
        shade = heat_colour(t) if known_share else HEAT_UNKNOWN
        parts.append(f'<g class="cell" data-row="{escape(cell.row)}" '
                     f'data-column="{escape(cell.column)}" data-estimate="{_data(cell.share)}" '
                     f'data-std-error="{_data(cell.std_error)}" data-ci-low="{_data(cell.low)}" '
                     f'data-ci-high="{_data(cell.high)}"><title>{escape(said)}</title>'
                     f'<rect x="{x + 1:.1f}" y="{y + 1}" width="{cell_width - 2:.1f}" '
                     f'height="{cell_height - 2}" fill="{shade}"/>'
                     f'<text class="{"light" if t >= LIGHT_TEXT_FROM else "dark"}" '
                     f'x="{x + cell_width / 2:.1f}" y="{y + cell_height / 2 + 4:.1f}">'
                     f'{text}</text></g>')
    # The key: five shades with the estimates they stand for.
    key_top = top + cell_height * len(rows) + 14
    parts.append(f'<g class="key"><text class="label" x="{label_width - 8}" '
                 f'y="{key_top + 12}">share</text>')
    for step in range(5):
        value = peak * step / 4
        parts.append(f'<rect x="{label_width + step * 60}" y="{key_top}" width="58" '
                     f'height="16" fill="{heat_colour(step / 4)}"/>'
                     f'<text x="{label_width + step * 60 + 29}" y="{key_top + 30}">'
                     f'{value:.3g}</text>')
    parts.append("</g></svg>")
    return Markup("".join(parts))
