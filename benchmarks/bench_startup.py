"""Start-up of `tracekit --help`, `gpus` and `summary` of a small trace, beside the interpreter's
own floors measured in the same run.

    python benchmarks/bench_startup.py [TRACE] [--repeat N]
        (default: ../shared/traces/a100_triton_tiny.json.gz, 2 kB; else sample_traces/tiny-bs1)

Each command runs in a fresh process N times (default 15), the cases interleaved so that a burst
of load on the machine falls on all of them alike; printed per case: the median wall time, the
median CPU time (user + system of the child), and both over a bare `python -c "import pandas"`.
The baselines: `python -c pass` (the interpreter), `import pandas`, and `import click, pandas,
jinja2` (what `summary` cannot do without: the trace's tables are DataFrames, the text is a Jinja
template). Every process gets OPENBLAS_NUM_THREADS=1, as tracekit sets it for itself, so the
baselines do not count OpenBLAS's spinning threads, writes bytecode (one warm-up run each), so a
stale .pyc is not compiled in every timed run, and TRACEKIT_NO_CACHE=1, so every summary is a
first look (the cache's benchmark times the second).

The target (issue #50): `--help` and `gpus` under 0.2 s of wall time; exits 1 when one is not.
`summary` needs pandas, so its floor is the third baseline: the line after the table says how far
above it summary is. tests/test_startup.py holds the import sets and budgets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared", "traces", "a100_triton_tiny.json.gz")
SAMPLE = os.path.join(ROOT, "sample_traces", "tiny-bs1.pt.trace.json.gz")
TARGET_S = 0.2


def cases(trace: str) -> dict[str, list[str]]:
    return {
        "python -c pass": ["-c", "pass"],
        "python -c 'import pandas'": ["-c", "import pandas"],
        "python -c 'import click, pandas, jinja2'": ["-c", "import click, pandas, jinja2"],
        "tracekit --help": ["-m", "tracekit", "--help"],
        "tracekit gpus": ["-m", "tracekit", "gpus"],
        f"tracekit summary {os.path.basename(trace)}": ["-m", "tracekit", "summary", trace],
    }


def _env() -> dict[str, str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TRACEKIT_NO_CACHE": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh `python ARGV` (CPU: the child's user + system)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"python {' '.join(argv)} failed:\n{r.stderr.decode(errors='replace')[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", default=SHARED if os.path.exists(SHARED) else SAMPLE)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    todo = cases(os.path.abspath(args.trace))
    for argv in todo.values():  # warm-up: bytecode written, files in the page cache
        run_once(argv)
    walls: dict[str, list[float]] = {k: [] for k in todo}
    cpus: dict[str, list[float]] = {k: [] for k in todo}
    for _ in range(args.repeat):
        for label, argv in todo.items():
            wall, cpu = run_once(argv)
            walls[label].append(wall)
            cpus[label].append(cpu)
    wall = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    pandas = "python -c 'import pandas'"
    width = max(map(len, todo))
    print(
        f"start-up, median of {args.repeat} fresh processes each ({os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]})"
    )
    print(f"{'':{width}}  {'wall ms':>8}  {'CPU ms':>8}  {'wall/pandas':>11}  {'CPU/pandas':>10}")
    for label in todo:
        print(
            f"{label:{width}}  {wall[label] * 1e3:8.0f}  {cpu[label] * 1e3:8.0f}  "
            f"{wall[label] / wall[pandas]:10.2f}x  {cpu[label] / cpu[pandas]:9.2f}x"
        )
    floor = "python -c 'import click, pandas, jinja2'"
    summary = next(k for k in todo if k.startswith("tracekit summary"))
    print(
        f"\nsummary above its floor ({floor}): {(wall[summary] - wall[floor]) * 1e3:+.0f} ms wall, "
        f"{(cpu[summary] - cpu[floor]) * 1e3:+.0f} ms CPU (reading and analysing the trace, tracekit's own "
        "imports)"
    )
    missed = [k for k in ("tracekit --help", "tracekit gpus") if wall[k] >= TARGET_S]
    for k in ("tracekit --help", "tracekit gpus"):
        print(f"target {k} < {TARGET_S:.1f} s wall: {'met' if k not in missed else 'MISSED'} ({wall[k]:.3f} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
