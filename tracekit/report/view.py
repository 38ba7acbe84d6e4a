"""View-model pieces the renderers share, built from ``Analysis.to_dict()``.

Every function here takes the JSON contract (a plain dict) and returns plain dicts
and lists of display text. Nothing here computes a figure: values are looked up and
formatted; where a value is ``None`` the reason recorded under ``provenance`` is shown
instead.
"""

from __future__ import annotations

from typing import Any

from tracekit.report import formatting as fmt

PHASE_LABELS = {"prefill": "Prefill", "decode": "Decode", "mixed": "Mixed", "unknown": "Unclassified"}
BOUNDS = ("compute", "memory", "interconnect", "unknown", "idle")
BOUND_LABELS = {"compute": "compute-bound", "memory": "memory-bound", "interconnect": "interconnect-bound",
                "unknown": "unknown bound", "idle": "idle"}
LIMITERS = ("compute", "memory", "interconnect", "latency", "unknown", "idle")
LIMITER_LABELS = {"compute": "compute roof", "memory": "bandwidth roof", "interconnect": "link roof",
                  "latency": "latency", "unknown": "unknown", "idle": "idle"}
CAUSE_LABELS = {"sync": "sync (host blocked)", "launch": "launch", "host": "host work", "wait": "waiting on streams/events",
                "unattributed": "unattributed"}

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


def cost_sources(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per phase: how much kernel time each cost source priced."""
    rows = []
    for phase, p in (data.get("phases") or {}).items():
        by = p.get("cost_source_ms") or {}
        total = sum(by.values())
        rows.append({
            "phase": phase,
            "label": phase_label(phase),
            "parts": [{"source": s, "label": COST_SOURCE_LABELS.get(s, s), "time": fmt.ms(v),
                       "share": fmt.pct(v / total if total else None)} for s, v in by.items() if v > 0],
        })
    return rows


# --- headline figures --------------------------------------------------------------------


def _first_clause(text: str | None) -> str | None:
    return None if text is None else text.split(";")[0]


def headline(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline figures: label, value text, and what each is measured against.

    ``raw`` is the number from the JSON contract, so a test can check that the JSON
    output loads back to the same figures the HTML shows."""
    m = data["metrics"]
    phases = data["phases"]
    prov = data["provenance"]
    why = prov.get("reasons") or {}
    formulas = prov.get("formulas") or {}
    unprof = m.get("unprofiled") or {}
    word = device_word(data)
    tpot = m.get("tpot_ms") or {}
    n_decode = (phases.get("decode") or {}).get("steps")
    partial = m.get("partial") or {}
    out = []

    def add(key, label, raw, text, note, detail=None, reason_key=None):
        reason = None if raw is not None else (why.get(reason_key or key) or "not computed")
        # A step figure of a cut trace (analysis.truncation): shown, and said to be partial.
        cut = raw is not None and (reason_key or key) in (partial.get("figures") or ())
        if cut:
            note = f"{partial['reason']}; {note}"
            detail = f"{partial['reason'][0].upper()}{partial['reason'][1:]}. {detail or ''}".strip()
        out.append(
            {
                "key": key,
                "label": label,
                "raw": raw,
                "value": text if raw is not None else fmt.MISSING,
                "note": note if raw is not None else reason,
                "detail": detail or note if raw is not None else reason,
                "missing": raw is None,
                "partial": cut,
            }
        )

    engine = m.get("latency_semantics") == "engine steps"
    if engine:
        # A serving engine's steps: per-phase step times, not one request's TTFT/TPOT.
        pstep = m.get("prefill_step_ms") or {}
        dstep = m.get("decode_step_ms") or {}
        mixed = sum(1 for s in data.get("steps") or [] if s.get("phase") == "mixed")
        incl = f", {mixed} mixed included" if mixed else ""
        add("prefill_step_p50", "Prefill step p50", pstep.get("p50"), fmt.ms(pstep.get("p50")),
            f"steps holding prefill work{incl}",
            f"Prefill step time: {formulas.get('prefill_step_time', '')}. A serving engine batches requests "
            "continuously, so no step is one request's time to first token.",
            reason_key="prefill_step_ms")
        for q in ("p50", "p90"):
            add(f"decode_step_{q}", f"Decode step {q} (ITL)", dstep.get(q), fmt.ms(dstep.get(q)),
                f"{q} of the steps holding decode work{incl}: inter-token latency",
                f"Decode step time: {formulas.get('decode_step_time', '')}.",
                reason_key="decode_step_ms")
    else:
        wall = f"; without the profiler tracekit collect measured {fmt.ms(unprof['ttft_ms'])}" if unprof.get("ttft_ms") else ""
        add(
            "ttft_ms", "TTFT", m.get("ttft_ms"), fmt.ms(m.get("ttft_ms")),
            "first prefill step, in the profiled run",
            f"Time to first token: {formulas.get('ttft', '')}{wall}.",
        )
        overhead = unprof.get("profiler_overhead_ratio")
        over = ((f"; the profiler slowed the run {overhead:.2f}×" if overhead >= 1 else
                 f"; no profiler overhead measurable (ratio {overhead:.2f}: below 1 is measurement noise)")
                if overhead else "")
        if unprof.get("ttft_ms") is not None:
            add("ttft_unprofiled_ms", "TTFT, no profiler", unprof["ttft_ms"], fmt.ms(unprof["ttft_ms"]),
                f"tracekit collect, profiler off (profiled: {fmt.ms(m.get('ttft_ms'))}){over}",
                "Time to first token of the same run measured without the profiler (synchronised wall clock)"
                f"{over}.")
        steps_text = f"{n_decode} decode step{'s' if n_decode != 1 else ''}" if n_decode else "the decode steps"
        for q in ("p50", "p90"):
            wall = (
                f"; without the profiler tracekit collect measured {fmt.ms(unprof[f'tpot_{q}_ms'])}"
                if unprof.get(f"tpot_{q}_ms") else ""
            )
            add(
                f"tpot_{q}", f"TPOT {q}", tpot.get(q), fmt.ms(tpot.get(q)),
                f"{q} of {steps_text}, in the profiled run",
                f"Time per output token: {formulas.get('tpot', '')}{wall}.",
                reason_key="tpot_ms",
            )
        if unprof.get("tpot_p50_ms") is not None:
            add("tpot_p50_unprofiled", "TPOT p50, no profiler", unprof["tpot_p50_ms"], fmt.ms(unprof["tpot_p50_ms"]),
                f"tracekit collect, profiler off (profiled: {fmt.ms(tpot.get('p50'))}){over}",
                "Time per output token of the same run measured without the profiler, p50 over its decode steps"
                f" (p90 {fmt.ms(unprof.get('tpot_p90_ms'))}){over}.")
    add(
        "decode_tokens_per_s", "Decode tokens/s", m.get("decode_tokens_per_s"), fmt.per_s(m.get("decode_tokens_per_s")),
        "tokens generated / decode time",
        f"Decode throughput: {formulas.get('decode_tokens_per_s', '')}.",
    )
    if engine:
        add(
            "prefill_tokens_per_s", "Prefill tokens/s", m.get("prefill_tokens_per_s"),
            fmt.per_s(m.get("prefill_tokens_per_s")), "prompt tokens / prefill time",
            f"Prefill throughput: {formulas.get('prefill_tokens_per_s', '')}.",
        )
    pre = phases.get("prefill") or {}
    add(
        "prefill_mfu", "Prefill MFU", m.get("prefill_mfu"), fmt.pct(m.get("prefill_mfu")),
        f"vs {_first_clause(pre.get('mfu_basis'))}",
        f"Model FLOPs utilisation: {formulas.get('mfu', '')}. Against {pre.get('mfu_basis')}."
        + (f" Against the achievable ceiling: {fmt.pct(pre['mfu_achievable'])}." if pre.get("mfu_achievable") is not None else ""),
    )
    dec = phases.get("decode") or {}
    add(
        "decode_mbu", "Decode MBU", m.get("decode_mbu"), marked(fmt.pct(m.get("decode_mbu")), dec.get("mbu_estimate")),
        f"vs {_first_clause(dec.get('mbu_basis'))}",
        f"Memory bandwidth utilisation: {formulas.get('mbu', '')}. Against {dec.get('mbu_basis')}."
        + (f" Against the achievable ceiling: {fmt.pct(dec['mbu_achievable'])}." if dec.get("mbu_achievable") is not None else ""),
    )
    for phase, share in (m.get("idle_share") or {}).items():
        add(
            f"idle_share.{phase}", f"{word} idle, {phase_label(phase).lower()}", share, fmt.pct(share),
            f"share of the {phase_label(phase).lower()} steps' time with no {word} work running",
            f"{word} idle share: {formulas.get('idle_share', '')}; {formulas.get('gpu_idle', '')}.",
        )
    return out


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


# --- data quality and method ----------------------------------------------------------------

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
        peaks.append({"what": "peak bandwidth", "value": fmt.bandwidth(dev.get("peak_bandwidth")), "basis": dev.get("peak_basis") or ""})
        peaks.append(
            {
                "what": "achievable bandwidth",
                "value": fmt.bandwidth(dev.get("achievable_bandwidth")),
                "basis": dev.get("achievable_bandwidth_basis") or "",
            }
        )
        for unit, by_dtype in (dev.get("peak_flops") or {}).items():
            for dtype, value in (by_dtype or {}).items():
                peaks.append({"what": f"{dtype} {unit} peak", "value": fmt.flops(value), "basis": dev.get("peak_basis") or ""})
    bases = []
    for phase, p in (data.get("phases") or {}).items():
        for what in ("mfu", "mbu"):
            text = p.get(f"{what}_basis")
            if text:
                bases.append({"what": f"{phase_label(phase)} {what.upper()}", "basis": text})
    return {
        "lacks": [{"key": k, "text": v, "effect": LACK_EFFECTS.get(k)} for k, v in lacks.items()],
        # The segmentation's "N of M units ... outside any step" note is the outside_steps line below.
        "notes": [str(n) for n in prov.get("notes") or []
                  if not (outside.get("units") and str(n).endswith("were issued outside any step"))],
        "reasons": [{"figure": _figure_name(k), "reason": v} for k, v in (prov.get("reasons") or {}).items()],
        "device_match": prov.get("device_match") or {},
        "device_reason": dev.get("reason"),
        "outside_steps": (
            f"{fmt.count(outside.get('units'))} units of work ({fmt.ms(outside.get('ms'))}) ran outside any step"
            if outside.get("units") else None
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
