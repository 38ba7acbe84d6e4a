"""Steps found from the launch pattern, for traces with no annotations and no step frames.

An inference engine launches the same sequence of kernels (and graph replays) every
step. On the thread that issues most launches, each launch gets a token (the name of
the first GPU activity it queued); a token that recurs at a regular spacing marks one
step per occurrence, its median spacing being the step's length in launches. Tokens
recurring every layer also space regularly, so the regular token with the fewest
occurrences (the longest period) is the step's. Steps are then cut where the host
paused longest, at the same offset from each occurrence (the scheduling and sampling
between two engine steps).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from tracekit.trace.model import Trace

# A token marks steps when at least this share of its spacings equal the median spacing.
REGULARITY = 0.6
MIN_STEPS = 3
# Launches before the first (after the last) cut form a step only when they are at
# least this share of a period; shorter fragments of steps outside the profile window
# stay outside any step.
MIN_FRAGMENT = 0.5


def launch_steps(trace: Trace, work: pd.DataFrame) -> list[tuple[int, int, int, str]]:
    """(start_ns, end_ns, tid, label) per step found from the launch pattern; [] when none is."""
    k = trace.kernels
    rt = trace.runtime
    if not len(k) or not len(rt):
        return []
    launch = k["launch"].to_numpy()
    has = launch >= 0
    if not has.any():
        return []
    rows = np.unique(launch[has])
    tids = rt["tid"].to_numpy()[rows]
    values, counts = np.unique(tids, return_counts=True)
    tid = int(values[np.argmax(counts)])
    rows = rows[tids == tid]
    rows = rows[np.argsort(rt["start_ns"].to_numpy()[rows], kind="stable")]
    if len(rows) < 2 * MIN_STEPS:
        return []
    # Token of a launch: the first GPU activity it queued (a graph replay is named by
    # its first kernel), as an integer code.
    first_kernel = pd.Series(np.arange(len(k))[has]).groupby(launch[has]).min()
    names = k["name"].cat.codes.to_numpy() if hasattr(k["name"], "cat") else pd.factorize(k["name"])[0]
    tokens = names[first_kernel.reindex(rows).to_numpy()]
    period, anchors = _period(tokens)
    if period is None:
        return []
    starts = rt["start_ns"].to_numpy()[rows]
    ends = rt["end_ns"].to_numpy()[rows]
    gap_before = np.empty(len(rows), dtype=np.int64)
    gap_before[0] = 0
    gap_before[1:] = starts[1:] - np.maximum.accumulate(ends)[:-1]
    offset = _cut_offset(anchors, period, gap_before)
    cuts = sorted(int(a + offset) for a in anchors if a + offset < len(rows))
    if not cuts:
        return []
    # One period before the first occurrence may hold a whole step too.
    if cuts[0] - period >= 0:
        cuts.insert(0, cuts[0] - period)
    bounds = []
    if cuts[0] >= MIN_FRAGMENT * period:
        bounds.append((0, cuts[0]))
    bounds += [(a, b) for a, b in zip(cuts, cuts[1:])]
    if len(rows) - cuts[-1] >= MIN_FRAGMENT * period:
        bounds.append((cuts[-1], len(rows)))
    out = []
    for j, (a, b) in enumerate(bounds):
        end = int(starts[b]) - 1 if b < len(rows) else int(ends[b - 1])
        out.append((int(starts[a]), end, tid, f"launch-pattern step {j + 1} ({b - a} launches)"))
    return out


def _period(tokens: np.ndarray) -> tuple[int | None, np.ndarray]:
    """(median spacing, occurrence positions) of the regular token with the longest period."""
    order = np.argsort(tokens, kind="stable")
    sorted_tokens = tokens[order]
    edges = np.flatnonzero(np.diff(sorted_tokens)) + 1
    best: tuple[int, np.ndarray] | None = None
    for group in np.split(order, edges):
        if len(group) < MIN_STEPS:
            continue
        pos = np.sort(group)
        spacing = np.diff(pos)
        median = int(np.median(spacing))
        if median < 2 or (spacing == median).mean() < REGULARITY:
            continue
        if best is None or median > best[0]:
            best = (median, pos)
    return (None, np.empty(0, dtype=np.int64)) if best is None else best


def _cut_offset(anchors: np.ndarray, period: int, gap_before: np.ndarray) -> int:
    """Offset from each occurrence at which the host paused longest (median over steps);
    the first such offset on a tie, 0 when no median exceeds -1."""
    n = len(gap_before)
    gaps = np.asarray(gap_before, dtype=np.float64)
    best, best_gap = 0, -1.0
    # Every offset's median at once, a block of offsets at a time (anchors x offsets floats).
    block = max(1, (1 << 20) // max(len(anchors), 1))
    for lo in range(0, period, block):
        at = anchors[:, None] + np.arange(lo, min(lo + block, period))[None, :]
        vals = np.where(at < n, gaps[np.minimum(at, n - 1)], np.nan)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an offset past every anchor: all NaN
            med = np.nanmedian(vals, axis=0)
        med = np.where(np.isnan(med), -np.inf, med)
        i = int(np.argmax(med))
        if med[i] > best_gap:
            best, best_gap = lo + i, float(med[i])
    return best
