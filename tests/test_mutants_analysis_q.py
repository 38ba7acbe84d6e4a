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


# --- mixed steps that cannot be split --------------------------------------------------------------

def test_phase_weights_of_each_phase_by_hand():
    """catches: the ``mixed`` phase taking a split mixed step's units (they count in prefill and
    decode by their shares) or missing an unsplit one's, and a side's share taken the wrong way
    round. Four units: prefill, an unsplit mixed step's, decode, a split step's (30% prefill)."""
    import numpy as np

    from tracekit.analysis.steps.mixed import phase_weights

    phase = np.array(["prefill", "mixed", "decode", "mixed"], dtype=object)
    share = np.array([np.nan, np.nan, np.nan, 0.3])
    assert phase_weights(phase, share, "prefill").tolist() == [1.0, 0.0, 0.0, 0.3]
    assert phase_weights(phase, share, "decode").tolist() == [0.0, 0.0, 1.0, 0.7]
    assert phase_weights(phase, share, "mixed").tolist() == [0.0, 1.0, 0.0, 0.0]
    assert phase_weights(phase, share, "unknown").tolist() == [0.0, 0.0, 0.0, 0.0]


def test_an_sglang_mixed_step_stays_whole_in_a_mixed_phase():
    """catches: an unsplit mixed step's work lost from (or doubled in) the ``mixed`` phase, or its
    duration left out of the step-time series it belongs to. SGLang's ``step[MIXED bs=.. toks=..]``
    states no split between its sides, so the step stays whole. The shared MI300X SGLang extend
    step relabelled ``MIXED`` is the same work: every figure of its ``mixed`` phase is the one its
    ``prefill`` phase had; it holds prefill and decode work, so its duration is both the prefill
    and the decode step time (docs: "mixed steps included whole"); tokens/s and the prefill MFU
    need a prefill side, which an unsplit step does not state."""
    import dataclasses

    from conftest import read_real
    from tracekit.analysis import analyze

    trace = read_real("mi300x_extend")
    ann = trace.annotations.copy()
    renamed = ann["name"].astype(str).str.replace("step[EXTEND", "step[MIXED", regex=False)
    assert (renamed != ann["name"].astype(str)).sum() == 1
    ann["name"] = renamed.astype("category")
    before, after = analyze(trace), analyze(dataclasses.replace(trace, annotations=ann))
    assert list(before.phases) == ["prefill"] and list(after.phases) == ["mixed"]
    assert after.steps["phase"].tolist() == ["mixed"] and after.steps["split"].tolist() == [None]
    assert after.phases["mixed"] == before.phases["prefill"]
    [duration] = (before.steps["duration_ns"] / 1e6).tolist()
    assert after.metrics["decode_step_series_ms"] == [duration]
    assert after.metrics["prefill_step_ms"] == before.metrics["prefill_step_ms"]
    assert after.metrics["prefill_tokens_per_s"] is None and after.metrics["prefill_mfu"] is None


# --- figures: an MBU above the bandwidth roof is not a fact ----------------------------------------

def test_an_mbu_above_the_peak_bandwidth_is_refused_with_its_percentage():
    """catches: the MBU's above-the-roof refusal dropped or its threshold moved (150% of the peak
    reported as an MBU of 1.5), or the sentence's percentage misstated. The A100 80GB SXM's
    datasheet bandwidth is 2,039 GB/s: bytes of 1.5 x 2.039e12 x 1 ms in 1 ms move at 150% of it;
    half that is an MBU of exactly 0.5, 1.01 is within the 2% timing tolerance (an MBU of 1.01)."""
    from tracekit.analysis import figures
    from tracekit.specs import spec_by_name

    spec = spec_by_name("A100 80GB SXM")
    assert spec.peak_bandwidth == 2039e9
    mbu, ach, basis, why = figures._mbu(1.5 * 2039e9 * 1e-3, 1.0, spec, 0.0, 1.0)
    assert (mbu, ach, basis) == (None, None, None)
    assert why == ("the bytes counted would move at 150% of the peak bandwidth: above 100% is not a fact "
                   "(data served from caches, or bytes counted twice)")
    mbu, _, basis, why = figures._mbu(0.5 * 2039e9 * 1e-3, 1.0, spec, 0.0, 1.0)
    assert mbu == 0.5 and why is None and basis.startswith("peak bandwidth of A100 80GB SXM: 2,039 GB/s")
    assert figures._mbu(1.01 * 2039e9 * 1e-3, 1.0, spec, 0.0, 1.0)[0] == 1.01
