"""The GPU spec database shipped in the package (``gpus.json``), and user spec files.

Format of ``gpus.json``::

    {"format": "tracekit-gpu-specs", "version": 1, "gpus": [ENTRY, ...]}

A user spec file (``--spec-file``: JSON, CSV, or TOML on Python >= 3.11) holds one ENTRY, or one row
as ``tracekit gpus --json`` prints it; see ``load_spec_file`` and the section above it.
ENTRY fields (units in the names; a user file needs ``name`` and at least one peak):

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
- ``published_peaks``: per dtype, the figure the row's source prints (``value``, ``sparse``,
  ``accumulate``, ``fp32_accumulate_divisor``, ``where``): the stored dense FP32-accumulate peak
  is it halved if sparse, divided again where only an FP16-accumulate figure is printed.
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

import csv
import difflib
import io
import json
import math
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Sequence, cast

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
    # Matrix peaks as their source prints them, per dtype (see tests/test_factor_sources.py).
    published_peaks: dict[str, dict[str, float | bool | str | int]] = {}


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


# --- user spec files (--spec-file) ----------------------------------------------------------------
#
# A user file holds one GPU in one of two vocabularies, mixed freely: the database ENTRY's keys
# (TFLOP/s, GB/s), or a row exactly as `tracekit gpus --json` prints it (GpuSpec.to_dict: FLOP/s,
# bytes/s), so that a user can copy a row and edit its numbers. Every document (JSON, TOML, CSV) is
# first made flat, nested keys joined by dots ("peak_flops.matrix.bf16", as pandas.json_normalize
# names columns), then each key is mapped to the entry key it sets, converting units.

# The divisor that brings a number to the entry's unit; None: not a number (msgspec checks its type).
_SAME_UNIT = 1.0
# Entry keys holding peaks or factors, checked as numbers here so that an error names the file's key.
_ENTRY_NUMBERS = ("memory_bandwidth_GBps", "interconnect_GBps", "achievable.compute", "achievable.bandwidth")
# What `tracekit gpus --json` prints under another name or unit -> (entry key, divisor).
_PRINTED = {
    "peak_bandwidth": ("memory_bandwidth_GBps", GIGA),  # bytes/s -> GB/s
    "interconnect_bandwidth": ("interconnect_GBps", GIGA),
    "achievable.compute_factor": ("achievable.compute", _SAME_UNIT),
    "achievable.compute_factor_source": ("achievable.compute_source", None),
    "achievable.bandwidth_factor": ("achievable.bandwidth", _SAME_UNIT),
    "achievable.bandwidth_factor_source": ("achievable.bandwidth_source", None),
    "notes": ("tracekit_notes", None),
}
# Tables: file prefix -> (entry prefix, divisor). Sub-keys are dtypes, except provenance's (free text).
_TABLES = {
    "matrix_tflops.": ("matrix_tflops.", _SAME_UNIT),
    "vector_tflops.": ("vector_tflops.", _SAME_UNIT),
    "peak_flops.matrix.": ("matrix_tflops.", TERA),  # FLOP/s -> TFLOP/s
    "peak_flops.vector.": ("vector_tflops.", TERA),
    "provenance.": ("provenance.", None),
}
_FREE_TABLE = "provenance."
# Printed, but it says where the numbers came from: a loaded file's basis is "user spec file NAME".
_IGNORED = ("peak_basis",)
# Printed (empty for every database row), but only `tracekit collect` measures these on the machine.
_MEASURED = ("achievable.measured_matmul_flops", "achievable.measured_bandwidth")
_PEAK_KEYS = (
    "matrix_tflops.<dtype>, vector_tflops.<dtype> or memory_bandwidth_GBps; as `tracekit gpus "
    "--json` prints them: peak_flops.matrix.<dtype>, peak_flops.vector.<dtype> or peak_bandwidth"
)


class _SpecProblem(Exception):
    """What makes a spec file's content unusable, as a clause; load_spec_file names the file."""


def _entry_keys() -> list[str]:
    """The entry's own keys, flat, in Entry's order; tables as PREFIX.<dtype> or PREFIX.<text>."""
    keys = []
    for field in msgspec.structs.fields(Entry):
        if field.name == "achievable":
            keys += [f"achievable.{f.name}" for f in msgspec.structs.fields(Achievable)]
        elif f"{field.name}." in _TABLES:
            keys.append(f"{field.name}.<{'text' if f'{field.name}.' == _FREE_TABLE else 'dtype'}>")
        else:
            keys.append(field.name)
    return keys


# Folded file key -> (entry key, divisor), for keys without a free sub-key. Keys are compared
# without case: the printed row says boost_clock_mhz where the entry says boost_clock_MHz.
_KEYS = {k.casefold(): (k, _SAME_UNIT if k in _ENTRY_NUMBERS else None) for k in _entry_keys() if "<" not in k}
_KEYS.update(_PRINTED)
_ACCEPTED = (
    f"{', '.join(_entry_keys())}, and as `tracekit gpus --json` prints them "
    f"{', '.join([*_PRINTED, 'peak_flops.matrix.<dtype>', 'peak_flops.vector.<dtype>', *_IGNORED])} "
    f"(peak_basis is ignored), with <dtype> one of {', '.join(DTYPES)}"
)
# Whole keys a typo may be near, for "did you mean".
_CANDIDATES = [
    *(t for t, _ in _KEYS.values()),
    *_PRINTED,
    *_IGNORED,
    *(p + d for p in _TABLES if p != _FREE_TABLE for d in DTYPES),
]


def _is_measured(key: str) -> bool:
    folded = key.casefold()
    return any(folded == m or folded.startswith(m + ".") for m in _MEASURED)


def _dtype_problem(key: str, dtype: str) -> str:
    close = difflib.get_close_matches(dtype.casefold(), DTYPES, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"key {key!r} has unknown dtype {dtype!r} (known: {', '.join(DTYPES)}){hint}"


def _resolve(key: str) -> tuple[str, float | None] | None:
    """(entry key, divisor) that a file's key sets; None if the key is unknown."""
    folded = key.casefold()
    if folded in _KEYS:
        return _KEYS[folded]
    for prefix, (target, divisor) in _TABLES.items():
        if folded.startswith(prefix) and len(folded) > len(prefix):
            sub = key[len(prefix) :]
            if prefix == _FREE_TABLE:
                return target + sub, divisor
            if sub.casefold() not in DTYPES:
                raise _SpecProblem(_dtype_problem(key, sub))
            return target + sub.casefold(), divisor
    return None


def _hint(key: str) -> str:
    folded = key.casefold()
    inside = [c for c in (*_CANDIDATES, *_TABLES) if c.casefold().startswith(folded + ".")]
    if inside:  # "matrix_tflops": 5, where a table of dtypes belongs
        return f" (a table: give its entries, such as {inside[0]!r})"
    by_folded = {c.casefold(): c for c in _CANDIDATES}
    close = difflib.get_close_matches(folded, by_folded, n=1)
    return f" (did you mean {by_folded[close[0]]!r}?)" if close else ""


def _unknown(keys: list[str]) -> str:
    named = ", ".join(f"{k!r}{_hint(k)}" for k in keys)
    return f"unknown key{'s' if len(keys) > 1 else ''} {named}; accepted keys: {_ACCEPTED}"


def _absent(value: object) -> bool:
    # Empty CSV cells, JSON nulls and the empty strings a printed row holds all mean "not given".
    return value is None or (isinstance(value, str) and not value.strip())


def _number(key: str, value: object) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _SpecProblem(f"key {key!r} must be a finite number, not {value!r}")
    return value


def _from_text(key: str, target: str, value: object) -> object:
    """Lists written as text (as CSV must): device names split at ';', compute capability 9.0."""
    if not isinstance(value, str):
        return value
    if target == "device_names":
        return [n.strip() for n in value.split(";") if n.strip()]
    if target == "compute_capability":
        major, dot, minor = value.strip().partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise _SpecProblem(f"key {key!r} must be MAJOR.MINOR such as 9.0, not {value!r}")
        return [int(major), int(minor)]
    return value


def _translate(pairs: Sequence[tuple[str, object]]) -> dict[str, object]:
    """A file's (key, value) pairs as flat entry keys, in the entry's units."""
    if unknown := [k for k, _ in pairs if k.casefold() not in _IGNORED and not _is_measured(k) and _resolve(k) is None]:
        raise _SpecProblem(_unknown(unknown))
    flat: dict[str, object] = {}
    given_as: dict[str, str] = {}
    for key, value in pairs:
        if _absent(value) or key.casefold() in _IGNORED:
            continue
        if _is_measured(key):
            raise _SpecProblem(
                f"key {key!r} cannot be set in a spec file (only `tracekit collect` measures "
                f"it on the machine); give the peak and an achievable factor instead"
            )
        target, divisor = cast("tuple[str, float | None]", _resolve(key))  # (no unknown key: refused above)
        if target in flat:
            raise _SpecProblem(f"it gives {target} twice (as {given_as[target]!r} and {key!r})")
        flat[target] = _from_text(key, target, value) if divisor is None else _number(key, value) / divisor
        given_as[target] = key
    return flat


def _missing(flat: dict[str, object]) -> str | None:
    lacks = [] if "name" in flat else ["lacks the required key 'name'"]
    if not any(k == "memory_bandwidth_GBps" or k.startswith(("matrix_tflops.", "vector_tflops.")) for k in flat):
        lacks.append("gives no peak")
    if not lacks:
        return None
    return f"it {' and '.join(lacks)}; required: name and at least one peak ({_PEAK_KEYS})"


def _nest(flat: dict[str, object]) -> dict[str, object]:
    # Entry nests one level deep (achievable.X, matrix_tflops.X, provenance.X).
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, dot, rest = key.partition(".")
        if dot:
            nested.setdefault(head, {})[rest] = value
        else:
            nested[key] = value
    return nested


def _entry(pairs: Sequence[tuple[str, object]]) -> Entry:
    flat = _translate(pairs)
    if missing := _missing(flat):
        raise _SpecProblem(missing)
    try:
        # Not strict: CSV cells are text, and "132" is a fine num_sms.
        entry = msgspec.convert(_nest(flat), type=Entry, strict=False)
    except msgspec.ValidationError as e:
        raise _SpecProblem(str(e)) from None
    if problems := _problems(entry):
        raise _SpecProblem("; ".join(problems))
    return entry


def _flatten(mapping: dict, prefix: str = "") -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            pairs += _flatten(value, f"{prefix}{key}.")
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


def _one_row(document: object) -> dict:
    """The GPU a JSON/TOML document describes: an object, or a list of exactly one (`gpus --json`)."""
    if isinstance(document, list):
        if len(document) != 1:
            raise _SpecProblem(
                f"it is a list of {len(document)} GPUs, and a spec file describes one "
                f"(copy one element of `tracekit gpus --json`)"
            )
        document = document[0]
    if not isinstance(document, dict):
        raise _SpecProblem(f"it must be an object of keys describing one GPU, not {type(document).__name__}")
    return document


def _header_pairs(rows: list[tuple[int, list[str]]]) -> list[tuple[str, str]]:
    """The header form: a row of keys over one row of values."""
    if len(rows) != 2:
        raise _SpecProblem(
            f"its CSV has {len(rows) - 1} data rows under the header, and a spec file describes "
            f"one GPU: one data row (or two columns headed key,value)"
        )
    (_, header), (n, values) = rows
    if len(values) != len(header):
        raise _SpecProblem(f"its CSV data row (row {n}) has {len(values)} cells but the header has {len(header)}")
    pairs = []
    for column, (key, value) in enumerate(zip(header, values), 1):
        if not key.strip() and value.strip():
            raise _SpecProblem(f"its CSV column {column} has a value but no key in the header")
        if key.strip():
            pairs.append((key.strip(), value.strip()))
    return pairs


def _key_value_pairs(rows: list[tuple[int, list[str]]]) -> list[tuple[str, str]]:
    """The two-column form: a key,value header, then one key and its value a row."""
    pairs = []
    for n, row in rows:
        cells = [c.strip() for c in row] + [""]
        if any(cells[2:]) or not cells[0]:
            raise _SpecProblem(f"its CSV row {n} is not two cells KEY,VALUE: {row!r}")
        pairs.append((cells[0], cells[1]))
    return pairs


def _csv_pairs(records: list[list[str]]) -> list[tuple[str, str]]:
    rows = [(n, r) for n, r in enumerate(records, 1) if any(c.strip() for c in r)]
    if not rows:
        raise _SpecProblem("its CSV holds no rows")
    if [c.strip().casefold() for c in rows[0][1] if c.strip()] == ["key", "value"]:
        return _key_value_pairs(rows[1:])
    return _header_pairs(rows)


def _format(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".json", ".toml", ".csv"):
        return suffix[1:].upper()
    # No telling suffix (spec.txt, a here-document): JSON opens with an object or a list, CSV with a key.
    return "JSON" if text.lstrip().startswith(("{", "[")) else "CSV"


def _parse(kind: str, text: str, path: Path) -> object:
    """The document's syntax; ValueError or csv.Error where it is not valid."""
    if kind == "CSV":
        return list(csv.reader(io.StringIO(text), strict=True))
    if kind == "TOML":
        if sys.version_info >= (3, 11):
            import tomllib

            return tomllib.loads(text)
        raise TracekitError(f"GPU spec file {path} is TOML, which needs Python 3.11 or later; write it as JSON or CSV")
    return json.loads(text)


def cpu_entry(calibration: dict, name: str) -> dict:
    """A spec-file entry (vendor CPU) for the CPU a ``tracekit collect`` run measured, from its
    sidecar's ``calibration``: its fp32 matmul rate as both peaks and its copy bandwidth. Written
    to a file, it lets a CPU run be projected onto another CPU (``project --to FILE``)."""
    tflops = calibration["matmul_flops"]["fp32"] / 1e12
    return {
        "name": name,
        "vendor": "CPU",
        "memory_bandwidth_GBps": calibration["copy_bandwidth"] / 1e9,
        "matrix_tflops": {"fp32": tflops},
        "vector_tflops": {"fp32": tflops},
    }


def load_spec_file(path: str | Path) -> GpuSpec:
    """A user's spec for their GPU: JSON, CSV or TOML (Python >= 3.11), by the file's suffix.

    One database entry, or a row as ``tracekit gpus --json`` prints it (also that whole output
    when it holds one row); CSV as a header row over one data row, or two columns headed
    ``key,value``, nested keys written with dots. Every failure is one ``TracekitError`` sentence.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: spreadsheets save CSV with a BOM
    except OSError as e:
        raise TracekitError(f"GPU spec file {path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise TracekitError(f"GPU spec file {path} is not UTF-8 text (JSON, CSV or TOML)") from None
    kind = _format(path, text)
    try:
        document = _parse(kind, text, path)
    except (ValueError, csv.Error) as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
        raise TracekitError(f"GPU spec file {path} is not valid {kind}: {e}") from None
    try:
        # (CSV parses to its rows)
        pairs = _csv_pairs(cast("list[list[str]]", document)) if kind == "CSV" else _flatten(_one_row(document))
        entry = _entry(pairs)
    except _SpecProblem as e:
        raise TracekitError(f"GPU spec file {path} is not a valid GPU spec: {e}") from None
    return to_spec(entry, peak_basis=f"user spec file {path.name}")
