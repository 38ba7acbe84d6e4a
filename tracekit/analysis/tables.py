"""The report's tables of a phase's work: kernel rows by name, the roofline's points, the whole trace.

Takes a work table (``analyze.measure``'s units, priced) and gives what the report lists:
``phase_work`` (one phase's units, split mixed steps by share), ``kernel_table`` (rows per kernel
name), ``roofline_points`` (op groups by intensity against the spec's roofs), ``overall_of`` (the
trace regardless of phase) and ``short_name`` (a kernel name for display).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.pricing.roofline import BELOW_ROOF, combined_estimate, limiter, roof_withheld
from tracekit.analysis.steps.mixed import phase_weights
from tracekit.specs.model import normalise_dtype
from tracekit.trace.model import op_shapes

TOP_KERNELS = 15  # rows per phase in the report tables
ROOFLINE_POINTS = 40  # op groups per phase on the roofline chart


def _phase_work(work: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The units of work of a phase, each weighted by its share in the phase: the prefill or
    decode part of a split mixed step's kernel counts with its share of time, FLOPs and bytes."""
    weight = phase_weights(work["phase"].to_numpy(), work["prefill_share"].to_numpy(), phase)
    keep = weight > 0
    # A phase holding every unit (a decode-only run) is the table itself, not a copy of a
    # serving run's work table (hundreds of MB): the per-phase figures only read it.
    w = work if keep.all() else work[keep]
    if (weight[keep] == 1.0).all():
        return w
    f = weight[keep]
    return w.assign(dur_ns=w["dur_ns"].to_numpy() * f, flops=w["flops"].to_numpy() * f, bytes=w["bytes"].to_numpy() * f)


# Innermost template arguments: a <...> holding no brackets but the empty <> of arguments
# already collapsed, so each pass collapses one more level of nesting.
_TEMPLATE_ARGS = re.compile(r"<(?:[^<>]|<>)*>")


def _strip_params(s: str) -> str:
    """``f<>(int, float*)`` -> ``f<>()``: the trailing parameter list of a C++ signature.
    A parenthesis after a space (``Memcpy DtoD (Device -> Device)``) is kept."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] == ")":
            depth += 1
        elif s[i] == "(":
            depth -= 1
            if depth == 0:
                return s if i == 0 or s[i - 1] == " " else s[:i] + "()"
    return s


def short_name(name: str, width: int = 80) -> str:
    """A kernel name for display: template arguments and parameter lists elided."""
    s = name
    for _ in range(name.count("<") + 1):  # nested templates collapse from the inside out, a level a pass
        t = _TEMPLATE_ARGS.sub("<>", s)
        if t == s:
            break
        s = t
    s = s.replace("(anonymous namespace)::", "")
    s = _strip_params(s)
    s = s.removeprefix("void ")
    return s if len(s) <= width else s[: width - 1] + "…"


def phase_work(work: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The work table of one phase as the report's per-phase tables count it (split mixed steps by share)."""
    return _phase_work(work, phase)


def kernel_table(w: pd.DataFrame, top: int | None = None, spec=None) -> list[dict[str, Any]]:
    """The ``top_kernels`` rows of work table ``w``, every kernel name by default (the report keeps 15);
    ``spec`` (the device's) says why a row above its roof is (its cache size and peak basis)."""
    return _top_kernels(w, top, spec)


# What a group of units sums for its roof figures (``roof_sums``, read by ``group_roof``).
ROOF_SUMS = ("roof_x_dur", "known_dur", "compute_ns", "memory_ns", "capped_dur")
# Routed experts (or decode attention) whose bytes pricing.above_roof capped at the roof.
CAPPED = "capped"
CAPPED_REASON = (
    "its bytes are capped at what peak bandwidth moves in its time (the model's would need more): an "
    "upper bound, so the fraction of the roof it reached is not measured"
)


def roof_sums(w: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per unit, what a group's roof figures sum (``ROOF_SUMS``): its time weighted by its roof
    fraction and its time where that is known; the ns its FLOPs and its bytes take at the peaks
    it was priced against (``peak_flops``, ``peak_bw``); its time capped at the roof."""
    dur = w["dur_ns"].to_numpy(dtype=float)
    roof = w["roof_fraction"].to_numpy(dtype=float)
    known = ~np.isnan(roof)

    def at_peak(what: str, peak: str) -> np.ndarray:
        if peak not in w:
            return np.zeros(len(w))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.nan_to_num(
                w[what].to_numpy(dtype=float) / w[peak].to_numpy(dtype=float) * 1e9, nan=0.0, posinf=0.0
            )

    capped = (w["model_check"].to_numpy(dtype=object) == CAPPED) if "model_check" in w else np.zeros(len(w), bool)
    return {
        "roof_x_dur": np.where(known, roof * dur, 0.0),
        "known_dur": np.where(known, dur, 0.0),
        "compute_ns": at_peak("flops", "peak_flops"),
        "memory_ns": at_peak("bytes", "peak_bw"),
        "capped_dur": np.where(capped, dur, 0.0),
    }


def group_roof(
    sums, total_ns: float, nbytes: float | None, calls: float, spec=None, device: dict | None = None
) -> tuple[float | None, dict | None]:
    """A group of units' time-weighted roof fraction as shown, or None with why it is withheld
    (``{"why": "above" | "capped", "reason": sentence}``): the rule of ``roofline.roof_withheld``
    on its roof fraction and on its achieved FLOP/s and bytes/s over the peaks. ``sums``: the
    group's ``roof_sums`` summed; the device's cache and peak basis from ``spec`` (a ``GpuSpec``)
    or ``device`` (``Analysis.device``)."""
    roof = sums["roof_x_dur"] / sums["known_dur"] if sums["known_dur"] else None
    if spec is not None:
        cache, basis = spec.l2_cache_mb, spec.peak_basis
    else:
        cache, basis = (device or {}).get("l2_cache_mb"), (device or {}).get("peak_basis")
    per_call = nbytes / calls if calls and nbytes is not None and pd.notna(nbytes) else None
    why = roof_withheld(
        sums["compute_ns"] / total_ns if total_ns else None,
        sums["memory_ns"] / total_ns if total_ns else None,
        roof,
        bytes_per_call=per_call,
        cache_mb=cache,
        peak_basis=basis,
    )
    if why:
        return None, {"why": "above", "reason": why}
    if sums["capped_dur"] > 0:
        return None, {"why": "capped", "reason": CAPPED_REASON}
    return roof, None


def kernel_row(name: str, r, total: float, spec=None) -> dict[str, Any]:
    """One ``top_kernels`` row from a kernel name's sums (``calls``, ``total_ns``, ``flops``,
    ``bytes``, the ``ROOF_SUMS``) and its most common ``category``, ``bound``, ``limiter``,
    ``cost_source``, ``peak_note`` and ``estimate``. A row above its roof shows no achieved rate
    and no roof fraction, only why (``roof_withheld``)."""
    secs = r["total_ns"] / 1e9
    roof, withheld = group_roof(r, r["total_ns"], r["bytes"], r["calls"], spec)
    above = withheld is not None and withheld["why"] == "above"
    # The row's limiter follows its time-weighted roof fraction, as shown beside it; a
    # kernel without one (experts capped at the roof) keeps its units' limiter.
    row_limiter = (
        str(limiter([r["bound"]], [roof], fits=[r["limiter"] != BELOW_ROOF])[0]) if roof is not None else r["limiter"]
    )
    return {
        "name": str(name),
        "short_name": short_name(str(name)),
        "category": r["category"],
        "calls": int(round(r["calls"])),
        "total_ms": r["total_ns"] / 1e6,
        "mean_us": r["total_ns"] / r["calls"] / 1e3,
        "share": r["total_ns"] / total if total else None,
        "bound": r["bound"],
        "limiter": row_limiter,
        # Where the kernel's FLOPs and bytes came from (shapes, capture, model, none).
        "cost_source": r["cost_source"],
        # The peak that priced it when its dtype has none on the device ("priced at fp8 peak: ...").
        "peak_note": r["peak_note"] if isinstance(r["peak_note"], str) else None,
        # What its bytes (and the bandwidth and roof fraction built on them) are: "upper" or
        # "lower" bound, the model's "estimate", or None (the minimal traffic of stated work).
        "estimate": r["estimate"] if isinstance(r["estimate"], str) else None,
        "achieved_tflops": (r["flops"] / secs / 1e12) if secs and pd.notna(r["flops"]) and not above else None,
        "achieved_gbps": (r["bytes"] / secs / 1e9) if secs and pd.notna(r["bytes"]) and not above else None,
        "roof_fraction": roof,
        "roof_withheld": withheld,
    }


def _top_kernels(w: pd.DataFrame, top: int | None = TOP_KERNELS, spec=None) -> list[dict[str, Any]]:
    if not len(w):
        return []
    total = w["dur_ns"].sum()
    g = w.groupby("name", observed=True)
    # The roof sums grouped the same way, without copying the whole table to add them.
    sums = {k: pd.Series(v, index=w.index).groupby(w["name"], observed=True).sum() for k, v in roof_sums(w).items()}
    table = pd.DataFrame(
        {
            "calls": g.size(),
            "total_ns": g["dur_ns"].sum(),
            "flops": g["flops"].sum(min_count=1),
            "bytes": g["bytes"].sum(min_count=1),
            "category": _mode(w, "category"),  # as a merge of windows takes it: most units
            "bound": _mode(w, "bound"),
            "limiter": _mode(w, "limiter"),
            "cost_source": _mode(w, "cost_source"),
            "peak_note": _mode(w, "peak_note") if "peak_note" in w else None,
            "estimate": estimates_by_name(w),
            **sums,
        }
    ).sort_values("total_ns", ascending=False)
    if top is not None:
        table = table.head(top)
    return [kernel_row(name, r, total, spec) for name, r in table.iterrows()]


def estimates_by_name(w: pd.DataFrame) -> pd.Series | None:
    """Per kernel name whose units carry an estimate, what its summed bytes are (``combined_estimate``)."""
    if "estimate" not in w:
        return None
    has = w["estimate"].notna().to_numpy()
    if not has.any():
        return None
    names = w["name"]
    out = {}
    for name in pd.unique(names[has]):
        mine = (names == name).to_numpy()
        out[name] = combined_estimate(
            w["estimate"].to_numpy(dtype=object)[mine], w["bytes"].to_numpy(dtype=float)[mine]
        )
    return pd.Series(out, dtype=object)


# Beyond this many names x values, _mode counts the pairs present instead of a full table.
_MODE_TABLE_MAX = 1 << 24


def _mode(w: pd.DataFrame, col: str) -> pd.Series:
    """Per kernel name, the most common value of ``col``; on a tie the value that sorts first
    (what a groupby's idxmax gives). Counted on integer codes, not a groupby on strings."""
    names = w["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        counts = w.groupby(["name", col], observed=True).size()
        return counts.groupby(level=0, observed=True).idxmax().map(lambda key: key[1])
    ncode = names.cat.codes.to_numpy().astype(np.int64)
    vcode, values = pd.factorize(w[col].to_numpy(dtype=object), sort=True)
    ok = (ncode >= 0) & (vcode >= 0)
    width = max(len(values), 1)
    n_names = len(names.cat.categories)
    if n_names * width <= _MODE_TABLE_MAX:
        # A names x values table of counts; argmax takes the first largest, the value that sorts first.
        table = np.bincount(ncode[ok] * width + vcode[ok], minlength=n_names * width).reshape(n_names, width)
        kn = np.flatnonzero(table.any(axis=1))
        kv = table[kn].argmax(axis=1)
    else:
        keys, counts = np.unique(ncode[ok] * width + vcode[ok], return_counts=True)
        k_n, k_v = keys // width, keys % width
        order = np.lexsort((k_v, -counts, k_n))  # per name: the largest count first, then the value that sorts first
        best = order[np.r_[True, k_n[order][1:] != k_n[order][:-1]]]
        kn, kv = k_n[best], k_v[best]
    index = pd.CategoricalIndex(pd.Categorical.from_codes(kn, dtype=names.dtype), name="name")
    return pd.Series(np.asarray(values, dtype=object)[kv], index=index)


def overall_of(work: pd.DataFrame, spec=None) -> dict[str, Any]:
    """The whole trace regardless of phase: what a training trace (no steps) can still show."""
    ms = float(work["dur_ns"].sum() / 1e6)
    by_category = work.groupby("category")["dur_ns"].sum().sort_values(ascending=False) / 1e6
    return {
        "kernel_ms": ms,
        "kernels": int(len(work)),
        "by_category": {str(k): float(v) for k, v in by_category.items()},
        "by_category_share": {str(k): (float(v) / ms if ms else None) for k, v in by_category.items()},
        "top_kernels": _top_kernels(work, spec=spec),
    }


def _shape_text(ops: pd.DataFrame, op_row: int) -> str | None:
    """Input shapes and dtypes of one op, compact: ``[16, 559, 1024] bf16, [1024, 1024] bf16``."""
    if op_row < 0:
        return None
    try:
        dims, types = op_shapes(ops, int(op_row))
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    if not dims:
        return None
    parts = []
    for i, d in enumerate(dims):
        if not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
            continue
        t = types[i] if types and i < len(types) and isinstance(types[i], str) else ""
        dt = normalise_dtype(t) or ""
        parts.append(f"[{', '.join(str(x) for x in d)}]" + (f" {dt}" if dt else ""))
    text = ", ".join(parts[:4]) + (" ..." if len(parts) > 4 else "")
    return text[:200] or None


def roofline_points(w: pd.DataFrame, spec, phase: dict, ops: pd.DataFrame | None = None) -> dict[str, Any]:
    """Work groups placed by intensity and achieved FLOP/s. Shape-priced work: one point per
    pricing op name and input shapes (x category, dtype, unit), so the QKV, MLP and LM-head
    GEMMs of a model stay separate points with their own intensities. Model-priced work: one
    point per model component (x dtype, unit), the grain the model prices at."""
    flops_all, bytes_all, dur_all = (w[c].to_numpy(dtype=float) for c in ("flops", "bytes", "dur_ns"))
    with np.errstate(invalid="ignore"):
        usable = (
            ~np.isnan(flops_all) & (bytes_all > 0) & (dur_all > 0) & ~categorical.Values(w["bound"]).eq("interconnect")
        )
    out: dict[str, Any] = {"points": [], "roofs": None, "reason": None}
    if spec is None:
        out["reason"] = "device peaks unknown: no roofline"
        return out
    if not usable.any():
        out["reason"] = "no kernel in this phase has a known cost"
        return out
    pricing_all = w["pricing_op"].to_numpy()
    model_all = categorical.Values(w["cost_source"]).eq("model")
    shaped_all = (pricing_all >= 0) & ~model_all if ops is not None else np.zeros(len(w), bool)
    # The rows placed, and only the columns the points need: a phase of a serving run has
    # millions of units, and a sub-frame of all forty columns would be copied just to be read.
    rows_in = np.flatnonzero(usable & (shaped_all | model_all))
    shaped_rows, model_rows = shaped_all[rows_in], model_all[rows_in]
    p = np.maximum(pricing_all[rows_in], 0)
    has_ops = ops is not None and len(ops) > 0
    comp_codes, comp_uniques = pd.factorize(w["component"].to_numpy(dtype=object)[rows_in], use_na_sentinel=False)
    comp_label = np.array(
        ["model: " + str(c if c is not None else "").replace("_", " ") for c in comp_uniques], dtype=object
    )
    if ops is not None and has_ops:
        op_name_of = categorical.category_strings(ops["name"])
        op_code = categorical.codes(ops["name"])[p]
        dims_code = pd.factorize(ops["input_dims"].to_numpy(dtype=object)[p], use_na_sentinel=False)[0]
    else:
        op_name_of, op_code, dims_code = (
            np.array([""], dtype=object),
            np.zeros(len(p), np.int64),
            np.zeros(len(p), np.int64),
        )
    # Group keys: a shape-priced unit by its op's name and input dims, a model-priced one by
    # its component; each with category, dtype and unit. Aggregated with factorised codes
    # (np.bincount), not a pandas groupby per key: this runs for every phase of every report.
    # Names and shapes are keyed by integer codes (a model component's negative), and each
    # key is factorised in row order, as the strings themselves would be.
    label_key = np.where(model_rows, -1 - comp_codes, op_code)
    signature = np.where(model_rows, -1 - comp_codes, dims_code)
    text_cols = [w[c].to_numpy(dtype=object)[rows_in] for c in ("category", "dtype", "unit")]
    gid = np.zeros(len(rows_in), dtype=np.int64)
    for col in [label_key, signature, *text_cols]:
        codes, uniques = pd.factorize(col, use_na_sentinel=False)
        gid = gid * (len(uniques) + 1) + codes
    groups, first, inverse = np.unique(gid, return_index=True, return_inverse=True)
    sums = {
        c: np.bincount(inverse, weights=v[rows_in], minlength=len(groups))
        for c, v in (("flops", flops_all), ("bytes", bytes_all), ("dur_ns", dur_all))
    }
    calls = np.bincount(inverse, minlength=len(groups))
    order = np.argsort(-sums["dur_ns"], kind="stable")[:ROOFLINE_POINTS]
    est_all = w["estimate"].to_numpy(dtype=object) if "estimate" in w else None
    if est_all is not None and not pd.notna(est_all[rows_in]).any():
        est_all = None  # no point's bytes are estimated
    rows: list[tuple[tuple, dict[str, Any]]] = []
    for g in order:
        i = first[g]
        at = int(rows_in[i])
        label = comp_label[comp_codes[i]] if model_rows[i] else op_name_of[op_code[i]] if has_ops else ""
        rows.append(
            (
                (label, None, text_cols[0][i], text_cols[1][i], text_cols[2][i]),
                {
                    "flops": sums["flops"][g],
                    "bytes": sums["bytes"][g],
                    "dur_ns": sums["dur_ns"][g],
                    "calls": calls[g],
                    "kernel": str(w["name"].iat[at]),
                    "estimate": combined_estimate(est_all[rows_in[inverse == g]], bytes_all[rows_in[inverse == g]])
                    if est_all is not None
                    else None,
                    "source": w["cost_source"].iat[at],
                    "op": int(pricing_all[at]) if shaped_rows[i] else -1,
                },
            )
        )
    for (lab, _, cat, dtype, unit), r in rows:
        secs = r["dur_ns"] / 1e9
        used = spec.runs_as(dtype, unit)  # as the units' bounds: a dtype without a peak runs at the next wider one
        peak = spec.peak_flops(used, unit) if used else None
        bw = spec.peak_bandwidth
        roof = min(peak, (r["flops"] / r["bytes"]) * bw) if peak and bw else None
        fraction = max(r["flops"] / peak, r["bytes"] / bw) / secs if peak and bw else None
        bound = ("compute" if r["flops"] / peak >= r["bytes"] / bw else "memory") if peak and bw else "unknown"
        # Above its roof a point is not drawn as achieved: it is listed with why.
        above = roof_withheld(
            r["flops"] / peak / secs if peak else None,
            r["bytes"] / bw / secs if bw else None,
            bytes_per_call=r["bytes"] / r["calls"],
            cache_mb=spec.l2_cache_mb,
            peak_basis=spec.peak_basis,
        )
        out["points"].append(
            {
                "label": str(lab),
                "kernel": short_name(str(r["kernel"])),
                "shapes": _shape_text(ops, int(r["op"])) if ops is not None and r["op"] >= 0 else None,
                "category": str(cat),
                "dtype": str(dtype),
                "unit": str(unit),
                "calls": int(r["calls"]),
                "time_ms": r["dur_ns"] / 1e6,
                "intensity": r["flops"] / r["bytes"],
                "achieved_flops": None if above else r["flops"] / secs,
                "roof_flops": roof,
                "peak_note": spec.runs_as_note(dtype, unit),
                "cost_source": str(r["source"]),
                # What the point's bytes are: "upper"/"lower" bound, the model's "estimate", or null.
                "estimate": r["estimate"],
                "bound": bound,
                "limiter": str(limiter([bound], [fraction if fraction is not None else np.nan])[0]),
                # Same definition as per kernel: time the roofline allows over time taken.
                "roof_fraction": None if above else fraction,
                # Why a point above its roof is not drawn (``roofline.roof_withheld``), else None.
                "above_roof": above,
            }
        )
    dtypes = {(spec.runs_as(p["dtype"], p["unit"]) or p["dtype"], p["unit"]) for p in out["points"]}
    out["roofs"] = {
        "bandwidth": spec.peak_bandwidth,
        "achievable_bandwidth": spec.achievable_bandwidth,
        "compute": [
            {
                "dtype": d,
                "unit": u,
                "peak_flops": spec.peak_flops(d, u),
                "achievable_flops": spec.achievable_flops(d, u),
            }
            for d, u in sorted(dtypes)
            if spec.peak_flops(d, u)
        ],
    }
    return out
