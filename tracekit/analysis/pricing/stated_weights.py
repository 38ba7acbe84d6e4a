"""The weight precision a trace's GEMM kernels state, for a model whose config states none.

A registry entry or config.json describes the checkpoint as published (bf16, no
``quantization_config``), but teammates often serve a quantised copy of it: vLLM loads an NVFP4 or
FP8 checkpoint of the same architecture, and its GEMMs then read 4 or 8 bits per weight. Priced by
16-bit weights, those GEMMs would move 2-4x the bytes their time allows (beyond the roof), so the
model's costs for them are refused and most kernel time stays of unknown cost.

The kernels name their operands: ``float_e2m1_t`` (FP4 values) with ``float_ue4m3_t`` block
scales is NVFP4, with ``ue8m0`` scales MXFP4; ``e4m3`` is FP8; a mixed-precision kernel (``w4a16``,
``bf16xmxfp4``) reads narrow weights at the 16-bit rate. When such kernels carry most of the
dense-GEMM time and the model's config says nothing about quantisation, the weights are priced as
the kernels state, and the model view says so. ``--weights`` or a ``quantization_config`` always
win; this is only the fallback for a config that is silent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy
from tracekit.analysis.pricing.kernel_names import component_of, mixed_activation, name_dtype

# A narrow format must carry at least this share of the dense-GEMM time to speak for the weights:
# a few FP8 kernels (an FP8 LM head, a quantised KV projection) do not make a quantised model.
SHARE = 0.5

_MX = re.compile(r"ue8m0|mxf4|mxfp4|mxe2m1", re.I)
_INT4 = re.compile(r"(?<![a-z0-9])w4a16|wna16|int4|uint4|marlin|machete|awq|gptq", re.I)


@dataclass(frozen=True)
class StatedWeights:
    precision: str  # a key of tracekit.models.config.PRECISIONS
    share: float  # of the dense-GEMM kernel time
    example: str  # one kernel name that states it

    def sentence(self, dtype: str) -> str:
        """Where the model's precision came from, for its model view."""
        return (
            f"{self.precision}: {self.share:.0%} of the GEMM kernel time runs kernels whose names state "
            f"{_WHAT[self.precision]} (e.g. {self.example[:80]!r}) and the model's config states no "
            f"quantization_config (LM head, embeddings and router {dtype}; pass --weights to say otherwise)"
        )


_WHAT = {
    "nvfp4": "FP4 (e2m1) operands with FP8 block scales",
    "mxfp4": "FP4 (e2m1) weights with e8m0 block scales",
    "fp8": "FP8 (e4m3) operands",
    "nvfp4-w4a16": "FP4 weights widened to 16-bit activations",
    "int4": "4-bit integer weights widened to 16-bit activations",
}


def _format(name: str) -> str | None:
    """The weight precision one GEMM kernel's name states; None for a 16-bit or silent one."""
    if mixed_activation(name):
        if _MX.search(name):
            return "mxfp4"
        if _INT4.search(name):
            return "int4"
        if re.search(r"e2m1|fp4", name, re.I):
            return "nvfp4-w4a16"
        return None  # FP8 weights widened to 16 bits: no stored precision tracekit names for it
    if _INT4.search(name) and name_dtype(name) not in ("fp8", "fp4"):
        return "int4"
    d = name_dtype(name)
    if d == "fp4":
        return "mxfp4" if _MX.search(name) else "nvfp4"
    if d == "fp8":
        return "fp8"
    return None


def stated(work: pd.DataFrame) -> StatedWeights | None:
    """The weight precision the trace's dense GEMM kernels state, when one narrow format carries
    at least ``SHARE`` of their time; None otherwise (16-bit kernels, names that say nothing)."""
    if not len(work):
        return None
    kernels = (
        work[(work["kind"] == "kernel").to_numpy() & (work["step"].to_numpy() >= 0)]
        if "step" in work
        else work[(work["kind"] == "kernel").to_numpy()]
    )
    if not len(kernels):
        return None
    per_name = kernels.groupby(kernels["name"].astype(str), observed=True)["dur_ns"].sum()
    gemm = {
        n: float(d) for n, d in per_name.items() if component_of(taxonomy.categorize(n), n) in ("linear", "experts")
    }
    total = sum(gemm.values())
    if total <= 0:
        return None
    by_format: dict[str, float] = {}
    example: dict[str, tuple[float, str]] = {}
    for n, d in gemm.items():
        f = _format(n)
        if f is None:
            continue
        by_format[f] = by_format.get(f, 0.0) + d
        if d > example.get(f, (-1.0, ""))[0]:
            example[f] = (d, n)
    if not by_format:
        return None
    best = max(by_format, key=lambda f: by_format[f])
    share = by_format[best] / total
    if share < SHARE:
        return None
    name = example[best][1]
    return StatedWeights(best, float(np.round(share, 4)), name[5:] if name.startswith("void ") else name)
