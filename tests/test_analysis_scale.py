"""The analysis' whole-table shortcuts (issue 15) give what the per-row / per-pass forms give.

Each fast path is checked against the plain form it replaced, on real traces."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from conftest import read_real

from tracekit.analysis import categorical
from tracekit.analysis.pricing import op_costs, taxonomy
from tracekit.analysis.pricing.attribution import _outermost
from tracekit.analysis.pricing.capture import own_ops
from tracekit.analysis.steps import evidence


@pytest.mark.parametrize("key", ["h100_hf", "v100_ddp", "mi300x_extend"])
def test_shape_evidence_many_matches_per_pass_filtering(key):
    ops = read_real(key).cpu_ops
    rnd = random.Random(7)
    starts = ops["start_ns"].tolist()
    tids = sorted(set(ops["tid"].tolist())) + [-12345]
    passes = []
    for _ in range(80):
        a, b = sorted(rnd.choice(starts) for _ in range(2))
        passes.append((a, b + rnd.choice([0, 1]), rnd.choice(tids), "pass"))
    passes.append((min(starts), max(starts) + 1, tids[0], "whole"))
    slow = [
        evidence.shape_evidence(ops[(ops["tid"] == t) & (ops["start_ns"] >= a) & (ops["start_ns"] < b)])
        for a, b, t, _ in passes
    ]
    assert evidence.shape_evidence_many(ops, passes) == slow
    if key == "h100_hf":  # the HF forward's embedding shapes say prefill: the test saw real evidence
        assert any(phase != "unknown" for phase, *_ in slow)


@pytest.mark.parametrize("key", ["h100_hf", "v100_ddp"])
def test_outermost_modelled_ancestor_matches_the_walk(key):
    t = read_real(key)
    src = own_ops(t, t.kernels.assign(op=t.kernels["op"]))
    names = categorical.strings(src.ops["name"])
    modelled = np.array([op_costs.has_model(n) for n in names], dtype=bool)
    expected = []
    for row in range(len(modelled)):
        best, r = -1, row
        while r >= 0:
            if modelled[r]:
                best = r
            r = src.parents[r]
        expected.append(best)
    assert _outermost(modelled, src.parents).tolist() == expected
    assert (np.asarray(expected) >= 0).any()


def test_categorize_units_matches_categorize_many():
    t = read_real("h100_hf")
    work, ops = t.kernels, t.cpu_ops
    op = work["op"].to_numpy()
    got, op_name = taxonomy.categorize_units(work, ops, op)
    names = ops["name"].astype(str).to_numpy()
    want_op = np.where(op >= 0, names[np.maximum(op, 0)], None)
    want = taxonomy.categorize_many(work["name"].astype(str).to_numpy(), want_op, work["kind"].astype(str).to_numpy())
    assert got.tolist() == want.tolist()
    assert op_name.tolist() == want_op.tolist()
    assert len(set(got.tolist())) > 3


def test_column_helpers_read_as_astype_str():
    s = pd.Series(pd.Categorical(["b", "a", None, "b"]))
    assert categorical.strings(s)[[0, 1, 3]].tolist() == ["b", "a", "b"]
    assert pd.isna(categorical.strings(s)[2])
    assert categorical.isin(s, {"b"}).tolist() == [True, False, False, True]
    assert categorical.mask(pd.Series(["xa", "y"]), lambda n: n.startswith("x")).tolist() == [True, False]


def test_values_eq_and_isin_match_direct_comparison():
    raw = np.array(["compute", None, "memory", "compute", "unknown", None], dtype=object)
    v = categorical.Values(raw)
    for value in ("compute", "memory", "unknown", "absent"):
        assert v.eq(value).tolist() == [x == value for x in raw.tolist()]
    assert v.isin(("memory", "unknown", "absent")).tolist() == [x in ("memory", "unknown") for x in raw.tolist()]
    assert v.n_values == 3
    assert categorical.unique(pd.Series(pd.Categorical(["b", "a", "b", "c"]))).tolist() == ["b", "a", "c"]


def _drop_nested_reference(ranges: pd.DataFrame) -> pd.DataFrame:
    """The per-row walk that ranges.drop_nested replaced: the oracle for it."""
    from tracekit.analysis.steps.ranges import isna
    from tracekit.analysis.steps.segment import SOURCE_ORDER

    if not len(ranges):
        return ranges
    ranges = ranges.sort_values(["tid", "start", "end"], ascending=[True, True, False]).reset_index(drop=True)
    keep = []
    for _, group in ranges.groupby("tid", sort=False):
        last_end = last_idx = None
        for idx, row in group.iterrows():
            if last_end is not None and row["start"] >= ranges.at[last_idx, "start"] and row["end"] <= last_end:
                if SOURCE_ORDER.index(row["source"]) < SOURCE_ORDER.index(ranges.at[last_idx, "source"]):
                    for col in ("phase", "source", "evidence", "label"):
                        ranges.at[last_idx, col] = row[col]
                for col in ("tokens", "batch"):
                    if pd.isna(ranges.at[last_idx, col]) and not pd.isna(row[col]):
                        ranges.at[last_idx, col] = row[col]
                for col in ("prefill_side", "decode_side"):
                    mine, theirs = ranges.at[last_idx, col], row[col]
                    if theirs is not None and not isna(theirs):
                        ranges.at[last_idx, col] = theirs if mine is None or isna(mine) else theirs.merged(mine)
                continue
            keep.append(idx)
            last_end, last_idx = row["end"], idx
    return ranges.loc[keep].sort_values("start").reset_index(drop=True)


@pytest.mark.parametrize("seed", range(25))
def test_drop_nested_matches_the_walk(seed):
    """Nested step ranges (SGLang's step[...] inside execute_..., partial overlaps, several
    threads, stronger and weaker sources) come out as the per-row walk leaves them."""
    from tracekit.analysis.steps.ranges import RANGE_COLUMNS, drop_nested
    from tracekit.analysis.steps.segment import SOURCE_ORDER

    rng = random.Random(seed)
    rows = []
    for _ in range(rng.randint(1, 40)):
        start = rng.randint(0, 300)
        rows.append(
            (
                start,
                start + rng.randint(0, 80),
                rng.choice([1, 2, 3]),
                rng.choice(["prefill", "decode", "unknown"]),
                rng.choice(SOURCE_ORDER),
                rng.choice([None, "why"]),
                f"r{len(rows)}",
                rng.choice([None, float(rng.randint(1, 9))]),
                rng.choice([None, 4.0]),
                None,
                None,
            )
        )
    ranges = pd.DataFrame(rows, columns=RANGE_COLUMNS)
    got, want = drop_nested(ranges.copy()), _drop_nested_reference(ranges.copy())
    assert (
        got[["start", "end", "tid", "phase", "source", "label"]].values.tolist()
        == want[["start", "end", "tid", "phase", "source", "label"]].values.tolist()
    )
    for c in ("tokens", "batch"):
        assert got[c].fillna(-1).tolist() == want[c].fillna(-1).tolist()


@pytest.mark.parametrize("seed", range(20))
def test_busy_per_step_matches_busy_step_by_step(seed):
    """Busy time (union of overlapping kernels), first start and last end of every step at
    once equal _busy per step, also on epoch-nanosecond clocks and on spans too wide for
    the keyed running maximum (its step-at-a-time fallback)."""
    from tracekit.analysis.steps.table import _busy, _busy_per_step

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    m = int(rng.integers(0, 80))
    step = rng.integers(-1, n + 1, m)
    offset = [0, 1_700_000_000_000_000_000, 0][seed % 3]
    start = rng.integers(0, 2000, m) + offset
    if seed % 3 == 2 and m:
        start[0] = 4_000_000_000_000_000_000  # one kernel far away: the span no longer fits the key
    end = start + rng.integers(0, 400, m)
    busy, g0, g1 = _busy_per_step(step, start, end, n)
    for i in range(n):
        mine = np.flatnonzero(step == i)
        assert (int(busy[i]), int(g0[i]), int(g1[i])) == _busy(start[mine], end[mine])


@pytest.mark.parametrize("table_max", [1 << 24, 0])
@pytest.mark.parametrize("seed", range(10))
def test_mode_per_kernel_matches_groupby_idxmax(seed, table_max, monkeypatch):
    """The most common bound per kernel name, ties to the value that sorts first, as the
    groupby it replaced; names absent from the phase are not listed. Both ways of counting:
    the names x values table, and the present pairs (many names and values)."""
    import importlib

    from tracekit.analysis.tables import _mode

    monkeypatch.setattr(importlib.import_module("tracekit.analysis.tables"), "_MODE_TABLE_MAX", table_max)

    rng = random.Random(seed)
    n = rng.randint(1, 200)
    names = pd.Categorical([rng.choice("abcde") for _ in range(n)], categories=list("abcdefg"))
    w = pd.DataFrame(
        {"name": names, "bound": categorical.text([rng.choice(["memory", "compute", None]) for _ in range(n)])}
    )
    counts = w.groupby(["name", "bound"], observed=True).size()
    want = counts.groupby(level=0, observed=True).idxmax().map(lambda key: key[1])
    got = _mode(w, "bound")
    assert dict(zip(map(str, got.index), got.tolist())) == dict(zip(map(str, want.index), want.tolist()))


def _cut_offset_reference(anchors, period, gap_before):
    """The offset-by-offset loop that launches._cut_offset replaced."""
    n, best, best_gap = len(gap_before), 0, -1.0
    for offset in range(period):
        at = anchors + offset
        at = at[at < n]
        if len(at):
            g = float(np.median(gap_before[at]))
            if g > best_gap:
                best, best_gap = offset, g
    return best


@pytest.mark.parametrize("seed", range(10))
def test_cut_offset_matches_the_loop(seed):
    """The launch-pattern cut (offset of the longest median host pause) on every offset at
    once: the same offset, ties to the first, offsets past the last launch skipped."""
    from tracekit.analysis.steps.launches import _cut_offset

    rng = np.random.default_rng(seed)
    for _ in range(50):
        n = int(rng.integers(1, 300))
        period = int(rng.integers(1, 60))
        anchors = np.sort(rng.choice(n, size=int(rng.integers(1, min(n, 20) + 1)), replace=False))
        gaps = rng.integers(-3, 5, n) * 1000
        assert _cut_offset(anchors, period, gaps) == _cut_offset_reference(anchors, period, gaps)


def _step_features_by_groupby(work: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """The groupby form ``evidence.step_features`` replaced (one groupby per feature)."""
    inside = work[work["step"] >= 0]
    gemm_code = np.array([evidence._gemm_like_cached(str(n)) for n in inside["name"].cat.categories], dtype=bool)
    codes = inside["name"].cat.codes.to_numpy()
    gemmish = np.where(codes >= 0, gemm_code[np.maximum(codes, 0)], False)
    g = inside[gemmish & (inside["ctas"].to_numpy() > 0)]
    out = pd.DataFrame(index=pd.RangeIndex(n_steps))
    out["kernels"] = inside.groupby("step").size().reindex(out.index, fill_value=0)
    out["graph_share"] = inside.groupby("step")["graph"].mean().reindex(out.index).fillna(0.0)
    out["gemm_launches"] = g.groupby("step").size().reindex(out.index, fill_value=0)
    out["gemm_blocks"] = (g.groupby("step")["ctas"].sum() / g.groupby("step").size()).reindex(out.index)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_step_features_match_the_groupbys(seed):
    from tracekit.analysis.steps.segment import segment

    work = segment(read_real("gb10_vllm")).work.copy()
    rng = np.random.default_rng(seed)
    # Steps with and without kernels, with and without GEMMs, graph flags of every mix.
    n_steps = int(rng.integers(3, 40))
    work["step"] = rng.integers(-1, n_steps, len(work))
    work["graph"] = rng.random(len(work)) < rng.random()
    work["ctas"] = np.where(rng.random(len(work)) < 0.3, -1, rng.integers(1, 5000, len(work)))
    work.loc[work["step"] == n_steps - 1, "step"] = -1  # the last step has no kernels
    expected = _step_features_by_groupby(work, n_steps)
    assert expected["gemm_blocks"].notna().any() and expected["gemm_blocks"].isna().any()
    pd.testing.assert_frame_equal(evidence.step_features(work, n_steps), expected, check_exact=True)
