"""Mixed (chunked-prefill) steps: how much of a step's GPU time is prefill and how much decode.

A continuous-batching engine runs the prefill chunk of some requests and one decode
token of others in one step. When the step's annotation states both sides' batch
(vLLM's ``execute_..._context_C(...)_generation_G(...)``), its kernel time is divided:

- attention kernels by each side's query-key pairs (causal attention's work, and for
  decode the keys it reads: ``BatchSide.attention_pairs``);
- all other work (GEMMs, MoE, norms, activations, KV-cache writes, sampling) by each
  side's tokens: token-proportional work.

A side that states no sum of q² (vLLM's ``execute_new_N_cached_M``) has its pairs estimated at
requests of one length (``model_costs.estimated_pairs``, as the model's pricing does; the
split's ``basis`` says so); where a side's pairs stay unknown (a decode side whose keys nothing
gives), attention is divided by tokens too. The step's GPU busy time is then divided in the
proportion of the divided kernel time, so the two parts add up to the step's busy time. Mixed
steps without both sides' counts (an SGLang ``MIXED`` step states no split) stay whole, in a
``mixed`` phase.

That split keeps the books; it does not say what the decode requests cost. Every weight
byte is read once for the step whether or not the decode tokens ride along, so a split
step also gets its decode side's *marginal* cost (``decode_marginal``, from each kernel's
work with one side alone: ``pricing.attribution.Attribution.alone``, from a GEMM's recorded
shapes or the model): what the decode tokens add to each kernel (their rows of each GEMM,
their attention and KV reads, their KV writes) and what they share (the weight reads the
prefill chunk pays anyway), with the time that adds. A step whose prefill chunk's own work
holds most of its kernel time is bound by that chunk, and its decode side is a passenger:
it gets no bound, MFU or MBU of its own (``figures``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy
from tracekit.analysis.pricing.model_costs import estimated_pairs
from tracekit.frameworks import DECODE, MIXED, PREFILL, BatchSide

BASIS = "attention kernels by each side's query-key pairs, all other work by each side's tokens"
# A step is bound by its prefill chunk when the chunk's own work (the time its tokens add,
# ``decode_marginal``'s ``prefill_own_ms``) is at least this share of the step's kernel time:
# most of it, the meaning of "bound by".
PASSENGER_SHARE = 0.5
PASSENGER_REASON = (
    "the decode side of a step bound by its prefill chunk is a passenger: the step's kernels "
    "run for the chunk, and its decode tokens' cost is their marginal cost (decode_marginal), "
    "not a share of kernels whose bound the chunk sets"
)
NO_MODEL_REASON = (
    "what the decode tokens add needs each kernel's work without them: the model gives it "
    "(--model), and so do the recorded shapes of a GEMM whose rows are the step's tokens; this "
    "step has neither"
)
# What the decode tokens add, by the model component of the kernels they add it to.
_PARTS = {
    "linear": "gemm_rows",
    "lm_head": "gemm_rows",
    "experts": "gemm_rows",
    "attention": "attention",
    "linear_attention": "attention",
    "kv_write": "kv_writes",
    "communication": "communication",
}
_OTHER = "other"
MODEL_BASIS = (
    "the model's work of each side: attention and linear attention by each side's FLOPs and bytes, "
    "token-proportional work by tokens"
)


@dataclass
class Split:
    # Per unit of work: the share of its time that is prefill (NaN: not a split mixed step).
    prefill_share: np.ndarray
    # Per step: the share of its GPU time that is prefill (NaN: not split).
    step_prefill_fraction: np.ndarray
    # Per step index: the JSON ``split`` value of a split mixed step.
    by_step: dict[int, dict]
    # Per unit: its decode tokens' marginal figures (``Marginal``); None where nothing gives any
    # kernel's work with one side alone (no model, no recorded GEMM shapes).
    marginal: Marginal | None = None
    # Per step: its decode side is a passenger of its prefill chunk.
    passenger: np.ndarray | None = None


@dataclass
class Marginal:
    """Per unit of a split mixed step (NaN elsewhere, or where its work with one side alone is
    not known): what its step's decode tokens add (FLOPs, bytes), the bytes the two sides share
    (either alone would move them), and the shares of the unit's time that the decode tokens
    and the prefill tokens add (``_marginal``); and its part (``_PARTS``)."""

    flops: np.ndarray
    bytes: np.ndarray
    shared_bytes: np.ndarray
    decode_time: np.ndarray
    prefill_time: np.ndarray
    part: np.ndarray


def retimed(split: Split, step_of: np.ndarray, dur_ns: np.ndarray, busy_ns: np.ndarray) -> Split:
    """``split`` with its units' times changed (a projection onto another GPU): each unit keeps
    its prefill share, each split step's prefill fraction is taken again over the new
    durations, and its parts are the new busy time (``busy_ns`` per step) in that proportion,
    so that they still sum to the step's busy time."""
    fraction = split.step_prefill_fraction.copy()
    by_step: dict[int, dict] = {}
    dur = dur_ns.astype(np.float64)
    for i, entry in split.by_step.items():
        rows = step_of == i
        total = dur[rows].sum()
        p = float((dur[rows] * split.prefill_share[rows]).sum() / total) if total > 0 else float(fraction[i])
        fraction[i] = p
        busy_ms = float(busy_ns[i]) / 1e6
        by_step[i] = {
            **entry,
            PREFILL: {**entry[PREFILL], "gpu_ms": busy_ms * p},
            DECODE: {**entry[DECODE], "gpu_ms": busy_ms * (1 - p)},
        }
        if split.marginal is not None:
            # Each unit keeps the shares of its time the sides add (the measured GPU's roofs).
            by_step[i]["decode_marginal"] = _marginal_entry(split.marginal, rows, dur)
    passenger = None if split.passenger is None else _passengers(by_step, len(split.passenger))
    return Split(split.prefill_share, fraction, by_step, split.marginal, passenger)


def split_mixed(
    steps: pd.DataFrame,
    work: pd.DataFrame,
    category: np.ndarray,
    model_share: np.ndarray | None = None,
    alone: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Split:
    """``model_share``: per unit, the prefill share the model gives (NaN where it gives none),
    used instead of the token and pair proportions where present. ``alone``:
    ``Attribution.alone``, from which each split step's ``decode_marginal`` comes (``work``
    priced, with its roofline columns)."""
    share = np.full(len(work), np.nan)
    fraction = np.full(len(steps), np.nan)
    by_step: dict[int, dict] = {}
    if not len(steps):
        return Split(share, fraction, by_step)
    marginal = _marginal(work, alone) if alone else None
    step_of = work["step"].to_numpy()
    dur = work["dur_ns"].to_numpy().astype(np.float64)
    attention = category == taxonomy.ATTENTION
    for i in np.flatnonzero((steps["phase"] == MIXED).to_numpy()).tolist():
        pre, dec = steps.at[i, "prefill_side"], steps.at[i, "decode_side"]
        shares = _shares(pre, dec)
        if shares is None:
            continue
        by_tokens, by_pairs, guessed = shares
        rows = step_of == i
        share[rows] = np.where(attention[rows], by_pairs, by_tokens)
        by_model = False
        if model_share is not None:
            known = rows & ~np.isnan(model_share)
            share[known] = model_share[known]
            by_model = bool(known.any())
        total = dur[rows].sum()
        p = float((dur[rows] * share[rows]).sum() / total) if total > 0 else by_tokens
        fraction[i] = p
        busy_ms = steps.at[i, "gpu_busy_ns"] / 1e6
        by_step[i] = {
            PREFILL: {**_counts(pre), "gpu_ms": busy_ms * p},
            DECODE: {**_counts(dec), "gpu_ms": busy_ms * (1 - p)},
            "basis": (
                MODEL_BASIS
                if by_model
                else (f"{BASIS}; {guessed}" if guessed else BASIS)
                if by_pairs != by_tokens or not attention[rows].any()
                else "all work by each side's tokens (query-key pairs not stated)"
            ),
            "decode_marginal": (
                _marginal_entry(marginal, rows, dur)
                if marginal is not None
                else {**_NO_MARGINAL, "reason": NO_MODEL_REASON}
            ),
        }
    return Split(share, fraction, by_step, marginal, _passengers(by_step, len(steps)))


_NO_MARGINAL: dict[str, Any] = {
    "flops": None,
    "bytes": None,
    "ms": None,
    "share": None,
    "shared_bytes": None,
    "shared_ms": None,
    "prefill_own_ms": None,
    "by_part": {},
    "covered_share": None,
    "passenger": None,
}


def _marginal(work: pd.DataFrame, alone: dict[str, tuple[np.ndarray, np.ndarray]]) -> Marginal:
    """Per unit, what its step's decode tokens add and the two sides share (``Marginal``),
    from each side's cost alone (``Attribution.alone``) and the unit's roofline.

    A side alone costs a fraction of the unit's FLOPs and of its bytes; the other side adds
    the rest. The time it adds is the unit's time times the share of the unit's roof time
    (max(FLOPs / peak FLOP/s, bytes / peak bandwidth)) that its work adds: at the kernel's
    own achieved fraction of its roof."""
    flops, nbytes = work["flops"].to_numpy(dtype=float), work["bytes"].to_numpy(dtype=float)
    peak_f, peak_bw = work["peak_flops"].to_numpy(dtype=float), work["peak_bw"].to_numpy(dtype=float)
    # A side alone never costs more than the step; a fraction past 1 (or below 0) could only
    # come from a pooled component less what recorded shapes priced, clipped at zero there.
    pre_f, pre_b = (np.clip(a, 0.0, 1.0) for a in alone[PREFILL])
    dec_f, dec_b = (np.clip(a, 0.0, 1.0) for a in alone[DECODE])
    with np.errstate(divide="ignore", invalid="ignore"):
        roof = np.maximum(flops / peak_f, nbytes / peak_bw)
        ok = np.isfinite(roof) & (roof > 0) & np.isfinite(pre_f + pre_b + dec_f + dec_b)
        without_decode = np.maximum(flops * pre_f / peak_f, nbytes * pre_b / peak_bw)
        without_prefill = np.maximum(flops * dec_f / peak_f, nbytes * dec_b / peak_bw)
        decode_time = np.where(ok, 1.0 - without_decode / roof, np.nan)
        prefill_time = np.where(ok, 1.0 - without_prefill / roof, np.nan)
    comp = work["component"].to_numpy(dtype=object) if "component" in work else np.full(len(work), None)
    part = np.array([_PARTS.get(c, _OTHER) if isinstance(c, str) else _OTHER for c in comp], dtype=object)
    return Marginal(
        np.where(ok, flops * (1.0 - pre_f), np.nan),
        np.where(ok, nbytes * (1.0 - pre_b), np.nan),
        np.where(ok, nbytes * (pre_b + dec_b - 1.0), np.nan),
        decode_time,
        prefill_time,
        part,
    )


def _marginal_entry(m: Marginal, rows: np.ndarray, dur: np.ndarray) -> dict:
    """A split step's ``decode_marginal``: its decode tokens' added FLOPs, bytes and time
    (ms; ``share`` of its kernel time), by part; the bytes and time both sides share (the
    weight reads the prefill chunk pays anyway); the time the prefill tokens add
    (``prefill_own_ms``); the share of its kernel time whose work with one side alone is known
    (``covered_share``); and whether its
    decode side is a passenger (None: the uncovered time could decide either way)."""
    d = dur[rows]
    kernel = float(d.sum())
    ok = np.isfinite(m.decode_time[rows])
    if not ok.any() or kernel <= 0:
        return {
            **_NO_MARGINAL,
            "covered_share": 0.0 if kernel > 0 else None,
            "reason": "neither the model nor recorded GEMM shapes give any of this step's kernels its work "
            "without the decode tokens",
        }
    dec_ns = d * np.where(ok, m.decode_time[rows], 0.0)
    pre_ns = d * np.where(ok, m.prefill_time[rows], 0.0)
    uncovered = float(d[~ok].sum())
    own = float(pre_ns.sum())
    passenger = (
        True if own >= PASSENGER_SHARE * kernel else False if own + uncovered < PASSENGER_SHARE * kernel else None
    )
    f, b = np.nan_to_num(m.flops[rows]), np.nan_to_num(m.bytes[rows])
    part = m.part[rows]
    by_part = {
        p: {
            "flops": float(f[part == p].sum()),
            "bytes": float(b[part == p].sum()),
            "ms": float(dec_ns[part == p].sum()) / 1e6,
        }
        for p in sorted(set(part[ok].tolist()))
    }
    return {
        "flops": float(f.sum()),
        "bytes": float(b.sum()),
        "ms": float(dec_ns.sum()) / 1e6,
        "share": float(dec_ns.sum()) / kernel,
        "shared_bytes": float(np.nan_to_num(m.shared_bytes[rows]).sum()),
        "shared_ms": float((d[ok] - dec_ns[ok] - pre_ns[ok]).sum()) / 1e6,
        "prefill_own_ms": own / 1e6,
        "by_part": by_part,
        "covered_share": float(d[ok].sum()) / kernel,
        "passenger": passenger,
        "reason": None
        if passenger is not None
        else (
            f"the kernels whose work without the decode tokens is not known ({uncovered / kernel:.0%} of the "
            "step's kernel time) could make the prefill chunk's own work more or less than half the step"
        ),
    }


def _passengers(by_step: dict[int, dict], n: int) -> np.ndarray:
    """Per step: its decode side is a passenger (``decode_marginal``)."""
    out = np.zeros(n, dtype=bool)
    for i, entry in by_step.items():
        out[i] = bool((entry.get("decode_marginal") or {}).get("passenger"))
    return out


def passenger_units(split: Split, step_of: np.ndarray) -> np.ndarray:
    """Per unit of work (``step_of``: its step, -1 outside any): its step's decode side is a passenger."""
    if split.passenger is None or not split.passenger.any():
        return np.zeros(len(step_of), dtype=bool)
    return split.passenger[np.maximum(step_of, 0)] & (step_of >= 0)


def passenger_view(steps: pd.DataFrame, decode_weight: np.ndarray) -> dict | None:
    """The decode phase's passengers (``steps`` with their ``split`` entries and durations;
    ``decode_weight``: each step's decode share): how many steps, their decode parts' time,
    and their decode tokens' marginal FLOPs, bytes and time; None when there are none."""
    if "split" not in steps or not len(steps):
        return None
    dur = steps["duration_ns"].to_numpy(dtype=float)
    rows = [
        (i, sp["decode_marginal"])
        for i, sp in enumerate(steps["split"])
        if isinstance(sp, dict) and (sp.get("decode_marginal") or {}).get("passenger")
    ]
    if not rows:
        return None
    return {
        "mixed_steps": len(rows),
        "time_ms": float(sum(dur[i] * decode_weight[i] for i, _ in rows)) / 1e6,
        **{f"marginal_{k}": float(sum(m[k] for _, m in rows)) for k in ("flops", "bytes", "ms")},
        "shared_bytes": float(sum(m["shared_bytes"] for _, m in rows)),
    }


def split_fraction(split: dict) -> float:
    """A split step's prefill fraction again from its ``split`` entry (a merge of windows has
    the entries, not the fractions): its prefill side's share of the step's GPU time, or, in
    a step of no GPU time, of its tokens (as ``split_mixed`` takes it then)."""
    pre, dec = split.get(PREFILL) or {}, split.get(DECODE) or {}
    total = (pre.get("gpu_ms") or 0.0) + (dec.get("gpu_ms") or 0.0)
    if total > 0:
        return (pre.get("gpu_ms") or 0.0) / total
    tokens = (pre.get("tokens") or 0) + (dec.get("tokens") or 0)
    return (pre.get("tokens") or 0) / tokens if tokens else 0.5


def _shares(pre: BatchSide | None, dec: BatchSide | None) -> tuple[float, float, str | None] | None:
    """(prefill share by tokens, prefill share of attention, what of the latter is an estimate),
    or None when not stated. A side that states no Σq² (vLLM's ``execute_new_N_cached_M``: its
    prefill side's tokens are the step's less its decode side's) has its pairs estimated as the
    model's pricing estimates them (``model_costs.estimated_pairs``: requests of one length)."""
    if pre is None or dec is None or not pre.tokens or not dec.tokens:
        return None
    by_tokens = pre.tokens / (pre.tokens + dec.tokens)
    pp, pd_ = pre.attention_pairs(), dec.attention_pairs()
    guessed = [
        what
        for what, side, have in (("prefill", pre, pp), ("decode", dec, pd_))
        if have is None and estimated_pairs(side, what == "prefill") is not None
    ]
    pp = pp if pp is not None else estimated_pairs(pre, True)
    pd_ = pd_ if pd_ is not None else estimated_pairs(dec, False)
    if pp is None or pd_ is None or pp + pd_ <= 0:
        return by_tokens, by_tokens, None
    return (
        by_tokens,
        pp / (pp + pd_),
        (
            f"the {' and '.join(guessed)} side's query-key pairs are an estimate (no Σq² stated): requests of one "
            "length, Σq² = (Σq)²/n, its lower bound; Σqk = Σq·Σk/n where the keys are stated but not Σqk, and no "
            "cached prefix where the keys are not stated"
            if guessed
            else None
        ),
    )


def _counts(side: BatchSide) -> dict:
    return {"requests": side.requests, "tokens": side.tokens, "kv_tokens": side.kv_tokens}


def phase_weights(phase: np.ndarray, prefill_share: np.ndarray, which: str) -> np.ndarray:
    """Weight of each unit of work in phase ``which``: 1 for its own phase, the split share
    for work of split mixed steps, 0 otherwise; ``mixed`` keeps only unsplit mixed work."""
    split = ~np.isnan(prefill_share)
    if which == PREFILL:
        return np.where(phase == PREFILL, 1.0, np.where(split, prefill_share, 0.0))
    if which == DECODE:
        return np.where(phase == DECODE, 1.0, np.where(split, 1.0 - prefill_share, 0.0))
    if which == MIXED:
        return ((phase == MIXED) & ~split).astype(np.float64)
    return (phase == which).astype(np.float64)
