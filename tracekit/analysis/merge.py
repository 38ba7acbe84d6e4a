"""The analyses of one trace's windows (``tracekit split``) -> one ``Analysis`` of the whole run.

``split`` cuts only between steps, and every kernel goes with its launch, so each step is
whole in one window and the run's figures are sums over the windows' steps and kernels:

- the steps tables are concatenated in window order and numbered again from 0;
- each window's units of work are kept summed by kind (``compact``: one row per kernel name,
  phase, category, bound, cost source, dtype, ...), and the per-phase figures (time, busy,
  idle, kernel time by bound, category and source, FLOPs, bytes, MFU, MBU) and the top
  kernels are computed from those sums as ``assemble`` computes them from the units;
- latency figures (step-time percentiles, tokens/s, TTFT/TPOT) come from the merged steps
  table, idle causes from each step's, so the books (``analysis.books``) are checked again.

Memory holds one window's analysis at a time plus those sums (bounded by the number of
distinct kernel names, not kernels) and the steps table.

What cannot be summed exactly is taken honestly and named in ``provenance["windows"]``:
the timelines (the slowest step's from its window; the typical step's from the window whose
own typical step is nearest the run's median), the roofline points of each phase (from the
window holding the phase's slowest step: each window caps its points), the largest idle
intervals (the windows' groups summed: a group below a window's top rows is missed there),
the idle causes of each window's first step (Python frames are routed by their start, so
an outer frame begun in an earlier window no longer covers its lead-in: host idle there reads
as unattributed, a few microseconds a window), and the findings' order (the fusion advice, whose chains of back-to-back kernels are summed
over the windows, is placed among the advice by the time it saves).

Reading and analysing the windows in their run's context, one at a time (``analyse_windows``),
and splitting a trace so that its inferred steps stay whole, is ``analysis.windows``.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import numpy as np
import pandas as pd

from tracekit.analysis import books, measurement
from tracekit.analysis.figures import metrics_of, phase_figures, phase_reasons, profiler_ratios
from tracekit.analysis.findings import rules as find
from tracekit.analysis.findings.advice import MIN_AT_STAKE, compiled, fusable_runs, fusion_finding
from tracekit.analysis.model import Analysis, Finding
from tracekit.analysis.steps.latency import latency, step_weights
from tracekit.analysis.steps.mixed import passenger_view, phase_weights, split_fraction
from tracekit.analysis.steps.segment import Segmentation
from tracekit.analysis.tables import TOP_KERNELS, estimates_by_name, kernel_row, roof_sums
from tracekit.analysis.waiting.idle import CAUSES, TOP
from tracekit.errors import TracekitError
from tracekit.frameworks import DECODE, SOURCE_NONE, SOURCE_ORDER

_SUMS = ("dur_ns", "flops", "bytes", "units", "roof_x_dur", "known_dur")
# Per-unit figures that are not sums: left out of the compact table (its rows are groups).
_PER_UNIT = {
    "start_ns",
    "end_ns",
    "op",
    "launch",
    "stream",
    "ctas",
    "issue_ns",
    "issue_tid",
    "step",
    "pricing_op",
    "intensity",
    "achieved_flops",
    "achieved_bw",
    "roof_fraction",
    "roof_fraction_achievable",
}
# (The peaks a unit was priced against, ``peak_flops`` and the like, are its dtype's: they stay
# as keys, few distinct.)


def compact(work: pd.DataFrame) -> pd.DataFrame:
    """Units of work summed by every descriptive column (name, phase, category, bound, cost
    source, dtype, ...): time, FLOPs, bytes, units, and the roof fraction weighted by time.
    Known and unknown FLOPs, bytes and roof fractions stay apart, so per-phase unknown-cost
    shares and time-weighted roof fractions come out as from the units."""
    keys = [c for c in work.columns if c not in _PER_UNIT and c not in ("dur_ns", "flops", "bytes")]
    roof = work["roof_fraction"].to_numpy(dtype=float) if "roof_fraction" in work else np.full(len(work), np.nan)
    dur = work["dur_ns"].to_numpy(dtype=float)
    known = ~np.isnan(roof)
    extra = {
        "inside": work["step"].to_numpy() >= 0,
        "has_roof": known,
        "flops_known": ~np.isnan(work["flops"].to_numpy(dtype=float)),
        "bytes_known": ~np.isnan(work["bytes"].to_numpy(dtype=float)),
    }
    frame = pd.DataFrame(
        {
            **{
                c: work[c].to_numpy()
                if pd.api.types.is_numeric_dtype(work[c]) or pd.api.types.is_bool_dtype(work[c])
                else work[c].to_numpy(dtype=object)
                for c in keys
            },
            **extra,
        }
    )
    frame["dur_ns"], frame["flops"], frame["bytes"] = (
        dur,
        work["flops"].to_numpy(dtype=float),
        work["bytes"].to_numpy(dtype=float),
    )
    frame["units"] = 1.0
    frame["roof_x_dur"] = np.where(known, roof * dur, 0.0)
    frame["known_dur"] = np.where(known, dur, 0.0)
    return _regroup(frame)


def _regroup(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in frame.columns if c not in _SUMS]
    if not len(frame):
        return frame
    gid = np.zeros(len(frame), dtype=np.int64)
    for c in keys:
        codes, uniques = pd.factorize(frame[c].to_numpy(), use_na_sentinel=False)
        gid = gid * (len(uniques) + 1) + codes
    groups, first, inverse = np.unique(gid, return_index=True, return_inverse=True)
    out = frame.iloc[first][keys].reset_index(drop=True)
    for c in _SUMS:
        v = frame[c].to_numpy(dtype=float)
        out[c] = np.bincount(inverse, weights=np.nan_to_num(v), minlength=len(groups))
    for c, flag in (("flops", "flops_known"), ("bytes", "bytes_known")):
        out[c] = np.where(out[flag].to_numpy(dtype=bool), out[c], np.nan)
    return out


def _as_work(c: pd.DataFrame) -> pd.DataFrame:
    """The compact rows in the columns the figures and findings read of a work table: each
    row its own step (inside a step) so that no chain of kernels is invented across rows."""
    w = c.copy()
    inside = w["inside"].to_numpy(dtype=bool)
    w["step"] = np.where(inside, np.arange(len(w)), -1)
    w["start_ns"] = 0
    w["stream"] = 0
    with np.errstate(invalid="ignore", divide="ignore"):
        w["roof_fraction"] = np.where(w["has_roof"].to_numpy(dtype=bool), w["roof_x_dur"] / w["known_dur"], np.nan)
    w["prefill_share"] = w["prefill_share"].astype(float) if "prefill_share" in w else np.nan
    w["graph"] = w["graph"].astype(bool) if "graph" in w else False
    return w


def _top_kernels(w: pd.DataFrame, weight: np.ndarray | None = None, spec=None) -> list[dict[str, Any]]:
    """``analyze``'s top-kernel rows from compact rows (calls are the units summed; a name's
    bound, limiter, cost source and peak note its most common, by units)."""
    if weight is not None:
        keep = weight > 0
        w = w[keep].assign(
            dur_ns=w["dur_ns"].to_numpy()[keep] * weight[keep],
            flops=w["flops"].to_numpy()[keep] * weight[keep],
            bytes=w["bytes"].to_numpy()[keep] * weight[keep],
            roof_x_dur=w["roof_x_dur"].to_numpy()[keep] * weight[keep],
            known_dur=w["known_dur"].to_numpy()[keep] * weight[keep],
        )
    if not len(w):
        return []
    w = w.assign(name=w["name"].astype(str))
    total = w["dur_ns"].sum()
    g = w.groupby("name")
    # A compact row's units all have a roof fraction or none (``has_roof`` is a key), so its
    # ``roof_fraction`` x ``dur_ns`` is its ``roof_x_dur``: the units' sums, as ``analyze`` takes them.
    sums = {k: pd.Series(v, index=w.index).groupby(w["name"]).sum() for k, v in roof_sums(w).items()}
    table = (
        pd.DataFrame(
            {
                "calls": g["units"].sum(),
                "total_ns": g["dur_ns"].sum(),
                "flops": g["flops"].sum(min_count=1),
                "bytes": g["bytes"].sum(min_count=1),
                "category": _mode(w, "category"),
                "bound": _mode(w, "bound"),
                "limiter": _mode(w, "limiter"),
                "cost_source": _mode(w, "cost_source"),
                "peak_note": _mode(w, "peak_note") if "peak_note" in w else None,
                "estimate": estimates_by_name(w),  # compact rows keep the estimate as a key, bytes summed
                **sums,
            }
        )
        .sort_values("total_ns", ascending=False, kind="stable")
        .head(TOP_KERNELS)
    )
    return [kernel_row(name, r, total, spec) for name, r in table.iterrows()]


def _mode(w: pd.DataFrame, col: str) -> pd.Series:
    """Per name, the value of ``col`` most units have; on a tie the one that sorts first."""
    values = w[col].astype(object).where(w[col].notna(), None)
    counts = (
        pd.DataFrame({"name": w["name"], "v": values.fillna("\0none"), "n": w["units"]})
        .groupby(["name", "v"])["n"]
        .sum()
    )
    best = counts.groupby(level=0).idxmax().map(lambda key: key[1])
    return best.where(best != "\0none", None)


class _Acc:
    """What the merge keeps of the windows seen so far."""

    def __init__(self) -> None:
        self.steps: list[pd.DataFrame] = []
        self.fraction: list[np.ndarray] = []
        self.idle: list[np.ndarray] = []
        self.work: pd.DataFrame | None = None
        self.idle_top: dict[str, dict[tuple, dict]] = {}
        self.slowest: dict[str, tuple[float, int, dict | None]] = {}  # phase -> (ms, window, roofline)
        self.timelines: list[tuple[int, float, dict]] = []  # (window, t0 ns, timeline)
        self.fusion: dict[str, list] = {}  # phase -> [ms saved, chains, kernels] (advice.fusable_runs)
        self.first: Analysis | None = None
        self.n = 0
        self.windows: list[dict] = []
        self.notes: list[str] = []
        self.lacks: dict = {}
        self.outside = {"units": 0, "ms": 0.0}
        self.why_unknown: dict[str, float] = {}
        self.unmatched: list[str] = []
        self.events = self.bytes = 0
        self.sources: list[str] = []
        self.truncated: dict | None = None
        self.graph_capture = self.ceilings = self.richer_trace = None
        self.had_ranks = False  # a window showed the run's ranks (their view is not merged)


def merge(analyses: Iterable[Analysis], spec=None, folder: str | None = None) -> Analysis:
    """One ``Analysis`` of the run from its windows' (in order), ``spec`` the device row
    they were priced against. Each window is folded in and let go, so ``analyses`` may be a
    generator that analyses one window at a time."""
    acc = _Acc()
    for i, a in enumerate(analyses, start=1):
        _fold(acc, a, i)
    if acc.first is None:
        raise TracekitError("no windows to merge")
    return _assemble(acc, acc.first, spec, folder)


def _fold(acc: _Acc, a: Analysis, i: int) -> None:
    if acc.first is None:
        acc.first = a
    s = a.steps.copy()
    n = len(s)
    t0 = int(s["cpu_start_ns"].min()) if n else 0
    s["step"] = s["step"].to_numpy() + acc.n
    s["window"] = i
    acc.steps.append(s)
    frac = np.full(n, np.nan)
    causes = np.zeros((n, len(CAUSES)), dtype=np.int64)
    for j, (split, c) in enumerate(zip(s["split"], s["idle_by_cause"])):
        if split:
            frac[j] = split_fraction(split)
        if c:
            causes[j] = [int(round(float(c.get(k) or 0.0) * 1e6)) for k in CAUSES]
    acc.fraction.append(frac)
    acc.idle.append(causes)
    mine = compact(a.work)
    acc.work = mine if acc.work is None else _regroup(pd.concat([acc.work, mine], ignore_index=True))
    for p, v in a.phases.items():
        groups = acc.idle_top.setdefault(p, {})
        for r in v.get("idle_top") or []:
            key = (r.get("cause"), r.get("call"), r.get("op"), tuple(r.get("stack") or ()))
            row = groups.setdefault(key, {**r, "ms": 0.0, "count": 0})
            row["ms"] += float(r.get("ms") or 0.0)
            row["count"] += int(r.get("count") or 0)
        held = s.loc[s["phase"] == p, "duration_ns"]
        ms = float(held.max()) / 1e6 if len(held) else 0.0
        if p not in acc.slowest or ms > acc.slowest[p][0]:
            acc.slowest[p] = (ms, i, a.roofline.get(p))
    for tl in a.timelines:
        acc.timelines.append((i, t0, {**tl, "step": int(tl["step"]) + acc.n}))
    # Chains of fusible kernels never cross a step, so never a window: their savings add up.
    phase, share = a.work["phase"].to_numpy(), a.work["prefill_share"].to_numpy(dtype=float)
    for p in a.phases:
        weight = phase_weights(phase, share, p)
        keep = weight > 0
        saved, runs, count = fusable_runs(a.work[keep], weight[keep])
        have = acc.fusion.setdefault(p, [0.0, 0, 0])
        have[0] += saved
        have[1] += runs
        have[2] += count
    prov = a.provenance
    acc.notes += [x for x in prov.get("notes") or [] if x not in acc.notes]
    acc.lacks.update(prov.get("lacks") or {})
    o = prov.get("outside_steps") or {}
    acc.outside["units"] += int(o.get("units") or 0)
    acc.outside["ms"] += float(o.get("ms") or 0.0)
    for k, v in (prov.get("unknown_bound_ms_by_reason") or {}).items():
        acc.why_unknown[k] = acc.why_unknown.get(k, 0.0) + float(v)
    acc.unmatched += [k for k in prov.get("unmatched_kernels") or [] if k not in acc.unmatched]
    acc.graph_capture = acc.graph_capture or prov.get("graph_capture")
    acc.richer_trace = acc.richer_trace or prov.get("richer_trace")
    acc.had_ranks = acc.had_ranks or bool(a.ranks)
    acc.ceilings = acc.ceilings or prov.get("ceilings")
    acc.truncated = a.truncated or acc.truncated
    acc.events += int(a.source.get("events") or 0)
    acc.bytes += int(a.source.get("bytes") or 0)
    acc.sources.append(a.phase_source)
    acc.windows.append({"index": i, "file": a.source.get("name"), "steps": n, "window": a.source.get("window")})
    acc.n += n


def _assemble(acc: _Acc, a0: Analysis, spec, folder: str | None) -> Analysis:
    steps = pd.concat(acc.steps, ignore_index=True) if acc.steps else a0.steps
    fraction = np.concatenate(acc.fraction) if acc.fraction else np.zeros(0)
    by_step = np.concatenate(acc.idle) if acc.idle else np.zeros((0, len(CAUSES)), dtype=np.int64)
    known = [s for s in acc.sources if s in SOURCE_ORDER and s != SOURCE_NONE]
    source = min(known, key=SOURCE_ORDER.index) if known else a0.phase_source
    device_type = a0.provenance.get("device_type") or "gpu"
    run_kind = a0.run_kind if not len(steps) else "inference"
    work = _as_work(acc.work) if acc.work is not None and len(acc.work) else _as_work(compact(a0.work.iloc[:0]))
    seg = Segmentation(run_kind, device_type, work, steps, source, list(acc.notes))
    lat = latency(seg, fraction, by_step[:, 1] if len(steps) else None)
    withheld = (a0.model or {}).get("withheld")
    weights = step_weights(steps, fraction)
    phases = phase_figures(work, lat, spec, withheld, passenger_view(steps, weights[DECODE]))
    units = work["units"].to_numpy(dtype=float)
    for p, v in phases.items():
        keep = phase_weights(work["phase"].to_numpy(), work["prefill_share"].to_numpy(dtype=float), p) > 0
        v["kernels"] = int(round(units[keep].sum()))  # (each compact row is many units)
        total = (by_step * weights[p][:, None]).sum(axis=0) if len(by_step) else np.zeros(len(CAUSES))
        v["idle_by_cause"] = {c: float(total[j]) / 1e6 for j, c in enumerate(CAUSES)}
        rows = sorted((acc.idle_top.get(p) or {}).values(), key=lambda r: -r["ms"])[:TOP]
        for r in rows:
            r["share"] = float(r["ms"] / v["time_ms"]) if v["time_ms"] else None
        v["idle_top"] = rows
    split_by_step = {int(k): sp for k, sp in zip(steps["step"], steps["split"]) if sp} if len(steps) else {}
    overall_ms = float(work["dur_ns"].sum() / 1e6)
    by_cat = work.groupby(work["category"].astype(str))["dur_ns"].sum().sort_values(ascending=False) / 1e6
    overall = {
        "kernel_ms": overall_ms,
        "kernels": int(round(units.sum())),
        "by_category": {str(k): float(v) for k, v in by_cat.items()},
        "by_category_share": {str(k): (float(v) / overall_ms if overall_ms else None) for k, v in by_cat.items()},
        "top_kernels": _top_kernels(work, spec=spec),
    }
    w_phase = work["phase"].to_numpy()
    w_share = work["prefill_share"].to_numpy(dtype=float)
    top = {p: _top_kernels(work, phase_weights(w_phase, w_share, p), spec) for p in phases}
    notes = books.enforce(
        books.check(steps, by_step, weights, phases, split_by_step, device_type)
        + books.check_figures(phases, steps, overall, acc.outside["ms"], device_type)
        # the merged roofline's points are a window's own, checked in its analysis
        + books.check_roofs(phases, steps, top, {}, spec)
    )
    metrics = metrics_of(lat, phases)
    metrics["unprofiled"] = profiler_ratios(a0.metrics.get("unprofiled"), metrics)
    k = len(acc.windows)
    roofline, taken = {}, {}
    for p in phases:
        _, i, roof = acc.slowest.get(p, (None, None, None))  # None: no window holds the phase
        roofline[p] = roof or {"points": [], "roofs": None, "reason": "no window holds this phase's roofline"}
        taken[f"roofline.{p}"] = i
    timelines = _timelines(acc, steps)
    for tl in timelines:
        taken[f"timeline.{tl['why']}"] = int(tl.get("window") or 0)
    prov = dict(a0.provenance)
    reasons = {
        k2: v
        for k2, v in (prov.get("reasons") or {}).items()
        if not (k2.endswith("_mfu") or k2.endswith("_mbu") or k2 in lat.__dict__)
    }
    reasons.update(lat.reasons)
    reasons.update(phase_reasons(phases))
    why_unknown = dict(sorted(acc.why_unknown.items(), key=lambda kv: -kv[1])[:8])
    cut = next((w["window"].get("cut") for w in acc.windows if isinstance(w["window"], dict)), None)
    merged_note = (
        f"merged from {k} windows of one trace (tracekit split{', cut ' + cut if cut else ''}): steps, "
        "phases, kernel aggregates and percentiles are the whole run's; the roofline points and timelines "
        "are taken from single windows and the largest idle intervals summed from each window's largest "
        "(provenance.windows says which); a window's first step may read a few microseconds of host "
        "idle as unattributed, where the Python frames that covered it began in an earlier window"
    )
    prov.update(
        {
            "notes": [merged_note] + acc.notes + notes,
            "lacks": acc.lacks,
            "reasons": reasons,
            "outside_steps": acc.outside,
            "unknown_bound_ms_by_reason": why_unknown,
            "unmatched_kernels": acc.unmatched[:50],
            "windows": {
                "count": k,
                "files": [w["file"] for w in acc.windows],
                "steps_per_window": [w["steps"] for w in acc.windows],
                "cut": cut,
                # Figures that are not sums over the windows, and the window each was taken from.
                "taken_from_window": taken,
                "merged_approximately": {
                    "idle_top": "each window's largest idle groups, summed: a group below a window's top rows is missed there",
                    "unknown_bound_ms_by_reason": "each window's largest reasons, summed",
                    "roofline": "each phase's points from the window holding its slowest step",
                    "timelines": "the slowest step's from its window; the typical step's from the window whose own "
                    "typical step is nearest the run's median",
                },
            },
        }
    )
    # The step replay runs on one trace's dependencies; the windows' graphs are not joined.
    not_merged = {
        "replay": "the step replay (what would help, replayed; the critical path) is not merged across "
        "windows: the findings' time at stake is the time their cause involves, summed "
        '(at_stake_basis "sum"); report a window, or the whole trace, for replayed savings'
    }
    if acc.had_ranks:
        # Per-rank figures (waits, skew, the straggler) need every rank's whole steps at once.
        why = (
            "the per-rank view (ranks, their waits and the missing ranks) is not merged across windows: "
            "report the whole trace, or the folder of per-rank traces, for it"
        )
        not_merged["ranks"] = why
        prov["notes"].append(why)
    prov["windows"]["not_merged"] = not_merged
    for key, value in (
        ("graph_capture", acc.graph_capture),
        ("ceilings", acc.ceilings),
        ("richer_trace", acc.richer_trace),
    ):
        if value:
            prov[key] = value
    name = os.path.basename(os.path.normpath(folder)) if folder else a0.source.get("name")
    merged = Analysis(
        source={
            **{k2: v for k2, v in a0.source.items() if k2 != "window"},
            "path": folder or a0.source.get("path"),
            "files": [w["file"] for w in acc.windows],
            "name": name,
            "events": acc.events,
            "bytes": acc.bytes,
        },
        device=a0.device,
        workload=a0.workload,
        run_kind=run_kind,
        phase_source=source,
        steps=steps,
        work=work,
        phases=phases,
        metrics=metrics,
        findings=[],
        provenance={k2: v for k2, v in prov.items() if k2 != "phase_source"},
        top_kernels=top,
        roofline=roofline,
        overall=overall,
        model=a0.model,
        timelines=timelines,
        truncated=acc.truncated,
        measurement=a0.measurement,
    )
    # The fusion advice reads the units' order, which the sums do not keep (each compact row is
    # its own step, so ``advice`` finds no chain in them): from the windows' chains instead.
    merged.findings = measurement.mark(_place(find.findings(merged), _fusion(merged, acc)), merged.measurement)
    return merged


def _place(found: list, fusion: list) -> list:
    """The fusion advice where ``advice`` puts it: among the advice, by time at stake."""
    if not fusion:
        return found
    advice_ids = [j for j, f in enumerate(found) if f.at_stake_ms is not None]
    at = next((j for j in advice_ids if (found[j].at_stake_ms or 0) < fusion[0].at_stake_ms), None)
    if at is None:
        at = advice_ids[-1] + 1 if advice_ids else 0
    return found[:at] + fusion + found[at:]


def _timelines(acc: _Acc, steps: pd.DataFrame) -> list[dict]:
    """The slowest step's timeline, and the typical step's nearest the run's median, with
    times from the run's first step (each window's are from its own)."""
    if not acc.timelines or not len(steps):
        return []
    t0 = int(steps["cpu_start_ns"].min())
    dur = steps.set_index("step")["duration_ns"]
    with_work = steps[steps["kernels"] > 0]
    median = float(np.median(with_work["duration_ns"])) if len(with_work) else 0.0
    slowest = int(with_work["step"].iat[int(np.argmax(with_work["duration_ns"].to_numpy()))]) if len(with_work) else -1

    def placed(i, w0, tl, why):
        return {**tl, "why": why, "window": i, "start_ms": float(tl["start_ms"]) + (w0 - t0) / 1e6}

    out = []
    slow = [x for x in acc.timelines if x[2]["step"] == slowest]
    if slow:
        i, w0, tl = slow[0]
        out.append(placed(i, w0, tl, "slowest step"))
    rest = [x for x in acc.timelines if x[2]["step"] != slowest]
    if rest:
        i, w0, tl = min(rest, key=lambda x: abs(float(dur.get(x[2]["step"], 0)) - median))
        out.append(placed(i, w0, tl, f"typical step (nearest the median duration; window {i})"))
    return out


def _fusion(merged: Analysis, acc: _Acc) -> list[Finding]:
    """``advice``'s fusion advice from the windows' chains summed (the units' order, which
    ``advice`` reads, is not kept in the sums), under the threshold ``advice`` applies to all advice."""
    out = []
    for phase, p in merged.phases.items():
        saved, runs, count = acc.fusion[phase]  # every window's phases have their chains (_fold)
        if saved < MIN_AT_STAKE * (p.get("time_ms") or 0.0):
            continue
        w = merged.work[
            phase_weights(merged.work["phase"].to_numpy(), merged.work["prefill_share"].to_numpy(dtype=float), phase)
            > 0
        ]
        if not compiled(merged, w):
            out += fusion_finding(phase, p, saved, runs, count)
    return out
