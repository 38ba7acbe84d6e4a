"""``tracekit collect``: profile an inference run and write a trace plus a metadata sidecar.

This is the only part of tracekit that imports torch, and it does so lazily: importing
``tracekit.collect`` is cheap and works without torch. Use::

    from tracekit.collect import CollectOptions, collect
    result = collect(CollectOptions(preset="tiny", batch_size=8))
    result.trace_path, result.sidecar_path, result.sidecar

Tensor-parallel over N processes that tracekit starts (one trace and sidecar per rank)::

    from tracekit.collect import CollectOptions, collect_tp
    result = collect_tp(CollectOptions(preset="tiny", output="tp2/"), tp=2)
    result.folder, result.trace_paths

To mark your own inference loop, use ``tracekit.phase`` and ``tracekit.decode_step``
(``tracekit.collect.api``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.collect.collector import CollectOptions, CollectResult

__all__ = ["CollectOptions", "CollectResult", "ParallelResult", "collect", "collect_tp", "PRESETS"]


def collect(options: "CollectOptions | None" = None, **kwargs: Any) -> "CollectResult":
    """Collect a trace; pass a ``CollectOptions`` or its fields as keywords."""
    from tracekit.collect.collector import CollectOptions
    from tracekit.collect.collector import collect as _collect

    if options is None:
        options = CollectOptions(**kwargs)
    elif kwargs:
        raise TypeError("pass either a CollectOptions or keyword options, not both")
    return _collect(options)


def collect_tp(options: "CollectOptions", tp: int, announce=None):
    """Collect ``options`` (a preset) tensor-parallel over ``tp`` ranks: a ``ParallelResult``."""
    from tracekit.collect.parallel import collect_tp as _collect_tp

    return _collect_tp(options, tp, announce=announce)


def __getattr__(name: str):
    if name in ("CollectOptions", "CollectResult"):
        from tracekit.collect import collector

        return getattr(collector, name)
    if name == "ParallelResult":
        from tracekit.collect.parallel import ParallelResult

        return ParallelResult
    if name == "PRESETS":
        from tracekit.collect.workloads import PRESETS

        return PRESETS
    raise AttributeError(name)
