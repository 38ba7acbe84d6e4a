"""Exact step costs of tiny hand-built models: each figure worked out by hand from the cost
conventions in tracekit/models/costs.py's docstring (a multiply-add is 2 FLOPs, each weight and
activation moved once), or from a published parameter count. These kill survivors of the
mutation campaign (benchmarks/mutation.py) that the 1%-tolerance tests on real models let live."""

from __future__ import annotations

import pytest

from tracekit.models import costs as mc
from tracekit.models import from_config, load_model
from tracekit.models.config import DENSE, FULL, LINEAR, MLA, MOE, Layer, ModelSpec


def _spec(**kw) -> ModelSpec:
    base = dict(name="tiny", source="hand-built", model_type="test", hidden=64, vocab=100, heads=4, kv_heads=4,
                head_dim=16, v_head_dim=16, intermediate=128, layers=(Layer(FULL, DENSE),))
    return ModelSpec(**{**base, **kw})


def test_gpt2_parameters_match_the_published_count():
    """Fails if an ungated MLP (GPT-2's fc/proj) is counted as gated (two up-projections)."""
    m = _spec(hidden=768, vocab=50257, heads=12, kv_heads=12, head_dim=64, v_head_dim=64, intermediate=3072,
              layers=(Layer(FULL, DENSE),) * 12, gated_mlp=False, tied_embeddings=True)
    # GPT-2 small: 124,439,808 parameters, less its 1024 x 768 position embeddings and the
    # 121,344 biases and norm weights that tracekit does not price.
    assert m.parameters() == 124_439_808 - 1024 * 768 - 121_344


def test_kv_cache_bytes_per_token_of_llama_3_8b():
    """Fails if the KV bytes of a token are not layers x KV heads x (K+V dims) x 2 bytes by default."""
    # 32 layers x 8 KV heads x (128 + 128) x 2 bytes = 128 KiB per token (bf16 cache).
    assert mc.kv_bytes_per_token(load_model("llama-3.1-8b-instruct")) == 131072


def test_mla_prefill_attention_flops_and_bytes():
    """Fails if MLA's prefill (non-absorbed) attention FLOPs or its query/output bytes are mispriced."""
    m = _spec(heads=4, kv_heads=4, head_dim=24, v_head_dim=16, kv_lora_rank=32, qk_rope_dim=8, qk_nope_dim=16,
              layers=(Layer(MLA, DENSE),) * 2)
    side = mc.Side(requests=1, tokens=16, kv_tokens=16, pairs=16 * 17 / 2, logit_tokens=1)
    w = mc.step_costs(m, side)["attention"]
    # 2 layers x 2 x 4 heads x 136 pairs x (24 + 16) dims
    assert w.flops == 87040
    # 2 layers x (16 keys x 40 latent x 2 bytes + 16 tokens x 4 heads x 40 dims x 2 bytes)
    assert w.bytes == 12800


def test_gated_deltanet_prefill_flops_and_bytes():
    """Fails if the chunked intra-chunk term, the state, conv-state or q/k/v traffic are mispriced."""
    m = _spec(layers=(Layer(LINEAR, DENSE),), linear_key_heads=2, linear_value_heads=4, linear_key_dim=8,
              linear_value_dim=16, linear_conv_kernel=4, linear_state_bytes=4)
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
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128,
           "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
               "g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}}}}
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


_SMALL_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                "vocab_size": 100, "intermediate_size": 128, "torch_dtype": "bfloat16"}


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

    cfg = {**_SMALL_LLAMA, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}}}}
    m = from_sidecar({"workload": {"model_config": cfg, "preset": "q", "dtype": "fp32"}})
    assert m.dtype == "bf16"
    assert m.weight("mlp").name == "int8-w8a16"
