"""tracekit: profile LLM inference and explain it, phase by phase."""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.errors import TracekitError

__all__ = ["Trace", "TracekitError", "read_trace", "__version__", "phase", "decode_step"]


def __getattr__(name: str):
    # Imported when first asked for. The reader brings pandas and numpy, which the command
    # line must not load before it has chosen their threading (tracekit.cli); the marking
    # context managers need torch, which analysing traces never imports.
    if name in ("Trace", "read_trace"):
        from tracekit import trace

        return getattr(trace, name)
    if name in ("phase", "decode_step"):
        from tracekit.collect import api

        return getattr(api, name)
    raise AttributeError(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
