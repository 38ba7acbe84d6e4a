"""Graph-capture shapes price a replay only at the batch size the graph was captured at
(issue 24, item 4), on the shared SGLang Qwen3-8B decode step and its capture trace."""

from __future__ import annotations

import dataclasses

import numpy as np
from conftest import read_real

from tracekit.analysis.pricing.attribution import attribute
from tracekit.analysis.steps.segment import segment
from tracekit.models import load_model
from tracekit.specs import lookup


def _capture_at(batch: int):
    """The shared capture trace (captured at batch 32, ``capture_32_DECODE``) with its capture
    range renamed to another batch size: the same ops, shapes and launches, another label."""
    cap = read_real("mi300x_capture")
    ann = cap.annotations.copy()
    names = ann["name"].astype(str)
    assert (names == "capture_32_DECODE").any()
    ann["name"] = names.replace("capture_32_DECODE", f"capture_{batch}_DECODE")
    return dataclasses.replace(cap, annotations=ann)


def _attr(capture, model=None):
    trace = read_real("mi300x_decode")
    seg = segment(trace)
    return seg, attribute(trace, seg, lookup(trace.device_props()), capture=capture, model=model)


def test_a_capture_at_another_batch_prices_no_replay():
    """Bug: a capture at another batch size lends its shapes to the replay anyway (the
    gpt-oss mixed step whose QKV got 12x too little). The step states bs=32 (its annotation
    ``step[DECODE bs=32]``); a capture labelled batch 16 must price none of its replayed kernels."""
    seg, attr = _attr(_capture_at(16))
    t = attr.table
    replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
    assert replayed.sum() == 544  # PROVENANCE: 544 of 555 kernels hang off the hipGraphLaunch
    assert t.loc[replayed, "flops"].isna().all()
    assert (t.loc[replayed, "cost_source"] != "capture").all()
    assert t.loc[replayed, "cost_reason"].str.contains("captured at batch 16, this step ran batch 32").all()
    assert "captured at batch 16" in attr.capture_note and "0 of 544" in attr.capture_note


def test_a_capture_at_another_batch_leaves_the_replay_to_the_model():
    """Bug: with --model, replayed GEMMs keep a wrong-batch capture's shapes instead of the
    model's cost at the step's own 32 tokens. Decode GEMMs of Qwen3-8B at 32 tokens: the
    model's linear work is 2 * 32 * (linear parameters per layer x 36 layers) FLOPs."""
    model = load_model("qwen3-8b")
    seg, attr = _attr(_capture_at(16), model=model)
    t = attr.table
    replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
    gemm = replayed & (t["category"] == "gemm").to_numpy() & (t["component"] == "linear").to_numpy()
    assert gemm.any() and (t.loc[gemm, "cost_source"] == "model").all()
    # Hand arithmetic: per layer q 4096x4096, k and v 4096x1024, o 4096x4096, gate and up
    # 4096x12288, down 12288x4096 = 192,937,984 parameters; 36 layers; 2 FLOPs per
    # multiply-add per token, 32 tokens.
    per_layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 4096 * 12288 * 3
    assert per_layer == 192_937_984
    expected = 2 * 32 * per_layer * 36
    assert np.isclose(t.loc[(t["component"] == "linear").to_numpy(), "flops"].sum(), expected, rtol=1e-6)


def test_b_the_matching_batch_still_gets_capture_shapes():
    """Bug: the batch check refuses the capture it belongs to (batch 32 replay, batch 32 capture)."""
    seg, attr = _attr(read_real("mi300x_capture"))
    t = attr.table
    replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
    assert "544 of 544" in attr.capture_note
    gemm = replayed & (t["category"] == "gemm").to_numpy()
    assert gemm.any() and (t.loc[gemm, "cost_source"] == "capture").all()
    # The capture's QKV GEMM input is [32, 4096]: the batch the step ran.
    assert t.loc[gemm, "flops"].notna().all()


def test_c_eager_ops_beside_a_replay_keep_their_own_costs():
    """Bug: capture ops are assigned to kernels that ran outside the replay (the step's eager
    metadata, sampling and copy ops), so a piecewise/mixed step's eager work is priced from a
    capture rather than its own recorded shapes. The decode step runs 11 eager kernels and 3
    copies beside the replay; with any capture (matching or not) their costs equal those without one."""
    trace = read_real("mi300x_decode")
    seg = segment(trace)
    spec = lookup(trace.device_props())
    alone = attribute(trace, seg, spec).table
    eager = ~seg.work["graph"].to_numpy()
    assert eager.sum() == 14 and (seg.work.loc[eager, "kind"] == "kernel").sum() == 11
    own = alone.loc[eager, ["flops", "bytes", "pricing_op", "cost_source"]]
    assert own["flops"].notna().any()
    for capture in (read_real("mi300x_capture"), _capture_at(16)):
        t = attribute(trace, seg, spec, capture=capture).table
        got = t.loc[eager, ["flops", "bytes", "pricing_op", "cost_source"]]
        assert (got["cost_source"] != "capture").all()
        assert np.array_equal(got["pricing_op"].to_numpy(), own["pricing_op"].to_numpy())
        assert np.allclose(got["flops"].to_numpy(float), own["flops"].to_numpy(float), equal_nan=True)
        assert np.allclose(got["bytes"].to_numpy(float), own["bytes"].to_numpy(float), equal_nan=True)


def test_a_by_order_matching_refuses_another_batch_too():
    """Bug: a CUDA capture (launch calls name no kernels) matched by graph length takes a graph
    of another batch when none of the step's batch fits (the old "prefer the step's batch,
    else any" sort): piecewise graphs of every batch size have the same length."""
    from tracekit.analysis.pricing.capture import with_capture

    trace = read_real("mi300x_decode")
    seg = segment(trace)
    for batch, applies in ((32, True), (16, False)):
        cap = _capture_at(batch)
        cuda_like = dataclasses.replace(cap, runtime=cap.runtime.assign(kernel=None))  # as CUDA writes them
        got = with_capture(trace, seg.work, cuda_like, seg.steps)
        replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
        assert (got.op[replayed] >= 0).all() == applies
        if not applies:
            assert (got.op[replayed] < 0).all()
            assert all("captured at batch 16, this step ran batch 32" in r for r in got.reason[replayed])


def test_a_capture_without_batch_labels_still_matches_and_says_it_did_not_check():
    """The capture trace with its ``capture_32_DECODE`` range renamed to a plain range (a capture
    loop that labels nothing): the graphs' batch is unknown, so the replay still takes their
    shapes, all 544 kernels, and the note says the batch was not checked. Bug: an unlabelled
    graph refused because no graph has the step's batch, or the check silently skipped."""
    from tracekit.analysis.pricing.capture import with_capture

    cap = read_real("mi300x_capture")
    ann = cap.annotations.copy()
    ann["name"] = ann["name"].astype(str).replace("capture_32_DECODE", "warmup")
    trace = read_real("mi300x_decode")
    seg = segment(trace)
    got = with_capture(trace, seg.work, dataclasses.replace(cap, annotations=ann), seg.steps)
    replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
    assert (got.op[replayed] >= 0).all() and "544 of 544" in got.note and "(1 replay matched" in got.note
    assert "names no batch size (no capture_<n>_<mode> range)" in got.note


def test_a_capture_one_launch_short_matches_by_order_nothing_and_says_why():
    """A CUDA-style capture (launch calls name no kernels, so a replay of K kernels takes a
    graph of exactly K launches) with its last launch call cut: no graph fits the 544-kernel
    replay, none of its kernels gets capture shapes, and the reason is the length, not the batch
    (the graph was captured at the step's batch 32). Bug: a graph one launch short matched by
    position anyway (every later kernel priced by its neighbour's op), or the note blaming a
    batch mismatch that is not there."""
    from tracekit.analysis.pricing.capture import with_capture

    cap = read_real("mi300x_capture")
    rt = cap.runtime.assign(kernel=None)
    launches = np.flatnonzero(rt["name"].astype(str).str.contains("LaunchKernel").to_numpy())
    short = dataclasses.replace(cap, runtime=rt.drop(rt.index[launches[-1]]).reset_index(drop=True))
    trace = read_real("mi300x_decode")
    seg = segment(trace)
    got = with_capture(trace, seg.work, short, seg.steps)
    replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
    assert (got.op[replayed] < 0).all()
    assert set(got.reason[replayed]) == {
        "replayed from a CUDA/HIP graph: no captured graph in the capture trace "
        "launches the 544 kernels and copies of this replay"
    }
    assert "1 replay matched no captured graph: no captured graph" in got.note
    assert "got no capture shapes" not in got.note  # no batch mismatch claimed


def test_a_capture_without_stream_capture_calls_is_one_graph_of_its_named_launches():
    """A capture trace recorded without its hipStreamBeginCapture/EndCapture calls (renamed here to
    another runtime call, so every link stays) still names each launch's kernel: it is read as one
    graph of all 546 named launches (the 544 the capture held and 2 around it), at the batch of
    its one ``capture_32_DECODE`` range, and the replay is priced exactly as with the calls.
    Bug: such a trace read as no graph at all (the replay unpriced), or its batch not taken from
    the range (the replay then refused as of an unknown batch)."""
    import pandas as pd

    from tracekit.analysis.pricing.capture_graphs import captured_graphs

    cap = read_real("mi300x_capture")
    rt = cap.runtime.copy()
    names = rt["name"].astype(str)
    marks = names.isin(["hipStreamBeginCapture", "hipStreamEndCapture"])
    assert marks.sum() == 2
    rt["name"] = pd.Categorical(names.where(~marks, "hipStreamIsCapturing"))
    bare = dataclasses.replace(cap, runtime=rt)
    named = int((rt["kernel"].notna() & (rt["kernel"] != "")).sum())
    assert named == 546
    [graph] = captured_graphs(bare)
    assert (len(graph.ops), graph.batch) == (546, 32)
    _, with_calls = _attr(cap)
    _, without = _attr(bare)
    assert "544 of 544" in without.capture_note
    assert with_calls.table[["flops", "bytes"]].equals(without.table[["flops", "bytes"]])
    assert (with_calls.table["cost_source"] == without.table["cost_source"]).all()


def test_an_atom_capture_range_states_the_graphs_batch():
    """ATOM names its capture ranges ``capture_graph_bs_<n>``: the shared capture relabelled so at
    batch 16 must refuse the batch-32 replay exactly as ``capture_16_DECODE`` does.
    Bug: ATOM's range unread, the graph's batch unknown, and a wrong-batch capture lends its shapes."""
    cap = read_real("mi300x_capture")
    ann = cap.annotations.copy()
    ann["name"] = ann["name"].astype(str).replace("capture_32_DECODE", "capture_graph_bs_16")
    seg, attr = _attr(dataclasses.replace(cap, annotations=ann))
    replayed = seg.work["graph"].to_numpy() & (seg.work["op"].to_numpy() < 0)
    assert attr.table.loc[replayed, "flops"].isna().all()
    assert "captured at batch 16" in attr.capture_note
