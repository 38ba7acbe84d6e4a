"""Kernel taxonomy against real kernel names from ../shared/traces and published library names.

The traces are read here with gzip + msgspec, not with tracekit's reader, so that these
tests check the taxonomy alone.
"""

from __future__ import annotations

import gzip
import time
from functools import lru_cache

import msgspec
import numpy as np
import pandas as pd
import pytest
from conftest import all_real_traces, real_trace_path

from tracekit.analysis.pricing import taxonomy as tx
from tracekit.analysis.pricing.taxonomy import (
    categorize,
    categorize_many,
    unmatched,
)

_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}


@lru_cache(maxsize=None)
def _gpu_rows(key: str) -> pd.DataFrame:
    """name, op (launching cpu op by External id, or None), kind, dur_us of every GPU activity."""
    with gzip.open(real_trace_path(key), "rb") as f:
        doc = msgspec.json.decode(f.read())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    op_by_ext: dict[int, str] = {}
    for e in events:
        if str(e.get("cat", "")).lower() in ("cpu_op", "operator"):
            ext = e.get("args", {}).get("External id")
            if ext is not None:
                op_by_ext.setdefault(ext, e["name"])
    rows = []
    for e in events:
        kind = _KINDS.get(str(e.get("cat", "")).lower())
        if kind is not None:
            ext = e.get("args", {}).get("External id")
            rows.append((e["name"], op_by_ext.get(ext), kind, float(e.get("dur", 0))))
    return pd.DataFrame(rows, columns=["name", "op", "kind", "dur"])


def _categories(key: str) -> np.ndarray:
    rows = _gpu_rows(key)
    return categorize_many(rows["name"].tolist(), rows["op"].tolist(), rows["kind"].tolist())


@pytest.mark.parametrize("key", all_real_traces())
def test_every_real_activity_gets_a_known_category(key):
    rows = _gpu_rows(key)
    cats = _categories(key)
    assert len(cats) == len(rows) > 0
    assert set(cats) <= set(tx.CATEGORIES)
    # Copy-engine activities keep their kind; kernels are never called memcpy/memset.
    assert (cats[rows["kind"].to_numpy() == "memcpy"] == tx.MEMCPY).all()
    assert (cats[rows["kind"].to_numpy() == "kernel"] != tx.MEMCPY).all()


# Share of kernel time left "other" that we accept, per trace. The LLM inference traces
# must be almost fully explained; training traces carry DLRM/TorchRec sparse helpers
# (fbgemm bucketize/permute, cub radix sort) that honestly are "other".
OTHER_BOUND = {
    "h100_hf": 0.15,
    "mi300x_extend": 0.15,
    "mi300x_decode": 0.15,
    "rtx4080_nanovllm": 0.15,
    "b300_moe": 0.15,
    "a100_particle": 0.15,
    "a100_dlrm": 0.30,
    "a100_torchrec": 0.30,
}


@pytest.mark.parametrize("key", all_real_traces())
def test_share_of_kernel_time_left_other(key):
    rows = _gpu_rows(key)
    cats = _categories(key)
    dur = rows["dur"].to_numpy()
    share = dur[cats == tx.OTHER].sum() / dur.sum()
    names = unmatched(rows["name"], rows["op"])
    print(f"\n{key}: {share:.2%} of GPU time 'other' ({len(names)} unmatched names)")
    for name in names[:10]:
        print(f"    other: {name[:120]}")
    assert share < OTHER_BOUND.get(key, 0.05)


# Real names (copied from the traces, shortened nowhere) and the category each must get.
REAL_NAMES = {
    "b300_moe": [
        ("nvjet_sm103_tst_256x8_64x6_4x1_v_bz_NNT", "aten::bmm", tx.GEMM),
    ],
    "mi300x_extend": [
        ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1", None, tx.GEMM),
        ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernel", None, tx.ATTENTION),
        (
            "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
            "aiter::rmsnorm",
            tx.NORMALIZATION,
        ),
        (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i",
            "sgl_kernel::silu_and_mul",
            tx.ACTIVATION,
        ),
        ("void rotary_embedding_kernel<c10::BFloat16, true>", "sgl_kernel::rotary_embedding", tx.ROPE),
        ("void (anonymous namespace)::store_kvcache<2048l, 4, false, long>", "sglang::store_cache", tx.KV_CACHE),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>",
            "aten::argmax",
            tx.SAMPLING,
        ),
    ],
    "mi300x_decode": [
        (
            "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
            "(vllm::Fp8KVCacheDataType)0",
            None,
            tx.ATTENTION,
        ),
        ("create_flashinfer_kv_indices_triton", None, tx.KV_CACHE),
    ],
    "rtx4080_nanovllm": [
        (
            "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
            "cutlass::bfloat16_t",
            None,
            tx.ATTENTION,
        ),
        (
            "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>",
            "aten::mm",
            tx.GEMM,
        ),
        ("store_kvcache_kernel", None, tx.KV_CACHE),
        ("triton_poi_fused_mul_silu_0", "triton_poi_fused_mul_silu_0", tx.ACTIVATION),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", None, tx.NORMALIZATION),
        ("triton_poi_fused__to_copy_cat_0", None, tx.ELEMENTWISE),
    ],
    "h100_hf": [
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
            "execute_segment_k_off_kernel__5x_cublas",
            "aten::mm",
            tx.GEMM,
        ),
        (
            "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4",
            "aten::_flash_attention_forward",
            tx.ATTENTION,
        ),
        (
            "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int",
            "aten::index_select",
            tx.EMBEDDING,
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel",
            "aten::silu",
            tx.ACTIVATION,
        ),
    ],
    "a100_nccl": [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "record_param_comms",
            tx.COMMUNICATION,
        ),
        (
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>",
            "aten::cudnn_batch_norm",
            tx.NORMALIZATION,
        ),
        (
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16",
            "aten::cudnn_convolution",
            tx.CONV,
        ),
        ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", "aten::mm", tx.GEMM),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>",
            "aten::_log_softmax",
            tx.REDUCTION,
        ),
    ],
    "a100_dlrm": [
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>", None, tx.GEMM),
        ("ampere_sgemm_128x128_tn", None, tx.GEMM),
        ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>", None, tx.EMBEDDING),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>", None, tx.ELEMENTWISE),
    ],
    "v100_ddp": [
        ("volta_sgemm_128x32_nt", None, tx.GEMM),
    ],
    "mi250_toy": [
        ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1", "aten::mm", tx.GEMM),
    ],
    "a100_particle": [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl",
            "aten::gelu",
            tx.ACTIVATION,
        ),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
            "aten::native_layer_norm",
            tx.NORMALIZATION,
        ),
    ],
    "a100_triton": [
        ("triton_poi_fused_add_cos_sin_0", None, tx.ELEMENTWISE),
    ],
}


@pytest.mark.parametrize("key", sorted(REAL_NAMES))
def test_real_names_land_in_their_category(key):
    present = _gpu_rows(key)["name"].unique()
    for prefix, op, expected in REAL_NAMES[key]:
        matches = [n for n in present if n.startswith(prefix)]
        assert matches, f"{prefix!r} is not a kernel name in {key}"
        for name in matches:
            assert categorize(name, op) == expected, (name, op)


# Names as published by libraries whose kernels none of the stored traces contains.
@pytest.mark.parametrize(
    ("name", "op", "expected"),
    [
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", None, tx.COMMUNICATION),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", None, tx.COMMUNICATION),
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16>", None, tx.KV_CACHE),
        ("void vllm::moe::moe_align_block_size_kernel<int>", None, tx.MOE),
        ("fused_moe_kernel", None, tx.MOE),
        ("void vllm::moe::topkGatingSoftmax<8, 64, 4, 16, int>", None, tx.MOE),
        ("void vllm::moe::topk_softmax_kernel", None, tx.MOE),
        ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>", None, tx.ATTENTION),
        ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", None, tx.ATTENTION),
        ("void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>", None, tx.NORMALIZATION),
        ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<...>", None, tx.SAMPLING),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>)", None, tx.ATTENTION),
        ("_fwd_kernel_stage1", None, tx.ATTENTION),
        ("void vllm::paged_attention_v2_kernel<__nv_bfloat16>", None, tx.ATTENTION),
        ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>", None, tx.ACTIVATION),
        ("void vllm::rms_norm_kernel<c10::BFloat16>", None, tx.NORMALIZATION),
        ("triton_tem_fused_mm_0", None, tx.GEMM),
        ("triton_red_fused__softmax_0", None, tx.REDUCTION),
        ("triton_per_fused_native_layer_norm_0", None, tx.NORMALIZATION),
        ("_matmul_kernel_persistent", None, tx.GEMM),
        ("volta_h884gemm_64x64_ldg8_nn", None, tx.GEMM),
        ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false>", None, tx.GEMM),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>", None, tx.REDUCTION),
        ("void at::native::(anonymous namespace)::multinomial_with_replacement_kernel_impl", None, tx.SAMPLING),
    ],
)
def test_published_names(name, op, expected):
    assert categorize(name, op) == expected


def test_kind_decides_copy_engine_activities():
    assert categorize("Memcpy HtoD (Pinned -> Device)", kind="memcpy") == tx.MEMCPY
    assert categorize("Memset (Device)", "aten::mm", kind="memset") == tx.MEMSET
    # Without a kind the Kineto names still say what they are.
    assert categorize("Memcpy DtoD (Device -> Device)") == tx.MEMCPY


def test_op_name_decides_only_for_opaque_kernel_names():
    opaque = "triton__0d1d2d3d"  # pre-2023 Triton naming: says nothing
    assert categorize(opaque) == tx.OTHER
    assert categorize(opaque, "aten::mm") == tx.GEMM
    assert categorize(opaque, "aten::scaled_dot_product_attention") == tx.ATTENTION
    assert categorize(opaque, "aten::rms_norm") == tx.NORMALIZATION
    assert categorize(opaque, "aten::softmax") == tx.REDUCTION
    assert categorize(opaque, "aten::embedding") == tx.EMBEDDING
    assert categorize(opaque, "aten::norm") == tx.REDUCTION  # a vector norm, not a layer norm
    # A kernel that says what it is keeps that, whichever op launched it.
    copy = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda>"
    assert categorize(copy, "aten::addmm") == tx.ELEMENTWISE
    sort = "void at::native::bitonicSortKVInPlace<2, -1, 16, 16, c10::BFloat16, long>"
    assert categorize(sort) == tx.OTHER
    assert categorize(sort, "aten::topk") == tx.SAMPLING


def test_word_boundaries_in_rules():
    assert categorize("small_reduce_kernel") != tx.COMMUNICATION
    assert categorize("void fbgemm_gpu::permute_2D_lengths_kernel<int>") != tx.GEMM
    assert categorize("convert_fp8_kernel") != tx.CONV
    assert categorize("void at::native::_scatter_gather_elementwise_kernel<ReduceAdd>") == tx.ELEMENTWISE


def test_decode_and_prefill_attention_evidence():
    from tracekit.analysis.steps.evidence import is_decode_attention, is_prefill_attention

    decode = [
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>",
        "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>>",
        "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>",
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>",
        "_fwd_grouped_kernel_stage1",
        "kernel_unified_attention_3d",
        "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64MultiCtasKvCgaVarSeqQ8Kv128StaticSwapsAbForGen",
    ]
    prefill = [
        "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<...>",
        "_fwd_kernel_context_attention",
        "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
    ]
    # Engines run paged "prefill" kernels for decode too: weak evidence only.
    weak = [
        "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernel",
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>",
    ]
    neutral = [
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64>>",
        "kernel_unified_attention_2d",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
        "prefill_metadata_kernel",
    ]  # says prefill, but is no attention kernel
    for name in decode:
        assert is_decode_attention(name) and not is_prefill_attention(name, weak=True), name
    for name in prefill:
        assert is_prefill_attention(name) and not is_decode_attention(name), name
    for name in weak:
        assert is_prefill_attention(name, weak=True) and not is_prefill_attention(name), name
        assert not is_decode_attention(name), name
    for name in neutral:
        assert not is_decode_attention(name) and not is_prefill_attention(name, weak=True), name


def test_categorize_many_matches_categorize_and_caches(monkeypatch):
    names = ["ampere_sgemm_128x64_nn", "triton__0d1d2d", "Memset (Device)"] * 1000
    # pandas hands missing ops over as NaN: a fresh NaN object per row must still hit the cache.
    ops = [op for _ in range(1000) for op in ("aten::mm", float("nan"), None)]
    kinds = ["kernel", "kernel", "memset"] * 1000
    calls = []
    real = tx.categorize
    monkeypatch.setattr(tx, "categorize", lambda *a: calls.append(a) or real(*a))
    out = categorize_many(names, ops, kinds)
    assert list(out[:3]) == [tx.GEMM, tx.OTHER, tx.MEMSET]
    assert len(calls) == 3  # one per distinct (name, op, kind)
    with pytest.raises(ValueError):
        categorize_many(names, ops[:-1], kinds)


def test_categorize_many_is_fast_on_a_big_trace():
    rows = _gpu_rows("v100_ddp")
    names = np.tile(rows["name"].to_numpy(), 5)  # ~120k activities
    ops = np.tile(rows["op"].to_numpy(), 5)
    kinds = np.tile(rows["kind"].to_numpy(), 5)
    start = time.perf_counter()
    cats = categorize_many(names, ops, kinds)
    elapsed = time.perf_counter() - start
    print(f"\ncategorize_many: {len(cats)} activities in {elapsed:.3f} s")
    assert elapsed < 2.0


def test_unmatched_lists_distinct_other_names_sorted():
    names = ["zzz_custom", "ampere_sgemm_64x64_nn", "aaa_custom", "zzz_custom"]
    assert unmatched(names) == ["aaa_custom", "zzz_custom"]
    assert unmatched(["zzz_custom"], ["aten::mm"]) == []


def test_rules_are_written_in_lower_case():
    # Matching lower-cases the text once and compiles the patterns case-sensitively (speed):
    # an upper-case letter in a pattern would never match.
    for rules in (tx.KERNEL_RULES, tx.GENERIC_RULES, tx.OP_RULES, tx.MODULE_RULES):
        for category, pattern, _ in rules:
            letters = [c for i, c in enumerate(pattern) if c.isalpha() and not (i and pattern[i - 1] == "\\")]
            assert all(c.islower() for c in letters), (category, pattern)
