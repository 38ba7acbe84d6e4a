"""Mixed (chunked-prefill) steps: how much of a step's GPU time is prefill and how much decode.

A continuous-batching engine runs the prefill chunk of some requests and one decode
token of others in one step. When the step's annotation states both sides' batch
(vLLM's ``execute_..._context_C(...)_generation_G(...)``), its kernel time is divided:

- attention kernels by each side's query-key pairs (causal attention's work, and for
  decode the keys it reads: ``BatchSide.attention_pairs``);
- all other work (GEMMs, MoE, norms, activations, KV-cache writes, sampling) by each
  side's tokens: token-proportional work.

When a side's pairs are unknown, attention is divided by tokens too. The step's GPU
busy time is then divided in the proportion of the divided kernel time, so the two
parts add up to the step's busy time. Mixed steps without both sides' counts (an
SGLang ``MIXED`` step states no split) stay whole, in a ``mixed`` phase.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy
from tracekit.frameworks import DECODE, MIXED, PREFILL, BatchSide

BASIS = "attention kernels by each side's query-key pairs, all other work by each side's tokens"
MODEL_BASIS = ("the model's work of each side: attention and linear attention by each side's FLOPs and bytes, "
               "token-proportional work by tokens")


@dataclass
class Split:
    # Per unit of work: the share of its time that is prefill (NaN: not a split mixed step).
    prefill_share: np.ndarray
    # Per step: the share of its GPU time that is prefill (NaN: not split).
    step_prefill_fraction: np.ndarray
    # Per step index: the JSON ``split`` value of a split mixed step.
    by_step: dict[int, dict]


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
        by_step[i] = {**entry, PREFILL: {**entry[PREFILL], "gpu_ms": busy_ms * p},
                      DECODE: {**entry[DECODE], "gpu_ms": busy_ms * (1 - p)}}
    return Split(split.prefill_share, fraction, by_step)


def split_mixed(steps: pd.DataFrame, work: pd.DataFrame, category: np.ndarray,
                model_share: np.ndarray | None = None) -> Split:
    """``model_share``: per unit, the prefill share the model gives (NaN where it gives none),
    used instead of the token and pair proportions where present."""
    share = np.full(len(work), np.nan)
    fraction = np.full(len(steps), np.nan)
    by_step: dict[int, dict] = {}
    if not len(steps):
        return Split(share, fraction, by_step)
    step_of = work["step"].to_numpy()
    dur = work["dur_ns"].to_numpy().astype(np.float64)
    attention = category == taxonomy.ATTENTION
    for i in np.flatnonzero((steps["phase"] == MIXED).to_numpy()).tolist():
        pre, dec = steps.at[i, "prefill_side"], steps.at[i, "decode_side"]
        shares = _shares(pre, dec)
        if shares is None:
            continue
        by_tokens, by_pairs = shares
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
            "basis": (MODEL_BASIS if by_model else BASIS if by_pairs != by_tokens or not attention[rows].any()
                      else "all work by each side's tokens (query-key pairs not stated)"),
        }
    return Split(share, fraction, by_step)


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


def _shares(pre: BatchSide | None, dec: BatchSide | None) -> tuple[float, float] | None:
    """(prefill share by tokens, prefill share of attention), or None when not stated."""
    if pre is None or dec is None or not pre.tokens or not dec.tokens:
        return None
    by_tokens = pre.tokens / (pre.tokens + dec.tokens)
    pp, pd_ = pre.attention_pairs(), dec.attention_pairs()
    by_pairs = pp / (pp + pd_) if pp is not None and pd_ is not None and pp + pd_ > 0 else by_tokens
    return by_tokens, by_pairs


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
