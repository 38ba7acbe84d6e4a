"""Two analyses side by side: what changed, phase by phase, and whether it matters.

``compare(before, after) -> Comparison`` holds everything ``tracekit compare``
renders. Verdicts:

* a figure with per-step samples on both sides (TPOT, decode tokens/s) is "within
  noise" when the difference is under ``NOISE_SIGMAS`` standard errors of the
  difference of means (step-to-step variation); percentiles use the same error;
* a figure measured once per run (TTFT of a single prefill, MFU, MBU, idle share)
  has no variation to judge by: it is "within noise" under ``FLAT_THRESHOLD``
  relative change, and the comparison says that this is a fixed threshold.

Kernels are matched across runs by (phase, category, launching op) rather than by
name: the same ``aten::linear`` runs ``sm90_xmma_gemm_*`` on one GPU and
``Cijk_*`` on another.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.analyze import short_name
from tracekit.analysis.model import Analysis, _clean
from tracekit.errors import TracekitError

SCHEMA_VERSION = 1
NOISE_SIGMAS = 2.0
FLAT_THRESHOLD = 0.02
TOP_MOVERS = 12

# key -> (label, unit, better direction, where it lives in Analysis.metrics / phases)
HEADLINE = {
    "ttft_ms": ("TTFT", "ms", "lower"),
    "tpot_p50": ("TPOT p50", "ms", "lower"),
    "tpot_p90": ("TPOT p90", "ms", "lower"),
    "tpot_mean": ("TPOT mean", "ms", "lower"),
    "decode_tokens_per_s": ("decode tokens/s", "tok/s", "higher"),
    "prefill_tokens_per_s": ("prefill tokens/s", "tok/s", "higher"),
    "prefill_mfu": ("prefill MFU", "", "higher"),
    "decode_mbu": ("decode MBU", "", "higher"),
    "prefill_idle_share": ("prefill GPU idle", "", "lower"),
    "decode_idle_share": ("decode GPU idle", "", "lower"),
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

    def figure(self, key: str) -> dict[str, Any] | None:
        return next((h for h in self.headline if h["key"] == key), None)

    def to_dict(self) -> dict[str, Any]:
        return _clean(
            {
                "schema_version": SCHEMA_VERSION,
                "before": _side(self.before),
                "after": _side(self.after),
                "context": self.context,
                "headline": self.headline,
                "phases": self.phases,
                "kernels": self.kernels,
                "summary": self.summary,
            }
        )


def _side(a: Analysis) -> dict[str, Any]:
    return {"source": a.source, "device": a.device, "phase_source": a.phase_source, "run_kind": a.run_kind}


def compare(before: Analysis, after: Analysis) -> Comparison:
    headline = [_figure(k, before, after) for k in HEADLINE]
    headline = [h for h in headline if h["before"] is not None or h["after"] is not None]
    phases = {p: _phase_delta(p, before, after) for p in ("prefill", "decode", "mixed") if p in before.phases or p in after.phases}
    kernels = {p: _kernel_movers(p, before, after) for p in phases}
    c = Comparison(before, after, _context(before, after), headline, phases, kernels)
    c.summary = _summary(c)
    return c


# --- headline ------------------------------------------------------------------------


def metric_value(a: Analysis, key: str) -> float | None:
    m = a.metrics
    if key.startswith("tpot_"):
        return (m.get("tpot_ms") or {}).get(key[5:])
    if key.endswith("_idle_share"):
        return (m.get("idle_share") or {}).get(key[: -len("_idle_share")])
    return m.get(key)


def _decode_steps(a: Analysis) -> np.ndarray | None:
    """Per-step decode durations (ms), when there are enough to estimate variation."""
    series = np.asarray(a.metrics.get("tpot_series_ms") or [], dtype=float)
    return series if len(series) >= 2 else None


def _figure(key: str, before: Analysis, after: Analysis) -> dict[str, Any]:
    label, unit, better = HEADLINE[key]
    b, a = metric_value(before, key), metric_value(after, key)
    out = {"key": key, "label": label, "unit": unit, "better": better, "before": b, "after": a,
           "delta": None, "relative": None, "verdict": "n/a", "noise": None}
    if b is None or a is None:
        missing = "before" if b is None else "after"
        out["verdict"] = f"not comparable: the {missing} run has no {label}"
        return out
    out["delta"] = a - b
    out["relative"] = (a - b) / b if b else None
    noise = _noise(key, before, after)
    out["noise"] = noise
    if noise is not None:
        meaningful = abs(a - b) > NOISE_SIGMAS * noise
        out["noise_basis"] = f"{NOISE_SIGMAS:g} standard errors of the step-to-step variation ({NOISE_SIGMAS * noise:.3g} {unit})"
    else:
        meaningful = out["relative"] is None or abs(out["relative"]) > FLAT_THRESHOLD
        out["noise_basis"] = f"one sample per run: changes under {FLAT_THRESHOLD:.0%} count as noise"
    if not meaningful:
        out["verdict"] = "within noise"
    else:
        improved = (a < b) if better == "lower" else (a > b)
        out["verdict"] = "better" if improved else "worse"
    return out


def _noise(key: str, before: Analysis, after: Analysis) -> float | None:
    """Standard error of the difference, from per-step samples where both runs have them."""
    if key.startswith("tpot_") or key == "decode_tokens_per_s":
        sb, sa = _decode_steps(before), _decode_steps(after)
        if sb is None or sa is None:
            return None
        se = math.sqrt(sb.var(ddof=1) / len(sb) + sa.var(ddof=1) / len(sa))
        if key == "decode_tokens_per_s":
            # Propagate the relative error of the mean step time to the rate.
            b = metric_value(before, key) or 0.0
            rel = math.sqrt((sb.std(ddof=1) / sb.mean()) ** 2 / len(sb) + (sa.std(ddof=1) / sa.mean()) ** 2 / len(sa))
            return abs(b) * rel
        return se
    return None


# --- context -------------------------------------------------------------------------


def _context(before: Analysis, after: Analysis) -> list[dict[str, Any]]:
    """Differences that make the comparison unfair, shown before any delta."""
    rows = []

    def add(field_: str, b: Any, a: Any, note: str) -> None:
        if b != a:
            rows.append({"field": field_, "before": b, "after": a, "note": note})

    add("device", before.device.get("name"), after.device.get("name"),
        "different devices: each run is measured against its own roofline")
    add("spec row", before.device.get("spec"), after.device.get("spec"), "peaks differ between the two runs")
    add("phases decided by", before.phase_source, after.phase_source,
        "phases were decided differently: step boundaries may not line up")
    add("run kind", before.run_kind, after.run_kind, "the runs are of different kinds")
    wb, wa = _workload(before), _workload(after)
    for key, note in (
        ("batch", "different batch sizes: per-step time and tokens/s are not like for like"),
        ("prompt_len", "different prompt lengths: TTFT and the KV cache differ"),
        ("new_tokens", "different numbers of generated tokens"),
        ("dtype", "different dtypes: peaks and bytes per element differ"),
        ("model", "different models"),
        ("prefill_tokens", "different numbers of prompt tokens per prefill step"),
    ):
        add(key, wb.get(key), wa.get(key), note)
    return rows


def _workload(a: Analysis) -> dict[str, Any]:
    """Batch, prompt length, dtype, model: from the collect sidecar, else from the steps."""
    side = ((a.workload or {}).get("workload")) or {}
    out = {
        "batch": side.get("batch_size"),
        "prompt_len": side.get("prompt_len"),
        "new_tokens": side.get("new_tokens"),
        "dtype": side.get("dtype"),
        "model": side.get("preset") or side.get("model_path") or side.get("architecture"),
    }
    steps = a.steps
    pre = steps[steps["phase"] == "prefill"] if len(steps) else steps
    out["prefill_tokens"] = int(pre["tokens"].iloc[0]) if len(pre) and pd.notna(pre["tokens"].iloc[0]) else None
    if out["batch"] is None and len(steps) and steps["batch"].notna().any():
        out["batch"] = int(steps["batch"].dropna().iloc[0])
    if out["dtype"] is None and len(a.work) and a.work["dtype"].notna().any():
        out["dtype"] = a.work.loc[a.work["unit"] == "matrix", "dtype"].dropna().mode().iloc[0] if (a.work["unit"] == "matrix").any() else None
    return out


# --- per phase -----------------------------------------------------------------------


def _phase_delta(phase: str, before: Analysis, after: Analysis) -> dict[str, Any]:
    pb, pa = before.phases.get(phase, {}), after.phases.get(phase, {})

    def table(key: str) -> list[dict[str, Any]]:
        b, a = pb.get(key, {}) or {}, pa.get(key, {}) or {}
        rows = [{"name": k, "before_ms": b.get(k, 0.0), "after_ms": a.get(k, 0.0), "delta_ms": a.get(k, 0.0) - b.get(k, 0.0)} for k in sorted(set(b) | set(a))]
        return sorted(rows, key=lambda r: -abs(r["delta_ms"]))

    by_cat = table("by_category")
    explain = []
    total = (pa.get("time_ms") or 0.0) - (pb.get("time_ms") or 0.0)
    for r in by_cat[:3]:
        if abs(r["delta_ms"]) < 1e-6:
            continue
        verb = "grew" if r["delta_ms"] > 0 else "shrank"
        explain.append(f"{r['name']} {verb} by {abs(r['delta_ms']):.3g} ms ({r['before_ms']:.3g} -> {r['after_ms']:.3g} ms)")
    return {
        "present": {"before": bool(pb), "after": bool(pa)},
        "time_ms": {"before": pb.get("time_ms"), "after": pa.get("time_ms"), "delta": total if pb and pa else None},
        "by_bound": table("by_bound"),
        "by_category": by_cat,
        "roof": {"before": _roof_by_category(before, phase), "after": _roof_by_category(after, phase)},
        "explanation": explain,
    }


def _roof_by_category(a: Analysis, phase: str) -> dict[str, float]:
    """Time-weighted fraction of its own roofline per category: each run on its own GPU."""
    w = a.work[(a.work["phase"] == phase) & a.work["roof_fraction"].notna()]
    if not len(w):
        return {}
    x = (w["roof_fraction"] * w["dur_ns"]).groupby(w["category"]).sum() / w.groupby("category")["dur_ns"].sum()
    return {str(k): float(v) for k, v in x.items()}


# --- kernels -------------------------------------------------------------------------


def _groups(a: Analysis, phase: str) -> pd.DataFrame:
    w = a.work[a.work["phase"] == phase]
    if not len(w):
        return pd.DataFrame(columns=["key", "category", "op", "ms", "calls", "example", "roof"])
    op = w["op_name"].where(w["op_name"].notna(), None)
    label = [o if isinstance(o, str) else "(" + short_name(str(n), 48) + ")" for o, n in zip(op, w["name"].astype(str))]
    f = w.assign(op_label=label, roof_x=np.where(w["roof_fraction"].notna(), w["roof_fraction"] * w["dur_ns"], 0.0),
                 known=np.where(w["roof_fraction"].notna(), w["dur_ns"], 0))
    g = f.groupby(["category", "op_label"], observed=True).agg(
        ns=("dur_ns", "sum"), calls=("dur_ns", "size"), example=("name", "first"), roof_x=("roof_x", "sum"), known=("known", "sum")
    )
    g = g.reset_index()
    g["ms"] = g["ns"] / 1e6
    g["roof"] = np.where(g["known"] > 0, g["roof_x"] / g["known"].where(g["known"] > 0, 1), np.nan)
    g["key"] = g["category"].astype(str) + " | " + g["op_label"].astype(str)
    return g


def _kernel_movers(phase: str, before: Analysis, after: Analysis) -> dict[str, list[dict[str, Any]]]:
    gb, ga = _groups(before, phase), _groups(after, phase)
    m = gb.merge(ga, on=["key", "category", "op_label"], how="outer", suffixes=("_b", "_a"))
    rows = []
    for r in m.itertuples(index=False):
        b = 0.0 if pd.isna(r.ms_b) else float(r.ms_b)
        a = 0.0 if pd.isna(r.ms_a) else float(r.ms_a)
        rows.append(
            {
                "key": r.key,
                "category": r.category,
                "op": r.op_label,
                "before_ms": b,
                "after_ms": a,
                "delta_ms": a - b,
                "speedup": (b / a) if a and b else None,
                "before_calls": None if pd.isna(r.calls_b) else int(r.calls_b),
                "after_calls": None if pd.isna(r.calls_a) else int(r.calls_a),
                "before_kernel": None if pd.isna(r.example_b) else short_name(str(r.example_b)),
                "after_kernel": None if pd.isna(r.example_a) else short_name(str(r.example_a)),
                "before_roof": None if pd.isna(r.roof_b) else float(r.roof_b),
                "after_roof": None if pd.isna(r.roof_a) else float(r.roof_a),
            }
        )
    both = [r for r in rows if r["before_ms"] and r["after_ms"]]
    return {
        "movers": sorted(both, key=lambda r: -abs(r["delta_ms"]))[:TOP_MOVERS],
        "new": sorted([r for r in rows if not r["before_ms"] and r["after_ms"]], key=lambda r: -r["after_ms"])[:TOP_MOVERS],
        "vanished": sorted([r for r in rows if r["before_ms"] and not r["after_ms"]], key=lambda r: -r["before_ms"])[:TOP_MOVERS],
    }


# --- summary -------------------------------------------------------------------------


def _summary(c: Comparison) -> list[str]:
    out = []
    for h in c.headline:
        if h["verdict"] in ("better", "worse"):
            rel = f" ({h['relative']:+.1%})" if h["relative"] is not None else ""
            out.append(f"{h['label']}: {_fmt(h['before'], h['unit'])} -> {_fmt(h['after'], h['unit'])}{rel}, {h['verdict']}.")
    ctx = {r["field"]: r for r in c.context}
    if "batch" in ctx:
        b, a = ctx["batch"]["before"], ctx["batch"]["after"]
        tps = c.figure("decode_tokens_per_s")
        tpot = c.figure("tpot_mean")
        if b and a and tps and tps["delta"] is not None:
            direction = "more" if tps["delta"] > 0 else "fewer"
            step = ""
            if tpot and tpot["delta"] is not None:
                step = f", while each decode step takes {'longer' if tpot['delta'] > 0 else 'less time'} ({_fmt(tpot['before'], 'ms')} -> {_fmt(tpot['after'], 'ms')})"
            out.append(
                f"Batch {b} -> {a}: decode produces {direction} tokens per second "
                f"({_fmt(tps['before'], 'tok/s')} -> {_fmt(tps['after'], 'tok/s')}){step}."
            )
    for phase, p in c.phases.items():
        if p["explanation"]:
            out.append(f"{phase.capitalize()}: " + "; ".join(p["explanation"]) + ".")
    return out


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "":
        return f"{v:.1%}"
    if unit == "ms":
        return f"{v:.3g} ms"
    return f"{v:,.0f} {unit}"


# --- CI gates ------------------------------------------------------------------------

_GATE = re.compile(r"^\s*([a-z_0-9]+)\s*(>|<)\s*([+-]?\d+(?:\.\d+)?)\s*(%|ms|)\s*$")


@dataclass(frozen=True)
class Gate:
    """``tpot_p50>+5%``: fail when the after-run's figure rose more than 5% over before."""

    metric: str
    op: str
    threshold: float
    relative: bool
    text: str

    def check(self, c: Comparison) -> str | None:
        """A sentence saying how the gate failed, or None when it holds."""
        h = c.figure(self.metric)
        if h is None or h["before"] is None or h["after"] is None:
            return f"{self.text}: {self.metric} is not available in both runs"
        change = h["relative"] if self.relative else h["delta"]
        if change is None:
            return f"{self.text}: the before-run's {self.metric} is 0, so no relative change"
        failed = change > self.threshold if self.op == ">" else change < self.threshold
        if not failed:
            return None
        shown = f"{change:+.1%}" if self.relative else f"{change:+.4g}"
        return f"{self.text}: {self.metric} changed {shown} ({h['before']:.4g} -> {h['after']:.4g})"


def parse_gate(text: str) -> Gate:
    m = _GATE.match(text)
    if not m:
        raise TracekitError(
            f"--fail-if {text!r} is not of the form METRIC>+N% or METRIC<-N (metrics: {', '.join(HEADLINE)})"
        )
    metric, op, number, suffix = m.groups()
    if metric not in HEADLINE:
        raise TracekitError(f"--fail-if {text!r}: unknown metric {metric!r} (metrics: {', '.join(HEADLINE)})")
    value = float(number)
    return Gate(metric, op, value / 100 if suffix == "%" else value, suffix == "%", text.strip())
