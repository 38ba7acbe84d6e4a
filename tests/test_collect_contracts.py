"""Contracts of `tracekit collect`'s calibration (tracekit/collect/calibrate.py), its single-process
collector (tracekit/collect/collector.py) and its tensor-parallel parent (tracekit/collect/parallel.py),
written from outside the code: docs/collecting.md, docs/ranks.md, the sidecar's documented keys
(tracekit/collect/sidecar.py's docstring), the --help texts of `tracekit collect`, the functions'
docstrings and comments, and hand arithmetic. Each docstring names the bug it catches.

Nothing here profiles a model or starts a rank: the measurements are replaced by fixed rounds, the
workload, the timed runs and the profiler by stand-ins, and the rank processes by a stand-in Popen
that writes what a rank would leave in the scratch folder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import types

import pytest

from tracekit import markers
from tracekit.collect import calibrate as cal
from tracekit.collect import collector, parallel
from tracekit.collect.collector import CollectOptions
from tracekit.errors import TracekitError

torch = pytest.importorskip("torch")


# --- calibrate.py: the rounds and when they have settled -------------------------------------------


def test_rounds_settle_when_their_best_two_are_within_ten_percent():
    """catches: `settled` comparing the wrong rounds (the two worst, or in given order), calling
    one round or two zero rounds settled. docs/collecting.md: "measured in rounds until the best
    two agree within 10%"; the docstring: the best two rounds. By hand: 91 is 9% under 100, 89 11%."""
    assert cal.settled([100.0, 10.0, 91.0])  # the 10 (a busy round) does not matter
    assert cal.settled([91.0, 100.0])
    assert not cal.settled([100.0, 89.0, 88.0])
    assert not cal.settled([10.0, 100.0, 11.0])  # the two worst agree, the best two do not
    assert not cal.settled([100.0])
    assert not cal.settled([0.0, 0.0])  # nothing was measured


def test_the_spread_is_one_minus_the_worst_over_the_best_round():
    """catches: a spread over the wrong rounds or of the wrong ratio. Module docstring: "the spread
    (1 - worst / best round)"; `spread`'s docstring: 0 when every round measured the same. By
    hand: 80 of 100 is 0.2."""
    assert cal.spread([80.0, 100.0, 90.0]) == pytest.approx(0.2)
    assert cal.spread([7.0, 7.0]) == 0.0
    assert cal.spread([]) == 0.0


def _rounds(monkeypatch, flops, copies=None, threads=2, peak=None):
    """calibrate's two measurements replaced by fixed rounds (FLOP/s and B/s), and the CPU's own
    bound by ``peak`` (a function of dtype and threads) or none."""
    flops = iter(flops)
    copies = iter(copies) if copies is not None else None
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(cal, "matmul_flops", lambda dev, dtype, budget: (next(flops), 256))
    monkeypatch.setattr(cal, "copy_bandwidth", lambda dev, budget: (next(copies) if copies else 20e9, 64 << 20))
    monkeypatch.setattr(cal, "cpu_peak_flops", peak or (lambda *a, **k: None))


def test_plausible_settled_rounds_stop_after_the_least_number_of_rounds(monkeypatch):
    """catches: a calibration that keeps measuring after its rounds are plausible and settled (or
    stops before MIN_ROUNDS), or records another ceiling than the best round. Module docstring:
    "at least MIN_ROUNDS, and more ... until the best two rounds agree within STABLE"; "the
    ceiling is the best round". The rounds given: 40, then 50 and 48 GFLOP/s, then more 48s."""
    flops = [40e9, 50e9] + [48e9] * cal.MAX_ROUNDS
    _rounds(monkeypatch, flops)
    out = cal.calibrate("cpu", torch.float32)
    checks = out["checks"]
    n = cal.MIN_ROUNDS
    assert checks["attempts"] == n
    assert checks["rounds"]["matmul_flops"] == flops[:n]
    assert out["matmul_flops"] == {"fp32": 50e9}
    assert out["copy_bandwidth"] == 20e9
    assert checks["spread"] == {"matmul_flops": pytest.approx(1 - 40 / 50), "copy_bandwidth": 0.0}
    assert (checks["plausible"], checks["stable"], checks["reliable"], checks["problems"]) == (True, True, True, [])


def test_unsettled_rounds_are_measured_again_until_the_best_two_agree(monkeypatch):
    """catches: a loop that stops at MIN_ROUNDS though the best two differ by more than 10%, or one
    that ignores the copy's rounds. Module docstring: more rounds until the best two agree. The
    first MIN_ROUNDS matmul rounds are 50 then 30s (best two 40% apart); the next one, 49, agrees
    with 50 within 2%: one round more. The copy is steady."""
    flops = [50e9] + [30e9] * (cal.MIN_ROUNDS - 1) + [49e9] * cal.MAX_ROUNDS
    _rounds(monkeypatch, flops)
    checks = cal.calibrate("cpu", torch.float32)["checks"]
    assert checks["attempts"] == cal.MIN_ROUNDS + 1
    assert checks["stable"] is True and checks["reliable"] is True
    # The same with the copy unsettled and the matmul steady.
    copies = [20e9] + [12e9] * (cal.MIN_ROUNDS - 1) + [19.8e9] * cal.MAX_ROUNDS
    _rounds(monkeypatch, [50e9] * 10, copies)
    out = cal.calibrate("cpu", torch.float32)
    checks = out["checks"]
    assert checks["attempts"] == cal.MIN_ROUNDS + 1
    assert out["copy_bandwidth"] == 20e9  # the best copy round, as for the matmul
    assert checks["spread"]["copy_bandwidth"] == pytest.approx(1 - 12 / 20)


def test_a_busy_round_does_not_make_the_best_one_implausible(monkeypatch):
    """catches: judging plausibility on the last (or worst) round instead of the best. Module
    docstring: "Interference only slows a measurement, so the ceiling is the best round". After
    50 and 49 GFLOP/s, the rest of the first MIN_ROUNDS rounds are busy 1 MFLOP/s ones; the best
    two (50 and 49) are plausible and agree, so the calibration stops there with 50 GFLOP/s."""
    flops = [50e9, 49e9] + [1e6] * (cal.MIN_ROUNDS - 2) + [48e9] * cal.MAX_ROUNDS
    _rounds(monkeypatch, flops)
    out = cal.calibrate("cpu", torch.float32)
    assert out["checks"]["plausible"] is True
    assert out["matmul_flops"]["fp32"] == 50e9
    assert out["checks"]["attempts"] == cal.MIN_ROUNDS


def test_reliable_needs_both_a_plausible_and_a_settled_measurement(monkeypatch):
    """catches: `reliable` as plausible OR stable. Module docstring: "checks.reliable is False when
    the result is implausible or did not settle". (a) Plausible rounds 20% apart for ever (50 then
    40s): stable False, one sentence saying the MAX_ROUNDS rounds did not settle, matmul spread
    1 - 40/50 = 20%. (b) Rounds that agree but sit under the floor: plausible False."""
    _rounds(monkeypatch, [50e9] + [40e9] * 10)
    checks = cal.calibrate("cpu", torch.float32)["checks"]
    assert (checks["plausible"], checks["stable"], checks["reliable"]) == (True, False, False)
    assert checks["attempts"] == cal.MAX_ROUNDS
    (sentence,) = checks["problems"]
    assert f"the {cal.MAX_ROUNDS} rounds did not settle" in sentence and "more than 10%" in sentence
    assert "matmul spread 20%" in sentence and "copy spread 0%" in sentence
    slow = cal.CPU_FLOOR_FLOPS["fp32"] * 2 / 10  # a tenth of the 2-thread floor, every round
    _rounds(monkeypatch, [slow] * 10)
    checks = cal.calibrate("cpu", torch.float32)["checks"]
    assert (checks["plausible"], checks["stable"], checks["reliable"]) == (False, True, False)
    assert len(checks["problems"]) == 1 and "below the floor" in checks["problems"][0]


def test_a_cpu_calibration_says_what_it_measured(monkeypatch):
    """catches: the sidecar's calibration entry naming the wrong dtype, sizes, rounds or threads.
    The sidecar docstring's keys (device, dtype, matmul_flops {dtype: FLOP/s}, copy_bandwidth,
    method, checks.cpu_peak_flops, against); the method names the rounds, the n x n product, the
    buffer in MiB (64 << 20 bytes is 64 MiB by hand) and the threads, "thread" for one."""
    _rounds(monkeypatch, [50e9] * 10, threads=2, peak=lambda dtype, threads, *a, **k: 100e9 * threads)
    out = cal.calibrate("cpu", torch.float32)
    assert (out["device"], out["dtype"], out["threads"], out["matmul_n"], out["copy_bytes"]) == (
        "cpu",
        "fp32",
        2,
        256,
        64 << 20,
    )
    assert f"best of {cal.MIN_ROUNDS} rounds" in out["method"]
    assert "256x256 fp32" in out["method"] and "64 MiB" in out["method"]
    assert out["method"].endswith("; 2 CPU threads")
    assert out["checks"]["cpu_peak_flops"] == 200e9
    assert "per-thread floors" in out["checks"]["against"] and "cpu_peak_flops" in out["checks"]["against"]
    _rounds(monkeypatch, [50e9] * 10, threads=1)
    one = cal.calibrate("cpu", torch.bfloat16)
    assert one["method"].endswith("; 1 CPU thread")
    assert one["dtype"] == "bf16" and set(one["matmul_flops"]) == {"bf16"}


def test_a_gpu_calibration_is_checked_against_its_datasheet_row(monkeypatch):
    """catches: a GPU measurement checked against nothing (or against the CPU floors), or a CPU
    thread count recorded for a GPU. Module docstring: a GPU's measurement is checked against its
    datasheet row, between GPU_PLAUSIBLE of the peak and the peak. No GPU is needed: the rounds are
    replaced. The H100 SXM's bf16 peak is 989.4 TFLOP/s: 700 is plausible, 50 (5%) is not."""
    name = "NVIDIA H100 80GB HBM3"
    _rounds(monkeypatch, [700e12] * 10, copies=[3e12] * 10)
    out = cal.calibrate("cuda", torch.bfloat16, device_name=name)
    checks = out["checks"]
    assert checks["against"] == "H100 SXM's datasheet row"
    assert (out["threads"], checks["cpu_peak_flops"], checks["plausible"]) == (None, None, True)
    assert "CPU thread" not in out["method"]
    _rounds(monkeypatch, [50e12] * 10, copies=[3e12] * 10)
    checks = cal.calibrate("cuda", torch.bfloat16, device_name=name)["checks"]
    assert checks["plausible"] is False and checks["attempts"] == cal.MAX_ROUNDS
    assert "outside 10%-105% of H100 SXM's" in checks["problems"][0]
    _rounds(monkeypatch, [50e12] * 10, copies=[3e12] * 10)
    unknown = cal.calibrate("cuda", torch.bfloat16, device_name="Nonesuch GPU 9000")["checks"]
    assert unknown["against"] == "nothing: the GPU is not in tracekit's database"
    assert unknown["plausible"] is True


# --- calibrate.py: the floors and plausibility ranges -----------------------------------------------


def test_the_cpu_floors_are_per_thread():
    """catches: floors not multiplied by the threads, or compared the wrong way. Module docstring:
    "a CPU's against a floor per thread (CPU_FLOOR_FLOPS, CPU_FLOOR_BANDWIDTH)". On 4 threads, 90%
    of four threads' floor is below it (one sentence each, naming 4 threads), 110% is not."""
    f4 = cal.CPU_FLOOR_FLOPS["fp32"] * 4
    b4 = cal.CPU_FLOOR_BANDWIDTH * 4
    assert cal.problems("cpu", "fp32", 1.1 * f4, 1.1 * b4, 4, cpu_peak=0) == []
    low = cal.problems("cpu", "fp32", 0.9 * f4, 0.9 * b4, 4, cpu_peak=0)
    assert len(low) == 2
    assert f"below the floor of {f4 / 1e9:.3g} GFLOP/s for 4 threads" in low[0]
    assert f"copy is below the floor of {b4 / 1e9:.3g} GB/s" in low[1]
    # One thread: the floor of one, and "thread" in the singular (threads unknown counts as one).
    f1 = cal.CPU_FLOOR_FLOPS["fp32"]
    (one,) = cal.problems("cpu", "fp32", 0.5 * f1, 10 * cal.CPU_FLOOR_BANDWIDTH, None, cpu_peak=0)
    assert one.endswith(f"below the floor of {f1 / 1e9:.3g} GFLOP/s for 1 thread")


def test_a_matmul_under_a_tenth_of_the_cpus_bound_is_implausible():
    """catches: the vector-unit check at the wrong fraction or the wrong side, or doubling up with
    the floor's sentence. docs/collecting.md: ceilings "that sit under a tenth of what the CPU's
    vector units and clock allow, are marked unreliable"; the check applies to a measurement that
    passed the floor. A bound of 100 floors on one thread: 5 floors (5%) is under a tenth, 11
    floors (11%) is not, half a floor gets only the floor's sentence; a bound of 0 skips it."""
    f1 = cal.CPU_FLOOR_FLOPS["fp32"]
    bw = 10 * cal.CPU_FLOOR_BANDWIDTH
    (far,) = cal.problems("cpu", "fp32", 5 * f1, bw, 1, cpu_peak=100 * f1)
    assert "under 10% of the" in far and far.endswith("on 1 thread")
    assert cal.problems("cpu", "fp32", 11 * f1, bw, 1, cpu_peak=100 * f1) == []
    (floor,) = cal.problems("cpu", "fp32", 0.5 * f1, bw, 1, cpu_peak=100 * f1)
    assert "below the floor" in floor
    assert cal.problems("cpu", "fp32", 5 * f1, bw, 1, cpu_peak=0) == []


def test_a_gpu_measurement_must_lie_between_a_tenth_of_its_peak_and_105_percent():
    """catches: the GPU range's edges moved or flipped. Module docstring: between GPU_PLAUSIBLE of
    the datasheet peak and the peak; the sentence says 10%-105%. H100 SXM: 989.4 TFLOP/s bf16 and
    3.35 TB/s. Within: the peak itself, 104%, 11%; outside: 106% (misread) and 9% (shared)."""
    from tracekit.specs.lookup import spec_by_name

    h100 = spec_by_name("h100-sxm")
    peak, bw = h100.peak_flops("bf16", "matrix"), h100.peak_bandwidth
    for share in (1.0, 1.04, 0.11):
        assert cal.problems("cuda", "bf16", share * peak, share * bw, None, h100) == [], share
    for share in (1.06, 0.09):
        out = cal.problems("cuda", "bf16", share * peak, share * bw, None, h100)
        assert len(out) == 2 and all("outside 10%-105%" in s for s in out), share
    assert cal.problems("cuda", "bf16", 1.0, 1.0, None, None) == []  # no datasheet: nothing to check


AVX2 = (
    "processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2\ncpu MHz\t\t: 1800.000\nprocessor\t: 1\ncpu MHz\t\t: 1200.000\n"
)


def test_the_cpu_bound_takes_the_widest_vector_unit_and_the_highest_clock():
    """catches: the bound read from a narrower unit than the CPU states, or from the lowest clock.
    The comment on FP32_FLOPS_PER_CYCLE: lanes x 2 (multiply + add) x FMA ports, so two 256-bit
    FMA ports are 8 x 2 x 2 = 32 fp32 FLOPs a cycle, AVX without FMA 8 x 2 = 16, four 128-bit NEON
    pipes 4 x 2 x 4 = 32, SSE2 4 x 2 = 8; "the highest clock stated": of 1.8 and 1.2 GHz lines (in that order)
    and a 3 GHz cpufreq maximum, 3 GHz. fp64 has half the lanes; bf16 is not bounded."""
    assert cal.cpu_peak_flops("fp32", 2, cpuinfo=AVX2, max_khz=3_000_000) == pytest.approx(2 * 3e9 * 32)
    assert cal.cpu_peak_flops("fp32", 1, cpuinfo=AVX2, max_khz=0) == pytest.approx(1.8e9 * 32)
    avx = AVX2.replace(" fma avx2", "")
    assert cal.cpu_peak_flops("fp32", 1, cpuinfo=avx, max_khz=0) == pytest.approx(1.8e9 * 16)
    sse = "flags\t: fpu sse2\ncpu MHz\t: 1000\n"
    assert cal.cpu_peak_flops("fp64", 1, cpuinfo=sse, max_khz=0) == pytest.approx(1e9 * 8 / 2)
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm\n"
    assert cal.cpu_peak_flops("fp32", 4, cpuinfo=arm, max_khz=2_000_000) == pytest.approx(4 * 2e9 * 32)
    assert cal.cpu_peak_flops("bf16", 4, cpuinfo=arm, max_khz=2_000_000) is None
    assert cal.cpu_peak_flops("fp32", 4, cpuinfo=arm, max_khz=0) is None  # no clock stated
    assert cal.cpu_peak_flops("fp32", 4, cpuinfo="cpu MHz\t: 1000\n", max_khz=0) is None  # no flags


# --- collector.py: the output path ------------------------------------------------------------------


def test_an_output_file_name_gets_the_trace_suffix_unless_it_has_a_json_one(tmp_path):
    """catches: -o names losing or doubling their suffix, or the parent folder not made. The
    docstring: "a file name without .json/.json.gz gets .pt.trace.json.gz added"."""
    from tracekit.collect.collector import resolve_output

    base = tmp_path / "new" / "deeper"
    assert resolve_output(str(base / "run"), "x", False) == str(base / "run") + markers.TRACE_SUFFIX
    assert resolve_output(str(base / "run.json"), "x", False) == str(base / "run.json")
    assert resolve_output(str(base / "run.json.gz"), "x", False) == str(base / "run.json.gz")
    assert base.is_dir()


def test_an_existing_trace_or_sidecar_is_not_overwritten_without_force(tmp_path):
    """catches: a check that misses a sidecar left alone, names the wrong file, or refuses even with
    --force. docs/collecting.md: "traces are never overwritten without --force"; the docstring:
    "An existing trace (or its sidecar) is never overwritten unless force"."""
    from tracekit.collect.collector import resolve_output

    trace = str(tmp_path / "run") + markers.TRACE_SUFFIX
    side = markers.sidecar_path_for(trace)
    open(side, "w").close()
    with pytest.raises(TracekitError) as err:
        resolve_output(str(tmp_path / "run"), "x", False)
    assert str(err.value).startswith(f"{side} already exists") and "--force" in str(err.value)
    open(trace, "w").close()
    with pytest.raises(TracekitError, match="already exists"):
        resolve_output(trace, "x", False)
    assert resolve_output(trace, "x", True) == trace


def test_default_names_take_the_next_free_number(tmp_path, monkeypatch):
    """catches: the default name not under ./tracekit-traces/, not <stem>-<time>, or a search for
    a free name that reuses one taken by a sidecar alone. docs/collecting.md: default output
    ./tracekit-traces/<preset>-bs<B>-p<P>-n<N>-<time>.pt.trace.json.gz, never overwritten; a folder
    given as -o (existing, or ending in a separator) gets a default name inside it."""
    from tracekit.collect.collector import resolve_output

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(collector, "run_timestamp", lambda: "20260101-000000")
    stem = "tiny-bs1-p64-n16"
    first = resolve_output(None, stem, False)
    assert first == os.path.join("tracekit-traces", f"{stem}-20260101-000000{markers.TRACE_SUFFIX}")
    open(first, "w").close()
    second = resolve_output(None, stem, False)
    assert second == os.path.join("tracekit-traces", f"{stem}-20260101-000000-2{markers.TRACE_SUFFIX}")
    open(markers.sidecar_path_for(second), "w").close()  # only its sidecar: still taken
    assert resolve_output(None, stem, False).endswith("-000000-3" + markers.TRACE_SUFFIX)
    (tmp_path / "out").mkdir()
    inside = resolve_output(str(tmp_path / "out"), stem, False)
    assert os.path.dirname(inside) == str(tmp_path / "out")
    assert os.path.dirname(resolve_output(str(tmp_path / "made") + os.sep, stem, False)) == str(tmp_path / "made")


# --- collector.py: the option checks ----------------------------------------------------------------


@pytest.mark.parametrize(
    "field,option,least",
    [
        ("batch_size", "--batch-size", 1),
        ("new_tokens", "--new-tokens", 1),
        ("warmup", "--warmup", 0),
        ("skip_steps", "--skip-steps", 0),
        ("record_steps", "--record-steps", 1),
        ("profiler_warmup", "--profiler-warmup", 0),
        ("layers", "--layers", 1),
        ("threads", "--threads", 1),
    ],
)
def test_each_count_option_is_refused_below_its_least_value(field, option, least):
    """catches: a count check dropped, keyed to the wrong option or at the wrong least value. The
    docstring: one clear error for a count option below its least value. A batch, a decode step, a
    recorded step, a layer and a thread must each be at least one (--help: sequences per batch,
    decode steps, decode steps to record, a preset's layers, torch's threads); warm-ups and skipped
    steps may be none (--help's defaults: --skip-steps 0, --warmup counts optional runs)."""
    from tracekit.collect.collector import check_counts

    check_counts(CollectOptions(**{field: least}))
    with pytest.raises(TracekitError) as err:
        check_counts(CollectOptions(**{field: least - 1}))
    assert str(err.value) == f"{option} must be at least {least}, not {least - 1}"


@pytest.mark.parametrize(
    "given,named",
    [
        ({"preset": "tiny", "model": "ckpt"}, "--preset and --model"),
        ({"model": "ckpt", "script": ["x.py"]}, "--model and a script"),
        ({"preset": "tiny", "script": ["x.py"]}, "--preset and a script"),
    ],
)
def test_two_workloads_are_refused_naming_both(given, named):
    """catches: a second workload silently ignored. docs/collecting.md lists three workloads (a
    preset, --model, a script); one run profiles one of them."""
    with pytest.raises(TracekitError) as err:
        collector.collect(CollectOptions(**given))
    assert named in str(err.value) and "choose one workload" in str(err.value)


def test_threads_apply_during_the_run_and_are_restored_after_it_even_on_failure(monkeypatch):
    """catches: --threads not set for the run, or leaking into the caller's process after it
    (--help: CPU threads for torch, torch.set_num_threads; collect() is also a Python API)."""
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    seen = []

    def run(opts):
        seen.append(torch.get_num_threads())
        raise TracekitError("stopped")

    monkeypatch.setattr(collector, "_collect_generation", run)
    with pytest.raises(TracekitError, match="stopped"):
        collector.collect(CollectOptions(threads=want))
    assert seen == [want]
    assert torch.get_num_threads() == before


def test_the_plan_takes_the_presets_sizes_unless_told_and_names_the_file_by_them():
    """catches: sizes not defaulting to the preset's or overriding it, and a default file name
    that does not say them. --help: -b/-p/-n "[default: the preset's]"; docs/collecting.md:
    <preset>-bs<B>-p<P>-n<N>."""
    from tracekit.collect.workloads import PRESETS

    tiny = PRESETS["tiny"]
    plan = collector.plan_generation(CollectOptions())
    assert (plan.preset.name, plan.batch, plan.prompt_len, plan.new_tokens) == (
        "tiny",
        tiny.batch_size,
        tiny.prompt_len,
        tiny.new_tokens,
    )
    assert plan.stem == f"tiny-bs{tiny.batch_size}-p{tiny.prompt_len}-n{tiny.new_tokens}"
    plan = collector.plan_generation(CollectOptions(preset="1b", batch_size=3, prompt_len=7, new_tokens=5))
    assert plan.stem == "1b-bs3-p7-n5" and (plan.batch, plan.prompt_len, plan.new_tokens) == (3, 7, 5)


def test_skip_steps_must_leave_a_decode_step_to_record():
    """catches: --skip-steps that skips every decode step accepted (an empty trace), or one that
    leaves the last one refused. --help: -n decode steps; --skip-steps decode steps to run before
    recording starts. Of 5 steps, skipping 4 records one; skipping 5 records none."""
    assert collector.plan_generation(CollectOptions(new_tokens=5, skip_steps=4)).new_tokens == 5
    with pytest.raises(TracekitError, match="--skip-steps 5 leaves none of the 5 decode steps"):
        collector.plan_generation(CollectOptions(new_tokens=5, skip_steps=5))


def test_a_model_run_needs_a_folder_takes_no_layers_and_is_named_by_its_folder(tmp_path):
    """catches: --model of a missing folder or with --layers accepted, or a default name that is
    not the checkpoint's. --help: --model "A Hugging Face checkpoint folder on disk"; --layers
    "Override a preset's layer count"; docs/collecting.md's default name, with the folder's name
    in the preset's place (a trailing separator is no name)."""
    with pytest.raises(TracekitError, match="no such folder"):
        collector.plan_generation(CollectOptions(model=str(tmp_path / "missing")))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with pytest.raises(TracekitError, match="--layers applies to the built-in presets"):
        collector.plan_generation(CollectOptions(model=str(ckpt), layers=2))
    plan = collector.plan_generation(CollectOptions(model=str(ckpt) + os.sep, batch_size=2, prompt_len=8, new_tokens=3))
    assert plan.preset is None and plan.stem == "ckpt-bs2-p8-n3"


# --- collector.py: what the sidecar records ---------------------------------------------------------


def _workload(kind="preset", preset="tiny", model_path=None):
    return types.SimpleNamespace(
        kind=kind,
        preset=preset,
        model_path=model_path,
        config=types.SimpleNamespace(hidden_size=8, num_attention_heads=2),
        architecture="LlamaForCausalLM",
        parameters=1234,
    )


def test_the_workload_entry_records_the_plan_and_the_compile_choices():
    """catches: sizes, dtype or the compile flags recorded wrongly. Sidecar docstring: workload
    kind, preset, model_config, dtype ("fp32" | "bf16" | "fp16"), batch_size, prompt_len,
    new_tokens, device, compile, cuda_graphs. --help: --cuda-graphs is torch.compile mode
    reduce-overhead, so it compiles too; a layer override is recorded only when given."""
    opts = CollectOptions(cuda_graphs=True, batch_size=2, prompt_len=9, new_tokens=4)
    plan = collector.plan_generation(opts)
    info = collector.workload_info(_workload(), opts, plan, "cuda", torch.bfloat16)
    assert (info["kind"], info["preset"], info["dtype"], info["device"]) == ("preset", "tiny", "bf16", "cuda")
    assert (info["batch_size"], info["prompt_len"], info["new_tokens"]) == (2, 9, 4)
    assert (info["compile"], info["cuda_graphs"]) == (True, True)
    assert info["model_config"] == {"hidden_size": 8, "num_attention_heads": 2}
    assert "layers_override" not in info
    opts = CollectOptions(compile=True, layers=2)
    info = collector.workload_info(_workload(), opts, collector.plan_generation(opts), "cpu", torch.float32)
    assert (info["compile"], info["cuda_graphs"], info["layers_override"], info["dtype"]) == (True, False, 2, "fp32")


def test_the_timing_entry_keeps_the_unprofiled_and_the_profiled_run_apart():
    """catches: the profiled run's times filed as the unprofiled ones (or the other way), or the
    wrong counts. Sidecar docstring: ttft_ms, tpot_ms, wall_ms from the run without the profiler;
    profiled_* from the profiled run; profiler_overhead_ratio profiled / unprofiled time of what
    the trace records (all of it here: 30 / 20 = 1.5); warmup_runs; synchronized (a GPU run)."""
    from tracekit.collect.runner import RunTiming, Schedule

    plain = RunTiming(ttft_ms=5.0, tpot_ms=[3.0, 3.0], wall_ms=20.0)
    prof = RunTiming(ttft_ms=8.0, tpot_ms=[4.0, 5.0], wall_ms=30.0)
    t = collector.timing_info(plain, 4, prof, Schedule(), CollectOptions(warmup=2), "cpu", 2)
    assert (t["ttft_ms"], t["tpot_ms"], t["wall_ms"]) == (5.0, [3.0, 3.0], 20.0)
    assert (t["profiled_ttft_ms"], t["profiled_tpot_ms"], t["profiled_wall_ms"]) == (8.0, [4.0, 5.0], 30.0)
    assert t["profiler_overhead_ratio"] == pytest.approx(1.5)
    assert (t["timed_runs"], t["warmup_runs"], t["synchronized"]) == (4, 2, False)
    assert "of 4 unprofiled run(s) after 2 warm-up run(s)" in t["method"] and "synchronize" not in t["method"]
    gpu = collector.timing_info(plain, 4, prof, Schedule(), CollectOptions(), "cuda:1", 2)
    assert gpu["synchronized"] is True and "torch.cuda.synchronize()" in gpu["method"]


def test_a_busy_machine_is_noted_for_a_cpu_run_only():
    """catches: the busy-machine sentence dropped or given to a GPU run. docs/collecting.md: collect
    measures how much CPU other processes took while it ran and says so; sidecar docstring: notes,
    warnings about the measurement (e.g. a busy machine). Other processes held 3 of 4 cores."""
    busy = {"cores": 4, "threads": 1, "contention": {"other_cores": 3.0, "seconds": 2.0, "busy": True}}
    (note,) = collector.measurement_notes(busy, "cpu", 1.2)
    assert note.startswith("the machine was busy")
    assert collector.measurement_notes(busy, "cuda", 1.2) == []
    idle = {**busy, "contention": {"other_cores": 0.1, "seconds": 2.0, "busy": False}}
    assert collector.measurement_notes(idle, "cpu", 1.2) == []


class _Gen:
    """A generation whose every run takes 10 ms of the collector's (fake) clock."""

    def __init__(self, now):
        self.now, self.calls = now, []

    def run(self, mark=False, on_step=None):
        from tracekit.collect.runner import RunTiming

        self.calls.append(mark)
        self.now[0] += 0.010
        return RunTiming(ttft_ms=1.0, tpot_ms=[1.0], wall_ms=10.0 + len(self.calls) / 100)


def test_warm_ups_come_first_and_the_agreed_decision_sets_the_timed_runs(monkeypatch):
    """catches: a wrong number of warm-ups, or the ranks' agreed decision ignored. --help: --warmup
    unprofiled warm-up generations first; measure's docstring: ``agree`` turns this process's "time
    another run?" into the decision every process acts on. Warm-ups are unmarked runs. With an agree
    that wants 7 timed runs, 7 are made though 5 would do alone; the local wish (more while under
    5 short runs) is what agree is asked about. One that says no at once: one timed run."""
    from tracekit.collect import runner

    now = [100.0]
    monkeypatch.setattr(collector, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    monkeypatch.setattr(runner, "profiled_run", lambda *a, **k: runner.RunTiming(1.0, [1.0], 1.0))
    asked = []

    def agree(more):
        asked.append(more)
        return len(asked) < 7

    gen = _Gen(now)
    _, n, _, _ = collector.measure(gen, CollectOptions(warmup=3), collector.Progress(False, 0), "unused", {}, agree)
    assert gen.calls[:3] == [False, False, False] and all(gen.calls[3:])
    assert n == 7 and len(gen.calls) == 3 + 7
    assert asked == [True, True, True, True, False, False, False]
    gen = _Gen(now)
    _, n, _, _ = collector.measure(
        gen, CollectOptions(warmup=0), collector.Progress(False, 0), "unused", {}, lambda m: False
    )
    assert n == 1 and gen.calls == [True]


@pytest.mark.parametrize("stop", [RuntimeError, KeyboardInterrupt])
def test_a_profiled_run_that_fails_leaves_no_temporary_trace(tmp_path, monkeypatch, stop):
    """catches: a half-written temporary trace left beside the outputs when the profiled run fails
    or is interrupted (Ctrl-C). docs/ranks.md and collect: nothing is written unless the run
    finished; the failure itself still reaches the caller."""
    from tracekit.collect import runner

    tmp = tmp_path / ".run.tmp.json.gz"

    def profiled(gen, schedule, path, **kw):
        open(path, "w").close()
        raise stop("stopped")

    monkeypatch.setattr(runner, "profiled_run", profiled)
    with pytest.raises(stop):
        collector.measure(_Gen([0.0]), CollectOptions(warmup=0), collector.Progress(False, 0), str(tmp), {})
    assert not tmp.exists()


def test_finishing_refuses_a_trace_that_appeared_and_never_loses_a_recorded_one(tmp_path, monkeypatch):
    """catches: overwriting a trace that appeared during the run without --force, or deleting the
    recorded trace when the last move fails. docs/collecting.md: never overwritten without --force;
    finish's comment: "The run is done and recorded: never lose it to a failing last step"."""
    trace = str(tmp_path / "run.pt.trace.json.gz")
    tmp = str(tmp_path / ".run.tmp1.json.gz")
    open(tmp, "w").close()
    open(trace, "w").close()
    with pytest.raises(TracekitError, match="appeared while collecting: pass --force"):
        collector.finish(tmp, trace, {"x": 1}, False)
    assert not os.path.exists(tmp) and os.path.getsize(trace) == 0
    open(tmp, "w").write("recorded")
    collector.finish(tmp, trace, {"x": 1}, True)
    assert open(trace).read() == "recorded" and json.load(open(markers.sidecar_path_for(trace))) == {"x": 1}

    def fail(a, b):
        raise OSError(18, "Invalid cross-device link")

    open(tmp, "w").write("again")
    monkeypatch.setattr(collector.os, "replace", fail)
    with pytest.raises(TracekitError) as err:
        collector.finish(tmp, str(tmp_path / "other.pt.trace.json.gz"), {"x": 2}, True)
    assert f"it is kept at {tmp}" in str(err.value)
    assert open(tmp).read() == "again"


def _stub_generation(monkeypatch, calibrations):
    """collect's generation path with the model, the timed and profiled runs and the calibration
    replaced: each run of 20 ms unprofiled and 30 ms profiled; the calibration stand-in records
    its arguments in ``calibrations``."""
    from tracekit.collect import calibrate, runner, workloads

    built = []

    def load_preset(name, device, dtype, layers=None, seed=0):
        built.append(name)
        return _workload(preset=name)

    def measure(gen, opts, progress, tmp, meta, agree=None):
        open(tmp, "w").write(meta["tracekit"])
        plain = runner.RunTiming(5.0, [3.0] * 4, 20.0)
        return plain, 3, runner.RunTiming(8.0, [4.0] * 4, 30.0), runner.Schedule()

    def calibrated(device, dtype, device_name=None):
        calibrations.append((device, dtype, device_name))
        return {"device": device, "stand_in": True}

    monkeypatch.setattr(workloads, "load_preset", load_preset)
    monkeypatch.setattr(runner, "Generator", lambda *a, **k: object())
    monkeypatch.setattr(collector, "measure", measure)
    monkeypatch.setattr(calibrate, "calibrate", calibrated)
    return built


def test_a_preset_run_writes_the_trace_and_a_sidecar_describing_it(tmp_path, monkeypatch):
    """catches: the sidecar of a preset run missing what the docs say it records, or calibrating
    with --no-calibrate. docs/collecting.md: a <name>.tracekit.json sidecar beside the trace with
    workload, versions, device, TTFT/TPOT, the profiler's overhead and the measured ceilings;
    the sidecar docstring: calibration None with --no-calibrate; the trace's own summary names its
    sidecar and workload (trace_metadata: top-level key ``tracekit``)."""
    calibrations = []
    _stub_generation(monkeypatch, calibrations)
    out = collector.collect(CollectOptions(device="cpu", new_tokens=4, output=str(tmp_path / "run"), progress=False))
    assert out.trace_path == str(tmp_path / "run") + markers.TRACE_SUFFIX
    assert out.sidecar_path == markers.sidecar_path_for(out.trace_path)
    side = json.load(open(out.sidecar_path))
    assert side == json.loads(json.dumps(out.sidecar))
    assert (side["workload"]["kind"], side["workload"]["preset"], side["workload"]["new_tokens"]) == (
        "preset",
        "tiny",
        4,
    )
    assert side["device"]["type"] == "cpu" and "contention" in side["device"]
    assert side["timing"]["profiler_overhead_ratio"] == pytest.approx(1.5)
    assert side["calibration"] == {"device": "cpu", "stand_in": True}
    assert calibrations == [("cpu", torch.float32, side["device"]["name"])]
    summary = json.loads(open(out.trace_path).read())
    assert summary["sidecar"] == os.path.basename(out.sidecar_path)
    assert summary["workload"]["preset"] == "tiny" and "model_config" not in summary["workload"]
    calibrations.clear()
    out = collector.collect(
        CollectOptions(device="cpu", new_tokens=4, output=str(tmp_path / "b"), progress=False, calibrate=False)
    )
    assert out.sidecar["calibration"] is None and calibrations == []


def test_a_generation_run_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    """catches: a refusal that comes only after the (possibly long) model build and run. Comment
    in _collect_generation: the output is checked before the run; --help: --cuda-graphs replays
    decode as CUDA graphs, so a CPU run cannot take it."""
    built = _stub_generation(monkeypatch, [])
    with pytest.raises(TracekitError, match="--cuda-graphs needs a CUDA/ROCm device"):
        collector.collect(CollectOptions(device="cpu", cuda_graphs=True, output=str(tmp_path / "g"), progress=False))
    open(str(tmp_path / "run") + markers.TRACE_SUFFIX, "w").close()
    with pytest.raises(TracekitError, match="already exists"):
        collector.collect(CollectOptions(device="cpu", output=str(tmp_path / "run"), progress=False))
    assert built == []


def test_a_script_run_records_the_script_its_arguments_and_no_model(tmp_path, monkeypatch):
    """catches: a script run's sidecar claiming a model, a dtype it was not told, or TTFT/TPOT it did
    not measure. Sidecar docstring: script runs add script, argv; docs/collecting.md: `tracekit
    collect -- python my_script.py ARGS`; the script's timing: it ran once, under the profiler
    (its wall time is the profiled one; TTFT/TPOT come from its markers in the trace); the summary
    stored in the trace (trace_metadata) names the script."""
    from tracekit.collect import runner, script

    job = tmp_path / "job.py"
    job.write_text("x = 1\n")

    class Prof:
        def export_chrome_trace(self, path):
            open(path, "w").write("{}")

    monkeypatch.setattr(runner, "make_profiler", lambda device_type, *a, **k: Prof())
    metas = []
    monkeypatch.setattr(runner, "running", lambda prof, meta: metas.append(meta) or contextlib.nullcontext())
    monkeypatch.setattr(script, "run_target", lambda target: 12.5)
    opts = CollectOptions(
        script=["python", str(job), "--n", "3"],
        device="cpu",
        calibrate=False,
        output=str(tmp_path / "s"),
        progress=False,
    )
    out = collector.collect(opts)
    w = out.sidecar["workload"]
    assert (w["kind"], w["script"], w["argv"]) == ("script", str(job), ["--n", "3"])
    assert (w["preset"], w["model_path"], w["model_config"], w["dtype"]) == (None, None, None, None)
    t = out.sidecar["timing"]
    assert (t["profiled_wall_ms"], t["wall_ms"], t["ttft_ms"], t["tpot_ms"]) == (12.5, None, None, None)
    assert out.sidecar["schedule"]["prefill_recorded"] is True and out.sidecar["calibration"] is None
    assert os.path.isfile(out.trace_path)
    (meta,) = metas  # the trace's own summary (trace_metadata) names the script too
    assert json.loads(meta["tracekit"])["workload"]["script"] == str(job)
    opts = CollectOptions(script=["-m", "pkg.serve"], device="cpu", dtype="bf16", calibrate=False, progress=False)
    monkeypatch.chdir(tmp_path)
    w = collector.collect(opts).sidecar["workload"]
    assert (w["script"], w["dtype"], w["argv"]) == ("-m pkg.serve", "bf16", [])


# --- parallel.py: the checks before anything starts -------------------------------------------------


def test_tp_must_be_a_whole_number_of_ranks_and_a_preset_run():
    """catches: --tp True (a bool is an int in Python) or 2.0 taken as ranks, or --compile and
    --cuda-graphs let through. docs/ranks.md: refused with one sentence: --tp below 1, --tp with
    --script, --model, --compile or --cuda-graphs."""
    for bad in (True, 2.0, "2"):
        with pytest.raises(TracekitError, match="whole number of ranks"):
            parallel.check_tp(bad, CollectOptions())
    with pytest.raises(TracekitError, match="--tp must be at least 1, not 0"):
        parallel.check_tp(0, CollectOptions())
    for opts in (CollectOptions(compile=True), CollectOptions(cuda_graphs=True)):
        with pytest.raises(TracekitError, match="--compile or --cuda-graphs"):
            parallel.check_tp(2, opts)
    with pytest.raises(TracekitError, match="--tp runs the built-in presets"):
        parallel.check_tp(2, CollectOptions(script=["x.py"]))
    with pytest.raises(TracekitError, match="sharding a checkpoint from --model is not supported"):
        parallel.check_tp(2, CollectOptions(model="ckpt"))
    parallel.check_tp(1, CollectOptions(preset="tiny"))
    parallel.check_tp(2, CollectOptions(preset="tiny"))


def test_the_tiny_preset_shards_over_one_or_two_ranks_only():
    """catches: a shard that divides the wrong counts, or a --tp accepted that splits a KV head.
    docs/ranks.md: each rank holds heads/N query heads, KV heads/N and intermediate/N; "the tiny
    preset has 4 heads and 2 KV heads, so it allows --tp 1 or 2". --tp 4 divides 4 heads and 688
    (4 x 172) but not 2 KV heads: only those are named. A config without KV heads has as many as
    heads (multi-head attention): 6 of each over 3 ranks is 2 and 2."""
    from tracekit.collect.workloads import PRESETS

    cfg = PRESETS["tiny"].config
    one = parallel.shard_sizes(cfg, 1)
    assert (one["num_attention_heads"], one["num_key_value_heads"], one["intermediate_size"]) == (4, 2, 688)
    two = parallel.shard_sizes(cfg, 2)
    assert (two["num_attention_heads"], two["num_key_value_heads"], two["intermediate_size"]) == (2, 1, 344)
    assert two["head_dim"] == one["head_dim"] == 256 // 4
    with pytest.raises(TracekitError) as err:
        parallel.shard_sizes(cfg, 4)
    assert str(err.value).startswith("--tp 4 does not divide the model's KV heads (2): ")
    mha = {"num_attention_heads": 6, "intermediate_size": 12, "hidden_size": 48}
    assert parallel.shard_sizes(mha, 3)["num_key_value_heads"] == 2
    with pytest.raises(TracekitError) as err:
        parallel.shard_sizes({**mha, "intermediate_size": 8}, 4)
    assert str(err.value).startswith("--tp 4 does not divide the model's attention heads (6) or KV heads (6): ")


def test_a_tp_output_is_a_folder(tmp_path):
    """catches: -o with --tp taken as a trace file, or a trailing separator kept in the folder's name.
    docs/ranks.md: "With -o the path is a folder" (`-o tp2/`); --help: with --tp, -o is a folder.
    A new folder is this run's (created), an existing empty one is not."""
    for name in ("x.json", "x.json.gz", "x.json.zst"):
        with pytest.raises(TracekitError, match="not a trace file"):
            parallel.resolve_folder(str(tmp_path / name), "s", False, 2)
    (tmp_path / "file").write_text("x")
    with pytest.raises(TracekitError, match="is a file"):
        parallel.resolve_folder(str(tmp_path / "file"), "s", False, 2)
    folder, created = parallel.resolve_folder(str(tmp_path / "tp2") + "/", "s", False, 2)
    assert (folder, created) == (str(tmp_path / "tp2"), True) and os.path.isdir(folder)
    assert parallel.resolve_folder(folder, "s", False, 2) == (folder, False)


def test_a_folder_with_other_runs_traces_is_refused_even_with_force(tmp_path):
    """catches: a folder that holds another run's traces accepted (it would be read as part of this
    run), rank files of a wider run counted as this run's, or an unbounded list. docs/ranks.md:
    "a folder that already holds other traces (a folder is read as one run)" is refused; rank
    files rank0..rank{N-1} are this run's (rank0.pt.trace.json.gz ... in the folder). For --tp 2,
    rank2's trace is another run's; of four others, those not named are "and more"."""
    out = tmp_path / "out"
    out.mkdir()
    (out / parallel.rank_trace_name(2)).write_text("{}")
    with pytest.raises(TracekitError, match=r"already holds other traces \(rank2\.pt\.trace\.json\.gz\)"):
        parallel.resolve_folder(str(out), "s", True, 2)
    for k in range(3):
        (out / f"n{k}.pt.trace.json").write_text("{}")
    with pytest.raises(TracekitError) as err:
        parallel.resolve_folder(str(out), "s", True, 2)
    listed = str(err.value).split("other traces (", 1)[1].split(")", 1)[0]
    named = listed.replace(" and more", "").split(", ")
    assert set(named) <= {"rank2.pt.trace.json.gz", "n0.pt.trace.json", "n1.pt.trace.json", "n2.pt.trace.json"}
    assert len(named) == len(set(named)) >= 1
    assert listed.endswith(" and more") == (len(named) < 4)  # "and more" exactly when some are left out


def test_this_runs_rank_files_are_overwritten_only_with_force(tmp_path):
    """catches: an earlier run's rank files overwritten without --force, or refused with it.
    docs/ranks.md: "Rank files from an earlier run are overwritten only with --force". The names
    are docs/ranks.md's: rank0.pt.trace.json.gz, rank0.tracekit.json, ..."""
    out = tmp_path / "prev"
    out.mkdir()
    assert parallel.rank_trace_name(1) == "rank1.pt.trace.json.gz"
    (out / "rank1.pt.trace.json.gz").write_text("{}")
    with pytest.raises(TracekitError) as err:
        parallel.resolve_folder(str(out), "s", False, 2)
    assert "rank1.pt.trace.json.gz" in str(err.value) and "--force" in str(err.value)
    assert parallel.resolve_folder(str(out), "s", True, 2) == (str(out), False)


# --- parallel.py: the parent ------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _capture_jobs(monkeypatch):
    jobs = []

    def started(scratch, job, tp):
        jobs.append((scratch, job))
        raise _Stop

    monkeypatch.setattr(parallel, "_run_ranks", started)
    return jobs


def test_cpu_ranks_get_a_share_of_the_cores_unless_threads_are_given(tmp_path, monkeypatch):
    """catches: --threads overridden for the ranks, a share of 0 threads on a small machine, or the
    job not reaching the ranks. docs/ranks.md: "On the CPU each rank gets cores/N threads unless you
    pass --threads"; by hand, 1 core over 2 ranks still needs a thread each. The ranks show no bar
    and write no file of their own (the parent writes the folder)."""
    jobs = _capture_jobs(monkeypatch)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    opts = CollectOptions(device="cpu", output=str(tmp_path / "a"), progress=True)
    with pytest.raises(_Stop):
        parallel.collect_tp(opts, 2)
    with pytest.raises(_Stop):
        parallel.collect_tp(CollectOptions(device="cpu", output=str(tmp_path / "b"), threads=3), 2)
    (_, first), (_, second) = jobs
    assert first["options"]["threads"] == 1 and second["options"]["threads"] == 3
    assert (first["tp"], first["backend"], first["device"], first["parent"]) == (2, "gloo", "cpu", os.getpid())
    assert (first["options"]["progress"], first["options"]["output"]) == (False, None)


def test_the_default_tp_folder_is_named_as_documented_and_announced(tmp_path, monkeypatch):
    """catches: a default folder named otherwise than docs/ranks.md says ("a new folder of its own
    under ./tracekit-traces/, for example tiny-tp2-bs1-p64-n16-<time>/", the tiny preset's sizes),
    or an announcement naming the wrong run. The announcement comes once, after the checks."""
    from tracekit.collect.workloads import PRESETS

    tiny = PRESETS["tiny"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(collector, "run_timestamp", lambda: "20260101-000000")
    jobs = _capture_jobs(monkeypatch)
    said = []
    with pytest.raises(_Stop):
        parallel.collect_tp(CollectOptions(device="cpu", threads=1), 2, announce=said.append)
    want = os.path.join(
        "tracekit-traces", f"tiny-tp2-bs{tiny.batch_size}-p{tiny.prompt_len}-n{tiny.new_tokens}-20260101-000000"
    )
    assert jobs[0][1]["folder"] == want
    (line,) = said
    assert line.startswith("starting 2 tensor-parallel ranks of the tiny preset (gloo on cpu")
    assert line.endswith(f"into {want}")
    said.clear()
    with pytest.raises(TracekitError):
        parallel.collect_tp(CollectOptions(device="cpu", layers=0), 2, announce=said.append)
    assert said == []


def test_gpu_ranks_need_one_gpu_each_and_the_plain_cuda_device(tmp_path, monkeypatch):
    """catches: --tp N started on fewer than N GPUs, --device cuda:1 accepted (rank r runs on
    cuda:r), or GPU ranks given the CPU's thread share. docs/ranks.md: "rank r runs on cuda:r and
    the ranks talk over NCCL ... --tp N then needs N GPUs"; "On the CPU each rank gets cores/N
    threads". A stand-in torch.cuda reports the GPUs; nothing starts and no folder is made."""
    import torch.distributed as dist

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    out = tmp_path / "tp"
    with pytest.raises(TracekitError, match=r"--tp 2 needs 2 GPUs \(one per rank\) and this machine has 1"):
        parallel.collect_tp(CollectOptions(device="cuda", output=str(out)), 2)
    with pytest.raises(TracekitError, match="pass --device cuda, not --device cuda:0"):
        parallel.collect_tp(CollectOptions(device="cuda:0", output=str(out)), 1)
    assert not out.exists()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    jobs = _capture_jobs(monkeypatch)
    with pytest.raises(_Stop):
        parallel.collect_tp(CollectOptions(device="auto", output=str(out)), 2)
    job = jobs[0][1]
    assert (job["backend"], job["device"], job["options"]["threads"]) == ("nccl", "cuda", None)


def _rank_result(scratch, r, notes=(), calibration=None):
    tmp = os.path.join(scratch, f"rank{r}.tmp.json")
    open(tmp, "w").write(json.dumps({"rank": r}))
    sidecar = {"workload": {"rank": r}, "calibration": calibration, "notes": list(notes)}
    return {"ok": True, "trace_tmp": tmp, "sidecar": sidecar}


def test_a_finished_run_leaves_one_trace_and_sidecar_per_rank_with_rank_zeros_calibration(tmp_path, monkeypatch):
    """catches: traces moved to the wrong names, the scratch folder left behind, calibration not
    shared (or rank 0's marked as shared), notes lost or repeated. docs/ranks.md: the folder holds
    rank0.pt.trace.json.gz rank0.tracekit.json rank1...; "Rank 0 measures the device ceilings once
    ... every rank's sidecar gets the same figures"; ParallelResult: the folder and one result per
    rank (result.folder, result.trace_paths)."""
    calib = {"device": "cpu", "copy_bandwidth": 5e9}

    def run(scratch, job, tp):
        return [
            _rank_result(scratch, 0, notes=["b", "a"], calibration=calib),
            _rank_result(scratch, 1, notes=["a"], calibration={"device": "cpu", "own": True}),
        ]

    monkeypatch.setattr(parallel, "_run_ranks", run)
    out = tmp_path / "tp2"
    res = parallel.collect_tp(CollectOptions(device="cpu", output=str(out) + "/", threads=1), 2)
    names = ["rank0.pt.trace.json.gz", "rank0.tracekit.json", "rank1.pt.trace.json.gz", "rank1.tracekit.json"]
    assert sorted(os.listdir(out)) == names
    assert (res.folder, res.world_size, res.backend) == (str(out), 2, "gloo")
    assert res.trace_paths == [str(out / "rank0.pt.trace.json.gz"), str(out / "rank1.pt.trace.json.gz")]
    assert json.load(open(out / "rank1.pt.trace.json.gz")) == {"rank": 1}
    side0, side1 = (json.load(open(out / f"rank{r}.tracekit.json")) for r in (0, 1))
    assert side0["calibration"] == calib
    assert side1["calibration"] == {**calib, "shared_from_rank": 0}
    assert res.notes == ["a", "b"]


def test_a_failed_run_removes_what_it_made_and_keeps_what_was_there(tmp_path, monkeypatch):
    """catches: a failed run leaving its scratch folder or an empty output folder behind, or removing
    a folder (and its files) that was there before. docs/ranks.md: the other ranks are stopped and
    nothing in the folder is written or overwritten; the ranks record into a hidden scratch folder;
    the error names the rank."""

    def run(scratch, job, tp):
        open(os.path.join(scratch, "rank0.log"), "w").close()
        raise TracekitError("rank 1 of 2 failed: boom")

    monkeypatch.setattr(parallel, "_run_ranks", run)
    new = tmp_path / "new"
    with pytest.raises(TracekitError, match="rank 1 of 2 failed"):
        parallel.collect_tp(CollectOptions(device="cpu", output=str(new), threads=1), 2)
    assert not new.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "README.txt").write_text("mine")
    with pytest.raises(TracekitError):
        parallel.collect_tp(CollectOptions(device="cpu", output=str(kept), threads=1), 2)
    assert os.listdir(kept) == ["README.txt"]


# --- parallel.py: the ranks' processes, replaced by a stand-in Popen -------------------------------


class _Ranks:
    """A stand-in for subprocess.Popen: rank r "runs" as ``plan[r]`` says (exit code or None for
    still running, or a list of what each poll sees; the result it leaves or None; its log text),
    and what it was started with is kept."""

    def __init__(self, plan):
        self.plan, self.started, self.terminated = plan, [], []
        outer = self

        class Popen:
            def __init__(self, args, stdin=None, stdout=None, stderr=None, env=None):
                self.rank = int(args[-1])
                outer.started.append((args, env))
                code, result, log = outer.plan[self.rank]
                if result is not None:
                    with open(parallel.result_path(args[-2], self.rank), "w") as f:
                        json.dump(result, f)
                stdout.write(log.encode())
                stdout.flush()
                self.codes = list(code) if isinstance(code, list) else [code]  # each poll's, the last kept
                self.returncode = self.codes[0]

            def poll(self):
                self.returncode = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
                return self.returncode

            def terminate(self):
                outer.terminated.append(self.rank)
                self.codes, self.returncode = [-signal.SIGTERM], -signal.SIGTERM

            def kill(self):
                self.returncode = -signal.SIGKILL

            def wait(self, timeout=None):
                return self.returncode

        self.Popen = Popen


def _start(tmp_path, monkeypatch, plan, threads=2, env=None):
    ranks = _Ranks(plan)
    monkeypatch.setattr(parallel.subprocess, "Popen", ranks.Popen)
    monkeypatch.setattr(parallel, "_GRACE_S", 0.05)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    job = {"backend": "gloo", "options": {"threads": threads}, "port": 1234}
    return ranks, lambda: parallel._start_and_wait(str(scratch), job, len(plan)), str(scratch)


def test_ranks_start_as_tracekits_rank_module_with_the_jobs_environment(tmp_path, monkeypatch):
    """catches: ranks started without this tracekit on their path, without their thread count, or
    talking gloo over a network interface; or results returned out of rank order. The module
    docstring: N copies of `python -m tracekit.collect.parallel_rank`; the ranks import this
    tracekit, wherever it was imported from; every rank is on this machine (loopback); docs/ranks.md:
    each CPU rank gets its threads."""
    ok = [(0, {"ok": True, "rank": r}, "") for r in range(2)]
    ranks, start, scratch = _start(tmp_path, monkeypatch, ok, threads=3, env={"PYTHONPATH": "/elsewhere"})
    assert [res["rank"] for res in start()] == [0, 1] and ranks.terminated == []
    import tracekit

    root = os.path.dirname(os.path.dirname(os.path.abspath(tracekit.__file__)))
    for r, (args, env) in enumerate(ranks.started):
        assert args == [sys.executable, "-m", "tracekit.collect.parallel_rank", scratch, str(r)]
        assert env["PYTHONPATH"].split(os.pathsep) == [root, "/elsewhere"]
        assert env["OMP_NUM_THREADS"] == "3"
        if parallel._loopback_interface():
            assert env["GLOO_SOCKET_IFNAME"] == parallel._loopback_interface()
    ranks, start, _ = _start(tmp_path, monkeypatch, ok, env={"GLOO_SOCKET_IFNAME": "eth9", "OMP_NUM_THREADS": "7"})
    start()
    assert ranks.started[0][1]["GLOO_SOCKET_IFNAME"] == "eth9" and ranks.started[0][1]["OMP_NUM_THREADS"] == "7"


def test_a_rank_still_running_when_another_finished_is_waited_for(tmp_path, monkeypatch):
    """catches: the parent stopping the run as soon as one rank has finished, killing a rank that was
    about to finish (and then reporting it as failed). docs/ranks.md: the traces move into place
    after every rank has succeeded. Rank 1 is still running at the first four polls, then exits 0."""
    plan = [(0, {"ok": True, "rank": 0}, ""), ([None] * 4 + [0], {"ok": True, "rank": 1}, "")]
    ranks, start, _ = _start(tmp_path, monkeypatch, plan)
    assert [res["rank"] for res in start()] == [0, 1]
    assert ranks.terminated == []


def test_the_earliest_error_names_the_failed_rank(tmp_path, monkeypatch):
    """catches: the error blamed on a rank that failed only because its peer died, or not naming the
    rank. The comment on _GRACE_S: "a rank whose peer died fails too ("connection closed"), and the
    earliest error is the cause"; docs/ranks.md: `rank 1 of 2 failed: ...`."""
    plan = [
        (1, {"ok": False, "time": 20.0, "error": "RuntimeError: connection closed by peer"}, ""),
        (1, {"ok": False, "time": 10.0, "error": "RuntimeError: out of memory"}, ""),
    ]
    _, start, _ = _start(tmp_path, monkeypatch, plan)
    with pytest.raises(TracekitError) as err:
        start()
    assert str(err.value) == "rank 1 of 2 failed: RuntimeError: out of memory"


def test_a_failed_rank_stops_the_others_and_is_reported_by_its_exit(tmp_path, monkeypatch):
    """catches: the ranks still running when one failed left running, or a failure without a result
    reported without its status and last log line. docs/ranks.md: "The other ranks are stopped";
    the error names the rank and what went wrong (here: rank 1 exited with status 3, its log's last
    line with words, "ValueError: bad shard")."""
    plan = [(None, None, "waiting in all_reduce\n"), (3, None, "loading\nValueError: bad shard\n  \n")]
    ranks, start, _ = _start(tmp_path, monkeypatch, plan)
    with pytest.raises(TracekitError) as err:
        start()
    assert ranks.terminated == [0]
    assert str(err.value) == "rank 1 of 2 failed: the process exited with status 3 (ValueError: bad shard)"


def test_a_rank_that_succeeds_without_a_result_is_a_failure(tmp_path, monkeypatch):
    """catches: a run whose rank exited 0 without writing its result taken as finished (its trace
    would be missing). docs/ranks.md: traces move into place only after every rank has succeeded."""
    _, start, _ = _start(tmp_path, monkeypatch, [(0, {"ok": True}, ""), (0, None, "")])
    with pytest.raises(TracekitError, match="rank 1 of 2 failed: it exited without writing its result"):
        start()


def test_a_port_already_in_use_is_retried_on_another(tmp_path, monkeypatch):
    """catches: a rank's "address already in use" shown as the run's error instead of a new try on
    a new port. docs/ranks.md: the ranks meet on a free localhost port that tracekit picks; another
    process can take it before rank 0 binds it (free_port's docstring: free now)."""
    for said in ("RuntimeError: Address already in use", "DistNetworkError: EADDRINUSE"):
        plan = [(1, {"ok": False, "time": 1.0, "error": said}, ""), (0, None, "")]
        _, start, _ = _start(tmp_path, monkeypatch, plan)
        with pytest.raises(parallel._PortTaken):
            start()


def test_a_killed_rank_says_by_which_signal_and_hints_at_memory_only_for_sigkill(tmp_path):
    """catches: the out-of-memory hint given for every signal, or none. Linux's OOM killer ends a
    process with SIGKILL; a SIGTERM is a stop, not memory."""
    log = str(tmp_path / "none.log")
    assert parallel._exit_reason(-signal.SIGKILL, log) == "the process was killed by SIGKILL (out of memory?)"
    assert parallel._exit_reason(-signal.SIGTERM, log) == "the process was killed by SIGTERM"
