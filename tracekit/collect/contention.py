"""How much of the CPU other processes took while tracekit collected: the measure of a busy machine.

The 1-minute load average lags (it needs about a minute of load to rise) and counts this run's
own threads, so it cannot say whether *other* work competed with a run of a few seconds. The
kernel's CPU accounting can: over a window, every core's busy time (``/proc/stat``: all but idle
and iowait; steal included, since a hypervisor's other guests compete the same way) minus this
process's own CPU time (``os.times``: all its threads) is what other processes used. Averaged over
the window's wall time it is a number of cores.

A run of ``threads`` threads on ``cores`` cores is slowed once the others need more than the
cores it leaves free: ``busy`` compares the others' cores with ``cores - threads`` plus half a
core (a sustained half core is a busy loop's half share, not a daemon's blip). Linux only;
elsewhere the window measures nothing (None) and the load average stands in.
"""

from __future__ import annotations

import os
import time
from typing import Any

# Half a core held for the whole window: more than background daemons take, less than one
# competing busy process (which holds a whole core).
SLACK_CORES = 0.5


def _cpu_busy_seconds() -> float | None:
    """Seconds every core together spent busy since boot, or None off Linux."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


class Window:
    """Start it before the measured work and ``result()`` after: the others' average cores."""

    def __init__(self) -> None:
        self.wall0 = time.monotonic()
        self.busy0 = _cpu_busy_seconds()
        self.own0 = _own_seconds()

    def result(self, threads: int | None, cores: int | None) -> dict[str, Any] | None:
        busy1 = _cpu_busy_seconds()
        wall = time.monotonic() - self.wall0
        if self.busy0 is None or busy1 is None or wall <= 0:
            return None
        others = max(0.0, (busy1 - self.busy0) - (_own_seconds() - self.own0)) / wall
        return {"other_cores": round(others, 3), "seconds": round(wall, 3), "busy": busy(others, threads, cores)}


def busy(other_cores: float, threads: int | None, cores: int | None) -> bool:
    """Other processes needed cores the run wanted (see the module's rule)."""
    free = max((cores or 1) - (threads or cores or 1), 0)
    return other_cores > free + SLACK_CORES
