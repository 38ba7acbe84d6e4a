"""Behaviours of tracekit.analysis that surviving mutants of the seed-48 sample showed no test
pinned. Each expectation is worked out by hand, or taken from another part of the same run (a
window's own report, the one-pass function the many-pass one must agree with)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import bare_analysis

from tracekit import read_trace
from tracekit.analysis import analyze

# --- findings: the cost-sources line ------------------------------------------------------------


def _priced(sources: dict[str, float]):
    """An analysis with a model whose kernel time was priced by ``sources`` (source -> ms)."""
    a = bare_analysis()
    a.model = {"name": "m", "tp": 1, "tp_source": "default", "precision_source": "config"}
    a.work = pd.DataFrame({"dur_ns": [ms * 1e6 for ms in sources.values()], "cost_source": list(sources)})
    return a


def test_the_cost_sources_line_appears_only_when_the_model_priced_at_least_1_percent():
    """catches: ``model share >= COST_SOURCES_SHARE`` turned into ``!=``, so a run given a model that
    priced nothing (every kernel from its recorded shapes) still gets "Kernel time was priced 100%
    by recorded shapes; the model is m ..."."""
    from tracekit.analysis.findings.rules import COST_SOURCES_SHARE, _model_findings

    assert COST_SOURCES_SHARE == 0.01
    kinds = lambda a: [f.id for f in _model_findings(a)]  # noqa: E731
    assert "cost-sources" not in kinds(_priced({"shapes": 100.0}))  # the model priced 0%
    assert "cost-sources" not in kinds(_priced({"shapes": 99.5, "model": 0.5}))  # 0.5% < 1%
    one = _model_findings(_priced({"shapes": 99.0, "model": 1.0}))  # exactly 1%: shown
    assert [f.text for f in one if f.id == "cost-sources"] == [
        "Kernel time was priced 99% by recorded shapes, 1% by the model; the model is m (TP 1: default; "
        "weights: config)."
    ]


# --- attribution: a generic kernel inside the first module -----------------------------------------


def _module_run(tmp_path, with_module: bool):
    from kineto import PID, TID, Doc

    d = Doc()
    d.annotation("tracekit::decode", 90.0, 100.0)
    if with_module:  # the trace's only nn.Module span: row 0 of the module table
        d.events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": "nn.Module: LlamaRMSNorm_0",
                "pid": PID,
                "tid": TID,
                "ts": 100.0,
                "dur": 50.0,
                "args": {},
            }
        )
    ext = d.op("aten::mul", 105.0, 10.0)
    d.kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, "
        "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
        "at::detail::Array<char*, 2>)",
        106.0,
        120.0,
        5.0,
        ext=ext,
    )
    return analyze(read_trace(d.write(tmp_path / f"m{int(with_module)}.json")))


def test_a_generic_kernel_launched_in_the_first_module_takes_its_job(tmp_path):
    """catches: the enclosing-module test written ``m >= 1``, which skips the module table's first
    row: a trace whose only nn.Module span is an RMSNorm left its elementwise multiply
    "elementwise" instead of "normalization"."""
    assert _module_run(tmp_path, False).work["category"].tolist() == ["elementwise"]  # no module: generic
    assert _module_run(tmp_path, True).work["category"].tolist() == ["normalization"]


# --- evidence: many passes at once agree with one pass at a time ----------------------------------


def test_a_nameless_op_is_no_attention_evidence_in_the_many_pass_search():
    """catches: the name-missing slot of the attention mask set True, so an op the trace names not
    at all (a NaN name) with a 4-d first input reads as attention, and its [2, 8, 1, 64] as
    "one token per sequence": shape_evidence_many must give what shape_evidence gives pass by pass,
    where a nameless op matches nothing."""
    from tracekit.analysis.steps.evidence import shape_evidence, shape_evidence_many

    names = pd.Categorical(
        [None, "aten::scaled_dot_product_attention", "aten::mm"],
        categories=["aten::mm", "aten::scaled_dot_product_attention"],
    )
    ops = pd.DataFrame(
        {
            "tid": [1, 2, 2],
            "start_ns": [10, 10, 20],
            "name": names,
            "input_dims": ["[[2, 8, 1, 64]]", "[[2, 8, 5, 64]]", "[[3, 4], [4, 5]]"],
        }
    )
    passes = [(0, 100, 1), (0, 100, 2)]
    many = shape_evidence_many(ops, passes)
    one = [
        shape_evidence(ops[(ops["tid"] == t) & (ops["start_ns"] >= lo) & (ops["start_ns"] < hi)])
        for lo, hi, t in passes
    ]
    assert many == one
    assert many[0][0] == "unknown" and many[0][1] == "op shapes do not show tokens per sequence"
    assert many[1][:2] == (
        "prefill",
        "5 tokens per sequence: query of shape [2, 8, 5, 64] in aten::scaled_dot_product_attention",
    )


# --- model above the roof: a component priced on its own ------------------------------------------


def test_a_non_pooled_model_unit_above_the_roof_is_left_unpriced():
    """catches: the per-launch test ``took > 0`` written ``took == 0``, so no unpooled component
    (normalization, activation, ...) is ever judged: a norm whose model work needs 3x its kernel's
    time at the roof kept its impossible cost. Three model-priced norm units of 1 ms: roof
    fraction 3.0 (needs 300% of the time: dropped), 1.01 (within the 2% noise allowance) and 0.5."""
    from tracekit.analysis.pricing.above_roof import ABOVE_ROOF, model_above_roof

    assert ABOVE_ROOF == 1.02
    n = 3
    table = pd.DataFrame(
        {
            "cost_source": ["model"] * n,
            "roof_fraction": [3.0, 1.01, 0.5],
            "roof_fraction_achievable": [3.0, 1.01, 0.5],
            "component": ["norm"] * n,
            "flops": [1e9] * n,
            "bytes": [1e6] * n,
            "cost_reason": [""] * n,
            "estimate": [None] * n,
            "intensity": [1e3] * n,
            "achieved_bw": [1e9] * n,
            "achieved_flops": [1e12] * n,
            "bound": ["memory"] * n,
            "bound_reason": [""] * n,
            "model_check": [""] * n,
        }
    )
    model_above_roof(table, np.zeros(n, dtype=np.int64), np.full(n, 1e-3), None, None, None, None)
    assert np.isnan(table.loc[0, "flops"]) and np.isnan(table.loc[0, "bytes"])
    assert table.loc[0, "cost_source"] == "none" and table.loc[0, "bound"] == "unknown"
    assert str(table.loc[0, "cost_reason"]).startswith("the model's norm work would take 300% of these kernels' time")
    assert table["flops"].tolist()[1:] == [1e9, 1e9] and table["cost_source"].tolist()[1:] == ["model", "model"]


# --- steps table: a stated batch is certain -------------------------------------------------------


def test_a_batch_the_step_annotation_states_has_confidence_1():
    """catches: the confidence of a stated batch written 2.0: a confidence is a probability, and a
    count the annotation states (tracekit's markers say batch 8 on every step of tiny-bs8) is
    certain, 1.0, like a stated token count."""
    from conftest import SAMPLE_TRACES

    a = analyze(read_trace(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"))
    assert a.steps["batch"].tolist() == [8.0] * len(a.steps)
    assert a.steps["batch_source"].tolist() == ["the step annotation"] * len(a.steps)
    assert a.steps["batch_confidence"].tolist() == [1.0] * len(a.steps)


# --- timeline lanes: top-level host ops, the longest idle gaps ------------------------------------


def test_of_two_host_ops_starting_together_the_outer_is_the_top_level_one(tmp_path):
    """catches: ops of one start ordered shortest first (the duration's minus sign dropped), so an
    op and the op it encloses, starting at the same instant, both read as top level and overlap in
    the lane. By construction: outer [100, 200] us holds inner [100, 150]; later [250, 270]."""
    from kineto import TID, Doc

    from tracekit.analysis.steps import timeline

    d = Doc()
    d.op("outer", 100.0, 100.0)
    d.op("inner", 100.0, 50.0)
    d.op("later", 250.0, 20.0)
    lane = timeline._host_ops(read_trace(d.write(tmp_path / "h.json")), TID, 0, 400_000, 400_000)
    segs = lane["segments"]
    assert list(segs.keys) == ["outer", "later"]
    assert (segs.start_ms, segs.end_ms) == ([0.1, 0.25], [0.2, 0.27])


def test_an_idle_lane_of_too_many_gaps_keeps_the_longest():
    """catches: the gaps ranked by ``end >> start`` instead of their length (``end - start``), which
    ranks every gap the same, so the first MAX_SEGMENTS in time are kept and a long gap late in
    the step vanishes from the picture. 1,600 gaps: 1,599 of 1 us every 10 us, then one of 8 us."""
    import types

    from tracekit.analysis.steps import timeline
    from tracekit.analysis.waiting.idle import CAUSES

    n = timeline.MAX_SEGMENTS + 100
    s = np.arange(n, dtype=np.int64) * 10_000
    e = s + 1_000
    e[-1] = s[-1] + 8_000
    g = pd.DataFrame({"step": np.zeros(n, dtype=np.int64), "start_ns": s, "end_ns": e})
    for c in CAUSES:
        g[c] = np.zeros(n, dtype=np.int64)
    g["wait"] = e - s
    segs = timeline._idle_lane(types.SimpleNamespace(gaps=g), 0, 0, int(e[-1]))["segments"]
    assert len(segs.start_ms) == timeline.MAX_SEGMENTS
    # The 8 us gap is kept (it is the longest), at its place: the last, [15.99, 15.998] ms.
    assert segs.start_ms[-1] == pytest.approx(15.99) and segs.end_ms[-1] == pytest.approx(15.998)
    assert segs.labels[-1] == "wait 0.008 ms"


# --- seed 49 --------------------------------------------------------------------------------------


def test_a_step_of_one_gemm_launch_has_that_launchs_blocks_per_launch():
    """catches: GEMM blocks per launch left unknown unless a step launched two GEMMs or more
    (``launches > 1``): a step of one 128-CTA GEMM launch has 128 blocks per launch; a step of
    two (64 and 192 CTAs) has 128; a step with no GEMM has none (NaN)."""
    from tracekit.analysis.steps.evidence import step_features

    gemm = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
    work = pd.DataFrame(
        {
            "step": [0, 1, 1, 2],
            "name": [gemm, gemm, gemm, "vectorized_elementwise_kernel"],
            "ctas": [128, 64, 192, 40],
            "graph": [False] * 4,
        }
    )
    f = step_features(work, 3)
    assert f["gemm_launches"].tolist() == [1, 2, 0]
    assert f["gemm_blocks"].tolist()[:2] == [128.0, 128.0] and np.isnan(f["gemm_blocks"].iloc[2])


def test_a_kernel_of_no_duration_has_no_achieved_rate(tmp_path):
    """catches: the achieved FLOP/s of a unit computed when its duration is 0 (``dur > -1``):
    FLOPs over no time is inf, not a rate. A 1 x 64 x 64 matmul's kernel recorded as 0 us long
    (the profiler's rounding of a sub-microsecond kernel) keeps its FLOPs, 2 x 64 x 64 = 8,192,
    and has no achieved FLOP/s or bandwidth; the same kernel at 1 us has 8,192 / 1e-6."""
    from kineto import Doc

    rates = []
    for dur in (0.0, 1.0):
        d = Doc()
        d.annotation("tracekit::decode", 5.0, 100.0)
        ext = d.op("aten::mm", 10.0, 10.0, dims=[[1, 64], [64, 64]], types=["c10::BFloat16", "c10::BFloat16"])
        d.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 11.0, 20.0, dur, ext=ext)
        w = analyze(read_trace(d.write(tmp_path / f"k{dur}.json"))).work
        assert w["flops"].tolist() == [2 * 64 * 64]
        rates.append((float(w["achieved_flops"].iloc[0]), float(w["achieved_bw"].iloc[0])))
    assert np.isnan(rates[0][0]) and np.isnan(rates[0][1])
    assert rates[1][0] == pytest.approx(8192 / 1e-6)


def test_a_split_steps_prefill_fraction_is_its_gpu_share_else_its_token_share():
    """catches: a merge taking a split step's fraction again with one side's tokens dropped (``or``
    as ``and``): a mixed step of no GPU time with 30 prefill and 10 decode tokens is 3/4
    prefill, not 1; with GPU time, the GPU share decides (1.5 of 2 ms: 3/4 too, whatever the
    tokens); with neither, half."""
    from tracekit.analysis.steps.mixed import split_fraction

    assert split_fraction({"prefill": {"gpu_ms": 0.0, "tokens": 30}, "decode": {"gpu_ms": 0.0, "tokens": 10}}) == 0.75
    assert split_fraction({"prefill": {"gpu_ms": 1.5, "tokens": 1}, "decode": {"gpu_ms": 0.5, "tokens": 99}}) == 0.75
    assert split_fraction({"prefill": {"gpu_ms": 0.0, "tokens": 0}, "decode": {"gpu_ms": 0.0, "tokens": 0}}) == 0.5


def test_a_host_thread_of_a_trace_without_runtime_calls_still_names_its_ops(tmp_path):
    """catches: the empty runtime table's row list built as ``np.zeros(-1)`` (a ValueError), so a
    trace that recorded ops and kernels but no CUDA runtime calls (a profiler run with the CUDA
    activity kinds only partly on) crashed wherever its threads are asked what they were doing.
    One op, aten::mm over [10, 30] us, on the thread: at 15 us it is the op running."""
    from kineto import PID, STREAM, TID, Doc

    from tracekit.analysis.waiting.host import HostThread

    d = Doc()
    d.op("aten::mm", 10.0, 20.0)
    d.events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": PID,
            "tid": STREAM,
            "ts": 20.0,
            "dur": 5.0,
            "args": {"device": 0, "stream": STREAM, "correlation": 1, "grid": [1, 1, 1], "block": [128, 1, 1]},
        }
    )
    t = read_trace(d.write(tmp_path / "no_runtime.json"))
    assert len(t.runtime) == 0 and len(t.cpu_ops) == 1
    th = HostThread(t, TID)
    (row,) = th.ops_at(np.array([15_000]))
    assert row == 0 and th.op_names(th.op_codes(np.array([row]))[0]) == ["aten::mm"]
    assert th.ops_at(np.array([40_000])).tolist() == [-1]  # after the op: none
    assert th.blocking_call(12_000, 18_000)[0] is None  # no synchronising call recorded


def test_a_tail_gaps_idle_is_grouped_under_the_op_at_its_middle(tmp_path):
    """catches: the gap's instant of reference taken as ``(a + b) + 2`` (past its end) instead of
    its middle, so idle after a step's last kernel is filed under no op. By construction: the last
    kernel ends at 325 us, the step at 400; aten::item (a synchronising op) runs [330, 395] on
    the launching thread. Its 65 us are the tail's sync time; the other 10 us, unattributed, are
    grouped under the op running at the gap's middle, 362.5 us: aten::item."""
    from kineto import Doc

    gemm = "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn"
    d = Doc()
    d.annotation("tracekit::decode", 0.0, 400.0)
    d.kernel(gemm, 8.0, 20.0, 5.0, ext=d.op("aten::mm", 5.0, 10.0))
    d.op("aten::nonzero_static", 30.0, 270.0)
    d.kernel(gemm, 308.0, 320.0, 5.0, ext=d.op("aten::mm", 305.0, 10.0))
    d.op("aten::item", 330.0, 65.0)
    rows = analyze(read_trace(d.write(tmp_path / "tail.json"))).phases["decode"]["idle_top"]
    tail = [(r["cause"], r["op"], r["ms"]) for r in rows if r["op"] == "aten::item"]
    assert sorted(tail) == [
        ("sync", "aten::item", pytest.approx(0.065)),
        ("unattributed", "aten::item", pytest.approx(0.010)),
    ]
