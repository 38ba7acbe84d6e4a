"""KV tokens from the run's history, where no source states a step's keys.

A decode step's attention reads, per request, every key the request has written: its prompt
(written by the prefill that admitted it) and each token decoded since, plus the new token's
own. Default engine traces (vLLM's ``execute_new_N_cached_M``, steps inferred from the launch
pattern) state the requests of each step but not their keys; the trace holds them anyway when
it holds the prefills that admitted the requests and every step since.

``kv_from_history`` walks each thread's steps in order and carries the running requests as an
aggregate: how many (``N``) and the keys they have written (``S``). A step's decode side of
``D`` requests (one query each) reads ``S + D`` keys when it runs all of them (``D == N``) and
then ``S`` grows by ``D``; the new requests of its prefill side add their prompt tokens (keys
with no cached prefix) to ``S`` and their count to ``N``. Where the decode batch shrank
(``D < N``), the trace does not say which requests finished: those running are taken at the
mean context (``S * D / N``), and the figure's confidence drops to ``SHRUNK_CONFIDENCE``; an engine
that runs every running request in each step (vLLM) says the pool is empty with a step that runs
none on (``execute_new_2_cached_0``), and the history starts afresh there. Where a
decode side holds requests the history never admitted (``D > N``: a trace that starts mid-run),
or a step's counts are unknown, the history stops: nothing describes those requests, and their
keys stay unknown until a stated figure (an annotation's keys) anchors it again.

Cost: one pass over the steps, constant work each.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tracekit.frameworks import DECODE, PREFILL, SOURCE_VLLM, SOURCE_VLLM_FRAMES, BatchSide

# A figure that took the finished requests at the mean context: right on average, off by the
# spread of the contexts of the requests that finished.
SHRUNK_CONFIDENCE = 0.5
HISTORY_SOURCE = "the run's history"


# Per thread, (keys, running requests, confidence): a thread's history (``S``, ``N``) at a point.
History = dict[int, tuple[float, int, float]]


def kv_from_history(steps: pd.DataFrame, previous: History | None = None) -> History:
    """In place: the decode side's ``kv_tokens`` of each step that does not state it, from the
    history of its thread's steps (module docstring); a decode step's ``kv_tokens`` too, with
    ``kv_tokens_source`` and ``kv_tokens_confidence`` (a mixed step's stay unknown: its prefill
    side's keys are not stated). ``previous``: each thread's history at the end of the windows
    before this one (``analysis.windows``: a window's first steps run requests admitted before
    it); returned: each thread's history at the end of these steps, for the next window."""
    end = dict(previous or {})
    if not len(steps):
        return end
    cols = {
        c: steps[c].tolist()
        for c in (
            "phase",
            "tokens",
            "batch",
            "prefill_side",
            "decode_side",
            "kv_tokens",
            "kv_tokens_source",
            "kv_tokens_confidence",
        )
    }
    tid, start = steps["tid"].to_numpy(), steps["cpu_start_ns"].to_numpy()
    # vLLM's scheduler serves every running request each step (segment._carried_requests), so its
    # step's decode side is the whole pool; SGLang runs prefill (extend) batches apart from it.
    every_running = steps["source"].isin([SOURCE_VLLM, SOURCE_VLLM_FRAMES]).to_numpy()
    order = np.lexsort((start, tid))  # each thread's steps in order, threads one after another
    for rows in np.split(order, np.flatnonzero(np.diff(tid[order])) + 1):
        t = int(tid[rows[0]])
        end[t] = _walk(rows.tolist(), cols, every_running, end.get(t))
    for c in ("decode_side", "kv_tokens", "kv_tokens_source", "kv_tokens_confidence"):
        steps[c] = pd.Series(cols[c], index=steps.index, dtype=steps[c].dtype)
    return end


def _walk(
    rows: list[int], c: dict, every_running: np.ndarray, start: tuple[float, int, float] | None = None
) -> tuple[float, int, float]:
    """The history of one thread's steps, in order (``kv_from_history``), from ``start`` (None: no
    request known before the first step); ``every_running``: per step, whether its engine runs
    every running request in each step (its decode side is then the whole pool, even when
    empty). Returns the history after the last step."""
    keys, running, confidence = start if start is not None else (0.0, 0, 1.0)  # S, N
    for i in rows:
        pre, dec = _sides(c, i)
        if pre is None or dec is None:  # what the step ran is unknown: so is every context after it
            keys = np.nan
            continue
        d = dec.requests or 0
        if d == 0 and every_running[i]:
            keys, running, confidence = 0.0, 0, 1.0  # no request runs on: the pool is empty
        elif d:
            if dec.tokens != d or d > running:
                keys = np.nan  # a prefill chunk among them, or requests the history never admitted
            elif d < running:
                keys *= d / running
                confidence = min(confidence, SHRUNK_CONFIDENCE)
            running = d
            if dec.kv_tokens is not None:
                keys, confidence = float(dec.kv_tokens), 1.0  # a stated figure anchors the history
            elif not np.isnan(keys):
                keys += d
                _record(c, i, pre, dec, keys, confidence)
        elif c["phase"][i] == DECODE:
            keys = np.nan
        if pre.requests:
            keys = (
                np.nan
                if pre.tokens is None
                else keys + float(pre.kv_tokens if pre.kv_tokens is not None else pre.tokens)
            )
            running += pre.requests
    return float(keys), int(running), float(confidence)


def _record(c: dict, i: int, pre: BatchSide, dec: BatchSide, read: float, confidence: float) -> None:
    """Step ``i``'s decode side reads ``read`` keys: on its side, and as the step's keys when it has
    no prefill side (a mixed step's prefill side's keys are not stated)."""
    side = c["decode_side"][i]
    kv = int(round(read))
    c["decode_side"][i] = (
        dataclasses.replace(side, kv_tokens=kv)
        if side is not None
        else BatchSide(requests=dec.requests, tokens=dec.tokens, kv_tokens=kv)
    )
    if pre.requests:
        return
    c["kv_tokens"][i], c["kv_tokens_confidence"][i] = float(kv), confidence
    c["kv_tokens_source"][i] = (
        f"{HISTORY_SOURCE}: the prompts of its requests' prefills in the trace plus the tokens decoded since"
        + (
            "; the batch shrank without the trace saying which requests finished, so those running are "
            "taken at the mean context"
            if confidence < 1
            else ""
        )
    )


def _sides(c: dict, i: int) -> tuple[BatchSide | None, BatchSide | None]:
    """The step's prefill and decode sides (empty ones where it has none), from what its source
    stated or, for a one-phase step, its counts; None where they are unknown."""
    pre, dec, phase = c["prefill_side"][i], c["decode_side"][i], c["phase"][i]
    if pre is not None or dec is not None:
        return pre or BatchSide(0, 0), dec or BatchSide(0, 0)
    tokens, batch = c["tokens"][i], c["batch"][i]
    if phase not in (PREFILL, DECODE) or np.isnan(tokens) or np.isnan(batch):
        return None, None
    side = BatchSide(requests=int(batch), tokens=int(tokens))
    return (side, BatchSide(0, 0)) if phase == PREFILL else (BatchSide(0, 0), side)
