"""Hand-built Kineto (PyTorch profiler) traces for tests whose expected figures are worked out
by arithmetic: every op, launch and kernel is placed by the test, so what a step holds, what a
kernel's FLOPs and bytes are and how long it ran are known by construction, not read back from
tracekit. The events carry the fields a real Kineto trace carries (see ../shared/traces/PROVENANCE.md).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PID, TID, STREAM = 100, 100, 7
# What deviceProperties says about the GPUs the tests name: (compute capability, SMs, memory bytes).
DEVICES = {
    "NVIDIA A100-SXM4-80GB": ((8, 0), 108, 84990623744),
    "NVIDIA H100 80GB HBM3": ((9, 0), 132, 85018279936),
    "NVIDIA B200": ((10, 0), 148, 191503138816),
    "AMD Instinct MI300X": ((9, 4), 304, 206158430208),
}


class Doc:
    """One trace document; times are microseconds, as Kineto writes them."""

    def __init__(self, device: str | None = "NVIDIA A100-SXM4-80GB", rank: int | None = None, world: int | None = None):
        self.events: list[dict] = []
        self.device = device
        self.rank, self.world = rank, world
        self._ext = 1000
        self._corr = 5000

    def op(self, name: str, ts: float, dur: float, dims=None, types=None, concrete=None, tid: int = TID) -> int:
        """A cpu_op with its recorded shapes; returns its External id."""
        self._ext += 1
        args = {"External id": self._ext}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = types
            args["Concrete Inputs"] = concrete if concrete is not None else [""] * len(dims)
        self.events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )
        return self._ext

    def kernel(
        self,
        name: str,
        launch_ts: float,
        gpu_ts: float,
        gpu_dur: float,
        ext: int | None = None,
        stream: int = STREAM,
        tid: int = TID,
        grid=(1, 1, 1),
        block=(128, 1, 1),
        launch_dur: float = 2.0,
    ) -> int:
        """A cudaLaunchKernel at ``launch_ts`` on thread ``tid`` and the kernel it launched."""
        self._corr += 1
        c = self._corr
        rt = {"cbid": 211, "correlation": c}
        k = {
            "device": 0,
            "stream": stream,
            "correlation": c,
            "grid": list(grid),
            "block": list(block),
            "registers per thread": 32,
            "shared memory": 0,
        }
        if ext is not None:
            rt["External id"] = ext
            k["External id"] = ext
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": PID,
                "tid": tid,
                "ts": launch_ts,
                "dur": launch_dur,
                "args": rt,
            }
        )
        self.events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": gpu_ts, "dur": gpu_dur, "args": k}
        )
        self.events.append({"ph": "s", "id": c, "pid": PID, "tid": tid, "ts": launch_ts, "cat": "ac2g", "name": "ac2g"})
        self.events.append(
            {"ph": "f", "id": c, "pid": 0, "tid": stream, "ts": gpu_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"}
        )
        return c

    def runtime(self, name: str, ts: float, dur: float, tid: int = TID) -> int:
        """A runtime call that queues nothing (a synchronize, an event record); returns its correlation."""
        self._corr += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"cbid": 0, "correlation": self._corr},
            }
        )
        return self._corr

    def graph(
        self,
        launch_ts: float,
        kernels: list[tuple[str, float, float]],
        stream: int = STREAM,
        tid: int = TID,
        launch_dur: float = 10.0,
    ) -> int:
        """A cudaGraphLaunch and the kernels its replay ran, ``(name, gpu_ts, gpu_dur)``, all under its
        one correlation id, as a graph replay is recorded."""
        self._corr += 1
        c = self._corr
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaGraphLaunch",
                "pid": PID,
                "tid": tid,
                "ts": launch_ts,
                "dur": launch_dur,
                "args": {"cbid": 311, "correlation": c},
            }
        )
        for name, ts, dur in kernels:
            self.events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": ts,
                    "dur": dur,
                    "args": {"device": 0, "stream": stream, "correlation": c, "grid": [1, 1, 1], "block": [128, 1, 1]},
                }
            )
        return c

    def annotation(self, name: str, ts: float, dur: float, tid: int = TID) -> None:
        """A record_function range (``user_annotation``) on the CPU thread."""
        self._ext += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": self._ext},
            }
        )

    def document(self) -> dict:
        doc: dict = {"schemaVersion": 1, "traceEvents": self.events, "displayTimeUnit": "ms"}
        if self.device is not None:
            (major, minor), sms, mem = DEVICES.get(self.device, ((8, 0), 108, 84990623744))
            doc["deviceProperties"] = [
                {
                    "id": 0,
                    "name": self.device,
                    "computeMajor": major,
                    "computeMinor": minor,
                    "numSms": sms,
                    "totalGlobalMem": mem,
                }
            ]
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world}
        return doc

    def write(self, path: Path) -> Path:
        path = Path(path)
        text = json.dumps(self.document())
        if path.name.endswith(".gz"):
            with gzip.open(path, "wt") as f:
                f.write(text)
        else:
            path.write_text(text)
        return path
