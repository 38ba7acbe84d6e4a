"""Roofline attribution: category, FLOPs, bytes and bound of every unit of work.

For each kernel (or leaf CPU op on a CPU trace):

* category from ``taxonomy`` (kernel name, else the launching op's name);
* cost from ``costs``: the *pricing op* is the outermost op, among the launching op
  and its ancestors, that has a cost model (``aten::linear`` rather than the
  ``aten::addmm`` it calls); its FLOPs and bytes are shared among every kernel it
  launched, in proportion to their durations. Work with no pricing op or no shapes is
  "cost unknown" with the reason: never zero;
* bound: with the device's peaks for the op's dtype and unit (matrix or vector),
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

from tracekit.analysis import costs, taxonomy
from tracekit.analysis.segment import Segmentation
from tracekit.specs import GpuSpec, SpecMatch
from tracekit.analysis.capture import OpSource, own_ops, with_capture
from tracekit.trace.links import enclosing
from tracekit.trace.model import Trace

COMPUTE, MEMORY, UNKNOWN = "compute", "memory", "unknown"
BOUNDS = (COMPUTE, MEMORY, UNKNOWN)

# Copy-engine transfers have no FLOPs: they are bandwidth work by nature.
_COPY_KINDS = ("memcpy", "memset")


@dataclass
class Attribution:
    """Per-unit roofline columns, aligned row for row with ``Segmentation.work``."""

    # category, op_name, flops, bytes, dtype, unit, cost_reason, intensity, peak_flops,
    # peak_bw, ridge, bound, bound_reason, achieved_flops, achieved_bw, roof_fraction,
    # roof_fraction_achievable
    table: pd.DataFrame
    spec: GpuSpec | None
    spec_reason: str | None
    # The op table ``pricing_op`` indexes: the trace's ops, plus the capture's when given.
    ops: pd.DataFrame | None = None
    # How a graph-capture trace was used, when one was given.
    capture_note: str | None = None


def attribute(trace: Trace, seg: Segmentation, match: SpecMatch, capture: Trace | None = None) -> Attribution:
    """Roofline columns for every unit of work. ``capture``: the graph-capture trace
    whose ops describe this trace's graph-replayed kernels."""
    work = seg.work
    source = with_capture(trace, work, capture) if capture is not None else own_ops(trace, work)
    ops, op = source.ops, source.op
    op_names = ops["name"].astype(str).to_numpy() if len(ops) else np.array([], dtype=object)
    op_name = np.where(op >= 0, op_names[np.maximum(op, 0)] if len(ops) else None, None)
    names = work["name"].astype(str).to_numpy()
    kinds = work["kind"].astype(str).to_numpy()
    category = _refine_by_module(taxonomy.categorize_many(names, op_name, kinds), trace, work)

    flops, nbytes, dtype, unit, reason, pricing = _costs(source, work)
    dtype = _refine_dtype(dtype, unit, names)
    dur_s = work["dur_ns"].to_numpy() / 1e9
    table = pd.DataFrame(
        {
            "category": category,
            "op_name": op_name,
            "pricing_op": pricing,
            "flops": flops,
            "bytes": nbytes,
            "dtype": dtype,
            "unit": unit,
            "cost_reason": reason,
        }
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        table["intensity"] = np.where(nbytes > 0, flops / nbytes, np.nan)
        table["achieved_flops"] = np.where(dur_s > 0, flops / dur_s, np.nan)
        table["achieved_bw"] = np.where(dur_s > 0, nbytes / dur_s, np.nan)
    spec = match.spec
    _bounds(table, spec, match.reason, kinds, category, dur_s)
    return Attribution(table, spec, match.reason, source.ops, source.note)


def _costs(source: OpSource, work: pd.DataFrame):
    """FLOPs, bytes, dtype, unit, reason and pricing op (row of ``source.ops``) per unit of work."""
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
    ops = source.ops
    if not len(ops) or not (op >= 0).any():
        return flops, nbytes, dtype, unit, reason, pricing

    names = ops["name"].astype(str).to_numpy()
    parents = source.parents
    codes = ops["name"].cat.codes.to_numpy()
    modelled = np.array([costs.has_model(str(c)) for c in ops["name"].cat.categories], dtype=bool)[codes]
    memo: dict[int, int] = {}

    def pricing_op(row: int) -> int:
        if row in memo:
            return memo[row]
        best, r = -1, row
        while r >= 0:
            if modelled[r]:
                best = r
            r = parents[r]
        memo[row] = best
        return best

    has_op = np.flatnonzero(op >= 0)
    pricing[has_op] = [pricing_op(int(r)) for r in op[has_op]]
    no_model = has_op[pricing[has_op] < 0]
    reason[no_model] = ["no cost model for " + names[op[i]] for i in no_model]

    dur = work["dur_ns"].to_numpy().astype(np.float64)
    priced = np.flatnonzero(pricing >= 0)
    if not len(priced):
        return flops, nbytes, dtype, unit, reason, pricing
    # Group the priced rows by pricing op once (sort + split), then share each op's
    # cost by duration; equal shares when every kernel of the op took 0 ns.
    order = priced[np.argsort(pricing[priced], kind="stable")]
    keys, starts = np.unique(pricing[order], return_index=True)
    groups = np.split(order, starts[1:])
    dims = ops["input_dims"].to_numpy()
    types = ops["input_types"].to_numpy()
    concrete = ops["concrete_inputs"].to_numpy()
    for p, rows in zip(keys.tolist(), groups):
        cost = costs.op_cost_json(names[p], dims[p], types[p], concrete[p])
        if not isinstance(cost, costs.OpCost):
            reason[rows] = cost.reason
            continue
        d = dur[rows]
        share = d / d.sum() if d.sum() > 0 else np.full(len(rows), 1.0 / len(rows))
        flops[rows] = cost.flops * share
        nbytes[rows] = cost.bytes * share
        dtype[rows] = cost.dtype
        unit[rows] = cost.unit
    return flops, nbytes, dtype, unit, reason, pricing


def _refine_by_module(category: np.ndarray, trace: Trace, work: pd.DataFrame) -> np.ndarray:
    """Generic kernels launched inside a module that names its job take that job's category."""
    py = trace.python
    if not len(py) or "issue_ns" not in work:
        return category
    mods = py[py["name"].astype(str).str.startswith("nn.Module: ")]
    candidates = np.flatnonzero(np.isin(category, list(taxonomy.REFINABLE)) & (work["issue_ns"].to_numpy() >= 0))
    if not len(mods) or not len(candidates):
        return category
    issue = work["issue_ns"].to_numpy()[candidates]
    inner = enclosing(
        mods["start_ns"].to_numpy(), mods["end_ns"].to_numpy(), mods["tid"].to_numpy(),
        issue, issue, work["issue_tid"].to_numpy()[candidates],
    )
    out = category.copy()
    names = mods["name"].astype(str).to_numpy()
    for row, m in zip(candidates, inner):
        if m >= 0:
            job = taxonomy.module_category(names[m])
            if job is not None:
                out[row] = job
    return out


# cuBLAS/CUTLASS kernels that run FP32 GEMMs on TF32 tensor cores say so in their
# names (allow_tf32 / torch.backends.cuda.matmul.allow_tf32): price them at the TF32
# rate, not the FP32 vector rate, or they would appear to beat the roofline.
_TF32_KERNEL = re.compile(r"tf32|s1688|s16816|tensorop_s|xmma_gemm_tf32", re.IGNORECASE)
# Integer and boolean vector ops run on the same ALUs at about the FP32 rate; they
# are memory-bound by a wide margin either way, so the FP32 vector peak serves.
_INTEGER_DTYPES = ("int64", "int32", "int16", "uint8", "bool")


def _refine_dtype(dtype: np.ndarray, unit: np.ndarray, names: np.ndarray) -> np.ndarray:
    out = dtype.copy()
    fp32_matrix = np.flatnonzero((dtype == "fp32") & (unit == costs.MATRIX))
    if len(fp32_matrix):
        tf32 = np.array([bool(_TF32_KERNEL.search(n)) for n in names[fp32_matrix]], dtype=bool)
        out[fp32_matrix[tf32]] = "tf32"
    out[np.isin(dtype, _INTEGER_DTYPES) & (unit == costs.VECTOR)] = "fp32"
    return out


def _bounds(table: pd.DataFrame, spec: GpuSpec | None, spec_reason: str | None, kinds, category, dur_s) -> None:
    n = len(table)
    peak_f = np.full(n, np.nan)
    peak_bw = np.full(n, np.nan)
    ach_f = np.full(n, np.nan)
    ach_bw = np.full(n, np.nan)
    bound = np.full(n, UNKNOWN, dtype=object)
    why = table["cost_reason"].to_numpy().copy()
    known = ~np.isnan(table["flops"].to_numpy())
    if spec is None:
        why[known] = "device peaks unknown: " + (spec_reason or "no spec for this device")
    else:
        bw = spec.peak_bandwidth
        abw = spec.achievable_bandwidth
        peak_bw[:] = bw if bw else np.nan
        ach_bw[:] = abw if abw else np.nan
        pairs = table.loc[known, ["dtype", "unit"]].drop_duplicates()
        for d, u in pairs.itertuples(index=False):
            sel = known & (table["dtype"].to_numpy() == d) & (table["unit"].to_numpy() == u)
            pf = spec.peak_flops(d, u)
            if pf is None:
                why[sel] = spec.no_peak_reason(d, u) or f"no {u} peak for {d} on {spec.name}"
                continue
            peak_f[sel] = pf
            ach_f[sel] = spec.achievable_flops(d, u) or np.nan
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
    # Copies are bandwidth work even when no op tells their size.
    copies = np.isin(kinds, _COPY_KINDS) & ~ok
    bound[copies] = MEMORY
    why[copies] = None
    comm = (category == taxonomy.COMMUNICATION) & ~copies
    bound[comm] = UNKNOWN
    why[comm] = "communication: bound by the interconnect, not this device's roofline"
    why[bound != UNKNOWN] = None
    table["peak_flops"] = peak_f
    table["peak_bw"] = peak_bw
    table["achievable_flops"] = ach_f
    table["achievable_bw"] = ach_bw
    table["bound"] = bound
    table["bound_reason"] = why
