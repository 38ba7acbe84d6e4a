"""Per-op cost models: FLOPs and memory bytes of an aten op from its recorded shapes.

Input is what the profiler records with ``record_shapes=True``: ``Input Dims`` (one entry
per argument: a shape list, ``[]`` for non-tensors and 0-d tensors, a list of shapes for
TensorList arguments), ``Input type`` (``"c10::BFloat16"``, ``"float"``, ``"Scalar"``,
``""`` for None/unrecorded, ...) and ``Concrete Inputs`` (scalar argument values as text).

Conventions, shared by every model here:

- **bytes** is the minimal traffic: every tensor input read once at its own (not
  broadcast) size, every output written once. Caches and re-reads are the kernel's
  business; the roofline asks how close the kernel gets to this floor.
- **flops** counts arithmetic. GEMM/attention count a multiply-add as 2 (the
  ``FlopCounterMode`` convention); the bias add of addmm/linear and the softmax inside
  attention are not counted (epilogue / vector work beside the matrix work). Elementwise
  ops count ``ELEMENTWISE_FLOPS`` per output element (transcendentals count 1).
- **unit** says which peak applies: "matrix" (tensor cores: GEMM, attention) or "vector".
- **dtype** is the compute dtype: the first matrix operand for GEMM, the query for
  attention, the output for vector ops.
- An op without a model, or whose shapes/flags the trace lacks, gets ``NoCost(reason)``:
  callers say "cost unknown because ..." and never treat it as 0.

Which op of a nesting gets the cost is the caller's choice; the rule this module is
built and tested for is: price the *outermost* op that ``has_model`` and skip its
descendants (``aten::linear`` is priced, its ``aten::addmm`` is not), and only ops whose
subtree launched GPU work (a contiguous on a contiguous tensor copies nothing).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from tracekit.models.costs import MATRIX as MODEL_MATRIX
from tracekit.models.costs import VECTOR as MODEL_VECTOR
from tracekit.models.costs import Missing as ModelMissing
from tracekit.models.costs import Work as ModelWork

MATRIX, VECTOR = MODEL_MATRIX, MODEL_VECTOR  # the units, one spelling for both cost paths


# One cost value for both paths: an op priced from its shapes, a component priced from the
# model. NoCost says why an op could not be priced (shown as "cost unknown because ...").
OpCost = ModelWork
NoCost = ModelMissing


class Work(NamedTuple):
    """FLOPs and bytes of the public formula helpers (``gemm_cost``, ``attention_cost``)."""

    flops: float
    bytes: float


# Profiler ``Input type`` strings -> (normalised dtype, bytes per element).
DTYPES: dict[str, tuple[str, int]] = {
    "c10::BFloat16": ("bf16", 2),
    "c10::Half": ("fp16", 2),
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    # Two fp4 values packed per element: one byte per recorded element.
    "c10::Float4_e2m1fn_x2": ("fp4", 1),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "short": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "short unsigned int": ("uint16", 2),
    "unsigned int": ("uint32", 4),
    "long unsigned int": ("uint64", 8),
    "c10::complex<c10::Half>": ("complex32", 4),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}

# c10::ScalarType codes, as ``Concrete Inputs`` write dtype arguments (e.g. "15").
SCALAR_TYPE_CODES: dict[int, tuple[str, int]] = {
    0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4), 4: ("int64", 8),
    5: ("fp16", 2), 6: ("fp32", 4), 7: ("fp64", 8), 8: ("complex32", 4), 9: ("complex64", 8),
    10: ("complex128", 16), 11: ("bool", 1), 15: ("bf16", 2), 23: ("fp8", 1), 24: ("fp8", 1),
    25: ("fp8", 1), 26: ("fp8", 1), 27: ("uint16", 2), 28: ("uint32", 4), 29: ("uint64", 8),
    44: ("fp8", 1), 45: ("fp4", 1),
}

# Type strings that mark an argument as not a tensor.
_NOT_TENSOR = {"", "Scalar", "ScalarList", "TensorList", "GenericList", "Device", "Layout",
               "MemoryFormat", "ScalarType", "str", "None"}

# FLOPs per output element of elementwise ops (in-place ``op_`` variants share the entry).
ELEMENTWISE_FLOPS: dict[str, int] = {
    **{f"aten::{name}": 1 for name in (
        "add", "sub", "rsub", "mul", "div", "neg", "abs", "rsqrt", "sqrt", "reciprocal",
        "pow", "square", "exp", "log", "cos", "sin", "tanh", "erf", "relu", "clamp",
        "clamp_min", "clamp_max", "maximum", "minimum", "where", "masked_fill",
        "eq", "ne", "lt", "le", "gt", "ge",
    )},
    "aten::sigmoid": 3,  # exp, add, divide
    "aten::silu": 4,  # sigmoid + multiply
    "aten::gelu": 5,  # x * 0.5 * (1 + erf(x / sqrt 2)): divide, erf, add, 2 multiplies
    "aten::fill_": 0,  # write-only
    "aten::zero_": 0,
}
_COMPARISONS = {"aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge"}
_WRITE_ONLY = {"aten::fill_", "aten::zero_"}

LAYER_NORM_FLOPS = 6  # per element: mean 1, variance 3 (sub, square, add), normalise 2
RMS_NORM_FLOPS = 3  # per element: square 1, add 1, scale by 1/rms 1
AFFINE_FLOPS = 1  # per element, for each of weight (multiply) and bias (add)
SOFTMAX_FLOPS = 5  # per element: max, subtract, exp, sum, divide (log-softmax: log for divide)


class _Unpriced(Exception):
    """Raised inside a model; ``price`` turns it into ``NoCost``."""


@dataclass(frozen=True)
class _Tensor:
    shape: tuple[int, ...]
    dtype: str
    size: int  # bytes per element

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.size


class _Args:
    """The recorded arguments of one op call, with typed accessors."""

    def __init__(self, op: str, dims: list, types: list, concrete: list | None) -> None:
        self.op, self.dims, self.types, self.concrete = op, dims, types, concrete

    def __len__(self) -> int:
        return len(self.dims)

    def tensor(self, i: int) -> _Tensor:
        t = self.maybe_tensor(i)
        if t is None:
            raise _Unpriced(f"argument {i} of {self.op} is not a recorded tensor")
        return t

    def maybe_tensor(self, i: int) -> _Tensor | None:
        """Argument i as a tensor; None where it is absent, None-valued or not a tensor."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        type_name = self.types[i]
        if type_name in _NOT_TENSOR:
            return None
        if type_name not in DTYPES:
            raise _Unpriced(f"unknown element type {type_name!r} in {self.op}")
        shape = self.dims[i]
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise _Unpriced(f"argument {i} of {self.op} has no usable shape: {shape!r}")
        dtype, size = DTYPES[type_name]
        return _Tensor(tuple(shape), dtype, size)

    def text(self, i: int) -> str | None:
        """Concrete value of argument i as text; None when the trace did not record it."""
        if self.concrete is None or i >= len(self.concrete):
            return None
        value = self.concrete[i]
        return value if isinstance(value, str) else str(value)

    def flag(self, i: int, what: str) -> bool:
        value = self.text(i)
        if value in ("True", "1"):
            return True
        if value in ("False", "0"):
            return False
        raise _Unpriced(f"{what} of {self.op} not recorded (trace lacks Concrete Inputs)")

    def scalar_type(self, i: int) -> tuple[str, int] | None:
        """A ScalarType argument (e.g. "15" = bf16); None when it is None/unrecorded."""
        value = self.text(i)
        if not value:
            return None
        try:
            return SCALAR_TYPE_CODES[int(value)]
        except (ValueError, KeyError):
            raise _Unpriced(f"unknown dtype code {value!r} in {self.op}") from None

    def int_list(self, i: int) -> list[int] | None:
        """An int / int[] argument ("[-1]", "-1", "[1, 2]"); None when None or unrecorded."""
        value = self.text(i)
        if not value:
            return None
        parsed = json.loads(value)
        return [int(v) for v in parsed] if isinstance(parsed, list) else [int(parsed)]


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, start=rank - len(shape)):
            if d != 1:
                if out[i] not in (1, d):
                    raise _Unpriced(f"shapes {list(shapes)} do not broadcast")
                out[i] = d
    return tuple(out)


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


def _gemm(a: _Tensor, b: _Tensor, m: int, n: int, k: int, batch: int, out_numel: int,
          extra: Sequence[_Tensor | None] = (), out_size: int | None = None, what: str = "") -> OpCost:
    """A GEMM op: operands read at their recorded sizes and dtypes (bias, scales in ``extra``)."""
    operands = [a, b, *(t for t in extra if t is not None)]
    out_bytes = out_numel * (a.size if out_size is None else out_size)
    note = f"2*batch*M*N*K with batch={batch} M={m} N={n} K={k}{what}; bytes = inputs + output"
    return OpCost(float(_gemm_flops(m, n, k, batch)), float(sum(t.nbytes for t in operands) + out_bytes),
                  a.dtype, MATRIX, note)


def _check_k(op: str, k1: int, k2: int) -> None:
    if k1 != k2:
        raise _Unpriced(f"{op}: inner dimensions {k1} and {k2} differ")


def _mm(args: _Args) -> OpCost:
    a, b = args.tensor(0), args.tensor(1)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise _Unpriced(f"{args.op} expects 2-D operands, got {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    return _gemm(a, b, m, n, k, 1, m * n)


def _addmm(args: _Args) -> OpCost:
    bias, a, b = args.tensor(0), args.tensor(1), args.tensor(2)
    (m, k), (k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    return _gemm(a, b, m, n, k, 1, m * n, [bias], what=" (+ bias read)")


def _linear(args: _Args) -> OpCost:
    x, w, bias = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    if len(w.shape) != 2 or not x.shape:
        raise _Unpriced(f"{args.op}: weight must be 2-D and input at least 1-D")
    n, k = w.shape
    _check_k(args.op, x.shape[-1], k)
    m = math.prod(x.shape[:-1])
    return _gemm(x, w, m, n, k, 1, m * n, [bias], what=" (+ bias read)" if bias else "")


def _bmm(args: _Args) -> OpCost:
    a, b = args.tensor(0), args.tensor(1)
    (batch, m, k), (batch2, k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    if batch != batch2:
        raise _Unpriced(f"{args.op}: batch sizes {batch} and {batch2} differ")
    return _gemm(a, b, m, n, k, batch, batch * m * n)


def _baddbmm(args: _Args) -> OpCost:
    bias, a, b = args.tensor(0), args.tensor(1), args.tensor(2)
    (batch, m, k), (_, k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    return _gemm(a, b, m, n, k, batch, batch * m * n, [bias], what=" (+ bias read)")


def _matmul(args: _Args) -> OpCost:
    """torch.matmul: 1-D operands and broadcast batch dimensions."""
    a, b = args.tensor(0), args.tensor(1)
    if not a.shape or not b.shape:
        raise _Unpriced(f"{args.op}: 0-d operands")
    # A 1-D left operand is a row vector, a 1-D right operand a column vector.
    m, k = (1, a.shape[0]) if len(a.shape) == 1 else a.shape[-2:]
    k2, n = (b.shape[0], 1) if len(b.shape) == 1 else b.shape[-2:]
    _check_k(args.op, k, k2)
    batch = math.prod(_broadcast([a.shape[:-2], b.shape[:-2]]))
    return _gemm(a, b, m, n, k, batch, batch * m * n)


def _scaled_mm(args: _Args) -> OpCost:
    a, b = args.tensor(0), args.tensor(1)
    (m, k), (k2, n) = a.shape, b.shape
    _check_k(args.op, k, k2)
    scales = [args.maybe_tensor(i) for i in (2, 3, 4, 5)]  # scale_a, scale_b, bias, scale_result
    out = args.scalar_type(6)
    return _gemm(a, b, m, n, k, 1, m * n, scales, out_size=out[1] if out else a.size,
                 what=" (+ scales, bias)")


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


def attention_cost(batch: int, heads_q: int, heads_kv: int, len_q: int, len_k: int, head_dim: int,
                   dtype_bytes: int, causal: bool, *, head_dim_v: int | None = None,
                   align: str = "bottom_right") -> Work:
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


def _attention_dims(t: _Tensor, layout: str, op: str) -> tuple[int, int, int, int]:
    """(batch, heads, len, dim) of a q/k/v tensor."""
    if layout == "blhd":
        if len(t.shape) != 4:
            raise _Unpriced(f"{op} on packed variable-length sequences: per-sequence lengths "
                            "are in cu_seqlens tensors, which the trace does not record")
        batch, length, heads, dim = t.shape
        return batch, heads, length, dim
    if len(t.shape) < 2:
        raise _Unpriced(f"{op}: query/key/value need at least 2 dims, got {t.shape}")
    heads = t.shape[-3] if len(t.shape) >= 3 else 1
    return math.prod(t.shape[:-3]), heads, t.shape[-2], t.shape[-1]


def _attention(args: _Args) -> OpCost:
    sig = _ATTENTION_OPS[args.op]
    q, k, v = args.tensor(0), args.tensor(1), args.tensor(2)
    batch, heads_q, len_q, dim = _attention_dims(q, sig.layout, args.op)
    _, heads_kv, len_k, dim_k = _attention_dims(k, sig.layout, args.op)
    _, _, _, dim_v = _attention_dims(v, sig.layout, args.op)
    if dim_k != dim or heads_kv <= 0 or heads_q % heads_kv:
        raise _Unpriced(f"{args.op}: q {q.shape} and k {k.shape} do not fit (GQA needs Hq % Hkv == 0)")
    mask = args.maybe_tensor(sig.mask_arg) if sig.mask_arg is not None else None
    align = sig.align
    if mask is not None:
        causal = False  # an explicit mask: the kernel scores every pair, then masks
    elif sig.mask_type_arg is not None:
        mask_type = args.text(sig.mask_type_arg)
        if mask_type not in ("0", "1", "2"):
            raise _Unpriced(f"custom_mask_type of {args.op} not recorded")
        causal, align = mask_type != "0", "bottom_right" if mask_type == "2" else "top_left"
    elif len_q == 1 and align == "bottom_right":
        causal = False  # one query row against the whole cache either way
    else:
        causal = args.flag(sig.causal_arg, "is_causal")
    work = attention_cost(batch, heads_q, heads_kv, len_q, len_k, dim, q.size, causal,
                          head_dim_v=dim_v, align=align)
    # attention_cost assumes one dtype; K/V (e.g. fp8 cache) and the mask keep their own.
    kv_delta = (k.size - q.size) * k.numel + (v.size - q.size) * v.numel
    mask_bytes = mask.nbytes if mask is not None else 0
    kind = f"causal ({align})" if causal else "full"
    note = (f"2*B*Hq*pairs*(D+Dv), {kind} pairs; B={batch} Hq={heads_q} Hkv={heads_kv} "
            f"Lq={len_q} Lk={len_k} D={dim} Dv={dim_v}; bytes = q + k + v (+ mask) + out")
    return OpCost(work.flops, work.bytes + kv_delta + mask_bytes, q.dtype, MATRIX, note)


# ---------------------------------------------------------------- vector ops


def _vector(flops: float, read: float, written: float, dtype: str, note: str) -> OpCost:
    return OpCost(float(flops), float(read + written), dtype, VECTOR, note)


def _norm(args: _Args) -> OpCost:
    x = args.tensor(0)
    rms = "rms" in args.op
    weight = args.maybe_tensor(2)
    bias = None if rms else args.maybe_tensor(3)
    per_element = (RMS_NORM_FLOPS if rms else LAYER_NORM_FLOPS) + AFFINE_FLOPS * (
        (weight is not None) + (bias is not None))
    params = sum(t.nbytes for t in (weight, bias) if t is not None)
    # Schemas that return per-row statistics write them too (accumulate type: >= fp32).
    n_stats = {"aten::native_layer_norm": 2, "aten::_fused_rms_norm": 1}.get(args.op, 0)
    stats = 0
    if n_stats:
        normalized = args.int_list(1)
        if normalized is None:
            raise _Unpriced(f"normalized_shape of {args.op} not recorded")
        rows = x.numel // max(1, math.prod(normalized))
        stats = n_stats * rows * max(4, x.size)
    note = f"{per_element} flops/element over {x.numel} elements; bytes = input + params + output"
    return _vector(per_element * x.numel, x.nbytes + params, x.nbytes + stats, x.dtype, note)


def _softmax(args: _Args) -> OpCost:
    x = args.tensor(0)
    if args.op in ("aten::_softmax", "aten::_log_softmax"):
        out_size, out_dtype = (4, "fp32") if args.text(2) == "True" else (x.size, x.dtype)
    else:
        out = args.scalar_type(2)
        out_dtype, out_size = out if out else (x.dtype, x.size)
    note = f"{SOFTMAX_FLOPS} flops/element over {x.numel} elements; bytes = input + output"
    return _vector(SOFTMAX_FLOPS * x.numel, x.nbytes, x.numel * out_size, out_dtype, note)


def _elementwise(args: _Args) -> OpCost:
    base = args.op if args.op in ELEMENTWISE_FLOPS else args.op[:-1]
    tensors = [t for t in (args.maybe_tensor(i) for i in range(len(args))) if t is not None]
    if not tensors:
        raise _Unpriced(f"{args.op} has no recorded tensor inputs")
    out_shape = _broadcast([t.shape for t in tensors])
    out_numel = math.prod(out_shape)
    if base in _COMPARISONS:
        out_dtype, out_size = "bool", 1
    elif args.op.endswith("_"):
        out_dtype, out_size = tensors[0].dtype, tensors[0].size  # in place: self keeps its type
    else:
        # Type promotion, simplified: the widest dimensioned operand (0-d tensors are
        # wrapped Python numbers, which do not promote).
        shaped = [t for t in tensors if t.shape] or tensors
        widest = max(shaped, key=lambda t: t.size)
        out_dtype, out_size = widest.dtype, widest.size
    per_element = ELEMENTWISE_FLOPS[base]
    alpha = args.text(2) if base in ("aten::add", "aten::sub") else None
    if alpha not in (None, "", "1"):
        per_element += 1  # x + alpha * y
    read = 0 if args.op in _WRITE_ONLY else sum(t.nbytes for t in tensors)
    note = f"{per_element} flops/output element over {out_numel}; bytes = inputs + output"
    return _vector(per_element * out_numel, read, out_numel * out_size, out_dtype, note)


def _reduced_numel(x: _Tensor, dims: list[int] | None) -> int:
    """Elements left after reducing ``dims`` (keepdim only changes the shape, not the count)."""
    if not dims:
        return 1
    reduced = {d % len(x.shape) for d in dims} if x.shape else set()
    return math.prod(s for i, s in enumerate(x.shape) if i not in reduced)


def _reduction(args: _Args) -> OpCost:
    x = args.tensor(0)
    if args.op in ("aten::max", "aten::min") and args.maybe_tensor(1) is not None:
        return _binary_extremum(args)
    out_dtype, out_size = x.dtype, x.size
    if len(args) >= 3:  # the dim overloads: (self, dim, keepdim, ...)
        if args.text(1) is None:
            raise _Unpriced(f"reduced dims of {args.op} not recorded (trace lacks Concrete Inputs)")
        out_numel = _reduced_numel(x, args.int_list(1))
    else:
        out_numel = 1  # full reduction
    if args.op in ("aten::sum", "aten::mean") and len(args) >= 4:
        out_dtype, out_size = args.scalar_type(3) or (out_dtype, out_size)
    written = out_numel * out_size
    if args.op in ("aten::argmax", "aten::argmin"):
        out_dtype, written = "int64", out_numel * 8
    elif args.op in ("aten::max", "aten::min") and len(args) >= 3:
        written += out_numel * 8  # values and int64 indices
    note = f"1 flop/input element over {x.numel}; bytes = input + output ({out_numel} elements)"
    return _vector(x.numel, x.nbytes, written, out_dtype, note)


def _binary_extremum(args: _Args) -> OpCost:
    """max(a, b) / min(a, b): the elementwise overload of a reduction op name."""
    return _elementwise(_Args({"aten::max": "aten::maximum", "aten::min": "aten::minimum"}[args.op],
                              args.dims, args.types, args.concrete))


def _embedding(args: _Args) -> OpCost:
    weight, indices = args.tensor(0), args.tensor(1)
    row = math.prod(weight.shape[1:])
    gathered = indices.numel * row * weight.size
    note = f"{indices.numel} rows of {row} gathered; bytes = rows read + indices + output"
    return _vector(0, gathered + indices.nbytes, gathered, weight.dtype, note)


def _index_select(args: _Args) -> OpCost:
    x, index = args.tensor(0), args.tensor(2)
    dim = args.int_list(1)
    if dim is None or not x.shape:
        raise _Unpriced(f"dim of {args.op} not recorded")
    axis = dim[0] % len(x.shape)
    gathered = x.numel // x.shape[axis] * index.numel * x.size if x.shape[axis] else 0
    note = f"{index.numel} slices along dim {axis}; bytes = slices read + index + output"
    return _vector(0, gathered + index.nbytes, gathered, x.dtype, note)


def _copy(args: _Args) -> OpCost:
    """copy_(dst, src): read src, write dst."""
    dst, src = args.tensor(0), args.tensor(1)
    return _vector(0, src.nbytes, dst.nbytes, dst.dtype, "bytes = source read + destination written")


def _to(args: _Args) -> OpCost:
    x = args.tensor(0)
    other = args.maybe_tensor(1)  # to.other: take the other tensor's dtype
    if other is not None:
        target: tuple[str, int] | None = (other.dtype, other.size)
    else:
        # to.device(self, device, dtype, ...) has 6 arguments; to.dtype, to.dtype_layout
        # and _to_copy put dtype at 1. An empty dtype keeps the input's.
        target = args.scalar_type(2 if args.op == "aten::to" and len(args) == 6 else 1)
    dtype, size = target or (x.dtype, x.size)
    return _vector(0, x.nbytes, x.numel * size, dtype, "bytes = input read + converted output written")


def _clone(args: _Args) -> OpCost:
    x = args.tensor(0)
    return _vector(0, x.nbytes, x.nbytes, x.dtype, "bytes = input read + copy written")


def _cat(args: _Args) -> OpCost:
    if args.types and args.types[0] == "TensorList":
        raise _Unpriced(f"{args.op}: the trace records its inputs as 'TensorList' without an "
                        "element type, so their bytes are unknown")
    raise _Unpriced(f"{args.op}: inputs not recorded as a tensor list")


# ---------------------------------------------------------------- serving engines' custom ops


def _fused_add_rms_norm(args: _Args) -> OpCost:
    """vLLM ``_C::fused_add_rms_norm(input, residual, weight, eps)``: residual += input, then
    input = rms_norm(residual) * weight, both in place: each of input and residual read and
    written once."""
    x, residual, weight = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    per = RMS_NORM_FLOPS + AFFINE_FLOPS + 1
    w = weight.nbytes if weight is not None else 0
    return _vector(per * x.numel, x.nbytes + residual.nbytes + w, x.nbytes + residual.nbytes, x.dtype,
                   f"{per} flops/element over {x.numel}; bytes = input and residual read and written + weight")


def _rms_norm_out(args: _Args) -> OpCost:
    """vLLM ``_C::rms_norm(out, input, weight, eps)`` (and its ``_static_fp8_quant`` forms)."""
    out, x, weight = args.tensor(0), args.tensor(1), args.maybe_tensor(2)
    per = RMS_NORM_FLOPS + AFFINE_FLOPS
    w = weight.nbytes if weight is not None else 0
    return _vector(per * x.numel, x.nbytes + w, out.nbytes, x.dtype,
                   f"{per} flops/element over {x.numel}; bytes = input + weight read, output written")


def _rotary(args: _Args) -> OpCost:
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
    return _vector(3 * rotated, moved + table + positions.nbytes, moved, q.dtype,
                   f"3 flops per rotated element ({rotated}); bytes = query and key read and written + cos/sin rows")


def _quant(args: _Args) -> OpCost:
    """Activation quantisation ``(out, input, scale, ...)``: input read, low-precision output written."""
    out, x = args.tensor(0), args.tensor(1)
    scales = sum(t.nbytes for t in (args.maybe_tensor(i) for i in range(2, len(args))) if t is not None)
    return _vector(QUANT_FLOPS * x.numel, x.nbytes, out.nbytes + scales, x.dtype,
                   f"{QUANT_FLOPS} flops/element (scale, round) over {x.numel}; bytes = input read + output and scales written")


def _reshape_and_cache(args: _Args) -> OpCost:
    """vLLM ``reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, ...)``:
    the step's new keys and values read, written into the cache at its element size."""
    key, value, key_cache = args.tensor(0), args.tensor(1), args.tensor(2)
    slots = args.maybe_tensor(4)
    written = (key.numel + value.numel) * key_cache.size
    return _vector(0, key.nbytes + value.nbytes + (slots.nbytes if slots is not None else 0), written,
                   key.dtype, f"{key.numel + value.numel} new key/value elements written at {key_cache.size} "
                              "byte(s) each (the cache's dtype)")


QUANT_FLOPS = 2


@dataclass(frozen=True)
class OpContext:
    """What an op's shapes do not say and the run does: the tensor-parallel degree, the step's
    attention geometry, the KV cache's element size, and the model (experts, top-k)."""

    tp: int = 1
    pairs: float | None = None  # query-key pairs of the op's layer in its step
    keys: float | None = None  # keys read per layer
    kv_bytes: float | None = None
    model: object | None = None  # tracekit.models.ModelSpec
    window_note: str = ""


def _collective(args: _Args, ctx: OpContext) -> OpCost:
    """An all-reduce of one tensor across ``tp`` ranks: a ring moves 2 (N-1)/N of it per rank
    (NVLink SHARP / multimem does no better per rank in its link traffic)."""
    x = args.tensor(0)
    n = max(ctx.tp, 1)
    if n == 1:
        raise _Unpriced(f"{args.op} on one rank moves nothing across a link (tensor-parallel degree 1)")
    ring = 2 * (n - 1) / n
    return OpCost(float((n - 1) / n * x.numel), float(ring * x.nbytes), x.dtype, VECTOR,
                  f"all-reduce of {x.numel} elements over N={n} ranks: 2(N-1)/N of the tensor per rank")


def _unified_attention(args: _Args, ctx: OpContext) -> OpCost:
    """vLLM ``unified_attention_with_output(query [T,Hq,D], key [T,Hkv,D], value [T,Hkv,Dv], output, ...)``:
    the shapes give heads and head dims, the step's annotation the query-key pairs and keys read."""
    q, k, v = args.tensor(0), args.tensor(1), args.tensor(2)
    if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        raise _Unpriced(f"{args.op}: expected [tokens, heads, head dim] query, key and value")
    if ctx.pairs is None or ctx.keys is None:
        raise _Unpriced(f"{args.op}: the step's query-key pairs are not in its annotation (vLLM's detailed "
                        "execute_... form states them)")
    tokens, hq, d = q.shape
    _, hkv, dv = v.shape
    kv = ctx.kv_bytes if ctx.kv_bytes is not None else k.size
    flops = 2 * hq * ctx.pairs * (d + dv)
    nbytes = ctx.keys * hkv * (d + dv) * kv + q.nbytes + tokens * hq * dv * v.size
    return OpCost(float(flops), float(nbytes), q.dtype, MATRIX,
                  f"2*Hq*pairs*(D+Dv), Hq={hq} Hkv={hkv} D={d} Dv={dv}, pairs={ctx.pairs:g} and keys={ctx.keys:g} "
                  f"from the step{ctx.window_note}; bytes = keys x Hkv x (D+Dv) at {kv:g} B + query + output")


def _moe_forward(args: _Args, ctx: OpContext) -> OpCost:
    """vLLM ``moe_forward(hidden [T, H], router_logits [T, E], ...)``: one MoE layer's routed experts
    and routing, T and E from the shapes, top-k and expert sizes from the model."""
    x, logits = args.tensor(0), args.tensor(1)
    m = ctx.model
    if m is None:
        raise _Unpriced(f"{args.op}: its cost needs the model's top-k and expert sizes (pass --model)")
    from tracekit.models import costs as mc

    tokens = float(x.shape[0]) if x.shape else 0.0
    side = mc.Side(requests=tokens, tokens=tokens, kv_tokens=None, pairs=None, logit_tokens=0.0)
    work = mc.step_costs(m, side, tp=ctx.tp, act_bytes=float(x.size), act_dtype=x.dtype)
    layers = max(m.count(mlp="moe"), 1)
    experts, routing = work.get("experts"), work.get("routing")
    if not isinstance(experts, mc.Work):
        raise _Unpriced(f"{args.op}: the model {getattr(m, 'name', '')} has no routed experts")
    e = logits.shape[-1] if logits.shape else m.experts
    flops = (experts.flops + (routing.flops if isinstance(routing, mc.Work) else 0)) / layers
    nbytes = (experts.bytes + (routing.bytes if isinstance(routing, mc.Work) else 0)) / layers
    return OpCost(float(flops), float(nbytes), experts.dtype, MATRIX,
                  f"one MoE layer: T={tokens:g} tokens over E={e} experts (router logits), top-{m.top_k} and "
                  f"expert width {m.expert_intermediate} from the model; {experts.note}")


# Ops whose cost needs the run's context (``OpContext``); priced by ``price_in_context``.
CONTEXT_MODELS: dict[str, Callable[[_Args, OpContext], OpCost]] = {
    "vllm::unified_attention_with_output": _unified_attention,
    "vllm::unified_attention": _unified_attention,
    "vllm::moe_forward": _moe_forward,
    "vllm::moe_forward_shared": _moe_forward,
    **{name: _collective for name in ("symm_mem::multimem_all_reduce_", "symm_mem::one_shot_all_reduce",
                                      "symm_mem::two_shot_all_reduce_", "_C_custom_ar::all_reduce",
                                      "c10d::allreduce_", "sgl_kernel::all_reduce", "vllm::outplace_all_reduce")},
}


_MODELS: dict[str, Callable[[_Args], OpCost]] = {
    "_C::fused_add_rms_norm": _fused_add_rms_norm,
    "_C::rms_norm": _rms_norm_out,
    "_C::rms_norm_static_fp8_quant": _rms_norm_out,
    "_C::rotary_embedding": _rotary,
    "sgl_kernel::rotary_embedding": _rotary,
    **{name: _quant for name in ("_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
                                 "_C::dynamic_per_token_scaled_fp8_quant", "_C::scaled_fp4_quant")},
    "_C_cache_ops::reshape_and_cache_flash": _reshape_and_cache,
    "_C_cache_ops::reshape_and_cache": _reshape_and_cache,
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
    **{name: _norm for name in ("aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm",
                                "aten::_fused_rms_norm")},
    **{name: _softmax for name in ("aten::softmax", "aten::_softmax", "aten::log_softmax",
                                   "aten::_log_softmax")},
    **{name: _elementwise for name in ELEMENTWISE_FLOPS},
    **{name: _reduction for name in ("aten::sum", "aten::mean", "aten::max", "aten::min",
                                     "aten::amax", "aten::amin", "aten::argmax", "aten::argmin")},
    "aten::embedding": _embedding,
    "aten::index_select": _index_select,
    "aten::copy_": _copy,
    "aten::to": _to,
    "aten::_to_copy": _to,
    "aten::contiguous": _clone,
    "aten::clone": _clone,
    "aten::cat": _cat,
}


def _model(op_name: str) -> Callable[[_Args], OpCost] | None:
    model = _MODELS.get(op_name)
    # In-place variants (aten::add_, aten::mul_) share the out-of-place elementwise model.
    if model is None and op_name.endswith("_") and op_name[:-1] in ELEMENTWISE_FLOPS:
        model = _elementwise
    return model


def has_model(op_name: str) -> bool:
    """True when ``op_name`` has a cost model (shapes, and for some ops the run's context, permitting)."""
    return _model(op_name) is not None or op_name in CONTEXT_MODELS


def needs_context(op_name: str) -> bool:
    return op_name in CONTEXT_MODELS


def price_in_context(op_name: str, dims_json: str | None, types_json: str | None, concrete_json: str | None,
                     ctx: OpContext) -> OpCost | NoCost:
    """``price`` for the ops whose cost needs the run's context (see ``CONTEXT_MODELS``)."""
    model = CONTEXT_MODELS.get(op_name)
    if model is None:
        return op_cost_json(op_name, dims_json, types_json, concrete_json)
    decoded = _decoded(op_name, dims_json, types_json, concrete_json)
    if isinstance(decoded, NoCost):
        return decoded
    dims, types, concrete = decoded
    if not dims or not types:
        return NoCost(f"{op_name}: input shapes not recorded (profile with record_shapes=True)")
    try:
        return model(_Args(op_name, dims, types, concrete), ctx)
    except _Unpriced as err:
        return NoCost(str(err))
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError) as err:
        return NoCost(f"{op_name}: recorded shapes do not fit the model ({err})")


def price(op_name: str, input_dims: list | None, input_types: list | None,
          concrete_inputs: list | None = None) -> OpCost | NoCost:
    """Cost of one op call, or the reason it has none."""
    model = _model(op_name)
    if model is None:
        return NoCost(f"no cost model for {op_name}")
    if not input_dims or not input_types:
        return NoCost(f"{op_name}: input shapes not recorded (profile with record_shapes=True)")
    try:
        return model(_Args(op_name, input_dims, input_types, concrete_inputs))
    except _Unpriced as err:
        return NoCost(str(err))
    except (ValueError, TypeError, IndexError, KeyError) as err:
        # Trace contents are untrusted: a malformed record is a reason, not a crash.
        return NoCost(f"{op_name}: recorded shapes do not fit the model ({err})")


def op_cost(op_name: str, input_dims: list | None, input_types: list | None,
            concrete_inputs: list | None = None) -> OpCost | None:
    """Cost of one op call; None when it has none (``why_no_cost`` says why)."""
    result = price(op_name, input_dims, input_types, concrete_inputs)
    return result if isinstance(result, OpCost) else None


def why_no_cost(op_name: str, input_dims: list | None, input_types: list | None = None,
                concrete_inputs: list | None = None) -> str:
    """Why ``op_cost`` returns None for these arguments; "" when it returns a cost."""
    result = price(op_name, input_dims, input_types, concrete_inputs)
    return result.reason if isinstance(result, NoCost) else ""


@lru_cache(maxsize=1 << 16)
def op_cost_json(op_name: str, dims_json: str | None, types_json: str | None,
                 concrete_json: str | None = None) -> OpCost | NoCost:
    """``price`` on the raw JSON text a trace stores, cached: shapes repeat thousands of times."""
    decoded = _decoded(op_name, dims_json, types_json, concrete_json)
    return decoded if isinstance(decoded, NoCost) else price(op_name, *decoded)


def _decoded(op_name: str, dims_json: str | None, types_json: str | None, concrete_json: str | None):
    """(Input Dims, Input type, Concrete Inputs) decoded from a trace's JSON text, or why not."""
    try:
        return (json.loads(dims_json) if dims_json else None, json.loads(types_json) if types_json else None,
                json.loads(concrete_json) if concrete_json else None)
    except json.JSONDecodeError as err:
        return NoCost(f"{op_name}: shape record is not valid JSON ({err.msg})")
