"""The model path: the registry, config reading, per-component step costs, and pricing
serving traces by the model (known bound, bounds per phase, cross-checks with shapes)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import read_real, real_trace_path

from tracekit.analysis import analyze
from tracekit.analysis.pricing import op_args, op_costs
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.models import costs as mc
from tracekit.models import from_config, load_model, registry_entries, with_weights
from tracekit.models.config import FULL, LINEAR, MLA, MOE, SLIDING, expected_experts

# --- the registry and config reading ------------------------------------------------------


def test_every_registry_entry_reads_and_has_a_source():
    keys = set()
    for e in registry_entries():
        assert e["key"] not in keys and e["source"].startswith("https://")
        keys.add(e["key"])
        m = from_config(e["config"], e["key"], e["source"])
        assert m.n_layers > 0 and m.hidden > 0 and mc.parameters(m) > 0
    for wanted in (
        "llama-3.1-8b-instruct",
        "qwen3-8b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "deepseek-v3",
        "gpt-oss-120b",
        "gpt-oss-20b",
        "mixtral-8x7b-instruct-v0.1",
        "gemma-3-27b-it",
        "qwen3.5-27b",
    ):
        assert wanted in keys


@pytest.mark.parametrize(
    "key, published",
    [
        # Totals the model cards publish (decoder, embeddings and LM head; norms and biases aside).
        ("llama-3.1-8b-instruct", 8.03e9),
        ("llama-3.1-70b-instruct", 70.6e9),
        ("qwen3-8b", 8.19e9),
        ("qwen3-30b-a3b", 30.5e9),
        ("qwen3-235b-a22b", 235e9),
        ("gpt-oss-120b", 116.8e9),
        ("gpt-oss-20b", 20.9e9),
        ("deepseek-v3", 671e9),
        ("mixtral-8x7b-instruct-v0.1", 46.7e9),
        ("qwen3.5-27b", 27e9),
    ],
)
def test_parameter_counts_match_the_model_cards(key, published):
    assert mc.parameters(load_model(key)) == pytest.approx(published, rel=0.01)


def test_layer_kinds_experts_and_precision_are_read():
    q35 = load_model("qwen3.5-27b")  # hybrid: gated DeltaNet every layer but each 4th
    assert (q35.count(attention=LINEAR), q35.count(attention=FULL)) == (48, 16)
    assert q35.attn_output_gate and q35.rotary_fraction == 0.25
    oss = load_model("openai/gpt-oss-120b")  # by its Hugging Face id
    assert (oss.count(attention=SLIDING), oss.count(attention=FULL)) == (18, 18)
    assert {layer.window for layer in oss.layers if layer.attention == SLIDING} == {128}
    assert (oss.experts, oss.top_k) == (128, 4)
    assert oss.weight("experts").name == "mxfp4" and oss.weight("attention").name == "bf16"
    assert oss.weight("lm_head").name == "bf16"
    ds = load_model("DeepSeek-V3")
    assert ds.count(attention=MLA) == 61 and ds.count(mlp=MOE) == 58  # first 3 layers dense
    assert ds.weight("experts").name == "fp8" and ds.shared_intermediate == 2048
    gemma = load_model("gemma-3-27b-it")  # multimodal: the decoder is text_config
    assert gemma.count(attention=SLIDING) == 52 and gemma.count(attention=FULL) == 10 and gemma.tied_embeddings
    mixed = load_model("qwen3.6-27b-nvfp4")  # modelopt mixed precision
    assert mixed.weight("attention").name == "fp8" and mixed.weight("mlp").name == "nvfp4-w4a16"


def test_a_local_config_json_or_checkpoint_folder(tmp_path):
    cfg = {
        "model_type": "llama",
        "hidden_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    }
    folder = tmp_path / "my-checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    for name in (str(folder), str(folder / "config.json")):
        m = load_model(name)
        assert m.n_layers == 4 and m.weight("mlp").name == "int4" and m.weight("lm_head").name == "bf16"
        assert "config.json at" in m.source


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "t5", "is_encoder_decoder": True, "hidden_size": 8}, "encoder-decoder"),
        ({"model_type": "llama", "num_hidden_layers": 2}, "hidden_size"),
        (
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "vocab_size": 10,
                "intermediate_size": 64,
                "quantization_config": {"quant_method": "hqq"},
            },
            "'hqq'",
        ),
        (
            {
                "model_type": "x",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "vocab_size": 10,
                "intermediate_size": 64,
                "layer_types": ["mamba", "full_attention"],
            },
            "'mamba'",
        ),
        (
            {
                "model_type": "x",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "vocab_size": 10,
                "num_local_experts": 8,
            },
            "num_experts_per_tok",
        ),
    ],
)
def test_configs_tracekit_does_not_understand_are_one_sentence(config, message):
    with pytest.raises(TracekitError) as e:
        from_config(config, "m", "test")
    assert message in e.value.message and "\n" not in e.value.message


def test_unknown_model_names_are_one_sentence_with_suggestions(tmp_path):
    with pytest.raises(TracekitError) as e:
        load_model("qwen3-9b")
    assert "tracekit models" in e.value.message and "qwen3-8b" in e.value.message
    (tmp_path / "empty").mkdir()
    with pytest.raises(TracekitError, match="no config.json"):
        load_model(str(tmp_path / "empty"))


def test_weights_override_quantises_the_linear_layers_only():
    m = with_weights(load_model("qwen3.5-27b"), "nvfp4")
    assert m.weight("mlp").name == "nvfp4" and m.weight("linear_attention").name == "nvfp4"
    assert m.weight("lm_head").name == "bf16" and m.weight("router").name == "bf16"
    with pytest.raises(TracekitError):
        with_weights(m, "fp3")


# --- step costs -------------------------------------------------------------------------


def _side(tokens, requests, kv=None, pairs=None):
    return mc.Side(float(requests), float(tokens), kv, pairs, float(requests))


def test_decode_reads_every_weight_once():
    m = load_model("llama-3.1-8b-instruct")
    costs = mc.step_costs(m, _side(1, 1, kv=1000.0, pairs=1000.0))
    weights = costs["linear"].bytes + costs["lm_head"].bytes
    # 8.03B parameters less the embedding table (a gather, not a GEMM), 2 bytes each.
    assert weights == pytest.approx((8.03e9 - 128256 * 4096) * 2, rel=0.01)
    # Attention reads the 1000 cached keys and values of 8 KV heads of 128 dims in 32 layers.
    assert costs["attention"].bytes == pytest.approx(32 * 1000 * 8 * 256 * 2, rel=0.01)
    assert costs["linear"].flops == pytest.approx(2 * (8.03e9 - 2 * 128256 * 4096), rel=0.01)


def test_tensor_parallel_splits_the_work_per_rank():
    m = load_model("llama-3.1-70b-instruct")
    one = mc.step_costs(m, _side(512, 1, kv=512.0, pairs=512 * 513 / 2))
    eight = mc.step_costs(m, _side(512, 1, kv=512.0, pairs=512 * 513 / 2), tp=8)
    assert eight["linear"].flops == pytest.approx(one["linear"].flops / 8, rel=0.01)
    assert eight["attention"].flops == pytest.approx(one["attention"].flops / 8, rel=0.01)
    # Two all-reduces per layer plus the embedding's, each moving 2 (N-1)/N of T x hidden per rank.
    assert eight["communication"].bytes == pytest.approx(
        (2 * 80 + 1) * 2 * 7 / 8 * 512 * 8192 * 2 + 7 / 8 * 128256 * 2, rel=0.01
    )
    assert "communication" not in one


def test_experts_touched_follow_uniform_routing():
    assert expected_experts(128, 8, 1) == pytest.approx(8)
    assert expected_experts(128, 8, 16) == pytest.approx(128 * (1 - (1 - 8 / 128) ** 16))
    assert expected_experts(128, 8, 10_000) == pytest.approx(128)
    m = load_model("qwen3-30b-a3b")
    small = mc.step_costs(m, _side(1, 1, kv=10.0, pairs=10.0))["experts"].bytes
    big = mc.step_costs(m, _side(4096, 4096, kv=4096.0, pairs=4096.0))["experts"].bytes
    per_expert = 3 * 2048 * 768 * 2 * 48
    assert small == pytest.approx(8 * per_expert, rel=0.05) and big > 120 * per_expert


def test_sliding_windows_cap_pairs_and_keys():
    pairs, keys = mc.attention_geometry(_side(1, 1, kv=5000.0, pairs=5000.0), 128)
    assert (pairs, keys) == (128, 128)
    pairs, keys = mc.attention_geometry(_side(1000, 1, kv=1000.0, pairs=1000 * 1001 / 2), 128)
    assert pairs == pytest.approx(128 * 129 / 2 + (1000 - 128) * 128) and keys == 1000
    assert mc.attention_geometry(_side(16, 16), None) is None  # keys not stated


# A small Llama with long sequences, where attention is most of the work: 2 layers, hidden 128,
# 4 query heads and 2 KV heads of 32 dims, MLP 256, vocabulary 1000.
_LLAMA = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
)
_LONG = 2048


def _flop_counter_runs():
    """(label, FlopCounterMode's FLOPs, SDPA full-attention FLOPs it counted, model Side) for a
    2048-token prefill (logits of the last token only) and a decode step over a 2048-token KV cache."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import copy
    import inspect

    from torch.utils import flop_counter

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**_LLAMA, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).eval()
    # On the CPU, SDPA runs _scaled_dot_product_flash_attention_for_cpu, which FlopCounterMode
    # has no formula for; give it the counter's own SDPA formula (full, non-causal attention).
    sdpa = {
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, out_shape=None, **kw: (
            flop_counter.sdpa_flop_count(q, k, v)
        )
    }
    params = inspect.signature(model.forward).parameters
    logits_kw = "logits_to_keep" if "logits_to_keep" in params else "num_logits_to_keep"
    cache_kw = "cache" if "cache" in params else "past_key_values"
    ids = torch.randint(0, 1000, (1, _LONG))
    step = torch.randint(0, 1000, (1, 1))
    layers, hq, d = 2, 4, 32
    with torch.no_grad():
        with flop_counter.FlopCounterMode(display=False, custom_mapping=sdpa) as counter:
            model(ids, use_cache=False, **{logits_kw: 1})
        full = layers * 2 * hq * _LONG * _LONG * (d + d)  # SDPA counted as every query x every key
        yield "prefill 2048", counter.get_total_flops(), full, mc.Side(1, _LONG, _LONG, _LONG * (_LONG + 1) / 2, 1)
        cache = (
            transformers.DynamicCache(config=cfg)
            if "config" in inspect.signature(transformers.DynamicCache).parameters
            else transformers.DynamicCache()
        )
        model(ids, use_cache=True, **{cache_kw: cache})
        with flop_counter.FlopCounterMode(display=False, custom_mapping=sdpa) as counter:
            model(step, use_cache=True, **{cache_kw: copy.deepcopy(cache)})
        keys = _LONG + 1  # the new token attends to the 2048 cached keys and itself
        yield (
            "decode, 2048 KV",
            counter.get_total_flops(),
            layers * 2 * hq * keys * (d + d),
            mc.Side(1, 1, keys, keys, 1),
        )


def test_analytic_flops_match_flop_counter_on_long_sequences():
    """The model's matrix FLOPs against torch's FlopCounterMode on the same Llama, for a 2048-token
    prefill (SDPA's full count adjusted to causal pairs) and a decode step over a 2048-token KV
    cache. Attention is over half of the FLOPs in both (2*Hq*pairs*(Dqk+Dv) per layer), so at a 1%
    tolerance this fails if the attention formula drops the value head dimension, miscounts pairs or
    keys, or any projection's FLOPs are off."""
    spec = from_config(_LLAMA | {"model_type": "llama", "torch_dtype": "float32"}, "llama", "test")
    layers, hq, d = 2, 4, 32
    for label, counted, full, side in _flop_counter_runs():
        causal = layers * 2 * hq * side.pairs * (d + d)
        expected = counted - full + causal
        costs = mc.step_costs(spec, side, act_bytes=4.0)
        ours = sum(costs[c].flops for c in ("linear", "lm_head", "attention"))
        assert ours == pytest.approx(expected, rel=0.01), (label, ours, expected)
        assert costs["attention"].flops == pytest.approx(causal, rel=1e-9), label
        # Attention carries most of the work here (by FlopCounterMode's count), so a wrong
        # attention count cannot hide in the tolerance.
        assert causal / expected > 0.5, label


# --- pricing real serving traces by the model --------------------------------------------

SERVING = [
    # (trace, model, weights)
    ("b300_qwen3_moe", "qwen3-30b-a3b", None),
    ("mi300x_qwen3_moe", "qwen3-30b-a3b", None),
    ("mi300x_extend", "qwen3-8b", None),
    ("mi300x_decode", "qwen3-8b", None),
    ("b200_vllm", "gpt-oss-120b", None),
    ("gb10_vllm", "qwen3.5-27b", "nvfp4"),
]
_CACHE: dict = {}


def _priced(key, model, weights, costs="auto"):
    if (key, costs) not in _CACHE:
        _CACHE[key, costs] = analyze(read_real(key), model=model, weights=weights, costs=costs)
    return _CACHE[key, costs]


@pytest.mark.parametrize("key, model, weights", SERVING)
def test_the_model_gives_nearly_all_serving_kernel_time_a_bound(key, model, weights):
    a = _priced(key, model, weights)
    w = a.work
    known = float(w.loc[w["bound"] != "unknown", "dur_ns"].sum() / w["dur_ns"].sum())
    assert known >= 0.90, (key, known)
    d = a.to_dict()
    for phase, p in d["phases"].items():
        assert p["mfu"] is not None and p["mbu"] is not None, (phase, p["mfu_reason"], p["mbu_reason"])
        assert "FLOPs from" in p["mfu_basis"] and "bytes from" in p["mbu_basis"]
        gemm = {b: ms for c, by in p["by_category_bound"].items() if c in ("gemm", "moe") for b, ms in by.items()}
        if phase == "decode":
            assert gemm.get("memory", 0) >= 0.9 * sum(gemm.values()), (key, gemm)
        if phase == "prefill":
            dense = p["by_category_bound"]["gemm"]
            assert dense.get("compute", 0) >= max(dense.get("memory", 0), dense.get("unknown", 0)), (key, dense)
    # No roof fraction above 100% is shown as fact.
    fractions = w["roof_fraction"].dropna()
    assert (fractions <= 1.02).all(), w.loc[fractions.index[fractions > 1.02], ["name", "component", "cost_source"]]


def test_without_a_model_serving_kernels_have_unknown_cost_and_the_report_says_what_to_pass():
    d = analyze(read_real("b300_qwen3_moe")).to_dict()
    assert d["model"] is None
    unknown = next(f for f in d["findings"] if f["id"] == "unknown-cost")
    assert "--model" in unknown["text"]
    assert d["phases"]["decode"]["cost_source_ms"]["none"] > 0.9 * d["phases"]["decode"]["kernel_ms"]


@pytest.mark.parametrize(
    "key, model",
    [("h100_hf", "qwen1.5-0.5b-chat"), ("mi300x_extend", "qwen3-8b"), ("b200_vllm", "gpt-oss-120b")],
)
def test_model_costs_agree_with_shape_costs_where_both_price(key, model):
    shapes = _priced(key, model, None, "shapes").work
    by_model = _priced(key, model, None, "model").work
    assert (by_model["cost_source"].isin(["model", "none"])).all()
    for step in sorted(set(shapes["step"][shapes["step"] >= 0])):
        both = ((shapes["step"] == step) & shapes["flops"].notna() & by_model["flops"].notna()).to_numpy()
        covered = shapes["dur_ns"][both].sum() / shapes["dur_ns"][shapes["step"] == step].sum()
        assert covered > 0.5, (key, step, covered)
        f_s, f_m = shapes["flops"][both].sum(), by_model["flops"][both].sum()
        b_s, b_m = shapes["bytes"][both].sum(), by_model["bytes"][both].sum()
        assert f_m == pytest.approx(f_s, rel=0.05), (key, step)
        assert b_m == pytest.approx(b_s, rel=0.25), (key, step)


def test_a_collected_run_is_priced_by_its_recorded_model_and_agrees_with_its_shapes(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit import read_trace
    from tracekit.collect import CollectOptions, collect

    result = collect(
        CollectOptions(
            preset="tiny",
            batch_size=2,
            prompt_len=32,
            new_tokens=3,
            output=str(tmp_path / "run"),
            progress=False,
            threads=1,
            calibrate=False,
            seed=0,
            force=True,
        )
    )
    trace = read_trace(result.trace_path)
    shapes, by_model = analyze(trace, costs="shapes"), analyze(trace, costs="model")
    assert by_model.model["chosen_by"].startswith("the config tracekit collect recorded")
    for step in range(len(shapes.steps)):
        s, m = shapes.work, by_model.work
        both = ((s["step"] == step) & s["flops"].notna() & m["flops"].notna() & (s["unit"] == "matrix")).to_numpy()
        assert both.any()
        assert m["flops"][both].sum() == pytest.approx(s["flops"][both].sum(), rel=0.05), step
        assert m["bytes"][both].sum() == pytest.approx(s["bytes"][both].sum(), rel=0.25), step


def test_mixed_steps_split_by_the_model():
    """A mixed step's model split against hand numbers from its annotation's own counts
    (context_1: one request of sq=512 new tokens, sk=2048 keys, sqsq=262144, sqsk=1048576;
    generation_4: 4 tokens over sk=4004 keys). Token-proportional work goes 512/516 to prefill;
    full attention by each side's FLOPs + bytes (Qwen3.5-27B: 24 query and 4 KV heads of 256 dims,
    FP8 KV cache). Fails if the prefill and decode shares are swapped (the prefill part would be
    ~1% of the step instead of ~99%), if attention is split by tokens, or if the parts do not add
    up to the step's busy time."""
    from test_serving import MIXED, _with_annotation

    a = analyze(_with_annotation(read_real("gb10_vllm"), 3, MIXED), model="qwen3.5-27b", weights="nvfp4")
    step = a.to_dict()["steps"][3]
    split = step["split"]
    assert "model" in split["basis"]
    assert (split["prefill"]["tokens"], split["decode"]["tokens"]) == (512, 4)
    by_tokens = 512 / 516
    # Causal pairs of the chunk: sqsk - (sqsq - sq) / 2 = 1048576 - (262144 - 512) / 2 = 917,760
    # (512 queries over 1,536 cached keys, and causal within the chunk); decode: one per key, 4,004.
    hq, hkv, d = 24, 4, 256 + 256  # Dqk + Dv
    pre_pairs, dec_pairs = 1048576 - (262144 - 512) / 2, 4004
    pre = 2 * hq * pre_pairs * d + (2048 * hkv * d * 1 + 512 * hq * d * 2)  # FLOPs + KV (1 B) and q/out bytes (2 B)
    dec = 2 * hq * dec_pairs * d + (4004 * hkv * d * 1 + 4 * hq * d * 2)
    by_attention = pre / (pre + dec)
    assert by_attention == pytest.approx(0.995295, abs=1e-6)
    w = a.work[a.work["step"] == 3]
    comp, share, dur = w["component"].to_numpy(dtype=object), w["prefill_share"].to_numpy(), w["dur_ns"].to_numpy()
    attention, linear_attention = comp == "attention", comp == "linear_attention"
    tokenwise = ~attention & ~linear_attention
    assert attention.sum() == 16 and tokenwise.sum() > 1000
    off = share[tokenwise][np.abs(share[tokenwise] - by_tokens) > 1e-12]
    assert not len(off), (
        f"token-proportional work given prefill shares {sorted({float(round(x, 6)) for x in off})}, not 512/516"
    )
    assert np.abs(share[attention] - by_attention).max() < 1e-6, (share[attention], by_attention)
    # Gated-DeltaNet work: mostly per token (a little more per token when chunked), with one
    # recurrent state per request (1 prefill, 4 decode): prefill's share is near the tokens'.
    assert ((share[linear_attention] > 0.95) & (share[linear_attention] < 1)).all()
    # The step's busy time divides as its kernel time does (linear attention's 2% of the time bounded).
    busy = step["gpu_busy_ms"]
    known = (dur[tokenwise] * by_tokens).sum() + (dur[attention] * by_attention).sum()
    lo = busy * (known + 0.95 * dur[linear_attention].sum()) / dur.sum()
    hi = busy * (known + dur[linear_attention].sum()) / dur.sum()
    assert lo <= split["prefill"]["gpu_ms"] <= hi
    assert split["prefill"]["gpu_ms"] + split["decode"]["gpu_ms"] == pytest.approx(busy)


def test_kernel_precision_and_a_wrong_model_are_said():
    # The trace's GEMMs are NVFP4; --weights bf16 says otherwise, and the names contradict it.
    a = analyze(read_real("gb10_vllm"), model="qwen3.5-27b", weights="bf16")
    ids = {f.id: f.text for f in a.findings}
    assert "--weights" in ids["model-precision"] and "fp4" in ids["model-precision"]
    assert "model-undescribed" in ids  # bf16 weights cannot be read that fast: left unknown, not >100%
    # With the config silent on quantisation, the kernels' names price the weights, and say so.
    silent = {f.id: f for f in analyze(read_real("gb10_vllm"), model="qwen3.5-27b").findings}
    assert silent["model-precision"].severity == "info" and "nvfp4" in silent["model-precision"].text
    stated = {f.id: f for f in analyze(read_real("gb10_vllm"), model="qwen3.5-27b", weights="nvfp4").findings}
    assert silent["model-undescribed"].text == stated["model-undescribed"].text != ids["model-undescribed"]
    wrong = analyze(read_real("b200_vllm"), model="qwen3-30b-a3b")  # 48 layers; gpt-oss-120b has 36
    assert "model-mismatch" in {f.id for f in wrong.findings}


def test_the_report_says_where_costs_came_from():
    from tracekit.report import render

    a = _priced("b200_vllm", "gpt-oss-120b", None)
    d = a.to_dict()
    sources = d["phases"]["prefill"]["cost_source_ms"]
    assert sources["model"] > 0 and sources["shapes"] > 0
    assert sum(sources.values()) == pytest.approx(d["phases"]["prefill"]["kernel_ms"])
    assert {r["cost_source"] for r in d["top_kernels"]["prefill"]} <= {"model", "shapes", "none"}
    replayed = _priced("b300_qwen3_moe", "qwen3-30b-a3b", None).to_dict()
    assert {r["cost_source"] for r in replayed["top_kernels"]["decode"]} >= {"model"}
    html = render(a, "html")
    assert "Where the FLOPs and bytes came from" in html and "gpt-oss-120b" in html
    assert d["model"]["tp"] == 8 and "distributedInfo" in d["model"]["tp_source"]
    assert d["model"]["kv_cache_dtype"] == "fp8"  # the FMHA kernels read an FP8 cache
    points = d["roofline"]["prefill"]["points"]
    assert any(p["cost_source"] == "model" and p["label"].startswith("model: ") for p in points)


def test_collectives_are_interconnect_bound_against_the_link():
    w = _priced("b200_vllm", "gpt-oss-120b", None).work
    comm = w[w["category"] == "communication"]
    assert (comm["bound"] == "interconnect").mean() > 0.95
    assert comm["peak_bw"].dropna().eq(900e9).all()  # B200: NVLink 5, 900 GB/s per direction


# --- engine custom ops priced from their shapes ---------------------------------------------


def _price(op, dims, types, concrete=None, ctx=None):
    d, t, c = json.dumps(dims), json.dumps(types), json.dumps(concrete) if concrete else None
    if ctx is not None:
        return op_costs.price_in_context(op, d, t, c, ctx)
    return op_costs.op_cost_json(op, d, t, c)


def test_vllm_custom_ops_from_shapes():
    bf = "c10::BFloat16"
    norm = _price("_C::fused_add_rms_norm", [[888, 2880], [888, 2880], [2880], []], [bf, bf, bf, "Scalar"])
    assert norm.bytes == 4 * 888 * 2880 * 2 + 2880 * 2
    quant = _price("_C::static_scaled_fp8_quant", [[888, 512], [888, 512], []], ["c10::Float8_e4m3fn", bf, "float"])
    assert quant.bytes == 888 * 512 * 2 + 888 * 512 + 4  # bf16 in, fp8 out, one fp32 scale
    cache = _price(
        "_C_cache_ops::reshape_and_cache_flash",
        [[888, 1, 64], [888, 1, 64], [100, 16, 1, 64], [100, 16, 1, 64], [888], [], [], []],
        [bf, bf, "unsigned char", "unsigned char", "long int", "", "float", "float"],
    )
    assert cache.bytes == 2 * 888 * 64 * 2 + 888 * 8 + 2 * 888 * 64 * 1  # written at the FP8 cache's 1 byte
    rope = _price(
        "_C::rotary_embedding",
        [[888], [888, 512], [888, 64], [], [131072, 64], []],
        ["long int", bf, bf, "Scalar", bf, "Scalar"],
        ["", "", "", "64", "", "True"],
    )
    assert rope.bytes >= 2 * 888 * (512 + 64) * 2


def test_custom_ops_that_need_the_run():
    bf = "c10::BFloat16"
    ar = [[[888, 2880], []], [bf, ""]]
    assert "one rank" in _price("c10d::allreduce_", *ar, ctx=op_args.OpContext(tp=1)).reason
    eight = _price("c10d::allreduce_", *ar, ctx=op_args.OpContext(tp=8))
    assert eight.bytes == pytest.approx(2 * 7 / 8 * 888 * 2880 * 2)
    attn = [
        [[888, 8, 64], [888, 1, 64], [888, 1, 64], [888, 8, 64], [], [], []],
        ["c10::Float8_e4m3fn", bf, bf, bf, "", "", ""],
    ]
    missing = _price("vllm::unified_attention_with_output", *attn, ctx=op_args.OpContext(tp=8))
    assert "pairs" in missing.reason
    priced = _price(
        "vllm::unified_attention_with_output",
        *attn,
        ctx=op_args.OpContext(tp=8, pairs=394716.0, keys=888.0, kv_bytes=1.0),
    )
    assert priced.flops == 2 * 8 * 394716 * 128 and priced.dtype == "fp8"
    moe = [[[888, 3072], [888, 128], []], [bf, bf, ""]]
    assert "--model" in _price("vllm::moe_forward", *moe, ctx=op_args.OpContext(tp=8)).reason
    with_model = _price("vllm::moe_forward", *moe, ctx=op_args.OpContext(tp=8, model=load_model("gpt-oss-120b")))
    assert with_model.flops == pytest.approx(2 * 888 * 4 * 3 * 2880 * 2880 / 8, rel=0.05)


# --- graph-capture traces that do not name their kernels ------------------------------------


def test_capture_without_kernel_names_is_matched_by_order():
    from tracekit.analysis.pricing.capture import with_capture
    from tracekit.analysis.steps.segment import segment

    replay, capture = read_real("mi300x_decode"), read_real("mi300x_capture")
    seg = segment(replay)
    by_name = with_capture(replay, seg.work, capture, seg.steps)
    cuda_like = dataclasses.replace(capture, runtime=capture.runtime.assign(kernel=None))  # as CUDA writes them
    by_order = with_capture(replay, seg.work, cuda_like, seg.steps)
    assert "by position in the captured graph" in by_order.note
    replayed = seg.work["graph"].to_numpy()
    assert (by_order.op[replayed] >= 0).all()
    assert (by_order.op[replayed] == by_name.op[replayed]).mean() > 0.99


# --- the command line ---------------------------------------------------------------------


def test_models_command_lists_the_registry_and_shows_one():
    runner = CliRunner()
    res = runner.invoke(main, ["models", "--json"])
    assert res.exit_code == 0
    keys = {r["key"] for r in json.loads(res.output)}
    assert keys == {e["key"] for e in registry_entries()}
    res = runner.invoke(main, ["models", "--show", "gpt-oss-120b"])
    assert res.exit_code == 0 and "mxfp4" in res.output and "huggingface.co" in res.output


def test_report_with_a_model_and_bad_model_options(tmp_path):
    from conftest import real_trace_path

    runner = CliRunner()
    trace = str(real_trace_path("b300_qwen3_moe"))
    out = tmp_path / "r.json"
    res = runner.invoke(main, ["report", trace, "--model", "qwen3-30b-a3b", "--tp", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["model"]["name"] == "Qwen3-30B-A3B" and data["model"]["tp_source"] == "--tp"
    for args, message in (
        (["--model", "no-such-model"], "registry"),
        (["--model", "qwen3-8b", "--tp", "0"], "--tp"),
        (["--weights", "nvfp4"], "--model"),
        (["--model", "qwen3-8b", "--weights", "fp3"], "fp3"),
    ):
        res = runner.invoke(main, ["report", trace, "-o", str(tmp_path / "x.json"), *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)
        assert "Traceback" not in res.output
    assert not (tmp_path / "x.json").exists()


def test_compare_prices_both_runs_with_the_model(tmp_path):
    from conftest import real_trace_path

    res = CliRunner().invoke(
        main,
        [
            "compare",
            str(real_trace_path("b300_qwen3_moe")),
            str(real_trace_path("mi300x_qwen3_moe")),
            "--model",
            "qwen3-30b-a3b",
            "-f",
            "json",
            "-o",
            str(tmp_path / "c.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    c = json.loads((tmp_path / "c.json").read_text())
    mbu = next(h for h in c["headline"] if h["key"] == "decode_mbu")
    assert mbu["before"] is not None and mbu["after"] is not None
    assert not math.isnan(mbu["before"])
    assert np.isfinite([mbu["before"], mbu["after"]]).all()


def test_an_sglang_extend_step_without_sum_q2_prices_attention_at_one_length_as_a_lower_bound(tmp_path):
    """The MI300X SGLang extend trace with its vLLM-style execute_... annotation removed: only
    ``step[EXTEND bs=15 toks=15360]`` remains, which does not say how the 15,360 tokens split.
    Hand arithmetic: at one length (1,024 each, the fewest pairs any split gives) a request
    scores q(q+1)/2 pairs, so 15 * 1024 * 1025 / 2 = 7,872,000 pairs; Qwen3-8B's 36 layers of
    32 query heads x (128 + 128) dims do 2 * 32 * pairs * 256 FLOPs each. The removed annotation
    itself stated sqsq = 15 * 1024², so the annotated trace must give the same figure.
    Bug caught: attention priced as unknown (the old behaviour: 20 ms of kernel time without a
    bound), a split other than one length, or the lower bound not said."""
    import gzip

    from tracekit import read_trace

    raw = json.loads(gzip.open(real_trace_path("mi300x_extend")).read())
    raw["traceEvents"] = [e for e in raw["traceEvents"] if not str(e.get("name", "")).startswith("execute_")]
    path = tmp_path / "sglang_only.json"
    path.write_text(json.dumps(raw))
    expected = 36 * 2 * 32 * (15 * 1024 * 1025 / 2) * (128 + 128)
    for trace, estimate in ((read_trace(path), "lower"), (read_real("mi300x_extend"), None)):
        a = analyze(trace, model="qwen3-8b", costs="model")
        w = a.work
        att = (w["component"] == "attention") & (w["step"] == 0)
        assert att.any() and w.loc[att, "flops"].notna().all()
        assert w.loc[att, "flops"].sum() == pytest.approx(expected, rel=1e-9)
        assert set(w.loc[att, "estimate"].tolist()) == {estimate}
        if estimate:
            assert "one length" in a.to_dict()["model"]["estimates"]["attention"]


def test_attention_estimated_both_ways_in_one_trace_states_both_bases():
    """The RTX 3090 vLLM trace's new requests (execute_new_2_cached_0: 12 tokens, no keys stated)
    make a prefill whose attention is a lower bound, and decode steps whose keys nothing describes
    an upper bound: here each decode step runs a fifth request the trace never admitted (as a
    trace begun mid-run), so the run's history (steps.history) cannot give their keys. Bug
    caught: the JSON's one basis per component (the first step's) said "lower bound" for the
    decode kernels too."""
    import dataclasses

    trace = read_real("rtx3090_vllm")
    ann = trace.annotations
    names = ann["name"].astype(str).replace("execute_new_0_cached_4", "execute_new_0_cached_5")
    trace = dataclasses.replace(trace, annotations=ann.assign(name=names.astype("category")))
    a = analyze(trace, model="gpt-oss-20b")
    w = a.work
    att = w[w["component"] == "attention"]
    assert set(att.loc[att["phase"] == "prefill", "estimate"]) == {"lower"}
    assert set(att.loc[att["phase"] == "decode", "estimate"]) == {"upper"}
    basis = a.to_dict()["model"]["estimates"]["attention"]
    assert "lower bound" in basis and "upper bound" in basis
