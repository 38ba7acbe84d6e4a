"""What the host thread was doing: its synchronising calls, launches and other recorded work.

Takes a trace and one CPU thread and gives, for ``idle`` (the GPU-idle attribution), the
what-if projection and the timeline: ``Coverage``, the time the thread spent in syncs, in
launch calls and in any recorded activity over any interval, in O(log n); ``HostThread``,
which names the call, op and Python frames it was in at a moment. The patterns that tell a
synchronising call (``SYNC_CALL``, ``SYNC_OPS``) and a launch (``LAUNCH_CALL``) live here,
with the interval arithmetic they need (``name_mask``, ``union_intervals``).
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.trace.model import Trace

# Runtime calls that block the host until the device catches up (synchronous copies and frees too).
SYNC_CALL = re.compile(
    r"synchronize|^(cuda|hip|cu)memcpy(?!.*async)|^(cuda|hip|cu)memset(?!.*async)|memcpywithstream|"
    r"^(cuda|hip)free(host)?$|^cumemfree",
    re.IGNORECASE,
)
# Runtime calls that issue device work without waiting for it.
LAUNCH_CALL = re.compile(r"launch|memcpy.*async|memset.*async", re.IGNORECASE)
# Ops that read a device value back to the host, so wait for the device.
SYNC_OPS = frozenset(
    "aten::" + n
    for n in (
        "item",
        "_local_scalar_dense",
        "nonzero",
        "is_nonzero",
        "equal",
        "allclose",
        "unique",
        "_unique2",
        "masked_select",
        "tolist",
    )
)
_STDLIB = frozenset(sys.stdlib_module_names)


class Coverage:
    """Merged intervals of one thread's activity, with O(log n) "time covered in [a, b]"."""

    def __init__(self, sets: dict[str, tuple[np.ndarray, np.ndarray]]):
        self._sets = {k: _prefix(*union_intervals(s, e)) for k, (s, e) in sets.items()}

    @classmethod
    def of_thread(cls, trace: Trace, tid: int, span: tuple[int, int] | None = None) -> Coverage:
        """The thread's coverage; with ``span`` (start, end), only of the activity overlapping it,
        which is all that "time covered in [a, b]" needs for a and b inside it."""
        rt, ops, py = trace.runtime, trace.cpu_ops, trace.python
        # Row numbers and arrays, not row copies of the tables (the Python frames run to 10^5+).
        r, o, p = (_rows_on(t, tid, span) for t in (rt, ops, py))
        is_sync = name_mask(rt["name"], SYNC_CALL)[r]
        is_launch = name_mask(rt["name"], LAUNCH_CALL)[r] & ~is_sync
        sync_ops = categorical.isin(ops["name"], SYNC_OPS)[o] if len(ops) else np.zeros(0, dtype=bool)
        s_rt, e_rt = rt["start_ns"].to_numpy()[r], rt["end_ns"].to_numpy()[r]
        s_op, e_op = ops["start_ns"].to_numpy()[o], ops["end_ns"].to_numpy()[o]
        sync = (np.concatenate([s_rt[is_sync], s_op[sync_ops]]), np.concatenate([e_rt[is_sync], e_op[sync_ops]]))
        launch = (np.concatenate([sync[0], s_rt[is_launch]]), np.concatenate([sync[1], e_rt[is_launch]]))
        # Sync and launch intervals are runtime calls and ops already: busy needs no copy of them.
        busy = (
            np.concatenate([s_rt, s_op, py["start_ns"].to_numpy()[p]]),
            np.concatenate([e_rt, e_op, py["end_ns"].to_numpy()[p]]),
        )
        return cls({"sync": sync, "launch": launch, "busy": busy})

    def _covered(self, key: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        starts, ends, before = self._sets[key]
        return np.maximum(_cum(starts, ends, before, b) - _cum(starts, ends, before, a), 0)

    def sync(self, a, b):
        """Synchronising calls or ops."""
        return self._covered("sync", a, b)

    def launch(self, a, b):
        """Sync or launch calls."""
        return self._covered("launch", a, b)

    def busy(self, a, b):
        """Any recorded activity (runtime calls, ops, Python frames)."""
        return self._covered("busy", a, b)


def _rows_on(table: pd.DataFrame, tid: int, span: tuple[int, int] | None = None) -> np.ndarray:
    """The rows of ``tid``, overlapping ``span`` when given."""
    if not len(table):
        return np.zeros(0, dtype=np.int64)
    rows = table["tid"].to_numpy() == tid
    if span is not None:
        rows &= (table["start_ns"].to_numpy() < span[1]) & (table["end_ns"].to_numpy() > span[0])
    return np.flatnonzero(rows)


def name_mask(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Regex test once per distinct name."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    return categorical.mask(pd.Series(names), lambda n: pattern.search(n) is not None)


def union_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, merged intervals (starts, ends) of possibly overlapping ones."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if not len(starts):
        return starts, ends
    if (starts[1:] >= starts[:-1]).all():  # one table's rows come sorted already
        s, e = starts, ends
    else:
        o = np.argsort(starts, kind="stable")
        s, e = starts[o], ends[o]
    run = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(run[idx[1:] - 1], run[-1])


def _prefix(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged intervals plus the time covered before each one starts."""
    return (
        starts,
        ends,
        np.concatenate([[0], np.cumsum(ends - starts)[:-1]]).astype(np.int64) if len(starts) else np.zeros(0, np.int64),
    )


def _cum(starts: np.ndarray, ends: np.ndarray, before: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time covered by the merged intervals up to each ``t``."""
    t = np.asarray(t, dtype=np.int64)
    if not len(starts):
        return np.zeros(t.shape, dtype=np.int64)
    i = np.searchsorted(starts, t, side="right") - 1
    j = np.maximum(i, 0)
    inside = np.clip(np.minimum(t, ends[j]) - starts[j], 0, None)
    return np.where(i >= 0, before[j] + inside, 0)


class HostThread:
    """One host thread's calls, ops and Python frames, for naming what it was doing."""

    def __init__(self, trace: Trace, tid: int):
        self.trace = trace
        rt, ops, py = trace.runtime, trace.cpu_ops, trace.python
        mine = np.flatnonzero(rt["tid"].to_numpy() == tid) if len(rt) else np.zeros(0, np.int64)
        names = rt["name"].iloc[mine] if len(rt) else pd.Series(dtype=str)
        rows = mine[name_mask(names, SYNC_CALL)] if len(mine) else mine
        op_rows = np.flatnonzero(ops["tid"].to_numpy() == tid) if len(ops) else np.zeros(0, np.int64)
        sync_ops = op_rows[categorical.isin(ops["name"], SYNC_OPS)[op_rows]] if len(op_rows) else op_rows
        # Synchronising calls (runtime rows) and ops (op rows): start, end, kind, row.
        sources = [(rt, rows, True), (ops, sync_ops, False)]
        self._sync = [
            (t["start_ns"].to_numpy()[r], t["end_ns"].to_numpy()[r], is_rt, r) for t, r, is_rt in sources if len(r)
        ]
        self._rt_names = categorical.Lookup(rt["name"]) if len(rt) else None
        self._rt_ops = rt["op"].to_numpy() if len(rt) and "op" in rt else None
        self._op_names = categorical.Lookup(ops["name"]) if len(ops) else None
        self._op_start: np.ndarray = ops["start_ns"].to_numpy() if len(ops) else np.zeros(0, np.int64)
        self._op_end: np.ndarray = ops["end_ns"].to_numpy() if len(ops) else np.zeros(0, np.int64)
        self._ops = _Nest(ops, op_rows)
        self._py_names = categorical.Lookup(py["name"]) if len(py) else None
        self._py = _Nest(py, np.flatnonzero(py["tid"].to_numpy() == tid) if len(py) else np.zeros(0, np.int64))
        # Per Python frame name (by its code): -1 not judged yet, 1 a library frame, 0 not; the
        # short names of the others.
        self._library = np.full(self._py_names.size if self._py_names is not None else 0, -1, dtype=np.int8)
        self._frame: dict[int, str] = {}

    def blocking_call(self, a: int, b: int) -> tuple[str | None, int | None, int]:
        """The synchronising call (or op) overlapping [a, b] the most: name, op row, midpoint."""
        best: tuple[int, str | None, int | None, int] = (0, None, None, (a + b) // 2)
        for s, e, is_rt, rows in self._sync:
            ov = np.minimum(e, b) - np.maximum(s, a)
            h = int(np.argmax(ov))
            if ov[h] <= best[0]:
                continue
            r, mid = int(rows[h]), (int(s[h]) + int(e[h])) // 2
            if is_rt:
                op = int(self._rt_ops[r]) if self._rt_ops is not None else -1
                name = self._rt_names[r] if self._rt_names is not None else None
                best = (int(ov[h]), name, op if op >= 0 else None, mid)
            else:
                best = (int(ov[h]), None, r, mid)
        return best[1], best[2], best[3]

    def ops_at(self, t: np.ndarray) -> np.ndarray:
        """``op_at`` of each time: op rows, -1 for none."""
        return self._ops.innermost(np.asarray(t, dtype=np.int64))

    def op_codes(self, rows: np.ndarray, keep: int = 4) -> np.ndarray:
        """For each op row, the name codes of the op and the ops enclosing it (starting by its
        start, ending at or after its end), innermost first, up to ``keep``; -1 pads."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(rows) or self._op_names is None:  # no rows, or no ops for them to be
            return np.full((len(rows), keep), -1, dtype=np.int64)
        pos = self._ops.position(rows)  # -1 for an op of another thread
        mine = pos >= 0
        # One of this thread's is first among the ops before it in the start order; another
        # thread's op is put before this thread's ops enclosing it.
        frm = np.where(mine, pos + 1, np.searchsorted(self._ops.start, self._op_start[rows], side="right"))
        chain = self._ops.walk(frm, self._op_end[rows], keep)
        other = np.flatnonzero(~mine)
        chain[other, 1:] = chain[other, :-1]
        chain[other, 0] = rows[other]
        return np.where(chain >= 0, self._op_names.codes(np.maximum(chain, 0)), -1)

    def op_names(self, codes: np.ndarray) -> list[str]:
        """Names of one ``op_codes`` row, outermost first."""
        codes = codes[codes >= 0][::-1]
        return self._op_names.names_of(codes) if len(codes) and self._op_names is not None else []

    def frames_at(self, t: int, keep: int = 3) -> list[str]:
        """The innermost framework/user Python frames around ``t``, outermost first: library
        frames (torch, the standard library, builtins) are skipped."""
        return self.frame_names(self.frame_codes(np.array([t]), keep)[0])

    def frame_codes(self, t: np.ndarray, keep: int = 3) -> np.ndarray:
        """For each time, the name codes of the innermost ``keep`` framework/user Python frames
        around it, innermost first; -1 pads."""
        t = np.asarray(t, dtype=np.int64)
        py = self._py
        if not len(py.rows) or self._py_names is None:
            return np.full((len(t), keep), -1, dtype=np.int64)
        chain = py.walk(np.searchsorted(py.start, t, side="right"), t, keep, skip=self._library_frame)
        return np.where(chain >= 0, self._py_names.codes(np.maximum(chain, 0)), -1)

    def frame_names(self, codes: np.ndarray) -> list[str]:
        """Short names of one ``frame_codes`` row, outermost first."""
        return [self._frame[c] for c in codes[codes >= 0][::-1].tolist()]

    def _library_frame(self, rows: np.ndarray) -> np.ndarray:
        """Whether each Python frame row is a library one (each name judged once)."""
        names = self._py_names
        if names is None:  # no Python frames, so never asked (``frame_codes`` returns first)
            return np.zeros(len(rows), dtype=bool)
        codes = names.codes(rows)
        new = np.unique(codes[self._library[codes] < 0])
        for code, name in zip(new.tolist(), names.names_of(new)):
            self._library[code] = not isinstance(name, str) or _is_library_frame(name)
            if not self._library[code]:
                self._frame[code] = _short_frame(name)
        return self._library[codes] == 1


class _Nest:
    """Intervals of one thread (its ops, or its Python frames), sorted by start, outer first:
    which enclose a time or an interval, innermost first. Every idle gap of a serving trace asks
    (tens of thousands of queries, over up to hundreds of thousands of frames), and a cut or
    skewed trace need not nest them properly (a child ending a nanosecond after its parent); so
    a query is answered for a whole array at once from a sparse table of the ends: the last
    interval before a position that ends at or after a time, in O(log n)."""

    def __init__(self, table: pd.DataFrame, rows: np.ndarray):
        if len(rows):
            s, e = table["start_ns"].to_numpy()[rows], table["end_ns"].to_numpy()[rows]
            # Outer before inner at equal starts. The reader's tables come sorted by start,
            # usually outer first already: checked in two vector passes, sorted only if not.
            ordered = (np.diff(s) > 0) | ((np.diff(s) == 0) & (np.diff(e - s) <= 0))
            if not ordered.all():
                o = np.lexsort((-(e - s), s))
                rows, s, e = rows[o], s[o], e[o]
            self.rows, self.start, self.end = rows, s, e
        else:
            self.rows = self.start = self.end = np.zeros(0, np.int64)
        self._levels: list[np.ndarray] | None = None  # built on the first query
        self._order: np.ndarray | None = None
        self._up: np.ndarray | None = None  # _link's answers, -2 until asked

    def _table(self) -> list[np.ndarray]:
        """``levels[p][k]``: the largest end (as a rank) of intervals k .. k + 2^p - 1."""
        if self._levels is None:
            # Ends as ranks among the sorted ends, int32: the table is log2(n) arrays of n.
            self._ends = np.sort(self.end)
            lv = [np.searchsorted(self._ends, self.end).astype(np.int32)]
            h = 1
            while 2 * h <= len(self.end):
                lv.append(np.maximum(lv[-1][:-h], lv[-1][h:]))
                h *= 2
            self._levels = lv
        return self._levels

    def before(self, pos: np.ndarray, t: np.ndarray) -> np.ndarray:
        """For each query, the last position below ``pos`` whose interval ends at or after
        ``t`` (-1: none): blocks of ends all before t are skipped, the largest first."""
        x = np.array(pos, dtype=np.int64)
        t = np.asarray(t, dtype=np.int64)
        # Most often the interval just before answers (a call's own frame, a first child's
        # parent); only the rest search the table.
        rest = np.flatnonzero(x > 0)
        rest = rest[self.end[x[rest] - 1] < t[rest]]
        if not len(rest):
            return x - 1
        lv = self._table()
        need = np.searchsorted(self._ends, t[rest], side="left")  # end >= t  <=>  rank >= need
        y = x[rest]
        for p in range(len(lv) - 1, -1, -1):
            cand = y - (1 << p)
            ok = np.flatnonzero(cand >= 0)
            ok = ok[lv[p][cand[ok]] < need[ok]]
            y[ok] = cand[ok]
        x[rest] = y
        return x - 1

    def walk(self, pos: np.ndarray, t: np.ndarray, keep: int, skip=None) -> np.ndarray:
        """For each query, the rows of up to ``keep`` intervals below ``pos`` ending at or after
        ``t`` (at or after their starts), innermost (last) first, -1 padding; those ``skip``
        (rows -> bool) names are left out."""
        n = len(pos)
        got = np.full((n, keep), -1, dtype=np.int64)
        count = np.zeros(n, dtype=np.int64)
        if len(self.rows) and n:
            t = np.asarray(t, dtype=np.int64)
            k = self.before(pos, t)
            live = np.flatnonzero(k >= 0)
            while len(live):
                rows = self.rows[k[live]]
                kept = ~skip(rows) if skip is not None else np.ones(len(live), dtype=bool)
                q = live[kept]  # each query once: fancy assignment is safe
                got[q, count[q]] = rows[kept]
                count[q] += 1
                live = live[count[live] < keep]
                # The next encloser of t is at or below the link of this one (which ends at or
                # after its start, and t is no earlier): follow links past those ending before t.
                nxt = self._link(k[live])
                short = np.flatnonzero(nxt >= 0)
                short = short[self.end[nxt[short]] < t[live[short]]]
                while len(short):
                    nxt[short] = self._link(nxt[short])
                    short = short[nxt[short] >= 0]
                    short = short[self.end[nxt[short]] < t[live[short]]]
                k[live] = nxt
                live = live[nxt >= 0]
        return got

    def _link(self, k: np.ndarray) -> np.ndarray:
        """For each position, the last one before it whose interval ends at or after its start
        (-1: none), found once per position: every interval enclosing a time within the
        position's interval is that one or at or below it."""
        if self._up is None:
            self._up = np.full(len(self.rows), -2, dtype=np.int64)
        new = np.unique(k[self._up[k] == -2])
        if len(new):
            self._up[new] = self.before(new, self.start[new])
        return self._up[k]

    def innermost(self, t: np.ndarray) -> np.ndarray:
        """The row of the innermost interval enclosing each time, -1 for none."""
        if not len(self.rows):
            return np.full(len(t), -1, dtype=np.int64)
        k = self.before(np.searchsorted(self.start, t, side="right"), t)
        return np.where(k >= 0, self.rows[np.maximum(k, 0)], -1)

    def position(self, rows: np.ndarray) -> np.ndarray:
        """Where each table row stands in the start order, -1 for one not among these."""
        if not len(self.rows):
            return np.full(len(rows), -1, dtype=np.int64)
        if self._order is None:
            self._order = np.argsort(self.rows, kind="stable")
        at = np.minimum(np.searchsorted(self.rows[self._order], rows), len(self.rows) - 1)
        return np.where(self.rows[self._order[at]] == rows, self._order[at], -1)


def _is_library_frame(name: str) -> bool:
    if name.startswith("<"):
        return True
    path = name.split("(", 1)[0]
    top = path.lstrip("/").split("/", 1)[0].removesuffix(".py") if not path.startswith("/") else ""
    return top in _STDLIB or top in ("torch", "triton", "<string>") or path.startswith("/usr/lib/python")


def _short_frame(name: str) -> str:
    """``/x/sglang/srt/model_executor/cuda_graph_runner.py(276): f`` -> ``cuda_graph_runner.py(276): f``."""
    return name.rsplit("/", 1)[-1]
