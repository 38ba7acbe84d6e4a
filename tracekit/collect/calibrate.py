"""A short measurement of what this machine achieves: matmul FLOP/s and device copy bandwidth.

The roofline compares kernels against these ceilings as well as the datasheet peaks,
since what a device achieves (clocks, power limits, a CPU's cores) is often well below
its datasheet. Kept short: about a second on a laptop CPU, less on a GPU.

A measurement taken while another process held the cores can come out many times too low,
and every figure priced against it would then read above 100%. So each measurement is
checked: a GPU's against its datasheet row (between ``GPU_PLAUSIBLE`` of the peak and the
peak itself), a CPU's against a floor per thread (``CPU_FLOOR_FLOPS``, ``CPU_FLOOR_BANDWIDTH``:
far below what any 64-bit x86 or Arm core of the last decade sustains in a BLAS matmul with
SIMD FMA, and in a large copy) and, where the CPU says what its vector units are, against
``FAR_BELOW`` of the FMA peak its cores, clock and flags allow (``cpu_peak_flops``).

A measurement is taken in rounds until it is stable: at least ``MIN_ROUNDS``, and more (up to
``MAX_ROUNDS``) until the best two rounds agree within ``STABLE``. Interference only slows a
measurement, so the ceiling is the best round; the spread (1 - worst / best round) says how
much the machine moved under it. What was checked, the rounds, the spread, the machine's load
and the verdict are recorded under ``checks``; ``checks.reliable`` is False when the result is
implausible or did not settle.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tracekit import formatting as fmt
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


MIN_ROUNDS = 3
MAX_ROUNDS = 6
# Two rounds of one BLAS product on an idle machine agree to a few percent; 10% apart, the
# rounds were measuring the machine's other work, not its ceiling.
STABLE = 0.10
GPU_PLAUSIBLE = 0.10  # of the datasheet peak: below it, the GPU was shared, throttled or misread
PEAK_TOLERANCE = 1.05  # above the datasheet peak (clocks beyond boost are rare): misread
# Per CPU thread (the floors are an order of magnitude below a modern core's sustained rate).
CPU_FLOOR_FLOPS = {"fp64": 1e9, "fp32": 2e9, "bf16": 0.2e9, "fp16": 0.1e9}
CPU_FLOOR_BANDWIDTH = 1e9  # bytes/s per thread, read + write
# A tuned SGEMM sustains most of a core's FMA peak once n is a few hundred (Goto and van de
# Geijn, "Anatomy of high-performance matrix multiplication", ACM TOMS 34(3), 2008: ~90%);
# cpu_peak_flops is an upper bound (two FMA ports, the highest clock stated), so a measurement
# under a tenth of it was not measuring the cores.
FAR_BELOW = 0.10
# fp32 FLOPs per cycle per core by the widest FMA the CPU states: lanes x 2 (multiply + add) x
# FMA ports. Two 512-bit ports on Xeon Scalable Gold/Platinum (Intel 64 and IA-32 Architectures
# Optimization Reference Manual, Skylake server microarchitecture), two 256-bit ports since
# Haswell and on AMD Zen 2 and later (same manual; AMD Software Optimization Guide for Zen 2,
# pub. 56305); up to four 128-bit NEON pipes on Arm Neoverse V1 / Apple M1 (Arm Neoverse V1
# Software Optimization Guide). Upper bounds: a part with fewer ports only lowers the peak.
FP32_FLOPS_PER_CYCLE = (("avx512f", 64), ("fma", 32), ("avx", 16), ("asimd", 32), ("sse2", 8))


def cpu_peak_flops(dtype: str, threads: int, cpuinfo: str | None = None, max_khz: float | None = None) -> float | None:
    """An upper bound on ``threads`` cores' matmul FLOP/s in ``dtype`` from the CPU's flags and
    clock (Linux's /proc/cpuinfo and cpufreq), or None where the CPU does not say."""
    if dtype not in ("fp32", "fp64"):
        return None  # bf16/fp16 units (AMX, AVX512-FP16) differ too much by part to bound here
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read(1 << 20)
        except OSError:
            return None
    flags: set[str] = set()
    mhz = 0.0
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("flags", "features") and not flags:
            flags = set(value.split())
        elif key == "cpu mhz":
            try:
                mhz = max(mhz, float(value))
            except ValueError:
                pass
    if max_khz is None:
        try:
            with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", encoding="utf-8") as f:
                max_khz = float(f.read().strip())
        except (OSError, ValueError):
            max_khz = None
    hz = max(mhz * 1e6, (max_khz or 0.0) * 1e3)
    per_cycle = next((n for flag, n in FP32_FLOPS_PER_CYCLE if flag in flags), None)
    if not hz or per_cycle is None:
        return None
    return threads * hz * per_cycle / (2 if dtype == "fp64" else 1)


def spread(rounds: list[float]) -> float:
    """1 - worst / best round: 0 when every round measured the same."""
    return 1.0 - min(rounds) / max(rounds) if rounds and max(rounds) > 0 else 0.0


def settled(rounds: list[float]) -> bool:
    """The best two rounds agree within ``STABLE``: the best is reproducible, not a fluke."""
    if len(rounds) < 2:
        return False
    a, b = sorted(rounds)[-2:]
    return b > 0 and a >= (1 - STABLE) * b


def problems(
    device_type: str,
    dtype: str,
    flops: float,
    bandwidth: float,
    threads: int | None,
    spec=None,
    cpu_peak: float | None = None,
) -> list[str]:
    """Why a measurement cannot be right, as sentences (empty: plausible). ``cpu_peak`` stands in
    for the CPU's own upper bound (``cpu_peak_flops``; 0 skips that check)."""
    out = []
    if device_type == "cpu":
        n = threads or 1
        floor = CPU_FLOOR_FLOPS.get(dtype, 0.1e9) * n
        if flops < floor:
            out.append(
                f"{flops / 1e9:.3g} GFLOP/s {dtype} matmul is below the floor of {floor / 1e9:.3g} GFLOP/s "
                f"for {n} thread{'s' if n != 1 else ''}"
            )
        if bandwidth < CPU_FLOOR_BANDWIDTH * n:
            out.append(
                f"{bandwidth / 1e9:.3g} GB/s copy is below the floor of {CPU_FLOOR_BANDWIDTH * n / 1e9:.3g} GB/s"
            )
        peak = cpu_peak_flops(dtype, n) if cpu_peak is None else cpu_peak
        if peak and flops >= floor and flops < FAR_BELOW * peak:
            out.append(
                f"{flops / 1e9:.3g} GFLOP/s {dtype} matmul is under {FAR_BELOW:.0%} of the {peak / 1e9:.3g} "
                f"GFLOP/s the CPU's vector units allow on {n} thread{'s' if n != 1 else ''}"
            )
        return out
    if spec is None:
        return out
    peak = spec.peak_flops(dtype, "matrix")
    if peak and not GPU_PLAUSIBLE * peak <= flops <= PEAK_TOLERANCE * peak:
        out.append(
            f"{fmt.flops(flops)} {dtype} matmul is outside {GPU_PLAUSIBLE:.0%}-{PEAK_TOLERANCE:.0%} of "
            f"{spec.name}'s {fmt.flops(peak)}"
        )
    bw = spec.peak_bandwidth
    if bw and not GPU_PLAUSIBLE * bw <= bandwidth <= PEAK_TOLERANCE * bw:
        out.append(
            f"{fmt.bandwidth(bandwidth)} copy is outside {GPU_PLAUSIBLE:.0%}-{PEAK_TOLERANCE:.0%} of "
            f"{spec.name}'s {fmt.bandwidth(bw)}"
        )
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
    """Measure this device's ceilings in the run's dtype, in rounds until they are plausible and
    settled (or ``MAX_ROUNDS``); the sidecar's ``calibration`` entry."""
    import torch

    dev = torch.device(device)
    t0 = time.perf_counter()
    threads = torch.get_num_threads() if dev.type == "cpu" else None
    spec = _datasheet(device_name) if dev.type == "cuda" else None
    flop_rounds: list[float] = []
    bw_rounds: list[float] = []
    found: list[str] = []
    while len(flop_rounds) < MAX_ROUNDS:
        f, n = matmul_flops(dev, dtype, budget_s * 0.25)
        b, nbytes = copy_bandwidth(dev, budget_s * 0.12)
        flop_rounds.append(f)
        bw_rounds.append(b)
        found = problems(dev.type, short_dtype(dtype), max(flop_rounds), max(bw_rounds), threads, spec)
        if len(flop_rounds) >= MIN_ROUNDS and not found and settled(flop_rounds) and settled(bw_rounds):
            break
    flops, bw = max(flop_rounds), max(bw_rounds)
    stable = settled(flop_rounds) and settled(bw_rounds)
    unsettled = (
        []
        if stable
        else [
            f"the {len(flop_rounds)} rounds did not settle: their best two differ by more than {STABLE:.0%} "
            f"(matmul spread {spread(flop_rounds):.0%}, copy spread {spread(bw_rounds):.0%})"
        ]
    )
    return {
        "device": dev.type,
        "device_name": device_name,
        "dtype": short_dtype(dtype),
        "matmul_flops": {short_dtype(dtype): flops},
        "copy_bandwidth": bw,
        "method": (
            f"best of {len(flop_rounds)} rounds, each the best of several bursts of torch.mm on {n}x{n} "
            f"{short_dtype(dtype)} matrices (2*n^3 FLOPs each); "
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
            "stable": stable,
            "reliable": not found and stable,
            "problems": found + unsettled,
            "attempts": len(flop_rounds),
            "rounds": {"matmul_flops": flop_rounds, "copy_bandwidth": bw_rounds},
            "spread": {"matmul_flops": round(spread(flop_rounds), 4), "copy_bandwidth": round(spread(bw_rounds), 4)},
            "cpu_peak_flops": cpu_peak_flops(short_dtype(dtype), threads) if dev.type == "cpu" and threads else None,
            "against": (
                f"{spec.name}'s datasheet row"
                if spec is not None
                else (
                    "the per-thread floors of tracekit.collect.calibrate and the FMA peak the CPU's flags and "
                    "clock allow (cpu_peak_flops)"
                    if dev.type == "cpu"
                    else "nothing: the GPU is not in tracekit's database"
                )
            ),
            "load_average_1m": _load(),
        },
    }
