"""The steps table: one row per step, with its times, books and stated figures.

Takes the step ranges (``ranges.RANGE_COLUMNS``) and the work table with each unit's step,
and gives the steps table (``steps_table``): CPU and GPU extents, the step's window
(``begin_ns``/``end_ns``), the time in it the device spent on other work (``unrecorded_ns``: work
the trace did not record, ``steps.held``; ``next_ns``: the next step's; ``previous_ns``, before
it: the previous step's), its GPU busy and idle time (which sum to its duration), kernel
count, graph replay, and the tokens, batch and sides its range stated. ``segment`` then fills
in the phases and counts the evidence gives. Also the busy-time arithmetic the table uses
(``step_busy``: union of a step's work clipped to its window).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.steps.ranges import isna
from tracekit.analysis.waiting.intervals import running_end
from tracekit.frameworks import SOURCE_INFERRED, SOURCE_LAUNCHES, UNKNOWN

_STEP_COLUMNS = {
    "step": "int64",
    "phase": "object",
    "source": "object",
    "evidence": "object",
    "label": "object",
    "tid": "int64",
    "cpu_start_ns": "int64",
    "cpu_end_ns": "int64",
    "gpu_start_ns": "int64",
    "gpu_end_ns": "int64",
    # The step's window: from its CPU start (or the end of the previous step's work on the
    # same thread, when the GPU runs behind) to the later of its CPU end and its last GPU work.
    "begin_ns": "int64",
    "end_ns": "int64",
    "gpu_busy_ns": "int64",
    "gpu_idle_ns": "int64",
    # The window less the time the device spent on work that is not the step's (``unrecorded_ns``,
    # ``next_ns``): duration = gpu_busy + gpu_idle, measured from the point the step's own work
    # could start.
    "duration_ns": "int64",
    # From the CPU start to the window's begin: the device still ran the previous step's work.
    "previous_ns": "int64",
    # Inside the window, the device ran work the trace did not record (queued before the profile
    # began, or another process's) and the step's work waited on it (``steps.held``).
    "unrecorded_ns": "int64",
    # Inside the window, the device ran the next step's work (same thread; begun before that
    # step's window opened) and none of this step's: the next step's time, not this one's idle.
    # end - cpu_start = duration + previous + unrecorded + next.
    "next_ns": "int64",
    "kernels": "int64",
    "tokens": "float64",
    "batch": "float64",
    # Where tokens and batch came from (the annotation, evidence sources, the user) and how
    # sure: 1.0 where stated, else the share of the evidence's weight that agrees.
    "tokens_source": "object",
    "tokens_confidence": "float64",
    "batch_source": "object",
    "batch_confidence": "float64",
    # Keys the step's queries attend to, summed over its requests, where the annotation says or the
    # run's history gives them (``steps.history``), with where they came from and how sure.
    "kv_tokens": "float64",
    "kv_tokens_source": "object",
    "kv_tokens_confidence": "float64",
    "phase_confidence": "float64",
    "graph_replay": "bool",
    # The batch of each phase, as the annotation states it (frameworks.BatchSide or None).
    "prefill_side": "object",
    "decode_side": "object",
}
# Where a figure stated by the step's engine annotation came from (``tokens_source``, ...).
ANNOTATION_SOURCE = "the step annotation"
# The kinds of other work in a step's window (``steps_table``'s second value, ``kind``).
UNRECORDED, NEXT_STEP = "unrecorded", "next step"


def steps_table(
    ranges: pd.DataFrame, work: pd.DataFrame, previous_end: dict | None = None, held: tuple | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per range (``_STEP_COLUMNS``), from the work assigned to it; ``previous_end``: per thread, the
    end of the step before this trace's first (``segment.PREVIOUS_STEP_END``); ``held``: the stretches
    the device held work back for unrecorded work (``held.held_intervals``). Also the other work in
    each step's window: ``step``, ``start_ns``, ``end_ns``, ``row`` (the unit of work: the kernel held
    back, or the next step's unit), ``kind`` (``UNRECORDED``: ``held_in_steps``; ``NEXT_STEP``:
    ``next_in_steps``)."""
    if not len(ranges):
        return empty_steps(), no_other_work()
    step_of = work["step"].to_numpy()
    kernels_of = np.bincount(step_of[step_of >= 0], minlength=len(ranges))[: len(ranges)]
    starts = work["start_ns"].to_numpy()
    ends = work["end_ns"].to_numpy()
    graph = work["graph"].to_numpy()
    _, g0_of, g1_of = _busy_per_step(step_of, starts, ends, len(ranges))
    replayed = np.bincount(step_of[(step_of >= 0) & graph], minlength=len(ranges))[: len(ranges)] > 0
    # When the GPU runs behind the CPU (asynchronous scheduling), a step's GPU work waits
    # for the previous step's: its time starts when that work ended, so that step
    # durations add up to the run's span instead of counting the queue twice.
    previous_end = {int(t): int(e) for t, e in (previous_end or {}).items()}
    begin_of = np.zeros(len(ranges), np.int64)
    end_of = np.zeros(len(ranges), np.int64)
    prev_of = np.full(len(ranges), -1, np.int64)  # the step before on the same thread
    last: dict[int, int] = {}
    for i, (cpu0, cpu1, tid) in enumerate(
        zip(ranges["start"].tolist(), ranges["end"].tolist(), ranges["tid"].tolist())
    ):
        cpu0, cpu1, tid = int(cpu0), int(cpu1), int(tid)
        end = max(cpu1, int(g1_of[i])) if kernels_of[i] else cpu1
        begin = min(max(cpu0, previous_end.get(tid, cpu0)), end)
        previous_end[tid] = max(end, previous_end.get(tid, end))
        begin_of[i], end_of[i] = begin, end
        prev_of[i], last[tid] = last.get(tid, -1), i
    # One set of books: a step's duration is its GPU busy time (its work, clipped to the
    # step's window) plus its GPU idle time (lead-in, gaps, tail), exactly.
    busy_of = step_busy(step_of, starts, ends, begin_of, end_of)
    # The device's time on other work is neither the step's busy time nor its idle: it leaves the
    # step's duration, under its own name. Unrecorded work: no recorded work runs then.
    held_rows = held_in_steps(held, step_of, begin_of, end_of)
    unrecorded = np.zeros(len(ranges), np.int64)
    np.add.at(unrecorded, held_rows["step"].to_numpy(), (held_rows["end_ns"] - held_rows["start_ns"]).to_numpy())
    # The next step's work in the step's window: only where the step's own work is not running.
    nxt = next_in_steps(step_of, starts, ends, begin_of, end_of, prev_of)
    own = np.where((step_of >= 0) & (step_of < len(ranges)), step_of, 0)
    s_own, e_own = np.clip(starts, begin_of[own], end_of[own]), np.clip(ends, begin_of[own], end_of[own])
    own = np.where((step_of >= 0) & (step_of < len(ranges)) & (e_own > s_own), step_of, -1)
    with_next = _busy_per_step(
        np.r_[own, nxt["step"].to_numpy()],
        np.r_[s_own, nxt["start_ns"].to_numpy()],
        np.r_[e_own, nxt["end_ns"].to_numpy()],
        len(ranges),
    )[0]
    next_ns = with_next - busy_of
    stretches = pd.concat([held_rows.assign(kind=UNRECORDED), nxt.assign(kind=NEXT_STEP)], ignore_index=True)
    # Column by column (a serving run has tens of thousands of steps).
    duration = end_of - begin_of - unrecorded - next_ns
    tokens = np.array([_number(v) for v in ranges["tokens"].tolist()], dtype=float)
    batch = np.array([_number(v) for v in ranges["batch"].tolist()], dtype=float)
    stated = [_stated_by(v) for v in ranges["source"].tolist()]
    phase = ranges["phase"].tolist()
    steps = pd.DataFrame(
        {
            "step": np.arange(len(ranges)),
            "phase": phase,
            "source": ranges["source"].tolist(),
            "evidence": ranges["evidence"].tolist(),
            "label": ranges["label"].tolist(),
            "tid": ranges["tid"].to_numpy().astype(np.int64),
            "cpu_start_ns": ranges["start"].to_numpy().astype(np.int64),
            "cpu_end_ns": ranges["end"].to_numpy().astype(np.int64),
            "gpu_start_ns": g0_of,
            "gpu_end_ns": g1_of,
            "begin_ns": begin_of,
            "end_ns": end_of,
            "gpu_busy_ns": busy_of,
            "gpu_idle_ns": duration - busy_of,
            "duration_ns": duration,
            "previous_ns": begin_of - ranges["start"].to_numpy().astype(np.int64),
            "unrecorded_ns": unrecorded,
            "next_ns": next_ns,
            "kernels": kernels_of,
            "tokens": tokens,
            "batch": batch,
            "tokens_source": [None if np.isnan(t) else w for t, w in zip(tokens.tolist(), stated)],
            "tokens_confidence": np.where(np.isnan(tokens), np.nan, 1.0),
            "batch_source": [None if np.isnan(t) else w for t, w in zip(batch.tolist(), stated)],
            "batch_confidence": np.where(np.isnan(batch), np.nan, 1.0),
            "kv_tokens": np.full(len(ranges), np.nan),
            "kv_tokens_source": [None] * len(ranges),
            "kv_tokens_confidence": np.full(len(ranges), np.nan),
            "phase_confidence": [1.0 if ph != UNKNOWN else np.nan for ph in phase],
            "graph_replay": replayed,
            "prefill_side": [_side(v) for v in ranges["prefill_side"].tolist()],
            "decode_side": [_side(v) for v in ranges["decode_side"].tolist()],
        }
    )
    return steps.astype(_STEP_COLUMNS), stretches


def held_in_steps(held: tuple | None, step_of: np.ndarray, begin: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """The held stretches (``held.held_intervals``: work row, start, end) in steps' windows, clipped to
    each window: ``step``, ``start_ns``, ``end_ns``, ``row`` (the kernel held back), in order. A
    stretch of a step's unit is that step's; one of a unit outside every step (an engine's
    scheduler launching it just before the step's range opens, as SGLang's overlap scheduler does
    with ``resolve_future_token_ids``) is every window it overlaps: the device ran no recorded
    work then, and the step's own work queued behind it, whichever step the held unit belongs to."""
    if held is None or not len(held[0]):
        return no_held()
    rows, lo, hi = held
    st = step_of[rows]
    mine = (st >= 0) & (st < len(begin))
    out_rows, out_lo, out_hi, out_st = _in_windows(rows[~mine], lo[~mine], hi[~mine], begin, end)
    rows, lo, hi, st = (
        np.r_[rows[mine], out_rows],
        np.r_[lo[mine], out_lo],
        np.r_[hi[mine], out_hi],
        np.r_[st[mine], out_st],
    )
    lo, hi = np.clip(lo, begin[st], end[st]), np.clip(hi, begin[st], end[st])
    keep = hi > lo
    order = np.lexsort((lo[keep], st[keep]))
    return pd.DataFrame(
        {"step": st[keep][order], "start_ns": lo[keep][order], "end_ns": hi[keep][order], "row": rows[keep][order]},
        dtype=np.int64,
    )


def _in_windows(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, begin: np.ndarray, end: np.ndarray):
    """Each stretch once per step window it overlaps: (rows, lo, hi, step). Windows in begin order
    with the running maximum of their ends: walking back from the last window opening before a
    stretch's end stops at the first whose every predecessor ended before the stretch began, so
    each stretch visits only the windows that can reach it."""
    found: list[tuple[int, int, int, int]] = []
    if len(rows) and len(begin):
        order = np.argsort(begin, kind="stable")
        b, e = begin[order], end[order]
        reach = np.maximum.accumulate(e)
        for r, low, h in zip(rows.tolist(), lo.tolist(), hi.tolist()):
            j = int(np.searchsorted(b, h, side="left")) - 1
            while j >= 0 and reach[j] > low:
                if e[j] > low:
                    found.append((r, low, h, int(order[j])))
                j -= 1
    cols = np.array(found, dtype=np.int64).reshape(-1, 4)
    return cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3]


def no_held() -> pd.DataFrame:
    """A table of stretches (``step``, ``start_ns``, ``end_ns``, ``row``) with no rows."""
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in ("step", "start_ns", "end_ns", "row")})


def no_other_work() -> pd.DataFrame:
    """A table of other work in steps' windows (``steps_table``'s second value) with no rows."""
    return no_held().assign(kind=pd.Series(dtype=object))


def next_in_steps(
    step_of: np.ndarray, starts: np.ndarray, ends: np.ndarray, begin: np.ndarray, end: np.ndarray, prev_of: np.ndarray
) -> pd.DataFrame:
    """The work of each step that ran before its window opened (on another stream, while the
    previous step's still ran), clipped to the previous step's window on its thread: ``step`` (that
    previous step), ``start_ns``, ``end_ns``, ``row`` (the unit of work)."""
    n = len(begin)
    j = np.where((step_of >= 0) & (step_of < n), step_of, 0)
    p = np.where((step_of >= 0) & (step_of < n), prev_of[j], -1)
    early = np.flatnonzero((p >= 0) & (starts < begin[j]))
    if not len(early):
        return no_held()
    p, j = p[early], j[early]
    lo = np.clip(starts[early], begin[p], end[p])
    hi = np.clip(np.minimum(ends[early], begin[j]), begin[p], end[p])
    keep = hi > lo
    return pd.DataFrame({"step": p[keep], "start_ns": lo[keep], "end_ns": hi[keep], "row": early[keep]}, dtype=np.int64)


def _number(value) -> float:
    return np.nan if value is None or pd.isna(value) else float(value)


def _stated_by(source: str) -> str:
    """Where a figure known when the step range was found came from: the engine's annotation,
    or the op shapes of an inferred pass."""
    return ANNOTATION_SOURCE if source not in (SOURCE_INFERRED, SOURCE_LAUNCHES) else "op shapes"


def step_busy(
    step_of: np.ndarray, starts: np.ndarray, ends: np.ndarray, begin: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Per step, the union of its work's intervals clipped to the step's window
    ``[begin, end)``: the busy half of its books (work outside the window, e.g. a kernel on
    another stream still running when the next step begins, is not this step's time)."""
    n = len(begin)
    inside = (step_of >= 0) & (step_of < n)
    st = np.where(inside, step_of, 0)
    s = np.clip(starts, begin[st], end[st])
    e = np.clip(ends, begin[st], end[st])
    return _busy_per_step(np.where(inside & (e > s), step_of, -1), s, e, n)[0]


def _side(value):
    return None if value is None or isna(value) else value


def _busy_per_step(step_of: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int):
    """``_busy`` of every step's work at once: (busy ns, first start, last end) per step
    0..n-1, 0, -1 and -1 for a step without work. One sort and a few vector passes: a
    serving run has tens of thousands of steps, too many for numpy calls per step."""
    busy, g0, g1 = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    sel = np.flatnonzero((step_of >= 0) & (step_of < n))
    if not len(sel):
        return busy, g0, g1
    o = sel[np.lexsort((starts[sel], step_of[sel]))]  # by step, then start; ties keep work order
    st, s, e = step_of[o].astype(np.int64), starts[o], ends[o]
    run_end = running_end(st, e)
    first = np.r_[True, st[1:] != st[:-1]]
    overlap = np.zeros(len(s), np.int64)
    overlap[1:] = np.clip(np.minimum(e[1:], run_end[:-1]) - s[1:], 0, None)
    overlap[first] = 0
    heads = np.flatnonzero(first)
    tails = np.r_[heads[1:], len(s)] - 1
    steps = st[heads]
    busy[steps] = np.add.reduceat(e - s, heads) - np.add.reduceat(overlap, heads)
    g0[steps], g1[steps] = s[heads], run_end[tails]
    return busy, g0, g1


def _busy(starts: np.ndarray, ends: np.ndarray) -> tuple[int, int, int]:
    """(busy ns as the union of intervals, first start, last end)."""
    if not len(starts):
        return 0, -1, -1
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    busy = int((e - s).sum() - _overlap(s, e, run_end))
    return busy, int(s[0]), int(run_end[-1])


def _overlap(s: np.ndarray, e: np.ndarray, run_end: np.ndarray) -> int:
    """Total time counted twice by overlapping intervals (streams running concurrently)."""
    if len(s) < 2:
        return 0
    prev_end = run_end[:-1]
    return int(np.clip(np.minimum(e[1:], prev_end) - s[1:], 0, None).sum())


def empty_steps() -> pd.DataFrame:
    """A steps table with no rows and every column typed."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _STEP_COLUMNS.items()})
