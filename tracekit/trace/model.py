"""The ``Trace`` value: everything downstream reads this, never raw JSON.

Tables are pandas DataFrames with one row per event. Times are integer
nanoseconds (int64) on the trace's own clock (``baseTimeNanoseconds`` applied),
so ``end_ns - start_ns`` is exact and nothing downstream juggles microsecond
floats. Link columns hold row positions (``0..len-1``) into another table, or -1
where the trace does not give the link.

``kernels``      every GPU activity: kernels, memcpy and memset (``kind`` says which)
    name, kind ("kernel" | "memcpy" | "memset"), start_ns, end_ns, dur_ns,
    device, stream, correlation, external_id,
    ctas     blocks launched (grid x * y * z), -1 where the trace has no grid
    grid_x, grid_y, grid_z   the launch grid's dimensions (int32; -1 where the trace has no grid;
             ROCm traces count the grid in threads, CUDA traces in blocks)
    block_x, block_y, block_z   threads per block (int32; -1 where not recorded)
    bytes    bytes a memcpy or memset moved (its `bytes` arg), -1 elsewhere
    launch   -> row in ``runtime`` of the launching runtime call (by correlation)
    op       -> row in ``cpu_ops`` of the op that launched it (through the launch)
    graph    bool: launched by a cudaGraphLaunch / hipGraphLaunch (graph replay)
``runtime``      CUDA/HIP runtime and driver calls (cudaLaunchKernel, hipGraphLaunch, ...)
    name, api ("runtime" | "driver"), start_ns, end_ns, dur_ns, pid, tid,
    correlation, external_id,
    kernel   name of the kernel a launch call queued, where the trace says (ROCm), else None
    op       -> row in ``cpu_ops`` of the enclosing op (External id, else time nesting)
``cpu_ops``      aten / framework ops (``cpu_op`` / ``Operator``)
    name, start_ns, end_ns, dur_ns, pid, tid, external_id,
    input_dims   JSON text of ``Input Dims`` or None (decode with ``Trace.shapes``)
    input_types  JSON text of ``Input type`` or None
``annotations``  user ranges: ``record_function``, ``ProfilerStep#N``, framework markers
    name, side ("cpu" | "gpu"), start_ns, end_ns, dur_ns, pid, tid, device, stream,
    external_id
``python``       ``python_function`` events (``nn.Module:`` spans, Python frames)
    name, start_ns, end_ns, dur_ns, pid, tid

``rank`` is a column of every table when several per-rank files were read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# Trace.metadata key: the ns the reader added to every time of a trace whose clock runs below
# zero (``reader._clock_shift``); absent when the clock was not moved.
CLOCK_SHIFT = "clock_shift_ns"

# Schema eras, oldest first.
ERA_PT19 = "pytorch-1.9"  # Operator / Runtime / Kernel, flow "async"
ERA_2022 = "2022"  # cpu_op / cuda_runtime / kernel, flow "async_cpu_to_gpu"
ERA_CURRENT = "current"  # ... flow "ac2g", user_annotation / gpu_user_annotation


@dataclass
class Trace:
    """One profiler trace (or several per-rank traces) read into tables."""

    path: str
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    cpu_ops: pd.DataFrame
    annotations: pd.DataFrame
    python: pd.DataFrame
    # deviceProperties entries as given, keyed by device id.
    devices: dict[int, dict[str, Any]] = field(default_factory=dict)
    # distributedInfo (rank, world_size, backend, ...) or None.
    distributed: dict[str, Any] | None = None
    # Top-level keys other than traceEvents / deviceProperties / distributedInfo, and
    # ``truncated`` ({events_recovered, bytes_read, bytes_parsed, recovered_share, how, gpu_events_lost,
    # gpu_evidence, ...}: see ``reader._note_truncation``) when the file was cut off mid-write.
    metadata: dict[str, Any] = field(default_factory=dict)
    # The ``<name>.tracekit.json`` sidecar written by ``tracekit collect``, if found.
    sidecar: dict[str, Any] | None = None
    era: str = ERA_CURRENT
    # What the trace could not give, as {fact: reason}; later stages say "unknown because ...".
    lacks: dict[str, str] = field(default_factory=dict)
    # Number of events and decompressed bytes read, for progress and benchmarks.
    n_events: int = 0
    n_bytes: int = 0

    @property
    def has_gpu(self) -> bool:
        return len(self.kernels) > 0

    @property
    def start_ns(self) -> int:
        starts = [t["start_ns"].min() for t in (self.kernels, self.cpu_ops, self.runtime, self.annotations) if len(t)]
        return int(min(starts)) if starts else 0

    @property
    def end_ns(self) -> int:
        ends = [t["end_ns"].max() for t in (self.kernels, self.cpu_ops, self.runtime, self.annotations) if len(t)]
        return int(max(ends)) if ends else 0

    def device_name(self, device: int | None = None) -> str | None:
        """Name of a device (the first GPU used when None), or None if the trace lacks it."""
        return (self.device_props(device) or {}).get("name") or None

    def device_props(self, device: int | None = None) -> dict[str, Any] | None:
        """deviceProperties of a device (the first GPU used when None), or None if absent."""
        return self.device_resolution(device)[0]

    def device_resolution(self, device: int | None = None) -> tuple[dict[str, Any] | None, str | None]:
        """(deviceProperties of the device the kernels ran on, how they were found when not by id).

        Kernel device ids and deviceProperties ids disagree when the process saw
        renumbered devices (CUDA/HIP_VISIBLE_DEVICES: kernels on device 6, properties for
        0-3) and on ROCm, which numbers kernel devices by HSA agent. When every listed
        device is the same part there is no doubt which one it was.
        """
        if device is None:
            used = self.kernels["device"] if len(self.kernels) else pd.Series(dtype="int64")
            used = used[used >= 0]
            device = int(used.mode().iloc[0]) if len(used) else (min(self.devices) if self.devices else None)
        if device in self.devices:
            return self.devices[device], None
        if not self.devices:
            return None, None
        if len(self.devices) == 1:
            return next(iter(self.devices.values())), None
        identities = {_identity(p) for p in self.devices.values()}
        listed = ", ".join(str(d) for d in sorted(self.devices))
        if len(identities) == 1:
            props = next(iter(self.devices.values()))
            return props, (
                f"kernels ran on device {device}, which deviceProperties does not list (it lists "
                f"devices {listed}, all {props.get('name')!r}): renumbered visible devices, so that part"
            )
        return None, (
            f"kernels ran on device {device}, which deviceProperties does not list, and its devices "
            f"{listed} are not all the same part"
        )

    def shapes(self, op_row: int) -> tuple[list | None, list | None]:
        """(Input Dims, Input type) of a cpu op, decoded; (None, None) when not recorded."""
        return op_shapes(self.cpu_ops, op_row)


def _identity(props: dict[str, Any]) -> tuple:
    return tuple(props.get(k) for k in ("name", "computeMajor", "computeMinor", "numSms", "totalGlobalMem"))


def op_shapes(ops: pd.DataFrame, op_row: int) -> tuple[list | None, list | None]:
    """(Input Dims, Input type) of row ``op_row`` of a cpu-ops table, decoded."""
    dims = ops["input_dims"].iat[op_row]
    types = ops["input_types"].iat[op_row]
    return (json.loads(dims) if dims else None, json.loads(types) if types else None)
