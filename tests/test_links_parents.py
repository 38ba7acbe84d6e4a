"""The vectorised interval nesting (links._parents) against the stack walk it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import read_real
from tracekit.trace import links


def _sorted(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # The order the callers give: by start, longer first on ties.
    order = np.lexsort((-(ends - starts), starts))
    return starts[order], ends[order]


def _nested(rng, n: int, touching: bool) -> tuple[np.ndarray, np.ndarray]:
    """A properly nested family (with touching siblings and zero-length intervals)."""
    starts, ends = [], []

    def grow(lo: int, hi: int, depth: int) -> None:
        t = lo
        while t < hi and len(starts) < n:
            length = int(rng.integers(0, max(1, (hi - t) // 2 + 1)))
            s = t
            e = min(hi, s + length)
            starts.append(s)
            ends.append(e)
            if depth < 6 and e - s > 2 and rng.random() < 0.6:
                grow(s + int(rng.integers(0, 2)), e - int(rng.integers(0, 2)), depth + 1)
            t = e if touching and rng.random() < 0.5 else e + int(rng.integers(0, 3))

    grow(0, 10_000, 0)
    return _sorted(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


@pytest.mark.parametrize("seed", range(40))
def test_nested_and_touching_match_the_walk(seed):
    rng = np.random.default_rng(seed)
    s, e = _nested(rng, int(rng.integers(1, 400)), touching=bool(seed % 2))
    np.testing.assert_array_equal(links._parents(s, e), links._parents_walk(s, e))


@pytest.mark.parametrize("seed", range(60))
def test_random_overlapping_intervals_match_the_walk(seed):
    # Small ranges so that ties, touching ends, duplicates and partial overlaps all occur.
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, 60))
    s = rng.integers(0, 30, n)
    e = s + rng.integers(0, 12, n)
    s, e = _sorted(s.astype(np.int64), e.astype(np.int64))
    np.testing.assert_array_equal(links._parents(s, e), links._parents_walk(s, e))


def test_a_partial_overlap_keeps_the_walks_answer():
    # [0, 10) then [5, 15) overlapping it, then [6, 8) inside both.
    s, e = np.array([0, 5, 6]), np.array([10, 15, 8])
    assert links._parents(s, e).tolist() == links._parents_walk(s, e).tolist() == [-1, -1, 1]


@pytest.mark.parametrize("key", ["v100_ddp", "h100_hf", "mi300x_extend"])
def test_real_cpu_ops_match_the_walk(key):
    ops = read_real(key).cpu_ops
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    keys = ops["pid"].to_numpy() * (1 << 32) + ops["tid"].to_numpy()
    checked = 0
    for k in np.unique(keys):
        rows = np.flatnonzero(keys == k)
        s, e = _sorted(start[rows], end[rows])
        np.testing.assert_array_equal(links._parents(s, e), links._parents_walk(s, e))
        checked += len(rows)
    assert checked == len(ops) > 0


def test_nested_intervals_take_the_vectorised_path():
    # Otherwise the comparisons above would only ever compare the walk with itself.
    s, e = _nested(np.random.default_rng(7), 300, touching=True)
    parent, between = links._nearest_at_least(e)
    assert (between <= s).all()
    np.testing.assert_array_equal(parent, links._parents_walk(s, e))


def test_a_pathological_order_falls_back_to_the_walk(monkeypatch):
    monkeypatch.setattr(links, "_MAX_ROUNDS", 1)
    s, e = _nested(np.random.default_rng(8), 300, touching=False)
    assert links._nearest_at_least(e) is None
    np.testing.assert_array_equal(links._parents(s, e), links._parents_walk(s, e))


def _innermost_by_brute_force(op_s, op_e, op_t, q_s, q_e, q_t) -> list[int]:
    """The op on the query's thread that contains it and starts last, or -1; what ``enclosing``
    answers. Of equal intervals the later row is the inner one (nesting order is stable)."""
    out = []
    for s, e, t in zip(q_s.tolist(), q_e.tolist(), q_t.tolist()):
        inside = [i for i in range(len(op_s)) if op_t[i] == t and op_s[i] <= s and op_e[i] >= e]
        if not inside:
            out.append(-1)
            continue
        # Innermost: latest start, then shortest, then the later row.
        out.append(min(inside, key=lambda i: (-op_s[i], op_e[i] - op_s[i], -i)))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_enclosing_finds_the_innermost_op_with_and_without_a_known_nesting(seed):
    rng = np.random.default_rng(500 + seed)
    starts, ends, tids = [], [], []
    for tid in (3, 7, 11):
        s, e = _nested(rng, int(rng.integers(1, 150)), touching=bool(seed % 2))
        starts += s.tolist()
        ends += e.tolist()
        tids += [tid] * len(s)
    perm = rng.permutation(len(starts))  # the table's own row order is not the nesting order
    op_s, op_e, op_t = (np.array(v, dtype=np.int64)[perm] for v in (starts, ends, tids))
    n_q = 200
    q_s = rng.integers(0, 10_000, n_q)
    q_e = q_s + rng.integers(0, 40, n_q)
    q_t = rng.choice([3, 7, 11, 99], n_q)  # thread 99 has no ops
    ops = pd.DataFrame({"start_ns": op_s, "end_ns": op_e, "pid": 1, "tid": op_t})
    expected = _innermost_by_brute_force(op_s, op_e, op_t, q_s, q_e, q_t)
    # Some queries are not inside the op that starts last before them: they walk up the nesting.
    latest = [
        max((i for i in range(len(op_s)) if op_t[i] == t and op_s[i] <= s), key=lambda i: op_s[i], default=-1)
        for s, t in zip(q_s.tolist(), q_t.tolist())
    ]
    assert sum(x >= 0 and op_s[x] < op_s[y] for x, y in zip(expected, latest)) > 0
    assert links.enclosing(op_s, op_e, op_t, q_s, q_e, q_t).tolist() == expected
    nesting = links._nesting(ops)
    assert links.enclosing(op_s, op_e, op_t, q_s, q_e, q_t, nesting).tolist() == expected
    np.testing.assert_array_equal(nesting[0], links.op_parents(ops))
