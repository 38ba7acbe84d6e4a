"""The phase-marker contract between ``collect`` (writer) and ``analysis`` (reader).

``tracekit collect`` and the public ``tracekit.phase`` / ``tracekit.decode_step``
context managers emit ``record_function`` ranges with these names; segmentation
parses them back. Keep both sides on this module so the names exist once.

Names:
    ``tracekit::prefill bs=8 tokens=1024 kv=1024``   one prefill pass (tokens = batch x prompt)
    ``tracekit::decode#3 bs=8 kv=8224``              decode step 3 (one token per sequence)
    ``tracekit::generate``                           the whole profiled generation (optional)
The ``key=value`` suffixes are optional; segmentation uses them when present. ``kv`` is
the keys the step's attention reads, summed over sequences (cache plus new tokens): the
number a model-based cost of attention needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "tracekit::"
PREFILL = PREFIX + "prefill"
DECODE = PREFIX + "decode"
GENERATE = PREFIX + "generate"

# The metadata sidecar written next to ``<name>.pt.trace.json.gz``.
SIDECAR_SUFFIX = ".tracekit.json"
TRACE_SUFFIX = ".pt.trace.json.gz"

_MARKER_RE = re.compile(r"^tracekit::(prefill|decode|generate)(?:#(\d+))?((?:\s+\w+=\d+)*)\s*$")
_KV_RE = re.compile(r"(\w+)=(\d+)")


@dataclass(frozen=True)
class Marker:
    phase: str  # "prefill", "decode" or "generate"
    index: int | None
    batch: int | None
    tokens: int | None
    kv_tokens: int | None = None


def prefill_name(batch: int | None = None, tokens: int | None = None, kv_tokens: int | None = None) -> str:
    return _with_fields(PREFILL, batch, tokens, kv_tokens)


def decode_name(index: int, batch: int | None = None, tokens: int | None = None, kv_tokens: int | None = None) -> str:
    return _with_fields(f"{DECODE}#{int(index)}", batch, tokens, kv_tokens)


def _with_fields(base: str, batch: int | None, tokens: int | None, kv_tokens: int | None = None) -> str:
    parts = [base]
    if batch is not None:
        parts.append(f"bs={int(batch)}")
    if tokens is not None:
        parts.append(f"tokens={int(tokens)}")
    if kv_tokens is not None:
        parts.append(f"kv={int(kv_tokens)}")
    return " ".join(parts)


def parse(name: str) -> Marker | None:
    """Return the marker a range name encodes, or None if it is not one of ours."""
    if not name.startswith(PREFIX):
        return None
    m = _MARKER_RE.match(name)
    if m is None:
        return None
    fields = dict(_KV_RE.findall(m.group(3) or ""))
    return Marker(
        phase=m.group(1),
        index=int(m.group(2)) if m.group(2) is not None else None,
        batch=int(fields["bs"]) if "bs" in fields else None,
        tokens=int(fields["tokens"]) if "tokens" in fields else None,
        kv_tokens=int(fields["kv"]) if "kv" in fields else None,
    )


def sidecar_path_for(trace_path: str) -> str:
    """Where the metadata sidecar of a trace file lives."""
    for suffix in (TRACE_SUFFIX, ".json.gz", ".json.zst", ".json"):
        if trace_path.endswith(suffix):
            return trace_path[: -len(suffix)] + SIDECAR_SUFFIX
    return trace_path + SIDECAR_SUFFIX
