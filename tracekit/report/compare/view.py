"""The view-model of a comparison, built from ``Comparison.to_dict()``.

Like ``tracekit.report.view``: plain dicts and lists of display text, every number
looked up in the JSON contract and formatted here; nothing is computed (verdicts,
noise, explanations and roof fractions all come from ``tracekit.compare.comparison``).
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt
from tracekit.report.output import report_stem
from tracekit.report.view import BOUND_LABELS, WITHHELD_LABELS, marked, phase_label, phase_source_text

SIDES = ("before", "after")
VERDICT_CLASS = {"better": "better", "worse": "worse", "within noise": "noise", "not comparable": "na"}
BOUND_ORDER = ("compute", "memory", "interconnect", "unknown", "idle")
_WORKLOAD = (
    ("model", "model"),
    ("batch", "batch"),
    ("prompt_len", "prompt"),
    ("new_tokens", "new tokens"),
    ("decode_steps", "decode steps"),
    ("prefill_tokens", "prompt tokens per prefill"),
    ("dtype", "dtype"),
)


def title_label(data: dict[str, Any]) -> str:
    return f"{_name(data['before'])} vs {_name(data['after'])}"


def _name(side: dict[str, Any]) -> str:
    src = side.get("source") or {}
    return str(src.get("name") or src.get("path") or "trace")


def device_word(data: dict[str, Any]) -> str:
    types = {(data[s].get("device") or {}).get("type") for s in SIDES}
    return "CPU" if types == {"cpu"} else "GPU"


def same_device(data: dict[str, Any]) -> bool:
    return all(
        (data["before"].get("device") or {}).get(k) == (data["after"].get("device") or {}).get(k)
        for k in ("name", "spec")
    )


def tag(data: dict[str, Any], side: str) -> str:
    """A short distinct label for one run, for chart rows and column heads: the spec row
    (or device) when the devices differ, else the trace's file stem."""
    s = data[side]
    dev = s.get("device") or {}
    what = report_stem(_name(s)) if same_device(data) else (dev.get("spec") or dev.get("name") or "unknown device")
    what = str(what)
    return f"{side}: {what[:40] + '…' if len(what) > 41 else what}"


def roof_of(data: dict[str, Any], side: str) -> str:
    """Whose roof a side's "% of roof" is against: "H100 SXM" or "no spec row"."""
    return (data[side].get("device") or {}).get("spec") or "no spec row"


# --- values -------------------------------------------------------------------------------


def value(x: float | None, unit: str) -> str:
    if x is None:
        return fmt.MISSING
    if unit == "ms":
        return fmt.ms(x)
    if unit == "":
        return fmt.pct(x)
    return fmt.per_s(x, unit)


def signed(x: float | None, unit: str) -> str:
    """A change: "+1.59 ms", "-1,115 tok/s", "+23.9 pp" (percentage points for shares)."""
    if x is None:
        return fmt.MISSING
    sign = "+" if x > 0 else ""
    if unit == "":
        return f"{sign}{fmt.num(x * 100)} pp"
    return f"{sign}{fmt.num(x)}{' ' + unit if unit else ''}"


def rel(x: float | None) -> str:
    if x is None:
        return fmt.MISSING
    return ("+" if x > 0 else "") + fmt.pct(x)


def speedup(x: float | None) -> str:
    """before time / after time as "1.6x faster" or "2.3x slower"."""
    if not x:
        return fmt.MISSING
    if abs(x - 1) < 0.005:
        return "same speed"
    return f"{fmt.num(x, 2)}x faster" if x >= 1 else f"{fmt.num(1 / x, 2)}x slower"


def _plain(v: Any) -> str:
    if isinstance(v, float) and abs(v) >= 1e6:
        return f"{v:.3g}"
    return fmt.plain(v)


# --- pieces -------------------------------------------------------------------------------


def run_header(data: dict[str, Any], side: str) -> dict[str, Any]:
    s = data[side]
    src = s.get("source") or {}
    dev = s.get("device") or {}
    work = s.get("workload") or {}
    return {
        "side": side,
        "tag": tag(data, side),
        "name": _name(s),
        "path": src.get("path"),
        "events": fmt.count(src.get("events")),
        "device": dev.get("name") or "unknown",
        "device_type": dev.get("type"),
        "spec": dev.get("spec"),
        "spec_how": dev.get("how"),
        "spec_reason": dev.get("reason"),
        "peak_basis": dev.get("peak_basis"),
        "peak_bandwidth": fmt.bandwidth(dev.get("peak_bandwidth")),
        "phase_source": phase_source_text(s.get("phase_source")),
        "run_kind": s.get("run_kind"),
        "steps": ", ".join(f"{n} {phase_label(p).lower()}" for p, n in (s.get("steps") or {}).items()) or "none",
        "workload": [{"label": label, "value": _plain(work[k])} for k, label in _WORKLOAD if work.get(k) is not None],
        # Repeated runs of this side (the first is the one detailed): their names, when more than one.
        "runs": [str(r.get("name") or r.get("path") or "trace") for r in s.get("runs") or []]
        if len(s.get("runs") or []) > 1
        else [],
    }


def _context_value(field: str, v: Any) -> str:
    if v is None:
        return "unknown"
    if field == "gemm_flops_per_token" and isinstance(v, (int, float)):
        return fmt.si(v, "FLOP")
    return _plain(v)


def context(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "field": r["field"],
            "label": r.get("label") or r["field"],
            "before": _context_value(r["field"], r["before"]),
            "after": _context_value(r["field"], r["after"]),
            "note": r.get("note") or "",
        }
        for r in data.get("context") or []
    ]


def headline(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for h in data.get("headline") or []:
        unit = h.get("unit") or ""
        verdict = h.get("verdict") or "not comparable"
        basis = h.get("noise_basis") or h.get("reason") or ""
        out.append(
            {
                "key": h["key"],
                "label": h["label"],
                "better": f"{h.get('better')} is better",
                # Marked as the report marks it ("≤ 43.6%") where the figure is a bound.
                "before": marked(value(h.get("before"), unit), (h.get("estimate") or {}).get("before")),
                "after": marked(value(h.get("after"), unit), (h.get("estimate") or {}).get("after")),
                "delta": signed(h.get("delta"), unit),
                "relative": rel(h.get("relative")),
                "verdict": verdict,
                "verdict_class": VERDICT_CLASS.get(verdict, "na"),
                "basis": basis,
                "noise": signed(h.get("noise"), unit).lstrip("+") if h.get("noise") is not None else None,
                # "+2.1% to +9.8%": the 95 % interval of the relative change, where steps give one.
                "interval": _interval_text(h.get("interval")),
                # What the interval resampled (within one run, or runs and steps) and how a side of
                # several runs became one figure.
                "interval_basis": (h.get("interval") or {}).get("basis")
                or "no interval: a figure measured once per run",
                "figure_basis": _figure_basis(h.get("basis")),
                # Why an efficiency verdict disagrees with its latency's, when it does.
                "disagreement": h.get("disagreement"),
            }
        )
    return out


def _figure_basis(basis: dict[str, Any] | None) -> str:
    """ "before 3 runs: over the pooled steps (192 steps); after ..." or "" with one run a side."""
    parts = [f"{side} {basis[side]}" for side in SIDES if basis and basis.get(side) and basis[side] != "one run"]
    return "; ".join(parts)


def _interval_text(iv: dict[str, Any] | None) -> str:
    r = (iv or {}).get("relative")
    return f"{rel(r[0])} to {rel(r[1])}" if r else fmt.MISSING


GATE_CLASS = {"fail": "worse", "pass": "better", "noise": "noise", "missing": "na"}
GATE_MARK = {"fail": "❌ fail", "pass": "✅ pass", "noise": "〰️ within noise", "missing": "⚠️ missing"}


def gates(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The --fail-if gates as judged (``gates[]``): expression, threshold, change, interval, verdict."""
    out = []
    for g in data.get("gates") or []:
        unit = g.get("unit") or ""

        def show(x: float | None, unit: str = unit) -> str:
            return rel(x) if unit == "%" else signed(x, unit)

        iv = g.get("interval")
        out.append(
            {
                "expr": g["expr"],
                "metric": g["metric"],
                "threshold": show(g.get("threshold")),
                "change": show(g.get("change")),
                "interval": f"{show(iv[0])} to {show(iv[1])}" if iv else fmt.MISSING,
                "verdict": g["verdict"],
                "mark": GATE_MARK.get(g["verdict"], g["verdict"]),
                "verdict_class": GATE_CLASS.get(g["verdict"], "na"),
                "sentence": g.get("sentence") or "",
            }
        )
    return out


def _trend(delta: float | None) -> str:
    """CSS class of a time change: more time is "up" (red), less is "down" (green)."""
    if not delta:
        return "flat"
    return "up" if delta > 0 else "down"


def _ms_rows(rows: list[dict[str, Any]], labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [
        {
            "name": (labels or {}).get(r["name"], r["name"]),
            "key": r["name"],
            "before": fmt.ms(r.get("before_ms")),
            "after": fmt.ms(r.get("after_ms")),
            "delta": signed(r.get("delta_ms"), "ms"),
            "relative": rel(r.get("relative")),
            "trend": _trend(r.get("delta_ms")),
        }
        for r in rows
    ]


def phases(data: dict[str, Any], chart_ids: dict[str, dict[str, str | None]] | None = None) -> list[dict[str, Any]]:
    word = device_word(data)
    bound_labels = {**BOUND_LABELS, "idle": f"{word} idle"}
    out = []
    for phase, p in (data.get("phases") or {}).items():
        t = p.get("time_ms") or {}
        steps = p.get("steps") or {}
        per = p.get("basis") == "per step"
        roofs = p.get("roof") or {}
        held = roofs.get("withheld") or {}
        ms = {r["name"]: max(r["before_ms"], r["after_ms"]) for r in p.get("by_category") or []}
        cats = sorted(
            set(roofs.get("before") or {}) | set(roofs.get("after") or {}) | {c for v in held.values() for c in v},
            key=lambda c: (-ms.get(c, 0.0), c),
        )
        out.append(
            {
                "phase": phase,
                "label": phase_label(phase) if phase != "all" else "Whole trace",
                "present": p.get("present") or {},
                "basis": p.get("basis"),
                "per_step": per,
                "steps": {s: fmt.count(steps.get(s)) if steps.get(s) else fmt.MISSING for s in SIDES},
                "time": {s: fmt.ms(t.get(s)) for s in SIDES},
                "time_delta": signed(t.get("delta"), "ms"),
                "per_step_time": {s: fmt.ms(t.get(f"{s}_per_step")) for s in SIDES},
                "explanation": list(p.get("explanation") or []),
                "by_bound": _ms_rows(
                    sorted(
                        p.get("by_bound") or [],
                        key=lambda r: BOUND_ORDER.index(r["name"]) if r["name"] in BOUND_ORDER else 9,
                    ),
                    bound_labels,
                ),
                "by_category": _ms_rows(p.get("by_category") or []),
                "roof": [
                    {
                        "category": c,
                        **{s: _roof_text((roofs.get(s) or {}).get(c), (held.get(s) or {}).get(c)) for s in SIDES},
                        **{f"{s}_note": ((held.get(s) or {}).get(c) or {}).get("reason") for s in SIDES},
                    }
                    for c in cats
                ],
                "roof_withheld": [
                    {"name": c, "side": s, "reason": v["reason"]}
                    for c in cats
                    for s in SIDES
                    if (v := (held.get(s) or {}).get(c))
                ],
                "charts": (chart_ids or {}).get(phase, {}),
            }
        )
    return out


KERNEL_WIDTH = 44  # characters of a kernel name in the tables; the full name is on hover


def _cut(name: str | None) -> str | None:
    if name is None or len(name) <= KERNEL_WIDTH:
        return name
    return name[: KERNEL_WIDTH - 1].rstrip() + "…"


def _kernel_row(r: dict[str, Any]) -> dict[str, Any]:
    def calls(n):
        return f"{fmt.count(n)} call{'s' if n != 1 else ''}" if n else ""

    return {
        "category": r.get("category"),
        "op": r.get("op"),
        "op_short": _cut(r.get("op")),
        "before_kernel": _cut(r.get("before_kernel")),
        "after_kernel": _cut(r.get("after_kernel")),
        "before_full": r.get("before_kernel_full") or r.get("before_kernel") or "",
        "after_full": r.get("after_kernel_full") or r.get("after_kernel") or "",
        "before_more": (r.get("before_kernels") or 0) > 1,
        "after_more": (r.get("after_kernels") or 0) > 1,
        "before": fmt.ms(r.get("before_ms")) if r.get("before_ms") else fmt.MISSING,
        "after": fmt.ms(r.get("after_ms")) if r.get("after_ms") else fmt.MISSING,
        "before_calls": calls(r.get("before_calls")),
        "after_calls": calls(r.get("after_calls")),
        "before_mean": fmt.us(r.get("before_mean_us")),
        "after_mean": fmt.us(r.get("after_mean_us")),
        "delta": signed(r.get("delta_ms"), "ms"),
        "trend": _trend(r.get("delta_ms")),
        "speedup": speedup(r.get("speedup")),
        "per_call": speedup(r.get("per_call_speedup")),
        "before_roof": _roof_text(r.get("before_roof"), r.get("before_roof_withheld")),
        "after_roof": _roof_text(r.get("after_roof"), r.get("after_roof_withheld")),
        "before_roof_note": (r.get("before_roof_withheld") or {}).get("reason"),
        "after_roof_note": (r.get("after_roof_withheld") or {}).get("reason"),
        # new / gone: the group ran in one run only (it is still ranked by its time).
        "status": STATUS_LABELS.get(r.get("status") or "", ""),
    }


STATUS_LABELS = {"new": "new", "gone": "gone", "both": ""}


def _roof_text(fraction: float | None, withheld: dict[str, str] | None) -> str:
    """A fraction of a run's own roof, or what stands in for one withheld ("above roof", "capped")."""
    return WITHHELD_LABELS.get(withheld.get("why") or "", fmt.MISSING) if withheld else fmt.pct(fraction)


def _withheld_rows(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The kernel groups whose fraction of a roof is withheld, per side, with why (listed under the table)."""
    return [
        {"name": r.get("op") or "", "side": s, "reason": r[f"{s}_roof_withheld"]["reason"]}
        for r in rows
        for s in SIDES
        if r.get(f"{s}_roof_withheld")
    ]


def _category_row(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "category": c.get("category"),
        "before": fmt.ms(c.get("before_ms")) if c.get("before_ms") else fmt.MISSING,
        "after": fmt.ms(c.get("after_ms")) if c.get("after_ms") else fmt.MISSING,
        "delta": signed(c.get("delta_ms"), "ms"),
        "relative": rel(c.get("relative")),
        "trend": _trend(c.get("delta_ms")),
        "status": STATUS_LABELS.get(c.get("status") or "", ""),
        "groups": c.get("groups") or 0,
        "rows": [_kernel_row(r) for r in c.get("top") or []],
    }


def kernels(data: dict[str, Any], top: int | None = None) -> list[dict[str, Any]]:
    out = []
    for phase, k in (data.get("kernels") or {}).items():
        out.append(
            {
                "phase": phase,
                "label": phase_label(phase) if phase != "all" else "Whole trace",
                **{part: [_kernel_row(r) for r in (k.get(part) or [])[:top]] for part in ("movers", "new", "vanished")},
                # Movers by category, each with its top groups: the level that carries the change when
                # the runs share no kernel names (two vendors, graph-replayed kernels without ops).
                "categories": [_category_row(c) for c in (k.get("categories") or [])[:top]],
                # Every group shown above whose fraction is withheld, once, with why.
                "roof_withheld": _withheld_rows(
                    list(
                        {
                            r["key"]: r
                            for r in [
                                *(r for c in (k.get("categories") or [])[:top] for r in c.get("top") or []),
                                *(r for part in ("new", "vanished") for r in (k.get(part) or [])[:top]),
                            ]
                        }.values()
                    )
                ),
                "per_step": k.get("basis") == "per step",
                "steps": {s: fmt.count((k.get("steps") or {}).get(s)) for s in SIDES},
            }
        )
    return out


def _method(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "sigmas": f"{m.get('noise_sigmas') or 0:g}",
        "flat": f"{(m.get('flat_threshold') or 0) * 100:g}%",
        "points": f"{(m.get('flat_points') or 0) * 100:g}",
        "bootstrap": fmt.count(m.get("bootstrap_resamples")),
        "kernel_match": m.get("kernel_match") or "",
        "interval": m.get("interval") or "",
        "runs": m.get("runs") or "",
        "roof": m.get("roof") or "",
    }


def view_model(data: dict[str, Any], top: int | None = None) -> dict[str, Any]:
    """Everything the compare templates show."""
    source = data["before"].get("source") or {}
    return {
        "title": title_label(data),
        "runs": [run_header(data, s) for s in SIDES],
        "same_device": same_device(data),
        "roof_of": {s: roof_of(data, s) for s in SIDES},
        "tags": {s: tag(data, s) for s in SIDES},
        "context": context(data),
        "headline": headline(data),
        "gates": gates(data),
        "gate_rule": (data.get("method") or {}).get("gate_rule") or "",
        # With repeated runs: which parts use every run and which the first of each side.
        "detail_note": (data.get("method") or {}).get("detail"),
        "summary": list(data.get("summary") or []),
        "phases": phases(data),
        "kernels": kernels(data, top),
        "method": _method(data.get("method") or {}),
        "device_word": device_word(data),
        "schema_version": data.get("schema_version"),
        "tracekit_version": source.get("tracekit_version"),
    }
