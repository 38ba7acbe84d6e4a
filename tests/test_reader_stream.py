"""The streaming reader (issue 15): the same Trace as the whole-document reader, in bounded memory.

The reader cuts the decompressed text into chunks of complete events as it arrives
(tracekit/trace/stream.py) and builds the tables chunk by chunk (columns.py). The
reference is the whole-document path it falls back to for documents it cannot cut
(decode the whole JSON at once, then build the tables from every event), which is
what the reader did before it streamed; every test here reads both ways and
compares the tables, and checks that the stream really streamed (no fallback).
"""

from __future__ import annotations

import decimal
import gzip
import json
import tracemalloc
import zlib

import pandas as pd
import pytest
from conftest import SAMPLE_TRACES, all_real_traces, real_trace_path

from tracekit import read_trace
from tracekit.trace import inflate, reader, stream

TABLES = ("kernels", "runtime", "cpu_ops", "annotations", "python")


def _whole_document(monkeypatch, path, **kw):
    """The trace as the whole-document path reads it."""

    def refuse(*a, **k):
        raise stream.NotStreamable

    with monkeypatch.context() as m:
        m.setattr(reader, "_stream", refuse)
        return read_trace(path, **kw)


def _streamed(monkeypatch, path, **kw):
    """The trace as the stream reads it; fails if the reader fell back to the whole document."""

    def no_fallback(*a, **k):
        raise AssertionError("the reader fell back to the whole-document path")

    with monkeypatch.context() as m:
        m.setattr(reader, "_whole_document", no_fallback)
        return read_trace(path, **kw)


def assert_same_trace(a, b):
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True, obj=name)
    for attr in ("devices", "distributed", "metadata", "era", "lacks", "n_events", "n_bytes"):
        assert getattr(a, attr) == getattr(b, attr), attr


# ---------------------------------------------------------------------------
# Every real trace and the sample traces, cut into many chunks


@pytest.mark.parametrize("key", all_real_traces())
def test_stream_reads_every_shared_trace_as_the_whole_document_does(monkeypatch, key):
    path = real_trace_path(key)
    # 256 KiB slices: tens to hundreds of chunks per trace, each cut where the stream finds it.
    assert_same_trace(_streamed(monkeypatch, path, chunk_bytes=256 << 10), _whole_document(monkeypatch, path))


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLE_TRACES.glob("*.pt.trace.json.gz")))
def test_stream_reads_the_sample_traces_as_the_whole_document_does(monkeypatch, name):
    path = SAMPLE_TRACES / name
    assert_same_trace(_streamed(monkeypatch, path, chunk_bytes=16 << 10), _whole_document(monkeypatch, path))


def test_stream_matches_a_plain_json_loads_construction(monkeypatch):
    """Independently of both paths: names, ns starts and durations of every table, from json.loads."""
    path = real_trace_path("h100_hf")
    # Decimals, so that epoch microseconds times 1000 stay exact.
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=decimal.Decimal)
    base = doc.get("baseTimeNanoseconds", 0)
    t = _streamed(monkeypatch, path, chunk_bytes=64 << 10)
    cats = {
        "kernels": {"kernel", "gpu_memcpy", "gpu_memset"},
        "runtime": {"cuda_runtime", "cuda_driver"},
        "cpu_ops": {"cpu_op"},
        "python": {"python_function"},
    }
    for table, wanted in cats.items():
        rows = sorted(
            (e["name"], base + int((e["ts"] * 1000).to_integral_value()), int((e["dur"] * 1000).to_integral_value()))
            for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in wanted
        )
        df = getattr(t, table)
        got = sorted(zip(df["name"].astype(str), df["start_ns"].tolist(), df["dur_ns"].tolist()))
        assert got == rows, table
        assert (df["start_ns"].diff().dropna() >= 0).all(), f"{table} is in time order"


# ---------------------------------------------------------------------------
# Chunk boundaries in awkward places


_NASTY = [
    'a}, {"ph": "X"}',  # an event separator inside a string
    "},\n{",  # ... spelt as JSON would write it on its own lines (escaped here)
    'quote \\" then }, {',  # an escaped quote before braces
    'slashes \\\\" }',  # an even run of backslashes: the quote closes the string
    '[{"nested": [1, 2]}]',
    "µs ünïcode ✓ }{",
]


def _nasty_doc(n: int = 400) -> dict:
    events = []
    for i in range(n):
        name = _NASTY[i % len(_NASTY)] + f" #{i}"
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": 10 * i,
                "dur": 5,
                "args": {"External id": i, "Input Dims": [[i, 2], []], "note": {"x": [{"y": name}]}},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 10 * i + 1,
                "dur": 2,
                "args": {"External id": i, "correlation": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i % 7}",
                "pid": 0,
                "tid": 7,
                "ts": 10 * i + 3,
                "dur": 4.25,
                "args": {"device": 0, "stream": 7, "correlation": i, "grid": [i % 5 + 1, 1, 1]},
            }
        )
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], "traceEvents": events}


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("chunk", [7, 61, 1000, 4096])
def test_cuts_inside_strings_with_braces_and_escaped_quotes(tmp_path, monkeypatch, indent, chunk):
    path = tmp_path / "nasty.json"
    path.write_text(json.dumps(_nasty_doc(), indent=indent, ensure_ascii=False), encoding="utf-8")
    t = _streamed(monkeypatch, path, chunk_bytes=chunk)
    assert_same_trace(t, _whole_document(monkeypatch, path))
    assert len(t.cpu_ops) == 400 and set(t.cpu_ops["name"].astype(str).str.split(" #").str[0]) == set(_NASTY)
    assert (t.kernels["launch"] >= 0).all() and (t.kernels["op"] >= 0).all()


def test_top_level_keys_after_the_events_are_read(tmp_path, monkeypatch):
    doc = _nasty_doc(50)
    events = doc.pop("traceEvents")
    # Keys after the events, as Kineto writes baseTimeNanoseconds and traceName; the list of
    # objects after the array looks like more events to a careless cut.
    doc = {
        "schemaVersion": 1,
        "traceEvents": events,
        "deviceProperties": doc["deviceProperties"],
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
        "traceName": "x }, {",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "extra": [{"a": 1}, {"b": [2]}],
    }
    path = tmp_path / "keys_after.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode()))
    t = _streamed(monkeypatch, path, chunk_bytes=512)
    assert_same_trace(t, _whole_document(monkeypatch, path))
    assert t.device_name() == "NVIDIA H100 80GB HBM3"
    assert t.distributed == {"backend": "nccl", "rank": 3, "world_size": 8}
    assert t.metadata["traceName"] == "x }, {" and t.metadata["extra"] == [{"a": 1}, {"b": [2]}]
    assert int(t.cpu_ops["start_ns"].min()) == 1_700_000_000_000_000_000  # the base was applied


def test_bare_list_of_events_streams(tmp_path, monkeypatch):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(_nasty_doc(60)["traceEvents"]))
    t = _streamed(monkeypatch, path, chunk_bytes=300)
    assert_same_trace(t, _whole_document(monkeypatch, path))
    assert len(t.kernels) == 60


def test_a_cut_in_the_middle_of_the_stream_salvages_the_same_events(tmp_path, monkeypatch):
    raw = json.dumps(_nasty_doc(), indent=2).encode()
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: len(raw) * 2 // 3])
    t = _streamed(monkeypatch, path, chunk_bytes=1000)
    assert_same_trace(t, _whole_document(monkeypatch, path))
    assert "truncated" in t.lacks and 0 < t.n_events < 1200


# ---------------------------------------------------------------------------
# Bounded memory


def _big_trace(path, steps: int) -> int:
    """A gzip trace of ``steps`` op/launch/kernel triples with Kineto-sized kernel args; its JSON size."""
    args = {
        "queued": 0,
        "device": 0,
        "context": 1,
        "stream": 7,
        "registers per thread": 168,
        "shared memory": 147456,
        "blocks per SM": 0.25,
        "warps per SM": 2.0,
        "grid": [32, 1, 1],
        "block": [384, 1, 1],
        "est. achieved occupancy %": 0,
        "notes": "x" * 1500,
    }
    events = []
    for i in range(steps):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 30 * i,
                "dur": 8,
                "args": {"External id": i, "notes": "y" * 1000},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 30 * i + 1,
                "dur": 4,
                "args": {"External id": i, "correlation": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"gemm_{i % 50}",
                "pid": 0,
                "tid": 7,
                "ts": 30 * i + 10,
                "dur": 20,
                "args": {**args, "correlation": i},
            }
        )
    raw = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1).encode()
    path.write_bytes(gzip.compress(raw, compresslevel=1))
    return len(raw)


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_trace_many_chunks_long_is_read_in_memory_well_under_its_json_size(tmp_path, monkeypatch):
    path = tmp_path / "big.json.gz"
    size = _big_trace(path, 6_000)  # ~17 MB of JSON, ~65 chunks of 256 KiB
    streamed = _peak(lambda: _streamed(monkeypatch, path, chunk_bytes=256 << 10))
    # The stream holds the tables plus one chunk; the whole-document path holds the text and
    # every decoded event at once. The comparison shows what the bound would catch.
    assert streamed < 0.25 * size, f"streamed read peaked at {streamed / size:.2f}x the JSON size"
    whole = _peak(lambda: _whole_document(monkeypatch, path))
    assert whole > size


# ---------------------------------------------------------------------------
# gzip through ISA-L or zlib: the same bytes either way


def test_zlib_fallback_reads_the_same_trace(monkeypatch):
    path = real_trace_path("mi300x_decode")
    monkeypatch.setattr(inflate, "ZLIB", zlib)
    by_zlib = _streamed(monkeypatch, path)
    monkeypatch.undo()
    if inflate._fast_zlib is None:
        pytest.skip("isal is not installed: zlib is the only inflater")
    monkeypatch.setattr(inflate, "ZLIB", inflate._fast_zlib)
    assert_same_trace(_streamed(monkeypatch, path), by_zlib)


@pytest.mark.parametrize("frac", [0.37, 0.61])
def test_a_cut_gzip_stream_gives_the_same_bytes_through_isal_and_zlib(tmp_path, monkeypatch, frac):
    if inflate._fast_zlib is None:
        pytest.skip("isal is not installed: zlib is the only inflater")
    gz = real_trace_path("h100_hf").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gz[: int(len(gz) * frac)])
    got = {}
    for lib in (zlib, inflate._fast_zlib):
        monkeypatch.setattr(inflate, "ZLIB", lib)
        got[lib.__name__] = _streamed(monkeypatch, path, chunk_bytes=1 << 20)
    a, b = got.values()
    assert_same_trace(a, b)
    assert a.metadata["truncated"]["bytes_read"] == len(zlib.decompressobj(31).decompress(path.read_bytes()))
