"""The graphs a graph-capture trace recorded, each with the launch calls (and ops) it holds.

A graph is the launch calls between a ``*StreamBeginCapture`` and the ``*StreamEndCapture``
that follows it on the same thread, in order, each with the capture op that issued it. Its
batch is the engine's ``capture_<n>_<mode>`` range around it, else the batch the file's
name states (SGLang's and ATOM's ``bs_<bs>_rank<r>.json.gz``, one file per size), else
unknown. The graphs one range holds form one *capture*: a piecewise capture (vLLM's
``capture_<n>_PIECEWISE``) records one graph per piece, in the order the step replays them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.trace.model import Trace

_BEGIN_CAPTURE = ("cudaStreamBeginCapture", "hipStreamBeginCapture")
_END_CAPTURE = ("cudaStreamEndCapture", "hipStreamEndCapture")
_LAUNCH_CALLS = (
    "LaunchKernel",
    "LaunchKernelEx",
    "LaunchKernelExC",
    "ModuleLaunchKernel",
    "ExtModuleLaunchKernel",
    "LaunchCooperativeKernel",
    "MemcpyAsync",
    "MemsetAsync",
    "Memcpy2DAsync",
    "MemsetD32Async",
    "MemsetD8Async",
)


@dataclass
class Graph:
    ops: np.ndarray  # capture op row of each launch call, in order (-1: launched outside any op)
    kernels: list[str] | None  # the kernel each launch call names (ROCm), "" for unnamed; None: none named
    batch: int | None  # from the capture_<n>_<mode> range around it, else the file name; None when neither says
    file: int = 0  # which capture trace (its position among those given)
    capture: int = 0  # the range (or file, without ranges) it was captured in, numbered within its file


def captured_graphs(capture: Trace, file: int = 0) -> list[Graph]:
    """Each graph the capture trace recorded: the launch calls between a begin and an end of
    stream capture, in order, with the batch size of the engine's ``capture_<n>_<mode>`` range
    (else of the file's name). A trace that names kernels in its launch calls but records no
    stream capture is one graph."""
    rt = capture.runtime
    if not len(rt):
        return []
    names = rt["name"].astype(str)
    begins = rt[names.isin(_BEGIN_CAPTURE)].sort_values("start_ns")
    ends = rt[names.isin(_END_CAPTURE)].sort_values("start_ns")
    launch = rt[names.str.replace(r"^(cuda|hip|cu)", "", regex=True).isin(_LAUNCH_CALLS)]
    has_names = "kernel" in rt and bool((rt["kernel"].notna() & (rt["kernel"] != "")).any())
    by_name = frameworks.capture_file_batch(capture.path or "")
    ann = capture.annotations
    ranges = []
    if len(ann):
        for r in ann[ann["side"] == "cpu"].itertuples():
            parsed = frameworks.capture(str(r.name))
            if parsed:
                ranges.append((int(r.start_ns), int(r.end_ns), parsed[0]))
    graphs = []
    for b in begins.itertuples():
        later = ends[(ends["start_ns"] > b.start_ns) & (ends["tid"] == b.tid)]
        if not len(later):
            continue
        e = int(later["start_ns"].iloc[0])
        mine = launch[(launch["tid"] == b.tid) & (launch["start_ns"] > b.start_ns) & (launch["start_ns"] < e)]
        mine = mine.sort_values("start_ns")
        within = next((i for i, (s0, e0, _) in enumerate(ranges) if s0 <= b.start_ns <= e0), None)
        batch = ranges[within][2] if within is not None else by_name
        graphs.append(
            Graph(
                mine["op"].to_numpy(),
                _kernel_names(mine) if has_names else None,
                batch,
                file,
                within if within is not None else -1,
            )
        )
    if not graphs and has_names:
        named = rt[rt["kernel"].notna() & (rt["kernel"] != "")].sort_values("start_ns")
        batch = ranges[0][2] if len({n for _, _, n in ranges}) == 1 else by_name
        graphs.append(Graph(named["op"].to_numpy(), _kernel_names(named), batch, file, -1))
    return graphs


def _kernel_names(rows: pd.DataFrame) -> list[str]:
    return ["" if not isinstance(k, str) else k for k in rows["kernel"].tolist()]
