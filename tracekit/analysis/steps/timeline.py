"""Step timelines: what the host thread and the GPU streams did during one step, and why
the GPU was idle, for the slowest and a typical step.

Each timeline is lanes of segments ``[start_ms, end_ms, key, label, count]``, times from the
step's start, ``key`` and ``label`` indexes into the timeline's ``keys`` and ``labels``
(kernel names repeat thousands of times; each is stored once): the launching host
thread's top-level ops and its runtime calls (sync, launch, other), the GPU's idle gaps by
their largest cause, one lane per GPU stream with its kernels by category, and the step's
critical path by kind (``add_critical_path``, once the step replay exists). A step with
thousands of kernels is still drawn at kernel level, but segments of one kind that sit
closer together than a pixel's worth of the step (1/RESOLUTION of its span) are merged into
one with a count, and each lane keeps at most MAX_SEGMENTS: the page stays small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.waiting.host import LAUNCH_CALL, SYNC_CALL, name_mask
from tracekit.analysis.waiting.idle import CAUSES, IdleCauses
from tracekit.trace.model import Trace

RESOLUTION = 2000  # merge segments closer than span / RESOLUTION
MAX_SEGMENTS = 1500  # per lane
MAX_STREAMS = 4  # stream lanes; the rest share one
LABEL_CHARS = 70
# The work table's columns a step's lanes read.
_LANE_COLUMNS = ("issue_tid", "stream", "dur_ns", "name", "category", "start_ns", "end_ns")


def timelines(
    trace: Trace,
    steps: pd.DataFrame,
    work: pd.DataFrame,
    idle: IdleCauses,
    short_name=lambda s: s,
    device_type: str = "gpu",
) -> list[dict[str, Any]]:
    """The slowest step's timeline and the typical (median-duration) step's, when different.
    None for a CPU-only trace: its ops are the work, with no device waiting on them."""
    if not len(steps) or "category" not in work or device_type != "gpu":
        return []
    with_work = steps[steps["kernels"] > 0]
    if not len(with_work):
        return []
    dur = with_work["duration_ns"].to_numpy()
    slowest = int(with_work["step"].iat[int(np.argmax(dur))])
    typical = int(with_work["step"].iat[int(np.argmin(np.abs(dur - np.median(dur))))])
    picks = [(slowest, "slowest step")]
    if typical != slowest:
        picks.append((typical, "typical step (median duration)"))
    t0 = int(steps["cpu_start_ns"].min())
    return [_timeline(trace, steps[steps["step"] == i].iloc[0], work, idle, why, t0, short_name) for i, why in picks]


def _timeline(trace, st, work, idle, why, t0, short_name) -> dict[str, Any]:
    # The step's rows, in the columns the lanes read: not a copy of the whole work table's.
    columns = [work.columns.get_loc(c) for c in _LANE_COLUMNS if c in work]
    mine = work.iloc[np.flatnonzero(work["step"].to_numpy() == int(st.step)), columns]
    start, end = _window(st)
    span = max(end - start, 1)
    tids = mine["issue_tid"].to_numpy()
    tid = int(pd.Series(tids[tids >= 0]).mode().iloc[0]) if (tids >= 0).any() else int(st.tid)
    lanes = [
        _host_ops(trace, tid, start, end, span),
        _host_calls(trace, tid, start, end, span),
        _idle_lane(idle, int(st.step), start, span),
    ]
    lanes += _streams(mine, start, span, short_name)
    # Keys and labels as indexes into the timeline's tables of distinct strings (first seen
    # first, lane by lane): one hash factorisation over every lane's segments.
    key_code, keys = _first_seen(np.concatenate([lane["segments"].keys for lane in lanes]))
    label_code, labels = _first_seen(np.concatenate([lane["segments"].labels for lane in lanes]))
    at = 0
    for lane in lanes:
        seg = lane["segments"]
        n = len(seg.keys)
        lane["segments"] = list(
            map(
                list,
                zip(
                    seg.start_ms,
                    seg.end_ms,
                    key_code[at : at + n].tolist(),
                    label_code[at : at + n].tolist(),
                    seg.count,
                ),
            )
        )
        at += n
    return {
        "step": int(st.step),
        "phase": st.phase,
        "why": why,
        "label": str(st.label) if st.label is not None else None,
        "start_ms": (start - t0) / 1e6,
        "duration_ms": st.duration_ns / 1e6,
        "span_ms": span / 1e6,
        "kernels": int(len(mine)),
        "host_tid": tid,
        "idle_by_cause": idle.step_causes(int(st.step)) if len(idle.by_step) else None,
        "keys": keys,
        "labels": labels,
        "lanes": [lane for lane in lanes if lane["segments"]],
    }


def _window(st) -> tuple[int, int]:
    """A step's drawn span (ns): its CPU and GPU spans together. A step without work has no GPU
    span (its -1s are no times: a clock may run below zero)."""
    start = int(min(st.cpu_start_ns, st.gpu_start_ns)) if st.kernels else int(st.cpu_start_ns)
    end = int(max(st.cpu_end_ns, st.gpu_end_ns)) if st.kernels else int(st.cpu_end_ns)
    return start, end


def add_critical_path(tls: list[dict[str, Any]], steps: pd.DataFrame, critical_path) -> None:
    """Add a "critical path" lane to each timeline of ``tls``: the segments of its step's critical
    path (``critical_path(step)``, ``analysis.replay.critical.Segment``s), keyed by their kind
    (kernel, launch, host, sync, queue, unexplained). They are on the replay's clock, which for the
    unchanged replay is the trace's within the books' error, so they line up with the other lanes.
    The timelines are built before the replay (``analyze.assemble``), hence a lane added after."""
    for tl in tls:
        rows = steps[steps["step"].to_numpy() == tl["step"]]
        if not len(rows):
            continue
        start, end = _window(rows.iloc[0])
        path = critical_path(int(tl["step"]))
        if not path:
            continue
        s = np.array([x.start_ns for x in path], dtype=np.int64)
        e = np.array([x.end_ns for x in path], dtype=np.int64)
        segs = _segments(
            s,
            e,
            np.array([x.kind for x in path], dtype=object),
            np.array([x.label for x in path], dtype=object),
            start,
            max(end - start, 1),
        )
        # Keys and labels into the timeline's tables of distinct strings, new ones appended.
        at = {"keys": {k: i for i, k in enumerate(tl["keys"])}, "labels": {k: i for i, k in enumerate(tl["labels"])}}

        def code(table: str, text: str, at: dict = at, tl: dict = tl) -> int:
            if text not in at[table]:
                at[table][text] = len(tl[table])
                tl[table].append(text)
            return at[table][text]

        tl["lanes"].append(
            {
                "name": "critical path",
                "kind": "critical",
                "segments": [
                    [a, b, code("keys", str(k)), code("labels", str(t)), n]
                    for a, b, k, t, n in zip(segs.start_ms, segs.end_ms, segs.keys, segs.labels, segs.count)
                ],
            }
        )


def _first_seen(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(each value's index among the distinct values, those values in first-seen order)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes, [str(u) for u in uniques]


@dataclass(frozen=True)
class _Segments:
    """A lane's segments as columns: start and end (ms from the step's start), key and label
    text, and how many intervals each one merges."""

    start_ms: list
    end_ms: list
    keys: np.ndarray
    labels: np.ndarray
    count: list


_NO_SEGMENTS = _Segments([], [], np.zeros(0, dtype=object), np.zeros(0, dtype=object), [])


def _host_ops(trace: Trace, tid: int, start: int, end: int, span: int) -> dict[str, Any]:
    ops = trace.cpu_ops
    if not len(ops):
        return _lane("host ops", "host_ops", _NO_SEGMENTS)
    rows = np.flatnonzero(
        (ops["tid"].to_numpy() == tid) & (ops["start_ns"].to_numpy() < end) & (ops["end_ns"].to_numpy() > start)
    )
    if not len(rows):
        return _lane(f"host thread {tid}: ops", "host_ops", _NO_SEGMENTS)
    # Top level within the window: ops no other op of the window encloses.
    s, e = ops["start_ns"].to_numpy()[rows], ops["end_ns"].to_numpy()[rows]
    o = np.lexsort((-(e - s), s))
    rows, s, e = rows[o], s[o], e[o]
    top = rows[e > np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])]
    names = categorical.strings_at(ops["name"], top)
    segs = _segments(ops["start_ns"].to_numpy()[top], ops["end_ns"].to_numpy()[top], names, names, start, span)
    return _lane(f"host thread {tid}: ops", "host_ops", segs)


def _host_calls(trace: Trace, tid: int, start: int, end: int, span: int) -> dict[str, Any]:
    rt = trace.runtime
    if not len(rt):
        return _lane("runtime calls", "host_calls", _NO_SEGMENTS)
    rows = np.flatnonzero(
        (rt["tid"].to_numpy() == tid) & (rt["start_ns"].to_numpy() < end) & (rt["end_ns"].to_numpy() > start)
    )
    names = rt["name"].iloc[rows]
    sync = name_mask(names, SYNC_CALL)
    launch = name_mask(names, LAUNCH_CALL) & ~sync
    kind = np.where(sync, "sync", np.where(launch, "launch", "other")).astype(object)
    segs = _segments(
        rt["start_ns"].to_numpy()[rows], rt["end_ns"].to_numpy()[rows], kind, names.to_numpy(), start, span
    )
    return _lane(f"host thread {tid}: runtime calls", "host_calls", segs)


def _idle_lane(idle: IdleCauses, step: int, start: int, span: int) -> dict[str, Any]:
    g = idle.gaps
    if not len(g):
        return _lane("GPU idle, by cause", "idle", _NO_SEGMENTS)
    g = g[g["step"].to_numpy() == step]
    # Gaps are not merged (a merged run of gaps would paint the kernels between them as idle);
    # beyond MAX_SEGMENTS only the longest are kept, the rest being narrower than a pixel.
    keep = np.sort(np.argsort(-(g["end_ns"].to_numpy() - g["start_ns"].to_numpy()), kind="stable")[:MAX_SEGMENTS])
    parts = g[list(CAUSES)].to_numpy()[keep]
    main = np.array(CAUSES, dtype=object)[parts.argmax(axis=1)] if len(keep) else np.zeros(0, dtype=object)
    labels = np.array(
        [", ".join(f"{c} {v / 1e6:.3g} ms" for c, v in zip(CAUSES, row) if v > 0) for row in parts.tolist()],
        dtype=object,
    )
    segs = _segments(
        g["start_ns"].to_numpy()[keep], g["end_ns"].to_numpy()[keep], main, labels, start, span, merge=False
    )
    return _lane("GPU idle, by cause", "idle", segs)


def _streams(mine: pd.DataFrame, start: int, span: int, short_name) -> list[dict[str, Any]]:
    if not len(mine):
        return []
    stream = mine["stream"].to_numpy() if "stream" in mine else np.zeros(len(mine), dtype=np.int64)
    busy = pd.Series(mine["dur_ns"].to_numpy()).groupby(stream).sum().sort_values(ascending=False)
    keep = list(busy.index[:MAX_STREAMS])
    out = []
    groups = [(f"GPU stream {s}", stream == s) for s in keep]
    if len(busy) > MAX_STREAMS:
        groups.append((f"GPU, {len(busy) - MAX_STREAMS} other streams", ~np.isin(stream, keep)))
    codes = categorical.codes(mine["name"])
    names = categorical.category_strings(mine["name"])
    # Once per distinct name of the step (a missing name, code -1, reads "nan" as astype(str) has it).
    short = np.empty(len(names) + 1, dtype=object)
    present = np.unique(codes[codes >= 0])
    short[present] = [short_name(n) for n in names[present]]
    short[-1] = short_name("nan")
    cats = mine["category"].to_numpy(dtype=object)
    for title, sel in groups:
        rows = np.flatnonzero(sel)
        labels = short[codes[rows]]
        segs = _segments(
            mine["start_ns"].to_numpy()[rows], mine["end_ns"].to_numpy()[rows], cats[rows], labels, start, span
        )
        out.append(_lane(title, "stream", segs))
    return out


def _lane(name: str, kind: str, segments: _Segments) -> dict[str, Any]:
    return {"name": name, "kind": kind, "segments": segments}


def _segments(
    s: np.ndarray, e: np.ndarray, key: np.ndarray, label: np.ndarray, start: int, span: int, merge: bool = True
) -> _Segments:
    """The segments (start_ms, end_ms, key, label, count) of intervals, from ``start``; with
    ``merge``, neighbours with the same key closer than span / RESOLUTION merged (coarser until
    at most MAX_SEGMENTS). A merged segment's label counts its intervals.

    Merging by key cannot get under the cap when neighbours alternate keys more than
    MAX_SEGMENTS times: once the tolerance exceeds every gap, a coarser one merges nothing
    more. Then the lane is coarsened by time instead (``_buckets``), so a lane never holds
    more than MAX_SEGMENTS, whatever the data."""
    if not len(s):
        return _NO_SEGMENTS
    o = np.argsort(s, kind="stable")
    s, e, key, label = s[o], e[o], np.asarray(key, dtype=object)[o], np.asarray(label, dtype=object)[o]
    run_end = np.maximum.accumulate(e)
    # What starts a segment: a change of key, or a gap wider than tol after the run so far.
    # Neither depends on tol but the comparison, so each round is one vector compare. Unmerged
    # (tol -1), only intervals of one key overlapping by more than a nanosecond share a segment.
    changes = key[1:] != key[:-1]
    gaps = s[1:] - run_end[:-1]
    widest = float(gaps.max()) if len(gaps) else 0.0
    tol = span / RESOLUTION if merge else -1
    new = np.ones(len(s), dtype=bool)
    # Each round multiplies tol by 4, and the rounds are bounded twice over: once tol passes the
    # widest gap nothing more merges (only changes of key are left), and a fixed count holds
    # whatever the numbers (4**64 passes any int64 gap).
    for _ in range(_MAX_ROUNDS):
        new[1:] = changes | (gaps > tol)
        if new.sum() <= MAX_SEGMENTS or not merge or not tol <= widest:
            break
        tol *= 4
    if merge and new.sum() > MAX_SEGMENTS:
        return _buckets(s, e, run_end, key, label, start)
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    count = (last - first + 1).tolist()
    a = np.round((s[first] - start) / 1e6, 4).tolist()
    b = np.round((run_end[last] - start) / 1e6, 4).tolist()
    keys = _texts(key[first], lambda k: k)
    labels = np.empty(len(first), dtype=object)
    single = last == first
    labels[single] = _texts(label[first][single], lambda t: t[:LABEL_CHARS])
    merged = np.flatnonzero(~single)
    labels[merged] = [
        f"{c} × {k}"[:LABEL_CHARS] for c, k in zip((last - first + 1)[merged].tolist(), keys[merged].tolist())
    ]
    return _Segments(a, b, keys, labels, count)


# tol starts at span / RESOLUTION and a lane's gaps are under the span, so 7 rounds
# (log4(RESOLUTION) + 1) pass them all; the spare ones hold for any int64 gap whatever the span.
_MAX_ROUNDS = 64


def _buckets(
    s: np.ndarray, e: np.ndarray, run_end: np.ndarray, key: np.ndarray, label: np.ndarray, start: int
) -> _Segments:
    """Sorted intervals that alternate kinds too often to merge by kind, as at most MAX_SEGMENTS
    segments: equal slices of time, each one segment of the intervals starting in it, keyed by
    the kind holding most of its busy time (ties: the kind seen first), labelled with how many
    intervals of how many kinds it merges (a lone interval keeps its own label). Sorting, once:
    n log n."""
    # Times from the first interval's start, subtracted before any float: a clock of ~1e18 ns (epoch
    # times, a clock moved from below zero) would round to float64's 128 ns and move the slices with it.
    rel = s - s[0]
    width = max(float(run_end[-1] - s[0]), 1.0) / MAX_SEGMENTS
    # A NaN time (not one the reader makes) lands in the last slice rather than off the end.
    bucket = np.clip(np.nan_to_num(rel / width, nan=MAX_SEGMENTS - 1), 0, MAX_SEGMENTS - 1).astype(np.int64)
    first = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])  # s is sorted, so slices are runs
    last = np.append(first[1:] - 1, len(s) - 1)
    count = last - first + 1
    codes, uniques = pd.factorize(key, use_na_sentinel=False)
    # Busy time per (slice, kind), then the busiest kind of each slice.
    pair = bucket * len(uniques) + codes
    pairs, inverse = np.unique(pair, return_inverse=True)
    busy = np.bincount(inverse, weights=np.maximum(e - s, 0).astype(float), minlength=len(pairs))
    pair_bucket, pair_code = pairs // len(uniques), pairs % len(uniques)
    o = np.lexsort((pair_code, -busy, pair_bucket))  # per slice: busiest first, then first seen
    top = o[np.r_[True, pair_bucket[o][1:] != pair_bucket[o][:-1]]]
    kinds = np.bincount(pair_bucket, minlength=MAX_SEGMENTS)[pair_bucket[top]]
    keys = np.array([str(u) for u in uniques], dtype=object)[pair_code[top]]
    own = label[first].tolist()
    labels = np.array(
        [
            (str(t) if c == 1 else f"{c} × {k}" if n == 1 else f"{c} intervals of {n} kinds, mostly {k}")[:LABEL_CHARS]
            for c, n, k, t in zip(count.tolist(), kinds.tolist(), keys.tolist(), own)
        ],
        dtype=object,
    )
    a = np.round((s[first] - start) / 1e6, 4).tolist()
    b = np.round((run_end[last] - start) / 1e6, 4).tolist()
    return _Segments(a, b, keys, labels, count.tolist())


def _texts(values: np.ndarray, shape) -> np.ndarray:
    """``shape(str(v))`` per value, worked out once per distinct value."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.array([shape(str(u)) for u in uniques], dtype=object)[codes]
