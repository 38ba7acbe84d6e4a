"""Cost models of serving engines' vector-unit custom ops, from their recorded ``Args``: fused
RMSNorms (plain, with the residual add, with a quantised output), gated activations
(SiLU/GELU-and-mul), rotary embedding, activation quantisation and KV-cache writes, for vLLM
(``_C::``, ``_C_cache_ops::``), SGLang (``sgl_kernel::``, ``sglang::``), AITER (``aiter::``),
FlashInfer (``flashinfer::``) and TensorRT-LLM (``trtllm::``).

Each op's argument order is its registered schema, cited beside its entry in ``VECTOR_ENGINE_MODELS``.
Conventions are ``op_costs``': bytes = every tensor read once + every output written once, at its own
element size; FLOPs per element as ``vector_ops`` counts them (transcendentals count 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracekit.analysis.pricing.op_args import Args, OpCost, Tensor, Unpriced
from tracekit.analysis.pricing.vector_ops import AFFINE_FLOPS, ELEMENTWISE_FLOPS, RMS_NORM_FLOPS, vector_cost

QUANT_FLOPS = 2  # per element: scale, round (the quantisation ops' count)

# ---------------------------------------------------------------- norms


@dataclass(frozen=True)
class Norm:
    """Where an RMSNorm op keeps each tensor (argument indices; None: not an argument of it).

    ``x`` is read; the normalised result goes to ``out``, or (``out`` None) back into ``x`` or a
    returned tensor of ``x``'s shape and dtype: written once either way. A fused residual add reads
    ``residual`` and writes the sum to ``residual_out``, or back into ``residual`` (``residual_out``
    None: in place). ``scale`` is a quantisation scale the op writes (dynamic quantisation); a
    static per-tensor scale the op only reads is not listed (4 bytes). ``smooth`` is a
    per-channel smoothing scale read and multiplied in (SmoothQuant); ``gemma`` multiplies by
    ``1 + weight``."""

    x: int
    weight: int | None
    out: int | None = None
    residual: int | None = None
    residual_out: int | None = None
    scale: int | None = None
    smooth: int | None = None
    extra_out: int | None = None  # a second copy of the result written before quantisation
    gemma: bool = False


def norm_cost(spec: Norm, args: Args) -> OpCost:
    """The cost of one call of an RMSNorm op laid out as ``spec`` says."""
    x = args.tensor(spec.x)
    if not x.shape:
        raise Unpriced(f"{args.op}: the normalised input has no shape")
    weight = args.maybe_tensor(spec.weight) if spec.weight is not None else None
    out = args.maybe_tensor(spec.out) if spec.out is not None else None
    residual = args.maybe_tensor(spec.residual) if spec.residual is not None else None
    residual_out = args.maybe_tensor(spec.residual_out) if spec.residual_out is not None else None
    if spec.residual_out is not None and residual is not None and residual_out is None:
        raise Unpriced(f"{args.op}: the residual's output (argument {spec.residual_out}) is not recorded")
    scale = args.maybe_tensor(spec.scale) if spec.scale is not None else None
    smooth = args.maybe_tensor(spec.smooth) if spec.smooth is not None else None
    extra = args.maybe_tensor(spec.extra_out) if spec.extra_out is not None else None
    for t, what in ((out, "output"), (residual, "residual"), (residual_out, "residual output")):
        if t is not None and t.numel != x.numel:
            raise Unpriced(f"{args.op}: its {what} {list(t.shape)} is not the input's {list(x.shape)}")
    # The weight's multiply is counted whether or not a weight is passed (vLLM's Tensor? weight),
    # as the vLLM norms always were; the residual add, Gemma's 1 + w and SmoothQuant's multiply add one each.
    per = RMS_NORM_FLOPS + AFFINE_FLOPS + (residual is not None) + spec.gemma + (smooth is not None)
    read = x.nbytes + sum(t.nbytes for t in (residual, weight, smooth) if t is not None)
    written = out.nbytes if out is not None else x.nbytes
    written += (residual_out or residual).nbytes if residual is not None else 0
    written += sum(t.nbytes for t in (scale, extra) if t is not None)
    parts = ["input"] + ["residual"] * (residual is not None) + ["weight"] * (weight is not None)
    outs = ["output"] + ["residual sum"] * (residual is not None) + ["scales"] * (scale is not None)
    rows = x.numel // x.shape[-1]
    note = (
        f"{per} flops/element over {rows} rows of {x.shape[-1]}; bytes = {' + '.join(parts)} read, "
        f"{' + '.join(outs)} written"
    )
    return vector_cost(per * x.numel, read, written, x.dtype, note)


def _norm(spec: Norm) -> Callable[[Args], OpCost]:
    return lambda args: norm_cost(spec, args)


# Argument layouts, from the schemas cited in NORM_OPS.
_OUT_X_W = Norm(x=1, weight=2, out=0)  # (out, input, weight, eps, ...)
_X_W = Norm(x=0, weight=1)  # (input, weight, eps, ...) -> out
_INPLACE_ADD = Norm(x=0, weight=2, residual=1)  # (input!, residual!, weight, eps, ...)
# (out, input, residual_in, residual_out, weight, eps)
_ADD_OUT = Norm(x=1, weight=4, out=0, residual=2, residual_out=3)

NORM_OPS: dict[str, Norm] = {
    # vLLM csrc/torch_bindings.cpp: rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon);
    # fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, float epsilon): residual +=
    # input, input = rms_norm(residual) * weight; rms_norm_static_fp8_quant(result, input, weight, Tensor
    # scale, eps); fused_add_rms_norm_static_fp8_quant(result, input, Tensor! residual, weight, scale, eps);
    # rms_norm_dynamic_per_token_quant / rms_norm_per_block_quant(result, input, weight, Tensor! scale,
    # eps, Tensor? scale_ub, Tensor!? residual, ...).
    "_C::rms_norm": _OUT_X_W,
    "_C::fused_add_rms_norm": _INPLACE_ADD,
    "_C::rms_norm_static_fp8_quant": _OUT_X_W,
    "_C::fused_add_rms_norm_static_fp8_quant": Norm(x=1, weight=3, out=0, residual=2),
    "_C::rms_norm_dynamic_per_token_quant": Norm(x=1, weight=2, out=0, scale=3, residual=6),
    "_C::rms_norm_per_block_quant": Norm(x=1, weight=2, out=0, scale=3, residual=6),
    # SGLang sgl-kernel/csrc/common_extension.cc: rmsnorm(Tensor! output, Tensor input, Tensor weight,
    # float eps, ...); fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, ...);
    # gemma_rmsnorm / gemma_fused_add_rmsnorm the same with weight + 1.
    "sgl_kernel::rmsnorm": _OUT_X_W,
    "sgl_kernel::fused_add_rmsnorm": _INPLACE_ADD,
    "sgl_kernel::gemma_rmsnorm": Norm(x=1, weight=2, out=0, gemma=True),
    "sgl_kernel::gemma_fused_add_rmsnorm": Norm(x=0, weight=2, residual=1, gemma=True),
    # FlashInfer flashinfer/norm.py (register_custom_op): rmsnorm(out, input, weight, eps, enable_pdl);
    # fused_add_rmsnorm(input, residual, weight, eps, enable_pdl) ("residual[i] += input[i]; input[i] =
    # (residual[i] / RMS(residual)) * weight[i]"); rmsnorm_quant(out, input, weight, scale, eps, ...).
    "flashinfer::rmsnorm": _OUT_X_W,
    "flashinfer::fused_add_rmsnorm": _INPLACE_ADD,
    "flashinfer::gemma_rmsnorm": Norm(x=1, weight=2, out=0, gemma=True),
    "flashinfer::gemma_fused_add_rmsnorm": Norm(x=0, weight=2, residual=1, gemma=True),
    "flashinfer::rmsnorm_quant": _OUT_X_W,
    # TensorRT-LLM tensorrt_llm/_torch/custom_ops/flashinfer_custom_ops.py: flashinfer_rmsnorm(input,
    # weight, eps) -> Tensor; flashinfer_fused_add_rmsnorm(input, residual, weight, eps) in place;
    # flashinfer_fused_add_rmsnorm_quant(out, input, residual, weight, scale, eps).
    "trtllm::flashinfer_rmsnorm": _X_W,
    "trtllm::flashinfer_gemma_rmsnorm": Norm(x=0, weight=1, gemma=True),
    "trtllm::flashinfer_fused_add_rmsnorm": _INPLACE_ADD,
    "trtllm::flashinfer_gemma_fused_add_rmsnorm": Norm(x=0, weight=2, residual=1, gemma=True),
    "trtllm::flashinfer_fused_add_rmsnorm_quant": Norm(x=1, weight=3, out=0, residual=2),
    # AITER aiter/ops/rmsnorm.py: rmsnorm / rms_norm_cu(out, input, weight, epsilon); rms_norm /
    # rmsnorm2d_fwd_ck(input, weight, epsilon, ...) -> Tensor; fused_add_rms_norm_cu(input, residual_in,
    # weight, epsilon) in place; add_rmsnorm / rmsnorm2d_fwd_with_add_ck(out, input, residual_in,
    # residual_out, weight, epsilon): residual_out = input + residual_in, out = rmsnorm(residual_out) *
    # weight, four activation tensors; rmsnorm_quant / rmsnorm2d_fwd_with_dynamicquant_ck(out, input,
    # yscale, weight, eps, ...); add_rmsnorm_quant / rmsnorm2d_fwd_with_add_dynamicquant_ck(out, input,
    # residual_in, residual_out, yscale, weight, eps, ...); rmsnorm2d_fwd_with_smoothquant(out, input,
    # xscale, yscale, weight, eps); rmsnorm2d_fwd_with_add_smoothquant(out, input, residual_in,
    # residual_out, xscale, yscale, weight, eps, Tensor? out_before_quant).
    "aiter::rmsnorm": _OUT_X_W,
    "aiter::rms_norm_cu": _OUT_X_W,
    "aiter::rms_norm": _X_W,
    "aiter::rmsnorm2d_fwd_ck": _X_W,
    "aiter::fused_add_rms_norm_cu": _INPLACE_ADD,
    "aiter::add_rmsnorm": _ADD_OUT,
    "aiter::rmsnorm2d_fwd_with_add_ck": _ADD_OUT,
    "aiter::rmsnorm_quant": Norm(x=1, weight=3, out=0, scale=2),
    "aiter::rmsnorm2d_fwd_with_dynamicquant_ck": Norm(x=1, weight=3, out=0, scale=2),
    "aiter::add_rmsnorm_quant": Norm(x=1, weight=5, out=0, residual=2, residual_out=3, scale=4),
    "aiter::rmsnorm2d_fwd_with_add_dynamicquant_ck": Norm(x=1, weight=5, out=0, residual=2, residual_out=3, scale=4),
    "aiter::rmsnorm2d_fwd_with_smoothquant": Norm(x=1, weight=4, out=0, smooth=2, scale=3),
    "aiter::rmsnorm2d_fwd_with_add_smoothquant": Norm(
        x=1, weight=6, out=0, residual=2, residual_out=3, smooth=4, scale=5, extra_out=8
    ),
}

# ---------------------------------------------------------------- activations

SILU_FLOPS = ELEMENTWISE_FLOPS["aten::silu"]  # x * sigmoid(x): exp, add, divide, multiply
GELU_FLOPS = ELEMENTWISE_FLOPS["aten::gelu"]  # erf form: divide, erf, add, 2 multiplies
# tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): x^3 2, * 0.044715 1, + x 1,
# * sqrt(2/pi) 1, tanh 1, + 1 1, * x 1, * 0.5 1.
GELU_TANH_FLOPS = 9
GELU_QUICK_FLOPS = 5  # x * sigmoid(1.702 x): multiply, sigmoid 3, multiply
FATRELU_FLOPS = 1  # x > threshold ? x : 0
# gpt-oss SwiGLU (vLLM csrc/activation_kernels.cu swigluoai_and_mul): gate = min(gate, limit) 1,
# up = clamp(up, -limit, limit) 2, gate * sigmoid(alpha * gate) 1 + 3 + 1, (up + 1) 1.
SWIGLU_OAI_FLOPS = 9


@dataclass(frozen=True)
class Act:
    """An activation op: ``x`` read, ``out`` written (None: a returned tensor in ``x``'s dtype).
    ``gated``: ``x`` is [..., 2d] (gate and up halves) and the output [..., d], one multiply more
    per output element. ``scales``: per-block scales the op writes with a quantised output."""

    x: int
    out: int | None
    flops: int
    gated: bool = True
    scales: int | None = None


def act_cost(spec: Act, args: Args) -> OpCost:
    """The cost of one call of an activation op laid out as ``spec`` says."""
    x = args.tensor(spec.x)
    if not x.shape:
        raise Unpriced(f"{args.op}: its input has no shape")
    if spec.gated and x.shape[-1] % 2:
        raise Unpriced(f"{args.op}: a gated input's last dim {x.shape[-1]} is not even")
    numel = x.numel // 2 if spec.gated else x.numel
    out = args.maybe_tensor(spec.out) if spec.out is not None else None
    if out is not None and out.numel != numel:
        raise Unpriced(f"{args.op}: output {list(out.shape)} does not fit input {list(x.shape)}")
    written = out.nbytes if out is not None else numel * x.size
    scales = args.maybe_tensor(spec.scales) if spec.scales is not None else None
    written += scales.nbytes if scales is not None else 0
    per = spec.flops + spec.gated
    what = "input [..., 2d] read, output [..., d] written" if spec.gated else "input read, output written"
    return vector_cost(
        per * numel, x.nbytes, written, x.dtype, f"{per} flops/output element over {numel}; bytes = {what}"
    )


def _act(spec: Act) -> Callable[[Args], OpCost]:
    return lambda args: act_cost(spec, args)


ACT_OPS: dict[str, Act] = {
    # vLLM csrc/torch_bindings.cpp: silu_and_mul / mul_and_silu / gelu_and_mul / gelu_tanh_and_mul(Tensor!
    # out, Tensor input) ("input: [..., 2 * d] -> output: [..., d]"); fatrelu_and_mul(out, input, float
    # threshold); swigluoai_and_mul(out, input, alpha, limit); gelu_new / gelu_fast / gelu_quick(out,
    # input); silu_and_mul_quant(Tensor! result, Tensor input, Tensor scale) (fp8 out, static scale);
    # silu_and_mul_per_block_quant(Tensor! out, Tensor input, Tensor! scales, int group_size, ...).
    "_C::silu_and_mul": Act(1, 0, SILU_FLOPS),
    "_C::mul_and_silu": Act(1, 0, SILU_FLOPS),
    "_C::gelu_and_mul": Act(1, 0, GELU_FLOPS),
    "_C::gelu_tanh_and_mul": Act(1, 0, GELU_TANH_FLOPS),
    "_C::fatrelu_and_mul": Act(1, 0, FATRELU_FLOPS),
    "_C::swigluoai_and_mul": Act(1, 0, SWIGLU_OAI_FLOPS),
    "_C::gelu_new": Act(1, 0, GELU_TANH_FLOPS, gated=False),
    "_C::gelu_fast": Act(1, 0, GELU_TANH_FLOPS, gated=False),
    "_C::gelu_quick": Act(1, 0, GELU_QUICK_FLOPS, gated=False),
    "_C::silu_and_mul_quant": Act(1, 0, SILU_FLOPS),
    "_C::silu_and_mul_per_block_quant": Act(1, 0, SILU_FLOPS, scales=2),
    # SGLang sgl-kernel/csrc/common_extension.cc: silu_and_mul / gelu_tanh_and_mul / gelu_and_mul(Tensor!
    # out, Tensor input, ...).
    "sgl_kernel::silu_and_mul": Act(1, 0, SILU_FLOPS),
    "sgl_kernel::gelu_and_mul": Act(1, 0, GELU_FLOPS),
    "sgl_kernel::gelu_tanh_and_mul": Act(1, 0, GELU_TANH_FLOPS),
    # FlashInfer flashinfer/activation.py: flashinfer::{silu,gelu,gelu_tanh}_and_mul(out, input, enable_pdl).
    "flashinfer::silu_and_mul": Act(1, 0, SILU_FLOPS),
    "flashinfer::gelu_and_mul": Act(1, 0, GELU_FLOPS),
    "flashinfer::gelu_tanh_and_mul": Act(1, 0, GELU_TANH_FLOPS),
    # AITER aiter/ops/activation.py: silu_and_mul / gelu_and_mul / gelu_tanh_and_mul(out, input);
    # scaled_silu_and_mul(out, input, scale) (quantised out, static scale).
    "aiter::silu_and_mul": Act(1, 0, SILU_FLOPS),
    "aiter::gelu_and_mul": Act(1, 0, GELU_FLOPS),
    "aiter::gelu_tanh_and_mul": Act(1, 0, GELU_TANH_FLOPS),
    "aiter::scaled_silu_and_mul": Act(1, 0, SILU_FLOPS),
    # TensorRT-LLM flashinfer_custom_ops.py: flashinfer_silu_and_mul(x) -> Tensor (x.chunk(2, -1) halves).
    "trtllm::flashinfer_silu_and_mul": Act(0, None, SILU_FLOPS),
}

# ---------------------------------------------------------------- rotary embedding


def _rope_pos_ids(args: Args) -> OpCost:
    """SGLang/FlashInfer ``apply_rope_pos_ids_cos_sin_cache(q, k, q_rope!, k_rope!, cos_sin_cache,
    pos_ids, interleave, enable_pdl, [v, k_buffer!, v_buffer!, kv_cache_loc])`` (sgl-kernel
    common_extension.cc; flashinfer/rope.py): q and k rotated out of place into q_rope and k_rope,
    one cos/sin row per position; with ``v`` and ``k_buffer`` given the rotated key and the value are
    also stored into the KV cache at ``kv_cache_loc`` (SGLang's fused RoPE + KV write)."""
    q, k, cache, pos = args.tensor(0), args.tensor(1), args.tensor(4), args.tensor(5)
    q_out, k_out = args.maybe_tensor(2), args.maybe_tensor(3)
    if not q.shape or not cache.shape:
        raise Unpriced(f"{args.op}: query or cos/sin cache without a shape")
    rot, head = cache.shape[-1], q.shape[-1]
    rotated = (q.numel + k.numel) * min(rot, head) // head if head else 0
    table = pos.numel * rot * cache.size
    read = q.nbytes + k.nbytes + table + pos.nbytes
    written = (q_out.nbytes if q_out is not None else q.nbytes) + (k_out.nbytes if k_out is not None else k.nbytes)
    v, k_buf, loc = args.maybe_tensor(8), args.maybe_tensor(9), args.maybe_tensor(11)
    stored = ""
    if v is not None and k_buf is not None:
        read += v.nbytes + (loc.nbytes if loc is not None else 0)
        written += (k.numel + v.numel) * k_buf.size
        stored = " + key and value stored into the KV cache"
    return vector_cost(
        3 * rotated,
        read,
        written,
        q.dtype,
        f"3 flops per rotated element ({rotated}); bytes = query and key read and written + cos/sin rows{stored}",
    )


def _rotary(args: Args) -> OpCost:
    """vLLM/SGLang ``rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)``
    (vLLM csrc/torch_bindings.cpp): query and key rotated in place, one cos/sin row read per token."""
    positions, q, k = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    cache = args.maybe_tensor(4)
    rot = cache.shape[-1] if cache is not None and cache.shape else 0
    head = args.int_list(3)
    head_size = head[0] if head else None
    rotated = q.numel + (k.numel if k is not None else 0)
    if head_size and rot and rot < head_size:
        rotated = rotated * rot // head_size  # partial rotary: only the first rot dims turn
    table = positions.numel * rot * (cache.size if cache is not None else 0)
    moved = q.nbytes + (k.nbytes if k is not None else 0)
    return vector_cost(
        3 * rotated,
        moved + table + positions.nbytes,
        moved,
        q.dtype,
        f"3 flops per rotated element ({rotated}); bytes = query and key read and written + cos/sin rows",
    )


# ---------------------------------------------------------------- quantisation


def _quant_out_first(args: Args) -> OpCost:
    """Activation quantisation ``(out, input, scale, ...)`` (vLLM static/dynamic fp8 quant; AITER
    aiter/ops/quant.py static_per_tensor_quant, dynamic_per_tensor_quant, dynamic_per_token_scaled_quant
    (out, input, scales, ...)): input read, low-precision output and every other tensor written."""
    return _quant(args, args.tensor(1), args.tensor(0), [i for i in range(2, len(args))])


def _quant_in_first(args: Args) -> OpCost:
    """Group/token quantisation ``(input, output_q, output_s, ...)`` (vLLM per_token_group_fp8_quant,
    SGLang sgl_per_token_group_quant_8bit / sgl_per_tensor_quant_fp8 / sgl_per_token_quant_fp8(Tensor
    input, Tensor! output_q, Tensor! output_s, ...)): input read, output and scales written."""
    return _quant(args, args.tensor(0), args.tensor(1), [i for i in range(2, len(args))])


def _quant(args: Args, x: Tensor, out: Tensor, rest: list[int]) -> OpCost:
    scales = sum(t.nbytes for t in (args.maybe_tensor(i) for i in rest) if t is not None)
    return vector_cost(
        QUANT_FLOPS * x.numel,
        x.nbytes,
        out.nbytes + scales,
        x.dtype,
        f"{QUANT_FLOPS} flops/element (scale, round) over {x.numel}; bytes = input read + output and scales written",
    )


# ---------------------------------------------------------------- KV-cache writes


def _reshape_and_cache(args: Args) -> OpCost:
    """``(key, value, key_cache, value_cache, slot_mapping, ...)``: the step's new keys and values
    read, written into the cache at its element size (vLLM csrc/torch_bindings.cpp
    reshape_and_cache[_flash]; AITER aiter/ops/cache.py reshape_and_cache[_flash]; SGLang
    python/sglang/jit_kernel/kvcache.py store_cache(k, v, k_cache, v_cache, indices, ...):
    k_cache[indices] = k, v_cache[indices] = v)."""
    key, value, key_cache = args.tensor(0), args.tensor(1), args.tensor(2)
    slots = args.maybe_tensor(4)
    written = (key.numel + value.numel) * key_cache.size
    return vector_cost(
        0,
        key.nbytes + value.nbytes + (slots.nbytes if slots is not None else 0),
        written,
        key.dtype,
        f"{key.numel + value.numel} new key/value elements written at {key_cache.size} "
        "byte(s) each (the cache's dtype)",
    )


def _concat_and_cache_mla(args: Args) -> OpCost:
    """vLLM ``concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)``
    (csrc/torch_bindings.cpp): the latent kv_c [T, L] and rotary key k_pe [T, R] of the new tokens
    written side by side into the MLA cache at its element size."""
    kv_c, k_pe, cache = args.tensor(0), args.tensor(1), args.tensor(2)
    slots = args.maybe_tensor(3)
    n = kv_c.numel + k_pe.numel
    return vector_cost(
        0,
        kv_c.nbytes + k_pe.nbytes + (slots.nbytes if slots is not None else 0),
        n * cache.size,
        kv_c.dtype,
        f"{n} latent and rotary key elements written at {cache.size} byte(s) each",
    )


VECTOR_ENGINE_MODELS: dict[str, Callable[[Args], OpCost]] = {
    **{name: _norm(spec) for name, spec in NORM_OPS.items()},
    **{name: _act(spec) for name, spec in ACT_OPS.items()},
    "_C::rotary_embedding": _rotary,
    "sgl_kernel::rotary_embedding": _rotary,
    "sgl_kernel::apply_rope_pos_ids_cos_sin_cache": _rope_pos_ids,
    "flashinfer::apply_rope_pos_ids_cos_sin_cache": _rope_pos_ids,
    **{
        name: _quant_out_first
        for name in (
            "_C::static_scaled_fp8_quant",
            "_C::dynamic_scaled_fp8_quant",
            "_C::dynamic_per_token_scaled_fp8_quant",
            "_C::scaled_fp4_quant",
            "aiter::static_per_tensor_quant",
            "aiter::dynamic_per_tensor_quant",
            "aiter::dynamic_per_token_scaled_quant",
        )
    },
    **{
        name: _quant_in_first
        for name in (
            "_C::per_token_group_fp8_quant",
            "sgl_kernel::sgl_per_token_group_quant_fp8",
            "sgl_kernel::sgl_per_token_group_quant_int8",
            "sgl_kernel::sgl_per_token_group_quant_8bit",
            "sgl_kernel::sgl_per_tensor_quant_fp8",
            "sgl_kernel::sgl_per_token_quant_fp8",
        )
    },
    **{
        name: _reshape_and_cache
        for name in (
            "_C_cache_ops::reshape_and_cache_flash",
            "_C_cache_ops::reshape_and_cache",
            "aiter::reshape_and_cache",
            "aiter::reshape_and_cache_flash",
            "sglang::store_cache",
        )
    },
    "_C_cache_ops::concat_and_cache_mla": _concat_and_cache_mla,
}
