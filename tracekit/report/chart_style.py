"""The look every report chart shares: a Bokeh figure in -> styled, its legend placed, embedded.

Every renderer that draws a chart (the report's, a comparison's, a projection's, a plan's,
a fleet's, the ranks section's) builds its own Bokeh figure and passes it here: ``style``
sets the font, title and background, ``legend_outside`` moves the legend to the right of
the plot, and ``chart_item`` turns the figure into the ``{"id", "item"}`` the page's inline
script embeds. ``FALLBACK_COLORS`` colour series that have no colour of their own.
"""

from __future__ import annotations

from typing import Any

# Colours of series with none of their own (categories outside CATEGORY_COLORS, one line per rank).
FALLBACK_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"  # every chart's text


def style(p) -> None:
    """The report's look on figure ``p``: font, bold title, no logo, white background."""
    p.toolbar.logo = None
    p.toolbar.autohide = False
    p.title.text_font = FONT
    p.title.text_font_size = "13px"
    p.title.text_font_style = "bold"
    for ax in p.axis:
        ax.axis_label_text_font = FONT
        ax.axis_label_text_font_style = "normal"
        ax.major_label_text_font = FONT
    p.outline_line_color = None
    p.background_fill_color = "#ffffff"
    p.border_fill_color = "#ffffff"


def chart_item(p, chart_id: str) -> dict[str, Any]:
    """``{"id", "item"}``: figure ``p`` as a ``bokeh.embed.json_item`` for the element ``chart_id``."""
    from bokeh.core.types import ID
    from bokeh.embed import json_item

    return {"id": chart_id, "item": json_item(p, target=ID(chart_id))}


def legend_outside(p) -> None:
    """Figure ``p``'s legend (if any) moved to the right of the plot, in the report's font."""
    if p.legend:
        leg = p.legend[0]
        p.add_layout(leg, "right")
        leg.label_text_font = FONT
        leg.label_text_font_size = "11px"
        # Entries grouped from one renderer (legend_field) would all hide together: no clicking.
        leg.click_policy = "none"
        leg.border_line_color = None
        leg.margin = 16  # room for the last x tick label ("100%") beside the legend
