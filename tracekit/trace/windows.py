"""A trace too large to analyse at once -> windows of its time, each a trace file of its own.

Reading streams (memory holds the tables plus one chunk of text), but the analysis keeps a
few hundred bytes per kernel, so a trace around the size of memory cannot be analysed
whole. ``split`` cuts it into windows of about ``max_events`` events by time, in two
streamed passes whose memory does not grow with the trace:

1. A survey: every event's time, the span of every op, annotation, GPU kernel and engine
   step (the step annotations and step frames ``tracekit.frameworks`` reads), each runtime
   call's correlation id and each annotation's External id go to temporary files on disk.
2. Routing: every event is copied, as the bytes it was written with, into the window its
   time falls in. Window edges are near the time quantiles that give windows of
   ``max_events``, only between steps (a step longer than a window makes it grow), or at
   idle instants (no op open, no GPU work running) when the trace names no steps, so no
   step is cut in two. Steps inferred from a trace that names none (the launch pattern,
   forward-pass anchors) need the analysis: ``analysis.windows.split_keeping_steps`` infers them
   from the first split's windows and splits again between them (``split``'s ``steps``).

Kineto writes every CPU-side event before all GPU activity, and a kernel runs after its
launch, often in the next step's time: a kernel (and its launch flow) therefore goes to the
window of the runtime call that launched it, found by its correlation id, so every window's
kernels stay linked to their launches and ops; a GPU annotation goes with its CPU annotation
(by External id). Metadata events (process and thread names) go to every window, and each
window carries the trace's top-level keys (device properties, distributedInfo,
baseTimeNanoseconds), so a window reads, segments and prices like the whole trace would over
that time. ``tracekit report`` of the windows' folder merges them into one report of the run
(``analysis.windows``, ``analysis.merge``); ``tracekit batch`` analyses them in parallel, a row per window.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import shutil
import tempfile
from operator import attrgetter
from typing import Any, Callable, Union

import msgspec
import numpy as np

from tracekit import frameworks, markers
from tracekit.errors import TracekitError
from tracekit.trace import inflate, limits, stream
from tracekit.trace.decode import too_deep
from tracekit.trace.columns import LAUNCH_FLOWS, TABLE_OF

try:  # ISA-L's gzip writer, several times faster than zlib's at the same level (the fast extra)
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - the base install
    _gzip = gzip

# CPU-side events a window holds by default (its kernels come with them): about 0.5-1 GB of JSON,
# which `tracekit summary` analyses in about as much memory.
DEFAULT_EVENTS = 2_000_000
# Every window's file is open while routing: stay well inside the usual limit of 1024 open files.
MAX_WINDOWS = 500
# How split names its windows: <trace name>.window-<i>-of-<k>.json.gz, in time order.
WINDOW_NAME = re.compile(r"\.window-(\d+)-of-(\d+)\.json\.gz$")
# The top-level key of a window saying which it is: {"index", "of", "trace", "cut"}.
WINDOW_KEY = "tracekitWindow"
# The time grid windows are cut on: a bin of a 10-minute trace is 0.14 ms, finer than the host's
# pause between two steps; its histograms take 64 MB whatever the trace's size.
_BINS = 1 << 22
_BLOCK = 1 << 20  # rows of a temporary file read at a time


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
_PH, _CAT, _TS, _DUR, _ID, _NAME = (attrgetter(a) for a in ("ph", "cat", "ts", "dur", "id", "name"))
_CORR_OF, _EXT_OF = attrgetter("args.correlation"), attrgetter("args.external_id")

# What an event is to routing, by (phase, category): the last four are the complete ("X")
# events that the reader's tables are made of, which windows are sized by.
_OTHER, _META, _FLOW, _COMPLETE, _GPU_ANNOTATION, _OP, _GPU, _LAUNCH, _ANNOTATION = range(9)
_CPU_SIDE = (_COMPLETE, _OP, _LAUNCH, _ANNOTATION)  # (_COMPLETE: Python frames)


def _kind(ph: str, cat: str | None) -> int:
    cat = (cat or "").lower()
    if ph == "M":
        return _META
    if ph in ("s", "f") and cat in LAUNCH_FLOWS:
        return _FLOW
    table, side = TABLE_OF.get(cat, (None, None)) if ph == "X" else (None, None)
    if table is None:  # (complete events of no table, such as Kineto's "Trace" span, too)
        return _OTHER
    if table == "annotations":
        return _ANNOTATION if side == "cpu" else _GPU_ANNOTATION
    return {"kernels": _GPU, "runtime": _LAUNCH, "cpu_ops": _OP}.get(table, _COMPLETE)


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


class _Columns:
    """A chunk's routing facts as arrays: time, kind, duration (``durations``), and for the
    kinds in ``ids_of`` the id that ties an event to the CPU-side one it goes with (-1
    elsewhere): the correlation id of kernels, launch calls and launch flows, the External id
    of CPU and GPU annotations. Each pass asks only for what it uses: these are per-event passes."""

    def __init__(self, where: list, kinds: dict, ids_of: tuple[int, ...], durations: bool = False) -> None:
        n = len(where)
        self.ts = np.fromiter(map(_TS, where), np.float64, n)
        self.dur = np.fromiter(map(_DUR, where), np.float64, n) if durations else None
        keys = list(zip(map(_PH, where), map(_CAT, where)))
        for key in set(keys).difference(kinds):
            kinds[key] = _kind(*key)
        self.kind = np.fromiter(map(kinds.__getitem__, keys), np.int8, n)
        self.id = np.full(n, -1, dtype=np.int64)

        # A launch flow's id is the correlation id of the launch and its kernel.
        for of, get in (((_FLOW,), _ID), ((_GPU, _LAUNCH), _CORR_OF), ((_ANNOTATION, _GPU_ANNOTATION), _EXT_OF)):
            of = tuple(k for k in of if k in ids_of)
            if of:
                rows = np.flatnonzero(np.isin(self.kind, of))
                self.id[rows] = _ints(list(map(get, map(where.__getitem__, rows.tolist()))))


def _ints(values: list) -> np.ndarray:
    """Ids as int64, -1 where one is not an integer (a string id, none): in C when all are."""
    try:
        return np.fromiter(values, np.int64, len(values))
    except (TypeError, ValueError, OverflowError):
        return np.array([v if isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63 else -1
                         for v in values], dtype=np.int64)


def _hashable(name) -> bool:
    return isinstance(name, str)


def trace_stem(path: str) -> str:
    """The name a trace's windows start with: the file's name without its trace extension."""
    return os.path.basename(markers.sidecar_path_for(path))[: -len(markers.SIDECAR_SUFFIX)]


def split(path: str, out_dir: str, *, max_events: int = DEFAULT_EVENTS, force: bool = False,
          progress: Callable[[str, int, int | None], None] | None = None,
          notes: list[str] | None = None, steps: np.ndarray | None = None) -> list[str]:
    """Write ``path``'s windows of about ``max_events`` CPU-side events (ops, runtime calls,
    annotations, Python frames; kernels go with their launches) into ``out_dir`` (created if
    missing) and return their paths, in time order. ``force`` replaces an earlier split's
    windows there. ``progress(stage, bytes_done, bytes_total or None)`` is called as each pass
    goes through the decompressed text (the survey learns the total for the routing pass).
    What the user should know about the cut (a window grown to hold a long step) is appended
    to ``notes``. ``steps`` are steps found elsewhere (inferred from a trace that names none:
    ``analysis.windows.split_keeping_steps``) to cut between, rows of (step start, first launch,
    last launch's end) in trace microseconds, instead of the steps the trace names or its idle
    instants; the ops between a cut and the next step's start go to both windows.
    Raises ``TracekitError`` with one sentence for anything that cannot be split."""
    if max_events < 1:
        raise TracekitError(f"the events per window must be a positive number, not {max_events}")
    if not os.path.isfile(path):
        raise TracekitError(f"{path}: no such file" if not os.path.exists(path) else f"{path} is not a file")
    made = not os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    try:
        return _split(path, out_dir, max_events, force, progress, notes, steps)
    except BaseException as e:
        if made and not os.listdir(out_dir):
            os.rmdir(out_dir)  # a folder this call made leaves with it
        if isinstance(e, RecursionError):  # nested past the decoder's recursion
            raise too_deep(path) from None
        raise


def _split(path: str, out_dir: str, max_events: int, force: bool, progress, notes: list | None,
           steps: np.ndarray | None = None) -> list[str]:
    sidecar = markers.sidecar_path_for(path)
    stem = trace_stem(path)
    clash = [f for f in os.listdir(out_dir) if f.startswith(f"{stem}.window-")]
    if clash and not force:
        raise TracekitError(f"{out_dir} already holds windows of {os.path.basename(path)} ({clash[0]}, ...): "
                            "pass --force to replace them, or choose another folder")
    # The guard against compression bombs protects the disk here, where the windows go
    # (compressed, they take less than the JSON); memory stays bounded at any size.
    limit = limits.max_decompressed_bytes() if os.environ.get(limits.MAX_SIZE_ENV, "").strip() else \
        max(limits.max_decompressed_bytes(), shutil.disk_usage(out_dir).free)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".tracekit-split-") as tmp:
        tick = progress or (lambda stage, done, total: None)
        stage = f"surveying {os.path.basename(path)}"
        survey = _survey(path, limit, tmp, lambda done: tick(stage, done, None))
        survey.given = None if steps is None else np.asarray(steps, dtype=np.float64).reshape(-1, 3)
        edges = _edges(survey, max_events)
        launches, annotations = _IdRanges(survey, "launches", edges), _IdRanges(survey, "annotations", edges)
        survey.close()
        writing = f"writing {len(edges) + 1} window{'s' if len(edges) else ''}"
        written = _route(path, limit, survey.meta, edges, launches, annotations, out_dir, stem, tmp,
                         lambda done: tick(writing, done, survey.bytes), survey.cut if len(edges) else "",
                         survey.range_edges)
        if notes is not None:
            notes.extend(survey.notes)
    if os.path.exists(sidecar):  # what tracekit collect recorded of the run holds for every window
        for w in written:
            shutil.copyfile(sidecar, markers.sidecar_path_for(w))
    # An earlier split's windows (and their sidecars) that this one did not replace.
    mine = set(written) | {markers.sidecar_path_for(w) for w in written}
    for f in clash:
        if os.path.join(out_dir, f) not in mine:
            os.remove(os.path.join(out_dir, f))
    return written


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
    if kind == _ANNOTATION:
        if frameworks.parse_annotation(name) is not None:
            return _ENGINE_STEP
        return _PROFILER_STEP if frameworks.pytorch.is_profiler_step(name) else _NOT_STEP
    return _ENGINE_STEP if frameworks.step_frame_source(name) else _NOT_STEP


class _Survey:
    """What the first pass keeps: counts, and temporary files of times and ids on disk."""

    def __init__(self, tmp: str) -> None:
        self._files = {name: open(os.path.join(tmp, name), "wb") for name in _FILES}
        self.n = 0
        self.bytes = 0  # of decompressed text
        self.lo, self.hi = math.inf, -math.inf
        self.meta: dict = {}
        self.counts = {"steps": 0, "profiler_steps": 0}  # rows of those files
        self.cut = CUT_STEPS  # how _edges cut the windows
        self.notes: list[str] = []  # what the user should know about the cut
        self.given: np.ndarray | None = None  # steps found elsewhere, split's ``steps``
        self.range_edges = np.zeros(0)  # where given, the starts of the steps cut before (the edges' own)

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def write(self, name: str, *columns: np.ndarray) -> None:
        """Append rows (one value per field of the file's row type) to a temporary file."""
        rows = np.empty(len(columns[0]), dtype=_FILES[name])
        for field, values in zip(rows.dtype.names, columns):
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


def _open(path: str, limit: int, raws: bool = False) -> stream.EventChunks:
    """The trace's events, a chunk at a time (a file cut mid-write gives its complete events)."""
    return stream.EventChunks(path, inflate.Inflated(path, limit, for_analysis=False), decoder=_Decoder(raws))


def _each(chunks: stream.EventChunks, tick: Callable[[int], None]):
    """The chunks, telling ``tick`` the decompressed bytes read so far after each."""
    try:
        for chunk, _ in chunks:
            yield chunk
            tick(chunks.slices.total)
    except stream.NotStreamable:
        raise TracekitError(f"{chunks.path} cannot be split: it is not a Chrome trace whose traceEvents array "
                            "can be read in pieces (tracekit report reads it whole)") from None


def _survey(path: str, limit: int, tmp: str, tick: Callable[[int], None]) -> _Survey:
    s = _Survey(tmp)
    kinds: dict = {}
    step_of: dict = {}
    chunks = _open(path, limit)
    for chunk in _each(chunks, tick):
        c = _Columns(chunk.where, kinds, ids_of=(_LAUNCH, _ANNOTATION), durations=True)
        timed = ~np.isnan(c.ts)
        # Windows are sized by their CPU side: a kernel goes with its launch, wherever it ran.
        ts = c.ts[timed & np.isin(c.kind, _CPU_SIDE)]
        s.write("ts", ts)
        s.n += len(ts)
        if len(ts):
            s.lo, s.hi = min(s.lo, float(ts.min())), max(s.hi, float(ts.max()))
        ranges = timed & ((c.kind == _OP) | (c.kind == _ANNOTATION))
        s.write("ranges", c.ts[ranges], c.ts[ranges] + np.nan_to_num(c.dur[ranges]))
        for name, kind in (("launches", _LAUNCH), ("annotations", _ANNOTATION)):
            rows = timed & (c.kind == kind) & (c.id >= 0)
            s.write(name, c.ts[rows], c.id[rows])
        gpu = timed & (c.kind == _GPU)
        s.write("gpu", c.ts[gpu], c.ts[gpu] + np.nan_to_num(c.dur[gpu]))
        # Steps, by name: each distinct (kind, name) asks the engine grammars once.
        rows = np.flatnonzero(timed & ((c.kind == _ANNOTATION) | (c.kind == _COMPLETE)))
        if len(rows):
            keys = list(zip(c.kind[rows].tolist(), map(_NAME, map(chunk.where.__getitem__, rows.tolist()))))
            for key in set(k for k in keys if _hashable(k[1])).difference(step_of):
                step_of[key] = _step_class(*key)
            cls = np.fromiter((step_of.get(k, _NOT_STEP) if _hashable(k[1]) else _NOT_STEP for k in keys),
                              np.int8, len(keys))
            for name, which in (("steps", _ENGINE_STEP), ("profiler_steps", _PROFILER_STEP)):
                mine = rows[cls == which]
                if len(mine):
                    s.write(name, c.ts[mine], c.ts[mine] + np.nan_to_num(c.dur[mine]))
                    s.counts[name] += len(mine)
    s.meta = chunks.meta
    s.bytes = chunks.slices.total
    return s


# How a split's windows were cut (the window's metadata and ``split``'s notes say which).
CUT_STEPS = "between engine steps"
CUT_PROFILER_STEPS = "between ProfilerStep ranges"
CUT_INFERRED = "between the steps inferred from the whole trace (it names none)"
CUT_IDLE = "at idle instants (no op open, no GPU work running)"
CUT_OPS = "at instants when no op is open (the GPU is never idle there)"
CUT_LEAST = "at the least-covered instants (ops never all close)"


def _edges(s: _Survey, max_events: int) -> np.ndarray:
    """Window edges in trace microseconds, increasing: window i holds times in [edges[i-1], edges[i]).

    Each edge is near the time quantile that gives windows of ``max_events``, where no step
    is open: at the start of a step that begins after every earlier step (on any thread)
    ended, the steps being the engine's (``tracekit.frameworks``: step annotations, step
    frames; else ``ProfilerStep#N`` ranges). A step, its ops and the launches inside it are
    never cut apart: a step longer than a window makes its window grow. A trace that names
    no steps is cut at idle instants: no op or annotation open and no GPU work running,
    found on a time grid of ``_BINS`` bins from histograms, whatever the trace's size."""
    k = math.ceil(s.n / max_events) if s.n else 1
    if k > MAX_WINDOWS:
        raise TracekitError(f"{s.n:,} events in windows of {max_events:,} would make {k:,} windows, more than "
                            f"{MAX_WINDOWS}: ask for more events per window")
    if k <= 1 or not s.hi > s.lo:
        return np.zeros(0)
    width = (s.hi - s.lo) / _BINS

    def bins(t: np.ndarray) -> np.ndarray:
        # Clipped as floats: an absurd duration (1e308 us) must not overflow the cast.
        return np.clip((t - s.lo) / width, 0, _BINS - 1).astype(np.int64)

    cum = np.zeros(_BINS, dtype=np.int64)
    for block in s.blocks("ts"):
        cum += np.bincount(bins(block["ts"]), minlength=_BINS)
    np.cumsum(cum, out=cum)
    targets = np.arange(1, k) * (s.n / k)
    named = "given" if s.given is not None else \
        "steps" if s.counts["steps"] else "profiler_steps" if s.counts["profiler_steps"] else None
    if named is not None:
        s.cut = {"given": CUT_INFERRED, "steps": CUT_STEPS}.get(named, CUT_PROFILER_STEPS)
        # Steps are few beside events (one per forward pass): their starts and ends fit in memory.
        if named == "given":
            starts, ends = _step_gaps(s.given[:, 1], s.given[:, 2])
        else:
            rows = np.concatenate(list(s.blocks(named)))
            starts, ends = _step_gaps(rows["start"], rows["end"])
        cuts = starts[(starts > s.lo) & (starts <= s.hi)]
        # Events before each cut (to a bin): a cut is chosen by how near it is to a quantile.
        before = cum[np.maximum(bins(cuts) - 1, 0)] * (bins(cuts) > 0)
        chosen = _nearest(before, targets)
        edges = cuts[chosen] if len(cuts) else np.zeros(0)
        counts = before[chosen] if len(cuts) else np.zeros(0, np.int64)
        if named == "given" and len(edges):
            # A given step is its launches' span: any instant after the previous step's last
            # launch keeps both whole. The latest at which no op is open keeps each kernel with
            # its op (ops begin before their launches); the ops between it and the step's own
            # start are written to the earlier window too (``_route``).
            edges = _clear_before(edges, ends[(starts > s.lo) & (starts <= s.hi)][chosen],
                                  _open_at(s, "ranges", bins), bins, s.lo, width)
    else:
        open_at = _open_at(s, "ranges", bins)
        busy_at = _open_at(s, "gpu", bins)
        for cut, clear in ((CUT_IDLE, (open_at == 0) & (busy_at == 0)), (CUT_OPS, open_at == 0)):
            at = np.flatnonzero(clear[1:]) + 1  # (bin 0 is the trace's start)
            if len(at):
                s.cut = cut
                chosen = at[_nearest(cum[at - 1], targets)]
                break
        else:
            s.cut = CUT_LEAST
            chosen = _least_covered(open_at, np.searchsorted(cum, targets))
        edges = s.lo + chosen.astype(np.float64) * width
        counts = cum[chosen - 1]
    edges, counts = np.unique(edges), counts[np.unique(edges, return_index=True)[1]]
    # A window left with a sliver of the events (a trace's few events before its first step) joins the next.
    keep, kept, last = [], [0], 0
    for e, n in zip(edges.tolist(), counts.tolist()):
        if n - last >= max_events // 10 and s.n - n >= max_events // 10:
            keep.append(e)
            kept.append(int(n))
            last = n
    if named == "given" and keep:
        # Each edge's step: the first whose first launch is at or after it.
        first = s.given[np.argsort(s.given[:, 1], kind="stable"), :]
        at = np.minimum(np.searchsorted(first[:, 1], np.asarray(keep), side="left"), len(first) - 1)
        s.range_edges = np.minimum(first[at, 0], first[at, 1])
    held = np.diff([*kept, s.n])
    if held.max() > 1.5 * max_events:
        i = int(np.argmax(held))
        what = "a step longer than a window stays whole" if named else "no earlier instant is idle"
        s.notes.append(f"window {i + 1} holds about {int(held[i]):,} CPU-side events, more than --events "
                       f"{max_events:,}: {what}, so the window grows")
    return np.asarray(keep, dtype=np.float64)


def _step_gaps(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The instants no step is open: each step start after every earlier step (nested ones
    and other threads' included) ended, and that end. Sorted by time."""
    o = np.argsort(start, kind="stable")
    st, en = start[o], np.maximum(end[o], start[o])
    reach = np.maximum.accumulate(en)
    gap = np.flatnonzero(st[1:] > reach[:-1]) + 1
    return st[gap], reach[gap - 1]


def _clear_before(cuts: np.ndarray, after: np.ndarray, open_at: np.ndarray, bins, lo: float,
                  width: float) -> np.ndarray:
    """Each cut moved back to the latest bin start after ``after`` (the previous step's last
    launch) and no later than the cut at which no op or annotation is open; kept where none is."""
    out = cuts.copy()
    for j, (c, a) in enumerate(zip(cuts.tolist(), after.tolist())):
        first, last = int(bins(np.array([a]))[0]) + 1, int(bins(np.array([c]))[0])
        clear = np.flatnonzero(open_at[first:last + 1] == 0) if first <= last else []
        if len(clear):
            out[j] = max(lo + (first + int(clear[-1])) * width, math.nextafter(a, math.inf))
    return out


def _nearest(have: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each target count, the index of the candidate whose count (sorted) is nearest."""
    if not len(have):
        return np.zeros(0, np.int64)
    j = np.clip(np.searchsorted(have, targets), 1, len(have) - 1) if len(have) > 1 else np.zeros(len(targets), np.int64)
    if len(have) > 1:
        j = np.where(np.abs(have[j - 1] - targets) <= np.abs(have[j] - targets), j - 1, j)
    return j.astype(np.int64)


def _open_at(s: _Survey, name: str, bins) -> np.ndarray:
    """Ranges of a survey file open at the start of each bin: those begun in earlier bins less
    those ended in them (an end in the bin itself still counts as open, so 0 is clear)."""
    open_at = np.zeros(_BINS, dtype=np.int64)
    for block in s.blocks(name):
        open_at[1:] += np.bincount(bins(block["start"]), minlength=_BINS)[:-1]
        open_at[1:] -= np.bincount(bins(block["end"]), minlength=_BINS)[:-1]
    np.cumsum(open_at, out=open_at)
    return open_at


def _least_covered(open_at: np.ndarray, quantile: np.ndarray) -> np.ndarray:
    """Within a quarter of a window of each quantile bin, the least-covered bin start, the nearest of those."""
    chosen = []
    for j, q in enumerate(quantile.tolist()):
        lo_q = quantile[j - 1] if j else 0
        hi_q = quantile[j + 1] if j + 1 < len(quantile) else _BINS
        reach = max(1, min(q - lo_q, hi_q - q) // 4)
        a, b = max(1, q - reach), min(_BINS, q + reach + 1)
        if a >= b:
            continue
        near = open_at[a:b]
        best = np.flatnonzero(near == near.min()) + a
        chosen.append(int(best[np.argmin(np.abs(best - q))]))
    return np.asarray(chosen, dtype=np.int64)


class _IdRanges:
    """Which window holds the CPU-side event with a given id (a launch call's correlation id,
    an annotation's External id): per window, the least and greatest id of those it holds.
    Both ids grow with time, so the windows' ranges do too; where threads make two overlap,
    a running maximum keeps the search sorted and membership is checked."""

    def __init__(self, s: _Survey, name: str, edges: np.ndarray) -> None:
        k = len(edges) + 1
        lo = np.full(k, np.iinfo(np.int64).max)
        hi = np.full(k, -1, dtype=np.int64)
        for block in s.blocks(name):
            w = np.searchsorted(edges, block["ts"], side="right")
            ids = block["id"]
            np.minimum.at(lo, w, ids)
            np.maximum.at(hi, w, ids)
        self.windows = np.flatnonzero(hi >= 0)  # the windows holding any
        self.lo, self.hi = lo[self.windows], hi[self.windows]
        self.top = np.maximum.accumulate(self.hi) if len(self.hi) else self.hi

    def route(self, window: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
        """Set ``window[rows]`` to the window holding each of ``ids[rows]``, where one does."""
        if not len(rows) or not len(self.windows):
            return
        mine = ids[rows]
        j = np.searchsorted(self.top, mine)
        inside = j < len(self.windows)
        inside[inside] &= (self.lo[j[inside]] <= mine[inside]) & (mine[inside] <= self.hi[j[inside]])
        window[rows[inside]] = self.windows[j[inside]]


def _route(path: str, limit: int, meta: dict, edges: np.ndarray, launches: _IdRanges, annotations: _IdRanges,
           out_dir: str, stem: str, tmp: str, tick: Callable[[int], None], cut: str,
           range_edges: np.ndarray = np.zeros(0)) -> list[str]:
    k = len(edges) + 1
    names = [f"{stem}.window-{i + 1:0{len(str(k))}d}-of-{k}.json.gz" for i in range(k)]  # WINDOW_NAME
    parts = [os.path.join(tmp, n) for n in names]
    # The trace's own top-level keys, then its events: each window is a trace like the whole.
    outs = [_gzip.open(p, "wb", compresslevel=1) for p in parts]
    first = [True] * k
    try:
        for i, out in enumerate(outs):
            # Which window of which trace, and how it was cut: tracekit report DIR merges them in order.
            window = {"index": i + 1, "of": k, "trace": os.path.basename(path), "cut": cut}
            out.write(msgspec.json.encode({**meta, WINDOW_KEY: window, "traceEvents": []})[:-3] + b"[")
        kinds: dict = {}
        for chunk in _each(_open(path, limit, raws=True), tick):
            c = _Columns(chunk.where, kinds, ids_of=(_GPU, _FLOW, _GPU_ANNOTATION))
            window = np.searchsorted(edges, np.nan_to_num(c.ts, nan=-math.inf), side="right")
            # Kernels and launch flows go with their launch call, GPU annotations with their CPU
            # one, wherever the GPU ran them; the rest (and those whose partner is not in the
            # trace) by their own time.
            launches.route(window, c.id, np.flatnonzero(((c.kind == _GPU) | (c.kind == _FLOW)) & (c.id >= 0)))
            annotations.route(window, c.id, np.flatnonzero((c.kind == _GPU_ANNOTATION) & (c.id >= 0)))
            raws = chunk.raws
            is_meta = c.kind == _META
            for i in np.flatnonzero(is_meta).tolist():
                for w in range(k):
                    _write(outs[w], first, w, raws[i])
            window[is_meta] = -1
            if len(range_edges):
                # Between inferred steps the cut (an instant no op is open) may fall before the
                # next step's own start: the ops between are the earlier step's, and also go to
                # its window (where the whole trace has them in that step), and the other way round.
                ops = np.flatnonzero(c.kind == _OP)
                theirs = np.searchsorted(range_edges, np.nan_to_num(c.ts[ops], nan=-math.inf), side="right")
                other = theirs != window[ops]
                for i, w in zip(ops[other].tolist(), theirs[other].tolist()):
                    _write(outs[w], first, w, raws[i])
            order = np.argsort(window, kind="stable")
            bounds = np.searchsorted(window[order], np.arange(k + 1))
            for w in range(k):
                sel = order[bounds[w]:bounds[w + 1]]
                if len(sel):
                    _write(outs[w], first, w, b",\n".join(map(raws.__getitem__, sel.tolist())))
        for out in outs:
            out.write(b"]}\n")
    finally:
        for out in outs:
            out.close()
    written = []
    for p, n in zip(parts, names):
        dest = os.path.join(out_dir, n)
        os.replace(p, dest)
        written.append(dest)
    return written


def _write(out, first: list[bool], w: int, data) -> None:
    if not first[w]:
        out.write(b",\n")
    first[w] = False
    out.write(data)
