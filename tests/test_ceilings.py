"""Ceilings you can trust: collect checks its measurements, and a report never prices against
a roof the run's own kernels beat."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import SAMPLE_TRACES, read_real

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.collect.calibrate import CPU_FLOOR_FLOPS, problems
from tracekit.specs.lookup import spec_by_name


def _sample(name="tiny-bs1"):
    path = SAMPLE_TRACES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent (regenerate with sample_traces/regenerate.sh)")
    return read_trace(str(path))


def _with_calibration(trace, **changes):
    side = json.loads(json.dumps(trace.sidecar or {}))
    side.setdefault("calibration", {}).update(changes)
    return dataclasses.replace(trace, sidecar=side)


def test_a_busy_machines_ceiling_is_raised_to_what_the_run_achieved():
    trace = _sample()
    good = analyze(trace)
    # The calibration ran while another process held the core: 0.0012 TFLOP/s.
    bad = analyze(_with_calibration(trace, matmul_flops={"fp32": 1.2e9}))
    assert good.metrics["prefill_mfu"] < 1 and "ceilings-implausible" not in {f.id for f in good.findings}
    f = next(f for f in bad.findings if f.id == "ceilings-implausible")
    assert "0.0012" in f.text and f.severity == "warning"
    assert bad.metrics["prefill_mfu"] <= 1.0 + 1e-9
    gemm = bad.work[
        (bad.work["category"] == "gemm") & bad.work["roof_fraction"].notna() & (bad.work["dur_ns"] >= 20_000)
    ]
    assert (gemm["roof_fraction"] <= 1.02).all()
    # Decode GEMMs stay memory-bound: a too-low matmul ceiling had made them look compute-bound.
    for a in (good, bad):
        share = a.phases["decode"]["by_bound_share"]
        assert share["memory"] > share["compute"]
    assert "raised to what the run achieved" in bad.device["peak_basis"]


def test_a_gpus_measured_ceiling_the_kernels_beat_falls_back_to_the_datasheet():
    trace = read_real("h100_hf")
    side = {
        "calibration": {
            "device": "cuda",
            "device_name": "NVIDIA H100 80GB HBM3",
            "dtype": "bf16",
            "matmul_flops": {"bf16": 1e12},
            "copy_bandwidth": 3e12,
            "method": "test",
        }
    }
    a = analyze(dataclasses.replace(trace, sidecar=side))
    assert any(f.id == "ceilings-implausible" and "datasheet" in f.text for f in a.findings)
    h100 = spec_by_name("h100-sxm")
    gemm = a.work[a.work["category"] == "gemm"]
    assert gemm["achievable_flops"].max() == pytest.approx(h100.achievable_flops("bf16", "matrix"))


def test_an_implausible_gpu_calibration_is_not_used():
    trace = read_real("h100_hf")
    cal = {
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "dtype": "bf16",
        "matmul_flops": {"bf16": 9e14},
        "copy_bandwidth": 3e12,
        "method": "test",
        "checks": {"plausible": False, "problems": ["x"], "attempts": 3},
    }
    a = analyze(dataclasses.replace(trace, sidecar={"calibration": cal}))
    gemm = a.work[a.work["category"] == "gemm"]
    assert gemm["achievable_flops"].max() == pytest.approx(spec_by_name("h100-sxm").achievable_flops("bf16", "matrix"))


def test_calibration_checks():
    h100 = spec_by_name("h100-sxm")
    assert problems("cuda", "bf16", 700e12, 3.0e12, None, h100) == []
    assert any("outside" in p for p in problems("cuda", "bf16", 1e12, 3.0e12, None, h100))
    assert any("outside" in p for p in problems("cuda", "bf16", 2e15, 3.0e12, None, h100))  # above the peak
    assert problems("cpu", "fp32", 100e9, 20e9, 1) == []
    low = problems("cpu", "fp32", 1.2e9, 20e9, 1)
    assert low and f"{CPU_FLOOR_FLOPS['fp32'] / 1e9:.3g} GFLOP/s" in low[0]
    # The floor scales with the threads the run used.
    assert problems("cpu", "fp32", 10e9, 20e9, 8)


def test_collect_summary_calls_overheads_below_one_noise():
    from tracekit.cli.collect import summary_lines

    base = {
        "workload": {"preset": "tiny", "parameters": 5e6},
        "device": {"name": "cpu", "type": "cpu"},
        "timing": {"ttft_ms": 1.0, "tpot_ms": [1.0], "profiler_overhead_ratio": 0.63},
    }
    assert any("measurement noise" in line for line in summary_lines(base))
    base["timing"]["profiler_overhead_ratio"] = 1.4
    assert any("1.40x the unprofiled time" in line for line in summary_lines(base))
    base["calibration"] = {
        "device": "cpu",
        "matmul_flops": {"fp32": 1e9},
        "copy_bandwidth": 1e9,
        "dtype": "fp32",
        "checks": {"plausible": False, "attempts": 3, "problems": ["too low"]},
    }
    assert any("implausible after 3 measurements" in line and "raise them" in line for line in summary_lines(base))


def test_report_calls_overheads_below_one_noise():
    from tracekit.report.headline_view import headline

    trace = _sample()
    side = json.loads(json.dumps(trace.sidecar))
    side["timing"]["profiler_overhead_ratio"] = 0.63
    d = analyze(dataclasses.replace(trace, sidecar=side)).to_dict()
    note = next(f for f in headline(d) if f["key"] == "ttft_unprofiled_ms")["note"]
    assert "measurement noise" in note and "slowed" not in note
