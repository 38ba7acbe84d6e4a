"""What the report's charts, the comparison's view-model and its JUnit file are built to hold, read
back and checked against figures from outside the code under test.

The charts are read as the page gets them: each ``json_item`` is serialised to JSON, read back by
``json.loads`` and rebuilt into Bokeh models (``Document.from_json``), so a test reads a glyph's
data source, an axis range or a tooltip as BokehJS would. The expected values are hand arithmetic
on small hand-built inputs, or the analysis and comparison documents' own figures (the JSON
contract, docs/json-schema.md) that a chart or a table is there to show; the JUnit file is read
back with ElementTree against the JUnit format (one testsuite, one testcase per gate, ``tests``,
``failures``, ``errors`` and ``skipped`` counts that agree with the cases) and docs/compare.md.
Covers tracekit/report/charts.py, report/compare/charts.py, report/compare/view.py and
report/compare/junit.py.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from conftest import SAMPLE_TRACES

from tracekit import formatting as fmt

BS1 = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
BS8 = SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"
BOUND_NAMES = {  # the report's words for each bound (docs/bounds.md), the idle part by the device
    "compute": "compute-bound",
    "memory": "memory-bound",
    "interconnect": "interconnect-bound",
    "unknown": "unknown bound",
}
ORDER = ("compute", "memory", "interconnect", "unknown", "idle")  # docs/json-schema.md's by_bound keys


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    """(analysis of tiny-bs1, comparison tiny-bs1 -> tiny-bs8), as JSON documents (``to_dict``)."""
    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.compare.comparison import compare

    a, b = analyze(read_trace(str(BS1))), analyze(read_trace(str(BS8)))
    return a.to_dict(), compare(a, b).to_dict()


def _fig(chart: dict):
    """The Bokeh figure of a chart, rebuilt from its serialised ``json_item``."""
    from bokeh.document import Document

    item = json.loads(json.dumps(chart["item"]))
    (root,) = Document.from_json(item["doc"]).roots
    return root


def _glyphs(fig, name: str) -> list:
    """The figure's glyph renderers drawing glyph ``name`` ("HBar", "VBar", "Line", "Scatter")."""
    return [r for r in fig.renderers if type(r.glyph).__name__ == name]


def _data(renderer) -> dict:
    return dict(renderer.data_source.data)


def _xy(renderer) -> tuple[list, list]:
    """The x and y columns a glyph draws (its ``x``/``y`` properties name them)."""
    data = _data(renderer)
    return list(data[renderer.glyph.x.field]), list(data[renderer.glyph.y.field])


def _tooltips(fig) -> list[tuple[str, str]]:
    (hover,) = [t for t in fig.tools if type(t).__name__ == "HoverTool"]
    return [tuple(t) for t in hover.tooltips]


def _dashed(renderer) -> bool:
    """Whether a line glyph is drawn dashed (Bokeh keeps "dashed" as the pattern [6])."""
    return renderer.glyph.line_dash not in ([], "solid")


def _value(v):
    """A glyph property's number, whether Bokeh keeps it bare or as ``{"value": x}``."""
    return v["value"] if isinstance(v, dict) else getattr(v, "value", v)


def _number(text: str) -> float:
    """The figure a formatted cell shows: "6.18 ms" -> 6.18, "58.4%" -> 58.4, "1,115 tok/s" -> 1115."""
    return float(text.split()[0].rstrip("%x").replace(",", ""))


def _close(text: str, x: float) -> bool:
    """A cell written with three significant digits (formatting.num) shows ``x``."""
    return _number(text) == pytest.approx(x, rel=5e-3, abs=1e-9)


def _rows(data: dict) -> dict[str, list[int]]:
    """Segment indexes of a stacked bar chart's source, by the bar (``y``) they belong to."""
    out: dict[str, list[int]] = {}
    for i, y in enumerate(data["y"]):
        out.setdefault(y, []).append(i)
    return out


def _assert_stacked_from_zero(data: dict) -> None:
    """Each bar's segments touch end to end from 0: the next segment starts where one ends."""
    for y, idx in _rows(data).items():
        assert data["left"][idx[0]] == 0, y
        for a, b in zip(idx, idx[1:]):
            assert data["left"][b] == pytest.approx(data["right"][a]), y


# --- report/charts.py: the phase breakdown ------------------------------------------------------


def test_each_breakdown_segment_is_its_phases_share_and_time_from_the_analysis(tiny):
    """Bugs caught: a segment drawn with another bound's or category's share (an index or key slip),
    its time tooltip showing the share or another part's ms, a share shown as a fraction instead of
    a percentage, segments not stacked end to end. Rule: docs/json-schema.md (``by_bound`` and
    ``by_limiter`` in ms, ``by_*_share`` their fractions; ``by_category_share`` of ``kernel_ms``);
    the breakdown draws, per phase, one 100 % bar of each. Expected: the tiny-bs1 analysis's own
    figures, segment by segment in the order of the JSON's keys, zero parts left out; a CPU trace's
    idle part is "CPU idle"."""
    from tracekit.report.charts import phase_breakdown
    from tracekit.report.view import limiter_labels, phase_label

    data, _ = tiny
    bound_chart, cat_chart = phase_breakdown(data)["charts"]
    bound, cats = _data(_glyphs(_fig(bound_chart), "HBar")[0]), _data(_glyphs(_fig(cat_chart), "HBar")[0])
    words = limiter_labels(data)
    expected_bound, expected_cat = {}, {}
    for phase, p in data["phases"].items():
        expected_bound[f"{phase_label(phase)}: bound"] = [
            (BOUND_NAMES.get(b, "CPU idle"), p["by_bound_share"][b], p["by_bound"][b])
            for b in ORDER
            if p["by_bound_share"].get(b)
        ]
        expected_bound[f"{phase_label(phase)}: limiter"] = [
            ("CPU idle" if k == "idle" else f"limited by {words[k]}", p["by_limiter_share"][k], p["by_limiter"][k])
            for k in p["by_limiter"]
            if p["by_limiter_share"].get(k)
        ]
        cat_order = list(dict.fromkeys(c for q in data["phases"].values() for c in q["by_category"]))
        expected_cat[phase_label(phase)] = [
            (c, p["by_category_share"][c], p["by_category"][c]) for c in cat_order if p["by_category_share"].get(c)
        ]
    for src, expected in ((bound, expected_bound), (cats, expected_cat)):
        rows = _rows(src)
        assert set(rows) == set(expected)
        for y, idx in rows.items():
            assert [src["part"][i] for i in idx] == [e[0] for e in expected[y]], y
            for i, (_, share, ms) in zip(idx, expected[y]):
                assert src["right"][i] - src["left"][i] == pytest.approx(share), (y, src["part"][i])
                assert _close(src["ms"][i], ms) and src["ms"][i].endswith(" ms"), (y, src["ms"][i], ms)
                assert _close(src["share"][i], share * 100) and src["share"][i].endswith("%")
            assert src["right"][idx[-1]] == pytest.approx(1.0, abs=1e-6), y  # a whole phase: 100 %
        _assert_stacked_from_zero(src)


def test_the_breakdown_lists_phases_top_down_in_the_analysis_order(tiny):
    """Bug caught: the bars' order flipped (Bokeh lists a categorical axis's factors bottom up, so the
    first row must be the last factor), or a phase's limiter row put above its own bound row. Rule:
    the comment "first row on top"; a report reads its phases in the analysis's order (prefill, then
    decode), each phase's bound bar, then its limiter bar."""
    from tracekit.report.charts import phase_breakdown

    data, _ = tiny
    assert list(data["phases"]) == ["prefill", "decode"]
    bound_chart, cat_chart = phase_breakdown(data)["charts"]
    assert list(_fig(bound_chart).y_range.factors)[::-1] == [
        "Prefill: bound",
        "Prefill: limiter",
        "Decode: bound",
        "Decode: limiter",
    ]
    assert list(_fig(cat_chart).y_range.factors)[::-1] == ["Prefill", "Decode"]


def test_a_breakdown_legend_entry_is_one_colour_in_every_bar(tiny):
    """Bug caught: a category (or bound) coloured by its position within one phase instead of one
    colour for the chart, so that the legend (grouped by the part's name) shows one swatch for
    segments of two colours. Rule: a legend entry names one colour; the two charts of a phase are
    read side by side; the categories, each its own colour. The tiny-bs1 phases hold the same
    categories in different orders of time."""
    from tracekit.report.charts import phase_breakdown

    data, _ = tiny
    for chart in phase_breakdown(data)["charts"]:
        src = _data(_glyphs(_fig(chart), "HBar")[0])
        colours: dict[str, set] = {}
        for part, colour in zip(src["part"], src["color"]):
            colours.setdefault(part, set()).add(colour)
        assert all(len(c) == 1 for c in colours.values()), colours
    # Categories are told apart by colour alone (a limiter shares its bound's colour on purpose).
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)


def test_the_breakdown_is_tall_enough_for_its_longest_legend(tiny):
    """Bug caught: the chart's height made room for the category legend only (the comment: "room for
    the category legend", 84 px plus 21 px an entry), while the bound chart beside it carries the
    bound and limiter parts in one legend: with a limiter row per phase that is the longer legend
    (tiny-bs1: 4 bound parts and 5 limiter parts beside "CPU idle", 9 entries, against 7 categories),
    and its last entries were cut off. Rule: 84 px plus 21 px a legend entry, for each chart's own
    legend, and the two charts side by side share one height; 40 px a bar row above 90 (the rule
    tests/test_mutants_report.py's breakdown test states) still counts, for the chart with more rows."""
    from tracekit.report.charts import phase_breakdown

    data, _ = tiny
    figs = [_fig(c) for c in phase_breakdown(data)["charts"]]
    assert len({f.height for f in figs}) == 1
    for f in figs:
        entries = len(set(_data(_glyphs(f, "HBar")[0])["part"]))
        assert f.height >= 84 + 21 * entries, (f.title.text, entries, f.height)
    assert figs[0].height >= 90 + 40 * 4  # four bars: bound and limiter of two phases

    # The taller chart's bar rows count too, where no legend is long: two phases, each with a bound
    # and a limiter bar (4 rows) beside their two categories (2 rows), 4 legend entries a chart.
    def phase(ms):
        two = {"compute": 0.5, "memory": 0.5}
        return {
            "by_bound": {"compute": ms, "memory": ms},
            "by_bound_share": two,
            "by_limiter": {"compute": ms, "memory": ms},
            "by_limiter_share": two,
            "by_category": {"gemm": ms, "attention": ms},
            "by_category_share": {"gemm": 0.5, "attention": 0.5},
        }

    small = phase_breakdown({"device": {"type": "gpu"}, "phases": {"prefill": phase(2.0), "decode": phase(1.0)}})
    assert [_fig(c).height >= 90 + 40 * 4 for c in small["charts"]] == [True, True]


def test_a_training_trace_breaks_down_its_whole_kernel_time_by_category():
    """Bug caught: the no-phase path reading a phase's figures, dropping the bound chart's absence,
    or drawing a trace with no kernel time. Rule: phase_breakdown's fallback (a training trace has
    only ``overall``, docs/json-schema.md): one "Whole trace" bar of ``overall.by_category_share``;
    nothing to break down without kernel time, said in a sentence. By hand: gemm 6 ms, other 2 ms:
    75 % and 25 %."""
    from tracekit.report.charts import phase_breakdown

    overall = {
        "kernel_ms": 8.0,
        "by_category": {"gemm": 6.0, "other": 2.0},
        "by_category_share": {"gemm": 0.75, "other": 0.25},
    }
    out = phase_breakdown({"device": {"type": "gpu"}, "phases": {}, "overall": overall})
    (chart,) = out["charts"]
    assert chart["id"] == "tk-chart-category"
    src = _data(_glyphs(_fig(chart), "HBar")[0])
    assert src["y"] == ["Whole trace"] * 2 and src["part"] == ["gemm", "other"]
    assert src["right"] == pytest.approx([0.75, 1.0]) and src["ms"] == ["6.00 ms", "2.00 ms"]
    assert "reason" in phase_breakdown({"device": {}, "phases": {}, "overall": {"kernel_ms": 0.0}})


# --- report/charts.py: decode steps over time ----------------------------------------------------


def _steps(rows):
    """Steps of the analysis JSON (docs/json-schema.md ``steps[]``): (index, phase, busy, idle, duration, gap)."""
    return [
        {
            "index": i,
            "phase": ph,
            "gpu_busy_ms": busy,
            "gpu_idle_ms": idle,
            "duration_ms": dur,
            "launch_gap_ms": gap,
            "kernels": 10 + i,
            "label": f"step {i}",
        }
        for i, ph, busy, idle, dur, gap in rows
    ]


HAND_STEPS = _steps(
    [
        (0, "prefill", 40.0, 2.0, 42.0, 1.0),
        (1, "decode", 3.0, 1.0, 4.5, 0.5),
        (2, "decode", 2.0, 1.5, 3.5, 0.25),
        (3, "mixed", 6.0, 0.5, 6.5, 0.125),
        (4, "decode", 2.5, 1.0, 3.0, 0.75),
    ]
)


def test_the_decode_chart_draws_each_decode_and_mixed_steps_own_times_in_ms():
    """Bugs caught: prefill steps drawn (a 42 ms prefill would dwarf the decode bars), mixed steps
    left out, busy and idle swapped, a figure scaled out of ms, the duration or launch-gap line fed
    another column, a tooltip naming another step's field. Rule: the comment (mixed steps hold decode
    work too), the y axis label "ms" and docs/json-schema.md's ``steps[]`` fields (``gpu_busy_ms``,
    ``gpu_idle_ms``, ``duration_ms``, ``launch_gap_ms``). Expected: the hand-built steps 1-4."""
    from tracekit.report.charts import decode_steps

    chart = decode_steps({"device": {"type": "gpu"}, "steps": HAND_STEPS})
    fig = _fig(chart)
    assert fig.yaxis[0].axis_label == "ms"
    bars = _glyphs(fig, "VBar")
    assert len(bars) == 2  # busy, then idle stacked on it
    src = _data(bars[0])
    shown = HAND_STEPS[1:]
    assert src["x"] == [s["index"] for s in shown]
    assert src["busy"] == [s["gpu_busy_ms"] for s in shown]
    assert src["idle"] == [s["gpu_idle_ms"] for s in shown]
    lines = {tuple(_xy(r)[1]) for r in _glyphs(fig, "Line")}
    assert lines == {(4.5, 3.5, 6.5, 3.0), (0.5, 0.25, 0.125, 0.75)}  # durations, launch gaps
    tips = dict((label, field) for label, field in _tooltips(fig))
    for label, ms in (("duration", "duration_ms"), ("busy", "gpu_busy_ms"), ("idle", "gpu_idle_ms")):
        texts = src[tips[label].lstrip("@")]
        assert [_number(t) for t in texts] == pytest.approx([s[ms] for s in shown]), label
        assert all(t.endswith(" ms") for t in texts)
    assert src[tips["step"].lstrip("@")] == [1, 2, 3, 4]
    assert src[tips["launch gaps"].lstrip("@")] == ["0.500 ms", "0.250 ms", "0.125 ms", "0.750 ms"]
    assert src[tips["kernels"].lstrip("@")] == ["11", "12", "13", "14"]
    assert src[tips["annotation"].lstrip("@")] == ["step 1", "step 2", "step 3", "step 4"]


def _bar_width(fig) -> float:
    return float(_value(_glyphs(fig, "VBar")[0].glyph.width))


def _assert_decode_axes_hold_every_bar(fig) -> None:
    src = _data(_glyphs(fig, "VBar")[0])
    half = _bar_width(fig) / 2
    assert fig.x_range.start <= min(src["x"]) - half and max(src["x"]) + half <= fig.x_range.end
    tops = [b + i for b, i in zip(src["busy"], src["idle"])] + list(src["duration"]) + list(src["gap"])
    assert fig.y_range.start == 0 and max(tops) <= fig.y_range.end


def test_the_decode_charts_axes_hold_every_bar_and_line_whole():
    """Bugs caught: a y axis ending at or below the tallest stack or duration (the slowest step, the
    one a reader looks for, cut off), an axis not starting at 0 ms (bars of time read against 0), an
    x axis cutting the first or last bar. Rule: a bar chart of times starts at 0 and holds its data.
    By hand: the tallest figure is step 3's 6.5 ms (6 + 0.5 ms and a 6.5 ms duration); the bars are
    centred on steps 1 and 4 at the ends."""
    from tracekit.report.charts import decode_steps

    fig = _fig(decode_steps({"device": {"type": "gpu"}, "steps": HAND_STEPS}))
    _assert_decode_axes_hold_every_bar(fig)
    assert fig.y_range.end > 6.5
    two = _fig(decode_steps({"device": {"type": "gpu"}, "steps": HAND_STEPS[1:3]}))
    _assert_decode_axes_hold_every_bar(two)


def test_a_long_decode_run_is_thinned_to_every_kth_step_and_says_so():
    """Bugs caught: a stride off by one (more bars than MAX_STEP_BARS, or a step skipped too many),
    bars not widened with the stride (slivers with gaps wider than themselves), a note with the wrong
    count or stride. Rule: the comment on MAX_STEP_BARS (at most that many steps, every k-th beyond
    it, said on the page). By hand: 4,500 decode steps need k = ceil(4500 / 2000) = 3: steps 0, 3, 6,
    ..., 4497 (1,500 bars); each bar fills the same share of its slot as an unthinned chart's bar
    does of its one step."""
    from tracekit.report.charts import MAX_STEP_BARS, decode_steps

    many = _steps([(i, "decode", 1.0 + (i % 7) / 10, 0.5, 1.8, 0.1) for i in range(4500)])
    chart = decode_steps({"device": {"type": "gpu"}, "steps": many})
    fig = _fig(chart)
    src = _data(_glyphs(fig, "VBar")[0])
    assert MAX_STEP_BARS == 2000
    assert src["x"] == list(range(0, 4500, 3))
    assert chart["note"] == "4,500 decode steps: one in every 3 is shown."
    unthinned = _fig(decode_steps({"device": {"type": "gpu"}, "steps": many[:50]}))
    assert _bar_width(fig) / 3 == pytest.approx(_bar_width(unthinned) / 1)
    assert _bar_width(fig) < 3  # neighbours do not overlap
    _assert_decode_axes_hold_every_bar(fig)
    assert decode_steps({"device": {"type": "gpu"}, "steps": many[:50]})["note"] is None


def test_only_a_gpu_decode_chart_draws_launch_gaps():
    """Bug caught: the dashed launch-gap line (GPU waiting for the CPU) drawn on a CPU trace, where
    nothing launches, or left out on a GPU one; ``gaps`` (which the caption reads) saying otherwise;
    the idle legend naming the wrong device. Rule: the chart's own return comment (``gaps``: whether
    the dashed line is drawn) and the tooltip's "n/a (CPU trace)"."""
    from tracekit.report.charts import decode_steps

    gpu = decode_steps({"device": {"type": "gpu"}, "steps": HAND_STEPS})
    cpu = decode_steps({"device": {"type": "cpu"}, "steps": HAND_STEPS})
    assert gpu["gaps"] is True and cpu["gaps"] is False
    dashed = [r for r in _glyphs(_fig(gpu), "Line") if _dashed(r)]
    assert len(dashed) == 1 and not [r for r in _glyphs(_fig(cpu), "Line") if _dashed(r)]
    cpu_fig = _fig(cpu)
    assert set(_data(_glyphs(cpu_fig, "VBar")[0])["gap_t"]) == {"n/a (CPU trace)"}
    labels = [item.label.value for item in cpu_fig.legend[0].items]
    assert labels[0] == "CPU busy" and labels[1].startswith("CPU idle")


def test_one_decode_step_or_none_is_a_sentence():
    """Bug caught: one step drawn as a lone bar, its sentence giving another figure, or a training run
    said to lack decode steps for another reason. Rule: the comments (one bar on an axis of made-up
    neighbours says less than a sentence); by hand: step 2's 3.50 ms, 2.00 ms busy, 1.50 ms idle."""
    from tracekit.report.charts import decode_steps

    one = decode_steps({"device": {"type": "gpu"}, "steps": HAND_STEPS[:1] + HAND_STEPS[2:3]})
    assert "item" not in one
    assert one["reason"] == (
        "One decode step (step 2), so nothing changes over time: it took 3.50 ms, GPU busy 2.00 ms and idle 1.50 ms."
    )
    training = decode_steps({"run_kind": "training", "steps": []})
    assert "training run" in training["reason"]


# --- report/charts.py: a step's timeline ---------------------------------------------------------


def _timeline(lanes, keys, span=10.0):
    tl = {
        "keys": keys,
        "labels": ["aten::mm", "cudaStreamSynchronize"],
        "lanes": lanes,
        "span_ms": span,
        "phase": "decode",
        "step": 7,
        "why": "slowest step",
        "duration_ms": span,
        "kernels": 1234,
    }
    return {"device": {"type": "gpu"}, "timelines": [{"phase": "prefill"}, tl]}


TIMELINE_LANES = [
    {"name": "host thread 1: ops", "kind": "host_ops", "segments": [[0.0, 9.0, 3, 0, 1]]},
    {"name": "host thread 1: runtime calls", "kind": "host_calls", "segments": [[6.0, 9.5, 2, 1, 2]]},
    {"name": "GPU idle, by cause", "kind": "idle", "segments": [[2.0, 2.25, 2, 1, 1], [5.0, 6.0, 2, 1, 1]]},
    {"name": "stream 7", "kind": "stream", "segments": [[1.0, 1.0, 0, 0, 1], [2.5, 5.0, 1, 0, 3]]},
    {"name": "critical path", "kind": "critical", "segments": [[0.0, 0.0005, 4, 0, 1], [0.0005, 10.0, 4, 0, 1]]},
]


def test_a_step_timeline_draws_each_segment_where_and_as_long_as_it_happened():
    """Bugs caught: the x axis not from 0 to the step's span (a segment off the chart), lanes in the
    wrong order, an idle gap or critical-path segment widened (the comments: a widened gap would hide
    busy time, and the critical path's segments tile the step), a zero-length kernel left invisible,
    a segment's legend naming the wrong kind, its "at" tooltip not start + length. Rule:
    step_timeline's docstring and comments, docs/json-schema.md's timeline segments
    ``[start_ms, end_ms, key, label, count]`` from the step's start. By hand: span 10 ms."""
    from tracekit.report.charts import step_timeline

    chart = step_timeline(_timeline(TIMELINE_LANES, ["gemm", "attention", "sync", "aten::linear", "kernel"]), 1)
    assert chart["id"] == "tk-chart-timeline-1"
    fig = _fig(chart)
    assert fig.x_range.start == 0 and fig.x_range.end >= 10.0
    assert list(fig.y_range.factors)[::-1] == [lane["name"] for lane in TIMELINE_LANES]  # first lane on top
    src = _data(_glyphs(fig, "HBar")[0])
    assert all(fig.x_range.start <= a <= b <= fig.x_range.end for a, b in zip(src["left"], src["right"]))
    by_lane: dict[str, list[tuple]] = {}
    for i, y in enumerate(src["y"]):
        by_lane.setdefault(y, []).append((src["left"][i], src["right"][i], src["legend"][i], src["time"][i]))
    assert by_lane["GPU idle, by cause"] == [
        (2.0, 2.25, "idle: sync", "2.00 ms + 0.250 ms"),
        (5.0, 6.0, "idle: sync", "5.00 ms + 1.00 ms"),
    ]
    assert [s[:2] for s in by_lane["critical path"]] == [(0.0, 0.0005), (0.0005, 10.0)]
    assert {s[2] for s in by_lane["critical path"]} == {"critical path: kernel"}
    (zero, mm) = by_lane["stream 7"]
    assert zero[0] == 1.0 and zero[1] > 1.0 and zero[2] == "gemm"  # a zero-length kernel is still seen
    assert mm[:3] == (2.5, 5.0, "attention") and mm[3] == "2.50 ms + 2.50 ms"
    assert by_lane["host thread 1: runtime calls"][0][2] == "call: sync"
    assert by_lane["host thread 1: ops"][0][2] == "host op"
    assert src["count"][src["y"].index("host thread 1: runtime calls")] == "2"
    assert fig.title.text == "Decode step 7, the slowest step: 10.0 ms, 1,234 kernels"


def test_a_step_timeline_legend_entry_is_one_colour():
    """Bug caught: a legend entry (grouped by its text) over segments of two colours, e.g. a category
    coloured by its position among another lane's keys, or an idle cause coloured like another.
    Rule: one swatch per legend entry."""
    from tracekit.report.charts import step_timeline

    lanes = TIMELINE_LANES + [
        {"name": "stream 8", "kind": "stream", "segments": [[3.0, 4.0, 1, 0, 1], [4.0, 4.5, 0, 0, 1]]}
    ]
    src = _data(_glyphs(_fig(step_timeline(_timeline(lanes, ["x1", "x2", "sync", "op", "kernel"]), 1)), "HBar")[0])
    colours: dict[str, set] = {}
    for legend, colour in zip(src["legend"], src["color"]):
        colours.setdefault(legend, set()).add(colour)
    assert all(len(c) == 1 for c in colours.values()), colours


# --- report/charts.py: the roofline --------------------------------------------------------------


def test_the_rooflines_points_are_the_analysis_op_groups_in_the_axis_unit(tiny):
    """Bugs caught: a point placed at another group's intensity, its achieved rate not in the unit
    the y axis is labelled in (GFLOP/s for a CPU whose peak is 100 GFLOP/s), a group above its roof
    drawn as achieved, the "of roof" tooltip showing another field, the largest marker not the
    group with the most time. Rule: docs/json-schema.md (``roofline.<phase>.points[]``:
    ``intensity`` FLOP/byte, ``achieved_flops`` FLOP/s, ``roof_fraction``, ``above_roof``); the
    axis labels; the docstring (marker sizes computed here, by time). Expected: tiny-bs1's decode
    op groups, each y x 1e9 = its achieved FLOP/s."""
    from tracekit.report.charts import roofline

    data, _ = tiny
    points = [
        q
        for q in data["roofline"]["decode"]["points"]
        if not q.get("above_roof") and q["intensity"] > 0 and q["achieved_flops"] > 0
    ]
    assert points
    fig = _fig(roofline(data, "decode", 0))
    assert fig.yaxis[0].axis_label == "achieved GFLOP/s"
    (scatter,) = _glyphs(fig, "Scatter")
    src = _data(scatter)
    # Op groups are told apart by op, kernel, shapes and dtype (one op runs at several shapes).
    drawn = sorted(zip(src["label"], src["kernel"], src["shapes"], src["dtype"], src["x"], src["y"], src["roof"]))
    keyed = sorted(((q["label"], q["kernel"], q["shapes"], f"{q['dtype']} {q['unit']}"), q) for q in points)
    assert len(drawn) == len(keyed)
    for (*key, x, y, roof), (ekey, q) in zip(drawn, keyed):
        assert (
            tuple(key) == ekey and x == pytest.approx(q["intensity"]) and y * 1e9 == pytest.approx(q["achieved_flops"])
        )
        assert _close(roof, q["roof_fraction"] * 100) and roof.endswith("%")
    biggest = max(points, key=lambda q: q["time_ms"])
    i = src["size"].index(max(src["size"]))
    assert (src["label"][i], src["shapes"][i], src["time"][i]) == (
        biggest["label"],
        biggest["shapes"],
        fmt.ms(biggest["time_ms"]),
    )
    assert all(fig.x_range.start <= x <= fig.x_range.end for x in src["x"])
    assert all(fig.y_range.start <= y <= fig.y_range.end for y in src["y"])


def _roof_data(points):
    """An H100-like spec row: 3.35 TB/s, bf16 matrix 989 TFLOP/s (700 achievable), fp32 vector 67."""
    roofs = {
        "bandwidth": 3.35e12,
        "achievable_bandwidth": 3.35e12,
        "compute": [
            {"dtype": "bf16", "unit": "matrix", "peak_flops": 989e12, "achievable_flops": 700e12},
            {"dtype": "fp32", "unit": "vector", "peak_flops": 67e12, "achievable_flops": None},
        ],
    }
    return {"device": {"spec": "H100 SXM"}, "roofline": {"decode": {"reason": None, "points": points, "roofs": roofs}}}


def _group(label, intensity, achieved, time_ms, **kw):
    return {
        "label": label,
        "kernel": "k",
        "shapes": None,
        "category": kw.pop("category", "gemm"),
        "dtype": "bf16",
        "unit": "matrix",
        "calls": 4,
        "time_ms": time_ms,
        "intensity": intensity,
        "achieved_flops": achieved,
        "roof_fraction": 0.5,
        "above_roof": None,
        **kw,
    }


def test_the_roofs_meet_at_their_ridges_and_run_to_the_charts_edges():
    """Bugs caught: the bandwidth roof not ending where the top compute roof begins (a roofline with
    a step or overlap at the ridge), a compute roof not flat at its peak in the axis unit, a roof
    stopping short of the chart's right edge or starting off its left one. Rule: the roofline model
    (attainable = min(peak, bandwidth x intensity): a bandwidth slope meeting each flat compute
    roof at its ridge, peak / bandwidth) and the comment ("bandwidth up to the last ridge, each
    compute peak from its ridge on"). By hand, in TFLOP/s: ridges 989e12 / 3.35e12 = 295.2 and
    67e12 / 3.35e12 = 20 FLOP/byte; the slope is 3.35 TFLOP/s per FLOP/byte."""
    from tracekit.report.charts import roofline

    fig = _fig(roofline(_roof_data([_group("aten::mm", 100.0, 200e12, 2.0)]), "decode", 0))
    solid = [_xy(r) for r in _glyphs(fig, "Line") if not _dashed(r)]
    slope = [(xs, ys) for xs, ys in solid if ys[0] != ys[1]]
    flats = {ys[0]: xs for xs, ys in solid if ys[0] == ys[1]}
    ((bx, by),) = slope
    assert bx[0] == pytest.approx(fig.x_range.start) and bx[1] == pytest.approx(989e12 / 3.35e12)
    assert by == pytest.approx([3.35 * bx[0], 3.35 * bx[1]])
    assert by[1] == pytest.approx(989)  # the slope's end is the top roof's start
    assert sorted(flats) == pytest.approx([67, 989])
    for peak, xs in flats.items():
        assert xs[0] == pytest.approx(peak * 1e12 / 3.35e12) and xs[1] == pytest.approx(fig.x_range.end)
    assert fig.y_range.start <= min(by) and max(flats) <= fig.y_range.end


def test_groups_above_their_roof_or_without_flops_are_listed_not_drawn():
    """Bug caught: a group above its roof drawn as achieved (a point above the roofline), a group
    with no FLOPs (a copy) dropped without the note counting it, or counted among the above-roof
    ones. Rule: the comments (points above their roof are listed under the chart with why; groups
    with no FLOPs cannot be placed on log axes, said in a note). By hand: one drawn GEMM, one above
    its roof, two copies with no FLOPs."""
    from tracekit.report.charts import roofline

    groups = [
        _group("aten::mm", 100.0, 200e12, 2.0),
        _group("aten::bmm", 50.0, 900e12, 1.0, above_roof="faster than the peak"),
        _group("aten::copy_", 0.0, 0.0, 0.5, category="memcpy"),
        _group("aten::fill_", 0.0, 0.0, 0.25, category="memset"),
    ]
    chart = roofline(_roof_data(groups), "decode", 3)
    assert chart["id"] == "tk-chart-roofline-3"
    assert _data(_glyphs(_fig(chart), "Scatter")[0])["label"] == ["aten::mm"]
    assert [(a["label"], a["reason"], a["time"]) for a in chart["above"]] == [
        ("aten::bmm", "faster than the peak", "1.00 ms")
    ]
    assert chart["note"].startswith("2 op group(s)")
    assert roofline(_roof_data(groups[:1]), "decode", 0)["note"] is None


def test_a_roofline_without_a_spec_row_says_how_to_give_the_peaks():
    """Bug caught: the --gpu hint given when a spec row is known (or missing when none is), the
    device's reason dropped. Rule: docs/cli.md's --gpu / --spec-file for a device tracekit does not
    know."""
    from tracekit.report.charts import roofline

    base = {"roofline": {"decode": {"reason": "the device has no spec row: no roofline"}}}
    unknown = roofline(
        {**base, "device": {"spec": None, "reason": "RTX 4070 Laptop is not in the database"}}, "decode", 0
    )
    assert unknown["reason"] == (
        "No roofline for decode: the device has no spec row (RTX 4070 Laptop is not in the database)."
        " Pass --gpu NAME or --spec-file PATH to give the peaks."
    )
    known = roofline({**base, "device": {"spec": "H100 SXM", "reason": "x"}}, "decode", 0)
    assert known["reason"] == "No roofline for decode: the device has no spec row."


# --- report/compare/charts.py ---------------------------------------------------------------------


def test_a_comparisons_bars_are_each_runs_time_per_part_in_ms(tiny):
    """Bugs caught: a side's bar drawn from the other side's ms, a segment's share of its bar
    computed against the wrong total, zero parts drawn, the axis too short for the longer bar or not
    from 0, the after run above the before run. Rule: the module docstring (before and after as two
    stacked bars in ms) and docs/json-schema.md (``by_bound[]``/``by_category[]``: before and after
    ms); "before on top". Expected: the tiny comparison's decode figures; the runs share a device,
    so their rows are tagged by file ("before: tiny-bs1", "after: tiny-bs8")."""
    from tracekit.report.compare.charts import phase_bars

    _, cmp = tiny
    p = cmp["phases"]["decode"]
    bound, cats = phase_bars(cmp, "decode")
    assert (bound["id"], cats["id"]) == ("tk-cmp-decode-bound", "tk-cmp-decode-category")
    for chart, table, names in (
        (bound, p["by_bound"], {**BOUND_NAMES, "idle": "CPU idle"}),
        (cats, p["by_category"], {}),
    ):
        fig = _fig(chart)
        assert list(fig.y_range.factors)[::-1] == ["before: tiny-bs1", "after: tiny-bs8"]
        src = _data(_glyphs(fig, "HBar")[0])
        rows = _rows(src)
        totals = []
        for side in ("before", "after"):
            idx = rows[f"{side}: tiny-bs{1 if side == 'before' else 8}"]
            want = {names.get(r["name"], r["name"]): r[f"{side}_ms"] for r in table if r[f"{side}_ms"] > 0}
            got = {src["part"][i]: src["right"][i] - src["left"][i] for i in idx}
            assert got == pytest.approx(want), side
            total = sum(want.values())
            totals.append(total)
            for i in idx:
                assert _close(src["ms"][i], want[src["part"][i]])
                assert _close(src["share"][i], want[src["part"][i]] / total * 100)
        _assert_stacked_from_zero(src)
        assert fig.x_range.start == 0 and max(totals) <= fig.x_range.end
        assert fig.xaxis[0].axis_label.startswith("ms ")


def test_a_comparisons_categories_run_largest_first_in_one_colour_each(tiny):
    """Bug caught: categories stacked in another order in each bar (so the same category sits at a
    different place before and after), or a category coloured differently in the two bars. Rule: the
    comparison's tables rank categories by their larger time (phase_bars sorts by max(before,
    after)), and one legend entry is one colour. Expected: the tiny comparison's decode categories
    sorted by hand by max(before_ms, after_ms)."""
    from tracekit.report.compare.charts import phase_bars

    _, cmp = tiny
    order = [
        r["name"]
        for r in sorted(cmp["phases"]["decode"]["by_category"], key=lambda r: -max(r["before_ms"], r["after_ms"]))
    ]
    src = _data(_glyphs(_fig(phase_bars(cmp, "decode")[1]), "HBar")[0])
    for idx in _rows(src).values():
        parts = [src["part"][i] for i in idx]
        assert parts == [c for c in order if c in parts]
    colours: dict[str, set] = {}
    for part, colour in zip(src["part"], src["color"]):
        colours.setdefault(part, set()).add(colour)
    assert all(len(c) == 1 for c in colours.values())


def test_a_comparisons_axis_holds_the_longer_bar_whichever_run_it_is():
    """Bug caught: the x axis sized to the last bar drawn (the after run) instead of the longest, so a
    run that got faster had its before bar cut off. Rule: a bar chart's axis holds all of its data.
    By hand: before 7 + 3 = 10 ms, after 4 ms; and the other way round."""
    from tracekit.report.compare.charts import stacked_ms

    for before, after in ((10.0, 4.0), (4.0, 10.0)):
        rows = [
            {"label": "before: main", "segments": [("gemm", before - 3.0, "#111111"), ("attention", 3.0, "#222222")]},
            {"label": "after: pr", "segments": [("gemm", after - 3.0, "#111111"), ("attention", 3.0, "#222222")]},
        ]
        fig = _fig(stacked_ms("t", rows, "ms", "tk-test", 200))
        assert fig.x_range.start == 0 and fig.x_range.end >= 10.0


def _bars_data(basis, present=True):
    rows = [
        {"name": "gemm", "before_ms": 3.0, "after_ms": 4.0},
        {"name": "attention", "before_ms": 1.0, "after_ms": 0.5},
    ]
    bound = [{"name": "memory", "before_ms": 4.0, "after_ms": 4.5}, {"name": "idle", "before_ms": 1.0, "after_ms": 2.0}]
    return {
        "before": {"source": {"name": "main.json"}, "device": {"type": "gpu", "name": "A", "spec": "A"}},
        "after": {"source": {"name": "pr.json"}, "device": {"type": "gpu", "name": "A", "spec": "A"}},
        "phases": {
            "decode": {
                "present": {"before": True, "after": present},
                "basis": basis,
                "by_bound": bound,
                "by_category": rows,
                "roof": {},
            }
        },
    }


def test_a_per_step_comparison_says_so_on_its_axis_and_a_one_sided_phase_has_no_bars():
    """Bug caught: an axis reading "ms" where the runs' step counts differ and the figures are per
    step, or "ms per step" for totals; bars drawn for a phase one run lacks. Rule: docs/compare.md
    ("when the runs hold different numbers of steps in a phase, times are per step, and the tables
    say so"); the docstring of phase_bars (two charts for one phase, of the two runs)."""
    from tracekit.report.compare.charts import phase_bars

    per = phase_bars(_bars_data("per step"), "decode")
    total = phase_bars(_bars_data("total"), "decode")
    assert [_fig(c).xaxis[0].axis_label for c in per] == [
        "ms per step (kernel time + GPU idle)",
        "ms per step of kernel time",
    ]
    assert [_fig(c).xaxis[0].axis_label for c in total] == ["ms (kernel time + GPU idle)", "ms of kernel time"]
    assert phase_bars(_bars_data("total", present=False), "decode") == []
    assert phase_bars(_bars_data("total"), "prefill") == []


def test_a_long_comparison_legend_goes_to_two_columns_and_the_chart_fits_it():
    """Bug caught: two columns for a legend of seven entries or fewer (or one column past seven),
    a chart lower than its legend needs. Rule: the comments ("long category legends in two columns
    keep the chart low", more than 7 entries) and stacked_height's docstring (the height of a chart
    whose legend has that many entries), with the room a legend entry gets in the report's breakdown
    (84 px plus 21 px a row). By hand: 8 categories are 2 columns of 4 rows, 20 are 10 rows: 294 px."""
    from tracekit.report.compare.charts import phase_bars, stacked_height

    def cats(n):
        data = _bars_data("total")
        data["phases"]["decode"]["by_category"] = [
            {"name": f"cat{i}", "before_ms": 1.0 + i, "after_ms": 2.0 + i} for i in range(n)
        ]
        return _fig(phase_bars(data, "decode")[1])

    seven, eight, twenty = cats(7), cats(8), cats(20)
    assert seven.legend[0].ncols != 2 and eight.legend[0].ncols == 2 and twenty.legend[0].ncols == 2
    assert seven.height >= stacked_height(7) and stacked_height(7) >= 84 + 21 * 7
    assert eight.height >= 84 + 21 * 4 and twenty.height >= 84 + 21 * 10


def test_the_roof_chart_shows_each_runs_fraction_of_its_own_roof(tiny):
    """Bugs caught: a bar from the other run's fraction, a fraction drawn as a percentage number (100x
    too tall on a "0%" axis), categories out of the order of kernel time, a withheld fraction drawn
    as a bar, a side's tooltip naming the other side's roof, an axis ending below 100 % of the roof.
    Rule: docs/json-schema.md (``phases.<phase>.roof``: fraction of each run's own roofline per
    category; ``withheld``: no fraction, with why) and the chart's comments (categories in order of
    kernel time; a withheld fraction draws no bar, its label says why). Expected: the tiny
    comparison's prefill roofs; "other" is withheld on both sides (above its roof)."""
    from tracekit.report.compare.charts import roof_chart

    _, cmp = tiny
    p = cmp["phases"]["prefill"]
    roofs = p["roof"]
    chart = roof_chart(cmp, "prefill")
    assert chart["id"] == "tk-cmp-prefill-roof"
    fig = _fig(chart)
    time = {r["name"]: max(r["before_ms"], r["after_ms"]) for r in p["by_category"]}
    cats = sorted(set(roofs["before"]) | set(roofs["after"]) | {"other"}, key=lambda c: -time.get(c, 0.0))
    assert [c for c, _ in fig.x_range.factors[::2]] == cats
    bars = _glyphs(fig, "VBar")
    assert len(bars) == 2
    for side, r in zip(("before", "after"), bars):
        src = _data(r)
        assert [tuple(x) for x in src["x"]] == [(c, side) for c in cats]
        for c, y, text, roof in zip(src["category"], src["y"], src["value"], src["roof"]):
            assert roof == cmp[side]["device"]["spec"]
            if c in roofs[side]:
                assert y == pytest.approx(roofs[side][c]) and _close(text, roofs[side][c] * 100)
            else:
                assert (c, y, text) == ("other", 0, "above roof")
        assert set(src["side"]) == {f"{side}: tiny-bs{1 if side == 'before' else 8}"}
    assert fig.y_range.start == 0
    assert fig.y_range.end >= max(1.0, *roofs["before"].values(), *roofs["after"].values())
    assert "other" in chart["note"]
    assert [i.label.value for i in fig.legend[0].items] == ["before: tiny-bs1", "after: tiny-bs8"]


def test_a_roof_chart_holds_a_fraction_above_the_roof_and_marks_an_unpriced_category():
    """Bug caught: the y axis capped at 100 % while a fraction just above it (timing noise, the
    comment says) is drawn, cutting that bar; a category priced in one run only shown as 0 % in the
    other instead of "not priced in this run"; a bar's tooltip naming the other run's roof when the
    runs are on different devices. Rule: the comments on y_top and on withheld bars; roof_of's
    docstring (whose roof a side's "% of roof" is against). By hand: gemm 1.3 before (on "A"),
    attention 0.4 after only (on an H100 SXM)."""
    from tracekit.report.compare.charts import roof_chart

    data = _bars_data("total")
    data["after"]["device"] = {"type": "gpu", "name": "NVIDIA H100 80GB HBM3", "spec": "H100 SXM"}
    data["phases"]["decode"]["roof"] = {"before": {"gemm": 1.3}, "after": {"attention": 0.4}, "withheld": {}}
    fig = _fig(roof_chart(data, "decode"))
    assert fig.y_range.end >= 1.3
    before, after = (_data(r) for r in _glyphs(fig, "VBar"))
    assert (set(before["roof"]), set(after["roof"])) == ({"A"}, {"H100 SXM"})  # each run's own roof
    assert (set(before["side"]), set(after["side"])) == ({"before: A"}, {"after: H100 SXM"})
    assert dict(zip(before["category"], before["value"])) == {"gemm": "130%", "attention": "not priced in this run"}
    assert dict(zip(after["category"], after["value"])) == {"gemm": "not priced in this run", "attention": "40.0%"}
    empty = _bars_data("total")
    assert "item" not in roof_chart(empty, "decode") and "reason" in roof_chart(empty, "decode")


def test_every_comparison_chart_id_names_an_item_embedded_for_it(tiny):
    """Bug caught: the template told an id that no embedded item targets (an empty chart box), or a
    phase's ids given to another phase. Rule: all_charts's docstring (every chart item, and per
    phase the ids the template places)."""
    from tracekit.report.compare.charts import all_charts

    _, cmp = tiny
    items, ids = all_charts(cmp)
    targets = [item["target_id"] for item in items]
    assert len(targets) == len(set(targets))
    placed = [i for phase in ids.values() for i in [*phase["bars"], phase["roof"]] if i]
    assert sorted(placed) == sorted(targets)
    for phase, got in ids.items():
        assert all(f"-{phase}-" in i for i in [*got["bars"], got["roof"]] if i)


# --- report/compare/view.py ------------------------------------------------------------------------


def test_the_headline_rows_state_each_figures_change_as_the_comparison_computed_it(tiny):
    """Bugs caught: a change shown without its sign or with the other run's figure, a relative change
    as a fraction, a verdict shown in another verdict's colour, the noise band signed, before and
    after swapped, the 95 % interval's ends swapped or unsigned. Rule: docs/json-schema.md
    (``headline[]``: before, after, delta, relative, verdict, noise, ``interval.relative`` [low, high]), ``signed``'s docstring ("+1.59 ms") and VERDICT_CLASS (better / worse / within
    noise / not comparable). Expected: the tiny comparison's own figures."""
    from tracekit.report.compare.view import headline

    _, cmp = tiny
    classes = {"better": "better", "worse": "worse", "within noise": "noise", "not comparable": "na"}
    rows = headline(cmp)
    assert [r["key"] for r in rows] == [h["key"] for h in cmp["headline"]]
    for r, h in zip(rows, cmp["headline"]):
        assert r["verdict_class"] == classes[h["verdict"] or "not comparable"]
        if h["before"] is None or h["after"] is None:
            continue
        scale = 100 if h["unit"] == "" else 1
        assert _close(r["before"], h["before"] * scale) and _close(r["after"], h["after"] * scale), r
        if h["delta"]:
            assert r["delta"].startswith("+" if h["delta"] > 0 else "-")
            assert _close(r["delta"].lstrip("+"), h["delta"] * scale)
        if h["relative"]:
            assert r["relative"].startswith("+" if h["relative"] > 0 else "-") and r["relative"].endswith("%")
            assert _close(r["relative"].lstrip("+"), h["relative"] * 100)
        if h["noise"] is not None:
            assert not r["noise"].startswith("+") and _close(r["noise"], h["noise"] * scale)
        iv = (h.get("interval") or {}).get("relative")
        if iv:  # low end first, each a signed percentage
            lo, hi = r["interval"].split(" to ")
            assert _close(lo.lstrip("+"), iv[0] * 100) and _close(hi.lstrip("+"), iv[1] * 100), r["interval"]
    assert any((h.get("interval") or {}).get("relative") for h in cmp["headline"])
    ttft = next(r for r in rows if r["key"] == "ttft_ms")
    assert (ttft["delta"], ttft["verdict_class"]) == ("+46.9 ms", "worse")  # 57.468 - 10.590 ms


def test_a_gate_row_shows_its_interval_low_end_first_and_a_failure_as_worse():
    """Bug caught: a gate's interval shown high end first or in the wrong unit, a failed gate shown in
    a passing colour (or a held one in the failing colour). Rule: docs/json-schema.md (``gates[]``:
    ``interval`` [low, high] of the change in the gate's unit; ``verdict`` pass, fail, noise,
    missing), docs/compare.md (a gate fails only beyond its threshold; noise passes) and the view's
    verdict classes (worse for what got worse, better for what held). By hand: +2 % to +9 % for a
    relative gate, +0.5 ms to +3 ms for an absolute one."""
    from tracekit.report.compare.view import gates

    def gate(expr, unit, iv, verdict):
        return {
            "expr": expr,
            "metric": "m",
            "unit": unit,
            "threshold": 0.05,
            "change": 0.05,
            "interval": iv,
            "verdict": verdict,
        }

    rows = gates(
        {
            "gates": [
                gate("tpot_p50>+5%", "%", [0.02, 0.09], "fail"),
                gate("ttft_ms>+2ms", "ms", [0.5, 3.0], "pass"),
                gate("itl>+5%", "%", None, "noise"),
            ]
        }
    )
    assert [r["interval"] for r in rows] == ["+2.00% to +9.00%", "+0.500 ms to +3.00 ms", fmt.MISSING]
    assert [r["verdict_class"] for r in rows] == ["worse", "better", "noise"]


def test_a_comparisons_phase_rows_carry_signed_changes_and_trends(tiny):
    """Bugs caught: a phase's change not after minus before, a row's trend (red "up" for more time,
    green "down" for less) reversed or set for no change, the bound rows out of their order or the
    idle row not named for the device, one run's step count shown for the other. Rule: _trend's docstring (more time is "up"), docs/compare.md
    (the verdicts' sense: less time is better), BOUND_ORDER. Expected: the tiny comparison's decode
    phase (81.3 -> 105.1 ms, +23.8 ms; idle shrank by 0.579 ms)."""
    from tracekit.report.compare.view import phases

    _, cmp = tiny
    (decode,) = [p for p in phases(cmp) if p["phase"] == "decode"]
    t = cmp["phases"]["decode"]["time_ms"]
    assert decode["time_delta"] == "+23.8 ms" and _close(decode["time_delta"].lstrip("+"), t["after"] - t["before"])
    assert decode["steps"] == {"before": "16", "after": "16"} and not decode["per_step"]
    assert [r["key"] for r in decode["by_bound"]] == ["compute", "memory", "interconnect", "unknown", "idle"]
    idle = decode["by_bound"][-1]
    assert (idle["name"], idle["trend"], idle["delta"]) == ("CPU idle", "down", "-0.579 ms")
    for row, src in zip(decode["by_category"], cmp["phases"]["decode"]["by_category"]):
        want = "up" if src["delta_ms"] > 0 else "down" if src["delta_ms"] < 0 else "flat"
        assert row["trend"] == want and row["key"] == src["name"]
        assert row["delta"].startswith("+" if src["delta_ms"] > 0 else "-")
    fewer = {**cmp, "phases": {"decode": {**cmp["phases"]["decode"], "steps": {"before": 16, "after": 8}}}}
    assert phases(fewer)[0]["steps"] == {"before": "16", "after": "8"}
    compute = decode["by_bound"][0]
    assert (compute["trend"], compute["relative"]) == ("flat", fmt.MISSING)  # 0 ms both times
    prefill = next(p for p in phases(cmp) if p["phase"] == "prefill")
    assert [w["name"] for w in prefill["roof_withheld"]] == ["other", "other"]
    assert [w["side"] for w in prefill["roof_withheld"]] == ["before", "after"]
    other = next(r for r in prefill["roof"] if r["category"] == "other")
    assert (other["before"], other["after"]) == ("above roof", "above roof") and other["before_note"]


def test_a_kernel_row_counts_calls_and_states_its_speed_change_from_the_times():
    """Bugs caught: "1 calls" (or "3 call"), a missing time shown as "0 ms", several kernels flagged
    for a group of one, a speed-up from the wrong side, "new"/"gone" lost. Rule: speedup's docstring
    (before time / after time, "1.6x faster", "2.3x slower"), docs/compare.md (new, gone: a group
    only one run has). By hand: 35.2 ms -> 51.1 ms is 51.1 / 35.2 = 1.45 times as long, "1.5x
    slower"; per call 75.8 us -> 110 us the same."""
    from tracekit.report.compare.view import _kernel_row

    row = _kernel_row(
        {
            "category": "gemm",
            "op": "aten::mm",
            "status": "both",
            "before_ms": 35.169406,
            "after_ms": 51.111361,
            "delta_ms": 15.941955,
            "speedup": 35.169406 / 51.111361,
            "per_call_speedup": 75.796 / 110.154,
            "before_calls": 1,
            "after_calls": 464,
            "before_kernels": 1,
            "after_kernels": 2,
            "before_mean_us": 75.796,
            "after_mean_us": 110.154,
        }
    )
    assert (row["before_calls"], row["after_calls"]) == ("1 call", "464 calls")
    assert (row["before_more"], row["after_more"]) == (False, True)
    assert (row["speedup"], row["per_call"]) == ("1.5x slower", "1.5x slower")
    assert (row["delta"], row["trend"], row["status"]) == ("+15.9 ms", "up", "")
    assert (row["before_mean"], row["after_mean"]) == ("75.8 µs", "110 µs")
    new = _kernel_row({"op": "aten::bmm", "status": "new", "after_ms": 2.0, "after_calls": 3, "speedup": None})
    assert (new["before"], new["after"], new["status"], new["speedup"]) == (fmt.MISSING, "2.00 ms", "new", fmt.MISSING)
    assert new["before_calls"] == ""
    assert _kernel_row({"status": "gone"})["status"] == "gone"


def test_relative_changes_and_speed_ratios_read_as_their_docstrings_say():
    """Bugs caught: a "+" on a fall or on no change, a speed ratio within half a percent of 1 called
    faster or slower, a ratio under 1 called faster, a missing ratio shown as a number. Rule:
    speedup's docstring (x = before time / after time: "1.6x faster", "2.3x slower"; "same speed"
    within rounding) and signed's forms ("+", "-", no sign for 0). By hand: 1 / 0.4 = 2.5."""
    from tracekit.report.compare.view import _trend, rel, signed, speedup, value

    assert (rel(0.05), rel(-0.05), rel(0.0), rel(None)) == ("+5.00%", "-5.00%", "0%", fmt.MISSING)
    assert (speedup(1.6), speedup(0.4), speedup(1.004), speedup(0.996)) == (
        "1.6x faster",
        "2.5x slower",
        "same speed",
        "same speed",
    )
    assert (speedup(None), speedup(0.0)) == (fmt.MISSING, fmt.MISSING)
    assert (_trend(0.2), _trend(-0.2), _trend(0.0), _trend(None)) == ("up", "down", "flat", "flat")
    assert (signed(0.0, "ms"), signed(-0.0015, "")) == ("0 ms", "-0.150 pp")
    assert (value(0.4567, ""), value(12.5, "ms"), value(1115.0, "tok/s")) == ("45.7%", "12.5 ms", "1,115 tok/s")


def test_a_run_header_lists_its_steps_workload_and_repeated_runs(tiny):
    """Bugs caught: a run header naming the other run's steps or device, a workload field under
    another label, a side of one run listing it as repeated runs. Rule: docs/json-schema.md (each
    side's ``steps``, ``workload``, ``runs``) and run_header's comment (names only when more than
    one); the device word is "CPU" only for a comparison of two CPU runs (report/view.py's
    device_word: what a CPU-only trace's "GPU idle" is about). Expected: tiny-bs1 (1 prefill and 16
    decode steps, batch 1, prompt 64) and tiny-bs8 (batch 8)."""
    from tracekit.report.compare.view import device_word, run_header, view_model

    _, cmp = tiny
    vm = view_model(cmp)
    before, after = vm["runs"]
    assert before["steps"] == "1 prefill, 16 decode" and before["runs"] == []
    assert before["name"] == "tiny-bs1.pt.trace.json.gz" and after["name"] == "tiny-bs8.pt.trace.json.gz"
    assert {w["label"]: w["value"] for w in before["workload"]}["batch"] == "1"
    assert {w["label"]: w["value"] for w in after["workload"]}["batch"] == "8"
    assert {w["label"]: w["value"] for w in before["workload"]}["prompt"] == "64"
    assert vm["title"] == "tiny-bs1.pt.trace.json.gz vs tiny-bs8.pt.trace.json.gz"
    assert vm["tags"] == {"before": "before: tiny-bs1", "after": "after: tiny-bs8"} and vm["same_device"]
    assert vm["device_word"] == "CPU" and vm["roof_of"] == {"before": "AMD EPYC", "after": "AMD EPYC"}
    # A CPU run against a GPU run: the GPU side's idle time is GPU idle, so "CPU" only when both are.
    mixed = {**cmp, "after": {**cmp["after"], "device": {"type": "gpu", "name": "H100", "spec": "H100 SXM"}}}
    assert device_word(mixed) == "GPU"
    two = {**cmp, "after": {**cmp["after"], "runs": [{"name": "pr-1.json"}, {"path": "runs/pr-2.json"}]}}
    assert run_header(two, "after")["runs"] == ["pr-1.json", "runs/pr-2.json"]


def test_the_method_and_figure_basis_read_as_the_comparison_states_them(tiny):
    """Bugs caught: the fixed threshold shown as a fraction ("0.02%") or the points scaled twice,
    the resample count unformatted, a side of one run listed in the figure basis. Rule:
    docs/compare.md (2 standard errors; a fixed 2 %, 1 percentage point for shares; 1,000
    resamples) and _figure_basis's docstring (nothing with one run a side)."""
    from tracekit.report.compare.view import _figure_basis, view_model

    _, cmp = tiny
    m = view_model(cmp)["method"]
    assert (m["sigmas"], m["flat"], m["points"], m["bootstrap"]) == ("2", "2%", "1", "1,000")
    assert _figure_basis({"before": "one run", "after": "one run"}) == ""
    assert _figure_basis({"before": "3 runs: pooled", "after": "one run"}) == "before 3 runs: pooled"
    assert _figure_basis({"before": "3 runs", "after": "2 runs"}) == "before 3 runs; after 2 runs"


def test_the_kernel_tables_show_at_most_top_rows_and_say_when_per_step(tiny):
    """Bug caught: the Markdown comment's and terminal's ``top`` not applied (or applied to the wrong
    list), the per-step flag lost. Rule: the renderers' TOP_MD / TOP_TEXT (movers per phase) and
    docs/compare.md (per step when step counts differ, and the tables say so)."""
    from tracekit.report.compare.view import kernels

    _, cmp = tiny
    for k in kernels(cmp, 2):
        src = cmp["kernels"][k["phase"]]
        assert len(k["movers"]) == min(2, len(src["movers"])) and len(k["categories"]) <= 2
        assert k["per_step"] == (src["basis"] == "per step")
        assert [c["category"] for c in k["categories"]] == [c["category"] for c in src["categories"][:2]]
    full = kernels(cmp)
    assert sum(len(k["movers"]) for k in full) == sum(len(k["movers"]) for k in cmp["kernels"].values())


# --- report/compare/junit.py -----------------------------------------------------------------------


def _gate(expr, metric, verdict, sentence):
    return {"expr": expr, "metric": metric, "verdict": verdict, "sentence": sentence}


GATES = [
    _gate("tpot_p50>+5%", "tpot_p50", "fail", "tpot_p50>+5%: TPOT p50 changed +28.0%, above +5.00%"),
    _gate("ttft_ms>+2ms", "ttft_ms", "fail", "ttft_ms>+2ms: TTFT changed +46.9 ms, above +2.00 ms"),
    _gate("decode_mbu<-2pp", "decode_mbu", "pass", "decode_mbu<-2pp: held"),
    _gate("tpot_p90>+5%", "tpot_p90", "noise", "tpot_p90>+5%: within noise"),
    _gate("itl>+5%", "decode_step_mean", "noise", "itl>+5%: within noise"),
    _gate("decode_step_p50>+5%", "decode_step_p50", "missing", "decode_step_p50: the before run lacks it"),
]


def test_junit_counts_agree_with_its_testcases_and_fail_only_the_failed_gates():
    """Bugs caught: a failure under a gate that held or was within noise (docs/compare.md: noise
    passes), a count attribute that disagrees with the cases (CI shows "2 failed" over 1 red case),
    errors counted, a skipped case for a gate that ran. Rule: the JUnit format as Jenkins and GitLab
    read it (one testcase per test; ``tests``, ``failures``, ``errors``, ``skipped`` count them) and
    docs/compare.md (one testsuite "tracekit compare", one testcase per gate, ``<failure>`` with the
    sentence, ``<skipped>`` for a figure a run lacks). By hand: 6 gates, 2 fail, 2 within noise, 1
    missing."""
    from tracekit.report.compare.junit import junit_xml

    root = ET.fromstring(junit_xml(GATES))
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "tracekit compare"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [g["expr"] for g in GATES]
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    skipped = [c.get("name") for c in cases if c.find("skipped") is not None]
    assert failed == ["tpot_p50>+5%", "ttft_ms>+2ms"] and skipped == ["decode_step_p50>+5%"]
    assert all(c.find("error") is None for c in cases)
    for el in (root, suite):
        assert int(el.get("tests")) == len(cases)
        assert int(el.get("failures")) == len(failed)
        assert int(el.get("skipped")) == len(skipped)
        assert int(el.get("errors", "0")) == 0
    assert suite.get("errors") == "0"


def test_a_junit_failure_carries_the_gates_sentence_and_every_case_its_verdict():
    """Bug caught: a failure without the gate's sentence (CI shows the message: the figure, its
    change and the limit), the sentence of another gate, a system-out without the verdict. Rule:
    the module docstring (a failed gate holds a ``<failure>`` with the gate's sentence; every case
    its sentence in ``<system-out>``) and the JUnit format (``failure`` has ``message`` and
    ``type``)."""
    from tracekit.report.compare.junit import junit_xml

    cases = ET.fromstring(junit_xml(GATES)).findall("testsuite/testcase")
    for case, g in zip(cases, GATES):
        out = case.find("system-out").text
        assert out == f"{g['verdict']}: {g['sentence']}"
        failure = case.find("failure")
        if g["verdict"] == "fail":
            assert failure.get("message") == g["sentence"] == failure.text and failure.get("type")
            assert "above" in failure.get("message")  # the figure's change and the limit it crossed
        skip = case.find("skipped")
        if skip is not None:
            assert skip.get("message") == g["sentence"]
    assert [c.get("classname") for c in cases][:2] == ["tracekit.compare.tpot_p50", "tracekit.compare.ttft_ms"]


def test_junit_escapes_gate_names_and_sentences_and_takes_no_gates():
    """Bug caught: a gate's "<" or "&" written raw (the file no longer parses, and CI drops the
    report), a sentence with markup read as elements, or no file at all for no gates. Rule: XML 1.0
    (``<`` and ``&`` escaped in attributes and text); one testsuite with zero tests when there is
    nothing to gate."""
    from tracekit.report.compare.junit import junit_xml

    g = _gate("decode_tokens_per_s<-5%", "decode_tokens_per_s", "fail", 'fell <b>6%</b> & "more" (<-5%)')
    text = junit_xml([g])
    (case,) = ET.fromstring(text).iter("testcase")
    assert case.get("name") == "decode_tokens_per_s<-5%" and case.find("failure").text == g["sentence"]
    assert case.find("failure").get("message") == g["sentence"] and "<b>" not in text
    empty = ET.fromstring(junit_xml([]))
    assert (empty.get("tests"), empty.find("testsuite").get("tests"), empty.findall(".//testcase")) == ("0", "0", [])
