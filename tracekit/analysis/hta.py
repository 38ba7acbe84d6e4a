"""HolisticTraceAnalysis (HTA) on the files tracekit read: a second opinion, kept apart.

``tracekit report --with-hta`` runs HTA's ``TraceAnalysis`` (the ``tracekit[hta]`` extra: PyPI
``traceinsight``, formerly ``holistictraceanalysis``; it imports as ``hta``) on the same trace
files and returns one plain dict, the report's ``hta`` key (docs/json-schema.md): HTA's version,
and per analysis its figures or, when HTA fails on the trace, the reason in one sentence:

``temporal_breakdown``  per rank: span of GPU activity, idle, compute and non-compute time
``idle_breakdown``      per rank and stream: idle time by HTA's cause (host wait, kernel wait, other)
``comm_comp_overlap``   per rank: share of communication-kernel time overlapped by computation
``kernel_launch``       per rank: HTA's CUDA kernel-launch statistics, summarised
``kernel_types``        per rank: summed kernel time by HTA's kernel type (compute, communication,
                        memory), for checking against tracekit's kernel time

This is the only module that imports HTA, lazily: the base install never loads it. HTA is
noisy (it reconfigures the root logger, prints, and trips pandas 3's PDEP-8 deprecations), so
each call runs with its logging, prints and warnings contained; no HTA exception reaches the
user as a traceback.

Two things are adjusted on HTA's side of the boundary, through its public options and parsed
tables, never by patching it (both are recorded under ``hta.adjustments``):

- HTA rounds fractional-microsecond timestamps inward (``ceil(ts)``, ``floor(end)``) by
  default. On the shared traces that shortens every kernel by up to 1 µs (busy time off by
  2-15%) and gives sub-microsecond kernels negative durations, on which the temporal breakdown
  dies on ``assert non_compute_time >= 0``. HTA's own ``HTA_DISABLE_NS_ROUNDING`` option keeps
  the recorded times.
- HTA takes any event with a ``stream`` argument as GPU work. Triton's launcher records a CPU
  op (``cpu_op`` ``triton_poi_...``) with ``stream: 0``, which HTA then counts as a kernel on
  "stream 0" (the tiny Triton trace: 96 µs of GPU time where the kernel ran 1.8 µs). CPU-side
  events are given HTA's own "no stream" value, -1, before the analyses run.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import tempfile
import traceback
import warnings
from importlib import metadata
from typing import Any, Callable

from tracekit.errors import TracekitError

INSTALL = "pip install 'tracekit[hta]'"
# The PyPI names HTA was published under, newest first (both install the ``hta`` package).
DISTRIBUTIONS = ("traceinsight", "holistictraceanalysis")
# HTA reads plain and gzipped JSON only (it lists ``*.json`` and ``*.gz`` in the folder).
READABLE = (".json", ".json.gz")
# HTA's launch-statistics thresholds (its defaults, µs): a launch call longer than RUNTIME_CUTOFF
# and a launch delay longer than LAUNCH_DELAY_CUTOFF are its outliers.
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100

ANALYSES = {
    "temporal_breakdown": "temporal breakdown",
    "idle_breakdown": "idle-time breakdown",
    "comm_comp_overlap": "communication/computation overlap",
    "kernel_launch": "CUDA kernel-launch statistics",
    "kernel_types": "GPU kernel breakdown",
}


def version() -> dict[str, str] | None:
    """``{"package": PyPI name, "version": ...}`` of the installed HTA, or None."""
    for dist in DISTRIBUTIONS:
        try:
            return {"package": dist, "version": metadata.version(dist)}
        except metadata.PackageNotFoundError:
            continue
    return None


def require() -> Any:
    """HTA's ``TraceAnalysis`` class; one sentence saying how to install it when it is missing.
    Called before the slow read, so a missing extra fails at once."""
    try:
        with _contained():
            from hta.trace_analysis import TraceAnalysis
    except ImportError:
        raise TracekitError(f"--with-hta needs HolisticTraceAnalysis, which is not installed: {INSTALL}") from None
    return TraceAnalysis


def run_hta(files: list[str] | str) -> dict[str, Any]:
    """HTA's analyses of ``files`` (the trace files tracekit read; a folder of ranks gives
    several), as the report's ``hta`` dict. Never raises for what HTA does with the trace:
    a failure is ``status: "failed"`` with its reason, per analysis or for the whole run."""
    TraceAnalysis = require()
    files = [os.fspath(files)] if isinstance(files, (str, os.PathLike)) else [os.fspath(f) for f in files]
    out: dict[str, Any] = {
        **(version() or {"package": None, "version": None}),
        "files": [os.path.basename(f) for f in files],
        "ranks": [],
        "status": "ok",
        "reason": None,
        "adjustments": [],
        "notes": [],
    }
    readable = [f for f in files if f.lower().endswith(READABLE)]
    skipped = [os.path.basename(f) for f in files if f not in readable]
    if skipped:
        out["notes"].append(
            f"HTA reads only .json and .json.gz files, so {', '.join(skipped)} "
            f"{'was' if len(skipped) == 1 else 'were'} left out"
        )
    if not readable:
        return _failed(out, "HTA cannot read any of the trace files (it reads only .json and .json.gz)")
    with tempfile.TemporaryDirectory(prefix="tracekit-hta-") as folder:
        # HTA wants a folder of rank traces: links to exactly the files tracekit read (a
        # collect folder's sidecars and other runs' files stay out).
        for i, f in enumerate(readable):
            os.symlink(os.path.abspath(f), os.path.join(folder, f"{i:04d}-{os.path.basename(f)}"))
        try:
            with _contained():
                ta = TraceAnalysis(trace_dir=folder, include_last_profiler_step=True)
        except Exception as e:  # noqa: BLE001 - HTA's failures become one sentence
            return _failed(out, f"HTA could not read the trace: {_why(e)}")
    traces = ta.t.traces
    out["ranks"] = sorted(int(r) for r in traces)
    if len(traces) < len(readable):
        out["notes"].append(
            f"HTA read {len(readable)} files as {len(traces)} rank(s): it takes each file's rank "
            "from its distributedInfo and keeps one file per rank (a file without one is rank 0)"
        )
    moved = _cpu_events_off_streams(ta)
    out["adjustments"].append(
        "timestamps kept at the trace's resolution (HTA_DISABLE_NS_ROUNDING): HTA's default "
        "rounding to whole microseconds shortens every kernel by up to 1 µs"
    )
    if moved:
        out["adjustments"].append(
            f"{moved} CPU-side events that carry a stream number (Triton's launcher ops) were not counted as GPU work"
        )
    gpu_ranks = [r for r in out["ranks"] if _gpu_events(ta, r)]
    if not gpu_ranks:
        out["notes"].append(
            "the trace has no GPU kernels, memcpy or memset (a CPU-only run): HTA's analyses are "
            "about GPU streams, so it has nothing to say here"
        )
        for key in ANALYSES:
            out[key] = {"status": "empty", "reason": "no GPU activity in the trace"}
        return out
    if len(gpu_ranks) < len(out["ranks"]):
        idle_ranks = sorted(set(out["ranks"]) - set(gpu_ranks))
        out["notes"].append(f"rank(s) {', '.join(map(str, idle_ranks))} have no GPU activity and are left out")
    sub = {r: traces[r] for r in gpu_ranks}
    ta.t.traces = sub  # the analyses iterate over every rank: only those with GPU work
    for key, fn in (
        ("temporal_breakdown", _temporal),
        ("idle_breakdown", _idle),
        ("comm_comp_overlap", _overlap),
        ("kernel_launch", _launch),
        ("kernel_types", _kernel_types),
    ):
        out[key] = _attempt(ANALYSES[key], functools.partial(fn, ta, gpu_ranks))
    return out


# --- the analyses, each HTA call turned into plain values (ms unless named otherwise) -------


def _temporal(ta, ranks) -> dict[str, Any]:
    df = ta.get_temporal_breakdown(visualize=False)
    rows = []
    for r in df.itertuples(index=False):
        span = float(r[df.columns.get_loc("kernel_time(us)")])
        idle = float(r[df.columns.get_loc("idle_time(us)")])
        compute = float(r[df.columns.get_loc("compute_time(us)")])
        non_compute = float(r[df.columns.get_loc("non_compute_time(us)")])
        rows.append(
            {
                "rank": int(r.rank),
                # HTA calls this "kernel_time": first GPU event's start to the last one's end.
                "span_ms": span / 1e3,
                "busy_ms": (span - idle) / 1e3,
                "idle_ms": idle / 1e3,
                "compute_ms": compute / 1e3,
                "non_compute_ms": non_compute / 1e3,
                "idle_share": idle / span if span else None,
                "compute_share": compute / span if span else None,
                "non_compute_share": non_compute / span if span else None,
            }
        )
    return {"ranks": rows}


def _idle(ta, ranks) -> dict[str, Any]:
    df, _ = ta.get_idle_time_breakdown(ranks=list(ranks), visualize=False)
    rows = [
        {
            "rank": int(r.rank),
            "stream": int(r.stream),
            "cause": str(r.idle_category),
            "idle_ms": float(r.idle_time) / 1e3,
            "share": None if r.idle_time_ratio != r.idle_time_ratio else float(r.idle_time_ratio),
        }
        for r in df.itertuples(index=False)
    ]
    return {"rows": rows, "kernel_wait_below_us": 30}


def _overlap(ta, ranks) -> dict[str, Any]:
    df = ta.get_comm_comp_overlap(visualize=False)
    rows = []
    for r in df.itertuples(index=False):
        v = float(r.comp_comm_overlap_pctg)
        rows.append(
            {
                "rank": int(r.rank),
                "overlap_share": v / 100 if v == v else None,
                **({} if v == v else {"reason": "no communication kernels on this rank"}),
            }
        )
    return {"ranks": rows}


def _launch(ta, ranks) -> dict[str, Any]:
    stats = ta.get_cuda_kernel_launch_stats(
        ranks=list(ranks), runtime_cutoff=RUNTIME_CUTOFF_US, launch_delay_cutoff=LAUNCH_DELAY_CUTOFF_US, visualize=False
    )
    rows = []
    for rank, df in sorted(stats.items()):
        n = int(len(df))
        row: dict[str, Any] = {"rank": int(rank), "launches": n}
        if n:
            row.update(
                {
                    "gpu_shorter_than_launch": int((df["gpu_duration"] < df["cpu_duration"]).sum()),
                    "long_launches": int((df["cpu_duration"] > RUNTIME_CUTOFF_US).sum()),
                    "long_launch_delays": int((df["launch_delay"] > LAUNCH_DELAY_CUTOFF_US).sum()),
                    "median_launch_us": float(df["cpu_duration"].median()),
                    "median_launch_delay_us": float(df["launch_delay"].median()),
                    "max_launch_delay_us": float(df["launch_delay"].max()),
                }
            )
        else:
            row["reason"] = (
                "no cudaLaunchKernel/cudaMemcpyAsync/cudaMemsetAsync call matched a GPU event (HTA "
                "does not count graph launches or HIP's hipLaunchKernel)"
            )
        rows.append(row)
    return {"ranks": rows, "runtime_cutoff_us": RUNTIME_CUTOFF_US, "launch_delay_cutoff_us": LAUNCH_DELAY_CUTOFF_US}


def _kernel_types(ta, ranks) -> dict[str, Any]:
    _, df = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
    sums = df.groupby(["rank", "kernel_type"])["sum (us)"].sum()
    rows = []
    for rank in ranks:
        by = {str(k).lower(): float(v) / 1e3 for (r, k), v in sums.items() if int(r) == int(rank)}
        rows.append(
            {
                "rank": int(rank),
                "by_type_ms": by,
                # Kernels proper: memcpy and memset are HTA's MEMORY type.
                "kernel_ms": by.get("computation", 0.0) + by.get("communication", 0.0),
            }
        )
    return {"ranks": rows}


# --- containment -----------------------------------------------------------------------


def _attempt(label: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        with _contained():
            return {"status": "ok", **fn()}
    except Exception as e:  # noqa: BLE001 - one analysis failing leaves the others
        return {"status": "failed", "reason": f"HTA's {label} failed on this trace: {_why(e)}"}


def _failed(out: dict[str, Any], reason: str) -> dict[str, Any]:
    out.update(status="failed", reason=reason)
    return out


def _why(e: BaseException) -> str:
    """An exception as a clause: its type and message, and where in HTA it was raised."""
    msg = " ".join(str(e).split())[:200]
    where = ""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}hta{os.sep}" in f.filename]
    if frames:
        f = frames[-1]
        where = f" in {os.path.basename(f.filename)}:{f.lineno}" + (f" ({f.line.strip()})" if f.line else "")
    return f"{type(e).__name__}{': ' + msg if msg else ''}{where}"


def _gpu_events(ta, rank) -> int:
    df = ta.t.traces[rank]
    return int((df["stream"] != -1).sum()) if "stream" in df and len(df) else 0


def _cpu_events_off_streams(ta) -> int:
    """Give CPU-side events HTA's "no stream" value, -1 (see the module docstring)."""
    cpu_cats = ta.t.symbol_table.get_cpu_event_cat_ids()
    moved = 0
    for rank, df in ta.t.traces.items():
        if "stream" not in df or "cat" not in df or not len(df):
            continue
        wrong = df["cat"].isin(cpu_cats) & df["stream"].ne(-1)
        if wrong.any():
            df = df.copy()
            df.loc[wrong, "stream"] = -1
            ta.t.traces[rank] = df
            moved += int(wrong.sum())
    return moved


@contextlib.contextmanager
def _contained():
    """HTA's noise kept in: its prints and warnings discarded, its logging off, and the root
    logger it reconfigures (``logging.config.fileConfig`` when a ``Trace`` is made, which also
    disables every existing logger) put back as it was. Timestamps are kept unrounded."""
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    saved_disabled = {
        name: lg.disabled for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)
    }
    saved_disable = logging.root.manager.disable
    options = saved_rounding = None
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            logging.disable(logging.CRITICAL)
            with contextlib.suppress(ImportError):  # HTA's singleton of its HTA_* environment options
                from hta.configs.env_options import HTAEnvOptions

                options = HTAEnvOptions.instance()
                saved_rounding = options.disable_ns_rounding()
                options.set_disable_ns_rounding(True)
            yield
    finally:
        if options is not None:
            options.set_disable_ns_rounding(saved_rounding)
        logging.disable(saved_disable)
        root.setLevel(saved_level)
        root.handlers[:] = saved_handlers
        for name, disabled in saved_disabled.items():
            lg = logging.Logger.manager.loggerDict.get(name)
            if isinstance(lg, logging.Logger):
                lg.disabled = disabled
        hta_logger = logging.getLogger("hta")
        hta_logger.handlers[:] = [logging.NullHandler()]
        hta_logger.propagate = False
