"""Kernel movers between two runs of one phase: which kernel groups moved the most time.

``kernel_movers(before_work, after_work, steps)`` matches the two runs' kernels and ranks
what changed by |Δ ms|:

* a **group** is (category, launching op) where the kernel's op is linked, else
  (category, kernel family): the name without template arguments, parameter lists and
  tile/configuration suffixes (``nvjet_sm103_tst_64x16_64x16_4x1_v_bz_TNT`` and
  ``nvjet_sm103_tst_32x64_..._splitK_TNN`` are one family, ``nvjet_sm103_tst``), so a GEMM
  that moved to another cuBLAS tile variant is still the same group;
* a group only one run has is a mover by its own time (status ``new`` or ``gone``): a GEMM
  whose kernel names differ completely between two GPUs is ranked by the time it takes, not
  left out of the ranking;
* **categories** are the level above: each category's Δ with its own top groups, because
  across vendors (no names in common, graph-replayed kernels without ops) only the category
  level can say that the MoE experts got slower;
* when the runs hold different numbers of steps in the phase, every time is per step
  (``basis``), so a run twice as long is not "twice as slow".
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.tables import ROOF_SUMS, group_roof, roof_sums, short_name

TOP_MOVERS = 12
TOP_PER_CATEGORY = 3  # groups listed under each category
NAME_CAP = 2000  # full kernel names kept for hover text

# A name component that is a tile or launch configuration (128x64, MT64x16x256, t128x8x128u2,
# tilesize128x128x64): the family ends before it.
_TILE = re.compile(r"\d+x\d+")
# A wrapper whose first template argument names the kernel: ``cutlass::Kernel2<cutlass_80_..._128x64_...>``.
_WRAPPED = re.compile(r"^(?:void\s+)?[\w:]+<\s*([A-Za-z_]\w*)\s*[,>]")
# Itanium-mangled names (``_ZN5aiter24add_rmsnorm_quant_kernelI...``): length-prefixed parts.
_MANGLED_PART = re.compile(r"(\d+)")


def kernel_family(name: str) -> str:
    """The kernel's family for matching across runs: template arguments, parameters and
    tile/configuration components removed (``Cijk_Alik_Bljk_BBS_..._MT64x16x256_MI16x16x1_...``
    -> ``Cijk_Alik_Bljk_BBS_...``)."""
    wrapped = _WRAPPED.match(str(name))
    if wrapped and _TILE.search(wrapped.group(1)):
        return kernel_family(wrapped.group(1))
    # short_name collapses every template argument list, nested ones too, to "<>": <4, Op<float>>
    # and <2, Op<float>> are one family (a demangled prefix stops before its template arguments).
    s = _demangled_prefix(name) or short_name(str(name), 10_000)
    parts = s.split("_")
    for i, part in enumerate(parts):
        if i and _TILE.search(part):
            parts = parts[:i]
            break
    return "_".join(parts).rstrip("_") or s


def _demangled_prefix(name: str) -> str | None:
    """``aiter::add_rmsnorm_quant_kernel`` from ``_ZN5aiter24add_rmsnorm_quant_kernelIDF16b...``:
    the nested name's parts, up to its template arguments (enough to name the family)."""
    if not name.startswith(("_ZN", "_Z")):
        return None
    i = 3 if name.startswith("_ZN") else 2
    parts = []
    while i < len(name):
        m = _MANGLED_PART.match(name, i)
        if not m:
            break
        n = int(m.group(1))
        start = m.end()
        if n <= 0 or start + n > len(name):
            break
        parts.append(name[start : start + n])
        i = start + n
        if not name.startswith("_ZN"):
            break
    return "::".join(parts) or None


def _groups(w: pd.DataFrame) -> pd.DataFrame:
    cols = ["category", "op_label", "ns", "calls", "bytes", *ROOF_SUMS, "names", "example"]
    if not len(w):
        return pd.DataFrame(columns=cols)
    names = w["name"].astype(str)
    families = {n: kernel_family(n) for n in names.unique()}
    label = [o if isinstance(o, str) else f"({families[n]})" for o, n in zip(w["op_name"], names)]
    f = pd.DataFrame(
        {
            "category": w["category"].astype(str).to_numpy(),
            "op_label": label,
            "name": names.to_numpy(),
            "ns": w["dur_ns"].to_numpy(dtype=float),
            "bytes": w["bytes"].to_numpy(dtype=float) if "bytes" in w else np.nan,
            **roof_sums(w),
        }
    )
    # The example kernel is the group's longest-running name, not whichever came first.
    by_name = f.groupby(["category", "op_label", "name"])["ns"].sum().reset_index()
    top = by_name.sort_values(["ns", "name"], ascending=[False, True]).drop_duplicates(["category", "op_label"])
    g = f.groupby(["category", "op_label"]).agg(
        ns=("ns", "sum"),
        calls=("ns", "size"),
        bytes=("bytes", "sum"),
        **{k: (k, "sum") for k in ROOF_SUMS},
        names=("name", "nunique"),
    )
    g = g.reset_index().merge(
        top[["category", "op_label", "name"]].rename(columns={"name": "example"}),
        on=["category", "op_label"],
        how="left",
    )
    return g[cols]


def _val(v: Any, cast=float) -> Any:
    return None if v is None or pd.isna(v) else cast(v)


def _roof(r: Any, side: str, device: dict | None) -> tuple[float | None, dict | None]:
    """One side's fraction of its own roof for the group, or None with why (``tables.group_roof``)."""
    ns = _val(getattr(r, f"ns_{side}")) or 0.0
    if not ns:
        return None, None
    sums = {k: _val(getattr(r, f"{k}_{side}")) or 0.0 for k in ROOF_SUMS}
    return group_roof(
        sums, ns, _val(getattr(r, f"bytes_{side}")), _val(getattr(r, f"calls_{side}")) or 0, device=device
    )


def _row(r: Any, sb: float, sa: float, devices: tuple[dict | None, dict | None]) -> dict[str, Any]:
    nb, na = _val(r.ns_b) or 0.0, _val(r.ns_a) or 0.0
    b, a = nb / 1e6 * sb, na / 1e6 * sa
    cb, ca = _val(r.calls_b, int), _val(r.calls_a, int)
    mb = nb / 1e3 / cb if cb else None  # mean per call, from the totals: independent of the basis
    ma = na / 1e3 / ca if ca else None
    eb = None if pd.isna(r.example_b) else str(r.example_b)
    ea = None if pd.isna(r.example_a) else str(r.example_a)
    roof_b, withheld_b = _roof(r, "b", devices[0])
    roof_a, withheld_a = _roof(r, "a", devices[1])
    return {
        "key": f"{r.category} | {r.op_label}",
        "category": r.category,
        "op": r.op_label,
        "status": "both" if b and a else ("new" if a else "gone"),
        "before_ms": b,
        "after_ms": a,
        "delta_ms": a - b,
        "speedup": (b / a) if a and b else None,
        "before_calls": cb,
        "after_calls": ca,
        "before_mean_us": mb,
        "after_mean_us": ma,
        "per_call_speedup": (mb / ma) if mb and ma else None,
        "before_kernel": None if eb is None else short_name(eb),
        "after_kernel": None if ea is None else short_name(ea),
        "before_kernel_full": None if eb is None else eb[:NAME_CAP],
        "after_kernel_full": None if ea is None else ea[:NAME_CAP],
        "before_kernels": _val(r.names_b, int),
        "after_kernels": _val(r.names_a, int),
        "before_roof": roof_b,
        "after_roof": roof_a,
        # Why a side's fraction is not shown: above its roof, or bytes capped at it (an upper bound).
        "before_roof_withheld": withheld_b,
        "after_roof_withheld": withheld_a,
    }


def _rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (-abs(r["delta_ms"]), r["key"]))


def kernel_movers(
    before: pd.DataFrame,
    after: pd.DataFrame,
    steps: tuple[int, int] = (0, 0),
    top: int = TOP_MOVERS,
    devices: tuple[dict | None, dict | None] = (None, None),
) -> dict[str, Any]:
    """Movers of one phase. ``before``/``after`` are the phase's work rows (category, op_name,
    name, dur_ns, roof_fraction; bytes, the peaks and model_check where priced); ``steps`` the
    phase's step counts in each run (0: no steps); ``devices`` each run's ``Analysis.device``
    (its cache and peak basis say why a group above its roof is)."""
    nb, na = steps
    per_step = bool(nb and na and nb != na)
    sb, sa = (1.0 / nb, 1.0 / na) if per_step else (1.0, 1.0)
    gb, ga = _groups(before), _groups(after)
    m = gb.merge(ga, on=["category", "op_label"], how="outer", suffixes=("_b", "_a"))
    rows = [_row(r, sb, sa, devices) for r in m.itertuples(index=False)]
    rows = [r for r in rows if r["before_ms"] or r["after_ms"]]
    # A phase only one run has: nothing to compare, so everything is new or gone, nothing a mover.
    both = len(gb) > 0 and len(ga) > 0
    out: dict[str, Any] = {
        "basis": "per step" if per_step else "total",
        "steps": {"before": nb or None, "after": na or None},
        "categories": _categories(rows) if both else [],
        "movers": _rank(rows)[:top] if both else [],
        "new": sorted([r for r in rows if r["status"] == "new"], key=lambda r: (-r["after_ms"], r["key"]))[:top],
        "vanished": sorted([r for r in rows if r["status"] == "gone"], key=lambda r: (-r["before_ms"], r["key"]))[:top],
    }
    return out


def _categories(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The level above the groups: each category's time in both runs, its Δ and its top groups."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["category"], []).append(r)
    out = []
    for cat, rs in by.items():
        b = sum(r["before_ms"] for r in rs)
        a = sum(r["after_ms"] for r in rs)
        out.append(
            {
                "category": cat,
                "before_ms": b,
                "after_ms": a,
                "delta_ms": a - b,
                "relative": (a - b) / b if b else None,
                "status": "both" if b and a else ("new" if a else "gone"),
                "groups": len(rs),
                "top": _rank(rs)[:TOP_PER_CATEGORY],
            }
        )
    return sorted(out, key=lambda c: (-abs(c["delta_ms"]), c["category"]))
