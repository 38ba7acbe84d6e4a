"""One set of books (issue 23, item 4): a step's duration is its GPU busy time plus its GPU
idle time, lead-in and tail included; the idle causes sum to the idle; phases sum to the
run; a mixed step's split sums to the step. Checked on every shared and sample trace, on
traces grown to show the structures the shared ones lack, and on the checker itself."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_TRACES, all_real_traces, read_real

from tracekit import read_trace
from tracekit.analysis import analyze, books
from tracekit.whatif.fit import fit_costs


def _assert_books(d: dict) -> None:
    """The identities from the analysis's JSON, in ms, worked out here (not by books.check)."""
    run = 0.0
    for s in d["steps"]:
        assert s["duration_ms"] == pytest.approx(s["gpu_busy_ms"] + s["gpu_idle_ms"], abs=1e-6)
        assert s["gpu_idle_ms"] >= 0 and s["gpu_busy_ms"] >= 0
        if d["device"].get("type") == "gpu" and s["idle_by_cause"] is not None:
            assert sum(s["idle_by_cause"].values()) == pytest.approx(s["gpu_idle_ms"], abs=1e-6)
        if s.get("split"):
            parts = s["split"]["prefill"]["gpu_ms"] + s["split"]["decode"]["gpu_ms"]
            assert parts == pytest.approx(s["gpu_busy_ms"], rel=1e-9)
        run += s["duration_ms"]
    total = 0.0
    for p in d["phases"].values():
        assert p["time_ms"] == pytest.approx(p["gpu_busy_ms"] + p["gpu_idle_ms"], rel=1e-9, abs=1e-9)
        if p.get("idle_share") is not None:
            # The share's base is the phase's time: the causes' shares add up to it.
            assert p["idle_share"] == pytest.approx(p["gpu_idle_ms"] / p["time_ms"], rel=1e-9)
        for r in p.get("idle_top") or []:
            # No listed interval is larger than the idle total it is listed under.
            assert r["ms"] <= p["gpu_idle_ms"] * (1 + 1e-9)
        total += p["time_ms"]
    assert total == pytest.approx(run, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("key", all_real_traces())
def test_books_balance_on_every_shared_trace(key):
    """Fails if a step's idle leaves out its lead-in or tail (the old GPU-window idle), if the
    idle causes miss a gap, or if a phase's time is not its busy + idle."""
    _assert_books(analyze(read_real(key)).to_dict())


@pytest.mark.parametrize("name", ["tiny-bs1.pt.trace.json.gz", "tiny-bs8.pt.trace.json.gz"])
def test_books_balance_on_the_sample_traces(name):
    path = SAMPLE_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    _assert_books(analyze(read_trace(str(path))).to_dict())


def _earlier_start(trace, step: int, by_ns: int):
    """The trace with step ``step``'s CPU annotation starting ``by_ns`` earlier: the host
    spent that long in the step before its first launch (preparing inputs), recording nothing."""
    ann = trace.annotations.copy()
    cpu = np.flatnonzero((ann["side"] == "cpu").to_numpy())
    i = ann.index[cpu[step]]
    ann.loc[i, "start_ns"] -= by_ns
    ann.loc[i, "dur_ns"] += by_ns
    return dataclasses.replace(trace, annotations=ann)


def test_the_lead_in_before_the_first_kernel_is_idle_time():
    """Fails if the time between a step's CPU start and its first kernel is counted nowhere
    (vLLM gpt-oss on MI300X: "step 19.1 ms, busy 10.7 ms, idle 0.0255 ms")."""
    base = read_real("b300_qwen3_moe")
    before = analyze(base).to_dict()["steps"][0]
    lead = 8_400_000  # 8.4 ms, as in the issue
    after = analyze(_earlier_start(base, 0, lead)).to_dict()["steps"][0]
    assert after["duration_ms"] == pytest.approx(before["duration_ms"] + 8.4, abs=1e-6)
    assert after["gpu_busy_ms"] == pytest.approx(before["gpu_busy_ms"], abs=1e-6)
    assert after["gpu_idle_ms"] == pytest.approx(before["gpu_idle_ms"] + 8.4, abs=1e-6)
    # The added time is named by its causes: the host's recorded work or, where it recorded
    # nothing, unattributed; no kernel was issued then, so none of it is launch or wait.
    grew = {c: after["idle_by_cause"][c] - before["idle_by_cause"][c] for c in after["idle_by_cause"]}
    assert sum(grew.values()) == pytest.approx(8.4, abs=1e-6)
    assert grew["host"] + grew["unattributed"] == pytest.approx(8.4, abs=0.01)


def test_b300_decode_step_is_busy_plus_idle():
    """The SGLang B300 decode step: the issue saw "idle 33.8%" of the GPU window, causes summing
    to 26.2% of the step, and a 7.11 ms step that was neither busy + idle nor the window.
    Fails if any of those bases comes back."""
    d = analyze(read_real("b300_qwen3_moe")).to_dict()
    [s] = d["steps"]
    p = d["phases"]["decode"]
    assert p["time_ms"] == pytest.approx(s["duration_ms"])
    assert s["gpu_idle_ms"] == pytest.approx(s["duration_ms"] - s["gpu_busy_ms"])
    assert sum(p["idle_by_cause"].values()) / p["time_ms"] == pytest.approx(p["idle_share"])


MIXED = "execute_516_context_1(sq512sk2048sqsq262144sqsk1048576)_generation_4(sq4sk4004sqsq4sqsk4004)"


def _all_mixed(trace):
    """Every step of the GB10 decode trace annotated as a chunked-prefill step (512 prompt
    tokens of one request beside 4 decode tokens)."""
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    cpu = np.flatnonzero((ann["side"] == "cpu").to_numpy() & pd.Series(names).str.startswith("execute_").to_numpy())
    names[cpu] = MIXED
    ann["name"] = pd.Categorical(names)
    return dataclasses.replace(trace, annotations=ann)


def test_mixed_steps_keep_the_books_and_the_plan_uses_their_split():
    """Fails if a mixed step's idle interval is listed at its whole length under a phase total
    holding only that phase's part of it, or if `plan` refuses a trace of mixed steps
    ("no prefill step") instead of planning from their split."""
    a = analyze(_all_mixed(read_real("gb10_vllm")))
    d = a.to_dict()
    assert {s["phase"] for s in d["steps"]} == {"mixed"}
    _assert_books(d)
    costs = fit_costs([a], None)
    assert costs.basis["prefill_steps"] == 10 and costs.basis["decode_steps"] == 10
    assert any("mixed steps counted by their split" in n for n in costs.notes)
    # The fitted prefill time per token is the prefill parts' busy time over their tokens.
    busy = sum(s["split"]["prefill"]["gpu_ms"] for s in d["steps"]) / 1e3
    over = np.mean([s["duration_ms"] - s["gpu_busy_ms"] for s in d["steps"]]) / 1e3
    frac = np.mean([s["split"]["prefill"]["gpu_ms"] / s["gpu_busy_ms"] for s in d["steps"]])
    assert costs.prefill_s(512) == pytest.approx(over * frac + busy / (512 * 10) * 512, rel=0.05)


def _steps_table(duration, busy, idle):
    return pd.DataFrame(
        {
            "step": range(len(duration)),
            "duration_ns": duration,
            "gpu_busy_ns": busy,
            "gpu_idle_ns": idle,
            "phase": ["decode"] * len(duration),
        }
    )


def test_the_checker_names_each_broken_identity():
    """Fails if books.check passes books that do not balance (so a regression in segmentation
    or idle causes would go unseen), or flags books that do."""
    steps = _steps_table([10, 10], [6, 6], [4, 3])  # step 1: 6 + 3 != 10
    causes = np.array([[4, 0, 0, 0, 0], [2, 0, 0, 0, 0]])
    w = {"decode": np.ones(2)}
    phases = {"decode": {"time_ms": 20e-6, "gpu_busy_ms": 12e-6, "gpu_idle_ms": 7e-6}}
    out = books.check(steps, causes, w, phases, {}, "gpu")
    assert any("not GPU busy + GPU idle in step 1" in v for v in out)
    assert any("idle causes do not sum" in v and "step 1" in v for v in out)
    assert any("phase decode" in v for v in out)
    good = books.check(
        _steps_table([10], [6], [4]),
        np.array([[4, 0, 0, 0, 0]]),
        {"decode": np.ones(1)},
        {"decode": {"time_ms": 10e-6, "gpu_busy_ms": 6e-6, "gpu_idle_ms": 4e-6}},
        {},
        "gpu",
    )
    assert good == []
    # Weights of a split step that do not sum to 1: its parts would not sum to the step.
    half = books.check(
        _steps_table([10], [6], [4]), None, {"prefill": np.array([0.5]), "decode": np.array([0.4])}, {}, {}, "gpu"
    )
    assert any("weights do not sum to 1" in v for v in half)


def test_a_violation_raises_under_strict_and_is_a_note_otherwise(monkeypatch):
    """Fails if a broken identity passes silently in a user's run, or does not fail the suite."""
    monkeypatch.setenv(books.STRICT_ENV, "1")
    with pytest.raises(books.BooksError, match="do not balance"):
        books.enforce(["duration is not GPU busy + GPU idle in step 3"])
    monkeypatch.delenv(books.STRICT_ENV)
    [note] = books.enforce(["duration is not GPU busy + GPU idle in step 3"])
    assert "tracekit bug" in note and "step 3" in note


def test_causes_sum_to_the_nanosecond_with_an_epoch_scale_duration():
    """Found by the 10k-case fuzz run: a step range whose duration is epoch-scale (a writer's
    bogus value) gives the step an idle tail of ~1.5e18 ns; summing the causes in float64
    (bincount) dropped nanoseconds past 2^53, so the causes no longer summed to the idle time
    and the books check raised. Fails if the per-step causes are summed in floating point again."""
    base = read_real("b300_qwen3_moe")
    huge = 1_497_760_187_527_496_367  # not a multiple of float64's 256 ns spacing there
    ann = base.annotations.copy()
    cpu = np.flatnonzero((ann["side"] == "cpu").to_numpy())
    i = ann.index[cpu[0]]
    ann.loc[i, "dur_ns"] = huge
    ann.loc[i, "end_ns"] = ann.loc[i, "start_ns"] + huge
    d = analyze(dataclasses.replace(base, annotations=ann)).to_dict()  # strict books: raises on a mismatch
    s = max(d["steps"], key=lambda x: x["duration_ms"])
    assert s["duration_ms"] > 1e12
    assert sum(s["idle_by_cause"].values()) == pytest.approx(s["gpu_idle_ms"], rel=1e-12)


def test_a_split_step_whose_parts_miss_its_busy_time_is_named_with_both_figures():
    """Fails if a split mixed step's parts that do not add up to its busy time pass, or the
    sentence misstates the busy time (ns to ms: 6,000,000 ns of busy time is 6 ms; a mutant that
    put it as ``busy & 1e6`` or ``busy - 1e6`` would print another figure). Parts of 4 + 1 ms."""
    steps = _steps_table([10_000_000], [6_000_000], [4_000_000])
    phases = {"mixed": {"time_ms": 10.0, "gpu_busy_ms": 6.0, "gpu_idle_ms": 4.0}}
    split = {0: {"prefill": {"gpu_ms": 4.0}, "decode": {"gpu_ms": 1.0}}}
    out = books.check(steps, None, {"mixed": np.ones(1)}, phases, split, "gpu")
    assert out == ["mixed step 0: its parts 5 ms are not its busy time 6 ms"], out
    split[0]["decode"]["gpu_ms"] = 2.0
    assert books.check(steps, None, {"mixed": np.ones(1)}, phases, split, "gpu") == []


def test_work_outside_every_step_is_in_no_phase():
    """Fails if units of work issued outside every step join the ``unknown`` phase (they did:
    the A100 particle-transformer trace's 11 inferred steps, all of unknown phase, read 6.488 ms
    of kernel time, the 0.178 ms of the 20 kernels launched before its first step and after its
    last included). Expected from the raw events: the device events whose launch call (same
    ``args.correlation``) starts inside the steps' CPU span, which is unbroken there."""
    import gzip
    import json

    from conftest import real_trace_path

    a = analyze(read_real("a100_particle"))
    with gzip.open(real_trace_path("a100_particle"), "rt") as f:
        raw = json.load(f)
    events = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    base = int(raw.get("baseTimeNanoseconds", 0))  # Kineto's ts are microseconds after it
    launch = {
        e["args"]["correlation"]: e["ts"] * 1e3
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})
    }
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    start = a.steps["cpu_start_ns"].to_numpy() - base
    end = a.steps["cpu_end_ns"].to_numpy() - base
    assert (start[1:] - end[:-1] <= 1).all()  # one unbroken span: inside it is inside a step
    at = np.array([launch[e["args"]["correlation"]] for e in device])
    dur_ms = np.array([e["dur"] for e in device]) / 1e3
    inside = (at >= start[0]) & (at <= end[-1])
    assert 0 < (~inside).sum() < len(device)
    assert set(a.phases) == {"unknown"}
    assert a.phases["unknown"]["kernel_ms"] == pytest.approx(dur_ms[inside].sum(), abs=1e-6)
    assert a.provenance["outside_steps"]["ms"] == pytest.approx(dur_ms[~inside].sum(), abs=1e-6)
    assert a.overall["kernel_ms"] == pytest.approx(dur_ms.sum(), abs=1e-6)


def test_the_figure_checker_names_each_broken_identity():
    """Fails if ``books.check_figures`` lets a phase figure that does not add up pass: each
    identity is broken in turn, on a copy of a real analysis whose books balance (the RTX 3090
    vLLM trace: a prefill, a split mixed step and decode steps), by moving 1 ms (or a share of
    0.1) where the identity says it cannot go."""
    import copy

    a = analyze(read_real("rtx3090_vllm"))
    outside = a.provenance["outside_steps"]["ms"]

    def broken(edit) -> list[str]:
        phases, steps, overall = copy.deepcopy(a.phases), a.steps.copy(), copy.deepcopy(a.overall)
        edit(phases["decode"], steps, overall)
        return books.check_figures(phases, steps, overall, outside, "gpu")

    assert broken(lambda v, s, o: None) == []
    cases = {
        "by bound": lambda v, s, o: v["by_bound"].__setitem__("memory", v["by_bound"]["memory"] + 1),
        "by limiter": lambda v, s, o: v["by_limiter"].__setitem__("latency", v["by_limiter"]["latency"] + 1),
        "by category": lambda v, s, o: v["by_category"].__setitem__("gemm", v["by_category"]["gemm"] + 1),
        "by cost source": lambda v, s, o: v["cost_source_ms"].__setitem__("none", v["cost_source_ms"]["none"] + 1),
        "'s time by bound": lambda v, s, o: v["by_category_bound"]["gemm"].__setitem__(
            "unknown", v["by_category_bound"]["gemm"]["unknown"] + 1
        ),
        "by_bound_share": lambda v, s, o: v["by_bound_share"].__setitem__("idle", v["by_bound_share"]["idle"] + 0.1),
        "by_category_share": lambda v, s, o: v["by_category_share"].__setitem__(
            "gemm", v["by_category_share"]["gemm"] + 0.1
        ),
        "gpu_time_ms": lambda v, s, o: v.__setitem__("gpu_time_ms", v["gpu_time_ms"] + 1),
        "idle causes": lambda v, s, o: v["idle_by_cause"].__setitem__("host", v["idle_by_cause"]["host"] + 1),
        "largest idle groups": lambda v, s, o: v["idle_top"][0].__setitem__("ms", v["gpu_idle_ms"] + 1),
        "steps' unknown-bound": lambda v, s, o: s.__setitem__("unknown_ms", s["unknown_ms"] + 1 / len(s)),
        "steps' flops": lambda v, s, o: s.__setitem__("flops", s["flops"].fillna(0) + 1e9),
        "steps' bytes": lambda v, s, o: s.__setitem__("bytes", s["bytes"].fillna(0) + 1e9),
        "trace's kernel time by category": lambda v, s, o: o["by_category"].__setitem__(
            "gemm", o["by_category"]["gemm"] + 1
        ),
        "plus the": lambda v, s, o: o.__setitem__("kernel_ms", o["kernel_ms"] + 1),
    }
    for words, edit in cases.items():
        out = broken(edit)
        assert any(words in v for v in out), (words, out)


def test_a_step_mbu_above_the_peak_bandwidth_is_withheld():
    """Fails if a step's MBU above its device's bandwidth is shown (it was: the H100 Hugging Face
    step priced against a T4's 320 GB/s read an MBU of 4.13). The step's bytes over its duration,
    from the H100 analysis, need 1.32 TB/s: 413% of the T4's peak. The phase's MBU says so with
    the percentage; the step's is withheld (null) rather than shown, and the books still hold."""
    trace = read_real("h100_hf")
    h100 = analyze(trace)
    [step] = h100.steps.to_dict("records")
    rate = step["bytes"] / (step["duration_ns"] / 1e9)
    assert rate / 320e9 == pytest.approx(4.13, abs=0.01)
    t4 = analyze(trace, gpu="t4")
    assert t4.device["peak_bandwidth"] == 320e9
    assert np.isnan(t4.steps["mbu"].iloc[0])
    assert t4.phases["prefill"]["mbu"] is None
    assert t4.phases["prefill"]["mbu_reason"].startswith(
        f"the bytes counted would move at {rate / 320e9:.0%} of the peak"
    )
    assert t4.to_dict()["steps"][0]["mbu"] is None


def test_the_roof_checker_names_every_figure_shown_above_its_roof():
    """Fails if ``books.check_roofs`` lets an MFU, an MBU, a step's MBU, a top kernel's or a
    roofline point's fraction above its roof (by more than the 2% timing tolerance) pass, or
    flags one at exactly 102%. On a copy of the H100 Hugging Face analysis, whose figures hold."""
    import copy

    a = analyze(read_real("h100_hf"))

    def broken(edit) -> list[str]:
        phases, steps, top, roof = (
            copy.deepcopy(a.phases),
            a.steps.copy(),
            copy.deepcopy(a.top_kernels),
            copy.deepcopy(a.roofline),
        )
        edit(phases["prefill"], steps, top["prefill"], roof["prefill"]["points"])
        return books.check_roofs(phases, steps, top, roof)

    assert broken(lambda *_: None) == []
    assert broken(lambda p, s, t, r: p.__setitem__("mfu", 1.02)) == []
    cases = {
        "its MFU": lambda p, s, t, r: p.__setitem__("mfu", 1.03),
        "its MBU": lambda p, s, t, r: p.__setitem__("mbu", 1.5),
        "a step's MBU": lambda p, s, t, r: s.__setitem__("mbu", 1.5),
        "a top kernel's roof fraction": lambda p, s, t, r: t[0].__setitem__("roof_fraction", 1.5),
        "a roofline point's fraction": lambda p, s, t, r: r[0].__setitem__("roof_fraction", 1.5),
    }
    for words, edit in cases.items():
        out = broken(edit)
        assert len(out) == 1 and words in out[0], (words, out)
