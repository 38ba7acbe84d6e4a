"""Findings: plain sentences computed from an ``Analysis``, each from a documented threshold.

| id                    | fires when                                                         |
|-----------------------|--------------------------------------------------------------------|
| training-run          | the trace is a training run (backward ops / optimizer steps)        |
| no-steps              | no inference step was found                                        |
| device-unknown        | the device has no spec row: the roofline is absent                  |
| decode-launch-bound   | decode GPU idle share >= LAUNCH_BOUND_IDLE                          |
| phase-bound           | per phase, the bound holding the most kernel time (always, one each)|
| prefill-gemm-efficiency | prefill GEMMs with known cost: time-weighted fraction of roof     |
| decode-attention-share | attention >= ATTENTION_SHARE of decode kernel time                 |
| unknown-cost          | a phase has >= UNKNOWN_COST_SHARE of kernel time with unknown cost  |
| tpot-growth           | decode steps' last quarter is >= TPOT_GROWTH slower than the first  |
| outside-steps         | >= OUTSIDE_SHARE of the trace's work ran outside any step           |
| graph-replay          | a step was replayed from a CUDA/HIP graph                           |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.analysis.model import Finding

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis

LAUNCH_BOUND_IDLE = 0.30
ATTENTION_SHARE = 0.25
UNKNOWN_COST_SHARE = 0.20
TPOT_GROWTH = 0.20
OUTSIDE_SHARE = 0.10

_PHASE_TEXT = {"unknown": "unclassified steps'", "mixed": "mixed steps'"}


def findings(a: Analysis) -> list[Finding]:
    out: list[Finding] = []
    if a.run_kind == "training":
        out.append(
            Finding(
                "training-run",
                "This is a training run (backward ops or optimizer steps are in the trace): "
                "tracekit reports no prefill or decode steps for it.",
            )
        )
    elif not len(a.steps):
        out.append(Finding("no-steps", "No inference step was found in the trace.", "warning"))
    if a.device.get("spec") is None:
        out.append(
            Finding(
                "device-unknown",
                f"The roofline is absent: {a.device.get('reason') or 'the device has no peak specs'}.",
                "warning",
            )
        )
    dec = a.phases.get("decode")
    cpu = a.device.get("type") == "cpu"
    unit = "CPU" if cpu else "GPU"
    if dec and (dec.get("idle_share") or 0) >= LAUNCH_BOUND_IDLE:
        graphs = bool(a.steps.loc[a.steps["phase"] == "decode", "graph_replay"].any())
        if cpu:
            text = (
                f"Decode is overhead-bound: {dec['idle_share']:.0%} of each decode step passes between compute ops "
                "(Python and framework dispatch); torch.compile or a larger batch would help."
            )
        elif graphs:
            text = (
                f"Decode is launch-bound: the GPU is idle {dec['idle_share']:.0%} of each decode step although the steps "
                "replay a graph, so the CPU work around the replay (scheduling, sampling, Python) is what the GPU waits for."
            )
        else:
            text = (
                f"Decode is launch-bound: the GPU is idle {dec['idle_share']:.0%} of each decode step; "
                "CUDA graphs or a larger batch would help."
            )
        out.append(Finding("decode-launch-bound", text, "warning", "decode"))
    for phase, p in a.phases.items():
        kernel = p["kernel_ms"]
        if not kernel:
            continue
        bound, ms = max(((b, p["by_bound"][b]) for b in ("compute", "memory", "unknown")), key=lambda x: x[1])
        what = {"compute": "compute-bound", "memory": "memory-bound", "unknown": "of unknown bound"}[bound]
        text = f"{_PHASE_TEXT.get(phase, phase).capitalize()}: {ms / kernel:.0%} of kernel time is {what}"
        if p.get("idle_share") is not None:
            text += f", and the {unit} is idle {p['idle_share']:.0%} of the phase"
        out.append(Finding("phase-bound", text + ".", "info", phase))
    pre_rows = a.work[(a.work["phase"] == "prefill") & (a.work["category"] == "gemm") & a.work["roof_fraction"].notna()]
    if len(pre_rows):
        d = pre_rows["dur_ns"]
        frac = float((pre_rows["roof_fraction"] * d).sum() / d.sum())
        out.append(
            Finding(
                "prefill-gemm-efficiency",
                f"Prefill GEMMs reach {frac:.0%} of the roofline ({a.device.get('spec')}, {a.device.get('peak_basis')}).",
                "info",
                "prefill",
            )
        )
    if dec and dec["kernel_ms"]:
        attn = dec["by_category"].get("attention", 0.0) / dec["kernel_ms"]
        if attn >= ATTENTION_SHARE:
            ctx = _decode_context(a)
            out.append(
                Finding(
                    "decode-attention-share",
                    f"Attention is {attn:.0%} of decode kernel time{ctx}: the KV cache read dominates as context grows.",
                    "info",
                    "decode",
                )
            )
    for phase, p in a.phases.items():
        share = p.get("unknown_cost_share")
        if share is not None and share >= UNKNOWN_COST_SHARE:
            why = _main_reason(a, phase)
            out.append(
                Finding(
                    "unknown-cost",
                    f"{share:.0%} of {_PHASE_TEXT.get(phase, phase)} kernel time has unknown cost: {why}.",
                    "warning",
                    phase,
                )
            )
    growth = a.metrics.get("tpot_growth")
    if growth is not None and growth >= TPOT_GROWTH:
        out.append(
            Finding(
                "tpot-growth",
                f"Decode steps slow down {growth:.0%} from the first to the last quarter of the run, "
                "as the KV cache grows.",
                "info",
                "decode",
            )
        )
    total = float(a.work["dur_ns"].sum())
    outside = float(a.work.loc[a.work["step"] < 0, "dur_ns"].sum())
    if len(a.steps) and total and outside / total >= OUTSIDE_SHARE:
        out.append(
            Finding(
                "outside-steps",
                f"{outside / total:.0%} of the trace's kernel time ran outside any step "
                "(work launched before the profiled window, or between steps).",
                "info",
            )
        )
    if len(a.steps) and bool(a.steps["graph_replay"].any()):
        captured = a.provenance.get("graph_capture")
        text = (
            f"Some steps replay a CUDA/HIP graph; {captured}."
            if captured
            else "Some steps replay a CUDA/HIP graph: per-op attribution inside a replay needs the graph-capture "
            "trace (tracekit report --graph-capture TRACE)."
        )
        out.append(Finding("graph-replay", text, "info"))
    return out


def _main_reason(a: Analysis, phase: str) -> str:
    w = a.work[(a.work["phase"] == phase) & a.work["flops"].isna()]
    if not len(w):
        return "no reason recorded"
    reasons = w.groupby(w["cost_reason"].fillna("no reason recorded"))["dur_ns"].sum()
    return str(reasons.idxmax())


def _decode_context(a: Analysis) -> str:
    side = (a.workload or {}).get("workload") or {}
    prompt, new = side.get("prompt_len"), side.get("new_tokens")
    if prompt:
        return f" at {prompt}{'-' + str(prompt + new) if new else ''} tokens of context"
    return ""
