"""What PyTorch itself writes: ``ProfilerStep#N`` ranges (one per ``profiler.step()``),
the fallback pass boundary for traces without step annotations."""

from __future__ import annotations

PROFILER_STEP = "ProfilerStep#"


def is_profiler_step(name: str) -> bool:
    return name.startswith(PROFILER_STEP)
