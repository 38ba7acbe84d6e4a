"""A phase's figures: its time, kernel time by bound, limiter and category, MFU and MBU with their basis,
the run's headline metrics, and the provenance of all of them.

Takes a phase's (weighted) units of work (``tables.phase_work``), its latency aggregates and the
spec row, and gives ``figures_of`` (one phase), ``phase_figures`` (every phase, for
``analysis.merge``), ``withhold`` (no MFU/MBU on work the model was withheld from), ``metrics_of``,
``unprofiled``, ``phase_reasons`` and ``provenance_of``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.findings import rules as find
from tracekit.analysis.findings.advice import THRESHOLDS as advice_thresholds
from tracekit.analysis.pricing.above_roof import ABOVE_ROOF
from tracekit.analysis.pricing.roofline import (
    BOUNDS,
    CAPTURE,
    COST_SOURCES,
    KERNEL_LATENCY_NS,
    LATENCY_ROOF,
    LIMITERS,
    MODEL,
    SHAPES,
    above_roof,
    combined_estimate,
)
from tracekit.analysis.steps.held import HELD_MIN_NS
from tracekit.analysis.steps.mixed import PASSENGER_REASON, PASSENGER_SHARE
from tracekit.analysis.steps.segment import DECODE, MIXED, PREFILL, UNKNOWN
from tracekit.analysis.tables import phase_work
from tracekit.specs import SpecMatch
from tracekit.trace.model import Trace

PHASE_ORDER = (PREFILL, DECODE, MIXED, UNKNOWN)


def withhold(phases: dict, by_phase: dict, withheld: str | None) -> None:
    """A phase whose kernel time is mostly work the model was withheld from (``--model`` that
    the trace contradicts) gets no MFU or MBU: they would rest on a sliver of its work."""
    if not withheld:
        return
    for p, v in phases.items():
        w = by_phase[p]
        mine = float(w.loc[(w["cost_reason"] == withheld).to_numpy(), "dur_ns"].sum())
        if not v["kernel_ms"] or mine / 1e6 < 0.5 * v["kernel_ms"]:
            continue
        for k in ("mfu", "mbu"):
            v[k] = v[f"{k}_achievable"] = v[f"{k}_basis"] = None
            v[f"{k}_reason"] = withheld


# --- per phase -----------------------------------------------------------------------


def figures_of(phase: str, w: pd.DataFrame, lat: dict, spec, passengers: dict | None = None) -> dict[str, Any]:
    """Figures of one phase from its (weighted) units of work and its latency aggregates.
    ``passengers``: the decode phase's passenger parts of mixed steps (``mixed.passenger_view``):
    in its time and kernel time by bound (the books), not in its MFU and MBU."""
    ms = w["dur_ns"].to_numpy() / 1e6
    kernel_ms = float(ms.sum())
    bound = categorical.Values(w["bound"])
    by_bound = {b: float(ms[bound.eq(b)].sum()) for b in BOUNDS}
    by_bound["idle"] = float(lat.get("gpu_idle_ms", 0.0))
    lim = categorical.Values(w["limiter"])
    by_limiter = {m: float(ms[lim.eq(m)].sum()) for m in LIMITERS}
    by_limiter["idle"] = by_bound["idle"]
    by_category = w.groupby("category")["dur_ns"].sum().sort_values(ascending=False) / 1e6
    cat_bound = (w.groupby(["category", "bound"])["dur_ns"].sum() / 1e6).unstack(fill_value=0.0)
    unknown_cost = ms[np.isnan(w["flops"].to_numpy())].sum()
    flops = float(np.nansum(w["flops"].to_numpy()))
    nbytes = float(np.nansum(w["bytes"].to_numpy()))
    time_ms = float(lat.get("time_ms", 0.0))
    # MFU and MBU of the phase's own work: a passenger decode part rides on kernels whose
    # bound its prefill chunk sets (steps.mixed), so neither its work nor its time counts.
    riding = w["passenger"].to_numpy(dtype=bool) if passengers and "passenger" in w else np.zeros(len(w), dtype=bool)
    aboard = passengers or {}  # read only where something rides, so never the empty default
    own, own_ms = (w[~riding], time_ms - aboard["time_ms"]) if riding.any() else (w, time_ms)
    if riding.all():
        mfu, mfu_ach, mfu_basis, mfu_reason = None, None, None, PASSENGER_REASON
        mbu, mbu_ach, mbu_basis, mbu_reason = None, None, None, PASSENGER_REASON
    else:
        own_kernel = float(own["dur_ns"].sum()) / 1e6
        own_unknown = float(own["dur_ns"].to_numpy()[np.isnan(own["flops"].to_numpy())].sum()) / 1e6
        mfu, mfu_ach, mfu_basis, mfu_reason = _mfu(own, own_ms, spec)
        mbu, mbu_ach, mbu_basis, mbu_reason = _mbu(
            float(np.nansum(own["bytes"].to_numpy())), own_ms, spec, own_unknown, own_kernel
        )
    if mbu_basis:
        mbu_basis += "; " + _sources_text(own, "bytes")
    if riding.any() and not riding.all():
        n = aboard["mixed_steps"]
        left_out = (
            f"; without the decode part{'s' if n != 1 else ''} of {n} mixed step{'s' if n != 1 else ''}, "
            f"passenger{'s' if n != 1 else ''} of {'their prefill chunks' if n != 1 else 'its prefill chunk'}"
        )
        mfu_basis = mfu_basis and mfu_basis + left_out
        mbu_basis = mbu_basis and mbu_basis + left_out
    bytes_estimate, estimate_share, estimate_components = _bytes_estimates(w)
    # What the MBU's bytes are: the phase's own work's (its passengers aside).
    mbu_kind, mbu_share, mbu_components = (
        _bytes_estimates(own) if riding.any() else (bytes_estimate, estimate_share, estimate_components)
    )
    if mbu_basis and mbu_kind:
        mbu_basis += "; " + _estimates_text(mbu_share, mbu_components, mbu_kind)
    src = categorical.Values(w["cost_source"])
    sources = {s: float(ms[src.eq(s)].sum()) for s in COST_SOURCES}
    return {
        "steps": int(lat.get("steps", 0)),
        # Split mixed steps whose part in this phase the figures include.
        "mixed_steps": int(lat.get("mixed_steps", 0)),
        "time_ms": time_ms,
        "gpu_time_ms": float(lat.get("gpu_busy_ms", 0.0) + lat.get("gpu_idle_ms", 0.0)),
        "gpu_busy_ms": float(lat.get("gpu_busy_ms", 0.0)),
        "gpu_idle_ms": float(lat.get("gpu_idle_ms", 0.0)),
        "idle_share": lat.get("idle_share"),
        # Not in time_ms: the device on the previous step's work after a step's CPU start, on work
        # the trace did not record that a step's work waited on, and on the next step's work.
        "previous_ms": float(lat.get("previous_ms", 0.0)),
        "unrecorded_ms": float(lat.get("unrecorded_ms", 0.0)),
        "next_ms": float(lat.get("next_ms", 0.0)),
        "kernel_ms": kernel_ms,
        "kernels": int(len(w)),
        "by_bound": by_bound,
        # Shares for the phase-breakdown chart: of the phase's kernel time plus idle time
        # (by bound), and of its kernel time (by category).
        "by_bound_share": _shares(by_bound),
        # What limits the kernels (roofline.limiter): the bound's roof, or below LATENCY_ROOF
        # of it latency or below_roof; with idle, like by_bound.
        "by_limiter": by_limiter,
        "by_limiter_share": _shares(by_limiter),
        "by_category": {str(k): float(v) for k, v in by_category.items()},
        "by_category_share": {str(k): (float(v) / kernel_ms if kernel_ms else None) for k, v in by_category.items()},
        "by_category_bound": {
            str(c): {str(b): float(cat_bound.at[c, b]) for b in cat_bound.columns} for c in cat_bound.index
        },
        "flops": flops,
        "bytes": nbytes,
        "unknown_cost_share": float(unknown_cost / kernel_ms) if kernel_ms else None,
        # Kernel time priced by each source: recorded shapes, the capture trace, the model, none.
        "cost_source_ms": {s: float(sources.get(s, 0.0)) for s in COST_SOURCES},
        "mfu": mfu,
        "mfu_achievable": mfu_ach,
        "mfu_basis": mfu_basis,
        "mfu_reason": mfu_reason,
        "mbu": mbu,
        "mbu_achievable": mbu_ach,
        "mbu_basis": mbu_basis,
        "mbu_reason": mbu_reason,
        # What the phase's bytes (and the MBU built on them) are: "upper" or "lower" bound, the
        # model's "estimate", or None (the minimal traffic of stated work); and the share of
        # the bytes each kind of unit holds.
        "bytes_estimate": bytes_estimate,
        "bytes_estimate_share": estimate_share,
        # {estimate kind: why the bytes of that kind are, per component}: what a footnote on the
        # estimate is about (decode attention of unknown keys, routed experts), for every renderer.
        "bytes_estimate_reasons": {k: estimate_reasons(k, c) for k, c in estimate_components.items() if c},
        "mbu_estimate": mbu_kind if mbu is not None else None,
        # The decode parts of mixed steps bound by their prefill chunks: in the figures above
        # but MFU and MBU; their kernel time by the bound the chunk sets, and what their decode
        # tokens added (steps.mixed.passenger_view). None without such parts.
        "passenger": None
        if not riding.any()
        else {
            **aboard,
            "kernel_ms": float(ms[riding].sum()),
            "whole_phase": bool(riding.all()),
            "by_bound": {b: float(ms[riding & bound.eq(b)].sum()) for b in BOUNDS},
        },
    }


_ESTIMATE_WORDS = {"upper": "upper bounds", "lower": "lower bounds", "model": "the model's estimates"}
# Why a component's bytes are of an estimate kind (model_costs._bytes_estimate, pricing.above_roof).
ESTIMATE_REASONS = {
    ("upper", "experts"): "routed experts' bytes capped at the bandwidth roof: uniform routing's expected experts "
    "would need more",
    ("upper", "attention"): "decode attention's bytes capped at the bandwidth roof: the keys it reads are not in "
    "the trace",
    ("lower", "attention"): "a prefill's KV read without a stated cached prefix",
    ("model", "experts"): "distinct experts expected under uniform routing, E*(1-(1-k/E)^B)",
}


def estimate_reasons(kind: str, components) -> str:
    """Why the bytes of ``components`` are of estimate ``kind``, one clause per component."""
    return "; ".join(ESTIMATE_REASONS.get((kind, c), f"{str(c).replace('_', ' ')}'s bytes") for c in components)


def _bytes_estimates(w: pd.DataFrame) -> tuple[str | None, dict[str, float], dict[str, list[str]]]:
    """(what the phase's bytes are, {estimate kind: share of the bytes}, {estimate kind: the
    components whose bytes are of it}) (``combined_estimate``)."""
    if "estimate" not in w or not len(w):
        return None, {}, {}
    est = w["estimate"].to_numpy(dtype=object)
    b = np.nan_to_num(w["bytes"].to_numpy(dtype=float))
    total = float(b.sum())
    vals = categorical.Values(est)
    share = {k: float(b[vals.eq(k)].sum()) / total for k in _ESTIMATE_WORDS if total > 0 and vals.eq(k).any()}
    comp = w["component"].to_numpy(dtype=object) if "component" in w else np.full(len(w), None, dtype=object)
    components = {k: sorted({str(c) for c in comp[vals.eq(k) & (b > 0)] if isinstance(c, str)}) for k in share}
    return combined_estimate(est, b), share, components


def _estimates_text(share: dict[str, float], components: dict[str, list[str]], kind: str) -> str:
    parts = [
        f"{v:.0%} of the bytes are {_ESTIMATE_WORDS[k]}"
        + (f" ({estimate_reasons(k, components[k])})" if components.get(k) else "")
        for k, v in share.items()
        if v > 0
    ]
    whole = {
        "upper": "the MBU is an upper bound",
        "lower": "the MBU is a lower bound",
        "model": "the MBU is an estimate",
    }[kind]
    return ", ".join(parts) + f": {whole}"


def _mfu(w: pd.DataFrame, time_ms: float, spec) -> tuple:
    """Matrix FLOPs of the phase over its time, each dtype's FLOPs against its own matrix peak.

    With one dtype this is FLOPs / time / peak. With several (FP8 experts beside BF16
    projections), it is the time the FLOPs need at their peaks over the phase's time:
    sum over dtypes of FLOPs / peak, over the time."""
    matrix = w[(w["unit"] == "matrix") & w["flops"].notna()]
    if spec is None:
        return None, None, None, "device peaks unknown"
    if not len(matrix):
        return None, None, None, "no GEMM or attention work with a known cost in this phase"
    if time_ms <= 0:
        return None, None, None, "phase time is zero"
    by_dtype = matrix.groupby("dtype")["flops"].sum().sort_values(ascending=False)
    total = float(by_dtype.sum())
    need = need_ach = 0.0
    parts = []
    for dtype, flops in by_dtype.items():
        used = spec.runs_as(str(dtype), "matrix")  # a dtype without a peak runs at the next wider one
        peak = spec.peak_flops(used, "matrix") if used else None
        if not peak:
            return None, None, None, spec.no_peak_reason(str(dtype), "matrix") or f"no matrix peak for {dtype}"
        ach = spec.achievable_flops(used, "matrix") or peak
        need += flops / peak
        need_ach += flops / ach
        share = f" for {flops / total:.0%} of the matrix FLOPs" if len(by_dtype) > 1 else ""
        text = f"{used} matrix peak of {spec.name}: {_tflops(peak)} ({spec.peak_basis}){share}"
        if spec.runs_as_note(str(dtype), "matrix"):
            text += f" ({dtype} work {spec.runs_as_note(str(dtype), 'matrix')})"
        if ach != peak:
            text += f"; achievable {_tflops(ach)} ({spec.achievable_flops_basis(used, 'matrix')})"
        parts.append(text)
    secs = time_ms / 1e3
    basis = "; ".join(parts) + "; " + _sources_text(matrix, "flops")
    if above_roof(need / secs):
        return (
            None,
            None,
            None,
            (
                f"the matrix FLOPs counted would be {need / secs:.0%} of the peak: above 100% is "
                "not a fact, so the FLOPs or the peak are wrong"
            ),
        )
    return need / secs, need_ach / secs, basis, None


def _tflops(flops: float) -> str:
    """A peak in TFLOP/s: one decimal for a GPU's, three significant digits for a CPU's below
    1 TFLOP/s (0.0398, never a rounded-away 0.0)."""
    t = flops / 1e12
    if t >= 1 or t <= 0:
        return f"{t:,.1f} TFLOP/s"
    return f"{t:.{max(1, 2 - math.floor(math.log10(t)))}f} TFLOP/s"


def _sources_text(w: pd.DataFrame, what: str) -> str:
    """Where a figure's FLOPs or bytes came from: "FLOPs from the model 96%, recorded shapes 4%"."""
    values = np.nan_to_num(w[what].to_numpy(dtype=float))
    source = w["cost_source"].to_numpy()
    by = {s: float(values[source == s].sum()) for s in (SHAPES, CAPTURE, MODEL)}
    total = sum(by.values())
    if total <= 0:
        return f"{'FLOPs' if what == 'flops' else 'bytes'}: none known"
    label = {SHAPES: "recorded shapes", CAPTURE: "the graph-capture trace's shapes", MODEL: "the model"}
    parts = [f"{label[s]} {v / total:.0%}" for s, v in sorted(by.items(), key=lambda kv: -kv[1]) if v > 0]
    return f"{'FLOPs' if what == 'flops' else 'bytes'} from " + ", ".join(parts)


def _mbu(nbytes: float, time_ms: float, spec, unknown_ms: float, kernel_ms: float) -> tuple:
    """Bytes the phase's kernels must move (weights, KV cache, activations) over its time."""
    if spec is None or not spec.peak_bandwidth:
        return None, None, None, "device bandwidth unknown"
    if nbytes <= 0 or (kernel_ms and unknown_ms / kernel_ms > 0.5):
        return None, None, None, "the bytes moved are unknown for most of this phase's kernel time"
    if time_ms <= 0:
        return None, None, None, "phase time is zero"
    rate = nbytes / (time_ms / 1e3)
    peak = spec.peak_bandwidth
    ach = spec.achievable_bandwidth
    if above_roof(rate / peak):
        return (
            None,
            None,
            None,
            (
                f"the bytes counted would move at {rate / peak:.0%} of the peak bandwidth: above "
                "100% is not a fact (data served from caches, or bytes counted twice)"
            ),
        )
    basis = f"peak bandwidth of {spec.name}: {peak / 1e9:,.0f} GB/s ({spec.peak_basis})"
    if ach:
        basis += f"; achievable {ach / 1e9:,.0f} GB/s ({spec.achievable_bandwidth_basis})"
    return rate / peak, (rate / ach if ach else None), basis, None


def _metrics(lat, phases) -> dict[str, Any]:
    pre = phases.get(PREFILL, {})
    dec = phases.get(DECODE, {})
    return {
        "latency_semantics": lat.semantics,
        "prefill_step_ms": lat.prefill_step_ms,
        "decode_step_ms": lat.decode_step_ms,
        "decode_step_series_ms": lat.decode_step_series_ms,
        "ttft_ms": lat.ttft_ms,
        "tpot_ms": lat.tpot_ms,
        "tpot_series_ms": lat.tpot_series_ms,
        "tpot_slope_ms_per_step": lat.tpot_slope_ms_per_step,
        "tpot_growth": lat.tpot_growth,
        "decode_tokens_per_s": lat.decode_tokens_per_s,
        "prefill_tokens_per_s": lat.prefill_tokens_per_s,
        "launch_overhead_ms_per_decode_step": lat.launch_overhead_ms_per_decode_step,
        "launch_overhead_share_of_decode": lat.launch_overhead_share_of_decode,
        "prefill_mfu": pre.get("mfu"),
        "decode_mbu": dec.get("mbu"),
        "idle_share": {p: v.get("idle_share") for p, v in phases.items()},
    }


def _shares(parts: dict[str, float]) -> dict[str, float | None]:
    total = sum(parts.values())
    return {k: (v / total if total else None) for k, v in parts.items()}


def unprofiled(trace: Trace, metrics: dict[str, Any]) -> dict[str, Any] | None:
    """Wall-clock TTFT/TPOT that ``tracekit collect`` measured without the profiler, if any, with
    each figure's profiled / unprofiled ratio against the trace's own figure (``metrics``): the
    whole recorded run's ratio says little of one figure (a few slow decode steps move it while
    TTFT did not change), so each figure shown beside its unprofiled twin has its own."""
    return profiler_ratios(unprofiled_timing((trace.sidecar or {}).get("timing") or {}), metrics)


def profiler_ratios(unprof: dict[str, Any] | None, metrics: dict[str, Any]) -> dict[str, Any] | None:
    """``unprof`` with TTFT's and TPOT p50's profiled (``metrics``) / unprofiled ratios."""
    if unprof is None:
        return None
    ttft, p50 = metrics.get("ttft_ms"), (metrics.get("tpot_ms") or {}).get("p50")
    return {
        **unprof,
        "ttft_profiler_ratio": ttft / unprof["ttft_ms"] if ttft and unprof.get("ttft_ms") else None,
        "tpot_p50_profiler_ratio": p50 / unprof["tpot_p50_ms"] if p50 and unprof.get("tpot_p50_ms") else None,
    }


def unprofiled_timing(timing: dict[str, Any]) -> dict[str, Any] | None:
    """The sidecar ``timing`` block's figures, computed once for every command that shows them
    (``collect``'s summary, ``summary``, ``report``, ``compare``): TTFT and the decode steps' p50
    and p90 without the profiler, and the whole recorded run's profiler overhead."""
    tpot = [float(x) for x in timing.get("tpot_ms") or [] if x is not None]
    if timing.get("ttft_ms") is None and not tpot:
        return None
    return {
        "ttft_ms": timing.get("ttft_ms"),
        "tpot_p50_ms": float(np.percentile(tpot, 50)) if tpot else None,
        "tpot_p90_ms": float(np.percentile(tpot, 90)) if tpot else None,
        "profiler_overhead_ratio": timing.get("profiler_overhead_ratio"),
        "method": timing.get("method"),
    }


# --- provenance ----------------------------------------------------------------------

FORMULAS = {
    "step_duration": f"from the step's CPU start (or the end of the previous step's work, when the GPU runs behind: previous_ms) to the later of its CPU end and its last GPU work's end, less the time the GPU spent meanwhile on work the trace did not record that the step's work waited on (unrecorded_ms: a kernel started over "
    f"{HELD_MIN_NS / 1e6:g} ms after its launch while no recorded work ran) and on the next step's work alone (next_ms), so the step is measured from the point its own work could start",
    "ttft": "duration of the first prefill step: its CPU start to the end of the GPU work that produced the first token (request-level runs only)",
    "tpot": "durations of the decode steps (mean and percentiles over steps; request-level runs only)",
    "prefill_step_time": "durations of the steps holding prefill work, mixed steps included whole",
    "decode_step_time": "durations of the steps holding decode work, mixed steps included whole: the inter-token latency a decoding request sees",
    "mixed_split": "a mixed step's kernel time: attention by each side's query-key pairs, other work by each side's tokens; its busy, idle and duration shared in that proportion",
    "mixed_marginal": "what a split mixed step's decode tokens add (decode_marginal): each kernel's work is priced again with the prefill side alone (a GEMM of recorded shapes whose rows are the step's tokens by its own cost model at the chunk's rows; else the model: its GEMMs at the chunk's tokens, the chunk's attention and KV writes, the experts its tokens touch, a shape-priced op of a pooled component by the side's share of the component); the decode tokens add the rest: FLOPs dF = F - F_alone (a GEMM's decode rows: 2*n_decode*K*N), bytes dB = B - B_alone (their activation rows, KV reads and writes; the weights are read anyway), and time dur x (1 - max(F_alone/peak FLOP/s, B_alone/peak bandwidth) / max(F/peak FLOP/s, B/peak bandwidth)): at the kernel's own achieved fraction of its roof. shared_bytes: bytes either side alone would move (B_alone(prefill) + B_alone(decode) - B: the weight reads the prefill chunk pays anyway); prefill_own_ms likewise for the prefill tokens",
    "passenger": f"a split mixed step is bound by its prefill chunk when the time the chunk's tokens add (prefill_own_ms) is >= {PASSENGER_SHARE:.0%} of the step's kernel time; its decode side is then a passenger: no bound, MFU or MBU of its own, and the decode phase's MFU and MBU leave its work and time out (its time and kernel time by bound stay in the phase's books, listed under passenger)",
    "gpu_busy": "union of the step's kernel, memcpy and memset intervals, all streams merged",
    "gpu_idle": "the step's duration minus its busy time: the lead-in before its first GPU work, the gaps between its kernels and the tail after its last (duration = busy + idle)",
    "launch_overhead": "GPU idle inside the decode steps caused by kernel launches (idle cause launch)",
    "idle_by_cause": "each GPU-idle gap of a step (lead-in and tail included; the causes sum to its idle time) split by what the thread launching the next kernel did meanwhile: sync (blocked in a synchronising call), launch (issuing launches: launch calls, the launching op, pauses between launches under 50 us, the first 10 us after the issue), host (other recorded host work for longer), wait (kernel issued, GPU waited on another stream, an event or the device), unattributed",
    "bound": "compute-bound when FLOPs / peak FLOP/s >= bytes / peak bandwidth for the op's dtype and unit (matrix or vector), else memory-bound",
    "roof_fraction": "max(FLOPs / peak FLOP/s, bytes / peak bandwidth) / kernel duration",
    "limiter": f"the bound (compute, memory, interconnect) when the kernel reaches >= {LATENCY_ROOF:.0%} of that roof; below it, latency where latency can explain the shortfall (a grid of fewer blocks than the GPU has SMs, or time beyond the roof's of at most {KERNEL_LATENCY_NS / 1e3:g} µs, a kernel's fixed latency), else below roof (a grid that fills the GPU, running far longer than any latency: the kernel reaches that fraction of its roof); unknown without a roof fraction",
    "mfu": "matrix FLOPs of the phase's kernels with known shapes / phase time / matrix peak of the phase's main dtype",
    "mbu": "bytes the phase's kernels must move (weights, KV cache, activations; each tensor read or written once) / phase time / peak bandwidth",
    "cost": "FLOPs and bytes of the outermost op with a cost model, shared among the kernels it launched by duration",
    "idle_share": "GPU idle time / the phase's time (= GPU busy + idle time) over the phase's steps",
    "decode_tokens_per_s": "tokens generated by the decode steps (batch size per step; the decode side of split mixed steps) / the durations of those steps (a mixed step's whole duration)",
    "prefill_tokens_per_s": "prompt tokens of the prefill steps (the prefill side of split mixed steps) / the durations of those steps (a mixed step's whole duration)",
}


def _names_where(names: pd.Series, rows: np.ndarray) -> list[str]:
    """The distinct names of the selected rows, sorted (once per distinct name, not per row)."""
    used = np.unique(categorical.codes(names)[rows])
    found = set(categorical.category_strings(names)[used[used >= 0]])
    return sorted(found | {np.nan} if (used < 0).any() else found)


def phase_reasons(phases: dict[str, dict]) -> dict[str, str]:
    """Why each missing MFU/MBU is missing: a phase's own reason, or that the phase is absent."""
    reasons = {}
    for p, v in phases.items():
        if v.get("mfu") is None and v.get("mfu_reason"):
            reasons[f"{p}_mfu"] = v["mfu_reason"]
        if v.get("mbu") is None and v.get("mbu_reason"):
            reasons[f"{p}_mbu"] = v["mbu_reason"]
    if PREFILL not in phases:
        reasons["prefill_mfu"] = "the trace holds no prefill step"
    if DECODE not in phases:
        reasons["decode_mbu"] = "the trace holds no decode step"
    return reasons


def provenance_of(trace: Trace, seg, lat, match: SpecMatch, phases, work) -> dict[str, Any]:
    """How the figures were made (``Analysis.provenance``): notes, reasons, formulas and thresholds."""
    outside = work["step"].to_numpy() < 0
    reasons = dict(lat.reasons)
    reasons.update(phase_reasons(phases))
    unknown = categorical.Values(work["bound"]).eq("unknown")
    why = work["bound_reason"].to_numpy(dtype=object)[unknown]
    why[pd.isna(why)] = "unknown"
    # Kernel time by reason, as a groupby on the reasons gives it (keys sorted, int64 sums),
    # summed on the reasons' codes.
    why_code, why_text = pd.factorize(why, sort=True)
    totals = np.zeros(len(why_text), dtype=np.int64)
    np.add.at(totals, why_code, work["dur_ns"].to_numpy()[unknown].astype(np.int64))
    why_unknown = pd.Series(totals, index=pd.Index(why_text, dtype=object)).sort_values(ascending=False).head(8) / 1e6
    return {
        "run_kind": seg.run_kind,
        "device_type": seg.device_type,
        "notes": list(seg.notes),
        "lacks": dict(trace.lacks),
        # The engine option that would state what the model now estimates, where the steps lack it.
        "richer_trace": richer_trace(seg.source, seg.steps),
        # A salvaged file's facts (events_recovered, bytes_read, how); None for a whole one.
        "truncated": trace.metadata.get("truncated"),
        "reasons": reasons,
        "device_match": {"how": match.how, "reason": match.reason},
        "outside_steps": {"units": int(outside.sum()), "ms": float(work["dur_ns"][outside].sum() / 1e6)},
        "unknown_bound_ms_by_reason": {str(k): float(v) for k, v in why_unknown.items()},
        # A kernel below this fraction of its roof is latency-limited (roofline.limiter).
        "latency_roof": LATENCY_ROOF,
        "unmatched_kernels": _names_where(work["name"], work["category"].to_numpy() == "other")[:50],
        "formulas": FORMULAS,
        "finding_thresholds": {
            **advice_thresholds,
            "decode-attention-share": f"attention >= {find.ATTENTION_SHARE:.0%} of decode kernel time",
            "unknown-cost": f">= {find.UNKNOWN_COST_SHARE:.0%} of a phase's kernel time has unknown cost",
            "tpot-growth": f"the last quarter of decode steps is >= {find.TPOT_GROWTH:.0%} slower than the first",
            "outside-steps": f">= {find.OUTSIDE_SHARE:.0%} of the trace's kernel time ran outside any step",
            "cost-sources": f"the model priced >= {find.COST_SOURCES_SHARE:.0%} of the trace's kernel time",
            "experts-concentrated": "routed experts' bytes under uniform routing exceed peak bandwidth x their time",
            "attention-keys-unknown": "decode attention whose keys the trace does not state: bytes capped at peak "
            "bandwidth x its time",
            "attention-bound-unknown": "decode attention whose keys the trace does not state, its intensity not "
            "below the ridge at any key count",
            "cache-resident": f"a kernel of just-written activations whose bytes fit in the L2 cache needs > "
            f"{ABOVE_ROOF:.0%} of its time at the DRAM roof",
            "model-undescribed": f"a model component needs > {ABOVE_ROOF:.0%} of its kernels' time at the roofline",
        },
    }


def richer_trace(source: str, steps: pd.DataFrame) -> str | None:
    """``frameworks.richer_trace_hint`` for the run's step labels, unless every step's sides
    already state their keys and sums (a second annotation of each step did: SGLang's first
    roofline version wrote a vLLM-style ``execute_...`` range beside ``step[...]``)."""
    if not len(steps) or "label" not in steps:
        return None
    hint = frameworks.richer_trace_hint(source, steps["label"].dropna())
    if hint is None:
        return None

    def stated(side) -> bool:
        return side is None or not side.requests or None not in (side.kv_tokens, side.sum_q2, side.sum_qk)

    if all(stated(p) and stated(d) for p, d in zip(steps["prefill_side"], steps["decode_side"])):
        return None
    return hint


# --- for merging windows (analysis.merge) ----------------------------------------------


def phase_figures(
    work: pd.DataFrame, lat, spec, withheld: str | None = None, passengers: dict | None = None
) -> dict[str, dict[str, Any]]:
    """Per phase, its figures from (weighted) units of work and the latency aggregates, as
    ``assemble`` computes them (idle causes aside): ``analysis.merge`` gives it the windows'
    units summed by kind, whose sums are the whole run's. ``passengers``: the decode phase's
    (``figures_of``)."""
    by_phase = {p: phase_work(work, p) for p in PHASE_ORDER if p in lat.phases}
    phases = {
        p: figures_of(p, w, lat.phases[p], spec, passengers if p == DECODE else None) for p, w in by_phase.items()
    }
    withhold(phases, by_phase, withheld)
    return phases


def metrics_of(lat, phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's headline metrics from its latency figures and phases (``assemble``'s)."""
    return _metrics(lat, phases)
