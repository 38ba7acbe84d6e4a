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

This module assembles the comparison, per phase and per kernel, and its summary; the verdict on
each headline figure is in ``tracekit.compare.verdicts``, the differences between the two runs
(context) in ``tracekit.compare.context``, and the ``--fail-if`` gates in ``tracekit.compare.gates``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from tracekit.analysis import books
from tracekit.analysis.model import Analysis, json_safe
from tracekit.analysis.tables import ROOF_SUMS, group_roof, roof_sums
from tracekit.compare.context import check_same_workload, context_rows, plain, workload_of
from tracekit.compare.gates import GATE_RULE, suggested_gate
from tracekit.compare.movers import TOP_MOVERS, kernel_movers
from tracekit.compare.spread import BOOTSTRAP, INTERVAL, as_runs
from tracekit.compare.verdicts import (
    FLAT_POINTS,
    FLAT_THRESHOLD,
    HEADLINE,
    NOISE_SIGMAS,
    explain_disagreements,
    fmt,
    headline_figure,
    num,
)

SCHEMA_VERSION = 1
KIND = "tracekit.comparison"

PHASES = ("prefill", "decode", "mixed", "unknown")
ALL = "all"  # neither run has inference steps: the whole trace is compared


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
                    "interval": (
                        f"{INTERVAL:.0%} bootstrap interval of each change (seeded): with one run per side, "
                        "circular blocks of each run's steps (the spread within the run; a shift of a whole "
                        "run is not in it); with several runs on a side, hierarchical: the side's runs drawn "
                        "with replacement, then blocks of steps within each (run-to-run spread included); "
                        "none for figures measured once per run"
                    ),
                    "runs": RUNS_RULE,
                    "detail": DETAIL_RULE if several else None,
                    "gate_rule": GATE_RULE,
                    "kernel_match": (
                        "by phase, category and launching op, or kernel family (the name without template "
                        "arguments and tile suffixes) where no op is linked; ranked by |change in ms|, a group "
                        "only one run has by its own time"
                    ),
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
RUNS_RULE = (
    "with several runs on a side: per-step figures (TPOT, decode step time) over the pooled steps of all "
    "its runs, decode tokens/s as all tokens over all step time, figures measured once per run (TTFT, MFU, "
    "MBU, idle) the median of the per-run figures"
)
DETAIL_RULE = "phases, kernels and context are from the first run of each side; the headline and gates use every run"


def _side(a: Analysis, runs: list[Analysis] | None = None) -> dict[str, Any]:
    src = a.source or {}
    dev = a.device or {}
    return {
        "source": {
            k: src.get(k) for k in ("name", "path", "files", "schema_era", "events", "bytes", "tracekit_version")
        },
        "device": {
            k: dev.get(k)
            for k in ("name", "type", "spec", "spec_key", "how", "reason", "peak_basis", "peak_bandwidth", "peak_flops")
        },
        "phase_source": a.phase_source,
        "run_kind": a.run_kind,
        "workload": workload_of(a),
        "steps": {p: int(v.get("steps") or 0) for p, v in a.phases.items()},
        # Every run of the side (the first is the one above): where each came from and its steps.
        "runs": [
            {
                "name": (r.source or {}).get("name"),
                "path": (r.source or {}).get("path"),
                "steps": {p: int(v.get("steps") or 0) for p, v in r.phases.items()},
            }
            for r in (runs or [a])
        ],
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
    headline = [headline_figure(k, before_runs, after_runs, word) for k in HEADLINE]
    headline = [h for h in headline if h["before"] is not None or h["after"] is not None]
    explain_disagreements(headline, before, after)
    names = [p for p in PHASES if p in before.phases or p in after.phases]
    if not names and (len(before.work) or len(after.work)):
        names = [ALL]
    phases = {p: _phase_delta(p, before, after, word) for p in names}
    kernels = {p: _kernel_movers(p, before, after) for p in phases}
    for p in phases:
        phases[p]["explanation"] += _roof_notes(kernels[p], before, after)
    # No fraction of a roof shown above it (analysis.books); a violation is a tracekit bug.
    roof_notes = books.enforce(books.check_compare_roofs(phases, kernels))
    c = Comparison(
        before,
        after,
        context_rows(before, after),
        headline,
        phases,
        kernels,
        before_runs=before_runs if len(before_runs) > 1 else [],
        after_runs=after_runs if len(after_runs) > 1 else [],
    )
    c.summary = _summary(c) + roof_notes
    if len(before_runs) > 1 or len(after_runs) > 1:
        c.summary.append(f"Runs: {len(before_runs)} before, {len(after_runs)} after; {DETAIL_RULE}.")
    return c


def _device_word(before: Analysis, after: Analysis) -> str:
    types = {(before.device or {}).get("type"), (after.device or {}).get("type")}
    return "CPU" if types == {"cpu"} else "GPU"


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
            rows.append(
                {
                    "name": k,
                    "before_ms": vb,
                    "after_ms": va,
                    "delta_ms": va - vb,
                    "relative": (va - vb) / vb if vb else None,
                }
            )
        return sorted(rows, key=lambda r: (-abs(r["delta_ms"]), r["name"]))

    tb, ta = pb.get("time_ms"), pa.get("time_ms")
    time = {
        "before": tb,
        "after": ta,
        "delta": (ta - tb) if pb and pa and tb is not None and ta is not None else None,
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
        "roof": _roofs_by_category(before, after, phase),
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
        head = f"{fmt(b, 'ms')} → {fmt(a, 'ms')} per step ({steps['before']} vs {steps['after']} steps, so per-step figures are compared)"
    else:
        b, a = t["before"], t["after"]
        n = f" over {steps['before']} step{'s' if steps['before'] != 1 else ''} each" if steps["before"] else ""
        head = f"{fmt(b, 'ms')} → {fmt(a, 'ms')}{n}"
    rel = f" ({'+' if a > b else ''}{num((a - b) / b * 100)}%)" if b else ""
    out.append(f"Time {head}{rel}.")
    scale = max(abs(b or 0.0), abs(a or 0.0))
    floor = 0.01 * scale  # changes under 1 % of the phase's time are not worth a sentence
    unit = "ms per step" if per else "ms"
    for r in p["by_category"][:3]:
        if abs(r["delta_ms"]) <= floor:
            continue
        verb = "grew" if r["delta_ms"] > 0 else "shrank"
        out.append(
            f"{r['name']} {verb} by {fmt(abs(r['delta_ms']), 'ms').removesuffix(' ms')} {unit} "
            f"({fmt(r['before_ms'], 'ms')} → {fmt(r['after_ms'], 'ms')})."
        )
    idle = next((r for r in p["by_bound"] if r["name"] == "idle"), None)
    if idle and abs(idle["delta_ms"]) > floor:
        verb = "grew" if idle["delta_ms"] > 0 else "shrank"
        out.append(
            f"{word} idle time {verb} by {fmt(abs(idle['delta_ms']), 'ms').removesuffix(' ms')} {unit} "
            f"({fmt(idle['before_ms'], 'ms')} → {fmt(idle['after_ms'], 'ms')})."
        )
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
    return {
        "prefill": "prefill steps",
        "decode": "decode steps",
        "mixed": "mixed steps",
        "unknown": "unclassified steps",
        ALL: "kernels",
    }.get(phase, f"{phase} steps")


def _roofs_by_category(before: Analysis, after: Analysis, phase: str) -> dict[str, dict]:
    """Time-weighted fraction of its own roofline per category, each run on its own GPU
    (``before``, ``after``); a category's fraction that is withheld (above its roof, or bytes
    capped at it) is under ``withheld`` with why (``tables.group_roof``)."""
    out: dict[str, dict] = {"before": {}, "after": {}, "withheld": {"before": {}, "after": {}}}
    for side, a in (("before", before), ("after", after)):
        w = a.work if phase == ALL else a.work[a.work["phase"] == phase]
        if not len(w):
            continue
        f = pd.DataFrame(
            {
                "category": w["category"].astype(str).to_numpy(),
                "ns": w["dur_ns"].to_numpy(dtype=float),
                "bytes": w["bytes"].to_numpy(dtype=float) if "bytes" in w else float("nan"),
                **roof_sums(w),
            }
        )
        g = f.groupby("category").agg(
            ns=("ns", "sum"), calls=("ns", "size"), bytes=("bytes", "sum"), **{k: (k, "sum") for k in ROOF_SUMS}
        )
        for cat, r in g.iterrows():
            if not r["known_dur"] and not r["capped_dur"]:
                continue  # no unit of the category was priced against a roof in this run
            roof, withheld = group_roof(r, r["ns"], r["bytes"], r["calls"], device=a.device)
            if withheld:
                out["withheld"][side][str(cat)] = withheld
            elif roof is not None:  # always, past the guard above: some of the category's time is priced
                out[side][str(cat)] = float(roof)
    return out


# --- kernels -------------------------------------------------------------------------


def _kernel_movers(phase: str, before: Analysis, after: Analysis) -> dict[str, Any]:
    """The phase's kernel movers (``tracekit.compare.movers``), per step when the runs hold
    different numbers of steps in it."""

    def work(a: Analysis) -> pd.DataFrame:
        return a.work if phase == ALL else a.work[a.work["phase"] == phase]

    def steps(a: Analysis) -> int:
        return 0 if phase == ALL else int((a.phases.get(phase) or {}).get("steps") or 0)

    return kernel_movers(
        work(before), work(after), (steps(before), steps(after)), TOP_MOVERS, (before.device, after.device)
    )


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
        out.append(
            f"{r['op']} ({r['category']}): {speed} per call, at {r['after_roof']:.0%}{where_a} "
            f"(was {r['before_roof']:.0%}{where_b})."
        )
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
            rel = (
                f" ({'+' if h['relative'] > 0 else ''}{num(h['relative'] * 100)}%)" if h["relative"] is not None else ""
            )
            out.append(
                f"{h['label']}: {fmt(h['before'], h['unit'])} → {fmt(h['after'], h['unit'])}{rel}, {h['verdict']}."
            )
    noise = [h["label"] for h in c.headline if h["verdict"] == "within noise"]
    if noise:
        out.append("Within noise: " + ", ".join(noise) + ".")
    return out


def context_sentence(c: Comparison | dict[str, Any]) -> str | None:
    """ "Not like for like: batch size 1 vs 8; ..." or None when the runs are alike."""
    rows = c.context if isinstance(c, Comparison) else (c.get("context") or [])
    if not rows:
        return None
    parts = [f"{r.get('label') or r['field']} {plain(r['before'])} vs {plain(r['after'])}" for r in rows]
    return "Not like for like: " + "; ".join(parts) + "."


def _batch_sentence(c: Comparison, b: Any, a: Any) -> list[str]:
    """ "Batch 1 → 8: decode produces more tokens per second (...), as a larger batch implies;
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
    fig = f"({fmt(tps['before'], 'tok/s')} → {fmt(tps['after'], 'tok/s')})"
    if tps["verdict"] == "within noise":
        out = f"Batch {b} → {a}: decode produces about as many tokens per second (within noise {fig})"
    else:
        more = tps["delta"] > 0
        out = f"Batch {b} → {a}: decode produces {'more' if more else 'fewer'} tokens per second {fig}"
        if bigger is not None:
            out += ", " + (implies if more == bigger else not_explained)
    if tpot and tpot["delta"] is not None:
        fig = f"({fmt(tpot['before'], 'ms')} → {fmt(tpot['after'], 'ms')})"
        if tpot["verdict"] == "within noise":
            out += f"; each decode step takes about as long (within noise {fig})"
        else:
            longer = tpot["delta"] > 0
            out += f"; each decode step takes {'longer' if longer else 'less time'} {fig}"
            if bigger is not None:
                out += ", " + ("as expected" if longer == bigger else not_explained)
    return [out + "."]
