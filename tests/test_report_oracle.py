"""The JSON report's figures, recomputed from the raw trace events by the format's own rules.

Each expectation here is built from the trace file with the ``json`` module and the definitions in
docs/json-schema.md, not from tracekit: a device event is a complete (``ph: X``) event of category
``kernel``, ``gpu_memcpy`` or ``gpu_memset``; it belongs to the step whose CPU range holds the
runtime call that launched it (the two share ``args.correlation``); a step's busy time is the union
of its work, clipped to the step; times are milliseconds after the first step's CPU start. The one
number taken from the report to place the raw events is that origin, found as the shift that puts
every step's ``gpu_start_ms`` on a raw device event's start.

Traces: the real serving traces whose kernels name their launch by ``args.correlation`` (eager
vLLM, graph-replayed vLLM and SGLang, ROCm SGLang, nano-vllm). The H100 Hugging Face trace links
kernels to launches by ``ac2g`` flow events only, which this oracle does not read, so it is not here.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict

import numpy as np
import pytest
from conftest import read_real, real_trace_path

TRACES = ["rtx3090_vllm", "gb10_vllm", "b300_qwen3_moe", "mi300x_extend", "rtx4080_nanovllm"]
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime")
MS = 1e-3  # a microsecond, in ms: the trace's own resolution is finer; rounding stays below it


class Raw:
    """One trace's device events, as the file states them."""

    def __init__(self, key: str):
        with gzip.open(real_trace_path(key), "rt") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        launch = {
            e["args"]["correlation"]: e["ts"]
            for e in events
            if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
        }
        self.device = [e for e in events if e.get("cat") in DEVICE_CATS]
        self.launched = np.array([launch.get((e.get("args") or {}).get("correlation"), np.nan) for e in self.device])
        self.start = np.array([e["ts"] for e in self.device], dtype=float)
        self.end = self.start + np.array([e["dur"] for e in self.device], dtype=float)
        self.name = [e["name"] for e in self.device]
        self.stream = [(e.get("args") or {}).get("stream") for e in self.device]

    def origin(self, steps: list[dict]) -> float:
        """The raw time (us) of the report's 0 ms: the shift putting every step's GPU start on a raw start."""
        starts = np.sort(self.start)
        g = np.array([s["gpu_start_ms"] for s in steps]) * 1e3
        for shift in starts - g[0]:
            at = np.clip(np.searchsorted(starts, g + shift), 0, len(starts) - 1)
            near = np.minimum(np.abs(starts[at] - (g + shift)), np.abs(starts[np.maximum(at - 1, 0)] - (g + shift)))
            if (near < 0.5).all():
                return float(shift)
        raise AssertionError("no shift puts every step's gpu_start_ms on a raw device event")

    def of_step(self, step: dict, t0: float) -> np.ndarray:
        lo, hi = t0 + step["cpu_start_ms"] * 1e3, t0 + step["cpu_end_ms"] * 1e3
        return (self.launched >= lo) & (self.launched <= hi)


def union_us(start: np.ndarray, end: np.ndarray) -> float:
    order = np.argsort(start)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in zip(start[order], end[order]):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def step_start(step: dict, t0: float) -> float:
    """Raw time of a step's start: its window runs to the later of its CPU end and its last GPU end,
    and holds its duration and the GPU's time on other work (unrecorded work its work waited on,
    the next step's work)."""
    window = step["duration_ms"] + step["unrecorded_ms"] + step["next_ms"]
    return t0 + (max(step["cpu_end_ms"], step["gpu_end_ms"]) - window) * 1e3


_CASES: dict = {}


def case(key: str):
    """(report JSON, raw events, origin) per trace, made once."""
    if key not in _CASES:
        from tracekit.analysis import analyze
        from tracekit.report import render

        raw = Raw(key)
        report = json.loads(render(analyze(read_real(key)), "json"))
        _CASES[key] = report, raw, raw.origin(report["steps"]) if report["steps"] else None
    return _CASES[key]


@pytest.mark.parametrize("key", TRACES)
def test_overall_counts_and_times_every_device_event(key):
    """catches: an event category dropped or counted twice, a unit slip (us/ns/ms) in kernel time,
    category times that do not add up to the whole, or a share taken of the wrong total."""
    d, raw, _ = case(key)
    total_ms = (raw.end - raw.start).sum() / 1e3
    o = d["overall"]
    assert o["kernels"] == len(raw.device)
    assert o["kernel_ms"] == pytest.approx(total_ms, abs=MS)
    assert sum(o["by_category"].values()) == pytest.approx(total_ms, abs=MS)
    for cat, ms in o["by_category"].items():
        assert o["by_category_share"][cat] == pytest.approx(ms / total_ms, rel=1e-5)
    by_name = defaultdict(lambda: [0, 0.0])
    for n, s, e in zip(raw.name, raw.start, raw.end):
        by_name[n][0] += 1
        by_name[n][1] += (e - s) / 1e3
    for row in o["top_kernels"]:
        assert (row["calls"], row["total_ms"]) == (
            by_name[row["name"]][0],
            pytest.approx(by_name[row["name"]][1], abs=MS),
        )
    largest = sorted((v[1] for v in by_name.values()), reverse=True)[: len(o["top_kernels"])]
    assert [r["total_ms"] for r in o["top_kernels"]] == pytest.approx(largest, abs=MS)


@pytest.mark.parametrize("key", TRACES)
def test_each_step_holds_the_work_it_launched(key):
    """catches: a step boundary off by one event, work of one step booked to its neighbour, busy time
    not the union (overlapping streams counted twice) or not clipped to the step, idle that is not
    duration - busy, causes that do not sum to the idle, mbu not bytes / duration / bandwidth."""
    d, raw, t0 = case(key)
    bandwidth = d["device"]["peak_bandwidth"]
    for s in d["steps"]:
        mine = raw.of_step(s, t0)
        start = step_start(s, t0)
        assert s["kernels"] == int(mine.sum()), s["index"]
        busy = union_us(np.maximum(raw.start[mine], start), raw.end[mine]) / 1e3
        assert s["gpu_busy_ms"] == pytest.approx(busy, abs=MS), s["index"]
        assert s["gpu_start_ms"] == pytest.approx((raw.start[mine].min() - t0) / 1e3, abs=MS)
        assert s["gpu_end_ms"] == pytest.approx((raw.end[mine].max() - t0) / 1e3, abs=MS)
        assert s["gpu_idle_ms"] == pytest.approx(s["duration_ms"] - busy, abs=MS)
        assert sum(s["idle_by_cause"].values()) == pytest.approx(s["gpu_idle_ms"], abs=MS)
        assert s["launch_gap_ms"] == s["idle_by_cause"]["launch"]
        if s["bytes"]:
            assert s["mbu"] == pytest.approx(s["bytes"] / (s["duration_ms"] / 1e3) / bandwidth, rel=1e-9)


def _phase_of_steps(d):
    """phase -> steps whose whole work is that phase (traces with a mixed step are checked whole)."""
    out = defaultdict(list)
    for s in d["steps"]:
        out[s["phase"]].append(s)
    return out


@pytest.mark.parametrize("key", TRACES)
def test_phase_totals_are_the_sums_of_their_steps(key):
    """catches: a step left out of (or counted twice in) its phase, a mixed step's parts not summing to
    the step, phase kernel time not the raw durations of its steps' work, an idle share of the wrong base."""
    d, raw, t0 = case(key)
    by_phase = _phase_of_steps(d)
    phases = d["phases"]
    if "mixed" in by_phase:  # split mixed steps count in both phases by their parts: check the whole run
        steps = d["steps"]
        assert sum(p["gpu_busy_ms"] for p in phases.values()) == pytest.approx(
            sum(s["gpu_busy_ms"] for s in steps), abs=MS
        )
        assert sum(p["time_ms"] for p in phases.values()) == pytest.approx(sum(s["duration_ms"] for s in steps), abs=MS)
        return
    assert set(phases) == set(by_phase) - {"unknown"}
    for phase, steps in by_phase.items():
        if phase == "unknown":
            continue
        p = phases[phase]
        mine = np.zeros(len(raw.device), bool)
        for s in steps:
            mine |= raw.of_step(s, t0)
        assert p["steps"] == len(steps)
        assert p["time_ms"] == pytest.approx(sum(s["duration_ms"] for s in steps), abs=MS)
        assert p["gpu_busy_ms"] == pytest.approx(sum(s["gpu_busy_ms"] for s in steps), abs=MS)
        assert p["gpu_idle_ms"] == pytest.approx(p["time_ms"] - p["gpu_busy_ms"], abs=MS)
        assert p["idle_share"] == pytest.approx(p["gpu_idle_ms"] / p["time_ms"], abs=1e-9)
        assert p["kernel_ms"] == pytest.approx((raw.end[mine] - raw.start[mine]).sum() / 1e3, abs=MS)
        # The phase's top kernels: per kernel name, the raw calls and time of its steps' work.
        calls, total = defaultdict(int), defaultdict(float)
        for i in np.flatnonzero(mine):
            calls[raw.name[i]] += 1
            total[raw.name[i]] += (raw.end[i] - raw.start[i]) / 1e3
        rows = d["top_kernels"][phase]
        assert len(rows) == min(15, len(calls))
        for r in rows:
            assert r["calls"] == calls[r["name"]]
            assert r["total_ms"] == pytest.approx(total[r["name"]], abs=MS)
            assert r["mean_us"] == pytest.approx(total[r["name"]] * 1e3 / calls[r["name"]], abs=1e-3)
            assert r["share"] == pytest.approx(total[r["name"]] / p["kernel_ms"], abs=MS / p["kernel_ms"])
        assert [r["total_ms"] for r in rows] == pytest.approx(sorted(total.values(), reverse=True)[: len(rows)], abs=MS)


@pytest.mark.parametrize("key", TRACES)
def test_decode_series_is_the_decode_steps_durations(key):
    """catches: the inter-token series built from the wrong steps or out of order, and a mean or
    median that is not the series' own."""
    d, _, _ = case(key)
    decode = [s["duration_ms"] for s in d["steps"] if s["phase"] in ("decode", "mixed")]
    m = d["metrics"]
    if not any(s["phase"] == "decode" for s in d["steps"]):
        assert m["decode_step_series_ms"] == [] and m["decode_step_ms"] is None
        return
    assert m["decode_step_series_ms"] == pytest.approx(decode, abs=MS)
    assert m["decode_step_ms"]["mean"] == pytest.approx(sum(decode) / len(decode), abs=MS)
    assert m["decode_step_ms"]["p50"] == pytest.approx(float(np.median(decode)), abs=MS)


@pytest.mark.parametrize("key", TRACES)
def test_roofline_points_follow_the_roofline(key):
    """catches: a point's time in the wrong unit or negative, more time on the chart than the phase ran,
    a roof that is not min(peak, intensity x bandwidth), a roof fraction of the wrong roof, a bound on
    the wrong side of the ridge."""
    d, _, _ = case(key)
    for phase, r in d["roofline"].items():
        if r["reason"]:
            assert r["points"] == []
            continue
        peaks = {(c["dtype"], c["unit"]): c["peak_flops"] for c in r["roofs"]["compute"]}
        bw = r["roofs"]["bandwidth"]
        assert 0 < sum(p["time_ms"] for p in r["points"]) <= d["phases"][phase]["kernel_ms"] + MS
        for p in r["points"]:
            assert p["time_ms"] > 0 and p["calls"] >= 1
            peak = peaks[(p["dtype"], p["unit"])]
            if p["intensity"] is None or p["roof_flops"] is None:
                continue
            if p["intensity"] == 0:  # copies: no FLOPs, so only the bandwidth roof applies
                assert p["roof_flops"] == 0 and p["achieved_flops"] == 0 and p["bound"] == "memory"
                continue
            assert p["roof_flops"] == pytest.approx(min(peak, p["intensity"] * bw), rel=1e-9)
            if p["roof_fraction"] is not None:
                assert p["roof_fraction"] == pytest.approx(p["achieved_flops"] / p["roof_flops"], rel=1e-9)
            if p["bound"] in ("compute", "memory") and not math.isclose(p["intensity"], peak / bw, rel_tol=1e-9):
                assert p["bound"] == ("compute" if p["intensity"] > peak / bw else "memory"), p["label"]


@pytest.mark.parametrize("key", TRACES)
def test_timeline_stream_lanes_cover_the_steps_kernels(key):
    """catches: timeline times off the step's start or in the wrong unit, a kernel drawn on the wrong
    stream's lane or not drawn, a timeline whose span or kernel count is not its step's."""
    d, raw, t0 = case(key)
    steps = {s["index"]: s for s in d["steps"]}
    assert d["timelines"]
    for t in d["timelines"]:
        s = steps[t["step"]]
        assert t["duration_ms"] == pytest.approx(s["duration_ms"], abs=MS)
        assert t["kernels"] == s["kernels"]
        # A timeline is drawn from the step's CPU start to its last end, so that a GPU running
        # behind shows (the step's duration may start later, at the previous step's last work).
        assert t["start_ms"] == pytest.approx(s["cpu_start_ms"], abs=MS)
        assert t["span_ms"] == pytest.approx(max(s["cpu_end_ms"], s["gpu_end_ms"]) - s["cpu_start_ms"], abs=MS)
        start = t0 + t["start_ms"] * 1e3
        lanes = {lane["name"]: lane["segments"] for lane in t["lanes"] if lane["kind"] == "stream"}
        mine = np.flatnonzero(raw.of_step(s, t0))
        for i in mine:
            segs = lanes[f"GPU stream {raw.stream[i]}"]
            a, b = (raw.start[i] - start) / 1e3, (raw.end[i] - start) / 1e3
            lo = np.array([g[0] for g in segs])
            k = np.searchsorted(lo, a + 1e-4, side="right") - 1  # segments are rounded to 0.1 us
            assert k >= 0 and segs[k][0] - 1e-4 <= a and b <= segs[k][1] + 1e-4, (raw.name[i], a, b)
        drawn = sum(g[1] - g[0] for segs in lanes.values() for g in segs)
        assert drawn >= s["gpu_busy_ms"] - 1e-3 * max(1, len(mine))
