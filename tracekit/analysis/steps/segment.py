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
stated tokens that eagerly launched grids, agreeing, count otherwise give way to the grids'
count, the rows the GPU ran (``_grid_tokens``, issue 46);
steps whose source does not state the phase take it from a weighed vote (``evidence``):
counted tokens against requests, phase-only attention kernels, the structure of the run's
steps (GEMM grid sizes, eager among replayed, GPU time). When the evidence is too weak
or split the phase stays ``unknown``. A step that launched no GPU work is not a step.

A trace with backward ops or optimizer steps is a training run: no prefill or
decode steps are invented for it.

This module is the pipeline and its types, and settles each step's phase and counts from the
evidence. Its stages live beside it: the work table and the assignment of work to steps in
``steps.work``, the step ranges (annotations, step frames, inferred passes) in ``steps.ranges``,
and the per-step table with its busy-time books in ``steps.table``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import formatting as fmt
from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.steps import evidence, step_tokens
from tracekit.analysis.steps.held import held_intervals, staged_copies
from tracekit.analysis.steps.history import kv_from_history
from tracekit.analysis.steps.ranges import (
    RANGE_COLUMNS,
    annotated_ranges,
    drop_empty,
    drop_nested,
    frame_ranges,
    inferred_passes,
    is_training,
)
from tracekit.analysis.steps.table import ANNOTATION_SOURCE, empty_steps, no_other_work, steps_table
from tracekit.analysis.steps.work import NO_TIME, assign, work_table
from tracekit.frameworks import (  # noqa: F401  (the step sources, re-exported for callers)
    DECODE,
    MIXED,
    PREFILL,
    SOURCE_INFERRED,
    SOURCE_LAUNCHES,
    SOURCE_MARKERS,
    SOURCE_NONE,
    SOURCE_ORDER,
    SOURCE_SGLANG,
    SOURCE_SGLANG_FRAMES,
    SOURCE_USER,
    SOURCE_VLLM,
    SOURCE_VLLM_FRAMES,
    UNKNOWN,
)
from tracekit.frameworks.base import consistent
from tracekit.trace.model import Trace

PHASES = (PREFILL, DECODE, MIXED, UNKNOWN)
# The ``phase`` of a unit of work issued outside any step: not a phase, so no phase's figures take
# it in (``provenance.outside_steps`` counts it; the ``unknown`` phase is steps whose phase is unknown).
OUTSIDE = "outside"

RUN_INFERENCE, RUN_TRAINING, RUN_EMPTY = "inference", "training", "no steps found"


@dataclass
class Segmentation:
    """Steps and the step of every unit of work; input to metrics and attribution."""

    run_kind: str
    device_type: str  # "gpu" or "cpu" (CPU-only trace: leaf ops are the work)
    # One row per unit of device work. Columns: name, kind, start_ns, end_ns, dur_ns,
    # op (cpu_ops row or -1), launch (runtime row or -1), stream, graph (bool), ctas, grid_x/y/z, block_x/y/z,
    # issue_ns, issue_tid, step (-1 = outside), phase.
    work: pd.DataFrame
    # One row per step; see ``_STEP_COLUMNS`` in ``steps.table``.
    steps: pd.DataFrame
    source: str
    notes: list[str] = field(default_factory=list)
    # Stretches inside a step's window when the device ran other work: work the trace did not
    # record that the step's work waited on (``steps.held``; kind "unrecorded"), or the next step's
    # (kind "next step"). Columns step, start_ns, end_ns, row (the kernel held back, or the next
    # step's unit), kind. Out of the step's duration and idle (its ``unrecorded_ns``, ``next_ns``).
    other_work: pd.DataFrame = field(default_factory=no_other_work)
    # Per thread, the history of running requests after the last step (``steps.history``), for the
    # next window of a split run.
    history: dict = field(default_factory=dict)


# A window of a longer trace (tracekit split): the end of the previous window's last step on
# each thread ({tid: ns}), so that its first step is timed as in the whole trace (analysis.windows
# puts it in the trace's metadata).
PREVIOUS_STEP_END = "tracekit_previous_step_end_ns"
# Per thread, the batch of the last step of the windows before this one (``analysis.windows``): a window's
# first step may run that step's requests on (``_carried_requests``).
PREVIOUS_STEP_BATCH = "tracekit_previous_step_batch"
# Per device, the end of the last recorded work of the windows before this one (``analysis.windows``):
# work there is recorded, so a window's first units queued behind it were not held by unrecorded work.
PREVIOUS_DEVICE_END = "tracekit_previous_device_end_ns"
# Per thread, the run's history of running requests and their keys at the end of the windows before
# this one (``steps.history``, carried by ``analysis.windows``): a window's first decode steps read it.
PREVIOUS_KV_HISTORY = "tracekit_previous_kv_history"


STATED_SOURCE = "stated by the user"


def segment(trace: Trace, stated: dict | None = None) -> Segmentation:
    """Split a trace into inference steps and assign every unit of work to one.

    ``stated`` gives figures the user knows, ``{"tokens": {phase: n}, "batch": {phase: n}}``
    (phase ``"all"`` for every step): they replace what the trace says for steps of that phase."""
    work, device_type = work_table(trace)
    notes: list[str] = []

    candidates = annotated_ranges(trace, notes)
    if not candidates and is_training(trace):
        work["step"] = -1
        work["phase"] = categorical.text(np.full(len(work), OUTSIDE, dtype=object), index=work.index)
        notes.append("backward ops or optimizer steps found: this is a training run, not inference")
        return Segmentation(RUN_TRAINING, device_type, work, empty_steps(), SOURCE_NONE, notes)
    if not candidates:
        candidates = frame_ranges(trace)
        if candidates:
            notes.append(
                f"no phase annotations: steps are the engine's step frames ({candidates[0][4]}), "
                "phases come from trace evidence"
            )
    if not candidates:
        candidates = inferred_passes(trace, work, notes)
        if candidates:
            notes.append("no phase annotations: forward passes were found and classified from trace evidence")

    ranges = pd.DataFrame(candidates, columns=RANGE_COLUMNS)
    ranges = drop_nested(ranges)
    work["step"] = assign(work, ranges)
    if device_type == "gpu" and len(ranges):
        ranges, dropped = drop_empty(ranges, work)
        if dropped:
            notes.append(
                f"{dropped} step range{'s' if dropped != 1 else ''} launched no GPU work and "
                f"{'are' if dropped != 1 else 'is'} not counted as a step"
            )
            work["step"] = assign(work, ranges)
    kind = work["kind"].to_numpy()
    held = (
        held_intervals(
            kind,
            work["start_ns"].to_numpy(),
            work["end_ns"].to_numpy(),
            work["issue_ns"].to_numpy(),
            work["launch"].to_numpy(),
            trace.kernels["device"].to_numpy(),
            staged_copies(kind, work["name"]),
            trace.metadata.get(PREVIOUS_DEVICE_END),
        )
        if device_type == "gpu"
        else None
    )
    steps, stretches = steps_table(ranges, work, trace.metadata.get(PREVIOUS_STEP_END), held)
    notes.extend(overlap_notes(steps))
    step_of = work["step"].to_numpy()
    counts = (
        step_tokens.step_counts(
            trace.kernels,
            step_of,
            len(steps),
            steps["source"].tolist(),
            iteration_of=_iteration(work, steps),
            logits_rows=step_tokens.last_gemm_rows(trace.kernels, step_of, trace.cpu_ops, trace.shapes),
        )
        if device_type == "gpu" and len(steps)
        else [step_tokens.StepCounts() for _ in range(len(steps))]
    )
    _fill_counts(steps, counts)
    inferred = (steps["phase"] == UNKNOWN).to_numpy() if len(steps) else np.zeros(0, dtype=bool)
    _resolve_phases(steps, work, counts)
    _carried_requests(steps, inferred, trace.metadata.get(PREVIOUS_STEP_BATCH))
    _after_phase(steps, stated or {}, notes)
    history = kv_from_history(steps, trace.metadata.get(PREVIOUS_KV_HISTORY))
    phase_of_step = steps["phase"].to_numpy() if len(steps) else np.array([UNKNOWN], dtype=object)
    work["phase"] = categorical.text(
        np.where(work["step"] >= 0, phase_of_step[np.maximum(work["step"].to_numpy(), 0)], OUTSIDE), index=work.index
    )
    source = min(steps["source"], key=SOURCE_ORDER.index) if len(steps) else SOURCE_NONE
    run_kind = RUN_INFERENCE if len(steps) else RUN_EMPTY
    outside = int((work["step"] < 0).sum())
    if len(steps) and outside:
        notes.append(f"{outside} of {len(work)} units of work were issued outside any step")
    return Segmentation(run_kind, device_type, work, steps, source, notes, stretches, history)


def overlap_notes(steps: pd.DataFrame) -> list[str]:
    """Which steps the device overlapped with other work, and by how much (each step's own figures
    are its ``unrecorded_ns``, ``previous_ns`` and ``next_ns``): work the trace did not record, the
    previous step's, or the next step's; all are out of the steps' durations."""
    out = []
    for col, what in (
        (
            "unrecorded_ns",
            "the GPU was busy with work the trace did not record (queued before the "
            "profile began, or another process's) while the step's work waited on it",
        ),
        ("previous_ns", "the GPU still ran the previous step's work after the step's CPU start"),
        (
            "next_ns",
            "the GPU ran the next step's work, and none of the step's own, before the step "
            "ended (the next step's, though its window opens later)",
        ),
    ):
        ns = steps[col].to_numpy() if len(steps) else np.zeros(0, np.int64)
        rows = np.flatnonzero(ns > 0)
        if not len(rows):
            continue
        top = int(rows[np.argmax(ns[rows])])
        out.append(
            f"{what}, in {len(rows):,} of the {len(steps):,} steps, {fmt.ms(ns[rows].sum() / 1e6)} in all "
            f"(the most: step {int(steps['step'].iat[top])}, {fmt.ms(ns[top] / 1e6)}); each step is measured "
            "from the point its own work could start, and that time is none of its idle"
        )
    return out


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
        evidence.name_vote(ballot, codes[order[bounds[i] : bounds[i + 1]]], flags)
    inside = np.unique(codes[(step_of >= 0) & (codes >= 0)])
    generation = bool(flags.generation[inside].any())
    if generation:
        engine = steps["source"].isin(list(frameworks.ENGINE_SOURCES)).to_numpy()
        features = evidence.step_features(work, len(steps))
        decided = evidence.structural_phases(features, todo, engine)
        extra = evidence.run_votes(
            features, steps["gpu_busy_ns"].to_numpy(), engine, steps["tokens"].to_numpy(dtype=np.float64)
        )
        for i in todo.tolist():
            evidence.structure_vote(ballots[i], decided.get(i))
            for phase, w, because in extra.get(i, ()):
                ballots[i].cast(phase, w, because)
    for i in todo.tolist():
        phase, confidence, why = ballots[i].verdict()
        if why is None:
            why = (
                "neither op shapes nor kernel names show prefill or decode: too little evidence to decide"
                if generation
                else "too little evidence to tell prefill from decode: no op shapes show tokens per sequence, and no "
                "KV-cache writes or paged attention kernels show autoregressive generation"
            )
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
            steps.at[i, "evidence"] = _joined(
                steps.at[i, "evidence"],
                (
                    f"mixed: {carried} of its {int(batch)} requests ran in the previous step and continue (vLLM "
                    f"schedules running requests first), so {new} are new with {new_tokens:,} of its "
                    f"{int(tokens):,} tokens; the trace does not show whether a previous request finished instead"
                ),
            )


def _iteration(work: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """For work issued outside every step: the step whose engine iteration it ends (the latest
    step begun before it on its thread, when no later step has begun), else -1. The sampler's
    readback of the step's tokens often follows the step's own range; evidence only, the
    work's step (and the books) stay as assigned."""
    out = np.full(len(work), -1, dtype=np.int64)
    step_of, issue, tid = work["step"].to_numpy(), work["issue_ns"].to_numpy(), work["issue_tid"].to_numpy()
    loose = np.flatnonzero((step_of < 0) & (issue != NO_TIME))
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


class _Columns(dict):
    """Columns of the steps table as Python lists, for the per-step rules below that read and
    write many fields of each step: ``steps.at`` costs tens of microseconds a call, seconds over
    50k tiny steps. ``store`` writes them back in their dtypes."""

    def __init__(self, steps: pd.DataFrame, names: tuple[str, ...]):
        super().__init__((n, steps[n].tolist()) for n in names)
        self.steps = steps

    def store(self) -> None:
        for name, values in self.items():
            # In the column's own dtype: an object column of strings stays object.
            self.steps[name] = pd.Series(values, index=self.steps.index, dtype=self.steps[name].dtype)


def _fill_counts(steps: pd.DataFrame, counts: list) -> None:
    """Tokens and batch the annotation left unstated, from the evidence's vote; where it stated
    them, the evidence checks (a disagreement joins the step's evidence text), except that the
    tokens eagerly launched grids count win over stated ones (``_grid_tokens``)."""
    c = _Columns(
        steps,
        (
            "tokens",
            "batch",
            "tokens_confidence",
            "batch_confidence",
            "tokens_source",
            "batch_source",
            "evidence",
            "phase",
            "prefill_side",
            "decode_side",
        ),
    )
    for i, count in enumerate(counts):
        notes: list[str] = []
        for col, fig, what in (("tokens", count.tokens, "tokens"), ("batch", count.requests, "requests")):
            have = c[col][i]
            if not np.isnan(have):
                if (
                    fig.value is not None
                    and fig.value != have
                    and not (col == "tokens" and _grid_tokens(c, i, fig, notes))
                ):
                    notes.append(
                        f"{fig.source} count {fig.value:,} {what} where the annotation states {int(have):,}"
                        + (
                            "; the annotation's figure is kept: a graph's replayed grid is the size it was captured at"
                            if fig.replayed
                            else ""
                        )
                    )
                continue
            if fig.value is not None:
                c[col][i] = float(fig.value)
                c[f"{col}_confidence"][i] = fig.confidence
            c[f"{col}_source"][i] = fig.source
            if fig.note:
                notes.append(f"{what}: {fig.note}")
        if notes:
            c["evidence"][i] = _joined(c["evidence"][i], "; ".join(notes))
    c.store()


def _grid_tokens(c: _Columns, i: int, fig, notes: list[str]) -> bool:
    """Stronger evidence over a stated figure (issue 46): where launch grids of eagerly launched
    kernels (KV-cache writes, per-token kernels: one block per token), every source agreeing,
    count other tokens than the annotation states, the grid is what the GPU ran (an engine pads
    a batch; a grid replayed from a graph, fixed at its captured size, is not such evidence:
    ``step_tokens``), so a one-phase step takes its count, and its side follows, checked again
    (``base.consistent``: sums the new count contradicts are dropped, with a note). A mixed
    step keeps the annotation's total and sides: how the grid's rows split between them is
    not known. A count below the stated requests contradicts them too, and is only noted.
    True when the note is written here."""
    have, batch = c["tokens"][i], c["batch"][i]
    if not fig.launched or (not np.isnan(batch) and fig.value < batch):
        return False
    said = f"the annotation states {int(have):,} tokens, {fig.source} count {fig.value:,}"
    sides = [
        (col, side)
        for col in ("prefill_side", "decode_side")
        if isinstance(side := c[col][i], frameworks.BatchSide) and side.requests
    ]
    if c["phase"][i] == MIXED or len(sides) > 1:
        notes.append(
            f"{said}: the grid is what the GPU ran, but how its rows split between the step's prefill and "
            f"decode sides is not known, so the annotation's {int(have):,} and its sides are kept"
        )
        return True
    c["tokens"][i], c["tokens_source"][i], c["tokens_confidence"][i] = float(fig.value), fig.source, fig.confidence
    notes.append(f"{said}: the grid is what the GPU ran (engines pad a batch), so {fig.value:,} is used")
    for col, side in sides:
        problems: list[str] = []
        what = "prefill" if col == "prefill_side" else "decode"
        c[col][i] = consistent(dataclasses.replace(side, tokens=fig.value), f"{what} side's", problems)
        notes.extend(f"with the grid's {fig.value:,} tokens, {p}" for p in problems)
    return True


def _after_phase(steps: pd.DataFrame, stated: dict, notes: list[str]) -> None:
    """What a step's phase implies for its counts (a decode step computes one token per
    request, unless its annotation states its decode requests and leaves their tokens open:
    speculative decoding's verify and draft extend run several each, ``frameworks.sglang``),
    the user's stated figures, and the side of an annotation that names requests but not tokens
    (the prefill side of ``execute_new_N_cached_M``, the decode side of SGLang's TARGET_VERIFY):
    the step's tokens less the other side's."""
    c = _Columns(
        steps,
        (
            "phase",
            "tokens",
            "batch",
            "tokens_source",
            "batch_source",
            "tokens_confidence",
            "batch_confidence",
            "phase_confidence",
            "prefill_side",
            "decode_side",
            "evidence",
            "kv_tokens",
            "kv_tokens_source",
            "kv_tokens_confidence",
        ),
    )
    for i in range(len(steps)):
        phase = c["phase"][i]
        for col, key in (("tokens", "tokens"), ("batch", "batch")):
            table = stated.get(key) or {}
            value = table.get(phase, table.get("all"))
            if value is not None:
                # The option as it was typed: --batch 16 (every phase) or --batch decode=16.
                typed = f"{phase}={value}" if phase in table else f"{value}"
                c[col][i], c[f"{col}_source"][i], c[f"{col}_confidence"][i] = (
                    float(value),
                    f"{STATED_SOURCE} (--{key} {typed})",
                    1.0,
                )
        tokens, batch = c["tokens"][i], c["batch"][i]
        pre, dec = c["prefill_side"][i], c["decode_side"][i]
        open_decode = dec is not None and bool(dec.requests) and dec.tokens is None
        if phase == DECODE and np.isnan(batch) != np.isnan(tokens) and not open_decode:
            known = "tokens" if np.isnan(batch) else "batch"
            missing = "batch" if known == "tokens" else "tokens"
            c[missing][i] = c[known][i]
            c[f"{missing}_source"][i] = (
                f"a decode step computes one token per request ({known}: {c[f'{known}_source'][i]})"
            )
            c[f"{missing}_confidence"][i] = min(c[f"{known}_confidence"][i], _or_one(c["phase_confidence"][i]))
        for col, side, other, what in (("prefill_side", pre, dec, "new"), ("decode_side", dec, pre, "running")):
            if (
                side is None
                or not side.requests
                or side.tokens is not None
                or np.isnan(c["tokens"][i])
                or (other is not None and other.requests and other.tokens is None)
            ):
                continue
            rest = int(c["tokens"][i]) - (other.tokens or 0 if other is not None else 0)
            if rest >= side.requests:
                c[col][i] = dataclasses.replace(side, tokens=rest)
            else:
                c["evidence"][i] = _joined(
                    c["evidence"][i],
                    (
                        f"the step's {int(c['tokens'][i]):,} tokens leave fewer than one for each of its "
                        f"{side.requests} {what} requests: the {col.split('_')[0]} side's tokens are unknown"
                    ),
                )
        pre, dec = c["prefill_side"][i], c["decode_side"][i]
        if np.isnan(c["kv_tokens"][i]):
            sides = [x for x in (pre, dec) if x is not None and x.requests]
            if sides and all(x.kv_tokens is not None for x in sides):
                c["kv_tokens"][i] = float(sum(x.kv_tokens for x in sides))
                c["kv_tokens_source"][i], c["kv_tokens_confidence"][i] = ANNOTATION_SOURCE, 1.0
    c.store()


def _joined(before: str | None, why: str) -> str:
    """Evidence text: what the source said (when it said something useful), then the verdict."""
    if not before or before in ("no op shapes recorded", "op shapes do not show tokens per sequence"):
        return why
    return f"{before}; {why}"


def _or_one(value) -> float:
    return 1.0 if pd.isna(value) else float(value)
