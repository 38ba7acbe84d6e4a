"""Behaviours of tracekit.analysis that surviving mutants of the seed-42 sample showed no test
pinned. Each expectation is worked out by hand from the definitions the docstrings state."""

from __future__ import annotations

import pandas as pd
import pytest

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
    assert won.verdict() == (
        "prefill",
        0.75,
        "phase votes: prefill 3 (a), decode 1 (b); the decode evidence is outweighed",
    )


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
    assert why == (
        "the bytes counted would move at 150% of the peak bandwidth: above 100% is not a fact "
        "(data served from caches, or bytes counted twice)"
    )
    mbu, _, basis, why = figures._mbu(0.5 * 2039e9 * 1e-3, 1.0, spec, 0.0, 1.0)
    assert mbu == 0.5 and why is None and basis.startswith("peak bandwidth of A100 80GB SXM: 2,039 GB/s")
    assert figures._mbu(1.01 * 2039e9 * 1e-3, 1.0, spec, 0.0, 1.0)[0] == 1.01


# --- findings: the decode attention finding names the context the run decoded at -----------------


def test_the_decode_attention_finding_names_the_context_of_a_collected_run():
    """catches: the context range of the decode-attention finding misstated or dropped: a run
    collected with a 64-token prompt and 16 new tokens decodes at 64 to 64 + 16 = 80 tokens of
    context (its sidecar's workload). The tiny-bs8 sample's decode attention is under the 25%
    threshold, so its decode attention time is raised here to half the phase's kernel time; a
    workload without new tokens names the prompt alone, one without a prompt names nothing."""
    import copy

    from conftest import SAMPLE_TRACES

    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.analysis.findings import rules

    a = analyze(read_trace(str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")))
    assert (a.workload["workload"]["prompt_len"], a.workload["workload"]["new_tokens"]) == (64, 16)
    dec = a.phases["decode"]
    dec["by_category"]["attention"] = dec["kernel_ms"] / 2

    def attention_finding(analysis) -> str:
        [text] = [f.text for f in rules.findings(analysis) if f.id == "decode-attention-share"]
        return text

    assert attention_finding(a) == (
        "Attention is 50% of decode kernel time at 64-80 tokens of context: "
        "the KV cache read dominates as context grows."
    )
    no_new = copy.copy(a)
    no_new.workload = {**a.workload, "workload": {**a.workload["workload"], "new_tokens": None}}
    assert " at 64 tokens of context:" in attention_finding(no_new)
    no_prompt = copy.copy(a)
    no_prompt.workload = {**a.workload, "workload": {**a.workload["workload"], "prompt_len": None}}
    assert attention_finding(no_prompt).startswith("Attention is 50% of decode kernel time: the KV cache")


# --- ceilings: a CPU's bandwidth raised to what its copies achieved --------------------------------


def test_a_cpu_bandwidth_ceiling_its_copies_beat_is_raised_to_the_fastest_copy():
    """catches: the CPU's raised bandwidth not applied or misstated in the sentence (GB/s off by a
    unit, the old and new figures swapped), or a copy under the tolerance raising it. A CPU
    measured at 10 GB/s and 0.1 TFLOP/s fp32; a 1 GB copy in 50 ms moves at 20 GB/s (> 10 x 1.02),
    a 1 GB copy in 99 ms at 10.1 GB/s (inside the 2% tolerance); the matmul stays under its peak."""
    import pandas as pd

    from tracekit.analysis.pricing.ceilings import check_ceilings
    from tracekit.specs import SpecMatch
    from tracekit.specs.measured import measured_spec

    match = SpecMatch(measured_spec("test CPU", {"fp32": 1e11}, 10e9), "measured", "")

    def copy_in(ms: float):
        work = pd.DataFrame({"dur_ns": [1_000_000, ms * 1e6]})
        table = pd.DataFrame(
            {"flops": [1e7, 0.0], "bytes": [1.0, 1e9], "dtype": ["fp32", "fp32"], "unit": ["matrix", "vector"]}
        )
        return work, table

    new, why = check_ceilings(*copy_in(50.0), match)
    assert new.spec.peak_bandwidth == pytest.approx(20e9)
    assert new.spec.peak_flops("fp32", "matrix") == 1e11  # 1e7 FLOPs in 1 ms is 1e10 FLOP/s: under it
    assert "(bandwidth 10 → 20 GB/s)" in why and "matmul" not in why
    assert check_ceilings(*copy_in(99.0), match) is None


# --- windows: a folder of two splits' windows ------------------------------------------------------


def test_a_folder_holding_two_splits_windows_is_refused_naming_both(tmp_path):
    """catches: the windows of two different splits (other stems, or another window count) merged
    as one run, or the refusal naming the wrong splits or count. A folder with ``a``'s 2 windows
    and ``b``'s 3 holds 2 splits; one with ``a``'s windows of 2 and of 3 holds 2 as well."""
    from tracekit.analysis.windows import window_paths
    from tracekit.errors import TracekitError

    def refusal(folder, names) -> str:
        folder.mkdir()
        for n in names:
            (folder / n).write_bytes(b"")
        with pytest.raises(TracekitError) as e:
            window_paths(str(folder))
        return e.value.message

    two = refusal(
        tmp_path / "one",
        [
            "a.window-1-of-2.json.gz",
            "a.window-2-of-2.json.gz",
            "b.window-1-of-3.json.gz",
            "b.window-2-of-3.json.gz",
            "b.window-3-of-3.json.gz",
        ],
    )
    assert two.endswith("holds the windows of 2 splits (a, b): put each split in a folder of its own")
    counts = refusal(tmp_path / "two", ["a.window-1-of-2.json.gz", "a.window-1-of-3.json.gz"])
    assert "holds the windows of 2 splits (a, a)" in counts


# --- ranges: step-like names no grammar reads ------------------------------------------------------


def test_unread_step_names_are_said_five_at_a_time_and_the_rest_counted(tmp_path):
    """catches: the count of unread step-like names beyond the five quoted misstated (7 names:
    5 quoted, "2 more"), or the rest dropped without a word. Seven vLLM-shaped ranges
    (``execute_batch_<i>``) that follow no grammar, each around a GEMM, on a hand-built trace;
    six names would say "1 more" (in the singular), five none."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    def notes(k: int) -> list[str]:
        doc = Doc()
        for i in range(k):
            t = 1000.0 * i + 10.0
            doc.annotation(f"execute_batch_{i + 1}", t, 500.0)
            doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", t + 10.0, t + 20.0, 50.0)
        path = tmp_path / f"unread{k}.json"
        doc.write(path)
        return analyze(read_trace(str(path))).provenance["notes"]

    seven = notes(7)
    quoted = [n for n in seven if "looks like a vLLM step annotation but follows no grammar" in n]
    assert [n.split("'")[1] for n in quoted] == [f"execute_batch_{i}" for i in range(1, 6)]
    assert "2 more range names look like step annotations tracekit does not read" in seven
    assert "1 more range name looks like a step annotation tracekit does not read" in notes(6)
    assert not any("more range names" in n for n in notes(5))


# --- gemm_layers: the kernel before a GEMM tells layers of one width apart -------------------------


def test_the_kernel_before_a_gemm_tells_layers_of_one_width_apart():
    """catches: the neighbour rule reading the wrong kernel or none: after attention a GEMM of
    width 4096 is the output projection; after the activation, the down projection (K = the MLP
    width, 14336); after a norm or RoPE it reads the residual stream (K = hidden, 4096); kernels
    of no telling kind (an elementwise add) are skipped back to one that tells; with none, every
    candidate stays. Candidates of width N = 4096 of a Llama-3-8B-like layer: (name, class, K, N)."""
    import numpy as np

    from tracekit.analysis.pricing.gemm_layers import _by_neighbour

    q = ("q_proj", "attn", 4096, 4096)
    o = ("o_proj", "attn", 4096, 4096)
    down = ("down_proj", "mlp", 14336, 4096)
    cands = [q, o, down]
    by_start = np.arange(4)

    def after(*before: str):
        comp = np.array(list(before) + ["linear"], dtype=object)
        return _by_neighbour(cands, by_start, len(before), comp, 4096)

    assert after("attention") == [o]
    assert after("activation") == [down]
    assert after("norm") == [q, o] and after("rope") == [q, o]
    assert after("activation", "elementwise", "elementwise") == [down]  # skipped back to the activation
    assert after("elementwise", "elementwise") == cands


# --- figures: no MFU against a peak the device does not have --------------------------------------


def test_no_mfu_when_a_matrix_dtype_has_no_peak_on_the_device_and_it_says_so():
    """catches: the MFU computed (or left silent) when part of the phase's matrix work is of a
    dtype the device has no matrix peak for, nor a wider one to run at: a CPU measured for fp32
    matmuls only, and fp64 GEMMs beside fp32 ones. With the fp32 work alone the MFU is the FLOPs
    over the time over the peak: 2e9 / 2 ms = 1e12 FLOP/s of a 1e13 peak, 10%."""
    from tracekit.analysis import figures
    from tracekit.specs.measured import measured_spec

    spec = measured_spec("test CPU", {"fp32": 1e13}, 1e10)
    w = pd.DataFrame(
        {
            "flops": [1e9, 1e9],
            "bytes": [1e6, 1e6],
            "dur_ns": [1e6, 1e6],
            "unit": ["matrix"] * 2,
            "dtype": ["fp32", "fp64"],
            "cost_source": ["shapes"] * 2,
        }
    )
    assert figures._mfu(w, 2.0, spec) == (
        None,
        None,
        None,
        "no matrix fp64 rate for test CPU (measured on this machine)",
    )
    mfu, ach, basis, why = figures._mfu(w.assign(dtype="fp32"), 2.0, spec)
    assert mfu == pytest.approx(0.1) and ach == pytest.approx(0.1) and why is None
    assert basis.startswith("fp32 matrix peak of test CPU: 10.0 TFLOP/s")


# --- tables: a kernel's display name -----------------------------------------------------------------


def test_a_display_name_collapses_nested_template_arguments_and_parameters():
    """Found while writing this test: nested template arguments never collapsed past the innermost
    level (``<4, at::native::FillFunctor<>, at::detail::Array<> >`` stayed, as the pattern could
    not match brackets holding the ``<>`` of the level below), so PyTorch's elementwise kernels
    showed their arguments cut at 80 characters. Each level collapses now, however deep; a
    parameter list after a name goes, a parenthesis after a space (a copy's direction) stays; a
    name over the width is cut with an ellipsis, to exactly the width."""
    from tracekit.analysis.tables import short_name

    pytorch = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
    )
    assert short_name(pytorch) == "at::native::vectorized_elementwise_kernel<>()"
    assert short_name("a<b<c<d<e<f<g<h<i>>>>>>>>(x)") == "a<>()"
    assert (
        short_name("void (anonymous namespace)::softmax_warp_forward<float, 10>(float*, int)")
        == "softmax_warp_forward<>()"
    )
    assert short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"
    assert short_name("g<a>(b) const") == "g<>(b) const"
    long = "k" * 100
    assert short_name(long) == "k" * 79 + "…" and len(short_name(long, 30)) == 30


# --- segment: step ranges that launched nothing ---------------------------------------------------


def test_step_ranges_without_gpu_work_are_dropped_and_counted_in_the_right_number(tmp_path):
    """catches: the note on dropped ranges in the wrong number ("2 step range ... is"), or the
    ranges kept as steps. vLLM decode annotations on a hand-built trace, only the first of which
    launches a GEMM: with three ranges two are dropped, with two one is."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    def notes(k: int):
        doc = Doc()
        for i in range(k):
            t = 1000.0 * i + 10.0
            doc.annotation("execute_context_0(0)_generation_4(4)", t, 500.0)
            if i == 0:
                doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", t + 10.0, t + 20.0, 50.0)
        path = tmp_path / f"empty{k}.json"
        doc.write(path)
        a = analyze(read_trace(str(path)))
        assert len(a.steps) == 1
        return a.provenance["notes"]

    assert "2 step ranges launched no GPU work and are not counted as a step" in notes(3)
    assert "1 step range launched no GPU work and is not counted as a step" in notes(2)


# --- ranges: the last inferred pass runs to the thread's last instant, inclusive -------------------


def test_the_last_inferred_pass_ends_at_the_threads_last_instant_and_holds_work_issued_then(tmp_path):
    """catches: the last inferred pass ending 1 ns after the thread's last recorded instant (it
    did, ``hi + 1``: a step's CPU time 1 ns longer than anything the thread did), or before it, so
    that a kernel whose launch call takes no time (microsecond-resolution traces write ``dur: 0``
    for short calls) at that instant falls outside every step (step ranges hold their end,
    ``work.assign``). Two forward passes anchored by their token-embedding lookups (vocab
    32,000); the second pass's GEMM is launched by a zero-length call at 2,600 us, the last
    moment the thread records: both GEMMs are in steps, and the second pass ends at 2,600 us."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    doc = Doc()
    for t in (100.0, 1_100.0):
        doc.op("aten::embedding", t, 20.0, dims=[[32000, 4096], [8]], types=["c10::BFloat16", "long int"])
    doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 200.0, 210.0, 50.0)
    doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 2_600.0, 2_610.0, 50.0, launch_dur=0.0)
    path = doc.write(tmp_path / "passes.json")
    a = analyze(read_trace(str(path)))
    assert len(a.steps) == 2
    assert a.provenance["outside_steps"] == {"units": 0, "ms": 0.0}
    assert a.steps["kernels"].tolist() == [1, 1]
    assert int(a.steps["cpu_end_ns"].iloc[-1]) == 2_600_000


# --- ranges: malformed step annotations ---------------------------------------------------------------


def test_malformed_step_annotations_are_said_five_at_a_time_with_their_counts(tmp_path):
    """catches: the "N more malformed step annotations" note written when there are five or fewer
    problems (it would read "-3 more"), its count wrong, or a problem's range count left out or
    given for a single range. SGLang ``step[...]`` names of unknown modes (``FOO0``...), each
    around a GEMM: the first mode on three ranges, the others on one each."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    def notes(modes: int) -> list[str]:
        doc = Doc()
        names = ["step[FOO0 bs=1]"] * 3 + [f"step[FOO{i} bs=1]" for i in range(1, modes)]
        for i, name in enumerate(names):
            t = 1000.0 * i + 10.0
            doc.annotation(name, t, 500.0)
            doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", t + 10.0, t + 20.0, 50.0)
        path = doc.write(tmp_path / f"malformed{modes}.json")
        return analyze(read_trace(str(path))).provenance["notes"]

    two = notes(2)
    said = [n for n in two if n.startswith("SGLang step annotation")]
    assert said == [
        "SGLang step annotation 'step[FOO0 bs=1]' is not step[EXTEND|DECODE|MIXED ...] (3 ranges): "
        "that part is ignored",
        "SGLang step annotation 'step[FOO1 bs=1]' is not step[EXTEND|DECODE|MIXED ...]: that part is ignored",
    ]
    assert not any("more malformed" in n for n in two + notes(5))
    seven = notes(7)
    assert len([n for n in seven if n.startswith("SGLang step annotation")]) == 5
    assert "2 more malformed step annotations" in seven


# --- grid_shapes: a cluster of nothing ---------------------------------------------------------------


def test_a_gemm_name_stating_a_zero_cluster_reads_as_cluster_one():
    """Found by a seed-45 survivor (``cluster_n == 1`` read as ``<= 1``, which differs only for a
    cluster of 0): a kernel name stating a 0-block cluster (``..._1x0_...``: no library writes it,
    but trace contents are untrusted) divided by zero while rounding tiles to their cluster, so
    the analysis crashed. It reads as a cluster of 1: the same shape as the name saying ``1x1``.
    A tile 0 wide crashed the same way: no tile then."""
    from tracekit.analysis.pricing import grid_shapes

    one = "nvjet_sm90_tst_128x256_64x4_1x1_v_bz_coopA_NNT"
    for zero in ("nvjet_sm90_tst_128x256_64x4_1x0_v_bz_coopA_NNT", "nvjet_sm90_tst_128x256_64x4_0x1_v_bz_coopA_NNT"):
        t = grid_shapes.tile_of(zero)
        assert (t.cluster_n, t.cluster_m) == (1, 1)
        got = grid_shapes.derive(zero, (32, 1, 1), (384, 1, 1), m=8, n_candidates=(4096,))
        want = grid_shapes.derive(one, (32, 1, 1), (384, 1, 1), m=8, n_candidates=(4096,))
        assert (got.n_lo, got.n_hi, got.n_how, got.n_fits) == (want.n_lo, want.n_hi, want.n_how, want.n_fits)
    # A tile 0 wide divided by zero too: such a name states no tile, and no shape is read from it.
    for name in (
        "nvjet_sm90_tst_0x0_64x4_1x1_v_bz_coopA_NNT",
        "cutlass_80_tensorop_bf16_s16816gemm_bf16_0x64_32x3_nn",
        "Cijk_Ailk_Bljk_BBS_BH_MT0x64x16_MI16x16x1_SN_WG16_16_1",
    ):
        assert grid_shapes.tile_of(name) is None
        assert grid_shapes.derive(name, (32, 1, 1), (384, 1, 1), m=8, n_candidates=(4096,)) is None


# --- idle: a launching thread numbered 0 -------------------------------------------------------------


def test_idle_gaps_of_a_launching_thread_numbered_zero_are_attributed(tmp_path):
    """catches: thread id 0 taken for "no thread" (``tid != 0`` for ``tid >= 0``), so every gap
    of a trace whose host thread is numbered 0 (as some writers number it) would read as
    unattributed. One decode step on thread 0: a GEMM, 300 us of host work (an op) before the next
    launch, a second GEMM. The gap before the second GEMM is the host's, not unattributed."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    doc = Doc()
    doc.annotation("execute_context_0(0)_generation_4(4)", 10.0, 1000.0, tid=0)
    doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 20.0, 25.0, 20.0, tid=0)
    doc.op("aten::index_select", 50.0, 300.0, tid=0)
    doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 400.0, 405.0, 20.0, tid=0)
    a = analyze(read_trace(str(doc.write(tmp_path / "tid0.json"))))
    [causes] = a.steps["idle_by_cause"].tolist()
    # The gap from the first GEMM's end (45 us) to the second's start (405 us) is longer than a
    # launch pause; before the issue at 400 us the thread ran the op (50-350 us): 300 us of host.
    assert causes["host"] == pytest.approx(0.300, abs=1e-9)


# --- figures: MFU and MBU withheld only where most work was the withheld model's --------------------


def test_a_phase_keeps_its_mfu_unless_half_its_kernel_time_was_withheld_from_the_model():
    """catches: every phase losing its MFU and MBU once the model is withheld (``<`` read as
    ``is``), or the half-way rule moved. Phases of 10 ms of kernel time whose units the withheld
    model would have priced for 4, 5 and 6 ms: the first keeps its figures, the other two (half or
    more) get none, with the withheld reason."""
    from tracekit.analysis import figures

    why = "the trace does not fit the model"
    by_phase, phases = {}, {}
    for p, ms in (("prefill", 4.0), ("decode", 5.0), ("mixed", 6.0)):
        by_phase[p] = pd.DataFrame({"cost_reason": [why, None], "dur_ns": [ms * 1e6, (10.0 - ms) * 1e6]})
        phases[p] = {
            "kernel_ms": 10.0,
            "mfu": 0.3,
            "mfu_achievable": 0.4,
            "mfu_basis": "b",
            "mfu_reason": None,
            "mbu": 0.5,
            "mbu_achievable": 0.6,
            "mbu_basis": "b",
            "mbu_reason": None,
        }
    figures.withhold(phases, by_phase, why)
    assert (phases["prefill"]["mfu"], phases["prefill"]["mbu"]) == (0.3, 0.5)
    for p in ("decode", "mixed"):
        assert phases[p]["mfu"] is None and phases[p]["mbu_achievable"] is None and phases[p]["mfu_reason"] == why


# --- ranges: tracekit's markers are the whole truth where present ------------------------------------


def test_tracekits_markers_win_over_engine_annotations_in_the_same_trace(tmp_path):
    """catches: the markers and an engine's annotations sorted into each other's lists (``==``
    read as ``is not``), which changes nothing for a trace of one kind but makes the engine's
    ranges the steps of a trace holding both. A decode marker of batch 8 around a vLLM annotation
    stating 4 decode requests: one step, of batch 8, from the markers."""
    from kineto import Doc

    from tracekit import read_trace
    from tracekit.analysis import analyze

    doc = Doc()
    doc.annotation("tracekit::decode#0 bs=8 tokens=8 kv=800", 10.0, 900.0)
    doc.annotation("execute_context_0(0)_generation_4(4)", 20.0, 500.0)
    doc.kernel("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn", 30.0, 40.0, 50.0)
    a = analyze(read_trace(str(doc.write(tmp_path / "both.json"))))
    assert a.phase_source == "tracekit markers"
    assert len(a.steps) == 1 and a.steps["batch"].tolist() == [8]


def test_a_kernel_name_in_a_count_source_is_cut_to_64_characters():
    """catches: the cut of a long kernel name in a token or batch source's text moved by one (a
    name of 100 characters shows its first 61 and "...", 64 in all; 64 or fewer show whole)."""
    from tracekit.analysis.steps.step_tokens import _short

    assert _short("void " + "k" * 100 + "(int)") == "k" * 61 + "..."
    assert _short("k" * 64) == "k" * 64 and _short("k" * 65) == "k" * 61 + "..."
