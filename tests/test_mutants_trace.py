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
