"""A model's architecture as the cost model needs it, read from a Hugging Face ``config.json``.

``ModelSpec`` holds what a step's FLOPs and bytes depend on: sizes, the kind of each
layer (full, sliding-window, MLA or linear attention; dense MLP or MoE), experts, and
the stored precision of each class of weights (from ``quantization_config``). It is
read from a config dict (``from_config``): a registry entry's, a local ``config.json``,
or the one ``tracekit collect`` records in its sidecar. Pure data, no torch.

Defaults follow the ``transformers`` config classes for fields a checkpoint may omit
(``_DEFAULTS``); a config missing what the cost model needs, or using an architecture or
quantization tracekit does not understand, raises ``TracekitError`` with one sentence
that names what was not understood.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tracekit.errors import TracekitError

# Layer kinds.
FULL, SLIDING, LINEAR, MLA = "full", "sliding", "linear", "mla"
DENSE, MOE = "dense", "moe"

# Weight classes, each with its own stored precision.
WEIGHT_CLASSES = ("attention", "linear_attention", "mlp", "experts", "shared_experts", "router", "lm_head", "embedding")


@dataclass(frozen=True)
class Precision:
    """How one class of weights is stored and which peak its GEMMs run at."""

    name: str  # "bf16", "fp8", "nvfp4", "mxfp4", "int4", "int8", "fp16", "fp32"
    bytes_per_param: float  # scales included
    compute: str  # the dtype whose matrix peak the GEMM runs at ("bf16", "fp8", "fp4", ...)
    note: str = ""


def _block(bits: int, group: int, scale_bytes: float) -> float:
    return bits / 8 + scale_bytes / group


# Stored precisions tracekit understands; compute is the default (kernel names may say otherwise).
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4.0, "fp32"),
    "bf16": Precision("bf16", 2.0, "bf16"),
    "fp16": Precision("fp16", 2.0, "fp16"),
    # FP8 e4m3 with one fp32 scale per 128x128 block (DeepSeek-V3, Qwen3-FP8): W8A8.
    "fp8": Precision("fp8", 1 + 4 / (128 * 128), "fp8", "FP8 weights, FP8 activations (W8A8)"),
    # NVFP4: e2m1 values with one fp8 scale per 16 (plus a per-tensor fp32 scale): W4A4.
    "nvfp4": Precision("nvfp4", _block(4, 16, 1), "fp4", "NVFP4 weights and activations (W4A4)"),
    "nvfp4-w4a16": Precision("nvfp4-w4a16", _block(4, 16, 1), "bf16", "NVFP4 weights, 16-bit activations"),
    # MXFP4: e2m1 values with one e8m0 scale per 32. Activations stay 16-bit unless the kernel
    # names say MXFP8 (kernel evidence refines the compute dtype).
    "mxfp4": Precision("mxfp4", _block(4, 32, 1), "bf16", "MXFP4 weights"),
    # GPTQ/AWQ int4 with an fp16 scale and a 4-bit zero point per group of 128: weight-only.
    "int4": Precision("int4", _block(4, 128, 2.5), "bf16", "int4 weights, 16-bit activations (W4A16)"),
    "int8": Precision("int8", 1 + 4 / 128, "int8", "int8 weights and activations (W8A8)"),
}
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}

# transformers config-class defaults for fields checkpoints omit (multimodal Gemma 3 files
# carry only a few text_config keys; Qwen3-Next always gates its attention output).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
        "sliding_window": 4096,
    },
    "gemma2": {"tie_word_embeddings": True},
    "gemma": {"tie_word_embeddings": True},
    "qwen3_next": {"attn_output_gate": True},
}
# Families whose MLP is two matrices (up, down), not a gated three (gate, up, down).
_UNGATED = {"gpt2", "opt", "bloom", "gpt_neox", "falcon", "phi", "starcoder2", "gpt_bigcode"}
# Keys that mark architectures the cost model does not cover.
_UNSUPPORTED_KEYS = {
    "is_encoder_decoder": "an encoder-decoder model",
    "ssm_cfg": "a Mamba / state-space model",
    "mamba_d_state": "a Mamba hybrid",
}


@dataclass(frozen=True)
class Layer:
    attention: str  # FULL, SLIDING, MLA or LINEAR
    mlp: str  # DENSE or MOE
    window: int | None = None


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str  # where the config came from (registry entry with its URL, a path, the collect sidecar)
    model_type: str
    hidden: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    intermediate: int  # dense MLP width
    layers: tuple[Layer, ...]
    gated_mlp: bool = True
    tied_embeddings: bool = False
    attn_output_gate: bool = False  # q projection doubled to gate the attention output
    rotary_fraction: float = 1.0
    # MoE
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0  # total width of the shared experts (0: none)
    # MLA (DeepSeek-V2/V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    # Linear attention (gated DeltaNet: Qwen3-Next, Qwen3.5)
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 0
    linear_state_bytes: int = 4  # the recurrent state's element size (mamba_ssm_dtype)
    # Stored precision per weight class, the activation dtype, and where the precision came from.
    precision: dict[str, Precision] = field(default_factory=dict, hash=False)
    dtype: str = "bf16"
    precision_source: str = "the checkpoint's dtype (no quantization_config)"
    # Whether a quantization_config or --weights stated the precision (False: the config is silent).
    precision_stated: bool = False
    notes: tuple[str, ...] = ()

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def count(self, attention: str | None = None, mlp: str | None = None) -> int:
        cache = self.__dict__.setdefault("_counts", {})  # a frozen value: counts never change
        key = (attention, mlp)
        if key not in cache:
            cache[key] = sum(
                1
                for layer in self.layers
                if (attention is None or layer.attention == attention) and (mlp is None or layer.mlp == mlp)
            )
        return cache[key]

    def weight(self, cls: str) -> Precision:
        return self.precision.get(cls) or PRECISIONS[self.dtype]

    def summary(self) -> str:
        parts = [
            f"{self.n_layers} layers",
            f"hidden {self.hidden}",
            f"{self.heads}/{self.kv_heads} heads x {self.head_dim}",
        ]
        kinds = {k: self.count(attention=k) for k in (FULL, SLIDING, MLA, LINEAR)}
        if sum(1 for v in kinds.values() if v) > 1 or kinds[SLIDING] or kinds[LINEAR] or kinds[MLA]:
            parts.append(", ".join(f"{v} {k}" for k, v in kinds.items() if v) + " attention")
        if self.experts:
            parts.append(
                f"{self.experts} experts top-{self.top_k} x {self.expert_intermediate}"
                + (f" + shared {self.shared_intermediate}" if self.shared_intermediate else "")
            )
        else:
            parts.append(f"MLP {self.intermediate}")
        stored = sorted({p.name for p in self.precision.values()} or {self.dtype})
        parts.append("weights " + "/".join(stored))
        return ", ".join(parts)


def _text(cfg: dict[str, Any]) -> dict[str, Any]:
    """The decoder's config: multimodal checkpoints nest it in ``text_config``."""
    text = cfg.get("text_config") or cfg.get("llm_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in cfg.items() if k not in ("text_config", "vision_config")}
        merged.update(text)
        if "quantization_config" not in text and "quantization_config" in cfg:
            merged["quantization_config"] = cfg["quantization_config"]
        return merged
    return dict(cfg)


def _int(c: dict, key: str, what: str) -> int:
    v = c.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 or v != int(v):
        raise TracekitError(
            f"{what}: its config has no usable {key!r} (a positive integer), which the cost model needs"
        )
    return int(v)


def _opt_int(c: dict, key: str, default: int = 0) -> int:
    v = c.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else default


def from_config(cfg: dict[str, Any], name: str, source: str, *, weights: str | None = None) -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face config dict. ``weights`` overrides the stored
    precision of every quantisable linear layer (``--weights``: the checkpoint is quantised
    although this config is not)."""
    what = f"model {name!r}"
    if not isinstance(cfg, dict):
        raise TracekitError(f"{what}: the config is not a JSON object")
    for key, kind in _UNSUPPORTED_KEYS.items():
        if cfg.get(key):
            raise TracekitError(f"{what} is {kind}, which tracekit's cost model does not cover")
    c = _text(cfg)
    model_type = str(c.get("model_type") or cfg.get("model_type") or "")
    c = {**_DEFAULTS.get(model_type, {}), **{k: v for k, v in c.items() if v is not None}}
    hidden = _int(c, "hidden_size", what)
    n_layers = _int(c, "num_hidden_layers", what)
    heads = _int(c, "num_attention_heads", what)
    vocab = _int(c, "vocab_size", what)
    kv_heads = _opt_int(c, "num_key_value_heads", heads)
    head_dim = _opt_int(c, "head_dim", hidden // heads)
    experts = _opt_int(c, "n_routed_experts") or _opt_int(c, "num_local_experts") or _opt_int(c, "num_experts")
    top_k = _opt_int(c, "num_experts_per_tok") or _opt_int(c, "experts_per_token")
    if experts and not top_k:
        raise TracekitError(
            f"{what}: it has {experts} experts but no num_experts_per_tok, so the experts a token visits are unknown"
        )
    intermediate = _opt_int(c, "intermediate_size")
    if not intermediate and not experts:
        raise TracekitError(f"{what}: its config has no intermediate_size for the MLP")
    mla = bool(_opt_int(c, "kv_lora_rank"))
    layers = tuple(_layer(i, c, n_layers, experts, mla, what) for i in range(n_layers))
    shared = _opt_int(c, "shared_expert_intermediate_size")
    if not shared and _opt_int(c, "n_shared_experts"):
        shared = _opt_int(c, "n_shared_experts") * _opt_int(c, "moe_intermediate_size", intermediate)
    rotary = c.get("partial_rotary_factor") or (c.get("rope_parameters") or {}).get("partial_rotary_factor") or 1.0
    dtype = _TORCH_DTYPES.get(str(c.get("torch_dtype") or c.get("dtype") or "bfloat16").replace("torch.", ""), "bf16")
    spec = ModelSpec(
        name=name,
        source=source,
        model_type=model_type,
        hidden=hidden,
        vocab=vocab,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_opt_int(c, "qk_nope_head_dim") + _opt_int(c, "qk_rope_head_dim") if mla else head_dim,
        v_head_dim=_opt_int(c, "v_head_dim", head_dim),
        intermediate=intermediate,
        layers=layers,
        gated_mlp=model_type not in _UNGATED,
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        attn_output_gate=bool(c.get("attn_output_gate", False)),
        rotary_fraction=float(rotary),
        experts=experts,
        top_k=top_k,
        expert_intermediate=_opt_int(c, "moe_intermediate_size", intermediate) if experts else 0,
        shared_intermediate=shared,
        q_lora_rank=_opt_int(c, "q_lora_rank"),
        kv_lora_rank=_opt_int(c, "kv_lora_rank"),
        qk_rope_dim=_opt_int(c, "qk_rope_head_dim"),
        qk_nope_dim=_opt_int(c, "qk_nope_head_dim"),
        linear_key_heads=_opt_int(c, "linear_num_key_heads"),
        linear_value_heads=_opt_int(c, "linear_num_value_heads"),
        linear_key_dim=_opt_int(c, "linear_key_head_dim"),
        linear_value_dim=_opt_int(c, "linear_value_head_dim"),
        linear_conv_kernel=_opt_int(c, "linear_conv_kernel_dim", 4),
        linear_state_bytes=2 if str(c.get("mamba_ssm_dtype", "float32")) in ("bfloat16", "float16") else 4,
        dtype=dtype,
    )
    if spec.count(attention=LINEAR) and not (spec.linear_key_heads and spec.linear_value_heads and spec.linear_key_dim):
        raise TracekitError(
            f"{what}: it has linear-attention layers but no linear_num_key_heads / "
            "linear_num_value_heads / linear_key_head_dim"
        )
    if weights is not None:
        return with_weights(spec, weights)
    qc = c.get("quantization_config")
    precision, how = _precision(qc, spec, what)
    return replace(spec, precision=precision, precision_source=how, precision_stated=bool(qc))


def _layer(i: int, c: dict, n_layers: int, experts: int, mla: bool, what: str) -> Layer:
    types = c.get("layer_types")
    window = _opt_int(c, "sliding_window") or None
    if isinstance(types, list) and len(types) == n_layers:
        kind = str(types[i])
        attention = {
            "full_attention": FULL,
            "attention": FULL,
            "sliding_attention": SLIDING,
            "linear_attention": LINEAR,
            "chunked_attention": SLIDING,
        }.get(kind)
        if attention is None:
            raise TracekitError(
                f"{what}: layer type {kind!r} is not one tracekit's cost model knows "
                "(full, sliding or linear attention)"
            )
    elif _opt_int(c, "full_attention_interval") and c.get("linear_num_key_heads"):
        attention = FULL if (i + 1) % _opt_int(c, "full_attention_interval") == 0 else LINEAR
    elif _opt_int(c, "sliding_window_pattern") and window:
        attention = FULL if (i + 1) % _opt_int(c, "sliding_window_pattern") == 0 else SLIDING
    elif c.get("use_sliding_window") and window:
        attention = SLIDING if i >= _opt_int(c, "max_window_layers", 0) else FULL
    elif c.get("model_type") in ("mistral",) and window:
        attention = SLIDING
    else:
        attention = FULL
    if mla and attention == FULL:
        attention = MLA
    mlp = DENSE
    if experts:
        dense_first = _opt_int(c, "first_k_dense_replace")
        freq = _opt_int(c, "moe_layer_freq", 1) or _opt_int(c, "decoder_sparse_step", 1)
        only = c.get("mlp_only_layers") or []
        if i >= dense_first and (i + 1) % max(freq, 1) == 0 and i not in only:
            mlp = MOE
    return Layer(attention, mlp, window if attention == SLIDING else None)


# --- quantization_config ------------------------------------------------------------------

# Module-name patterns of each weight class, for quantization include/exclude lists.
_CLASS_PATTERNS = {
    "attention": re.compile(r"self_attn|\.attn\b|(?<![a-z])[qkvo]_proj|qkv_proj|q_[ab]_proj|kv_[ab]_proj"),
    "linear_attention": re.compile(r"linear_attn"),
    "shared_experts": re.compile(r"shared_experts?(?!_gate)(?![a-z_])|shared_experts?\."),
    "experts": re.compile(r"(?<!shared_)experts"),
    "router": re.compile(r"mlp\.gate(?![_a-z])|router|shared_expert_gate"),
    "mlp": re.compile(r"(?:gate_up_proj|gate_proj|up_proj|down_proj|mlp\.fc\d)|\.mlp\*?$"),
    "lm_head": re.compile(r"lm_head"),
    "embedding": re.compile(r"embed"),
}
_QUANTISABLE = ("attention", "linear_attention", "mlp", "experts", "shared_experts")


def _classes_named(patterns: list) -> set[str]:
    """Weight classes that module-name patterns (globs, ``re:`` patterns, plain names) refer to."""
    found: set[str] = set()
    for p in patterns or []:
        if not isinstance(p, str):
            continue
        text = p.lower().removeprefix("re:")
        if text in ("linear", "*"):
            found.update(_QUANTISABLE)
            continue
        if "linear_attn" in text:
            found.add("linear_attention")
            continue
        for cls, pattern in _CLASS_PATTERNS.items():
            if cls == "mlp" and "expert" in text:
                continue
            if pattern.search(text):
                found.add(cls)
    return found


def _precision(qc: Any, spec: ModelSpec, what: str) -> tuple[dict[str, Precision], str]:
    base = PRECISIONS[spec.dtype]
    if not qc:
        return {}, f"the checkpoint's dtype {spec.dtype} (no quantization_config)"
    if not isinstance(qc, dict):
        raise TracekitError(f"{what}: its quantization_config is not a JSON object")
    method = str(qc.get("quant_method") or "").lower()
    stated = _classes_named(
        qc.get("modules_to_not_convert")
        or qc.get("ignore")
        or qc.get("exclude_modules")
        or qc.get("ignored_layers")
        or []
    )
    excluded = stated | (
        {"router", "lm_head", "embedding"} if method in ("fp8", "mxfp4", "modelopt") else {"lm_head", "embedding"}
    )
    if method == "fp8":
        block = qc.get("weight_block_size")
        prec = (
            PRECISIONS["fp8"]
            if block
            else replace(PRECISIONS["fp8"], bytes_per_param=1.0 + 4 / 4096, note="FP8 weights with per-channel scales")
        )
        how = f"quantization_config fp8{f' (blocks {block})' if block else ''}"
        targets = [c for c in _QUANTISABLE if c not in excluded]
    elif method == "mxfp4":
        prec = PRECISIONS["mxfp4"]
        how = "quantization_config mxfp4 (experts)"
        # gpt-oss quantises only its experts; the rest are listed as not converted.
        targets = [c for c in _QUANTISABLE if c not in excluded]
    elif method == "modelopt":
        algo = str(qc.get("quant_algo") or "").upper()
        if algo == "NVFP4":
            prec = PRECISIONS["nvfp4"]
        elif algo in ("FP8", "FP8_BLOCKWISE"):
            prec = PRECISIONS["fp8"]
        elif algo == "MIXED_PRECISION":
            return _groups(qc, spec, what, excluded, "quantization_config modelopt mixed precision", stated)
        else:
            raise TracekitError(
                f"{what}: modelopt quant_algo {algo or 'missing'!r} is not one tracekit understands "
                "(NVFP4, FP8); pass --weights to say how the weights are stored"
            )
        how = f"quantization_config modelopt {algo}"
        targets = [c for c in _QUANTISABLE if c not in excluded]
    elif method == "compressed-tensors" or "config_groups" in qc:
        return _groups(qc, spec, what, excluded, "quantization_config compressed-tensors", stated)
    elif method in ("gptq", "awq", "awq_marlin", "gptq_marlin"):
        bits = _opt_int(qc, "bits", 4)
        if bits not in (4, 8):
            raise TracekitError(f"{what}: {method} with {bits}-bit weights is not one tracekit understands")
        group = _opt_int(qc, "group_size", 128)
        # Per group of each output column: an fp16 scale and a zero point packed at the weights' width
        # (the checkpoint's scales and qzeros tensors beside qweight).
        prec = Precision(
            f"int{bits}", _block(bits, group, 2 + bits / 8), base.compute, f"{method} int{bits} weights, group {group}"
        )
        how = f"quantization_config {method} int{bits}"
        targets = [c for c in _QUANTISABLE if c not in excluded]
    elif method == "bitsandbytes":
        four = bool(qc.get("load_in_4bit"))
        prec = Precision("nf4" if four else "int8", _block(4 if four else 8, 64, 4), base.compute, "bitsandbytes")
        how = "quantization_config bitsandbytes"
        targets = [c for c in _QUANTISABLE if c not in excluded]
    else:
        raise TracekitError(
            f"{what}: quantization method {method or 'missing'!r} is not one tracekit understands "
            "(fp8, mxfp4, modelopt, compressed-tensors, gptq, awq, bitsandbytes); pass --weights "
            "to say how the weights are stored"
        )
    return {c: prec for c in targets}, how


def _groups(
    qc: dict, spec: ModelSpec, what: str, excluded: set[str], how: str, stated: set[str]
) -> tuple[dict[str, Precision], str]:
    """compressed-tensors / modelopt mixed precision: one precision per config group's targets.
    The LM head is left at the checkpoint's dtype unless a group names it (``Linear`` does not:
    checkpoints keep it wide) and the config's own ignore list does not."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        raise TracekitError(f"{what}: its quantization_config has no config_groups to say how weights are stored")
    out: dict[str, Precision] = {}
    names = []
    for group in groups.values():
        if not isinstance(group, dict):
            continue
        prec = _group_precision(group, what)
        names.append(prec.name)
        for cls in _classes_named(group.get("targets") or []):
            if cls in _QUANTISABLE or cls == "lm_head":
                out.setdefault(cls, prec)
    # The head's exclusion is a default a group may override; one the config states is not.
    overridable = {"lm_head"} - stated
    for cls in excluded - overridable:
        out.pop(cls, None)
    return out, f"{how} ({', '.join(sorted(set(names)))})"


def _group_precision(group: dict, what: str) -> Precision:
    w = group.get("weights") or {}
    a = group.get("input_activations") or {}
    bits, kind = _opt_int(w, "num_bits", 16), str(w.get("type") or "int")
    act_bits = _opt_int(a, "num_bits", 16) if a else 16
    group_size = _opt_int(w, "group_size", 0)
    if bits == 4 and kind == "float":
        return PRECISIONS["nvfp4"] if act_bits == 4 else PRECISIONS["nvfp4-w4a16"]
    if bits == 8 and kind == "float":
        return PRECISIONS["fp8"] if act_bits == 8 else replace(PRECISIONS["fp8"], compute="bf16", name="fp8-w8a16")
    if bits == 4 and kind == "int":
        return Precision("int4", _block(4, group_size or 128, 2), "bf16", "int4 weights (W4A16)")
    if bits == 8 and kind == "int":
        return PRECISIONS["int8"] if act_bits == 8 else Precision("int8-w8a16", 1 + 2 / 128, "bf16")
    raise TracekitError(
        f"{what}: a quantization group of {bits}-bit {kind} weights is not one tracekit understands; "
        "pass --weights to say how the weights are stored"
    )


WEIGHT_CHOICES = ("bf16", "fp16", "fp8", "nvfp4", "nvfp4-w4a16", "mxfp4", "int4", "int8")


def with_weights(spec: ModelSpec, weights: str, how: str | None = None) -> ModelSpec:
    """The model with every quantisable linear layer stored as ``weights`` (LM head,
    embeddings and router as the checkpoint dtype, as quantisation tools leave them).
    ``how``: where that came from, when not ``--weights``."""
    if weights not in PRECISIONS:
        raise TracekitError(f"--weights {weights!r} is not one of {', '.join(WEIGHT_CHOICES)}")
    prec = PRECISIONS[weights]
    return replace(
        spec,
        precision={c: prec for c in _QUANTISABLE},
        precision_stated=how is None,
        precision_source=how or f"--weights {weights} (linear layers; LM head, embeddings and router {spec.dtype})",
    )


def expected_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts the routing of ``tokens`` tokens touches, each choosing ``top_k`` of
    ``experts`` uniformly: E * (1 - (1 - k/E)^T)."""
    if tokens <= 0 or experts <= 0:
        return 0.0
    return experts * (1.0 - math.pow(1.0 - min(top_k, experts) / experts, tokens))
