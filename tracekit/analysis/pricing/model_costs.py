"""Costs from the model: each kernel's FLOPs and bytes from the architecture, the step's batch
and the tensor-parallel degree, for traces without recorded shapes (serving traces, graph
replays, engine custom ops).

For every step the model gives the work of each layer component (``tracekit.models.costs``);
the kernels carry it:

- a kernel's component comes from its taxonomy category and name (``component_of``): a GEMM
  is ``linear``, except the step's LM head (its last GEMM, of a name launched once in the
  step); MoE grouped GEMMs are ``experts``, the other MoE kernels ``routing``; ...
- a dense GEMM whose launch grid and named tile give its output width N
  (``tracekit.analysis.pricing.grid_shapes``) is matched to the model's layer of that width per rank
  (QKV, o_proj, gate-up, down, router, shared experts, LM head; o_proj and down, of one width,
  told apart by the kernel before it: attention or activation) and priced as that layer alone:
  2*M*N*K with M the step's tokens (the logit tokens for the LM head), bytes N*K weights at
  their stored precision plus M*(K+N) activations. Its ``note`` names the layer;
- pooled components (GEMMs nothing identifies, experts, routing, attention, linear attention,
  collectives) are shared among the step's kernels of that component in proportion to their
  durations (for GEMMs: what the identified ones leave, the note says so);
- per-launch components (norms, rotary, activations, KV-cache writes, quantisation,
  embedding, sampling) are priced launch by launch: each processes every token of the step;
- generic kernels (copies, fills, elementwise and reduction helpers) have no model cost: the
  model does not say what they move.

Precision: GEMM and attention kernels run at the dtype their names state (``e2m1``: FP4,
``e4m3``: FP8, ``bf16``; scale types ``ue4m3``/``ue8m0`` are not operands; a mixed-precision
kernel, 16-bit activations x FP4/FP8 weights such as ``bf16xmxfp4`` or ``w4a16``, at its
activations' 16-bit rate); otherwise at the model's stored precision's compute dtype. A
mixed-precision kernel agrees with any stored precision of its weights (quantised or 16-bit):
the precision check does not count it. The KV cache is FP8 when kernel names say so.
A step whose tokens the trace does not state gets no model cost, with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis.pricing import grid_shapes, taxonomy
from tracekit.frameworks import DECODE, MIXED, PREFILL, BatchSide
from tracekit.models import costs as mc
from tracekit.models.config import ModelSpec, expected_experts

_EXPERT_GEMM = re.compile(r"gemm|matmul|^bmm_|fused_moe_kernel|fused_experts|grouped|marlin|_ogs", re.I)
_QK_NORM = re.compile(r"qk_?norm", re.I)
# Only names that say "fused add" read and write a residual too; AITER's add_rmsnorm_quant
# template also serves plain (q/k) norms, so a bare "add_rmsnorm" is priced as the floor.
_FUSED_ADD = re.compile(r"fused_?add", re.I)
# Norm and activation kernels that also quantise their output (one fused launch).
_OUT_FP4 = re.compile(r"to_fp4|fp4_?quant|nvfp4", re.I)
_OUT_FP8 = re.compile(r"to_fp8|fp8_?quant|scaled_fp8|_quant_fp8", re.I)
_KV_WRITE = re.compile(r"reshape_and_cache|concat_and_cache|store_?kv|store_cache|set_kv|kv_buffer|rope_store|"
                       r"rope_reshape_and_cache", re.I)
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
_ACT16_FIRST = re.compile(r"(?<![a-z0-9])(bf16|fp16)(?:[x_](?:bf16|fp16))*[x_](?:mx|nv)?(fp4|fp8|e2m1|e4m3|int4)",
                          re.I)
# Template arguments that name a KV-cache *option*, not an operand dtype (vLLM's
# Fp8KVCacheDataType 0 means "auto": the cache holds the model dtype).
_NOT_OPERAND = re.compile(r"fp8kvcachedatatype\)\d|kv_?cache_?dtype\w*", re.I)
_KV_FP8 = re.compile(r"fp8kvcachedatatype\)[12]|kv_?(cache_?)?fp8|qkve4m3|kv_?e4m3", re.I)

SOURCE_MODEL = "model"


@dataclass
class ModelCosts:
    """Per unit of work (aligned with the work table): the model's FLOPs, bytes, dtype, unit,
    component and reason, and what the run told about itself."""

    flops: np.ndarray
    bytes: np.ndarray
    dtype: np.ndarray
    unit: np.ndarray
    component: np.ndarray
    reason: np.ndarray
    # Per step: the prefill share of each unit of a mixed step by the model (NaN elsewhere).
    prefill_share: np.ndarray
    kv_dtype: str = "bf16"
    kv_how: str = ""
    notes: list[str] = field(default_factory=list)
    # Kernel dtypes that contradict the model's stored precision: {component: (kernel dtype, model dtype)}.
    dtype_conflicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    layer_check: str | None = None
    # Why the model's costs were not used (the trace contradicts the model; no --model-force).
    withheld: str | None = None
    # Per unit: how its model cost was found, where that is worth saying (the layer a GEMM's
    # grid matched, or that a duration share priced it); None elsewhere.
    note: np.ndarray | None = None
    # Per unit: what kind of figure its bytes are when they are not the minimal traffic of
    # stated work (``ESTIMATES``): routed experts' bytes rest on the expected distinct experts
    # (``model``), a prefill's KV read without a stated cache on no cached prefix (``lower``).
    estimate: np.ndarray | None = None
    # {component: the basis of its estimate, formula and numbers}, for the JSON's model view.
    estimates: dict[str, str] = field(default_factory=dict)


# What a unit's bytes are, when not the minimal traffic of work the trace states: an upper
# bound (experts capped at the bandwidth roof), a lower bound (KV read assuming no cached
# prefix), or the model's expectation (distinct experts under uniform routing).
UPPER, LOWER, ESTIMATED = "upper", "lower", "model"
ESTIMATES = (UPPER, LOWER, ESTIMATED)


def withheld_reason(model: ModelSpec, misfit: str) -> str:
    """The sentence that stands for every figure the model would have priced, when the
    trace contradicts it (``layer_check``)."""
    return (f"withheld: the trace does not fit {model.name} ({misfit}); pass the model that ran, or "
            "--model-force to price by this one anyway")


def components(work: pd.DataFrame, category: np.ndarray) -> np.ndarray:
    """Per unit of work, the model component it does work of (``component_of``), None for
    generic kernels; worked out once per distinct (name, category)."""
    col = work["name"] if hasattr(work["name"], "cat") else work["name"].astype("category")
    name_codes = col.cat.codes.to_numpy().astype(np.int64)
    name_uniques = [str(n) for n in col.cat.categories]
    cat_codes, cat_uniques = pd.factorize(pd.Series(category, dtype=object).fillna(""))
    width = len(cat_uniques) + 1
    keys, inverse = np.unique(name_codes * width + cat_codes, return_inverse=True)
    per_key = np.array([component_of(str(cat_uniques[k % width]), str(name_uniques[k // width])) for k in keys],
                       dtype=object)
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
def _name_flags(name: str) -> tuple[bool, float, bool]:
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
        return {taxonomy.ATTENTION: "attention", taxonomy.LINEAR_ATTENTION: "linear_attention",
                taxonomy.COMMUNICATION: "communication"}[category]
    if category == taxonomy.NORMALIZATION:
        return "qk_norm" if _QK_NORM.search(name) else "norm"
    if category == taxonomy.KV_CACHE:
        return "kv_write" if _KV_WRITE.search(name) else None
    return {taxonomy.ROPE: "rope", taxonomy.ACTIVATION: "activation", taxonomy.QUANTIZE: "quantize",
            taxonomy.EMBEDDING: "embedding", taxonomy.SAMPLING: "sampling"}.get(category)


def _side(bs: BatchSide | None, engine: bool, phase: str) -> mc.Side | None:
    if bs is None or not bs.requests:
        return None
    tokens = bs.tokens if bs.tokens is not None else (bs.requests if phase == DECODE else None)
    if tokens is None:
        return None
    # Logits for one token per request: what engines, Hugging Face generate() and tracekit's
    # own runs (logits_to_keep=1) compute. A bare forward computing every position's logits
    # is priced from its shapes, which say so.
    logits = bs.requests
    return mc.Side(float(bs.requests), float(tokens), None if bs.kv_tokens is None else float(bs.kv_tokens),
                   bs.attention_pairs(), float(logits))


def step_sides(steps: pd.DataFrame, engine: bool) -> list[dict[str, mc.Side]]:
    """Per step: {phase: Side} of its prefill and decode work, from what its source stated."""
    out = []
    for r in steps.itertuples():
        sides: dict[str, mc.Side] = {}
        for phase, bs in ((PREFILL, r.prefill_side), (DECODE, r.decode_side)):
            s = _side(bs if isinstance(bs, BatchSide) else None, engine, phase)
            if s is not None:
                sides[phase] = s
        if not sides and r.phase in (PREFILL, DECODE) and not np.isnan(r.tokens):
            batch = r.batch if not np.isnan(r.batch) else None
            tokens = float(r.tokens)
            if r.phase == PREFILL and batch:
                q = tokens / batch  # sequences of one length, no cached prefix
                bs = BatchSide(int(batch), int(tokens), int(tokens), int(batch * q * q), int(batch * q * q))
            else:
                bs = BatchSide(int(batch or tokens), int(tokens))
            s = _side(bs, engine, r.phase)
            if s is not None:
                sides[r.phase] = s
        out.append(sides)
    return out


def price(model: ModelSpec, tp: int, steps: pd.DataFrame, work: pd.DataFrame, category: np.ndarray,
          source: str, known: tuple[np.ndarray, np.ndarray] | None = None,
          sides: list[dict[str, mc.Side]] | None = None) -> ModelCosts:
    """The model's cost of every unit of work (NaN where it has none, with the reason).

    ``known``: (FLOPs, bytes) already priced from recorded shapes (NaN elsewhere). Those
    units keep their shape costs, and a pooled component's model work, less what its
    shape-priced kernels in the step already account for, is shared among the rest."""
    n = len(work)
    flops, nbytes = np.full(n, np.nan), np.full(n, np.nan)
    dtype, unit = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    comp = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    share = np.full(n, np.nan)
    col = work["name"] if hasattr(work["name"], "cat") else work["name"].astype("category")
    name_codes = col.cat.codes.to_numpy().astype(np.int64)
    name_uniques = [str(n) for n in col.cat.categories]
    step_of = work["step"].to_numpy()
    dur = work["dur_ns"].to_numpy().astype(float)
    start = work["start_ns"].to_numpy()
    out = ModelCosts(flops, nbytes, dtype, unit, comp, reason, share)
    out.note = note = np.full(n, None, dtype=object)
    grids = _grids(work)
    layers = mc.named_linears(model, tp)
    estimate = np.full(n, None, dtype=object)
    out.estimate = estimate
    act_bytes = mc_bytes(model.dtype)
    out.kv_dtype, kv, out.kv_how = kv_cache_dtype(name_uniques, model.dtype)
    kv_bytes = kv if kv is not None else act_bytes
    comp[:] = components(work, category)
    flags = [_name_flags(u) for u in name_uniques]
    fused = np.array([f[0] for f in flags], dtype=bool)[name_codes]
    out_size = np.array([f[1] for f in flags])[name_codes]
    hint = np.array([name_dtype(str(u)) for u in name_uniques], dtype=object)[name_codes]
    mixed = np.array([mixed_activation(str(u)) is not None for u in name_uniques], dtype=bool)[name_codes]
    reason[:] = "generic kernel (copy, fill, elementwise or reduction helper): the model does not say what it moves"
    reason[step_of < 0] = "issued outside any step: no step batch to price it with"
    if sides is None:
        sides = step_sides(steps, source in frameworks.ENGINE_SOURCES)
    order = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[order], np.arange(len(steps) + 1))
    kernel_dtypes: dict[str, set[str]] = {}
    for i, sd in enumerate(sides):
        rows = order[bounds[i]:bounds[i + 1]]
        if not len(rows):
            continue
        _lm_head(rows, comp, name_codes, start)
        if not sd:
            reason[rows[comp[rows] != None]] = (  # noqa: E711
                "the step's tokens are not in the trace (no engine annotation states its batch): the model "
                "cannot price it")
            continue
        total = _combined(model, tp, sd, act_bytes, kv_bytes)
        all_tokens = sum(s.tokens for s in sd.values())
        logit_tokens = sum(s.logit_tokens for s in sd.values())
        for c in set(comp[rows]) - {None}:
            mine = rows[comp[rows] == c]
            if c in mc.POOLED or c == "lm_head":
                work_c = total.get(c)
                if c == "linear" and "lm_head" not in set(comp[rows]):
                    work_c = _plus(work_c, total.get("lm_head"))  # the LM head ran among the other GEMMs
                if work_c is None:
                    reason[mine] = f"the model has no {c.replace('_', ' ')} work for this kernel ({model.name})"
                    continue
                unbounded_keys = False
                if isinstance(work_c, mc.Missing) and c == "attention":
                    priced = _decode_attention_unknown_keys(model, tp, sd, act_bytes, kv_bytes)
                    if priced is not None:
                        work_c, unbounded_keys = priced, True
                if isinstance(work_c, mc.Missing):
                    reason[mine] = work_c.reason
                    continue
                f_total, b_total = work_c.flops, work_c.bytes
                if known is not None:
                    done = ~np.isnan(known[0][mine])
                    f_total = max(f_total - float(np.nansum(known[0][mine][done])), 0.0)
                    b_total = max(b_total - float(np.nansum(known[1][mine][done])), 0.0)
                    mine = mine[~done]
                    if not len(mine):
                        continue
                if c in ("linear", "lm_head") and grids is not None:
                    matched = _layer_gemms(model, mine, rows, comp, start, grids, name_uniques, name_codes, layers,
                                           int(round(all_tokens)), int(round(logit_tokens)), act_bytes,
                                           flops, nbytes, note)
                    if matched.any():
                        said = hint[mine[matched]]
                        dtype[mine[matched]] = np.where(said != None, said, work_c.dtype)  # noqa: E711
                        unit[mine[matched]], reason[mine[matched]] = work_c.unit, None
                        f_total = max(f_total - float(flops[mine[matched]].sum()), 0.0)
                        b_total = max(b_total - float(nbytes[mine[matched]].sum()), 0.0)
                        mine = mine[~matched]
                        if not len(mine):
                            continue
                    note[mine] = ("duration share of the step's remaining dense-GEMM work: neither its grid nor "
                                  "its name identifies the model layer it computes")
                d = dur[mine]
                w = d / d.sum() if d.sum() > 0 else np.full(len(mine), 1.0 / len(mine))
                flops[mine], nbytes[mine] = f_total * w, b_total * w
                unit[mine] = work_c.unit
                if work_c.unit == mc.MATRIX:
                    said = hint[mine]
                    dtype[mine] = np.where(said != None, said, work_c.dtype)  # noqa: E711
                    if c in ("linear", "experts"):
                        # A mixed-precision kernel (bf16 x MXFP4) fits quantised and 16-bit
                        # weights alike: it says nothing against the stored precision.
                        plain = [d for d, m in zip(said.tolist(), mixed[mine].tolist()) if not m]
                        kernel_dtypes.setdefault(c, set()).update(set(plain) - {None})
                else:
                    dtype[mine] = work_c.dtype
                reason[mine] = None
                kind = _bytes_estimate(c, sd, steps.at[i, "prefill_side"] if "prefill_side" in steps else None)
                if unbounded_keys:
                    kind = UPPER
                    out.estimates.setdefault(c, UNKNOWN_KEYS_BASIS)
                if kind is not None:
                    estimate[mine] = kind
                    out.estimates.setdefault(c, _estimate_basis(model, tp, c, sd))
            else:
                _per_launch(model, tp, c, mine, fused, out_size, all_tokens, logit_tokens, flops, nbytes, dtype,
                            unit, reason, act_bytes, kv_bytes)
        if steps.at[i, "phase"] == MIXED and PREFILL in sd and DECODE in sd:
            _mixed_share(model, tp, sd, rows, comp, share, act_bytes, kv_bytes)
    for c, seen in kernel_dtypes.items():
        stored = model.weight("experts" if c == "experts" else "mlp").compute
        if seen and stored not in seen and not (seen & {"bf16", "fp16"} and stored in ("bf16", "fp16")):
            out.dtype_conflicts[c] = ("/".join(sorted(seen)), stored)
    out.layer_check = layer_check(model, work, comp, steps)
    return out


def _grids(work: pd.DataFrame) -> np.ndarray | None:
    """(grid x, y, z, block x, y, z) per unit, or None when the work table carries no grids."""
    cols = [f"{g}_{a}" for g in ("grid", "block") for a in "xyz"]
    if not all(c in work for c in cols):
        return None
    return np.stack([work[c].to_numpy().astype(np.int64) for c in cols], axis=1)


# The component of the kernel before a GEMM that tells which of two layers of one width it is:
# after attention the output projection, after the activation the MLP's down projection.
_AFTER = {"attention": ("o_proj", "linear_attn_out"), "linear_attention": ("o_proj", "linear_attn_out"),
          "activation": ("down_proj", "shared_down_proj"), "experts": ("down_proj", "shared_down_proj"),
          "routing": ("down_proj", "shared_down_proj")}


def _layer_gemms(model, mine, rows, comp, start, grids, name_uniques, name_codes, layers, tokens, logit_tokens,
                 act_bytes, flops, nbytes, note) -> np.ndarray:
    """Price the GEMM kernels of ``mine`` whose grid identifies their layer (the model's layer of
    the width N the grid gives at M = the step's tokens) as that layer: 2*M*N*K FLOPs, weights +
    activations bytes. Returns which of ``mine`` were priced."""
    matched = np.zeros(len(mine), dtype=bool)
    if tokens <= 0:
        return matched
    widths = tuple(sorted({n for _, _, _, n in layers}))
    lm = [x for x in layers if x[0] == "lm_head"]
    by_start = rows[np.argsort(start[rows], kind="stable")]
    position = {int(r): i for i, r in enumerate(by_start.tolist())}
    for j, r in enumerate(mine.tolist()):
        name = name_uniques[name_codes[r]]
        g = grids[r]
        grid, block = (int(g[0]), int(g[1]), int(g[2])), (int(g[3]), int(g[4]), int(g[5]))
        m, shape = tokens, grid_shapes.derive(name, grid, block, m=tokens, n_candidates=widths)
        if (shape is None or shape.n_match is None) and logit_tokens and logit_tokens != tokens and lm:
            # The LM head computes only the logit tokens (one per request).
            m, shape = logit_tokens, grid_shapes.derive(name, grid, block, m=logit_tokens,
                                                        n_candidates=(lm[0][3],))
        if shape is None or not shape.n_fits:
            continue
        cands = lm if m != tokens else [x for x in layers if x[3] in shape.n_fits]
        if len({(x[2], x[3]) for x in cands}) > 1:
            cands = _by_neighbour(cands, by_start, position[r], comp, model.hidden)
        if len({(x[2], x[3]) for x in cands}) != 1:
            continue
        layer, cls, k, n = cands[0]
        mm = logit_tokens if layer == "lm_head" and logit_tokens else m
        flops[r] = 2.0 * mm * n * k
        nbytes[r] = n * k * model.weight(cls).bytes_per_param + mm * (k + n) * act_bytes
        how = "the step's logit tokens" if layer == "lm_head" else "the step's tokens"
        note[r] = (f"{layer}: N={n} matched from the grid {list(grid)} and tile {shape.tile.n}x{shape.tile.m} "
                   f"({shape.tile.family}), K={k} from the model, M={mm} ({how}); 2*M*N*K")
        matched[j] = True
    return matched


def _by_neighbour(cands, by_start, at, comp, hidden):
    """Of the layers a GEMM's grid fits (one width but different K, or several widths a split-K
    grid allows), the ones the kernel before it points to."""
    for i in range(at - 1, -1, -1):
        c = comp[by_start[i]]
        if c in _AFTER:
            return [x for x in cands if x[0] in _AFTER[c]]
        if c in ("norm", "rope", "qk_norm", "embedding", "quantize"):
            return [x for x in cands if x[2] == hidden]  # reads the residual stream
    return cands


# Keys per request that no context reaches: decode attention priced at this many keys needs
# more than the bandwidth roof in any kernel's time, so the roofline caps it (``roofline``).
UNBOUNDED_KEYS = float(2 ** 40)
UNKNOWN_KEYS_BASIS = (
    "upper bound: the keys each request attends to are not in the trace; a decode step's attention does "
    "4*Hq*d FLOPs per key read (2*Hkv*d KV bytes), an intensity that no key count changes; where it is below "
    "the GPU's ridge the kernels are memory-bound, and their bytes are capped at what peak bandwidth moves in "
    "their time")


def _decode_attention_unknown_keys(model: ModelSpec, tp: int, sides: dict[str, mc.Side], act_bytes: float,
                                   kv_bytes: float) -> mc.Work | None:
    """Decode attention of a step whose keys are unknown, priced at more keys than any context
    holds (one query per request: pairs = keys), for the roofline to cap at the roof as an
    upper bound. None for a step with prefill work: its intensity grows with its queries per
    request, so without the keys no bound class follows."""
    d = sides.get(DECODE)
    if set(sides) != {DECODE} or d.requests <= 0 or d.tokens != d.requests:
        return None
    keys = d.requests * UNBOUNDED_KEYS
    side = mc.Side(d.requests, d.tokens, keys, keys, d.logit_tokens)
    got = mc.step_costs(model, side, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes,
                        act_dtype=model.dtype).get("attention")
    return got if isinstance(got, mc.Work) else None


def _bytes_estimate(component: str, sides: dict[str, mc.Side], stated_prefill) -> str | None:
    """What the model's bytes of a pooled component are in a step (``ESTIMATES``), None when
    they are the minimal traffic of what the step states. ``stated_prefill``: the step's own
    prefill ``BatchSide``, as its source stated it (None when it stated none)."""
    if component == "experts":
        return ESTIMATED  # the distinct experts read are expected under uniform routing, not known
    if component == "attention" and PREFILL in sides and sides[PREFILL].tokens > sides[PREFILL].requests:
        # A prefill whose cached keys no annotation states is priced as reading its own tokens
        # only (no cached prefix, ``step_sides`` and ``attention_geometry``): its KV read is a
        # lower bound.
        if not isinstance(stated_prefill, BatchSide) or stated_prefill.kv_tokens is None:
            return LOWER
    return None


def _estimate_basis(model: ModelSpec, tp: int, component: str, sides: dict[str, mc.Side]) -> str:
    """The formula and numbers behind a component's estimated bytes, as the JSON states them."""
    if component == "attention":
        return ("lower bound: the KV read of a prefill whose cached keys the trace does not state counts its own "
                "tokens only (no cached prefix)")
    tokens = sum(s.tokens for s in sides.values())
    e, k = model.experts, model.top_k
    touched = expected_experts(e, k, tokens)
    per = mc.expert_parameters(model, tp) * model.weight("experts").bytes_per_param
    # Expected distinct experts per MoE layer when each of B tokens picks k of E experts
    # uniformly: E * (1 - (1 - k/E)^B) (each expert is missed by one token with probability
    # 1 - k/E, by all B with (1 - k/E)^B).
    return (f"the model's estimate: expected distinct experts per MoE layer under uniform routing, "
            f"E*(1-(1-k/E)^B) = {e}*(1-(1-{k}/{e})^{tokens:g}) = {touched:.1f} of {e} at B={tokens:g} tokens "
            f"(the first step priced; each step by its own tokens), each expert's weights read once: {per:,.0f} bytes per expert per rank; "
            "where that needs more than the bandwidth roof in the kernels' time, the bytes are capped at the "
            "roof: an upper bound")


def kv_cache_dtype(names, default: str) -> tuple[str, float | None, str]:
    """(dtype, bytes per element or None for "the model's", how) of the KV cache, from kernel names."""
    fp8 = next((str(n) for n in names if _name_flags(str(n))[2]), None)
    if fp8:
        return "fp8", 1.0, f"fp8: kernel {fp8[:80]!r} reads an FP8 KV cache"
    return default, None, f"{default}: the model's dtype (no kernel name says FP8 KV cache)"


def attention_per_layer(model: ModelSpec | None, sides: dict[str, mc.Side]) -> tuple[float | None, float | None, str]:
    """(query-key pairs, keys read, note) of one softmax-attention layer in a step: the sides
    summed; with a model, averaged over its full and sliding-window layers."""
    pairs = keys = 0.0
    kinds = [(None, 1)]
    if model is not None:
        layers = [layer for layer in model.layers if layer.attention != "linear"]
        windows = sorted({layer.window for layer in layers}, key=lambda w: (w is None, w or 0))
        kinds = [(w, sum(1 for layer in layers if layer.window == w)) for w in windows] or kinds
    n = sum(c for _, c in kinds)
    for side in sides.values():
        for window, count in kinds:
            geo = mc.attention_geometry(side, window)
            if geo is None:
                return None, None, ""
            pairs += geo[0] * count / n
            keys += geo[1] * count / n
    note = "" if len(kinds) == 1 else f" (averaged over the model's {n} layers, sliding windows {[w for w, _ in kinds if w]})"
    return pairs, keys, note


def mc_bytes(dtype: str) -> float:
    return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}.get(dtype, 2.0)


def _combined(model, tp, sides: dict[str, mc.Side], act_bytes, kv_bytes) -> dict[str, mc.Work | mc.Missing]:
    """The step's pooled components over its sides: the weights are read once for the step."""
    if len(sides) == 1:
        return mc.step_costs(model, next(iter(sides.values())), tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes,
                             act_dtype=model.dtype)
    s = list(sides.values())
    merged = mc.Side(sum(x.requests for x in s), sum(x.tokens for x in s),
                     None if any(x.kv_tokens is None for x in s) else sum(x.kv_tokens for x in s),
                     None if any(x.pairs is None for x in s) else sum(x.pairs for x in s),
                     sum(x.logit_tokens for x in s))
    whole = mc.step_costs(model, merged, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype)
    # Attention is not additive in the merged side's keys (sliding windows): sum the sides.
    parts = [mc.step_costs(model, x, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype) for x in s]
    for c in ("attention", "linear_attention"):
        if c in whole:
            ws = [p.get(c) for p in parts]
            whole[c] = next((w for w in ws if isinstance(w, mc.Missing)), None) or _sum(ws)
    return whole


def _sum(works):
    works = [w for w in works if isinstance(w, mc.Work)]
    if not works:
        return None
    return mc.Work(sum(w.flops for w in works), sum(w.bytes for w in works), works[0].dtype, works[0].unit,
                   works[0].note)


def _plus(a, b):
    if not isinstance(a, mc.Work) or not isinstance(b, mc.Work):
        return a
    return mc.Work(a.flops + b.flops, a.bytes + b.bytes, a.dtype, a.unit, a.note + "; LM head included")


def _lm_head(rows: np.ndarray, comp: np.ndarray, names: np.ndarray, start: np.ndarray) -> None:
    """Mark the step's LM head: its last GEMM, when that kernel's name is launched once in the step."""
    gemm = rows[comp[rows] == "linear"]
    if len(gemm) < 2:
        return
    last = gemm[np.argmax(start[gemm])]
    if int((names[gemm] == names[last]).sum()) == 1:
        comp[last] = "lm_head"


def _per_launch(model, tp, c, mine, fused, out_size, tokens, logit_tokens, flops, nbytes, dtype, unit, reason,
                act_bytes, kv_bytes) -> None:
    """Each launch processes every token of the step: its per-token size times the tokens."""
    moe_only = bool(model.experts and model.count(mlp="dense") == 0)
    if c == "sampling":
        # Sampling reads the logits of every logit token (fp32) at least once.
        f = np.full(len(mine), logit_tokens * model.vocab)
        b = np.full(len(mine), logit_tokens * model.vocab * 4.0)
    else:
        f, b = np.zeros(len(mine)), np.zeros(len(mine))
        sizes = np.nan_to_num(out_size[mine], nan=-1.0)  # -1: the activation dtype
        adds = fused[mine]
        for add, size in {(bool(a), float(s)) for a, s in zip(adds, sizes)}:
            sel = (adds == add) & (sizes == size)
            per = mc.per_token(model, c, tp, fused_add=add, moe_layer=moe_only, act_bytes=act_bytes,
                               kv_bytes=kv_bytes, out_bytes=None if size < 0 else size)
            if per is None:
                return
            f[sel], b[sel] = per[0] * tokens, per[1] * tokens
    flops[mine], nbytes[mine], dtype[mine], unit[mine], reason[mine] = f, b, model.dtype, mc.VECTOR, None


def _mixed_share(model, tp, sides, rows, comp, share, act_bytes, kv_bytes) -> None:
    """Prefill share of each unit of a mixed step by the model: the share of each component's
    roofline work (FLOPs and bytes, the weights split by tokens) its prefill side holds."""
    pre = mc.step_costs(model, sides[PREFILL], tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype)
    dec = mc.step_costs(model, sides[DECODE], tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype)
    tok_share = sides[PREFILL].tokens / (sides[PREFILL].tokens + sides[DECODE].tokens)
    for c in set(comp[rows]) - {None}:
        mine = rows[comp[rows] == c]
        p, d = pre.get(c), dec.get(c)
        if isinstance(p, mc.Work) and isinstance(d, mc.Work) and c in ("attention", "linear_attention"):
            tp_, td = max(p.flops, 1.0) + p.bytes, max(d.flops, 1.0) + d.bytes
            share[mine] = tp_ / (tp_ + td)
        else:
            share[mine] = tok_share


# Attention kernels that are not one per layer (``layer_check``):
# - the second stage of split-KV attention, which merges the partial results of the first:
#   flash-decoding / FlashAttention ``flash_fwd_splitkv_combine``, vLLM ``paged_attention_v2``
#   + ``..._reduce_kernel`` (and ROCm's ``paged_attention_ll4mi_reduce``), vLLM's unified
#   attention ``reduce_segments``, FlashInfer ``merge_state(s)``, Triton ``..._stage2``;
_COMBINE = re.compile(r"combine|reduce|merge_?(attn_?)?states?|mergestate|stage_?2", re.I)
# - per-step setup (metadata, plans, split counts), launched once or twice per step whatever the
#   layer count: by name, or by a count no larger than SETUP_MAX in a model of many layers.
_SETUP = re.compile(r"metadata|plan(?![a-z])|prepare|num_?splits|scheduler|indptr|page_?table|block_?table|"
                    r"init_|setup", re.I)
SETUP_MAX = 2
# Forward kernels per layer a step may hold: a capture trace's warmup + capture of one graph,
# prefill and decode kernels of a mixed step, per-window-kind kernels of one layer.
PER_LAYER_MAX = 4


def attention_layer_count(counts: dict[str, int], layers: int) -> tuple[int, int, int]:
    """(forward, combine, setup) kernels among one step's attention kernel ``counts`` (by
    name): forward kernels are one per layer (or a small multiple), combine kernels the
    second stage of split-KV attention, setup kernels launched a fixed few times per step."""
    forward = combine = setup = 0
    # The function's own name decides, not its template arguments (CUTLASS FMHA kernels carry
    # a ``PersistentTileScheduler`` argument).
    base = {n: _function_name(n) for n in counts}
    named_forward = any(not _COMBINE.search(b) and not _SETUP.search(b) for b in base.values())
    for name, c in counts.items():
        if _SETUP.search(base[name]) or (c <= SETUP_MAX and layers > 2 * SETUP_MAX and len(counts) > 1):
            setup += c
        elif named_forward and _COMBINE.search(base[name]):
            combine += c
        else:
            forward += c
    return forward, combine, setup


def _function_name(name: str) -> str:
    """A kernel's function name: its demangled name before template and call arguments."""
    name = name[5:] if name.startswith("void ") else name
    cut = [i for i in (name.find("<"), name.find("(")) if i > 0]
    return name[:min(cut)] if cut else name


def _fits(n: int, layers: int) -> bool:
    return n > 0 and n % layers == 0 and n // layers <= PER_LAYER_MAX


def layer_check(model: ModelSpec, work: pd.DataFrame, comp: np.ndarray, steps: pd.DataFrame) -> str | None:
    """A sentence when the trace's steps run attention layers in a number that does not fit
    the model's (a sign --model names another model); None when they fit.

    Layers, not kernels, are counted: per step, the attention kernels by name less the
    second stages of split-KV attention and per-step setup kernels (``attention_layer_count``);
    the layers fit when that count is the model's layer count times a small integer
    (``PER_LAYER_MAX``: capture duplicates, mixed steps), or, when no name shows a combine
    stage, when all of the step's attention kernels are such a multiple plus at most ``SETUP_MAX``."""
    step_of = work["step"].to_numpy()
    names = work["name"].astype(str).to_numpy() if len(work) else np.array([], dtype=object)
    layers = {"attention": model.n_layers - model.count(attention="linear"),
              "linear_attention": model.count(attention="linear")}
    problems = []
    for c, want in layers.items():
        sel = (comp == c) & (step_of >= 0)
        if not sel.any() or not want:
            if sel.any() and not want:
                problems.append(f"the trace runs {c.replace('_', ' ')} kernels but {model.name} has no such layers")
            continue
        label = c.replace("_", " ")
        per_step = pd.DataFrame({"step": step_of[sel], "name": names[sel]}).groupby(["step", "name"]).size()
        seen = []
        for _, counts in per_step.groupby(level="step"):
            by_name = {str(k[1]): int(v) for k, v in counts.items()}
            fwd, comb, setup = attention_layer_count(by_name, want)
            total = fwd + comb + setup
            # Without a combine stage the names show, a second stage may still hide under another
            # name: then the step's whole count, less a constant few, must be a multiple.
            fits = _fits(fwd, want) or (not comb and any(_fits(total - extra, want) for extra in range(SETUP_MAX + 1)))
            seen.append((fits, total, fwd, comb, setup))
        bad = [x for x in seen if not x[0]]
        # Most steps decide: a stray step (cut at the trace's edge) does not.
        if len(bad) * 2 > len(seen):
            _, total, fwd, comb, setup = sorted(bad, key=lambda x: x[1])[len(bad) // 2]
            parts = [f"{fwd} per-layer"] + ([f"{comb} split-KV combine"] if comb else []) + \
                ([f"{setup} per-step setup"] if setup else [])
            problems.append(f"its steps run {total} {label} kernels each ({', '.join(parts)}), which does not fit "
                            f"{model.name}'s {want} {label} layers")
    return "; ".join(problems) or None
