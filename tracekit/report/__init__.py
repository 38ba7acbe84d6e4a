"""Renderers: one ``Analysis`` in, one report out (HTML, JSON, Markdown, terminal text).

    from tracekit.report import render, write_report
    html = render(analysis, "html")
    path = write_report(analysis, "reports/run.html")          # format from the extension

Each renderer builds a plain view-model from ``Analysis.to_dict()`` and renders a
Jinja2 template from ``templates/``; none computes a figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.report.base import Renderer
from tracekit.report.output import default_output, refuse_overwrite, report_stem, write_atomic

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis

# The names that look renderers up by format. The renderers register themselves when their
# modules are imported, which happens on the first look-up, not with this package: importing
# ``tracekit.report.output`` (every command's output rules) or one view must not load the HTML
# renderer's charts and helpers (``tracekit summary`` renders text only; tests/test_startup.py).
_LOOKUPS = ("choose", "format_for_path", "get_renderer", "renderer_names")


def _registered():
    """``tracekit.report.base`` once every report renderer has registered itself."""
    from tracekit.report import base, render_html, render_json, render_md, render_text  # noqa: F401  (registers them)

    return base


def __getattr__(name: str):
    if name in _LOOKUPS:
        return getattr(_registered(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render(analysis: Analysis, fmt: str = "html") -> str:
    """The report of ``analysis`` in format ``fmt`` (``html``, ``json``, ``md``, ``text``)."""
    return _registered().get_renderer(fmt).render(analysis)


def write_report(analysis: Analysis, path: str, fmt: str | None = None, *, force: bool = False) -> str:
    """Render and write atomically; the format comes from ``fmt`` or ``path``'s extension."""
    renderer = _registered().choose(fmt, path)
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
