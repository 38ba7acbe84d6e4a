"""Renderers of a projection (``tracekit project``): HTML, JSON, Markdown, terminal text.

Each builds a plain view-model from ``Projection.to_dict()`` and renders a template
(``templates/project.*``). The HTML page puts the measured and the projected run side by
side: headline figures with the projected range, per phase the time by limiter and by
category on both GPUs, and both rooflines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit import formatting as fmt
from tracekit.report import charts
from tracekit.report.base import JsonDocument, Registry, TextTemplate, text_table
from tracekit.report.compare.charts import stacked_height, stacked_ms
from tracekit.report.render_html import HtmlPage
from tracekit.report.templating import term_text
from tracekit.report.view import LIMITERS, limiter_labels, phase_label

if TYPE_CHECKING:
    from tracekit.whatif.project import Projection

_UNITS = {
    "ttft_ms": "ms",
    "tpot_p50": "ms",
    "prefill_step_p50": "ms",
    "decode_step_p50": "ms",
    "prefill_tokens_per_s": "tok/s",
    "decode_tokens_per_s": "tok/s",
    "prefill_mfu": "%",
    "decode_mbu": "%",
}


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return fmt.MISSING
    return {"ms": fmt.ms, "tok/s": fmt.per_s, "%": fmt.pct}[unit](v)


def _range(r: list | None, unit: str) -> str:
    return f"{_value(r[0], unit)} to {_value(r[1], unit)}" if r else fmt.MISSING


def _change(measured: float | None, projected: float | None) -> str:
    if not measured or projected is None:
        return fmt.MISSING
    ratio = projected / measured
    return f"{ratio:.2f}×"


def measured_on(data: dict[str, Any]) -> str:
    """The GPU a projection was measured on, as display text: its name, or "an unknown GPU"
    when the trace does not name it (a projection needs a GPU trace: see tracekit.whatif.project)."""
    return data["source"].get("device") or "an unknown GPU"


def _error(e: float | None) -> str:
    return fmt.MISSING if e is None else f"{e:+.0%}"


def check_view(check: dict[str, Any] | None) -> dict[str, Any] | None:
    """The check of a projection against a trace measured on the target (``--check``), formatted."""
    if not check:
        return None
    phases = [
        {
            "label": phase_label(ph),
            "steps": fmt.count(f["steps"]),
            "projected": fmt.ms(f["projected_ms"]),
            "measured": fmt.ms(f["measured_ms"]),
            "error": _error(f["error"]),
            "range": (f"{fmt.ms(f['range_ms'][0])} to {fmt.ms(f['range_ms'][1])}" if f.get("range_ms") else "—"),
            "inside": {True: "yes", False: "no"}.get(f.get("inside"), "—"),
            "projected_total": fmt.ms(f["projected_total_ms"]),
            "measured_total": fmt.ms(f["measured_total_ms"]),
        }
        for ph, f in check["phases"].items()
    ]

    def row(name: str, c: dict) -> dict:
        return {
            "name": name,
            "projected": fmt.ms(c["projected_ms"]),
            "measured": fmt.ms(c["measured_ms"]),
            "error": _error(c["error"]),
        }

    categories = [
        {"label": phase_label(ph), "rows": [row(n, c) for n, c in cats.items()]}
        for ph, cats in check["categories"].items()
    ]
    kernels = [
        {"label": phase_label(ph), "rows": [row(k["name"], k) for k in rows]}
        for ph, rows in check["kernels"].items()
        if rows
    ]
    return {
        "trace": check.get("target_trace"),
        "device": check.get("target_device"),
        "headline": check["headline"],
        "phases": phases,
        "categories": categories,
        "kernels": kernels,
    }


# At least this share of a phase's kernel time of unknown cost, and the projection is mostly the
# measured time carried over: its range, not its central figure, is the answer.
MOSTLY_UNKNOWN = 0.5
SOME_UNKNOWN = 0.05  # below it the unknown share barely moves the range (whatif.project's notes)


def confidence_lines(data: dict[str, Any]) -> list[str]:
    """Per phase, the projection's first line: GPU busy measured -> projected, with its range and how
    much of it is unknown cost, and the option that would price that cost. Every renderer and the
    CLI's summary start with these, so no output gives the central figure without its confidence."""
    target = data["target"]["spec"]
    measured = measured_on(data)
    has_model = bool((data.get("measured") or {}).get("model"))
    out = []
    for phase, p in data["phases"].items():
        r = p.get("projected_gpu_busy_ms_range")
        line = (
            f"{phase}: GPU busy {fmt.ms(p['measured_gpu_busy_ms'])} on {measured} -> "
            f"{fmt.ms(p['projected_gpu_busy_ms'])} on {target}"
        )
        if r:
            line += f" (range {fmt.ms(r[0])} to {fmt.ms(r[1])})"
        share = p.get("unknown_share") or 0.0
        fix = "" if has_model else "; pass --model NAME (and --tp N) to price those kernels from the architecture"
        if share >= MOSTLY_UNKNOWN:
            line += (
                f"; low confidence: {fmt.pct(share)} of the kernel time has unknown cost and stays as measured, "
                f"so the range is the answer, not the central figure{fix}"
            )
        elif share >= SOME_UNKNOWN:
            line += f"; {fmt.pct(share)} of the kernel time has unknown cost, kept as measured{fix}"
        out.append(line)
    return out


def view_model(data: dict[str, Any]) -> dict[str, Any]:
    src, tgt = data["source"], data["target"]
    src = {**src, "device": measured_on(data)}
    headline = [
        {
            "label": h["label"],
            "measured": _value(h["measured"], _UNITS[h["key"]]),
            "projected": _value(h["projected"], _UNITS[h["key"]]),
            "range": _range(h["range"], _UNITS[h["key"]]),
            "change": _change(h["measured"], h["projected"]),
            "key": h["key"],
        }
        for h in data["headline"]
    ]
    phases = []
    for phase, p in data["phases"].items():
        r = p["projected_range"]
        phases.append(
            {
                "phase": phase,
                "label": phase_label(phase),
                "busy": fmt.ms(p["measured_gpu_busy_ms"]),
                "busy_p": fmt.ms(p["projected_gpu_busy_ms"]),
                "busy_r": _range(r["gpu_busy_ms"], "ms"),
                "step": fmt.ms(p["measured_step_ms"]),
                "step_p": fmt.ms(p["projected_step_ms"]),
                "step_r": _range(r["step_ms"], "ms"),
                "tps": fmt.per_s(p["measured_tokens_per_s"]),
                "tps_p": fmt.per_s(p["projected_tokens_per_s"]),
                "tps_r": _range(r["tokens_per_s"], "tok/s"),
                "latency_kept": fmt.ms(p["latency_kept_gpu_busy_ms"]),
                "unknown_share": fmt.pct(p.get("unknown_share")),
                "communication": communication_view(p.get("communication")),
                "categories": [
                    {
                        "category": c,
                        "factor_category": v["factor_category"],
                        "measured": fmt.ms(v["measured_ms"]),
                        "projected": fmt.ms(v["projected_ms"]),
                        "range": _range(v["range_ms"], "ms"),
                    }
                    for c, v in (p.get("by_category_ms") or {}).items()
                ],
            }
        )
    f = data.get("factors") or {}
    classes = {role: f"{f[role]['class_name']} ({f[role]['class']})" for role in ("source", "target") if role in f}
    return {
        "title": f"{src.get('name')}: {src.get('device')} → {tgt['spec']}",
        "source": src,
        "target": tgt,
        "target_bw": fmt.bandwidth(tgt.get("peak_bandwidth")),
        "target_bw_ach": fmt.bandwidth(tgt.get("achievable_bandwidth")),
        "headline": headline,
        "phases": phases,
        "notes": data["notes"],
        "confidence": confidence_lines(data),
        "method": list(data["method"]),
        "classes": classes,
        "factor_rows": _factor_rows(f),
        "learnt": f.get("learnt"),
        "check": check_view(data.get("check")),
        "tracekit_version": (data.get("measured") or {}).get("source", {}).get("tracekit_version"),
    }


def communication_view(c: dict[str, Any] | None) -> dict[str, Any] | None:
    """A phase's communication term (``whatif.collectives.summary``): measured -> projected, the
    projection's latency and bandwidth parts, which dominates, and the links assumed."""
    if not c:
        return None
    eff = c.get("efficiency")
    return {
        "count": fmt.count(c["collectives"]),
        "kinds": ", ".join(f"{k} x{n}" for k, n in c["by_kind"].items()),
        "measured": fmt.ms(c["measured_ms"]),
        "projected": fmt.ms(c["projected_ms"]),
        "latency": fmt.ms(c["latency_ms"]),
        "bandwidth": fmt.ms(c["bandwidth_ms"]),
        "dominant": c["dominant"],
        "efficiency": fmt.pct(eff) if eff is not None else fmt.MISSING,
        "message": f"{c['message_bytes'][1] / 1e6:.3g} MB median ({c['message_bytes'][0] / 1e6:.3g} to "
        f"{c['message_bytes'][2] / 1e6:.3g} MB)",
        "source_link": c["source_link"]["description"],
        "target_link": c["target_link"]["description"],
    }


def _factor_rows(f: dict[str, Any]) -> list[dict[str, str]]:
    """The category factors both GPUs were priced with, as display rows with their sources."""
    if "source" not in f:
        return []
    rows = []
    for cat, src in f["source"]["factors"].items():
        tgt = f["target"]["factors"][cat]
        show = lambda v: "/".join(f"{x:.2f}" for x in v)  # noqa: E731
        rows.append(
            {
                "category": cat,
                "src_compute": show(src["compute"]),
                "src_memory": show(src["memory"]),
                "tgt_compute": show(tgt["compute"]),
                "tgt_memory": show(tgt["memory"]),
                "src_source": src["source"],
                "tgt_source": tgt["source"],
            }
        )
    return rows


def _charts(data: dict[str, Any]) -> tuple[list[dict], dict[str, dict]]:
    """Per phase: time by limiter and by category on both GPUs (ms), then both rooflines."""
    items, ids = [], {}
    measured, projected = data["measured"], data["projected"]
    sides = (("measured on " + measured_on(data), measured), ("projected on " + str(data["target"]["spec"]), projected))
    labels = limiter_labels(measured)
    for i, phase in enumerate(data["phases"]):
        rows_l, rows_c, cats = [], [], []
        for _, a in sides:
            for c, _v in sorted(
                ((a["phases"].get(phase) or {}).get("by_category") or {}).items(), key=lambda kv: -kv[1]
            ):
                if c not in cats:
                    cats.append(c)
        for label, a in sides:
            p = a["phases"].get(phase) or {}
            lim = p.get("by_limiter") or {}
            rows_l.append(
                {
                    "label": label,
                    "segments": [
                        (labels[k] if k != "idle" else "GPU idle", lim.get(k), charts.LIMITER_COLORS[k])
                        for k in LIMITERS
                    ],
                }
            )
            cat = p.get("by_category") or {}
            rows_c.append(
                {"label": label, "segments": [(c, cat.get(c), charts.category_color(c, j)) for j, c in enumerate(cats)]}
            )
        h = stacked_height(max(len(LIMITERS), len(cats)))
        lim_chart = stacked_ms(
            f"{phase_label(phase)}: GPU time by limiter",
            rows_l,
            "ms (kernel time + GPU idle)",
            f"tk-prj-{phase}-limiter",
            h,
        )
        cat_chart = stacked_ms(
            f"{phase_label(phase)}: kernel time by category", rows_c, "ms of kernel time", f"tk-prj-{phase}-category", h
        )
        roofs = [dict(charts.roofline(a, phase, 100 * k + i), side=label) for k, (label, a) in enumerate(sides)]
        items += [lim_chart["item"], cat_chart["item"]] + [r["item"] for r in roofs if "item" in r]
        ids[phase] = {
            "limiter": lim_chart["id"],
            "category": cat_chart["id"],
            "roofs": [{"id": r.get("id"), "reason": r.get("reason"), "side": r["side"]} for r in roofs],
        }
    return items, ids


PROJECTIONS = Registry("projection")
_register = PROJECTIONS.register


@_register
class ProjectHtml(HtmlPage):
    description = "a self-contained HTML page: both GPUs side by side, with both rooflines"
    template = "project.html.j2"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view_model(data)
        items, ids = _charts(data)
        for p in vm["phases"]:
            p["charts"] = ids.get(p["phase"], {})
        vm["chart_items"] = items
        return vm


@_register
class ProjectJson(JsonDocument):
    description = "the whole projection as JSON (Projection.to_dict(), schema_version 1)"


@_register
class ProjectMarkdown(TextTemplate):
    name, extension, template = "md", ".md", "project.md.j2"
    description = "a compact Markdown summary"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return view_model(data)


@_register
class ProjectText(TextTemplate):
    name, extension, template = "text", ".txt", "project.txt.j2"
    description = "a terminal table"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view_model(data)
        vm["table"] = text_table(
            ["figure", "measured", "projected", "change", "range"],
            [[term_text(h[k]) for k in ("label", "measured", "projected", "change", "range")] for h in vm["headline"]],
        )
        c = vm["check"]
        if c:
            c["phase_table"] = text_table(
                ["phase", "steps", "projected/step", "measured/step", "error", "range/step", "inside"],
                [
                    [p["label"], p["steps"], p["projected"], p["measured"], p["error"], p["range"], p["inside"]]
                    for p in c["phases"]
                ],
            )
            c["category_tables"] = [
                {
                    "label": g["label"],
                    "lines": text_table(
                        ["kernel time by category", "projected", "measured", "error"],
                        [[term_text(r["name"]), r["projected"], r["measured"], r["error"]] for r in g["rows"]],
                    ),
                }
                for g in c["categories"]
            ]
            c["kernel_tables"] = [
                {
                    "label": g["label"],
                    "lines": text_table(
                        ["projected", "measured", "error", "kernel (same name in both runs)"],
                        [
                            [r["projected"], r["measured"], r["error"], term_text(fmt_name(r["name"]))]
                            for r in g["rows"]
                        ],
                    ),
                }
                for g in c["kernels"]
            ]
        return vm


def fmt_name(name: str, width: int = 90) -> str:
    """A kernel name cut to a terminal line (the JSON keeps it whole)."""
    return name if len(name) <= width else name[: width - 1] + "…"


choose = PROJECTIONS.choose
get_renderer = PROJECTIONS.get


def render_projection(projection: Projection, fmt_: str = "html") -> str:
    return get_renderer(fmt_).render(projection)
