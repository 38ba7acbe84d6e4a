"""PATHS... to the traces a batch analyses: files, folders and globs, checked before any work.

A file is one trace (whatever its name: a broken one becomes an error row). A folder is
walked; each folder holding trace files gives either one file, or a *group* of several
whose fate ``tracekit.trace.runs.check_one_run`` decides once their files have been read:
the ranks of one run are analysed as one trace, anything else file by file.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

from tracekit.errors import TracekitError
from tracekit.trace.decode import list_trace_files


@dataclass
class Item:
    """One input: a single trace file, or a folder whose ``files`` may be one run."""

    path: str
    files: list[str] = field(default_factory=list)

    @property
    def is_group(self) -> bool:
        return len(self.files) > 1


def expand(paths: list[str]) -> list[Item]:
    """The inputs of ``paths`` in the order given (folders walked in name order), each file
    once. Raises ``TracekitError`` for a path or glob that matches nothing, or no trace at all."""
    items: list[Item] = []
    seen: set[str] = set()
    for arg in paths:
        matches = (
            [arg] if os.path.exists(arg) else sorted(glob.glob(arg, recursive=True)) if glob.has_magic(arg) else []
        )
        if not matches:
            what = "matches no file or folder" if glob.has_magic(arg) else "no such file or folder"
            raise TracekitError(f"{arg}: {what}")
        for m in matches:
            for item in _items(m):
                key = os.path.realpath(item.path)
                if key not in seen:
                    seen.add(key)
                    items.append(item)
    if not items:
        raise TracekitError(f"no trace files (*.json, *.json.gz, *.json.zst) in {', '.join(paths)}")
    return items


def _items(path: str) -> list[Item]:
    if not os.path.isdir(path):
        return [Item(path)]
    out = []
    for folder, dirs, _ in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        try:
            files = list_trace_files(folder)
        except OSError as e:
            raise TracekitError(f"cannot list {folder}: {e.strerror or e}") from None
        if len(files) == 1:
            out.append(Item(files[0]))
        elif files:
            out.append(Item(folder, files))
    return out
