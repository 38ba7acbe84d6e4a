"""Tests written for the survivors of the mutation campaign's samples of tracekit/trace (issue 51,
part 5): each names the mutant it kills; the expectations come from the trace as written (a
hand-built Kineto document), not from the reader."""

from __future__ import annotations

from pathlib import Path

from kineto import Doc

from tracekit import read_trace


def _two_kernels(tmp_path: Path) -> Path:
    d = Doc()
    for ts in (10, 50):
        ext = d.op("aten::mm", ts, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
        d.kernel("ampere_sgemm_64x64_nn", ts + 2, ts + 10, 5, ext=ext, grid=(4, 2, 1))
    return d.write(tmp_path / "k.json")


def test_a_launch_grid_that_is_not_utf8_reads_as_unknown_not_a_crash(tmp_path):
    """Mutant: trace/columns.py _launch_dims ``except ValueError`` -> an exception nothing raises: a
    kernel whose "grid" is a string holding a byte that is not UTF-8 (json.loads raises
    UnicodeDecodeError, a ValueError) crashed the reader. The grid reads as unknown (-1), the
    other kernel's [4, 2, 1] as written."""
    path = _two_kernels(tmp_path)
    raw = path.read_bytes()
    assert raw.count(b'"grid": [4, 2, 1]') == 2
    path.write_bytes(raw.replace(b'"grid": [4, 2, 1]', b'"grid": "\xff"', 1))
    k = read_trace(str(path)).kernels.sort_values("start_ns")
    assert k[["grid_x", "grid_y", "grid_z"]].values.tolist() == [[-1, -1, -1], [4, 2, 1]]


def test_a_kernel_with_no_external_id_reads_as_absent(tmp_path):
    """Mutant: trace/decode.py Args ``external_id_lc = -1`` -> ``not 1`` (False): a kernel carrying
    neither "External id" nor PyTorch 1.9's "external id" took its id from the lower-case field's
    default, which then read as id 0 instead of -1 ("absent", as decode.py says). One kernel
    written with an External id (1001), one without."""
    d = Doc()
    ext = d.op("aten::mm", 10, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
    d.kernel("ampere_sgemm_64x64_nn", 12, 20, 5, ext=ext)
    d.kernel("ampere_sgemm_64x64_nn", 52, 60, 5)
    k = read_trace(str(d.write(tmp_path / "k.json"))).kernels.sort_values("start_ns")
    assert k["external_id"].tolist() == [ext, -1]


def test_a_kernel_with_no_correlation_reads_as_absent(tmp_path):
    """Mutant: trace/decode.py Args ``correlation = -1`` -> another number: a kernel event written
    without a "correlation" arg read with that number (0 would match a launch numbered 0) instead
    of -1, "absent" as decode.py says. Two kernels built by hand, the second's correlation removed."""
    d = Doc()
    for ts in (10, 50):
        ext = d.op("aten::mm", ts, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
        c = d.kernel("ampere_sgemm_64x64_nn", ts + 2, ts + 10, 5, ext=ext)
    for e in d.events:
        if e.get("cat") == "kernel" and e["args"]["correlation"] == c:
            del e["args"]["correlation"]
    k = read_trace(str(d.write(tmp_path / "k.json"))).kernels.sort_values("start_ns")
    assert k["correlation"].tolist() == [c - 1, -1]
    # trace/links.py link: a kernel with no launch has no op either, -1 (mutant: ``-1`` -> ``-2``).
    assert k["launch"].tolist()[1] == -1 and k["op"].tolist()[1] == -1
    assert k["op"].tolist()[0] >= 0


def test_a_kernel_with_neither_device_nor_pid_has_no_device(tmp_path):
    """Mutant: trace/decode.py Event ``pid = -1`` -> ``+1``: an old-style kernel takes its device
    from pid when its args name none; one written with neither read as device 1 (a GPU the trace
    never names) instead of -1. Two kernels by hand: device 0, and one with "device" and "pid"
    removed."""
    d = Doc()
    for ts in (10, 50):
        ext = d.op("aten::mm", ts, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
        c = d.kernel("ampere_sgemm_64x64_nn", ts + 2, ts + 10, 5, ext=ext)
    for e in d.events:
        if e.get("cat") == "kernel" and e["args"]["correlation"] == c:
            del e["args"]["device"], e["pid"]
    k = read_trace(str(d.write(tmp_path / "k.json"))).kernels.sort_values("start_ns")
    assert k["device"].tolist() == [0, -1]


def test_the_default_size_limit_is_half_the_physical_memory(monkeypatch):
    """Mutant: trace/limits.py _default_limit ``pages * page_size // 2`` -> ``| 2``: the guard
    against compression bombs allowed all of memory (and a bit) instead of half of it, as the
    module's docstring states. Half of os.sysconf's page size x physical pages, by hand."""
    import os

    from tracekit.trace.limits import MAX_SIZE_ENV, max_decompressed_bytes

    monkeypatch.delenv(MAX_SIZE_ENV, raising=False)
    assert max_decompressed_bytes() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def test_a_cpu_trace_has_no_gpu_evidence():
    """Mutant: trace/reader.py gpu_evidence ``(ann["side"] == "gpu").any()`` -> ``!= "gpu"``: a
    trace whose annotations are all CPU-side was said to hold "0 GPU-side annotations". The sample
    trace is a CPU run (no kernel, runtime call or deviceProperties; its 18 annotations are CPU
    side, json.loads of the file says): no evidence of a GPU at all."""
    import gzip
    import json

    from conftest import SAMPLE_TRACES

    from tracekit.trace.reader import gpu_evidence

    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert "kernel" not in cats and "cuda_runtime" not in cats and not doc.get("deviceProperties")
    assert gpu_evidence(read_trace(str(path))) == []


def test_a_cut_files_summary_gives_the_recovered_share_in_percent():
    """Mutant: trace/summary.py _cut_text ``share * 100`` -> ``share + 100``: the share of a cut
    file's text recovered was printed as 100.4% instead of 40.0%. By hand: 0.4 is 40.0%, 0.9996
    ">99.9", an unknown share "?"."""
    from tracekit.trace.summary import _cut_text

    cut = {"events_recovered": 1234, "bytes_parsed": 10, "bytes_read": 20, "how": "gzip", "recovered_share": 0.4}
    text = _cut_text(cut)
    assert "1,234 complete events recovered, 40.0% of the decompressed text" in text
    assert ">99.9% of the" in _cut_text({**cut, "recovered_share": 0.9996})
    assert "?% of the" in _cut_text({**cut, "recovered_share": None})


def test_split_says_how_many_windows_it_writes(tmp_path):
    """Mutant: trace/windows.py _split ``len(edges) + 1`` -> ``% 1`` in the progress stage's name:
    "writing 0 windows" for any split. The stage must name as many windows as the files split
    writes (counted in its output folder)."""
    from conftest import real_trace_path

    from tracekit.trace import windows

    seen: list = []
    out = tmp_path / "w"
    paths = windows.split(
        str(real_trace_path("gb10_vllm")), str(out), max_events=2000, progress=lambda *a: seen.append(a)
    )
    n = len([p for p in out.iterdir() if not p.name.startswith(".")])
    assert n == len(paths) > 1
    assert any(stage == f"writing {n} windows" for stage, _, _ in seen)


# --- seed 54: --packages tracekit/trace --sample 40 --seed 54 --lists-only ----------------------


def test_an_annotation_with_no_stream_reads_as_absent(tmp_path):
    """Mutant: trace/decode.py Args ``stream = -1`` -> ``-2``: a CPU-side annotation (a
    record_function range: Kineto writes it without "stream") read with stream -2 instead of -1,
    "absent" as decode.py says. One op, one kernel on stream 7 and one annotation by hand."""
    d = Doc()
    ext = d.op("aten::mm", 10, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
    d.kernel("ampere_sgemm_64x64_nn", 12, 20, 5, ext=ext)
    d.annotation("forward", 5, 40)
    t = read_trace(str(d.write(tmp_path / "a.json")))
    assert t.annotations["stream"].tolist() == [-1]
    assert t.annotations["device"].tolist() == [-1]
    assert t.kernels["stream"].tolist() == [7]


def test_a_cut_trace_whose_text_ends_in_a_backslash_keeps_its_complete_events(tmp_path):
    """Mutant: trace/decode.py string_quotes ``np.diff(slashes) != 1`` -> ``!= 0``: each backslash
    counted as a run of its own, so the closing quote of a string ending in an escaped backslash
    ("C:\\\\dir\\\\" in the JSON text) was taken for an escaped one and every string after it read
    inside out. The file is cut in its third event: the two complete ones are recovered, names as
    written (the second's "}" is text, not the end of an event)."""
    import json

    evs = [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1}
        for name, ts in (("C:\\dir\\", 1), ("b}", 3), ("c", 5))
    ]
    text = json.dumps({"traceEvents": evs})
    assert text.count('\\\\"') == 1  # the escaped backslash right before a closing quote
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index('"c"')])
    t = read_trace(str(path))
    assert t.metadata["truncated"]["events_recovered"] == 2
    assert t.cpu_ops["name"].astype(str).tolist() == ["C:\\dir\\", "b}"]


def test_kernels_in_a_trace_without_runtime_calls_have_no_launch(tmp_path):
    """Mutant: trace/links.py _lookup ``np.full(len(wanted), -1)`` -> ``+1``: with no runtime call
    in the trace (only the GPU side kept), every kernel was linked to launch row 1, a row that does
    not exist, instead of -1. Two kernels by hand, their cudaLaunchKernel events removed."""
    d = Doc()
    for ts in (10, 50):
        ext = d.op("aten::mm", ts, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
        d.kernel("ampere_sgemm_64x64_nn", ts + 2, ts + 10, 5, ext=ext)
    d.events = [e for e in d.events if e.get("cat") != "cuda_runtime"]
    t = read_trace(str(d.write(tmp_path / "k.json")))
    assert len(t.runtime) == 0 and len(t.kernels) == 2
    assert t.kernels["launch"].tolist() == [-1, -1]
    assert t.kernels["op"].tolist() == [-1, -1]


def test_a_launch_goes_to_the_op_its_external_id_names_when_that_op_encloses_it(tmp_path):
    """Mutant: trace/links.py _runtime_to_op ``by_ext >= 0`` -> ``== 0``: only an External id naming
    op row 0 was taken; any other fell back to the innermost op enclosing the call in time. The
    links.py docstring: the op the External id names wins when it encloses the call on its thread.
    By hand: aten::zeros (row 0), then aten::linear (10-50 us) holding aten::addmm (12-42 us); the
    launch at 20 us carries linear's External id, so its kernel's op is aten::linear."""
    d = Doc()
    d.op("aten::zeros", 0, 5)
    outer = d.op("aten::linear", 10, 40)
    d.op("aten::addmm", 12, 30, dims=[[64], [64, 64], [64, 64]], types=["float", "float", "float"])
    d.kernel("ampere_sgemm_64x64_nn", 20, 30, 5, ext=outer)
    t = read_trace(str(d.write(tmp_path / "k.json")))
    ops = t.cpu_ops
    assert ops["name"].astype(str).tolist()[0] == "aten::zeros"
    op = int(t.kernels["op"].iloc[0])
    assert str(ops["name"].iloc[op]) == "aten::linear" and int(ops["external_id"].iloc[op]) == outer


def test_the_summary_names_the_other_devices_only_when_there_are_some(tmp_path):
    """Mutant: trace/summary.py summarize ``len(trace.devices) - 1`` -> ``| 1``: a trace listing one
    GPU was said to list "1 other device it ran no kernels on", and one listing two said 3. By hand:
    one device in deviceProperties, no such clause; a second one added (id 1), one other device."""
    import json

    from tracekit.trace.summary import summarize

    d = Doc()
    ext = d.op("aten::mm", 10, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
    d.kernel("ampere_sgemm_64x64_nn", 12, 20, 5, ext=ext)
    text = summarize(read_trace(str(d.write(tmp_path / "one.json"))))
    assert "device     NVIDIA A100-SXM4-80GB\n" in text and "other device" not in text
    doc = d.document()
    doc["deviceProperties"].append({**doc["deviceProperties"][0], "id": 1})
    (tmp_path / "two.json").write_text(json.dumps(doc))
    text = summarize(read_trace(str(tmp_path / "two.json")))
    assert "device     NVIDIA A100-SXM4-80GB (the trace lists 1 other device it ran no kernels on)\n" in text


def test_given_steps_cut_windows_before_the_step_each_edge_opens(tmp_path):
    """Mutant: trace/window_edges.py find_edges ``len(first) - 1`` -> ``len(first) & 1``: the step
    each edge opens (whose ops between the cut and its start go to both windows) was clamped to
    step 0 (an even count of steps) or 1, so the range edges all named the first step. By hand:
    four given steps, step i starting at 1000 i + 100 us with its first launch at 1000 i + 150 and
    its last ending at 1000 i + 800; 100 CPU events from each first launch on; windows of 100
    events cut before steps 1, 2, 3, whose starts are 1100, 2100 and 3100 us."""
    import numpy as np

    from tracekit.trace.window_edges import CUT_INFERRED, find_edges
    from tracekit.trace.window_survey import Survey

    s = Survey(str(tmp_path))
    try:
        ts = np.concatenate([1000.0 * i + 150 + 7.0 * np.arange(100) for i in range(4)])
        s.write("ts", ts)
        s.n, s.lo, s.hi = len(ts), float(ts.min()), float(ts.max())
        s.given = np.array([[1000.0 * i + 100, 1000.0 * i + 150, 1000.0 * i + 800] for i in range(4)])
        edges = find_edges(s, 100)
    finally:
        s.close()
    assert s.cut == CUT_INFERRED
    assert len(edges) == 3
    for i, e in enumerate(edges.tolist(), start=1):
        assert 1000 * (i - 1) + 800 < e <= 1000 * i + 150  # after step i-1's last launch, by step i's first
    assert s.range_edges.tolist() == [1100.0, 2100.0, 3100.0]


# --- seed 55 (the sample's survivors in tracekit/trace, coverage-map mode) ------------------------


def test_a_growing_column_at_least_doubles_its_capacity_each_time_it_grows():
    """Mutant: trace/columns.py _Growing.extend ``2 * len(self.data)`` -> ``2 | len(self.data)``:
    the capacity grew to 4098 and then to exactly what each chunk needed, so every later chunk
    copied the whole column again (appends quadratic in the number of chunks). The class's
    docstring: its capacity doubles as it fills. 100 chunks of 100 values, one by one: each new
    buffer is at least twice the last, and the column holds 0..9999 in order."""
    import numpy as np

    from tracekit.trace.columns import _Growing

    col = _Growing(np.int64)
    sizes = [len(col.data)]
    for i in range(100):
        col.extend(np.arange(100 * i, 100 * (i + 1), dtype=np.int64))
        if len(col.data) != sizes[-1]:
            sizes.append(len(col.data))
    assert len(sizes) > 1
    assert all(new >= 2 * old for old, new in zip(sizes, sizes[1:])), sizes
    assert col.array().tolist() == list(range(10_000))


def test_a_document_cut_in_a_key_after_its_events_closes_with_every_event():
    """Mutant: trace/decode.py close_truncated ``b"" if bare else b"}"`` -> ``if not bare``: a
    document whose events' array had closed and whose cut fell in a later key (Kineto writes
    traceName and baseTimeNanoseconds after the events) was given no closing brace, so the
    whole-document path could not decode what it had closed. The docstring: every event is kept,
    the keys before traceEvents are kept and those after it lost. By hand: two events, then
    ``"traceName": "ru`` cut short."""
    import json

    from tracekit.trace import decode as dec

    events = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": 1}
        for n, ts in (("a", 1), ("b", 3))
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "run"})
    cut = text[: text.index('run"')] + "ru"
    closed = dec.close_truncated("cut.json", cut.encode())
    assert json.loads(closed) == {"schemaVersion": 1, "traceEvents": events}
    decoded, meta = dec.decode("cut.json", closed)
    assert [e.name for e in decoded] == ["a", "b"] and meta == {"schemaVersion": 1}


def test_a_reused_correlation_id_links_each_kernel_to_the_latest_call_before_it(tmp_path):
    """Mutants: trace/links.py _launch_of ``ids[o][np.maximum(last, 0)] == ids[o]`` -> ``>`` (never
    true in the sort by id, so every kernel fell back to the first call with its id) and ``last >=
    0`` -> ``last <= 0`` (only the call sorted first counted): in a trace stitched from two sessions,
    which reuses correlation ids, the second session's kernel was linked to the first session's
    launch, and so to its op. The _launch_of docstring: a kernel belongs to the latest call with its
    id issued before it started. By hand: aten::mm (10-40 us) launches a kernel at 12 us, aten::add
    (100-130 us) one at 102 us, both under correlation 5001 (the second's id rewritten to the
    first's); the first kernel runs at 20 us, the second at 110 us."""
    import json

    d = Doc()
    mm = d.op("aten::mm", 10, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
    first = d.kernel("ampere_sgemm_64x64_nn", 12, 20, 5, ext=mm)
    add = d.op("aten::add", 100, 30, dims=[[64], [64]], types=["float", "float"])
    second = d.kernel("vectorized_elementwise_kernel", 102, 110, 5, ext=add)
    for e in d.events:
        if e.get("args", {}).get("correlation") == second:
            e["args"]["correlation"] = first
        if e.get("cat") == "ac2g" and e["id"] == second:
            e["id"] = first
    assert json.dumps(d.events).count(f'"correlation": {first}') == 4
    t = read_trace(str(d.write(tmp_path / "k.json")))
    k = t.kernels.sort_values("start_ns")
    assert k["name"].astype(str).tolist() == ["ampere_sgemm_64x64_nn", "vectorized_elementwise_kernel"]
    launched_at = t.runtime["start_ns"].to_numpy()[k["launch"].to_numpy()]
    assert (launched_at - launched_at[0]).tolist() == [0, 90_000]
    assert [str(t.cpu_ops["name"].iloc[i]) for i in k["op"]] == ["aten::mm", "aten::add"]


def test_events_written_with_the_comma_before_each_event_are_cut_as_the_slices_arrive():
    """Mutant: trace/stream.py _candidate the second ``while j > 0 and buf[j] in _WS`` -> ``j <= 0``:
    the whitespace between an event's closing brace and the comma after it was no longer skipped,
    so a document written with each comma at the start of the next line (``}`` newline ``,{``)
    offered no cut at all: the stream held the whole events' array and decoded it in one chunk
    at the end. The module's docstring: events are separated by ``}`` ``,`` ``{`` with whitespace,
    and the array is cut after its last complete event as the slices arrive, never decoded whole.
    By hand: 40 events of about 95 bytes in 200-byte slices; chunks come before the last slice is
    read, none holds more than the events of a few slices, and together they are the 40 events
    in order, with the keys around the array as written."""
    import json

    from tracekit.trace.stream import EventChunks

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(40)
    ]
    text = '{"schemaVersion": 1, "traceEvents": [\n' + "\n,".join(map(json.dumps, events)) + '\n], "traceName": "run"}'
    data = text.encode()
    slices = [data[i : i + 200] for i in range(0, len(data), 200)]
    read = []

    def arriving():
        for s in slices:
            read.append(s)
            yield s

    chunks = EventChunks("comma-first.json", arriving())
    got = [(len(read), [e.name for e in evs]) for evs, _ in chunks]
    assert got[0][0] < len(slices), "no chunk before the whole document was read"
    assert max(len(names) for _, names in got) <= 6, [len(names) for _, names in got]
    assert [n for _, names in got for n in names] == [e["name"] for e in events]
    assert chunks.meta == {"schemaVersion": 1, "traceName": "run"} and not chunks.json_cut


# --- seed 56 (the sample's survivors in tracekit/trace, coverage-map mode) ------------------------


def test_gpu_evidence_counts_the_gpu_side_annotations_only(tmp_path):
    """Mutant: trace/reader.py gpu_evidence ``(ann["side"] == "gpu").sum()`` -> ``<= "gpu"``: the reader
    keeps side as an unordered categorical, which only compares for equality, so gpu_evidence raised
    TypeError on every trace with a GPU-side annotation (on plain strings it would have counted the
    CPU-side ones too: "cpu" sorts before "gpu"). The trace as
    written: three CPU-side ranges (cat user_annotation) and two GPU-side ones (gpu_user_annotation),
    with no kernel, runtime call or deviceProperties, so the annotations are the only evidence."""
    from tracekit.trace.reader import gpu_evidence

    d = Doc(device=None)
    for i, ts in enumerate((0.0, 100.0, 200.0)):
        d.annotation(f"ProfilerStep#{i}", ts, 90.0)
    for ts in (10.0, 110.0):
        d.events.append(
            {"ph": "X", "cat": "gpu_user_annotation", "name": "step", "pid": 0, "tid": 7, "ts": ts, "dur": 50.0}
        )
    t = read_trace(str(d.write(tmp_path / "a.json")))
    assert gpu_evidence(t) == ["2 GPU-side annotations"]


def test_a_kernel_whose_launch_has_correlation_id_0_goes_with_its_launch(tmp_path):
    """Mutant: trace/window_survey.py run_survey ``c.id >= 0`` -> ``c.id != 0``: a launch call with
    correlation id 0 (a valid id: Columns sets -1 only where an event has no integer id) was left
    out of the launches split routes kernels by, so its kernel went to the window of its own GPU
    time, away from its launch, and read there with no launch or op (and calls with no id were
    let in). windows.split's rule: kernels go with their launches. By hand: two ProfilerStep
    ranges (0-900 and 1000-1900 us), each with four ops and a launch in each; the first launch,
    correlation 0 at 110 us, has its kernel run at 1500 us, in the second step's time. Windows of
    10 CPU events are cut between the two steps: each holds its step's four kernels, each linked
    to its launch and op."""
    from tracekit.trace import windows

    d = Doc()
    d._corr = -1  # Doc numbers launches from one past this: the first is correlation id 0
    for i in range(2):
        t0 = 1000.0 * i
        d.annotation(f"ProfilerStep#{i}", t0, 900.0)
        for j in range(4):
            ext = d.op("aten::mm", t0 + 100 + 100 * j, 50)
            gpu_ts = 1500.0 if (i, j) == (0, 0) else t0 + 120 + 100 * j
            d.kernel("k", t0 + 110 + 100 * j, gpu_ts, 5, ext=ext)
    launches = [e["args"]["correlation"] for e in d.events if e.get("cat") == "cuda_runtime"]
    assert launches[0] == 0
    out = windows.split(str(d.write(tmp_path / "t.json")), str(tmp_path / "w"), max_events=10)
    parts = [read_trace(p) for p in out]
    assert len(parts) == 2
    first = parts[0].kernels
    assert 1500 * 1000 in first["start_ns"].tolist()  # the late kernel, with its launch's window
    for p in parts:
        assert len(p.kernels) == 4
        assert (p.kernels["launch"] >= 0).all() and (p.kernels["op"] >= 0).all()


# --- seed 57 (the sample's survivors in tracekit/trace, coverage-map mode) ------------------------


def test_a_timestamp_past_what_int64_nanoseconds_hold_is_refused(tmp_path):
    """Mutant: trace/columns.py _ns_float ``np.abs(arr) < _MAX_US`` -> ``!= _MAX_US``: a time of
    microseconds that int64 nanoseconds cannot hold passed the range check, and the cast wrapped
    around, so the trace was read with garbage times instead of refused. By hand: 1e16 us is
    1e19 ns, past int64's 2**63 - 1 (about 9.22e18); the reader refuses malformed events with one
    sentence (TracekitError naming the file)."""
    import pytest

    from tracekit.errors import TracekitError

    d = Doc()
    ext = d.op("aten::mm", 10, 30)
    d.kernel("k", 12, 20, 5, ext=ext)
    d.kernel("k_late", 14, 1e16, 5, ext=ext)
    with pytest.raises(TracekitError, match="int64 nanoseconds"):
        read_trace(str(d.write(tmp_path / "huge.json")))


def test_a_thread_id_string_with_no_digits_reads_as_absent(tmp_path):
    """Mutant: trace/columns.py _thread_id ``else -1`` -> ``else not 1`` (False, stored as 0): an
    id written as a string with no number in it read as thread 0 instead of -1, the tables' value
    for "absent" (decode.py's defaults; _ints: "-1 where absent"). PyTorch 1.9 writes thread ids
    as strings ("25738"), which keep their number. By hand: two ops, on threads "25738" and
    "main"."""
    d = Doc()
    d.op("aten::mm", 10, 5)
    d.op("aten::add", 20, 5)
    ops = [e for e in d.events if e.get("cat") == "cpu_op"]
    ops[0]["tid"], ops[1]["tid"] = "25738", "main"
    t = read_trace(str(d.write(tmp_path / "t.json")))
    assert t.cpu_ops.sort_values("start_ns")["tid"].tolist() == [25738, -1]


def test_a_cut_document_closes_after_its_last_complete_event_not_after_a_stray_array():
    """Mutant: trace/decode.py close_truncated ``chars == _CLOSE_BRACE`` -> ``<=``: a ``]`` closing
    an array that sits among the events (at the events' own depth) was taken for the end of an
    event, so the cut document was closed after that array, which is no trace event, and what
    was closed did not decode. The docstring: the document is cut after its last complete trace
    event and closed, so that it decodes (and the stream, reading the same bytes, keeps the one
    event). By hand: one event, then ``[1, 2]``, then an event cut short."""
    import json

    from tracekit.trace import decode as dec

    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}
    cut = '{"traceEvents": [' + json.dumps(event) + ', [1, 2], {"ph": "X", "na'
    closed = dec.close_truncated("cut.json", cut.encode())
    assert json.loads(closed) == {"traceEvents": [event]}
    decoded, _ = dec.decode("cut.json", closed)
    assert [e.name for e in decoded] == ["aten::mm"]
    bare = "[" + json.dumps(event) + ', [1, 2], {"ph": "X", "na'
    assert json.loads(dec.close_truncated("cut.json", bare.encode())) == [event]


def test_the_stream_reads_a_document_cut_in_a_key_after_its_events():
    """Mutant: trace/stream.py _finish ``self._header + b"[]}"`` -> ``//`` (a TypeError on bytes):
    a document whose cut fell in a key after the events' array (Kineto writes traceName and
    baseTimeNanoseconds after the events) made the stream fail at its very end, so the reader
    threw the streamed chunks away and read the whole document again at once. The module's
    docstring: the stream reads a document without ever holding it whole; the comment at the
    line: every event is there, the keys after them are lost. By hand: two events, then
    ``"traceName": "ru`` cut short, in 64-byte slices."""
    import json

    from tracekit.trace.stream import EventChunks

    events = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": 1}
        for n, ts in (("a", 1), ("b", 3))
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "run"})
    data = (text[: text.index('run"')] + "ru").encode()
    chunks = EventChunks("cut.json", [data[i : i + 64] for i in range(0, len(data), 64)])
    names = [e.name for evs, _ in chunks for e in evs]
    assert names == ["a", "b"]
    assert chunks.meta == {"schemaVersion": 1} and chunks.json_cut


def test_a_window_before_the_first_step_cut_counts_every_event_before_it(tmp_path):
    """Mutant: trace/window_edges.py find_edges ``cum[...] * (bins(cuts) > 0)`` -> ``-``: the events
    before each step start were counted one short (and a start in the first bin got the first
    bin's events instead of none), so the note on a window that grows past --events gave one
    event too few. By hand: three engine steps starting at 0, 1000 and 2000 us, with 300, 50 and
    50 CPU events (one per us from 10 us after each start); windows of 100 events: the targets
    100, 200 and 300 are all nearest the cut before step 1 (300 events before it), so one edge,
    at 1000 us, and window 1 holds the 300 events of step 0."""
    import numpy as np

    from tracekit.trace.window_edges import CUT_STEPS, find_edges
    from tracekit.trace.window_survey import Survey

    s = Survey(str(tmp_path))
    try:
        ts = np.concatenate([10 + np.arange(300.0), 1010 + np.arange(50.0), 2010 + np.arange(50.0)])
        s.write("ts", ts)
        s.n, s.lo, s.hi = len(ts), float(ts.min()), float(ts.max())
        s.write("steps", np.array([0.0, 1000.0, 2000.0]), np.array([900.0, 1900.0, 2900.0]))
        s.counts["steps"] = 3
        edges = find_edges(s, 100)
    finally:
        s.close()
    assert s.cut == CUT_STEPS
    assert edges.tolist() == [1000.0]
    assert s.notes == [
        "window 1 holds about 300 CPU-side events, more than --events 100: "
        "a step longer than a window stays whole, so the window grows"
    ]


def test_the_least_covered_instant_is_looked_for_as_far_after_the_quantile_as_before():
    """Mutant: trace/window_edges.py _least_covered ``q + reach + 1`` -> ``q + reach * 1``: the
    search around a quantile bin took ``reach`` bins before it but only ``reach - 1`` after, so a
    least-covered bin exactly ``reach`` after was missed. The docstring: within a quarter of a
    window of each quantile bin. By hand: one quantile, bin 400 (a window of 400 bins before it,
    so a reach of 100); every bin has 5 ranges open but bin 500, which has none: it is chosen."""
    import numpy as np

    from tracekit.trace.window_edges import _least_covered

    open_at = np.full(1000, 5, dtype=np.int64)
    open_at[500] = 0
    assert _least_covered(open_at, np.array([400])).tolist() == [500]
    open_at[500], open_at[300] = 5, 0  # and as far before: bin 300
    assert _least_covered(open_at, np.array([400])).tolist() == [300]


# --- seed 58 (the sample's survivors in tracekit/trace, coverage-map mode) ------------------------


def test_no_intervals_have_no_parents():
    """Mutant: trace/links.py _parents ``np.empty(0, dtype=np.int64)`` -> ``np.empty(-1, ...)``:
    zero intervals raised ValueError (negative dimensions) instead of giving no parents. Rule: the
    docstring, the answer is the stack walk's (``_parents_walk``), which for no interval is an
    empty int64 array. (The callers in links.py skip a thread with no ops, so this is the
    function's own contract.)"""
    import numpy as np

    from tracekit.trace.links import _parents, _parents_walk

    none = np.empty(0, dtype=np.int64)
    got = _parents(none, none)
    want = _parents_walk(none, none)
    assert got.dtype == want.dtype == np.int64
    assert got.shape == want.shape == (0,)


def test_four_traces_with_no_rank_are_named_three_and_others(tmp_path):
    """Mutant: trace/runs.py check_one_run ``missing[:3]`` -> ``missing[:4]``: the refusal of a
    folder whose traces say no rank names at most three of them and then says "and others" (the
    next clause tests ``len(missing) > 3``); the mutant named all four and still said "and
    others". Four hand-built traces, no distributedInfo, each a different event time (so no two
    are copies): exactly three of the four names are in the sentence."""
    import re

    import pytest

    from tracekit.errors import TracekitError

    names = [f"t{i}.json" for i in range(4)]
    for i, name in enumerate(names):
        d = Doc()
        d.op("aten::mm", 10 + i, 5)
        d.write(tmp_path / name)
    with pytest.raises(TracekitError, match="say no rank") as e:
        read_trace(str(tmp_path))
    said = str(e.value)
    named = [n for n in names if re.search(rf"\b{re.escape(n)}\b", said)]
    assert len(named) == 3, said
    assert f"{', '.join(named)} and others say no rank" in said


def test_an_idle_cut_falls_at_the_first_clear_bin_not_the_bin_before(tmp_path):
    """Mutant: trace/window_edges.py find_edges ``np.flatnonzero(clear[1:]) + 1`` -> ``+ 0``: the
    clear bins' indices were taken one short, so an idle cut fell a bin early, inside the op that
    ends in that bin. By hand, on a grid of one microsecond per bin (lo 0, hi _BINS): op A runs
    0-999.5 us (ends in bin 999), op B 1000.5 us to the end (starts in bin 1000); no GPU work. The
    only bin start at which no op is open, bin 0 aside, is bin 1000 (an end in a bin still counts
    as open there, _open_at's docstring), so the one edge is 1000.0 us. 200 CPU events in each
    op, windows of 200: one cut, at the middle."""
    import numpy as np

    from tracekit.trace.window_edges import _BINS, CUT_IDLE, find_edges
    from tracekit.trace.window_survey import Survey

    s = Survey(str(tmp_path))
    try:
        ts = np.concatenate([100 + np.arange(200.0), 2000 + np.arange(200.0)])
        s.write("ts", ts)
        s.n, s.lo, s.hi = len(ts), 0.0, float(_BINS)
        s.write("ranges", np.array([0.0, 1000.5]), np.array([999.5, float(_BINS)]))
        edges = find_edges(s, 200)
    finally:
        s.close()
    assert s.cut == CUT_IDLE
    assert edges.tolist() == [1000.0]


def test_an_op_with_no_time_goes_to_one_window_when_the_steps_are_below_zero(tmp_path):
    """Mutant: trace/windows.py _route ``nan=-math.inf`` -> ``nan=not math.inf`` (0.0) for the
    step an op belongs to: an op written with no "ts" is routed by its own time (none: the first
    window, as the line above routes every event), and no step holds it, so it goes to that one
    window. The mutant took its time as 0 for the step it belongs to; in a trace whose clock is
    below zero every given step start is at or below 0, so the op was written to a second window
    as if it sat between a cut and a step's start. Steps given by hand at -2000 and -1000 us,
    ten ops in each; windows of ten events: two windows, and "no-time" is written once."""
    import gzip
    import json

    import numpy as np

    from tracekit.trace.windows import split

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": t + 10.0 * i, "dur": 5.0}
        for t in (-2000.0, -1000.0)
        for i in range(10)
    ]
    events.append({"ph": "X", "cat": "cpu_op", "name": "no-time", "pid": 1, "tid": 1, "dur": 5.0})
    src = tmp_path / "neg.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    steps = np.array([[-2000.0, -1995.0, -1900.0], [-1000.0, -995.0, -900.0]])
    out = split(str(src), str(tmp_path / "w"), max_events=10, steps=steps)
    assert len(out) == 2
    held = [[e["name"] for e in json.loads(gzip.decompress(open(p, "rb").read()))["traceEvents"]] for p in out]
    assert sum(names.count("no-time") for names in held) == 1, held
    assert held[0][:10] == [f"op{i}" for i in range(10)] and held[1][-10:] == [f"op{i}" for i in range(10)]


# --- seed 59 (the sample's survivors in tracekit/trace, coverage-map mode) ------------------------


def test_a_kernel_written_without_a_grid_has_no_block_count(tmp_path):
    """Mutant: trace/columns.py Builder.__init__ ``self._dims = [(-1, -1, -1, -1)]`` -> ``(-1, -1,
    -1, +1)``: the row "not recorded" read as one block launched, so a kernel written without
    "grid" or "block" had ``ctas`` 1 instead of -1 (trace/model.py: "-1 where the trace has no
    grid"), and the share of the GPU it fills was judged from a grid it never stated. Two kernels
    built by hand; the second's "grid" and "block" removed. The first's [4, 2, 1] is 8 blocks."""
    import json

    path = _two_kernels(tmp_path)
    doc = json.loads(path.read_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 2
    del kernels[1]["args"]["grid"], kernels[1]["args"]["block"]
    path.write_text(json.dumps(doc))
    k = read_trace(str(path)).kernels.sort_values("start_ns")
    assert k["ctas"].tolist() == [8, -1]
    assert k[["grid_x", "grid_y", "grid_z"]].values.tolist() == [[4, 2, 1], [-1, -1, -1]]
    assert k[["block_x", "block_y", "block_z"]].values.tolist() == [[128, 1, 1], [-1, -1, -1]]


def test_a_grid_whose_block_count_is_past_int64_reads_as_unknown_not_a_crash(tmp_path):
    """Mutant: trace/columns.py _launch_dims ``x * y * z < 2**62`` -> ``x * y - z < 2**62``: the
    bound on the block count tested a difference (always under 2**62 for axes below 2**31), so a
    grid of [2147483647, 2147483647, 2147483647], each axis a valid int32 but 2**93 blocks in all,
    went into the int64 table: OverflowError, and the reader refused the whole trace as holding
    malformed events. The grid
    reads as unknown (-1, "malformed" in _launch_dims' docstring), the other kernel's [4, 2, 1]
    (8 blocks) as written."""
    path = _two_kernels(tmp_path)
    raw = path.read_bytes()
    assert raw.count(b'"grid": [4, 2, 1]') == 2
    path.write_bytes(raw.replace(b'"grid": [4, 2, 1]', b'"grid": [2147483647, 2147483647, 2147483647]', 1))
    k = read_trace(str(path)).kernels.sort_values("start_ns")
    assert k["ctas"].tolist() == [-1, 8]
    assert k[["grid_x", "grid_y", "grid_z"]].values.tolist() == [[-1, -1, -1], [4, 2, 1]]


def test_ranks_whose_time_spans_do_not_overlap_are_refused_with_what_to_do(tmp_path):
    """Mutant: trace/runs.py check_one_run ``"...separate runs; " + _ONE_BY_ONE`` -> ``&``: the
    refusal of a folder whose ranks' time spans do not overlap raised TypeError (``&`` on two
    strings) instead of its sentence. The module docstring: files are one run only when "their
    time spans overlap (the ranks of a run are profiled together)", and check_one_run "raises
    TracekitError saying which condition fails and what to do". Two hand-built ranks of a world of
    2 on the same GPU, one kernel each: rank 0's at 10-40 us, rank 1's an hour later."""
    import pytest

    from tracekit.errors import TracekitError

    for rank, ts in ((0, 10.0), (1, 3.6e9)):
        d = Doc(rank=rank, world=2)
        ext = d.op("aten::mm", ts, 30)
        d.kernel("ampere_sgemm_64x64_nn", ts + 2, ts + 10, 5, ext=ext)
        d.write(tmp_path / f"rank{rank}.json")
    with pytest.raises(TracekitError) as e:
        read_trace(str(tmp_path))
    said = str(e.value)
    assert "time spans do not overlap" in said and "separate runs" in said
    assert "tracekit report FILE" in said and "tracekit batch FOLDER" in said  # what to do


def test_the_summary_states_the_time_span_in_milliseconds(tmp_path):
    """Mutant: trace/summary.py summarize ``(end_ns - start_ns) / 1e6`` -> ``% 1e6``: the "time
    span" line (in ms) gave the span's nanoseconds left over past whole milliseconds. By hand: a
    CPU-only trace of two ops, the first at 100 us, the second at 1,234,000 us lasting 600 us,
    spans 100 to 1,234,600 us: 1,234,500 us, "1,234.500 ms" (thousands separated, three
    decimals); the mutant gave 500,000.000 ms."""
    from tracekit.trace.summary import summarize

    d = Doc(device=None)
    d.op("aten::add", 100.0, 10.0)
    d.op("aten::mul", 1234000.0, 600.0)
    text = summarize(read_trace(str(d.write(tmp_path / "t.json"))))
    lines = [line for line in text.splitlines() if line.startswith("time span")]
    assert lines == ["time span  1,234.500 ms"], text


def test_a_kernel_that_ran_before_the_first_cpu_event_does_not_stop_an_idle_cut(tmp_path):
    """Mutant: trace/window_edges.py find_edges' ``bins`` ``np.clip(..., 0, _BINS - 1)`` -> ``-1``:
    the time grid starts at the first CPU-side event (window_survey.run_survey: ``s.lo`` is the
    least "ts" of the CPU side), so a kernel that ran before it (launched before the profiler
    started, its launch not in the trace) fell in bin -1, and np.bincount refused the negative bin:
    a trace that names no steps could not be split (ValueError). By hand: a kernel at 0-50 us with
    no launch, then twenty ops 10 us apart from 1000 us, 5 us each; windows of ten events: one cut,
    at an idle instant between op 9 and op 10, each op and the kernel written once."""
    import gzip
    import json

    from tracekit.trace.window_edges import CUT_IDLE
    from tracekit.trace.windows import WINDOW_KEY, split

    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "early_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 0.0,
            "dur": 50.0,
            "args": {"device": 0, "stream": 7},
        },
    ]
    events += [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1000.0 + 10 * i, "dur": 5.0}
        for i in range(20)
    ]
    src = tmp_path / "early.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    out = split(str(src), str(tmp_path / "w"), max_events=10)
    held = [json.loads(gzip.decompress(open(p, "rb").read())) for p in out]
    names = [[e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"] for doc in held]
    assert [n for n in names[0] if n.startswith("op")] == [f"op{i}" for i in range(10)]
    assert [n for n in names[1] if n.startswith("op")] == [f"op{i}" for i in range(10, 20)]
    assert sum(n.count("early_kernel") for n in names) == 1
    assert [read_trace(p).metadata[WINDOW_KEY]["cut"] for p in out] == [CUT_IDLE, CUT_IDLE]
