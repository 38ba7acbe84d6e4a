"""Behaviours of tracekit.analysis that surviving mutants of the seed-42 sample showed no test
pinned. Each expectation is worked out by hand from the definitions the docstrings state."""

from __future__ import annotations

from tracekit.analysis.steps.evidence import Ballot


# --- evidence: the vote's text -------------------------------------------------------------------

def test_only_a_won_vote_of_both_sides_says_the_other_side_was_outweighed():
    """catches: ``winner is not None and len(parts) == 2`` turned into ``or``, so a vote of one
    side alone, or an even split (no winner), would read "the prefill evidence is outweighed"
    when nothing outweighed anything."""
    split = Ballot()
    split.cast("prefill", 1.0, "a")
    split.cast("decode", 1.0, "b")
    assert split.verdict() == ("unknown", 0.5, "the evidence is split evenly: phase votes: prefill 1 (a), decode 1 (b)")
    alone = Ballot()
    alone.cast("decode", 1.0, "b")
    # One vote of weight 1 against W_SURE = 3: confidence 1 x 1/3.
    assert alone.verdict() == ("decode", 0.333, "phase votes: decode 1 (b)")
    won = Ballot()
    won.cast("prefill", 3.0, "a")
    won.cast("decode", 1.0, "b")
    # 3 of 4 for prefill, fully sure (total 4 >= 3): 0.75.
    assert won.verdict() == ("prefill", 0.75, "phase votes: prefill 3 (a), decode 1 (b); the decode evidence is outweighed")


# --- tables: roofline points of model-priced work ------------------------------------------------

def test_a_model_priced_point_shows_no_single_ops_shapes():
    """catches: ``(pricing_all >= 0) & ~model_all`` turned into ``** ~model_all`` (numpy's
    bool power is 1 unless the base is 0 and the exponent 1), which counts model-priced units as
    shape-priced: a point such as "model: linear", which sums every linear layer of the model,
    would show the input shapes of whichever op it met first as if it were that one GEMM. The
    collected tiny-bs8 trace priced by the model (``costs="model"``): its model-priced units have a
    linked op with recorded shapes (663 model-priced units here), so the shapes are there to be (wrongly) shown."""
    from conftest import SAMPLE_TRACES
    from tracekit import read_trace
    from tracekit.analysis import analyze

    a = analyze(read_trace(str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")), costs="model")
    assert ((a.work["pricing_op"] >= 0) & (a.work["cost_source"] == "model")).sum() > 100
    points = [p for r in a.roofline.values() for p in r["points"]]
    assert {p["label"] for p in points} >= {"model: linear", "model: attention"}
    assert all(p["shapes"] is None for p in points if p["cost_source"] == "model")
    # Priced by their shapes instead, the same trace's GEMM points do show them: shapes exist.
    shaped = analyze(read_trace(str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")), costs="shapes")
    assert any(p["shapes"] for r in shaped.roofline.values() for p in r["points"])
