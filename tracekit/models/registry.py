"""The built-in model registry (``registry.json``) and what ``--model NAME|PATH`` means.

``registry.json``: ``{"format": "tracekit-models", "version": 1, "models": [ENTRY, ...]}``,
ENTRY = ``key``, ``name``, ``aliases`` (Hugging Face repo ids, other spellings), ``source``
(where the config came from), ``notes``, and ``config``: the checkpoint's ``config.json``
verbatim (bookkeeping keys dropped), read by ``tracekit.models.config.from_config``.

``load_model`` takes, in order: a path to a ``config.json``, a folder holding one (a
checkpoint folder: nothing is downloaded), a registry key, alias or display name
(case and punctuation folded).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from tracekit.errors import TracekitError, close_matches
from tracekit.models.config import ModelSpec, from_config

DATA_FILE = "registry.json"
FORMAT, VERSION = "tracekit-models", 1


@lru_cache(maxsize=1)
def registry_entries() -> tuple[dict[str, Any], ...]:
    """Every registry entry, as stored."""
    data = json.loads(resources.files("tracekit.models").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    if (data.get("format"), data.get("version")) != (FORMAT, VERSION):
        raise RuntimeError(f"tracekit/models/{DATA_FILE} is not {FORMAT} version {VERSION}")
    return tuple(data["models"])


def _fold(name: str) -> str:
    return re.sub(r"[^0-9a-z.]+", "-", name.casefold()).strip("-")


def find_entry(name: str) -> dict[str, Any] | None:
    wanted = _fold(name)
    for e in registry_entries():
        if wanted in {_fold(n) for n in (e["key"], e.get("name", ""), *e.get("aliases", []))}:
            return e
    return None


def load_model(name_or_path: str, *, weights: str | None = None, option: str = "--model") -> ModelSpec:
    """The model ``--model`` names: a config.json, a checkpoint folder, or a registry entry. A name
    that fails is named by ``option``, the flag the user typed (``tracekit models --show``)."""
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        if not os.path.isfile(path):
            raise TracekitError(
                f"{option} {name_or_path}: the folder holds no config.json (a Hugging Face checkpoint folder has one)"
            )
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise TracekitError(f"{option} {name_or_path}: cannot read it as a config.json ({e})") from None
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) or name_or_path
        return from_config(cfg, label, f"config.json at {path}", weights=weights)
    entry = find_entry(name_or_path)
    if entry is None:
        close = close_matches(
            _fold(name_or_path),
            (
                (_fold(n), e["key"])
                for e in registry_entries()
                for n in (e["key"], e.get("name", ""), *e.get("aliases", []))
            ),
        )
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise TracekitError(
            f"{option} {name_or_path!r} is neither a config.json, a folder holding one, nor a model in "
            f"tracekit's registry (tracekit models lists it){hint}"
        )
    return from_config(
        entry["config"],
        entry.get("name") or entry["key"],
        f"tracekit registry entry {entry['key']} ({entry['source']})",
        weights=weights,
    )


def from_sidecar(sidecar: dict[str, Any] | None) -> ModelSpec | None:
    """The model ``tracekit collect`` ran, from the config its sidecar recorded; None if absent."""
    work = (sidecar or {}).get("workload") or {}
    cfg = work.get("model_config")
    if not isinstance(cfg, dict):
        return None
    name = work.get("preset") or work.get("model_path") or work.get("architecture") or "collected model"
    spec = from_config(cfg, str(name), "the model config tracekit collect recorded in the sidecar")
    # The run's dtype, not the config's: collect may cast (--dtype).
    dtype = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}.get(str(work.get("dtype")))
    from dataclasses import replace

    return replace(spec, dtype=dtype) if dtype and not spec.precision else spec
