"""A trace's events as ``split``'s two passes read them: a chunk at a time, each event's kind, time and id.

``open_chunks`` streams a trace's ``traceEvents`` in chunks (memory holds one chunk of text)
decoded as only what the passes need of each event (phase, category, name, time, duration,
id, correlation and External ids) and, for routing, the bytes it was written with;
``each_chunk`` walks them, telling a progress callback the bytes read. ``Columns`` turns a
chunk into arrays: time, duration, kind (``OTHER`` ... ``ANNOTATION``: what an event is to
routing) and the id that ties a kernel, launch flow or GPU annotation to its CPU-side event.
The passes are ``tracekit.trace.window_survey`` and ``tracekit.trace.windows``.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any, Callable, Union

import msgspec
import numpy as np

from tracekit.errors import TracekitError
from tracekit.trace import inflate, stream
from tracekit.trace.columns import LAUNCH_FLOWS, TABLE_OF


class _Args(msgspec.Struct, gc=False, frozen=True):
    correlation: Union[int, str] = -1
    external_id: Union[int, str] = msgspec.field(default=-1, name="External id")


_NO_ARGS = _Args()


class _Where(msgspec.Struct, gc=False, frozen=True):
    """What routing needs of an event; every other field is skipped. (Timestamps are numbers
    of microseconds, as the reader requires.)"""

    ph: str = ""
    cat: Union[str, None] = None
    name: Any = None  # (untrusted: any JSON value; only a string can name a step)
    ts: float = math.nan
    dur: float = 0.0
    id: Union[int, str, None] = None
    args: _Args = _NO_ARGS


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_WHERE = msgspec.json.Decoder(list[_Where])
_PH, _CAT, _TS, _DUR, _ID = (attrgetter(a) for a in ("ph", "cat", "ts", "dur", "id"))
_CORR_OF, _EXT_OF = attrgetter("args.correlation"), attrgetter("args.external_id")
# ``Columns.dur`` of a pass that did not ask for durations: no rows to index.
_NO_DURATIONS = np.empty(0)

# What an event is to routing, by (phase, category): the last four are the complete ("X")
# events that the reader's tables are made of, which windows are sized by.
OTHER, META, FLOW, COMPLETE, GPU_ANNOTATION, OP, GPU, LAUNCH, ANNOTATION = range(9)
CPU_SIDE = (COMPLETE, OP, LAUNCH, ANNOTATION)  # (COMPLETE: Python frames)


def _kind(ph: str, cat: str | None) -> int:
    cat = (cat or "").lower()
    if ph == "M":
        return META
    if ph in ("s", "f") and cat in LAUNCH_FLOWS:
        return FLOW
    table, side = TABLE_OF.get(cat, (None, None)) if ph == "X" else (None, None)
    if table is None:  # (complete events of no table, such as Kineto's "Trace" span, too)
        return OTHER
    if table == "annotations":
        return ANNOTATION if side == "cpu" else GPU_ANNOTATION
    return {"kernels": GPU, "runtime": LAUNCH, "cpu_ops": OP}.get(table, COMPLETE)


class _Chunk:
    """A chunk of events: what routing needs of each, and (for routing) the bytes they were written with."""

    __slots__ = ("raws", "where")

    def __init__(self, raws: list | None, where: list) -> None:
        self.raws, self.where = raws, where

    def __len__(self) -> int:
        return len(self.where)


class _Decoder:
    """For ``stream.EventChunks``: a chunk's text decoded as ``_Where``s and, for routing
    (``raws``), as the events' own bytes too."""

    def __init__(self, raws: bool) -> None:
        self.raws = raws

    def decode(self, view) -> _Chunk:
        return _Chunk(_RAWS.decode(view) if self.raws else None, _WHERE.decode(view))


class Columns:
    """A chunk's routing facts as arrays: time, kind, duration (``durations``), and for the
    kinds in ``ids_of`` the id that ties an event to the CPU-side one it goes with (-1
    elsewhere): the correlation id of kernels, launch calls and launch flows, the External id
    of CPU and GPU annotations. Each pass asks only for what it uses: these are per-event passes."""

    def __init__(self, where: list, kinds: dict, ids_of: tuple[int, ...], durations: bool = False) -> None:
        n = len(where)
        self.ts = np.fromiter(map(_TS, where), np.float64, n)
        self.dur = np.fromiter(map(_DUR, where), np.float64, n) if durations else _NO_DURATIONS
        keys = list(zip(map(_PH, where), map(_CAT, where)))
        for key in set(keys).difference(kinds):
            kinds[key] = _kind(*key)
        self.kind = np.fromiter(map(kinds.__getitem__, keys), np.int8, n)
        self.id = np.full(n, -1, dtype=np.int64)

        # A launch flow's id is the correlation id of the launch and its kernel.
        for of, get in (((FLOW,), _ID), ((GPU, LAUNCH), _CORR_OF), ((ANNOTATION, GPU_ANNOTATION), _EXT_OF)):
            wanted = tuple(k for k in of if k in ids_of)
            if wanted:
                rows = np.flatnonzero(np.isin(self.kind, wanted))
                self.id[rows] = _ints(list(map(get, map(where.__getitem__, rows.tolist()))))


def _ints(values: list) -> np.ndarray:
    """Ids as int64, -1 where one is not an integer (a string id, none): in C when all are."""
    try:
        return np.fromiter(values, np.int64, len(values))
    except (TypeError, ValueError, OverflowError):
        return np.array(
            [v if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63 else -1 for v in values],
            dtype=np.int64,
        )


def open_chunks(path: str, limit: int, raws: bool = False) -> stream.EventChunks[inflate.Inflated]:
    """The trace's events, a chunk at a time (a file cut mid-write gives its complete events)."""
    return stream.EventChunks(path, inflate.Inflated(path, limit, for_analysis=False), decoder=_Decoder(raws))


def each_chunk(chunks: stream.EventChunks[inflate.Inflated], tick: Callable[[int], None]):
    """The chunks, telling ``tick`` the decompressed bytes read so far after each."""
    try:
        for chunk, _ in chunks:
            yield chunk
            tick(chunks.slices.total)
    except stream.NotStreamable:
        raise NotSplittable(chunks.path) from None


class NotSplittable(TracekitError):
    """A file the stream cannot cut: the caller, which can read a file whole, says why in the
    reader's words (``analysis.windows.split_keeping_steps``)."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path} cannot be split: it is a trace, but not one whose traceEvents array can be read "
            f"in pieces; tracekit report {path} reads it whole"
        )
        self.path = path
