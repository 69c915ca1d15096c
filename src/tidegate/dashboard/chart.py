"""A small bar chart as inline SVG, drawn on the server: no chart library, no script.

Each bar is one minute; its <title> gives the count and the minute, so the
chart reads on hover and to a screen reader (the <svg> has a role and label).
"""

from __future__ import annotations

from markupsafe import Markup

WIDTH = 600
HEIGHT = 120
GAP = 2


def bars(counts: list[int], label: str) -> Markup:
    """`counts` oldest first, one per minute, the last being the current minute."""
    peak = max(counts, default=0) or 1
    step = WIDTH / max(1, len(counts))
    shapes = []
    for index, count in enumerate(counts):
        height = 0 if count == 0 else max(2.0, (HEIGHT - 14) * count / peak)
        ago = len(counts) - 1 - index
        when = "this minute" if ago == 0 else f"{ago} min ago"
        shapes.append(
            Markup(
                '<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" rx="1"><title>{} ended, {}</title></rect>'
            ).format(index * step + GAP / 2, HEIGHT - height, step - GAP, height, count, when)
        )
    axis = Markup('<line x1="0" y1="{0}" x2="{1}" y2="{0}" class="axis"/>').format(HEIGHT - 0.5, WIDTH)
    return Markup(
        '<svg class="chart" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" aria-label="{}">{}{}</svg>'
    ).format(WIDTH, HEIGHT, label, Markup("").join(shapes), axis)
