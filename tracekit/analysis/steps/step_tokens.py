"""Tokens and batch of each step from the trace's own evidence, when no annotation states them.

A default serving trace (no shapes, graph-replayed steps) still holds, per step, figures
that engines size by the step's tokens or requests; each is a *source* that votes, with a
weight for how directly it counts (the conventions are the engines', in ``tracekit.frameworks``):

tokens
  - KV-cache writes (weight 3): vLLM ``reshape_and_cache*`` / SGLang ``store_kvcache``
    launch one block per token written, so grid x is the step's tokens;
  - input copies (weight 2): the host-to-device copies of the step's int32 input ids and
    int64 positions, 4T and 8T bytes (several candidate pairs split the weight);
  - other per-token kernels (weight 2): vLLM's rotary embedding, one block per token.
requests (batch)
  - token readback (weight 2): the sampled token ids (one per request) copied back to the
    host (int64 in SGLang; a vLLM build's width is not known, so int64 and int32 readings
    split the weight);
  - paged decode attention grids (weight 2): one block row per sequence;
  - SGLang's per-request kernels (weight 2): ``create_flashinfer_kv_indices_triton`` and the
    KV allocator's ``alloc_decode_kernel`` / ``alloc_extend_kernel`` launch one program per
    request (grid ``(bs,)``);
  - the sampler's softmax and greedy argmax over the logits (weight 1 each): one row per
    request (weak: a run that asks for prompt logprobs has a row per token). Kernels of the
    step's iteration issued after its range (vLLM V1 samples there) count too;
  - logits rows (weight 1, where op shapes are recorded): engines compute logits only at each
    request's last token (``hidden_states[logits_indices]``), so the step's last GEMM, the LM
    head, has one input row per request; counted only when that is fewer rows than the step's
    tokens (a forward that computes every token's logits says nothing of its requests).

Each figure is the value with the most weight; its confidence is that weight over all the
weight cast, and sources that disagree are named in a note. A figure no source gives, or
that sources tie on, stays None, with the reason. The annotation, where it states a figure, is not overruled here:
``segment`` weighs it against the evidence. A tokens figure that launch grids of eagerly launched
kernels give, every source agreeing, is marked ``launched``: the rows the GPU ran, which
``segment`` takes over a stated figure (issue 46). A grid replayed from a CUDA/HIP graph is
fixed at the captured batch size, padded above the step's own (SGLang's ``cuda_graph_runner``
and vLLM's ``cudagraph_capture_sizes`` capture a list of batch sizes and pad a step up to the next
one), so it never overrules; its figure is marked ``replayed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.pricing import taxonomy

W_KV_WRITE, W_INPUT_COPY, W_PER_TOKEN = 3.0, 2.0, 2.0
W_READBACK, W_DECODE_ATTENTION, W_SAMPLER, W_PER_REQUEST, W_LOGITS = 2.0, 2.0, 1.0, 2.0, 1.0

NO_TOKENS = "no source in the trace counts its tokens (no KV-cache write grids or input-id/position copy sizes)"
NO_REQUESTS = (
    "no source in the trace counts its requests (no sampled-token readback, sampler, per-request "
    "kernel or decode attention grids)"
)

# A vote's launch grid: launched eagerly, or replayed from a CUDA/HIP graph (None: no grid).
EAGER, REPLAYED = "eager", "replayed"
_REPLAYED_TEXT = "; replayed from a graph: the captured size, padded above the step's own"


@dataclass
class Figure:
    """One step's figure as the evidence voted: value (None: no source), where it came from,
    confidence in [0, 1], and a note when sources disagree."""

    value: int | None = None
    source: str | None = None
    confidence: float | None = None
    note: str | None = None
    # Every source agrees on the value and it rests on launch grids none of which was replayed
    # from a graph: the rows the GPU ran.
    launched: bool = False
    # The value rests on a grid replayed from a graph: the captured (padded) size.
    replayed: bool = False


@dataclass
class StepCounts:
    tokens: Figure = field(default_factory=Figure)
    requests: Figure = field(default_factory=Figure)


def _vote(votes: list[tuple[int, float, str, str | None]], empty: str) -> Figure:
    """The value with the most weight among ``votes`` (value, weight, source text, how its grid
    was launched: ``EAGER``, ``REPLAYED`` or None)."""
    if not votes:
        return Figure(source=empty)
    weight: dict[int, float] = {}
    for value, w, *_ in votes:
        weight[value] = weight.get(value, 0.0) + w
    best = max(weight, key=lambda v: (weight[v], -v))
    total = sum(weight.values())
    tied = sorted(v for v in weight if weight[v] == weight[best])
    if len(tied) > 1:
        readings = "; ".join(dict.fromkeys(f"{s} says {v:,}" for v, _, s, *_ in votes))
        return Figure(source=f"the evidence cannot tell: {readings}")
    agree = "; ".join(dict.fromkeys(s for v, _, s, *_ in votes if v == best))
    others = [f"{s} says {v:,}" for v, _, s, *_ in votes if v != best]
    note = None
    if others:
        note = f"sources disagree: {best:,} from {agree}, but {'; '.join(dict.fromkeys(others))}"
    fig = Figure(best, agree, round(weight[best] / total, 3), note)
    grids = [g for *_, g in votes if g is not None]
    fig.replayed = any(v == best and g == REPLAYED for v, *_, g in votes)
    fig.launched = bool(grids) and not others and all(g == EAGER for g in grids)
    return fig


def _grid(kernels: pd.DataFrame) -> np.ndarray:
    return np.stack([kernels[f"grid_{a}"].to_numpy().astype(np.int64) for a in "xyz"], axis=1)


def step_counts(
    kernels: pd.DataFrame,
    step_of: np.ndarray,
    n_steps: int,
    sources: list[str] | None = None,
    iteration_of: np.ndarray | None = None,
    logits_rows: dict[int, tuple[int, str]] | None = None,
) -> list[StepCounts]:
    """What the evidence says of each step's tokens and requests; ``step_of`` gives the step of
    each row of ``kernels`` (-1: none), ``sources`` each step's source (an engine's conventions
    differ), ``iteration_of`` for rows outside every step the step whose engine iteration they
    end (the sampled-token readback is read there), ``logits_rows`` each step's last GEMM's
    input rows and its op (``last_gemm_rows``). Rules run once per distinct kernel name and grid."""
    out = [StepCounts() for _ in range(n_steps)]
    if not n_steps or not len(kernels):
        for c in out:
            c.tokens.source, c.requests.source = NO_TOKENS, NO_REQUESTS
        return out
    tok_votes: list[list] = [[] for _ in range(n_steps)]
    req_votes: list[list] = [[] for _ in range(n_steps)]
    inside = (step_of >= 0) & (step_of < n_steps)
    kind = kernels["kind"].astype(str).to_numpy() if "kind" in kernels else np.full(len(kernels), "kernel")
    names = categorical.category_strings(kernels["name"])
    codes = categorical.codes(kernels["name"])
    grid = _grid(kernels)
    # Replayed from a graph (``trace.links``): the grid is the captured size, not this step's.
    in_graph = kernels["graph"].to_numpy().astype(bool) if "graph" in kernels else np.zeros(len(kernels), bool)
    # Kernels: KV-cache writes and decode attention, per (step, name, grid) with its launch count.
    is_kernel = (kind == "kernel") & (grid[:, 0] > 0)
    owner = step_of
    if iteration_of is not None:
        # The sampler of a step's iteration may run after its range (vLLM V1's sample_tokens):
        # its per-request kernels count for that step; token counts stay with the range's own work.
        owner = np.where(inside, step_of, np.where((iteration_of >= 0) & (iteration_of < n_steps), iteration_of, -1))
    late_kernel = is_kernel & ~inside & (owner >= 0)
    rows = np.flatnonzero((is_kernel & inside) | late_kernel)
    if len(rows):
        frame = pd.DataFrame(
            {
                "step": owner[rows],
                "late": late_kernel[rows],
                "code": codes[rows],
                "x": grid[rows, 0],
                "y": grid[rows, 1],
                "z": grid[rows, 2],
                "graph": in_graph[rows],
            }
        )
        kv_of = {}
        for key, n in frame.value_counts(sort=False).items():
            step, late, code, x, y, z, replayed = (int(v) for v in key)
            how, said = (REPLAYED, _REPLAYED_TEXT) if replayed else (EAGER, "")
            name = names[code] if code >= 0 else ""
            if (name, x, y, z) not in kv_of:
                g = (x, y, z)
                kv_of[(name, x, y, z)] = (
                    frameworks.kv_write_tokens(name, g),
                    frameworks.per_token_kernel(name, g),
                    frameworks.decode_attention_sequences(name, g),
                    frameworks.sampler_rows(name, g),
                    frameworks.per_request_kernel(name, g),
                )
            kv, per_token, seqs, rows_, per_req = kv_of[(name, x, y, z)]
            short = _short(name)
            if per_req is not None:
                req_votes[step].append(
                    (
                        per_req[0],
                        W_PER_REQUEST,
                        f"{per_req[1]} per-request kernel ({short} "
                        f"grid x = {per_req[0]:,}, one program per request{said})",
                        int(n),
                        how,
                    )
                )
            if rows_ is not None:
                req_votes[step].append(
                    (
                        rows_[0],
                        W_SAMPLER,
                        f"sampler {rows_[1]} rows ({short}: {rows_[0]:,}, one per request{said})",
                        int(n),
                        how,
                    )
                )
            if late:
                continue
            if kv is not None:
                tok_votes[step].append(
                    (
                        kv[0],
                        W_KV_WRITE,
                        f"{kv[1]} KV-cache writes ({short} grid x = {kv[0]:,}, one block per token{said})",
                        int(n),
                        how,
                    )
                )
            if per_token is not None:
                tok_votes[step].append(
                    (
                        per_token[0],
                        W_PER_TOKEN,
                        f"{per_token[1]} per-token kernel ({short} grid x = {per_token[0]:,}{said})",
                        int(n),
                        how,
                    )
                )
            if seqs is not None:
                req_votes[step].append(
                    (
                        seqs,
                        W_DECODE_ATTENTION,
                        f"decode attention grid ({short}: {seqs:,} sequences{said})",
                        int(n),
                        how,
                    )
                )
    # Copies: the input-id/position pair host to device, the sampled tokens back.
    if "bytes" in kernels:
        nbytes = kernels["bytes"].to_numpy()
        copy = inside & (kind == "memcpy") & (nbytes > 0)
        crow = np.flatnonzero(copy)
        if len(crow):
            direction = np.array([_direction(names[c] if c >= 0 else "") for c in codes[crow].tolist()])
            for d, target in (("htod", tok_votes), ("dtoh", req_votes)):
                sel = crow[direction == d]
                owner = step_of
                if d == "dtoh" and iteration_of is not None:
                    # The readback that closes a step's iteration, issued after its range.
                    after = np.flatnonzero((step_of < 0) & (iteration_of >= 0) & (kind == "memcpy") & (nbytes > 0))
                    after = (
                        after[
                            np.array(
                                [_direction(names[c] if c >= 0 else "") == "dtoh" for c in codes[after].tolist()],
                                dtype=bool,
                            )
                        ]
                        if len(after)
                        else after
                    )
                    sel = np.concatenate([sel, after])
                    owner = np.where(step_of >= 0, step_of, iteration_of)
                if not len(sel):
                    continue
                by_step = pd.Series(nbytes[sel]).groupby(owner[sel]).agg(list)
                for step, sizes in by_step.items():
                    if d == "htod":
                        found = frameworks.input_copy_tokens(sizes)
                        for t in found:
                            target[int(step)].append(
                                (
                                    t,
                                    W_INPUT_COPY / len(found),
                                    f"input-id/position copies ({4 * t:,} and {8 * t:,} bytes host to device)",
                                    1,
                                    None,
                                )
                            )
                    else:
                        found = frameworks.readback_requests(sizes, sources[int(step)] if sources else None)
                        for r in found:
                            target[int(step)].append(
                                (
                                    r,
                                    W_READBACK / len(found),
                                    f"sampled-token readback "
                                    f"({sizes[0]:,} bytes device to host, one "
                                    f"int{8 * sizes[0] // r} per request)",
                                    1,
                                    None,
                                )
                            )
    for i in range(n_steps):
        # A source's launches vote once (the most common grid among its launches), not once per layer.
        out[i].tokens = _vote(_per_source(tok_votes[i]), NO_TOKENS)
        tokens = out[i].tokens.value
        if logits_rows and i in logits_rows and tokens is not None and logits_rows[i][0] < tokens:
            m_rows, op_name = logits_rows[i]
            req_votes[i].append(
                (
                    m_rows,
                    W_LOGITS,
                    f"logits rows (the step's last GEMM, {op_name}, has {m_rows:,} "
                    "input rows: one per request's last token)",
                    1,
                    None,
                )
            )
        out[i].requests = _vote(_per_source(req_votes[i]), NO_REQUESTS)
    return out


def last_gemm_rows(kernels: pd.DataFrame, step_of: np.ndarray, ops: pd.DataFrame, shapes) -> dict[int, tuple[int, str]]:
    """Per step, the input rows (M) of the op of its last GEMM kernel and the op's name, where
    its shapes are recorded; ``shapes(op_row)`` gives (Input Dims, types)."""
    if "op" not in kernels or not len(kernels) or not len(ops):
        return {}
    op = kernels["op"].to_numpy()
    names = categorical.category_strings(kernels["name"])
    codes = categorical.codes(kernels["name"])
    gemm_code = np.array([taxonomy.categorize(n) == taxonomy.GEMM for n in names], dtype=bool)
    sel = np.flatnonzero((step_of >= 0) & (op >= 0) & (codes >= 0))
    sel = sel[gemm_code[codes[sel]]] if len(sel) else sel
    if not len(sel):
        return {}
    start = kernels["start_ns"].to_numpy()
    order = sel[np.lexsort((start[sel], step_of[sel]))]
    last = order[np.r_[step_of[order][1:] != step_of[order][:-1], True]]
    out = {}
    for r in last.tolist():
        o = int(op[r])
        dims, _ = shapes(o)
        m = _gemm_rows(str(ops["name"].iat[o]), dims) if dims else None
        if m:
            out[int(step_of[r])] = (m, str(ops["name"].iat[o]))
    return out


def _gemm_rows(op: str, dims: list) -> int | None:
    """The input rows (M) of a GEMM op from its recorded Input Dims."""
    try:
        if op in ("aten::mm", "aten::matmul", "aten::linear"):
            first = dims[0]
            return int(np.prod(first[:-1])) if len(first) >= 2 else None
        if op == "aten::addmm":
            return int(dims[1][0])
    except (IndexError, TypeError, ValueError):
        return None
    return None


def _per_source(votes: list[tuple]) -> list[tuple[int, float, str, str | None]]:
    """One vote per kind of source: among one source's grids (a kernel launched per layer with a
    padded last launch, say), the value launched most often. The input-copy candidates of one
    step (several size pairs) each keep their share of that source's weight. Each vote keeps
    how its grid was launched (``EAGER``, ``REPLAYED``, None: no grid); a value one source's
    launches gave both ways counts as replayed."""
    best: dict[str, tuple] = {}
    shared: dict[tuple, tuple] = {}
    replayed = {(text.split(" (")[0], value) for value, _, text, _, how in votes if how == REPLAYED}
    for value, w, text, n, how in votes:
        kind = text.split(" (")[0]
        if kind.startswith(("input-id", "sampled-token")):
            shared.setdefault((kind, value), (value, w, text, n, how))
        elif kind not in best or n > best[kind][3]:
            best[kind] = (value, w, text, n, how)
    return [
        (v, w, t, REPLAYED if (t.split(" (")[0], v) in replayed else how)
        for v, w, t, _, how in [*best.values(), *shared.values()]
    ]


def _direction(name: str) -> str | None:
    """A copy's direction from the profiler's name (``Memcpy HtoD (Pinned -> Device)``, ROCm alike)."""
    low = name.lower()
    if "htod" in low or "host -> device" in low or "hosttodevice" in low:
        return "htod"
    if "dtoh" in low or "device -> host" in low or "devicetohost" in low:
        return "dtoh"
    return None


def _short(name: str, width: int = 64) -> str:
    head = name.split("(")[0].replace("void ", "").strip() or name
    return head if len(head) <= width else head[: width - 3] + "..."
