"""One set of books: the identities every analysis must satisfy, checked on every analysis.

- Per step: duration = GPU busy + GPU idle (integer nanoseconds, exactly), none negative.
- Per step: from its CPU start to its end is its duration plus the time the device spent on
  other work (``previous_ns``, the previous step's; ``unrecorded_ns``, work the trace did not
  record that the step's work waited on; ``next_ns``, the next step's), none negative: that
  time is never its idle.
- Per step of a GPU trace: its idle causes sum to its idle time (exactly).
- Per step: its weights in the phases sum to 1 (a split mixed step's prefill and decode
  parts sum to the step), so the phases sum to the run.
- Per phase: time = busy + idle; over the phases, time sums to the steps' durations.
- Per split mixed step: its prefill and decode GPU parts sum to its busy time.
- Per phase (``check_figures``): its kernel time is the sum of its parts however it is split (by
  bound, limiter, category, cost source, and category x bound both ways), each share set sums to
  1, ``gpu_time_ms`` is busy + idle, its idle causes sum to its idle time and its largest idle
  groups to no more than it.
- Over the phases: the steps' kernel time by bound, FLOPs and bytes are the phases' (a unit's
  phase weights sum to 1), and the trace's kernel time is the phases' plus the work outside steps.
  Two paths compute each side (per-step sums of the work table; per-phase weighted tables), so a
  unit lost or counted twice by either shows here.
- No figure shown is above its roof (``check_roofs``): an MFU, MBU or roof fraction over 100%
  (beyond timing noise), a top kernel's achieved FLOP/s or bytes/s over the peaks, a roofline
  point over its roof, is withheld where it is computed; so is a comparison's fraction of each
  run's own roof (``check_compare_roofs``, on every comparison).

A violation is a bug in tracekit, not in the trace. ``check`` returns the violations as
sentences; ``enforce`` raises them when ``STRICT_ENV`` is set (the test suite and the fuzz
campaign set it) and otherwise lets the analysis carry them as notes, so that a user's
report still comes out and says plainly that its figures do not add up.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from tracekit.analysis.pricing.roofline import above_roof

STRICT_ENV = "TRACEKIT_STRICT_BOOKS"
# Phase figures are float sums of weighted ms: equal to within rounding, not bit for bit.
_REL = 1e-9
_MAX_LISTED = 3  # offending steps named per identity


class BooksError(RuntimeError):
    """The analysis's figures do not add up: a tracekit bug, not the user's input, so not a
    ``TracekitError`` (the fuzz campaign counts it as a crash)."""


def check(
    steps: pd.DataFrame,
    idle_by_step: np.ndarray | None,
    weights: dict[str, np.ndarray],
    phases: dict[str, dict],
    split_by_step: dict[int, dict],
    device_type: str,
) -> list[str]:
    """The violated identities, one sentence each (empty when the books balance)."""
    out: list[str] = []
    if not len(steps):
        return out
    dur = steps["duration_ns"].to_numpy()
    busy = steps["gpu_busy_ns"].to_numpy()
    idle = steps["gpu_idle_ns"].to_numpy()
    _rows(out, (busy < 0) | (idle < 0) | (dur < 0), steps, "negative busy, idle or duration")
    _rows(out, dur != busy + idle, steps, "duration is not GPU busy + GPU idle")
    if "unrecorded_ns" in steps:
        # The time a step's window held beyond its duration is named: the previous step's work
        # after its CPU start, and work the trace did not record that its work waited on.
        terms = [steps[c].to_numpy() for c in ("previous_ns", "unrecorded_ns", "next_ns")]
        span = steps["end_ns"].to_numpy() - steps["cpu_start_ns"].to_numpy()
        _rows(out, np.any([t < 0 for t in terms], axis=0), steps, "negative time on other work")
        _rows(
            out,
            span != dur + sum(terms),
            steps,
            "CPU start to end is not duration + the previous step's, unrecorded and the next step's work",
        )
    if device_type == "gpu" and idle_by_step is not None and len(idle_by_step) == len(steps):
        _rows(out, idle_by_step.sum(axis=1) != idle, steps, "idle causes do not sum to the idle time")
    total_w = np.sum([w for w in weights.values()], axis=0) if weights else np.zeros(len(steps))
    _rows(out, ~np.isclose(total_w, 1.0, rtol=0, atol=1e-9), steps, "phase weights do not sum to 1")
    run_ms = float(dur.sum()) / 1e6
    phase_ms = 0.0
    for p, v in phases.items():
        t, b, i = v.get("time_ms") or 0.0, v.get("gpu_busy_ms") or 0.0, v.get("gpu_idle_ms") or 0.0
        phase_ms += t
        if not _close(t, b + i):
            out.append(f"phase {p}: time {t:.6g} ms is not busy {b:.6g} + idle {i:.6g} ms")
    if not _close(phase_ms, run_ms):
        out.append(f"the phases' time {phase_ms:.6g} ms is not the steps' total {run_ms:.6g} ms")
    for i, s in split_by_step.items():
        parts = sum(float((s.get(p) or {}).get("gpu_ms") or 0.0) for p in ("prefill", "decode"))
        if not _close(parts, float(busy[i]) / 1e6):
            out.append(f"mixed step {i}: its parts {parts:.6g} ms are not its busy time {busy[i] / 1e6:.6g} ms")
    return out


def check_figures(
    phases: dict[str, dict], steps: pd.DataFrame, overall: dict, outside_ms: float, device_type: str
) -> list[str]:
    """The violated identities among a run's phase figures, its steps table and its overall figures."""
    from tracekit.analysis.pricing.roofline import BOUNDS, LIMITERS

    out: list[str] = []
    for p, v in phases.items():
        k = float(v["kernel_ms"])
        for what, parts in (
            ("bound", [v["by_bound"][b] for b in BOUNDS]),
            ("limiter", [v["by_limiter"][m] for m in LIMITERS]),
            ("category", list(v["by_category"].values())),
            ("cost source", list(v["cost_source_ms"].values())),
        ):
            if not _close(float(sum(parts)), k):
                out.append(
                    f"phase {p}: its kernel time by {what} sums to {sum(parts):.6g} ms, not its kernel time {k:.6g} ms"
                )
        cells = v["by_category_bound"]
        for c, row in cells.items():
            if not _close(float(sum(row.values())), float(v["by_category"].get(c, 0.0))):
                out.append(f"phase {p}: category {c}'s time by bound does not sum to its time")
        for b in BOUNDS:
            if not _close(float(sum(row.get(b, 0.0) for row in cells.values())), float(v["by_bound"][b])):
                out.append(f"phase {p}: the {b}-bound time by category does not sum to its {b}-bound time")
        for what in ("by_bound_share", "by_limiter_share", "by_category_share"):
            shares = [x for x in v[what].values() if x is not None]
            if shares and not _close(float(sum(shares)), 1.0):
                out.append(f"phase {p}: its {what} sums to {sum(shares):.6g}, not 1")
        busy, idle = float(v["gpu_busy_ms"]), float(v["gpu_idle_ms"])
        if not _close(float(v["gpu_time_ms"]), busy + idle):
            out.append(f"phase {p}: gpu_time_ms {v['gpu_time_ms']:.6g} is not busy {busy:.6g} + idle {idle:.6g} ms")
        if (
            device_type == "gpu"
            and v.get("idle_by_cause") is not None
            and not _close(float(sum(v["idle_by_cause"].values())), idle)
        ):
            out.append(f"phase {p}: its idle causes do not sum to its idle time {idle:.6g} ms")
        top = float(sum(r["ms"] for r in v.get("idle_top") or []))
        if top > idle and not _close(top, idle):
            out.append(f"phase {p}: its largest idle groups hold {top:.6g} ms, more than its idle time {idle:.6g} ms")
    if len(steps) and phases:
        for b in BOUNDS:
            a, z = float(steps[f"{b}_ms"].sum()), float(sum(v["by_bound"][b] for v in phases.values()))
            if not _close(a, z):
                out.append(f"the steps' {b}-bound kernel time {a:.6g} ms is not the phases' {z:.6g} ms")
        for what in ("flops", "bytes"):
            a, z = float(np.nansum(steps[what].to_numpy(dtype=float))), float(sum(v[what] for v in phases.values()))
            if not _close(a, z):
                out.append(f"the steps' {what} {a:.6g} are not the phases' {z:.6g}")
    k_all = float(overall["kernel_ms"])
    if not _close(float(sum(overall["by_category"].values())), k_all):
        out.append(f"the trace's kernel time by category does not sum to its kernel time {k_all:.6g} ms")
    inside = float(sum(v["kernel_ms"] for v in phases.values()))
    if len(steps) and not _close(inside + outside_ms, k_all):
        out.append(
            f"the trace's kernel time {k_all:.6g} ms is not the phases' {inside:.6g} ms plus the "
            f"{outside_ms:.6g} ms outside steps"
        )
    return out


def check_roofs(
    phases: dict[str, dict], steps: pd.DataFrame, top_kernels: dict[str, list], roofline: dict[str, dict], spec=None
) -> list[str]:
    """Figures shown above their roof (a phase's MFU or MBU, a step's MBU, a top kernel's roof
    fraction or achieved FLOP/s or bytes/s over the device's peaks, a roofline point's fraction
    or achieved FLOP/s over its roof): physically impossible, so never shown as fact; each is
    withheld where it is computed (``roofline.above_roof``), and one that gets through is a
    tracekit bug."""
    out: list[str] = []
    for p, v in phases.items():
        for k in ("mfu", "mbu"):
            if above_roof(v.get(k)):
                out.append(f"phase {p}: its {k.upper()} {v[k]:.3g} is above its roof")
    if len(steps) and "mbu" in steps and above_roof(steps["mbu"].to_numpy(dtype=float)).any():
        out.append("a step's MBU is above the peak bandwidth")
    bw = spec.peak_bandwidth if spec is not None else None
    peaks = [f for unit in (spec.matrix_flops, spec.vector_flops) for f in unit.values()] if spec is not None else []
    for p, rows in top_kernels.items():
        if any(above_roof(r.get("roof_fraction")) for r in rows):
            out.append(f"phase {p}: a top kernel's roof fraction is above its roof")
        if bw and any(above_roof(r["achieved_gbps"] * 1e9 / bw) for r in rows if r.get("achieved_gbps") is not None):
            out.append(f"phase {p}: a top kernel's achieved bandwidth is above the peak bandwidth")
        if peaks and any(
            above_roof(r["achieved_tflops"] * 1e12 / max(peaks)) for r in rows if r.get("achieved_tflops") is not None
        ):
            out.append(f"phase {p}: a top kernel's achieved FLOP/s is above every compute peak")
    for p, r in roofline.items():
        points = r.get("points") or []
        if any(above_roof(x.get("roof_fraction")) for x in points):
            out.append(f"phase {p}: a roofline point's fraction is above its roof")
        if any(
            above_roof(x["achieved_flops"] / x["roof_flops"])
            for x in points
            if x.get("achieved_flops") is not None and x.get("roof_flops")
        ):
            out.append(f"phase {p}: a roofline point is drawn above its roof")
    return out


def check_compare_roofs(phases: dict[str, dict], kernels: dict[str, dict]) -> list[str]:
    """A comparison's fractions of each run's own roof shown above it (a category's, a kernel
    group's): withheld where compare computes them (``tables.group_roof``)."""
    out: list[str] = []
    for p, v in phases.items():
        for side, shares in (v.get("roof") or {}).items():
            if side in ("before", "after") and any(above_roof(x) for x in shares.values()):
                out.append(f"phase {p}: a category's fraction of the {side} run's roof is above it")
    for p, k in kernels.items():
        rows = [
            *k.get("movers", []),
            *k.get("new", []),
            *k.get("vanished", []),
            *(r for c in k.get("categories", []) for r in c.get("top", [])),
        ]
        if any(above_roof(r.get(f"{side}_roof")) for r in rows for side in ("before", "after")):
            out.append(f"phase {p}: a kernel group's fraction of its run's roof is above it")
    return out


def enforce(violations: list[str]) -> list[str]:
    """Raise ``BooksError`` under ``STRICT_ENV``; otherwise the notes the analysis carries."""
    if not violations:
        return []
    if os.environ.get(STRICT_ENV):
        raise BooksError("the analysis's books do not balance (a tracekit bug): " + "; ".join(violations))
    return [f"tracekit bug, please report it: {v}" for v in violations]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b), 1e-3)


def _rows(out: list[str], bad: np.ndarray, steps: pd.DataFrame, what: str) -> None:
    where = np.flatnonzero(bad)
    if len(where):
        named = ", ".join(str(int(s)) for s in steps["step"].to_numpy()[where[:_MAX_LISTED]])
        more = f" and {len(where) - _MAX_LISTED} more" if len(where) > _MAX_LISTED else ""
        out.append(f"{what} in step{'s' if len(where) > 1 else ''} {named}{more}")
