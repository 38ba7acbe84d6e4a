"""Behaviours of tracekit.analysis that surviving mutants of the seed-38 sample showed no test
pinned. Expected figures come from hand-built traces (tests/kineto.py) placed by the test, or
from the report's own per-step table (the books the figure must agree with)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import read_real
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.steps.latency import decode_steps

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"


@pytest.mark.parametrize("engine,want", [(False, [1, 4]), (True, [1, 2, 4])])
def test_the_decode_series_holds_decode_steps_and_an_engines_mixed_ones(engine, want):
    """catches: a phase compared by order rather than equality (``phase > "decode"`` takes the
    prefill, mixed and unknown steps instead of the decode ones; ``phase > "mixed"`` adds an
    engine's prefill steps). An engine's mixed step computes a decode token for each of its
    decode requests, so it belongs to the series; a request-level run's mixed steps do not."""
    steps = pd.DataFrame({"phase": ["prefill", "decode", "mixed", "unknown", "decode"]})
    assert decode_steps(steps, engine).tolist() == want


@pytest.mark.parametrize("key", ["gb10_vllm", "rtx3090_vllm"])
def test_launch_overhead_of_decode_is_its_steps_launch_gaps(key):
    """catches: the share of decode time lost to launches left unknown, or divided the wrong way,
    when the decode steps have time (``d.sum() > 0`` inverted). The figures must be the steps
    table's own: the mean of the decode-holding steps' ``launch_gap_ms`` per step, and their sum
    over those steps' summed duration."""
    d = analyze(read_real(key)).to_dict()
    held = [s for s in d["steps"] if s["phase"] in ("decode", "mixed")]
    gaps = [s["launch_gap_ms"] for s in held]
    assert held and sum(gaps) > 0
    m = d["metrics"]
    assert m["launch_overhead_ms_per_decode_step"] == pytest.approx(np.mean(gaps), rel=1e-9)
    assert m["launch_overhead_share_of_decode"] == pytest.approx(
        sum(gaps) / sum(s["duration_ms"] for s in held), rel=1e-9
    )


def test_a_step_timeline_starts_at_a_kernel_the_gpu_clock_puts_before_the_step(tmp_path):
    """catches: the timeline window opened at the step's CPU start even when its first kernel
    starts earlier (the GPU clock a few us behind the CPU's, as real traces show): the kernel's
    lane segment then starts before 0. The step's CPU range is 100-1000 us; its first kernel,
    launched at 101 us, reads 95-145 us, the second 310-360 us. So the window opens at 95 us
    (-0.005 ms from the CPU start), spans 1000 - 95 = 905 us, and the stream lane's segments are
    [0, 0.05] and [0.215, 0.265] ms from its start, each labelled with its one kernel's name (a
    lone interval counted as "1 x gemm" was the seed-38 survivor of the labels)."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 100.0, 900.0)
    doc.kernel(GEMM, 101.0, 95.0, 50.0)
    doc.kernel(GEMM, 300.0, 310.0, 50.0)
    (tl,) = analyze(read_trace(doc.write(tmp_path / "skew.json"))).to_dict()["timelines"]
    assert tl["start_ms"] == pytest.approx(-0.005) and tl["span_ms"] == pytest.approx(0.905)
    (stream,) = [lane for lane in tl["lanes"] if lane["kind"] == "stream"]
    assert [seg[:2] for seg in stream["segments"]] == [pytest.approx([0.0, 0.05]), pytest.approx([0.215, 0.265])]
    # A segment of one kernel is labelled with that kernel, not as a count of its kind ("1 x gemm").
    assert [(tl["labels"][seg[3]], seg[4]) for seg in stream["segments"]] == [(GEMM, 1), (GEMM, 1)]


def test_a_step_timeline_follows_the_thread_that_launched_its_kernels(tmp_path):
    """catches: the host lanes drawn for the thread that opened the step's range when its kernels
    were launched from another (an engine's worker thread): the lanes then show nothing the GPU
    waited on. The step's range is on thread 100; both kernels are launched from thread 200."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 100.0, 900.0, tid=100)
    doc.kernel(GEMM, 120.0, 130.0, 50.0, tid=200)
    doc.kernel(GEMM, 300.0, 310.0, 50.0, tid=200)
    (tl,) = analyze(read_trace(doc.write(tmp_path / "threads.json"))).to_dict()["timelines"]
    assert tl["host_tid"] == 200
    calls = [lane for lane in tl["lanes"] if lane["kind"] == "host_calls"]
    assert [lane["name"] for lane in calls] == ["host thread 200: runtime calls"]
    assert len(calls[0]["segments"]) == 2  # its two launches


def test_a_top_kernels_achieved_rates_are_its_work_over_its_time(tmp_path):
    """catches: a top kernel's TFLOP/s or GB/s from a wrong formula (a power for a division). One
    bf16 aten::mm [1024, 1024] x [1024, 1024] on an A100, one 100 us kernel: 2 x 1024^3 FLOPs in
    1e-4 s is 21.47 TFLOP/s; it reads A and B and writes C, 3 x 1024^2 x 2 bytes, 62.9 GB/s; against
    the A100's dense bf16 peak of 312 TFLOP/s (NVIDIA's datasheet) that is 6.88% of its roof."""
    doc = Doc(device="NVIDIA A100-SXM4-80GB")
    doc.annotation("tracekit::prefill#0 bs=1 tokens=1024", 0.0, 1000.0)
    ext = doc.op("aten::mm", 5.0, 200.0, dims=[[1024, 1024], [1024, 1024]], types=["c10::BFloat16"] * 2)
    doc.kernel(GEMM, 10.0, 20.0, 100.0, ext=ext)
    (row,) = analyze(read_trace(doc.write(tmp_path / "mm.json"))).to_dict()["top_kernels"]["prefill"]
    assert row["achieved_tflops"] == pytest.approx(2 * 1024**3 / 1e-4 / 1e12, rel=1e-9)
    assert row["achieved_gbps"] == pytest.approx(3 * 1024**2 * 2 / 1e-4 / 1e9, rel=1e-9)
    assert row["roof_fraction"] == pytest.approx(2 * 1024**3 / 1e-4 / 312e12, rel=1e-6)
    assert row["bound"] == "compute"


def test_the_fusion_advice_states_its_time_in_seconds_past_one_second():
    """catches: fusible time of a second or more written as ms + 1000 "s" (the formatter the merge
    of windows had its own copy of). 1,500 ms of elementwise time in 3,000 ms of prefill kernel
    time is 50%, "1.5 s"; 5 kernels in 2 chains; nothing saved, no advice."""
    from tracekit.analysis.findings.advice import fusion_finding

    p = {"kernel_ms": 3000.0, "by_category": {"elementwise": 1500.0, "gemm": 1500.0}}
    (f,) = fusion_finding("prefill", p, 40.0, 2, 5)
    assert f.text.startswith(
        "Elementwise, normalization, activation and RoPE kernels are 50% of prefill kernel "
        "time (1.5 s); 5 of them run back to back in 2 chains"
    ), f.text
    assert f.at_stake_ms == 40.0 and f.phase == "prefill"
    assert fusion_finding("prefill", p, 0.0, 0, 0) == []
    assert fusion_finding("prefill", {**p, "by_category": {"elementwise": 100.0}}, 40.0, 2, 5) == []  # 3% fusible


def test_a_lane_coarsened_by_time_keeps_a_lone_kernels_own_label(tmp_path):
    """catches: in a lane too busy to merge by kind (kinds alternating more than MAX_SEGMENTS
    times, coarsened into equal slices of time), a slice holding one kernel labelled as a count
    ("1 x gemm") instead of with its kernel's name. 1,600 kernels alternate GEMM and elementwise,
    one every 1 us, in a 2 ms step: 1,500 slices of ~1.07 us, so most slices hold one kernel and
    some two (labelled "2 intervals of 2 kinds, mostly ...")."""
    from tracekit.analysis.steps.timeline import MAX_SEGMENTS

    elementwise = "vectorized_elementwise_kernel"
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 0.0, 2000.0)
    for i in range(1600):
        doc.kernel(GEMM if i % 2 else elementwise, 1.0 + i, 10.0 + i, 0.5, launch_dur=0.1)
    (tl,) = analyze(read_trace(doc.write(tmp_path / "busy.json"))).to_dict()["timelines"]
    (stream,) = [lane for lane in tl["lanes"] if lane["kind"] == "stream"]
    segs = stream["segments"]
    assert len(segs) <= MAX_SEGMENTS and sum(g[4] for g in segs) == 1600
    lone = {tl["labels"][g[3]] for g in segs if g[4] == 1}
    assert lone == {GEMM, elementwise}, sorted(lone)[:3]
    pairs = {tl["labels"][g[3]] for g in segs if g[4] == 2}
    assert pairs and all(lab.startswith("2 intervals of 2 kinds, mostly ") for lab in pairs), sorted(pairs)[:3]
    # By hand: the slices run from the first kernel's start (10 us) to the last one's end
    # (1,609.5 us), 1,599.5 / 1,500 = 1.066 us each; kernel i falls in slice floor(i x 0.9378),
    # so every slice holds one or two and 1,600 - 1,500 = 100 hold two. (Slices from the second
    # kernel's start put three in the first.)
    counts = [g[4] for g in segs]
    assert (len(segs), counts.count(1), counts.count(2)) == (1500, 1400, 100)


def test_idle_waiting_on_a_launch_names_the_launch_call_and_its_op(tmp_path):
    """catches: idle time spent on a kernel's launch described as the host's own time (the branch
    for launch and wait causes taken only when no kernel ends the gap: ``nxt >= 0`` inverted), or
    the launching op dropped when it is the trace's first op (row 0 read as "no op"). One aten::mm
    (the trace's only op) launches two GEMMs; the second launch call lasts 190 us, so the GPU
    idles on it: the launch and wait groups both name cudaLaunchKernel and aten::mm."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 0.0, 1000.0)
    ext = doc.op("aten::mm", 100.0, 300.0, dims=[[8, 64], [64, 64]], types=["c10::BFloat16"] * 2)
    doc.kernel(GEMM, 110.0, 120.0, 20.0, ext=ext, launch_dur=5.0)
    doc.kernel(GEMM, 200.0, 400.0, 20.0, ext=ext, launch_dur=190.0)
    d = analyze(read_trace(doc.write(tmp_path / "launch.json"))).to_dict()
    groups = {r["cause"]: r for r in d["phases"]["decode"]["idle_top"]}
    for cause in ("launch", "wait"):
        assert (groups[cause]["call"], groups[cause]["op"], groups[cause]["stack"]) == (
            "cudaLaunchKernel",
            "aten::mm",
            ["aten::mm"],
        ), groups[cause]


def test_the_host_ops_lane_holds_only_ops_inside_the_window(tmp_path):
    """catches: an op of the launching thread that ended before the step's window opened drawn in
    its host ops lane (the "ends after the window's start" test dropped). aten::early runs 0-50 us,
    the step 100-1000 us, its aten::mm 110-300 us."""
    doc = Doc()
    doc.op("aten::early", 0.0, 50.0)
    doc.annotation("tracekit::decode#0 bs=1", 100.0, 900.0)
    ext = doc.op("aten::mm", 110.0, 190.0, dims=[[8, 64], [64, 64]], types=["c10::BFloat16"] * 2)
    doc.kernel(GEMM, 120.0, 130.0, 20.0, ext=ext)
    (tl,) = analyze(read_trace(doc.write(tmp_path / "early.json"))).to_dict()["timelines"]
    (ops,) = [lane for lane in tl["lanes"] if lane["kind"] == "host_ops"]
    assert [tl["labels"][g[3]] for g in ops["segments"]] == ["aten::mm"]


@pytest.mark.parametrize("end_us,named", [(1000.0, False), (390.0, True)])
def test_an_idle_cause_is_named_only_when_it_is_the_largest(tmp_path, end_us, named):
    """catches: the early return when sync or unattributed idle is larger than launch, host and
    wait time inverted (``<`` read as ``>``): the advice then names a smaller cause. The second
    kernel of the step is issued at 145 us but starts at 400 us, so about a quarter of the step
    is "wait" either way; with the step's range running on to 1,000 us its idle tail (after the
    last kernel, unattributed) is larger still, and no gpu-waits advice may be given; with the
    range ending before the kernel does, wait is the largest cause and the advice is given. The
    premise is checked on the report's own per-step causes."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=1", 100.0, end_us - 100.0)
    ext = doc.op("aten::mm", 100.0, 300.0, dims=[[8, 64], [64, 64]], types=["c10::BFloat16"] * 2)
    doc.kernel(GEMM, 102.0, 110.0, 20.0, ext=ext, launch_dur=5.0)
    doc.kernel(GEMM, 140.0, 400.0, 20.0, ext=ext, launch_dur=5.0)
    d = analyze(read_trace(doc.write(tmp_path / "wait.json"))).to_dict()
    (step,) = d["steps"]
    causes = step["idle_by_cause"]
    assert causes["wait"] >= 0.2 * step["duration_ms"]
    assert (max(causes, key=causes.get) == "wait") == named
    assert ("gpu-waits" in [f["id"] for f in d["findings"]]) == named


def test_the_decode_batch_advice_stakes_the_time_its_gemms_spend_beyond_their_flops(tmp_path):
    """catches: the time a decode GEMM's FLOPs need at the achievable peak converted with the wrong
    factor (``* 1e3`` read as ``* 1001``), so the time at stake is off. One bf16 aten::mm
    [8, 4096] x [4096, 4096] on an A100, one 100 us kernel: 2 x 8 x 4096^2 = 268,435,456 FLOPs,
    memory-bound (7.97 FLOP/byte); at stake is 0.1 ms less what those FLOPs need at the achievable
    matrix peak the kernel was priced against (its ``achievable_flops``)."""
    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=8", 0.0, 200.0)
    ext = doc.op("aten::mm", 2.0, 150.0, dims=[[8, 4096], [4096, 4096]], types=["c10::BFloat16"] * 2)
    doc.kernel(GEMM, 5.0, 20.0, 100.0, ext=ext)
    a = analyze(read_trace(doc.write(tmp_path / "batch.json")))
    (peak,) = a.work["achievable_flops"].tolist()
    f = next(f for f in a.findings if f.id == "decode-batch")
    assert f.sum_ms == pytest.approx(0.1 - 2 * 8 * 4096**2 / peak * 1e3, rel=1e-12)
    assert "memory-bound at 7.97 FLOP/byte" in f.text


def test_a_phases_mfu_and_mbu_against_hand_arithmetic(tmp_path):
    """catches: the achievable peak left out of the MFU basis when it differs from the datasheet
    peak (``!=`` read as ``==``), the sources of the FLOPs not counted when the work table says
    where each came from, and MFU/MBU from wrong formulas. One bf16 aten::mm [1024, 1024] x
    [1024, 1024], one 100 us kernel, in a 1 ms prefill step on an A100: MFU = 2 x 1024^3 FLOPs /
    1e-3 s / 312 TFLOP/s (the datasheet's dense bf16) = 0.688%; MBU = 3 x 1024^2 x 2 bytes /
    1e-3 s / 2,039 GB/s = 0.309%. The achievable figure divides by the achievable peak the basis
    states (0.86 x 312 = 268.3 TFLOP/s)."""
    doc = Doc(device="NVIDIA A100-SXM4-80GB")
    doc.annotation("tracekit::prefill#0 bs=1 tokens=1024", 0.0, 1000.0)
    ext = doc.op("aten::mm", 5.0, 200.0, dims=[[1024, 1024], [1024, 1024]], types=["c10::BFloat16"] * 2)
    doc.kernel(GEMM, 10.0, 20.0, 100.0, ext=ext)
    p = analyze(read_trace(doc.write(tmp_path / "mm.json"))).to_dict()["phases"]["prefill"]
    assert p["time_ms"] == pytest.approx(1.0)
    assert p["mfu"] == pytest.approx(2 * 1024**3 / 1e-3 / 312e12, rel=1e-9)
    assert p["mfu_achievable"] == pytest.approx(2 * 1024**3 / 1e-3 / (0.86 * 312e12), rel=1e-9)
    assert p["mbu"] == pytest.approx(3 * 1024**2 * 2 / 1e-3 / 2039e9, rel=1e-9)
    assert p["mfu_basis"].startswith(
        "bf16 matrix peak of A100 80GB SXM: 312.0 TFLOP/s (datasheet peak); achievable 268.3 TFLOP/s (0.86 x peak"
    ), p["mfu_basis"]
    assert p["mfu_basis"].endswith("; FLOPs from recorded shapes 100%")
    assert p["mbu_basis"].endswith("; bytes from recorded shapes 100%")


def test_the_sources_of_a_figures_flops_are_listed_largest_first():
    """catches: the sources of a phase's FLOPs listed smallest first. A quarter of the FLOPs from
    recorded shapes and three quarters from the model: "the model 75%, recorded shapes 25%"."""
    from tracekit.analysis.figures import _sources_text

    w = pd.DataFrame({"flops": [1e9, 3e9], "cost_source": ["shapes", "model"]})
    assert _sources_text(w, "flops") == "FLOPs from the model 75%, recorded shapes 25%"


@pytest.mark.parametrize("key", ["gb10_vllm", "rtx3090_vllm", "mi300x_extend", "h100_hf"])
def test_every_phases_gpu_time_is_its_busy_plus_idle_time(key):
    """One set of books: a phase's ``gpu_time_ms`` is its busy plus its idle time, and that is
    the phase's time (docs/json-schema.md). Fails if the two are combined any other way."""
    for name, p in analyze(read_real(key)).to_dict()["phases"].items():
        assert p["gpu_time_ms"] == pytest.approx(p["gpu_busy_ms"] + p["gpu_idle_ms"], rel=1e-12), name
        assert p["gpu_time_ms"] == pytest.approx(p["time_ms"], rel=1e-9), name
