"""Forecast vs actual as a small SVG line chart (the site needs no chart library to show two lines).

The colours and dashes are the evaluation card's (Vega-Lite's first two category colours): actual
solid blue, forecast dashed orange; a legend says which is which.
"""

from __future__ import annotations

import html
import math

from nyc_taxi.lineage.read.site.collect import ForecastVsActual

WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 40, 44  # room for the axes' labels and the legend
SERIES = {"actual": ("#4c78a8", ""), "forecast": ("#f58518", "6 4")}


def _nice_top(value: float) -> float:
    """The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^n) at or above ``value``: the y axis' top."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if step * power >= value)


def _points(values: list[float | None], top: float) -> list[str]:
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    last = max(len(values) - 1, 1)
    return [
        f"{LEFT + inner_w * i / last:.1f},{TOP + inner_h * (1 - v / top):.1f}"
        for i, v in enumerate(values)
        if v is not None
    ]


def _axes(hours: list[str], top: float) -> list[str]:
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<line x1="{LEFT}" y1="{TOP + inner_h}" x2="{WIDTH - RIGHT}" y2="{TOP + inner_h}" stroke="#888"/>']
    for tick in range(5):
        value = top * tick / 4
        y = TOP + inner_h * (1 - tick / 4)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
    every = max(1, len(hours) // 8)
    last = max(len(hours) - 1, 1)
    for i in range(0, len(hours), every):
        x = LEFT + inner_w * i / last
        parts.append(f'<text x="{x:.1f}" y="{TOP + inner_h + 16}" text-anchor="middle">{hours[i][11:16]}</text>')
    day = hours[0][:10] if hours else ""
    parts.append(
        f'<text x="{LEFT + inner_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">New York local hour ({day})</text>'
    )
    parts.append(
        f'<text x="14" y="{TOP + inner_h / 2}" text-anchor="middle" transform="rotate(-90 14 {TOP + inner_h / 2})">'
        "rides, all zones</text>"
    )
    return parts


def _legend() -> list[str]:
    parts, x = [], LEFT
    for name, (colour, dash) in SERIES.items():
        parts.append(
            f'<line x1="{x}" y1="16" x2="{x + 28}" y2="16" stroke="{colour}" stroke-width="3" stroke-dasharray="{dash}"/>'
        )
        parts.append(f'<text x="{x + 34}" y="20" class="legend">{name}</text>')
        x += 120
    return parts


def forecast_chart(data: ForecastVsActual) -> str:
    """The chart as inline SVG: rides per hour summed over the forecast's zones, actual and forecast."""
    top = _nice_top(max([v for v in data.actual + data.forecast if v is not None], default=1))
    lines = []
    for name, values in (("actual", data.actual), ("forecast", data.forecast)):
        colour, dash = SERIES[name]
        lines.append(
            f'<polyline class="series-{name}" fill="none" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="{dash}" points="{" ".join(_points(values, top))}"/>'
        )
    title = html.escape(f"Forecast vs actual — {data.model}, as of {data.as_of}")
    return (
        f'<svg class="chart" role="img" aria-label="{title}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg" font-family="Helvetica, Arial, sans-serif" '
        f'font-size="12"><title>{title}</title>' + "".join(_axes(data.hours, top) + lines + _legend()) + "</svg>"
    )


# ---- a dataset's profile over its versions ----------------------------------------------------------------

SMALL_WIDTH, SMALL_HEIGHT = 380, 200
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#9d755d")


def versions_chart(
    title: str,
    versions: list[str],
    series: dict[str, list[float | None]],
    y_label: str,
    x_label: str = "version (oldest left)",
    short=lambda version: f"…{version[-6:]}",
) -> str:
    """A small line chart of values over a dataset's versions (oldest left), one line per series, a dot
    per version; ``versions`` label the x axis (``short`` of each), the full ones on hover. Any other
    sequence too (forecast origins), with its own ``x_label``."""
    width, left, right, bottom = SMALL_WIDTH, 72, 12, 34
    # the legend wraps to as many lines as its names need, above the plot
    legend, line, x0 = [], 0, left
    for name in series:
        item = 14 + 7 * len(name) + 16
        if x0 + item > width - right and x0 > left:
            line, x0 = line + 1, left
        legend.append((name, x0, 8 + 16 * line))
        x0 += item
    top_pad = 30 + 16 * line
    height = SMALL_HEIGHT + 16 * line
    inner_w, inner_h = width - left - right, height - top_pad - bottom
    values = [v for points in series.values() for v in points if v is not None]
    top = _nice_top(max(values, default=1))
    last = max(len(versions) - 1, 1)

    def x(i: int) -> float:
        return left + (inner_w * i / last if len(versions) > 1 else inner_w / 2)

    def y(v: float) -> float:
        return top_pad + inner_h * (1 - v / top)

    parts = [
        f'<line x1="{left}" y1="{top_pad + inner_h}" x2="{width - right}" y2="{top_pad + inner_h}" stroke="#888"/>'
    ]
    for tick in range(3):
        value = top * tick / 2
        parts.append(
            f'<line x1="{left}" y1="{y(value):.1f}" x2="{width - right}" y2="{y(value):.1f}" stroke="#e5e5e5"/>'
        )
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:,.0f}</text>')
    every = max(1, len(versions) // 4)
    for i in range(0, len(versions), every):
        label = html.escape(short(versions[i]))
        parts.append(f'<text x="{x(i):.1f}" y="{top_pad + inner_h + 14}" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{left + inner_w / 2}" y="{height - 4}" text-anchor="middle">{html.escape(x_label)}</text>')
    parts.append(
        f'<text x="10" y="{top_pad + inner_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 10 {top_pad + inner_h / 2})">{html.escape(y_label)}</text>'
    )
    for (name, points), colour, (_, legend_x, legend_y) in zip(series.items(), PALETTE, legend, strict=False):
        drawn = [(i, v) for i, v in enumerate(points) if v is not None]
        path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in drawn)
        parts.append(f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for i, v in drawn:
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}">'
                f"<title>{html.escape(versions[i])}: {v:,.0f}</title></circle>"
            )
        parts.append(f'<rect x="{legend_x}" y="{legend_y}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x + 14}" y="{legend_y + 9}" class="legend">{html.escape(name)}</text>')
    label = html.escape(title)
    return (
        f'<svg class="chart small" role="img" aria-label="{label}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" font-family="Helvetica, Arial, sans-serif" '
        f'font-size="11"><title>{label}</title>' + "".join(parts) + "</svg>"
    )
