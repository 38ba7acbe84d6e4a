"""Ceilings measured on the machine itself, from the metadata sidecar ``tracekit collect`` writes.

The contract with ``tracekit.collect`` (both sides use exactly these keys)::

    sidecar["calibration"] = {
        "matmul_flops": {"fp32": 1.2e11, ...},  # FLOP/s of a large matmul; any dtype spelling
        "copy_bandwidth": 1.5e10,   # bytes/s moved (read + written) by a large tensor copy
        "device": "cpu",            # or "cuda" / "cuda:0" for a GPU run
        "device_name": "...",       # may be None
        "method": "...",            # how it was measured: becomes the spec's sources
        "checks": {"plausible": bool, "problems": [...], "attempts": n, "against": "...",
                   "load_average_1m": x},  # collect's sanity check (absent in older sidecars)
    }

``calibration`` itself is None when collect ran with ``--no-calibrate``.

A CPU has no datasheet row, so its measured values *are* its peaks (``peak_basis`` "measured on
this machine"). A GPU keeps its datasheet peaks and the measured values become its achievable
ceilings. For a CPU trace without a calibration, peaks may come from options; otherwise the
roofline is absent with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tracekit.errors import TracekitError
from tracekit.specs.lookup import UNKNOWN, SpecMatch
from tracekit.specs.model import GpuSpec, normalise_dtype

MEASURED = "measured on this machine"
FROM_SIDECAR = "measured by tracekit collect (metadata sidecar)"
FROM_OPTIONS = "peaks given as options"
_MEASURED_SOURCE = "measured on this machine by tracekit collect: achievable = measured"


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _calibration(sidecar: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The sidecar's calibration block, checked; None when collect measured nothing."""
    calibration = sidecar.get("calibration")
    if calibration is None:
        return None
    bad = "the trace's metadata sidecar has a malformed calibration block"
    if not isinstance(calibration, Mapping):
        raise TracekitError(f"{bad}: expected an object")
    flops = calibration.get("matmul_flops", {})
    if not isinstance(flops, Mapping) or not all(_positive(v) for v in flops.values()):
        raise TracekitError(f"{bad}: matmul_flops must map dtype names to positive FLOP/s")
    bandwidth = calibration.get("copy_bandwidth")
    if bandwidth is not None and not _positive(bandwidth):
        raise TracekitError(f"{bad}: copy_bandwidth must be positive bytes/s")
    return calibration


def _by_dtype(flops: Mapping[str, float]) -> dict[str, float]:
    # Dtypes tracekit has no name for are dropped: there is nothing to price against them.
    return {d: float(v) for name, v in flops.items() if (d := normalise_dtype(name)) is not None}


def measured_spec(
    device_name: str,
    matmul_flops: Mapping[str, float],
    bandwidth: float | None,
    *,
    basis: str = MEASURED,
    sources: str = "",
) -> GpuSpec:
    """A device known only by measured (or user-given) ceilings: they are its peaks."""
    flops = _by_dtype(matmul_flops)
    return GpuSpec(
        key="cpu",
        name=device_name or "CPU",
        vendor="CPU",
        peak_bandwidth=bandwidth,
        matrix_flops=flops,
        # A CPU has no separate matrix unit: GEMMs and elementwise ops run on the same
        # SIMD FMA units, so the measured matmul rate is the ceiling for vector work too.
        vector_flops=dict(flops),
        # The factor 1.0 is no claim about kernels: these peaks were measured, so achievable = peak.
        compute_factor_source=_MEASURED_SOURCE if basis == MEASURED else basis,
        bandwidth_factor_source=_MEASURED_SOURCE if basis == MEASURED else basis,
        peak_basis=basis,
        sources=sources or basis,
    )


def cpu_spec_from_sidecar(sidecar: Mapping[str, Any]) -> GpuSpec | None:
    """The CPU's measured ceilings as a spec; None when the sidecar has no CPU calibration."""
    calibration = _calibration(sidecar)
    if calibration is None or str(calibration.get("device", "")).lower() != "cpu":
        return None
    return measured_spec(
        str(calibration.get("device_name") or "CPU"),
        calibration.get("matmul_flops", {}),
        calibration.get("copy_bandwidth"),
        sources=str(calibration.get("method") or ""),
    )


def with_calibration(spec: GpuSpec, sidecar: Mapping[str, Any]) -> GpuSpec:
    """``spec`` with achievable ceilings measured on this GPU, when collect measured them."""
    calibration = _calibration(sidecar)
    if calibration is None or str(calibration.get("device", "")).lower() == "cpu":
        return spec
    if (calibration.get("checks") or {}).get("plausible") is False:
        return spec  # collect could not get a believable measurement: the datasheet row stands
    return replace(
        spec,
        measured_matmul_flops=_by_dtype(calibration.get("matmul_flops", {})),
        measured_bandwidth=calibration.get("copy_bandwidth"),
    )


def cpu_lookup(
    sidecar: Mapping[str, Any] | None,
    *,
    matmul_flops: Mapping[str, float] | None = None,
    bandwidth: float | None = None,
) -> SpecMatch:
    """The spec for a CPU trace: peaks from options, else from the sidecar, else none and why."""
    if matmul_flops or bandwidth:
        spec = measured_spec("CPU", matmul_flops or {}, bandwidth, basis=FROM_OPTIONS)
        return SpecMatch(spec, FROM_OPTIONS)
    measured = cpu_spec_from_sidecar(sidecar or {})
    if measured is not None:
        return SpecMatch(measured, FROM_SIDECAR)
    return SpecMatch(
        None,
        UNKNOWN,
        "a CPU has no datasheet peaks in tracekit and this trace has no measured ones: record it "
        "with tracekit collect (which measures them) or give them with --cpu-flops and --cpu-bandwidth",
    )
