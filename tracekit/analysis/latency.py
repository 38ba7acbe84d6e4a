"""Latency figures from the steps table: TTFT, TPOT, throughput, busy/idle, launch overhead.

Step duration is from the CPU start of the step to whichever ends last, the CPU
range or the step's last GPU work: that is when the step's token exists. A figure
the trace cannot support is None, with the reason in ``reasons``; never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tracekit.analysis.segment import DECODE, MIXED, PREFILL, Segmentation

NS_PER_MS = 1e6


@dataclass
class Latency:
    ttft_ms: float | None = None
    tpot_ms: dict[str, float] | None = None  # mean, p50, p90, p99
    # Per decode step, in step order: the series the "decode over time" chart shows.
    tpot_series_ms: list[float] = field(default_factory=list)
    # Least-squares slope of decode step time against step index (ms per step):
    # the cost of the growing KV cache, plus noise.
    tpot_slope_ms_per_step: float | None = None
    tpot_growth: float | None = None  # last-quarter mean over first-quarter mean, minus 1
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float | None = None
    launch_overhead_ms_per_decode_step: float | None = None
    launch_overhead_share_of_decode: float | None = None
    # Per phase: {"steps", "time_ms", "gpu_busy_ms", "gpu_idle_ms", "busy_share", "idle_share"}.
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


def latency(seg: Segmentation) -> Latency:
    out = Latency()
    steps = seg.steps
    why = out.reasons
    if not len(steps):
        reason = "no inference steps were found" + (f" ({seg.notes[0]})" if seg.notes else "")
        for key in ("ttft_ms", "tpot_ms", "decode_tokens_per_s", "prefill_tokens_per_s", "launch_overhead_ms_per_decode_step"):
            why[key] = reason
        return out

    pre = steps[steps["phase"] == PREFILL]
    dec = steps[steps["phase"] == DECODE]
    dur_ms = steps["duration_ns"] / NS_PER_MS

    if len(pre):
        out.ttft_ms = float(dur_ms[pre.index[0]])
        toks = pre["tokens"]
        if toks.notna().all() and pre["duration_ns"].sum() > 0:
            out.prefill_tokens_per_s = float(toks.sum() / (pre["duration_ns"].sum() / 1e9))
        else:
            why["prefill_tokens_per_s"] = "the number of prompt tokens per prefill step is not in the trace"
    else:
        why["ttft_ms"] = why["prefill_tokens_per_s"] = "the trace holds no prefill step"

    if len(dec):
        d = dur_ms[dec.index].to_numpy()
        out.tpot_series_ms = [float(x) for x in d]
        out.tpot_ms = {
            "mean": float(d.mean()),
            "p50": float(np.percentile(d, 50)),
            "p90": float(np.percentile(d, 90)),
            "p99": float(np.percentile(d, 99)),
        }
        if len(d) >= 3:
            out.tpot_slope_ms_per_step = float(np.polyfit(np.arange(len(d)), d, 1)[0])
            q = max(1, len(d) // 4)
            out.tpot_growth = float(d[-q:].mean() / d[:q].mean() - 1) if d[:q].mean() > 0 else None
        else:
            why["tpot_slope_ms_per_step"] = "fewer than 3 decode steps: no trend"
        per_step = dec["batch"].where(dec["batch"].notna(), dec["tokens"])
        if per_step.notna().all() and dec["duration_ns"].sum() > 0:
            out.decode_tokens_per_s = float(per_step.sum() / (dec["duration_ns"].sum() / 1e9))
        else:
            why["decode_tokens_per_s"] = "the batch size of the decode steps is not in the trace"
        if seg.device_type == "gpu":
            gap_ms = dec["launch_gap_ns"].to_numpy() / NS_PER_MS
            out.launch_overhead_ms_per_decode_step = float(gap_ms.mean())
            out.launch_overhead_share_of_decode = float(gap_ms.sum() / d.sum()) if d.sum() > 0 else None
        else:
            why["launch_overhead_ms_per_decode_step"] = "a CPU-only trace has no device waiting on kernel launches"
    else:
        why["tpot_ms"] = why["decode_tokens_per_s"] = "the trace holds no decode step"
        why["launch_overhead_ms_per_decode_step"] = "the trace holds no decode step"

    for phase in (PREFILL, DECODE, MIXED, "unknown"):
        sel = steps[steps["phase"] == phase]
        if not len(sel):
            continue
        busy = float(sel["gpu_busy_ns"].sum())
        idle = float(sel["gpu_idle_ns"].sum())
        window = busy + idle
        out.phases[phase] = {
            "steps": int(len(sel)),
            "time_ms": float(sel["duration_ns"].sum() / NS_PER_MS),
            "gpu_busy_ms": busy / NS_PER_MS,
            "gpu_idle_ms": idle / NS_PER_MS,
            "busy_share": busy / window if window else None,
            "idle_share": idle / window if window else None,
        }
    return out
