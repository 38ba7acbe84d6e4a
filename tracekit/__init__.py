"""tracekit: profile LLM inference and explain it, phase by phase."""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.errors import TracekitError
from tracekit.trace import Trace, read_trace

__all__ = ["Trace", "TracekitError", "read_trace", "__version__", "phase", "decode_step"]


def __getattr__(name: str):
    # The marking context managers need torch; import them only when asked for,
    # so analysing traces never imports torch.
    if name in ("phase", "decode_step"):
        from tracekit.collect import api

        return getattr(api, name)
    raise AttributeError(name)
