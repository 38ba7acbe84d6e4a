"""Cost models of serving engines' paged and variable-length attention ops (AITER, SGLang, vLLM,
flash-attn), from their recorded ``Args`` and, where those do not state the KV lengths, the
step's ``OpContext``.

What the shapes say: the query [tokens, Hq, D] gives the tokens, heads and head size; the KV
cache (or the packed keys) gives Hkv and the value head size (``cache_geometry``); the
``cu_seqlens_q`` / ``kv_indptr`` tensors give the batch (their length less one), and the
``max_seqlen_q`` / ``max_seqlen_k`` concretes the longest sequence. When the tokens are the batch
times the longest query and a causal mask with max_seqlen_k = max_seqlen_q makes every key
length equal its query length, the pairs and keys follow exactly (``varlen_geometry``). Else the
step's annotation does (the query-key pairs and keys of one layer, ``OpContext``), as for vLLM's
unified attention; failing both, the op is unpriced with the reason. A sliding window the op
states (``window_size_left``) bounds each query's keys.

FLOPs: 2 * Hq * pairs * (D + Dv) (QK^T and PV, a multiply-add counted 2; softmax not counted);
bytes: the keys read x Hkv x (D + Dv) at the cache's element size + the query + the output
(conventions of ``op_costs`` and ``matrix_ops.attention_cost``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracekit.analysis.pricing.op_args import MATRIX, Args, OpContext, OpCost, Tensor, Unpriced
from tracekit.models import costs as mc


def cache_geometry(op: str, q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int]:
    """(Hkv, D, Dv) of packed keys or a KV cache, by its layout:

    - 3-D [tokens or slots, Hkv, D]: packed varlen keys, or a cache of page size 1
      (AITER csrc/include/torch/mha_batch_prefill.h: k "[total_k, hk, d]");
    - 4-D [pages, page_size, Hkv, D]: the NHD paged layout (vLLM/flash-attn block tables, SGLang's
      ``view(-1, 1, H, D)`` for AITER's paged_attention_ragged with kv_cache_layout "NHD");
    - 5-D keys [blocks, Hkv, D/x, block_size, x] with values [blocks, Hkv, D, block_size] (vLLM
      paged_attention, AITER pa) or [blocks, Hkv, block_size/x, D, x] (AITER's vectorised layout).
    The query's head size must equal the keys' (the QK^T product)."""
    ks, vs = k.shape, v.shape
    if len(ks) == 3 and len(vs) == 3:
        hkv, d, dv = ks[1], ks[2], vs[2]
    elif len(ks) == 4 and len(vs) == 4:
        hkv, d, dv = ks[2], ks[3], vs[3]
    elif len(ks) == 5 and len(vs) == 4:
        hkv, d, dv = ks[1], ks[2] * ks[4], vs[2]
    elif len(ks) == 5 and len(vs) == 5:
        hkv, d, dv = ks[1], ks[2] * ks[4], vs[3]
    else:
        raise Unpriced(f"{op}: KV layout {list(ks)} / {list(vs)} is not one this model reads")
    hq = q.shape[1] if len(q.shape) == 3 else 0
    if len(q.shape) != 3 or q.shape[2] != d or hkv <= 0 or hq % hkv:
        raise Unpriced(f"{op}: query {list(q.shape)} does not fit keys {list(ks)} (Hq % Hkv == 0, same head size)")
    return hkv, d, dv


def _int(args: Args, i: int | None) -> int | None:
    """An int concrete at ``i``; None where absent or unrecorded."""
    if i is None:
        return None
    try:
        values = args.int_list(i)
    except ValueError:
        return None
    return values[0] if values else None


def _flag(args: Args, i: int | None) -> bool | None:
    value = args.text(i) if i is not None else None
    return {"True": True, "1": True, "False": False, "0": False}.get(value or "")


def varlen_geometry(
    batch: int, tokens: int, keys_total: int | None, max_q: int | None, max_k: int | None, causal: bool | None
) -> tuple[float, float, str] | None:
    """(pairs, keys, how) when the shapes fix every sequence's lengths: ``tokens`` = ``batch`` x
    ``max_q`` (every query as long as the longest), and the keys either equal the queries (causal
    with max_seqlen_k = max_seqlen_q: a key length is at least its query length and at most the
    longest) or are ``batch`` x ``max_k`` packed keys. Causal masks are bottom-right aligned (each
    new token sees the cache before it: flash-attn >= 2.1, AITER, the engines' KV caches). None
    where the lengths are not fixed."""
    if not batch or not max_q or tokens != batch * max_q or causal is None:
        return None
    if causal and max_k == max_q:
        lk = max_q
    elif keys_total is not None and max_k and keys_total == batch * max_k:
        lk = max_k
    else:
        return None
    lq = max_q
    if causal:
        per = lq * (lk - lq) + lq * (lq + 1) // 2 if lq <= lk else lk * (lk + 1) // 2
    else:
        per = lq * lk
    mask = "causal" if causal else "full"
    return (
        float(batch * per),
        float(batch * lk),
        f"{batch} sequences of {lq} queries over {lk} keys each ({mask}; tokens = batch x max_seqlen_q)",
    )


def _windowed(
    batch: int, tokens: int, pairs: float, keys: float, left: int | None, how: str, ctx: OpContext | None
) -> tuple[float, float, str]:
    """Pairs and keys of a sliding window of ``left`` earlier keys (flash-attn's window_size_left:
    a query sees itself and ``left`` keys before it, ``left + 1`` in all), from the mean lengths."""
    if left is None or left < 0 or batch <= 0:
        return pairs, keys, how
    if ctx is not None and ctx.window_note:
        return pairs, keys, how + " (the model's windows, averaged over its layers)"
    side = mc.Side(requests=float(batch), tokens=float(tokens), kv_tokens=keys, pairs=pairs, logit_tokens=0.0)
    geo = mc.attention_geometry(side, left + 1)
    if geo is None:
        return pairs, keys, how
    return geo[0], geo[1], how + f"; sliding window of {left + 1} keys"


def _from_context(op: str, ctx: OpContext, what: str) -> tuple[float, float, str]:
    if ctx.pairs is None or ctx.keys is None:
        raise Unpriced(
            f"{op}: {what}, and the step's annotation does not state its query-key pairs "
            "(vLLM's detailed execute_... form and SGLang's step[EXTEND bs= toks=] do)"
        )
    return ctx.pairs, ctx.keys, f"pairs={ctx.pairs:g} and keys={ctx.keys:g} from the step{ctx.window_note}"


def attention_work(
    q: Tensor, hkv: int, d: int, dv: int, kv_size: float, pairs: float, keys: float, how: str, out: Tensor | None = None
) -> OpCost:
    """The cost of attention of ``pairs`` query-key pairs over ``keys`` keys read from the cache."""
    tokens, hq = q.shape[0], q.shape[1]
    written = out.nbytes if out is not None and out.numel == tokens * hq * dv else tokens * hq * dv * q.size
    flops = 2 * hq * pairs * (d + dv)
    nbytes = keys * hkv * (d + dv) * kv_size + q.nbytes + written
    return OpCost(
        float(flops),
        float(nbytes),
        q.dtype,
        MATRIX,
        f"2*Hq*pairs*(D+Dv), Hq={hq} Hkv={hkv} D={d} Dv={dv}, {how}; bytes = keys x Hkv x (D+Dv) at "
        f"{kv_size:g} B + query + output",
    )


@dataclass(frozen=True)
class Varlen:
    """Where a prefill (variable-length) attention op keeps its arguments: q, k, v, cu_seqlens_q,
    max_seqlen_q and max_seqlen_k, is_causal and window_size_left (None: ``bool_pair_after`` finds
    is_causal as the second of the two consecutive bool concretes (zero_tensors, is_causal) after
    that index, window_size_left right after it), and whether k is packed keys (their count is the
    keys) rather than a cache."""

    q: int = 0
    k: int = 1
    v: int = 2
    cu_q: int = 3
    max_q: int = 6
    max_k: int = 7
    causal: int | None = 12
    left: int | None = 13
    bool_pair_after: int | None = None
    packed: bool = False


def _bool_pair(args: Args, start: int) -> int | None:
    """Index of is_causal: the second of the first two consecutive bool concretes after ``start``."""
    for i in range(start, len(args) - 1):
        if args.text(i) in ("True", "False") and args.text(i + 1) in ("True", "False"):
            return i + 1
    return None


def varlen_cost(spec: Varlen, args: Args, ctx: OpContext) -> OpCost:
    q, k, v = args.tensor(spec.q), args.tensor(spec.k), args.tensor(spec.v)
    hkv, d, dv = cache_geometry(args.op, q, k, v)
    cu_q = args.tensor(spec.cu_q)
    batch, tokens = cu_q.numel - 1, q.shape[0]
    causal_at = spec.causal if spec.bool_pair_after is None else _bool_pair(args, spec.bool_pair_after)
    left_at = spec.left if spec.bool_pair_after is None else (causal_at + 1 if causal_at is not None else None)
    causal, left = _flag(args, causal_at), _int(args, left_at)
    packed = spec.packed and len(k.shape) == 3
    keys_total = k.shape[0] if packed else None
    exact = varlen_geometry(batch, tokens, keys_total, _int(args, spec.max_q), _int(args, spec.max_k), causal)
    # The shapes' lengths are this call's own: no model windows averaged into them to defer to.
    window_ctx: OpContext | None = None
    if exact is not None:
        pairs, keys, how = exact
    else:
        window_ctx = ctx
        pairs, keys, how = _from_context(args.op, ctx, "its sequences' lengths are not all equal in its shapes")
        if keys_total is not None:
            keys, how = float(keys_total), how + f" (keys={keys_total} packed in its shapes)"
    if causal:
        pairs, keys, how = _windowed(batch, tokens, pairs, keys, left, how, window_ctx)
    return attention_work(q, hkv, d, dv, k.size, pairs, keys, how)


@dataclass(frozen=True)
class Paged:
    """Where a decode (paged) attention op keeps its output, query and KV cache, and its sliding
    window (an int concrete, 0 or negative: none), where it states one."""

    out: int | None
    q: int
    k: int
    v: int
    window: int | None = None


def paged_cost(spec: Paged, args: Args, ctx: OpContext) -> OpCost:
    q, k, v = args.tensor(spec.q), args.tensor(spec.k), args.tensor(spec.v)
    hkv, d, dv = cache_geometry(args.op, q, k, v)
    pairs, keys, how = _from_context(
        args.op,
        ctx,
        "its KV lengths are in tensors the trace does not record (its page tables are preallocated buffers)",
    )
    window = _int(args, spec.window)
    if window is not None and window > 0:
        pairs, keys, how = _windowed(q.shape[0], q.shape[0], pairs, keys, window - 1, how, ctx)
    out = args.maybe_tensor(spec.out) if spec.out is not None else None
    return attention_work(q, hkv, d, dv, k.size, pairs, keys, how, out)


def _varlen(spec: Varlen) -> Callable[[Args, OpContext], OpCost]:
    return lambda args, ctx: varlen_cost(spec, args, ctx)


def _paged(spec: Paged) -> Callable[[Args, OpContext], OpCost]:
    return lambda args, ctx: paged_cost(spec, args, ctx)


ATTENTION_MODELS: dict[str, Callable[[Args, OpContext], OpCost]] = {
    # AITER aiter/ops/mha.py mha_batch_prefill(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices,
    # max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, logits_soft_cap, zero_tensors, is_causal,
    # window_size_left, window_size_right, ...): positions 6, 7, 12, 13 in every version.
    "aiter::mha_batch_prefill": _varlen(Varlen()),
    # AITER mha_varlen_fwd / fmha_v3_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    # max_seqlen_k, [min_seqlen_q], dropout_p, softmax_scale, [logits_soft_cap], zero_tensors,
    # is_causal, window_size_left, ...): the bracketed arguments came and went between versions, so
    # is_causal is found after the (zero_tensors, is_causal) bool pair. k is packed [total_k, Hkv, D]
    # without a block table, a paged cache [blocks, page, Hkv, D] with one.
    "aiter::mha_varlen_fwd": _varlen(Varlen(max_q=5, max_k=6, causal=None, left=None, bool_pair_after=7, packed=True)),
    "aiter::fmha_v3_varlen_fwd": _varlen(
        Varlen(max_q=5, max_k=6, causal=None, left=None, bool_pair_after=7, packed=True)
    ),
    # flash-attn flash_attn_interface.py: flash_attn::_flash_attn_varlen_forward(q, k, v, cu_seqlens_q,
    # cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_size_left,
    # window_size_right, softcap, alibi_slopes, return_softmax, block_table, ...).
    "flash_attn::_flash_attn_varlen_forward": _varlen(Varlen(max_q=5, max_k=6, causal=9, left=10, packed=True)),
    # AITER aiter/ops/attention.py paged_attention_ragged(out, workspace_buffer, query, key_cache,
    # value_cache, scale, kv_indptr, kv_page_indices, kv_last_page_lens, ...), as SGLang's aiter backend
    # calls it for decode; TraceLens's kernel-shape profiler records the launcher as
    # sglang_profiler::attention_paged_attention_ragged_<n> with its tensor arguments only (out,
    # workspace, query, key_cache, value_cache, ...): query, key_cache, value_cache at 2, 3, 4 either way.
    "sglang_profiler::attention_paged_attention_ragged": _paged(Paged(0, 2, 3, 4)),
    "aiter::paged_attention_ragged": _paged(Paged(0, 2, 3, 4)),
    # AITER paged_attention_v1(out, workspace_buffer, query, key_cache, value_cache, scale, block_tables,
    # cu_query_lens, context_lens, max_context_len, alibi_slopes, kv_cache_dtype, kv_cache_layout,
    # logits_soft_cap, k_scale, v_scale, fp8_out_scale, partition_size, mtp, sliding_window).
    "aiter::paged_attention_v1": _paged(Paged(0, 2, 3, 4, window=19)),
    # vLLM csrc/torch_bindings.cpp paged_attention_v1(Tensor! out, Tensor query, Tensor key_cache, Tensor
    # value_cache, ...); paged_attention_v2(out, exp_sums, max_logits, tmp_out, query, key_cache,
    # value_cache, ...); ROCm csrc/rocm/torch_bindings.cpp paged_attention(out, exp_sums, max_logits,
    # tmp_out, query, key_cache, value_cache, ...). The split-K partials (exp_sums, tmp_out) are the
    # kernel's own traffic, not counted.
    "_C::paged_attention_v1": _paged(Paged(0, 1, 2, 3)),
    "_C::paged_attention_v2": _paged(Paged(0, 4, 5, 6)),
    "_rocm_C::paged_attention": _paged(Paged(0, 4, 5, 6)),
}
