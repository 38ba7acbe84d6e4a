"""Truncated traces are salvaged; compression bombs are refused (issue 13).

A profiler stopped or killed while flushing leaves a file that ends mid-event.
The reader keeps every complete event before the cut and says what happened in
``lacks["truncated"]`` and ``metadata["truncated"]``. Expected counts are computed
here independently of tracekit: the full JSON is walked element by element with
the standard library's ``json.JSONDecoder.raw_decode``, which gives each event's
end offset, and an event survives a cut exactly when it ends before the cut.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib

import pytest
from click.testing import CliRunner
from conftest import real_trace_path

from tracekit import TracekitError, read_trace
from tracekit.analysis import analyze
from tracekit.cli import main

KEYS = ["mi300x_extend", "h100_hf"]
FRACTIONS = [0.3, 0.6, 0.9]


def _raw(key: str) -> bytes:
    return gzip.decompress(real_trace_path(key).read_bytes())


def event_ends(raw: bytes) -> list[int]:
    """Byte offset just past each element of the trace's event array, in file order."""
    text = raw.decode("utf-8")
    if text.lstrip().startswith("["):
        i = text.index("[") + 1
    else:
        i = text.index("[", text.index('"traceEvents"')) + 1
    decoder = json.JSONDecoder()
    ends, byte_at, char_at = [], 0, 0
    while True:
        while text[i].isspace():
            i += 1
        if text[i] == "]":
            return ends
        if text[i] == ",":
            i += 1
            continue
        _, i = decoder.raw_decode(text, i)
        byte_at += len(text[char_at:i].encode("utf-8"))  # char offsets -> byte offsets
        char_at = i
        ends.append(byte_at)


_ENDS: dict[str, list[int]] = {}


def ends_of(key: str) -> list[int]:
    if key not in _ENDS:
        raw = _raw(key)
        ends = event_ends(raw)
        assert len(ends) == len(json.loads(raw)["traceEvents"])  # the walk saw every event
        _ENDS[key] = ends
    return _ENDS[key]


def complete_before(ends: list[int], cut: int) -> int:
    return sum(1 for e in ends if e <= cut)


_KEYS: dict[str, tuple[list[str], list[str]]] = {}


def keys_around_events(key: str) -> tuple[list[str], list[str]]:
    """(top-level keys before traceEvents, keys after it), in file order."""
    if key not in _KEYS:
        keys = list(json.loads(_raw(key)))
        i = keys.index("traceEvents")
        _KEYS[key] = keys[:i], keys[i + 1 :]
    return _KEYS[key]


def _check_salvaged(path, expected_events: int, how: str, bytes_read: int, key: str):
    t = read_trace(path)
    cut = t.metadata["truncated"]
    assert {k: cut[k] for k in ("events_recovered", "bytes_read", "how")} == {
        "events_recovered": expected_events,
        "bytes_read": bytes_read,
        "how": how,
    }
    # The share recovered: bytes up to the end of the last complete event (the walk's offsets)
    # over the decompressed bytes the cut file holds.
    parsed = max(e for e in ends_of(key) if e <= bytes_read)
    assert cut["bytes_parsed"] == parsed
    assert cut["recovered_share"] == pytest.approx(parsed / bytes_read)
    # A cut that took every kernel of these GPU traces leaves the device unknown (Kineto writes GPU activity last).
    assert cut["gpu_events_lost"] == (len(t.kernels) == 0)
    assert t.n_events == expected_events
    assert "truncated" in t.lacks and f"{expected_events:,} complete events were recovered" in t.lacks["truncated"]
    # Top-level keys before the events survive; those after them are lost with the tail.
    before, after = keys_around_events(key)
    kept = (
        set(t.metadata)
        | ({"deviceProperties"} if t.devices else set())
        | ({"distributedInfo"} if t.distributed and not t.distributed.get("source") else set())
    )
    assert set(before) <= kept
    assert not set(after) & kept
    _check_links(t)
    analysis = analyze(t)
    assert analysis.phases
    return t


def _check_links(t):
    """Links point at real rows with the right ids; the lost part only leaves links missing."""
    k, rt = t.kernels, t.runtime
    linked = k[k["launch"] >= 0]
    assert (linked["launch"] < len(rt)).all()
    assert (rt["correlation"].to_numpy()[linked["launch"].to_numpy()] == linked["correlation"].to_numpy()).all()
    assert (k["op"] < len(t.cpu_ops)).all()
    unlinked = k[(k["launch"] < 0) & (k["kind"] == "kernel")]
    assert not set(unlinked["correlation"]) & set(rt["correlation"])
    if len(unlinked):
        assert "launch_links" in t.lacks


# ---------------------------------------------------------------------------
# Real traces cut at several points


@pytest.mark.parametrize("frac", FRACTIONS)
@pytest.mark.parametrize("key", KEYS)
def test_plain_json_cut_keeps_every_complete_event(tmp_path, key, frac):
    raw = _raw(key)
    cut = int(len(raw) * frac)
    path = tmp_path / "cut.json"
    path.write_bytes(raw[:cut])
    expected = complete_before(ends_of(key), cut)
    assert 0 < expected < len(ends_of(key))
    _check_salvaged(path, expected, "JSON ended early", cut, key)


@pytest.mark.parametrize("frac", FRACTIONS)
@pytest.mark.parametrize("key", KEYS)
def test_regzipped_cut_json_is_salvaged(tmp_path, key, frac):
    # A complete gzip stream holding cut JSON: the cut is in the JSON, not the stream.
    raw = _raw(key)
    cut = int(len(raw) * frac)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(raw[:cut], mtime=0))
    _check_salvaged(path, complete_before(ends_of(key), cut), "JSON ended early", cut, key)


@pytest.mark.parametrize("frac", FRACTIONS)
@pytest.mark.parametrize("key", KEYS)
def test_cut_gzip_stream_is_salvaged(tmp_path, key, frac):
    gz = real_trace_path(key).read_bytes()
    cut_gz = gz[: int(len(gz) * frac)]
    # What the stream holds before the cut, by plain zlib; tracekit must keep the events in it.
    partial = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut_gz)
    assert 0 < len(partial) < len(_raw(key))
    path = tmp_path / "cut.json.gz"
    path.write_bytes(cut_gz)
    _check_salvaged(path, complete_before(ends_of(key), len(partial)), "gzip stream ended early", len(partial), key)


def test_kernels_survive_a_late_cut_with_their_links(tmp_path):
    # Kineto writes GPU activity last: a cut at 99% keeps kernels, launched from earlier runtime calls.
    raw = _raw("mi300x_extend")
    cut = int(len(raw) * 0.99)
    path = tmp_path / "late.json"
    path.write_bytes(raw[:cut])
    t = _check_salvaged(path, complete_before(ends_of("mi300x_extend"), cut), "JSON ended early", cut, "mi300x_extend")
    assert len(t.kernels) > 0 and (t.kernels["launch"] >= 0).any()


def test_exact_timestamp_trace_is_salvaged(tmp_path):
    # This trace's fractional epoch timestamps take the reader's second, exact decode.
    raw = _raw("v100_ns")
    cut = len(raw) // 2
    path = tmp_path / "ns.json"
    path.write_bytes(raw[:cut])
    t = read_trace(path)
    assert t.metadata["truncated"]["events_recovered"] == complete_before(event_ends(raw), cut)


def test_zstd_stream_cut_is_salvaged(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    raw = _raw("h100_hf")
    z = zstandard.ZstdCompressor().compress(raw)
    cut_z = z[: int(len(z) * 0.6)]
    partial = zstandard.ZstdDecompressor().decompressobj().decompress(cut_z)
    path = tmp_path / "cut.json.zst"
    path.write_bytes(cut_z)
    expected = complete_before(ends_of("h100_hf"), len(partial))
    _check_salvaged(path, expected, "zstd stream ended early", len(partial), "h100_hf")


def test_gzip_cut_in_its_trailer_has_every_event(tmp_path):
    raw = _raw("h100_hf")
    path = tmp_path / "trailer.json.gz"
    path.write_bytes(gzip.compress(raw, mtime=0)[:-4])  # the CRC is there, the length is not
    t = read_trace(path)
    cut = t.metadata["truncated"]
    assert {k: cut[k] for k in ("events_recovered", "bytes_read", "how", "bytes_parsed", "recovered_share")} == {
        "events_recovered": len(ends_of("h100_hf")),
        "bytes_read": len(raw),
        "how": "gzip stream ended early",
        "bytes_parsed": len(raw),
        "recovered_share": 1.0,
    }
    assert cut["gpu_events_lost"] is False
    assert "JSON inside is complete" in t.lacks["truncated"]


def test_multi_member_gzip_still_reads_whole_and_salvages_a_cut_second_member(tmp_path):
    raw = _raw("h100_hf")
    half = len(raw) // 2
    first, second = gzip.compress(raw[:half], mtime=0), gzip.compress(raw[half:], mtime=0)
    whole = tmp_path / "members.json.gz"
    whole.write_bytes(first + b"\0\0" + second)  # zero padding between members is allowed
    t = read_trace(whole)
    assert "truncated" not in t.lacks and t.n_events == len(ends_of("h100_hf"))
    cut = tmp_path / "members_cut.json.gz"
    cut.write_bytes(first + second[: len(second) // 2])
    partial = len(raw[:half]) + len(zlib.decompressobj(31).decompress(second[: len(second) // 2]))
    t = read_trace(cut)
    assert t.metadata["truncated"]["how"] == "gzip stream ended early"
    assert t.metadata["truncated"]["events_recovered"] == complete_before(ends_of("h100_hf"), partial)


def test_cli_summary_of_a_truncated_trace_exits_0_and_says_so(tmp_path):
    raw = _raw("h100_hf")
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: int(len(raw) * 0.9)])
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code == 0, result.output
    assert "truncated while being written" in result.stdout
    assert "Traceback" not in result.output


def test_report_of_a_truncated_trace_says_so_in_provenance_and_html(tmp_path):
    raw = _raw("h100_hf")
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: int(len(raw) * 0.6)])
    out = tmp_path / "r.json"
    r = CliRunner().invoke(main, ["report", str(path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    prov = json.loads(out.read_text())["provenance"]
    assert prov["truncated"]["how"] == "JSON ended early"
    assert prov["truncated"]["events_recovered"] == complete_before(ends_of("h100_hf"), int(len(raw) * 0.6))
    assert "truncated while being written" in prov["lacks"]["truncated"]
    html = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(path), "-o", str(html)]).exit_code == 0
    page = html.read_text()
    assert "truncated while being written" in page and "only the part of the run that was written" in page


def test_complete_trace_is_not_marked_truncated():
    t = read_trace(real_trace_path("h100_hf"))
    assert "truncated" not in t.lacks and "truncated" not in t.metadata


# ---------------------------------------------------------------------------
# Synthetic traces: cuts inside strings full of braces, bare lists, metadata at the end

TRICKY_NAMES = ['a},{"ph": "X"}', "{{{", "]}]}", 'quote \\" }', "back\\\\", "é😀}", "plain"]


def _events(n: int) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": TRICKY_NAMES[i % len(TRICKY_NAMES)] + f" {i}",
            "pid": 1,
            "tid": 1,
            "ts": 1000 + 10 * i,
            "dur": 5,
            "args": {"External id": i, "Input Dims": [[1, 2], []], "s": "}],{"},
        }
        for i in range(n)
    ]


def _doc(events: list[dict], **after) -> bytes:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}], "traceEvents": events, **after}
    return json.dumps(doc, ensure_ascii=False).encode()


def test_every_cut_inside_strings_with_braces_keeps_exactly_the_complete_events(tmp_path):
    raw = _doc(_events(8))
    ends = event_ends(raw)
    path = tmp_path / "braces.json"
    # Every byte from the end of the first event on: in names, in args' strings, between events.
    for cut in range(ends[0], len(raw) - 1):
        path.write_bytes(raw[:cut])
        t = read_trace(path)
        assert t.metadata["truncated"]["events_recovered"] == complete_before(ends, cut), cut
        assert len(t.cpu_ops) == complete_before(ends, cut)


def test_cut_just_after_a_brace_inside_a_string(tmp_path):
    raw = _doc(_events(20))
    ends = event_ends(raw)
    # 'a},' inside a name looks exactly like the end of an event followed by the next one.
    spots = [i + len(b"a},") for i in range(ends[0], len(raw)) if raw.startswith(b"a},", i)]
    assert len(spots) == 2  # events 7 and 14
    path = tmp_path / "brace.json"
    for cut in spots:
        path.write_bytes(raw[:cut])
        assert read_trace(path).metadata["truncated"]["events_recovered"] == complete_before(ends, cut)


def test_bare_list_trace_is_salvaged(tmp_path):
    raw = json.dumps(_events(12), indent=1).encode()
    ends = event_ends(raw)
    cut = (ends[6] + ends[7]) // 2
    path = tmp_path / "bare.json"
    path.write_bytes(raw[:cut])
    t = read_trace(path)
    assert t.metadata["truncated"]["events_recovered"] == 7 == complete_before(ends, cut)
    assert len(t.cpu_ops) == 7


def test_cut_in_metadata_after_the_events_keeps_all_events(tmp_path):
    raw = _doc(_events(8), distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8}, traceName="x")
    path = tmp_path / "tail.json"
    path.write_bytes(raw[: raw.index(b'"world_size"')])
    t = read_trace(path)
    assert t.metadata["truncated"]["events_recovered"] == 8
    assert t.distributed is None or t.distributed.get("source")  # lost with the tail, like traceName
    assert "traceName" not in t.metadata


def test_kernel_whose_launch_is_lost_has_no_link(tmp_path):
    # The kernel is written before its launch call, and the cut falls between them.
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 50,
            "dur": 10,
            "args": {"device": 0, "stream": 7, "correlation": 9, "External id": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 5,
            "args": {"correlation": 9, "External id": 1},
        },
    ]
    raw = _doc(events)
    cut = event_ends(raw)[1] + 10
    path = tmp_path / "lost_launch.json"
    path.write_bytes(raw[:cut])
    t = read_trace(path)
    assert len(t.kernels) == 1 and len(t.runtime) == 0
    assert t.kernels["launch"].iat[0] == -1 and t.kernels["op"].iat[0] == -1
    assert "launch_links" in t.lacks and "truncated" in t.lacks
    analyze(t)  # a one-kernel trace has no phases to find, but the analysis must not trip on the gap


def test_cut_before_any_complete_event_is_one_clear_sentence(tmp_path):
    raw = _doc(_events(3))
    path = tmp_path / "early.json"
    path.write_bytes(raw[: event_ends(raw)[0] - 1])
    with pytest.raises(TracekitError) as info:
        read_trace(path)
    msg = info.value.message
    assert str(path) in msg and "truncated" in msg and "\n" not in msg
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("tracekit: error: ") and len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.output


def test_cut_before_any_profiler_event_is_refused(tmp_path):
    # Complete events survive, but only metadata ("M") ones: nothing to build tables from.
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}] + _events(2)
    raw = _doc(events)
    path = tmp_path / "meta_only.json"
    path.write_bytes(raw[: event_ends(raw)[1] - 3])
    with pytest.raises(TracekitError, match="truncated before its first profiler event"):
        read_trace(path)


# ---------------------------------------------------------------------------
# Hostile sizes


def _gzip_bomb(path, mb: int = 200):
    """A small gzip file of ``mb`` MB of zeros, written without holding them in memory."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    with open(path, "wb") as f:
        f.write(comp.compress(b'{"traceEvents": ['))
        for _ in range(mb):
            f.write(comp.compress(zeros))
        f.write(comp.flush())
    return path


def test_gzip_bomb_is_refused_quickly_with_the_limit_named(tmp_path):
    path = _gzip_bomb(tmp_path / "bomb.json.gz")
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    with pytest.raises(TracekitError) as info:
        read_trace(path, max_bytes=10_000_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    msg = info.value.message
    assert str(path) in msg and "more than 0.01 GB" in msg and "TRACEKIT_MAX_DECOMPRESSED_GB" in msg
    assert "tracekit split" in msg  # what to do with a trace larger than memory
    assert "\n" not in msg
    assert peak < 100e6  # it stopped near the limit, not after inflating 200 MB


def test_size_limit_from_the_environment(tmp_path, monkeypatch):
    path = _gzip_bomb(tmp_path / "bomb.json.gz", mb=50)
    monkeypatch.setenv("TRACEKIT_MAX_DECOMPRESSED_GB", "0.02")
    with pytest.raises(TracekitError, match=r"more than 0\.02 GB"):
        read_trace(path)
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code == 2 and "0.02 GB" in result.stderr
    # The explicit parameter wins over the environment: a real trace under its limit reads.
    monkeypatch.setenv("TRACEKIT_MAX_DECOMPRESSED_GB", "0.000001")
    assert read_trace(real_trace_path("b300_moe"), max_bytes=10**9).n_events > 0


@pytest.mark.parametrize("value", ["lots", "0", "-1", "nan", "inf"])
def test_bad_size_limit_in_the_environment_is_one_sentence(tmp_path, monkeypatch, value):
    monkeypatch.setenv("TRACEKIT_MAX_DECOMPRESSED_GB", value)
    with pytest.raises(TracekitError, match="TRACEKIT_MAX_DECOMPRESSED_GB must be a positive number of GB"):
        read_trace(real_trace_path("b300_moe"))


@pytest.mark.parametrize("value", [0, -5, "10", True])
def test_bad_max_bytes_is_one_sentence(value):
    with pytest.raises(TracekitError, match="max_bytes must be a positive number"):
        read_trace(real_trace_path("b300_moe"), max_bytes=value)


def test_zstd_bomb_is_refused(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    comp = zstandard.ZstdCompressor().compressobj()
    zeros = bytes(1 << 20)
    data = b"".join([comp.compress(b'{"traceEvents": [')] + [comp.compress(zeros) for _ in range(200)] + [comp.flush()])
    path = tmp_path / "bomb.json.zst"
    path.write_bytes(data)
    with pytest.raises(TracekitError, match=r"decompresses to more than 0\.01 GB"):
        read_trace(path, max_bytes=10_000_000)


def test_trace_under_the_limit_reads_and_one_byte_less_is_refused(tmp_path):
    raw_len = len(_raw("b300_moe"))
    path = real_trace_path("b300_moe")
    assert read_trace(path, max_bytes=raw_len).n_bytes == raw_len
    with pytest.raises(TracekitError, match="decompresses to more than"):
        read_trace(path, max_bytes=raw_len - 1)
