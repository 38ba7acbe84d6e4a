"""The renderer base: one class per output format, chosen by name or by file extension.

A renderer turns an ``Analysis`` into text. It first builds a plain view-model
(dicts and lists of already-formatted values, see ``tracekit.report.view``) from
``Analysis.to_dict()`` — the JSON contract, so a report can show nothing that the
JSON lacks — then renders a template. Tests assert on the view-model.
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar, Protocol

from tracekit.errors import TracekitError


class Document(Protocol):
    """What a renderer renders: an Analysis, a Comparison, a Projection, a Plan, a WhatIf."""

    def to_dict(self) -> dict[str, Any]: ...


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

    def render(self, document: Document) -> str:
        """Any document with ``to_dict()``: an Analysis, a Comparison, a Projection, a Plan."""
        return self.render_data(document.to_dict())


class JsonDocument(Renderer):
    """``--format json`` of any document: its ``to_dict()`` as it stands."""

    name = "json"
    extension = ".json"

    def view_model(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def render_data(self, data: dict[str, Any]) -> str:
        return json.dumps(data, indent=2, allow_nan=False) + "\n"


class TextTemplate(Renderer):
    """A Markdown or terminal document: ``template`` (a text template) from ``view_model(data)``."""

    template = ""

    def render_data(self, data: dict[str, Any]) -> str:
        from tracekit.report.templating import render, text_env

        return render(text_env(), self.template, vm=self.view_model(data))


def text_table(head: list[str] | None, rows: list[list[Any]]) -> list[str]:
    """Terminal columns padded to width: the first column and the last left-aligned, numbers
    right-aligned (when there is a header)."""
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


# Extra spellings of extensions, beyond each renderer's own.
_ALIASES = {".htm": "html", ".markdown": "md"}


class Registry:
    """Renderers of one kind of document (a report, a comparison), by name and extension."""

    def __init__(self, what: str):
        self.what = what
        self._by_name: dict[str, type[Renderer]] = {}

    def register(self, cls: type[Renderer]) -> type[Renderer]:
        self._by_name[cls.name] = cls
        return cls

    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str) -> Renderer:
        try:
            return self._by_name[name]()
        except KeyError:
            raise TracekitError(
                f"unknown {self.what} format {name!r}: choose one of {', '.join(self._by_name)}"
            ) from None

    def format_for_path(self, path: str) -> str | None:
        """The format an output file's extension asks for, or None."""
        ext = os.path.splitext(path)[1].lower()
        if ext in _ALIASES:
            return _ALIASES[ext] if _ALIASES[ext] in self._by_name else None
        for name, cls in self._by_name.items():
            if cls.extension == ext:
                return name
        return None

    def choose(self, fmt: str | None = None, path: str | None = None, default: str = "html") -> Renderer:
        """The renderer for an explicit format name, else for the output file's extension,
        else ``default``."""
        if fmt:
            return self.get(fmt)
        if path and path != "-":
            found = self.format_for_path(path)
            if found is None:
                exts = ", ".join(cls.extension for cls in self._by_name.values())
                raise TracekitError(
                    f"cannot tell the {self.what} format from {os.path.basename(path)!r}: name the file with {exts}, or pass --format"
                )
            return self.get(found)
        return self.get(default)


REPORTS = Registry("report")
register = REPORTS.register
renderer_names = REPORTS.names
get_renderer = REPORTS.get
format_for_path = REPORTS.format_for_path
choose = REPORTS.choose
