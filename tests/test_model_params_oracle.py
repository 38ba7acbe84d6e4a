"""tracekit's parameter counts checked against Hugging Face transformers' own model definitions.

For every entry of tracekit/models/registry.json (all 45: building them all on torch's meta
device takes about 20 s here, so none is sampled), the entry's ``config`` (a real checkpoint
config.json) is turned into a transformers config and the model is built on the meta device
(no download, no memory). Its ``named_parameters()`` are sorted into groups by module name
(``_group``), and tracekit's ``parameter_counts`` / ``ModelSpec.parameters`` /
``linear_matrices`` / ``expert_parameters`` / ``weight_bytes`` / layer kinds for the same
entry must match those groups exactly. The expected numbers are the numel of transformers'
tensors, never tracekit's arithmetic.

How each entry is built:
- ``*ForConditionalGeneration`` entries (Qwen3.5, Gemma 3 4b/12b/27b, Mistral Small 3.1) are
  built from their text sub-config (``get_text_config()``): tracekit prices the decoder only,
  so the vision tower and multimodal projector are left out by construction. (Building the
  whole Mistral3ForConditionalGeneration from this config would tie the LM head to the
  embeddings, because the composite config's ``tie_word_embeddings`` defaults to True, while
  its text config and the checkpoint, which stores ``lm_head.weight`` apart, do not; the
  decoder config says what the checkpoint holds.)
- ``kimi_k2`` (Kimi K2: remote code, ``architectures`` DeepseekV3ForCausalLM) is built as
  ``deepseek_v3``, the architecture its config names.
- Tied embeddings: ``named_parameters()`` lists a tied LM head once (as the embedding), which
  is how tracekit counts it (no ``lm_head`` entry when tied).

Groups tracekit leaves out on purpose (``LEFT_OUT``; each must stay under 0.1% of the model,
and every other group is compared exactly): norm weights, biases (Qwen2 QKV, gpt-oss
attention, router and expert biases), gpt-oss attention sinks, gated DeltaNet's depthwise
conv1d / dt_bias / A_log (not GEMMs), and Qwen3-Next / Qwen3.5-MoE's one-column
``shared_expert_gate``. Multi-token-prediction layers (DeepSeek-V3, Qwen3-Next) are in neither
count: transformers' definitions do not build them and tracekit prices the decoder that
serves tokens.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from functools import lru_cache

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tracekit.models import costs as mc  # noqa: E402
from tracekit.models import load_model, registry_entries  # noqa: E402
from tracekit.models.config import LINEAR, MOE, SLIDING  # noqa: E402

KEYS = [e["key"] for e in registry_entries()]
ENTRIES = {e["key"]: e for e in registry_entries()}

# Group -> why tracekit's parameter counts leave it out.
LEFT_OUT = {
    "norm": "RMSNorm/LayerNorm weights are vectors, not GEMM weights; norms are priced per launch",
    "bias": "biases are vectors added after the GEMM, not multiply-adds",
    "sinks": "gpt-oss attention sinks: one scalar per head per layer",
    "linear_attention_state": "gated DeltaNet's depthwise conv1d, dt_bias and A_log: not GEMMs "
    "(priced inside linear_attention)",
    "shared_expert_gate": "a hidden x 1 sigmoid gate per MoE layer (Qwen3-Next, Qwen3.5-MoE)",
}
COVERED = ("embedding", "lm_head", "attention", "linear_attention", "mlp", "router", "experts", "shared_experts")

# GEMMs tracekit lists as one fused matrix (as engines launch them): the pairs' output widths add.
FUSED = [("k_proj", "v_proj"), ("gate_proj", "up_proj"), ("in_proj_qkv", "in_proj_z"), ("in_proj_b", "in_proj_a")]


def _group(name: str) -> str:
    """The parameter group of one transformers parameter name (the oracle's own rule)."""
    if re.search(r"\.linear_attn\.(conv1d|dt_bias|A_log)", name):
        return "linear_attention_state"
    if "norm" in name:
        return "norm"
    if name.endswith("bias"):
        return "bias"
    if "embed_tokens" in name:
        return "embedding"
    if name.startswith("lm_head."):
        return "lm_head"
    if ".self_attn.sinks" in name:
        return "sinks"
    if ".self_attn." in name:
        return "attention"
    if ".linear_attn." in name:
        return "linear_attention"
    if ".shared_expert_gate." in name:
        return "shared_expert_gate"
    if ".shared_expert." in name or ".shared_experts." in name:
        return "shared_experts"
    if ".mlp.experts." in name:
        return "experts"
    if re.search(r"\.mlp\.(gate|router)\.weight$", name):
        return "router"
    if ".mlp." in name:
        return "mlp"
    return "unknown"


@lru_cache(maxsize=None)
def _hf(key: str) -> dict:
    """transformers' view of a registry entry: parameter groups, per-layer GEMMs, experts."""
    cfg_dict = dict(ENTRIES[key]["config"])
    model_type = cfg_dict.pop("model_type")
    model_type = {"kimi_k2": "deepseek_v3"}.get(model_type, model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **cfg_dict)
        if any("ConditionalGeneration" in a for a in cfg_dict.get("architectures") or []):
            cfg = cfg.get_text_config()
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    groups: Counter = Counter()
    layers: dict[int, dict] = {}
    for name, p in model.named_parameters():
        g = _group(name)
        groups[g] += p.numel()
        m = re.search(r"\.layers\.(\d+)\.(.+)$", name)
        if m is None:
            continue
        layer = layers.setdefault(int(m.group(1)), {"gemms": {}, "experts": [], "kinds": set()})
        layer["kinds"].add(g)
        if g == "experts" and not name.endswith("bias"):
            layer["experts"].append(tuple(p.shape))
        elif g in COVERED and name.endswith(".weight"):
            module = m.group(2).removesuffix(".weight")
            layer["gemms"][module] = (g, p.shape[1], p.shape[0])  # nn.Linear weight: (out N, in K)
    layer_types = getattr(cfg, "layer_types", None)
    return {
        "groups": groups,
        "layers": [layers[i] for i in sorted(layers)],
        "layer_types": layer_types,
        "model": type(model).__name__,
    }


def _hf_gemm_shapes(layer: dict) -> Counter:
    """One layer's (weight class, K, N) GEMMs, with tracekit's fusions (FUSED) applied."""
    gemms = dict(layer["gemms"])
    out: Counter = Counter()
    for a, b in FUSED:
        for module in [mod for mod in gemms if mod.rsplit(".", 1)[-1] == a]:
            partner = module[: -len(a)] + b
            if partner in gemms:
                (ga, ka, na), (gb, kb, nb) = gemms.pop(module), gemms.pop(partner)
                assert (ga, ka) == (gb, kb), (module, partner)
                out[(ga, ka, na + nb)] += 1
    for g, k, n in gemms.values():
        out[(g, k, n)] += 1
    return out


@pytest.mark.parametrize("key", KEYS)
def test_parameter_groups_match_transformers(key):
    """Each weight class's parameter count (embedding, LM head, attention, linear attention,
    dense MLP, router, routed and shared experts) equals the numel of transformers' tensors of
    that class, exactly; ``parameters()`` is their sum; what tracekit leaves out is only the
    LEFT_OUT groups, each under 0.1% of the model.
    catches: a layer-count off-by-one, a dropped or doubled projection, a wrong head or expert
    width, a tied LM head counted twice (or an untied one once), first-k-dense or every-Nth-MoE
    layers miscounted, and a real weight matrix hiding in an oracle group tracekit skips."""
    hf = _hf(key)
    assert hf["groups"].get("unknown", 0) == 0, f"{key}: a transformers parameter the oracle cannot place"
    spec = load_model(key)
    tk = mc.parameter_counts(spec)
    assert set(tk) <= set(COVERED)
    for g in COVERED:
        assert tk.get(g, 0) == hf["groups"].get(g, 0), f"{key} {g}: tracekit {tk.get(g, 0)} vs transformers"
    covered = sum(hf["groups"].get(g, 0) for g in COVERED)
    assert mc.parameters(spec) == covered
    total = sum(hf["groups"].values())
    for g in set(hf["groups"]) - set(COVERED):
        assert g in LEFT_OUT
        assert hf["groups"][g] < 1e-3 * total, f"{key}: left-out group {g} is {hf['groups'][g]} of {total}"


@pytest.mark.parametrize("key", KEYS)
def test_gemm_shapes_match_transformers(key):
    """Every dense GEMM ``linear_matrices`` lists (weight class, K, N, layers) is a weight
    matrix of transformers' model with that shape in that many layers, and nothing is missing
    (k|v, gate|up, DeltaNet qkv|z and b|a fused, as tracekit lists them).
    catches: K and N swapped, a q projection not doubled for the output gate (Qwen3-Next,
    Qwen3.5), MLA's q_lora / kv_lora / rope widths mixed up, a GQA k/v width taken from the
    query heads, the router's width, and layer counts per kind; totals alone miss shape errors
    that keep K*N."""
    hf = _hf(key)
    expected: Counter = Counter()
    for layer in hf["layers"]:
        expected.update(_hf_gemm_shapes(layer))
    expected = Counter({k: v for k, v in expected.items() if k[0] not in ("embedding", "lm_head")})
    got: Counter = Counter()
    for cls, k, n, count in mc.linear_matrices(load_model(key)):
        got[(cls, k, n)] += count
    assert got == expected


@pytest.mark.parametrize("key", KEYS)
def test_experts_match_transformers(key):
    """The routed experts: count, one expert's parameters (``expert_parameters``: its gate, up
    and down matrices) and the MoE layers, against transformers' fused expert tensors
    (num_experts x ...); dense models have none on either side.
    catches: a dropped gate/up/down term in an expert, num_experts read from the wrong key,
    first_k_dense_replace or decoder_sparse_step applied off by one, mlp_only_layers ignored."""
    hf = _hf(key)
    spec = load_model(key)
    moe_layers = [layer for layer in hf["layers"] if layer["experts"]]
    assert spec.count(mlp=MOE) == len(moe_layers)
    if not moe_layers:
        assert spec.experts == 0 and "experts" not in mc.parameter_counts(spec)
        return
    for layer in moe_layers:
        n_experts = {shape[0] for shape in layer["experts"]}
        assert n_experts == {spec.experts}
        per_expert = sum(int(torch.Size(shape[1:]).numel()) for shape in layer["experts"])
        assert mc.expert_parameters(spec) == per_expert
        assert mc.expert_parameters(spec, tp=2) == per_expert / 2


@pytest.mark.parametrize("key", KEYS)
def test_layer_kinds_match_transformers(key):
    """Per layer, tracekit's kind matches the module transformers builds there: linear
    attention exactly where transformers has a ``linear_attn`` module, a MoE MLP exactly where
    it has ``mlp.experts``, and sliding-window layers where transformers' config's
    ``layer_types`` (when it defines them) says sliding.
    catches: full_attention_interval off by one, the first dense layers put at the end, a
    sliding-window pattern shifted by a layer, a layer count off by one."""
    hf = _hf(key)
    spec = load_model(key)
    assert spec.n_layers == len(hf["layers"])
    for i, (layer, hf_layer) in enumerate(zip(spec.layers, hf["layers"])):
        assert (layer.attention == LINEAR) == ("linear_attention" in hf_layer["kinds"]), f"{key} layer {i}"
        assert (layer.mlp == MOE) == bool(hf_layer["experts"]), f"{key} layer {i}"
    types = hf["layer_types"]
    if types:
        assert [layer.attention == SLIDING for layer in spec.layers] == [t == "sliding_attention" for t in types]


def _unquantised_with_dtype() -> list[str]:
    out = []
    for key, e in ENTRIES.items():
        c = {**e["config"], **(e["config"].get("text_config") or {})}
        if "quantization_config" not in c and (c.get("torch_dtype") or c.get("dtype")):
            out.append(key)
    return out


@pytest.mark.parametrize("key", _unquantised_with_dtype())
def test_weight_bytes_of_unquantised_checkpoints(key):
    """An unquantised checkpoint's weights take the element size of its stated dtype
    (torch's itemsize, bf16: 2 bytes) times transformers' parameters of the priced classes;
    on two ranks each holds half.
    catches: a class priced at the wrong precision, a dropped class in weight_bytes, tp not
    dividing the bytes."""
    c = {**ENTRIES[key]["config"], **(ENTRIES[key]["config"].get("text_config") or {})}
    itemsize = getattr(torch, str(c.get("torch_dtype") or c.get("dtype")).removeprefix("torch.")).itemsize
    covered = sum(_hf(key)["groups"].get(g, 0) for g in COVERED)
    spec = load_model(key)
    assert mc.weight_bytes(spec) == covered * itemsize
    assert mc.weight_bytes(spec, tp=2) == covered * itemsize / 2


@pytest.mark.parametrize("key", ["gpt-oss-20b", "gpt-oss-120b"])
def test_weight_bytes_of_gpt_oss_mxfp4_experts(key):
    """gpt-oss stores only its routed experts in MXFP4 (its quantization_config leaves
    attention, router, embeddings and LM head bf16): 32 4-bit values share one 8-bit scale,
    4.25 bits = 0.53125 bytes per expert parameter; the rest 2 bytes.
    catches: the MXFP4 scale dropped or counted per 16, the bf16 classes priced as MXFP4."""
    g = _hf(key)["groups"]
    expected = g["experts"] * (4 * 32 + 8) / 32 / 8 + 2 * sum(g.get(c, 0) for c in COVERED if c != "experts")
    assert mc.weight_bytes(load_model(key)) == pytest.approx(expected, rel=1e-12)
