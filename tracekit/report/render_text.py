"""Terminal text (``tracekit summary``, ``--format text``): headline figures, phase table, findings."""

from __future__ import annotations

from typing import Any

from tracekit.report import headline_view, ranks_view, replay_view, view
from tracekit.report.base import Renderer, register
from tracekit.report.templating import render, term_text, text_env


@register
class TextRenderer(Renderer):
    name = "text"
    extension = ".txt"
    description = "plain text for a terminal"

    def __init__(self, show_header: bool = True):
        # tracekit summary prints the reader's facts (path, device) first and turns this off.
        self.show_header = show_header

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        phases = view.phase_rows(data)
        # The "of which" columns are parts of compute + memory + link, set apart by "|" (view.SUB_LIMITERS).
        head = [
            "phase",
            "steps",
            "time",
            "busy",
            "idle",
            "idle %",
            "compute",
            "memory",
            "link",
            "unknown",
            "|",
            *(f"of which {view.SUB_LIMITER_HEADS[k]}" for k in view.SUB_LIMITERS),
            "|",
            "MFU",
            "MBU",
        ]
        cells = [
            [
                term_text(r["label"]),
                r["steps"],
                r["time"],
                r["gpu_busy"],
                r["gpu_idle"],
                r["idle_share"],
                *(b["share"] for b in r["bounds"][:4]),
                "|",
                *(s["share"] for s in r["sub_limiters"]),
                "|",
                r["mfu"],
                r["mbu"],
            ]
            for r in phases
        ]
        widths = [max(len(str(row[i])) for row in [head, *cells]) for i in range(len(head))]
        table = [
            "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
            for row in [head, *cells]
        ]
        headline = headline_view.headline(data)
        width = max((len(h["label"]) for h in headline), default=0)
        vwidth = max((len(h["value"]) for h in headline), default=0)
        return {
            "header": view.header(data),
            "headline": [
                {
                    **h,
                    "label": h["label"].ljust(width),
                    "value": h["value"].rjust(vwidth),
                    "note": term_text(h["note"] or ""),
                }
                for h in headline
            ],
            "table": table,
            "mixed": view.mixed_lines(data),
            "sub_limiter_note": view.sub_limiter_note(data),
            "estimate_legend": view.estimate_legend(
                [
                    k
                    for k in ("upper", "lower", "model")
                    if any(p.get("mbu_estimate") == k for p in (data.get("phases") or {}).values())
                ],
                data,
            ),
            "no_phases": view.no_phases_reason(data),
            "findings": view.findings(data),
            "replay": replay_view.text_lines(data),
            "idle": view.idle_lines(data),
            "ranks": ranks_view.text_lines(data),
            "device_word": view.device_word(data),
            "show_header": self.show_header,
        }

    def render_data(self, data: dict[str, Any]) -> str:
        return render(text_env(), "summary.txt.j2", vm=self.view_model(data))
