"""Interval arithmetic that segmentation and the idle analysis share."""

from __future__ import annotations

import numpy as np

# After a kernel is issued the driver needs a few microseconds to start it on an idle GPU (the idle
# causes count it as the launch's; ``steps.held`` as the earliest a queued kernel can start).
LAUNCH_LATENCY_NS = 10_000


def running_end(group: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per row, the latest end of its group so far: ``np.maximum.accumulate(ends)`` restarted
    at every group. Rows come sorted by group (then by start), as for a union of intervals per step."""
    if not len(ends):
        return ends.copy()
    g = group.astype(np.int64) - int(group[0])
    lo = int(ends.min())
    span = int(ends.max()) - lo + 1
    if span * (int(g[-1]) + 1) < 1 << 62:
        # Ends keyed by group: one running maximum then never carries a group's end into the
        # next, and tens of thousands of steps cost a few vector passes.
        return np.maximum.accumulate(g * span + (ends - lo)) - g * span + lo
    # Too wide to key every group's ends apart in int64: one group at a time.
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]).tolist()
    out = np.empty_like(ends)
    for a, b in zip(heads, [*heads[1:], len(ends)]):
        out[a:b] = np.maximum.accumulate(ends[a:b])
    return out
