"""Cost models of the serving engines' custom ops (issue 47, item 1 of what to build): each op's
FLOPs and bytes against hand arithmetic from its recorded shapes, under the conventions of
``op_costs`` (every tensor read once, every output written once, at its own element size;
attention 2 FLOPs per multiply-add over the query-key pairs). The shapes are those the shared
SGLang Qwen3-8B traces record (``mi300x_sglang-qwen3-8b_extend-step``, its decode capture), or the
ops' registered schemas where no shared trace has the op.

Before these models every op here was "no cost model": each test fails on that code.
"""

from __future__ import annotations

import json

import pytest

from tracekit.analysis.pricing.op_args import MATRIX, VECTOR, NoCost, OpContext, OpCost
from tracekit.analysis.pricing.op_costs import has_model, needs_context, price, price_in_context

BF16, F32, I32, I64, FP8 = "c10::BFloat16", "float", "int", "long int", "c10::Float8_e4m3fn"
T = 15360  # the extend step's tokens: 15 requests of 1,024


def _ctx(op, dims, types, concrete=None, **ctx):
    return price_in_context(
        op,
        json.dumps(dims),
        json.dumps(types),
        json.dumps(concrete) if concrete is not None else None,
        OpContext(**ctx),
    )


def _whole(cost) -> tuple:
    assert isinstance(cost, OpCost), cost
    return cost.flops, cost.bytes, cost.dtype, cost.unit


# --- norms ---------------------------------------------------------------------------------------


def test_aiter_add_rmsnorm_reads_input_and_residual_and_writes_both():
    """Bug: aiter::add_rmsnorm(out, input, residual_in, residual_out, weight, eps) had no cost model
    (and the model path counted a fused add + RMSNorm as two tensors). It reads input and residual_in
    and writes residual_out = input + residual_in and out = rmsnorm(residual_out) * weight: four
    [15360, 4096] bf16 tensors + the weight, 5 FLOPs an element (square, sum, scale, weight, add)."""
    x = [T, 4096]
    cost = price(
        "aiter::add_rmsnorm",
        [x, x, x, x, [4096], []],
        [BF16] * 5 + ["Scalar"],
        ["", "", "", "", "", "9.9999999999999995e-07"],
    )
    assert _whole(cost) == (5 * T * 4096, 4 * T * 4096 * 2 + 4096 * 2, "bf16", VECTOR)
    # 72 launches of the extend step: 36.2 GB, the four-tensor arithmetic.
    assert 72 * cost.bytes == pytest.approx(72 * 4 * T * 4096 * 2, rel=1e-3)
    assert 72 * cost.bytes / 1e9 == pytest.approx(36.2, abs=0.05)


def test_aiter_rmsnorm_per_head_norms_are_priced_at_their_own_width():
    """Bug: aiter::rmsnorm(out, input, weight, eps) had no cost model, and Qwen3's per-head q/k norms
    were priced 4,096 wide. The shapes say each launch's width: k_norm normalises [15360 x 8, 128]
    (8 KV heads x 128 = 1,024 values a token), q_norm [15360 x 32, 128]: input read + output
    written + a 128-wide weight, 4 FLOPs an element (square, sum, scale, weight)."""
    types = [BF16, BF16, BF16, "Scalar"]
    k_norm = price("aiter::rmsnorm", [[T * 8, 128], [T * 8, 128], [128], []], types)
    assert _whole(k_norm) == (4 * T * 1024, 2 * T * 1024 * 2 + 128 * 2, "bf16", VECTOR)
    q_norm = price("aiter::rmsnorm", [[T * 32, 128], [T * 32, 128], [128], []], types)
    assert q_norm.bytes == 2 * T * 4096 * 2 + 256
    hidden = price("aiter::rmsnorm", [[T, 4096], [T, 4096], [4096], []], types)
    assert hidden.bytes == 2 * T * 4096 * 2 + 8192
    # 36 layers of k_norm: 2.26 GB, not the 9.06 GB of a 4,096-wide norm.
    assert 36 * k_norm.bytes / 1e9 == pytest.approx(2.265, abs=0.001)


def test_norm_layouts_of_each_engine():
    """Bug: the norms of SGLang, FlashInfer, TensorRT-LLM and AITER's quantising norms had no cost
    model. Their schemas: sgl_kernel::fused_add_rmsnorm(input!, residual!, weight, eps) and
    flashinfer::fused_add_rmsnorm the same (in place: input and residual each read and written);
    trtllm::flashinfer_rmsnorm(input, weight, eps) -> out; aiter::rmsnorm_quant(out, input, scale!,
    weight, eps) writes an fp8 out and per-row fp32 scales; vLLM rms_norm_dynamic_per_token_quant
    (result, input, weight, scale!, eps, scale_ub, residual!) adds the residual in place;
    gemma_rmsnorm multiplies by 1 + weight (one FLOP more)."""
    x, w = [4, 8], [8]  # 32 elements: 64 bf16 bytes; weight 16 bytes
    inplace = price("sgl_kernel::fused_add_rmsnorm", [x, x, w, [], []], [BF16, BF16, BF16, "Scalar", "Scalar"])
    assert _whole(inplace) == (5 * 32, (64 + 64 + 16) + (64 + 64), "bf16", VECTOR)
    assert _whole(price("flashinfer::fused_add_rmsnorm", [x, x, w, [], []], [BF16] * 3 + ["Scalar"] * 2)) == _whole(
        inplace
    )
    returned = price("trtllm::flashinfer_rmsnorm", [x, w, []], [BF16, BF16, "Scalar"])
    assert _whole(returned) == (4 * 32, 64 + 16 + 64, "bf16", VECTOR)
    quant = price(
        "aiter::rmsnorm_quant", [x, x, [4, 1], w, [], [], []], [FP8, BF16, F32, BF16, "Scalar", "Scalar", "Scalar"]
    )
    assert _whole(quant) == (4 * 32, 64 + 16 + 32 + 4 * 4, "bf16", VECTOR)
    per_token = price(
        "_C::rms_norm_dynamic_per_token_quant", [x, x, w, [4, 1], [], [], x], [FP8, BF16, BF16, F32, "Scalar", "", BF16]
    )
    assert _whole(per_token) == (5 * 32, (64 + 64 + 16) + (32 + 64 + 16), "bf16", VECTOR)
    add_quant = price(
        "aiter::add_rmsnorm_quant", [x, x, x, x, [4, 1], w, []], [FP8, BF16, BF16, BF16, F32, BF16, "Scalar"]
    )
    assert _whole(add_quant) == (5 * 32, (64 + 64 + 16) + (32 + 64 + 16), "bf16", VECTOR)
    gemma = price("sgl_kernel::gemma_rmsnorm", [x, x, w, [], []], [BF16, BF16, BF16, "Scalar", "Scalar"])
    assert gemma.flops == 5 * 32
    with_add = price(
        "_C::fused_add_rms_norm_static_fp8_quant", [x, x, x, w, [], []], [FP8, BF16, BF16, BF16, F32, "Scalar"]
    )
    assert _whole(with_add) == (5 * 32, (64 + 64 + 16) + (32 + 64), "bf16", VECTOR)


# --- activations -------------------------------------------------------------------------------


def test_silu_and_mul_reads_the_gate_up_output_and_writes_half():
    """Bug: sgl_kernel::silu_and_mul(out [T, I], input [T, 2I]) had no cost model. It reads the
    gate-up GEMM's [15360, 24576] output and writes [15360, 12288]: out = silu(gate) * up, 5 FLOPs
    an output element (sigmoid 3, times x 1, times up 1)."""
    cost = price("sgl_kernel::silu_and_mul", [[T, 12288], [T, 24576]], [BF16, BF16])
    assert _whole(cost) == (5 * T * 12288, T * 24576 * 2 + T * 12288 * 2, "bf16", VECTOR)
    assert 36 * cost.bytes / 1e9 == pytest.approx(40.77, abs=0.01)  # the step's 36 launches


def test_other_activation_forms():
    """Bug: vLLM's, AITER's, FlashInfer's and TensorRT-LLM's gated activations had no cost model.
    gelu_tanh_and_mul counts 9 FLOPs for tanh-GELU + 1 multiply; trtllm::flashinfer_silu_and_mul(x)
    returns [T, I] from x [T, 2I]; silu_and_mul_per_block_quant writes an fp8 out and its scales."""
    x, out = [4, 16], [4, 8]  # input 128 bytes bf16, output 32 elements
    tanh = price("_C::gelu_tanh_and_mul", [out, x], [BF16, BF16])
    assert _whole(tanh) == (10 * 32, 128 + 64, "bf16", VECTOR)
    assert price("aiter::silu_and_mul", [out, x], [BF16, BF16]).flops == 5 * 32
    returned = price("trtllm::flashinfer_silu_and_mul", [x], [BF16])
    assert _whole(returned) == (5 * 32, 128 + 64, "bf16", VECTOR)
    quant = price(
        "_C::silu_and_mul_per_block_quant", [out, x, [4, 1], [], [], []], [FP8, BF16, F32, "Scalar", "", "Scalar"]
    )
    assert _whole(quant) == (5 * 32, 128 + 32 + 16, "bf16", VECTOR)
    assert isinstance(price("sgl_kernel::silu_and_mul", [[4, 8], [4, 15]], [BF16, BF16]), NoCost)  # odd width


# --- KV-cache writes, rotary, quantisation -------------------------------------------------------


def test_sglang_store_cache_writes_the_new_keys_and_values():
    """Bug: sglang::store_cache(k, v, k_cache, v_cache, indices, row_bytes, ...) had no cost model. It
    stores the step's [15360, 1024] keys and values (8 KV heads x 128) at their slots: k and v and
    the int64 indices read, as many key and value elements written at the cache's 2 bytes."""
    kv, cache = [T, 1024], [835874, 1024]
    cost = price(
        "sglang::store_cache",
        [kv, kv, cache, cache, [T], [], []],
        [BF16] * 4 + [I64, "Scalar", "Scalar"],
        ["", "", "", "", "", "2048", "0"],
    )
    assert _whole(cost) == (0, 2 * T * 1024 * 2 + T * 8 + 2 * T * 1024 * 2, "bf16", VECTOR)
    # AITER's reshape_and_cache has vLLM's argument order (key, value, key_cache, value_cache, slot_mapping).
    fp8 = price(
        "aiter::reshape_and_cache",
        [[6, 2, 8], [6, 2, 8], [50, 2, 1, 16, 8], [50, 2, 8, 16], [6], [], [], [], []],
        [BF16, BF16, FP8, FP8, I64, "str", F32, F32, "Scalar"],
    )
    assert fp8.bytes == 2 * 96 * 2 + 6 * 8 + 2 * 96


def test_mla_cache_write_rope_with_cache_store_and_group_quant():
    """Bug: vLLM's concat_and_cache_mla, SGLang's apply_rope_pos_ids_cos_sin_cache (with its fused KV
    store) and sgl_per_token_group_quant_fp8 had no cost model."""
    mla = price(
        "_C_cache_ops::concat_and_cache_mla",
        [[6, 512], [6, 64], [10, 16, 576], [6], [], []],
        [BF16, BF16, BF16, I64, "str", F32],
    )
    assert _whole(mla) == (0, 6 * 576 * 2 + 6 * 8 + 6 * 576 * 2, "bf16", VECTOR)
    # 10 tokens, 4 query heads and 1 KV head of 16, full rotary (cos/sin rows of 16): 800 rotated.
    q, k, v = [10, 4, 16], [10, 1, 16], [10, 1, 16]
    dims = [q, k, q, k, [4096, 16], [10], [], [], v, [100, 1, 16], [100, 1, 16], [10]]
    types = [BF16, BF16, BF16, BF16, BF16, I64, "Scalar", "Scalar", BF16, BF16, BF16, I64]
    rope = price("sgl_kernel::apply_rope_pos_ids_cos_sin_cache", dims, types)
    moved = 2 * (640 + 160)  # q and k bytes
    stored = 160 * 2 + 10 * 8 + (160 + 160) * 2  # v and the int64 slots read; rotated k and v written into the cache
    assert _whole(rope) == (3 * 800, moved + 10 * 16 * 2 + 10 * 8 + moved + stored, "bf16", VECTOR)
    quant = price(
        "sgl_kernel::sgl_per_token_group_quant_fp8",
        [[16, 512], [16, 512], [16, 4], [], [], [], [], []],
        [BF16, FP8, F32] + ["Scalar"] * 5,
    )
    assert _whole(quant) == (2 * 16 * 512, 16 * 512 * 2 + 16 * 512 + 16 * 4 * 4, "bf16", VECTOR)


# --- attention -----------------------------------------------------------------------------------

# aiter::mha_batch_prefill as the extend step records it: q [15360, 32, 128], the paged cache (page size
# 1) [835874, 8, 128] twice, cu_seqlens_q [16], kv_indptr [16], kv_page_indices [15616], then
# max_seqlen_q, max_seqlen_k, dropout, scale, soft cap, zero_tensors, is_causal, window left/right, ...
PREFILL_DIMS = [[T, 32, 128], [835874, 8, 128], [835874, 8, 128], [16], [16], [15616]] + [[]] * 24
PREFILL_TYPES = [BF16, BF16, BF16, "int", "int", "int"] + ["Scalar"] * 12 + [""] * 12
PREFILL_CONCRETE = [
    "",
    "",
    "",
    "",
    "",
    "",
    "1024",
    "1024",
    "0.",
    "0.088388347648318447",
    "0.",
    "False",
    "True",
    "-1",
    "-1",
    "0",
    "False",
    "False",
] + [""] * 12


def test_mha_batch_prefill_lengths_from_its_shapes():
    """Bug: aiter::mha_batch_prefill had no cost model. Its shapes fix the lengths: 15 sequences
    (cu_seqlens_q of 16) of 15360 / 15 = 1,024 = max_seqlen_q queries; causal with max_seqlen_k =
    max_seqlen_q, so each sequence's 1,024 keys are its queries. Pairs = 15 x 1024 x 1025 / 2; FLOPs =
    2 x 32 heads x pairs x (128 + 128); bytes = 15360 keys x 8 KV heads x 256 x 2 B + query + output
    (300 MiB, TraceLens's figure)."""
    cost = _ctx("aiter::mha_batch_prefill", PREFILL_DIMS, PREFILL_TYPES, PREFILL_CONCRETE)
    pairs = 15 * 1024 * 1025 // 2
    assert _whole(cost) == (2 * 32 * pairs * 256, T * 8 * 256 * 2 + 2 * T * 32 * 128 * 2, "bf16", MATRIX)
    assert cost.bytes == 300 * 2**20
    # The step's context is not needed, and not used, when the shapes fix the lengths.
    assert _whole(
        _ctx("aiter::mha_batch_prefill", PREFILL_DIMS, PREFILL_TYPES, PREFILL_CONCRETE, pairs=1.0, keys=1.0)
    ) == _whole(cost)


def test_mha_batch_prefill_window_and_unequal_lengths():
    """Bug: no model, so no sliding window and no fallback to the step. A window_size_left of 127
    (128 keys with the query itself) over 1,024-token causal sequences scores, per sequence,
    sum over positions p of min(p, 128) = 128 x 129 / 2 + (1024 - 128) x 128 pairs, and still reads
    every key once. Where the tokens are not batch x max_seqlen_q the lengths come from the step
    (OpContext), and without one the op says why it has no cost."""
    windowed = list(PREFILL_CONCRETE)
    windowed[13] = "127"
    cost = _ctx("aiter::mha_batch_prefill", PREFILL_DIMS, PREFILL_TYPES, windowed)
    per = 128 * 129 // 2 + (1024 - 128) * 128
    assert cost.flops == 2 * 32 * 15 * per * 256
    assert cost.bytes == T * 8 * 256 * 2 + 2 * T * 32 * 128 * 2
    longer = list(PREFILL_CONCRETE)
    longer[6] = longer[7] = "2048"  # 15360 tokens are not 15 x 2048: the lengths differ
    from_step = _ctx("aiter::mha_batch_prefill", PREFILL_DIMS, PREFILL_TYPES, longer, pairs=9e6, keys=2e4)
    assert from_step.flops == 2 * 32 * 9e6 * 256 and from_step.bytes == 2e4 * 8 * 256 * 2 + 2 * T * 32 * 128 * 2
    missing = _ctx("aiter::mha_batch_prefill", PREFILL_DIMS, PREFILL_TYPES, longer)
    assert isinstance(missing, NoCost) and "query-key pairs" in missing.reason


# The decode capture's SGLang profiler wrapper of AITER's paged_attention_ragged: tensor arguments only
# (out, workspace, query, key_cache, value_cache, kv_indptr, kv_page_indices, kv_last_page_lens,
# alibi_slopes, k_scale, v_scale, fp8_out_scale).
RAGGED_DIMS = [
    [32, 32, 128],
    [10905190400],
    [32, 32, 128],
    [835874, 1, 8, 128],
    [835874, 1, 8, 128],
    [33],
    [20971520],
    [4096],
    [],
    [1],
    [1],
    [],
]
RAGGED_TYPES = [BF16, "unsigned char", BF16, BF16, BF16, "int", "int", "int", "", F32, F32, ""]


def test_paged_decode_attention_keys_from_the_step():
    """Bug: sglang_profiler::attention_paged_attention_ragged_100 (AITER's paged decode attention)
    had no cost model. Its page tables are preallocated buffers, so the keys come from the step:
    the decode step's annotation states sk = 32,785 keys over 32 requests of one query each. FLOPs
    = 2 x 32 heads x 32,785 pairs x 256; bytes = 32,785 keys x 8 KV heads x 256 x 2 B + query +
    output (128.57 MiB, TraceLens's figure). The profiler's counter suffix does not matter."""
    cost = _ctx(
        "sglang_profiler::attention_paged_attention_ragged_100", RAGGED_DIMS, RAGGED_TYPES, pairs=32785.0, keys=32785.0
    )
    assert _whole(cost) == (2 * 32 * 32785 * 256, 32785 * 8 * 256 * 2 + 2 * 32 * 32 * 128 * 2, "bf16", MATRIX)
    assert cost.bytes / 2**20 == pytest.approx(128.56640625)
    other = _ctx(
        "sglang_profiler::attention_paged_attention_ragged_7", RAGGED_DIMS, RAGGED_TYPES, pairs=32785.0, keys=32785.0
    )
    assert _whole(other) == _whole(cost)
    unknown = _ctx("sglang_profiler::attention_paged_attention_ragged_100", RAGGED_DIMS, RAGGED_TYPES)
    assert isinstance(unknown, NoCost) and "preallocated" in unknown.reason


def test_the_profiler_wrappers_of_priced_ops_stay_unpriced():
    """Bug it guards against: a model on SGLang's profiler wrapper (rmsnorm_rmsnorm2d_fwd_109 around
    aiter::rmsnorm) would make the wrapper the outermost priced op, and its kernel would be priced
    from the wrapper's arguments instead of the op's. Only the wrappers without a torch op inside are
    priced (paged_attention_ragged, the Triton MoE GEMM launcher), and the attention ones need the
    step."""
    assert has_model("sglang_profiler::attention_paged_attention_ragged_100")
    assert needs_context("sglang_profiler::attention_paged_attention_ragged_100")
    assert has_model("aiter::rmsnorm") and not needs_context("aiter::rmsnorm")
    for wrapper in (
        "rmsnorm_rmsnorm2d_fwd_109",
        "rmsnorm_rmsnorm2d_fwd_with_add_110",
        "mha__mha_batch_prefill_167",
        "memory_pool__set_kv_buffer_impl_353",
        "utils_apply_qk_norm_487",
    ):
        wrapper = "sglang_profiler::" + wrapper
        assert not has_model(wrapper), wrapper


def test_varlen_and_vllm_paged_attention():
    """Bug: AITER's mha_varlen_fwd and vLLM's paged_attention_v2 had no cost model.
    mha_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...): packed keys
    [Tk, Hkv, D]; 4 sequences of 64 queries over 64 keys, causal: 4 x 64 x 65 / 2 pairs. is_causal
    is found after the (zero_tensors, is_causal) pair in both the old argument order and the newer
    one with min_seqlen_q and logits_soft_cap. paged_attention_v2's key cache [blocks, Hkv, D/x,
    block, x] = [100, 8, 16, 16, 8] is D = 16 x 8 = 128, its value cache [100, 8, 128, 16]."""
    q, kv = [256, 16, 64], [256, 4, 64]
    old = ["", "", "", "", "", "64", "64", "0.", "0.125", "False", "True", "-1", "-1", "False", "False"]
    new = ["", "", "", "", "", "64", "64", "0", "0.", "0.125", "0.", "False", "True", "-1", "-1", "0", "False", "False"]
    for concrete in (old, new):
        n = len(concrete)
        cost = _ctx(
            "aiter::mha_varlen_fwd",
            [q, kv, kv, [5], [5]] + [[]] * (n - 5),
            [BF16, BF16, BF16, I32, I32] + ["Scalar"] * (n - 5),
            concrete,
        )
        pairs = 4 * 64 * 65 // 2
        assert _whole(cost) == (2 * 16 * pairs * 128, 256 * 4 * 128 * 2 + 2 * 256 * 16 * 64 * 2, "bf16", MATRIX)
    dims = [
        [4, 32, 128],
        [4, 32, 2],
        [4, 32, 2],
        [4, 32, 2, 128],
        [4, 32, 128],
        [100, 8, 16, 16, 8],
        [100, 8, 128, 16],
        [],
        [],
        [4, 25],
        [4],
        [],
        [],
    ]
    types = [BF16, F32, F32, BF16, BF16, BF16, BF16, "Scalar", "Scalar", I32, I32, "Scalar", "Scalar"]
    v2 = _ctx("_C::paged_attention_v2", dims, types, pairs=400.0, keys=400.0)
    assert _whole(v2) == (2 * 32 * 400 * 256, 400 * 8 * 256 * 2 + 2 * 4 * 32 * 128 * 2, "bf16", MATRIX)
    bad = _ctx("_C::paged_attention_v2", [*dims[:4], [4, 32, 64], *dims[5:]], types, pairs=400.0, keys=400.0)
    assert isinstance(bad, NoCost)  # a query head of 64 does not fit keys of 128


# --- MoE -----------------------------------------------------------------------------------------


def test_moe_routing_and_sum():
    """Bug: vLLM's topk_softmax and moe_sum and SGLang's topk_softmax had no cost model. Routing 16
    tokens over 64 experts, top-2: each fp32 logit scored (softmax 5 FLOPs) and scanned by 2 top-k
    passes; the logits read, weights, ids and token-expert indices written (fp32 / int32). moe_sum
    adds each token's 2 expert outputs [16, 2, 512] into [16, 512]: 1 add an output element."""
    top2 = [16, 2]
    vllm = price("_moe_C::topk_softmax", [top2, top2, top2, [16, 64], []], [F32, I32, I32, F32, "Scalar"])
    assert _whole(vllm) == ((5 + 2) * 16 * 64, 16 * 64 * 4 + 3 * 16 * 2 * 4, "fp32", VECTOR)
    sgl = price(
        "sgl_kernel::topk_softmax", [top2, top2, [16, 64], [], [], []], [F32, I32, BF16, "Scalar", "Scalar", ""]
    )
    assert _whole(sgl) == ((5 + 2) * 16 * 64, 16 * 64 * 2 + 2 * 16 * 2 * 4, "bf16", VECTOR)
    total = price("_moe_C::moe_sum", [[16, 2, 512], [16, 512]], [BF16, BF16])
    assert _whole(total) == (16 * 512, 16 * 2 * 512 * 2 + 16 * 512 * 2, "bf16", VECTOR)


def test_moe_expert_gemms_from_their_shapes():
    """Bug: fused-MoE ops had no cost model. vllm::outplace_fused_experts(hidden [16, 512], w1 [64,
    512, 512], w2 [64, 512, 256], topk_weights [16, 2], topk_ids [16, 2]): gate-up 2 x 32 x 512 x 512
    and down 2 x 32 x 512 x 256 FLOPs; the weights of the experts the 16 tokens touch, E(1 - (1 -
    k/E)^T) = 64 (1 - (62/64)^16) under uniform routing, + hidden in and out + ids and weights.
    SGLang's Triton launcher (one grouped GEMM a call) as TraceLens's profiler records it for
    Qwen3-30B-A3B: A [15360, 2048], B [128, 1536, 2048], C [122880, 1536], topk_ids [15360, 8] int:
    2 x 122880 x 1536 x 2048 FLOPs; its down GEMM (A [122880, 768], B [128, 2048, 768]) half that."""
    touched = 64 * (1 - (62 / 64) ** 16)
    cost = price(
        "vllm::outplace_fused_experts",
        [[16, 512], [64, 512, 512], [64, 512, 256], [16, 2], [16, 2]],
        [BF16, BF16, BF16, F32, I32],
    )
    assert cost.flops == 2 * 32 * (512 * 512 + 512 * 256)
    assert cost.bytes == pytest.approx(touched * (512 * 512 + 512 * 256) * 2 + 2 * 16 * 512 * 2 + 16 * 2 * 4 * 2)
    assert (cost.dtype, cost.unit) == ("bf16", MATRIX)
    types = [BF16, BF16, "", BF16, "", "", "", F32, I32, I32, I32, I32, ""]
    up = price(
        "sglang_profiler::fused_moe_triton_kernels_invoke_fused_moe_kernel_427",
        [
            [15360, 2048],
            [128, 1536, 2048],
            [],
            [122880, 1536],
            [],
            [],
            [],
            [15360, 8],
            [15360, 8],
            [131007],
            [2047],
            [1],
            [],
        ],
        types,
    )
    assert up.flops == 2 * 122880 * 1536 * 2048
    down = price(
        "sglang_profiler::fused_moe_triton_kernels_invoke_fused_moe_kernel_427",
        [
            [122880, 768],
            [128, 2048, 768],
            [],
            [15360, 8, 2048],
            [],
            [],
            [],
            [15360, 8],
            [15360, 8],
            [131007],
            [2047],
            [1],
            [],
        ],
        types,
    )
    assert down.flops * 2 == up.flops
    packed = price(
        "vllm::outplace_fused_experts",
        [[16, 512], [64, 512, 256], [64, 512, 128], [16, 2], [16, 2]],
        [BF16, "unsigned char", "unsigned char", F32, I32],
    )
    assert isinstance(packed, NoCost) and "pack" in packed.reason
