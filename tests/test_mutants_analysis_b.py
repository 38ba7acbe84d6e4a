"""Behaviour tests that kill survivors of the mutation campaign (benchmarks/mutation.py) in
tracekit/analysis: each expected figure is worked out by hand from a trace built in the test,
or is a fact the trace itself fixes (projecting onto the GPU it was measured on moves nothing)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import read_real
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.pricing import kernel_names, taxonomy
from tracekit.analysis.pricing import model_costs as mc
from tracekit.analysis.pricing.attribution import attribute
from tracekit.analysis.pricing.roofline import limiter
from tracekit.analysis.steps import segment as seg
from tracekit.models.registry import load_model
from tracekit.specs import lookup
from tracekit.specs.lookup import SpecMatch
from tracekit.whatif.project import project

# --- segment: the leaf CPU ops of a CPU-only trace ------------------------------------------


def test_cpu_only_trace_work_is_every_leaf_op_including_the_last_top_level_one(tmp_path):
    """catches: a top-level op's missing parent (-1) taken as a row index while walking up the op
    tree, which marks the trace's last op as "has real work below" and drops that leaf from the work."""
    d = Doc()
    # aten::linear > aten::matmul > {aten::mm, aten::t (a view: metadata)}; then a lone aten::relu.
    d.op("aten::linear", 0, 100)
    d.op("aten::matmul", 10, 80)
    d.op("aten::mm", 20, 50)
    d.op("aten::t", 75, 5)
    d.op("aten::relu", 200, 30)
    s = seg.segment(read_trace(d.write(tmp_path / "cpu.json")))
    assert s.device_type == "cpu"
    # The ops that do the work: mm (its parents only contain it, t is a view) and relu.
    assert s.work["name"].tolist() == ["aten::mm", "aten::relu"]
    assert s.work["dur_ns"].tolist() == [50_000, 30_000]


# --- project: the per-phase busy time with latency-limited kernels kept as measured -------


def test_latency_kept_busy_on_the_same_gpu_is_the_measured_busy_split_by_phase():
    """catches: each step's busy time combined with its phase weight by anything but a product
    (e.g. floor division, which sends the other phase's zero-weight steps to infinity and divides
    the mixed step by its fraction instead of taking that fraction of it)."""
    trace = read_real("rtx3090_vllm")  # one prefill, one split mixed step (1), then decode steps
    model = load_model("gpt-oss-20b")
    measured = analyze(trace, model=model)
    steps = measured.to_dict()["steps"]
    assert [s["phase"] for s in steps[:3]] == ["prefill", "mixed", "decode"] and steps[1].get("split")
    # Projected onto the GPU it ran on, no kernel moves: what is kept is what was measured.
    pj = project(trace, measured.device["spec_key"], model=model)
    kept = {ph: pj.phases[ph]["latency_kept_gpu_busy_ms"] for ph in ("prefill", "decode")}
    for ph in kept:
        assert kept[ph] == pytest.approx(measured.phases[ph]["gpu_busy_ms"], rel=1e-6)
    # The mixed step's shares add up to it: the two phases together hold every step's busy time.
    assert kept["prefill"] + kept["decode"] == pytest.approx(sum(s["gpu_busy_ms"] for s in steps), rel=1e-6)
    # Prefill holds the prefill step and part, not all, of the mixed step.
    assert steps[0]["gpu_busy_ms"] < kept["prefill"] < steps[0]["gpu_busy_ms"] + steps[1]["gpu_busy_ms"]


# --- model costs: which of two same-width layers a GEMM is, from the kernel before it ----------


def test_a_window_opening_on_attention_still_tells_o_proj_from_down_proj():
    """catches: the kernel before a GEMM searched from the one just before it down to, but not
    including, the step's first kernel, so a GEMM right after a window's first kernel (here the
    attention that says "this is o_proj") is left with two layers of one width (o_proj and the
    MLP's down projection, both N=4096 on Qwen3-8B) and is not priced as its own layer."""
    # SGLang Qwen3-8B extend step: 15,360 tokens; hidden 4096 (its registry config.json).
    trace = read_real("mi300x_extend")
    s = seg.segment(trace)
    work = s.work
    cat, _ = taxonomy.categorize_units(work, trace.cpu_ops, work["op"].to_numpy())
    by_start = np.argsort(work["start_ns"].to_numpy(), kind="stable")
    comp = kernel_names.components(work, cat)[by_start]
    first_attention = int(np.flatnonzero(comp == "attention")[0])
    # The step as a profiler window that opened on that attention kernel would hold it.
    keep = by_start[first_attention:]
    window = work.iloc[keep].reset_index(drop=True)
    cat_w = np.asarray(cat)[keep]
    assert kernel_names.components(window, cat_w)[:2].tolist() == ["attention", "linear"]
    # Its recorded shapes say the GEMM after attention is o_proj: [15360, 4096] x [4096, 4096].
    dims, _ = trace.shapes(int(window["op"].iat[1]))
    assert [list(d) for d in dims[:2]] == [[15360, 4096], [4096, 4096]]
    out = mc.price(load_model("qwen3-8b"), 1, s.steps, window, cat_w, s.source)
    assert out.flops[1] == pytest.approx(2 * 15360 * 4096 * 4096)
    assert "o_proj" in str(out.note[1]) and "matched from the grid" in str(out.note[1])


# --- roofline -----------------------------------------------------------------------------

_BF16 = "c10::BFloat16"
_A100_GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"


def _one_mm(tmp_path, m, n, k, kernel_durs_us, spec_change=None):
    """One bf16 aten::mm [m, k] x [k, n] on an A100 that launched kernels of these durations;
    the attributed table in kernel start order."""
    doc = Doc(device="NVIDIA A100-SXM4-80GB")
    ext = doc.op("aten::mm", 0.0, 50.0, dims=[[m, k], [k, n]], types=[_BF16, _BF16])
    t = 10.0
    for dur in kernel_durs_us:
        doc.kernel(_A100_GEMM, t - 9, t, dur, ext=ext)
        t += dur + 5
    trace = read_trace(doc.write(tmp_path / "mm.json"))
    s = seg.segment(trace)
    match = lookup(trace.device_props())
    if spec_change:
        match = SpecMatch(dataclasses.replace(match.spec, **spec_change(match.spec)), "test spec", None)
    table = attribute(trace, s, match).table
    order = np.argsort(s.work["start_ns"].to_numpy(), kind="stable")
    return table.iloc[order].reset_index(drop=True)


def test_an_op_whose_kernels_all_took_zero_ns_shares_its_cost_equally(tmp_path):
    """catches: an op's cost shared by duration even when its kernels' durations sum to 0 ns
    (0/0: the FLOPs and bytes become NaN, "cost unknown") instead of in equal shares."""
    t = _one_mm(tmp_path, 64, 32, 16, [0.0, 0.0])
    assert len(t) == 2
    # 2*M*N*K = 65,536 FLOPs; bf16 bytes 2 x (64*16 + 16*32 + 64*32) = 7,168: half to each kernel.
    assert t["flops"].tolist() == [32768.0, 32768.0]
    assert t["bytes"].tolist() == [3584.0, 3584.0]


def test_work_exactly_at_the_ridge_is_compute_bound(tmp_path):
    """catches: the bound taking compute only strictly above the ridge; the module's rule is
    compute-bound at or above it (FLOPs / peak FLOP/s >= bytes / bandwidth)."""
    # A spec whose bf16 matrix peak equals its bandwidth in number: the ridge is 1 FLOP/byte.
    t = _one_mm(
        tmp_path, 3, 3, 3, [1.0], spec_change=lambda s: {"matrix_flops": {**s.matrix_flops, "bf16": s.peak_bandwidth}}
    )
    row = t.iloc[0]
    # 2*3*3*3 = 54 FLOPs and 2 x (9 + 9 + 9) = 54 bytes: intensity 1, on the ridge.
    assert (row["flops"], row["bytes"], row["dtype"]) == (54.0, 54.0, "bf16")
    assert row["ridge"] == pytest.approx(1.0)
    assert row["bound"] == "compute"


def test_a_unit_exactly_at_the_latency_roof_keeps_its_bound():
    """catches: a unit that reaches LATENCY_ROOF (0.3) of its roof called latency-limited; only
    units below it are (and a NaN fraction, or an unknown bound, is unknown)."""
    out = limiter(
        np.array(["memory", "compute", "memory", "compute", "unknown"], dtype=object),
        np.array([0.3, 0.3, 0.2999, np.nan, 0.9]),
    )
    assert out.tolist() == ["memory", "compute", "latency", "unknown", "unknown"]
