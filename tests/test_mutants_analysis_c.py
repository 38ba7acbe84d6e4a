"""Behaviour tests that kill survivors of the mutation campaign (benchmarks/mutation.py, sample
30, seed 28) in tracekit/analysis: every expected figure is worked out by hand from a trace or
table built in the test, or is a format fact (a c10::ScalarType code's element size)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.pricing.op_costs import op_cost
from tracekit.analysis.steps import evidence
from tracekit.analysis.steps import segment as seg

BF16 = "c10::BFloat16"
GEMM_KERNEL = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"


# --- analyze: a roofline point's time -------------------------------------------------------


def test_roofline_point_time_is_its_kernels_time_in_ms(tmp_path):
    """catches: a roofline point's time_ms taken as the nanoseconds minus 1e6 (or any unit but
    ms) instead of the nanoseconds over 1e6."""
    d = Doc()
    t = 0.0
    # Two bf16 GEMMs of one shape (one point, two calls) of 300 us and 200 us.
    for dur in (300.0, 200.0):
        ext = d.op("aten::mm", t, 10.0, dims=[[512, 1024], [1024, 2048]], types=[BF16, BF16])
        d.kernel(GEMM_KERNEL, t + 1, t + 20, dur, ext=ext)
        t += 20 + dur + 10
    a = analyze(read_trace(d.write(tmp_path / "mm.json")))
    points = [p for r in a.roofline.values() for p in r["points"]]
    assert len(points) == 1 and points[0]["calls"] == 2
    p = points[0]
    assert p["time_ms"] == pytest.approx(0.5)  # 300 us + 200 us
    # 2*M*N*K per call over the 0.5 ms the point took.
    assert p["achieved_flops"] == pytest.approx(2 * 2 * 512 * 2048 * 1024 / 0.5e-3)


# --- costs: dtype arguments given as c10::ScalarType codes ----------------------------------


@pytest.mark.parametrize("code", ["23", "24", "25", "26"])
def test_cast_to_an_fp8_scalar_type_code_writes_one_byte_per_element(code):
    """catches: an FP8 ScalarType code (23 Float8_e5m2, 24 Float8_e4m3fn, 25 Float8_e5m2fnuz,
    26 Float8_e4m3fnuz: all one byte per element) priced at another element size, which
    misstates the bytes of a cast to FP8 (e.g. 0 bytes: only the fp32 input counted)."""
    cast = op_cost(
        "aten::_to_copy",
        [[1, 559, 64], [], [], [], [], [], []],
        ["float", "Scalar", "", "", "", "Scalar", ""],
        ["", code, "", "", "", "False", ""],
    )
    # fp32 input read (4 bytes) and fp8 output written (1 byte) per element.
    assert (cast.dtype, cast.bytes) == ("fp8", (4 + 1) * 559 * 64)


# --- evidence: a thread whose ops are not in start order ------------------------------------


def _ops(rows):
    names = [r[0] for r in rows]
    return pd.DataFrame(
        {
            "name": pd.Categorical(names),
            "tid": [r[1] for r in rows],
            "start_ns": [r[2] for r in rows],
            "input_dims": [json.dumps(r[3]) if r[3] is not None else None for r in rows],
        }
    )


def test_shape_evidence_of_a_thread_out_of_start_order():
    """catches: the plain filter used for a thread whose ops are out of start order combining
    its conditions with anything but a logical and (a division of boolean columns raises),
    so such a thread's passes are not classified."""
    ops = _ops(
        [
            # Thread 1, out of start order: the decode pass's embedding is listed before the prefill one's.
            ("aten::embedding", 1, 5_000, [[32000, 4096], [8, 1]]),
            ("aten::embedding", 1, 1_000, [[32000, 4096], [2, 7]]),
            ("aten::linear", 1, 1_500, [[2, 7, 4096], [4096, 4096]]),
            # Thread 2, in order, starting inside both passes' windows: not theirs.
            ("aten::embedding", 2, 1_200, [[32000, 4096], [4, 3]]),
        ]
    )
    got = evidence.shape_evidence_many(ops, [(0, 4_000, 1), (4_000, 9_000, 1), (0, 9_000, 3)])
    # Pass 1: token ids [2, 7] -> 7 tokens per sequence, 14 tokens in 2 sequences: prefill.
    assert got[0][0] == "prefill" and got[0][2:] == (14.0, 2.0)
    # Pass 2: token ids [8, 1] -> one token per sequence for 8 sequences: decode.
    assert got[1][0] == "decode" and got[1][2:] == (8.0, 8.0)
    # A thread with no ops at all: nothing to go on.
    assert got[2][0] == "unknown" and got[2][2:] == (None, None)


# --- segment: how many malformed step annotations the notes list ----------------------------


def _malformed_steps(tmp_path, n):
    """``n`` SGLang-style step ranges, each of a distinct malformed name, each launching one kernel."""
    d = Doc()
    for i in range(n):
        t = 1000.0 * i
        d.annotation(f"step[BOGUS{i} bs=2]", t, 500.0)
        d.kernel("void at::native::vectorized_elementwise_kernel<4>", t + 10, t + 30, 50.0)
    return seg.segment(read_trace(d.write(tmp_path / f"bad{n}.json")))


def test_notes_list_five_malformed_annotations_and_count_the_rest(tmp_path):
    """catches: the "N more malformed step annotations" note given only when there are exactly
    five (as "0 more") instead of whenever there are more than the five listed."""
    six = [n for n in _malformed_steps(tmp_path, 6).notes if "malformed" in n or "is not step[" in n]
    # Five listed by name, then one line for the sixth.
    assert sum("is not step[" in n for n in six) == 5
    assert "1 more malformed step annotations" in six
    five = _malformed_steps(tmp_path, 5).notes
    assert sum("is not step[" in n for n in five) == 5
    assert not any("more malformed step annotations" in n for n in five)


# --- advice: host-bound only from HOST_SHARE of the phase's time ----------------------------


def _host_gap_step(tmp_path, host_us):
    """One vLLM decode step: a 500 us kernel, ``host_us`` of host work (aten::sort) before the
    next launch, then a 550 us kernel; the step closes 5 us after it."""
    d = Doc()
    k2 = 510.0 + host_us + 10.0  # launch of the second kernel, 10 us after the host work
    d.annotation("execute_context_0(0)_generation_4(4)", 0.0, k2 + 5.0 + 550.0 + 5.0)
    d.kernel("void at::native::vectorized_elementwise_kernel<4>", 1.0, 5.0, 500.0)
    d.op("aten::sort", 510.0, host_us)
    d.kernel("void at::native::vectorized_elementwise_kernel<4>", k2, k2 + 5.0, 550.0)
    return analyze(read_trace(d.write(tmp_path / f"host{int(host_us)}.json")))


def test_host_bound_advice_needs_host_idle_of_a_fifth_of_the_time(tmp_path):
    """catches: the host-bound finding given whenever host work is the largest idle cause, at any
    share other than exactly HOST_SHARE (20%), instead of only from 20% of the phase's time."""
    # 120 us of host work in a 1,200 us step: the largest idle cause, but 10% of the time.
    small = _host_gap_step(tmp_path, 120.0)
    p = small.phases["decode"]
    assert p["time_ms"] == pytest.approx(1.2)
    causes = p["idle_by_cause"]
    assert causes["host"] == pytest.approx(0.12) and max(causes, key=causes.get) == "host"
    assert "host-bound" not in {f.id for f in small.findings}
    # 400 us of host work in a 1,480 us step: 27%, so it is named, with the host time at stake.
    large = _host_gap_step(tmp_path, 400.0)
    assert large.phases["decode"]["time_ms"] == pytest.approx(1.48)
    found = {f.id: f for f in large.findings}
    assert "host-bound" in found and found["host-bound"].sum_ms == pytest.approx(0.4)
    assert "27%" in found["host-bound"].text
