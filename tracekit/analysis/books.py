"""One set of books: the identities every analysis must satisfy, checked on every analysis.

- Per step: duration = GPU busy + GPU idle (integer nanoseconds, exactly), none negative.
- Per step of a GPU trace: its idle causes sum to its idle time (exactly).
- Per step: its weights in the phases sum to 1 (a split mixed step's prefill and decode
  parts sum to the step), so the phases sum to the run.
- Per phase: time = busy + idle; over the phases, time sums to the steps' durations.
- Per split mixed step: its prefill and decode GPU parts sum to its busy time.

A violation is a bug in tracekit, not in the trace. ``check`` returns the violations as
sentences; ``enforce`` raises them when ``STRICT_ENV`` is set (the test suite and the fuzz
campaign set it) and otherwise lets the analysis carry them as notes, so that a user's
report still comes out and says plainly that its figures do not add up.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

STRICT_ENV = "TRACEKIT_STRICT_BOOKS"
# Phase figures are float sums of weighted ms: equal to within rounding, not bit for bit.
_REL = 1e-9
_MAX_LISTED = 3  # offending steps named per identity


class BooksError(RuntimeError):
    """The analysis's figures do not add up: a tracekit bug, not the user's input, so not a
    ``TracekitError`` (the fuzz campaign counts it as a crash)."""


def check(steps: pd.DataFrame, idle_by_step: np.ndarray | None, weights: dict[str, np.ndarray],
          phases: dict[str, dict], split_by_step: dict[int, dict], device_type: str) -> list[str]:
    """The violated identities, one sentence each (empty when the books balance)."""
    out: list[str] = []
    if not len(steps):
        return out
    dur = steps["duration_ns"].to_numpy()
    busy = steps["gpu_busy_ns"].to_numpy()
    idle = steps["gpu_idle_ns"].to_numpy()
    _rows(out, (busy < 0) | (idle < 0) | (dur < 0), steps, "negative busy, idle or duration")
    _rows(out, dur != busy + idle, steps, "duration is not GPU busy + GPU idle")
    if device_type == "gpu" and idle_by_step is not None and len(idle_by_step) == len(steps):
        _rows(out, idle_by_step.sum(axis=1) != idle, steps, "idle causes do not sum to the idle time")
    total_w = np.sum([w for w in weights.values()], axis=0) if weights else np.zeros(len(steps))
    _rows(out, ~np.isclose(total_w, 1.0, rtol=0, atol=1e-9), steps, "phase weights do not sum to 1")
    run_ms = float(dur.sum()) / 1e6
    phase_ms = 0.0
    for p, v in phases.items():
        t, b, i = v.get("time_ms") or 0.0, v.get("gpu_busy_ms") or 0.0, v.get("gpu_idle_ms") or 0.0
        phase_ms += t
        if not _close(t, b + i):
            out.append(f"phase {p}: time {t:.6g} ms is not busy {b:.6g} + idle {i:.6g} ms")
    if not _close(phase_ms, run_ms):
        out.append(f"the phases' time {phase_ms:.6g} ms is not the steps' total {run_ms:.6g} ms")
    for i, s in split_by_step.items():
        parts = sum(float((s.get(p) or {}).get("gpu_ms") or 0.0) for p in ("prefill", "decode"))
        if not _close(parts, float(busy[i]) / 1e6):
            out.append(f"mixed step {i}: its parts {parts:.6g} ms are not its busy time {busy[i] / 1e6:.6g} ms")
    return out


def enforce(violations: list[str]) -> list[str]:
    """Raise ``BooksError`` under ``STRICT_ENV``; otherwise the notes the analysis carries."""
    if not violations:
        return []
    if os.environ.get(STRICT_ENV):
        raise BooksError("the analysis's books do not balance (a tracekit bug): " + "; ".join(violations))
    return [f"tracekit bug, please report it: {v}" for v in violations]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b), 1e-3)


def _rows(out: list[str], bad: np.ndarray, steps: pd.DataFrame, what: str) -> None:
    where = np.flatnonzero(bad)
    if len(where):
        named = ", ".join(str(int(s)) for s in steps["step"].to_numpy()[where[:_MAX_LISTED]])
        more = f" and {len(where) - _MAX_LISTED} more" if len(where) > _MAX_LISTED else ""
        out.append(f"{what} in step{'s' if len(where) > 1 else ''} {named}{more}")
