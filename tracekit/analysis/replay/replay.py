"""Step replay: a trace's steps as one dependency graph, replayed unchanged and under what-ifs.

``StepReplay(trace, seg, work)`` builds the graph (``replay.graph``) and replays it unchanged
twice: with each activity's unexplained lateness kept (it must reproduce each step's measured
duration: ``books``), and without (the lateness the dependencies leave unexplained, less the
time the steps table already names as held by unrecorded work, is the step's
``unexplained_ms``). ``run(changes)`` replays what-ifs together: a step's replayed time is its
measured duration less what the what-ifs save on the unchanged replay (so the replay's own small
error cancels out of every saving), and the phase figures (TTFT, TPOT, tokens/s) are the report's
own (``steps.latency``) on those durations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analysis.replay import changes as ch
from tracekit.analysis.replay import critical as cp
from tracekit.analysis.replay.graph import build
from tracekit.analysis.replay.simulate import Inputs, Replayed, run
from tracekit.analysis.replay.steps import StepTimes, step_times
from tracekit.analysis.steps.latency import latency, step_weights

# The unchanged replay must reproduce each step within this share of its duration (issue 48);
# a step it does not is reported with its error.
REPRODUCE = 0.02


@dataclass
class Outcome:
    """What-ifs replayed together: per step and per phase."""

    changes: list[ch.Change]
    duration_ns: np.ndarray  # per step, replayed under the changes
    saving_ns: np.ndarray  # per step: measured duration - replayed
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    unpriced: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": [c.describe() for c in self.changes],
            "phases": self.phases,
            "unpriced_kernels": self.unpriced,
        }


class StepReplay:
    def __init__(self, trace, seg, work: pd.DataFrame, prefill_fraction: np.ndarray | None = None):
        self.seg, self.work = seg, work
        self.steps = seg.steps
        self.prefill_fraction = prefill_fraction
        self.graph = build(trace, work, seg.device_type)
        g = self.graph
        self.measured = step_times(self.steps, work, g, None)
        self.base_run = run(g, Inputs.measured(g))
        self.base = step_times(self.steps, work, g, self.base_run, self.measured)
        model = step_times(self.steps, work, g, run(g, Inputs.measured(g, residuals=False)), self.measured)
        d = self.steps["duration_ns"].to_numpy(np.int64) if len(self.steps) else np.zeros(0, np.int64)
        self.duration_ns = d
        held = self.steps["unrecorded_ns"].to_numpy(np.int64) if len(self.steps) else d
        window = (self.base.end - self.base.begin) - (model.end - model.begin)
        self.unexplained_ns = np.maximum(window - held, 0)
        self._paths: dict[int, list[cp.Segment]] = {}
        self._labels: tuple | None = None
        self._rows: list[np.ndarray] = []

    # --- the books ------------------------------------------------------------------

    def books(self) -> dict[str, Any]:
        d = self.duration_ns.astype(float)
        rep = self.base.duration.astype(float)
        err = np.where(d > 0, (rep - d) / np.where(d > 0, d, 1), 0.0)
        un = self.unexplained_ns.astype(float)
        share = np.where(d > 0, un / np.where(d > 0, d, 1), 0.0)
        g = self.graph
        return {
            "steps": [
                {
                    "step": int(i),
                    "measured_ms": d[i] / 1e6,
                    "replayed_ms": rep[i] / 1e6,
                    "error": float(err[i]),
                    "unexplained_ms": un[i] / 1e6,
                }
                for i in range(len(d))
            ],
            "max_error": float(np.abs(err).max()) if len(err) else 0.0,
            "reproduced": bool((np.abs(err) <= REPRODUCE).all()),
            "unexplained_ms": float(un.sum()) / 1e6,
            "max_unexplained_share": float(share.max()) if len(share) else 0.0,
            "launch_latency_us": {"eager": g.lat[0] / 1e3, "graph": g.lat[1] / 1e3},
            "device_gap_us": {"eager": g.gap[0] / 1e3, "graph": g.gap[1] / 1e3},
            "samples": g.samples,
            # Collectives joined across ranks (each ends once the last rank arrived), or why not; None
            # for a single rank.
            "collectives_across_ranks": g.groups_note,
        }

    # --- what-ifs --------------------------------------------------------------------

    def run(self, changes: list[ch.Change]) -> Outcome:
        applied = ch.apply(self.graph, self.work, changes)
        r = run(self.graph, applied.inputs)
        t = step_times(self.steps, self.work, self.graph, r, self.measured)
        saving = self.base.duration - t.duration
        replayed = self.duration_ns - saving
        out = Outcome(changes, replayed, saving, unpriced=applied.unpriced)
        out.phases = self._phase_figures(replayed)
        return out

    def saving_ms(self, changes: list[ch.Change], phase: str) -> float:
        """ms the changes save over the steps of ``phase`` (mixed steps by their phase share)."""
        o = self.run(changes)
        w = self._weights().get(phase)
        return float((w * o.saving_ns).sum()) / 1e6 if w is not None else 0.0

    def _weights(self) -> dict[str, np.ndarray]:
        return step_weights(self.steps, self.prefill_fraction) if len(self.steps) else {}

    def _phase_figures(self, replayed: np.ndarray) -> dict[str, dict[str, Any]]:
        if not len(self.steps):
            return {}
        before = latency(self.seg, self.prefill_fraction)
        seg2 = dataclasses.replace(self.seg, steps=self.steps.assign(duration_ns=replayed))
        after = latency(seg2, self.prefill_fraction)
        out = {}
        for p, w in self._weights().items():
            if not w.any():
                continue
            m = float((w * self.duration_ns).sum()) / 1e6
            r = float((w * replayed).sum()) / 1e6
            fig: dict[str, Any] = {"steps": int((w > 0).sum()), "measured_ms": m, "replayed_ms": r, "saving_ms": m - r}
            for key, attr in (("ttft_ms", "ttft_ms"), ("tokens_per_s", f"{p}_tokens_per_s")):
                b, a = getattr(before, attr, None), getattr(after, attr, None)
                if key == "ttft_ms" and p != "prefill":
                    continue
                fig[key] = {"measured": b, "replayed": a}
            if p == "decode":
                b, a = before.tpot_ms, after.tpot_ms
                fig["tpot_p50_ms"] = {"measured": (b or {}).get("p50"), "replayed": (a or {}).get("p50")}
                fig["step_p50_ms"] = {
                    "measured": (before.decode_step_ms or {}).get("p50"),
                    "replayed": (after.decode_step_ms or {}).get("p50"),
                }
            if p == "prefill":
                fig["step_p50_ms"] = {
                    "measured": (before.prefill_step_ms or {}).get("p50"),
                    "replayed": (after.prefill_step_ms or {}).get("p50"),
                }
            out[p] = fig
        return out

    # --- critical path ---------------------------------------------------------------

    def critical_path(self, step: int, outcome_run: Replayed | None = None) -> list[cp.Segment]:
        if outcome_run is None:
            if step not in self._paths:
                self._paths[step] = self.critical_path(step, self.base_run)
            return self._paths[step]
        r = outcome_run
        t = self.base if r is self.base_run else step_times(self.steps, self.work, self.graph, r, self.measured)
        if self._labels is None:
            self._labels = cp.labels(self.work)
            step_of = self.work["step"].to_numpy()
            order = np.argsort(step_of, kind="stable")
            bounds = np.searchsorted(step_of[order], np.arange(len(self.steps) + 1))
            self._rows = [order[bounds[i] : bounds[i + 1]] for i in range(len(self.steps))]
        return cp.critical_path(
            self.graph, r, self._labels, int(t.begin[step]), int(t.end[step]), self._last_node(step, r, t)
        )

    def critical_totals(self) -> pd.DataFrame:
        """Per step, ns of its critical path by kind (``critical.KINDS``)."""
        rows = [cp.totals(self.critical_path(i)) for i in range(len(self.steps))]
        return pd.DataFrame(rows, columns=list(cp.KINDS)) if rows else pd.DataFrame(columns=list(cp.KINDS))

    def _last_node(self, step: int, r: Replayed, t: StepTimes) -> tuple[str, int] | None:
        g = self.graph
        mine = self._rows[step]
        end = int(t.end[step])
        if g.device_type == "gpu" and len(mine):
            last = mine[np.argmax(r.k_end[mine])]
            if int(r.k_end[last]) >= end:
                return ("k", int(last))
        if g.device_type == "cpu" and len(mine):
            last = mine[np.argmax(r.h_end[mine])]
            if int(r.h_end[last]) >= end:
                return ("h", int(last))
        # The host closed the window: its last outer call on the step's thread before the CPU end.
        tid = int(self.steps["tid"].iat[step])
        cpu_end = int(self.steps["cpu_end_ns"].iat[step])
        cand = np.flatnonzero((g.h_tid == tid) & (g.h_outer < 0) & (g.h_start <= cpu_end))
        if not len(cand):
            return None
        return ("h", int(cand[np.argmax(g.h_start[cand])]))


def saving_bound_ns(replay: StepReplay, step: int) -> float:
    """What a step could lose by removing waits: its duration less its critical path's kernel time."""
    tot = cp.totals(replay.critical_path(step))
    return float(replay.duration_ns[step]) - tot[cp.KERNEL]
