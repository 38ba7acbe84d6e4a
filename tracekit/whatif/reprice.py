"""Each kernel of a measured run re-priced on another GPU: ``reprice(work, src, tgt) -> Repriced``,
its projected duration at the central, low and high category factors.

A kernel keeps the fraction of its category's roof it reached on the source (``tracekit.specs.factors``,
the fractions of each datasheet roof per vendor class); copies move with bandwidth, collectives with
the interconnect, and a kernel of unknown cost stays as measured, its range the fastest and slowest
plausible ratio (``unknown_band``). ``tracekit.whatif.project`` builds the projected run from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.pricing.roofline import INTERCONNECT, LATENCY
from tracekit.specs import GpuSpec, factors, normalise_dtype

_COPIES = ("memcpy", "memset")


@dataclass
class Repriced:
    """Per unit of work: projected duration (ns) at the central, low (fastest) and high
    (slowest) factors; whether it moved with a roof; whether it is latency-limited (moved, but
    shown kept as an alternative); whether its cost is unknown (kept, widening the range)."""

    central: np.ndarray
    low: np.ndarray
    high: np.ndarray
    moved: np.ndarray
    latency: np.ndarray
    unknown: np.ndarray
    notes: list[str]


def _spread(src: GpuSpec, tgt: GpuSpec, f_s: tuple, f_t: tuple) -> tuple[float, float]:
    """Log-widths (fast, slow) of the ratio f_s / f_t from both sides' low/high figures,
    taken as independent errors (root sum of squares). Zero on the same device: a kernel
    keeps exactly its fraction of the roof there."""
    if src.key == tgt.key:
        return 0.0, 0.0
    fast = np.hypot(np.log(f_t[2] / f_t[1]), np.log(f_s[1] / f_s[0]))
    slow = np.hypot(np.log(f_t[1] / f_t[0]), np.log(f_s[2] / f_s[1]))
    return float(fast), float(slow)


def reprice(work: pd.DataFrame, src: GpuSpec, tgt: GpuSpec) -> Repriced:
    """Each unit's time on ``tgt``: it keeps the fraction of its category's roof it reached on
    ``src``. With R = max(FLOPs / (peak FLOP/s x f_compute), bytes / (bandwidth x f_memory)),
    f the category's fraction of the datasheet roof on each GPU's vendor class
    (``tracekit.specs.factors``), a unit takes t_src x R_tgt / R_src; its low and high take the
    factors' spread; a unit of unknown cost keeps t_src, its low and high the plausible ratios."""
    dur = work["dur_ns"].to_numpy(dtype=float)
    flops, nbytes = work["flops"].to_numpy(dtype=float), work["bytes"].to_numpy(dtype=float)
    dtype = work["dtype"].astype(object).to_numpy()
    unit = work["unit"].astype(object).to_numpy()
    bound = work["bound"].astype(object).to_numpy()
    lim = work["limiter"].astype(object).to_numpy()
    kind = work["kind"].astype(str).to_numpy()
    fcat = np.array([factors.factor_category(c) for c in work["category"].astype(str).to_numpy()], dtype=object)
    ratio, lo, hi = (np.full(len(work), np.nan) for _ in range(3))
    notes = []
    priced = ~np.isnan(flops) & ~np.isnan(nbytes) & (dur > 0) & (bound != INTERCONNECT)
    groups = pd.DataFrame({"d": dtype[priced], "u": unit[priced], "c": fcat[priced]}).drop_duplicates()
    bw_s, bw_t = src.peak_bandwidth, tgt.peak_bandwidth
    short_dtypes: dict[tuple, float] = {}
    for d, u, c in groups.itertuples(index=False):
        sel = priced & (dtype == d) & (unit == u) & (fcat == c)
        # Both sides price a dtype without a peak at the next wider one (GpuSpec.runs_as), as
        # the measured roofline did.
        d_s, d_t = src.runs_as(d, u), tgt.runs_as(d, u)
        p_s = src.peak_flops(d_s, u) if d_s else None
        p_t = tgt.peak_flops(d_t, u) if d_t else None
        if not (p_s and p_t and bw_s and bw_t):
            continue
        if d_t != normalise_dtype(d):
            short_dtypes[(d, u, d_t)] = short_dtypes.get((d, u, d_t), 0.0) + dur[sel].sum() / 1e6
        fc_s, fm_s = factors.fractions(src, c, "compute"), factors.fractions(src, c, "memory")
        fc_t, fm_t = factors.fractions(tgt, c, "compute"), factors.fractions(tgt, c, "memory")
        comp_s, mem_s = flops[sel] / (p_s * fc_s[1]), nbytes[sel] / (bw_s * fm_s[1])
        comp_t, mem_t = flops[sel] / (p_t * fc_t[1]), nbytes[sel] / (bw_t * fm_t[1])
        r_s, r_t = np.maximum(comp_s, mem_s), np.maximum(comp_t, mem_t)
        r = np.where(r_s > 0, r_t / np.where(r_s > 0, r_s, 1), np.nan)
        # The spread of the side each GPU's category roof binds on.
        widths = {(cs, ct): _spread(src, tgt, fc_s if cs else fm_s, fc_t if ct else fm_t)
                  for cs in (True, False) for ct in (True, False)}
        on_c_s, on_c_t = comp_s >= mem_s, comp_t >= mem_t
        fast = np.choose(on_c_s * 2 + on_c_t, [widths[(False, False)][0], widths[(False, True)][0],
                                                 widths[(True, False)][0], widths[(True, True)][0]])
        slow = np.choose(on_c_s * 2 + on_c_t, [widths[(False, False)][1], widths[(False, True)][1],
                                                 widths[(True, False)][1], widths[(True, True)][1]])
        ratio[sel], lo[sel], hi[sel] = r, r * np.exp(-fast), r * np.exp(slow)
    for (d, u, d_t), ms in short_dtypes.items():
        notes.append(f"{tgt.name} has no {d} {u} peak: {ms:.3g} ms of {d} kernels are projected at its {d_t} rate "
                     "(their bytes unchanged)")
    # Copies whose bytes are known move with bandwidth at their category's memory fraction.
    copies = np.isin(kind, _COPIES) & np.isnan(ratio) & ~np.isnan(nbytes) & (nbytes > 0)
    if copies.any() and bw_s and bw_t:
        for c in pd.unique(fcat[copies]):
            sel = copies & (fcat == c)
            _set_ratio(ratio, lo, hi, sel, src, tgt, bw_s, bw_t, factors.fractions(src, c, "memory"),
                       factors.fractions(tgt, c, "memory"))
    # Collectives move with the interconnect at the communication fraction of its peak.
    link = (bound == INTERCONNECT) & ~np.isnan(nbytes)
    if link.any():
        if src.interconnect_bandwidth and tgt.interconnect_bandwidth:
            _set_ratio(ratio, lo, hi, link, src, tgt, src.interconnect_bandwidth, tgt.interconnect_bandwidth,
                       factors.fractions(src, "communication", "memory"),
                       factors.fractions(tgt, "communication", "memory"))
        else:
            notes.append(f"collectives ({dur[link].sum() / 1e6:.3g} ms) stay as measured, widening the range: "
                         f"{'the target' if not tgt.interconnect_bandwidth else 'the source'}'s spec row has no "
                         "interconnect bandwidth")
    moved = ~np.isnan(ratio)
    central = np.where(moved, dur * np.where(moved, ratio, 1.0), dur)
    # Unknown cost: kept as measured, its low and high the fastest and slowest plausible ratios.
    band_lo, band_hi = unknown_band(src, tgt)
    unknown = ~moved & (dur > 0)
    low = np.where(moved, dur * np.where(moved, lo, 1.0), dur * band_lo)
    high = np.where(moved, dur * np.where(moved, hi, 1.0), dur * band_hi)
    return Repriced(central, low, high, moved, moved & (lim == LATENCY), unknown, notes)


def _set_ratio(ratio, lo, hi, sel, src, tgt, roof_s, roof_t, f_s, f_t) -> None:
    r = (roof_s * f_s[1]) / (roof_t * f_t[1])
    fast, slow = _spread(src, tgt, f_s, f_t)
    ratio[sel], lo[sel], hi[sel] = r, r * np.exp(-fast), r * np.exp(slow)


def unknown_band(src: GpuSpec, tgt: GpuSpec) -> tuple[float, float]:
    """(fastest, slowest) plausible ratio target/source time for a kernel of unknown cost:
    the widest of the "other" category's memory ratio and its BF16 matrix ratio, each with its
    spread, and 1 (it may not move at all). Both 1 on the same device."""
    if src.key == tgt.key:
        return 1.0, 1.0
    lows, highs = [1.0], [1.0]
    roofs = [(src.peak_bandwidth, tgt.peak_bandwidth, "memory"),
             (src.peak_flops("bf16"), tgt.peak_flops("bf16"), "compute")]
    for roof_s, roof_t, side in roofs:
        if not (roof_s and roof_t):
            continue
        f_s, f_t = factors.fractions(src, "other", side), factors.fractions(tgt, "other", side)
        r = (roof_s * f_s[1]) / (roof_t * f_t[1])
        fast, slow = _spread(src, tgt, f_s, f_t)
        lows.append(r * np.exp(-fast))
        highs.append(r * np.exp(slow))
    return float(min(lows)), float(max(highs))
