"""The headline figures of a report: ``Analysis.to_dict()`` -> the figures shown first, as display text.

Each figure is a dict: its key, label, value text, the note of what it is measured against,
the longer detail (its formula), and ``raw``, the number from the JSON contract (so a test
can check that the JSON output loads back to the figures the pages show). Where a figure is
``None`` the reason recorded under ``provenance`` is shown instead; where a cut trace leaves
it partial, that is said. The other view-model pieces are ``tracekit.report.view``.
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt
from tracekit.report.view import device_word, marked, phase_label


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
    measured = data.get("measurement") or {}
    # A run timed on a busy machine, or priced against ceilings that are not the machine's
    # (analysis.measurement): the figures that rest on it say so beside their value.
    busy = "; measured on a busy machine: slower than the machine is" if measured.get("busy") else ""
    roof = "; unreliable: against ceilings measured unreliably" if measured.get("ceilings_reliable") is False else ""
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
        add(
            "prefill_step_p50",
            "Prefill step p50",
            pstep.get("p50"),
            fmt.ms(pstep.get("p50")),
            f"steps holding prefill work{incl}",
            f"Prefill step time: {formulas.get('prefill_step_time', '')}. A serving engine batches requests "
            "continuously, so no step is one request's time to first token.",
            reason_key="prefill_step_ms",
        )
        for q in ("p50", "p90"):
            add(
                f"decode_step_{q}",
                f"Decode step {q} (ITL)",
                dstep.get(q),
                fmt.ms(dstep.get(q)),
                f"{q} of the steps holding decode work{incl}: inter-token latency",
                f"Decode step time: {formulas.get('decode_step_time', '')}.",
                reason_key="decode_step_ms",
            )
    else:
        wall = (
            f"; without the profiler tracekit collect measured {fmt.ms(unprof['ttft_ms'])}"
            if unprof.get("ttft_ms")
            else ""
        )
        add(
            "ttft_ms",
            "TTFT",
            m.get("ttft_ms"),
            fmt.ms(m.get("ttft_ms")),
            f"first prefill step, in the profiled run{busy}",
            f"Time to first token: {formulas.get('ttft', '')}{wall}.",
        )
        if unprof.get("ttft_ms") is not None:
            over = _overhead(unprof.get("ttft_profiler_ratio"), "this figure")
            add(
                "ttft_unprofiled_ms",
                "TTFT, no profiler",
                unprof["ttft_ms"],
                fmt.ms(unprof["ttft_ms"]),
                f"tracekit collect, profiler off (profiled: {fmt.ms(m.get('ttft_ms'))}){over}{busy}",
                "Time to first token of the same run measured without the profiler (synchronised wall clock)"
                f"{over}{_overhead(unprof.get('profiler_overhead_ratio'), 'the whole recorded run')}.",
            )
        steps_text = f"{n_decode} decode step{'s' if n_decode != 1 else ''}" if n_decode else "the decode steps"
        for q in ("p50", "p90"):
            wall = (
                f"; without the profiler tracekit collect measured {fmt.ms(unprof[f'tpot_{q}_ms'])}"
                if unprof.get(f"tpot_{q}_ms")
                else ""
            )
            add(
                f"tpot_{q}",
                f"TPOT {q}",
                tpot.get(q),
                fmt.ms(tpot.get(q)),
                f"{q} of {steps_text}, in the profiled run{busy}",
                f"Time per output token: {formulas.get('tpot', '')}{wall}.",
                reason_key="tpot_ms",
            )
        if unprof.get("tpot_p50_ms") is not None:
            over = _overhead(unprof.get("tpot_p50_profiler_ratio"), "this figure")
            add(
                "tpot_p50_unprofiled",
                "TPOT p50, no profiler",
                unprof["tpot_p50_ms"],
                fmt.ms(unprof["tpot_p50_ms"]),
                f"tracekit collect, profiler off (profiled: {fmt.ms(tpot.get('p50'))}){over}{busy}",
                "Time per output token of the same run measured without the profiler, p50 over its decode steps"
                f" (p90 {fmt.ms(unprof.get('tpot_p90_ms'))}){over}"
                f"{_overhead(unprof.get('profiler_overhead_ratio'), 'the whole recorded run')}.",
            )
    add(
        "decode_tokens_per_s",
        "Decode tokens/s",
        m.get("decode_tokens_per_s"),
        fmt.per_s(m.get("decode_tokens_per_s")),
        f"tokens generated / decode time{busy}",
        f"Decode throughput: {formulas.get('decode_tokens_per_s', '')}.",
    )
    if engine:
        add(
            "prefill_tokens_per_s",
            "Prefill tokens/s",
            m.get("prefill_tokens_per_s"),
            fmt.per_s(m.get("prefill_tokens_per_s")),
            "prompt tokens / prefill time",
            f"Prefill throughput: {formulas.get('prefill_tokens_per_s', '')}.",
        )
    pre = phases.get("prefill") or {}
    add(
        "prefill_mfu",
        "Prefill MFU",
        m.get("prefill_mfu"),
        fmt.pct(m.get("prefill_mfu")),
        f"vs {_first_clause(pre.get('mfu_basis'))}{roof}",
        f"Model FLOPs utilisation: {formulas.get('mfu', '')}. Against {pre.get('mfu_basis')}."
        + (
            f" Against the achievable ceiling: {fmt.pct(pre['mfu_achievable'])}."
            if pre.get("mfu_achievable") is not None
            else ""
        ),
    )
    dec = phases.get("decode") or {}
    add(
        "decode_mbu",
        "Decode MBU",
        m.get("decode_mbu"),
        marked(fmt.pct(m.get("decode_mbu")), dec.get("mbu_estimate")),
        f"vs {_first_clause(dec.get('mbu_basis'))}{roof}",
        f"Memory bandwidth utilisation: {formulas.get('mbu', '')}. Against {dec.get('mbu_basis')}."
        + (
            f" Against the achievable ceiling: {fmt.pct(dec['mbu_achievable'])}."
            if dec.get("mbu_achievable") is not None
            else ""
        ),
    )
    for phase, share in (m.get("idle_share") or {}).items():
        add(
            f"idle_share.{phase}",
            f"{word} idle, {phase_label(phase).lower()}",
            share,
            fmt.pct(share),
            f"share of the {phase_label(phase).lower()} steps' time with no {word} work running",
            f"{word} idle share: {formulas.get('idle_share', '')}; {formulas.get('gpu_idle', '')}.",
        )
    return out


def _overhead(ratio: float | None, of: str) -> str:
    """The profiler's slow-down of ``of``, as a clause (below 1 is noise, not a speed-up)."""
    if not ratio:
        return ""
    if ratio >= 1:
        return f"; the profiler slowed {of} {ratio:.2f}×"
    return f"; no profiler overhead measurable on {of} (ratio {ratio:.2f}: below 1 is measurement noise)"
