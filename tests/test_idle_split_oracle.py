"""The split of idle gaps by cause, against the rules of ``tracekit.analysis.waiting.idle``
applied instant by instant.

``idle._split`` works on interval sums (time covered by syncs, launch calls and any recorded
activity, read from prefix sums). The reference here cuts each gap at every boundary of the
host's intervals, the issue, the launching op and the start latency, and gives each piece the
cause the module docstring names for it:

- an instant in a synchronising call or op is ``sync``, whatever else holds;
- with no issue in the trace, everything else is ``unattributed``;
- after the next kernel's issue: the first ``LAUNCH_LATENCY_NS`` are ``launch`` (the driver
  starting it), the rest ``wait``;
- before the issue, in a gap no longer than ``LAUNCH_GAP_NS``: ``launch`` (a pause between
  launches);
- before the issue in a longer gap: inside the op that launched the kernel, or in a launch
  call, ``launch``; in other recorded work, ``host``; in nothing recorded, ``unattributed``.

Random threads (syncs inside launch calls inside recorded activity, as ``Coverage.of_thread``
builds them) and random gaps, seeded; every part is compared to the nanosecond. Fails if any
term of the interval arithmetic is off (a clip on the wrong side, a set subtracted twice, the
latency measured from the gap's start) or the coverage sums are (``union_intervals``,
``Coverage``'s prefix sums).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.steps.work import NO_TIME
from tracekit.analysis.waiting import host, idle

GAP, LATENCY = idle.LAUNCH_GAP_NS, idle.LAUNCH_LATENCY_NS


def _inside(t: float, starts, ends) -> bool:
    return any(s <= t < e for s, e in zip(starts, ends))


def reference(a, b, issue, op_s, op_e, sync, launch, busy) -> dict[str, int]:
    """ns by cause of the gap [a, b), piece by piece (see the module docstring)."""
    out = dict.fromkeys(idle.CAUSES, 0)
    known = issue != NO_TIME
    c = min(max(issue, a), b) if known else b
    w = (min(max(op_s, a), c), min(max(op_e, a), c)) if known and op_s != NO_TIME else (a, a)
    lat_end = min(max(issue + LATENCY, c), b) if known else b
    cuts = {a, b, c, lat_end, *w}
    for s, e in (sync, launch, busy):
        cuts.update(int(x) for x in np.concatenate([s, e]) if a < x < b)
    cuts = sorted(cuts)
    for x, y in zip(cuts[:-1], cuts[1:]):
        mid = (x + y) / 2
        if _inside(mid, *sync):
            cause = idle.SYNC
        elif not known:
            cause = idle.UNATTRIBUTED
        elif mid >= c:
            cause = idle.LAUNCH if mid < lat_end else idle.WAIT
        elif c - a <= GAP or w[0] <= mid < w[1] or _inside(mid, *launch):
            cause = idle.LAUNCH
        elif _inside(mid, *busy):
            cause = idle.HOST
        else:
            cause = idle.UNATTRIBUTED
        out[cause] += y - x
    return out


def _intervals(rng, n: int, lo: int, hi: int, scale: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.sort(rng.integers(lo, hi, n))
    return s, s + rng.integers(1, scale, n)


def _thread(rng) -> tuple:
    """A thread's intervals: syncs inside launch calls (the launch set holds the syncs) inside
    the busy set (which holds every recorded call, op and frame); they may overlap each other."""
    sync = _intervals(rng, int(rng.integers(0, 4)), 0, 400_000, 40_000)
    calls = _intervals(rng, int(rng.integers(0, 8)), 0, 400_000, 20_000)
    other = _intervals(rng, int(rng.integers(0, 8)), 0, 400_000, 120_000)
    launch = (np.concatenate([sync[0], calls[0]]), np.concatenate([sync[1], calls[1]]))
    busy = (np.concatenate([launch[0], other[0]]), np.concatenate([launch[1], other[1]]))
    return sync, launch, busy


def _gaps(rng, n: int) -> pd.DataFrame:
    a = rng.integers(0, 380_000, n)
    # Short gaps (at most LAUNCH_GAP_NS before the issue) and long ones, both often.
    b = a + np.where(rng.random(n) < 0.4, rng.integers(1, 60_000, n), rng.integers(1, 200_000, n))
    # No issue in the trace, and no launching op, are NO_TIME (``work.NO_TIME``); an issue or op
    # before zero is a time like any other.
    at = rng.integers(-20_000, 420_000, n)
    issue = np.where(rng.random(n) < 0.15, NO_TIME, at)
    has_op = (rng.random(n) < 0.5) & (issue != NO_TIME)
    op_s = np.where(has_op, at - rng.integers(0, 150_000, n), NO_TIME)
    op_e = np.where(has_op, at + rng.integers(0, 30_000, n), NO_TIME)
    return pd.DataFrame({"start_ns": a, "end_ns": b, "issue_ns": issue, "op_start_ns": op_s, "op_end_ns": op_e})


def test_split_agrees_with_the_rules_instant_by_instant():
    rng = np.random.default_rng(20261204)
    checked = dict.fromkeys(idle.CAUSES, 0)
    for _ in range(300):
        sync, launch, busy = _thread(rng)
        g = _gaps(rng, 12)
        cov = host.Coverage({"sync": sync, "launch": launch, "busy": busy})
        parts = idle._split({c: g[c].to_numpy() for c in idle._SPLIT_COLUMNS}, cov)
        for i, r in enumerate(g.itertuples()):
            want = reference(r.start_ns, r.end_ns, r.issue_ns, r.op_start_ns, r.op_end_ns, sync, launch, busy)
            got = dict(zip(idle.CAUSES, (int(x) for x in parts[i])))
            assert got == want, (r, sync, launch, busy)
            for k, v in want.items():
                checked[k] += v > 0
    # Every cause was exercised many times over, so no branch went unchecked.
    assert min(checked.values()) > 100, checked


def test_without_a_coverage_every_gap_is_unattributed():
    """A launching thread the trace does not hold (no coverage): the whole gap is unattributed."""
    g = _gaps(np.random.default_rng(7), 20)
    parts = idle._split({c: g[c].to_numpy() for c in idle._SPLIT_COLUMNS}, None)
    assert (parts[:, idle.CAUSES.index(idle.UNATTRIBUTED)] == g["end_ns"] - g["start_ns"]).all()
    assert (np.delete(parts, idle.CAUSES.index(idle.UNATTRIBUTED), axis=1) == 0).all()


def test_a_pause_of_exactly_the_launch_gap_is_still_launch_cost():
    """The boundary the random gaps do not hit: a pause before the issue of exactly
    ``LAUNCH_GAP_NS`` (50 us) is a pause between launches; 1 ns longer, the host's other work.
    Gap [0, 100 us), the thread in other recorded work throughout, no launching op."""
    cov = host.Coverage(
        {
            "sync": (np.zeros(0, np.int64), np.zeros(0, np.int64)),
            "launch": (np.zeros(0, np.int64), np.zeros(0, np.int64)),
            "busy": (np.array([0]), np.array([100_000])),
        }
    )
    for issue, want in (
        (GAP, {"launch": GAP + LATENCY, "wait": 100_000 - GAP - LATENCY}),
        (GAP + 1, {"host": GAP + 1, "launch": LATENCY, "wait": 100_000 - GAP - 1 - LATENCY}),
    ):
        g = {
            "start_ns": np.array([0]),
            "end_ns": np.array([100_000]),
            "issue_ns": np.array([issue]),
            "op_start_ns": np.array([-1]),
            "op_end_ns": np.array([-1]),
        }
        got = {k: int(v) for k, v in zip(idle.CAUSES, idle._split(g, cov)[0]) if v}
        assert got == want
        sets = ((np.zeros(0), np.zeros(0)), (np.zeros(0), np.zeros(0)), (np.array([0]), np.array([100_000])))
        assert {k: v for k, v in reference(0, 100_000, issue, -1, -1, *sets).items() if v} == want
