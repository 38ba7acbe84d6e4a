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
    for n in ("item", "_local_scalar_dense", "nonzero", "is_nonzero", "equal", "allclose", "unique",
              "_unique2", "masked_select", "tolist")
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
        busy = (np.concatenate([s_rt, s_op, py["start_ns"].to_numpy()[p]]),
                np.concatenate([e_rt, e_op, py["end_ns"].to_numpy()[p]]))
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
    return starts, ends, np.concatenate([[0], np.cumsum(ends - starts)[:-1]]).astype(np.int64) if len(starts) \
        else np.zeros(0, np.int64)


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
        self._sync = [(rt, rows, True), (ops, sync_ops, False)]
        self._sync = [(t["start_ns"].to_numpy()[r], t["end_ns"].to_numpy()[r], is_rt, r)
                      for t, r, is_rt in self._sync if len(r)]
        self._rt_names = categorical.Lookup(rt["name"]) if len(rt) else None
        self._rt_ops = rt["op"].to_numpy() if len(rt) and "op" in rt else None
        self._op_names = categorical.Lookup(ops["name"]) if len(ops) else None
        self._op_start, self._op_end = (ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()) if len(ops) else (None, None)
        self._ops = _Nest(ops, op_rows)
        self._py_names = categorical.Lookup(py["name"]) if len(py) else None
        self._py = _Nest(py, np.flatnonzero(py["tid"].to_numpy() == tid) if len(py) else np.zeros(0, np.int64))
        self._frame: dict[int, str | None] = {}

    def blocking_call(self, a: int, b: int) -> tuple[str | None, int | None, int]:
        """The synchronising call (or op) overlapping [a, b] the most: name, op row, midpoint."""
        best = (0, None, None, (a + b) // 2)
        for s, e, is_rt, rows in self._sync:
            ov = np.minimum(e, b) - np.maximum(s, a)
            h = int(np.argmax(ov))
            if ov[h] <= best[0]:
                continue
            r, mid = int(rows[h]), (int(s[h]) + int(e[h])) // 2
            if is_rt:
                op = int(self._rt_ops[r]) if self._rt_ops is not None else -1
                best = (int(ov[h]), self._rt_names[r], op if op >= 0 else None, mid)
            else:
                best = (int(ov[h]), None, r, mid)
        return best[1], best[2], best[3]

    def op_at(self, t: int) -> int | None:
        """The row of the innermost op around ``t``, or None."""
        rows = self._ops.at(t)
        return rows[0] if rows else None

    def op_chain(self, row: int, keep: int = 4) -> list[str]:
        """Op names from the outermost (up to ``keep`` levels) to ``row``."""
        s, e = int(self._op_start[row]), int(self._op_end[row])
        around = self._ops.at(s, e)  # innermost first; ``row`` itself among them
        if row in around:
            around = around[around.index(row):]
        else:
            around = [row] + around
        return [self._op_names[r] for r in reversed(around[:keep])]

    def frames_at(self, t: int, keep: int = 3) -> list[str]:
        """The innermost framework/user Python frames around ``t``, outermost first: library
        frames (torch, the standard library, builtins) are skipped."""
        out = []
        for row in self._py.at(t):
            if row not in self._frame:
                name = self._py_names[row]
                self._frame[row] = None if _is_library_frame(name) else _short_frame(name)
            if self._frame[row] is not None:
                out.append(self._frame[row])
                if len(out) == keep:
                    break
        return list(reversed(out))


class _Nest:
    """Properly nested intervals of one thread: which enclose a time or an interval, innermost
    first. A scan per query (no parent table): the queries are a few hundred per trace, the
    Python frames of a thread can be hundreds of thousands."""

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

    def at(self, t: int, until: int | None = None) -> list[int]:
        """Rows enclosing [t, until] (``until`` defaults to t), innermost first."""
        if not len(self.rows):
            return []
        i = int(np.searchsorted(self.start, t, side="right"))
        hit = np.flatnonzero(self.end[:i] >= (t if until is None else until))
        return self.rows[hit[::-1]].tolist()


def _is_library_frame(name: str) -> bool:
    if name.startswith("<"):
        return True
    path = name.split("(", 1)[0]
    top = path.lstrip("/").split("/", 1)[0].removesuffix(".py") if not path.startswith("/") else ""
    return top in _STDLIB or top in ("torch", "triton", "<string>") or path.startswith("/usr/lib/python")


def _short_frame(name: str) -> str:
    """``/x/sglang/srt/model_executor/cuda_graph_runner.py(276): f`` -> ``cuda_graph_runner.py(276): f``."""
    return name.rsplit("/", 1)[-1]
