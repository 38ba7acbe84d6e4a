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
from numpy.typing import ArrayLike

from tracekit.analysis import categorical
from tracekit.analysis.pricing import model_costs as mc
from tracekit.analysis.pricing import taxonomy
from tracekit.formatting import si
from tracekit.specs import GpuSpec
from tracekit.specs.links import group_link
from tracekit.specs.measured import MEASURED

COMPUTE, MEMORY, INTERCONNECT, UNKNOWN = "compute", "memory", "interconnect", "unknown"
# A collective with known bytes is bound by the link between GPUs, priced against the spec
# row's interconnect bandwidth per direction.
BOUNDS = (COMPUTE, MEMORY, INTERCONNECT, UNKNOWN)

# What limits a kernel (``limiter``): the roof on its side of the ridge (compute, memory,
# interconnect) when it reaches at least LATENCY_ROOF of that roof; below that neither roof
# limits it. ``latency`` then where latency can explain the shortfall (``latency_fits``): too
# small a grid to fill the GPU, or a run so short that a kernel's fixed latency (dispatch,
# dependent memory round trips, the last wave's tail) is most of it; else ``below_roof``: a
# kernel with a grid that fills the GPU, running far longer than any fixed latency, simply
# reaches that fraction of its roof. ``unknown`` when the roof fraction is.
LATENCY = "latency"
BELOW_ROOF = "below_roof"
LATENCY_ROOF = 0.3
LIMITERS = (COMPUTE, MEMORY, INTERCONNECT, LATENCY, BELOW_ROOF, UNKNOWN)
# A kernel's fixed latency, the time no amount of work shortens: a few µs. Starting a kernel
# costs of the order of a µs even replayed from a CUDA graph, which cuts launch overhead but does
# not remove it (NVIDIA Technical Blog, "Getting Started with CUDA Graphs", 2019), and a DRAM
# round trip costs several hundred cycles, a few hundred ns (Jia et al., "Dissecting the NVIDIA
# Volta GPU Architecture via Microbenchmarking", 2018), of which a load-reduce-store kernel
# chains a few, plus its last wave's tail. 5 µs is a generous bound on their sum, not a fit to
# a trace: a kernel whose time beyond its roof's exceeds it has more than latency against it.
KERNEL_LATENCY_NS = 5_000

# Copy-engine transfers have no FLOPs: they are bandwidth work by nature.
_COPY_KINDS = ("memcpy", "memset")


# A fraction of a roof above 1 by more than timing noise is not a fact (``above_roof``).
ROOF_TOLERANCE = 0.02


def above_roof(fraction):
    """The one rule for every figure measured against a roof (an MFU, an MBU, a roof fraction,
    an achieved rate over its peak): above 1 by more than timing noise it is physically
    impossible, so it is withheld where it is computed, never shown as fact. ``fraction``: a
    number, None or NaN (not above: unknown), or an array of them."""
    with np.errstate(invalid="ignore"):
        return np.asarray(np.nan if fraction is None else fraction, dtype=float) > 1 + ROOF_TOLERANCE


def roof_withheld(
    compute=None, memory=None, roof=None, *, bytes_per_call=None, cache_mb=None, peak_basis=None
) -> str | None:
    """Why a figure against its roof is withheld, or None when it can be shown (``above_roof``).

    ``compute`` and ``memory``: the fractions of the compute and bandwidth roofs that the work
    counted needs in the time taken (achieved FLOP/s or bytes/s over the peak); ``roof``: a
    fraction that combines both (a time-weighted roof fraction). The reason names the causes the
    figures allow: data small enough to stay in the cache (``cache_mb``: the device's L2; the
    bandwidth roof is DRAM's) is served faster than the roof; FLOPs or bytes counted too high;
    a peak measured on this machine (``peak_basis``) that came out low."""
    over_c, over_m = bool(above_roof(compute)), bool(above_roof(memory))
    if not (over_c or over_m or above_roof(roof)):
        return None
    leads, causes = [], []
    counted = "FLOPs" if over_c and not over_m else "bytes" if over_m and not over_c else "FLOPs or bytes"
    counted = f"its {counted} are counted too high"
    if over_m:
        leads.append(f"the bytes counted would move at {memory:.2g}x the peak bandwidth in the time taken")
        size = si(bytes_per_call, "B") if bytes_per_call and bytes_per_call > 0 else None
        if size and cache_mb and bytes_per_call <= cache_mb * 1e6:
            causes.append(
                f"its {size} per call fit in the {cache_mb:g} MB L2 cache, which serves them faster "
                "than the DRAM bandwidth roof"
            )
        elif size and not cache_mb:
            causes.append(
                f"its {size} per call may stay in the caches, which serve them faster than the DRAM bandwidth roof"
            )
        elif size:
            counted += f" (its {size} per call are more than the {cache_mb:g} MB L2 cache holds)"
    if over_c:
        leads.append(f"the FLOPs counted would run at {compute:.2g}x the compute peak")
    if not leads:
        leads.append(f"the work counted would need {roof:.2g}x the time the roofline allows")
    causes.append(counted)
    if peak_basis == MEASURED:
        causes.append("the peak measured on this machine came out low (a busy machine measures low)")
    elif peak_basis:
        causes.append(f"the spec row's peak ({peak_basis}) is wrong for this device")
    return f"above its roof, so not shown as achieved: {' and '.join(leads)}; {', or '.join(causes)}"


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


def latency_fits(dur_ns, roof_fraction, ctas, sms: int | None) -> np.ndarray:
    """Per unit: whether latency can explain a fraction of its roof below LATENCY_ROOF. Its grid
    has fewer blocks than the device has SMs (a block runs on one SM: the others idle the whole
    kernel; CUDA C++ Programming Guide, "Hardware Implementation"), or the time it took beyond
    its roof's time is at most KERNEL_LATENCY_NS. A grid the trace does not state (``ctas`` < 0)
    or a device of unknown SM count gives no evidence of a small grid."""
    dur = np.asarray(dur_ns, dtype=float)
    rf = np.nan_to_num(np.asarray(roof_fraction, dtype=float))
    blocks = np.asarray(ctas, dtype=float)
    small_grid = (blocks >= 0) & (blocks < sms) if sms else np.zeros(len(dur), dtype=bool)
    return small_grid | (dur * (1.0 - rf) <= KERNEL_LATENCY_NS)


def limiter(
    bound: ArrayLike, roof_fraction: ArrayLike, at_roof: ArrayLike | None = None, fits: ArrayLike | None = None
) -> np.ndarray:
    """Per unit (or aggregate): the bound when the roof fraction reaches LATENCY_ROOF; below it
    latency where ``fits`` (``latency_fits``; every unit without it), else below_roof; unknown
    without a fraction. ``at_roof``: units known to sit at their roof (routed experts capped
    there) keep their bound though their fraction is hidden."""
    rf = np.asarray(roof_fraction, dtype=float)
    bound = np.asarray(bound, dtype=object)
    # Masked assignments of the one str each: np.where would build a new str per unit.
    out = bound.copy()
    below = rf < LATENCY_ROOF
    out[below] = LATENCY
    if fits is not None:
        out[below & ~np.asarray(fits, dtype=bool)] = BELOW_ROOF
    out[np.isnan(rf) | (bound == UNKNOWN)] = UNKNOWN
    if at_roof is not None:
        out[np.asarray(at_roof, dtype=bool)] = bound[np.asarray(at_roof, dtype=bool)]
    return out


def roofline_columns(
    table: pd.DataFrame,
    spec: GpuSpec | None,
    spec_reason: str | None,
    kinds,
    category,
    dur_s,
    cost_reason: np.ndarray,
    dtype: np.ndarray,
    unit: np.ndarray,
    ranks: int | None = None,
) -> None:
    """The roofline columns of ``table``; ``cost_reason``, ``dtype`` and ``unit`` are its
    columns of those names as the arrays they were made from (read back from the table they
    would come out converted to pandas' string dtype and back). ``ranks``: the tensor-parallel
    group the collectives ran in: their roof is the bandwidth one rank of that group has
    (``specs.links.group_link``: links to N - 1 peers on a mesh), not every link of the node."""
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
    group = group_link(spec, ranks) if spec is not None and ranks and ranks > 1 else None
    link = group.bandwidth if group is not None else (spec.interconnect_bandwidth if spec is not None else None)
    priced = comm & ~np.isnan(nbytes) & (nbytes > 0)
    if link:
        bound[priced] = INTERCONNECT
        with np.errstate(divide="ignore", invalid="ignore"):
            table.loc[priced, "roof_fraction"] = np.where(
                dur_s[priced] > 0, nbytes[priced] / link / dur_s[priced], np.nan
            )
        peak_bw[comm] = link
        unpriced = comm & ~priced
        bound[unpriced] = UNKNOWN
        why[unpriced] = cost_reason[unpriced]
    else:
        bound[comm] = UNKNOWN
        why[comm] = "communication: bound by the interconnect, and " + (
            f"{spec.name}'s spec row gives no interconnect bandwidth"
            if spec is not None
            else "the device has no spec row"
        )
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
