"""The metadata sidecar: what a trace cannot say about its own run.

Written next to ``<name>.pt.trace.json.gz`` as ``<name>.tracekit.json``
(``tracekit.markers.sidecar_path_for``). Keys (other modules read them)::

    tracekit_version, created (UTC ISO 8601)
    workload:    kind ("preset" | "model" | "script"), preset, model_path, model_config (dict),
                 architecture, parameters, dtype ("fp32" | "bf16" | "fp16"), batch_size,
                 prompt_len, new_tokens (decode steps; each sequence gets new_tokens + 1 tokens,
                 the first from the prefill), device, compile, cuda_graphs
                 (script runs add script, argv)
    versions:    python, torch, transformers, cuda, hip
    device:      type ("cpu" | "cuda"), name, count; a CPU run adds threads, cores,
                 load_average_1m and contention {other_cores, seconds, busy}: the cores other
                 processes used over the timed runs and calibration (tracekit.collect.contention)
    timing:      ttft_ms, tpot_ms [per decode step], wall_ms           (run without the profiler)
                 profiled_wall_ms, profiled_ttft_ms, profiled_tpot_ms  (the profiled run)
                 profiler_overhead_ratio (profiled / unprofiled time of what the trace records)
                 warmup_runs, synchronized
    calibration: device, device_name, dtype, matmul_flops {dtype: FLOP/s}, copy_bandwidth (B/s),
                 method, checks {plausible, stable, reliable, problems, attempts (rounds), rounds
                 {matmul_flops, copy_bandwidth: [per round]}, spread {same keys: 1 - worst/best},
                 cpu_peak_flops, against, load_average_1m}, ...
                 (None with --no-calibrate)
    schedule:    skip_decode_steps, profiler_warmup_steps, record_decode_steps,
                 prefill_recorded, recorded_decode_steps [first, last], decode_steps_total
    markers:     prefill, decode (the marker prefixes in tracekit.markers)
    notes:       warnings about the measurement, as sentences (e.g. a busy machine)

All times are milliseconds of synchronised wall clock (perf_counter) measured outside
the profiler's own accounting.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from typing import Any

from tracekit import markers


def versions() -> dict[str, Any]:
    import torch

    try:
        import transformers

        tf = transformers.__version__
    except ImportError:
        tf = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": tf,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
    }


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def device_info(device: str) -> dict[str, Any]:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return {
            "type": "cuda",
            "name": torch.cuda.get_device_name(index),
            "count": torch.cuda.device_count(),
            "index": index,
        }
    info = {"type": "cpu", "name": cpu_name(), "count": 1, "threads": torch.get_num_threads(), "cores": os.cpu_count()}
    try:
        info["load_average_1m"] = round(os.getloadavg()[0], 2)  # other work inflates CPU timings
    except (OSError, AttributeError):
        pass
    return info


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def build(
    workload: dict[str, Any],
    device: dict[str, Any],
    timing: dict[str, Any],
    calibration: dict[str, Any] | None,
    schedule: dict[str, Any],
) -> dict[str, Any]:
    from tracekit import __version__

    return {
        "tracekit_version": __version__,
        "created": now_iso(),
        "workload": workload,
        "versions": versions(),
        "device": device,
        "timing": timing,
        "calibration": calibration,
        "schedule": schedule,
        "markers": {"prefill": markers.PREFILL, "decode": markers.DECODE},
    }


def write(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def read(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


__all__ = ["build", "write", "read", "versions", "device_info", "cpu_name"]
