"""A folder of rank traces read one by one against read by several processes: `tracekit report DIR`.

    python benchmarks/bench_ranks.py [--ranks N] [--small] [--trace PATH] [--jobs N] [--repeat N]

The folder is a shared trace written ``--ranks`` times (default 8) as the ranks of one run
(``distributedInfo`` rank 0..N-1 of a world of N), gzip level 1: by default the V100 DDP
trace, 47 MB of JSON per rank (8 x 47 MB, as issue 50 measured it); ``--small`` takes the A100
NCCL trace instead (~10 MB per rank), for a quick look. It is built on first use into
$TRACEKIT_BENCH_CACHE (default ~/.cache/tracekit-bench), never into the repository.

Each run is ``tracekit report DIR -f json`` in a subprocess of its own, measured from outside
(``os.wait4``: wall time, user + system CPU of the process and the pool processes it waited
for, the peak RSS of the largest of them), with $TRACEKIT_NO_CACHE=1 so that every run reads.
The baseline, ``--jobs 1``, and the parallel run (``--jobs N``, default: what tracekit chooses,
one process per CPU) alternate, ``--repeat`` times each (default 3), in this one run of the
benchmark; wall times are given best and median (CPU and RSS: median), and the two runs' JSON
must be the same. A parallel run needs free cores: the CPU pressure line says how much other
work competed for them. Goal (issue 50): the parallel wall time <= 0.6x the sequential one on
2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "traces")
LARGE = os.path.join(SHARED, "v100_ddp_train_large.json.gz")
SMALL = os.path.join(SHARED, "a100_nccl_train.json.gz")
GOAL = 0.6  # parallel wall / sequential wall, 2 cores


def cache_dir() -> str:
    d = os.environ.get("TRACEKIT_BENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tracekit-bench")
    os.makedirs(d, exist_ok=True)
    return d


def build_folder(source: str, ranks: int) -> str:
    """``source`` as rank 0..ranks-1 of one run, one gzip file per rank (built once, then reused)."""
    name = os.path.basename(source).split(".json")[0]
    folder = os.path.join(cache_dir(), f"ranks-{name}-x{ranks}")
    done = os.path.join(folder, ".complete")
    if os.path.exists(done):
        return folder
    os.makedirs(folder, exist_ok=True)
    with gzip.open(source, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    for r in range(ranks):
        doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": ranks}
        data = json.dumps(doc, separators=(",", ":")).encode()
        with open(os.path.join(folder, f"rank{r}.json.gz"), "wb") as out:
            out.write(gzip.compress(data, compresslevel=1))
    open(done, "w").close()
    return folder


def run(folder: str, jobs: int | None, out: str) -> dict:
    """One ``tracekit report`` in its own process: wall s, CPU s, peak RSS MB."""
    cmd = [sys.executable, "-m", "tracekit", "report", folder, "-f", "json", "-o", out, "--force"]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    env = {**os.environ, "TRACEKIT_NO_CACHE": "1"}
    env.pop("TRACEKIT_JOBS", None)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tracekit report {folder} failed:\n{err[-2000:]}")
    # wait4's usage counts the process and the children it waited for (the pool's processes).
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def _others_waiting() -> float | None:
    """Linux's CPU pressure ("some", 60 s average), or None where the kernel does not say."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split("avg60=")[1].split()[0])
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--small", action="store_true", help="the A100 NCCL trace (~10 MB of JSON per rank)")
    ap.add_argument("--trace", help="another trace to repeat as the ranks")
    ap.add_argument("--jobs", type=int, help="processes of the parallel run (default: tracekit's choice)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    source = args.trace or (SMALL if args.small else LARGE)
    if not os.path.exists(source):
        print(f"skipped: {source} is absent (../shared/traces is not beside this checkout)")
        return
    folder = build_folder(source, args.ranks)
    json_mb = args.ranks * len(gzip.open(os.path.join(folder, "rank0.json.gz")).read()) / 1e6
    from tracekit.trace.parallel import jobs_for, usable_cpus

    files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".json.gz"))
    jobs = args.jobs if args.jobs is not None else jobs_for(files)
    runs: dict[str, list[dict]] = {"sequential": [], "parallel": []}
    with tempfile.TemporaryDirectory() as tmp:
        outs = {k: os.path.join(tmp, f"{k}.json") for k in runs}
        run(folder, 1, outs["sequential"])  # warm the page cache and the bytecode
        for i in range(args.repeat):
            order = ("sequential", "parallel") if i % 2 == 0 else ("parallel", "sequential")
            for k in order:
                runs[k].append(run(folder, 1 if k == "sequential" else args.jobs, outs[k]))
        same = open(outs["sequential"], "rb").read() == open(outs["parallel"], "rb").read()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "rss_mb")} for k, v in runs.items()}
    best = {k: min(r["wall"] for r in v) for k, v in runs.items()}
    print(
        f"folder     {folder}: {args.ranks} ranks, {json_mb:.0f} MB of JSON in all "
        f"({usable_cpus()} usable CPUs; parallel: {jobs} processes; {args.repeat} runs each)"
    )
    print(
        f"{'tracekit report DIR':<22}{'best wall s':>12}{'median wall s':>14}{'CPU s':>8}{'peak RSS MB':>13}"
        "   runs (wall s)"
    )
    for k, label in (("sequential", "--jobs 1"), ("parallel", f"--jobs {jobs}")):
        m = med[k]
        each = " ".join(f"{r['wall']:.2f}" for r in runs[k])
        print(f"{label:<22}{best[k]:>12.2f}{m['wall']:>14.2f}{m['cpu']:>8.2f}{m['rss_mb']:>13.0f}   {each}")
    ratio = med["parallel"]["wall"] / med["sequential"]["wall"]
    ratio_best = best["parallel"] / best["sequential"]
    busy = _others_waiting()
    if busy is not None:
        # A parallel run needs a free core: other work on the machine shows here.
        print(f"CPU pressure while measuring (share of time some task waited for a CPU, last minute): {busy:.0f}%")
    print(
        f"parallel / sequential wall: {ratio_best:.2f}x best, {ratio:.2f}x median (goal <= {GOAL}x on 2 cores); "
        f"same JSON: {'yes' if same else 'NO'}"
    )
    if not same:
        raise SystemExit("the parallel report differs from the sequential one")


if __name__ == "__main__":
    main()
