"""FLOPs and bytes of one step of a model, per layer component, per tensor-parallel rank.

Pure arithmetic from a ``ModelSpec`` and the step's batch (``Side``: requests, query
tokens, keys attended, query-key pairs, logit tokens). The conventions of
``tracekit.analysis.pricing.op_costs`` hold: a multiply-add is 2 FLOPs; bytes are the minimal
traffic (each weight read once per step, each activation read and written once); a
kernel's time over the roofline of these figures says how close it came.

Components priced as a whole per step (their kernels share them by duration):

- ``linear``: every dense GEMM of the decoder (QKV/O projections, MLA and linear-attention
  projections, dense MLPs, shared experts, routers): 2 * tokens * parameters FLOPs; the
  parameters at their stored precision plus the activations in and out.
- ``lm_head``: vocab x hidden over the logit tokens only.
- ``experts``: routed experts, each token visiting top-k; the weights of the distinct
  experts the step's tokens touch (``expected_experts``, uniform routing) are read once.
- ``routing``: router softmax/top-k, token sorting, and the weighted combine of expert outputs.
- ``attention``: full and sliding-window attention from the step's query-key pairs and keys
  read (the KV cache at its dtype); MLA in its latent space for decode-like sides.
- ``linear_attention``: gated DeltaNet's recurrent state (read and written once per request
  per layer, at ``linear_state_bytes``), its short convolution, and q/k/v traffic.
- ``communication``: two all-reduces per layer (attention and MLP outputs) plus the
  vocabulary-parallel embedding's, and the logits' all-gather: per rank a ring moves
  2 (N-1)/N of each all-reduced tensor.

Per-launch components (``per_token``): one launch of a norm, rotary, activation, KV-cache
write, quantisation, embedding or sampling kernel processes every token of the step, so
each launch is priced by the step's tokens times its per-token size. This survives kernel
fusion, which pooled pricing would not (a norm fused with a quantisation moves the bytes of
both in one launch).

TP splits attention heads, projection columns, MLP and expert widths by N (heads fewer than
N are replicated); norms, embeddings' activations and routers are replicated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracekit.models.config import DENSE, FULL, LINEAR, MLA, MOE, SLIDING, ModelSpec, expected_experts

MATRIX, VECTOR = "matrix", "vector"
POOLED = ("linear", "lm_head", "experts", "routing", "attention", "linear_attention", "communication")
PER_LAUNCH = ("norm", "qk_norm", "rope", "activation", "kv_write", "quantize", "embedding", "sampling")
# Sides whose mean query length is at most this are priced as decode (MLA's absorbed form).
DECODE_LIKE = 8
# FLOPs per element of per-launch kernels (see ``tracekit.analysis.pricing.op_costs`` for the convention).
NORM_FLOPS, ROPE_FLOPS, ACT_FLOPS, QUANT_FLOPS = 5, 3, 5, 2
# Gated DeltaNet, per token per value head: decay, k.S, the rank-1 update and S.q, each
# dk x dv multiply-adds: about 8 dk dv FLOPs; the chunked prefill form adds the intra-chunk
# attention over CHUNK tokens.
DELTA_FLOPS, CHUNK = 8, 64


@dataclass(frozen=True)
class Side:
    """One phase's part of a step, as the cost model needs it."""

    requests: float
    tokens: float
    kv_tokens: float | None  # keys attended, summed over requests; None: not known
    pairs: float | None  # causal query-key pairs; None: not known
    logit_tokens: float  # tokens whose logits are computed


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float
    dtype: str
    unit: str
    note: str


@dataclass(frozen=True)
class Missing:
    reason: str


def _rank(n: int, tp: int) -> int:
    """Heads or columns one rank holds: split by tp, at least one (replicated when fewer)."""
    return max(1, math.ceil(n / tp))


# --- parameters --------------------------------------------------------------------------


def linear_matrices(m: ModelSpec, tp: int = 1) -> list[tuple[str, int, int, int]]:
    """(weight class, K, N per rank, count) of every dense GEMM of one forward."""
    h, d, dv = m.hidden, m.head_dim, m.v_head_dim
    hq, hkv = _rank(m.heads, tp), _rank(m.kv_heads, tp)
    out: list[tuple[str, int, int, int]] = []
    n_attn = m.count(attention=FULL) + m.count(attention=SLIDING)
    if n_attn:
        q = hq * d * (2 if m.attn_output_gate else 1)
        out += [("attention", h, q, n_attn), ("attention", h, 2 * hkv * d, n_attn), ("attention", hq * dv, h, n_attn)]
    n_mla = m.count(attention=MLA)
    if n_mla:
        qk = m.qk_nope_dim + m.qk_rope_dim
        if m.q_lora_rank:
            out += [("attention", h, m.q_lora_rank, n_mla), ("attention", m.q_lora_rank, hq * qk, n_mla)]
        else:
            out += [("attention", h, hq * qk, n_mla)]
        out += [
            ("attention", h, m.kv_lora_rank + m.qk_rope_dim, n_mla),
            ("attention", m.kv_lora_rank, hq * (m.qk_nope_dim + dv), n_mla),
            ("attention", hq * dv, h, n_mla),
        ]
    n_lin = m.count(attention=LINEAR)
    if n_lin:
        nk, nv = _rank(m.linear_key_heads, tp), _rank(m.linear_value_heads, tp)
        dk, dvl = m.linear_key_dim, m.linear_value_dim
        out += [
            ("linear_attention", h, 2 * nk * dk + 2 * nv * dvl, n_lin),  # q, k, v and the output gate z
            ("linear_attention", h, 2 * nv, n_lin),  # beta and the decay a
            ("linear_attention", nv * dvl, h, n_lin),
        ]
    n_dense = m.count(mlp=DENSE)
    if n_dense:
        inter = _rank(m.intermediate, tp)
        out += [("mlp", h, inter * (2 if m.gated_mlp else 1), n_dense), ("mlp", inter, h, n_dense)]
    n_moe = m.count(mlp=MOE)
    if n_moe:
        out += [("router", h, m.experts, n_moe)]
        if m.shared_intermediate:
            s = _rank(m.shared_intermediate, tp)
            out += [("shared_experts", h, 2 * s, n_moe), ("shared_experts", s, h, n_moe)]
    return out


def expert_parameters(m: ModelSpec, tp: int = 1) -> float:
    """Parameters of one routed expert on one rank (its width split by tp)."""
    return (3 if m.gated_mlp else 2) * m.hidden * m.expert_intermediate / tp


def parameter_counts(m: ModelSpec) -> dict[str, float]:
    out: dict[str, float] = {}
    for cls, k, n, count in linear_matrices(m):
        out[cls] = out.get(cls, 0.0) + k * n * count
    if m.experts:
        out["experts"] = expert_parameters(m) * m.experts * m.count(mlp=MOE)
    out["embedding"] = m.vocab * m.hidden
    if not m.tied_embeddings:
        out["lm_head"] = m.vocab * m.hidden
    return out


def parameters(m: ModelSpec) -> int:
    """Parameters of the decoder (embeddings and LM head included once each)."""
    return int(sum(parameter_counts(m).values()))


def weight_bytes(m: ModelSpec, tp: int = 1) -> float:
    """Bytes of the weights one rank holds, each class at its stored precision (split by tp)."""
    return sum(n * m.weight(cls).bytes_per_param for cls, n in parameter_counts(m).items()) / tp


def kv_bytes_per_token(m: ModelSpec, tp: int = 1, kv_bytes: float = 2.0) -> float:
    """KV-cache bytes one token adds on one rank: K and V of every full or sliding-window
    attention layer (sliding layers counted in full: an upper bound), MLA's latent and rope key;
    linear-attention layers keep a fixed state instead."""
    mha = m.count(attention=FULL) + m.count(attention=SLIDING)
    per = mha * _rank(m.kv_heads, tp) * (m.head_dim + m.v_head_dim) * kv_bytes
    return per + m.count(attention=MLA) * (m.kv_lora_rank + m.qk_rope_dim) * kv_bytes


# --- attention geometry ------------------------------------------------------------------


def _window_pairs(q: float, k: float, w: int) -> tuple[float, float]:
    """(pairs, keys read) of one request with q new tokens at the end of k keys, window w."""
    if q <= 0:
        return 0.0, 0.0
    lo = max(k - q + 1, 1.0)  # first query's position (1-based)
    # sum over positions p in [lo, k] of min(p, w)
    below_hi = min(k, w)
    pairs = 0.0
    if lo <= below_hi:
        pairs += (lo + below_hi) * (below_hi - lo + 1) / 2
    above = k - max(lo, w + 1) + 1
    if above > 0:
        pairs += above * w
    return pairs, min(k, q + w - 1)


def equal_length_pairs(requests: float, tokens: float) -> float:
    """Causal query-key pairs of a prefill of ``tokens`` over ``requests`` with no cached prefix,
    when the annotation does not say how the tokens split (SGLang's ``step[EXTEND bs= toks=]``):
    each request's q tokens score q(q+1)/2 pairs, so the side scores (Σq² + Σq)/2, and Σq² is at
    least (Σq)²/n (Cauchy-Schwarz), reached when the requests are of one length. A lower bound,
    as the KV read without a stated cache is (analysis.pricing.model_costs)."""
    return (tokens * tokens / requests + tokens) / 2


def attention_geometry(side: Side, window: int | None) -> tuple[float, float] | None:
    """(query-key pairs, keys read) of one layer for a side; None when the keys are unknown."""
    if side.tokens <= 0:
        return 0.0, 0.0
    keys = side.kv_tokens
    pairs = side.pairs
    if keys is None and pairs is not None and side.tokens > side.requests:
        keys = side.tokens  # a prefill without a stated cache: no cached prefix
    if keys is None or pairs is None:
        return None
    if window is None or side.requests <= 0:
        return pairs, keys
    q, k = side.tokens / side.requests, keys / side.requests
    if k <= window:
        return pairs, keys
    p, r = _window_pairs(q, k, window)
    return p * side.requests, r * side.requests


# --- the step ----------------------------------------------------------------------------


def step_costs(
    m: ModelSpec, side: Side, *, tp: int = 1, act_bytes: float = 2.0, kv_bytes: float = 2.0, act_dtype: str = "bf16"
) -> dict[str, Work | Missing]:
    """Pooled components of one side of a step on one rank: {component: Work or Missing}."""
    T, L = side.tokens, side.logit_tokens
    out: dict[str, Work | Missing] = {}
    # Dense GEMMs: the compute dtype of the FLOP-weighted majority of the weights.
    flops = nbytes = 0.0
    by_dtype: dict[str, float] = {}
    for cls, k, n, count in linear_matrices(m, tp):
        w = m.weight(cls)
        f = 2 * T * k * n * count
        flops += f
        nbytes += k * n * count * w.bytes_per_param + T * (k + n) * count * act_bytes
        by_dtype[w.compute] = by_dtype.get(w.compute, 0.0) + f + k * n * count
    if flops or nbytes:
        dtype = max(by_dtype, key=by_dtype.__getitem__) if by_dtype else act_dtype
        out["linear"] = Work(
            flops,
            nbytes,
            dtype,
            MATRIX,
            f"2*T*params over {len(linear_matrices(m, tp))} projection shapes, T={T:g}; weights at their "
            "stored precision + activations in and out",
        )
    vocab_rank = m.vocab / tp
    lm = m.weight("lm_head")
    out["lm_head"] = Work(
        2 * L * m.hidden * vocab_rank,
        vocab_rank * m.hidden * lm.bytes_per_param + L * (m.hidden + vocab_rank) * act_bytes,
        lm.compute,
        MATRIX,
        f"2*L*hidden*vocab/tp over L={L:g} logit tokens",
    )
    n_moe = m.count(mlp=MOE)
    if n_moe and m.experts:
        e = m.weight("experts")
        touched = expected_experts(m.experts, m.top_k, T)
        pe = expert_parameters(m, tp)
        out["experts"] = Work(
            2 * T * m.top_k * pe * n_moe,
            n_moe
            * (
                touched * pe * e.bytes_per_param
                + T * m.top_k * (2 * m.hidden + 3 * m.expert_intermediate / tp) * act_bytes
            ),
            e.compute,
            MATRIX,
            f"{n_moe} MoE layers: 2*T*k*expert params, T={T:g} k={m.top_k}; weights of {touched:.1f} of "
            f"{m.experts} experts touched (uniform routing)",
        )
        out["routing"] = Work(
            n_moe * (T * m.experts * 5 + 2 * T * m.top_k * m.hidden),
            n_moe
            * (T * m.experts * 4 + T * m.top_k * 8 * 2 + T * m.top_k * m.hidden * act_bytes + T * m.hidden * act_bytes),
            act_dtype,
            VECTOR,
            "router softmax/top-k over the experts, sort, weighted combine of top-k outputs",
        )
    out["attention"] = _attention(m, side, tp, act_bytes, kv_bytes, act_dtype)
    if m.count(attention=LINEAR):
        out["linear_attention"] = _linear_attention(m, side, tp, act_bytes, act_dtype)
    if tp > 1:
        ring = 2 * (tp - 1) / tp
        per_ar = T * m.hidden * act_bytes
        reduces = 2 * m.n_layers + 1
        gather = (tp - 1) / tp * L * m.vocab * act_bytes
        out["communication"] = Work(
            (tp - 1) / tp * T * m.hidden * reduces,
            ring * per_ar * reduces + gather,
            act_dtype,
            VECTOR,
            f"{reduces} all-reduces of T x hidden (ring: 2(N-1)/N per rank, N={tp}) + the logits' all-gather",
        )
    return out


def attention_layer(
    m: ModelSpec,
    side: Side,
    kind: str,
    window: int | None,
    *,
    tp: int = 1,
    act_bytes: float = 2.0,
    kv_bytes: float = 2.0,
) -> tuple[float, float, float, float] | None:
    """(FLOPs, bytes, pairs, keys) of one softmax-attention layer of ``kind`` (full, sliding or
    MLA) and ``window`` for a side: its own window, not the model's average (issue 47: a 128-token
    sliding layer of a decode step reads 128 keys a request, a full layer the whole context).
    None when the keys are unknown."""
    geo = attention_geometry(side, window)
    if geo is None:
        return None
    pairs, keys = geo
    hq, hkv = _rank(m.heads, tp), _rank(m.kv_heads, tp)
    if kind == MLA:
        latent = m.kv_lora_rank + m.qk_rope_dim
        if side.requests > 0 and side.tokens / side.requests <= DECODE_LIKE:
            flops = 2 * hq * pairs * (latent + m.kv_lora_rank)  # absorbed: in the latent space, one latent per key
        else:
            flops = 2 * hq * pairs * (m.head_dim + m.v_head_dim)
        nbytes = keys * latent * kv_bytes + side.tokens * hq * (m.head_dim + m.v_head_dim) * act_bytes
    else:
        flops = 2 * hq * pairs * (m.head_dim + m.v_head_dim)
        nbytes = (
            keys * hkv * (m.head_dim + m.v_head_dim) * kv_bytes
            + side.tokens * hq * (m.head_dim + m.v_head_dim) * act_bytes
        )
    return flops, nbytes, pairs, keys


# The kernel roles of a routed-expert layer (``moe_roles``): its two expert GEMMs, the router's
# softmax/top-k and token sort, and the weighted sum of each token's top-k outputs.
GATE_UP, DOWN, GATING, COMBINE = "gate_up", "down", "gating", "combine"
EXPERT_ROLES, ROUTING_ROLES = (GATE_UP, DOWN), (GATING, COMBINE)


def moe_roles(m: ModelSpec, side: Side, *, tp: int = 1, act_bytes: float = 2.0) -> dict[str, tuple[float, float]]:
    """(FLOPs, bytes) of a step's routed-expert and routing work, all MoE layers, by the kernel
    that does each part: ``gate_up`` (2*T*k*H*2I/tp for a gated MLP: twice ``down``'s
    2*T*k*I/tp*H), ``down``, ``gating`` (router softmax and top-k over E, token sort) and
    ``combine`` (the top-k outputs' weighted sum). {} for a model without routed experts.
    ``gate_up`` + ``down`` is ``step_costs``' ``experts`` and ``gating`` + ``combine`` its
    ``routing``, term by term: the touched experts' weights split by the matrices' sizes, the
    activations as ``step_costs`` counts them (x in and 2I out for the gate-up GEMM, I in and H
    out for the down GEMM)."""
    n_moe = m.count(mlp=MOE)
    if not n_moe or not m.experts:
        return {}
    T, k, h, e = side.tokens, m.top_k, m.hidden, m.experts
    inter = m.expert_intermediate / tp
    gate = 2 if m.gated_mlp else 1
    touched = expected_experts(e, k, T)
    bpp = m.weight("experts").bytes_per_param
    return {
        GATE_UP: (
            n_moe * 2 * T * k * h * gate * inter,
            n_moe * (touched * gate * h * inter * bpp + T * k * (h + 2 * inter) * act_bytes),
        ),
        DOWN: (n_moe * 2 * T * k * inter * h, n_moe * (touched * inter * h * bpp + T * k * (inter + h) * act_bytes)),
        GATING: (n_moe * T * e * 5, n_moe * (T * e * 4 + T * k * 8 * 2)),
        COMBINE: (n_moe * 2 * T * k * h, n_moe * (T * k * h * act_bytes + T * h * act_bytes)),
    }


def _attention(m: ModelSpec, side: Side, tp: int, act_bytes: float, kv_bytes: float, act_dtype: str) -> Work | Missing:
    flops = nbytes = 0.0
    notes = []
    for kind, window in {(layer.attention, layer.window) for layer in m.layers if layer.attention != LINEAR}:
        n = sum(1 for layer in m.layers if layer.attention == kind and layer.window == window)
        one = attention_layer(m, side, kind, window, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes)
        if one is None:
            return Missing(
                "the keys each request attends to are not in the step's annotation "
                "(vLLM's detailed execute_... form states them)"
            )
        f, b, pairs, keys = one
        flops += n * f
        nbytes += n * b
        notes.append(f"{n} {kind}{f' (window {window})' if window else ''} layers: {pairs:g} pairs, {keys:g} keys")
    if not notes:
        return Work(0.0, 0.0, act_dtype, MATRIX, "no softmax-attention layers")
    return Work(
        flops,
        nbytes,
        act_dtype,
        MATRIX,
        "2*Hq*pairs*(Dqk+Dv) per layer; bytes = keys read x Hkv x (Dqk+Dv) at the KV-cache dtype + "
        "queries and outputs; " + "; ".join(notes),
    )


def _linear_attention(m: ModelSpec, side: Side, tp: int, act_bytes: float, act_dtype: str) -> Work:
    n = m.count(attention=LINEAR)
    nk, nv = _rank(m.linear_key_heads, tp), _rank(m.linear_value_heads, tp)
    dk, dv = m.linear_key_dim, m.linear_value_dim
    T, R = side.tokens, side.requests
    chunked = R > 0 and T / R > 1
    per_token = DELTA_FLOPS * dk * dv + (2 * CHUNK * (dk + dv) if chunked else 0)
    channels = 2 * nk * dk + nv * dv
    flops = n * T * (nv * per_token + 2 * m.linear_conv_kernel * channels)
    state = R * nv * dk * dv * m.linear_state_bytes * 2  # read and write once per request
    conv_state = R * channels * (m.linear_conv_kernel - 1) * act_bytes * 2
    io = T * (channels + 2 * nv + nv * dv) * act_bytes * 2
    return Work(
        flops,
        n * (state + conv_state + io),
        "fp32",
        VECTOR,
        f"{n} gated-DeltaNet layers: recurrent state {nv}x{dk}x{dv} per request read and written, "
        f"~{DELTA_FLOPS}*dk*dv FLOPs per token and value head{' + chunked intra-chunk attention' if chunked else ''}",
    )


def per_token(
    m: ModelSpec,
    component: str,
    tp: int = 1,
    *,
    fused_add: bool = False,
    moe_layer: bool = False,
    act_bytes: float = 2.0,
    kv_bytes: float = 2.0,
    out_bytes: float | None = None,
) -> tuple[float, float] | None:
    """(FLOPs, bytes) per token of one launch of a per-launch kernel; None when not modelled.
    ``out_bytes``: element size of the output when the kernel quantises it (fused norm or
    activation + FP8/FP4 quantisation), else the activation size."""
    h = m.hidden
    out = act_bytes if out_bytes is None else out_bytes
    hq, hkv = _rank(m.heads, tp), _rank(m.kv_heads, tp)
    if component == "norm":
        return NORM_FLOPS * h, h * (act_bytes + out) + (2 * h * act_bytes if fused_add else 0)
    if component == "qk_norm":
        e: float = (hq + hkv) * m.head_dim
        return NORM_FLOPS * e, 2 * e * act_bytes
    if component == "rope":
        e = (hq + hkv) * m.head_dim * m.rotary_fraction
        return ROPE_FLOPS * e, 2 * e * act_bytes
    if component == "activation":
        width = m.top_k * m.expert_intermediate / tp if moe_layer else _rank(m.intermediate, tp)
        return ACT_FLOPS * width, width * (2 * act_bytes + out)
    if component == "kv_write":
        e = hkv * (m.head_dim + m.v_head_dim) if m.count(attention=MLA) == 0 else m.kv_lora_rank + m.qk_rope_dim
        return 0.0, e * (act_bytes + kv_bytes)
    if component == "quantize":
        return QUANT_FLOPS * h, h * (act_bytes + 1)
    if component == "embedding":
        return 0.0, 2 * h * act_bytes
    return None


def named_linears(m: ModelSpec, tp: int = 1) -> list[tuple[str, str, int, int]]:
    """(layer name, weight class, K, N per rank) of each distinct dense GEMM of a layer, as
    engines launch them: QKV and gate-up fused (and unfused, for engines that do not fuse), the
    router, shared experts, and the LM head (vocab-parallel). ``linear_matrices`` gives the sizes."""
    out: list[tuple[str, str, int, int]] = []
    groups: dict[str, list[tuple[int, int]]] = {}
    for cls, k, n, _ in linear_matrices(m, tp):
        groups.setdefault(cls, []).append((k, n))
    names = {
        "linear_attention": ("linear_attn_in", "linear_attn_ba", "linear_attn_out"),
        "mlp": ("gate_up_proj", "down_proj"),
        "router": ("router",),
        "shared_experts": ("shared_gate_up_proj", "shared_down_proj"),
    }
    for cls, shapes in groups.items():
        if cls == "attention" and m.count(attention=MLA) == 0:
            (h, q), (_, kv), (ko, o) = shapes[:3]
            out += [
                ("qkv_proj", cls, h, q + kv),
                ("q_proj", cls, h, q),
                ("kv_proj", cls, h, kv),
                ("o_proj", cls, ko, o),
            ]
            continue
        if cls == "attention":
            out += [
                (f"mla_proj_{i}" if i < len(shapes) - 1 else "o_proj", cls, k, n) for i, (k, n) in enumerate(shapes)
            ]
            continue
        label = names.get(cls, ())
        out += [(label[i] if i < len(label) else f"{cls}_{i}", cls, k, n) for i, (k, n) in enumerate(shapes)]
        if cls in ("mlp", "shared_experts") and m.gated_mlp:
            k, n = shapes[0]
            out.append((label[0].replace("gate_up", "up"), cls, k, n // 2))  # gate and up launched apart
    out.append(("lm_head", "lm_head", m.hidden, math.ceil(m.vocab / tp)))
    return out
