"""Model architectures for the model-based cost path: a built-in registry, Hugging Face
``config.json`` reading, and the FLOPs and bytes of a step per layer component.

- ``config``: ``ModelSpec`` (sizes, layer kinds, experts, stored precision) from a config dict;
- ``registry``: the built-in architectures (``registry.json``, a source per entry), and
  ``load_model(name_or_path)`` for ``--model``;
- ``costs``: ``step_costs(model, batch, tp)``, pure arithmetic per layer component.

No torch, no network: a registry name, a local ``config.json`` or a checkpoint folder.
"""

from tracekit.models.config import PRECISIONS, WEIGHT_CHOICES, ModelSpec, Precision, from_config, with_weights
from tracekit.models.registry import load_model, registry_entries

__all__ = [
    "PRECISIONS",
    "WEIGHT_CHOICES",
    "ModelSpec",
    "Precision",
    "from_config",
    "load_model",
    "registry_entries",
    "with_weights",
]
