"""Steps read off a replay: each step's window and duration on replayed times.

A step's window is defined as the steps table defines it (``steps.table``): from its CPU start,
or the end of the previous step's work on its thread when the GPU ran behind, to the later of its
CPU end and its own last work; less the time the device spent on other work (held back by
unrecorded work, the next step's). A point of a host thread's time moves with the host call
that follows it (the host time before a call is kept with it), so a step's CPU start and end move
with the calls around them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.replay.graph import Graph
from tracekit.analysis.replay.simulate import Replayed


class StepTimes:
    """Per step: the window's begin and end on some times (measured or replayed) and its duration."""

    def __init__(self, begin: np.ndarray, end: np.ndarray, other_ns: np.ndarray):
        self.begin, self.end = begin, end
        self.duration = end - begin - other_ns


def step_times(
    steps: pd.DataFrame, work: pd.DataFrame, g: Graph, r: Replayed | None, measured: StepTimes | None = None
) -> StepTimes:
    """Step windows on replayed times (``r``), or on the measured times with the same rules (``None``).
    ``measured``: the measured windows, where the caller has them (else found again)."""
    n = len(steps)
    other = (
        (steps["unrecorded_ns"].to_numpy(np.int64) + steps["next_ns"].to_numpy(np.int64))
        if n
        else np.zeros(0, np.int64)
    )
    if not n:
        return StepTimes(np.zeros(0, np.int64), np.zeros(0, np.int64), other)
    h_start = g.h_start if r is None else r.h_start
    h_end = g.h_end if r is None else r.h_end
    if g.device_type == "cpu":
        w_end = h_end
    else:
        w_end = g.k_end if r is None else r.k_end
    step = work["step"].to_numpy()
    own = step >= 0
    last = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(last, step[own], w_end[own])
    mover = _HostClock(g, h_start, h_end, g.h_tid)
    tid = steps["tid"].to_numpy(np.int64)
    cpu_start = steps["cpu_start_ns"].to_numpy(np.int64)
    cpu_end = steps["cpu_end_ns"].to_numpy(np.int64)
    begin = mover.at(tid, cpu_start)
    end = np.maximum(mover.at(tid, cpu_end), last)
    # When the GPU runs behind, the step's window opens when the previous step's work on its thread
    # ends (a what-if that frees the host makes it run ahead where it did not).
    prev = _previous_on_thread(tid, cpu_start)
    ok = prev >= 0
    begin = np.where(ok, np.maximum(begin, last[np.maximum(prev, 0)]), begin)
    if r is not None:
        begin_m = (measured if measured is not None else step_times(steps, work, g, None)).begin
        begin = np.maximum(begin, _earlier_outside(steps, work, g, w_end, begin_m))
    return StepTimes(begin, end, other)


def _earlier_outside(
    steps: pd.DataFrame, work: pd.DataFrame, g: Graph, w_end: np.ndarray, begin_m: np.ndarray
) -> np.ndarray:
    """Per step, the latest replayed end of the work outside every step that had ended when its
    window opened on the measured times: work the step waited behind (a synchronise before it
    held the host until then) stays before it when a what-if frees the host."""
    n = len(steps)
    m_end = g.h_end if g.device_type == "cpu" else g.k_end
    out_rows = np.flatnonzero(work["step"].to_numpy() < 0)
    if not len(out_rows):
        return np.full(n, np.iinfo(np.int64).min)
    order = out_rows[np.argsort(m_end[out_rows], kind="stable")]
    running = np.maximum.accumulate(w_end[order])
    pos = np.searchsorted(m_end[order], begin_m, side="right") - 1
    return np.where(pos >= 0, running[np.maximum(pos, 0)], np.iinfo(np.int64).min)


def _previous_on_thread(tid: np.ndarray, start: np.ndarray) -> np.ndarray:
    order = np.lexsort((start, tid))
    prev = np.full(len(tid), -1, np.int64)
    same = tid[order][1:] == tid[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


class _HostClock:
    """Where a measured instant of a host thread lands in the replay. Inside a call it keeps its
    place in proportion; in the host work between two calls (or between the thread's first
    activity and its first call) likewise, so a what-if that cuts that work cuts the stretch before
    the instant and after it alike; after the thread's last call it moves with that call's end."""

    def __init__(self, g: Graph, h_start: np.ndarray, h_end: np.ndarray, tids: np.ndarray):
        outer = np.flatnonzero(g.h_outer < 0)
        anchor = g.h_anchor if g.h_anchor is not None else g.h_start
        self._by_tid = {}
        for t in np.unique(tids[outer]):
            rows = outer[tids[outer] == t]
            rows = rows[np.argsort(g.h_start[rows], kind="stable")]
            # Each call's gap opens at the previous call's end (the first call's: the thread's anchor).
            m_open = np.r_[anchor[rows[0]], g.h_end[rows][:-1]]
            # (a thread's anchor does not move in the replay)
            r_open = np.r_[anchor[rows[0]], h_end[rows][:-1]]
            self._by_tid[int(t)] = (m_open, g.h_start[rows], g.h_end[rows], r_open, h_start[rows], h_end[rows])

    def at(self, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        out = t.astype(np.int64).copy()
        for u in np.unique(tid):
            sel = np.flatnonzero(tid == u)
            got = self._by_tid.get(int(u))
            if got is None:
                continue
            m_open, m_s, m_e, r_open, r_s, r_e = got
            x = t[sel]
            # The call whose gap or run holds x: the first call ending at or after it.
            j = np.searchsorted(m_e, x, side="left")
            after = j >= len(m_s)
            jj = np.minimum(j, len(m_s) - 1)
            in_call = ~after & (x >= m_s[jj])
            before_anchor = ~after & ~in_call & (x < m_open[jj])
            res = np.empty(len(x), np.int64)
            # after the last call: with its end
            res[after] = x[after] + (r_e[-1] - m_e[-1])
            k = in_call
            res[k] = r_s[jj[k]] + _scale(x[k] - m_s[jj[k]], m_e[jj[k]] - m_s[jj[k]], r_e[jj[k]] - r_s[jj[k]])
            k = ~after & ~in_call & ~before_anchor
            res[k] = r_open[jj[k]] + _scale(
                x[k] - m_open[jj[k]], m_s[jj[k]] - m_open[jj[k]], r_s[jj[k]] - r_open[jj[k]]
            )
            k = before_anchor
            res[k] = x[k] + (r_open[jj[k]] - m_open[jj[k]])
            out[sel] = res
        return out


def _scale(offset: np.ndarray, measured: np.ndarray, replayed: np.ndarray) -> np.ndarray:
    """``offset`` into a stretch of ``measured`` ns, in proportion to the stretch as replayed."""
    frac = np.where(measured > 0, offset / np.where(measured > 0, measured, 1), 0.0)
    return (frac * replayed).astype(np.int64)
