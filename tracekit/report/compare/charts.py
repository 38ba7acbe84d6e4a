"""Bokeh charts of a comparison: per phase, time by bound and by category (before
and after as two stacked bars in ms), and each category's % of its own roof.

Builders take ``Comparison.to_dict()`` and return ``{"id", "item"}`` or
``{"reason"}``, like ``tracekit.report.charts``, whose colours they reuse (and the shared
look of ``tracekit.report.chart_style``).
Tooltips are Bokeh ``@field`` lists: values are shown as text, never as HTML.
"""

from __future__ import annotations

from typing import Any, cast

from tracekit import formatting as fmt
from tracekit.report.chart_style import FONT, chart_item, legend_outside, style
from tracekit.report.charts import BOUND_COLORS, category_color
from tracekit.report.compare.view import BOUND_ORDER, SIDES, device_word, roof_of, tag
from tracekit.report.view import BOUND_LABELS, WITHHELD_LABELS, phase_label

SIDE_COLORS = {"before": "#9aa5b1", "after": "#2f6db5"}


def _label(phase: str) -> str:
    return "Whole trace" if phase == "all" else phase_label(phase)


def stacked_ms(title: str, rows: list[dict[str, Any]], x_label: str, chart_id: str, height: int) -> dict[str, Any]:
    """Horizontal stacked bars in ms: one per row (``label``), segments ``[(label, ms, color)]``."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
    from bokeh.plotting import figure

    ys = [r["label"] for r in rows][::-1]  # before on top
    seg: dict[str, list] = {k: [] for k in ("y", "left", "right", "color", "part", "ms", "share")}
    top = 0.0
    for r in rows:
        total = sum(ms for _, ms, _ in r["segments"] if ms) or 0.0
        left = 0.0
        for label, ms, color in r["segments"]:
            if not ms or ms <= 0:
                continue
            seg["y"].append(r["label"])
            seg["left"].append(left)
            seg["right"].append(left + ms)
            seg["color"].append(color)
            seg["part"].append(label)
            seg["ms"].append(fmt.ms(ms))
            seg["share"].append(fmt.pct(ms / total) if total else fmt.MISSING)
            left += ms
        top = max(top, left)
    p = figure(
        title=title,
        y_range=FactorRange(factors=ys),
        x_range=Range1d(start=0, end=(top or 1.0) * 1.04),
        height=height,
        sizing_mode="stretch_width",
        tools="save",
        toolbar_location="above",
    )
    bars = p.hbar(
        y="y",
        left="left",
        right="right",
        height=0.6,
        color="color",
        line_color="#ffffff",
        legend_field="part",
        source=ColumnDataSource(seg),
    )
    p.add_tools(
        HoverTool(renderers=[bars], tooltips=[("", "@y"), ("part", "@part"), ("time", "@ms"), ("share", "@share")])
    )
    p.xaxis.axis_label = x_label
    p.ygrid.grid_line_color = None
    style(p)
    legend_outside(p)
    if len(set(seg["part"])) > 7:  # long category legends in two columns keep the chart low
        p.legend[0].ncols = 2
    return chart_item(p, chart_id)


def stacked_height(n_legend: int) -> int:
    """The height (px) of a ``stacked_ms`` chart whose legend has ``n_legend`` entries."""
    rows = n_legend if n_legend <= 7 else (n_legend + 1) // 2
    return max(200, 84 + 21 * rows)


def phase_bars(data: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    """Two charts for one phase: time by bound (with idle) and kernel time by category."""
    p = (data.get("phases") or {}).get(phase) or {}
    present = p.get("present") or {}
    if not (present.get("before") and present.get("after")):
        return []
    word = device_word(data)
    per = p.get("basis") == "per step"
    unit = "ms per step" if per else "ms"
    label = _label(phase)
    sides = [s for s in SIDES]
    bound = {r["name"]: r for r in p.get("by_bound") or []}
    bounds = [b for b in BOUND_ORDER if b in bound] + [b for b in bound if b not in BOUND_ORDER]
    bound_rows = [
        {
            "label": tag(data, s),
            "segments": [
                (
                    f"{word} idle" if b == "idle" else BOUND_LABELS.get(b, b),
                    bound[b][f"{s}_ms"],
                    BOUND_COLORS.get(b, "#777777"),
                )
                for b in bounds
            ],
        }
        for s in sides
    ]
    cats = sorted((r for r in p.get("by_category") or []), key=lambda r: -max(r["before_ms"], r["after_ms"]))
    cat_rows = [
        {
            "label": tag(data, s),
            "segments": [(r["name"], r[f"{s}_ms"], category_color(r["name"], i)) for i, r in enumerate(cats)],
        }
        for s in sides
    ]
    h = stacked_height(max(len(bounds), len(cats)))
    return [
        stacked_ms(
            f"{label}: {word} time by bound",
            bound_rows,
            f"{unit} (kernel time + {word} idle)",
            f"tk-cmp-{phase}-bound",
            h,
        ),
        stacked_ms(
            f"{label}: kernel time by category", cat_rows, f"{unit} of kernel time", f"tk-cmp-{phase}-category", h
        ),
    ]


def roof_chart(data: dict[str, Any], phase: str) -> dict[str, Any]:
    """Each category's time-weighted % of its own run's roof, before and after side by side."""
    from bokeh.models import CategoricalAxis, ColumnDataSource, FactorRange, HoverTool, NumeralTickFormatter, Range1d
    from bokeh.models.annotations import Legend, LegendItem  # bokeh.models' re-export is hidden from type checkers
    from bokeh.models.renderers import GlyphRenderer
    from bokeh.plotting import figure

    roofs = ((data.get("phases") or {}).get(phase) or {}).get("roof") or {}
    rb, ra = roofs.get("before") or {}, roofs.get("after") or {}
    withheld = roofs.get("withheld") or {}
    if not rb and not ra and not any(withheld.values()):
        return {
            "reason": f"No roofline comparison for {_label(phase).lower()}: neither run's kernels could be priced "
            "against a roof (no spec row, or no FLOPs and bytes)."
        }
    # Categories in order of kernel time (the ones that matter first), not of roof fraction.
    ms = {
        r["name"]: max(r["before_ms"], r["after_ms"])
        for r in ((data.get("phases") or {}).get(phase) or {}).get("by_category") or []
    }
    cats = sorted(
        set(rb) | set(ra) | {c for side in withheld.values() for c in side}, key=lambda c: (-ms.get(c, 0.0), c)
    )
    sources = {}
    factors = [(c, s) for c in cats for s in SIDES]
    for s, values in (("before", rb), ("after", ra)):
        cols: dict[str, list] = {k: [] for k in ("x", "y", "side", "roof", "value", "category")}
        for c in cats:
            v = values.get(c)
            cols["x"].append((c, s))
            cols["y"].append(v or 0.0)
            cols["side"].append(tag(data, s))
            cols["roof"].append(roof_of(data, s))
            held = (withheld.get(s) or {}).get(c)
            # A withheld fraction (above its roof, or bytes capped at it) draws no bar: its label says why.
            cols["value"].append(
                fmt.pct(v)
                if v is not None
                else WITHHELD_LABELS.get(held.get("why"), fmt.MISSING)
                if held
                else "not priced in this run"
            )
            cols["category"].append(c)
        sources[s] = ColumnDataSource(cols)
    top = max([*rb.values(), *ra.values(), 0.0])
    y_top = max(1.0, top * 1.1)  # every fraction shown is at most its roof, plus timing noise
    p = figure(
        title=f"{_label(phase)}: % of each run's own roof, by category (time-weighted)",
        x_range=FactorRange(factors=factors, group_padding=0.8, subgroup_padding=0.1),
        y_range=Range1d(start=0, end=y_top),
        height=340,
        sizing_mode="stretch_width",
        tools="save",
        toolbar_location="above",
    )
    renderers: list[GlyphRenderer] = []
    for s in SIDES:
        renderers.append(p.vbar(x="x", top="y", width=0.9, color=SIDE_COLORS[s], line_color=None, source=sources[s]))
    p.add_tools(
        HoverTool(
            renderers=list(renderers),
            tooltips=[
                ("category", "@category"),
                ("run", "@side"),
                ("against the roof of", "@roof"),
                ("achieved", "@value"),
            ],
            mode="vline",
        )
    )  # a short bar is hovered anywhere in its column
    p.yaxis.formatter = NumeralTickFormatter(format="0%")
    p.yaxis.axis_label = "time the roof allows / time taken"
    xaxis = cast(CategoricalAxis, p.xaxis[0])  # the one x axis, of the FactorRange
    xaxis.major_label_text_font_size = "0px"  # "before"/"after" under every bar: the legend says it
    xaxis.major_tick_line_color = None
    xaxis.group_text_font = FONT
    xaxis.group_text_font_size = "11px"
    xaxis.group_label_orientation = 0.6 if len(cats) > 8 else "horizontal"
    p.xgrid.grid_line_color = None
    style(p)
    legend = Legend(
        items=[LegendItem(label=tag(data, s), renderers=[r]) for s, r in zip(SIDES, renderers)],
        orientation="horizontal",
        location="top_right",
        label_text_font=FONT,
        label_text_font_size="11px",
        border_line_color=None,
        background_fill_alpha=0.8,
    )
    p.add_layout(legend, "above")
    held = sorted({c for side in withheld.values() for c in side})
    note = (
        (
            f"No bar for {', '.join(held)} where its fraction is withheld (above its roof, or bytes capped at it): "
            "the table says why."
        )
        if held
        else None
    )
    return {"id": f"tk-cmp-{phase}-roof", **chart_item(p, f"tk-cmp-{phase}-roof"), "note": note}


def all_charts(data: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every chart item, and per phase the ids (or reasons) the template places."""
    items: list[dict[str, Any]] = []
    ids: dict[str, dict[str, Any]] = {}
    for phase in data.get("phases") or {}:
        bars = phase_bars(data, phase)
        roof = roof_chart(data, phase)
        items += [b["item"] for b in bars]
        if "item" in roof:
            items.append(roof["item"])
        ids[phase] = {
            "bars": [b["id"] for b in bars],
            "roof": roof.get("id"),
            "roof_reason": roof.get("reason"),
            "roof_note": roof.get("note"),
        }
    return items, ids
