"""Where the steps are: the CPU-side range of every step a trace shows, before work is assigned.

Takes a trace and gives range rows (``RANGE_COLUMNS``: start, end, thread, and what the
source states of phase, tokens, batch and sides), from the strongest source that has any:
tracekit's markers and engine annotations (``annotated_ranges``), engine step frames
(``frame_ranges``), else passes inferred from the trace (``inferred_passes``: token-embedding
anchors, module spans, the launch pattern, ``ProfilerStep#N``, the whole trace). Also the
range clean-ups ``segment`` applies (``drop_nested``, ``drop_empty``) and the training-run
test (``is_training``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.steps import evidence
from tracekit.analysis.steps.launches import launch_steps
from tracekit.analysis.steps.work import NO_TIME, work_table
from tracekit.frameworks import SOURCE_INFERRED, SOURCE_LAUNCHES, SOURCE_MARKERS, SOURCE_ORDER, UNKNOWN
from tracekit.trace.model import Trace

_TRAINING_OP_RE = r"Backward|autograd::engine::evaluate_function"
# Malformed annotations are reported by name, a few at most.
_MAX_PROBLEM_NOTES = 5
# A window of a trace whose steps are inferred (no step is named): the steps inferred once over
# the whole trace that are this window's, ``{"bounds": [[start, end, tid, label], ...], "source",
# "notes"}`` (analysis.windows puts it in the metadata), so each window's steps are the whole trace's.
GIVEN_STEPS = "tracekit_given_steps"
# The columns of a range row, in order: one row per step range found.
RANGE_COLUMNS = [
    "start",
    "end",
    "tid",
    "phase",
    "source",
    "evidence",
    "label",
    "tokens",
    "batch",
    "prefill_side",
    "decode_side",
]


# --- annotated ranges ----------------------------------------------------------------


def annotated_ranges(trace: Trace, notes: list[str]) -> list[tuple]:
    """One range row (``RANGE_COLUMNS``) per annotated step; malformed annotations noted."""
    ann = trace.annotations
    if not len(ann):
        return []
    cpu = ann[ann["side"] == "cpu"]
    ours: list[tuple] = []
    framework: list[tuple] = []
    problems: dict[str, int] = {}
    # Each distinct name is parsed once; only the rows whose name describes a step are walked.
    names = categorical.category_strings(cpu["name"])
    parsed_of = [frameworks.parse_annotation(n) for n in names]
    # Names shaped like a step annotation that no grammar reads (a newer engine version): said.
    unread = [text for n, q in zip(names, parsed_of) if q is None and (text := frameworks.unread_step_name(n))]
    for text in unread[:_MAX_PROBLEM_NOTES]:
        notes.append(f"{text}: its ranges are not taken as steps")
    more = len(unread) - _MAX_PROBLEM_NOTES
    if more > 0:
        notes.append(
            "1 more range name looks like a step annotation tracekit does not read"
            if more == 1
            else f"{more} more range names look like step annotations tracekit does not read"
        )
    codes = categorical.codes(cpu["name"])
    rows = np.flatnonzero(np.array([q is not None for q in parsed_of] + [False], dtype=bool)[codes])
    for code, start, end, tid in zip(
        codes[rows].tolist(),
        cpu["start_ns"].to_numpy()[rows].tolist(),
        cpu["end_ns"].to_numpy()[rows].tolist(),
        cpu["tid"].to_numpy()[rows].tolist(),
    ):
        name, parsed = names[code], parsed_of[code]
        if parsed.problem:
            problems[parsed.problem] = problems.get(parsed.problem, 0) + 1
        row = (
            start,
            end,
            tid,
            parsed.phase,
            parsed.source,
            parsed.evidence,
            name,
            parsed.tokens,
            parsed.batch,
            parsed.prefill,
            parsed.decode,
        )
        (ours if parsed.source == SOURCE_MARKERS else framework).append(row)
    for text, count in list(problems.items())[:_MAX_PROBLEM_NOTES]:
        notes.append(f"{text}{f' ({count} ranges)' if count > 1 else ''}: that part is ignored")
    if len(problems) > _MAX_PROBLEM_NOTES:
        notes.append(f"{len(problems) - _MAX_PROBLEM_NOTES} more malformed step annotations")
    # tracekit's markers, where present, are the whole truth for the trace.
    return ours or framework


def frame_ranges(trace: Trace) -> list[tuple]:
    """Range rows for an engine's per-step Python frames (vLLM ``execute_model``, ...)."""
    py = trace.python
    if not len(py):
        return []
    names = py["name"].cat.categories if hasattr(py["name"], "cat") else pd.unique(py["name"])
    sources = {str(n): frameworks.step_frame_source(str(n)) for n in names}
    sources = {n: src for n, src in sources.items() if src}
    if not sources:
        return []
    sel = py[categorical.isin(py["name"], sources)]
    return [
        (
            int(r.start_ns),
            int(r.end_ns),
            int(r.tid),
            UNKNOWN,
            sources[str(r.name)],
            None,
            str(r.name),
            None,
            None,
            None,
            None,
        )
        for r in sel.itertuples()
    ]


def drop_nested(ranges: pd.DataFrame) -> pd.DataFrame:
    """Keep the outermost of nested step ranges on a thread (SGLang writes two per step)."""
    if not len(ranges):
        return ranges
    ranges = ranges.sort_values(["tid", "start", "end"], ascending=[True, True, False]).reset_index(drop=True)
    n = len(ranges)
    tid = ranges["tid"].to_numpy()
    end = ranges["end"].to_numpy()
    # Sorted by start on each thread, a range is nested exactly when it ends by the end of
    # the last range kept before it; kept ranges' ends only grow, so that end is the running
    # maximum of the thread's earlier ends. The thousands of steps of a serving run are
    # settled in a few vector passes, and only the nested ones are visited.
    first = np.r_[True, tid[1:] != tid[:-1]]
    earlier = np.r_[end[:1], ranges.groupby("tid", sort=False)["end"].cummax().to_numpy()[:-1]]
    nested = ~first & (end <= earlier)
    if not nested.any():
        return ranges.sort_values("start").reset_index(drop=True)
    outer_of = np.maximum.accumulate(np.where(nested, -1, np.arange(n)))
    merged = ("phase", "source", "evidence", "label", "tokens", "batch", "prefill_side", "decode_side")
    col = {c: ranges[c].tolist() for c in merged}
    touched = set()
    for i in np.flatnonzero(nested).tolist():
        o = int(outer_of[i])
        # Nested (SGLang wraps its step[...] range in an execute_... one): keep the outer
        # extent, the stronger source's verdict, and every count stated.
        if SOURCE_ORDER.index(col["source"][i]) < SOURCE_ORDER.index(col["source"][o]):
            for c in ("phase", "source", "evidence", "label"):
                col[c][o] = col[c][i]
                touched.add(c)
        for c in ("tokens", "batch"):
            if pd.isna(col[c][o]) and not pd.isna(col[c][i]):
                col[c][o] = col[c][i]
                touched.add(c)
        for c in ("prefill_side", "decode_side"):
            mine, theirs = col[c][o], col[c][i]
            if theirs is not None and not isna(theirs):
                col[c][o] = theirs.merged(mine) if mine is not None and not isna(mine) else theirs
                touched.add(c)
    for c in touched:
        ranges[c] = pd.Series(col[c], dtype=ranges[c].dtype)
    return ranges[~nested].sort_values("start").reset_index(drop=True)


def isna(value) -> bool:
    """Whether a range cell is a float NaN (a side or count pandas left missing)."""
    return isinstance(value, float) and np.isnan(value)


def drop_empty(ranges: pd.DataFrame, work: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Ranges that own at least one unit of GPU work, and how many were dropped."""
    owned = np.bincount(work["step"].to_numpy()[work["step"].to_numpy() >= 0], minlength=len(ranges))
    keep = owned[: len(ranges)] > 0
    return ranges[keep].reset_index(drop=True), int((~keep).sum())


# --- inferred passes -----------------------------------------------------------------


def is_training(trace: Trace) -> bool:
    """Whether the trace is a training run (backward ops, optimizer steps): no steps are inferred for it."""
    return _is_training(trace)


def _is_training(trace: Trace) -> bool:
    names = pd.Series(trace.cpu_ops["name"].cat.categories if len(trace.cpu_ops) else [], dtype=object)
    if len(names) and names.str.contains(_TRAINING_OP_RE).any():
        return True
    ann = trace.annotations["name"].astype(str) if len(trace.annotations) else pd.Series([], dtype=object)
    return bool(ann.str.startswith("Optimizer.step").any())


def inferred_passes(trace: Trace, work: pd.DataFrame, notes: list[str]) -> list[tuple]:
    """Forward passes of an unannotated trace, each classified from its op shapes.

    A pass starts at an *anchor*: a token-embedding lookup (the first thing a
    language model's forward does) or else the start of an outermost ``nn.Module``
    span, and lasts until the next anchor on its thread; the first pass takes in
    everything before it and the last everything after, so no work between passes
    is lost (a sampler after the model, a graph replay outside any module span).
    Without anchors: steps from the launch pattern, then ``ProfilerStep#N`` ranges,
    then the whole trace as one pass.
    """
    ops = trace.cpu_ops
    if not len(ops) and not len(trace.kernels):
        return []
    given = trace.metadata.get(GIVEN_STEPS)
    if given is not None:  # a window of a split trace: the steps inferred once over the whole trace
        bounds, source = [tuple(b) for b in given["bounds"]], given["source"]
        notes.extend(given.get("notes") or [])
    else:
        bounds, source = inferred_bounds(trace, work, notes)
    out = []
    for (start, end, tid, label), (phase, why, tokens, batch) in zip(bounds, evidence.shape_evidence_many(ops, bounds)):
        out.append((start, end, tid, phase, source, why, label, tokens, batch, None, None))
    return out


def inferred_bounds(
    trace: Trace, work: pd.DataFrame | None = None, notes: list[str] | None = None
) -> tuple[list[tuple[int, int, int, str]], str]:
    """``(start, end, tid, label)`` of each inferred step (``inferred_passes``, before its
    classification) and their source. ``work`` is the trace's work table (made when None)."""
    notes = [] if notes is None else notes
    ops = trace.cpu_ops
    if work is None:
        work = work_table(trace)[0]
    anchors = (_embedding_anchors(ops) if len(ops) else []) or _module_anchors(trace)
    source = SOURCE_INFERRED
    if anchors:
        bounds = _passes_from_anchors(anchors, work, trace)
    else:
        bounds = launch_steps(trace, work)
        if bounds:
            source = SOURCE_LAUNCHES
            notes.append(
                f"no annotations, step frames or token-embedding anchors: {len(bounds)} steps were "
                "found from the repeating launch pattern"
            )
        else:
            bounds = _profiler_steps(trace)
    if not bounds:
        if not len(ops):
            return [], source
        tids = work["issue_tid"][work["issue_tid"] >= 0]
        tid = int(tids.mode().iloc[0]) if len(tids) else int(ops["tid"].mode().iloc[0])
        lo, hi = _thread_span(trace, tid)
        bounds = [(lo, hi, tid, "whole trace")]
    return [(int(a), int(b), int(t), str(label)) for a, b, t, label in bounds], source


def _thread_span(trace: Trace, tid: int) -> tuple[int, int]:
    """First start and last end of anything the CPU thread did (ops and runtime calls; its
    python frames when it has neither: a module anchor may sit on such a thread)."""
    spans = [t[t["tid"] == tid] for t in (trace.cpu_ops, trace.runtime) if len(t)]
    spans = [t for t in spans if len(t)] or [trace.python[trace.python["tid"] == tid]]
    return int(min(t["start_ns"].min() for t in spans)), int(max(t["end_ns"].max() for t in spans))


def _passes_from_anchors(anchors: list[tuple[int, int, str]], work: pd.DataFrame, trace: Trace) -> list[tuple]:
    out = []
    by_tid: dict[int, list[tuple[int, str]]] = {}
    for start, tid, label in anchors:
        by_tid.setdefault(tid, []).append((start, label))
    for tid, items in by_tid.items():
        items.sort()
        _, hi = _thread_span(trace, tid)
        issued = work.loc[(work["issue_tid"] == tid) & (work["issue_ns"] != NO_TIME), "issue_ns"]
        # The first pass starts at its anchor, or earlier if work was issued before
        # it (a graph replay ahead of the sampler's module span); never at an
        # unrelated wait at the top of the thread, which would inflate TTFT.
        first = min(items[0][0], int(issued.min())) if len(issued) else items[0][0]
        for j, (start, label) in enumerate(items):
            begin = first if j == 0 else start
            end = items[j + 1][0] if j + 1 < len(items) else hi  # ranges hold their end (work.assign)
            out.append((begin, end, tid, f"forward pass {j + 1} (from {label})"))
    return out


def _embedding_anchors(ops: pd.DataFrame) -> list[tuple[int, int, str]]:
    """(start, tid, label) of each token-embedding lookup (the vocab-sized aten::embedding)."""
    emb = ops[ops["name"] == "aten::embedding"]
    rows = []
    for i, dims in zip(emb.index, emb["input_dims"]):
        d = evidence.json_or_none(dims)
        if d and len(d) >= 2 and isinstance(d[0], list) and len(d[0]) == 2:
            rows.append((i, d[0][0]))
    if not rows:
        return []
    vocab = max(v for _, v in rows)
    chosen = emb.loc[[i for i, v in rows if v == vocab]]
    return [(int(r.start_ns), int(r.tid), "token embedding") for r in chosen.itertuples()]


def _module_anchors(trace: Trace) -> list[tuple[int, int, str]]:
    """(start, tid, label) of the outermost ``nn.Module:`` spans of the busiest top-level module."""
    py = trace.python
    if not len(py):
        return []
    mods = py[categorical.mask(py["name"], lambda n: n.startswith("nn.Module: "))]
    if not len(mods):
        return []
    outer = []
    for _, group in mods.groupby("tid"):
        end = None  # no span yet: times may lie below zero, so no number can stand for "none"
        for row in group.sort_values(["start_ns", "end_ns"], ascending=[True, False]).itertuples():
            if end is None or row.start_ns >= end:
                outer.append(row)
                end = row.end_ns
    frame = pd.DataFrame(outer)
    top = frame.groupby("name", observed=True)["dur_ns"].sum().idxmax()
    chosen = frame[frame["name"] == top]
    return [(int(r.start_ns), int(r.tid), str(top)) for r in chosen.itertuples()]


def _profiler_steps(trace: Trace) -> list[tuple]:
    ann = trace.annotations
    if not len(ann):
        return []
    ps = ann[(ann["side"] == "cpu").to_numpy() & categorical.mask(ann["name"], frameworks.pytorch.is_profiler_step)]
    return [(int(r.start_ns), int(r.end_ns), int(r.tid), str(r.name)) for r in ps.itertuples()]
