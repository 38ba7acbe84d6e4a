"""Bad input gets one sentence naming the file and the problem, and exit status 2: never a traceback.

Also: a CPU-only trace is valid input, and mutated real traces (hypothesis) either
load or raise ``TracekitError``, nothing else.
"""

from __future__ import annotations

import copy
import gzip
import json
import re

import pytest
from click.testing import CliRunner
from conftest import REAL, SHARED_TRACES, real_trace_path
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tracekit import Trace, TracekitError, read_trace
from tracekit.cli import main


def _raw(key: str) -> bytes:
    with gzip.open(real_trace_path(key), "rb") as f:
        return f.read()


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


# name -> (build(tmp_path) -> path, regex the message must match besides naming the path)
# Truncated files are salvaged up to their last complete event (tests/test_reader_truncated.py);
# the truncated cases here are cut before any complete event, so nothing can be recovered.
def _before_first_event(key: str) -> bytes:
    """The trace's JSON cut a few bytes into its first event."""
    raw = _raw(key)
    first = raw.index(b"{", raw.index(b'"traceEvents"'))
    return raw[: first + 20]


def _truncated_gzip(tmp):
    # The deflate data is all there, but the stream stops before the gzip trailer.
    gz = gzip.compress(_before_first_event("b300_moe"), mtime=0)
    return _write(tmp / "cut.json.gz", gz[:-8])


def _truncated_zstd(tmp):
    zstandard = pytest.importorskip("zstandard")
    z = zstandard.ZstdCompressor().compress(_before_first_event("b300_moe"))
    return _write(tmp / "cut.json.zst", z[: len(z) // 2])


def _corrupt_gzip(tmp):
    # A flipped byte mid-stream: a complete but damaged file, refused rather than salvaged.
    gz = bytearray(real_trace_path("b300_moe").read_bytes())
    gz[len(gz) // 2] ^= 0xFF
    return _write(tmp / "corrupt.json.gz", bytes(gz))


def _gzip_then_garbage(tmp):
    gz = real_trace_path("b300_moe").read_bytes()
    return _write(tmp / "garbage.json.gz", gz + b"this is not gzip")


def _corrupt_json_mid_file(tmp):
    # Broken in the middle, complete at the end: not a truncation, so not salvaged.
    raw = _raw("b300_moe")
    mid = raw.index(b"},", len(raw) // 2)
    return _write(tmp / "corrupt.json", raw[:mid] + b"};" + raw[mid + 2 :])


def _no_traces_dir(tmp):
    d = tmp / "empty_run"
    d.mkdir()
    (d / "notes.txt").write_text("no traces here")
    (d / "rank0.json.tracekit.json").write_text("{}")  # a sidecar alone is not a trace
    return d


def _huge_timestamp(tmp):
    doc = json.loads(_raw("b300_moe"))
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["ts"] = 1e300
    return _write(tmp / "huge_ts.json", json.dumps(doc).encode())


def _huge_duration(tmp):
    doc = json.loads(_raw("b300_moe"))
    next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")["dur"] = -1e300
    return _write(tmp / "huge_dur.json", json.dumps(doc).encode())


CASES = {
    # Numbers no clock can hold would become garbage int64 nanoseconds; they are refused instead.
    "timestamp_out_of_range": (_huge_timestamp, r"malformed events"),
    "duration_out_of_range": (_huge_duration, r"malformed events"),
    "not_json": (lambda tmp: _write(tmp / "t.json", b"this is a log file, not JSON\n"), r"not JSON"),
    "binary": (lambda tmp: _write(tmp / "t.json", bytes(range(256)) * 4), r"not JSON"),
    "gzip_of_text": (lambda tmp: _write(tmp / "t.json.gz", gzip.compress(b"hello")), r"not JSON"),
    "truncated_gzip_before_any_event": (_truncated_gzip, r"truncated"),
    "truncated_zstd_before_any_event": (_truncated_zstd, r"truncated"),
    "truncated_json_before_any_event": (
        lambda tmp: _write(tmp / "t.json", _before_first_event("b300_moe")),
        r"before any complete event .*truncated",
    ),
    "truncated_json_inside_metadata": (
        lambda tmp: _write(tmp / "t.json", _raw("b300_moe")[:100]),
        r"truncated",
    ),
    "corrupt_gzip": (_corrupt_gzip, r"corrupt gzip"),
    "gzip_then_garbage": (_gzip_then_garbage, r"corrupt gzip"),
    "corrupt_json_mid_file": (_corrupt_json_mid_file, r"not valid JSON"),
    "invalid_utf8_json": (
        lambda tmp: _write(
            tmp / "t.json", b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "\xff\xfe", "ts": 1, "dur": 1}]}'
        ),
        r"not valid JSON",
    ),
    "empty": (lambda tmp: _write(tmp / "t.json", b""), r"empty"),
    "whitespace": (lambda tmp: _write(tmp / "t.json", b"  \n\t "), r"not JSON"),
    "json_not_a_trace": (lambda tmp: _write(tmp / "config.json", b'{"model": "qwen", "batch": 8}'), r"not a .*trace"),
    "json_list_not_events": (lambda tmp: _write(tmp / "t.json", b"[1, 2, 3]"), r"not a valid trace"),
    "trace_events_not_a_list": (lambda tmp: _write(tmp / "t.json", b'{"traceEvents": {"a": 1}}'), r"not a valid trace"),
    "no_events": (
        lambda tmp: _write(tmp / "t.json", b'{"traceEvents": [], "schemaVersion": 1}'),
        r"no profiler events",
    ),
    "only_metadata_events": (
        lambda tmp: _write(
            tmp / "t.json",
            b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]}',
        ),
        r"no profiler events",
    ),
    "directory_without_traces": (_no_traces_dir, r"directory with no trace files"),
    "missing_file": (lambda tmp: tmp / "does_not_exist.json.gz", r"no such file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_raises_tracekit_error_naming_file_and_problem(tmp_path, case):
    build, problem = CASES[case]
    path = build(tmp_path)
    with pytest.raises(TracekitError) as info:
        read_trace(path)
    msg = info.value.message
    assert str(path) in msg
    assert re.search(problem, msg), msg
    assert "\n" not in msg


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_via_cli_exits_2_with_one_line(tmp_path, case):
    build, problem = CASES[case]
    path = build(tmp_path)
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not an uncaught error
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tracekit: error: ")
    assert str(path) in lines[0] and re.search(problem, lines[0])
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    assert result.stdout == ""


# ---------------------------------------------------------------------------
# A CPU-only trace is valid

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "gpu_user_annotation", "ac2g"}


def _cpu_only(tmp_path):
    doc = json.loads(_raw("b300_moe"))
    doc.pop("deviceProperties")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if str(e.get("cat")).lower() not in GPU_CATS]
    n_ops = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    return _write(tmp_path / "cpu_only.json", json.dumps(doc).encode()), n_ops


def test_cpu_only_trace_loads_and_says_it_has_no_gpu(tmp_path):
    path, n_ops = _cpu_only(tmp_path)
    t = read_trace(path)
    assert len(t.kernels) == 0 and not t.has_gpu
    assert len(t.runtime) == 0
    assert len(t.cpu_ops) == n_ops > 0
    assert "gpu" in t.lacks
    assert t.device_name() is None
    # The empty tables still have the columns downstream code relies on.
    for col in ("launch", "op", "graph", "kind", "start_ns"):
        assert col in t.kernels


def test_cpu_only_trace_via_cli(tmp_path):
    path, _ = _cpu_only(tmp_path)
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code == 0, result.output
    assert "0 kernels" in result.stdout
    assert "no GPU events" in result.stdout


# ---------------------------------------------------------------------------
# Property: mutated real traces load or raise TracekitError, nothing else

FUZZ_SOURCES = ["a100_triton", "b300_moe", "mi250_toy"]


def _sources():
    out = {}
    for key in FUZZ_SOURCES:
        path = SHARED_TRACES / REAL[key]
        if path.exists():
            raw = gzip.decompress(path.read_bytes())
            out[key] = (raw, json.loads(raw), path.read_bytes())
    return out


_SOURCES = _sources()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
TOKENS = [b'"', b"{", b"}", b"[", b"]", b",", b":", b"-", b"1e308", b"null", b"\xff", b'"x"', b"\\", b"0"]
TOP_KEYS = ["traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion"]


@st.composite
def mutated_trace(draw) -> bytes:
    key = draw(st.sampled_from(sorted(_SOURCES)))
    raw, doc, gz = _SOURCES[key]
    how = draw(st.sampled_from(["truncate", "flip", "delete", "insert", "replace", "drop", "top", "gzip"]))
    if how == "truncate":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if how == "gzip":
        data = bytearray(gz)
        if draw(st.booleans()):
            return bytes(data[: draw(st.integers(0, len(data) - 1))])
        i = draw(st.integers(0, len(data) - 1))
        data[i] ^= draw(st.integers(1, 255))
        return bytes(data)
    if how in ("flip", "delete", "insert"):
        data = bytearray(raw)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(data) - 1))
            if how == "flip":
                data[i] ^= draw(st.integers(1, 255))
            elif how == "delete":
                del data[i : i + draw(st.integers(1, 40))]
            else:
                ins = draw(st.sampled_from(TOKENS) | st.binary(min_size=1, max_size=4))
                data[i:i] = ins
        return bytes(data)
    doc = copy.deepcopy(doc)
    events = doc["traceEvents"]
    if how == "top":
        k = draw(st.sampled_from(TOP_KEYS))
        if draw(st.booleans()):
            doc.pop(k, None)
        else:
            doc[k] = draw(json_values)
        return json.dumps(doc).encode()
    for _ in range(draw(st.integers(1, 6))):
        e = events[draw(st.integers(0, len(events) - 1))]
        target = e
        if isinstance(e.get("args"), dict) and e["args"] and draw(st.booleans()):
            target = e["args"]
        if not target:
            continue
        field = draw(st.sampled_from(sorted(target)))
        if how == "drop":
            del target[field]
        else:
            target[field] = draw(json_values)
    return json.dumps(doc).encode()


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    if not _SOURCES:
        pytest.skip(f"{SHARED_TRACES} is absent: the fuzzing starts from real traces")
    return tmp_path_factory.mktemp("fuzz")


# A numpy overflow warning means garbage numbers were loaded silently: that fails too.
@pytest.mark.filterwarnings("error::RuntimeWarning")
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=mutated_trace())
def test_mutated_traces_load_or_raise_tracekit_error(fuzz_dir, data):
    path = fuzz_dir / "mutated.json"
    path.write_bytes(data)
    try:
        t = read_trace(path)
    except TracekitError as e:
        assert str(path) in e.message
        event("raised TracekitError")
        return
    event("loaded")
    assert isinstance(t, Trace)
    # What loads is usable: the summary (which touches every table) works too.
    from tracekit.trace.summary import summarize

    assert isinstance(summarize(t), str)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=mutated_trace())
def test_mutated_traces_via_cli_never_show_a_traceback(fuzz_dir, data):
    path = fuzz_dir / "mutated_cli.json"
    path.write_bytes(data)
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    if result.exit_code == 2:
        assert isinstance(result.exception, SystemExit)
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("tracekit: error: ")
    else:
        assert result.exception is None
