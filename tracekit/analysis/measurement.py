"""How far a collected run's own measurements can be trusted: a busy machine, ceilings that did not settle.

``tracekit collect`` records, in its sidecar, how much CPU other processes took while it ran
(``device.contention``, from ``tracekit.collect.contention``; older sidecars only the 1-minute
load average) and how its ceilings were measured (``calibration.checks``: plausible, settled
rounds, spread). A run timed while other work held the cores is slower than the machine is, by
an amount nobody can recover afterwards, and ceilings measured then are too low, so every
figure priced against them reads too high. ``quality`` turns those records into one verdict
that every output carries (``Analysis.measurement``): what was wrong, as sentences, and what to
do. Figures that rest on it are marked where they are shown; nothing is silently corrected.
"""

from __future__ import annotations

from typing import Any

# Older sidecars carry only the 1-minute load average: this run's own threads count in it, so
# only a load of most of the cores says another process competed.
BUSY_LOAD_PER_CORE = 0.75
WHAT_TO_DO = (
    "collect again on an idle machine, or pass --threads 1, which does not stall when other processes share the cores"
)


def busy_sentence(device: dict[str, Any] | None) -> str | None:
    """The busy-machine sentence for a CPU run's sidecar ``device`` block, or None when it was not busy."""
    device = device or {}
    cores = device.get("cores") or 1
    seen = device.get("contention")
    if isinstance(seen, dict) and seen.get("other_cores") is not None:
        if not seen.get("busy"):
            return None
        return (
            f"the machine was busy: other processes kept {seen['other_cores']:.2g} of its {cores} cores busy "
            f"while tracekit collect ran; CPU timings include waiting for them, so every time and rate of "
            f"this run is slower than the machine is. To fix it: {_hint(device)}"
        )
    load = device.get("load_average_1m")
    if load is not None and load >= BUSY_LOAD_PER_CORE * cores:
        return (
            f"the machine was busy (load average {load:.1f} on {cores} cores): CPU timings include waiting "
            f"for other processes. To fix it: {_hint(device)}"
        )
    return None


def _hint(device: dict[str, Any]) -> str:
    return "collect again on an idle machine" if device.get("threads") == 1 else WHAT_TO_DO


def quality(sidecar: dict[str, Any] | None, ceilings_note: str | None = None) -> dict[str, Any] | None:
    """The verdict on a collected run's measurements (None for a trace without a sidecar).

    ``ceilings_note`` is the analysis's own finding that the run's kernels beat the measured
    ceilings (``pricing.ceilings``): proof that they were measured wrong."""
    if not sidecar:
        return None
    device = sidecar.get("device") or {}
    busy = busy_sentence(device) if device.get("type") == "cpu" else None
    cal = sidecar.get("calibration")
    checks = (cal or {}).get("checks") or {}
    notes = [busy[0].upper() + busy[1:] + "."] if busy else []
    ceilings_reliable: bool | None = None
    spread = None
    if cal:
        reliable = checks.get("reliable", checks.get("plausible"))
        ceilings_reliable = reliable is not False and not ceilings_note and not busy
        spread = checks.get("spread")
        rounds = checks.get("attempts")
        said = f" ({'; '.join(checks['problems'])})" if checks.get("problems") else ""
        if reliable is False:
            notes.append(
                f"The measured ceilings are unreliable{said}: MFU, MBU and roof fractions in this report are "
                f"against them, not the machine's own. To fix it: {_hint(device)}."
            )
        elif busy and not ceilings_note:  # (that note is a finding of its own: ceilings-implausible)
            notes.append(
                "The ceilings were measured on the busy machine"
                + (f" ({rounds} round{'s' if rounds != 1 else ''})" if rounds else "")
                + ": MFU, MBU and roof fractions in this report are against them, not the machine's own."
            )
    reliable = not notes and ceilings_reliable is not False
    return {
        "reliable": reliable,
        "busy": bool(busy),
        "ceilings_reliable": ceilings_reliable,
        "notes": notes,
        "advice": None if reliable else _hint(device),
        "spread": spread,
        "contention": device.get("contention"),
        "load_average_1m": device.get("load_average_1m"),
    }


def at_stake_note(measurement: dict[str, Any] | None) -> str | None:
    """Why a finding's time at stake is not a fact on this run (None: it is as measured)."""
    if not measurement or measurement.get("reliable"):
        return None
    if measurement.get("busy"):
        return "not a fact: measured on a busy machine, so part of this time was waiting for other processes"
    return "not a fact: it rests on ceilings measured unreliably"


def mark(findings: list, measurement: dict[str, Any] | None) -> list:
    """``findings`` with each time at stake marked as not a fact where the measurement is not."""
    note = at_stake_note(measurement)
    if note is not None:
        for f in findings:
            if f.at_stake_ms is not None:
                f.at_stake_note = note
    return findings
