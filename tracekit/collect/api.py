"""Public markers for your own inference loop: ``tracekit.phase`` and ``tracekit.decode_step``.

Wrap the prefill pass and each decode step of your own code so that a trace taken with
``tracekit collect -- python my_script.py`` (or any ``torch.profiler`` session) splits into
phases exactly::

    import tracekit

    with tracekit.phase("prefill", batch=8, tokens=8 * 512):
        logits = model(prompt_ids, cache=cache).logits
        next_token = logits[:, -1].argmax(-1)
    for i in range(new_tokens):
        with tracekit.decode_step(i, batch=8):
            logits = model(next_token[:, None], cache=cache).logits
            next_token = logits[:, -1].argmax(-1)

Each context manager is a ``torch.profiler.record_function`` range named by
``tracekit.markers``; outside a profiler it costs next to nothing, and without torch
installed it does nothing at all. Both also work as decorators.
"""

from __future__ import annotations

import contextlib
import threading

from tracekit import markers

__all__ = ["phase", "decode_step", "generate"]

_PHASES = ("prefill", "decode", "generate")

# Decode steps marked with ``phase("decode")`` and no index are numbered here, per thread,
# restarting at 0 after each prefill.
_local = threading.local()


def _next_decode_index() -> int:
    i = getattr(_local, "decode_index", 0)
    _local.decode_index = i + 1
    return i


def _range(name: str):
    try:
        from torch.profiler import record_function
    except ImportError:  # no torch: nothing to record into
        return contextlib.nullcontext()
    return record_function(name)


class _Marker(contextlib.ContextDecorator):
    """A named profiler range; re-entrant and usable as a decorator."""

    def __init__(self, name_fn) -> None:
        self._name_fn = name_fn
        self._stack: list = []

    def __enter__(self):
        cm = _range(self._name_fn())
        cm.__enter__()
        self._stack.append(cm)
        return self

    def __exit__(self, *exc):
        cm = self._stack.pop()
        cm.__exit__(*exc)
        return False


def phase(
    name: str,
    batch: int | None = None,
    tokens: int | None = None,
    index: int | None = None,
    kv_tokens: int | None = None,
) -> _Marker:
    """Mark one phase of an inference run: ``"prefill"``, ``"decode"`` or ``"generate"``.

    ``batch`` is the number of sequences; ``tokens`` the tokens processed (for prefill,
    batch x prompt length); ``kv_tokens`` the keys attention reads, summed over sequences
    (cache plus new tokens), which lets ``report --model`` price attention. A ``"decode"``
    phase without ``index`` is numbered automatically (0, 1, ... after the latest
    prefill); prefer ``decode_step(i)``.
    """
    if name not in _PHASES:
        from tracekit.errors import TracekitError

        raise TracekitError(f"unknown phase {name!r}: use one of {', '.join(_PHASES)}")
    if name == "prefill":

        def name_fn():
            _local.decode_index = 0
            return markers.prefill_name(batch, tokens, kv_tokens)

    elif name == "decode":

        def name_fn():
            i = _next_decode_index() if index is None else int(index)
            return markers.decode_name(i, batch, tokens, kv_tokens)

    else:

        def name_fn():
            return markers.GENERATE

    return _Marker(name_fn)


def decode_step(i: int, batch: int | None = None, kv_tokens: int | None = None) -> _Marker:
    """Mark decode step ``i`` (0-based): one forward pass producing one token per sequence.
    ``kv_tokens``: keys attention reads in this step, summed over sequences."""
    return phase("decode", batch=batch, index=i, kv_tokens=kv_tokens)


def generate() -> _Marker:
    """Mark a whole generation (prefill and all decode steps); optional."""
    return phase("generate")
