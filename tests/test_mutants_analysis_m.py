"""Behaviours of tracekit.analysis that surviving mutants of the seed-36 sample showed no test
pinned. Expected figures come from hand-built traces (tests/kineto.py) whose every kernel is
placed by the test."""

from __future__ import annotations

import pytest
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.steps.timeline import MAX_STREAMS

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"


@pytest.mark.parametrize("streams", [MAX_STREAMS, MAX_STREAMS + 2])
def test_a_step_on_more_streams_than_lanes_shares_one_lane_for_the_rest(tmp_path, streams):
    """catches: the shared lane added at exactly MAX_STREAMS streams (``>`` read as ``==``: a lane
    "GPU, 0 other streams" drawn empty) or not at all beyond them (kernels of the extra streams
    not drawn). Stream s runs one kernel of 100 + 10 s us, so the busiest streams, the ones with
    lanes of their own, are the last MAX_STREAMS; the rest share one lane holding their kernels."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 1000.0, 2000.0)
    for s in range(streams):
        doc.kernel(GEMM, 1010.0 + s, 1100.0, 100.0 + 10 * s, stream=10 + s, launch_dur=0.5)
    d = analyze(read_trace(doc.write(tmp_path / "streams.json"))).to_dict()
    (tl,) = d["timelines"]
    lanes = {lane["name"]: lane["segments"] for lane in tl["lanes"] if lane["kind"] == "stream"}
    own = {f"GPU stream {10 + s}" for s in range(streams - MAX_STREAMS, streams)}
    extra = streams - MAX_STREAMS
    assert set(lanes) == own | ({f"GPU, {extra} other streams"} if extra else set()), sorted(lanes)
    if extra:
        segs = lanes[f"GPU, {extra} other streams"]
        assert sum(g[4] for g in segs) == extra, segs  # each segment counts the kernels it holds


# --- seed 37


def test_an_idle_gap_names_the_innermost_op_when_nested_ops_share_a_start(tmp_path):
    """catches: nested host ops with one start taken as ordered when the inner one comes first in
    the file (the order check's ``>`` read as ``>=``): the outer op named as the one the host was
    in. The reader keeps equal starts in file order, so the inner op (100-600 us) is written
    before the outer one (100-800 us); the host gap from the first kernel's end (20 us) to the
    second's launch (850 us) has its midpoint at 435 us, inside both."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 0.0, 1000.0)
    doc.kernel(GEMM, 2.0, 10.0, 10.0)
    doc.op("aten::inner_part", 100.0, 500.0)
    doc.op("aten::outer_part", 100.0, 700.0)
    doc.kernel(GEMM, 850.0, 860.0, 40.0)
    d = analyze(read_trace(doc.write(tmp_path / "nested.json"))).to_dict()
    host = next(r for r in d["phases"]["decode"]["idle_top"] if r["cause"] == "host")
    assert host["op"] == "aten::inner_part", host
    assert host["stack"] == ["aten::outer_part", "aten::inner_part"], host  # outermost first
