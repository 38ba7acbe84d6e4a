"""Each kernel's own work: an op's (or a step's pooled component's) kernels told apart by their
role, not shared out by their durations (issue 47).

An op often launches more than the kernel that does its work: cuBLAS zeroes a workspace
(``Memset (Device)``) before a GEMM, PyTorch's flash attention fills a one-element counter
(``FillFunctor``), hipBLASLt reduces its split-K partial sums in a second kernel
(``Cijk_..._PostGSU<n>``), a vLLM attention op writes the KV cache before it attends. A share of
the op's cost by duration credits those with FLOPs they never do (the memsets of the H100
Hugging Face trace got 86 GFLOP of their GEMMs), and leaves the main kernel's TFLOP/s low.

Roles, from a kernel's name, its kind (copy-engine memset/memcpy) and taxonomy category:

- auxiliary (``aux_role``): ``memset`` (the copy engine's memset, or a kernel that sets memory),
  ``fill`` (a fill kernel), ``copy`` (a copy-engine memcpy, or a copy kernel inside an op that
  is not itself a copy), ``split_reduce`` (the second stage of a split-K GEMM or split-KV
  attention that sums the first stage's partial results), ``cache_write`` (a KV-cache write
  inside an attention op). They do none of the op's FLOPs: they get the bytes they touch where
  the trace says (``aux_bytes``), beside the op's own, and no FLOPs (``op_split``);
- MoE (``moe_role``): the routed experts' GEMMs (gate-up, then down: which is which from their
  order within the layer, ``expert_gemm_roles``), ``gating`` (router softmax and top-k, token
  sort and expert offsets) and ``combine`` (the weighted sum of each token's top-k outputs);
  their costs: ``tracekit.models.costs.moe_roles``.

An op whose kernels are all auxiliary (``aten::copy_``, ``aten::fill_``) is their work: roles
apply only beside a kernel that is not. ``op_split`` shares a shape-priced op's cost by these
roles; ``pooled_roles`` (model-priced steps) lives in ``layer_roles``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import numpy as np

from tracekit.analysis.pricing import kernel_names, op_args, op_costs, taxonomy
from tracekit.models import costs as mc
from tracekit.models.config import LINEAR

MEMSET, FILL, COPY, SPLIT_REDUCE, CACHE_WRITE = "memset", "fill", "copy", "split_reduce", "cache_write"
# A kernel of a MoE op that is none of its roles (an activation or a quantisation between the
# expert GEMMs): work the op's cost (experts and routing) does not hold.
SIDE = "side"
AUX_ROLES = (MEMSET, FILL, COPY, SPLIT_REDUCE, CACHE_WRITE, SIDE)
_SAID = {
    SPLIT_REDUCE: "split-K/split-KV reduce",
    CACHE_WRITE: "KV-cache write",
    SIDE: "work between a MoE op's GEMMs that the op's cost does not hold",
}
EXPERT_GEMM = "expert_gemm"

# Kernels that set memory to a value: ATen's FillFunctor (aten::fill_ / zero_), ROCm's
# hipMemset kernels (``__amd_rocclr_fillBuffer*``, CLR rocclr/device/rocm blit kernels), and
# kernels named memset (triton_kernels' ``_combined_routing_memset``, CUTLASS/TRT-LLM
# ``memsetKernel``).
_FILL = re.compile(r"fillfunctor|fill_?kernel|fillbuffer|memset|zero_?kernel")
# Copy kernels: ATen's direct_copy_kernel / ``bfloat16_copy_kernel_cuda``, ROCm's hipMemcpy
# blit kernels (``__amd_rocclr_copyBuffer*``), CatArrayBatchedCopy.
_COPY = re.compile(r"copy_kernel|copybuffer|direct_copy|batchedcopy")
# The second stage of a split reduction: cuBLAS ``splitKreduce_kernel``, CUTLASS
# ``ReduceSplitK``, Tensile/hipBLASLt ``Cijk_..._PostGSU<n>`` (Tensile ContractionSolution.cpp
# appends "_PostGSU" to the global-split-U reduction kernel's name), FlashAttention's
# ``flash_fwd_splitkv_combine_kernel``, vLLM's ``paged_attention_v2_reduce_kernel`` and
# ROCm ``paged_attention_ll4mi_reduce_kernel``, vLLM's unified-attention ``reduce_segments``,
# FlashInfer ``MergeStates``.
_SPLIT_REDUCE = re.compile(
    r"splitk_?reduce|split_k_reduce|reducesplitk|postgsu|splitkv_combine|"
    r"attention_v2_reduce|ll4mi_reduce|reduce_segments|merge_?(attn_?)?states?"
)
# MoE kernels that combine each token's top-k expert outputs (weighted sum, scatter back):
# triton_kernels' ``_finalize_matmul`` (its repr names ``_finalize_matmul_scatter_<dtype>``,
# matmul_ogs_details/_finalize_matmul.py), TensorRT-LLM / FlashInfer ``finalizeKernel``,
# vLLM ``moe_sum_kernel``, SGLang/AITER ``moe_sum`` / ``unpermute`` / ``moe_combine`` (not
# triton_kernels' ``_combined_routing_*``, which sort the tokens).
_COMBINE = re.compile(r"finalize|moe_?sum|unpermute|combine(?!d)|moe_?reduce")


@lru_cache(maxsize=1 << 14)
def aux_role(name: str, kind: str, category: str) -> str | None:
    """The auxiliary role of a kernel (``AUX_ROLES``), None for one that does an op's work."""
    if kind == taxonomy.MEMSET:
        return MEMSET
    if kind == taxonomy.MEMCPY:
        return COPY
    text = name.lower() if isinstance(name, str) else ""
    if _SPLIT_REDUCE.search(text):
        return SPLIT_REDUCE
    if category == taxonomy.KV_CACHE and kernel_names.component_of(category, name) == "kv_write":
        return CACHE_WRITE
    if category in (taxonomy.ELEMENTWISE, taxonomy.OTHER, taxonomy.MOE, taxonomy.MEMSET):
        if _FILL.search(text):
            return MEMSET if "memset" in text else FILL
        if category != taxonomy.MOE and _COPY.search(text):
            return COPY
    return None


@lru_cache(maxsize=1 << 14)
def moe_role(name: str, category: str) -> str | None:
    """A MoE kernel's role: ``EXPERT_GEMM`` (gate-up or down: ``expert_gemm_roles``),
    ``mc.COMBINE`` or ``mc.GATING``; None for a kernel that is not MoE work."""
    if category != taxonomy.MOE:
        return None
    component = kernel_names.component_of(category, name)
    text = name.lower() if isinstance(name, str) else ""
    if _COMBINE.search(text):
        return mc.COMBINE
    return EXPERT_GEMM if component == "experts" else mc.GATING


def moe_components(
    comp: np.ndarray, name_codes: np.ndarray, name_uniques: list[str], category: np.ndarray
) -> np.ndarray:
    """``kernel_names.components`` with a MoE combine kernel whose name says "matmul"
    (triton_kernels' ``_finalize_matmul_scatter``) counted as routing, whose combine it is, not
    as an expert GEMM: a MoE layer's expert GEMMs are then its gate-up and down GEMMs only."""
    sel = np.flatnonzero(comp == "experts")
    if not len(sel):
        return comp
    out = comp.copy()
    combine = np.array(
        [moe_role(name_uniques[c], taxonomy.MOE) == mc.COMBINE if c >= 0 else False for c in range(len(name_uniques))]
        + [False],
        dtype=bool,
    )
    out[sel[combine[name_codes[sel]] & (category[sel] == taxonomy.MOE)]] = "routing"
    return out


def expert_gemm_roles(count: int, layers: int) -> list[str] | None:
    """The roles of ``count`` expert-GEMM launches of ``layers`` MoE layers in launch order: two
    a layer are its gate-up GEMM then its down GEMM (the activation between needs the first's
    output: vLLM fused_moe / fused_marlin_moe, SGLang fused_moe_kernel, triton_kernels matmul_ogs,
    TensorRT-LLM bmm). None for any other count (one a layer: a fused single-kernel MoE doing
    both, which its callers price as the whole layer)."""
    if layers > 0 and count == 2 * layers:
        return [mc.GATE_UP, mc.DOWN] * layers
    return None


# What an auxiliary kernel's note says, by how its bytes were found.
AUX_OWN = "auxiliary kernel ({role}) of its op: no share of the op's FLOPs; bytes: {how}, beside the op's"
AUX_SHARE = (
    "auxiliary kernel ({role}) of its op: no share of the op's FLOPs; bytes: a duration share of the "
    "op's (what it touches is not in the trace)"
)
MAIN_SHARE = (
    "a duration share of its op's cost among the op's {n} kernels that do its work (the trace does not "
    "say which does what)"
)


def aux_bytes(name: str, kind: str, recorded: int, op_bytes: float | None) -> tuple[float, str] | None:
    """(bytes, how) an auxiliary kernel touches where the trace says: a copy-engine memset's
    recorded ``bytes`` (CUPTI's memset activity record: the bytes it set), a memcpy's (its
    recorded bytes, read and written for a device-to-device copy: twice), or the cost of the
    kernel's own launching op from its shapes (``aten::fill_`` of a one-element tensor: 4 bytes).
    None where none of them does: a launch grid does not say how many elements each thread
    sets, so the grid is not used."""
    if kind == taxonomy.MEMSET and recorded is not None and recorded >= 0:
        return float(recorded), "the bytes the memset set (its activity record)"
    if kind == taxonomy.MEMCPY and recorded is not None and recorded >= 0:
        both = "dtod" in name.lower() or "device -> device" in name.lower()
        return float(recorded) * (2 if both else 1), (
            "the bytes the copy read and wrote (its activity record)"
            if both
            else "the bytes the copy moved (its activity record)"
        )
    if op_bytes is not None and np.isfinite(op_bytes):
        return float(op_bytes), "those of its own launching op, from its recorded shapes"
    return None


def op_split(
    sharing: np.ndarray, d: np.ndarray, F: np.ndarray, B: np.ndarray, aux: np.ndarray, own: np.ndarray, how: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FLOPs, bytes and note of each kernel of shape-priced ops, by role. The rows are sorted by
    op (and replay): ``sharing`` the first row of each op's kernels, ``d`` their durations, ``F``
    and ``B`` their op's cost (repeated on each of its rows), ``aux`` each one's auxiliary role
    (None: it does the op's work), ``own`` the bytes it touches where known (NaN elsewhere,
    ``aux_bytes``) and ``how`` how they were found.

    An auxiliary kernel beside one that is not gets no FLOPs and the bytes it touches, where the
    trace says, on top of the op's: the op's cost model is the minimal traffic of its main work (a
    GEMM's operands, an attention's keys, query and output), which a workspace memset, a counter
    fill, an autocast copy or a KV-cache write add to, not take from (taken from it, they left a
    GEMM with no bytes where an autocast cast outweighed them). Where the trace does not say, it
    gets a duration share of the op's bytes (its note says which). The op's other kernels get all
    its FLOPs and the rest of its bytes, by duration among them (noted where they are several). An
    op whose kernels are all auxiliary and that does no FLOPs (a copy, a fill) is shared among them by
    duration, as its own work."""
    n = len(d)
    size = np.diff(np.r_[sharing, n])
    part = np.repeat(np.arange(len(sharing)), size)
    is_aux = np.array([a is not None for a in aux.tolist()], dtype=bool) if n else np.zeros(0, dtype=bool)
    n_main = np.add.reduceat((~is_aux).astype(np.int64), sharing)[part] if n else np.zeros(0, dtype=np.int64)
    # An op that does FLOPs is not the work of its auxiliary kernels even where none of its main
    # kernels is in the table (they ran in the next window of a split trace, or past a cut): the
    # role is the op's, not the window's, so a split trace prices as the whole one does.
    aux_eff = is_aux & ((n_main > 0) | (F > 0))
    main = ~aux_eff
    # Durations are whole nanoseconds: their float sums are exact in any order.
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.add.reduceat(d, sharing)[part] if n else d
        share_all = np.where(total > 0, d / total, 1.0 / size[part])
        shared = aux_eff & np.isnan(own)  # a duration share of the op's bytes: taken from the op's
        aux_b = np.where(aux_eff, np.where(shared, B * share_all, own), 0.0)
        taken = np.add.reduceat(np.where(shared, aux_b, 0.0), sharing)[part] if n else aux_b
        dm = np.add.reduceat(np.where(main, d, 0.0), sharing)[part] if n else d
        nm = np.where(n_main > 0, n_main, size[part])
        share_main = np.where(dm > 0, d / dm, 1.0 / nm)
        f = np.where(main, F * share_main, 0.0)
        b = np.where(main, (B - taken) * share_main, aux_b)
    note = np.full(n, None, dtype=object)
    texts: dict[tuple, str] = {}
    for i in np.flatnonzero(aux_eff | (main & (nm > 1))).tolist():
        if aux_eff[i]:
            key = (aux[i], how[i] if not np.isnan(own[i]) else None)
            if key not in texts:
                said = _SAID.get(key[0], key[0])
                texts[key] = AUX_OWN.format(role=said, how=key[1]) if key[1] else AUX_SHARE.format(role=said)
        else:
            key = ("main", int(nm[i]))
            if key not in texts:
                texts[key] = MAIN_SHARE.format(n=key[1])
        note[i] = texts[key]
    return f, b, note


MOE_ROLE_NOTE = "{role} of its MoE layer: {what}"
_ROLE_NAME = {
    mc.GATE_UP: "gate-up GEMM",
    mc.DOWN: "down GEMM",
    mc.GATING: "gating",
    mc.COMBINE: "top-k combine",
    EXPERT_GEMM: "expert GEMMs",
}
_ROLE_WHAT = {
    mc.GATE_UP: "2*T*k*H*{g}I/tp FLOPs over its {n} token-expert rows (twice the down GEMM's for a gated MLP)",
    mc.DOWN: "2*T*k*I/tp*H FLOPs over its {n} token-expert rows",
    mc.GATING: "the router's softmax and top-k over the experts and the token sort",
    mc.COMBINE: "the weighted sum of each token's top-k outputs",
    EXPERT_GEMM: "both expert GEMMs of the layer in one kernel",
}
ROLE_SHARE = "; a duration share of that work among the {n} kernels that do it"
MISSING_ROLES = (
    "; with the {roles} work, which no kernel of its own does here, spread over the kernels of "
    "the others in proportion to their own"
)


def moe_shares(
    roles: list[str | None], d: np.ndarray, model, tokens: float | None, tp: int, act_bytes: float
) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """Fractions of one MoE layer's cost (FLOPs, bytes) each of its kernels does, by role, and
    each one's note. ``roles``: ``moe_role`` of each kernel in launch order, the expert GEMMs
    resolved here (``expert_gemm_roles``; one GEMM does both); ``d`` their durations. The role
    costs are the model's (``mc.moe_roles`` at the layer's ``tokens``); kernels of one role share
    it by duration. A role no kernel does (routing in a separate op, a combine fused into the
    down GEMM) has its work spread over the present roles in proportion to theirs, as the note
    says. None where the expert GEMMs' roles cannot be told or the model has no routed experts."""
    gemms = [i for i, r in enumerate(roles) if r == EXPERT_GEMM]
    resolved = [EXPERT_GEMM] if len(gemms) == 1 else expert_gemm_roles(len(gemms), 1)
    role = [r for r in roles if r is not None]
    if resolved is None or model is None or not tokens or len(role) < len(roles):
        return None
    per = mc.moe_roles(model, mc.Side(tokens, tokens, None, None, 0.0), tp=tp, act_bytes=act_bytes)
    if not per:
        return None
    for i, r in zip(gemms, resolved):
        role[i] = r
    cost = {**per, EXPERT_GEMM: tuple(a + b for a, b in zip(per[mc.GATE_UP], per[mc.DOWN]))}
    held = set(role)
    missing = sorted({mc.GATING, mc.COMBINE} - held)
    mine = [sum(cost[r][j] for r in held) for j in (0, 1)]
    f, b = np.zeros(len(role)), np.zeros(len(role))
    notes: list[str] = []
    g = "2" if model.gated_mlp else ""
    for i, r in enumerate(role):
        same = [j for j, x in enumerate(role) if x == r]
        dr = float(d[same].sum())
        w = float(d[i]) / dr if dr > 0 else 1.0 / len(same)
        f[i] = cost[r][0] / mine[0] * w if mine[0] > 0 else 0.0
        b[i] = cost[r][1] / mine[1] * w if mine[1] > 0 else 0.0
        text = MOE_ROLE_NOTE.format(role=_ROLE_NAME[r], what=_ROLE_WHAT[r].format(g=g, n=f"{tokens * model.top_k:g}"))
        if len(same) > 1:
            text += ROLE_SHARE.format(n=len(same))
        if missing:
            text += MISSING_ROLES.format(roles=" and ".join(missing))
        notes.append(text)
    return f, b, notes


def partition_roles(
    sharing: np.ndarray, names: list, kinds: list, categories: list, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ops' kernels sorted by op (``sharing``: each op's first row): its auxiliary role
    (``aux_role``; None: it does the op's work) and, in an op holding expert GEMMs, its MoE role
    (``moe_role``; None elsewhere). In such an op a reduction kernel after the last expert GEMM is
    its combine (vLLM's fused_marlin_moe and fused_experts sum each token's top-k outputs with
    ``torch.sum`` / ``ops.moe_sum``), and a kernel of no MoE role is ``SIDE`` work."""
    n = len(names)
    aux = np.array([aux_role(a, k, c) for a, k, c in zip(names, kinds, categories)], dtype=object)
    moe = np.full(n, None, dtype=object)
    if not n:
        return aux, moe
    is_moe = np.array([c == taxonomy.MOE for c in categories], dtype=np.int64)
    bounds = np.r_[sharing, n]
    with_moe = np.flatnonzero((np.add.reduceat(is_moe, sharing) > 0) & (np.diff(bounds) >= 2))
    for lo, hi in zip(bounds[with_moe].tolist(), bounds[with_moe + 1].tolist()):
        rows = range(lo, hi)
        roles = {i: moe_role(names[i], categories[i]) if aux[i] is None else None for i in rows}
        gemm = [i for i, r in roles.items() if r == EXPERT_GEMM]
        if not gemm:
            continue
        last = max(start[i] for i in gemm)
        for i, r in roles.items():
            if aux[i] is not None:
                continue
            if r is None and categories[i] == taxonomy.REDUCTION and start[i] > last:
                r = mc.COMBINE
            if r is None:
                aux[i] = SIDE
            moe[i] = r
    return aux, moe


def _own_op_bytes(
    row_op: int, pricing_op: int, shapes: tuple, parents: np.ndarray, op_names: np.ndarray, cache: dict
) -> float | None:
    """Bytes of the innermost op with a shape cost between a kernel's launching op and (not
    including) its pricing op: ``aten::fill_`` under ``aten::_flash_attention_forward``.
    ``shapes``: the op table's input dims, types and concrete inputs (JSON text per op)."""
    key = (row_op, pricing_op)
    if key in cache:
        return cache[key]
    got_bytes = None
    o = row_op
    while o >= 0 and o != pricing_op:
        name = op_names[o]
        priceable = cache.get(("priceable", name))  # per op name, asked once
        if priceable is None:
            priceable = cache[("priceable", name)] = (
                isinstance(name, str) and op_costs.has_model(name) and not op_costs.needs_context(name)
            )
        if priceable:
            # Layers and steps repeat the same op on the same shapes: each distinct one is priced once.
            shape_key = (name, shapes[0][o], shapes[1][o], shapes[2][o])
            if shape_key in cache:
                got = cache[shape_key]
            else:
                got = cache[shape_key] = op_costs.op_cost_json(name, *shape_key[1:])
            if isinstance(got, op_args.OpCost):
                got_bytes = float(got.bytes)
                break
        o = int(parents[o])
    cache[key] = got_bytes
    return got_bytes


def _rows_of(dims_json) -> float | None:
    """The rows of an op's first input (a MoE op's hidden states [T, H]: its tokens)."""
    try:
        dims = json.loads(dims_json) if isinstance(dims_json, str) and dims_json else None
    except json.JSONDecodeError:
        return None
    first = dims[0] if isinstance(dims, list) and dims else None
    return float(first[0]) if isinstance(first, list) and first and isinstance(first[0], int) else None


def shape_roles(
    order: np.ndarray,
    sharing: np.ndarray,
    group: np.ndarray,
    d: np.ndarray,
    g_flops: np.ndarray,
    g_bytes: np.ndarray,
    g_dtype: np.ndarray,
    names: np.ndarray,
    kinds: np.ndarray,
    category: np.ndarray,
    start: np.ndarray,
    recorded: np.ndarray | None,
    op: np.ndarray,
    pricing: np.ndarray,
    op_names: np.ndarray,
    shapes: tuple,
    parents: np.ndarray,
    step_of: np.ndarray,
    group_dims: list,
    context,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """FLOPs, bytes and note of shape-priced units by role, aligned with ``order`` (the priced
    units sorted by pricing op and replay; ``sharing``: each op's first position, ``group``: each
    position's priced op, whose cost ``g_flops``/``g_bytes``/``g_dtype`` give). Per-unit arrays
    (``names`` ... ``step_of``) are the work table's; ``op_names``, ``shapes`` (input dims, types,
    concrete inputs) and ``parents`` the op table's; ``group_dims`` each priced op's recorded dims;
    ``context(step)`` its step's ``OpContext`` (the model, for a MoE op's roles), or None.
    Auxiliary kernels by ``op_split``; a MoE op's kernels by ``moe_shares``."""
    rows = order
    nm, kd, cat = names[rows], kinds[rows], category[rows]
    aux, moe = partition_roles(sharing, nm.tolist(), kd.tolist(), cat.tolist(), start[rows])
    own = np.full(len(rows), np.nan)
    how = np.full(len(rows), None, dtype=object)
    cache: dict = {}
    for i in np.flatnonzero(aux != None).tolist():  # noqa: E711
        r = int(rows[i])
        rec = int(recorded[r]) if recorded is not None else -1
        own_op = None if rec >= 0 else _own_op_bytes(int(op[r]), int(pricing[r]), shapes, parents, op_names, cache)
        said = aux_bytes(str(nm[i]), str(kd[i]), rec, own_op)
        if said is not None:
            own[i], how[i] = said
    F, B = g_flops[group], g_bytes[group]
    f, b, note = op_split(sharing, d, F, B, aux, own, how)
    if context is None:
        return f, b, note
    bounds = np.r_[sharing, len(rows)]
    gemm = np.array([r == EXPERT_GEMM for r in moe.tolist()], dtype=np.int64)
    with_gemm = np.flatnonzero(np.add.reduceat(gemm, sharing) > 0) if len(rows) else np.zeros(0, dtype=np.int64)
    for lo, hi in zip(bounds[with_gemm].tolist(), bounds[with_gemm + 1].tolist()):
        main = np.array([i for i in range(lo, hi) if aux[i] is None], dtype=np.int64)
        main = main[np.argsort(start[rows[main]], kind="stable")]
        ctx = context(int(step_of[rows[lo]]))
        act = 4.0 if g_dtype[group[lo]] == "fp32" else 2.0
        got = moe_shares(
            list(moe[main]),
            d[main],
            getattr(ctx, "model", None),
            _rows_of(group_dims[group[lo]]),
            getattr(ctx, "tp", 1),
            act,
        )
        if got is None:
            continue
        left = float(b[main].sum())
        f[main], b[main] = F[lo] * got[0], left * got[1]
        note[main] = np.array(got[2], dtype=object)
    return f, b, note


def attention_op_layers(
    groups: np.ndarray,
    step_index: np.ndarray,
    contexts: list,
    first_start: np.ndarray,
    is_attention: np.ndarray,
    n_groups: int,
) -> np.ndarray:
    """Per priced op (``n_groups``), the model's attention layer it is (-1: not matched): among the
    ops priced in a step's context (``groups``, of step ``step_index`` with context ``contexts``),
    the attention ones in launch order, when there are as many as the model's softmax-attention
    layers (the k-th op is the k-th layer, each at its own window)."""
    out = np.full(n_groups, -1, dtype=np.int64)
    for k, ctx in enumerate(contexts):
        model = getattr(ctx, "model", None)
        if model is None:
            continue
        mine = groups[(step_index == k) & is_attention[groups]]
        layers = sum(1 for layer in model.layers if layer.attention != LINEAR)
        if len(mine) and len(mine) == layers:
            out[mine[np.argsort(first_start[mine], kind="stable")]] = np.arange(layers)
    return out
