"""How alike two runs are: the differences that make a comparison unfair (device, spec row,
batch, prompt length, model, collect settings...), and the check that the runs of one side are
repeats of one workload.

``context_rows(before, after)`` gives one row per difference, shown before any delta;
``workload_of(a)`` the workload figures of a run they are read from; ``check_same_workload``
raises when the runs pooled on one side differ.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from tracekit.analysis.model import Analysis
from tracekit.errors import TracekitError

CONTEXT_LABELS = {
    "device": "device",
    "spec row": "spec row",
    "phases decided by": "phases decided by",
    "run kind": "run kind",
    "batch": "batch size",
    "prompt_len": "prompt length",
    "new_tokens": "new tokens",
    "decode_steps": "decode steps",
    "dtype": "dtype",
    "model": "model",
    "prefill_tokens": "prompt tokens per prefill step",
    "gemm_flops_per_token": "GEMM FLOPs per prompt token",
}


# What runs of one side must share: pooling the steps of different workloads would measure nothing.
SAME_WORKLOAD = ("device", "spec row", "phases decided by", "run kind", "model", "batch", "prompt_len", "dtype")


def check_same_workload(runs: Sequence[Analysis], side: str) -> None:
    """Raise ``TracekitError`` (one sentence) when the runs of one side differ in device, model,
    batch, prompt length, dtype or how their steps were found: they are then not repeats of one
    workload, and their pooled figures and run-to-run spread would mix two."""
    first = runs[0]
    for other in runs[1:]:
        rows = [r for r in context_rows(first, other) if r["field"] in SAME_WORKLOAD]
        fb, fa = workload_of(first).get("gemm_flops_per_token"), workload_of(other).get("gemm_flops_per_token")
        if not rows and fb and fa and abs(fa / fb - 1) > 0.1:
            rows = [{"label": "GEMM FLOPs per prompt token", "before": fb, "after": fa}]
        if rows:
            diff = "; ".join(f"{r['label']} {plain(r['before'])} vs {plain(r['after'])}" for r in rows)
            raise TracekitError(
                f"the {side} runs are not repeats of one workload ({_run_name(first)} vs {_run_name(other)}: {diff}); "
                "give runs of the same workload per side, or compare the two as BEFORE and AFTER"
            )


def _run_name(a: Analysis) -> str:
    src = a.source or {}
    return str(src.get("path") or src.get("name") or "a run")


def context_rows(before: Analysis, after: Analysis) -> list[dict[str, Any]]:
    """Differences that make the comparison unfair, shown before any delta."""
    rows = []

    def add(field_: str, b: Any, a: Any, note: str) -> None:
        if b != a:
            rows.append(
                {"field": field_, "label": CONTEXT_LABELS.get(field_, field_), "before": b, "after": a, "note": note}
            )

    add(
        "device",
        before.device.get("name"),
        after.device.get("name"),
        "different devices: each run is measured against its own roofline",
    )
    add(
        "spec row",
        before.device.get("spec"),
        after.device.get("spec"),
        "different peaks: MFU, MBU and % of roof are each against their own row",
    )
    add(
        "phases decided by",
        before.phase_source,
        after.phase_source,
        "phases were decided differently: step boundaries may not line up",
    )
    add("run kind", before.run_kind, after.run_kind, "the runs are of different kinds")
    wb, wa = workload_of(before), workload_of(after)
    for key, note in (
        ("batch", "different batch sizes: per-step time and tokens/s are not like for like"),
        ("prompt_len", "different prompt lengths: TTFT and the KV cache differ"),
        ("new_tokens", "different numbers of generated tokens"),
        ("decode_steps", "different numbers of decode steps: phase totals are compared per step"),
        ("dtype", "different dtypes: peaks and bytes per element differ"),
        ("model", "different models"),
        ("prefill_tokens", "different numbers of prompt tokens per prefill step (batch x prompt length)"),
    ):
        if key == "decode_steps" and not (wb.get(key) and wa.get(key)):
            continue  # a phase only one run has is said in that phase, not here
        add(key, wb.get(key), wa.get(key), note)
    for key, label, (vb, va, why) in _collect_settings(before, after):
        rows.append({"field": key, "label": label, "before": vb, "after": va, "note": why})
    fb, fa = wb.get("gemm_flops_per_token"), wa.get("gemm_flops_per_token")
    if fb and fa and abs(fa / fb - 1) > 0.1 and "model" not in {r["field"] for r in rows}:
        rows.append(
            {
                "field": "gemm_flops_per_token",
                "label": CONTEXT_LABELS["gemm_flops_per_token"],
                "before": fb,
                "after": fa,
                "note": f"{fa / fb:.2g}x the GEMM work per token: most likely a different model (size) or shapes",
            }
        )
    return rows


# Measured ceilings more than this far apart make MFU, MBU and % of roof incomparable.
CEILING_GAP = 0.20


def _collect_settings(before: Analysis, after: Analysis) -> list[tuple[str, str, tuple]]:
    """How tracekit collect ran each side, where the sidecars say: measured ceilings, CPU
    threads, torch.compile, CUDA graphs and the recording schedule. (key, label, (before,
    after, note)) for each that differs."""
    sb, sa = before.workload or {}, after.workload or {}
    out: list[tuple[str, str, tuple]] = []
    cb, ca = sb.get("calibration") or {}, sa.get("calibration") or {}
    for what, get, unit in (
        ("matmul", lambda c: next(iter((c.get("matmul_flops") or {}).values()), None), 1e12),
        ("copy bandwidth", lambda c: c.get("copy_bandwidth"), 1e9),
    ):
        vb, va = get(cb), get(ca)
        if vb and va and max(vb, va) / min(vb, va) > 1 + CEILING_GAP:
            u = "TFLOP/s" if unit == 1e12 else "GB/s"
            out.append(
                (
                    f"ceiling_{what}",
                    f"measured {what} ceiling",
                    (
                        f"{vb / unit:.3g} {u}",
                        f"{va / unit:.3g} {u}",
                        f"the measured ceilings differ {max(vb, va) / min(vb, va):.2g}x: MFU, MBU and % of roof are against "
                        "different roofs (a busy machine measures low)",
                    ),
                )
            )
    for key, label, get, note in (
        (
            "threads",
            "CPU threads",
            lambda s: (s.get("device") or {}).get("threads"),
            "different thread counts: CPU timings are not like for like",
        ),
        (
            "compile",
            "torch.compile",
            lambda s: (s.get("workload") or {}).get("compile"),
            "one run was compiled: kernels and their count differ",
        ),
        (
            "cuda_graphs",
            "CUDA graphs",
            lambda s: (s.get("workload") or {}).get("cuda_graphs"),
            "one run replays CUDA graphs: launch overhead differs",
        ),
        (
            "schedule",
            "recording schedule",
            lambda s: _schedule(s),
            "tracekit collect recorded different steps (warm-up, skipped or recorded decode steps)",
        ),
    ):
        vb, va = get(sb), get(sa)
        if sb and sa and vb != va:
            out.append((key, label, (vb, va, note)))
    return out


def _schedule(side: dict) -> str | None:
    sched = side.get("schedule") or {}
    timing = side.get("timing") or {}
    keys = ("skip_decode_steps", "profiler_warmup_steps", "record_decode_steps")
    parts = [f"{k.replace('_', ' ')} {sched[k]}" for k in keys if sched.get(k) is not None]
    if timing.get("warmup_runs") is not None:
        parts.append(f"warm-up runs {timing['warmup_runs']}")
    return ", ".join(parts) or None


def workload_of(a: Analysis) -> dict[str, Any]:
    """Batch, prompt length, dtype, model: from the collect sidecar, else from the steps."""
    side = ((a.workload or {}).get("workload")) or {}
    out = {
        "batch": side.get("batch_size"),
        "prompt_len": side.get("prompt_len"),
        "new_tokens": side.get("new_tokens"),
        "decode_steps": int((a.phases.get("decode") or {}).get("steps") or 0) or None,
        "dtype": side.get("dtype"),
        "model": side.get("preset") or side.get("model_path") or side.get("architecture"),
    }
    steps = a.steps
    pre = steps[steps["phase"] == "prefill"] if len(steps) else steps
    out["prefill_tokens"] = int(pre["tokens"].iloc[0]) if len(pre) and pd.notna(pre["tokens"].iloc[0]) else None
    if out["batch"] is None and len(steps) and steps["batch"].notna().any():
        out["batch"] = int(steps["batch"].dropna().iloc[0])
    w = a.work
    if out["dtype"] is None and len(w) and "dtype" in w and (w["unit"] == "matrix").any():
        dt = w.loc[w["unit"] == "matrix", "dtype"].dropna()
        out["dtype"] = str(dt.mode().iloc[0]) if len(dt) else None
    out["gemm_flops_per_token"] = None
    if len(pre) and pre["tokens"].notna().all() and len(w):
        sel = w[(w["phase"] == "prefill") & (w["category"] == "gemm")]
        flops = float(np.nansum(sel["flops"].to_numpy(dtype=float))) if len(sel) else 0.0
        tokens = float(pre["tokens"].sum())
        if flops > 0 and tokens > 0:
            out["gemm_flops_per_token"] = flops / tokens
    return out


def plain(v: Any) -> str:
    """A context value as a sentence writes it: None as "unknown", a float to 3 digits with T, G or M."""
    if v is None:
        return "unknown"
    if isinstance(v, float):
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
            if abs(v) >= scale:
                return f"{v / scale:.3g}{prefix}"
        return f"{v:.3g}"
    return str(v)
