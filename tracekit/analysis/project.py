"""What a measured run would do on another GPU: every kernel re-priced on the target's roofline.

A kernel with a known cost took ``t`` on the source, where its roofline time was
``r_src = max(FLOPs / F_src, bytes / B_src)`` (F: the matrix or vector peak for its dtype;
B: bandwidth); it reached ``r_src / t`` of that roof. On the target it is assumed to reach
the same fraction of the target's roof, so it takes ``t * r_tgt / r_src``. Compute-limited work
thus moves with the target's peak for its dtype, memory-limited work with its bandwidth, and a
kernel whose side of the ridge differs on the target moves with the roof it meets there.

- Two bases give the range: the datasheet peaks of both GPUs, and their achievable ceilings
  (peak x the vendor-class factor, or what ``collect`` measured). The achievable basis is the
  central estimate: vendors reach different fractions of their datasheet.
- A dtype the target has no peak for (FP4 on a GPU without FP4 tensor cores) runs at the next
  wider one it has (FP4 -> FP8 -> BF16 -> FP16 -> FP32; ``GpuSpec.runs_as``, the rule the
  measured roofline uses too); its bytes stay.
- Latency-limited kernels (below ``LATENCY_ROOF`` of their roof) move with their roof too:
  too small to fill either GPU, their time is launch and memory latency, which tracks the
  memory system of a GPU generation more than it stays fixed. Each projection also says what
  its GPU busy time would be with them kept as measured.
- Collectives move with the interconnect bandwidth when both rows know it, else stay.
- Kernels with unknown cost stay as measured, and the share they hold is reported.

A step's GPU busy time scales with the sum of its kernels' projected time (so overlap between
streams stays as measured); its idle time stays as measured (host work, syncs, launches do not
change with the GPU); its duration is the measured one minus the busy time saved, but never
shorter than the host's own work in the step (its CPU time outside synchronising calls).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.analyze import Parts, assemble, measure
from tracekit.analysis.idle import CAUSES, HOST, _Coverage
from tracekit.analysis.model import Analysis, _clean
from tracekit.analysis.roofline import COMPUTE, INTERCONNECT, LATENCY, MEMORY, UNKNOWN, _bounds, limiter
from tracekit.analysis.truncation import gpu_events_lost
from tracekit.errors import TracekitError
from tracekit.specs import GpuSpec, SpecMatch, normalise_dtype
from tracekit.specs.lookup import spec_by_name
from tracekit.trace.model import Trace

SCHEMA_VERSION = 1
KIND = "tracekit.projection"
BASES = ("datasheet", "achievable")
_COPIES = ("memcpy", "memset")


# The method in plain sentences, for the report (the module docstring says the same).
METHOD = [
    "Each kernel with a known cost is assumed to reach the same fraction of the target's roof as it reached of "
    "the source's: it takes its measured time x (roofline time on the target / roofline time on the source), "
    "the roofline time being max(FLOPs / peak FLOP/s for its dtype, bytes / bandwidth). Compute-limited work moves "
    "with the peak FLOP/s, memory-limited work with bandwidth.",
    "Two bases give the range: both GPUs' datasheet peaks, and their achievable ceilings (the central estimate).",
    "A dtype the target has no peak for runs at the next wider one it has (FP4 -> FP8 -> BF16), bytes unchanged.",
    "Latency-limited kernels move with their roof too (their time is launch and memory latency, which tracks the "
    "GPU generation); the projection also says what it gives with them kept as measured.",
    "Collectives move with the interconnect bandwidth when both spec rows know it. Kernels of unknown cost, and all "
    "GPU idle time, stay as measured; a step never gets shorter than its host's own work.",
]


@dataclass
class Projection:
    source: Analysis  # the measured run
    target: GpuSpec
    projected: dict[str, Analysis]  # by basis
    phases: dict[str, dict[str, Any]]
    headline: list[dict[str, Any]]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        src = self.source.device
        return _clean({
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "source": {"trace": self.source.source.get("path"), "name": self.source.source.get("name"),
                       "device": src.get("name"), "spec": src.get("spec"), "spec_key": src.get("spec_key"),
                       "phase_source": self.source.phase_source, "model": (self.source.model or {}).get("name")},
            "target": {"spec": self.target.name, "spec_key": self.target.key, "peak_basis": self.target.peak_basis,
                       "peak_bandwidth": self.target.peak_bandwidth,
                       "achievable_bandwidth": self.target.achievable_bandwidth,
                       "interconnect_bandwidth": self.target.interconnect_bandwidth,
                       "peak_flops": {"matrix": dict(self.target.matrix_flops),
                                      "vector": dict(self.target.vector_flops)}},
            "method": METHOD,
            "phases": self.phases,
            "headline": self.headline,
            "notes": self.notes,
            "measured": self.source.to_dict(),
            "projected": self.projected["achievable"].to_dict(),
        })


def project(trace: Trace, to: str | GpuSpec, **options) -> Projection:
    """Project ``trace`` (analysed with ``analyze``'s ``options``) onto the GPU ``to``."""
    target = to if isinstance(to, GpuSpec) else spec_by_name(to)
    parts, match = measure(trace, **options)
    source = assemble(trace, parts, match)
    return project_parts(trace, parts, match, source, target)


def project_parts(trace: Trace, parts: Parts, match: SpecMatch, source: Analysis, target: GpuSpec) -> Projection:
    if parts.seg.device_type != "gpu" and gpu_events_lost(trace):
        raise TracekitError("cannot project this trace: it was cut before its GPU events, so no GPU work survives "
                            "to project")
    if match.spec is None:
        raise TracekitError("cannot project: the measured GPU has no spec row, so how close its kernels came to its "
                            f"roof is unknown ({match.reason or 'no peaks'}); pass --gpu NAME for it")
    if parts.seg.device_type != "gpu" and not is_cpu(target):
        # CPU ops re-price on another CPU's measured ceilings (the same roofline), not on a GPU's.
        raise TracekitError("cannot project a CPU-only trace onto a GPU: its work is CPU ops, not kernels "
                            "(it projects onto a CPU: --to a spec file with vendor CPU)")
    notes: list[str] = []
    projected, busy_kept = {}, {}
    for basis in BASES:
        dur, moved, kept_latency, dtype_notes = reprice(parts.work, match.spec, target, basis)
        if basis == "achievable":
            notes += dtype_notes
        new_parts = _projected_parts(trace, parts, dur, target)
        measured = source.device.get("name") or "an unknown GPU"  # a trace may not name its GPU
        how = f"projected from {measured} ({basis} basis): tracekit project --to {target.key}"
        projected[basis] = assemble(trace, new_parts, SpecMatch(target, how, None),
                                    device_name=f"{target.name} (projected from {measured})",
                                    with_timelines=False)
        # The same projection with latency-limited kernels kept as measured.
        alt = np.where(kept_latency, parts.work["dur_ns"].to_numpy(dtype=float), dur)
        busy_kept[basis] = _step_busy(parts, alt)
    phases = _phase_figures(source, projected, busy_kept, parts)
    notes += _notes(parts, source, phases)
    return Projection(source, target, projected, phases, _headline(source, projected), notes)


def is_cpu(spec: GpuSpec) -> bool:
    """Whether a spec row is a CPU's (measured by collect, or a spec file with vendor CPU)."""
    return (spec.vendor or "").strip().lower() == "cpu"


def reprice(work: pd.DataFrame, src: GpuSpec, tgt: GpuSpec, basis: str):
    """Per unit: projected duration (ns), whether it moved, whether it is latency-limited
    (moved, but shown kept as an alternative), and notes on dtypes the target lacks."""
    dur = work["dur_ns"].to_numpy(dtype=float)
    flops, nbytes = work["flops"].to_numpy(dtype=float), work["bytes"].to_numpy(dtype=float)
    dtype = work["dtype"].astype(object).to_numpy()
    unit = work["unit"].astype(object).to_numpy()
    bound = work["bound"].astype(object).to_numpy()
    lim = work["limiter"].astype(object).to_numpy()
    kind = work["kind"].astype(str).to_numpy()
    ach = basis == "achievable"
    ratio = np.full(len(work), np.nan)
    notes = []
    priced = ~np.isnan(flops) & ~np.isnan(nbytes) & (dur > 0) & (bound != INTERCONNECT)
    pairs = pd.DataFrame({"d": dtype[priced], "u": unit[priced]}).drop_duplicates()
    bw_s = src.achievable_bandwidth if ach else src.peak_bandwidth
    bw_t = tgt.achievable_bandwidth if ach else tgt.peak_bandwidth
    for d, u in pairs.itertuples(index=False):
        sel = priced & (dtype == d) & (unit == u)
        # Both sides price a dtype without a peak at the next wider one (GpuSpec.runs_as), as
        # the measured roofline did.
        d_s = src.runs_as(d, u)
        f_s = _flops(src, d_s, u, ach) if d_s else None
        d_t = tgt.runs_as(d, u)
        f_t = _flops(tgt, d_t, u, ach) if d_t else None
        if not (f_s and f_t and bw_s and bw_t):
            continue
        if d_t != normalise_dtype(d):
            ms = dur[sel].sum() / 1e6
            notes.append(f"{tgt.name} has no {d} {u} peak: {ms:.3g} ms of {d} kernels are projected at its {d_t} rate "
                         "(their bytes unchanged)")
        r_s = np.maximum(flops[sel] / f_s, nbytes[sel] / bw_s)
        r_t = np.maximum(flops[sel] / f_t, nbytes[sel] / bw_t)
        ratio[sel] = np.where(r_s > 0, r_t / np.where(r_s > 0, r_s, 1), np.nan)
    # Copies whose bytes are known move with bandwidth; collectives with the interconnect.
    copies = np.isin(kind, _COPIES) & np.isnan(ratio) & ~np.isnan(nbytes) & (nbytes > 0)
    if bw_s and bw_t:
        ratio[copies] = bw_s / bw_t
    link = (bound == INTERCONNECT) & ~np.isnan(nbytes)
    if link.any():
        if src.interconnect_bandwidth and tgt.interconnect_bandwidth:
            ratio[link] = src.interconnect_bandwidth / tgt.interconnect_bandwidth
        else:
            notes.append(f"collectives ({dur[link].sum() / 1e6:.3g} ms) stay as measured: "
                         f"{'the target' if not tgt.interconnect_bandwidth else 'the source'}'s spec row has no "
                         "interconnect bandwidth")
    moved = ~np.isnan(ratio)
    out = np.where(moved, dur * np.where(moved, ratio, 1.0), dur)
    return out, moved, moved & (lim == LATENCY), notes


def _flops(spec: GpuSpec, dtype: str, unit: str, achievable: bool) -> float | None:
    return spec.achievable_flops(dtype, unit) if achievable else spec.peak_flops(dtype, unit)


def _projected_parts(trace: Trace, parts: Parts, dur: np.ndarray, target: GpuSpec) -> Parts:
    """The parts with each unit's projected duration, re-bounded on the target, and each step's
    busy time and duration moved accordingly."""
    work = parts.work.copy()
    work["dur_ns"] = np.round(dur).astype(np.int64)
    work["end_ns"] = work["start_ns"].to_numpy() + work["dur_ns"].to_numpy()
    cols = ["category", "flops", "bytes", "dtype", "unit", "cost_reason", "cost_source", "model_check"]
    table = work[cols].copy()
    text = {c: table[c].to_numpy(dtype=object) for c in ("cost_reason", "dtype", "unit")}
    _bounds(table, target, None, categorical.strings(work["kind"]), work["category"].to_numpy(),
            work["dur_ns"].to_numpy() / 1e9, text["cost_reason"], text["dtype"], text["unit"])
    table["limiter"] = categorical.text(limiter(table["bound"].to_numpy(), table["roof_fraction"].to_numpy(),
                                                table["model_check"].to_numpy() == "capped"), index=table.index)
    for c in ("peak_flops", "peak_bw", "achievable_flops", "achievable_bw", "bound", "bound_reason", "peak_note",
              "ridge", "roof_fraction", "roof_fraction_achievable", "limiter"):
        work[c] = table[c]
    with np.errstate(divide="ignore", invalid="ignore"):
        secs = work["dur_ns"].to_numpy() / 1e9
        work["achieved_flops"] = np.where(secs > 0, work["flops"].to_numpy() / secs, np.nan)
        work["achieved_bw"] = np.where(secs > 0, work["bytes"].to_numpy() / secs, np.nan)
    steps = parts.seg.steps.copy()
    if len(steps):
        busy = _step_busy(parts, dur)
        saved = steps["gpu_busy_ns"].to_numpy() - busy
        floor = _host_floor(trace, steps)
        duration = np.maximum(steps["duration_ns"].to_numpy() - saved, floor)
        steps["gpu_busy_ns"] = np.round(busy).astype(np.int64)
        steps["gpu_end_ns"] = np.where(steps["kernels"] > 0, steps["gpu_end_ns"] - np.round(saved).astype(np.int64),
                                       steps["gpu_end_ns"])
        steps["duration_ns"] = np.round(duration).astype(np.int64)
        # The books still balance: idle is what the duration holds beyond the busy time.
        # Where the host's own time floors the step, the extra idle is the host's.
        idle_ns = (steps["duration_ns"] - steps["gpu_busy_ns"]).to_numpy()
        steps["gpu_idle_ns"] = idle_ns
        if parts.seg.device_type == "gpu" and len(parts.idle.by_step) == len(steps):
            by_step = _rebalanced(parts.idle.by_step, idle_ns)
            parts = dataclasses.replace(parts, idle=dataclasses.replace(parts.idle, by_step=by_step))
    seg = dataclasses.replace(parts.seg, work=parts.seg.work.assign(dur_ns=work["dur_ns"], end_ns=work["end_ns"]),
                              steps=steps)
    return dataclasses.replace(parts, seg=seg, work=work)


def _rebalanced(by_step: np.ndarray, idle_ns: np.ndarray) -> np.ndarray:
    """The measured idle causes per step, made to sum to the projected idle: time the step
    gained (the host's floor) is the host's; time it lost (rounding, a nanosecond or so) is
    taken from its largest causes, never below zero."""
    out = by_step.copy()
    host = CAUSES.index(HOST)
    diff = idle_ns - out.sum(axis=1)
    out[:, host] += np.maximum(diff, 0)
    for i in np.flatnonzero(diff < 0).tolist():
        over = int(-diff[i])
        for j in np.argsort(-out[i], kind="stable").tolist():
            take = min(over, int(out[i, j]))
            out[i, j] -= take
            over -= take
            if not over:
                break
    return out


def _step_busy(parts: Parts, dur: np.ndarray) -> np.ndarray:
    """Per step, measured busy time x projected kernel time / measured kernel time."""
    steps, work = parts.seg.steps, parts.work
    if not len(steps):
        return np.zeros(0)
    step = work["step"].to_numpy()
    inside = step >= 0
    n = len(steps)
    meas = np.bincount(step[inside], weights=work["dur_ns"].to_numpy(dtype=float)[inside], minlength=n)
    proj = np.bincount(step[inside], weights=dur[inside], minlength=n)
    busy = steps["gpu_busy_ns"].to_numpy(dtype=float)
    return np.where(meas > 0, busy * proj / np.where(meas > 0, meas, 1), busy)


def _host_floor(trace: Trace, steps: pd.DataFrame) -> np.ndarray:
    """Per step: the host thread's time in the step outside synchronising calls, the least a
    step can take whatever the GPU."""
    out = np.zeros(len(steps))
    for tid in pd.unique(steps["tid"]):
        rows = np.flatnonzero(steps["tid"].to_numpy() == tid)
        cov = _Coverage.of_thread(trace, int(tid))
        a = steps["cpu_start_ns"].to_numpy()[rows]
        b = steps["cpu_end_ns"].to_numpy()[rows]
        out[rows] = (b - a) - cov.sync(a, b)
    return out


# --- figures -------------------------------------------------------------------------


def _phase_figures(source: Analysis, projected: dict[str, Analysis], busy_kept: dict, parts: Parts) -> dict:
    out = {}
    lo_hi = lambda vals: [float(min(vals)), float(max(vals))] if all(v is not None for v in vals) else None  # noqa: E731
    weights = _phase_step_weights(parts)
    for phase, p in source.phases.items():
        pp = {b: a.phases.get(phase) or {} for b, a in projected.items()}
        w = parts.work[(parts.work["phase"] == phase)]
        lim = w.groupby("limiter")["dur_ns"].sum() / 1e6
        central = pp["achievable"]
        kept = {b: float((busy_kept[b] * weights[phase]).sum() / 1e6) for b in BASES}
        step_ms = lambda a: _mean_step(a, phase)  # noqa: E731
        out[phase] = {
            "measured_gpu_busy_ms": p.get("gpu_busy_ms"),
            "projected_gpu_busy_ms": central.get("gpu_busy_ms"),
            "measured_step_ms": step_ms(source),
            "projected_step_ms": step_ms(projected["achievable"]),
            "measured_time_ms": p.get("time_ms"),
            "projected_time_ms": central.get("time_ms"),
            "measured_tokens_per_s": _tokens_per_s(source, phase),
            "projected_tokens_per_s": _tokens_per_s(projected["achievable"], phase),
            "projected_range": {
                "gpu_busy_ms": lo_hi([pp[b].get("gpu_busy_ms") for b in BASES]),
                "step_ms": lo_hi([step_ms(projected[b]) for b in BASES]),
                "time_ms": lo_hi([pp[b].get("time_ms") for b in BASES]),
                "tokens_per_s": lo_hi([_tokens_per_s(projected[b], phase) for b in BASES]),
            },
            # Kernel time by limiter on the source: what moved with which roof, and what stayed.
            "measured_by_limiter_ms": {str(k): float(v) for k, v in lim.items()},
            "kept_ms": float(w.loc[w["limiter"] == UNKNOWN, "dur_ns"].sum() / 1e6),
            "latency_kept_gpu_busy_ms": kept["achievable"],
        }
    return out


def _phase_step_weights(parts: Parts) -> dict[str, np.ndarray]:
    from tracekit.analysis.latency import step_weights

    return step_weights(parts.seg.steps, parts.split.step_prefill_fraction)


def _mean_step(a: Analysis, phase: str) -> float | None:
    s = a.steps[a.steps["phase"] == phase] if len(a.steps) else a.steps
    return float(s["duration_ns"].mean() / 1e6) if len(s) else None


def _tokens_per_s(a: Analysis, phase: str) -> float | None:
    return a.metrics.get("prefill_tokens_per_s" if phase == "prefill" else "decode_tokens_per_s") \
        if phase in ("prefill", "decode") else None


# Headline figures, measured vs projected: the request-level ones or the engine-step ones.
_FIGURES = (("ttft_ms", "TTFT", lambda m: m.get("ttft_ms")),
            ("tpot_p50", "TPOT p50", lambda m: (m.get("tpot_ms") or {}).get("p50")),
            ("prefill_step_p50", "Prefill step p50", lambda m: (m.get("prefill_step_ms") or {}).get("p50")),
            ("decode_step_p50", "Decode step p50", lambda m: (m.get("decode_step_ms") or {}).get("p50")),
            ("prefill_tokens_per_s", "Prefill tokens/s", lambda m: m.get("prefill_tokens_per_s")),
            ("decode_tokens_per_s", "Decode tokens/s", lambda m: m.get("decode_tokens_per_s")),
            ("prefill_mfu", "Prefill MFU", lambda m: m.get("prefill_mfu")),
            ("decode_mbu", "Decode MBU", lambda m: m.get("decode_mbu")))


def _headline(source: Analysis, projected: dict[str, Analysis]) -> list[dict[str, Any]]:
    out = []
    for key, label, get in _FIGURES:
        measured = get(source.metrics)
        values = [get(projected[b].metrics) for b in BASES]
        if measured is None and all(v is None for v in values):
            continue
        out.append({"key": key, "label": label, "measured": measured, "projected": values[1],
                    "range": [min(values), max(values)] if all(v is not None for v in values) else None})
    return out


def _notes(parts: Parts, source: Analysis, phases: dict) -> list[str]:
    out = [] if phases else [f"the trace holds no inference step ({source.run_kind}): there is no phase to project"]
    for phase, f in phases.items():
        by = f["measured_by_limiter_ms"]
        total = sum(by.values())
        lat, unk = by.get(LATENCY, 0.0), by.get(UNKNOWN, 0.0)
        if total and lat / total >= 0.05:
            out.append(f"{phase}: {lat:.3g} ms ({lat / total:.0%} of kernel time) is latency-limited and moved with "
                       f"its roof; kept as measured, the projected GPU busy time would be "
                       f"{f['latency_kept_gpu_busy_ms']:.3g} ms instead of {f['projected_gpu_busy_ms']:.3g} ms")
        if total and unk / total >= 0.05:
            out.append(f"{phase}: {unk:.3g} ms ({unk / total:.0%} of kernel time) has unknown cost and stays as "
                       "measured" + ("" if source.model else "; --model NAME prices kernels without shapes"))
        moved = {k: v for k, v in by.items() if k in (COMPUTE, MEMORY) and v}
        if moved:
            out.append(f"{phase}: " + ", ".join(f"{v:.3g} ms {k}-limited" for k, v in moved.items())
                       + " moved with the target's " + " and ".join(
                           {"compute": "peak FLOP/s", "memory": "bandwidth"}[k] for k in moved))
    out.append("GPU idle time (host work, syncs, launches) stays as measured; a step never gets shorter than its "
               "host's own work")
    return out
