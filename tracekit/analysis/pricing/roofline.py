"""Roofline attribution: category, FLOPs, bytes and bound of every unit of work.

For each kernel (or leaf CPU op on a CPU trace):

* category from ``taxonomy`` (kernel name, else the launching op's name);
* cost from ``op_costs``: the *pricing op* is the outermost op, among the launching op
  and its ancestors, that has a cost model (``aten::linear`` rather than the
  ``aten::addmm`` it calls); its FLOPs and bytes are shared among every kernel it
  launched, in proportion to their durations. Work with no pricing op or no shapes is
  "cost unknown" with the reason: never zero;
* bound: with the device's peaks for the op's dtype and unit (matrix or vector; a dtype the
  device has no peak for runs at the next wider one it has, ``GpuSpec.runs_as``, and the
  unit's ``peak_note`` says so),
  compute-bound when FLOPs / peak FLOP/s >= bytes / peak bandwidth (arithmetic
  intensity at or above the ridge point), else memory-bound. The fraction of the
  roofline reached is max(FLOPs / peak, bytes / bandwidth) / duration, against the
  datasheet peak and against the achievable ceiling (measured, or a vendor factor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis import categorical

from tracekit.analysis.pricing import kernel_names, model_fit, op_costs, taxonomy
from tracekit.analysis.pricing import model_costs as mc
from tracekit.analysis.pricing.model_costs import ModelCosts
from tracekit.models.config import ModelSpec
from tracekit.models.costs import POOLED
from tracekit.analysis.steps.segment import Segmentation
from tracekit.frameworks import ENGINE_SOURCES
from tracekit.specs import GpuSpec, SpecMatch
from tracekit.analysis.pricing.capture import OpSource, own_ops, with_capture
from tracekit.trace.links import enclosing
from tracekit.trace.model import Trace

COMPUTE, MEMORY, INTERCONNECT, UNKNOWN = "compute", "memory", "interconnect", "unknown"
# A collective with known bytes is bound by the link between GPUs, priced against the spec
# row's interconnect bandwidth per direction.
BOUNDS = (COMPUTE, MEMORY, INTERCONNECT, UNKNOWN)

# What limits a kernel (``limiter``): the roof on its side of the ridge (compute, memory,
# interconnect) when it reaches at least LATENCY_ROOF of that roof; below that neither roof
# limits it and ``latency`` does: too small a grid to fill the GPU, low occupancy, launch and
# synchronisation latency, serial dependencies. ``unknown`` when the roof fraction is.
LATENCY = "latency"
LATENCY_ROOF = 0.3
LIMITERS = (COMPUTE, MEMORY, INTERCONNECT, LATENCY, UNKNOWN)

# Copy-engine transfers have no FLOPs: they are bandwidth work by nature.
_COPY_KINDS = ("memcpy", "memset")


# Where a unit's FLOPs and bytes came from.
SHAPES, CAPTURE, MODEL, NONE = "shapes", "capture", "model", "none"
COST_SOURCES = (SHAPES, CAPTURE, MODEL, NONE)
# ``--costs``: shapes where present and the model elsewhere, or one of them only.
POLICIES = ("auto", "shapes", "model")


@dataclass
class Attribution:
    """Per-unit roofline columns, aligned row for row with ``Segmentation.work``."""

    # category, op_name, flops, bytes, dtype, unit, cost_reason, cost_source, component,
    # intensity, peak_flops, peak_bw, ridge, bound, bound_reason, peak_note, achieved_flops,
    # achieved_bw, roof_fraction, roof_fraction_achievable, limiter
    table: pd.DataFrame
    spec: GpuSpec | None
    spec_reason: str | None
    # The op table ``pricing_op`` indexes: the trace's ops, plus the capture's when given.
    ops: pd.DataFrame | None = None
    # How a graph-capture trace was used, when one was given.
    capture_note: str | None = None
    # What the model path found (KV dtype, layer check, dtype conflicts), when a model was given.
    model_costs: ModelCosts | None = None


def attribute(trace: Trace, seg: Segmentation, match: SpecMatch, capture: Trace | None = None,
              model: ModelSpec | None = None, tp: int = 1, policy: str = "auto",
              model_force: bool = False) -> Attribution:
    """Roofline columns for every unit of work. ``capture``: the graph-capture trace
    whose ops describe this trace's graph-replayed kernels; ``model`` and ``tp``: the
    architecture that prices what shapes cannot (``policy``: see ``POLICIES``).

    A model the trace contradicts (its steps run another number of attention layers,
    ``model_fit.layer_check``) prices nothing: its costs are withheld, with the reason,
    unless ``model_force``."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    work = seg.work
    source = with_capture(trace, work, capture, seg.steps) if capture is not None else own_ops(trace, work)
    ops, op = source.ops, source.op
    by_kernel, op_name = taxonomy.categorize_units(work, ops, op)
    kinds = categorical.strings(work["kind"])
    category = _refine_by_module(by_kernel, trace, work)

    sides = mc.step_sides(seg.steps, seg.source in ENGINE_SOURCES) if len(seg.steps) else []
    # Whether the trace fits the model is known before any pricing: a model it contradicts
    # gives no context to the engine ops priced from shapes either.
    misfit = (model_fit.layer_check(model, work, kernel_names.components(work, category), seg.steps)
              if model is not None else None)
    withheld = model_fit.withheld_reason(model, misfit) if misfit and not model_force and policy != "shapes" else None
    context_model = None if withheld else model
    flops, nbytes, dtype, unit, reason, pricing = _costs(source, work, _contexts(sides, context_model, tp,
                                                                                  work["name"]))
    dtype = _refine_dtype(dtype, unit, work["name"])
    shaped = ~np.isnan(flops)
    # Picked from an object array: np.where on strings would build a new str per unit.
    cost_source = _objects([NONE, SHAPES, CAPTURE])[np.where(shaped, np.where(pricing >= len(trace.cpu_ops), 2, 1), 0)]
    if policy == "model":
        flops[:], nbytes[:], dtype[:], unit[:] = np.nan, np.nan, None, None
        cost_source[:] = NONE
        shaped[:] = False
    model_costs = None
    component = np.full(len(work), None, dtype=object)
    # What kind of figure each unit's bytes are when not the minimal traffic of stated work
    # (model_costs.ESTIMATES: upper or lower bound, the model's expectation); None otherwise.
    estimate = np.full(len(work), None, dtype=object)
    if model is not None and policy != "shapes":
        known = (np.where(shaped, flops, np.nan), np.where(shaped, nbytes, np.nan)) if shaped.any() else None
        model_costs = mc.price(model, tp, seg.steps, work, category, seg.source, known=known, sides=sides)
        component = model_costs.component
        use = ~shaped & ~np.isnan(model_costs.flops)
        if withheld:
            model_costs.withheld = withheld
            reason[use] = withheld
            use[:] = False
        flops[use], nbytes[use] = model_costs.flops[use], model_costs.bytes[use]
        dtype[use], unit[use] = model_costs.dtype[use], model_costs.unit[use]
        cost_source[use] = MODEL
        reason[use] = None
        estimate[use] = model_costs.estimate[use]
        still = ~shaped & ~use & (model_costs.reason != None)  # noqa: E711
        reason[still] = model_costs.reason[still]
    elif policy == "model":
        reason[:] = "--costs model needs --model (or a collected run's recorded config)"
    dur_s = work["dur_ns"].to_numpy() / 1e9
    text = categorical.text
    table = pd.DataFrame(
        {
            "category": text(category),
            "op_name": text(op_name),
            "pricing_op": pricing,
            "flops": flops,
            "bytes": nbytes,
            "dtype": text(dtype),
            "unit": text(unit),
            "cost_reason": text(reason),
            "cost_source": text(cost_source),
            "component": text(component),
            # How a model-priced unit's cost was found where that is worth saying (the layer a
            # GEMM's grid matched; a duration share), None elsewhere.
            "cost_note": text(model_costs.note if model_costs is not None and model_costs.note is not None
                              else np.full(len(work), None, dtype=object)),
            # What the above-roof check did to a model-priced unit: "capped" (routed experts'
            # bytes capped at the roof) or "undescribed" (cost left unknown); None otherwise.
            "model_check": text(np.full(len(work), None, dtype=object)),
            "estimate": text(estimate),
        },
        # The columns are fresh arrays: consolidating them into 2-D blocks would copy each
        # while the originals are still alive (a serving run's table is hundreds of MB).
        copy=False,
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        table["intensity"] = np.where(nbytes > 0, flops / nbytes, np.nan)
        table["achieved_flops"] = np.where(dur_s > 0, flops / dur_s, np.nan)
        table["achieved_bw"] = np.where(dur_s > 0, nbytes / dur_s, np.nan)
    spec = match.spec
    roofline_columns(table, spec, match.reason, kinds, category, dur_s, reason, dtype, unit)
    if model_costs is not None and spec is not None:
        _model_above_roof(table, work["step"].to_numpy(), dur_s, spec, match.reason, kinds, category)
    table["limiter"] = categorical.text(limiter(table["bound"].to_numpy(), table["roof_fraction"].to_numpy(),
                                                table["model_check"].to_numpy() == "capped"))
    return Attribution(table, spec, match.reason, source.ops, source.note, model_costs)


def _contexts(sides: list, model: ModelSpec | None, tp: int, names: pd.Series):
    """Per step, the context engine custom ops need to be priced from their shapes (``OpContext``)."""
    _, kv_bytes, _ = kernel_names.kv_cache_dtype(categorical.unique(names), "model")
    cache: dict[int, op_costs.OpContext] = {}

    def context(step: int) -> op_costs.OpContext:
        if step not in cache:
            pairs = keys = None
            note = ""
            if 0 <= step < len(sides) and sides[step]:
                pairs, keys, note = mc.attention_per_layer(model, sides[step])
            cache[step] = op_costs.OpContext(tp=tp, pairs=pairs, keys=keys, kv_bytes=kv_bytes, model=model,
                                          window_note=note)
        return cache[step]

    return context


def _costs(source: OpSource, work: pd.DataFrame, context=None):
    """FLOPs, bytes, dtype, unit, reason and pricing op (row of ``source.ops``) per unit of work.
    ``context(step)``: the ``OpContext`` of a step, for ops whose cost needs one."""
    n = len(work)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    dtype = np.full(n, None, dtype=object)
    unit = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    pricing = np.full(n, -1, dtype=np.int64)
    op = source.op
    graph = work["graph"].to_numpy()
    reason[(op < 0) & graph] = (
        "replayed from a CUDA/HIP graph: its ops and shapes are not in this trace (pass the graph-capture trace)"
    )
    reason[(op < 0) & ~graph] = "no launching op in the trace"
    if source.reason is not None:  # a capture at another batch size: why its shapes were not used
        said = (op < 0) & (source.reason != None)  # noqa: E711
        reason[said] = source.reason[said]
    ops = source.ops
    if not len(ops) or not (op >= 0).any():
        return flops, nbytes, dtype, unit, reason, pricing

    names = categorical.category_strings(ops["name"])
    codes = categorical.codes(ops["name"])
    modelled = np.array([op_costs.has_model(c) for c in names], dtype=bool)[codes]
    has_op = np.flatnonzero(op >= 0)
    pricing[has_op] = _outermost(modelled, source.parents)[op[has_op]]
    no_model = has_op[pricing[has_op] < 0]
    reason[no_model] = np.array(["no cost model for " + c for c in names], dtype=object)[codes[op[no_model]]]

    dur = work["dur_ns"].to_numpy().astype(np.float64)
    priced = np.flatnonzero(pricing >= 0)
    if not len(priced):
        return flops, nbytes, dtype, unit, reason, pricing
    # Group the priced rows by pricing op once (stable sort), price each op once, then share
    # its cost among its rows by duration; equal shares when every kernel of the op took 0 ns.
    order = priced[np.argsort(pricing[priced], kind="stable")]
    keys, starts, counts = np.unique(pricing[order], return_index=True, return_counts=True)
    dims = ops["input_dims"].to_numpy()
    types = ops["input_types"].to_numpy()
    concrete = ops["concrete_inputs"].to_numpy()
    step_of = work["step"].to_numpy() if "step" in work else np.full(len(work), -1)
    first_step = step_of[order[starts]]
    names_or_nan = np.append(names, np.nan)  # a missing name (code -1) reads NaN, as astype(str) gives it
    # One price per pricing op, but a run repeats its shapes every step: op_cost_json is
    # cached on the shape text, so the loop is lookups, and the fields are then read once
    # per distinct cost object rather than once per op.
    contextual = np.zeros(len(keys), dtype=bool)
    if context is not None:
        needs = np.array([op_costs.needs_context(c) for c in names_or_nan.tolist()], dtype=bool)
        contextual = needs[codes[keys]]
    group_names = names_or_nan[codes[keys]].tolist()
    d_l, t_l, c_l = dims[keys].tolist(), types[keys].tolist(), concrete[keys].tolist()
    priced_costs = list(map(op_costs.op_cost_json, group_names, d_l, t_l, c_l))
    in_context: dict[tuple, object] = {}  # the same shapes in the same step context: one price
    in_step = np.flatnonzero(contextual)
    step_values, step_of_group = np.unique(first_step[in_step], return_inverse=True)
    step_contexts = [context(step) for step in step_values.tolist()]  # once per step, not per op
    for g, k in zip(in_step.tolist(), step_of_group.tolist()):
        ctx = step_contexts[k]
        key = (group_names[g], d_l[g], t_l[g], c_l[g], id(ctx))
        if key not in in_context:
            in_context[key] = op_costs.price_in_context(group_names[g], d_l[g], t_l[g], c_l[g], ctx)
        priced_costs[g] = in_context[key]
    ids = np.fromiter(map(id, priced_costs), dtype=np.int64, count=len(keys))
    _, first, distinct = np.unique(ids, return_index=True, return_inverse=True)
    objs = [priced_costs[i] for i in first.tolist()]
    is_cost = [isinstance(c, op_costs.OpCost) for c in objs]
    u_flops = np.array([c.flops if ok else np.nan for c, ok in zip(objs, is_cost)], dtype=np.float64)
    u_bytes = np.array([c.bytes if ok else np.nan for c, ok in zip(objs, is_cost)], dtype=np.float64)
    u_dtype = _objects([c.dtype if ok else None for c, ok in zip(objs, is_cost)])
    u_unit = _objects([c.unit if ok else None for c, ok in zip(objs, is_cost)])
    u_reason = _objects([None if ok else c.reason for c, ok in zip(objs, is_cost)])
    g_ok = np.array(is_cost, dtype=bool)[distinct]
    g_flops, g_bytes = u_flops[distinct], u_bytes[distinct]
    g_dtype, g_unit, g_reason = u_dtype[distinct], u_unit[distinct], u_reason[distinct]
    group = np.repeat(np.arange(len(keys)), counts)  # each sorted row's group
    d = dur[order]
    # Durations are whole nanoseconds: their float sum is exact in any order.
    total = np.add.reduceat(d, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total[group] > 0, d / total[group], 1.0 / counts[group])
    ok = g_ok[group]
    rows, gs = order[ok], group[ok]
    flops[rows] = g_flops[gs] * share[ok]
    nbytes[rows] = g_bytes[gs] * share[ok]
    dtype[rows] = g_dtype[gs]
    unit[rows] = g_unit[gs]
    bad = ~ok
    reason[order[bad]] = g_reason[group[bad]]
    return flops, nbytes, dtype, unit, reason, pricing


def _objects(values: list) -> np.ndarray:
    """``values`` as a 1-d object array (np.array would nest tuples or infer a string dtype)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _outermost(modelled: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Per op, the outermost op among itself and its ancestors that has a cost model (-1:
    none): pointer doubling over the parent links, log(depth) vector passes, not a walk per op."""
    best = np.where(modelled, np.arange(len(modelled)), -1)
    jump = np.asarray(parents, dtype=np.int64).copy()
    # best[r]: the outermost modelled op from r up to, not including, jump[r].
    for _ in range(64):
        up = np.flatnonzero(jump >= 0)
        if not len(up):
            break
        above = best[jump[up]]
        best[up] = np.where(above >= 0, above, best[up])
        jump[up] = jump[jump[up]]
    return best


def _refine_by_module(category: np.ndarray, trace: Trace, work: pd.DataFrame) -> np.ndarray:
    """Generic kernels launched inside a module that names its job take that job's category."""
    py = trace.python
    if not len(py) or "issue_ns" not in work:
        return category
    mods = py[categorical.mask(py["name"], lambda n: n.startswith("nn.Module: "))]
    candidates = np.flatnonzero(np.isin(category, list(taxonomy.REFINABLE)) & (work["issue_ns"].to_numpy() >= 0))
    if not len(mods) or not len(candidates):
        return category
    issue = work["issue_ns"].to_numpy()[candidates]
    inner = enclosing(
        mods["start_ns"].to_numpy(), mods["end_ns"].to_numpy(), mods["tid"].to_numpy(),
        issue, issue, work["issue_tid"].to_numpy()[candidates],
    )
    out = category.copy()
    # The job each module class names, worked out once per distinct module name.
    names = categorical.Lookup(mods["name"])
    jobs: dict[str, str | None] = {}
    for row, m in zip(candidates.tolist(), inner.tolist()):
        if m >= 0:
            name = names[m]
            if name not in jobs:
                jobs[name] = taxonomy.module_category(name)
            if jobs[name] is not None:
                out[row] = jobs[name]
    return out


# cuBLAS/CUTLASS kernels that run FP32 GEMMs on TF32 tensor cores say so in their
# names (allow_tf32 / torch.backends.cuda.matmul.allow_tf32): price them at the TF32
# rate, not the FP32 vector rate, or they would appear to beat the roofline.
_TF32_KERNEL = re.compile(r"tf32|s1688|s16816|tensorop_s|xmma_gemm_tf32", re.IGNORECASE)
# Integer and boolean vector ops run on the same ALUs at about the FP32 rate; they
# are memory-bound by a wide margin either way, so the FP32 vector peak serves.
_INTEGER_DTYPES = ("int64", "int32", "int16", "uint8", "bool")


def _refine_dtype(dtype: np.ndarray, unit: np.ndarray, names: pd.Series) -> np.ndarray:
    """The dtype whose peak a matrix kernel runs at: what its name states (an MXFP8 x MXFP4
    MoE GEMM under a bf16 op runs at the FP8 rate), else the op's. Names are read once per
    distinct kernel name (``names``: the work's name column)."""
    out = dtype.copy()
    units, dtypes = categorical.Values(unit), categorical.Values(dtype)
    is_matrix = units.eq(op_costs.MATRIX)
    matrix = np.flatnonzero(is_matrix)
    distinct, code = categorical.category_strings(names), categorical.codes(names)
    if len(matrix):
        said = _objects([kernel_names.name_dtype(n) for n in distinct] + [None])[code[matrix]]
        hit = said != None  # noqa: E711
        out[matrix[hit]] = said[hit]
    fp32_matrix = np.flatnonzero(dtypes.eq("fp32") & is_matrix)
    if len(fp32_matrix):
        tf32 = np.array([bool(_TF32_KERNEL.search(n)) for n in distinct] + [False], dtype=bool)[code[fp32_matrix]]
        out[fp32_matrix[tf32]] = "tf32"
    out[dtypes.isin(_INTEGER_DTYPES) & units.eq(op_costs.VECTOR)] = "fp32"
    return out


# The model's minimal work of a component can take longer at the roof than its kernels ran
# only when the model does not describe them: tolerate timing noise, nothing more.
ABOVE_ROOF = 1.02


def _model_above_roof(table: pd.DataFrame, step: np.ndarray, dur_s: np.ndarray, spec: GpuSpec, spec_reason,
                      kinds, category) -> None:
    """Model-priced work that would need more than the roofline allows in its kernels' time.

    Never shown as fact. Routed experts are priced at the experts uniform routing touches,
    an upper bound: above the roof, routing concentrated on fewer experts, so their bytes are
    capped at what peak bandwidth moves in the kernels' time (an upper bound still; the roof
    fraction is then not shown). Any other component above the roof is left unpriced, with the
    reason: the model (or --tp, or --weights) does not describe those kernels.
    """
    model = (table["cost_source"].to_numpy() == MODEL) & ~np.isnan(table["roof_fraction"].to_numpy())
    if not model.any():
        return
    comp = table["component"].to_numpy()
    rows_m = np.flatnonzero(model)
    need_m = table["roof_fraction"].to_numpy()[rows_m] * dur_s[rows_m]
    took_m = dur_s[rows_m]
    comp_m = comp[rows_m]
    flops, nbytes = table["flops"].to_numpy().copy(), table["bytes"].to_numpy().copy()
    reason = table["cost_reason"].to_numpy().copy()
    capped = np.zeros(len(table), dtype=bool)
    dropped = np.zeros(len(table), dtype=bool)
    pooled = set(POOLED) | {"lm_head"}
    is_pooled = np.array([c in pooled for c in comp_m], dtype=bool)
    cases: list[tuple[str, np.ndarray, float]] = []
    # Pooled components share one cost by duration, so they are judged as a whole per step
    # (np.bincount over step x component codes); a per-launch kernel is judged on its own.
    if is_pooled.any():
        codes, uniques = pd.factorize(pd.Series(comp_m[is_pooled], dtype=object))
        gid = step[rows_m[is_pooled]].astype(np.int64) * (len(uniques) + 1) + codes
        groups, inverse = np.unique(gid, return_inverse=True)
        need = np.bincount(inverse, weights=need_m[is_pooled], minlength=len(groups))
        took = np.bincount(inverse, weights=took_m[is_pooled], minlength=len(groups))
        for g in np.flatnonzero((took > 0) & (need > ABOVE_ROOF * took)):
            members = rows_m[is_pooled][inverse == g]
            cases.append((str(uniques[codes[inverse == g][0]]), members, float(need[g] / took[g])))
    single = ~is_pooled & (took_m > 0) & (need_m > ABOVE_ROOF * np.where(took_m > 0, took_m, 1))
    for i in np.flatnonzero(single):
        cases.append((str(comp_m[i]), rows_m[i:i + 1], float(need_m[i] / took_m[i])))
    est_now = table["estimate"].to_numpy(dtype=object)
    ridge = table["ridge"].to_numpy(dtype=float) if "ridge" in table else np.full(len(table), np.nan)
    for c, rows, ratio in cases:
        if c == "experts":
            nbytes[rows] /= ratio  # memory-bound at any expert count: bytes are the time's roof
            capped[rows] = True
            reason[rows] = (f"uniform routing would touch experts whose weights need {ratio:.0%} of the "
                            "bandwidth roof in these kernels' time: routing concentrated on fewer experts; bytes "
                            "capped at what peak bandwidth moves in that time, an upper bound")
        elif c == "attention" and all(e == mc.UPPER for e in est_now[rows].tolist()):
            # Decode attention of unknown keys (model_costs.UNKNOWN_KEYS_BASIS): FLOPs and bytes
            # both scale with the keys, so both come down to the roof's bytes in the kernels' time;
            # memory-bound only where that key-independent intensity is below the ridge (absorbed
            # MLA's need not be): else its cost and bound stay unknown.
            with np.errstate(divide="ignore", invalid="ignore"):
                below = flops[rows] / nbytes[rows] < ridge[rows]
            if not below.all():
                flops[rows], nbytes[rows] = np.nan, np.nan
                dropped[rows] = True
                reason[rows] = ("the keys each request attends to are not in the trace, and this attention's "
                                "intensity at any key count is not below the ridge: its bound is not known")
                continue
            flops[rows] /= ratio
            nbytes[rows] /= ratio
            capped[rows] = True
            reason[rows] = ("the keys each request attends to are not in the trace: decode attention is memory-bound "
                            "at any key count; bytes capped at what peak bandwidth moves in these kernels' time, "
                            "an upper bound")
        else:
            flops[rows], nbytes[rows] = np.nan, np.nan
            dropped[rows] = True
            reason[rows] = (f"the model's {str(c).replace('_', ' ')} work would take {ratio:.0%} of these "
                            "kernels' time even at the roofline: the model (or --tp, --weights) does not describe "
                            "them, so their cost is left unknown")
    if not (capped.any() or dropped.any()):
        return
    table["flops"], table["bytes"] = flops, nbytes
    table["cost_reason"] = categorical.text(reason, index=table.index)
    changed = capped | dropped
    with np.errstate(divide="ignore", invalid="ignore"):
        table.loc[changed, "intensity"] = np.where(nbytes[changed] > 0, flops[changed] / nbytes[changed], np.nan)
        table.loc[changed, "achieved_bw"] = np.where(dur_s[changed] > 0, nbytes[changed] / dur_s[changed], np.nan)
        table.loc[changed, "achieved_flops"] = np.where(dur_s[changed] > 0, flops[changed] / dur_s[changed], np.nan)
    for col in ("roof_fraction", "roof_fraction_achievable"):
        table.loc[changed, col] = np.nan
    # Capped experts stay memory-bound (their intensity is far below any ridge at any expert
    # count); work the model does not describe has unknown cost and bound.
    table.loc[capped, "bound"] = MEMORY
    table.loc[dropped, "cost_source"] = NONE
    table.loc[dropped, "bound"] = UNKNOWN
    table.loc[changed, "bound_reason"] = reason[changed]
    check = table["model_check"].to_numpy().copy()
    check[capped], check[dropped] = "capped", "undescribed"
    table["model_check"] = categorical.text(check, index=table.index)
    # The capped bytes are what the roof lets move in the kernels' time: the most they can have
    # been, not an estimate of what they were.
    est = table["estimate"].to_numpy(dtype=object).copy()
    est[capped], est[dropped] = mc.UPPER, None
    table["estimate"] = categorical.text(est, index=table.index)


def combined_estimate(estimates, nbytes) -> str | None:
    """What a sum of units' bytes is (``model_costs.ESTIMATES``), from each unit's: exact
    figures (None) added to bounds of one direction keep that bound; bounds of both directions,
    or any expectation, make the sum an estimate of the model; no estimate at all, None."""
    est = np.asarray(estimates, dtype=object)
    b = np.asarray(nbytes, dtype=float)
    with np.errstate(invalid="ignore"):
        counted = ~np.isnan(b) & (b > 0)
    kinds = {str(e) for e in est[counted].tolist() if isinstance(e, str)}
    if not kinds:
        return None
    if len(kinds) == 1:
        return kinds.pop()
    return mc.ESTIMATED


def limiter(bound: np.ndarray, roof_fraction: np.ndarray, at_roof: np.ndarray | None = None) -> np.ndarray:
    """Per unit (or aggregate): the bound when the roof fraction reaches LATENCY_ROOF, latency
    below it, unknown without one. ``at_roof``: units known to sit at their roof (routed
    experts capped there) keep their bound though their fraction is hidden."""
    rf = np.asarray(roof_fraction, dtype=float)
    bound = np.asarray(bound, dtype=object)
    # Masked assignments of the one str each: np.where would build a new str per unit.
    out = bound.copy()
    out[rf < LATENCY_ROOF] = LATENCY
    out[np.isnan(rf) | (bound == UNKNOWN)] = UNKNOWN
    if at_roof is not None:
        out[np.asarray(at_roof, dtype=bool)] = bound[np.asarray(at_roof, dtype=bool)]
    return out


def roofline_columns(table: pd.DataFrame, spec: GpuSpec | None, spec_reason: str | None, kinds, category, dur_s,
            cost_reason: np.ndarray, dtype: np.ndarray, unit: np.ndarray) -> None:
    """The roofline columns of ``table``; ``cost_reason``, ``dtype`` and ``unit`` are its
    columns of those names as the arrays they were made from (read back from the table they
    would come out converted to pandas' string dtype and back)."""
    n = len(table)
    peak_f = np.full(n, np.nan)
    peak_bw = np.full(n, np.nan)
    ach_f = np.full(n, np.nan)
    ach_bw = np.full(n, np.nan)
    bound = np.empty(n, dtype=object)
    bound.fill(UNKNOWN)  # the one str in every row (np.full would make a new one per row)
    why = cost_reason.copy()
    peak_note = np.full(n, None, dtype=object)
    known = ~np.isnan(table["flops"].to_numpy())
    if spec is None:
        why[known] = "device peaks unknown: " + (spec_reason or "no spec for this device")
    else:
        bw = spec.peak_bandwidth
        abw = spec.achievable_bandwidth
        peak_bw[:] = bw if bw else np.nan
        ach_bw[:] = abw if abw else np.nan
        dtypes, units = categorical.Values(dtype), categorical.Values(unit)
        pair = np.where(known, (dtypes.codes + 1).astype(np.int64) * (units.n_values + 1) + units.codes + 1, -1)
        for p in pd.unique(pair[known]).tolist():
            sel = pair == p
            i = int(np.argmax(sel))
            d, u = dtype[i], unit[i]
            # A dtype without its own peak (FP4 on MI300X) runs at the next wider one the
            # device has: its FLOPs and bytes are known, so its bound is too; the note says so.
            used = spec.runs_as(d, u)
            if used is None:
                why[sel] = spec.no_peak_reason(d, u) or f"no {u} peak for {d} on {spec.name}"
                continue
            peak_f[sel] = spec.peak_flops(used, u)
            ach_f[sel] = spec.achievable_flops(used, u) or np.nan
            note = spec.runs_as_note(d, u)
            if note:
                peak_note[sel] = note
    flops = table["flops"].to_numpy()
    nbytes = table["bytes"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        t_compute = flops / peak_f
        t_memory = nbytes / peak_bw
        roof = np.fmax(t_compute, t_memory)
        ok = ~np.isnan(t_compute) & ~np.isnan(t_memory)
        bound[ok] = np.where(t_compute[ok] >= t_memory[ok], COMPUTE, MEMORY)
        table["roof_fraction"] = np.where(ok & (dur_s > 0), roof / dur_s, np.nan)
        roof_ach = np.fmax(flops / ach_f, nbytes / ach_bw)
        table["roof_fraction_achievable"] = np.where(ok & (dur_s > 0), roof_ach / dur_s, np.nan)
        table["ridge"] = peak_f / peak_bw
    # Copies and fills are bandwidth work (they do no FLOPs), priced or not.
    copies = np.isin(kinds, _COPY_KINDS)
    bound[copies] = MEMORY
    copies &= ~ok
    why[copies] = None
    comm = (category == taxonomy.COMMUNICATION) & ~copies
    link = spec.interconnect_bandwidth if spec is not None else None
    priced = comm & ~np.isnan(nbytes) & (nbytes > 0)
    if link:
        bound[priced] = INTERCONNECT
        with np.errstate(divide="ignore", invalid="ignore"):
            table.loc[priced, "roof_fraction"] = np.where(dur_s[priced] > 0, nbytes[priced] / link / dur_s[priced], np.nan)
        peak_bw[comm] = link
        unpriced = comm & ~priced
        bound[unpriced] = UNKNOWN
        why[unpriced] = cost_reason[unpriced]
    else:
        bound[comm] = UNKNOWN
        why[comm] = ("communication: bound by the interconnect, and "
                     + (f"{spec.name}'s spec row gives no interconnect bandwidth" if spec is not None
                        else "the device has no spec row"))
    why[bound != UNKNOWN] = None
    table["peak_flops"] = peak_f
    table["peak_bw"] = peak_bw
    table["achievable_flops"] = ach_f
    table["achievable_bw"] = ach_bw
    table["bound"] = categorical.text(bound, index=table.index)
    table["bound_reason"] = categorical.text(why, index=table.index)
    # Which peak priced a unit when its dtype has none on this device ("priced at fp8 peak: ...").
    peak_note[np.isnan(peak_f) | (bound == INTERCONNECT)] = None
    table["peak_note"] = categorical.text(peak_note, index=table.index)
