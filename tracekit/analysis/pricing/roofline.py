"""The roofline: bound, roof fraction and limiter of priced units against a device's peaks.

Takes units' FLOPs, bytes, dtype and unit (``attribution`` prices them) and gives their
roofline columns (``roofline_columns``): with the device's peaks for the op's dtype and unit
(matrix or vector; a dtype the device has no peak for runs at the next wider one it has,
``GpuSpec.runs_as``, and the unit's ``peak_note`` says so),
compute-bound when FLOPs / peak FLOP/s >= bytes / peak bandwidth (arithmetic
intensity at or above the ridge point), else memory-bound. The fraction of the
roofline reached is max(FLOPs / peak, bytes / bandwidth) / duration, against the
datasheet peak and against the achievable ceiling (measured, or a vendor factor).
What limits a unit (``limiter``) and what a sum of units' bytes is (``combined_estimate``)
are read from those columns; the columns' vocabulary (bounds, limiters, cost sources) is here.

Who prices the units is ``pricing.attribution``; model-priced work above the roof is
``pricing.above_roof``; the dtype whose peak a kernel runs at is ``pricing.dtypes``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import categorical

from tracekit.analysis.pricing import taxonomy
from tracekit.analysis.pricing import model_costs as mc
from tracekit.specs import GpuSpec

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
