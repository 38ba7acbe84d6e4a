"""Renderers of a deployment plan (``tracekit plan``): HTML, JSON, Markdown, terminal text.

Each builds a plain view-model from ``Plan.to_dict()`` and renders ``templates/plan.*``.
The HTML page adds a capacity chart: per option, each phase's capacity against the demand.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tracekit import formatting as fmt
from tracekit.report import chart_style
from tracekit.report.base import JsonDocument, Registry, TextTemplate, text_table
from tracekit.report.render_html import HtmlPage
from tracekit.report.templating import term_text

if TYPE_CHECKING:
    from tracekit.whatif.plan import Plan


def view_model(data: dict[str, Any]) -> dict[str, Any]:
    i, c, d = data["inputs"], data["costs"], data["demand"]
    options = []
    for o in data["options"]:
        split = f"{o['total_gpus']} shared" if o["shared"] else f"{o['prefill_gpus']} + {o['decode_gpus']}"
        options.append(
            {
                "name": o["name"],
                "gpus": split,
                "total": o["total_gpus"],
                "ttft": fmt.ms(o["ttft_ms"]),
                "tpot": fmt.ms(o["tpot_ms"]),
                "batch": fmt.num(o["decode_batch"]) if o["decode_batch"] is not None else fmt.MISSING,
                "prefill_capacity": fmt.per_s(o["prefill_capacity_tokens_per_s"]),
                "decode_capacity": fmt.per_s(o["decode_capacity_tokens_per_s"]),
                "goodput": fmt.per_s(o["goodput_per_gpu"]) if o["meets_slo"] else fmt.MISSING,
                "meets": "yes" if o["meets_slo"] else "no",
                "reasons": o["reasons"],
                "recommended": o["name"] == data["recommended"],
            }
        )
    return {
        "title": f"{i.get('name') or 'plan'} on {c['device']}",
        "inputs": [
            ("traces", ", ".join(i.get("traces") or [])),
            ("GPU", c["device"]),
            ("TP per replica", str(c["tp"])),
            ("model", i.get("model") or fmt.MISSING),
            ("requests", f"{fmt.num(i['rate'])}/s of {i['isl']} prompt + {i['osl']} output tokens"),
            ("SLOs", f"TTFT ≤ {fmt.ms(i['ttft_slo_ms'])}, TPOT ≤ {fmt.ms(i['tpot_slo_ms'])}"),
            (
                "KV link",
                f"{fmt.num(i['kv_link_gbps'])} GB/s" if i.get("kv_link_gbps") else "not given (no transfer time)",
            ),
            ("max GPUs", str(i.get("max_gpus"))),
        ],
        "costs": [
            ("prefill of the prompt", fmt.ms(c["prefill_ms_at_isl"])),
            ("decode step, one request", fmt.ms(c["decode_step_ms_batch1"])),
            (
                "fitted from",
                f"{c.get('prefill_steps')} prefill and {c.get('decode_steps')} decode steps: {c.get('fit')}",
            ),
            (
                "KV cache per token",
                fmt.si(c.get("kv_bytes_per_token"), "B") if c.get("kv_bytes_per_token") else fmt.MISSING,
            ),
            ("weights per replica", fmt.si(c.get("weights_bytes"), "B") if c.get("weights_bytes") else fmt.MISSING),
            ("memory per replica", fmt.si(c.get("memory_bytes"), "B") if c.get("memory_bytes") else fmt.MISSING),
            *_one_off_rows(c),
        ],
        "demand": {"prefill": fmt.per_s(d["prefill_tokens_per_s"]), "decode": fmt.per_s(d["decode_tokens_per_s"])},
        "options": options,
        "recommended": data["recommended"],
        "why": data["why"],
        "missing": data["missing"],
        "notes": data["notes"],
        "method": method_blocks(data["method"]),
    }


def _one_off_rows(c: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per phase whose one-off idle the plan found: how much, and whether it is counted."""
    rows = []
    for o in c.get("one_off_idle") or []:
        counted = "kept (--keep-idle)" if c.get("keep_idle") or not o.get("excluded") else "left out"
        steps = (
            f"{o['steps']} of {o['of_steps']} {o['phase']} steps" if o["of_steps"] != 1 else f"the {o['phase']} step"
        )
        rows.append((f"one-off {o['phase']} idle", f"{fmt.ms(o['ms'])} of {o['cause']} in {steps}: {counted}"))
    return rows


_INLINE = re.compile(r"``(.+?)``|\*\*(.+?)\*\*|\*(.+?)\*")


def _inline(text: str) -> list[tuple[str, str]]:
    """``text`` as (style, text) runs: "code", "strong", "em" or "" (plain); the template
    writes each run's tag, so the text itself is escaped and never markup."""
    runs, at = [], 0
    for m in _INLINE.finditer(text):
        if m.start() > at:
            runs.append(("", text[at : m.start()]))
        style = "code" if m.group(1) is not None else "strong" if m.group(2) is not None else "em"
        runs.append((style, m.group(1) or m.group(2) or m.group(3)))
        at = m.end()
    if at < len(text):
        runs.append(("", text[at:]))
    return runs


def method_blocks(text: str) -> list[dict[str, Any]]:
    """The method (a docstring: paragraphs, ``- `` bullet lists, ``code``, **bold**, *italic*)
    as blocks the template renders as paragraphs and lists: {"kind": "p" | "ul", "parts":
    [runs per paragraph or bullet]}."""
    blocks = []
    for para in text.strip().split("\n\n"):
        lines = para.splitlines()
        items: list[list[str]] = []
        lead: list[str] = []
        for line in lines:
            if line.startswith("- "):
                items.append([line[2:].strip()])
            elif items:
                items[-1].append(line.strip())
            else:
                lead.append(line.strip())
        if lead:
            blocks.append({"kind": "p", "parts": [_inline(" ".join(lead))]})
        if items:
            blocks.append({"kind": "ul", "parts": [_inline(" ".join(i)) for i in items]})
    return blocks


def capacity_chart(data: dict[str, Any]) -> dict[str, Any]:
    """Per option and phase: capacity (tokens/s) as a bar, the demand as a line."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.models.annotations import Span  # bokeh.models' re-export is hidden from type checkers
    from bokeh.plotting import figure

    rows: dict[str, list[Any]] = {"y": [], "value": [], "color": [], "label": [], "text": []}
    colors = {"prefill": "#2f6db5", "decode": "#e07b1f"}
    demand = data["demand"]
    for o in data["options"]:
        for phase in ("prefill", "decode"):
            cap = o[f"{phase}_capacity_tokens_per_s"]
            need = demand[f"{phase}_tokens_per_s"]
            rows["y"].append(f"{o['name']} ({o['total_gpus']} GPUs): {phase}")
            rows["value"].append(cap / need if need else 0.0)
            rows["color"].append(colors[phase])
            rows["label"].append(phase)
            rows["text"].append(f"{fmt.per_s(cap)} of capacity for {fmt.per_s(need)} of demand")
    p = figure(
        title="Capacity over demand, per option and phase",
        y_range=FactorRange(factors=rows["y"][::-1]),
        height=90 + 34 * len(rows["y"]),
        sizing_mode="stretch_width",
        tools="save",
        toolbar_location="above",
        x_axis_label="capacity / demand (1 = exactly the demand)",
    )
    r = p.hbar(y="y", right="value", height=0.6, color="color", legend_field="label", source=ColumnDataSource(rows))
    p.add_layout(Span(location=1.0, dimension="height", line_color="#222222", line_dash="dashed", line_width=1.5))
    p.add_tools(HoverTool(renderers=[r], tooltips=[("", "@y"), ("", "@text")]))
    p.ygrid.grid_line_color = None
    chart_style.style(p)
    chart_style.legend_outside(p)
    return chart_style.chart_item(p, "tk-chart-capacity")


PLANS = Registry("plan")
_register = PLANS.register


@_register
class PlanHtml(HtmlPage):
    description = "a self-contained HTML page with the options and a capacity chart"
    template = "plan.html.j2"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view_model(data)
        chart = capacity_chart(data)
        vm["chart"], vm["chart_items"] = chart["id"], [chart["item"]]
        return vm


@_register
class PlanJson(JsonDocument):
    description = "the whole plan as JSON (Plan.to_dict(), schema_version 1)"


@_register
class PlanMarkdown(TextTemplate):
    name, extension, template = "md", ".md", "plan.md.j2"
    description = "a compact Markdown summary"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return view_model(data)


@_register
class PlanText(TextTemplate):
    name, extension, template = "text", ".txt", "plan.txt.j2"
    description = "a terminal table"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view_model(data)
        head = ["option", "GPUs", "TTFT", "TPOT", "batch", "prefill cap.", "decode cap.", "meets SLOs", "goodput/GPU"]
        vm["table"] = text_table(
            head,
            [
                [
                    term_text(o[k])
                    for k in (
                        "name",
                        "gpus",
                        "ttft",
                        "tpot",
                        "batch",
                        "prefill_capacity",
                        "decode_capacity",
                        "meets",
                        "goodput",
                    )
                ]
                for o in vm["options"]
            ],
        )
        return vm


choose = PLANS.choose
get_renderer = PLANS.get


def render_plan(plan: Plan, fmt_: str = "html") -> str:
    return get_renderer(fmt_).render(plan)
