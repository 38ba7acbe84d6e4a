"""Behaviours of tracekit.analysis that surviving mutants of the seed-33 sample showed no test
pinned: the layer-count fit's cap on layers per model layer, and the launch-pattern cut's floor of
-1 on an offset's median pause. Expected values are hand arithmetic on hand-built inputs or the
docstrings' stated rules."""

from __future__ import annotations

import numpy as np

from tracekit.analysis.pricing import model_fit
from tracekit.analysis.steps import launches


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
