"""Collectives from the interconnect (issue 49): the bandwidth a tensor-parallel group has, the
latency-bandwidth bound of each algorithm, the efficiency that transfers, and the report's
communication term. Expectations are hand arithmetic from the datasheet figures in the tests."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import read_real, real_trace_path

from tracekit.specs.links import group_link
from tracekit.specs.lookup import spec_by_name
from tracekit.whatif.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    BANDWIDTH,
    LATENCY,
    ONE_SHOT,
    RING,
    TREE,
    TWO_SHOT,
    bound,
    classify,
    project_collectives,
)

GB = 1e9


def link(key, n):
    return group_link(spec_by_name(key), n)


def test_mi300x_tp4_reaches_three_peers_not_seven():
    # Bug: the whole node's 7 x 64 = 448 GB/s given to a 4-GPU group (issue 49's wrong constant).
    assert link("mi300x", 4).bandwidth == pytest.approx(3 * 64 * GB)
    assert link("mi300x", 2).bandwidth == pytest.approx(64 * GB)
    assert link("mi300x", 8).bandwidth == pytest.approx(7 * 64 * GB)
    assert "3 of its 7" in link("mi300x", 4).describe()


def test_nvswitch_gives_full_bandwidth_whatever_the_group():
    # Bug: a switched NVLink system treated like a mesh (bandwidth shrinking with N).
    for n in (2, 4, 8):
        assert link("h100-sxm", n).bandwidth == pytest.approx(18 * 25 * GB)  # 450 GB/s per direction
        assert link("b200", n).bandwidth == pytest.approx(18 * 50 * GB)


def test_bridge_beyond_its_pair_falls_back_to_pcie():
    # Bug: an H100 NVL's two-card bridge assumed to join a group of 4.
    assert link("h100-nvl", 2).bandwidth == pytest.approx(12 * 25 * GB)
    assert link("h100-nvl", 4).bandwidth == pytest.approx(63 * GB)


def test_no_link_for_one_rank_or_a_row_without_topology():
    assert link("mi300x", 1) is None
    assert link("gb10", 2) is None  # no GPU-to-GPU link on a DGX Spark


def test_prefill_all_reduce_on_mi300x_tp4_is_bandwidth_bound_at_58_percent():
    # Issue 49's case: 1,049 x 8,192 bf16 all-reduced over TP4 MI300X in 262 µs.
    s = 1049 * 8192 * 2
    b = bound(ALL_REDUCE, RING, s, link("mi300x", 4))
    # Ring: 2(N-1)/N x S over 192 GB/s; latency RCCL 12 µs + 2(N-1) = 6 steps x 0.8 µs.
    assert b.bandwidth == pytest.approx(1.5 * s / (192 * GB))
    assert b.latency == pytest.approx(12e-6 + 6 * 0.8e-6)
    assert b.dominant == BANDWIDTH
    assert b.total / 262e-6 == pytest.approx((134.28 + 16.8) / 262, rel=1e-3)  # ~58%, not "22%"


def test_small_decode_all_reduce_is_latency_bound():
    # Bug: a 16-token decode all-reduce priced by bandwidth alone (a few µs of a 20 µs kernel).
    b = bound(ALL_REDUCE, RING, 16 * 8192 * 2, link("mi300x", 4))
    assert b.dominant == LATENCY and b.latency > 5 * b.bandwidth


def test_algorithms_step_and_traffic_counts():
    lk = link("h100-sxm", 8)
    s = 8e6
    per = lambda t: t * s / (450 * GB)  # noqa: E731
    assert bound(ALL_REDUCE, RING, s, lk).bandwidth == pytest.approx(per(2 * 7 / 8))
    assert bound(ALL_REDUCE, ONE_SHOT, s, lk).bandwidth == pytest.approx(per(7))
    assert bound(ALL_REDUCE, TWO_SHOT, s, lk).latency == pytest.approx(6.6e-6 + 2 * 0.6e-6)
    assert bound(ALL_REDUCE, TREE, s, lk).bandwidth == pytest.approx(per(2))
    assert bound(ALL_GATHER, RING, s, lk).bandwidth == pytest.approx(per(7 / 8))
    assert bound(ALL_GATHER, RING, s, lk).latency == pytest.approx(6.6e-6 + 7 * 0.6e-6)


def test_names_say_the_collective_and_algorithm():
    assert classify("ncclDevKernel_AllGather_RING_LL") == (ALL_GATHER, RING)
    assert classify("ncclKernel_AllReduce_TREE_LL_Sum_bf16") == (ALL_REDUCE, TREE)
    assert classify("void vllm::cross_device_reduce_1stage<bf16, 4>") == (ALL_REDUCE, ONE_SHOT)
    assert classify("two_shot_all_reduce_kernel") == (ALL_REDUCE, TWO_SHOT)


def test_the_efficiency_transfers_not_the_time():
    # One 17.2 MB all-reduce measured at 300 µs on H100 TP4 -> MI300X TP4.
    s = 1049 * 8192 * 2
    src, tgt = link("h100-sxm", 4), link("mi300x", 4)
    b_s = 6.6e-6 + 6 * 0.6e-6 + 1.5 * s / (450 * GB)
    b_t = 12e-6 + 6 * 0.8e-6 + 1.5 * s / (192 * GB)
    priced = np.array([1.5 * s])  # the per-rank ring traffic pricing records
    cp = project_collectives(
        np.array(["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]), priced, np.array([300e-6]), np.array([0]), src, tgt
    )
    assert cp.message[0] == pytest.approx(s)
    assert cp.efficiency[0] == pytest.approx(b_s / 300e-6)
    assert cp.projected[0] == pytest.approx(b_t / (b_s / 300e-6))
    # A learnt efficiency on the target's class replaces the source's own.
    cp2 = project_collectives(
        np.array(["x_all_reduce"]), priced, np.array([300e-6]), np.array([0]), src, tgt, {ALL_REDUCE: 0.5}
    )
    assert cp2.projected[0] == pytest.approx(b_t / 0.5)


def test_tp_trace_reports_the_communication_term_with_its_parts_and_link():
    # Bug: collectives moved by one bandwidth ratio, with no latency part and no link named.
    real_trace_path("b200_vllm")
    from tracekit.report.project import render_projection
    from tracekit.whatif.project import project

    pj = project(read_real("b200_vllm"), "mi300x")
    c = pj.phases["prefill"]["communication"]
    assert c["collectives"] > 0
    assert c["latency_ms"] + c["bandwidth_ms"] == pytest.approx(c["projected_ms"], rel=1e-6)
    assert c["target_link"]["ranks"] == 8 and c["target_link"]["bandwidth"] == pytest.approx(448 * GB)
    assert c["source_link"]["topology"] == "switch"
    text = render_projection(pj, "text")
    assert "link assumed: mi300x, TP8" in text and "dominates" in text


def test_the_report_prices_a_tp4_all_reduce_on_the_links_its_group_has(tmp_path):
    """catches: the analysis pricing collectives against every link of the node (issue 49: a TP4
    MI300X prefill all-reduce read "latency-limited at 22%"). A 1,049 x 8,192 bf16 all-reduce
    (17.2 MB) in 262 us on rank 0 of 4: a ring moves 2 x 3/4 of it per rank, 25.8 MB, over the
    three xGMI links to its peers, 3 x 64 = 192 GB/s: 134 us, 51% of the measured time."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    d = Doc(device="AMD Instinct MI300X", rank=0, world=4)
    d.annotation("prefill", 0, 400)
    ext = d.op("c10d::allreduce_", 5, 20, dims=[[1049, 8192]], types=["c10::BFloat16"])
    d.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 10, 15, 262, ext=ext)
    a = analyze(read_trace(d.write(tmp_path / "tp4.json")))
    row = a.work.iloc[0]
    traffic = 2 * 3 / 4 * 1049 * 8192 * 2
    assert row["bytes"] == pytest.approx(traffic)
    assert row["peak_bw"] == pytest.approx(3 * 64e9)
    assert row["roof_fraction"] == pytest.approx(traffic / 192e9 / 262e-6, rel=1e-6)  # 0.51
    assert row["limiter"] != "latency"
