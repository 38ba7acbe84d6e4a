"""Renderers of a comparison (``tracekit compare``): HTML, JSON, Markdown, terminal text.

    from tracekit.analysis.compare import compare
    from tracekit.report.compare import render_comparison
    html = render_comparison(compare(before, after), "html")

The same conventions as ``tracekit.report``: each renderer builds a plain view-model
from ``Comparison.to_dict()`` (``tracekit.report.compare.view``) and renders a
template (``templates/compare.*``); chosen by name or by the output file's extension.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from tracekit.report import charts as report_charts
from tracekit.report.base import Registry, Renderer
from tracekit.report.compare import charts, view
from tracekit.report.render_html import _csp, _loader_js
from tracekit.report.templating import html_env, render, term_text, text_env

if TYPE_CHECKING:
    from tracekit.analysis.compare import Comparison

TOP_MD = 5  # movers per phase in the Markdown comment
TOP_TEXT = 8  # ... and in the terminal


class CompareRenderer(Renderer):
    """A renderer of ``Comparison.to_dict()``; ``render(comparison)`` works as for an Analysis."""

    def render(self, comparison: Comparison) -> str:  # type: ignore[override]
        return self.render_data(comparison.to_dict())


COMPARISONS = Registry("comparison")
_register = COMPARISONS.register


@_register
class CompareHtml(CompareRenderer):
    name = "html"
    extension = ".html"
    description = "a self-contained HTML page: context first, headline deltas, per-phase charts, kernel movers"

    def __init__(self, include_js: bool = True):
        self.include_js = include_js

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        items, ids = charts.all_charts(data)
        vm = view.view_model(data)
        for p in vm["phases"]:
            p["charts"] = ids.get(p["phase"], {})
        vm["chart_items"] = items
        return vm

    def render_data(self, data: dict[str, Any]) -> str:
        vm = self.view_model(data)
        js = report_charts.inline_bokeh_js() if self.include_js and vm["chart_items"] else None
        loader = _loader_js()
        return render(html_env(), "compare.html.j2", vm=vm, bokeh_js=Markup(js) if js else None,
                      loader_js=Markup(loader), csp=_csp([js, loader]))


@_register
class CompareJson(CompareRenderer):
    name = "json"
    extension = ".json"
    description = "the whole comparison as JSON (Comparison.to_dict(), schema_version 1)"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def render_data(self, data: dict[str, Any]) -> str:
        return json.dumps(data, indent=2, allow_nan=False) + "\n"


@_register
class CompareMarkdown(CompareRenderer):
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
class CompareText(CompareRenderer):
    name = "text"
    extension = ".txt"
    description = "a terminal table"

    def __init__(self, top: int | None = TOP_TEXT):
        self.top = top

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        vm = view.view_model(data, self.top)
        head = ["figure", "before", "after", "change", "change %", "verdict"]
        cells = [[term_text(h[k]) for k in ("label", "before", "after", "delta", "relative", "verdict")] for h in vm["headline"]]
        vm["headline_table"] = _table(head, cells)
        ctx = [[term_text(c["label"]), term_text(c["before"]), "->", term_text(c["after"]), term_text(c["note"])] for c in vm["context"]]
        vm["context_table"] = _table(None, ctx)
        for k in vm["kernels"]:
            rows = [
                [term_text(r["op"]), term_text(r["category"]), r["before"], r["after"], r["delta"], r["per_call"],
                 f"{r['before_roof']} -> {r['after_roof']}"]
                for r in k["movers"]
            ]
            k["table"] = _table(["op", "category", "before", "after", "change", "per call", "of own roof"], rows) if rows else []
        return vm

    def render_data(self, data: dict[str, Any]) -> str:
        return render(text_env(), "compare.txt.j2", vm=self.view_model(data))


def _table(head: list[str] | None, rows: list[list[Any]]) -> list[str]:
    """Columns padded to width: the first two left-aligned, numbers right-aligned."""
    allrows = ([head] if head else []) + rows
    if not allrows:
        return []
    n = max(len(r) for r in allrows)
    widths = [max(len(str(r[i])) for r in allrows if i < len(r)) for i in range(n)]
    out = []
    for r in allrows:
        cells = []
        for i, c in enumerate(r):
            s = str(c)
            last = i == len(r) - 1
            numeric = i > 0 and not last and any(ch.isdigit() for ch in s) and head is not None
            cells.append(s.rjust(widths[i]) if numeric else (s if last else s.ljust(widths[i])))
        out.append("  ".join(cells).rstrip())
    return out


renderer_names = COMPARISONS.names
get_renderer = COMPARISONS.get
choose = COMPARISONS.choose


def render_comparison(comparison: Comparison, fmt: str = "html") -> str:
    """The comparison in format ``fmt`` (``html``, ``json``, ``md``, ``text``)."""
    return get_renderer(fmt).render(comparison)


__all__ = ["CompareRenderer", "choose", "get_renderer", "render_comparison", "renderer_names"]
