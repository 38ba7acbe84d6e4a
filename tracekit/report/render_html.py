"""The HTML report: one self-contained file, charts inline, nothing fetched.

``HtmlPage`` is every HTML page's base (the fleet, plan and projection pages too), with the
pieces it puts on each page: ``loader_js`` (the page's own script) and ``csp`` (the policy
that lets only the page's own scripts run).
"""

from __future__ import annotations

import base64
import functools
import hashlib
from typing import Any

from markupsafe import Markup

from tracekit.report import (
    charts,
    headline_view,
    hta_view,
    quality_view,
    ranks_chart,
    ranks_view,
    replay_view,
    steps_view,
    view,
)
from tracekit.report.base import Renderer, register
from tracekit.report.templating import html_env, inline_script, render


class HtmlPage(Renderer):
    """A self-contained page: ``template`` rendered with the view-model, its Bokeh charts
    (``vm["chart_items"]``) and the bundle inlined, and a CSP that lets only those scripts run."""

    name = "html"
    extension = ".html"
    template = ""

    def __init__(self, include_js: bool = True):
        # include_js=False leaves Bokeh's 1.3 MB bundle out (for tests of the page text).
        self.include_js = include_js

    def render_data(self, data: dict[str, Any]) -> str:
        vm = self.view_model(data)
        js = charts.inline_bokeh_js() if self.include_js and vm.get("chart_items") else None
        loader = loader_js()
        return render(
            html_env(),
            self.template,
            vm=vm,
            bokeh_js=Markup(js) if js else None,
            loader_js=Markup(loader),
            csp=csp([js, loader]),
        )


@register
class HtmlRenderer(HtmlPage):
    description = "a single self-contained HTML page with interactive charts (opens offline)"
    template = "report.html.j2"

    def __init__(self, top: int | None = None, include_js: bool = True):
        super().__init__(include_js)
        self.top = top

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        breakdown = charts.phase_breakdown(data)
        decode = charts.decode_steps(data)
        rooflines = [
            dict(charts.roofline(data, phase, i), phase=view.phase_label(phase))
            for i, phase in enumerate(data["phases"])
        ]
        steps = [charts.step_timeline(data, i) for i in range(len(data.get("timelines") or []))]
        items = [c["item"] for c in breakdown.get("charts", [])]
        items += [c["item"] for c in [decode, *steps, *rooflines] if "item" in c]
        rank_chart = ranks_chart.rank_steps(data)
        items += [rank_chart["item"]] if rank_chart else []
        ranks = ranks_view.ranks(data)
        return {
            "header": view.header(data),
            "headline": headline_view.headline(data),
            "findings": view.findings(data),
            "replay": replay_view.section(data),
            "ranks": {**ranks, "chart": rank_chart.get("id")} if ranks else None,
            "phases": view.phase_rows(data),
            "mixed": view.mixed_lines(data),
            "no_phases": view.no_phases_reason(data),
            "no_roofline": (
                "this is a training run: the roofline is drawn per inference phase (prefill, decode)."
                if data.get("run_kind") == "training"
                else "the trace holds no inference step."
            ),
            "device_word": view.device_word(data),
            "breakdown": {
                "charts": [c["id"] for c in breakdown.get("charts", [])],
                "reason": breakdown.get("reason"),
            },
            "decode": {
                "chart": decode.get("id"),
                "reason": decode.get("reason"),
                "note": decode.get("note"),
                "gaps": bool(decode.get("gaps")),
            },
            "timelines": [dict(view.timeline(data, i), chart=c["id"]) for i, c in enumerate(steps)],
            "idle": view.idle_rows(data),
            "latency_roof": view.fmt.pct((data.get("provenance") or {}).get("latency_roof")),
            "sub_limiter_note": view.sub_limiter_note(data),
            "rooflines": [
                {
                    "phase": r["phase"],
                    "chart": r.get("id"),
                    "reason": r.get("reason"),
                    "note": r.get("note"),
                    "above": r.get("above") or [],
                }
                for r in rooflines
            ],
            "top_kernels": view.top_kernels(data, self.top),
            "steps": steps_view.step_rows(data),
            "estimate_legend": view.estimate_legend(view.estimates_shown(data), data),
            "quality": quality_view.data_quality(data),
            "hta": hta_view.section(data),
            # Chart specs for Bokeh, embedded through the script_json filter.
            "chart_items": items,
            "schema_version": data.get("schema_version"),
        }


@functools.lru_cache(maxsize=1)
def loader_js() -> str:
    """The page's own script (templates/report.js): embeds the charts, then marks the
    body ``data-charts-rendered=N`` (or ``data-charts-error``) for people and tests."""
    return inline_script("report.js")


def csp(scripts: list[str | None]) -> str:
    """Content-Security-Policy: only the page's own inline scripts (by hash) run, and
    nothing may be fetched: a second line of defence behind escaping, and the reason a
    report can never call the network."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode("utf-8")).digest()).decode() + "'" for s in scripts if s
    )
    return (
        f"default-src 'none'; script-src {hashes or chr(39) + 'none' + chr(39)}; style-src 'unsafe-inline'; "
        "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
