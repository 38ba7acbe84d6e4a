"""Per-op cost models: FLOPs and memory bytes of an aten op from its recorded shapes.

Input is what the profiler records with ``record_shapes=True``: ``Input Dims`` (one entry
per argument: a shape list, ``[]`` for non-tensors and 0-d tensors, a list of shapes for
TensorList arguments), ``Input type`` (``"c10::BFloat16"``, ``"float"``, ``"Scalar"``,
``""`` for None/unrecorded, ...) and ``Concrete Inputs`` (scalar argument values as text).

Conventions, shared by every per-op model (here and in the op modules below):

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

The models live by the unit they run on: ``matrix_ops`` (GEMM, attention), ``vector_ops``
(elementwise, norms, softmax, reductions, gathers, copies) and ``engine_ops`` (serving engines'
custom ops: ``engine_vector``, ``engine_attention``, ``engine_moe``; some priced with the run's
``OpContext``), over the argument readers and cost types of ``op_args``. Op names are looked up
as ``engine_ops.canonical`` writes them (a kernel-shape profiler wrapper without its counter). This module dispatches an op name to its model and is the entry point:
``price``, ``op_cost``, ``why_no_cost``, ``op_cost_json``, ``price_in_context``, ``has_model``,
``needs_context``. The cost types they take and give (``OpCost``, ``NoCost``, ``OpContext``, the
units ``MATRIX`` and ``VECTOR``) are ``op_args``'.

Which op of a nesting gets the cost is the caller's choice; the rule this module is
built and tested for is: price the *outermost* op that ``has_model`` and skip its
descendants (``aten::linear`` is priced, its ``aten::addmm`` is not), and only ops whose
subtree launched GPU work (a contiguous on a contiguous tensor copies nothing).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache

from tracekit.analysis.pricing.engine_ops import CONTEXT_MODELS, ENGINE_MODELS, canonical
from tracekit.analysis.pricing.matrix_ops import MATRIX_MODELS
from tracekit.analysis.pricing.op_args import Args, NoCost, OpContext, OpCost, Unpriced
from tracekit.analysis.pricing.vector_ops import ELEMENTWISE_FLOPS, VECTOR_MODELS, elementwise

# Op -> cost model from its shapes: the engine, matrix and vector ops' tables, in that order.
_MODELS: dict[str, Callable[[Args], OpCost]] = {**ENGINE_MODELS, **MATRIX_MODELS, **VECTOR_MODELS}


def _model(op_name: str) -> Callable[[Args], OpCost] | None:
    model = _MODELS.get(canonical(op_name))
    # In-place variants (aten::add_, aten::mul_) share the out-of-place elementwise model.
    if model is None and op_name.endswith("_") and op_name[:-1] in ELEMENTWISE_FLOPS:
        model = elementwise
    return model


def has_model(op_name: str) -> bool:
    """True when ``op_name`` has a cost model (shapes, and for some ops the run's context, permitting)."""
    return _model(op_name) is not None or canonical(op_name) in CONTEXT_MODELS


def needs_context(op_name: str) -> bool:
    """True when ``op_name``'s cost needs the run's context (``price_in_context``, ``CONTEXT_MODELS``)."""
    return canonical(op_name) in CONTEXT_MODELS


def price_in_context(
    op_name: str, dims_json: str | None, types_json: str | None, concrete_json: str | None, ctx: OpContext
) -> OpCost | NoCost:
    """``price`` for the ops whose cost needs the run's context (see ``CONTEXT_MODELS``)."""
    model = CONTEXT_MODELS.get(canonical(op_name))
    if model is None:
        return op_cost_json(op_name, dims_json, types_json, concrete_json)
    decoded = _decoded(op_name, dims_json, types_json, concrete_json)
    if isinstance(decoded, NoCost):
        return decoded
    dims, types, concrete = decoded
    if not dims or not types:
        return NoCost(f"{op_name}: input shapes not recorded (profile with record_shapes=True)")
    try:
        return model(Args(op_name, dims, types, concrete), ctx)
    except Unpriced as err:
        return NoCost(str(err))
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError) as err:
        return NoCost(f"{op_name}: recorded shapes do not fit the model ({err})")


def price(
    op_name: str, input_dims: list | None, input_types: list | None, concrete_inputs: list | None = None
) -> OpCost | NoCost:
    """Cost of one op call, or the reason it has none."""
    model = _model(op_name)
    if model is None:
        return NoCost(f"no cost model for {op_name}")
    if not input_dims or not input_types:
        return NoCost(f"{op_name}: input shapes not recorded (profile with record_shapes=True)")
    try:
        return model(Args(op_name, input_dims, input_types, concrete_inputs))
    except Unpriced as err:
        return NoCost(str(err))
    except (ValueError, TypeError, IndexError, KeyError) as err:
        # Trace contents are untrusted: a malformed record is a reason, not a crash.
        return NoCost(f"{op_name}: recorded shapes do not fit the model ({err})")


def op_cost(
    op_name: str, input_dims: list | None, input_types: list | None, concrete_inputs: list | None = None
) -> OpCost | None:
    """Cost of one op call; None when it has none (``why_no_cost`` says why)."""
    result = price(op_name, input_dims, input_types, concrete_inputs)
    return result if isinstance(result, OpCost) else None


def why_no_cost(
    op_name: str, input_dims: list | None, input_types: list | None = None, concrete_inputs: list | None = None
) -> str:
    """Why ``op_cost`` returns None for these arguments; "" when it returns a cost."""
    result = price(op_name, input_dims, input_types, concrete_inputs)
    return result.reason if isinstance(result, NoCost) else ""


@lru_cache(maxsize=1 << 16)
def op_cost_json(
    op_name: str, dims_json: str | None, types_json: str | None, concrete_json: str | None = None
) -> OpCost | NoCost:
    """``price`` on the raw JSON text a trace stores, cached: shapes repeat thousands of times."""
    decoded = _decoded(op_name, dims_json, types_json, concrete_json)
    return decoded if isinstance(decoded, NoCost) else price(op_name, *decoded)


def _decoded(op_name: str, dims_json: str | None, types_json: str | None, concrete_json: str | None):
    """(Input Dims, Input type, Concrete Inputs) decoded from a trace's JSON text, or why not."""
    try:
        return (
            json.loads(dims_json) if dims_json else None,
            json.loads(types_json) if types_json else None,
            json.loads(concrete_json) if concrete_json else None,
        )
    except json.JSONDecodeError as err:
        return NoCost(f"{op_name}: shape record is not valid JSON ({err.msg})")
