"""MkDocs hook: the CLI reference's options with no default show none.

click 8.3 marks an option without a default with its own ``UNSET`` sentinel, and mkdocs-click
(0.9) prints that sentinel's repr, ``Sentinel.UNSET``, in the Default column of every such
option; the cell is left empty instead, as the command's own ``--help`` shows nothing there.
"""

from __future__ import annotations

UNSET_CELL = "<td><code>Sentinel.UNSET</code></td>"


def on_page_content(html: str, **kwargs) -> str:
    return html.replace(UNSET_CELL, "<td></td>")
