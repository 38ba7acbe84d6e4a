"""The analysis' whole-table shortcuts (issue 15) give what the per-row / per-pass forms give.

Each fast path is checked against the plain form it replaced, on real traces."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from conftest import read_real
from tracekit.analysis import categorical, evidence, taxonomy
from tracekit.analysis.capture import own_ops
from tracekit.analysis.roofline import _outermost
from tracekit.analysis import costs


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
    slow = [evidence.shape_evidence(ops[(ops["tid"] == t) & (ops["start_ns"] >= a) & (ops["start_ns"] < b)])
            for a, b, t, _ in passes]
    assert evidence.shape_evidence_many(ops, passes) == slow
    if key == "h100_hf":  # the HF forward's embedding shapes say prefill: the test saw real evidence
        assert any(phase != "unknown" for phase, *_ in slow)


@pytest.mark.parametrize("key", ["h100_hf", "v100_ddp"])
def test_outermost_modelled_ancestor_matches_the_walk(key):
    t = read_real(key)
    src = own_ops(t, t.kernels.assign(op=t.kernels["op"]))
    names = categorical.strings(src.ops["name"])
    modelled = np.array([costs.has_model(n) for n in names], dtype=bool)
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
