"""The reader against the real traces in ../shared/traces.

Every expected value here is computed independently of tracekit: the raw trace is
parsed with the standard ``json`` module (floats as ``decimal.Decimal``, straight
from the JSON text, so nanoseconds are exact) and the facts are counted from it.
Only the documented contract is shared: which event categories land in which
table (PROVENANCE.md, "Facts about the format") and how the link columns are
defined (``tracekit/trace/model.py``).
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter, defaultdict
from decimal import Decimal

import msgspec
import numpy as np
import pandas as pd
import pytest
from conftest import REAL, read_real, real_trace_path

from tracekit import Trace, TracekitError, read_trace

ALL = sorted(REAL)

# Category (lower-cased) -> table, as PROVENANCE.md describes the schema eras.
KERNEL_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
}
RUNTIME_CATS = {"cuda_runtime", "runtime", "cuda_driver"}
OP_CATS = {"cpu_op", "operator"}
ANNOTATION_CATS = {"user_annotation", "gpu_user_annotation"}


def _ns(ts, base: int = 0) -> int:
    """Microseconds as parsed from the JSON text (int or Decimal) -> integer nanoseconds."""
    return int(Decimal(ts) * 1000) + base


def _load_raw(key: str):
    with gzip.open(real_trace_path(key), "rb") as f:
        return json.loads(f.read(), parse_float=Decimal)


_FACTS: dict[str, dict] = {}


def facts(key: str) -> dict:
    """What the raw JSON says about a real trace, computed with plain json (cached; the doc is dropped)."""
    if key in _FACTS:
        return _FACTS[key]
    doc = _load_raw(key)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    meta = doc if isinstance(doc, dict) else {}
    base = meta.get("baseTimeNanoseconds") or 0
    f: dict = {
        "base": base,
        "device_names": [(p.get("id"), p.get("name")) for p in meta.get("deviceProperties", [])],
        "has_distributed": "distributedInfo" in meta,
        "counts": Counter(),
        "kernel_rows": Counter(),  # (name, start_ns, dur_ns, correlation) of kind "kernel"
        "gpu_devices": Counter(),
        "runtime_by_corr": defaultdict(list),  # correlation -> [(name, start_ns, external id)]
        "ops_by_ext": defaultdict(list),  # External id -> [(name, start_ns, end_ns, tid)]
        "op_starts": Counter(),
        "runtime_starts": Counter(),
        "ops_with_dims": 0,
        "flow_cats": Counter(),
        "profiler_steps": 0,
    }
    for e in events:
        cat = str(e.get("cat")).lower()
        if e.get("ph") == "s":
            f["flow_cats"][cat] += 1
        if e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        start = _ns(e["ts"], base)
        dur = _ns(e.get("dur", 0))
        if cat in KERNEL_CATS:
            f["counts"][KERNEL_CATS[cat]] += 1
            f["gpu_devices"][args.get("device", e.get("pid"))] += 1
            if cat == "kernel":
                f["kernel_rows"][(e["name"], start, dur, args.get("correlation", -1))] += 1
        elif cat in RUNTIME_CATS:
            f["counts"]["runtime"] += 1
            f["runtime_starts"][start] += 1
            if "correlation" in args:
                ext = args.get("External id", args.get("external id", -1))
                f["runtime_by_corr"][args["correlation"]].append((e["name"], start, ext))
        elif cat in OP_CATS:
            # PyTorch 1.x recorded ProfilerStep#N ranges as operators; they are annotations.
            if e["name"].startswith("ProfilerStep#"):
                f["counts"]["annotations"] += 1
                f["profiler_steps"] += 1
                continue
            f["counts"]["cpu_ops"] += 1
            f["op_starts"][start] += 1
            if "Input Dims" in args:
                f["ops_with_dims"] += 1
            ext = args.get("External id", args.get("external id"))
            if ext is not None:
                tid = e.get("tid")
                # PyTorch 1.9 writes thread ids as strings ("25738"); the tables hold int64.
                tid = int(tid) if isinstance(tid, str) and tid.isdigit() else tid
                f["ops_by_ext"][ext].append((e["name"], start, start + dur, tid))
        elif cat in ANNOTATION_CATS:
            f["counts"]["annotations"] += 1
        elif cat == "python_function":
            f["counts"]["python"] += 1
    _FACTS[key] = f
    return f


def _kernel_only(t: Trace) -> pd.DataFrame:
    return t.kernels[t.kernels["kind"] == "kernel"]


def _sample(n: int, k: int = 300) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, num=min(n, k)).astype(int)) if n else np.empty(0, int)


# ---------------------------------------------------------------------------
# Facts of every real trace


@pytest.mark.parametrize("key", ALL)
def test_device_name_comes_from_device_properties(key):
    f = facts(key)
    t = read_real(key)
    names = {name for _, name in f["device_names"]}
    assert len(names) == 1, "every real trace describes one GPU model"
    assert t.device_name() == names.pop()
    assert sorted(t.devices) == sorted(i for i, _ in f["device_names"])


@pytest.mark.parametrize("key", ALL)
def test_event_counts_match_the_json(key):
    f = facts(key)
    t = read_real(key)
    kinds = t.kernels["kind"].value_counts()
    assert int(kinds.get("kernel", 0)) == f["counts"]["kernel"]
    assert int(kinds.get("memcpy", 0)) == f["counts"]["memcpy"]
    assert int(kinds.get("memset", 0)) == f["counts"]["memset"]
    assert len(t.runtime) == f["counts"]["runtime"]
    assert len(t.cpu_ops) == f["counts"]["cpu_ops"]
    assert len(t.annotations) == f["counts"]["annotations"]
    assert len(t.python) == f["counts"]["python"]
    assert f["counts"]["kernel"] > 0 and f["counts"]["cpu_ops"] > 0


@pytest.mark.parametrize("key", ALL)
def test_kernel_rows_match_the_json_exactly(key):
    """Names, integer-ns start and duration, and correlation of every kernel, as a multiset."""
    f = facts(key)
    k = _kernel_only(read_real(key))
    got = Counter(zip(k["name"].astype(str), k["start_ns"].tolist(), k["dur_ns"].tolist(), k["correlation"].tolist()))
    assert got == f["kernel_rows"]
    assert Counter(read_real(key).cpu_ops["start_ns"].tolist()) == f["op_starts"]
    assert Counter(read_real(key).runtime["start_ns"].tolist()) == f["runtime_starts"]


@pytest.mark.parametrize("key", ALL)
def test_kernels_link_to_their_launch_by_correlation(key):
    f = facts(key)
    t = read_real(key)
    k, rt = t.kernels, t.runtime
    # Independent count: GPU activities whose correlation a runtime call in the JSON carries.
    expected = sum(n for (_, _, _, corr), n in f["kernel_rows"].items() if corr in f["runtime_by_corr"])
    kern = _kernel_only(t)
    assert int((kern["launch"] >= 0).sum()) == expected
    assert expected > 0
    linked = k[k["launch"] >= 0]
    launch = linked["launch"].to_numpy()
    assert (launch < len(rt)).all()
    assert (rt["correlation"].to_numpy()[launch] == linked["correlation"].to_numpy()).all()
    # Unlinked kernels really have no runtime call with their correlation.
    unlinked = kern[kern["launch"] < 0]
    assert not any(c in f["runtime_by_corr"] for c in unlinked["correlation"].tolist())
    # The launch row is the JSON's runtime event of that correlation (name and exact start).
    for i in _sample(len(linked)):
        row = linked.iloc[i]
        r = rt.iloc[int(row["launch"])]
        raw = f["runtime_by_corr"][int(row["correlation"])]
        assert (str(r["name"]), int(r["start_ns"])) in [(n, s) for n, s, _ in raw]


@pytest.mark.parametrize("key", ALL)
def test_kernels_link_to_the_op_that_encloses_the_launch(key):
    f = facts(key)
    t = read_real(key)
    k, rt, ops = t.kernels, t.runtime, t.cpu_ops
    with_op = k[k["op"] >= 0]
    assert len(with_op) > 0
    r = rt.iloc[with_op["launch"].to_numpy()]
    o = ops.iloc[with_op["op"].to_numpy()]
    # The op's interval contains the runtime call, on the same thread of the same process.
    assert (o["start_ns"].to_numpy() <= r["start_ns"].to_numpy()).all()
    assert (o["end_ns"].to_numpy() >= r["end_ns"].to_numpy()).all()
    assert (o["tid"].to_numpy() == r["tid"].to_numpy()).all()
    assert (o["pid"].to_numpy() == r["pid"].to_numpy()).all()
    # A kernel's op is its launch's op.
    assert (rt["op"].to_numpy()[with_op["launch"].to_numpy()] == with_op["op"].to_numpy()).all()
    # Where the JSON names the op (the runtime call's External id is an op's External id
    # and that op encloses the call on its thread), the linked op is that op.
    checked = 0
    for i in _sample(len(with_op)):
        row = with_op.iloc[i]
        rrow = rt.iloc[int(row["launch"])]
        raw_rt = [x for x in f["runtime_by_corr"][int(row["correlation"])] if x[1] == int(rrow["start_ns"])]
        if not raw_rt:
            continue
        named = [
            (name, s)
            for name, s, e, tid in f["ops_by_ext"].get(raw_rt[0][2], [])
            if s <= rrow["start_ns"] and e >= rrow["end_ns"] and tid == rrow["tid"]
        ]
        if len(named) == 1:
            orow = ops.iloc[int(row["op"])]
            assert (str(orow["name"]), int(orow["start_ns"])) == named[0]
            checked += 1
    if key not in ("v100_ddp", "a100_dlrm", "a100_torchrec"):
        # These three reuse the correlation as External id; the others name their ops.
        assert checked > 0


@pytest.mark.parametrize("key", ALL)
def test_era(key):
    f = facts(key)
    expected = {"v100_pt19": "pytorch-1.9", "a100_dlrm": "2022"}.get(key, "current")
    assert read_real(key).era == expected
    # The fixtures are what PROVENANCE.md says: the era shows in the flow categories.
    if expected == "pytorch-1.9":
        assert f["flow_cats"]["async"] > 0
    elif expected == "2022":
        assert f["flow_cats"]["async_cpu_to_gpu"] > 0 and f["flow_cats"]["ac2g"] == 0


# ---------------------------------------------------------------------------
# Particular traces


def test_graph_replay_kernels_hang_off_one_hipgraphlaunch():
    key = "mi300x_decode"
    f = facts(key)
    t = read_real(key)
    kern = _kernel_only(t)
    assert len(kern) == 555
    graph_corrs = [c for c, raws in f["runtime_by_corr"].items() if any(n == "hipGraphLaunch" for n, _, _ in raws)]
    assert len(graph_corrs) == 1
    replayed = Counter(
        (name, start)
        for (name, start, _, corr), n in f["kernel_rows"].items()
        for _ in range(n)
        if corr == graph_corrs[0]
    )
    assert sum(replayed.values()) == 544
    g = kern[kern["graph"]]
    assert len(g) == 544
    assert Counter(zip(g["name"].astype(str), g["start_ns"].tolist())) == replayed
    launches = g["launch"].unique()
    assert len(launches) == 1
    assert t.runtime["name"].iat[int(launches[0])] == "hipGraphLaunch"
    assert (g["op"] == -1).all()
    # The other kernels are ordinary launches.
    rest = kern[~kern["graph"]]
    assert len(rest) == 11
    assert not t.runtime["name"].iloc[rest["launch"].to_numpy()].astype(str).str.contains("Graph").any()
    assert "graph_ops" in t.lacks


def test_cuda_graph_launch_in_torchrec():
    t = read_real("a100_torchrec")
    g = t.kernels[t.kernels["graph"]]
    assert len(g) > 0
    assert set(t.runtime["name"].iloc[g["launch"].unique()].astype(str)) == {"cudaGraphLaunch"}
    assert (g["op"] == -1).all()


def test_pytorch_1_9_trace_reads_into_the_same_tables_as_a_current_one():
    old = read_real("v100_pt19")
    new = read_real("v100_ddp")
    assert old.era == "pytorch-1.9"
    assert new.era == "current"
    for name in ("kernels", "runtime", "cpu_ops", "annotations"):
        a, b = getattr(old, name), getattr(new, name)
        assert len(a) > 0 and len(b) > 0, name
        assert list(a.columns) == list(b.columns), name
        assert [str(d) for d in a.dtypes] == [str(d) for d in b.dtypes], name
    # ProfilerStep#N ranges were Operator events; they land in annotations, not cpu_ops.
    steps = old.annotations[old.annotations["name"].astype(str).str.startswith("ProfilerStep#")]
    assert len(steps) == facts("v100_pt19")["profiler_steps"] > 0
    assert not old.cpu_ops["name"].astype(str).str.startswith("ProfilerStep#").any()
    # Kernels hang off their Runtime launches and Operator ops in the old schema too.
    kern = _kernel_only(old)
    assert (kern["launch"] >= 0).all()
    assert (kern["op"] >= 0).mean() > 0.9


def test_2022_trace():
    t = read_real("a100_dlrm")
    assert t.era == "2022"
    assert t.distributed["rank"] == 3 and t.distributed["world_size"] == 8
    assert (_kernel_only(t)["launch"] >= 0).all()


@pytest.mark.parametrize("key", ["v100_ns", "a100_nccl"])
def test_fractional_epoch_timestamps_are_exact_to_the_ns(key):
    """Float64 microseconds cannot hold these ns; the reader must not lose them."""
    f = facts(key)
    t = read_real(key)
    k = _kernel_only(t)
    starts = [s for (_, s, _, _), n in f["kernel_rows"].items() for _ in range(n)]
    assert sorted(k["start_ns"].tolist()) == sorted(starts)
    # The check means something: there are sub-us digits, and naive float maths gets them wrong.
    assert any(s % 1000 for s in starts)


def test_ns_timestamps_from_the_raw_text():
    """Pick events in the JSON text, parse their ts with Decimal, find them exactly in the tables."""
    import re

    with gzip.open(real_trace_path("v100_ns"), "rb") as fh:
        text = fh.read().decode()
    pat = re.compile(r'"cat": "(kernel|cpu_op|cuda_runtime)", "name": "((?:[^"\\]|\\.)*)"[^{}]*?"ts": ([0-9.]+)')
    picked = pat.findall(text)[::97][:200]
    assert len(picked) > 50
    t = read_real("v100_ns")
    tables = {
        "kernel": set(zip(t.kernels["name"].astype(str), t.kernels["start_ns"])),
        "cpu_op": set(zip(t.cpu_ops["name"].astype(str), t.cpu_ops["start_ns"])),
        "cuda_runtime": set(zip(t.runtime["name"].astype(str), t.runtime["start_ns"])),
    }
    naive_wrong = 0
    for cat, name, ts in picked:
        exact = int(Decimal(ts) * 1000)
        assert (json.loads(f'"{name}"'), exact) in tables[cat], (cat, name, ts)
        naive_wrong += int(float(ts) * 1000) != exact
    assert naive_wrong > 0


@pytest.mark.parametrize("key", ["h100_hf", "a100_nccl", "mi300x_decode"])
def test_base_time_nanoseconds_is_applied(key):
    f = facts(key)
    assert f["base"] > 0
    t = read_real(key)
    # facts() computed start as base + ts * 1000; the tables must agree exactly.
    assert Counter(t.cpu_ops["start_ns"].tolist()) == f["op_starts"]
    assert t.start_ns >= f["base"]


def test_epoch_timestamps_and_base_relative_timestamps_agree(tmp_path):
    """The same trace written with epoch ts (no baseTimeNanoseconds) reads to the same ns."""
    doc = _load_raw("mi250_toy")
    base = doc.pop("baseTimeNanoseconds")
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = Decimal(base) / 1000 + Decimal(e["ts"])
    path = tmp_path / "epoch.json"
    path.write_bytes(msgspec.json.Encoder(decimal_format="number").encode(doc))
    t = read_trace(path)
    ref = read_real("mi250_toy")
    for name in ("kernels", "runtime", "cpu_ops", "annotations"):
        pd.testing.assert_series_equal(getattr(t, name)["start_ns"], getattr(ref, name)["start_ns"], check_names=False)
        pd.testing.assert_series_equal(getattr(t, name)["end_ns"], getattr(ref, name)["end_ns"], check_names=False)


def test_rocm_mi250_generic_device_name_and_hip_runtime():
    key = "mi250_toy"
    doc = _load_raw(key)
    kernels_raw = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels_raw and not any("est. achieved occupancy %" in e["args"] for e in kernels_raw)
    t = read_real(key)
    assert t.device_name() == "AMD Radeon Graphics"
    assert set(t.kernels["device"]) == {2}
    assert t.runtime["name"].astype(str).str.startswith("hip").all()
    kern = _kernel_only(t)
    assert len(kern) == len(kernels_raw)
    assert (kern["launch"] >= 0).all()
    assert t.runtime["name"].iloc[kern["launch"]].astype(str).str.contains("Launch").all()


@pytest.mark.parametrize("key", ["mi300x_decode", "mi300x_extend"])
def test_rocm_mi300x_device_9_is_named_from_device_properties_0(key):
    t = read_real(key)
    assert set(t.kernels["device"]) == {9}
    assert list(t.devices) == [0]
    assert t.device_name() == "AMD Instinct MI300X"
    assert t.device_name(9) == "AMD Instinct MI300X"
    assert t.runtime["name"].astype(str).str.startswith("hip").all()


def test_shapes_of_a_linear_op():
    doc = _load_raw("h100_hf")
    base = doc["baseTimeNanoseconds"]
    raw = sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] in ("aten::linear", "aten::mm")),
        key=lambda e: e["ts"],
    )
    t = read_real("h100_hf")
    ops = t.cpu_ops
    assert int(ops["input_dims"].notna().sum()) == facts("h100_hf")["ops_with_dims"]
    for e in raw[:: max(1, len(raw) // 20)]:
        rows = np.flatnonzero(
            (ops["name"] == e["name"]).to_numpy() & (ops["start_ns"] == _ns(e["ts"], base)).to_numpy()
        )
        assert len(rows) == 1
        dims, types = t.shapes(int(rows[0]))
        assert dims == e["args"]["Input Dims"]
        assert types == e["args"]["Input type"]
    assert dims and dims[0][-1] == dims[1][-1]  # x @ W.T: the inner dimensions agree


def test_shapes_of_an_op_without_them_is_none():
    t = read_real("a100_torchrec")
    missing = np.flatnonzero(t.cpu_ops["input_dims"].isna().to_numpy())
    present = np.flatnonzero(t.cpu_ops["input_dims"].notna().to_numpy())
    assert len(missing) and len(present)
    assert t.shapes(int(missing[0])) == (None, None)
    assert t.shapes(int(present[0]))[0] is not None


def test_lacks_records_what_is_missing():
    ddp = read_real("v100_ddp")
    assert "shapes" in ddp.lacks and "distributed" not in ddp.lacks
    decode = read_real("mi300x_decode")
    assert "graph_ops" in decode.lacks and "shapes" not in decode.lacks
    h100 = read_real("h100_hf")
    assert "distributed" in h100.lacks and h100.distributed is None
    assert "shapes" not in h100.lacks and "graph_ops" not in h100.lacks
    # Every lack is a sentence a report can show.
    for t in (ddp, decode, h100):
        assert all(isinstance(v, str) and len(v) > 20 for v in t.lacks.values())


# ---------------------------------------------------------------------------
# File forms: bare list, .json, .json.gz, .json.zst, a directory of ranks


SMALL = "b300_moe"


def _small_json() -> bytes:
    with gzip.open(real_trace_path(SMALL), "rb") as f:
        return f.read()


def _assert_same_tables(a: Trace, b: Trace, shift_ns: int = 0):
    for name in ("kernels", "runtime", "cpu_ops", "annotations", "python"):
        x, y = getattr(a, name).copy(), getattr(b, name).copy()
        for c in ("start_ns", "end_ns"):
            y[c] = y[c] - shift_ns
        pd.testing.assert_frame_equal(x, y, check_categorical=False)


def test_plain_json(tmp_path):
    path = tmp_path / "trace.json"
    path.write_bytes(_small_json())
    t = read_trace(path)
    _assert_same_tables(t, read_real(SMALL))
    assert t.device_name() == "NVIDIA B300 SXM6 AC"


def test_gzip_json(tmp_path):
    path = tmp_path / "trace.json.gz"
    shutil.copy(real_trace_path(SMALL), path)
    _assert_same_tables(read_trace(path), read_real(SMALL))


@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_json(tmp_path, content_size):
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "trace.json.zst"
    path.write_bytes(zstandard.ZstdCompressor(write_content_size=content_size).compress(_small_json()))
    _assert_same_tables(read_trace(path), read_real(SMALL))


def test_zstd_with_several_frames(tmp_path):
    """pzstd and `cat a.zst b.zst` write several frames; all of them are the trace."""
    zstandard = pytest.importorskip("zstandard")
    raw = _small_json()
    cut = len(raw) // 3
    c = zstandard.ZstdCompressor()
    path = tmp_path / "trace.json.zst"
    path.write_bytes(c.compress(raw[:cut]) + c.compress(raw[cut:]))
    _assert_same_tables(read_trace(path), read_real(SMALL))


def test_bare_list_of_events(tmp_path):
    doc = json.loads(_small_json())
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc["traceEvents"]))
    t = read_trace(path)
    # No top level: no baseTimeNanoseconds, no deviceProperties. Everything else is the same.
    _assert_same_tables(t, read_real(SMALL), shift_ns=doc["baseTimeNanoseconds"])
    assert t.devices == {} and t.device_name() is None
    assert "device_properties" in t.lacks
    assert (_kernel_only(t)["launch"] >= 0).all()


def _rank_dir(tmp_path):
    """Two per-rank traces of one job: the MI300X decode step as rank 0, and as rank 1 with
    its own correlation ids (shifted), a few ops fewer, and compressed differently."""
    doc = _load_raw("mi300x_decode")
    enc = msgspec.json.Encoder(decimal_format="number")
    d = tmp_path / "run"
    d.mkdir()
    doc["distributedInfo"].update(rank=0, world_size=2)
    (d / "rank0.json").write_bytes(enc.encode(doc))
    doc["distributedInfo"].update(rank=1, world_size=2)
    dropped = 0
    events = []
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if "correlation" in args:
            args["correlation"] += 1_000_000
        if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
            e["id"] += 1_000_000
        # Drop a few leaf ops that launch nothing, so the ranks' tables differ in length.
        if e.get("cat") == "cpu_op" and e["name"] == "aten::empty" and dropped < 3:
            dropped += 1
            continue
        events.append(e)
    doc["traceEvents"] = events
    (d / "rank1.json.gz").write_bytes(gzip.compress(enc.encode(doc)))
    (d / "rank1.json.tracekit.json").write_text("{}")  # a sidecar is not a rank
    (d / "notes.txt").write_text("not a trace")
    return d, dropped


def test_directory_of_rank_traces_merges_with_links_intact(tmp_path):
    d, dropped = _rank_dir(tmp_path)
    t = read_trace(d)
    single = read_real("mi300x_decode")
    assert set(t.kernels["rank"]) == {0, 1}
    for name in ("kernels", "runtime", "cpu_ops", "annotations", "python"):
        tab = getattr(t, name)
        assert "rank" in tab
        n0 = int((tab["rank"] == 0).sum())
        assert n0 == len(getattr(single, name)), name
    assert int((t.cpu_ops["rank"] == 1).sum()) == len(single.cpu_ops) - dropped
    k, rt, ops = t.kernels, t.runtime, t.cpu_ops
    linked = k[k["launch"] >= 0]
    assert len(linked) == 2 * int((single.kernels["launch"] >= 0).sum())
    launch = linked["launch"].to_numpy()
    assert (rt["correlation"].to_numpy()[launch] == linked["correlation"].to_numpy()).all()
    assert (rt["rank"].to_numpy()[launch] == linked["rank"].to_numpy()).all()
    with_op = k[k["op"] >= 0]
    assert len(with_op) == 2 * int((single.kernels["op"] >= 0).sum())
    o = ops.iloc[with_op["op"].to_numpy()]
    r = rt.iloc[with_op["launch"].to_numpy()]
    assert (o["rank"].to_numpy() == with_op["rank"].to_numpy()).all()
    assert (o["start_ns"].to_numpy() <= r["start_ns"].to_numpy()).all()
    assert (o["end_ns"].to_numpy() >= r["end_ns"].to_numpy()).all()
    assert (o["tid"].to_numpy() == r["tid"].to_numpy()).all()
    # Runtime -> op links were offset too.
    rop = rt[rt["op"] >= 0]
    assert (ops["rank"].to_numpy()[rop["op"].to_numpy()] == rop["rank"].to_numpy()).all()
    # Each rank's graph replay hangs off its own hipGraphLaunch.
    for rank in (0, 1):
        g = k[(k["rank"] == rank) & k["graph"]]
        assert len(g) == 544
        (row,) = g["launch"].unique()
        assert rt["name"].iat[int(row)] == "hipGraphLaunch" and rt["rank"].iat[int(row)] == rank
    assert t.device_name() == "AMD Instinct MI300X"
    assert len(t.metadata["files"]) == 2


def test_directory_ranks_without_distributed_info_are_numbered_by_file(tmp_path):
    """Without distributedInfo, the engine's per-rank file names give the ranks, and the
    merge keeps each rank's links pointing at its own rows."""
    doc = json.loads(_small_json())
    d = tmp_path / "ranks"
    d.mkdir()
    (d / "rank0.json").write_text(json.dumps(doc))
    # rank 1 lacks the first kernel: a different file of the same run.
    first_kernel = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    del doc["traceEvents"][first_kernel]
    (d / "rank1.json").write_text(json.dumps(doc))
    t = read_trace(d)
    assert Counter(t.kernels["rank"].tolist()) == {0: 36, 1: 35}
    assert t.distributed["source"].startswith("per-rank file name")
    linked = t.kernels[t.kernels["launch"] >= 0]
    assert (t.runtime["rank"].to_numpy()[linked["launch"]] == linked["rank"].to_numpy()).all()
    assert (t.runtime["correlation"].to_numpy()[linked["launch"]] == linked["correlation"].to_numpy()).all()


def test_directory_with_a_malformed_rank_numbers_ranks_by_file(tmp_path):
    """distributedInfo is untrusted: a rank that is not an integer gives way to the file name."""
    doc = json.loads(_small_json())
    d = tmp_path / "ranks"
    d.mkdir()
    for i, rank in enumerate([[0, 1], "one"]):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) - i]  # not a copy
        (d / f"rank{i}.json").write_text(json.dumps(doc))
    t = read_trace(d)
    assert set(t.kernels["rank"].tolist()) == {0, 1}
    assert t.kernels["rank"].dtype == np.int64


def test_directory_with_a_malformed_rank_and_no_rank_in_the_name_is_refused(tmp_path):
    doc = json.loads(_small_json())
    d = tmp_path / "ranks"
    d.mkdir()
    for i, rank in enumerate([[0, 1], "one"]):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) - i]
        (d / f"{'ab'[i]}.json").write_text(json.dumps(doc))
    with pytest.raises(TracekitError, match="say no rank"):
        read_trace(d)


def test_runtime_to_op_trusts_external_id_only_when_the_op_encloses_the_call(tmp_path):
    """2022-era traces reuse the correlation as External id, which may name an unrelated op;
    such a link must fall back to the innermost op that encloses the call on its thread."""
    events = [
        # Thread 1: an outer op with a nested child; the launch happens inside the child.
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "outer",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "inner",
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 50,
            "args": {"External id": 2},
        },
        # Thread 2: an unrelated op whose External id happens to equal the launch's.
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "unrelated",
            "pid": 1,
            "tid": 2,
            "ts": 200,
            "dur": 50,
            "args": {"External id": 77},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 5,
            "args": {"External id": 77, "correlation": 77},
        },
        # A launch whose External id names its enclosing op directly.
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 60,
            "dur": 5,
            "args": {"External id": 1, "correlation": 78},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k77",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "dur": 3,
            "args": {"device": 0, "stream": 7, "correlation": 77, "External id": 77},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k78",
            "pid": 0,
            "tid": 7,
            "ts": 70,
            "dur": 3,
            "args": {"device": 0, "stream": 7, "correlation": 78, "External id": 1},
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = read_trace(path)
    op_name = {str(n): str(t.cpu_ops["name"].iat[int(o)]) for n, o in zip(t.kernels["name"], t.kernels["op"])}
    assert op_name == {"k77": "inner", "k78": "outer"}
