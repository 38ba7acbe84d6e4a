"""The decode slowdown: ``metrics.tpot_growth`` (last quarter's median step over the first's) and
the ``tpot-growth`` finding, which names what grew per step instead of assuming the KV cache.
Traces are hand-built: 16 decode steps, each a GEMM and an attention kernel back to back inside
its ``tracekit::decode`` range, so each step's time, kernels and idle are known by construction."""

from __future__ import annotations

import pytest
from kineto import Doc

from tracekit import read_trace
from tracekit.analysis.analyze import analyze

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
ATTENTION = "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>>"
STEPS = 16
IDLE_US = 20.0  # per step: 10 us before the first kernel and 10 us after the last


def _run(tmp_path, gemm_us, attention_us, stall_us=(0.0,) * STEPS):
    """Step i: its GEMM then its attention kernel, then ``stall_us[i]`` of host time with no GPU work."""
    doc, t = Doc(), 1000.0
    for i in range(STEPS):
        dur = IDLE_US + gemm_us[i] + attention_us[i] + stall_us[i]
        doc.annotation(f"tracekit::decode#{i} bs=1", t, dur)
        doc.kernel(GEMM, t + 5.0, t + 10.0, gemm_us[i], launch_dur=1.0)
        doc.kernel(ATTENTION, t + 6.0, t + 10.0 + gemm_us[i], attention_us[i], launch_dur=1.0)
        t += dur
    a = analyze(read_trace(doc.write(tmp_path / "growth.json")))
    found = [f.text for f in a.findings if f.id == "tpot-growth"]
    return a, found


def test_growing_attention_is_named_as_the_kv_cache_read(tmp_path):
    """catches: the growth computed on anything but the quarters' medians, or the finding crediting
    the KV cache without attention leading the growth. Attention grows 40 us a step from 50 us:
    the first quarter's median step is 20 + 300 + 110 = 430 us (attention 50, 90, 130, 170), the
    last's 20 + 300 + 590 = 910 us; growth 910 / 430 - 1, all of it in attention (+0.48 ms)."""
    a, found = _run(tmp_path, [300.0] * STEPS, [50.0 + 40 * i for i in range(STEPS)])
    assert a.metrics["tpot_growth"] == pytest.approx(910 / 430 - 1, rel=1e-6)
    assert len(found) == 1, found
    assert "median step from 0.43 to 0.91 ms" in found[0], found
    assert found[0].endswith("per step the growth is in attention (+0.48 ms): attention reads the growing KV cache."), (
        found
    )


def test_one_stalled_step_is_no_trend(tmp_path):
    """catches: quarter means instead of medians. Every step is 430 us but the last stalls 2 ms on
    the host: a mean over the last quarter reads (3 x 430 + 2430) / 4 = 930 us, a 116% "slowdown";
    the median step of either quarter is 430 us, so there is no growth and no finding."""
    stall = [0.0] * (STEPS - 1) + [2000.0]
    a, found = _run(tmp_path, [300.0] * STEPS, [110.0] * STEPS, stall)
    assert a.metrics["tpot_growth"] == pytest.approx(0.0, abs=1e-9)
    assert not found, found


def test_growth_in_gemm_and_idle_is_not_called_the_kv_cache(tmp_path):
    """catches: the finding saying "as the KV cache grows" whatever grew (the old wording). The GEMM
    grows 40 us a step (a growing batch would do this) and each step gains 10 us of host time;
    attention stays at 110 us. First quarter's medians: GEMM 360, idle 35 us; last: 840, 155 us.
    So per step the growth is in gemm (+0.48 ms) and idle time (+0.12 ms), and attention, which
    did not grow, is not blamed."""
    a, found = _run(tmp_path, [300.0 + 40 * i for i in range(STEPS)], [110.0] * STEPS, [10.0 * i for i in range(STEPS)])
    assert len(found) == 1, found
    assert "per step the growth is in gemm (+0.48 ms) and idle time (+0.12 ms)." in found[0], found
    assert "KV cache" not in found[0] and "attention" not in found[0], found
