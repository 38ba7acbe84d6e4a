"""Tests written for the survivors of the mutation campaign's samples of tracekit/report (issue 51,
part 5): each names the mutant it kills; the expected values come from outside the code under
test (hand arithmetic, the trace as written, the annotated file read back by json.loads)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES
from kineto import Doc

from tracekit.cli import main
from tracekit.report.base import text_table

TINY = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _annotate(src: Path, out: Path) -> list[dict]:
    r = CliRunner().invoke(main, ["annotate", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return _events(out)


def test_text_table_leaves_the_last_column_left_aligned_even_when_numeric():
    """Mutant: report/base.py text_table ``last = i == len(r) - 1`` -> ``len(r) ** 1`` (no cell is
    ever the last): a last column holding digits ("10 ms") was right-aligned like a number column.
    Widths by hand: name 4, n 2, note 5; cells joined by two spaces, numbers right-aligned, and
    the last cell ("7", holding a digit) as written, not padded to 5."""
    assert text_table(["name", "n", "note"], [["a", "1", "7"], ["bb", "22", "10 ms"]]) == [
        "name  n   note",
        "a      1  7",
        "bb    22  10 ms",
    ]


def test_critical_path_slices_carry_their_own_duration_in_ms(tmp_path):
    """Mutant: report/annotate_critical.py ``"ms": (end - start) / 1e6`` -> ``+ 1e6``: each
    critical-path slice's ``ms`` arg must be its own ``dur`` (microseconds, as written in the
    annotated file and read back by json.loads) over 1000."""
    events = _annotate(TINY, tmp_path / "out.json.gz")
    crit = [e for e in events if e.get("cat") == "tracekit" and e.get("ph") == "X" and "kind" in e.get("args", {})]
    assert crit, "the sample trace's annotation has a critical-path track"
    for e in crit:
        assert e["args"]["ms"] == pytest.approx(e["dur"] / 1000, rel=1e-9, abs=1e-9)


def test_kernels_without_a_correlation_or_any_args_still_get_their_tracekit_args(tmp_path):
    """Mutant: report/annotate.py _correlation returns ``~1`` (-2) instead of -1 for an event with
    no args at all: the reader keeps such a kernel with correlation -1 ("absent"), so the event's
    key no longer matched its table row and the kernel lost its tracekit_* args. Three GEMM
    kernels built by hand: one as Kineto writes it, one with its "correlation" arg removed, one
    with no args at all: each must come back with a tracekit_category (gemm, by its name)."""
    d = Doc()
    corr = []
    for ts in (10, 50, 90):
        ext = d.op("aten::mm", ts, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
        corr.append(d.kernel("ampere_sgemm_64x64_nn", ts + 2, ts + 10, 5, ext=ext))
    for e in d.events:
        if e.get("cat") == "kernel" and e["args"]["correlation"] == corr[1]:
            del e["args"]["correlation"]
        elif e.get("cat") == "kernel" and e["args"]["correlation"] == corr[2]:
            del e["args"]
    src = d.write(tmp_path / "k.json")
    kernels = [e for e in _annotate(src, tmp_path / "out.json") if e.get("cat") == "kernel"]
    assert len(kernels) == 3
    assert [k["args"].get("tracekit_category") for k in sorted(kernels, key=lambda k: k["ts"])] == ["gemm"] * 3


def test_text_table_takes_rows_of_different_lengths():
    """Mutant: report/base.py text_table ``if i < len(r)`` -> ``<=`` in the column widths: a row
    shorter than the widest raised IndexError. Widths by hand: 3 and 1; a row's last cell is not
    padded."""
    assert text_table(None, [["abc", "b"], ["c"]]) == ["abc  b", "c"]


def test_the_longest_idle_gap_is_among_the_described_ones_on_a_clock_from_zero(tmp_path):
    """Mutant: report/annotate.py _idle_slices ranks gaps by ``end % start`` instead of ``end - start``:
    the two agree while a gap starts later than its own length after the clock's zero (every real
    trace's epoch-scale clock), not on a trace whose clock starts at 0. Built by hand: one step,
    a 100 us gap from 1 us to 101 us, then 5000 gaps of 2 us, 5002 gaps in all, more than the
    DESCRIBED_GAPS (5000) longest that get a description (the call waited on): the 100 us gap is
    the longest, so it must carry its description ("call")."""
    from tracekit.report.annotate import DESCRIBED_GAPS

    d = Doc()
    d.kernel("k", 0.2, 0.5, 0.5)
    d.kernel("k", 0.3, 101.0, 1.0)
    ts = 102.0
    for _ in range(DESCRIBED_GAPS):
        ts += 2.0
        d.kernel("k", ts - 1.5, ts, 1.0)
        ts += 1.0
    d.annotation("ProfilerStep#0", 0.0, ts + 5)
    src = d.write(tmp_path / "gaps.json")
    idle = [e for e in _annotate(src, tmp_path / "out.json") if "cause" in e.get("args", {})]
    assert len(idle) > DESCRIBED_GAPS
    longest = max(idle, key=lambda e: e["dur"])
    assert (longest["ts"], longest["dur"]) == (1.0, 100.0)
    assert "call" in longest["args"]


def _dicts(o):
    """Every dict nested anywhere in a serialised bokeh ``json_item`` (read back by json.loads)."""
    if isinstance(o, dict):
        yield o
        for v in o.values():
            yield from _dicts(v)
    elif isinstance(o, list):
        for v in o:
            yield from _dicts(v)


def _line_ys(item) -> list[list[float]]:
    """The "y" column of every data source in a serialised bokeh figure."""
    return [
        v
        for o in _dicts(item)
        if o.get("type") == "map" and isinstance(o.get("entries"), list)
        for k, v in o["entries"]
        if k == "y" and isinstance(v, list)
    ]


def test_the_roofline_chart_draws_an_achievable_line_only_where_it_differs_from_the_peak():
    """Mutants: report/charts.py roofline ``abs(ach - peak) > 1e-9 * peak`` -> ``1e-9 % peak`` /
    ``1e-9 ** peak`` (an absolute 1e-9 or 0 instead of a relative tolerance): an achievable rate
    that is the peak up to float rounding got a dashed line of its own. On the H100 trace the
    analysis states the peaks (989.4 TFLOP/s bf16 matrix, 67 TFLOP/s for the others; the axis is
    in TFLOP/s, so each distinct peak is a line at y = peak / 1e12 at both ends) and achievable
    rates of 0.8 x peak, each drawn; set to the peak times (1 + 1e-12), none is."""
    import copy
    import re

    from conftest import real_trace_path

    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.report import charts

    data = analyze(read_trace(str(real_trace_path("h100_hf")))).to_dict()
    phase = next(iter(data["phases"]))
    chart = charts.roofline(data, phase, 0)
    assert "reason" not in chart, chart.get("reason")
    peaks = {c["peak_flops"] for c in data["roofline"][phase]["roofs"]["compute"] if c.get("peak_flops")}
    assert len(peaks) >= 2
    ys = _line_ys(json.loads(json.dumps(chart["item"])))
    for peak in peaks:
        assert [peak / 1e12] * 2 in ys
    achievable = re.compile(r"(?:matrix|vector) achievable")
    assert achievable.search(json.dumps(chart["item"]))
    same = copy.deepcopy(data)
    for c in same["roofline"][phase]["roofs"]["compute"]:
        if c.get("peak_flops"):
            c["achievable_flops"] = c["peak_flops"] * (1 + 1e-12)
    assert not achievable.search(json.dumps(charts.roofline(same, phase, 1)["item"]))


def test_junit_names_each_gate_under_tracekit_compare_and_its_metric():
    """Mutant: report/compare/junit.py ``"tracekit.compare." + g["metric"]`` -> ``-`` (a TypeError:
    no JUnit file at all). Read back with ElementTree: one testcase per gate, classname
    tracekit.compare.<metric>, one failure, one skipped."""
    import xml.etree.ElementTree as ET

    from tracekit.report.compare.junit import junit_xml

    gates = [
        {"expr": "tpot_p50 < +5%", "metric": "tpot_p50", "verdict": "fail", "sentence": "tpot rose 9%"},
        {"expr": "mfu > -2%", "metric": "mfu", "verdict": "missing", "sentence": "no mfu"},
        {"expr": "steps == 0%", "metric": "steps", "verdict": "pass", "sentence": "same"},
    ]
    root = ET.fromstring(junit_xml(gates))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("classname") for c in cases] == [
        "tracekit.compare.tpot_p50",
        "tracekit.compare.mfu",
        "tracekit.compare.steps",
    ]
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "1", "1")


def test_a_run_tag_cuts_a_long_device_name_at_40_characters():
    """Mutant: report/compare/view.py tag ``len(what) > 41`` -> ``<= 41``: short names were cut and
    given an ellipsis, long ones shown whole. Devices differ, so each side is tagged by its spec
    row: 50 characters become the first 40 and "…"; "H100 SXM" stays as it is."""
    from tracekit.report.compare.view import tag

    data = {"before": {"device": {"spec": "X" * 50}}, "after": {"device": {"spec": "H100 SXM"}}}
    assert tag(data, "before") == "before: " + "X" * 40 + "…"
    assert tag(data, "after") == "after: H100 SXM"


def test_a_kernel_row_of_a_comparison_keeps_the_full_kernel_name_for_its_tooltip():
    """Mutant: report/compare/view.py _kernel_row ``r.get("before_kernel_full") or
    r.get("before_kernel")`` -> ``and``: the full name (the tooltip) became the short one whenever
    both were there. By hand: the full name when given, else the short one, else ""."""
    from tracekit.report.compare.view import _kernel_row

    full = "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)"
    row = _kernel_row(
        {"category": "gemm", "op": "aten::mm", "before_kernel": "cutlass gemm", "before_kernel_full": full}
    )
    assert row["before_full"] == full
    assert _kernel_row({"before_kernel": "cutlass gemm"})["before_full"] == "cutlass gemm"
    assert _kernel_row({})["before_full"] == ""


def test_a_comparison_bar_chart_of_nothing_spans_0_to_1_04_ms():
    """Mutant: report/compare/charts.py stacked_ms ``(top or 1.0) * 1.04`` -> ``(top or 2.0)``: a
    chart whose rows hold no positive time gets the axis of 1 ms (plus the 4% margin every bar
    chart here has), 0 to 1.04; with a 10 ms bar, 0 to 10.4."""
    from tracekit.report.compare.charts import stacked_ms

    def x_end(rows) -> float:
        item = json.loads(json.dumps(stacked_ms("t", rows, "ms", "tk-test", 200)["item"]))
        ends = [o["attributes"]["end"] for o in _dicts(item) if o.get("name") == "Range1d"]
        assert len(ends) == 1
        return ends[0]

    assert x_end([{"label": "before", "segments": [("gemm", 0.0, "#000000")]}]) == pytest.approx(1.04)
    assert x_end([{"label": "before", "segments": [("gemm", 10.0, "#000000")]}]) == pytest.approx(10.4)


def test_a_fleet_chart_takes_only_positive_finite_values():
    """Mutant: report/fleet.py _positive ``v > 0`` -> ``v > -1``: a zero (or a fraction below zero)
    was taken for a value the fleet's log-scale charts can place."""
    from tracekit.report.fleet import _positive

    assert [_positive(v) for v in (0, 0.0, -0.5, 1e-9, 3, float("inf"), "2", None)] == [
        False,
        False,
        False,
        True,
        True,
        False,
        False,
        False,
    ]


def test_a_parquet_fleet_without_pyarrow_says_to_install_it(monkeypatch):
    """Mutant: report/fleet.py FleetParquet.render_bytes ``except ImportError`` -> an exception
    nothing raises: without pyarrow the user got a bare ImportError instead of tracekit's sentence
    on how to install it (pyarrow hidden here by a None entry in sys.modules)."""
    import sys

    from tracekit.errors import TracekitError
    from tracekit.report.fleet import INSTALL_PYARROW, FleetParquet

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(TracekitError) as e:
        FleetParquet().render_bytes({"rows": []})
    assert str(e.value) == INSTALL_PYARROW


def test_the_roof_comparison_notes_withheld_categories_only_when_there_are_some():
    """Mutant: report/compare/charts.py roof_chart ``if held`` -> ``if not held``: the note under the
    chart named no category when none was withheld, and said nothing when one was. By hand: gemm
    priced on both sides, no note; attention withheld on the after side, a note naming it."""
    from tracekit.report.compare.charts import roof_chart

    phase = {
        "roof": {"before": {"gemm": 0.5}, "after": {"gemm": 0.6}, "withheld": {}},
        "by_category": [{"name": "gemm", "before_ms": 1.0, "after_ms": 2.0}],
    }
    data = {
        "before": {"device": {"spec": "H100 SXM"}},
        "after": {"device": {"spec": "H100 SXM"}},
        "phases": {"decode": phase},
    }
    assert roof_chart(data, "decode")["note"] is None
    phase["roof"]["withheld"] = {"after": {"attention": {"why": "above_roof"}}}
    note = roof_chart(data, "decode")["note"]
    assert note is not None and note.startswith("No bar for attention where its fraction is withheld")


def test_a_fleet_report_counts_errors_and_timeouts_together():
    """Mutant: report/fleet.py view_model ``errors + timeouts`` -> ``errors << timeouts`` (the same
    for 1 and 1, or with no timeouts): 2 errors and 1 timeout are 3 traces not analysed, not 4."""
    from tracekit.report.fleet import view_model

    assert view_model({"traces": 5, "errors": 2, "timeouts": 1, "rows": [], "columns": []})["errors"] == 3
    assert view_model({"traces": 5, "errors": 2, "rows": [], "columns": []})["errors"] == 2


def test_an_hta_part_that_did_not_run_says_why_or_its_status():
    """Mutant: report/hta_view.py _part ``part.get("reason") or part.get("status")`` -> ``and``: a
    part that failed showed its status ("error") instead of its reason, and one with no reason
    showed nothing. By hand: the reason when there is one, else the status."""
    from tracekit.report.hta_view import _part

    def rows(part):
        return part["rows"]

    hta = {
        "idle_breakdown": {"status": "error", "reason": "HTA raised KeyError 'stream'"},
        "temporal_breakdown": {"status": "empty"},
    }
    assert _part(hta, "idle_breakdown", rows) == {"rows": [], "reason": "HTA raised KeyError 'stream'"}
    assert _part(hta, "temporal_breakdown", rows) == {"rows": [], "reason": "empty"}
    assert _part({"x": {"status": "ok", "rows": [1]}}, "x", rows) == {"rows": [1], "reason": None}


def test_a_count_certain_of_itself_shows_no_confidence():
    """Mutant: report/steps_view.py _count ``confidence < 1`` -> another bound: a count known for
    certain (confidence 1.0) got "(confidence 100%)" in its hover text. By hand: 0.5 is shown as
    50%, 1.0 not at all."""
    from tracekit.report.steps_view import _count

    assert _count(5, "vLLM KV-cache writes (5)", 1.0)["title"] == "vLLM KV-cache writes (5)"
    half = _count(5, "vLLM KV-cache writes (5)", 0.5)
    assert half["title"] == "vLLM KV-cache writes (5) (confidence 50%)"
    assert half["short"] == "vLLM KV-cache writes (confidence 50%)"


def test_idle_shares_are_left_blank_when_the_phase_has_no_time():
    """Mutant: report/view.py idle_lines ``p.get("time_ms") or 0.0`` -> ``or -1.0``: a phase whose
    time is missing got negative shares (-200%) instead of none. By hand: sync 2 ms and wait
    0.5 ms of a 10 ms phase are 20% and 5%; with no phase time, no share at all ("—")."""
    from tracekit.report.view import idle_lines

    causes = {"sync": 2.0, "wait": 0.5}
    [line] = idle_lines({"phases": {"decode": {"idle_by_cause": causes, "time_ms": 10.0}}})
    assert line["line"] == "sync 2.00 ms (20.0%), wait 0.500 ms (5.00%)"
    [line] = idle_lines({"phases": {"decode": {"idle_by_cause": causes, "time_ms": None}}})
    assert line["line"] == "sync 2.00 ms (—), wait 0.500 ms (—)"


def test_the_critical_path_line_names_only_the_kinds_that_add_time():
    """Mutant: report/replay_view.py text_lines ``k["value"] > 0`` -> ``!= 0``: a kind with negative
    time on the critical path (an unexplained wait below zero, the replay ahead of the trace)
    was listed beside the kinds that add time. By hand: kernels 3 ms and host work 1 ms are
    listed; launches, syncs and queueing at 0 and the unexplained -0.5 ms are not."""
    from tracekit.report.replay_view import text_lines

    row = {"kernel": 3.0, "launch": 0.0, "host": 1.0, "queue": 0.0, "sync": 0.0, "unexplained": -0.5}
    lines = text_lines({"replay": {"critical_path": {"decode": row}}})
    assert lines == ["critical path, decode (3.50 ms): kernels 3.00 ms, host work 1.00 ms"]


# --- seed 54 (the sample's survivors in tracekit/report, `--seed 54 --lists-only`) -----------------


def _bokeh_objects(item, name: str) -> list[dict]:
    """Every serialised bokeh object called ``name`` in a ``json_item``, read back by json.loads."""
    return [o for o in _dicts(json.loads(json.dumps(item))) if o.get("type") == "object" and o.get("name") == name]


def _figure_height(chart: dict) -> int:
    (fig,) = _bokeh_objects(chart["item"], "Figure")
    return fig["attributes"]["height"]


def test_a_step_timelines_height_counts_the_legends_rows_of_seven():
    """Mutant: report/charts.py step_timeline ``math.ceil(len(set(legend)) / 7)`` -> ``% 7``: the
    legend's rows below the lanes (seven entries a row, ``leg.ncols = 7``) were counted as the
    remainder of entries over seven. Rule (the comment above it): 70 px, 34 px a lane, 22 px a row
    of the legend. By hand: 2 lanes and 3 entries (gemm, attention, "idle: sync") are one row,
    70 + 68 + 22 = 160 (the mutant: 3 rows, 204); 1 lane and 8 categories are two rows,
    70 + 34 + 44 = 148 (the mutant: 8 % 7 = 1 row, 126)."""
    from tracekit.report.charts import step_timeline

    def timeline(lanes, keys):
        tl = {
            "keys": keys,
            "labels": ["k"],
            "lanes": lanes,
            "span_ms": 10.0,
            "phase": "decode",
            "step": 3,
            "why": "slowest step",
            "duration_ms": 10.0,
            "kernels": 9,
        }
        return step_timeline({"device": {"type": "gpu"}, "timelines": [tl]}, 0)

    two_lanes = [
        {"name": "stream 7", "kind": "stream", "segments": [[0.0, 4.0, 0, 0, 1], [4.0, 8.0, 1, 0, 1]]},
        {"name": "GPU idle", "kind": "idle", "segments": [[8.0, 10.0, 2, 0, 1]]},
    ]
    assert _figure_height(timeline(two_lanes, ["gemm", "attention", "sync"])) == 160
    eight = [f"cat{i}" for i in range(8)]
    one_lane = [{"name": "stream 7", "kind": "stream", "segments": [[i, i + 1.0, i, 0, 1] for i in range(8)]}]
    assert _figure_height(timeline(one_lane, eight)) == 148


def test_the_phase_breakdown_is_40_px_a_bar_row_above_90():
    """Mutant: report/charts.py phase_breakdown ``90 + 40 * rows`` -> ``90 + 39 * rows``: the bars
    were squeezed by a pixel a row. Rule: 90 px plus 40 px a bar row (the taller chart's rows), at
    least 84 px plus 21 px a legend entry (category). By hand: prefill and decode, no limiter
    split, two categories: two rows in each chart, 90 + 80 = 170 (the legend needs 126); the
    mutant gives 168. Both charts are that tall."""
    from tracekit.report.charts import phase_breakdown

    def phase(ms):
        return {
            "by_bound": {"compute": ms, "memory": ms},
            "by_bound_share": {"compute": 0.5, "memory": 0.5},
            "by_category": {"gemm": ms, "attention": ms},
            "by_category_share": {"gemm": 0.5, "attention": 0.5},
        }

    out = phase_breakdown({"device": {"type": "gpu"}, "phases": {"prefill": phase(2.0), "decode": phase(1.0)}})
    assert [_figure_height(c) for c in out["charts"]] == [170, 170]


def _roof_lines(chart: dict) -> dict[str, tuple[float, bool]]:
    """Legend label -> (line width, dashed) of each line a roofline chart draws (bokeh's default
    width is 1, left out of the serialised glyph)."""
    glyphs = {}
    for r in _bokeh_objects(chart["item"], "GlyphRenderer"):
        g = r["attributes"]["glyph"]
        if g["name"] == "Line":
            glyphs[r["id"]] = (g["attributes"].get("line_width", 1), "line_dash" in g["attributes"])
    out = {}
    for li in _bokeh_objects(chart["item"], "LegendItem"):
        label = li["attributes"]["label"]
        (ref,) = li["attributes"]["renderers"]
        if label.get("type") == "value" and ref["id"] in glyphs:
            out[label["value"]] = glyphs[ref["id"]]
    return out


def test_every_peak_roof_is_drawn_alike_and_bolder_than_an_achievable_one():
    """Mutant: report/charts.py roofline the peak bandwidth line's ``line_width=2`` -> ``1``: the
    bandwidth roof came out thinner than its own dashed achievable line, unlike the compute roofs.
    Rule of the chart: the peaks (bandwidth and each compute peak) are solid lines of one width,
    the achievable rates dashed and thinner. Hand-built: an H100-like device (3.35 TB/s, 2.8
    achievable; bf16 matrix 989 TFLOP/s, 700 achievable; fp32 vector 67 TFLOP/s) and one GEMM."""
    from tracekit.report.charts import roofline

    point = {
        "label": "aten::mm",
        "kernel": "sm90_gemm",
        "shapes": "[4096, 4096]",
        "category": "gemm",
        "dtype": "bf16",
        "unit": "matrix",
        "calls": 3,
        "time_ms": 2.0,
        "intensity": 100.0,
        "achieved_flops": 200e12,
        "roof_fraction": 0.6,
        "above_roof": None,
    }
    lines = _roof_lines(roofline(_roofline_data(point), "decode", 0))
    peaks = {k: v for k, v in lines.items() if " peak " in f" {k} "}
    achievable = {k: v for k, v in lines.items() if "achievable" in k}
    assert sorted(peaks) == [
        "bf16 matrix peak 989 TFLOP/s",
        "fp32 vector peak 67.0 TFLOP/s",
        "peak bandwidth 3.35 TB/s",
    ]
    assert sorted(achievable) == ["achievable bandwidth 2.80 TB/s", "bf16 matrix achievable 700 TFLOP/s"]
    assert len(set(peaks.values())) == 1 and len(set(achievable.values())) == 1
    (peak_width, peak_dashed), (ach_width, ach_dashed) = next(iter(peaks.values())), next(iter(achievable.values()))
    assert not peak_dashed and ach_dashed and peak_width > ach_width


def test_a_projection_page_gives_each_roofline_its_own_element():
    """Mutant: report/project.py _charts roofline index ``100 * k + i`` -> ``100 + k + i``: with two
    phases the projected side's first roofline and the measured side's second were both
    tk-chart-roofline-101, so two charts were embedded into one page element (an HTML id is
    unique) and one was lost. The RTX 3090 vLLM trace (prefill and decode, gpt-oss-20b) projected
    onto an H100: four rooflines, four elements, each id once on the page and each chart's
    target one of them."""
    import re
    from collections import Counter

    from conftest import read_real

    from tracekit.report.project import render_projection
    from tracekit.whatif.project import project

    html = render_projection(project(read_real("rtx3090_vllm"), "h100-sxm", model="gpt-oss-20b"), "html")
    elements = Counter(re.findall(r'<div class="tk-chart" id="(tk-chart-roofline-[^"]+)"', html))
    targets = re.findall(r'"target_id":"(tk-chart-roofline-[^"]+)"', html)
    assert len(elements) == 4 and set(elements.values()) == {1}
    assert sorted(targets) == sorted(elements)


def test_a_comparison_side_lists_its_repeated_runs_only_when_there_are_several():
    """Mutant: report/compare/view.py run_header ``len(runs) > 1`` -> ``== 1``: a side of one run
    listed that run as "repeated runs", and a side of three listed none. By hand: three runs ->
    their names (name, else path, else "trace"); one run -> nothing."""
    from tracekit.report.compare.view import run_header

    def data(runs):
        side = {"source": {"name": "a.json"}, "device": {"name": "H100"}, "runs": runs}
        return {"before": side, "after": {"source": {"name": "b.json"}, "device": {"name": "H100"}}}

    three = [{"name": "r1.json"}, {"path": "/t/r2.json"}, {}]
    assert run_header(data(three), "before")["runs"] == ["r1.json", "/t/r2.json", "trace"]
    assert run_header(data([{"name": "r1.json"}]), "before")["runs"] == []
    assert run_header(data([]), "before")["runs"] == []


def test_only_the_gemm_flops_context_row_is_given_in_flop():
    """Mutant: report/compare/view.py _context_value ``field == "gemm_flops_per_token"`` -> ``is
    not``: every numeric context row (a batch of 1 vs 8) was shown as FLOPs ("1.00 FLOP"). By hand:
    batch 1 and 8 as plain counts; 1.2e9 and 2.4e9 GEMM FLOPs per token with an SI prefix,
    "1.20 GFLOP" and "2.40 GFLOP"."""
    from tracekit.report.compare.view import context

    rows = [
        {"field": "batch", "label": "batch", "before": 1, "after": 8, "note": ""},
        {"field": "gemm_flops_per_token", "label": "GEMM FLOPs", "before": 1.2e9, "after": 2.4e9, "note": ""},
    ]
    out = context({"context": json.loads(json.dumps(rows))})
    assert [(r["before"], r["after"]) for r in out] == [("1", "8"), ("1.20 GFLOP", "2.40 GFLOP")]


def test_only_a_parquet_output_needs_pyarrow(monkeypatch):
    """Mutant: report/fleet.py check_parquet ``fmt_name == "parquet"`` -> ``is not``: every format
    but Parquet was refused without pyarrow (pyarrow hidden by a None entry in sys.modules), so a
    CSV or HTML batch needed an optional extra it never uses; Parquet itself went unchecked."""
    import sys

    from tracekit.errors import TracekitError
    from tracekit.report.fleet import INSTALL_PYARROW, check_parquet

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    for name in ("csv", "json", "html"):
        check_parquet(name)
    with pytest.raises(TracekitError) as e:
        check_parquet("parquet")
    assert str(e.value) == INSTALL_PYARROW


def test_the_aligned_steps_table_says_how_many_steps_it_leaves_out():
    """Mutant: report/ranks_view.py _aligned_steps ``n > len(rows)`` -> ``n < len(rows)``: the count
    of steps past the table's 50 rows was always 0, so the page's heading said "Steps aligned by
    index (50)" for a run of 53. By hand: ranks of 53 and 20 steps: 50 rows, 3 more; ranks of 10
    steps: 10 rows, none more."""
    from tracekit.report.ranks_view import ranks

    def entry(rank, n):
        return {"rank": rank, "steps": [{"phase": "decode", "time_ms": 1.0} for _ in range(n)]}

    aligned = ranks({"ranks": [entry(0, 53), entry(1, 20)]})["steps"]
    assert (len(aligned["rows"]), aligned["more"]) == (50, 3)
    aligned = ranks({"ranks": [entry(0, 10), entry(1, 10)]})["steps"]
    assert (len(aligned["rows"]), aligned["more"]) == (10, 0)


def test_a_replayed_pair_is_shown_in_its_own_unit():
    """Mutant: report/replay_view.py pair ``unit == "ms"`` -> ``unit > "ms"``: "tok/s" sorts above
    "ms", so times were shown as tokens a second and token rates as milliseconds. By hand: 10 ms
    replayed as 8 ms is "10.0 ms → 8.00 ms"; 100 tok/s as 125 tok/s is "100 tok/s → 125 tok/s"."""
    from tracekit.report.replay_view import pair

    assert pair({"measured": 10.0, "replayed": 8.0}) == "10.0 ms → 8.00 ms"
    assert pair({"measured": 100.0, "replayed": 125.0}, "tok/s") == "100 tok/s → 125 tok/s"


# --- seed 55 (the sample's survivors in tracekit/report, coverage-map mode) -----------------------


def test_a_windows_idle_gaps_carry_the_runs_step_numbers(tmp_path):
    """Mutant: report/annotate.py _idle_slices ``first_step + int(step[i])`` -> ``^``: a split
    window's idle slices named their step ``first_step ^ step``, which is the run's step only
    where the two share no bit; the step slices beside them said ``first_step + step``. annotate's
    docstring: a split window's step 0 is its run's step ``first_step``. By hand: two steps
    (ProfilerStep#0 at 0-900 us, #1 at 1000-1900 us), each with two kernels; annotated as a window
    whose first step is the run's step 3, the gaps in step 0 say 3 and those in step 1 say 4
    (3 ^ 1 would be 2), as do the step slices."""
    from tracekit import read_trace
    from tracekit.analysis.analyze import assemble, measure
    from tracekit.report.annotate import annotate, load_document

    d = Doc()
    for i in range(2):
        t0 = 1000.0 * i
        d.annotation(f"ProfilerStep#{i}", t0, 900)
        for at in (10, 400):
            ext = d.op("aten::mm", t0 + at, 30, dims=[[64, 64], [64, 64]], types=["float", "float"])
            d.kernel("ampere_sgemm_64x64_nn", t0 + at + 2, t0 + at + 100, 50, ext=ext)
    src = d.write(tmp_path / "w.json")
    doc, trace = load_document(str(src)), read_trace(str(src))
    parts, match = measure(trace)
    annotate(doc, trace, parts, assemble(trace, parts, match, with_timelines=False), first_step=3)
    added = [e for e in json.loads(doc.encode())["traceEvents"] if e.get("cat") == "tracekit" and e["ph"] == "X"]
    steps = {e["args"]["step"]: (e["ts"], e["ts"] + e["dur"]) for e in added if "phase_source" in e["args"]}
    assert sorted(steps) == [3, 4]
    idle = [e for e in added if "cause" in e["args"]]
    assert idle and {e["args"]["step"] for e in idle} == {3, 4}
    for e in idle:
        lo, hi = steps[e["args"]["step"]]
        assert lo <= e["ts"] and e["ts"] + e["dur"] <= hi, e


def _figure(chart: dict) -> dict:
    (fig,) = _bokeh_objects(chart["item"], "Figure")
    return fig["attributes"]


def _range(fig: dict, axis: str) -> tuple[float, float]:
    """(start, end) of a figure's Range1d (bokeh leaves out a start at its default, 0)."""
    attrs = fig[f"{axis}_range"]["attributes"]
    return attrs.get("start", 0.0), attrs["end"]


def _drawn(chart: dict, glyph: str) -> list[tuple[list[float], list[float]]]:
    """(xs, ys) of every renderer of glyph ``glyph`` ("Line", "Scatter") in a chart, each column
    named by its glyph's x and y fields (a source used twice is serialised once, then by id)."""
    sources = {s["id"]: s for s in _bokeh_objects(chart["item"], "ColumnDataSource") if "attributes" in s}
    out = []
    for r in _bokeh_objects(chart["item"], "GlyphRenderer"):
        g = r["attributes"]["glyph"]
        if g["name"] == glyph:
            data = dict(sources[r["attributes"]["data_source"]["id"]]["attributes"]["data"]["entries"])
            out.append((data[g["attributes"]["x"]["field"]], data[g["attributes"]["y"]["field"]]))
    return out


def _axis_labels(chart: dict) -> list[str]:
    return sorted(a["attributes"].get("axis_label", "") for a in _bokeh_objects(chart["item"], "LogAxis"))


def test_the_decode_chart_shows_its_tallest_step_whole():
    """Mutant: report/charts.py decode_steps ``Range1d(start=0, end=top * 1.12)`` -> ``top - 1.12``:
    the y axis ended 1.12 ms below the tallest bar or duration, so the slowest steps, the ones a
    reader looks for, were cut off at the top (and a chart of steps under 1.12 ms got an axis
    ending below 0). The chart draws each step's busy + idle as a stacked bar and its duration as
    a line, on an axis from 0 ms: every value must lie inside it. By hand: three decode steps,
    busy + idle 3 + 1, 2 + 1 and 2.5 + 1 ms, durations 4.5, 3.5 and 3 ms: the tallest value is
    4.5 ms, so the axis runs from 0 to above 4.5."""
    from tracekit.report.charts import decode_steps

    steps = [
        {"index": i, "phase": "decode", "gpu_busy_ms": busy, "gpu_idle_ms": 1.0, "duration_ms": dur, "kernels": 3}
        for i, (busy, dur) in enumerate([(3.0, 4.5), (2.0, 3.5), (2.5, 3.0)])
    ]
    chart = decode_steps({"device": {"type": "gpu"}, "steps": steps})
    start, end = _range(_figure(chart), "y")
    assert start == 0 and end > 4.5
    lines = _drawn(chart, "Line")
    assert [4.5, 3.5, 3.0] in [ys for _, ys in lines]  # the durations
    for _, ys in lines:
        assert all(start <= y <= end for y in ys)


def _roofline_data(point: dict) -> dict:
    """An H100-like device (3.35 TB/s, 2.8 achievable; bf16 matrix 989 TFLOP/s, 700 achievable;
    fp32 vector 67 TFLOP/s) and one op group."""
    roofs = {
        "bandwidth": 3.35e12,
        "achievable_bandwidth": 2.8e12,
        "compute": [
            {"dtype": "bf16", "unit": "matrix", "peak_flops": 989e12, "achievable_flops": 700e12},
            {"dtype": "fp32", "unit": "vector", "peak_flops": 67e12, "achievable_flops": None},
        ],
    }
    return {"device": {"spec": "H100 SXM"}, "roofline": {"decode": {"reason": None, "points": [point], "roofs": roofs}}}


def _op_group(intensity: float, achieved: float, category: str = "elementwise") -> dict:
    return {
        "label": "aten::add",
        "kernel": "vectorized_elementwise_kernel",
        "shapes": "[4096, 4096]",
        "category": category,
        "dtype": "bf16",
        "unit": "vector",
        "calls": 3,
        "time_ms": 2.0,
        "intensity": intensity,
        "achieved_flops": achieved,
        "roof_fraction": 0.8,
        "above_roof": None,
    }


def test_the_roofline_shows_the_bandwidth_roof_from_the_charts_left_edge():
    """Mutant: report/charts.py roofline ``y_lo = min(min(ys), bw * x_lo) / 4`` -> ``bw + x_lo``: the
    bottom of the y axis no longer made room for the bandwidth roof where it starts. The roofs are
    drawn from the x axis's left end (x_lo), so where x_lo is under 1 FLOP/byte the bandwidth roofs
    began below the chart and their left part was lost. Every roof line and point must lie inside
    the chart's axes. By hand: a bf16 add (1 FLOP per 6 bytes read and written: 1/6 FLOP/byte) at
    80% of the 3.35 TB/s roof, 0.447 TFLOP/s; the x axis starts at (1/6) / 8 = 0.0208 FLOP/byte,
    where the bandwidth roof is at 3.35e12 x 0.0208 = 0.0698 TFLOP/s (the mutant's axis started at
    0.447 / 4 = 0.112)."""
    from tracekit.report.charts import roofline

    chart = roofline(_roofline_data(_op_group(1 / 6, 0.8 * 3.35e12 / 6)), "decode", 0)
    fig = _figure(chart)
    assert _axis_labels(chart) == ["achieved TFLOP/s", "arithmetic intensity (FLOP/byte)"]
    (x0, x1), (y0, y1) = _range(fig, "x"), _range(fig, "y")
    assert x0 == pytest.approx(1 / 48)
    lines = _drawn(chart, "Line")
    assert [pytest.approx(3.35e12 / 48 / 1e12)] in [ys[:1] for _, ys in lines]
    for xs, ys in [*lines, *_drawn(chart, "Scatter")]:
        assert all(x0 <= x <= x1 for x in xs) and all(y0 <= y <= y1 for y in ys), (xs, ys)


def test_an_achievable_compute_roof_is_drawn_at_its_rate_in_the_axis_unit():
    """Mutant: report/charts.py roofline the achievable compute line's ``[ach / scale] * 2`` ->
    ``[ach % scale] * 2``: the dashed bf16 matrix achievable roof (700 TFLOP/s) was drawn at
    700e12 % 1e12 = 0, off the log axis, though its legend still named it. The axis is in TFLOP/s
    (its label), so the line must be flat at 700 from its start to the chart's right edge, as the
    989 TFLOP/s peak is at 989. By hand: one GEMM at 100 FLOP/byte and 200 TFLOP/s."""
    from tracekit.report.charts import roofline

    chart = roofline(_roofline_data(_op_group(100.0, 200e12, "gemm")), "decode", 0)
    fig = _figure(chart)
    assert _axis_labels(chart) == ["achieved TFLOP/s", "arithmetic intensity (FLOP/byte)"]
    x_end = _range(fig, "x")[1]
    flat = sorted(ys[0] for xs, ys in _drawn(chart, "Line") if ys[0] == ys[1] and xs[1] == x_end)
    assert flat == [pytest.approx(67.0), pytest.approx(700.0), pytest.approx(989.0)]


def _alphas(chart: dict) -> list[tuple[str, str, float]]:
    """(glyph, property, value) of every alpha set on a chart's glyphs (each renderer's glyph and
    its selection, nonselection, hover and muted variants), as serialised in its ``json_item``."""
    out = []
    for r in _bokeh_objects(chart["item"], "GlyphRenderer"):
        for key in ("glyph", "selection_glyph", "nonselection_glyph", "hover_glyph", "muted_glyph"):
            g = r["attributes"].get(key)
            if not isinstance(g, dict) or "attributes" not in g:
                continue  # absent, "auto", or a reference to a glyph serialised elsewhere
            for prop, v in g["attributes"].items():
                if prop.endswith("alpha"):
                    out.append((f"{key} {g['name']}", prop, v["value"] if isinstance(v, dict) else v))
    return out


def test_the_roofline_draws_its_op_groups_filled_in_their_category_colour():
    """Mutant: report/charts.py roofline the op groups' ``fill_alpha=0.6`` -> ``-0.4``: an alpha is
    an opacity, a fraction in [0, 1]. Bokeh's Python side takes -0.4 as is, and BokehJS turns the
    colour's alpha into a byte clamped to 0-255 (``color2rgba``'s ``byte(alpha * a)`` in bokeh.js),
    so the fill was transparent: every op group was drawn as an empty outline, and the category
    colour the points are filled with (their legend) was gone. Rule: every alpha of the chart's
    glyphs lies in [0, 1], and the points' fill is drawn (alpha above 0). Hand-built: the H100-like
    device and two op groups, a GEMM and an elementwise add."""
    from tracekit.report.charts import roofline

    data = _roofline_data(_op_group(100.0, 200e12, "gemm"))
    data["roofline"]["decode"]["points"].append(_op_group(1 / 6, 0.8 * 3.35e12 / 6))
    chart = roofline(data, "decode", 0)
    alphas = _alphas(chart)
    assert alphas and all(0 <= v <= 1 for _, _, v in alphas), alphas
    scatters = [r["attributes"]["glyph"] for r in _bokeh_objects(chart["item"], "GlyphRenderer")]
    scatters = [g for g in scatters if g["name"] == "Scatter"]
    fills = [g["attributes"].get("fill_alpha", {"value": 1.0})["value"] for g in scatters]  # bokeh's default: 1
    assert fills and all(v > 0 for v in fills), fills


def test_junit_naming_the_report_compare_is_about_to_write_is_refused(tmp_path):
    """Mutant: report/compare/junit.py check_target ``other != "-"`` -> ``other == "-"``: only a
    path that already exists was caught (by samefile), so `-o r.xml --junit r.xml` in a fresh folder
    passed the check, and the JUnit XML was written over the comparison just written there.
    check_target's docstring: a JUnit path that is one of the inputs or the report is refused, with
    one sentence, before the slow reads; bad input exits 2 (docs/exit-codes.md). Nothing is
    written."""
    out = tmp_path / "r.xml"
    result = CliRunner().invoke(
        main,
        ["compare", str(TINY), str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"), "-o", str(out), "-f", "json"]
        + ["--junit", str(out), "--fail-if", "tpot_p50>+5%"],
    )
    assert result.exit_code == 2, result.output
    assert "--junit" in result.output and "one of compare's own files" in result.output
    assert not out.exists()


def test_junit_marks_skipped_only_the_gates_whose_figure_a_run_lacks(tmp_path):
    """Mutant: report/compare/junit.py junit_xml ``g["verdict"] == "missing"`` -> ``>=``: "noise" and
    "pass" sort above "missing", so every gate that held (or was within noise) got a ``<skipped>``,
    and CI showed the gates that passed as not run, while the suite's skipped count still said 0.
    docs/compare.md: one testcase per gate, ``<failure>`` with the sentence for a failed gate,
    ``<skipped>`` for a figure a run lacks. tiny-bs1 vs tiny-bs8 (both have TPOT and TTFT): TPOT p50
    +28% with an interval reaching back across +5% (noise, as compare says), +28% under +100%
    (pass), and TTFT 10.6 -> 57.5 ms, a once-per-run figure judged by its threshold, past +2 ms
    (fail, exit 1). Read back with ElementTree: no ``<skipped>`` anywhere, one ``<failure>``, on
    the TTFT gate."""
    import xml.etree.ElementTree as ET

    junit = tmp_path / "gates.xml"
    gates = ["tpot_p50>+5%", "tpot_p50>+100%", "ttft_ms>+2ms"]
    result = CliRunner().invoke(
        main,
        ["compare", str(TINY), str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"), "-o", str(tmp_path / "c.json")]
        + ["--junit", str(junit)]
        + [arg for g in gates for arg in ("--fail-if", g)],
    )
    assert result.exit_code == 1, result.output
    assert "gate failed: ttft_ms>+2ms" in result.output
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == gates
    assert suite.get("skipped") == "0" and suite.findall("testcase/skipped") == []
    assert [c.get("name") for c in cases if c.find("failure") is not None] == ["ttft_ms>+2ms"]


def test_the_junit_file_declares_xml_1_0_in_the_encoding_it_is_written_in(tmp_path):
    """Mutant: report/compare/junit.py junit_xml ``xml_declaration=True`` -> ``False``: the JUnit file
    began at ``<testsuites>``, with no XML declaration. XML 1.0 (section 2.8): a document should
    begin with a declaration naming the version, and its encoding declaration must name the
    encoding the bytes are in. Read from the file's bytes: the declaration, version 1.0, and an
    encoding under which the bytes decode to the gate's sentence with its non-ASCII characters
    (µs, →) as written; expat (ElementTree.parse) reads the same sentence back."""
    import re
    import xml.etree.ElementTree as ET

    from tracekit.report.compare.junit import write_junit

    sentence = "decode_step_p50>+5%: decode step p50 changed +9.9% (812 µs → 892 µs), above +5.0% beyond noise"
    gate = {"expr": "decode_step_p50>+5%", "metric": "decode_step_p50", "verdict": "fail", "sentence": sentence}
    path = tmp_path / "gates.xml"
    write_junit([gate], str(path))
    raw = path.read_bytes()
    declared = re.match(rb"<\?xml version=(['\"])1\.0\1 encoding=(['\"])([A-Za-z][A-Za-z0-9._-]*)\2\s*\?>", raw)
    assert declared, raw[:60]
    assert "(812 µs → 892 µs)" in raw.decode(declared.group(3).decode("ascii"))
    (case,) = ET.parse(path).getroot().iter("testcase")
    assert case.find("failure").text == sentence


def test_two_runs_on_the_same_device_are_tagged_by_their_file_names():
    """Mutant: report/compare/view.py same_device ``(data["before"].get("device") or {})`` ->
    ``and {}``: the before side's device was read as empty (or, with no device at all, crashed
    on None.get), so two runs on the same H100 counted as on different devices and both chart
    rows and column heads read "H100 SXM", which does not say which run is which. tag's
    docstring: a run is labelled by its spec row when the devices differ, else by its trace's
    file stem. By hand: main.pt.trace.json.gz and pr.pt.trace.json.gz, both on an H100 SXM, are
    "main" and "pr"; a before side with no device against an H100 are different devices."""
    from tracekit.report.compare.view import same_device, tag

    h100 = {"name": "NVIDIA H100 80GB HBM3", "spec": "H100 SXM", "type": "cuda"}
    data = {
        "before": {"source": {"name": "main.pt.trace.json.gz"}, "device": dict(h100)},
        "after": {"source": {"name": "pr.pt.trace.json.gz"}, "device": dict(h100)},
    }
    assert same_device(data)
    assert (tag(data, "before"), tag(data, "after")) == ("before: main", "after: pr")
    data["before"]["device"] = None
    assert not same_device(data)
    assert tag(data, "after") == "after: H100 SXM"


def test_an_absolute_gate_is_shown_in_its_figures_unit_not_as_a_percentage():
    """Mutant: report/compare/view.py gates' show ``unit == "%"`` -> ``unit >= "%"``: every unit
    sorting after "%" ("ms", "tok/s") was taken for a relative gate, so `ttft_ms>+2ms` was shown
    with a threshold of "+200%" and `decode_tokens_per_s<-100tok/s` with "-10,000%".
    docs/compare.md: a threshold is relative with % or absolute in the figure's unit (ms, tok/s,
    pp for shares); docs/json-schema.md: gates[] carries each gate's unit. By hand, a gates[]
    entry per kind: 2 ms, -100 tok/s, -2 pp (a share's 0.02) and +5% (0.05), each written with
    three significant digits (formatting.num) and a sign, as signed's docstring shows ("+1.59 ms",
    "+23.9 pp")."""
    from tracekit.report.compare.view import gates

    def gate(expr, metric, unit, threshold, change):
        return {"expr": expr, "metric": metric, "unit": unit, "threshold": threshold, "change": change}

    data = {
        "gates": [
            dict(gate("ttft_ms>+2ms", "ttft_ms", "ms", 2.0, 0.5), verdict="pass"),
            dict(gate("decode_tokens_per_s<-100tok/s", "decode_tokens_per_s", "tok/s", -100.0, -20.0), verdict="pass"),
            dict(gate("decode_mbu<-2pp", "decode_mbu", "", -0.02, 0.01), verdict="pass"),
            dict(gate("tpot_p50>+5%", "tpot_p50", "%", 0.05, 0.01), verdict="pass"),
        ]
    }
    rows = gates(data)
    assert [(r["threshold"], r["change"]) for r in rows] == [
        ("+2.00 ms", "+0.500 ms"),
        ("-100 tok/s", "-20.0 tok/s"),
        ("-2.00 pp", "+1.00 pp"),
        ("+5.00%", "+1.00%"),
    ]


# --- seed 56 (the sample's survivors in tracekit/report, coverage-map mode) -----------------------


def test_the_phase_breakdown_makes_room_for_a_long_category_legend():
    """Mutant: report/charts.py phase_breakdown ``84 + 21 * len(cats)`` -> ``84 // 21 * len(cats)``: the
    legend's floor became 4 px a category, below the bars' own height, so a long category legend
    no longer made the charts taller and was cut off. Rule (the comment on that line, "room for the
    category legend"): at least 84 px plus 21 px a category. By hand: one phase (one bar row in
    each chart, 90 + 40 = 130 px) with eight categories: 84 + 8 x 21 = 252 px; the mutant gives
    max(130, 4 x 8) = 130. Both charts are that tall."""
    from tracekit.report.charts import phase_breakdown

    cats = ["gemm", "attention", "elementwise", "norm", "reduction", "copy", "communication", "other"]
    phase = {
        "by_bound": {"compute": 1.0, "memory": 1.0},
        "by_bound_share": {"compute": 0.5, "memory": 0.5},
        "by_category": {c: 0.25 for c in cats},
        "by_category_share": {c: 1 / 8 for c in cats},
    }
    out = phase_breakdown({"device": {"type": "gpu"}, "phases": {"decode": phase}})
    assert [_figure_height(c) for c in out["charts"]] == [252, 252]


def test_a_comparisons_stacked_chart_gives_its_legend_84_px_and_21_a_row():
    """Mutant: report/compare/charts.py stacked_height ``84 + 21 * rows`` -> ``84 | 21 * rows``: the
    chart's room for its legend was the bitwise or of the two, 126 px for six rows (84 | 126), so
    the 200 px floor won and a legend of six rows got 200 px instead of 210; ten rows got 214
    (84 | 210) instead of 294, less than nine rows' 253. Rule: the same room a legend entry gets in
    the report's phase breakdown (report/charts.py:200, "room for the category legend": 84 px
    plus 21 px a row), at least 200 px; a legend of more than seven entries is laid out in two
    columns (compare/charts.py stacked_ms, ``ncols = 2``), so 12 entries are 6 rows and 20 are
    10. By hand: 3 entries 200; 6: 84 + 126 = 210; 7: 84 + 147 = 231; 12: 210; 17 (9 rows): 84 + 189
    = 273; 20: 84 + 210 = 294."""
    from tracekit.report.compare.charts import stacked_height

    assert [stacked_height(n) for n in (3, 6, 7, 12, 17, 20)] == [200, 210, 231, 210, 273, 294]


def test_a_slowdown_is_stated_as_the_after_runs_time_over_the_before_runs():
    """Mutant: report/compare/view.py speedup ``1 / x`` -> ``1 // x``: a slowdown's factor was
    rounded down to a whole number, so an after run taking 2.5 times as long was "2.0x slower".
    The docstring: x is before time / after time, a slowdown "2.3x slower". By hand: 4 ms before and
    10 ms after is 10 / 4 = 2.5 times as long; 3 ms and 10 ms 3.33 times, "3.3x" to the two
    figures of the docstring's "1.6x faster" and "2.3x slower" (the mutant: 3.0x)."""
    from tracekit.report.compare.view import speedup

    assert speedup(4 / 10) == "2.5x slower"
    assert speedup(3 / 10) == "3.3x slower"


def test_a_negative_change_carries_its_minus_sign_only():
    """Mutant: report/compare/view.py signed ``x > 0`` -> ``x > -1``: every change above -1 was given
    a "+", so a drop of half a millisecond read "+-0.500 ms", a share falling 23.9 points "+-23.9 pp"
    and no change at all "+0 ms". The docstring's forms: "+1.59 ms", "-1,115 tok/s", "+23.9 pp"."""
    from tracekit.report.compare.view import signed

    assert signed(1.59, "ms") == "+1.59 ms" and signed(-1115, "tok/s") == "-1,115 tok/s"
    assert signed(0.239, "") == "+23.9 pp" and signed(-0.239, "") == "-23.9 pp"
    assert signed(-0.5, "ms").startswith("-0.5") and not signed(0, "ms").startswith("+")


def test_a_long_kernel_name_in_a_comparison_table_is_cut_to_the_table_width():
    """Mutant: report/compare/view.py _cut ``name[: KERNEL_WIDTH - 1]`` -> ``KERNEL_WIDTH - 2``: a
    long kernel name was cut one character short of the tables' stated width (KERNEL_WIDTH, 44
    characters of a kernel name, the ellipsis among them). By hand: a 60-character name becomes its
    first 43 characters and "…", 44 in all; a name of exactly 44 is shown whole."""
    from tracekit.report.compare.view import _cut

    name = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn_xyz"[:60]
    assert len(name) == 60
    assert _cut(name) == name[:43] + "…" and len(_cut(name)) == 44
    assert _cut(name[:44]) == name[:44]


def test_mixed_steps_are_listed_as_many_as_a_kernel_table_and_the_rest_counted_in_words():
    """Mutant: report/view.py ``MIXED_ROWS = 15`` -> ``16``: the report listed one mixed step more
    than its kernel tables list kernels, though the rule beside it (and mixed_lines' docstring) is
    as many as the report's kernel tables list per phase (analysis.tables.TOP_KERNELS), then how
    many are left out. With one step more than that, the last line counts it, in the singular
    ("1 more mixed step": the line said "1 more mixed steps" before); two more, in the plural.
    Each step here has an unknown decode cost, so each line is the short one; the costliest-first
    order is left to the other tests."""
    from tracekit.analysis.tables import TOP_KERNELS
    from tracekit.report.view import mixed_lines

    def data(n: int) -> dict:
        marginal = {"ms": None, "reason": "no kernel of the step has a known cost"}
        split = {"prefill": {"tokens": 512}, "decode": {"tokens": 8}, "decode_marginal": marginal}
        return {"steps": [{"index": i, "split": split} for i in range(n)]}

    lines = mixed_lines(data(TOP_KERNELS + 1))
    assert len(lines) == TOP_KERNELS + 1
    assert all(line.startswith(f"step {i}: 512 prefill + 8 decode tokens") for i, line in enumerate(lines[:-1]))
    assert lines[-1] == "and 1 more mixed step (the JSON lists each)"
    assert mixed_lines(data(TOP_KERNELS + 2))[-1] == "and 2 more mixed steps (the JSON lists each)"
    assert len(mixed_lines(data(TOP_KERNELS))) == TOP_KERNELS


# --- seed 57 (the sample's survivors in tracekit/report, coverage-map mode) -----------------------


def _x_span(chart: dict) -> tuple[float, float]:
    """(start, end) of a figure's x Range1d; bokeh leaves out an attribute at its own default,
    which is read from bokeh's Range1d itself."""
    from bokeh.models import Range1d

    x = _figure(chart)["x_range"]
    assert x["name"] == "Range1d"
    attrs = x.get("attributes", {})
    return attrs.get("start", Range1d().start), attrs.get("end", Range1d().end)


def test_the_phase_breakdowns_share_bars_run_from_0_to_100_percent():
    """Mutant: report/charts.py _stacked_share_bars ``Range1d(start=0, end=1)`` -> ``end=2``: the
    x axis of the breakdown's 100 % bars (the docstring: "Horizontal 100 % bars") ran to 200 %, so
    every whole bar filled only half the chart. The shares of a phase add up to 1, so a bar ends
    at 1 and the axis must be 0 to 1 (0 % to 100 %). By hand: compute 3 ms and memory 1 ms are
    75 % and 25 %; gemm 3 ms and attention 1 ms the same: each bar's last segment ends at 1."""
    from tracekit.report.charts import phase_breakdown

    phase = {
        "by_bound": {"compute": 3.0, "memory": 1.0},
        "by_bound_share": {"compute": 0.75, "memory": 0.25},
        "by_category": {"gemm": 3.0, "attention": 1.0},
        "by_category_share": {"gemm": 0.75, "attention": 0.25},
    }
    out = phase_breakdown({"device": {"type": "gpu"}, "phases": {"decode": phase}})
    assert len(out["charts"]) == 2
    for chart in out["charts"]:
        assert _x_span(chart) == (0, 1)
        (source,) = [s for s in _bokeh_objects(chart["item"], "ColumnDataSource") if "attributes" in s]
        data = dict(source["attributes"]["data"]["entries"])
        assert sorted(data["right"]) == [0.75, 1.0]


def test_a_report_file_gets_the_mode_a_plain_write_would_give(tmp_path):
    """Mutant: report/output.py write_atomic ``0o666 & ~_umask()`` -> ``0o666 // ~_umask()``: with a
    umask of 022, 0o666 // -19 = -24, which chmod takes as 0o7750: the report came out executable
    and set-uid/set-gid (mkstemp's own 0o600 is what the chmod is there to undo). Rule (the
    docstring's promise that the temporary file only stands in for the file itself): the report
    gets the mode a plain ``open(path, "w")`` gives a new file in the same folder under the same
    umask, 0o644 under 022 and 0o640 under 027."""
    import os
    import stat

    from tracekit.report.output import write_atomic

    for mask, want in ((0o022, 0o644), (0o027, 0o640)):
        old = os.umask(mask)
        try:
            plain = tmp_path / f"plain{mask:o}.txt"
            with open(plain, "w") as f:
                f.write("x")
            path = tmp_path / f"report{mask:o}.txt"
            assert write_atomic(str(path), "x") == 1
        finally:
            os.umask(old)
        assert stat.S_IMODE(plain.stat().st_mode) == want
        assert stat.S_IMODE(path.stat().st_mode) == want


def test_a_plans_method_keeps_the_plain_text_between_its_marked_up_runs():
    """Mutant: report/plan.py _inline ``if m.start() > at`` -> ``m.start() < at``: the plain text
    before each ``code``, **bold** or *italic* run was dropped (a match never starts before the
    last one's end, so the mutant's test never holds), and the method read "tracekit planeach
    then compare". Rule: the docstring, ``text`` as (style, text) runs, plain runs "" among them;
    the runs put back together are the text less its markup."""
    from tracekit.report.plan import _inline

    text = "run ``tracekit plan`` on **each** trace, *then* compare"
    runs = _inline(text)
    assert runs == [
        ("", "run "),
        ("code", "tracekit plan"),
        ("", " on "),
        ("strong", "each"),
        ("", " trace, "),
        ("em", "then"),
        ("", " compare"),
    ]
    assert "".join(t for _, t in runs) == "run tracekit plan on each trace, then compare"


def test_a_replays_prefill_row_gives_ttft_when_the_report_is_read_back_from_json():
    """Mutant: report/replay_view.py phase_figures ``phase == "prefill"`` -> ``phase is "prefill"``:
    the phase names of a report rendered from its JSON document (what ``tracekit report`` reads
    from its cache the second time, cli/report.py: ``get_json`` is json.loads) are fresh strings,
    not the interned constant, so the prefill row lost its TTFT: "latency" and no figures. Rule:
    docs/replay.md (per phase, the replayed step time, TTFT / TPOT p50 and tokens/s beside the
    measured ones): prefill gives TTFT, decode TPOT p50. By hand: 10 ms replayed as 8 ms is
    "10.0 ms → 8.00 ms" (the form seed 54's pair test states)."""
    from tracekit.report.replay_view import section

    def fig(key):
        return {
            "steps": 2,
            "measured_ms": 20.0,
            "replayed_ms": 16.0,
            "saving_ms": 4.0,
            key: {"measured": 10.0, "replayed": 8.0},
        }

    data = {
        "replay": {
            "together": {
                "whatif": ["--remove launch"],
                "sum_of_parts_ms": {"prefill": 4.0, "decode": 4.0},
                "phases": {"prefill": fig("ttft_ms"), "decode": fig("tpot_p50_ms")},
            }
        }
    }
    rows = section(json.loads(json.dumps(data)))["together"]["phases"]
    assert [(r["phase"], r["latency_label"], r["latency"]) for r in rows] == [
        ("prefill", "TTFT", "10.0 ms → 8.00 ms"),
        ("decode", "TPOT p50", "10.0 ms → 8.00 ms"),
    ]


# --- seed 58 (the sample's survivors in tracekit/report, coverage-map mode) -----------------------


def test_the_upper_bound_legend_lists_only_the_upper_bound_reasons_of_a_mixed_phase():
    """Mutant: report/view.py estimate_legend ``k != "model" or p.get("bytes_estimate") != "model"``
    -> ``and``: the line of the "≤" mark (an upper bound) took every reason of a phase whose bytes
    are the model's estimate (a sum of bounds of both directions), the lower bound's too, and the
    "~" line took the reasons of a phase whose bytes are only an upper bound. Rule: the docstring
    and the JSON (docs/json-schema.md: ``bytes_estimate_reasons`` is {estimate kind: why}): each
    mark's line gives the reasons of its own kind; only a phase whose bytes are the model's ("~")
    brings all of its reasons to the "~" line (the comment at the line). By hand: prefill is an
    upper bound for reason E; decode mixes an upper bound (U) and a lower bound (L), so it is "~".
    "≤" line: E; U. "~" line: U; L."""
    from tracekit.report.view import estimate_legend

    data = {
        "phases": {
            "prefill": {"bytes_estimate": "upper", "bytes_estimate_reasons": {"upper": "E"}},
            "decode": {"bytes_estimate": "model", "bytes_estimate_reasons": {"upper": "U", "lower": "L"}},
        }
    }
    upper, model = estimate_legend(["upper", "model"], data)
    assert upper.startswith("≤ ") and upper.endswith(" (E; U)"), upper
    assert model.startswith("~ ") and model.endswith(" (U; L)"), model


def test_a_parquet_fleet_that_cannot_be_written_is_one_sentence(tmp_path):
    """Mutant: report/fleet.py write_fleet ``except OSError`` -> an exception nothing raises: a
    Parquet fleet whose folder is missing (no ``make_parent``) escaped as a bare
    FileNotFoundError (a traceback) instead of the TracekitError "cannot write PATH: ..." that
    every other output gives (exit 2, docs/exit-codes.md). Nothing is left behind."""
    pytest.importorskip("pyarrow")
    from tracekit.batch.rows import COLUMNS
    from tracekit.errors import TracekitError
    from tracekit.report.fleet import get_renderer, write_fleet

    target = tmp_path / "no-such-folder" / "fleet.parquet"
    with pytest.raises(TracekitError, match=f"cannot write {target}: No such file or directory"):
        write_fleet({"rows": [], "columns": list(COLUMNS)}, get_renderer("parquet"), str(target))
    assert list(tmp_path.iterdir()) == []
