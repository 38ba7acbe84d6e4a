"""Ranks side by side: per-rank busy, idle and collective time, the wait for the slowest rank.

A run served tensor-parallel is one trace per rank; ``read_trace`` merges a folder of them into
one ``Trace`` whose tables carry a ``rank`` column. This module splits that trace back into its
ranks, segments each one on its own (so steps are aligned by *index*, rank by rank) and reports,
per rank:

``span_ms``      first device activity's start to the last one's end over the whole trace
                 (GPU: kernels, memcpy and memset; CPU-only trace: the leaf CPU ops, which are the
                 work there, plus the collective ranges)
``gpu_busy_ms``  length of the union of those intervals over all streams
``idle_ms``      span - busy
``kernel_ms``    sum of kernel durations (kernels only; a CPU trace: of its work units)
``collective_ms`` sum of the durations of the rank's collectives: NCCL/RCCL kernels and the
                 custom all-reduce kernels of vLLM/SGLang (``taxonomy``'s communication category,
                 the one place that owns kernel categories); on a CPU-only trace the collective
                 ranges gloo records (``gloo:all_reduce``), else the collective CPU ops
                 (``c10d::allreduce_``, ``record_param_comms``)
``overlap_share`` share of collective time during which a non-collective kernel runs on another
                 stream (CPU: another thread) of the same rank: communication hidden under compute

Wait and skew. A collective ends on every rank at about the same moment: the one when the last
rank arrives. Every other rank sat inside the collective waiting for it, so the last to arrive
spends the *least* time in it. For each collective, a rank's wait is its time in that collective
minus the least time any rank spent in the same collective. Collectives are matched one to one
by order when every rank ran the same number of them (``wait_method`` "per collective");
otherwise by aligned step index, comparing each step's collective time (``per step``); without
steps, over the whole trace (``whole trace``). Only the time every rank was recording counts:
the ranks' profilers start at different moments, and a rank that starts early would otherwise
"wait" in its first collective for a peer that had not begun recording. The straggler is the rank that waited least (the
others wait for it); what the others lose is the sum of their waits, also given as a share of
their time span and of their collective time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.pricing import taxonomy
from tracekit.analysis.steps.segment import Segmentation, segment
from tracekit.analysis.waiting.host import union_intervals
from tracekit.trace.model import Trace

# Per-collective and per-step waits below this are clock jitter, not a wait (ns).
NOISE_NS = 1_000
METHOD_COLLECTIVE, METHOD_STEP, METHOD_TRACE = "per collective", "per step", "whole trace"
_TABLES = ("kernels", "runtime", "cpu_ops", "annotations", "python")


@dataclasses.dataclass
class _Rank:
    """One rank's activities and collectives (times in ns), and its steps."""

    rank: int
    device: str | None
    device_id: int | None
    device_type: str
    act_start: np.ndarray
    act_end: np.ndarray
    act_lane: np.ndarray
    act_kernel: np.ndarray  # bool: counts in kernel_ms
    act_comm: np.ndarray  # bool: a collective
    coll_start: np.ndarray
    coll_end: np.ndarray
    coll_lane: np.ndarray
    coll_step: np.ndarray  # step index of each collective, -1 outside the steps
    steps: pd.DataFrame
    collective_source: str | None


def rank_view(trace: Trace, seg: Segmentation, category: np.ndarray | None = None) -> dict[str, Any] | None:
    """``{"ranks": [...], "summary": {...}}`` for a multi-rank trace or one rank of a larger
    world; None for a single-process trace. ``seg`` is the trace's own segmentation, reused
    when the trace holds one rank, and ``category`` its work's categories (per row of
    ``seg.work``) when the attribution has them already."""
    present = _ranks_in(trace)
    world = _world_size(trace)
    if len(present) < 2 and not (world and world > 1):
        return None
    if len(present) < 2:
        # distributedInfo is untrusted: a rank that is not a whole number ("", "x") counts as unstated.
        stated = (trace.distributed or {}).get("rank")
        rank = present[0] if present else stated if isinstance(stated, int) and not isinstance(stated, bool) else 0
        ranks = [_measure(trace, seg, rank, category)]
    else:
        ranks = []
        for r in present:
            sub = _rank_trace(trace, r)
            ranks.append(_measure(sub, segment(sub), r))
    return _compare(ranks, world)


# --- splitting and measuring ------------------------------------------------------------


def _ranks_in(trace: Trace) -> list[int]:
    seen: set[int] = set()
    for name in _TABLES:
        df = getattr(trace, name)
        if "rank" in df and len(df):
            seen.update(int(r) for r in pd.unique(df["rank"]))
    return sorted(seen)


def _world_size(trace: Trace) -> int | None:
    w = (trace.distributed or {}).get("world_size")
    return int(w) if isinstance(w, int) and not isinstance(w, bool) and w >= 1 else None


def _rank_trace(trace: Trace, rank: int) -> Trace:
    """The rows of one rank, with the link columns (row positions) renumbered to match."""
    keep = {
        n: (getattr(trace, n)["rank"] == rank).to_numpy()
        if "rank" in getattr(trace, n)
        else np.ones(len(getattr(trace, n)), bool)
        for n in _TABLES
    }
    new_pos = {}
    for n in ("runtime", "cpu_ops"):
        # One slot more, read by the -1 links (no launch, no op): an empty table is then still indexable.
        pos = np.full(len(getattr(trace, n)) + 1, -1, dtype=np.int64)
        pos[:-1][keep[n]] = np.arange(int(keep[n].sum()))
        new_pos[n] = pos
    tables = {}
    for n in _TABLES:
        df = getattr(trace, n)[keep[n]].reset_index(drop=True)
        for col, target in (("launch", "runtime"), ("op", "cpu_ops")):
            if col in df and len(df):
                v = df[col].to_numpy()
                df[col] = new_pos[target][np.where(v >= 0, v, -1)].astype(np.int64)
        tables[n] = df
    return dataclasses.replace(trace, **tables, distributed={**(trace.distributed or {}), "rank": rank})


def _measure(trace: Trace, seg: Segmentation, rank: int, category: np.ndarray | None = None) -> _Rank:
    work = seg.work
    kinds = categorical.strings(work["kind"])
    if category is None:
        category = taxonomy.categorize_units(work, trace.cpu_ops, work["op"].to_numpy())[0]
    comm = category == taxonomy.COMMUNICATION
    start = work["start_ns"].to_numpy(dtype=np.int64)
    end = work["end_ns"].to_numpy(dtype=np.int64)
    step = work["step"].to_numpy(dtype=np.int64)
    steps = seg.steps
    if seg.device_type == "gpu":
        lane = work["stream"].to_numpy(dtype=np.int64)
        kernel = kinds == "kernel"
        used = trace.kernels["device"]
        used = used[used >= 0]
        dev_id = int(used.mode().iloc[0]) if len(used) else None
        device = trace.device_name(dev_id) if dev_id is not None else None
        c_sel = comm
        coll = (start[c_sel], end[c_sel], lane[c_sel], step[c_sel])
        source = "communication kernels (NCCL/RCCL, custom all-reduce)" if c_sel.any() else None
    else:
        lane = work["issue_tid"].to_numpy(dtype=np.int64)
        kernel = np.ones(len(work), bool)
        dev_id, device = None, "cpu"
        ann = _collective_ranges(trace)
        if len(ann):
            # gloo runs the collective on its own worker threads and records the range there;
            # the c10d op on the calling thread only enqueues it.
            a0 = ann["start_ns"].to_numpy(dtype=np.int64)
            a1 = ann["end_ns"].to_numpy(dtype=np.int64)
            alane = ann["tid"].to_numpy(dtype=np.int64)
            coll = (a0, a1, alane, _step_of(a0, steps))
            start, end = np.concatenate([start, a0]), np.concatenate([end, a1])
            lane = np.concatenate([lane, alane])
            kernel = np.concatenate([kernel, np.ones(len(a0), bool)])
            comm = np.concatenate([comm, np.ones(len(a0), bool)])
            source = "the collective ranges gloo records (gloo:*)"
        else:
            coll = (start[comm], end[comm], lane[comm], step[comm])
            source = "collective CPU ops (c10d::*, record_param_comms)" if comm.any() else None
    order = np.argsort(coll[0], kind="stable")
    c_start, c_end, c_lane, c_step = (c[order] for c in coll)
    return _Rank(
        rank,
        device,
        dev_id,
        seg.device_type,
        start,
        end,
        lane,
        kernel,
        comm,
        c_start,
        c_end,
        c_lane,
        c_step,
        steps,
        source,
    )


def _collective_ranges(trace: Trace) -> pd.DataFrame:
    """CPU-side ranges that are collectives (``gloo:all_reduce`` on gloo's worker threads)."""
    ann = trace.annotations
    if not len(ann):
        return ann
    cpu = ann[(ann["side"] == "cpu").to_numpy()]
    return cpu[
        categorical.mask(
            cpu["name"], lambda n: n.lower().startswith("gloo:") or taxonomy.categorize("", n) == taxonomy.COMMUNICATION
        )
    ]


def _step_of(t: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Index of the step whose CPU range holds each time, -1 outside every step."""
    out = np.full(len(t), -1, dtype=np.int64)
    if not len(steps) or not len(t):
        return out
    s = steps.sort_values("cpu_start_ns")
    s0 = s["cpu_start_ns"].to_numpy()
    s1 = np.maximum(s["cpu_end_ns"].to_numpy(), s["gpu_end_ns"].to_numpy())
    idx = s["step"].to_numpy()
    pos = np.searchsorted(s0, t, side="right") - 1
    ok = (pos >= 0) & (t <= s1[np.maximum(pos, 0)])
    return np.where(ok, idx[np.maximum(pos, 0)], -1)


def _covered(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a, b) covered by the merged intervals (us, ue), for each pair."""
    if not len(us) or not len(a):
        return np.zeros(len(a), dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(ue - us)]).astype(np.int64)

    def upto(t):
        i = np.searchsorted(us, t, side="right") - 1
        j = np.maximum(i, 0)
        return np.where(i >= 0, before[j] + np.clip(np.minimum(t, ue[j]) - us[j], 0, None), 0)

    return upto(b) - upto(a)


def _overlap_ns(r: _Rank) -> int:
    """Collective time during which non-collective kernels run on another lane of the rank."""
    total = 0
    other = r.act_kernel & ~r.act_comm
    for lane in np.unique(r.coll_lane):
        mine = r.coll_lane == lane
        sel = other & (r.act_lane != lane)
        us, ue = union_intervals(r.act_start[sel], r.act_end[sel])
        total += int(_covered(us, ue, r.coll_start[mine], r.coll_end[mine]).sum())
    return total


# --- comparing ranks --------------------------------------------------------------------


def _compare(ranks: list[_Rank], world: int | None) -> dict[str, Any]:
    notes: list[str] = []
    counts = {r.rank: len(r.steps) for r in ranks}
    aligned = min(counts.values()) if counts else 0
    if len(set(counts.values())) > 1:
        notes.append(
            "the ranks have different step counts ("
            + ", ".join(f"rank {k}: {v}" for k, v in counts.items())
            + f"): steps are aligned by index and only the first {aligned} are compared"
        )
    silent = [r.rank for r in ranks if not len(r.coll_start)]
    if silent:
        notes.append(f"rank{'s' if len(silent) > 1 else ''} {_list(silent)} ran no collectives")
    waits, step_waits, method, reason = _waits([r for r in ranks if len(r.coll_start)], aligned)
    entries = [_entry(r, world, waits.get(r.rank), step_waits.get(r.rank)) for r in ranks]
    summary = _summary(entries, ranks, world, method, reason, aligned, counts, notes)
    return {"ranks": entries, "summary": summary}


def _waits(ranks: list[_Rank], aligned: int) -> tuple[dict, dict, str | None, str | None]:
    """(total wait ns per rank, wait ns per step index per rank, method, why there is none)."""
    if len(ranks) < 2:
        return (
            {},
            {},
            None,
            (
                "only one rank of the run is in the trace: waiting for other ranks cannot be measured"
                if len(ranks) == 1
                else "no rank ran a collective"
            ),
        )
    # The ranks' profilers start at different moments (a rank that starts recording early waits
    # in its first collective for a peer that is not recording yet): only time inside the window
    # every rank records counts, so a collective is clipped to start no earlier than the latest
    # first activity of any rank.
    common = max(_first_ns(r) for r in ranks)
    clipped = {r.rank: np.clip(r.coll_end - np.maximum(r.coll_start, common), 0, None) for r in ranks}
    n = {len(r.coll_start) for r in ranks}
    if len(n) == 1:
        dur = np.stack([clipped[r.rank] for r in ranks])  # ranks x collectives
        wait = dur - dur.min(axis=0)
        wait = np.where(wait < NOISE_NS, 0, wait)
        totals = {r.rank: int(wait[i].sum()) for i, r in enumerate(ranks)}
        per_step = {}
        for i, r in enumerate(ranks):
            inside = r.coll_step >= 0
            per_step[r.rank] = np.bincount(r.coll_step[inside], weights=wait[i][inside], minlength=len(r.steps)).astype(
                np.int64
            )
        return totals, per_step, METHOD_COLLECTIVE, None
    if aligned:
        per = np.stack([_step_collective(r, clipped[r.rank])[:aligned] for r in ranks])
        wait = per - per.min(axis=0)
        wait = np.where(wait < NOISE_NS, 0, wait)
        return (
            {r.rank: int(wait[i].sum()) for i, r in enumerate(ranks)},
            {r.rank: wait[i] for i, r in enumerate(ranks)},
            METHOD_STEP,
            None,
        )
    tot = np.array([int(clipped[r.rank].sum()) for r in ranks])
    wait = tot - tot.min()
    return {r.rank: int(w if w >= NOISE_NS else 0) for r, w in zip(ranks, wait)}, {}, METHOD_TRACE, None


def _first_ns(r: _Rank) -> int:
    """When the rank's recording is known to have begun: its first activity or collective."""
    firsts = [int(a.min()) for a in (r.act_start, r.coll_start) if len(a)]
    return min(firsts) if firsts else 0


def _step_collective(r: _Rank, dur: np.ndarray | None = None) -> np.ndarray:
    """Collective time per step index (``dur``: each collective's counted duration)."""
    dur = r.coll_end - r.coll_start if dur is None else dur
    inside = r.coll_step >= 0
    return np.bincount(r.coll_step[inside], weights=dur[inside], minlength=len(r.steps)).astype(np.int64)


def _entry(r: _Rank, world: int | None, wait_ns: int | None, step_wait: np.ndarray | None) -> dict[str, Any]:
    us, ue = union_intervals(r.act_start, r.act_end)
    span = int(ue[-1] - us[0]) if len(us) else 0
    busy = int((ue - us).sum())
    kernel = int((r.act_end - r.act_start)[r.act_kernel].sum())
    coll = int((r.coll_end - r.coll_start).sum())
    step_coll = _step_collective(r)
    steps = []
    for i, s in enumerate(r.steps.itertuples(index=False)):
        w = step_wait[i] if step_wait is not None and i < len(step_wait) else None
        steps.append(
            {
                "index": int(s.step),
                "phase": s.phase,
                "time_ms": s.duration_ns / 1e6,
                "busy_ms": s.gpu_busy_ns / 1e6,
                "collective_ms": float(step_coll[i]) / 1e6 if i < len(step_coll) else 0.0,
                "wait_ms": float(w) / 1e6 if w is not None else None,
            }
        )
    return {
        "rank": r.rank,
        "world_size": world,
        "device": r.device,
        "device_id": r.device_id,
        "device_type": r.device_type,
        "steps": steps,
        "step_time_ms": float(r.steps["duration_ns"].sum() / 1e6) if len(r.steps) else None,
        "span_ms": span / 1e6,
        "gpu_busy_ms": busy / 1e6,
        "idle_ms": (span - busy) / 1e6,
        "kernel_ms": kernel / 1e6,
        "collectives": int(len(r.coll_start)),
        "collective_ms": coll / 1e6,
        "collective_share": coll / kernel if kernel else None,
        "collective_source": r.collective_source,
        "collective_wait_ms": wait_ns / 1e6 if wait_ns is not None else None,
        "overlap_share": _overlap_ns(r) / coll if coll else None,
    }


def _summary(entries, ranks, world, method, reason, aligned, counts, notes) -> dict[str, Any]:
    present = [e["rank"] for e in entries]
    missing = sorted(set(range(world)) - set(present)) if world else []
    out: dict[str, Any] = {
        "world_size": world,
        "present": present,
        "missing": missing,
        "step_counts": {str(k): v for k, v in counts.items()},
        "aligned_steps": aligned,
        "wait_method": method,
        "straggler": None,
        "lost_ms": None,
        "lost_share": None,
        "lost_share_of_collective": None,
        "reason": reason,
        "notes": notes,
    }
    if missing:
        notes.append(
            f"rank{'s' if len(missing) > 1 else ''} {_list(missing)} of the world of {world} "
            f"{'are' if len(missing) > 1 else 'is'} not in the trace"
        )
    if not world:
        notes.append("the world size is unknown (no distributedInfo): missing ranks cannot be named")
    measured = [e for e in entries if e["collective_wait_ms"] is not None]
    if len(measured) < 2:
        return out
    if max(e["collective_wait_ms"] for e in measured) <= 0:
        out["reason"] = "no rank waited for another inside the collectives: no straggler"
        return out
    straggler = min(measured, key=lambda e: (e["collective_wait_ms"], e["rank"]))
    others = [e for e in measured if e is not straggler]
    lost = sum(e["collective_wait_ms"] for e in others)
    span = sum(e["span_ms"] for e in others)
    coll = sum(e["collective_ms"] for e in others)
    out.update(
        straggler=straggler["rank"],
        lost_ms=lost,
        lost_share=lost / span if span else None,
        lost_share_of_collective=lost / coll if coll else None,
    )
    return out


def _list(ranks: list[int]) -> str:
    """0, 2-5, 7: ranks as compact ranges."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ", ".join(parts)
