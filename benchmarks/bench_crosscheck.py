"""Cross-check: tracekit's FLOPs and bytes, per category and per op, beside TraceLens's and beside arithmetic.

    python benchmarks/bench_crosscheck.py                       # the four shared traces TraceLens read
    python benchmarks/bench_crosscheck.py --trace h100_hf       # one of them (keys below)
    python benchmarks/bench_crosscheck.py --json                # the same as JSON, for machines
    python benchmarks/bench_crosscheck.py --write docs/accuracy.md   # the same as Markdown (regenerate it so)

For every shared trace that records shapes and has TraceLens's CSVs in
``../shared/oracles/tracelens/<trace>/`` (issue 47, item 3), three figures side by side, measured
in the same run:

- **tracekit**: ``analyze(read_trace(path)).work`` (the graph-replayed decode step with its capture
  trace as ``capture=``), each kernel's ``flops`` and ``bytes``, summed per op and per category;
- **TraceLens**: ``unified_perf_summary.csv`` (one row per op and shape: ``GFLOPS`` and ``Data Moved
  (MB)``, which is MiB, per call, times ``operation_count``);
- **arithmetic**: a formula written here from the op's recorded shapes, dtypes and arguments
  (``FORMULAS`` below: GEMM 2*M*N*K and its operands, attention 4*H*D per (query, key) pair, norms
  and activations per element, RoPE, KV-cache store, elementwise and reductions), independent of
  tracekit's pricing code: nothing of ``tracekit.analysis.pricing`` is imported. Where no formula
  can be stated from what the trace records, the row says "no arithmetic".

Ops are matched by name: a kernel belongs to the outermost op of its op stack (the op that
launched it and the ops around it) whose name TraceLens lists for that trace, else to the op that
launched it; a replayed kernel's op stack is the capture trace's, matched launch by launch (kernel
names, in order). Both tools and the arithmetic are compared on that op, so how tracekit splits an
op among its kernels does not move the per-op rows; it moves the per-category rows, where tracekit
counts each kernel under its own category and TraceLens and the arithmetic put an op's work under
the category of its longest kernels (auxiliary memset and ``fill_`` kernels get no FLOPs there, and
the bytes the trace records them writing).

Attention's key counts: from the op's arguments where they settle them (a prefill whose requests
all have ``max_seqlen_q`` tokens), else from the engine's step annotation
(``execute_..._context_N(sq..sk..sqsq..sqsk..)_generation_M(...)``; a decode step's keys are in no
shape), else no arithmetic.

A row disagrees when two of its figures differ by more than 5% of the larger one, or when tracekit
leaves unpriced what TraceLens prices. Each disagreement is named with the side the arithmetic
takes: tracekit, TraceLens, neither, or no arithmetic. What neither tool prices and the arithmetic
states is listed apart. Conventions the arithmetic makes (a convention, not physics) are named on the row:
SiLU is 4 FLOPs per element (negate-exp, add, divide: TraceLens counts 1 for ``aten::silu`` and 5
for SiLU-and-mul), a transcendental (rsqrt, cos, sin, exp) 1, a comparison in a max or argmax 1.

Measured 2026-12-07 at commit 410f3b7 (before issue 47's pricing work): the Hugging Face traces
agree in total (5.77 TFLOP, 46.3 GB on all three) and op by op but for TraceLens's conventions
(SiLU, copies counted as FLOPs), while per category tracekit handed cuBLAS memsets 86 GFLOP (H100)
and a ``fill_`` 6.5 GFLOP (MI300X); the SGLang extend step's bytes were tracekit 108.4 GB, TraceLens
212.5, arithmetic 212.9 (decode step 15.4, 20.4, 20.4), the arithmetic siding with TraceLens on
attention, norms, SiLU-and-mul and the KV store. Each trace takes about a second to read, analyse
and cross-check here.

Keys: h100_hf, mi300x_hf, mi300x_extend, mi300x_decode. Exits 0 (the figures are a report, not a
gate; tests/test_crosscheck_bench.py holds the known agreements).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("TRACEKIT_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
ORACLES = SHARED.parent / "oracles" / "tracelens"
TOLERANCE = 0.05
MIB = 1 << 20

# key -> (trace file, capture trace file or None); TraceLens's folder is named after the trace.
TRACES = {
    "h100_hf": ("h100_hf-qwen1.5-0.5b_forward_bs16.json.gz", None),
    "mi300x_hf": ("mi300x_hf-qwen1.5-0.5b_forward_bs16.json.gz", None),
    "mi300x_extend": ("mi300x_sglang-qwen3-8b_extend-step.json.gz", None),
    "mi300x_decode": (
        "mi300x_sglang-qwen3-8b_decode-step_hipgraph.json.gz",
        "mi300x_sglang-qwen3-8b_decode_graph-capture.json.gz",
    ),
}

NO_OP = "(kernels without an op)"

# ---------------------------------------------------------------------------------------------
# The arithmetic: per-op formulas from the recorded shapes, dtypes and arguments.
# ---------------------------------------------------------------------------------------------

# Bytes per element of the profiler's dtype strings ("Input type").
ELEM = {
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "float": 4,
    "double": 8,
    "long int": 8,
    "int": 4,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::complex<float>": 8,
}
INTEGRAL = {"long int", "int", "short", "signed char", "unsigned char", "bool"}
# torch ScalarType codes an engine op states its output dtype with (aiter's gemm: 15 = bfloat16).
SCALAR_TYPE_BYTES = {"5": 2, "6": 4, "7": 8, "15": 2}


@dataclass
class Arith:
    flops: float | None
    bytes: float | None
    note: str = ""


@dataclass
class Args:
    """One op's recorded arguments: shapes, dtypes, concrete values."""

    name: str
    dims: list
    types: list
    concrete: list
    step: dict | None = None  # the engine's per-step sums (sq, sk, sqsq, sqsk), when annotated

    def tensor(self, i: int):
        """(shape, bytes per element) of argument i, or None where it is not a tensor."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        d, t = self.dims[i], self.types[i]
        if t not in ELEM or not isinstance(d, list) or not all(isinstance(x, int) for x in d):
            return None
        return d, ELEM[t]

    def conc(self, i: int) -> str:
        return str(self.concrete[i]) if i < len(self.concrete) and self.concrete[i] is not None else ""


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def nbytes(t) -> int:
    return numel(t[0]) * t[1] if t else 0


def _all_tensor_bytes(a: Args) -> int:
    return sum(nbytes(a.tensor(i)) for i in range(len(a.dims)))


def _gemm(a: Args, x: int, w: int, bias: int | None, w_is_nk: bool, out_size: int | None = None) -> Arith | None:
    tx, tw = a.tensor(x), a.tensor(w)
    if not tx or not tw or len(tw[0]) != 2:
        return None
    n, k = (tw[0][0], tw[0][1]) if w_is_nk else (tw[0][1], tw[0][0])
    if tx[0][-1] != k:
        return None
    m = numel(tx[0][:-1])
    out = out_size or tx[1]
    b = nbytes(a.tensor(bias)) if bias is not None else 0
    return Arith(
        2.0 * m * n * k,
        m * k * tx[1] + n * k * tw[1] + m * n * out + b,
        f"2*M*N*K, M={m} N={n} K={k}; A, B{', bias' if b else ''} read, C written",
    )


def f_mm(a):
    return _gemm(a, 0, 1, None, False)


def f_addmm(a):
    return _gemm(a, 1, 2, 0, False)


def f_linear(a):
    return _gemm(a, 0, 1, 2, True)


def f_bmm(a):
    ta, tb = a.tensor(0), a.tensor(1)
    if not ta or not tb or len(ta[0]) != 3 or len(tb[0]) != 3:
        return None
    bt, m, k = ta[0]
    n = tb[0][2]
    return Arith(
        2.0 * bt * m * n * k, nbytes(ta) + nbytes(tb) + bt * m * n * ta[1], f"2*B*M*N*K, B={bt} M={m} N={n} K={k}"
    )


def f_aiter_gemm(a):
    # aiter::gemm_a16w16(A [M, K], W [N, K], bias, out dtype, ...)
    return _gemm(a, 0, 1, 2, True, SCALAR_TYPE_BYTES.get(a.conc(3)))


def _causal_pairs_top_left(lq: int, lk: int) -> int:
    # torch SDPA's is_causal: query i sees keys 0..i (top-left aligned)
    if lq <= lk:
        return lq * (lq + 1) // 2
    return lk * (lk + 1) // 2 + (lq - lk) * lk


def _sdpa(a: Args, causal_at: int) -> Arith | None:
    q, k, v = a.tensor(0), a.tensor(1), a.tensor(2)
    if not q or not k or not v or len(q[0]) != 4:
        return None
    b, h, lq, d = q[0]
    lk, dv = k[0][2], v[0][3]
    causal = a.conc(causal_at) == "True"
    pairs = _causal_pairs_top_left(lq, lk) if causal else lq * lk
    mask = nbytes(a.tensor(3)) if causal_at != 4 else 0
    return Arith(
        2.0 * b * h * pairs * (d + dv),
        nbytes(q) + nbytes(k) + nbytes(v) + b * h * lq * dv * q[1] + mask,
        f"2*B*H*(D+Dv) per (query, key) pair, {'causal ' if causal else ''}pairs={b}x{pairs}; "
        "Q, K, V read, O written; softmax not counted",
    )


def f_sdpa(a):
    return _sdpa(a, 5)


def f_sdpa_flash(a):
    return _sdpa(a, 4)


def f_sdpa_efficient(a):
    return _sdpa(a, 6)


def _step_pairs(step: dict | None, queries: int) -> tuple[int, str] | None:
    """(query, key) pairs of one causal attention layer over the step's requests, from the
    engine's annotation: per request q queries over k keys (its prefix then its own tokens),
    bottom-right aligned, sum of q*k - q*(q-1)/2 = sqsk - (sqsq - sq)/2; only where the step's
    query count is the op's."""
    if not step or step["sq"] != queries:
        return None
    return step["sqsk"] - (step["sqsq"] - step["sq"]) // 2, "pairs from the step's annotation (sq, sk, sqsq, sqsk)"


def f_mha_batch_prefill(a):
    # aiter::mha_batch_prefill(q [T, Hq, D], k [P, Hk, D], v, cu_seqlens_q [B+1], kv_indptr [B+1],
    #   kv_page_indices, max_seqlen_q, max_seqlen_k, p_dropout, scale, logits_soft_cap, zero_tensors,
    #   is_causal, window_size_left, window_size_right, ...)
    q, k, v, cu = a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(3)
    if not q or not k or not v or not cu or len(q[0]) != 3:
        return None
    t, hq, d = q[0]
    hk, dk = k[0][-2], k[0][-1]
    dv = v[0][-1]
    if a.conc(12) != "True" or a.conc(13) not in ("-1", "") or a.conc(14) not in ("-1", "0", ""):
        return None  # only the causal, windowless case is stated here
    reqs = cu[0][0] - 1
    try:
        mq, mk = int(a.conc(6)), int(a.conc(7))
    except ValueError:
        mq = mk = -1
    if reqs > 0 and reqs * mq == t and mk == mq:
        # every request has max_seqlen_q queries, and keys >= queries <= max_seqlen_k = max_seqlen_q
        pairs, kv, how = (
            reqs * (mq * (mq + 1) // 2),
            reqs * mq,
            f"{reqs} requests of {mq} tokens, no prefix (from the op's arguments)",
        )
    else:
        got = _step_pairs(a.step, t)
        if got is None:
            return None
        pairs, how = got
        kv = a.step["sk"]
    kvb = q[1] if k[1] is None else k[1]
    return Arith(
        2.0 * hq * pairs * (d + dv),
        2 * t * hq * d * q[1] + kv * hk * (dk + dv) * kvb,
        f"causal: 2*H*(D+Dv) per pair, pairs={pairs} ({how}); Q read, O written, each request's K and V read once",
    )


def f_paged_decode(a):
    # sglang_profiler::attention_paged_attention_ragged(q [B, Hq, D], workspace, out [B, Hq, D],
    #   k_cache [P, page, Hk, D], v_cache, kv_indptr [B+1], kv_indices, ...): one query per request
    q, k = a.tensor(0), a.tensor(3)
    if not q or not k or len(q[0]) != 3:
        return None
    b, hq, d = q[0]
    hk = k[0][-2]
    st = a.step
    if not st or st["sq"] != b or st["sqsq"] != b:
        return None  # key lengths are not in the shapes; the step's annotation states them
    kv = st["sk"]
    return Arith(
        4.0 * hq * d * kv,
        2 * b * hq * d * q[1] + 2 * kv * hk * d * k[1],
        f"4*H*D per (query, key) pair, {kv} keys over {b} requests (the step's annotation sk); "
        "Q read, O written, K and V read once",
    )


def f_store_cache(a):
    # sglang::store_cache(k [T, Hk*D], v [T, Hk*D], k_cache, v_cache, loc [T], ...)
    k, v, loc = a.tensor(0), a.tensor(1), a.tensor(4)
    if not k or not v:
        return None
    return Arith(0.0, 2 * (nbytes(k) + nbytes(v)) + nbytes(loc), "K and V read, written into the cache; slots read")


def f_silu_and_mul(a):
    out, x = a.tensor(0), a.tensor(1)
    if not out or not x:
        return None
    return Arith(
        5.0 * numel(out[0]),
        nbytes(out) + nbytes(x),
        "SiLU (4) and multiply (1) per output element (convention); input read, output written",
    )


def f_rotary(a):
    # sgl_kernel::rotary_embedding(positions [T], query [T, Hq*D], key [T, Hk*D], head_size, cos_sin_cache [P, R], is_neox)
    pos, q, k, cache = a.tensor(0), a.tensor(1), a.tensor(2), a.tensor(4)
    try:
        head = int(a.conc(3))
    except ValueError:
        return None
    if not pos or not q or not cache:
        return None
    t = numel(pos[0])
    rot = cache[0][-1]
    heads = numel(q[0]) // (t * head) + (numel(k[0]) // (t * head) if k else 0)
    el = t * heads * rot
    return Arith(
        3.0 * el,
        2 * el * q[1] + nbytes(pos) + t * rot * cache[1],
        f"3 FLOPs per rotated element ({t} tokens x {heads} heads x {rot}); Q, K read and written, "
        "positions and one cos/sin row per token read",
    )


def f_rmsnorm(a):
    # aiter::rmsnorm(out [T, H], input [T, H], weight [H], eps): every tensor read or written once
    x = a.tensor(1)
    if not x:
        return None
    return Arith(
        4.0 * numel(x[0]),
        _all_tensor_bytes(a),
        f"4 FLOPs per element over {x[0][0]} rows of {x[0][-1]}; input and weight read, output written",
    )


def f_add_rmsnorm(a):
    # aiter::add_rmsnorm(out, input, residual_in, residual_out, weight, eps): four [T, H] tensors + weight
    x = a.tensor(1)
    if not x:
        return None
    return Arith(
        5.0 * numel(x[0]),
        _all_tensor_bytes(a),
        f"add then RMSNorm, 5 FLOPs per element over {x[0][0]} rows of {x[0][-1]}; input, residual, "
        "weight read, output and new residual written",
    )


UNARY_FLOPS = {
    "neg": 1,
    "rsqrt": 1,
    "sqrt": 1,
    "exp": 1,
    "cos": 1,
    "sin": 1,
    "reciprocal": 1,
    "abs": 1,
    "relu": 1,
    "silu": 4,
}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"}
COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


def _broadcast(shapes):
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, x in enumerate(s):
            j = nd - len(s) + i
            out[j] = max(out[j], x)
    return out


def f_elementwise(a):
    base = a.name.split("::")[-1].rstrip("_")
    ts = [t for t in (a.tensor(i) for i in range(len(a.dims))) if t]
    if not ts:
        return None
    real = [t for t in ts if len(t[0])] or ts
    out_shape = _broadcast([t[0] for t in real])
    out_size = 1 if base in COMPARE else max(t[1] for t in real)
    n = numel(out_shape)
    rd = sum(nbytes(t) for t in ts)
    if base in UNARY_FLOPS:
        per, conv = UNARY_FLOPS[base], ""
        if base == "silu":
            conv = " (convention: SiLU 4 FLOPs per element; TraceLens counts 1)"
        elif base != "neg" and base != "abs" and base != "relu":
            conv = " (convention: a transcendental counts 1)"
        return Arith(float(per * n), rd + n * out_size, f"{per} FLOP(s) per element{conv}; input read, output written")
    if base == "pow":
        flops = float(n) if a.conc(1) == "2" else None
        return Arith(
            flops,
            rd + n * out_size,
            "x**2: 1 FLOP per element; input read, output written"
            if flops is not None
            else "pow by a non-2 exponent: FLOPs not stated",
        )
    if base in BINARY or base in COMPARE:
        per = 2 if base in ("add", "sub") and a.conc(2) not in ("", "1") else 1
        return Arith(float(per * n), rd + n * out_size, f"{per} FLOP per output element; inputs read, output written")
    return None


def f_copy(a):
    dst, src = a.tensor(0), a.tensor(1)
    if not dst or not src:
        return None
    return Arith(0.0, nbytes(src) + nbytes(dst), "source read, destination written")


def f_fill(a):
    t = a.tensor(0)
    return Arith(0.0, nbytes(t), "tensor written") if t else None


def f_cat(a):
    return Arith(0.0, None, "no FLOPs; bytes need the TensorList's dtype, which the trace does not record")


def _reduce(a: Args, dims: list[int] | None, out_size: int | None = None, extra_out: int = 0) -> Arith | None:
    t = a.tensor(0)
    if not t:
        return None
    shape = t[0]
    if dims is None:
        n_out = 1
    else:
        red = numel([shape[d] for d in dims]) if dims else numel(shape)
        n_out = numel(shape) // max(red, 1)
    os_ = out_size or t[1]
    return Arith(
        float(numel(shape)),
        nbytes(t) + n_out * (os_ + extra_out),
        "1 FLOP (add or comparison) per input element (convention for max/argmax); input read, output written",
    )


def _dims_arg(s: str) -> list[int] | None:
    s = s.strip()
    if s in ("", "None"):
        return None
    try:
        v = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return None
    return [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]


def f_mean_sum(a):
    return _reduce(a, _dims_arg(a.conc(1)))


def f_argmax(a):
    return _reduce(a, _dims_arg(a.conc(1)), out_size=8)


def f_max(a):
    if len(a.dims) == 1:
        return _reduce(a, None)
    return _reduce(a, _dims_arg(a.conc(1)), extra_out=8)  # values and indices


def f_all_any(a):
    return _reduce(a, _dims_arg(a.conc(1)) if len(a.dims) > 1 else None, out_size=1)


def f_cumsum(a):
    t = a.tensor(0)
    if not t:
        return None
    out = 8 if a.types[0] in INTEGRAL else t[1]
    return Arith(float(numel(t[0])), nbytes(t) + numel(t[0]) * out, "1 add per element; input read, output written")


def f_index_select(a):
    w, idx = a.tensor(0), a.tensor(2)
    if not w or not idx or a.conc(1) not in ("0", "") or len(w[0]) != 2:
        return None
    rows = numel(idx[0])
    return Arith(
        0.0, 2 * rows * w[0][1] * w[1] + nbytes(idx), f"{rows} rows of {w[0][1]} gathered and written; indices read"
    )


def f_embedding(a):
    w, idx = a.tensor(0), a.tensor(1)
    if not w or not idx or len(w[0]) != 2:
        return None
    rows = numel(idx[0])
    return Arith(
        0.0, 2 * rows * w[0][1] * w[1] + nbytes(idx), f"{rows} rows of {w[0][1]} gathered and written; indices read"
    )


FORMULAS = {
    "aten::mm": f_mm,
    "aten::addmm": f_addmm,
    "aten::linear": f_linear,
    "aten::bmm": f_bmm,
    "aiter::gemm_a16w16": f_aiter_gemm,
    "aten::scaled_dot_product_attention": f_sdpa,
    "aten::_scaled_dot_product_flash_attention": f_sdpa_flash,
    "aten::_scaled_dot_product_efficient_attention": f_sdpa_efficient,
    "aiter::mha_batch_prefill": f_mha_batch_prefill,
    "sglang_profiler::attention_paged_attention_ragged": f_paged_decode,
    "sglang::store_cache": f_store_cache,
    "sgl_kernel::silu_and_mul": f_silu_and_mul,
    "sgl_kernel::rotary_embedding": f_rotary,
    "aiter::rmsnorm": f_rmsnorm,
    "aiter::add_rmsnorm": f_add_rmsnorm,
    "aten::copy_": f_copy,
    "aten::fill_": f_fill,
    "aten::zero_": f_fill,
    "aten::cat": f_cat,
    "aten::mean": f_mean_sum,
    "aten::sum": f_mean_sum,
    "aten::argmax": f_argmax,
    "aten::max": f_max,
    "aten::all": f_all_any,
    "aten::any": f_all_any,
    "aten::cumsum": f_cumsum,
    "aten::index_select": f_index_select,
    "aten::embedding": f_embedding,
}
for _n in list(UNARY_FLOPS) + sorted(BINARY | COMPARE) + ["pow"]:
    FORMULAS[f"aten::{_n}"] = f_elementwise
    FORMULAS[f"aten::{_n}_"] = f_elementwise

AUX_OPS = {"aten::fill_", "aten::zero_", "aten::zeros", "aten::empty"}


def norm_name(name: str) -> str:
    """An op's name as TraceLens lists it: SGLang's profiler wrappers lose their call-site number."""
    name = str(name)
    if name.startswith("sglang_profiler::"):
        name = re.sub(r"_\d+$", "", name)
    return name


def _load(s):
    if not isinstance(s, str) or not s:
        return []
    try:
        return json.loads(s)
    except ValueError:
        return []


def _tup(x):
    return tuple(_tup(v) for v in x) if isinstance(x, (list, tuple)) else x


STEP_RE = re.compile(r"(context|generation)_\d+\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)")


def step_sums(annotations: pd.DataFrame) -> list[dict]:
    """The engine's per-step attention sums (``execute_..._context_N(sq..sk..sqsq..sqsk..)_generation_M(...)``)."""
    out = []
    if not len(annotations):
        return out
    for r in annotations.drop_duplicates("name").itertuples():
        got = STEP_RE.findall(str(r.name))
        if got:
            s = {"sq": 0, "sk": 0, "sqsq": 0, "sqsk": 0}
            for _, sq, sk, sqsq, sqsk in got:
                s["sq"] += int(sq)
                s["sk"] += int(sk)
                s["sqsq"] += int(sqsq)
                s["sqsk"] += int(sqsk)
            s["label"] = str(r.name)
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------------
# Matching kernels to ops (the trace's own, or a capture trace's for graph-replayed kernels).
# ---------------------------------------------------------------------------------------------


@dataclass
class OpTable:
    ops: pd.DataFrame
    parents: np.ndarray
    names: list
    cache: dict = field(default_factory=dict)

    def chain(self, i: int) -> list[int]:
        """Ops from the root down to op i."""
        out = []
        while i >= 0:
            out.append(i)
            i = int(self.parents[i])
        return out[::-1]


def op_table(trace) -> OpTable:
    from tracekit.trace.links import op_parents  # linking (which op encloses which), not pricing

    ops = trace.cpu_ops
    return OpTable(ops, op_parents(ops), [norm_name(n) for n in ops["name"].astype(str)])


def capture_graphs(cap) -> list[tuple[list[str], np.ndarray]]:
    """Each stream capture in a capture trace: the kernel names its launch calls name, and the op of each."""
    rt = cap.runtime
    names = rt["name"].astype(str)
    begins = rt[names.str.endswith("StreamBeginCapture")].sort_values("start_ns")
    ends = rt[names.str.endswith("StreamEndCapture")].sort_values("start_ns")
    launch = rt[names.str.contains("LaunchKernel|MemcpyAsync|MemsetAsync|Memset.*Async")]
    out = []
    for b in begins.itertuples():
        e = ends[(ends["start_ns"] > b.start_ns) & (ends["tid"] == b.tid)]
        if not len(e):
            continue
        mine = launch[
            (launch["tid"] == b.tid) & (launch["start_ns"] > b.start_ns) & (launch["start_ns"] < e["start_ns"].iloc[0])
        ].sort_values("start_ns")
        kern = (
            mine["kernel"].astype(object).where(mine["kernel"].notna(), "").astype(str).tolist()
            if "kernel" in mine
            else [""] * len(mine)
        )
        out.append((kern, mine["op"].to_numpy()))
    return out


def match_replays(work: pd.DataFrame, graphs) -> dict[int, tuple[int, int]]:
    """Work row -> (capture op, graph launch) for graph-replayed kernels, by kernel names in order
    (or by position where the capture names none and the lengths agree)."""
    got: dict[int, tuple[int, int]] = {}
    rows = work.index[(work["graph"].astype(bool)) & (work["op"] < 0)]
    if not len(rows) or not graphs:
        return got
    sub = work.loc[rows].sort_values(["launch", "start_ns"])
    for launch, grp in sub.groupby("launch", sort=False):
        names = grp["name"].astype(str).tolist()
        best = None
        for kern, ops in graphs:
            if any(kern):
                sm = SequenceMatcher(None, names, kern, autojunk=False)
                pairs = [(blk.a + i, blk.b + i) for blk in sm.get_matching_blocks() for i in range(blk.size)]
            elif len(kern) == len(names):
                pairs = [(i, i) for i in range(len(names))]
            else:
                continue
            if best is None or len(pairs) > len(best[0]):
                best = (pairs, ops)
        if best is None:
            continue
        idx = grp.index.to_numpy()
        for a, b in best[0]:
            if best[1][b] >= 0:
                got[int(idx[a])] = (int(best[1][b]), int(launch))
    return got


# ---------------------------------------------------------------------------------------------
# TraceLens's figures.
# ---------------------------------------------------------------------------------------------


def tracelens_rows(folder: Path) -> pd.DataFrame:
    """unified_perf_summary.csv keyed like tracekit's ops: (name, dims, dtypes), FLOPs and bytes per call
    (NaN where TraceLens has no perf model), summed over rows that share the key."""
    d = pd.read_csv(folder / "unified_perf_summary.csv")
    rows = []
    for r in d.to_dict("records"):
        name = str(r["name"])
        synthetic = name.endswith("(Synthetic Op)")
        dims = _tup(ast.literal_eval(r["Input Dims"])) if isinstance(r["Input Dims"], str) else ()
        types = _tup(ast.literal_eval(r["Input type"])) if isinstance(r["Input type"], str) else ()
        n = int(r["operation_count"])
        gf, mb = r["GFLOPS"], r["Data Moved (MB)"]
        rows.append(
            {
                "name": NO_OP if synthetic else norm_name(name),
                "tl_name": name,
                "dims": dims,
                "types": types,
                "category": r["op category"],
                "count": n,
                "flops": float(gf) * 1e9 * n if not pd.isna(gf) else np.nan,
                "bytes": float(mb) * MIB * n if not pd.isna(mb) else np.nan,
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# The comparison.
# ---------------------------------------------------------------------------------------------


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b))


def verdict(
    tk,
    tl,
    ar,
    tol: float = TOLERANCE,
    *,
    tl_missing: str = "no TraceLens figure",
    ar_missing: str = "no arithmetic",
    convention: bool = False,
) -> dict:
    """How the three figures of a row compare. ``status``: ``agree``; ``disagree`` (two figures more
    than ``tol`` apart, or tracekit leaves unpriced what TraceLens prices), with ``side``, the side
    the arithmetic takes (tracekit, TraceLens, neither, or None without arithmetic); ``unpriced``
    (neither tool has a figure, the arithmetic states one); ``unchecked`` (one figure alone).
    None: no figure (tracekit left it unpriced; TraceLens has no row or no perf model; no arithmetic)."""
    conv = " (the arithmetic's count is a convention)" if convention else ""

    def out(status, text, side=None):
        return {"status": status, "agree": status in ("agree", "unchecked"), "side": side, "text": text}

    have = [v for v in (tk, tl, ar) if v is not None]
    if not have:
        return out("unchecked", "no figures")
    if all(v == 0 for v in have):
        return out("agree", "agree (nothing to count)")
    if tk is None and tl is None:
        return out("unpriced", "neither tool prices it; the arithmetic states it")
    if tk is None:
        if ar is None:
            return out("disagree", f"tracekit leaves it unpriced, TraceLens prices it; {ar_missing}")
        if _close(tl, ar, tol):
            return out("disagree", "tracekit leaves it unpriced; arithmetic sides with TraceLens", "TraceLens")
        return out(
            "disagree",
            f"tracekit leaves it unpriced; {_vs('TraceLens', tl, ar)}; arithmetic sides with neither" + conv,
            "neither",
        )
    if tl is None:
        if ar is None:
            return out("unchecked", f"tracekit only ({tl_missing}, {ar_missing})")
        if _close(tk, ar, tol):
            return out("agree", f"tracekit agrees with arithmetic ({tl_missing})")
        return out("disagree", f"{_vs('tracekit', tk, ar)} ({tl_missing})" + conv, "against tracekit")
    if _close(tk, tl, tol):
        if ar is None:
            return out("agree", f"agree ({ar_missing})")
        if _close(tk, ar, tol):
            return out("agree", "agree")
        return out("disagree", f"{_vs('both tools', tk, ar)}; arithmetic sides with neither" + conv, "neither")
    if ar is None:
        return out("disagree", f"{_vs('tracekit', tk, tl, 'TraceLens')}; {ar_missing}")
    ck, cl = _close(tk, ar, tol), _close(tl, ar, tol)
    if ck and not cl:
        return out("disagree", f"{_vs('TraceLens', tl, ar)}; arithmetic sides with tracekit" + conv, "tracekit")
    if cl and not ck:
        return out("disagree", f"{_vs('tracekit', tk, ar)}; arithmetic sides with TraceLens" + conv, "TraceLens")
    return out(
        "disagree",
        f"{_vs('tracekit', tk, ar)}, {_vs('TraceLens', tl, ar)}; arithmetic sides with neither" + conv,
        "neither",
    )


def _vs(who: str, x: float, ref: float, what: str = "arithmetic") -> str:
    """'tracekit -50.0% from arithmetic', 'TraceLens 12x arithmetic', 'tracekit counts some where arithmetic has 0'."""
    if ref == 0:
        return f"{who} {'count' if who == 'both tools' else 'counts'} some where {what} has 0"
    r = x / ref
    return f"{who} {r:,.0f}x {what}" if r > 10 else f"{who} {(r - 1) * 100:+.1f}% from {what}"


def _sum_or_none(v: pd.Series):
    v = v.astype(float)
    return None if v.isna().all() else float(v.sum(skipna=True))


def crosscheck(
    trace_file,
    capture_file=None,
    tracelens_dir=None,
    *,
    tol: float = TOLERANCE,
    trace=None,
    capture=None,
    work: pd.DataFrame | None = None,
) -> dict:
    """The cross-check of one trace: per-category and per-op tables, totals and the named
    disagreements. ``trace``/``capture`` skip the reads; ``work`` replaces tracekit's per-unit
    table (a test perturbs it so)."""
    from tracekit import read_trace
    from tracekit.analysis import analyze

    t0 = time.perf_counter()
    trace = trace if trace is not None else read_trace(str(trace_file))
    if capture is None and capture_file is not None:
        capture = read_trace(str(capture_file))
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    if work is None:
        work = analyze(trace, capture=capture).work
    t_analyze = time.perf_counter() - t0
    t0 = time.perf_counter()
    tracelens_dir = (
        Path(tracelens_dir) if tracelens_dir else ORACLES / Path(str(trace_file)).name.removesuffix(".json.gz")
    )
    tl = tracelens_rows(tracelens_dir)
    tl_names = set(tl["name"])
    tables = {"t": op_table(trace)}
    replay = {}
    if capture is not None:
        tables["c"] = op_table(capture)
        replay = match_replays(work, capture_graphs(capture))
    sums = step_sums(trace.annotations)
    step = sums[0] if len(sums) == 1 else None

    def unit_of(src: str, leaf: int) -> int:
        tab = tables[src]
        hit = tab.cache.get(leaf)
        if hit is None:
            chain = tab.chain(leaf)
            at = next((i for i, o in enumerate(chain) if tab.names[o] in tl_names), None)
            if at is None:
                hit = leaf
            else:
                # an op nested in one of its own name (aten::arange in aten::arange): TraceLens lists the inner
                while at + 1 < len(chain) and tab.names[chain[at + 1]] == tab.names[chain[at]]:
                    at += 1
                hit = chain[at]
            tab.cache[leaf] = hit
        return hit

    ops_col = work["op"].to_numpy()
    inst = []  # per work row: instance key (src, unit op, replay) or None
    leafs = []
    for i, o in zip(work.index, ops_col):
        if o >= 0:
            inst.append(("t", unit_of("t", int(o)), -1))
            leafs.append(("t", int(o)))
        elif i in replay:
            cop, launch = replay[i]
            inst.append(("c", unit_of("c", cop), launch))
            leafs.append(("c", cop))
        else:
            inst.append(None)
            leafs.append(None)
    w = work.assign(_inst=inst, _leaf=leafs)
    kern = trace.kernels
    # the work table has a row per kernel, memset and memcpy of the trace, in the trace's order
    same = len(kern) == len(w)
    rec_bytes = kern["bytes"].reindex(w.index) if same and "bytes" in kern else pd.Series(np.nan, index=w.index)
    kind = (
        kern["kind"].reindex(w.index) if same and "kind" in kern else w.get("kind", pd.Series("kernel", index=w.index))
    ).astype(str)

    # ---- per instance ----
    instances = []
    for key, g in w[w["_inst"].notna()].groupby("_inst", sort=False):
        src, u, _launch = key
        tab = tables[src]
        r = tab.ops.iloc[u]
        dims, types, conc = _load(r["input_dims"]), _load(r["input_types"]), _load(r["concrete_inputs"])
        name = tab.names[u]
        by_cat = g.groupby("category")["dur_ns"].sum()
        main = str(by_cat.idxmax()) if len(by_cat) else "?"
        # auxiliary kernels: memsets, and fill_/zero_ ops inside a larger op
        aux_mask = (g["category"] == "memset") | pd.Series(
            [lf is not None and tables[lf[0]].names[lf[1]] in AUX_OPS and lf[1] != u for lf in g["_leaf"]],
            index=g.index,
        )
        aux_bytes, aux_ok = {}, True
        for j in g.index[aux_mask]:
            lf = g.at[j, "_leaf"]
            b = rec_bytes.get(j)
            if kind.get(j) in ("memset", "memcpy") and not pd.isna(b) and b > 0:
                val = float(b)
            else:
                lr = tables[lf[0]].ops.iloc[lf[1]]
                ar_ = FORMULAS.get(tables[lf[0]].names[lf[1]], lambda a: None)(
                    Args(
                        tables[lf[0]].names[lf[1]],
                        _load(lr["input_dims"]),
                        _load(lr["input_types"]),
                        _load(lr["concrete_inputs"]),
                    )
                )
                if ar_ is None or ar_.bytes is None:
                    aux_ok = False
                    val = 0.0
                else:
                    val = float(ar_.bytes)
            c = str(g.at[j, "category"])
            aux_bytes[c] = aux_bytes.get(c, 0.0) + val
        ar = _arith(tab, u, name, dims, types, conc, step, w, key)
        if (
            ar is None
            and len(g)
            and all(kind.get(j) in ("memset", "memcpy") for j in g.index)
            and all(not pd.isna(rec_bytes.get(j)) for j in g.index)
        ):
            # an op without a formula that ran as memcpy/memset only: the bytes the trace records them moving
            ar = Arith(
                0.0, float(sum(rec_bytes.get(j) for j in g.index)), "the bytes of the memcpy/memset the trace records"
            )
            aux_bytes = {}  # the op is its copies: none of them auxiliary
        flops_ar = ar.flops if ar else None
        bytes_ar = (ar.bytes + sum(aux_bytes.values())) if ar and ar.bytes is not None and aux_ok else None
        instances.append(
            {
                "key": (name, _tup(dims), _tup(types)),
                "name": name,
                "dims": dims,
                "types": types,
                "category": main,
                "kernels": len(g),
                "dur_ns": int(g["dur_ns"].sum()),
                "tk_flops": _sum_or_none(g["flops"]),
                "tk_bytes": _sum_or_none(g["bytes"]),
                "tk_partial": bool(g["flops"].isna().any() and not g["flops"].isna().all()),
                "ar_flops": flops_ar,
                "ar_bytes": bytes_ar,
                "ar_note": ar.note if ar else "no arithmetic",
                "aux_bytes": aux_bytes if aux_ok else {},
                "src": src,
            }
        )
    inst_df = pd.DataFrame(instances)

    # ---- TraceLens per key ----
    tl_by_key = {}
    for r in tl.itertuples(index=False):
        k = (r.name, r.dims, r.types) if r.name != NO_OP else (NO_OP, (), ())
        e = tl_by_key.setdefault(
            k, {"count": 0, "flops": [], "bytes": [], "category": r.category, "tl_name": r.tl_name}
        )
        e["count"] += r.count
        e["flops"].append(r.flops)
        e["bytes"].append(r.bytes)

    def tl_total(e, what):
        v = [x for x in e[what] if not pd.isna(x)]
        return float(sum(v)) if v else None

    # ---- per op ----
    op_rows = []
    matched = set()
    if len(inst_df):
        for key, g in inst_df.groupby("key", sort=False):
            e = tl_by_key.get(key)
            if e is None:  # dtypes spelt otherwise: the name and dims alone
                cands = [k for k in tl_by_key if k[0] == key[0] and k[1] == key[1] and k not in matched]
                e = tl_by_key[cands[0]] if len(cands) == 1 else None
                if e is not None:
                    matched.add(cands[0])
            else:
                matched.add(key)
            op_rows.append(_op_row(key[0], g, e, tl_total))
    nop = w[w["_inst"].isna()]
    if len(nop):
        e = tl_by_key.get((NO_OP, (), ()))
        if e is not None:
            matched.add((NO_OP, (), ()))
        op_rows.append(
            {
                "op": NO_OP,
                "name": NO_OP,
                "dims": [],
                "types": [],
                "tl_category": e["category"] if e else None,
                "n_tracekit": int(len(nop)),
                "n_tracelens": e["count"] if e else 0,
                "kernels": int(len(nop)),
                "dur_ms": nop["dur_ns"].sum() / 1e6,
                "tk_flops": _sum_or_none(nop["flops"]),
                "tk_bytes": _sum_or_none(nop["bytes"]),
                "tk_partial": False,
                "tl_flops": tl_total(e, "flops") if e else None,
                "tl_bytes": tl_total(e, "bytes") if e else None,
                "ar_flops": None,
                "ar_bytes": None,
                "ar_note": "no op, no shapes",
            }
        )
    for k, e in tl_by_key.items():
        if k not in matched:
            op_rows.append(
                {
                    "op": f"{e['tl_name']} (TraceLens only)",
                    "name": k[0],
                    "dims": list(k[1]),
                    "types": list(k[2]),
                    "tl_category": e["category"],
                    "n_tracekit": 0,
                    "n_tracelens": e["count"],
                    "kernels": 0,
                    "dur_ms": 0.0,
                    "tk_flops": None,
                    "tk_bytes": None,
                    "tk_partial": False,
                    "tl_flops": tl_total(e, "flops"),
                    "tl_bytes": tl_total(e, "bytes"),
                    "ar_flops": None,
                    "ar_bytes": None,
                    "ar_note": "no tracekit op with this name and shape",
                }
            )
    for r in op_rows:
        conv = "convention" in (r["ar_note"] or "")
        r["flops_verdict"] = verdict(r["tk_flops"], r["tl_flops"], r["ar_flops"], tol, convention=conv)
        r["bytes_verdict"] = verdict(r["tk_bytes"], r["tl_bytes"], r["ar_bytes"], tol)
    op_rows.sort(key=lambda r: -r["dur_ms"])
    _label_ops(op_rows)

    # ---- per category ----
    per_call = {r["_key"]: r for r in op_rows if "_key" in r and r["n_tracelens"]}
    for r in instances:
        o = per_call.get(r["key"])
        for m in ("flops", "bytes"):
            r[f"tl_{m}"] = o[f"tl_{m}"] / o["n_tracelens"] if o and o[f"tl_{m}"] is not None else None
    blank = {
        "kernels": 0,
        "dur_ms": 0.0,
        "tk_flops": None,
        "tk_bytes": None,
        "tk_unpriced": 0,
        "tl_flops": None,
        "tl_bytes": None,
        "ar_flops": None,
        "ar_bytes": None,
    }
    cats = {}
    for c, g in w.groupby("category", sort=False):
        cats[str(c)] = {
            **blank,
            "category": str(c),
            "kernels": int(len(g)),
            "dur_ms": g["dur_ns"].sum() / 1e6,
            "tk_flops": _sum_or_none(g["flops"]),
            "tk_bytes": _sum_or_none(g["bytes"]),
            "tk_unpriced": int(g["flops"].isna().sum()),
        }

    def add(c, field_, v):
        e = cats.setdefault(c, {**blank, "category": c})
        if v is not None:
            e[field_] = (e[field_] or 0.0) + v

    for r in instances:
        c = r["category"]
        add(c, "tl_flops", r["tl_flops"])
        add(c, "tl_bytes", r["tl_bytes"])
        add(c, "ar_flops", r["ar_flops"])
        if r["ar_bytes"] is not None:
            aux = r["aux_bytes"]
            add(c, "ar_bytes", r["ar_bytes"] - sum(aux.values()))
            for ac, b in aux.items():
                add(ac, "ar_bytes", b)
                add(ac, "ar_flops", 0.0)
    for r in op_rows:
        if r["n_tracekit"] == 0:
            add("(TraceLens ops tracekit lacks)", "tl_flops", r["tl_flops"])
            add("(TraceLens ops tracekit lacks)", "tl_bytes", r["tl_bytes"])
    cat_rows = sorted(cats.values(), key=lambda r: -r["dur_ms"])
    for r in cat_rows:
        items = [i for i in instances if i["category"] == r["category"]]
        _compare(r, items, tol)

    total = {
        **blank,
        "category": "total",
        "kernels": int(len(w)),
        "dur_ms": w["dur_ns"].sum() / 1e6,
        "tk_flops": _sum_or_none(w["flops"]),
        "tk_bytes": _sum_or_none(w["bytes"]),
        "tk_unpriced": int(w["flops"].isna().sum()),
        "tl_flops": _sum_none([r["tl_flops"] for r in op_rows]),
        "tl_bytes": _sum_none([r["tl_bytes"] for r in op_rows]),
        "ar_flops": _sum_none([r["ar_flops"] for r in op_rows]),
        "ar_bytes": _sum_none([r["ar_bytes"] for r in op_rows]),
    }
    _compare(total, op_rows, tol)
    busy = max(total["dur_ms"], 1e-12)
    coverage = {
        "tracekit_priced_time": float(w.loc[w["flops"].notna(), "dur_ns"].sum() / 1e6 / busy),
        "arithmetic_time": float(
            sum(r["dur_ms"] for r in op_rows if r["ar_flops"] is not None and r["ar_bytes"] is not None) / busy
        ),
        "tracelens_time": float(
            sum(r["dur_ms"] for r in op_rows if r["tl_flops"] is not None or r["tl_bytes"] is not None) / busy
        ),
    }
    for r in op_rows:
        r.pop("_key", None)
    disagreements = _disagreements(cat_rows, op_rows, total)
    unpriced = _disagreements(cat_rows, op_rows, total, "unpriced")
    return {
        "trace": Path(str(trace_file)).name,
        "capture": Path(str(capture_file)).name if capture_file else None,
        "device": trace.device_name(),
        "step_annotation": step["label"] if step else None,
        "tolerance": tol,
        "categories": cat_rows,
        "ops": op_rows,
        "total": total,
        "coverage": coverage,
        "disagreements": disagreements,
        "unpriced": unpriced,
        "seconds": {"read": t_read, "analyze": t_analyze, "crosscheck": time.perf_counter() - t0},
    }


def _partial(items, side: str, metric: str, tol: float) -> bool:
    """Whether one side's sum over ``items`` leaves out (no figure) work the other figures count:
    more than a fifth of the tolerance of the largest sum."""

    def best(i, sides):
        v = [i[f"{s}_{metric}"] for s in sides if i.get(f"{s}_{metric}") is not None]
        return max(v) if v else 0.0

    others = [s for s in ("tk", "tl", "ar") if s != side]
    missing = sum(best(i, others) for i in items if i.get(f"{side}_{metric}") is None)
    whole = sum(best(i, ("tk", "tl", "ar")) for i in items)
    return missing > tol / 5 * whole


def _compare(r: dict, items: list[dict], tol: float) -> None:
    """A category's or the total's verdicts: a TraceLens or arithmetic sum that leaves out work the
    other figures count is shown, marked, and not compared."""
    for m in ("flops", "bytes"):
        tlp = r[f"tl_{m}"] is not None and _partial(items, "tl", m, tol)
        arp = r[f"ar_{m}"] is not None and _partial(items, "ar", m, tol)
        r[f"tl_{m}_partial"], r[f"ar_{m}_partial"] = tlp, arp
        r[f"{m}_verdict"] = verdict(
            r[f"tk_{m}"],
            None if tlp else r[f"tl_{m}"],
            None if arp else r[f"ar_{m}"],
            tol,
            tl_missing="TraceLens prices part of it: not compared" if tlp else "no TraceLens figure",
            ar_missing="arithmetic states part of it: not compared" if arp else "no arithmetic",
        )


def _sum_none(vals):
    v = [x for x in vals if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(sum(v)) if v else None


def _arith(tab: OpTable, u: int, name: str, dims, types, conc, step, w, key) -> Arith | None:
    """The op's own formula, else that of an enclosing op all of whose kernels are this op's."""
    f = FORMULAS.get(name)
    if f is not None:
        return f(Args(name, dims, types, conc, step))
    chain = tab.chain(u)
    for anc in reversed(chain[:-1]):
        f = FORMULAS.get(tab.names[anc])
        if f is None:
            continue
        # the enclosing op's work is this op's only if no other op under it launched a kernel
        under = {lf[1] for lf in w["_leaf"] if lf is not None and lf[0] == key[0] and anc in tab.chain(lf[1])}
        if all(u in tab.chain(x) for x in under):
            r = tab.ops.iloc[anc]
            got = f(
                Args(tab.names[anc], _load(r["input_dims"]), _load(r["input_types"]), _load(r["concrete_inputs"]), step)
            )
            if got is not None:
                got.note = f"from the enclosing {tab.names[anc]}: {got.note}"
            return got
        return None
    return None


def _op_row(name, g: pd.DataFrame, e, tl_total) -> dict:
    r0 = g.iloc[0]
    return {
        "op": name,
        "name": name,
        "dims": r0["dims"],
        "types": r0["types"],
        "_key": r0["key"],
        "tl_category": e["category"] if e else None,
        "n_tracekit": int(len(g)),
        "n_tracelens": int(e["count"]) if e else 0,
        "kernels": int(g["kernels"].sum()),
        "dur_ms": g["dur_ns"].sum() / 1e6,
        "tk_flops": _sum_or_none(g["tk_flops"]),
        "tk_bytes": _sum_or_none(g["tk_bytes"]),
        "tk_partial": bool(g["tk_partial"].any() or (g["tk_flops"].isna().any() and g["tk_flops"].notna().any())),
        "tl_flops": tl_total(e, "flops") if e else None,
        "tl_bytes": tl_total(e, "bytes") if e else None,
        "ar_flops": None if g["ar_flops"].isna().any() else float(g["ar_flops"].sum()),
        "ar_bytes": None if g["ar_bytes"].isna().any() else float(g["ar_bytes"].sum()),
        "ar_note": r0["ar_note"],
    }


DT = {
    "c10::BFloat16": "bf16",
    "c10::Half": "f16",
    "float": "f32",
    "double": "f64",
    "long int": "i64",
    "int": "i32",
    "bool": "b",
    "unsigned char": "u8",
}


def _label_ops(rows: list[dict]) -> None:
    """Each op row's label: name and its tensors' shapes, with dtypes where two rows would read alike."""

    def shapes(r):
        parts = []
        for d in r["dims"]:
            if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
                parts.append("(" + ",".join(str(x) for x in d) + ")")
            elif isinstance(d, list) and d and all(isinstance(x, list) for x in d):
                parts.append("[" + " ".join("(" + ",".join(str(x) for x in s) + ")" for s in d) + "]")
        if len(parts) > 6:
            parts = parts[:6] + ["..."]
        return " ".join(parts)

    for r in rows:
        if r["name"] != NO_OP and r["n_tracekit"]:
            r["op"] = f"{r['name']} {shapes(r)}".strip()
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["op"]] = seen.get(r["op"], 0) + 1
    for r in rows:
        if seen[r["op"]] > 1 and r["n_tracekit"]:
            r["op"] += " [" + ",".join(DT.get(t, t) for t in r["types"] if t in ELEM) + "]"


def _disagreements(cat_rows, op_rows, total, status: str = "disagree") -> list[dict]:
    """Every row and metric of the given status (``disagree``: figures more than the tolerance apart;
    ``unpriced``: neither tool has a figure the arithmetic states), largest gap first within each level."""
    out = []
    for level, rows, label in (
        ("total", [total], "category"),
        ("category", cat_rows, "category"),
        ("op", op_rows, "op"),
    ):
        got = []
        for r in rows:
            for metric in ("flops", "bytes"):
                v = r[f"{metric}_verdict"]
                if v["status"] != status:
                    continue
                figs = [r[f"tk_{metric}"], r[f"tl_{metric}"], r[f"ar_{metric}"]]
                have = [x for x in figs if x is not None]
                gap = (max(have) - min(have)) if len(have) > 1 else (have[0] if have else 0.0)
                whole = total[f"ar_{metric}"] or total[f"tk_{metric}"]
                got.append(
                    {
                        "level": level,
                        "what": r[label],
                        "metric": metric,
                        "side": v["side"],
                        "text": v["text"],
                        "tracekit": figs[0],
                        "tracelens": figs[1],
                        "arithmetic": figs[2],
                        "gap": gap,
                        "share_of_total": gap / whole if whole else None,
                    }
                )
        out += sorted(got, key=lambda d: -d["gap"])
    return out


# ---------------------------------------------------------------------------------------------
# Output: text, Markdown, JSON.
# ---------------------------------------------------------------------------------------------


def _g(v, scale=1e9, partial=False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    x = v / scale
    s = (
        f"{x:,.1f}"
        if abs(x) >= 100
        else (f"{x:,.2f}" if abs(x) >= 1 else (f"{x:.3f}" if abs(x) >= 0.001 else (f"{x:.2e}" if x else "0")))
    )
    return s + ("*" if partial else "")


CAT_HEAD = [
    "category",
    "kernels",
    "ms",
    "tk GFLOP",
    "TL GFLOP",
    "arith GFLOP",
    "FLOPs",
    "tk GB",
    "TL GB",
    "arith GB",
    "bytes",
]
OP_HEAD = ["op", "n tk/TL", "ms", "tk GFLOP", "TL GFLOP", "arith GFLOP", "FLOPs", "tk GB", "TL GB", "arith GB", "bytes"]


def _short(v: dict) -> str:
    """A verdict in a few words, for the terminal (the full sentence is in the lists and in Markdown)."""
    st, side = v["status"], v["side"]
    if st == "agree":
        return "agree"
    if st == "unchecked":
        return "-" if v["text"] == "no figures" else "tracekit only"
    if st == "unpriced":
        return "neither tool prices it"
    lead = "DIFF tk unpriced" if v["text"].startswith("tracekit leaves") else "DIFF"
    return {
        "tracekit": f"{lead}: arith sides w/ tracekit",
        "TraceLens": f"{lead}: arith sides w/ TraceLens",
        "neither": f"{lead}: arith sides w/ neither",
        "against tracekit": f"{lead}: arith vs tracekit",
    }.get(side, f"{lead}: no arithmetic")


def _cells_cat(r, short: bool = False) -> list[str]:
    unpriced = f" ({r['tk_unpriced']} unpriced)" if r.get("tk_unpriced") else ""
    fv, bv = (
        (_short(r["flops_verdict"]), _short(r["bytes_verdict"]))
        if short
        else (r["flops_verdict"]["text"], r["bytes_verdict"]["text"])
    )
    return [
        r["category"],
        f"{r['kernels']}{unpriced}",
        f"{r['dur_ms']:.2f}",
        _g(r["tk_flops"]),
        _g(r["tl_flops"], partial=r.get("tl_flops_partial")),
        _g(r["ar_flops"], partial=r.get("ar_flops_partial")),
        fv,
        _g(r["tk_bytes"]),
        _g(r["tl_bytes"], partial=r.get("tl_bytes_partial")),
        _g(r["ar_bytes"], partial=r.get("ar_bytes_partial")),
        bv,
    ]


def _cells_op(r, short: bool = False) -> list[str]:
    fv, bv = (
        (_short(r["flops_verdict"]), _short(r["bytes_verdict"]))
        if short
        else (r["flops_verdict"]["text"], r["bytes_verdict"]["text"])
    )
    return [
        r["op"],
        f"{r['n_tracekit']}/{r['n_tracelens']}",
        f"{r['dur_ms']:.2f}",
        _g(r["tk_flops"], partial=r["tk_partial"]),
        _g(r["tl_flops"]),
        _g(r["ar_flops"]),
        fv,
        _g(r["tk_bytes"], partial=r["tk_partial"]),
        _g(r["tl_bytes"]),
        _g(r["ar_bytes"]),
        bv,
    ]


def _text_table(head, rows, widths) -> str:
    def line(cells):
        return "  ".join(
            (c if len(c) <= wd else c[: wd - 1] + "~").ljust(wd) if i in (0, 6, 10) else c.rjust(wd)
            for i, (c, wd) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(head)] + [line(c) for c in rows])


def render_text(res: dict) -> str:
    out = []
    s = res["seconds"]
    out.append(
        f"== {res['trace']}"
        + (f" (capture {res['capture']})" if res["capture"] else "")
        + f"  [{res['device']}]  read {s['read']:.2f} s, analyse {s['analyze']:.2f} s, cross-check {s['crosscheck']:.2f} s"
    )
    if res["step_annotation"]:
        out.append(f"   step annotation: {res['step_annotation']}")
    cv = res["coverage"]
    out.append(
        f"   kernel time priced by tracekit {cv['tracekit_priced_time']:.1%}, with TraceLens figures "
        f"{cv['tracelens_time']:.1%}, with arithmetic {cv['arithmetic_time']:.1%}"
    )
    w = [30, 18, 8, 9, 9, 11, 33, 8, 8, 8, 33]
    out.append(
        "-- per category (tracekit: each kernel's own category; TraceLens and arithmetic: the op's main "
        "category; * leaves out work the others count, not compared)"
    )
    out.append(
        _text_table(CAT_HEAD, [_cells_cat(r, True) for r in res["categories"]] + [_cells_cat(res["total"], True)], w)
    )
    out.append("-- per op (* tracekit prices some of the op's kernels only)")
    w2 = [64, 7, 8, 9, 9, 11, 33, 8, 8, 8, 33]
    out.append(_text_table(OP_HEAD, [_cells_op(r, True) for r in res["ops"]], w2))
    out.append(
        f"-- disagreements over {res['tolerance']:.0%} ({len(res['disagreements'])}), the side the arithmetic takes"
    )
    for d in res["disagreements"]:
        out.append(f"   {d['level']:8s} {d['metric']:5s} {d['what']}: {d['text']} ({_figs(d)})")
    if res["unpriced"]:
        out.append(f"-- priced by neither tool, stated by the arithmetic ({len(res['unpriced'])})")
        for d in res["unpriced"]:
            out.append(
                f"   {d['level']:8s} {d['metric']:5s} {d['what']}: arithmetic {_g(d['arithmetic'])} "
                f"{'GFLOP' if d['metric'] == 'flops' else 'GB'}"
            )
    return "\n".join(out)


def _md_table(head, rows) -> str:
    # "[(32)] [(32)]" in an op's shapes reads as a Markdown reference link: escape the brackets.
    esc = [[c.replace("|", "\\|").replace("[", "\\[") for c in r] for r in rows]
    return "\n".join(
        [
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" if i in (0, 6, 10) else "---:" for i in range(len(head))) + "|",
        ]
        + ["| " + " | ".join(r) + " |" for r in esc]
    )


def render_markdown(results: list[dict], command: str) -> str:
    out = [
        "# Accuracy: tracekit's FLOPs and bytes beside TraceLens's and beside arithmetic",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} ({_source()}). "
        "Regenerate it with the same command; do not edit it by hand.",
        "",
        "For each shared trace that records shapes and that AMD's TraceLens read "
        "(`../shared/oracles/tracelens/`, whose README says how its CSVs were made and where TraceLens is wrong), "
        "three figures per category and per op: **tk**, tracekit's `analyze(...).work` summed over the op's kernels; "
        "**TL**, TraceLens's `unified_perf_summary.csv` (per-call GFLOPS and Data Moved, which is MiB, times "
        "`operation_count`); **arith**, a formula written in `benchmarks/bench_crosscheck.py` from the op's recorded "
        "shapes, dtypes and arguments (GEMM 2MNK and its operands; attention 2H(D+Dv) per causal (query, key) pair, "
        "Q/K/V/O once; RMSNorm and add+RMSNorm every tensor once; SiLU-and-mul; RoPE; KV-cache store; elementwise "
        "and reductions), independent of tracekit's pricing code. A verdict names every pair of figures more than 5% apart "
        "and the side the arithmetic takes; `-` is no figure (tracekit left it unpriced, TraceLens has no perf model, "
        "or no arithmetic is stated). Conventions, not physics: SiLU 4 FLOPs per element (TraceLens counts 1 for "
        "`aten::silu`, 5 for SiLU-and-mul), a transcendental 1, a comparison in max/argmax 1.",
        "",
        "Per category, tracekit counts each kernel under its own category; TraceLens and the arithmetic put an op's work "
        "under the category of its longest kernels, so work tracekit hands an op's auxiliary kernels (cuBLAS memsets, "
        "`fill_`) shows there. The arithmetic gives those kernels no FLOPs and the bytes the trace records them writing. "
        "A TraceLens or arithmetic sum marked `*` leaves out work the other figures count and is not compared. "
        "`(kernels without an op)`: kernels the trace records with no launching op, hence no shapes.",
        "",
        "## Summary",
        "",
        "| " + " | ".join(SUMMARY_HEAD) + " |",
        "|" + "|".join("---" if i in (0, 7) else "---:" for i in range(len(SUMMARY_HEAD))) + "|",
        *["| " + " | ".join(r) + " |" for r in summary_rows(results)],
        "",
    ]
    for res in results:
        cv = res["coverage"]
        out += [
            f"## {res['trace']}",
            "",
            f"{res['device']}"
            + (f"; graph replay priced with its capture trace `{res['capture']}`" if res["capture"] else "")
            + (f"; step annotation `{res['step_annotation']}`" if res["step_annotation"] else "")
            + ". "
            f"Kernel time priced by tracekit: {cv['tracekit_priced_time']:.1%}; with TraceLens figures: "
            f"{cv['tracelens_time']:.1%}; with arithmetic: {cv['arithmetic_time']:.1%}.",
            "",
            "### Per category",
            "",
            _md_table(CAT_HEAD, [_cells_cat(r) for r in res["categories"]] + [_cells_cat(res["total"])]),
            "",
            "### Per op",
            "",
            "`*`: tracekit prices some of the op's kernels only. `n tk/TL`: calls each tool saw.",
            "",
            _md_table(OP_HEAD, [_cells_op(r) for r in res["ops"]]),
            "",
            f"### Disagreements over {res['tolerance']:.0%}",
            "",
        ]
        if not res["disagreements"]:
            out.append("None.")
        for d in res["disagreements"]:
            out.append(f"- {d['level']} `{d['what']}`, {d['metric']}: {d['text']} ({_figs(d)})")
        if res["unpriced"]:
            out += ["", "Priced by neither tool, stated by the arithmetic:", ""]
            for d in res["unpriced"]:
                out.append(
                    f"- {d['level']} `{d['what']}`, {d['metric']}: arithmetic {_g(d['arithmetic'])} "
                    f"{'GFLOP' if d['metric'] == 'flops' else 'GB'}"
                )
        out += ["", "### The arithmetic of each op", ""]
        for r in res["ops"]:
            if r["n_tracekit"]:
                out.append(f"- `{r['op']}`: {r['ar_note']}")
        out.append("")
    return "\n".join(out)


SUMMARY_HEAD = [
    "trace",
    "tk TFLOP",
    "TL TFLOP",
    "arith TFLOP",
    "tk GB",
    "TL GB",
    "arith GB",
    "ops disagreeing; of them, the arithmetic sides with tracekit / TraceLens / neither / no arithmetic (FLOPs or bytes)",
]


def summary_rows(results: list[dict]) -> list[list[str]]:
    rows = []
    for res in results:
        t = res["total"]
        ops = [d for d in res["disagreements"] if d["level"] == "op"]
        names = {d["what"] for d in ops}
        by = {k: len({d["what"] for d in ops if d["side"] == k}) for k in ("tracekit", "TraceLens", "neither")}
        other = len({d["what"] for d in ops if d["side"] not in ("tracekit", "TraceLens", "neither")})
        rows.append(
            [
                res["trace"].removesuffix(".json.gz"),
                _g(t["tk_flops"], 1e12),
                _g(t["tl_flops"], 1e12),
                _g(t["ar_flops"], 1e12),
                _g(t["tk_bytes"]),
                _g(t["tl_bytes"]),
                _g(t["ar_bytes"]),
                f"{len(names)} of {len(res['ops'])} ({by['tracekit']} / {by['TraceLens']} / {by['neither']} / {other})",
            ]
        )
    return rows


def _figs(d: dict) -> str:
    unit = "GFLOP" if d["metric"] == "flops" else "GB"
    return f"tk {_g(d['tracekit'])}, TL {_g(d['tracelens'])}, arith {_g(d['arithmetic'])} {unit}"


def _source() -> str:
    """Which tracekit made the figures: this checkout's commit, and whether its tracekit/ had
    uncommitted changes (read-only git queries), or the folder tracekit was imported from."""
    import tracekit

    where = Path(tracekit.__file__).resolve().parent
    if where != ROOT / "tracekit":
        return f"tracekit imported from `{where}`"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = (
            subprocess.run(
                ["git", "--no-optional-locks", "diff", "--quiet", "HEAD", "--", "tracekit"],
                cwd=ROOT,
                capture_output=True,
                timeout=30,
            ).returncode
            == 1
        )
        untracked = subprocess.run(
            ["git", "--no-optional-locks", "ls-files", "--others", "--exclude-standard", "tracekit"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "tracekit from this checkout"
    if not head:
        return "tracekit from this checkout"
    return f"tracekit at commit `{head}`" + (" with uncommitted changes to tracekit/" if dirty or untracked else "")


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return None if math.isnan(float(x)) else float(x)
    return x


def run(keys: list[str], tol: float = TOLERANCE) -> list[dict]:
    results = []
    for key in keys:
        f, cap = TRACES[key]
        path = SHARED / f
        folder = ORACLES / f.removesuffix(".json.gz")
        missing = [
            p
            for p in (path, folder / "unified_perf_summary.csv", SHARED / cap if cap else None)
            if p and not p.exists()
        ]
        if missing:
            print(
                f"skipped {key}: {', '.join(map(str, missing))} absent (../shared is not beside this checkout)",
                file=sys.stderr,
            )
            continue
        results.append(crosscheck(path, SHARED / cap if cap else None, folder, tol=tol))
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", action="append", choices=sorted(TRACES), help="one trace (repeatable; default: all four)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--write", metavar="FILE", help="also write the tables as Markdown to FILE (e.g. docs/accuracy.md)")
    p.add_argument(
        "--tolerance", type=float, default=TOLERANCE, help="relative difference that counts as a disagreement"
    )
    a = p.parse_args(argv)
    keys = a.trace or list(TRACES)
    results = run(keys, a.tolerance)
    if not results:
        print("no trace to cross-check: ../shared/traces or ../shared/oracles/tracelens is absent", file=sys.stderr)
        return 0
    if a.json:
        print(json.dumps(_jsonable(results), indent=1))
    else:
        for r in results:
            print(render_text(r))
            print()
        print(
            "== summary: totals, and the ops with a disagreement over "
            f"{a.tolerance:.0%} by the side the arithmetic takes"
        )
        rows = summary_rows(results)
        widths = [max(len(r[i]) for r in rows + [SUMMARY_HEAD]) for i in range(len(SUMMARY_HEAD))]
        for r in [SUMMARY_HEAD] + rows:
            print(
                "  ".join(
                    c.ljust(wd) if i in (0, 7) else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths))
                ).rstrip()
            )
    if a.write:
        cmd = (
            "python benchmarks/bench_crosscheck.py"
            + "".join(f" --trace {k}" for k in (a.trace or []))
            + (f" --tolerance {a.tolerance}" if a.tolerance != TOLERANCE else "")
            + f" --write {a.write}"
        )
        Path(a.write).parent.mkdir(parents=True, exist_ok=True)
        Path(a.write).write_text(render_markdown(results, cmd))
        print(f"wrote {a.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
