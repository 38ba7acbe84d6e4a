"""Each kernel of a measured run re-priced on another GPU: ``reprice(work, src, tgt) -> Repriced``,
its projected duration at the central, low and high category factors.

A kernel keeps the fraction of its category's roof it reached on the source (``tracekit.specs.factors``,
the fractions of each datasheet roof per vendor class); copies move with bandwidth, collectives with
the interconnect (``tracekit.whatif.collectives``: the latency-bandwidth bound of the group's
links, at the efficiency the collective reached on the source), and a kernel of unknown cost
stays as measured, its range the fastest and slowest plausible ratio (``unknown_band``).
``tracekit.whatif.project`` builds the projected run from them.

Where the two GPUs are of one vendor class, the source's own fraction of each category's roof is
the prior for the target (the class figures cancel), and the range is one class's spread, not
two combined. ``learnt`` (``project --factors``, ``whatif.learnt``) scales a category's
projected time by what checks between the same two vendor classes measured (measured over
projected kernel time: the target class's efficiency relative to the source's that the table
did not know), and replaces a collective's efficiency where it measured that collective on the
target's class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.pricing.roofline import INTERCONNECT, LATENCY
from tracekit.specs import GpuSpec, factors, normalise_dtype
from tracekit.specs.links import group_link, no_link_reason
from tracekit.whatif.collectives import CommProjection, project_collectives

COMMUNICATION = "communication"

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
    comm: CommProjection | None = None  # the collectives' bounds, efficiencies and parts
    categories: np.ndarray | None = None  # each unit's factor row (``factors.unit_category``)
    scale: np.ndarray | None = None  # the learnt factor each unit's time was multiplied by (None: none)


def _spread(src: GpuSpec, tgt: GpuSpec, f_s: tuple, f_t: tuple) -> tuple[float, float]:
    """Log-widths (fast, slow) of the ratio f_s / f_t from both sides' low/high figures,
    taken as independent errors (root sum of squares). Zero on the same device: a kernel
    keeps exactly its fraction of the roof there."""
    if src.key == tgt.key:
        return 0.0, 0.0
    if factors.vendor_class(src).key == factors.vendor_class(tgt).key:
        # One class: the target's fraction is the source's own, carried; one spread, not two.
        return float(max(np.log(f_t[2] / f_t[1]), np.log(f_s[1] / f_s[0]))), float(
            max(np.log(f_t[1] / f_t[0]), np.log(f_s[2] / f_s[1]))
        )
    fast = np.hypot(np.log(f_t[2] / f_t[1]), np.log(f_s[1] / f_s[0]))
    slow = np.hypot(np.log(f_t[1] / f_t[0]), np.log(f_s[2] / f_s[1]))
    return float(fast), float(slow)


def _fractions(src: GpuSpec, tgt: GpuSpec, c: str, side: str) -> tuple[tuple, tuple]:
    return factors.fractions(src, c, side), factors.fractions(tgt, c, side)


def reprice(work: pd.DataFrame, src: GpuSpec, tgt: GpuSpec, *, ranks: int = 1, learnt=None) -> Repriced:
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
    phase = work["phase"].astype(str).to_numpy() if "phase" in work else np.full(len(work), "", dtype=object)
    fcat = np.array(
        [factors.unit_category(c, p) for c, p in zip(work["category"].astype(str).to_numpy(), phase)], dtype=object
    )
    ratio, lo, hi = (np.full(len(work), np.nan) for _ in range(3))
    notes = []
    # Collectives price on the links (below), whatever bound the source's roofline gave them.
    priced = ~np.isnan(flops) & ~np.isnan(nbytes) & (dur > 0) & (bound != INTERCONNECT) & (fcat != COMMUNICATION)
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
        fc_s, fc_t = _fractions(src, tgt, c, "compute")
        fm_s, fm_t = _fractions(src, tgt, c, "memory")
        comp_s, mem_s = flops[sel] / (p_s * fc_s[1]), nbytes[sel] / (bw_s * fm_s[1])
        comp_t, mem_t = flops[sel] / (p_t * fc_t[1]), nbytes[sel] / (bw_t * fm_t[1])
        r_s, r_t = np.maximum(comp_s, mem_s), np.maximum(comp_t, mem_t)
        r = np.where(r_s > 0, r_t / np.where(r_s > 0, r_s, 1), np.nan)
        # The spread of the side each GPU's category roof binds on.
        widths = {
            (cs, ct): _spread(src, tgt, fc_s if cs else fm_s, fc_t if ct else fm_t)
            for cs in (True, False)
            for ct in (True, False)
        }
        on_c_s, on_c_t = comp_s >= mem_s, comp_t >= mem_t
        fast = np.choose(
            on_c_s * 2 + on_c_t,
            [widths[(False, False)][0], widths[(False, True)][0], widths[(True, False)][0], widths[(True, True)][0]],
        )
        slow = np.choose(
            on_c_s * 2 + on_c_t,
            [widths[(False, False)][1], widths[(False, True)][1], widths[(True, False)][1], widths[(True, True)][1]],
        )
        ratio[sel], lo[sel], hi[sel] = r, r * np.exp(-fast), r * np.exp(slow)
    for (d, u, d_t), ms in short_dtypes.items():
        notes.append(
            f"{tgt.name} has no {d} {u} peak: {ms:.3g} ms of {d} kernels are projected at its {d_t} rate "
            "(their bytes unchanged)"
        )
    # Copies whose bytes are known move with bandwidth at their category's memory fraction.
    copies = np.isin(kind, _COPIES) & np.isnan(ratio) & ~np.isnan(nbytes) & (nbytes > 0)
    if copies.any() and bw_s and bw_t:
        for c in pd.unique(fcat[copies]):
            sel = copies & (fcat == c)
            _set_ratio(ratio, lo, hi, sel, src, tgt, bw_s, bw_t, *_fractions(src, tgt, c, "memory"))
    comm = _collectives(work, fcat, dur, nbytes, src, tgt, ranks, learnt, ratio, lo, hi, notes)
    moved = ~np.isnan(ratio)
    central = np.where(moved, dur * np.where(moved, ratio, 1.0), dur)
    # Unknown cost: kept as measured, its low and high the fastest and slowest plausible ratios.
    band_lo, band_hi = unknown_band(src, tgt)
    unknown = ~moved & (dur > 0)
    low = np.where(moved, dur * np.where(moved, lo, 1.0), dur * band_lo)
    high = np.where(moved, dur * np.where(moved, hi, 1.0), dur * band_hi)
    k = None
    if learnt is not None:
        k = learnt.scale(factors.vendor_class(src).key, factors.vendor_class(tgt).key, fcat)
        # A check measures a category's work on two engines, whose kernels split it differently:
        # a correction beyond the table's published interval for that category says more about
        # that split than about efficiency, so it is held to the interval.
        for c in set(fcat.tolist()) - {COMMUNICATION}:
            sel = fcat == c
            fast = max(_spread(src, tgt, *_fractions(src, tgt, c, side))[0] for side in factors.SIDES)
            slow = max(_spread(src, tgt, *_fractions(src, tgt, c, side))[1] for side in factors.SIDES)
            k[sel] = np.clip(k[sel], np.exp(-fast), np.exp(slow))
        central, low, high = central * k, low * k, high * k
    return Repriced(central, low, high, moved, moved & (lim == LATENCY), unknown, notes, comm, fcat, k)


def _collectives(work, fcat, dur, nbytes, src, tgt, ranks, learnt, ratio, lo, hi, notes) -> CommProjection | None:
    """Collectives with a known message size: their latency-bandwidth bound on each GPU's group of
    ``ranks`` (``specs.links``), at the efficiency reached on the source (or learnt on the
    target's class); the range is the communication row's spread between the classes."""
    link = (fcat == COMMUNICATION) & ~np.isnan(nbytes) & (nbytes > 0) & (dur > 0)
    if not link.any():
        return None
    ls, lt = group_link(src, ranks), group_link(tgt, ranks)
    if ls is None or lt is None:
        why = no_link_reason(src, ranks) or no_link_reason(tgt, ranks)
        notes.append(f"collectives ({dur[link].sum() / 1e6:.3g} ms) stay as measured, widening the range: {why}")
        return None
    idx = np.flatnonzero(link)
    eff = learnt.efficiencies(factors.vendor_class(tgt).key) if learnt is not None else None
    names = work["name"].astype(str).to_numpy() if "name" in work else np.full(len(work), "", dtype=object)
    cp = project_collectives(names[idx], nbytes[idx], dur[idx] / 1e9, idx, ls, lt, eff)
    r = cp.projected * 1e9 / dur[idx]
    fast, slow = _spread(
        src, tgt, factors.fractions(src, COMMUNICATION, "memory"), factors.fractions(tgt, COMMUNICATION, "memory")
    )
    ratio[idx], lo[idx], hi[idx] = r, r * np.exp(-fast), r * np.exp(slow)
    notes.extend(cp.notes)
    return cp


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
    roofs = [
        (src.peak_bandwidth, tgt.peak_bandwidth, "memory"),
        (src.peak_flops("bf16"), tgt.peak_flops("bf16"), "compute"),
    ]
    for roof_s, roof_t, side in roofs:
        if not (roof_s and roof_t):
            continue
        f_s, f_t = factors.fractions(src, "other", side), factors.fractions(tgt, "other", side)
        r = (roof_s * f_s[1]) / (roof_t * f_t[1])
        fast, slow = _spread(src, tgt, f_s, f_t)
        lows.append(r * np.exp(-fast))
        highs.append(r * np.exp(slow))
    return float(min(lows)), float(max(highs))
