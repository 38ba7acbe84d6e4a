"""Behaviours of tracekit.whatif that surviving mutants of the seed-32 sample showed no test
pinned: the measured side of a projection per category and its measured tokens/s. Expected
values are the source run's own analysis (``analyze`` of the same trace, a separate path from
the projection's re-pricing)."""

from __future__ import annotations

import pytest
from conftest import read_real

from tracekit.analysis.analyze import analyze
from tracekit.whatif.project import project

MOE = "qwen3-30b-a3b"


@pytest.fixture(scope="module")
def b300_projected():
    trace = read_real("b300_qwen3_moe")  # SGLang Qwen3-30B-A3B decode steps, batch 16, on a B300
    return analyze(trace, model=MOE), project(trace, "mi300x", model=MOE)


def test_projection_measures_each_category_in_ms_as_the_run_does(b300_projected):
    """catches: the per-category sums of the projection's measured side converted from ns by
    adding 1e6 instead of dividing by it."""
    source, pj = b300_projected
    by_cat = pj.phases["decode"]["by_category_ms"]
    want = source.phases["decode"]["by_category"]  # kernel ms per category in the run's own analysis
    assert set(by_cat) == set(want)
    for c, row in by_cat.items():
        assert row["measured_ms"] == pytest.approx(want[c], rel=1e-9), c
    assert sum(r["measured_ms"] for r in by_cat.values()) < source.phases["decode"]["time_ms"]


def test_projection_states_the_runs_measured_decode_tokens_per_s(b300_projected):
    """catches: the measured tokens/s of a projection's phase given only for phases other than
    prefill and decode (the phase test negated): None where the run measured one."""
    source, pj = b300_projected
    assert source.metrics["decode_tokens_per_s"] > 0
    assert pj.phases["decode"]["measured_tokens_per_s"] == source.metrics["decode_tokens_per_s"]
    assert pj.phases["decode"]["projected_tokens_per_s"] > 0
