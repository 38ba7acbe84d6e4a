"""Behaviours of tracekit.analysis that surviving mutants of the seed-39 sample showed no test
pinned: which captured graph an unnamed replay takes its shapes from, the working-set size that
proves a bandwidth ceiling wrong, the KV-cache write of values shaped unlike its keys, where an
LM head's work goes when its kernel cannot be told apart, and what a regular launch pattern is.
Expected figures are hand arithmetic on hand-built inputs, or the unchanged run itself."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import read_real

from tracekit.analysis.pricing.op_costs import price

BF16, FP8, I64, F32 = "c10::BFloat16", "c10::Float8_e4m3fn", "long int", "float"


def test_an_unnamed_replay_takes_only_a_graph_of_exactly_its_launches():
    """catches: a replay matched to any captured graph at least as long as it (``len(ops) >=
    length``): by order, a longer graph lends its first ops to a replay of another graph. CUDA
    replays do not name their kernels, so the launch count is all that ties a replay to its graph."""
    from tracekit.analysis.pricing.capture import _graphs_for
    from tracekit.analysis.pricing.capture_graphs import Graph

    graphs = [Graph(ops=np.arange(8), kernels=None, batch=None), Graph(ops=np.arange(5), kernels=None, batch=None)]
    assert _graphs_for(graphs, None, 5, named=False) == ([1], None)
    assert _graphs_for(graphs, None, 8, named=False) == ([0], None)
    fits, why = _graphs_for(graphs, None, 6, named=False)
    assert fits == [] and "launches the 6 kernels and copies of this replay" in why


def test_a_bandwidth_ceiling_is_judged_on_kernels_moving_512_mb_or_more():
    """catches: the cache-proof working set moved off its stated 512 MB (``511999999.0``: a copy of
    511,999,999 bytes, which can sit in a large cache, would prove the DRAM ceiling wrong). A 1 ms
    copy at 3% above the measured 1 TB/s bandwidth: judged at exactly 512e6 bytes, not a byte less."""
    from tracekit.analysis.pricing.ceilings import CACHE_PROOF_BYTES, check_ceilings
    from tracekit.specs import SpecMatch, spec_by_name, with_calibration

    assert CACHE_PROOF_BYTES == 512e6
    cal = {
        "calibration": {
            "device": "cuda",
            "device_name": "NVIDIA H100 80GB HBM3",
            "dtype": "bf16",
            "matmul_flops": {"bf16": 1e14},
            "copy_bandwidth": 1e12,
            "method": "test",
        }
    }
    match = SpecMatch(with_calibration(spec_by_name("h100-sxm"), cal), "name", "")

    def copy_of(nbytes: float, ms: float):
        # A matmul well under its ceiling (so only bandwidth can be beaten) and the copy.
        work = pd.DataFrame({"dur_ns": [1_000_000, ms * 1e6]})
        table = pd.DataFrame(
            {"flops": [1e10, 0.0], "bytes": [1.0, nbytes], "dtype": ["bf16", "bf16"], "unit": ["matrix", "vector"]}
        )
        return work, table

    # 512e6 bytes in 0.497 ms = 1.03 TB/s; 511,999,999 bytes in the same time, the same speed.
    assert check_ceilings(*copy_of(512e6, 512e6 / 1.03e12 * 1e3), match) is not None
    assert check_ceilings(*copy_of(512e6 - 1, 512e6 / 1.03e12 * 1e3), match) is None


def test_a_kv_cache_write_reads_its_values_at_their_own_shape():
    """catches: the values read as if shaped like the keys (``args.tensor(0)`` for both): a model
    whose value head is narrower than its key head (here 4 vs 8) has its write over-counted.
    Keys [6, 2, 8] bf16 (96 elements, 192 B), values [6, 2, 4] bf16 (48, 96 B), 6 int64 slots
    (48 B); written into an fp8 cache at 1 byte an element: 96 + 48 = 144 B."""
    cost = price(
        "_C_cache_ops::reshape_and_cache_flash",
        [[6, 2, 8], [6, 2, 4], [50, 16, 2, 8], [50, 16, 2, 4], [6], [], [], []],
        [BF16, BF16, FP8, FP8, I64, "", F32, F32],
    )
    assert cost.flops == 0
    assert cost.bytes == 192 + 96 + 48 + 144
    assert cost.note.startswith("144 new key/value elements written at 1 byte(s) each")


def test_an_lm_head_not_told_apart_joins_the_linear_work_and_no_other():
    """catches: the LM head's work added to every pooled component named after "linear" in order
    (``c >= "linear"``: routing and linear attention too), when its kernel cannot be told apart.
    The shared B300 Qwen3-30B-A3B decode step with its LM head kernel (the step's last GEMM,
    launched once) renamed to the step's most common linear GEMM: the model can no longer mark
    it, so the linear GEMMs carry the LM head's FLOPs, and every other component keeps the
    FLOPs it had."""
    from tracekit.analysis.pricing.attribution import attribute
    from tracekit.analysis.steps.segment import segment
    from tracekit.models import load_model
    from tracekit.specs import lookup

    model = load_model("qwen3-30b-a3b")
    trace = read_real("b300_qwen3_moe")  # skips where ../shared/traces is absent

    def flops(tr):
        s = segment(tr)
        t = attribute(tr, s, lookup(tr.device_props()), model=model).table
        return t.groupby(t["component"].astype(str))["flops"].sum().to_dict(), s.work["name"].astype(str), t

    before, names, t = flops(trace)
    head = names[t["component"].astype(str) == "lm_head"].unique()
    assert len(head) == 1 and before["lm_head"] > 0 and before["routing"] > 0
    common = names[t["component"].astype(str) == "linear"].value_counts().index[0]
    k = trace.kernels.copy()
    kn = k["name"].astype(str)
    k["name"] = kn.where(kn != head[0], common).astype("category")
    after, _, _ = flops(dataclasses.replace(trace, kernels=k))
    assert "lm_head" not in after
    assert after["linear"] == pytest.approx(before["linear"] + before["lm_head"], rel=1e-12)
    assert {c: f for c, f in after.items() if c != "linear"} == {
        c: f for c, f in before.items() if c not in ("linear", "lm_head")
    }


def test_a_launch_pattern_is_regular_only_when_most_spacings_equal_its_median():
    """catches: regularity read as spacings at most the median (``spacing <= median``): a kernel
    name recurring at uneven spacings then passes for the step's period and cuts steps in the
    wrong places. Token 7 recurs every 6 launches (regular, period 6); token 5 at spacings 2, 2, 2,
    8, 8, 8, 8 (median 8, 4 of 7 = 57% equal to it, under the 60% rule: not regular, though every
    spacing is at most 8, so the longer period 8 would win)."""
    from tracekit.analysis.steps.launches import REGULARITY, _period

    assert REGULARITY == 0.6
    n = 80
    tokens = np.zeros(n, dtype=np.int64)  # token 0 fills the rest: spacings of 1, never a period
    tokens[np.arange(0, n, 6)] = 7
    tokens[[1, 3, 5, 7, 15, 23, 31, 39]] = 5  # odd positions: none is a multiple of 6
    period, pos = _period(tokens)
    assert period == 6 and pos.tolist() == list(range(0, n, 6))


def test_shape_evidence_of_ops_in_any_row_order_is_that_of_the_ops_in_start_order():
    """catches: a table whose ops are not in start order (one not built by the reader) searched
    as if it were (binary searches over unsorted starts miss a pass's ops), or filtered with the
    thread test loosened (the seed-40 survey: ``(tid == t) + (start >= lo)``, a pass taking in its thread's
    earlier ops). The collected tiny-bs8 trace's 17 marker steps (a prefill of [8, 64] token ids,
    then decodes of [8, 1]) with the op table shuffled: every step's evidence is the sorted
    table's, which names its own embedding."""
    from conftest import SAMPLE_TRACES

    from tracekit import read_trace
    from tracekit.analysis.steps import evidence
    from tracekit.analysis.steps.segment import segment

    trace = read_trace(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")
    steps = segment(trace).steps
    bounds = [(int(a), int(b), int(t), "") for a, b, t in zip(steps["cpu_start_ns"], steps["cpu_end_ns"], steps["tid"])]
    want = evidence.shape_evidence_many(trace.cpu_ops, bounds)
    assert [w[0] for w in want] == ["prefill"] + ["decode"] * 16
    assert want[0][2:] == (512.0, 8.0) and all(w[2:] == (8.0, 8.0) for w in want[1:])
    shuffled = trace.cpu_ops.iloc[np.random.default_rng(40).permutation(len(trace.cpu_ops))].reset_index(drop=True)
    assert evidence.shape_evidence_many(shuffled, bounds) == want
