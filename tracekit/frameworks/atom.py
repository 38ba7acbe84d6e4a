"""ROCm ATOM (AMD's inference engine on AITER): step labels.

ATOM's model runner wraps each forward in one ``record_function`` range whose name is built by
``build_run_label`` (ROCm/ATOM ``atom/model_engine/run_labels.py``; earlier inline in
``ModelRunner.run_model``, ``atom/model_engine/model_runner.py``):

- ``prefill[bs=<B> tok=<T> ctx=<lengths>]``: an eager prefill of B requests, T tokens; ``ctx``
  each request's context length (its keys, cached prefix and new tokens together), one number,
  a list ``[a, b]`` of up to five, or ``[a, b, c]...+N`` past five;
- ``decode[bs=<B> tok=<T> [p=<P>] d=<D> [spec=<S>]]``: a step replayed from a graph; ``bs`` reads
  ``<real>/<graph>`` when the replayed graph is padded above the real batch (``bs=117/128``);
  ``p``/``d`` the prefill and decode requests in it, ``spec`` the speculative (MTP) steps, each
  decode request then computing S + 1 query tokens;
- ``eager_decode[bs=<B> tok=<T> ctx=...]``: a decode forced eager (no graph);
- ``dummy_decode[...]``, ``dummy_eager_decode[...]``, ``dummy_prefill[...]``: data-parallel
  sync dummies and warmup: no request's work, so not steps;
- `` tbo=1`` last in the bracket: the step ran as two overlapped micro-batches (still one step).

Detailed annotation (ATOM pull request #477, ``ATOM_ENABLE_DETAILED_ANNOTATION=1`` while
profiling; ``ModelRunner._detailed_label_suffix`` in ``model_runner.py``, the sums from
``Scheduler.compute_detailed_aggregates`` in ``scheduler.py``): `` sqsq=<Σq²> sqsk=<Σq·k>
sk=<Σk>`` inside the bracket, summed over every request of the forward (ATOM does not split
them by phase). Examples from the pull request: ``prefill[bs=1 tok=1024 ctx=1024 sqsq=1048576
sqsk=1048576 sk=1024]``, ``decode[bs=64 tok=64 d=64 sqsq=64 sqsk=65600 sk=65600]``.

What the native label implies: a decode request computes one token (S + 1 with ``spec``); a
complete ``ctx`` list gives the keys, and, where each request's query tokens follow (one request
ran; every request computes one token; the lengths add up to the tokens, so no request has a
cached prefix), the sums too.
"""

from __future__ import annotations

import re

from tracekit.frameworks.base import MIXED, UNKNOWN, BatchSide, StepAnnotation, consistent, known_sum, phase_of

SOURCE = "ATOM step labels"

_LABEL = re.compile(r"^(?P<kind>(?:dummy_)?(?:eager_)?(?:prefill|decode))\[(?P<body>.*)\]\s*$", re.DOTALL)
_CANDIDATE = re.compile(r"^(?:dummy_)?(?:eager_)?(?:prefill|decode)\[")
# Values: a bracketed list (with its ``...+N`` tail) or a bare token.
_KV = re.compile(r"(\w+)=(\[[^\]]*\](?:\.\.\.\+\d+)?|[^\s\]]+)")
_INT = re.compile(r"^\d+$")
_BS = re.compile(r"^(\d+)(?:/(\d+))?$")
_CTX_LIST = re.compile(r"^\[([\d,\s]*)\](\.\.\.\+\d+)?$")
# A lowercase word and a bracket holding ``bs=``: shaped like an ATOM label of a kind no grammar
# here reads (a new ATOM version), named in a note rather than ignored in silence.
_STEP_LIKE = re.compile(r"^[a-z][a-z_]*\[[^\]]*\bbs=")


def is_candidate(name: str) -> bool:
    return bool(_CANDIDATE.match(name))


def is_step_like(name: str) -> bool:
    return bool(_STEP_LIKE.match(name)) and not name.startswith("step[")


def detailed(name: str) -> bool:
    """Whether the label carries ATOM's detailed sums (``ATOM_ENABLE_DETAILED_ANNOTATION=1``)."""
    return "sqsq=" in name and "sqsk=" in name


def parse(name: str) -> StepAnnotation | None:
    """The step an ATOM label describes; None for other names and for dummy forwards."""
    if not is_candidate(name):
        return None
    m = _LABEL.match(name.strip())
    fields = dict(_KV.findall(m["body"])) if m else {}
    bs = _BS.match(fields.get("bs", ""))
    if m is None or bs is None:
        return StepAnnotation(
            UNKNOWN,
            SOURCE,
            "malformed ATOM step label",
            problem=f"ATOM step label {name[:120]!r} is not prefill|decode[bs=N ...]",
        )
    kind = m["kind"]
    if kind.startswith("dummy_"):
        return None  # a data-parallel sync dummy or warmup forward: no request's work
    problems: list[str] = []
    nums = {k: int(v) for k, v in fields.items() if _INT.match(v)}
    for key in ("tok", "p", "d", "spec", "sqsq", "sqsk", "sk"):
        if key in fields and key not in nums:
            problems.append(f"its {key}={fields[key][:20]!r} is not a count (ignored)")
    requests, graph = int(bs[1]), bs[2]
    tokens = nums.get("tok")
    sums = {f: nums[k] for k, f in (("sk", "kv_tokens"), ("sqsq", "sum_q2"), ("sqsk", "sum_qk")) if k in nums}
    notes = [f"the replayed graph was padded to {graph}"] if graph is not None and int(graph) != requests else []
    prefill = decode = None
    if kind == "prefill":
        prefill = _prefill(requests, tokens, sums or _from_ctx(fields.get("ctx"), requests, tokens), problems)
    elif nums.get("p"):
        # Prefill requests replayed beside decode ones: the sums cover both, and ATOM does not
        # split them, so each side gets its requests and tokens only.
        d = nums.get("d", requests - nums["p"])
        per = nums.get("spec", 0) + 1
        dec_tokens = d * per
        pre_tokens = tokens - dec_tokens if tokens is not None and tokens - dec_tokens >= nums["p"] else None
        prefill = consistent(BatchSide(requests=nums["p"], tokens=pre_tokens), "prefill", problems)
        decode = consistent(BatchSide(requests=d, tokens=dec_tokens), "decode", problems)
        if nums["p"] + d != requests:
            problems.append(f"its p={nums['p']} and d={d} do not add up to bs={requests}")
        if sums:
            notes.append("its sqsq/sqsk/sk sums cover both phases' requests and are not split between them")
    else:
        d = nums.get("d", requests)
        if d != requests:
            problems.append(f"its d={d} is not bs={requests}")
        implied = d * (nums.get("spec", 0) + 1)
        if tokens is not None and tokens != implied:
            problems.append(f"its tok={tokens} is not {implied} (d x (spec + 1))")
        tokens = tokens if tokens is not None else implied
        decode = consistent(
            BatchSide(requests=d, tokens=tokens, **(sums or _from_ctx(fields.get("ctx"), d, tokens))),
            "decode",
            problems,
        )
    phase = phase_of(prefill, decode)
    if phase is None:
        return None  # no requests: nothing was computed
    total = known_sum([s.tokens for s in (prefill, decode) if s is not None])
    if phase == MIXED and tokens is not None:
        total = tokens
    what = {"prefill": "prefill", "decode": "graph-replayed", "eager_decode": "eager"}[kind]
    evidence = f"ATOM {what} step" + (" with its detailed sums" if detailed(name) else "")
    if notes:
        evidence += " (" + "; ".join(notes) + ")"
    return StepAnnotation(
        phase,
        SOURCE,
        evidence,
        prefill=prefill,
        decode=decode,
        tokens=total,
        batch=requests,
        problem=f"ATOM step label {name[:120]!r}: " + "; ".join(problems) if problems else None,
    )


def _prefill(requests: int, tokens: int | None, sums: dict[str, int], problems: list[str]) -> BatchSide:
    return consistent(BatchSide(requests=requests, tokens=tokens, **sums), "prefill", problems)


def _from_ctx(ctx: str | None, requests: int, tokens: int | None) -> dict[str, int]:
    """Keys and sums a native label implies: its ``ctx`` context lengths, when the list is complete
    (one per request, not cut at five), give the keys Σk; the sums need each request's query
    tokens q, known where one request ran (q = tokens), where every request computes one token
    (q = 1: Σq² = n, Σq·k = Σk), or where the lengths add up to the tokens (k >= q for every
    request, so q = k for each, no cached prefix: Σq² = Σq·k = Σk²)."""
    if ctx is None or tokens is None:
        return {}
    if _INT.match(ctx):
        lengths = [int(ctx)]
    else:
        m = _CTX_LIST.match(ctx)
        if m is None or m[2] or not m[1].strip():
            return {}  # cut past five requests: the keys are not all there
        lengths = [int(x) for x in m[1].split(",") if x.strip()]
    if len(lengths) != requests:
        return {}
    keys = sum(lengths)
    if requests == 1:
        return {"kv_tokens": keys, "sum_q2": tokens * tokens, "sum_qk": tokens * keys}
    if tokens == requests:
        return {"kv_tokens": keys, "sum_q2": requests, "sum_qk": keys}
    if keys == tokens:
        squares = sum(k * k for k in lengths)
        return {"kv_tokens": keys, "sum_q2": squares, "sum_qk": squares}
    return {}


# Graph capture: ATOM's model runner wraps each graph it captures in
# ``record_function(f"capture_graph_bs_{bs}")`` (``ModelRunner.capture_cudagraph``, with
# ``mark_trace`` on): the batch the graph was captured at.
_CAPTURE = re.compile(r"^capture_graph_bs_(\d+)$")


def capture(name: str) -> tuple[int, str] | None:
    """(batch size, "ATOM") of a ``capture_graph_bs_<n>`` graph-capture range, else None."""
    m = _CAPTURE.match(name)
    return (int(m[1]), "ATOM") if m else None
