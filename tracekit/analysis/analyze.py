"""The pipeline: Trace -> steps -> pricing -> waiting -> findings -> one ``Analysis``.

Everything a report shows is computed here or in the stages it calls; renderers
only read the result. This module runs the stages in order (``measure`` then ``assemble``);
what a trace is priced with is ``analysis.workload``, a phase's figures ``analysis.figures``,
and the report's tables ``analysis.tables``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit import __version__
from tracekit.analysis import books, categorical, measurement, truncation
from tracekit.analysis.figures import PHASE_ORDER, figures_of, metrics_of, provenance_of, unprofiled, withhold
from tracekit.analysis.findings import rules as find
from tracekit.analysis.model import Analysis
from tracekit.analysis.pricing import stated_weights
from tracekit.analysis.pricing.attribution import attribute
from tracekit.analysis.pricing.ceilings import check_ceilings
from tracekit.analysis.pricing.roofline import BOUNDS, above_roof, combined_estimate
from tracekit.analysis.ranks import rank_view
from tracekit.analysis.replay.replay import StepReplay
from tracekit.analysis.replay.view import replay_view
from tracekit.analysis.steps.latency import latency, step_weights
from tracekit.analysis.steps.mixed import passenger_units, passenger_view, split_mixed
from tracekit.analysis.steps.segment import DECODE, Segmentation, segment
from tracekit.analysis.steps.timeline import add_critical_path, timelines
from tracekit.analysis.tables import TOP_KERNELS, kernel_table, overall_of, phase_work, roofline_points, short_name
from tracekit.analysis.waiting.idle import IdleCauses, idle_causes
from tracekit.analysis.workload import (
    choose_model,
    choose_tp,
    describe_device,
    describe_model,
    describe_workload,
    device_spec,
)
from tracekit.models import ModelSpec
from tracekit.models.config import with_weights
from tracekit.specs import SpecMatch
from tracekit.trace.model import Trace


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
    # Why the measured ceilings were replaced (analysis.pricing.ceilings), when they were.
    ceilings_note: str | None = None


def analyze(
    trace: Trace,
    *,
    gpu: str | None = None,
    spec_file: str | None = None,
    cpu_matmul_flops: float | None = None,
    cpu_bandwidth: float | None = None,
    capture: Trace | Sequence[Trace] | None = None,
    model: ModelSpec | str | None = None,
    tp: int | None = None,
    costs: str = "auto",
    weights: str | None = None,
    model_force: bool = False,
    stated: dict | None = None,
) -> Analysis:
    """Analyse a trace. ``gpu``/``spec_file`` override the device lookup; the two
    ``cpu_*`` peaks (FLOP/s, bytes/s) stand in for a CPU trace's missing calibration;
    ``capture`` is the graph-capture trace that describes graph-replayed kernels, or several
    (a capture folder's files, one per graph size: each replay is priced from its own size's).

    ``model`` (a ``ModelSpec``, or a registry name / config.json / checkpoint folder, with
    ``weights`` overriding its stored precision) prices kernels the shapes cannot, at
    tensor-parallel degree ``tp`` (default: distributedInfo's world size); ``costs`` is
    ``auto`` (shapes where recorded, the model elsewhere), ``shapes`` or ``model``. A run
    tracekit collected is priced by the model config its sidecar recorded. A model the trace
    contradicts (another number of attention layers) prices nothing, with the reason, unless
    ``model_force``. ``stated`` gives the tokens and batch of each phase's steps where the user
    knows them (``{"tokens": {"prefill": 1049}, "batch": {"decode": 1}}``, phase ``"all"`` for every step)."""
    parts, match = measure(
        trace,
        gpu=gpu,
        spec_file=spec_file,
        cpu_matmul_flops=cpu_matmul_flops,
        cpu_bandwidth=cpu_bandwidth,
        capture=capture,
        model=model,
        tp=tp,
        costs=costs,
        weights=weights,
        model_force=model_force,
        stated=stated,
    )
    return assemble(trace, parts, match)


def measure(
    trace: Trace,
    *,
    gpu=None,
    spec_file=None,
    cpu_matmul_flops=None,
    cpu_bandwidth=None,
    capture=None,
    model=None,
    tp=None,
    costs="auto",
    weights=None,
    model_force=False,
    stated=None,
) -> tuple[Parts, SpecMatch]:
    """Segment, price and split the trace's work against its device (``analyze``'s options)."""
    seg = segment(trace, stated=stated)
    match = device_spec(trace, gpu, spec_file, cpu_matmul_flops, cpu_bandwidth)
    spec_model, model_how = choose_model(trace, model, weights)
    said = None
    if spec_model is not None and not spec_model.precision_stated:
        # A config silent on quantisation, and GEMM kernels that name narrow weights: a quantised
        # copy of the model ran, so its weights are priced as the kernels state (said in the view).
        said = stated_weights.stated(seg.work)
        if said is not None:
            spec_model = with_weights(spec_model, said.precision, said.sentence(spec_model.dtype))
    tp_value, tp_how = choose_tp(trace, tp)
    attr = attribute(
        trace, seg, match, capture=capture, model=spec_model, tp=tp_value, policy=costs, model_force=model_force
    )
    checked = check_ceilings(seg.work, attr.table, match, (trace.sidecar or {}).get("calibration"))
    ceilings_note = None
    if checked is not None:  # the measured ceilings were wrong: price again against corrected ones
        match, ceilings_note = checked
        attr = attribute(
            trace, seg, match, capture=capture, model=spec_model, tp=tp_value, policy=costs, model_force=model_force
        )
    work = pd.concat([seg.work.reset_index(drop=True), attr.table.reset_index(drop=True)], axis=1)
    costed = attr.model_costs
    share = costed.prefill_share if costed is not None and not costed.withheld else None
    split = split_mixed(seg.steps, work, work["category"].to_numpy(), share, attr.alone)
    work["prefill_share"] = split.prefill_share
    model_view = describe_model(spec_model, model_how, tp_value, tp_how, costs, attr.model_costs, model)
    if model_view is not None:
        model_view["forced"] = bool(model_force)
        if said is not None:
            model_view["weights_from_kernels"] = said.precision
    return Parts(
        seg, work, split, idle_causes(trace, seg), attr.ops, model_view, attr.capture_note, ceilings_note
    ), match


def assemble(
    trace: Trace, parts: Parts, match: SpecMatch, *, device_name: str | None = None, with_timelines: bool = True
) -> Analysis:
    """Every figure, table and finding of ``parts`` priced against ``match``'s spec row.
    ``device_name`` replaces the trace's device (a projection onto another GPU)."""
    seg, work, split, idle = parts.seg, parts.work, parts.split, parts.idle
    # Units of the steps whose decode side is a passenger of their prefill chunk (steps.mixed),
    # by this split: a projection's retimed split may decide otherwise than the measured one.
    work["passenger"] = passenger_units(split, work["step"].to_numpy())
    launch_ns = idle.by_step[:, 1] if len(seg.steps) else None
    lat = latency(seg, split.step_prefill_fraction, launch_ns)
    spec = match.spec
    by_phase = {p: phase_work(work, p) for p in PHASE_ORDER if p in lat.phases}
    weights = step_weights(seg.steps, split.step_prefill_fraction)
    passengers = passenger_view(
        seg.steps.assign(split=[split.by_step.get(i) for i in range(len(seg.steps))]), weights[DECODE]
    )
    phases = {
        p: figures_of(p, w, lat.phases[p], spec, passengers if p == DECODE else None) for p, w in by_phase.items()
    }
    for p, v in phases.items():
        v["idle_by_cause"] = idle.phase_causes(weights[p])
        v["idle_top"] = idle.top(weights[p], v["time_ms"], work)
    steps = _steps_with_attribution(seg.steps, work, spec, split.by_step, idle)
    overall = overall_of(work, spec)
    # The identities every analysis satisfies (analysis.books); a violation is a tracekit bug.
    outside_ms = float(work["dur_ns"].to_numpy()[work["step"].to_numpy() < 0].sum()) / 1e6
    top_kernels = {p: kernel_table(w, TOP_KERNELS, spec) for p, w in by_phase.items()}
    roofline = {p: roofline_points(w, spec, phases[p], parts.ops) for p, w in by_phase.items()}
    books_notes = books.enforce(
        books.check(seg.steps, idle.by_step, weights, phases, split.by_step, seg.device_type)
        + books.check_figures(phases, steps, overall, outside_ms, seg.device_type)
        + books.check_roofs(phases, steps, top_kernels, roofline, spec)
    )
    withhold(phases, by_phase, (parts.model_view or {}).get("withheld"))
    metrics = metrics_of(lat, phases)
    metrics["unprofiled"] = unprofiled(trace, metrics)
    device = describe_device(trace, seg.device_type, match)
    if device_name is not None:
        device["name"] = device_name
    provenance = provenance_of(trace, seg, lat, match, phases, work)
    if books_notes:
        provenance["notes"] = provenance["notes"] + books_notes
    if parts.model_view is not None and parts.model_view.get("withheld"):
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
        workload=describe_workload(trace),
        run_kind=seg.run_kind,
        phase_source=seg.source,
        steps=steps,
        work=work,
        phases=phases,
        metrics=metrics,
        findings=[],
        provenance=provenance,
        top_kernels=top_kernels,
        roofline=roofline,
        overall=overall,
        model=parts.model_view,
        timelines=timelines(trace, seg.steps, work, idle, lambda n: short_name(n, 70), seg.device_type)
        if with_timelines
        else [],
        truncated=truncation.view(trace),
        measurement=measurement.quality(trace.sidecar, parts.ceilings_note),
    )
    # Ranks are measured, never projected: a projection onto another GPU has none.
    ranks = rank_view(trace, seg, work["category"].to_numpy(dtype=object)) if device_name is None else None
    if ranks:
        analysis.ranks, analysis.rank_summary = ranks["ranks"], ranks["summary"]
    if device_name is None and len(seg.steps):
        # The steps replayed on their own dependencies (analysis.replay): the findings' time at stake
        # is what their what-ifs save there. A projection replays in tracekit.whatif instead.
        analysis.replayer = StepReplay(trace, seg, work, split.step_prefill_fraction)
        add_critical_path(analysis.timelines, seg.steps, analysis.replayer.critical_path)
    analysis.findings = find.findings(analysis)
    if analysis.replayer is not None:
        analysis.replay = replay_view(analysis.replayer, analysis.findings)
    return analysis


def _steps_with_attribution(
    steps: pd.DataFrame, work: pd.DataFrame, spec, split: dict | None = None, idle=None
) -> pd.DataFrame:
    """The steps table plus, per step, kernel time by bound, FLOPs, bytes and MBU, idle time by
    cause, and the prefill/decode split of mixed steps."""
    if not len(steps):
        # No rows, but the columns of a run with steps: a merge of windows stacks the windows'
        # tables, and a window may hold no step (a CPU-only stretch cut at idle instants).
        none = {
            c: pd.Series(dtype="float64")
            for c in [f"{b}_ms" for b in BOUNDS] + ["unknown_cost_ms", "flops", "bytes", "mbu"]
        }
        return steps.assign(
            **none,
            mbu_estimate=pd.Series(dtype=object),
            split=pd.Series(dtype=object),
            idle_by_cause=pd.Series(dtype=object),
            launch_gap_ns=pd.Series(dtype="int64"),
            category_ns=pd.Series(dtype=object),
        )
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
    mbu = np.where((secs > 0) & bool(bw), out["bytes"].to_numpy() / np.where(secs > 0, secs, 1) / (bw or 1), np.nan)
    # Above the bandwidth roof is not a fact (bytes counted twice, or served from caches): none shown.
    out["mbu"] = np.where(above_roof(mbu), np.nan, mbu)
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
    # Kernel time by category per step, ns (not in the JSON): the step-level books the findings
    # read, which a merge of windows carries with the steps (its work table is summed, stepless).
    per_cat = pd.DataFrame({"step": step, "category": work["category"].to_numpy(dtype=object)[sel], "dur": dur})
    per_cat = per_cat.groupby(["step", "category"])["dur"].sum()
    by_step: dict[int, dict[str, float]] = {}
    for (i, c), v in per_cat.items():
        by_step.setdefault(int(i), {})[str(c)] = float(v)
    out["category_ns"] = [by_step.get(int(i), {}) for i in at]
    out["split"] = [(split or {}).get(int(i)) for i in out["step"]]
    out["idle_by_cause"] = [idle.step_causes(i) if idle is not None else None for i in range(len(out))]
    out["launch_gap_ns"] = idle.by_step[:, 1] if idle is not None else 0
    return out
