"""Per-op cost models: hand-checked formulas, an independent FLOP oracle, real trace records."""

from __future__ import annotations

import copy
import gzip
import inspect
import json
import math
from pathlib import Path

import msgspec
import numpy as np
import pytest
from conftest import real_trace_path

from tracekit.analysis.pricing.matrix_ops import attention_cost, gemm_cost
from tracekit.analysis.pricing.op_args import MATRIX, VECTOR, NoCost, OpCost
from tracekit.analysis.pricing.op_costs import (
    has_model,
    op_cost,
    op_cost_json,
    price,
    why_no_cost,
)

BF16, F16, F32 = "c10::BFloat16", "c10::Half", "float"


# ---------------------------------------------------------------- hand-checked cases


def test_linear_gemm_by_hand():
    # The router GEMM of the B300 MoE trace: [16, 512] @ [64, 512]^T, no bias.
    cost = op_cost("aten::linear", [[16, 512], [64, 512], []], [BF16, BF16, ""])
    assert cost.flops == 2 * 16 * 512 * 64
    assert cost.bytes == 2 * (16 * 512 + 64 * 512 + 16 * 64)
    assert (cost.dtype, cost.unit) == ("bf16", MATRIX)
    assert gemm_cost(16, 64, 512, 2) == (cost.flops, cost.bytes)


def test_gemm_family_agrees_on_one_product():
    m, k, n = 64, 256, 128
    mm = op_cost("aten::mm", [[m, k], [k, n]], [F32, F32])
    matmul = op_cost("aten::matmul", [[2, 32, k], [k, n]], [F32, F32])  # batch folds into M
    linear = op_cost("aten::linear", [[2, 32, k], [n, k], [n]], [F32, F32, F32])
    addmm = op_cost("aten::addmm", [[n], [m, k], [k, n], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert mm.flops == matmul.flops == linear.flops == addmm.flops == 2 * m * n * k
    assert mm.bytes == matmul.bytes == 4 * (m * k + k * n + m * n)
    assert linear.bytes == addmm.bytes == mm.bytes + 4 * n  # bias read once, its add not counted
    assert gemm_cost(m, n, k, 4, bias=True).bytes == linear.bytes


def test_batched_and_broadcast_matmuls():
    bmm = op_cost("aten::bmm", [[32, 1, 512], [32, 512, 1024]], [BF16, BF16])  # B300 expert GEMM
    assert bmm.flops == 2 * 32 * 1 * 512 * 1024
    assert bmm.bytes == 2 * 32 * (512 + 512 * 1024 + 1024)
    baddbmm = op_cost(
        "aten::baddbmm", [[64, 128, 128], [64, 128, 16], [64, 16, 128], [], []], [F32, F16, F16, "Scalar", "Scalar"]
    )  # particle transformer, mixed types
    assert baddbmm.flops == 2 * 64 * 128 * 128 * 16
    assert baddbmm.bytes == 4 * 64 * 128 * 128 + 2 * (2 * 64 * 128 * 16) + 2 * 64 * 128 * 128
    # Broadcast batch dims: [3, 1, 4, 5] @ [2, 5, 6] -> batch 3 x 2.
    assert op_cost("aten::matmul", [[3, 1, 4, 5], [2, 5, 6]], [F32, F32]).flops == 2 * 6 * 4 * 5 * 6
    # 1-D operands: vector @ matrix, matrix @ vector, dot.
    assert op_cost("aten::matmul", [[5], [5, 6]], [F32, F32]).flops == 2 * 5 * 6
    assert op_cost("aten::matmul", [[4, 5], [5]], [F32, F32]).flops == 2 * 4 * 5
    assert op_cost("aten::dot", [[7], [7]], [F32, F32]).flops == 2 * 7


def test_scaled_mm_fp8_with_bf16_output():
    cost = op_cost(
        "aten::_scaled_mm",
        [[128, 256], [256, 512], [], [], [], [], [], []],
        ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", F32, F32, "", "", "Scalar", "Scalar"],
        ["", "", "", "", "", "", "15", "False"],
    )
    assert cost.flops == 2 * 128 * 256 * 512
    assert cost.dtype == "fp8"
    # A, B in 1 byte; two 0-d fp32 scales; bf16 output.
    assert cost.bytes == 128 * 256 + 256 * 512 + 2 * 4 + 2 * 128 * 512


def _pairs(len_q: int, len_k: int, align: str) -> int:
    """Scored pairs counted from an explicit boolean mask (the oracle for the closed forms)."""
    if align == "top_left":  # torch SDPA docs: ones(L, S).tril(diagonal=0)
        return int(np.tril(np.ones((len_q, len_k), dtype=bool)).sum())
    return int(np.tril(np.ones((len_q, len_k), dtype=bool), k=len_k - len_q).sum())


@pytest.mark.parametrize(("len_q", "len_k"), [(1, 1), (7, 7), (559, 559), (4, 10), (1, 33), (10, 4)])
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_causal_pair_counts_match_an_explicit_mask(len_q, len_k, align):
    work = attention_cost(1, 1, 1, len_q, len_k, 1, 2, causal=True, head_dim_v=1, align=align)
    assert work.flops == 4 * _pairs(len_q, len_k, align)


def test_causal_prefill_attention_by_hand():
    # The H100 Qwen1.5-0.5B prefill: 16 sequences x 559 tokens, 16 heads of 64, causal.
    dims = [[16, 16, 559, 64]] * 3 + [[], [], [], [], []]
    types = [BF16] * 3 + ["", "Scalar", "Scalar", "Scalar", "Scalar"]
    concrete = ["", "", "", "", "0.", "True", "0.125", "False"]
    cost = op_cost("aten::scaled_dot_product_attention", dims, types, concrete)
    pairs = 559 * 560 // 2
    assert cost.flops == 4 * 16 * 16 * 64 * pairs
    assert cost.bytes == 2 * 4 * 16 * 16 * 559 * 64  # q, k, v, out
    assert cost.unit == MATRIX
    # The same call as flash records it: [B, L, H, D], is_causal at position 8.
    flash = op_cost(
        "aten::_flash_attention_forward",
        [[16, 559, 16, 64]] * 3 + [[]] * 12,
        [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "", "", "", ""],
        ["", "", "", "", "", "559", "559", "0.", "True", "False", "0.125", "", "", "", ""],
    )
    assert (flash.flops, flash.bytes) == (cost.flops, cost.bytes)
    non_causal = op_cost("aten::scaled_dot_product_attention", dims, types, concrete[:5] + ["False"] + concrete[6:])
    assert non_causal.flops == 4 * 16 * 16 * 64 * 559 * 559


def test_decode_attention_with_gqa_by_hand():
    # One new token per sequence against a 1000-token cache; 32 query heads share 8 KV heads.
    b, hq, hkv, lk, d = 2, 32, 8, 1000, 128
    cost = op_cost(
        "aten::_flash_attention_forward",
        [[b, 1, hq, d], [b, lk, hkv, d], [b, lk, hkv, d]] + [[]] * 12,
        [BF16] * 3 + [""] * 12,
        ["", "", "", "", "", "1", str(lk), "0.", "True", "False", "", "", "", "", ""],
    )
    assert cost.flops == 4 * b * hq * lk * d  # the single query row sees every cached key
    assert cost.bytes == 2 * (2 * b * hq * d + 2 * b * hkv * lk * d)  # q + out, k + v at Hkv
    assert attention_cost(b, hq, hkv, 1, lk, d, 2, causal=True) == (cost.flops, cost.bytes)


def test_chunked_prefill_counts_rows_against_the_cache():
    # 4 new tokens after 6 cached ones: rows see 7, 8, 9, 10 keys.
    work = attention_cost(1, 1, 1, 4, 10, 64, 2, causal=True)
    assert work.flops == 4 * 64 * (7 + 8 + 9 + 10)


def test_broadcast_add_by_hand():
    # Bias add of the particle-transformer conv: [8, 64, 1, 8256] += [1, 64, 1, 1], fp16.
    cost = op_cost("aten::add_", [[8, 64, 1, 8256], [1, 64, 1, 1], []], [F16, F16, "Scalar"], ["", "", "1"])
    out = 8 * 64 * 8256
    assert cost.flops == out
    assert cost.bytes == 2 * (out + 64 + out)
    assert (cost.dtype, cost.unit) == ("fp16", VECTOR)
    # A scaled add (alpha != 1) is a multiply-add per element.
    assert op_cost("aten::add", [[4, 4], [4], []], [F32, F32, "Scalar"], ["", "", "2"]).flops == 2 * 16


def test_elementwise_outputs_and_promotion():
    # A wrapped Python number (0-d double) does not promote float math.
    mul = op_cost("aten::mul", [[1, 559, 64], []], [F32, "double"])
    assert mul.dtype == "fp32" and mul.bytes == 4 * 559 * 64 * 2 + 8
    eq = op_cost("aten::eq", [[16, 559], []], ["long int", "Scalar"])
    assert eq.dtype == "bool" and eq.bytes == 8 * 16 * 559 + 16 * 559
    silu = op_cost("aten::silu", [[16, 559, 2816]], [BF16])
    assert silu.flops == 4 * 16 * 559 * 2816
    fill = op_cost("aten::fill_", [[8, 8, 128, 128], []], [F16, "Scalar"], ["", "0"])
    assert (fill.flops, fill.bytes) == (0, 2 * 8 * 8 * 128 * 128)  # written, never read
    assert op_cost("aten::max", [[4, 5], [4, 5]], [F32, F32]).flops == 20  # the binary overload


def test_embedding_by_hand():
    # Qwen1.5-0.5B token embedding: 8944 ids into a [151936, 1024] bf16 table.
    cost = op_cost(
        "aten::embedding",
        [[151936, 1024], [16, 559], [], [], []],
        [BF16, "long int", "Scalar", "Scalar", "Scalar"],
        ["", "", "-1", "False", "False"],
    )
    rows = 16 * 559
    assert cost.flops == 0
    assert cost.bytes == 2 * rows * 1024 * 2 + rows * 8  # rows read + written, ids read
    select = op_cost("aten::index_select", [[151936, 1024], [], [8944]], [BF16, "Scalar", "long int"], ["", "0", ""])
    assert select.bytes == cost.bytes


def test_norms_softmax_reductions_copies():
    rms = op_cost(
        "aten::rms_norm", [[4, 1024], [], [1024], []], [BF16, "ScalarList", BF16, "Scalar"], ["", "[1024]", "", "1e-06"]
    )
    assert rms.flops == 4 * 4 * 1024  # square, add, scale, weight
    assert rms.bytes == 2 * (4 * 1024 + 1024 + 4 * 1024)
    ln = op_cost(
        "aten::native_layer_norm",
        [[128, 8, 17], [], [17], [17], []],
        [F32, "ScalarList", F32, F32, "Scalar"],
        ["", "[17]", "", "", "1e-05"],
    )
    n = 128 * 8 * 17
    assert ln.flops == 8 * n
    assert ln.bytes == 4 * (n + 2 * 17 + n) + 2 * 4 * 128 * 8  # + mean and rstd per row
    soft = op_cost("aten::_softmax", [[64, 128, 128], [], []], [F16, "Scalar", "Scalar"], ["", "-1", "True"])
    assert soft.dtype == "fp32" and soft.bytes == (2 + 4) * 64 * 128 * 128
    assert soft.flops == 5 * 64 * 128 * 128
    mean = op_cost(
        "aten::mean", [[16, 559, 1024], [], [], []], [F32, "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""]
    )
    assert mean.bytes == 4 * (16 * 559 * 1024 + 16 * 559)
    argmax = op_cost("aten::argmax", [[15, 151936], [], []], [F32, "Scalar", "Scalar"], ["", "-1", "False"])
    assert argmax.dtype == "int64" and argmax.bytes == 4 * 15 * 151936 + 8 * 15
    cast = op_cost(
        "aten::_to_copy",
        [[1, 559, 64], [], [], [], [], [], []],
        [F32, "Scalar", "", "", "", "Scalar", ""],
        ["", "15", "", "", "", "False", ""],
    )
    assert (cast.dtype, cast.bytes, cast.flops) == ("bf16", (4 + 2) * 559 * 64, 0)
    to_device = op_cost(
        "aten::to",
        [[15], [], [], [], [], []],
        ["int", "", "Scalar", "Scalar", "Scalar", ""],
        ["", "", "3", "False", "False", ""],
    )
    assert to_device.bytes == 2 * 4 * 15
    copy_ = op_cost("aten::copy_", [[1, 1, 559], [1, 1, 559], []], [F32, "long int", "Scalar"])
    assert copy_.bytes == (4 + 8) * 559


@pytest.mark.parametrize(
    ("op", "dims", "types", "concrete", "because"),
    [
        ("aten::frobnicate", [[2]], [F32], None, "no cost model"),
        ("aten::mm", None, None, None, "record_shapes"),
        ("aten::cat", [[[1, 559, 32], [1, 559, 32]], []], ["TensorList", "Scalar"], ["", "-1"], "TensorList"),
        (
            "aten::_flash_attention_forward",
            [[100, 16, 64], [100, 16, 64], [100, 16, 64], [16], [16]],
            [BF16, BF16, BF16, "int", "int"],
            None,
            "cu_seqlens",
        ),
        ("aten::scaled_dot_product_attention", [[1, 2, 8, 64]] * 3, [BF16] * 3, None, "is_causal"),
        ("aten::mm", [[4, 5], [6, 7]], [F32, F32], None, "differ"),
        ("aten::mm", [[4, 5], [5, 7]], ["c10::qint8", "c10::qint8"], None, "unknown element type"),
        ("aten::mean", [[4, 5], [], [], []], [F32, "ScalarList", "Scalar", ""], None, "Concrete Inputs"),
        ("aten::linear", [[4, 5], [6], []], [F32, F32, ""], None, "weight must be 2-D"),
    ],
)
def test_missing_costs_say_why(op, dims, types, concrete, because):
    assert op_cost(op, dims, types, concrete) is None
    reason = why_no_cost(op, dims, types, concrete)
    assert because in reason
    assert price(op, dims, types, concrete) == NoCost(reason)


def test_priced_ops_have_no_reason_and_json_entry_is_cached():
    dims, types = [[8944, 1024], [1024, 2816]], [BF16, BF16]
    assert why_no_cost("aten::mm", dims, types) == ""
    op_cost_json.cache_clear()
    first = op_cost_json("aten::mm", json.dumps(dims), json.dumps(types), None)
    again = op_cost_json("aten::mm", json.dumps(dims), json.dumps(types), None)
    assert first is again and isinstance(first, OpCost)
    assert op_cost_json.cache_info().hits == 1
    assert isinstance(op_cost_json("aten::mm", "[[8944, 10", None), NoCost)  # truncated record


def test_has_model_covers_in_place_variants_only_where_they_exist():
    assert has_model("aten::add_") and has_model("aten::mul_") and has_model("aten::linear")
    assert not has_model("aten::linear_") and not has_model("aten::t")


# ---------------------------------------------------------------- outermost-op pricing


def _outermost_priced(events: list[dict]) -> list[tuple[dict, OpCost | NoCost]]:
    """Price the outermost op with a model in each op nesting (by time, per thread)."""
    ops = [e for e in events if str(e.get("cat", "")).lower() in ("cpu_op", "operator")]
    threads: dict[tuple, list[tuple[int, int, int, dict]]] = {}
    for i, e in enumerate(ops):
        start = round(float(e["ts"]) * 1000)
        threads.setdefault((e.get("pid"), e.get("tid")), []).append(
            (start, start + round(float(e.get("dur", 0)) * 1000), i, e)
        )
    priced = []
    for spans in threads.values():
        stack: list[tuple[int, bool]] = []  # (end, inside a priced op)
        for start, end, _, e in sorted(spans, key=lambda s: (s[0], -s[1], s[2])):
            while stack and stack[-1][0] <= start:
                stack.pop()
            covered = bool(stack) and stack[-1][1]
            mine = not covered and has_model(e["name"])
            if mine:
                args = e.get("args", {})
                priced.append(
                    (e, price(e["name"], args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs")))
                )
            stack.append((end, covered or mine))
    return priced


def test_outermost_rule_skips_descendants():
    def op(name, ts, dur, dims, types):
        return {
            "cat": "cpu_op",
            "name": name,
            "ts": ts,
            "dur": dur,
            "pid": 1,
            "tid": 1,
            "args": {"Input Dims": dims, "Input type": types},
        }

    events = [
        op("aten::linear", 0.0, 10.0, [[16, 512], [64, 512], []], [BF16, BF16, ""]),
        op("aten::t", 0.5, 1.0, [[64, 512]], [BF16]),
        op("aten::matmul", 2.0, 7.0, [[16, 512], [512, 64]], [BF16, BF16]),
        op("aten::mm", 2.5, 6.0, [[16, 512], [512, 64]], [BF16, BF16]),
        op("aten::silu", 11.0, 2.0, [[16, 64]], [BF16]),
    ]
    names = [e["name"] for e, _ in _outermost_priced(events)]
    assert names == ["aten::linear", "aten::silu"]


# ---------------------------------------------------------------- the FLOP oracle


def _llama_runs(tmp_path: Path):
    """Prefill (2 x 32 tokens) and one decode step of a random 2-layer GQA Llama on the CPU.

    Yields (label, FlopCounterMode total, exported chrome trace events):
    each run is profiled with record_shapes and, separately, counted by FlopCounterMode.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils import flop_counter

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        attn_implementation="sdpa",
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    # transformers 5 renamed past_key_values to cache.
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    # On the CPU, SDPA runs _scaled_dot_product_flash_attention_for_cpu, which FlopCounterMode
    # has no formula for; give it the counter's own SDPA formula (full, non-causal attention).
    cpu_sdpa = {
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *args, out_shape=None, **kwargs: (
            flop_counter.sdpa_flop_count(q, k, v)
        )
    }
    prompt = torch.randint(0, cfg.vocab_size, (2, 32))
    step = torch.randint(0, cfg.vocab_size, (2, 1))
    with torch.no_grad():
        cache = transformers.DynamicCache(config=cfg)
        model(prompt, use_cache=True, **{cache_kw: cache})
        runs = [
            ("prefill", lambda: model(prompt, use_cache=True)),
            ("decode", lambda: model(step, use_cache=True, **{cache_kw: copy.deepcopy(cache)})),
        ]
        for label, run in runs:
            with flop_counter.FlopCounterMode(display=False, custom_mapping=cpu_sdpa) as counter:
                run()
            with torch.profiler.profile(record_shapes=True) as prof:
                run()
            path = tmp_path / f"{label}.json"
            prof.export_chrome_trace(str(path))
            yield label, counter.get_total_flops(), json.loads(path.read_text())["traceEvents"]


def _full_minus_causal(cost_args: dict) -> int:
    """FLOPs the counter's non-causal SDPA convention adds over a causal SDPA call."""
    q, k, v = cost_args["Input Dims"][:3]
    causal = cost_args["Concrete Inputs"][5] == "True"
    if not causal:
        return 0
    (b, hq, lq, d), lk, dv = q, k[2], v[3]
    return 2 * b * hq * (d + dv) * (lq * lk - _pairs(lq, lk, "top_left"))


def test_matrix_flops_match_flop_counter_on_a_llama(tmp_path):
    for label, counted, events in _llama_runs(tmp_path):
        priced = _outermost_priced(events)
        matrix = [(e, c) for e, c in priced if isinstance(c, OpCost) and c.unit == MATRIX]
        unpriced = [(e["name"], c.reason) for e, c in priced if isinstance(c, NoCost)]
        ours = sum(c.flops for _, c in matrix)
        sdpa = [e for e, _ in matrix if e["name"] == "aten::scaled_dot_product_attention"]
        # FlopCounterMode counts SDPA as full attention; we count the causal pairs only.
        expected = counted - sum(_full_minus_causal(e["args"]) for e in sdpa)
        print(
            f"\n{label}: FlopCounterMode {counted:,} FLOPs, causal-adjusted {expected:,}, "
            f"op_cost {ours:,} ({ours / expected - 1:+.3%}); priced "
            f"{sorted({e['name'] for e, _ in matrix})}, unpriced {sorted(set(unpriced))[:6]}"
        )
        # 2 layers x 7 projections + LM head, and one attention per layer: nothing counted twice.
        assert sorted(e["name"] for e, _ in matrix).count("aten::linear") == 15
        assert len(sdpa) == 2
        assert math.isclose(ours, expected, rel_tol=0.02)


# ---------------------------------------------------------------- real trace records


def _events(key: str) -> list[dict]:
    with gzip.open(real_trace_path(key), "rb") as f:
        doc = msgspec.json.decode(f.read())
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.parametrize(
    "key", ["h100_hf", "mi300x_extend", "b300_moe", "a100_particle", "rtx4080_nanovllm", "v100_ddp"]
)
def test_real_trace_records_price_or_say_why(key):
    """Every op record of a real trace gets a cost or a reason, never an exception;
    GEMMs and attention with recorded shapes always get a cost."""
    events = [e for e in _events(key) if str(e.get("cat", "")).lower() in ("cpu_op", "operator")]
    op_cost_json.cache_clear()
    reasons: dict[str, int] = {}
    for e in events:
        args = e.get("args", {})
        result = op_cost_json(
            e["name"],
            json.dumps(args.get("Input Dims")) if "Input Dims" in args else None,
            json.dumps(args.get("Input type")) if "Input type" in args else None,
            json.dumps(args.get("Concrete Inputs")) if "Concrete Inputs" in args else None,
        )
        if isinstance(result, NoCost) and has_model(e["name"]):
            reasons[result.reason[:90]] = reasons.get(result.reason[:90], 0) + 1
        if e["name"] in (
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::linear",
            "aten::matmul",
            "aten::scaled_dot_product_attention",
            "aten::_flash_attention_forward",
        ):
            if args.get("Input Dims"):
                assert isinstance(result, OpCost), (e["name"], args, result)
                assert result.flops > 0 and result.bytes > 0
    info = op_cost_json.cache_info()
    print(f"\n{key}: {len(events)} op records, {info.currsize} distinct shapes")
    for reason, count in sorted(reasons.items(), key=lambda r: -r[1]):
        print(f"    {count:6d} x cost unknown: {reason}")


def test_cumsum_by_hand():
    """aten::cumsum(self, dim, dtype): one add per element, input read and a same-shaped output
    written; an int32 input sums into int64 (torch.cumsum promotes integral inputs, as torch.sum
    does): 32 int32 positions -> 32 FLOPs, 128 + 256 bytes. Bug: cumsum left "no cost model"
    (the SGLang steps' position cumsums, which TraceLens prices), or priced at the input's width."""
    got = op_cost_json(
        "aten::cumsum", json.dumps([[32], [], []]), json.dumps(["int", "Scalar", ""]), json.dumps(["", "0", ""])
    )
    assert (got.flops, got.bytes, got.dtype) == (32, 32 * 4 + 32 * 8, "int64")
    bf16 = op_cost_json(
        "aten::cumsum",
        json.dumps([[4, 8], [], []]),
        json.dumps(["c10::BFloat16", "Scalar", ""]),
        json.dumps(["", "1", ""]),
    )
    assert (bf16.flops, bf16.bytes) == (32, 32 * 2 * 2)
