"""Behaviours of tracekit.analysis that surviving mutants of the seed-35 sample showed no test
pinned. Expected values are hand arithmetic over hand-built tables, never the column under test."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis.analyze import _steps_with_attribution


def test_a_steps_bytes_are_its_priced_kernels_and_unknown_when_none_is_priced():
    """catches: the per-step byte sum's min_count changed: 0 gives a step whose only kernel has
    unknown bytes 0 bytes (and so an MBU of 0) instead of unknown; 2 leaves a step of one priced
    kernel unknown. Three steps of 1 us: step 0 has kernels of 1,000 B and unknown bytes (its
    priced part, 1,000 B), step 1 one kernel of unknown cost, step 2 one kernel of 7,000 B: at a
    7 GB/s peak, 7,000 B in 1 us is 7 GB/s, an MBU of 1."""
    steps = pd.DataFrame({"step": [0, 1, 2], "duration_ns": [1000, 1000, 1000]})
    work = pd.DataFrame({"step": [0, 0, 1, 2], "dur_ns": [100, 200, 300, 400],
                         "flops": [1e6, 2e6, np.nan, 5e6], "bytes": [1e3, np.nan, np.nan, 7e3],
                         "bound": ["compute", "memory", "memory", "memory"]})
    out = _steps_with_attribution(steps, work, types.SimpleNamespace(peak_bandwidth=7e9))
    assert out["bytes"].iloc[0] == 1000.0 and np.isnan(out["bytes"].iloc[1]) and out["bytes"].iloc[2] == 7000.0
    assert np.isnan(out["flops"].iloc[1]) and out["flops"].iloc[2] == 5e6
    assert np.isnan(out["mbu"].iloc[1]) and out["mbu"].iloc[2] == pytest.approx(1.0, rel=1e-12)
    assert out["unknown_cost_ms"].tolist() == pytest.approx([0.0, 300 / 1e6, 0.0])
