"""``split``'s first pass: a trace -> a ``Survey``, its counts and temporary files of times and ids.

``run_survey`` streams the trace once and writes to disk every CPU-side event's time, the
span of every op, annotation, GPU kernel and engine step (the step annotations and step
frames ``tracekit.frameworks`` reads, and ``ProfilerStep#N`` ranges), each runtime call's
correlation id and each annotation's External id, so that memory does not grow with the
trace. ``window_edges.find_edges`` chooses the windows from it; ``windows`` routes by it.
"""

from __future__ import annotations

import math
import os
from operator import attrgetter
from typing import Callable, cast

import numpy as np

from tracekit import frameworks
from tracekit.trace.window_edges import CUT_STEPS
from tracekit.trace.window_events import (
    ANNOTATION,
    COMPLETE,
    CPU_SIDE,
    GPU,
    LAUNCH,
    OP,
    Columns,
    each_chunk,
    open_chunks,
)

_BLOCK = 1 << 20  # rows of a temporary file read at a time
_NAME = attrgetter("name")


def _hashable(name) -> bool:
    return isinstance(name, str)


_TIMED_IDS = np.dtype([("ts", "f8"), ("id", "i8")])
# The survey's temporary files, by the rows they hold: times (trace microseconds) and ids.
_FILES = {
    "ts": np.dtype([("ts", "f8")]),  # every CPU-side event's start
    "ranges": np.dtype([("start", "f8"), ("end", "f8")]),  # every op and CPU annotation
    "launches": _TIMED_IDS,  # runtime calls and their correlation ids
    "annotations": _TIMED_IDS,  # CPU annotations and their External ids
    "steps": np.dtype([("start", "f8"), ("end", "f8")]),  # engine steps: annotations and step frames
    "profiler_steps": np.dtype([("start", "f8"), ("end", "f8")]),  # ProfilerStep#N ranges
    "gpu": np.dtype([("start", "f8"), ("end", "f8")]),  # kernels, memcpy and memset
}
# What a range is to cutting: no step, an engine's step (the grammars of tracekit.frameworks:
# step annotations, step frames), or a ProfilerStep#N range (a step only where nothing else is).
_NOT_STEP, _ENGINE_STEP, _PROFILER_STEP = range(3)


def _step_class(kind: int, name) -> int:
    if not isinstance(name, str):
        return _NOT_STEP
    if kind == ANNOTATION:
        if frameworks.parse_annotation(name) is not None:
            return _ENGINE_STEP
        return _PROFILER_STEP if frameworks.pytorch.is_profiler_step(name) else _NOT_STEP
    return _ENGINE_STEP if frameworks.step_frame_source(name) else _NOT_STEP


class Survey:
    """What the first pass keeps: counts, and temporary files of times and ids on disk."""

    def __init__(self, tmp: str) -> None:
        self._files = {name: open(os.path.join(tmp, name), "wb") for name in _FILES}
        self.n = 0
        self.bytes = 0  # of decompressed text
        self.lo, self.hi = math.inf, -math.inf
        self.meta: dict = {}
        self.counts = {"steps": 0, "profiler_steps": 0}  # rows of those files
        self.cut = CUT_STEPS  # how window_edges.find_edges cut the windows
        self.notes: list[str] = []  # what the user should know about the cut
        self.given: np.ndarray | None = None  # steps found elsewhere, split's ``steps``
        self.range_edges = np.zeros(0)  # where given, the starts of the steps cut before (the edges' own)

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def write(self, name: str, *columns: np.ndarray) -> None:
        """Append rows (one value per field of the file's row type) to a temporary file."""
        rows = np.empty(len(columns[0]), dtype=_FILES[name])
        # A structured dtype (``_FILES``): it always has field names.
        for field, values in zip(cast("tuple[str, ...]", rows.dtype.names), columns):
            rows[field] = values
        rows.tofile(self._files[name])

    def blocks(self, name: str):
        """The file's rows, ``_BLOCK`` at a time."""
        f = self._files[name]
        if not f.closed:
            f.flush()
        # Read, not mapped: pages of a mapping would stay in the process's resident set.
        with open(f.name, "rb") as r:
            while len(block := np.fromfile(r, dtype=_FILES[name], count=_BLOCK)):
                yield block


def run_survey(path: str, limit: int, tmp: str, tick: Callable[[int], None]) -> Survey:
    """The first pass over ``path``: its counts and temporary files (in ``tmp``), ``tick``ing the bytes read."""
    s = Survey(tmp)
    kinds: dict = {}
    step_of: dict = {}
    chunks = open_chunks(path, limit)
    for chunk in each_chunk(chunks, tick):
        c = Columns(chunk.where, kinds, ids_of=(LAUNCH, ANNOTATION), durations=True)
        timed = ~np.isnan(c.ts)
        # Windows are sized by their CPU side: a kernel goes with its launch, wherever it ran.
        ts = c.ts[timed & np.isin(c.kind, CPU_SIDE)]
        s.write("ts", ts)
        s.n += len(ts)
        if len(ts):
            s.lo, s.hi = min(s.lo, float(ts.min())), max(s.hi, float(ts.max()))
        ranges = timed & ((c.kind == OP) | (c.kind == ANNOTATION))
        s.write("ranges", c.ts[ranges], c.ts[ranges] + np.nan_to_num(c.dur[ranges]))
        for name, kind in (("launches", LAUNCH), ("annotations", ANNOTATION)):
            rows = timed & (c.kind == kind) & (c.id >= 0)
            s.write(name, c.ts[rows], c.id[rows])
        gpu = timed & (c.kind == GPU)
        s.write("gpu", c.ts[gpu], c.ts[gpu] + np.nan_to_num(c.dur[gpu]))
        # Steps, by name: each distinct (kind, name) asks the engine grammars once.
        rows = np.flatnonzero(timed & ((c.kind == ANNOTATION) | (c.kind == COMPLETE)))
        if len(rows):
            keys = list(zip(c.kind[rows].tolist(), map(_NAME, map(chunk.where.__getitem__, rows.tolist()))))
            for key in set(k for k in keys if _hashable(k[1])).difference(step_of):
                step_of[key] = _step_class(*key)
            cls = np.fromiter(
                (step_of.get(k, _NOT_STEP) if _hashable(k[1]) else _NOT_STEP for k in keys), np.int8, len(keys)
            )
            for name, which in (("steps", _ENGINE_STEP), ("profiler_steps", _PROFILER_STEP)):
                mine = rows[cls == which]
                if len(mine):
                    s.write(name, c.ts[mine], c.ts[mine] + np.nan_to_num(c.dur[mine]))
                    s.counts[name] += len(mine)
    s.meta = chunks.meta
    s.bytes = chunks.slices.total
    return s
