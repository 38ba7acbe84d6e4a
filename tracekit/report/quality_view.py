"""The data-quality and method section of a report: ``Analysis.to_dict()`` -> display text.

What the trace lacks and what each gap takes away, the analysis's notes and the reasons a
figure is missing, the device's peaks and the basis of each MFU and MBU, the formulas and
thresholds, and how much kernel time each cost source priced. Values are looked up and
formatted, never computed. The other view-model pieces are ``tracekit.report.view``.
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt
from tracekit.report.view import COST_SOURCE_LABELS, model_view, phase_label

# What each gap in a trace (``Trace.lacks`` keys) takes away from the report.
LACK_EFFECTS = {
    "gpu": "there is no GPU roofline; CPU peaks come from the calibration tracekit collect measured, when present",
    "device_properties": "the device's peaks can only come from --gpu or --spec-file; without them there is no MFU, MBU or roofline",
    "device_name": "the device's peaks can only come from --gpu or --spec-file; without them there is no MFU, MBU or roofline",
    "distributed": "rank and world size are not shown",
    "cpu_ops": "kernels cannot be priced (no FLOPs or bytes): bounds, MFU, MBU and the roofline are missing",
    "shapes": "FLOPs and bytes are unknown: bounds, MFU, MBU and the roofline are missing",
    "launch_links": "those kernels are placed in steps by time alone and their cost is unknown",
    "graph_ops": "graph-replayed kernels have no op shapes, so their cost is unknown (the graph-capture trace has them)",
    "op_links": "those kernels have unknown cost and count as unknown bound",
    "annotations": "phases are inferred from shapes and kernel names rather than read from markers",
    "truncated": "every figure covers only the part of the run that was written before the cut",
}


# The gaps that leave kernels without shapes, which the model prices from the architecture instead.
_MODEL_PRICES = ("cpu_ops", "shapes", "graph_ops", "op_links")


def priced_instead(model: dict[str, Any] | None, phases: dict[str, Any]) -> dict[str, str]:
    """{lack key: what the gap takes away} for the gaps in shapes the model priced instead
    (``Analysis.model``, the phases' ``cost_source_ms``): they take away no figure; empty when
    the model priced nothing."""
    priced = any(((p.get("cost_source_ms") or {}).get("model") or 0) > 0 for p in (phases or {}).values())
    if not (model and priced):
        return {}
    instead = (
        f"the model ({model.get('name')}) priced those kernels instead: their FLOPs and bytes come from its "
        "architecture and each step's tokens"
    )
    return {k: instead for k in _MODEL_PRICES}


def cost_sources(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase: how much kernel time each cost source priced."""
    rows = []
    for phase, p in (data.get("phases") or {}).items():
        by = p.get("cost_source_ms") or {}
        total = sum(by.values())
        rows.append(
            {
                "phase": phase,
                "label": phase_label(phase),
                "parts": [
                    {
                        "source": s,
                        "label": COST_SOURCE_LABELS.get(s, s),
                        "time": fmt.ms(v),
                        "share": fmt.pct(v / total if total else None),
                    }
                    for s, v in by.items()
                    if v > 0
                ],
            }
        )
    return rows


_FIGURE_NAMES = {
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
    "decode_tokens_per_s": "decode tokens/s",
    "prefill_tokens_per_s": "prefill tokens/s",
    "launch_overhead_ms_per_decode_step": "launch overhead per decode step",
    "tpot_slope_ms_per_step": "TPOT trend",
    "prefill_mfu": "prefill MFU",
    "decode_mbu": "decode MBU",
}


def _figure_name(key: str) -> str:
    if key in _FIGURE_NAMES:
        return _FIGURE_NAMES[key]
    phase, _, what = key.rpartition("_")
    if phase and what in ("mfu", "mbu"):
        return f"{phase_label(phase).lower()} {what.upper()}"
    return key.replace("_", " ")


def data_quality(data: dict[str, Any]) -> dict[str, Any]:
    prov = data.get("provenance") or {}
    dev = data.get("device") or {}
    lacks = prov.get("lacks") or {}
    outside = prov.get("outside_steps") or {}
    peaks = []
    if dev.get("spec"):
        peaks.append({"what": "spec row", "value": str(dev["spec"]), "basis": dev.get("peak_basis") or ""})
        peaks.append(
            {
                "what": "peak bandwidth",
                "value": fmt.bandwidth(dev.get("peak_bandwidth")),
                "basis": dev.get("peak_basis") or "",
            }
        )
        peaks.append(
            {
                "what": "achievable bandwidth",
                "value": fmt.bandwidth(dev.get("achievable_bandwidth")),
                "basis": dev.get("achievable_bandwidth_basis") or "",
            }
        )
        for unit, by_dtype in (dev.get("peak_flops") or {}).items():
            for dtype, value in (by_dtype or {}).items():
                peaks.append(
                    {"what": f"{dtype} {unit} peak", "value": fmt.flops(value), "basis": dev.get("peak_basis") or ""}
                )
    checks = ((data.get("workload") or {}).get("calibration") or {}).get("checks") or {}
    if checks.get("spread"):
        # How the measured ceilings were taken (collect.calibrate): a reader judges them by this.
        s = checks["spread"]
        peaks.append(
            {
                "what": "calibration",
                "value": f"best of {checks.get('attempts')} rounds",
                "basis": f"spread between rounds {fmt.pct(s.get('matmul_flops'))} (matmul), "
                f"{fmt.pct(s.get('copy_bandwidth'))} (copy); "
                + ("settled: the best two rounds agree" if checks.get("stable") else "did not settle: unreliable"),
            }
        )
    effects = {**LACK_EFFECTS, **priced_instead(data.get("model"), data.get("phases") or {})}
    bases = []
    for phase, p in (data.get("phases") or {}).items():
        for what in ("mfu", "mbu"):
            text = p.get(f"{what}_basis")
            if text:
                bases.append({"what": f"{phase_label(phase)} {what.upper()}", "basis": text})
    return {
        "lacks": [{"key": k, "text": v, "effect": effects.get(k)} for k, v in lacks.items()],
        # The segmentation's "N of M units ... outside any step" note is the outside_steps line below.
        "notes": [
            str(n)
            for n in prov.get("notes") or []
            if not (outside.get("units") and str(n).endswith("were issued outside any step"))
        ],
        "reasons": [{"figure": _figure_name(k), "reason": v} for k, v in (prov.get("reasons") or {}).items()],
        "device_match": prov.get("device_match") or {},
        "device_reason": dev.get("reason"),
        "outside_steps": (
            f"{fmt.count(outside.get('units'))} units of work ({fmt.ms(outside.get('ms'))}) ran outside any step"
            if outside.get("units")
            else None
        ),
        "unknown_bound": [
            {"reason": k, "time": fmt.ms(v)} for k, v in (prov.get("unknown_bound_ms_by_reason") or {}).items()
        ],
        "unmatched_kernels": [str(k) for k in prov.get("unmatched_kernels") or []],
        "formulas": [{"name": k.replace("_", " "), "text": v} for k, v in (prov.get("formulas") or {}).items()],
        "thresholds": [{"id": k, "text": v} for k, v in (prov.get("finding_thresholds") or {}).items()],
        "peaks": peaks,
        "bases": bases,
        "phase_source": prov.get("phase_source"),
        "cost_sources": cost_sources(data),
        "model": model_view(data),
    }
