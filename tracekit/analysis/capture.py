"""Shapes for graph-replayed kernels, borrowed from the trace of the graph's capture.

A CUDA/HIP graph replay launches hundreds of kernels from one ``*GraphLaunch``: the
replay trace has no op (and no shapes) behind them. The trace recorded while the
graph was *captured* has both: each launch call made during capture names the
kernel it queued (ROCm's ``hipLaunchKernel``/``hipExtModuleLaunchKernel`` carry a
``kernel`` argument) and sits inside the op that issued it. Replay and capture
queue the same kernels in the same order, so aligning the two name sequences
(``difflib``, tolerant of a few extra or missing kernels) maps each replayed kernel
to the captured op whose shapes describe it.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np
import pandas as pd

from tracekit.trace.links import op_parents
from tracekit.trace.model import Trace

_BEGIN_CAPTURE = ("cudaStreamBeginCapture", "hipStreamBeginCapture")


@dataclass
class OpSource:
    """The op table roofline prices from, and each unit of work's row in it."""

    ops: pd.DataFrame
    parents: np.ndarray
    op: np.ndarray
    note: str | None = None


def own_ops(trace: Trace, work: pd.DataFrame) -> OpSource:
    return OpSource(trace.cpu_ops, op_parents(trace.cpu_ops), work["op"].to_numpy().copy())


def with_capture(trace: Trace, work: pd.DataFrame, capture: Trace) -> OpSource:
    """``own_ops`` plus the capture trace's ops for the replayed kernels that align."""
    base = own_ops(trace, work)
    replayed = np.flatnonzero(work["graph"].to_numpy() & (base.op < 0))
    if not len(replayed):
        base.note = "the capture trace was not needed: no kernel of this trace was replayed from a graph"
        return base
    launches = _captured_launches(capture)
    if not len(launches):
        base.note = (
            f"{capture.path} names no kernels in its launch calls (CUDA traces do not; ROCm traces do), "
            "so the replayed kernels cannot be matched to captured ops"
        )
        return base
    offset = len(trace.cpu_ops)
    ops = pd.concat([trace.cpu_ops, capture.cpu_ops], ignore_index=True)
    ops["name"] = ops["name"].astype("category")
    cap_parents = op_parents(capture.cpu_ops)
    parents = np.concatenate([base.parents, np.where(cap_parents >= 0, cap_parents + offset, -1)])
    op = base.op
    names = work["name"].astype(str).to_numpy()
    starts = work["start_ns"].to_numpy()
    launch = trace.kernels["launch"].to_numpy()
    matched = 0
    # Each graph launch is one replay: align its kernels, in time order, to the capture.
    for _, rows in pd.Series(replayed).groupby(launch[replayed]):
        rows = rows.to_numpy()
        rows = rows[np.argsort(starts[rows], kind="stable")]
        sm = SequenceMatcher(None, list(names[rows]), list(launches["kernel"]), autojunk=False)
        for block in sm.get_matching_blocks():
            for i in range(block.size):
                cap_op = int(launches["op"].iat[block.b + i])
                if cap_op >= 0:
                    op[rows[block.a + i]] = cap_op + offset
                    matched += 1
    note = (
        f"{matched} of {len(replayed)} graph-replayed kernels were matched, by kernel name and order, "
        f"to the ops that queued them in the capture trace {capture.path}"
    )
    return OpSource(ops, parents, op, note)


def _captured_launches(capture: Trace) -> pd.DataFrame:
    """Launch calls made while capturing, in order, with the kernel each queued and its op."""
    rt = capture.runtime
    if "kernel" not in rt or not len(rt):
        return rt.iloc[0:0]
    named = rt[rt["kernel"].notna() & (rt["kernel"] != "")]
    begin = rt[rt["name"].astype(str).isin(_BEGIN_CAPTURE)]
    if len(begin):
        named = named[named["start_ns"] >= begin["start_ns"].min()]
    return named.sort_values("start_ns")
