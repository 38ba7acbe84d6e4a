"""The steps' critical paths as a Perfetto track of an annotated trace (``report.annotate``).

Each step's critical path (``analysis.replay.critical``: the chain of host work, launches, queueing
and kernels that set its duration) becomes ``X`` slices on one track named "critical path", each
named by its kind and what it is (``kernel: gemm: <name>``, ``launch: cudaLaunchKernel``), with
its step and kind in the args. The segments are on the replay's clock, which for the unchanged
replay is the trace's within the books' error (``analysis.replay``), so they sit under the
kernels and calls they name. Steps whose windows overlap go to further lanes (``annotate._spread``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

CRITICAL_TID = 3
TITLE = "critical path"


def critical_slices(replayer, pid: int, base_ns: int, first_step: int = 0, category: str = "tracekit") -> list[dict]:
    """Every step's critical-path segments as slices on track ``CRITICAL_TID`` of ``pid``; none
    without a replay (no steps)."""
    if replayer is None:
        return []
    out: list[dict[str, Any]] = []
    for step in range(len(replayer.steps)):
        for seg in replayer.critical_path(step):
            if seg.end_ns <= seg.start_ns:
                continue
            out.append(
                {
                    "ph": "X",
                    "cat": category,
                    "name": f"{seg.kind}: {seg.label}",
                    "pid": pid,
                    "tid": CRITICAL_TID,
                    "ts": Decimal(int(seg.start_ns) - base_ns).scaleb(-3),
                    "dur": Decimal(int(seg.end_ns - seg.start_ns)).scaleb(-3),
                    "args": {
                        "step": first_step + step,
                        "kind": seg.kind,
                        "what": seg.label,
                        "ms": (seg.end_ns - seg.start_ns) / 1e6,
                    },
                }
            )
    return out


def track_metadata(pid: int, category: str = "tracekit") -> list[dict]:
    return [
        {"ph": "M", "cat": category, "name": "thread_name", "pid": pid, "tid": CRITICAL_TID, "args": {"name": TITLE}},
        {
            "ph": "M",
            "cat": category,
            "name": "thread_sort_index",
            "pid": pid,
            "tid": CRITICAL_TID,
            "args": {"sort_index": CRITICAL_TID},
        },
    ]
