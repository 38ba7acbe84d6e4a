"""The work table: every unit of device work a trace holds, and the step each was issued in.

Takes a trace and gives one row per unit of work (GPU kernels, memcpy and memset with the
host call that launched each, found through the correlation id; on a CPU-only trace the leaf
aten ops), and, given step ranges, the step of each unit: the range that contains the moment
it was issued on the same thread (``assign``). ``segment`` builds on both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.trace.links import op_parents
from tracekit.trace.model import Trace

# The launch grid's and block's dimensions (-1: not recorded), carried from the kernels table.
GRID_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
# ``issue_ns`` of work whose launch the trace does not hold: "no time". The Chrome format allows
# times below zero (a trace re-based to an event inside it), so the mark lies below any clock a
# trace can hold; a -1 tested with ``>= 0`` read every launch below zero as missing (no steps).
NO_TIME = np.iinfo(np.int64).min


def work_table(trace: Trace) -> tuple[pd.DataFrame, str]:
    """The units of device work: GPU activities, or leaf CPU ops on a CPU-only trace."""
    if len(trace.kernels):
        k = trace.kernels
        rt = trace.runtime
        launch = k["launch"].to_numpy()
        has = launch >= 0
        at = np.maximum(launch, 0)
        issue_ns = np.where(has, rt["start_ns"].to_numpy()[at] if len(rt) else NO_TIME, NO_TIME)
        issue_tid = np.where(has, rt["tid"].to_numpy()[at] if len(rt) else -1, -1)
        work = pd.DataFrame(
            {
                "name": k["name"],
                "kind": k["kind"],
                "start_ns": k["start_ns"],
                "end_ns": k["end_ns"],
                "dur_ns": k["dur_ns"],
                "op": k["op"],
                "launch": launch.astype(np.int64),
                "stream": k["stream"],
                "graph": k["graph"],
                "ctas": k["ctas"],
                **{g: k[g] for g in GRID_COLUMNS},
                "issue_ns": issue_ns.astype(np.int64),
                "issue_tid": issue_tid.astype(np.int64),
            }
        )
        return work, "gpu"
    ops = trace.cpu_ops
    leaf = _compute_leaves(ops)
    leaves = ops.iloc[leaf]
    work = pd.DataFrame(
        {
            "name": leaves["name"].to_numpy(),
            "kind": "cpu_op",
            "start_ns": leaves["start_ns"].to_numpy(),
            "end_ns": leaves["end_ns"].to_numpy(),
            "dur_ns": leaves["dur_ns"].to_numpy(),
            "op": leaf.astype(np.int64),
            "launch": -1,
            "stream": -1,
            "graph": False,
            "ctas": -1,
            **{g: -1 for g in GRID_COLUMNS},
            "issue_ns": leaves["start_ns"].to_numpy(),
            "issue_tid": leaves["tid"].to_numpy(),
        }
    )
    return work, "cpu"


# Ops that only make views or allocate: they take no time worth attributing, and
# treating them as work would hide the GEMM that contains them (aten::mm calls
# aten::resolve_conj and aten::as_strided, so it is not a leaf of the op tree).
_METADATA_OPS = frozenset(
    "aten::" + n
    for n in (
        "view as_strided resolve_conj resolve_neg empty empty_strided empty_like reshape _unsafe_view t "
        "transpose expand expand_as slice select unsqueeze squeeze permute detach alias lift_fresh "
        "_reshape_alias unflatten flatten split chunk unbind narrow view_as_real view_as_complex "
        "_local_scalar_dense item is_nonzero size stride dim numel"
    ).split()
)


def _compute_leaves(ops: pd.DataFrame) -> np.ndarray:
    """Rows of the ops that do the work on a CPU-only trace: non-metadata ops none of
    whose descendants is a non-metadata op."""
    parents = op_parents(ops)
    real = ~categorical.isin(ops["name"], _METADATA_OPS)
    has_real_below = np.zeros(len(ops), dtype=bool)
    frontier = parents[real & (parents >= 0)]
    while len(frontier):
        frontier = frontier[~has_real_below[frontier]]
        has_real_below[frontier] = True
        frontier = parents[frontier]
        frontier = frontier[frontier >= 0]
    return np.flatnonzero(real & ~has_real_below)


# --- assignment -------------------------------------------------------------------


def assign(work: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Step index of each unit of work: the range containing its issue time, same thread first."""
    step = np.full(len(work), -1, dtype=np.int64)
    if not len(ranges) or not len(work):
        return step
    issue = work["issue_ns"].to_numpy()
    tid = work["issue_tid"].to_numpy()
    has = issue != NO_TIME
    r_start = ranges["start"].to_numpy(dtype=np.int64)
    r_end = ranges["end"].to_numpy(dtype=np.int64)
    r_tid = ranges["tid"].to_numpy(dtype=np.int64)
    for t in np.unique(r_tid):
        idx = np.flatnonzero(r_tid == t)
        idx = idx[np.argsort(r_start[idx])]
        mine = np.flatnonzero(has & (tid == t))
        step[mine] = _containing(r_start[idx], r_end[idx], idx, issue[mine])
    # Work issued from a thread with no step ranges (e.g. a separate launcher
    # thread) falls back to time alone.
    rest = np.flatnonzero(has & (step < 0) & ~np.isin(tid, r_tid))
    if len(rest):
        idx = np.argsort(r_start)
        step[rest] = _containing(r_start[idx], r_end[idx], idx, issue[rest])
    return step


def _containing(starts: np.ndarray, ends: np.ndarray, ids: np.ndarray, t: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(starts, t, side="right") - 1
    ok = (pos >= 0) & (t <= ends[np.maximum(pos, 0)])
    return np.where(ok, ids[np.maximum(pos, 0)], -1)
