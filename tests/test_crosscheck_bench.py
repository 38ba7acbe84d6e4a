"""benchmarks/bench_crosscheck.py (issue 47, item 3): tracekit's FLOPs and bytes beside TraceLens's
and beside arithmetic written in the benchmark itself.

On the H100 Hugging Face trace (the smallest of the four TraceLens read, read once), every GEMM
shape's FLOPs agree with 2*M*N*K within 0.1% on both tools, the known agreement; a tracekit that
mispriced GEMMs by 10% is named as disagreeing, with the arithmetic on TraceLens's side. The
arithmetic's own formulas are checked against hand figures from the shapes the shared traces record
(no shared folder needed for those).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import ROOT, SHARED_TRACES, read_real

ORACLE = SHARED_TRACES.parent / "oracles" / "tracelens" / "h100_hf-qwen1.5-0.5b_forward_bs16"


def _bench():
    name = "bench_crosscheck"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "bench_crosscheck.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


_RESULT: dict = {}


def _h100(work=None):
    trace = read_real("h100_hf")  # skips, with the reason, where ../shared/traces is absent
    if not (ORACLE / "unified_perf_summary.csv").exists():
        pytest.skip(f"TraceLens's CSVs {ORACLE} are absent (../shared/oracles is not beside this checkout)")
    b = _bench()
    if work is not None:
        return b.crosscheck(trace.path, None, ORACLE, trace=trace, work=work)
    if "h100" not in _RESULT:
        _RESULT["h100"] = b.crosscheck(trace.path, None, ORACLE, trace=trace)
    return _RESULT["h100"]


GEMMS = ("aten::mm", "aten::addmm", "aten::bmm")


def test_gemm_flops_agree_with_arithmetic_on_both_tools():
    res = _h100()
    gemms = [r for r in res["ops"] if r["name"] in GEMMS]
    # 3 aten::mm shapes (q/k/v-sized, MLP up, MLP down), the biased projections, the rotary bmm
    assert len(gemms) == 5, [r["op"] for r in gemms]
    for r in gemms:
        assert r["n_tracekit"] == r["n_tracelens"] > 0, r["op"]
        assert r["ar_flops"] > 0, r["op"]
        assert r["tk_flops"] == pytest.approx(r["ar_flops"], rel=1e-3), r["op"]
        assert r["tl_flops"] == pytest.approx(r["ar_flops"], rel=1e-3), r["op"]
        assert r["flops_verdict"]["status"] == "agree", (r["op"], r["flops_verdict"])
        assert r["bytes_verdict"]["status"] == "agree", (r["op"], r["bytes_verdict"])
    # 48 MLP up-projections of 8944 x 1024 x 2816: 2*M*N*K each, by hand
    up = next(r for r in gemms if r["name"] == "aten::mm" and r["dims"] == [[8944, 1024], [1024, 2816]])
    assert up["n_tracekit"] == 48
    assert up["ar_flops"] == 48 * 2 * 8944 * 1024 * 2816
    # operands in bf16: A, B read, C written; plus the 4-byte cuBLAS memset the trace records per call
    assert up["ar_bytes"] == 48 * 2 * (8944 * 1024 + 1024 * 2816 + 8944 * 2816) + 48 * 4


def test_known_tracelens_convention_is_named_with_the_arithmetics_side():
    res = _h100()
    silu = next(r for r in res["ops"] if r["name"] == "aten::silu")
    # TraceLens counts SiLU 1 FLOP per element, tracekit and the arithmetic 4: a named disagreement
    v = silu["flops_verdict"]
    assert v["status"] == "disagree" and v["side"] == "tracekit", v
    assert "convention" in v["text"]
    assert any(
        d["what"] == silu["op"] and d["metric"] == "flops" and d["side"] == "tracekit" for d in res["disagreements"]
    )
    # the whole forward: FLOPs and bytes within 5% on all three
    assert res["total"]["flops_verdict"]["status"] == "agree"
    assert res["total"]["bytes_verdict"]["status"] == "agree"
    assert res["total"]["tk_flops"] == pytest.approx(res["total"]["ar_flops"], rel=1e-3)


def test_a_perturbed_tracekit_is_named_as_disagreeing():
    from tracekit.analysis import analyze

    trace = read_real("h100_hf")
    work = analyze(trace).work.copy()
    gemm = work["category"] == "gemm"
    work.loc[gemm, "flops"] = work.loc[gemm, "flops"] * 1.10
    res = _h100(work)
    for r in (r for r in res["ops"] if r["name"] == "aten::mm"):
        v = r["flops_verdict"]
        assert v["status"] == "disagree" and v["side"] == "TraceLens", (r["op"], v)
        assert "+10.0% from arithmetic" in v["text"]
        assert any(
            d["what"] == r["op"] and d["metric"] == "flops" and d["side"] == "TraceLens" for d in res["disagreements"]
        )
    cat = next(c for c in res["categories"] if c["category"] == "gemm")
    assert cat["flops_verdict"]["status"] == "disagree" and cat["flops_verdict"]["side"] == "TraceLens"
    # bytes were left alone: still agree
    assert all(r["bytes_verdict"]["status"] == "agree" for r in res["ops"] if r["name"] == "aten::mm")


def test_verdicts():
    v = _bench().verdict
    assert v(100.0, 102.0, 101.0)["status"] == "agree"
    got = v(50.0, 100.0, 100.0)
    assert got["status"] == "disagree" and got["side"] == "TraceLens" and "-50.0% from arithmetic" in got["text"]
    assert v(100.0, 25.0, 100.0)["side"] == "tracekit"
    assert v(100.0, 200.0, 150.0)["side"] == "neither"
    assert v(100.0, 200.0, None)["side"] is None and v(100.0, 200.0, None)["status"] == "disagree"
    # tracekit leaving unpriced what TraceLens prices is a disagreement; neither pricing it is a gap
    assert v(None, 100.0, 100.0)["side"] == "TraceLens"
    assert v(None, None, 100.0)["status"] == "unpriced"
    assert v(None, 0.0, 0.0)["status"] == "agree"
    assert v(None, None, None)["status"] == "unchecked"


def _args(b, name, dims, types, conc=None, step=None):
    return b.Args(name, dims, types, conc or [""] * len(dims), step)


def test_arithmetic_by_hand():
    b = _bench()
    bf = "c10::BFloat16"
    # SGLang Qwen3-8B extend step: add + RMSNorm reads input, residual and weight, writes output and residual
    a = b.FORMULAS["aiter::add_rmsnorm"](
        _args(b, "aiter::add_rmsnorm", [[15360, 4096]] * 4 + [[4096], []], [bf] * 5 + ["Scalar"])
    )
    assert a.bytes == 4 * 15360 * 4096 * 2 + 4096 * 2
    # per-head k_norm: 8 KV heads x 128 per token, not the hidden width
    a = b.FORMULAS["aiter::rmsnorm"](
        _args(b, "aiter::rmsnorm", [[122880, 128], [122880, 128], [128], []], [bf, bf, bf, "Scalar"])
    )
    assert a.bytes == 2 * 15360 * 8 * 128 * 2 + 128 * 2 and a.flops == 4 * 15360 * 1024
    # prefill attention: 15 requests of 1024 tokens, causal, 32 query heads, 8 KV heads, head 128
    dims = [[15360, 32, 128], [835874, 8, 128], [835874, 8, 128], [16], [16], [15616]] + [[]] * 12
    types = [bf, bf, bf, "int", "int", "int"] + ["Scalar"] * 12
    conc = ["", "", "", "", "", "", "1024", "1024", "0.", "0.088", "0.", "False", "True", "-1", "-1", "0", "", ""]
    a = b.FORMULAS["aiter::mha_batch_prefill"](_args(b, "aiter::mha_batch_prefill", dims, types, conc))
    pairs = 15 * 1024 * 1025 // 2
    assert a.flops == 4 * 32 * 128 * pairs
    assert a.bytes == 2 * 15360 * 32 * 128 * 2 + 2 * 15360 * 8 * 128 * 2
    # the same from the engine's step annotation when the op's arguments do not settle the lengths
    step = b.step_sums(
        __import__("pandas").DataFrame(
            {
                "name": [
                    "execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)"
                ]
            }
        )
    )[0]
    conc2 = conc[:6] + ["2048", "2048"] + conc[8:]
    assert (
        b.FORMULAS["aiter::mha_batch_prefill"](_args(b, "aiter::mha_batch_prefill", dims, types, conc2, step)).flops
        == 4 * 32 * 128 * pairs
    )
    # decode: 32 requests, 32,785 keys in all (the step's annotation), one query each
    dstep = {"sq": 32, "sk": 32785, "sqsq": 32, "sqsk": 32785}
    a = b.FORMULAS["sglang_profiler::attention_paged_attention_ragged"](
        _args(
            b,
            "sglang_profiler::attention_paged_attention_ragged",
            [[32, 32, 128], [10905190400], [32, 32, 128], [835874, 1, 8, 128], [835874, 1, 8, 128], [33]],
            [bf, "unsigned char", bf, bf, bf, "int"],
            step=dstep,
        )
    )
    assert a.flops == 4 * 32 * 128 * 32785
    assert a.bytes == 2 * 32 * 32 * 128 * 2 + 2 * 32785 * 8 * 128 * 2
    # SiLU-and-mul, RoPE, KV store
    a = b.FORMULAS["sgl_kernel::silu_and_mul"](
        _args(b, "sgl_kernel::silu_and_mul", [[32, 12288], [32, 24576]], [bf, bf])
    )
    assert a.flops == 5 * 32 * 12288 and a.bytes == (32 * 12288 + 32 * 24576) * 2
    a = b.FORMULAS["sgl_kernel::rotary_embedding"](
        _args(
            b,
            "sgl_kernel::rotary_embedding",
            [[32], [32, 4096], [32, 1024], [], [41216, 128], []],
            ["long int", bf, bf, "Scalar", bf, "Scalar"],
            ["", "", "", "128", "", "True"],
        )
    )
    assert a.flops == 3 * 32 * 40 * 128 and a.bytes == 2 * 32 * 40 * 128 * 2 + 32 * 8 + 32 * 128 * 2
    a = b.FORMULAS["sglang::store_cache"](
        _args(
            b,
            "sglang::store_cache",
            [[32, 1024], [32, 1024], [835874, 1024], [835874, 1024], [32], [], []],
            [bf, bf, bf, bf, "long int", "Scalar", "Scalar"],
        )
    )
    assert a.flops == 0 and a.bytes == 2 * 2 * 32 * 1024 * 2 + 32 * 8
    # torch SDPA, causal: 559 tokens, 16 x 16 heads of 64
    a = b.FORMULAS["aten::_scaled_dot_product_flash_attention"](
        _args(
            b,
            "aten::_scaled_dot_product_flash_attention",
            [[16, 16, 559, 64]] * 3 + [[]] * 4,
            [bf] * 3 + ["Scalar"] * 4,
            ["", "", "", "0.", "True", "False", "0.125"],
        )
    )
    assert a.flops == 4 * 256 * 64 * (559 * 560 // 2) and a.bytes == 4 * 16 * 16 * 559 * 64 * 2
    # where the shapes cannot say: no arithmetic, not a guess
    assert (
        b.FORMULAS["aten::cat"](_args(b, "aten::cat", [[[1, 2], [1, 2]], []], ["TensorList", "Scalar"])).bytes is None
    )
    assert (
        b.FORMULAS["sglang_profiler::attention_paged_attention_ragged"](
            _args(
                b,
                "sglang_profiler::attention_paged_attention_ragged",
                [[32, 32, 128], [1], [32, 32, 128], [9, 1, 8, 128]],
                [bf, "unsigned char", bf, bf],
            )
        )
        is None
    )
