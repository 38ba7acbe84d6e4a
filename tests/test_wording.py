"""Small things a user reads: labels, colours, units, and charts that say what they mean."""

from __future__ import annotations

import colorsys

import pytest
from click.testing import CliRunner
from conftest import read_real, real_trace_path

from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.report import render


def test_copies_and_fills_are_memory_bound():
    a = analyze(read_real("h100_hf"))
    copies = a.work[a.work["kind"].isin(["memcpy", "memset"])]
    assert len(copies) and (copies["bound"] == "memory").all()


def test_summary_words():
    out = CliRunner().invoke(main, ["summary", str(real_trace_path("v100_ddp"))]).output
    assert "more described" not in out and "other device" in out
    assert "phases from" not in out and "phases: no inference steps found" in out
    unclassified = analyze(read_real("a100_particle"))
    texts = " ".join(f.text for f in unclassified.findings)
    assert "steps':" not in texts and "Unclassified steps:" in texts


def test_report_header_words():
    html = render(analyze(read_real("mi300x_decode")), "html")
    assert "chosen by measured" not in html and "chosen by exact" not in html
    assert '<div class="scroll"><table class="phases">' in html


def _hue(color: str) -> float:
    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return colorsys.rgb_to_hsv(r, g, b)[0] * 360


def test_elementwise_and_normalization_look_different():
    from tracekit.report.charts import CATEGORY_COLORS

    d = abs(_hue(CATEGORY_COLORS["elementwise"]) - _hue(CATEGORY_COLORS["normalization"]))
    assert min(d, 360 - d) > 60


def test_a_one_step_decode_chart_is_not_one_huge_bar():
    """Bug caught: one decode step drawn as one bar on an axis from -3 to 3 (issue 44 item 9): a
    single step gets a sentence with its own figures instead of a chart."""
    pytest.importorskip("bokeh")
    from tracekit import formatting as fmt
    from tracekit.report.charts import decode_steps

    data = analyze(read_real("mi300x_decode")).to_dict()
    chart = decode_steps(data)
    assert "item" not in chart
    (step,) = [s for s in data["steps"] if s["phase"] in ("decode", "mixed")]
    assert "nothing changes over time" in chart["reason"] and fmt.ms(step["duration_ms"]) in chart["reason"]


def test_identical_runs_are_the_same_speed():
    from tracekit.report.compare.view import speedup

    assert speedup(1.0) == "same speed" and speedup(1.6) == "1.6x faster" and speedup(0.5) == "2.0x slower"
