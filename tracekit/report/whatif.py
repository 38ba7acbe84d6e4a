"""``tracekit whatif``: what-ifs replayed on a trace's steps, and their renderers (HTML, JSON,
Markdown, terminal text).

``whatif(analysis, changes)`` replays the changes together on the analysis' step replay
(``analysis.replayer``) and keeps what the outputs show: per phase the measured and replayed
step time, TTFT/TPOT p50, tokens/s and the saving; the kernels a speed-up could not reach; the
replay's books and the unchanged critical path by kind. Every figure is the replay's
(``tracekit.analysis.replay``); here they are only chosen, and each renderer builds a plain
view-model (``replay_view``) before its template.

    from tracekit.analysis.replay.changes import parse
    from tracekit.report.whatif import whatif, render_whatif
    doc = whatif(analysis, parse("launch,sync", "gemm=0.8", None))
    print(render_whatif(doc, "text"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.errors import TracekitError
from tracekit.report import replay_view as rv
from tracekit.report.base import JsonDocument, Registry, TextTemplate
from tracekit.report.render_html import HtmlPage
from tracekit.report.templating import term_text

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis

SCHEMA_VERSION = 1
KIND = "tracekit.whatif"
METHOD = (
    "Each step is replayed on its own dependencies (host calls in order, launches, stream order, "
    "cross-stream waits, synchronising calls) with the trace's durations; the changes are applied "
    "together and replayed together, never added up. A step's replayed time is its measured duration "
    "less what the changes save on the unchanged replay, so the replay's own error cancels out of every "
    "saving; waits the dependencies cannot explain stay as measured (the unexplained wait)."
)


@dataclass
class WhatIf:
    """What-ifs replayed on one analysed trace: ``to_dict()`` is the JSON document."""

    source: dict[str, Any]
    outcome: dict[str, Any]  # Outcome.to_dict(): changes, phases, unpriced_kernels
    books: dict[str, Any]
    critical_path: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        from tracekit.analysis.model import json_safe

        books = {k: v for k, v in self.books.items() if k != "steps"}
        books["steps"] = len(self.books.get("steps") or [])  # the per-step rows are in `tracekit report`'s JSON
        return json_safe(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": KIND,
                "source": self.source,
                "changes": self.outcome["changes"],
                "phases": self.outcome["phases"],
                "unpriced_kernels": self.outcome.get("unpriced_kernels") or {},
                "books": books,
                "critical_path": self.critical_path,
                "method": METHOD,
            }
        )


def whatif(analysis: Analysis, changes: list) -> WhatIf:
    """``changes`` (``analysis.replay.changes.Change``) replayed together on ``analysis``' steps."""
    if analysis.replayer is None:
        raise TracekitError("the trace has no inference steps to replay (tracekit summary shows what it holds)")
    if not changes:
        raise TracekitError("nothing to replay: give --remove, --speed or --host-floor (e.g. --remove launch)")
    outcome = analysis.replayer.run(changes)
    device = analysis.device or {}
    source = {
        "path": analysis.source.get("path"),
        "name": analysis.source.get("name"),
        "device": device.get("name"),
        "spec": device.get("spec"),
        "phase_source": analysis.phase_source,
        "model": (analysis.model or {}).get("name"),
    }
    replay = analysis.replay or {}
    return WhatIf(source, outcome.to_dict(), replay.get("books") or {}, replay.get("critical_path") or {})


def view_model(data: dict[str, Any]) -> dict[str, Any]:
    src = data["source"]
    return {
        "title": f"{src.get('name')}: what if {', '.join(data['changes'])}",
        "source": src,
        "changes": list(data["changes"]),
        "phases": [rv.phase_figures(p, fig) for p, fig in data["phases"].items()],
        "unpriced": rv.unpriced_lines(data.get("unpriced_kernels"), bool(src.get("model"))),
        "books": rv.books_lines(data.get("books")),
        "critical": rv.critical_rows(data.get("critical_path")),
        "method": data.get("method"),
    }


WHATIFS = Registry("what-if")
_register = WHATIFS.register


@_register
class WhatIfHtml(HtmlPage):
    description = "a self-contained HTML page"
    template = "whatif.html.j2"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**view_model(data), "chart_items": []}


@_register
class WhatIfJson(JsonDocument):
    description = "the what-if as JSON (kind tracekit.whatif, schema_version 1)"


@_register
class WhatIfMarkdown(TextTemplate):
    name, extension, template = "md", ".md", "whatif.md.j2"
    description = "a compact Markdown summary"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return view_model(data)


@_register
class WhatIfText(TextTemplate):
    name, extension, template = "text", ".txt", "whatif.txt.j2"
    description = "a terminal table"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        from tracekit.report.base import text_table

        vm = view_model(data)
        vm["table"] = text_table(
            ["phase", "steps", "measured", "replayed", "saving", "step p50", "TTFT / TPOT p50", "tokens/s"],
            [
                [
                    term_text(p["label"]),
                    p["steps"],
                    p["measured"],
                    p["replayed"],
                    f"{p['saving']} ({p['saving_share']})",
                    p["step_p50"],
                    f"{p['latency_label']} {p['latency']}",
                    p["tokens_per_s"],
                ]
                for p in vm["phases"]
            ],
        )
        return vm


def choose(fmt: str | None = None, path: str | None = None):
    """The renderer for ``-f``/the output's extension; the terminal's text by default."""
    return WHATIFS.choose(fmt, path, default="text")


def render_whatif(doc: WhatIf, fmt_: str = "text") -> str:
    return WHATIFS.get(fmt_).render(doc)
