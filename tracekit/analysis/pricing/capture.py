"""Shapes for graph-replayed kernels, borrowed from the trace of the graph's capture.

A CUDA/HIP graph replay launches hundreds of kernels from one ``*GraphLaunch``: the
replay trace has no op (and no shapes) behind them. The trace recorded while the
graph was *captured* has both: each launch call made during capture sits inside the
op that issued it. Replay and capture queue the same kernels in the same order, so:

- where the capture's launch calls name their kernels (ROCm's ``hipLaunchKernel`` /
  ``hipExtModuleLaunchKernel`` carry a ``kernel`` argument), the two name sequences are
  aligned (``difflib``, tolerant of a few extra or missing kernels);
- where they do not (CUDA), a replay of K GPU activities takes a captured graph of exactly
  K launches (kernel launches and the memcpy/memset nodes).

Engines capture one graph per batch size (vLLM's ``capture_<n>_<mode>`` ranges, SGLang's
capture loop), and a graph's ops hold the shapes of the batch it was captured at: they
price a replay only when the replaying step ran that batch. A step whose batch differs from
every captured graph's gets no capture shapes, with the reason ("captured at batch 32, this
step ran batch 16"), and is priced otherwise (the model, with the step's own tokens) or
left unknown. Kernels that ran outside any replay (a piecewise or mixed step's eager ops)
are never touched: they keep their own ops and shapes.

A graph's batch is the ``capture_<n>_<mode>`` range it was captured in; a step's is the
tokens it ran (the rows a graph processes: vLLM keys its graphs by tokens, SGLang's decode
graphs by requests, one token each), else its batch of requests.
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
_END_CAPTURE = ("cudaStreamEndCapture", "hipStreamEndCapture")
_LAUNCH_CALLS = ("LaunchKernel", "LaunchKernelEx", "LaunchKernelExC", "ModuleLaunchKernel", "ExtModuleLaunchKernel",
                 "LaunchCooperativeKernel", "MemcpyAsync", "MemsetAsync", "Memcpy2DAsync", "MemsetD32Async",
                 "MemsetD8Async")
# Captured graphs a replay's kernel names are aligned against, the closest in length first,
# when the batch does not single one out.
_ALIGN_CANDIDATES = 3


@dataclass
class OpSource:
    """The op table roofline prices from, and each unit of work's row in it."""

    ops: pd.DataFrame
    parents: np.ndarray
    op: np.ndarray
    note: str | None = None
    # Per unit: why a replayed kernel got no capture shapes (None: no such reason).
    reason: np.ndarray | None = None


def own_ops(trace: Trace, work: pd.DataFrame) -> OpSource:
    return OpSource(trace.cpu_ops, op_parents(trace.cpu_ops), work["op"].to_numpy().copy())


@dataclass
class _Graph:
    ops: np.ndarray  # capture op row of each launch call, in order (-1: launched outside any op)
    kernels: list[str] | None  # the kernel each launch call names (ROCm), "" for unnamed; None: none named
    batch: int | None  # from the capture_<n>_<mode> range around it; None when no range says


def with_capture(trace: Trace, work: pd.DataFrame, capture: Trace, steps: pd.DataFrame | None = None) -> OpSource:
    """``own_ops`` plus the capture trace's ops for the replayed kernels that align with a
    graph captured at the replaying step's batch."""
    base = own_ops(trace, work)
    replayed = np.flatnonzero(work["graph"].to_numpy() & (base.op < 0))
    if not len(replayed):
        base.note = "the capture trace was not needed: no kernel of this trace was replayed from a graph"
        return base
    graphs = _captured_graphs(capture)
    named = any(g.kernels is not None for g in graphs)
    if not graphs or (not named and not any(len(g.ops) for g in graphs)):
        base.note = (
            f"{capture.path} holds no stream capture (no *StreamBeginCapture ... *StreamEndCapture) and names no "
            "kernels in its launch calls, so the replayed kernels cannot be matched to captured ops"
        )
        return base
    offset = len(trace.cpu_ops)
    ops = pd.concat([trace.cpu_ops, capture.cpu_ops], ignore_index=True)
    ops["name"] = ops["name"].astype("category")
    cap_parents = op_parents(capture.cpu_ops)
    parents = np.concatenate([base.parents, np.where(cap_parents >= 0, cap_parents + offset, -1)])
    op = base.op
    reason = np.full(len(work), None, dtype=object)
    names = work["name"].astype(str).to_numpy()
    starts = work["start_ns"].to_numpy()
    launch = trace.kernels["launch"].to_numpy()
    step_of = work["step"].to_numpy() if "step" in work else np.full(len(work), -1)
    sizes = _step_sizes(steps)
    aligned: dict[tuple, tuple[int, list[tuple[int, int]]]] = {}  # (names, graph) -> (matches, pairs)
    matched = replays = refused = 0
    mismatches: dict[tuple[int, tuple], int] = {}  # (step batch, graph batches) -> kernels refused for it
    others, other_why = 0, None  # replays refused for another reason than their batch, and the first reason
    captured = {g.batch for g in graphs if g.batch is not None}
    # Each graph launch is one replay: match its kernels, in time order, to one captured graph.
    for _, rows in pd.Series(replayed).groupby(launch[replayed]):
        rows = rows.to_numpy()
        rows = rows[np.argsort(starts[rows], kind="stable")]
        size = sizes.get(int(step_of[rows[0]]))
        pool, why = _graphs_for(graphs, size, len(rows), named)
        if why is not None:
            reason[rows] = why
            refused += 1
            if size is not None and captured and size not in captured:
                key = (size, tuple(sorted(captured)))
                mismatches[key] = mismatches.get(key, 0) + len(rows)
            else:
                others, other_why = others + 1, other_why or why
            continue
        if named:
            key_names = tuple(names[rows])
            best = None
            for i in pool:
                if (key_names, i) not in aligned:
                    aligned[(key_names, i)] = _align(key_names, graphs[i])
                got = aligned[(key_names, i)]
                if best is None or got[0] > best[0]:
                    best = got
            pairs = best[1] if best else []
            if pairs:
                replays += 1
            for a, cap_op in pairs:
                op[rows[a]] = cap_op + offset
            matched += len(pairs)
        else:
            g = graphs[pool[0]]
            replays += 1
            ok = g.ops >= 0
            op[rows[ok]] = g.ops[ok] + offset
            matched += int(ok.sum())
    how = ("by kernel name and order" if named else
           "by position in the captured graph (its launch calls name no kernels)")
    note = (f"{matched} of {len(replayed)} graph-replayed kernels were matched, {how}, to the ops that queued them "
            f"in the capture trace {capture.path} ({replays} replay{'' if replays == 1 else 's'} matched a "
            "captured graph)")
    for (size, batches), n in mismatches.items():
        note += (f"; {n} kernels of replays at batch {size} got no capture shapes: the capture trace's graphs were "
                 f"captured at batch {_batches_text(batches)}")
    if replays and not any(g.batch is not None for g in graphs):
        note += ("; the capture trace names no batch size (no capture_<n>_<mode> range), so the graphs' batch "
                 "was not checked against the replaying steps'")
    if others:
        note += (f"; {others} replay{'' if others == 1 else 's'} matched no captured graph: "
                 + other_why.removeprefix("replayed from a CUDA/HIP graph: "))
    return OpSource(ops, parents, op, note, reason if refused else None)


def _graphs_for(graphs: list[_Graph], size: int | None, length: int, named: bool) -> tuple[list[int], str | None]:
    """Indices of the captured graphs a replay of ``length`` kernels in a step of ``size``
    tokens may take its shapes from, or the reason none may."""
    batches = sorted({g.batch for g in graphs if g.batch is not None})
    idx = list(range(len(graphs)))
    if size is not None and batches:
        same = [i for i in idx if graphs[i].batch == size]
        if not same:
            unlabelled = [i for i in idx if graphs[i].batch is None]
            if not unlabelled:
                return [], (f"replayed from a CUDA/HIP graph: the capture trace's graphs were captured at batch "
                            f"{_batches_text(tuple(batches))}, this step ran batch {size}: their shapes do not "
                            "apply (pass the capture of this batch size)")
            same = unlabelled
        idx = same
    if not named:
        fits = [i for i in idx if len(graphs[i].ops) == length]
        if not fits:
            return [], ("replayed from a CUDA/HIP graph: no captured graph in the capture trace launches the "
                        f"{length} kernels and copies of this replay")
        seen = sorted({graphs[i].batch for i in fits if graphs[i].batch is not None})
        if size is None and len(seen) > 1:
            return [], (f"replayed from a CUDA/HIP graph: graphs of this length were captured at batch "
                        f"{_batches_text(tuple(seen))} and the step's batch is not in the trace, so which one "
                        "replayed is unknown")
        return fits[:1], None
    named_idx = [i for i in idx if graphs[i].kernels is not None]
    if size is None:
        seen = sorted({graphs[i].batch for i in named_idx if graphs[i].batch is not None})
        if len(seen) > 1:
            return [], (f"replayed from a CUDA/HIP graph: the capture trace holds graphs captured at batch "
                        f"{_batches_text(tuple(seen))} and the step's batch is not in the trace, so which one "
                        "replayed is unknown")
    named_idx.sort(key=lambda i: abs(len(graphs[i].kernels) - length))
    return named_idx[:_ALIGN_CANDIDATES], None


def _align(names: tuple, g: _Graph) -> tuple[int, list[tuple[int, int]]]:
    """(matches, [(replay position, capture op)]) of a replay's kernel names aligned to a graph's."""
    kernels = g.kernels or []
    keep = [j for j, k in enumerate(kernels) if k]
    sm = SequenceMatcher(None, list(names), [kernels[j] for j in keep], autojunk=False)
    pairs = []
    for block in sm.get_matching_blocks():
        for i in range(block.size):
            cap_op = int(g.ops[keep[block.b + i]])
            if cap_op >= 0:
                pairs.append((block.a + i, cap_op))
    return len(pairs), pairs


def _batches_text(batches: tuple) -> str:
    return ", ".join(str(b) for b in batches)


def _captured_graphs(capture: Trace) -> list[_Graph]:
    """Each graph the capture trace recorded: the launch calls between a begin and an end of
    stream capture, in order, with the batch size of the engine's ``capture_<n>_<mode>`` range.
    A trace that names kernels in its launch calls but records no stream capture is one graph."""
    rt = capture.runtime
    if not len(rt):
        return []
    names = rt["name"].astype(str)
    begins = rt[names.isin(_BEGIN_CAPTURE)].sort_values("start_ns")
    ends = rt[names.isin(_END_CAPTURE)].sort_values("start_ns")
    launch = rt[names.str.replace(r"^(cuda|hip|cu)", "", regex=True).isin(_LAUNCH_CALLS)]
    has_names = "kernel" in rt and bool((rt["kernel"].notna() & (rt["kernel"] != "")).any())
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
        mine = mine.sort_values("start_ns")
        batch = next((n for s0, e0, n in ranges if s0 <= b.start_ns <= e0), None)
        graphs.append(_Graph(mine["op"].to_numpy(), _kernel_names(mine) if has_names else None, batch))
    if not graphs and has_names:
        named = rt[rt["kernel"].notna() & (rt["kernel"] != "")].sort_values("start_ns")
        batch = ranges[0][2] if len({n for _, _, n in ranges}) == 1 else None
        graphs.append(_Graph(named["op"].to_numpy(), _kernel_names(named), batch))
    return graphs


def _kernel_names(rows: pd.DataFrame) -> list[str]:
    return ["" if not isinstance(k, str) else k for k in rows["kernel"].tolist()]


def _step_sizes(steps: pd.DataFrame | None) -> dict[int, int]:
    """Per step that states one, the size its graphs are keyed by: the tokens it ran (vLLM
    captures by tokens; a decode step's tokens are its requests), else its batch."""
    if steps is None or not len(steps):
        return {}
    out = {}
    tokens = steps["tokens"] if "tokens" in steps else pd.Series(np.nan, index=steps.index)
    for s, t, b in zip(steps["step"], tokens, steps["batch"]):
        v = t if not pd.isna(t) else b
        if not pd.isna(v):
            out[int(s)] = int(v)
    return out
