"""The critical path of a replayed step: the chain of host work, launches, queueing and kernels
that set its duration, walked back from the node that ended the step's window.

Each node recorded which dependency set its time (``simulate``); the walk follows those back to
the window's begin, and the stretches it passes are the path's segments:

- ``kernel``: a device activity running (with its category);
- ``launch``: a launch call, the host's dispatch pauses between launches (shorter than
  ``LAUNCH_GAP_NS``) and the launch-to-start latency;
- ``host``: host work between calls longer than that, and other calls' own time;
- ``sync``: a synchronising call's own time after what it waited for ended;
- ``queue``: the device's kernel-to-kernel gap, and waits on another stream;
  (a collective joined across ranks that waited for the last rank continues on that rank's path);
- ``unexplained``: lateness no dependency explains (the books' "unexplained wait").

The segments tile the window: their sum is the step's window on the replayed times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.replay.graph import Graph
from tracekit.analysis.replay.simulate import AWAITED, CROSS, HOST_PREV, LAUNCHED, STREAM, Replayed
from tracekit.analysis.waiting.idle import LAUNCH_GAP_NS

KERNEL, LAUNCH, HOST, SYNC, QUEUE, UNEXPLAINED = "kernel", "launch", "host", "sync", "queue", "unexplained"
KINDS = (KERNEL, LAUNCH, HOST, SYNC, QUEUE, UNEXPLAINED)


@dataclass
class Segment:
    start_ns: int
    end_ns: int
    kind: str
    label: str
    node: int  # kernel row for kernel/queue/unexplained segments, host row otherwise (-1: none)


def labels(work: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(name, category) per work row, as the path's kernel segments are labelled (read once)."""
    names = work["name"].astype(str).to_numpy(dtype=object)
    cats = work["category"].to_numpy(dtype=object) if "category" in work else np.full(len(work), "other", object)
    return names, cats


def critical_path(
    g: Graph,
    r: Replayed,
    names_cats: tuple[np.ndarray, np.ndarray],
    begin: int,
    end: int,
    last_node: tuple[str, int] | None,
) -> list[Segment]:
    """Segments of a step's critical path within [begin, end], oldest first. ``names_cats``:
    ``labels(work)``; ``last_node``: ("k", row) or ("h", row), the node whose end closed the window."""
    segs: list[Segment] = []
    if last_node is None:  # no node closes the window: nothing recorded explains it
        return [Segment(begin, end, UNEXPLAINED, "no recorded call or activity", -1)] if end > begin else []
    cpu = g.device_type == "cpu"
    names, cats = names_cats
    t = end
    where, i = last_node
    at_end = True  # a host node reached at its end (else at its start)
    guard = g.n_host + g.n_dev + 2
    k_at_start = False  # a kernel reached at its start (through a collective's last arrival)
    end_by = r.k_end_by
    while t > begin and guard > 0:
        guard -= 1
        if where == "k":
            s, e = int(r.k_start[i]), int(r.k_end[i])
            by = int(end_by[i]) if end_by is not None and not k_at_start else -1
            if by >= 0 and int(r.k_start[by]) > s:
                # A collective that waited for the last rank: its transfer after that rank arrived,
                # then whatever made that rank late.
                arrived = int(r.k_start[by])
                _add(segs, min(e, t), arrived, KERNEL, f"{cats[i]}: {names[i]}", i, begin)
                t = min(t, arrived)
                i, k_at_start = by, True
                continue
            if not k_at_start:
                _add(segs, min(e, t), s, KERNEL, f"{cats[i]}: {names[i]}", i, begin)
            k_at_start = False
            t = min(t, s)
            res = int(g.k_residual[i])
            b = int(r.k_bind[i])
            if res > 0 and b != 0:
                _add(segs, t, t - res, UNEXPLAINED, "unexplained wait", i, begin)
                t -= res
            if b == LAUNCHED:
                L = int(g.k_launch[i])
                _add(segs, t, int(r.h_start[L]), LAUNCH, "launch latency", i, begin)
                t = min(t, int(r.h_start[L]))
                where, i, at_end = "h", L, False
            elif b in (STREAM, CROSS):
                p = int(g.k_pred[i] if b == STREAM else g.k_cross[i])
                _add(
                    segs, t, int(r.k_end[p]), QUEUE, "device gap" if b == STREAM else "wait on another stream", i, begin
                )
                t = min(t, int(r.k_end[p]))
                where, i = "k", p
            else:
                break
        else:
            o = int(g.h_outer[i])
            if o >= 0:
                i = o
            s, e = int(r.h_start[i]), int(r.h_end[i])
            if at_end and e < t:  # host work after the call, to the step's CPU end
                _add(segs, t, e, HOST, "host work", i, begin)
                t = e
            if at_end:
                if cpu:
                    _add(segs, min(e, t), s, KERNEL, f"{cats[i]}: {names[i]}", i, begin)
                    t = min(t, s)
                elif r.h_end_bind[i] == AWAITED:
                    w = int(g.h_waits[i])
                    _add(segs, min(e, t), int(r.k_end[w]), SYNC, str(g.h_name[i]), i, begin)
                    t = min(t, int(r.k_end[w]))
                    where, i = "k", w
                    continue
                else:
                    _add(segs, min(e, t), s, LAUNCH if g.h_launch[i] else HOST, str(g.h_name[i]), i, begin)
                    t = min(t, s)
            if r.h_bind[i] == HOST_PREV:
                p = int(g.h_prev[i])
                gap_kind = LAUNCH if (not cpu and r.h_start[i] - r.h_end[p] < LAUNCH_GAP_NS) else HOST
                _add(segs, t, int(r.h_end[p]), gap_kind, "host work" if gap_kind == HOST else "dispatch", i, begin)
                t = min(t, int(r.h_end[p]))
                where, i, at_end = "h", p, True
            else:
                break
    if t > begin:
        # Reached the thread's first call: the host's own work before it (from the thread's first
        # recorded activity); reached an activity nothing recorded explains: unexplained.
        if where == "h":
            segs.append(Segment(begin, t, HOST, "host work before the thread's first call", i))
        else:
            segs.append(Segment(begin, t, UNEXPLAINED, "before the path's first node", -1))
    segs.reverse()
    return segs


def _add(segs: list[Segment], hi: int, lo: int, kind: str, label: str, node: int, begin: int) -> None:
    lo = max(lo, begin)
    if hi > lo:
        segs.append(Segment(lo, hi, kind, label, node))


def totals(segs: list[Segment]) -> dict[str, float]:
    """ns per kind over a path."""
    out = {k: 0.0 for k in KINDS}
    for s in segs:
        out[s.kind] += s.end_ns - s.start_ns
    return out
