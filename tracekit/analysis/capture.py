"""Shapes for graph-replayed kernels, borrowed from the trace of the graph's capture.

A CUDA/HIP graph replay launches hundreds of kernels from one ``*GraphLaunch``: the
replay trace has no op (and no shapes) behind them. The trace recorded while the
graph was *captured* has both: each launch call made during capture sits inside the
op that issued it. Replay and capture queue the same kernels in the same order, so:

- where the capture's launch calls name their kernels (ROCm's ``hipLaunchKernel`` /
  ``hipExtModuleLaunchKernel`` carry a ``kernel`` argument), the two name sequences are
  aligned (``difflib``, tolerant of a few extra or missing kernels);
- where they do not (CUDA), each captured graph's launches (kernel launches and the
  memcpy/memset nodes, between ``*StreamBeginCapture`` and ``*StreamEndCapture``, under
  the engine's ``capture_<n>_<mode>`` range) are matched to a replay by order: a replay of
  K GPU activities takes the captured graph of exactly K launches, preferring the batch
  size of the replaying step.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np
import pandas as pd

from tracekit import frameworks
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


def with_capture(trace: Trace, work: pd.DataFrame, capture: Trace, steps: pd.DataFrame | None = None) -> OpSource:
    """``own_ops`` plus the capture trace's ops for the replayed kernels that align."""
    base = own_ops(trace, work)
    replayed = np.flatnonzero(work["graph"].to_numpy() & (base.op < 0))
    if not len(replayed):
        base.note = "the capture trace was not needed: no kernel of this trace was replayed from a graph"
        return base
    launches = _captured_launches(capture)
    if not len(launches):
        return _by_order(trace, work, capture, base, replayed, steps)
    ops, parents, offset = _joined_ops(trace, capture, base)
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


_LAUNCH_CALLS = ("LaunchKernel", "LaunchKernelEx", "LaunchKernelExC", "ModuleLaunchKernel", "ExtModuleLaunchKernel",
                 "LaunchCooperativeKernel", "MemcpyAsync", "MemsetAsync", "Memcpy2DAsync", "MemsetD32Async",
                 "MemsetD8Async")
_END_CAPTURE = ("cudaStreamEndCapture", "hipStreamEndCapture")


@dataclass
class _Graph:
    ops: np.ndarray  # capture op row of each launch, in order (-1: launched outside any op)
    batch: int | None


def _captured_graphs(capture: Trace) -> list[_Graph]:
    """Each graph the capture trace recorded: the launch calls between a begin and an end of
    stream capture, in order, with the batch size of the engine's ``capture_<n>_<mode>`` range."""
    rt = capture.runtime
    if not len(rt):
        return []
    names = rt["name"].astype(str)
    begins = rt[names.isin(_BEGIN_CAPTURE)].sort_values("start_ns")
    ends = rt[names.isin(_END_CAPTURE)].sort_values("start_ns")
    launch = rt[names.str.replace(r"^(cuda|hip|cu)", "", regex=True).isin(_LAUNCH_CALLS)]
    ann = capture.annotations
    ranges = []
    if len(ann):
        for r in ann[ann["side"] == "cpu"].itertuples():
            parsed = frameworks.capture(str(r.name))
            if parsed:
                ranges.append((int(r.start_ns), int(r.end_ns), parsed[0]))
    graphs = []
    for b in begins.itertuples():
        later = ends[(ends["start_ns"] > b.start_ns) & (ends["tid"] == b.tid)]
        if not len(later):
            continue
        e = int(later["start_ns"].iloc[0])
        mine = launch[(launch["tid"] == b.tid) & (launch["start_ns"] > b.start_ns) & (launch["start_ns"] < e)]
        batch = next((n for s0, e0, n in ranges if s0 <= b.start_ns <= e0), None)
        graphs.append(_Graph(mine.sort_values("start_ns")["op"].to_numpy(), batch))
    return graphs


def _by_order(trace: Trace, work: pd.DataFrame, capture: Trace, base: OpSource, replayed: np.ndarray,
              steps: pd.DataFrame | None) -> OpSource:
    """Replayed kernels matched to captured ops by position within each captured graph."""
    graphs = _captured_graphs(capture)
    if not graphs:
        base.note = (
            f"{capture.path} holds no stream capture (no *StreamBeginCapture ... *StreamEndCapture) and names no "
            "kernels in its launch calls, so the replayed kernels cannot be matched to captured ops"
        )
        return base
    ops, parents, offset = _joined_ops(trace, capture, base)
    op = base.op
    starts = work["start_ns"].to_numpy()
    launch = trace.kernels["launch"].to_numpy()
    step_batch = _step_batches(steps)
    matched = replays = 0
    for _, rows in pd.Series(replayed).groupby(launch[replayed]):
        rows = rows.to_numpy()
        rows = rows[np.argsort(starts[rows], kind="stable")]
        fits = [g for g in graphs if len(g.ops) == len(rows)]
        if not fits:
            continue
        batch = step_batch.get(int(work["step"].iat[rows[0]])) if "step" in work else None
        if batch is not None:
            fits.sort(key=lambda g: (g.batch is None, (g.batch or 0) < batch, abs((g.batch or 0) - batch)))
        g = fits[0]
        replays += 1
        ok = g.ops >= 0
        op[rows[ok]] = g.ops[ok] + offset
        matched += int(ok.sum())
    note = (
        f"{matched} of {len(replayed)} graph-replayed kernels were matched, by position in the captured graph "
        f"(its launch calls name no kernels), to the ops that queued them in the capture trace {capture.path} "
        f"({replays} replays matched a captured graph of the same length)"
    )
    return OpSource(ops, parents, op, note)


def _joined_ops(trace: Trace, capture: Trace, base: OpSource) -> tuple[pd.DataFrame, np.ndarray, int]:
    """The trace's ops followed by the capture's (rows of the capture offset), with parents."""
    offset = len(trace.cpu_ops)
    ops = pd.concat([trace.cpu_ops, capture.cpu_ops], ignore_index=True)
    ops["name"] = ops["name"].astype("category")
    cap_parents = op_parents(capture.cpu_ops)
    parents = np.concatenate([base.parents, np.where(cap_parents >= 0, cap_parents + offset, -1)])
    return ops, parents, offset


def _step_batches(steps: pd.DataFrame | None) -> dict[int, int]:
    """Batch size of each step that states one: engines capture one graph per batch size."""
    if steps is None or not len(steps):
        return {}
    return {int(s): int(b) for s, b in zip(steps["step"], steps["batch"]) if not np.isnan(b)}


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
