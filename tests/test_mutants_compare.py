"""Behaviours of tracekit.compare that surviving mutants of the seed-31 sample showed no test
pinned: which figures the summary states as changed, and the level of a change's interval; of
seed 32: the 1% floor under which a category's change gets no sentence, and the roof note of a
kernel at the same speed on another GPU.
Expected values come from the verdict rules' own vocabulary (only "better" and "worse" are
changes) and from what a 95% interval means: it covers the true change in about 95% of
repeated experiments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_TRACES, bare_analysis
from test_mutants_analysis_h import _decode

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.compare import compare, spread


def test_a_run_compared_with_itself_states_no_change_in_its_summary():
    """catches: the summary's sentence "X: a -> b (+d%), verdict." written for figures judged
    within noise or not comparable (the verdict test negated), so a run compared with itself
    reads as a list of changes."""
    a = analyze(read_trace(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"))
    c = compare(a, a)
    verdicts = {h["verdict"] for h in c.headline}
    assert verdicts <= {"within noise", "not comparable"} and "within noise" in verdicts
    assert not [s for s in c.summary if "→" in s], c.summary
    noise = [h["label"] for h in c.headline if h["verdict"] == "within noise"]
    assert "Within noise: " + ", ".join(noise) + "." in c.summary


def test_a_95_percent_interval_covers_the_true_change_about_95_percent_of_the_time():
    """catches: the interval's percentiles taken at 5 and 95 (a 90% interval labelled 95%, e.g.
    the tail ``(1 - 0.95) / 1``), which covers a known change in ~89% of repeated experiments."""
    assert spread.INTERVAL == 0.95
    rng = np.random.default_rng(12345)  # fixed: the same 400 experiments every run
    trials, hit = 400, 0
    for _ in range(trials):
        # 400 decode steps a side, each N(10, 1) ms before and N(10.5, 1) ms after: true change +0.5 ms.
        before, after = 10 + rng.standard_normal(400), 10.5 + rng.standard_normal(400)
        lo, hi = spread.change_interval("tpot_mean", _decode(before), _decode(after))["delta"]
        hit += lo <= 0.5 <= hi
    # 95% nominal; a bootstrap of sqrt(n) blocks covers a little less (93.5% measured here), and
    # 400 experiments have a binomial standard error of 1.1 points: 91-99% accepts it, a 90%
    # interval (88.75% here) does not.
    assert 0.91 <= hit / trials <= 0.99, hit / trials


def _one_kernel_run(spec: str, gemm_ms: float):
    """A run on GPU ``spec``: 4 decode steps, 100 ms, GEMM ``gemm_ms`` and norm 10 ms; one GEMM
    kernel of 1 ms at half its roof."""
    a = bare_analysis(device={"name": f"GPU {spec}", "type": "gpu", "spec": spec})
    a.work = pd.DataFrame(
        {
            "phase": ["decode"],
            "category": ["gemm"],
            "op_name": ["aten::mm"],
            "name": ["k"],
            "dur_ns": [1_000_000],
            "roof_fraction": [0.5],
            "unit": ["matrix"],
            "dtype": ["bf16"],
            "flops": [1e12],
            "bound": ["compute"],
        }
    )
    a.phases = {
        "decode": {
            "steps": 4,
            "time_ms": 100.0,
            "by_bound": {"compute": 60.0, "idle": 40.0},
            "by_category": {"gemm": gemm_ms, "norm": 10.0},
        }
    }
    return a


def test_a_category_change_under_1_percent_of_the_phase_gets_no_sentence():
    """catches: the floor of a sentence-worthy change computed as 0.01 / the phase's time rather
    than 1% of it, so a 0.4 ms change of a 100 ms phase is explained as if it mattered."""
    small = compare(_one_kernel_run("A", 50.0), _one_kernel_run("A", 50.4)).phases["decode"]["explanation"]
    assert not [s for s in small if s.startswith("gemm ")], small  # 0.4 ms <= 1 ms (1% of 100 ms)
    big = compare(_one_kernel_run("A", 50.0), _one_kernel_run("A", 52.0)).phases["decode"]["explanation"]
    assert [s for s in big if s.startswith("gemm grew by 2.00 ms")], big  # 2 ms > 1 ms


def test_a_kernel_at_the_same_speed_on_another_gpu_gets_its_roof_note():
    """catches: the 'same GPU, same speed, same roof: nothing to point out' rule applied when the
    GPUs differ (their names compared with >= instead of ==): moving a kernel to another GPU at
    the same speed is worth the note, since each fraction is of a different roof."""
    for before, after in (("B", "A"), ("A", "B")):
        text = compare(_one_kernel_run(before, 50.0), _one_kernel_run(after, 50.0)).phases["decode"]["explanation"]
        assert f"aten::mm (gemm): 1x faster per call, at 50% of {after}'s roof (was 50% of {before}'s)." in text, text
    # On the same GPU the same kernel at the same speed and roof is not mentioned.
    same = compare(_one_kernel_run("A", 50.0), _one_kernel_run("A", 50.0)).phases["decode"]["explanation"]
    assert not [s for s in same if s.startswith("aten::mm")], same


def test_each_block_resample_holds_as_many_steps_as_the_run():
    """catches: the number of blocks rounded down (``n // length``), so a run of 10 steps (blocks
    of ceil(sqrt(10)) = 4) is resampled as 8 steps and its interval is too wide."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 10, 17, 100):
        idx = spread.block_indices(n, rng)
        assert idx.shape == (spread.BOOTSTRAP, n), n
        assert idx.min() >= 0 and idx.max() < n
        # Each row is runs of consecutive steps (circularly): blocks of ceil(sqrt(n)).
        length = int(np.ceil(np.sqrt(n)))
        for start in range(0, n, length):
            block = idx[0, start : start + length]
            assert ((np.diff(block) % n) == 1 % n).all() or n == 1, (n, block)


# --- seed 32, the rest -------------------------------------------------------------------------


def test_pooled_decode_tokens_per_s_of_several_runs_is_all_tokens_over_all_step_time():
    """catches: the pooled rate of several runs floor-divided (``//``), dropping its fraction."""
    # Run 1: steps 4 and 6 ms, run 2: 3 and 4 ms; 8 tokens a step: 32 tokens in 17 ms.
    runs = [_decode([4.0, 6.0]), _decode([3.0, 4.0])]
    assert spread.side_value(runs, "decode_tokens_per_s") == pytest.approx(32 / 17e-3, rel=1e-12)


def test_vanished_kernels_are_listed_biggest_first():
    """catches: the kernels only the before run has ordered by name instead of by their time."""
    from tracekit.compare.movers import kernel_movers

    cols = ["category", "op_name", "name", "dur_ns", "roof_fraction"]
    before = pd.DataFrame(
        [
            ("gemm", "aten::bmm", "k1", 1_000_000, None),
            ("gemm", "aten::mm", "k2", 3_000_000, None),
            ("norm", "aten::rms", "n", 1_000_000, None),
        ],
        columns=cols,
    )
    after = pd.DataFrame([("norm", "aten::rms", "n", 1_000_000, None)], columns=cols)
    gone = kernel_movers(before, after)["vanished"]
    assert [(r["key"], r["before_ms"]) for r in gone] == [("gemm | aten::mm", 3.0), ("gemm | aten::bmm", 1.0)]


def test_a_collect_setting_that_differs_is_a_context_row_with_both_values():
    """catches: a collect setting's context row showing the note (or the after value) as its
    before value."""
    from tracekit.compare.context import context_rows

    b, a = bare_analysis(), bare_analysis()
    b.workload, a.workload = {"device": {"threads": 1}}, {"device": {"threads": 2}}
    rows = [r for r in context_rows(b, a) if r["field"] == "threads"]
    assert [(r["before"], r["after"]) for r in rows] == [(1, 2)]
    assert rows[0]["note"].startswith("different thread counts")


def test_a_share_without_measured_noise_is_flat_within_1_percentage_point():
    """catches: the fixed threshold of a share's change stated as anything but the 0.01 it applies
    (1 percentage point), e.g. "0.99 percentage point"."""
    from tracekit.compare.verdicts import FLAT_POINTS, FLAT_THRESHOLD, headline_figure

    assert (FLAT_POINTS, FLAT_THRESHOLD) == (0.01, 0.02)
    b, a = bare_analysis({"decode_mbu": 0.300}), bare_analysis({"decode_mbu": 0.305})
    h = headline_figure("decode_mbu", b, a)
    assert h["verdict"] == "within noise"  # +0.5 points, +1.7%: under 2% and under 1 point
    assert "changes under 2% or 1 percentage point count as noise" in h["noise_basis"], h["noise_basis"]


def test_an_efficiency_disagreement_names_the_work_that_changed():
    """catches: the FLOPs and bytes of the disagreement sentence swapped (``is not`` for ``==``):
    MFU counts FLOPs, MBU counts bytes."""
    from tracekit.compare.verdicts import explain_disagreements

    b, a = bare_analysis(), bare_analysis()
    b.phases = {"prefill": {"flops": 1e12}, "decode": {"bytes": 1e9}}
    a.phases = {"prefill": {"flops": 2e12}, "decode": {"bytes": 3e9}}
    headline = [
        {"key": "prefill_mfu", "label": "Prefill MFU", "verdict": "better"},
        {"key": "ttft_ms", "label": "TTFT", "verdict": "worse"},
        {"key": "decode_mbu", "label": "Decode MBU", "verdict": "better"},
        {"key": "tpot_p50", "label": "TPOT p50", "verdict": "worse"},
    ]
    explain_disagreements(headline, b, a)
    assert "the FLOPs counted in the phase changed 2x" in headline[0]["disagreement"]
    assert "the bytes counted in the phase changed 3x" in headline[2]["disagreement"]


# --- seed 33 -------------------------------------------------------------------------------------


def test_each_tabulated_t_quantile_holds_97_5_percent_of_students_t_below_it():
    """catches: a value of the Student-t table wrong (e.g. 2.074 at 22 degrees of freedom typed as
    1.074), which narrows a few-run interval. The oracle integrates the t density itself."""
    import math

    for df in range(1, 31):
        t = spread.t975(df)
        c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
        x = np.linspace(0.0, t, 20_001)
        pdf = c * (1 + x * x / df) ** (-(df + 1) / 2)
        mass = (x[1] - x[0]) / 3 * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())  # Simpson
        # The table has 3 decimals: 0.0005 of t moves the mass by at most pdf(t) x 0.0005 < 4e-5.
        assert abs(0.5 + mass - 0.975) < 1e-4, (df, t, 0.5 + mass)


def test_a_one_run_comparison_lists_no_per_run_figures():
    """catches: the per-run figures ("runs") written for a figure of one run per side (the
    several-runs test ``len(after) > 1`` turned into ``>= 1``)."""
    from tracekit.compare.verdicts import headline_figure

    one = headline_figure("decode_mbu", bare_analysis({"decode_mbu": 0.3}), bare_analysis({"decode_mbu": 0.4}))
    assert "runs" not in one
    two = headline_figure("decode_mbu", [bare_analysis({"decode_mbu": 0.3})] * 2, bare_analysis({"decode_mbu": 0.4}))
    assert two["runs"] == {"before": [0.3, 0.3], "after": [0.4]}


def _bounds_run(by_bound: dict) -> object:
    a = _one_kernel_run("A", 50.0)
    a.phases["decode"]["by_bound"] = by_bound
    return a


def test_most_kernel_time_is_a_bound_only_when_it_holds_over_half():
    """catches: the dominant bound named without its majority (``ms > 0.5 x total`` turned into an
    identity test that always holds), so a phase split 45/35/20 reads as "now memory-bound"."""
    before = _bounds_run({"compute": 60.0, "memory": 40.0, "idle": 10.0})
    split = _bounds_run({"memory": 45.0, "compute": 35.0, "latency": 20.0, "idle": 10.0})
    text = compare(before, split).phases["decode"]["explanation"]
    assert not [s for s in text if s.startswith("Most kernel time is now")], text
    memory = _bounds_run({"memory": 70.0, "compute": 30.0, "idle": 10.0})
    text = compare(before, memory).phases["decode"]["explanation"]
    assert "Most kernel time is now memory-bound (it was compute-bound)." in text, text


def test_a_mangled_kernel_name_cut_short_names_only_its_whole_parts():
    """catches: a length-prefixed part of a mangled name that runs past the name's end (a name the
    trace cut short) taken as a part anyway, so one kernel's family differs by where it was cut."""
    from tracekit.compare.movers import kernel_family

    whole = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bEEvPT_"
    assert kernel_family(whole) == "aiter::add_rmsnorm_quant_kernel"
    # Cut inside the second part (24 characters announced, 7 left): only "aiter" is whole.
    assert kernel_family(whole[: len("_ZN5aiter24add_rms")]) == "aiter"


def test_the_bootstraps_percentile_is_numpys_linear_percentile():
    """catches: the interpolation between the two order statistics around a percentile added
    instead of weighted ((hi - lo) + frac for (hi - lo) x frac)."""
    rng = np.random.default_rng(7)
    x = np.sort(rng.normal(10, 2, (50, 40)), axis=1)
    n = rng.integers(2, 41, 50)
    x[np.arange(40)[None, :] >= n[:, None]] = np.inf  # past each row's n: padding, as the caller pads
    for q in (50, 90, 99):
        got = spread._sorted_percentile(x, n, q)
        want = [np.percentile(row[:k], q) for row, k in zip(x, n)]
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_phase_of_no_time_before_explains_small_changes_after():
    """catches: the scale of a phase's 1% floor taken as 1 ms when the before run's time is 0
    (``b or -1.0``), hiding changes under 10 us in a phase of under 1 ms."""
    empty, short = _one_kernel_run("A", 0.0), _one_kernel_run("A", 0.008)
    empty.phases["decode"].update(time_ms=0.0, by_category={"gemm": 0.0})
    short.phases["decode"].update(time_ms=0.5, by_category={"gemm": 0.008})
    text = compare(empty, short).phases["decode"]["explanation"]
    # 1% of max(0, 0.5 ms) = 5 us; GEMM grew 8 us.
    assert [s for s in text if s.startswith("gemm grew by")], text
    back = compare(short, empty).phases["decode"]["explanation"]  # and the other way round
    assert [s for s in back if s.startswith("gemm shrank by")], back


# --- seed 34 -------------------------------------------------------------------------------------


def _tiny(batch: int):
    return analyze(read_trace(SAMPLE_TRACES / f"tiny-bs{batch}.pt.trace.json.gz"))


@pytest.mark.parametrize("before, after", [(1, 8), (8, 1)])
def test_phase_time_sentence_gives_the_relative_change_in_percent(before, after):
    """catches: the change put as a remainder (`(a - b) / b % 100` for `* 100`): the tiny model's
    prefill going from 10.6 ms (batch 1) to 57.5 ms (batch 8) is +443%, which came out "+4.43%".
    The expectation is the two analyses' own prefill times, (after - before) / before x 100."""
    import re

    b, a = _tiny(before), _tiny(after)
    tb, ta = b.phases["prefill"]["time_ms"], a.phases["prefill"]["time_ms"]
    first = compare(b, a).to_dict()["phases"]["prefill"]["explanation"][0]
    got = float(re.search(r"\(([+-]?[\d.,]+)%\)\.$", first)[1].replace(",", ""))
    assert got == pytest.approx((ta - tb) / tb * 100, rel=5e-3), first
    assert first.startswith("Time ") and (("+" in first) == (ta > tb))


def test_repeats_of_one_workload_pool_and_a_tenth_more_gemm_work_per_token_does_not():
    """catches: the GEMM-work check written `fa / fb >> 1` (a float shift: every side of repeats
    crashed with a TypeError instead of pooling). Two copies of one run pool; a run whose prefill
    GEMMs do 1.5x the FLOPs per prompt token is another workload (the rule's 10%), one with 1.05x
    is the same."""
    import dataclasses

    from tracekit.errors import TracekitError

    base = _tiny(8)
    assert compare([base, base], [base, base]).to_dict()["phases"]["prefill"]["time_ms"]["delta"] == 0

    def scaled(factor):
        w = base.work.copy()
        gemm = ((w["phase"] == "prefill") & (w["category"] == "gemm")).to_numpy()
        w.loc[gemm, "flops"] = w.loc[gemm, "flops"] * factor
        return dataclasses.replace(base, work=w)

    compare([base, scaled(1.05)], base)  # within 10%: one workload
    with pytest.raises(TracekitError, match="GEMM FLOPs per prompt token"):
        compare([base, scaled(1.5)], base)


def test_context_values_are_written_with_their_si_prefix():
    """catches: a value divided by its prefix's scale written as a sum (`v + scale`): a GEMM work
    of 1.39e10 FLOPs per token, said as "13.9G" in the sentence refusing to pool two workloads,
    came out "1.49e+10G"."""
    from tracekit.compare.context import plain

    assert plain(1.3892750336e10) == "13.9G"
    assert plain(2.5e12) == "2.5T"
    assert plain(6.07e6) == "6.07M"
    assert plain(0.1234) == "0.123"  # 3 significant digits, no prefix under a million
    assert plain(None) == "unknown" and plain(8) == "8"


def test_several_runs_against_one_run_is_a_hierarchical_interval():
    """catches: the within-run basis chosen when only the after side has one run (`len(nb) >= 1`
    for `== 1`): two runs before (10 + 12 steps) against one after (11 steps) are resampled run
    by run on the before side, so the interval holds run-to-run spread and must say so."""
    before = [_decode(np.linspace(10.0, 11.0, 10)), _decode(np.linspace(10.5, 11.5, 12))]
    after = _decode(np.linspace(10.2, 11.2, 11))
    basis = compare(before, after).figure("tpot_p50")["interval"]["basis"]
    assert basis.startswith("hierarchical bootstrap of 2 runs (22 steps) and 11 steps"), basis
    assert "a shift of a whole run is not in it" not in basis


def test_an_efficiency_disagreement_names_the_peak_only_when_it_changed():
    """catches: the peaks compared by their product (`ka * kb - 1` for `ka / kb - 1`), which names
    "the matrix FLOP/s it is measured against" for two runs on one GPU (989 TFLOP/s each: a ratio
    of 1) and says it changed "1x". With the after run's peak doubled, the sentence says 2x."""
    from tracekit.compare.verdicts import explain_disagreements

    def run(matrix, bandwidth):
        r = bare_analysis()
        r.phases = {"prefill": {"flops": 1e12}, "decode": {"bytes": 1e9}}
        r.device = {"peak_flops": {"matrix": {"bf16": matrix}}, "peak_bandwidth": bandwidth}
        return r

    def said(b, a):
        headline = [
            {"key": "prefill_mfu", "label": "Prefill MFU", "verdict": "better"},
            {"key": "ttft_ms", "label": "TTFT", "verdict": "worse"},
            {"key": "decode_mbu", "label": "Decode MBU", "verdict": "better"},
            {"key": "tpot_p50", "label": "TPOT p50", "verdict": "worse"},
        ]
        explain_disagreements(headline, b, a)
        return headline[0]["disagreement"], headline[2]["disagreement"]

    same = said(run(989e12, 3.35e12), run(989e12, 3.35e12))
    assert all("measured against" not in s for s in same), same
    assert all(s.endswith("the phase's time counts idle and host time its latency does not") for s in same), same
    flops, nbytes = said(run(989e12, 3.35e12), run(1978e12, 6.7e12))
    assert "the matrix FLOP/s it is measured against changed 2x" in flops, flops
    assert "the bandwidth it is measured against changed 2x" in nbytes, nbytes


def test_a_share_is_written_in_percent_and_its_change_in_points():
    """catches: a share scaled by anything but 100 (`v * 101`): 0.456 of the time is 45.6%, and a
    change of 0.012 is +1.2 percentage points (three significant digits, as `num` writes them)."""
    from tracekit.compare.verdicts import fmt

    assert fmt(0.456, "") == "45.6%"
    assert fmt(0.25, "") == "25.0%"
    assert fmt(0.012, "", delta=True) == "+1.20 pp"
    assert fmt(-0.05, "", delta=True) == "-5.00 pp"
    assert fmt(12.3, "ms") == "12.3 ms" and fmt(None, "ms") == "n/a"


# --- seed 35 -------------------------------------------------------------------------------------


def test_a_one_run_per_side_summary_has_no_runs_line():
    """catches: the summary's "Runs: n before, m after" line written for one run a side (the
    several-runs test ``len(before_runs) > 1`` turned into ``> 0``): a plain two-trace comparison
    then reads as if it pooled runs. Two runs on either side, it is stated with both counts (and
    seed 36: not only from three runs on, ``len(after_runs) > 2``)."""
    a, b = _decode(np.linspace(10.0, 11.0, 20)), _decode(np.linspace(10.5, 11.5, 20))
    assert not [s for s in compare(a, b).summary if s.startswith("Runs:")]
    runs = [s for s in compare([a, a], b).summary if s.startswith("Runs:")]
    assert len(runs) == 1 and runs[0].startswith("Runs: 2 before, 1 after; "), runs
    runs = [s for s in compare(a, [b, b]).summary if s.startswith("Runs:")]  # either side's count decides
    assert len(runs) == 1 and runs[0].startswith("Runs: 1 before, 2 after; "), runs


def test_a_gate_states_its_change_in_percent_only_when_its_threshold_is_relative():
    """catches: the gate's unit chosen the wrong way round (``"%" if not relative``): a gate of
    ``tpot_p50>+5%`` would say its change in ms and one of ``tpot_p50>0.5ms`` in %. The units are
    the gate's own spellings."""
    from tracekit.compare.gates import parse_gate

    c = compare(_decode(np.linspace(10.0, 11.0, 20)), _decode(np.linspace(10.5, 11.5, 20)))
    assert parse_gate("tpot_p50>+5%").evaluate(c)["unit"] == "%"
    assert parse_gate("tpot_p50>0.5ms").evaluate(c)["unit"] == "ms"


def _steps_run(series) -> object:
    """One run whose decode step times (ms) are ``series``, with its mean and percentiles."""
    s = np.asarray(series, dtype=float)
    a = _decode(s)
    a.metrics["decode_step_series_ms"] = list(s)
    a.metrics["decode_step_ms"] = {
        "mean": float(s.mean()),
        **{k: float(np.percentile(s, q)) for k, q in spread.PERCENTILES.items()},
    }
    return a


def test_the_interval_of_a_several_run_step_percentile_is_of_the_percentile_not_the_mean():
    """catches: the pooled-mean replicate used for a percentile figure whose key sorts before
    ``decode_tokens_per_s`` (``key == ...`` turned into ``<=``, which takes ``decode_step_p90``).
    Every 4th step is slow: 30 ms before, 20 ms after, the rest 10 ms. The p90 step falls by
    exactly 10 ms in every resample that keeps a slow step in its top tenth (here, all of them:
    a quarter of the steps are slow), while the mean falls by (30 - 20) / 4 = 2.5 ms."""
    before = [_steps_run(np.tile([10.0, 10, 10, 30], 25))] * 2
    after = [_steps_run(np.tile([10.0, 10, 10, 20], 25))] * 2
    lo, hi = spread.change_interval("decode_step_p90", before, after)["delta"]
    assert lo <= -10.0 <= hi and hi < -5.0, (lo, hi)
    lo, hi = spread.change_interval("decode_step_mean", before, after)["delta"]
    assert lo <= -2.5 <= hi and lo > -5.0, (lo, hi)


def test_runs_without_run_to_run_spread_keep_the_bootstrap_interval_unwidened():
    """catches: the Student-t widening applied whatever the two intervals are (its upper test
    ``va - vb + half > delta[1]`` turned into ``is not``, true of any two floats): repeats of one
    run have no spread between runs, so the t interval is a point inside the bootstrap's and the
    basis must not say it was widened. Runs that differ as whole runs do widen it."""
    a, b = _decode(np.linspace(10.0, 11.0, 40)), _decode(np.linspace(10.5, 11.5, 40))
    same = spread.change_interval("tpot_p50", [a, a], [b, b])
    assert "widened" not in same["basis"], same["basis"]
    shifted = [a, _decode(np.linspace(12.0, 13.0, 40))]
    apart = spread.change_interval("tpot_p50", shifted, [b, _decode(np.linspace(8.0, 9.0, 40))])
    assert "widened to the Student-t interval of the per-run figures (2 degrees of freedom)" in apart["basis"], apart[
        "basis"
    ]


def test_several_runs_on_one_side_only_are_widened_to_the_t_interval_too():
    """catches (seed 36): the t bound computed only when both sides have several runs (``or`` read
    as ``and``), and its degrees of freedom misstated (``Rb - Ra - 2`` for ``Rb + Ra - 2``). Two
    before-runs a whole 2 ms apart against one after-run: the spread between runs is real, the
    bootstrap of two runs understates it, and the t interval of 2 + 1 - 2 = 1 degree of freedom
    (t = 12.71, half-width 12.71 x 1.41 x sqrt(1/2 + 1) = 22 ms) is far wider: it is used."""
    a, b = _decode(np.linspace(10.0, 11.0, 40)), _decode(np.linspace(10.5, 11.5, 40))
    shifted = [a, _decode(np.linspace(12.0, 13.0, 40))]
    got = spread.change_interval("tpot_p50", shifted, b)
    assert "widened to the Student-t interval of the per-run figures (1 degree of freedom)" in got["basis"], got[
        "basis"
    ]
    sd = np.std([10.5, 12.5], ddof=1)  # the before-runs' medians; the after side has one run
    half = 12.706 * sd * np.sqrt(1 / 2 + 1)
    mid = 11.0 - 11.5  # the pooled medians: after 11.0, before 11.5 (steps 10..11 and 12..13 pooled)
    assert got["delta"][0] == pytest.approx(mid - half, abs=0.01) and got["delta"][1] == pytest.approx(
        mid + half, abs=0.01
    )


def test_a_several_run_mean_step_replicate_is_the_pooled_mean_of_the_drawn_runs():
    """catches: the tokens-per-second replicate used for another mean figure (its ``key ==
    "decode_tokens_per_s"`` turned into ``<=``, which takes ``decode_step_mean``): that replicate
    is all steps' squared means over their time, not the pooled mean. Nine runs of 8 steps at
    10 ms and one at 100 ms, each step kept as measured: a draw of 10 runs holding the slow one
    k times pools to (10 (10 - k) + 100 k) / 10 = 10 + 9k ms, and nothing else."""
    runs = [_steps_run([10.0] * 8)] * 9 + [_steps_run([100.0] * 8)]
    series = [np.asarray(a.metrics["decode_step_series_ms"]) for a in runs]
    resampled = [np.tile(s, (spread.BOOTSTRAP, 1)) for s in series]
    x = spread._replicates("decode_step_mean", runs, series, resampled, np.random.default_rng(0))
    k = (x - 10.0) / 9.0
    assert np.allclose(k, np.round(k)) and set(np.round(k)) > {0.0, 1.0}, sorted(set(np.round(x, 3)))


# --- seed 36 -------------------------------------------------------------------------------------


def test_a_run_without_decode_steps_has_no_decode_step_count_in_its_workload():
    """catches: a run with no decode phase given a decode-step count (the fallback ``or 0``, which
    the ``or None`` after it turns into "unknown", read as ``or 1``): a prefill-only trace would be
    said to hold one decode step in the workload rows compare sets side by side."""
    from tracekit.compare.context import workload_of

    assert workload_of(bare_analysis())["decode_steps"] is None
    a = bare_analysis()
    a.phases = {"decode": {"steps": 4}}
    assert workload_of(a)["decode_steps"] == 4


def test_a_figure_within_noise_without_an_interval_is_noise_not_a_failure():
    """catches: the gate's noise test ``verdict == "within noise"`` read as ``<`` (no verdict sorts
    below it but "better", so a figure judged within noise failed its gate). Prefill MFU is
    measured once per run: no interval, and compare's fixed rule calls a change under 1 percentage
    point noise. 40% -> 39.9% crosses a -0.05 pp gate within noise; 40% -> 30% is beyond it."""
    from tracekit.compare.gates import parse_gate

    gate = parse_gate("prefill_mfu<-0.05pp")
    for after, verdict, want in ((0.399, "within noise", "noise"), (0.30, "worse", "fail")):
        c = compare(bare_analysis({"prefill_mfu": 0.40}), bare_analysis({"prefill_mfu": after}))
        assert c.figure("prefill_mfu")["interval"] is None
        assert c.figure("prefill_mfu")["verdict"] == verdict
        assert gate.evaluate(c)["verdict"] == want, (after, gate.evaluate(c))


def test_the_json_states_the_detail_rule_only_for_several_runs():
    """catches (seed 37): the JSON's ``method.detail`` (which run of a side is shown in detail) set
    for a one-run-a-side comparison (``len(after) > 1`` read as ``> 0``); with two after-runs it is
    stated, as the summary's "Runs:" line is."""
    from tracekit.compare.comparison import DETAIL_RULE

    a, b = _decode(np.linspace(10.0, 11.0, 20)), _decode(np.linspace(10.5, 11.5, 20))
    assert compare(a, b).to_dict()["method"]["detail"] is None
    assert compare(a, [b, b]).to_dict()["method"]["detail"] == DETAIL_RULE


def test_gemm_flops_per_token_of_a_one_token_prefill(tmp_path):
    """catches: the per-token GEMM work left unknown when the prefill held a single token (the
    guard ``tokens > 0`` read as ``> 1``). One bf16 aten::mm [1, 4096] x [4096, 4096] in a
    prefill of one token: 2 x 1 x 4096 x 4096 = 33,554,432 FLOPs, all of them that token's."""
    from kineto import Doc

    from tracekit.compare.context import workload_of

    doc = Doc()
    doc.annotation("tracekit::prefill#0 bs=1 tokens=1", 0.0, 100.0)
    ext = doc.op("aten::mm", 5.0, 50.0, dims=[[1, 4096], [4096, 4096]], types=["c10::BFloat16"] * 2)
    doc.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 10.0, 20.0, 30.0, ext=ext)
    w = workload_of(analyze(read_trace(doc.write(tmp_path / "one-token.json"))))
    assert w["prefill_tokens"] == 1
    assert w["gemm_flops_per_token"] == 2 * 1 * 4096 * 4096


def test_two_runs_without_steps_compare_their_kernels_over_the_whole_trace(tmp_path):
    """catches: traces without inference steps compared as nothing (no phase, the kernels' time
    lost), the whole-trace totals taken from the wrong column, and the terminal table printing an
    empty headline header instead of saying why there are no headline figures. Each run is two
    GEMMs (before 10 + 10 us, after 30 + 10 us) and one 3 us elementwise kernel, no annotation:
    whole trace 0.023 -> 0.043 ms, GEMM 0.020 -> 0.040 ms, elementwise unchanged."""
    from kineto import Doc

    from tracekit.report.compare import render_comparison

    def run(durs, name):
        doc, t = Doc(), 0.0
        for d in durs:
            doc.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", t, t + 5.0, d)
            t += d + 20.0
        doc.kernel("vectorized_elementwise_kernel", t, t + 5.0, 3.0)
        return analyze(read_trace(doc.write(tmp_path / f"{name}.json")))

    c = compare(run([10.0, 10.0], "before"), run([30.0, 10.0], "after"))
    d = c.to_dict()
    assert list(d["phases"]) == ["all"] and d["headline"] == []
    p = d["phases"]["all"]
    assert p["time_ms"]["before"] == pytest.approx(0.023) and p["time_ms"]["after"] == pytest.approx(0.043)
    cats = {r["name"]: (r["before_ms"], r["after_ms"]) for r in p["by_category"]}
    assert cats["gemm"] == pytest.approx((0.020, 0.040)) and cats["elementwise"] == pytest.approx((0.003, 0.003))
    text = render_comparison(c, "text")
    assert "no headline figures: neither trace holds inference steps" in text
    assert "change %" not in text.split("whole trace")[0], text  # no empty headline table


def test_a_phase_only_one_run_has_is_said_to_be_uncomparable(tmp_path):
    """catches: a prefill the after run lacks compared as if it had dropped to 0 ms (a "-100%"
    time change, TTFT "better"), or the sentence naming the wrong run. Before: one 100 us prefill
    step then four 100 us decode steps; after: the same four decode steps only. TTFT is not
    comparable; each decode step is 0.1 ms on both sides with 80 us of it idle (a 20 us kernel)."""
    from kineto import Doc

    def run(with_prefill, name):
        doc, t = Doc(), 0.0
        if with_prefill:
            doc.annotation("tracekit::prefill#0 bs=1 tokens=64", t, 100.0)
            doc.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", t + 1, t + 5, 50.0)
            t += 100.0
        for i in range(4):
            doc.annotation(f"tracekit::decode#{i} bs=1", t, 100.0)
            doc.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", t + 1, t + 5, 20.0)
            t += 100.0
        return analyze(read_trace(doc.write(tmp_path / f"{name}.json")))

    d = compare(run(True, "with-prefill"), run(False, "decode-only")).to_dict()
    pre = d["phases"]["prefill"]
    assert pre["present"] == {"before": True, "after": False}
    assert pre["time_ms"]["before"] == pytest.approx(0.1) and pre["time_ms"]["delta"] is None
    assert pre["explanation"] == ["Only the before run has prefill steps: nothing to compare it with."]
    h = {x["key"]: x for x in d["headline"]}
    assert h["ttft_ms"]["verdict"] == "not comparable" and h["ttft_ms"]["after"] is None
    assert h["tpot_p50"]["before"] == pytest.approx(0.1) and h["tpot_p50"]["after"] == pytest.approx(0.1)
    assert h["decode_idle_share"]["after"] == pytest.approx(0.8) and h["tpot_p50"]["verdict"] == "within noise"


def test_a_percentiles_interval_does_not_depend_on_how_the_resamples_are_chunked(monkeypatch):
    """The pooled percentile replicates of several runs are sorted in chunks of resamples to
    bound memory (``CHUNK_CELLS``); the chunking must change the memory, never the interval.
    With CHUNK_CELLS at 10 (under one resample's 2-3 runs x 40 steps: one resample per chunk) the
    p50 interval must equal the one sorted in a single chunk. Fails if a chunk after the first is
    shaped or placed wrongly (its ``hi - lo`` rows)."""
    rng = np.random.default_rng(5)
    before = [_decode(10 + rng.normal(0, 0.5, 40)) for _ in range(2)]
    after = [_decode(10.5 + rng.normal(0, 0.5, 40)) for _ in range(3)]
    whole = spread.change_interval("tpot_p50", before, after)
    monkeypatch.setattr(spread, "CHUNK_CELLS", 10)
    chunked = spread.change_interval("tpot_p50", before, after)
    assert chunked["delta"] == whole["delta"] and chunked["relative"] == whole["relative"]


def test_the_noise_of_several_runs_is_the_one_their_interval_implies():
    """With several runs per side the standard error the verdict uses is the change's 95%
    interval width over 2 x 1.96 (the module's stated rule), not a product or the one-run step
    variance. Fails if the width is computed as anything but high - low."""
    rng = np.random.default_rng(6)
    before = [_decode(10 + rng.normal(0, 0.5, 30)) for _ in range(3)]
    after = [_decode(10.4 + rng.normal(0, 0.5, 30)) for _ in range(3)]
    lo, hi = spread.change_interval("tpot_p50", before, after)["delta"]
    se, basis = spread.step_noise("tpot_p50", before, after)
    assert se == pytest.approx((hi - lo) / (2 * 1.96), rel=1e-12)
    assert "run-to-run and step-to-step variation of 3 and 3 runs (90 and 90 decode steps" in basis


def test_each_pooled_figure_says_how_it_pools():
    """The basis of a several-run figure: tokens/s is all the runs' tokens over all their step
    time, a TPOT percentile is over the pooled steps. Fails if the tokens/s wording goes to
    another figure (a key comparison other than equality) or the step count is not the pooled one."""
    runs = [_decode([10.0, 11.0, 12.0]), _decode([10.0, 11.0])]
    assert spread.value_basis(runs, "decode_tokens_per_s") == "2 runs: all tokens over all step time (5 steps)"
    assert spread.value_basis(runs, "tpot_p50") == "2 runs: over the pooled steps (5 steps)"
    assert spread.value_basis(runs[:1], "tpot_p50") == "one run"


def test_a_gate_sentence_says_above_for_a_rise_and_below_for_a_fall():
    """catches: the side a threshold is crossed on named by an order comparison of the operator
    (``op > ">"`` is never true, so every gate said "below"). TPOT p50 rises 4.8% (10.5 -> 11.0
    ms): the rise gate at +5% passes "not above +5.0%"; the fall gate at -5% passes "not below
    -5.0%"."""
    from tracekit.compare.gates import parse_gate

    c = compare(_decode(np.linspace(10.0, 11.0, 21)), _decode(np.linspace(10.5, 11.5, 21)))
    rise, fall = parse_gate("tpot_p50>+5%").evaluate(c), parse_gate("tpot_p50<-5%").evaluate(c)
    assert rise["verdict"] == "pass" and rise["sentence"].endswith("not above +5.0%"), rise["sentence"]
    assert fall["verdict"] == "pass" and fall["sentence"].endswith("not below -5.0%"), fall["sentence"]


# --- seed 39 -------------------------------------------------------------------------------------


def test_a_change_of_sub_millisecond_steps_has_its_relative_interval():
    """catches: the relative interval given only when every resampled before-figure exceeds 1
    (``xb > 1`` for ``xb > 0``): a run of sub-millisecond decode steps (a small model on a fast
    GPU) would get no relative interval. 200 steps of 0.40 ms before, 0.44 ms after (each +/- a
    little noise): the relative change is +10%, so the interval lies around 0.10."""
    rng = np.random.default_rng(39)
    before, after = 0.40 + 0.01 * rng.standard_normal(200), 0.44 + 0.01 * rng.standard_normal(200)
    got = spread.change_interval("tpot_mean", _decode(before), _decode(after))
    lo, hi = got["relative"]
    assert lo < 0.10 < hi and hi - lo < 0.05, got
    # The relative interval is the change over the before figure: about delta / 0.40.
    assert lo == pytest.approx(got["delta"][0] / before.mean(), abs=0.01)


# --- seed 46 (survey) ----------------------------------------------------------------------------


def test_a_phases_roof_by_category_is_its_own_units_time_weighted():
    """catches: the per-phase roof table read over the whole trace (or over nothing) instead of
    the phase's units. Decode GEMMs at 0.5 and 0.25 of their roof for 2 and 6 ms: (0.5 x 2 + 0.25
    x 6) / 8 = 0.3125; the prefill GEMM at 0.9 stays out of it; a unit without a fraction counts
    in neither."""
    import dataclasses

    rows = [
        ("decode", "gemm", 0.5, 2e6),
        ("decode", "gemm", 0.25, 6e6),
        ("decode", "attention", 0.1, 1e6),
        ("decode", "gemm", np.nan, 5e6),
        ("prefill", "gemm", 0.9, 4e6),
    ]
    work = pd.DataFrame(
        {
            "phase": [r[0] for r in rows],
            "category": [r[1] for r in rows],
            "roof_fraction": [r[2] for r in rows],
            "dur_ns": [r[3] for r in rows],
            "name": [f"{r[1]}_kernel" for r in rows],
            "op_name": ["aten::mm"] * len(rows),
            "unit": ["matrix"] * len(rows),
            "dtype": ["bf16"] * len(rows),
            "flops": [1e9] * len(rows),
            "bound": ["compute"] * len(rows),
        }
    )
    a = dataclasses.replace(
        bare_analysis(),
        work=work,
        phases={"decode": {"steps": 1, "time_ms": 14.0}, "prefill": {"steps": 1, "time_ms": 4.0}},
    )
    c = compare(a, a)
    assert c.phases["decode"]["roof"]["before"] == pytest.approx({"gemm": 0.3125, "attention": 0.1})
    assert c.phases["prefill"]["roof"]["after"] == pytest.approx({"gemm": 0.9})


def test_the_summary_signs_a_rise_and_lists_only_noise_as_noise():
    """catches: a rise's relative change printed without its "+" (``> 0`` read as ``== 0``), or a
    "worse" figure listed under "Within noise" (``== "within noise"`` read as ``>=``: "worse"
    sorts after it). TPOT mean 10 -> 12 ms over steady steps is 20% worse; TTFT 100 -> 101 ms
    (1%, one value a run) is within noise."""
    b = _decode([10.0] * 20)
    a = _decode([12.0] * 20)
    b.metrics["ttft_ms"], a.metrics["ttft_ms"] = 100.0, 101.0
    lines = compare(b, a).summary
    assert "TPOT mean: 10.0 ms → 12.0 ms (+20.0%), worse." in lines
    assert "decode tokens/s: 800 tok/s → 667 tok/s (-16.7%), worse." in lines  # 8 tokens per step
    [noise] = [s for s in lines if s.startswith("Within noise:")]
    assert "TTFT" in noise and "TPOT" not in noise


def test_the_measured_ceilings_difference_shows_both_ceilings():
    """catches: a measured ceiling shown floor-divided by its unit (0.04 TFLOP/s as 0). The
    tiny-bs1 sample's own fp32 matmul calibration against one of 4e10 FLOP/s (0.04 TFLOP/s)."""
    from test_compare import _sample_with

    base = _sample_with()
    flops = float(next(iter(base.sidecar["calibration"]["matmul_flops"].values())))
    other = analyze(_sample_with(**{"calibration.matmul_flops": {"fp32": 4.0e10}}))
    [row] = [r for r in compare(analyze(base), other).context if r["field"] == "ceiling_matmul"]
    assert (row["before"], row["after"]) == (f"{flops / 1e12:.3g} TFLOP/s", "0.04 TFLOP/s")


# Seed-47 survivors: the JSON's step counts per side, a category's relative change, and the verb
# of an idle change. Expectations are the fixture's own numbers (4 steps, 50 -> 52 ms, 40 -> 30 ms).


def test_each_sides_json_states_its_phases_step_counts():
    """catches: a side's step count written as ``steps and 0`` (0 for every phase), so the JSON of
    every comparison says each run had no steps."""
    d = compare(_one_kernel_run("A", 50.0), _one_kernel_run("A", 52.0)).to_dict()
    assert d["before"]["steps"] == {"decode": 4} and d["after"]["steps"] == {"decode": 4}
    assert d["before"]["runs"][0]["steps"] == {"decode": 4}


def test_a_categorys_relative_change_is_its_change_over_its_before_time():
    """catches: relative change as (after - before) + before instead of over before: gemm
    50 -> 52 ms is +4% (2 / 50), not 52."""
    rows = compare(_one_kernel_run("A", 50.0), _one_kernel_run("A", 52.0)).phases["decode"]["by_category"]
    gemm = next(r for r in rows if r["name"] == "gemm")
    assert gemm["relative"] == pytest.approx(2 / 50)
    norm = next(r for r in rows if r["name"] == "norm")
    assert norm["relative"] == 0.0  # 10 -> 10 ms


def test_idle_time_that_fell_is_said_to_have_shrunk():
    """catches: the idle sentence's verb test flipped (``> 0`` as ``<= 0``), so idle falling from
    40 to 30 ms reads "grew"."""
    fell = compare(_bounds_run({"compute": 60.0, "idle": 40.0}), _bounds_run({"compute": 60.0, "idle": 30.0}))
    assert "GPU idle time shrank by 10.0 ms (40.0 ms → 30.0 ms)." in fell.phases["decode"]["explanation"]
    rose = compare(_bounds_run({"compute": 60.0, "idle": 30.0}), _bounds_run({"compute": 60.0, "idle": 40.0}))
    assert "GPU idle time grew by 10.0 ms (30.0 ms → 40.0 ms)." in rose.phases["decode"]["explanation"]


def _roof_run(roof: float):
    a = _one_kernel_run("A", 50.0)
    a.work = a.work.assign(roof_fraction=[roof])
    return a


def test_a_kernel_whose_roof_moved_exactly_5_points_gets_its_roof_note():
    """catches: "same roof" judged as ``<= 0.05``: on one GPU at the same speed, a roof fraction
    that moved under 5 points is nothing to point out, and one that moved 5 points is a change
    (as a noise threshold: changes under it are noise). 0.05 -> 0.10 is exactly 0.05 in binary
    floating point; 0.06 -> 0.10 is under it."""
    moved = compare(_roof_run(0.05), _roof_run(0.10)).phases["decode"]["explanation"]
    assert "aten::mm (gemm): 1x faster per call, at 10% of the roof (was 5%)." in moved, moved
    still = compare(_roof_run(0.06), _roof_run(0.10)).phases["decode"]["explanation"]
    assert not [s for s in still if s.startswith("aten::mm")], still


def _two_call_run(ns: int):
    a = _one_kernel_run("A", 50.0)
    a.work = pd.concat([a.work] * 2, ignore_index=True).assign(dur_ns=[ns, ns])
    return a


def test_a_movers_mean_per_call_is_its_time_over_its_calls_unrounded():
    """catches: the mean per call floored (``// calls``): two calls of 1.5 us are 1.5 us each, not
    1 us, and two of 1.5 us against two of 1.0 us are 1.5x faster per call, not 1x."""
    k = compare(_two_call_run(1_500), _two_call_run(1_000)).kernels
    rows = [r for v in k.values() for r in v["movers"] if r["op"] == "aten::mm"]
    assert rows, k
    for r in rows:
        assert (r["before_calls"], r["after_calls"]) == (2, 2)
        assert r["before_mean_us"] == pytest.approx(1.5) and r["after_mean_us"] == pytest.approx(1.0)
        assert r["per_call_speedup"] == pytest.approx(1.5)
