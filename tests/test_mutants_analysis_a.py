"""Behaviours of tracekit.analysis that surviving mutants showed no test pinned: the phase's
kernel-time shares by category, attention shapes that do not fit, the uint8 dtype code, tokens
counted from embedding ids, how idle tails and non-launch runtime calls are attributed, and the
grouped running maximum of interval ends. Expected figures are hand arithmetic on hand-built
traces, format facts (c10::ScalarType codes) or what a real trace states about itself."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import read_real
from kineto import PID, TID, Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.pricing.op_costs import op_cost, why_no_cost
from tracekit.analysis.steps.segment import segment
from tracekit.analysis.waiting.intervals import running_end

BF16 = "c10::BFloat16"
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
)


def _decode_step(doc: Doc, ts_us: float, dur_us: float) -> None:
    """One decode step as ``tracekit.decode_step`` marks it (tracekit.markers)."""
    doc.annotation("tracekit::decode#0 bs=1", ts_us, dur_us)


def _phase(doc: Doc, tmp_path, name: str) -> dict:
    return analyze(read_trace(doc.write(tmp_path / name))).phases["decode"]


# --- analyze: by_category_share -------------------------------------------------------


def test_category_shares_are_fractions_of_the_phases_kernel_time(tmp_path):
    """catches: by_category_share not dividing the category's kernel time by the phase's
    (e.g. a difference instead of a ratio). A 300 us GEMM and a 100 us elementwise kernel in
    one decode step: 3/4 and 1/4 of the 400 us of kernel time."""
    doc = Doc()
    _decode_step(doc, 1000.0, 1000.0)
    doc.kernel(GEMM, 1000.0, 1010.0, 300.0, launch_dur=0.0)
    doc.kernel(ELEMENTWISE, 1320.0, 1320.0, 100.0, launch_dur=0.0)
    p = _phase(doc, tmp_path, "shares.json")
    assert p["kernel_ms"] == pytest.approx(0.4)
    assert p["by_category"] == pytest.approx({"gemm": 0.3, "elementwise": 0.1})
    assert p["by_category_share"] == pytest.approx({"gemm": 0.75, "elementwise": 0.25})


# --- costs: attention shapes that do not fit -------------------------------------------

_SDPA_TYPES = [BF16] * 3 + ["", "Scalar", "Scalar", "Scalar", "Scalar"]
_SDPA_CONCRETE = ["", "", "", "", "0.", "True", "0.125", "False"]


def _sdpa(q, k):
    """scaled_dot_product_attention(q, k, v=k shape, mask=None, dropout=0, is_causal=True, ...)."""
    return [q, k, k, [], [], [], [], []]


def test_attention_with_key_head_dim_unlike_the_querys_is_unpriced():
    """catches: the q/k fit check letting a key head dim that differs from the query's through
    when the head counts fit (its first ``or`` turned ``and``). Q.K^T needs equal head dims:
    q [1, 8, 16, 64] against k [1, 8, 16, 32] has no cost to price."""
    dims = _sdpa([1, 8, 16, 64], [1, 8, 16, 32])
    assert op_cost("aten::scaled_dot_product_attention", dims, _SDPA_TYPES, _SDPA_CONCRETE) is None
    assert "do not fit" in why_no_cost("aten::scaled_dot_product_attention", dims, _SDPA_TYPES, _SDPA_CONCRETE)


def test_attention_whose_query_heads_do_not_group_over_kv_heads_is_unpriced():
    """catches: the q/k fit check letting 6 query heads over 4 KV heads through when the head
    dims agree (its second ``or`` turned ``and``). Grouped-query attention shares each KV head
    by Hq / Hkv query heads, so Hq must be a multiple of Hkv; 8 over 4 is priced (control)."""
    bad = _sdpa([1, 6, 16, 64], [1, 4, 16, 64])
    assert op_cost("aten::scaled_dot_product_attention", bad, _SDPA_TYPES, _SDPA_CONCRETE) is None
    assert "Hq % Hkv" in why_no_cost("aten::scaled_dot_product_attention", bad, _SDPA_TYPES, _SDPA_CONCRETE)
    good = op_cost(
        "aten::scaled_dot_product_attention", _sdpa([1, 8, 16, 64], [1, 4, 16, 64]), _SDPA_TYPES, _SDPA_CONCRETE
    )
    # q, k, v and out in bf16: 2 bytes x (8 + 4 + 4 + 8) heads x 16 x 64.
    assert good is not None and good.bytes == 2 * (8 + 4 + 4 + 8) * 16 * 64


# --- costs: dtype code 0 ----------------------------------------------------------------


def test_cast_to_dtype_code_0_is_uint8():
    """catches: c10::ScalarType code 0 (Byte, i.e. uint8: c10/core/ScalarType.h lists Byte
    first) missing from the codes table, so a cast to uint8 goes unpriced or mis-sized.
    _to_copy of fp32 [4, 8] to dtype 0 reads 4 x 32 bytes and writes 1 x 32."""
    cast = op_cost(
        "aten::_to_copy",
        [[4, 8], [], [], [], [], [], []],
        ["float", "Scalar", "", "", "", "Scalar", ""],
        ["", "0", "", "", "", "False", ""],
    )
    assert cast is not None
    assert (cast.dtype, cast.bytes, cast.flops) == ("uint8", 4 * 32 + 1 * 32, 0)


# --- evidence: tokens from embedding ids ------------------------------------------------


def test_prefill_tokens_are_batch_times_tokens_per_sequence_of_the_embedding_ids():
    """catches: the tokens of a pass counted from the token-embedding ids [batch, tokens per
    sequence] as anything but their product (e.g. a sum). The H100 Qwen1.5-0.5B trace is one
    forward of 16 sequences x 559 tokens (PROVENANCE.md): 8944 tokens, batch 16."""
    steps = segment(read_real("h100_hf")).steps
    assert len(steps) == 1
    row = steps.iloc[0]
    assert row["phase"] == "prefill" and row["tokens_source"] == "op shapes"
    assert (row["tokens"], row["batch"]) == (16 * 559, 16)


# --- idle: the tail gap and non-launch runtime calls -----------------------------------


def test_tail_idle_is_split_by_what_the_step_thread_did_not_as_a_wait(tmp_path):
    """catches: the tail gap (after the step's last kernel, no kernel follows) taken as ended by
    some kernel's issue (its "no next kernel" sentinel lost), which turns host time into
    launch latency and waiting. Step [1000, 2000] us; kernels run 1000-1100 and 1100-1200; the
    host runs an op 1300-1900. Tail 1200-2000 = 800 us: 600 us host, 200 us nothing recorded."""
    doc = Doc()
    _decode_step(doc, 1000.0, 1000.0)
    doc.kernel(GEMM, 1000.0, 1000.0, 100.0, launch_dur=0.0)
    doc.kernel(ELEMENTWISE, 1100.0, 1100.0, 100.0, launch_dur=0.0)
    doc.op("aten::multinomial", 1300.0, 600.0)
    p = _phase(doc, tmp_path, "tail.json")
    assert p["gpu_idle_ms"] == pytest.approx(0.8)
    assert p["idle_by_cause"] == pytest.approx(
        {"sync": 0.0, "launch": 0.0, "host": 0.6, "wait": 0.0, "unattributed": 0.2}
    )


def test_a_long_non_launch_runtime_call_between_kernels_is_host_time(tmp_path):
    """catches: the launch-call set taking in every runtime call that is not a sync (launch
    names OR not-sync, instead of AND), which books a 300 us cudaMalloc between two kernels as
    launch cost. Step [1000, 1600] us; kernels 1000-1100 and 1500-1600, the second launched at
    1500; cudaMalloc 1150-1450 on the thread. Gap 1100-1500 = 400 us: 300 host, 100 nothing."""
    doc = Doc()
    _decode_step(doc, 1000.0, 600.0)
    doc.kernel(GEMM, 1000.0, 1000.0, 100.0, launch_dur=0.0)
    doc.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaMalloc",
            "pid": PID,
            "tid": TID,
            "ts": 1150.0,
            "dur": 300.0,
            "args": {"cbid": 20, "correlation": 1},
        }
    )
    doc.kernel(ELEMENTWISE, 1500.0, 1500.0, 100.0, launch_dur=0.0)
    p = _phase(doc, tmp_path, "malloc.json")
    assert p["gpu_idle_ms"] == pytest.approx(0.4)
    assert p["idle_by_cause"] == pytest.approx(
        {"sync": 0.0, "launch": 0.0, "host": 0.3, "wait": 0.0, "unattributed": 0.1}
    )


# --- intervals: running end per group ----------------------------------------------------


def test_running_end_per_group_with_negative_ends():
    """catches: the key stride of running_end's vector path sized from the ends by anything but
    max - min + 1 (e.g. ``max | (min + 1)``): with ends below zero (times before a trace's
    origin) the stride goes negative or too small and one group's maximum leaks into the next.
    Expected: the running maximum restarted at every group, worked out by hand."""
    group = np.array([0, 0, 0, 1, 1, 3])
    ends = np.array([55, 47, -32, 1, 7, -43], dtype=np.int64)
    assert running_end(group, ends).tolist() == [55, 55, 55, 1, 7, -43]
    # All negative, a later group's ends below an earlier group's.
    group = np.array([2, 2, 5, 5])
    ends = np.array([-10, -20, -300, -100], dtype=np.int64)
    assert running_end(group, ends).tolist() == [-10, -10, -300, -100]
