"""Which model layer a dense GEMM kernel computes, from its launch grid, and its cost as that layer.

Takes the step's GEMM kernels, their launch grids (``launch_grids``) and the model's named
linear layers per rank; ``grid_shapes`` turns a grid and the kernel's named tile into the
output widths N it fits at M = the step's tokens (or its logit tokens, for the LM head), and
the kernel before a GEMM tells apart layers of one width (attention before o_proj, the
activation before down_proj). Gives, for each GEMM a single layer fits, 2*M*N*K FLOPs and
weights + activations bytes, and the note naming the layer (``price_layer_gemms``);
``model_costs`` shares what is left among the GEMMs nothing identifies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import grid_shapes


def launch_grids(work: pd.DataFrame) -> np.ndarray | None:
    """(grid x, y, z, block x, y, z) per unit, or None when the work table carries no grids."""
    cols = [f"{g}_{a}" for g in ("grid", "block") for a in "xyz"]
    if not all(c in work for c in cols):
        return None
    return np.stack([work[c].to_numpy().astype(np.int64) for c in cols], axis=1)


# The component of the kernel before a GEMM that tells which of two layers of one width it is:
# after attention the output projection, after the activation the MLP's down projection.
_AFTER = {
    "attention": ("o_proj", "linear_attn_out"),
    "linear_attention": ("o_proj", "linear_attn_out"),
    "activation": ("down_proj", "shared_down_proj"),
    "experts": ("down_proj", "shared_down_proj"),
    "routing": ("down_proj", "shared_down_proj"),
}


def price_layer_gemms(
    model,
    mine,
    rows,
    comp,
    start,
    grids,
    name_uniques,
    name_codes,
    layers,
    tokens,
    logit_tokens,
    act_bytes,
    flops,
    nbytes,
    note,
    priced_as: tuple[int, int] | None = None,
) -> np.ndarray:
    """Price the GEMM kernels of ``mine`` whose grid identifies their layer (the model's layer of
    the width N the grid gives at M = the step's tokens) as that layer: 2*M*N*K FLOPs, weights +
    activations bytes. Returns which of ``mine`` were priced. ``priced_as``: (tokens, logit
    tokens) to price the matched layers at instead of the step's, which the grid was launched
    for (one side of a mixed step alone, ``model_costs.ModelCosts.alone``)."""
    matched = np.zeros(len(mine), dtype=bool)
    if tokens <= 0:
        return matched
    widths = tuple(sorted({n for _, _, _, n in layers}))
    lm = [x for x in layers if x[0] == "lm_head"]
    by_start = rows[np.argsort(start[rows], kind="stable")]
    position = {int(r): i for i, r in enumerate(by_start.tolist())}
    for j, r in enumerate(mine.tolist()):
        name = name_uniques[name_codes[r]]
        g = grids[r]
        grid, block = (int(g[0]), int(g[1]), int(g[2])), (int(g[3]), int(g[4]), int(g[5]))
        m, shape = tokens, grid_shapes.derive(name, grid, block, m=tokens, n_candidates=widths)
        if (shape is None or shape.n_match is None) and logit_tokens and logit_tokens != tokens and lm:
            # The LM head computes only the logit tokens (one per request).
            m, shape = logit_tokens, grid_shapes.derive(name, grid, block, m=logit_tokens, n_candidates=(lm[0][3],))
        if shape is None or not shape.n_fits:
            continue
        cands = lm if m != tokens else [x for x in layers if x[3] in shape.n_fits]
        if len({(x[2], x[3]) for x in cands}) > 1:
            cands = _by_neighbour(cands, by_start, position[r], comp, model.hidden)
        if len({(x[2], x[3]) for x in cands}) != 1:
            continue
        layer, cls, k, n = cands[0]
        logits = layer == "lm_head" and logit_tokens
        mm = logit_tokens if logits else m
        if priced_as is not None:
            mm = priced_as[1] if logits or m != tokens else priced_as[0]
        flops[r] = 2.0 * mm * n * k
        nbytes[r] = n * k * model.weight(cls).bytes_per_param + mm * (k + n) * act_bytes
        how = "the step's logit tokens" if layer == "lm_head" else "the step's tokens"
        note[r] = (
            f"{layer}: N={n} matched from the grid {list(grid)} and tile {shape.tile.n}x{shape.tile.m} "
            f"({shape.tile.family}), K={k} from the model, M={mm} ({how}); 2*M*N*K"
        )
        matched[j] = True
    return matched


def _by_neighbour(cands, by_start, at, comp, hidden):
    """Of the layers a GEMM's grid fits (one width but different K, or several widths a split-K
    grid allows), the ones the kernel before it points to."""
    for i in range(at - 1, -1, -1):
        c = comp[by_start[i]]
        if c in _AFTER:
            return [x for x in cands if x[0] in _AFTER[c]]
        if c in ("norm", "rope", "qk_norm", "embedding", "quantize"):
            return [x for x in cands if x[2] == hidden]  # reads the residual stream
    return cands
