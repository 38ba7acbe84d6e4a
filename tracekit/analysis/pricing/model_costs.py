"""Costs from the model: each kernel's FLOPs and bytes from the architecture, the step's batch
and the tensor-parallel degree, for traces without recorded shapes (serving traces, graph
replays, engine custom ops).

For every step the model gives the work of each layer component (``tracekit.models.costs``);
the kernels carry it:

- a kernel's component comes from its taxonomy category and name (``kernel_names.component_of``): a GEMM
  is ``linear``, except the step's LM head (its last GEMM, of a name launched once in the
  step); MoE grouped GEMMs are ``experts``, the other MoE kernels ``routing``; ...
- a dense GEMM whose launch grid and named tile give its output width N
  (``tracekit.analysis.pricing.grid_shapes``) is matched to the model's layer of that width per rank
  (QKV, o_proj, gate-up, down, router, shared experts, LM head; o_proj and down, of one width,
  told apart by the kernel before it: attention or activation) and priced as that layer alone:
  2*M*N*K with M the step's tokens (the logit tokens for the LM head), bytes N*K weights at
  their stored precision plus M*(K+N) activations. Its ``note`` names the layer;
- pooled components (GEMMs nothing identifies, experts, routing, attention, linear attention,
  collectives) are shared among the step's kernels of that component in proportion to their
  durations (for GEMMs: what the identified ones leave, the note says so), except where each
  kernel's own part is known (``layer_roles``): attention kernels matched to the model's
  layers in launch order, each at its own window; a MoE layer's gate-up and down GEMMs; the
  routing's gating and combine kernels. A kernel left with a duration share says so in its note;
- per-launch components (norms, rotary, activations, KV-cache writes, quantisation,
  embedding, sampling) are priced launch by launch: each processes every token of the step;
- generic kernels (copies, fills, elementwise and reduction helpers) have no model cost: the
  model does not say what they move.

Precision: GEMM and attention kernels run at the dtype their names state (``e2m1``: FP4,
``e4m3``: FP8, ``bf16``; scale types ``ue4m3``/``ue8m0`` are not operands; a mixed-precision
kernel, 16-bit activations x FP4/FP8 weights such as ``bf16xmxfp4`` or ``w4a16``, at its
activations' 16-bit rate); otherwise at the model's stored precision's compute dtype. A
mixed-precision kernel agrees with any stored precision of its weights (quantised or 16-bit):
the precision check does not count it. The KV cache is FP8 when kernel names say so.
A step whose tokens the trace does not state gets no model cost, with the reason.

This module holds ``ModelCosts`` and the pricing (``price``, ``step_sides``, the pooled and
per-launch shares, the estimates' bounds). What a kernel name says (component, dtype, fused
add, quantised output, FP8 KV cache) lives in ``kernel_names``; matching a dense GEMM to its
layer by its grid in ``gemm_layers``; the check that the trace's attention layers fit the
model (``layer_check``, ``withheld_reason``) in ``model_fit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis.pricing.gemm_layers import launch_grids, price_layer_gemms
from tracekit.analysis.pricing.kernel_names import components, kv_cache_dtype, mixed_activation, name_dtype, name_flags
from tracekit.analysis.pricing.kernel_roles import moe_components

# attention_per_layer lived here: its callers still find it here.
from tracekit.analysis.pricing.layer_roles import attention_per_layer, pooled_roles  # noqa: F401
from tracekit.analysis.pricing.model_fit import layer_check
from tracekit.frameworks import DECODE, MIXED, PREFILL, BatchSide
from tracekit.models import costs as mc
from tracekit.models.config import ModelSpec, expected_experts

SOURCE_MODEL = "model"


@dataclass
class ModelCosts:
    """Per unit of work (aligned with the work table): the model's FLOPs, bytes, dtype, unit,
    component and reason, and what the run told about itself."""

    flops: np.ndarray
    bytes: np.ndarray
    dtype: np.ndarray
    unit: np.ndarray
    component: np.ndarray
    reason: np.ndarray
    # Per step: the prefill share of each unit of a mixed step by the model (NaN elsewhere).
    prefill_share: np.ndarray
    kv_dtype: str = "bf16"
    kv_how: str = ""
    notes: list[str] = field(default_factory=list)
    # Kernel dtypes that contradict the model's stored precision: {component: (kernel dtype, model dtype)}.
    dtype_conflicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    layer_check: str | None = None
    # Why the model's costs were not used (the trace contradicts the model; no --model-force).
    withheld: str | None = None
    # Per unit: how its model cost was found, where that is worth saying (the layer a GEMM's
    # grid matched, or that a duration share priced it); None elsewhere.
    note: np.ndarray | None = None
    # Per unit: what kind of figure its bytes are when they are not the minimal traffic of
    # stated work (``ESTIMATES``): routed experts' bytes rest on the expected distinct experts
    # (``model``), a prefill's KV read without a stated cache on no cached prefix (``lower``).
    estimate: np.ndarray | None = None
    # {component: the basis of its estimate, formula and numbers}, for the JSON's model view.
    estimates: dict[str, str] = field(default_factory=dict)
    # Per side of a mixed step that states both (prefill, decode): (FLOPs, bytes) of each of its
    # units were that side alone in the step, as fractions of the unit's model cost (NaN
    # elsewhere; ``mixed_alone.alone``). What the other side adds to the unit is the rest.
    alone: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # Bytes per activation and per KV-cache element the costs were priced at.
    act_bytes: float = 2.0
    kv_bytes: float = 2.0


# What a unit's bytes are, when not the minimal traffic of work the trace states: an upper
# bound (experts capped at the bandwidth roof), a lower bound (KV read assuming no cached
# prefix), or the model's expectation (distinct experts under uniform routing).
UPPER, LOWER, ESTIMATED = "upper", "lower", "model"
ESTIMATES = (UPPER, LOWER, ESTIMATED)


# The basis of attention FLOPs whose query-key pairs ``estimated_pairs`` gave for a side that
# states its keys (its KV read is then the stated keys': exact, and no ``ESTIMATES`` mark).
PAIRS_ESTIMATE_BASIS = (
    "estimate: a side states its keys but not the sum of q² that its causal attention's query-key pairs need; "
    "they are taken at requests of one length: Σq² = (Σq)²/n, its lower bound (Cauchy-Schwarz), and Σqk as "
    "stated or, where it is not, Σq·Σk/n (each request q = Σq/n tokens over k = Σk/n keys), so pairs = Σqk - "
    "(Σq² - Σq)/2: an upper bound where Σqk is stated, and with neither sum no bound (requests of uneven "
    "lengths move Σqk either way); the attention bytes, the stated keys' KV read, are not estimated"
)


def estimated_pairs(bs: BatchSide, prefill: bool) -> float | None:
    """Causal query-key pairs of a side of several query tokens per request whose Σq² its
    annotation does not state (``BatchSide.attention_pairs`` gives None), at requests of one
    length (issue 46): Σq² = (Σq)²/n, its least (Cauchy-Schwarz); with the keys stated, Σqk as
    stated or Σq·Σk/n (each request q = Σq/n over k = Σk/n), and pairs = Σqk - (Σq² - Σq)/2
    (``BatchSide.attention_pairs``); without the keys a prefill's requests are taken to have no
    cached prefix (k = q: ``mc.equal_length_pairs``, a lower bound) and a decode side's context is
    unknown. None where the side's pairs are known or cannot be estimated."""
    n, q, k = bs.requests, bs.tokens, bs.kv_tokens
    if not n or q is None or q <= n or bs.attention_pairs() is not None:
        return None
    if k is None:
        return mc.equal_length_pairs(n, q) if prefill else None
    qk = bs.sum_qk if bs.sum_qk is not None else q * k / n
    return float(qk - (q * q / n - q) / 2)


def _side(bs: BatchSide | None, engine: bool, phase: str) -> mc.Side | None:
    if bs is None or not bs.requests:
        return None
    # As stated: a decode side that leaves its tokens open runs several per request (speculative
    # verify, frameworks.sglang; segment fills it from counted tokens), not one each.
    tokens = bs.tokens
    if tokens is None:
        return None
    # Logits for one token per request: what engines, Hugging Face generate() and tracekit's
    # own runs (logits_to_keep=1) compute. A bare forward computing every position's logits
    # is priced from its shapes, which say so.
    logits = bs.requests
    pairs = bs.attention_pairs() if bs.attention_pairs() is not None else estimated_pairs(bs, phase == PREFILL)
    return mc.Side(
        float(bs.requests), float(tokens), None if bs.kv_tokens is None else float(bs.kv_tokens), pairs, float(logits)
    )


def _pairs_estimated(steps: pd.DataFrame, i: int) -> bool:
    """Whether step ``i``'s attention rests on ``estimated_pairs`` for a side that states its keys
    (a side without them is priced as a lower bound, ``_bytes_estimate``)."""
    for col, prefill in (("prefill_side", True), ("decode_side", False)):
        bs = steps.at[i, col] if col in steps else None
        if isinstance(bs, BatchSide) and bs.kv_tokens is not None and estimated_pairs(bs, prefill) is not None:
            return True
    return False


def step_sides(steps: pd.DataFrame, engine: bool) -> list[dict[str, mc.Side]]:
    """Per step: {phase: Side} of its prefill and decode work, from what its source stated."""
    out = []
    for r in steps.itertuples():
        sides: dict[str, mc.Side] = {}
        for phase, bs in ((PREFILL, r.prefill_side), (DECODE, r.decode_side)):
            s = _side(bs if isinstance(bs, BatchSide) else None, engine, phase)
            if s is not None:
                sides[phase] = s
            elif isinstance(bs, BatchSide) and bs.requests:
                sides = {}  # a side of requests whose tokens are unknown: the step is not known either
                break
        if not sides and r.phase in (PREFILL, DECODE) and not np.isnan(r.tokens):
            batch = r.batch if not np.isnan(r.batch) else None
            tokens = float(r.tokens)
            if r.phase == PREFILL and batch:
                bs = BatchSide(int(batch), int(tokens))  # priced as one length, no cached prefix (_side)
            else:
                bs = BatchSide(int(batch or tokens), int(tokens))
            s = _side(bs, engine, r.phase)
            if s is not None:
                sides[r.phase] = s
        out.append(sides)
    return out


def price(
    model: ModelSpec,
    tp: int,
    steps: pd.DataFrame,
    work: pd.DataFrame,
    category: np.ndarray,
    source: str,
    known: tuple[np.ndarray, np.ndarray] | None = None,
    sides: list[dict[str, mc.Side]] | None = None,
    launched_for: dict[int, tuple[int, int]] | None = None,
) -> ModelCosts:
    """The model's cost of every unit of work (NaN where it has none, with the reason).

    ``launched_for``: {step: (tokens, logit tokens)} its kernels were launched for, where
    ``sides`` prices only part of them (one side of a mixed step alone): the GEMMs' grids
    are matched to their layers at those.

    ``known``: (FLOPs, bytes) already priced from recorded shapes (NaN elsewhere). Those
    units keep their shape costs, and a pooled component's model work, less what its
    shape-priced kernels in the step already account for, is shared among the rest."""
    n = len(work)
    flops, nbytes = np.full(n, np.nan), np.full(n, np.nan)
    dtype, unit = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    comp = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    share = np.full(n, np.nan)
    col = work["name"] if hasattr(work["name"], "cat") else work["name"].astype("category")
    name_codes = col.cat.codes.to_numpy().astype(np.int64)
    name_uniques = [str(n) for n in col.cat.categories]
    step_of = work["step"].to_numpy()
    dur = work["dur_ns"].to_numpy().astype(float)
    start = work["start_ns"].to_numpy()
    out = ModelCosts(flops, nbytes, dtype, unit, comp, reason, share)
    out.note = note = np.full(n, None, dtype=object)
    grids = launch_grids(work)
    layers = mc.named_linears(model, tp)
    estimate = np.full(n, None, dtype=object)
    out.estimate = estimate
    # {(component, kind of estimate): its basis}, the first step's: one component can be
    # estimated two ways in a trace (a prefill's attention as a lower bound, a decode's as an
    # upper one), and each basis is said, none hiding the other.
    bases: dict[tuple[str, str], str] = {}
    act_bytes = mc_bytes(model.dtype)
    out.kv_dtype, kv, out.kv_how = kv_cache_dtype(name_uniques, model.dtype)
    kv_bytes = kv if kv is not None else act_bytes
    out.act_bytes, out.kv_bytes = act_bytes, kv_bytes
    comp[:] = moe_components(components(work, category), name_codes, name_uniques, np.asarray(category, dtype=object))
    flags = [name_flags(u) for u in name_uniques]
    fused = np.array([f[0] for f in flags], dtype=bool)[name_codes]
    out_size = np.array([f[1] for f in flags])[name_codes]
    hint = np.array([name_dtype(str(u)) for u in name_uniques], dtype=object)[name_codes]
    mixed = np.array([mixed_activation(str(u)) is not None for u in name_uniques], dtype=bool)[name_codes]
    reason[:] = "generic kernel (copy, fill, elementwise or reduction helper): the model does not say what it moves"
    reason[step_of < 0] = "issued outside any step: no step batch to price it with"
    if sides is None:
        sides = step_sides(steps, source in frameworks.ENGINE_SOURCES)
    order = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[order], np.arange(len(steps) + 1))
    kernel_dtypes: dict[str, set[str]] = {}
    for i, sd in enumerate(sides):
        rows = order[bounds[i] : bounds[i + 1]]
        if not len(rows):
            continue
        _lm_head(rows, comp, name_codes, start)
        if not sd:
            reason[rows[comp[rows] != None]] = (  # noqa: E711
                "the step's tokens are not in the trace (no engine annotation states its batch): the model "
                "cannot price it"
            )
            continue
        total = combined(model, tp, sd, act_bytes, kv_bytes)
        all_tokens = sum(s.tokens for s in sd.values())
        logit_tokens = sum(s.logit_tokens for s in sd.values())
        for c in set(comp[rows]) - {None}:
            mine = rows[comp[rows] == c]
            if c in mc.POOLED or c == "lm_head":
                work_c = total.get(c)
                if c == "linear" and "lm_head" not in set(comp[rows]):
                    work_c = _plus(work_c, total.get("lm_head"))  # the LM head ran among the other GEMMs
                if work_c is None:
                    reason[mine] = f"the model has no {c.replace('_', ' ')} work for this kernel ({model.name})"
                    continue
                unbounded_keys = False
                if isinstance(work_c, mc.Missing) and c == "attention":
                    priced = _decode_attention_unknown_keys(model, tp, sd, act_bytes, kv_bytes)
                    if priced is not None:
                        work_c, unbounded_keys = priced, True
                if isinstance(work_c, mc.Missing):
                    reason[mine] = work_c.reason
                    continue
                f_total, b_total = work_c.flops, work_c.bytes
                partial = False  # part of the component priced from shapes: what is left is not by role
                if known is not None:
                    done = ~np.isnan(known[0][mine])
                    partial = bool(done.any())
                    f_total = max(f_total - float(np.nansum(known[0][mine][done])), 0.0)
                    b_total = max(b_total - float(np.nansum(known[1][mine][done])), 0.0)
                    mine = mine[~done]
                    if not len(mine):
                        continue
                if c in ("linear", "lm_head") and grids is not None:
                    own = (int(round(all_tokens)), int(round(logit_tokens)))
                    grid_for = (launched_for or {}).get(i, own)
                    matched = price_layer_gemms(
                        model,
                        mine,
                        rows,
                        comp,
                        start,
                        grids,
                        name_uniques,
                        name_codes,
                        layers,
                        grid_for[0],
                        grid_for[1],
                        act_bytes,
                        flops,
                        nbytes,
                        note,
                        priced_as=own if grid_for != own else None,
                    )
                    if matched.any():
                        said = hint[mine[matched]]
                        dtype[mine[matched]] = np.where(said != None, said, work_c.dtype)  # noqa: E711
                        unit[mine[matched]], reason[mine[matched]] = work_c.unit, None
                        f_total = max(f_total - float(flops[mine[matched]].sum()), 0.0)
                        b_total = max(b_total - float(nbytes[mine[matched]].sum()), 0.0)
                        mine = mine[~matched]
                        if not len(mine):
                            continue
                    note[mine] = (
                        "duration share of the step's remaining dense-GEMM work: neither its grid nor "
                        "its name identifies the model layer it computes"
                    )
                d = dur[mine]
                w = d / d.sum() if d.sum() > 0 else np.full(len(mine), 1.0 / len(mine))
                flops[mine], nbytes[mine] = f_total * w, b_total * w
                if not partial and not unbounded_keys:  # each kernel its own part, where they can be told apart
                    pooled_roles(
                        model,
                        tp,
                        c,
                        sd,
                        mine,
                        start,
                        dur,
                        [name_uniques[k] for k in name_codes[mine].tolist()],
                        category[mine].tolist(),
                        f_total,
                        b_total,
                        act_bytes,
                        kv_bytes,
                        flops,
                        nbytes,
                        note,
                    )
                unit[mine] = work_c.unit
                if work_c.unit == mc.MATRIX:
                    said = hint[mine]
                    dtype[mine] = np.where(said != None, said, work_c.dtype)  # noqa: E711
                    if c in ("linear", "experts"):
                        # A mixed-precision kernel (bf16 x MXFP4) fits quantised and 16-bit
                        # weights alike: it says nothing against the stored precision.
                        plain = [d for d, m in zip(said.tolist(), mixed[mine].tolist()) if not m]
                        kernel_dtypes.setdefault(c, set()).update(set(plain) - {None})
                else:
                    dtype[mine] = work_c.dtype
                reason[mine] = None
                kind = _bytes_estimate(c, sd, steps.at[i, "prefill_side"] if "prefill_side" in steps else None)
                if unbounded_keys:
                    kind = UPPER
                    bases.setdefault((c, UPPER), UNKNOWN_KEYS_BASIS)
                if kind is not None:
                    estimate[mine] = kind
                    if not unbounded_keys:
                        bases.setdefault((c, kind), _estimate_basis(model, tp, c, sd))
                if c == "attention" and _pairs_estimated(steps, i):
                    bases.setdefault((c, "pairs"), PAIRS_ESTIMATE_BASIS)
            else:
                _per_launch(
                    model,
                    tp,
                    c,
                    mine,
                    fused,
                    out_size,
                    all_tokens,
                    logit_tokens,
                    flops,
                    nbytes,
                    dtype,
                    unit,
                    reason,
                    act_bytes,
                    kv_bytes,
                )
        if steps.at[i, "phase"] == MIXED and PREFILL in sd and DECODE in sd:
            _mixed_share(model, tp, sd, rows, comp, share, act_bytes, kv_bytes)
    for c, seen in kernel_dtypes.items():
        stored = model.weight("experts" if c == "experts" else "mlp").compute
        if seen and stored not in seen and not (seen & {"bf16", "fp16"} and stored in ("bf16", "fp16")):
            out.dtype_conflicts[c] = ("/".join(sorted(seen)), stored)
    out.layer_check = layer_check(model, work, comp, steps)
    for (c, _), basis in bases.items():
        out.estimates[c] = f"{out.estimates[c]}. Also, {basis}" if c in out.estimates else basis
    return out


# Keys per request that no context reaches: decode attention priced at this many keys needs
# more than the bandwidth roof in any kernel's time, so the above-roof check caps it (``above_roof``).
UNBOUNDED_KEYS = float(2**40)
UNKNOWN_KEYS_BASIS = (
    "upper bound: the keys each request attends to are not in the trace; a decode step's attention does "
    "4*Hq*d FLOPs per key read (2*Hkv*d KV bytes), an intensity that no key count changes; where it is below "
    "the GPU's ridge the kernels are memory-bound, and their bytes are capped at what peak bandwidth moves in "
    "their time; their FLOPs are not known"
)


def _decode_attention_unknown_keys(
    model: ModelSpec, tp: int, sides: dict[str, mc.Side], act_bytes: float, kv_bytes: float
) -> mc.Work | None:
    """Decode attention of a step whose keys are unknown, priced at more keys than any context
    holds (one query per request: pairs = keys), for the roofline to cap at the roof as an
    upper bound. None for a step with prefill work: its intensity grows with its queries per
    request, so without the keys no bound class follows."""
    d = sides.get(DECODE)
    if d is None or set(sides) != {DECODE} or d.requests <= 0 or d.tokens != d.requests:
        return None
    keys = d.requests * UNBOUNDED_KEYS
    side = mc.Side(d.requests, d.tokens, keys, keys, d.logit_tokens)
    got = mc.step_costs(model, side, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype).get(
        "attention"
    )
    return got if isinstance(got, mc.Work) else None


def _bytes_estimate(component: str, sides: dict[str, mc.Side], stated_prefill) -> str | None:
    """What the model's bytes of a pooled component are in a step (``ESTIMATES``), None when
    they are the minimal traffic of what the step states. ``stated_prefill``: the step's own
    prefill ``BatchSide``, as its source stated it (None when it stated none)."""
    if component == "experts":
        return ESTIMATED  # the distinct experts read are expected under uniform routing, not known
    if component == "attention" and PREFILL in sides and sides[PREFILL].tokens > sides[PREFILL].requests:
        # A prefill whose cached keys no annotation states is priced as reading its own tokens
        # only (no cached prefix, ``step_sides`` and ``attention_geometry``): its KV read is a
        # lower bound.
        if not isinstance(stated_prefill, BatchSide) or stated_prefill.kv_tokens is None:
            return LOWER
    return None


def _estimate_basis(model: ModelSpec, tp: int, component: str, sides: dict[str, mc.Side]) -> str:
    """The formula and numbers behind a component's estimated bytes, as the JSON states them."""
    if component == "attention":
        return (
            "lower bound: the KV read of a prefill whose cached keys the trace does not state counts its own "
            "tokens only (no cached prefix); where it does not state the sum of q² either, its query-key "
            "pairs, and so its FLOPs, assume requests of one length, the fewest any split of its tokens gives "
            "((Σq)²/n <= Σq²)"
        )
    tokens = sum(s.tokens for s in sides.values())
    e, k = model.experts, model.top_k
    touched = expected_experts(e, k, tokens)
    per = mc.expert_parameters(model, tp) * model.weight("experts").bytes_per_param
    # Expected distinct experts per MoE layer when each of B tokens picks k of E experts
    # uniformly: E * (1 - (1 - k/E)^B) (each expert is missed by one token with probability
    # 1 - k/E, by all B with (1 - k/E)^B).
    return (
        f"the model's estimate: expected distinct experts per MoE layer under uniform routing, "
        f"E*(1-(1-k/E)^B) = {e}*(1-(1-{k}/{e})^{tokens:g}) = {touched:.1f} of {e} at B={tokens:g} tokens "
        f"(the first step priced; each step by its own tokens), each expert's weights read once: {per:,.0f} bytes per expert per rank; "
        "where that needs more than the bandwidth roof in the kernels' time, the bytes are capped at the "
        "roof: an upper bound"
    )


def mc_bytes(dtype: str) -> float:
    return {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}.get(dtype, 2.0)


def combined(model, tp, sides: dict[str, mc.Side], act_bytes, kv_bytes) -> dict[str, mc.Work | mc.Missing]:
    """The step's pooled components over its sides: the weights are read once for the step."""
    if len(sides) == 1:
        return mc.step_costs(
            model, next(iter(sides.values())), tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype
        )
    s = list(sides.values())
    kv_tokens = [x.kv_tokens for x in s if x.kv_tokens is not None]
    pairs = [x.pairs for x in s if x.pairs is not None]
    merged = mc.Side(
        sum(x.requests for x in s),
        sum(x.tokens for x in s),
        sum(kv_tokens) if len(kv_tokens) == len(s) else None,  # unknown on one side: unknown
        sum(pairs) if len(pairs) == len(s) else None,
        sum(x.logit_tokens for x in s),
    )
    whole = mc.step_costs(model, merged, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype)
    # Attention is not additive in the merged side's keys (sliding windows): sum the sides.
    parts = [mc.step_costs(model, x, tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype) for x in s]
    for c in ("attention", "linear_attention"):
        if c in whole:
            ws = [p.get(c) for p in parts]
            whole[c] = next((w for w in ws if isinstance(w, mc.Missing)), None) or _sum(ws)
    return whole


def _sum(works):
    works = [w for w in works if isinstance(w, mc.Work)]
    if not works:
        return None
    return mc.Work(
        sum(w.flops for w in works), sum(w.bytes for w in works), works[0].dtype, works[0].unit, works[0].note
    )


def _plus(a, b):
    if not isinstance(a, mc.Work) or not isinstance(b, mc.Work):
        return a
    return mc.Work(a.flops + b.flops, a.bytes + b.bytes, a.dtype, a.unit, a.note + "; LM head included")


def _lm_head(rows: np.ndarray, comp: np.ndarray, names: np.ndarray, start: np.ndarray) -> None:
    """Mark the step's LM head: its last GEMM, when that kernel's name is launched once in the step."""
    gemm = rows[comp[rows] == "linear"]
    if len(gemm) < 2:
        return
    last = gemm[np.argmax(start[gemm])]
    if int((names[gemm] == names[last]).sum()) == 1:
        comp[last] = "lm_head"


def _per_launch(
    model, tp, c, mine, fused, out_size, tokens, logit_tokens, flops, nbytes, dtype, unit, reason, act_bytes, kv_bytes
) -> None:
    """Each launch processes every token of the step: its per-token size times the tokens."""
    moe_only = bool(model.experts and model.count(mlp="dense") == 0)
    if c == "sampling":
        # Sampling reads the logits of every logit token (fp32) at least once.
        f = np.full(len(mine), logit_tokens * model.vocab)
        b = np.full(len(mine), logit_tokens * model.vocab * 4.0)
    else:
        f, b = np.zeros(len(mine)), np.zeros(len(mine))
        sizes = np.nan_to_num(out_size[mine], nan=-1.0)  # -1: the activation dtype
        adds = fused[mine]
        for add, size in {(bool(a), float(s)) for a, s in zip(adds, sizes)}:
            sel = (adds == add) & (sizes == size)
            per = mc.per_token(
                model,
                c,
                tp,
                fused_add=add,
                moe_layer=moe_only,
                act_bytes=act_bytes,
                kv_bytes=kv_bytes,
                out_bytes=None if size < 0 else size,
            )
            if per is None:
                return
            f[sel], b[sel] = per[0] * tokens, per[1] * tokens
    flops[mine], nbytes[mine], dtype[mine], unit[mine], reason[mine] = f, b, model.dtype, mc.VECTOR, None


def _mixed_share(model, tp, sides, rows, comp, share, act_bytes, kv_bytes) -> None:
    """Prefill share of each unit of a mixed step by the model: the share of each component's
    roofline work (FLOPs and bytes, the weights split by tokens) its prefill side holds."""
    pre = mc.step_costs(model, sides[PREFILL], tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype)
    dec = mc.step_costs(model, sides[DECODE], tp=tp, act_bytes=act_bytes, kv_bytes=kv_bytes, act_dtype=model.dtype)
    tok_share = sides[PREFILL].tokens / (sides[PREFILL].tokens + sides[DECODE].tokens)
    for c in set(comp[rows]) - {None}:
        mine = rows[comp[rows] == c]
        p, d = pre.get(c), dec.get(c)
        if isinstance(p, mc.Work) and isinstance(d, mc.Work) and c in ("attention", "linear_attention"):
            tp_, td = max(p.flops, 1.0) + p.bytes, max(d.flops, 1.0) + d.bytes
            share[mine] = tp_ / (tp_ + td)
        else:
            share[mine] = tok_share
