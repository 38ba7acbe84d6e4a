"""Whether a trace fits the model: its steps' attention kernels counted as layers against the
model's layer counts (``layer_check``), and the sentence that withholds the model's costs when
they do not fit (``withheld_reason``).

Takes the model, the work table with each unit's model component and the steps; gives None
when the layers fit, else a sentence of what does not. Attention kernels are sorted by name
into per-layer forward kernels, split-KV combine stages and per-step setup
(``attention_layer_count``) before they are counted.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.models.config import ModelSpec


def withheld_reason(model: ModelSpec, misfit: str) -> str:
    """The sentence that stands for every figure the model would have priced, when the
    trace contradicts it (``layer_check``)."""
    return (
        f"withheld: the trace does not fit {model.name} ({misfit}); pass the model that ran, or "
        "--model-force to price by this one anyway"
    )


# Attention kernels that are not one per layer (``layer_check``):
# - the second stage of split-KV attention, which merges the partial results of the first:
#   flash-decoding / FlashAttention ``flash_fwd_splitkv_combine``, vLLM ``paged_attention_v2``
#   + ``..._reduce_kernel`` (and ROCm's ``paged_attention_ll4mi_reduce``), vLLM's unified
#   attention ``reduce_segments``, FlashInfer ``merge_state(s)``, Triton ``..._stage2``;
_COMBINE = re.compile(r"combine|reduce|merge_?(attn_?)?states?|mergestate|stage_?2", re.I)
# - per-step setup (metadata, plans, split counts), launched once or twice per step whatever the
#   layer count: by name, or by a count no larger than SETUP_MAX in a model of many layers.
_SETUP = re.compile(
    r"metadata|plan(?![a-z])|prepare|num_?splits|scheduler|indptr|page_?table|block_?table|"
    r"init_|setup",
    re.I,
)
SETUP_MAX = 2
# Forward kernels per layer a step may hold: a capture trace's warmup + capture of one graph,
# prefill and decode kernels of a mixed step, per-window-kind kernels of one layer.
PER_LAYER_MAX = 4


def attention_layer_count(counts: dict[str, int], layers: int) -> tuple[int, int, int]:
    """(forward, combine, setup) kernels among one step's attention kernel ``counts`` (by
    name): forward kernels are one per layer (or a small multiple), combine kernels the
    second stage of split-KV attention, setup kernels launched a fixed few times per step."""
    forward = combine = setup = 0
    # The function's own name decides, not its template arguments (CUTLASS FMHA kernels carry
    # a ``PersistentTileScheduler`` argument).
    base = {n: _function_name(n) for n in counts}
    named_forward = any(not _COMBINE.search(b) and not _SETUP.search(b) for b in base.values())
    for name, c in counts.items():
        if _SETUP.search(base[name]) or (c <= SETUP_MAX and layers > 2 * SETUP_MAX and len(counts) > 1):
            setup += c
        elif named_forward and _COMBINE.search(base[name]):
            combine += c
        else:
            forward += c
    return forward, combine, setup


def _function_name(name: str) -> str:
    """A kernel's function name: its demangled name before template and call arguments."""
    name = name[5:] if name.startswith("void ") else name
    cut = [i for i in (name.find("<"), name.find("(")) if i > 0]
    return name[: min(cut)] if cut else name


def _fits(n: int, layers: int) -> bool:
    return n > 0 and n % layers == 0 and n // layers <= PER_LAYER_MAX


def layer_check(model: ModelSpec, work: pd.DataFrame, comp: np.ndarray, steps: pd.DataFrame) -> str | None:
    """A sentence when the trace's steps run attention layers in a number that does not fit
    the model's (a sign --model names another model); None when they fit.

    Layers, not kernels, are counted: per step, the attention kernels by name less the
    second stages of split-KV attention and per-step setup kernels (``attention_layer_count``);
    the layers fit when that count is the model's layer count times a small integer
    (``PER_LAYER_MAX``: capture duplicates, mixed steps), or, when no name shows a combine
    stage, when all of the step's attention kernels are such a multiple plus at most ``SETUP_MAX``."""
    step_of = work["step"].to_numpy()
    names = work["name"].astype(str).to_numpy() if len(work) else np.array([], dtype=object)
    layers = {
        "attention": model.n_layers - model.count(attention="linear"),
        "linear_attention": model.count(attention="linear"),
    }
    problems = []
    for c, want in layers.items():
        sel = (comp == c) & (step_of >= 0)
        if not sel.any() or not want:
            if sel.any() and not want:
                problems.append(f"the trace runs {c.replace('_', ' ')} kernels but {model.name} has no such layers")
            continue
        label = c.replace("_", " ")
        per_step = pd.DataFrame({"step": step_of[sel], "name": names[sel]}).groupby(["step", "name"]).size()
        seen = []
        for _, counts in per_step.groupby(level="step"):
            by_name = {str(k[1]): int(v) for k, v in counts.items()}
            fwd, comb, setup = attention_layer_count(by_name, want)
            total = fwd + comb + setup
            # Without a combine stage the names show, a second stage may still hide under another
            # name: then the step's whole count, less a constant few, must be a multiple.
            fits = _fits(fwd, want) or (not comb and any(_fits(total - extra, want) for extra in range(SETUP_MAX + 1)))
            seen.append((fits, total, fwd, comb, setup))
        bad = [x for x in seen if not x[0]]
        # Most steps decide: a stray step (cut at the trace's edge) does not.
        if len(bad) * 2 > len(seen):
            _, total, fwd, comb, setup = sorted(bad, key=lambda x: x[1])[len(bad) // 2]
            parts = (
                [f"{fwd} per-layer"]
                + ([f"{comb} split-KV combine"] if comb else [])
                + ([f"{setup} per-step setup"] if setup else [])
            )
            problems.append(
                f"its steps run {total} {label} kernels each ({', '.join(parts)}), which does not fit "
                f"{model.name}'s {want} {label} layers"
            )
    return "; ".join(problems) or None
