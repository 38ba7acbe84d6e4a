"""Evidence for a step's phase when no annotation states it.

Three kinds, tried in this order by ``segment``:

1. **Shapes** (``shape_evidence``): the tokens-per-sequence axis of the token-embedding
   ids or the attention query (1 = decode). Linear inputs are no evidence: a 3-D
   [seq, batch, hidden] and a [batch, seq, hidden] input look alike.
2. **Kernel names** (``name_evidence``): attention kernels that only run for one phase.
   Decode-only: split-KV and paged decode kernels (``flash_fwd_splitkv``,
   ``BatchDecodeWith*``, ``paged_attention*``, Triton ``unified_attention_3d``,
   TensorRT-LLM FMHA ``...ForGen``; the generation kernels of TensorRT-LLM,
   FasterTransformer, RTP-LLM and TurboMind: masked multi-head attention, XQA
   ``kernel_mha``, TurboMind's ``DecodingCtaMap`` kernels). Prefill-only: ragged/context
   kernels (``BatchPrefillWithRaggedKVCache``, ``context_attention``, ``extend_attention``,
   TensorRT-LLM FMHA ``...Context``, its context FMHA ``fmha_v2_*``, TurboMind's
   ``AttentionCtaMap`` kernels). FlashInfer's and CK's
   ``BatchPrefillWithPagedKVCache`` is weak evidence only: engines run it for decode
   too (tensor-core decode of grouped-query attention).
3. **Structure across the run's steps** (``structural_phases``), the evidence that
   survives missing shapes: a step whose GEMMs launch several times the blocks of the
   run's typical step (GEMM grids grow with the tokens of a step), or that runs eager
   with many more kernels while the others replay graphs, holds prefill work; the
   light steps beside it are decode. A step replaying CUDA/HIP graphs is decode
   (engines capture graphs for decode batch sizes), unless its names say otherwise.
4. **The vote** (``Ballot``): ``segment`` casts each kind above, and the step's counted
   tokens against its requests, as weighted votes; the phase with the most weight wins,
   with a confidence, and the evidence text names every vote, so disagreement shows.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy
from tracekit.frameworks import DECODE, MIXED, PREFILL, UNKNOWN

_ATTENTION_OP_RE = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|attention_forward", re.I)

# The generation and context kernels of engines that write no step annotations (their kernel
# families named, with sources, in ``taxonomy.KERNEL_RULES``): TensorRT-LLM, FasterTransformer
# and RTP-LLM generate with masked multi-head attention (``mmha::masked_multihead_attention_kernel``,
# RTP-LLM's ``fastertransformer::masked_multihead_attention_kernel``; FasterTransformer
# decoder_masked_multihead_attention.cu, TensorRT-LLM decoderMaskedMultiheadAttentionTemplate.h) or
# XQA (``kernel_mha``: TensorRT-LLM cpp/kernels/xqa/mha.cu, run by its decoderXQARunner; RTP-LLM's
# ``xqa_kernel_sm90_*``), and run the prompt with context FMHA (``fmha_v2_*``: TensorRT-LLM
# contextFusedMultiHeadAttention/cubin/fmha_cubin.h). TurboMind's one ``attention_kernel`` template
# says its phase in its CTA map: ``DecodingCtaMap`` is decoding, ``AttentionCtaMap`` prefill (lmdeploy
# src/turbomind/kernels/attention/kernel_impl.h: ``kIsDecoding = is_same_v<CtaMap, DecodingCtaMap>``).
# ``kernel_mha`` only as a whole word: llama2.cu-style ``mat_vec_kernel_MHA`` is no XQA.
_ENGINE_DECODE = r"masked_?multi_?head_?attention|(?<![a-z0-9_])kernel_mha(?![a-z0-9_])|decodingctamap"
_ENGINE_PREFILL = r"fmha_v2_|attentionctamap"

_DECODE_ONLY = re.compile(
    r"flash_fwd_splitkv|batchdecodewith|singledecodewith|paged_?attention|decode_?attention|"
    r"flash_?decoding|fmha_fwd_splitkv|flash_?mla|mla_decode|xqa|mmha|"
    r"_fwd_(grouped_)?kernel_stage[12]|unified_attention_3d|fmha\w*forgen|" + _ENGINE_DECODE,
    re.IGNORECASE,
)
_PREFILL_ONLY = re.compile(
    r"batchprefillwithraggedkvcache|singleprefillwith|context_?attention|extend_?attention|"
    r"fmha\w*context|" + _ENGINE_PREFILL,
    re.IGNORECASE,
)
_PREFILL_WEAK = re.compile(r"prefill", re.IGNORECASE)
# Attention over a paged KV cache: the run is autoregressive generation.
_PAGED_KV = re.compile(r"paged|kv_?cache|pagedkv", re.IGNORECASE)

# A step is "heavy" (holds prefill work) when its GEMMs launch at least this many times
# the blocks per GEMM launch of the run's median step, or run eager with this many
# times the median kernels while most steps replay graphs.
HEAVY_GEMM_BLOCKS = 3.0
HEAVY_EAGER_KERNELS = 1.3


def json_or_none(text):
    """A recorded JSON field (``Input Dims``, ``Concrete Inputs``) parsed, or None when absent or malformed."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


# --- 1. shapes -------------------------------------------------------------------------


def shape_evidence(ops: pd.DataFrame) -> tuple[str, str, float | None, float | None]:
    """(phase, evidence, tokens, batch) from the shapes of a pass's ops; unknown when silent."""
    if not len(ops) or ops["input_dims"].isna().all():
        return UNKNOWN, _NO_SHAPES, None, None
    names = ops["name"].astype(str)
    # Token embedding input ids [batch, tokens per sequence].
    for dims in ops.loc[names == "aten::embedding", "input_dims"]:
        found = _embedding_tokens(dims)
        if found is not None:
            return found
    # Attention query [batch, heads, query tokens, head dim].
    attn = names.str.contains(_ATTENTION_OP_RE)
    for name, dims in zip(names[attn], ops.loc[attn, "input_dims"]):
        found = _attention_tokens(name, dims)
        if found is not None:
            return found
    return UNKNOWN, _SILENT_SHAPES, None, None


_NO_SHAPES = "no op shapes recorded"
_SILENT_SHAPES = "op shapes do not show tokens per sequence"


def _embedding_tokens(dims) -> tuple | None:
    d = json_or_none(dims)
    if d and len(d) >= 2 and isinstance(d[1], list) and len(d[1]) == 2:
        b, t = d[1]
        return _by_tokens(t, f"token ids of shape [{b}, {t}] in aten::embedding", b * t, b)
    return None


def _attention_tokens(name: str, dims) -> tuple | None:
    d = json_or_none(dims)
    if d and isinstance(d[0], list) and len(d[0]) == 4:
        b, _, lq, _ = d[0]
        return _by_tokens(lq, f"query of shape {d[0]} in {name}", b * lq, b)
    return None


def shape_evidence_many(ops: pd.DataFrame, passes: list[tuple]) -> list[tuple]:
    """``shape_evidence`` of the ops of each pass ``(start, end, tid, ...)``: the ops on thread
    ``tid`` that start in [start, end). The same answers, found by one sort of the ops by thread
    and binary searches per pass rather than by filtering the whole op table once per pass:
    a serving trace has tens of thousands of passes and millions of ops."""
    if not len(ops):
        return [shape_evidence(ops) for _ in passes]
    tid = ops["tid"].to_numpy()
    start = ops["start_ns"].to_numpy()
    dims = ops["input_dims"].to_numpy()
    has_dims = ~ops["input_dims"].isna().to_numpy()
    cats = pd.Series(
        ops["name"].cat.categories
        if isinstance(ops["name"].dtype, pd.CategoricalDtype)
        else pd.unique(ops["name"].astype(str))
    ).astype(str)
    codes = (
        ops["name"].cat.codes.to_numpy()
        if isinstance(ops["name"].dtype, pd.CategoricalDtype)
        else pd.Categorical(ops["name"].astype(str), categories=cats).codes
    )
    cat_names = cats.to_numpy()
    is_emb = np.append((cats == "aten::embedding").to_numpy(dtype=bool), False)[codes]
    is_attn = np.append(cats.str.contains(_ATTENTION_OP_RE).to_numpy(dtype=bool), False)[codes]
    # Which embedding and attention ops show tokens per sequence (each once, in row order).
    emb_rows = np.flatnonzero(is_emb)
    emb_found = {int(r): f for r in emb_rows if (f := _embedding_tokens(dims[r])) is not None}
    attn_rows = np.flatnonzero(is_attn)
    attn_found = {int(r): f for r in attn_rows if (f := _attention_tokens(cat_names[codes[r]], dims[r])) is not None}
    emb_mask, attn_mask = np.zeros(len(ops), dtype=bool), np.zeros(len(ops), dtype=bool)
    emb_mask[list(emb_found)] = True
    attn_mask[list(attn_found)] = True
    # Rows of each thread in start order (the reader's tables are; one built otherwise is sorted
    # here, stably, so "first" is the earliest op, as in the reader's row order), with their starts.
    by_tid = pd.Series(np.arange(len(ops))).groupby(tid, sort=False).indices
    per_tid: dict = {}
    out = []
    for p in passes:
        lo_t, hi_t, t = p[0], p[1], p[2]
        if by_tid.get(t) is None:
            out.append(shape_evidence(ops.iloc[0:0]))
            continue
        if t not in per_tid:
            rows = by_tid[t]
            rows = rows[np.argsort(start[rows], kind="stable")]
            dims_cum = np.concatenate([[0], np.cumsum(has_dims[rows])])
            emb_pos = np.flatnonzero(emb_mask[rows])
            attn_pos = np.flatnonzero(attn_mask[rows])
            per_tid[t] = (rows, start[rows], dims_cum, emb_pos, attn_pos)
        rows, st, dims_cum, emb_pos, attn_pos = per_tid[t]
        a, b = np.searchsorted(st, lo_t, side="left"), np.searchsorted(st, hi_t, side="left")
        if a >= b or dims_cum[b] == dims_cum[a]:
            out.append((UNKNOWN, _NO_SHAPES, None, None))
            continue
        found = None
        for pos, table in ((emb_pos, emb_found), (attn_pos, attn_found)):
            k = np.searchsorted(pos, a, side="left")
            if k < len(pos) and pos[k] < b:
                found = table[int(rows[pos[k]])]
                break
        out.append(found if found is not None else (UNKNOWN, _SILENT_SHAPES, None, None))
    return out


def _by_tokens(t: int, where: str, tokens: int, batch: int) -> tuple[str, str, float, float]:
    if t == 1:
        return DECODE, f"one token per sequence: {where}", float(tokens), float(batch)
    return PREFILL, f"{t} tokens per sequence: {where}", float(tokens), float(batch)


# --- 2. kernel names -------------------------------------------------------------------


def is_decode_attention(name: str) -> bool:
    return bool(_DECODE_ONLY.search(name or "")) and taxonomy.categorize(name) == taxonomy.ATTENTION


def is_prefill_attention(name: str, weak: bool = False) -> bool:
    pattern = _PREFILL_WEAK if weak else _PREFILL_ONLY
    return bool(pattern.search(name or "")) and taxonomy.categorize(name) == taxonomy.ATTENTION


class NameFlags:
    """Per distinct kernel name (a work table's name categories), what it says about phases;
    each name's regexes run once, however many steps and kernels carry it."""

    def __init__(self, names) -> None:
        self.names = [str(n) for n in names]
        n = len(self.names)
        self.decode, self.prefill, self.weak, self.generation = (np.zeros(n, dtype=bool) for _ in range(4))
        for i, name in enumerate(self.names):
            cat = taxonomy.categorize(name)
            if cat == taxonomy.KV_CACHE:
                self.generation[i] = True
            if cat != taxonomy.ATTENTION:
                continue  # a "decode" or "prefill" word outside attention is no evidence
            self.decode[i] = bool(_DECODE_ONLY.search(name))
            self.prefill[i] = bool(_PREFILL_ONLY.search(name))
            self.weak[i] = bool(_PREFILL_WEAK.search(name))
            self.generation[i] = self.decode[i] or self.weak[i] or bool(_PAGED_KV.search(name))


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


# --- 3. structure across steps ---------------------------------------------------------


def step_features(work: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """Per step: kernels, graph-replayed share, GEMM launches, GEMM blocks per launch."""
    inside = work[work["step"] >= 0]
    names = inside["name"]
    if hasattr(names, "cat"):
        gemm_code = np.array([_gemm_like_cached(str(n)) for n in names.cat.categories], dtype=bool)
        codes = names.cat.codes.to_numpy()
        gemmish = pd.Series(np.where(codes >= 0, gemm_code[np.maximum(codes, 0)], False), index=inside.index)
    else:
        gemmish = names.astype(str).map(_gemm_like_cached)
    ctas = inside["ctas"].to_numpy()
    step = inside["step"].to_numpy().astype(np.int64)
    gemm = gemmish.to_numpy() & (ctas > 0)

    def per_step(rows, weights=None):
        # Counts and sums of whole numbers (kernels, graph flags, CTAs): exact in float64, so
        # these are the groupby's figures, without a groupby per feature.
        return np.bincount(step[rows], weights=weights, minlength=n_steps)[:n_steps]

    every = slice(None)
    kernels = per_step(every)
    graphs = per_step(every, inside["graph"].to_numpy().astype(np.float64))
    launches = per_step(gemm)
    blocks = per_step(gemm, ctas[gemm].astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return pd.DataFrame(
            {
                "kernels": kernels.astype(np.int64),
                "graph_share": np.where(kernels > 0, graphs / kernels, 0.0),
                "gemm_launches": launches.astype(np.int64),
                "gemm_blocks": np.where(launches > 0, blocks / launches, np.nan),
            },
            index=pd.RangeIndex(n_steps),
        )


_GEMM_CACHE: dict[str, bool] = {}


def _gemm_like_cached(name: str) -> bool:
    hit = _GEMM_CACHE.get(name)
    if hit is None:
        hit = _GEMM_CACHE[name] = taxonomy.categorize(name) in (taxonomy.GEMM, taxonomy.MOE)
        if len(_GEMM_CACHE) > 100_000:
            _GEMM_CACHE.clear()
    return hit


def structural_phases(features: pd.DataFrame, todo: np.ndarray, engine: np.ndarray) -> dict[int, tuple[str, str]]:
    """{step: (phase, evidence)} for the steps in ``todo`` that structure decides.

    ``engine`` flags the steps known to be an inference engine's steps (engine frames,
    the launch pattern, engine annotations): only their relative weight is evidence.
    Passes found from ``nn.Module`` spans of an arbitrary model may differ in size for
    reasons that have nothing to do with prefill and decode.
    """
    out: dict[int, tuple[str, str]] = {}
    if not len(todo):
        return out
    f = features[engine].reset_index(drop=True) if engine.any() else features.iloc[0:0]
    index = np.flatnonzero(engine)
    median_blocks = float(np.nanmedian(f["gemm_blocks"])) if f["gemm_blocks"].notna().any() else None
    median_kernels = float(np.median(f["kernels"])) if len(f) else 0.0
    mostly_graphs = float((f["graph_share"] > 0.5).mean()) > 0.5 if len(f) else False
    heavy = {}
    if len(f) >= 2:
        for j, i in enumerate(index.tolist()):
            blocks = f["gemm_blocks"].iat[j]
            if median_blocks and not np.isnan(blocks) and blocks >= HEAVY_GEMM_BLOCKS * median_blocks:
                heavy[i] = (
                    f"its GEMMs launch {blocks / median_blocks:.1f}x the blocks per launch of the run's "
                    "median step (GEMM grids grow with a step's tokens)"
                )
            elif (
                mostly_graphs
                and f["graph_share"].iat[j] <= 0.5
                and median_kernels
                and f["kernels"].iat[j] >= HEAVY_EAGER_KERNELS * median_kernels
            ):
                heavy[i] = (
                    f"it runs eager with {f['kernels'].iat[j] / median_kernels:.1f}x the kernels of the "
                    "run's median step while most steps replay graphs"
                )
    for i in todo.tolist():
        share = features["graph_share"].iat[i]
        if i in heavy:
            out[i] = (PREFILL, f"holds prefill work: {heavy[i]}")
        elif heavy and engine[i] and len(heavy) < len(f):
            out[i] = (
                DECODE,
                "a light step beside the run's heavy (prefill) steps: its GEMM grids and kernel "
                "count are the run's typical ones",
            )
        elif share > 0.5:
            out[i] = (
                DECODE,
                f"replays CUDA/HIP graphs ({share:.0%} of its kernels); engines capture graphs for decode batch sizes",
            )
    return out


# --- 4. the vote ------------------------------------------------------------------------

# Weights of each kind of evidence for a step's phase. Counted tokens beside counted
# requests are the most direct (a step computing more tokens than it has requests holds
# prefill work); a phase-only attention kernel is next (prefill kernels more so: engines
# also launch decode-named kernels in a prefill step, for its cached requests or as the
# paged path of a short query); structure across the run's steps and GPU time come last.
W_COUNTS, W_PREFILL_NAME, W_DECODE_NAME, W_WEAK_NAME = 3.0, 2.0, 1.0, 0.5
W_HEAVY, W_LIGHT, W_GRAPHS, W_EAGER, W_GPU_TIME, W_MORE_TOKENS = 2.0, 1.0, 1.0, 1.0, 1.0, 1.0
# The weight at which a verdict is fully sure: one vote of a graph replay alone is not.
W_SURE = 3.0
# A step with this many times the GPU busy time of the run's median engine step holds prefill work.
HEAVY_GPU_TIME = 2.0


class Ballot:
    """The phase votes cast for one step: (phase, weight, reason) each."""

    def __init__(self) -> None:
        self.votes: list[tuple[str, float, str]] = []
        self.both_attention = False  # decode and prefill attention kernels both ran

    def cast(self, phase: str, weight: float, why: str) -> None:
        if phase in (PREFILL, DECODE) and weight > 0:
            self.votes.append((phase, weight, why))

    def verdict(self) -> tuple[str, float | None, str | None]:
        """(phase, confidence, evidence text). Prefill wins as MIXED when decode attention ran
        beside prefill attention; a tie, or no vote, is UNKNOWN."""
        score = {PREFILL: 0.0, DECODE: 0.0}
        for phase, w, _ in self.votes:
            score[phase] += w
        total = score[PREFILL] + score[DECODE]
        if total == 0:
            return UNKNOWN, None, None
        if score[PREFILL] == score[DECODE]:
            return UNKNOWN, 0.5, "the evidence is split evenly: " + self._text()
        winner = PREFILL if score[PREFILL] > score[DECODE] else DECODE
        phase = MIXED if winner == PREFILL and self.both_attention else winner
        sure = min(1.0, total / W_SURE)
        return phase, round(score[winner] / total * sure, 3), self._text(winner)

    def _text(self, winner: str | None = None) -> str:
        parts = []
        for side in (PREFILL, DECODE):
            reasons = [why for phase, _, why in self.votes if phase == side]
            if reasons:
                weight = sum(w for phase, w, _ in self.votes if phase == side)
                parts.append(f"{side} {weight:g} ({'; '.join(reasons)})")
        text = "phase votes: " + ", ".join(parts)
        if winner is not None and len(parts) == 2:
            text += f"; the {DECODE if winner == PREFILL else PREFILL} evidence is outweighed"
        return text


def count_vote(ballot: Ballot, tokens: float | None, requests: float | None) -> None:
    """Counted tokens against counted requests: more tokens than requests is prefill work,
    one token per request is decode."""
    if tokens is None or requests is None or not requests or np.isnan(tokens) or np.isnan(requests):
        return
    if tokens > requests:
        ballot.cast(PREFILL, W_COUNTS, f"{int(tokens):,} tokens for {int(requests):,} requests")
    elif tokens == requests:
        ballot.cast(DECODE, W_COUNTS, f"one token for each of {int(requests):,} requests")


def name_vote(ballot: Ballot, codes: np.ndarray, flags: NameFlags) -> None:
    """The step's phase-only attention kernels (``NameFlags``) as votes."""
    codes = np.unique(codes[codes >= 0])
    dec, pre = codes[flags.decode[codes]], codes[flags.prefill[codes]]
    first = lambda c: _short(flags.names[int(c[0])])  # noqa: E731
    if len(pre):
        ballot.cast(PREFILL, W_PREFILL_NAME, f"prefill attention kernel {first(pre)}")
    elif len(weak := codes[flags.weak[codes]]):
        ballot.cast(PREFILL, W_WEAK_NAME, f"prefill attention kernel {first(weak)} (engines run it for decode too)")
    if len(dec):
        ballot.cast(DECODE, W_DECODE_NAME, f"decode attention kernel {first(dec)}")
    ballot.both_attention = bool(len(dec) and len(pre))


def structure_vote(ballot: Ballot, verdict: tuple[str, str] | None) -> None:
    """``structural_phases``' verdict on the step as a vote: a heavy step holds prefill work, a
    light step beside heavy ones or a graph replay is decode."""
    if verdict is None:
        return
    phase, why = verdict
    if phase == PREFILL:
        ballot.cast(PREFILL, W_HEAVY, why.removeprefix("holds prefill work: "))
    elif why.startswith("a light step"):
        ballot.cast(DECODE, W_LIGHT, why)
    else:
        ballot.cast(DECODE, W_GRAPHS, why)


def run_votes(
    features: pd.DataFrame, busy_ns: np.ndarray, engine: np.ndarray, tokens: np.ndarray | None = None
) -> dict[int, list[tuple[str, float, str]]]:
    """Votes from a step's place among the run's engine steps beyond ``structural_phases``:
    eager (no graph launch) while most steps replay graphs, GPU time several times the
    run's median step, and counted tokens several times the median step's."""
    out: dict[int, list] = {}
    index = np.flatnonzero(engine)
    if len(index) < 3:
        return out
    share = features["graph_share"].to_numpy()[index]
    replaying = share > 0.5
    median_busy = float(np.median(busy_ns[index]))
    counted = tokens[index] if tokens is not None else np.full(len(index), np.nan)
    median_tokens = float(np.nanmedian(counted)) if (~np.isnan(counted)).sum() >= 3 else np.nan
    for j, i in enumerate(index.tolist()):
        votes = []
        if replaying.mean() > 0.5 and share[j] == 0:
            votes.append((PREFILL, W_EAGER, "runs eager (no graph launch) among graph-replayed steps"))
        if median_busy > 0 and busy_ns[i] >= HEAVY_GPU_TIME * median_busy:
            votes.append(
                (PREFILL, W_GPU_TIME, f"{busy_ns[i] / median_busy:.1f}x the GPU time of the run's median step")
            )
        if median_tokens > 0 and counted[j] >= HEAVY_GPU_TIME * median_tokens:
            votes.append(
                (PREFILL, W_MORE_TOKENS, f"{counted[j] / median_tokens:.1f}x the tokens of the run's median step")
            )
        if votes:
            out[i] = votes
    return out
