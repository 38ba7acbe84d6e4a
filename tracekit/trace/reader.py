"""Read a trace file (or a directory of per-rank traces) into one ``Trace``.

Steps: bytes (``decode.read_bytes``) -> typed events (``decode.decode``) ->
events bucketed by category -> one column list per field -> DataFrames ->
links (``links``). Categories are matched case-insensitively so every schema era
(PyTorch 1.8-1.9 ``Kernel``/``Runtime``/``Operator``, 2022, current) lands in the
same tables.
"""

from __future__ import annotations

import json
import os
from operator import attrgetter
from typing import Callable

import numpy as np
import pandas as pd

from tracekit import frameworks, markers
from tracekit.errors import TracekitError
from tracekit.trace import decode as dec
from tracekit.trace import links
from tracekit.trace.runs import check_one_run
from tracekit.trace.model import ERA_2022, ERA_CURRENT, ERA_PT19, Trace

# Lower-cased event category -> (table, kind).
_TABLE_OF = {
    "kernel": ("kernels", "kernel"),
    "gpu_memcpy": ("kernels", "memcpy"),
    "memcpy": ("kernels", "memcpy"),
    "gpu_memset": ("kernels", "memset"),
    "memset": ("kernels", "memset"),
    "cuda_runtime": ("runtime", "runtime"),
    "runtime": ("runtime", "runtime"),
    "cuda_driver": ("runtime", "driver"),
    "cpu_op": ("cpu_ops", None),
    "operator": ("cpu_ops", None),
    "user_annotation": ("annotations", "cpu"),
    "gpu_user_annotation": ("annotations", "gpu"),
    "python_function": ("python", None),
}

# Float microseconds hold whole nanoseconds exactly below about 2**42 us
# (~50 days of clock). Epoch-based fractional timestamps exceed that; those
# traces are decoded a second time with exact decimals.
_EXACT_LIMIT_US = float(2**42)
# Beyond this many microseconds (~146 years of clock) int64 nanoseconds overflow.
_MAX_US = 9.2e15

Progress = Callable[[str], None]


def read_trace(path: str | os.PathLike, progress: Progress | None = None, *, max_bytes: int | None = None) -> Trace:
    """Read a ``.json``/``.json.gz``/``.json.zst`` trace or a directory of per-rank traces.

    A file cut off mid-write is read up to its last complete event and says so in
    ``lacks["truncated"]`` and ``metadata["truncated"]``. ``max_bytes`` caps the
    decompressed size of a compressed file (default: $TRACEKIT_MAX_DECOMPRESSED_GB,
    else half the machine's memory), so a compression bomb is an error, not an
    out-of-memory kill. Raises ``TracekitError`` with one sentence for anything
    that is not a readable trace.
    """
    path = os.fspath(path)
    limit = dec.max_decompressed_bytes(max_bytes)
    if os.path.isdir(path):
        files = dec.list_trace_files(path)
        if not files:
            raise TracekitError(f"{path} is a directory with no trace files (*.json, *.json.gz, *.json.zst)")
        parts = [_read_file(f, progress, siblings=files, max_bytes=limit) for f in files]
        check_one_run(path, parts)
        return _merge(path, parts)
    return _read_file(path, progress, max_bytes=limit)


def _read_file(
    path: str, progress: Progress | None, siblings: list[str] | None = None, max_bytes: int | None = None
) -> Trace:
    if progress:
        progress(f"reading {os.path.basename(path)}")
    data, stream_cut = dec.read_bytes(path, max_bytes)
    n_read = len(data)
    events, meta, data, json_cut = _decode(path, data)
    if progress:
        progress("building tables")
    try:
        buckets, cats = _bucket(events)
        if _needs_exact(buckets):
            events, meta = dec.decode(path, data, exact_ts=True)
            buckets, cats = _bucket(events)
        base_ns = int(meta.get("baseTimeNanoseconds") or 0) if _is_int(meta.get("baseTimeNanoseconds")) else 0
        tables = {name: _table(name, buckets.get(name, []), base_ns) for name in _EMPTY}
    except (ValueError, OverflowError, TypeError) as e:
        raise TracekitError(f"{path} holds malformed events ({e})") from None
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
        era=_era(cats, events),
        n_events=len(events),
        n_bytes=n_read,
    )
    if trace.distributed is None or not _is_int(trace.distributed.get("rank")):
        # distributedInfo is untrusted: a rank that is not an integer gives way to the
        # engine's per-rank file name, when there is one.
        trace.distributed = _rank_from_name(path, siblings) or trace.distributed
    if progress:
        progress("linking kernels to launches and ops")
    links.link(trace)
    _note_lacks(trace)
    if stream_cut or json_cut:
        _note_truncation(trace, stream_cut or "JSON ended early", json_cut)
    return trace


def _note_truncation(trace: Trace, how: str, json_cut: bool) -> None:
    """Say that the file was cut off mid-write, in words and as facts."""
    n = trace.n_events
    trace.metadata["truncated"] = {"events_recovered": n, "bytes_read": trace.n_bytes, "how": how}
    if json_cut:
        trace.lacks["truncated"] = (
            f"the file ends in the middle of the trace (truncated while being written): {n:,} complete events "
            "were recovered, the rest is lost"
        )
    else:
        # Cut inside the compressed stream's trailer: every event is there, unverified.
        trace.lacks["truncated"] = (
            f"the {how.split()[0]} stream ends before its end marker (truncated while being written), but the JSON "
            f"inside is complete: all {n:,} events were read, their checksum could not be verified"
        )


def _decode(path: str, data: bytes) -> tuple[list, dict, bytes, bool]:
    """(events, metadata, the bytes they were decoded from, whether the JSON was cut short).

    A document that ends early is decoded as if it closed after its last complete
    event; the closed bytes are returned for the exact-timestamp second decode.
    """
    try:
        events, meta = dec.decode(path, data)
        return events, meta, data, False
    except dec.TruncatedJSON:
        closed = dec.close_truncated(path, data)
    events, meta = dec.decode(path, closed)
    return events, meta, closed, True


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


def _needs_exact(buckets: dict[str, tuple[list, list]]) -> bool:
    for evs, _ in buckets.values():
        arr = np.fromiter(map(_TS, evs), dtype=np.float64, count=len(evs))
        if arr.max(initial=0.0) >= _EXACT_LIMIT_US and np.any(arr != np.floor(arr)):
            return True
    return False


def _bucket(events: list) -> tuple[dict[str, list], set[str]]:
    """Complete events grouped by destination table as (events, kinds), and the categories seen.

    Grouping goes through pandas.factorize on the category column rather than a
    Python branch per event: a trace has ~15 distinct categories and 10^5-10^6 events.
    """
    out: dict[str, tuple[list, list]] = {name: ([], []) for name in _EMPTY}
    if not events:
        return out, set()
    events = [e for e in events if type(e) in _COMPLETE]
    codes, uniques = pd.factorize(pd.array(list(map(_CAT, events)), dtype=object))
    for code, cat in enumerate(uniques):
        dest = _TABLE_OF.get(cat) or _TABLE_OF.get(str(cat).lower())
        if dest is None:
            continue
        table, kind = dest
        rows = np.flatnonzero(codes == code).tolist()
        picked = [events[i] for i in rows]
        if table == "cpu_ops":
            # PyTorch 1.x recorded record_function ranges (ProfilerStep#N, user
            # ranges) as ordinary operators; they are annotations in later eras.
            is_range = [e.name.startswith(_RANGE_PREFIXES) for e in picked]
            if any(is_range):
                ranges = [e for e, r in zip(picked, is_range) if r]
                out["annotations"][0].extend(ranges)
                out["annotations"][1].extend(["cpu"] * len(ranges))
                picked = [e for e, r in zip(picked, is_range) if not r]
        out[table][0].extend(picked)
        out[table][1].extend([kind] * len(picked))
    return out, {str(c).lower() for c in uniques if isinstance(c, str)}


_CAT = attrgetter("cat")
_COMPLETE = (dec.Event, dec.ExactEvent)
_RANGE_PREFIXES = ("ProfilerStep#", markers.PREFIX)


def _ns(ts: list, base_ns: int) -> np.ndarray:
    """Microsecond timestamps (float or Decimal) -> int64 nanoseconds, exact to the ns."""
    if ts and not isinstance(ts[0], float):
        # Decimals from the exact decode path.
        return np.array([int((t * 1000).to_integral_value()) for t in ts], dtype=np.int64) + base_ns
    arr = np.asarray(ts, dtype=np.float64)
    if not (np.abs(arr) < _MAX_US).all():
        raise ValueError("a timestamp is not a number of microseconds that int64 nanoseconds can hold")
    whole = np.floor(arr)
    # Split whole and fractional microseconds so the integer part never goes
    # through a float multiply (1.7e15 us * 1000 is not exact in float64).
    return whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000).astype(np.int64) + base_ns


def _ints(get: attrgetter, objs: list) -> np.ndarray:
    """An id column as int64; -1 where absent."""
    try:
        return np.fromiter(map(get, objs), dtype=np.int64, count=len(objs))
    except (ValueError, TypeError):
        # Rare: ids written as strings ("stream 7", ROCm streams); keep the digits.
        return np.array([_thread_id(v) for v in map(get, objs)], dtype=np.int64)


def _thread_id(v) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        digits = "".join(ch for ch in v if ch.isdigit())
        return int(digits) if digits else -1
    return -1


def _table(name: str, rows: tuple[list, list], base_ns: int) -> pd.DataFrame:
    evs, kinds = rows
    if not evs:
        return _EMPTY[name]()
    start = _ns(list(map(_TS, evs)), base_ns)
    dur_us = np.fromiter(map(_DUR, evs), dtype=np.float64, count=len(evs))
    if not (np.abs(dur_us) < _MAX_US).all():
        raise ValueError("a duration is not a number of microseconds that int64 nanoseconds can hold")
    dur = np.maximum(np.rint(dur_us * 1000).astype(np.int64), 0)
    args = list(map(_ARGS, evs))
    cols: dict[str, object] = {
        "name": list(map(_NAME, evs)),
        "start_ns": start,
        "end_ns": start + dur,
        "dur_ns": dur,
    }
    if name in ("kernels", "runtime", "cpu_ops", "annotations"):
        ext = _ints(_EXT, args)
        ext_lc = _ints(_EXT_LC, args)
        ext = np.where(ext >= 0, ext, ext_lc)
    if name == "kernels":
        cols["kind"] = kinds
        # Old traces carry the device only in pid and the stream only in tid ("stream 7").
        device = _ints(_DEVICE, args)
        cols["device"] = np.where(device >= 0, device, _ints(_PID, evs)) if (device < 0).any() else device
        stream = _ints(_STREAM, args)
        cols["stream"] = np.where(stream >= 0, stream, _ints(_TID, evs)) if (stream < 0).any() else stream
        cols["correlation"] = _ints(_CORR, args)
        cols["external_id"] = ext
        cols["ctas"] = _ctas(map(_GRID, args))
    else:
        cols["pid"] = _ints(_PID, evs)
        cols["tid"] = _ints(_TID, evs)
    if name == "runtime":
        cols["api"] = kinds
        cols["correlation"] = _ints(_CORR, args)
        cols["external_id"] = ext
        cols["kernel"] = pd.Series([k or None for k in map(_KERNEL, args)], dtype=object)
    elif name == "cpu_ops":
        cols["external_id"] = ext
        # Copied out as text: a msgspec.Raw would keep the whole input buffer alive.
        # Explicitly object dtype: pandas >= 3 would infer its string dtype and turn
        # the None of "not recorded" into NaN.
        cols["input_dims"] = pd.Series([bytes(r).decode() if r else None for r in map(_DIMS, args)], dtype=object)
        cols["input_types"] = pd.Series([bytes(r).decode() if r else None for r in map(_TYPES, args)], dtype=object)
        cols["concrete_inputs"] = pd.Series(
            [bytes(r).decode() if r else None for r in map(_CONCRETE, args)], dtype=object
        )
    elif name == "annotations":
        cols["side"] = kinds
        cols["device"] = _ints(_DEVICE, args)
        cols["stream"] = _ints(_STREAM, args)
        cols["external_id"] = ext
    df = pd.DataFrame(cols)
    for c in ("name", "kind", "api", "side"):
        if c in df:
            # Few distinct names among many rows: categorical codes are both
            # smaller and much faster to group by.
            df[c] = df[c].astype("category")
    if not (np.diff(start) >= 0).all():
        df = df.iloc[np.argsort(start, kind="stable")].reset_index(drop=True)
    return df


_TS, _DUR, _ARGS, _NAME, _PID, _TID = (attrgetter(a) for a in ("ts", "dur", "args", "name", "pid", "tid"))
_EXT, _EXT_LC, _CORR, _DEVICE, _STREAM = (
    attrgetter(a) for a in ("external_id", "external_id_lc", "correlation", "device", "stream")
)
_DIMS, _TYPES, _CONCRETE, _KERNEL, _GRID = (
    attrgetter(a) for a in ("input_dims", "input_types", "concrete", "kernel", "grid")
)


def _ctas(grids) -> np.ndarray:
    """Blocks launched (x * y * z of ``grid``) per kernel; -1 where the trace has no grid.

    A trace holds few distinct grids among many kernels, so each raw text is parsed once.
    """
    seen: dict[bytes, int] = {}
    out = []
    for raw in grids:
        key = bytes(raw)
        n = seen.get(key)
        if n is None:
            n = seen[key] = _grid_product(key)
        out.append(n)
    return np.array(out, dtype=np.int64)


def _grid_product(text: bytes) -> int:
    if not text:
        return -1
    try:
        dims = json.loads(text)
    except ValueError:
        return -1
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        return -1
    n = 1
    for d in dims:
        n *= d
    return n


def _empty(columns: dict[str, str]) -> Callable[[], pd.DataFrame]:
    return lambda: pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


_TIME = {"name": "category", "start_ns": "int64", "end_ns": "int64", "dur_ns": "int64"}
_EMPTY = {
    "kernels": _empty(
        {**_TIME, "kind": "category", "device": "int64", "stream": "int64", "correlation": "int64", "external_id": "int64",
         "ctas": "int64"}
    ),
    "runtime": _empty(
        {**_TIME, "api": "category", "pid": "int64", "tid": "int64", "correlation": "int64", "external_id": "int64", "kernel": "object"}
    ),
    "cpu_ops": _empty(
        {**_TIME, "pid": "int64", "tid": "int64", "external_id": "int64", "input_dims": "object", "input_types": "object", "concrete_inputs": "object"}
    ),
    "annotations": _empty(
        {**_TIME, "side": "category", "pid": "int64", "tid": "int64", "device": "int64", "stream": "int64", "external_id": "int64"}
    ),
    "python": _empty({**_TIME, "pid": "int64", "tid": "int64"}),
}


def _devices(props) -> dict[int, dict]:
    if not isinstance(props, list):
        return {}
    out = {}
    for i, p in enumerate(props):
        if isinstance(p, dict):
            dev = p.get("id", i)
            out[dev if _is_int(dev) else i] = p
    return out


def _era(cats: set[str], events: list) -> str:
    if "operator" in cats:
        return ERA_PT19
    flow = _launch_flow_category(events)
    if flow == "async":
        return ERA_PT19
    if flow == "async_cpu_to_gpu":
        return ERA_2022
    return ERA_CURRENT


_LAUNCH_FLOWS = ("ac2g", "async_cpu_to_gpu", "async")


def _launch_flow_category(events: list) -> str | None:
    """Category of a CPU-to-GPU flow start ("s" event): it dates the schema.

    Flow categories live only on flow events, never on the complete events the
    tables are built from. Kineto writes CPU ops first and GPU activity with its
    flows last, so scanning from the end meets a launch flow within ~100 events.
    """
    for e in reversed(events):
        if type(e) is dec.FlowStart and e.cat and e.cat.lower() in _LAUNCH_FLOWS:
            return e.cat.lower()
    return None


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
        world = f", world size {dist['world_size']} from the run's files beside it" if dist.get("world_size") else \
            ", world size unknown"
        lacks["distributed"] = f"no distributedInfo: rank {dist['rank']} from the {dist['source']}{world}"
    ops = trace.cpu_ops
    if not len(ops):
        lacks["cpu_ops"] = "no CPU ops were recorded: kernels cannot be tied to the ops that launched them"
    elif ops["input_dims"].isna().all():
        lacks["shapes"] = "no op shapes were recorded (record_shapes=False): FLOPs and bytes cannot be computed"
    if len(k):
        kern = k["kind"] == "kernel"
        no_launch = int(((k["launch"] < 0) & kern).sum())
        if no_launch:
            lacks["launch_links"] = f"{no_launch} of {int(kern.sum())} kernels have no launching runtime call in the trace"
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
    tables: dict[str, list[pd.DataFrame]] = {n: [] for n in _EMPTY}
    offsets = {n: 0 for n in _EMPTY}
    devices: dict[int, dict] = {}
    for i, t in enumerate(parts):
        rank = t.distributed.get("rank") if t.distributed else None
        rank = rank if _is_int(rank) else i
        for n in _EMPTY:
            df = getattr(t, n).copy()
            df["rank"] = rank
            for col, target in (("launch", "runtime"), ("op", "cpu_ops")):
                if col in df:
                    df[col] = np.where(df[col] >= 0, df[col] + offsets[target], -1)
            tables[n].append(df)
        for n in _EMPTY:
            offsets[n] += len(getattr(t, n))
        devices.update(t.devices)
    merged = {n: _concat(dfs) for n, dfs in tables.items()}
    first = parts[0]
    lacks = {}
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
