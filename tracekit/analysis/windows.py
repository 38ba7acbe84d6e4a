"""A split trace's windows, read and analysed one at a time in their run's context.

Takes the window files of one ``tracekit split`` (``window_paths`` finds them in a folder) and
gives each window's analysis as the whole run's report sees it (``Windows``), or all of them
merged into one ``Analysis`` of the run by ``analysis.merge`` (``analyse_windows``).

``analyse_windows`` reads and analyses the windows one at a time, in order, telling each the
end of the previous window's last step on every thread, so that each window's first step is
timed as in the whole trace (``segment.PREVIOUS_STEP_END``). A trace that names no steps has
them inferred once over all its windows, so that each window's steps are the whole trace's;
``split_keeping_steps`` splits such a trace between those steps in the first place.
"""

from __future__ import annotations

import os
from itertools import chain
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis import categorical
from tracekit.analysis.analyze import assemble, measure
from tracekit.analysis.merge import merge
from tracekit.analysis.model import Analysis
from tracekit.analysis.steps.ranges import GIVEN_STEPS, inferred_bounds, is_training
from tracekit.analysis.steps.segment import (
    PREVIOUS_DEVICE_END,
    PREVIOUS_KV_HISTORY,
    PREVIOUS_STEP_BATCH,
    PREVIOUS_STEP_END,
)
from tracekit.errors import TracekitError
from tracekit.trace import windows as win
from tracekit.trace.model import Trace
from tracekit.trace.window_edges import CUT_STEPS
from tracekit.trace.window_events import NotSplittable


def window_paths(folder: str) -> list[str] | None:
    """The windows of one split in ``folder``, in order, when every trace file there is one;
    None when the folder holds anything else (ranks, unrelated traces)."""
    from tracekit.trace.decode import list_trace_files

    files = list_trace_files(folder)
    matched = [(win.WINDOW_NAME.search(os.path.basename(f)), f) for f in files]
    found = [(m, f) for m, f in matched if m]
    if len(files) < 2 or len(found) < len(matched):
        return None
    runs = {(os.path.basename(f)[: m.start()], m.group(2)) for m, f in found}
    if len(runs) > 1:
        raise TracekitError(
            f"{folder} holds the windows of {len(runs)} splits ({', '.join(sorted(r[0] for r in runs))}): "
            "put each split in a folder of its own"
        )
    k = int(next(iter(runs))[1])
    have = sorted(int(m.group(1)) for m, _ in found)
    if have != list(range(1, k + 1)):
        missing = sorted(set(range(1, k + 1)) - set(have))
        raise TracekitError(
            f"{folder} lacks window{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing[:5]))} of {k}: a merged report needs every window"
        )
    return [f for _, f in sorted(found, key=lambda mf: int(mf[0].group(1)))]


def analyse_windows(paths: list[str], read: Callable[[str], Any], **options) -> Analysis:
    """Read (``read(path) -> Trace``) and analyse each window in order, one at a time, with
    ``analyze``'s ``options``, and merge them into one ``Analysis`` of the run."""
    windows = Windows(paths, read, **options)
    spec_of: list = []

    def each() -> Iterator[Analysis]:
        for w in windows:
            spec_of.append(w.match.spec)
            a = w.analysis
            del w  # the window's trace and parts go before the next window is read: memory holds one
            yield a

    gen = each()
    first = next(gen)
    merged = merge(chain([first], gen), spec=spec_of[0], folder=os.path.dirname(paths[0]) or ".")
    if windows.why_not:
        merged.provenance["notes"] = merged.provenance["notes"][:1] + [windows.why_not] + merged.provenance["notes"][1:]
        merged.provenance["windows"]["steps_inferred_per_window"] = True
    return merged


class Window(NamedTuple):
    """One window read and analysed in its run's context: its trace, ``measure``'s parts and
    spec match, and its analysis (steps numbered within the window, from ``first_step``)."""

    path: str
    trace: Trace
    parts: Any
    match: Any
    analysis: Analysis
    first_step: int  # how many steps the earlier windows hold: this window's step 0 is the run's step first_step


class Windows:
    """The windows of one split, each read and analysed in order, one at a time, as the whole
    run's report sees it (iterate: a ``Window`` each; keep none to keep memory to one window).

    Each window is told the end of the previous window's last step on every thread (so its
    first step's lead-in is not read as idle) and each thread's last batch (so a carried
    request is seen across the cut). Windows of a trace that names no steps were cut at idle
    instants, and steps a window would infer on its own are not the whole trace's (the launch
    pattern's period and its edge fragments, the first and last pass of the anchors, depend on
    what else is in the trace): the steps are then inferred once over all the windows'
    step-relevant rows (``_StepRows``) and each window is given its own
    (``ranges.GIVEN_STEPS``); ``why_not`` says why, when that could not be done."""

    def __init__(self, paths: list[str], read: Callable[[str], Any], with_timelines: bool = True, **options):
        self.paths, self.read, self.options, self.with_timelines = paths, read, options, with_timelines
        self.given, self.why_not = _given_steps(paths, read)

    def __iter__(self) -> Iterator[Window]:
        previous: dict[int, int] = {}
        batch: dict[int, float] = {}  # per thread, the batch of its last step so far
        device_end: dict[int, int] = {}  # per device, the end of its last recorded work so far
        history: dict = {}  # per thread, its running requests and their keys so far (steps.history)
        first_step = 0
        for j, path in enumerate(self.paths):
            t = self.read(path)
            if self.given is not None:
                t.metadata[GIVEN_STEPS] = self.given[j]
            if previous:
                t.metadata[PREVIOUS_STEP_END] = dict(previous)
            if batch:
                t.metadata[PREVIOUS_STEP_BATCH] = dict(batch)
            if device_end:
                t.metadata[PREVIOUS_DEVICE_END] = dict(device_end)
            if history:
                t.metadata[PREVIOUS_KV_HISTORY] = dict(history)
            k = t.kernels
            for dev, end in k.groupby("device")["end_ns"].max().items() if len(k) else ():
                device_end[int(dev)] = max(device_end.get(int(dev), int(end)), int(end))
            parts, match = measure(t, **self.options)
            history = dict(parts.seg.history)
            a = assemble(t, parts, match, with_timelines=self.with_timelines)
            a.source["window"] = t.metadata.get(win.WINDOW_KEY)
            s = a.steps
            for tid, end in zip(s["tid"].tolist(), s["end_ns"].tolist()):
                previous[int(tid)] = max(previous.get(int(tid), int(end)), int(end))
            in_order = s.sort_values("cpu_start_ns", kind="stable")
            for tid, b in zip(in_order["tid"].tolist(), in_order["batch"].tolist()):
                batch[int(tid)] = float(b)
            yield Window(path, t, parts, match, a, first_step)
            first_step += len(s)
            del t, parts, a


# How split cut windows between steps it knows by name: their steps are found as in the whole trace.
_NAMED_CUTS = (CUT_STEPS,)


class _StepRows:
    """What step inference (``ranges.inferred_bounds``) reads of a trace, gathered over its
    windows: each launch call with its first kernel, the token-embedding ops, the ``nn.Module``
    frames, the ProfilerStep ranges, and each thread's first and last rows (a thread's span).
    A row per launch, not per kernel or event."""

    def __init__(self) -> None:
        self.tables: dict[str, list[pd.DataFrame]] = {
            t: [] for t in ("kernels", "runtime", "cpu_ops", "python", "annotations")
        }
        self.launch_window: list[np.ndarray] = []  # the window of each launch kept, in runtime order
        self.n_runtime = 0
        self.path = ""
        self.base_ns = None  # the trace's baseTimeNanoseconds (times in its text are shifted by it)

    @staticmethod
    def _spans(t: pd.DataFrame) -> np.ndarray:
        """Rows holding each thread's first start and last end."""
        if not len(t):
            return np.zeros(0, np.int64)
        g = t.reset_index(drop=True).groupby("tid", sort=False)
        return np.union1d(g["start_ns"].idxmin().to_numpy(), g["end_ns"].idxmax().to_numpy())

    def add(self, t, window: int) -> None:
        self.path = self.path or t.path
        k, rt = t.kernels, t.runtime
        launch = k["launch"].to_numpy() if len(k) else np.zeros(0, np.int64)
        has = np.flatnonzero(launch >= 0)
        # The first kernel of each launch (the launch's token in the launch pattern).
        first = pd.Series(has).groupby(launch[has]).min().to_numpy() if len(has) else np.zeros(0, np.int64)
        rows = np.union1d(launch[first], self._spans(rt)) if len(rt) else np.zeros(0, np.int64)
        new_index = np.full(len(rt), -1, np.int64)
        new_index[rows] = self.n_runtime + np.arange(len(rows))
        kern = k.iloc[first].copy()
        kern["launch"] = new_index[launch[first]]
        self.tables["kernels"].append(kern)
        self.tables["runtime"].append(rt.iloc[rows])
        self.launch_window.append(np.full(len(rows), window, np.int64))
        self.n_runtime += len(rows)
        ops = t.cpu_ops
        if len(ops):
            emb = np.flatnonzero(categorical.isin(ops["name"], {"aten::embedding"}))
            self.tables["cpu_ops"].append(ops.iloc[np.union1d(emb, self._spans(ops))])
        py = t.python
        if len(py):
            mods = np.flatnonzero(categorical.mask(py["name"], lambda n: n.startswith("nn.Module: ")))
            self.tables["python"].append(py.iloc[np.union1d(mods, self._spans(py))])
        ann = t.annotations
        if len(ann):
            ps = (ann["side"] == "cpu").to_numpy() & categorical.mask(ann["name"], frameworks.pytorch.is_profiler_step)
            self.tables["annotations"].append(ann[ps])

    def trace(self) -> Trace:
        def table(name: str) -> pd.DataFrame:
            parts = [p for p in self.tables[name] if len(p)]
            if not parts:
                return self.tables[name][0].iloc[:0] if self.tables[name] else pd.DataFrame()
            out = pd.concat([p.astype({"name": str}) if "name" in p else p for p in parts], ignore_index=True)
            return out.assign(name=out["name"].astype("category")) if "name" in out else out

        return Trace(self.path, *(table(n) for n in ("kernels", "runtime", "cpu_ops", "annotations", "python")))


def _inferred(paths: list[str], read: Callable[[str], Any]):
    """The steps inferred once over every window's step-relevant rows: (step rows, bounds,
    source, notes, each window's first CPU-side instant), or None where the windows were cut
    between steps the trace names (each window finds them as the whole trace would)."""
    rows = _StepRows()
    spans: list[int] = []
    for j, path in enumerate(paths):
        t = read(path)
        w = t.metadata.get(win.WINDOW_KEY)
        if not isinstance(w, dict) or w.get("cut") in _NAMED_CUTS or not w.get("cut") or is_training(t):
            return None  # (a training run has no steps to keep whole)
        rows.add(t, j)
        # (The window's first CPU-side instant: a step without launches goes to the window it starts in.)
        spans.append(min((int(x["start_ns"].min()) for x in (t.runtime, t.cpu_ops) if len(x)), default=0))
        rows.base_ns = t.metadata.get("baseTimeNanoseconds")
        del t
    light = rows.trace()
    notes: list[str] = []
    bounds, source = inferred_bounds(light, notes=notes)
    return (rows, light, bounds, source, notes, spans) if bounds else None


def _given_steps(paths: list[str], read: Callable[[str], Any]) -> tuple[list[dict] | None, str | None]:
    """Per window, the steps inferred once over the whole trace that are its own
    (``ranges.GIVEN_STEPS``), or None where the windows' steps are named (found in each as in
    the whole trace) or an inferred step spans two windows: then the reason, said plainly."""
    found = _inferred(paths, read)
    if found is None:
        return None, None
    rows, light, bounds, source, notes, spans = found
    rt = light.runtime
    in_window = np.concatenate(rows.launch_window) if rows.launch_window else np.zeros(0, np.int64)
    issue, tid = rt["start_ns"].to_numpy(), rt["tid"].to_numpy()
    mine: list[list] = [[] for _ in paths]
    for i, (start, end, t_id, label) in enumerate(bounds):
        held = np.unique(in_window[(tid == t_id) & (issue >= start) & (issue <= end)])
        if len(held) > 1:
            return None, (
                f"the trace names no steps and its inferred step {i + 1} ({label}) spans windows "
                f"{held[0] + 1} and {held[-1] + 1}: each window's steps were inferred on their own, so the "
                "steps, phases and per-phase figures may differ from the whole trace's (split it again "
                "with tracekit split, which cuts between the whole trace's inferred steps)"
            )
        at = (
            int(held[0])
            if len(held)
            else int(np.clip(np.searchsorted(spans, start, side="right") - 1, 0, len(paths) - 1))
        )
        mine[at].append([int(start), int(end), int(t_id), str(label)])
    return [{"bounds": b, "source": source, "notes": notes} for b in mine], None


def split_keeping_steps(path: str, out_dir: str, read: Callable[[str], Any], **options) -> list[str]:
    """``windows.split`` (its ``options``), whose windows keep whole the steps a trace that names
    none has inferred: the first split's windows (cut at idle instants) are read one at a time
    for their step-relevant rows, the steps are inferred once over them as the whole trace's
    analysis would (``ranges.inferred_bounds``), and the trace is split again between those
    steps. A trace naming its steps is split once."""
    first: list[str] = []
    try:
        written = win.split(path, out_dir, **{**options, "notes": first})
    except NotSplittable:
        # Most files the stream cannot cut are not traces at all (not JSON, no traceEvents):
        # pointing their user at `tracekit report` would send them to a second refusal, so the
        # reader, which words every such problem, reads the file whole and its sentence is the
        # answer. Only a file it reads is a trace to send to report.
        read(path)
        raise
    found = _inferred(written, read) if len(written) > 1 else None
    if found is None:
        if options.get("notes") is not None:
            options["notes"].extend(first)
        return written
    rows, light, bounds, _, _, _ = found
    base = int(rows.base_ns) if isinstance(rows.base_ns, int) else 0
    # Each step's start and its launches' span (a cut anywhere between two steps' launches keeps
    # both whole: work goes to the step its launch was issued in), in trace microseconds, half a
    # nanosecond before the instant: an event there goes to its window whatever the rounding of
    # the text's times.
    rt = light.runtime
    launched = np.unique(light.kernels["launch"].to_numpy())
    launched = launched[launched >= 0]
    issue, end, tid = (rt[c].to_numpy()[launched] for c in ("start_ns", "end_ns", "tid"))
    steps = []
    for a, b, t_id, _ in bounds:
        mine = (tid == t_id) & (issue >= a) & (issue <= b)
        if mine.any():
            steps.append(
                (
                    (a - base - 0.5) / 1e3,
                    (int(issue[mine].min()) - base - 0.5) / 1e3,
                    (int(end[mine].max()) - base) / 1e3,
                )
            )
    return win.split(path, out_dir, **{**options, "force": True, "steps": np.array(steps, dtype=np.float64)})
