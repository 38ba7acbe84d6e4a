"""``tracekit project``: a measured run re-priced on another GPU's roofline."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, read_real, real_trace_path

from tracekit.analysis.analyze import analyze
from tracekit.analysis.project import project
from tracekit.cli import main
from tracekit.report.project import render_projection
from tracekit.specs.lookup import spec_by_name

MOE = "qwen3-30b-a3b"


@pytest.mark.parametrize("src, dst, gpu", [("b300_qwen3_moe", "mi300x_qwen3_moe", "mi300x"),
                                           ("mi300x_qwen3_moe", "b300_qwen3_moe", "b300")])
def test_projection_lands_near_the_run_measured_there(src, dst, gpu):
    # The same SGLang Qwen3-30B-A3B decode step (batch 16) was recorded on both GPUs.
    pj = project(read_real(src), gpu, model=MOE)
    measured_there = analyze(read_real(dst), model=MOE).phases["decode"]["gpu_busy_ms"]
    p = pj.phases["decode"]
    assert p["projected_gpu_busy_ms"] == pytest.approx(measured_there, rel=0.30)
    lo, hi = p["projected_range"]["gpu_busy_ms"]
    assert lo <= p["projected_gpu_busy_ms"] <= hi
    # The GPU moved the way its bandwidth moved: decode is memory-bound.
    faster = spec_by_name(gpu).peak_bandwidth > spec_by_name(pj.source.device["spec_key"]).peak_bandwidth
    assert (p["projected_gpu_busy_ms"] < p["measured_gpu_busy_ms"]) == faster


def test_projecting_onto_the_same_gpu_changes_nothing():
    trace = read_real("b300_qwen3_moe")
    pj = project(trace, "b300", model=MOE)
    p = pj.phases["decode"]
    assert p["projected_gpu_busy_ms"] == pytest.approx(p["measured_gpu_busy_ms"], rel=1e-6)
    assert p["projected_step_ms"] == pytest.approx(p["measured_step_ms"], rel=1e-6)
    assert p["projected_range"]["gpu_busy_ms"][0] == pytest.approx(p["measured_gpu_busy_ms"], rel=1e-6)


def test_compute_limited_work_moves_with_flops_and_memory_limited_with_bandwidth():
    trace = read_real("h100_hf")
    h100 = spec_by_name("h100-sxm")
    fast = dataclasses.replace(h100, key="h100-2x-flops", name="H100 with twice the FLOPs",
                               matrix_flops={k: 2 * v for k, v in h100.matrix_flops.items()})
    pj = project(trace, fast)
    src, dst = pj.source.work, pj.projected["central"].work
    # GEMMs far enough above the ridge stay compute-bound with twice the FLOPs: half the time.
    gemm = (src["category"] == "gemm") & (src["limiter"] == "compute") & (src["intensity"] > 2 * src["ridge"])
    mem = (src["limiter"] == "memory") & (src["unit"] == "vector")
    assert gemm.any() and mem.any()
    assert dst.loc[gemm, "dur_ns"].sum() == pytest.approx(src.loc[gemm, "dur_ns"].sum() / 2, rel=0.01)
    # Those just above it cross the ridge: they end memory-bound, faster but not 2x.
    near = (src["category"] == "gemm") & (src["limiter"] == "compute") & (src["intensity"] < 2 * src["ridge"])
    if near.any():
        assert (dst.loc[near, "bound"] == "memory").all()
        assert src.loc[near, "dur_ns"].sum() / 2 < dst.loc[near, "dur_ns"].sum() < src.loc[near, "dur_ns"].sum()
    assert dst.loc[mem, "dur_ns"].sum() == pytest.approx(src.loc[mem, "dur_ns"].sum(), rel=0.001)
    # Idle stays as measured, plus the time the host's own work holds the step after the
    # faster GPU is done (a step is never shorter than its host's work): that is host idle.
    src_p, dst_p = pj.source.phases["prefill"], pj.projected["central"].phases["prefill"]
    saved = src_p["gpu_busy_ms"] - dst_p["gpu_busy_ms"]
    held = dst_p["time_ms"] - (src_p["time_ms"] - saved)
    assert held >= -1e-6
    assert dst_p["gpu_idle_ms"] == pytest.approx(src_p["gpu_idle_ms"] + held, abs=1e-5)
    for cause, ms in src_p["idle_by_cause"].items():
        expect = ms + held if cause == "host" else ms
        assert dst_p["idle_by_cause"][cause] == pytest.approx(expect, abs=1e-5)


def test_dtypes_the_target_lacks_run_at_a_wider_one():
    pj = project(read_real("gb10_vllm"), "mi300x", model="qwen3.5-27b", weights="nvfp4")
    assert any("no fp4 matrix peak" in n and "fp8 rate" in n for n in pj.notes)


def test_idle_and_host_bound_steps_stay():
    # One blocking host copy is 98% of this step: a faster GPU barely shortens it.
    pj = project(read_real("mi300x_decode"), "b300", model="qwen3-8b")
    p = pj.phases["decode"]
    assert p["projected_gpu_busy_ms"] < p["measured_gpu_busy_ms"]
    saved = p["measured_gpu_busy_ms"] - p["projected_gpu_busy_ms"]
    assert p["projected_step_ms"] == pytest.approx(p["measured_step_ms"] - saved, rel=1e-3)
    assert p["projected_step_ms"] > 0.95 * p["measured_step_ms"]


def test_projection_json_and_renderers():
    pj = project(read_real("b300_qwen3_moe"), "mi300x", model=MOE)
    d = json.loads(render_projection(pj, "json"))
    assert d["kind"] == "tracekit.projection" and d["target"]["spec_key"] == "mi300x"
    dec = d["phases"]["decode"]
    assert {"projected_gpu_busy_ms", "projected_step_ms", "projected_range", "latency_kept_gpu_busy_ms"} <= set(dec)
    assert d["projected"]["device"]["spec"] == "MI300X" and d["measured"]["device"]["spec"] == "B300 (HGX)"
    html = render_projection(pj, "html")
    assert html.count("<script") <= 3 and len(html) < 3_000_000 and 'data-key="decode_step_p50"' in html
    for fmt in ("md", "text"):
        out = render_projection(pj, fmt)
        assert "MI300X" in out and "latency-limited" in out


def test_project_cli(tmp_path):
    path = str(real_trace_path("b300_qwen3_moe"))
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["project", path, "--to", "mi300x", "--model", MOE, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["phases"]["decode"]["projected_gpu_busy_ms"] > 0
    again = CliRunner().invoke(main, ["project", path, "--to", "mi300x", "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    bad = CliRunner().invoke(main, ["project", path, "--to", "no-such-gpu", "-o", str(tmp_path / "x.html")])
    assert bad.exit_code == 2 and "not in tracekit's GPU database" in bad.output and "Traceback" not in bad.output
    text = CliRunner().invoke(main, ["project", path, "--to", "mi300x", "-f", "text"])
    assert text.exit_code == 0 and "projected" in text.output
    assert "Example:" in CliRunner().invoke(main, ["project", "--help"]).output


def test_project_refuses_cpu_traces(tmp_path):
    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    r = CliRunner().invoke(main, ["project", str(path), "--to", "h100-sxm", "-o", str(tmp_path / "p.html")])
    assert r.exit_code == 2 and "CPU-only" in r.output


def test_compare_takes_a_projection_as_one_side(tmp_path):
    a, b = str(real_trace_path("mi300x_qwen3_moe")), str(real_trace_path("b300_qwen3_moe"))
    out = tmp_path / "c.json"
    r = CliRunner().invoke(main, ["compare", a, b, "--project-before", "b300", "--model", MOE, "-o", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert "projected from AMD Instinct MI300X" in d["before"]["device"]["name"]
    step = next(h for h in d["headline"] if h["key"] == "decode_step_p50")
    assert step["before"] == pytest.approx(step["after"], rel=0.30)


def test_project_needs_the_measured_gpus_peaks():
    from conftest import with_device_name

    from tracekit.errors import TracekitError

    with pytest.raises(TracekitError, match="measured GPU has no spec row.*pass --gpu"):
        project(with_device_name(read_real("h100_hf")), "b200")
    # Saying which GPU it ran on is enough.
    assert project(with_device_name(read_real("h100_hf")), "b200", gpu="h100-sxm").phases["prefill"]
