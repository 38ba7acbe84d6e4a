"""A hand-built launch-bound decode trace whose replayed answers follow by arithmetic, for the
tests of the replay's outputs (tests/test_whatif_cli.py, tests/test_replay_render.py).

Four decode steps, each a tracekit marker of 300 µs starting every 1,000 µs; in each, five
kernels of 10 µs, launched at 10, 60, 110, 160 and 210 µs into the step by 2 µs launch calls (48 µs
of dispatch between them, under the 50 µs the idle attribution counts as launch overhead), each
kernel starting 5 µs after its launch. The host closes each step (its marker ends at 300 µs, the
last kernel at 225 µs), so every step's critical path is host work before the first call (10 µs),
the launches (5 × 2 µs calls + 4 × 48 µs dispatch = 202 µs) and host work to the marker's end (88 µs).
With launch overhead removed the 202 µs go and nothing else moves: 98 µs per step.
"""

from __future__ import annotations

from pathlib import Path

from kineto import Doc

STEPS, KERNELS = 4, 5
STEP_US, PERIOD_US, FIRST_US, EVERY_US, CALL_US, LATENCY_US, KERNEL_US = 300.0, 1000.0, 10.0, 50.0, 2.0, 5.0, 10.0
LAUNCH_US = KERNELS * CALL_US + (KERNELS - 1) * (EVERY_US - CALL_US)  # 202 µs of launches per step
TAIL_US = STEP_US - FIRST_US - LAUNCH_US  # 88 µs of host work after the last launch
EVIL = "<script>alert(1)</script>_sgemm_kernel"


def launch_bound(path: Path, odd_kernel: str = "ampere_sgemm_64x64_nn") -> Path:
    """Write the trace; the middle kernel of each step is named ``odd_kernel`` (a hostile name)."""
    d = Doc()
    for s in range(STEPS):
        t0 = s * PERIOD_US
        d.annotation(f"tracekit::decode bs=1 tokens=1 kv={10 + s}", t0, STEP_US)
        for k in range(KERNELS):
            lt = t0 + FIRST_US + EVERY_US * k
            d.kernel(
                odd_kernel if k == KERNELS // 2 else "ampere_sgemm_64x64_nn",
                lt,
                lt + LATENCY_US,
                KERNEL_US,
                launch_dur=CALL_US,
            )
    return d.write(path)
