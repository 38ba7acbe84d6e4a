"""Cost models of serving engines' custom ops (vLLM, SGLang): fused norms, rotary embedding,
quantisation and KV-cache writes from their recorded ``Args``; attention, MoE and all-reduce ops
from their ``Args`` and the run's ``OpContext`` (tensor-parallel degree, the step's attention
geometry, the model).

Each gives an ``OpCost`` (conventions of ``op_costs``) or raises ``Unpriced`` with the reason.
``ENGINE_MODELS`` is the op -> model table of the shape-priced ones, ``CONTEXT_MODELS`` that of
the ones that need the context; ``op_costs`` dispatches through both.
"""

from __future__ import annotations

from collections.abc import Callable

from tracekit.analysis.pricing.op_args import MATRIX, VECTOR, Args, OpContext, OpCost, Unpriced
from tracekit.analysis.pricing.vector_ops import AFFINE_FLOPS, RMS_NORM_FLOPS, vector_cost


def _fused_add_rms_norm(args: Args) -> OpCost:
    """vLLM ``_C::fused_add_rms_norm(input, residual, weight, eps)``: residual += input, then
    input = rms_norm(residual) * weight, both in place: each of input and residual read and
    written once."""
    x, residual, weight = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    per = RMS_NORM_FLOPS + AFFINE_FLOPS + 1
    w = weight.nbytes if weight is not None else 0
    return vector_cost(per * x.numel, x.nbytes + residual.nbytes + w, x.nbytes + residual.nbytes, x.dtype,
                       f"{per} flops/element over {x.numel}; bytes = input and residual read and written + weight")


def _rms_norm_out(args: Args) -> OpCost:
    """vLLM ``_C::rms_norm(out, input, weight, eps)`` (and its ``_static_fp8_quant`` forms)."""
    out, x, weight = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    per = RMS_NORM_FLOPS + AFFINE_FLOPS
    w = weight.nbytes if weight is not None else 0
    return vector_cost(per * x.numel, x.nbytes + w, out.nbytes, x.dtype,
                       f"{per} flops/element over {x.numel}; bytes = input + weight read, output written")


def _rotary(args: Args) -> OpCost:
    """vLLM/SGLang ``rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)``:
    query and key rotated in place, one cos/sin row read per token."""
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
    return vector_cost(3 * rotated, moved + table + positions.nbytes, moved, q.dtype,
                       f"3 flops per rotated element ({rotated}); bytes = query and key read and written + cos/sin rows")


def _quant(args: Args) -> OpCost:
    """Activation quantisation ``(out, input, scale, ...)``: input read, low-precision output written."""
    out, x = args.tensor(0), args.tensor(1)
    scales = sum(t.nbytes for t in (args.maybe_tensor(i) for i in range(2, len(args))) if t is not None)
    return vector_cost(QUANT_FLOPS * x.numel, x.nbytes, out.nbytes + scales, x.dtype,
                       f"{QUANT_FLOPS} flops/element (scale, round) over {x.numel}; bytes = input read + output and scales written")


def _reshape_and_cache(args: Args) -> OpCost:
    """vLLM ``reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, ...)``:
    the step's new keys and values read, written into the cache at its element size."""
    key, value, key_cache = args.tensor(0), args.tensor(1), args.tensor(2)
    slots = args.maybe_tensor(4)
    written = (key.numel + value.numel) * key_cache.size
    return vector_cost(0, key.nbytes + value.nbytes + (slots.nbytes if slots is not None else 0), written,
                       key.dtype, f"{key.numel + value.numel} new key/value elements written at {key_cache.size} "
                                  "byte(s) each (the cache's dtype)")


QUANT_FLOPS = 2


def _collective(args: Args, ctx: OpContext) -> OpCost:
    """An all-reduce of one tensor across ``tp`` ranks: a ring moves 2 (N-1)/N of it per rank
    (NVLink SHARP / multimem does no better per rank in its link traffic)."""
    x = args.tensor(0)
    n = max(ctx.tp, 1)
    if n == 1:
        raise Unpriced(f"{args.op} on one rank moves nothing across a link (tensor-parallel degree 1)")
    ring = 2 * (n - 1) / n
    return OpCost(float((n - 1) / n * x.numel), float(ring * x.nbytes), x.dtype, VECTOR,
                  f"all-reduce of {x.numel} elements over N={n} ranks: 2(N-1)/N of the tensor per rank")


def _unified_attention(args: Args, ctx: OpContext) -> OpCost:
    """vLLM ``unified_attention_with_output(query [T,Hq,D], key [T,Hkv,D], value [T,Hkv,Dv], output, ...)``:
    the shapes give heads and head dims, the step's annotation the query-key pairs and keys read."""
    q, k, v = args.tensor(0), args.tensor(1), args.tensor(2)
    if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        raise Unpriced(f"{args.op}: expected [tokens, heads, head dim] query, key and value")
    if ctx.pairs is None or ctx.keys is None:
        raise Unpriced(f"{args.op}: the step's query-key pairs are not in its annotation (vLLM's detailed "
                       "execute_... form states them)")
    tokens, hq, d = q.shape
    _, hkv, dv = v.shape
    kv = ctx.kv_bytes if ctx.kv_bytes is not None else k.size
    flops = 2 * hq * ctx.pairs * (d + dv)
    nbytes = ctx.keys * hkv * (d + dv) * kv + q.nbytes + tokens * hq * dv * v.size
    return OpCost(float(flops), float(nbytes), q.dtype, MATRIX,
                  f"2*Hq*pairs*(D+Dv), Hq={hq} Hkv={hkv} D={d} Dv={dv}, pairs={ctx.pairs:g} and keys={ctx.keys:g} "
                  f"from the step{ctx.window_note}; bytes = keys x Hkv x (D+Dv) at {kv:g} B + query + output")


def _moe_forward(args: Args, ctx: OpContext) -> OpCost:
    """vLLM ``moe_forward(hidden [T, H], router_logits [T, E], ...)``: one MoE layer's routed experts
    and routing, T and E from the shapes, top-k and expert sizes from the model."""
    x, logits = args.tensor(0), args.tensor(1)
    m = ctx.model
    if m is None:
        raise Unpriced(f"{args.op}: its cost needs the model's top-k and expert sizes (pass --model)")
    from tracekit.models import costs as mc

    tokens = float(x.shape[0]) if x.shape else 0.0
    side = mc.Side(requests=tokens, tokens=tokens, kv_tokens=None, pairs=None, logit_tokens=0.0)
    work = mc.step_costs(m, side, tp=ctx.tp, act_bytes=float(x.size), act_dtype=x.dtype)
    layers = max(m.count(mlp="moe"), 1)
    experts, routing = work.get("experts"), work.get("routing")
    if not isinstance(experts, mc.Work):
        raise Unpriced(f"{args.op}: the model {getattr(m, 'name', '')} has no routed experts")
    e = logits.shape[-1] if logits.shape else m.experts
    flops = (experts.flops + (routing.flops if isinstance(routing, mc.Work) else 0)) / layers
    nbytes = (experts.bytes + (routing.bytes if isinstance(routing, mc.Work) else 0)) / layers
    return OpCost(float(flops), float(nbytes), experts.dtype, MATRIX,
                  f"one MoE layer: T={tokens:g} tokens over E={e} experts (router logits), top-{m.top_k} and "
                  f"expert width {m.expert_intermediate} from the model; {experts.note}")


# Ops whose cost needs the run's context (``OpContext``); priced by ``price_in_context``.
CONTEXT_MODELS: dict[str, Callable[[Args, OpContext], OpCost]] = {
    "vllm::unified_attention_with_output": _unified_attention,
    "vllm::unified_attention": _unified_attention,
    "vllm::moe_forward": _moe_forward,
    "vllm::moe_forward_shared": _moe_forward,
    **{name: _collective for name in ("symm_mem::multimem_all_reduce_", "symm_mem::one_shot_all_reduce",
                                      "symm_mem::two_shot_all_reduce_", "_C_custom_ar::all_reduce",
                                      "c10d::allreduce_", "sgl_kernel::all_reduce", "vllm::outplace_all_reduce")},
}


# Engine custom ops priced from their shapes alone (``op_costs`` dispatches through it).
ENGINE_MODELS: dict[str, Callable[[Args], OpCost]] = {
    "_C::fused_add_rms_norm": _fused_add_rms_norm,
    "_C::rms_norm": _rms_norm_out,
    "_C::rms_norm_static_fp8_quant": _rms_norm_out,
    "_C::rotary_embedding": _rotary,
    "sgl_kernel::rotary_embedding": _rotary,
    **{name: _quant for name in ("_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
                                 "_C::dynamic_per_token_scaled_fp8_quant", "_C::scaled_fp4_quant")},
    "_C_cache_ops::reshape_and_cache_flash": _reshape_and_cache,
    "_C_cache_ops::reshape_and_cache": _reshape_and_cache,
}
