"""What a measured run would do on another GPU: every kernel re-priced on the target's roofline.

A kernel with a known cost took ``t`` on the source. Its kind of kernel (its category: GEMM,
attention, normalization, elementwise, MoE, collectives, other) reaches a fraction ``f`` of each
datasheet roof on each vendor class (``tracekit.specs.factors``, data with sources). With
``R = max(FLOPs / (F x f_compute), bytes / (B x f_memory))`` (F: the matrix or vector peak for its
dtype; B: bandwidth), it is assumed to reach the same fraction of ``R`` on the target as on the
source, so it takes ``t * R_tgt / R_src``: on one side of the ridge on both GPUs that is
``t * (r_tgt / f_tgt) / (r_src / f_src)``. A kernel whose side of the ridge differs on the target
moves with the roof it meets there.

- The range is an interval: its ends take the factors' low and high figures (the two GPUs'
  errors combined as independent, root sum of squares of the log-widths), and kernels of unknown
  cost, kept as measured in the central, take the fastest and slowest plausible ratio
  (``unknown_band``), so their share widens it. On the same device it is a point.
- A dtype the target has no peak for (FP4 on a GPU without FP4 tensor cores) runs at the next
  wider one it has (FP4 -> FP8 -> BF16 -> FP16 -> FP32; ``GpuSpec.runs_as``, the rule the
  measured roofline uses too); its bytes stay.
- Latency-limited kernels (below ``LATENCY_ROOF`` of their roof where ``latency_fits``) move with their roof too:
  too small to fill either GPU, their time is launch and memory latency, which tracks the
  memory system of a GPU generation more than it stays fixed. Each projection also says what
  its GPU busy time would be with them kept as measured.
- Collectives are priced on the links a tensor-parallel group of N GPUs has
  (``tracekit.whatif.collectives``, ``tracekit.specs.links``): their latency-bandwidth bound on
  the source over their measured time is their efficiency, which transfers; the time does not.
  Without a link topology for either row they stay (and widen the range as unknown cost).
- Kernels with unknown cost stay as measured in the central projection, and the share they
  hold is reported.

A step's GPU busy time scales with the sum of its kernels' projected time (so overlap between
streams stays as measured). Its duration is the step replayed on its own dependencies
(``analysis.replay``) with every kernel at its projected time: host work, launch calls and their
latencies stay as measured, a synchronising call waits for the re-priced work it waited for, and
kernels queue behind their stream and the host as they did; so a step the host sets gains nothing
from a faster GPU, and a host blocked waiting on the GPU is freed by it. Where no replay was
possible (no steps), the duration is the measured one minus the busy time saved, but never shorter
than the host's own work in the step (its CPU time outside synchronising calls).

The re-pricing of each kernel (all of the above but the last paragraph) is in ``tracekit.whatif.reprice``;
this module builds the projected run from it (the last paragraph) and the figures a report shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.analyze import Parts, assemble, measure
from tracekit.analysis.model import Analysis, json_safe
from tracekit.analysis.pricing.above_roof import AT_ROOF_CHECKS
from tracekit.analysis.pricing.roofline import COMPUTE, LATENCY, MEMORY, latency_fits, limiter, roofline_columns
from tracekit.analysis.replay import changes as ch
from tracekit.analysis.steps.mixed import retimed
from tracekit.analysis.truncation import gpu_events_lost
from tracekit.analysis.waiting.host import Coverage
from tracekit.analysis.waiting.idle import CAUSES, HOST
from tracekit.analysis.workload import choose_tp
from tracekit.errors import TracekitError
from tracekit.specs import GpuSpec, SpecMatch, factors
from tracekit.specs.lookup import spec_by_name
from tracekit.trace.model import Trace
from tracekit.whatif.collectives import summary as comm_summary
from tracekit.whatif.reprice import Repriced, reprice, unknown_band

SCHEMA_VERSION = 1
KIND = "tracekit.projection"
# The central projection and the ends of its range (low: the fastest, high: the slowest).
ESTIMATES = ("central", "low", "high")


# The method in plain sentences, for the report (the module docstring says the same).
METHOD = [
    "Each kernel with a known cost keeps the fraction of its category's roof that it reached on the source: with "
    "R = max(FLOPs / (peak FLOP/s for its dtype x f_compute), bytes / (bandwidth x f_memory)), it takes its measured "
    "time x R on the target / R on the source. f is the fraction of the datasheet roof that its kind of kernel "
    "(GEMM, attention, normalization, elementwise, MoE, collectives, other) reaches on each GPU's vendor class: "
    "tracekit's category factors, each with its source (published measurements; estimates say so).",
    "The central projection uses the central factors. The range is an interval, not two bases: its low and high ends "
    "take each side's low and high factors (combined as independent errors), and kernels of unknown cost, kept as "
    "measured in the central, take the fastest and slowest plausible ratio between the GPUs at its ends.",
    "A dtype the target has no peak for runs at the next wider one it has (FP4 -> FP8 -> BF16), bytes unchanged.",
    "Latency-limited kernels move with their roof too (their time is launch and memory latency, which tracks the "
    "GPU generation); the projection also says what it gives with them kept as measured.",
    "Collectives: time = latency (library start-up + steps x per-step link latency) + traffic / the bandwidth "
    "one rank of the tensor-parallel group has (links to N-1 peers on a mesh, every link through a switch); the "
    "source's measured time over that bound is each collective's efficiency, which transfers to the target.",
    "Step times are the steps replayed on their own dependencies with every kernel at its projected time: host "
    "work, launches and their latencies stay as measured, synchronising calls wait for the re-priced work, kernels "
    "queue behind their stream and the host as measured (tracekit whatif replays the same graph).",
]


@dataclass
class Projection:
    source: Analysis  # the measured run
    target: GpuSpec
    projected: dict[str, Analysis]  # by basis
    phases: dict[str, dict[str, Any]]
    headline: list[dict[str, Any]]
    notes: list[str]
    factors: dict[str, Any] = dataclasses.field(default_factory=dict)  # classes and fractions used
    parts: Any = None  # the source's Parts, spec row and re-pricing, for --save-factors (not serialised)
    repriced: Any = None
    source_spec: Any = None

    def range_note(self) -> str:
        """The projection's central figure and range per phase, in one sentence, for the
        commands that build on it (``compare --project-before``, ``plan --gpu``)."""
        parts = []
        for phase, f in self.phases.items():
            r, c = f.get("projected_gpu_busy_ms_range"), f.get("projected_gpu_busy_ms")
            if r and c is not None:
                parts.append(f"{phase} GPU busy {c:.4g} ms (range {r[0]:.4g} to {r[1]:.4g} ms)")
        where = f"projected from {self.source.device.get('name') or 'the measured GPU'} onto {self.target.name}"
        if not parts:
            return f"{where}: no phase has a projected range"
        return (
            f"{where}: " + "; ".join(parts) + " — the central estimate is used; the range is the category "
            "factors' spread and the time of unknown cost"
        )

    def to_dict(self) -> dict[str, Any]:
        src = self.source.device
        return json_safe(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": KIND,
                "source": {
                    "trace": self.source.source.get("path"),
                    "name": self.source.source.get("name"),
                    "device": src.get("name"),
                    "spec": src.get("spec"),
                    "spec_key": src.get("spec_key"),
                    "phase_source": self.source.phase_source,
                    "model": (self.source.model or {}).get("name"),
                },
                "target": {
                    "spec": self.target.name,
                    "spec_key": self.target.key,
                    "peak_basis": self.target.peak_basis,
                    "peak_bandwidth": self.target.peak_bandwidth,
                    "achievable_bandwidth": self.target.achievable_bandwidth,
                    "interconnect_bandwidth": self.target.interconnect_bandwidth,
                    "peak_flops": {"matrix": dict(self.target.matrix_flops), "vector": dict(self.target.vector_flops)},
                },
                "method": METHOD,
                "factors": self.factors,
                "phases": self.phases,
                "headline": self.headline,
                "notes": self.notes,
                "measured": self.source.to_dict(),
                "projected": self.projected["central"].to_dict(),
            }
        )


def project(trace: Trace, to: str | GpuSpec, *, learnt=None, **options) -> Projection:
    """Project ``trace`` (analysed with ``analyze``'s ``options``) onto the GPU ``to``;
    ``learnt`` (``whatif.learnt.load``) replaces the table's figures it measured."""
    target = to if isinstance(to, GpuSpec) else spec_by_name(to)
    parts, match = measure(trace, **options)
    source = assemble(trace, parts, match)
    return project_parts(
        trace, parts, match, source, target, ranks=choose_tp(trace, options.get("tp"))[0], learnt=learnt
    )


def project_parts(
    trace: Trace,
    parts: Parts,
    match: SpecMatch,
    source: Analysis,
    target: GpuSpec,
    *,
    ranks: int | None = None,
    learnt=None,
) -> Projection:
    if parts.seg.device_type != "gpu" and gpu_events_lost(trace):
        raise TracekitError(
            "cannot project this trace: it was cut before its GPU events, so no GPU work survives to project"
        )
    if match.spec is None:
        raise TracekitError(
            "cannot project: the measured GPU has no spec row, so how close its kernels came to its "
            f"roof is unknown ({match.reason or 'no peaks'}); pass --gpu NAME for it"
        )
    if parts.seg.device_type != "gpu" and not is_cpu(target):
        # CPU ops re-price on another CPU's measured ceilings (the same roofline), not on a GPU's.
        raise TracekitError(
            "cannot project a CPU-only trace onto a GPU: its work is CPU ops, not kernels "
            "(it projects onto a CPU: --to a spec file with vendor CPU)"
        )
    notes: list[str] = []
    # The group the collectives ran in: the run's tensor-parallel degree, as pricing took it.
    ranks = ranks if ranks is not None else choose_tp(trace, None)[0]
    rp = reprice(parts.work, match.spec, target, ranks=ranks, learnt=learnt)
    notes += rp.notes
    measured = source.device.get("name") or "an unknown GPU"  # a trace may not name its GPU
    projected = {}
    for estimate in ESTIMATES:
        dur = getattr(rp, estimate)
        new_parts = _projected_parts(trace, parts, dur, target, _replayed_steps(source, dur, target), ranks)
        how = f"projected from {measured} ({estimate} estimate): tracekit project --to {target.key}"
        projected[estimate] = assemble(
            trace,
            new_parts,
            SpecMatch(target, how, None),
            device_name=f"{target.name} (projected from {measured})",
            with_timelines=False,
        )
    # The name compare and plan read the central projection by (the achievable basis before).
    projected["achievable"] = projected["central"]
    # The central projection with latency-limited kernels kept as measured.
    busy_kept = _step_busy(parts, np.where(rp.latency, parts.work["dur_ns"].to_numpy(dtype=float), rp.central))
    phases = _phase_figures(source, projected, busy_kept, parts, rp)
    notes += _notes(parts, source, phases)
    summary = _factor_summary(match.spec, target)
    if learnt is not None:
        summary["learnt"] = learnt.describe()
        notes.append(
            f"factors learnt from checks replace the table's where they measured both GPUs' classes: "
            f"{learnt.describe()}"
        )
    return Projection(
        source, target, projected, phases, _headline(source, projected), notes, summary, parts, rp, match.spec
    )


def is_cpu(spec: GpuSpec) -> bool:
    """Whether a spec row is a CPU's (measured by collect, or a spec file with vendor CPU)."""
    return (spec.vendor or "").strip().lower() == "cpu"


def _replayed_steps(source: Analysis, dur: np.ndarray, target: GpuSpec) -> np.ndarray | None:
    """Per step, its duration replayed with every unit at its projected time (None: no replay)."""
    if source.replayer is None:
        return None
    every = ch.Change(
        ch.DURATIONS,
        rows=np.arange(len(dur)),
        durations=np.round(dur).astype(np.int64),
        faster_only=False,
        label=f"every kernel re-priced on {target.name}",
    )
    return source.replayer.run([every]).duration_ns


def _projected_parts(
    trace: Trace,
    parts: Parts,
    dur: np.ndarray,
    target: GpuSpec,
    replayed: np.ndarray | None = None,
    ranks: int | None = None,
) -> Parts:
    """The parts with each unit's projected duration, re-bounded on the target, and each step's
    busy time and duration moved accordingly (``replayed``: the steps' replayed durations)."""
    work = parts.work.copy()
    work["dur_ns"] = np.round(dur).astype(np.int64)
    work["end_ns"] = work["start_ns"].to_numpy() + work["dur_ns"].to_numpy()
    cols = ["category", "flops", "bytes", "dtype", "unit", "cost_reason", "cost_source", "model_check"]
    table = work[cols].copy()
    text = {c: table[c].to_numpy(dtype=object) for c in ("cost_reason", "dtype", "unit")}
    roofline_columns(
        table,
        target,
        None,
        categorical.strings(work["kind"]),
        work["category"].to_numpy(),
        work["dur_ns"].to_numpy() / 1e9,
        text["cost_reason"],
        text["dtype"],
        text["unit"],
        ranks=ranks,
    )
    rf = table["roof_fraction"].to_numpy()
    fits = latency_fits(work["dur_ns"].to_numpy(), rf, work["ctas"].to_numpy(), target.num_sms)
    at_roof = np.isin(table["model_check"].to_numpy(), AT_ROOF_CHECKS)
    table["limiter"] = categorical.text(limiter(table["bound"].to_numpy(), rf, at_roof, fits), index=table.index)
    for c in (
        "peak_flops",
        "peak_bw",
        "achievable_flops",
        "achievable_bw",
        "bound",
        "bound_reason",
        "peak_note",
        "ridge",
        "roof_fraction",
        "roof_fraction_achievable",
        "limiter",
    ):
        work[c] = table[c]
    with np.errstate(divide="ignore", invalid="ignore"):
        secs = work["dur_ns"].to_numpy() / 1e9
        work["achieved_flops"] = np.where(secs > 0, work["flops"].to_numpy() / secs, np.nan)
        work["achieved_bw"] = np.where(secs > 0, work["bytes"].to_numpy() / secs, np.nan)
    steps = parts.seg.steps.copy()
    if len(steps):
        busy = _step_busy(parts, dur)
        saved = steps["gpu_busy_ns"].to_numpy() - busy
        if replayed is not None:
            # A step is never shorter than its own busy time (the books: idle >= 0).
            duration = np.maximum(replayed.astype(float), busy)
        else:
            duration = np.maximum(steps["duration_ns"].to_numpy() - saved, _host_floor(trace, steps))
        steps["gpu_busy_ns"] = np.round(busy).astype(np.int64)
        steps["gpu_end_ns"] = np.where(
            steps["kernels"] > 0, steps["gpu_end_ns"] - np.round(saved).astype(np.int64), steps["gpu_end_ns"]
        )
        # The window's end moves with the duration: the time on other work before the step's own
        # (previous_ns, unrecorded_ns) is the trace's, and the books check the window holds both.
        steps["end_ns"] = steps["end_ns"] - (steps["duration_ns"].to_numpy() - np.round(duration).astype(np.int64))
        steps["duration_ns"] = np.round(duration).astype(np.int64)
        # The books still balance: idle is what the duration holds beyond the busy time.
        # Where the host's own time floors the step, the extra idle is the host's.
        idle_ns = (steps["duration_ns"] - steps["gpu_busy_ns"]).to_numpy()
        steps["gpu_idle_ns"] = idle_ns
        if parts.seg.device_type == "gpu" and len(parts.idle.by_step) == len(steps):
            by_step = _rebalanced(parts.idle.by_step, idle_ns)
            # The idle intervals the report groups shrink with their step's idle (a host freed by a
            # faster GPU waits less), never grow: they stay a part of it.
            gaps = parts.idle.gaps
            if len(gaps):
                was = parts.idle.by_step.sum(axis=1).astype(float)
                keep = np.where(was > 0, np.minimum(idle_ns / np.where(was > 0, was, 1), 1.0), 1.0)
                gaps = gaps.copy()
                f = keep[gaps["step"].to_numpy()]
                for c in CAUSES:
                    gaps[c] = gaps[c].to_numpy() * f
            parts = dataclasses.replace(parts, idle=dataclasses.replace(parts.idle, by_step=by_step, gaps=gaps))
        # A split mixed step's parts follow its units' new times and still sum to its busy time.
        parts = dataclasses.replace(
            parts,
            split=retimed(
                parts.split, work["step"].to_numpy(), work["dur_ns"].to_numpy(), steps["gpu_busy_ns"].to_numpy()
            ),
        )
    seg = dataclasses.replace(
        parts.seg, work=parts.seg.work.assign(dur_ns=work["dur_ns"], end_ns=work["end_ns"]), steps=steps
    )
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
        cov = Coverage.of_thread(trace, int(tid))
        a = steps["cpu_start_ns"].to_numpy()[rows]
        b = steps["cpu_end_ns"].to_numpy()[rows]
        out[rows] = (b - a) - cov.sync(a, b)
    return out


# --- figures -------------------------------------------------------------------------


def _phase_figures(
    source: Analysis, projected: dict[str, Analysis], busy_kept: np.ndarray, parts: Parts, rp: Repriced
) -> dict:
    out = {}
    lo_hi = lambda vals: [float(min(vals)), float(max(vals))] if all(v is not None for v in vals) else None  # noqa: E731
    weights = _phase_step_weights(parts)
    ends = ("low", "central", "high")
    dur = parts.work["dur_ns"].to_numpy(dtype=float)
    for phase, p in source.phases.items():
        pp = {e: projected[e].phases.get(phase) or {} for e in ends}
        in_phase = (parts.work["phase"] == phase).to_numpy()
        w = parts.work[in_phase]
        lim = w.groupby("limiter", observed=True)["dur_ns"].sum() / 1e6

        def step_ms(a, phase: str = phase) -> float | None:
            return _mean_step(a, phase)

        kernel_ms = dur[in_phase].sum() / 1e6
        unknown_ms = float(dur[in_phase & rp.unknown].sum() / 1e6)
        busy = lo_hi([pp[e].get("gpu_busy_ms") for e in ends])
        out[phase] = {
            "measured_gpu_busy_ms": p.get("gpu_busy_ms"),
            "projected_gpu_busy_ms": pp["central"].get("gpu_busy_ms"),
            "projected_gpu_busy_ms_range": busy,
            "measured_step_ms": step_ms(source),
            "projected_step_ms": step_ms(projected["central"]),
            "measured_time_ms": p.get("time_ms"),
            "projected_time_ms": pp["central"].get("time_ms"),
            "measured_tokens_per_s": _tokens_per_s(source, phase),
            "projected_tokens_per_s": _tokens_per_s(projected["central"], phase),
            "projected_range": {
                "gpu_busy_ms": busy,
                "step_ms": lo_hi([step_ms(projected[e]) for e in ends]),
                "time_ms": lo_hi([pp[e].get("time_ms") for e in ends]),
                "tokens_per_s": lo_hi([_tokens_per_s(projected[e], phase) for e in ends]),
            },
            # Kernel time per category: measured, projected (central) and its range.
            "by_category_ms": _by_category(w, rp, in_phase),
            # Kernel time by limiter on the source: what moved with which roof, and what stayed.
            "measured_by_limiter_ms": {str(k): float(v) for k, v in lim.items()},
            "kept_ms": unknown_ms,
            "unknown_share": unknown_ms / kernel_ms if kernel_ms else 0.0,
            "latency_kept_gpu_busy_ms": float((busy_kept * weights[phase]).sum() / 1e6),
            # Collectives: measured, projected, the projection's latency and bandwidth parts, the links.
            "communication": comm_summary(rp.comm, in_phase[rp.comm.index]) if rp.comm is not None else None,
        }
    return out


def _by_category(w: pd.DataFrame, rp: Repriced, in_phase: np.ndarray) -> dict[str, dict[str, Any]]:
    frame = pd.DataFrame(
        {
            "c": w["category"].astype(str).to_numpy(),
            "m": w["dur_ns"].to_numpy(dtype=float),
            "p": rp.central[in_phase],
            "lo": rp.low[in_phase],
            "hi": rp.high[in_phase],
        }
    )
    sums = frame.groupby("c").sum() / 1e6
    return {
        str(c): {
            "measured_ms": float(r.m),
            "projected_ms": float(r.p),
            "range_ms": [float(r.lo), float(r.hi)],
            "factor_category": factors.factor_category(c),
        }
        for c, r in sums.sort_values("m", ascending=False).iterrows()
    }


def _factor_summary(src: GpuSpec, tgt: GpuSpec) -> dict[str, Any]:
    """Which vendor class each GPU is, and the fractions used, with their sources (for the report)."""
    out: dict[str, Any] = {}
    for role, spec in (("source", src), ("target", tgt)):
        cls = factors.vendor_class(spec)
        out[role] = {
            "spec_key": spec.key,
            "class": cls.key,
            "class_name": cls.name,
            "factors": {
                c: {
                    "compute": list(factors.fractions(spec, c, "compute")),
                    "memory": list(factors.fractions(spec, c, "memory")),
                    "source": factors.source(spec, c),
                }
                for c in factors.FACTOR_CATEGORIES
            },
        }
    out["unknown_ratio_band"] = list(unknown_band(src, tgt))
    return out


def _phase_step_weights(parts: Parts) -> dict[str, np.ndarray]:
    from tracekit.analysis.steps.latency import step_weights

    return step_weights(parts.seg.steps, parts.split.step_prefill_fraction)


def _mean_step(a: Analysis, phase: str) -> float | None:
    s = a.steps[a.steps["phase"] == phase] if len(a.steps) else a.steps
    return float(s["duration_ns"].mean() / 1e6) if len(s) else None


def _tokens_per_s(a: Analysis, phase: str) -> float | None:
    return (
        a.metrics.get("prefill_tokens_per_s" if phase == "prefill" else "decode_tokens_per_s")
        if phase in ("prefill", "decode")
        else None
    )


# Headline figures, measured vs projected: the request-level ones or the engine-step ones.
_FIGURES = (
    ("ttft_ms", "TTFT", lambda m: m.get("ttft_ms")),
    ("tpot_p50", "TPOT p50", lambda m: (m.get("tpot_ms") or {}).get("p50")),
    ("prefill_step_p50", "Prefill step p50", lambda m: (m.get("prefill_step_ms") or {}).get("p50")),
    ("decode_step_p50", "Decode step p50", lambda m: (m.get("decode_step_ms") or {}).get("p50")),
    ("prefill_tokens_per_s", "Prefill tokens/s", lambda m: m.get("prefill_tokens_per_s")),
    ("decode_tokens_per_s", "Decode tokens/s", lambda m: m.get("decode_tokens_per_s")),
    ("prefill_mfu", "Prefill MFU", lambda m: m.get("prefill_mfu")),
    ("decode_mbu", "Decode MBU", lambda m: m.get("decode_mbu")),
)


def _headline(source: Analysis, projected: dict[str, Analysis]) -> list[dict[str, Any]]:
    out = []
    for key, label, get in _FIGURES:
        measured = get(source.metrics)
        values = [get(projected[e].metrics) for e in ESTIMATES]
        known = [v for v in values if v is not None]
        if measured is None and not known:
            continue
        out.append(
            {
                "key": key,
                "label": label,
                "measured": measured,
                "projected": values[0],
                "range": [min(known), max(known)] if len(known) == len(values) else None,
            }
        )
    return out


def _notes(parts: Parts, source: Analysis, phases: dict) -> list[str]:
    out = [] if phases else [f"the trace holds no inference step ({source.run_kind}): there is no phase to project"]
    for phase, f in phases.items():
        by = f["measured_by_limiter_ms"]
        total = sum(by.values())
        lat = by.get(LATENCY, 0.0)
        if total and lat / total >= 0.05:
            out.append(
                f"{phase}: {lat:.3g} ms ({lat / total:.0%} of kernel time) is latency-limited and moved with "
                f"its roof; kept as measured, the projected GPU busy time would be "
                f"{f['latency_kept_gpu_busy_ms']:.3g} ms instead of {f['projected_gpu_busy_ms']:.3g} ms"
            )
        cm = f.get("communication")
        if cm:
            eff = (
                f", at {cm['efficiency']:.0%} of their latency-bandwidth bound on the source"
                if cm.get("efficiency") is not None
                else ""
            )
            out.append(
                f"{phase}: {cm['collectives']} collectives, {cm['measured_ms']:.3g} ms measured -> "
                f"{cm['projected_ms']:.3g} ms projected = latency {cm['latency_ms']:.3g} ms + bandwidth "
                f"{cm['bandwidth_ms']:.3g} ms ({cm['dominant']} dominates){eff}; link assumed: "
                f"{cm['target_link']['description']} (source: {cm['source_link']['description']})"
            )
        unk, share = f["kept_ms"], f["unknown_share"]
        if share >= 0.05:
            out.append(
                f"{phase}: {unk:.3g} ms ({share:.0%} of kernel time) has unknown cost: it stays as measured "
                "in the central projection and widens the range"
                + ("" if source.model else "; --model NAME prices kernels without shapes")
            )
        r = f["projected_gpu_busy_ms_range"]
        if r and f["projected_gpu_busy_ms"] is not None:
            out.append(
                f"{phase}: projected GPU busy {f['projected_gpu_busy_ms']:.3g} ms, range {r[0]:.3g} to "
                f"{r[1]:.3g} ms (the category factors' low and high figures, and the unknown-cost share)"
            )
        moved = {k: v for k, v in by.items() if k in (COMPUTE, MEMORY) and v}
        if moved:
            out.append(
                f"{phase}: "
                + ", ".join(f"{v:.3g} ms {k}-limited" for k, v in moved.items())
                + " moved with the target's "
                + " and ".join({"compute": "peak FLOP/s", "memory": "bandwidth"}[k] for k in moved)
                + " at each category's fraction of it on each vendor class"
            )
    if source.replayer is not None:
        out.append(
            "step times are the steps replayed with every kernel at its projected time: host work, launches "
            "and their latencies stay as measured, synchronising calls wait for the re-priced work "
            "(tracekit whatif replays the same steps)"
        )
    else:
        out.append(
            "GPU idle time (host work, syncs, launches) stays as measured; a step never gets shorter than its "
            "host's own work"
        )
    return out
