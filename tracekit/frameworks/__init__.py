"""What inference engines write into a trace, one module per engine.

Segmentation asks this package, and never matches an engine's strings itself:

- ``parse_annotation(name)``: the step a range name describes (tracekit markers,
  SGLang ``step[...]``, vLLM ``execute_...``, ATOM ``prefill[...]``/``decode[...]``, user
  ranges naming a phase), as a
  ``StepAnnotation`` with the batch of each phase (``BatchSide``), or None;
- ``step_frame_source(name)``: whether a Python frame is one engine step (vLLM
  ``execute_model``, SGLang ``forward_batch_generation``) when there are no annotations;
- ``rank_from_path(path)``: rank (and stage) from a per-rank trace file name;
- ``capture(name)``: a graph-capture range (vLLM/SGLang ``capture_<n>_<mode>``);
  ``capture_file_batch(path)``: the batch size a graph-capture file's name states;
- ``unread_step_name(name)``: a note for a range shaped like an engine's step annotation
  that no grammar here reads (a new engine version), instead of silence;
- ``richer_trace_hint(source, names)``: one sentence, where a run's step annotations leave out
  what their engine can state (the attention sums), naming the option that adds them;
- the evidence a default trace keeps about a step's tokens and batch, as each engine
  writes it: ``kv_write_tokens`` (KV-cache write grids), ``decode_attention_sequences``
  (paged decode attention grids), ``input_copy_tokens`` (input id / position copy sizes),
  ``readback_requests`` (the sampled tokens copied back to the host), ``sampler_rows``
  (the sampler's softmax/argmax over the logits), ``per_request_kernel`` (SGLang's
  one-program-per-request kernels).

Sources, strongest first (``SOURCE_ORDER``): a run's step source is the strongest any
step used, and when two annotations cover one step the stronger decides its phase.
"""

from __future__ import annotations

import os
import re

from tracekit.frameworks import atom, markers, pytorch, sglang, user, vllm
from tracekit.frameworks.base import DECODE, MIXED, PREFILL, UNKNOWN, BatchSide, StepAnnotation

SOURCE_MARKERS = markers.SOURCE
SOURCE_SGLANG = sglang.SOURCE
SOURCE_VLLM = vllm.SOURCE
SOURCE_ATOM = atom.SOURCE
SOURCE_USER = user.SOURCE
SOURCE_VLLM_FRAMES = vllm.FRAME_SOURCE
SOURCE_SGLANG_FRAMES = sglang.FRAME_SOURCE
SOURCE_INFERRED = "inferred from the trace (no phase annotations)"
SOURCE_LAUNCHES = "the repeating launch pattern (no annotations or step frames)"
SOURCE_NONE = "none"
SOURCE_ORDER = (
    SOURCE_MARKERS,
    SOURCE_SGLANG,
    SOURCE_VLLM,
    SOURCE_ATOM,
    SOURCE_USER,
    SOURCE_VLLM_FRAMES,
    SOURCE_SGLANG_FRAMES,
    SOURCE_INFERRED,
    SOURCE_LAUNCHES,
    SOURCE_NONE,
)
# Sources whose steps are a serving engine's: continuous batching, so a step's time is
# not a request's latency (TTFT/TPOT give way to per-phase step times).
ENGINE_SOURCES = frozenset(
    {SOURCE_SGLANG, SOURCE_VLLM, SOURCE_ATOM, SOURCE_VLLM_FRAMES, SOURCE_SGLANG_FRAMES, SOURCE_LAUNCHES}
)

# Annotation grammars, strongest first.
_PARSERS = (markers, sglang, vllm, atom, user)


def parse_annotation(name: str) -> StepAnnotation | None:
    """The step a range name describes, or None when it names no step."""
    for module in _PARSERS:
        if module is user and (markers.is_ours(name) or pytorch.is_profiler_step(name)):
            return None
        parsed = module.parse(name)
        if parsed is not None:
            return parsed
        if module is markers and markers.is_ours(name):
            return None  # tracekit::generate and friends: ours, and not steps
        if module in (sglang, vllm, atom) and module.is_candidate(name):
            return None  # an engine's empty or IDLE step, or ATOM's dummy forward
    return None


def unread_step_name(name: str) -> str | None:
    """A sentence naming ``name`` when it looks like an engine's step annotation but no grammar
    reads it (``parse_annotation`` gave None and it is not an engine's empty step); else None."""
    if vllm.is_step_like(name) and not vllm.is_candidate(name):
        return (
            f"range {name[:120]!r} looks like a vLLM step annotation but follows no grammar tracekit "
            "reads (execute_[T_]context_C(...)_generation_G(...), execute_new_N_cached_M)"
        )
    if sglang.is_step_like(name) and not sglang.is_candidate(name):
        return f"range {name[:120]!r} looks like an SGLang step annotation but follows no grammar tracekit reads"
    if atom.is_step_like(name) and not atom.is_candidate(name):
        return (
            f"range {name[:120]!r} looks like an ATOM step label but follows no grammar tracekit reads "
            "(prefill[...], decode[...], eager_decode[...])"
        )
    return None


# What each engine's step annotation leaves out without its detailed option, and the option.
_RICHER = {
    SOURCE_SGLANG: (
        sglang,
        (
            "SGLang without roofline annotations: attention costs are estimated from the model (its step[...] "
            "annotations state no keys per request, no sums of q² or q·k); start the profile with roofline "
            'annotations (POST /start_profile with "roofline_annotations": true, "detailed_annotations" in later '
            "SGLang) to make them exact"
        ),
    ),
    SOURCE_VLLM: (
        vllm,
        (
            "vLLM without detailed step annotations: attention costs are estimated from the model (execute_new_N_cached_M "
            "and execute_context_C(Q)_generation_G(Q) state no keys per request, no sums of q² or q·k); start the "
            "server with --profiler-config.detailed_trace_annotation True (vLLM pull request 37524) to write "
            "execute_<T>_context_<C>(sq..sk..sqsq..sqsk..)_generation_<G>(...) and make them exact"
        ),
    ),
    SOURCE_ATOM: (
        atom,
        (
            "ATOM without detailed annotation: attention costs are estimated from the model (its prefill[...]/decode[...] "
            "labels state no sums of q² or q·k); set ATOM_ENABLE_DETAILED_ANNOTATION=1 while profiling to add "
            "sqsq/sqsk/sk to them and make them exact"
        ),
    ),
}


def richer_trace_hint(source: str, names) -> str | None:
    """One sentence when some of ``names`` (the run's step annotation names) are ``source``'s
    engine's step annotations without the fields its detailed option adds, naming that option;
    None when every one has them, or the source has no such option."""
    got = _RICHER.get(source)
    if got is None:
        return None
    module, hint = got
    for name in dict.fromkeys(str(n) for n in names):
        if not module.is_candidate(name) or module.detailed(name):
            continue
        step = module.parse(name)
        sides = [s for s in (step.prefill, step.decode) if s is not None and s.requests] if step else []
        # A native label whose counts imply the sums anyway (ATOM's complete ctx list) needs nothing more.
        if step is not None and (not sides or any(None in (s.kv_tokens, s.sum_q2, s.sum_qk) for s in sides)):
            return hint
    return None


def kv_write_tokens(name: str, grid: tuple[int, int, int]) -> tuple[int, str] | None:
    """(tokens, whose convention) when ``name`` is an engine's KV-cache write kernel that
    launches one block per token written, else None."""
    for module, who in ((vllm, "vLLM"), (sglang, "SGLang")):
        got = module.kv_write_tokens(name, grid)
        if got is not None:
            return got, who
    return None


def per_token_kernel(name: str, grid: tuple[int, int, int]) -> tuple[int, str] | None:
    """(tokens, whose convention) for a kernel other than a KV write that an engine launches
    with one block per token (vLLM's rotary embedding), else None."""
    got = vllm.per_token_kernel(name, grid)
    return None if got is None else (got, "vLLM")


# PyTorch's softmax over the last dimension launches one block per row; the sampler's
# softmax over the logits has one row per request.
_SOFTMAX_ROWS = re.compile(r"\bcunn_SoftMaxForward\b")
# PyTorch's reduce_kernel, reducing a long contiguous dimension (the vocabulary: far more
# values per thread than block rows), splits the input over both block axes and over grid y,
# so grid x is one column per output: the greedy sampler's argmax has one output per request.
_ARGMAX_ROWS = re.compile(r"\breduce_kernel<.*\bArgM(?:ax|in)Ops\b")


def sampler_rows(name: str, grid: tuple[int, int, int]) -> tuple[int, str] | None:
    """(rows, which) of a sampler launch over the logits, one row per request: the row-wise
    softmax (one block per row) or the greedy argmax (grid x = outputs), else None."""
    x, y, z = grid
    if x <= 0 or z != 1:
        return None
    if y == 1 and _SOFTMAX_ROWS.search(name):
        return x, "softmax"
    if y >= 1 and _ARGMAX_ROWS.search(name):
        return x, "argmax"
    return None


def per_request_kernel(name: str, grid: tuple[int, int, int]) -> tuple[int, str] | None:
    """(requests, whose convention) for a kernel an engine launches with one program per
    request (SGLang's KV-index and KV-allocation kernels), else None."""
    got = sglang.per_request_kernel(name, grid)
    return None if got is None else (got, "SGLang")


def decode_attention_sequences(name: str, grid: tuple[int, int, int]) -> int | None:
    """Sequences (requests) a paged decode attention launch covers, from its grid, else None."""
    return vllm.decode_attention_sequences(name, grid)


def input_copy_tokens(htod_sizes: list[int]) -> list[int]:
    """Candidate token counts from a step's host-to-device copy sizes (vLLM's int32 input ids
    beside int64 positions)."""
    return vllm.input_copy_tokens(htod_sizes)


def readback_requests(dtoh_sizes: list[int], source: str | None = None) -> list[int]:
    """Candidate request counts when a step copies exactly one size back to the host: the
    sampled token ids, one per request. SGLang hands them back as int64; vLLM builds differ
    (int64 upstream, int32 in forks), so a step of another source gets both readings."""
    sizes = set(dtoh_sizes)
    if len(sizes) != 1:
        return []
    (size,) = sizes
    widths = (8,) if source in (SOURCE_SGLANG, SOURCE_SGLANG_FRAMES) else (8, 4)
    return sorted({size // w for w in widths if size > 0 and size % w == 0})


def step_frame_source(name: str) -> str | None:
    """The source name when a Python frame is one engine step, else None."""
    if vllm.is_step_frame(name):
        return SOURCE_VLLM_FRAMES
    if sglang.is_step_frame(name):
        return SOURCE_SGLANG_FRAMES
    return None


def capture(name: str) -> tuple[int, str] | None:
    """(batch size, mode) of a graph-capture range (vLLM/SGLang ``capture_<n>_<mode>``, ATOM
    ``capture_graph_bs_<n>``), else None."""
    return vllm.capture(name) or atom.capture(name)


def capture_file_batch(path: str) -> int | None:
    """The batch size a graph-capture trace's file name states (SGLang/ATOM ``bs_<bs>_rank<r>``,
    vLLM ``capture_<n>_<mode>``), else None: for a file whose ranges do not say it."""
    base = os.path.basename(path)
    found = sglang.capture_file_batch(base)
    return found if found is not None else vllm.capture_file_batch(base)


def rank_from_path(path: str, siblings: list[str] | tuple[str, ...] = ()) -> dict | None:
    """Rank, and world size when the run's other files are among ``siblings``, from a per-rank
    trace file name: {"rank", "world_size" (or absent), "source", SGLang "dp"/"pp"/"ep"/"stage"}."""
    found = _rank_and_run(os.path.basename(path))
    if found is None:
        return None
    info, run = found
    ranks = {info["rank"]}
    for other in siblings:
        got = _rank_and_run(os.path.basename(other))
        if got is not None and got[1] == run:
            ranks.add(got[0]["rank"])
    if len(ranks) > 1:
        info["world_size"] = len(ranks)
    return info


def _rank_and_run(base: str) -> tuple[dict, str] | None:
    found = sglang.rank_from_filename(base)
    if found is not None:
        run = str(found.pop("run"))
        return {**found, "source": "SGLang per-rank file name"}, "sglang:" + run
    got = vllm.rank_from_filename(base)
    if got is not None:
        rank, run = got
        return {"rank": rank, "source": "per-rank file name (rank<N>)"}, "vllm:" + run
    return None


__all__ = [
    "DECODE",
    "ENGINE_SOURCES",
    "MIXED",
    "PREFILL",
    "SOURCE_ATOM",
    "SOURCE_INFERRED",
    "SOURCE_LAUNCHES",
    "SOURCE_MARKERS",
    "SOURCE_NONE",
    "SOURCE_ORDER",
    "SOURCE_SGLANG",
    "SOURCE_SGLANG_FRAMES",
    "SOURCE_USER",
    "SOURCE_VLLM",
    "SOURCE_VLLM_FRAMES",
    "UNKNOWN",
    "BatchSide",
    "StepAnnotation",
    "capture",
    "capture_file_batch",
    "decode_attention_sequences",
    "input_copy_tokens",
    "kv_write_tokens",
    "parse_annotation",
    "per_request_kernel",
    "per_token_kernel",
    "sampler_rows",
    "rank_from_path",
    "readback_requests",
    "richer_trace_hint",
    "step_frame_source",
    "unread_step_name",
]
