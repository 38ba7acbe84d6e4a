"""The weight precision GEMM kernel names state, for a model whose config states none
(tracekit.analysis.pricing.stated_weights)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import read_real

from tracekit.analysis import analyze
from tracekit.analysis.pricing import stated_weights as sw

NVFP4 = (
    "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10collective13"
    "CollectiveMmaINS1_42MainloopSm120TmaWarpSpecializedBlockScaledILi2ELi3EEENS5_IJNS_12float_e2m1_tENS_13"
    "float_ue4m3_tEEEE"
)


@pytest.mark.parametrize(
    "name,want",
    [
        (NVFP4, "nvfp4"),  # FP4 values, FP8 (ue4m3) block scales
        (NVFP4.replace("ue4m3", "ue8m0"), "mxfp4"),  # e8m0 scales: MXFP4
        ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cluster1x2x1_execute_kernel", "fp8"),
        ("void marlin::Marlin<256, 1, 8, 8, 4, 8> w4a16", "int4"),  # 4-bit integers widened to 16 bits
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", None),
        ("nvjet_tst_144x128_64x6_2x1_v_bz_TNN", None),  # states no operand type
        # triton_kernels' matmul_ogs names its operands activation first: 16-bit activations x
        # MXFP4 weights (gpt-oss's MoE), x FP4 weights without the MX scales, x FP8 weights (widened
        # to 16 bits: no stored precision tracekit names).
        ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu", "mxfp4"),
        ("_matmul_ogs_NNT_bf16xbf16xfp4_128x256x128x1", "nvfp4-w4a16"),
        ("_matmul_ogs_NNT_bf16xbf16xfp8_128x256x128x1", None),
        # vLLM's AWQ and GPTQ (exllama) kernels: 4-bit integer weights, no w4a16 in the name.
        (
            "void vllm::awq::gemm_forward_4bit_cuda_m16nXk32<128>(int, int, __half*, int*, __half*, int*, int, int, "
            "int, __half*)",
            "int4",
        ),
        (
            "void gemm_half_q_half_gptq_4bit_kernel<true, 4>(__half const*, unsigned int const*, unsigned int const*, "
            "__half const*, __half*, int, int, int, int, int const*, bool)",
            "int4",
        ),
    ],
)
def test_each_kernel_name_states_its_weight_format(name, want):
    """Bug: a scale type (ue4m3, ue8m0) read as an operand, MXFP4 priced as NVFP4, or a 16-bit
    GEMM taken for a quantised one."""
    assert sw._format(name) == want


def _work(names_durations):
    return pd.DataFrame(
        {
            "name": [n for n, _ in names_durations],
            "kind": "kernel",
            "dur_ns": [d for _, d in names_durations],
            "step": 0,
        }
    )


def test_a_few_narrow_gemms_do_not_make_a_quantised_model():
    """Bug: one FP8 GEMM (an FP8 LM head beside 16-bit layers) re-prices every linear layer."""
    fp8 = "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cluster1x2x1_execute_kernel"
    bf16 = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn"
    assert sw.stated(_work([(fp8, 40), (bf16, 60)])) is None
    said = sw.stated(_work([(fp8, 60), (bf16, 40)]))
    assert said.precision == "fp8" and said.share == 0.6


def test_work_outside_steps_or_without_gemm_time_states_nothing():
    """Bug: FP8 GEMMs of a warm-up or graph capture (outside every step) taken as the served
    weights, or a run whose only kernels are not linear layers (a fused elementwise kernel, a
    copy) said to state a format."""
    fp8 = "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cluster1x2x1_execute_kernel"
    outside = _work([(fp8, 100)]).assign(step=-1)
    assert sw.stated(outside) is None
    assert sw.stated(outside.assign(step=0)).precision == "fp8"  # the same kernel inside a step speaks
    assert sw.stated(_work([("triton_poi_fused_add_mul_0", 100)])) is None
    assert sw.stated(_work([(fp8, 100)]).assign(kind="memcpy")) is None


def test_gb10_nvfp4_checkpoint_priced_by_its_kernels_when_the_config_is_silent():
    """The shared GB10 trace ran an NVFP4 copy of Qwen3.5-27B; the registry's config.json (the
    published bf16 checkpoint) has no quantization_config. Bug: its GEMMs priced as bf16 weights
    (2.9x the bytes the kernel time allows at the roof), so their cost stayed unknown (15% of the
    step time known); or the kernels overruling --weights the user gave."""
    trace = read_real("gb10_vllm")
    a = analyze(trace, model="qwen3.5-27b")
    m = a.to_dict()["model"]
    assert m["precision"]["mlp"] == "nvfp4" and m["precision"]["lm_head"] == "bf16"
    assert "kernels whose names state FP4 (e2m1) operands with FP8 block scales" in m["precision_source"]
    assert not m["dtype_conflicts"]
    w = a.work
    ins = (w["step"] >= 0).to_numpy()
    known = w["bound"].astype(str).isin(["compute", "memory"]).to_numpy() & ins
    assert w["dur_ns"][known].sum() >= 0.9 * w["dur_ns"][ins].sum()
    # The same figures as stating --weights nvfp4 outright.
    stated = analyze(trace, model="qwen3.5-27b", weights="nvfp4").work
    assert (w["bytes"].fillna(-1).to_numpy() == stated["bytes"].fillna(-1).to_numpy()).all()
    # A user's --weights wins over the kernels' names.
    bf16 = analyze(trace, model="qwen3.5-27b", weights="bf16").to_dict()["model"]
    assert bf16["precision"]["mlp"] == "bf16" and bf16["dtype_conflicts"]
