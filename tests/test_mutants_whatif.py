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


def test_collectives_with_known_bytes_move_with_the_interconnect_and_unknown_ones_stay():
    """catches: the collectives that move with the interconnect picked by unknown bytes instead of
    known ones (the ``~`` of ``~np.isnan(bytes)`` dropped): the all-reduce whose bytes the trace
    states would stay as measured and the one of unknown size would move."""
    import numpy as np
    import pandas as pd

    from tracekit.analysis.pricing.roofline import INTERCONNECT
    from tracekit.specs import factors
    from tracekit.specs.lookup import spec_by_name
    from tracekit.whatif.reprice import reprice

    src, tgt = spec_by_name("h100-sxm"), spec_by_name("b200")  # NVLink 450 GB/s and 900 GB/s a direction
    work = pd.DataFrame(
        {
            "dur_ns": [1_000_000, 1_000_000],
            "flops": [0.0, np.nan],
            "bytes": [64e6, np.nan],
            "dtype": ["bf16", "bf16"],
            "unit": ["vector", "vector"],
            "bound": [INTERCONNECT] * 2,
            "limiter": [INTERCONNECT] * 2,
            "kind": ["kernel", "kernel"],
            "category": ["communication", "communication"],
        }
    )
    rp = reprice(work, src, tgt, ranks=8)
    assert rp.moved.tolist() == [True, False] and rp.unknown.tolist() == [False, True]
    # Issue 49: the efficiency transfers. Ring all-reduce over 8 ranks, both through NVSwitch: the
    # priced 64 MB are the per-rank traffic; latency NCCL 6.6 µs + 14 steps x 0.6 µs on both.
    lat = 6.6e-6 + 14 * 0.6e-6
    b_s, b_t = lat + 64e6 / 450e9, lat + 64e6 / 900e9
    assert rp.central[0] == pytest.approx(1_000_000 * b_t / b_s, rel=1e-9)
    assert factors.vendor_class(src).key == factors.vendor_class(tgt).key
    assert rp.central[1] == 1_000_000


# --- seed 33


def test_kernels_of_a_dtype_the_target_lacks_are_counted_in_its_note():
    """catches: the time of the kernels projected at a wider dtype's rate summed from -1 ms instead
    of 0 in the note that says so."""
    import pandas as pd

    from tracekit.specs.lookup import spec_by_name
    from tracekit.whatif.reprice import reprice

    src, tgt = spec_by_name("b200"), spec_by_name("h100-sxm")  # Blackwell has FP4 matmul peaks, Hopper none
    assert not tgt.peak_flops("fp4", "matrix") and src.peak_flops("fp4", "matrix")
    # Two FP4 GEMMs of 0.25 and 0.5 ms: 0.75 ms of FP4 work that H100 runs at another dtype's rate.
    work = pd.DataFrame(
        {
            "dur_ns": [250_000, 500_000],
            "flops": [1e12, 2e12],
            "bytes": [1e8, 2e8],
            "dtype": ["fp4", "fp4"],
            "unit": ["matrix", "matrix"],
            "bound": ["compute", "compute"],
            "limiter": ["compute", "compute"],
            "kind": ["kernel", "kernel"],
            "category": ["gemm", "gemm"],
        }
    )
    notes = [n for n in reprice(work, src, tgt).notes if "has no fp4 matrix peak" in n]
    assert len(notes) == 1 and ": 0.75 ms of fp4 kernels are projected at its " in notes[0], notes


# --- seed 34 -------------------------------------------------------------------------------------


def test_a_projections_headline_holds_the_figures_the_run_has(b300_projected):
    """catches: the skip of a figure neither measured nor projected negated (`measured is not
    None`), which lists TTFT and every prefill figure of a decode-only run as rows of nothing. The
    run (SGLang decode steps, no prefill, no request timing) has three of the eight: its decode
    step p50, decode tokens/s and decode MBU, each stated as the run's own analysis has it."""
    source, pj = b300_projected
    rows = pj.to_dict()["headline"]
    assert [r["key"] for r in rows] == ["decode_step_p50", "decode_tokens_per_s", "decode_mbu"]
    m = source.metrics
    assert [r["measured"] for r in rows] == [m["decode_step_ms"]["p50"], m["decode_tokens_per_s"], m["decode_mbu"]]
    assert m.get("ttft_ms") is None and not source.phases.get("prefill")
    assert all(r["projected"] is not None and r["range"][0] <= r["projected"] <= r["range"][1] for r in rows)
