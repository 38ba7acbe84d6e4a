"""Kernel naming: which model operation a kernel does, and at what precision, from its name.

Takes kernel names (and their taxonomy category) and gives: the model component a kernel does
work of (``component_of``, per unit of a work table ``components``: ``linear``, ``experts`` or
``routing``, ``attention``, ``norm``, ``kv_write``, ...; None for generic kernels); the dtype
whose rate its MMA runs at (``name_dtype``; ``mixed_activation`` for 16-bit activations x
narrow weights); the flags that change a per-launch cost (``name_flags``: fused residual add,
quantised output, FP8 KV cache); and the KV cache's dtype from a trace's names
(``kv_cache_dtype``). ``model_costs`` prices by these; ``stated_weights`` and ``roofline`` read
them too.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy

_EXPERT_GEMM = re.compile(r"gemm|matmul|^bmm_|fused_moe_kernel|fused_experts|grouped|marlin|_ogs", re.I)
_QK_NORM = re.compile(r"qk_?norm", re.I)
# Only names that say "fused add" read and write a residual too; AITER's add_rmsnorm_quant
# template also serves plain (q/k) norms, so a bare "add_rmsnorm" is priced as the floor.
_FUSED_ADD = re.compile(r"fused_?add", re.I)
# Norm and activation kernels that also quantise their output (one fused launch).
_OUT_FP4 = re.compile(r"to_fp4|fp4_?quant|nvfp4", re.I)
_OUT_FP8 = re.compile(r"to_fp8|fp8_?quant|scaled_fp8|_quant_fp8", re.I)
_KV_WRITE = re.compile(
    r"reshape_and_cache|concat_and_cache|store_?kv|store_cache|set_kv|kv_buffer|rope_store|"
    r"rope_reshape_and_cache",
    re.I,
)
# Operand dtypes in kernel names. Scale types (ue4m3, ue8m0) are not operands.
_FP4 = re.compile(r"e2m1|nvfp4|mxfp4|float4|(?<![a-z])fp4", re.I)
_FP8 = re.compile(r"(?<![u])e4m3|(?<![u])e5m2|(?<![a-z])fp8|float8|f8f6f4|mxf8", re.I)
_BF16 = re.compile(r"bf16|bfloat16|df16b", re.I)  # DF16b: __bf16 in Itanium-mangled (HIP) names
_FP16 = re.compile(r"(?<![b])f16(?![0-9b])|(?<![a-z])half", re.I)
# Mixed-precision GEMMs: 16-bit activations times narrower (FP4/FP8/int4) weights, which the
# kernel widens to the activation type before its MMA, so it runs at the 16-bit rate. Names
# state it as weight/activation bits (w4a16, wna16: Marlin, AWQ/GPTQ, vLLM's machete) or as an
# operand list with the activation first (triton_kernels' matmul_ogs ``bf16xbf16xmxfp4``,
# ``bf16_mxfp4``): short spellings only, since trtllm-gen's ``bmm_Bfloat16_MxE2m1MxE4m3`` and
# FMHA's ``QkvE4m3OBfloat16`` name their *output* type in long form.
_HALF = re.compile(r"(?<![b])fp?16(?![0-9])|(?<![a-z])half", re.I)
_W_A16 = re.compile(r"(?<![a-z0-9])w(?:n|\d{1,2})a16(?![0-9])|a16w\d", re.I)
_ACT16_FIRST = re.compile(r"(?<![a-z0-9])(bf16|fp16)(?:[x_](?:bf16|fp16))*[x_](?:mx|nv)?(fp4|fp8|e2m1|e4m3|int4)", re.I)
# Template arguments that name a KV-cache *option*, not an operand dtype (vLLM's
# Fp8KVCacheDataType 0 means "auto": the cache holds the model dtype).
_NOT_OPERAND = re.compile(r"fp8kvcachedatatype\)\d|kv_?cache_?dtype\w*", re.I)
_KV_FP8 = re.compile(r"fp8kvcachedatatype\)[12]|kv_?(cache_?)?fp8|qkve4m3|kv_?e4m3", re.I)


def components(work: pd.DataFrame, category: np.ndarray) -> np.ndarray:
    """Per unit of work, the model component it does work of (``component_of``), None for
    generic kernels; worked out once per distinct (name, category)."""
    col = work["name"] if hasattr(work["name"], "cat") else work["name"].astype("category")
    name_codes = col.cat.codes.to_numpy().astype(np.int64)
    name_uniques = [str(n) for n in col.cat.categories]
    cat_codes, cat_uniques = pd.factorize(pd.Series(category, dtype=object).fillna(""))
    width = len(cat_uniques) + 1
    keys, inverse = np.unique(name_codes * width + cat_codes, return_inverse=True)
    per_key = np.array(
        [component_of(str(cat_uniques[k % width]), str(name_uniques[k // width])) for k in keys], dtype=object
    )
    return per_key[inverse] if len(keys) else np.full(len(work), None, dtype=object)


@lru_cache(maxsize=1 << 16)
def mixed_activation(name: str) -> str | None:
    """The 16-bit activation dtype of a mixed-precision GEMM (16-bit activations x FP4/FP8/int4
    weights, widened before the MMA), from its name; None for any other kernel."""
    name = _NOT_OPERAND.sub("", name)
    m = _ACT16_FIRST.search(name)
    if m:
        return "bf16" if m.group(1).lower().startswith("b") else "fp16"
    if _W_A16.search(name):
        return "fp16" if _HALF.search(name) and not _BF16.search(name) else "bf16"
    return None


@lru_cache(maxsize=1 << 16)
def name_dtype(name: str) -> str | None:
    """The dtype whose rate a kernel's MMA runs at, from its name: the wider operand's.
    Mixed FP8 x FP4 runs at the FP8 rate; 16-bit activations x narrow weights at the 16-bit rate."""
    mixed = mixed_activation(name)
    if mixed:
        return mixed
    name = _NOT_OPERAND.sub("", name)
    fp4, fp8 = bool(_FP4.search(name)), bool(_FP8.search(name))
    if fp8:
        return "fp8"
    if fp4:
        return "fp4"
    if _BF16.search(name):
        return "bf16"
    if _FP16.search(name):
        return "fp16"
    return None


@lru_cache(maxsize=1 << 16)
def name_flags(name: str) -> tuple[bool, float, bool]:
    """(fused add, quantised output element size or NaN, reads an FP8 KV cache) of a kernel name."""
    out = 0.5 + 1 / 16 if _OUT_FP4.search(name) else 1.0 if _OUT_FP8.search(name) else float("nan")
    return bool(_FUSED_ADD.search(name)), out, bool(_KV_FP8.search(name))


@lru_cache(maxsize=1 << 16)
def component_of(category: str, name: str) -> str | None:
    """The model component a kernel does work of; None for generic kernels."""
    if category == taxonomy.GEMM:
        return "linear"
    if category == taxonomy.MOE:
        return "experts" if _EXPERT_GEMM.search(name) else "routing"
    if category in (taxonomy.ATTENTION, taxonomy.LINEAR_ATTENTION, taxonomy.COMMUNICATION):
        return {
            taxonomy.ATTENTION: "attention",
            taxonomy.LINEAR_ATTENTION: "linear_attention",
            taxonomy.COMMUNICATION: "communication",
        }[category]
    if category == taxonomy.NORMALIZATION:
        return "qk_norm" if _QK_NORM.search(name) else "norm"
    if category == taxonomy.KV_CACHE:
        return "kv_write" if _KV_WRITE.search(name) else None
    return {
        taxonomy.ROPE: "rope",
        taxonomy.ACTIVATION: "activation",
        taxonomy.QUANTIZE: "quantize",
        taxonomy.EMBEDDING: "embedding",
        taxonomy.SAMPLING: "sampling",
    }.get(category)


def kv_cache_dtype(names, default: str) -> tuple[str, float | None, str]:
    """(dtype, bytes per element or None for "the model's", how) of the KV cache, from kernel names."""
    fp8 = next((str(n) for n in names if name_flags(str(n))[2]), None)
    if fp8:
        return "fp8", 1.0, f"fp8: kernel {fp8[:80]!r} reads an FP8 KV cache"
    return default, None, f"{default}: the model's dtype (no kernel name says FP8 KV cache)"
