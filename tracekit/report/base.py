"""The renderer base: one class per output format, chosen by name or by file extension.

A renderer turns an ``Analysis`` into text. It first builds a plain view-model
(dicts and lists of already-formatted values, see ``tracekit.report.view``) from
``Analysis.to_dict()`` — the JSON contract, so a report can show nothing that the
JSON lacks — then renders a template. Tests assert on the view-model.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis


class Renderer:
    name: ClassVar[str] = ""
    extension: ClassVar[str] = ""  # with the dot: ".html"
    description: ClassVar[str] = ""

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        """The plain values the template shows, from ``Analysis.to_dict()``."""
        raise NotImplementedError

    def render_data(self, data: dict[str, Any]) -> str:
        """Render from the JSON contract (``Analysis.to_dict()`` or a saved JSON report)."""
        raise NotImplementedError

    def render(self, analysis: Analysis) -> str:
        return self.render_data(analysis.to_dict())


_RENDERERS: dict[str, type[Renderer]] = {}
# Extra spellings of extensions, beyond each renderer's own.
_ALIASES = {".htm": "html", ".markdown": "md"}


def register(cls: type[Renderer]) -> type[Renderer]:
    _RENDERERS[cls.name] = cls
    return cls


def renderer_names() -> list[str]:
    return list(_RENDERERS)


def get_renderer(name: str) -> Renderer:
    try:
        return _RENDERERS[name]()
    except KeyError:
        raise TracekitError(f"unknown report format {name!r}: choose one of {', '.join(_RENDERERS)}") from None


def format_for_path(path: str) -> str | None:
    """The format an output file's extension asks for, or None."""
    ext = os.path.splitext(path)[1].lower()
    if ext in _ALIASES:
        return _ALIASES[ext]
    for name, cls in _RENDERERS.items():
        if cls.extension == ext:
            return name
    return None


def choose(fmt: str | None = None, path: str | None = None, default: str = "html") -> Renderer:
    """The renderer for an explicit format name, else for the output file's extension,
    else ``default``."""
    if fmt:
        return get_renderer(fmt)
    if path and path != "-":
        found = format_for_path(path)
        if found is None:
            exts = ", ".join(cls.extension for cls in _RENDERERS.values())
            raise TracekitError(
                f"cannot tell the report format from {os.path.basename(path)!r}: name the file with {exts}, or pass --format"
            )
        return get_renderer(found)
    return get_renderer(default)
