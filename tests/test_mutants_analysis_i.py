"""Behaviours of tracekit.analysis that surviving mutants of the seed-31 sample showed no test
pinned: how a phase ballot's evidence text sums each side's weights, which steps the run's median
token count marks heavy, the split-K slices a grid states, the name mask of no names, a window with
no kernels in a split trace, the launch-pattern cut one period before the first occurrence, and
work assigned to its own thread's steps first. Expected values are hand arithmetic on hand-built
inputs or the docstrings' stated rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
from kineto import Doc

from tracekit import frameworks, read_trace
from tracekit.analysis import analyze
from tracekit.analysis.pricing import grid_shapes as gs
from tracekit.analysis.steps import segment as seg
from tracekit.analysis.steps.evidence import HEAVY_GPU_TIME, Ballot, run_votes
from tracekit.analysis.steps.work import assign
from tracekit.analysis.waiting.host import SYNC_CALL, name_mask
from tracekit.analysis.windows import analyse_windows
from tracekit.trace import windows

# --- evidence: the weights in a ballot's text ---------------------------------------------------


def test_ballot_text_sums_each_sides_own_votes():
    """catches: a side's weight in the evidence text summed over votes of other phases too (e.g.
    ``phase >= side``, which for decode also counts the prefill votes: "decode 3.5")."""
    b = Ballot()
    b.cast(frameworks.PREFILL, 2.0, "prefill reason a")
    b.cast(frameworks.PREFILL, 0.5, "prefill reason b")
    b.cast(frameworks.DECODE, 1.0, "decode reason")
    phase, confidence, text = b.verdict()
    assert phase == frameworks.PREFILL
    # prefill 2 + 0.5 = 2.5, decode 1; the decode evidence is outweighed
    assert text == (
        "phase votes: prefill 2.5 (prefill reason a; prefill reason b), decode 1 (decode reason); "
        "the decode evidence is outweighed"
    )


def test_a_step_is_heavy_in_tokens_only_at_twice_the_median():
    """catches: the heavy-tokens vote cast at a step's tokens above the median plus 2 (``+`` for
    ``*``) rather than at twice the median: a step of 20 tokens among steps of 16 is not heavy."""
    assert HEAVY_GPU_TIME == 2.0  # the rule the docstring states: "several times the median step's"
    features = pd.DataFrame({"graph_share": [0.0] * 5})
    busy = np.full(5, 1000, dtype=np.int64)  # equal GPU time: no GPU-time vote
    tokens = np.array([16, 16, 16, 20, 32], dtype=float)  # median 16
    votes = run_votes(features, busy, np.ones(5, dtype=bool), tokens)
    assert set(votes) == {4}  # 32 >= 2 x 16; 20 < 32
    assert votes[4][0][0] == frameworks.PREFILL and votes[4][0][2].startswith("2.0x the tokens")


# --- grid shapes: split-K slices ----------------------------------------------------------------


def test_grids_state_their_split_k_slices():
    """catches: a flat cuBLASLt grid without split-K said to hold 2 (or 0) split-K slices; the
    legacy cuBLAS grid's z dimension not read as its slices."""
    # nvjet (flat, no splitK in the name): grid.x = N tiles x M tiles, one slice.
    s = gs.derive("nvjet_tst_192x8_64x8_4x1_v_bz_TNT", (132, 1, 1), m=1)
    assert s.split == 1
    # cuBLAS legacy: grid z = split-K slices (here 3).
    s = gs.derive("ampere_sgemm_128x64_nn", (22, 64, 3))
    assert s.split == 3


# --- host: the name mask of no names ------------------------------------------------------------


def test_name_mask_has_one_entry_per_name_even_for_none():
    """catches: the mask of an empty name list given a length other than 0 (the host-calls lane of
    a window without runtime calls then holds a phantom call, or numpy refuses a negative size)."""
    assert name_mask(pd.Series([], dtype=str), SYNC_CALL).shape == (0,)
    got = name_mask(pd.Series(["cudaStreamSynchronize", "cudaLaunchKernel"]), SYNC_CALL)
    assert got.tolist() == [True, False]


# --- windows: a window without kernels ----------------------------------------------------------


def _launch_pattern_doc(lead_ops: int = 0) -> Doc:
    """``lead_ops`` CPU ops with no kernels (model loading, say), then six steps told only by their
    launches (a head kernel then two layer kernels, a host pause between steps)."""
    d = Doc()
    ts = 1000.0
    for _ in range(lead_ops):
        d.op("aten::detach", ts, 1.0)
        ts += 2.0
    ts += 500.0
    for _ in range(6):
        for name in ("a_step_head_kernel", "b_layer_kernel", "b_layer_kernel"):
            d.kernel(name, ts, ts + 5.0, 10.0)
            ts += 20.0
        ts += 500.0
    return d


def test_windows_cut_at_idle_instants_with_no_kernels_merge_to_the_whole(tmp_path):
    """catches: the step rows of a window without kernels (a CPU-only lead-in, cut at idle
    instants as ``windows.split`` alone cuts) built from a phantom launch (a one-element launch
    array where there is none: an IndexError, no merged report)."""
    src = _launch_pattern_doc(lead_ops=400).write(tmp_path / "t.json")
    whole = analyze(read_trace(src))
    assert whole.phase_source == frameworks.SOURCE_LAUNCHES and len(whole.steps) == 6
    paths = windows.split(str(src), str(tmp_path / "w"), max_events=150)
    assert sum(len(read_trace(p).kernels) == 0 for p in paths) >= 1  # the lead-in's windows hold no kernels
    merged = analyse_windows(paths, read_trace)
    assert len(merged.steps) == 6
    assert merged.steps["duration_ns"].tolist() == whole.steps["duration_ns"].tolist()
    assert merged.steps["kernels"].tolist() == [3] * 6


# --- launches: one period before the first occurrence --------------------------------------------


def test_launch_pattern_cut_before_the_first_anchor_is_one_period_earlier(tmp_path):
    """catches: the cut one period before the first cut taken from the second cut instead
    (``cuts[1] - period``): where the first two steps differ in length, the first step then
    takes a launch of the second."""
    # Steps of c_layer, a_head, c_layer, the host pausing before each; step 2 launches an extra
    # x_once kernel first. a_head (positions 1, 5, 8, 11, 14, 17: spacings 4, 3, 3, 3, 3, median 3)
    # marks the steps; the pause sits 2 launches after it, so the cuts fall at 3, 7, 10, 13, 16,
    # and one period before the first: 0.
    d = Doc()
    ts = 1000.0
    for j in range(6):
        for name in (("x_once_kernel",) if j == 1 else ()) + ("c_layer_kernel", "a_head_kernel", "c_layer_kernel"):
            d.kernel(name, ts, ts + 5.0, 10.0)
            ts += 20.0
        ts += 500.0
    s = seg.segment(read_trace(d.write(tmp_path / "steps.json")))
    assert s.source == seg.SOURCE_LAUNCHES
    assert s.steps["kernels"].tolist() == [3, 4, 3, 3, 3, 3]
    labels = s.steps["label"].tolist()
    assert labels == [f"launch-pattern step {j + 1} ({n} launches)" for j, n in enumerate([3, 4, 3, 3, 3, 3])]


# --- work: the same thread's steps first --------------------------------------------------------


def test_work_goes_to_its_own_threads_step_before_anothers():
    """catches: a unit issued on one thread assigned to another thread's step that holds its
    issue time (the thread test dropped, e.g. ``has + (tid == t)``: every unit then takes the
    last thread's containing step)."""
    # Thread 1: steps 0 [0, 100] and 1 [101, 200]; thread 2: step 2 [50, 150].
    ranges = pd.DataFrame({"start": [0, 101, 50], "end": [100, 200, 150], "tid": [1, 1, 2]})
    work = pd.DataFrame({"issue_ns": [60, 120, 60, 130, -1], "issue_tid": [1, 1, 2, 3, 1]})
    # (60, thread 1) in step 0; (120, thread 1) in step 1, though thread 2's step 2 holds 120 too;
    # (60, thread 2) in step 2; (130, thread 3, no steps of its own): by time alone, the latest-
    # starting step holding it (step 1, from 101); a unit never issued (-1): no step.
    assert assign(work, ranges).tolist() == [0, 1, 2, 1, -1]


# --- seed 32 ------------------------------------------------------------------------------------
# --- ceilings: a GPU's measured ceilings and the 2% timing tolerance -----------------------------


def _beating(flops_per_s: float, bytes_per_s: float):
    """Two 1 ms kernels: a bf16 GEMM at ``flops_per_s`` and a copy of 1 GB at ``bytes_per_s``."""
    work = pd.DataFrame({"dur_ns": [1_000_000, 1_000_000]})
    table = pd.DataFrame(
        {
            "flops": [flops_per_s * 1e-3, 0.0],
            "bytes": [1.0, bytes_per_s * 1e-3],
            "dtype": ["bf16", "bf16"],
            "unit": ["matrix", "vector"],
        }
    )
    return work, table


def test_a_gpus_measured_ceilings_stand_within_2_percent_and_fall_beyond():
    """catches: the 2% timing tolerance on a GPU's measured ceilings applied as a power
    (``m ** 1.02``: a 1e14 ceiling would need 7e14 to be beaten) or the bandwidth's as a
    remainder or a shift (``1 % 0.02``: any copy at 2% of the ceiling would beat it)."""
    from tracekit.analysis.pricing.ceilings import TOLERANCE, check_ceilings
    from tracekit.specs import SpecMatch, spec_by_name, with_calibration

    assert TOLERANCE == 0.02
    cal = {
        "calibration": {
            "device": "cuda",
            "device_name": "NVIDIA H100 80GB HBM3",
            "dtype": "bf16",
            "matmul_flops": {"bf16": 1e14},
            "copy_bandwidth": 1e12,
            "method": "test",
        }
    }
    match = SpecMatch(with_calibration(spec_by_name("h100-sxm"), cal), "name", "")
    assert match.spec.measured_matmul_flops == {"bf16": 1e14}
    # 1% above either measured ceiling: timing noise, the ceilings stand.
    assert check_ceilings(*_beating(1.01e14, 1.01e12), match) is None
    # 3% above the matmul ceiling (bandwidth within it): the datasheet row instead.
    got = check_ceilings(*_beating(1.03e14, 0.5e12), match)
    assert got is not None and not got[0].spec.measured_matmul_flops and got[0].spec.measured_bandwidth is None
    assert "datasheet row's achievable ceilings are used instead" in got[1]
    # 3% above the bandwidth ceiling alone: the same.
    got = check_ceilings(*_beating(0.5e14, 1.03e12), match)
    assert got is not None and got[0].spec.measured_bandwidth is None


# --- evidence: an eager step among graph-replayed ones ----------------------------------------


def test_an_eager_step_is_heavy_from_1_3_times_the_median_kernels():
    """catches: the eager-step rule's threshold moved (2.3x: a prefill step running eager with
    1.5x the kernels of the graph-replayed decode steps is missed; 0.3x: any eager step is
    called prefill)."""
    from tracekit.analysis.steps.evidence import HEAVY_EAGER_KERNELS, structural_phases

    assert HEAVY_EAGER_KERNELS == 1.3
    # Four decode steps replaying graphs (10 kernels each), then two eager steps of 15 and 12
    # kernels: median 10, so 1.5x (heavy) and 1.2x (not).
    features = pd.DataFrame(
        {
            "gemm_blocks": [np.nan] * 6,
            "kernels": [10, 10, 10, 10, 15, 12],
            "graph_share": [1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
        }
    )
    out = structural_phases(features, np.arange(6), np.ones(6, dtype=bool))
    assert out[4][0] == frameworks.PREFILL and "runs eager with 1.5x the kernels" in out[4][1]
    assert out[5][0] == frameworks.DECODE and out[5][1].startswith("a light step")
    assert all(out[i][0] == frameworks.DECODE for i in range(4))


# --- findings: the undescribed model work's time ----------------------------------------------


def test_undescribed_model_work_finding_states_those_kernels_time_in_ms():
    """catches: the time of the kernels the model does not describe given in the finding as
    ns x 1e6 instead of ns / 1e6 (a figure of 1.56e+13 ms)."""
    from conftest import read_real

    trace = read_real("gb10_vllm")
    a = analyze(trace, model="qwen3.5-27b")
    f = next(f for f in a.findings if f.id == "model-undescribed")
    assert "linear attention" in f.text
    # Qwen3.5-27B's gated-DeltaNet layers: the recurrent update and the causal conv1d kernels,
    # summed from the trace's own kernel table (every one lies inside the 10 decode steps).
    k = trace.kernels
    names = k["name"].astype(str)
    mine = names.str.startswith(("fused_recurrent_gated_delta_rule", "_causal_conv1d_update_kernel"))
    ms = k.loc[mine.to_numpy(), "dur_ns"].sum() / 1e6
    assert f"than those kernels ran ({ms:.3g} ms)" in f.text, (ms, f.text)


# --- launches: too few launches for three steps --------------------------------------------------


def test_fewer_launches_than_three_steps_of_two_are_not_cut_into_steps(tmp_path):
    """catches: the launch-pattern floor of 2 x MIN_STEPS launches computed bitwise (2 & 3 = 2):
    five launches a b a b a then read as steps of a period of 2, though they hold fewer than
    three whole steps."""
    from tracekit.analysis.steps.launches import MIN_STEPS, launch_steps
    from tracekit.analysis.steps.work import work_table

    assert MIN_STEPS == 3

    def launches(n: int):
        d, ts = Doc(), 1000.0
        for j in range(n):
            d.kernel("a_head_kernel" if j % 2 == 0 else "b_tail_kernel", ts, ts + 5.0, 10.0)
            ts += 20.0 if j % 2 == 0 else 520.0  # the host pauses after each b
        t = read_trace(d.write(tmp_path / f"{n}.json"))
        return launch_steps(t, work_table(t)[0])

    assert launches(5) == []
    # Six launches (three steps of a b) are enough: three steps of 2 launches.
    assert [label for *_, label in launches(6)] == [f"launch-pattern step {j} (2 launches)" for j in (1, 2, 3)]


# --- host: the instant a wait is read at, without a blocking call --------------------------------


def test_a_wait_without_a_blocking_call_is_read_at_its_midpoint(tmp_path):
    """catches: the instant of a wait that no synchronising call overlaps computed as anything but
    the middle of the wait (e.g. ``(a // b) // 2``: near 0, outside the run, where no frame is open)."""
    from kineto import TID

    from tracekit.analysis.waiting.host import HostThread

    d = Doc()
    d.kernel("k", 1000.0, 1005.0, 10.0)
    d.op("aten::item", 2000.0, 50.0)  # a synchronising op, at 2.00-2.05 ms: before the wait
    host = HostThread(read_trace(d.write(tmp_path / "t.json")), TID)
    # [3,000,000, 4,000,000] ns: no call or op overlaps it; its middle is 3,500,000.
    assert host.blocking_call(3_000_000, 4_000_000) == (None, None, 3_500_000)


def test_the_three_innermost_user_frames_around_an_instant_outermost_first(tmp_path):
    """catches: the frame walk stopping after the first user frame (the ``len(out) == keep`` stop
    turned into ``is not``), so an idle cause names one frame instead of the three innermost."""
    from kineto import PID, TID

    from tracekit.analysis.waiting.host import HostThread

    d = Doc()
    d.kernel("k", 1000.0, 1005.0, 10.0)
    # Five nested frames around t = 1,500 us, outermost first; the torch one is a library frame.
    frames = [
        "/srv/app/serve.py(10): main",
        "/srv/app/engine.py(20): step",
        "/srv/app/runner.py(30): run",
        "torch/nn/modules/module.py(1500): _call_impl",
        "/srv/app/model.py(40): forward",
    ]
    for depth, name in enumerate(frames):
        d.events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": PID,
                "tid": TID,
                "ts": 1000.0 + depth,
                "dur": 1000.0 - 2 * depth,
                "args": {},
            }
        )
    host = HostThread(read_trace(d.write(tmp_path / "t.json")), TID)
    # The innermost three user frames, skipping torch's, outermost first, by file name.
    assert host.frames_at(1_500_000) == ["engine.py(20): step", "runner.py(30): run", "model.py(40): forward"]
    assert host.frames_at(1_500_000, keep=1) == ["model.py(40): forward"]


# --- timeline: merging by key at a coarser tolerance before slicing by time ----------------------


def test_a_lane_of_one_kind_over_the_cap_merges_by_key_not_into_time_slices():
    """catches: the merge loop stopping after its first tolerance (``not merge`` turned into
    ``merge``), so a lane of one kind of interval over the cap is cut into time slices instead of
    merged into one "N x kind" segment at a coarser tolerance."""
    from tracekit.analysis.steps import timeline

    n = timeline.MAX_SEGMENTS + 100  # 1,600 intervals: over the cap of 1,500
    base = 1_000_000_000
    # GEMMs 10 ns long, one every 10.01 us: the lane spans 1,600 x 10.01 us = 16.016 ms, so the
    # first tolerance (span / 2,000) is 8,008 ns and every 10 us gap is wider: 1,600 segments.
    # At 4 x 8,008 ns every gap is narrower: one segment of all of them.
    assert timeline.RESOLUTION == 2000
    s = base + np.arange(n, dtype=np.int64) * 10_010
    e = s + 10
    key = np.array(["gemm"] * n, dtype=object)
    label = np.array([f"k{i}" for i in range(n)], dtype=object)
    segs = timeline._segments(s, e, key, label, base, int(e[-1] - base))
    assert segs.count == [n]
    assert segs.labels[0] == f"{n} × gemm"
    assert (segs.start_ms[0], segs.end_ms[0]) == (0.0, round(((n - 1) * 10_010 + 10) / 1e6, 4))
