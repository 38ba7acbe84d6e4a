"""A step is what happened in it: cutting a trace after a step must leave every earlier step's
figures as they were. Each real trace (engine-annotated steps) is cut just after step k's last
CPU and GPU time, every event starting later dropped, as a profiler stopped there would have
left it; the first k steps of the cut trace's report must equal the whole trace's, field by
field (times, busy and idle, idle by cause, kernels, tokens and batch, FLOPs, bytes, MBU). The
expectation is the whole trace's own report.

What it catches: a step's figure read from the run as a whole (a median over all steps, the
trace's last event, a later step's kernels), a gap's cause taken from work after the step, a
boundary computed from the next step's start. Not compared: the steps after the cut, and the
run's summary figures (TPOT percentiles, phase totals), which are of another run. A step whose
end is inferred (an unannotated forward pass runs to the next pass's start, ``steps.ranges``)
does change when the next pass is cut away: the traces here are annotated."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import real_trace_path
from json_paths import same
from test_repeat import repeat

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.analysis.steps.segment import segment


def _cut_after(src, dst, doc_path, k: int) -> None:
    """``doc_path``'s events that start by the end of step ``k - 1`` of ``src`` (its CPU end or
    its last GPU work, whichever is later), written to ``dst``."""
    raw = doc_path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if doc_path.suffix == ".gz" else raw)
    trace = read_trace(src)
    steps = segment(trace).steps
    end_ns = max(int(steps["end_ns"].iloc[k - 1]), int(steps["gpu_end_ns"].iloc[k - 1]))
    # The reader's clock is the file's microseconds in ns plus an origin: found from a kernel.
    first = min(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    origin = int(trace.kernels["start_ns"].min()) - round(first * 1000)
    cut_us = (end_ns + 1 - origin) / 1000
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not isinstance(e.get("ts"), (int, float)) or e["ts"] < cut_us
    ]
    dst.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "key,copies", [("gb10_vllm", 1), ("rtx3090_vllm", 1), ("mi300x_decode", 6), ("b300_qwen3_moe", 4)]
)
def test_cutting_a_trace_after_a_step_leaves_the_steps_before_it_as_they_were(key, copies, tmp_path):
    src = real_trace_path(key)  # skips where ../shared/traces is absent
    if copies > 1:  # a one-step trace repeated into several steps, each its own (test_repeat)
        repeat(src, tmp_path / "whole.json", copies)
        src = tmp_path / "whole.json"
    whole = analyze(read_trace(src)).to_dict()["steps"]
    assert len(whole) >= 4
    for k in (1, len(whole) // 2, len(whole) - 1):
        _cut_after(src, tmp_path / "cut.json", src, k)
        cut = analyze(read_trace(tmp_path / "cut.json")).to_dict()["steps"]
        assert len(cut) >= k
        for i in range(k):
            differ = [
                (f, whole[i][f], cut[i].get(f, "<absent>"))
                for f in whole[i]
                if not same(whole[i][f], cut[i].get(f, "<absent>"), 1e-9, 1e-6)
                and not (
                    isinstance(whole[i][f], dict)
                    and all(same(v, (cut[i].get(f) or {}).get(c), 1e-9, 1e-6) for c, v in whole[i][f].items())
                )
            ]
            assert not differ, (k, i, differ[:5])
