"""A comparison read backwards is the same comparison: compare(B, A) must mirror compare(A, B)
figure by figure, and no verdict may contradict its own interval. The expectation comes from the
definition of a change (after - before), not from the code: swapping the sides negates every
change and its interval, keeps every standard error, and turns better into worse.

Traces: the two collected sample runs (batch 1 and 8 of the built-in model) and, for several
runs a side, hand-made decode step series."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLE_TRACES
from test_mutants_analysis_h import _decode

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.compare import compare

MIRROR = {"better": "worse", "worse": "better", "within noise": "within noise", "not comparable": "not comparable"}


def _check_mirror(ab: dict, ba: dict) -> None:
    assert [h["key"] for h in ab["headline"]] == [h["key"] for h in ba["headline"]]
    for x, y in zip(ab["headline"], ba["headline"]):
        k = x["key"]
        assert (x["before"], x["after"]) == (y["after"], y["before"]), k
        if x["delta"] is not None:
            assert x["delta"] == pytest.approx(-y["delta"], rel=1e-12), k
        assert x["verdict"] == MIRROR[y["verdict"]], (k, x["verdict"], y["verdict"])
        assert x["noise"] == y["noise"] or x["noise"] == pytest.approx(y["noise"], rel=1e-12), k
        if x["interval"]:
            lo, hi = x["interval"]["delta"]
            assert [lo, hi] == pytest.approx([-v for v in reversed(y["interval"]["delta"])], rel=1e-9, abs=1e-12), k
            # One set of books: a change called better or worse has an interval that excludes 0.
            if x["verdict"] in ("better", "worse"):
                assert not (lo <= 0 <= hi), (k, x["verdict"], lo, hi)


@pytest.fixture(scope="module")
def tiny_pair():
    return [analyze(read_trace(SAMPLE_TRACES / f"tiny-bs{b}.pt.trace.json.gz")) for b in (1, 8)]


def test_swapping_two_runs_mirrors_every_headline_figure(tiny_pair):
    """Fails if the sides' resamples are drawn in before/after order (a seeded bootstrap then
    gives B vs A another interval than A vs B, and TPOT p90 was "worse" one way and "within
    noise" the other), or if a verdict is called from a standard error its interval contradicts."""
    a, b = tiny_pair
    _check_mirror(compare(a, b).to_dict(), compare(b, a).to_dict())


def test_swapping_two_runs_mirrors_the_phase_tables(tiny_pair):
    """Every phase's time and each category's and bound's change negate when the runs swap."""
    a, b = tiny_pair
    ab, ba = compare(a, b).to_dict(), compare(b, a).to_dict()
    assert list(ab["phases"]) == list(ba["phases"])
    for p in ab["phases"]:
        x, y = ab["phases"][p], ba["phases"][p]
        assert x["time_ms"]["delta"] == pytest.approx(-y["time_ms"]["delta"], rel=1e-12)
        for table in ("by_category", "by_bound"):
            xs = {r["name"]: r["delta_ms"] for r in x[table]}
            ys = {r["name"]: r["delta_ms"] for r in y[table]}
            assert xs.keys() == ys.keys()
            for n in xs:
                assert xs[n] == pytest.approx(-ys[n], rel=1e-12, abs=1e-12), (p, table, n)


def test_swapping_several_runs_a_side_mirrors_the_pooled_figures():
    """The hierarchical bootstrap (runs, then steps) mirrors too: two runs against three."""
    rng = np.random.default_rng(11)
    before = [_decode(10 + rng.normal(0, 0.4, 30)) for _ in range(2)]
    after = [_decode(10.6 + rng.normal(0, 0.4, 30)) for _ in range(3)]
    _check_mirror(compare(before, after).to_dict(), compare(after, before).to_dict())
