"""The pipeline: Trace -> segment -> attribute -> one ``Analysis``.

Everything a report shows is computed here or in the stages it calls; renderers
only read the result.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit import __version__
from tracekit.analysis import books, categorical, truncation
from tracekit.analysis.pricing import stated_weights
from tracekit.analysis.findings import rules as find
from tracekit.analysis.findings.advice import THRESHOLDS as advice_thresholds
from tracekit.analysis.pricing.ceilings import check_ceilings
from tracekit.analysis.waiting.idle import IdleCauses, idle_causes
from tracekit.analysis.steps.latency import latency, step_weights
from tracekit.analysis.model import Analysis
from tracekit.analysis.ranks import rank_view
from tracekit.analysis.pricing.above_roof import ABOVE_ROOF
from tracekit.analysis.pricing.attribution import attribute
from tracekit.analysis.pricing.roofline import (BOUNDS, CAPTURE, COST_SOURCES, LATENCY_ROOF, LIMITERS, MODEL, SHAPES,
                                                combined_estimate, limiter)
from tracekit.analysis.steps.segment import DECODE, MIXED, PREFILL, UNKNOWN, Segmentation, segment
from tracekit.analysis.steps.mixed import phase_weights, split_mixed
from tracekit.analysis.steps.timeline import timelines
from tracekit.errors import TracekitError
from tracekit.models import ModelSpec, load_model
from tracekit.models.config import with_weights
from tracekit.models.registry import from_sidecar
from tracekit.specs import SpecMatch, cpu_lookup, with_calibration
from tracekit.specs.identify import identify
from tracekit.specs.model import normalise_dtype
from tracekit.trace.model import Trace, op_shapes

PHASE_ORDER = (PREFILL, DECODE, MIXED, UNKNOWN)
TOP_KERNELS = 15  # rows per phase in the report tables
ROOFLINE_POINTS = 40  # op groups per phase on the roofline chart
# A roof fraction above 1 by more than timing noise is not shown as fact.
ROOF_TOLERANCE = 0.02


@dataclass
class Parts:
    """What assembling an ``Analysis`` needs beyond the trace: the segmentation, the priced
    units of work, the mixed-step split, idle causes, and how the model priced. ``project``
    re-prices these on another GPU and assembles again."""

    seg: Segmentation
    work: pd.DataFrame
    split: Any
    idle: IdleCauses
    ops: pd.DataFrame | None
    model_view: dict[str, Any] | None
    capture_note: str | None = None
    # Why the measured ceilings were replaced (analysis.ceilings), when they were.
    ceilings_note: str | None = None


def analyze(
    trace: Trace,
    *,
    gpu: str | None = None,
    spec_file: str | None = None,
    cpu_matmul_flops: float | None = None,
    cpu_bandwidth: float | None = None,
    capture: Trace | None = None,
    model: ModelSpec | str | None = None,
    tp: int | None = None,
    costs: str = "auto",
    weights: str | None = None,
    model_force: bool = False,
    stated: dict | None = None,
) -> Analysis:
    """Analyse a trace. ``gpu``/``spec_file`` override the device lookup; the two
    ``cpu_*`` peaks (FLOP/s, bytes/s) stand in for a CPU trace's missing calibration;
    ``capture`` is the graph-capture trace that describes graph-replayed kernels.

    ``model`` (a ``ModelSpec``, or a registry name / config.json / checkpoint folder, with
    ``weights`` overriding its stored precision) prices kernels the shapes cannot, at
    tensor-parallel degree ``tp`` (default: distributedInfo's world size); ``costs`` is
    ``auto`` (shapes where recorded, the model elsewhere), ``shapes`` or ``model``. A run
    tracekit collected is priced by the model config its sidecar recorded. A model the trace
    contradicts (another number of attention layers) prices nothing, with the reason, unless
    ``model_force``. ``stated`` gives the tokens and batch of each phase's steps where the user
    knows them (``{"tokens": {"prefill": 1049}, "batch": {"decode": 1}}``, phase ``"all"`` for every step)."""
    parts, match = measure(trace, gpu=gpu, spec_file=spec_file, cpu_matmul_flops=cpu_matmul_flops,
                           cpu_bandwidth=cpu_bandwidth, capture=capture, model=model, tp=tp, costs=costs,
                           weights=weights, model_force=model_force, stated=stated)
    return assemble(trace, parts, match)


def measure(trace: Trace, *, gpu=None, spec_file=None, cpu_matmul_flops=None, cpu_bandwidth=None, capture=None,
            model=None, tp=None, costs="auto", weights=None, model_force=False,
            stated=None) -> tuple[Parts, SpecMatch]:
    """Segment, price and split the trace's work against its device (``analyze``'s options)."""
    seg = segment(trace, stated=stated)
    match = _device_spec(trace, gpu, spec_file, cpu_matmul_flops, cpu_bandwidth)
    spec_model, model_how = _model(trace, model, weights)
    said = None
    if spec_model is not None and not spec_model.precision_stated:
        # A config silent on quantisation, and GEMM kernels that name narrow weights: a quantised
        # copy of the model ran, so its weights are priced as the kernels state (said in the view).
        said = stated_weights.stated(seg.work)
        if said is not None:
            spec_model = with_weights(spec_model, said.precision, said.sentence(spec_model.dtype))
    tp_value, tp_how = _tp(trace, tp)
    attr = attribute(trace, seg, match, capture=capture, model=spec_model, tp=tp_value, policy=costs,
                     model_force=model_force)
    checked = check_ceilings(seg.work, attr.table, match, (trace.sidecar or {}).get("calibration"))
    ceilings_note = None
    if checked is not None:  # the measured ceilings were wrong: price again against corrected ones
        match, ceilings_note = checked
        attr = attribute(trace, seg, match, capture=capture, model=spec_model, tp=tp_value, policy=costs,
                         model_force=model_force)
    work = pd.concat([seg.work.reset_index(drop=True), attr.table.reset_index(drop=True)], axis=1)
    priced = attr.model_costs is not None and not attr.model_costs.withheld
    split = split_mixed(seg.steps, work, work["category"].to_numpy(),
                        attr.model_costs.prefill_share if priced else None)
    work["prefill_share"] = split.prefill_share
    model_view = _model_view(spec_model, model_how, tp_value, tp_how, costs, attr.model_costs, model)
    if model_view is not None:
        model_view["forced"] = bool(model_force)
        if said is not None:
            model_view["weights_from_kernels"] = said.precision
    return Parts(seg, work, split, idle_causes(trace, seg), attr.ops, model_view, attr.capture_note,
                 ceilings_note), match


def assemble(trace: Trace, parts: Parts, match: SpecMatch, *, device_name: str | None = None,
             with_timelines: bool = True) -> Analysis:
    """Every figure, table and finding of ``parts`` priced against ``match``'s spec row.
    ``device_name`` replaces the trace's device (a projection onto another GPU)."""
    seg, work, split, idle = parts.seg, parts.work, parts.split, parts.idle
    launch_ns = idle.by_step[:, 1] if len(seg.steps) else None
    lat = latency(seg, split.step_prefill_fraction, launch_ns)
    spec = match.spec
    by_phase = {p: _phase_work(work, p) for p in PHASE_ORDER if p in lat.phases}
    phases = {p: _phase(p, w, lat.phases[p], spec) for p, w in by_phase.items()}
    weights = step_weights(seg.steps, split.step_prefill_fraction)
    for p, v in phases.items():
        v["idle_by_cause"] = idle.phase_causes(weights[p])
        v["idle_top"] = idle.top(weights[p], v["time_ms"], work)
    # The identities every analysis satisfies (analysis.books); a violation is a tracekit bug.
    books_notes = books.enforce(books.check(seg.steps, idle.by_step, weights, phases, split.by_step,
                                            seg.device_type))
    _withhold(phases, by_phase, (parts.model_view or {}).get("withheld"))
    metrics = _metrics(lat, phases)
    metrics["unprofiled"] = _unprofiled(trace)
    device = _device(trace, seg.device_type, match)
    if device_name is not None:
        device["name"] = device_name
    provenance = _provenance(trace, seg, lat, match, phases, work)
    if books_notes:
        provenance["notes"] = provenance["notes"] + books_notes
    if (parts.model_view or {}).get("withheld"):
        provenance["reasons"]["model_costs"] = parts.model_view["withheld"]
    if parts.capture_note:
        provenance["graph_capture"] = parts.capture_note
    if parts.ceilings_note:
        provenance["ceilings"] = parts.ceilings_note
    truncation.mark_partial(trace, metrics, phases, provenance["reasons"])
    analysis = Analysis(
        source={
            "path": trace.path,
            "files": trace.metadata.get("files", [trace.path]),
            "name": os.path.basename(os.path.normpath(trace.path)),
            "schema_era": trace.era,
            "events": trace.n_events,
            "bytes": trace.n_bytes,
            "tracekit_version": __version__,
        },
        device=device,
        workload=_workload(trace),
        run_kind=seg.run_kind,
        phase_source=seg.source,
        steps=_steps_with_attribution(seg.steps, work, spec, split.by_step, idle),
        work=work,
        phases=phases,
        metrics=metrics,
        findings=[],
        provenance=provenance,
        top_kernels={p: _top_kernels(w) for p, w in by_phase.items()},
        roofline={p: _roofline_points(w, spec, phases[p], parts.ops) for p, w in by_phase.items()},
        overall=_overall(work),
        model=parts.model_view,
        timelines=timelines(trace, seg.steps, work, idle, lambda n: short_name(n, 70), seg.device_type)
        if with_timelines else [],
        truncated=truncation.view(trace),
    )
    # Ranks are measured, never projected: a projection onto another GPU has none.
    ranks = rank_view(trace, seg, work["category"].to_numpy(dtype=object)) if device_name is None else None
    if ranks:
        analysis.ranks, analysis.rank_summary = ranks["ranks"], ranks["summary"]
    analysis.findings = find.findings(analysis)
    return analysis


def _withhold(phases: dict, by_phase: dict, withheld: str | None) -> None:
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


def _phase_work(work: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The units of work of a phase, each weighted by its share in the phase: the prefill or
    decode part of a split mixed step's kernel counts with its share of time, FLOPs and bytes."""
    weight = phase_weights(work["phase"].to_numpy(), work["prefill_share"].to_numpy(), phase)
    keep = weight > 0
    # A phase holding every unit (a decode-only run) is the table itself, not a copy of a
    # serving run's work table (hundreds of MB): the per-phase figures only read it.
    w = work if keep.all() else work[keep]
    if (weight[keep] == 1.0).all():
        return w
    f = weight[keep]
    return w.assign(dur_ns=w["dur_ns"].to_numpy() * f, flops=w["flops"].to_numpy() * f, bytes=w["bytes"].to_numpy() * f)


def _steps_with_attribution(steps: pd.DataFrame, work: pd.DataFrame, spec, split: dict | None = None,
                            idle=None) -> pd.DataFrame:
    """The steps table plus, per step, kernel time by bound, FLOPs, bytes and MBU, idle time by
    cause, and the prefill/decode split of mixed steps."""
    if not len(steps):
        return steps.assign(launch_gap_ns=pd.Series(dtype="int64"), idle_by_cause=pd.Series(dtype=object))
    sel = work["step"].to_numpy() >= 0
    step = work["step"].to_numpy()[sel]
    dur = work["dur_ns"].to_numpy()[sel].astype(np.float64)  # whole ns: exact float sums
    flops = work["flops"].to_numpy()[sel]
    out = steps.copy()
    # Steps are numbered 0..n-1 in row order, so per-step sums are bincounts over the step
    # column, on the bound's codes rather than a groupby on its strings.
    at = out["step"].to_numpy()
    bound = categorical.Values(work["bound"].to_numpy(dtype=object)[sel])
    n = int(max(at.max(initial=-1), step.max(initial=-1))) + 1
    for b in BOUNDS:
        out[f"{b}_ms"] = np.bincount(step, weights=np.where(bound.eq(b), dur, 0.0), minlength=n)[at] / 1e6
    out["unknown_cost_ms"] = np.bincount(step, weights=np.where(np.isnan(flops), dur, 0.0), minlength=n)[at] / 1e6
    # min_count=1: a step whose every kernel has unknown cost has unknown FLOPs, not 0.
    # (A groupby on the two columns alone: its compensated sums are the figures reported.)
    g = pd.DataFrame({"step": step, "flops": flops, "bytes": work["bytes"].to_numpy()[sel]}).groupby("step")
    out["flops"] = g["flops"].sum(min_count=1).reindex(at).to_numpy()
    out["bytes"] = g["bytes"].sum(min_count=1).reindex(at).to_numpy()
    bw = spec.peak_bandwidth if spec is not None else None
    secs = out["duration_ns"].to_numpy() / 1e9
    out["mbu"] = np.where((secs > 0) & bool(bw), out["bytes"].to_numpy() / np.where(secs > 0, secs, 1) / (bw or 1), np.nan)
    # What each step's bytes (and MBU) are, as per phase (``combined_estimate``): only steps
    # holding estimated units need the per-step pass.
    out["mbu_estimate"] = None
    if "estimate" in work:
        est = work["estimate"].to_numpy(dtype=object)[sel]
        marked = np.flatnonzero(pd.notna(est))
        if len(marked):
            b = work["bytes"].to_numpy()[sel]
            kinds = {int(i): combined_estimate(est[step == i], b[step == i]) for i in np.unique(step[marked])}
            out["mbu_estimate"] = [kinds.get(int(i)) for i in at]
    out["split"] = [(split or {}).get(int(i)) for i in out["step"]]
    out["idle_by_cause"] = [idle.step_causes(i) if idle is not None else None for i in range(len(out))]
    out["launch_gap_ns"] = idle.by_step[:, 1] if idle is not None else 0
    return out


# --- model ---------------------------------------------------------------------------


def resolve_model(trace: Trace, model=None, weights: str | None = None) -> ModelSpec | None:
    """The model that prices ``trace``: ``model`` (a spec, registry name or path) or the config
    its collect sidecar recorded; None without either."""
    return _model(trace, model, weights)[0]


def _model(trace: Trace, model, weights: str | None) -> tuple[ModelSpec | None, str | None]:
    """The model to price by, and how it was chosen."""
    if isinstance(model, ModelSpec):
        return model, "given"
    if isinstance(model, str):
        return load_model(model, weights=weights), "--model"
    if weights is not None:
        raise TracekitError("--weights says how a model's weights are stored: pass --model too")
    try:
        collected = from_sidecar(trace.sidecar)
    except TracekitError:
        collected = None  # an unusual recorded config: the run is still analysed from its shapes
    return (collected, "the config tracekit collect recorded with the trace") if collected else (None, None)


def _tp(trace: Trace, tp: int | None) -> tuple[int, str]:
    """Tensor-parallel degree of the run, and where it came from."""
    if tp is not None:
        if tp < 1:
            raise TracekitError(f"--tp must be at least 1, not {tp}")
        return int(tp), "--tp"
    world = (trace.distributed or {}).get("world_size")
    if isinstance(world, int) and world >= 1:
        return world, "distributedInfo's world size (pass --tp if the run was data- or expert-parallel)"
    if trace.sidecar:
        return 1, "tracekit collect runs one process"
    return 1, "assumed 1: the trace has no distributedInfo (pass --tp)"


def _model_view(spec: ModelSpec | None, how: str | None, tp: int, tp_how: str, costs: str, mcosts,
                asked) -> dict[str, Any] | None:
    """What the report says about the model that priced the kernels (``Analysis.model``)."""
    if spec is None:
        return None
    out: dict[str, Any] = {
        "name": spec.name,
        "source": spec.source,
        "chosen_by": how,
        "summary": spec.summary(),
        "parameters": spec.parameters(),
        "tp": tp,
        "tp_source": tp_how,
        "precision": {c: spec.weight(c).name for c in ("attention", "linear_attention", "mlp", "experts",
                                                        "shared_experts", "lm_head") if _has(spec, c)},
        "precision_source": spec.precision_source,
        "costs": costs,
    }
    if mcosts is not None:
        out["kv_cache_dtype"] = mcosts.kv_dtype
        out["kv_cache_how"] = mcosts.kv_how
        out["layer_check"] = mcosts.layer_check
        out["withheld"] = mcosts.withheld
        out["dtype_conflicts"] = {c: {"kernels": k, "model": m} for c, (k, m) in mcosts.dtype_conflicts.items()}
        # {component: the formula and numbers of its estimated bytes} (experts touched, KV read).
        out["estimates"] = dict(mcosts.estimates)
    return out


def _has(spec: ModelSpec, cls: str) -> bool:
    from tracekit.models.config import DENSE, LINEAR, MOE

    return {"linear_attention": spec.count(attention=LINEAR) > 0, "mlp": spec.count(mlp=DENSE) > 0,
            "experts": spec.count(mlp=MOE) > 0, "shared_experts": bool(spec.shared_intermediate)}.get(cls, True)


# --- device --------------------------------------------------------------------------


def _device_spec(trace: Trace, gpu, spec_file, cpu_flops, cpu_bw) -> SpecMatch:
    if trace.has_gpu or gpu or spec_file:
        props, note = trace.device_resolution()
        names = trace.kernels["name"].cat.categories if hasattr(trace.kernels["name"], "cat") else trace.kernels["name"]
        match = identify(props, note, (str(n) for n in names), gpu=gpu, spec_file=spec_file)
        if match.spec is not None and trace.sidecar:
            # Measured ceilings from collect become the achievable roof; peaks stay.
            match = SpecMatch(with_calibration(match.spec, trace.sidecar), match.how, match.reason, match.notes)
        return match
    # A user-given CPU matmul peak is one rate for every floating-point dtype.
    flops = {d: cpu_flops for d in ("fp32", "bf16", "fp16")} if cpu_flops else None
    return cpu_lookup(trace.sidecar or {}, matmul_flops=flops, bandwidth=cpu_bw)


def _device(trace: Trace, device_type: str, match: SpecMatch) -> dict[str, Any]:
    spec = match.spec
    name = trace.device_name() if device_type == "gpu" else ((trace.sidecar or {}).get("device") or {}).get("name") or "CPU"
    reason = match.reason
    if device_type == "cpu" and truncation.gpu_events_lost(trace):
        # A GPU trace cut before its kernels is not a CPU trace: its device's work is unknown.
        device_type, name, spec, reason = "unknown", trace.device_name(), None, truncation.device_unknown_reason(trace)
    return {
        "name": name,
        "type": device_type,
        "spec": None if spec is None else spec.name,
        "spec_key": None if spec is None else spec.key,
        "how": match.how,
        "reason": reason,
        # Fields of the trace's deviceProperties that no GPU can have, ignored (specs.lookup).
        "notes": list(match.notes),
        "peak_basis": None if spec is None else spec.peak_basis,
        "peak_bandwidth": None if spec is None else spec.peak_bandwidth,
        "achievable_bandwidth": None if spec is None else spec.achievable_bandwidth,
        "achievable_bandwidth_basis": None if spec is None else spec.achievable_bandwidth_basis,
        # The spec row's compute peaks (FLOP/s by unit and dtype), as used for the roofline.
        "peak_flops": None if spec is None else {"matrix": dict(spec.matrix_flops), "vector": dict(spec.vector_flops)},
    }


def _workload(trace: Trace) -> dict[str, Any] | None:
    side = trace.sidecar
    if not side:
        return None
    keep = ("workload", "versions", "device", "timing", "calibration", "schedule", "created")
    return {k: side.get(k) for k in keep if k in side}


# --- per phase -----------------------------------------------------------------------


def _phase(phase: str, w: pd.DataFrame, lat: dict, spec) -> dict[str, Any]:
    """Figures of one phase from its (weighted) units of work and its latency aggregates."""
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
    mfu, mfu_ach, mfu_basis, mfu_reason = _mfu(w, time_ms, spec)
    mbu, mbu_ach, mbu_basis, mbu_reason = _mbu(nbytes, time_ms, spec, unknown_cost, kernel_ms)
    if mbu_basis:
        mbu_basis += "; " + _sources_text(w, "bytes")
    bytes_estimate, estimate_share = _bytes_estimates(w)
    if mbu_basis and bytes_estimate:
        mbu_basis += "; " + _estimates_text(estimate_share, bytes_estimate)
    src = categorical.Values(w["cost_source"] if "cost_source" in w else np.full(len(w), "shapes", dtype=object))
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
        "kernel_ms": kernel_ms,
        "kernels": int(len(w)),
        "by_bound": by_bound,
        # Shares for the phase-breakdown chart: of the phase's kernel time plus idle time
        # (by bound), and of its kernel time (by category).
        "by_bound_share": _shares(by_bound),
        # What limits the kernels (roofline.limiter): the bound's roof, or latency below
        # LATENCY_ROOF of it; with idle, like by_bound.
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
        "mbu_estimate": bytes_estimate if mbu is not None else None,
    }


_ESTIMATE_WORDS = {"upper": "upper bounds (routed experts' bytes capped at the bandwidth roof)",
                   "lower": "lower bounds (a prefill's KV read without a stated cached prefix)",
                   "model": "the model's estimates (distinct experts expected under uniform routing)"}


def _bytes_estimates(w: pd.DataFrame) -> tuple[str | None, dict[str, float]]:
    """(what the phase's bytes are, {estimate kind: share of the bytes}) (``combined_estimate``)."""
    if "estimate" not in w or not len(w):
        return None, {}
    est = w["estimate"].to_numpy(dtype=object)
    b = np.nan_to_num(w["bytes"].to_numpy(dtype=float))
    total = float(b.sum())
    vals = categorical.Values(est)
    share = {k: float(b[vals.eq(k)].sum()) / total for k in _ESTIMATE_WORDS if total > 0 and vals.eq(k).any()}
    return combined_estimate(est, b), share


def _estimates_text(share: dict[str, float], kind: str) -> str:
    parts = [f"{v:.0%} of the bytes are {_ESTIMATE_WORDS[k]}" for k, v in share.items() if v > 0]
    whole = {"upper": "the MBU is an upper bound", "lower": "the MBU is a lower bound",
             "model": "the MBU is an estimate"}[kind]
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
    if need / secs > 1 + ROOF_TOLERANCE:
        return None, None, None, (f"the matrix FLOPs counted would be {need / secs:.0%} of the peak: above 100% is "
                                  "not a fact, so the FLOPs or the peak are wrong")
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
    if "cost_source" not in w or not len(w):
        return f"{'FLOPs' if what == 'flops' else 'bytes'} from recorded shapes"
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
    if rate / peak > 1 + ROOF_TOLERANCE:
        return None, None, None, (f"the bytes counted would move at {rate / peak:.0%} of the peak bandwidth: above "
                                  "100% is not a fact (data served from caches, or bytes counted twice)")
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


def _unprofiled(trace: Trace) -> dict[str, Any] | None:
    """Wall-clock TTFT/TPOT that ``tracekit collect`` measured without the profiler, if any."""
    timing = (trace.sidecar or {}).get("timing") or {}
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


# --- tables for the report -----------------------------------------------------------

_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")


def _strip_params(s: str) -> str:
    """``f<>(int, float*)`` -> ``f<>()``: the trailing parameter list of a C++ signature.
    A parenthesis after a space (``Memcpy DtoD (Device -> Device)``) is kept."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == ")":
            depth += 1
        elif s[i] == "(":
            depth -= 1
            if depth == 0:
                return s if i == 0 or s[i - 1] == " " else s[:i] + "()"
    return s


def short_name(name: str, width: int = 80) -> str:
    """A kernel name for display: template arguments and parameter lists elided."""
    s = name
    for _ in range(6):  # nested templates collapse from the inside out
        t = _TEMPLATE_ARGS.sub("<>", s)
        if t == s:
            break
        s = t
    s = s.replace("(anonymous namespace)::", "")
    s = _strip_params(s)
    s = s.removeprefix("void ")
    return s if len(s) <= width else s[: width - 1] + "…"


def phase_work(work: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The work table of one phase as the report's per-phase tables count it (split mixed steps by share)."""
    return _phase_work(work, phase)


def kernel_table(w: pd.DataFrame, top: int | None = None) -> list[dict[str, Any]]:
    """The ``top_kernels`` rows of work table ``w``, every kernel name by default (the report keeps 15)."""
    return _top_kernels(w, top)


def _top_kernels(w: pd.DataFrame, top: int | None = TOP_KERNELS) -> list[dict[str, Any]]:
    if not len(w):
        return []
    total = w["dur_ns"].sum()
    known = w["roof_fraction"].notna()
    g = w.groupby("name", observed=True)
    # The two derived columns grouped the same way, without copying the whole table to add them.
    roof_x_dur = pd.Series(np.where(known, w["roof_fraction"] * w["dur_ns"], 0.0), index=w.index)
    known_dur = pd.Series(np.where(known, w["dur_ns"], 0), index=w.index)
    table = pd.DataFrame(
        {
            "calls": g.size(),
            "total_ns": g["dur_ns"].sum(),
            "flops": g["flops"].sum(min_count=1),
            "bytes": g["bytes"].sum(min_count=1),
            "category": g["category"].first(),
            "bound": _mode(w, "bound"),
            "limiter": _mode(w, "limiter"),
            "cost_source": _mode(w, "cost_source") if "cost_source" in w else "shapes",
            "peak_note": _mode(w, "peak_note") if "peak_note" in w else None,
            "estimate": _estimates_by_name(w),
            "roof_x_dur": roof_x_dur.groupby(w["name"], observed=True).sum(),
            "known_dur": known_dur.groupby(w["name"], observed=True).sum(),
        }
    ).sort_values("total_ns", ascending=False)
    if top is not None:
        table = table.head(top)
    rows = []
    for name, r in table.iterrows():
        secs = r["total_ns"] / 1e9
        roof = (r["roof_x_dur"] / r["known_dur"]) if r["known_dur"] else None
        if roof is not None and roof > 1 + ROOF_TOLERANCE:
            roof = None  # above the roof is not a fact: the counted work or the peak is off
        # The row's limiter follows its time-weighted roof fraction, as shown beside it; a
        # kernel without one (experts capped at the roof) keeps its units' limiter.
        row_limiter = str(limiter([r["bound"]], [roof])[0]) if roof is not None else r["limiter"]
        rows.append(
            {
                "name": str(name),
                "short_name": short_name(str(name)),
                "category": r["category"],
                "calls": int(r["calls"]),
                "total_ms": r["total_ns"] / 1e6,
                "mean_us": r["total_ns"] / r["calls"] / 1e3,
                "share": r["total_ns"] / total if total else None,
                "bound": r["bound"],
                "limiter": row_limiter,
                # Where the kernel's FLOPs and bytes came from (shapes, capture, model, none).
                "cost_source": r["cost_source"],
                # The peak that priced it when its dtype has none on the device ("priced at fp8 peak: ...").
                "peak_note": r["peak_note"] if isinstance(r["peak_note"], str) else None,
                # What its bytes (and the bandwidth and roof fraction built on them) are: "upper" or
                # "lower" bound, the model's "estimate", or None (the minimal traffic of stated work).
                "estimate": r["estimate"] if isinstance(r["estimate"], str) else None,
                "achieved_tflops": (r["flops"] / secs / 1e12) if secs and pd.notna(r["flops"]) else None,
                "achieved_gbps": (r["bytes"] / secs / 1e9) if secs and pd.notna(r["bytes"]) else None,
                "roof_fraction": roof,
            }
        )
    return rows


def _estimates_by_name(w: pd.DataFrame) -> pd.Series | None:
    """Per kernel name whose units carry an estimate, what its summed bytes are (``combined_estimate``)."""
    if "estimate" not in w:
        return None
    has = w["estimate"].notna().to_numpy()
    if not has.any():
        return None
    names = w["name"]
    out = {}
    for name in pd.unique(names[has]):
        mine = (names == name).to_numpy()
        out[name] = combined_estimate(w["estimate"].to_numpy(dtype=object)[mine], w["bytes"].to_numpy(dtype=float)[mine])
    return pd.Series(out, dtype=object)


# Beyond this many names x values, _mode counts the pairs present instead of a full table.
_MODE_TABLE_MAX = 1 << 24


def _mode(w: pd.DataFrame, col: str) -> pd.Series:
    """Per kernel name, the most common value of ``col``; on a tie the value that sorts first
    (what a groupby's idxmax gives). Counted on integer codes, not a groupby on strings."""
    names = w["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        counts = w.groupby(["name", col], observed=True).size()
        return counts.groupby(level=0, observed=True).idxmax().map(lambda key: key[1])
    ncode = names.cat.codes.to_numpy().astype(np.int64)
    vcode, values = pd.factorize(w[col].to_numpy(dtype=object), sort=True)
    ok = (ncode >= 0) & (vcode >= 0)
    width = max(len(values), 1)
    n_names = len(names.cat.categories)
    if n_names * width <= _MODE_TABLE_MAX:
        # A names x values table of counts; argmax takes the first largest, the value that sorts first.
        table = np.bincount(ncode[ok] * width + vcode[ok], minlength=n_names * width).reshape(n_names, width)
        kn = np.flatnonzero(table.any(axis=1))
        kv = table[kn].argmax(axis=1)
    else:
        keys, counts = np.unique(ncode[ok] * width + vcode[ok], return_counts=True)
        k_n, k_v = keys // width, keys % width
        order = np.lexsort((k_v, -counts, k_n))  # per name: the largest count first, then the value that sorts first
        best = order[np.r_[True, k_n[order][1:] != k_n[order][:-1]]]
        kn, kv = k_n[best], k_v[best]
    index = pd.CategoricalIndex(pd.Categorical.from_codes(kn, dtype=names.dtype), name="name")
    return pd.Series(np.asarray(values, dtype=object)[kv], index=index)


def _overall(work: pd.DataFrame) -> dict[str, Any]:
    """The whole trace regardless of phase: what a training trace (no steps) can still show."""
    ms = float(work["dur_ns"].sum() / 1e6)
    by_category = work.groupby("category")["dur_ns"].sum().sort_values(ascending=False) / 1e6
    return {
        "kernel_ms": ms,
        "kernels": int(len(work)),
        "by_category": {str(k): float(v) for k, v in by_category.items()},
        "by_category_share": {str(k): (float(v) / ms if ms else None) for k, v in by_category.items()},
        "top_kernels": _top_kernels(work),
    }


def _shape_text(ops: pd.DataFrame, op_row: int) -> str | None:
    """Input shapes and dtypes of one op, compact: ``[16, 559, 1024] bf16, [1024, 1024] bf16``."""
    if op_row < 0:
        return None
    try:
        dims, types = op_shapes(ops, int(op_row))
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    if not dims:
        return None
    parts = []
    for i, d in enumerate(dims):
        if not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
            continue
        t = types[i] if types and i < len(types) and isinstance(types[i], str) else ""
        dt = normalise_dtype(t) or ""
        parts.append(f"[{', '.join(str(x) for x in d)}]" + (f" {dt}" if dt else ""))
    text = ", ".join(parts[:4]) + (" ..." if len(parts) > 4 else "")
    return text[:200] or None


def _roofline_points(w: pd.DataFrame, spec, phase: dict, ops: pd.DataFrame | None = None) -> dict[str, Any]:
    """Work groups placed by intensity and achieved FLOP/s. Shape-priced work: one point per
    pricing op name and input shapes (x category, dtype, unit), so the QKV, MLP and LM-head
    GEMMs of a model stay separate points with their own intensities. Model-priced work: one
    point per model component (x dtype, unit), the grain the model prices at."""
    flops_all, bytes_all, dur_all = (w[c].to_numpy(dtype=float) for c in ("flops", "bytes", "dur_ns"))
    with np.errstate(invalid="ignore"):
        usable = ~np.isnan(flops_all) & (bytes_all > 0) & (dur_all > 0) & ~categorical.Values(w["bound"]).eq("interconnect")
    out: dict[str, Any] = {"points": [], "roofs": None, "reason": None}
    if spec is None:
        out["reason"] = "device peaks unknown: no roofline"
        return out
    if not usable.any():
        out["reason"] = "no kernel in this phase has a known cost"
        return out
    pricing_all = w["pricing_op"].to_numpy()
    model_all = categorical.Values(w["cost_source"]).eq("model")
    shaped_all = (pricing_all >= 0) & ~model_all if ops is not None else np.zeros(len(w), bool)
    # The rows placed, and only the columns the points need: a phase of a serving run has
    # millions of units, and a sub-frame of all forty columns would be copied just to be read.
    rows_in = np.flatnonzero(usable & (shaped_all | model_all))
    shaped_rows, model_rows = shaped_all[rows_in], model_all[rows_in]
    p = np.maximum(pricing_all[rows_in], 0)
    has_ops = ops is not None and len(ops) > 0
    comp_codes, comp_uniques = pd.factorize(w["component"].to_numpy(dtype=object)[rows_in], use_na_sentinel=False)
    comp_label = np.array(["model: " + str(c if c is not None else "").replace("_", " ") for c in comp_uniques],
                          dtype=object)
    if has_ops:
        op_name_of = categorical.category_strings(ops["name"])
        op_code = categorical.codes(ops["name"])[p]
        dims_code = pd.factorize(ops["input_dims"].to_numpy(dtype=object)[p], use_na_sentinel=False)[0]
    else:
        op_name_of, op_code, dims_code = np.array([""], dtype=object), np.zeros(len(p), np.int64), np.zeros(len(p), np.int64)
    # Group keys: a shape-priced unit by its op's name and input dims, a model-priced one by
    # its component; each with category, dtype and unit. Aggregated with factorised codes
    # (np.bincount), not a pandas groupby per key: this runs for every phase of every report.
    # Names and shapes are keyed by integer codes (a model component's negative), and each
    # key is factorised in row order, as the strings themselves would be.
    label_key = np.where(model_rows, -1 - comp_codes, op_code)
    signature = np.where(model_rows, -1 - comp_codes, dims_code)
    text_cols = [w[c].to_numpy(dtype=object)[rows_in] for c in ("category", "dtype", "unit")]
    gid = np.zeros(len(rows_in), dtype=np.int64)
    for col in [label_key, signature, *text_cols]:
        codes, uniques = pd.factorize(col, use_na_sentinel=False)
        gid = gid * (len(uniques) + 1) + codes
    groups, first, inverse = np.unique(gid, return_index=True, return_inverse=True)
    sums = {c: np.bincount(inverse, weights=v[rows_in], minlength=len(groups))
            for c, v in (("flops", flops_all), ("bytes", bytes_all), ("dur_ns", dur_all))}
    calls = np.bincount(inverse, minlength=len(groups))
    order = np.argsort(-sums["dur_ns"], kind="stable")[:ROOFLINE_POINTS]
    est_all = w["estimate"].to_numpy(dtype=object) if "estimate" in w else None
    any_est = est_all is not None and bool(pd.notna(est_all[rows_in]).any())
    rows = []
    for g in order:
        i = first[g]
        r = int(rows_in[i])
        label = comp_label[comp_codes[i]] if model_rows[i] else op_name_of[op_code[i]] if has_ops else ""
        rows.append(((label, None, text_cols[0][i], text_cols[1][i], text_cols[2][i]),
                     {"flops": sums["flops"][g], "bytes": sums["bytes"][g], "dur_ns": sums["dur_ns"][g],
                      "calls": calls[g], "kernel": str(w["name"].iat[r]),
                      "estimate": combined_estimate(est_all[rows_in[inverse == g]], bytes_all[rows_in[inverse == g]])
                      if any_est else None,
                      "source": w["cost_source"].iat[r],
                      "op": int(pricing_all[r]) if shaped_rows[i] else -1}))
    for (lab, _, cat, dtype, unit), r in rows:
        secs = r["dur_ns"] / 1e9
        used = spec.runs_as(dtype, unit)  # as the units' bounds: a dtype without a peak runs at the next wider one
        peak = spec.peak_flops(used, unit) if used else None
        bw = spec.peak_bandwidth
        roof = min(peak, (r["flops"] / r["bytes"]) * bw) if peak and bw else None
        fraction = max(r["flops"] / peak, r["bytes"] / bw) / secs if peak and bw else None
        bound = ("compute" if r["flops"] / peak >= r["bytes"] / bw else "memory") if peak and bw else "unknown"
        out["points"].append(
            {
                "label": str(lab),
                "kernel": short_name(str(r["kernel"])),
                "shapes": _shape_text(ops, int(r["op"])) if ops is not None and r["op"] >= 0 else None,
                "category": str(cat),
                "dtype": str(dtype),
                "unit": str(unit),
                "calls": int(r["calls"]),
                "time_ms": r["dur_ns"] / 1e6,
                "intensity": r["flops"] / r["bytes"],
                "achieved_flops": r["flops"] / secs,
                "roof_flops": roof,
                "peak_note": spec.runs_as_note(dtype, unit),
                "cost_source": str(r["source"]),
                # What the point's bytes are: "upper"/"lower" bound, the model's "estimate", or null.
                "estimate": r["estimate"],
                "bound": bound,
                "limiter": str(limiter([bound], [fraction if fraction is not None else np.nan])[0]),
                # Same definition as per kernel: time the roofline allows over time taken.
                # Above the roof is not a fact (the cost overstates the work): no fraction then.
                "roof_fraction": fraction if fraction is not None and fraction <= 1.0 + ROOF_TOLERANCE else None,
            }
        )
    dtypes = {(spec.runs_as(p["dtype"], p["unit"]) or p["dtype"], p["unit"]) for p in out["points"]}
    out["roofs"] = {
        "bandwidth": spec.peak_bandwidth,
        "achievable_bandwidth": spec.achievable_bandwidth,
        "compute": [
            {"dtype": d, "unit": u, "peak_flops": spec.peak_flops(d, u), "achievable_flops": spec.achievable_flops(d, u)}
            for d, u in sorted(dtypes)
            if spec.peak_flops(d, u)
        ],
    }
    return out


# --- provenance ----------------------------------------------------------------------

FORMULAS = {
    "step_duration": "from the step's CPU start (or the end of the previous step's work, when the GPU runs behind) to the later of its CPU end and its last GPU work's end",
    "ttft": "duration of the first prefill step: its CPU start to the end of the GPU work that produced the first token (request-level runs only)",
    "tpot": "durations of the decode steps (mean and percentiles over steps; request-level runs only)",
    "prefill_step_time": "durations of the steps holding prefill work, mixed steps included whole",
    "decode_step_time": "durations of the steps holding decode work, mixed steps included whole: the inter-token latency a decoding request sees",
    "mixed_split": "a mixed step's kernel time: attention by each side's query-key pairs, other work by each side's tokens; its busy, idle and duration shared in that proportion",
    "gpu_busy": "union of the step's kernel, memcpy and memset intervals, all streams merged",
    "gpu_idle": "the step's duration minus its busy time: the lead-in before its first GPU work, the gaps between its kernels and the tail after its last (duration = busy + idle)",
    "launch_overhead": "GPU idle inside the decode steps caused by kernel launches (idle cause launch)",
    "idle_by_cause": "each GPU-idle gap of a step (lead-in and tail included; the causes sum to its idle time) split by what the thread launching the next kernel did meanwhile: sync (blocked in a synchronising call), launch (issuing launches: launch calls, the launching op, pauses between launches under 50 us, the first 10 us after the issue), host (other recorded host work for longer), wait (kernel issued, GPU waited on another stream, an event or the device), unattributed",
    "bound": "compute-bound when FLOPs / peak FLOP/s >= bytes / peak bandwidth for the op's dtype and unit (matrix or vector), else memory-bound",
    "roof_fraction": "max(FLOPs / peak FLOP/s, bytes / peak bandwidth) / kernel duration",
    "limiter": f"the bound (compute, memory, interconnect) when the kernel reaches >= {LATENCY_ROOF:.0%} of that roof; latency below it (grid too small to fill the GPU, occupancy, launch or dependency latency); unknown without a roof fraction",
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


def _provenance(trace: Trace, seg, lat, match: SpecMatch, phases, work) -> dict[str, Any]:
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
            "model-undescribed": f"a model component needs > {ABOVE_ROOF:.0%} of its kernels' time at the roofline",
        },
    }


# --- for merging windows (analysis.merge) ----------------------------------------------


def phase_figures(work: pd.DataFrame, lat, spec, withheld: str | None = None) -> dict[str, dict[str, Any]]:
    """Per phase, its figures from (weighted) units of work and the latency aggregates, as
    ``assemble`` computes them (idle causes aside): ``analysis.merge`` gives it the windows'
    units summed by kind, whose sums are the whole run's."""
    by_phase = {p: _phase_work(work, p) for p in PHASE_ORDER if p in lat.phases}
    phases = {p: _phase(p, w, lat.phases[p], spec) for p, w in by_phase.items()}
    _withhold(phases, by_phase, withheld)
    return phases


def metrics_of(lat, phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's headline metrics from its latency figures and phases (``assemble``'s)."""
    return _metrics(lat, phases)
