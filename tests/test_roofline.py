"""Roofline attribution on real traces and on hand-built cases."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import read_real, with_device_name
from tracekit.analysis import analyze
from tracekit.analysis.roofline import attribute
from tracekit.analysis.segment import segment
from tracekit.specs import lookup, spec_by_name
from tracekit.specs.lookup import SpecMatch


def _attributed(key, **kw):
    trace = read_real(key)
    if kw.pop("unknown_device", False):
        trace = with_device_name(trace)
    seg = segment(trace)
    match = kw.pop("match", None) or lookup(trace.device_props())
    table = attribute(trace, seg, match).table
    return trace, seg, table


def test_h100_prefill_is_dominated_by_compute_bound_gemms():
    _, seg, t = _attributed("h100_hf")
    pre = (seg.work["phase"] == "prefill").to_numpy()
    gemm = pre & (t["category"] == "gemm").to_numpy()
    dur = seg.work["dur_ns"].to_numpy()
    compute = gemm & (t["bound"] == "compute").to_numpy()
    # The GEMMs with known cost are compute-bound...
    known = gemm & (t["bound"] != "unknown").to_numpy()
    assert dur[compute].sum() / dur[known].sum() > 0.95
    # ...and matrix work (GEMM + attention) carries almost all of the prefill FLOPs.
    flops = t["flops"].to_numpy()
    matrix = pre & (t["unit"] == "matrix").to_numpy()
    assert np.nansum(flops[matrix]) / np.nansum(flops[pre]) > 0.95
    # Their achieved rate is a believable fraction of an H100's bf16 peak.
    frac = t.loc[compute, "roof_fraction"].to_numpy()
    w = dur[compute]
    assert 0.2 < (frac * w).sum() / w.sum() < 1.0


def test_h100_gemm_cost_is_the_linear_op_cost():
    # A kernel launched inside aten::linear is priced by the linear (outermost modelled
    # op); the linear's FLOPs are 2*M*N*K from its recorded input shapes.
    trace, seg, t = _attributed("h100_hf")
    ops = trace.cpu_ops
    priced = t["pricing_op"].to_numpy()
    names = np.where(priced >= 0, ops["name"].astype(str).to_numpy()[np.maximum(priced, 0)], "")
    # Kernels launched under aten::linear -> aten::matmul/addmm are priced by the linear.
    under_linear = (t["op_name"].isin(["aten::mm", "aten::addmm"])).to_numpy() & (t["category"] == "gemm").to_numpy()
    assert under_linear.any()
    assert set(names[under_linear]) == {"aten::linear"}
    p = int(priced[np.flatnonzero(under_linear)[0]])
    dims, _ = trace.shapes(p)
    (b, s, k), (n, k2) = dims[0], dims[1]
    assert k == k2
    same = t["pricing_op"].to_numpy() == p
    assert np.nansum(t["flops"].to_numpy()[same]) == pytest.approx(2 * b * s * k * n)


def test_sglang_decode_is_not_compute_bound():
    a = analyze(read_real("mi300x_decode"))
    dec = a.phases["decode"]
    assert dec["by_bound"]["compute"] < 0.05 * dec["kernel_ms"]
    # The GPU idles most of the step, blocked by a host copy (tests/test_idle.py), not by launches.
    assert dec["idle_share"] > 0.5
    assert not any(f.id == "launch-bound" for f in a.findings)


def test_b300_moe_few_token_gemms_are_memory_bound():
    _, seg, t = _attributed("b300_moe")
    gemm = t[(t["category"] == "gemm") & (t["bound"] != "unknown")]
    assert len(gemm)
    assert (gemm["bound"] == "memory").all()
    # 16 tokens: arithmetic intensity far below a B300's bf16 ridge point.
    assert (gemm["intensity"] < gemm["ridge"] / 10).all()


def test_unknown_gpu_has_no_roofline_and_says_why():
    _, seg, t = _attributed("rtx4080_nanovllm", unknown_device=True)
    # Copy-engine transfers are memory work by nature; every kernel needs the roofline.
    costed = t["flops"].notna() & (seg.work["kind"] == "kernel")
    assert costed.any()
    assert (t.loc[costed, "bound"] == "unknown").all()
    assert t.loc[costed, "bound_reason"].str.contains("not in tracekit's GPU database").all()
    assert t["peak_flops"].isna().all()


def test_gpu_override_prices_the_same_kernels():
    spec = spec_by_name("l4")
    _, _, t = _attributed("rtx4080_nanovllm", match=SpecMatch(spec, "--gpu override", None))
    costed = t["flops"].notna() & t["dtype"].notna()
    assert (t.loc[costed, "bound"] != "unknown").any()
    assert (t.loc[costed & (t["unit"] == "matrix"), "peak_flops"] == spec.peak_flops("bf16", "matrix")).all()


def test_cost_of_an_op_is_shared_among_its_kernels():
    trace, seg, t = _attributed("h100_hf")
    groups = t[t["pricing_op"] >= 0].groupby("pricing_op")
    multi = [p for p, g in groups if len(g) > 1 and g["flops"].notna().all()]
    assert multi, "expected ops that launch several kernels"
    from tracekit.analysis import costs

    ops = trace.cpu_ops
    for p in multi[:20]:
        cost = costs.op_cost_json(ops["name"].iat[p], ops["input_dims"].iat[p], ops["input_types"].iat[p], ops["concrete_inputs"].iat[p])
        g = t[t["pricing_op"] == p]
        assert g["flops"].sum() == pytest.approx(cost.flops)
        assert g["bytes"].sum() == pytest.approx(cost.bytes)


def test_per_kernel_figures_are_consistent():
    _, seg, t = _attributed("mi300x_extend")
    k = t["flops"].notna() & t["peak_flops"].notna()
    dur_s = seg.work.loc[k, "dur_ns"] / 1e9
    assert np.allclose(t.loc[k, "intensity"], t.loc[k, "flops"] / t.loc[k, "bytes"])
    assert np.allclose(t.loc[k, "achieved_flops"], t.loc[k, "flops"] / dur_s)
    roof = np.maximum(t.loc[k, "flops"] / t.loc[k, "peak_flops"], t.loc[k, "bytes"] / t.loc[k, "peak_bw"])
    assert np.allclose(t.loc[k, "roof_fraction"], roof / dur_s)
    compute = (t.loc[k, "intensity"] >= t.loc[k, "ridge"]).to_numpy()
    assert ((t.loc[k, "bound"] == "compute").to_numpy() == compute).all()
    # The achievable ceiling is lower than the datasheet peak, so the fraction of it is higher.
    assert (t.loc[k, "roof_fraction_achievable"] >= t.loc[k, "roof_fraction"] - 1e-12).all()


def test_graph_replayed_kernels_have_unknown_cost_with_reason():
    _, seg, t = _attributed("mi300x_decode")
    replayed = seg.work["graph"].to_numpy()
    assert t.loc[replayed, "flops"].isna().all()
    assert t.loc[replayed, "cost_reason"].str.contains("graph").all()


def test_training_trace_without_shapes_says_so():
    a = analyze(read_real("v100_ddp"))
    assert a.run_kind == "training"
    reasons = a.provenance["unknown_bound_ms_by_reason"]
    assert any("record_shapes" in r for r in reasons)


def test_graph_capture_trace_recovers_replayed_kernel_shapes():
    trace, capture = read_real("mi300x_decode"), read_real("mi300x_capture")
    seg = segment(trace)
    attr = attribute(trace, seg, lookup(trace.device_props()), capture=capture)
    t = attr.table
    replayed = seg.work["graph"].to_numpy()
    assert "544 of 544" in attr.capture_note
    # The replayed GEMMs now have shapes from the capture: batch 32 decode GEMMs,
    # far below MI300X's ridge point, so memory-bound.
    gemm = replayed & (t["category"] == "gemm").to_numpy()
    assert t.loc[gemm, "flops"].notna().all()
    assert (t.loc[gemm, "bound"] == "memory").all()
    assert (t.loc[gemm, "intensity"] < 64).all()
    # With bytes known for most of the step, the decode MBU can be computed.
    a = analyze(trace, capture=capture)
    assert a.phases["decode"]["mbu"] is not None and 0 < a.phases["decode"]["mbu"] < 1
    assert "graph_capture" in a.provenance


def test_capture_trace_without_kernel_names_says_why():
    # A CUDA capture trace names no kernels in its launch calls: nothing can be matched.
    trace = read_real("mi300x_decode")
    other = read_real("h100_hf")
    attr = attribute(trace, segment(trace), lookup(trace.device_props()), capture=other)
    assert "names no kernels" in attr.capture_note


def test_eager_norm_kernels_take_their_module_category():
    # Eager Qwen2RMSNorm runs generic pow/mean/rsqrt/mul kernels; the nn.Module span
    # around their launches says they are normalization.
    trace, seg, t = _attributed("h100_hf")
    py = trace.python
    norms = py[py["name"].astype(str).str.contains("RMSNorm")]
    issue = seg.work["issue_ns"].to_numpy()
    inside = np.zeros(len(issue), dtype=bool)
    for s, e in zip(norms["start_ns"], norms["end_ns"]):
        inside |= (issue >= s) & (issue <= e)
    assert inside.sum() > 100
    assert (t.loc[inside, "category"] == "normalization").all()
    # A GEMM is never re-labelled by the module it runs in.
    mm = ~inside & (t["op_name"] == "aten::mm").to_numpy() & (seg.work["kind"] == "kernel").to_numpy()
    assert mm.any() and (t.loc[mm, "category"] == "gemm").all()


def test_cpu_trace_peaks_come_from_the_sidecar_or_options(tmp_path):
    import shutil

    from conftest import SAMPLE_TRACES
    from tracekit import read_trace

    sample = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    with_sidecar = analyze(read_trace(sample))
    assert with_sidecar.device["how"].startswith("measured by tracekit collect")
    assert with_sidecar.metrics["prefill_mfu"] is not None
    # The same trace without its sidecar has no peaks: the roofline is absent, with the reason.
    alone = tmp_path / "alone.pt.trace.json.gz"
    shutil.copy(sample, alone)
    bare = analyze(read_trace(alone))
    assert bare.device["spec"] is None and "--cpu-flops" in bare.device["reason"]
    assert bare.metrics["prefill_mfu"] is None
    assert (bare.work["bound"] == "unknown").all()
    given = analyze(read_trace(alone), cpu_matmul_flops=1e11, cpu_bandwidth=2e10)
    assert given.device["how"] == "peaks given as options"
    flops = given.phases["prefill"]["flops"]
    assert given.metrics["prefill_mfu"] == pytest.approx(flops / (given.phases["prefill"]["time_ms"] / 1e3) / 1e11, rel=0.05)


def test_per_step_attribution_adds_up_to_the_phase():
    from conftest import SAMPLE_TRACES
    from tracekit import read_trace

    a = analyze(read_trace(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"))
    steps = a.to_dict()["steps"]
    for phase in ("prefill", "decode"):
        mine = [s for s in steps if s["phase"] == phase]
        for bound in ("compute", "memory", "unknown"):
            assert sum(s[f"{bound}_ms"] for s in mine) == pytest.approx(a.phases[phase]["by_bound"][bound])
        assert sum(s["bytes"] for s in mine) == pytest.approx(a.phases[phase]["bytes"])
    # Decode steps are memory-bound work on this CPU: weights and KV cache read per token.
    assert all(s["memory_ms"] > s["compute_ms"] for s in steps if s["phase"] == "decode")
    assert steps[0]["cpu_start_ms"] == 0
