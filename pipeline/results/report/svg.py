"""Small inline SVG charts for the report: pure functions returning markup, no scripts.

Every label is escaped; numbers are formatted here. The charts scale to their container.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

BAR_HEIGHT = 18  # px per bar
LABEL_WIDTH = 140  # px for the label column
CHART_WIDTH = 520  # px, labels included


def bar_chart(title: str, bars: Sequence[tuple[str, float]], *, unit: str = "") -> str:
    """A horizontal bar chart: one labelled bar per ``(label, value)``, value printed after it."""
    esc = html.escape
    peak = max((v for _, v in bars), default=0) or 1
    span = CHART_WIDTH - LABEL_WIDTH - 70
    height = BAR_HEIGHT * len(bars) + 8
    out = [
        f'<svg class="chart" role="img" viewBox="0 0 {CHART_WIDTH} {height}"'
        f' width="{CHART_WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(title)}</title>",
    ]
    for i, (label, value) in enumerate(bars):
        y = 4 + i * BAR_HEIGHT
        width = max(0.0, value / peak * span)
        shown = f"{value:g}{unit}"
        out.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 13}" text-anchor="end">{esc(label)}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y + 2}" width="{width:.1f}" height="{BAR_HEIGHT - 5}"'
            ' class="bar"/>'
            f'<text x="{LABEL_WIDTH + width + 4:.1f}" y="{y + 13}">{esc(shown)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


SERIES_COLOURS = ("#4a7bd0", "#2e9d6a")  # the first and second bar of each group
GROUP_GAP = 8  # px between groups
LEGEND_HEIGHT = 22  # px


def paired_bar_chart(
    title: str,
    series: tuple[str, str],
    groups: Sequence[tuple[str, Sequence[tuple[float | None, str]]]],
    *,
    peak: float = 100.0,
) -> str:
    """Two bars per group (one per ``series``), each ``(value, shown)``: ``shown`` is printed
    after the bar as given (the caller formats it, so that it reads as its table does); a
    ``None`` value draws no bar. Each bar's ``<g>`` carries ``data-group`` and
    ``data-series`` (escaped), for whoever checks the chart against its table."""
    esc = html.escape
    span = CHART_WIDTH - LABEL_WIDTH - 70
    group_height = 2 * BAR_HEIGHT + GROUP_GAP
    height = LEGEND_HEIGHT + group_height * len(groups) + 4
    out = [
        f'<svg class="chart paired" role="img" viewBox="0 0 {CHART_WIDTH} {height}"'
        f' width="{CHART_WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{esc(title)}</title>",
    ]
    for i, (name, colour) in enumerate(zip(series, SERIES_COLOURS, strict=True)):
        x = LABEL_WIDTH + i * 150
        out.append(
            f'<rect x="{x}" y="4" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 16}" y="15">{esc(name)}</text>'
        )
    for g, (label, bars) in enumerate(groups):
        top = LEGEND_HEIGHT + g * group_height
        out.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{top + BAR_HEIGHT + 4}" text-anchor="end">'
            f"{esc(label)}</text>"
        )
        for b, ((value, shown), name, colour) in enumerate(
            zip(bars, series, SERIES_COLOURS, strict=True)
        ):
            y = top + b * BAR_HEIGHT
            width = 0.0 if value is None else max(0.0, min(value, peak) / peak * span)
            out.append(
                f'<g data-group="{esc(label)}" data-series="{esc(name)}">'
                f'<rect x="{LABEL_WIDTH}" y="{y + 2}" width="{width:.1f}"'
                f' height="{BAR_HEIGHT - 5}" fill="{colour}"/>'
                f'<text class="value" x="{LABEL_WIDTH + width + 4:.1f}" y="{y + 13}">'
                f"{esc(shown)}</text></g>"
            )
    out.append("</svg>")
    return "".join(out)
