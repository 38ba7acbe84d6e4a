"""Which database row describes the GPU a trace ran on.

Order, from the most to the least explicit:

1. a user spec file, then ``--gpu NAME`` (key, display name or device name, normalised);
2. the exact ``deviceProperties.name``, then a normalised form of it (case, punctuation and
   vendor words such as "NVIDIA", "Tesla", "AMD Instinct" ignored). Names are compared whole,
   never as substrings: "NVIDIA L4" cannot reach L40 or L40S. A name on several rows (GH200
   variants) is settled by the properties; a name whose row disagrees with the trace's compute
   capability, SM count or memory is not trusted (a different SKU with the same name);
3. a MIG slice ("<parent> MIG 3g.40gb") resolves its parent, then scales compute by the slice's
   share of SMs and bandwidth by its share of memory (each MIG memory slice brings its own
   memory controllers);
4. only for generic names ("", "AMD Radeon Graphics"): the (compute capability, SM count, memory)
   fallback. A key that fits more than one row (MI210 vs one MI250 die) is unknown, not a guess.

A named GPU that is not in the database is unknown: the fallback is not applied to it (a V100
PCIe would pass for a V100 SXM2, an H200 NVL for an H200 SXM), but the reason names the rows it
resembles so the user can pass ``--gpu``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError, close_matches
from tracekit.specs.database import all_specs, load_spec_file
from tracekit.specs.model import GpuSpec

# Names that say nothing about the part (ROCm on some versions, vLLM-produced traces).
GENERIC_NAMES = frozenset({"", "amd radeon graphics"})
_MIG = re.compile(r"^(?P<parent>.*\S)\s+MIG\s+(?P<profile>\S+)\s*$")
# Words that vary between tables, drivers and users without changing the part.
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "amd", "instinct"})
# totalGlobalMem differs by up to ~2% across drivers for the same part (README of the research table).
MEMORY_TOLERANCE = 0.03
# Rows that only know nominal memory: reported GiB / nominal GB lies in this range for every
# observed row (ECC reservations on GDDR parts bring it down to ~0.92).
NOMINAL_MEMORY_RANGE = (0.88, 1.03)
GIB = 1 << 30
# Bounds no GPU crosses, to tell a garbled deviceProperties field from another SKU: the
# largest parts have a few hundred SMs or CUs (MI300X 304, B300 160) and a few hundred GB.
MAX_SMS = 1024
MAX_MEMORY = 16 << 40

EXACT = "exact name"
NORMALISED = "normalised name"
PROPERTIES = "compute capability + SMs + memory"
GPU_OPTION = "--gpu override"
SPEC_FILE = "user spec file"
UNKNOWN = "unknown"
_ADVICE = "pass --gpu NAME or a spec file (tracekit gpus lists the database)"


@dataclass(frozen=True)
class SpecMatch:
    """The spec a trace is priced against, how it was found, or why there is none."""

    spec: GpuSpec | None
    how: str
    reason: str | None = None
    # Fields of deviceProperties that were ignored (a value no GPU can have), one sentence each.
    notes: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.spec is not None


def _unknown(reason: str) -> SpecMatch:
    return SpecMatch(None, UNKNOWN, reason)


def normalise_name(name: str) -> str:
    """Case, punctuation and vendor words folded away; compared whole, never as a substring."""
    words = re.sub(r"[^0-9a-z.]+", " ", name.casefold()).split()
    return " ".join(w for w in words if w not in _VENDOR_WORDS)


@dataclass(frozen=True)
class _Device:
    """The identifying fields of one deviceProperties entry; None where absent or malformed."""

    name: str
    major: int | None
    minor: int | None
    sms: int | None
    mem: int | None
    # Fields ignored as garbled (a value no GPU can have), one sentence each.
    notes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, props: Mapping[str, Any]) -> _Device:
        def integer(key: str) -> int | None:
            # Trace contents are untrusted: anything but a whole number counts as absent.
            value = props.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        name = props.get("name")
        sms, notes = _sm_count(integer("numSms"), integer("multiProcessorCount"))
        mem = integer("totalGlobalMem")
        if mem is not None and not 0 < mem <= MAX_MEMORY:
            notes.append(f"deviceProperties totalGlobalMem {mem} is no GPU's memory size: ignored (a garbled field)")
            mem = None
        return cls(
            name=name.strip() if isinstance(name, str) else "",
            major=integer("computeMajor"),
            minor=integer("computeMinor"),
            sms=sms,
            mem=mem,
            notes=tuple(notes),
        )

    def missing(self) -> list[str]:
        fields = {
            "computeMajor": self.major,
            "computeMinor": self.minor,
            "numSms": self.sms,
            "totalGlobalMem": self.mem,
        }
        return [k for k, v in fields.items() if v is None]

    def key_text(self) -> str:
        mem = "unknown memory" if self.mem is None else f"{self.mem / GIB:.1f} GiB"  # (callers check ``missing``)
        return f"compute capability {self.major}.{self.minor}, {self.sms} SMs and {mem}"


def _sm_count(num_sms: int | None, mp_count: int | None) -> tuple[int | None, list[str]]:
    """The SM count of a deviceProperties entry from numSms and multiProcessorCount (CUDA's
    name for it), and a note for each value ignored: one no GPU can have, or two that
    contradict each other (then neither is trusted and the name decides)."""
    notes = []

    def plausible(v: int | None) -> bool:
        return v is not None and 0 < v <= MAX_SMS

    if num_sms is not None and not plausible(num_sms):
        instead = f"multiProcessorCount's {mp_count} stands" if plausible(mp_count) else "the device name decides"
        notes.append(
            f"deviceProperties numSms {num_sms} is no GPU's SM count (no GPU has over {MAX_SMS}): ignored "
            f"as a garbled field; {instead}"
        )
        num_sms = None
    if mp_count is not None and not plausible(mp_count):
        notes.append(
            f"deviceProperties multiProcessorCount {mp_count} is no GPU's SM count: ignored as a garbled field"
        )
        mp_count = None
    if num_sms is not None and mp_count is not None and num_sms != mp_count:
        notes.append(
            f"deviceProperties numSms {num_sms} and multiProcessorCount {mp_count} contradict each other: "
            "neither is trusted, the device name decides"
        )
        return None, notes
    return (num_sms if num_sms is not None else mp_count), notes


def _memory_fits(spec: GpuSpec, mem: int) -> bool:
    if spec.total_global_mem:
        return abs(mem - spec.total_global_mem) <= MEMORY_TOLERANCE * spec.total_global_mem
    if spec.memory_gb:
        low, high = NOMINAL_MEMORY_RANGE
        return low <= mem / GIB / spec.memory_gb <= high
    return True  # unknown memory cannot rule a row out


def _slice_fits(spec: GpuSpec, mem: int) -> bool:
    # A MIG slice has at most its parent's memory.
    return not spec.total_global_mem or mem <= spec.total_global_mem * (1 + MEMORY_TOLERANCE)


def _memory_text(spec: GpuSpec) -> str:
    if spec.total_global_mem:
        return f"{spec.total_global_mem / GIB:.1f} GiB"
    return f"~{spec.memory_gb:g} GB" if spec.memory_gb else "unknown"


def _disagreements(spec: GpuSpec, dev: _Device, *, mig: bool = False) -> list[str]:
    """Properties the trace carries that contradict the row (what it cannot check passes)."""
    found = []
    cc = spec.compute_capability
    if cc and dev.major is not None and dev.minor is not None and (dev.major, dev.minor) != cc:
        found.append(f"compute capability {dev.major}.{dev.minor}, not {cc[0]}.{cc[1]}")
    if spec.num_sms and dev.sms is not None and (dev.sms > spec.num_sms if mig else dev.sms != spec.num_sms):
        found.append(f"{dev.sms} SMs, not {spec.num_sms}")
    if dev.mem is not None and not (_slice_fits(spec, dev.mem) if mig else _memory_fits(spec, dev.mem)):
        found.append(f"{dev.mem / GIB:.1f} GiB of memory, not {_memory_text(spec)}")
    return found


def _resembling(dev: _Device, specs: Iterable[GpuSpec]) -> list[GpuSpec]:
    """Rows the (compute capability, SMs, memory) key cannot rule out; all four fields must be present."""
    if dev.missing():
        return []
    return [s for s in specs if s.compute_capability and not _disagreements(s, dev)]


def _names(specs: Iterable[GpuSpec]) -> str:
    return ", ".join(repr(s.name) for s in specs)


def _choices(specs: Iterable[GpuSpec], option: str = "--gpu") -> str:
    return "pass " + " or ".join(f"{option} {s.key}" for s in specs)


def _by_device_name(name: str, specs: tuple[GpuSpec, ...]) -> tuple[list[GpuSpec], str]:
    """Rows carrying this device name exactly, else in normalised form."""
    exact = [s for s in specs if name in s.device_names]
    if exact:
        return exact, EXACT
    wanted = normalise_name(name)
    return [s for s in specs if any(normalise_name(n) == wanted for n in s.device_names)], NORMALISED


def _by_generic_name(dev: _Device, specs: tuple[GpuSpec, ...]) -> SpecMatch:
    if missing := dev.missing():
        return _unknown(
            f"device name {dev.name!r} is generic and deviceProperties lack {', '.join(missing)} "
            f"to identify the GPU by; {_ADVICE}"
        )
    candidates = _resembling(dev, specs)
    if len(candidates) == 1:
        return SpecMatch(candidates[0], PROPERTIES)
    if not candidates:
        return _unknown(
            f"device name {dev.name!r} is generic and no GPU in tracekit's database has {dev.key_text()}; {_ADVICE}"
        )
    return _unknown(
        f"device name {dev.name!r} is generic and {dev.key_text()} fit several GPUs "
        f"({_names(candidates)}), which tracekit will not guess between; {_choices(candidates)}"
    )


def _scale_to_mig(parent: GpuSpec, dev: _Device, profile: str, how: str) -> SpecMatch:
    if not (dev.sms and dev.mem and parent.num_sms and parent.total_global_mem):
        return _unknown(
            f"MIG slice {profile} of {parent.name}: its share of the GPU needs numSms and "
            f"totalGlobalMem from both the trace and the database; {_ADVICE}"
        )
    sm_share = dev.sms / parent.num_sms
    mem_share = min(1.0, dev.mem / parent.total_global_mem)
    spec = replace(
        parent,
        key=f"{parent.key}-mig-{profile}",
        name=f"{parent.name} MIG {profile}",
        matrix_flops={d: v * sm_share for d, v in parent.matrix_flops.items()},
        vector_flops={d: v * sm_share for d, v in parent.vector_flops.items()},
        peak_bandwidth=None if parent.peak_bandwidth is None else parent.peak_bandwidth * mem_share,
        num_sms=dev.sms,
        total_global_mem=dev.mem,
        memory_gb=None if parent.memory_gb is None else parent.memory_gb * mem_share,
    )
    return SpecMatch(
        spec,
        f"{how} of the parent GPU, MIG slice {profile}: compute scaled by "
        f"{dev.sms}/{parent.num_sms} SMs, bandwidth by its memory share {mem_share:.2f}",
    )


def _by_name(dev: _Device, specs: tuple[GpuSpec, ...]) -> SpecMatch:
    mig = _MIG.match(dev.name)
    rows, how = _by_device_name(mig["parent"] if mig else dev.name, specs)
    if not rows:
        resembling = _resembling(dev, specs)
        hint = ""
        if resembling:
            hint = f" (its {dev.key_text()} match {_names(resembling)}: if it is the same part, {_choices(resembling)})"
        return _unknown(f"device name {dev.name!r} is not in tracekit's GPU database; {_ADVICE}{hint}")
    consistent = [s for s in rows if not _disagreements(s, dev, mig=mig is not None)]
    if not consistent:
        problems = "; ".join(", ".join(_disagreements(s, dev, mig=mig is not None)) for s in rows)
        return _unknown(
            f"device name {dev.name!r} names {_names(rows)} in tracekit's database, but the "
            f"trace's deviceProperties disagree ({problems}): probably a different SKU; {_ADVICE}"
        )
    if len(consistent) > 1:
        return _unknown(
            f"device name {dev.name!r} fits {_names(consistent)} and deviceProperties do not "
            f"tell them apart; {_choices(consistent)}"
        )
    if len(rows) > 1:
        how = f"{how} + compute capability, SMs and memory"
    if mig:
        return _scale_to_mig(consistent[0], dev, mig["profile"], how)
    return SpecMatch(consistent[0], how)


def match_device(props: Mapping[str, Any], specs: tuple[GpuSpec, ...]) -> SpecMatch:
    """The row of ``specs`` that one ``deviceProperties`` entry describes, or why none does."""
    dev = _Device.parse(props)
    match = _by_generic_name(dev, specs) if dev.name.casefold() in GENERIC_NAMES else _by_name(dev, specs)
    return replace(match, notes=match.notes + dev.notes) if dev.notes else match


def spec_by_name(name: str, specs: tuple[GpuSpec, ...] | None = None, option: str = "--gpu") -> GpuSpec:
    """The row ``--gpu NAME`` means: its key, display name or a device name, normalised. A name
    that fails is named by ``option``, the flag the user typed (``--to``, ``--gpu-before``, ...)."""
    specs = all_specs() if specs is None else specs
    wanted = normalise_name(name)
    found = [s for s in specs if wanted in {normalise_name(n) for n in (s.key, s.name, *s.device_names)}]
    if len(found) == 1:
        return found[0]
    if found:  # a device name shared by several rows
        raise TracekitError(f"{option} {name!r} names several GPUs ({_names(found)}); {_choices(found, option)}")
    # Prefixes, substrings and near spellings are fine for suggestions, never for matches.
    close = close_matches(
        wanted, ((text, s.name) for s in specs for text in (normalise_name(s.key), normalise_name(s.name))), n=6
    )
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise TracekitError(f"{option} {name!r} is not in tracekit's GPU database (tracekit gpus lists it){hint}")


def lookup(
    device_props: Mapping[str, Any] | None,
    *,
    gpu: str | None = None,
    spec_file: str | Path | None = None,
) -> SpecMatch:
    """The spec to price a trace's kernels against, from its ``deviceProperties`` entry.

    ``spec_file`` and ``gpu`` override the trace (a wrong one raises ``TracekitError``: the user
    asked for it); an unidentified GPU gives ``spec=None`` and the reason, never a guess.
    """
    if spec_file is not None and gpu is not None:
        raise TracekitError("pass either --gpu or a GPU spec file, not both")
    if spec_file is not None:
        return SpecMatch(load_spec_file(spec_file), SPEC_FILE)
    if gpu is not None:
        return SpecMatch(spec_by_name(gpu), GPU_OPTION)
    if not device_props:
        return _unknown(
            f"the trace has no deviceProperties for this device, so its GPU cannot be identified; {_ADVICE}"
        )
    return match_device(device_props, all_specs())
