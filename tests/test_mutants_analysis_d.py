"""Behaviours of tracekit.analysis that surviving mutants showed no test pinned: the Student-t
widening of a several-runs interval, a run's idle-share figure by its compare key, the CPU/GPU word
of a comparison's idle labels, the limiter of a merged report's top kernel (its time-weighted roof
fraction, not its units' majority), and the reason a lone step's one-off sync is left out of a plan.
Expected figures are hand arithmetic on hand-built analyses and traces, Student's t table, or the
A100's datasheet peak (312 dense bf16 TFLOP/s)."""

from __future__ import annotations

import math

import pytest
from conftest import bare_analysis
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.merge import merge
from tracekit.analysis.model import Analysis
from tracekit.compare.comparison import compare
from tracekit.compare.spread import change_interval, metric_value
from tracekit.whatif.fit import one_off_idle


def _steady_run(step_ms: float, steps: int = 4) -> Analysis:
    """A request-level run whose decode steps all take ``step_ms``: no spread within the run."""
    return bare_analysis(
        {"tpot_series_ms": [step_ms] * steps, "tpot_ms": {"mean": step_ms, "p50": step_ms, "p90": step_ms}}
    )


# --- spread: the Student-t interval of several runs a side ------------------------------------


def test_several_steady_runs_a_side_widen_the_interval_to_the_student_t_one():
    """catches: the t half-width's standard error sqrt(s^2 (1/Rb + 1/Ra)) built wrongly (e.g.
    ``1 | Rb + ...``, which raises on a float), so a comparison of several runs a side either
    crashes or keeps the bootstrap's interval, which cannot draw a run it has not seen."""
    before = [_steady_run(10.0), _steady_run(12.0)]
    after = [_steady_run(14.0), _steady_run(16.0)]
    iv = change_interval("tpot_mean", before, after)
    # Per-run means: before 10, 12 (mean 11), after 14, 16 (mean 15): change 4 ms. Pooled
    # variance: ((1 + 1) + (1 + 1)) / (2 + 2 - 2) = 2; t(0.975, 2 df) = 4.303 (Student's table).
    half = 4.303 * math.sqrt(2 * (1 / 2 + 1 / 2))
    assert half == pytest.approx(6.0853, abs=1e-4)
    # The bootstrap only reaches changes of 2..6 ms (runs redrawn, steps constant): t is wider.
    assert iv["delta"] == pytest.approx([4 - half, 4 + half], abs=1e-9)
    assert "Student-t" in iv["basis"] and "2 degrees of freedom" in iv["basis"]
    assert iv["runs"] == {"before": 2, "after": 2}


# --- spread/compare: idle shares by key -------------------------------------------------------


def test_idle_share_figures_are_the_runs_phase_idle_shares():
    """catches: the phase name cut wrongly from ``<phase>_idle_share`` (e.g. one character too
    many, "decod"), so a run's idle shares read as missing and compare shows no idle row."""
    a = bare_analysis({"idle_share": {"prefill": 0.1, "decode": 0.25}})
    assert metric_value(a, "decode_idle_share") == 0.25
    assert metric_value(a, "prefill_idle_share") == 0.1
    b = bare_analysis({"idle_share": {"prefill": 0.2, "decode": 0.4}})
    row = next(h for h in compare(a, b).headline if h["key"] == "decode_idle_share")
    assert (row["before"], row["after"]) == (0.25, 0.4)
    assert row["delta"] == pytest.approx(0.15)


def test_idle_labels_say_cpu_only_when_both_runs_are_cpu_runs():
    """catches: the device word of the idle labels chosen by anything but "both runs are CPU
    runs" (e.g. a strict superset of {"cpu"}), which calls two CPU runs' idle "GPU idle" or a
    CPU run against a GPU run's "CPU idle"."""
    cpu = {"name": "x86_64", "type": "cpu", "spec": None}
    gpu = {"name": "GPU A", "type": "gpu", "spec": "A"}

    def label(dev_before, dev_after) -> str:
        runs = [
            bare_analysis({"idle_share": {"decode": share}}, device=dev)
            for share, dev in ((0.2, dev_before), (0.3, dev_after))
        ]
        return next(h for h in compare(*runs).headline if h["key"] == "decode_idle_share")["label"]

    assert label(cpu, cpu) == "decode CPU idle"
    assert label(cpu, gpu) == "decode GPU idle"
    assert label(gpu, gpu) == "decode GPU idle"


# --- merge: a merged top kernel's limiter ----------------------------------------------------

BF16 = "c10::BFloat16"
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"


def test_merged_top_kernel_limiter_follows_its_time_weighted_roof_fraction(tmp_path):
    """catches: a merged report's top-kernel limiter taken from its units' majority where the
    kernel has a time-weighted roof fraction (or computed from a missing one), so a GEMM whose
    time is almost all one slow call reads compute-bound though it runs at 2 % of its roof."""
    d = Doc()  # A100-SXM4-80GB: 312 dense bf16 TFLOP/s (datasheet)
    n = 4096
    flops = 2 * n**3  # 137.4 GFLOP per call: 440 us at the peak
    roof_us = flops / 312e12 * 1e6
    durs = [1000.0, 1000.0, 1000.0, 100_000.0]  # three calls at 44 % of the roof, one at 0.44 %
    ts = 1000.0
    for i, dur in enumerate(durs):
        d.annotation(f"tracekit::decode#{i} bs=1", ts, dur + 100.0)
        ext = d.op("aten::mm", ts + 5.0, 20.0, dims=[[n, n], [n, n]], types=[BF16, BF16])
        d.kernel(GEMM, ts + 10.0, ts + 30.0, dur, ext=ext)
        ts += dur + 200.0
    a = analyze(read_trace(d.write(tmp_path / "gemm.json")))
    units = a.work[a.work["name"].astype(str) == GEMM]
    assert len(units) == 4 and sorted(units["bound"]) == ["compute"] * 4
    assert units["roof_fraction"].to_numpy() == pytest.approx([roof_us / x for x in durs], rel=1e-3)
    assert (units["limiter"] == "compute").sum() == 3  # the majority of units: compute-bound
    # Time-weighted: 4 x 440 us of roof time over 103 ms = 1.7 %, under the 30 % latency line.
    weighted = 4 * roof_us / sum(durs)
    assert weighted == pytest.approx(0.0171, abs=1e-4)
    merged = merge([a])
    for rows in (merged.top_kernels["decode"], merged.overall["top_kernels"]):
        top = next(r for r in rows if r["name"] == GEMM)
        assert top["roof_fraction"] == pytest.approx(weighted, rel=1e-3)
        assert (top["bound"], top["limiter"]) == ("compute", "latency")


# --- plan: why a one-off sync is left out ----------------------------------------------------

BLOCKED = {"gpu_busy_ms": 10.0, "duration_ms": 30.0, "idle_by_cause": {"sync": 19.0, "launch": 1.0}}
STEADY = {"gpu_busy_ms": 10.0, "duration_ms": 11.0, "idle_by_cause": {"sync": 0.02, "launch": 0.98}}


def test_a_lone_steps_one_off_sync_is_left_out_because_nothing_shows_it_recurring():
    """catches: the reason for a one-step phase chosen by the wrong step count (e.g. n == 0), so
    the plan says "0 of the 1 decode steps do not show it" of the one step that does."""
    one = one_off_idle([BLOCKED], "decode")
    assert one["excluded"] and one["steps"] == 1 and one["of_steps"] == 1
    assert one["reason"].endswith("; the run holds one decode step, so nothing shows it recurring")
    assert "0 of the 1" not in one["reason"]
    # Two steps, one blocked (19 ms of sync beside 10 ms of GPU work): the other does not show it.
    two = one_off_idle([BLOCKED, STEADY], "prefill")
    assert two["excluded"] and two["steps"] == 1
    assert two["reason"].endswith("; 1 of the 2 prefill steps do not show it")
