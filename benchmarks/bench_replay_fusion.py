"""The replay's "elementwise fused" estimate against torch.compile, measured in the same run (issue 48).

    python benchmarks/bench_replay_fusion.py [--new-tokens N] [--threads T]

Two CPU collects of the tiny preset, one after the other on this machine: eager, and with
``--compile`` (Inductor fuses the decode step's elementwise chains). On the eager trace the step
replay runs the fusion what-if over the decode steps (every chain of back-to-back fusible ops run
as one op as long as its longest, dispatched once: ``advice.fused_away``); the compiled run's
decode step is what fusion actually gave. Printed, not asserted: the estimate, the measured
difference and their ratio. Inductor also changes more than the elementwise chains (it fuses
into reductions and reorders), so the two need not agree; the figure says how far the replay's
what-if is from a real fusion on this machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tracekit import read_trace  # noqa: E402
from tracekit.analysis import analyze  # noqa: E402
from tracekit.analysis.findings.advice import fused_away  # noqa: E402
from tracekit.analysis.replay import changes as ch  # noqa: E402


def collect(out: str, new_tokens: int, threads: int, compiled: bool) -> str:
    cmd = [
        sys.executable,
        "-m",
        "tracekit",
        "collect",
        "-n",
        str(new_tokens),
        "--threads",
        str(threads),
        "--no-calibrate",
        "--no-progress",
        "-o",
        out,
        "--force",
    ]
    subprocess.run(cmd + (["--compile"] if compiled else []), check=True, stdout=subprocess.DEVNULL)
    return out


def decode_p50_ms(a) -> float:
    s = a.steps[a.steps["phase"] == "decode"]
    return float(np.median(s["duration_ns"].to_numpy())) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        eager_path = collect(os.path.join(tmp, "eager.pt.trace.json.gz"), args.new_tokens, args.threads, False)
        comp_path = collect(os.path.join(tmp, "compiled.pt.trace.json.gz"), args.new_tokens, args.threads, True)
        eager, comp = analyze(read_trace(eager_path)), analyze(read_trace(comp_path))
    w = eager.work
    dec = w[w["phase"] == "decode"]
    rows = fused_away(dec)
    fused = ch.Change(ch.DURATIONS, rows=rows, durations=np.zeros(len(rows), np.int64), drop_launches=True)
    o = eager.replayer.run([fused])
    steps = eager.steps
    decode = (steps["phase"] == "decode").to_numpy()
    est = float(np.median(o.saving_ns[decode])) / 1e6
    e_ms, c_ms = decode_p50_ms(eager), decode_p50_ms(comp)
    measured = e_ms - c_ms
    print(f"decode step p50: eager {e_ms:.3f} ms, compiled {c_ms:.3f} ms (both measured in this run)")
    print(f"ops fused away per run: {len(rows)}")
    print(f"replayed 'elementwise fused' saving per decode step: {est:.3f} ms")
    print(f"measured saving of torch.compile per decode step:    {measured:.3f} ms")
    print(
        f"ratio estimate / measured: {est / measured:.2f}"
        if measured > 0
        else "ratio: the compiled run was not faster on this machine"
    )


if __name__ == "__main__":
    main()
