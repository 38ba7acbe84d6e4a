"""vLLM: step annotations, step frames, graph-capture annotations, per-rank file names.

Step annotation (one ``record_function`` range per engine step), three forms:

- detailed (``--profiler-config.detailed_trace_annotation True``, vLLM pull request 37524, 2026):
  ``execute_<T>_context_<C>(sq<Q>sk<K>sqsq<ΣQ²>sqsk<ΣQK>)_generation_<G>(sq..sk..sqsq..sqsk..)``:
  T tokens scheduled in all; C prefill (context) requests computing Q query tokens over
  K keys, and the sums over requests of q² and q·k that causal attention's work needs;
  G decode (generation) requests with the same four numbers;
- older: ``execute_context_<C>(<Q>[_<ΣQ²>])_generation_<G>(<Q>[_<ΣQ²>])``;
- default since vLLM pull request 22496 (August 2025, ``gpu_worker.execute_model``):
  ``execute_new_<N>_cached_<M>``: N requests scheduled for the first
  time (their prefill, or its first chunk) and M already running (decode, one token
  each, unless a chunked prefill continues: the evidence of the step's tokens tells).
  No token counts: those come from the trace's evidence (``analysis.steps.step_tokens``).

A step with C > 0 and G > 0 (N > 0 and M > 0) is a mixed (chunked-prefill) step.

What a default vLLM trace (no shapes) still says about a step's tokens and batch,
each an engine convention read by ``analysis.steps.step_tokens``:

- the KV-cache write kernels (``reshape_and_cache_kernel``, ``reshape_and_cache_flash_kernel``,
  ``concat_and_cache_mla_kernel``) launch one block per token written: grid x = tokens;
- the rotary embedding kernel (``vllm::rotary_embedding_kernel``) launches one block per
  token: grid x = tokens;
- the model runner copies the step's input ids (int32) and positions (int64) host to
  device: two copies of 4T and 8T bytes for T tokens;
- the paged decode attention kernels launch one block row per sequence:
  ``paged_attention_v1/v2_kernel`` grid (heads, sequences, partitions), ROCm
  ``paged_attention_ll4mi_*`` grid (sequences, partitions, KV heads).

Step frame (no annotations, ``with_stack`` on): the Python frame
``vllm/v1/worker/gpu_model_runner.py(NNN): execute_model`` (V0:
``vllm/worker/model_runner.py``); the executor and worker frames of the same name
enclose it and are not steps.

Graph capture: ``capture_<n>_<mode>`` ranges around each captured graph. A capture folder
(``capture_torch_profiler_dir``) holds one file per size, ``graph_capture_rank_<r>.<time>.pt.trace.json.gz``:
the name does not state the size, the range inside does; a file named after its range
(``capture_<n>_<mode>.json.gz``) states it.

Per-rank files: the worker names its trace ``<instance>-rank-<r>.<time>.pt.trace.json.gz``
(older builds and forks: ``rank<r>.<time>...``).
"""

from __future__ import annotations

import re

from tracekit.frameworks.base import UNKNOWN, BatchSide, StepAnnotation, consistent, phase_of, sides_total

SOURCE = "vLLM-style execute annotations"
FRAME_SOURCE = "vLLM execute_model frames"

_EXECUTE = re.compile(
    r"^execute(?:_(?P<total>\d+))?_context_(?P<ctx>\d+)\((?P<ctx_args>[^()]*)\)"
    r"_generation_(?P<gen>\d+)\((?P<gen_args>[^()]*)\)"
)
# Longest keys first: "sqsq" must not be read as "sq" followed by garbage.
_FIELD = re.compile(r"(sqsq|sqsk|sq|sk)[=:]?(\d+)")
_FIELD_NAMES = {"sq": "tokens", "sk": "kv_tokens", "sqsq": "sum_q2", "sqsk": "sum_qk"}
_DETAILED = re.compile(r"_context_\d+\([^()]*sk\d+[^()]*sqsk\d+")
_OLD_ARGS = re.compile(r"^(\d+)(?:_(\d+))?$")
_FRAME = re.compile(r"(?:^|/)vllm/(?:[\w.]+/)*\w*model_runner\.py\(\d+\): execute_model$")
_NEW_CACHED = re.compile(r"^execute_new_(\d+)_cached_(\d+)$")
# Names that look like a step annotation of some vLLM version (``execute_`` then counts):
# read by no grammar here, they are named in a note rather than ignored in silence.
_STEP_LIKE = re.compile(r"^execute_(?!model\b)\w*\d")
_KV_WRITE = re.compile(r"\b(?:vllm::)?(?:reshape_and_cache(?:_flash)?_kernel(?:_flash)?|concat_and_cache_mla_kernel)\b")
_ROTARY = re.compile(r"\bvllm::(?:batched_)?rotary_embedding_kernel\b")
_PAGED_V12 = re.compile(r"\bpaged_attention_v[12]_kernel\b")
_PAGED_LL4MI = re.compile(r"\bpaged_attention_ll4mi_QKV\w*_kernel\b")
_CAPTURE = re.compile(r"^capture_(\d+)_(\w+)$")
_CAPTURE_FILE = re.compile(r"^capture_(\d+)(?=[._-])")
_RANK_FILE = re.compile(r"(?:^|[-_.])rank[-_]?(\d+)(?=[._-])", re.IGNORECASE)


def is_candidate(name: str) -> bool:
    """Names that claim to be a vLLM step annotation (parsed or reported as malformed)."""
    return name.startswith("execute") and (
        ("_context_" in name and "_generation_" in name) or name.startswith("execute_new_")
    )


def is_step_like(name: str) -> bool:
    """A name shaped like a vLLM step annotation (``execute_`` and counts), read or not."""
    return bool(_STEP_LIKE.match(name))


def detailed(name: str) -> bool:
    """Whether the annotation is the detailed form (keys and the sums of q² and q·k stated)."""
    return bool(_DETAILED.search(name))


def parse(name: str) -> StepAnnotation | None:
    """The step a vLLM ``execute_...`` annotation describes; None for other names.

    A name that starts like one but does not parse gives phase UNKNOWN and a
    ``problem``: the range is still a step, its phase then comes from kernel evidence.
    """
    if not is_candidate(name):
        return None
    if name.startswith("execute_new_"):
        return _parse_new_cached(name)
    m = _EXECUTE.match(name.strip())
    if m is None:
        return StepAnnotation(
            UNKNOWN,
            SOURCE,
            "malformed vLLM execute annotation",
            problem=f"vLLM step annotation {name[:120]!r} does not follow execute_[T_]context_C(...)_generation_G(...)",
        )
    problems: list[str] = []
    rest = name.strip()[m.end() :]
    if rest:
        problems.append(f"trailing text {rest[:40]!r} after the generation counts")
    prefill = _side(int(m["ctx"]), m["ctx_args"], "context", problems)
    decode = _side(int(m["gen"]), m["gen_args"], "generation", problems)
    tokens, requests = sides_total(prefill, decode)
    if m["total"] is not None:
        total = int(m["total"])
        if tokens is not None and total != tokens:
            problems.append(f"it schedules {total} tokens but its parts add up to {tokens}")
        tokens = total
    phase = phase_of(prefill, decode)
    if phase is None:
        return None  # an empty step (no requests): nothing was computed
    evidence = f"vLLM batch: {prefill.requests} context (prefill) and {decode.requests} generation (decode) requests"
    return StepAnnotation(
        phase,
        SOURCE,
        evidence,
        prefill=prefill,
        decode=decode,
        tokens=tokens,
        batch=requests,
        problem="; ".join(problems) or None,
    )


def _parse_new_cached(name: str) -> StepAnnotation | None:
    """``execute_new_<N>_cached_<M>``: requests per side; tokens only where implied (a running
    request decodes one token). None for an empty step (N = M = 0)."""
    m = _NEW_CACHED.match(name.strip())
    if m is None:
        return StepAnnotation(
            UNKNOWN,
            SOURCE,
            "malformed vLLM execute annotation",
            problem=f"vLLM step annotation {name[:120]!r} does not follow execute_new_N_cached_M",
        )
    new, cached = int(m[1]), int(m[2])
    prefill = BatchSide(requests=new, tokens=0 if new == 0 else None)
    decode = BatchSide(requests=cached, tokens=cached)
    phase = phase_of(prefill, decode)
    if phase is None:
        return None
    tokens = cached if new == 0 else None
    evidence = (
        f"vLLM batch: {new} new (prefill) and {cached} running (decode) requests; the annotation states no token counts"
    )
    return StepAnnotation(phase, SOURCE, evidence, prefill=prefill, decode=decode, tokens=tokens, batch=new + cached)


def kv_write_tokens(name: str, grid: tuple[int, int, int]) -> int | None:
    """Tokens a KV-cache write kernel wrote (one block per token), else None."""
    x, y, z = grid
    return x if x > 0 and y == 1 and z == 1 and _KV_WRITE.search(name) else None


def per_token_kernel(name: str, grid: tuple[int, int, int]) -> int | None:
    """Tokens a kernel launched with one block per token covered (rotary embedding), else None."""
    x, y, z = grid
    return x if x > 0 and y == 1 and z == 1 and _ROTARY.search(name) else None


def decode_attention_sequences(name: str, grid: tuple[int, int, int]) -> int | None:
    """Sequences a paged decode attention launch covers (its grid's sequence axis), else None."""
    if min(grid) <= 0:
        return None
    if _PAGED_V12.search(name):
        return grid[1]
    if _PAGED_LL4MI.search(name):
        return grid[0]
    return None


def input_copy_tokens(sizes: list[int]) -> list[int]:
    """Token counts T for which a step's host-to-device copies hold both 4T bytes (int32 input
    ids) and 8T bytes (int64 positions): the candidates, smallest first."""
    have = set(sizes)
    return sorted({s // 4 for s in have if s > 0 and s % 4 == 0 and 2 * s in have})


def _side(requests: int, text: str, what: str, problems: list[str]) -> BatchSide:
    """One side's counts: detailed ``sq..sk..`` fields, or the older ``<tokens>[_<Σq²>]``."""
    text = text.strip()
    values: dict[str, int] = {}
    if text:
        old = _OLD_ARGS.match(text)
        if old:
            values["tokens"] = int(old[1])
            if old[2] is not None:
                values["sum_q2"] = int(old[2])
        else:
            found = _FIELD.findall(text)
            rest = _FIELD.sub("", text).strip(" ,_;")
            if not found or rest:
                problems.append(f"its {what} counts {text[:60]!r} are not sq/sk/sqsq/sqsk numbers")
            for key, value in found:
                values[_FIELD_NAMES[key]] = int(value)
    side = BatchSide(requests=requests, **values)
    return consistent(side, what, problems)


def is_step_frame(name: str) -> bool:
    """The model runner's ``execute_model`` Python frame: one engine step."""
    return bool(_FRAME.search(name))


def capture(name: str) -> tuple[int, str] | None:
    """(batch size, mode) of a ``capture_<n>_<mode>`` graph-capture range, else None."""
    m = _CAPTURE.match(name)
    return (int(m[1]), m[2]) if m else None


def capture_file_batch(basename: str) -> int | None:
    """The batch size a graph-capture trace named after its range states (``capture_<n>_...``), else None."""
    m = _CAPTURE_FILE.match(basename)
    return int(m[1]) if m else None


def rank_from_filename(basename: str) -> tuple[int, str] | None:
    """(rank, run key) of a vLLM per-rank trace file name, else None. Files of one run share
    the run key: the name before the rank."""
    m = _RANK_FILE.search(basename)
    return (int(m[1]), basename[: m.start()]) if m else None
