"""The ranks section's chart: each rank's step time and wait inside collectives, by step index."""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt
from tracekit.report.chart_style import FALLBACK_COLORS, chart_item, legend_outside, style

CHART_ID = "tk-ranks-steps"


def rank_steps(data: dict[str, Any]) -> dict[str, Any]:
    """``{"id", "item"}`` (a Bokeh chart), or ``{}`` when fewer than two steps make no line."""
    entries = [e for e in data.get("ranks") or [] if len(e.get("steps") or []) >= 2]
    if not entries:
        return {}
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.models.renderers import DataRenderer
    from bokeh.plotting import figure

    p = figure(
        title="Step time and wait inside collectives per rank, steps aligned by index",
        height=300,
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
        x_axis_label="step index",
        y_axis_label="ms",
    )
    lines: list[DataRenderer] = []
    for i, e in enumerate(entries):
        steps = e["steps"]
        src = ColumnDataSource(
            {
                "x": [s["index"] for s in steps],
                "time": [s["time_ms"] for s in steps],
                "wait": [s["wait_ms"] if s["wait_ms"] is not None else float("nan") for s in steps],
                "rank": [str(e["rank"])] * len(steps),
                "time_t": [fmt.ms(s["time_ms"]) for s in steps],
                "wait_t": [fmt.ms(s["wait_ms"]) for s in steps],
                "coll_t": [fmt.ms(s["collective_ms"]) for s in steps],
            }
        )
        color = FALLBACK_COLORS[i % len(FALLBACK_COLORS)]
        lines.append(
            p.line("x", "time", source=src, color=color, line_width=2, legend_label=f"rank {e['rank']} step time")
        )
        p.line(
            "x",
            "wait",
            source=src,
            color=color,
            line_width=1,
            line_dash="dashed",
            legend_label=f"rank {e['rank']} wait",
        )
    p.add_tools(
        HoverTool(
            renderers=lines,
            tooltips=[
                ("rank", "@rank"),
                ("step", "@x"),
                ("time", "@time_t"),
                ("collectives", "@coll_t"),
                ("wait", "@wait_t"),
            ],
        )
    )
    style(p)
    legend_outside(p)
    return chart_item(p, CHART_ID)
