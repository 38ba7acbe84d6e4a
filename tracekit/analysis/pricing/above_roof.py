"""Model-priced work above the roof: what the roofline columns of such units become.

Takes an attribution's table with its roofline columns (``roofline.roofline_columns``) and
the device's spec, and rewrites in place the units the model priced above what the roofline
allows in their kernels' time: routed experts' (and unknown-keys decode attention's) bytes
capped at the roof, just-written activations that fit in the L2 cache kept as priced (served
from the cache), any other component's cost left unknown, with the reason
(``model_above_roof``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.pricing import model_costs as mc
from tracekit.analysis.pricing.roofline import MEMORY, MODEL, NONE, UNKNOWN
from tracekit.formatting import si
from tracekit.models.costs import POOLED
from tracekit.specs import GpuSpec

# The model's minimal work of a component can take longer at the roof than its kernels ran
# only when the model does not describe them, or when the data is served from the cache rather
# than DRAM (the bandwidth roof is DRAM's): tolerate timing noise, nothing more.
ABOVE_ROOF = 1.02

# Components whose kernel reads what the kernel just before it wrote: the step's activations,
# priced launch by launch (``model_costs``: norms, rotary, the gated activation, the KV-cache
# write of the new keys and values, quantisation of activations). A kernel of theirs that moves
# no more bytes than the last-level cache holds finds them there, not in DRAM. Weights, the KV
# cache and recurrent states are read once per step, after the rest of the model's passed
# through the cache: not resident.
FRESH_INPUTS = ("norm", "qk_norm", "rope", "activation", "kv_write", "quantize")

# The checks after which a unit keeps its bound as its limiter, though its roof fraction is not
# shown: capped at the roof, or served from the cache faster than the DRAM roof.
AT_ROOF_CHECKS = ("capped", "cached")


def model_above_roof(
    table: pd.DataFrame, step: np.ndarray, dur_s: np.ndarray, spec: GpuSpec, spec_reason, kinds, category
) -> None:
    """Model-priced work that would need more than the roofline allows in its kernels' time.

    Never shown as fact. Routed experts are priced at the experts uniform routing touches,
    an upper bound: above the roof, routing concentrated on fewer experts, so their bytes are
    capped at what peak bandwidth moves in the kernels' time (an upper bound still; the roof
    fraction is then not shown). A kernel of just-written activations (``FRESH_INPUTS``) whose
    bytes fit in the device's L2 cache was served from it: its cost stands, its fraction of
    the DRAM roof is not shown ("cached"). Any other component above the roof is left unpriced,
    with the reason: the model (or --tp, or --weights) does not describe those kernels.
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
    cached = np.zeros(len(table), dtype=bool)
    unkeyed = np.zeros(len(table), dtype=bool)  # dropped for want of the keys, not for a model that misfits
    l2 = spec.l2_cache_mb * 1e6 if spec is not None and spec.l2_cache_mb else None
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
        cases.append((str(comp_m[i]), rows_m[i : i + 1], float(need_m[i] / took_m[i])))
    est_now = table["estimate"].to_numpy(dtype=object)
    ridge = table["ridge"].to_numpy(dtype=float) if "ridge" in table else np.full(len(table), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        below_ridge = flops / nbytes < ridge  # memory-bound: the bandwidth roof is the one beaten
    for c, rows, ratio in cases:
        if c == "experts":
            nbytes[rows] /= ratio  # memory-bound at any expert count: bytes are the time's roof
            capped[rows] = True
            reason[rows] = (
                f"uniform routing would touch experts whose weights need {ratio:.0%} of the "
                "bandwidth roof in these kernels' time: routing concentrated on fewer experts; bytes "
                "capped at what peak bandwidth moves in that time, an upper bound"
            )
        elif c == "attention" and all(e == mc.UPPER for e in est_now[rows].tolist()):
            # Decode attention of unknown keys (model_costs.UNKNOWN_KEYS_BASIS): its bytes come
            # down to the roof's in the kernels' time; memory-bound only where its key-independent
            # intensity is below the ridge (absorbed MLA's need not be): else its cost and bound
            # stay unknown.
            with np.errstate(divide="ignore", invalid="ignore"):
                below = flops[rows] / nbytes[rows] < ridge[rows]
            if not below.all():
                flops[rows], nbytes[rows] = np.nan, np.nan
                dropped[rows] = unkeyed[rows] = True
                reason[rows] = (
                    "the keys each request attends to are not in the trace, and this attention's "
                    "intensity at any key count is not below the ridge: its bound is not known"
                )
                continue
            # An upper bound on the bytes; FLOPs derived from a capped figure would be no figure
            # of the work (issue 45): they stay unknown.
            flops[rows] = np.nan
            nbytes[rows] /= ratio
            capped[rows] = True
            reason[rows] = (
                "the keys each request attends to are not in the trace: decode attention is memory-bound "
                "at any key count; bytes capped at what peak bandwidth moves in these kernels' time, "
                "an upper bound; its FLOPs are not known"
            )
        elif c in FRESH_INPUTS and l2 and (nbytes[rows] <= l2).all() and below_ridge[rows].all():
            cached[rows] = True
            reason[rows] = (
                f"faster than the DRAM bandwidth roof (its bytes need {ratio:.0%} of its time there): the "
                f"{si(float(nbytes[rows].max()), 'B')} it moves were written by the kernels just before "
                f"it and fit in {spec.name}'s {spec.l2_cache_mb:g} MB L2 cache, which serves them faster "
                "than DRAM; the model's cost stands, its fraction of the DRAM roof is not shown"
            )
        else:
            flops[rows], nbytes[rows] = np.nan, np.nan
            dropped[rows] = True
            reason[rows] = (
                f"the model's {str(c).replace('_', ' ')} work would take {ratio:.0%} of these "
                "kernels' time even at the roofline: the model (or --tp, --weights) does not describe "
                "them, so their cost is left unknown"
            )
    if not (capped.any() or dropped.any() or cached.any()):
        return
    table["flops"], table["bytes"] = flops, nbytes
    table["cost_reason"] = categorical.text(reason, index=table.index)
    changed = capped | dropped | cached
    with np.errstate(divide="ignore", invalid="ignore"):
        table.loc[changed, "intensity"] = np.where(nbytes[changed] > 0, flops[changed] / nbytes[changed], np.nan)
        table.loc[changed, "achieved_bw"] = np.where(dur_s[changed] > 0, nbytes[changed] / dur_s[changed], np.nan)
        table.loc[changed, "achieved_flops"] = np.where(dur_s[changed] > 0, flops[changed] / dur_s[changed], np.nan)
    for col in ("roof_fraction", "roof_fraction_achievable"):
        table.loc[changed, col] = np.nan
    # Capped experts stay memory-bound (their intensity is far below any ridge at any expert
    # count), as cached kernels do (checked below the ridge); work the model does not describe
    # has unknown cost and bound.
    table.loc[capped, "bound"] = MEMORY
    table.loc[dropped, "cost_source"] = NONE
    table.loc[dropped, "bound"] = UNKNOWN
    table.loc[changed, "bound_reason"] = reason[changed]
    check = table["model_check"].to_numpy().copy()
    check[capped], check[dropped], check[cached] = "capped", "undescribed", "cached"
    check[unkeyed] = "keys_unknown"
    table["model_check"] = categorical.text(check, index=table.index)
    # The capped bytes are what the roof lets move in the kernels' time: the most they can have
    # been, not an estimate of what they were.
    est = table["estimate"].to_numpy(dtype=object).copy()
    est[capped], est[dropped] = mc.UPPER, None
    table["estimate"] = categorical.text(est, index=table.index)
