"""Where ``split`` cuts a trace: a survey (``window_survey.Survey``) -> window edges in trace microseconds.

``find_edges`` puts each edge near the time quantile that gives windows of ``max_events``
CPU-side events, only where no step is open (between the engine's steps, else between
``ProfilerStep#N`` ranges, else between steps found elsewhere), or, in a trace that names
no steps, at idle instants found on a time grid of ``_BINS`` bins from histograms of the
survey's temporary files, whatever the trace's size. It records on the survey how the
windows were cut (one of the ``CUT_*`` sentences) and what the user should know.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.trace.window_survey import Survey

# Every window's file is open while routing: stay well inside the usual limit of 1024 open files.
MAX_WINDOWS = 500
# The time grid windows are cut on: a bin of a 10-minute trace is 0.14 ms, finer than the host's
# pause between two steps; its histograms take 64 MB whatever the trace's size.
_BINS = 1 << 22

# How a split's windows were cut (the window's metadata and ``split``'s notes say which).
CUT_STEPS = "between engine steps"
CUT_PROFILER_STEPS = "between ProfilerStep ranges"
CUT_INFERRED = "between the steps inferred from the whole trace (it names none)"
CUT_IDLE = "at idle instants (no op open, no GPU work running)"
CUT_OPS = "at instants when no op is open (the GPU is never idle there)"
CUT_LEAST = "at the least-covered instants (ops never all close)"


def find_edges(s: Survey, max_events: int) -> np.ndarray:
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
        raise TracekitError(
            f"{s.n:,} events in windows of {max_events:,} would make {k:,} windows, more than "
            f"{MAX_WINDOWS}: ask for more events per window"
        )
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
    named = (
        "given"
        if s.given is not None
        else "steps"
        if s.counts["steps"]
        else "profiler_steps"
        if s.counts["profiler_steps"]
        else None
    )
    if named is not None:
        s.cut = {"given": CUT_INFERRED, "steps": CUT_STEPS}.get(named, CUT_PROFILER_STEPS)
        # Steps are few beside events (one per forward pass): their starts and ends fit in memory.
        if s.given is not None:  # (named "given")
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
            edges = _clear_before(
                edges, ends[(starts > s.lo) & (starts <= s.hi)][chosen], _open_at(s, "ranges", bins), bins, s.lo, width
            )
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
    if s.given is not None and keep:  # (named "given")
        # Each edge's step: the first whose first launch is at or after it.
        first = s.given[np.argsort(s.given[:, 1], kind="stable"), :]
        at = np.minimum(np.searchsorted(first[:, 1], np.asarray(keep), side="left"), len(first) - 1)
        s.range_edges = np.minimum(first[at, 0], first[at, 1])
    held = np.diff([*kept, s.n])
    if held.max() > 1.5 * max_events:
        i = int(np.argmax(held))
        what = "a step longer than a window stays whole" if named else "no earlier instant is idle"
        s.notes.append(
            f"window {i + 1} holds about {int(held[i]):,} CPU-side events, more than --events "
            f"{max_events:,}: {what}, so the window grows"
        )
    return np.asarray(keep, dtype=np.float64)


def _step_gaps(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The instants no step is open: each step start after every earlier step (nested ones
    and other threads' included) ended, and that end. Sorted by time."""
    o = np.argsort(start, kind="stable")
    st, en = start[o], np.maximum(end[o], start[o])
    reach = np.maximum.accumulate(en)
    gap = np.flatnonzero(st[1:] > reach[:-1]) + 1
    return st[gap], reach[gap - 1]


def _clear_before(
    cuts: np.ndarray, after: np.ndarray, open_at: np.ndarray, bins, lo: float, width: float
) -> np.ndarray:
    """Each cut moved back to the latest bin start after ``after`` (the previous step's last
    launch) and no later than the cut at which no op or annotation is open; kept where none is."""
    out = cuts.copy()
    for j, (c, a) in enumerate(zip(cuts.tolist(), after.tolist())):
        first, last = int(bins(np.array([a]))[0]) + 1, int(bins(np.array([c]))[0])
        clear: np.ndarray | list[int] = np.flatnonzero(open_at[first : last + 1] == 0) if first <= last else []
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


def _open_at(s: Survey, name: str, bins) -> np.ndarray:
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
