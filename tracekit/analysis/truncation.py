"""What a trace cut off mid-write does to the analysis: the headline fact, and figures marked partial.

The reader salvages a cut file up to its last complete event and records the facts
(``Trace.metadata["truncated"]``). Here they become the report's ``truncated`` block
(one sentence for the headline, the share recovered and its basis) and the marks on
the figures the cut makes partial: every step figure of a cut trace may lack the end
of the run, and a GPU trace cut before its kernels (Kineto writes GPU activity last)
has CPU-side step times only, so the figures that need its GPU work are withheld.
"""

from __future__ import annotations

from typing import Any

from tracekit.trace.model import Trace
from tracekit.trace.reader import cut_device_text

# The figures a step's time feeds: marked partial on a cut trace.
LATENCY_FIGURES = ("prefill_step_ms", "decode_step_ms", "ttft_ms", "tpot_ms")
# The figures that need the GPU's work: withheld when the cut took every kernel.
GPU_FIGURES = (
    "decode_tokens_per_s",
    "prefill_tokens_per_s",
    "launch_overhead_ms_per_decode_step",
    "launch_overhead_share_of_decode",
)


def gpu_events_lost(trace: Trace) -> bool:
    """A GPU trace whose kernels were all after the cut (the reader found GPU evidence, no kernel)."""
    return bool((trace.metadata.get("truncated") or {}).get("gpu_events_lost"))


def device_unknown_reason(trace: Trace) -> str:
    """Why the device of a GPU trace cut before its kernels is unknown, for the device's reason."""
    return (
        cut_device_text((trace.metadata.get("truncated") or {}).get("gpu_evidence") or [])
        + ": there is no GPU work to price"
    )


def partial_reason(trace: Trace) -> str | None:
    """Why the step figures are partial, or None for a whole trace (or one whose JSON is complete)."""
    cut = trace.metadata.get("truncated") or {}
    if not cut or cut.get("bytes_parsed") == cut.get("bytes_read") and not cut.get("gpu_events_lost"):
        return None  # only a compressed stream's trailer was cut: every event is there
    if cut.get("gpu_events_lost"):
        return (
            "partial: the trace was cut before its GPU events, so the step times are CPU-side only and lack "
            "the GPU work the cut removed"
        )
    return "partial: the trace was cut mid-write, so the steps cover only the part of the run written before the cut"


def view(trace: Trace) -> dict[str, Any] | None:
    """The report's top-level ``truncated`` block, or None for a whole file."""
    cut = trace.metadata.get("truncated")
    if not cut:
        return None
    share = cut.get("recovered_share")
    events = f"{cut.get('events_recovered', 0):,} complete events"
    if cut.get("bytes_parsed") == cut.get("bytes_read") and not cut.get("gpu_events_lost"):
        text = (
            f"Truncated trace: the {str(cut.get('how', '')).split()[0]} stream ends before its end marker; the "
            f"JSON inside is complete ({events}), but its checksum could not be verified."
        )
    else:
        share_text = "an unknown share" if share is None else _pct(share)
        text = (
            f"Truncated trace: the file was cut mid-write ({cut.get('how')}); {events} recovered, {share_text} of "
            "the decompressed text it holds (its original length is unknown)."
        )
        if cut.get("gpu_events_lost"):
            text += " The cut came before its GPU events: the device is unknown and the step times lack the GPU work."
        else:
            text += " Every figure covers only the part of the run written before the cut."
    return {**cut, "partial": partial_reason(trace), "text": text}


def mark_partial(
    trace: Trace, metrics: dict[str, Any], phases: dict[str, dict[str, Any]], reasons: dict[str, str]
) -> None:
    """Mark the step figures of a cut trace partial; withhold those that need the GPU work the cut took."""
    why = partial_reason(trace)
    if why is None:
        return
    figures = [k for k in LATENCY_FIGURES if metrics.get(k) is not None]
    if gpu_events_lost(trace):
        for key in GPU_FIGURES:
            if metrics.get(key) is not None:
                metrics[key] = None
                reasons[key] = why.removeprefix("partial: ")
        # The "idle" of leaf CPU ops standing in for kernels is not the GPU's idle.
        for p, v in phases.items():
            if v.get("idle_share") is not None:
                v["idle_share"] = None
                reasons[f"idle_share.{p}"] = why.removeprefix("partial: ")
        metrics["idle_share"] = {p: None for p in metrics.get("idle_share") or {}}
    for v in phases.values():
        v["partial"] = why
    metrics["partial"] = {"reason": why, "figures": figures}


def _pct(share: float) -> str:
    pct = share * 100
    return ">99.9%" if 99.95 <= pct < 100 else f"{pct:.1f}%"
