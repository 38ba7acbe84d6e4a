"""Tests written for mutants of tracekit/collect that its hand-kept test files let survive (issue 51,
part 5; found while drawing CI's fixed set, not in a seeded sample): each names the mutant it
kills; the expected figures are worked out by hand from the CPU description given."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.collect.calibrate import cpu_peak_flops, settled

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
