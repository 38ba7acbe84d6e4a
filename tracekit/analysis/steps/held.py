"""GPU time held by work the trace did not record: when a step's work could not start.

Engines pipeline their steps (SGLang's overlap scheduler, vLLM's asynchronous scheduling): the
host prepares step N+1 while the device still runs step N, and a profile starts in the middle
of that pipeline. The device then runs work that was queued before the profile began, which
the trace does not hold, and the first step's work waits behind it: a stream waits on an event
recorded before the profile, a kernel is queued behind the unrecorded work. Another process
sharing the device does the same.

The trace shows it by physics. A device with nothing to run starts a launched kernel within
the launch latency (``LAUNCH_LATENCY_NS``) of its launch call; on one clock, no earlier
(the trace's smallest launch-to-start delay bounds any offset between the host's and the
device's clocks, and is added to the latency). A kernel that starts later than that, while
the device ran no recorded work at all since the launch, was held back by work the trace
does not show: the device was busy with it, or a stream waited on it. That stretch, from the
later of its launch plus latency and the end of the device's last recorded work, to its start,
is ``held_intervals``. Only the first kernel of a launch counts (the kernels of a graph replay
share one launch and follow each other inside it). Memsets and copies between device memory or
pinned host memory count as kernels do; a copy that may touch pageable host memory (its name
says ``Pageable``, or just ``Host``, as ROCm's do) does not: it starts late because the driver
stages it on the host first. A stretch shorter than ``HELD_MIN_NS`` is not told apart from
launch latency and jitter.

By construction no recorded work runs in a held stretch, and the stretches do not overlap one
another, so the steps table takes them out of its step's window whole (``unrecorded_ns``): a
step is measured from the point its own work could start, and the time the device spent on
other work is never its idle.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analysis import categorical
from tracekit.analysis.steps.work import NO_TIME
from tracekit.analysis.waiting.intervals import LAUNCH_LATENCY_NS, running_end

# A held stretch two orders of magnitude above the launch latency: no launch latency, doorbell
# or interrupt jitter, or wake of an idle device comes near it, so what is held this long waited
# on work.
HELD_MIN_NS = 100 * LAUNCH_LATENCY_NS
# A copy's name that says host memory may be pageable: Kineto's "(Pageable -> Device)", and
# ROCm's "(Host -> Device)", which does not say whether it was pinned.
_PAGEABLE = re.compile(r"pageable|\bhost\b", re.IGNORECASE)


def staged_copies(kind: np.ndarray, name: pd.Series) -> np.ndarray:
    """Which units are copies that may touch pageable host memory (``_PAGEABLE``): each distinct
    name tested once."""
    return (np.asarray(kind) == "memcpy") & categorical.mask(name, lambda n: _PAGEABLE.search(n) is not None)


def held_intervals(
    kind: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    issue: np.ndarray,
    launch: np.ndarray,
    device: np.ndarray,
    staged: np.ndarray | None = None,
    recorded_before: dict | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, start, end)`` of each stretch the device held a launched unit back while it ran no
    recorded work (see the module docstring): ``row`` is the work row of the unit held, its
    start the stretch's end. Inputs are work-table columns (``kind`` "kernel", "memset" or
    "memcpy", ``issue`` ``work.NO_TIME`` where the launch is not in the trace), each unit's device, which
    units may be staged through pageable host memory (``staged_copies``; None: none), and per
    device the end of recorded work before the trace (a window of a longer one:
    ``segment.PREVIOUS_DEVICE_END``)."""
    n = len(start)
    none = (np.zeros(0, np.int64),) * 3
    launched = np.asarray(issue) != NO_TIME
    if not n or not launched.any():
        return none
    start, end, issue = (np.asarray(a, dtype=np.int64) for a in (start, end, issue))
    # The latest end of the recorded work that started before each unit on its device (every
    # kind, every stream): units sorted by device then start, a running maximum per device.
    order = np.lexsort((start, device))
    dev = np.asarray(device)[order]
    run = running_end(dev, end[order])
    heads = np.flatnonzero(np.r_[True, dev[1:] != dev[:-1]])
    lowest = np.iinfo(np.int64).min
    before = np.r_[lowest, run[:-1]]
    before[heads] = lowest
    # A window of a longer trace: the work of the windows before it on the device is recorded too.
    floor = np.array([int((recorded_before or {}).get(int(d), lowest)) for d in dev[heads]], dtype=np.int64)
    prior = np.empty(n, np.int64)
    prior[order] = np.maximum(before, np.repeat(floor, np.diff(np.r_[heads, len(dev)])))
    # The host's and device's clocks may be offset: the smallest delay the trace shows bounds it.
    offset = max(0, int((start - issue)[launched].min()))
    kind = np.asarray(kind)
    queued = (kind == "kernel") | (kind == "memset") | (kind == "memcpy")
    if staged is not None:
        queued &= ~np.asarray(staged, dtype=bool)
    candidates = np.flatnonzero(launched & queued)
    if not len(candidates):
        return none
    # The first kernel of each launch: a graph replay's kernels share its launch.
    candidates = candidates[np.lexsort((start[candidates], launch[candidates]))]
    rows = np.sort(candidates[np.r_[True, launch[candidates][1:] != launch[candidates][:-1]]])
    lo = np.maximum(issue[rows] + LAUNCH_LATENCY_NS + offset, prior[rows])
    held = start[rows] - lo >= HELD_MIN_NS
    return rows[held].astype(np.int64), lo[held].astype(np.int64), start[rows[held]]
