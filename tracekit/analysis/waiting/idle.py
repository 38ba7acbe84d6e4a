"""Why the GPU waits: every GPU-idle interval of a step, attributed to what the launching
host thread was doing then.

A step's window runs from its start to its end (``begin_ns``/``end_ns`` of the steps table).
Within it, every instant the step's work (all streams merged) is not running is idle: the
lead-in before its first kernel, the gaps between its kernels, and the tail after its last one
while the host is still in the step; except the stretches the device spent on other work:
work the trace did not record while the step's work waited on it (``steps.held``), or the next
step's work: those are the step's ``unrecorded_ns`` and ``next_ns``, out of its duration, so no
call is blamed for time the GPU spent on other work. The gaps together are the step's ``gpu_idle``, so duration = busy + idle and the causes
below sum to the idle time. Each gap is split by what the thread that launched the next kernel (for the
tail, the step's thread) did during it:

- ``sync``: blocked in a synchronising call: stream/device/event synchronize, a synchronous
  memcpy or memset (``cudaMemcpy``, ``hipMemcpyWithStream``), ``cudaFree``, or an op that
  synchronises (``aten::item``, ``_local_scalar_dense``, ``nonzero``, ...). While blocked the
  host can issue nothing, so sync wins over every other cause.
- ``launch``: the next kernel was not issued yet and the host was issuing launches slower
  than the GPU drains them: time in launch calls, every pause between launches shorter than
  ``LAUNCH_GAP_NS`` (the per-kernel cost of Python, framework and driver dispatch), and the
  first ``LAUNCH_LATENCY_NS`` after the issue (the driver starting the kernel).
- ``host``: the next kernel was not issued yet and for longer than ``LAUNCH_GAP_NS`` the
  host was in other recorded work: scheduling, input preparation, sampling, detokenising.
- ``wait``: the next kernel was issued and the host was not blocked, but the GPU had not
  started it: it waited on another stream or an event, or inside a graph replay, on the
  device's own kernel-to-kernel latency.
- ``unattributed``: the launching thread recorded nothing for longer than ``LAUNCH_GAP_NS``
  (untraced work, another process), or the kernel's launch is not in the trace.

``describe`` names an interval's call, op and the frames around it; ``top`` groups every
interval of a set of steps by that description and keeps the largest groups.

What the launching thread was doing (its coverage by syncs, launches and other work, and the
call, op and frames at a moment), with the patterns that tell a sync or a launch, is read in
``waiting.host``; this module splits the gaps by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.steps.segment import Segmentation
from tracekit.analysis.steps.work import NO_TIME
from tracekit.analysis.waiting.host import Coverage, HostThread
from tracekit.analysis.waiting.intervals import LAUNCH_LATENCY_NS, running_end
from tracekit.trace.model import Trace

SYNC, LAUNCH, HOST, WAIT, UNATTRIBUTED = "sync", "launch", "host", "wait", "unattributed"
CAUSES = (SYNC, LAUNCH, HOST, WAIT, UNATTRIBUTED)
# A host pause between two launches shorter than this is the cost of issuing the next kernel
# (eager PyTorch spends roughly 5-50 us of Python, dispatcher and driver per op); a longer one is
# other host work. Launch-bound decode is thousands of such short pauses.
LAUNCH_GAP_NS = 50_000
TOP = 10  # idle_top rows per phase
_BLOCK = 1 << 16  # gaps split at a time
# The gap columns _split reads; the last three only it reads, so they leave the gaps table.
_SPLIT_COLUMNS = ("start_ns", "end_ns", "issue_ns", "op_start_ns", "op_end_ns")
_SPLIT_ONLY = _SPLIT_COLUMNS[2:]


@dataclass
class IdleCauses:
    # Per step, ns by cause (columns in CAUSES order).
    by_step: np.ndarray
    # One row per idle gap: step, start_ns, end_ns, tid (launching thread), next (work row
    # of the kernel after the gap), and ns by cause (one column per cause).
    gaps: pd.DataFrame
    trace: Trace = field(repr=False)
    _threads: dict = field(default_factory=dict, repr=False)
    _cols: dict | None = field(default=None, repr=False)
    _work: dict | None = field(default=None, repr=False)
    _rt: tuple | None = field(default=None, repr=False)
    _sync_calls: dict = field(default_factory=dict, repr=False)  # sync call name -> code

    def step_causes(self, i: int) -> dict[str, float]:
        """{cause: ms} of step ``i``."""
        return {c: float(self.by_step[i, j]) / 1e6 for j, c in enumerate(CAUSES)}

    def phase_causes(self, weight: np.ndarray) -> dict[str, float]:
        """{cause: ms} over steps weighted by their share in a phase."""
        total = (
            (self.by_step * np.asarray(weight, dtype=float)[:, None]).sum(axis=0)
            if len(self.by_step)
            else np.zeros(len(CAUSES))
        )
        return {c: float(total[j]) / 1e6 for j, c in enumerate(CAUSES)}

    def top(self, weight: np.ndarray, phase_ms: float, work: pd.DataFrame, n: int = TOP) -> list[dict]:
        """The idle intervals of the steps with ``weight`` > 0, grouped by what they were
        (cause, call, op, stack), the ``n`` largest totals first. ``ms`` and ``share`` (of the
        phase's time) count a split mixed step's interval by the phase's part of that step."""
        g = self.gaps
        if not len(g):
            return []
        w = np.asarray(weight, dtype=float)[g["step"].to_numpy()]
        # Weighted as the phase's idle is: a split mixed step's interval counts by the
        # phase's part of that step, so no listed interval exceeds the phase's idle total.
        parts = g[list(CAUSES)].to_numpy() * w[:, None]
        # Every (gap, cause) cell, largest first: a group's total and count are all of its
        # intervals (thousands of short launch gaps outweigh one long wait), so none is left out.
        flat = np.flatnonzero(parts > 0)
        flat = flat[np.argsort(-parts.flat[flat], kind="stable")]
        if not len(flat):
            return []
        ns, gap, cause = parts.flat[flat], flat // len(CAUSES), flat % len(CAUSES)
        # Cells alike in thread, cause, call and name codes are alike in description: grouped by
        # the codes first (a serving trace has tens of thousands of cells and a few hundred
        # kinds), then described, and kinds whose descriptions coincide merged.
        keys = self._keys(gap, cause, work)
        kinds, first, kind_of = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        kind_of = kind_of.ravel()
        kind_ms = np.bincount(kind_of, weights=ns / 1e6, minlength=len(kinds))
        kind_n = np.bincount(kind_of, minlength=len(kinds))
        groups: dict[tuple, dict] = {}
        for k in np.argsort(first, kind="stable").tolist():  # kinds in order of their largest cell
            d = self._describe_key(kinds[k])
            key = (d["cause"], d["call"], d["op"], tuple(d["stack"]))
            row = groups.setdefault(key, {**d, "ms": 0.0, "count": 0})
            row["ms"] += float(kind_ms[k])
            row["count"] += int(kind_n[k])
        out = sorted(groups.values(), key=lambda r: -r["ms"])[:n]
        for r in out:
            r["share"] = float(r["ms"] / phase_ms) if phase_ms else None
        return out

    def describe_many(self, gaps, causes, work: pd.DataFrame) -> list[dict]:
        """``describe`` of each (gap, cause), looked up together."""
        keys = self._keys(np.asarray(gaps, dtype=np.int64), np.array([CAUSES.index(c) for c in causes]), work)
        kinds, kind_of = np.unique(keys, axis=0, return_inverse=True) if len(keys) else (keys, keys[:, 0])
        described = [{k: v for k, v in self._describe_key(row).items() if k != "cause"} for row in kinds]
        return [{**described[k], "stack": list(described[k]["stack"])} for k in kind_of.ravel().tolist()]

    # A description's key columns: the thread, the cause, the call (a runtime name code, or
    # past those a sync call's own code), then the frames' and the ops' name codes.
    _FRAMES, _OPS = 3, 4

    def _keys(self, gaps: np.ndarray, causes: np.ndarray, work: pd.DataFrame) -> np.ndarray:
        """One row of codes per (gap, cause index) that names what the launching thread was
        doing (see ``_describe_key``); the lookups are done a thread at a time."""
        if self._cols is None or self._work is None:
            self._cols = {c: self.gaps[c].to_numpy() for c in ("tid", "start_ns", "end_ns", "next")}
            self._work = {c: work[c].to_numpy() for c in ("launch", "op", "issue_ns")}  # work_table's columns
            rt = self.trace.runtime
            self._rt = (categorical.Lookup(rt["name"]), rt["start_ns"].to_numpy()) if len(rt) else None
        c, wk = self._cols, self._work
        gaps, causes = np.asarray(gaps, dtype=np.int64), np.asarray(causes, dtype=np.int64)
        tid, a, b, nxt = c["tid"][gaps], c["start_ns"][gaps], c["end_ns"][gaps], c["next"][gaps]
        n = len(gaps)
        call = np.full(n, -1, dtype=np.int64)
        op_row = np.full(n, -1, dtype=np.int64)
        t = (a + b) // 2
        sync = (causes == CAUSES.index(SYNC)) & (tid >= 0)
        for q in np.flatnonzero(sync).tolist():
            name, row, t[q] = self._thread(int(tid[q])).blocking_call(int(a[q]), int(b[q]))
            call[q] = -1 if name is None else self._call_code(name)
            op_row[q] = -1 if row is None else row
        issued = np.isin(causes, (CAUSES.index(LAUNCH), CAUSES.index(WAIT))) & (nxt >= 0) & (tid >= 0)
        q, k = np.flatnonzero(issued), nxt[issued]
        if len(q):
            launch = wk["launch"][k]
            if self._rt is not None:
                named = launch >= 0
                call[q[named]] = self._rt[0].codes(launch[named])
                t[q[named]] = self._rt[1][launch[named]]
            op_row[q] = np.maximum(wk["op"][k], -1)
        # The host's own time: before the next kernel's issue, if a kernel ends the gap.
        own = (tid >= 0) & ~sync & ~issued
        issue = np.where(nxt >= 0, wk["issue_ns"][np.maximum(nxt, 0)], 0)
        later = own & (nxt >= 0) & (a < issue)
        t[later] = (a[later] + np.minimum(b[later], issue[later])) // 2
        keys = np.full((n, 3 + self._FRAMES + self._OPS), -1, dtype=np.int64)
        keys[:, 0], keys[:, 1], keys[:, 2] = tid, causes, call
        for th_id in np.unique(tid[tid >= 0]).tolist():
            q = np.flatnonzero(tid == th_id)
            th = self._thread(th_id)
            mine = q[own[q]]
            op_row[mine] = th.ops_at(t[mine])
            keys[q, 3 : 3 + self._FRAMES] = th.frame_codes(t[q], self._FRAMES)
            with_op = q[op_row[q] >= 0]
            keys[with_op, 3 + self._FRAMES :] = th.op_codes(op_row[with_op], self._OPS)
        return keys

    def _call_code(self, name: str) -> int:
        """A sync call's name as a code, past the runtime's own."""
        base = self._rt[0].size if self._rt is not None else 0
        return base + self._sync_calls.setdefault(name, len(self._sync_calls))

    def _describe_key(self, key: np.ndarray) -> dict:
        """The cause, call, op and frames (outermost first, then the ops) a ``_keys`` row names."""
        tid, cause, call = int(key[0]), CAUSES[int(key[1])], int(key[2])
        if tid < 0:
            return {"cause": cause, "call": None, "op": None, "stack": []}
        rt = self._rt[0] if self._rt is not None else None
        base = rt.size if rt is not None else 0
        name = (
            None
            if call < 0
            else (
                str(rt.names_of([call])[0]) if rt is not None and call < base else list(self._sync_calls)[call - base]
            )
        )  # codes in order of first sight
        th = self._thread(tid)
        ops = th.op_names(key[3 + self._FRAMES :])
        return {
            "cause": cause,
            "call": name,
            "op": ops[-1] if ops else None,
            "stack": _dedupe(th.frame_names(key[3 : 3 + self._FRAMES]) + ops),
        }

    def _thread(self, tid: int) -> HostThread:
        if tid not in self._threads:
            self._threads[tid] = HostThread(self.trace, tid)
        return self._threads[tid]


def idle_causes(trace: Trace, seg: Segmentation) -> IdleCauses:
    """Idle time of every step by cause, and every idle gap with its parts."""
    steps, work = seg.steps, seg.work
    by_step = np.zeros((len(steps), len(CAUSES)), dtype=np.int64)
    gaps = _gaps(steps, work, trace.cpu_ops, seg.other_work) if len(steps) and seg.device_type == "gpu" else _no_gaps()
    if not len(gaps):
        return IdleCauses(by_step, gaps, trace)
    parts = np.zeros((len(gaps), len(CAUSES)), dtype=np.int64)
    cols = {c: gaps.pop(c).to_numpy() if c in _SPLIT_ONLY else gaps[c].to_numpy() for c in _SPLIT_COLUMNS}
    tids = gaps["tid"].to_numpy()
    # The gaps of each launching thread, in their order: one stable sort, split where the thread changes.
    by_tid = np.argsort(tids, kind="stable")
    for rows in np.split(by_tid, np.flatnonzero(np.diff(tids[by_tid])) + 1):
        tid = tids[rows[0]]
        # Coverage is only asked about inside the thread's gaps: what lies wholly outside
        # their span cancels out of every difference _split takes.
        span = (int(cols["start_ns"][rows].min()), int(cols["end_ns"][rows].max()))
        cov = Coverage.of_thread(trace, int(tid), span) if tid >= 0 else None
        # In blocks: _split's few dozen temporaries per gap would otherwise peak at several
        # times the gaps table on a serving trace (a gap between almost every two kernels).
        for lo in range(0, len(rows), _BLOCK):
            block = rows[lo : lo + _BLOCK]
            parts[block] = _split({c: v[block] for c, v in cols.items()}, cov)
    # Summed in int64, not bincount's float64: a step's causes must sum to its idle time to the
    # nanosecond, and float64 drops nanoseconds past 2^53 (an epoch-scale bogus duration).
    step_of = gaps["step"].to_numpy()
    for j, c in enumerate(CAUSES):
        gaps[c] = parts[:, j]
        np.add.at(by_step, (step_of, j), parts[:, j])
    return IdleCauses(by_step, gaps, trace)


def _no_gaps() -> pd.DataFrame:
    cols = ("step", "start_ns", "end_ns", "tid", "next", "issue_ns", "op_start_ns", "op_end_ns")
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})


def _gaps(
    steps: pd.DataFrame, work: pd.DataFrame, ops: pd.DataFrame, other: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Every idle gap of each step's window (``begin_ns`` to ``end_ns``): the lead-in before
    its first work, the gaps between its busy intervals and the tail after its last, with
    the work row that ends each gap (-1 for a tail). Work is clipped to the step's window,
    as for its busy time; the stretches of other work in it (``Segmentation.other_work``,
    clipped already: unrecorded work a kernel was held back for, ending where it starts, or the
    next step's work) are no gap either, so a step's gaps sum to its ``gpu_idle_ns`` exactly."""
    n = len(steps)
    step_all = work["step"].to_numpy()
    begin, finish = steps["begin_ns"].to_numpy(), steps["end_ns"].to_numpy()
    at_step = np.where((step_all >= 0) & (step_all < n), step_all, 0)
    s_all = np.clip(work["start_ns"].to_numpy(), begin[at_step], finish[at_step])
    e_all = np.clip(work["end_ns"].to_numpy(), begin[at_step], finish[at_step])
    inside = np.flatnonzero((step_all >= 0) & (step_all < n) & (e_all > s_all))
    step, start, end = step_all[inside], s_all[inside], e_all[inside]
    if other is not None and len(other):
        # A gap that ends where other work begins ends at its unit (the kernel held back: its
        # launch and the wait before it are that kernel's).
        step = np.concatenate([step, other["step"].to_numpy()])
        start = np.concatenate([start, other["start_ns"].to_numpy()])
        end = np.concatenate([end, other["end_ns"].to_numpy()])
        inside = np.concatenate([inside, other["row"].to_numpy()])
    o = np.lexsort((start, step))
    step, start, end, rows = step[o], start[o], end[o], inside[o]
    first = np.ones(len(step), dtype=bool)
    first[1:] = step[1:] != step[:-1]
    last = np.ones(len(step), dtype=bool)
    last[:-1] = first[1:]
    run_end = running_end(step, end)
    # Between busy intervals of one step.
    at = np.flatnonzero(~first[1:] & (start[1:] > run_end[:-1])) + 1
    # Lead-in: the step's window opens before its first work starts.
    heads = np.flatnonzero(first)
    heads = heads[start[heads] > begin[step[heads]]]
    # Tail: its last work ends before the window closes (the host still in the step).
    tails = np.flatnonzero(last)
    tails = tails[run_end[tails] < finish[step[tails]]]
    # A step none of whose work lies in its window is idle throughout.
    has = np.zeros(n, dtype=bool)
    has[step] = True
    empty = np.flatnonzero(~has & (finish > begin))
    g_step = np.concatenate([step[at], step[heads], step[tails], empty])
    g_start = np.concatenate([run_end[at - 1], begin[step[heads]], run_end[tails], begin[empty]])
    g_end = np.concatenate([start[at], start[heads], finish[step[tails]], finish[empty]])
    nxt = np.concatenate([rows[at], rows[heads], np.full(len(tails) + len(empty), -1, dtype=rows.dtype)])
    if not len(g_step):
        return _no_gaps()
    o = np.lexsort((g_start, g_step))
    g_step, g_start, g_end, nxt = g_step[o], g_start[o], g_end[o], nxt[o]
    has_next = nxt >= 0
    nx = np.maximum(nxt, 0)
    issue_tid = np.where(has_next, work["issue_tid"].to_numpy()[nx], -1)
    step_tid = steps["tid"].to_numpy()[g_step]
    op = np.where(has_next, work["op"].to_numpy()[nx], -1)
    has_op = (op >= 0) if len(ops) else np.zeros(len(op), dtype=bool)
    # No op: NO_TIME, not -1, which is a time on a clock that runs below zero.
    op_start, op_end = np.full(len(op), NO_TIME, dtype=np.int64), np.full(len(op), NO_TIME, dtype=np.int64)
    op_start[has_op] = ops["start_ns"].to_numpy()[op[has_op]]
    op_end[has_op] = ops["end_ns"].to_numpy()[op[has_op]]
    # A gap no kernel ends (the tail) is all before any issue: the host's, its launches' or
    # its syncs', as the launching thread recorded them.
    issue = np.where(has_next, work["issue_ns"].to_numpy()[nx], g_end)
    columns = {
        "step": g_step,
        "start_ns": g_start,
        "end_ns": g_end,
        # The launching thread; a kernel with no launch in the trace, or a tail: the step's thread.
        "tid": np.where(issue_tid >= 0, issue_tid, step_tid),
        "next": nxt,
        "issue_ns": issue,
        # The op that launched that kernel (-1: none): its time before the launch is the launch's.
        "op_start_ns": op_start,
        "op_end_ns": op_end,
    }
    # Fresh arrays, not consolidated into one block: a serving trace has a gap between almost
    # every two kernels, and the block would hold the table twice at the peak; apart, the
    # columns only _split reads can be let go (idle_causes pops them).
    return pd.DataFrame({c: v.astype(np.int64, copy=False) for c, v in columns.items()}, copy=False)


def _split(g: dict[str, np.ndarray], cov: Coverage | None) -> np.ndarray:
    """ns by cause of gaps of one launching thread (``_SPLIT_COLUMNS`` of them; see the module docstring)."""
    a, b, issue, op_s, op_e = (np.asarray(g[c]) for c in _SPLIT_COLUMNS)
    out = np.zeros((len(a), len(CAUSES)), dtype=np.int64)
    known = issue != NO_TIME
    c = np.clip(issue, a, b)  # before c the next kernel was not issued yet
    if cov is None:
        out[:, CAUSES.index(UNATTRIBUTED)] = b - a
        return out
    sync_before, sync_after = cov.sync(a, c), cov.sync(c, b)
    out[:, 0] = sync_before + sync_after
    # Before the issue. Inside the op that launched the next kernel, all of it is that
    # launch's cost; outside it, launch calls are launches, other recorded work is the host's.
    free = (c - a) - sync_before
    has_op = op_s != NO_TIME
    w0 = np.where(has_op, np.clip(op_s, a, c), a)
    w1 = np.where(has_op, np.clip(op_e, w0, c), a)
    sync_in = cov.sync(w0, w1)
    own = (w1 - w0) - sync_in
    calls_out = (cov.launch(a, c) - cov.launch(w0, w1)) - (sync_before - sync_in)
    busy_out = (cov.busy(a, c) - cov.busy(w0, w1)) - (cov.launch(a, c) - cov.launch(w0, w1))
    short = (c - a) <= LAUNCH_GAP_NS
    launch = np.where(short, free, own + calls_out)
    host = np.where(short, 0, busy_out)
    # After the issue: the driver's start latency, then waiting.
    lat_end = np.clip(issue + LAUNCH_LATENCY_NS, c, b)
    latency = (lat_end - c) - cov.sync(c, lat_end)
    waiting = (b - lat_end) - cov.sync(lat_end, b)
    out[:, 1] = np.where(known, launch + latency, 0)
    out[:, 2] = np.where(known, host, 0)
    out[:, 3] = np.where(known, waiting, 0)
    out[:, 4] = np.where(known, free - launch - host, (b - a) - out[:, 0])
    return np.maximum(out, 0)


def _dedupe(names: list[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        if not out or out[-1] != n:
            out.append(n)
    return out
