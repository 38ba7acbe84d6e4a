"""An analysis rendered into the trace itself: the original Chrome-trace document, unchanged,
plus tracks that Perfetto and chrome://tracing show beside the profiler's own.

What is added (nothing of the original is removed or altered):

- a process of its own (an integer pid the trace does not use, named "tracekit") with
  ``M`` metadata events naming its tracks;
- a steps track: each step an ``X`` slice named "<phase> step <index>" whose args hold its
  phase, tokens, batch (and where they came from), duration, GPU busy and idle;
- a GPU-idle track: each idle gap of a step (``analysis.waiting.idle``) an ``X`` slice named by its
  largest cause, with every cause's share, and the call, op and frames the launching thread
  was in;
- a critical-path track: each step's critical path (``analysis.replay``), one ``X`` slice per
  segment named by its kind (``report.annotate_critical``);
- per unit of work (each kernel, or each leaf CPU op of a CPU trace), ``tracekit_*`` keys
  added to the original event's args: category, bound, limiter, FLOPs, bytes, roof fraction,
  cost source. Every original key and value stays; the prefix keeps the added keys apart.

The added events carry the category ``tracekit``, which the reader gives no table, so an
annotated trace reads back with the same analysis as the original.
Times are written as the file writes them: microseconds from ``baseTimeNanoseconds``.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from decimal import Decimal
from typing import Any, Iterator

import msgspec
import numpy as np
import pandas as pd

from tracekit.analysis.waiting.idle import CAUSES
from tracekit.report.annotate_critical import TITLE as CRITICAL_TITLE
from tracekit.report.annotate_critical import critical_slices, track_metadata
from tracekit.trace.model import CLOCK_SHIFT
from tracekit.trace.windows import WINDOW_KEY

CATEGORY = "tracekit"  # no table of the reader's: the added events are invisible to the analysis
ARG_PREFIX = "tracekit_"
STEPS_TID, IDLE_TID = 1, 2
LANE_STRIDE = 100  # a track's overlapping slices go to tids tid + 100, tid + 200, ... (see _spread)
# Work columns copied into each kernel's args (as tracekit_<column>).
WORK_ARGS = ("category", "bound", "limiter", "flops", "bytes", "roof_fraction", "cost_source")
_FIRST_PID = 2_000_000_000  # above any OS pid and GPU id Kineto writes
# Idle gaps described with call, op and frames, longest first: the rest are named by cause only
# (a serving trace has a gap between almost every two kernels; describing each costs the time of
# the analysis again, and the short ones are launch overhead whose call is the next launch).
DESCRIBED_GAPS = 5000


class _Args(msgspec.Struct, gc=False):
    correlation: Any = -1


class _Head(msgspec.Struct, gc=False):
    """What matching needs of an event; the event itself stays the file's text (``msgspec.Raw``)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


class Document:
    """A trace document as the file's text, cut into its top-level values and its events: what is
    not changed is written back verbatim (an epoch-scale ``ts`` with ns digits keeps every digit,
    which a float would round to a quarter of a microsecond)."""

    def __init__(self, top: dict[str, msgspec.Raw] | None, events: list[msgspec.Raw]):
        self.top = top  # None: an old bare list of events
        self.events = events
        self.heads = msgspec.json.decode(b"[" + b",".join(events) + b"]", type=list[_Head]) if events else []

    def base_ns(self) -> int:
        raw = (self.top or {}).get("baseTimeNanoseconds")
        try:
            base = msgspec.json.decode(raw) if raw is not None else 0
        except msgspec.DecodeError:
            return 0
        return base if isinstance(base, int) and not isinstance(base, bool) else 0

    def encode(self) -> bytes:
        evs = b"[" + b",".join(self.events) + b"]"
        if self.top is None:
            return evs
        # The keys in the file's order (Kineto writes some metadata after the events).
        return _ENCODER.encode({k: msgspec.Raw(evs) if k == "traceEvents" else v for k, v in self.top.items()})


# Decimal timestamps are written as numbers, exact to the nanosecond at any clock value.
_ENCODER = msgspec.json.Encoder(decimal_format="number")


def annotate(
    doc: Document, trace, parts, analysis, rank_label: str | None = None, first_step: int = 0
) -> dict[str, int]:
    """Add the analysis' tracks and per-kernel args to ``doc`` (the trace's document) in place.

    ``trace`` is the ``Trace`` read from that document, ``parts`` and ``analysis`` what
    ``analysis.analyze.measure``/``assemble`` made of it; ``first_step`` numbers the steps (a
    split window's step 0 is its run's step ``first_step``). Returns counts of what was added."""
    # The document's clock: its own base, and the reader's shift of a clock below zero.
    base_ns = doc.base_ns() + int(trace.metadata.get(CLOCK_SHIFT, 0))
    pid = _free_pid(doc.heads)
    steps = analysis.steps
    title = "tracekit steps" + (f" ({rank_label})" if rank_label else "")
    step_slices = _step_slices(steps, pid, base_ns, first_step)
    # A CPU trace has no device waiting on its ops: no idle track.
    idle_slices = _idle_slices(parts.idle, parts.work, steps, pid, base_ns, first_step)
    critical = critical_slices(getattr(analysis, "replayer", None), pid, base_ns, first_step, CATEGORY)
    added = _metadata(pid, title, with_idle=bool(idle_slices))
    added += _spread(step_slices, title) + _spread(idle_slices, "GPU idle, by cause")
    if critical:
        added += track_metadata(pid, CATEGORY) + _spread(critical, CRITICAL_TITLE)
    kernels = _kernel_args(doc, trace, parts.work)
    doc.events.extend(msgspec.Raw(_ENCODER.encode(e)) for e in added + step_slices + idle_slices + critical)
    return {
        "steps": len(step_slices),
        "idle": len(idle_slices),
        "kernels": kernels,
        "pid": pid,
        "critical": len(critical),
    }


def _free_pid(heads: list) -> int:
    used = {h.pid for h in heads if isinstance(h.pid, (int, str))}
    pid = _FIRST_PID
    while pid in used:
        pid += 1
    return pid


def _metadata(pid: int, steps_title: str, with_idle: bool) -> list[dict]:
    def meta(name: str, args: dict, tid: int | None = None) -> dict:
        e = {"ph": "M", "cat": CATEGORY, "name": name, "pid": pid, "args": args}
        if tid is not None:
            e["tid"] = tid
        return e

    out = [
        meta("process_name", {"name": "tracekit"}),
        meta("process_labels", {"labels": "tracekit's reading of this trace"}),
        meta("process_sort_index", {"sort_index": -1}),
        meta("thread_name", {"name": steps_title}, STEPS_TID),
        meta("thread_sort_index", {"sort_index": STEPS_TID}, STEPS_TID),
    ]
    if with_idle:
        out += [
            meta("thread_name", {"name": "GPU idle, by cause"}, IDLE_TID),
            meta("thread_sort_index", {"sort_index": IDLE_TID}, IDLE_TID),
        ]
    return out


def _spread(slices: list[dict], title: str) -> list[dict]:
    """Move slices that overlap an earlier one on their track to further lanes (tids
    ``tid + LANE_STRIDE * k``), in place, and return the metadata naming those lanes.

    Perfetto and chrome://tracing accept only slices that nest perfectly on a track; one that
    starts inside another and ends after it is dropped or cut. A step's window runs from its
    first launch to its last kernel's end, so on an engine that schedules the next step while
    the GPU still runs this one (asynchronous scheduling) two windows can overlap; so can two
    windows of a trace stitched from several. Each slice goes to the first lane whose last
    slice has ended (a greedy interval colouring: as few lanes as the deepest overlap)."""
    active: list[tuple[Decimal, int]] = []  # (end, lane) of the slices still open
    free: list[int] = []  # lanes whose last slice has ended, lowest first
    lanes = 0
    for e in sorted(slices, key=lambda e: e["ts"]):
        while active and active[0][0] <= e["ts"]:
            heapq.heappush(free, heapq.heappop(active)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, lanes = lanes, lanes + 1
        heapq.heappush(active, (e["ts"] + e["dur"], lane))
        e["tid"] += LANE_STRIDE * lane
    if not slices:
        return []
    tid, pid = min(e["tid"] for e in slices), slices[0]["pid"]  # lane 0's tid: every slice is >= it
    return [
        {
            "ph": "M",
            "cat": CATEGORY,
            "name": "thread_name",
            "pid": pid,
            "tid": tid + LANE_STRIDE * k,
            "args": {"name": f"{title} (overlapping, lane {k + 1})"},
        }
        for k in range(1, lanes)
    ]


def _us(ns: int, base_ns: int) -> Decimal:
    """A table time (ns, base applied) as the file's ts: microseconds from its base, exact to the ns."""
    return Decimal(int(ns) - base_ns).scaleb(-3)


def _dur_us(ns: int) -> Decimal:
    return Decimal(int(ns)).scaleb(-3)


def _value(v: Any) -> Any:
    """A JSON-safe scalar: NaN and missing -> None, numpy -> Python."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        return int(v) if v.is_integer() and abs(v) < 2**53 else v
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return v


def _step_slices(steps: pd.DataFrame, pid: int, base_ns: int, first_step: int = 0) -> list[dict]:
    out = []
    for r in steps.itertuples(index=False):
        idle = getattr(r, "idle_by_cause", None)
        index = first_step + int(r.step)
        out.append(
            {
                "ph": "X",
                "cat": CATEGORY,
                "name": f"{r.phase} step {index}",
                "pid": pid,
                "tid": STEPS_TID,
                "ts": _us(r.begin_ns, base_ns),
                "dur": _dur_us(r.end_ns - r.begin_ns),
                "args": {
                    "step": index,
                    "phase": r.phase,
                    "label": _value(r.label),
                    "tokens": _value(r.tokens),
                    "batch": _value(r.batch),
                    "tokens_source": _value(getattr(r, "tokens_source", None)),
                    "batch_source": _value(getattr(r, "batch_source", None)),
                    "phase_source": _value(r.source),
                    "duration_ms": r.duration_ns / 1e6,
                    "busy_ms": r.gpu_busy_ns / 1e6,
                    "idle_ms": r.gpu_idle_ns / 1e6,
                    # The slice is the step's window: its duration plus the GPU's time in it on other work
                    # (no idle slice covers that): unrecorded work the step's waited on, the next step's.
                    "unrecorded_ms": getattr(r, "unrecorded_ns", 0) / 1e6,
                    "next_ms": getattr(r, "next_ns", 0) / 1e6,
                    "previous_ms": getattr(r, "previous_ns", 0) / 1e6,
                    "kernels": int(r.kernels),
                    **({"idle_by_cause_ms": {k: _value(v) for k, v in idle.items()}} if isinstance(idle, dict) else {}),
                },
            }
        )
    return out


def _idle_slices(
    idle, work: pd.DataFrame, steps: pd.DataFrame, pid: int, base_ns: int, first_step: int = 0
) -> list[dict]:
    g = idle.gaps
    if not len(g):
        return []
    start, end, step = g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["step"].to_numpy()
    parts = g[list(CAUSES)].to_numpy()
    main = parts.argmax(axis=1)
    longest = np.argsort(-(end - start), kind="stable")[:DESCRIBED_GAPS]
    described = dict(zip(longest.tolist(), idle.describe_many(longest, [CAUSES[int(m)] for m in main[longest]], work)))
    phase = steps["phase"].to_numpy(dtype=object) if len(steps) else np.zeros(0, dtype=object)
    out = []
    for i in range(len(g)):
        cause = CAUSES[int(main[i])]
        args: dict[str, Any] = {
            "cause": cause,
            "step": first_step + int(step[i]),
            "phase": phase[step[i]] if 0 <= step[i] < len(phase) else None,
            "idle_us": (int(end[i]) - int(start[i])) / 1000,
            "by_cause_us": {c: int(parts[i, j]) / 1000 for j, c in enumerate(CAUSES) if parts[i, j] > 0},
        }
        name = cause
        if i in described:
            d = described[i]
            args.update({"call": d["call"], "op": d["op"], "frames": list(d["stack"])})
            if d["call"]:
                name = f"{cause}: {d['call']}"
            elif d["op"]:
                name = f"{cause}: {d['op']}"
        out.append(
            {
                "ph": "X",
                "cat": CATEGORY,
                "name": name,
                "pid": pid,
                "tid": IDLE_TID,
                "ts": _us(start[i], base_ns),
                "dur": _dur_us(int(end[i]) - int(start[i])),
                "args": args,
            }
        )
    return out


# The reader's categories (lower-cased) of the events each kind of work comes from.
_KERNEL_CATS = frozenset(("kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset"))
_CPU_OP_CATS = frozenset(("cpu_op", "operator"))


def _kernel_args(doc: Document, trace, work: pd.DataFrame) -> int:
    """Add each unit of work's roofline figures to the args of the event it was read from.

    Events and table rows are matched by name and correlation, then in time order within
    each such group (the table's times are the file's, in ns; comparing orders rather than
    values survives the float rounding of epoch-scale timestamps). A group whose sizes
    differ (an event the reader dropped) is left without args. Returns how many were given."""
    cols = [c for c in WORK_ARGS if c in work]
    if not cols or not len(work):
        return 0
    if len(trace.kernels):
        table, rows, cats = trace.kernels, np.arange(len(work)), _KERNEL_CATS
        corr = table["correlation"].to_numpy()
    else:
        table, rows, cats = trace.cpu_ops, work["op"].to_numpy(), _CPU_OP_CATS
        corr = np.full(len(table), -1)
    names = table["name"].astype(str).to_numpy()
    starts, durs = table["start_ns"].to_numpy(), table["dur_ns"].to_numpy()
    of_row = {int(r): w for w, r in enumerate(rows.tolist()) if r >= 0}
    # Every row of the table is matched (a CPU trace's work is its leaf ops, but events of the
    # same name include the ops above them); only the rows that are work get args.
    table_groups: dict[tuple, list] = defaultdict(list)
    wanted = {(names[r], int(corr[r])) for r in of_row}
    for r in range(len(table)):
        key = (names[r], int(corr[r]))
        if key in wanted:
            table_groups[key].append(r)
    event_groups: dict[tuple, list] = defaultdict(list)
    for i, h in enumerate(doc.heads):
        if h.ph != "X" or not isinstance(h.cat, str) or h.cat.lower() not in cats:
            continue
        c = _correlation(h.args) if len(trace.kernels) else -1
        key = (str(h.name) if h.name is not None else "", c)
        if key in table_groups:
            event_groups[key].append(i)
    values = {c: work[c].to_numpy(dtype=object) for c in cols}
    given = 0
    for key, tr in table_groups.items():
        ev = event_groups.get(key, [])
        if len(ev) != len(tr):
            continue
        tr.sort(key=lambda r: (int(starts[r]), -int(durs[r])))
        ev.sort(key=lambda i: (_num(doc.heads[i].ts), -_num(doc.heads[i].dur)))
        for r, i in zip(tr, ev):
            w = of_row.get(r)
            if w is None:
                continue
            _add_args(doc, i, {ARG_PREFIX + c: _value(values[c][w]) for c in cols})
            given += 1
    return given


def _correlation(args: msgspec.Raw) -> int:
    if not len(args):
        return -1
    try:
        c = msgspec.json.decode(args, type=_Args).correlation
    except (msgspec.DecodeError, msgspec.ValidationError):
        return -1
    return c if isinstance(c, int) and not isinstance(c, bool) else -1


def _add_args(doc: Document, i: int, extra: dict) -> None:
    """Event ``i`` with ``extra`` added to its args; every original key keeps its text."""
    event = msgspec.json.decode(doc.events[i], type=dict[str, msgspec.Raw])
    args = msgspec.json.decode(event["args"], type=dict[str, msgspec.Raw]) if "args" in event else {}
    event["args"] = msgspec.Raw(_ENCODER.encode({**args, **extra}))
    doc.events[i] = msgspec.Raw(_ENCODER.encode(event))


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


# --- files: the document in, the annotated document out -------------------------------

ANNOTATED_SUFFIX = ".tracekit.json.gz"


def load_document(path: str) -> Document:
    """A trace file's document (.json, .json.gz, .json.zst), or a TracekitError in one sentence.
    A file cut off mid-write is refused: an annotated copy would silently lack its end."""
    from tracekit.errors import TracekitError
    from tracekit.trace import decode

    data, cut = decode.read_bytes(path)
    try:
        if data.lstrip()[:1] == b"[":
            top, evs = None, msgspec.json.decode(data, type=list[msgspec.Raw])
        else:
            top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
            evs = msgspec.json.decode(top.get("traceEvents", b"null"), type=list[msgspec.Raw] | None)
            if evs is None:
                raise TracekitError(f"{path} is not a Chrome trace (no traceEvents list)")
        return Document(top, evs)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        why = f"its {cut}" if cut else f"its JSON is not a complete trace document ({e})"
        raise TracekitError(f"{path} cannot be annotated: {why}; annotate needs the whole trace") from None


def dump_document(doc: Document, path: str) -> bytes:
    """The document as bytes for ``path``: gzip-compressed when its name ends in .gz."""
    import gzip

    text = doc.encode()
    if path.lower().endswith(".gz"):
        # Level 6: most of level 9's ratio in a fraction of its time on a 100 MB document.
        return gzip.compress(text, compresslevel=6, mtime=0)
    return text


def annotate_file(src: str, read, measure_options: dict | None = None) -> tuple[Document, dict[str, int]]:
    """``src``'s document annotated (and counts of what was added): the file is read by ``read``
    (``read_trace`` or one showing progress) and analysed as ``report`` would."""
    from tracekit.analysis.analyze import assemble, measure

    doc = load_document(src)
    trace = read(src)
    parts, match = measure(trace, **(measure_options or {}))
    analysis = assemble(trace, parts, match, with_timelines=False)
    counts = annotate(doc, trace, parts, analysis, _rank_label(trace))
    return doc, counts


def annotate_windows(
    paths: list[str], read, measure_options: dict | None = None
) -> Iterator[tuple[str, Document, dict]]:
    """The windows of one split (in order), each annotated as ``tracekit report DIR`` reads
    them: each window analysed in its run's context (``windows.Windows``: the previous window's
    step ends and batches, the steps inferred once over all windows) and its steps numbered as
    the run's. Yields (window path, its annotated document, counts), one window in memory at a time."""
    from tracekit.analysis.windows import Windows

    for w in Windows(paths, read, with_timelines=False, **(measure_options or {})):
        doc = load_document(w.path)
        window = w.trace.metadata.get(WINDOW_KEY) or {}
        label = ", ".join(
            x
            for x in (_rank_label(w.trace), f"window {window.get('index')} of {window.get('of')}" if window else None)
            if x
        )
        yield w.path, doc, annotate(doc, w.trace, w.parts, w.analysis, label or None, first_step=w.first_step)


def _rank_label(trace) -> str | None:
    rank = (trace.distributed or {}).get("rank")
    return f"rank {rank}" if isinstance(rank, int) and not isinstance(rank, bool) else None
