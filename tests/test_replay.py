"""The step replay (issue 48): hand-built steps whose answers follow by arithmetic, each what-if
exactly; the unchanged replay reproducing real traces (and their stripped, cut and repeated
variants, and CPU traces ``tracekit collect`` recorded); and the bounds every replayed saving keeps.

Times in the hand-built traces are microseconds (as Kineto writes them); the replay's are ns.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import SAMPLE_TRACES, real_trace_path
from kineto import Doc
from test_repeat import repeat

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.analysis.replay import changes as ch
from tracekit.analysis.replay import critical as cp
from tracekit.analysis.replay.replay import REPRODUCE, saving_bound_ns

US = 1000


def _replay(path, **kw):
    a = analyze(read_trace(path), **kw)
    assert a.replayer is not None
    return a, a.replayer


def _saving_us(r, changes, step=0) -> float:
    return float(r.run(changes).saving_ns[step]) / US


# --- hand-built steps ---------------------------------------------------------------


def test_a_sync_bound_step(tmp_path):
    """catches: a synchronising call kept at its measured length when what it waited for moves (or
    removed without the work behind it). One prefill step 0-1,100 us: K1 (1,000 us) launched at 10
    starts at 15; cudaStreamSynchronize at 20 returns at 1,018 (3 us after K1); 50 us of host work;
    K2 (10 us) launched at 1,068 starts at 1,073; the step's range ends at 1,100.
    - sync removed: the call returns at 23, K2 is launched at 73 but queues behind K1 (ends 1,015,
      the trace has no queued sample so the device gap is 0): 1,015-1,025; the host ends at
      73 + 2 + 30 = 105: the step ends at 1,025, saving 75 us.
    - K1 at half its time: sync returns at 518, K2 launched at 568 runs 573-583, the host ends at
      600: saving 500 us."""
    d = Doc()
    d.annotation("prefill", 0, 1100)
    k1 = d.kernel("ampere_sgemm_128x64_nn", 10, 15, 1000)
    d.runtime("cudaStreamSynchronize", 20, 998)
    d.kernel("ampere_sgemm_64x64_nn", 1068, 1073, 10)
    a, r = _replay(d.write(tmp_path / "sync.json"))
    b = r.books()
    assert b["steps"][0]["measured_ms"] == pytest.approx(1.1) and abs(b["steps"][0]["error"]) < 1e-9
    assert _saving_us(r, [ch.Change(ch.SYNC)]) == pytest.approx(75, abs=0.01)
    k1_row = int(np.flatnonzero(a.work["name"].astype(str) == "ampere_sgemm_128x64_nn")[0])
    half = ch.Change(ch.DURATIONS, rows=np.array([k1_row]), durations=np.array([500 * US]))
    assert k1 and _saving_us(r, [half]) == pytest.approx(500, abs=0.01)
    # Two fixes of one kernel replay as the faster of the two, in either order (bug: the later
    # change overwriting the earlier, so "together" saved less than one of its parts).
    quarter = ch.Change(ch.DURATIONS, rows=np.array([k1_row]), durations=np.array([250 * US]))
    assert _saving_us(r, [half, quarter]) == _saving_us(r, [quarter, half]) == pytest.approx(750, abs=0.01)
    # The critical path: K1, then the sync's own 3 us, the host work, K2's launch and K2 run.
    kinds = [s.kind for s in r.critical_path(0)]
    assert cp.SYNC in kinds and kinds.count(cp.KERNEL) >= 1
    assert sum(s.end_ns - s.start_ns for s in r.critical_path(0)) == 1100 * US


def test_two_streams_joined_by_an_event(tmp_path):
    """catches: a kernel's wait on another stream read as its own lateness (kept when the kernel it
    waited for gets faster). KA (stream 7, 100 us) starts at 15; KB (stream 9, 50 us) was launched
    at 20 and started at 117, 2 us after KA ended: the replay makes KA its dependency, the 2 us its
    unexplained wait. Halving KA moves KB 50 us earlier; halving KB saves 25 us."""
    d = Doc()
    d.annotation("prefill", 0, 60)
    d.kernel("ampere_sgemm_128x64_nn", 10, 15, 100, stream=7)
    d.kernel("ampere_sgemm_64x64_nn", 20, 117, 50, stream=9)
    a, r = _replay(d.write(tmp_path / "streams.json"))
    assert r.books()["steps"][0]["measured_ms"] == pytest.approx(0.167)
    assert abs(r.books()["steps"][0]["error"]) < 1e-9
    g = r.graph
    kb = int(np.flatnonzero(a.work["stream"].to_numpy() == 9)[0])
    ka = int(np.flatnonzero(a.work["stream"].to_numpy() == 7)[0])
    assert g.k_cross[kb] == ka and g.k_residual[kb] == 2 * US
    assert _saving_us(
        r, [ch.Change(ch.DURATIONS, rows=np.array([ka]), durations=np.array([50 * US]))]
    ) == pytest.approx(50, abs=0.01)
    assert _saving_us(
        r, [ch.Change(ch.DURATIONS, rows=np.array([kb]), durations=np.array([25 * US]))]
    ) == pytest.approx(25, abs=0.01)


def test_a_graph_replay_behind_host_work(tmp_path):
    """catches: launch overhead blamed for a replay the host starts late. 500 us of host work (an
    op), then a cudaGraphLaunch at 500 (10 us) whose three 20 us kernels run back to back from 505;
    the range ends at 520, the step at 565.
    - launch removed: the graph's kernels start 5 us after its call began whatever the call's own
      time: nothing saved.
    - host work cut to 50 us: the launch at 50, kernels 55-115, the host at 70: saving 450 us."""
    d = Doc()
    d.annotation("prefill", 0, 520)
    d.op("aten::scheduler_work", 0, 500)
    d.graph(500, [("k_a", 505, 20), ("k_b", 525, 20), ("k_c", 545, 20)])
    a, r = _replay(d.write(tmp_path / "graph.json"))
    assert r.books()["steps"][0]["measured_ms"] == pytest.approx(0.565)
    assert abs(r.books()["steps"][0]["error"]) < 1e-9
    assert _saving_us(r, [ch.Change(ch.LAUNCH)]) == pytest.approx(0, abs=0.01)
    assert _saving_us(r, [ch.Change(ch.HOST, value=50 * US)]) == pytest.approx(450, abs=0.01)
    # Together they save what the host cut saves (replayed together, not added).
    assert _saving_us(r, [ch.Change(ch.LAUNCH), ch.Change(ch.HOST, value=50 * US)]) == pytest.approx(450, abs=0.01)


def test_a_launch_bound_step(tmp_path):
    """catches: launch overhead removed but kernels still spaced by their launches (or the host's
    own work cut with it). Three 10 us kernels launched every 40 us (2 us calls, 38 us dispatch),
    each starting 5 us after its launch, from 10 us; the range ends at 100 (host), kernels end at
    25, 65, 105. Launch removed: the three launches at 10 (the 10 us before the first call is host
    work, kept), kernels back to back 15-45; the host's last call ends at 10 and its 8 us tail
    (100 - 92) follows: the step ends at 45, saving 60 us."""
    d = Doc()
    d.annotation("prefill", 0, 100)
    for k in range(3):
        d.kernel("ampere_sgemm_64x64_nn", 10 + 40 * k, 15 + 40 * k, 10)
    a, r = _replay(d.write(tmp_path / "launch.json"))
    assert r.books()["steps"][0]["measured_ms"] == pytest.approx(0.105)
    assert _saving_us(r, [ch.Change(ch.LAUNCH)]) == pytest.approx(60, abs=0.01)
    # The launch finding's replayed saving is that same replay, over the phase.
    f = next((f for f in a.findings if f.id == "launch-bound"), None)
    if f is not None and f.at_stake_basis == "replayed":
        assert f.at_stake_ms == pytest.approx(0.060, abs=1e-5)


# --- real traces --------------------------------------------------------------------

SERVING = (
    "gb10_vllm",
    "rtx3090_vllm",
    "mi300x_extend",
    "mi300x_decode",
    "b300_qwen3_moe",
    "mi300x_qwen3_moe",
    "b200_vllm",
    "rtx4080_nanovllm",
    "h100_hf",
    "mi300x_hf",
)


def _check_books(path, label):
    a = analyze(read_trace(path))
    if a.replayer is None:
        pytest.skip(f"{label}: no steps")
    b = a.replayer.books()
    for s in b["steps"]:
        assert abs(s["error"]) <= REPRODUCE, (label, s)
        assert s["unexplained_ms"] <= 0.05 * s["measured_ms"] + 1e-9, (label, s)
    # The critical path tiles each step's replayed window.
    r = a.replayer
    for i in range(len(r.steps)):
        segs = r.critical_path(i)
        assert sum(x.end_ns - x.start_ns for x in segs) == int(r.base.end[i] - r.base.begin[i]), (label, i)
    return a


@pytest.mark.parametrize("key", SERVING)
def test_the_unchanged_replay_reproduces_each_real_step(key):
    """catches: a dependency the replay misses (PDL overlap, a cross-stream wait, a blocking copy):
    the replayed step drifts from the measured one, or the drift hides in the unexplained term."""
    _check_books(real_trace_path(key), key)


def _variant(src, dst, how: str):
    raw = src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if src.suffix == ".gz" else raw)
    ev = doc["traceEvents"]
    if how == "stripped":  # no annotations: steps found from the launches or the passes
        ev[:] = [e for e in ev if e.get("cat") not in ("user_annotation", "gpu_user_annotation")]
    elif how == "no-shapes":
        for e in ev:
            for k in ("Input Dims", "Input type", "Concrete Inputs"):
                (e.get("args") or {}).pop(k, None)
    elif how == "cut":  # the last 30% of the run's span dropped
        timed = [e for e in ev if isinstance(e.get("ts"), (int, float))]
        t0, t1 = min(e["ts"] for e in timed), max(e["ts"] for e in timed)
        ev[:] = [e for e in ev if not isinstance(e.get("ts"), (int, float)) or e["ts"] <= t0 + 0.7 * (t1 - t0)]
    dst.write_text(json.dumps(doc))
    return dst


@pytest.mark.parametrize("key", ("rtx3090_vllm", "gb10_vllm", "b300_qwen3_moe", "mi300x_extend"))
@pytest.mark.parametrize("how", ("stripped", "no-shapes", "cut", "repeated"))
def test_variants_of_real_traces_reproduce_too(key, how, tmp_path):
    """catches: a replay that only holds on the traces as shared (annotations, shapes, whole files)."""
    src = real_trace_path(key)
    dst = tmp_path / f"{how}.json"
    if how == "repeated":
        repeat(src, dst, 3)
    else:
        _variant(src, dst, how)
    _check_books(dst, f"{key}/{how}")


def test_cpu_traces_tracekit_collected_reproduce():
    """catches: the CPU path (leaf ops as the work, host time between them) drifting."""
    for path in sorted(SAMPLE_TRACES.glob("*.pt.trace.json.gz")):
        _check_books(path, path.name)


# --- the bounds every saving keeps ---------------------------------------------------


@pytest.mark.parametrize("key", ("rtx3090_vllm", "b300_qwen3_moe", "b200_vllm", "h100_hf"))
def test_replayed_savings_keep_their_bounds(key):
    """catches: a finding's time at stake above what its steps could lose (the 2,816 ms of the busy
    demo), or a combination that slows a step. Removing waits can save at most a step's duration
    less its critical path's kernel time; any fix together with others leaves each step no
    longer than that fix alone (the replay is monotone: less work never delays a node)."""
    a = analyze(read_trace(real_trace_path(key)))
    r = a.replayer
    bound = np.array([saving_bound_ns(r, i) for i in range(len(r.steps))])
    singles = [[ch.Change(ch.LAUNCH)], [ch.Change(ch.SYNC)], [ch.Change(ch.HOST, value=50 * US)]]
    outs = [r.run(c) for c in singles]
    for o in outs:
        assert (o.saving_ns <= bound + 1).all()
    together = r.run([c for cs in singles for c in cs])
    for o in outs:
        assert (together.duration_ns <= o.duration_ns + 1).all()
    assert (together.saving_ns <= bound + 1).all()
    # On these traces the causes do not hide behind one another, so the fixes together save no
    # more than their parts (not a law: two waits on parallel paths each save nothing alone).
    assert together.saving_ns.sum() <= sum(o.saving_ns.sum() for o in outs) + len(outs)
    for f in a.findings:
        if f.at_stake_basis == "replayed" and f.id in ("host-sync", "launch-bound", "host-bound"):
            w = r._weights()[f.phase]
            assert f.at_stake_ms <= float((w * bound).sum()) / 1e6 + 1e-6, f


def test_a_projection_frees_a_host_blocked_on_the_gpu(tmp_path):
    """catches: a projection that keeps the host's time blocked in a copy as host work (issue 48: a
    prefill "91.4 ms -> 91.4 ms" onto a faster GPU). One prefill step: an aten::mm of 4096^3 in
    bf16 launches its GEMM at 10 (1,000 us from 15); cudaMemcpyAsync at 20 queues a 3 us copy
    behind it and returns 2 us after the copy ends (1,020): a copy to pageable memory waits for
    the GPU; 30 us of host work close the step at 1,050. Projected with the GEMM at time t, the step
    is 15 + t + 3 + 2 + 30 us: the copy waits for the faster GEMM, the host's own 30 us stay."""
    from tracekit.whatif.project import project

    d = Doc()
    d.annotation("prefill", 0, 1050)
    n = 4096
    ext = d.op("aten::mm", 5, 10, dims=[[n, n], [n, n]], types=["c10::BFloat16", "c10::BFloat16"])
    d.kernel("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn", 10, 15, 1000, ext=ext)
    d._corr += 1
    c = d._corr
    d.events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaMemcpyAsync",
            "pid": 100,
            "tid": 100,
            "ts": 20,
            "dur": 1000,
            "args": {"cbid": 41, "correlation": c},
        }
    )
    d.events.append(
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoH (Device -> Pageable)",
            "pid": 0,
            "tid": 7,
            "ts": 1015,
            "dur": 3,
            "args": {"device": 0, "stream": 7, "correlation": c, "bytes": 4096},
        }
    )
    path = d.write(tmp_path / "blocked.json")
    a, r = _replay(path)
    assert r.graph.h_waits[r.graph.h_name == "cudaMemcpyAsync"][0] >= 0  # the copy call waited
    p = project(read_trace(path), "H100 SXM")
    w = p.parts.work
    gemm = int(np.flatnonzero(w["category"].to_numpy() == "gemm")[0])
    t_us = float(p.repriced.central[gemm]) / US
    assert t_us < 800  # the H100 runs it faster
    step = p.projected["central"].steps
    assert float(step["duration_ns"].iat[0]) / US == pytest.approx(15 + t_us + 3 + 2 + 30, abs=0.01)


def test_speed_and_overlap_what_ifs(tmp_path):
    """catches: a speed-up applied to kernels it does not name, or past their roof; communication
    "overlapped" but still on the stream. One prefill step: an aten::mm of 4096^3 (bf16) runs
    1,000 us from 15, then an NCCL all-reduce of 200 us queued behind it (launched at 20) runs
    1,000-1,215 after it; the host ends at 40.
    - gemm at fraction F of its roof: the GEMM takes roof / F (roof = its FLOPs at the bf16 peak,
      the work table's roof_fraction x time), the all-reduce follows it: saving 1,000 - roof / F.
    - communication overlapped: the all-reduce's 200 us go: saving 200 us."""
    d = Doc()
    d.annotation("prefill", 0, 40)
    n = 4096
    ext = d.op("aten::mm", 5, 10, dims=[[n, n], [n, n]], types=["c10::BFloat16", "c10::BFloat16"])
    d.kernel("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn", 10, 15, 1000, ext=ext)
    d.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 20, 1015, 200)
    a, r = _replay(d.write(tmp_path / "speed.json"))
    w = a.work
    gemm = int(np.flatnonzero(w["category"].to_numpy() == "gemm")[0])
    roof_us = float(w["roof_fraction"].iat[gemm]) * 1000
    assert 0 < roof_us < 1000
    for f in (0.5, 0.8):
        want = max(1000 - roof_us / f, 0)
        assert _saving_us(r, [ch.Change(ch.SPEED, name="gemm", value=f)]) == pytest.approx(want, abs=0.01)
    assert _saving_us(r, [ch.Change(ch.OVERLAP_COMM)]) == pytest.approx(200, abs=0.01)
    # A kernel name part names kernels too; a word naming nothing changes nothing.
    assert _saving_us(r, [ch.Change(ch.SPEED, name="s16816gemm", value=0.5)]) == pytest.approx(
        max(1000 - roof_us / 0.5, 0), abs=0.01
    )
    assert _saving_us(r, [ch.Change(ch.SPEED, name="no_such_kernel", value=0.5)]) == 0


def _two_ranks(folder, gemm_us=(100, 300), shift_us=(0, 0)):
    """Rank r: a prefill range 0-40 us on its own thread; a GEMM launched at 10 runs from 15 for
    gemm_us[r]; an all-reduce launched at 20 queues behind it and ends on both ranks at 15 + the
    slower GEMM + 20 us (the last rank's arrival plus the transfer)."""
    folder.mkdir()
    end = 15 + max(gemm_us) + 20
    for r in range(2):
        d = Doc(rank=r, world=2)
        tid, t0 = 100 + r, shift_us[r]
        d.annotation("prefill", t0, 40, tid=tid)
        d.kernel("ampere_sgemm_128x64_nn", t0 + 10, t0 + 15, gemm_us[r], tid=tid)
        start = t0 + 15 + gemm_us[r]
        d.kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            t0 + 20,
            start,
            end + t0 - start,
            tid=tid,
        )
        d.write(folder / f"rank{r}.json")
    return folder


def test_a_collective_waits_for_the_last_rank(tmp_path):
    """catches: a rank's collective kept at its measured length (its wait for the slower rank
    included) when the what-if speeds one rank up. Rank 0's GEMM takes 100 us, rank 1's 300 us;
    the all-reduce ends on both at 335 us. Rank 0's GEMM at 50 us saves nothing (it waits longer
    for rank 1); rank 1's at 150 us saves 150 us on both ranks."""
    a = analyze(read_trace(_two_ranks(tmp_path / "ranks")))
    r = a.replayer
    assert r.graph.groups_note and "joined across 2 ranks" in r.graph.groups_note
    b = r.books()
    assert [s["measured_ms"] for s in b["steps"]] == pytest.approx([0.335, 0.335])
    assert all(abs(s["error"]) < 1e-9 for s in b["steps"])
    rank = a.work["rank"].to_numpy() if "rank" in a.work else read_trace(tmp_path / "ranks").kernels["rank"].to_numpy()
    gemm = a.work["category"].to_numpy() == "gemm"
    g0, g1 = (int(np.flatnonzero(gemm & (rank == k))[0]) for k in (0, 1))
    fast0 = r.run([ch.Change(ch.DURATIONS, rows=np.array([g0]), durations=np.array([50 * US]))])
    assert fast0.saving_ns.tolist() == pytest.approx([0, 0], abs=10)
    fast1 = r.run([ch.Change(ch.DURATIONS, rows=np.array([g1]), durations=np.array([150 * US]))])
    assert (fast1.saving_ns / US).tolist() == pytest.approx([150, 150], abs=0.01)
    # Rank 0's critical path runs through rank 1's GEMM (the last to arrive), not its own wait.
    step0 = int(np.flatnonzero(a.steps["tid"].to_numpy() == 100)[0])
    labels = [s.label for s in r.critical_path(step0) if s.kind == cp.KERNEL]
    kernel_ns = sum(s.end_ns - s.start_ns for s in r.critical_path(step0) if s.kind == cp.KERNEL)
    assert any("sgemm" in x for x in labels) and kernel_ns >= (300 + 20) * US


def test_collectives_of_ranks_whose_clocks_disagree_are_not_joined(tmp_path):
    """catches: joining collectives across ranks whose clocks are offset (another host's clock): a
    collective would "end" before another rank began it. Rank 1's events 30 us later: its
    all-reduce starts at 345, after rank 0's ended at 335. Not joined, said, and each rank replays
    on its own."""
    a = analyze(read_trace(_two_ranks(tmp_path / "ranks", shift_us=(0, 30))))
    assert "clocks disagree" in (a.replayer.graph.groups_note or "")
    assert (a.replayer.graph.k_group < 0).all()
