"""A step's dependencies, read from the trace: the graph the replay runs (``replay.simulate``).

Nodes are the host's runtime calls and the device's activities (kernels, copies, memsets); on a
CPU-only trace, the leaf ops that did the work. The edges are what the format records or what
the physics forces, never a kernel's measured start:

- **host order**: each host thread issues its calls in order; between two calls it does other
  recorded or unrecorded work whose length is the measured gap (``gap``), kept unless a what-if
  cuts it. A call nested in another (a driver call inside a runtime call) moves with its outer call.
- **launch**: a kernel can start only after its launch call began plus the launch-to-start
  latency (``lat``): a distribution measured from the trace's own launches whose stream was free
  (the kernel could start as soon as the driver let it), one median for eager launches and one
  for graph launches (the first kernel a replay runs on each stream).
- **stream order**: a stream runs its activities one after another, with the device's own
  kernel-to-kernel gap (``gap`` model: the median gap of activities that were queued behind their
  predecessor, launched before it ended).
- **cross-stream waits**: an activity that started later than its launch and stream allow waited
  on something; the trace records event waits without saying which event, so the activity on
  another stream of the same device that ended last before it started is taken as what it waited
  for (an event record/wait, a collective's peer kernel on a side stream).
- **collectives across ranks**: on a trace of several ranks whose clocks agree, the same collective
  on every rank (matched by order) ends once the last rank has arrived, plus its own transfer:
  a rank that gets faster waits longer in it (``_collective_groups``).
- **blocking calls**: a synchronising call (``waiting.host.SYNC_CALL``), or a copy call whose own
  copy finished inside it (a copy to pageable host memory returns only when done, per CUDA's API
  synchronisation rules), holds the host until the activity it waited for ends: the activity,
  launched before the call began, that ended last inside the call.

What the dependencies cannot explain stays a named term: an activity that started later than all
of them allow has that lateness as its ``residual`` (the replay's "unexplained wait"), kept in
every what-if and counted in the books, never folded into another cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy as tx
from tracekit.analysis.waiting.host import LAUNCH_CALL, SYNC_CALL, name_mask
from tracekit.trace.model import Trace

EAGER, GRAPH = 0, 1


@dataclass
class Graph:
    """Arrays over host calls (``h_*``, runtime rows or CPU work rows) and device activities
    (``k_*``, kernel rows = GPU work rows), in the trace's row order."""

    device_type: str
    # host calls
    h_start: np.ndarray
    h_end: np.ndarray
    h_prev: np.ndarray  # previous outer call on the thread, -1 for the thread's first
    h_outer: np.ndarray  # the outer call a nested call moves with, -1 for outer calls
    h_gap: np.ndarray  # measured host time between the previous call's end (a thread's first
    #                         call: the thread's first recorded activity, ``h_anchor``) and this call's start
    h_launch: np.ndarray  # bool: a launch call (queues device work without waiting)
    h_sync: np.ndarray  # bool: a synchronising call by its name
    h_waits: np.ndarray  # the activity a blocking call waited for, -1 when it did not block
    h_residual: np.ndarray  # a blocking call's own time after what it waited for ended
    h_thread: np.ndarray  # thread key (rank, pid, tid) as an integer code
    h_name: np.ndarray  # call name (object)
    h_tid: np.ndarray  # thread id as the steps table names it
    # device activities
    k_start: np.ndarray
    k_end: np.ndarray
    k_dur: np.ndarray
    k_launch: np.ndarray  # launching host call, -1 where the trace has none
    k_kind: np.ndarray  # EAGER or GRAPH
    k_pred: np.ndarray  # stream predecessor, -1 for a stream's first
    k_cross: np.ndarray  # the other-stream activity it waited for, -1 when none
    k_residual: np.ndarray  # lateness no dependency explains (ns, >= 0)
    lat: np.ndarray  # launch-to-start latency per kind (ns)
    gap: np.ndarray  # device kernel-to-kernel gap per kind (ns)
    # How many samples each model was measured from, per kind, for the report.
    samples: dict = field(default_factory=dict)
    h_anchor: np.ndarray | None = None  # a thread's first call: the thread's first recorded activity
    # Collectives joined across ranks: each one's group (the same collective on every rank, -1
    # none) and its time after the last rank arrived; ``groups_note`` says why they were not joined.
    k_group: np.ndarray | None = None
    k_tail: np.ndarray | None = None
    groups_note: str | None = None
    # Per activity started inside its stream predecessor's run (programmatic dependent launch):
    # the fraction of the predecessor's run at which it could start; -1 elsewhere.
    k_overlap: np.ndarray | None = None

    @property
    def n_host(self) -> int:
        return len(self.h_start)

    @property
    def n_dev(self) -> int:
        return len(self.k_start)


def build(trace: Trace, work: pd.DataFrame, device_type: str) -> Graph:
    """The dependency graph of a whole trace (every step's nodes; the replay reads steps off it)."""
    if device_type == "cpu":
        return _cpu_graph(work, _thread_starts(trace))
    rt, k = trace.runtime, trace.kernels
    h = _host(rt, k, _thread_starts(trace))
    g = _device(k, h)
    category = work["category"].to_numpy(dtype=object) if "category" in work else None
    g.k_group, g.k_tail, g.groups_note = _collective_groups(k, category)
    return g


def _collective_groups(k: pd.DataFrame, category: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, str | None]:
    """The same collective on every rank of a multi-rank trace, joined: a collective ends on every
    rank once the last rank has arrived, plus its own transfer. Matched by order on each rank (the
    j-th collective kernel of every rank, all of one name), as NCCL and RCCL run a communicator's
    collectives in the order each rank issues them. Joined only when the ranks' clocks agree:
    every group's last start is no later than its first end (a collective cannot finish on one
    rank before every rank began it); otherwise each rank keeps its collectives' measured times."""
    n = len(k)
    group, tail = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    if not n or category is None or "rank" not in k:
        return group, tail, None
    ranks = pd.unique(k["rank"])
    if len(ranks) < 2:
        return group, tail, None
    comm = (category == tx.COMMUNICATION) & (k["kind"].astype(str).to_numpy() == "kernel")
    start, end = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
    rank = k["rank"].to_numpy()
    per = []
    for r in ranks:
        rows = np.flatnonzero(comm & (rank == r))
        per.append(rows[np.argsort(start[rows], kind="stable")])
    if len({len(p) for p in per}) != 1:
        return (
            group,
            tail,
            (
                "collectives not joined across ranks: the ranks ran different numbers of them ("
                + ", ".join(str(len(p)) for p in per)
                + ")"
            ),
        )
    if not len(per[0]):
        return group, tail, None
    stack = np.stack(per)
    names = k["name"].astype(str).to_numpy(dtype=object)[stack]
    if not (names == names[:1]).all():
        return group, tail, "collectives not joined across ranks: the ranks ran different collectives in turn"
    last = start[stack].max(axis=0)
    if (last > end[stack].min(axis=0)).any():
        return (
            group,
            tail,
            (
                "collectives not joined across ranks: the ranks' clocks disagree (a collective "
                "ended on one rank before another began it)"
            ),
        )
    for j in range(stack.shape[1]):
        group[stack[:, j]] = j
        tail[stack[:, j]] = end[stack[:, j]] - last[j]
    return group, tail, f"{stack.shape[1]:,} collectives joined across {len(ranks)} ranks"


def _thread_starts(trace: Trace) -> dict[int, int]:
    """Per thread id, the start of its first recorded activity (op or range): a thread's first call
    is that far into the thread's recorded work, host time a what-if may cut like any other."""
    out: dict[int, int] = {}
    for t in (trace.cpu_ops, trace.annotations):
        if not len(t) or "tid" not in t:
            continue
        first = t.groupby("tid")["start_ns"].min()
        for tid, v in first.items():
            out[int(tid)] = min(out.get(int(tid), int(v)), int(v))
    return out


def _thread_key(table: pd.DataFrame) -> np.ndarray:
    cols = [c for c in ("rank", "pid", "tid") if c in table]
    if not len(table):
        return np.zeros(0, dtype=np.int64)
    return (
        pd.MultiIndex.from_arrays([table[c].to_numpy() for c in cols]).factorize()[0].astype(np.int64)
        if len(cols) > 1
        else pd.factorize(table[cols[0]])[0].astype(np.int64)
    )


def _host(rt: pd.DataFrame, k: pd.DataFrame, thread_start: dict[int, int]) -> dict:
    n = len(rt)
    start = rt["start_ns"].to_numpy(np.int64)
    end = np.maximum(rt["end_ns"].to_numpy(np.int64), start)
    thread = _thread_key(rt)
    order = np.lexsort((-end, start, thread))  # per thread by start; the outer of two at one start first
    prev = np.full(n, -1, np.int64)
    outer = np.full(n, -1, np.int64)
    gap = np.zeros(n, np.int64)
    anchor = start.copy()  # where a thread's first call is measured from
    tids = rt["tid"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
    last_outer = -1
    last_thread = -1
    # One pass per call in thread order: a call inside the last outer call moves with it.
    for i in order.tolist():
        t = thread[i]
        if t != last_thread:
            last_thread, last_outer = t, -1
            first = min(thread_start.get(int(tids[i]), int(start[i])), int(start[i]))
            anchor[i] = first
            gap[i] = start[i] - first
        if last_outer >= 0 and end[i] <= end[last_outer]:
            outer[i] = last_outer
            continue
        if last_outer >= 0:
            prev[i] = last_outer
            gap[i] = max(start[i] - end[last_outer], 0)
        last_outer = i
    names = rt["name"].astype(str).to_numpy(dtype=object) if n else np.zeros(0, dtype=object)
    is_sync = name_mask(rt["name"], SYNC_CALL) if n else np.zeros(0, bool)
    is_launch = (name_mask(rt["name"], LAUNCH_CALL) & ~is_sync) if n else np.zeros(0, bool)
    return {
        "start": start,
        "end": end,
        "prev": prev,
        "outer": outer,
        "gap": gap,
        "sync": is_sync,
        "launch": is_launch,
        "thread": thread,
        "name": names,
        "anchor": anchor,
        "tid": rt["tid"].to_numpy(np.int64) if n else np.zeros(0, np.int64),
    }


def _device(k: pd.DataFrame, h: dict) -> Graph:
    n = len(k)
    start = k["start_ns"].to_numpy(np.int64)
    end = np.maximum(k["end_ns"].to_numpy(np.int64), start)
    launch = k["launch"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
    kind = np.where(k["graph"].to_numpy(bool), GRAPH, EAGER) if n else np.zeros(0, np.int64)
    dev_cols = [c for c in ("rank", "device") if c in k]
    device = (
        pd.MultiIndex.from_arrays([k[c].to_numpy() for c in dev_cols]).factorize()[0]
        if len(dev_cols) > 1 and n
        else pd.factorize(k[dev_cols[0]])[0]
        if n
        else np.zeros(0, np.int64)
    )
    stream = pd.MultiIndex.from_arrays([device, k["stream"].to_numpy()]).factorize()[0] if n else device
    order = np.lexsort((end, start, stream))
    pred = np.full(n, -1, np.int64)
    same = stream[order][1:] == stream[order][:-1]
    pred[order[1:][same]] = order[:-1][same]
    has_l = launch >= 0
    l_start = np.where(has_l, h["start"][np.maximum(launch, 0)] if len(h["start"]) else 0, 0)
    l_end = np.where(has_l, h["end"][np.maximum(launch, 0)] if len(h["start"]) else 0, 0)
    has_p = pred >= 0
    p_end = np.where(has_p, end[np.maximum(pred, 0)], np.iinfo(np.int64).min)
    # A graph's kernels after the first on a stream follow it: only the first measures the launch.
    # (a replay's first kernel: the earliest-starting of those its launch queued)
    first_start = pd.Series(start[has_l]).groupby(launch[has_l]).transform("min").to_numpy()
    first_of_replay = np.ones(n, bool)
    first_of_replay[has_l] = (kind[has_l] == EAGER) | (start[has_l] == first_start)
    free = has_l & (~has_p | (p_end <= l_start)) & first_of_replay
    # A free kernel that another stream's activity could have held (one ended between its launch
    # and its start) measures that wait, not the launch latency: not a sample.
    free &= _cross_waits(start, end, stream, device, np.where(has_l, l_start, start)) < 0
    queued = has_p & has_l & (l_end <= p_end)
    lat = np.zeros(2, np.int64)
    gap = np.zeros(2, np.int64)
    samples = {}
    for kd, label in ((EAGER, "eager"), (GRAPH, "graph")):
        s_lat = (start - l_start)[free & (kind == kd)]
        s_lat = s_lat[s_lat >= 0]
        s_gap = (start - p_end)[queued & (kind == kd)]
        s_gap = s_gap[s_gap >= 0]
        lat[kd] = int(np.median(s_lat)) if len(s_lat) else 0
        gap[kd] = int(np.median(s_gap)) if len(s_gap) else 0
        samples[label] = {"launch_latency": int(len(s_lat)), "device_gap": int(len(s_gap))}
    # A kind with no samples borrows the other's (a graph-only run still has a device gap).
    for a, b in ((EAGER, GRAPH), (GRAPH, EAGER)):
        if not samples[("eager", "graph")[a]]["launch_latency"]:
            lat[a] = lat[b]
        if not samples[("eager", "graph")[a]]["device_gap"]:
            gap[a] = gap[b]
    ready = np.where(has_l, l_start + lat[kind], np.iinfo(np.int64).min)
    # Programmatic dependent launch (CUDA 11.8+, Hopper and later): a kernel may start while its
    # stream predecessor still runs, once the predecessor signals. The signal is a point inside
    # the predecessor's run, at the fraction of it where the follower started.
    p_start = np.where(has_p, start[np.maximum(pred, 0)], 0)
    p_dur = np.where(has_p, end[np.maximum(pred, 0)] - p_start, 0)
    early = has_p & (start < p_end) & (start >= p_start) & (p_dur > 0)
    overlap = np.where(early, (start - p_start) / np.where(p_dur > 0, p_dur, 1), -1.0)
    follow = np.where(has_p, np.where(early, start, p_end + gap[kind]), np.iinfo(np.int64).min)
    earliest = np.maximum(ready, follow)
    cross = _cross_waits(start, end, stream, device, earliest)
    has_x = cross >= 0
    earliest = np.where(has_x, np.maximum(earliest, end[np.maximum(cross, 0)] + gap[kind]), earliest)
    anchored = has_l | has_p | has_x
    residual = np.where(anchored, np.maximum(start - earliest, 0), 0)
    waits, h_res = _blocking(h, start, end, launch, l_start, device)
    return Graph(
        "gpu",
        h["start"],
        h["end"],
        h["prev"],
        h["outer"],
        h["gap"],
        h["launch"],
        h["sync"],
        waits,
        h_res,
        h["thread"],
        h["name"],
        h["tid"],
        start,
        end,
        end - start,
        launch,
        kind,
        pred,
        cross,
        residual,
        lat,
        gap,
        samples,
        k_overlap=overlap,
        h_anchor=h["anchor"],
    )


def _cross_waits(start, end, stream, device, earliest) -> np.ndarray:
    """Per activity that started after its launch and stream allowed: the activity on another
    stream of its device that ended last at or before its start (and after it could have
    started), else -1."""
    n = len(start)
    out = np.full(n, -1, np.int64)
    late = np.flatnonzero(start > earliest)
    if not len(late):
        return out
    # Activities by (device, end): the last ending at or before each late start, on its device.
    order = np.lexsort((end, device))
    d_sorted, e_sorted = device[order], end[order]
    key_sorted = d_sorted.astype(np.float64) * 2.0**62 + e_sorted  # float keys: one searchsorted
    key = device[late].astype(np.float64) * 2.0**62 + start[late]
    pos = np.searchsorted(key_sorted, key, side="right") - 1
    found = np.full(len(late), -1, np.int64)
    # The latest-ending activity before it may be its own stream's predecessor: look a few back.
    for back in range(4):
        p = pos - back
        ok = (found < 0) & (p >= 0)
        cand = order[np.maximum(p, 0)]
        ok &= device[cand] == device[late]
        ok &= stream[cand] != stream[late]
        ok &= end[cand] > earliest[late]
        found = np.where(ok, cand, found)
    out[late] = found
    return out


def _blocking(h: dict, k_start, k_end, launch, l_start, device) -> tuple[np.ndarray, np.ndarray]:
    """Per host call: the activity it waited for (-1 when it did not block) and its own time
    after that activity ended."""
    n = len(h["start"])
    waits = np.full(n, -1, np.int64)
    residual = np.zeros(n, np.int64)
    if not n or not len(k_start):
        return waits, residual
    s, e = h["start"], h["end"]
    # Copies that finished inside the call that queued them: the call waited for its own copy.
    own = np.flatnonzero((launch >= 0))
    own = own[(k_end[own] <= e[launch[own]]) & (k_end[own] > s[launch[own]]) & h["launch"][launch[own]]]
    # A call nested in another (the driver call under a runtime call) blocks its outer call.
    outer = h["outer"]
    to_outer = np.where(outer >= 0, outer, np.arange(n))
    candidates = set(to_outer[np.flatnonzero(h["sync"])].tolist()) | set(to_outer[launch[own]].tolist())
    if not candidates:
        return waits, residual
    order = np.argsort(k_end, kind="stable")
    ends_sorted = k_end[order]
    for i in sorted(candidates):
        hi = int(np.searchsorted(ends_sorted, e[i], side="right")) - 1
        # The latest-ending activity inside the call that was launched before the call began
        # (or is the call's own copy).
        while hi >= 0 and ends_sorted[hi] > s[i]:
            a = order[hi]
            by = launch[a]
            if by < 0 or to_outer[by] == i or l_start[a] <= s[i]:
                waits[i] = a
                residual[i] = e[i] - max(s[i], k_end[a])
                break
            hi -= 1
    return waits, residual


def _cpu_graph(work: pd.DataFrame, thread_start: dict[int, int]) -> Graph:
    """A CPU-only run: each thread runs its leaf ops in order, host time between them kept."""
    n = len(work)
    start = work["start_ns"].to_numpy(np.int64)
    end = np.maximum(work["end_ns"].to_numpy(np.int64), start)
    thread = pd.factorize(work["issue_tid"].to_numpy())[0].astype(np.int64) if n else np.zeros(0, np.int64)
    order = np.lexsort((start, thread))
    prev = np.full(n, -1, np.int64)
    same = thread[order][1:] == thread[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    has = prev >= 0
    tids = work["issue_tid"].to_numpy(np.int64) if n else np.zeros(0, np.int64)
    anchor = (
        np.array([min(thread_start.get(int(t), int(s)), int(s)) for t, s in zip(tids, start)], np.int64)
        if n
        else np.zeros(0, np.int64)
    )
    gap = np.where(has, np.maximum(start - end[np.maximum(prev, 0)], 0), start - anchor)
    zero = np.zeros(n, np.int64)
    none = np.full(n, -1, np.int64)
    false = np.zeros(n, bool)
    empty = np.zeros(0, np.int64)
    return Graph(
        "cpu",
        start,
        end,
        prev,
        none,
        gap,
        false,
        false,
        none,
        zero,
        thread,
        work["name"].astype(str).to_numpy(dtype=object),
        work["issue_tid"].to_numpy(np.int64),
        empty,
        empty,
        empty,
        empty,
        empty,
        empty,
        empty,
        empty,
        np.zeros(2, np.int64),
        np.zeros(2, np.int64),
        {},
        k_overlap=np.zeros(0),
        h_anchor=np.where(has, start, anchor),
    )
