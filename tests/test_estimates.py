"""Bounds that say they are bounds (issue 24, item 5): routed experts' bytes rest on the
expected distinct experts under uniform routing (the model's estimate) and, where that needs
more than the bandwidth roof, are capped at the roof: an upper bound, said in the JSON
(``estimate``) and marked in the reports. On the shared SGLang Qwen3-30B-A3B decode steps,
batch 16 (``step[DECODE bs=16]``), on B300 and MI300X."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
from conftest import read_real

from tracekit.analysis import analyze
from tracekit.analysis.pricing.attribution import attribute
from tracekit.analysis.pricing.roofline import combined_estimate
from tracekit.analysis.steps.segment import segment
from tracekit.models import load_model
from tracekit.report import render

# Qwen3-30B-A3B (config.json): 48 layers, all MoE; hidden 2048; 128 routed experts of
# intermediate 768, top-8; bf16 weights.
E, K, B, LAYERS, HIDDEN, INTER = 128, 8, 16, 48, 2048, 768
# Expected distinct experts per layer when 16 tokens each pick 8 of 128 uniformly:
# 128 * (1 - (120/128)^16) = 128 * (1 - 0.356074) = 82.42 (the 81.9 is off by 0.5).
TOUCHED = 128 * (1 - (120 / 128) ** 16)
# One expert: gate, up and down projections, 3 * 2048 * 768 parameters, 2 bytes each.
EXPERT_BYTES = 3 * 2048 * 768 * 2
# Per layer: the touched experts' weights once, plus each token's k expert activations:
# in (hidden) and out (hidden) and the gate/up/down intermediates (3 x 768), bf16.
LAYER_BYTES = TOUCHED * EXPERT_BYTES + B * K * (2 * HIDDEN + 3 * INTER) * 2
PEAK_BW = {"b300_qwen3_moe": 8.0e12, "mi300x_qwen3_moe": 5.3e12}  # datasheet peaks (tracekit gpus)


def test_hand_arithmetic():
    assert round(TOUCHED, 1) == 82.4
    assert EXPERT_BYTES == 9_437_184
    # 82.4225 x 9,437,184 = 777,836,405 bytes of weights; 16 x 8 x 6,400 x 2 = 1,638,400 of activations.
    assert LAYER_BYTES == pytest.approx(777_836_405 + 1_638_400, rel=1e-8)


@pytest.mark.parametrize("key", ["b300_qwen3_moe", "mi300x_qwen3_moe"])
def test_expert_bytes_are_the_expected_experts_then_capped_as_an_upper_bound(key):
    """Bug: the expert bytes are capped at the roof with nothing saying the figure is a bound
    (the old ``estimate``-less table), or the model's figure is not E*(1-(1-k/E)^B) experts."""
    trace = read_real(key)
    seg = segment(trace)
    from tracekit.specs import lookup

    attr = attribute(trace, seg, lookup(trace.device_props()), model=load_model("qwen3-30b-a3b"))
    t, mc = attr.table, attr.model_costs
    experts = (t["component"] == "experts").to_numpy()
    assert experts.any()
    # The model's estimate, before any cap: 48 layers of the expected experts' bytes.
    assert np.nansum(mc.bytes[experts]) == pytest.approx(LAYERS * LAYER_BYTES, rel=1e-6)
    assert (mc.estimate[experts] == "model").all()
    # 37.4 GB in the experts' kernel time exceeds what peak bandwidth moves: capped there,
    # an upper bound, and said to be one.
    secs = seg.work.loc[experts, "dur_ns"].sum() / 1e9
    assert LAYERS * LAYER_BYTES > PEAK_BW[key] * secs
    assert t.loc[experts, "bytes"].sum() == pytest.approx(PEAK_BW[key] * secs, rel=1e-6)
    assert (t.loc[experts, "model_check"] == "capped").all()
    assert (t.loc[experts, "estimate"] == "upper").all()
    assert t.loc[experts, "cost_reason"].str.contains("an upper bound").all()
    # Work priced from stated figures is not marked.
    gemm = (t["component"] == "linear").to_numpy()
    assert t.loc[gemm, "estimate"].isna().all()


@pytest.mark.parametrize("key", ["b300_qwen3_moe", "mi300x_qwen3_moe"])
def test_json_says_which_figures_are_bounds(key):
    """Bug: the JSON gives the capped expert bandwidth and the MBU built on it as plain facts."""
    a = analyze(read_real(key), model="qwen3-30b-a3b")
    d = json.loads(json.dumps(a.to_dict(), default=str))
    dec = d["phases"]["decode"]
    assert dec["mbu"] is not None and dec["mbu_estimate"] == "upper" and dec["bytes_estimate"] == "upper"
    assert 0 < dec["bytes_estimate_share"]["upper"] < 1
    assert "the MBU is an upper bound" in dec["mbu_basis"]
    assert [s["mbu_estimate"] for s in d["steps"]] == ["upper"]  # the one step's MBU rests on the same bytes
    rows = d["top_kernels"]["decode"]
    moe = [r for r in rows if r["category"] == "moe" and r["cost_source"] == "model" and r["achieved_gbps"]]
    experts = [r for r in moe if r["achieved_gbps"] == pytest.approx(PEAK_BW[key] / 1e9)]
    assert experts and all(r["estimate"] == "upper" for r in experts)
    assert all(r["estimate"] is None for r in rows if r["category"] == "gemm")
    basis = d["model"]["estimates"]["experts"]
    assert "E*(1-(1-k/E)^B) = 128*(1-(1-8/128)^16) = 82.4 of 128" in basis
    assert f"{EXPERT_BYTES:,} bytes per expert" in basis
    points = d["roofline"]["decode"]["points"]
    assert any(p["label"] == "model: experts" and p["estimate"] == "upper" for p in points)


def test_the_reports_mark_the_bounds():
    """Bug: HTML, Markdown and text show "8.00 TB/s" and "43.6%" for the capped experts and the
    MBU without a mark saying they are upper bounds."""
    a = analyze(read_real("b300_qwen3_moe"), model="qwen3-30b-a3b")
    mbu = f"{a.phases['decode']['mbu']:.1%}"
    page = render(a, "html")
    md = render(a, "md")
    text = render(a, "text")
    legend = "≤ an upper bound: bytes capped at what peak bandwidth moves"
    assert "≤ 8.00 TB/s" in page and f"≤ {mbu}" in page
    assert html.escape(legend, quote=True) in page  # the legend's apostrophes escaped in the page
    assert "≤ 8.00 TB/s" in md and f"| ≤ {mbu} |" in md and legend in md
    assert f"≤ {mbu}" in text and legend in text
    # The 16-bit projections priced from stated figures carry no mark.
    assert "~ " not in md.split("**Top kernels")[1].split("\n\n")[1]


def test_combined_estimate():
    """Bug: a sum of exact bytes and an upper bound loses its mark, or a sum of an upper and a
    lower bound is called either bound."""
    nb = [1.0, 2.0, 3.0]
    assert combined_estimate([None, None, None], nb) is None
    assert combined_estimate([None, "upper", None], nb) == "upper"
    assert combined_estimate([None, "lower", "lower"], nb) == "lower"
    assert combined_estimate(["upper", "lower", None], nb) == "model"
    assert combined_estimate(["upper", "model", None], nb) == "model"
    assert combined_estimate(["upper", None, None], [np.nan, 2.0, 3.0]) is None  # no bytes: no bound
