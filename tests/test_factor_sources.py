"""Efficiencies and peaks with sources (issue 49): every published factor names its reference,
defaults are the generic row's figures, and every spec row's matrix peak follows the stated
convention (dense, FP32 accumulate) against the source figure recorded in the row."""

from __future__ import annotations

import copy
import json
import re
from importlib import resources

import numpy as np
import pandas as pd
import pytest

from tracekit.specs import factors
from tracekit.specs.lookup import spec_by_name
from tracekit.whatif.reprice import reprice

_REF = re.compile(r"https?://|arXiv:\d{4}\.\d{4,5}|github\.com/[\w.-]+/[\w.-]+|rocm\.blogs\.amd\.com|^gpus\.json ")


def _doc():
    return json.loads(resources.files("tracekit.specs").joinpath("category_factors.json").read_text())


def _gpus():
    return json.loads(resources.files("tracekit.specs").joinpath("gpus.json").read_text())["gpus"]


def test_every_non_default_row_names_a_reference():
    # Bug: an estimate (or a figure read off a shared pair) passing as a published measurement.
    rows = {g["key"]: g for g in _gpus()}
    seen = 0
    for cls in _doc()["classes"]:
        for cat, f in cls["factors"].items():
            if set(f.get("default_sides", ())) == {"compute", "memory"}:
                continue
            seen += 1
            assert f["cite"], f"{cls['key']}.{cat} publishes a figure without a reference"
            for ref in f["cite"]:
                assert _REF.search(ref), f"{cls['key']}.{cat}: {ref!r} is not a reference"
                if ref.startswith("gpus.json "):  # a spec row's measured source, which must exist and be measured
                    _, key, field = ref.split()
                    assert key in rows, ref
                    assert rows[key]["achievable"][field.split(".")[1]].startswith("measured"), ref
    assert seen >= 10


def test_default_sides_carry_the_generic_figures():
    # Bug: a hand-picked figure labelled "default" to dodge the reference check.
    doc = _doc()
    row = doc["classes"][0]["factors"]["moe"]
    assert "compute" in row["default_sides"]
    factors.parse(doc)
    bad = copy.deepcopy(doc)
    bad["classes"][0]["factors"]["moe"]["compute"] = [0.5, 0.8, 0.9]
    with pytest.raises(ValueError, match="marked default"):
        factors.parse(bad)
    bad = copy.deepcopy(doc)
    bad["classes"][1]["factors"]["gemm"]["cite"] = []
    with pytest.raises(ValueError, match="reference"):
        factors.parse(bad)


def test_every_row_has_an_interval():
    for cls in factors.table().classes:
        for cat, f in cls.factors.items():
            for side in factors.SIDES:
                lo, c, hi = f.side(side)
                assert lo < c < hi, f"{cls.key}.{cat}.{side} is a point, not an interval"


def test_attention_splits_by_phase():
    # Bug: decode attention (bandwidth-bound) priced with prefill attention's figures.
    assert factors.unit_category("attention", "decode") == "attention_decode"
    assert factors.unit_category("attention", "prefill") == "attention_prefill"
    assert factors.unit_category("attention", "mixed") == "attention_prefill"
    assert factors.unit_category("rope", "decode") == "elementwise"


def _expected(r: dict) -> float:
    v = r["value"] / (2 if r["sparse"] else 1)
    if r["accumulate"] == "fp16":
        v /= r["fp32_accumulate_divisor"]
    return v / r.get("per_package_of", 1)


@pytest.mark.parametrize("row", _gpus(), ids=lambda g: g["key"])
def test_peaks_follow_the_convention_against_the_rows_own_source(row):
    # Bug: a sparse figure, or an FP16-accumulate one, stored as the dense FP32-accumulate peak.
    pub = row["published_peaks"]
    for dtype in ("fp16", "bf16", "fp8", "fp4"):
        if dtype in row["matrix_tflops"]:
            got = pub.get(dtype) or (pub.get("bf16") if dtype == "fp16" else None)
            assert got, f"{row['key']} {dtype}: no published figure recorded"
    for dtype, r in pub.items():
        assert r["where"].strip()
        # 1%: clock-derived figures (62.05 vs 62.5 on GB10) and rounding of printed figures.
        assert row["matrix_tflops"][dtype] == pytest.approx(_expected(r), rel=0.01), (row["key"], dtype)


def test_gb10_fp8_is_the_fp32_accumulate_figure():
    # Issue 49: 250 is GB10's FP16-accumulate FP8 rate; its own source gives 124.11 with FP32 accumulate.
    assert spec_by_name("gb10").peak_flops("fp8") == pytest.approx(124.11e12)


def _unit(category, phase="decode"):
    return {
        "dur_ns": 1000.0,
        "flops": 1e3,
        "bytes": 1e9,
        "dtype": "bf16",
        "unit": "vector",
        "bound": "memory",
        "limiter": "memory",
        "kind": "kernel",
        "category": category,
        "phase": phase,
        "name": "k",
    }


def test_same_class_carries_the_source_fraction():
    # Within one vendor class the source's own fraction is the prior: a memory-bound kernel
    # moves by the bandwidth ratio alone (H100 SXM 3350 GB/s -> B200 8000 GB/s).
    work = pd.DataFrame([_unit("elementwise")])
    rp = reprice(work, spec_by_name("h100-sxm"), spec_by_name("b200"))
    assert rp.central[0] == pytest.approx(1000.0 * 3350 / 8000)
    assert rp.low[0] < rp.central[0] < rp.high[0]
    # Across classes the published fractions enter (MI300X elementwise 0.74 vs Hopper 0.90).
    rp = reprice(work, spec_by_name("h100-sxm"), spec_by_name("mi300x"))
    assert rp.central[0] == pytest.approx(1000.0 * (3350 * 0.9) / (5300 * 0.74))
    assert np.isfinite(rp.high[0])
