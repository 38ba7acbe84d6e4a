"""The first hour of a newcomer (issue 44): figures measured on a busy machine say so everywhere,
ceilings are measured until they settle, one figure has one value in every command, and a
projection's first line carries its confidence.

Expectations come from outside the code under test: hand arithmetic on the CPU's flags and
clock, the sidecar's own series, the processes the test itself starts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.collect import calibrate as cal
from tracekit.collect import contention

torch = pytest.importorskip("torch")

from conftest import SAMPLE_TRACES, real_trace_path  # noqa: E402


def _spin(n: int) -> list[subprocess.Popen]:
    """``n`` busy-loop processes, each holding a core until killed (bounded by their own timeout)."""
    code = "import time\nend = time.monotonic() + 240\nwhile time.monotonic() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=30)


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory):
    """A tiny run collected while busy loops hold every core (default threads: one per core)."""
    from tracekit.collect import CollectOptions, collect

    tmp = tmp_path_factory.mktemp("busy")
    procs = _spin(os.cpu_count() or 1)
    try:
        time.sleep(0.5)  # let them start
        result = collect(
            CollectOptions(
                preset="tiny",
                batch_size=1,
                prompt_len=16,
                new_tokens=4,
                output=str(tmp / "busy"),
                progress=False,
                warmup=1,
            )
        )
    finally:
        _stop(procs)
    return result, tmp


def test_a_run_collected_on_a_loaded_cpu_says_so_in_every_report(busy_run):
    """Bug caught: the busy-machine note printed by `collect` only (the issue's `grep -c "machine was busy"
    reports/demo.html` was 0), or a finding's time at stake larger than its phase, or given as fact."""
    result, tmp = busy_run
    side = json.loads(Path(result.sidecar_path).read_text())
    seen = side["device"]["contention"]
    # Busy loops on every core: by the kernel's accounting the others took cores the run wanted.
    assert seen["busy"] is True, seen
    outs = {}
    for fmt_ in ("html", "json", "md", "text"):
        out = tmp / f"r.{fmt_}"
        r = CliRunner().invoke(main, ["report", result.trace_path, "-f", fmt_, "-o", str(out), "--force"])
        assert r.exit_code == 0, r.output
        outs[fmt_] = out.read_text()
    for fmt_, text in outs.items():
        assert "machine was busy" in text, f"{fmt_} report lacks the busy-machine note"
        assert "--threads 1" in text, f"{fmt_} report does not say what to do"
    data = json.loads(outs["json"])
    assert data["measurement"]["busy"] is True and data["measurement"]["reliable"] is False
    assert data["findings"][0]["id"] == "measurement-unreliable"
    for f in data["findings"]:
        if f["at_stake_ms"] is not None:
            assert f["at_stake_ms"] <= data["phases"][f["phase"]]["time_ms"], f
            assert f["at_stake_note"] and "not a fact" in f["at_stake_note"], f
    # The headline's time figures say where they were measured.
    ttft = next(h for h in _headline(data) if h["key"] == "ttft_ms")
    assert "busy machine" in ttft["note"]


def _headline(data):
    from tracekit.report.headline_view import headline

    return headline(data)


def test_one_value_per_figure_from_collect_to_summary_and_report(tmp_path):
    """Bug caught: `collect` printed the upper middle element of the TPOT series ("TPOT 84.69 ms
    (median)") while `summary` printed numpy's p50 of the same series (44.1 ms)."""
    out = tmp_path / "one"
    r = CliRunner().invoke(
        main,
        [
            "collect",
            "-b",
            "1",
            "-p",
            "16",
            "-n",
            "4",
            "--threads",
            "1",
            "--no-calibrate",
            "--no-progress",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    trace = f"{out}.pt.trace.json.gz"
    side = json.loads(Path(f"{out}.tracekit.json").read_text())
    series = side["timing"]["tpot_ms"]
    assert len(series) % 2 == 0  # an even count: the upper middle and the median differ
    p50 = float(np.median(series))
    collect_tpot = re.search(r"TPOT p50 ([\d.,]+) ms", r.output).group(1)
    s = CliRunner().invoke(main, ["summary", trace])
    assert s.exit_code == 0, s.output
    summary_tpot = re.search(r"TPOT p50, no profiler +([\d.,]+) ms", s.output).group(1)
    assert collect_tpot == summary_tpot
    j = tmp_path / "one.json"
    assert CliRunner().invoke(main, ["report", trace, "-f", "json", "-o", str(j)]).exit_code == 0
    got = json.loads(j.read_text())["metrics"]["unprofiled"]
    assert got["tpot_p50_ms"] == pytest.approx(p50)
    assert float(collect_tpot.replace(",", "")) == pytest.approx(p50, rel=0.01)


def test_each_unprofiled_card_states_its_own_profiler_ratio():
    """Bug caught: both cards quoted the whole run's ratio ("the profiler slowed the run 2.67x")
    beside TTFT 284 ms without the profiler and 277 ms with it."""
    from tracekit.analysis import analyze
    from tracekit.trace import read_trace

    a = analyze(read_trace(str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"))).to_dict()
    m = a["metrics"]
    cards = {h["key"]: h for h in _headline(a)}
    ttft_ratio = m["ttft_ms"] / m["unprofiled"]["ttft_ms"]
    tpot_ratio = m["tpot_ms"]["p50"] / m["unprofiled"]["tpot_p50_ms"]
    for key, ratio in (("ttft_unprofiled_ms", ttft_ratio), ("tpot_p50_unprofiled", tpot_ratio)):
        note = cards[key]["note"]
        assert "the run" not in note
        if ratio >= 1:
            assert f"slowed this figure {ratio:.2f}" in note, note
        else:
            assert f"ratio {ratio:.2f}" in note, note


# --- calibration ------------------------------------------------------------------------


def test_cpu_peak_from_flags_and_clock():
    """Bug caught: a peak from the wrong FMA width or clock (hand arithmetic: 2 threads x 2.1 GHz x
    64 fp32 FLOPs per cycle with two AVX-512 FMA ports = 268.8 GFLOP/s; fp64 half of it)."""
    info = "processor\t: 0\ncpu MHz\t\t: 2100.000\nflags\t\t: fpu sse2 avx fma avx2 avx512f\n"
    assert cal.cpu_peak_flops("fp32", 2, info, max_khz=0) == pytest.approx(268.8e9)
    assert cal.cpu_peak_flops("fp64", 2, info, max_khz=0) == pytest.approx(134.4e9)
    avx2 = info.replace(" avx512f", "")
    assert cal.cpu_peak_flops("fp32", 1, avx2, max_khz=3_000_000) == pytest.approx(3.0e9 * 32)
    assert cal.cpu_peak_flops("bf16", 2, info) is None  # no bound claimed for other units
    assert cal.cpu_peak_flops("fp32", 2, "cpu MHz : 2000\n", max_khz=0) is None  # no flags: no claim


def test_a_ceiling_far_below_the_cpu_is_flagged():
    """Bug caught: the issue's 0.00621 TFLOP/s on 2 threads passed the per-thread floor (4 GFLOP/s)
    and was shown as the machine's ceiling."""
    peak = 268.8e9
    low = cal.problems("cpu", "fp32", 6.21e9, 20e9, 2, cpu_peak=peak)
    assert any("under 10%" in p for p in low)
    assert cal.problems("cpu", "fp32", 0.3e12, 20e9, 2, cpu_peak=peak) == []


def test_calibration_takes_rounds_until_they_settle(monkeypatch):
    """Bug caught: one round taken as the ceiling whatever the next would say, and no spread."""
    rates = iter([100e9, 40e9, 98e9, 99e9, 100e9, 100e9])
    monkeypatch.setattr(cal, "matmul_flops", lambda dev, dtype, budget: (next(rates), 256))
    monkeypatch.setattr(cal, "copy_bandwidth", lambda dev, budget: (20e9, 1 << 26))
    monkeypatch.setattr(cal, "cpu_peak_flops", lambda dtype, threads, *a, **k: None)
    out = cal.calibrate("cpu", torch.float32)
    c = out["checks"]
    assert c["attempts"] == cal.MIN_ROUNDS and c["stable"] and c["reliable"]
    assert out["matmul_flops"]["fp32"] == 100e9
    assert c["spread"]["matmul_flops"] == pytest.approx(0.6)  # 1 - 40/100
    # Rounds that never agree: every round taken, and the result is not reliable.
    swing = iter([100e9, 50e9] * cal.MAX_ROUNDS)
    monkeypatch.setattr(cal, "matmul_flops", lambda dev, dtype, budget: (next(swing), 256))
    monkeypatch.setattr(cal, "settled", lambda rounds: False)
    bad = cal.calibrate("cpu", torch.float32)["checks"]
    assert bad["attempts"] == cal.MAX_ROUNDS and bad["stable"] is False and bad["reliable"] is False
    assert "did not settle" in bad["problems"][-1]


def test_settled_means_the_best_two_rounds_agree():
    """Bug caught: a reading that compared the wrong rounds (the first two, or best against worst)."""
    assert cal.settled([50.0, 100.0, 95.0])
    assert not cal.settled([100.0, 80.0, 20.0])
    assert not cal.settled([100.0])
    assert cal.spread([50.0, 100.0]) == pytest.approx(0.5)


def test_busy_means_others_needed_the_cores_the_run_wanted():
    """Bug caught: a run of one thread on two cores called busy beside one busy process (it was
    not slowed), or a two-thread run beside one called idle."""
    assert contention.busy(1.0, threads=2, cores=2)
    assert not contention.busy(1.0, threads=1, cores=2)
    assert contention.busy(2.0, threads=1, cores=2)
    assert not contention.busy(0.2, threads=2, cores=2)


def test_the_window_counts_others_and_not_this_process(monkeypatch):
    """Bug caught: the process's own threads counted as other work (every run 'busy'). Hand
    arithmetic: 3 s of all cores busy over a 2 s window, 1 s of it this process's: 1 core of others."""
    busy, own, clock = iter([100.0, 103.0]), iter([10.0, 11.0]), iter([50.0, 52.0])
    monkeypatch.setattr(contention, "_cpu_busy_seconds", lambda: next(busy))
    monkeypatch.setattr(contention, "_own_seconds", lambda: next(own))
    monkeypatch.setattr(contention.time, "monotonic", lambda: next(clock))
    w = contention.Window()
    got = w.result(threads=2, cores=2)
    assert got["other_cores"] == pytest.approx(1.0) and got["busy"] is True


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the kernel's CPU accounting is Linux's /proc/stat")
def test_the_window_sees_a_busy_loop_beside_it():
    """Bug caught: other processes missed (the 1-minute load average, the old measure, needs about a
    minute to rise and counts this run's own threads)."""
    procs = _spin(1)
    try:
        time.sleep(0.3)
        w = contention.Window()
        time.sleep(1.5)
        loaded = w.result(threads=1, cores=os.cpu_count())
    finally:
        _stop(procs)
    # A whole core when it has one to itself; at least half of one on a machine shared with more.
    assert loaded["other_cores"] >= 0.5, loaded


# --- projection's first line -------------------------------------------------------------


def test_a_projection_of_mostly_unknown_cost_says_so_first():
    """Bug caught: "decode: GPU busy 5.39 ms ... -> 5.4 ms on MI300X" as the first line, with the
    99.6% unknown cost and the 5.40-30.1 ms range only in `-f text`'s body."""
    trace = str(real_trace_path("b300_qwen3_moe"))
    r = CliRunner().invoke(main, ["project", trace, "--to", "mi300x", "-f", "text"])
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("decode: GPU busy") and "low confidence" in first and "range" in first
    assert "--model" in first
    modelled = CliRunner().invoke(main, ["project", trace, "--to", "mi300x", "--model", "qwen3-30b-a3b", "-f", "md"])
    assert modelled.exit_code == 0, modelled.output
    assert "low confidence" not in modelled.output and "range" in modelled.output
