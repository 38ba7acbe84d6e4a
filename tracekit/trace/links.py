"""The links between tables: kernel -> launch -> op.

* kernel -> runtime call: the shared ``correlation`` id. One ``cudaGraphLaunch`` /
  ``hipGraphLaunch`` correlation is shared by every kernel the graph replays;
  those kernels are flagged ``graph`` and get no op, because the op that
  launched the replay is not the op whose shapes describe each kernel.
* runtime call -> cpu op: the ``External id`` where the trace has one and the op
  it names really encloses the call on the same thread (2022-era traces reuse the
  correlation as External id, so an unchecked match could land on an unrelated
  op); otherwise the innermost op that encloses the call in time on its thread.
"""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

from tracekit.trace.model import Trace

GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")


def link(trace: Trace) -> None:
    rt = trace.runtime
    rt["op"] = _runtime_to_op(rt, trace.cpu_ops)
    k = trace.kernels
    launch = (
        _launch_of(
            rt["correlation"].to_numpy(),
            rt["start_ns"].to_numpy(),
            k["correlation"].to_numpy(),
            k["start_ns"].to_numpy(),
        )
        if len(k)
        else np.empty(0, np.int64)
    )
    k["launch"] = launch
    if len(k):
        graph_rows = np.flatnonzero(_ends_with(rt["name"], GRAPH_LAUNCHES))
        graph = np.isin(launch, graph_rows) & (launch >= 0)
        op = np.where(launch >= 0, rt["op"].to_numpy()[np.maximum(launch, 0)] if len(rt) else -1, -1)
        k["graph"] = graph
        k["op"] = np.where(graph, -1, op).astype(np.int64)
    else:
        k["graph"] = pd.Series(dtype=bool)
        k["op"] = pd.Series(dtype="int64")


def _ends_with(names: pd.Series, suffixes: tuple[str, ...]) -> np.ndarray:
    """Which rows' names end with one of ``suffixes``: tested once per distinct name when
    the column is categorical (the reader's always is), not once per row."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        per_name = np.array([str(c).endswith(suffixes) for c in names.cat.categories] + [False], dtype=bool)
        return per_name[names.cat.codes.to_numpy()]  # code -1 (missing) picks the final False
    return names.astype(str).str.endswith(suffixes).to_numpy()


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row in ``keys`` holding each wanted value (first such row), -1 where absent or negative."""
    if len(keys) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.searchsorted(sorted_keys, wanted)
    pos = np.minimum(pos, len(keys) - 1)
    found = (sorted_keys[pos] == wanted) & (wanted >= 0)
    return np.where(found, order[pos], -1).astype(np.int64)


def _launch_of(corr: np.ndarray, issued: np.ndarray, wanted: np.ndarray, started: np.ndarray) -> np.ndarray:
    """The runtime row that launched each kernel. Correlation ids are unique within one
    profiled process, but a trace stitched from several sessions (or grown by repeating its
    events) reuses them: a kernel then belongs to the latest call with its id issued before it
    started (a kernel never starts before its launch), else to the first such call."""
    valid = np.sort(corr[corr >= 0])  # compared with the neighbour: see ``_distinct``
    if not (valid[1:] == valid[:-1]).any():
        return _lookup(corr, wanted)
    n_rt = len(corr)
    # One sort of calls and kernels together by (id, time, calls first): each kernel's launch
    # is the last call before it in its id's run.
    ids = np.concatenate([corr, wanted])
    times = np.concatenate([issued, started])
    is_call = np.r_[np.ones(n_rt, bool), np.zeros(len(wanted), bool)]
    o = np.lexsort((~is_call, times, ids))
    row = np.where(is_call[o], o, -1)
    last = np.maximum.accumulate(np.where(row >= 0, np.arange(len(o)), -1))
    same = (last >= 0) & (ids[o][np.maximum(last, 0)] == ids[o])
    before = np.where(same, o[np.maximum(last, 0)], -1)
    out = np.full(len(wanted), -1, dtype=np.int64)
    kern = ~is_call[o]
    out[o[kern] - n_rt] = before[kern]
    # A kernel recorded as starting before every call of its id (clock skew): the first call.
    first = _lookup(corr, wanted)
    out = np.where(out < 0, first, out)
    return np.where(wanted >= 0, out, -1).astype(np.int64)


def _runtime_to_op(rt: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    n = len(rt)
    if n == 0 or len(ops) == 0:
        return np.full(n, -1, dtype=np.int64)
    op_start = ops["start_ns"].to_numpy()
    op_end = ops["end_ns"].to_numpy()
    op_tid = ops["tid"].to_numpy()
    r_start = rt["start_ns"].to_numpy()
    r_end = rt["end_ns"].to_numpy()
    r_tid = rt["tid"].to_numpy()

    by_ext = _lookup(ops["external_id"].to_numpy(), rt["external_id"].to_numpy())
    # The ops' nesting is needed here and again by the analysis (the op that prices each
    # kernel): found once, per (process, thread), and reused where a thread id names one process.
    keys = ops["pid"].to_numpy() * (1 << 32) + op_tid
    _, first = np.unique(keys, return_index=True)  # one row per (process, thread)
    one_process = len(first) == len(np.unique(op_tid[first]))
    nesting = _nesting(ops) if one_process else None
    j = np.maximum(by_ext, 0)
    valid = (by_ext >= 0) & (op_tid[j] == r_tid) & (op_start[j] <= r_start) & (op_end[j] >= r_end)
    result = np.where(valid, by_ext, -1).astype(np.int64)
    todo = np.flatnonzero(~valid)
    if len(todo):
        result[todo] = enclosing(op_start, op_end, op_tid, r_start[todo], r_end[todo], r_tid[todo], nesting)
    return result


def enclosing(op_start, op_end, op_tid, q_start, q_end, q_tid, nesting: tuple | None = None) -> np.ndarray:
    """Innermost interval (row) on the same thread that contains each query interval, or -1.
    ``nesting``: the intervals' (parents, order) by nesting on their threads (``_nesting``),
    when known already and each thread id names one process."""
    out = np.full(len(q_start), -1, dtype=np.int64)
    if nesting is not None:
        parents, nest_order = nesting
        position = np.full(len(op_start), -1, dtype=np.int64)
        tid_in_order = op_tid[nest_order]
    for tid in _distinct(q_tid).tolist():
        if nesting is None:
            rows = np.flatnonzero(op_tid == tid)
            # Ops sorted by start (longer first on ties, so a parent precedes its child).
            order = rows[np.lexsort((-(op_end[rows] - op_start[rows]), op_start[rows]))]
        else:
            # The same order, already sorted thread by thread.
            order = nest_order[tid_in_order == tid]
        if not len(order):
            continue
        starts = op_start[order]
        ends = op_end[order]
        qs = np.flatnonzero(q_tid == tid)
        cand = np.searchsorted(starts, q_start[qs], side="right") - 1
        # Most queries sit in the latest-starting op itself: settled in one vectorised step.
        direct = (cand >= 0) & (ends[np.maximum(cand, 0)] >= q_end[qs])
        out[qs[direct]] = order[cand[direct]]
        walk = np.flatnonzero((cand >= 0) & ~direct)
        if not len(walk):
            continue
        # The others walk up the nesting from there to the first op that still encloses,
        # all of them a level at a time (as many rounds as the nesting is deep).
        if nesting is None:
            parent = _parents(starts, ends)
        else:
            # The same nesting in this thread's sorted order: parent rows -> positions.
            position[order] = np.arange(len(order))
            up = parents[order]
            parent = np.where(up >= 0, position[np.maximum(up, 0)], -1)
        at = cand[walk]
        q_ends = q_end[qs[walk]]
        live = np.arange(len(at))
        while len(live):
            at[live] = parent[at[live]]
            live = live[at[live] >= 0]
            live = live[ends[at[live]] < q_ends[live]]
        hit = at >= 0
        out[qs[walk[hit]]] = order[at[hit]]
    return out


def _parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Parent index (in the same sorted order) of each interval by nesting; -1 for roots.

    The intervals come sorted by start, longer first on ties. An interval that merely
    touches the previous one (end == next start, common with microsecond timestamps)
    is a sibling, not a parent.

    The answer is the stack walk's (``_parents_walk``). Where no interval ends strictly
    inside a later one (no partial overlap: the usual case), that walk's stack only
    ever holds ends that shrink towards its top, so each interval's parent is simply
    the nearest earlier interval whose end is at least its own, which numpy finds
    (``_nearest_at_least``). A thread with partial overlaps keeps the walk itself.
    """
    if len(starts) == 0:
        return np.empty(0, dtype=np.int64)
    found = _nearest_at_least(ends)
    if found is None:
        return _parents_walk(starts, ends)
    parent, between = found
    # No partial overlap <=> every interval between each one and its parent (all of
    # them end before it does) ends by its start; by induction that covers every
    # earlier interval too.
    if (between <= starts).all():
        return parent
    return _parents_walk(starts, ends)


def _parents_walk(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``_parents`` by the stack walk itself (the reference, and the answer on partial overlaps)."""
    parent = [-1] * len(starts)
    stack: list[int] = []
    ends_list = ends.tolist()
    push, pop = stack.append, stack.pop
    for i, (s, e) in enumerate(zip(starts.tolist(), ends_list)):
        while stack and ends_list[stack[-1]] <= s and ends_list[stack[-1]] < e:
            pop()
        if stack and ends_list[stack[-1]] >= e:
            parent[i] = stack[-1]
        push(i)
    return np.array(parent, dtype=np.int64)


_MAX_ROUNDS = 200


def _nearest_at_least(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(for each i the largest j < i with values[j] >= values[i], else -1; the largest
    value strictly between the two, else the minimum int64), or None after
    _MAX_ROUNDS rounds (a pathological order, left to the caller's exact walk).

    Pointer jumping: each pointer starts at the previous interval and, while the one
    it points at is smaller, moves to where that one points. Everything between that
    one and where it points is smaller still, so the skipped stretch's largest value
    is the one jumped from. In nested intervals the previous sibling points at the
    parent, so most pointers settle in a round or two.
    """
    n = len(values)
    low = np.iinfo(np.int64).min
    # ptr[-1] (index n) is the "none" sentinel -1, pointing at itself.
    ptr = np.append(np.arange(-1, n - 1, dtype=np.int64), -1)
    between = np.full(n, low, dtype=np.int64)
    # A value above everything before it has no such j: settled at once. Without this, a
    # thread's run of top-level ops (each ending after the last) would chase its pointers
    # back to the start in log2(n) rounds over every op.
    before = np.empty(n, dtype=np.int64)
    before[:1] = low
    np.maximum.accumulate(values[:-1], out=before[1:])
    root = values > before
    ptr[:n][root] = -1
    between[root] = before[root]
    active = np.flatnonzero(~root).astype(np.int64)
    for _ in range(_MAX_ROUNDS):
        target = ptr[active]
        ok = target >= 0
        smaller = np.zeros(len(active), dtype=bool)
        smaller[ok] = values[target[ok]] < values[active[ok]]
        active, target = active[smaller], target[smaller]
        if not len(active):
            return ptr[:n], between
        between[active] = np.maximum(between[active], values[target])
        ptr[active] = ptr[target]
    return None


# The nesting of each ops table, by the table object: linking and the analysis both need it.
# An entry goes when its table does; the tables are not changed in place after reading.
_NESTING: dict[int, tuple[weakref.ref, tuple[np.ndarray, np.ndarray]]] = {}


def op_parents(ops: pd.DataFrame) -> np.ndarray:
    """Row of each cpu op's enclosing op on its thread (time nesting), -1 for top-level ops.
    Computed once per table; the array is read-only."""
    return _nesting(ops)[0]


def _nesting(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(``op_parents``; the rows sorted by process and thread, then by start, longer first
    on ties, so that a parent precedes its child), computed once per table, read-only."""
    hit = _NESTING.get(id(ops))
    if hit is not None and hit[0]() is ops:
        return hit[1]
    out = _op_nesting(ops)
    for a in out:
        a.flags.writeable = False
    key = id(ops)
    _NESTING[key] = (weakref.ref(ops, lambda _ref: _NESTING.pop(key, None)), out)
    return out


def _op_nesting(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    out = np.full(len(ops), -1, dtype=np.int64)
    if not len(ops):
        return out, np.empty(0, dtype=np.int64)
    start = ops["start_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    keys = ops["pid"].to_numpy() * (1 << 32) + ops["tid"].to_numpy()
    order = _thread_time_order(keys, start, end)
    sorted_keys = keys[order]
    bounds = np.flatnonzero(np.diff(sorted_keys)) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)]):
        rows = order[lo:hi]
        parent = _parents(start[rows], end[rows])
        out[rows] = np.where(parent >= 0, rows[np.maximum(parent, 0)], -1)
    return out, order


def _thread_time_order(keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((-(end - start), start, keys))``: rows by thread, then start, longer first,
    then row order, in about a third of its time on the reader's tables.

    Those come sorted by start already, usually with no two equal starts out of that order, so
    the time order is mostly the rows themselves; and a run has few threads, whose codes sort
    as 16-bit integers, which numpy's stable sort orders by radix in one linear pass."""
    dur = end - start
    by_time = None
    if len(start) > 1:
        tie = start[1:] == start[:-1]
        if not (start[1:] >= start[:-1]).all() or (dur[1:][tie] > dur[:-1][tie]).any():
            by_time = np.lexsort((-dur, start))
    k = keys if by_time is None else keys[by_time]
    threads = _distinct(k)
    codes = np.searchsorted(threads, k)
    if len(threads) <= np.iinfo(np.int16).max:
        codes = codes.astype(np.int16)
    order = np.argsort(codes, kind="stable")
    return order if by_time is None else by_time[order]


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by a sort: numpy 2's hash-based unique takes 10-30x as long on the
    10^5-10^6 ids or thread ids of a large trace, whether they are few or all distinct."""
    s = np.sort(values)
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s
