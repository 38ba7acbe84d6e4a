"""The ``Analysis`` value: every table and figure a renderer may show, computed once.

Renderers (HTML, JSON, Markdown, terminal) read this and compute nothing. Its
``to_dict`` is the JSON contract (``SCHEMA_VERSION``); keys documented in the README
are stable. A figure that cannot be computed is ``None`` with the reason in
``provenance["reasons"]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

SCHEMA_VERSION = 1


@dataclass
class Finding:
    """One thing the analysis noticed, in a sentence (``text``), for a phase or the whole trace.

    Advice findings also say what to try (``action``) and the time it could save over the
    phase's steps (``at_stake_ms``): replayed on the steps' dependencies where ``at_stake_basis``
    is ``"replayed"`` (``sum_ms`` keeps the plain sum of the kernels' savings), with
    ``at_stake_note`` saying why it is not a fact on this run where the measurement is doubtful.
    """

    id: str
    text: str
    severity: str = "info"  # "info" | "warning"
    phase: str | None = None
    # Advice: what to try, and the time it could save (ms over the trace's steps of the phase).
    action: str | None = None
    at_stake_ms: float | None = None
    # Why the time at stake is not a fact on this run (analysis.measurement), or None.
    at_stake_note: str | None = None
    # The what-if that tries the action (replay.changes), replayed on the steps' dependencies to give
    # ``at_stake_ms``; ``at_stake_basis`` says how it was found ("replayed", or "sum" of the time
    # involved where no replay was possible), ``sum_ms`` that sum beside the replayed saving.
    whatif: list | None = field(default=None, repr=False, compare=False)
    at_stake_basis: str | None = None
    sum_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The finding as the JSON report writes it (``whatif``: each change described)."""
        return {
            "id": self.id,
            "text": self.text,
            "severity": self.severity,
            "phase": self.phase,
            "action": self.action,
            "at_stake_ms": self.at_stake_ms,
            "at_stake_note": self.at_stake_note,
            "at_stake_basis": self.at_stake_basis,
            "sum_ms": self.sum_ms,
            "whatif": [c.describe() for c in self.whatif] if self.whatif else None,
        }


@dataclass
class Analysis:
    """Everything ``analyze`` found in one trace: the tables as DataFrames, the figures as dicts.

    The two tables: ``steps``, one row per inference step (its phase, CPU and GPU window, busy
    and idle time, tokens where known), and ``work``, one row per unit of GPU work (a kernel,
    copy or set, or a graph replay's kernel) with its step, phase, category, FLOPs, bytes,
    roofline bound and limiter. ``phases`` holds each phase's figures (busy, idle, time by
    category, bound and limiter, MFU/MBU), ``metrics`` the run's headline numbers (TTFT, TPOT),
    ``findings`` what to look at, ``provenance`` where every figure came from and why any is
    missing. ``to_dict()`` is the JSON report (docs/json-schema.md).
    """

    source: dict[str, Any]  # trace path(s), era, events, tracekit version
    device: dict[str, Any]  # name, type, spec (row) or None, how matched, reason, peaks used
    workload: dict[str, Any] | None  # from the collect sidecar, when present
    run_kind: str
    phase_source: str
    steps: pd.DataFrame
    # Per unit of work: segmentation columns + roofline columns (not all serialised).
    work: pd.DataFrame
    phases: dict[str, dict[str, Any]]
    metrics: dict[str, Any]
    findings: list[Finding]
    provenance: dict[str, Any]
    # Per phase: the top kernels and the roofline points (op groups), already capped.
    top_kernels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    roofline: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The whole trace regardless of phase (kernel time by category, top kernels): all a
    # training trace without steps can show.
    overall: dict[str, Any] = field(default_factory=dict)
    # The model that priced kernels the shapes could not (None: no model given or recorded).
    model: dict[str, Any] | None = None
    # The slowest and a typical step, lane by lane (analysis.steps.timeline).
    timelines: list[dict[str, Any]] = field(default_factory=list)
    # Ranks side by side (analysis.ranks): one entry per rank of a multi-rank run, and the
    # straggler / skew / missing ranks; empty and None for a single-process trace.
    ranks: list[dict[str, Any]] = field(default_factory=list)
    rank_summary: dict[str, Any] | None = None
    # A trace cut off mid-write (analysis.truncation.view): what survived, the headline
    # sentence, why the step figures are partial; None for a whole file.
    truncated: dict[str, Any] | None = None
    # How far a collected run's own measurements can be trusted (analysis.measurement): a busy
    # machine, unreliable ceilings; None for a trace without a collect sidecar.
    measurement: dict[str, Any] | None = None
    # The step replay (analysis.replay): its books (each step measured vs replayed unchanged, the
    # unexplained wait, the latency models), the critical path by kind per phase, and what would
    # help, replayed (each finding's what-if and all of them together); None where no step was found.
    replay: dict[str, Any] | None = None
    # The replay itself (analysis.replay.replay.StepReplay), for what-ifs asked later; not serialised.
    replayer: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's document: every figure, JSON-safe (NaN and infinities as None)."""
        return json_safe(
            {
                "schema_version": SCHEMA_VERSION,
                "source": self.source,
                "device": self.device,
                "truncated": self.truncated,
                "measurement": self.measurement,
                "workload": self.workload,
                "run_kind": self.run_kind,
                "steps": _steps(self.steps),
                "phases": self.phases,
                "metrics": self.metrics,
                "top_kernels": self.top_kernels,
                "roofline": self.roofline,
                "overall": self.overall,
                "model": self.model,
                "timelines": self.timelines,
                **({"ranks": self.ranks, "rank_summary": self.rank_summary} if self.ranks else {}),
                "findings": [f.to_dict() for f in self.findings],
                "replay": self.replay,
                "provenance": {"phase_source": self.phase_source, **self.provenance},
            }
        )


def _steps(steps: pd.DataFrame) -> list[dict[str, Any]]:
    # Times are relative to the first step's CPU start: absolute trace clocks are
    # epoch-scale numbers nobody reads.
    t0 = int(steps["cpu_start_ns"].min()) if len(steps) else 0
    out = []
    for r in steps.itertuples(index=False):
        out.append(
            {
                "index": int(r.step),
                "phase": r.phase,
                "source": r.source,
                "evidence": r.evidence,
                "label": r.label,
                "cpu_start_ms": (r.cpu_start_ns - t0) / 1e6,
                "cpu_end_ms": (r.cpu_end_ns - t0) / 1e6,
                "gpu_start_ms": (r.gpu_start_ns - t0) / 1e6 if r.kernels else None,
                "gpu_end_ms": (r.gpu_end_ns - t0) / 1e6 if r.kernels else None,
                "duration_ms": r.duration_ns / 1e6,
                "gpu_busy_ms": r.gpu_busy_ns / 1e6,
                "gpu_idle_ms": r.gpu_idle_ns / 1e6,
                # Out of its duration: the GPU still on the previous step's work after its CPU start,
                # on work the trace did not record that its work waited on (steps.held), and on the
                # next step's work alone before its end.
                "previous_ms": getattr(r, "previous_ns", 0) / 1e6,
                "unrecorded_ms": getattr(r, "unrecorded_ns", 0) / 1e6,
                "next_ms": getattr(r, "next_ns", 0) / 1e6,
                "launch_gap_ms": r.launch_gap_ns / 1e6,
                # GPU idle inside the step by cause (analysis.waiting.idle), ms.
                "idle_by_cause": getattr(r, "idle_by_cause", None),
                "kernels": int(r.kernels),
                "tokens": None if pd.isna(r.tokens) else int(r.tokens),
                "batch": None if pd.isna(r.batch) else int(r.batch),
                # Where tokens and batch came from (annotation, evidence sources, the user, or why
                # none) and how sure (analysis.steps.step_tokens); kv_tokens where the annotation says.
                "tokens_source": getattr(r, "tokens_source", None),
                "tokens_confidence": _float(getattr(r, "tokens_confidence", None)),
                "batch_source": getattr(r, "batch_source", None),
                "batch_confidence": _float(getattr(r, "batch_confidence", None)),
                "kv_tokens": None if pd.isna(getattr(r, "kv_tokens", None)) else int(r.kv_tokens),
                # Where the keys came from (the annotation, or the run's history: steps.history) and how sure.
                "kv_tokens_source": getattr(r, "kv_tokens_source", None),
                "kv_tokens_confidence": _float(getattr(r, "kv_tokens_confidence", None)),
                "phase_confidence": _float(getattr(r, "phase_confidence", None)),
                "graph_replay": bool(r.graph_replay),
                # The batch of each phase as the step's annotation states it (None: not stated).
                "prefill": _side(getattr(r, "prefill_side", None)),
                "decode": _side(getattr(r, "decode_side", None)),
                # Per-step attribution (kernel time by bound, work, bandwidth use).
                "compute_ms": _get(r, "compute_ms"),
                "memory_ms": _get(r, "memory_ms"),
                "interconnect_ms": _get(r, "interconnect_ms"),
                "unknown_ms": _get(r, "unknown_ms"),
                "unknown_cost_ms": _get(r, "unknown_cost_ms"),
                "flops": _get(r, "flops"),
                "bytes": _get(r, "bytes"),
                "mbu": _get(r, "mbu"),
                # What its bytes and MBU are: "upper"/"lower" bound, the model's "estimate", or null.
                "mbu_estimate": getattr(r, "mbu_estimate", None),
                # Mixed steps: the prefill and decode parts (requests, tokens, kv_tokens, gpu_ms).
                **({"split": r.split} if getattr(r, "split", None) else {}),
            }
        )
    return out


def _side(side: Any) -> dict[str, Any] | None:
    return side.to_dict() if hasattr(side, "to_dict") else None


def _get(row: Any, name: str) -> float | None:
    value = getattr(row, name, None)
    return None if value is None or pd.isna(value) else float(value)


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _float(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)
