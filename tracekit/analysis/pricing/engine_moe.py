"""Cost models of serving engines' mixture-of-experts ops from their recorded ``Args``: routing
(softmax/sigmoid top-k over the router logits), the routed experts' grouped GEMMs (a whole fused
MoE, or one launch of the gate-up or down GEMM) and the weighted sum of the top-k outputs.

The expert GEMMs' FLOPs are their shapes': 2 x (tokens x top-k) x N x K per GEMM. The weights
they read are those of the distinct experts the tokens touched, which the shapes do not say: the
expected count under uniform routing, E x (1 - (1 - k/E)^T) (``models.config.expected_experts``),
as the model path prices them; the note says so.
"""

from __future__ import annotations

from collections.abc import Callable

from tracekit.analysis.pricing.op_args import MATRIX, Args, OpCost, Tensor, Unpriced
from tracekit.analysis.pricing.vector_ops import SOFTMAX_FLOPS, vector_cost
from tracekit.models.config import expected_experts

SIGMOID_FLOPS = 3  # exp, add, divide (vector_ops' aten::sigmoid)
_INTEGER = {"int32", "int64", "int16", "uint8", "int8", "uint16", "uint32", "uint64"}


def _topk(gating_at: int, per_logit: int) -> Callable[[Args], OpCost]:
    """Routing ``(topk_weights!, topk_indices!, [token_expert_indices!], gating_output, ...)``:
    each token's E logits read, scored (``per_logit`` flops each), and its top-k chosen by k passes
    over the E scores (the kernels' loop: vLLM csrc/moe/topk_softmax_kernels.cu), weights and
    indices (and the token-expert index) written."""

    def model(args: Args) -> OpCost:
        gating, weights = args.tensor(gating_at), args.tensor(0)
        if len(gating.shape) < 2 or not weights.shape:
            raise Unpriced(f"{args.op}: router logits {list(gating.shape)} are not [tokens, experts]")
        experts, k = gating.shape[-1], weights.shape[-1]
        tokens = gating.numel // experts
        written = sum(t.nbytes for t in (args.maybe_tensor(i) for i in range(gating_at)) if t is not None)
        per = per_logit + k
        return vector_cost(
            per * gating.numel,
            gating.nbytes,
            written,
            gating.dtype,
            f"{per} flops per logit ({per_logit} scoring + {k} top-k passes) over {tokens} tokens x "
            f"{experts} experts; bytes = logits read + top-{k} weights and indices written",
        )

    return model


def _moe_sum(scale: bool) -> Callable[[Args], OpCost]:
    """``moe_sum(input [T, k, H], output! [T, H])`` (vLLM csrc/moe/torch_bindings.cpp) and SGLang
    ``moe_sum_reduce(input, output, routed_scaling_factor)`` (sgl-kernel common_extension.cc): each
    token's k expert outputs summed (k - 1 adds; k with the scaling multiply)."""

    def model(args: Args) -> OpCost:
        x, out = args.tensor(0), args.tensor(1)
        if len(x.shape) < 3 or out.numel * x.shape[-2] != x.numel:
            raise Unpriced(
                f"{args.op}: input {list(x.shape)} is not [tokens, top-k, hidden] of output {list(out.shape)}"
            )
        k = x.shape[-2]
        per = k if scale else k - 1
        return vector_cost(
            per * out.numel,
            x.nbytes,
            out.nbytes,
            x.dtype,
            f"{per} flops per output element over {out.numel} (top-{k} sum); bytes = input read + output written",
        )

    return model


def _packed(op: str, *weights: Tensor) -> None:
    """Integer weights wider than int8 (GPTQ/AWQ pack int4 into int32) or uint8 (packed int4/FP4)
    hold several values per element in a layout their schema does not state: unpriced."""
    for w in weights:
        if w.dtype == "uint8" or (w.dtype in _INTEGER and w.size > 1):
            raise Unpriced(
                f"{op}: expert weights of type {w.dtype} pack several values per element "
                "(their logical shape is not recorded)"
            )


def _per_element(w: Tensor) -> int:
    """Values per recorded element: 2 for FP4 (``Float4_e2m1fn_x2``), else 1."""
    return 2 if w.dtype == "fp4" else 1


def _fused_experts(args: Args) -> OpCost:
    """vLLM ``vllm::outplace_fused_experts`` / ``inplace_fused_experts`` and SGLang
    ``sglang::outplace_fused_experts`` / ``inplace_fused_experts`` (hidden_states [T, H], w1 [E, N1,
    H], w2 [E, H, I], topk_weights [T, k], topk_ids [T, k], ...) (vllm/model_executor/layers/
    fused_moe/fused_moe.py; sglang/srt/layers/moe/fused_moe_triton/fused_moe.py): every token
    through its k experts' gate-up GEMM (N1 = 2I gated), the activation and the down GEMM."""
    x, w1, w2, ids = args.tensor(0), args.tensor(1), args.tensor(2), args.tensor(4)
    if len(x.shape) != 2 or len(w1.shape) != 3 or len(w2.shape) != 3 or len(ids.shape) != 2:
        raise Unpriced(f"{args.op}: expected hidden [T, H], w1 [E, N, H], w2 [E, H, I], topk_ids [T, k]")
    _packed(args.op, w1, w2)
    tokens, hidden = x.shape
    experts, n1, _ = w1.shape
    inter = w2.shape[2] * _per_element(w2)
    rows = ids.numel
    flops = 2 * rows * (n1 * hidden + hidden * inter)
    touched = expected_experts(experts, ids.shape[1], tokens)
    weights = touched * (w1.nbytes + w2.nbytes) / experts
    topk = args.maybe_tensor(3)
    nbytes = weights + x.nbytes + tokens * hidden * x.size + ids.nbytes + (topk.nbytes if topk is not None else 0)
    dtype = w1.dtype if w1.dtype in ("fp8", "fp4", "int8") else x.dtype
    return OpCost(
        float(flops),
        float(nbytes),
        dtype,
        MATRIX,
        f"2 x T*k x (N1*H + H*I), T={tokens} k={ids.shape[1]} H={hidden} N1={n1} I={inter}; weights of "
        f"{touched:.1f} of {experts} experts touched (expected under uniform routing) + hidden in and out",
    )


def _grouped_gemm(args: Args) -> OpCost:
    """One launch of SGLang's (and vLLM's) Triton ``invoke_fused_moe_kernel(A, B, ..., C, ...,
    topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_padded, ...)``
    (sglang/srt/layers/moe/fused_moe_triton), recorded by TraceLens's kernel-shape profiler as
    sglang_profiler::fused_moe_triton_kernels_invoke_fused_moe_kernel_<n> with its tensor
    arguments: A [M, K] (the tokens, or their T*k gate-up outputs), B [E, N, K] the stacked expert
    weights; the argument order moved between versions, so topk_ids is the 2-D integer tensor and
    C the tensor of T*k x N elements. One GEMM of T*k rows: 2 x T*k x N x K."""
    a, b = args.tensor(0), args.tensor(1)
    if len(a.shape) != 2 or len(b.shape) != 3:
        raise Unpriced(f"{args.op}: expected A [M, K] and B [E, N, K], got {list(a.shape)} and {list(b.shape)}")
    _packed(args.op, b)
    tensors = [t for t in (args.maybe_tensor(i) for i in range(2, len(args))) if t is not None]
    ids = next((t for t in tensors if len(t.shape) == 2 and t.dtype in _INTEGER), None)
    if ids is None:
        raise Unpriced(f"{args.op}: no [tokens, top-k] expert ids among its recorded tensors")
    experts, n, k_dim = b.shape
    k_dim *= _per_element(b)
    rows = ids.numel
    c = next((t for t in tensors if t.numel == rows * n and t.dtype not in _INTEGER), None)
    written = c.nbytes if c is not None else rows * n * a.size
    touched = expected_experts(experts, ids.shape[1], ids.shape[0])
    nbytes = touched * b.nbytes / experts + a.nbytes + written + ids.nbytes
    dtype = b.dtype if b.dtype in ("fp8", "fp4", "int8") else a.dtype
    return OpCost(
        float(2 * rows * n * k_dim),
        float(nbytes),
        dtype,
        MATRIX,
        f"2 x T*k x N x K, T*k={rows} N={n} K={k_dim}; weights of {touched:.1f} of {experts} experts "
        "touched (expected under uniform routing) + A read + C written",
    )


MOE_MODELS: dict[str, Callable[[Args], OpCost]] = {
    # vLLM csrc/moe/torch_bindings.cpp: topk_softmax / topk_sigmoid(Tensor! topk_weights, Tensor!
    # topk_indices, Tensor! token_expert_indices, Tensor gating_output, ...); AITER aiter/ops/moe_op.py
    # topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, need_renorm).
    "_moe_C::topk_softmax": _topk(3, SOFTMAX_FLOPS),
    "_moe_C::topk_sigmoid": _topk(3, SIGMOID_FLOPS),
    "aiter::topk_softmax": _topk(3, SOFTMAX_FLOPS),
    # SGLang sgl-kernel common_extension.cc: topk_softmax(Tensor! topk_weights, Tensor! topk_indices,
    # Tensor gating_output, bool renormalize, ...).
    "sgl_kernel::topk_softmax": _topk(2, SOFTMAX_FLOPS),
    "_moe_C::moe_sum": _moe_sum(scale=False),
    "sgl_kernel::moe_sum_reduce": _moe_sum(scale=True),
    "vllm::outplace_fused_experts": _fused_experts,
    "vllm::inplace_fused_experts": _fused_experts,
    "sglang::outplace_fused_experts": _fused_experts,
    "sglang::inplace_fused_experts": _fused_experts,
    "sglang_profiler::fused_moe_triton_kernels_invoke_fused_moe_kernel": _grouped_gemm,
}
