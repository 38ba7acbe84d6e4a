"""Prefill/decode segmentation: which inference step each unit of device work belongs to.

A *step* is one forward pass of the model (a prefill pass, a decode step, or a
mixed continuous-batching step), seen as a CPU-side range on the thread that
launched its work. Work (GPU kernels, memcpy and memset; on a CPU-only trace the
leaf aten ops) belongs to the step whose CPU range contains the moment it was
*issued* on the same thread: the kernel's launch call, found through the
correlation id, because GPU work runs late and often outside the CPU range.

Where step ranges come from, strongest first (``Step source`` in reports; the
grammars live in ``tracekit.frameworks``):

1. tracekit's own markers, written by ``tracekit collect``.
2. Engine annotations: SGLang ``step[EXTEND|DECODE|MIXED ...]``, vLLM
   ``execute_..._context_N(...)_generation_M(...)`` (both state each phase's requests
   and tokens), and user ``record_function`` ranges whose names say prefill or decode.
3. Engine step frames when a trace has no annotations but Python stacks: vLLM's
   ``execute_model``, SGLang's ``forward_batch_generation``.
4. Inference: forward passes found from the token-embedding lookups that start each
   pass (or the outermost ``nn.Module`` spans); else steps found from the launch
   pattern (``launches``); else ``ProfilerStep#N``; else the whole trace as one pass.

Steps whose source does not state their tokens and batch take them from the trace's
evidence (``step_tokens``: KV-write grids, input copies, the sampled-token readback, ...);
steps whose source does not state the phase take it from a weighed vote (``evidence``):
counted tokens against requests, phase-only attention kernels, the structure of the run's
steps (GEMM grid sizes, eager among replayed, GPU time). When the evidence is too weak
or split the phase stays ``unknown``. A step that launched no GPU work is not a step.

A trace with backward ops or optimizer steps is a training run: no prefill or
decode steps are invented for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.steps import evidence, step_tokens
from tracekit.analysis.waiting.intervals import running_end
from tracekit.analysis.steps.launches import launch_steps
from tracekit.frameworks import (  # noqa: F401  (the step sources, re-exported for callers)
    DECODE, MIXED, PREFILL, SOURCE_INFERRED, SOURCE_LAUNCHES, SOURCE_MARKERS, SOURCE_NONE, SOURCE_ORDER,
    SOURCE_SGLANG, SOURCE_SGLANG_FRAMES, SOURCE_USER, SOURCE_VLLM, SOURCE_VLLM_FRAMES, UNKNOWN,
)
from tracekit.trace.links import op_parents
from tracekit.trace.model import Trace

PHASES = (PREFILL, DECODE, MIXED, UNKNOWN)

RUN_INFERENCE, RUN_TRAINING, RUN_EMPTY = "inference", "training", "no steps found"

_TRAINING_OP_RE = r"Backward|autograd::engine::evaluate_function"
# Malformed annotations are reported by name, a few at most.
_MAX_PROBLEM_NOTES = 5


@dataclass
class Segmentation:
    """Steps and the step of every unit of work; input to metrics and attribution."""

    run_kind: str
    device_type: str  # "gpu" or "cpu" (CPU-only trace: leaf ops are the work)
    # One row per unit of device work. Columns: name, kind, start_ns, end_ns, dur_ns,
    # op (cpu_ops row or -1), launch (runtime row or -1), stream, graph (bool), ctas, grid_x/y/z, block_x/y/z,
    # issue_ns, issue_tid, step (-1 = outside), phase.
    work: pd.DataFrame
    # One row per step; see ``_STEP_COLUMNS``.
    steps: pd.DataFrame
    source: str
    notes: list[str] = field(default_factory=list)


_STEP_COLUMNS = {
    "step": "int64",
    "phase": "object",
    "source": "object",
    "evidence": "object",
    "label": "object",
    "tid": "int64",
    "cpu_start_ns": "int64",
    "cpu_end_ns": "int64",
    "gpu_start_ns": "int64",
    "gpu_end_ns": "int64",
    # The step's window, its duration's ends: from its CPU start (or the end of the
    # previous step's work on the same thread, when the GPU runs behind) to the later of
    # its CPU end and its last GPU work. duration = gpu_busy + gpu_idle over this window.
    "begin_ns": "int64",
    "end_ns": "int64",
    "gpu_busy_ns": "int64",
    "gpu_idle_ns": "int64",
    "duration_ns": "int64",
    "kernels": "int64",
    "tokens": "float64",
    "batch": "float64",
    # Where tokens and batch came from (the annotation, evidence sources, the user) and how
    # sure: 1.0 where stated, else the share of the evidence's weight that agrees.
    "tokens_source": "object",
    "tokens_confidence": "float64",
    "batch_source": "object",
    "batch_confidence": "float64",
    # Keys the step's queries attend to, summed over its requests, where the annotation says.
    "kv_tokens": "float64",
    "phase_confidence": "float64",
    "graph_replay": "bool",
    # The batch of each phase, as the annotation states it (frameworks.BatchSide or None).
    "prefill_side": "object",
    "decode_side": "object",
}
# A window of a longer trace (tracekit split): the end of the previous window's last step on
# each thread ({tid: ns}), so that its first step is timed as in the whole trace (analysis.merge
# puts it in the trace's metadata).
PREVIOUS_STEP_END = "tracekit_previous_step_end_ns"
# Per thread, the batch of the last step of the windows before this one (``merge``): a window's
# first step may run that step's requests on (``_carried_requests``).
PREVIOUS_STEP_BATCH = "tracekit_previous_step_batch"
# A window of a trace whose steps are inferred (no step is named): the steps inferred once over
# the whole trace that are this window's, ``{"bounds": [[start, end, tid, label], ...], "source",
# "notes"}`` (analysis.merge puts it in the metadata), so each window's steps are the whole trace's.
GIVEN_STEPS = "tracekit_given_steps"
_RANGE_COLUMNS = ["start", "end", "tid", "phase", "source", "evidence", "label", "tokens", "batch",
                  "prefill_side", "decode_side"]


STATED_SOURCE = "stated by the user"
ANNOTATION_SOURCE = "the step annotation"


def segment(trace: Trace, stated: dict | None = None) -> Segmentation:
    """Split a trace into inference steps and assign every unit of work to one.

    ``stated`` gives figures the user knows, ``{"tokens": {phase: n}, "batch": {phase: n}}``
    (phase ``"all"`` for every step): they replace what the trace says for steps of that phase."""
    work, device_type = _work_table(trace)
    notes: list[str] = []

    candidates = _annotated_ranges(trace, notes)
    if not candidates and _is_training(trace):
        work["step"] = -1
        work["phase"] = categorical.text(np.full(len(work), UNKNOWN, dtype=object), index=work.index)
        notes.append("backward ops or optimizer steps found: this is a training run, not inference")
        return Segmentation(RUN_TRAINING, device_type, work, _empty_steps(), SOURCE_NONE, notes)
    if not candidates:
        candidates = _frame_ranges(trace)
        if candidates:
            notes.append(f"no phase annotations: steps are the engine's step frames ({candidates[0][4]}), "
                         "phases come from trace evidence")
    if not candidates:
        candidates = _inferred_passes(trace, work, notes)
        if candidates:
            notes.append("no phase annotations: forward passes were found and classified from trace evidence")

    ranges = pd.DataFrame(candidates, columns=_RANGE_COLUMNS)
    ranges = _drop_nested(ranges)
    work["step"] = _assign(work, ranges)
    if device_type == "gpu" and len(ranges):
        ranges, dropped = _drop_empty(ranges, work)
        if dropped:
            notes.append(f"{dropped} step range{'s' if dropped != 1 else ''} launched no GPU work and "
                         f"{'are' if dropped != 1 else 'is'} not counted as a step")
            work["step"] = _assign(work, ranges)
    steps = _steps_table(ranges, work, trace.metadata.get(PREVIOUS_STEP_END))
    step_of = work["step"].to_numpy()
    counts = (step_tokens.step_counts(trace.kernels, step_of, len(steps), steps["source"].tolist(),
                                      iteration_of=_iteration(work, steps),
                                      logits_rows=step_tokens.last_gemm_rows(trace.kernels, step_of, trace.cpu_ops,
                                                                             trace.shapes))
              if device_type == "gpu" and len(steps) else [step_tokens.StepCounts() for _ in range(len(steps))])
    _fill_counts(steps, counts)
    inferred = (steps["phase"] == UNKNOWN).to_numpy() if len(steps) else np.zeros(0, dtype=bool)
    _resolve_phases(steps, work, counts)
    _carried_requests(steps, inferred, trace.metadata.get(PREVIOUS_STEP_BATCH))
    _after_phase(steps, stated or {}, notes)
    phase_of_step = steps["phase"].to_numpy() if len(steps) else np.array([UNKNOWN], dtype=object)
    work["phase"] = categorical.text(np.where(work["step"] >= 0, phase_of_step[np.maximum(work["step"].to_numpy(), 0)],
                                              UNKNOWN), index=work.index)
    source = min(steps["source"], key=SOURCE_ORDER.index) if len(steps) else SOURCE_NONE
    run_kind = RUN_INFERENCE if len(steps) else RUN_EMPTY
    outside = int((work["step"] < 0).sum())
    if len(steps) and outside:
        notes.append(f"{outside} of {len(work)} units of work were issued outside any step")
    return Segmentation(run_kind, device_type, work, steps, source, notes)


def _resolve_phases(steps: pd.DataFrame, work: pd.DataFrame, counts: list | None = None) -> None:
    """Steps whose source left the phase unknown take it from the evidence of their work, by a
    vote (``evidence.Ballot``): counted tokens against requests, phase-only attention kernels,
    and, where kernels show autoregressive generation, the structure of the run's steps
    (heavy GEMM grids, eager among replayed steps, graph replay, GPU time). The verdict's
    evidence text names every vote, so disagreement shows."""
    if not len(steps):
        return
    todo = np.flatnonzero((steps["phase"] == UNKNOWN).to_numpy())
    if not len(todo):
        return
    names = work["name"] if hasattr(work["name"], "cat") else work["name"].astype("category")
    flags = evidence.NameFlags(names.cat.categories)
    codes = names.cat.codes.to_numpy()
    step_of = work["step"].to_numpy()
    order = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[order], np.arange(len(steps) + 1))
    ballots = {}
    for i in todo.tolist():
        ballot = ballots[i] = evidence.Ballot()
        evidence.count_vote(ballot, steps.at[i, "tokens"], steps.at[i, "batch"])
        evidence.name_vote(ballot, codes[order[bounds[i]:bounds[i + 1]]], flags)
    inside = np.unique(codes[(step_of >= 0) & (codes >= 0)])
    generation = bool(flags.generation[inside].any())
    if generation:
        engine = steps["source"].isin(list(frameworks.ENGINE_SOURCES)).to_numpy()
        features = evidence.step_features(work, len(steps))
        decided = evidence.structural_phases(features, todo, engine)
        extra = evidence.run_votes(features, steps["gpu_busy_ns"].to_numpy(), engine,
                                   steps["tokens"].to_numpy(dtype=np.float64))
        for i in todo.tolist():
            evidence.structure_vote(ballots[i], decided.get(i))
            for phase, w, why in extra.get(i, ()):
                ballots[i].cast(phase, w, why)
    for i in todo.tolist():
        phase, confidence, why = ballots[i].verdict()
        if why is None:
            why = ("neither op shapes nor kernel names show prefill or decode: too little evidence to decide"
                   if generation else
                   "too little evidence to tell prefill from decode: no op shapes show tokens per sequence, and no "
                   "KV-cache writes or paged attention kernels show autoregressive generation")
        steps.at[i, "phase"], steps.at[i, "evidence"] = phase, _joined(steps.at[i, "evidence"], why)
        steps.at[i, "phase_confidence"] = np.nan if confidence is None else confidence


def _carried_requests(steps: pd.DataFrame, inferred: np.ndarray, previous: dict | None = None) -> None:
    """A vLLM step the evidence calls prefill that also runs the previous step's requests is
    mixed. vLLM's scheduler serves the running requests first each step and admits new ones
    into the budget left, so of this step's requests, as many as the previous step ran (at
    most) continue: one new token each. The rest are new, and hold the step's other tokens.
    The trace does not show whether a previous request finished instead; the verdict says so.
    Only steps whose phase came from evidence; SGLang runs prefill (extend) batches apart from
    its running batch by default, so its steps are not touched. ``previous``: per thread, the
    batch of the step before this trace's first (a window of a split run)."""
    if not len(steps) or not inferred.any():
        return
    previous = {int(t): float(b) for t, b in (previous or {}).items()}
    vllm = steps["source"].isin([SOURCE_VLLM, SOURCE_VLLM_FRAMES]).to_numpy()
    for tid in pd.unique(steps["tid"]):
        rows = np.flatnonzero((steps["tid"] == tid).to_numpy())
        rows = rows[np.argsort(steps["cpu_start_ns"].to_numpy()[rows], kind="stable")]
        for prev, i in zip([-1, *rows[:-1].tolist()], rows.tolist()):
            if not (inferred[i] and vllm[i] and steps.at[i, "phase"] == PREFILL):
                continue
            before = steps.at[prev, "batch"] if prev >= 0 else previous.get(int(tid), np.nan)
            tokens, batch = steps.at[i, "tokens"], steps.at[i, "batch"]
            if np.isnan(tokens) or np.isnan(batch) or np.isnan(before):
                continue
            carried = int(min(before, batch))
            new, new_tokens = int(batch) - carried, int(tokens) - carried
            if carried < 1 or new < 1 or new_tokens < new:
                continue  # no request carried, none new (a chunked prefill continues), or too few tokens
            steps.at[i, "phase"] = MIXED
            steps.at[i, "prefill_side"] = frameworks.BatchSide(requests=new, tokens=new_tokens)
            steps.at[i, "decode_side"] = frameworks.BatchSide(requests=carried, tokens=carried)
            steps.at[i, "phase_confidence"] = min(_or_one(steps.at[i, "phase_confidence"]), 0.5)
            steps.at[i, "evidence"] = _joined(steps.at[i, "evidence"], (
                f"mixed: {carried} of its {int(batch)} requests ran in the previous step and continue (vLLM "
                f"schedules running requests first), so {new} are new with {new_tokens:,} of its "
                f"{int(tokens):,} tokens; the trace does not show whether a previous request finished instead"))


def _iteration(work: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """For work issued outside every step: the step whose engine iteration it ends (the latest
    step begun before it on its thread, when no later step has begun), else -1. The sampler's
    readback of the step's tokens often follows the step's own range; evidence only, the
    work's step (and the books) stay as assigned."""
    out = np.full(len(work), -1, dtype=np.int64)
    step_of, issue, tid = work["step"].to_numpy(), work["issue_ns"].to_numpy(), work["issue_tid"].to_numpy()
    loose = np.flatnonzero((step_of < 0) & (issue >= 0))
    if not len(loose) or not len(steps):
        return out
    s_tid, s_start = steps["tid"].to_numpy(), steps["cpu_start_ns"].to_numpy()
    for t in np.unique(s_tid):
        idx = np.flatnonzero(s_tid == t)
        idx = idx[np.argsort(s_start[idx], kind="stable")]
        mine = loose[tid[loose] == t]
        pos = np.searchsorted(s_start[idx], issue[mine], side="right") - 1
        out[mine] = np.where(pos >= 0, idx[np.maximum(pos, 0)], -1)
    return out


def _fill_counts(steps: pd.DataFrame, counts: list) -> None:
    """Tokens and batch the annotation left unstated, from the evidence's vote; where it stated
    them, the evidence only checks (a disagreement joins the step's evidence text)."""
    for i, c in enumerate(counts):
        notes = []
        for col, fig, what in (("tokens", c.tokens, "tokens"), ("batch", c.requests, "requests")):
            have = steps.at[i, col]
            if not np.isnan(have):
                if fig.value is not None and fig.value != have:
                    notes.append(f"{fig.source} count {fig.value:,} {what} where the annotation states {int(have):,}")
                continue
            if fig.value is not None:
                steps.at[i, col] = float(fig.value)
                steps.at[i, f"{col}_confidence"] = fig.confidence
            steps.at[i, f"{col}_source"] = fig.source
            if fig.note:
                notes.append(f"{what}: {fig.note}")
        if notes:
            steps.at[i, "evidence"] = _joined(steps.at[i, "evidence"], "; ".join(notes))


def _after_phase(steps: pd.DataFrame, stated: dict, notes: list[str]) -> None:
    """What a step's phase implies for its counts (a decode step computes one token per
    request), the user's stated figures, and the prefill side of an annotation that names
    requests but not tokens (``execute_new_N_cached_M``)."""
    for i in range(len(steps)):
        phase = steps.at[i, "phase"]
        for col, key in (("tokens", "tokens"), ("batch", "batch")):
            table = stated.get(key) or {}
            value = table.get(phase, table.get("all"))
            if value is not None:
                steps.at[i, col], steps.at[i, f"{col}_source"], steps.at[i, f"{col}_confidence"] = \
                    float(value), f"{STATED_SOURCE} (--{key} {phase}={value})", 1.0
        tokens, batch = steps.at[i, "tokens"], steps.at[i, "batch"]
        if phase == DECODE and np.isnan(batch) != np.isnan(tokens):
            known = "tokens" if np.isnan(batch) else "batch"
            missing = "batch" if known == "tokens" else "tokens"
            steps.at[i, missing] = steps.at[i, known]
            steps.at[i, f"{missing}_source"] = f"a decode step computes one token per request ({known}: " \
                                               f"{steps.at[i, f'{known}_source']})"
            steps.at[i, f"{missing}_confidence"] = min(steps.at[i, f"{known}_confidence"],
                                                       _or_one(steps.at[i, "phase_confidence"]))
        pre, dec = steps.at[i, "prefill_side"], steps.at[i, "decode_side"]
        if pre is not None and pre.requests and pre.tokens is None and not np.isnan(steps.at[i, "tokens"]):
            rest = int(steps.at[i, "tokens"]) - (dec.tokens or 0 if dec is not None else 0)
            if rest >= pre.requests:
                steps.at[i, "prefill_side"] = dataclasses.replace(pre, tokens=rest)
            else:
                steps.at[i, "evidence"] = _joined(steps.at[i, "evidence"], (
                    f"the step's {int(steps.at[i, 'tokens']):,} tokens leave fewer than one for each of its "
                    f"{pre.requests} new requests: the prefill side's tokens are unknown"))
        if np.isnan(steps.at[i, "kv_tokens"]):
            sides = [x for x in (pre, dec) if x is not None and x.requests]
            if sides and all(x.kv_tokens is not None for x in sides):
                steps.at[i, "kv_tokens"] = float(sum(x.kv_tokens for x in sides))


def _joined(before: str | None, why: str) -> str:
    """Evidence text: what the source said (when it said something useful), then the verdict."""
    if not before or before in ("no op shapes recorded", "op shapes do not show tokens per sequence"):
        return why
    return f"{before}; {why}"


# --- work ---------------------------------------------------------------------------


# The launch grid's and block's dimensions (-1: not recorded), carried from the kernels table.
GRID_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def _work_table(trace: Trace) -> tuple[pd.DataFrame, str]:
    """The units of device work: GPU activities, or leaf CPU ops on a CPU-only trace."""
    if len(trace.kernels):
        k = trace.kernels
        rt = trace.runtime
        launch = k["launch"].to_numpy()
        has = launch >= 0
        at = np.maximum(launch, 0)
        issue_ns = np.where(has, rt["start_ns"].to_numpy()[at] if len(rt) else -1, -1)
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
                "ctas": k["ctas"] if "ctas" in k else -1,
                **{g: k[g] if g in k else -1 for g in GRID_COLUMNS},
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


# --- annotated ranges ----------------------------------------------------------------


def _annotated_ranges(trace: Trace, notes: list[str]) -> list[tuple]:
    """One range row (``_RANGE_COLUMNS``) per annotated step; malformed annotations noted."""
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
    if len(unread) > _MAX_PROBLEM_NOTES:
        notes.append(f"{len(unread) - _MAX_PROBLEM_NOTES} more range names look like step annotations tracekit does "
                     "not read")
    codes = categorical.codes(cpu["name"])
    rows = np.flatnonzero(np.array([q is not None for q in parsed_of] + [False], dtype=bool)[codes])
    for code, start, end, tid in zip(codes[rows].tolist(), cpu["start_ns"].to_numpy()[rows].tolist(),
                                     cpu["end_ns"].to_numpy()[rows].tolist(), cpu["tid"].to_numpy()[rows].tolist()):
        name, parsed = names[code], parsed_of[code]
        if parsed.problem:
            problems[parsed.problem] = problems.get(parsed.problem, 0) + 1
        row = (start, end, tid, parsed.phase, parsed.source, parsed.evidence, name,
               parsed.tokens, parsed.batch, parsed.prefill, parsed.decode)
        (ours if parsed.source == SOURCE_MARKERS else framework).append(row)
    for text, count in list(problems.items())[:_MAX_PROBLEM_NOTES]:
        notes.append(f"{text}{f' ({count} ranges)' if count > 1 else ''}: that part is ignored")
    if len(problems) > _MAX_PROBLEM_NOTES:
        notes.append(f"{len(problems) - _MAX_PROBLEM_NOTES} more malformed step annotations")
    # tracekit's markers, where present, are the whole truth for the trace.
    return ours or framework


def _frame_ranges(trace: Trace) -> list[tuple]:
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
        (int(r.start_ns), int(r.end_ns), int(r.tid), UNKNOWN, sources[str(r.name)], None, str(r.name),
         None, None, None, None)
        for r in sel.itertuples()
    ]


def _drop_nested(ranges: pd.DataFrame) -> pd.DataFrame:
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
            if theirs is not None and not _isna(theirs):
                col[c][o] = theirs.merged(mine) if mine is not None and not _isna(mine) else theirs
                touched.add(c)
    for c in touched:
        ranges[c] = pd.Series(col[c], dtype=ranges[c].dtype)
    return ranges[~nested].sort_values("start").reset_index(drop=True)


def _isna(value) -> bool:
    return isinstance(value, float) and np.isnan(value)


def _drop_empty(ranges: pd.DataFrame, work: pd.DataFrame) -> tuple[pd.DataFrame, int]:
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


def _inferred_passes(trace: Trace, work: pd.DataFrame, notes: list[str]) -> list[tuple]:
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


def inferred_bounds(trace: Trace, work: pd.DataFrame | None = None,
                    notes: list[str] | None = None) -> tuple[list[tuple[int, int, int, str]], str]:
    """``(start, end, tid, label)`` of each inferred step (``_inferred_passes``, before its
    classification) and their source. ``work`` is the trace's work table (made when None)."""
    notes = [] if notes is None else notes
    ops = trace.cpu_ops
    if work is None:
        work = _work_table(trace)[0]
    anchors = (_embedding_anchors(ops) if len(ops) else []) or _module_anchors(trace)
    source = SOURCE_INFERRED
    if anchors:
        bounds = _passes_from_anchors(anchors, work, trace)
    else:
        bounds = launch_steps(trace, work)
        if bounds:
            source = SOURCE_LAUNCHES
            notes.append(f"no annotations, step frames or token-embedding anchors: {len(bounds)} steps were "
                         "found from the repeating launch pattern")
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
        issued = work.loc[(work["issue_tid"] == tid) & (work["issue_ns"] >= 0), "issue_ns"]
        # The first pass starts at its anchor, or earlier if work was issued before
        # it (a graph replay ahead of the sampler's module span); never at an
        # unrelated wait at the top of the thread, which would inflate TTFT.
        first = min(items[0][0], int(issued.min())) if len(issued) else items[0][0]
        for j, (start, label) in enumerate(items):
            begin = first if j == 0 else start
            end = items[j + 1][0] if j + 1 < len(items) else hi + 1
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
        end = -1
        for row in group.sort_values(["start_ns", "end_ns"], ascending=[True, False]).itertuples():
            if row.start_ns >= end:
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


# --- assignment and the steps table --------------------------------------------------


def _assign(work: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Step index of each unit of work: the range containing its issue time, same thread first."""
    step = np.full(len(work), -1, dtype=np.int64)
    if not len(ranges) or not len(work):
        return step
    issue = work["issue_ns"].to_numpy()
    tid = work["issue_tid"].to_numpy()
    has = issue >= 0
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


def _steps_table(ranges: pd.DataFrame, work: pd.DataFrame, previous_end: dict | None = None) -> pd.DataFrame:
    if not len(ranges):
        return _empty_steps()
    rows = []
    step_of = work["step"].to_numpy()
    kernels_of = np.bincount(step_of[step_of >= 0], minlength=len(ranges))[: len(ranges)]
    starts = work["start_ns"].to_numpy()
    ends = work["end_ns"].to_numpy()
    graph = work["graph"].to_numpy()
    _, g0_of, g1_of = _busy_per_step(step_of, starts, ends, len(ranges))
    replayed = np.bincount(step_of[(step_of >= 0) & graph], minlength=len(ranges))[: len(ranges)] > 0
    # When the GPU runs behind the CPU (asynchronous scheduling), a step's GPU work waits
    # for the previous step's: its time starts when that work ended, so that step
    # durations add up to the run's span instead of counting the queue twice.
    previous_end = {int(t): int(e) for t, e in (previous_end or {}).items()}
    begin_of = np.zeros(len(ranges), np.int64)
    end_of = np.zeros(len(ranges), np.int64)
    for i, (cpu0, cpu1, tid) in enumerate(zip(ranges["start"].tolist(), ranges["end"].tolist(),
                                                ranges["tid"].tolist())):
        cpu0, cpu1, tid = int(cpu0), int(cpu1), int(tid)
        end = max(cpu1, int(g1_of[i])) if kernels_of[i] else cpu1
        begin = min(max(cpu0, previous_end.get(tid, cpu0)), end)
        previous_end[tid] = max(end, previous_end.get(tid, end))
        begin_of[i], end_of[i] = begin, end
    # One set of books: a step's duration is its GPU busy time (its work, clipped to the
    # step's window) plus its GPU idle time (lead-in, gaps, tail), exactly.
    busy_of = step_busy(step_of, starts, ends, begin_of, end_of)
    for i, r in enumerate(ranges.itertuples()):
        n_mine = int(kernels_of[i])
        g0, g1 = int(g0_of[i]), int(g1_of[i])
        duration = int(end_of[i] - begin_of[i])
        rows.append(
            {
                "step": i,
                "phase": r.phase,
                "source": r.source,
                "evidence": r.evidence,
                "label": r.label,
                "tid": int(r.tid),
                "cpu_start_ns": int(r.start),
                "cpu_end_ns": int(r.end),
                "gpu_start_ns": g0,
                "gpu_end_ns": g1,
                "begin_ns": int(begin_of[i]),
                "end_ns": int(end_of[i]),
                "gpu_busy_ns": int(busy_of[i]),
                "gpu_idle_ns": duration - int(busy_of[i]),
                "duration_ns": duration,
                "kernels": n_mine,
                "tokens": _number(r.tokens),
                "batch": _number(r.batch),
                "tokens_source": None if np.isnan(_number(r.tokens)) else _stated_by(r.source),
                "tokens_confidence": np.nan if np.isnan(_number(r.tokens)) else 1.0,
                "batch_source": None if np.isnan(_number(r.batch)) else _stated_by(r.source),
                "batch_confidence": np.nan if np.isnan(_number(r.batch)) else 1.0,
                "kv_tokens": np.nan,
                "phase_confidence": 1.0 if r.phase != UNKNOWN else np.nan,
                "graph_replay": bool(replayed[i]),
                "prefill_side": _side(r.prefill_side),
                "decode_side": _side(r.decode_side),
            }
        )
    return pd.DataFrame(rows).astype(_STEP_COLUMNS)


def _or_one(value) -> float:
    return 1.0 if pd.isna(value) else float(value)


def _number(value) -> float:
    return np.nan if value is None or pd.isna(value) else float(value)


def _stated_by(source: str) -> str:
    """Where a figure known when the step range was found came from: the engine's annotation,
    or the op shapes of an inferred pass."""
    return ANNOTATION_SOURCE if source not in (SOURCE_INFERRED, SOURCE_LAUNCHES) else "op shapes"


def step_busy(step_of: np.ndarray, starts: np.ndarray, ends: np.ndarray, begin: np.ndarray,
              end: np.ndarray) -> np.ndarray:
    """Per step, the union of its work's intervals clipped to the step's window
    ``[begin, end)``: the busy half of its books (work outside the window, e.g. a kernel on
    another stream still running when the next step begins, is not this step's time)."""
    n = len(begin)
    inside = (step_of >= 0) & (step_of < n)
    st = np.where(inside, step_of, 0)
    s = np.clip(starts, begin[st], end[st])
    e = np.clip(ends, begin[st], end[st])
    return _busy_per_step(np.where(inside & (e > s), step_of, -1), s, e, n)[0]


def _side(value):
    return None if value is None or _isna(value) else value


def _busy_per_step(step_of: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int):
    """``_busy`` of every step's work at once: (busy ns, first start, last end) per step
    0..n-1, 0, -1 and -1 for a step without work. One sort and a few vector passes: a
    serving run has tens of thousands of steps, too many for numpy calls per step."""
    busy, g0, g1 = np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    sel = np.flatnonzero((step_of >= 0) & (step_of < n))
    if not len(sel):
        return busy, g0, g1
    o = sel[np.lexsort((starts[sel], step_of[sel]))]  # by step, then start; ties keep work order
    st, s, e = step_of[o].astype(np.int64), starts[o], ends[o]
    run_end = running_end(st, e)
    first = np.r_[True, st[1:] != st[:-1]]
    overlap = np.zeros(len(s), np.int64)
    overlap[1:] = np.clip(np.minimum(e[1:], run_end[:-1]) - s[1:], 0, None)
    overlap[first] = 0
    heads = np.flatnonzero(first)
    tails = np.r_[heads[1:], len(s)] - 1
    steps = st[heads]
    busy[steps] = np.add.reduceat(e - s, heads) - np.add.reduceat(overlap, heads)
    g0[steps], g1[steps] = s[heads], run_end[tails]
    return busy, g0, g1


def _busy(starts: np.ndarray, ends: np.ndarray) -> tuple[int, int, int]:
    """(busy ns as the union of intervals, first start, last end)."""
    if not len(starts):
        return 0, -1, -1
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    busy = int((e - s).sum() - _overlap(s, e, run_end))
    return busy, int(s[0]), int(run_end[-1])


def _overlap(s: np.ndarray, e: np.ndarray, run_end: np.ndarray) -> int:
    """Total time counted twice by overlapping intervals (streams running concurrently)."""
    if len(s) < 2:
        return 0
    prev_end = run_end[:-1]
    return int(np.clip(np.minimum(e[1:], prev_end) - s[1:], 0, None).sum())


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _STEP_COLUMNS.items()})
