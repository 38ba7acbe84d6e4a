"""View-model of the report's HTA section, from the JSON contract's ``hta`` key.

``tracekit.analysis.hta`` computed (HTA computed) every figure; here they only become display
text. Without ``--with-hta`` the key is absent and the section is None (nothing is shown).
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt

CAUSE_LABELS = {"host_wait": "host wait", "kernel_wait": "kernel wait", "other": "other"}
PARTS = ("temporal_breakdown", "idle_breakdown", "comm_comp_overlap", "kernel_launch", "kernel_types")
TYPE_LABELS = {"computation": "compute", "communication": "communication", "memory": "memcpy/memset"}


def section(data: dict[str, Any]) -> dict[str, Any] | None:
    hta = data.get("hta")
    if not hta:
        return None
    ranks = hta.get("ranks") or []
    return {
        "title": f"HolisticTraceAnalysis {hta.get('version') or '(unknown version)'}",
        "package": hta.get("package"),
        "files": hta.get("files") or [],
        "ranks": ", ".join(str(r) for r in ranks) or fmt.MISSING,
        "status": hta.get("status"),
        "reason": hta.get("reason"),
        "notes": list(hta.get("notes") or []),
        "adjustments": list(hta.get("adjustments") or []),
        "temporal": _part(hta, "temporal_breakdown", _temporal_rows),
        "idle": _part(hta, "idle_breakdown", _idle_rows),
        "overlap": _part(hta, "comm_comp_overlap", _overlap_rows),
        "launch": _part(hta, "kernel_launch", _launch_rows),
        "kernel_types": _part(hta, "kernel_types", _type_rows),
        "launch_cutoffs": _cutoffs(hta.get("kernel_launch") or {}),
        # Every analysis had nothing to work on (a CPU-only trace): the notes say why.
        "empty": all((hta.get(k) or {}).get("status") == "empty" for k in PARTS),
    }


def _part(hta: dict[str, Any], key: str, rows) -> dict[str, Any]:
    """``{"rows": [...]}`` when the analysis ran, else ``{"reason": ...}`` (why it did not)."""
    part = hta.get(key)
    if not part:
        return {"rows": [], "reason": hta.get("reason") or "not run"}
    if part.get("status") != "ok":
        return {"rows": [], "reason": part.get("reason") or part.get("status")}
    return {"rows": rows(part), "reason": None}


def _temporal_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "rank": r["rank"],
            "span": fmt.ms(r.get("span_ms")),
            "busy": fmt.ms(r.get("busy_ms")),
            "idle": fmt.ms(r.get("idle_ms")),
            "compute": fmt.ms(r.get("compute_ms")),
            "non_compute": fmt.ms(r.get("non_compute_ms")),
            "idle_share": fmt.pct(r.get("idle_share")),
            "compute_share": fmt.pct(r.get("compute_share")),
            "non_compute_share": fmt.pct(r.get("non_compute_share")),
        }
        for r in part.get("ranks") or []
    ]


def _idle_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per rank and stream, the causes side by side."""
    by: dict[tuple[int, int], dict[str, Any]] = {}
    for r in part.get("rows") or []:
        row = by.setdefault((r["rank"], r["stream"]), {"rank": r["rank"], "stream": r["stream"], "causes": {}})
        row["causes"][r["cause"]] = f"{fmt.ms(r.get('idle_ms'))} ({fmt.pct(r.get('share'))})"
    return [{**row, "cells": [row["causes"].get(c, fmt.MISSING) for c in CAUSE_LABELS]} for row in by.values()]


def _overlap_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"rank": r["rank"], "overlap": fmt.pct(r.get("overlap_share")), "reason": r.get("reason")}
        for r in part.get("ranks") or []
    ]


def _launch_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "rank": r["rank"],
            "launches": fmt.count(r.get("launches")),
            "gpu_shorter": fmt.count(r.get("gpu_shorter_than_launch")),
            "long_launches": fmt.count(r.get("long_launches")),
            "long_delays": fmt.count(r.get("long_launch_delays")),
            "median_launch": fmt.us(r.get("median_launch_us")),
            "median_delay": fmt.us(r.get("median_launch_delay_us")),
            "max_delay": fmt.us(r.get("max_launch_delay_us")),
            "reason": r.get("reason"),
        }
        for r in part.get("ranks") or []
    ]


def _type_rows(part: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "rank": r["rank"],
            "parts": [f"{TYPE_LABELS.get(k, k)} {fmt.ms(v)}" for k, v in (r.get("by_type_ms") or {}).items()],
        }
        for r in part.get("ranks") or []
    ]


def _cutoffs(part: dict[str, Any]) -> dict[str, str]:
    return {"runtime": fmt.us(part.get("runtime_cutoff_us")), "delay": fmt.us(part.get("launch_delay_cutoff_us"))}


def md_lines(data: dict[str, Any]) -> list[str]:
    """A few plain lines for the Markdown summary (escaped by the template)."""
    s = section(data)
    if s is None:
        return []
    if s["status"] != "ok":
        return [f"{s['title']}: {s['reason']}", *s["notes"]]
    if s["empty"]:  # the notes say why (a CPU-only run)
        return [f"{s['title']}: no figures; {'; '.join(s['notes'])}"]
    lines = []
    for r in s["temporal"]["rows"]:
        lines.append(
            f"rank {r['rank']}: span {r['span']}, idle {r['idle']} ({r['idle_share']}), compute "
            f"{r['compute']} ({r['compute_share']}), non-compute {r['non_compute']} ({r['non_compute_share']})"
        )
    if s["temporal"]["reason"]:
        lines.append(f"temporal breakdown: {s['temporal']['reason']}")
    for r in s["overlap"]["rows"]:
        if r["reason"] is None:
            lines.append(f"rank {r['rank']}: {r['overlap']} of communication time overlapped by computation")
    for r in s["launch"]["rows"]:
        if r["reason"] is None:
            lines.append(
                f"rank {r['rank']}: {r['launches']} kernel launches, median launch delay {r['median_delay']}, "
                f"{r['long_delays']} delays over {s['launch_cutoffs']['delay']}"
            )
    lines.extend(s["notes"])
    return lines
