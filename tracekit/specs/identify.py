"""Which GPU a trace ran on, from every piece of evidence the trace holds.

1. ``--spec-file`` / ``--gpu`` (the user knows best);
2. the deviceProperties of the device the kernels ran on (``Trace.device_resolution``:
   by id, or the one part all listed devices are when the ids were renumbered), looked
   up as ``lookup`` describes;
3. when the trace has no usable properties (none, or a generic name without the fields
   to tell parts apart), the architecture tags its kernel names carry: NVIDIA ``sm90``,
   ``sm_100a``, ``Sm120``, ``cutlass_80_`` and AMD ``gfx942`` / ``ISA942``. Kernels built
   for an architecture run on it (NVIDIA: or a later minor version of it), so the newest
   tag found names the family. A family with one row in the database is that row; otherwise the reason names
   the candidates and the ``--gpu`` to pass. A named GPU missing from the database is
   never replaced by a family member (an H20 is not an H100).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracekit.specs.database import all_specs
from tracekit.specs.lookup import GENERIC_NAMES, SpecMatch, lookup

_NVIDIA_TAG = re.compile(r"(?:sm_?|cutlass_)(\d{2,3})(?=[af]?(?:\D|$))", re.IGNORECASE)
_AMD_TAG = re.compile(r"(?:gfx|isa)(9\d[0-9a-f]|1[0-2]\d\d)(?![0-9a-f])", re.IGNORECASE)
# gfx ids whose name is not major * 100 + minor * 10 + stepping.
_AMD_CC = {"90a": (9, 0), "942": (9, 4), "940": (9, 4), "941": (9, 4), "950": (9, 5), "908": (9, 0)}


def architecture(kernel_names: Iterable[str]) -> tuple[str, str, tuple[int, int]] | None:
    """(vendor, tag as written, compute capability) of the newest architecture tag in the names."""
    best: tuple[str, str, tuple[int, int]] | None = None
    for name in set(kernel_names):
        for m in _NVIDIA_TAG.finditer(name):
            n = int(m.group(1))
            if n < 30:  # "sm_8" style or unrelated digits
                continue
            cc = (n // 10, n % 10)
            if best is None or (best[0] == "NVIDIA" and cc > best[2]):
                best = ("NVIDIA", f"sm_{n}", cc)
        for m in _AMD_TAG.finditer(name):
            gfx = m.group(1).lower()
            amd_cc = _AMD_CC.get(gfx)
            if amd_cc is None and gfx.isdigit():
                amd_cc = (int(gfx[:-2]), int(gfx[-2]))
            if amd_cc is not None and (best is None or best[0] != "AMD" or amd_cc > best[2]):
                best = ("AMD", f"gfx{gfx}", amd_cc)
    return best


def _runs(tag: str, built: tuple[int, int], device: tuple[int, int]) -> bool:
    """Whether kernels built for ``built`` run on a ``device``: NVIDIA code runs on the same
    major architecture at the same or a later minor version; AMD code only on its own gfx id."""
    if tag.startswith("gfx"):
        return device == built
    return device[0] == built[0] and device[1] >= built[1]


def identify(
    props: Mapping[str, Any] | None,
    note: str | None,
    kernel_names: Iterable[str],
    *,
    gpu: str | None = None,
    spec_file: str | Path | None = None,
) -> SpecMatch:
    """The spec row to price the trace against, how it was found, or why there is none."""
    match = lookup(props, gpu=gpu, spec_file=spec_file)
    if gpu is not None or spec_file is not None:
        return match
    if match.spec is not None:
        return replace(match, how=f"{match.how} ({note})") if note else match
    name = (props or {}).get("name") if props else None
    if isinstance(name, str) and name.strip().casefold() not in GENERIC_NAMES:
        return match  # a named part the database lacks: no family member stands in for it
    why = match.reason or "the trace does not identify its GPU"
    if note:
        why = f"{note}; {why}"
    arch = architecture(kernel_names)
    if arch is None:
        return replace(match, reason=why)
    vendor, tag, cc = arch
    family = [
        s for s in all_specs() if s.vendor == vendor and s.compute_capability and _runs(tag, cc, s.compute_capability)
    ]
    if len(family) == 1:
        return SpecMatch(
            family[0],
            f"architecture tag {tag} in kernel names (the only {vendor} part of that "
            f"architecture in tracekit's database; {why})",
        )
    if not family:
        return replace(
            match,
            reason=f"{why}; kernel names are built for {tag}, an architecture tracekit's "
            "database has no part of: pass --gpu NAME or a spec file",
        )
    choices = " or ".join(f"--gpu {s.key}" for s in family)
    names = ", ".join(s.name for s in family)
    return replace(
        match, reason=f"{why}; kernel names are built for {tag} ({names} in tracekit's database): pass {choices}"
    )
