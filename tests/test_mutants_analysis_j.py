"""Behaviours of tracekit.analysis that surviving mutants of the seed-33 sample showed no test
pinned: the layer-count fit's cap on attention kernels per model layer, the launch-pattern cut's
floor of -1 on an offset's median pause, a prefill structure verdict's vote, a merged timeline
segment's count in its label, the unattributed rest of a gap whose next issue is unknown, the MFU
and roofline fraction refused above the roof's 2% tolerance, and the outside-steps finding from a
tenth of the kernel time. Expected values are hand arithmetic on hand-built inputs (the A100's
datasheet BF16 peak, kernel durations placed by the test) or the docstrings' stated rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
from kineto import Doc

from tracekit import frameworks, read_trace
from tracekit.analysis import analyze, figures, tables
from tracekit.analysis.findings.rules import OUTSIDE_SHARE
from tracekit.analysis.pricing import model_fit
from tracekit.analysis.steps import launches
from tracekit.analysis.steps.evidence import W_HEAVY, Ballot, structure_vote
from tracekit.analysis.steps.work import NO_TIME
from tracekit.analysis.waiting import idle
from tracekit.analysis.waiting.host import Coverage
from tracekit.specs import spec_by_name


def test_a_layer_count_over_the_per_layer_cap_does_not_fit():
    """catches: the per-layer cap checked on ``n % layers`` (always 0 once divisible) rather than
    ``n // layers``: 5 x 32 layers would fit a 32-layer model."""
    assert model_fit.PER_LAYER_MAX == 4  # a small integer: at most 4 attention kernels per layer
    assert model_fit._fits(4 * 32, 32)  # 4 per layer: fits
    assert not model_fit._fits(5 * 32, 32)  # 5 per layer: over the cap


def test_cut_offset_is_zero_when_no_median_pause_exceeds_minus_one():
    """catches: the floor the medians must beat lowered from -1 (the docstring's rule) to -2: a
    median of -1.5 at offset 1 would then move the cut off 0."""
    anchors = np.array([0, 3])
    # period 3; gaps at offsets 0,1,2 of both occurrences: medians -5, -1.5, -5
    gaps = np.array([-5.0, -1.5, -5.0, -5.0, -1.5, -5.0])
    assert launches._cut_offset(anchors, 3, gaps) == 0


def test_a_prefill_structure_verdict_votes_prefill():
    """catches: the structure verdict's phase compared with ``>`` rather than ``==`` (no phase
    name sorts after "prefill"), so a heavy step's "holds prefill work" verdict is cast as decode."""
    b = Ballot()
    structure_vote(b, (frameworks.PREFILL, "holds prefill work: 3x the median GPU time"))
    assert b.votes == [(frameworks.PREFILL, W_HEAVY, "3x the median GPU time")]


def test_a_merged_segments_label_counts_its_intervals():
    """catches: a merged segment's label counting ``last - first & 1`` intervals (``&`` for ``+``):
    two overlapping GEMMs merged into one segment labelled "1 × gemm" instead of "2 × gemm"."""
    from tracekit.analysis.steps import timeline

    # two GEMMs of one key, 0-5 ns and 4-9 ns: they overlap, so they share a segment at any tolerance
    s = np.array([1_000, 1_004], dtype=np.int64)
    e = np.array([1_005, 1_009], dtype=np.int64)
    key = np.array(["gemm", "gemm"], dtype=object)
    label = np.array(["k0", "k1"], dtype=object)
    segs = timeline._segments(s, e, key, label, 1_000, 9)
    assert segs.count == [2]
    assert list(segs.labels) == ["2 × gemm"]


def test_an_unissued_gaps_rest_after_sync_is_unattributed():
    """catches: the unattributed time of a gap whose next kernel's issue is unknown computed as
    ``(b - a) ** sync`` rather than ``(b - a) - sync``."""
    none = NO_TIME  # no issue, no launching op in the trace (-1 would be a time: clocks run below zero)
    g = {
        "start_ns": np.array([0]),
        "end_ns": np.array([1_000]),
        "issue_ns": np.array([none]),
        "op_start_ns": np.array([none]),
        "op_end_ns": np.array([none]),
    }
    sync = (np.array([100]), np.array([300]))  # 200 ns of sync inside the 1,000 ns gap
    cov = Coverage({"sync": sync, "launch": sync, "busy": sync})
    out = idle._split(g, cov)
    row = dict(zip(idle.CAUSES, out[0].tolist()))
    # issue unknown: sync 200, no launch / host / wait, the other 1,000 - 200 = 800 unattributed
    assert row[idle.SYNC] == 200
    assert row[idle.UNATTRIBUTED] == 800
    assert sum(row.values()) == 1_000


# --- figures and tables: above the roof by a few percent is not a fact --------------------------


def _matrix_work(flops: float) -> pd.DataFrame:
    """One model-priced BF16 GEMM unit of 1 ms and 1 MB with the given FLOPs."""
    return pd.DataFrame(
        {
            "flops": [flops],
            "bytes": [1e6],
            "dur_ns": [1e6],
            "bound": ["compute"],
            "pricing_op": [-1],
            "cost_source": ["model"],
            "component": ["mlp"],
            "category": ["gemm"],
            "dtype": ["bf16"],
            "unit": ["matrix"],
            "name": ["ampere_bf16_s16816gemm_bf16_128x128"],
        }
    )


A100_BF16 = 312e12  # A100 SXM BF16 dense tensor-core peak, NVIDIA's datasheet: 312 TFLOP/s


def test_mfu_above_the_peak_by_more_than_the_tolerance_is_refused():
    """catches: the MFU refused only above ``1 // ROOF_TOLERANCE`` (49x the peak) rather than
    above 1 + ROOF_TOLERANCE: 150% of the peak reported as an MFU of 1.5."""
    spec = spec_by_name("A100 80GB SXM")
    assert spec.peak_flops("bf16", "matrix") == A100_BF16
    # 1.5 x 312 TFLOP/s for 1 ms = 4.68e11 FLOPs: 150% of the peak
    mfu, _, _, why = figures._mfu(_matrix_work(1.5 * A100_BF16 * 1e-3), 1.0, spec)
    assert mfu is None and why.startswith("the matrix FLOPs counted would be 150% of the peak")
    # half the peak's FLOPs in 1 ms: MFU 0.5
    mfu, _, _, why = figures._mfu(_matrix_work(0.5 * A100_BF16 * 1e-3), 1.0, spec)
    assert mfu == 0.5 and why is None


def test_a_roofline_point_above_the_roof_has_no_fraction():
    """catches: a point's roof fraction kept up to ``1.0 / ROOF_TOLERANCE`` (50x the roof) rather
    than 1.0 + ROOF_TOLERANCE: a GEMM at 150% of the compute roof shown as fraction 1.5."""
    spec = spec_by_name("A100 80GB SXM")
    # 4.68e11 FLOPs over 1 MB: compute-bound; 4.68e11 / 312e12 = 1.5 ms of roof time in 1 ms
    over = tables.roofline_points(_matrix_work(1.5 * A100_BF16 * 1e-3), spec, {})["points"]
    assert len(over) == 1 and over[0]["roof_fraction"] is None
    half = tables.roofline_points(_matrix_work(0.5 * A100_BF16 * 1e-3), spec, {})["points"]
    assert half[0]["roof_fraction"] == 0.5


# --- findings: kernel time outside the steps -----------------------------------------------------


def _steps_doc(outside: int) -> Doc:
    """``outside`` 100 us kernels before three ProfilerSteps of three 100 us kernels each."""
    d, ts = Doc(), 1000.0
    for _ in range(outside):
        d.kernel("pre_kernel", ts, ts + 5.0, 100.0)
        ts += 200.0
    for i in range(3):
        d.annotation(f"ProfilerStep#{i + 1}", ts, 1000.0)
        for k in range(3):
            d.kernel("step_kernel", ts + 10 + k * 300, ts + 15 + k * 300, 100.0)
        ts += 1000.0
    return d


def test_outside_steps_finding_from_a_tenth_of_the_kernel_time(tmp_path):
    """catches: the outside-steps finding given when the share outside steps is *under*
    OUTSIDE_SHARE (``<`` for ``>=``): a trace with every kernel in a step told 0% ran outside,
    and one with exactly a tenth outside told nothing."""
    assert OUTSIDE_SHARE == 0.10
    none = analyze(read_trace(_steps_doc(0).write(tmp_path / "none.json")))
    assert len(none.steps) == 3 and "outside-steps" not in [f.id for f in none.findings]
    # 1 kernel of 100 us outside, 9 x 100 us inside: 100 / 1,000 = 10%, at the threshold
    tenth = analyze(read_trace(_steps_doc(1).write(tmp_path / "tenth.json")))
    found = [f for f in tenth.findings if f.id == "outside-steps"]
    assert len(found) == 1 and found[0].text.startswith("10% of the trace's kernel time ran outside any step")
