"""Two analyses side by side: what changed, phase by phase, and whether it matters.

``compare(before, after) -> Comparison`` holds everything ``tracekit compare``
renders; renderers read ``Comparison.to_dict()`` (the JSON contract) and compute
nothing. Verdicts (``better`` / ``worse`` / ``within noise`` / ``not comparable``):

* a figure with per-step samples on both sides is "within noise" when the
  difference is under ``NOISE_SIGMAS`` standard errors of the difference, estimated
  from the step-to-step variation: for the TPOT mean and decode tokens/s from the
  variance of the step times, for TPOT percentiles by a bootstrap of both step
  series (seeded, so a comparison is reproducible);
* a figure measured once per run (the TTFT of a single prefill, MFU, MBU, idle
  share) has no variation to judge by: it is "within noise" under
  ``FLAT_THRESHOLD`` relative change (and, for shares, under
  ``FLAT_POINTS`` absolute change), and says that this is a fixed threshold.

Kernels are matched across runs by (phase, category, launching op) rather than by
name: the same ``aten::linear`` runs ``sm90_xmma_gemm_*`` on one GPU and
``Cijk_*`` on another; without a linked op by kernel family, and ranked by |Δ ms| with
categories as the level above (``tracekit.compare.movers``). Each side's "% of roof" is against its own device's spec
row, so a kernel that got 2x faster on a new GPU but reaches 40 % of that GPU's
roof reads off one table row.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from tracekit.analysis.model import Analysis, json_safe
from tracekit.compare.movers import TOP_MOVERS, kernel_movers
from tracekit.compare.spread import (  # noqa: F401  (metric_value, change_interval: part of this module's API)
    BOOTSTRAP,
    INTERVAL,
    as_runs,
    change_figures,
    change_interval,
    metric_value,
    side_value,
    value_basis,
)
from tracekit.errors import TracekitError

SCHEMA_VERSION = 1
KIND = "tracekit.comparison"
NOISE_SIGMAS = 2.0
FLAT_THRESHOLD = 0.02  # relative change below which a one-sample figure counts as noise
FLAT_POINTS = 0.01  # ... and, for shares (MFU, MBU, idle), absolute change below 1 point

PHASES = ("prefill", "decode", "mixed", "unknown")
ALL = "all"  # neither run has inference steps: the whole trace is compared

# key -> (label, unit, better direction). Units: "ms", "tok/s", "" (a share, 0..1).
HEADLINE = {
    "ttft_ms": ("TTFT", "ms", "lower"),
    "tpot_p50": ("TPOT p50", "ms", "lower"),
    "tpot_p90": ("TPOT p90", "ms", "lower"),
    "tpot_mean": ("TPOT mean", "ms", "lower"),
    # Serving-engine runs: per-phase step times (the decode step time is the inter-token latency).
    "prefill_step_p50": ("prefill step p50", "ms", "lower"),
    "decode_step_p50": ("decode step p50", "ms", "lower"),
    "decode_step_p90": ("decode step p90", "ms", "lower"),
    "decode_step_mean": ("decode step mean", "ms", "lower"),
    "decode_tokens_per_s": ("decode tokens/s", "tok/s", "higher"),
    "prefill_tokens_per_s": ("prefill tokens/s", "tok/s", "higher"),
    "prefill_mfu": ("prefill MFU", "", "higher"),
    "decode_mbu": ("decode MBU", "", "higher"),
    "prefill_idle_share": ("prefill {word} idle", "", "lower"),
    "decode_idle_share": ("decode {word} idle", "", "lower"),
}
# Other spellings accepted by --fail-if.
ALIASES = {"ttft": "ttft_ms", "tpot": "tpot_mean", "tokens_per_s": "decode_tokens_per_s", "mfu": "prefill_mfu",
           "mbu": "decode_mbu", "itl": "decode_step_mean", "itl_p50": "decode_step_p50", "itl_p90": "decode_step_p90"}

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


@dataclass
class Comparison:
    before: Analysis
    after: Analysis
    context: list[dict[str, Any]]
    headline: list[dict[str, Any]]
    phases: dict[str, dict[str, Any]]
    kernels: dict[str, dict[str, list[dict[str, Any]]]]
    summary: list[str] = field(default_factory=list)
    # The --fail-if gates judged on this comparison (``Gate.evaluate``), set by whoever gates it.
    gates: list[dict[str, Any]] = field(default_factory=list)
    # Every run of each side, ``before``/``after`` first (empty: that one run). Headline figures
    # and intervals use them all; phases, kernels and context are from ``before`` and ``after``.
    before_runs: list[Analysis] = field(default_factory=list)
    after_runs: list[Analysis] = field(default_factory=list)

    def figure(self, key: str) -> dict[str, Any] | None:
        return next((h for h in self.headline if h["key"] == key), None)

    def runs(self, side: str) -> list[Analysis]:
        """All runs of ``side`` ("before" or "after"), the one shown in detail first."""
        return (self.before_runs if side == "before" else self.after_runs) or [getattr(self, side)]

    def to_dict(self) -> dict[str, Any]:
        several = len(self.runs("before")) > 1 or len(self.runs("after")) > 1
        return json_safe(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": KIND,
                "before": _side(self.before, self.runs("before")),
                "after": _side(self.after, self.runs("after")),
                "method": {
                    "noise_sigmas": NOISE_SIGMAS,
                    "flat_threshold": FLAT_THRESHOLD,
                    "flat_points": FLAT_POINTS,
                    "bootstrap_resamples": BOOTSTRAP,
                    "interval": (f"{INTERVAL:.0%} bootstrap interval of each change (seeded): with one run per side, "
                                 "circular blocks of each run's steps (the spread within the run; a shift of a whole "
                                 "run is not in it); with several runs on a side, hierarchical: the side's runs drawn "
                                 "with replacement, then blocks of steps within each (run-to-run spread included); "
                                 "none for figures measured once per run"),
                    "runs": RUNS_RULE,
                    "detail": DETAIL_RULE if several else None,
                    "gate_rule": GATE_RULE,
                    "kernel_match": ("by phase, category and launching op, or kernel family (the name without template "
                                     "arguments and tile suffixes) where no op is linked; ranked by |change in ms|, a group "
                                     "only one run has by its own time"),
                    "roof": "each run against its own device's spec row",
                },
                "context": self.context,
                "headline": self.headline,
                "phases": self.phases,
                "kernels": self.kernels,
                "summary": self.summary,
                "suggested_gate": suggested_gate(self),
                "gates": self.gates,
            }
        )


# How a side of several runs becomes one figure (``tracekit.compare.spread.side_value``).
RUNS_RULE = ("with several runs on a side: per-step figures (TPOT, decode step time) over the pooled steps of all "
             "its runs, decode tokens/s as all tokens over all step time, figures measured once per run (TTFT, MFU, "
             "MBU, idle) the median of the per-run figures")
DETAIL_RULE = "phases, kernels and context are from the first run of each side; the headline and gates use every run"


def _side(a: Analysis, runs: list[Analysis] | None = None) -> dict[str, Any]:
    src = a.source or {}
    dev = a.device or {}
    return {
        "source": {k: src.get(k) for k in ("name", "path", "files", "schema_era", "events", "bytes", "tracekit_version")},
        "device": {
            k: dev.get(k)
            for k in ("name", "type", "spec", "spec_key", "how", "reason", "peak_basis", "peak_bandwidth", "peak_flops")
        },
        "phase_source": a.phase_source,
        "run_kind": a.run_kind,
        "workload": _workload(a),
        "steps": {p: int(v.get("steps") or 0) for p, v in a.phases.items()},
        # Every run of the side (the first is the one above): where each came from and its steps.
        "runs": [{"name": (r.source or {}).get("name"), "path": (r.source or {}).get("path"),
                  "steps": {p: int(v.get("steps") or 0) for p, v in r.phases.items()}} for r in (runs or [a])],
    }


def compare(before: Analysis | Sequence[Analysis], after: Analysis | Sequence[Analysis]) -> Comparison:
    """Compare two analyses: ``after`` is the run under test, ``before`` the baseline. Either may
    be several runs of the same workload (a list, the first shown in detail): the headline
    figures and their intervals then use every run (``RUNS_RULE``); a side whose runs are not
    one workload raises ``TracekitError``."""
    before_runs, after_runs = as_runs(before), as_runs(after)
    for side, runs in (("before", before_runs), ("after", after_runs)):
        check_same_workload(runs, side)
    before, after = before_runs[0], after_runs[0]
    word = _device_word(before, after)
    headline = [_figure(k, before_runs, after_runs, word) for k in HEADLINE]
    headline = [h for h in headline if h["before"] is not None or h["after"] is not None]
    _explain_disagreements(headline, before, after)
    names = [p for p in PHASES if p in before.phases or p in after.phases]
    if not names and (len(before.work) or len(after.work)):
        names = [ALL]
    phases = {p: _phase_delta(p, before, after, word) for p in names}
    kernels = {p: _kernel_movers(p, before, after) for p in phases}
    for p in phases:
        phases[p]["explanation"] += _roof_notes(kernels[p], before, after)
    c = Comparison(before, after, _context(before, after), headline, phases, kernels,
                   before_runs=before_runs if len(before_runs) > 1 else [],
                   after_runs=after_runs if len(after_runs) > 1 else [])
    c.summary = _summary(c)
    if len(before_runs) > 1 or len(after_runs) > 1:
        c.summary.append(f"Runs: {len(before_runs)} before, {len(after_runs)} after; {DETAIL_RULE}.")
    return c


# What runs of one side must share: pooling the steps of different workloads would measure nothing.
SAME_WORKLOAD = ("device", "spec row", "phases decided by", "run kind", "model", "batch", "prompt_len", "dtype")


def check_same_workload(runs: Sequence[Analysis], side: str) -> None:
    """Raise ``TracekitError`` (one sentence) when the runs of one side differ in device, model,
    batch, prompt length, dtype or how their steps were found: they are then not repeats of one
    workload, and their pooled figures and run-to-run spread would mix two."""
    first = runs[0]
    for other in runs[1:]:
        rows = [r for r in _context(first, other) if r["field"] in SAME_WORKLOAD]
        fb, fa = _workload(first).get("gemm_flops_per_token"), _workload(other).get("gemm_flops_per_token")
        if not rows and fb and fa and abs(fa / fb - 1) > 0.1:
            rows = [{"label": "GEMM FLOPs per prompt token", "before": fb, "after": fa}]
        if rows:
            diff = "; ".join(f"{r['label']} {_plain(r['before'])} vs {_plain(r['after'])}" for r in rows)
            raise TracekitError(
                f"the {side} runs are not repeats of one workload ({_run_name(first)} vs {_run_name(other)}: {diff}); "
                "give runs of the same workload per side, or compare the two as BEFORE and AFTER")


def _run_name(a: Analysis) -> str:
    src = a.source or {}
    return str(src.get("path") or src.get("name") or "a run")


def _device_word(before: Analysis, after: Analysis) -> str:
    types = {(before.device or {}).get("type"), (after.device or {}).get("type")}
    return "CPU" if types == {"cpu"} else "GPU"


# --- headline ------------------------------------------------------------------------


def _figure(key: str, before: Analysis | Sequence[Analysis], after: Analysis | Sequence[Analysis],
            word: str = "GPU") -> dict[str, Any]:
    """One headline figure of the two sides (each one run or several), with its verdict, noise
    and interval."""
    label, unit, better = HEADLINE[key]
    label = label.format(word=word)
    before, after = as_runs(before), as_runs(after)
    b, a = side_value(before, key), side_value(after, key)
    out = {"key": key, "label": label, "unit": unit, "better": better, "before": b, "after": a,
           "delta": None, "relative": None, "verdict": "not comparable", "noise": None, "noise_basis": None,
           "interval": None, "reason": None, "disagreement": None,
           "basis": {"before": value_basis(before, key), "after": value_basis(after, key)}}
    if len(before) > 1 or len(after) > 1:
        # Each run's own figure, so that a reader sees the run-to-run spread the interval holds.
        out["runs"] = {"before": [metric_value(r, key) for r in before], "after": [metric_value(r, key) for r in after]}
    if b is None or a is None:
        missing = "before" if b is None else "after"
        out["reason"] = f"the {missing} run has no {label}"
        return out
    out["delta"] = a - b
    out["relative"] = (a - b) / b if b else None
    noise, basis, out["interval"] = change_figures(key, before, after)
    out["noise"] = noise
    if noise is not None:
        meaningful = abs(a - b) > NOISE_SIGMAS * noise
        out["noise_basis"] = (
            f"{basis}: changes under {NOISE_SIGMAS:g} standard errors ({_fmt(NOISE_SIGMAS * noise, unit, delta=True)}) count as noise"
        )
    else:
        rel = out["relative"]
        meaningful = rel is None or abs(rel) > FLAT_THRESHOLD
        text = f"changes under {FLAT_THRESHOLD:.0%}"
        if unit == "":
            meaningful = meaningful and abs(a - b) > FLAT_POINTS
            text += f" or {FLAT_POINTS * 100:g} percentage point"
        out["noise_basis"] = f"{basis}: {text} count as noise (a fixed threshold, not a measured variation)"
    if not meaningful:
        out["verdict"] = "within noise"
    else:
        improved = (a < b) if better == "lower" else (a > b)
        out["verdict"] = "better" if improved else "worse"
    return out


# An efficiency figure and the latency it should move with: (efficiency, latency, phase, work, peak).
_PAIRS = (("prefill_mfu", ("ttft_ms", "prefill_step_p50"), "prefill", "flops", "matrix FLOP/s"),
          ("decode_mbu", ("tpot_p50", "decode_step_p50"), "decode", "bytes", "bandwidth"))


def _explain_disagreements(headline: list[dict[str, Any]], before: Analysis, after: Analysis) -> None:
    """When an efficiency verdict disagrees with its latency's (MFU better while TTFT got worse),
    say why in the efficiency figure's ``disagreement``: MFU = work / time / peak, so the work counted
    or the peak it is measured against changed more than the time did."""
    by = {h["key"]: h for h in headline}
    for eff_key, lat_keys, phase, work, peak_name in _PAIRS:
        eff = by.get(eff_key)
        lat = next((by[k] for k in lat_keys if k in by and by[k]["verdict"] in ("better", "worse")), None)
        if eff is None or lat is None or eff["verdict"] not in ("better", "worse") or eff["verdict"] == lat["verdict"]:
            continue
        pb, pa = before.phases.get(phase) or {}, after.phases.get(phase) or {}
        parts = []
        wb, wa = pb.get(work), pa.get(work)
        if wb and wa and abs(wa / wb - 1) > FLAT_THRESHOLD:
            parts.append(f"the {'FLOPs' if work == 'flops' else 'bytes'} counted in the phase changed {wa / wb:.2g}x "
                         "(different shapes, batch or model)")
        kb, ka = _peak(before, work), _peak(after, work)
        if kb and ka and abs(ka / kb - 1) > FLAT_THRESHOLD:
            parts.append(f"the {peak_name} it is measured against changed {ka / kb:.2g}x (different spec rows or "
                         "measured ceilings)")
        text = (f"{eff['label']} is {eff['verdict']} while {lat['label']} is {lat['verdict']}: "
                + ("; ".join(parts) if parts else "the phase's time counts idle and host time its latency does not"))
        eff["disagreement"] = text


def _peak(a: Analysis, work: str) -> float | None:
    dev = a.device or {}
    if work == "bytes":
        return dev.get("peak_bandwidth")
    matrix = (dev.get("peak_flops") or {}).get("matrix") or {}
    return max(matrix.values()) if matrix else None


# --- context -------------------------------------------------------------------------


def _context(before: Analysis, after: Analysis) -> list[dict[str, Any]]:
    """Differences that make the comparison unfair, shown before any delta."""
    rows = []

    def add(field_: str, b: Any, a: Any, note: str) -> None:
        if b != a:
            rows.append({"field": field_, "label": CONTEXT_LABELS.get(field_, field_), "before": b, "after": a, "note": note})

    add("device", before.device.get("name"), after.device.get("name"),
        "different devices: each run is measured against its own roofline")
    add("spec row", before.device.get("spec"), after.device.get("spec"),
        "different peaks: MFU, MBU and % of roof are each against their own row")
    add("phases decided by", before.phase_source, after.phase_source,
        "phases were decided differently: step boundaries may not line up")
    add("run kind", before.run_kind, after.run_kind, "the runs are of different kinds")
    wb, wa = _workload(before), _workload(after)
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
    for key, label, note in _collect_settings(before, after):
        rows.append({"field": key, "label": label, "before": note[0], "after": note[1], "note": note[2]})
    fb, fa = wb.get("gemm_flops_per_token"), wa.get("gemm_flops_per_token")
    if fb and fa and abs(fa / fb - 1) > 0.1 and "model" not in {r["field"] for r in rows}:
        rows.append({
            "field": "gemm_flops_per_token", "label": CONTEXT_LABELS["gemm_flops_per_token"], "before": fb, "after": fa,
            "note": f"{fa / fb:.2g}x the GEMM work per token: most likely a different model (size) or shapes",
        })
    return rows


# Measured ceilings more than this far apart make MFU, MBU and % of roof incomparable.
CEILING_GAP = 0.20


def _collect_settings(before: Analysis, after: Analysis) -> list[tuple[str, str, tuple]]:
    """How tracekit collect ran each side, where the sidecars say: measured ceilings, CPU
    threads, torch.compile, CUDA graphs and the recording schedule. (key, label, (before,
    after, note)) for each that differs."""
    sb, sa = before.workload or {}, after.workload or {}
    out = []
    cb, ca = sb.get("calibration") or {}, sa.get("calibration") or {}
    for what, get, unit in (("matmul", lambda c: next(iter((c.get("matmul_flops") or {}).values()), None), 1e12),
                            ("copy bandwidth", lambda c: c.get("copy_bandwidth"), 1e9)):
        vb, va = get(cb), get(ca)
        if vb and va and max(vb, va) / min(vb, va) > 1 + CEILING_GAP:
            u = "TFLOP/s" if unit == 1e12 else "GB/s"
            out.append((f"ceiling_{what}", f"measured {what} ceiling", (
                f"{vb / unit:.3g} {u}", f"{va / unit:.3g} {u}",
                f"the measured ceilings differ {max(vb, va) / min(vb, va):.2g}x: MFU, MBU and % of roof are against "
                "different roofs (a busy machine measures low)")))
    for key, label, get, note in (
        ("threads", "CPU threads", lambda s: (s.get("device") or {}).get("threads"),
         "different thread counts: CPU timings are not like for like"),
        ("compile", "torch.compile", lambda s: (s.get("workload") or {}).get("compile"),
         "one run was compiled: kernels and their count differ"),
        ("cuda_graphs", "CUDA graphs", lambda s: (s.get("workload") or {}).get("cuda_graphs"),
         "one run replays CUDA graphs: launch overhead differs"),
        ("schedule", "recording schedule", lambda s: _schedule(s),
         "tracekit collect recorded different steps (warm-up, skipped or recorded decode steps)"),
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


def _workload(a: Analysis) -> dict[str, Any]:
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


# --- per phase -----------------------------------------------------------------------


def _phase_figures(a: Analysis, phase: str) -> dict[str, Any]:
    """time, steps, by_bound and by_category (ms) of one phase, or of the whole trace."""
    if phase != ALL:
        return a.phases.get(phase) or {}
    w = a.work
    if not len(w):
        return {}
    ms = w["dur_ns"] / 1e6
    return {
        "steps": None,
        "time_ms": float(ms.sum()),
        "by_bound": {str(k): float(v) for k, v in ms.groupby(w["bound"].astype(str)).sum().items()},
        "by_category": {str(k): float(v) for k, v in ms.groupby(w["category"].astype(str)).sum().items()},
    }


def _phase_delta(phase: str, before: Analysis, after: Analysis, word: str = "GPU") -> dict[str, Any]:
    pb, pa = _phase_figures(before, phase), _phase_figures(after, phase)
    nb, na = int(pb.get("steps") or 0), int(pa.get("steps") or 0)
    # Different step counts (e.g. 16 vs 8 decode steps): totals would mislead; compare per step.
    per_step = bool(pb and pa and nb and na and nb != na)
    sb = 1.0 / nb if per_step else 1.0
    sa = 1.0 / na if per_step else 1.0

    def table(key: str) -> list[dict[str, Any]]:
        b, a = pb.get(key, {}) or {}, pa.get(key, {}) or {}
        rows = []
        for k in sorted(set(b) | set(a)):
            vb, va = float(b.get(k, 0.0) or 0.0) * sb, float(a.get(k, 0.0) or 0.0) * sa
            rows.append({"name": k, "before_ms": vb, "after_ms": va, "delta_ms": va - vb,
                         "relative": (va - vb) / vb if vb else None})
        return sorted(rows, key=lambda r: (-abs(r["delta_ms"]), r["name"]))

    tb, ta = pb.get("time_ms"), pa.get("time_ms")
    time = {
        "before": tb, "after": ta, "delta": (ta - tb) if pb and pa and tb is not None and ta is not None else None,
        "before_per_step": (tb / nb) if tb is not None and nb else None,
        "after_per_step": (ta / na) if ta is not None and na else None,
    }
    by_bound = table("by_bound")
    by_cat = table("by_category")
    out = {
        "present": {"before": bool(pb), "after": bool(pa)},
        "steps": {"before": nb or None, "after": na or None},
        "basis": "per step" if per_step else "total",
        "time_ms": time,
        "by_bound": by_bound,
        "by_category": by_cat,
        "roof": {"before": _roof_by_category(before, phase), "after": _roof_by_category(after, phase)},
    }
    out["explanation"] = _explain(phase, out, word)
    return out


def _explain(phase: str, p: dict[str, Any], word: str) -> list[str]:
    """Sentences: how the phase's time moved and which categories (and idle time) moved it."""
    pres, steps, t = p["present"], p["steps"], p["time_ms"]
    if not pres["before"] or not pres["after"]:
        only = "before" if pres["before"] else "after"
        return [f"Only the {only} run has {_phase_words(phase)}: nothing to compare it with."]
    out = []
    per = p["basis"] == "per step"
    if per:
        b, a = t["before_per_step"], t["after_per_step"]
        head = f"{_fmt(b, 'ms')} → {_fmt(a, 'ms')} per step ({steps['before']} vs {steps['after']} steps, so per-step figures are compared)"
    else:
        b, a = t["before"], t["after"]
        n = f" over {steps['before']} step{'s' if steps['before'] != 1 else ''} each" if steps["before"] else ""
        head = f"{_fmt(b, 'ms')} → {_fmt(a, 'ms')}{n}"
    rel = f" ({'+' if a > b else ''}{_num((a - b) / b * 100)}%)" if b else ""
    out.append(f"Time {head}{rel}.")
    scale = max(abs(b or 0.0), abs(a or 0.0))
    floor = 0.01 * scale  # changes under 1 % of the phase's time are not worth a sentence
    unit = "ms per step" if per else "ms"
    for r in p["by_category"][:3]:
        if abs(r["delta_ms"]) <= floor:
            continue
        verb = "grew" if r["delta_ms"] > 0 else "shrank"
        out.append(f"{r['name']} {verb} by {_fmt(abs(r['delta_ms']), 'ms').removesuffix(' ms')} {unit} "
                   f"({_fmt(r['before_ms'], 'ms')} → {_fmt(r['after_ms'], 'ms')}).")
    idle = next((r for r in p["by_bound"] if r["name"] == "idle"), None)
    if idle and abs(idle["delta_ms"]) > floor:
        verb = "grew" if idle["delta_ms"] > 0 else "shrank"
        out.append(f"{word} idle time {verb} by {_fmt(abs(idle['delta_ms']), 'ms').removesuffix(' ms')} {unit} "
                   f"({_fmt(idle['before_ms'], 'ms')} → {_fmt(idle['after_ms'], 'ms')}).")
    bound_b = _dominant_bound(p["by_bound"], "before_ms")
    bound_a = _dominant_bound(p["by_bound"], "after_ms")
    if bound_b and bound_a and bound_b != bound_a:
        out.append(f"Most kernel time is now {bound_a}-bound (it was {bound_b}-bound).")
    return out


def _dominant_bound(rows: list[dict[str, Any]], side: str) -> str | None:
    known = {r["name"]: r[side] for r in rows if r["name"] in ("compute", "memory")}
    total = sum(r[side] for r in rows if r["name"] != "idle")
    if not known or not total:
        return None
    name, ms = max(known.items(), key=lambda kv: kv[1])
    return name if ms > 0.5 * total else None


def _phase_words(phase: str) -> str:
    return {"prefill": "prefill steps", "decode": "decode steps", "mixed": "mixed steps", "unknown": "unclassified steps",
            ALL: "kernels"}.get(phase, f"{phase} steps")


def _roof_by_category(a: Analysis, phase: str) -> dict[str, float]:
    """Time-weighted fraction of its own roofline per category: each run on its own GPU."""
    w = a.work if phase == ALL else a.work[a.work["phase"] == phase]
    w = w[w["roof_fraction"].notna()]
    if not len(w):
        return {}
    x = (w["roof_fraction"] * w["dur_ns"]).groupby(w["category"]).sum() / w.groupby("category")["dur_ns"].sum()
    return {str(k): float(v) for k, v in x.items() if pd.notna(v)}


# --- kernels -------------------------------------------------------------------------


def _kernel_movers(phase: str, before: Analysis, after: Analysis) -> dict[str, Any]:
    """The phase's kernel movers (``tracekit.compare.movers``), per step when the runs hold
    different numbers of steps in it."""
    def work(a: Analysis) -> pd.DataFrame:
        return a.work if phase == ALL else a.work[a.work["phase"] == phase]

    def steps(a: Analysis) -> int:
        return 0 if phase == ALL else int((a.phases.get(phase) or {}).get("steps") or 0)

    return kernel_movers(work(before), work(after), (steps(before), steps(after)), TOP_MOVERS)


def _roof_notes(k: dict[str, list[dict[str, Any]]], before: Analysis, after: Analysis) -> list[str]:
    """'aten::mm (gemm): 1.6x faster per call, at 39% of MI300X's roof (was 62% of H100 SXM's)'
    for the biggest movers whose roof is known on both sides."""
    db, da = (before.device or {}).get("spec"), (after.device or {}).get("spec")
    if not db or not da:
        return []
    out = []
    for r in k["movers"]:
        if r["before_roof"] is None or r["after_roof"] is None or not r["per_call_speedup"]:
            continue
        s = r["per_call_speedup"]
        if db == da and abs(s - 1) < 0.1 and abs(r["after_roof"] - r["before_roof"]) < 0.05:
            continue  # same roof, about the same speed: nothing to point out
        speed = f"{s:.2g}x faster" if s >= 1 else f"{1 / s:.2g}x slower"
        where_a = f" of {da}'s roof" if db != da else " of the roof"
        where_b = f" of {db}'s" if db != da else ""
        out.append(f"{r['op']} ({r['category']}): {speed} per call, at {r['after_roof']:.0%}{where_a} "
                   f"(was {r['before_roof']:.0%}{where_b}).")
        if len(out) == 2:
            break
    return out


# --- summary -------------------------------------------------------------------------


def _summary(c: Comparison) -> list[str]:
    """The few sentences a terminal or a PR comment leads with: the batch effect, then each
    figure's verdict. Context differences and per-phase explanations have their own keys."""
    out = []
    ctx = {r["field"]: r for r in c.context}
    if "batch" in ctx:
        out.extend(_batch_sentence(c, ctx["batch"]["before"], ctx["batch"]["after"]))
    for h in c.headline:
        if h["verdict"] in ("better", "worse"):
            rel = f" ({'+' if h['relative'] > 0 else ''}{_num(h['relative'] * 100)}%)" if h["relative"] is not None else ""
            out.append(f"{h['label']}: {_fmt(h['before'], h['unit'])} → {_fmt(h['after'], h['unit'])}{rel}, {h['verdict']}.")
    noise = [h["label"] for h in c.headline if h["verdict"] == "within noise"]
    if noise:
        out.append("Within noise: " + ", ".join(noise) + ".")
    return out


def context_sentence(c: Comparison | dict[str, Any]) -> str | None:
    """"Not like for like: batch size 1 vs 8; ..." or None when the runs are alike."""
    rows = c.context if isinstance(c, Comparison) else (c.get("context") or [])
    if not rows:
        return None
    parts = [f"{r.get('label') or r['field']} {_plain(r['before'])} vs {_plain(r['after'])}" for r in rows]
    return "Not like for like: " + "; ".join(parts) + "."


def _batch_sentence(c: Comparison, b: Any, a: Any) -> list[str]:
    """"Batch 1 → 8: decode produces more tokens per second (...), as a larger batch implies;
    each decode step takes longer (...), as expected." Noise-aware: a change within noise is
    said to be one."""
    tps = c.figure("decode_tokens_per_s")
    tpot = c.figure("tpot_mean")
    if not (b and a and tps and tps["delta"] is not None):
        return []
    try:
        bigger: bool | None = float(a) > float(b)
    except (TypeError, ValueError):
        bigger = None
    implies = "as a " + ("larger" if bigger else "smaller") + " batch implies"
    not_explained = "which a " + ("larger" if bigger else "smaller") + " batch does not explain"
    fig = f"({_fmt(tps['before'], 'tok/s')} → {_fmt(tps['after'], 'tok/s')})"
    if tps["verdict"] == "within noise":
        out = f"Batch {b} → {a}: decode produces about as many tokens per second (within noise {fig})"
    else:
        more = tps["delta"] > 0
        out = f"Batch {b} → {a}: decode produces {'more' if more else 'fewer'} tokens per second {fig}"
        if bigger is not None:
            out += ", " + (implies if more == bigger else not_explained)
    if tpot and tpot["delta"] is not None:
        fig = f"({_fmt(tpot['before'], 'ms')} → {_fmt(tpot['after'], 'ms')})"
        if tpot["verdict"] == "within noise":
            out += f"; each decode step takes about as long (within noise {fig})"
        else:
            longer = tpot["delta"] > 0
            out += f"; each decode step takes {'longer' if longer else 'less time'} {fig}"
            if bigger is not None:
                out += ", " + ("as expected" if longer == bigger else not_explained)
    return [out + "."]


def _plain(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, float):
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
            if abs(v) >= scale:
                return f"{v / scale:.3g}{prefix}"
        return f"{v:.3g}"
    return str(v)


def _num(x: float) -> str:
    """Three significant digits, thousands separated, never exponent notation: 1,003 · 0.0768."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{digits}f}"


def _fmt(v: float | None, unit: str, delta: bool = False) -> str:
    if v is None:
        return "n/a"
    sign = "+" if delta and v > 0 else ""
    if unit == "":
        return f"{sign}{_num(v * 100)} pp" if delta else f"{_num(v * 100)}%"
    return f"{sign}{_num(v)} {unit}"


# --- CI gates ------------------------------------------------------------------------

_GATE = re.compile(r"^\s*([A-Za-z_0-9]+)\s*(>|<)\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%|pp|ms|tok/s)?\s*$")


@dataclass(frozen=True)
class Gate:
    """``tpot_p50>+5%``: fail when the after-run's figure rose more than 5 % over before.

    ``op`` is ``>`` or ``<``; the threshold is relative (``%``) or an absolute change in
    the figure's unit (``ms``, ``tok/s``, ``pp`` for shares such as MFU, or a bare number)."""

    metric: str
    op: str
    threshold: float
    relative: bool
    text: str

    def missing(self, c: Comparison) -> str | None:
        """One sentence when a run lacks the gate's figure (it can neither hold nor fail), else None."""
        h = c.figure(self.metric)
        if h is not None and h["before"] is not None and h["after"] is not None:
            return None
        label = h["label"] if h else HEADLINE[self.metric][0].format(word="GPU")
        which = [s for s in ("before", "after") if side_value(c.runs(s), self.metric) is None]
        runs = "neither run has" if len(which) != 1 else f"the {which[0]} run has no"
        why = ""
        engine = [a for a in (c.before, c.after) if a.metrics.get("latency_semantics") == "engine steps"]
        if engine and self.metric in ("ttft_ms",) + tuple(k for k in HEADLINE if k.startswith("tpot_")):
            why = " (an engine trace times steps, not requests, so it has no TTFT or TPOT)"
        instead = suggested_gate(c)
        hint = f"; gate on a figure both runs have, e.g. --fail-if '{instead}'" if instead else ""
        return f"--fail-if {self.text!r}: {runs} {label}{why}, so the gate cannot be checked{hint}"

    def check(self, c: Comparison) -> str | None:
        """A sentence saying how the gate failed (or why it cannot be checked), or None when it
        holds, including when the change crossed the threshold only within noise."""
        g = self.evaluate(c)
        return g["sentence"] if g["verdict"] in ("fail", "missing") else None

    def evaluate(self, c: Comparison) -> dict[str, Any]:
        """The gate's verdict on ``c`` (``GATE_RULE``): ``pass``, ``fail``, ``noise`` (the change
        crossed the threshold but its interval reaches back across it) or ``missing`` (a run lacks
        the figure), with the threshold, the change, its interval and a sentence, as the JSON's
        ``gates[]`` holds them."""
        h = c.figure(self.metric)
        out: dict[str, Any] = {"expr": self.text, "metric": self.metric, "op": self.op, "threshold": self.threshold,
                               "relative": self.relative, "unit": "%" if self.relative else HEADLINE[self.metric][1],
                               "before": None, "after": None, "change": None, "interval": None, "interval_level": None,
                               "verdict": "missing", "sentence": None}
        absent = self.missing(c)
        if absent or h is None:
            out["sentence"] = absent
            return out
        label, unit = h["label"], h["unit"]
        out.update(before=h["before"], after=h["after"])
        change = h["relative"] if self.relative else h["delta"]
        if change is None:
            out.update(verdict="fail", sentence=f"{self.text}: the before run's {label} is 0, so there is no relative change")
            return out
        out["change"] = change
        iv = h.get("interval") or {}
        interval = iv.get("relative" if self.relative else "delta")
        if interval is not None:
            out.update(interval=interval, interval_level=iv.get("level"))

        def show(x: float) -> str:
            return f"{x:+.1%}" if self.relative else _fmt(x, unit, delta=True)

        def beyond(x: float) -> bool:
            return x > self.threshold if self.op == ">" else x < self.threshold

        limit = show(self.threshold)
        where = "above" if self.op == ">" else "below"
        moved = f"{label} changed {show(change)} ({_fmt(h['before'], unit)} -> {_fmt(h['after'], unit)})"
        span = f"{iv.get('level', INTERVAL):.0%} interval {show(interval[0])} to {show(interval[1])}" if interval else None
        if not beyond(change):
            out["verdict"] = "pass"
            out["sentence"] = f"{self.text}: {moved}{f', {span}' if span else ''}, not {where} {limit}"
        elif interval is not None:
            near = interval[0] if self.op == ">" else interval[1]
            if beyond(near):
                out["verdict"] = "fail"
                out["sentence"] = f"{self.text}: {moved}, {where} {limit} beyond noise ({span})"
            else:
                out["verdict"] = "noise"
                out["sentence"] = f"{self.text}: {moved}, {where} {limit} but within noise ({span} reaches {limit})"
        elif h["verdict"] == "within noise":
            out["verdict"] = "noise"
            out["sentence"] = f"{self.text}: {moved}, {where} {limit} but within noise ({h['noise_basis']})"
        else:
            out["verdict"] = "fail"
            out["sentence"] = (f"{self.text}: {moved}, {where} {limit} (a figure measured once per run: no interval, "
                               "so the threshold alone decides)")
        return out


# The rule every gate follows, stated in the JSON's method and the README.
GATE_RULE = ("a gate fails when the change is beyond its threshold and so is the near end of the change's "
             f"{INTERVAL:.0%} interval (the whole interval lies beyond the threshold); beyond the threshold with "
             "the interval reaching back across it is 'noise' and does not fail; a figure measured once per "
             "run has no interval, so its threshold alone decides (unless the change is under compare's fixed "
             "noise threshold)")


# The gate suggested to a user, first figure both runs have: TPOT for request-level runs, the
# decode (or prefill) step time and tokens/s for engine traces, which have no TPOT.
SUGGESTED = ("tpot_p50", "decode_step_p50", "decode_tokens_per_s", "prefill_step_p50", "ttft_ms", "prefill_tokens_per_s")
SUGGESTED_CHANGE = 5  # percent


def suggested_gate(c: Comparison) -> str | None:
    """``decode_step_p50>+5%``: a --fail-if on a figure both runs have (None when there is none),
    so that the suggestion cannot fail for want of the figure."""
    for key in SUGGESTED:
        h = c.figure(key)
        if h is not None and h["before"] is not None and h["after"] is not None:
            lower = HEADLINE[key][2] == "lower"
            return f"{key}{'>+' if lower else '<-'}{SUGGESTED_CHANGE}%"
    return None


def parse_gate(text: str) -> Gate:
    """``METRIC>+N%``, ``METRIC<-N%``, or an absolute change: ``tpot_p50>+0.5ms``,
    ``decode_tokens_per_s<-100tok/s``, ``decode_mbu<-2pp``, ``prefill_mfu<-0.02``."""
    metrics = ", ".join(HEADLINE)
    m = _GATE.match(text or "")
    if not m:
        raise TracekitError(
            f"--fail-if {text!r} is not of the form METRIC>+N% or METRIC<-N% (or an absolute change in ms, tok/s or pp); "
            f"metrics: {metrics}"
        )
    metric, op, number, suffix = m.groups()
    metric = ALIASES.get(metric.lower(), metric.lower())
    if metric not in HEADLINE:
        raise TracekitError(f"--fail-if {text!r}: unknown metric {m.group(1)!r} (metrics: {metrics})")
    unit = HEADLINE[metric][1]
    value = float(number)
    if suffix == "%":
        return Gate(metric, op, value / 100, True, text.strip())
    if suffix == "pp":
        if unit != "":
            raise TracekitError(f"--fail-if {text!r}: pp (percentage points) is for shares such as MFU, MBU or idle; {metric} is in {unit}")
        value /= 100
    elif suffix and suffix != unit:
        raise TracekitError(f"--fail-if {text!r}: {metric} is measured in {unit or 'a share (use pp or %)'}, not {suffix}")
    elif not suffix and unit:  # a share's bare number is its absolute change (0.02 = 2 points)
        example = f"{op}{number}{unit}"
        raise TracekitError(f"--fail-if {text!r} has no unit: write {metric}{op}{number}% for a relative change or "
                            f"{metric}{example} for an absolute one")
    return Gate(metric, op, value, False, text.strip())
