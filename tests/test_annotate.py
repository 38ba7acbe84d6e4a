"""``tracekit annotate``: the trace unchanged, plus tracks of steps and idle gaps and per-kernel args,
read back by tracekit with the same analysis as the original."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections import defaultdict
from decimal import Decimal

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, real_trace_path

from tracekit import markers, read_trace
from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.report.annotate import LANE_STRIDE, _spread

# Serving traces of three engines and vendors, a Hugging Face forward, a ns-timestamp
# training trace, and the CPU sample trace (its sidecar holds the CPU's calibration).
TRACES = ["rtx3090_vllm", "mi300x_decode", "gb10_vllm", "h100_hf", "v100_ns", "cpu_sample"]
PREFIX = "tracekit_"


def _path(key: str) -> str:
    if key == "cpu_sample":
        return str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz")
    return str(real_trace_path(key))


def _load(path: str, exact: bool = False):
    """The parsed document; ``exact``: numbers as Decimals, every digit the file wrote (a float
    would hide an epoch-scale ts rounded to a quarter of a microsecond)."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        return json.load(f, parse_float=Decimal) if exact else json.load(f)


def _stripped(event: dict, original: dict) -> dict:
    """An annotated event less the keys annotate added to its args."""
    if not isinstance(event.get("args"), dict):
        return event
    e = dict(event)
    e["args"] = {k: v for k, v in event["args"].items() if not k.startswith(PREFIX)}
    if not e["args"] and "args" not in original:
        del e["args"]
    return e


_RUNS: dict = {}


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    """key -> (original path, annotated path, CLI output), each trace annotated once through the CLI."""

    def run(key: str):
        if key not in _RUNS:
            src = _path(key)
            folder = tmp_path_factory.mktemp(f"annotate-{key}")
            out = str(folder / "out.json.gz")
            r = CliRunner().invoke(main, ["annotate", src, "-o", out])
            assert r.exit_code == 0, r.output
            _RUNS[key] = (src, out, r.output)
        return _RUNS[key]

    return run


def _comparable(analysis) -> dict:
    """The whole analysis but where it was read from (path, file size, event count)."""
    d = analysis.to_dict()
    return {**{k: v for k, v in d.items() if k != "source"}, "schema_era": d["source"]["schema_era"]}


@pytest.mark.parametrize("key", TRACES)
def test_annotated_trace_reads_back_with_the_same_analysis(key, annotated):
    """Fails if an added event is read as work (a kernel, op, annotation: the steps, phases or idle
    would change) or if the output is not valid Chrome-trace JSON tracekit can read."""
    src, out, _ = annotated(key)
    before, after = _comparable(analyze(read_trace(src))), _comparable(analyze(read_trace(out)))
    assert after == before


@pytest.mark.parametrize("key", TRACES)
def test_every_original_event_and_key_is_kept(key, annotated):
    """Fails if annotate drops, reorders or alters an original event (beyond the added tracekit_* args,
    down to the last digit of a ns-resolution epoch timestamp) or a top-level key, or if an added
    event is not in the tracekit process and category."""
    src, out, _ = annotated(key)
    orig, new = _load(src, exact=True), _load(out, exact=True)
    assert set(new) == set(orig)
    assert {k: v for k, v in new.items() if k != "traceEvents"} == {k: v for k, v in orig.items() if k != "traceEvents"}
    n = len(orig["traceEvents"])
    assert len(new["traceEvents"]) > n
    for a, b in zip(new["traceEvents"][:n], orig["traceEvents"]):
        assert _stripped(a, b) == b
    added = new["traceEvents"][n:]
    pids = {e.get("pid") for e in orig["traceEvents"]}
    assert {e["cat"] for e in added} == {"tracekit"}
    assert len({e["pid"] for e in added}) == 1 and added[0]["pid"] not in pids
    names = {(e["name"], e.get("tid"), e["args"].get("name")) for e in added if e["ph"] == "M"}
    assert ("process_name", None, "tracekit") in names
    assert any(n[:2] == ("thread_name", 1) and n[2].startswith("tracekit steps") for n in names)
    # The idle track is named where it holds slices (a GPU trace with steps).
    has_idle = any(e["ph"] == "X" and e["tid"] == 2 for e in added)
    assert (("thread_name", 2, "GPU idle, by cause") in names) == has_idle
    assert has_idle == (key not in ("cpu_sample", "v100_ns"))  # v100_ns: training, no steps


@pytest.mark.parametrize("key", TRACES)
def test_tracks_hold_the_reports_steps_and_idle(key, annotated):
    """Fails if the step track misses or misnames a step, if its times are not in the file's own
    time base (microseconds from baseTimeNanoseconds), or if the idle slices of a step do not add
    up to the report's GPU idle for that step."""
    src, out, _ = annotated(key)
    report = analyze(read_trace(src)).to_dict()
    new = _load(out)
    added = [e for e in new["traceEvents"] if e.get("cat") == "tracekit" and e["ph"] == "X"]
    steps = sorted((e for e in added if e["tid"] % LANE_STRIDE == 1), key=lambda e: e["args"]["step"])
    idle = [e for e in added if e["tid"] % LANE_STRIDE == 2]
    assert [(e["args"]["step"], e["args"]["phase"]) for e in steps] == [
        (s["index"], s["phase"]) for s in report["steps"]
    ]
    assert [e["name"] for e in steps] == [f"{s['phase']} step {s['index']}" for s in report["steps"]]
    for e, s in zip(steps, report["steps"]):
        # The slice is the step's window: its duration and the other work in it.
        assert e["dur"] / 1e3 == pytest.approx(s["duration_ms"] + s["unrecorded_ms"] + s["next_ms"], abs=1e-3)
        assert e["args"]["unrecorded_ms"] == pytest.approx(s["unrecorded_ms"], abs=1e-6)
        assert (e["args"]["tokens"], e["args"]["batch"]) == (s["tokens"], s["batch"])
        assert e["args"]["busy_ms"] + e["args"]["idle_ms"] == pytest.approx(s["duration_ms"], abs=1e-6)
    # The step's window against the trace's own events: its slice lies within the span of the
    # original complete events (times in the file's unit and base, not ns or absolute).
    xs = [e for e in new["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "tracekit" and "dur" in e]
    lo, hi = min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)
    for e in steps:
        assert lo - 1 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1
    idle_of = defaultdict(float)
    for e in idle:
        idle_of[e["args"]["step"]] += e["dur"]
        assert e["name"].split(":")[0] == e["args"]["cause"]
        assert e["args"]["cause"] in ("sync", "launch", "host", "wait", "unattributed")
    if report["device"]["type"] != "gpu":
        assert not idle  # a CPU trace's ops are the work: no device waits on them
        return
    for s in report["steps"]:
        assert idle_of[s["index"]] / 1e3 == pytest.approx(s["gpu_idle_ms"], abs=1e-3)
    assert idle or not any(s["gpu_idle_ms"] for s in report["steps"])


@pytest.mark.parametrize("key", TRACES)
def test_every_unit_of_work_carries_its_roofline_args(key, annotated):
    """Fails if kernel events are matched to the wrong table rows (a kernel would carry another
    name's category) or some go without args."""
    src, out, _ = annotated(key)
    analysis = analyze(read_trace(src))
    work = analysis.work
    new = _load(out)
    tagged = [e for e in new["traceEvents"] if isinstance(e.get("args"), dict) and PREFIX + "category" in e["args"]]
    assert len(tagged) == len(work)
    want = defaultdict(set)
    for name, cat in zip(work["name"].astype(str), work["category"].astype(str)):
        want[name].add(cat)
    for e in tagged:
        assert e["args"][PREFIX + "category"] in want[e["name"]]
        assert {PREFIX + k for k in ("bound", "limiter", "flops", "bytes", "roof_fraction", "cost_source")} <= set(
            e["args"]
        )
    flops = sum(e["args"][PREFIX + "flops"] or 0 for e in tagged)
    assert flops == pytest.approx(float(work["flops"].fillna(0).sum()), rel=1e-9)


def test_sidecar_goes_along_and_outputs_are_never_overwritten(tmp_path):
    """Fails if annotate overwrites its input or an existing output without --force, if a bad input
    gives a traceback instead of one sentence, or if the CPU trace's sidecar is not copied."""
    src = str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz")
    out = str(tmp_path / "a.json")
    runner = CliRunner()
    r = runner.invoke(main, ["annotate", src, "-o", out])
    assert r.exit_code == 0, r.output
    assert os.path.isfile(markers.sidecar_path_for(out))
    json.loads(open(out).read())  # plain JSON for a .json name
    again = runner.invoke(main, ["annotate", src, "-o", out])
    assert again.exit_code == 2 and "already exists" in again.output
    assert runner.invoke(main, ["annotate", src, "-o", out, "--force"]).exit_code == 0
    copy = str(tmp_path / "in.json.gz")
    shutil.copy(src, copy)
    same = runner.invoke(main, ["annotate", copy, "-o", copy, "--force"])
    assert same.exit_code == 2 and "is the input trace" in same.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    r = runner.invoke(main, ["annotate", str(bad), "-o", str(tmp_path / "b.json.gz")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_a_folder_of_traces_is_annotated_file_by_file(tmp_path):
    """Fails if a folder input (ranks, split windows) is not annotated file by file into a folder."""
    ranks = tmp_path / "run"
    ranks.mkdir()
    for name in ("tiny-bs1", "tiny-bs8"):
        shutil.copy(SAMPLE_TRACES / f"{name}.pt.trace.json.gz", ranks / f"{name}.pt.trace.json.gz")
    out = tmp_path / "annotated"
    r = CliRunner().invoke(main, ["annotate", str(ranks), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(out)) == ["tiny-bs1.tracekit.json.gz", "tiny-bs8.tracekit.json.gz"]
    for name in ("tiny-bs1", "tiny-bs8"):
        doc = _load(str(out / f"{name}.tracekit.json.gz"))
        assert any(e.get("cat") == "tracekit" and e["ph"] == "X" for e in doc["traceEvents"])


def test_split_windows_carry_the_whole_runs_steps(tmp_path):
    """A folder of split windows is annotated as ``tracekit report DIR`` reads it: the step slices of
    all the windows, together, are the steps of the whole (unsplit) trace's report, numbered as the
    run's, with the same phase, tokens and batch. The real RTX 3090 vLLM trace cut into 3 windows
    (its step 1 is mixed only because it carries the requests of step 0, in the window before).
    Fails if each window numbers its steps from 0, or is analysed without the earlier windows'
    context (the carried requests would read as a prefill)."""
    src = real_trace_path("rtx3090_vllm")
    windows, out = tmp_path / "windows", tmp_path / "annotated"
    r = CliRunner().invoke(main, ["split", str(src), "-o", str(windows), "--events", "20000"])
    assert r.exit_code == 0, r.output
    assert len(os.listdir(windows)) >= 3
    r = CliRunner().invoke(main, ["annotate", str(windows), "-o", str(out)])
    assert r.exit_code == 0, r.output
    slices = [
        e
        for f in sorted(os.listdir(out))
        for e in _load(str(out / f))["traceEvents"]
        if e.get("cat") == "tracekit" and e["ph"] == "X" and e["tid"] % LANE_STRIDE == 1
    ]
    whole = analyze(read_trace(str(src))).to_dict()["steps"]
    assert [(e["args"]["step"], e["args"]["phase"], e["args"]["tokens"], e["args"]["batch"]) for e in slices] == [
        (s["index"], s["phase"], s["tokens"], s["batch"]) for s in whole
    ]
    assert "mixed" in {s["phase"] for s in whole}


@pytest.mark.parametrize("key", TRACES)
def test_added_tracks_follow_perfettos_json_rules(key, annotated):
    """Perfetto imports a JSON trace's complete events only where they nest perfectly on their
    (pid, tid) track (its FAQ: overlapping B/E/X events are not supported), names tracks from
    ``process_name``/``thread_name`` metadata, and keys tracks by pid: checked here on the added
    events with exact (Decimal) times, by interval arithmetic, not by tracekit. Fails if two added
    slices partly overlap on one track (Perfetto would drop or cut one), if a track is unnamed,
    or if the added process reuses a pid of the trace (its tracks would mix with the profiler's).
    No Perfetto binary runs here: its trace processor is fetched from the network on first use."""
    _, out, _ = annotated(key)
    events = _load(out, exact=True)["traceEvents"]
    added = [e for e in events if e.get("cat") == "tracekit"]
    assert {e["pid"] for e in added}.isdisjoint(e.get("pid") for e in events if e.get("cat") != "tracekit")
    named = {(e["pid"], e["tid"]) for e in added if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in added)
    tracks = defaultdict(list)
    for e in added:
        if e["ph"] == "X":
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["dur"] >= 0
            tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    if not tracks:  # a training trace: the report found no inference steps, so no step has a slice
        assert analyze(read_trace(_path(key))).steps.empty
        return
    for track, spans in tracks.items():
        assert track in named
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends = []
        for start, stop in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or stop <= open_ends[-1], f"{track}: a slice at {start} crosses the end of its parent"
            open_ends.append(stop)


def test_overlapping_slices_are_spread_over_named_lanes():
    """Two step windows that overlap (an engine scheduling the next step while the GPU runs this
    one) go on two lanes; one that starts as another ends shares its lane. Hand-built slices:
    [0, 10), [5, 15), [10, 20) need exactly 2 lanes, the third back on the first. Fails if
    overlapping slices stay on one track or if every slice gets its own lane."""
    slices = [{"pid": 7, "tid": 1, "ts": Decimal(a), "dur": Decimal(10)} for a in (0, 5, 10)]
    meta = _spread(slices, "tracekit steps")
    assert [e["tid"] for e in slices] == [1, 1 + LANE_STRIDE, 1]
    assert [(m["tid"], m["name"]) for m in meta] == [(1 + LANE_STRIDE, "thread_name")]
    assert "lane 2" in meta[0]["args"]["name"]
