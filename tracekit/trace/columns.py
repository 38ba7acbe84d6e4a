"""Decoded events -> the ``Trace`` tables, one chunk of events at a time.

``stream`` hands over the trace's events in chunks; each chunk is turned into compact
columns here (int64 nanoseconds and ids, int32 name codes, shared strings for shapes)
and its event objects are dropped before the next one is decoded, so memory holds
the columns plus one chunk. ``tables`` then concatenates the columns into the same
DataFrames, row order and dtypes as reading the whole document at once would give:
the tests compare the two.

Categories are matched case-insensitively so every schema era (PyTorch 1.8-1.9
``Kernel``/``Runtime``/``Operator``, 2022, current) lands in the same tables.
"""

from __future__ import annotations

import json
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from tracekit import markers
from tracekit.trace import decode as dec

# Lower-cased event category -> (table, kind).
TABLE_OF = {
    "kernel": ("kernels", "kernel"),
    "gpu_memcpy": ("kernels", "memcpy"),
    "memcpy": ("kernels", "memcpy"),
    "gpu_memset": ("kernels", "memset"),
    "memset": ("kernels", "memset"),
    "cuda_runtime": ("runtime", "runtime"),
    "runtime": ("runtime", "runtime"),
    "cuda_driver": ("runtime", "driver"),
    "cpu_op": ("cpu_ops", None),
    "operator": ("cpu_ops", None),
    "user_annotation": ("annotations", "cpu"),
    "gpu_user_annotation": ("annotations", "gpu"),
    "python_function": ("python", None),
}
# The column that holds each table's kind, and the kinds it can hold.
_KIND_COLUMN = {"kernels": "kind", "runtime": "api", "annotations": "side"}
_KINDS = ("kernel", "memcpy", "memset", "runtime", "driver", "cpu", "gpu")
# Looked up with TABLE_OF's kinds too, whose None (a table without kinds) has no code.
_KIND_CODE: dict[str | None, int] = {k: i for i, k in enumerate(_KINDS)}

# Float microseconds hold whole nanoseconds exactly below about 2**42 us
# (~50 days of clock). Epoch-based fractional timestamps exceed that; those
# chunks are decoded a second time with exact decimals.
_EXACT_LIMIT_US = float(2**42)
# Beyond this many microseconds (~146 years of clock) int64 nanoseconds overflow.
_MAX_US = 9.2e15
_RANGE_PREFIXES = ("ProfilerStep#", markers.PREFIX)
# The categories of the flows that tie a launch call to its kernel, in every schema era.
LAUNCH_FLOWS = ("ac2g", "async_cpu_to_gpu", "async")

TABLES = ("kernels", "runtime", "cpu_ops", "annotations", "python")
_TABLE_CODE = {t: i for i, t in enumerate(TABLES)}


class Builder:
    """Accumulates the columns of every table from chunks of decoded events, in file order."""

    def __init__(self) -> None:
        self.n_events = 0
        self.cats: set[str] = set()  # lower-cased categories of complete events, for the era
        self.launch_flow: str | None = None  # category of the last CPU-to-GPU flow start
        # Every distinct string is kept once, as a code: names, and the texts of shapes and
        # kernel names, so a column of a million names costs four bytes a row while reading.
        self._names: dict[str, int] = {}
        # (b"" and "" stand for "not recorded": None in the tables.)
        self._texts = _Texts((b"", ""))
        # Distinct launch dimensions ([x, y, z] texts of grid and block) -> a row of
        # ``self._dims`` (x, y, z, x*y*z); row 0 is "not recorded".
        self._grids: dict[bytes, int] = {b"": 0}
        self._dims: list[tuple[int, int, int, int]] = [(-1, -1, -1, -1)]
        # Category -> its rank of first appearance in the file: the whole-document
        # reader grouped rows by category in that order before sorting by time, and
        # ties in time keep that order.
        self._cat_rank: dict[object, int] = {}
        self._cat_table = _Growing(np.int8)  # by rank: the table code, -1 for none
        self._cat_kind = _Growing(np.int8)  # by rank: the kind code, -1 for none
        self._ranged = _Growing(np.bool_)  # by name code: a record_function range name
        self._parts: dict[str, dict[str, _Growing]] = {t: {} for t in TABLES}

    # -- one chunk ----------------------------------------------------------------------
    #
    # Per-event work is what reading costs, so every per-event step below is a list
    # comprehension reading one struct field (the interpreter's specialised slot read: about
    # half the time of ``map(attrgetter(...))``, which goes through the generic getattr), a
    # C-level pass (a dict's method into np.fromiter) or numpy; Python-level loops run once
    # per distinct category, name, shape or grid.

    def add(self, events: list, exact: Callable[[], list] | None = None) -> None:
        """Take one chunk of decoded events; ``exact`` re-decodes the chunk with decimal timestamps.

        Raises ValueError, OverflowError or TypeError on malformed events.
        """
        self.n_events += len(events)
        kept, groups, shared = self._group(events, note_flow=True)
        if exact is not None and _needs_exact(groups, shared.ts):
            kept, groups, shared = self._group(exact())  # its ts is None: decimals, taken per table
        for table, (rows, kinds, ranks) in groups.items():
            if len(rows):
                self._columns(table, kept, rows, kinds, ranks, shared)

    def _group(
        self, events: list, note_flow: bool = False
    ) -> tuple[list, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], _Chunk]:
        """(the events of a chunk that go to a table, in file order; rows of each destination
        table as (row numbers in those events, kind codes, category ranks); the columns every
        table shares, for all of those events). ``note_flow``: also note the chunk's last launch flow.

        Categories and names are looked up in dicts that learn each distinct value once
        (a trace has ~15 categories and a few thousand names among 10^5-10^6 events).
        Events that are not complete ones read a ``decode.NotComplete`` category, which has
        a rank but no table: the one category pass also drops them.
        """
        ranks = _codes(self._cat_rank, [e.cat for e in events], self._new_cats)
        table = self._cat_table.array()[ranks]
        if note_flow and dec.FLOW in self._cat_rank:
            # Flow categories live only on flow events, never on the complete events the tables
            # are built from; the last launch flow of the file dates the schema.
            for i in np.flatnonzero(ranks == self._cat_rank[dec.FLOW])[::-1].tolist():
                cat = events[i].flow_cat
                if cat and cat.lower() in LAUNCH_FLOWS:
                    self.launch_flow = cat.lower()
                    break
        rows = np.flatnonzero(table >= 0)
        if len(rows) < len(events):
            events = list(map(events.__getitem__, rows.tolist()))
            ranks, table = ranks[rows], table[rows]
        n = len(events)
        kinds = self._cat_kind.array()[ranks]
        names = _codes(self._names, [e.name for e in events], self._new_names)
        ts = (
            np.fromiter([e.ts for e in events], dtype=np.float64, count=n)
            if n and type(events[0].ts) is float
            else None
        )
        shared = _Chunk(names, ts)
        op = _TABLE_CODE["cpu_ops"]
        # PyTorch 1.x recorded record_function ranges (ProfilerStep#N, user
        # ranges) as ordinary operators; they are annotations in later eras.
        moved = (table == op) & self._ranged.array()[names]
        if moved.any():
            table[moved] = _TABLE_CODE["annotations"]
            kinds[moved] = _KIND_CODE["cpu"]
        out = {}
        for t, name in enumerate(TABLES):
            rows = np.flatnonzero(table == t)
            out[name] = (rows, kinds[rows], ranks[rows])
        return events, out, shared

    def _new_cats(self, cats: list[str | dec.NotComplete | None]) -> None:
        """Learn this chunk's new categories, in order of first appearance (their rank)."""
        for cat in dict.fromkeys(cats):
            if cat in self._cat_rank:
                continue
            if isinstance(cat, str):
                self.cats.add(cat.lower())
            # None (no category) and events that are not complete ones get a rank too, but no
            # table: their events go nowhere.
            dest = (
                None
                if cat is None or isinstance(cat, dec.NotComplete)
                else TABLE_OF.get(cat) or TABLE_OF.get(str(cat).lower())
            )
            self._cat_rank[cat] = len(self._cat_rank)
            self._cat_table.extend(np.array([-1 if dest is None else _TABLE_CODE[dest[0]]], dtype=np.int8))
            self._cat_kind.extend(np.array([-1 if dest is None else _KIND_CODE.get(dest[1], -1)], dtype=np.int8))

    def _new_names(self, names: list) -> None:
        for name in dict.fromkeys(names):
            if name not in self._names:
                self._names[name] = len(self._names)
                self._ranged.extend(np.array([name.startswith(_RANGE_PREFIXES)], dtype=bool))

    def _columns(
        self, table: str, events: list, rows: np.ndarray, kinds: np.ndarray, ranks: np.ndarray, shared: "_Chunk"
    ) -> None:
        n = len(rows)
        # A chunk of one table only (Kineto writes the GPU's activities in one run) is used as is.
        evs = events if n == len(events) else list(map(events.__getitem__, rows.tolist()))
        cols: dict[str, np.ndarray] = {
            "name": shared.names[rows],
            "start_ns": _ns([e.ts for e in evs]) if shared.ts is None else _ns_float(shared.ts[rows]),
            "dur_ns": _dur_ns(np.fromiter([e.dur for e in evs], dtype=np.float64, count=n)),
            "_rank": ranks,
        }
        args = [e.args for e in evs]
        if table in ("kernels", "runtime", "cpu_ops", "annotations"):
            ext = _ints([a.external_id for a in args])
            # PyTorch 1.9 spelled it "external id": read only where "External id" is absent.
            missing = np.flatnonzero(ext < 0)
            if len(missing):
                ext[missing] = _ints([args[i].external_id_lc for i in missing.tolist()])
        if table in _KIND_COLUMN:
            cols[_KIND_COLUMN[table]] = kinds
        if table == "kernels":
            # Old traces carry the device only in pid and the stream only in tid ("stream 7").
            device = _ints([a.device for a in args])
            if (device < 0).any():
                device = np.where(device >= 0, device, _ints([e.pid for e in evs]))
            cols["device"] = device
            stream = _ints([a.stream for a in args])
            if (stream < 0).any():
                stream = np.where(stream >= 0, stream, _ints([e.tid for e in evs]))
            cols["stream"] = stream
            cols["correlation"] = _ints([a.correlation for a in args])
            cols["external_id"] = ext
            grid = self._dims_of([a.grid for a in args])
            cols["ctas"] = grid[:, 3].astype(np.int64)
            block = self._dims_of([a.block for a in args])
            for i, axis in enumerate("xyz"):
                cols[f"grid_{axis}"] = grid[:, i].astype(np.int32)
                cols[f"block_{axis}"] = block[:, i].astype(np.int32)
            cols["bytes"] = _ints([a.nbytes for a in args])
        else:
            cols["pid"] = _ints([e.pid for e in evs])
            cols["tid"] = _ints([e.tid for e in evs])
        if table == "runtime":
            cols["correlation"] = _ints([a.correlation for a in args])
            cols["external_id"] = ext
            cols["kernel"] = self._texts.codes([a.kernel for a in args], str)
        elif table == "cpu_ops":
            cols["external_id"] = ext
            # Copied out as text: a msgspec.Raw would keep the chunk's buffer alive.
            cols["input_dims"] = self._raw_texts([a.input_dims for a in args])
            cols["input_types"] = self._raw_texts([a.input_types for a in args])
            cols["concrete_inputs"] = self._raw_texts([a.concrete for a in args])
        elif table == "annotations":
            cols["device"] = _ints([a.device for a in args])
            cols["stream"] = _ints([a.stream for a in args])
            cols["external_id"] = ext
        parts = self._parts[table]
        for c, v in cols.items():
            column = parts.get(c)
            if column is None:
                column = parts[c] = _Growing(v.dtype)
            column.extend(v)

    def _raw_texts(self, raws: list) -> np.ndarray:
        # Absent fields all hold the one default Raw: a chunk recorded without shapes is
        # answered by one C-level count, not a bytes copy per op.
        if raws.count(dec.ABSENT) == len(raws):
            return np.zeros(len(raws), dtype=np.int32)
        return self._texts.codes(list(map(bytes, raws)), bytes.decode)

    def _dims_of(self, raws: list) -> np.ndarray:
        """(x, y, z, x*y*z) of each kernel's ``grid`` or ``block`` as an int64 [n, 4] array;
        -1 where the trace does not record it.

        A trace holds few distinct grids among many kernels, so each raw text is parsed once.
        """
        seen, dims = self._grids, self._dims

        def learn(keys: list) -> None:
            for key in dict.fromkeys(keys):
                if key not in seen:
                    seen[key] = len(dims)
                    dims.append(_launch_dims(key))

        codes = _codes(seen, list(map(bytes, raws)), learn)
        return np.array(dims, dtype=np.int64)[codes]

    # -- the tables ---------------------------------------------------------------------

    def tables(self, base_ns: int) -> dict[str, pd.DataFrame]:
        """The five tables, times shifted by ``base_ns``, rows in time order (ties in file order by category)."""
        names = list(self._names)
        texts = self._texts.array()
        return {t: self._table(t, names, texts, base_ns) for t in TABLES}

    def _table(self, table: str, names: list[str], texts: np.ndarray, base_ns: int) -> pd.DataFrame:
        parts = self._parts[table]
        if not parts:
            return EMPTY[table]()
        col = {c: v.array() for c, v in parts.items()}
        self._parts[table] = {}
        start = col["start_ns"] + base_ns
        dur = col["dur_ns"]
        ranks = col.pop("_rank")
        order = None
        if not (np.diff(start) >= 0).all():
            # Stable: rows that start together keep the whole-document order (category, then file).
            order = np.argsort(start, kind="stable") if (ranks == ranks[0]).all() else np.lexsort((ranks, start))
        elif len(ranks) and not (ranks == ranks[0]).all() and not (np.diff(ranks)[np.diff(start) == 0] >= 0).all():
            order = np.lexsort((ranks, start))
        out: dict[str, np.ndarray | pd.Categorical | pd.Series] = {
            "name": _categorical(col["name"], names),
            "start_ns": start,
            "end_ns": start + dur,
            "dur_ns": dur,
        }
        for c in _ORDER[table]:
            if c in out:
                continue
            v = col[c]
            if c in ("kind", "api", "side"):
                out[c] = _categorical(v, _KINDS)
            else:
                out[c] = v
        del col
        for c in list(out):
            v = out[c]
            if order is not None:
                v = v.take(order)  # a text column's codes, not its texts, are reordered
            if c in _TEXT_COLUMNS:
                # Explicitly object dtype: pandas >= 3 would infer its string dtype and turn
                # the None of "not recorded" into NaN.
                v = pd.Series(texts[v], dtype=object)
            out[c] = v
            del v
        # copy=False: the columns are fresh arrays nobody else holds; copying them into
        # consolidated blocks would hold each table twice at the peak.
        return pd.DataFrame(out, copy=False)


class _Chunk(NamedTuple):
    names: np.ndarray  # name codes
    ts: np.ndarray | None  # float microseconds; None for decimals (the exact decode)


def _codes(seen: dict, keys: list, learn: Callable[[list], None], dtype=np.int32) -> np.ndarray:
    """What ``seen`` holds for each key, after ``learn`` has added the keys it lacks."""
    try:
        return np.fromiter(map(seen.__getitem__, keys), dtype=dtype, count=len(keys))
    except KeyError:
        learn(keys)
        return np.fromiter(map(seen.__getitem__, keys), dtype=dtype, count=len(keys))


class _Texts:
    """Distinct texts as int32 codes, each text made once; code 0 is "not recorded" (None)."""

    def __init__(self, absent: tuple) -> None:
        self._code = dict.fromkeys(absent, 0)
        self._values: list[str | None] = [None]

    def codes(self, keys: list, make) -> np.ndarray:
        """The code of each key, the text of a key not seen before being ``make(key)``."""

        def learn(keys: list) -> None:
            for key in dict.fromkeys(keys):
                if key not in self._code:
                    self._code[key] = len(self._values)
                    self._values.append(make(key))

        return _codes(self._code, keys, learn)

    def array(self) -> np.ndarray:
        out = np.empty(len(self._values), dtype=object)
        out[:] = self._values
        return out


def _needs_exact(groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], ts: np.ndarray | None) -> bool:
    if ts is None:
        return False
    for rows, _, _ in groups.values():
        arr = ts[rows]
        if arr.max(initial=0.0) >= _EXACT_LIMIT_US and np.any(arr != np.floor(arr)):
            return True
    return False


def _ns(ts: list) -> np.ndarray:
    """Microsecond timestamps (float or Decimal) -> int64 nanoseconds, exact to the ns."""
    if ts and not isinstance(ts[0], float):
        # Decimals from the exact decode path.
        return np.array([int((t * 1000).to_integral_value()) for t in ts], dtype=np.int64)
    return _ns_float(np.asarray(ts, dtype=np.float64))


def _ns_float(arr: np.ndarray) -> np.ndarray:
    if not (np.abs(arr) < _MAX_US).all():
        raise ValueError("a timestamp is not a number of microseconds that int64 nanoseconds can hold")
    whole = np.floor(arr)
    # Split whole and fractional microseconds so the integer part never goes
    # through a float multiply (1.7e15 us * 1000 is not exact in float64).
    return whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000).astype(np.int64)


def _dur_ns(dur_us: np.ndarray) -> np.ndarray:
    if not (np.abs(dur_us) < _MAX_US).all():
        raise ValueError("a duration is not a number of microseconds that int64 nanoseconds can hold")
    return np.maximum(np.rint(dur_us * 1000).astype(np.int64), 0)


def _ints(values: list) -> np.ndarray:
    """An id column as int64; -1 where absent."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (ValueError, TypeError):
        # Rare: ids written as strings ("stream 7", ROCm streams); keep the digits.
        return np.array([_thread_id(v) for v in values], dtype=np.int64)


def _thread_id(v) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        digits = "".join(ch for ch in v if ch.isdigit())
        return int(digits) if digits else -1
    return -1


_NO_DIMS = (-1, -1, -1, -1)


def _launch_dims(text: bytes) -> tuple[int, int, int, int]:
    """(x, y, z, x*y*z) of a launch's ``[x, y, z]`` (missing axes are 1); all -1 when malformed."""
    if not text:
        return _NO_DIMS
    try:
        dims = json.loads(text)
    except ValueError:
        return _NO_DIMS
    if (
        not isinstance(dims, list)
        or not 1 <= len(dims) <= 3
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d < 2**31 for d in dims)
    ):
        return _NO_DIMS
    x, y, z = (list(dims) + [1, 1])[:3]
    return (x, y, z, x * y * z) if x * y * z < 2**62 else _NO_DIMS


class _Growing:
    """A numpy column that chunks are appended to, its capacity doubling as it fills.

    Rather than a list of per-chunk arrays joined at the end: the join would hold each
    column twice, and the per-chunk arrays, interleaved in the heap with every other
    column's, leave holes the allocator cannot give back, so the process would keep
    both at its peak. A large capacity is its own mapping, returned whole when it
    grows, and the pages past the end that are never written are never resident.
    """

    __slots__ = ("data", "n")

    def __init__(self, dtype) -> None:
        self.data = np.empty(1 << 12, dtype=dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.data):
            grown = np.empty(max(need, 2 * len(self.data)), dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n : need] = values
        self.n = need

    def array(self) -> np.ndarray:
        return self.data[: self.n]


def _categorical(codes: np.ndarray, vocab) -> pd.Categorical:
    """Codes into ``vocab`` as a categorical whose categories are the values present, sorted:
    what ``astype("category")`` gives on the strings themselves, without building them."""
    # A count per code rather than np.unique: no hash table or sort over a million rows.
    present = np.flatnonzero(np.bincount(codes, minlength=len(vocab)))
    values = [vocab[i] for i in present.tolist()]
    order = sorted(range(len(values)), key=values.__getitem__)
    remap = np.full(len(vocab), -1, dtype=np.int32)
    remap[present[order]] = np.arange(len(order), dtype=np.int32)
    categories = pd.Index([values[i] for i in order])
    return pd.Categorical.from_codes(remap[codes], categories=categories)


def _empty(columns: dict[str, str]) -> Callable[[], pd.DataFrame]:
    return lambda: pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


_TEXT_COLUMNS = ("kernel", "input_dims", "input_types", "concrete_inputs")
# A kernel's launch dimensions, one column per axis (-1: not recorded).
_LAUNCH = {f"{what}_{axis}": "int32" for what in ("grid", "block") for axis in "xyz"}
_TIME = {"name": "category", "start_ns": "int64", "end_ns": "int64", "dur_ns": "int64"}
_COLUMNS = {
    "kernels": {
        **_TIME,
        "kind": "category",
        "device": "int64",
        "stream": "int64",
        "correlation": "int64",
        "external_id": "int64",
        "ctas": "int64",
        **_LAUNCH,
        "bytes": "int64",
    },
    "runtime": {
        **_TIME,
        "api": "category",
        "pid": "int64",
        "tid": "int64",
        "correlation": "int64",
        "external_id": "int64",
        "kernel": "object",
    },
    "cpu_ops": {
        **_TIME,
        "pid": "int64",
        "tid": "int64",
        "external_id": "int64",
        "input_dims": "object",
        "input_types": "object",
        "concrete_inputs": "object",
    },
    "annotations": {
        **_TIME,
        "side": "category",
        "pid": "int64",
        "tid": "int64",
        "device": "int64",
        "stream": "int64",
        "external_id": "int64",
    },
    "python": {**_TIME, "pid": "int64", "tid": "int64"},
}
# The column order of a table with rows (an empty table has _COLUMNS' order).
_ORDER = {
    "kernels": [*_TIME, "kind", "device", "stream", "correlation", "external_id", "ctas", *_LAUNCH, "bytes"],
    "runtime": [*_TIME, "pid", "tid", "api", "correlation", "external_id", "kernel"],
    "cpu_ops": [*_TIME, "pid", "tid", "external_id", "input_dims", "input_types", "concrete_inputs"],
    "annotations": [*_TIME, "pid", "tid", "side", "device", "stream", "external_id"],
    "python": [*_TIME, "pid", "tid"],
}
EMPTY = {t: _empty(c) for t, c in _COLUMNS.items()}
