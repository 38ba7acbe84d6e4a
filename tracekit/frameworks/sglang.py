"""SGLang: step annotations, step frames and per-rank file names.

Step annotation: ``step[<MODE> key=value ...]`` (text after the bracket is ignored) with MODE ``EXTEND`` (prefill),
``PREFILL``, ``DECODE``, ``MIXED`` (chunked prefill beside decode) or ``IDLE`` (no
work: not a step); keys: ``bs`` (requests) and, for EXTEND, ``toks`` (tokens). SGLang builds
the name in ``build_step_span_name`` (sgl-project/sglang
``python/sglang/srt/model_executor/step_span_utils.py``, later ``srt/utils/profile_utils.py``).

Roofline fields (SGLang mid-2026, pull request #24911: the ``roofline_annotations`` option of
``/start_profile``, renamed ``detailed_annotations`` later; ``build_roofline_suffix`` /
``build_detailed_annotation_suffix`` in that file) fold into the same name, one group per
phase: ``c_`` the context (prefill, extend-shaped) requests, ``g_`` the generation (decode)
ones; ``sq`` their query tokens, ``sk`` their keys (cached prefix included), ``sqsq`` the sum
of q², ``sqsk`` the sum of q·k; a MIXED step also states ``c=``/``g=``, the requests of each
group (a request extending by one token counts as generation). Examples from SGLang's own tests
(the unit tests of #24911, ``build_step_span_name`` with
detailed annotations on): ``step[EXTEND bs=2 toks=12 c_sq=12 c_sqsq=80 c_sqsk=120
c_sk=20]``, ``step[DECODE bs=2 g_sq=2 g_sqsq=2 g_sqsk=30 g_sk=30]``, ``step[MIXED bs=2 c=1 g=1
c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]``; the first version
wrote no ``c_sq``/``g_sq`` in a one-mode step (``step[DECODE bs=64 g_sqsq=64 g_sqsk=100032
g_sk=100032]``). What a one-mode step leaves unsaid is implied: its group holds all ``bs``
requests and the step's tokens (``toks``; one per request in DECODE, ``g_sq`` where
speculative decoding verifies several).

Speculative decoding's forward modes (``ForwardMode`` in sgl-project/sglang
``python/sglang/srt/model_executor/forward_batch_info.py``; the name is ``step[<mode.name> bs=N``,
``build_step_span_name``): ``TARGET_VERIFY`` "verify a batch in the target model": the running
requests' draft tokens, ``num_tokens_per_req`` (the draft-token count) each, scored by the
target model; ``DRAFT_EXTEND`` / ``DRAFT_EXTEND_V2`` "extend a batch in the draft model": the
draft model run over the tokens the target accepted. Both serve requests already generating, so
both are decode-phase steps, of several query tokens per request; their tokens are what ``toks``
or the group's ``sq`` states (the detailed suffix writes ``g_`` fields for TARGET_VERIFY and, as
extend-shaped work, ``c_`` fields for DRAFT_EXTEND_V2: ``build_detailed_annotation_suffix`` and
``_decode_query_width`` there), else unknown (not one per request), left to the trace's evidence.
``SPLIT_PREFILL`` ("split prefill for PD multiplexing") is a prefill. ``PREBUILT`` (a
disaggregated decode worker's batch whose KV cache arrived ready: the scheduler runs no forward
for it, ``_run_batch_prebuilt``) and ``DUMMY_FIRST`` (older builds: "a dummy first batch to start
the pipeline for overlap scheduler") compute nothing: like IDLE, not steps. Other modes
(``DLLM_EXTEND``, a diffusion model's) are noted as unread.

Step frame (no annotations, ``with_stack`` on): the Python frame
``sglang/srt/managers/tp_worker.py(NNN): forward_batch_generation``.

KV-cache writes: ``store_kvcache`` launches one block per token written (grid x = tokens),
the one figure of an extend step's tokens a replayed or shape-less trace keeps.

Per-request kernels: the attention backends' ``create_flashinfer_kv_indices_triton`` and the
paged KV allocator's ``alloc_decode_kernel`` / ``alloc_extend_kernel`` are Triton kernels
launched with grid ``(bs,)``, one program per request: grid x is the batch, launched
eagerly before a replayed graph, so a graph-replayed decode step keeps it.

Per-rank files: ``[<prefix>-]<profile id>-TP-<tp>[-DP-<dp>][-PP-<pp>][-EP-<ep>][-<STAGE>].trace.json.gz``,
STAGE being ``EXTEND`` or ``DECODE`` when profiled by stage.

Graph-capture traces (the TraceLens capture patches of SGLang and of ROCm's ATOM): one file per
captured batch size, ``bs_<bs>_rank<r>.json.gz``, in one folder.
"""

from __future__ import annotations

import re

from tracekit.frameworks.base import (
    DECODE,
    MIXED,
    PREFILL,
    UNKNOWN,
    BatchSide,
    StepAnnotation,
    consistent,
    phase_of,
    sides_total,
)

SOURCE = "SGLang step annotations"
FRAME_SOURCE = "SGLang forward_batch_generation frames"

_STEP = re.compile(r"^step\[\s*(?P<mode>[A-Za-z_][A-Za-z0-9_]*)(?P<args>[^\]]*)\]")  # DRAFT_EXTEND_V2
_KV_WRITE = re.compile(r"\bstore_kvcache\b")
_STEP_LIKE = re.compile(r"^step\[")
_PER_REQUEST = re.compile(r"^(?:create_flashinfer_kv_indices_triton|alloc_decode_kernel|alloc_extend_kernel)$")
_KV = re.compile(r"(\w+)\s*=\s*(\d+)")
_ROOFLINE = re.compile(r"\b[cg]_sqsq\s*=\s*\d")
_MODES = {
    "EXTEND": PREFILL,
    "PREFILL": PREFILL,
    "SPLIT_PREFILL": PREFILL,
    "DECODE": DECODE,
    "MIXED": MIXED,
    "TARGET_VERIFY": DECODE,
    "DRAFT_EXTEND": DECODE,
    "DRAFT_EXTEND_V2": DECODE,
}
# Speculative decoding's decode-phase modes (several query tokens per request), and the prefix
# of the group their detailed fields are written under (the compute shape: ``g_`` for verify,
# ``c_`` for the extend-shaped draft extend).
_SPECULATIVE = {"TARGET_VERIFY": "g", "DRAFT_EXTEND": "c", "DRAFT_EXTEND_V2": "c"}
# Modes that run no forward: not steps.
_NO_WORK = ("IDLE", "PREBUILT", "DUMMY_FIRST")
_FRAME = re.compile(r"(?:^|/)sglang/srt/managers/tp_worker\w*\.py\(\d+\): forward_batch_generation$")
_RANK_FILE = re.compile(
    r"-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
    r"(?:-(?P<stage>EXTEND|DECODE|PREFILL))?(?:\.pt)?\.trace\.json",
    re.IGNORECASE,
)
_CAPTURE_FILE = re.compile(r"^bs_(\d+)_rank\d+\.")


def is_candidate(name: str) -> bool:
    return name.startswith("step[")


def parse(name: str) -> StepAnnotation | None:
    """The step an SGLang ``step[...]`` annotation describes; None for other names and IDLE."""
    if not is_candidate(name):
        return None
    m = _STEP.match(name)
    mode = m["mode"].upper() if m else None
    if m is None or (mode not in _MODES and mode not in _NO_WORK):
        return StepAnnotation(
            UNKNOWN,
            SOURCE,
            "malformed SGLang step annotation",
            problem=f"SGLang step annotation {name[:120]!r} is not step[EXTEND|DECODE|MIXED ...]",
        )
    if mode in _NO_WORK:
        return None
    fields = {k.lower(): int(v) for k, v in _KV.findall(m["args"])}
    phase = _MODES[mode]
    requests, tokens = fields.get("bs"), fields.get("toks", fields.get("tokens"))
    problems: list[str] = []
    if requests is not None and tokens is not None and tokens < requests:
        problems.append("has fewer tokens than requests (tokens ignored)")
        tokens = None
    prefill = decode = None
    if phase == PREFILL:
        prefill = _group(fields, "c", fields.get("c", requests), tokens, problems)
    elif mode in _SPECULATIVE:
        # Several tokens per request, as many as toks or the group's sq say; none implied.
        decode = _group(fields, _SPECULATIVE[mode], requests, tokens, problems)
    elif phase == DECODE:
        # One new token per request, unless g_sq says more (speculative decoding's verify).
        decode = _group(fields, "g", fields.get("g", requests), tokens, problems, implied=requests)
    elif "c" in fields and "g" in fields:
        # A MIXED step with its roofline fields: each group's requests and sums are stated.
        prefill = _group(fields, "c", fields["c"], None, problems)
        decode = _group(fields, "g", fields["g"], None, problems, implied=fields["g"])
        if requests is not None and fields["c"] + fields["g"] != requests:
            problems.append(f"its groups hold {fields['c']} + {fields['g']} requests but bs={requests}")
        split = phase_of(prefill, decode)
        if split is None:
            return None  # no requests in either group: nothing was computed
        phase = split
    # A MIXED step without the roofline fields does not say how it splits: no sides.
    if prefill is not None or decode is not None:
        tokens, _ = sides_total(prefill, decode)
    roofline = any(k.startswith(("c_", "g_")) for k in fields)
    return StepAnnotation(
        phase,
        SOURCE,
        f"SGLang forward mode {mode}" + (" with its roofline fields" if roofline else ""),
        prefill=prefill,
        decode=decode,
        tokens=tokens,
        batch=requests,
        problem=f"SGLang step annotation {name[:120]!r}: " + "; ".join(problems) if problems else None,
    )


# Roofline field suffixes and the ``BatchSide`` field each states.
_GROUP_FIELDS = {"sq": "tokens", "sk": "kv_tokens", "sqsq": "sum_q2", "sqsk": "sum_qk"}


def _group(
    fields: dict[str, int],
    prefix: str,
    requests: int | None,
    tokens: int | None,
    problems: list[str],
    implied: int | None = None,
) -> BatchSide:
    """One group's side: its stated ``<prefix>_sq/sk/sqsq/sqsk`` fields; ``tokens`` the base
    label states for it (``toks``), ``implied`` its tokens where nothing states them (a decode
    group: one per request). A base label that contradicts the group's own count voids the group's
    sums (they describe another batch), with a note; counts that contradict each other are
    dropped (``base.consistent``)."""
    stated = {f: fields[f"{prefix}_{k}"] for k, f in _GROUP_FIELDS.items() if f"{prefix}_{k}" in fields}
    if tokens is not None and stated.get("tokens", tokens) != tokens:
        problems.append(f"states {tokens} tokens but {prefix}_sq={stated['tokens']} ({prefix}_ fields ignored)")
        stated = {}
    if tokens is not None:
        stated["tokens"] = tokens
    elif "tokens" not in stated and implied is not None:
        stated["tokens"] = implied
    what = "context (c_)" if prefix == "c" else "generation (g_)"
    return consistent(BatchSide(requests=requests, **stated), what, problems)


def kv_write_tokens(name: str, grid: tuple[int, int, int]) -> int | None:
    """Tokens an SGLang ``store_kvcache`` launch wrote (one block per token), else None."""
    x, y, z = grid
    return x if x > 0 and y == 1 and z == 1 and _KV_WRITE.search(name) else None


def per_request_kernel(name: str, grid: tuple[int, int, int]) -> int | None:
    """Requests a one-program-per-request SGLang kernel covered (grid x), else None."""
    x, y, z = grid
    return x if x > 0 and y == 1 and z == 1 and _PER_REQUEST.match(name.strip()) else None


def detailed(name: str) -> bool:
    """Whether the annotation carries the roofline fields (a group's sum of q²)."""
    return bool(_ROOFLINE.search(name))


def is_step_like(name: str) -> bool:
    return bool(_STEP_LIKE.match(name))


def is_step_frame(name: str) -> bool:
    return bool(_FRAME.search(name))


def rank_from_filename(basename: str) -> dict[str, int | str] | None:
    """{"rank": tp rank, "dp"/"pp"/"ep": ..., "stage": ..., "run": run key} from an SGLang trace
    file name. Files of one run share the run key: the profile id and the stage."""
    m = _RANK_FILE.search(basename)
    if not m:
        return None
    out: dict[str, int | str] = {"rank": int(m["tp"]), "run": basename[: m.start()] + "|" + (m["stage"] or "").upper()}
    for key in ("dp", "pp", "ep"):
        if m[key] is not None:
            out[key] = int(m[key])
    if m["stage"]:
        out["stage"] = m["stage"].upper()
    return out


def capture_file_batch(basename: str) -> int | None:
    """The batch size a graph-capture trace's file name states (``bs_<bs>_rank<r>...``), else None."""
    m = _CAPTURE_FILE.match(basename)
    return int(m[1]) if m else None
