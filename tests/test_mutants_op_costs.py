"""Whole outputs (flops, bytes, dtype, unit) of the per-op models tracekit.analysis.pricing.op_costs dispatches to
(matrix_ops, vector_ops, engine_ops) that surviving mutants showed no test pinned. Every expected figure is
hand arithmetic from the conventions in op_costs' docstring (bytes = each input read once + each output
written once; GEMM/attention 2 flops per multiply-add; elementwise ELEMENTWISE_FLOPS per output element)
and the formulas its op docstrings state, or a format fact (c10::ScalarType codes, element sizes)."""

from __future__ import annotations

import json

import pytest

from tracekit.analysis.pricing.op_args import MATRIX, VECTOR, NoCost, OpContext, OpCost
from tracekit.analysis.pricing.op_costs import price, price_in_context

BF16, F16, F32, F64, I64, FP8 = "c10::BFloat16", "c10::Half", "float", "double", "long int", "c10::Float8_e4m3fn"


def _whole(cost) -> tuple:
    assert isinstance(cost, OpCost), cost
    return cost.flops, cost.bytes, cost.dtype, cost.unit


def _ctx(op, dims, types, concrete=None, **ctx):
    return price_in_context(
        op,
        json.dumps(dims),
        json.dumps(types),
        json.dumps(concrete) if concrete is not None else None,
        OpContext(**ctx),
    )


# --- serving engines' custom ops ---------------------------------------------------------------


def test_vllm_norm_ops_whole_cost():
    """catches: fused_add_rms_norm's per-element flops (rms 3 + weight 1 + residual add 1) or its
    in-place traffic (input and residual each read and written) miscounted, a missing weight read
    as something, rms_norm(out, input, weight) reading the output or writing at the input's size."""
    x = [4, 8]  # 32 elements, bf16: 64 bytes
    fused = price("_C::fused_add_rms_norm", [x, x, [8], []], [BF16, BF16, BF16, "Scalar"])
    assert _whole(fused) == (5 * 32, (64 + 64 + 16) + (64 + 64), "bf16", VECTOR)
    no_weight = price("_C::fused_add_rms_norm", [x, x, [], []], [BF16, BF16, "", "Scalar"])
    assert _whole(no_weight) == (5 * 32, 64 + 64 + 64 + 64, "bf16", VECTOR)
    # rms_norm_static_fp8_quant: fp8 output (1 byte/element), priced at the input's dtype.
    out = price("_C::rms_norm_static_fp8_quant", [x, x, [8], [], []], [FP8, BF16, BF16, F32, "Scalar"])
    assert _whole(out) == (4 * 32, (64 + 16) + 32, "bf16", VECTOR)
    plain = price("_C::rms_norm", [x, x, [], []], [BF16, BF16, "", "Scalar"])
    assert _whole(plain) == (4 * 32, 64 + 64, "bf16", VECTOR)


def test_rotary_embedding_whole_cost_full_and_partial():
    """catches: rotary's 3 flops per rotated element, its cos/sin rows (one row of the cache's last
    dim per position) or the in-place query/key traffic miscounted, and partial rotary (a cache
    narrower than head_size) not scaling the rotated elements by rot/head_size."""
    # 10 tokens, 4 query heads and 1 key head of 16: q 640, k 160 elements (bf16).
    q, k = [10, 64], [10, 16]
    moved = 2 * (640 + 160)
    full = price(
        "sgl_kernel::rotary_embedding",
        [[10], q, k, [], [4096, 16], []],
        [I64, BF16, BF16, "Scalar", BF16, "Scalar"],
        ["", "", "", "16", "", "True"],
    )
    assert _whole(full) == (3 * 800, moved + 10 * 16 * 2 + 10 * 8 + moved, "bf16", VECTOR)
    # A cache of 8 rotary dims of 16: half of each head turns.
    partial = price(
        "_C::rotary_embedding",
        [[10], q, k, [], [4096, 8], []],
        [I64, BF16, BF16, "Scalar", BF16, "Scalar"],
        ["", "", "", "16", "", "True"],
    )
    assert _whole(partial) == (3 * 400, moved + 10 * 8 * 2 + 10 * 8 + moved, "bf16", VECTOR)
    # No key tensor (None): only the query turns.
    q_only = price(
        "_C::rotary_embedding",
        [[10], q, [], [], [4096, 16], []],
        [I64, BF16, "", "Scalar", BF16, "Scalar"],
        ["", "", "", "16", "", "True"],
    )
    assert _whole(q_only) == (3 * 640, 1280 + 320 + 80 + 1280, "bf16", VECTOR)


def test_quant_ops_whole_cost():
    """catches: quantisation's 2 flops per element (scale, round), its output written at the
    low-precision size, or its scales (every tensor argument past the input) left out."""
    x = [4, 8]
    static = price("_C::static_scaled_fp8_quant", [x, x, []], [FP8, BF16, F32])
    assert _whole(static) == (2 * 32, 64 + 32 + 4, "bf16", VECTOR)
    # Per-token scales [4, 1] fp32 and an optional upper bound left None.
    per_token = price("_C::dynamic_per_token_scaled_fp8_quant", [x, x, [4, 1], []], [FP8, BF16, F32, ""])
    assert _whole(per_token) == (2 * 32, 64 + 32 + 16, "bf16", VECTOR)


def test_reshape_and_cache_whole_cost():
    """catches: the KV-cache write priced with flops, its slot mapping not read, or the new keys and
    values written at their own size instead of the cache's element size."""
    kv = [6, 2, 8]  # 96 elements each, bf16
    dims = [kv, kv, [50, 16, 2, 8], [50, 16, 2, 8], [6], [], [], []]
    fp8 = price("_C_cache_ops::reshape_and_cache_flash", dims, [BF16, BF16, FP8, FP8, I64, "", F32, F32])
    assert _whole(fp8) == (0, 2 * 96 * 2 + 6 * 8 + 2 * 96 * 1, "bf16", VECTOR)
    same = price(
        "_C_cache_ops::reshape_and_cache",
        [kv, kv, [50, 16, 2, 8], [50, 16, 2, 8], [], [], [], []],
        [BF16, BF16, BF16, BF16, "", "", F32, F32],
    )
    assert _whole(same) == (0, 2 * 96 * 2 + 2 * 96 * 2, "bf16", VECTOR)


# --- ops priced with the run's context ---------------------------------------------------------


def test_all_reduce_on_four_ranks_whole_cost():
    """catches: the ring all-reduce's 2(N-1)/N of the tensor per rank, its (N-1)/N adds per element,
    its unit or dtype wrong, or a tensor-parallel degree of 0 taken as a multi-rank run."""
    dims, types = [[8, 16], []], [BF16, ""]  # 128 elements, 256 bytes
    four = _ctx("vllm::outplace_all_reduce", dims, types, tp=4)
    assert _whole(four) == (3 / 4 * 128, 2 * 3 / 4 * 256, "bf16", VECTOR)
    two = _ctx("_C_custom_ar::all_reduce", [[8, 16], []], [F32, ""], tp=2)
    assert _whole(two) == (64, 512, "fp32", VECTOR)
    assert isinstance(_ctx("c10d::allreduce_", dims, types, tp=0), NoCost)


def test_unified_attention_whole_cost():
    """catches: vLLM unified attention's 2*Hq*pairs*(D+Dv) flops or its bytes (keys x Hkv x (D+Dv) at
    the KV cache's element size, + query + output at Hq x Dv) miscounted, the key's element size not
    used when the cache's is unknown, or a non-3-D query accepted."""
    # 5 tokens, 4 query heads and 2 KV heads of 8; 15 pairs and 5 keys per layer in the step.
    q, kv = [5, 4, 8], [5, 2, 8]
    dims, types = [q, kv, kv, q, [], []], [BF16, BF16, BF16, BF16, "", ""]
    own = _ctx("vllm::unified_attention_with_output", dims, types, pairs=15.0, keys=5.0)
    assert _whole(own) == (2 * 4 * 15 * 16, 5 * 2 * 16 * 2 + 160 * 2 + 160 * 2, "bf16", MATRIX)
    fp8_cache = _ctx("vllm::unified_attention", dims, types, pairs=15.0, keys=5.0, kv_bytes=1.0)
    assert _whole(fp8_cache) == (1920, 5 * 2 * 16 * 1 + 320 + 320, "bf16", MATRIX)
    # A value head of 4 (Dv != D): output is [5, 4, 4].
    narrow_v = _ctx("vllm::unified_attention", [q, kv, [5, 2, 4], [5, 4, 4], [], []], types, pairs=15.0, keys=5.0)
    assert _whole(narrow_v) == (2 * 4 * 15 * 12, 5 * 2 * 12 * 2 + 320 + 5 * 4 * 4 * 2, "bf16", MATRIX)
    assert isinstance(
        _ctx("vllm::unified_attention", [[5, 32], kv, kv, [5, 32], [], []], types, pairs=15.0, keys=5.0), NoCost
    )
    assert isinstance(_ctx("vllm::unified_attention", dims, types, keys=5.0), NoCost)  # pairs unknown


def test_context_pricing_of_an_ordinary_op_and_of_unrecorded_shapes():
    """catches: price_in_context not falling back to the shape-only model for an op outside
    CONTEXT_MODELS, or a context op without recorded shapes / with broken JSON priced or crashing."""
    mm = price_in_context("aten::mm", json.dumps([[2, 3], [3, 4]]), json.dumps([F32, F32]), None, OpContext())
    assert _whole(mm) == (2 * 2 * 3 * 4, 4 * (6 + 12 + 8), "fp32", MATRIX)
    none = price_in_context("c10d::allreduce_", None, None, None, OpContext(tp=2))
    assert isinstance(none, NoCost) and "record_shapes" in none.reason
    broken = price_in_context("c10d::allreduce_", "[[8, 1", json.dumps([BF16]), None, OpContext(tp=2))
    assert isinstance(broken, NoCost) and "JSON" in broken.reason


# --- attention ---------------------------------------------------------------------------------


def _flash(q, k, v, causal, qt=BF16, kt=BF16):
    """_flash_attention_forward as the profiler records it: [B, L, H, D], is_causal at 8."""
    return price(
        "aten::_flash_attention_forward",
        [q, k, v] + [[]] * 12,
        [qt, kt, kt] + [""] * 12,
        None if causal is None else ["", "", "", "", "", "", "", "0.", causal, "False", "", "", "", "", ""],
    )


def test_attention_mask_and_alignment_variants():
    """catches: an explicit SDPA mask not making every pair scored or its bytes not read, the
    custom_mask_type of _efficient_attention_forward (0 full, 1 top-left causal, 2 bottom-right
    causal) misread, and flash's bottom-right causal rows of a chunk miscounted.
    Geometry: B=1, Hq=Hkv=2, Lq=4, Lk=6, D=Dv=8; q+k+v+out = 2*4*16 + 2*6*16 = 320 bf16 elements."""
    qkv = 2 * 320
    sdpa_dims = [[1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], [1, 1, 4, 6], [], [], []]
    masked = price(
        "aten::scaled_dot_product_attention",
        sdpa_dims,
        [BF16] * 3 + ["bool", "", "Scalar", "Scalar"],
        ["", "", "", "", "0.", "True", ""],
    )
    assert _whole(masked) == (2 * 2 * 24 * 16, qkv + 24, "bf16", MATRIX)  # all 24 pairs; 24 mask bytes
    eff_dims = [[1, 4, 2, 8], [1, 6, 2, 8], [1, 6, 2, 8]] + [[]] * 9
    eff_types = [BF16] * 3 + [""] * 9

    def efficient(mask_type):
        concrete = None if mask_type is None else ["", "", "", "", "", "", "", "", "0.", mask_type, "False", ""]
        return price("aten::_efficient_attention_forward", eff_dims, eff_types, concrete)

    # Pairs: full 4*6 = 24; top-left rows see 1, 2, 3, 4 keys = 10; bottom-right 3, 4, 5, 6 = 18.
    assert _whole(efficient("0")) == (2 * 2 * 24 * 16, qkv, "bf16", MATRIX)
    assert _whole(efficient("1")) == (2 * 2 * 10 * 16, qkv, "bf16", MATRIX)
    assert _whole(efficient("2")) == (2 * 2 * 18 * 16, qkv, "bf16", MATRIX)
    assert isinstance(efficient(None), NoCost) and isinstance(efficient("3"), NoCost)
    flash = _flash([1, 4, 2, 8], [1, 6, 2, 8], [1, 6, 2, 8], "True")
    assert _whole(flash) == (2 * 2 * 18 * 16, qkv, "bf16", MATRIX)


def test_attention_kv_in_its_own_dtype_and_decode_without_flags():
    """catches: K/V in an fp8 cache priced at the query's element size, a one-row flash decode
    refused for lack of is_causal (one row sees the whole cache either way), and a one-row SDPA
    causal call (top-left: the row sees key 0 only) priced as full."""
    # q bf16 [1, 4, 2, 8] = 64 elements (+ 64 out), k and v fp8 [1, 6, 2, 8] = 96 elements each.
    fp8_kv = _flash([1, 4, 2, 8], [1, 6, 2, 8], [1, 6, 2, 8], "False", kt=FP8)
    assert _whole(fp8_kv) == (2 * 2 * 24 * 16, 2 * (64 + 64) + 96 + 96, "bf16", MATRIX)
    decode = _flash([3, 1, 4, 16], [3, 50, 2, 16], [3, 50, 2, 16], None)  # no Concrete Inputs at all
    assert _whole(decode) == (2 * 3 * 4 * 50 * 32, 2 * 3 * (4 * 1 * 32 + 2 * 50 * 32), "bf16", MATRIX)
    one_row = price(
        "aten::scaled_dot_product_attention",
        [[1, 2, 1, 8], [1, 2, 6, 8], [1, 2, 6, 8], [], [], [], []],
        [F32] * 3 + ["", "", "Scalar", "Scalar"],
        ["", "", "", "", "0.", "True", ""],
    )
    assert _whole(one_row) == (2 * 2 * 1 * 16, 4 * (2 * 1 * 16 + 2 * 6 * 16), "fp32", MATRIX)


def test_attention_value_head_and_low_rank_layouts():
    """catches: a value head dim unlike the query's (MLA-style Dv) not used for flops, output and V
    bytes, 3-D [H, L, D] and 2-D [L, D] SDPA operands given the wrong heads or batch, and 1-D
    operands accepted."""
    dv4 = price(
        "aten::_scaled_dot_product_flash_attention",
        [[1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 4]] + [[]] * 4,
        [BF16] * 3 + ["Scalar", "Scalar", "Scalar", ""],
        ["", "", "", "0.", "False", "False", ""],
    )
    # q 64 + k 96 + v 48 + out 2*4*4 = 32 -> 240 elements.
    assert _whole(dv4) == (2 * 2 * 24 * 12, 2 * 240, "bf16", MATRIX)
    three_d = price(
        "aten::scaled_dot_product_attention",
        [[3, 5, 8], [3, 5, 8], [3, 5, 8], [], [], [], []],
        [F16] * 3 + ["", "", "Scalar", "Scalar"],
        ["", "", "", "", "0.", "False", ""],
    )
    assert _whole(three_d) == (2 * 3 * 25 * 16, 2 * 4 * 3 * 5 * 8, "fp16", MATRIX)  # 3 heads, batch 1
    two_d = price(
        "aten::scaled_dot_product_attention",
        [[5, 8], [5, 8], [5, 8], [], [], [], []],
        [F16] * 3 + ["", "", "Scalar", "Scalar"],
        ["", "", "", "", "0.", "True", ""],
    )
    assert _whole(two_d) == (2 * 15 * 16, 2 * 4 * 5 * 8, "fp16", MATRIX)  # 1 head, causal: 15 pairs
    flat = price(
        "aten::scaled_dot_product_attention",
        [[8], [8], [8], [], [], [], []],
        [F16] * 3 + ["", "", "Scalar", "Scalar"],
        ["", "", "", "", "0.", "False", ""],
    )
    assert isinstance(flat, NoCost)


# --- elementwise ---------------------------------------------------------------------------------


def test_elementwise_output_types_and_flops():
    """catches: an in-place op written at its other operand's type, out-of-place promotion not to the
    widest dimensioned operand, sub's alpha ignored, where's three operands not all read, gelu's 5 and
    sigmoid's 3 flops per element, zero_ reading its input, and shapes that do not broadcast priced."""
    assert _whole(price("aten::mul_", [[4, 4], [4, 4]], [F16, F32])) == (16, 32 + 64 + 32, "fp16", VECTOR)
    assert _whole(price("aten::mul", [[4, 4], [4, 4]], [F16, F32])) == (16, 32 + 64 + 64, "fp32", VECTOR)
    sub = price("aten::sub", [[4, 4], [4, 4], []], [F32, F32, "Scalar"], ["", "", "3"])
    assert _whole(sub) == (2 * 16, 3 * 64, "fp32", VECTOR)
    where = price("aten::where", [[4, 1], [4, 4], []], ["bool", F32, F32])  # 0-d other: 4 bytes
    assert _whole(where) == (16, 4 + 64 + 4 + 64, "fp32", VECTOR)
    assert _whole(price("aten::gelu", [[2, 8], []], [BF16, "str"], ["", "none"])) == (5 * 16, 64, "bf16", VECTOR)
    assert _whole(price("aten::sigmoid_", [[2, 8]], [BF16])) == (3 * 16, 64, "bf16", VECTOR)
    assert _whole(price("aten::zero_", [[4, 4]], [F32])) == (0, 64, "fp32", VECTOR)
    assert _whole(price("aten::lt_", [[4, 4], []], [F32, "Scalar"])) == (16, 64 + 16, "bool", VECTOR)
    assert isinstance(price("aten::add", [[4, 3], [4, 2], []], [F32, F32, "Scalar"], ["", "", "1"]), NoCost)
    assert isinstance(price("aten::add", [[], [], []], ["Scalar", "Scalar", "Scalar"]), NoCost)


# --- reductions, norms, softmax ---------------------------------------------------------------


def test_reductions_whole_cost():
    """catches: a full reduction not writing one element, a sum's dtype argument ignored, max/min
    over a dim not writing int64 indices beside the values, negative and several reduced dims
    miscounted, and a dim overload without its recorded dims priced."""
    x, xt = [4, 6], F32  # 24 elements, 96 bytes
    assert _whole(price("aten::sum", [x, []], [xt, ""], ["", ""])) == (24, 96 + 4, "fp32", VECTOR)
    to_bf16 = price("aten::sum", [x, [], [], []], [xt, "ScalarList", "Scalar", "ScalarType"], ["", "[1]", "True", "15"])
    assert _whole(to_bf16) == (24, 96 + 4 * 2, "bf16", VECTOR)
    max_dim = price("aten::max", [x, [], []], [xt, "Scalar", "Scalar"], ["", "1", "False"])
    assert _whole(max_dim) == (24, 96 + 4 * 4 + 4 * 8, "fp32", VECTOR)
    amax = price("aten::amax", [[2, 3, 4], [], []], [xt, "ScalarList", "Scalar"], ["", "[0, -1]", "False"])
    assert _whole(amax) == (24, 96 + 3 * 4, "fp32", VECTOR)
    argmin = price("aten::argmin", [[2, 3, 4], [], []], [xt, "Scalar", "Scalar"], ["", "-2", "True"])
    assert _whole(argmin) == (24, 96 + 8 * 8, "int64", VECTOR)
    assert isinstance(price("aten::amax", [x, [], []], [xt, "ScalarList", "Scalar"]), NoCost)


def test_norms_whole_cost():
    """catches: layer norm's 6 flops per element plus 1 each for weight and bias, its params read,
    per-row statistics written at >= 4 bytes (fp64 at 8) by the schemas that return them
    (native_layer_norm: mean and rstd; _fused_rms_norm: rstd) and by no other, and a missing
    normalized_shape priced."""
    ln = price(
        "aten::layer_norm",
        [[3, 8], [], [8], [8], [], []],
        [BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"],
        ["", "[8]", "", "", "1e-05", "True"],
    )
    assert _whole(ln) == (8 * 24, 48 + 16 + 16 + 48, "bf16", VECTOR)
    bare = price(
        "aten::layer_norm",
        [[3, 8], [], [], [], [], []],
        [BF16, "ScalarList", "", "", "Scalar", "Scalar"],
        ["", "[8]", "", "", "1e-05", "True"],
    )
    assert _whole(bare) == (6 * 24, 48 + 48, "bf16", VECTOR)
    fused = price(
        "aten::_fused_rms_norm", [[3, 8], [], [8], []], [BF16, "ScalarList", BF16, "Scalar"], ["", "[8]", "", "1e-06"]
    )
    assert _whole(fused) == (4 * 24, 48 + 16 + 48 + 3 * 4, "bf16", VECTOR)  # one fp32 rstd per row
    f64 = price(
        "aten::native_layer_norm",
        [[2, 4], [], [4], [4], []],
        [F64, "ScalarList", F64, F64, "Scalar"],
        ["", "[4]", "", "", "1e-05"],
    )
    assert _whole(f64) == (8 * 8, 64 + 32 + 32 + 64 + 2 * 2 * 8, "fp64", VECTOR)
    assert isinstance(
        price("aten::native_layer_norm", [[2, 4], [], [4], [4], []], [F64, "ScalarList", F64, F64, "Scalar"]), NoCost
    )


def test_softmax_output_types():
    """catches: softmax's dtype argument (a ScalarType code) not setting the output's size and
    dtype, an absent one not keeping the input's, and _log_softmax's half_to_float=False read as
    a float output."""
    x = [2, 8]  # 16 bf16 elements, 32 bytes
    to_f32 = price("aten::softmax", [x, [], []], [BF16, "Scalar", "ScalarType"], ["", "-1", "6"])
    assert _whole(to_f32) == (5 * 16, 32 + 64, "fp32", VECTOR)
    same = price("aten::log_softmax", [x, [], []], [BF16, "Scalar", ""], ["", "-1", ""])
    assert _whole(same) == (5 * 16, 64, "bf16", VECTOR)
    half = price("aten::_log_softmax", [x, [], []], [BF16, "Scalar", "Scalar"], ["", "-1", "False"])
    assert _whole(half) == (5 * 16, 64, "bf16", VECTOR)


# --- copies, casts, gathers ------------------------------------------------------------------


def test_casts_copies_and_gathers_whole_cost():
    """catches: to.other not taking the other tensor's dtype, to.dtype's code read from the wrong
    argument, to.device's dtype (argument 2 of 6) missed, clone/contiguous not read + written at
    their own size, and index_select gathering along the wrong axis."""
    x = [4, 4]  # fp32: 64 bytes
    other = price("aten::to", [x, [2], [], [], []], [F32, F16, "Scalar", "Scalar", ""], ["", "", "False", "False", ""])
    assert _whole(other) == (0, 64 + 32, "fp16", VECTOR)
    dtype = price(
        "aten::to", [x, [], [], [], []], [F32, "ScalarType", "Scalar", "Scalar", ""], ["", "5", "False", "False", ""]
    )
    assert _whole(dtype) == (0, 64 + 32, "fp16", VECTOR)
    device = price(
        "aten::to",
        [x, [], [], [], [], []],
        [F32, "Device", "ScalarType", "Scalar", "Scalar", ""],
        ["", "cuda:0", "15", "False", "False", ""],
    )
    assert _whole(device) == (0, 64 + 32, "bf16", VECTOR)
    keep = price(
        "aten::_to_copy",
        [x, [], [], [], [], [], []],
        [F32, "", "", "", "", "Scalar", ""],
        ["", "", "", "", "", "False", ""],
    )
    assert _whole(keep) == (0, 128, "fp32", VECTOR)
    assert _whole(price("aten::contiguous", [[3, 5], []], [F16, ""])) == (0, 60, "fp16", VECTOR)
    assert _whole(price("aten::clone", [[3, 5], []], [I64, ""])) == (0, 240, "int64", VECTOR)
    # [4, 10, 3] fp32 along dim 1 with 5 indices: 5 slices of 4*3 elements = 240 bytes.
    mid = price("aten::index_select", [[4, 10, 3], [], [5]], [F32, "Scalar", I64], ["", "1", ""])
    assert _whole(mid) == (0, 240 + 40 + 240, "fp32", VECTOR)
    last = price("aten::index_select", [[4, 10, 3], [], [5]], [F32, "Scalar", I64], ["", "-1", ""])
    assert _whole(last) == (0, 800 + 40 + 800, "fp32", VECTOR)
    copy_ = price("aten::copy_", [[2, 3], [2, 3], []], [BF16, F32, "Scalar"], ["", "", "False"])
    assert _whole(copy_) == (0, 24 + 12, "bf16", VECTOR)


# --- element sizes: profiler type strings and c10::ScalarType codes ---------------------------

# Bytes per element of each profiler ``Input type`` string (C++ type sizes on LP64 Linux;
# Float4_e2m1fn_x2 packs two fp4 values in one byte).
TYPE_SIZES = [
    ("c10::BFloat16", "bf16", 2),
    ("c10::Half", "fp16", 2),
    ("float", "fp32", 4),
    ("double", "fp64", 8),
    ("c10::Float8_e4m3fn", "fp8", 1),
    ("c10::Float8_e5m2", "fp8", 1),
    ("c10::Float8_e4m3fnuz", "fp8", 1),
    ("c10::Float8_e5m2fnuz", "fp8", 1),
    ("c10::Float8_e8m0fnu", "fp8", 1),
    ("c10::Float4_e2m1fn_x2", "fp4", 1),
    ("long int", "int64", 8),
    ("long", "int64", 8),
    ("int", "int32", 4),
    ("short int", "int16", 2),
    ("short", "int16", 2),
    ("signed char", "int8", 1),
    ("unsigned char", "uint8", 1),
    ("bool", "bool", 1),
    ("short unsigned int", "uint16", 2),
    ("unsigned int", "uint32", 4),
    ("long unsigned int", "uint64", 8),
    ("c10::complex<c10::Half>", "complex32", 4),
    ("c10::complex<float>", "complex64", 8),
    ("c10::complex<double>", "complex128", 16),
]


@pytest.mark.parametrize(("type_name", "dtype", "size"), TYPE_SIZES)
def test_each_profiler_type_string_has_its_element_size(type_name, dtype, size):
    """catches: a profiler type string mapped to the wrong element size or dtype name (a clone of
    a [3, 5] tensor reads and writes 15 elements of it)."""
    assert _whole(price("aten::clone", [[3, 5], []], [type_name, ""])) == (0, 2 * 15 * size, dtype, VECTOR)


# c10/core/ScalarType.h enumeration order: Byte 0, Char 1, Short 2, Int 3, Long 4, Half 5, Float 6,
# Double 7, ComplexHalf 8, ComplexFloat 9, ComplexDouble 10, Bool 11, ..., BFloat16 15, ...,
# Float8_e5m2 23, Float8_e4m3fn 24, Float8_e5m2fnuz 25, Float8_e4m3fnuz 26, UInt16 27, UInt32 28,
# UInt64 29, ..., Float8_e8m0fnu 44, Float4_e2m1fn_x2 45.
SCALAR_TYPES = [
    (0, "uint8", 1),
    (1, "int8", 1),
    (2, "int16", 2),
    (3, "int32", 4),
    (4, "int64", 8),
    (5, "fp16", 2),
    (6, "fp32", 4),
    (7, "fp64", 8),
    (8, "complex32", 4),
    (9, "complex64", 8),
    (10, "complex128", 16),
    (11, "bool", 1),
    (15, "bf16", 2),
    (23, "fp8", 1),
    (24, "fp8", 1),
    (25, "fp8", 1),
    (26, "fp8", 1),
    (27, "uint16", 2),
    (28, "uint32", 4),
    (29, "uint64", 8),
    (44, "fp8", 1),
    (45, "fp4", 1),
]


@pytest.mark.parametrize(("code", "dtype", "size"), SCALAR_TYPES)
def test_each_scalar_type_code_has_its_element_size(code, dtype, size):
    """catches: a c10::ScalarType code (as Concrete Inputs write a dtype argument) mapped to the
    wrong dtype or size: a cast of 15 fp32 elements reads 60 bytes and writes 15 at the target size."""
    cast = price(
        "aten::_to_copy",
        [[3, 5], [], [], [], [], [], []],
        [F32, "ScalarType", "", "", "", "Scalar", ""],
        ["", str(code), "", "", "", "False", ""],
    )
    assert _whole(cast) == (0, 60 + 15 * size, dtype, VECTOR)


@pytest.mark.parametrize("code", ["12", "16", "46", "bf16"])
def test_unknown_scalar_type_codes_are_unpriced(code):
    """catches: a quantised / unknown ScalarType code or a non-number given some element size."""
    cast = price(
        "aten::_to_copy",
        [[3, 5], [], [], [], [], [], []],
        [F32, "ScalarType", "", "", "", "Scalar", ""],
        ["", code, "", "", "", "False", ""],
    )
    assert isinstance(cast, NoCost) and "dtype code" in cast.reason


# --- GEMMs ---------------------------------------------------------------------------------------


def test_gemm_family_whole_cost_and_refusals():
    """catches: _scaled_mm's bias and result scale not read or its output dtype code ignored, a bmm
    whose batch sizes differ priced, matmul of a 0-d operand priced, mm of non-2-D operands priced,
    and gemm_cost's bias read of n elements."""
    from tracekit.analysis.pricing.matrix_ops import gemm_cost

    # fp8 [16, 32] @ [32, 8], per-row scale_a [16, 1], scale_b [1, 8] fp32, bf16 bias [8], fp32 out.
    scaled = price(
        "aten::_scaled_mm",
        [[16, 32], [32, 8], [16, 1], [1, 8], [8], [], [], []],
        [FP8, FP8, F32, F32, BF16, "", "ScalarType", "Scalar"],
        ["", "", "", "", "", "", "6", "False"],
    )
    assert _whole(scaled) == (2 * 16 * 8 * 32, 512 + 256 + 64 + 32 + 16 + 16 * 8 * 4, "fp8", MATRIX)
    default_out = price(
        "aten::_scaled_mm",
        [[16, 32], [32, 8], [], [], [], [], [], []],
        [FP8, FP8, F32, F32, "", "", "", "Scalar"],
        ["", "", "", "", "", "", "", "False"],
    )
    assert _whole(default_out) == (2 * 16 * 8 * 32, 512 + 256 + 4 + 4 + 128, "fp8", MATRIX)  # out at 1 byte
    assert isinstance(price("aten::bmm", [[2, 3, 4], [3, 4, 5]], [F32, F32]), NoCost)
    assert isinstance(price("aten::matmul", [[], [4, 5]], [F32, F32]), NoCost)
    assert isinstance(price("aten::mm", [[2, 3, 4], [4, 5]], [F32, F32]), NoCost)
    assert gemm_cost(3, 5, 7, 2, batch=4, bias=True) == (2 * 4 * 3 * 5 * 7, 2 * (4 * (21 + 35 + 15) + 5))
    # linear with a bias, input [2, 3, 4] -> M = 6; bf16.
    lin = price("aten::linear", [[2, 3, 4], [5, 4], [5]], [BF16, BF16, BF16])
    assert _whole(lin) == (2 * 6 * 5 * 4, 2 * (24 + 20 + 5 + 30), "bf16", MATRIX)
    mv = price("aten::mv", [[6, 4], [4]], [F16, F16])
    assert _whole(mv) == (2 * 6 * 4, 2 * (24 + 4 + 6), "fp16", MATRIX)


def test_attention_cost_formula_edges():
    """catches: bottom-right causal rows before the diagonal (len_q > len_k) counted as seeing keys
    (or the triangle of the rest miscounted for an odd key count),
    top-left rows past len_k not seeing all len_k keys, and an unknown align accepted."""
    from tracekit.analysis.pricing.matrix_ops import attention_cost

    # Lq 6 > Lk 4, D = Dv = 1: flops = 4 * pairs.
    # bottom-right: query i sees keys up to 4 - 6 + i -> rows 0, 1 see none, rows 2..5 see 1..4 = 10.
    assert attention_cost(1, 1, 1, 6, 4, 1, 2, causal=True, align="bottom_right").flops == 4 * 10
    # An odd key count, Lq 6 > Lk 3: rows 0..2 see none, rows 3..5 see 1, 2, 3 keys = 6.
    assert attention_cost(1, 1, 1, 6, 3, 1, 2, causal=True, align="bottom_right").flops == 4 * 6
    # top-left: rows 0..3 see 1..4 keys, rows 4, 5 see all 4 -> 10 + 8 = 18.
    assert attention_cost(1, 1, 1, 6, 4, 1, 2, causal=True, align="top_left").flops == 4 * 18
    # GQA bytes: B=2, Hq=4, Hkv=1, Lq=3, Lk=5, D=8, Dv=4 at 2 bytes:
    # q 2*4*3*8 + out 2*4*3*4 + k 2*1*5*8 + v 2*1*5*4 = 192 + 96 + 80 + 40 = 408 elements.
    assert attention_cost(2, 4, 1, 3, 5, 8, 2, causal=False, head_dim_v=4) == (2 * 2 * 4 * 15 * 12, 2 * 408)
    with pytest.raises(ValueError):
        attention_cost(1, 1, 1, 2, 2, 1, 2, causal=True, align="diagonal")


def test_recorded_argument_forms():
    """catches: an is_causal flag recorded as "1"/"0" not read as a bool, a dim recorded as a bare
    int (not a list) misread, a shape that is not a list of ints priced, and index arguments past
    the recorded types treated as tensors."""
    dims = [[1, 2, 4, 8]] * 3 + [[], [], [], []]
    types = [F32] * 3 + ["", "", "Scalar", "Scalar"]
    causal = price("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "1", ""])
    full = price("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "0", ""])
    assert (causal.flops, full.flops) == (2 * 2 * 10 * 16, 2 * 2 * 16 * 16)
    bad = price("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "yes", ""])
    assert isinstance(bad, NoCost) and "is_causal" in bad.reason
    # mean over dim 1 of [4, 6] recorded as the int 1 (not "[1]"), keepdim.
    mean = price("aten::mean", [[4, 6], [], [], []], [F32, "Scalar", "Scalar", ""], ["", 1, "True", ""])
    assert _whole(mean) == (24, 96 + 16, "fp32", VECTOR)
    assert isinstance(price("aten::mm", [[2, "3"], [3, 4]], [F32, F32]), NoCost)
    assert isinstance(price("aten::mm", [[2, 3], 3], [F32, F32]), NoCost)
    # Dims recorded for an argument whose type is missing: not a tensor, so mm lacks its operand.
    assert isinstance(price("aten::mm", [[2, 3], [3, 4]], [F32]), NoCost)
    # An add whose alpha sits past the recorded Concrete Inputs (a short list): a plain add.
    assert _whole(price("aten::add", [[4], [4]], [F32, F32], ["", ""])) == (4, 48, "fp32", VECTOR)
    assert _whole(price("aten::add", [[4], [4]], [F32, F32], [""])) == (4, 48, "fp32", VECTOR)
    short = price(
        "aten::_efficient_attention_forward", [[1, 4, 2, 8]] * 3 + [[]] * 9, [BF16] * 3 + [""] * 9, ["", "", ""]
    )
    assert isinstance(short, NoCost) and "custom_mask_type" in short.reason


def test_arguments_past_a_short_record_are_absent():
    """catches: an argument index past the end of a short Input Dims or Input type list (a record
    that stops early) read anyway, turning an optional argument that is simply not recorded into a
    crash-and-refuse instead of an absent tensor."""
    fp8_gemm = (2 * 16 * 8 * 32, 512 + 256 + 128, "fp8", MATRIX)  # fp8 A, B, output; no scales known
    short_dims = price("aten::_scaled_mm", [[16, 32], [32, 8]], [FP8, FP8, F32, F32, "", "", "ScalarType", "Scalar"])
    assert _whole(short_dims) == fp8_gemm
    short_types = price("aten::_scaled_mm", [[16, 32], [32, 8], [], [], [], [], [], []], [FP8, FP8])
    assert _whole(short_types) == fp8_gemm


# --- seed 32


def test_rotary_embedding_without_a_recorded_cache_turns_every_element():
    """catches: partial rotary's rot/head_size scaling applied when the cos/sin cache's shape is
    not recorded (rot unknown, 0: ``head_size or rot``), pricing the rotation at 0 flops."""
    # 10 tokens, q 640 and k 160 bf16 elements, head_size 16, the cache argument without a shape:
    # every element of q and k turns (3 flops each); q and k read and written, positions read.
    cost = price(
        "_C::rotary_embedding",
        [[10], [10, 64], [10, 16], [], [], []],
        [I64, BF16, BF16, "Scalar", "", "Scalar"],
        ["", "", "", "16", "", "True"],
    )
    assert _whole(cost) == (3 * 800, 2 * 1600 + 10 * 8, "bf16", VECTOR)


# --- seed 47 ---------------------------------------------------------------------------------------


def test_a_matmul_with_a_0d_operand_on_either_side_is_unpriced_with_its_reason():
    """catches: the 0-d check needing both operands 0-d (``or`` read as ``and``): a scalar times a
    vector would then be read as a matrix product of made-up shape. Either side 0-d: no cost, and
    the reason says so."""
    from tracekit.analysis.pricing.op_costs import price

    for dims in ([[], [5]], [[5], []], [[], []]):
        got = price("aten::matmul", dims, ["float", "float"], None)
        assert got.reason == "aten::matmul: 0-d operands", dims
