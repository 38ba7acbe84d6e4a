"""How far a projection was off: projected figures beside those of the same workload measured on the target.

``tracekit project SOURCE --to GPU --check TARGET_TRACE``. The projection (``whatif.project``)
says what the source run would do on the target; ``check`` puts it beside the target trace's own
analysis, per phase (GPU busy time per step and in total), per kernel category (kernel time),
and per kernel name where both runs ran kernels of the same name. Error = projected / measured - 1.

A check only means something when the two traces hold the same work, so it refuses, with the
figure that differs and its two values, when they do not: a different model (where both analyses
name one), different phases, a different number of steps in a phase, different tokens (beyond
``TOKEN_TOLERANCE``) or batch in a step (where both traces state them), or a target trace that was
not measured on the GPU projected onto (the source's own GPU included).

The projection's central estimate is compared; its range (low to high, from the category
factors' spread and the unknown-cost share) is shown beside it per phase, with whether the
measured figure falls inside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.model import Analysis
from tracekit.errors import TracekitError

KIND = "tracekit.projection_check"
# Tokens per step may differ by rounding in how an engine states them (e.g. an estimate from
# input sizes); a batch is a count of requests and must match.
TOKEN_TOLERANCE = 0.01
TOP_KERNELS = 15


@dataclass
class Check:
    """The projected figures beside the measured ones, as plain dicts (``to_dict``)."""

    target_trace: str | None
    target_device: str | None
    phases: dict[str, dict[str, Any]]
    categories: dict[str, dict[str, dict[str, Any]]]  # phase -> category -> figures
    kernels: dict[str, list[dict[str, Any]]]  # phase -> rows, by measured time
    headline: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "target_trace": self.target_trace,
            "target_device": self.target_device,
            "basis": "central",
            "phases": self.phases,
            "categories": self.categories,
            "kernels": self.kernels,
            "headline": self.headline,
        }


@dataclass
class CheckedProjection:
    """A projection with its check: renders as the projection, its JSON with a ``check`` object."""

    projection: Any  # whatif.project.Projection
    check: Check

    def to_dict(self) -> dict[str, Any]:
        return {**self.projection.to_dict(), "check": self.check.to_dict()}


def error(projected: float | None, measured: float | None) -> float | None:
    """projected / measured - 1; None where either is missing or nothing was measured."""
    if projected is None or measured is None or not measured > 0:
        return None
    return float(projected) / float(measured) - 1.0


def check(projection, measured: Analysis) -> Check:
    """Compare ``projection`` (from ``whatif.project.project``) with ``measured``, the
    analysis of a trace of the same workload recorded on the target GPU."""
    source = projection.source
    same_workload(source, measured, projection.target)
    central = projection.projected["central"]
    phases, categories, kernels = {}, {}, {}
    for phase in source.phases:
        m = measured.phases[phase]
        steps = int(m.get("steps") or 0)
        p_busy = projection.phases[phase]["projected_gpu_busy_ms"]
        m_busy = m.get("gpu_busy_ms")
        rng = projection.phases[phase].get("projected_gpu_busy_ms_range")

        def per(v, steps: int = steps) -> float | None:
            return None if v is None or not steps else float(v) / steps

        phases[phase] = {
            "steps": steps,
            "projected_ms": per(p_busy),
            "measured_ms": per(m_busy),
            "error": error(p_busy, m_busy),
            "range_ms": [per(rng[0]), per(rng[1])] if rng else None,
            "inside": bool(rng[0] <= m_busy <= rng[1]) if rng and m_busy is not None else None,
            "projected_total_ms": p_busy,
            "measured_total_ms": m_busy,
            "source_ms": per(source.phases[phase].get("gpu_busy_ms")),
        }
        categories[phase] = _categories(
            (central.phases.get(phase) or {}).get("by_category") or {}, m.get("by_category") or {}
        )
        kernels[phase] = _kernels(central.work, measured.work, phase)
    busy = "GPU busy" if measured.device.get("type") == "gpu" else "busy"  # a CPU run's ops keep it busy
    return Check(
        measured.source.get("path"),
        measured.device.get("name"),
        phases,
        categories,
        kernels,
        _headline(phases, categories, measured.device.get("name") or projection.target.name, busy),
    )


def _categories(projected: dict[str, float], measured: dict[str, float]) -> dict[str, dict[str, Any]]:
    out = {}
    for c in sorted(set(projected) | set(measured), key=lambda c: -(measured.get(c) or projected.get(c) or 0)):
        p, m = float(projected.get(c) or 0.0), float(measured.get(c) or 0.0)
        out[c] = {"projected_ms": p, "measured_ms": m, "error": error(p, m)}
    return out


def _kernels(projected: pd.DataFrame, measured: pd.DataFrame, phase: str) -> list[dict[str, Any]]:
    """Kernel names both runs ran in ``phase``: time in the phase, top ``TOP_KERNELS`` by measured time."""

    def by_name(work: pd.DataFrame) -> pd.Series:
        w = work[work["phase"].astype(str) == phase]
        return w.groupby(w["name"].astype(str), observed=True)["dur_ns"].sum() / 1e6

    p, m = by_name(projected), by_name(measured)
    common = m[m.index.isin(p.index)].sort_values(ascending=False, kind="stable").head(TOP_KERNELS)
    return [
        {"name": str(n), "projected_ms": float(p[n]), "measured_ms": float(v), "error": error(float(p[n]), float(v))}
        for n, v in common.items()
    ]


def _headline(phases: dict, categories: dict, where: str, busy: str) -> str:
    parts = []
    for phase, f in phases.items():
        if f["error"] is None:
            continue
        parts.append(
            f"{phase}: projected {busy} {f['projected_ms']:.3g} ms per step vs {f['measured_ms']:.3g} ms "
            f"measured on {where} ({f['error']:+.0%})"
        )
    if not parts:
        return f"nothing to check: no phase has measured {busy} time on {where}"
    # The category whose projected kernel time is furthest (in ms) from the measured one.
    worst = max(
        (
            (abs(c["projected_ms"] - c["measured_ms"]), phase, name, c)
            for phase, cats in categories.items()
            for name, c in cats.items()
        ),
        default=None,
        key=lambda t: t[0],
    )
    text = "; ".join(parts)
    if worst and worst[0] > 0:
        _, phase, name, c = worst
        off = c["projected_ms"] - c["measured_ms"]
        err = f", {c['error']:+.0%}" if c["error"] is not None else ""
        text += (
            f"; most of the error is {name} in {phase} ({c['projected_ms']:.3g} ms projected vs "
            f"{c['measured_ms']:.3g} ms measured: {off:+.3g} ms{err})"
        )
    return text


# --- same workload? ------------------------------------------------------------------


def same_workload(source: Analysis, measured: Analysis, target) -> None:
    """Raise ``TracekitError`` naming the first figure that shows the two traces are not the
    same work on the GPU projected onto."""
    src_gpu, tgt_gpu = source.device.get("spec_key"), measured.device.get("spec_key")
    if tgt_gpu is not None and tgt_gpu == src_gpu:
        raise TracekitError(
            f"cannot check the projection: the target trace was measured on "
            f"{measured.device.get('spec') or tgt_gpu}, the device the source was measured on, not on "
            f"{target.name}"
        )
    if tgt_gpu is not None and tgt_gpu != target.key:
        raise TracekitError(
            f"cannot check the projection: it is onto {target.name} ({target.key}), but the target "
            f"trace was measured on {measured.device.get('spec') or tgt_gpu} ({tgt_gpu})"
        )
    a, b = (source.model or {}).get("name"), (measured.model or {}).get("name")
    if a and b and a != b:
        raise TracekitError(
            f"cannot check the projection: the traces are of different models ({a} in the source, "
            f"{b} in the target trace)"
        )
    pa, pb = list(source.phases), list(measured.phases)
    if set(pa) != set(pb):
        raise TracekitError(
            f"cannot check the projection: the traces hold different phases "
            f"({', '.join(pa) or 'none'} in the source, {', '.join(pb) or 'none'} in the target trace)"
        )
    # Steps by their own phase (a mixed step is its own kind here, whatever its split).
    kinds = list(dict.fromkeys(_step_phases(source) + _step_phases(measured)))
    for phase in kinds:
        sa, sb = _phase_steps(source, phase), _phase_steps(measured, phase)
        if len(sa) != len(sb):
            raise TracekitError(
                f"cannot check the projection: the traces hold different numbers of {phase} steps "
                f"({len(sa)} in the source, {len(sb)} in the target trace); profile the same steps"
            )
        for col, tol in (("batch", 0.0), ("tokens", TOKEN_TOLERANCE)):
            if col not in sa.columns or col not in sb.columns:
                continue
            x, y = sa[col].to_numpy(dtype=float), sb[col].to_numpy(dtype=float)
            both = ~np.isnan(x) & ~np.isnan(y)
            bad = np.flatnonzero(both & (np.abs(x - y) > tol * np.maximum(np.abs(x), np.abs(y))))
            if len(bad):
                i = int(bad[0])
                what = "batch (requests)" if col == "batch" else "tokens"
                raise TracekitError(
                    f"cannot check the projection: {phase} step {i + 1} of {len(sa)} has different "
                    f"{what} ({x[i]:g} in the source, {y[i]:g} in the target trace)"
                )


def _step_phases(a: Analysis) -> list[str]:
    return [str(p) for p in pd.unique(a.steps["phase"].astype(str))] if len(a.steps) else []


def _phase_steps(a: Analysis, phase: str) -> pd.DataFrame:
    s = a.steps
    return s[s["phase"].astype(str) == phase].reset_index(drop=True) if len(s) else s
