"""Roofline attribution: category, FLOPs, bytes and bound of every unit of work.

For each kernel (or leaf CPU op on a CPU trace):

* category from ``taxonomy`` (kernel name, else the launching op's name);
* cost from ``op_costs``: the *pricing op* is the outermost op, among the launching op
  and its ancestors, that has a cost model (``aten::linear`` rather than the
  ``aten::addmm`` it calls); its FLOPs and bytes go to the kernels it launched by their roles
  (``kernel_roles``: a memset, fill, copy, split-K reduce or KV-cache write beside the op's main
  kernel gets the bytes it touches and no FLOPs; a MoE op's gate-up, down, gating and combine
  kernels their own parts), the rest in proportion to their durations, said in their notes (a
  captured op's among the kernels of one replay of its graph: each replay does its whole work).
  An engine attention op priced in its step's context is matched to the model's layers in
  launch order, at its own layer's window. Work with no pricing op or no shapes is
  "cost unknown" with the reason: never zero;
* bound: ``roofline.roofline_columns``, at the peak of the dtype the kernel runs at
  (``dtypes.refine_dtype``); model-priced work above the roof is capped or left unpriced
  (``above_roof.model_above_roof``).

The roofline itself (bounds, limiter, the columns' vocabulary) is ``pricing.roofline``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.pricing import (
    kernel_names,
    kernel_roles,
    layer_roles,
    mixed_alone,
    model_fit,
    op_args,
    op_costs,
    taxonomy,
)
from tracekit.analysis.pricing import model_costs as mc
from tracekit.analysis.pricing.above_roof import AT_ROOF_CHECKS, model_above_roof
from tracekit.analysis.pricing.capture import OpSource, own_ops, with_capture
from tracekit.analysis.pricing.dtypes import refine_dtype
from tracekit.analysis.pricing.model_costs import ModelCosts
from tracekit.analysis.pricing.roofline import CAPTURE, MODEL, NONE, SHAPES, latency_fits, limiter, roofline_columns
from tracekit.analysis.steps.segment import Segmentation
from tracekit.analysis.steps.work import NO_TIME
from tracekit.frameworks import ENGINE_SOURCES
from tracekit.models.config import ModelSpec
from tracekit.specs import GpuSpec, SpecMatch
from tracekit.trace.links import enclosing
from tracekit.trace.model import Trace

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
    # Per side of each mixed step stating both: each unit's FLOPs and bytes were that side alone
    # in the step, as fractions of its cost (``ModelCosts.alone``'s form): GEMMs from their
    # recorded shapes (``alone_from_shapes``), the rest from the model where it priced them.
    alone: dict[str, tuple[np.ndarray, np.ndarray]] | None = None


def attribute(
    trace: Trace,
    seg: Segmentation,
    match: SpecMatch,
    capture: Trace | Sequence[Trace] | None = None,
    model: ModelSpec | None = None,
    tp: int = 1,
    policy: str = "auto",
    model_force: bool = False,
) -> Attribution:
    """Roofline columns for every unit of work. ``capture``: the graph-capture trace (or
    traces: one per graph size) whose ops describe this trace's graph-replayed kernels; ``model`` and ``tp``: the
    architecture that prices what shapes cannot (``policy``: see ``POLICIES``).

    A model the trace contradicts (its steps run another number of attention layers,
    ``model_fit.layer_check``) prices nothing: its costs are withheld, with the reason,
    unless ``model_force``."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    work = seg.work
    captures = [capture] if isinstance(capture, Trace) else list(capture or ())
    source = with_capture(trace, work, captures, seg.steps) if captures else own_ops(trace, work)
    ops, op = source.ops, source.op
    by_kernel, op_name = taxonomy.categorize_units(work, ops, op)
    kinds = categorical.strings(work["kind"])
    category = _refine_by_module(by_kernel, trace, work)

    sides = mc.step_sides(seg.steps, seg.source in ENGINE_SOURCES) if len(seg.steps) else []
    # Whether the trace fits the model is known before any pricing: a model it contradicts
    # gives no context to the engine ops priced from shapes either.
    misfit = (
        model_fit.layer_check(model, work, kernel_names.components(work, category), seg.steps)
        if model is not None
        else None
    )
    withheld = (
        model_fit.withheld_reason(model, misfit)
        if model is not None and misfit and not model_force and policy != "shapes"
        else None
    )
    context_model = None if withheld else model
    flops, nbytes, dtype, unit, reason, pricing, shape_note = _costs(
        source, work, _contexts(sides, context_model, tp, work["name"]), category, _recorded_bytes(trace, work)
    )
    dtype = refine_dtype(dtype, unit, work["name"])
    shaped = ~np.isnan(flops)
    # Picked from an object array: np.where on strings would build a new str per unit.
    cost_source = categorical.objects([NONE, SHAPES, CAPTURE])[
        np.where(shaped, np.where(pricing >= len(trace.cpu_ops), 2, 1), 0)
    ]
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
        model_costs.alone = mixed_alone.alone(
            model, tp, seg.steps, work, category, seg.source, known, sides, model_costs
        )
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
        if model_costs.estimate is not None:
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
            # How a unit's cost was found where that is worth saying (the layer a GEMM's grid
            # matched; an op's auxiliary kernel; a duration share), None elsewhere.
            "cost_note": text(_notes(model_costs, shape_note, cost_source)),
            # What the above-roof check did to a model-priced unit: "capped" (routed experts'
            # bytes capped at the roof), "cached" (served from the L2 cache faster than the DRAM
            # roof, cost kept), "undescribed" (cost left unknown) or "keys_unknown" (decode
            # attention of unstated keys whose bound no key count settles); None otherwise.
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
    roofline_columns(table, spec, match.reason, kinds, category, dur_s, reason, dtype, unit, ranks=tp)
    if model_costs is not None and spec is not None:
        model_above_roof(table, work["step"].to_numpy(), dur_s, spec, match.reason, kinds, category)
        _capped_per_kernel(table, dur_s)
    rf = table["roof_fraction"].to_numpy()
    fits = latency_fits(work["dur_ns"].to_numpy(), rf, work["ctas"].to_numpy(), spec.num_sms if spec else None)
    table["limiter"] = categorical.text(
        limiter(table["bound"].to_numpy(), rf, np.isin(table["model_check"].to_numpy(), AT_ROOF_CHECKS), fits)
    )
    alone = alone_from_shapes(source, work, pricing, seg.steps, sides) if shaped.any() else {}
    if model_costs is not None and model_costs.alone and not withheld:
        alone = {s: _filled(alone[s], model_costs.alone[s]) for s in model_costs.alone} if alone else model_costs.alone
    return Attribution(table, spec, match.reason, source.ops, source.note, model_costs, alone or None)


def _filled(
    shaped: tuple[np.ndarray, np.ndarray], model: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) alone: the shapes' where they give it, else the model's."""
    return np.where(np.isnan(shaped[0]), model[0], shaped[0]), np.where(np.isnan(shaped[1]), model[1], shaped[1])


# GEMM ops whose rows may be the step's tokens, and the argument holding those rows (the
# activations: ``aten::linear``'s input, ``aten::addmm``'s first matrix after the bias; the
# argument orders of ``matrix_ops``).
_TOKEN_ROWS = {"aten::linear": 0, "aten::mm": 0, "aten::addmm": 1, "aten::_scaled_mm": 0, "aten::matmul": 0}


def alone_from_shapes(
    source: OpSource, work: pd.DataFrame, pricing: np.ndarray, steps: pd.DataFrame, sides: list
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``Attribution.alone`` of the GEMM units priced from recorded shapes: in a mixed step
    stating both sides, a GEMM whose activations hold one row per token of the step (M = its
    tokens, no batch) is priced again with M at one side's tokens, by its own cost model
    (the weights, bias and scales read once either way); NaN elsewhere. {} without such units."""
    n = len(work)
    step_of = work["step"].to_numpy()
    both = {
        i: sd
        for i, sd in enumerate(sides)
        if frameworks.PREFILL in sd and frameworks.DECODE in sd and steps.at[i, "phase"] == frameworks.MIXED
    }
    rows = np.flatnonzero(np.isin(step_of, list(both)) & (pricing >= 0)) if both else np.zeros(0, dtype=np.int64)
    if not len(rows) or not len(source.ops):
        return {}
    ops = source.ops
    names = categorical.category_strings(ops["name"])
    name_of = categorical.with_none(names)[categorical.codes(ops["name"])]
    out = {s: (np.full(n, np.nan), np.full(n, np.nan)) for s in (frameworks.PREFILL, frameworks.DECODE)}
    found = False
    for op in np.unique(pricing[rows]).tolist():
        name = name_of[op]
        if name not in _TOKEN_ROWS:
            continue
        mine = rows[pricing[rows] == op]
        sd = both[int(step_of[mine[0]])]
        tokens = sum(s.tokens for s in sd.values())
        decoded = [
            json.loads(x) if isinstance(x, str) and x else None
            for x in (ops["input_dims"].iat[op], ops["input_types"].iat[op], ops["concrete_inputs"].iat[op])
        ]
        dims, types, concrete = decoded
        at = _TOKEN_ROWS[name]
        if not isinstance(dims, list) or at >= len(dims):
            continue
        arg = dims[at]
        if not (
            isinstance(arg, list)
            and len(arg) >= 2
            and all(isinstance(d, int) for d in arg)
            and arg[-2] == tokens
            and math.prod(arg[:-2]) == 1
        ):
            continue
        whole = op_costs.price(name, dims, types, concrete)
        if not isinstance(whole, op_args.OpCost) or whole.flops <= 0 or whole.bytes <= 0:
            continue
        for side, (f, b) in out.items():
            fewer = [list(d) if j == at else d for j, d in enumerate(dims)]
            fewer[at][-2] = int(sd[side].tokens)
            got = op_costs.price(name, fewer, types, concrete)
            if isinstance(got, op_args.OpCost):
                f[mine], b[mine] = got.flops / whole.flops, got.bytes / whole.bytes
                found = True
    return out if found else {}


def _contexts(sides: list, model: ModelSpec | None, tp: int, names: pd.Series):
    """Per step, the context engine custom ops need to be priced from their shapes (``OpContext``);
    ``context(step, layer)``: an attention op's, matched to the model's ``layer``-th attention
    layer, at that layer's window (``layer_roles.attention_of_layer``), else the layers' average."""
    _, kv_bytes, _ = kernel_names.kv_cache_dtype(categorical.unique(names), "model")
    cache: dict[tuple[int, int], op_args.OpContext] = {}

    def context(step: int, layer: int = -1) -> op_args.OpContext:
        if (step, layer) not in cache:
            pairs = keys = None
            note = ""
            if 0 <= step < len(sides) and sides[step]:
                pairs, keys, note = (
                    layer_roles.attention_of_layer(model, sides[step], layer)
                    if layer >= 0 and model is not None
                    else layer_roles.attention_per_layer(model, sides[step])
                )
            cache[step, layer] = op_args.OpContext(
                tp=tp, pairs=pairs, keys=keys, kv_bytes=kv_bytes, model=model, window_note=note
            )
        return cache[step, layer]

    return context


def _capped_per_kernel(table: pd.DataFrame, dur_s: np.ndarray) -> None:
    """Bytes capped at the roof (``above_roof``: a step's routed experts priced above it) are,
    kernel by kernel, what peak bandwidth moves in each one's time: the cap scales the step's
    total to the roof, and the kernels' own parts of it (``layer_roles``: a gate-up GEMM reads
    twice a down GEMM's weights) do not survive a cap that says the routing touched fewer
    experts than they assume. The step's total is unchanged: the roof times their time."""
    capped = np.flatnonzero(table["model_check"].to_numpy() == "capped")
    if not len(capped):
        return
    nbytes, peak = table["bytes"].to_numpy().copy(), table["peak_bw"].to_numpy()
    ok = capped[~np.isnan(nbytes[capped]) & (peak[capped] > 0)]
    nbytes[ok] = peak[ok] * dur_s[ok]
    table["bytes"] = nbytes
    flops = table["flops"].to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        table.loc[table.index[ok], "intensity"] = np.where(nbytes[ok] > 0, flops[ok] / nbytes[ok], np.nan)
        table.loc[table.index[ok], "achieved_bw"] = np.where(dur_s[ok] > 0, nbytes[ok] / dur_s[ok], np.nan)


def _recorded_bytes(trace: Trace, work: pd.DataFrame) -> np.ndarray | None:
    """Per unit: the bytes its memcpy/memset activity record states (-1: none); None where the
    work table is not the trace's GPU activities row for row."""
    k = trace.kernels
    if "bytes" not in k or len(k) != len(work) or not len(k):
        return None
    return k["bytes"].to_numpy()


def _notes(model_costs: ModelCosts | None, shape_note: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Each unit's cost note: the model's where the model priced it, the role split's where its
    op's shapes did."""
    out = np.full(len(source), None, dtype=object)
    shaped = np.isin(source, [SHAPES, CAPTURE])
    out[shaped] = shape_note[shaped]
    if model_costs is not None and model_costs.note is not None:
        out = np.where(source == MODEL, model_costs.note, out)
    return out


def _costs(
    source: OpSource,
    work: pd.DataFrame,
    context=None,
    category: np.ndarray | None = None,
    recorded: np.ndarray | None = None,
):
    """FLOPs, bytes, dtype, unit, reason, pricing op (row of ``source.ops``) and note per unit of
    work. ``context(step, layer)``: the ``OpContext`` of a step, for ops whose cost needs one;
    ``category``: each unit's taxonomy category, to tell an op's kernels' roles apart
    (``kernel_roles``; without it they share the op's cost by duration); ``recorded``: the
    bytes each memcpy/memset activity states (-1: none)."""
    n = len(work)
    note = np.full(n, None, dtype=object)
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
        return flops, nbytes, dtype, unit, reason, pricing, note

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
        return flops, nbytes, dtype, unit, reason, pricing, note
    # Group the priced rows by pricing op once (stable sort), price each op once, then share
    # its cost among its rows by duration; equal shares when every kernel of the op took 0 ns.
    # A captured op is shared only within one replay of its graph: every replay does the
    # op's whole work (a piecewise graph's layers, or one graph replayed step after step).
    replay = source.replay if source.replay is not None else np.full(n, -1, dtype=np.int64)
    order = priced[np.lexsort((replay[priced], pricing[priced]))]
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
    # The same shapes in the same step context: one price.
    in_context: dict[tuple, op_args.OpCost | op_args.NoCost] = {}
    in_step = np.flatnonzero(contextual)
    step_values, step_of_group = np.unique(first_step[in_step], return_inverse=True)
    step_contexts = [context(step) for step in step_values.tolist()]  # once per step, not per op
    layer_of = np.full(len(keys), -1, dtype=np.int64)
    if category is not None and len(in_step):
        attn = (np.asarray(category, dtype=object)[order] == taxonomy.ATTENTION).astype(np.int64)
        layer_of = kernel_roles.attention_op_layers(
            in_step,
            step_of_group,
            step_contexts,
            np.minimum.reduceat(work["start_ns"].to_numpy()[order], starts),
            np.add.reduceat(attn, starts) > 0,
            len(keys),
        )
    for g, k in zip(in_step.tolist(), step_of_group.tolist()):
        ctx = step_contexts[k] if layer_of[g] < 0 else context(int(step_values[k]), int(layer_of[g]))
        key = (group_names[g], d_l[g], t_l[g], c_l[g], id(ctx))
        if key not in in_context:
            in_context[key] = op_costs.price_in_context(group_names[g], d_l[g], t_l[g], c_l[g], ctx)
        priced_costs[g] = in_context[key]
    ids = np.fromiter(map(id, priced_costs), dtype=np.int64, count=len(keys))
    _, first, distinct = np.unique(ids, return_index=True, return_inverse=True)
    objs = [priced_costs[i] for i in first.tolist()]
    is_cost = [isinstance(c, op_args.OpCost) for c in objs]
    u_flops = np.array([c.flops if ok else np.nan for c, ok in zip(objs, is_cost)], dtype=np.float64)
    u_bytes = np.array([c.bytes if ok else np.nan for c, ok in zip(objs, is_cost)], dtype=np.float64)
    u_dtype = categorical.objects([c.dtype if ok else None for c, ok in zip(objs, is_cost)])
    u_unit = categorical.objects([c.unit if ok else None for c, ok in zip(objs, is_cost)])
    u_reason = categorical.objects([None if ok else c.reason for c, ok in zip(objs, is_cost)])
    g_ok = np.array(is_cost, dtype=bool)[distinct]
    g_flops, g_bytes = u_flops[distinct], u_bytes[distinct]
    g_dtype, g_unit, g_reason = u_dtype[distinct], u_unit[distinct], u_reason[distinct]
    group = np.repeat(np.arange(len(keys)), counts)  # each sorted row's group
    d = dur[order]
    # The rows that share one cost: one pricing op, and one replay where a capture priced it.
    r = replay[order]
    sharing = np.r_[0, np.flatnonzero((np.diff(pricing[order]) != 0) | (np.diff(r) != 0)) + 1]
    size = np.diff(np.r_[sharing, len(order)])
    part = np.repeat(np.arange(len(sharing)), size)
    # Durations are whole nanoseconds: their float sum is exact in any order.
    total = np.add.reduceat(d, sharing)[part]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, d / total, 1.0 / size[part])
    ok = g_ok[group]
    rows, gs = order[ok], group[ok]
    if category is None:
        flops[rows] = g_flops[gs] * share[ok]
        nbytes[rows] = g_bytes[gs] * share[ok]
    else:
        names_of = categorical.with_none(categorical.category_strings(work["name"]))[categorical.codes(work["name"])]
        kinds_of = categorical.with_none(categorical.category_strings(work["kind"]))[categorical.codes(work["kind"])]
        f, b, said = kernel_roles.shape_roles(
            order,
            sharing,
            group,
            d,
            g_flops,
            g_bytes,
            g_dtype,
            names_of,
            kinds_of,
            np.asarray(category, dtype=object),
            work["start_ns"].to_numpy(),
            recorded,
            op,
            pricing,
            names_or_nan[codes],
            (dims, types, concrete),
            source.parents,
            step_of,
            d_l,
            context,
        )
        flops[rows], nbytes[rows], note[rows] = f[ok], b[ok], said[ok]
    dtype[rows] = g_dtype[gs]
    unit[rows] = g_unit[gs]
    bad = ~ok
    reason[order[bad]] = g_reason[group[bad]]
    return flops, nbytes, dtype, unit, reason, pricing, note


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
    candidates = np.flatnonzero(np.isin(category, list(taxonomy.REFINABLE)) & (work["issue_ns"].to_numpy() != NO_TIME))
    if not len(mods) or not len(candidates):
        return category
    issue = work["issue_ns"].to_numpy()[candidates]
    inner = enclosing(
        mods["start_ns"].to_numpy(),
        mods["end_ns"].to_numpy(),
        mods["tid"].to_numpy(),
        issue,
        issue,
        work["issue_tid"].to_numpy()[candidates],
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
