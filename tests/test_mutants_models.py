"""Exact step costs of tiny hand-built models: each figure worked out by hand from the cost
conventions in tracekit/models/costs.py's docstring (a multiply-add is 2 FLOPs, each weight and
activation moved once), or from a published parameter count. These kill survivors of the
mutation campaign (benchmarks/mutation.py) that the 1%-tolerance tests on real models let live."""

from __future__ import annotations

import pytest

from tracekit.models import costs as mc
from tracekit.models import from_config, load_model
from tracekit.models.config import DENSE, FULL, LINEAR, MLA, MOE, SLIDING, Layer, ModelSpec


def _spec(**kw) -> ModelSpec:
    base = dict(
        name="tiny",
        source="hand-built",
        model_type="test",
        hidden=64,
        vocab=100,
        heads=4,
        kv_heads=4,
        head_dim=16,
        v_head_dim=16,
        intermediate=128,
        layers=(Layer(FULL, DENSE),),
    )
    return ModelSpec(**{**base, **kw})


def test_gpt2_parameters_match_the_published_count():
    """Fails if an ungated MLP (GPT-2's fc/proj) is counted as gated (two up-projections)."""
    m = _spec(
        hidden=768,
        vocab=50257,
        heads=12,
        kv_heads=12,
        head_dim=64,
        v_head_dim=64,
        intermediate=3072,
        layers=(Layer(FULL, DENSE),) * 12,
        gated_mlp=False,
        tied_embeddings=True,
    )
    # GPT-2 small: 124,439,808 parameters, less its 1024 x 768 position embeddings and the
    # 121,344 biases and norm weights that tracekit does not price.
    assert mc.parameters(m) == 124_439_808 - 1024 * 768 - 121_344


def test_kv_cache_bytes_per_token_of_llama_3_8b():
    """Fails if the KV bytes of a token are not layers x KV heads x (K+V dims) x 2 bytes by default."""
    # 32 layers x 8 KV heads x (128 + 128) x 2 bytes = 128 KiB per token (bf16 cache).
    assert mc.kv_bytes_per_token(load_model("llama-3.1-8b-instruct")) == 131072


def test_mla_prefill_attention_flops_and_bytes():
    """Fails if MLA's prefill (non-absorbed) attention FLOPs or its query/output bytes are mispriced."""
    m = _spec(
        heads=4,
        kv_heads=4,
        head_dim=24,
        v_head_dim=16,
        kv_lora_rank=32,
        qk_rope_dim=8,
        qk_nope_dim=16,
        layers=(Layer(MLA, DENSE),) * 2,
    )
    side = mc.Side(requests=1, tokens=16, kv_tokens=16, pairs=16 * 17 / 2, logit_tokens=1)
    w = mc.step_costs(m, side)["attention"]
    # 2 layers x 2 x 4 heads x 136 pairs x (24 + 16) dims
    assert w.flops == 87040
    # 2 layers x (16 keys x 40 latent x 2 bytes + 16 tokens x 4 heads x 40 dims x 2 bytes)
    assert w.bytes == 12800


def test_gated_deltanet_prefill_flops_and_bytes():
    """Fails if the chunked intra-chunk term, the state, conv-state or q/k/v traffic are mispriced."""
    m = _spec(
        layers=(Layer(LINEAR, DENSE),),
        linear_key_heads=2,
        linear_value_heads=4,
        linear_key_dim=8,
        linear_value_dim=16,
        linear_conv_kernel=4,
        linear_state_bytes=4,
    )
    side = mc.Side(requests=1, tokens=200, kv_tokens=200, pairs=200 * 201 / 2, logit_tokens=1)
    w = mc.step_costs(m, side)["linear_attention"]
    # per token and value head: 8 x 8 x 16 + 2 x 64 x (8 + 16) = 4096; channels 2x2x8 + 4x16 = 96
    # 200 tokens x (4 heads x 4096 + 2 x 4 x 96)
    assert w.flops == 3_430_400
    # state 4x8x16x4 B x2 = 4096; conv state 96 x 3 x 2 B x2 = 1152; q/k/v 200 x (96+8+64) x 2 B x2 = 134400
    assert w.bytes == 4096 + 1152 + 134400


def test_moe_expert_bytes_on_two_ranks():
    """Fails if the experts' activation bytes do not split the expert width by the TP degree."""
    m = _spec(layers=(Layer(FULL, MOE),), experts=4, top_k=2, expert_intermediate=32)
    w = mc.step_costs(m, mc.Side(requests=1, tokens=1, kv_tokens=1, pairs=1, logit_tokens=1), tp=2)["experts"]
    # 1 token visits 2 of 4 experts; one expert on one rank: 3 x 64 x 32 / 2 = 3072 parameters
    assert w.flops == 2 * 1 * 2 * 3072
    # 2 experts x 3072 x 2 B + 1 token x 2 x (2 x 64 + 3 x 32 / 2) x 2 B
    assert w.bytes == 12288 + 704


def test_int8_weights_with_16_bit_activations_carry_a_scale_per_128():
    """Fails if compressed-tensors W8A16 int8 weights are not 1 byte plus a 2-byte scale per 128."""
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "intermediate_size": 128,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}},
        },
    }
    m = from_config(cfg, "w8a16", "hand-written config")
    assert m.weight("mlp").name == "int8-w8a16"
    assert m.weight("mlp").bytes_per_param == pytest.approx(1 + 2 / 128)


@pytest.mark.parametrize("act_bytes,expected", [(2.0, 2048 + 2048), (4.0, 2048 + 4096)])
def test_full_attention_bytes_scale_queries_and_outputs_by_the_activation_size(act_bytes, expected):
    """catches: the queries' and outputs' bytes not multiplied by the activation element size."""
    m = _spec()  # 1 full-attention layer, 4 query and 4 KV heads of 16 + 16 dims
    side = mc.Side(requests=1, tokens=8, kv_tokens=8, pairs=8 * 9 / 2, logit_tokens=1)
    w = mc.step_costs(m, side, act_bytes=act_bytes, kv_bytes=2.0)["attention"]
    # keys: 8 x 4 KV heads x 32 dims x 2 B = 2048; queries + outputs: 8 tokens x 4 heads x 32 dims x act_bytes
    assert w.bytes == expected


_SMALL_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "vocab_size": 100,
    "intermediate_size": 128,
    "torch_dtype": "bfloat16",
}


def test_sidecar_dtype_overrides_an_unquantised_config():
    """catches: the dtype collect ran at (--dtype fp32) ignored for an unquantised config, whose
    weights would then be priced at the config's 2-byte bfloat16 instead of 4-byte fp32."""
    from tracekit.models.registry import from_sidecar

    m = from_sidecar({"workload": {"model_config": _SMALL_LLAMA, "preset": "tiny", "dtype": "fp32"}})
    assert m.dtype == "fp32"
    assert m.weight("mlp").bytes_per_param == 4


def test_sidecar_dtype_leaves_a_quantised_configs_weights_alone():
    """catches: collect's run dtype overriding the stored precision a quantization_config states."""
    from tracekit.models.registry import from_sidecar

    cfg = {
        **_SMALL_LLAMA,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}},
        },
    }
    m = from_sidecar({"workload": {"model_config": cfg, "preset": "q", "dtype": "fp32"}})
    assert m.dtype == "bf16"
    assert m.weight("mlp").name == "int8-w8a16"


def _small_config(quantization_config: dict) -> dict:
    return {**_SMALL_LLAMA, "quantization_config": quantization_config}


@pytest.mark.parametrize(
    "activations,name,compute",
    [
        ({"num_bits": 4, "type": "float", "group_size": 16}, "nvfp4", "fp4"),  # W4A4: FP4 GEMMs
        (None, "nvfp4-w4a16", "bf16"),  # no input_activations: weight-only, 16-bit GEMMs
    ],
)
def test_compressed_tensors_nvfp4_group_runs_at_fp4_only_with_4_bit_activations(activations, name, compute):
    """catches: a compressed-tensors NVFP4 group whose input activations are 4-bit (W4A4, as
    nvfp4-pack-quantized checkpoints state) priced at the 16-bit peak as if weight-only."""
    group = {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}
    if activations:
        group["input_activations"] = activations
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "format": "nvfp4-pack-quantized",
                "config_groups": {"group_0": group},
            }
        ),
        "nvfp4",
        "hand-written config",
    )
    assert (m.weight("mlp").name, m.weight("mlp").compute) == (name, compute)
    # e2m1 values (4 bits) + one fp8 scale byte per 16
    assert m.weight("mlp").bytes_per_param == pytest.approx(0.5 + 1 / 16)


def test_bitsandbytes_nf4_weights_carry_an_fp32_absmax_per_64():
    """catches: bitsandbytes 4-bit (NF4) weights not priced as half a byte plus one 4-byte fp32
    absmax per block of 64 (bitsandbytes' default blocksize for 4-bit weights)."""
    m = from_config(
        _small_config({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}),
        "nf4",
        "hand-written config",
    )
    assert m.weight("mlp").name == "nf4"
    assert m.weight("mlp").bytes_per_param == pytest.approx(0.5 + 4 / 64)


@pytest.mark.parametrize(
    "out_bytes,fused_add,expected",
    [
        (1.0, False, 64 * (2 + 1)),  # read 2-byte input, write 1-byte FP8 output
        (1.0, True, 64 * (2 + 1) + 2 * 64 * 2),  # + the residual read and written at 2 bytes
        (4.0, False, 64 * (2 + 4)),
    ],
)
def test_norm_bytes_per_token_add_the_input_and_output_element_sizes(out_bytes, fused_add, expected):
    """catches: a norm fused with a quantisation priced as input size times output size
    (equal only when both are 2 bytes) instead of one read plus one write per element."""
    flops, nbytes = mc.per_token(_spec(), "norm", fused_add=fused_add, act_bytes=2.0, out_bytes=out_bytes)
    assert flops == 5 * 64  # NORM_FLOPS x hidden
    assert nbytes == expected


def test_qwen2_sliding_window_starts_at_max_window_layers():
    """catches: Qwen2's max_window_layers read backwards: transformers' Qwen2Config gives layers
    i >= max_window_layers sliding-window attention and the bottom max_window_layers full."""
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "intermediate_size": 128,
        "use_sliding_window": True,
        "sliding_window": 1024,
        "max_window_layers": 2,
    }
    m = from_config(cfg, "qwen2-swa", "hand-written config")
    assert [(layer.attention, layer.window) for layer in m.layers] == [
        (FULL, None),
        (FULL, None),
        (SLIDING, 1024),
        (SLIDING, 1024),
    ]


def test_kv_cache_bytes_per_token_of_deepseek_v3():
    """catches: MLA's per-token cache bytes divided, not multiplied, by the cache element size."""
    # 61 MLA layers x (512 latent + 64 rope key) x 2 bytes = 70,272 bytes per token (bf16 cache)
    assert mc.kv_bytes_per_token(load_model("deepseek-v3")) == 70272
    # fp8 cache: one byte each
    assert mc.kv_bytes_per_token(load_model("deepseek-v3"), kv_bytes=1.0) == 35136


def test_qwen3_next_has_one_full_attention_layer_in_every_four():
    """catches: full_attention_interval misread (Qwen3-Next-80B-A3B's config has no layer_types:
    transformers makes layer i full attention when (i + 1) % 4 == 0, the rest gated DeltaNet)."""
    m = load_model("qwen3-next-80b-a3b")
    assert m.n_layers == 48
    assert [i for i, layer in enumerate(m.layers) if layer.attention == FULL] == list(range(3, 48, 4))
    assert m.count(attention=LINEAR) == 36


def test_gated_deltanet_projection_parameters():
    """catches: the beta/decay projection (in_proj_ba: hidden -> 2 x value heads) sized wrongly."""
    m = _spec(
        layers=(Layer(LINEAR, DENSE),),
        linear_key_heads=2,
        linear_value_heads=4,
        linear_key_dim=8,
        linear_value_dim=16,
        linear_conv_kernel=4,
    )
    # Qwen3NextGatedDeltaNet: in_proj_qkvz 64 x (2 x 2 x 8 + 2 x 4 x 16) = 10240, in_proj_ba 64 x (2 x 4) = 512,
    # out_proj (4 x 16) x 64 = 4096
    assert mc.parameter_counts(m)["linear_attention"] == 10240 + 512 + 4096


def test_all_reduce_flops_and_bytes_on_two_ranks():
    """catches: the all-reduces' additions not scaling with the step's tokens."""
    m = _spec()  # 1 layer, hidden 64, vocab 100
    side = mc.Side(requests=1, tokens=4, kv_tokens=4, pairs=10, logit_tokens=1)
    w = mc.step_costs(m, side, tp=2)["communication"]
    # 3 all-reduces (attention, MLP, embedding) of 4 tokens x 64: each rank adds (N-1)/N = 1/2 of them
    assert w.flops == 3 * 4 * 64 / 2
    # ring moves 2 (N-1)/N = 1 x 512 bytes per all-reduce; the logits' all-gather 1/2 x 100 x 2 bytes
    assert w.bytes == 3 * 512 + 100


def test_deepseek_v3_attention_parameters():
    """catches: MLA's kv_a_proj_with_mqa (hidden -> kv_lora_rank + qk_rope_head_dim) sized wrongly."""
    m = load_model("deepseek-v3")
    # per layer (DeepSeek-V3 modelling code): q_a 7168 x 1536, q_b 1536 x 128 x (128 + 64),
    # kv_a_proj_with_mqa 7168 x (512 + 64), kv_b 512 x 128 x (128 + 128), o (128 x 128) x 7168
    per_layer = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert per_layer == 187_105_280
    assert mc.parameter_counts(m)["attention"] == 61 * per_layer


@pytest.mark.parametrize("group_size,expected", [(32, 0.5 + 2 / 32), (None, 0.5 + 2 / 128)])
def test_int4_w4a16_group_scales(group_size, expected):
    """catches: a compressed-tensors int4 group's group_size ignored when stated, or the default
    group of 128 not applied when absent (one 2-byte scale per group)."""
    weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group"}
    if group_size:
        weights["group_size"] = group_size
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
            }
        ),
        "w4a16",
        "hand-written config",
    )
    assert m.weight("mlp").name == "int4"
    assert m.weight("mlp").bytes_per_param == pytest.approx(expected)


def test_moe_spec_without_shared_experts_has_none():
    """catches: a hand-built MoE ModelSpec that states no shared experts given a shared expert anyway."""
    m = _spec(layers=(Layer(FULL, MOE),), experts=4, top_k=2, expert_intermediate=32)
    counts = mc.parameter_counts(m)
    assert "shared_experts" not in counts
    # attention 64x64 + 64x128 + 64x64, router 64x4, 4 experts x 3 x 64 x 32, embedding and LM head 100 x 64 each
    assert mc.parameters(m) == 16384 + 256 + 24576 + 2 * 6400


# --- seed 29 (r3m)


def test_rope_flops_and_bytes_per_token():
    """catches: rotary FLOPs divided, not multiplied, by the rotated elements (3 FLOPs each:
    x*cos - y*sin, as tracekit.analysis.pricing.engine_ops prices vLLM's rotary_embedding)."""
    m = _spec(kv_heads=2, rotary_fraction=0.5)
    # (4 query + 2 KV heads) x 16 dims x half rotated = 48 elements; each read and written at 2 bytes
    assert mc.per_token(m, "rope") == (3 * 48, 2 * 48 * 2)


def test_kv_write_bytes_per_token():
    """catches: the KV-cache write not priced (None) while the quantize and embedding launches
    get its figure instead: the write reads K and V at the activation size, stores them at the cache's."""
    m = _spec(kv_heads=2)
    # 2 KV heads x (16 K + 16 V dims) = 64 elements, read at 2 bytes and stored at 1 (fp8 cache)
    assert mc.per_token(m, "kv_write", act_bytes=2.0, kv_bytes=1.0) == (0.0, 64 * 3)
    # quantize: 2 FLOPs per hidden element, read at 2 bytes, written at 1; embedding: a 2-byte row read and written
    assert mc.per_token(m, "quantize") == (2 * 64, 64 * 3)
    assert mc.per_token(m, "embedding") == (0.0, 2 * 64 * 2)


def test_sliding_window_pairs_with_an_odd_window():
    """catches: a position at exactly the window counted both below and above it (odd windows:
    the first capped position misplaced), so a window of 3 over 5 tokens gives 15 pairs, not 12."""
    m = _spec(layers=(Layer(SLIDING, DENSE, window=3),))
    side = mc.Side(requests=1, tokens=5, kv_tokens=5, pairs=15, logit_tokens=1)
    w = mc.step_costs(m, side)["attention"]
    # positions 1..5 see min(p, 3) keys: 1 + 2 + 3 + 3 + 3 = 12 pairs; 2 x 4 heads x 12 x (16 + 16)
    assert w.flops == 2 * 4 * 12 * 32
    assert "12 pairs" in w.note


def test_fused_qkv_projection_width():
    """catches: the fused QKV GEMM's output width not the query width plus the K and V widths."""
    m = _spec(kv_heads=2)
    shapes = {name: (k, n) for name, _, k, n in mc.named_linears(m)}
    # q: 4 heads x 16 = 64; k and v: 2 x 2 heads x 16 = 64; fused 128
    assert shapes["q_proj"] == (64, 64)
    assert shapes["kv_proj"] == (64, 64)
    assert shapes["qkv_proj"] == (64, 128)


def test_mla_kv_a_projection_with_overlapping_bit_widths():
    """catches: kv_a_proj_with_mqa's width (kv_lora_rank + qk_rope_head_dim) computed so that it
    only comes out right when the two share no bits (DeepSeek's 512 and 64 do; 24 and 8 do not)."""
    m = _spec(
        heads=4,
        kv_heads=4,
        head_dim=24,
        v_head_dim=16,
        kv_lora_rank=24,
        qk_rope_dim=8,
        qk_nope_dim=16,
        layers=(Layer(MLA, DENSE),),
    )
    # q_proj 64 x 4 x 24, kv_a_proj_with_mqa 64 x (24 + 8), kv_b_proj 24 x 4 x (16 + 16), o_proj (4 x 16) x 64
    assert mc.parameter_counts(m)["attention"] == 6144 + 2048 + 3072 + 4096


def test_fp8_block_scaled_weights_bytes_per_param():
    """catches: FP8 128x128-block weights not priced at one byte plus one fp32 scale per 16384 weights."""
    m = from_config(
        _small_config(
            {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
        ),
        "fp8",
        "hand-written config",
    )
    assert m.weight("mlp").name == "fp8"
    assert m.weight("mlp").bytes_per_param == pytest.approx(1 + 4 / 16384, rel=1e-12)


def test_config_groups_without_a_quant_method_are_read_as_compressed_tensors():
    """catches: a quantization_config that states config_groups but no quant_method rejected as
    an unknown method instead of read group by group."""
    m = from_config(
        _small_config({"config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}}}),
        "w8",
        "hand-written config",
    )
    assert m.weight("mlp").name == "int8-w8a16"


def test_compressed_tensors_without_config_groups_says_so():
    """catches: compressed-tensors without config_groups reported as an unknown quantization
    method rather than as missing its config_groups."""
    from tracekit.errors import TracekitError

    with pytest.raises(TracekitError, match="no config_groups"):
        from_config(_small_config({"quant_method": "compressed-tensors"}), "ct", "hand-written config")


def test_a_non_object_config_group_is_skipped_not_the_end():
    """catches: the groups after a malformed (non-object) config group ignored, leaving their
    targets at 16 bits."""
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "junk": "not a group",
                    "g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}},
                },
            }
        ),
        "w8",
        "hand-written config",
    )
    assert m.weight("mlp").name == "int8-w8a16"


# --- seed 30 (r5m)


def test_fp8_per_channel_weights_bytes_per_param():
    """catches: FP8 weights without weight_block_size (per-channel scales) not priced at one byte
    plus one fp32 scale per 4096-wide channel (e.g. the scale term computed as a shift: a TypeError)."""
    m = from_config(
        _small_config({"quant_method": "fp8", "activation_scheme": "dynamic"}), "fp8", "hand-written config"
    )
    assert m.weight("mlp").bytes_per_param == pytest.approx(1 + 4 / 4096, rel=1e-12)
    assert "per-channel" in m.weight("mlp").note


def test_decode_without_stated_keys_is_missing_not_a_prefill():
    """catches: a decode step (one token per request) whose keys are unknown taken for a prefill
    with no cached prefix (keys = its tokens) when its token and request counts are equal but not
    the same Python object (e.g. both computed floats)."""
    n = 300
    side = mc.Side(requests=float(n), tokens=float(n), kv_tokens=None, pairs=float(n) * 1000, logit_tokens=float(n))
    assert side.tokens == side.requests and side.tokens is not side.requests
    assert mc.attention_geometry(side, None) is None
    assert isinstance(mc.step_costs(_spec(), side)["attention"], mc.Missing)
    # a prefill (more tokens than requests) without a stated cache still reads only its own tokens as keys
    prefill = mc.Side(requests=float(1), tokens=float(n), kv_tokens=None, pairs=n * (n + 1) / 2, logit_tokens=1.0)
    assert mc.attention_geometry(prefill, None) == (n * (n + 1) / 2, n)


def test_kv_cache_bytes_per_token_count_sliding_layers_too():
    """catches: sliding-window layers subtracted from (or left out of) the KV bytes a token adds,
    instead of counted in full alongside the full-attention layers."""
    m = _spec(kv_heads=2, layers=(Layer(FULL, DENSE),) * 2 + (Layer(SLIDING, DENSE, window=8),))
    # 3 layers x 2 KV heads x (16 K + 16 V dims) x 2 bytes
    assert mc.kv_bytes_per_token(m) == 3 * 2 * 32 * 2
    # gpt-oss-20b (published config): 24 layers alternating sliding/full, 8 KV heads, head_dim 64, bf16 cache
    assert mc.kv_bytes_per_token(load_model("gpt-oss-20b")) == 24 * 8 * (64 + 64) * 2


@pytest.mark.parametrize("out_bytes,expected", [(None, 128 * (2 * 2 + 2)), (1.0, 128 * (2 * 2 + 1))])
def test_gated_activation_bytes_per_token(out_bytes, expected):
    """catches: the gated activation (SiLU(gate) x up) not priced as reading both the gate and up
    halves at the activation size plus writing one output element per intermediate column."""
    _, nbytes = mc.per_token(_spec(), "activation", act_bytes=2.0, out_bytes=out_bytes)
    assert nbytes == expected
    # 4-byte activations: 128 x (2 x 4 + 4)
    assert mc.per_token(_spec(), "activation", act_bytes=4.0)[1] == 128 * 12


# --- seed 31


def test_moe_routing_flops():
    """catches: the router's work mispriced (e.g. one of its products turned into a difference):
    5 FLOPs per expert score of each token (softmax and top-k) plus the weighted combine, a
    multiply-add per hidden element of each of the top-k expert outputs."""
    m = _spec(layers=(Layer(FULL, MOE),) * 2, experts=8, top_k=2, expert_intermediate=32)
    side = mc.Side(requests=1, tokens=3, kv_tokens=3, pairs=6, logit_tokens=1)
    w = mc.step_costs(m, side)["routing"]
    # 2 MoE layers x (3 tokens x 8 experts x 5 + 2 x 3 tokens x top-2 x 64 hidden) = 2 x (120 + 768)
    assert w.flops == 2 * (120 + 768)


def test_full_attention_beside_gated_deltanet_counts_only_its_own_layers():
    """catches: the layers of each attention kind counted by ordering the kind names (`>=` for
    `==`): Qwen3-Next-style models put full-attention layers beside gated-DeltaNet ('linear')
    ones, which also have no window and sort after 'full', so they were priced as full attention."""
    m = _spec(
        layers=(Layer(LINEAR, DENSE),) * 3 + (Layer(FULL, DENSE),),
        linear_key_heads=2,
        linear_value_heads=4,
        linear_key_dim=8,
        linear_value_dim=16,
        linear_conv_kernel=4,
    )
    side = mc.Side(requests=1, tokens=8, kv_tokens=8, pairs=8 * 9 / 2, logit_tokens=1)
    w = mc.step_costs(m, side)["attention"]
    # 1 full layer x 2 x 4 heads x 36 pairs x (16 + 16) dims
    assert w.flops == 2 * 4 * 36 * 32
    # 1 full layer: 8 keys x 4 KV heads x 32 dims x 2 B + 8 tokens x 4 heads x 32 dims x 2 B
    assert w.bytes == 2048 + 2048
    assert "1 full layers" in w.note


def test_qk_norm_flops_and_bytes_per_token():
    """catches: QK-norm's elements not the query plus the KV heads' dims (e.g. the head counts
    combined bitwise: 4 & 2 = 0), or its FLOPs not 5 per element (a shift or xor for the product)."""
    m = _spec(kv_heads=2)
    # (4 query + 2 KV heads) x 16 dims = 96 elements, 5 FLOPs each (the norm convention, as for
    # the hidden-state norm), each read and written at 2 bytes
    assert mc.per_token(m, "qk_norm") == (5 * 96, 2 * 96 * 2)


# --- seed 32


def test_linear_dtype_is_the_flop_majority_of_mixed_precision_weights():
    """catches: the linear GEMMs' dtype tally compounded (a class's running total multiplied by
    the next matrix's FLOPs, not added to them), so the class with more matrices won, not the one
    with more FLOPs: FP8 attention (3 matrices) outvoted the bf16 MLP (2 matrices, more FLOPs)."""
    from tracekit.models.config import PRECISIONS

    m = _spec(precision={"attention": PRECISIONS["fp8"]})
    # attention (fp8): q 64 x 64 + kv 64 x (2 x 4 x 16) + o 64 x 64 = 16384 parameters;
    # MLP (bf16): gate/up 64 x 256 + down 128 x 64 = 24576 parameters: the majority of 2*T*params.
    for tokens in (1, 8):
        side = mc.Side(requests=1, tokens=tokens, kv_tokens=tokens, pairs=tokens * (tokens + 1) / 2, logit_tokens=1)
        w = mc.step_costs(m, side)["linear"]
        assert w.flops == 2 * tokens * (16384 + 24576)
        assert w.dtype == "bf16"


def test_int8_weights_with_8_bit_activations_run_at_the_int8_peak():
    """catches: a compressed-tensors int8 group with 8-bit input activations (W8A8, as
    llm-compressor's W8A8 checkpoints state) read as weight-only W8A16, its GEMMs priced at the
    16-bit peak instead of as int8 GEMMs (8-bit weights times 8-bit activations)."""
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {
                        "targets": ["Linear"],
                        "weights": {"num_bits": 8, "type": "int"},
                        "input_activations": {"num_bits": 8, "type": "int"},
                    }
                },
            }
        ),
        "w8a8",
        "hand-written config",
    )
    assert (m.weight("mlp").name, m.weight("mlp").compute) == ("int8", "int8")
    # The same group without input_activations is weight-only: 16-bit GEMMs.
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}},
            }
        ),
        "w8a16",
        "hand-written config",
    )
    assert (m.weight("mlp").name, m.weight("mlp").compute) == ("int8-w8a16", "bf16")


def test_kv_cache_bytes_per_token_of_mla_with_overlapping_bit_widths():
    """catches: MLA's cached width (latent + rope key) computed so that it only comes out right
    when the two share no bits (DeepSeek's 512 and 64 do, 512 ^ 64 = 576; 24 and 8 do not: 16)."""
    m = _spec(
        heads=4,
        kv_heads=4,
        head_dim=24,
        v_head_dim=16,
        kv_lora_rank=24,
        qk_rope_dim=8,
        qk_nope_dim=16,
        layers=(Layer(MLA, DENSE),) * 2,
    )
    # 2 MLA layers x (24 latent + 8 rope key) x 2 bytes
    assert mc.kv_bytes_per_token(m) == 2 * 32 * 2
    # fp8 cache: one byte each
    assert mc.kv_bytes_per_token(m, kv_bytes=1.0) == 2 * 32


# --- seed 33


def test_named_linears_list_the_mlp_and_lm_head_after_the_attention():
    """catches: the loop over weight classes left after the (non-MLA) attention projections
    (`break` for `continue`), so a dense model's MLP GEMMs (gate_up_proj, up_proj, down_proj)
    were missing from the launch shapes and only the LM head followed the attention."""
    names = [name for name, *_ in mc.named_linears(_spec())]
    assert names == ["qkv_proj", "q_proj", "kv_proj", "o_proj", "gate_up_proj", "down_proj", "up_proj", "lm_head"]


def test_unfused_up_projection_is_half_the_gate_up_width():
    """catches: an engine's separate up projection (gate and up launched apart) given a third of
    the fused gate_up width (`n // 3` for `n // 2`): gate_up fuses two matrices of the MLP's width."""
    shapes = {name: (cls, k, n) for name, cls, k, n in mc.named_linears(_spec())}
    # fused gate + up: 64 hidden -> 2 x 128 intermediate; each alone: 64 -> 128
    assert shapes["gate_up_proj"] == ("mlp", 64, 256)
    assert shapes["up_proj"] == ("mlp", 64, 128)
    # on two ranks each holds half the intermediate width: 64 -> 64
    assert {name: n for name, _, _, n in mc.named_linears(_spec(), tp=2)}["up_proj"] == 64


def test_compressed_tensors_group_naming_the_router_leaves_it_at_the_checkpoint_dtype():
    """catches: a config group's precision given to every class its targets name except the LM
    head (`cls != "lm_head"` for `==`), so a group whose targets match the MoE router (mlp.gate)
    priced the router's GEMM as quantised; engines build the router unquantised (vLLM's MoE
    gates are ReplicatedLinear with quant_config=None), as with_weights also leaves it."""
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {
                        "targets": ["Linear", "re:.*mlp.gate$"],
                        "weights": {"num_bits": 8, "type": "float"},
                        "input_activations": {"num_bits": 8, "type": "float"},
                    }
                },
            }
        ),
        "fp8-router",
        "hand-written config",
    )
    assert m.weight("mlp").name == "fp8"
    assert "router" not in m.precision and m.weight("router").name == "bf16"


def test_model_from_a_config_file_is_named_after_its_folder(tmp_path):
    """catches: a config.json's model labelled with the --model argument itself (`and` for `or`),
    a whole path such as /tmp/.../my-llama/config.json, instead of the checkpoint folder's name."""
    import json

    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_SMALL_LLAMA))
    assert load_model(str(folder / "config.json")).name == "my-llama"
    assert load_model(str(folder)).name == "my-llama"


def _deltanet(**kw) -> ModelSpec:
    return _spec(
        layers=(Layer(LINEAR, DENSE),),
        linear_key_heads=2,
        linear_value_heads=4,
        linear_key_dim=8,
        linear_value_dim=16,
        linear_conv_kernel=4,
        **kw,
    )


def test_gated_deltanet_decode_of_one_token_per_request_is_not_chunked():
    """catches: a decode step (one token per request, T / R = 1) priced with the chunked
    intra-chunk attention term (`>=` for `>`): the recurrent update alone runs there, no chunk."""
    side = mc.Side(requests=4, tokens=4, kv_tokens=400, pairs=400, logit_tokens=4)
    w = mc.step_costs(_deltanet(linear_state_bytes=4), side)["linear_attention"]
    # per token and value head: 8 x 8 x 16 = 1024 (no 2 x 64 x (8 + 16) chunk term); channels 2x2x8 + 4x16 = 96
    # 4 tokens x (4 heads x 1024 + 2 x 4 x 96)
    assert w.flops == 4 * (4 * 1024 + 2 * 4 * 96)
    assert "chunked" not in w.note
    # two tokens per request (a short prefill chunk) is chunked: 8 x 8 x 16 + 2 x 64 x (8 + 16) = 4096
    side = mc.Side(requests=4, tokens=8, kv_tokens=8, pairs=12, logit_tokens=4)
    assert mc.step_costs(_deltanet(linear_state_bytes=4), side)["linear_attention"].flops == 8 * (4 * 4096 + 2 * 4 * 96)


def test_hand_built_gated_deltanet_state_defaults_to_fp32():
    """catches: a ModelSpec built without linear_state_bytes given a 3-byte recurrent state: the
    default is fp32 (4 bytes), as Hugging Face's mamba_ssm_dtype default "float32" gives from_config."""
    assert _deltanet().linear_state_bytes == 4
    side = mc.Side(requests=1, tokens=1, kv_tokens=100, pairs=100, logit_tokens=1)
    w = mc.step_costs(_deltanet(), side)["linear_attention"]
    # state 4x8x16 x 4 B x2 = 4096; conv state 96 x 3 x 2 B x2 = 1152; q/k/v 1 x (96+8+64) x 2 B x2 = 672
    assert w.bytes == 4096 + 1152 + 672


def test_compressed_tensors_group_naming_the_lm_head_quantises_it_unless_ignored():
    """catches: the LM head left at the checkpoint's dtype although a config group names it (the
    default exclusion of the head applied over the group's explicit target); and a head the
    config's ignore list names, or that only ``Linear`` covers, quantised."""
    fp8 = {"weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8, "type": "float"}}

    def head(targets, ignore=None):
        qc = {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": targets, **fp8}}}
        if ignore is not None:
            qc["ignore"] = ignore
        return from_config(_small_config(qc), "ct", "hand-written config").weight("lm_head").name

    assert head(["Linear", "lm_head"]) == "fp8"
    assert head(["Linear", "lm_head"], ignore=["lm_head"]) == "bf16"
    assert head(["Linear"]) == "bf16"  # published checkpoints keep the head wide


# --- seed 34


def test_moe_routing_bytes():
    """catches: the router's traffic mispriced (a product in it turned into a remainder): per MoE
    layer, T x E fp32 router scores (4 bytes each), T x k expert ids and weights (8 bytes each,
    written then read: x 2), the T x k expert outputs read for the combine at the activation size,
    and the T x hidden combined output written."""
    m = _spec(layers=(Layer(FULL, MOE),) * 2, experts=8, top_k=2, expert_intermediate=32)
    side = mc.Side(requests=1, tokens=3, kv_tokens=3, pairs=6, logit_tokens=1)
    w = mc.step_costs(m, side, act_bytes=2.0)["routing"]
    # 2 layers x (3*8*4 = 96  +  3*2*8*2 = 96  +  3*2*64*2 = 768  +  3*64*2 = 384) = 2 x 1,344
    assert w.bytes == 2 * (96 + 96 + 768 + 384)


def test_embedding_lookup_per_token_is_one_row_read_and_written():
    """catches: the KV-write branch taken by comparing names (`component <= "kv_write"`), which
    priced every name sorting before it, the embedding lookup among them, as a KV-cache write.
    An embedding lookup reads one row of hidden elements and writes it: 2 x 64 x 2 bytes in
    bf16, no FLOPs; a KV write of one token stores K and V of each KV head: 4 x (16 + 16) elements,
    read in bf16 and written at the cache's 2 bytes."""
    assert mc.per_token(_spec(), "embedding", act_bytes=2.0) == (0.0, 2 * 64 * 2)
    assert mc.per_token(_spec(), "kv_write", act_bytes=2.0, kv_bytes=2.0) == (0.0, 4 * 32 * (2 + 2))


# --- seed 35 -------------------------------------------------------------------------------------


def test_int8_w8a8_weights_are_a_byte_each_plus_a_scale_per_128():
    """catches: the int8 row's bytes multiplied out (`1 * 4 / 128` for `1 + 4 / 128`): W8A8 int8
    weights were priced at 0.03 bytes each, a 32nd of the byte each one takes. By hand: one byte
    a weight and one fp32 scale (4 bytes) per 128 weights, 1.03125 bytes."""
    m = from_config(
        _small_config(
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {
                        "targets": ["Linear"],
                        "weights": {"num_bits": 8, "type": "int"},
                        "input_activations": {"num_bits": 8, "type": "int"},
                    }
                },
            }
        ),
        "w8a8",
        "hand-written config",
    )
    assert m.weight("mlp").name == "int8"
    assert m.weight("mlp").bytes_per_param == pytest.approx(1.03125, rel=1e-12)


@pytest.mark.parametrize("method, bits, group", [("gptq", 4, 128), ("awq", 4, 64), ("gptq", 8, 32)])
def test_gptq_and_awq_weights_are_priced_from_their_checkpoint_tensors(method, bits, group):
    """catches: the bytes a group carries beside its weights mis-stated (e.g. 5 or 3 for 4 bytes,
    or the 4 bytes of an fp16 scale and an fp16 zero this once assumed). The expectation is the
    checkpoint's own tensors for a Linear of K inputs and N outputs: qweight (K x N values at the
    weights' width), qzeros (K/group x N zero points, packed at the same width) and scales
    (K/group x N fp16), over K x N weights; g_idx (K int32) is under 0.1% and left out."""
    K, N = 4096, 4096
    stored = K * N * bits / 8 + (K // group) * N * bits / 8 + (K // group) * N * 2
    m = from_config(_small_config({"quant_method": method, "bits": bits, "group_size": group}), method, "hand")
    assert m.weight("mlp").name == f"int{bits}"
    assert m.weight("mlp").bytes_per_param == pytest.approx(stored / (K * N), rel=1e-12)
