"""Shapes for graph-replayed kernels, borrowed from the traces of the graphs' capture.

A CUDA/HIP graph replay launches hundreds of kernels from one ``*GraphLaunch``: the
replay trace has no op (and no shapes) behind them. The trace recorded while the
graph was *captured* has both: each launch call made during capture sits inside the
op that issued it (``capture_graphs``). Replay and capture queue the same kernels in the
same order, so:

- where the capture's launch calls name their kernels (ROCm's ``hipLaunchKernel`` /
  ``hipExtModuleLaunchKernel`` carry a ``kernel`` argument), the two name sequences are
  aligned (``difflib``, tolerant of a few extra or missing kernels);
- where they do not (CUDA), a replay of K GPU activities takes a captured graph of exactly
  K launches (kernel launches and the memcpy/memset nodes).

Engines capture one graph per batch size (vLLM's ``capture_<n>_<mode>`` ranges, SGLang's
capture loop), often one file per size (a capture folder): the graphs of every file given
are pooled, each keeping its own batch, and a graph's ops price a replay only when the
replaying step ran that batch. A step whose batch differs from every captured graph's gets
no capture shapes, with the reason ("captured at batch 32, this step ran batch 16"), and is
priced otherwise (the model, with the step's own tokens) or left unknown. Kernels that ran
outside any replay (a piecewise or mixed step's eager ops) are never touched: they keep
their own ops and shapes.

A piecewise step (vLLM ``PIECEWISE``) replays one graph per piece, eager attention between,
and its capture recorded one graph per piece in the same order, many with identical kernels:
the k-th replay of a step takes the k-th graph of a capture of its size holding as many
graphs as the step has replays, where that graph fits the replay as well as any other.

A graph's batch is the ``capture_<n>_<mode>`` range it was captured in; a step's is the
tokens it ran (the rows a graph processes: vLLM keys its graphs by tokens, SGLang's decode
graphs by requests, one token each), else its batch of requests.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

import numpy as np
import pandas as pd

from tracekit.analysis.pricing.capture_graphs import Graph, captured_graphs
from tracekit.trace.links import op_parents
from tracekit.trace.model import Trace

# Captured graphs a replay's kernel names are aligned against, the closest in length first,
# when the batch does not single one out.
_ALIGN_CANDIDATES = 3
# Steps named in a capture file's line of the note, and capture files that priced nothing named
# there; more are counted only.
_STEPS_NAMED = 4
_FILES_NAMED = 3


@dataclass
class OpSource:
    """The op table roofline prices from, and each unit of work's row in it."""

    ops: pd.DataFrame
    parents: np.ndarray
    op: np.ndarray
    note: str | None = None
    # Per unit: why a replayed kernel got no capture shapes (None: no such reason).
    reason: np.ndarray | None = None
    # Per unit priced from a capture: the graph launch (runtime row) it was replayed by, -1
    # elsewhere. Each replay does the whole work of the ops it replays: a captured op's cost
    # is shared among the kernels of one replay, never across replays.
    replay: np.ndarray | None = None


def own_ops(trace: Trace, work: pd.DataFrame) -> OpSource:
    return OpSource(trace.cpu_ops, op_parents(trace.cpu_ops), work["op"].to_numpy().copy())


@dataclass
class _Tally:
    """What the matching did, for the note."""

    matched: int = 0
    replays: int = 0
    by_file: dict = field(default_factory=dict)  # capture file -> [replays priced, their steps]
    mismatches: dict = field(default_factory=dict)  # (step batch, graph batches) -> [kernels refused, steps]
    padded: dict = field(default_factory=dict)  # (step batch, captured batch replayed) -> its steps
    others: int = 0  # replays refused for another reason than their batch
    other_why: str | None = None


def with_capture(
    trace: Trace, work: pd.DataFrame, capture: Trace | Sequence[Trace], steps: pd.DataFrame | None = None
) -> OpSource:
    """``own_ops`` plus the capture traces' ops for the replayed kernels that align with a
    graph captured at the replaying step's batch. ``capture``: one capture trace or several
    (a capture folder's files: one per graph size)."""
    captures = [capture] if isinstance(capture, Trace) else list(capture)
    base = own_ops(trace, work)
    replayed = np.flatnonzero(work["graph"].to_numpy() & (base.op < 0))
    if not len(replayed):
        base.note = "the capture trace was not needed: no kernel of this trace was replayed from a graph"
        return base
    graphs = [g for f, cap in enumerate(captures) for g in captured_graphs(cap, f)]
    named = any(g.kernels is not None for g in graphs)
    if not graphs or (not named and not any(len(g.ops) for g in graphs)):
        base.note = (
            f"{_files_text(captures)} {'holds' if len(captures) == 1 else 'hold'} no stream capture (no "
            "*StreamBeginCapture ... *StreamEndCapture) and names no kernels in its launch calls, so the replayed "
            "kernels cannot be matched to captured ops"
        )
        return base
    cap_file = np.full(len(work), -1, dtype=np.int64)
    cap_op = np.full(len(work), -1, dtype=np.int64)
    replay_of = np.full(len(work), -1, dtype=np.int64)
    reason = np.full(len(work), None, dtype=object)
    tally = _Tally()
    _match(work, replayed, graphs, named, _step_sizes(steps), (cap_file, cap_op, replay_of, reason), tally)
    ops, parents, op = base.ops, base.parents, base.op
    used = np.unique(cap_file[cap_file >= 0]).tolist()
    if used:
        # Only the capture files that priced a replay join the op table (a folder may hold
        # dozens of sizes the run never replayed).
        offsets, at = {}, len(trace.cpu_ops)
        for f in used:
            offsets[f], at = at, at + len(captures[f].cpu_ops)
        ops = pd.concat([trace.cpu_ops] + [captures[f].cpu_ops for f in used], ignore_index=True)
        ops["name"] = ops["name"].astype("category")
        parts = [base.parents]
        for f in used:
            p = op_parents(captures[f].cpu_ops)
            parts.append(np.where(p >= 0, p + offsets[f], -1))
        parents = np.concatenate(parts)
        got = cap_file >= 0
        op[got] = cap_op[got] + np.array([offsets.get(f, 0) for f in range(len(captures))])[cap_file[got]]
    refused = any(r is not None for r in reason[replayed])
    return OpSource(
        ops, parents, op, _note(captures, graphs, named, len(replayed), tally), reason if refused else None, replay_of
    )


def _match(work, replayed, graphs: list[Graph], named: bool, sizes: dict, out, tally: _Tally) -> None:
    """Match each replay (one graph launch's kernels, in time order) to one captured graph,
    filling ``out`` (capture file, capture op, replay, reason per unit) and ``tally``."""
    cap_file, cap_op, replay_of, reason = out
    names = work["name"].astype(str).to_numpy()
    starts = work["start_ns"].to_numpy()
    launch = work["launch"].to_numpy()
    step_of = work["step"].to_numpy() if "step" in work else np.full(len(work), -1)
    o = replayed[np.lexsort((starts[replayed], launch[replayed]))]
    cut = np.flatnonzero(np.diff(launch[o])) + 1
    replays = np.split(o, cut)
    # The replays of each step, in the order they ran: the k-th replay of a piecewise step is
    # the k-th piece of its capture.
    replays.sort(key=lambda rows: (int(step_of[rows[0]]), int(starts[rows[0]])))
    captured = {g.batch for g in graphs if g.batch is not None}
    captures: dict[tuple[int, int], list[int]] = {}  # (file, capture) -> its graphs, in capture order
    for i, g in enumerate(graphs):
        captures.setdefault((g.file, g.capture), []).append(i)
    per_step = pd.Series([int(step_of[rows[0]]) for rows in replays]).value_counts().to_dict()
    # (size, replays in the step) -> the captures of that size holding that many graphs
    whole: dict[tuple, list[list[int]]] = {}
    pools: dict[tuple, tuple[list[int], str | None]] = {}
    aligned: dict[tuple, tuple[int, list[tuple[int, int]]]] = {}  # (names, graph) -> (matches, pairs)
    k, prev = 0, None
    for rows in replays:
        step = int(step_of[rows[0]])
        k, prev = (0, step) if step != prev else (k + 1, prev)
        size = sizes.get(step)
        if (size, len(rows)) not in pools:  # steps of one size repeat their replays' lengths
            pools[(size, len(rows))] = _graphs_for(graphs, size, len(rows), named)
        pool, why = pools[(size, len(rows))]
        if why is not None:
            reason[rows] = why
            if size is not None and captured and size not in captured:
                key = (size, tuple(sorted(captured)))
                got = tally.mismatches.setdefault(key, [0, set()])
                got[0] += len(rows)
                got[1].add(step)
            else:
                tally.others, tally.other_why = tally.others + 1, tally.other_why or why
            continue
        m = per_step[step] if step >= 0 else 0
        if (size, m) not in whole:
            allowed = set(_allowed(graphs, size)[0])
            whole[(size, m)] = [c for c in captures.values() if len(c) == m and all(i in allowed for i in c)]
        # The k-th graph of each capture of this size holding as many graphs as the step has replays.
        ordinal = [c[k] for c in whole[(size, m)]]
        if named:
            key_names = tuple(names[rows])
            best, pick = None, None
            # The ordinal graphs first: one of them wins unless another aligns strictly better.
            for i in dict.fromkeys(ordinal + pool):
                if graphs[i].kernels is None:
                    continue
                if (key_names, i) not in aligned:
                    aligned[(key_names, i)] = _align(key_names, graphs[i])
                got = aligned[(key_names, i)]
                if best is None or got[0] > best[0]:
                    best, pick = got, i
            pairs = best[1] if best else []
        else:
            pick = next((i for i in ordinal if i in pool), pool[0])
            pairs = list(enumerate(graphs[pick].ops.tolist()))
        pairs = [(a, c) for a, c in pairs if c >= 0]
        if not pairs or pick is None:  # pairs come only with the graph they were picked from
            continue
        at = rows[[a for a, _ in pairs]]
        cap_op[at] = [c for _, c in pairs]
        cap_file[at] = graphs[pick].file
        replay_of[at] = launch[rows[0]]
        tally.matched += len(pairs)
        tally.replays += 1
        if size is not None and graphs[pick].batch is not None and graphs[pick].batch != size:
            tally.padded.setdefault((size, graphs[pick].batch), set()).add(step)
        per = tally.by_file.setdefault(graphs[pick].file, [0, set()])
        per[0] += 1
        if step >= 0:
            per[1].add(step)


def _allowed(graphs: list[Graph], size: int | None) -> tuple[list[int], str | None]:
    """The graphs a replay in a step of ``size`` tokens may take its shapes from by batch: those
    captured at that size, else those of unknown batch; or the reason none may."""
    idx = list(range(len(graphs)))
    batches = sorted({g.batch for g in graphs if g.batch is not None})
    if size is None or not batches:
        return idx, None
    same = [i for i in idx if graphs[i].batch == size] or [i for i in idx if graphs[i].batch is None]
    if not same and (padded := _padded_size(batches, size)) is not None:
        same = [i for i in idx if graphs[i].batch == padded]
    if not same:
        return [], (
            f"replayed from a CUDA/HIP graph: the capture trace's graphs were captured at batch "
            f"{_batches_text(tuple(batches))}, this step ran batch {size}: their shapes do not "
            "apply (pass the capture of this batch size)"
        )
    return same, None


def _padded_size(batches: list[int], size: int) -> int | None:
    """The captured size a step of ``size`` replays when no graph was captured at its own: engines
    pad a batch up to the next captured graph (vLLM's ``CudagraphDispatcher`` pads the tokens to
    the next of ``cudagraph_capture_sizes``; SGLang's ``CudaGraphRunner.replay`` takes
    ``bisect_left`` of its captured batch sizes). Taken only where captured sizes lie on both
    sides of the step's, so that the captures given span it; None otherwise."""
    above = [b for b in batches if b > size]
    if not above or not any(b < size for b in batches):
        return None
    return min(above)


def _graphs_for(graphs: list[Graph], size: int | None, length: int, named: bool) -> tuple[list[int], str | None]:
    """Indices of the captured graphs a replay of ``length`` kernels in a step of ``size``
    tokens may take its shapes from, or the reason none may."""
    idx, why = _allowed(graphs, size)
    if why is not None:
        return [], why
    if not named:
        fits = [i for i in idx if len(graphs[i].ops) == length]
        if not fits:
            return [], (
                "replayed from a CUDA/HIP graph: no captured graph in the capture trace launches the "
                f"{length} kernels and copies of this replay"
            )
        seen = sorted({b for b in (graphs[i].batch for i in fits) if b is not None})
        if size is None and len(seen) > 1:
            return [], (
                f"replayed from a CUDA/HIP graph: graphs of this length were captured at batch "
                f"{_batches_text(tuple(seen))} and the step's batch is not in the trace, so which one "
                "replayed is unknown"
            )
        return fits, None
    named_idx = [i for i in idx if graphs[i].kernels is not None]
    if size is None:
        seen = sorted({b for b in (graphs[i].batch for i in named_idx) if b is not None})
        if len(seen) > 1:
            return [], (
                f"replayed from a CUDA/HIP graph: the capture trace holds graphs captured at batch "
                f"{_batches_text(tuple(seen))} and the step's batch is not in the trace, so which one "
                "replayed is unknown"
            )
    named_idx.sort(key=lambda i: abs(len(graphs[i].kernels or ()) - length))
    return named_idx[:_ALIGN_CANDIDATES], None


def _align(names: tuple, g: Graph) -> tuple[int, list[tuple[int, int]]]:
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


def _note(captures: list[Trace], graphs: list[Graph], named: bool, n: int, tally: _Tally) -> str:
    how = (
        "by kernel name and order" if named else "by position in the captured graph (its launch calls name no kernels)"
    )
    r = tally.replays
    note = (
        f"{tally.matched} of {n} graph-replayed kernels were matched, {how}, to the ops that queued them "
        f"in {_files_text(captures)} ({r} replay{'' if r == 1 else 's'} matched a captured graph)"
    )
    if len(captures) > 1:
        # Which file priced which steps: each replay from the graph captured at its own size.
        lines, idle, idle_batches = [], [], set()
        for f, cap in enumerate(captures):
            own = sorted({g.batch for g in graphs if g.file == f and g.batch is not None})
            at = f" (batch {_batches_text(tuple(own))})" if own else ""
            got = tally.by_file.get(f)
            if got is not None:
                lines.append(
                    f"{_name(cap, captures)}{at} priced {got[0]} replay{'' if got[0] == 1 else 's'} "
                    f"{_steps_text(got[1])}"
                )
            elif any(g.file == f for g in graphs):
                idle.append(f"{_name(cap, captures)}{at} priced none")
                idle_batches.update(own)
            else:
                lines.append(f"{_name(cap, captures)} holds no captured graph")
        if len(idle) > _FILES_NAMED:  # a folder of every size the engine captured: the unused ones counted
            span = f" (batch {min(idle_batches)} to {max(idle_batches)})" if idle_batches else ""
            idle = [f"{len(idle)} other files{span} priced none"]
        note += ": " + ", ".join(lines + idle)
    for (size, batches), (kernels, steps) in tally.mismatches.items():
        note += (
            f"; {kernels} kernels of replays at batch {size} ({_steps_text(steps)}) got no capture shapes: "
            f"the capture {'trace' if len(captures) == 1 else 'traces'}' graphs were captured at batch "
            f"{_batches_text(batches)}"
        )
    for (size, padded), steps in sorted(tally.padded.items()):
        note += (
            f"; replays at batch {size} ({_steps_text(steps)}) were priced from the graph captured at "
            f"{padded}, the next captured size above it: engines pad a batch up to the next captured graph "
            "(pass every captured size, or one between is taken for the next)"
        )
    if r and not any(g.batch is not None for g in graphs):
        note += (
            "; the capture trace names no batch size (no capture_<n>_<mode> range), so the graphs' batch "
            "was not checked against the replaying steps'"
        )
    if tally.others and tally.other_why is not None:  # each refusal counted says why
        note += (
            f"; {tally.others} replay{'' if tally.others == 1 else 's'} matched no captured graph: "
            + tally.other_why.removeprefix("replayed from a CUDA/HIP graph: ")
        )
    return note


def _files_text(captures: list[Trace]) -> str:
    if len(captures) == 1:
        return f"the capture trace {captures[0].path}"
    folders = {os.path.dirname(c.path or "") for c in captures}
    where = f" in {folders.pop()}" if len(folders) == 1 else ""
    return f"{len(captures)} capture traces{where}"


def _name(cap: Trace, captures: list[Trace]) -> str:
    """A capture file as the note names it: its file name when all share one folder."""
    one_folder = len({os.path.dirname(c.path or "") for c in captures}) == 1
    return os.path.basename(cap.path or "") if one_folder else str(cap.path)


def _steps_text(steps: set) -> str:
    if not steps:
        return "outside any step"
    listed = sorted(steps)
    word = "step" if len(listed) == 1 else "steps"
    if len(listed) <= _STEPS_NAMED:
        return f"in {word} {', '.join(str(s) for s in listed)}"
    return f"in {len(listed)} steps"


def _batches_text(batches: tuple) -> str:
    return ", ".join(str(b) for b in batches)


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
