"""Projection accuracy, leave-one-pair-out: ``tracekit project`` against the target GPU's own trace.

Every pair available, both directions: the two real cross-vendor pairs in ``../shared/traces``
(or ``$TRACEKIT_SHARED_TRACES``): SGLang Qwen3-30B-A3B decode on B300 / MI300X, and the Hugging
Face Qwen1.5-0.5B forward (a prefill, shapes recorded) on H100 / MI300X; and, with torch
installed, a pair recorded here (``--no-cpu-pair`` leaves it out): ``tracekit collect`` of the
tiny preset on this CPU at 1 and 2 threads, each with a spec file from its own calibration.

For each projection: the per-step GPU busy error of the central estimate, its range and whether
the range holds the measured value, first with the published factor table, then with factors
learnt (``project --check --save-factors``, ``tracekit.whatif.learnt``) from every *other* pair
(both directions of the left-out pair excluded). The CPU pair checks the bookkeeping on a pair
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
from tracekit.analysis.workload import choose_tp
from tracekit.specs import cpu_entry, load_spec_file
from tracekit.specs.lookup import spec_by_name
from tracekit.trace import read_trace
from tracekit.whatif import learnt as learnt_mod
from tracekit.whatif.check import check
from tracekit.whatif.project import project

SHARED = Path(
    os.environ.get("TRACEKIT_SHARED_TRACES", Path(__file__).resolve().parents[1] / ".." / "shared" / "traces")
)

# (pair, GPU A file, spec A, GPU B file, spec B, phase, analyze options)
REAL = [
    (
        "SGLang Qwen3-30B-A3B decode bs16",
        "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
        "b300",
        "mi300x_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
        "mi300x",
        "decode",
        {"model": "qwen3-30b-a3b"},
    ),
    (
        "HF Qwen1.5-0.5B forward bs16x559",
        "h100_hf-qwen1.5-0.5b_forward_bs16.json.gz",
        "h100-sxm",
        "mi300x_hf-qwen1.5-0.5b_forward_bs16.json.gz",
        "mi300x",
        "prefill",
        {},
    ),
]


def _real() -> list[dict]:
    out = []
    for pair, a, ka, b, kb, phase, opts in REAL:
        if not ((SHARED / a).exists() and (SHARED / b).exists()):
            print(f"skip {pair}: trace absent under {SHARED}")
            continue
        for (s, ks), (t, kt) in (((a, ka), (b, kb)), ((b, kb), (a, ka))):
            out.append(
                {
                    "pair": pair,
                    "label": f"{pair}, {ks} -> {kt}",
                    "src": str(SHARED / s),
                    "tgt": str(SHARED / t),
                    "to": spec_by_name(kt),
                    "phases": [phase],
                    "src_opts": opts,
                    "tgt_opts": opts,
                }
            )
    return out


def _cpu(folder: Path) -> list[dict]:
    """The tiny preset collected at 1 and 2 CPU threads, with a spec file from each run's own
    calibration, both directions; [] where torch is not installed or a run fails (said)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skip the recorded CPU pair: torch is not installed (pip install -e .[collect])")
        return []
    runs = {}
    for threads in (1, 2):
        out = folder / f"t{threads}"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "tracekit",
                "collect",
                "--preset",
                "tiny",
                "-b",
                "1",
                "-p",
                "32",
                "-n",
                "4",
                "--warmup",
                "1",
                "--threads",
                str(threads),
                "--no-progress",
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            print(f"skip the recorded CPU pair: collect failed: {(r.stderr or r.stdout).strip()[-200:]}")
            return []
        cal = json.loads((folder / f"t{threads}.tracekit.json").read_text())["calibration"]
        spec = folder / f"cpu{threads}.json"
        spec.write_text(json.dumps(cpu_entry(cal, f"CPU {threads} threads")))
        runs[threads] = (str(folder / f"t{threads}.pt.trace.json.gz"), str(spec))
    return [
        {
            "pair": "tiny preset on this CPU, 1 / 2 threads (recorded here)",
            "label": f"CPU tiny, {a} -> {b} threads",
            "src": runs[a][0],
            "tgt": runs[b][0],
            "to": load_spec_file(runs[b][1]),
            "phases": ["prefill", "decode"],
            "src_opts": {"spec_file": runs[a][1]},
            "tgt_opts": {"spec_file": runs[b][1]},
        }
        for a, b in ((1, 2), (2, 1))
    ]


def _run(case: dict, traces: dict, learnt=None) -> tuple[list[dict], object]:
    """Per phase: central, range and measured per-step GPU busy, error, inside; and the pair's learnt file."""
    src = traces.setdefault(case["src"], read_trace(case["src"]))
    tgt = traces.setdefault(case["tgt"], read_trace(case["tgt"]))
    pj = project(src, case["to"], learnt=learnt, **case["src_opts"])
    measured = analyze(tgt, **case["tgt_opts"])
    ck = check(pj, measured)
    rows = []
    for phase in case["phases"]:
        f = ck.phases.get(phase)
        if f and f["error"] is not None:
            rows.append(
                {
                    "phase": phase,
                    "central": f["projected_ms"],
                    "range": f["range_ms"],
                    "measured": f["measured_ms"],
                    "error": f["error"],
                    "inside": f["inside"],
                }
            )
    return rows, learnt_mod.from_check(pj, measured, choose_tp(src, case["src_opts"].get("tp"))[0])


def main() -> int:
    scratch = tempfile.TemporaryDirectory(prefix="bench_project-")
    cases = _real() + ([] if "--no-cpu-pair" in sys.argv[1:] else _cpu(Path(scratch.name)))
    if not cases:
        print("no pair available")
        return 0
    traces: dict = {}
    default, files = {}, {}
    for i, case in enumerate(cases):
        t0 = time.perf_counter()
        default[i], files[i] = _run(case, traces)
        print(f"{case['label']}: default factors ({time.perf_counter() - t0:.1f} s)")
    loo = {}
    for i, case in enumerate(cases):
        others = [files[j] for j, c in enumerate(cases) if c["pair"] != case["pair"]]
        loo[i] = _run(case, traces, learnt_mod.merge(others))[0] if others else None
    scratch.cleanup()

    def cell(r: dict) -> str:
        lo, hi = r["range"] or (float("nan"), float("nan"))
        return f"{r['central']:.3g} ({lo:.3g}-{hi:.3g}) | {r['error']:+.0%} | {'yes' if r['inside'] else 'no'}"

    print(
        "\n| pair, direction | phase | measured ms/step | default: projected (range) | error | range holds | "
        "leave-one-out: projected (range) | error | range holds |"
    )
    print("|---|---|--:|--:|--:|:-:|--:|--:|:-:|")
    summary = {"default": [], "loo": []}
    for i, case in enumerate(cases):
        for k, r in enumerate(default[i]):
            lo = loo[i][k] if loo[i] else None
            real = "(recorded here)" not in case["pair"]
            summary["default"] += [r] if real else []
            summary["loo"] += [lo] if real and lo else []
            print(
                f"| {case['label']} | {r['phase']} | {r['measured']:.3g} | {cell(r)} | "
                f"{cell(lo) if lo else '- | - | -'} |"
            )
    for name, rows in summary.items():
        if rows:
            errs = [abs(r["error"]) for r in rows]
            print(
                f"\nreal GPU pairs, {name} factors ({len(rows)} projections): median |error| "
                f"{statistics.median(errs):.0%}, worst {max(errs):.0%}; range holds the measured value in "
                f"{sum(bool(r['inside']) for r in rows)} of {len(rows)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
