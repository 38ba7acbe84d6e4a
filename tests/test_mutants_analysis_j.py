"""Behaviours of tracekit.analysis that surviving mutants of the seed-33 sample showed no test
pinned: the layer-count fit's cap on layers per model layer, and the launch-pattern cut's floor of
-1 on an offset's median pause. Expected values are hand arithmetic on hand-built inputs or the
docstrings' stated rules."""

from __future__ import annotations

import numpy as np

from tracekit import frameworks
from tracekit.analysis.pricing import model_fit
from tracekit.analysis.steps import launches
from tracekit.analysis.steps.evidence import W_HEAVY, Ballot, structure_vote
from tracekit.analysis.waiting import idle
from tracekit.analysis.waiting.host import Coverage


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
    g = {"start_ns": np.array([0]), "end_ns": np.array([1_000]), "issue_ns": np.array([-1]),
         "op_start_ns": np.array([-1]), "op_end_ns": np.array([-1])}
    sync = (np.array([100]), np.array([300]))  # 200 ns of sync inside the 1,000 ns gap
    cov = Coverage({"sync": sync, "launch": sync, "busy": sync})
    out = idle._split(g, cov)
    row = dict(zip(idle.CAUSES, out[0].tolist()))
    # issue unknown: sync 200, no launch / host / wait, the other 1,000 - 200 = 800 unattributed
    assert row[idle.SYNC] == 200
    assert row[idle.UNATTRIBUTED] == 800
    assert sum(row.values()) == 1_000
