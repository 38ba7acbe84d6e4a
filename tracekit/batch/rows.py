"""One trace in, one summary row out: the function a batch worker runs.

The row is read from the analysis's JSON contract (``Analysis.to_dict()``, see
docs/json-schema.md); nothing is recomputed here, so a figure in the fleet table is the
figure ``tracekit report`` shows for the same trace. Workers receive a path and return a
plain dict (and a small ``RunKey``): no ``Trace`` object ever crosses a process boundary.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass
from typing import Any

from tracekit.errors import TracekitError

# The table's columns, in order (documented in docs/batch.md).
PHASES = ("prefill", "decode", "mixed", "unknown")
COLUMNS = (
    "file",
    "name",
    "files",
    "status",
    "error",
    "note",
    "recorded_at",
    "device",
    "device_type",
    "spec",
    "model",
    "run_kind",
    "phase_source",
    *(f"{p}_steps" for p in PHASES),
    "prefill_step_p50_ms",
    "prefill_step_p90_ms",
    "decode_step_p50_ms",
    "decode_step_p90_ms",
    "ttft_ms",
    "tpot_p50_ms",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "prefill_mfu",
    "decode_mbu",
    "prefill_idle_share",
    "decode_idle_share",
    "idle_top_cause",
    "idle_top_cause_ms",
    "kernel_ms",
    "kernels",
    "findings",
    "top_finding_id",
    "top_finding",
    "seconds",
    "outliers",
)
# A row's status: analysed, failed (its ``error`` says why), or stopped at its time limit.
OK, ERROR, TIMEOUT = "ok", "error", "timeout"
# Recording times before this are not wall-clock (a trace counting from its own zero).
_EPOCH_MIN_NS = 946_684_800 * 10**9  # 2000-01-01


@dataclass(frozen=True)
class RunKey:
    """What ``tracekit.trace.runs.check_one_run`` looks at, without the trace's tables: a worker
    returns it so the main process can decide whether a folder's files are one run."""

    path: str
    n_bytes: int
    n_events: int
    start_ns: int
    end_ns: int
    distributed: dict | None
    has_gpu: bool
    gpu: str | None

    def device_name(self, device: int | None = None) -> str | None:
        return self.gpu

    @classmethod
    def of(cls, t) -> RunKey:
        dist = t.distributed
        small = {k: dist.get(k) for k in ("rank", "world_size") if k in dist} if isinstance(dist, dict) else None
        return cls(
            str(t.path),
            int(t.n_bytes),
            int(t.n_events),
            int(t.start_ns),
            int(t.end_ns),
            small,
            bool(t.has_gpu),
            t.device_name() if t.has_gpu else None,
        )


def error_row(
    path: str, message: str, *, note: str | None = None, seconds: float | None = None, status: str = ERROR
) -> dict[str, Any]:
    """The row of a trace that has no figures: ``status`` ``error`` (or ``timeout``) and why."""
    row = dict.fromkeys(COLUMNS)
    row.update(file=str(path), name=_name(path), status=status, error=message, note=note, seconds=seconds)
    return row


def analyse_path(path: str, note: str | None = None) -> tuple[dict[str, Any], RunKey | None]:
    """Read and analyse one trace (a file, or a folder of one run's ranks): its row, and its
    ``RunKey`` (None when it could not be read). Never raises for a bad trace: an expected
    failure is an error row with its sentence, anything else an "internal error: ..." row."""
    start = time.perf_counter()
    key = None
    try:
        from tracekit import read_trace
        from tracekit.analysis import analyze

        # One process per trace: a batch keeps every CPU busy with its traces already (and a
        # daemonic worker may not start processes), so a run's ranks are read here one by one.
        trace = read_trace(path, jobs=1)
        key = RunKey.of(trace)
        data = analyze(trace).to_dict()
        recorded = _recorded_ns(data, trace.start_ns)
        del trace  # one trace at a time: the tables go before the next path comes
        row = row_from_analysis(path, data, recorded)
        row["note"] = note
    except TracekitError as e:
        row = error_row(path, e.message, note=note)
    except MemoryError:
        row = error_row(path, "internal error: out of memory while analysing this trace", note=note)
    except Exception as e:  # noqa: BLE001 - one bad trace must not end the batch
        row = error_row(path, f"internal error: {type(e).__name__}: {_one_line(e)}", note=note)
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row, key


def row_from_analysis(path: str, data: dict[str, Any], recorded_ns: int | None = None) -> dict[str, Any]:
    """The fleet row of one analysis (``Analysis.to_dict()``)."""
    m, phases, dev = data.get("metrics") or {}, data.get("phases") or {}, data.get("device") or {}
    row = dict.fromkeys(COLUMNS)
    row.update(
        file=str(path),
        name=_name(path),
        files=len((data.get("source") or {}).get("files") or [path]),
        status=OK,
        recorded_at=_iso(recorded_ns),
        device=dev.get("name"),
        device_type=dev.get("type"),
        spec=dev.get("spec"),
        model=_model_name(data),
        run_kind=data.get("run_kind"),
        phase_source=(data.get("provenance") or {}).get("phase_source"),
    )
    for p in PHASES:
        row[f"{p}_steps"] = (phases.get(p) or {}).get("steps", 0)
    for p in ("prefill", "decode"):
        q = m.get(f"{p}_step_ms") or {}
        row[f"{p}_step_p50_ms"], row[f"{p}_step_p90_ms"] = q.get("p50"), q.get("p90")
        row[f"{p}_tokens_per_s"] = m.get(f"{p}_tokens_per_s")
        row[f"{p}_idle_share"] = (m.get("idle_share") or {}).get(p)
    row["ttft_ms"] = m.get("ttft_ms")
    row["tpot_p50_ms"] = (m.get("tpot_ms") or {}).get("p50")
    row["prefill_mfu"], row["decode_mbu"] = m.get("prefill_mfu"), m.get("decode_mbu")
    causes: dict[str, float] = {}
    for v in phases.values():  # the phases' idle split sums to the steps' idle time
        for cause, ms in (v.get("idle_by_cause") or {}).items():
            causes[cause] = causes.get(cause, 0.0) + float(ms or 0.0)
    top = max(causes.items(), key=lambda kv: kv[1], default=(None, 0.0))
    if top[1] > 0:
        row["idle_top_cause"], row["idle_top_cause_ms"] = top
    overall = data.get("overall") or {}
    row["kernel_ms"], row["kernels"] = overall.get("kernel_ms"), overall.get("kernels")
    findings = data.get("findings") or []
    row["findings"] = len(findings)
    if findings:  # the analysis orders them: time at stake first, largest first
        row["top_finding_id"], row["top_finding"] = findings[0].get("id"), findings[0].get("text")
    return row


def _model_name(data: dict[str, Any]) -> str | None:
    """The model that priced the trace, else what a collect sidecar says ran."""
    if data.get("model"):
        return data["model"].get("name")
    w = ((data.get("workload") or {}).get("workload")) or {}
    return w.get("preset") or w.get("model_path") or w.get("architecture") or None


def _recorded_ns(data: dict[str, Any], start_ns: int) -> int | None:
    """When the trace was recorded: the collect sidecar's ``created``, else the trace's first
    event on its own clock when that clock is wall-clock time (most Kineto traces), else None."""
    created = (data.get("workload") or {}).get("created")
    if isinstance(created, str):
        try:
            t = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
            if t.tzinfo is None:
                t = t.replace(tzinfo=_dt.timezone.utc)
            return int(t.timestamp() * 1e9)
        except ValueError:
            pass
    now = time.time_ns() + 366 * 86400 * 10**9
    return int(start_ns) if _EPOCH_MIN_NS <= start_ns <= now else None


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _name(path: str) -> str:
    return os.path.basename(os.path.normpath(str(path)))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or "no message"
    return text if len(text) <= 300 else text[:299] + "…"
