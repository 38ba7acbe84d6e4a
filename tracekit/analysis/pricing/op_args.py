"""What every per-op cost model takes and gives: the recorded arguments of one op call and its cost.

Takes the profiler's ``record_shapes=True`` record of a call (``Input Dims``, ``Input type``,
``Concrete Inputs``, see ``op_costs``) through ``Args``, whose typed accessors give tensors (shape,
dtype, element size), flags, dtype codes and int lists, raising ``Unpriced`` with the reason where
the record lacks them; and ``OpContext``, what the run tells beyond the shapes. Gives the cost
vocabulary: ``OpCost`` in a unit (``MATRIX``, ``VECTOR``) or ``NoCost`` with the reason. The
dispatcher (``op_costs``) and the op modules (``matrix_ops``, ``vector_ops``, ``engine_ops``) all
build on this module, so the op modules never import the dispatcher back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tracekit.models.config import ModelSpec
from tracekit.models.costs import MATRIX as MODEL_MATRIX
from tracekit.models.costs import VECTOR as MODEL_VECTOR
from tracekit.models.costs import Missing as ModelMissing
from tracekit.models.costs import Work as ModelWork

MATRIX, VECTOR = MODEL_MATRIX, MODEL_VECTOR  # the units, one spelling for both cost paths


# One cost value for both paths: an op priced from its shapes, a component priced from the
# model. NoCost says why an op could not be priced (shown as "cost unknown because ...").
OpCost = ModelWork
NoCost = ModelMissing


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
    0: ("uint8", 1),
    1: ("int8", 1),
    2: ("int16", 2),
    3: ("int32", 4),
    4: ("int64", 8),
    5: ("fp16", 2),
    6: ("fp32", 4),
    7: ("fp64", 8),
    8: ("complex32", 4),
    9: ("complex64", 8),
    10: ("complex128", 16),
    11: ("bool", 1),
    15: ("bf16", 2),
    23: ("fp8", 1),
    24: ("fp8", 1),
    25: ("fp8", 1),
    26: ("fp8", 1),
    27: ("uint16", 2),
    28: ("uint32", 4),
    29: ("uint64", 8),
    44: ("fp8", 1),
    45: ("fp4", 1),
}

# Type strings that mark an argument as not a tensor.
_NOT_TENSOR = {
    "",
    "Scalar",
    "ScalarList",
    "TensorList",
    "GenericList",
    "Device",
    "Layout",
    "MemoryFormat",
    "ScalarType",
    "str",
    "None",
}


class Unpriced(Exception):
    """Raised inside a model; ``op_costs.price`` turns it into ``NoCost``."""


@dataclass(frozen=True)
class Tensor:
    """One recorded tensor argument: its shape, dtype and bytes per element."""

    shape: tuple[int, ...]
    dtype: str
    size: int  # bytes per element

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.size


class Args:
    """The recorded arguments of one op call, with typed accessors."""

    def __init__(self, op: str, dims: list, types: list, concrete: list | None) -> None:
        self.op, self.dims, self.types, self.concrete = op, dims, types, concrete

    def __len__(self) -> int:
        return len(self.dims)

    def tensor(self, i: int) -> Tensor:
        t = self.maybe_tensor(i)
        if t is None:
            raise Unpriced(f"argument {i} of {self.op} is not a recorded tensor")
        return t

    def maybe_tensor(self, i: int) -> Tensor | None:
        """Argument i as a tensor; None where it is absent, None-valued or not a tensor."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        type_name = self.types[i]
        if type_name in _NOT_TENSOR:
            return None
        if type_name not in DTYPES:
            raise Unpriced(f"unknown element type {type_name!r} in {self.op}")
        shape = self.dims[i]
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise Unpriced(f"argument {i} of {self.op} has no usable shape: {shape!r}")
        dtype, size = DTYPES[type_name]
        return Tensor(tuple(shape), dtype, size)

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
        raise Unpriced(f"{what} of {self.op} not recorded (trace lacks Concrete Inputs)")

    def scalar_type(self, i: int) -> tuple[str, int] | None:
        """A ScalarType argument (e.g. "15" = bf16); None when it is None/unrecorded."""
        value = self.text(i)
        if not value:
            return None
        try:
            return SCALAR_TYPE_CODES[int(value)]
        except (ValueError, KeyError):
            raise Unpriced(f"unknown dtype code {value!r} in {self.op}") from None

    def int_list(self, i: int) -> list[int] | None:
        """An int / int[] argument ("[-1]", "-1", "[1, 2]"); None when None or unrecorded."""
        value = self.text(i)
        if not value:
            return None
        parsed = json.loads(value)
        return [int(v) for v in parsed] if isinstance(parsed, list) else [int(parsed)]


def broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to; ``Unpriced`` where they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, start=rank - len(shape)):
            if d != 1:
                if out[i] not in (1, d):
                    raise Unpriced(f"shapes {list(shapes)} do not broadcast")
                out[i] = d
    return tuple(out)


@dataclass(frozen=True)
class OpContext:
    """What an op's shapes do not say and the run does: the tensor-parallel degree, the step's
    attention geometry, the KV cache's element size, and the model (experts, top-k)."""

    tp: int = 1
    pairs: float | None = None  # query-key pairs of the op's layer in its step
    keys: float | None = None  # keys read per layer
    kv_bytes: float | None = None
    model: ModelSpec | None = None
    window_note: str = ""
