"""Read throughput and peak memory of tracekit's reader against json.loads of the same bytes.

    python benchmarks/bench_read.py [TRACE]    (default: ../shared/traces/v100_ddp_train_large.json.gz)

Both sides start from the compressed file and include decompression, so the
ratio compares like with like; MB/s are of decompressed JSON. ``json.loads``
builds no tables at all, which makes it a generous baseline. Each figure is the
best of several runs; peak memory is measured separately with tracemalloc (which
slows the run down, so it is not timed) and given relative to the JSON size.
Targets (issue 2): ratio >= 1.5 and peak memory < 3x the decompressed size.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "shared", "traces", "v100_ddp_train_large.json.gz")


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
        del result
    return min(times)


def _peak(fn) -> int:
    gc.collect()
    tracemalloc.start()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


def main(path: str = DEFAULT, repeat: int = 3) -> dict:
    from tracekit import read_trace

    if not os.path.exists(path):
        print(f"skipped: {path} is absent (../shared/traces is not beside this checkout)")
        return {}
    with gzip.open(path) as f:
        size = len(f.read())
    mb = size / 1e6

    def baseline():
        with gzip.open(path) as f:
            return json.loads(f.read())

    def ours():
        return read_trace(path)

    ours()  # warm imports and caches once
    t_json = _best(baseline, repeat)
    t_ours = _best(ours, repeat)
    peak = _peak(ours)
    trace = ours()
    out = {
        "file": os.path.basename(path),
        "decompressed_mb": round(mb, 1),
        "events": trace.n_events,
        "json_loads_mb_s": round(mb / t_json, 1),
        "tracekit_mb_s": round(mb / t_ours, 1),
        "ratio": round(t_json / t_ours, 2),
        "read_s": round(t_ours, 3),
        "peak_memory_mb": round(peak / 1e6, 1),
        "peak_over_json_size": round(peak / size, 2),
    }
    print(f"trace            {out['file']} ({out['decompressed_mb']} MB JSON, {out['events']} events)")
    print(f"json.loads       {out['json_loads_mb_s']:8.1f} MB/s   (gzip + json.loads, no tables)")
    print(f"tracekit read    {out['tracekit_mb_s']:8.1f} MB/s   ({out['read_s']} s, tables and links built)")
    print(f"ratio            {out['ratio']:8.2f} x      (target >= 1.5)")
    print(f"peak memory      {out['peak_memory_mb']:8.1f} MB     = {out['peak_over_json_size']}x the JSON size (target < 3)")
    return out


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
