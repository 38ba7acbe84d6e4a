"""Cost models of the vector-unit aten ops: elementwise, norms, softmax, reductions, gathers
(embedding, index_select) and copies/conversions, from an op call's recorded ``Args``.

Each takes the call's ``Args`` and gives an ``OpCost`` in the ``VECTOR`` unit (``ELEMENTWISE_FLOPS``
and the per-element norm/softmax counts below; bytes each input read once and the output written
once: the conventions of ``op_costs``), or raises ``Unpriced`` with the reason. ``VECTOR_MODELS``
is their op -> model table, which ``op_costs`` dispatches through.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tracekit.analysis.pricing.op_args import VECTOR, Args, OpCost, Tensor, Unpriced, broadcast

# FLOPs per output element of elementwise ops (in-place ``op_`` variants share the entry).
ELEMENTWISE_FLOPS: dict[str, int] = {
    **{
        f"aten::{name}": 1
        for name in (
            "add",
            "sub",
            "rsub",
            "mul",
            "div",
            "neg",
            "abs",
            "rsqrt",
            "sqrt",
            "reciprocal",
            "pow",
            "square",
            "exp",
            "log",
            "cos",
            "sin",
            "tanh",
            "erf",
            "relu",
            "clamp",
            "clamp_min",
            "clamp_max",
            "maximum",
            "minimum",
            "where",
            "masked_fill",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
        )
    },
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


# ---------------------------------------------------------------- vector ops


def vector_cost(flops: float, read: float, written: float, dtype: str, note: str) -> OpCost:
    """A ``VECTOR`` cost of ``flops`` and the bytes read plus written."""
    return OpCost(float(flops), float(read + written), dtype, VECTOR, note)


def _norm(args: Args) -> OpCost:
    x = args.tensor(0)
    rms = "rms" in args.op
    weight = args.maybe_tensor(2)
    bias = None if rms else args.maybe_tensor(3)
    per_element = (RMS_NORM_FLOPS if rms else LAYER_NORM_FLOPS) + AFFINE_FLOPS * (
        (weight is not None) + (bias is not None)
    )
    params = sum(t.nbytes for t in (weight, bias) if t is not None)
    # Schemas that return per-row statistics write them too (accumulate type: >= fp32).
    n_stats = {"aten::native_layer_norm": 2, "aten::_fused_rms_norm": 1}.get(args.op, 0)
    stats = 0
    if n_stats:
        normalized = args.int_list(1)
        if normalized is None:
            raise Unpriced(f"normalized_shape of {args.op} not recorded")
        rows = x.numel // max(1, math.prod(normalized))
        stats = n_stats * rows * max(4, x.size)
    note = f"{per_element} flops/element over {x.numel} elements; bytes = input + params + output"
    return vector_cost(per_element * x.numel, x.nbytes + params, x.nbytes + stats, x.dtype, note)


def _softmax(args: Args) -> OpCost:
    x = args.tensor(0)
    if args.op in ("aten::_softmax", "aten::_log_softmax"):
        out_size, out_dtype = (4, "fp32") if args.text(2) == "True" else (x.size, x.dtype)
    else:
        out = args.scalar_type(2)
        out_dtype, out_size = out if out else (x.dtype, x.size)
    note = f"{SOFTMAX_FLOPS} flops/element over {x.numel} elements; bytes = input + output"
    return vector_cost(SOFTMAX_FLOPS * x.numel, x.nbytes, x.numel * out_size, out_dtype, note)


def elementwise(args: Args) -> OpCost:
    """An elementwise op (or its in-place ``op_`` form): ``ELEMENTWISE_FLOPS`` per broadcast output element."""
    base = args.op if args.op in ELEMENTWISE_FLOPS else args.op[:-1]
    tensors = [t for t in (args.maybe_tensor(i) for i in range(len(args))) if t is not None]
    if not tensors:
        raise Unpriced(f"{args.op} has no recorded tensor inputs")
    out_shape = broadcast([t.shape for t in tensors])
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
    return vector_cost(per_element * out_numel, read, out_numel * out_size, out_dtype, note)


def _reduced_numel(x: Tensor, dims: list[int] | None) -> int:
    """Elements left after reducing ``dims`` (keepdim only changes the shape, not the count)."""
    if not dims:
        return 1
    reduced = {d % len(x.shape) for d in dims} if x.shape else set()
    return math.prod(s for i, s in enumerate(x.shape) if i not in reduced)


def _reduction(args: Args) -> OpCost:
    x = args.tensor(0)
    if args.op in ("aten::max", "aten::min") and args.maybe_tensor(1) is not None:
        return _binary_extremum(args)
    out_dtype, out_size = x.dtype, x.size
    if len(args) >= 3:  # the dim overloads: (self, dim, keepdim, ...)
        if args.text(1) is None:
            raise Unpriced(f"reduced dims of {args.op} not recorded (trace lacks Concrete Inputs)")
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
    return vector_cost(x.numel, x.nbytes, written, out_dtype, note)


def _binary_extremum(args: Args) -> OpCost:
    """max(a, b) / min(a, b): the elementwise overload of a reduction op name."""
    return elementwise(
        Args(
            {"aten::max": "aten::maximum", "aten::min": "aten::minimum"}[args.op], args.dims, args.types, args.concrete
        )
    )


def _embedding(args: Args) -> OpCost:
    weight, indices = args.tensor(0), args.tensor(1)
    row = math.prod(weight.shape[1:])
    gathered = indices.numel * row * weight.size
    note = f"{indices.numel} rows of {row} gathered; bytes = rows read + indices + output"
    return vector_cost(0, gathered + indices.nbytes, gathered, weight.dtype, note)


def _index_select(args: Args) -> OpCost:
    x, index = args.tensor(0), args.tensor(2)
    dim = args.int_list(1)
    if dim is None or not x.shape:
        raise Unpriced(f"dim of {args.op} not recorded")
    axis = dim[0] % len(x.shape)
    gathered = x.numel // x.shape[axis] * index.numel * x.size if x.shape[axis] else 0
    note = f"{index.numel} slices along dim {axis}; bytes = slices read + index + output"
    return vector_cost(0, gathered + index.nbytes, gathered, x.dtype, note)


def _copy(args: Args) -> OpCost:
    """copy_(dst, src): read src, write dst."""
    dst, src = args.tensor(0), args.tensor(1)
    return vector_cost(0, src.nbytes, dst.nbytes, dst.dtype, "bytes = source read + destination written")


def _to(args: Args) -> OpCost:
    x = args.tensor(0)
    other = args.maybe_tensor(1)  # to.other: take the other tensor's dtype
    if other is not None:
        target: tuple[str, int] | None = (other.dtype, other.size)
    else:
        # to.device(self, device, dtype, ...) has 6 arguments; to.dtype, to.dtype_layout
        # and _to_copy put dtype at 1. An empty dtype keeps the input's.
        target = args.scalar_type(2 if args.op == "aten::to" and len(args) == 6 else 1)
    dtype, size = target or (x.dtype, x.size)
    return vector_cost(0, x.nbytes, x.numel * size, dtype, "bytes = input read + converted output written")


def _clone(args: Args) -> OpCost:
    x = args.tensor(0)
    return vector_cost(0, x.nbytes, x.nbytes, x.dtype, "bytes = input read + copy written")


def _cumsum(args: Args) -> OpCost:
    """cumsum(self, dim, dtype=None): one add per element (a scan's n - 1 per row, counted n as
    for the other reductions); the input read and a same-shaped output written, at the dtype
    the op states (``dtype``), else the input's, except that integral and bool inputs sum into
    int64 (torch.cumsum's documented promotion, as torch.sum's)."""
    x = args.tensor(0)
    stated = args.scalar_type(2) if len(args) >= 3 else None
    integral = x.dtype.startswith(("int", "uint", "bool"))
    dtype, size = stated or (("int64", 8) if integral else (x.dtype, x.size))
    return vector_cost(
        x.numel, x.nbytes, x.numel * size, dtype, f"1 flop/element over {x.numel}; bytes = input + same-shaped output"
    )


def _cat(args: Args) -> OpCost:
    if args.types and args.types[0] == "TensorList":
        raise Unpriced(
            f"{args.op}: the trace records its inputs as 'TensorList' without an "
            "element type, so their bytes are unknown"
        )
    raise Unpriced(f"{args.op}: inputs not recorded as a tensor list")


# Op -> cost model of the vector ops (``op_costs`` dispatches through it; in-place elementwise
# variants such as ``aten::add_`` are found by ``op_costs`` from ``ELEMENTWISE_FLOPS``).
VECTOR_MODELS: dict[str, Callable[[Args], OpCost]] = {
    **{
        name: _norm
        for name in ("aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm")
    },
    **{name: _softmax for name in ("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax")},
    **{name: elementwise for name in ELEMENTWISE_FLOPS},
    **{
        name: _reduction
        for name in (
            "aten::sum",
            "aten::mean",
            "aten::max",
            "aten::min",
            "aten::amax",
            "aten::amin",
            "aten::argmax",
            "aten::argmin",
        )
    },
    "aten::embedding": _embedding,
    "aten::index_select": _index_select,
    "aten::copy_": _copy,
    "aten::to": _to,
    "aten::_to_copy": _to,
    "aten::contiguous": _clone,
    "aten::clone": _clone,
    "aten::cat": _cat,
    "aten::cumsum": _cumsum,
}
