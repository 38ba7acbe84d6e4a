"""Behaviours of tracekit.analysis that surviving mutants showed no test pinned: a roofline
point's input shapes, the roof notes of a comparison whose one side has no spec row, and the
graph-replay finding of a run the model prices, and the steps cut from a trace's launch pattern. Expected figures are hand arithmetic on
hand-built Kineto traces, the A100's datasheet peak (312 dense bf16 TFLOP/s), or the recorded
ops of a real trace."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import read_real
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.steps import segment as seg
from tracekit.compare.comparison import compare

BF16 = "c10::BFloat16"
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"


def _gemm_run(path, n: int, dur_us: float, steps: int = 3):
    """``steps`` decode steps, each one aten::mm [n, n] x [n, n] (bf16) and its GEMM of ``dur_us``."""
    d = Doc()  # A100-SXM4-80GB
    ts = 1000.0
    for i in range(steps):
        d.annotation(f"tracekit::decode#{i} bs=1", ts, dur_us + 100.0)
        ext = d.op("aten::mm", ts + 5.0, 20.0, dims=[[n, n], [n, n]], types=[BF16, BF16])
        d.kernel(GEMM, ts + 10.0, ts + 30.0, dur_us, ext=ext)
        ts += dur_us + 200.0
    return analyze(read_trace(d.write(path)))


# --- analyze: a roofline point's shapes -------------------------------------------------------


def test_a_shape_priced_roofline_point_names_its_ops_input_shapes(tmp_path):
    """catches: a roofline point's shapes dropped when the op table is there (e.g. the test
    ``ops is not None`` negated), so the chart's hover shows no shapes for any point."""
    d = Doc()
    ts = 1000.0
    for i in range(2):
        d.annotation(f"tracekit::decode#{i} bs=8", ts, 200.0)
        ext = d.op("aten::mm", ts + 5.0, 20.0, dims=[[8, 256], [256, 688]], types=[BF16, BF16])
        d.kernel(GEMM, ts + 10.0, ts + 30.0, 50.0, ext=ext)
        ts += 400.0
    points = analyze(read_trace(d.write(tmp_path / "mm.json"))).to_dict()["roofline"]["decode"]["points"]
    assert len(points) == 1
    p = points[0]
    assert p["label"] == "aten::mm" and p["cost_source"] == "shapes" and p["calls"] == 2
    # The recorded Input Dims and Input type of the op, as the trace holds them.
    assert p["shapes"] == "[8, 256] bf16, [256, 688] bf16"
    # 2*8*256*688 FLOPs over (8*256 + 256*688 + 8*688) * 2 bytes: the point belongs to these shapes.
    assert p["intensity"] == pytest.approx(2 * 8 * 256 * 688 / ((8 * 256 + 256 * 688 + 8 * 688) * 2))


# --- compare: roof notes need a spec row on both sides ----------------------------------------


def test_roof_notes_are_left_out_when_one_side_has_no_spec_row(tmp_path):
    """catches: the roof notes written when only one run has a spec row (``not db or not da``
    turned into ``and``), e.g. "at 44% of None's roof (was 22% of A100's)": a side without a
    spec row (a GPU trace cut before its kernels) has no roof to name."""
    n = 4096
    roof_us = 2 * n**3 / 312e12 * 1e6  # 440.5 us at the A100's 312 TFLOP/s (datasheet)
    before = _gemm_run(tmp_path / "before.json", n, 2000.0)
    after = _gemm_run(tmp_path / "after.json", n, 1000.0)
    # Both sides priced: the note is there, 2x faster, at 44 % of the roof (was 22 %).
    both = compare(before, after).phases["decode"]["explanation"]
    expected = f"aten::mm (gemm): 2x faster per call, at {roof_us / 1000:.0%} of the roof (was {roof_us / 2000:.0%})."
    assert expected in both
    for side in ("before", "after"):
        runs = {"before": before, "after": after}
        runs[side] = dataclasses.replace(runs[side], device={**runs[side].device, "spec": None})
        text = compare(runs["before"], runs["after"]).phases["decode"]["explanation"]
        assert not any("roof" in line for line in text), (side, text)
        assert not any("None" in line for line in text), (side, text)


# --- findings: the graph-replay finding of a model-priced run ----------------------------------


def test_graph_replay_finding_says_the_model_priced_the_replayed_kernels():
    """catches: the graph-replay finding's test of "the model prices at least half of the
    replayed time" inverted (``>=`` -> ``<=``), so a run the model prices tells the user to
    pass --model, and one it barely prices claims the model prices it."""
    key, model = "mi300x_decode", "qwen3-8b"  # SGLang Qwen3-8B, decode steps replaying a HIP graph
    plain = next(f for f in analyze(read_real(key)).findings if f.id == "graph-replay")
    assert "pass --model NAME" in plain.text and "the model prices" not in plain.text
    a = analyze(read_real(key), model=model)
    finding = next(f for f in a.findings if f.id == "graph-replay")
    replayed = a.work[a.work["graph"]]
    share = replayed.loc[replayed["cost_source"] == "model", "dur_ns"].sum() / replayed["dur_ns"].sum()
    assert share >= 0.5  # the model prices most of the replayed time (the GEMMs, attention, norms)
    assert finding.text.startswith(f"Some steps replay a CUDA/HIP graph: the model prices {share:.0%} ")
    assert "pass --model" not in finding.text


# --- launches: steps from the launch pattern --------------------------------------------------


def test_launch_pattern_cuts_every_step_of_an_even_number_of_occurrences(tmp_path):
    """catches: the groups of equal launch tokens split one launch early (the edges ``+ 1``
    turned into ``| 1``), so a step token recurring an even number of times loses its last
    occurrence and the run's last two steps read as one step of twice the launches."""
    d = Doc()  # no annotations, no step frames: the steps can only come from the launches
    ts, heads = 1000.0, []
    for _ in range(6):  # six steps: one head kernel, then two of a repeated layer kernel
        heads.append(ts)
        for name in ("a_step_head_kernel", "b_layer_kernel", "b_layer_kernel"):
            d.kernel(name, ts, ts + 5.0, 10.0)
            ts += 20.0
        ts += 500.0  # the host pauses between steps (scheduling, sampling)
    s = seg.segment(read_trace(d.write(tmp_path / "steps.json")))
    assert s.source == seg.SOURCE_LAUNCHES
    assert list(s.steps["kernels"]) == [3] * 6
    assert list(s.steps["label"]) == [f"launch-pattern step {j} (3 launches)" for j in range(1, 7)]
    # Each step begins at its head kernel's launch: 560 us (3 x 20 + 500) apart.
    starts = s.steps["cpu_start_ns"].to_numpy()
    assert [int(x - starts[0]) for x in starts] == [int((h - heads[0]) * 1000) for h in heads]
