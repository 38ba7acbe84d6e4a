"""A short measurement of what this machine achieves: matmul FLOP/s and device copy bandwidth.

The roofline compares kernels against these ceilings as well as the datasheet peaks,
since what a device achieves (clocks, power limits, a CPU's cores) is often well below
its datasheet. Kept short: about a second on a laptop CPU, less on a GPU.

A measurement taken while another process held the cores can come out many times too low,
and every figure priced against it would then read above 100%. So each measurement is
checked: a GPU's against its datasheet row (between ``GPU_PLAUSIBLE`` of the peak and the
peak itself), a CPU's against a floor per thread (``CPU_FLOOR_FLOPS``, ``CPU_FLOOR_BANDWIDTH``:
far below what any 64-bit x86 or Arm core of the last decade sustains in a BLAS matmul with
SIMD FMA, and in a large copy). An implausible measurement is taken again, up to
``ATTEMPTS`` times, keeping the best; what was checked, the attempts, the machine's load and
the verdict are recorded under ``checks``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tracekit.collect.workloads import short_dtype


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_rate(fn, work: float, device, budget_s: float, min_burst_s: float) -> float:
    """Best work/second over bursts of ``fn()`` calls within ``budget_s``."""
    clock = time.perf_counter
    fn()  # warm-up: first-touch memory, library init, kernel selection
    _sync(device)
    t0 = clock()
    fn()
    _sync(device)
    one = max(clock() - t0, 1e-7)
    reps = max(1, int(min_burst_s / one))
    best = work / one
    deadline = clock() + budget_s
    bursts = 0
    while bursts < 2 or (clock() < deadline and bursts < 5):
        _sync(device)
        t0 = clock()
        for _ in range(reps):
            fn()
        _sync(device)
        dt = clock() - t0
        best = max(best, work * reps / dt)
        bursts += 1
        if clock() > deadline:
            break
    return best


def matmul_flops(device, dtype, budget_s: float) -> tuple[float, int]:
    """FLOP/s of a square matmul in ``dtype`` (2 n^3 FLOPs each), and the n used."""
    import torch

    clock = time.perf_counter
    if device.type == "cuda":
        n, burst = 8192, 0.02
    else:
        # Size the matrix to the CPU's speed: about 20 ms a product, between 256 and 2048.
        n, burst = 256, 0.04
        while n < 2048:
            a = torch.randn(n, n, device=device).to(dtype)
            torch.mm(a, a)  # the first product pays for library init
            t0 = clock()
            torch.mm(a, a)
            if clock() - t0 > 0.005:
                break
            n *= 2
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    rate = _best_rate(lambda: torch.mm(a, b, out=out), 2.0 * n**3, device, budget_s, burst)
    return rate, n


def copy_bandwidth(device, budget_s: float) -> tuple[float, int]:
    """Bytes/s of a large device-to-device copy, counting the read and the write."""
    import torch

    nbytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src).fill_(0)
    rate = _best_rate(lambda: dst.copy_(src), 2.0 * nbytes, device, budget_s, 0.02 if device.type == "cuda" else 0.03)
    return rate, nbytes


ATTEMPTS = 3
GPU_PLAUSIBLE = 0.10  # of the datasheet peak: below it, the GPU was shared, throttled or misread
PEAK_TOLERANCE = 1.05  # above the datasheet peak (clocks beyond boost are rare): misread
# Per CPU thread (the floors are an order of magnitude below a modern core's sustained rate).
CPU_FLOOR_FLOPS = {"fp64": 1e9, "fp32": 2e9, "bf16": 0.2e9, "fp16": 0.1e9}
CPU_FLOOR_BANDWIDTH = 1e9  # bytes/s per thread, read + write


def problems(device_type: str, dtype: str, flops: float, bandwidth: float, threads: int | None,
             spec=None) -> list[str]:
    """Why a measurement cannot be right, as sentences (empty: plausible)."""
    out = []
    if device_type == "cpu":
        n = threads or 1
        floor = CPU_FLOOR_FLOPS.get(dtype, 0.1e9) * n
        if flops < floor:
            out.append(f"{flops / 1e9:.3g} GFLOP/s {dtype} matmul is below the floor of {floor / 1e9:.3g} GFLOP/s "
                       f"for {n} thread{'s' if n != 1 else ''}")
        if bandwidth < CPU_FLOOR_BANDWIDTH * n:
            out.append(f"{bandwidth / 1e9:.3g} GB/s copy is below the floor of {CPU_FLOOR_BANDWIDTH * n / 1e9:.3g} GB/s")
        return out
    if spec is None:
        return out
    peak = spec.peak_flops(dtype, "matrix")
    if peak and not GPU_PLAUSIBLE * peak <= flops <= PEAK_TOLERANCE * peak:
        out.append(f"{flops / 1e12:.3g} TFLOP/s {dtype} matmul is outside {GPU_PLAUSIBLE:.0%}-{PEAK_TOLERANCE:.0%} of "
                   f"{spec.name}'s {peak / 1e12:.3g} TFLOP/s")
    bw = spec.peak_bandwidth
    if bw and not GPU_PLAUSIBLE * bw <= bandwidth <= PEAK_TOLERANCE * bw:
        out.append(f"{bandwidth / 1e9:.3g} GB/s copy is outside {GPU_PLAUSIBLE:.0%}-{PEAK_TOLERANCE:.0%} of "
                   f"{spec.name}'s {bw / 1e9:.3g} GB/s")
    return out


def _datasheet(device_name: str | None):
    """The device's datasheet row, when tracekit's database knows it (None otherwise)."""
    if not device_name:
        return None
    from tracekit.errors import TracekitError
    from tracekit.specs.lookup import lookup

    try:
        return lookup({"name": device_name}).spec
    except TracekitError:
        return None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # not on every platform
        return None


def calibrate(device: str, dtype, device_name: str | None = None, budget_s: float = 1.5) -> dict[str, Any]:
    """Measure this device's ceilings in the run's dtype, checked and re-measured when
    implausible; the sidecar's ``calibration`` entry."""
    import torch

    dev = torch.device(device)
    t0 = time.perf_counter()
    threads = torch.get_num_threads() if dev.type == "cpu" else None
    spec = _datasheet(device_name) if dev.type == "cuda" else None
    flops = bw = 0.0
    found: list[str] = []
    attempts = 0
    for attempts in range(1, ATTEMPTS + 1):
        # A retry measures longer: a briefly busy machine has time to free a core.
        f, n = matmul_flops(dev, dtype, budget_s * 0.6 * attempts)
        b, nbytes = copy_bandwidth(dev, budget_s * 0.3 * attempts)
        flops, bw = max(flops, f), max(bw, b)
        found = problems(dev.type, short_dtype(dtype), flops, bw, threads, spec)
        if not found:
            break
    return {
        "device": dev.type,
        "device_name": device_name,
        "dtype": short_dtype(dtype),
        "matmul_flops": {short_dtype(dtype): flops},
        "copy_bandwidth": bw,
        "method": (
            f"best of several bursts of torch.mm on {n}x{n} {short_dtype(dtype)} matrices (2*n^3 FLOPs each); "
            f"copy bandwidth from Tensor.copy_ of a {nbytes >> 20} MiB buffer on the device, counting read+write "
            f"(2 x bytes); synchronised wall clock"
            + (f"; {threads} CPU thread{'s' if threads != 1 else ''}" if threads else "")
        ),
        "matmul_n": n,
        "copy_bytes": nbytes,
        "threads": threads,
        "seconds": round(time.perf_counter() - t0, 3),
        "checks": {
            "plausible": not found,
            "problems": found,
            "attempts": attempts,
            "against": (f"{spec.name}'s datasheet row" if spec is not None else
                        ("the per-thread floors of tracekit.collect.calibrate" if dev.type == "cpu"
                         else "nothing: the GPU is not in tracekit's database")),
            "load_average_1m": _load(),
        },
    }
