"""Tests written for mutants of tracekit/collect that its hand-kept test files let survive (issue 51,
part 5; found while drawing CI's fixed set, not in a seeded sample): each names the mutant it
kills; the expected figures are worked out by hand from the CPU description given. Then the
survivors of seed 53's sample of the package (below its marker), each with hand-built inputs and
at most one tiny collect run."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from tracekit.collect.calibrate import cpu_peak_flops, settled
from tracekit.errors import TracekitError

AVX512 = "processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2 avx512f\ncpu MHz\t\t: 2000.000\n"


def test_an_fp64_cpu_peak_is_half_the_fp32_one():
    """Mutant: collect/calibrate.py cpu_peak_flops ``/ (2 if dtype == "fp64" else 1)`` -> ``(1 if ...)``:
    fp64 lanes are half as many as fp32's in the same vector. By hand: AVX-512 is 64 fp32 FLOPs
    a cycle (two 16-wide FMA units), at 2 GHz and 4 threads 512 GFLOP/s; fp64 256 GFLOP/s."""
    assert cpu_peak_flops("fp32", 4, cpuinfo=AVX512, max_khz=0) == pytest.approx(4 * 2e9 * 64)
    assert cpu_peak_flops("fp64", 4, cpuinfo=AVX512, max_khz=0) == pytest.approx(4 * 2e9 * 32)


def test_rounds_within_ten_percent_are_settled():
    """Mutant: collect/calibrate.py settled ``(1 - STABLE) * b`` -> ``(1 ^ STABLE)`` (a TypeError on
    the float): the best two rounds agreeing within 10% settle the measurement, 20% apart not."""
    assert settled([50.0, 95.0, 100.0]) is True
    assert settled([100.0, 80.0]) is False
    assert settled([100.0]) is False


def test_the_cpu_peak_reads_the_whole_cpuinfo():
    """Mutant: collect/calibrate.py cpu_peak_flops ``f.read(1 << 20)`` -> ``f.read(1 ** 20)`` (one
    character): the flags line was never read, so no peak. The bound read from /proc/cpuinfo
    itself must be the one computed from the file's whole text, read here a second time (the
    clock pinned at 1 THz, above any "cpu MHz" line, which moves with frequency scaling)."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        pytest.skip("no /proc/cpuinfo on this system")
    text = path.read_text(errors="replace")
    want = cpu_peak_flops("fp32", 1, cpuinfo=text, max_khz=1e9)
    if want is None:
        pytest.skip("this CPU's /proc/cpuinfo names no vector unit the bound knows")
    assert cpu_peak_flops("fp32", 1, max_khz=1e9) == pytest.approx(want)


# --- seed 53 (`--packages tracekit/collect --sample 15 --seed 53 --lists-only`) ---------------


def test_a_copy_below_the_floor_is_named_in_gb_per_s():
    """Mutant: collect/calibrate.py problems ``bandwidth / 1e9`` -> ``bandwidth * 1e9``: the slow
    copy's own figure given in the wrong unit. 0.25e9 bytes/s on one thread is under the floor of
    1 GB/s a thread, and the sentence must say 0.25 GB/s."""
    from tracekit.collect.calibrate import problems

    out = problems("cpu", "fp32", flops=50e9, bandwidth=0.25e9, threads=1, cpu_peak=0)
    assert out == ["0.25 GB/s copy is below the floor of 1 GB/s"]


def test_a_matmul_far_below_the_cpu_peak_names_the_peak_in_gflop_per_s():
    """Mutant: collect/calibrate.py problems ``peak / 1e9`` -> ``peak % 1e9``: the CPU's bound in
    the sentence read 0 GFLOP/s. 20 GFLOP/s fp32 on 2 threads is above the 4 GFLOP/s floor
    (2 a thread) and under 10% of a 512 GFLOP/s bound, which the sentence names."""
    from tracekit.collect.calibrate import problems

    (sentence,) = problems("cpu", "fp32", flops=20e9, bandwidth=100e9, threads=2, cpu_peak=512e9)
    assert "20 GFLOP/s fp32 matmul is under 10% of the 512 GFLOP/s" in sentence
    assert "on 2 threads" in sentence


# contention: /proc/stat and the clocks replaced by hand-built figures.


def test_busy_seconds_leave_out_idle_and_iowait(monkeypatch):
    """Mutant: collect/contention.py _cpu_busy_seconds ``sum(ticks) - ticks[3] - ticks[4]`` ->
    ``... - ticks[3] ^ ticks[4]``: iowait XORed in instead of subtracted. By hand, the first eight
    fields (user nice system idle iowait irq softirq steal) 100 5 50 1000 20 3 2 7 are busy for
    100 + 5 + 50 + 3 + 2 + 7 = 167 ticks (the mutant: 187 ^ 20 = 175)."""
    import io

    from tracekit.collect import contention

    if not hasattr(os, "sysconf") or "SC_CLK_TCK" not in os.sysconf_names:
        pytest.skip("no clock-tick rate on this system")
    stat = "cpu  100 5 50 1000 20 3 2 7 0 0\ncpu0 50 2 25 500 10 1 1 3 0 0\n"
    monkeypatch.setattr(contention, "open", lambda *a, **k: io.StringIO(stat), raising=False)
    assert contention._cpu_busy_seconds() == pytest.approx(167 / os.sysconf("SC_CLK_TCK"))


class _Clocks:
    """The three readings a contention window takes, each a list consumed in order."""

    def __init__(self, monkeypatch, wall, busy, own):
        from tracekit.collect import contention

        wall, busy, own = iter(wall), iter(busy), iter(own)
        monkeypatch.setattr(contention, "time", types.SimpleNamespace(monotonic=lambda: next(wall)))
        monkeypatch.setattr(contention, "_cpu_busy_seconds", lambda: next(busy))
        monkeypatch.setattr(contention, "_own_seconds", lambda: next(own))


def test_the_others_cores_are_busy_time_less_our_own_over_the_wall_time(monkeypatch):
    """Mutants: collect/contention.py Window.result ``(busy1 - busy0) - (own1 - own0)`` -> ``//``
    (this process's time divided into, not taken from, the machine's) and ``wall <= 0`` ->
    ``wall > 0`` (every real window measured nothing). By hand: over 2 s every core together was
    busy 5 s, 2 s of it this process's: the others held (5 - 2) / 2 = 1.5 cores."""
    from tracekit.collect import contention

    _Clocks(monkeypatch, wall=[100.0, 102.0], busy=[1000.0, 1005.0], own=[10.0, 12.0])
    w = contention.Window()
    got = w.result(threads=1, cores=4)
    assert got == {"other_cores": 1.5, "seconds": 2.0, "busy": False}


def test_a_window_of_no_time_measures_nothing(monkeypatch):
    """Mutant: collect/contention.py Window.result ``wall <= 0`` -> ``wall > 0``: a window whose
    clock did not move divides by zero instead of measuring nothing (None, as off Linux)."""
    from tracekit.collect import contention

    _Clocks(monkeypatch, wall=[100.0, 100.0], busy=[1000.0, 1001.0], own=[10.0, 10.5])
    assert contention.Window().result(threads=1, cores=2) is None


def test_busy_allows_the_free_cores_plus_half_a_core():
    """Mutant: collect/contention.py busy ``free + SLACK_CORES`` -> ``free ** SLACK_CORES``: the
    module's rule is cores - threads plus half a core. 4 threads on 8 cores leave 4 free, so the
    others may hold up to 4.5 cores (the mutant: 4 ** 0.5 = 2); on a full machine half a core."""
    from tracekit.collect.contention import busy

    assert busy(3.0, threads=4, cores=8) is False
    assert busy(4.4, threads=4, cores=8) is False
    assert busy(4.6, threads=4, cores=8) is True
    assert busy(0.3, threads=2, cores=2) is False
    assert busy(0.6, threads=2, cores=2) is True


# tensor parallel: the parent's choices, the ranks never started.


def test_cpu_ranks_share_the_cores(tmp_path, monkeypatch):
    """Mutant: collect/parallel.py collect_tp ``cpu_count // tp`` -> ``* tp``: each gloo rank was
    given tp times the machine's cores instead of its share. On 8 cores, 2 ranks get 4 threads
    each, in the job the ranks read (and OMP_NUM_THREADS)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit.collect import CollectOptions, parallel

    jobs = []

    def started(scratch, job, tp):
        jobs.append(job)
        raise _Stop

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(parallel, "_run_ranks", started)
    opts = CollectOptions(preset="tiny", device="cpu", output=str(tmp_path / "tp"), progress=False)
    with pytest.raises(_Stop):
        parallel.collect_tp(opts, 2)
    assert [j["options"]["threads"] for j in jobs] == [4]


class _Stop(Exception):
    pass


def test_a_port_taken_every_time_is_a_clear_error(monkeypatch):
    """Mutant: collect/parallel.py _run_ranks ``attempt == attempts - 1`` -> ``attempts - 0``: after
    the last try found its port taken, the loop fell through to ``AssertionError("unreachable")``
    instead of the sentence that says what happened. Three tries, each a fresh port."""
    from tracekit.collect import parallel

    ports = []

    def taken(scratch, job, tp):
        ports.append(job["port"])
        raise parallel._PortTaken()

    monkeypatch.setattr(parallel, "_start_and_wait", taken)
    monkeypatch.setattr(parallel, "free_port", lambda: 40000 + len(ports))
    with pytest.raises(TracekitError, match="taken each time"):
        parallel._run_ranks("/nonexistent", {"backend": "gloo"}, 2, attempts=3)
    assert ports == [40000, 40001, 40002]


def test_a_generation_past_the_models_positions_is_refused():
    """Mutant: collect/runner.py Generator ``prompt_len + new_tokens + 1 > limit`` -> ``(prompt_len +
    new_tokens) >> 1 > limit``: only a generation twice the model's length was refused. A 12-token
    prompt and 8 new tokens need 20 positions; a model of 16 must be refused with a sentence."""
    pytest.importorskip("torch")
    from tracekit.collect.runner import Generator

    workload = types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=16))
    with pytest.raises(TracekitError, match="exceeds the model's 16 positions"):
        Generator(workload, 1, 12, 8)


def test_a_script_wall_time_is_in_milliseconds(tmp_path, monkeypatch):
    """Mutant: collect/script.py run_target ``* 1e3`` -> ``* 999.0``: seconds to milliseconds by
    the wrong factor. The module's clock is replaced by one that reads 10 s, then 12.5 s around
    the script: 2,500 ms."""
    from tracekit.collect import script

    path = tmp_path / "job.py"
    path.write_text("x = 1\n")
    ticks = iter([10.0, 12.5])
    monkeypatch.setattr(script, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    assert script.run_target(script.ScriptTarget(argv=(str(path),), path=str(path))) == 2500.0


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory):
    """One tiny CPU collect with its progress bar replaced by a counter (total, steps seen)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit.collect import CollectOptions, collect, collector

    bars = []

    class Counter:
        def __init__(self, enabled, total):
            self.total, self.steps = total, 0
            bars.append(self)

        def stage(self, text):
            pass

        def step(self):
            self.steps += 1

        def close(self):
            pass

    out = tmp_path_factory.mktemp("collect53") / "t"
    opts = CollectOptions(
        preset="tiny", batch_size=1, prompt_len=16, new_tokens=4, warmup=2, output=str(out), threads=1, calibrate=False
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(collector, "Progress", Counter)
        result = collect(opts)
    return result, bars


def test_the_progress_bar_ends_full(counted_run):
    """Mutant: collect/collector.py _collect_generation ``(warmup + 2) * forwards`` -> ``&``: the
    bar's total, the forward passes it will count, was a few where the run made dozens. The total
    must be the steps the run reported: every forward of the 2 warm-up runs, the first timed run
    and the profiled run, each 1 prefill + 4 decode forwards: 4 x 5 = 20."""
    result, bars = counted_run
    (bar,) = bars
    timing = result.sidecar["timing"]
    assert timing["warmup_runs"] == 2
    assert bar.steps == 20
    assert bar.total == bar.steps


# --- seed 54 (the sample's survivors in tracekit/collect, `--seed 54 --lists-only`) ----------------


def test_calibration_lists_both_an_implausible_and_an_unsettled_measurement(monkeypatch):
    """Mutant: collect/calibrate.py calibrate ``"problems": found + unsettled`` -> ``found %
    unsettled`` (a TypeError on two lists: every calibration failed). The rounds are replaced by
    fixed figures on 2 threads: matmul 1 GFLOP/s then 0.5 GFLOP/s five times, copy 10 GB/s each
    time; the CPU's own bound is left out. By hand: the best matmul, 1 GFLOP/s, is under the fp32
    floor of 2 GFLOP/s a thread (4 for 2), so all 6 rounds run; the best two (1 and 0.5) are more
    than 10% apart, spread 1 - 0.5/1 = 50%, the copy's 0%. Both sentences are the problems."""
    torch = pytest.importorskip("torch")
    from tracekit.collect import calibrate as cal

    flops = iter([1e9] + [0.5e9] * 5)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(cal, "matmul_flops", lambda dev, dtype, budget: (next(flops), 256))
    monkeypatch.setattr(cal, "copy_bandwidth", lambda dev, budget: (10e9, 64 << 20))
    monkeypatch.setattr(cal, "cpu_peak_flops", lambda *a, **k: None)
    checks = cal.calibrate("cpu", torch.float32)["checks"]
    assert checks["attempts"] == 6
    assert checks["problems"] == [
        "1 GFLOP/s fp32 matmul is below the floor of 4 GFLOP/s for 2 threads",
        "the 6 rounds did not settle: their best two differ by more than 10% (matmul spread 50%, copy spread 0%)",
    ]
    assert (checks["plausible"], checks["stable"], checks["reliable"]) == (False, False, False)


def test_own_cpu_time_is_user_plus_system(monkeypatch):
    """Mutant: collect/contention.py _own_seconds ``t.user + t.system`` -> ``t.user * t.system``:
    the module's rule takes this process's CPU time (os.times, all its threads) off the machine's
    busy time, user and system alike. os.times replaced: 3 s user and 0.5 s system are 3.5 s (the
    mutant: 1.5)."""
    from tracekit.collect import contention

    monkeypatch.setattr(os, "times", lambda: types.SimpleNamespace(user=3.0, system=0.5))
    assert contention._own_seconds() == 3.5


def test_a_shards_head_dim_is_the_hidden_size_over_the_heads():
    """Mutant: collect/parallel.py shard_sizes ``hidden_size // heads`` -> ``% heads``: a config
    without head_dim got a head_dim of 0 for every rank. Sharding splits the heads, not a head:
    hidden 512 over 8 heads is 64 on each of 2 ranks, which hold 4 heads, 2 KV heads and half the
    MLP (1024 / 2 = 512); a stated head_dim is kept as given."""
    from tracekit.collect.parallel import shard_sizes

    cfg = {"num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 1024, "hidden_size": 512}
    assert shard_sizes(cfg, 2) == {
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 512,
        "head_dim": 64,
    }
    assert shard_sizes({**cfg, "head_dim": 128}, 2)["head_dim"] == 128


def test_a_tensor_parallel_run_reuses_a_scratch_folder_left_behind(tmp_path, monkeypatch):
    """Mutant: collect/parallel.py collect_tp ``os.makedirs(scratch, exist_ok=True)`` -> ``False``:
    the parent's scratch folder is named by its pid, so a parent killed before it could clean up
    (kill -9, the OOM killer) leaves one that a later run with the same pid (a container's parent
    often has the same small pid each time) meets in the same -o folder: the run failed with
    FileExistsError instead of reusing it (the ranks' old result files are removed before they
    start). The ranks are not started here: the stub records the scratch folder it is given."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit.collect import CollectOptions, parallel

    folder = tmp_path / "tp"
    stale = folder / f".tracekit-tp-{os.getpid()}"
    stale.mkdir(parents=True)
    given = []

    def started(scratch, job, tp):
        given.append(scratch)
        raise _Stop

    monkeypatch.setattr(parallel, "_run_ranks", started)
    opts = CollectOptions(preset="tiny", device="cpu", output=str(folder), progress=False, threads=1)
    with pytest.raises(_Stop):
        parallel.collect_tp(opts, 2)
    assert given == [str(stale)]


def test_a_static_cache_holds_every_position_of_the_generation(monkeypatch):
    """Mutant: collect/runner.py _new_cache ``max_cache_len = prompt_len + new_tokens + 1`` -> ``- 1``:
    the static cache that --compile and --cuda-graphs use had no room for the last decode step's
    position. The loop writes positions 0 to prompt_len + new_tokens - 1 (here 6 + 4: 0 to 9), so
    the cache needs at least 10. torch.compile is replaced by the identity (the cache's size does
    not depend on compiling): a one-layer tiny preset on the CPU must decode all 4 tokens."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit.collect import workloads
    from tracekit.collect.runner import Generator

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    wl = workloads.load_preset("tiny", "cpu", torch.float32, layers=1)
    gen = Generator(wl, 1, 6, 4, compile=True)
    cache = gen._new_cache()
    assert cache is not None  # the static cache, not the model's own dynamic one
    timing = gen.run(mark=False)
    assert len(timing.step_ms) == 5 and len(timing.tpot_ms) == 4


# --- seed 55 (the sample's survivors in tracekit/collect, coverage-map mode) ----------------------


def test_a_matmul_of_n_counts_two_n_cubed_flops(monkeypatch):
    """Mutant: collect/calibrate.py matmul_flops ``2.0 * n**3`` -> ``2.0 * n+3``: the work of one
    product counted as 2n + 3 FLOPs, so the CPU's ceiling came out some 65,000 times too low for
    n = 256. The module's clock is replaced by one that moves 1 s a reading: the first 256 product
    "takes" 1 s (over the 5 ms that ends the sizing, so n stays 256), and the burst is one product
    in 1 s. By hand (the docstring: 2 n^3 FLOPs each): 2 * 256^3 = 33,554,432 FLOP/s."""
    torch = pytest.importorskip("torch")
    import itertools

    from tracekit.collect import calibrate as cal

    ticks = itertools.count(100.0)
    monkeypatch.setattr(cal, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    rate, n = cal.matmul_flops(torch.device("cpu"), torch.float32, 0.0)
    assert n == 256
    assert rate == 33_554_432.0


def test_a_burst_is_timed_by_its_own_start_and_end(monkeypatch):
    """Mutant: collect/calibrate.py _best_rate ``dt = clock() - t0`` -> ``clock() // t0``: a burst's
    time was the ratio of two clock readings, about 1 whatever the burst took, so the bursts (the
    measurement the docstring names: the best work/second over bursts) never counted. The clock
    reads 10 s and 12 s around the single timed call (2 s: reps = 8 s / 2 s = 4), 12 s for the
    deadline (budget 0), then 20 s and 20.5 s around the burst of 4 calls, and 21 s (past the
    deadline: one burst). By hand: the single call 100 / 2 = 50 work/s, the burst 4 * 100 / 0.5 =
    800, so the best is 800 (the mutant: 4 * 100 / 1 = 400)."""
    pytest.importorskip("torch")
    from tracekit.collect import calibrate as cal

    ticks = iter([10.0, 12.0, 12.0, 20.0, 20.5, 21.0])
    monkeypatch.setattr(cal, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    calls = []
    rate = cal._best_rate(lambda: calls.append(1), 100.0, types.SimpleNamespace(type="cpu"), 0.0, 8.0)
    assert len(calls) == 1 + 1 + 4  # warm-up, the timed call, the burst
    assert rate == 800.0


def test_the_cpu_peak_is_the_exact_product_not_rounded_down():
    """Mutant: collect/calibrate.py cpu_peak_flops ``/ (2 if dtype == "fp64" else 1)`` -> ``//``:
    floor division rounded the bound down to a whole FLOP/s. Linux gives "cpu MHz" to three
    decimals, and 2048.006 MHz as a float times 1e6 falls just below 2,048,006,000 Hz, so the
    floor lost a whole FLOP/s. By hand: AVX-512, 64 fp32 FLOPs a cycle, 4 threads:
    4 x 2,048,006,000 x 64 = 524,289,536,000 FLOP/s, half that in fp64; the float product is
    within a thousandth of a FLOP/s of it."""
    info = "processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2 avx512f\ncpu MHz\t\t: 2048.006\n"
    assert cpu_peak_flops("fp32", 4, cpuinfo=info, max_khz=0) == pytest.approx(524_289_536_000, rel=0, abs=1e-3)
    assert cpu_peak_flops("fp64", 4, cpuinfo=info, max_khz=0) == pytest.approx(262_144_768_000, rel=0, abs=1e-3)


def test_a_gpu_matmul_outside_the_datasheet_range_is_named_in_tflop_per_s():
    """Mutant: collect/calibrate.py problems ``flops / 1e12`` -> ``flops * 1e12``: the sentence
    for a GPU's implausible matmul gave the measured rate in the wrong unit (1e+24 "TFLOP/s" for
    1 TFLOP/s). 1e12 FLOP/s bf16 on an H100 SXM is under 10% of its datasheet peak (GPU_PLAUSIBLE),
    so it is outside the 10%-105% range; the sentence must say 1 TFLOP/s, against the datasheet's
    989.4 TFLOP/s ("989" to three digits). The copy, 3 TB/s of the H100's 3.35, is plausible and
    gets no sentence."""
    from tracekit.collect.calibrate import problems
    from tracekit.specs.lookup import spec_by_name

    h100 = spec_by_name("h100-sxm")
    (sentence,) = problems("cuda", "bf16", 1e12, 3.0e12, None, h100)
    assert h100.peak_flops("bf16", "matrix") == 989.4e12
    assert sentence == f"1.00 TFLOP/s bf16 matmul is outside 10%-105% of {h100.name}'s 989 TFLOP/s"


def test_a_cpu_run_the_profiler_slowed_over_3x_gets_a_note():
    """Mutant: collect/collector.py measurement_notes ``device == "cpu"`` -> ``device < "cpu"``:
    the devices a run can have are "cpu", "cuda" and "cuda:N" (collect/workloads.py resolve_device),
    none below "cpu", so the note on a CPU run the profiler slowed more than the 3x expected was
    never written. By hand: a CPU run
    slowed 3.5x gets one note giving 3.5x; 2.9x is within the 3x, and a GPU run gets none (the
    note is about CPU runs). An idle machine (no contention, load 0) adds no busy sentence."""
    from tracekit.collect.collector import measurement_notes

    idle = {"cores": 4, "load_average_1m": 0.0}
    (note,) = measurement_notes(idle, "cpu", 3.5)
    assert "profiler" in note and "3.5x" in note
    assert measurement_notes(idle, "cpu", 2.9) == []
    assert measurement_notes(idle, "cuda", 3.5) == []


def _timed_runs(monkeypatch, run_s: float) -> tuple[int, float]:
    """(runs timed, wall ms of the run kept) of collector.measure, with a generation whose every
    run takes ``run_s`` seconds of a fake clock (the module's clock, moved only by the runs) and
    the profiled run replaced: no model runs. The runs' wall times are distinct, so the median is
    a run of its own: run k (from 0) takes run_s * (1 + k / 100)."""
    from tracekit.collect import collector, runner

    now = [100.0]

    class Gen:
        def __init__(self):
            self.k = 0

        def run(self, mark=False, on_step=None):
            wall = run_s * (1 + self.k / 100)
            self.k += 1
            now[0] += wall
            return runner.RunTiming(ttft_ms=1.0, tpot_ms=[1.0], wall_ms=wall * 1e3)

    monkeypatch.setattr(collector, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(runner, "profiled_run", lambda *a, **k: runner.RunTiming(1.0, [1.0], 1.0))
    opts = collector.CollectOptions(warmup=0)
    plain, n, _, _ = collector.measure(Gen(), opts, collector.Progress(False, 0), "unused.json", {})
    return n, plain.wall_ms


def test_short_runs_are_timed_five_times_and_the_median_kept(monkeypatch):
    """Mutant: collect/collector.py measure ``len(plain_runs) >= 5`` -> ``<= 5``: the timing loop
    stopped after its first run, so the "median" was of one run. Rule (the comment on
    TIMING_BUDGET_S): as many unprofiled runs as fit in 1 s, between 1 and 5; the median is kept.
    Runs of 10 ms (10, 10.1, ... 10.4 ms): five fit, the median is the third, 10.2 ms."""
    n, kept = _timed_runs(monkeypatch, 0.010)
    assert n == 5
    assert kept == pytest.approx(10.2)


def test_a_run_longer_than_half_the_budget_is_timed_once(monkeypatch):
    """Mutant: collect/collector.py measure ``fastest > 0.25`` -> ``fastest < 0.25``: a long run
    (over a quarter second) whose next run would not fit in the budget was timed twice more (and
    a short run, under a quarter second, was timed only once when the budget ran out). Rule (the comment on TIMING_BUDGET_S): as many runs as fit
    in 1 s, between 1 and 5 (at least 3 when a run is short). By hand: runs of 0.6 s: after the
    first, the clock is at 0.6 s and a second would end at 1.2 s, past the budget: one run (the
    mutant: three). Runs of 0.3 s: 0.3, 0.6, 0.9 s, and a fourth would end at 1.2 s: three."""
    assert _timed_runs(monkeypatch, 0.6) == (1, pytest.approx(600.0))
    n, kept = _timed_runs(monkeypatch, 0.3)
    assert n == 3 and kept == pytest.approx(303.0)


def test_a_tp_that_divides_none_of_the_counts_names_all_three():
    """Mutant: collect/parallel.py shard_sizes ``', '.join(bad[:-1])`` -> ``bad[:+1]``: when --tp
    divided none of the three counts, the sentence named the first and the last and dropped the
    KV heads ("attention heads (4) or intermediate size (688)"). docs/ranks.md: a --tp that does
    not divide the model's attention heads, KV heads or intermediate size is refused with one
    sentence; it names each count that --tp does not divide. The tiny preset (4 heads, 2 KV heads,
    intermediate size 688) and --tp 3: 4 = 3 + 1, 2 < 3 and 688 = 3 x 229 + 1, so all three,
    listed "A, B or C"."""
    from tracekit.collect.parallel import shard_sizes
    from tracekit.collect.workloads import PRESETS

    with pytest.raises(TracekitError) as err:
        shard_sizes(PRESETS["tiny"].config, 3)
    assert str(err.value).startswith(
        "--tp 3 does not divide the model's attention heads (4), KV heads (2) or intermediate size (688): "
    )


# --- seed 56 (the sample's survivors in tracekit/collect, coverage-map mode) ----------------------


def test_a_rank_that_exits_is_reported_with_its_status_and_the_last_line_it_logged(tmp_path):
    """Mutant: collect/parallel.py _exit_reason ``"... status {code}" + (...)`` -> ``^``: a rank that
    exited with a non-zero status raised TypeError (str ^ str) in the parent instead of the one
    sentence naming its status and its log's last line. By hand: the log's last non-blank line is
    "RuntimeError: boom" (a "USDT" line of the tracer is skipped); with no log only the status."""
    from tracekit.collect.parallel import _exit_reason

    log = tmp_path / "rank1.log"
    log.write_text("loading the model\nRuntimeError: boom\nUSDT probe noise\n\n", encoding="utf-8")
    assert _exit_reason(1, str(log)) == "the process exited with status 1 (RuntimeError: boom)"
    assert _exit_reason(3, str(tmp_path / "missing.log")) == "the process exited with status 3"


def test_a_one_token_prompt_is_accepted_and_an_empty_one_refused():
    """Mutant: collect/runner.py Generator ``prompt_len < 1`` -> ``prompt_len == 1``: a one-token
    prompt, the shortest there is, was refused as if empty, and an empty one (no prefill to run)
    let through. The rule is the refusal's own sentence: batch size, prompt length and new tokens
    must each be at least 1. The workload is a stand-in (its model's forward takes the usual
    keyword arguments and does nothing): the generator only builds its prompt and positions."""
    pytest.importorskip("torch")
    from tracekit.collect.runner import Generator

    model = types.SimpleNamespace(forward=lambda input_ids=None, past_key_values=None, position_ids=None: None)
    workload = types.SimpleNamespace(
        config=types.SimpleNamespace(max_position_embeddings=64), model=model, vocab_size=32, device="cpu"
    )
    gen = Generator(workload, 2, 1, 3)
    assert tuple(gen.prompt.shape) == (2, 1)
    with pytest.raises(TracekitError, match="must each be at least 1 \\(got 2, 0, 3\\)"):
        Generator(workload, 2, 0, 3)


# --- seed 57 (the sample's survivors in tracekit/collect, coverage-map mode) ----------------------


def test_a_gpu_copy_outside_the_datasheet_range_names_the_datasheet_in_gb_per_s():
    """Mutant: collect/calibrate.py problems ``bw / 1e9`` -> ``bw * 1e9``: the sentence for a GPU's
    implausible copy gave the datasheet's bandwidth in the wrong unit (3e+20 "GB/s" for the L4's
    300 GB/s). The L4's datasheet row: 300 GB/s and 121 TFLOP/s bf16 (asserted). A 100 TFLOP/s
    matmul is within 10%-105% of it (no sentence); a 20 GB/s copy is under 10% of 300 GB/s and a
    400 GB/s one above 105% (315 GB/s), so each gets the one sentence naming 300 GB/s."""
    from tracekit.collect.calibrate import problems
    from tracekit.specs.lookup import spec_by_name

    l4 = spec_by_name("l4")
    assert l4.peak_bandwidth == 300e9 and l4.peak_flops("bf16", "matrix") == 121e12
    for copy, shown in ((20e9, "20.0"), (400e9, "400")):
        (sentence,) = problems("cuda", "bf16", 100e12, copy, None, l4)
        assert sentence == f"{shown} GB/s copy is outside 10%-105% of {l4.name}'s 300 GB/s"


def test_the_progress_bar_is_drawn_only_when_enabled(capsys):
    """Mutant: collect/collector.py Progress ``if enabled:`` -> ``if not enabled:``: --no-progress
    drew a bar on stderr and --progress drew none. Rule: the class docstring (a bar on stderr,
    silent when disabled) and collect's ``--progress/--no-progress`` help. Disabled: no bar and
    nothing on stderr; enabled: a bar that counts the 3 forward passes stepped."""
    pytest.importorskip("tqdm")
    from tracekit.collect.collector import Progress

    off = Progress(False, 3)
    off.stage("prefill")
    off.step()
    off.close()
    assert off.bar is None
    assert capsys.readouterr().err == ""
    on = Progress(True, 3)
    assert on.bar is not None
    for _ in range(3):
        on.step()
    assert (on.bar.n, on.bar.total) == (3, 3)
    on.close()
    assert "fwd" in capsys.readouterr().err


def test_a_generations_wall_time_leaves_out_the_callbacks_between_steps(monkeypatch):
    """Mutant: collect/runner.py Generator.run ``wall_ms=(t_end - t_start - outside) * 1e3`` ->
    ``t_end // t_start``: the whole generation's wall time became the ratio of two clock readings
    (about 1 s) less the callbacks' time, here a negative number of milliseconds. Rule: RunTiming
    (wall_ms, the whole generation) and the comment on ``outside`` (time spent in callbacks, not
    part of the generation). The module's clock is a fake one that only the stand-in model's
    forward (20 ms a prefill, 5 ms a decode step) and the on_step callback (1 s) move. By hand: 1
    prefill and 2 decode steps are 20 + 5 + 5 = 30 ms; the three callbacks' 3 s are left out."""
    torch = pytest.importorskip("torch")
    from tracekit.collect import runner
    from tracekit.collect.runner import Generator

    now = [100.0]

    def forward(input_ids=None, past_key_values=None, position_ids=None, use_cache=True):
        now[0] += 0.020 if input_ids.shape[1] > 1 else 0.005
        return types.SimpleNamespace(logits=torch.zeros(input_ids.shape[0], input_ids.shape[1], 32))

    def on_step():
        now[0] += 1.0

    workload = types.SimpleNamespace(
        config=types.SimpleNamespace(max_position_embeddings=64),
        model=types.SimpleNamespace(forward=forward),
        vocab_size=32,
        device="cpu",
    )
    monkeypatch.setattr(runner, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    timing = Generator(workload, 1, 4, 2).run(mark=False, on_step=on_step, mark_generate=False)
    assert timing.step_ms == pytest.approx([20.0, 5.0, 5.0])
    assert timing.wall_ms == pytest.approx(30.0)


# --- seed 58 (the sample's survivors in tracekit/collect, coverage-map mode) ----------------------


def test_the_load_average_is_none_where_the_platform_cannot_give_it(monkeypatch):
    """Mutant: collect/calibrate.py _load ``except (OSError, AttributeError)`` -> an exception
    nothing raises in place of OSError: where the load average is unobtainable, os.getloadavg
    raises OSError (Python's documentation), which then escaped and ended the calibration instead
    of leaving the load unknown (None, the function's ``float | None``). A stand-in getloadavg
    raises it; one that works gives its 1-minute figure."""
    from tracekit.collect import calibrate

    def unobtainable():
        raise OSError("Load averages are unobtainable")

    monkeypatch.setattr(calibrate.os, "getloadavg", unobtainable)
    assert calibrate._load() is None
    monkeypatch.setattr(calibrate.os, "getloadavg", lambda: (1.5, 1.0, 0.5))
    assert calibrate._load() == 1.5


def test_an_empty_prompt_is_refused_with_the_options_name_and_its_least_value():
    """Mutant: collect/collector.py check_counts ``("--prompt-len", opts.prompt_len, 1)`` -> ``0``:
    ``--prompt-len 0`` (click takes any int) passed the early check, so the run went on to build
    the workload and only the generator refused it, in other words; and the least value named
    would be 0. Rule: the docstring, one clear error for a count option below its least value; a
    prompt has at least one token (the generator's own refusal: batch size, prompt length and new
    tokens must each be at least 1). A one-token prompt passes."""
    from tracekit.collect.collector import CollectOptions, check_counts

    with pytest.raises(TracekitError) as err:
        check_counts(CollectOptions(prompt_len=0))
    assert str(err.value) == "--prompt-len must be at least 1, not 0"
    check_counts(CollectOptions(prompt_len=1))


def test_a_third_default_tp_folder_in_the_same_second_gets_the_suffix_3(tmp_path, monkeypatch):
    """Mutant: collect/parallel.py resolve_folder ``n += 1`` -> ``n += 0``: with the default folder
    and its ``-2`` both present (three --tp runs started within one second), the search for a free
    name tried ``-2`` for ever and the run hung. Rule: the docstring, the default is a unique
    folder under ./tracekit-traces/ (the first free of NAME, NAME-2, NAME-3, ...). os.path.exists
    is counted so that the mutant's endless loop fails the test instead of hanging it."""
    from tracekit.collect import parallel

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tracekit.collect.collector.run_timestamp", lambda: "20260101-000000")
    base = os.path.join("tracekit-traces", "tiny-tp2-bs1-p16-n4-20260101-000000")
    os.makedirs(base)
    os.makedirs(base + "-2")
    real_exists, calls = os.path.exists, []

    def exists(path):
        calls.append(path)
        assert len(calls) < 100, f"still looking for a free folder after {len(calls)} tries"
        return real_exists(path)

    monkeypatch.setattr(os.path, "exists", exists)
    folder, created = parallel.resolve_folder(None, "tiny-tp2-bs1-p16-n4", False, 2)
    monkeypatch.undo()
    assert (folder, created) == (base + "-3", True)
    assert os.path.isdir(tmp_path / folder)


def test_a_gloo_ranks_last_barrier_names_no_gpu(tmp_path, monkeypatch):
    """Mutant: collect/parallel_rank.py _rank_run ``if backend == "nccl":`` -> ``backend < "nccl"``:
    "gloo" sorts below "nccl", so a CPU (gloo) rank's barrier after recording was given
    ``device_ids=[rank]``. torch's barrier then puts its tensor on the accelerator's device
    ``rank`` (distributed_c10d.barrier: ``opts.device = torch.device(accelerator.type,
    device_ids[0])``): on a GPU host a CPU run would open a CUDA context on GPU r in every rank, or
    fail with more ranks than GPUs. device_ids is NCCL's (its docstring), so a gloo rank's barrier
    must be given none. A one-rank gloo world runs the tiny preset in this process, calibration
    off; the barrier is watched on its way to torch."""
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    import dataclasses

    import torch.distributed as dist

    from tracekit.collect import CollectOptions, parallel, parallel_rank

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch build has no gloo")
    loopback = parallel._loopback_interface()
    if loopback:
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", loopback)
    seen = []
    real_barrier = dist.barrier

    def barrier(*args, **kwargs):
        seen.append(kwargs.get("device_ids"))
        return real_barrier(*args, **kwargs)

    monkeypatch.setattr(dist, "barrier", barrier)
    opts = CollectOptions(preset="tiny", device="cpu", batch_size=1, prompt_len=4, new_tokens=2, calibrate=False)
    job = {
        "options": {**dataclasses.asdict(opts), "progress": False, "output": None},
        "tp": 1,
        "backend": "gloo",
        "device": "cpu",
        "folder": str(tmp_path),
        "port": parallel.free_port(),
    }
    threads = torch.get_num_threads()
    try:
        result = parallel_rank._rank_run(job, 0, str(tmp_path))
    finally:
        torch.set_num_threads(threads)
    assert os.path.isfile(result["trace_tmp"])
    assert seen == [None]


def test_the_metadata_reaches_a_trace_whose_window_starts_after_some_steps(tmp_path):
    """Mutant: collect/runner.py running ``if hasattr(prof, "preset_metadata_json"):`` -> ``if not``:
    on a torch that has preset_metadata_json (2.1 and later) the metadata was added only after
    ``prof.__enter__()``, and a scheduled profiler that waits (a window that skips the prefill or
    some decode steps) has not started recording then, so torch dropped it: the trace lost
    tracekit's keys. Rule: the docstring, ``metadata`` becomes top-level keys of the exported
    trace. Five matmuls as five profiler steps, two waited, one warm-up, two recorded."""
    torch = pytest.importorskip("torch")
    import json

    from tracekit.collect import runner

    path = tmp_path / "window.json"
    schedule = {"wait": 2, "warmup": 1, "active": 2, "repeat": 1}
    prof = runner.make_profiler("cpu", schedule, lambda p: p.export_chrome_trace(str(path)))
    with runner.running(prof, {"tracekit_test": json.dumps({"rank": 3})}):
        for _ in range(5):
            torch.mm(torch.ones(4, 4), torch.ones(4, 4))
            prof.step()
    trace = json.loads(path.read_text(encoding="utf-8"))
    assert trace.get("tracekit_test") == {"rank": 3}


def test_a_script_without_the_py_suffix_is_the_script_and_the_interpreter_is_dropped(tmp_path, monkeypatch):
    """Mutant: collect/script.py _is_python ``abspath(word) == abspath(sys.executable)`` -> ``!=``:
    every first word not named python* counted as the interpreter, so ``tracekit collect --
    ./serve --n 3`` (a Python file with no .py suffix, which parse_command accepts when readable)
    lost the script and its option and ran "3"; and this interpreter under a name not starting
    with "python" was taken for the script. Rule: the docstring's forms, ``["x.py", ...]`` is the
    script itself and ``["python", "x.py", ...]`` names the interpreter first."""
    from tracekit.collect import script

    serve = tmp_path / "serve"
    serve.write_text("print('hi')\n", encoding="utf-8")
    target = script.parse_command([str(serve), "--n", "3"])
    assert (target.path, target.argv) == (str(serve), (str(serve), "--n", "3"))
    interpreter = tmp_path / "bin" / "interp3"
    monkeypatch.setattr(script.sys, "executable", str(interpreter))
    main = tmp_path / "main.py"
    main.write_text("print('hi')\n", encoding="utf-8")
    target = script.parse_command([str(interpreter), "-u", str(main), "--n", "3"])
    assert (target.path, target.argv) == (str(main), (str(main), "--n", "3"))


def test_a_cuda_device_with_two_indices_is_refused(monkeypatch):
    """Mutant: collect/workloads.py resolve_device ``device.split(":", 1)[1]`` -> ``split(":", 2)``:
    of ``cuda:0:1`` only the "0" was checked, so the malformed name passed and reached torch
    later. Rule: the docstring validates explicit choices, and the error names the forms
    (cuda or cuda:N, N a GPU's index). A stand-in torch.cuda reports one GPU; cuda:0 passes."""
    torch = pytest.importorskip("torch")
    from tracekit.collect import workloads

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert workloads.resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(TracekitError, match="this machine has 1 GPU"):
        workloads.resolve_device("cuda:0:1")


# --- seed 59 (the sample's survivors in tracekit/collect, coverage-map mode) ----------------------


def test_an_output_folder_that_cannot_be_made_is_one_sentence(tmp_path):
    """Mutant: collect/collector.py resolve_output ``except OSError`` -> an exception nothing raises:
    an -o path under a regular file (its folder cannot be made: "Not a directory") escaped as a
    raw NotADirectoryError traceback instead of tracekit's one sentence naming the folder. The
    check runs before the (possibly long) run, so no model is built here."""
    from tracekit.collect.collector import resolve_output

    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a folder\n")
    with pytest.raises(TracekitError) as err:
        resolve_output(str(blocker / "runs" / "run.json"), "x", False)
    said = str(err.value)
    assert "cannot create the output folder" in said and str(blocker / "runs") in said
    assert not (blocker / "runs").exists() and blocker.read_text() == "a file, not a folder\n"


def test_the_api_seeds_a_run_as_the_cli_does_when_no_seed_is_given(tmp_path, monkeypatch):
    """Mutant: collect/collector.py CollectOptions ``seed: int = 0`` -> ``= 1``: a run collected
    through the Python API (tracekit.collect's docstring: ``collect(CollectOptions(preset="tiny",
    ...))``) without a seed drew other random weights and prompts than ``tracekit collect``
    without --seed, whose --help states its default, 0. The model build is stubbed to record the
    seed it is given and stop there (no model is built)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tracekit.cli import main
    from tracekit.collect import collect, workloads

    command = main.get_command(None, "collect")  # (lazily loaded)
    cli_default = next(p.default for p in command.params if p.name == "seed")
    assert cli_default == 0

    class Built(Exception):
        pass

    seeds = []

    def load_preset(name, device, dtype, layers=None, seed=None):
        seeds.append(seed)
        raise Built

    monkeypatch.setattr(workloads, "load_preset", load_preset)
    with pytest.raises(Built):
        collect(device="cpu", output=str(tmp_path / "run"), progress=False, calibrate=False)
    assert seeds == [cli_default]


def test_a_rank_that_ignores_sigterm_is_killed_when_the_wait_runs_out(monkeypatch):
    """Mutant: collect/parallel.py _stop ``except subprocess.TimeoutExpired`` -> an exception nothing
    raises: a rank still running when the run is stopped, that did not end within _TERM_WAIT_S of
    its SIGTERM (stuck in a collective, or ignoring the signal), escaped the stop as the wait's
    TimeoutExpired, left running, instead of being killed. _stop's docstring: "SIGTERM, then
    SIGKILL; reap them all". A Python child that ignores SIGTERM stands for the rank; the wait is
    cut to 0.2 s. It ends by SIGKILL (returncode -9) and is reaped."""
    import signal
    import subprocess
    import sys

    from tracekit.collect import parallel

    monkeypatch.setattr(parallel, "_TERM_WAIT_S", 0.2)
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"  # SIGTERM is ignored from here
        parallel._stop([proc])
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
