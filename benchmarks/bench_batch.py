"""Batch throughput: traces per minute over the shared traces, 1 and 2 workers, local
processes and a local Dask cluster, in one run.

    python benchmarks/bench_batch.py [FOLDER]    (default: ../shared/traces)

Each figure is the wall time of the whole batch (startup of the workers or the cluster
included, as a user pays it), best of ``--repeat`` runs (default 2). The baseline, measured in
the same run, is one worker in one local process; every other figure is shown as a ratio
to it. Two workers should approach 2x on a machine with two free cores; the Dask figures
add the cluster's start (a few seconds) to the same work.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "shared", "traces")


def _batch(folder: str, jobs: int, dask: str | None) -> tuple[float, int, int]:
    from tracekit.batch import analyse_many

    start = time.perf_counter()
    fleet = analyse_many([folder], jobs=jobs, dask=dask)
    return time.perf_counter() - start, len(fleet.rows), fleet.errors


def main(folder: str = DEFAULT, repeat: int = 2) -> dict:
    if not os.path.isdir(folder):
        print(f"skipped: {folder} is absent (../shared/traces is not beside this checkout)")
        return {}
    try:
        import distributed  # noqa: F401

        has_dask = True
    except ImportError:
        has_dask = False
    runs = [("local processes", 1, None), ("local processes", 2, None)]
    if has_dask:
        runs += [("dask local", 1, "local"), ("dask local", 2, "local")]
    results = {}
    for label, jobs, dask in runs:
        best, n, errors = float("inf"), 0, 0
        for _ in range(repeat):
            t, n, errors = _batch(folder, jobs, dask)
            best = min(best, t)
        results[(label, jobs)] = {
            "seconds": round(best, 2),
            "traces": n,
            "errors": errors,
            "per_minute": round(n / best * 60, 1),
        }
    base = results[("local processes", 1)]["per_minute"]
    print(
        f"folder            {os.path.abspath(folder)}: {results[('local processes', 1)]['traces']} traces "
        f"({os.cpu_count()} CPUs here; best of {repeat})"
    )
    print(f"{'executor':<18}{'workers':>8}{'seconds':>10}{'traces/min':>12}{'vs baseline':>13}{'errors':>8}")
    for (label, jobs), r in results.items():
        ratio = r["per_minute"] / base if base else float("nan")
        print(f"{label:<18}{jobs:>8}{r['seconds']:>10.2f}{r['per_minute']:>12.1f}{ratio:>12.2f}x{r['errors']:>8}")
    if not has_dask:
        print("dask local: skipped (pip install 'tracekit[batch]')")
    print("baseline: 1 worker, local processes, measured in this run")
    return {f"{k[0]} x{k[1]}": v for k, v in results.items()}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    main(args.folder, args.repeat)
    sys.exit(0)
