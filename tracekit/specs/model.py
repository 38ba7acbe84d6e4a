"""One device's roofline numbers: ``GpuSpec``, and the dtype names traces use.

Units in this API are SI: FLOP/s and bytes/s (the data file uses TFLOP/s and GB/s, see
``tracekit.specs.database``). Peaks are per dtype and per unit:

- ``matrix``: the tensor-core / MFMA rate a GEMM gets (dense, FP32 accumulate).
- ``vector``: the non-tensor rate, the right peak for elementwise and reduction kernels.

Two rules fill gaps the datasheets leave, so that callers never need to know them:

- A GEMM in fp32 or fp64 with no matrix rate runs on the vector units at the vector rate. This is
  what an FP32 GEMM does on NVIDIA with PyTorch's default (TF32 off); ask for ``"tf32"`` to get
  the TF32 tensor-core rate.
- Vector fp16/bf16/fp8 use the fp32 vector rate (unless a row gives its own): PyTorch's pointwise
  and reduction kernels load reduced-precision values and compute in float32 (``opmath_type``),
  so the packed-half rates on datasheets are not what they can reach.

A ``GpuSpec`` also describes a CPU measured by ``tracekit collect`` (see
``tracekit.specs.measured``); ``peak_basis`` says where the peaks come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# Canonical dtype names, in the order listings show them.
DTYPES = ("fp64", "tf32", "fp32", "fp16", "bf16", "fp8", "int8", "fp4")
UNITS = ("matrix", "vector")

# Spellings seen in traces (`Input type`: C++ type names), in torch (`torch.bfloat16`) and in
# calibration sidecars (`float32`), folded to lower case before lookup.
_DTYPE_SPELLINGS = {
    "fp64": ("double", "float64", "torch.float64", "fp64", "f64"),
    "tf32": ("tf32", "tensorfloat32"),
    "fp32": ("float", "float32", "torch.float32", "fp32", "f32"),
    "fp16": ("c10::half", "half", "float16", "torch.float16", "fp16", "f16"),
    "bf16": ("c10::bfloat16", "bfloat16", "torch.bfloat16", "bf16"),
    "fp8": (
        "c10::float8_e4m3fn",
        "c10::float8_e5m2",
        "c10::float8_e4m3fnuz",
        "c10::float8_e5m2fnuz",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "torch.float8_e4m3fn",
        "torch.float8_e5m2",
        "torch.float8_e4m3fnuz",
        "torch.float8_e5m2fnuz",
        "fp8",
    ),
    # torch.int8 is `signed char` in C++ (`unsigned char` is uint8, which has no GEMM peak).
    "int8": ("signed char", "int8", "torch.int8"),
    "fp4": ("c10::float4_e2m1fn_x2", "float4_e2m1fn_x2", "torch.float4_e2m1fn_x2", "fp4"),
}
_DTYPE_BY_SPELLING = {s: d for d, spellings in _DTYPE_SPELLINGS.items() for s in spellings}

# Reduced-precision floats whose vector work PyTorch does in float32 (see module docstring).
_VECTOR_AS_FP32 = ("fp16", "bf16", "fp8")
# GEMMs in these dtypes fall back to the vector units when a GPU has no matrix rate for them.
_MATRIX_ON_VECTOR = ("fp32", "fp64")
# The dtype work runs at on a device without a peak for its own (FP4 on a GPU without FP4
# units: the weights are widened in registers and the MMA runs at the next wider rate it
# has), nearest first. Roofline bounds, MFU and projections all use this one rule.
WIDER = {
    "fp4": ("fp8", "bf16", "fp16", "fp32"),
    "int8": ("fp8", "bf16", "fp16", "fp32"),
    "fp8": ("bf16", "fp16", "fp32"),
    "bf16": ("fp16", "fp32"),
    "fp16": ("bf16", "fp32"),
    "tf32": ("fp32",),
}

TERA = 1e12
GIGA = 1e9


def normalise_dtype(name: str) -> str | None:
    """Canonical dtype ("bf16", "fp32", ...) for a trace or torch spelling; None if it has no peak."""
    return _DTYPE_BY_SPELLING.get(name.strip().lower())


def _check_unit(unit: str) -> None:
    # A wrong unit is a programming error in the caller, not bad input.
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class GpuSpec:
    """Peaks, bandwidth and achievable ceilings of one device, with where each came from."""

    key: str
    name: str
    vendor: str
    # Bytes per second; None when unknown (the bandwidth roofline is then absent).
    peak_bandwidth: float | None
    # The scale-up link between the GPUs of a node, bytes/s per GPU per direction; the
    # roof of collectives. None when unknown or absent (PCIe-only parts).
    interconnect: str = ""
    interconnect_bandwidth: float | None = None
    # FLOP/s (OP/s for int8) by canonical dtype.
    matrix_flops: Mapping[str, float] = field(default_factory=dict, hash=False)
    vector_flops: Mapping[str, float] = field(default_factory=dict, hash=False)
    # Achievable ceiling = peak x factor, unless a measured value exists (below).
    achievable_compute_factor: float = 1.0
    compute_factor_source: str = ""
    achievable_bandwidth_factor: float = 1.0
    bandwidth_factor_source: str = ""
    # Ceilings measured on the machine by `tracekit collect`; they replace peak x factor.
    measured_matmul_flops: Mapping[str, float] = field(default_factory=dict, hash=False)
    measured_bandwidth: float | None = None
    # What the peaks are: "datasheet peak", "measured on this machine", "user spec file <name>".
    peak_basis: str = "datasheet peak"
    arch: str = ""
    device_names: tuple[str, ...] = ()
    compute_capability: tuple[int, int] | None = None
    num_sms: int | None = None
    total_global_mem: int | None = None
    memory_gb: float | None = None
    memory_type: str = ""
    boost_clock_mhz: float | None = None
    l2_cache_mb: float | None = None
    tdp_w: float | None = None
    scope: str = ""
    confidence: str = ""
    sources: str = ""
    notes: str = ""
    provenance: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Read-only views keep a frozen spec frozen all the way down.
        for name in ("matrix_flops", "vector_flops", "measured_matmul_flops", "provenance"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        object.__setattr__(self, "device_names", tuple(self.device_names))

    def peak_flops(self, dtype: str, unit: str = "matrix") -> float | None:
        """Peak FLOP/s for ``dtype`` (any spelling) on ``unit``; None where unsupported or unknown."""
        _check_unit(unit)
        d = normalise_dtype(dtype)
        if d is None:
            return None
        if unit == "matrix":
            if d in self.matrix_flops:
                return self.matrix_flops[d]
            return self.vector_flops.get(d) if d in _MATRIX_ON_VECTOR else None
        if d in self.vector_flops:
            return self.vector_flops[d]
        return self.vector_flops.get("fp32") if d in _VECTOR_AS_FP32 else None

    def no_peak_reason(self, dtype: str, unit: str = "matrix") -> str | None:
        """Why ``peak_flops(dtype, unit)`` is None, as a sentence for a report; None if it is not."""
        if self.peak_flops(dtype, unit) is not None:
            return None
        d = normalise_dtype(dtype)
        if d is None:
            return f"dtype {dtype!r} has no peak rate (tracekit knows floating-point types and int8)"
        if self.peak_basis == "datasheet peak":
            return f"{self.name} has no {unit} {d} rate (unsupported or not published for this GPU)"
        return f"no {unit} {d} rate for {self.name} ({self.peak_basis})"

    def runs_as(self, dtype: str, unit: str = "matrix") -> str | None:
        """The dtype whose peak work of ``dtype`` runs at on this device: its own when the
        device has a peak for it, else the nearest wider one it has (``WIDER``); None if neither."""
        d = normalise_dtype(dtype)
        if d is None:
            return None
        for candidate in (d, *WIDER.get(d, ())):
            if self.peak_flops(candidate, unit):
                return candidate
        return None

    def runs_as_note(self, dtype: str, unit: str = "matrix") -> str | None:
        """The sentence a figure priced at another dtype's peak carries ("priced at fp8 peak:
        MI300X has no fp4 peak"); None when ``dtype`` has its own peak or no wider one serves."""
        d, used = normalise_dtype(dtype), self.runs_as(dtype, unit)
        if used is None or used == d:
            return None
        return f"priced at {used} peak: {self.name} has no {d} {unit} peak"

    def achievable_flops(self, dtype: str, unit: str = "matrix") -> float | None:
        """Achievable FLOP/s: measured on this machine if collect measured it, else peak x factor."""
        d = normalise_dtype(dtype)
        if unit == "matrix" and d is not None and d in self.measured_matmul_flops:
            return self.measured_matmul_flops[d]
        peak = self.peak_flops(dtype, unit)
        return None if peak is None else peak * self.achievable_compute_factor

    def achievable_flops_basis(self, dtype: str, unit: str = "matrix") -> str:
        """What ``achievable_flops`` divides by, for a figure's label."""
        if unit == "matrix" and normalise_dtype(dtype) in self.measured_matmul_flops:
            return "measured on this machine (tracekit collect matmul)"
        return f"{self.achievable_compute_factor:g} x peak ({self.compute_factor_source})"

    @property
    def achievable_bandwidth(self) -> float | None:
        """Achievable bytes/s: measured on this machine if collect measured it, else peak x factor."""
        if self.measured_bandwidth is not None:
            return self.measured_bandwidth
        if self.peak_bandwidth is None:
            return None
        return self.peak_bandwidth * self.achievable_bandwidth_factor

    @property
    def achievable_bandwidth_basis(self) -> str:
        """What ``achievable_bandwidth`` divides by, for a figure's label."""
        if self.measured_bandwidth is not None:
            return "measured on this machine (tracekit collect copy)"
        return f"{self.achievable_bandwidth_factor:g} x peak ({self.bandwidth_factor_source})"

    def ridge_point(self, dtype: str, unit: str = "matrix") -> float | None:
        """Arithmetic intensity (FLOP/byte) where the peak compute and bandwidth roofs meet."""
        flops = self.peak_flops(dtype, unit)
        if flops is None or not self.peak_bandwidth:
            return None
        return flops / self.peak_bandwidth

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready view, SI units (FLOP/s, bytes/s)."""
        return {
            "key": self.key,
            "name": self.name,
            "vendor": self.vendor,
            "arch": self.arch,
            "peak_basis": self.peak_basis,
            "device_names": list(self.device_names),
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
            "num_sms": self.num_sms,
            "total_global_mem": self.total_global_mem,
            "memory_gb": self.memory_gb,
            "memory_type": self.memory_type,
            "peak_bandwidth": self.peak_bandwidth,
            "interconnect": self.interconnect,
            "interconnect_bandwidth": self.interconnect_bandwidth,
            "peak_flops": {"matrix": dict(self.matrix_flops), "vector": dict(self.vector_flops)},
            "achievable": {
                "compute_factor": self.achievable_compute_factor,
                "compute_factor_source": self.compute_factor_source,
                "bandwidth_factor": self.achievable_bandwidth_factor,
                "bandwidth_factor_source": self.bandwidth_factor_source,
                "measured_matmul_flops": dict(self.measured_matmul_flops),
                "measured_bandwidth": self.measured_bandwidth,
            },
            "boost_clock_mhz": self.boost_clock_mhz,
            "l2_cache_mb": self.l2_cache_mb,
            "tdp_w": self.tdp_w,
            "scope": self.scope,
            "confidence": self.confidence,
            "sources": self.sources,
            "notes": self.notes,
            "provenance": dict(self.provenance),
        }
