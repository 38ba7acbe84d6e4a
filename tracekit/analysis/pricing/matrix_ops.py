"""Cost models of the matrix-unit aten ops: GEMMs (mm, addmm, linear, bmm, baddbmm, matmul, mv,
dot, _scaled_mm) and scaled-dot-product attention, from an op call's recorded ``Args``.

Each takes the call's ``Args`` and gives an ``OpCost`` in the ``MATRIX`` unit (a multiply-add is
2 FLOPs, bytes each operand read once and the output written once: the conventions of
``op_costs``), or raises ``Unpriced`` with the reason. ``MATRIX_MODELS`` is their op -> model
table, which ``op_costs`` dispatches through; ``gemm_cost`` and ``attention_cost`` are the
formulas on their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tracekit.analysis.pricing.op_args import MATRIX, Args, OpCost, Tensor, Unpriced, broadcast


class Work(NamedTuple):
    """FLOPs and bytes of the public formula helpers (``gemm_cost``, ``attention_cost``)."""

    flops: float
    bytes: float


# ---------------------------------------------------------------- GEMM


def _gemm_flops(m: int, n: int, k: int, batch: int) -> int:
    return 2 * batch * m * n * k


def gemm_cost(m: int, n: int, k: int, dtype_bytes: int, batch: int = 1, bias: bool = False) -> Work:
    """``batch`` independent (m x k) @ (k x n) products in one dtype.

    flops = 2*batch*m*n*k; bytes = dtype_bytes * (batch*(m*k + k*n + m*n) + n if bias):
    A, B read once, C written once, a length-n bias read once (its add is not counted).
    A weight shared by the whole batch (``linear``) is one GEMM: fold the batch into m.
    """
    elements = batch * (m * k + k * n + m * n) + (n if bias else 0)
    return Work(float(_gemm_flops(m, n, k, batch)), float(dtype_bytes * elements))


def _gemm(
    a: Tensor,
    b: Tensor,
    m: int,
    n: int,
    k: int,
    batch: int,
    out_numel: int,
    extra: Sequence[Tensor | None] = (),
    out_size: int | None = None,
    what: str = "",
) -> OpCost:
    """A GEMM op: operands read at their recorded sizes and dtypes (bias, scales in ``extra``)."""
    operands = [a, b, *(t for t in extra if t is not None)]
    out_bytes = out_numel * (a.size if out_size is None else out_size)
    note = f"2*batch*M*N*K with batch={batch} M={m} N={n} K={k}{what}; bytes = inputs + output"
    return OpCost(
        float(_gemm_flops(m, n, k, batch)), float(sum(t.nbytes for t in operands) + out_bytes), a.dtype, MATRIX, note
    )


def _check_k(op: str, k1: int, k2: int) -> None:
    if k1 != k2:
        raise Unpriced(f"{op}: inner dimensions {k1} and {k2} differ")


def _mm(args: Args) -> OpCost:
    a, b = args.tensor(0), args.tensor(1)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise Unpriced(f"{args.op} expects 2-D operands, got {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    return _gemm(a, b, m, n, k, 1, m * n)


def _addmm(args: Args) -> OpCost:
    bias, a, b = args.tensor(0), args.tensor(1), args.tensor(2)
    (m, k), (k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    return _gemm(a, b, m, n, k, 1, m * n, [bias], what=" (+ bias read)")


def _linear(args: Args) -> OpCost:
    x, w, bias = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    if len(w.shape) != 2 or not x.shape:
        raise Unpriced(f"{args.op}: weight must be 2-D and input at least 1-D")
    n, k = w.shape
    _check_k(args.op, x.shape[-1], k)
    m = math.prod(x.shape[:-1])
    return _gemm(x, w, m, n, k, 1, m * n, [bias], what=" (+ bias read)" if bias else "")


def _bmm(args: Args) -> OpCost:
    a, b = args.tensor(0), args.tensor(1)
    (batch, m, k), (batch2, k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    if batch != batch2:
        raise Unpriced(f"{args.op}: batch sizes {batch} and {batch2} differ")
    return _gemm(a, b, m, n, k, batch, batch * m * n)


def _baddbmm(args: Args) -> OpCost:
    bias, a, b = args.tensor(0), args.tensor(1), args.tensor(2)
    (batch, m, k), (_, k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    return _gemm(a, b, m, n, k, batch, batch * m * n, [bias], what=" (+ bias read)")


def _matmul(args: Args) -> OpCost:
    """torch.matmul: 1-D operands and broadcast batch dimensions."""
    a, b = args.tensor(0), args.tensor(1)
    if not a.shape or not b.shape:
        raise Unpriced(f"{args.op}: 0-d operands")
    # A 1-D left operand is a row vector, a 1-D right operand a column vector.
    m, k = (1, a.shape[0]) if len(a.shape) == 1 else a.shape[-2:]
    k2, n = (b.shape[0], 1) if len(b.shape) == 1 else b.shape[-2:]
    _check_k(args.op, k, k2)
    batch = math.prod(broadcast([a.shape[:-2], b.shape[:-2]]))
    return _gemm(a, b, m, n, k, batch, batch * m * n)


def _scaled_mm(args: Args) -> OpCost:
    a, b = args.tensor(0), args.tensor(1)
    (m, k), (k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    scales = [args.maybe_tensor(i) for i in (2, 3, 4, 5)]  # scale_a, scale_b, bias, scale_result
    out = args.scalar_type(6)
    return _gemm(a, b, m, n, k, 1, m * n, scales, out_size=out[1] if out else a.size, what=" (+ scales, bias)")


# ---------------------------------------------------------------- attention


def _attention_pairs(len_q: int, len_k: int, causal: bool, align: str) -> int:
    """Query-key pairs that are scored.

    Causal "bottom_right" (KV-cache convention, flash-attn >= 2.1): query i of len_q sees
    the keys up to len_k - len_q + i. "top_left" (PyTorch SDPA ``is_causal``): query i sees
    keys 0..i.
    """
    if not causal:
        return len_q * len_k
    if align == "top_left":
        rows_full = min(len_q, len_k)
        return rows_full * (rows_full + 1) // 2 + (len_q - rows_full) * len_k
    if align != "bottom_right":
        raise ValueError(f"align must be 'bottom_right' or 'top_left', not {align!r}")
    if len_q <= len_k:
        return len_q * (len_k - len_q) + len_q * (len_q + 1) // 2
    # Rows before the diagonal enters the key range see no key at all.
    return len_k * (len_k + 1) // 2


def attention_cost(
    batch: int,
    heads_q: int,
    heads_kv: int,
    len_q: int,
    len_k: int,
    head_dim: int,
    dtype_bytes: int,
    causal: bool,
    *,
    head_dim_v: int | None = None,
    align: str = "bottom_right",
) -> Work:
    """Scaled-dot-product attention, softmax(Q K^T) V, with grouped-query K/V.

    flops = 2*batch*heads_q*pairs*(head_dim + head_dim_v), pairs = len_q*len_k, or for
    causal the exact count (len_q == len_k: len_q*(len_q+1)/2; a cache of len_k - len_q
    earlier keys adds len_q*(len_k - len_q); see ``_attention_pairs`` for ``align``).
    bytes = Q + K + V + O, K/V at heads_kv (GQA reads each K/V head once).
    Decode is len_q == 1.
    """
    dv = head_dim if head_dim_v is None else head_dim_v
    pairs = _attention_pairs(len_q, len_k, causal, align)
    flops = 2 * batch * heads_q * pairs * (head_dim + dv)
    elements = batch * (heads_q * len_q * (head_dim + dv) + heads_kv * len_k * (head_dim + dv))
    return Work(float(flops), float(dtype_bytes * elements))


@dataclass(frozen=True)
class _AttentionSignature:
    layout: str  # "bhld": [..., heads, len, dim]; "blhd": [batch, len, heads, dim]
    causal_arg: int | None  # index of the bool is_causal argument
    mask_arg: int | None  # index of an optional mask/bias tensor
    align: str  # how this op aligns a causal mask when len_q != len_k
    mask_type_arg: int | None = None  # _efficient_attention_forward's custom_mask_type


# Argument positions checked against the op schemas of torch 2.13 and real traces
# (e.g. _flash_attention_forward in the H100 Qwen trace records is_causal at 8).
# SDPA's is_causal is top-left aligned (its docs: tril of ones(L, S)); PyTorch refuses
# flash for non-square causal SDPA for that reason, while flash-attn itself is bottom-right.
_ATTENTION_OPS: dict[str, _AttentionSignature] = {
    "aten::scaled_dot_product_attention": _AttentionSignature("bhld", 5, 3, "top_left"),
    "aten::_scaled_dot_product_flash_attention": _AttentionSignature("bhld", 4, None, "top_left"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _AttentionSignature("bhld", 4, 5, "top_left"),
    "aten::_scaled_dot_product_efficient_attention": _AttentionSignature("bhld", 6, 3, "top_left"),
    "aten::_scaled_dot_product_cudnn_attention": _AttentionSignature("bhld", 6, 3, "top_left"),
    "aten::_flash_attention_forward": _AttentionSignature("blhd", 8, None, "bottom_right"),
    "aten::_efficient_attention_forward": _AttentionSignature("blhd", None, 3, "top_left", 9),
}


def _attention_dims(t: Tensor, layout: str, op: str) -> tuple[int, int, int, int]:
    """(batch, heads, len, dim) of a q/k/v tensor."""
    if layout == "blhd":
        if len(t.shape) != 4:
            raise Unpriced(
                f"{op} on packed variable-length sequences: per-sequence lengths "
                "are in cu_seqlens tensors, which the trace does not record"
            )
        batch, length, heads, dim = t.shape
        return batch, heads, length, dim
    if len(t.shape) < 2:
        raise Unpriced(f"{op}: query/key/value need at least 2 dims, got {t.shape}")
    heads = t.shape[-3] if len(t.shape) >= 3 else 1
    return math.prod(t.shape[:-3]), heads, t.shape[-2], t.shape[-1]


def _attention(args: Args) -> OpCost:
    sig = _ATTENTION_OPS[args.op]
    q, k, v = args.tensor(0), args.tensor(1), args.tensor(2)
    batch, heads_q, len_q, dim = _attention_dims(q, sig.layout, args.op)
    _, heads_kv, len_k, dim_k = _attention_dims(k, sig.layout, args.op)
    _, _, _, dim_v = _attention_dims(v, sig.layout, args.op)
    if dim_k != dim or heads_kv <= 0 or heads_q % heads_kv:
        raise Unpriced(f"{args.op}: q {q.shape} and k {k.shape} do not fit (GQA needs Hq % Hkv == 0)")
    mask = args.maybe_tensor(sig.mask_arg) if sig.mask_arg is not None else None
    align = sig.align
    if mask is not None:
        causal = False  # an explicit mask: the kernel scores every pair, then masks
    elif sig.mask_type_arg is not None:
        mask_type = args.text(sig.mask_type_arg)
        if mask_type not in ("0", "1", "2"):
            raise Unpriced(f"custom_mask_type of {args.op} not recorded")
        causal, align = mask_type != "0", "bottom_right" if mask_type == "2" else "top_left"
    elif len_q == 1 and align == "bottom_right":
        causal = False  # one query row against the whole cache either way
    elif sig.causal_arg is None:  # every signature states its causality one way or another
        raise Unpriced(f"{args.op}: how its mask is causal is not recorded")
    else:
        causal = args.flag(sig.causal_arg, "is_causal")
    work = attention_cost(batch, heads_q, heads_kv, len_q, len_k, dim, q.size, causal, head_dim_v=dim_v, align=align)
    # attention_cost assumes one dtype; K/V (e.g. fp8 cache) and the mask keep their own.
    kv_delta = (k.size - q.size) * k.numel + (v.size - q.size) * v.numel
    mask_bytes = mask.nbytes if mask is not None else 0
    kind = f"causal ({align})" if causal else "full"
    note = (
        f"2*B*Hq*pairs*(D+Dv), {kind} pairs; B={batch} Hq={heads_q} Hkv={heads_kv} "
        f"Lq={len_q} Lk={len_k} D={dim} Dv={dim_v}; bytes = q + k + v (+ mask) + out"
    )
    return OpCost(work.flops, work.bytes + kv_delta + mask_bytes, q.dtype, MATRIX, note)


# Op -> cost model of the GEMM and attention ops (``op_costs`` dispatches through it).
MATRIX_MODELS: dict[str, Callable[[Args], OpCost]] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::linear": _linear,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul,
    "aten::mv": _matmul,
    "aten::dot": _matmul,
    "aten::_scaled_mm": _scaled_mm,
    **{name: _attention for name in _ATTENTION_OPS},
}
