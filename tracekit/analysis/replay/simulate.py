"""Run a dependency graph (``replay.graph``) forward from its durations: the replayed times.

Every node starts when its dependencies allow, never at its measured time (only a thread's
first call, and an activity with no launch, stream predecessor or cross-stream wait in the
trace, keep their measured start: nothing recorded says what they waited for):

- a host call starts after the thread's previous call ended plus the host time between them;
  it ends its own duration later, or, when it blocks, its own time after the activity it waited
  for ends (``Graph.h_residual``); a call nested in another keeps its place inside its outer call;
- an activity starts at the latest of: its launch call's start plus the launch latency, its
  stream predecessor's end plus the device gap, the end of the activity it waited for on another
  stream plus the device gap; then its unexplained lateness (``Graph.k_residual``), when kept.

Each node records which dependency set its time (``bind``), so the critical path of a step is a
walk back from its last node (``replay.critical``). What-ifs change only the inputs (``Inputs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracekit.analysis.replay.graph import Graph

# What set a node's start: its host predecessor / launch, stream, cross-stream wait, or nothing.
ANCHOR, HOST_PREV, LAUNCHED, STREAM, CROSS = 0, 1, 2, 3, 4
# What set a host call's end: its own time, or the activity it waited for.
OWN, AWAITED = 0, 1


@dataclass
class Inputs:
    """The durations and rules a replay runs with; ``Inputs.measured(g)`` replays the trace as it ran."""

    h_dur: np.ndarray
    h_gap: np.ndarray
    h_blocks: np.ndarray  # bool: the call may block (a removed sync does not)
    k_dur: np.ndarray
    lat: np.ndarray  # per kind
    gap: np.ndarray  # per kind
    k_residual: np.ndarray

    @classmethod
    def measured(cls, g: Graph, *, residuals: bool = True) -> Inputs:
        return cls(
            h_dur=g.h_end - g.h_start,
            h_gap=g.h_gap.copy(),
            h_blocks=g.h_waits >= 0,
            k_dur=g.k_dur.astype(np.int64).copy(),
            lat=g.lat.copy(),
            gap=g.gap.copy(),
            k_residual=g.k_residual.copy() if residuals else np.zeros_like(g.k_residual),
        )


@dataclass
class Replayed:
    h_start: np.ndarray
    h_end: np.ndarray
    k_start: np.ndarray
    k_end: np.ndarray
    h_bind: np.ndarray  # ANCHOR or HOST_PREV
    h_end_bind: np.ndarray  # OWN or AWAITED
    k_bind: np.ndarray  # ANCHOR, LAUNCHED, STREAM or CROSS
    # A joined collective whose end the last rank's arrival set: that rank's collective; -1 otherwise.
    k_end_by: np.ndarray | None = None


def run(g: Graph, x: Inputs) -> Replayed:
    nh, nk = g.n_host, g.n_dev
    hs = [0] * nh
    he = [0] * nh
    ks = [0] * nk
    ke = [0] * nk
    h_bind = [ANCHOR] * nh
    h_end_bind = [OWN] * nh
    k_bind = [ANCHOR] * nk
    done_h = [False] * nh
    done_k = [False] * nk
    m_hs, m_he = g.h_start.tolist(), g.h_end.tolist()
    anchor = (g.h_anchor if g.h_anchor is not None else g.h_start).tolist()
    prev, outer, waits = g.h_prev.tolist(), g.h_outer.tolist(), g.h_waits.tolist()
    h_dur, h_gap, blocks = x.h_dur.tolist(), x.h_gap.tolist(), x.h_blocks.tolist()
    h_res = g.h_residual.tolist()
    m_ks = g.k_start.tolist()
    launch, pred, cross, kind = g.k_launch.tolist(), g.k_pred.tolist(), g.k_cross.tolist(), g.k_kind.tolist()
    k_dur, k_res = x.k_dur.tolist(), x.k_residual.tolist()
    lat, gap = x.lat.tolist(), x.gap.tolist()
    overlap = g.k_overlap.tolist() if g.k_overlap is not None else [-1.0] * nk
    m_dur = (g.h_end - g.h_start).tolist()

    def nested(i: int) -> None:
        o = outer[i]
        d = m_dur[o]
        scale = h_dur[o] / d if d > 0 else 0.0
        hs[i] = hs[o] + int((m_hs[i] - m_hs[o]) * scale)
        he[i] = hs[i] + int(m_dur[i] * scale)
        done_h[i] = True

    # Collectives joined across ranks end at their own end event, once every rank's has started.
    group = g.k_group if g.k_group is not None else np.full(nk, -1, np.int64)
    joined = np.flatnonzero(group >= 0)
    members: dict[int, list[int]] = {}
    for i in joined.tolist():
        members.setdefault(int(group[i]), []).append(i)
    tail = g.k_tail.tolist() if g.k_tail is not None else [0] * nk
    m_kdur = g.k_dur.tolist()
    end_by = [-1] * nk
    # Events in measured order; at one instant a collective's end, a blocking call's end, then a
    # call's start, then an activity's start (each depends only on events before it in this order).
    blocking = [i for i in range(nh) if waits[i] >= 0 and outer[i] < 0]
    keys = np.concatenate(
        [
            g.k_end[joined],
            np.asarray(m_he, np.int64)[blocking] if blocking else np.zeros(0, np.int64),
            g.h_start,
            g.k_start,
        ]
    )
    kinds = np.concatenate(
        [
            np.full(len(joined), 3, np.int8),
            np.zeros(len(blocking), np.int8),
            np.ones(nh, np.int8),
            np.full(nk, 2, np.int8),
        ]
    )
    idx = np.concatenate([joined, np.asarray(blocking, np.int64), np.arange(nh), np.arange(nk)])
    order = np.lexsort((np.where(kinds == 3, -1, kinds), keys))
    for e_kind, i in zip(kinds[order].tolist(), idx[order].tolist()):
        if e_kind == 3:
            arrived, last = ks[i], -1
            for m in members[int(group[i])]:
                if done_k[m] and ks[m] > arrived:
                    arrived, last = ks[m], m
            d = m_kdur[i]
            ke[i] = arrived + (int(tail[i] * k_dur[i] / d) if d > 0 else k_dur[i])
            end_by[i] = last
        elif e_kind == 1:
            if outer[i] >= 0:
                if not done_h[i] and done_h[outer[i]]:
                    nested(i)
                continue
            p = prev[i]
            if p >= 0:
                hs[i] = he[p] + h_gap[i]
                h_bind[i] = HOST_PREV
            else:
                hs[i] = anchor[i] + h_gap[i]
            he[i] = hs[i] + h_dur[i]  # a blocking call's end is settled at its end event
            done_h[i] = True
        elif e_kind == 0:
            w = waits[i]
            if blocks[i] and done_k[w] and ke[w] > hs[i]:
                he[i] = ke[w] + h_res[i]
                h_end_bind[i] = AWAITED
            else:  # it did not wait (or may not): its own time only
                he[i] = hs[i] + h_res[i]
        else:
            t = None
            b = ANCHOR
            L = launch[i]
            kd = kind[i]
            if L >= 0:
                if not done_h[L] and outer[L] >= 0 and done_h[outer[L]]:
                    nested(L)
                if done_h[L]:
                    t, b = hs[L] + lat[kd], LAUNCHED
            p = pred[i]
            if p >= 0 and done_k[p]:
                f = overlap[i]
                v = ks[p] + int(f * (ke[p] - ks[p])) if f >= 0 else ke[p] + gap[kd]
                if t is None or v > t:
                    t, b = v, STREAM
            q = cross[i]
            if q >= 0 and done_k[q]:
                v = ke[q] + gap[kd]
                if t is None or v > t:
                    t, b = v, CROSS
            if t is None:
                t = m_ks[i]
            else:
                t += k_res[i]
            ks[i] = t
            ke[i] = t + k_dur[i]
            k_bind[i] = b
            done_k[i] = True
    return Replayed(
        np.asarray(hs, np.int64),
        np.asarray(he, np.int64),
        np.asarray(ks, np.int64),
        np.asarray(ke, np.int64),
        np.asarray(h_bind, np.int8),
        np.asarray(h_end_bind, np.int8),
        np.asarray(k_bind, np.int8),
        np.asarray(end_by, np.int64),
    )
