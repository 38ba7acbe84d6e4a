"""The dtype whose peak a kernel runs at, from its op's dtype and unit and its name.

Takes the dtype and unit its op was priced at (``op_costs``) and the kernel names, and gives
the dtype to look its peak up at (``refine_dtype``): what a matrix kernel's name states,
TF32 for FP32 GEMMs run on TF32 tensor cores, FP32 for integer and boolean vector ops.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.pricing import kernel_names, op_args

# cuBLAS/CUTLASS kernels that run FP32 GEMMs on TF32 tensor cores say so in their
# names (allow_tf32 / torch.backends.cuda.matmul.allow_tf32): price them at the TF32
# rate, not the FP32 vector rate, or they would appear to beat the roofline.
_TF32_KERNEL = re.compile(r"tf32|s1688|s16816|tensorop_s|xmma_gemm_tf32", re.IGNORECASE)
# Integer and boolean vector ops run on the same ALUs at about the FP32 rate; they
# are memory-bound by a wide margin either way, so the FP32 vector peak serves.
_INTEGER_DTYPES = ("int64", "int32", "int16", "uint8", "bool")


def refine_dtype(dtype: np.ndarray, unit: np.ndarray, names: pd.Series) -> np.ndarray:
    """The dtype whose peak a matrix kernel runs at: what its name states (an MXFP8 x MXFP4
    MoE GEMM under a bf16 op runs at the FP8 rate), else the op's. Names are read once per
    distinct kernel name (``names``: the work's name column)."""
    out = dtype.copy()
    units, dtypes = categorical.Values(unit), categorical.Values(dtype)
    is_matrix = units.eq(op_args.MATRIX)
    matrix = np.flatnonzero(is_matrix)
    distinct, code = categorical.category_strings(names), categorical.codes(names)
    if len(matrix):
        said = categorical.objects([kernel_names.name_dtype(n) for n in distinct] + [None])[code[matrix]]
        hit = said != None  # noqa: E711
        out[matrix[hit]] = said[hit]
    fp32_matrix = np.flatnonzero(dtypes.eq("fp32") & is_matrix)
    if len(fp32_matrix):
        tf32 = np.array([bool(_TF32_KERNEL.search(n)) for n in distinct] + [False], dtype=bool)[code[fp32_matrix]]
        out[fp32_matrix[tf32]] = "tf32"
    out[dtypes.isin(_INTEGER_DTYPES) & units.eq(op_args.VECTOR)] = "fp32"
    return out
