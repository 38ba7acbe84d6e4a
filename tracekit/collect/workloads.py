"""Workloads to profile: built-in Llama presets (random weights, no download) and local checkpoints.

Presets are Hugging Face ``LlamaConfig`` values with real model shapes. They are built
directly on the target device with weight initialisation skipped, then filled with one
cheap ``normal_`` per tensor, so even the 8B preset starts in seconds on a GPU. The
weights are random: the trace's shapes, kernels and timings are those of the real model,
the generated tokens are nonsense.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import TracekitError


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    config: dict[str, Any]
    batch_size: int
    prompt_len: int
    new_tokens: int


_LLAMA_COMMON = dict(hidden_act="silu", rms_norm_eps=1e-5, attention_bias=False, mlp_bias=False)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "tiny",
            "a 5M-parameter Llama that profiles in seconds on a laptop CPU",
            dict(
                _LLAMA_COMMON,
                hidden_size=256,
                intermediate_size=688,
                num_hidden_layers=4,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=4096,
                max_position_embeddings=2048,
                tie_word_embeddings=False,
            ),
            batch_size=1,
            prompt_len=64,
            new_tokens=16,
        ),
        Preset(
            "1b",
            "Llama-3.2-1B shapes (1.24B parameters), for a GPU",
            dict(
                _LLAMA_COMMON,
                hidden_size=2048,
                intermediate_size=8192,
                num_hidden_layers=16,
                num_attention_heads=32,
                num_key_value_heads=8,
                head_dim=64,
                vocab_size=128256,
                max_position_embeddings=131072,
                tie_word_embeddings=True,
            ),
            batch_size=8,
            prompt_len=512,
            new_tokens=64,
        ),
        Preset(
            "8b",
            "Llama-3-8B shapes (8.03B parameters), for a GPU with 24 GB or more",
            dict(
                _LLAMA_COMMON,
                hidden_size=4096,
                intermediate_size=14336,
                num_hidden_layers=32,
                num_attention_heads=32,
                num_key_value_heads=8,
                head_dim=128,
                vocab_size=128256,
                max_position_embeddings=8192,
                tie_word_embeddings=False,
            ),
            batch_size=8,
            prompt_len=1024,
            new_tokens=64,
        ),
    )
}

DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
}

# Short names used in the sidecar and calibration (the roofline's dtype keys).
SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise TracekitError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}") from None


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a CUDA or ROCm GPU is usable, else 'cpu'; validate explicit choices."""
    import torch

    device = (device or "auto").lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device in ("gpu", "rocm", "hip"):
        device = "cuda"  # ROCm builds of torch expose HIP GPUs as "cuda"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TracekitError(
                f"--device {device} was asked for but torch {torch.__version__} sees no CUDA/ROCm GPU "
                "(use --device cpu, or install the torch build for your GPU)"
            )
        if ":" in device:
            idx = device.split(":", 1)[1]
            if not idx.isdigit() or int(idx) >= torch.cuda.device_count():
                raise TracekitError(f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s)")
        return device
    if device == "cpu":
        return device
    raise TracekitError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")


def resolve_dtype(dtype: str, device: str):
    """'auto' -> bf16 on a GPU, fp32 on the CPU; returns the torch dtype."""
    import torch

    key = (dtype or "auto").lower()
    if key == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if key not in DTYPES:
        raise TracekitError(f"unknown dtype {dtype!r}: use auto, fp32, bf16 or fp16")
    return getattr(torch, DTYPES[key])


def short_dtype(torch_dtype) -> str:
    name = str(torch_dtype).replace("torch.", "")
    return SHORT_DTYPE.get(name, name)


@dataclass
class Workload:
    """A built model ready to run, and what the sidecar says about it."""

    model: Any
    config: Any
    kind: str  # "preset" | "model"
    preset: str | None
    model_path: str | None
    device: str
    dtype: Any
    parameters: int
    architecture: str
    vocab_size: int
    info: dict[str, Any] = field(default_factory=dict)


def _dtype_kwarg() -> str:
    """``dtype=`` on transformers >= 4.56, ``torch_dtype=`` before."""
    import transformers

    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


@contextlib.contextmanager
def skip_init():
    """Build modules without running their (slow, random) weight initialisation."""
    ctx = None
    try:
        from transformers.initialization import no_init_weights as ctx  # transformers >= 5
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights as ctx  # transformers 4.x
        except ImportError:
            ctx = None
    if ctx is None:  # pragma: no cover - very old transformers
        import torch

        saved = {n: getattr(torch.nn.init, n) for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")}
        try:
            for n in saved:
                setattr(torch.nn.init, n, lambda t, *a, **k: t)
            yield
        finally:
            for n, f in saved.items():
                setattr(torch.nn.init, n, f)
        return
    # transformers 4.x's no_init_weights takes an argument; 5.x's none.
    try:
        cm = ctx(True)
    except TypeError:
        cm = ctx()
    with cm:
        yield


def fill_random(model, std: float = 0.02, seed: int = 0) -> None:
    """Cheap random weights: N(0, std) for matrices, ones for norm weights (1-D tensors)."""
    import torch

    gens: dict = {}
    with torch.no_grad():
        for p in model.parameters():
            if p.device.type == "meta":
                return
            if p.ndim <= 1:
                p.fill_(1.0)
                continue
            key = str(p.device)
            if key not in gens:
                gens[key] = torch.Generator(device=p.device).manual_seed(seed)
            p.normal_(0.0, std, generator=gens[key])


def preset_config(preset: Preset, layers: int | None = None):
    from transformers import LlamaConfig

    kw = dict(preset.config)
    if layers is not None:
        if layers < 1:
            raise TracekitError(f"--layers must be at least 1, not {layers}")
        kw["num_hidden_layers"] = layers
    cfg = LlamaConfig(**kw)
    cfg.architectures = ["LlamaForCausalLM"]
    return cfg


def build_from_config(cfg, device: str, dtype, seed: int = 0, attn_implementation: str | None = "sdpa"):
    """A causal LM from a config, allocated on ``device`` (``"meta"`` for shapes only), random weights."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {_dtype_kwarg(): dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    with skip_init(), torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, **kwargs)
        # Skipping init can skip the tying of input and output embeddings too.
        if getattr(cfg, "tie_word_embeddings", False):
            model.tie_weights()
    if device != "meta":
        fill_random(model, std=float(getattr(cfg, "initializer_range", 0.02) or 0.02), seed=seed)
    return model.eval()


def count_parameters(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def load_preset(name: str, device: str, dtype, layers: int | None = None, seed: int = 0) -> Workload:
    preset = get_preset(name)
    cfg = preset_config(preset, layers)
    try:
        model = build_from_config(cfg, device, dtype, seed=seed)
    except RuntimeError as e:
        if "out of memory" in str(e).lower():
            raise TracekitError(
                f"the {preset.name} preset does not fit in {device} memory in {short_dtype(dtype)} "
                "(try a smaller preset, --layers, or --dtype bf16)"
            ) from None
        raise
    return Workload(
        model=model,
        config=cfg,
        kind="preset",
        preset=preset.name,
        model_path=None,
        device=device,
        dtype=dtype,
        parameters=count_parameters(model),
        architecture="LlamaForCausalLM",
        vocab_size=int(cfg.vocab_size),
        info={"layers_override": layers},
    )


def load_local(path: str, device: str, dtype) -> Workload:
    """A Hugging Face checkpoint folder on disk (config.json plus weights)."""
    path = os.path.expanduser(path)
    if not os.path.isdir(path):
        raise TracekitError(f"--model {path}: no such folder (give a Hugging Face checkpoint folder)")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise TracekitError(f"--model {path}: no config.json there, so it is not a Hugging Face checkpoint folder")
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to parse is the user's input
        raise TracekitError(f"--model {path}: cannot read its config.json ({_first_line(e)})") from None
    kwargs = {_dtype_kwarg(): dtype, "local_files_only": True}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise TracekitError(f"--model {path}: cannot load it as a causal language model ({_first_line(e)})") from None
    try:
        # transformers wraps .to with functools.wraps(Module.to), whose typed signature has no self bound.
        model = model.to(device)  # type: ignore[arg-type]
    except RuntimeError as e:
        raise TracekitError(f"--model {path}: cannot move it to {device} ({_first_line(e)})") from None
    model.eval()
    cfg = getattr(model, "config", cfg)
    arch = (getattr(cfg, "architectures", None) or [type(model).__name__])[0]
    vocab = int(getattr(cfg, "vocab_size", 0) or model.get_input_embeddings().weight.shape[0])
    return Workload(
        model=model,
        config=cfg,
        kind="model",
        preset=None,
        model_path=os.path.abspath(path),
        device=device,
        dtype=dtype,
        parameters=count_parameters(model),
        architecture=arch,
        vocab_size=vocab,
    )


def config_dict(cfg) -> dict[str, Any]:
    """The model config as plain JSON-able values."""
    import json

    try:
        d = cfg.to_dict()
    except Exception:  # noqa: BLE001
        d = dict(vars(cfg))
    return json.loads(json.dumps(d, default=str))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]
