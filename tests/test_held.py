"""Steps measured from their own work (issue 45, item 1): GPU time the device spent on work the
trace did not record, which a step's work waited on, is its own term in the books
(``unrecorded_ns``), never the step's duration or idle, and no call is blamed for it.

The overlapped step is built from a shared trace: SGLang's B300 decode step, whose
``resolve_future_token_ids`` kernel waits (its overlap scheduler's stream wait) on the previous
batch, which here ended before the profile. The rewrite holds that kernel back by ``HOLD``, as a
previous batch the profile did not record would (the shared MI300X SGLang traces show it): every
event from the kernel's start on moves ``HOLD`` later, the ranges across that moment grow by
``HOLD``, and a ``cudaStreamWaitEvent`` with no event record in the trace precedes its launch.
"""

from __future__ import annotations

import dataclasses
import gzip
import json

import numpy as np
import pytest
from conftest import read_real, real_trace_path

from tracekit.analysis.analyze import analyze
from tracekit.analysis.steps.held import HELD_MIN_NS
from tracekit.analysis.steps.segment import segment
from tracekit.analysis.waiting.intervals import LAUNCH_LATENCY_NS
from tracekit.trace.reader import read_trace

HOLD_US = 250_000.0  # 250 ms of unrecorded work ahead of the step's first kernel on its stream
_GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _held_copy(tmp_path) -> str:
    """The B300 SGLang decode trace with its resolve kernel held back ``HOLD_US`` (module docstring)."""
    doc = json.loads(gzip.open(real_trace_path("b300_qwen3_moe")).read())
    events = doc["traceEvents"]
    held = next(e for e in events if e.get("cat") == "kernel" and "resolve_future_token_ids" in e["name"])
    corr = held["args"]["correlation"]
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == corr)
    at = held["ts"]
    assert launch["ts"] + launch["dur"] < at  # the launch returned before the kernel started
    for e in events:
        if "ts" not in e:
            continue
        if e["ts"] >= at:
            e["ts"] += HOLD_US
        elif e.get("ph") == "X" and e["ts"] + e.get("dur", 0) > at:
            e["dur"] += HOLD_US  # the host ranges across the hold (the step's annotation) last through it
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamWaitEvent",
            "pid": launch["pid"],
            "tid": launch["tid"],
            "ts": launch["ts"] - 0.5,
            "dur": 0.25,
            "args": {"correlation": 10**9, "cbid": 146},
        }
    )
    path = tmp_path / "held.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_held_step_is_measured_from_its_own_work(tmp_path):
    """Bug: a step whose first kernel waited on work the trace did not record took that time as
    its own: its duration grew by the hold (ITL, tokens/s and MBU fell with it), and its idle
    blamed the host for it, as the shared MI300X extend step's "hipMemcpyWithStream blocked the
    host for 493 ms" did."""
    base = segment(read_real("b300_qwen3_moe")).steps
    trace = read_trace(_held_copy(tmp_path))
    seg = segment(trace)
    (s,), (b,) = seg.steps.itertuples(), base.itertuples()
    # By hand: the kernel could start at its launch plus the launch latency plus the trace's
    # smallest launch-to-start delay (the clocks' offset); it started HOLD later than before.
    k, rt = trace.kernels, trace.runtime
    row = int(np.flatnonzero(k["name"].astype(str).str.contains("resolve_future_token_ids").to_numpy())[0])
    issue = int(rt["start_ns"].iat[int(k["launch"].iat[row])])
    launched = k["launch"].to_numpy() >= 0
    offset = int(
        (k["start_ns"].to_numpy()[launched] - rt["start_ns"].to_numpy()[k["launch"].to_numpy()[launched]]).min()
    )
    start = int(k["start_ns"].iat[row])
    hold_ns = int(HOLD_US * 1000)
    assert s.unrecorded_ns == start - (issue + LAUNCH_LATENCY_NS + offset) > HELD_MIN_NS
    assert s.unrecorded_ns == pytest.approx(hold_ns, abs=50_000)  # the hold, give or take the launch's latency
    # The window grew by the hold; the step's own time is the window less the unrecorded work.
    assert s.end_ns - s.cpu_start_ns == b.end_ns - b.cpu_start_ns + hold_ns
    assert s.duration_ns == b.duration_ns + hold_ns - s.unrecorded_ns
    assert s.gpu_busy_ns == b.gpu_busy_ns and s.previous_ns == 0
    assert s.duration_ns == s.gpu_busy_ns + s.gpu_idle_ns
    assert seg.other_work[["row", "kind"]].values.tolist() == [[row, "unrecorded"]]
    assert any("did not record" in n and "in 1 of the 1 steps, 250 ms in all" in n for n in seg.notes), seg.notes


def test_no_call_is_blamed_for_the_hold(tmp_path):
    """Bug: the hold was the step's idle, and its causes (sync, host or wait) and advice named a
    call or op for time the GPU spent on other work."""
    a = analyze(read_trace(_held_copy(tmp_path)))
    base = analyze(read_real("b300_qwen3_moe"))
    (s,), (b,) = a.to_dict()["steps"], base.to_dict()["steps"]
    assert s["unrecorded_ms"] == pytest.approx(HOLD_US / 1000, abs=0.05)
    assert s["gpu_idle_ms"] == pytest.approx(b["gpu_idle_ms"], abs=0.05)
    assert sum(s["idle_by_cause"].values()) == pytest.approx(s["gpu_idle_ms"], rel=1e-9)
    for cause, ms in s["idle_by_cause"].items():  # as in the step the profile found unheld
        assert ms == pytest.approx(b["idle_by_cause"][cause], abs=0.05), cause
    assert a.phases["decode"]["unrecorded_ms"] == pytest.approx(s["unrecorded_ms"], rel=1e-9)
    assert a.phases["decode"]["time_ms"] == pytest.approx(s["duration_ms"], rel=1e-9)
    # No advice puts the hold at stake (the step's own idle is a few milliseconds).
    assert all((f.at_stake_ms or 0.0) < 5.0 for f in a.findings), [f.to_dict() for f in a.findings]


@pytest.mark.parametrize("key, busy_ms, hold_ms", [("mi300x_extend", 492.81, 493.23), ("mi300x_decode", 9.77, 463.24)])
def test_shared_sglang_steps_waited_on_the_previous_batch(key, busy_ms, hold_ms):
    """Bug: the shared MI300X SGLang steps read 987 ms (extend) and 473 ms (decode), half or more
    of it "hipMemcpyWithStream blocked the host": the copy queued behind resolve_future_token_ids,
    which waited (hipStreamWaitEvent, no record in the trace) on the previous batch the profile did
    not record. Each is measured from its own work: busy plus a millisecond or two of idle."""
    (s,) = segment(read_real(key)).steps.itertuples()
    assert s.unrecorded_ns / 1e6 == pytest.approx(hold_ms, abs=0.01)
    assert s.gpu_busy_ns / 1e6 == pytest.approx(busy_ms, abs=0.01)
    assert s.gpu_idle_ns < 2e6 and s.duration_ns == s.gpu_busy_ns + s.gpu_idle_ns


def _union(intervals) -> int:
    """Length of the union of (start, end) intervals, by hand."""
    total, reach = 0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


def test_the_next_steps_work_at_a_steps_end_is_the_next_steps():
    """Bug: a step whose last unit (its sampled tokens' copy) ran late, while the host went on and
    the next step's first units ran in its window (vLLM's asynchronous scheduling), counted the
    time the GPU ran the next step's work as its own idle, blamed on a cause, and its duration
    held it. Built from the shared RTX 3090 vLLM trace: step 5's last unit moved to start as step
    6's fourth unit ends."""
    trace = read_real("rtx3090_vllm")
    base = segment(trace)
    w, st = base.work, base.steps
    mine, nxt = w[w["step"] == 5], w[w["step"] == 6].sort_values("start_ns")
    last = int(mine["end_ns"].idxmax())
    shift = int(nxt["end_ns"].iat[3]) - int(w.at[last, "start_ns"])  # starts as step 6's fourth unit ends
    t = int(w.at[last, "end_ns"]) + shift
    k = trace.kernels.copy()
    k.loc[last, ["start_ns", "end_ns"]] += shift
    seg = segment(dataclasses.replace(trace, kernels=k))
    s5, s6, b5, b6 = seg.steps.loc[5], seg.steps.loc[6], st.loc[5], st.loc[6]
    # By hand: step 6's units before its window opens at t, less where step 5's moved unit runs.
    early = [(int(a), min(int(b), t)) for a, b in zip(nxt["start_ns"], nxt["end_ns"]) if a < t]
    moved = (int(k.at[last, "start_ns"]), t)
    next_ns = _union(early + [moved]) - (moved[1] - moved[0])
    assert s5.end_ns == t and s5.next_ns == next_ns > 0
    # The move also left a hole: a kernel outside every step, queued on its stream behind the moved
    # unit, now starts after the device ran nothing recorded since the moved unit's predecessor
    # ended. By hand: its start less the latest end of the recorded work that started before it.
    moved_w = seg.work
    starts, ends = moved_w["start_ns"].to_numpy(), moved_w["end_ns"].to_numpy()
    hole = 0
    for i in np.flatnonzero((moved_w["step"].to_numpy() < 0) & (starts > int(w.at[last, "start_ns"])) & (starts < t)):
        before = ends[(starts < starts[i])].max()
        if starts[i] - before >= HELD_MIN_NS:
            hole += int(starts[i] - before)
    assert s5.unrecorded_ns == hole > 0
    assert s5.duration_ns == b5.duration_ns + shift - next_ns - hole
    assert s5.gpu_busy_ns == b5.gpu_busy_ns and s5.gpu_idle_ns == b5.gpu_idle_ns + shift - next_ns - hole
    # Step 6 opens when step 5 ends; its units before then are step 5's window's "next step" time.
    assert s6.begin_ns == t and s6.previous_ns == t - s6.cpu_start_ns > 0 and b6.previous_ns == 0
    assert s6.gpu_busy_ns == b6.gpu_busy_ns - _union(early)
    assert (
        seg.steps["end_ns"] - seg.steps["cpu_start_ns"]
        == seg.steps["duration_ns"] + seg.steps["previous_ns"] + seg.steps["unrecorded_ns"] + seg.steps["next_ns"]
    ).all()
    assert any("next step's work" in n and "in 1 of the 17 steps" in n for n in seg.notes), seg.notes
    # The idle causes of step 5 hold no more than its idle: the next step's time is none of it.
    a = analyze(dataclasses.replace(trace, kernels=k)).to_dict()
    s = a["steps"][5]
    assert s["next_ms"] == pytest.approx(next_ns / 1e6) and sum(s["idle_by_cause"].values()) == pytest.approx(
        s["gpu_idle_ms"], rel=1e-9
    )


def test_the_shared_extend_step_reads_its_own_time():
    """Bug (issue 45): the shared SGLang extend step read "Prefill step p50 987 ms", MFU 16.9%,
    15,557 tok/s, and advised making the copy that waited on the previous batch asynchronous, with
    493 ms at stake. By hand: 218.1 TFLOP over its own ~0.494 s against 1,307.4 TFLOP/s is ~33.8%;
    15,360 tokens over it are ~31,000 tok/s."""
    a = analyze(read_real("mi300x_extend"), model="qwen3-8b")
    p = a.phases["prefill"]
    assert a.metrics["prefill_step_ms"]["p50"] == pytest.approx(494.1, abs=0.5)
    assert p["mfu"] == pytest.approx(p["flops"] / (p["time_ms"] / 1e3) / 1307.4e12, rel=0.01)
    assert p["mfu"] == pytest.approx(0.338, abs=0.005)
    assert a.metrics["prefill_tokens_per_s"] == pytest.approx(15_360 / (p["time_ms"] / 1e3), rel=1e-6)
    assert all((f.at_stake_ms or 0.0) < 5.0 for f in a.findings), [f.to_dict() for f in a.findings]
    f = {f.id: f for f in a.findings}["steps-waited-on-unrecorded-work"]
    assert "493 ms in 1 of 1 steps" in f.text


def test_held_intervals_by_hand():
    """Bug guards on the rule itself (steps.held): a kernel held back while the device ran no
    recorded work is held from its launch plus latency plus the clocks' offset (the trace's
    smallest delay) to its start; not a copy that may touch pageable host memory (it starts late
    for host staging), not a graph replay's later kernels (they follow each other inside the
    replay), not a kernel that waited on recorded work, nor one whose wait is within the launch
    latency's reach."""
    import pandas as pd

    from tracekit.analysis.steps.held import held_intervals, staged_copies

    ms = 1_000_000
    # rows: 0 kernel, launched at 0, starts 5 us later (the smallest delay: the offset);
    # 1 kernel launched at 100 us, held to 50 ms; 2 copy launched at 200 us, starting at 60 ms;
    # 3-4 a graph replay launched at 70 ms: its first kernel starts at once, its second 5 ms later;
    # 5 kernel launched at 80 ms behind recorded work on another stream (6: 80-90 ms), starts at 90 ms;
    # 7 kernel launched at 100 ms, starts 0.5 ms later with nothing running: under HELD_MIN_NS.
    kind = np.array(["kernel", "kernel", "memcpy", "kernel", "kernel", "kernel", "kernel", "kernel"])
    issue = np.array([0, 100_000, 200_000, 70 * ms, 70 * ms, 80 * ms, 79 * ms, 100 * ms])
    start = np.array([5_000, 50 * ms, 60 * ms, 70 * ms + 5_000, 75 * ms, 90 * ms, 80 * ms, 100 * ms + 500_000])
    end = start + np.array([1_000, ms, 1_000, 1_000, 1_000, 1_000, 10 * ms, 1_000])
    launch = np.array([0, 1, 2, 3, 3, 4, 5, 6])
    names = pd.Series(["k", "k", "Memcpy HtoD (Pageable -> Device)", "k", "k", "k", "k", "k"], dtype="category")
    staged = staged_copies(kind, names)
    assert staged.tolist() == [False, False, True] + [False] * 5
    one = np.zeros(8, dtype=np.int64)
    rows, lo, hi = held_intervals(kind, start, end, issue, launch, one, staged)
    assert rows.tolist() == [1] and hi.tolist() == [50 * ms]
    assert lo.tolist() == [100_000 + LAUNCH_LATENCY_NS + 5_000]
    # A copy from pinned memory (ROCm's "Host -> Device" does not say) queues as a kernel does:
    # held from the end of the device's last recorded work (row 1, at 51 ms) to its start.
    for name, held in (("Memcpy HtoD (Pinned -> Device)", True), ("Memcpy HtoD (Host -> Device)", False)):
        staged = staged_copies(kind, names.cat.rename_categories({"Memcpy HtoD (Pageable -> Device)": name}))
        rows, lo, hi = held_intervals(kind, start, end, issue, launch, one, staged)
        assert rows.tolist() == ([1, 2] if held else [1]), name
        if held:
            assert (lo[1], hi[1]) == (51 * ms, 60 * ms)
    # A window of a longer trace: the windows before it ran recorded work on the device until
    # 49.5 ms, so row 1 waited on recorded work (0.5 ms at most), not on unrecorded.
    rows, _, _ = held_intervals(kind, start, end, issue, launch, one, staged_copies(kind, names), {0: 49_500_000})
    assert rows.tolist() == []
    # On another device, the recorded work on the first does not explain a wait.
    device = np.array([0, 0, 0, 0, 0, 1, 0, 0])
    rows, lo, hi = held_intervals(kind, start, end, issue, launch, device, staged_copies(kind, names))
    assert rows.tolist() == [1, 5] and lo.tolist()[1] == 80 * ms + LAUNCH_LATENCY_NS + 5_000


@pytest.mark.parametrize("key", ["mi300x_extend", "mi300x_decode"])
def test_a_step_without_annotations_sheds_the_same_hold(key, tmp_path):
    """Bug caught: with its step annotations stripped, SGLang's step comes from its
    forward_batch_generation frame, which opens after the scheduler launched the held
    resolve_future_token_ids kernel; that kernel was in no step, so its hold was dropped and the
    step read 987 ms again (the hold counted as idle). The hold lies in the step's window whichever
    step its kernel belongs to: the stripped step sheds the same unrecorded time."""
    doc = json.loads(gzip.open(real_trace_path(key)).read())
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if e.get("cat") not in ("user_annotation", "gpu_user_annotation")
    ]
    path = tmp_path / f"stripped-{key}.json"
    path.write_text(json.dumps(doc))
    kept, stripped = analyze(read_real(key)), analyze(read_trace(str(path)))
    assert stripped.phase_source != kept.phase_source  # really another segmentation
    (a,), (b,) = kept.steps.itertuples(), stripped.steps.itertuples()
    assert b.unrecorded_ns == a.unrecorded_ns > 400e6
    assert b.duration_ns == b.gpu_busy_ns + b.gpu_idle_ns
    # The frame opens a little later than the annotation: the two steps agree to its lead-in.
    assert abs(b.duration_ns - a.duration_ns) <= abs(b.cpu_start_ns - a.cpu_start_ns) + 1_000_000
