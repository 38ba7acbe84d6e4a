"""One side of a mixed step alone: what each of its units would cost were only its prefill, or
only its decode, side in the step (``ModelCosts.alone``).

A mixed (chunked-prefill) step's decode tokens ride on the prefill chunk's weight reads: what
they add to the step is the step's cost less the prefill side's alone (``steps.mixed``'s
marginal cost). The units are priced again by the model's own rules (``model_costs.price``:
layer GEMMs by their grids, matched at the tokens the kernels were launched for; pooled
components by duration; per-launch kernels by tokens; experts by those the side's tokens
touch), and a pooled component priced from recorded shapes takes each side's share of the
component's work in the step, the weights read once for both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import model_costs as pricing
from tracekit.frameworks import DECODE, MIXED, PREFILL
from tracekit.models import costs as mc
from tracekit.models.config import ModelSpec


def alone(
    model: ModelSpec,
    tp: int,
    steps: pd.DataFrame,
    work: pd.DataFrame,
    category: np.ndarray,
    source: str,
    known: tuple[np.ndarray, np.ndarray] | None,
    sides: list[dict[str, mc.Side]],
    costs: pricing.ModelCosts,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per side: (FLOPs, bytes) of each unit of the mixed steps stating both sides, were that side
    alone in the step, as fractions of the unit's cost in ``costs`` (NaN elsewhere); {} when no
    step states both."""
    mixed = [i for i, sd in enumerate(sides) if PREFILL in sd and DECODE in sd and steps.at[i, "phase"] == MIXED]
    if not mixed:
        return {}
    out = _repriced(model, tp, steps, work, category, source, known, sides, mixed, costs.flops, costs.bytes)
    if known is not None:
        _of_known(
            model,
            tp,
            sides,
            mixed,
            work["step"].to_numpy(),
            costs.component,
            known,
            out,
            costs.act_bytes,
            costs.kv_bytes,
        )
    return out


def _repriced(
    model, tp, steps, work, category, source, known, sides, mixed: list[int], flops: np.ndarray, nbytes: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The units of the ``mixed`` steps priced again with one side of each step only, by the same
    rules (layer GEMMs by their grid, pooled components by duration, per-launch kernels by tokens,
    experts by those its tokens touch), over the step's cost."""
    step_of = work["step"].to_numpy()
    rows = np.flatnonzero(np.isin(step_of, mixed))
    sub = work.iloc[rows]
    sub_known = None if known is None else (known[0][rows], known[1][rows])
    chosen = set(mixed)
    launched = {
        i: (
            int(round(sum(s.tokens for s in sides[i].values()))),
            int(round(sum(s.logit_tokens for s in sides[i].values()))),
        )
        for i in mixed
    }
    out = {}
    for side in (PREFILL, DECODE):
        only = [{side: sd[side]} if i in chosen else {} for i, sd in enumerate(sides)]
        got = pricing.price(
            model, tp, steps, sub, category[rows], source, known=sub_known, sides=only, launched_for=launched
        )
        f, b = np.full(len(work), np.nan), np.full(len(work), np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            # A unit of no FLOPs (a KV-cache write) or bytes has none alone either.
            f[rows] = np.where(flops[rows] > 0, got.flops / flops[rows], np.where(flops[rows] == 0, 0.0, np.nan))
            b[rows] = np.where(nbytes[rows] > 0, got.bytes / nbytes[rows], np.where(nbytes[rows] == 0, 0.0, np.nan))
        out[side] = (f, b)
    return out


def _of_known(model, tp, sides, mixed: list[int], step_of, comp, known, alone, act_bytes, kv_bytes) -> None:
    """The units of a pooled component priced from recorded shapes, which the model does not price
    one by one: each side's share of the component's work in the step (``model_costs.combined``:
    the weights read once for both), where nothing more exact is known."""
    shaped = ~np.isnan(known[0])
    for i in mixed:
        rows = np.flatnonzero((step_of == i) & shaped)
        pooled = set(comp[rows].tolist()) & set(mc.POOLED)
        if not pooled:
            continue
        whole = pricing.combined(model, tp, sides[i], act_bytes, kv_bytes)
        for side, (f, b) in alone.items():
            part = mc.step_costs(
                model, sides[i][side], tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype
            )
            for c in pooled:
                w, p = whole.get(c), part.get(c)
                if not isinstance(w, mc.Work) or not isinstance(p, mc.Work):
                    continue
                mine = rows[comp[rows] == c]
                f[mine] = np.where(np.isnan(f[mine]), p.flops / w.flops if w.flops > 0 else 0.0, f[mine])
                b[mine] = np.where(np.isnan(b[mine]), p.bytes / w.bytes if w.bytes > 0 else 0.0, b[mine])
