"""Rows on disk as they finish, so that a batch interrupted or killed leaves the work it did.

``CsvJournal`` appends each row to a CSV file (header first) and flushes it; ``JsonJournal``
keeps a ``tracekit.fleet`` JSON document that parses after every row (``"complete": false``,
the rows so far, in the order they finished). Neither can hold what only the whole batch
knows (input order, outlier marks, counts): the batch's end replaces the file with the full
table (``tracekit.report.fleet.write_fleet``).
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from tracekit.batch.rows import COLUMNS
from tracekit.errors import TracekitError

# The JSON document's end, written again after each row.
_TAIL = b"\n]}\n"


class CsvJournal:
    """``path`` as a CSV of ``COLUMNS``, one line per finished row, flushed as it comes."""

    kind = "csv"

    def __init__(self, path: str):
        self.path = path
        self._f = _open(path)
        self._write([*COLUMNS])

    def add(self, row: dict[str, Any]) -> None:
        self._write([_cell(row.get(c)) for c in COLUMNS])

    def _write(self, values: list[str]) -> None:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        _put(self._f, self.path, buf.getvalue().encode("utf-8"))

    def close(self) -> None:
        self._f.close()


class JsonJournal:
    """``path`` as a fleet document whose ``rows`` grow: each row is written over the closing
    ``]}``, which then follows it again, so the file is whole JSON between rows."""

    kind = "json"

    def __init__(self, path: str, head: dict[str, Any]):
        self.path = path
        self._f = _open(path)
        self._first = True
        text = json.dumps({**head, "complete": False, "columns": list(COLUMNS)}, indent=1)
        _put(self._f, path, (text[: text.rstrip().rfind("}")].rstrip() + ',\n "rows": [').encode("utf-8"))
        self._end = self._f.tell()
        _put(self._f, path, _TAIL)

    def add(self, row: dict[str, Any]) -> None:
        # Row and tail in one write: a kill between rows leaves whole JSON.
        data = (("\n" if self._first else ",\n") + json.dumps(row, default=str)).encode("utf-8")
        self._f.seek(self._end)
        _put(self._f, self.path, data + _TAIL)
        self._first = False
        self._end += len(data)

    def close(self) -> None:
        self._f.close()


def _open(path: str):
    try:
        return open(path, "wb")
    except OSError as e:
        raise TracekitError(f"cannot write {path}: {e.strerror or e}") from None


def _put(f, path: str, data: bytes) -> None:
    try:
        f.write(data)
        f.flush()  # in the kernel's hands: a killed tracekit loses nothing written
    except OSError as e:
        raise TracekitError(f"cannot write {path}: {e.strerror or e}") from None


def _cell(v: Any) -> str:
    """A CSV cell as pandas writes it: blank for None, repr for floats."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def journal_path(first_output: str) -> str:
    """Where rows go as they finish when no output can take them (only HTML or Parquet asked
    for): beside the first output, ``NAME.partial.csv``."""
    folder, name = os.path.split(first_output)
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return os.path.join(folder, f"{stem}.partial.csv")
