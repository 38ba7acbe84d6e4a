"""What-ifs: changes to a replay's inputs, each a cause removed or a kind of work sped up.

Each change rewrites only the durations and rules the replay runs with (``simulate.Inputs``);
several are applied together and replayed together, never added up: removing two causes that
each hide behind the other saves more together than the two apart, and two that price the same
kernels save less.

- ``launch``: launch overhead removed, the step replayed as one graph: launch calls take no
  time, the host pauses between launches shorter than ``LAUNCH_GAP_NS`` (the dispatch cost of
  issuing the next kernel, as the idle attribution counts it) vanish, and eager kernels start
  after their launch with a graph's launch latency and follow each other with a graph's
  kernel-to-kernel gap (the trace's own graph figures where it has graph replays, else its eager ones).
- ``sync`` (optionally a call name): synchronising calls no longer hold the host.
- ``host=FLOOR``: every stretch of host work between two calls cut to at most FLOOR ns.
- ``speed TARGET=F``: kernels of category TARGET (or whose name contains it) run at fraction F of
  their roof where they ran slower (kernels of unknown cost keep their time, and are counted).
- ``overlap-comm``: communication kernels hidden under compute (their time off the streams).
- ``durations``: given kernels (rows of the work table) take given times: a projection's
  re-priced times, a finding's assumption (FP8 weights, a larger batch, fused kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.analysis.pricing import taxonomy as tx
from tracekit.analysis.replay.graph import EAGER, GRAPH, Graph
from tracekit.analysis.replay.simulate import Inputs
from tracekit.analysis.waiting.idle import LAUNCH_GAP_NS
from tracekit.errors import TracekitError

LAUNCH, SYNC, HOST, SPEED, OVERLAP_COMM, DURATIONS = "launch", "sync", "host", "speed", "overlap-comm", "durations"
REMOVABLE = (LAUNCH, SYNC, OVERLAP_COMM)


@dataclass
class Change:
    kind: str
    name: str | None = None  # sync: a call name; speed: a category or kernel-name part
    value: float | None = None  # host: floor in ns; speed: fraction of roof
    rows: np.ndarray | None = None  # durations: work rows
    durations: np.ndarray | None = None  # durations: their new times (ns)
    drop_launches: bool = False  # durations: the rows' launch calls (and dispatch before them) go too
    faster_only: bool = True  # durations: never longer than the time the kernel has already
    label: str | None = None

    def amount(self) -> float:
        """The value of a host or speed change, which one without it cannot mean anything."""
        if self.value is None:
            raise TracekitError(f"A {self.kind} change needs a value.")
        return self.value

    def target(self) -> str:
        """The category or kernel-name part a speed change names."""
        if not self.name:
            raise TracekitError(f"A {self.kind} change needs a target.")
        return self.name

    def describe(self) -> str:
        if self.label:
            return self.label
        if self.kind == LAUNCH:
            return "launch overhead removed (the step as one graph)"
        if self.kind == SYNC:
            return f"synchronising call {self.name} removed" if self.name else "synchronising calls removed"
        if self.kind == HOST:
            return f"host work between calls cut to {self.amount() / 1e3:g} us"
        if self.kind == SPEED:
            return f"{self.name} kernels at {self.amount():.0%} of their roof"
        if self.kind == OVERLAP_COMM:
            return "communication overlapped with compute"
        return "kernel times changed"


@dataclass
class Applied:
    inputs: Inputs
    # Kernels a speed change could not reach (no cost known), per change label.
    unpriced: dict = field(default_factory=dict)


def parse(remove: str | None, speed: str | None, host_floor_us: float | None) -> list[Change]:
    """Changes from the CLI's words: ``--remove launch,sync[:NAME],overlap-comm``, ``--speed gemm=0.8,...``,
    ``--host-floor US``. Bad words raise ``TracekitError`` with one sentence."""
    out: list[Change] = []
    for word in (remove or "").split(","):
        word = word.strip()
        if not word:
            continue
        kind, _, name = word.partition(":")
        if kind not in REMOVABLE:
            raise TracekitError(f"--remove takes {', '.join(REMOVABLE)} (sync:NAME for one call), not {word!r}.")
        out.append(Change(kind, name=name or None))
    for word in (speed or "").split(","):
        word = word.strip()
        if not word:
            continue
        target, _, frac = word.partition("=")
        try:
            value = float(frac)
        except ValueError:
            value = float("nan")
        if not target or not (0 < value <= 1):
            raise TracekitError(
                f"--speed takes TARGET=FRACTION with a fraction of the roof in (0, 1], e.g. gemm=0.8, not {word!r}."
            )
        out.append(Change(SPEED, name=target, value=value))
    if host_floor_us is not None:
        if not host_floor_us >= 0:
            raise TracekitError(f"--host-floor takes microseconds >= 0, not {host_floor_us!r}.")
        out.append(Change(HOST, value=float(host_floor_us) * 1e3))
    return out


def apply(g: Graph, work: pd.DataFrame, changes: list[Change]) -> Applied:
    """The replay inputs with every change applied (a CPU-only run's work is its host nodes)."""
    x = Inputs.measured(g)
    out = Applied(x)
    cpu = g.device_type == "cpu"
    dur = x.h_dur if cpu else x.k_dur
    for c in changes:
        if c.kind == LAUNCH and not cpu:
            x.h_dur = np.where(g.h_launch, 0, x.h_dur)
            launch_gap = (g.h_prev >= 0) & (g.h_gap < LAUNCH_GAP_NS)
            x.h_gap = np.where(launch_gap, 0, x.h_gap)
            # A graph's kernels start no later after their launch, and follow each other no more
            # slowly, than eager ones (a graph launch's latency measured behind other work is no floor).
            x.lat[EAGER] = min(x.lat[EAGER], x.lat[GRAPH])
            x.gap[EAGER] = min(x.gap[EAGER], x.gap[GRAPH])
        elif c.kind == SYNC and not cpu:
            named = (
                np.array([c.name.lower() in n.lower() for n in g.h_name], dtype=bool)
                if c.name
                else np.ones(g.n_host, bool)
            )
            x.h_blocks = x.h_blocks & ~((g.h_waits >= 0) & named)
            # A synchronising call that waited on nothing the trace recorded (work before the
            # profile, another process's) costs, unblocked, what the quickest call of its name cost.
            blind = g.h_sync & (g.h_waits < 0) & (g.h_outer < 0) & named
            if blind.any():
                quickest = pd.Series(g.h_end - g.h_start).groupby(g.h_name).transform("min").to_numpy()
                x.h_dur = np.where(blind, np.minimum(x.h_dur, quickest), x.h_dur)
        elif c.kind == HOST:
            x.h_gap = np.minimum(x.h_gap, int(c.amount()))
        elif c.kind == SPEED:
            sel = _target(work, c.target())
            roof_ns = (
                work["roof_fraction"].to_numpy(dtype=float) * work["dur_ns"].to_numpy(dtype=float)
                if "roof_fraction" in work
                else np.full(len(work), np.nan)
            )
            known = sel & ~np.isnan(roof_ns) & (roof_ns > 0)
            want = np.where(known, roof_ns / c.amount(), np.inf)
            dur[:] = np.where(known, np.minimum(dur, want).astype(np.int64), dur)
            out.unpriced[c.describe()] = int((sel & ~known).sum())
        elif c.kind == OVERLAP_COMM:
            comm = (
                work["category"].to_numpy(dtype=object) == tx.COMMUNICATION
                if "category" in work
                else np.zeros(len(work), bool)
            )
            dur[:] = np.where(comm, 0, dur)
        elif c.kind == DURATIONS:
            new = np.asarray(c.durations, dtype=np.int64)
            # A fix only ever speeds a kernel up: two fixes on one kernel give the faster of the two
            # times, whichever comes first. A projection sets the times it gives (slower too).
            dur[c.rows] = np.minimum(dur[c.rows], new) if c.faster_only else new
            if c.drop_launches and cpu:  # an op fused away takes its dispatch with it
                x.h_gap[c.rows] = 0
            elif c.drop_launches:
                calls = g.k_launch[c.rows]
                calls = np.unique(calls[calls >= 0])
                calls = calls[g.h_launch[calls] & (g.h_outer[calls] < 0)]
                x.h_dur[calls] = 0
                x.h_gap[calls] = np.where(x.h_gap[calls] < LAUNCH_GAP_NS, 0, x.h_gap[calls])
    return out


def _target(work: pd.DataFrame, name: str) -> np.ndarray:
    """Work rows a speed change names: its category, else kernels whose name contains it."""
    if "category" in work:
        cat = work["category"].to_numpy(dtype=object) == name
        if cat.any():
            return cat
    return work["name"].astype(str).str.contains(name, case=False, regex=False).to_numpy()
