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
    assert text == ("phase votes: prefill 2.5 (prefill reason a; prefill reason b), decode 1 (decode reason); "
                    "the decode evidence is outweighed")


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
