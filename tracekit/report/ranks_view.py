"""View-model of the ranks section (``analysis.ranks``): display text only, no figure computed."""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt

# Step columns shown per rank in the aligned-steps table; beyond this, the first ones and a note.
MAX_STEP_ROWS = 50


def ranks(data: dict[str, Any]) -> dict[str, Any] | None:
    """Rows per rank, the straggler and skew sentence, notes, and the aligned-steps table;
    None when the report has no ranks (a single-process trace)."""
    entries = data.get("ranks") or []
    if not entries:
        return None
    s = data.get("rank_summary") or {}
    straggler = s.get("straggler")
    rows = []
    for e in entries:
        rows.append(
            {
                "rank": e["rank"],
                "device": str(e.get("device") or fmt.MISSING),
                "straggler": e["rank"] == straggler,
                "steps": len(e.get("steps") or []),
                "step_time": fmt.ms(e.get("step_time_ms")),
                "span": fmt.ms(e.get("span_ms")),
                "busy": fmt.ms(e.get("gpu_busy_ms")),
                "idle": fmt.ms(e.get("idle_ms")),
                "kernel": fmt.ms(e.get("kernel_ms")),
                "collectives": fmt.count(e.get("collectives")),
                "collective": fmt.ms(e.get("collective_ms")),
                "collective_share": fmt.pct(e.get("collective_share")),
                "wait": fmt.ms(e.get("collective_wait_ms")),
                "overlap": fmt.pct(e.get("overlap_share")),
            }
        )
    return {
        "rows": rows,
        "headline": headline(s),
        "notes": [str(n) for n in s.get("notes") or []],
        "method": s.get("wait_method"),
        "steps": _aligned_steps(entries),
    }


def headline(s: dict[str, Any]) -> str:
    """One sentence: who the straggler is and what the others lose, or why that is unknown."""
    world = s.get("world_size")
    present = s.get("present") or []
    have = f"{len(present)} of {world} ranks" if world else f"{len(present)} ranks (world size unknown)"
    if s.get("straggler") is None:
        return f"{have} in the trace; straggler: none ({s.get('reason') or 'not measurable'})."
    share = f", {fmt.pct(s.get('lost_share'))} of their time span" if s.get("lost_share") is not None else ""
    coll = (
        f", {fmt.pct(s.get('lost_share_of_collective'))} of their collective time"
        if s.get("lost_share_of_collective") is not None
        else ""
    )
    return (
        f"{have} in the trace; straggler: rank {s['straggler']}. The others lose {fmt.ms(s.get('lost_ms'))} "
        f"waiting for it inside collectives{share}{coll} (matched {s.get('wait_method')})."
    )


def _aligned_steps(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps by index, one column group per rank (step time, collective time, wait)."""
    n = max((len(e.get("steps") or []) for e in entries), default=0)
    rows = []
    for i in range(min(n, MAX_STEP_ROWS)):
        cells = []
        phase = None
        for e in entries:
            st = e.get("steps") or []
            if i < len(st):
                phase = phase or st[i].get("phase")
                cells.append(
                    {
                        "time": fmt.ms(st[i].get("time_ms")),
                        "collective": fmt.ms(st[i].get("collective_ms")),
                        "wait": fmt.ms(st[i].get("wait_ms")),
                    }
                )
            else:
                cells.append({"time": fmt.MISSING, "collective": fmt.MISSING, "wait": fmt.MISSING})
        rows.append({"index": i, "phase": str(phase or ""), "cells": cells})
    return {"ranks": [e["rank"] for e in entries], "rows": rows, "more": n - len(rows) if n > len(rows) else 0}


def text_lines(data: dict[str, Any]) -> list[str]:
    """The terminal's few lines: the headline, then one line per rank."""
    v = ranks(data)
    if v is None:
        return []
    out = [v["headline"]]
    for r in v["rows"]:
        out.append(
            f"rank {r['rank']}{' (straggler)' if r['straggler'] else ''}: busy {r['busy']} of {r['span']}, "
            f"collectives {r['collective']} ({r['collective_share']} of kernel time), wait {r['wait']}, "
            f"overlapped {r['overlap']}"
        )
    out += v["notes"]
    return out
