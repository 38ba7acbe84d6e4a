"""``--format md``: a compact summary for pull requests and chat."""

from __future__ import annotations

from typing import Any

from tracekit.report import headline_view, hta_view, ranks_view, replay_view, steps_view, view
from tracekit.report.base import Renderer, register
from tracekit.report.templating import render, text_env

TOP = 5  # kernels per phase in the Markdown summary


@register
class MarkdownRenderer(Renderer):
    name = "md"
    extension = ".md"
    description = "a compact Markdown summary for pull requests and chat"

    def __init__(self, top: int | None = TOP):
        self.top = top

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "header": view.header(data),
            "headline": headline_view.headline(data),
            "phases": view.phase_rows(data),
            "mixed": view.mixed_lines(data),
            "sub_limiter_note": view.sub_limiter_note(data),
            "no_phases": view.no_phases_reason(data),
            "findings": view.findings(data),
            "replay": replay_view.text_lines(data),
            "ranks": ranks_view.ranks(data),
            "idle": view.idle_lines(data),
            "top_kernels": view.top_kernels(data, self.top),
            "steps": steps_view.step_rows(data, shown=12),
            "estimate_legend": view.estimate_legend(view.estimates_shown(data), data),
            "device_word": view.device_word(data),
            "hta": hta_view.md_lines(data),
        }

    def render_data(self, data: dict[str, Any]) -> str:
        return render(text_env(), "report.md.j2", vm=self.view_model(data))
