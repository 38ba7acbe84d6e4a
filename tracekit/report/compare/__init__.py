"""Renderers of a comparison (``tracekit compare``): HTML, JSON, Markdown, terminal text.

    from tracekit.compare.comparison import compare
    from tracekit.report.compare import render_comparison
    html = render_comparison(compare(before, after), "html")

The same conventions as ``tracekit.report``: each renderer builds a plain view-model
from ``Comparison.to_dict()`` (``tracekit.report.compare.view``) and renders a
template (``templates/compare.*``); chosen by name or by the output file's extension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.report.base import JsonDocument, Registry, Renderer, text_table
from tracekit.report.compare import charts, view
from tracekit.report.render_html import HtmlPage
from tracekit.report.templating import render, term_text, text_env

if TYPE_CHECKING:
    from tracekit.compare.comparison import Comparison

TOP_MD = 5  # movers per phase in the Markdown comment
TOP_TEXT = 8  # ... and in the terminal


COMPARISONS = Registry("comparison")
_register = COMPARISONS.register


@_register
class CompareHtml(HtmlPage):
    description = "a self-contained HTML page: context first, headline deltas, per-phase charts, kernel movers"
    template = "compare.html.j2"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        items, ids = charts.all_charts(data)
        vm = view.view_model(data)
        for p in vm["phases"]:
            p["charts"] = ids.get(p["phase"], {})
        vm["chart_items"] = items
        return vm


@_register
class CompareJson(JsonDocument):
    description = "the whole comparison as JSON (Comparison.to_dict(), schema_version 1)"


@_register
class CompareMarkdown(Renderer):
    name = "md"
    extension = ".md"
    description = "a compact pull-request comment: context differences, headline verdicts, top movers"

    def __init__(self, top: int | None = TOP_MD):
        self.top = top

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return view.view_model(data, self.top)

    def render_data(self, data: dict[str, Any]) -> str:
        return render(text_env(), "compare.md.j2", vm=self.view_model(data))


@_register
class CompareText(Renderer):
    name = "text"
    extension = ".txt"
    description = "a terminal table"

    def __init__(self, top: int | None = TOP_TEXT):
        self.top = top

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view.view_model(data, self.top)
        head = ["figure", "before", "after", "change", "change %", "verdict"]
        cells = [
            [term_text(h[k]) for k in ("label", "before", "after", "delta", "relative", "verdict")]
            for h in vm["headline"]
        ]
        vm["headline_table"] = text_table(head, cells) if cells else []  # the template then says why
        ctx = [
            [term_text(c["label"]), term_text(c["before"]), "->", term_text(c["after"]), term_text(c["note"])]
            for c in vm["context"]
        ]
        vm["context_table"] = text_table(None, ctx)
        for k in vm["kernels"]:
            rows = []
            for c in k["categories"]:
                rows.append([term_text(c["category"]), c["before"], c["after"], c["delta"], c["status"], ""])
                for r in c["rows"]:
                    roof = f"{r['before_roof']} -> {r['after_roof']}" if r["status"] == "" else ""
                    rows.append(
                        [
                            "  " + term_text(r["op_short"]),
                            r["before"],
                            r["after"],
                            r["delta"],
                            r["status"] or r["per_call"],
                            roof,
                        ]
                    )
            head = ["category / op or kernel", "before", "after", "change", "per call", "of own roof"]
            k["table"] = text_table(head, rows) if rows else []
        return vm

    def render_data(self, data: dict[str, Any]) -> str:
        return render(text_env(), "compare.txt.j2", vm=self.view_model(data))


renderer_names = COMPARISONS.names
get_renderer = COMPARISONS.get
choose = COMPARISONS.choose


def render_comparison(comparison: Comparison, fmt: str = "html") -> str:
    """The comparison in format ``fmt`` (``html``, ``json``, ``md``, ``text``)."""
    return get_renderer(fmt).render(comparison)


__all__ = ["choose", "get_renderer", "render_comparison", "renderer_names"]
