"""Cost models of serving engines' custom ops (vLLM, SGLang, AITER, FlashInfer, TensorRT-LLM):
the op -> model tables ``op_costs`` dispatches through. Norms, activations, rotary embedding,
quantisation and KV-cache writes (``engine_vector``) and MoE routing and expert GEMMs
(``engine_moe``) are priced from their recorded ``Args``; paged and variable-length attention
(``engine_attention``), vLLM's unified attention and MoE layer, and all-reduces here, from their
``Args`` and the run's ``OpContext`` (tensor-parallel degree, the step's attention geometry, the
model).

Each gives an ``OpCost`` (conventions of ``op_costs``) or raises ``Unpriced`` with the reason.
``ENGINE_MODELS`` is the op -> model table of the shape-priced ones, ``CONTEXT_MODELS`` that of
the ones that need the context; ``canonical`` names an op as the tables do.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tracekit.analysis.pricing.engine_attention import ATTENTION_MODELS
from tracekit.analysis.pricing.engine_moe import MOE_MODELS
from tracekit.analysis.pricing.engine_vector import VECTOR_ENGINE_MODELS
from tracekit.analysis.pricing.op_args import MATRIX, VECTOR, Args, OpContext, OpCost, Unpriced

# TraceLens's kernel-shape profiler (its kernel_shape_profiler.py) wraps a Python kernel launcher as
# the custom op ``sglang_profiler::<module>_<function>_<n>``, n a per-process counter: the same
# launcher is one model whatever its counter.
_PROFILER_COUNTER = re.compile(r"^(sglang_profiler::.+?)_\d+$")


def canonical(op_name: str) -> str:
    """``op_name`` as the model tables key it: a kernel-shape profiler wrapper without its counter."""
    # Op names come from the trace: a missing one reads NaN, which stays as it is.
    profiled = isinstance(op_name, str) and op_name.startswith("sglang_profiler::")
    m = _PROFILER_COUNTER.match(op_name) if profiled else None
    return m.group(1) if m else op_name


def _collective(args: Args, ctx: OpContext) -> OpCost:
    """An all-reduce of one tensor across ``tp`` ranks: a ring moves 2 (N-1)/N of it per rank
    (NVLink SHARP / multimem does no better per rank in its link traffic)."""
    x = args.tensor(0)
    n = max(ctx.tp, 1)
    if n == 1:
        raise Unpriced(f"{args.op} on one rank moves nothing across a link (tensor-parallel degree 1)")
    ring = 2 * (n - 1) / n
    return OpCost(
        float((n - 1) / n * x.numel),
        float(ring * x.nbytes),
        x.dtype,
        VECTOR,
        f"all-reduce of {x.numel} elements over N={n} ranks: 2(N-1)/N of the tensor per rank",
    )


def _unified_attention(args: Args, ctx: OpContext) -> OpCost:
    """vLLM ``unified_attention_with_output(query [T,Hq,D], key [T,Hkv,D], value [T,Hkv,Dv], output, ...)``:
    the shapes give heads and head dims, the step's annotation the query-key pairs and keys read."""
    q, k, v = args.tensor(0), args.tensor(1), args.tensor(2)
    if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        raise Unpriced(f"{args.op}: expected [tokens, heads, head dim] query, key and value")
    if ctx.pairs is None or ctx.keys is None:
        raise Unpriced(
            f"{args.op}: the step's query-key pairs are not in its annotation (vLLM's detailed "
            "execute_... form states them)"
        )
    tokens, hq, d = q.shape
    _, hkv, dv = v.shape
    kv = ctx.kv_bytes if ctx.kv_bytes is not None else k.size
    flops = 2 * hq * ctx.pairs * (d + dv)
    nbytes = ctx.keys * hkv * (d + dv) * kv + q.nbytes + tokens * hq * dv * v.size
    return OpCost(
        float(flops),
        float(nbytes),
        q.dtype,
        MATRIX,
        f"2*Hq*pairs*(D+Dv), Hq={hq} Hkv={hkv} D={d} Dv={dv}, pairs={ctx.pairs:g} and keys={ctx.keys:g} "
        f"from the step{ctx.window_note}; bytes = keys x Hkv x (D+Dv) at {kv:g} B + query + output",
    )


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
    return OpCost(
        float(flops),
        float(nbytes),
        experts.dtype,
        MATRIX,
        f"one MoE layer: T={tokens:g} tokens over E={e} experts (router logits), top-{m.top_k} and "
        f"expert width {m.expert_intermediate} from the model; {experts.note}",
    )


# Ops whose cost needs the run's context (``OpContext``); priced by ``price_in_context``.
CONTEXT_MODELS: dict[str, Callable[[Args, OpContext], OpCost]] = {
    "vllm::unified_attention_with_output": _unified_attention,
    "vllm::unified_attention": _unified_attention,
    "vllm::moe_forward": _moe_forward,
    "vllm::moe_forward_shared": _moe_forward,
    **ATTENTION_MODELS,
    **{
        name: _collective
        for name in (
            "symm_mem::multimem_all_reduce_",
            "symm_mem::one_shot_all_reduce",
            "symm_mem::two_shot_all_reduce_",
            "_C_custom_ar::all_reduce",
            "c10d::allreduce_",
            "sgl_kernel::all_reduce",
            "vllm::outplace_all_reduce",
        )
    },
}


# Engine custom ops priced from their shapes alone (``op_costs`` dispatches through it).
ENGINE_MODELS: dict[str, Callable[[Args], OpCost]] = {**VECTOR_ENGINE_MODELS, **MOE_MODELS}
