"""First against second `tracekit summary` of the 379 MB trace: the cache for the second look (issue 50).

    python benchmarks/bench_cache.py [--trace PATH] [--repeat N]

Every run is a process of its own, measured from the outside (wall seconds, and user + system
CPU seconds from ``os.wait4``), with TRACEKIT_CACHE_DIR pointing at a folder of the benchmark's
own, emptied before each repeat, so the user's cache is neither used nor filled:

* no cache   ``tracekit summary TRACE --no-cache``: the cost without the cache
* first      ``tracekit summary TRACE`` into an empty cache: read, analyse, print, and keep the
             tables and the printed text (first - no cache is what keeping them costs)
* second     the same command again: the text from the cache
* tables     ``tracekit summary TRACE --top 5`` after them: a text not kept yet, so the analysis
             runs again on the tables loaded from the cache instead of the JSON

Figures are medians of ``--repeat`` repeats (default 3) measured in this one run. Goal: the
second summary at least 10x faster than the first. Also printed: what computing the key costs
(the trace's content digest) and the size of the kept entries.

The default trace is the shared V100 DDP trace's events repeated 8 times (~380 MB of JSON),
built by ``bench_read.build_large`` on first use into $TRACEKIT_BENCH_CACHE (default
~/.cache/tracekit-bench).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_read import REPEATS_OF_V100, SHARED, build_large, cache_dir, compile_bytecode  # noqa: E402

GOAL = 10.0  # first summary's wall time / second's
RUNS = ("no cache", "first", "second", "tables")


def run(args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of ``tracekit ARGS`` in a process of its own."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tracekit {' '.join(args)} failed:\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def measure(path: str, repeat: int) -> dict:
    compile_bytecode()
    box = tempfile.mkdtemp(prefix="tracekit-bench-cache-")
    env = {**os.environ, "TRACEKIT_CACHE_DIR": box}
    env.pop("TRACEKIT_NO_CACHE", None)
    times: dict[str, list[tuple[float, float]]] = {r: [] for r in RUNS}
    try:
        for _ in range(repeat):
            shutil.rmtree(box, ignore_errors=True)
            os.makedirs(box)
            times["no cache"].append(run(["summary", path, "--no-cache"], env))
            if os.listdir(box):
                raise SystemExit("--no-cache wrote into the cache")
            times["first"].append(run(["summary", path], env))
            times["second"].append(run(["summary", path], env))
            times["tables"].append(run(["summary", path, "--top", "5"], env))
        entry_mb = folder_bytes(box) / 1e6
    finally:
        shutil.rmtree(box, ignore_errors=True)
    from tracekit.cache import file_digest

    t0 = time.perf_counter()
    file_digest(path)
    digest_s = time.perf_counter() - t0
    out = {
        r: {
            "wall_s": statistics.median(w for w, _ in ts),
            "cpu_s": statistics.median(c for _, c in ts),
            "wall_all": [round(w, 2) for w, _ in ts],
        }
        for r, ts in times.items()
    }
    out["ratio_wall"] = out["first"]["wall_s"] / out["second"]["wall_s"]
    out["ratio_cpu"] = out["first"]["cpu_s"] / out["second"]["cpu_s"]
    out["digest_s"] = digest_s
    out["cache_mb"] = entry_mb
    print(
        f"trace      {os.path.basename(path)}: {os.path.getsize(path) / 1e6:.0f} MB on disk; "
        f"median of {repeat} repeat(s)"
    )
    print(f"{'run':10} {'wall s':>7} {'CPU s':>7}   runs (wall s)")
    for r in RUNS:
        v = out[r]
        print(f"{r:10} {v['wall_s']:7.2f} {v['cpu_s']:7.2f}   {v['wall_all']}")
    print(
        f"first / second = {out['ratio_wall']:.1f}x wall, {out['ratio_cpu']:.1f}x CPU (goal >= {GOAL:.0f}x: "
        f"{'met' if out['ratio_wall'] >= GOAL else 'NOT met'})"
    )
    print(
        f"keeping the tables and text costs {out['first']['wall_s'] - out['no cache']['wall_s']:+.2f} s on the "
        f"first run; the key's content digest of the file {digest_s * 1e3:.0f} ms; the cache holds {entry_mb:.0f} MB"
    )
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", help="trace to summarise (default: the shared V100 trace x8, built on first use)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats; the medians are printed (default 3)")
    args = ap.parse_args(argv)
    path = args.trace
    if path is None:
        path = os.path.join(cache_dir(), f"v100_ddp_train_large_x{REPEATS_OF_V100}.json.gz")
        if not os.path.exists(path):
            if not os.path.exists(SHARED):
                print(f"skipped: {SHARED} is absent (../shared/traces is not beside this checkout)")
                return {}
            print(f"building {path} from {os.path.basename(SHARED)} ...", flush=True)
            build_large(SHARED, path)
    return measure(path, max(1, args.repeat))


if __name__ == "__main__":
    main()
