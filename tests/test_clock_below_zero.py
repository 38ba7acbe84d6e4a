"""A time below zero is a time: no mark of the analysis for "no time" may be one.

The Chrome trace format allows any timestamp, and a trace re-based to an event inside it has
times below zero. The reader moves such a file's clock forward (``reader._clock_shift``), but a
trace also reaches the analysis built in memory, merged or cut into windows; the analysis itself
must read it as the same run. Here the tables of real traces are moved below zero directly (all
of them, or the first half of the run), so no reader can hide what the analysis does with them.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import read_real

from tracekit.analysis import analyze
from tracekit.analysis.steps import segment as seg

_TIMED = ("kernels", "runtime", "cpu_ops", "annotations", "python")


def _moved(trace, by_ns: int):
    """The trace with every start and end moved by ``by_ns`` (durations unchanged)."""
    tables = {}
    for name in _TIMED:
        t = getattr(trace, name).copy()
        for col in ("start_ns", "end_ns"):
            if col in t:
                t[col] = t[col] + by_ns
        tables[name] = t
    return dataclasses.replace(trace, metadata=dict(trace.metadata), **tables)


def _figures(analysis) -> dict:
    d = analysis.to_dict()
    d.pop("source", None)
    return d


# nano-vllm: forward passes from nn.Module spans; mi300x_extend: an SGLang annotation; gb10_vllm:
# ten vLLM steps whose GPU runs behind the CPU (held work, previous steps' work in a window).
@pytest.mark.parametrize("key", ["rtx4080_nanovllm", "mi300x_extend", "gb10_vllm"])
@pytest.mark.parametrize("where", ["all below zero", "straddling zero"])
def test_a_clock_below_zero_gives_the_same_steps_and_figures(key, where):
    """Moving a clock changes no duration: the steps (their phases, kernels, durations, busy and
    idle time) and every figure of the analysis must be the original's. Fails on the code before
    the analysis marked "no time" below every clock: a kernel's issue time of -1 ("no launch in the
    trace") tested with ``>= 0`` read every launch below zero as missing, so no work was assigned to
    a step (no steps, or wrong ones), held work, idle causes and module refinement went wrong; the
    outermost ``nn.Module`` spans were found with a running end starting at -1 (none below zero:
    no forward passes); an op's start of -1 ("no op") tested with ``>= 0`` split idle time wrongly."""
    trace = read_real(key)
    timed = [getattr(trace, n) for n in _TIMED if len(getattr(trace, n))]
    lo = min(int(t["start_ns"].min()) for t in timed)
    hi = max(int(t["end_ns"].max()) for t in timed)
    by = -hi - 1_000_000 if where == "all below zero" else -(lo + hi) // 2
    below = _moved(trace, by)
    assert (int(below.kernels["start_ns"].min()) < 0) and (int(below.kernels["end_ns"].max()) < 0) == (
        where == "all below zero"
    )

    original, moved = seg.segment(trace), seg.segment(below)
    assert len(original.steps)
    cols = ["phase", "kernels", "duration_ns", "gpu_busy_ns", "gpu_idle_ns", "tokens", "batch"]
    assert moved.steps[cols].equals(original.steps[cols])
    assert (moved.steps["cpu_start_ns"] - by).equals(original.steps["cpu_start_ns"])
    assert (moved.work["step"] == original.work["step"]).all()
    assert _figures(analyze(below)) == _figures(analyze(trace))
