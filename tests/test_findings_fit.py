"""Findings, footnotes and limiters that fit what they are about (issue 44, items 6 to 8): each
names the component it is about, uses the precision each kernel ran at, gives only the reason
that applies, and agrees with the figures beside it."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pandas as pd
import pytest
from conftest import read_real, real_trace_path

from tracekit.analysis.analyze import analyze
from tracekit.analysis.steps.mixed import phase_weights
from tracekit.report import render


def _stripped(key: str):
    """A shared serving trace as a default engine profile holds it: no step annotations."""
    t = read_real(key)
    return dataclasses.replace(t, annotations=t.annotations.iloc[0:0])


def _ids(a):
    return {f.id: f for f in a.findings}


# --- item 6: findings about the wrong thing -------------------------------------------------


def test_fp8_advice_counts_only_kernels_on_16_bit_weights():
    """Bug: "Decode GEMMs are memory-bound on bf16 weights (140 ms) ... FP8 weights halve the
    bytes ... at stake 70.1 ms" counted gpt-oss-20b's MXFP4 MoE GEMMs (Marlin wna16: bf16 MMA
    rate, 4-bit weights) as bf16; FP8 would double their bytes. Only the bf16 GEMMs (attention
    projections, router, LM head) can gain: half their time is at stake."""
    a = analyze(read_real("rtx3090_vllm"), model="gpt-oss-20b", gpu="H100")
    fp8 = _ids(a)["fp8-weights"]
    w = a.work
    weight = phase_weights(w["phase"].to_numpy(), w["prefill_share"].to_numpy(), "decode")
    gemm = (
        w["category"].isin(["gemm", "moe"]) & (w["bound"] == "memory") & (w["unit"] == "matrix") & w["flops"].notna()
    ).to_numpy() & (weight > 0)
    experts = (w["component"] == "experts").to_numpy()
    assert gemm[experts].any() and (w["dtype"][gemm & experts] == "bf16").all()  # their MMA rate is bf16
    bf16_ms = float((w["dur_ns"].to_numpy() * weight)[gemm & ~experts].sum()) / 1e6
    mxfp4_ms = float((w["dur_ns"].to_numpy() * weight)[gemm & experts].sum()) / 1e6
    assert fp8.sum_ms == pytest.approx(bf16_ms / 2)
    assert fp8.sum_ms < (bf16_ms + mxfp4_ms) / 4
    # Replayed, halving those kernels saves at most the time taken off them (bug: a replay that
    # adds time, or sums overlapping kernels).
    assert 0 < fp8.at_stake_ms <= fp8.sum_ms * (1 + 1e-9)  # not half of every GEMM (70.1 ms before)
    assert "mxfp4 weights, which FP8 would not shrink" in fp8.text


def test_capped_decode_attention_of_a_dense_model_is_not_called_routed_experts():
    """Bug: on a dense model (Qwen3-8B) whose decode attention has unknown keys (annotations
    stripped), capped at the roof by pricing.above_roof, the findings said "Routed experts
    (2.13 ms) ran faster than ... uniform routing would touch ... tokens concentrated on fewer
    experts" and the MBU's footnote spoke of "routed experts whose expected weights would need
    more": the model has no experts. Each must name decode attention and its reason."""
    a = analyze(_stripped("mi300x_decode"), model="qwen3-8b")
    ids = _ids(a)
    capped = a.work[(a.work["model_check"] == "capped").to_numpy()]
    assert len(capped) and set(capped["component"].astype(str)) == {"attention"}
    assert "experts-concentrated" not in ids
    att = ids["attention-keys-unknown"]
    assert f"Decode attention ({capped['dur_ns'].sum() / 1e6:.3g} ms)" in att.text
    assert "keys each request attends to are not in the trace" in att.text
    text, md, page = (render(a, f) for f in ("text", "md", "html"))
    # The page's method section lists every finding's threshold, the experts' one included.
    page = re.sub(r"<dt>experts-concentrated</dt><dd>[^<]*</dd>", "", page)
    for out in (text, md, page):
        for word in ("routed experts", "uniform routing", "expected weights"):
            assert word not in out.lower(), [ln for ln in out.splitlines() if word in ln.lower()]
    legend = "≤ an upper bound: bytes capped at what peak bandwidth moves in the kernels' time (decode attention"
    assert legend in text and legend in md
    assert "(decode attention's bytes capped" in a.phases["decode"]["mbu_basis"]


# --- item 8: words that agree with the figures ------------------------------------------------


def _slow_gpu(tmp_path, l2_mb: float) -> str:
    """A spec row slow enough (100 GB/s) that Qwen3-8B's decode activations, priced by the
    model, beat its DRAM roof on the MI300X timings, with an L2 cache of ``l2_mb``."""
    path = tmp_path / f"slow-{l2_mb:g}.json"
    path.write_text(
        json.dumps(
            {
                "name": "Slow GPU",
                "memory_bandwidth_GBps": 100,
                "l2_cache_MB": l2_mb,
                "num_sms": 304,
                "matrix_tflops": {"bf16": 100},
                "vector_tflops": {"fp32": 50},
            }
        )
    )
    return str(path)


def test_activations_faster_than_dram_but_in_l2_are_cache_resident_not_undescribed(tmp_path):
    """Bug: "the model's work for activation would take longer at the roofline than those kernels
    ran ... the model does not describe them" where silu_and_mul's input, just written by the
    gate-up GEMM, sits in the L2 cache: the model is right and the cache explains the speed. A
    decode step of 32 tokens: silu_and_mul reads 32 x 2 x 12,288 and writes 32 x 12,288 bf16
    values, 2,359,296 B, which fit in an 8 MB L2 and need 23.6 us at 100 GB/s (they ran ~12 us)."""
    a = analyze(read_real("mi300x_decode"), model="qwen3-8b", spec_file=_slow_gpu(tmp_path, 8))
    w = a.work
    act = w[(w["component"] == "activation").to_numpy()]
    assert len(act) and (act["bytes"] == 32 * 3 * 12288 * 2).all()
    assert (act["dur_ns"] < 2_359_296 / 100e9 * 1e9).all()  # faster than the DRAM roof allows
    assert (act["model_check"] == "cached").all() and (act["cost_source"] == "model").all()
    assert act["roof_fraction"].isna().all() and (act["bound"] == "memory").all()
    assert (act["limiter"] == "memory").all()
    ids = _ids(a)
    assert "activation" in ids["cache-resident"].text and "8 MB L2 cache" in ids["cache-resident"].text
    assert "2.36 MB" in ids["cache-resident"].text
    assert "activation" not in getattr(ids.get("model-undescribed"), "text", "")
    # Weights are read once per step, after the whole model passed through the cache: no residency.
    assert (w.loc[(w["component"] == "linear").to_numpy(), "model_check"] == "undescribed").all()
    # An L2 smaller than the kernel's bytes explains nothing: the model does not describe it.
    small = analyze(read_real("mi300x_decode"), model="qwen3-8b", spec_file=_slow_gpu(tmp_path, 1)).work
    assert (small.loc[(small["component"] == "activation").to_numpy(), "model_check"] == "undescribed").all()


def test_the_lack_of_shapes_says_the_model_priced_the_kernels():
    """Bug: "no op shapes were recorded: FLOPs and bytes cannot be computed" was printed directly
    above MFU and MBU computed with --model, and the report's data quality said "so FLOPs and
    bytes are unknown: bounds, MFU, MBU and the roofline are missing". The note must say the
    model priced those kernels; without --model the gap still takes the figures away."""
    from click.testing import CliRunner

    from tracekit.cli import main

    path = str(real_trace_path("rtx3090_vllm"))
    out = CliRunner().invoke(main, ["summary", path, "--model", "gpt-oss-20b"]).output
    lack = out.split("the trace lacks")[1].split("\n\n")[0]
    assert "cannot be computed from them; so the model (gpt-oss-20b) priced those kernels instead" in lack
    assert "Decode MBU" in out and "Decode MBU                 —" not in out
    a = analyze(read_real("rtx3090_vllm"), model="gpt-oss-20b")
    assert a.phases["decode"]["mbu"] is not None
    page = render(a, "html")
    assert "MFU, MBU and the roofline are missing" not in page
    assert "the model (gpt-oss-20b) priced those kernels instead" in page
    bare = analyze(read_real("rtx3090_vllm"))
    assert "MFU, MBU and the roofline are missing" in render(bare, "html")
    plain = CliRunner().invoke(main, ["summary", path]).output
    assert "priced those kernels instead" not in plain


# --- item 7: shares that never add to more than the whole; a limiter that fits ----------------


def test_latency_fits_only_a_small_grid_or_a_short_kernel():
    """The definition of latency (a grid too small to fill the GPU, launch or dependency
    latency), by hand on a 132-SM GPU: 64 blocks cannot fill it; a 4 us kernel at 10% of its
    roof is 3.6 us beyond it, within a kernel's 5 us fixed latency; a 3.4 ms kernel of 32,768
    blocks at 10% is neither, and neither is a 100 us one whose grid the trace does not state."""
    from tracekit.analysis.pricing.roofline import BELOW_ROOF, LATENCY, latency_fits, limiter

    dur = np.array([50_000, 4_000, 3_400_000, 100_000, 3_400_000])
    rf = np.array([0.1, 0.1, 0.1, 0.1, 0.5])
    ctas = np.array([64, 100_000, 32_768, -1, 32_768])
    fits = latency_fits(dur, rf, ctas, 132)
    assert fits.tolist() == [True, True, False, False, False]
    bound = np.array(["memory", "compute", "compute", "memory", "compute"], dtype=object)
    assert limiter(bound, rf, fits=fits).tolist() == [LATENCY, LATENCY, BELOW_ROOF, BELOW_ROOF, "compute"]
    assert latency_fits(dur, rf, ctas, None).tolist() == [False, True, False, False, False]  # no SM count


def test_a_long_kernel_filling_the_gpu_is_below_its_roof_not_latency_limited():
    """Bug: "latency" (a grid too small to fill the GPU, occupancy, launch or dependency latency)
    was given to every kernel under 30% of its roof: gpt-oss-120b's MoE GEMMs on a B200 (148
    SMs) run 88 us per call on 2,736 blocks at 21% of their roof; neither their grid nor a few
    us of fixed latency explains it. They are below their roof; the 32-block attention kernel,
    whose grid cannot fill the GPU, stays latency-limited."""
    a = analyze(read_real("b200_vllm"), model="gpt-oss-120b")
    w = a.work
    names = w["name"].astype(str)
    moe = w[names.str.startswith("bmm_MxE4m3_MxE2m1").to_numpy()]
    assert len(moe) and (moe["ctas"] >= 148).all() and (moe["dur_ns"] > 50_000).all()
    assert (moe["roof_fraction"] < 0.3).all() and (moe["limiter"] == "below_roof").all()
    fmha = w[names.str.startswith("fmhaSm100aKernel").to_numpy()]
    assert len(fmha) and (fmha["ctas"] < 148).all() and (fmha["limiter"] == "latency").all()
    rows = {r["name"]: r for r in a.top_kernels["prefill"]}
    assert rows[str(moe["name"].iloc[0])]["limiter"] == "below_roof"
    p = a.phases["prefill"]
    assert p["by_limiter"]["below_roof"] >= float(moe["dur_ns"].sum()) / 1e6


def test_the_phase_table_shows_latency_as_a_part_of_the_bound_shares():
    """Bug: the phase table's "Latency-limited" column stood beside the bound columns, which
    with idle already add up to 100% (MI300X Llama-70B prefill: 49.4 + 5.02 + 26.5 + 0.687 +
    18.4 = 100%, plus latency 34.4%). It is a part of the compute, memory and link shares, and
    every renderer must say so: "of which"."""
    a = analyze(read_real("b200_vllm"), model="gpt-oss-120b")
    for p in a.phases.values():
        bound, lim = p["by_bound_share"], p["by_limiter_share"]
        parts = lim["latency"] + lim["below_roof"]
        assert parts <= bound["compute"] + bound["memory"] + bound["interconnect"] + 1e-9
        assert sum(v for k, v in bound.items()) == pytest.approx(1.0)
    text, md, page = (render(a, f) for f in ("text", "md", "html"))
    head = next(ln for ln in text.splitlines() if ln.strip().startswith("phase "))
    assert "|  of which latency-limited  of which below roof  |" in head and " latency " not in head
    assert "| Unknown | of which latency-limited | of which below roof | MFU |" in md
    assert "Latency-limited</th>" not in page and "of which latency-limited</th>" in page
    assert 'colspan="2" class="group part">of which below 30.0% of roof' in page
    for out in (text, md, page):
        assert "add up to 100%" in out or "adding up to 100%" in out


def test_decode_attention_of_unknown_keys_above_the_ridge_is_not_called_undescribed():
    """Bug: decode attention whose keys the trace does not state and whose intensity is not below
    the ridge at any key count (absorbed MLA) was left unpriced, rightly, but the finding said
    "the model's work for attention would take longer at the roofline ...: the model, --tp or
    --weights does not describe them": the model is fine, the keys are missing. Two such units
    (1e12 FLOPs over 1e9 bytes: 1,000 FLOP/byte against a ridge of 300) priced at 5x their time."""
    from types import SimpleNamespace

    from tracekit.analysis.findings.rules import _model_findings
    from tracekit.analysis.pricing.above_roof import model_above_roof

    n = 2
    table = pd.DataFrame(
        {
            "cost_source": ["model"] * n,
            "roof_fraction": [5.0] * n,
            "roof_fraction_achievable": [5.0] * n,
            "component": ["attention"] * n,
            "flops": [1e12] * n,
            "bytes": [1e9] * n,
            "cost_reason": [""] * n,
            "estimate": ["upper"] * n,
            "intensity": [1e3] * n,
            "achieved_bw": [1e12] * n,
            "achieved_flops": [1e15] * n,
            "ridge": [300.0] * n,
            "bound": ["compute"] * n,
            "bound_reason": [""] * n,
            "model_check": [None] * n,
            "dur_ns": [1_000_000] * n,
        }
    )
    model_above_roof(table, np.zeros(n, dtype=np.int64), np.full(n, 1e-3), None, None, None, None)
    assert (table["model_check"] == "keys_unknown").all() and table["bytes"].isna().all()
    a = SimpleNamespace(model={"name": "m", "tp": 1, "tp_source": "", "precision_source": ""}, work=table)
    ids = {f.id: f.text for f in _model_findings(a)}
    assert "model-undescribed" not in ids
    assert ids["attention-bound-unknown"].startswith("Decode attention (2 ms): the keys each request attends to")
