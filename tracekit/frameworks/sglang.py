"""SGLang: step annotations, step frames and per-rank file names.

Step annotation: ``step[<MODE> key=value ...]`` (text after the bracket is ignored) with MODE ``EXTEND`` (prefill),
``PREFILL``, ``DECODE``, ``MIXED`` (chunked prefill beside decode) or ``IDLE`` (no
work: not a step); keys seen: ``bs`` (requests) and ``toks`` (tokens).

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
"""

from __future__ import annotations

import re

from tracekit.frameworks.base import DECODE, MIXED, PREFILL, UNKNOWN, BatchSide, StepAnnotation

SOURCE = "SGLang step annotations"
FRAME_SOURCE = "SGLang forward_batch_generation frames"

_STEP = re.compile(r"^step\[\s*(?P<mode>[A-Za-z_]+)(?P<args>[^\]]*)\]")
_KV_WRITE = re.compile(r"\bstore_kvcache\b")
_STEP_LIKE = re.compile(r"^step\[")
_PER_REQUEST = re.compile(r"^(?:create_flashinfer_kv_indices_triton|alloc_decode_kernel|alloc_extend_kernel)$")
_KV = re.compile(r"(\w+)\s*=\s*(\d+)")
_MODES = {"EXTEND": PREFILL, "PREFILL": PREFILL, "DECODE": DECODE, "MIXED": MIXED}
_FRAME = re.compile(r"(?:^|/)sglang/srt/managers/tp_worker\w*\.py\(\d+\): forward_batch_generation$")
_RANK_FILE = re.compile(
    r"-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
    r"(?:-(?P<stage>EXTEND|DECODE|PREFILL))?(?:\.pt)?\.trace\.json", re.IGNORECASE)


def is_candidate(name: str) -> bool:
    return name.startswith("step[")


def parse(name: str) -> StepAnnotation | None:
    """The step an SGLang ``step[...]`` annotation describes; None for other names and IDLE."""
    if not is_candidate(name):
        return None
    m = _STEP.match(name)
    mode = m["mode"].upper() if m else None
    if m is None or (mode not in _MODES and mode != "IDLE"):
        return StepAnnotation(UNKNOWN, SOURCE, "malformed SGLang step annotation",
                              problem=f"SGLang step annotation {name[:120]!r} is not step[EXTEND|DECODE|MIXED ...]")
    if mode == "IDLE":
        return None
    fields = {k.lower(): int(v) for k, v in _KV.findall(m["args"])}
    phase = _MODES[mode]
    requests, tokens = fields.get("bs"), fields.get("toks", fields.get("tokens"))
    problem = None
    if requests is not None and tokens is not None and tokens < requests:
        problem = f"SGLang step annotation {name[:120]!r} has fewer tokens than requests (tokens ignored)"
        tokens = None
    if phase == DECODE and tokens is None:
        tokens = requests  # one new token per request
    side = BatchSide(requests=requests, tokens=tokens)
    return StepAnnotation(
        phase, SOURCE, f"SGLang forward mode {mode}",
        prefill=side if phase == PREFILL else None,
        decode=side if phase == DECODE else None,
        # A MIXED step's split between its sides is not in the annotation.
        tokens=tokens, batch=requests, problem=problem,
    )


def kv_write_tokens(name: str, grid: tuple[int, int, int]) -> int | None:
    """Tokens an SGLang ``store_kvcache`` launch wrote (one block per token), else None."""
    x, y, z = grid
    return x if x > 0 and y == 1 and z == 1 and _KV_WRITE.search(name) else None


def per_request_kernel(name: str, grid: tuple[int, int, int]) -> int | None:
    """Requests a one-program-per-request SGLang kernel covered (grid x), else None."""
    x, y, z = grid
    return x if x > 0 and y == 1 and z == 1 and _PER_REQUEST.match(name.strip()) else None


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
