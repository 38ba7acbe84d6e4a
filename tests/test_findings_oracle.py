"""Which findings a report holds, and the figures they quote, from the report's own figures and
the thresholds the rules document (``tracekit.analysis.findings.rules``' table, README):

- ``phase-bound``: one per phase with kernel time, naming the bound that holds the most of it
  (compute, memory, interconnect, unknown; the first on a tie) with its share, and the phase's
  idle share;
- ``decode-attention-share``: attention is at least 25% of decode kernel time;
- ``unknown-cost``: per phase, at least 20% of its kernel time has unknown cost;
- ``tpot-growth``: the decode series' last-quarter median is at least 20% above the first's;
- ``outside-steps``: at least 10% of the trace's kernel time ran outside every step;
- ``graph-replay``: some step replayed a CUDA/HIP graph;
- ``no-steps`` / ``training-run`` / ``device-unknown``: as they say.

Every shared trace and both samples; the expectations read only the JSON report. Fails if a
finding fires on the wrong side of its threshold, for the wrong phase, twice, or quotes a
figure other than the one the report shows.
"""

from __future__ import annotations

import pytest
from conftest import SAMPLE_TRACES, all_real_traces, read_real

from tracekit import read_trace
from tracekit.analysis import analyze

SAMPLES = ["tiny-bs1", "tiny-bs8"]
ATTENTION, UNKNOWN_COST, GROWTH, OUTSIDE = 0.25, 0.20, 0.20, 0.10
WHAT = {
    "compute": "compute-bound",
    "memory": "memory-bound",
    "interconnect": "interconnect-bound",
    "unknown": "of unknown bound",
}
PHASE_TEXT = {"unknown": "unclassified steps'", "mixed": "mixed steps'"}


def _report(key: str) -> dict:
    if key in SAMPLES:
        path = SAMPLE_TRACES / f"{key}.pt.trace.json.gz"
        if not path.exists():
            pytest.skip(f"{path} is absent")
        return analyze(read_trace(str(path))).to_dict()
    return analyze(read_real(key)).to_dict()


def _pct(x: float) -> str:
    return f"{x:.0%}"


@pytest.mark.parametrize("key", all_real_traces() + SAMPLES)
def test_findings_follow_from_the_reports_figures(key):
    d = _report(key)
    found = d["findings"]
    by_id: dict[str, list[dict]] = {}
    for f in found:
        by_id.setdefault(f["id"], []).append(f)
    phases, steps, m = d["phases"], d["steps"], d["metrics"]
    unit = "CPU" if d["device"].get("type") == "cpu" else "GPU"

    bound_phases = [p for p, v in phases.items() if v["kernel_ms"]]
    assert [f["phase"] for f in by_id.get("phase-bound", [])] == bound_phases
    for f in by_id.get("phase-bound", []):
        v = phases[f["phase"]]
        bound = max(("compute", "memory", "interconnect", "unknown"), key=lambda b: v["by_bound"][b])
        label = {"unknown": "Unclassified steps", "mixed": "Mixed steps"}.get(f["phase"], f["phase"].capitalize())
        text = f"{label}: {_pct(v['by_bound'][bound] / v['kernel_ms'])} of kernel time is {WHAT[bound]}"
        if v.get("idle_share") is not None:
            text += f", and the {unit} is idle {_pct(v['idle_share'])} of the phase"
        assert f["text"] == text + "."

    dec = phases.get("decode")
    attention = dec["by_category"].get("attention", 0.0) / dec["kernel_ms"] if dec and dec["kernel_ms"] else 0.0
    fired = by_id.get("decode-attention-share", [])
    assert len(fired) == (1 if attention >= ATTENTION else 0)
    for f in fired:
        assert f["text"].startswith(f"Attention is {_pct(attention)} of decode kernel time")

    unknown = [
        p
        for p, v in phases.items()
        if v.get("unknown_cost_share") is not None and v["unknown_cost_share"] >= UNKNOWN_COST
    ]
    assert [f["phase"] for f in by_id.get("unknown-cost", [])] == unknown
    for f in by_id.get("unknown-cost", []):
        share = phases[f["phase"]]["unknown_cost_share"]
        assert f["text"].startswith(
            f"{_pct(share)} of {PHASE_TEXT.get(f['phase'], f['phase'])} kernel time has unknown cost: "
        )

    growth = m.get("tpot_growth")
    fired = by_id.get("tpot-growth", [])
    assert len(fired) == (1 if growth is not None and growth >= GROWTH else 0)
    for f in fired:
        assert f["text"].startswith(f"Decode steps slow down {_pct(growth)} from the first to the last quarter")

    total = d["overall"]["kernel_ms"]
    outside = d["provenance"]["outside_steps"]["ms"] / total if total else 0.0
    fired = by_id.get("outside-steps", [])
    assert len(fired) == (1 if steps and total and outside >= OUTSIDE else 0)
    for f in fired:
        assert f["text"].startswith(f"{_pct(outside)} of the trace's kernel time ran outside any step")

    assert len(by_id.get("graph-replay", [])) == (1 if any(s["graph_replay"] for s in steps) else 0)
    assert len(by_id.get("training-run", [])) == (1 if d["run_kind"] == "training" else 0)
    assert len(by_id.get("no-steps", [])) == (1 if not steps and d["run_kind"] != "training" else 0)
    assert len(by_id.get("device-unknown", [])) == (1 if d["device"].get("spec") is None else 0)


SYNC, LAUNCH, HOST, WAIT, MIN_AT_STAKE = 0.05, 0.20, 0.20, 0.20, 0.01


def _n(v: dict) -> int:
    """The steps a phase's per-step figures are over: its own and the split mixed ones, at least 1."""
    return max(int(v.get("steps") or 0) + int(v.get("mixed_steps") or 0), 1)


def _ms(ms: float) -> str:
    return f"{ms / 1e3:.3g} s" if ms >= 1e3 else f"{ms:.3g} ms"


PHASE_NAME = {"unknown": "unclassified", "mixed": "mixed"}


@pytest.mark.parametrize("key", all_real_traces() + SAMPLES)
def test_idle_advice_follows_from_the_phases_idle_causes(key):
    """The idle advice (``tracekit.analysis.findings.advice``' table): per phase of a GPU run,
    ``host-sync`` when synchronising calls cause at least 5% of its time as idle and a sync
    interval is among its largest (at stake: that interval's time); of launch, host and wait,
    the largest, if no other cause is larger, at 20% of the phase's time or more, gives
    ``launch-bound``, ``host-bound`` or ``gpu-waits``; advice whose time at stake is under 1% of
    the phase's time is dropped; advice comes largest time at stake first. Fails if a cause is
    compared with the wrong base or threshold, or a finding quotes another share."""
    d = _report(key)
    found = [f for f in d["findings"] if f["id"] in ("host-sync", "launch-bound", "host-bound", "gpu-waits")]
    want: dict[tuple[str, str], str] = {}  # (id, phase) -> the share the text quotes
    if d["device"].get("type") == "gpu":
        for p, v in d["phases"].items():
            causes, time = v.get("idle_by_cause") or {}, v.get("time_ms") or 0.0
            if not causes or time <= 0:
                continue
            sync = next((r for r in v.get("idle_top") or [] if r["cause"] == "sync"), None)
            if causes["sync"] >= SYNC * time and sync is not None and sync["ms"] >= MIN_AT_STAKE * time * (1 - 1e-12):
                want[("host-sync", p)] = _pct(sync["share"])
            largest = max(("launch", "host", "wait"), key=lambda c: causes[c])
            if causes[largest] < max(causes.values()):
                continue
            share = causes[largest] / time
            kind = {"launch": ("launch-bound", LAUNCH), "host": ("host-bound", HOST), "wait": ("gpu-waits", WAIT)}
            fid, threshold = kind[largest]
            if share >= threshold:
                want[(fid, p)] = _pct(share)
    assert sorted((f["id"], f["phase"]) for f in found) == sorted(want)
    for f in found:
        share = want[(f["id"], f["phase"])]
        name = PHASE_NAME.get(f["phase"], f["phase"])
        v = d["phases"][f["phase"]]
        if f["id"] == "host-sync":
            assert f"{share} of the {name} steps' time; the GPU was idle meanwhile" in f["text"]
            sync = next(r for r in v["idle_top"] if r["cause"] == "sync")
            assert f["sum_ms"] == pytest.approx(sync["share"] * v["time_ms"], rel=1e-9)
        elif f["id"] == "launch-bound":
            kernels = [s["kernels"] for s in d["steps"] if s["phase"] == f["phase"]]
            per_kernels = f"{sum(kernels) / len(kernels):,.0f}" if kernels else "0"
            assert f["text"].startswith(
                f"{name.capitalize()} is launch-bound: the GPU waits for kernel launches "
                f"{share} of the {name} steps' time ({_ms(v['idle_by_cause']['launch'] / _n(v))} "
                f"per step, {per_kernels} kernels per step)"
            )
            assert f["sum_ms"] in (None, pytest.approx(v["idle_by_cause"]["launch"], rel=1e-12))
        elif f["id"] == "host-bound":
            assert f["text"].startswith(
                f"The GPU waits for host work between launches {share} of the {name} steps' "
                f"time ({_ms(v['idle_by_cause']['host'] / _n(v))} per step)"
            )
            assert f["sum_ms"] == pytest.approx(v["idle_by_cause"]["host"], rel=1e-12)
        else:
            assert f"but waited {share} of the steps' time before starting" in f["text"]
    # Advice, largest time at stake first (advice without a figure counts as none).
    stakes = [f["at_stake_ms"] or 0.0 for f in d["findings"] if f["action"] is not None or f["at_stake_ms"] is not None]
    assert stakes == sorted(stakes, reverse=True)
