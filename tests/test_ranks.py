"""Ranks side by side (analysis.ranks): per-rank busy/idle/collective time, wait and straggler.

Multi-rank inputs are genuine: copies of a real two-rank NCCL training trace written as the
ranks of one run (one with its collectives lengthened by a known amount, so a known rank is the
straggler and the wait is known by hand), the real B200 TP8 rank 0 alone, and CPU traces of a
real gloo all-reduce run recorded here with torch.distributed; and two hand-built GPU ranks
(tests/kineto.py) whose per-step skew is placed by the test, so every wait is known exactly.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import real_trace_path
from tracekit import read_trace
from tracekit.analysis.analyze import analyze
from tracekit.analysis.ranks import METHOD_COLLECTIVE, rank_view
from tracekit.analysis.steps.segment import segment
from tracekit.report.render_html import HtmlRenderer
from tracekit.report.render_md import MarkdownRenderer
from tracekit.report.render_text import TextRenderer

LENGTHEN_US = 50.0  # added to every NCCL kernel of rank 1
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_NCCL = re.compile(r"nccl", re.IGNORECASE)


def _events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("cat", "")).lower() in _GPU_CATS]


def _union_us(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _oracle(doc: dict) -> dict:
    """span, busy, kernel and collective time and overlapped collective time, straight from the JSON."""
    ev = _events(doc)
    iv = [(e["ts"], e["ts"] + e["dur"]) for e in ev]
    union = _union_us(iv)
    kernels = [e for e in ev if e["cat"].lower() == "kernel"]
    coll = [e for e in kernels if _NCCL.search(e["name"])]
    overlapped = 0.0
    for c in coll:
        a, b = c["ts"], c["ts"] + c["dur"]
        others = _union_us(
            [
                (max(a, e["ts"]), min(b, e["ts"] + e["dur"]))
                for e in kernels
                if not _NCCL.search(e["name"])
                and e["args"].get("stream") != c["args"].get("stream")
                and e["ts"] < b
                and e["ts"] + e["dur"] > a
            ]
        )
        overlapped += sum(e - s for s, e in others)
    return {
        "span_ms": (max(e for _, e in iv) - min(s for s, _ in iv)) / 1e3,
        "gpu_busy_ms": sum(e - s for s, e in union) / 1e3,
        "kernel_ms": sum(e["dur"] for e in kernels) / 1e3,
        "collective_ms": sum(e["dur"] for e in coll) / 1e3,
        "collectives": len(coll),
        "overlapped_ms": overlapped / 1e3,
    }


@pytest.fixture(scope="module")
def nccl_run(tmp_path_factory):
    """A two-rank run from the real A100 NCCL trace: rank 0 as recorded, rank 1 the same run
    with every NCCL kernel LENGTHEN_US longer (it waited that much more for rank 0)."""
    with gzip.open(real_trace_path("a100_nccl"), "rt") as f:
        doc = json.load(f)
    folder = tmp_path_factory.mktemp("nccl_run")
    docs = {}
    for rank in (0, 1):
        d = json.loads(json.dumps(doc))
        d["distributedInfo"] = {**(d.get("distributedInfo") or {}), "rank": rank, "world_size": 2}
        if rank == 1:
            for e in _events(d):
                if e["cat"].lower() == "kernel" and _NCCL.search(e["name"]):
                    e["dur"] += LENGTHEN_US
        d["traceName"] = f"rank{rank}"
        with gzip.open(folder / f"rank{rank}.json.gz", "wt") as f:
            json.dump(d, f)
        docs[rank] = d
    analysis = analyze(read_trace(folder))
    return folder, docs, analysis


def test_two_gpu_ranks_figures_match_the_trace(nccl_run):
    _, docs, a = nccl_run
    by_rank = {r["rank"]: r for r in a.ranks}
    assert sorted(by_rank) == [0, 1]
    for rank, doc in docs.items():
        want, got = _oracle(doc), by_rank[rank]
        assert got["world_size"] == 2 and got["device"] == "NVIDIA A100-PG509-200"
        for key in ("span_ms", "gpu_busy_ms", "kernel_ms", "collective_ms"):
            assert got[key] == pytest.approx(want[key], abs=0.01), key
        assert got["idle_ms"] == pytest.approx(got["span_ms"] - got["gpu_busy_ms"], abs=1e-9)
        assert got["collectives"] == want["collectives"] > 0
        assert got["overlap_share"] * got["collective_ms"] == pytest.approx(want["overlapped_ms"], abs=0.01)
    # Rank 1 spent LENGTHEN_US more in each collective: exactly its wait for rank 0.
    n = by_rank[1]["collectives"]
    assert by_rank[1]["collective_wait_ms"] == pytest.approx(n * LENGTHEN_US / 1e3, abs=0.001 * n)
    assert by_rank[0]["collective_wait_ms"] == 0


def test_two_gpu_ranks_name_the_straggler_and_the_loss(nccl_run):
    _, _, a = nccl_run
    s = a.rank_summary
    r1 = next(r for r in a.ranks if r["rank"] == 1)
    assert s["straggler"] == 0 and s["missing"] == [] and s["wait_method"] == METHOD_COLLECTIVE
    assert s["lost_ms"] == pytest.approx(r1["collective_wait_ms"])
    assert s["lost_share"] == pytest.approx(r1["collective_wait_ms"] / r1["span_ms"])
    assert s["lost_share_of_collective"] == pytest.approx(r1["collective_wait_ms"] / r1["collective_ms"])
    # A training trace: no steps, so nothing to align, and said so by an empty list.
    assert all(r["steps"] == [] for r in a.ranks)
    d = a.to_dict()
    assert [r["rank"] for r in d["ranks"]] == [0, 1] and d["rank_summary"]["straggler"] == 0
    for key in (
        "rank",
        "world_size",
        "device",
        "steps",
        "gpu_busy_ms",
        "collective_ms",
        "collective_wait_ms",
        "overlap_share",
        "span_ms",
        "idle_ms",
        "kernel_ms",
    ):
        assert key in d["ranks"][0], key
    # 21 x 50 us against a span of ~1 s is not material: no straggler finding.
    material = s["lost_share"] >= 0.05
    assert any(f.id == "rank-straggler" for f in a.findings) == material


def test_b200_single_rank_of_eight():
    t = read_trace(real_trace_path("b200_vllm"))
    v = rank_view(t, segment(t))
    assert v is not None
    (r,) = v["ranks"]
    s = v["summary"]
    assert r["rank"] == 0 and r["world_size"] == 8 and r["device"] == "NVIDIA B200"
    assert s["missing"] == [1, 2, 3, 4, 5, 6, 7] and s["present"] == [0]
    assert any("1-7" in n for n in s["notes"])
    # 73 symmetric-memory all-reduces and one NCCL all-gather.
    assert r["collectives"] == 74 and r["collective_ms"] > 0
    assert 0 < r["collective_share"] < 1 and r["collective_share"] == pytest.approx(r["collective_ms"] / r["kernel_ms"])
    assert s["straggler"] is None and r["collective_wait_ms"] is None and "only one rank" in s["reason"]
    assert len(r["steps"]) == 1 and r["steps"][0]["collective_ms"] == pytest.approx(r["collective_ms"])


def test_single_process_trace_has_no_ranks():
    t = read_trace(real_trace_path("b300_qwen3_moe"))  # distributedInfo world size 1
    assert rank_view(t, segment(t)) is None
    assert "ranks" not in analyze(t).to_dict()


# --- CPU: a real gloo run --------------------------------------------------------------

_GLOO = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    from torch.profiler import profile, ProfilerActivity, record_function
    rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    x = torch.randn(128, 128)
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for s in range(3):
            with record_function(f"decode_step_{s}"):
                y = x @ x
                if rank == 1:
                    time.sleep(0.03)  # rank 1 arrives late at every all-reduce
                dist.all_reduce(y)
        if rank == 1:
            with record_function("decode_step_3"):  # one more step, without a collective
                y = x @ x
    p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()
""")


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("gloo_run")
    script = folder.parent / "gloo_rank.py"
    script.write_text(_GLOO)
    store = str(folder.parent / "store")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), store, str(folder)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in (0, 1)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out.decode(errors="replace")[-2000:]
    return folder


@pytest.mark.slow  # two torch processes start and rendezvous (~15 s)
def test_cpu_gloo_ranks(gloo_run):
    t = read_trace(gloo_run)
    v = rank_view(t, segment(t))
    by_rank = {r["rank"]: r for r in v["ranks"]}
    s = v["summary"]
    assert sorted(by_rank) == [0, 1] and s["missing"] == []
    for r in by_rank.values():
        assert r["device"] == "cpu" and r["collectives"] == 3 and r["collective_ms"] > 0
        assert "gloo" in r["collective_source"]
    # Rank 1 sleeps 30 ms before each of its 3 all-reduces: rank 0 waits for it.
    assert s["straggler"] == 1 and s["wait_method"] == METHOD_COLLECTIVE
    # 3 x 30 ms of sleep; rank 0's own work between its all-reduces overlaps part of each sleep,
    # more so on a loaded machine (59 ms seen with the suite beside another run on 2 cores).
    assert by_rank[0]["collective_wait_ms"] > 45
    assert by_rank[1]["collective_wait_ms"] < by_rank[0]["collective_wait_ms"] / 5
    assert s["lost_ms"] == pytest.approx(by_rank[0]["collective_wait_ms"])
    # Different step counts: aligned by index, and said so.
    assert [len(by_rank[r]["steps"]) for r in (0, 1)] == [3, 4] and s["aligned_steps"] == 3
    assert any("different step counts" in n for n in s["notes"])
    assert by_rank[1]["steps"][3]["collective_ms"] == 0
    # Per step, the waits add up to the rank's; the first step's also holds the profilers' start skew.
    assert sum(st["wait_ms"] for st in by_rank[0]["steps"]) == pytest.approx(by_rank[0]["collective_wait_ms"])
    assert sum(st["wait_ms"] > 15 for st in by_rank[0]["steps"]) >= 2
    # The others lose far more than SKEW_SHARE of their span: the finding names rank 1.
    a = analyze(t)
    (f,) = [f for f in a.findings if f.id == "rank-straggler"]
    assert f.text.startswith("Rank 1 is the straggler: the other rank waits")
    # Steps to compare: the per-step chart is drawn (one line per rank).
    vm = HtmlRenderer(include_js=False).view_model(a.to_dict())
    assert vm["ranks"]["chart"] == "tk-ranks-steps"
    assert any(item.get("target_id") == "tk-ranks-steps" for item in vm["chart_items"])


# --- rendering -------------------------------------------------------------------------


def test_ranks_rendered_in_every_format(nccl_run):
    _, _, a = nccl_run
    d = a.to_dict()
    d["ranks"][1]["device"] = "<script>alert(1)</script>|*x*"
    html = HtmlRenderer(include_js=False).render_data(d)
    section = html[html.index('<section id="ranks">') :]
    section = section[: section.index("</section>")]
    assert "straggler: rank 0" in section and 'data-rank="1"' in section
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "<script>alert" not in html
    assert 'id="tk-ranks-steps"' not in section  # a training run has no steps to chart
    md = MarkdownRenderer().render_data(d)
    assert "**Ranks side by side**" in md and "| 0 (straggler) |" in md
    assert "<script>" not in md
    text = TextRenderer().render_data(d)
    assert "ranks\n" in text and "rank 0 (straggler)" in text and "straggler: rank 0" in text


def test_no_ranks_section_without_ranks():
    t = read_trace(real_trace_path("b300_qwen3_moe"))
    d = analyze(t).to_dict()
    assert 'id="ranks"' not in HtmlRenderer(include_js=False).render_data(d)
    assert "Ranks side by side" not in MarkdownRenderer().render_data(d)


def test_collected_tp2_run_has_both_ranks_and_their_collectives(tp2_run):
    """A real ``tracekit collect --tp 2`` (gloo on this CPU): both ranks, their collectives and a
    wait measured between them. How long each rank waited depends on this machine's scheduling,
    so its value is checked on hand-built ranks (``test_hand_built_skew_...``), not here."""
    a = analyze(read_trace(tp2_run))
    by_rank = {r["rank"]: r for r in a.ranks}
    s = a.rank_summary
    assert sorted(by_rank) == [0, 1] and s["missing"] == [] and s["world_size"] == 2
    for r in by_rank.values():
        assert r["collective_ms"] > 0 and r["collectives"] > 0 and r["steps"]
        assert r["collective_wait_ms"] is not None
    assert s["wait_method"] is not None and s["lost_ms"] is not None
    assert s["lost_ms"] == pytest.approx(
        sum(r["collective_wait_ms"] for r in by_rank.values() if r["rank"] != s["straggler"])
    )


# --- hand-built ranks: the skew known by construction -----------------------------------------

LAGS_US = [50.0, 200.0, 0.0, 400.0]  # how much later rank 1 reaches each step's all-reduce
_NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
_GEMM = "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_nn"


def _skewed_ranks(folder, extra_on_rank1: bool = False, steps: bool = True):
    """Two GPU ranks of four vLLM decode steps. Step i (CPU range at 2000*i + 100 us, 1 ms long):
    a GEMM at G_i = 2000*i + 120 us, 100 us on rank 0 and 100 + LAGS_US[i] on rank 1, then an
    all-reduce that ends on both ranks at the same moment, 30 us after the later rank arrives. So
    rank 0 sits LAGS_US[i] us in each all-reduce waiting for rank 1, the straggler. With
    ``extra_on_rank1`` rank 1 also runs a 10 us all-reduce of its own 10 us after each step's
    common one; without ``steps`` no step is annotated."""
    from kineto import Doc

    for rank in (0, 1):
        doc = Doc(rank=rank, world=2)
        for i, lag in enumerate(LAGS_US):
            t = 2000.0 * i + 100.0
            g = t + 20.0
            if steps:
                doc.annotation("execute_context_0(0)_generation_4(4)", t, 1000.0)
            compute = 100.0 + (lag if rank == 1 else 0.0)
            doc.kernel(_GEMM, t + 10.0, g, compute)
            end = g + 100.0 + lag + 30.0
            doc.kernel(_NCCL_KERNEL, t + 15.0, g + compute, end - (g + compute))
            if extra_on_rank1 and rank == 1:
                doc.kernel(_NCCL_KERNEL, t + 16.0, end + 10.0, 10.0)
        doc.write(folder / f"rank{rank}.json")
    return folder


def test_hand_built_skew_is_the_wait_put_in(tmp_path):
    """The straggler, each step's wait and the loss against figures known by construction: rank 0
    waits 50 + 200 + 0 + 400 = 650 us in all, over a span of 6,650 - 120 = 6,530 us; rank 1 waits
    nothing. Fails if waits are measured against the wrong rank, summed per step wrongly, or the
    loss is not the waiting rank's wait."""
    a = analyze(read_trace(_skewed_ranks(tmp_path)))
    by_rank = {r["rank"]: r for r in a.ranks}
    s = a.rank_summary
    assert sorted(by_rank) == [0, 1] and s["wait_method"] == METHOD_COLLECTIVE
    assert s["straggler"] == 1
    assert by_rank[0]["collective_wait_ms"] == pytest.approx(0.650, abs=1e-6)
    assert by_rank[1]["collective_wait_ms"] == 0
    assert [st["wait_ms"] for st in by_rank[0]["steps"]] == pytest.approx([lag / 1e3 for lag in LAGS_US], abs=1e-6)
    assert [st["wait_ms"] for st in by_rank[1]["steps"]] == [0, 0, 0, 0]
    assert s["lost_ms"] == pytest.approx(0.650, abs=1e-6)
    assert by_rank[0]["span_ms"] == pytest.approx(6.530, abs=1e-6)
    assert s["lost_share"] == pytest.approx(0.650 / 6.530, rel=1e-6)
    # Both ranks' GPUs were busy 100 + 30 + lag per step: 1,170 us; rank 0's all-reduces 120 + 650 us.
    for r in (0, 1):
        assert by_rank[r]["gpu_busy_ms"] == pytest.approx(1.170, abs=1e-6)
    assert (by_rank[0]["collective_ms"], by_rank[1]["collective_ms"]) == pytest.approx((0.770, 0.120), abs=1e-6)


def test_hand_built_ranks_per_step_busy_collective_and_time(tmp_path):
    """Each rank's steps table against the construction: step i is busy 100 + 30 + LAGS_US[i] us
    on both ranks (the GEMM, then the all-reduce to the common end), its all-reduce lasts
    30 + LAGS_US[i] us on rank 0 (which waits) and 30 us on rank 1, and the step lasts its 1 ms CPU
    range (all GPU work ends inside it). Fails if a step's busy time is converted to ms by
    anything but / 1e6, or collectives of steps after the first are dropped (``coll_step >= 0``
    read as ``== 0``)."""
    a = analyze(read_trace(_skewed_ranks(tmp_path)))
    by_rank = {r["rank"]: r for r in a.ranks}
    for r in (0, 1):
        steps = by_rank[r]["steps"]
        assert [s["busy_ms"] for s in steps] == pytest.approx([(130.0 + lag) / 1e3 for lag in LAGS_US], abs=1e-9)
        assert [s["time_ms"] for s in steps] == pytest.approx([1.0] * 4, abs=1e-9)
        want = [(30.0 + (lag if r == 0 else 0.0)) / 1e3 for lag in LAGS_US]
        assert [s["collective_ms"] for s in steps] == pytest.approx(want, abs=1e-9)


def test_ranks_with_different_collective_counts_compare_collective_time_per_step(tmp_path):
    """When the ranks ran different numbers of collectives they cannot be matched one by one;
    each step's collective time is compared instead. Rank 1 runs an extra 10 us all-reduce per
    step, so its steps hold 30 + 10 = 40 us of collectives and rank 0's 30 + LAGS_US[i]; each step's
    wait is its excess over the smaller: rank 0 40, 190, 0, 390 us (620 us), rank 1 10 us in the
    step where rank 0 did not wait (0 elsewhere). Fails if per-step collective time is not
    stacked by step index, the minimum is not taken per step, or a wait at the 1 us noise floor
    or above is dropped."""
    from tracekit.analysis.ranks import METHOD_STEP

    a = analyze(read_trace(_skewed_ranks(tmp_path, extra_on_rank1=True)))
    by_rank = {r["rank"]: r for r in a.ranks}
    assert a.rank_summary["wait_method"] == METHOD_STEP
    assert [st["wait_ms"] for st in by_rank[0]["steps"]] == pytest.approx([0.040, 0.190, 0.0, 0.390], abs=1e-9)
    assert [st["wait_ms"] for st in by_rank[1]["steps"]] == pytest.approx([0.0, 0.0, 0.010, 0.0], abs=1e-9)
    assert by_rank[0]["collective_wait_ms"] == pytest.approx(0.620, abs=1e-9)
    assert by_rank[1]["collective_wait_ms"] == pytest.approx(0.010, abs=1e-9)


def test_ranks_without_step_annotations_find_the_same_waits(tmp_path):
    """The same two ranks with the step annotations stripped: each rank's steps are found from its
    launches alone, and the waits must not change (620 us on rank 0, 10 us on rank 1, four steps
    each). Fails if an unannotated rank's steps are not found, or found other than the four the
    annotations stated, so that the per-step comparison falls apart."""
    from tracekit.analysis.ranks import METHOD_STEP

    a = analyze(read_trace(_skewed_ranks(tmp_path, extra_on_rank1=True, steps=False)))
    by_rank = {r["rank"]: r for r in a.ranks}
    assert a.rank_summary["wait_method"] == METHOD_STEP
    assert [len(by_rank[r]["steps"]) for r in (0, 1)] == [4, 4]
    assert by_rank[0]["collective_wait_ms"] == pytest.approx(0.620, abs=1e-9)
    assert by_rank[1]["collective_wait_ms"] == pytest.approx(0.010, abs=1e-9)


def test_ranks_without_steps_or_matching_collectives_compare_their_whole_collective_time(tmp_path):
    """With no steps to align (a training run) and different collective counts, only each rank's
    whole collective time can be compared: rank 0 runs all-reduces of 100 and 300 us (400 us),
    rank 1 three of 50 us (150 us), so rank 0 waited 400 - 150 = 250 us and rank 1 nothing.
    Fails if the whole-trace comparison takes the wrong rank as the base, counts a wait in the
    rank that spent least, or drops a wait at the 1 us noise floor (exactly 1 us counts); with 0.5 us between
    the ranks (rank 1's third all-reduce 50.5 us longer) the difference is noise and no one waited."""
    from kineto import Doc

    from tracekit.analysis.ranks import METHOD_TRACE

    def run(folder, rank1_extra_us: float):
        folder.mkdir()
        durations = {0: [100.0, 300.0], 1: [50.0, 50.0, 50.0 + rank1_extra_us]}
        for rank in (0, 1):
            doc = Doc(rank=rank, world=2)
            doc.annotation("Optimizer.step#SGD.step", 5.0, 1.0)  # a training run: no inference steps
            doc.kernel(_GEMM, 8.0, 10.0, 20.0)
            t = 100.0
            for d in durations[rank]:
                doc.kernel(_NCCL_KERNEL, t - 5.0, t, d)
                t += d + 100.0
            doc.write(folder / f"rank{rank}.json")
        return analyze(read_trace(folder))

    a = run(tmp_path / "skewed", 0.0)
    by_rank = {r["rank"]: r for r in a.ranks}
    assert a.rank_summary["wait_method"] == METHOD_TRACE and a.rank_summary["aligned_steps"] == 0
    assert (by_rank[0]["collectives"], by_rank[1]["collectives"]) == (2, 3)
    assert by_rank[0]["collective_wait_ms"] == pytest.approx(0.250, abs=1e-9)
    assert by_rank[1]["collective_wait_ms"] == 0
    level = run(tmp_path / "level", 250.0 - 0.5)  # rank 1: 399.5 us against rank 0's 400
    assert [r["collective_wait_ms"] for r in sorted(level.ranks, key=lambda r: r["rank"])] == [0, 0]
    floor = run(tmp_path / "floor", 250.0 - 1.0)  # 399 us against 400: exactly the 1 us floor counts
    assert [r["collective_wait_ms"] for r in sorted(floor.ranks, key=lambda r: r["rank"])] == [0.001, 0]


def test_a_ranks_overlap_share_is_the_collective_time_other_kernels_run_beside(tmp_path):
    """Fails if the overlap is counted from anything but the collective time another stream's
    kernels cover (a start of 1 ns instead of 0, a kernel on the collective's own stream counted).
    Rank 0: an all-reduce on stream 7 from 100 to 200 us, a GEMM on stream 8 from 150 to 190 us
    (40 us beside it) and one on stream 7 after it; rank 1: the same all-reduce, its GEMM (30 us)
    after.
    Shares 40 / 100 = 0.4 and 0, exactly."""
    from kineto import Doc

    for rank in (0, 1):
        doc = Doc(rank=rank, world=2)
        doc.kernel(_NCCL_KERNEL, 90.0, 100.0, 100.0, stream=7)
        doc.kernel(_GEMM, 95.0, 150.0 if rank == 0 else 210.0, 40.0 if rank == 0 else 30.0, stream=8)
        doc.kernel(_GEMM, 96.0, 260.0, 10.0, stream=7)
        doc.write(tmp_path / f"rank{rank}.json")
    a = analyze(read_trace(tmp_path))
    by_rank = {r["rank"]: r for r in a.ranks}
    assert by_rank[0]["overlap_share"] == 0.4 and by_rank[1]["overlap_share"] == 0.0


def test_one_rank_of_a_world_whose_file_names_no_rank_is_rank_0(tmp_path):
    """A file of a 2-rank world (distributedInfo's world_size) that does not say which rank it
    is: rank 0, as torch.distributed's first process. Fails if another default is taken."""
    import json

    from kineto import Doc

    doc = Doc()
    doc.kernel(_NCCL_KERNEL, 90.0, 100.0, 100.0)
    d = doc.document()
    d["distributedInfo"] = {"backend": "nccl", "world_size": 2}
    path = tmp_path / "one.json"
    path.write_text(json.dumps(d))
    a = analyze(read_trace(path))
    assert [r["rank"] for r in a.ranks] == [0] and a.ranks[0]["world_size"] == 2
