"""A --model the trace contradicts, layer counts that understand split-KV attention, mixed-precision
kernels, and dtypes the device has no peak for (issue 23: "Known costs, known bounds", "False alarms")."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
from click.testing import CliRunner
from conftest import read_real, real_trace_path

from tracekit.analysis import analyze
from tracekit.analysis.pricing.kernel_names import name_dtype
from tracekit.analysis.pricing.model_fit import layer_check
from tracekit.cli import main
from tracekit.models import load_model
from tracekit.specs import spec_by_name

_CACHE: dict = {}


def _analysed(key, model, **kw):
    k = (key, model, tuple(sorted(kw.items())))
    if k not in _CACHE:
        _CACHE[k] = analyze(read_real(key), model=model, **kw)
    return _CACHE[k]


# --- a --model the trace contradicts ----------------------------------------------------------


def test_a_model_the_trace_contradicts_prices_nothing_unless_forced():
    """Bug: with --model deepseek-r1 on the SGLang Qwen3-8B decode step (36 attention layers, each a
    paged-attention kernel and its reduce kernel) tracekit warned "may not be DeepSeek-R1" and printed
    the model's FLOPs, bytes, bounds and MBU anyway."""
    wrong = _analysed("mi300x_decode", "deepseek-r1").to_dict()
    dec = wrong["phases"]["decode"]
    assert wrong["model"]["withheld"].startswith("withheld: the trace does not fit DeepSeek-R1")
    assert "61 attention layers" in wrong["model"]["withheld"]
    assert dec["mbu"] is None and dec["mfu"] is None
    assert dec["mbu_reason"] == wrong["model"]["withheld"] == wrong["provenance"]["reasons"]["model_costs"]
    assert wrong["metrics"]["decode_mbu"] is None
    # Nothing was priced by the model; the step's FLOPs are the few recorded shapes' only.
    assert dec["cost_source_ms"]["model"] == 0
    assert wrong["steps"][0]["flops"] is None or wrong["steps"][0]["flops"] < 1e9
    mismatch = next(f for f in wrong["findings"] if f["id"] == "model-mismatch")
    assert "withheld" in mismatch["text"] and "--model-force" in mismatch["text"]

    forced = _analysed("mi300x_decode", "deepseek-r1", model_force=True).to_dict()
    fdec = forced["phases"]["decode"]
    assert forced["model"]["withheld"] is None and forced["model"]["forced"] is True
    assert fdec["mbu"] is not None and fdec["cost_source_ms"]["model"] > 0.9 * fdec["kernel_ms"]
    assert "--model-force" in next(f for f in forced["findings"] if f["id"] == "model-mismatch")["text"]

    # The model that ran is not withheld.
    right = _analysed("mi300x_decode", "qwen3-8b").to_dict()
    assert right["model"]["layer_check"] is None and right["model"]["withheld"] is None
    assert right["phases"]["decode"]["mbu"] is not None
    assert "model_costs" not in right["provenance"]["reasons"]
    assert not any(f["id"] == "model-mismatch" for f in right["findings"])


def test_model_force_on_every_command_that_takes_a_model(tmp_path):
    """Bug: there was no way to keep a contradicted model's figures, and no command said they were
    withheld; report's JSON carries the reason, summary says it in a sentence."""
    trace = str(real_trace_path("mi300x_decode"))
    runner = CliRunner()
    out = tmp_path / "r.json"
    res = runner.invoke(main, ["report", trace, "--model", "deepseek-r1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["metrics"]["decode_mbu"] is None
    assert data["phases"]["decode"]["mbu_reason"].startswith("withheld")
    res = runner.invoke(main, ["report", trace, "--model", "deepseek-r1", "--model-force", "-o", str(out), "--force"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["metrics"]["decode_mbu"] is not None
    res = runner.invoke(main, ["summary", trace, "--model", "deepseek-r1"])
    assert res.exit_code == 0 and "withheld: the trace does not fit DeepSeek-R1" in res.output
    for command in ("summary", "report", "compare", "project", "plan"):
        res = runner.invoke(main, [command, "--help"])
        assert "--model-force" in res.output, command


# --- layer counts ------------------------------------------------------------------------------


def _steps_of(per_step: list[dict[str, int]]):
    """A work table of attention kernels: per step, ``{name: launches}`` in launch order."""
    step, names = [], []
    for i, counts in enumerate(per_step):
        for name, c in counts.items():
            step += [i] * c
            names += [name] * c
    work = pd.DataFrame({"step": np.array(step, dtype=np.int64), "name": pd.Categorical(names)})
    return work, np.full(len(work), "attention", dtype=object), pd.DataFrame({"step": range(len(per_step))})


def test_split_kv_forward_combine_and_a_setup_kernel_are_80_layers():
    """Bug: Llama-70B on vLLM, "161 attention kernels don't fit 80 layers", for 80 split-KV forward
    kernels, 80 combine kernels and one setup kernel per step."""
    llama70 = load_model("llama-3.1-70b-instruct")
    step = {
        "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false>, true>(Flash_fwd_params)": 80,
        "void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false>, 4, 16>"
        "(Flash_fwd_params)": 80,
        "void flash::prepare_varlen_num_blocks_kernel(int, int, int const*)": 1,
    }
    assert layer_check(llama70, *_steps_of([step] * 5)) is None
    for forward, combine in (
        ("paged_attention_v2_kernel<c10::BFloat16, 128>", "paged_attention_v2_reduce_kernel<c10::BFloat16, 128>"),
        ("flashinfer::BatchDecodeWithPagedKVCacheKernel<true>", "flashinfer::MergeStatesKernel<8>"),
    ):
        assert layer_check(llama70, *_steps_of([{forward: 80, combine: 80, "plan_kernel": 1}] * 3)) is None
    # The same steps do not fit a model of 32 layers...
    problem = layer_check(load_model("llama-3.1-8b-instruct"), *_steps_of([step] * 5))
    assert "161 attention kernels" in problem and "80 per-layer" in problem and "32 attention layers" in problem
    # ...nor 81 forward kernels 80 layers (a setup kernel is a name of its own, not one more of the forward).
    odd = {**step, next(iter(step)): 81}
    assert layer_check(llama70, *_steps_of([odd] * 5)) is not None


def test_gpt_oss_segments_reduce_and_capture_duplicates_fit_24_layers():
    """Bug: gpt-oss-20b with --graph-capture, "36 attention kernels ... 24 layers": with the capture's
    ops, vLLM's unified-attention ``reduce_segments`` (the second stage of its split-KV 3d kernel)
    counts as attention. A capture trace's warmup + capture of one graph doubles each layer's kernel."""
    oss = load_model("gpt-oss-20b")
    assert layer_check(oss, *_steps_of([{"kernel_unified_attention_3d": 24, "reduce_segments": 12}] * 4)) is None
    assert layer_check(oss, *_steps_of([{"kernel_unified_attention_3d": 24, "reduce_segments": 24}] * 4)) is None
    assert layer_check(oss, *_steps_of([{"kernel_unified_attention_2d": 48, "_metadata_kernel": 2}] * 4)) is None
    # A model of other layers still does not fit.
    assert (
        layer_check(
            load_model("gpt-oss-120b"), *_steps_of([{"kernel_unified_attention_3d": 24, "reduce_segments": 12}] * 4)
        )
        is not None
    )


def test_layers_not_kernels_on_a_shared_trace():
    """Bug: the check counted kernels, so the Qwen3-8B decode step's 72 (36 layers x forward + reduce)
    'fit' any model of 24, 36 or 72 layers; counting layers, 24 does not fit and 36 does."""
    assert _analysed("mi300x_decode", "qwen3-8b").model["layer_check"] is None
    check = _analysed("mi300x_decode", "qwen2.5-0.5b-instruct").model["layer_check"]
    assert check and "36 per-layer, 36 split-KV combine" in check and "24 attention layers" in check


# --- mixed-precision kernels -------------------------------------------------------------------


def test_bf16_activations_x_mxfp4_weights_run_at_bf16():
    """Bug: a bf16 x MXFP4 kernel read as FP4: "kernels fp4, model bf16", and no FP4 peak (MI300X)
    nulled the MFU. Output types in long form (trtllm-gen, FMHA) are not activations."""
    assert name_dtype("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1_swiglu") == "bf16"
    assert name_dtype("moe_gemm_bf16_mxfp4_kernel") == "bf16"
    assert name_dtype("void marlin_moe_wna16::Marlin<1125899906909960l>") == "bf16"
    assert name_dtype("gemm_w4a16_fp16") == "fp16"
    assert name_dtype("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3") == "fp8"
    assert name_dtype("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKv") == "fp8"
    assert name_dtype("bmm_MxE4m3_MxE2m1E2m1_Fp32_t128x8x256u2") == "fp8"


def _renamed(trace, old_contains: str, new: str):
    """A copy of ``trace`` whose kernels with ``old_contains`` in their name are called ``new``..."""
    names = trace.kernels["name"]
    cats = [f"{new}_{i}" if old_contains in str(c) else str(c) for i, c in enumerate(names.cat.categories)]
    return dataclasses.replace(trace, kernels=trace.kernels.assign(name=names.cat.rename_categories(cats)))


def test_mixed_precision_experts_fit_an_mxfp4_model_and_keep_the_mfu():
    """Bug: the same decode step with MXFP4 experts run by a bf16 x MXFP4 kernel (as triton_kernels
    names them) raised "kernels fp4, model bf16" and lost its decode MFU on MI300X."""
    trace = _renamed(read_real("mi300x_qwen3_moe"), "kernel_moe_gemm", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1")
    a = analyze(trace, model="qwen3-30b-a3b", weights="mxfp4")
    experts = a.work[a.work["component"] == "experts"]
    assert len(experts) and set(experts["dtype"].astype(str)) == {"bf16"}
    assert a.model["dtype_conflicts"] == {}
    assert not any(f.id == "model-precision" for f in a.findings)
    assert a.phases["decode"]["mfu"] is not None


# --- known costs, known bounds -----------------------------------------------------------------


def test_a_dtype_without_a_peak_is_priced_at_the_next_wider_one():
    """Bug: FP4 kernels on MI300X (no FP4 peak) had FLOPs and bytes but were "unknown bound" and nulled
    the MFU, while `project` ran them at FP8 and the chart drew them under the bandwidth roof."""
    mi300x, b200 = spec_by_name("mi300x"), spec_by_name("b200")
    assert mi300x.runs_as("fp4") == "fp8" and b200.runs_as("fp4") == "fp4"
    assert mi300x.runs_as_note("fp4") == "priced at fp8 peak: MI300X has no fp4 matrix peak"
    assert b200.runs_as_note("fp4") is None
    a = _analysed("mi300x_decode", "qwen3-8b", weights="nvfp4")  # NVFP4 linear layers on a GPU without FP4
    w = a.work
    fp4 = w[(w["dtype"] == "fp4").to_numpy()]
    assert len(fp4) and fp4["flops"].notna().all()
    assert (fp4["bound"] != "unknown").all() and (fp4["peak_flops"] == mi300x.peak_flops("fp8")).all()
    assert set(fp4["peak_note"].astype(str)) == {"priced at fp8 peak: MI300X has no fp4 matrix peak"}
    assert a.phases["decode"]["mfu"] is not None and "fp4 work priced at fp8 peak" in a.phases["decode"]["mfu_basis"]
    assert any(f.id == "peak-fallback" and "MI300X has no fp4" in f.text for f in a.findings)
    # Table and chart agree: the GEMMs' row in the top kernels and the model's linear point have one bound.
    d = a.to_dict()
    point = next(p for p in d["roofline"]["decode"]["points"] if p["label"] == "model: linear")
    rows = [r for r in d["top_kernels"]["decode"] if r["peak_note"]]
    assert rows and {r["bound"] for r in rows} == {point["bound"]} == {"memory"}
    assert point["peak_note"] == rows[0]["peak_note"]
    assert "fp8" in {r["dtype"] for r in d["roofline"]["decode"]["roofs"]["compute"]}
    assert not any("fp4" in k for k in d["provenance"]["unknown_bound_ms_by_reason"])
