"""``tracekit split``: a trace cut into windows of its time, each a trace of its own.

Every property is checked against reading the whole trace: the windows together hold each
table row once, each kernel stays linked to its launch and op, steps are never cut in two,
and the trace's metadata is in every window. Inputs are real traces (shared ones, skipped
with the reason when absent, and the ones tracekit collected in sample_traces/).
"""

from __future__ import annotations

import gzip
import os

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, all_real_traces, read_real, real_trace_path

from tracekit import frameworks, markers, read_trace
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.trace import window_edges, windows

TABLES = ("kernels", "runtime", "cpu_ops", "annotations", "python")


def _split(src, tmp_path, parts: int = 3, **kw) -> list:
    n = sum(len(getattr(read_trace(src), t)) for t in TABLES)
    return windows.split(str(src), str(tmp_path / "w"), max_events=max(1, n // parts), **kw)


def _linked(t) -> int:
    return int((t.kernels["launch"].to_numpy() >= 0).sum()) if len(t.kernels) else 0


def _ops_linked(t) -> int:
    return int((t.kernels["op"].to_numpy() >= 0).sum()) if len(t.kernels) else 0


@pytest.mark.parametrize("key", all_real_traces())
def test_windows_hold_every_row_once_and_every_kernel_with_its_launch(key, tmp_path):
    whole = read_real(key)
    out = _split(real_trace_path(key), tmp_path)
    parts = [read_trace(p) for p in out]
    for table in TABLES:
        assert sum(len(getattr(p, table)) for p in parts) == len(getattr(whole, table)), table
    # Kernels go with the runtime call that launched them (by correlation id), not by their
    # own time: a window reads exactly as many launch and op links as the whole trace.
    assert sum(_linked(p) for p in parts) == _linked(whole)
    assert sum(_ops_linked(p) for p in parts) == _ops_linked(whole)
    # The same kernels, by name and duration.
    got = pd.concat([p.kernels[["name", "dur_ns"]].astype({"name": str}) for p in parts]).sort_values(
        ["name", "dur_ns"]
    )
    want = whole.kernels[["name", "dur_ns"]].astype({"name": str}).sort_values(["name", "dur_ns"])
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    for p in parts:
        assert p.device_name() == whole.device_name()
        assert p.distributed == whole.distributed
        assert p.era == whole.era


def test_windows_follow_time_and_end_at_step_starts(tmp_path):
    whole = read_real("gb10_vllm")  # 10 vLLM execute steps; the GPU runs a step behind the CPU
    out = _split(real_trace_path("gb10_vllm"), tmp_path, parts=4)
    assert len(out) >= 3
    parts = [read_trace(p) for p in out]
    # In time order, and a window's CPU side ends before the next one's begins.
    for a, b in zip(parts, parts[1:]):
        assert a.cpu_ops["start_ns"].max() < b.cpu_ops["start_ns"].min()
    steps = analyze(whole).steps
    got = pd.concat([analyze(p).steps for p in parts])
    assert len(got) == len(steps) == 10
    # Every step whole in one window: its kernels, GPU span and busy time as in the whole trace.
    cols = ["cpu_start_ns", "gpu_start_ns", "gpu_end_ns", "kernels", "gpu_busy_ns"]
    np.testing.assert_array_equal(
        got[cols].sort_values("cpu_start_ns").to_numpy(), steps[cols].sort_values("cpu_start_ns").to_numpy()
    )


def test_one_window_reads_as_the_whole_trace(tmp_path):
    src = real_trace_path("v100_ns")  # fractional timestamps: the events' own bytes are copied
    whole = read_real("v100_ns")
    (only,) = windows.split(str(src), str(tmp_path / "w"), max_events=10**9)
    t = read_trace(only)
    for table in TABLES:
        pd.testing.assert_frame_equal(getattr(t, table), getattr(whole, table), check_categorical=False)
    assert t.devices == whole.devices and t.metadata.get("baseTimeNanoseconds") == whole.metadata.get(
        "baseTimeNanoseconds"
    )


def test_split_cli_collected_trace_windows_keep_the_sidecar_and_batch_reads_them(tmp_path):
    src = SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"
    out = tmp_path / "w"
    r = CliRunner().invoke(main, ["split", str(src), "-o", str(out), "--events", "4000"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    files = sorted(f for f in os.listdir(out) if windows.WINDOW_NAME.search(f))
    assert len(files) >= 2 and f"wrote {len(files)} windows" in r.output
    side = markers.sidecar_path_for(str(src))
    for f in files:
        with open(markers.sidecar_path_for(str(out / f))) as a, open(side) as b:
            assert a.read() == b.read()
        # tracekit's own phase markers survive: each window has its prefill or decode steps.
        assert analyze(read_trace(str(out / f))).phase_source == frameworks.SOURCE_MARKERS
    r = CliRunner().invoke(
        main, ["batch", str(out), "-o", str(tmp_path / "fleet.csv"), "-j", "1"], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    rows = pd.read_csv(tmp_path / "fleet.csv")
    assert len(rows) == len(files) and (rows["status"] == "ok").all()
    assert rows["note"].str.contains("windows of a trace").all()
    # The windows' steps are the whole run's.
    whole = analyze(read_trace(str(src))).steps
    assert sum(len(analyze(read_trace(str(out / f))).steps) for f in files) == len(whole)


def test_split_refuses_to_replace_windows_without_force(tmp_path):
    src = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    out = tmp_path / "w"
    first = windows.split(str(src), str(out), max_events=300)
    before = {p: os.path.getmtime(p) for p in first}
    r = CliRunner().invoke(main, ["split", str(src), "-o", str(out), "--events", "300"])
    assert r.exit_code == 2 and "--force" in r.output and "Traceback" not in r.output
    assert {p: os.path.getmtime(p) for p in first} == before
    # --force replaces them; windows of the earlier split that this one does not write go,
    # sidecars and all.
    again = windows.split(str(src), str(out), max_events=10**9, force=True)
    (only,) = again
    assert sorted(os.listdir(out)) == sorted([os.path.basename(only), os.path.basename(markers.sidecar_path_for(only))])


_EVENT = b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}'


# A file that is not a trace gets the reader's sentence (issue 44: "tracekit report reads it
# whole" sent its user to a second refusal).
@pytest.mark.parametrize(
    "content, words",
    [
        (b"not json at all", "is not JSON"),
        (b'{"traceEvents": 5}', "is not a valid trace"),
        # Found by the fuzz campaign: a flipped byte in a top-level key's value.
        (b'{"traceName": "\xff\xfe", "traceEvents": [' + _EVENT + b"]}", "is not valid JSON"),
    ],
)
def test_split_bad_input_is_one_sentence(tmp_path, content, words):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(content))
    r = CliRunner().invoke(main, ["split", str(bad), "-o", str(tmp_path / "w")])
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output
    assert not (tmp_path / "w").exists()  # the folder it made, temporary files and all, is gone


def test_split_caps_the_number_of_windows(tmp_path):
    with pytest.raises(TracekitError, match="more than 500"):
        windows.split(str(real_trace_path("v100_ddp")), str(tmp_path / "w"), max_events=10)


def test_report_of_a_folder_of_windows_says_what_they_are(tmp_path):
    _split(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz", tmp_path)
    with pytest.raises(TracekitError, match="windows of a trace"):
        read_trace(str(tmp_path / "w"))


def test_gpu_annotations_go_with_their_cpu_annotation(tmp_path, monkeypatch):
    """The GPU runs a step behind the CPU: a window that ends right after a step's CPU range,
    before its GPU range began, still holds that step's GPU annotation and kernels."""
    src = real_trace_path("gb10_vllm")
    whole = read_real("gb10_vllm")
    a = whole.annotations
    cpu = a[a["side"].astype(str) == "cpu"].sort_values("start_ns")
    gpu = a[a["side"].astype(str) == "gpu"]
    fifth = cpu.iloc[4]
    edge_ns = int(fifth["end_ns"]) + 1_000
    # The edge falls before the fifth step's GPU annotation starts: by time alone it would go next door.
    assert int(gpu.loc[gpu["external_id"] == fifth["external_id"], "start_ns"].iloc[0]) > edge_ns
    base_us = whole.metadata.get("baseTimeNanoseconds") or 0
    monkeypatch.setattr(window_edges, "find_edges", lambda s, n: np.array([(edge_ns - base_us) / 1e3]))
    parts = [read_trace(p) for p in windows.split(str(src), str(tmp_path / "w"), max_events=1)]
    assert len(parts) == 2
    for p in parts:
        sides = p.annotations["side"].astype(str)
        assert set(p.annotations.loc[sides == "gpu", "external_id"]) == set(
            p.annotations.loc[sides == "cpu", "external_id"]
        )
    assert [len(analyze(p).steps) for p in parts] == [5, 5]
    assert sum(_linked(p) for p in parts) == _linked(whole)


def test_split_keeps_the_guard_against_compression_bombs(tmp_path, monkeypatch):
    from test_reader_truncated import _gzip_bomb

    bomb = _gzip_bomb(tmp_path / "bomb.json.gz", mb=50)
    monkeypatch.setenv("TRACEKIT_MAX_DECOMPRESSED_GB", "0.02")
    with pytest.raises(TracekitError) as info:
        windows.split(str(bomb), str(tmp_path / "w"))
    assert "more than 0.02 GB" in info.value.message and "tracekit split" not in info.value.message
    assert not (tmp_path / "w").exists()  # the folder it made, temporary files and all, is gone


def test_split_reports_each_pass_over_the_decompressed_text(tmp_path):
    src = real_trace_path("h100_hf")
    seen: list = []
    windows.split(str(src), str(tmp_path / "w"), max_events=4000, progress=lambda *a: seen.append(a))
    stages = list(dict.fromkeys(stage for stage, _, _ in seen))
    assert stages[0].startswith("surveying") and stages[1].startswith("writing") and len(stages) == 2
    survey = [d for stage, d, _ in seen if stage == stages[0]]
    writing = [(d, t) for stage, d, t in seen if stage == stages[1]]
    assert survey == sorted(survey) and survey[-1] == read_real("h100_hf").n_bytes
    # The routing pass knows the total from the survey and ends on it.
    assert all(t == survey[-1] for _, t in writing) and writing[-1][0] == survey[-1]


@pytest.mark.parametrize("form", ["plain JSON", "cut mid-write"])
def test_split_reads_what_the_reader_reads(tmp_path, form):
    """Plain JSON, and a gzip file cut off mid-write (its complete events): the windows hold
    the rows reading the file gives."""
    raw = gzip.decompress(real_trace_path("rtx4080_nanovllm").read_bytes())
    if form == "plain JSON":
        src = tmp_path / "t.json"
        src.write_bytes(raw)
    else:
        src = tmp_path / "t.json.gz"
        src.write_bytes(gzip.compress(raw)[: len(gzip.compress(raw)) * 2 // 3])
    whole = read_trace(str(src))
    if form == "cut mid-write":
        assert "truncated" in whole.lacks
    out = _split(src, tmp_path)
    assert len(out) >= 2
    parts = [read_trace(p) for p in out]
    for table in TABLES:
        assert sum(len(getattr(p, table)) for p in parts) == len(getattr(whole, table)), table
    assert sum(_linked(p) for p in parts) == _linked(whole)


def test_a_failed_split_leaves_an_existing_folder_as_it_was(tmp_path):
    out = tmp_path / "w"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b"[1, 2"))
    with pytest.raises(TracekitError):
        windows.split(str(bad), str(out))
    assert os.listdir(out) == ["mine.txt"] and (out / "mine.txt").read_text() == "keep"


# --- windows keep whole steps; one merged report of the run ----------------------------------

from conftest import SHARED_TRACES  # noqa: E402

from tracekit.analysis.windows import analyse_windows, window_paths  # noqa: E402

RTX3090_VLLM = "rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz"  # execute_model frames, with stacks


def _path(name):
    if name.startswith("sample:"):
        return SAMPLE_TRACES / name.split(":", 1)[1]
    path = SHARED_TRACES / (REAL_NAMES.get(name) or name)
    if not path.exists():
        pytest.skip(f"real trace {path} is absent (../shared/traces is not beside this checkout)")
    return path


from conftest import REAL as REAL_NAMES  # noqa: E402
from json_paths import key_orders, leaves, same  # noqa: E402


def _close(a, b, rel=1e-3):
    if a is None or b is None:
        return a is b
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9


def _assert_same_report(whole, merged):
    """Steps (count, phases, durations), phases and their totals within 0.1%, percentiles equal."""
    assert len(merged.steps) == len(whole.steps)
    assert merged.steps["phase"].tolist() == whole.steps["phase"].tolist()
    np.testing.assert_array_equal(merged.steps["duration_ns"].to_numpy(), whole.steps["duration_ns"].to_numpy())
    np.testing.assert_array_equal(merged.steps["gpu_busy_ns"].to_numpy(), whole.steps["gpu_busy_ns"].to_numpy())
    assert merged.steps["step"].tolist() == list(range(len(whole.steps)))  # numbered again from 0
    assert list(merged.phases) == list(whole.phases)
    for p, w in whole.phases.items():
        m = merged.phases[p]
        assert m["steps"] == w["steps"] and m["kernels"] == w["kernels"], p
        for f in ("time_ms", "gpu_busy_ms", "gpu_idle_ms", "kernel_ms", "flops", "bytes", "mfu", "mbu"):
            assert _close(m[f], w[f]), (p, f, m[f], w[f])
        assert set(m["by_category"]) == set(w["by_category"])
        for c, ms in w["by_category"].items():
            assert _close(m["by_category"][c], ms), (p, c)
        # Idle by cause, but for one stated degradation: Python frames go to the window where they
        # start, so the outer frames covering a window's first lead-in are not in that window and
        # a few microseconds of its host idle read as unattributed (0.01 ms per window on rtx3090).
        wc, mc = w["idle_by_cause"], m["idle_by_cause"]
        for c, ms in wc.items():
            if c not in ("host", "unattributed"):
                assert _close(mc[c], ms), (p, c)
        assert _close(mc["host"] + mc["unattributed"], wc["host"] + wc["unattributed"]), p
        moved = mc["unattributed"] - wc["unattributed"]
        assert -1e-9 <= moved <= 0.05 * (len(merged.provenance["windows"]["steps_per_window"]) - 1) + 1e-9, (p, moved)
        # Per-name kernel aggregates summed over the windows.
        key = [(r["name"], r["calls"], round(r["total_ms"], 6)) for r in w and whole.top_kernels[p]]
        assert [(r["name"], r["calls"], round(r["total_ms"], 6)) for r in merged.top_kernels[p]] == key
    for k in ("prefill_step_ms", "decode_step_ms", "ttft_ms", "tpot_ms"):
        assert merged.metrics[k] == whole.metrics[k], k
    assert sorted(f.id for f in merged.findings) == sorted(f.id for f in whole.findings)


@pytest.mark.parametrize(
    "name",
    [
        "gb10_vllm",
        RTX3090_VLLM,
        "sample:tiny-bs8.pt.trace.json.gz",
        "b200_vllm",
        "mi300x_extend",
        "b300_qwen3_moe",
        "h100_hf",
    ],
)
def test_merged_report_of_the_windows_is_the_whole_traces(name, tmp_path):
    """Steps named by the engine (vLLM annotations, execute_model frames, SGLang step ranges,
    tracekit markers) are never cut, and the merged report of the windows is the whole
    trace's. Fails if a window edge falls inside a step (steps multiply, as the inferred
    fallback finds single layers of the cut step), if the first step of a window is timed from
    its CPU start instead of the previous window's last step (gb10: the GPU runs 74 ms behind),
    or if a per-phase sum or a percentile is taken from one window."""
    src = _path(name)
    whole = analyze(read_trace(src))
    out = _split(src, tmp_path, parts=4)
    if len(whole.steps) >= 3:
        assert len(out) >= 3
    merged = analyse_windows(out, read_trace)
    _assert_same_report(whole, merged)
    assert merged.provenance["windows"]["count"] == len(out)
    assert sum(merged.provenance["windows"]["steps_per_window"]) == len(whole.steps)


def _strip_annotations(src, dest):
    """The trace without its annotations (CPU and GPU ranges): steps only as Python frames."""
    import json

    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if e.get("cat") not in ("user_annotation", "gpu_user_annotation")
    ]
    dest.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return dest


def test_a_step_named_only_by_execute_model_frames_is_never_cut(tmp_path):
    """A with_stack vLLM trace without annotations: its steps are the execute_model frames.
    Fails if split cuts inside a frame (old split only avoided open ops and annotations, so a
    window edge could fall in a step between two of its ops): a window's step then loses part
    of its kernels and the count or durations change."""
    src = _strip_annotations(_path(RTX3090_VLLM), tmp_path / "stripped.json.gz")
    t = read_trace(src)
    assert not len(t.annotations)
    whole = analyze(t)
    assert whole.phase_source == frameworks.SOURCE_VLLM_FRAMES and len(whole.steps) == 17
    out = _split(src, tmp_path, parts=12)
    assert len(out) >= 6
    per = [analyze(read_trace(p)) for p in out]
    assert sum(len(a.steps) for a in per) == 17
    # Each window's steps are whole: their kernels as in the whole trace.
    got = pd.concat([a.steps for a in per])
    np.testing.assert_array_equal(got["kernels"].to_numpy(), whole.steps["kernels"].to_numpy())
    _assert_same_report(whole, analyse_windows(out, read_trace))


def test_a_window_smaller_than_a_step_grows_and_says_so(tmp_path):
    """One SGLang extend step of 58k events in windows of a quarter of that: the step stays
    whole in one window, and the split says the window grew. Fails if the step is cut (the old
    split cut at the least-covered instant inside it: several windows, each a piece of it)."""
    src = real_trace_path("mi300x_extend")
    notes: list = []
    out = _split(src, tmp_path, parts=4, notes=notes)
    assert [len(analyze(read_trace(p)).steps) for p in out].count(1) == 1
    assert any("stays whole" in n and "grows" in n for n in notes)


def test_traces_without_steps_are_cut_at_idle_instants(tmp_path):
    """A trace that names no steps (a100_particle: steps only from its launch pattern) is cut
    at instants when no op is open and no kernel runs: no kernel runs from the last CPU event
    of a window to the first of the next. Fails if an edge falls where a kernel runs."""
    src = real_trace_path("a100_particle")
    whole = read_real("a100_particle")
    out = _split(src, tmp_path, parts=4)
    assert len(out) >= 3
    parts = [read_trace(p) for p in out]
    assert {p.metadata[windows.WINDOW_KEY]["cut"] for p in parts} == {window_edges.CUT_IDLE}
    k = whole.kernels
    for a, b in zip(parts, parts[1:]):
        last = max(t["start_ns"].max() for t in (a.cpu_ops, a.runtime) if len(t))
        first = min(t["start_ns"].min() for t in (b.cpu_ops, b.runtime) if len(t))
        assert not ((k["start_ns"] <= last) & (k["end_ns"] >= first)).any()


def test_report_of_a_split_folder_is_one_merged_report(tmp_path):
    """tracekit report DIR of a split's windows: one JSON report of the whole run. Fails if the
    folder is refused (as ranks that are not one run) or only one window is reported."""
    import json

    src = real_trace_path("gb10_vllm")
    out = tmp_path / "w"
    r = CliRunner().invoke(main, ["split", str(src), "-o", str(out), "--events", "40000"], catch_exceptions=False)
    assert r.exit_code == 0 and f"tracekit report {out}" in r.output, r.output
    assert len(window_paths(str(out))) >= 3
    r = CliRunner().invoke(main, ["report", str(out), "-o", str(tmp_path / "r.json")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert len(data["steps"]) == 10 and [s["index"] for s in data["steps"]] == list(range(10))
    assert data["provenance"]["windows"]["count"] >= 3
    assert data["provenance"]["notes"][0].startswith("merged from")
    whole = analyze(read_real("gb10_vllm"))
    assert data["metrics"]["decode_step_ms"] == pytest.approx(whole.metrics["decode_step_ms"], rel=1e-12)


def test_report_of_a_split_folder_missing_a_window_is_one_sentence(tmp_path):
    out = _split(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz", tmp_path)
    os.remove(out[1])
    r = CliRunner().invoke(main, ["report", str(tmp_path / "w"), "-o", str(tmp_path / "r.json")])
    assert r.exit_code == 2 and "lacks window 2" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("name, parts", [("a100_particle", 4), ("a100_particle", 6), ("b300_moe", 3)])
def test_split_of_a_trace_with_inferred_steps_merges_to_the_whole_traces_report(name, parts, tmp_path):
    """A trace that names no steps (both: steps only from the repeating launch pattern; 11 and
    3 steps) split by the CLI into >= 3 windows: the merged report is the whole trace's. Fails if
    split cuts at idle instants inside an inferred step, or each window infers its own steps
    (a100_particle: 14 steps instead of 11; b300_moe: durations off by up to 0.55 ms), or if the
    ops between a cut and the next step's start are only in one window (b300_moe: the first
    step's host idle loses 23 us; a100_particle: an op open at the cut loses its kernels' FLOPs)."""
    src = real_trace_path(name)
    whole = analyze(read_real(name))
    assert whole.phase_source == frameworks.SOURCE_LAUNCHES and len(whole.steps) in (11, 3)
    n = sum(len(getattr(read_real(name), t)) for t in TABLES)
    out = tmp_path / "w"
    r = CliRunner().invoke(
        main, ["split", str(src), "-o", str(out), "--events", str(n // parts)], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    paths = window_paths(str(out))
    assert len(paths) >= 3
    merged = analyse_windows(paths, read_trace)
    _assert_same_report(whole, merged)
    assert {read_trace(p).metadata[windows.WINDOW_KEY]["cut"] for p in paths} == {window_edges.CUT_INFERRED}
    assert not merged.provenance["windows"].get("steps_inferred_per_window")


def test_windows_cut_inside_an_inferred_step_say_the_merge_is_not_the_whole_traces(tmp_path):
    """Windows cut at idle instants (windows.split alone, as an earlier tracekit wrote them) of a
    trace whose steps are inferred: a step of the whole trace spans two windows, so the merged
    report cannot be the whole trace's, and its notes say so plainly. Fails if the merge gives
    the windows' own inferred steps silently (14 steps for 11, no word)."""
    out = _split(real_trace_path("a100_particle"), tmp_path, parts=4)
    assert len(out) >= 3
    merged = analyse_windows(out, read_trace)
    assert merged.provenance["windows"]["steps_inferred_per_window"] is True
    said = [n for n in merged.provenance["notes"] if "names no steps" in n]
    assert len(said) == 1 and "spans windows" in said[0] and "may differ from the whole trace's" in said[0]


# What each of the merge's stated approximations (provenance.windows) covers in the JSON.
_STATED = {
    "roofline": (".roofline.",),
    "timelines": (".timelines",),
    "idle_top": (".idle_top",),
    "unknown_bound_ms_by_reason": (".provenance.unknown_bound_ms_by_reason",),
    "ranks": (".ranks", ".rank_summary"),
    # Without a replay the findings' time at stake is their summed time (and orders them).
    "replay": (".replay", ".findings["),
}


@pytest.mark.parametrize("name", ["sample:tiny-bs8.pt.trace.json.gz", "gb10_vllm", "h100_hf", "b200_vllm"])
def test_the_merged_json_is_the_whole_traces_but_for_what_it_says(name, tmp_path):
    """One set of books: every figure of the merged report's JSON, key by key, is the whole
    trace's, except the ones its provenance.windows names as taken from one window, summed
    approximately or not merged (and the source and provenance, which describe the windows).
    Fails on any figure the merge recomputes another way without saying so: the tpot-growth
    finding read per-step category time from the merged work table, whose rows are not steps
    (it named other kinds of work than the whole trace's finding); a top kernel's category was
    the first unit's in one and the most common in the other; merged top kernels lacked the
    ``estimate`` key; a single rank's view vanished without a word."""
    src = _path(name)
    whole = analyze(read_trace(src)).to_dict()
    merged = analyse_windows(_split(src, tmp_path, parts=4), read_trace).to_dict()
    said = merged["provenance"]["windows"]
    allowed = [".source.", ".provenance."]
    for key in list(said.get("merged_approximately") or {}) + list(said.get("not_merged") or {}):
        allowed += _STATED[key]
    fw, fm = dict(leaves(whole)), dict(leaves(merged))
    differ = [
        k
        for k in sorted(set(fw) | set(fm))
        if not same(fw.get(k, "<absent>"), fm.get(k, "<absent>"), 1e-6, 1e-9)
        and not any(k.startswith(a) or a in k for a in allowed)
    ]
    assert not differ, [(k, fw.get(k, "<absent>"), fm.get(k, "<absent>")) for k in differ[:10]]

    # The findings, in whatever order their time at stake puts them: the same ones, saying the
    # same, with the same summed time (the merge's time at stake is that sum: no replay).
    def claims(d):
        return sorted((f["id"], f["phase"], f["text"], f["action"]) for f in d["findings"])

    assert claims(whole) == claims(merged)
    sums = {(f["id"], f["phase"]): f["sum_ms"] for f in whole["findings"]}
    for f in merged["findings"]:
        assert f["at_stake_basis"] in (None, "sum")
        assert same(f["at_stake_ms"], sums[(f["id"], f["phase"])], 1e-6, 1e-9), f

    # Tables keyed by name keep their order too (largest first where the schema says so).
    def free(path):  # a path none of the allowances covers
        return not any((path + ".").startswith(a) or a in path for a in allowed)

    ow, om = dict(key_orders(whole)), dict(key_orders(merged))
    misordered = [
        k
        for k in ow
        if k in om and free(k) and [c for c in ow[k] if free(f"{k}.{c}")] != [c for c in om[k] if free(f"{k}.{c}")]
    ]
    assert not misordered, [(k, ow[k], om[k]) for k in misordered[:5]]
    # The stated approximation of the idle groups: each merged group is at most the whole trace's
    # (a window can miss part of a group, never add to it), and they stay largest first.
    for p, v in merged["phases"].items():
        ms = [r["ms"] for r in v["idle_top"]]
        assert ms == sorted(ms, reverse=True), p
        whole_ms = {
            (r["cause"], r["call"], r["op"], tuple(r["stack"])): r["ms"] for r in whole["phases"][p]["idle_top"]
        }
        for r in v["idle_top"]:
            key = (r["cause"], r["call"], r["op"], tuple(r["stack"]))
            if key in whole_ms:
                assert r["ms"] <= whole_ms[key] + 1e-6, (p, key)
    if whole.get("ranks"):
        assert "ranks" in said["not_merged"]


@pytest.mark.parametrize("name", ["h100_hf"])
def test_a_merged_idle_groups_count_is_its_windows_counts_summed(name, tmp_path):
    """catches: the merge adding a group's intervals as ``count and 0`` (or dropping any window's):
    the merged idle table's count of a group must be the sum of the counts each window's own
    report gives that group (the merge's stated approximation is which groups and how much time,
    never the arithmetic of the counts it adds)."""
    src = _path(name)
    paths = _split(src, tmp_path, parts=4)
    merged = analyse_windows(paths, read_trace).to_dict()
    own = [analyze(read_trace(p)).to_dict() for p in paths]

    def key(r):
        return (r["cause"], r["call"], r["op"], tuple(r["stack"]))

    checked = 0
    for p, v in merged["phases"].items():
        for r in v["idle_top"]:
            counts = [
                w["count"] for a in own for w in (a["phases"].get(p) or {}).get("idle_top") or [] if key(w) == key(r)
            ]
            assert counts and r["count"] == sum(counts), (p, key(r), r["count"], counts)
            checked += 1
    assert checked >= 3, checked
