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
