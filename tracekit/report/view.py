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
BOUND_LABELS = {
    "compute": "compute-bound",
    "memory": "memory-bound",
    "interconnect": "interconnect-bound",
    "unknown": "unknown bound",
    "idle": "idle",
}
LIMITERS = ("compute", "memory", "interconnect", "latency", "below_roof", "unknown", "idle")
LIMITER_LABELS = {
    "compute": "compute roof",
    "memory": "bandwidth roof",
    "interconnect": "link roof",
    "latency": "latency",
    "below_roof": "neither roof nor latency",
    "unknown": "unknown",
    "idle": "idle",
}
# The limiters a phase row shows beside its bound shares: parts of the compute, memory and
# interconnect shares (kernels below the latency roof), so "of which", never beside them.
SUB_LIMITERS = ("latency", "below_roof")
SUB_LIMITER_HEADS = {"latency": "latency-limited", "below_roof": "below roof"}
CAUSE_LABELS = {
    "sync": "sync (host blocked)",
    "launch": "launch",
    "host": "host work",
    "wait": "waiting on streams/events",
    "unattributed": "unattributed",
}

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
    """Limiter names for display; latency and below roof say the roof fraction below which they apply."""
    roof = (data.get("provenance") or {}).get("latency_roof")
    below = f"< {fmt.pct(roof)} of roof" if roof is not None else "below its roof"
    return {**LIMITER_LABELS, "latency": f"latency ({below})", "below_roof": f"neither ({below}, not latency)"}


def sub_limiter_note(data: dict[str, Any]) -> str:
    """What the phase table's "of which" columns are, in words every renderer shows."""
    roof = (data.get("provenance") or {}).get("latency_roof")
    under = f"less than {fmt.pct(roof)} of" if roof is not None else "far below"
    return (
        f"of which latency-limited / below roof: the part of the compute-, memory- and interconnect-bound shares "
        f"whose kernels reach {under} their roof, so not limited by it: latency-limited where latency explains "
        "it (a grid of fewer blocks than the GPU has SMs, or a kernel as short as its fixed latency), below roof "
        "where neither does (a grid that fills the GPU, running long: the kernel reaches only that fraction)"
    )


def phase_source_text(source: str | None) -> str:
    """How phases were decided, as a phrase: "none" means no step was found."""
    return "no inference steps found" if source in (None, "none") else str(source)


def phase_label(phase: str) -> str:
    """A phase's display name ("Prefill"); a phase without one, capitalised."""
    return PHASE_LABELS.get(phase, str(phase).capitalize())


def device_word(data: dict[str, Any]) -> str:
    """ "GPU" or "CPU": what a CPU-only trace's "GPU idle" is really about."""
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
    for unit, by_dtype in (dev.get("peak_flops") or {}).items():
        for dtype, value in (by_dtype or {}).items():
            peaks.append({"unit": unit, "dtype": dtype, "value": fmt.flops(value)})
    name = dev.get("name") or "unknown"
    if dev.get("type") == "unknown":  # a GPU trace cut before its kernels (analysis.truncation)
        what = "its GPU events" if (data.get("truncated") or {}).get("gpu_evidence") else "any GPU event"
        name = f"unknown (the trace was cut before {what}" + (
            f"; deviceProperties name {dev['name']})" if dev.get("name") else ")"
        )
    return {
        "title": src.get("name") or "trace",
        # The trace was cut mid-write: said first, before any figure (None for a whole file).
        "truncated": (data.get("truncated") or {}).get("text"),
        # A collected run measured on a busy machine or against unreliable ceilings (analysis.measurement):
        # said before any figure, as the truncation is.
        "measurement": [str(n) for n in (data.get("measurement") or {}).get("notes") or []],
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
            {"label": label, "value": fmt.plain(work[key])}
            for key, label in _WORKLOAD_FIELDS
            if work.get(key) is not None
        ],
        "versions": [{"label": k, "value": fmt.plain(v)} for k, v in versions.items() if v is not None],
        "collected": side.get("created"),
        "model": model_view(data),
        "run_kind": data.get("run_kind"),
        "phase_source": phase_source_text((data.get("provenance") or {}).get("phase_source")),
        "tracekit_version": src.get("tracekit_version"),
    }


# How a kernel's cost was found (the JSON's ``cost_source``), for display.
COST_SOURCE_LABELS = {
    "shapes": "recorded shapes",
    "capture": "graph-capture shapes",
    "model": "the model",
    "none": "unknown",
}
# The mark before a figure built on estimated bytes (the JSON's ``estimate``), and its meaning.
ESTIMATE_MARKS = {"upper": "≤", "lower": "≥", "model": "~"}
ESTIMATE_MEANINGS = {
    "upper": "an upper bound: bytes capped at what peak bandwidth moves in the kernels' time",
    "lower": "a lower bound on the bytes",
    "model": "the model's estimate of the bytes",
}


def marked(text: str, estimate: str | None) -> str:
    """A figure's text with the mark of what its bytes are ("≤ 43.6%"); unmarked when exact."""
    mark = ESTIMATE_MARKS.get(estimate or "")
    return f"{mark} {text}" if mark and text != fmt.MISSING else text


def estimate_legend(kinds, data: dict[str, Any]) -> list[str]:
    """One line per estimate mark shown: the mark, what it means, and what it is about on this
    run (the phases' ``bytes_estimate_reasons``: decode attention of unknown keys, routed experts)."""
    out = []
    for k in ESTIMATE_MARKS:
        if k not in set(kinds):
            continue
        why: list[str] = []
        for p in (data.get("phases") or {}).values():
            reasons = p.get("bytes_estimate_reasons") or {}
            # A phase's "~" can be the sum of bounds of both directions: every reason in it applies.
            for r in [reasons.get(k)] if k != "model" or p.get("bytes_estimate") != "model" else reasons.values():
                if r and r not in why:
                    why.append(r)
        out.append(f"{ESTIMATE_MARKS[k]} {ESTIMATE_MEANINGS[k]}" + (f" ({'; '.join(why)})" if why else ""))
    return out


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
        "costs": {
            "auto": "recorded shapes where present, the model elsewhere",
            "shapes": "recorded shapes only",
            "model": "the model only (--costs model)",
        }.get(m.get("costs"), m.get("costs")),
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
        riding = (p.get("passenger") or {}).get("mixed_steps") or 0
        rows.append(
            {
                "phase": phase,
                "label": phase_label(phase)
                + (
                    f" (incl. part of {mixed} mixed" + (f", {riding} a passenger" if riding else "") + ")"
                    if mixed
                    else ""
                ),
                "mixed_note": (
                    f"includes the {phase} part of {mixed} mixed step{'s' if mixed != 1 else ''}, "
                    "split by tokens and attention query-key pairs"
                    + (
                        f"; the decode side of {riding} of them is a passenger of its prefill chunk: "
                        "in the time and bound shares, not in MFU and MBU"
                        if riding
                        else ""
                    )
                )
                if mixed
                else None,
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
                    {
                        "limiter": k,
                        "label": labels[k],
                        "ms": fmt.ms((p.get("by_limiter") or {}).get(k)),
                        "share": fmt.pct((p.get("by_limiter_share") or {}).get(k)),
                    }
                    for k in LIMITERS
                ],
                # Parts of the bound shares above, shown as "of which" (SUB_LIMITERS).
                "sub_limiters": [
                    {
                        "limiter": k,
                        "head": SUB_LIMITER_HEADS[k],
                        "ms": fmt.ms((p.get("by_limiter") or {}).get(k)),
                        "share": fmt.pct((p.get("by_limiter_share") or {}).get(k)),
                    }
                    for k in SUB_LIMITERS
                ],
                "limiter_note": "; ".join(
                    f"{labels[k]} {fmt.pct((p.get('by_limiter_share') or {}).get(k))}"
                    for k in LIMITERS
                    if (p.get("by_limiter") or {}).get(k)
                ),
                "mfu": fmt.pct(p.get("mfu")),
                "mfu_note": p.get("mfu_basis") or p.get("mfu_reason") or why.get(f"{phase}_mfu"),
                "mbu": marked(fmt.pct(p.get("mbu")), p.get("mbu_estimate")),
                "mbu_note": p.get("mbu_basis") or p.get("mbu_reason") or why.get(f"{phase}_mbu"),
                "unknown_cost_share": fmt.pct(p.get("unknown_cost_share")),
            }
        )
    return rows


# Mixed steps listed one by one (the largest decode cost first); the rest are counted. As many
# as the report's kernel tables list per phase (analysis.tables.TOP_KERNELS).
MIXED_ROWS = 15
_PART_LABELS = {
    "gemm_rows": "their GEMM rows",
    "attention": "their attention and KV reads",
    "kv_writes": "their KV writes",
    "communication": "their all-reduce and all-gather traffic",
    "other": "their norms, activations and other per-token work",
}


def mixed_lines(data: dict[str, Any]) -> list[str]:
    """What each split mixed step's decode requests cost (its ``split.decode_marginal``), one
    sentence a step, the costliest first, at most ``MIXED_ROWS``; then how many are left out."""
    steps = [s for s in data.get("steps") or [] if (s.get("split") or {}).get("decode_marginal")]
    steps.sort(key=lambda s: -(s["split"]["decode_marginal"].get("ms") or 0.0))
    out = [_mixed_line(s) for s in steps[:MIXED_ROWS]]
    if len(steps) > MIXED_ROWS:
        left = len(steps) - MIXED_ROWS
        out.append(f"and {left:,} more mixed step{'s' if left != 1 else ''} (the JSON lists each)")
    return out


def _mixed_line(s: dict[str, Any]) -> str:
    sp = s["split"]
    m = sp["decode_marginal"]
    head = (
        f"step {s.get('index')}: {fmt.count((sp.get('prefill') or {}).get('tokens'))} prefill + "
        f"{fmt.count((sp.get('decode') or {}).get('tokens'))} decode tokens"
    )
    if m.get("ms") is None:
        return f"{head}; what its decode tokens add is not known: {m.get('reason')}"
    parts = ", ".join(f"{_PART_LABELS.get(k, k)} {fmt.ms(v.get('ms'))}" for k, v in (m.get("by_part") or {}).items())
    text = (
        f"{head}; its decode tokens add {fmt.ms(m['ms'])} ({fmt.pct(m.get('share'))} of its kernel time; "
        f"{parts}): {fmt.si(m.get('flops'), 'FLOP')}, {fmt.si(m.get('bytes'), 'B')}; they share "
        f"{fmt.si(m.get('shared_bytes'), 'B')} of weight reads the prefill chunk pays anyway"
    )
    if (m.get("covered_share") or 0.0) < 1.0:
        text += (
            f" (known for the kernels of {fmt.pct(m.get('covered_share'))} of its kernel time: the others' "
            "work without the decode tokens is not)"
        )
    if m.get("passenger"):
        return (
            text + "; bound by its prefill chunk: its decode side is a passenger, with no bound, MFU or MBU of its own"
        )
    if m.get("passenger") is None:
        return text + f"; whether its prefill chunk bounds it is not known: {m.get('reason')}"
    return text + "; not bound by its prefill chunk: its decode side keeps its bound"


def findings(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": f.get("id"),
            "text": f.get("text"),
            "severity": f.get("severity") or "info",
            "phase": phase_label(f["phase"]) if f.get("phase") else None,
            "action": f.get("action"),
            "at_stake": (
                fmt.ms(f["at_stake_ms"]) + (f", {f['at_stake_note']}" if f.get("at_stake_note") else "")
                if f.get("at_stake_ms") is not None
                else None
            ),
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
        out.append(
            {
                "phase": phase,
                "label": phase_label(phase),
                "idle": fmt.ms(p.get("gpu_idle_ms")),
                "idle_share": fmt.pct(p.get("idle_share")),
                "causes": [
                    {
                        "cause": c,
                        "label": CAUSE_LABELS.get(c, c),
                        "time": fmt.ms(v),
                        "share": fmt.pct(v / time if time else None),
                    }
                    for c, v in causes.items()
                    if v > 0
                ],
                "top": [
                    {
                        "cause": CAUSE_LABELS.get(r["cause"], r["cause"]),
                        "call": r.get("call") or fmt.MISSING,
                        "op": r.get("op") or fmt.MISSING,
                        "stack": " › ".join(r.get("stack") or []) or fmt.MISSING,
                        "time": fmt.ms(r.get("ms")),
                        "share": fmt.pct(r.get("share")),
                        "count": fmt.count(r.get("count")),
                    }
                    for r in p.get("idle_top") or []
                ],
            }
        )
    return out


def idle_lines(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase with idle time: "sync 463 ms (98%), wait 0.5 ms (0.1%)" (largest first, share
    of the phase's time) and the largest interval, for the text and Markdown summaries."""
    out = []
    for phase, p in (data.get("phases") or {}).items():
        causes, time = p.get("idle_by_cause") or {}, p.get("time_ms") or 0.0
        parts = [
            f"{c} {fmt.ms(v)} ({fmt.pct(v / time if time else None)})"
            for c, v in sorted(causes.items(), key=lambda kv: -kv[1])
            if v > 0
        ]
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
        "text": (
            f"{fmt.ms(tl['duration_ms'])}, {fmt.count(tl['kernels'])} kernels; host thread {tl['host_tid']}"
            + (f"; {device_word(data)} idle by cause: {idle}" if idle else "")
        ),
        "merged": any(seg[4] > 1 for lane in tl["lanes"] for seg in lane["segments"]),
    }


def _achieved(row: dict[str, Any]) -> str:
    parts = []
    if row.get("achieved_tflops") is not None:
        parts.append(fmt.flops(row["achieved_tflops"] * 1e12))
    if row.get("achieved_gbps") is not None:
        parts.append(marked(fmt.bandwidth(row["achieved_gbps"] * 1e9), row.get("estimate")))
    return " · ".join(parts) if parts else fmt.MISSING


# What a top kernel's roof cell says when its fraction is withheld (``roof_withheld.why``).
WITHHELD_LABELS = {"above": "above roof", "capped": "capped"}


def kernel_rows(rows: list[dict[str, Any]], top: int | None = None) -> list[dict[str, Any]]:
    out = []
    for r in rows[:top] if top else rows:
        withheld = r.get("roof_withheld") or {}
        out.append(
            {
                "name": r.get("name"),
                "short_name": r.get("short_name") or r.get("name"),
                "category": r.get("category"),
                "calls": fmt.count(r.get("calls")),
                "total": fmt.ms(r.get("total_ms")),
                "mean": fmt.us(r.get("mean_us")),
                "share": fmt.pct(r.get("share")),
                "bound": BOUND_LABELS.get(r.get("bound") or "", r.get("bound")),
                "cost_source": COST_SOURCE_LABELS.get(r.get("cost_source") or "", r.get("cost_source") or fmt.MISSING),
                "bound_key": r.get("bound"),
                "limiter": str(r.get("limiter") or "unknown").replace("_", " "),
                "achieved": WITHHELD_LABELS["above"] if withheld.get("why") == "above" else _achieved(r),
                "roof": WITHHELD_LABELS.get(withheld.get("why") or "", fmt.MISSING)
                if withheld
                else marked(fmt.pct(r.get("roof_fraction")), r.get("estimate")),
                "roof_note": withheld.get("reason"),
                "estimate": r.get("estimate"),
                "estimate_note": ESTIMATE_MEANINGS.get(r.get("estimate") or ""),
            }
        )
    return out


def top_kernels(data: dict[str, Any], top: int | None = None) -> list[dict[str, Any]]:
    """Per phase: the top kernels table; for a run without phases, the whole trace's."""
    out = []
    for phase, rows in (data.get("top_kernels") or {}).items():
        out.append(
            {
                "phase": phase,
                "label": phase_label(phase),
                "rows": kernel_rows(rows, top),
                "withheld": _withheld(rows, top),
            }
        )
    if not out and (data.get("overall") or {}).get("top_kernels"):
        rows = data["overall"]["top_kernels"]
        out.append(
            {"phase": "all", "label": "Whole trace", "rows": kernel_rows(rows, top), "withheld": _withheld(rows, top)}
        )
    return out


def _withheld(rows: list[dict[str, Any]], top: int | None) -> list[dict[str, Any]]:
    """The rows whose roof fraction is withheld, each with why, for the note under the table."""
    return [
        {"name": r.get("short_name") or r.get("name"), "reason": r["roof_withheld"]["reason"]}
        for r in (rows[:top] if top else rows)
        if r.get("roof_withheld")
    ]


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
