"""Behaviours of tracekit.analysis that surviving mutants of the seed-34 sample showed no test
pinned: a duration's unit in the advice texts, the sources a cost-sources finding lists, the note
that a world size is unknown, and the work table's achieved FLOP/s and bandwidth. Expected values are hand arithmetic or the work
table's own durations and costs (what the finding and the columns summarise), never the text or
column under test."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import read_real

from tracekit.analysis import analyze
from tracekit.analysis.findings import advice


def test_durations_in_advice_switch_to_seconds_at_one_second():
    """catches: the unit chosen the wrong way round (`not ms >= 1e3`): 1,500 ms printed as
    "1.5e+03 ms" and 12.3 ms as "0.0123 s"."""
    assert advice._ms(1500.0) == "1.5 s"
    assert advice._ms(1000.0) == "1 s"
    assert advice._ms(12.3) == "12.3 ms"
    assert advice._ms(999.0) == "999 ms"


@pytest.fixture(scope="module")
def extend_qwen3():
    return analyze(read_real("mi300x_extend"), model="qwen3-8b")


def test_cost_sources_finding_lists_each_source_over_half_a_percent():
    """catches: the sources listed only where a share equals 0.5% exactly (`==` for `>=`), which
    left the finding's list empty ("Kernel time was priced ; the model is ..."). The MI300X
    decode step (its graph-replayed kernels without their capture) priced with Qwen3-8B: shares
    recomputed from the work table's durations. (The extend step no longer fits: its engine ops
    are priced from their shapes, leaving the model 0.002% of its kernel time.)"""
    a = analyze(read_real("mi300x_decode"), model="qwen3-8b")
    w = a.work
    share = w.groupby("cost_source", observed=True)["dur_ns"].sum() / w["dur_ns"].sum()
    text = next(f["text"] for f in a.to_dict()["findings"] if f["id"] == "cost-sources")
    label = {"shapes": "recorded shapes", "model": "the model", "none": "nothing (unknown cost)"}
    listed = [s for s, v in share.items() if v >= 0.005]
    assert set(listed) == {"shapes", "model", "none"}  # the trace: 95% model, 4% none, 0.85% shapes
    for s, v in share.items():
        assert (f"{v:.0%} by {label[s]}" in text) == (s in listed), (s, v, text)


def test_work_table_achieved_flops_and_bandwidth_are_work_over_duration(extend_qwen3):
    """catches: achieved FLOP/s kept only where a unit's duration is zero (`==` for `>`), so every
    real kernel's was NaN (and a zero-length one's infinite). FLOPs and bytes over the duration
    in seconds, per unit; NaN where there is no duration."""
    w = extend_qwen3.work
    secs = w["dur_ns"].to_numpy(dtype=float) / 1e9
    priced = (secs > 0) & w["flops"].notna().to_numpy()
    assert priced.sum() > 100
    np.testing.assert_allclose(
        w["achieved_flops"].to_numpy()[priced], w["flops"].to_numpy()[priced] / secs[priced], rtol=1e-12
    )
    np.testing.assert_allclose(
        w["achieved_bw"].to_numpy()[priced], w["bytes"].to_numpy()[priced] / secs[priced], rtol=1e-12
    )
    assert np.isnan(w["achieved_flops"].to_numpy()[secs == 0]).all()


@pytest.mark.parametrize("world", [2, None])
def test_ranks_without_a_world_size_say_missing_ranks_cannot_be_named(tmp_path, world):
    """catches: the note that the world size is unknown given when it is known (and not when it is
    not: `if world` for `if not world`). Two hand-built ranks, with distributedInfo's world size
    2, then without one."""
    from kineto import Doc

    from tracekit import read_trace

    for rank in (0, 1):
        doc = Doc(rank=rank, world=world)
        doc.annotation("execute_context_0(0)_generation_4(4)", 100.0, 1000.0 + rank)
        doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 110.0, 120.0, 100.0 + 10 * rank)
        doc.write(tmp_path / f"rank{rank}.json")
    s = analyze(read_trace(tmp_path)).rank_summary
    assert s["present"] == [0, 1]
    unknown = [n for n in s["notes"] if "world size is unknown" in n]
    assert len(unknown) == (0 if world else 1), s["notes"]
