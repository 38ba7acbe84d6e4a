"""Whole-process CPU time and peak memory of reading a big trace: tracekit against json.loads and HTA.

    python benchmarks/bench_read.py [--trace PATH] [--repeat N] [--size GB] [--no-stream] [--no-stream-summary] [--no-hta]
    python benchmarks/bench_read.py --chunks      (chunk sizes: decode + columns, in process)

Each engine runs in its own subprocess, started from the compressed file, and is
measured from the outside (``os.wait4``: user + system CPU seconds and peak RSS of
that process), so interpreter start-up, imports, decompression and every thread
count, as a user waiting for ``tracekit summary`` would see them. tracekit's bytecode
is written first, as installing it does (``compile_bytecode``):

* tracekit   ``tracekit summary TRACE``: read, link, analyse and render the text summary
* tracekit read  ``read_trace(TRACE)`` alone: the reader's own share
* json.loads ``json.loads(gzip.open(TRACE).read())``: no tables at all, a generous baseline
* HTA        ``hta.common.trace.parse_trace_file(TRACE)``, when ``hta`` is importable

Figures are the median of ``--repeat`` runs in this one run of the benchmark, and the
ratios compare engines measured side by side, so a loaded machine shifts them less.
Goals (issue 15): tracekit's CPU time <= 1/3 of json.loads', and its peak RSS <= 1.5x
the decompressed JSON. Issue 50, the reader nearer its floor: ``read_trace``'s whole process
at least READER_GOAL times faster than json.loads in CPU, with peak RSS <= READER_RSS_GOAL x
the JSON. Peak RSS is the child's own: this process builds the trace and compiles the
bytecode in children of its own, because Linux reports a child's peak as at least the RSS
of the process it was forked from.

The default trace is the shared V100 DDP trace's events repeated 8 times with shifted
timestamps and ids (~380 MB of JSON, 1.7M events), built on first use into
$TRACEKIT_BENCH_CACHE (default ~/.cache/tracekit-bench), never into the repository.

Then a streamed read: a synthetic serving trace of ``--size`` GB of JSON (default 4:
17.6M events, 3.5M kernels, vLLM step annotations, Kineto-sized kernel args) is written gzip-compressed
to the same cache folder a block of events at a time, never held in memory, and
``read_trace`` must finish on it with peak RSS under STREAM_BOUND_OF_JSON x its JSON
size (0.35: 1.4 GB for 4 GB of JSON); ``tracekit summary`` on it is timed too.

Last, a trace too large to analyse whole: ``tracekit split`` cuts the synthetic trace into
windows (default size) and must finish under SPLIT_BOUND_BYTES of peak RSS, a bound that
does not grow with the trace; ``tracekit summary`` of its largest window is measured
against the whole trace's summary above (``--no-split`` skips this).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "traces", "v100_ddp_train_large.json.gz")
REPEATS_OF_V100 = 8
CPU_GOAL = 1 / 3  # tracekit CPU / json.loads CPU
RSS_GOAL = 1.5  # tracekit peak RSS / decompressed JSON bytes
READER_GOAL = 3.5  # json.loads CPU / `tracekit read` CPU (issue 50)
READER_RSS_GOAL = 1.0  # `tracekit read` peak RSS / decompressed JSON bytes (issue 50)
STREAM_BOUND_OF_JSON = 0.35  # peak RSS / JSON bytes of the synthetic streamed trace
SPLIT_BOUND_BYTES = 500e6  # peak RSS of `tracekit split`, at any trace size


def cache_dir() -> str:
    d = os.environ.get("TRACEKIT_BENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tracekit-bench")
    os.makedirs(d, exist_ok=True)
    return d


# ---------------------------------------------------------------------------------------------
# Building the traces


def build_large(source: str, dest: str, repeats: int = REPEATS_OF_V100) -> None:
    """``source``'s events ``repeats`` times, each copy shifted past the previous one in time
    and in every id (External id, correlation, flow id), so links stay one-to-one."""
    with gzip.open(source) as f:
        doc = json.loads(f.read())
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = int(max(ts) - min(ts)) + 1000
    id_step = 1 + max([int(v) for e in events for v in _ids(e) if isinstance(v, int)] + [0])
    tmp = dest + ".part"
    with gzip.open(tmp, "wt", compresslevel=6, encoding="utf-8") as out:
        head = json.dumps(doc)[:-1]  # the top-level keys, without the closing brace
        out.write(head + (", " if doc else "") + '"traceEvents": [\n')
        for k in range(repeats):
            copy = [_shifted(e, k * span, k * id_step) for e in events]
            text = json.dumps(copy)[1:-1]
            out.write((",\n" if k else "") + text)
        out.write("\n]}\n")
    os.replace(tmp, dest)


def _ids(e: dict):
    a = e.get("args")
    if isinstance(a, dict):
        for key in ("External id", "correlation"):
            if key in a:
                yield a[key]
    if "id" in e:
        yield e["id"]


def _shifted(e: dict, dt: int, did: int) -> dict:
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
        e["ts"] = e["ts"] + dt
    if isinstance(e.get("id"), int):
        e["id"] += did
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        for key in ("External id", "correlation"):
            if isinstance(a.get(key), int) and a[key] > 0:
                a[key] += did
        e["args"] = a
    return e


# One GEMM of a synthetic serving trace: an op, its launch, the kernel, the flow pair.
# Sizes and fields follow a current Kineto trace (kernel args as Kineto writes them).
_STEP = (
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": %d.%03d, "dur": 8.5, '
    '"args": {"External id": %d, "Record function id": 0, "Ev Idx": %d, "Input Dims": [[16, 4096], [4096, 4096]], '
    '"Input type": ["c10::BFloat16", "c10::BFloat16"], "Concrete Inputs": ["", ""]}},\n'
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": %d.%03d, '
    '"dur": 4.0, "args": {"External id": %d, "cbid": 211, "correlation": %d}},\n'
    '{"ph": "s", "id": %d, "pid": 1, "tid": 1, "ts": %d.%03d, "cat": "ac2g", "name": "ac2g"},\n'
    '{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_%d", '
    '"pid": 0, "tid": 7, "ts": %d.%03d, "dur": 20.25, "args": {"External id": %d, "queued": 0, "device": 0, '
    '"context": 1, "stream": 7, "correlation": %d, "registers per thread": 168, "shared memory": 147456, '
    '"blocks per SM": 0.25, "warps per SM": 2.0, "grid": [32, 1, 1], "block": [384, 1, 1], '
    '"est. achieved occupancy %%": 0}},\n'
    '{"ph": "f", "id": %d, "pid": 0, "tid": 7, "ts": %d.%03d, "cat": "ac2g", "name": "ac2g", "bp": "e"}'
)
# vLLM's step annotation (a decode step of 16 requests) around every _OPS_PER_STEP GEMMs, as
# an engine writes it: segmentation reads steps from it.
_OPS_PER_STEP = 64
_ANNOTATION = (
    '{"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_16(16)", "pid": 1, '
    '"tid": 1, "ts": %d, "dur": %d, "args": {"External id": %d}}'
)
_HEAD = (
    '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
    '"totalGlobalMem": 85029158912, "computeMajor": 9, "computeMinor": 0, "numSms": 132}], '
    '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": [\n'
)
_TAIL = '\n], "traceName": "synthetic", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}\n'


def build_synthetic(dest: str, json_bytes: int) -> int:
    """A gzip trace of about ``json_bytes`` of JSON, written in blocks; returns its JSON size."""
    tmp = dest + ".part"
    written = 0
    i = 0
    block = 2000
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as out:
        out.write(_HEAD.encode())
        written += len(_HEAD)
        while written < json_bytes:
            parts = []
            for j in range(i, i + block):
                us = j * 30  # a GEMM every 30 us
                if j % _OPS_PER_STEP == 0:
                    parts.append(_ANNOTATION % (us, _OPS_PER_STEP * 30 - 1, j))
                parts.append(_STEP % (us, 0, j, j, us, 500, j, j, j, us, 700, j % 50, us + 10, 0, j, j, j, us + 10, 0))
            text = ("" if i == 0 else ",\n") + ",\n".join(parts)
            data = text.encode()
            out.write(data)
            written += len(data)
            i += block
        out.write(_TAIL.encode())
        written += len(_TAIL)
    os.replace(tmp, dest)
    return written


# ---------------------------------------------------------------------------------------------
# Measuring


ENGINES = {
    "tracekit": "import sys; from tracekit.cli import main; sys.argv = ['tracekit', 'summary', sys.argv[1]]; main()",
    "tracekit read": "import sys; from tracekit import read_trace; read_trace(sys.argv[1])",
    "json.loads": "import gzip, json, sys; json.loads(gzip.open(sys.argv[1]).read())",
    "HTA": "import sys; from hta.common.trace import parse_trace_file; parse_trace_file(sys.argv[1])",
    "tracekit split": "import sys; from tracekit.cli import main; "
    "sys.argv = ['tracekit', 'split', sys.argv[1], '-o', sys.argv[2], '--force']; main()",
}


def measure(engine: str, *args: str) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of one subprocess running ``engine`` on ``args`` (the trace first)."""
    path = args[0]
    # No cache (tracekit.cache): every repeat reads and analyses, as the first look does.
    proc = subprocess.Popen(
        [sys.executable, "-c", ENGINES[engine], *args],
        env={**os.environ, "TRACEKIT_NO_CACHE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{engine} failed on {path} (exit {proc.returncode}):\n{err[-2000:]}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024  # ru_maxrss is KiB on Linux


def _hta_available() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import hta.common.trace"], capture_output=True)
    return probe.returncode == 0


def json_size(path: str) -> int:
    n = 0
    with gzip.open(path) as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return n


def compile_bytecode() -> None:
    """Write tracekit's bytecode first, as installing the package does (pip compiles it):
    under PYTHONDONTWRITEBYTECODE (set on some machines and CI images) an editable checkout
    would compile its ~20k lines again in every timed process (~0.15 s of CPU each)."""
    import compileall

    import tracekit

    compileall.compile_dir(os.path.dirname(tracekit.__file__), quiet=1)


def compare(path: str, repeat: int, hta: bool = True) -> dict:
    # In a child: importing tracekit here would raise every measured child's reported peak RSS.
    subprocess.run([sys.executable, __file__, "--compile-only"], check=True)
    size = json_size(path)
    engines = ["tracekit", "tracekit read", "json.loads"] + (["HTA"] if hta and _hta_available() else [])
    runs: dict[str, list[tuple[float, int]]] = {e: [] for e in engines}
    for r in range(repeat):
        for e in engines:
            if e == "HTA" and r > 0:
                continue  # HTA takes ~40 s a run: once is enough to place it
            runs[e].append(measure(e, path))
    out = {"file": path, "json_mb": size / 1e6}
    for e, rs in runs.items():
        out[e] = {
            "cpu_s": statistics.median(c for c, _ in rs),
            "rss_mb": statistics.median(m for _, m in rs) / 1e6,
            "cpu_all": [round(c, 2) for c, _ in rs],
        }
    tk, js = out["tracekit"], out["json.loads"]
    out["cpu_ratio"] = tk["cpu_s"] / js["cpu_s"]
    out["rss_over_json"] = tk["rss_mb"] / out["json_mb"]
    print(
        f"trace        {os.path.basename(path)}: {out['json_mb']:.0f} MB of JSON, {os.path.getsize(path) / 1e6:.0f} MB gzipped"
    )
    print(f"{'engine':14} {'CPU s':>7} {'peak RSS MB':>12} {'RSS/JSON':>9}   runs (CPU s)")
    for e in engines:
        v = out[e]
        print(f"{e:14} {v['cpu_s']:7.2f} {v['rss_mb']:12.0f} {v['rss_mb'] / out['json_mb']:9.2f}   {v['cpu_all']}")
    print(f"{'':14} tracekit = `tracekit summary` (read, link, analyse, render); tracekit read = read_trace alone")
    print(
        f"tracekit CPU / json.loads CPU = {out['cpu_ratio']:.2f} (goal <= {CPU_GOAL:.2f}: "
        f"{'met' if out['cpu_ratio'] <= CPU_GOAL else 'NOT met'}); "
        f"json.loads / tracekit = {1 / out['cpu_ratio']:.1f}x"
    )
    if "HTA" in out:
        print(f"HTA CPU / tracekit CPU = {out['HTA']['cpu_s'] / tk['cpu_s']:.1f}x")
    print(
        f"tracekit peak RSS / JSON size = {out['rss_over_json']:.2f} (goal <= {RSS_GOAL}: "
        f"{'met' if out['rss_over_json'] <= RSS_GOAL else 'NOT met'})"
    )
    rd = out["tracekit read"]
    out["reader_speedup"] = js["cpu_s"] / rd["cpu_s"]
    out["reader_rss_over_json"] = rd["rss_mb"] / out["json_mb"]
    print(
        f"tracekit read alone: CPU / json.loads CPU = {rd['cpu_s'] / js['cpu_s']:.2f}, "
        f"peak RSS / JSON size = {out['reader_rss_over_json']:.2f}"
    )
    print(
        f"reader (issue 50): json.loads {js['cpu_s']:.2f} s / tracekit read {rd['cpu_s']:.2f} s of CPU = "
        f"{out['reader_speedup']:.2f}x (goal >= {READER_GOAL}x: {'met' if out['reader_speedup'] >= READER_GOAL else 'NOT met'}); "
        f"`tracekit summary` {1 / out['cpu_ratio']:.2f}x; peak RSS {rd['rss_mb']:.0f} MB = "
        f"{out['reader_rss_over_json']:.2f}x the {out['json_mb']:.0f} MB of JSON (goal <= {READER_RSS_GOAL}x: "
        f"{'met' if out['reader_rss_over_json'] <= READER_RSS_GOAL else 'NOT met'})"
    )
    return out


def stream(gb: float, summary: bool = True) -> dict:
    dest = os.path.join(cache_dir(), f"synthetic_{gb:g}gb.json.gz")
    if not os.path.exists(dest):
        t = time.perf_counter()
        print(f"writing {dest} ({gb:g} GB of JSON) ...", flush=True)
        build_synthetic(dest, int(gb * 1e9))
        print(f"  written in {time.perf_counter() - t:.0f} s", flush=True)
    size = json_size(dest)
    bound = STREAM_BOUND_OF_JSON * size
    print(
        f"streamed     {os.path.basename(dest)}: {size / 1e9:.2f} GB of JSON, {os.path.getsize(dest) / 1e6:.0f} MB gzipped"
    )
    out = {"json_bytes": size, "bound": bound}
    for engine in ["tracekit read"] + (["tracekit"] if summary else []):
        t = time.perf_counter()
        cpu, rss = measure(engine, dest)
        wall = time.perf_counter() - t
        out[engine] = {"cpu_s": cpu, "rss": rss, "wall_s": wall}
        line = f"{engine:14} {wall:5.0f} s wall, {cpu:5.0f} s CPU, peak RSS {rss / 1e6:6.0f} MB = {rss / size:.2f}x the JSON"
        if engine == "tracekit read":
            out["ok"] = rss < bound
            line += f" (bound {bound / 1e6:.0f} MB = {STREAM_BOUND_OF_JSON}x: {'met' if out['ok'] else 'NOT met'})"
        print(line, flush=True)
    return out


def split(gb: float, whole_summary_rss: int | None) -> dict:
    """``tracekit split`` of the synthetic trace, then ``tracekit summary`` of its largest window."""
    import shutil

    src = os.path.join(cache_dir(), f"synthetic_{gb:g}gb.json.gz")
    dest = os.path.join(cache_dir(), f"synthetic_{gb:g}gb-windows")
    size = json_size(src)
    t = time.perf_counter()
    cpu, rss = measure("tracekit split", src, dest)
    wall = time.perf_counter() - t
    files = sorted(os.path.join(dest, f) for f in os.listdir(dest) if f.endswith(".json.gz"))
    ok = rss < SPLIT_BOUND_BYTES
    print(
        f"{'tracekit split':14} {wall:5.0f} s wall, {cpu:5.0f} s CPU, peak RSS {rss / 1e6:6.0f} MB = {rss / size:.2f}x "
        f"the JSON, {len(files)} windows (bound {SPLIT_BOUND_BYTES / 1e6:.0f} MB at any size: "
        f"{'met' if ok else 'NOT met'})",
        flush=True,
    )
    largest = max(files, key=os.path.getsize)
    w_size = json_size(largest)
    w_cpu, w_rss = measure("tracekit", largest)
    vs = f" = {w_rss / whole_summary_rss:.2f}x the whole trace's summary" if whole_summary_rss else ""
    print(
        f"{'a window':14} tracekit summary of the largest ({w_size / 1e9:.2f} GB of JSON): {w_cpu:5.0f} s CPU, "
        f"peak RSS {w_rss / 1e6:6.0f} MB{vs}",
        flush=True,
    )
    shutil.rmtree(dest)
    return {
        "cpu_s": cpu,
        "rss": rss,
        "wall_s": wall,
        "windows": len(files),
        "ok": ok,
        "window_cpu_s": w_cpu,
        "window_rss": w_rss,
    }


CHUNK_KB = (256, 512, 1024, 2048, 4096, 8192)


def chunk_sweep(source: str = SHARED, repeat: int = 5) -> dict[int, float]:
    """Decoding plus column building of ``source``'s JSON (held in memory, so inflating is
    left out) per chunk size, best of ``repeat`` in this process: what the reader's 1 MiB
    slices (``inflate.SLICE_BYTES``) were chosen by."""
    from tracekit.trace import columns, stream

    with gzip.open(source) as f:
        raw = f.read()
    best = {kb: float("inf") for kb in CHUNK_KB}
    for _ in range(repeat):
        for kb in CHUNK_KB:  # interleaved, so load drifting on the machine hits every size alike
            cb = kb << 10
            t = time.process_time()
            built = columns.Builder()
            for events, exact in stream.EventChunks(source, (raw[i : i + cb] for i in range(0, len(raw), cb))):
                built.add(events, exact)
                del events
            best[kb] = min(best[kb], time.process_time() - t)
    base = best[1024]
    print(
        f"chunk sweep  {os.path.basename(source)} ({len(raw) / 1e6:.0f} MB of JSON), decode + columns, best of {repeat}:"
    )
    for kb, s in best.items():
        print(f"  {kb:5d} KB chunks {s:6.3f} s CPU  ({s / base:.2f}x the 1024 KB chunks)")
    return best


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", help="a .json.gz trace (default: the V100 trace x8, built on first use)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--size",
        "--stream-gb",
        dest="stream_gb",
        type=float,
        default=4.0,
        help="GB of JSON in the synthetic streamed trace (default 4)",
    )
    ap.add_argument("--no-stream", action="store_true", help="skip the streamed read of the synthetic trace")
    ap.add_argument("--no-hta", action="store_true", help="leave HTA out even where it is installed (~45 s a run)")
    ap.add_argument(
        "--no-stream-summary",
        action="store_true",
        help="on the synthetic trace, time the read alone, not `tracekit summary` too",
    )
    ap.add_argument("--no-split", action="store_true", help="skip `tracekit split` of the synthetic trace")
    ap.add_argument(
        "--chunks", action="store_true", help="only compare chunk sizes (decode + columns of the shared V100 trace)"
    )
    ap.add_argument("--build-large", metavar="DEST", help=argparse.SUPPRESS)
    ap.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build_large:
        build_large(SHARED, args.build_large)
        return {}
    if args.compile_only:
        compile_bytecode()
        return {}
    if args.chunks:
        return {"chunks": chunk_sweep()} if os.path.exists(SHARED) else {}
    path = args.trace
    if path is None:
        path = os.path.join(cache_dir(), f"v100_ddp_train_large_x{REPEATS_OF_V100}.json.gz")
        if not os.path.exists(path):
            if not os.path.exists(SHARED):
                print(f"skipped: {SHARED} is absent (../shared/traces is not beside this checkout)")
                return {}
            print(f"building {path} from {os.path.basename(SHARED)} ...", flush=True)
            # In a child: the build holds the whole JSON, and every process this one forks
            # afterwards would report at least that as its peak RSS.
            subprocess.run([sys.executable, __file__, "--build-large", path], check=True)
    out = {"compare": compare(path, args.repeat, hta=not args.no_hta)}
    if not args.no_stream:
        out["stream"] = stream(args.stream_gb, summary=not args.no_stream_summary)
        if not args.no_split:
            out["split"] = split(args.stream_gb, out["stream"].get("tracekit", {}).get("rss"))
    return out


if __name__ == "__main__":
    main()
