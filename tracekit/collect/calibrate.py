"""A short measurement of what this machine achieves: matmul FLOP/s and device copy bandwidth.

The roofline compares kernels against these ceilings as well as the datasheet peaks,
since what a device achieves (clocks, power limits, a CPU's cores) is often well below
its datasheet. Kept short: about a second on a laptop CPU, less on a GPU.
"""

from __future__ import annotations

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


def calibrate(device: str, dtype, device_name: str | None = None, budget_s: float = 1.5) -> dict[str, Any]:
    """Measure this device's ceilings in the run's dtype; the sidecar's ``calibration`` entry."""
    import torch

    dev = torch.device(device)
    t0 = time.perf_counter()
    flops, n = matmul_flops(dev, dtype, budget_s * 0.6)
    bw, nbytes = copy_bandwidth(dev, budget_s * 0.3)
    threads = torch.get_num_threads() if dev.type == "cpu" else None
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
    }
