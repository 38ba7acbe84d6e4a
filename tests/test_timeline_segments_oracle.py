"""A timeline lane's segments against their rules, worked out interval by interval in plain Python.

``timeline._segments`` merges a lane's intervals with vector compares; its docstring states
what it must give, and the reference below does exactly that one interval at a time:

- intervals sorted by start; a new segment starts at a change of key, or after a gap wider than
  the tolerance since the latest end so far (unmerged lanes: only overlapping intervals of one
  key share a segment);
- the tolerance starts at span / RESOLUTION and is multiplied by 4 until the lane holds at most
  MAX_SEGMENTS segments or it passes every gap;
- still too many: equal slices of time from the first start to the last end, MAX_SEGMENTS of
  them, each the intervals starting in it, keyed by the kind with the most busy time there
  (ties: the kind seen first in the lane), labelled ``"<n> × <kind>"`` or ``"<n> intervals of
  <k> kinds, mostly <kind>"``, a lone interval keeping its own label;
- a segment runs from its first interval's start to the latest end among its intervals, in ms
  from the lane's start, with its count; a merged segment's label is ``"<n> × <key>"``; labels
  are cut at LABEL_CHARS.

Random lanes of a few to thousands of intervals, of one to six kinds, seeded. Fails if a
boundary rule, the tolerance schedule, the slicing or the labels drift from those rules.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracekit.analysis.steps import timeline as tl


def _reference(s, e, key, label, start, span, merge=True):
    n = len(s)
    if not n:
        return [], [], [], [], []
    order = sorted(range(n), key=lambda i: s[i])
    s, e = [int(s[i]) for i in order], [int(e[i]) for i in order]
    key, label = [key[i] for i in order], [label[i] for i in order]
    run_end, top = [], -math.inf
    for x in e:
        top = max(top, x)
        run_end.append(top)
    widest = max((s[i] - run_end[i - 1] for i in range(1, n)), default=0)

    def groups(tol):
        out, first = [], 0
        for i in range(1, n):
            if key[i] != key[i - 1] or s[i] - run_end[i - 1] > tol:
                out.append((first, i - 1))
                first = i
        return out + [(first, n - 1)]

    tol = span / tl.RESOLUTION if merge else -1
    for _ in range(64):
        found = groups(tol)
        if len(found) <= tl.MAX_SEGMENTS or not merge or tol > widest:
            break
        tol *= 4
    ms = lambda t: float(np.round((t - start) / 1e6, 4))  # noqa: E731
    if merge and len(found) > tl.MAX_SEGMENTS:
        return _slices(s, e, run_end, key, label, ms)
    a, b, keys, labels, count = [], [], [], [], []
    for f, last in found:
        c = last - f + 1
        a.append(ms(s[f]))
        b.append(ms(run_end[last]))
        keys.append(str(key[f]))
        labels.append((str(label[f]) if c == 1 else f"{c} × {key[f]}")[: tl.LABEL_CHARS])
        count.append(c)
    return a, b, keys, labels, count


def _slices(s, e, run_end, key, label, ms):
    lo, hi = s[0], run_end[-1]
    width = max(hi - lo, 1) / tl.MAX_SEGMENTS
    seen = list(dict.fromkeys(key))  # the lane's kinds, first seen first
    slices: dict[int, list[int]] = {}
    for i, x in enumerate(s):
        slices.setdefault(min(max(int((x - lo) / width), 0), tl.MAX_SEGMENTS - 1), []).append(i)
    a, b, keys, labels, count = [], [], [], [], []
    for _, rows in sorted(slices.items()):
        busy: dict = {}
        for i in rows:
            busy[key[i]] = busy.get(key[i], 0) + max(e[i] - s[i], 0)
        best = min(busy, key=lambda k: (-busy[k], seen.index(k)))
        c, kinds = len(rows), len(busy)
        text = (
            str(label[rows[0]])
            if c == 1
            else f"{c} × {best}"
            if kinds == 1
            else f"{c} intervals of {kinds} kinds, mostly {best}"
        )
        a.append(ms(s[rows[0]]))
        b.append(ms(run_end[rows[-1]]))
        keys.append(str(best))
        labels.append(text[: tl.LABEL_CHARS])
        count.append(c)
    return a, b, keys, labels, count


def _lane(rng, n: int, kinds: int, spread: float):
    s = rng.integers(0, int(spread), n)
    e = s + rng.integers(0, int(spread / max(n, 1)) * 3 + 2, n)
    names = np.array([f"kernel_{k}" for k in range(kinds)], dtype=object)
    key = names[rng.integers(0, kinds, n)]
    label = np.array([f"{k} call {i} " + "x" * int(rng.integers(0, 90)) for i, k in enumerate(key)], dtype=object)
    return s.astype(np.int64), e.astype(np.int64), key, label


@pytest.mark.parametrize(
    "n, kinds, merge",
    [
        (1, 1, True),
        (7, 2, True),
        (7, 2, False),
        (300, 3, True),
        (2_000, 1, True),
        (4_000, 2, True),
        (3_500, 6, True),
        (2_500, 4, False),
    ],
)
def test_segments_follow_their_rules(n, kinds, merge):
    rng = np.random.default_rng(n * 31 + kinds)
    for spread in (1e5, 5e7):
        s, e, key, label = _lane(rng, n, kinds, spread)
        start = int(s.min()) - int(rng.integers(0, 1000))
        span = int(max(e.max() - start, 1))
        got = tl._segments(s, e, key, label, start, span, merge=merge)
        want = _reference(s, e, key, label, start, span, merge)
        assert list(got.start_ms) == want[0]
        assert list(got.end_ms) == want[1]
        assert [str(k) for k in got.keys] == want[2]
        assert [str(t) for t in got.labels] == want[3]
        assert list(got.count) == want[4]
        assert len(got.count) <= tl.MAX_SEGMENTS or not merge


def test_the_tolerance_grows_fourfold_until_the_lane_fits():
    """A lane built so that the schedule decides: 1,800 one-nanosecond kernels of one kind, 1,700
    gaps of 1 us and 100 of 2.5 us (span 1.95 ms, so the first tolerance is 975 ns). At 975 ns no
    gap merges: 1,801 segments, over MAX_SEGMENTS; at 4 x 975 = 3.9 us every gap does: one
    segment of 1,801. A tolerance doubled instead (1.95 us) would stop at 101 segments."""
    gaps = np.array([1_000] * 1_700 + [2_500] * 100)
    np.random.default_rng(5).shuffle(gaps)
    s = np.concatenate([[0], np.cumsum(gaps + 1)]).astype(np.int64)
    e = s + 1
    key = np.full(len(s), "gemm", dtype=object)
    span = int(e[-1])
    got = tl._segments(s, e, key, key, 0, span)
    assert span / tl.RESOLUTION == pytest.approx(975.9, abs=1)
    assert list(got.count) == [1_801] and [str(t) for t in got.labels] == ["1801 × gemm"]
    assert _reference(s, e, key, key, 0, span)[4] == [1_801]
