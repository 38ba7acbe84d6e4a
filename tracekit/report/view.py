"""View-model pieces the renderers share, built from ``Analysis.to_dict()``.

Every function here takes the JSON contract (a plain dict) and returns plain dicts
and lists of display text. Nothing here computes a figure: values are looked up and
formatted; where a value is ``None`` the reason recorded under ``provenance`` is shown
instead.

The headline figures are ``tracekit.report.headline_view``; the data-quality and method
section (what the trace lacks, reasons, peaks, formulas, cost sources) is
``tracekit.report.quality_view``.
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt

PHASE_LABELS = {"prefill": "Prefill", "decode": "Decode", "mixed": "Mixed", "unknown": "Unclassified"}
BOUNDS = ("compute", "memory", "interconnect", "unknown", "idle")
BOUND_LABELS = {"compute": "compute-bound", "memory": "memory-bound", "interconnect": "interconnect-bound",
                "unknown": "unknown bound", "idle": "idle"}
LIMITERS = ("compute", "memory", "interconnect", "latency", "unknown", "idle")
LIMITER_LABELS = {"compute": "compute roof", "memory": "bandwidth roof", "interconnect": "link roof",
                  "latency": "latency", "unknown": "unknown", "idle": "idle"}
CAUSE_LABELS = {"sync": "sync (host blocked)", "launch": "launch", "host": "host work", "wait": "waiting on streams/events",
                "unattributed": "unattributed"}

_WORKLOAD_FIELDS = (
    ("preset", "preset"),
    ("model_path", "model"),
    ("architecture", "architecture"),
    ("parameters", "parameters"),
    ("dtype", "dtype"),
    ("batch_size", "batch size"),
    ("prompt_len", "prompt length"),
    ("new_tokens", "new tokens"),
    ("device", "device"),
    ("compile", "torch.compile"),
    ("cuda_graphs", "CUDA graphs"),
)


def limiter_labels(data: dict[str, Any]) -> dict[str, str]:
    """Limiter names for display; latency says the roof fraction below which it applies."""
    roof = (data.get("provenance") or {}).get("latency_roof")
    below = f" (below {fmt.pct(roof)} of its roof)" if roof is not None else ""
    return {**LIMITER_LABELS, "latency": "latency" + below}


def phase_source_text(source: str | None) -> str:
    """How phases were decided, as a phrase: "none" means no step was found."""
    return "no inference steps found" if source in (None, "none") else str(source)


def phase_label(phase: str) -> str:
    """A phase's display name ("Prefill"); a phase without one, capitalised."""
    return PHASE_LABELS.get(phase, str(phase).capitalize())


def device_word(data: dict[str, Any]) -> str:
    """"GPU" or "CPU": what a CPU-only trace's "GPU idle" is really about."""
    return "CPU" if (data.get("device") or {}).get("type") == "cpu" else "GPU"


# --- header ------------------------------------------------------------------------------


def header(data: dict[str, Any]) -> dict[str, Any]:
    src = data["source"]
    dev = data["device"]
    side = data.get("workload") or {}
    work = side.get("workload") or {}
    versions = side.get("versions") or {}
    files = src.get("files") or [src.get("path")]
    peaks = []
    for unit, by_dtype in ((dev.get("peak_flops") or {}).items()):
        for dtype, value in (by_dtype or {}).items():
            peaks.append({"unit": unit, "dtype": dtype, "value": fmt.flops(value)})
    name = dev.get("name") or "unknown"
    if dev.get("type") == "unknown":  # a GPU trace cut before its kernels (analysis.truncation)
        what = "its GPU events" if (data.get("truncated") or {}).get("gpu_evidence") else "any GPU event"
        name = f"unknown (the trace was cut before {what}" + (
            f"; deviceProperties name {dev['name']})" if dev.get("name") else ")")
    return {
        "title": src.get("name") or "trace",
        # The trace was cut mid-write: said first, before any figure (None for a whole file).
        "truncated": (data.get("truncated") or {}).get("text"),
        "trace": {
            "name": src.get("name"),
            "path": src.get("path"),
            "files": [str(f) for f in files] if len(files) > 1 else [],
            "events": fmt.count(src.get("events")),
            "size": fmt.si(src.get("bytes"), "B") if src.get("bytes") else fmt.MISSING,
            "schema_era": src.get("schema_era"),
        },
        "device": {
            "name": name,
            "type": dev.get("type"),
            "notes": [str(n) for n in dev.get("notes") or []],
            "spec": dev.get("spec"),
            "how": dev.get("how"),
            "reason": dev.get("reason"),
            "peak_basis": dev.get("peak_basis"),
            "peak_bandwidth": fmt.bandwidth(dev.get("peak_bandwidth")),
            "achievable_bandwidth": fmt.bandwidth(dev.get("achievable_bandwidth")),
            "achievable_bandwidth_basis": dev.get("achievable_bandwidth_basis"),
            "peaks": peaks,
        },
        "workload": [
            {"label": label, "value": fmt.plain(work[key])} for key, label in _WORKLOAD_FIELDS if work.get(key) is not None
        ],
        "versions": [{"label": k, "value": fmt.plain(v)} for k, v in versions.items() if v is not None],
        "collected": side.get("created"),
        "model": model_view(data),
        "run_kind": data.get("run_kind"),
        "phase_source": phase_source_text((data.get("provenance") or {}).get("phase_source")),
        "tracekit_version": src.get("tracekit_version"),
    }


# How a kernel's cost was found (the JSON's ``cost_source``), for display.
COST_SOURCE_LABELS = {"shapes": "recorded shapes", "capture": "graph-capture shapes", "model": "the model",
                      "none": "unknown"}
# The mark before a figure built on estimated bytes (the JSON's ``estimate``), and its meaning.
ESTIMATE_MARKS = {"upper": "≤", "lower": "≥", "model": "~"}
ESTIMATE_MEANINGS = {
    "upper": "an upper bound: bytes capped at what peak bandwidth moves in the kernels' time (routed experts "
             "whose expected weights would need more)",
    "lower": "a lower bound: a prefill's KV read counted without a cached prefix the trace does not state",
    "model": "the model's estimate: distinct experts expected under uniform routing, E*(1-(1-k/E)^B)",
}


def marked(text: str, estimate: str | None) -> str:
    """A figure's text with the mark of what its bytes are ("≤ 43.6%"); unmarked when exact."""
    mark = ESTIMATE_MARKS.get(estimate or "")
    return f"{mark} {text}" if mark and text != fmt.MISSING else text


def estimate_legend(kinds) -> list[str]:
    """One line per estimate mark shown: the mark and what it means."""
    return [f"{ESTIMATE_MARKS[k]} {ESTIMATE_MEANINGS[k]}" for k in ESTIMATE_MARKS if k in set(kinds)]


def estimates_shown(data: dict[str, Any]) -> list[str]:
    """The estimate kinds the report's marked figures carry (phases' MBU, top kernels' bytes)."""
    kinds = [p.get("mbu_estimate") for p in (data.get("phases") or {}).values()]
    for rows in (data.get("top_kernels") or {}).values():
        kinds += [r.get("estimate") for r in rows]
    kinds += [r.get("estimate") for r in (data.get("overall") or {}).get("top_kernels") or []]
    return [k for k in ESTIMATE_MARKS if k in kinds]


def model_view(data: dict[str, Any]) -> dict[str, Any] | None:
    """The model that priced kernels the shapes could not, as display text; None without one."""
    m = data.get("model")
    if not m:
        return None
    precision = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (m.get("precision") or {}).items())
    return {
        "name": m.get("name"),
        "summary": m.get("summary"),
        "source": m.get("source"),
        "chosen_by": m.get("chosen_by"),
        "tp": f"{m.get('tp')} ({m.get('tp_source')})",
        "precision": f"{precision} ({m.get('precision_source')})",
        "kv_cache": m.get("kv_cache_how"),
        "costs": {"auto": "recorded shapes where present, the model elsewhere", "shapes": "recorded shapes only",
                  "model": "the model only (--costs model)"}.get(m.get("costs"), m.get("costs")),
        "layer_check": m.get("layer_check"),
    }


# --- phases, findings, kernels -------------------------------------------------------------


def phase_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    why = (data.get("provenance") or {}).get("reasons") or {}
    rows = []
    labels = limiter_labels(data)
    for phase, p in data["phases"].items():
        bb = p.get("by_bound") or {}
        share = p.get("by_bound_share") or {}
        mixed = p.get("mixed_steps") or 0
        rows.append(
            {
                "phase": phase,
                "label": phase_label(phase) + (f" (incl. part of {mixed} mixed)" if mixed else ""),
                "mixed_note": (f"includes the {phase} part of {mixed} mixed step{'s' if mixed != 1 else ''}, "
                               "split by tokens and attention query-key pairs") if mixed else None,
                "steps": fmt.count(p.get("steps")) + (f" + {fmt.count(mixed)} mixed" if mixed else ""),
                "time": fmt.ms(p.get("time_ms")),
                "gpu_busy": fmt.ms(p.get("gpu_busy_ms")),
                "gpu_idle": fmt.ms(p.get("gpu_idle_ms")),
                "idle_share": fmt.pct(p.get("idle_share")),
                "kernel_time": fmt.ms(p.get("kernel_ms")),
                "kernels": fmt.count(p.get("kernels")),
                "bounds": [
                    {"bound": b, "label": BOUND_LABELS[b], "ms": fmt.ms(bb.get(b)), "share": fmt.pct(share.get(b))}
                    for b in BOUNDS
                ],
                "limiters": [
                    {"limiter": k, "label": labels[k], "ms": fmt.ms((p.get("by_limiter") or {}).get(k)),
                     "share": fmt.pct((p.get("by_limiter_share") or {}).get(k))}
                    for k in LIMITERS
                ],
                "latency_share": fmt.pct((p.get("by_limiter_share") or {}).get("latency")),
                "limiter_note": "; ".join(
                    f"{labels[k]} {fmt.pct((p.get('by_limiter_share') or {}).get(k))}" for k in LIMITERS
                    if (p.get("by_limiter") or {}).get(k)),
                "mfu": fmt.pct(p.get("mfu")),
                "mfu_note": p.get("mfu_basis") or p.get("mfu_reason") or why.get(f"{phase}_mfu"),
                "mbu": marked(fmt.pct(p.get("mbu")), p.get("mbu_estimate")),
                "mbu_note": p.get("mbu_basis") or p.get("mbu_reason") or why.get(f"{phase}_mbu"),
                "unknown_cost_share": fmt.pct(p.get("unknown_cost_share")),
            }
        )
    return rows


def findings(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": f.get("id"),
            "text": f.get("text"),
            "severity": f.get("severity") or "info",
            "phase": phase_label(f["phase"]) if f.get("phase") else None,
            "action": f.get("action"),
            "at_stake": fmt.ms(f["at_stake_ms"]) if f.get("at_stake_ms") is not None else None,
        }
        for f in data.get("findings") or []
    ]


# --- idle ----------------------------------------------------------------------------------


def idle_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase: idle time by cause, and the largest idle intervals with their call, op, frames."""
    out = []
    for phase, p in (data.get("phases") or {}).items():
        causes = p.get("idle_by_cause") or {}
        time = p.get("time_ms") or 0.0
        if not causes or not sum(causes.values()):
            continue
        out.append({
            "phase": phase,
            "label": phase_label(phase),
            "idle": fmt.ms(p.get("gpu_idle_ms")),
            "idle_share": fmt.pct(p.get("idle_share")),
            "causes": [{"cause": c, "label": CAUSE_LABELS.get(c, c), "time": fmt.ms(v),
                        "share": fmt.pct(v / time if time else None)} for c, v in causes.items() if v > 0],
            "top": [{"cause": CAUSE_LABELS.get(r["cause"], r["cause"]), "call": r.get("call") or fmt.MISSING,
                     "op": r.get("op") or fmt.MISSING, "stack": " › ".join(r.get("stack") or []) or fmt.MISSING,
                     "time": fmt.ms(r.get("ms")), "share": fmt.pct(r.get("share")), "count": fmt.count(r.get("count"))}
                    for r in p.get("idle_top") or []],
        })
    return out


def idle_lines(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase with idle time: "sync 463 ms (98%), wait 0.5 ms (0.1%)" (largest first, share
    of the phase's time) and the largest interval, for the text and Markdown summaries."""
    out = []
    for phase, p in (data.get("phases") or {}).items():
        causes, time = p.get("idle_by_cause") or {}, p.get("time_ms") or 0.0
        parts = [f"{c} {fmt.ms(v)} ({fmt.pct(v / time if time else None)})"
                 for c, v in sorted(causes.items(), key=lambda kv: -kv[1]) if v > 0]
        if not parts:
            continue
        top = (p.get("idle_top") or [None])[0]
        where = None
        if top:
            named = " in ".join(str(x) for x in (top.get("call"), top.get("op")) if x)
            frame = next((f for f in reversed(top.get("stack") or []) if ".py(" in f), None)
            where = f"{top['cause']}, {named or 'host work'}{f' under {frame}' if frame else ''}, {fmt.ms(top['ms'])}"
        out.append({"phase": phase, "label": phase_label(phase), "line": ", ".join(parts), "top": where})
    return out


def timeline(data: dict[str, Any], index: int) -> dict[str, Any]:
    """The caption of one step timeline."""
    tl = (data.get("timelines") or [])[index]
    causes = tl.get("idle_by_cause") or {}
    idle = ", ".join(f"{c} {fmt.ms(v)}" for c, v in sorted(causes.items(), key=lambda kv: -kv[1]) if v > 0)
    return {
        "title": f"{phase_label(tl['phase'])} step {tl['step']}: the {tl['why']}",
        "text": (f"{fmt.ms(tl['duration_ms'])}, {fmt.count(tl['kernels'])} kernels; host thread {tl['host_tid']}"
                 + (f"; {device_word(data)} idle by cause: {idle}" if idle else "")),
        "merged": any(seg[4] > 1 for lane in tl["lanes"] for seg in lane["segments"]),
    }


def _achieved(row: dict[str, Any]) -> str:
    parts = []
    if row.get("achieved_tflops") is not None:
        parts.append(fmt.flops(row["achieved_tflops"] * 1e12))
    if row.get("achieved_gbps") is not None:
        parts.append(marked(fmt.bandwidth(row["achieved_gbps"] * 1e9), row.get("estimate")))
    return " · ".join(parts) if parts else fmt.MISSING


def kernel_rows(rows: list[dict[str, Any]], top: int | None = None) -> list[dict[str, Any]]:
    out = []
    for r in rows[:top] if top else rows:
        out.append(
            {
                "name": r.get("name"),
                "short_name": r.get("short_name") or r.get("name"),
                "category": r.get("category"),
                "calls": fmt.count(r.get("calls")),
                "total": fmt.ms(r.get("total_ms")),
                "mean": fmt.us(r.get("mean_us")),
                "share": fmt.pct(r.get("share")),
                "bound": BOUND_LABELS.get(r.get("bound"), r.get("bound")),
                "cost_source": COST_SOURCE_LABELS.get(r.get("cost_source"), r.get("cost_source") or fmt.MISSING),
                "bound_key": r.get("bound"),
                "limiter": r.get("limiter") or "unknown",
                "achieved": _achieved(r),
                "roof": marked(fmt.pct(r.get("roof_fraction")), r.get("estimate")),
                "estimate": r.get("estimate"),
                "estimate_note": ESTIMATE_MEANINGS.get(r.get("estimate") or ""),
            }
        )
    return out


def top_kernels(data: dict[str, Any], top: int | None = None) -> list[dict[str, Any]]:
    """Per phase: the top kernels table; for a run without phases, the whole trace's."""
    out = []
    for phase, rows in (data.get("top_kernels") or {}).items():
        out.append({"phase": phase, "label": phase_label(phase), "rows": kernel_rows(rows, top)})
    if not out and (data.get("overall") or {}).get("top_kernels"):
        out.append({"phase": "all", "label": "Whole trace", "rows": kernel_rows(data["overall"]["top_kernels"], top)})
    return out


def no_phases_reason(data: dict[str, Any]) -> str | None:
    """Why there is no phase breakdown, or None when there is one."""
    if data["phases"]:
        return None
    notes = (data.get("provenance") or {}).get("notes") or []
    if data.get("run_kind") == "training":
        text = "This is a training run (backward ops or optimizer steps are in the trace): it has no prefill or decode steps."
    else:
        text = "No inference step was found in this trace, so there is no prefill/decode breakdown."
        if notes:
            text += " " + " ".join(str(n).rstrip(".") + "." for n in notes)
    return text + " The whole trace's kernel time is shown instead."
