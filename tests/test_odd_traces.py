"""Honest about odd traces (issue 23): cut traces, garbled device fields, and small things a new user saw.

The cut traces are made here from shared ones, the way a profiler killed while flushing
leaves them: the first part of the decompressed JSON. What survived is computed
independently of tracekit by walking the JSON with the standard library
(``test_reader_truncated.event_ends``).
"""

from __future__ import annotations

import gzip
import json
import re

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, real_trace_path
from test_reader_truncated import event_ends

from tracekit.cli import main

B300 = "b300_qwen3_moe"


def _raw(key: str) -> bytes:
    return gzip.decompress(real_trace_path(key).read_bytes())


def _cut(tmp_path, key: str, frac: float, name: str = "cut.json"):
    """(path of the first ``frac`` of the trace's decompressed JSON, that text)."""
    raw = _raw(key)
    path = tmp_path / name
    path.write_bytes(raw[: int(len(raw) * frac)])
    return path, raw[: int(len(raw) * frac)]


def _last_complete_end(key: str, cut: int) -> int:
    """Byte offset just past the last event that ends before ``cut`` in the whole trace's JSON."""
    return max(e for e in event_ends(_raw(key)) if e <= cut)


def _report_json(path, *args) -> dict:
    r = CliRunner().invoke(main, ["report", str(path), "-f", "json", "-o", "-", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# --- 1 and 2: a GPU trace cut in half ---------------------------------------------------------


def test_b300_cut_in_half_is_device_unknown_never_cpu_only(tmp_path):
    """Bug: the shared B300 SGLang decode trace cut in half was "device CPU only (no GPU
    events)", and the cut was mentioned only at the bottom under "the trace lacks"."""
    path, text = _cut(tmp_path, B300, 0.5)
    # The trace's own facts: its deviceProperties (before traceEvents) survive the cut, no kernel does.
    assert b'"deviceProperties"' in text[: text.index(b'"traceEvents"')] and b'"cat": "kernel"' not in text
    r = CliRunner().invoke(main, ["summary", str(path)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert "CPU only" not in r.stdout
    # The first lines: the trace, then the cut, then the device.
    assert lines[1].startswith("truncated  the file was cut mid-write")
    assert re.search(r"\d+(\.\d)?% of the decompressed text", lines[1]) or ">99.9%" in lines[1]
    assert lines[2].startswith("device     unknown (the trace was cut before its GPU events")
    assert "NVIDIA B300" in lines[2]  # the name the surviving deviceProperties give


def test_b300_cut_in_half_marks_its_latency_partial_and_withholds_gpu_figures(tmp_path):
    """Bug: the half trace gave "Decode step p50 3.69 ms" and 4,333 tok/s as facts (the whole
    trace's step is 8.72 ms: the cut removed the GPU work the step waits for)."""
    path, text = _cut(tmp_path, B300, 0.5)
    data = _report_json(path)
    cut = data["truncated"]
    # Share recovered: bytes up to the end of the last complete event over the bytes the file holds.
    last_end = _last_complete_end(B300, len(text))
    assert cut["bytes_read"] == len(text) and cut["bytes_parsed"] == last_end
    assert cut["recovered_share"] == pytest.approx(last_end / len(text))
    assert cut["gpu_events_lost"] is True and any("deviceProperties" in e for e in cut["gpu_evidence"])
    assert data["device"]["type"] == "unknown" and data["device"]["spec"] is None
    assert "cut before its GPU events" in data["device"]["reason"]
    m = data["metrics"]
    # Step times stay, marked partial; the figures that need the GPU's work are withheld with the reason.
    assert m["decode_step_ms"]["p50"] is not None
    assert "decode_step_ms" in m["partial"]["figures"]
    assert "lack the GPU work the cut removed" in m["partial"]["reason"]
    assert m["decode_tokens_per_s"] is None
    assert "lack the GPU work" in data["provenance"]["reasons"]["decode_tokens_per_s"]
    assert all(v is None for v in m["idle_share"].values())
    assert all("partial" in p for p in data["phases"].values())


def test_b300_cut_in_half_says_so_in_the_report_headline(tmp_path):
    """Bug: HTML and Markdown reports of a cut trace put the cut in the data-quality section
    only, below figures presented as whole."""
    path, _ = _cut(tmp_path, B300, 0.5)
    html = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", str(path), "-o", str(html)]).exit_code == 0
    page = html.read_text()
    banner = page.index('id="truncated"')
    assert banner < page.index('id="headline"')  # above every figure
    assert "Truncated trace: the file was cut mid-write" in page[banner : banner + 600]
    assert "partial: the trace was cut before its GPU events" in page
    md = tmp_path / "r.md"
    assert CliRunner().invoke(main, ["report", str(path), "-o", str(md)]).exit_code == 0
    head = md.read_text().splitlines()[:4]
    assert any("Truncated trace" in line for line in head)


def test_a_late_cut_keeps_its_gpu_and_says_its_figures_are_partial(tmp_path):
    """Bug: a trace cut after its kernels showed whole-run figures with no word of the cut in the headline."""
    path, text = _cut(tmp_path, "mi300x_extend", 0.99)
    data = _report_json(path)
    assert data["device"]["type"] == "gpu" and data["truncated"]["gpu_events_lost"] is False
    assert data["truncated"]["bytes_parsed"] == _last_complete_end("mi300x_extend", len(text))
    assert "covers only the part of the run written before the cut" in data["truncated"]["text"]
    assert data["metrics"]["partial"]["reason"].startswith("partial: the trace was cut mid-write")


def test_a_whole_trace_has_no_truncated_block(tmp_path):
    """Guard: the cut's marks appear only on cut traces."""
    data = _report_json(real_trace_path(B300))
    assert data["truncated"] is None and "partial" not in data["metrics"]
    assert data["device"]["type"] == "gpu"
    r = CliRunner().invoke(main, ["summary", str(real_trace_path(B300))])
    assert r.exit_code == 0 and "truncated" not in r.stdout.splitlines()[1]


def test_project_of_a_cut_gpu_trace_says_it_was_cut_not_cpu_only(tmp_path):
    """Bug: project refused a GPU trace cut before its kernels as "a CPU-only trace"."""
    path, _ = _cut(tmp_path, B300, 0.5)
    r = CliRunner().invoke(main, ["project", str(path), "--to", "b200", "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 2
    assert "cut before its GPU events" in r.output and "CPU-only" not in r.output and "Traceback" not in r.output


# --- 3: a garbled deviceProperties field -----------------------------------------------------


def _with_device(tmp_path, key: str, props: dict):
    """The shared trace with its deviceProperties replaced by ``props`` (the events unchanged)."""
    doc = json.loads(_raw(key))
    doc["deviceProperties"] = [{**p, **props} for p in doc["deviceProperties"]]
    path = tmp_path / f"{key}-devprops.json"
    path.write_text(json.dumps(doc))
    return path


# An RTP-LLM A800 trace's record: numSms holds sharedMemPerMultiprocessor's value (a writer's slip).
A800_GARBLED = {
    "name": "NVIDIA A800-SXM4-80GB",
    "computeMajor": 8,
    "computeMinor": 0,
    "totalGlobalMem": 85095874560,
    "multiProcessorCount": 108,
    "numSms": 167936,
    "sharedMemPerMultiprocessor": 167936,
}


def test_a_garbled_sm_count_is_ignored_with_a_note_and_the_name_decides(tmp_path):
    """Bug: numSms 167936 (no GPU has that many SMs; multiProcessorCount says 108) made
    tracekit refuse the A800 row as "a different SKU", and the whole roofline was gone."""
    data = _report_json(_with_device(tmp_path, B300, A800_GARBLED))
    dev = data["device"]
    assert dev["spec_key"] == "a800-sxm4-80gb", dev["reason"]
    assert any("numSms 167936" in n and "garbled" in n for n in dev["notes"])
    # The roofline is back: kernels with a known cost have a bound against the A800's peaks.
    assert dev["peak_bandwidth"] == pytest.approx(2039e9)
    by_bound = data["phases"]["decode"]["by_bound"]
    assert by_bound["memory"] + by_bound["compute"] > 0
    r = CliRunner().invoke(main, ["summary", str(_with_device(tmp_path, B300, A800_GARBLED))])
    assert r.exit_code == 0 and "note: deviceProperties numSms 167936" in r.stdout


def test_contradicting_plausible_sm_counts_leave_the_name_to_decide():
    """Bug: either of two disagreeing SM counts would veto the named row."""
    from tracekit.specs import all_specs, match_device

    props = {**A800_GARBLED, "numSms": 132}  # plausible, but the record's other field says 108
    m = match_device(props, all_specs())
    assert m.spec is not None and m.spec.key == "a800-sxm4-80gb"
    assert any("contradict" in n for n in m.notes)
    # A real different SKU (both fields agree on another count) is still refused.
    other = match_device({**A800_GARBLED, "numSms": 132, "multiProcessorCount": 132}, all_specs())
    assert other.spec is None and "different SKU" in other.reason


# --- 4: small things --------------------------------------------------------------------------


def test_a_small_peak_keeps_its_significant_digits():
    """Bug: a CPU's 0.0398 TFLOP/s matrix peak printed as "0.0 TFLOP/s" in the MFU basis."""
    from tracekit.analysis.figures import _tflops

    assert _tflops(0.0398e12) == "0.0398 TFLOP/s"
    assert _tflops(312e12) == "312.0 TFLOP/s"  # a GPU's peak reads as before


def test_demo_report_mfu_basis_has_no_zero_peak():
    """Bug: the demo report (a CPU collect) said "fp32 matrix peak ... 0.0 TFLOP/s"."""
    data = _report_json(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")
    basis = data["phases"]["prefill"]["mfu_basis"]
    assert "TFLOP/s" in basis and " 0.0 TFLOP/s" not in basis
    peak = data["device"]["peak_flops"]["matrix"]["fp32"] / 1e12
    assert f"{peak:.3g}" in basis


def test_decode_caption_names_the_dashed_line_only_when_the_chart_draws_it(tmp_path):
    """Bug: a CPU trace's decode-over-time caption named a dashed launch-gap line the chart does not draw."""
    cpu = tmp_path / "cpu.html"
    assert (
        CliRunner().invoke(main, ["report", str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"), "-o", str(cpu)]).exit_code
        == 0
    )
    page = cpu.read_text()
    assert "tk-chart-decode" in page and "the dashed line is the idle time" not in page
    gpu = tmp_path / "gpu.html"
    # Ten decode steps: a run of one decode step gets a sentence instead of the chart (issue 44).
    assert CliRunner().invoke(main, ["report", str(real_trace_path("gb10_vllm")), "-o", str(gpu)]).exit_code == 0
    page = gpu.read_text()
    assert "the dashed line is the idle time" in page and "launch gaps (GPU waiting for the CPU)" in page


def test_project_of_an_unnamed_gpu_says_an_unknown_gpu(tmp_path):
    """Bug: project of a trace whose device has no name printed "measured on None" and titled
    its page "None -> B200"."""
    path = _with_device(tmp_path, B300, {"name": ""})
    out = tmp_path / "p.html"
    r = CliRunner().invoke(main, ["project", str(path), "--to", "b200", "--gpu", "b300", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "None" not in r.stdout and "None →" not in page and "measured on None" not in page
    assert "on an unknown GPU" in r.stdout and "an unknown GPU → " in page


@pytest.mark.parametrize(
    "command",
    [
        ["summary", "{t}", "--gpu", "h1000"],
        ["report", "{t}", "--gpu", "h1000", "-o", "{out}"],
        ["project", "{t}", "--to", "b200", "--gpu", "h1000", "-o", "{out}"],
        ["compare", "{t}", "{t}", "--gpu-after", "h1000", "-o", "{out}"],
        ["summary", "{t}", "--spec-file", "{bad}"],
    ],
)
def test_a_bad_gpu_option_fails_before_anything_is_printed(tmp_path, command):
    """Bug: `summary --gpu h1000` printed half the summary (device, kernels) before its error."""
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a\n")
    args = [a.format(t=real_trace_path(B300), out=tmp_path / "out.json", bad=bad) for a in command]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert r.stdout == ""  # nothing before the error
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("tracekit: error: ") and "Traceback" not in r.output
    assert not (tmp_path / "out.json").exists()


def _clock_below_zero(tmp_path, key: str):
    """(the trace's path, its copy with every ts moved an exact whole number of microseconds so
    that the last event ends 1 ms before zero, that move in us). baseTimeNanoseconds, which the
    reader adds to every ts, is dropped, so the copy's clock is its ts alone."""
    src = real_trace_path(key)
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = [e for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    move = -int(max(e["ts"] + e.get("dur", 0) for e in events)) - 1000
    for e in events:
        e["ts"] += move
    doc.pop("baseTimeNanoseconds", None)
    out = tmp_path / f"below-zero-{key}.json.gz"
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return src, out, move


def _figures(a) -> dict:
    d = a.to_dict()
    return {k: v for k, v in d.items() if k != "source"}


@pytest.mark.parametrize("key", ["gb10_vllm", "mi300x_extend"])
def test_a_clock_below_zero_reads_as_the_same_run(tmp_path, key):
    """The Chrome format allows any timestamp; a trace re-based to an event inside it has times
    below zero. Moving a clock changes no duration, so the analysis (steps, phases, idle, kernels,
    every figure) must be the original's. Fails if a time below zero is read as "no time" (the
    analysis marks a missing launch by -1 and tests times >= 0): before the reader moved such a
    clock, the GB10 copy had no launches and no steps (10 in the original)."""
    from tracekit import read_trace
    from tracekit.analysis import analyze

    src, below, _ = _clock_below_zero(tmp_path, key)
    t = read_trace(str(below))
    assert int(t.kernels["start_ns"].min()) >= 0 and t.metadata["clock_shift_ns"] % 2**50 == 0
    original = analyze(read_trace(str(src)))
    assert len(original.steps)
    assert _figures(analyze(t)) == _figures(original)


def test_annotate_writes_a_clock_below_zero_back_on_its_own_clock(tmp_path):
    """Fails if annotate writes the step track on the reader's moved clock (2**50 ns, 13 days,
    away from the file's events) instead of the file's own: each step slice must sit where the
    original trace's annotation put it, moved as the copy's events were."""
    src, below, move_us = _clock_below_zero(tmp_path, "gb10_vllm")

    def step_slices(path, out):
        r = CliRunner().invoke(main, ["annotate", str(path), "-o", str(out)])
        assert r.exit_code == 0, r.output
        doc = json.loads(gzip.decompress(out.read_bytes()))
        return sorted(
            (e["args"]["step"], e["ts"], e["dur"])
            for e in doc["traceEvents"]
            if e.get("cat") == "tracekit"
            and e["ph"] == "X"
            and "step" in e["args"]
            and "cause" not in e["args"]
            and "kind" not in e["args"]
        )  # not the critical-path track's slices

    want, got = step_slices(src, tmp_path / "a.json.gz"), step_slices(below, tmp_path / "b.json.gz")
    assert len(want) == 10 and [s for s, _, _ in got] == [s for s, _, _ in want]
    for (_, ts_w, dur_w), (_, ts_g, dur_g) in zip(want, got):
        assert ts_g == pytest.approx(ts_w + move_us, abs=1e-3) and dur_g == pytest.approx(dur_w, abs=1e-3)
    assert all(ts < 0 for _, ts, _ in got)
