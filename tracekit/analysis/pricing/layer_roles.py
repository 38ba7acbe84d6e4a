"""A model-priced step's pooled work carried by the kernel that does each part (issue 47), not
shared out by duration:

- attention: the k-th forward attention kernel of a step is the k-th softmax-attention layer
  of the model (full or sliding-window, ``ModelSpec.layers`` from the config's ``layer_types``
  / ``sliding_window``) and carries that layer's work at its own window and the step's keys
  (``mc.attention_layer``): on gpt-oss a 128-token sliding layer of a decode step reads 128
  keys a request where a full one reads the whole context, and the average of the two fits
  neither. The split-KV combine stages get no FLOPs and a duration share of the bytes;
- routed experts: of each MoE layer's two expert GEMMs, in launch order, the first is its
  gate-up GEMM and the second its down GEMM (``kernel_roles.expert_gemm_roles``), each priced
  as its own share of the layer (``mc.moe_roles``: 2*T*k*H*2I vs 2*T*k*I*H for a gated MLP);
- routing: the router's softmax/top-k and token sort (``gating``) apart from the weighted
  combine of the top-k outputs (``combine``, ``kernel_roles.moe_role``).

Where the kernels cannot be matched so (their count fits no layer count, or part of the step is
priced from shapes), the duration share stays and the kernel's note says so. The split
redistributes the step's component: the kernels' sum is the model's figure for the step.

Also here: the attention geometry of one layer for ops priced in a step's context
(``attention_per_layer``: the layers' average; ``attention_of_layer``: one layer's own).
"""

from __future__ import annotations

import numpy as np

from tracekit.analysis.pricing import kernel_roles
from tracekit.models import costs as mc
from tracekit.models.config import LINEAR, MOE, ModelSpec

DURATION_SHARE = (
    "duration share of the step's {c} work: its {n} kernels do not match the model's {layers} {what} one by one"
)
EXPERT_NOTE = "{role} GEMM of MoE layer {i}: {formula} FLOPs at T={t:g} tokens, k={k}"
_FORMULA = {mc.GATE_UP: "2*T*k*H*{g}I/tp", mc.DOWN: "2*T*k*I/tp*H"}
ATTENTION_NOTE = "attention layer {i} ({kind}{window}): {pairs:g} query-key pairs over {keys:g} keys read"
POOLED_SHARE = "duration share of the step's {c} work among its {n} kernels"
COMBINE_NOTE = (
    "split-KV combine stage of the step's attention: no share of its FLOPs; bytes: a duration share "
    "of the step's attention bytes (what it touches is not in the trace)"
)


def softmax_layers(model: ModelSpec) -> list:
    """The model's softmax-attention layers (full, sliding-window, MLA), in order."""
    return [layer for layer in model.layers if layer.attention != LINEAR]


def attention_per_layer(model: ModelSpec | None, sides: dict[str, mc.Side]) -> tuple[float | None, float | None, str]:
    """(query-key pairs, keys read, note) of one softmax-attention layer in a step: the sides
    summed; with a model, averaged over its full and sliding-window layers."""
    pairs = keys = 0.0
    kinds = [(None, 1)]
    if model is not None:
        layers = softmax_layers(model)
        windows = sorted({layer.window for layer in layers}, key=lambda w: (w is None, w or 0))
        kinds = [(w, sum(1 for layer in layers if layer.window == w)) for w in windows] or kinds
    n = sum(c for _, c in kinds)
    for side in sides.values():
        for window, count in kinds:
            geo = mc.attention_geometry(side, window)
            if geo is None:
                return None, None, ""
            pairs += geo[0] * count / n
            keys += geo[1] * count / n
    windows = [w for w, _ in kinds if w]
    note = "" if len(kinds) == 1 else f" (averaged over the model's {n} layers, sliding windows {windows})"
    return pairs, keys, note


def attention_of_layer(
    model: ModelSpec, sides: dict[str, mc.Side], index: int
) -> tuple[float | None, float | None, str]:
    """(query-key pairs, keys read, note) of the ``index``-th softmax-attention layer in a step,
    at its own window: the sides summed."""
    layer = softmax_layers(model)[index]
    pairs = keys = 0.0
    for side in sides.values():
        geo = mc.attention_geometry(side, layer.window)
        if geo is None:
            return None, None, ""
        pairs += geo[0]
        keys += geo[1]
    window = f", window {layer.window}" if layer.window else ""
    return pairs, keys, f" (layer {index} of the model's attention layers: {layer.attention}{window})"


def _merged(sides: dict[str, mc.Side]) -> mc.Side:
    """The step's sides as one, as ``model_costs.combined`` prices its experts (weights read once)."""
    s = list(sides.values())
    return mc.Side(sum(x.requests for x in s), sum(x.tokens for x in s), None, None, sum(x.logit_tokens for x in s))


def _by_duration(d: np.ndarray) -> np.ndarray:
    return d / d.sum() if d.sum() > 0 else np.full(len(d), 1.0 / len(d))


def pooled_roles(
    model: ModelSpec,
    tp: int,
    c: str,
    sides: dict[str, mc.Side],
    mine: np.ndarray,
    start: np.ndarray,
    dur: np.ndarray,
    names: list[str],
    categories: list[str],
    f_total: float,
    b_total: float,
    act_bytes: float,
    kv_bytes: float,
    flops: np.ndarray,
    nbytes: np.ndarray,
    note: np.ndarray,
) -> bool:
    """Price the step's kernels ``mine`` of pooled component ``c`` (``attention``, ``experts``,
    ``routing``) by what each does (module doc), writing ``flops``, ``nbytes`` and ``note`` in
    place; ``names`` and ``categories`` are those of ``mine``'s kernels, row for row. Returns
    False, with the duration share's note, where they cannot be matched; True for a component
    this does not split."""
    order = np.argsort(start[mine], kind="stable")
    rows = mine[order]
    names = [names[i] for i in order.tolist()]
    categories = [categories[i] for i in order.tolist()]
    if c == "attention":
        return _attention(
            model, tp, sides, rows, dur, names, categories, f_total, b_total, act_bytes, kv_bytes, flops, nbytes, note
        )
    if c in ("experts", "routing"):
        return _moe(model, tp, c, sides, rows, dur, names, categories, f_total, b_total, act_bytes, flops, nbytes, note)
    if c in ("linear_attention", "communication") and len(rows) > 1:
        note[rows] = POOLED_SHARE.format(c=c.replace("_", " "), n=len(rows))
    return True


def _moe(model, tp, c, sides, rows, dur, names, categories, f_total, b_total, act_bytes, flops, nbytes, note) -> bool:
    n_moe = model.count(mlp=MOE)
    side = _merged(sides)
    per = mc.moe_roles(model, side, tp=tp, act_bytes=act_bytes)
    if not per or not n_moe:
        return True
    if c == "experts":
        roles = kernel_roles.expert_gemm_roles(len(rows), n_moe)
        if roles is None and len(rows) == n_moe:  # one fused kernel a layer: the layer's whole experts work
            flops[rows], nbytes[rows] = f_total / n_moe, b_total / n_moe
            note[rows] = [
                f"both expert GEMMs of MoE layer {j} in one kernel: the layer's routed-expert work"
                for j in range(n_moe)
            ]
            return True
        if roles is None:
            note[rows] = DURATION_SHARE.format(
                c="routed-expert", n=len(rows), layers=n_moe, what="MoE layers' gate-up and down GEMMs"
            )
            return False
        whole = [per[mc.GATE_UP][j] + per[mc.DOWN][j] for j in (0, 1)]
        g = "2" if model.gated_mlp else ""
        for j, (row, role) in enumerate(zip(rows.tolist(), roles)):
            cost = per[role]
            flops[row] = f_total * cost[0] / whole[0] / n_moe if whole[0] > 0 else 0.0
            nbytes[row] = b_total * cost[1] / whole[1] / n_moe if whole[1] > 0 else 0.0
            note[row] = EXPERT_NOTE.format(
                role="gate-up" if role == mc.GATE_UP else "down",
                i=j // 2,
                formula=_FORMULA[role].format(g=g),
                t=side.tokens,
                k=model.top_k,
            )
        return True
    role_of = np.array([kernel_roles.moe_role(n, cat) or mc.GATING for n, cat in zip(names, categories)], dtype=object)
    held = [r for r in mc.ROUTING_ROLES if (role_of == r).any()]
    missing = [r for r in mc.ROUTING_ROLES if r not in held]
    whole = [sum(per[r][j] for r in held) for j in (0, 1)]
    for r in held:
        sel = rows[role_of == r]
        w = _by_duration(dur[sel])
        flops[sel] = f_total * per[r][0] / whole[0] * w if whole[0] > 0 else 0.0
        nbytes[sel] = b_total * per[r][1] / whole[1] * w if whole[1] > 0 else 0.0
        what = "router softmax/top-k and token sort" if r == mc.GATING else "weighted combine of the top-k outputs"
        text = f"{what} of the step's MoE layers: a duration share of that work among its {len(sel)} kernels"
        if missing:
            text += kernel_roles.MISSING_ROLES.format(roles=" and ".join(missing))
        note[sel] = text
    return True


def _attention(
    model, tp, sides, rows, dur, names, categories, f_total, b_total, act_bytes, kv_bytes, flops, nbytes, note
) -> bool:
    layers = softmax_layers(model)
    n = len(layers)
    combine = np.array(
        [kernel_roles.aux_role(a, "kernel", cat) == kernel_roles.SPLIT_REDUCE for a, cat in zip(names, categories)],
        dtype=bool,
    )
    fwd = np.flatnonzero(~combine)
    counts: dict[str, int] = {}
    for i in fwd.tolist():
        counts[names[i]] = counts.get(names[i], 0) + 1
    fits = n > 0 and len(fwd) and all(k % n == 0 and k // n <= 4 for k in counts.values())
    per_layer = []
    for layer in layers if fits else ():
        got = [
            mc.attention_layer(model, s, layer.attention, layer.window, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes)
            for s in sides.values()
        ]
        costs = [g for g in got if g is not None]
        if len(costs) < len(got):
            fits = False
            break
        per_layer.append(tuple(sum(g[j] for g in costs) for j in range(4)))
    if not fits:
        note[rows] = DURATION_SHARE.format(c="attention", n=len(rows), layers=n, what="attention layers")
        return False
    # Each name's occurrences in launch order: r launches a layer are its layer's (a mixed step's
    # prefill and decode kernels, or one kernel launched twice a layer).
    layer_of = np.zeros(len(rows), dtype=np.int64)
    seen: dict[str, int] = {}
    for i in fwd.tolist():
        j = seen.get(names[i], 0)
        seen[names[i]] = j + 1
        layer_of[i] = j // (counts[names[i]] // n)
    f_all = sum(p[0] for p in per_layer)
    b_all = sum(p[1] for p in per_layer)
    d_all = float(dur[rows].sum())
    aux = rows[combine]
    aux_b = b_total * dur[aux] / d_all if d_all > 0 else np.full(len(aux), b_total / max(len(rows), 1))
    flops[aux], nbytes[aux] = 0.0, aux_b
    note[aux] = COMBINE_NOTE
    left = b_total - float(aux_b.sum())
    for k, (f, b, pairs, keys) in enumerate(per_layer):
        sel = fwd[layer_of[fwd] == k]
        w = _by_duration(dur[rows[sel]])
        flops[rows[sel]] = f_total * f / f_all * w if f_all > 0 else 0.0
        nbytes[rows[sel]] = left * b / b_all * w if b_all > 0 else 0.0
        layer = layers[k]
        text = ATTENTION_NOTE.format(
            i=k, kind=layer.attention, window=f", window {layer.window}" if layer.window else "", pairs=pairs, keys=keys
        )
        if len(sel) > 1:
            text += f"; a duration share of the layer among its {len(sel)} kernels"
        note[rows[sel]] = text
    return True
