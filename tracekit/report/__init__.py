"""Renderers: one ``Analysis`` in, one report out (HTML, JSON, Markdown, terminal text).

    from tracekit.report import render, write_report
    html = render(analysis, "html")
    path = write_report(analysis, "reports/run.html")          # format from the extension

Each renderer builds a plain view-model from ``Analysis.to_dict()`` and renders a
Jinja2 template from ``templates/``; none computes a figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report import render_html, render_json, render_md, render_text  # noqa: F401  (registers them)
from tracekit.report.base import Renderer, choose, format_for_path, get_renderer, renderer_names
from tracekit.report.output import default_output, refuse_overwrite, report_stem, write_atomic

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis


def render(analysis: Analysis, fmt: str = "html") -> str:
    """The report of ``analysis`` in format ``fmt`` (``html``, ``json``, ``md``, ``text``)."""
    return get_renderer(fmt).render(analysis)


def write_report(analysis: Analysis, path: str, fmt: str | None = None, *, force: bool = False) -> str:
    """Render and write atomically; the format comes from ``fmt`` or ``path``'s extension."""
    renderer = choose(fmt, path)
    refuse_overwrite(path, force)
    write_atomic(path, renderer.render(analysis))
    return path


__all__ = [
    "Renderer",
    "choose",
    "default_output",
    "format_for_path",
    "get_renderer",
    "refuse_overwrite",
    "render",
    "renderer_names",
    "report_stem",
    "write_atomic",
    "write_report",
]
