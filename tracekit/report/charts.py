"""Interactive charts for the HTML report, drawn with Bokeh and embedded offline.

Each builder takes the JSON contract (``Analysis.to_dict()``) and returns either a
chart ``{"id", "item"}`` (a ``bokeh.embed.json_item``, embedded by the page's inline
script) or ``{"reason": sentence}`` where the chart cannot be drawn. Geometry (bar
extents, marker sizes, roof line endpoints) is computed here; figures are not.

Hover tooltips are lists of (label, "@field") pairs: Bokeh renders their values as
text, never as HTML, so trace strings in the data stay inert. The look every chart shares
(font, legend placement, embedding, fallback colours) is ``tracekit.report.chart_style``.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from tracekit import formatting as fmt
from tracekit.report.chart_style import FALLBACK_COLORS, FONT, chart_item, legend_outside, style
from tracekit.report.view import BOUND_LABELS, BOUNDS, LIMITERS, device_word, limiter_labels, phase_label

if TYPE_CHECKING:
    from bokeh.resources import Component

# Bokeh's JS bundles: only the core one is needed (no widgets, tables, WebGL, MathJax).
BOKEH_COMPONENTS: list[Component] = ["bokeh"]
# The decode chart shows at most this many steps (every k-th beyond it, said on the page).
MAX_STEP_BARS = 2000

BOUND_COLORS = {
    "compute": "#2f6db5",
    "memory": "#e07b1f",
    "interconnect": "#7b52ab",
    "unknown": "#9a9a9a",
    "idle": "#e4e4e4",
}
LIMITER_COLORS = {**BOUND_COLORS, "latency": "#c2185b", "below_roof": "#f2a7c3"}
# Categories avoid the bound colours' exact tones so the two side-by-side charts don't read alike.
CATEGORY_COLORS = {
    "gemm": "#5b9bd5",
    "attention": "#8e44ad",
    "elementwise": "#16a085",
    "activation": "#f1c40f",
    "normalization": "#b7950b",
    "reduction": "#a3c93a",
    "embedding": "#c0392b",
    "rope": "#e84393",
    "moe": "#1abc9c",
    "sampling": "#8d6e63",
    "kv_cache": "#00bcd4",
    "communication": "#d35400",
    "memcpy": "#7f8c8d",
    "memset": "#bdc3c7",
    "conv": "#34495e",
    "other": "#b5b5b5",
}


def category_color(cat: str, i: int = 0) -> str:
    return CATEGORY_COLORS.get(cat, FALLBACK_COLORS[i % len(FALLBACK_COLORS)])


# --- phase breakdown ----------------------------------------------------------------------


def _stacked_share_bars(
    title: str, rows: list[dict[str, Any]], x_label: str, chart_id: str, height: int
) -> dict[str, Any]:
    """Horizontal 100 % bars: one per row (``label``), segments ``[(key, label, share, ms, color)]``."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, NumeralTickFormatter, Range1d
    from bokeh.plotting import figure

    ys = [r["label"] for r in rows][::-1]  # first row on top
    seg: dict[str, list] = {k: [] for k in ("y", "left", "right", "color", "part", "ms", "share", "of")}
    for r in rows:
        left = 0.0
        for _key, label, share, ms, color in r["segments"]:
            if not share:
                continue
            seg["y"].append(r["label"])
            seg["left"].append(left)
            seg["right"].append(left + share)
            seg["color"].append(color)
            seg["part"].append(label)
            seg["ms"].append(fmt.ms(ms))
            seg["share"].append(fmt.pct(share))
            seg["of"].append(r.get("of", ""))
            left += share
    src = ColumnDataSource(seg)
    p = figure(
        title=title,
        y_range=FactorRange(factors=ys),
        x_range=Range1d(start=0, end=1),
        height=height,
        sizing_mode="stretch_width",
        tools="save",
        toolbar_location="above",
    )
    bars = p.hbar(
        y="y",
        left="left",
        right="right",
        height=0.62,
        color="color",
        line_color="#ffffff",
        legend_field="part",
        source=src,
    )
    p.add_tools(
        HoverTool(renderers=[bars], tooltips=[("", "@y"), ("part", "@part"), ("time", "@ms"), ("share", "@share @of")])
    )
    p.xaxis.formatter = NumeralTickFormatter(format="0%")
    p.xaxis.axis_label = x_label
    p.ygrid.grid_line_color = None
    p.legend.orientation = "vertical"
    style(p)
    legend_outside(p)
    return chart_item(p, chart_id)


def phase_breakdown(data: dict[str, Any]) -> dict[str, Any]:
    """Two charts side by side: time by bound (with idle), and kernel time by category."""
    word = device_word(data)
    phases = data["phases"]
    if phases:
        bound_rows = []
        cat_rows = []
        cats: list[str] = []
        for phase, p in phases.items():
            share = p.get("by_bound_share") or {}
            bound_rows.append(
                {
                    "label": f"{phase_label(phase)}: bound",
                    "of": "of the phase's kernel + idle time",
                    "segments": [
                        (
                            b,
                            BOUND_LABELS[b] if b != "idle" else f"{word} idle",
                            share.get(b),
                            (p.get("by_bound") or {}).get(b),
                            BOUND_COLORS[b],
                        )
                        for b in BOUNDS
                    ],
                }
            )
            if p.get("by_limiter"):
                lshare = p.get("by_limiter_share") or {}
                labels = limiter_labels(data)
                bound_rows.append(
                    {
                        "label": f"{phase_label(phase)}: limiter",
                        "of": "of the phase's kernel + idle time",
                        "segments": [
                            (
                                k,
                                f"limited by {labels[k]}" if k != "idle" else f"{word} idle",
                                lshare.get(k),
                                p["by_limiter"].get(k),
                                LIMITER_COLORS[k],
                            )
                            for k in LIMITERS
                        ],
                    }
                )
            for c in p.get("by_category") or {}:
                if c not in cats:
                    cats.append(c)
        for phase, p in phases.items():
            cshare = p.get("by_category_share") or {}
            cat_rows.append(
                {
                    "label": phase_label(phase),
                    "of": "of the phase's kernel time",
                    "segments": [
                        (c, c, cshare.get(c), (p.get("by_category") or {}).get(c), category_color(c, i))
                        for i, c in enumerate(cats)
                    ],
                }
            )
    else:
        overall = data.get("overall") or {}
        if not overall.get("kernel_ms"):
            return {"reason": "The trace holds no kernel time to break down."}
        bound_rows = []
        cshare = overall.get("by_category_share") or {}
        cats = list(overall.get("by_category") or {})
        cat_rows = [
            {
                "label": "Whole trace",
                "of": "of the trace's kernel time",
                "segments": [
                    (c, c, cshare.get(c), overall["by_category"].get(c), category_color(c, i))
                    for i, c in enumerate(cats)
                ],
            }
        ]
    height = 90 + 40 * max(len(bound_rows), len(cat_rows))
    bound_legend = {seg[1] for r in bound_rows for seg in r["segments"] if seg[2]}  # bounds and limiters
    height = max(height, 84 + 21 * max(len(cats), len(bound_legend)))  # room for the longer legend
    out: dict[str, Any] = {"charts": []}
    if bound_rows:
        out["charts"].append(
            _stacked_share_bars(
                f"{word} time by bound and by limiter",
                bound_rows,
                "share of kernel + idle time",
                "tk-chart-bound",
                height,
            )
        )
    out["charts"].append(
        _stacked_share_bars("Kernel time by category", cat_rows, "share of kernel time", "tk-chart-category", height)
    )
    return out


# --- decode over time -----------------------------------------------------------------------


def decode_steps(data: dict[str, Any]) -> dict[str, Any]:
    from bokeh.models import BasicTicker, ColumnDataSource, HoverTool, Range1d
    from bokeh.plotting import figure

    word = device_word(data)
    # Mixed steps hold decode work too: an engine's decoding requests wait for them.
    steps = [s for s in data.get("steps") or [] if s.get("phase") in ("decode", "mixed")]
    if not steps:
        why = ((data.get("provenance") or {}).get("reasons") or {}).get("tpot_ms")
        if data.get("run_kind") == "training":
            why = "this is a training run: it has no decode steps"
        return {"reason": f"No decode steps to show over time: {why or 'the trace holds no decode step'}."}
    if len(steps) == 1:
        # One bar on an axis of made-up neighbours says less than its figures in a sentence.
        s = steps[0]
        return {
            "reason": f"One {s['phase']} step (step {s['index']}), so nothing changes over time: it took "
            f"{fmt.ms(s['duration_ms'])}, {word} busy {fmt.ms(s['gpu_busy_ms'])} and idle "
            f"{fmt.ms(s['gpu_idle_ms'])}."
        }
    total = len(steps)
    stride = max(1, math.ceil(total / MAX_STEP_BARS))
    shown = steps[::stride]
    gpu = (data.get("device") or {}).get("type") == "gpu"
    cols: dict[str, list] = {
        k: []
        for k in ("x", "busy", "idle", "duration", "gap", "label", "busy_t", "idle_t", "duration_t", "gap_t", "kernels")
    }
    for s in shown:
        cols["x"].append(s["index"])
        cols["busy"].append(s["gpu_busy_ms"])
        cols["idle"].append(s["gpu_idle_ms"])
        cols["duration"].append(s["duration_ms"])
        cols["gap"].append(s.get("launch_gap_ms") or 0.0)
        cols["label"].append(str(s.get("label") or ""))
        cols["busy_t"].append(fmt.ms(s["gpu_busy_ms"]))
        cols["idle_t"].append(fmt.ms(s["gpu_idle_ms"]))
        cols["duration_t"].append(fmt.ms(s["duration_ms"]))
        cols["gap_t"].append(fmt.ms(s.get("launch_gap_ms")) if gpu else "n/a (CPU trace)")
        cols["kernels"].append(fmt.count(s.get("kernels")))
    src = ColumnDataSource(cols)
    p = figure(
        title=f"Decode steps: {word} busy and idle time per step, and step duration",
        height=330,
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
        x_axis_label="step index",
        y_axis_label="ms",
    )
    width = 0.8 * stride
    bars = p.vbar_stack(
        ["busy", "idle"],
        x="x",
        width=width,
        source=src,
        color=[BOUND_COLORS["compute"], "#d5d5d5"],
        line_color=None,
        legend_label=[f"{word} busy", f"{word} idle (inside the step's {word} window)"],
    )
    p.line("x", "duration", source=src, color="#222222", line_width=2, legend_label="step duration")
    p.scatter("x", "duration", source=src, color="#222222", size=4 if len(shown) < 200 else 2)
    if gpu:
        p.line(
            "x",
            "gap",
            source=src,
            color="#c0392b",
            line_width=1.5,
            line_dash="dashed",
            legend_label="launch gaps (GPU waiting for the CPU)",
        )
    p.add_tools(
        HoverTool(
            # One renderer: in vline mode each hovered renderer would show its own copy.
            renderers=[bars[0]],
            tooltips=[
                ("step", "@x"),
                ("annotation", "@label"),
                ("duration", "@duration_t"),
                ("busy", "@busy_t"),
                ("idle", "@idle_t"),
                ("launch gaps", "@gap_t"),
                ("kernels", "@kernels"),
            ],
            mode="vline" if len(shown) > 1 else "mouse",
        )
    )
    top = max(max(cols["duration"]), max(b + i for b, i in zip(cols["busy"], cols["idle"]))) or 1.0
    p.y_range = Range1d(start=0, end=top * 1.12)
    # A few steps' worth of axis at least: two steps would otherwise be two bars across the chart.
    pad = max(stride, 3 * stride - (max(cols["x"]) - min(cols["x"])) / 2)
    p.x_range = Range1d(start=min(cols["x"]) - pad, end=max(cols["x"]) + pad)
    p.xaxis.ticker = BasicTicker(min_interval=1)  # the default ticker, with no ticks between whole steps
    p.xgrid.grid_line_color = None
    style(p)
    leg = p.legend[0]
    p.add_layout(leg, "above")
    leg.orientation = "horizontal"
    leg.label_text_font_size = "11px"
    leg.label_text_font = FONT
    leg.click_policy = "hide"
    leg.border_line_color = None
    note = None
    if stride > 1:
        note = f"{total:,} decode steps: one in every {stride} is shown."
    # ``gaps``: whether the dashed launch-gap line is drawn, so that the caption names it only then.
    return {"id": "tk-chart-decode", **chart_item(p, "tk-chart-decode"), "note": note, "gaps": gpu}


# --- step timeline --------------------------------------------------------------------------

CAUSE_COLORS = {"sync": "#c0392b", "launch": "#f39c12", "host": "#8e44ad", "wait": "#3498db", "unattributed": "#95a5a6"}
CALL_COLORS = {"sync": "#c0392b", "launch": "#7f8c8d", "other": "#c8ccd1"}
HOST_OP_COLOR = "#5d6d7e"
# The critical path's kinds (analysis.replay.critical.KINDS): the idle causes' colours where they mean
# the same (a launch, host work, a synchronising call), dark for kernels, grey for what is unexplained.
CRITICAL_COLORS = {
    "kernel": "#1d2127",
    "launch": "#f39c12",
    "host": "#8e44ad",
    "sync": "#c0392b",
    "queue": "#3498db",
    "unexplained": "#bdc3c7",
}


def step_timeline(data: dict[str, Any], index: int) -> dict[str, Any]:
    """One step, lane by lane (host ops, runtime calls, GPU idle by cause, GPU streams by
    kernel category), from ``timelines[index]`` of the JSON contract."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
    from bokeh.plotting import figure

    tl = (data.get("timelines") or [])[index]
    keys, labels = tl["keys"], tl["labels"]
    lanes = [lane["name"] for lane in tl["lanes"]]
    cols: dict[str, list] = {k: [] for k in ("y", "left", "right", "color", "legend", "label", "what", "time", "count")}
    cats: list[str] = []
    for lane in tl["lanes"]:
        kind = lane["kind"]
        for a, b, k, t, n in lane["segments"]:
            key = keys[k]
            if kind == "stream":
                if key not in cats:
                    cats.append(key)
                color, legend = category_color(key, cats.index(key)), key
            elif kind == "idle":
                color, legend = CAUSE_COLORS.get(key, "#95a5a6"), f"idle: {key}"
            elif kind == "critical":
                color, legend = CRITICAL_COLORS.get(key, "#95a5a6"), f"critical path: {key}"
            elif kind == "host_calls":
                color, legend = CALL_COLORS.get(key, "#c8ccd1"), f"call: {key}"
            else:
                color, legend = HOST_OP_COLOR, "host op"
            cols["y"].append(lane["name"])
            cols["left"].append(a)
            # At least visible; idle gaps keep their width (a widened gap would hide busy time).
            # The critical path's segments tile the step: widening one would overlap the next.
            cols["right"].append(b if kind in ("idle", "critical") else max(b, a + tl["span_ms"] / 4000))
            cols["color"].append(color)
            cols["legend"].append(legend)
            cols["label"].append(labels[t])
            cols["what"].append(key)
            cols["time"].append(f"{fmt.ms(a)} + {fmt.ms(b - a)}")
            cols["count"].append(fmt.count(n))
    word = device_word(data)
    title = (
        f"{phase_label(tl['phase'])} step {tl['step']}, the {tl['why']}: {fmt.ms(tl['duration_ms'])}, "
        f"{fmt.count(tl['kernels'])} kernels"
    )
    p = figure(
        title=title,
        y_range=FactorRange(*lanes[::-1]),
        x_range=Range1d(start=0, end=tl["span_ms"] * 1.01),
        # The legend's rows below the lanes (7 entries a row) count in the height.
        height=70 + 34 * len(lanes) + 22 * math.ceil(len(set(cols["legend"])) / 7),
        sizing_mode="stretch_width",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
        x_axis_label=f"ms from the step's start ({word} idle coloured by cause)",
    )
    r = p.hbar(
        y="y",
        left="left",
        right="right",
        height=0.7,
        color="color",
        line_color=None,
        legend_field="legend",
        source=ColumnDataSource(cols),
    )
    p.add_tools(
        HoverTool(
            renderers=[r],
            tooltips=[("", "@y"), ("what", "@what"), ("name", "@label"), ("at", "@time"), ("events", "@count")],
        )
    )
    p.ygrid.grid_line_color = None
    style(p)
    # Below, in rows: a right-hand legend of ~20 entries would be taller than the lanes.
    leg = p.legend[0]
    p.add_layout(leg, "below")
    leg.orientation = "horizontal"
    leg.ncols = 7
    leg.label_text_font = FONT
    leg.label_text_font_size = "11px"
    leg.click_policy = "none"
    leg.border_line_color = None
    chart_id = f"tk-chart-timeline-{index}"
    return {"id": chart_id, **chart_item(p, chart_id)}


# --- roofline ------------------------------------------------------------------------------


def _flops_unit(values: list[float]) -> tuple[float, str]:
    top = max(values) if values else 1.0
    for scale, name in ((1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s")):
        if top >= scale * 10 or scale == 1e6:
            return scale, name
    return 1.0, "FLOP/s"  # pragma: no cover


def roofline(data: dict[str, Any], phase: str, index: int) -> dict[str, Any]:
    from bokeh.models import ColumnDataSource, HoverTool, Range1d
    from bokeh.plotting import figure

    roof = (data.get("roofline") or {}).get(phase) or {}
    label = phase_label(phase)
    if roof.get("reason"):
        why = str(roof["reason"]).removesuffix(": no roofline")
        dev_reason = (data.get("device") or {}).get("reason")
        extra = f" ({dev_reason})" if dev_reason and (data.get("device") or {}).get("spec") is None else ""
        hint = (
            " Pass --gpu NAME or --spec-file PATH to give the peaks."
            if (data.get("device") or {}).get("spec") is None
            else ""
        )
        return {"reason": f"No roofline for {label.lower()}: {why}{extra}.{hint}"}
    roofs = roof.get("roofs") or {}
    points = roof.get("points") or []
    # Points above their roof are not drawn as achieved: listed under the chart with why.
    above = [
        {
            "label": str(q["label"]),
            "kernel": str(q.get("kernel") or ""),
            "dtype": f"{q['dtype']} {q['unit']}",
            "time": fmt.ms(q["time_ms"]),
            "reason": q["above_roof"],
        }
        for q in points
        if q.get("above_roof")
    ]
    pts = [
        q
        for q in points
        if not q.get("above_roof") and (q.get("intensity") or 0) > 0 and (q.get("achieved_flops") or 0) > 0
    ]
    dropped = len(points) - len(pts) - len(above)
    bw = roofs.get("bandwidth")
    computes = [c for c in roofs.get("compute") or [] if c.get("peak_flops")]
    if not pts:
        return {
            "reason": f"No roofline for {label.lower()}: no op group with known FLOPs, bytes and time"
            f"{' at or below its roof' if above else ''}.",
            "above": above,
        }
    if not bw or not computes:
        return {
            "reason": f"No roofline for {label.lower()}: the device's bandwidth or compute peaks are unknown.",
            "above": above,
        }
    scale, unit = _flops_unit([c["peak_flops"] for c in computes])
    ridges = [c["peak_flops"] / bw for c in computes]
    xs = [q["intensity"] for q in pts]
    x_lo = min(min(xs), min(ridges)) / 8
    x_hi = max(max(xs), max(ridges)) * 8
    ys = [q["achieved_flops"] for q in pts]
    y_lo = min(min(ys), bw * x_lo) / 4
    y_hi = max(c["peak_flops"] for c in computes) * 3
    p = figure(
        title=f"{label} roofline: op groups by arithmetic intensity and achieved {unit}",
        x_axis_type="log",
        y_axis_type="log",
        height=430,
        sizing_mode="stretch_width",
        x_range=Range1d(start=x_lo, end=x_hi),
        y_range=Range1d(start=y_lo / scale, end=y_hi / scale),
        tools="pan,wheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
        x_axis_label="arithmetic intensity (FLOP/byte)",
        y_axis_label=f"achieved {unit}",
    )
    # Roofs: bandwidth up to the last ridge, each compute peak from its ridge on.
    ridge_hi = max(ridges)
    p.line(
        [x_lo, ridge_hi],
        [bw * x_lo / scale, bw * ridge_hi / scale],
        color="#444444",
        line_width=2,
        legend_label=f"peak bandwidth {fmt.bandwidth(bw)}",
    )
    ach_bw = roofs.get("achievable_bandwidth")
    if ach_bw and abs(ach_bw - bw) > 1e-9 * bw:
        p.line(
            [x_lo, ridge_hi],
            [ach_bw * x_lo / scale, ach_bw * ridge_hi / scale],
            color="#444444",
            line_width=1.5,
            line_dash="dashed",
            legend_label=f"achievable bandwidth {fmt.bandwidth(ach_bw)}",
        )
    roof_colors = ("#1b9e77", "#7570b3", "#d95f02", "#e7298a", "#66a61e")
    # One line per distinct peak: "bf16 vector / fp32 matrix / fp32 vector" often share one rate.
    merged: dict[tuple, list[str]] = {}
    for c in computes:
        merged.setdefault((c["peak_flops"], c.get("achievable_flops")), []).append(f"{c['dtype']} {c['unit']}")
    for i, ((peak, ach), names) in enumerate(sorted(merged.items(), key=lambda kv: -kv[0][0])):
        color = roof_colors[i % len(roof_colors)]
        name = " / ".join(names)
        p.line(
            [peak / bw, x_hi],
            [peak / scale] * 2,
            color=color,
            line_width=2,
            legend_label=f"{name} peak {fmt.flops(peak)}",
        )
        if ach and abs(ach - peak) > 1e-9 * peak:
            p.line(
                [ach / bw, x_hi],
                [ach / scale] * 2,
                color=color,
                line_width=1.5,
                line_dash="dashed",
                legend_label=f"{name} achievable {fmt.flops(ach)}",
            )
    t_max = max(q["time_ms"] for q in pts) or 1.0
    cats = sorted({q["category"] for q in pts})
    colors = {c: category_color(c, i) for i, c in enumerate(cats)}
    pts = sorted(pts, key=lambda q: q["category"])  # legend entries in category order
    src = ColumnDataSource(
        {
            "x": [q["intensity"] for q in pts],
            "y": [q["achieved_flops"] / scale for q in pts],
            "size": [7 + 33 * math.sqrt(max(q["time_ms"], 0.0) / t_max) for q in pts],
            "color": [colors[q["category"]] for q in pts],
            "category": [q["category"] for q in pts],
            "label": [str(q["label"]) for q in pts],
            "kernel": [str(q.get("kernel") or "") for q in pts],
            "shapes": [str(q.get("shapes") or fmt.MISSING) for q in pts],
            "dtype": [f"{q['dtype']} {q['unit']}" for q in pts],
            "calls": [fmt.count(q["calls"]) for q in pts],
            "time": [fmt.ms(q["time_ms"]) for q in pts],
            "intensity": [f"{fmt.num(q['intensity'])} FLOP/B" for q in pts],
            "achieved": [fmt.flops(q["achieved_flops"]) for q in pts],
            "roof": [fmt.pct(q.get("roof_fraction")) for q in pts],
        }
    )
    r = p.scatter(
        "x",
        "y",
        size="size",
        source=src,
        fill_color="color",
        fill_alpha=0.6,
        line_color="#333333",
        line_width=0.6,
        legend_field="category",
    )
    p.add_tools(
        HoverTool(
            renderers=[r],
            tooltips=[
                ("op", "@label"),
                ("kernel", "@kernel"),
                ("shapes", "@shapes"),
                ("dtype", "@dtype"),
                ("category", "@category"),
                ("calls", "@calls"),
                ("time", "@time"),
                ("intensity", "@intensity"),
                ("achieved", "@achieved"),
                ("of roof", "@roof"),
            ],
        )
    )
    style(p)
    legend_outside(p)
    note = f"{dropped} op group(s) with no FLOPs (copies, fills) cannot be placed on log axes." if dropped else None
    chart_id = f"tk-chart-roofline-{index}"
    return {"id": chart_id, **chart_item(p, chart_id), "note": note, "above": above}


@functools.lru_cache(maxsize=1)
def inline_bokeh_js() -> str:
    """Bokeh's core JS bundle, to inline (no CDN). Checked not to contain ``</script``."""
    from bokeh.resources import Resources

    res = Resources(mode="inline", components=BOKEH_COMPONENTS, log_level="warn")
    js = "\n".join(res.js_raw)
    if "</script" in js.lower():  # pragma: no cover - would break the page
        raise RuntimeError("Bokeh's JS bundle contains '</script' and cannot be inlined")
    return js
