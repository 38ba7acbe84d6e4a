"""The steps table of the report: each step's phase, tokens and batch with where each came from.

A default engine trace states none of these; tracekit reads them from evidence (KV-write grids,
input copies, sampler rows...) and the user needs to see, per step, which source gave each figure
and how sure it is, not only the JSON. Long runs show their first and last steps (the JSON has
every one).
"""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt

# Rows shown before the table is cut (half from the start of the run, half from its end).
SHOWN = 24


def _count(value, source: str | None, confidence) -> dict[str, str]:
    """A count cell: the figure, and where it came from (its hover text)."""
    if value is None:
        return {"text": "?", "title": source or "not in the trace", "short": "not in the trace"}
    sure = f" (confidence {confidence:.0%})" if isinstance(confidence, float) and confidence < 1 else ""
    # The kinds of source, without their figures: "vLLM KV-cache writes, input-id/position copies".
    short = ", ".join(dict.fromkeys(p.split(" (")[0] for p in (source or "").split("; ") if p))
    return {"text": fmt.count(int(value)), "title": f"{source or ''}{sure}", "short": short + sure}


def step_rows(data: dict[str, Any], shown: int = SHOWN) -> dict[str, Any] | None:
    """Rows of the steps table, and how many steps were left out of it; None without steps."""
    steps = data.get("steps") or []
    if not steps:
        return None
    picked = steps if len(steps) <= shown else [*steps[: shown // 2], None, *steps[-(shown - shown // 2) :]]
    rows: list[dict[str, Any]] = []
    for s in picked:
        if s is None:
            rows.append({"gap": f"{len(steps) - shown:,} more steps (every step is in the JSON's steps[])"})
            continue
        conf = s.get("phase_confidence")
        phase = s.get("phase") or "unknown"
        if isinstance(conf, float) and conf < 1:
            phase += f" ({conf:.0%})"
        sides = [
            f"{k} {v['requests']} req / {fmt.count(v['tokens']) if v.get('tokens') is not None else '?'} tok"
            for k in ("prefill", "decode")
            if isinstance(v := s.get(k), dict) and v.get("requests")
        ]
        rows.append(
            {
                "gap": None,
                "index": s.get("index"),
                "label": s.get("label") or "",
                "phase": phase,
                "phase_key": s.get("phase") or "unknown",
                "evidence": s.get("evidence") or "",
                "tokens": _count(s.get("tokens"), s.get("tokens_source"), s.get("tokens_confidence")),
                "batch": _count(s.get("batch"), s.get("batch_source"), s.get("batch_confidence")),
                "sides": " · ".join(sides),
                "duration": fmt.ms(s.get("duration_ms")),
                "busy": fmt.ms(s.get("gpu_busy_ms")),
                "idle": fmt.ms(s.get("gpu_idle_ms")),
            }
        )
    inferred = sum(
        1 for s in steps if s.get("tokens_source") not in (None, "the step annotation") and s.get("tokens") is not None
    )
    return {"rows": rows, "total": len(steps), "inferred_tokens": inferred}
