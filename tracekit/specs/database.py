"""The GPU spec database shipped in the package (``gpus.json``), and user spec files.

Format of ``gpus.json``::

    {"format": "tracekit-gpu-specs", "version": 1, "gpus": [ENTRY, ...]}

A user spec file (``--spec-file``, JSON, or TOML on Python >= 3.11) holds one ENTRY at top level.
ENTRY fields (units in the names; only ``name`` is required in a user file):

- ``key``: stable id (``"h100-sxm"``); ``name``: display name (``"H100 SXM"``); ``vendor``, ``arch``.
- ``device_names``: the exact ``deviceProperties.name`` strings the driver reports for this part.
  A name may sit on several rows (``"NVIDIA GH200 120GB"``): lookup then separates them by
  compute capability, SM count and memory. Generic names ("", "AMD Radeon Graphics") never appear.
- ``compute_capability`` [major, minor], ``num_sms``, ``total_global_mem`` (bytes, as a trace
  reports it; null where never observed), ``memory_gb`` (nominal), ``memory_type``.
- ``memory_bandwidth_GBps``: peak DRAM bandwidth, GB/s = 1e9 B/s.
- ``interconnect``: the scale-up link between GPUs of one node ("NVLink 4", "Infinity Fabric");
  ``interconnect_GBps``: its peak bandwidth per GPU *per direction* (NVIDIA quotes the two
  directions added: H100's "900 GB/s" NVLink is 450 here). The roof of collectives (all-reduce,
  all-gather); null where the part has no such link (PCIe-only cards).
- ``matrix_tflops`` / ``vector_tflops``: dense peaks (never 2:4 sparse), TFLOP/s = 1e12 (TOP/s
  for int8), keyed by ``fp64 tf32 fp32 fp16 bf16 fp8 int8 fp4``. Matrix rates use FP32
  accumulate. A missing dtype means unsupported or unknown. Matrix ``fp32`` is given only where
  an FP32 GEMM has its own matrix rate (AMD MFMA); see ``tracekit.specs.model`` for the rules
  that fill the other gaps.
- ``achievable``: ``compute`` and ``bandwidth`` factors of peak that well-tuned kernels reach,
  each with a ``*_source`` saying whether it is measured (which measurement) or a vendor-class
  default. Omitted in a user file: factor 1.0 (achievable = peak).
- ``boost_clock_MHz``, ``l2_cache_MB``, ``tdp_W``, ``scope`` (what one torch device is: per GPU,
  per GCD), ``confidence``.
- ``sources``: where the peaks come from (datasheets); ``provenance``: the research table's
  evidence columns (name and deviceProperties evidence, sparsity, disagreements, measurements);
  ``tracekit_notes``: choices made here that differ from or add to the research table.

The rows were converted once from ``../shared/gpu-specs/gpus.csv`` (29 GPUs) plus two rows added
by tracekit (A100 40GB PCIe, MI250 per GCD); this file is now the source of truth, and
``tests/test_specs.py`` checks that its peaks agree with that table.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

import msgspec

from tracekit.errors import TracekitError
from tracekit.specs.model import DTYPES, GIGA, TERA, GpuSpec

DATA_FILE = "gpus.json"
FORMAT = "tracekit-gpu-specs"
VERSION = 1


class Achievable(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    compute: float = 1.0
    compute_source: str = "no achievable factor given: achievable = peak"
    bandwidth: float = 1.0
    bandwidth_source: str = "no achievable factor given: achievable = peak"


class Entry(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One row of the data file, exactly as stored."""

    name: str
    key: str = ""
    vendor: str = ""
    arch: str = ""
    device_names: list[str] = []
    compute_capability: tuple[int, int] | None = None
    num_sms: int | None = None
    total_global_mem: int | None = None
    memory_gb: float | None = None
    memory_type: str = ""
    memory_bandwidth_GBps: float | None = None
    interconnect: str = ""
    interconnect_GBps: float | None = None
    boost_clock_MHz: float | None = None
    l2_cache_MB: float | None = None
    tdp_W: float | None = None
    scope: str = ""
    matrix_tflops: dict[str, float] = {}
    vector_tflops: dict[str, float] = {}
    achievable: Achievable = msgspec.field(default_factory=Achievable)
    confidence: str = ""
    sources: str = ""
    provenance: dict[str, str] = {}
    tracekit_notes: str = ""


class Database(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    gpus: list[Entry]


def _problems(entry: Entry) -> list[str]:
    """What makes an entry unusable (checks msgspec's types cannot express)."""
    problems = []
    for unit, peaks in (("matrix_tflops", entry.matrix_tflops), ("vector_tflops", entry.vector_tflops)):
        known = ", ".join(DTYPES)
        problems += [f"{unit} has unknown dtype {d!r} (known: {known})" for d in peaks if d not in DTYPES]
        problems += [f"{unit}.{d} must be positive" for d, v in peaks.items() if v <= 0]
    if not entry.matrix_tflops and not entry.vector_tflops and entry.memory_bandwidth_GBps is None:
        problems.append("it gives no peak (matrix_tflops, vector_tflops or memory_bandwidth_GBps)")
    if entry.memory_bandwidth_GBps is not None and entry.memory_bandwidth_GBps <= 0:
        problems.append("memory_bandwidth_GBps must be positive")
    if entry.interconnect_GBps is not None and entry.interconnect_GBps <= 0:
        problems.append("interconnect_GBps must be positive")
    for what, factor in (("compute", entry.achievable.compute), ("bandwidth", entry.achievable.bandwidth)):
        if not 0 < factor <= 1:
            problems.append(f"achievable.{what} must be in (0, 1]")
    return problems


def _slug(name: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def to_spec(entry: Entry, *, peak_basis: str = "datasheet peak") -> GpuSpec:
    """The API view of a stored entry: SI units, read-only."""
    bandwidth = entry.memory_bandwidth_GBps
    return GpuSpec(
        key=entry.key or _slug(entry.name),
        name=entry.name,
        vendor=entry.vendor,
        peak_bandwidth=None if bandwidth is None else bandwidth * GIGA,
        interconnect=entry.interconnect,
        interconnect_bandwidth=None if entry.interconnect_GBps is None else entry.interconnect_GBps * GIGA,
        matrix_flops={d: v * TERA for d, v in entry.matrix_tflops.items()},
        vector_flops={d: v * TERA for d, v in entry.vector_tflops.items()},
        achievable_compute_factor=entry.achievable.compute,
        compute_factor_source=entry.achievable.compute_source,
        achievable_bandwidth_factor=entry.achievable.bandwidth,
        bandwidth_factor_source=entry.achievable.bandwidth_source,
        peak_basis=peak_basis,
        arch=entry.arch,
        device_names=tuple(entry.device_names),
        compute_capability=entry.compute_capability,
        num_sms=entry.num_sms,
        total_global_mem=entry.total_global_mem,
        memory_gb=entry.memory_gb,
        memory_type=entry.memory_type,
        boost_clock_mhz=entry.boost_clock_MHz,
        l2_cache_mb=entry.l2_cache_MB,
        tdp_w=entry.tdp_W,
        scope=entry.scope,
        confidence=entry.confidence,
        sources=entry.sources,
        notes=entry.tracekit_notes,
        provenance=entry.provenance,
    )


def load_entries(data: bytes) -> list[Entry]:
    """Decode and check a database document; ValueError names the first bad row."""
    try:
        db = msgspec.json.decode(data, type=Database)
    except msgspec.ValidationError as e:
        raise ValueError(str(e)) from None
    if (db.format, db.version) != (FORMAT, VERSION):
        raise ValueError(f"format {db.format!r} version {db.version} is not {FORMAT!r} version {VERSION}")
    for entry in db.gpus:
        if problems := _problems(entry):
            raise ValueError(f"row {entry.name!r}: {'; '.join(problems)}")
    return db.gpus


@lru_cache(maxsize=1)
def all_specs() -> tuple[GpuSpec, ...]:
    """Every GPU in tracekit's database, in listing order."""
    data = resources.files("tracekit.specs").joinpath(DATA_FILE).read_bytes()
    # The packaged file is tested; a failure here is a broken install, so let it raise.
    return tuple(to_spec(e) for e in load_entries(data))


def _read_document(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise TracekitError(
                f"GPU spec file {path} is TOML, which needs Python 3.11 or later; write it as JSON"
            ) from None
        return tomllib.loads(text)
    return json.loads(text)


def load_spec_file(path: str | Path) -> GpuSpec:
    """A user's spec for their GPU: one database entry as JSON (or TOML on Python >= 3.11)."""
    path = Path(path)
    try:
        document = _read_document(path)
    except OSError as e:
        raise TracekitError(f"GPU spec file {path} cannot be read: {e.strerror or e}") from None
    except ValueError as e:  # JSONDecodeError, TOMLDecodeError and UnicodeDecodeError are ValueErrors
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise TracekitError(f"GPU spec file {path} is not valid {kind}: {e}") from None
    try:
        entry = msgspec.convert(document, type=Entry)
    except msgspec.ValidationError as e:
        raise TracekitError(f"GPU spec file {path} is not a valid GPU spec: {e}") from None
    if problems := _problems(entry):
        raise TracekitError(f"GPU spec file {path} is not a valid GPU spec: {'; '.join(problems)}")
    return to_spec(entry, peak_basis=f"user spec file {path.name}")
