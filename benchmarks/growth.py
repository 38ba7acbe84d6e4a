"""Traces grown from real ones the way real runs grow: more steps, more threads, deeper
stacks, more frames, stranger streams. The stress benchmark, the fuzz campaign and the
termination tests build their inputs here, so the three grow structure the same way.

Every function takes a decoded trace document (``load``) and returns a new one (the
input is never changed; events are copied where they differ). Sizes are arguments, so a
test grows a little and the benchmark a lot:

    repeat_steps(doc, n)              its complete events n times, each copy shifted by the span
    alternate_categories(doc, n)      n kernels on one stream, alternating two categories
    many_threads(doc, n)              host ops on n more threads
    deep_nesting(doc, depth)          ops and Python frames nested depth deep
    many_python_frames(doc, n)        n more Python frames on the host thread
    many_tiny_steps(doc, n)           n annotated steps of one launch and one kernel each
    kernels_without_launches(doc)     the runtime calls and flow arrows gone
    every_stream_overlapping(doc, k)  each kernel also on k - 1 more streams, at its own time

Each keeps ids unique where the reader links by them (correlation, External id, Python id).
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any, Callable

Doc = dict[str, Any]

# Args that link events; a copy of an event gets them offset, so its links stay its own.
_ID_ARGS = ("External id", "correlation", "Python id", "Python parent id", "Ev Idx")


def load(path: str) -> Doc:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(doc: Doc, path: str) -> str:
    """Write ``doc`` as JSON (gzipped when ``path`` ends in .gz, fast level: these are inputs)."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    if path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    with open(path, "wb") as f:
        f.write(data)
    return path


def events(doc: Doc) -> list[dict]:
    return [e for e in doc.get("traceEvents") or [] if isinstance(e, dict)]


def complete(doc: Doc) -> list[dict]:
    """The complete ('X') events with a numeric time."""
    return [e for e in events(doc) if e.get("ph") == "X" and _num(e.get("ts"))]


def span_us(evs: list[dict]) -> float:
    """From the first event's start to the last one's end, in the trace's microseconds."""
    xs = [e for e in evs if _num(e.get("ts"))]
    if not xs:
        return 0.0
    return max(e["ts"] + _dur(e) for e in xs) - min(e["ts"] for e in xs)


def with_events(doc: Doc, evs: list) -> Doc:
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = evs
    return out


def n_events(doc: Doc) -> int:
    return len(doc.get("traceEvents") or [])


# --- growth -----------------------------------------------------------------------------


def repeat_steps(doc: Doc, n: int, *, shift_ids: bool = True) -> Doc:
    """The trace's complete events ``n`` times, copy k shifted by k spans: n times the steps,
    one after another, as a longer run records them. With ``shift_ids`` each copy's ids are its
    own (a longer run's are); without, the copies share them, as a careless concatenation does."""
    evs = complete(doc)
    span = span_us(evs)
    stride = _max_id(evs) + 1
    out = []
    for k in range(n):
        dt, di = k * span, (k * stride if shift_ids else 0)
        out += [_moved(e, dt, di) for e in evs]
    return with_events(doc, out)


def alternate_categories(doc: Doc, n: int) -> Doc:
    """The trace with its busiest stream's kernels replaced by ``n`` kernels alternating two
    kernel names of different categories (its longest kernel, twice as long as the other), evenly
    over the window those kernels covered: neighbours never share a kind, so no merging by kind
    can shorten the lane."""
    from tracekit.analysis.pricing.taxonomy import categorize

    kernels = [e for e in complete(doc) if e.get("cat") == "kernel"]
    if not kernels:
        raise ValueError("the trace has no kernels to alternate")
    stream = _busiest_stream(kernels)
    mine = [e for e in kernels if _stream(e) == stream]
    a = max(mine, key=_dur)
    b = next((e for e in sorted(mine, key=_dur, reverse=True) if categorize(e["name"]) != categorize(a["name"])), None)
    if b is None:
        raise ValueError("the busiest stream's kernels are all of one category")
    t0 = min(e["ts"] for e in mine)
    width = max(max(e["ts"] + _dur(e) for e in mine) - t0, 1.0) / n
    # All replayed from the first one's launch, as a graph's kernels share its launch's correlation.
    link = {k: v for k, v in a.get("args", {}).items() if k in ("correlation", "External id")}
    grown = []
    for i in range(n):
        e = _copy(a if i % 2 == 0 else b)
        # The first kind runs twice as long: the busier of any pair of neighbours.
        e["ts"], e["dur"] = t0 + i * width, width * (0.8 if i % 2 == 0 else 0.4)
        e["args"].pop("External id", None)
        e["args"].update(link)
        grown.append(e)
    keep = [
        e
        for e in events(doc)
        if not (e.get("cat") == "kernel" and _stream(e) == stream) and e.get("ph") not in ("s", "f")
    ]
    return with_events(doc, keep + grown)


def many_threads(doc: Doc, n: int, per_thread: int = 4) -> Doc:
    """The trace plus, on each of ``n`` new host threads, a copy of the host thread's first
    ``per_thread`` ops (a worker pool's threads, each doing a little)."""
    evs = events(doc)
    ops = [e for e in complete(doc) if e.get("cat") == "cpu_op"][:per_thread]
    if not ops:
        raise ValueError("the trace has no host ops to copy")
    pid = ops[0].get("pid")
    stride = _max_id(evs) + 1
    grown = []
    for t in range(n):
        for e in ops:
            c = _moved(e, 0.0, (t + 1) * stride)
            c["pid"], c["tid"] = pid, 1_000_000 + t
            grown.append(c)
    return with_events(doc, evs + grown)


def deep_nesting(doc: Doc, depth: int) -> Doc:
    """The trace plus, on its host thread, a chain of ``depth`` ops each inside the one before,
    and a chain of ``depth`` Python frames (each the parent of the next), across all it did (the
    innermost covers the middle half): every op and launch of the middle half sits under them."""
    evs = events(doc)
    host, t0, t1 = _host_window(doc, whole=True)
    stride = _max_id(evs) + 1
    eps = (t1 - t0) / (4 * depth + 4)
    grown = []
    for i in range(depth):
        ts, dur = t0 + (i + 1) * eps, (t1 - t0) - 2 * (i + 1) * eps
        grown.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::nested_{i % 7}",
                "pid": host[0],
                "tid": host[1],
                "ts": ts,
                "dur": dur,
                "args": {"External id": stride + i},
            }
        )
        grown.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"grown.py({i}): level_{i}",
                "pid": host[0],
                "tid": host[1],
                "ts": ts,
                "dur": dur,
                "args": {"Python id": stride + depth + i, "Python parent id": stride + depth + i - 1 if i else -1},
            }
        )
    return with_events(doc, evs + grown)


def many_python_frames(doc: Doc, n: int) -> Doc:
    """The trace plus ``n`` short Python frames on the host thread, side by side under one new
    root frame spanning the step (a with_stack trace of a Python-heavy scheduler)."""
    evs = events(doc)
    host, t0, t1 = _host_window(doc)
    root = _max_id(evs) + 1
    grown = [
        {
            "ph": "X",
            "cat": "python_function",
            "name": "grown.py(1): scheduler_loop",
            "pid": host[0],
            "tid": host[1],
            "ts": t0,
            "dur": t1 - t0,
            "args": {"Python id": root, "Python parent id": -1},
        }
    ]
    width = (t1 - t0) / (n + 1)
    for i in range(n):
        grown.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"grown.py({2 + i % 50}): helper_{i % 50}",
                "pid": host[0],
                "tid": host[1],
                "ts": t0 + (i + 0.5) * width,
                "dur": width * 0.5,
                "args": {"Python id": root + 1 + i, "Python parent id": root},
            }
        )
    return with_events(doc, evs + grown)


def many_tiny_steps(doc: Doc, n: int, period_us: float = 10.0) -> Doc:
    """``n`` annotated steps, each an op with one launch of one kernel, ``period_us`` apart:
    the trace's own step annotation, launch call and kernel as templates. Only these events
    (and the trace's metadata): a serving loop of trivial steps."""
    evs = complete(doc)
    ann = next((e for e in evs if e.get("cat") == "user_annotation"), None)
    launch = next((e for e in evs if e.get("cat") == "cuda_runtime" and "aunch" in str(e.get("name"))), None)
    if ann is None or launch is None:
        raise ValueError("the trace has no step annotation or no launch call to copy")
    corr = launch.get("args", {}).get("correlation")
    kernel = next(
        (e for e in evs if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") == corr), None
    ) or next((e for e in evs if e.get("cat") == "kernel"), None)
    if kernel is None:
        raise ValueError("the trace has no kernel to copy")
    op = next((e for e in evs if e.get("cat") == "cpu_op"), None) or {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::add",
        "pid": launch["pid"],
        "tid": launch["tid"],
    }
    t0 = min(e["ts"] for e in evs)
    out = []
    for k in range(n):
        at = t0 + k * period_us
        a = _copy(ann)
        a["ts"], a["dur"] = at, period_us * 0.8
        a["args"]["External id"] = 4 * k + 1
        o = _copy(op)
        o["ts"], o["dur"] = at + 0.5, period_us * 0.4
        o.setdefault("args", {})["External id"] = 4 * k + 2
        la = _copy(launch)
        la["ts"], la["dur"] = at + 1.0, period_us * 0.1
        la["args"].update({"External id": 4 * k + 2, "correlation": 4 * k + 3})
        ke = _copy(kernel)
        ke["ts"], ke["dur"] = at + 2.5, period_us * 0.3
        ke["args"].update({"External id": 4 * k + 2, "correlation": 4 * k + 3})
        out += [a, o, la, ke]
    return with_events(doc, out)


def kernels_without_launches(doc: Doc) -> Doc:
    """The trace without its runtime calls and flow arrows: kernels whose launches are gone
    (a profiler that dropped the CPU side, or a capture replayed with no record of its launch)."""
    keep = [e for e in events(doc) if e.get("cat") != "cuda_runtime" and e.get("ph") not in ("s", "f", "t")]
    return with_events(doc, keep)


def every_stream_overlapping(doc: Doc, streams: int) -> Doc:
    """The trace with each kernel also run on ``streams - 1`` more streams at the same time:
    every stream overlaps every other one the whole way (``streams`` copies of each kernel)."""
    evs = events(doc)
    kernels = [e for e in complete(doc) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not kernels:
        raise ValueError("the trace has no kernels to copy")
    stride = _max_id(evs) + 1
    grown = []
    for k in range(1, streams):
        for e in kernels:
            c = _moved(e, 0.0, k * stride)
            c["tid"] = c["args"]["stream"] = 10_000 + k
            c["args"].pop("External id", None)  # a copy has no op of its own
            grown.append(c)
    return with_events(doc, evs + grown)


# --- the stress cases, by name ------------------------------------------------------------

# name -> (growth, what it stands for); each growth takes (doc, scale) with scale 1.0 the
# issue's size. The bench and the fuzz campaign pick sizes through scale.
CASES: dict[str, tuple[Callable[[Doc, float], Doc], str]] = {
    "steps repeated": (lambda d, s: repeat_steps(d, max(2, int(1000 * s))), "steps repeated 1,000x"),
    "categories alternating": (
        lambda d, s: alternate_categories(d, max(4, int(100_000 * s))),
        "kernel categories alternating on one stream 100k times",
    ),
    "threads": (lambda d, s: many_threads(d, max(2, int(10_000 * s))), "10k threads"),
    "nesting": (
        lambda d, s: deep_nesting(repeat_steps(d, max(1, int(100 * s))), max(2, int(1000 * s))),
        "nesting 1,000 deep over 100 repeated steps",
    ),
    "python frames": (lambda d, s: many_python_frames(d, max(2, int(1_000_000 * s))), "1M Python frames"),
    "tiny steps": (lambda d, s: many_tiny_steps(d, max(2, int(50_000 * s))), "50k tiny steps"),
    "no launches": (
        lambda d, s: kernels_without_launches(repeat_steps(d, max(1, int(100 * s)))),
        "kernels without launches (steps repeated 100x)",
    ),
    "streams overlapping": (
        lambda d, s: every_stream_overlapping(repeat_steps(d, max(1, int(10 * s))), 16),
        "every stream overlapping (16 streams; steps repeated 10x)",
    ),
}


def grow(doc: Doc, case: str, scale: float = 1.0) -> Doc:
    return CASES[case][0](doc, scale)


# --- helpers ------------------------------------------------------------------------------


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _dur(e: dict) -> float:
    d = e.get("dur")
    return d if _num(d) and d > 0 else 0.0


def _copy(e: dict) -> dict:
    c = dict(e)
    c["args"] = dict(e["args"]) if isinstance(e.get("args"), dict) else {}
    return c


def _moved(e: dict, dt: float, di: int) -> dict:
    """A copy of ``e`` dt later, its ids offset by di (a negative id, "none", stays)."""
    c = _copy(e)
    c["ts"] = e["ts"] + dt
    if di:
        a = c["args"]
        for k in _ID_ARGS:
            v = a.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                a[k] = v + di
        if isinstance(c.get("id"), int):
            c["id"] += di
    return c


def _max_id(evs: list[dict]) -> int:
    best = 0
    for e in evs:
        a = e.get("args")
        if isinstance(a, dict):
            for k in _ID_ARGS:
                v = a.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v > best:
                    best = v
        if isinstance(e.get("id"), int) and e["id"] > best:
            best = e["id"]
    return best


def _stream(e: dict):
    a = e.get("args") if isinstance(e.get("args"), dict) else {}
    return a.get("stream", e.get("tid"))


def _busiest_stream(kernels: list[dict]):
    busy: dict = {}
    for e in kernels:
        busy[_stream(e)] = busy.get(_stream(e), 0.0) + _dur(e)
    return max(busy, key=busy.get)


def _host_window(doc: Doc, whole: bool = False) -> tuple[tuple, float, float]:
    """The host thread (the one with most ops) and the window of its longest op or annotation
    (``whole``: from its first event's start to its last one's end)."""
    evs = [e for e in complete(doc) if e.get("cat") in ("cpu_op", "user_annotation", "python_function")]
    if not evs:
        raise ValueError("the trace has no host events")
    count: dict = {}
    for e in evs:
        count[(e.get("pid"), e.get("tid"))] = count.get((e.get("pid"), e.get("tid")), 0) + 1
    host = max(count, key=count.get)
    if whole:
        mine = [e for e in evs if (e.get("pid"), e.get("tid")) == host]
        return host, min(e["ts"] for e in mine), max(e["ts"] + _dur(e) for e in mine)
    longest = max((e for e in evs if (e.get("pid"), e.get("tid")) == host), key=_dur)
    return host, longest["ts"], longest["ts"] + max(_dur(longest), 1.0)


if __name__ == "__main__":  # a quick look: python benchmarks/growth.py TRACE CASE SCALE OUT
    import sys

    src, case, scale, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    grown = grow(load(src), case, scale)
    print(f"{os.path.basename(out)}: {n_events(grown):,} events")
    write(grown, out)
