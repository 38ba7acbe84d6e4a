"""Prefill/decode segmentation: which inference step each unit of device work belongs to.

A *step* is one forward pass of the model (a prefill pass, a decode step, or a
mixed continuous-batching step), seen as a CPU-side range on the thread that
launched its work. Work (GPU kernels, memcpy and memset; on a CPU-only trace the
leaf aten ops) belongs to the step whose CPU range contains the moment it was
*issued* on the same thread: the kernel's launch call, found through the
correlation id, because GPU work runs late and often outside the CPU range.

Where step ranges come from, strongest first (``Step source`` in reports):

1. tracekit's own markers (``tracekit.markers``), written by ``tracekit collect``.
2. Framework annotations: SGLang ``step[EXTEND|DECODE|MIXED ...]``, vLLM
   ``execute_..._context_N(...)_generation_M(...)``, and user ``record_function``
   ranges whose names say prefill or decode.
3. Inference from the trace when there are no annotations: forward passes are
   found from the token-embedding lookups that start each pass (or the outermost
   ``nn.Module`` spans, or ``ProfilerStep#N``), and each is classified from
   evidence: the tokens-per-sequence dimension of embedding, attention and linear
   input shapes (1 = decode), and decode- or prefill-only attention kernels. When
   the evidence is too weak the phase stays ``unknown``.

A trace with backward ops or optimizer steps is a training run: no prefill or
decode steps are invented for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import markers
from tracekit.analysis import taxonomy
from tracekit.trace.links import op_parents
from tracekit.trace.model import Trace

PREFILL, DECODE, MIXED, UNKNOWN = "prefill", "decode", "mixed", "unknown"
PHASES = (PREFILL, DECODE, MIXED, UNKNOWN)

SOURCE_MARKERS = "tracekit markers"
SOURCE_SGLANG = "SGLang step annotations"
SOURCE_VLLM = "vLLM-style execute annotations"
SOURCE_USER = "user record_function ranges"
SOURCE_INFERRED = "inferred from the trace (no phase annotations)"
SOURCE_NONE = "none"
# Strongest first: a run's overall source is the strongest one any step used.
SOURCE_ORDER = (SOURCE_MARKERS, SOURCE_SGLANG, SOURCE_VLLM, SOURCE_USER, SOURCE_INFERRED, SOURCE_NONE)

RUN_INFERENCE, RUN_TRAINING, RUN_EMPTY = "inference", "training", "no steps found"

_SGLANG_RE = re.compile(r"^step\[(EXTEND|PREFILL|DECODE|MIXED|IDLE)\b([^\]]*)\]", re.IGNORECASE)
_VLLM_RE = re.compile(
    r"^execute(?:_(\d+))?_context_(\d+)\(([^)]*)\)_generation_(\d+)\(([^)]*)\)", re.IGNORECASE
)
_USER_RE = re.compile(r"(?<![a-z])(prefill|decode)(?![a-z])", re.IGNORECASE)
_KV_RE = re.compile(r"(\w+)=(\d+)")
_TRAINING_OP_RE = re.compile(r"Backward|autograd::engine::evaluate_function")
_ATTENTION_OP_RE = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|attention_forward", re.I)


@dataclass
class Segmentation:
    """Steps and the step of every unit of work; input to metrics and attribution."""

    run_kind: str
    device_type: str  # "gpu" or "cpu" (CPU-only trace: leaf ops are the work)
    # One row per unit of device work. Columns: name, kind, start_ns, end_ns, dur_ns,
    # op (cpu_ops row or -1), graph (bool), issue_ns, issue_tid, step (-1 = outside), phase.
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
    "gpu_busy_ns": "int64",
    "gpu_idle_ns": "int64",
    "launch_gap_ns": "int64",
    "duration_ns": "int64",
    "kernels": "int64",
    "tokens": "float64",
    "batch": "float64",
    "graph_replay": "bool",
}


def segment(trace: Trace) -> Segmentation:
    """Split a trace into inference steps and assign every unit of work to one."""
    work, device_type = _work_table(trace)
    notes: list[str] = []

    candidates = _annotated_ranges(trace)
    if not candidates and _is_training(trace):
        work["step"] = -1
        work["phase"] = UNKNOWN
        notes.append("backward ops or optimizer steps found: this is a training run, not inference")
        return Segmentation(RUN_TRAINING, device_type, work, _empty_steps(), SOURCE_NONE, notes)
    if not candidates:
        candidates = _inferred_passes(trace, work)
        if candidates:
            notes.append("no phase annotations: forward passes were found and classified from trace evidence")

    ranges = pd.DataFrame(candidates, columns=["start", "end", "tid", "phase", "source", "evidence", "label", "tokens", "batch"])
    ranges = _drop_nested(ranges)
    work["step"] = _assign(work, ranges)
    steps = _steps_table(ranges, work)
    _resolve_by_kernels(steps, work)
    phase_of_step = steps["phase"].to_numpy() if len(steps) else np.array([UNKNOWN], dtype=object)
    work["phase"] = np.where(work["step"] >= 0, phase_of_step[np.maximum(work["step"].to_numpy(), 0)], UNKNOWN)
    source = min(steps["source"], key=SOURCE_ORDER.index) if len(steps) else SOURCE_NONE
    run_kind = RUN_INFERENCE if len(steps) else RUN_EMPTY
    outside = int((work["step"] < 0).sum())
    if len(steps) and outside:
        notes.append(f"{outside} of {len(work)} units of work were issued outside any step")
    return Segmentation(run_kind, device_type, work, steps, source, notes)


def _resolve_by_kernels(steps: pd.DataFrame, work: pd.DataFrame) -> None:
    """Inferred steps whose shapes said nothing take their phase from the kernels they own.

    Linear inputs are no evidence: [seq, batch, hidden] and [batch, seq, hidden] layouts
    look alike, so a 3-D linear input cannot name the token axis.
    """
    if not len(steps):
        return
    unresolved = (steps["source"] == SOURCE_INFERRED) & (steps["phase"] == UNKNOWN)
    for i in np.flatnonzero(unresolved.to_numpy()):
        steps.at[i, "phase"], steps.at[i, "evidence"] = _kernel_evidence(work.loc[work["step"] == i, "name"])


# --- work ---------------------------------------------------------------------------


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
                "graph": k["graph"],
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
            "graph": False,
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
    real = ~ops["name"].astype(str).isin(_METADATA_OPS).to_numpy()
    has_real_below = np.zeros(len(ops), dtype=bool)
    frontier = parents[real & (parents >= 0)]
    while len(frontier):
        frontier = frontier[~has_real_below[frontier]]
        has_real_below[frontier] = True
        frontier = parents[frontier]
        frontier = frontier[frontier >= 0]
    return np.flatnonzero(real & ~has_real_below)


# --- annotated ranges ----------------------------------------------------------------


def _annotated_ranges(trace: Trace) -> list[tuple]:
    """(start, end, tid, phase, source, evidence, label, tokens, batch) for every annotated step."""
    ann = trace.annotations
    if not len(ann):
        return []
    cpu = ann[ann["side"] == "cpu"]
    ours: list[tuple] = []
    framework: list[tuple] = []
    for name, start, end, tid in zip(cpu["name"].astype(str), cpu["start_ns"], cpu["end_ns"], cpu["tid"]):
        m = markers.parse(name)
        if m is not None:
            if m.phase in (PREFILL, DECODE):
                evidence = f"marker {name!r}"
                ours.append((start, end, tid, m.phase, SOURCE_MARKERS, evidence, name, m.tokens, m.batch))
            continue
        parsed = _parse_framework(name)
        if parsed is not None:
            framework.append((start, end, tid, *parsed, name, *_tokens_batch(name)))
    # tracekit's markers, where present, are the whole truth for the trace.
    return ours or framework


def _parse_framework(name: str) -> tuple[str, str, str] | None:
    """(phase, source, evidence) that a framework or user annotation name encodes."""
    m = _SGLANG_RE.match(name)
    if m:
        mode = m.group(1).upper()
        if mode == "IDLE":
            return None
        phase = {"EXTEND": PREFILL, "PREFILL": PREFILL, "DECODE": DECODE, "MIXED": MIXED}[mode]
        return phase, SOURCE_SGLANG, f"SGLang forward mode {mode}"
    m = _VLLM_RE.match(name)
    if m:
        ctx, gen = int(m.group(2)), int(m.group(4))
        if ctx and gen:
            phase = MIXED
        elif ctx:
            phase = PREFILL
        elif gen:
            phase = DECODE
        else:
            return None
        return phase, SOURCE_VLLM, f"vLLM batch with {ctx} context (prefill) and {gen} generation (decode) requests"
    if name.startswith(("ProfilerStep#", "capture_")):
        return None
    m = _USER_RE.search(name)
    if m:
        return m.group(1).lower(), SOURCE_USER, f"range name {name!r} says {m.group(1).lower()}"
    return None


def _tokens_batch(name: str) -> tuple[float | None, float | None]:
    """Tokens and batch size an annotation states (SGLang bs=/toks=, vLLM counts)."""
    m = _VLLM_RE.match(name)
    if m:
        requests = int(m.group(2)) + int(m.group(4))
        tokens = int(m.group(1)) if m.group(1) else _sum_tokens(m.group(3)) + _sum_tokens(m.group(5))
        return float(tokens), float(requests)
    fields = dict(_KV_RE.findall(name))
    batch = float(fields["bs"]) if "bs" in fields else None
    tokens = float(fields.get("toks", fields.get("tokens"))) if ("toks" in fields or "tokens" in fields) else None
    return tokens, batch


def _sum_tokens(text: str) -> int:
    # Simple form "(<tokens>)"; detailed form "(sq<query tokens>sk<...>...)".
    m = re.match(r"^\s*(\d+)\s*$", text) or re.match(r"^sq(\d+)", text)
    return int(m.group(1)) if m else 0


def _drop_nested(ranges: pd.DataFrame) -> pd.DataFrame:
    """Keep the outermost of nested step ranges on a thread (SGLang writes two per step)."""
    if not len(ranges):
        return ranges
    ranges = ranges.sort_values(["tid", "start", "end"], ascending=[True, True, False]).reset_index(drop=True)
    keep = []
    for tid, group in ranges.groupby("tid", sort=False):
        last_end = None
        last_idx = None
        for idx, row in group.iterrows():
            if last_end is not None and row["start"] >= ranges.at[last_idx, "start"] and row["end"] <= last_end:
                # Nested (SGLang wraps its step[...] range in an execute_... one): keep
                # the outer extent, the stronger source's verdict, and every count stated.
                if SOURCE_ORDER.index(row["source"]) < SOURCE_ORDER.index(ranges.at[last_idx, "source"]):
                    for col in ("phase", "source", "evidence", "label"):
                        ranges.at[last_idx, col] = row[col]
                for col in ("tokens", "batch"):
                    if pd.isna(ranges.at[last_idx, col]) and not pd.isna(row[col]):
                        ranges.at[last_idx, col] = row[col]
                continue
            keep.append(idx)
            last_end, last_idx = row["end"], idx
    return ranges.loc[keep].sort_values("start").reset_index(drop=True)


# --- inferred passes -----------------------------------------------------------------


def _is_training(trace: Trace) -> bool:
    names = pd.Series(trace.cpu_ops["name"].cat.categories if len(trace.cpu_ops) else [], dtype=object)
    if len(names) and names.str.contains(_TRAINING_OP_RE).any():
        return True
    ann = trace.annotations["name"].astype(str) if len(trace.annotations) else pd.Series([], dtype=object)
    return bool(ann.str.startswith("Optimizer.step").any())


def _inferred_passes(trace: Trace, work: pd.DataFrame) -> list[tuple]:
    """Forward passes of an unannotated trace, each classified from its op shapes.

    A pass starts at an *anchor*: a token-embedding lookup (the first thing a
    language model's forward does) or else the start of an outermost ``nn.Module``
    span, and lasts until the next anchor on its thread; the first pass takes in
    everything before it and the last everything after, so no work between passes
    is lost (a sampler after the model, a graph replay outside any module span).
    ``ProfilerStep#N`` ranges are the fallback, then the whole trace as one pass.
    """
    ops = trace.cpu_ops
    if not len(ops):
        return []
    anchors = _embedding_anchors(ops) or _module_anchors(trace)
    if anchors:
        bounds = _passes_from_anchors(anchors, work, trace)
    else:
        bounds = _profiler_steps(trace)
    if not bounds:
        tids = work["issue_tid"][work["issue_tid"] >= 0]
        tid = int(tids.mode().iloc[0]) if len(tids) else int(ops["tid"].mode().iloc[0])
        lo, hi = _thread_span(trace, tid)
        bounds = [(lo, hi, tid, "whole trace")]
    out = []
    for start, end, tid, label in bounds:
        inside = ops[(ops["tid"] == tid) & (ops["start_ns"] >= start) & (ops["start_ns"] < end)]
        phase, evidence, tokens, batch = _shape_evidence(inside)
        out.append((start, end, tid, phase, SOURCE_INFERRED, evidence, label, tokens, batch))
    return out


def _thread_span(trace: Trace, tid: int) -> tuple[int, int]:
    """First start and last end of anything the CPU thread did (ops and runtime calls)."""
    spans = [t[t["tid"] == tid] for t in (trace.cpu_ops, trace.runtime) if len(t)]
    spans = [t for t in spans if len(t)]
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
        d = _loads(dims)
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
    mods = py[py["name"].astype(str).str.startswith("nn.Module: ")]
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
    ps = ann[(ann["side"] == "cpu") & ann["name"].astype(str).str.startswith("ProfilerStep#")]
    return [(int(r.start_ns), int(r.end_ns), int(r.tid), str(r.name)) for r in ps.itertuples()]


def _shape_evidence(ops: pd.DataFrame) -> tuple[str, str, float | None, float | None]:
    """(phase, evidence, tokens, batch) from the shapes of a pass's ops; unknown when silent."""
    if not len(ops) or ops["input_dims"].isna().all():
        return UNKNOWN, "no op shapes recorded", None, None
    names = ops["name"].astype(str)
    # Token embedding input ids [batch, tokens per sequence].
    for dims in ops.loc[names == "aten::embedding", "input_dims"]:
        d = _loads(dims)
        if d and len(d) >= 2 and isinstance(d[1], list) and len(d[1]) == 2:
            b, t = d[1]
            return _by_tokens(t, f"token ids of shape [{b}, {t}] in aten::embedding", b * t, b)
    # Attention query [batch, heads, query tokens, head dim].
    for name, dims in zip(names[names.str.contains(_ATTENTION_OP_RE)], ops.loc[names.str.contains(_ATTENTION_OP_RE), "input_dims"]):
        d = _loads(dims)
        if d and isinstance(d[0], list) and len(d[0]) == 4:
            b, _, lq, _ = d[0]
            return _by_tokens(lq, f"query of shape {d[0]} in {name}", b * lq, b)
    return UNKNOWN, "op shapes do not show tokens per sequence", None, None


def _by_tokens(t: int, where: str, tokens: int, batch: int) -> tuple[str, str, float, float]:
    if t == 1:
        return DECODE, f"one token per sequence: {where}", float(tokens), float(batch)
    return PREFILL, f"{t} tokens per sequence: {where}", float(tokens), float(batch)


def _kernel_evidence(names: pd.Series) -> tuple[str, str]:
    """Phase that decode- or prefill-only attention kernels imply, or unknown."""
    unique = pd.unique(names.astype(str))
    dec = [n for n in unique if taxonomy.is_decode_attention(n)]
    pre = [n for n in unique if taxonomy.is_prefill_attention(n)]
    if dec and pre:
        return MIXED, f"both decode ({_short(dec[0])}) and prefill ({_short(pre[0])}) attention kernels"
    if dec:
        return DECODE, f"decode attention kernel {_short(dec[0])}"
    if pre:
        return PREFILL, f"prefill attention kernel {_short(pre[0])}"
    return UNKNOWN, "neither op shapes nor kernel names show prefill or decode: too little evidence to decide"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _loads(text):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


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


def _steps_table(ranges: pd.DataFrame, work: pd.DataFrame) -> pd.DataFrame:
    if not len(ranges):
        return _empty_steps()
    rows = []
    step_of = work["step"].to_numpy()
    order = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[order], np.arange(len(ranges) + 1))
    starts = work["start_ns"].to_numpy()
    ends = work["end_ns"].to_numpy()
    issues = work["issue_ns"].to_numpy()
    graph = work["graph"].to_numpy()
    for i, r in enumerate(ranges.itertuples()):
        mine = order[bounds[i] : bounds[i + 1]]
        busy, gap, g0, g1 = _busy(starts[mine], ends[mine], issues[mine])
        cpu0, cpu1 = int(r.start), int(r.end)
        duration = (max(cpu1, g1) - cpu0) if len(mine) else cpu1 - cpu0
        rows.append(
            {
                "step": i,
                "phase": r.phase,
                "source": r.source,
                "evidence": r.evidence,
                "label": r.label,
                "tid": int(r.tid),
                "cpu_start_ns": cpu0,
                "cpu_end_ns": cpu1,
                "gpu_start_ns": g0,
                "gpu_end_ns": g1,
                "gpu_busy_ns": busy,
                "gpu_idle_ns": (g1 - g0 - busy) if len(mine) else 0,
                "launch_gap_ns": gap,
                "duration_ns": duration,
                "kernels": len(mine),
                "tokens": np.nan if r.tokens is None or pd.isna(r.tokens) else float(r.tokens),
                "batch": np.nan if r.batch is None or pd.isna(r.batch) else float(r.batch),
                "graph_replay": bool(graph[mine].any()) if len(mine) else False,
            }
        )
    return pd.DataFrame(rows).astype(_STEP_COLUMNS)


def _busy(starts: np.ndarray, ends: np.ndarray, issues: np.ndarray) -> tuple[int, int, int, int]:
    """(busy ns as the union of intervals, launch-bound idle ns, first start, last end).

    Launch-bound idle: gaps in which the device waited for work the CPU had not yet
    issued (the next item was launched after the device went idle).
    """
    if not len(starts):
        return 0, 0, -1, -1
    o = np.argsort(starts, kind="stable")
    s, e, iss = starts[o], ends[o], issues[o]
    run_end = np.maximum.accumulate(e)
    gaps = np.maximum(s[1:] - run_end[:-1], 0)
    busy = int((e - s).sum() - _overlap(s, e, run_end))
    late = iss[1:] >= run_end[:-1]
    return busy, int(gaps[late].sum()), int(s[0]), int(run_end[-1])


def _overlap(s: np.ndarray, e: np.ndarray, run_end: np.ndarray) -> int:
    """Total time counted twice by overlapping intervals (streams running concurrently)."""
    if len(s) < 2:
        return 0
    prev_end = run_end[:-1]
    return int(np.clip(np.minimum(e[1:], prev_end) - s[1:], 0, None).sum())


def _empty_steps() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _STEP_COLUMNS.items()})
