"""`tracekit mcp`: time of each tool's first call on a trace (read + analyse + derive) against
its cached calls, end to end through the MCP SDK's client over stdio.

    python benchmarks/bench_mcp.py [TRACE] [--repeat N]
        (default: ../shared/traces/rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz;
         compare and project use the shared B300/MI300X SGLang pair, projecting B300 --to mi300x)

Each tool gets a fresh server process, so its first call finds nothing cached; then it is
called N more times (default 10) on the unchanged trace. Prints per tool the first call, the
median and the slowest cached call, and first / median. The target (issue #26): every cached
call under 100 ms; exits 1 when one is not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRACES = os.path.join(ROOT, "..", "shared", "traces")
DEFAULT = os.path.join(TRACES, "rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz")
PAIR = (
    os.path.join(TRACES, "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz"),
    os.path.join(TRACES, "mi300x_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz"),
)
TARGET_MS = 100.0


def calls(trace: str) -> dict[str, dict]:
    return {
        "summary": {"path": trace},
        "steps": {"path": trace, "start": 0, "stop": 20},
        "kernels": {"path": trace, "phase": None, "name": "gemm", "limit": 10},
        "idle": {"path": trace},
        "explain": {"path": trace, "finding": "0"},
        "compare": {"before": PAIR[0], "after": PAIR[1]},
        "project": {"path": PAIR[0], "to": "mi300x"},
    }


async def _time_tool(name: str, args: dict, repeat: int, folders: list[str]) -> tuple[float, list[float], int]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    argv = ["-m", "tracekit", "mcp"] + [a for f in folders for a in ("--allow", f)]
    params = StdioServerParameters(
        command=sys.executable,
        args=argv,
        env={"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)},
        cwd=ROOT,
    )
    args = {k: v for k, v in args.items() if v is not None}
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                t = time.perf_counter()
                r = await session.call_tool(name, args)
                first = time.perf_counter() - t
                if getattr(r, "is_error", None) or getattr(r, "isError", None):
                    raise SystemExit(f"{name} failed: {r.content[0].text}")
                size = len(r.content[0].text)
                json.loads(r.content[0].text)
                cached = []
                for _ in range(repeat):
                    t = time.perf_counter()
                    await session.call_tool(name, args)
                    cached.append(time.perf_counter() - t)
    return first, cached, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=10)
    opts = ap.parse_args()
    missing = [p for p in (opts.trace, *PAIR) if not os.path.exists(p)]
    if missing:
        print(f"skipped: {missing[0]} is absent (../shared/traces is not beside this checkout)")
        return 0
    try:
        import anyio
    except ImportError:
        print("skipped: the MCP SDK is not installed (pip install 'tracekit[mcp]')")
        return 0
    trace = os.path.abspath(opts.trace)
    folders = sorted({os.path.dirname(trace), os.path.dirname(os.path.abspath(PAIR[0]))})
    print(
        f"trace   {os.path.basename(trace)}; compare/project: {os.path.basename(PAIR[0])} "
        f"(vs {os.path.basename(PAIR[1])}, --to mi300x)"
    )
    print(f"{'tool':<9} {'first ms':>9} {'cached p50':>11} {'cached max':>11} {'first/p50':>10} {'answer':>8}")
    slow = []
    for name, args in calls(trace).items():
        first, cached, size = anyio.run(_time_tool, name, args, opts.repeat, folders)
        p50, worst = statistics.median(cached) * 1e3, max(cached) * 1e3
        print(f"{name:<9} {first * 1e3:9.0f} {p50:11.1f} {worst:11.1f} {first * 1e3 / p50:9.0f}x {size:7d}c")
        if worst >= TARGET_MS:
            slow.append(f"{name} {worst:.0f} ms")
    print(
        f"target: every cached call < {TARGET_MS:.0f} ms (end to end over stdio, {opts.repeat} calls per tool): "
        + ("met" if not slow else "MISSED by " + ", ".join(slow))
    )
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
