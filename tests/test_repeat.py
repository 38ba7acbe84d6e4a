"""A run recorded twice over must be reported as twice the run: the same steps again, every total
doubled, every rate, share and bound the same. Each real trace (annotated steps, so each copy's
steps are its own) is rewritten with its events repeated once, the copy shifted past the
original's end by a whole number of milliseconds (exact in the trace's float microseconds) and
its ids (correlation, External id, Python id) offset so it links to itself. The expectation
comes from the original's report: no figure of the doubled trace is computed by the test.

What it catches: a total taken from the first step or the first copy, a table cut to its
largest rows before summing (idle_top summed only the 100 largest idle intervals: its groups'
counts and times did not double, 3003 launch gaps grew to 6016-ish; seen failing before the fix),
a step boundary read from the trace's first or last event, a share divided by a count of steps
instead of their time.

Left out, each with its reason: the 90th/99th percentiles (a sample repeated twice interpolates
between other order statistics), the decode trend (the repeat makes it a sawtooth), and the
file's own name and size. A text that quotes a count or a time is compared number by number:
each number is the original's or twice it."""

from __future__ import annotations

import copy
import gzip
import json
import math
import re
import shutil

import pytest
from conftest import SAMPLE_TRACES, real_trace_path
from json_paths import leaves, same

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.markers import sidecar_path_for

IDS = ("correlation", "External id", "Python id", "Python parent id")

# Paths (list indices written []) whose figure is a total over the run's steps or work.
DOUBLED = [
    re.compile(p)
    for p in (
        r"^\.phases\.\w+\.(steps|mixed_steps|time_ms|gpu_time_ms|gpu_busy_ms|gpu_idle_ms|previous_ms|unrecorded_ms|next_ms"
        r"|kernel_ms|kernels|flops|bytes|bytes_estimate)$",
        r"^\.phases\.\w+\.(by_bound|by_limiter|by_category|cost_source_ms|idle_by_cause)\.[^.]+$",
        r"^\.phases\.\w+\.by_category_bound\.[^.]+\.[^.]+$",
        r"^\.phases\.\w+\.idle_top\[\]\.(ms|count)$",
        r"^\.overall\.(kernel_ms|kernels)$",
        r"^\.overall\.by_category\.[^.]+$",
        r"^\.(overall\.)?top_kernels(\.\w+)?\[\]\.(calls|total_ms)$",
        r"^\.roofline\.\w+\.points\[\]\.(calls|time_ms)$",
        r"^\.provenance\.outside_steps\.(units|ms)$",
        r"^\.provenance\.unknown_bound_ms_by_reason\..+$",
        r"^\.findings\[\]\.sum_ms$",
        # The replay (issue 48): its sample counts and every time over the steps double.
        r"^\.replay\.books\.(samples\.\w+\.\w+|unexplained_ms)$",
        r"^\.replay\.critical_path\.\w+\.(\w+|kernel_by_category\.[^.]+)$",
        r"^\.replay\.(what_would_help\[\]\.figures|together\.phases\.\w+)\.(steps|measured_ms)$",
        r"^\.source\.events$",
        r"^\.ranks\[\]\.(step_time_ms|gpu_busy_ms|kernel_ms|collectives|collective_ms|collective_wait_ms)$",
        r"^\.rank_summary\.(step_counts\..+|aligned_steps)$",
    )
]
# Replayed savings: doubled within 1%. The copies meet once, where a what-if that cuts host time
# also cuts the host time between them (the one coupling a repeat adds).
REPLAYED_DOUBLED = [
    re.compile(p)
    for p in (
        r"^\.findings\[\]\.at_stake_ms$",
        r"^\.replay\.what_would_help\[\]\.(saving_ms|figures\.(replayed_ms|saving_ms))$",
        r"^\.replay\.together\.(phases\.\w+\.(replayed_ms|saving_ms)|sum_of_parts_ms\.\w+)$",
    )
]
REPLAYED_EQUAL = [re.compile(r"^\.replay\.(what_would_help\[\]\.figures|together\.phases\.\w+)\.\w+\.replayed$")]
NOT_COMPARED = [
    re.compile(p)
    for p in (
        r"\.p9[09]$",  # percentiles of a sample repeated twice
        r"^\.metrics\.tpot_(slope_ms_per_step|growth)$",  # a trend over a sawtooth
        r"^\.metrics\.(decode_step|tpot)_series_ms\[\]$",  # checked whole below
        r"^\.source\.(path|name|files\[\]|bytes)$",
        r"^\.steps\[\]\.",  # checked step by step below
        r"^\.replay\.books\.steps\[\]\.",  # one entry per step: twice as many
        r"^\.ranks\[\]\.(steps\[\]\.|span_ms$|idle_ms$)",  # likewise
    )
]
# Texts that quote counts and times: compared number by number.
QUOTING = [
    re.compile(p)
    for p in (r"^\.provenance\.(lacks|reasons)\..+$", r"^\.provenance\.notes\[\]$", r"^\.findings\[\]\.text$")
]
STEP_TIMES = ("cpu_start_ms", "cpu_end_ms", "gpu_start_ms", "gpu_end_ms")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _twice(src, dst):
    """``src`` with its events repeated once, shifted by a whole number of ms past its span;
    returns the shift in ms."""
    return repeat(src, dst, 2)


def repeat(src, dst, copies: int) -> float:
    """``src`` with its events ``copies`` times, copy k shifted by k whole numbers of ms past its
    span and its ids offset by k strides; returns one copy's shift in ms."""
    raw = src.read_bytes()
    doc = json.loads(gzip.decompress(raw) if src.suffix == ".gz" else raw)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift_us = (math.ceil((t1 - t0) / 1000) + 1) * 1000
    top = (
        max(
            [
                e["args"][k]
                for e in events
                if isinstance(e.get("args"), dict)
                for k in IDS
                if isinstance(e["args"].get(k), int)
            ]
            + [0]
        )
        + 1
    )
    for n in range(1, copies):
        for e in timed:
            c = copy.deepcopy(e)
            c["ts"] = e["ts"] + n * shift_us
            for k in IDS:
                if isinstance((c.get("args") or {}).get(k), int) and c["args"][k] >= 0:
                    c["args"][k] += n * top
            if isinstance(c.get("id"), int):
                c["id"] += n * top
            events.append(c)
    dst.write_text(json.dumps(doc))
    return shift_us / 1000


def _kind(path):
    g = re.sub(r"\[\d+\]", "[]", path)
    for kind, patterns in (
        ("skip", NOT_COMPARED),
        ("replayed_doubled", REPLAYED_DOUBLED),
        ("replayed_equal", REPLAYED_EQUAL),
        ("doubled", DOUBLED),
        ("quoting", QUOTING),
    ):
        if any(p.search(g) for p in patterns):
            return kind
    return "equal"


def _numbers(text):
    return [float(n.replace(",", "")) for n in NUMBER.findall(text)]


def _compare(want: dict, got: dict):
    bad = []
    # The decode trend's finding quotes the first and last quarters' steps: a sawtooth's differ.
    trend = {k.rsplit(".", 1)[0] for k, v in want.items() if k.endswith(".id") and v == "tpot-growth"}
    for k in sorted(set(want) | set(got)):
        a, b = want.get(k, "<absent>"), got.get(k, "<absent>")
        kind = "skip" if k.rsplit(".", 1)[0] in trend else _kind(k)
        if kind == "doubled" and isinstance(a, (int, float)) and not isinstance(a, bool):
            ok = same(2 * a, b, 1e-9, 1e-6)
        elif kind in ("replayed_doubled", "replayed_equal") and isinstance(a, (int, float)):
            ok = same((2 if kind == "replayed_doubled" else 1) * a, b, 0.01, 1e-3)
        elif kind == "quoting" and isinstance(a, str) and isinstance(b, str):
            na, nb = _numbers(a), _numbers(b)
            ok = (
                NUMBER.sub("#", a) == NUMBER.sub("#", b)
                and len(na) == len(nb)
                and all(same(x, y, 1e-9, 0) or same(2 * x, y, 0.01, 0) for x, y in zip(na, nb))
            )  # 3 digits shown
        elif kind == "skip":
            ok = True
        else:
            ok = same(a, b, 1e-9, 1e-6)
        if not ok:
            bad.append((k, a, b))
    return bad


@pytest.mark.parametrize(
    "key",
    ["gb10_vllm", "rtx3090_vllm", "mi300x_extend", "mi300x_decode", "b300_qwen3_moe", "mi300x_qwen3_moe", "b200_vllm"],
)
def test_a_real_trace_recorded_twice_is_twice_the_run(key, tmp_path):
    src = real_trace_path(key)  # skips where ../shared/traces is absent
    shift_ms = _twice(src, tmp_path / "twice.json")
    want = analyze(read_trace(src)).to_dict()
    got = analyze(read_trace(tmp_path / "twice.json")).to_dict()
    bad = _compare(dict(leaves(want)), dict(leaves(got)))
    assert not bad, bad[:8]
    # The steps: the original's, then the same again later by the shift.
    n = len(want["steps"])
    assert n and len(got["steps"]) == 2 * n
    for i, s in enumerate(want["steps"]):
        for copy_, moved in ((got["steps"][i], 0.0), (got["steps"][n + i], shift_ms)):
            differ = [
                f
                for f in s
                if f != "index"
                and not (
                    same(s[f] + moved, copy_[f], 1e-12, 1e-6)
                    if f in STEP_TIMES and s[f] is not None
                    else s[f] == copy_[f]
                )
            ]
            assert not differ and copy_["index"] == s["index"] + (n if moved else 0), (i, differ)
    series = want["metrics"]["decode_step_series_ms"]
    assert got["metrics"]["decode_step_series_ms"] == series + series
    # A rank's view: its steps twice over; its span from its first work to its last, so the
    # copy's shift is added to it, and its idle is that span less its (doubled) busy time.
    assert len(got.get("ranks") or []) == len(want.get("ranks") or [])
    for r, g in zip(want.get("ranks") or [], got.get("ranks") or []):
        m = len(r["steps"])
        assert g["steps"] == r["steps"] + [{**x, "index": x["index"] + m} for x in r["steps"]]
        assert same(g["span_ms"], r["span_ms"] + shift_ms, 1e-12, 1e-6)
        assert same(g["idle_ms"], r["span_ms"] + shift_ms - 2 * r["gpu_busy_ms"], 1e-12, 1e-6)


def test_a_collected_trace_recorded_twice_is_twice_the_run(tmp_path):
    """The same on a trace tracekit collect recorded (CPU, marker steps, its sidecar kept beside
    the copy: it says what device and peaks the run had)."""
    src = SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"
    dst = tmp_path / "tiny-bs8-twice.pt.trace.json"
    _twice(src, dst)
    shutil.copyfile(SAMPLE_TRACES / "tiny-bs8.tracekit.json", sidecar_path_for(str(dst)))
    want, got = analyze(read_trace(src)).to_dict(), analyze(read_trace(dst)).to_dict()
    assert got["device"] == want["device"]  # the sidecar was found: the run is priced the same
    bad = _compare(dict(leaves(want)), dict(leaves(got)))
    assert not bad, bad[:8]
    assert len(got["steps"]) == 2 * len(want["steps"])
