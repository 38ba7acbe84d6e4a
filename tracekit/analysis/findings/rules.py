"""Findings: plain sentences computed from an ``Analysis``, each from a documented threshold.

| id                    | fires when                                                         |
|-----------------------|--------------------------------------------------------------------|
| training-run          | the trace is a training run (backward ops / optimizer steps)        |
| no-steps              | no inference step was found                                        |
| ceilings-implausible  | the run's kernels beat the measured ceilings (pricing.ceilings)    |
| device-unknown        | the device has no spec row: the roofline is absent                  |
| (advice)              | host-sync, launch-bound, host-bound, gpu-waits, decode-overhead-bound, fuse-elementwise, decode-batch, fp8-weights: see analysis.findings.advice |
| phase-bound           | per phase, the bound holding the most kernel time (always, one each)|
| prefill-gemm-efficiency | prefill GEMMs with known cost: time-weighted fraction of roof     |
| decode-attention-share | attention >= ATTENTION_SHARE of decode kernel time                 |
| unknown-cost          | a phase has >= UNKNOWN_COST_SHARE of kernel time with unknown cost  |
| tpot-growth           | decode steps' last quarter is >= TPOT_GROWTH slower than the first (medians); names the work or idle that grew |
| outside-steps         | >= OUTSIDE_SHARE of the trace's work ran outside any step           |
| graph-replay          | a step was replayed from a CUDA/HIP graph                           |
| cost-sources          | the model priced >= COST_SOURCES_SHARE of kernel time: each source's share |
| model-precision       | kernel names show another GEMM precision than the model's weights   |
| model-mismatch        | the steps' attention layers do not fit the model's (its figures are withheld without --model-force) |
| peak-fallback         | kernels of a dtype the device has no peak for, priced at the next wider one it has |
| experts-concentrated  | routed experts' uniform-routing bytes exceed the bandwidth roof     |
| attention-keys-unknown | decode attention of keys the trace does not state, capped at the bandwidth roof |
| attention-bound-unknown | decode attention of keys the trace does not state, whose intensity is not below the ridge |
| cache-resident        | just-written activations that fit in the L2 cache ran faster than the DRAM roof |
| model-undescribed     | a model component needs more than the roofline allows in its time   |
| rank-straggler        | the other ranks lose >= SKEW_SHARE of their time span waiting inside collectives for one rank (analysis.ranks) |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit import formatting as fmt
from tracekit.analysis import measurement
from tracekit.analysis.findings.advice import advice
from tracekit.analysis.model import Finding
from tracekit.formatting import si

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis

ATTENTION_SHARE = 0.25
UNKNOWN_COST_SHARE = 0.20
TPOT_GROWTH = 0.20
OUTSIDE_SHARE = 0.10
COST_SOURCES_SHARE = 0.01
SKEW_SHARE = 0.05

_PHASE_TEXT = {"unknown": "unclassified steps'", "mixed": "mixed steps'"}


def findings(a: Analysis) -> list[Finding]:
    out: list[Finding] = []
    m = a.measurement or {}
    if m.get("notes"):
        # First: every figure below rests on these measurements (analysis.measurement).
        out.append(Finding("measurement-unreliable", " ".join(m["notes"]), "warning"))
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
    if a.provenance.get("ceilings"):
        out.append(Finding("ceilings-implausible", a.provenance["ceilings"] + ".", "warning"))
    if a.device.get("spec") is None:
        out.append(
            Finding(
                "device-unknown",
                f"The roofline is absent: {a.device.get('reason') or 'the device has no peak specs'}.",
                "warning",
            )
        )
    out += _overlap_findings(a)
    dec = a.phases.get("decode")
    cpu = a.device.get("type") == "cpu"
    unit = "CPU" if cpu else "GPU"
    # What the GPU waits for and what to try, largest time at stake first (analysis.findings.advice).
    out += advice(a)
    for phase, p in a.phases.items():
        kernel = p["kernel_ms"]
        if not kernel:
            continue
        # The decode parts of mixed steps bound by their prefill chunks have no bound of their
        # own (analysis.steps.mixed): the phase's bound is that of the rest of its kernel time.
        riding = p.get("passenger") or {}
        own = {
            b: p["by_bound"][b] - (riding.get("by_bound") or {}).get(b, 0.0)
            for b in ("compute", "memory", "interconnect", "unknown")
        }
        kernel -= riding.get("kernel_ms") or 0.0
        label = {"unknown": "Unclassified steps", "mixed": "Mixed steps"}.get(phase, phase.capitalize())
        if riding.get("whole_phase"):
            out.append(
                Finding(
                    "phase-bound",
                    f"{label}: no bound of its own: its kernel time is the decode side of "
                    f"{riding['mixed_steps']} mixed step{'s' if riding['mixed_steps'] != 1 else ''} bound by "
                    f"{'its prefill chunk' if riding['mixed_steps'] == 1 else 'their prefill chunks'}, "
                    f"whose decode tokens added {riding['marginal_ms']:.3g} ms.",
                    "info",
                    phase,
                )
            )
            continue
        bound, ms = max(own.items(), key=lambda x: x[1])
        what = {
            "compute": "compute-bound",
            "memory": "memory-bound",
            "interconnect": "interconnect-bound",
            "unknown": "of unknown bound",
        }[bound]
        text = f"{label}: {ms / kernel:.0%} of kernel time is {what}"
        if riding:
            text += (
                f" (besides the decode side of {riding['mixed_steps']} mixed step"
                f"{'s' if riding['mixed_steps'] != 1 else ''} bound by "
                f"{'its prefill chunk' if riding['mixed_steps'] == 1 else 'their prefill chunks'})"
            )
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
                f"Prefill GEMMs reach {frac:.0%} of the roofline ({a.device.get('spec')}, {a.device.get('peak_basis')})"
                + ("; unreliable: against ceilings measured unreliably" if m.get("ceilings_reliable") is False else "")
                + ".",
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
            hint = ""
            if a.model is None and a.device.get("type") == "gpu":
                hint = (
                    "; pass --model NAME (tracekit models lists the architectures), a config.json or a "
                    "checkpoint folder to price them from the model"
                )
            out.append(
                Finding(
                    "unknown-cost",
                    f"{share:.0%} of {_PHASE_TEXT.get(phase, phase)} kernel time has unknown cost: {why}{hint}.",
                    "warning",
                    phase,
                )
            )
    out += _model_findings(a)
    out += _peak_findings(a)
    out += _rank_findings(a)
    growth = a.metrics.get("tpot_growth")
    if growth is not None and growth >= TPOT_GROWTH:
        out.append(
            Finding(
                "tpot-growth",
                f"Decode steps slow down {growth:.0%} from the first to the last quarter of the run "
                f"{_growth_cause(a)}.",
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
        replayed = a.work[a.work["graph"]]
        by_model = float(replayed.loc[replayed["cost_source"] == "model", "dur_ns"].sum()) if len(replayed) else 0.0
        if captured:
            text = f"Some steps replay a CUDA/HIP graph; {captured}."
        elif a.model is not None and a.model.get("withheld"):
            text = (
                "Some steps replay a CUDA/HIP graph: the ops and shapes behind a replay are not in this trace, and "
                f"the costs {a.model['name']} would give them are withheld (the trace does not fit it)."
            )
        elif by_model and by_model >= 0.5 * float(replayed["dur_ns"].sum()):
            text = (
                f"Some steps replay a CUDA/HIP graph: the model prices {by_model / replayed['dur_ns'].sum():.0%} "
                "of the replayed kernel time (the ops and shapes behind a replay are not in the trace)."
            )
        else:
            text = (
                "Some steps replay a CUDA/HIP graph: the ops and shapes behind a replay are not in this trace; "
                "pass --model NAME to price the replayed kernels from the architecture, or the graph-capture "
                "trace (tracekit report --graph-capture TRACE, or the folder of capture traces)."
            )
        out.append(Finding("graph-replay", text, "info"))
    if a.provenance.get("richer_trace"):
        # What the engine could have written: the one change that makes estimated costs exact.
        out.append(Finding("richer-trace", a.provenance["richer_trace"] + ".", "info"))
    return measurement.mark(out, a.measurement)


def _overlap_findings(a: Analysis) -> list[Finding]:
    """Steps whose window held other work (steps.table: ``unrecorded_ns``, ``next_ns``): which,
    and how much, so that a step measured from its own work is not read as the whole span."""
    out = []
    steps = a.steps
    for col, fid, what in (
        (
            "unrecorded_ns",
            "steps-waited-on-unrecorded-work",
            "waited on work the trace did not record (the GPU was busy with work queued before the profile began, "
            "such as an earlier step of a pipelined engine, or with another process's)",
        ),
        ("next_ns", "steps-overlapped-by-next", "held the next step's work, running alone, before ending"),
    ):
        if not len(steps) or col not in steps:
            continue
        ns = steps[col].to_numpy()
        rows = np.flatnonzero(ns > 0)
        if not len(rows):
            continue
        top = int(rows[np.argmax(ns[rows])])
        # One wording for any number of steps: a run recorded twice reads the same, its counts doubled.
        out.append(
            Finding(
                fid,
                f"Steps {what}: {fmt.ms(ns[rows].sum() / 1e6)} in {len(rows):,} of {len(steps):,} "
                f"steps (the most: {fmt.ms(ns[top] / 1e6)}, step {int(steps['step'].iat[top])}). "
                "That time is none of their duration, idle, tokens/s, MFU or MBU: each step is "
                "measured from the point its own work could start.",
            )
        )
    return out


def _model_findings(a: Analysis) -> list[Finding]:
    """What the model path found: where costs came from, and where the model does not fit."""
    m = a.model
    if not m:
        return []
    out = []
    w = a.work
    total = float(w["dur_ns"].sum())
    dur = w["dur_ns"].to_numpy(dtype=float)
    source = w["cost_source"].to_numpy()
    by = (
        pd.Series({s: float(dur[source == s].sum()) / total for s in ("shapes", "capture", "model", "none")})
        if total
        else pd.Series(dtype=float)
    )
    if total and by.get("model", 0.0) >= COST_SOURCES_SHARE:
        label = {
            "shapes": "recorded shapes",
            "capture": "the graph-capture trace",
            "model": "the model",
            "none": "nothing (unknown cost)",
        }
        parts = ", ".join(
            f"{v:.0%} by {label.get(k, k)}" for k, v in by.sort_values(ascending=False).items() if v >= 0.005
        )
        out.append(
            Finding(
                "cost-sources",
                f"Kernel time was priced {parts}; the model is {m['name']} "
                f"(TP {m['tp']}: {m['tp_source']}; weights: {m['precision_source']}).",
                "info",
            )
        )
    if m.get("weights_from_kernels"):
        out.append(
            Finding(
                "model-precision",
                f"{m['name']}'s config states no quantisation, but the GEMM kernels run {m['weights_from_kernels']} "
                f"weights, so its linear layers are priced so ({m['precision_source']}).",
                "info",
            )
        )
    for comp, c in (m.get("dtype_conflicts") or {}).items():
        out.append(
            Finding(
                "model-precision",
                f"Kernel names show {c['kernels']} GEMMs ({comp.replace('_', ' ')}), but {m['name']}'s weights run at "
                f"{c['model']}: if the checkpoint is quantised, pass --weights (e.g. --weights nvfp4) or its own "
                "config.json, or the bytes and bounds of those kernels are wrong.",
                "warning",
            )
        )
    if m.get("layer_check"):
        if m.get("withheld"):
            what = (
                "the figures it would price (FLOPs, bytes, bounds, MFU, MBU) are withheld; pass the model that "
                "ran, or --model-force to price by this one anyway"
            )
        elif m.get("forced"):
            what = "--model-force: the figures are priced by it anyway, and may be wrong"
        else:
            what = "check --model"
        out.append(
            Finding("model-mismatch", f"The trace may not be {m['name']}: {m['layer_check']}; {what}.", "warning")
        )
    check = w["model_check"] if "model_check" in w else pd.Series(None, index=w.index, dtype=object)
    # Capped units, by the component they are about: each has its own reason (pricing.above_roof).
    capped = w[(check == "capped").to_numpy()]
    comp = capped["component"].astype(str).to_numpy() if len(capped) else np.array([], dtype=object)
    experts, attention = capped[comp == "experts"], capped[comp == "attention"]
    if len(experts):
        out.append(
            Finding(
                "experts-concentrated",
                f"Routed experts ({experts['dur_ns'].sum() / 1e6:.3g} ms) ran faster than reading the weights of the "
                "experts uniform routing would touch allows at peak bandwidth: the step's tokens concentrated on fewer "
                "experts. Their bytes are capped at the roof and their fraction of the roof is not shown.",
                "info",
            )
        )
    if len(attention):
        out.append(
            Finding(
                "attention-keys-unknown",
                f"Decode attention ({attention['dur_ns'].sum() / 1e6:.3g} ms): the keys each request attends to are not "
                "in the trace, so the KV cache it reads is not known. Its intensity does not depend on the keys and is "
                "below the ridge, so it is memory-bound; its bytes are capped at what peak bandwidth moves in its "
                "kernels' time (an upper bound) and its fraction of the roof is not shown.",
                "info",
            )
        )
    cached = w[(check == "cached").to_numpy()]
    if len(cached):
        comps = sorted(set(cached["component"].dropna().astype(str)))
        out.append(
            Finding(
                "cache-resident",
                f"The {', '.join(c.replace('_', ' ') for c in comps)} kernels ({cached['dur_ns'].sum() / 1e6:.3g} ms) ran "
                f"faster than the DRAM bandwidth roof allows for the bytes the model gives them: each moves at most "
                f"{si(float(cached['bytes'].max()), 'B')}, written by the kernels just before it, which "
                f"{a.device.get('spec')}'s {a.device.get('l2_cache_mb'):g} MB L2 cache holds and serves faster than DRAM. "
                "Their cost is the model's; their fraction of the DRAM roof is not shown.",
                "info",
            )
        )
    unkeyed = w[(check == "keys_unknown").to_numpy()]
    if len(unkeyed):
        out.append(
            Finding(
                "attention-bound-unknown",
                f"Decode attention ({unkeyed['dur_ns'].sum() / 1e6:.3g} ms): the keys each request attends to are not in "
                "the trace, and its intensity at any key count is not below the ridge, so neither its cost nor its bound "
                "is known.",
                "info",
            )
        )
    undescribed = w[(check == "undescribed").to_numpy()]
    if len(undescribed):
        comps = sorted(set(undescribed["component"].dropna().astype(str)))
        out.append(
            Finding(
                "model-undescribed",
                f"The model's work for {', '.join(c.replace('_', ' ') for c in comps)} would take longer at the roofline "
                f"than those kernels ran ({undescribed['dur_ns'].sum() / 1e6:.3g} ms): the model, --tp or --weights does "
                "not describe them, so their cost is left unknown.",
                "warning",
            )
        )
    return out


def _peak_findings(a: Analysis) -> list[Finding]:
    """Kernels priced at another dtype's peak than their own (GpuSpec.runs_as): which, and how much."""
    if "peak_note" not in a.work or not len(a.work):
        return []
    note = a.work["peak_note"]
    priced = a.work[note.notna().to_numpy()]
    if not len(priced):
        return []
    by = priced.groupby(priced["peak_note"].astype(str))["dur_ns"].sum().sort_values(ascending=False)
    return [
        Finding(
            "peak-fallback",
            f"{ms / 1e6:.3g} ms of kernel time is {text}: its bound and roof fraction are against that peak.",
            "info",
        )
        for text, ms in by.items()
    ]


def _rank_findings(a: Analysis) -> list[Finding]:
    """The straggler of a multi-rank run, when the others lose a material share waiting for it."""
    s = a.rank_summary or {}
    share = s.get("lost_share")
    if s.get("straggler") is None or share is None or share < SKEW_SHARE:
        return []
    others = len([r for r in a.ranks if r.get("collective_wait_ms") is not None]) - 1
    who = "the other rank waits" if others == 1 else f"the other {others} ranks wait"
    of_coll = s.get("lost_share_of_collective")
    coll = f", {of_coll:.0%} of their collective time" if of_coll is not None else ""
    return [
        Finding(
            "rank-straggler",
            f"Rank {s['straggler']} is the straggler: {who} {s['lost_ms']:.3g} ms for it inside collectives "
            f"({share:.0%} of their time span{coll}; matched {s['wait_method']}). Look at what rank "
            f"{s['straggler']} does before its collectives (extra work, a slower device, host stalls).",
            "warning",
        )
    ]


def _growth_cause(a: Analysis) -> str:
    """Where a decode slowdown lives: per kind of kernel work and idle time, how much a step's
    median grows between the same quarters. The trend alone does not say it is the KV cache:
    attention reads the growing cache, but a stall, a growing batch or a cache copy grow a step
    too, so the sentence names what grew and credits the cache only where attention leads."""
    from tracekit.analysis.steps.latency import ENGINE, decode_steps, quarters

    rows = decode_steps(a.steps, a.metrics.get("latency_semantics") == ENGINE)
    numbers = a.steps["step"].to_numpy()[rows]
    dur = a.steps["duration_ns"].to_numpy()[rows] / 1e6
    first, last = quarters(dur)
    grew_ms = last.median - first.median
    # Per step from the steps table's own books (a merged run's work table has no steps).
    per_step = pd.DataFrame(list(a.steps["category_ns"].to_numpy()[rows]), index=numbers).fillna(0.0) / 1e6
    per_step["idle time"] = a.steps["gpu_idle_ns"].to_numpy()[rows] / 1e6
    moved = {
        c: float(np.median(per_step[c].to_numpy()[last.rows]) - np.median(per_step[c].to_numpy()[first.rows]))
        for c in per_step.columns
    }
    # What grew by at least a tenth of the step's growth, largest first (medians need not add up).
    grew = sorted(((d, c) for c, d in moved.items() if d >= 0.1 * grew_ms), reverse=True)[:3]
    head = f"(median step from {first.median:.3g} to {last.median:.3g} ms)"
    if not grew:
        return f"{head}; no one kind of kernel work, nor idle time, grows with it"
    parts = [f"{c} (+{d:.3g} ms)" for d, c in grew]
    where = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    cache = ": attention reads the growing KV cache" if grew[0][1] == "attention" else ""
    return f"{head}; per step the growth is in {where}{cache}"


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
