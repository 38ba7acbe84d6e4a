"""Projection accuracy: ``tracekit project`` against the target GPU's own trace of the same workload.

For every pair of real traces available (``../shared/traces`` or ``$TRACEKIT_SHARED_TRACES``),
both directions: per-step GPU busy time projected from the source onto the target's spec row,
against what the target's trace measured (``analyze(target)`` phase GPU busy per step); then per
category (summed by factor category, since the two engines name some kernels differently), and
the error summary: median and worst |error| of the central, and how many intervals contain the
measured value.

With torch installed, a pair recorded in the run joins them (``--no-cpu-pair`` leaves it out):
``tracekit collect`` of the tiny preset on this CPU at 1 and 2 threads, each with a spec file
from its own calibration, projected 1 -> 2 threads. It checks the method's bookkeeping on a pair
anyone can record; its error depends on how busy the machine is, so it is not an accuracy claim.

    PYTHONPATH=$PWD python benchmarks/bench_project.py [--no-cpu-pair]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracekit.analysis.analyze import analyze
from tracekit.specs import cpu_entry, factors, load_spec_file
from tracekit.trace import read_trace
from tracekit.whatif.project import project

SHARED = Path(os.environ.get("TRACEKIT_SHARED_TRACES", Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"))

# (label, source file, target file, target spec key, phase, analyze options)
PAIRS = [
    ("SGLang Qwen3-30B-A3B decode bs16, B300 -> MI300X", "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
     "mi300x_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz", "mi300x", "decode", {"model": "qwen3-30b-a3b"}),
    ("SGLang Qwen3-30B-A3B decode bs16, MI300X -> B300", "mi300x_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
     "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz", "b300", "decode", {"model": "qwen3-30b-a3b"}),
]


def _per_step(a, phase: str, busy_ms: float) -> float:
    steps = a.steps[a.steps["phase"] == phase] if len(a.steps) else a.steps
    return busy_ms / max(len(steps), 1)


def _by_factor_category(by: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c, ms in by.items():
        k = factors.factor_category(c)
        out[k] = out.get(k, 0.0) + ms
    return out


def _cpu_pair(folder: Path) -> list[tuple]:
    """The tiny preset collected at 1 and 2 CPU threads, with a spec file from each run's own
    calibration; [] where torch is not installed or a run fails (said)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skip the recorded CPU pair: torch is not installed (pip install -e .[collect])")
        return []
    runs = {}
    for threads in (1, 2):
        out = folder / f"t{threads}"
        r = subprocess.run([sys.executable, "-m", "tracekit", "collect", "--preset", "tiny", "-b", "1", "-p", "32",
                            "-n", "4", "--warmup", "1", "--threads", str(threads), "--no-progress", "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode:
            print(f"skip the recorded CPU pair: collect failed: {(r.stderr or r.stdout).strip()[-200:]}")
            return []
        cal = json.loads((folder / f"t{threads}.tracekit.json").read_text())["calibration"]
        spec = folder / f"cpu{threads}.json"
        spec.write_text(json.dumps(cpu_entry(cal, f"CPU {threads} threads")))
        runs[threads] = (str(folder / f"t{threads}.pt.trace.json.gz"), str(spec))
    (t1, s1), (t2, s2) = runs[1], runs[2]
    return [(f"tiny preset on this CPU, {phase}, 1 -> 2 threads (recorded here)", t1, t2, load_spec_file(s2), phase,
             {"spec_file": s1}, {"spec_file": s2}) for phase in ("prefill", "decode")]


def main() -> int:
    rows = []
    pairs = [(label, str(SHARED / src), str(SHARED / dst), gpu, phase, options, options)
             for label, src, dst, gpu, phase, options in PAIRS]
    scratch = tempfile.TemporaryDirectory(prefix="bench_project-")
    if "--no-cpu-pair" not in sys.argv[1:]:
        pairs += _cpu_pair(Path(scratch.name))
    for label, s_path, d_path, gpu, phase, options, target_options in pairs:
        if not (os.path.exists(s_path) and os.path.exists(d_path)):
            print(f"skip {label}: trace absent under {SHARED}")
            continue
        t0 = time.perf_counter()
        pj = project(read_trace(s_path), gpu, **options)
        target = analyze(read_trace(d_path), **target_options)
        p = pj.phases[phase]
        n_src = len(pj.source.steps[pj.source.steps["phase"] == phase])
        central = p["projected_gpu_busy_ms"] / max(n_src, 1)
        lo, hi = (v / max(n_src, 1) for v in p["projected_gpu_busy_ms_range"])
        measured = _per_step(target, phase, target.phases[phase]["gpu_busy_ms"])
        err = central / measured - 1
        rows.append((label, central, lo, hi, measured, err, lo <= measured <= hi))
        print(f"\n{label}  ({time.perf_counter() - t0:.1f} s)")
        print(f"  per-step GPU busy: projected {central:.2f} ms ({lo:.2f}-{hi:.2f}), measured {measured:.2f} ms, "
              f"error {err:+.1%}, interval {'contains' if lo <= measured <= hi else 'MISSES'} it; "
              f"unknown cost {p['unknown_share']:.0%} of kernel time")
        proj = _by_factor_category({c: v["projected_ms"] / max(n_src, 1) for c, v in p["by_category_ms"].items()})
        rng_lo = _by_factor_category({c: v["range_ms"][0] / max(n_src, 1) for c, v in p["by_category_ms"].items()})
        rng_hi = _by_factor_category({c: v["range_ms"][1] / max(n_src, 1) for c, v in p["by_category_ms"].items()})
        n_tgt = max(len(target.steps[target.steps["phase"] == phase]), 1)
        meas = _by_factor_category({c: v / n_tgt for c, v in (target.phases[phase].get("by_category") or {}).items()})
        print(f"  {'category':<14}{'projected':>10}{'range':>16}{'measured':>10}{'error':>9}")
        for c in sorted(set(proj) | set(meas), key=lambda c: -meas.get(c, 0.0)):
            pr, me = proj.get(c), meas.get(c)
            e = f"{pr / me - 1:+.0%}" if pr is not None and me else "-"
            r = f"{rng_lo[c]:.3f}-{rng_hi[c]:.3f}" if c in rng_lo else "-"
            print(f"  {c:<14}{pr if pr is not None else float('nan'):>10.3f}{r:>16}"
                  f"{me if me is not None else float('nan'):>10.3f}{e:>9}")
    scratch.cleanup()
    if not rows:
        print("no pair available")
        return 0
    # The recorded CPU pair checks the bookkeeping, not accuracy (its 2-thread run shares the machine).
    for what, group in (("real GPU pairs", [r for r in rows if "(recorded here)" not in r[0]]),
                        ("the recorded CPU pair", [r for r in rows if "(recorded here)" in r[0]])):
        if not group:
            continue
        errs = [abs(r[5]) for r in group]
        print(f"\nsummary over {what} ({len(group)} projections): central median |error| "
              f"{statistics.median(errs):.1%}, worst {max(errs):.1%}; interval contains the measured value in "
              f"{sum(r[6] for r in group)} of {len(group)}")
    print(f"\n| pair | projected (range) | measured | error |\n|---|---|---|---|")
    for label, c, lo, hi, m, e, _ in rows:
        print(f"| {label} | {c:.2f} ms ({lo:.2f}-{hi:.2f}) | {m:.2f} ms | {e:+.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
