"""User ``record_function`` ranges whose names say prefill or decode (``my_prefill``,
``decode_step_7``): a phase, but no batch."""

from __future__ import annotations

import re

from tracekit.frameworks.base import StepAnnotation

SOURCE = "user record_function ranges"

_WORD = re.compile(r"(?<![a-z])(prefill|decode)(?![a-z])", re.IGNORECASE)
# Ranges that are not steps although a word matches: profiler steps, graph captures.
_NOT_STEPS = ("ProfilerStep#", "capture_")


def parse(name: str) -> StepAnnotation | None:
    if name.startswith(_NOT_STEPS):
        return None
    m = _WORD.search(name)
    if not m:
        return None
    phase = m.group(1).lower()
    return StepAnnotation(phase, SOURCE, f"range name {name!r} says {phase}")
