"""Roofline attribution on real traces and on hand-built cases."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import read_real, with_device_name

from tracekit.analysis import analyze
from tracekit.analysis.pricing.attribution import attribute
from tracekit.analysis.steps.segment import segment
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
    # The step's host copy waited on the previous batch, which the profile did not record
    # (tests/test_held.py): that time is the step's unrecorded work, not its idle, and the GPU
    # idles little of what is left; nor is that idle blamed on launches.
    assert dec["unrecorded_ms"] > 400 and dec["idle_share"] < 0.1
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
    """An aten::linear that launched several kernels (cuBLAS's 4-byte workspace memset and the
    GEMM): its cost, worked out here from its recorded shapes ([b, s, k] x [n, k] (+ [n] bias),
    bf16: FLOPs 2*b*s*k*n, bytes 2 x (b*s*k + n*k + n + b*s*n)), goes to the GEMM, which does its
    work; the memset gets no FLOPs and the 4 bytes it sets, beside the op's (issue 47: shared by
    duration, the memsets took 86 GFLOP). Fails if an op's cost is counted once per kernel, shared
    by time with its memset, or priced from the wrong operands."""
    trace, seg, t = _attributed("h100_hf")
    names = trace.cpu_ops["name"].astype(str).to_numpy()
    groups = t[t["pricing_op"] >= 0].groupby("pricing_op")
    multi = [p for p, g in groups if len(g) > 1 and g["flops"].notna().all() and names[p] == "aten::linear"]
    assert len(multi) > 100, "expected linears that launch several kernels"
    for p in multi[:40]:
        dims, types = trace.shapes(p)
        (b, s, k), (n, k2) = dims[0], dims[1]
        bias = len(dims) > 2 and dims[2] == [n]
        assert k == k2 and set(types[:2]) == {"c10::BFloat16"}
        flops = 2.0 * b * s * k * n
        nbytes = 2.0 * (b * s * k + n * k + (n if bias else 0) + b * s * n)
        g = t[t["pricing_op"] == p]
        kind = seg.work["kind"].to_numpy()[g.index.to_numpy()]
        assert sorted(kind.tolist()) == ["kernel", "memset"]
        assert g["flops"].sum() == pytest.approx(flops, rel=1e-6)
        assert g["bytes"].sum() == pytest.approx(nbytes + 4, rel=1e-6)
        assert g["flops"].to_numpy()[kind == "kernel"] == pytest.approx([flops], rel=1e-6)
        assert g["bytes"].to_numpy()[kind == "kernel"] == pytest.approx([nbytes], rel=1e-6)
        assert (g["flops"].to_numpy()[kind == "memset"], g["bytes"].to_numpy()[kind == "memset"]) == ([0.0], [4.0])


def test_per_kernel_figures_are_consistent():
    """Per-kernel roofline columns on the MI300X prefill against the MI300X datasheet (bf16 matrix
    1307.4 TFLOP/s, vector 163.4 TFLOP/s, 5.3 TB/s), not against the table's own peak columns:
    intensity, achieved rate, bound (intensity vs the datasheet ridge) and roof fraction. Fails if
    a unit is priced at the wrong peak, the ridge moves, or a fraction uses the wrong duration."""
    _, seg, t = _attributed("mi300x_extend")
    peaks = {("bf16", "matrix"): 1307.4e12, ("bf16", "vector"): 163.4e12, ("fp32", "vector"): 163.4e12}
    bw = 5.3e12
    k = (t["flops"].notna() & t["peak_flops"].notna() & (t["bound"].isin(["compute", "memory"]))).to_numpy()
    pairs = list(zip(t.loc[k, "dtype"], t.loc[k, "unit"]))
    assert set(pairs) <= set(peaks), set(pairs) - set(peaks)
    assert ("bf16", "matrix") in set(pairs)
    peak = np.array([peaks[x] for x in pairs])
    flops, nbytes = t.loc[k, "flops"].to_numpy(), t.loc[k, "bytes"].to_numpy()
    dur_s = seg.work.loc[k, "dur_ns"].to_numpy() / 1e9
    assert np.allclose(t.loc[k, "peak_flops"], peak) and np.allclose(t.loc[k, "peak_bw"], bw)
    assert np.allclose(t.loc[k, "intensity"], flops / nbytes)
    assert np.allclose(t.loc[k, "achieved_flops"], flops / dur_s)
    assert np.allclose(t.loc[k, "roof_fraction"], np.maximum(flops / peak, nbytes / bw) / dur_s)
    compute = flops / nbytes >= peak / bw
    assert compute.any() and (~compute).any()
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
    assert given.metrics["prefill_mfu"] == pytest.approx(
        flops / (given.phases["prefill"]["time_ms"] / 1e3) / 1e11, rel=0.05
    )


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


# --- hand-built kernels: every figure worked out here by arithmetic ------------------------
#
# Each kernel is one aten::mm with recorded shapes launching one GEMM kernel of a stated
# duration. FLOPs = 2*M*N*K and bytes = element size x (M*K + K*N + M*N) (each operand read
# once, the output written once), so intensity, bound and roof fraction follow from the
# datasheet peaks written below, not from tracekit's cost functions or spec lookups.

A100_BF16 = 312e12  # A100 SXM4 datasheet: BF16 tensor core, dense
A100_TF32 = 156e12  # TF32 tensor core, dense
A100_FP32 = 19.5e12  # FP32 (no tensor cores)
A100_BW = 2039e9  # A100 80GB SXM: HBM2e 2,039 GB/s
H100_BF16, H100_FP8, H100_BW = 989.4e12, 1978.9e12, 3350e9  # H100 SXM datasheet, dense
B200_BF16, B200_FP4 = 2250e12, 9000e12  # B200 datasheet (HGX B200 / 8), dense


def _hand_gemms(tmp_path, device, gemms, name="hand.json"):
    """A trace of ``gemms``: (M, N, K, torch dtype, kernel name, duration us), one after another;
    returns the attributed table (rows in the order given)."""
    from kineto import Doc

    from tracekit import read_trace

    doc = Doc(device=device)
    t = 0.0
    for m, n, k, dtype, kname, dur in gemms:
        ext = doc.op("aten::mm", t, 10.0, dims=[[m, k], [k, n]], types=[dtype, dtype])
        doc.kernel(kname, t + 1, t + 20, dur, ext=ext)
        t += 20 + dur + 10
    trace = read_trace(doc.write(tmp_path / name))
    seg = segment(trace)
    order = np.argsort(seg.work["start_ns"].to_numpy(), kind="stable")
    table = attribute(trace, seg, lookup(trace.device_props())).table
    return table.iloc[order].reset_index(drop=True)


def _gemm_figures(m, n, k, size):
    flops = 2.0 * m * n * k
    nbytes = float(size) * (m * k + k * n + m * n)
    return flops, nbytes


def test_roofline_bound_and_fraction_of_hand_built_gemms(tmp_path):
    """Bound and roof fraction of bf16 GEMMs on an A100 against hand arithmetic. The ridge is
    312e12 / 2039e9 = 153.0 FLOP/byte; M=128 (intensity 120.5) is memory-bound, between half the
    ridge and the ridge, and M=192 (175.5) compute-bound, between the ridge and twice it: fails if
    the compute/memory threshold moves (halved or doubled), if the bound compares the wrong times,
    or if the roof fraction uses the wrong peak or duration."""
    bf = "c10::BFloat16"
    cases = [  # M, N, K, duration us, expected bound
        (4096, 4096, 4096, 1000.0, "compute"),
        (192, 4096, 4096, 50.0, "compute"),
        (128, 4096, 4096, 40.0, "memory"),
        (16, 4096, 4096, 50.0, "memory"),
    ]
    t = _hand_gemms(
        tmp_path,
        "NVIDIA A100-SXM4-80GB",
        [(m, n, k, bf, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", d) for m, n, k, d, _ in cases],
    )
    ridge = A100_BF16 / A100_BW
    assert ridge == pytest.approx(153.016, rel=1e-4)
    for i, (m, n, k, dur_us, bound) in enumerate(cases):
        flops, nbytes = _gemm_figures(m, n, k, 2)
        intensity = flops / nbytes
        # The cases sit where a moved threshold would flip them.
        assert (intensity >= ridge) == (bound == "compute")
        row = t.iloc[i]
        assert row["flops"] == pytest.approx(flops) and row["bytes"] == pytest.approx(nbytes)
        assert row["intensity"] == pytest.approx(intensity)
        assert row["ridge"] == pytest.approx(ridge)
        assert row["bound"] == bound, (m, intensity, ridge)
        roof_s = max(flops / A100_BF16, nbytes / A100_BW)
        assert row["roof_fraction"] == pytest.approx(roof_s / (dur_us * 1e-6), rel=1e-6), (m, row["roof_fraction"])
    # Worked figures for two of them: 2*4096^3 / 312e12 = 440.5 us of 1000 us; M=16: 2*(16*4096*2 + 4096^2)
    # bytes = 33,816,576 B / 2039 GB/s = 16.585 us of 50 us.
    assert t.iloc[0]["roof_fraction"] == pytest.approx(0.4405, abs=1e-4)
    assert t.iloc[3]["roof_fraction"] == pytest.approx(0.3317, abs=1e-4)
    assert list(t["limiter"]) == ["compute", "compute", "memory", "memory"]  # all above LATENCY_ROOF (0.3)


@pytest.mark.parametrize(
    "device, torch_dtype, size, kernel, priced_as, peak, bw",
    [
        # FP32 GEMMs on TF32 tensor cores say so in the kernel name: TF32 rate, not FP32.
        (
            "NVIDIA A100-SXM4-80GB",
            "float",
            4,
            "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel",
            "tf32",
            A100_TF32,
            A100_BW,
        ),
        ("NVIDIA A100-SXM4-80GB", "float", 4, "ampere_sgemm_128x64_nn", "fp32", A100_FP32, A100_BW),
        # An FP8 GEMM (e4m3 operands) under an op whose recorded inputs are bf16: the FP8 rate.
        (
            "NVIDIA H100 80GB HBM3",
            "c10::BFloat16",
            2,
            "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel",
            "fp8",
            H100_FP8,
            H100_BW,
        ),
        (
            "NVIDIA H100 80GB HBM3",
            "c10::BFloat16",
            2,
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
            "bf16",
            H100_BF16,
            H100_BW,
        ),
        # An NVFP4 GEMM (e2m1 operands) on a B200: the FP4 rate.
        (
            "NVIDIA B200",
            "c10::BFloat16",
            2,
            "void cutlass::device_kernel<cutlass3x_sm100_bstensorop_s128x128x256gemm_e2m1_e2m1_f32_bf16_bf16_128x128x256_1x1x1_0_tnt_align32_o_vs16_2sm>",
            "fp4",
            B200_FP4,
            8000e9,
        ),
    ],
)
def test_dtype_refinement_prices_each_precision_at_its_own_peak(
    tmp_path, device, torch_dtype, size, kernel, priced_as, peak, bw
):
    """A compute-bound GEMM (M=N=K=8192) whose kernel name states its precision is priced at that
    precision's datasheet peak: the roof fraction is 2*8192^3 / peak / duration. Fails if TF32 work
    is priced as FP32 (8x too high a fraction), if FP8 or FP4 kernels under a bf16 op are priced at
    the bf16 rate, or if a plain FP32 sgemm is promoted to TF32."""
    m = n = k = 8192
    dur_us = 20000.0
    t = _hand_gemms(tmp_path, device, [(m, n, k, torch_dtype, kernel, dur_us)])
    row = t.iloc[0]
    flops, nbytes = _gemm_figures(m, n, k, size)
    assert row["dtype"] == priced_as
    assert row["peak_flops"] == pytest.approx(peak)
    assert row["bound"] == "compute" and flops / nbytes > peak / bw
    assert row["roof_fraction"] == pytest.approx(flops / peak / (dur_us * 1e-6), rel=1e-6)
