"""Read a trace file (or a directory of per-rank traces) into one ``Trace``.

Steps: decompressed slices (``inflate``) -> chunks of typed events (``stream``,
decoded by ``decode``'s structs) -> compact columns per table, chunk by chunk
(``columns``) -> DataFrames -> links (``links``). Documents the stream cannot cut
go through the whole-document path (``decode.read_bytes`` + ``decode.decode``),
which also words every error; both build the same tables.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Callable

import numpy as np
import pandas as pd

from tracekit import frameworks, markers
from tracekit.errors import TracekitError
from tracekit.trace import columns, inflate, limits, links, parallel, stream
from tracekit.trace import decode as dec
from tracekit.trace.model import CLOCK_SHIFT, ERA_2022, ERA_CURRENT, ERA_PT19, Trace
from tracekit.trace.runs import check_one_run

Progress = Callable[[str], None]


def read_trace(
    path: str | os.PathLike,
    progress: Progress | None = None,
    *,
    max_bytes: int | None = None,
    chunk_bytes: int = inflate.SLICE_BYTES,
    jobs: int | None = None,
) -> Trace:
    """Read a ``.json``/``.json.gz``/``.json.zst`` trace or a directory of per-rank traces.

    A file cut off mid-write is read up to its last complete event and says so in
    ``lacks["truncated"]`` and ``metadata["truncated"]``. ``max_bytes`` caps the
    decompressed size of a compressed file (default: $TRACEKIT_MAX_DECOMPRESSED_GB,
    else half the machine's memory), so a compression bomb is an error, not an
    out-of-memory kill. The events are streamed ``chunk_bytes`` of decompressed
    text at a time, so memory holds the tables plus one chunk, not the JSON.
    A directory's files are read by ``jobs`` processes at once (``parallel.jobs_for``:
    default one per CPU for a large folder, $TRACEKIT_JOBS; 1 reads them here one by one),
    with the same result.
    Raises ``TracekitError`` with one sentence for anything that is not a readable trace.
    """
    path = os.fspath(path)
    try:
        return _read_path(path, progress, max_bytes, chunk_bytes, jobs)
    except RecursionError:
        # A document nested past the decoder's recursion: a sentence, not a traceback.
        raise dec.too_deep(path) from None


def _read_path(
    path: str, progress: Progress | None, max_bytes: int | None, chunk_bytes: int, jobs: int | None = None
) -> Trace:
    limit = limits.max_decompressed_bytes(max_bytes)
    if os.path.isdir(path):
        files = dec.list_trace_files(path)
        if not files:
            raise TracekitError(f"{path} is a directory with no trace files (*.json, *.json.gz, *.json.zst)")
        # A module-level function with its keywords bound: it pickles, for the other processes.
        read_one = functools.partial(_read_file, siblings=files, max_bytes=limit, chunk_bytes=chunk_bytes)
        parts = parallel.read_files(read_one, files, parallel.jobs_for(files, jobs), progress)
        check_one_run(path, parts)
        return _merge(path, parts)
    return _read_file(path, progress, max_bytes=limit, chunk_bytes=chunk_bytes)


def _read_file(
    path: str,
    progress: Progress | None,
    siblings: list[str] | None = None,
    max_bytes: int | None = None,
    chunk_bytes: int = inflate.SLICE_BYTES,
) -> Trace:
    if progress:
        progress(f"reading {os.path.basename(path)}")
    try:
        built, meta, n_read, stream_cut, json_cut, n_parsed = _stream(path, max_bytes, chunk_bytes)
    except (stream.NotStreamable, ValueError, OverflowError, TypeError):
        # A document the stream cannot cut, or malformed events: the whole-document path
        # reads it, or words what is wrong with it exactly as it always has.
        built, meta, n_read, stream_cut, json_cut, n_parsed = _whole_document(path, max_bytes)
    if progress:
        progress("building tables")
    try:
        base_ns = int(meta.get("baseTimeNanoseconds") or 0) if _is_int(meta.get("baseTimeNanoseconds")) else 0
        tables = built.tables(base_ns)
    except (ValueError, OverflowError, TypeError) as e:
        raise TracekitError(f"{path} holds malformed events ({e})") from None
    shift = _clock_shift(tables)
    n_x = sum(len(t) for t in tables.values())
    if n_x == 0 and (stream_cut or json_cut):
        raise TracekitError(
            f"{path} is truncated before its first profiler event (no complete 'X' event survives the cut)"
        )
    if n_x == 0:
        raise TracekitError(f"{path} is a trace with no profiler events (no complete 'X' events)")
    trace = Trace(
        path=path,
        kernels=tables["kernels"],
        runtime=tables["runtime"],
        cpu_ops=tables["cpu_ops"],
        annotations=tables["annotations"],
        python=tables["python"],
        devices=_devices(meta.get("deviceProperties")),
        distributed=meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None,
        metadata={k: v for k, v in meta.items() if k not in ("deviceProperties", "distributedInfo")},
        sidecar=_sidecar(path),
        era=_era(built),
        n_events=built.n_events,
        n_bytes=n_read,
    )
    if shift:
        trace.metadata[CLOCK_SHIFT] = shift
    if trace.distributed is None or not _is_int(trace.distributed.get("rank")):
        # distributedInfo is untrusted: a rank that is not an integer gives way to the
        # engine's per-rank file name, when there is one.
        trace.distributed = _rank_from_name(path, siblings) or trace.distributed
    if progress:
        progress("linking kernels to launches and ops")
    links.link(trace)
    _note_lacks(trace)
    if stream_cut or json_cut:
        _note_truncation(trace, stream_cut or "JSON ended early", json_cut, n_parsed)
    return trace


_SHIFT_QUANTUM = 2**50  # ns, about 13 days


def _clock_shift(tables: dict[str, pd.DataFrame]) -> int:
    """Move a clock that runs below zero forward, in place, and return by how much (0: not moved).

    The Chrome format allows any timestamp, and a trace re-based to an event inside it (a tool
    that puts the first step at 0) has times below zero; the analysis, though, marks "no time"
    (a kernel with no launch, a gap with no op) by -1 and tests times with ``>= 0``, and would
    read such a trace as one with no launches and no steps. The shift is a whole number of
    2**50 ns, so the files of one run (ranks, split windows) whose times lie within 13 days
    below zero all move by the same amount and stay on one clock; times relative to each other
    are unchanged, and ``report.annotate`` writes back on the file's own clock."""
    starts = [int(t["start_ns"].min()) for t in tables.values() if len(t)]
    if not starts or min(starts) >= 0:
        return 0
    shift = -(min(starts) // _SHIFT_QUANTUM) * _SHIFT_QUANTUM  # the least multiple making all times >= 0
    for t in tables.values():
        if len(t):
            t["start_ns"] += shift
            t["end_ns"] += shift
    return shift


def _note_truncation(trace: Trace, how: str, json_cut: bool, n_parsed: int) -> None:
    """Say that the file was cut off mid-write, in words and as facts.

    How much survived is measured on the decompressed text the file holds: the bytes up to
    the end of the last complete event over all of them. The original length is not known
    (a cut file has lost the end that would say it: gzip keeps it in its trailer)."""
    n = trace.n_events
    share = n_parsed / trace.n_bytes if trace.n_bytes else None
    # Only a cut in the JSON can have taken kernels (a cut stream trailer leaves every event), and
    # Kineto writes GPU activity last: a cut trace without kernels may well have had them, unless
    # tracekit collect's sidecar says the run was on a CPU.
    on_cpu = ((trace.sidecar or {}).get("device") or {}).get("type") == "cpu"
    lost = json_cut and not trace.has_gpu and not on_cpu
    evidence = gpu_evidence(trace) if lost else []
    trace.metadata["truncated"] = {
        "events_recovered": n,
        "bytes_read": trace.n_bytes,
        "how": how,
        "bytes_parsed": n_parsed,
        "recovered_share": share,
        "recovered_share_basis": RECOVERED_SHARE_BASIS,
        # No GPU event survived a cut that may have taken them: the device is unknown, not a
        # CPU. ``gpu_evidence`` says what shows it was a GPU trace (empty: nothing left says).
        "gpu_events_lost": lost,
        "gpu_evidence": evidence,
    }
    if json_cut:
        trace.lacks["truncated"] = (
            f"the file ends in the middle of the trace (truncated while being written): {n:,} complete events "
            f"were recovered ({_share_text(share)} of the decompressed text the file holds), the rest is lost"
        )
    else:
        # Cut inside the compressed stream's trailer: every event is there, unverified.
        trace.lacks["truncated"] = (
            f"the {how.split()[0]} stream ends before its end marker (truncated while being written), but the JSON "
            f"inside is complete: all {n:,} events were read, their checksum could not be verified"
        )
    if lost:
        # Not a CPU-only trace: one whose GPU events, if any, were after the cut.
        trace.lacks["gpu"] = f"{cut_device_text(evidence)}; leaf CPU ops stand in for kernels"
    elif "device_properties" in trace.lacks:
        trace.lacks["device_properties"] = (
            "the trace has no deviceProperties (the cut took them: this writer puts them after the events): the "
            "GPU cannot be identified from it"
        )


def cut_device_text(evidence: list[str]) -> str:
    """Why the device of a cut trace without kernels is unknown, in words."""
    if evidence:
        return (
            "the trace was cut before its GPU events: it is a GPU trace (" + "; ".join(evidence) + "), but no "
            "kernel survived the cut, so the device's work is unknown"
        )
    return (
        "the trace was cut before any GPU event: none survived, and nothing left says whether it ran on a GPU "
        "(Kineto writes GPU activity last), so the device is unknown"
    )


RECOVERED_SHARE_BASIS = (
    "decompressed bytes up to the end of the last complete event / decompressed bytes the "
    "cut file holds (the original length is unknown: the cut took the end that says it)"
)


def _share_text(share: float | None) -> str:
    if share is None:
        return "an unknown share"
    pct = share * 100
    return f"{pct:.1f}%" if pct < 99.95 or share == 1 else ">99.9%"


# Runtime calls that only a GPU process makes, and the backends of GPU collectives.
_GPU_API = ("cu", "hip")  # cudaLaunchKernel, cuLaunchKernel, hipGraphLaunch
_GPU_BACKENDS = ("nccl", "rccl")


def gpu_evidence(trace: Trace) -> list[str]:
    """What in a trace says it ran on a GPU even without kernels, as phrases (empty: no sign).

    CUDA/HIP runtime calls, GPU-side annotations, deviceProperties, a NCCL/RCCL process
    group and the CUPTI/CUDA/HIP versions Kineto records when it traces GPU activity."""
    found = []
    rt = trace.runtime
    if len(rt):
        names = rt["name"].astype(str)
        gpu_calls = int(names.str.lower().str.startswith(_GPU_API).sum())
        if gpu_calls:
            found.append(f"{gpu_calls:,} CUDA/HIP runtime calls such as {names.iloc[0]}")
    ann = trace.annotations
    if len(ann) and "side" in ann and (ann["side"] == "gpu").any():
        found.append(f"{int((ann['side'] == 'gpu').sum()):,} GPU-side annotations")
    named = sorted({str(p.get("name")) for p in trace.devices.values() if p.get("name")})
    if trace.devices:
        found.append("deviceProperties list " + (", ".join(named) if named else f"{len(trace.devices)} GPU(s)"))
    dist = trace.distributed or {}
    backend = str(dist.get("backend") or "").lower()
    if backend in _GPU_BACKENDS or dist.get("nccl_version"):
        found.append(f"distributedInfo names a {backend or 'nccl'} process group")
    versions = [k for k in ("cupti_version", "cuda_runtime_version", "hip_runtime_version") if trace.metadata.get(k)]
    if versions:
        found.append("the profiler recorded " + ", ".join(versions))
    if ((trace.sidecar or {}).get("device") or {}).get("type") in ("cuda", "hip"):
        found.append("tracekit collect recorded a GPU run")
    return found


def _stream(path: str, max_bytes: int | None, chunk_bytes: int):
    """(tables builder, metadata, bytes read, how the stream was cut, whether the JSON was cut, bytes up to
    the end of the last complete event), streamed."""
    inflated = inflate.Inflated(path, limits.max_decompressed_bytes(max_bytes), chunk_bytes)
    chunks = stream.EventChunks(path, inflated)
    built = columns.Builder()
    for events, exact in chunks:
        built.add(events, exact)
        del events  # the chunk's event objects go before the next chunk is decoded
    return built, chunks.meta, inflated.total, inflated.cut, chunks.json_cut, inflated.total - chunks.dropped


def _whole_document(path: str, max_bytes: int | None):
    """The same, from the whole decompressed document at once (the reference path).

    A document that ends early is decoded as if it closed after its last complete
    event; the closed bytes are used for the exact-timestamp second decode.
    """
    data, stream_cut = dec.read_bytes(path, max_bytes)
    n_read = n_parsed = len(data)
    json_cut = False
    try:
        events, meta = dec.decode(path, data)
    except dec.TruncatedJSON:
        closed = dec.close_truncated(path, data)
        # The closed document is the kept prefix plus at most two closing bytes.
        n_parsed = len(closed)
        while n_parsed > 0 and (n_parsed > len(data) or closed[n_parsed - 1] != data[n_parsed - 1]):
            n_parsed -= 1
        data = closed
        events, meta = dec.decode(path, data)
        json_cut = True
    built = columns.Builder()
    try:
        built.add(events, lambda: dec.decode(path, data, exact_ts=True)[0])
    except (ValueError, OverflowError, TypeError) as e:
        raise TracekitError(f"{path} holds malformed events ({e})") from None
    return built, meta, n_read, stream_cut, json_cut, n_parsed


def _rank_from_name(path: str, siblings: list[str] | None) -> dict | None:
    """Rank (and world size) from a per-rank file name when distributedInfo is missing; the
    run's other files are looked for beside it."""
    if siblings is None:
        folder = os.path.dirname(os.path.abspath(path))
        try:
            siblings = dec.list_trace_files(folder)
        except OSError:
            siblings = []
    return frameworks.rank_from_path(path, siblings)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _devices(props) -> dict[int, dict]:
    if not isinstance(props, list):
        return {}
    out = {}
    for i, p in enumerate(props):
        if isinstance(p, dict):
            dev = p.get("id", i)
            out[dev if _is_int(dev) else i] = p
    return out


def _era(built: columns.Builder) -> str:
    if "operator" in built.cats:
        return ERA_PT19
    # Flow categories date the schema: Kineto writes CPU ops first and GPU activity with
    # its flows last, so the builder keeps the last CPU-to-GPU flow start's category.
    if built.launch_flow == "async":
        return ERA_PT19
    if built.launch_flow == "async_cpu_to_gpu":
        return ERA_2022
    return ERA_CURRENT


def _sidecar(path: str) -> dict | None:
    side = markers.sidecar_path_for(path)
    if not os.path.exists(side):
        return None
    try:
        with open(side, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        # A broken sidecar must not stop the analysis of a good trace.
        return None
    return value if isinstance(value, dict) else None


def _note_lacks(trace: Trace) -> None:
    lacks = trace.lacks
    k = trace.kernels
    if not len(k):
        lacks["gpu"] = "the trace has no GPU events (a CPU-only trace); leaf CPU ops stand in for kernels"
    if not trace.devices and len(k):
        lacks["device_properties"] = "the trace has no deviceProperties: the GPU cannot be identified from it"
    elif len(k) and trace.device_name() is None:
        lacks["device_name"] = "the GPU's name is empty in deviceProperties"
    dist = trace.distributed
    if dist is None:
        lacks["distributed"] = "no distributedInfo: rank and world size unknown"
    elif dist.get("source"):
        world = (
            f", world size {dist['world_size']} from the run's files beside it"
            if dist.get("world_size")
            else ", world size unknown"
        )
        lacks["distributed"] = f"no distributedInfo: rank {dist['rank']} from the {dist['source']}{world}"
    ops = trace.cpu_ops
    if not len(ops):
        lacks["cpu_ops"] = "no CPU ops were recorded: kernels cannot be tied to the ops that launched them"
    elif ops["input_dims"].isna().all():
        lacks["shapes"] = (
            "no op shapes were recorded (record_shapes=False): FLOPs and bytes cannot be computed from them"
        )
    if len(k):
        kern = k["kind"] == "kernel"
        no_launch = int(((k["launch"] < 0) & kern).sum())
        if no_launch:
            lacks["launch_links"] = (
                f"{no_launch} of {int(kern.sum())} kernels have no launching runtime call in the trace"
            )
        graph = int(k["graph"].sum())
        if graph:
            lacks["graph_ops"] = (
                f"{graph} kernels were replayed from a CUDA/HIP graph: the ops and shapes behind them are not in this trace"
            )
        no_op = int(((k["op"] < 0) & kern & ~k["graph"]).sum())
        if no_op:
            lacks["op_links"] = f"{no_op} kernels have no launching CPU op"
    if not len(trace.annotations):
        lacks["annotations"] = "no user annotations (record_function ranges) in the trace"


def _merge(path: str, parts: list[Trace]) -> Trace:
    """Concatenate per-rank traces, offsetting link columns and adding a ``rank`` column."""
    tables: dict[str, list[pd.DataFrame]] = {n: [] for n in columns.TABLES}
    offsets = {n: 0 for n in columns.TABLES}
    devices: dict[int, dict] = {}
    for i, t in enumerate(parts):
        rank = t.distributed.get("rank") if t.distributed else None
        rank = rank if _is_int(rank) else i
        for n in columns.TABLES:
            df = getattr(t, n).copy()
            df["rank"] = rank
            for col, target in (("launch", "runtime"), ("op", "cpu_ops")):
                if col in df:
                    df[col] = np.where(df[col] >= 0, df[col] + offsets[target], -1)
            tables[n].append(df)
        for n in columns.TABLES:
            offsets[n] += len(getattr(t, n))
        devices.update(t.devices)
    merged = {n: _concat(dfs) for n, dfs in tables.items()}
    first = parts[0]
    lacks: dict[str, str] = {}
    for t in parts:
        for key, why in t.lacks.items():
            lacks.setdefault(key, f"{os.path.basename(t.path)}: {why}")
    return Trace(
        path=path,
        devices=devices,
        distributed=first.distributed,
        metadata={"files": [t.path for t in parts], **first.metadata},
        sidecar=first.sidecar,
        era=first.era,
        lacks=lacks,
        n_events=sum(t.n_events for t in parts),
        n_bytes=sum(t.n_bytes for t in parts),
        **merged,
    )


def _concat(dfs: list[pd.DataFrame]) -> pd.DataFrame:
    df = pd.concat(dfs, ignore_index=True)
    for c in ("name", "kind", "api", "side"):
        if c in df and df[c].dtype != "category":
            df[c] = df[c].astype("category")
    return df
