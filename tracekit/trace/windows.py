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

This module runs the two passes and writes the windows (routing, pass 2). How a chunk of
events is read and classified is ``tracekit.trace.window_events``; the survey (pass 1) is
``tracekit.trace.window_survey``; where the edges go (and the ``CUT_*`` sentences saying
how) is ``tracekit.trace.window_edges``.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import shutil
import tempfile
from types import ModuleType
from typing import Callable

import msgspec
import numpy as np

from tracekit import markers
from tracekit.errors import TracekitError
from tracekit.trace import limits, window_edges
from tracekit.trace.decode import too_deep
from tracekit.trace.window_events import FLOW, GPU, GPU_ANNOTATION, META, OP, Columns, each_chunk, open_chunks
from tracekit.trace.window_survey import Survey, run_survey

_gzip: ModuleType
try:  # ISA-L's gzip writer, several times faster than zlib's at the same level (the fast extra)
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - the base install
    _gzip = gzip

# CPU-side events a window holds by default (its kernels come with them): about 0.5-1 GB of JSON,
# which `tracekit summary` analyses in about as much memory.
DEFAULT_EVENTS = 2_000_000
# How split names its windows: <trace name>.window-<i>-of-<k>.json.gz, in time order.
WINDOW_NAME = re.compile(r"\.window-(\d+)-of-(\d+)\.json\.gz$")
# The top-level key of a window saying which it is: {"index", "of", "trace", "cut"}.
WINDOW_KEY = "tracekitWindow"


def trace_stem(path: str) -> str:
    """The name a trace's windows start with: the file's name without its trace extension."""
    return os.path.basename(markers.sidecar_path_for(path))[: -len(markers.SIDECAR_SUFFIX)]


def split(
    path: str,
    out_dir: str,
    *,
    max_events: int = DEFAULT_EVENTS,
    force: bool = False,
    progress: Callable[[str, int, int | None], None] | None = None,
    notes: list[str] | None = None,
    steps: np.ndarray | None = None,
) -> list[str]:
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


def _split(
    path: str, out_dir: str, max_events: int, force: bool, progress, notes: list | None, steps: np.ndarray | None = None
) -> list[str]:
    sidecar = markers.sidecar_path_for(path)
    stem = trace_stem(path)
    clash = [f for f in os.listdir(out_dir) if f.startswith(f"{stem}.window-")]
    if clash and not force:
        raise TracekitError(
            f"{out_dir} already holds windows of {os.path.basename(path)} ({clash[0]}, ...): "
            "pass --force to replace them, or choose another folder"
        )
    # The guard against compression bombs protects the disk here, where the windows go
    # (compressed, they take less than the JSON); memory stays bounded at any size.
    limit = (
        limits.max_decompressed_bytes()
        if os.environ.get(limits.MAX_SIZE_ENV, "").strip()
        else max(limits.max_decompressed_bytes(), shutil.disk_usage(out_dir).free)
    )
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".tracekit-split-") as tmp:
        tick = progress or (lambda stage, done, total: None)
        stage = f"surveying {os.path.basename(path)}"
        survey = run_survey(path, limit, tmp, lambda done: tick(stage, done, None))
        survey.given = None if steps is None else np.asarray(steps, dtype=np.float64).reshape(-1, 3)
        edges = window_edges.find_edges(survey, max_events)
        launches, annotations = _IdRanges(survey, "launches", edges), _IdRanges(survey, "annotations", edges)
        survey.close()
        writing = f"writing {len(edges) + 1} window{'s' if len(edges) else ''}"
        written = _route(
            path,
            limit,
            survey.meta,
            edges,
            launches,
            annotations,
            out_dir,
            stem,
            tmp,
            lambda done: tick(writing, done, survey.bytes),
            survey.cut if len(edges) else "",
            survey.range_edges,
        )
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


class _IdRanges:
    """Which window holds the CPU-side event with a given id (a launch call's correlation id,
    an annotation's External id): per window, the least and greatest id of those it holds.
    Both ids grow with time, so the windows' ranges do too; where threads make two overlap,
    a running maximum keeps the search sorted and membership is checked."""

    def __init__(self, s: Survey, name: str, edges: np.ndarray) -> None:
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


def _route(
    path: str,
    limit: int,
    meta: dict,
    edges: np.ndarray,
    launches: _IdRanges,
    annotations: _IdRanges,
    out_dir: str,
    stem: str,
    tmp: str,
    tick: Callable[[int], None],
    cut: str,
    range_edges: np.ndarray | None = None,
) -> list[str]:
    range_edges = np.zeros(0) if range_edges is None else range_edges
    k = len(edges) + 1
    names = [f"{stem}.window-{i + 1:0{len(str(k))}d}-of-{k}.json.gz" for i in range(k)]  # WINDOW_NAME
    parts = [os.path.join(tmp, n) for n in names]
    # The trace's own top-level keys, then its events: each window is a trace like the whole.
    outs = [_gzip.open(p, "wb", compresslevel=1) for p in parts]
    first = [True] * k
    try:
        for i, out in enumerate(outs):
            # Which window of which trace, and how it was cut: tracekit report DIR merges them in order.
            about = {"index": i + 1, "of": k, "trace": os.path.basename(path), "cut": cut}
            out.write(msgspec.json.encode({**meta, WINDOW_KEY: about, "traceEvents": []})[:-3] + b"[")
        kinds: dict = {}
        for chunk in each_chunk(open_chunks(path, limit, raws=True), tick):
            c = Columns(chunk.where, kinds, ids_of=(GPU, FLOW, GPU_ANNOTATION), durations=len(range_edges) > 0)
            window = np.searchsorted(edges, np.nan_to_num(c.ts, nan=-math.inf), side="right")
            # Kernels and launch flows go with their launch call, GPU annotations with their CPU
            # one, wherever the GPU ran them; the rest (and those whose partner is not in the
            # trace) by their own time.
            launches.route(window, c.id, np.flatnonzero(((c.kind == GPU) | (c.kind == FLOW)) & (c.id >= 0)))
            annotations.route(window, c.id, np.flatnonzero((c.kind == GPU_ANNOTATION) & (c.id >= 0)))
            raws = chunk.raws
            is_meta = c.kind == META
            for i in np.flatnonzero(is_meta).tolist():
                for w in range(k):
                    _write(outs[w], first, w, raws[i])
            window[is_meta] = -1
            if len(range_edges):
                # Between inferred steps the cut (an instant no op is open) may fall before the
                # next step's own start: the ops between are the earlier step's, and also go to
                # its window (where the whole trace has them in that step), and the other way round.
                ops = np.flatnonzero(c.kind == OP)
                theirs = np.searchsorted(range_edges, np.nan_to_num(c.ts[ops], nan=-math.inf), side="right")
                other = theirs != window[ops]
                for i, w in zip(ops[other].tolist(), theirs[other].tolist()):
                    _write(outs[w], first, w, raws[i])
                # An inferred step may begin inside an op (its first kernel launched from it): an
                # op still open at a cut also goes to the windows it runs into, so the kernels it
                # launched there keep their op (and its cost), as in the whole trace.
                ends = np.searchsorted(edges, np.nan_to_num(c.ts[ops] + c.dur[ops], nan=-math.inf), side="left")
                for i, w0, w1, t in zip(ops.tolist(), window[ops].tolist(), ends.tolist(), theirs.tolist()):
                    for w in range(w0 + 1, min(w1, k - 1) + 1):
                        if w != t:
                            _write(outs[w], first, w, raws[i])
            order = np.argsort(window, kind="stable")
            bounds = np.searchsorted(window[order], np.arange(k + 1))
            for w in range(k):
                sel = order[bounds[w] : bounds[w + 1]]
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
