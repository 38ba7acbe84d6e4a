"""The command line's side of the cache (``tracekit.cache``): ``--no-cache``, and the documents a
command keeps for its second run on the same inputs.

Tables alone still leave the analysis to redo (about a second on the 379 MB benchmark trace),
so ``summary`` keeps its printed text and ``report`` the analysis's JSON document
(``Analysis.to_dict()``, all its renderers need), each keyed by the trace's identity, the path
as typed (documents print it), every analysis option with the identity of any file it names
(``--model`` config, ``--spec-file``, ``--graph-capture``), ``--tokens``/``--batch``, the
TRACEKIT_* settings, and tracekit's code. A hit prints without importing pandas.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

_OFF = "tracekit.no_cache"


def no_cache_option(f):
    """``--no-cache``: neither read from the cache nor write to it, for this run."""
    return click.option(
        "--no-cache",
        is_flag=True,
        expose_value=False,
        callback=_no_cache,
        help="Neither use nor fill the cache of read traces and analyses (also: "
        "TRACEKIT_NO_CACHE=1; where it lives: TRACEKIT_CACHE_DIR).",
    )(f)


def _no_cache(ctx, param, value):
    if value:
        ctx.meta[_OFF] = True
    return value


def cache_enabled() -> bool:
    from tracekit.cache import disabled

    ctx = click.get_current_context(silent=True)
    return not (disabled() or (ctx is not None and ctx.meta.get(_OFF)))


def document_key(kind: str, traces: list[str], values: dict[str, Any]) -> str | None:
    """The key of ``kind``'s document made from ``traces`` with the command's option ``values``
    (``stated_figures()`` among them); None when the cache is off or an input cannot be
    identified (then nothing is kept)."""
    if not cache_enabled():
        return None
    from tracekit.cache import env_settings, make_key, path_identity

    try:
        inputs = [[t, path_identity(t)] for t in traces]
        options = {k: _identified(v) for k, v in sorted(values.items())}
    except OSError:
        return None
    return make_key(kind, inputs, options, env_settings())


def _identified(value: Any) -> Any:
    """An option's value as JSON, with the identity of the file or folder it names, if any (a
    model's config.json, a spec file, a folder of capture traces or a checkpoint)."""
    from tracekit.cache import path_identity

    if isinstance(value, (list, tuple)):
        return [_identified(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _identified(v) for k, v in sorted(value.items())}
    if isinstance(value, str) and os.path.exists(value):
        return [value, path_identity(value)]
    return value


def get_text(kind: str, key: str | None) -> str | None:
    if key is None:
        return None
    from tracekit.cache import get_text as get

    return get(kind, key)


def put_text(kind: str, key: str | None, text: str, trace: str) -> None:
    if key is not None:
        from tracekit.cache import put_text as put

        put(kind, key, text, info={"path": trace})


def get_json(kind: str, key: str | None) -> dict | None:
    text = get_text(kind, key)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def put_json(kind: str, key: str | None, data: dict, trace: str) -> None:
    if key is None:
        return
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError):  # not the JSON contract: not kept, never half-kept
        return
    put_text(kind, key, text, trace)
