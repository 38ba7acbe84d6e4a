"""Why the GPU waits (idle causes), what limits a kernel (limiter), and advice with time at stake."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import read_real, unheld

from tracekit.analysis.analyze import analyze
from tracekit.analysis.findings import advice as adv
from tracekit.analysis.pricing.roofline import LATENCY_ROOF
from tracekit.analysis.steps.work import NO_TIME
from tracekit.analysis.waiting import host, idle


def _ids(a) -> dict:
    return {f.id: f for f in a.findings}


def _launch_bound(trace):
    """The trace with every kernel moved to start just after its launch and end before the next
    launch: the GPU drains each kernel before the host issues the next (a launch-bound run)."""
    k = trace.kernels
    k = k[k["launch"].to_numpy() >= 0].reset_index(drop=True)
    issue = trace.runtime["start_ns"].to_numpy()[k["launch"].to_numpy()]
    o = np.argsort(issue, kind="stable")
    start, dur = k["start_ns"].to_numpy().copy(), k["dur_ns"].to_numpy().copy()
    nxt = np.append(issue[o][1:], issue[o][-1] + 10**9)
    start[o] = issue[o] + 5_000
    dur[o] = np.clip(np.minimum(dur[o], nxt - start[o] - 1_000), 1_000, None)
    k = k.assign(start_ns=start, dur_ns=dur, end_ns=start + dur)
    return dataclasses.replace(trace, kernels=k)


def _as_decode(trace):
    """The trace with its one step annotated as a tracekit decode step (as a user's loop would),
    from its first kernel launch: the profiler step's first 14 ms are the host blocked before
    any launch, which the step's books would count as sync idle, not the launch-bound loop."""
    step = trace.annotations.iloc[[0]].copy()
    step["name"] = "tracekit::decode#0 bs=16"
    launches = trace.kernels["launch"].to_numpy()
    first = int(trace.runtime["start_ns"].to_numpy()[launches[launches >= 0]].min())
    step["start_ns"] = first - 1_000
    step["dur_ns"] = step["end_ns"] - step["start_ns"]
    return dataclasses.replace(trace, annotations=pd.concat([trace.annotations, step], ignore_index=True))


def _graphs(trace):
    return dataclasses.replace(trace, kernels=trace.kernels.assign(graph=True))


# --- idle causes ---------------------------------------------------------------------


def test_split_of_one_gap_by_what_the_host_did():
    # Five gaps of one thread, each showing one cause. Times in ns.
    cov = host.Coverage(
        {
            "sync": (np.array([1_000]), np.array([9_000])),
            "launch": (np.array([1_000, 20_000]), np.array([9_000, 21_000])),
            "busy": (np.array([1_000, 20_000, 300_000]), np.array([9_000, 21_000, 600_000])),
        }
    )
    g = pd.DataFrame(
        {
            "start_ns": [0, 19_000, 300_000, 700_000, 1_000_000],
            "end_ns": [10_000, 60_000, 560_000, 960_000, 1_500_000],
            # issued: at the end (blocked), mid-gap (short pause), late (long host work),
            # late (nothing recorded), long before the gap (waiting).
            "issue_ns": [9_500, 50_000, 550_000, 950_000, 100],
            "op_start_ns": [NO_TIME] * 5,  # no launching op in the trace
            "op_end_ns": [NO_TIME] * 5,
        }
    )
    parts = idle._split(g, cov)
    c = {name: parts[:, i] for i, name in enumerate(idle.CAUSES)}
    assert c["sync"][0] == 8_000 and c["launch"][0] == 2_000
    assert c["launch"][1] == 41_000  # a short pause between launches, plus the start latency
    assert c["host"][2] == 250_000 and c["launch"][2] == 10_000
    assert c["unattributed"][3] == 250_000
    assert c["wait"][4] == 500_000 and c["launch"][4] == 0
    assert (parts.sum(axis=1) == g["end_ns"] - g["start_ns"]).all()


def test_inside_the_launching_op_is_launch_cost():
    cov = host.Coverage(
        {
            "sync": (np.zeros(0), np.zeros(0)),
            "launch": (np.zeros(0), np.zeros(0)),
            "busy": (np.array([0]), np.array([1_000_000])),
        }
    )
    g = pd.DataFrame(
        {"start_ns": [0], "end_ns": [500_000], "issue_ns": [495_000], "op_start_ns": [300_000], "op_end_ns": [496_000]}
    )
    c = dict(zip(idle.CAUSES, idle._split(g, cov)[0]))
    # 300 us of other host work, then 195 us inside the op that launched the kernel.
    assert c["host"] == 300_000 and c["launch"] == 195_000 + 5_000


@pytest.mark.parametrize(
    "key, phase, frame",
    [("mi300x_decode", "decode", "cuda_graph_runner.py"), ("mi300x_extend", "prefill", "forward_batch_info.py")],
)
def test_blocking_host_copy_is_the_idle_cause(key, phase, frame):
    """A copy that blocks the host while the GPU idles is the sync cause, named by call, op and
    frames. (The shared traces' copies waited on a previous batch the profile did not record,
    which is no idle at all (test_held); ``unheld`` hides that, leaving a one-off blocking copy.)"""
    a = analyze(unheld(read_real(key)))
    p = a.phases[phase]
    assert sum(p["idle_by_cause"].values()) == pytest.approx(p["gpu_idle_ms"], rel=1e-6)
    top = p["idle_top"][0]
    assert top["cause"] == "sync" and top["call"] == "hipMemcpyWithStream" and top["op"] == "aten::copy_"
    assert any(frame in s for s in top["stack"])
    assert top["ms"] > 450 and top["share"] > 0.45
    f = _ids(a)["host-sync"]
    assert "hipMemcpyWithStream" in f.text and "aten::copy_" in f.text and f"{top['share']:.0%}" in f.text
    assert f.sum_ms == pytest.approx(top["share"] * p["time_ms"])
    assert "launch-bound" not in _ids(a)
    d = a.to_dict()
    assert d["phases"][phase]["idle_top"][0]["call"] == "hipMemcpyWithStream"
    assert d["steps"][0]["idle_by_cause"]["sync"] > 450
    # The launch overhead figure counts only launches, not the blocking copy.
    if phase == "decode":
        assert a.metrics["launch_overhead_ms_per_decode_step"] < 5


def test_launches_after_the_gpu_drained_are_launch_bound():
    a = analyze(_launch_bound(read_real("h100_hf")))
    p = a.phases["prefill"]
    causes = p["idle_by_cause"]
    assert max(causes, key=causes.get) == "launch"
    assert causes["launch"] > 0.3 * p["time_ms"]
    f = _ids(a)["launch-bound"]
    assert f.action and f.sum_ms == pytest.approx(causes["launch"])


def test_gb10_gpu_behind_the_host_blames_no_launches():
    a = analyze(read_real("gb10_vllm"))
    p = a.phases["decode"]
    causes = p["idle_by_cause"]
    assert sum(causes.values()) < 0.03 * p["time_ms"]
    assert causes["launch"] < 0.005 * p["time_ms"]
    assert max(causes, key=causes.get) != "launch"
    assert not {"launch-bound", "host-sync", "host-bound"} & set(_ids(a))


# --- limiter -------------------------------------------------------------------------


def test_h100_prefill_limiters():
    a = analyze(read_real("h100_hf"))
    rows = a.top_kernels["prefill"]
    gemm = [r for r in rows if r["category"] == "gemm"]
    assert gemm and all(r["limiter"] == "compute" for r in gemm)
    fa = [r for r in rows if "flash_fwd" in r["name"]]
    # 113 us on 1,280 blocks (132 SMs): neither a small grid nor a kernel's fixed latency explains
    # its 19% of the roof, so it is below its roof, not latency-limited (issue 44, item 7).
    assert fa and fa[0]["bound"] == "memory" and fa[0]["limiter"] == "below_roof"
    assert fa[0]["roof_fraction"] < LATENCY_ROOF
    near_roof = [r for r in rows if r["category"] == "elementwise" and 0.88 <= (r["roof_fraction"] or 0) <= 0.92]
    assert near_roof and all(r["limiter"] == "memory" for r in near_roof)
    p = a.phases["prefill"]
    lim = p["by_limiter"]
    assert sum(v for k, v in lim.items() if k != "idle") == pytest.approx(p["kernel_ms"])
    assert lim["latency"] > 0 and lim["compute"] == pytest.approx(p["by_bound"]["compute"], rel=0.05)
    points = a.roofline["prefill"]["points"]
    assert {q["limiter"] for q in points} >= {"compute", "memory", "latency"}


def test_capped_experts_keep_their_memory_limiter():
    a = analyze(read_real("b300_qwen3_moe"), model="qwen3-30b-a3b")
    w = a.work
    capped = w[w["model_check"] == "capped"]
    assert len(capped) and (capped["limiter"] == "memory").all()


# --- advice --------------------------------------------------------------------------


def test_fusion_advice_for_eager_elementwise_chains():
    a = analyze(read_real("h100_hf"))
    f = _ids(a)["fuse-elementwise"]
    p = a.phases["prefill"]
    fusible = sum(p["by_category"].get(c, 0.0) for c in adv.FUSIBLE)
    assert f.action and 0 < f.at_stake_ms < fusible
    assert f"{fusible / p['kernel_ms']:.0%}" in f.text


def test_no_fusion_advice_for_compiled_runs():
    trace = read_real("h100_hf")
    side = dataclasses.replace(trace, sidecar={"workload": {"compile": True}})
    assert "fuse-elementwise" not in _ids(analyze(side))
    k = trace.kernels
    names = k["name"].astype(str).to_numpy().copy()
    names[::100] = "triton_poi_fused_add_mul_0"  # a few Inductor kernels among the eager ones
    inductor = dataclasses.replace(trace, kernels=k.assign(name=names))
    assert "fuse-elementwise" not in _ids(analyze(inductor))


def test_cuda_graph_advice_only_when_decode_does_not_replay_one():
    eager = analyze(_as_decode(_launch_bound(read_real("h100_hf"))))
    f = _ids(eager)["launch-bound"]
    assert f.phase == "decode" and "CUDA graph" in f.action and f.at_stake_ms > 0
    replayed = analyze(_graphs(_as_decode(_launch_bound(read_real("h100_hf")))))
    g = _ids(replayed)["launch-bound"]
    assert "replay a graph" in g.text and g.action is None and g.at_stake_ms is None


def test_sync_advice_only_with_blocking_calls():
    """The shared MI300X decode step's copy waited on unrecorded work, not the host: no sync advice
    for it (issue 45); the same copy blocking the host (``unheld``) gets it."""
    assert "host-sync" not in _ids(analyze(read_real("mi300x_decode")))
    assert _ids(analyze(unheld(read_real("mi300x_decode"))))["host-sync"].action
    assert "host-sync" not in _ids(analyze(read_real("b300_qwen3_moe")))


def test_decode_weight_advice():
    a = analyze(read_real("b300_qwen3_moe"), model="qwen3-30b-a3b")
    ids = _ids(a)
    batch, fp8 = ids["decode-batch"], ids["fp8-weights"]
    dec = a.work[
        (a.work["phase"] == "decode")
        & a.work["category"].isin(["gemm", "moe"])
        & (a.work["bound"] == "memory")
        & (a.work["unit"] == "matrix")
        & a.work["flops"].notna()
    ]
    mem_ms = dec["dur_ns"].sum() / 1e6
    assert 0 < batch.at_stake_ms < mem_ms and "16 tokens per step" in batch.text
    assert fp8.sum_ms == pytest.approx(dec.loc[dec["dtype"] == "bf16", "dur_ns"].sum() / 2e6)
    # Ordered by time at stake.
    stakes = [f.at_stake_ms for f in a.findings if f.at_stake_ms is not None]
    assert stakes == sorted(stakes, reverse=True)


def test_no_decode_weight_advice_without_evidence():
    # Without a model the replayed GEMMs have no cost: nothing says they are memory-bound.
    ids = _ids(analyze(read_real("mi300x_qwen3_moe")))
    assert "decode-batch" not in ids and "fp8-weights" not in ids
    # Weights already FP4: no FP8 advice.
    assert "fp8-weights" not in _ids(analyze(read_real("gb10_vllm"), model="qwen3.5-27b", weights="nvfp4"))
    # A GPU without FP8: no FP8 advice, the batch advice stays.
    a100 = _ids(analyze(read_real("b300_qwen3_moe"), model="qwen3-30b-a3b", gpu="a100-sxm4-80gb"))
    assert "fp8-weights" not in a100 and "decode-batch" in a100


def test_advice_in_json():
    d = analyze(unheld(read_real("mi300x_decode"))).to_dict()
    f = next(f for f in d["findings"] if f["id"] == "host-sync")
    assert f["action"] and f["sum_ms"] > 400
    assert all("action" in f and "at_stake_ms" in f for f in d["findings"])


# --- in the reports ------------------------------------------------------------------


@pytest.mark.parametrize("key, phase", [("mi300x_decode", "decode"), ("mi300x_extend", "prefill")])
def test_reports_name_the_blocking_copy(key, phase):
    from tracekit import formatting as fmt
    from tracekit.report import render

    a = analyze(unheld(read_real(key)))
    html, md, text = render(a, "html"), render(a, "md"), render(a, "text")
    top = a.phases[phase]["idle_top"][0]
    f = _ids(a)["host-sync"]
    assert 'class="idle-top"' in html and "<code>hipMemcpyWithStream</code>" in html
    assert f"At stake: {fmt.ms(f.at_stake_ms)}" in html and 'data-cause="sync"' in html
    assert f"GPU idle, {phase}: sync {fmt.ms(a.phases[phase]['idle_by_cause']['sync'])}" in md and "**Try:**" in md
    assert "GPU idle by cause" in text and "largest: sync, hipMemcpyWithStream in aten::copy_" in text
    assert "try: make the copy" in text and top["call"] in md


def test_reports_show_limiters():
    from tracekit.report import render

    a = analyze(read_real("h100_hf"))
    html, md = render(a, "html"), render(a, "md")
    fa = next(r for r in a.top_kernels["prefill"] if "flash_fwd" in r["name"])
    assert fa["limiter"] == "below_roof"  # a long kernel on a full grid (test_h100_prefill_limiters)
    assert '<td class="limiter">below roof</td>' in html and '<td class="limiter">compute</td>' in html
    assert "of which latency-limited" in html and "| Limiter |" in md


def test_timelines_are_bounded_and_complete():
    from tracekit.analysis.steps import timeline

    a = analyze(read_real("gb10_vllm"))
    tls = a.to_dict()["timelines"]
    steps = a.steps.set_index("step")
    durations = steps["duration_ns"]
    assert [t["why"] for t in tls] == ["slowest step", "typical step (median duration)"]
    assert tls[0]["step"] == int(durations.idxmax())
    for t in tls:
        kernels = [lane for lane in t["lanes"] if lane["kind"] == "stream"]
        # Every kernel of the step is drawn, alone or in a merged segment with its count.
        assert sum(seg[4] for lane in kernels for seg in lane["segments"]) == steps.at[t["step"], "kernels"]
        assert all(len(lane["segments"]) <= timeline.MAX_SEGMENTS for lane in t["lanes"])
        idle_lane = next(lane for lane in t["lanes"] if lane["kind"] == "idle")
        drawn = sum(seg[1] - seg[0] for seg in idle_lane["segments"])
        assert drawn == pytest.approx(steps.at[t["step"], "gpu_idle_ns"] / 1e6, rel=0.01)
        assert {t["keys"][seg[2]] for seg in idle_lane["segments"]} <= set(idle.CAUSES)


def test_cpu_traces_have_no_timeline():
    from conftest import SAMPLE_TRACES

    from tracekit import read_trace

    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    a = analyze(read_trace(str(path)))
    assert a.timelines == [] and a.phases["decode"]["idle_by_cause"]["launch"] == 0


def test_unprofiled_latency_in_the_headline():
    from click.testing import CliRunner
    from conftest import SAMPLE_TRACES

    from tracekit import read_trace
    from tracekit.cli import main
    from tracekit.report import render
    from tracekit.report.headline_view import headline

    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    a = analyze(read_trace(str(path)))
    d = a.to_dict()
    unprof = d["metrics"]["unprofiled"]
    figures = {f["key"]: f for f in headline(d)}
    assert figures["ttft_unprofiled_ms"]["raw"] == unprof["ttft_ms"]
    assert figures["tpot_p50_unprofiled"]["raw"] == unprof["tpot_p50_ms"]
    # The card quotes its own figure's ratio; the whole recorded run's stays in the detail.
    assert f"{unprof['ttft_profiler_ratio']:.2f}" in figures["ttft_unprofiled_ms"]["note"]
    assert f"{unprof['profiler_overhead_ratio']:.2f}×" in figures["ttft_unprofiled_ms"]["detail"]
    for fmt_ in ("html", "md", "text"):
        assert "TTFT, no profiler" in render(a, fmt_) and "TPOT p50, no profiler" in render(a, fmt_)
    out = CliRunner().invoke(main, ["summary", str(path)]).stdout
    assert "TTFT, no profiler" in out


def test_host_work_advice_only_when_host_work_is_the_cause():
    a = analyze(read_real("rtx4080_nanovllm"))
    f = _ids(a)["host-bound"]
    causes = a.phases["decode"]["idle_by_cause"]
    assert max(causes, key=causes.get) == "host" and f.sum_ms == pytest.approx(causes["host"])
    assert f.action and "largest:" in f.text
    # A step whose idle is one blocking copy gets the sync advice, not host work's.
    assert "host-bound" not in _ids(analyze(read_real("mi300x_decode")))


@pytest.mark.parametrize("key", ["gb10_vllm", "h100_hf", "mi300x_extend"])
def test_coverage_within_the_gaps_span_splits_gaps_as_the_whole_threads_does(key):
    from tracekit.analysis.steps.segment import segment

    t = read_real(key)
    seg = segment(t)
    gaps = idle._gaps(seg.steps, seg.work, t.cpu_ops)
    checked = 0
    for tid in np.unique(gaps["tid"].to_numpy()):
        if tid < 0:
            continue
        g = gaps[gaps["tid"].to_numpy() == tid]
        span = (int(g["start_ns"].min()), int(g["end_ns"].max()))
        whole = idle._split(g, host.Coverage.of_thread(t, int(tid)))
        np.testing.assert_array_equal(idle._split(g, host.Coverage.of_thread(t, int(tid), span)), whole)
        checked += int((whole > 0).sum())
    assert checked > 0


@pytest.mark.parametrize("key", ["gb10_vllm", "mi300x_extend"])
def test_gaps_split_in_blocks_as_in_one(key, monkeypatch):
    """idle_causes splits a thread's gaps a block at a time (bounded temporaries on a serving
    trace): blocks of a few gaps give every gap and every step the same parts as one block."""
    from tracekit.analysis.steps.segment import segment

    t = read_real(key)
    seg = segment(t)
    whole = idle.idle_causes(t, seg)
    assert len(whole.gaps) > 7
    monkeypatch.setattr(idle, "_BLOCK", 7)
    blocks = idle.idle_causes(t, seg)
    pd.testing.assert_frame_equal(blocks.gaps, whole.gaps)
    np.testing.assert_array_equal(blocks.by_step, whole.by_step)
    assert whole.by_step.sum() > 0


def test_union_of_sorted_intervals_skips_the_sort_and_agrees():
    rng = np.random.default_rng(5)
    s = np.sort(rng.integers(0, 10_000, 500))
    e = s + rng.integers(0, 300, 500)
    o = rng.permutation(500)
    for got in (host.union_intervals(s, e), host.union_intervals(s[o], e[o])):
        # Merged: sorted, disjoint, and covering exactly the points some interval covers.
        us, ue = got
        assert (us[1:] > ue[:-1]).all()
        covered = np.zeros(10_400, bool)
        for a, b in zip(s, e):
            covered[a:b] = True
        mine = np.zeros(10_400, bool)
        for a, b in zip(us, ue):
            mine[a:b] = True
        np.testing.assert_array_equal(mine, covered)


# --- idle_top: every interval of a group counted, not just the largest ---------------------------


def test_a_group_of_idle_intervals_counts_every_one_of_them(tmp_path):
    """catches: idle_top grouping only the largest (gap, cause) cells (it described the 100
    largest): here 150 launch gaps of one kind would read 98 of them, 1.96 ms, beside the two
    large unattributed ones. Hand-built: one decode step of 6 ms; 150 kernels of 10 us, each
    launched 30 us after the last under its aten::mm op (op at launch - 1 us, kernel 5 us after
    the launch), so the GPU idles 20 us between kernels, all of it launch (a 28 us host pause
    under LAUNCH_GAP_NS, then 5 us under LAUNCH_LATENCY_NS)."""
    from kineto import Doc

    from tracekit import read_trace

    d = Doc()
    d.annotation("tracekit::decode bs=1 tokens=1 kv=10", 0.0, 6000.0)
    for i in range(150):
        ts = 100.0 + 30.0 * i
        d.kernel("ampere_sgemm_64x64_nn", ts, ts + 5.0, 10.0, ext=d.op("aten::mm", ts - 1.0, 4.0))
    top = analyze(read_trace(d.write(tmp_path / "t.json"))).to_dict()["phases"]["decode"]["idle_top"]
    rows = {(r["cause"], r["call"], r["op"], tuple(r["stack"])): r for r in top}
    launch = rows[("launch", "cudaLaunchKernel", "aten::mm", ("aten::mm",))]
    # 149 gaps of 20 us between kernels, and the lead-in's 6 us from the first op (99 us) to the
    # first kernel (105 us), when the host was issuing it.
    assert launch["count"] == 150
    assert launch["ms"] == pytest.approx(149 * 0.020 + 0.006, abs=1e-9)
    # The rest is unattributed: the lead-in before the first op (0-99 us) and the tail after the
    # last kernel (4,585 us) to the step's end (6,000 us).
    assert (rows[("unattributed", None, None, ())]["count"], rows[("unattributed", None, None, ())]["ms"]) == (
        2,
        pytest.approx(0.099 + 1.415, abs=1e-9),
    )
    assert [r["cause"] for r in top] == ["launch", "unattributed"]  # largest total first


def _enclosing(start, end, t, until):
    """By brute force: the intervals enclosing [t, until], innermost first (the later start
    first; at equal starts the shorter, then the later row)."""
    hit = [i for i in range(len(start)) if start[i] <= t and end[i] >= until]
    return sorted(hit, key=lambda i: (start[i], -(end[i] - start[i]), i), reverse=True)


@pytest.mark.parametrize("seed", range(6))
def test_the_intervals_around_an_instant_are_every_one_enclosing_it(seed):
    """catches: a faster lookup of the ops and frames around an instant (idle causes ask it for
    every gap) missing an encloser where the intervals are not a clean call stack: children
    ending a nanosecond past their parent (a skewed or cut trace), siblings touching end to start,
    zero-length intervals, duplicates; and the instant falling exactly on a start or an end.
    The expectation is a brute-force scan of every interval."""
    rng = np.random.default_rng(seed)
    start, end = [], []

    def calls(lo, hi, depth):  # a random call tree in [lo, hi]
        t = lo
        while t < hi and depth < 6:
            s = int(rng.integers(t, hi + 1))
            e = int(rng.integers(s, hi + 1))
            start.append(s)
            end.append(e)
            if e > s + 2:
                calls(s, e, depth + 1)
            t = e + int(rng.integers(0, 3))  # 0: the next sibling starts where this one ended

    calls(0, 2_000, 0)
    for i in rng.choice(len(start), size=len(start) // 5, replace=False):  # skew: past the parent's end
        end[i] += int(rng.integers(1, 3))
    for i in rng.choice(len(start), size=len(start) // 10, replace=False):  # duplicates
        start.append(start[i])
        end.append(end[i])
    table = pd.DataFrame({"start_ns": np.array(start, dtype=np.int64), "end_ns": np.array(end, dtype=np.int64)})
    rows = rng.permutation(len(table))  # the nest is given its rows in any order
    nest = host._Nest(table, rows)
    times = np.concatenate([table["start_ns"], table["end_ns"], rng.integers(-5, 2_010, 300)])
    untils = times + rng.integers(0, 40, len(times))
    pos = np.searchsorted(nest.start, times, side="right")
    got = nest.walk(pos, times, keep=len(table) + 1)
    assert got.shape[1] > 6  # the tree is deep enough to matter
    # Compared by the intervals' times (duplicates are interchangeable rows).
    for i, (t, u) in enumerate(zip(times.tolist(), untils.tolist())):
        want = [(start[r], end[r]) for r in _enclosing(start, end, t, t)]
        assert [(start[r], end[r]) for r in got[i][got[i] >= 0]] == want, t
        first = nest.innermost(np.array([t]))[0]
        assert (first < 0 and not want) or (start[first], end[first]) == want[0]
        around = nest.walk(np.array([pos[i]]), np.array([u]), keep=len(table) + 1)[0]
        assert [(start[r], end[r]) for r in around[around >= 0]] == [
            (start[r], end[r]) for r in _enclosing(start, end, t, u)
        ], (t, u)


def test_a_nests_positions_are_its_rows_places_in_start_order():
    """catches: a row's place in the nest's start order clamped short of the last place (``len - 1``
    read as ``len >> 1``: rows in the later half would read as "not among these", and the ops
    around an idle gap late in a thread would go unnamed), or a row not in the nest given a place.
    Eight intervals of a table of ten, given out of order; row 9 and 3 are not in the nest."""
    table = pd.DataFrame({"start_ns": np.array([50, 10, 70, 90, 30, 20, 60, 40, 80, 0], dtype=np.int64)})
    table["end_ns"] = table["start_ns"] + 5
    rows = np.array([6, 0, 2, 8, 1, 5, 4, 7])
    nest = host._Nest(table, rows)
    by_start = sorted(rows.tolist(), key=lambda r: int(table["start_ns"][r]))
    assert nest.rows.tolist() == by_start
    assert nest.position(np.array(by_start)).tolist() == list(range(8))
    assert nest.position(np.array([9, 3, 8])).tolist() == [-1, -1, by_start.index(8)]
