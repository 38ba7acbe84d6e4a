"""A trace's tables kept for the second read (``tracekit.cache``): Arrow files instead of JSON.

An entry holds one Arrow IPC file (Feather v2, LZ4) per table of the ``Trace`` and
``trace.json`` with every other field. Arrow keeps each column's dtype (categories, int32 grids,
bools, object text with None) and the index, so a loaded ``Trace`` equals the one read; loading
the 379 MB benchmark trace's tables takes ~0.1 s where parsing its JSON takes ~3 s. Parquet
would be smaller on disk but turns an empty categorical column into another dtype and decodes
slower; the cache is for speed.

Needs pyarrow (``pip install 'tracekit[cache]'``); without it every read parses the JSON. Small
traces are not kept: below ``MIN_BYTES`` on disk the JSON reads about as fast as Arrow loads.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

from tracekit import cache
from tracekit.trace.columns import TABLES
from tracekit.trace.model import Trace

KIND = "trace"
DATA = "trace.json"
MIN_BYTES = 1_000_000  # of trace files on disk; $TRACEKIT_CACHE_MIN_MB overrides
MIN_ENV = "TRACEKIT_CACHE_MIN_MB"


def read_cached(path: str, read: Callable[[str], Trace], enabled: bool = True) -> Trace:
    """``read(path)``, or the tables an earlier read of the same unchanged file(s) kept."""
    if not enabled or cache.disabled() or not _have_arrow():
        return read(path)
    try:
        if _size(path) < _min_bytes():
            return read(path)
        identity = cache.path_identity(path)
    except OSError:
        return read(path)  # the reader words what is wrong with the path
    key = cache.make_key(KIND, identity)
    hit = cache.lookup(KIND, key)
    if hit is not None:
        trace = load(*hit, path)
        if trace is not None:
            return trace
        cache.discard(hit[0])  # verified but unreadable (another pyarrow?): rebuilt below
    trace = read(path)
    try:
        unchanged = cache.path_identity(path) == identity
    except OSError:
        unchanged = False
    if unchanged:  # a file rewritten during the read must not be kept under its old key
        save(trace, key)
    return trace


def save(trace: Trace, key: str) -> bool:
    """Keep ``trace``'s tables under ``key``; False when a field does not survive JSON exactly
    or a column Arrow cannot hold (the trace is then simply read again next time)."""
    import pyarrow as pa
    import pyarrow.feather as feather

    rest = _rest(trace)
    text = json.dumps(rest)
    if json.loads(text) != rest:
        return False

    def table_writer(name: str):
        def write(p: str) -> None:
            feather.write_feather(pa.Table.from_pandas(getattr(trace, name)), p, compression="lz4")

        return write

    def write_rest(p: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)

    writers = {f"{n}.arrow": table_writer(n) for n in TABLES}
    writers[DATA] = write_rest
    rows = {n: len(getattr(trace, n)) for n in TABLES}
    dtypes = {n: {str(c): str(t) for c, t in getattr(trace, n).dtypes.items()} for n in TABLES}
    return cache.store(KIND, key, writers, info={"path": trace.path, "rows": rows, "dtypes": dtypes})


def load(folder: str, manifest: dict, path: str) -> Trace | None:
    """The ``Trace`` of a verified entry, read as ``path``; None when it cannot be read whole."""
    try:
        import pandas as pd
        import pyarrow.feather as feather

        with open(os.path.join(folder, DATA), encoding="utf-8") as f:
            rest = json.load(f)
        info = manifest["info"]
        tables = {}
        for n in TABLES:
            table = feather.read_table(os.path.join(folder, f"{n}.arrow"), memory_map=False)
            df = table.to_pandas()
            want = info["dtypes"][n]
            for col, dtype in want.items():
                if dtype == "object" and str(df[col].dtype) != "object":
                    # pandas 3 makes Arrow text its ``str`` dtype (missing: NaN); the reader's text
                    # columns are objects (missing: None), and Arrow gives those back as they were.
                    df[col] = pd.Series(table.column(col).to_numpy(zero_copy_only=False), index=df.index, dtype=object)
            if len(df) != info["rows"][n] or {str(c): str(t) for c, t in df.dtypes.items()} != want:
                return None
            tables[n] = df
        return _trace(rest, tables, path)
    except Exception:  # noqa: BLE001  (whatever a damaged or foreign file raises: never trusted, rebuilt)
        return None


def _rest(trace: Trace) -> dict:
    """Every field but the tables, as JSON values (deviceProperties' integer keys as pairs)."""
    out = {}
    for f in dataclasses.fields(Trace):
        if f.name in TABLES:
            continue
        value = getattr(trace, f.name)
        out[f.name] = [[k, v] for k, v in value.items()] if f.name == "devices" else value
    return out


def _trace(rest: dict, tables: dict, path: str) -> Trace:
    fields = {f.name for f in dataclasses.fields(Trace)} - set(TABLES)
    if set(rest) != fields:
        raise ValueError("another Trace's fields")
    rest = dict(rest)
    rest["devices"] = {int(k): dict(v) for k, v in rest["devices"]}
    # The entry is keyed by content, not by where the file lies or how it was named on the
    # command line: the paths are the ones given now.
    rest["path"] = path
    files = (rest.get("metadata") or {}).get("files")
    if isinstance(files, list):
        rest["metadata"] = {**rest["metadata"], "files": [os.path.join(path, os.path.basename(f)) for f in files]}
    return Trace(**rest, **tables)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    return os.path.getsize(path)


def _min_bytes() -> int:
    raw = os.environ.get(MIN_ENV, "").strip()
    try:
        return int(float(raw) * 1e6) if raw else MIN_BYTES
    except ValueError:
        return MIN_BYTES


def _have_arrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None
