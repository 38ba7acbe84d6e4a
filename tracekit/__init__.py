"""tracekit: profile LLM inference and explain it, phase by phase."""

from __future__ import annotations

__version__ = "0.1.0"

from tracekit.errors import TracekitError

__all__ = [
    "Trace",
    "TracekitError",
    "read_trace",
    "analyze",
    "project",
    "fit_costs",
    "plan",
    "__version__",
    "phase",
    "decode_step",
]

# Where each public name lives: the pipeline's stages, then what builds on whole analyses.
# (``compare`` is not here: ``tracekit.compare`` is the comparing package, whose own
# ``compare`` is the function: ``from tracekit.compare import compare``.)
_HOMES = {
    "Trace": "tracekit.trace",
    "read_trace": "tracekit.trace",
    "analyze": "tracekit.analysis.analyze",
    "project": "tracekit.whatif.project",
    "fit_costs": "tracekit.whatif.fit",
    "plan": "tracekit.whatif.plan",
    "phase": "tracekit.collect.api",
    "decode_step": "tracekit.collect.api",
}


def __getattr__(name: str):
    # Imported when first asked for. The reader brings pandas and numpy, which the command
    # line must not load before it has chosen their threading (tracekit.cli); the marking
    # context managers need torch, which analysing traces never imports.
    if name not in _HOMES:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
