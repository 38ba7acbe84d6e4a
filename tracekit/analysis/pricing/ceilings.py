"""Ceilings you can trust: a roof the run's own kernels beat was measured wrong.

``tracekit collect`` measures a machine's matmul FLOP/s and copy bandwidth; on a busy machine
that measurement can come out far too low (one core shared with another process), and every
figure priced against it then reads above 100% ("Prefill MFU 441%"). No kernel can beat the
roof it runs under, so when substantial kernels of the run did, the ceiling is the error:

- a GPU's measured (achievable) ceilings are dropped and its datasheet row is used;
- a CPU has no datasheet, so each ceiling is raised to the fastest the run's own kernels
  achieved (a lower bound on the true peak), per matrix dtype and for bandwidth.

Either way the analysis says so (``provenance.ceilings`` and a finding). Only kernels of at
least ``MIN_NS`` count: shorter ones are timed too coarsely to prove anything. Bandwidth is
judged only on kernels moving at least ``CACHE_PROOF_BYTES``: smaller working sets can sit in
caches (L2, L3, Infinity Cache) and legitimately beat the DRAM bandwidth the ceiling is.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tracekit.specs import SpecMatch

MIN_NS = 20_000
CACHE_PROOF_BYTES = 512e6
TOLERANCE = 0.02  # timing noise: a kernel 2% above the roof proves nothing


def check_ceilings(
    work: pd.DataFrame, table: pd.DataFrame, match: SpecMatch, calibration: dict | None = None
) -> tuple[SpecMatch, str] | None:
    """A corrected spec match and the sentence saying why, or None when the ceilings hold."""
    spec = match.spec
    if spec is None:
        return None
    dur = work["dur_ns"].to_numpy(dtype=float)
    ok = (dur >= MIN_NS) & ~np.isnan(table["flops"].to_numpy(dtype=float))
    if not ok.any():
        return None
    secs = dur[ok] / 1e9
    flops = table["flops"].to_numpy(dtype=float)[ok] / secs
    moved = table["bytes"].to_numpy(dtype=float)[ok]
    big = moved >= CACHE_PROOF_BYTES
    dtype = table["dtype"].astype(object).to_numpy()[ok]
    matrix = table["unit"].astype(object).to_numpy()[ok] == "matrix"
    best_bw = float(np.nanmax(moved[big] / secs[big])) if big.any() else 0.0
    best = {str(d): float(flops[matrix & (dtype == d)].max()) for d in pd.unique(dtype[matrix]) if d is not None}
    measured = bool(spec.measured_matmul_flops or spec.measured_bandwidth)
    if spec.key == "cpu":
        peaks = {d: spec.peak_flops(d, "matrix") for d in best}
        over = {d: (p, f) for d, f in best.items() if (p := peaks[d]) and f > p * (1 + TOLERANCE)}
        raised = {d: f for d, (_, f) in over.items()}
        bw = best_bw if spec.peak_bandwidth and best_bw > spec.peak_bandwidth * (1 + TOLERANCE) else None
        if not raised and bw is None:
            return None
        flops_new = {**spec.matrix_flops, **raised}
        new = replace(
            spec,
            matrix_flops=flops_new,
            vector_flops={**spec.vector_flops, **raised},
            peak_bandwidth=bw or spec.peak_bandwidth,
            peak_basis=f"{spec.peak_basis}, raised to what the run achieved",
        )
        parts = [f"{d} matmul {p / 1e12:.3g} → {f / 1e12:.3g} TFLOP/s" for d, (p, f) in over.items()]
        if bw is not None and spec.peak_bandwidth:
            parts.append(f"bandwidth {spec.peak_bandwidth / 1e9:.3g} → {bw / 1e9:.3g} GB/s")
        why = _busy(calibration)
        return (
            SpecMatch(new, match.how, match.reason),
            "The run's own kernels beat the ceilings tracekit collect measured, so the measurement was wrong"
            f"{why}: the CPU's ceilings were raised to the fastest the run achieved ({'; '.join(parts)}), a lower "
            "bound on the true peaks; re-collect on an idle machine for figures against its real peaks",
        )
    if not measured:
        return None
    ach_bw = spec.measured_bandwidth
    beaten = [d for d, f in best.items() if (m := spec.measured_matmul_flops.get(d)) and f > m * (1 + TOLERANCE)]
    if not beaten and not (ach_bw and best_bw > ach_bw * (1 + TOLERANCE)):
        return None
    new = replace(spec, measured_matmul_flops={}, measured_bandwidth=None)
    return (
        SpecMatch(new, match.how, match.reason),
        f"The run's own kernels beat the ceilings tracekit collect measured on {spec.name}"
        f"{_busy(calibration)}: the datasheet row's achievable ceilings are used instead",
    )


def _busy(calibration: dict | None) -> str:
    """Why a measurement may have gone wrong, from what collect recorded about the machine."""
    checks = (calibration or {}).get("checks") or {}
    load = checks.get("load_average_1m")
    if load is not None:
        return f" (the machine's load average was {load:.2g} while it ran)"
    return ""
