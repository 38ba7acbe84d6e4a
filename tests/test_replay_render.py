"""The step replay in the outputs: the report's "What would help, replayed" (HTML, Markdown, text),
the critical-path lane of the step timeline, the "critical path" track `tracekit annotate` writes,
and the MCP tool `whatif`.

The trace is hand-built (tests/replay_material.py): every figure below follows from where its
launches and kernels were placed, and one kernel is named with a <script> element.
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner
from replay_material import EVIL, FIRST_US, LAUNCH_US, STEP_US, STEPS, TAIL_US, launch_bound

from tracekit.analysis import analyze
from tracekit.cli import main
from tracekit.trace import read_trace


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return launch_bound(tmp_path_factory.mktemp("replay_render") / "evil.json", odd_kernel=EVIL)


@pytest.fixture(scope="module")
def analysis(trace_path):
    return analyze(read_trace(str(trace_path)))


def _html(data: dict) -> str:
    from tracekit.report.render_html import HtmlRenderer

    return HtmlRenderer(include_js=False).render_data(data)


def test_html_section_shows_the_findings_replayed_saving(analysis):
    """Fails if the section is missing, or shows the summed idle instead of the replayed saving: the
    launch-bound finding's what-if saves the launches, 202 us per step, 0.808 ms over 4 steps."""
    html = _html(analysis.to_dict())
    assert 'id="replayed"' in html and "What would help, replayed" in html
    row = html[html.index('data-finding="launch-bound"') :]
    row = row[: row.index("</tr>")]
    assert f"{STEPS * LAUNCH_US / 1e3:.3f} ms" in row  # 0.808 ms
    assert "1.20 ms → 0.392 ms" in row
    assert "Replayed unchanged, the replay reproduced each of the 4 steps within 0%" in html


def test_html_escapes_trace_strings_everywhere(analysis):
    """Fails if a template or the section renders a trace-derived string raw (|safe, autoescape off):
    the kernel's <script> name reaches the page (top kernels, the timeline's critical path) only
    escaped, and so does a what-if text carrying one."""
    data = analysis.to_dict()
    # A what-if naming a synchronising call is the trace's text (sync:NAME): carry a hostile one.
    data["replay"]["what_would_help"][0]["whatif"] = [f"synchronising call {EVIL} removed"]
    html = _html(data)
    assert "<script>alert(1)" not in html
    section = html[html.index('id="replayed"') : html.index("</section>", html.index('id="replayed"'))]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section


def test_md_and_text_carry_the_section_compactly(analysis):
    """Fails if Markdown or the terminal drop the replayed saving or the books, or Markdown lets the
    what-if's HTML through unescaped."""
    from tracekit.report import render

    data = analysis.to_dict()
    data["replay"]["what_would_help"][0]["whatif"] = [f"synchronising call {EVIL} removed"]
    from tracekit.report.render_md import MarkdownRenderer
    from tracekit.report.render_text import TextRenderer

    md = MarkdownRenderer().render_data(data)
    assert "**What would help, replayed**" in md
    assert "saves 0.808 ms replayed" in md and "<script>" not in md
    text = TextRenderer().render_data(data)
    assert "what would help, replayed" in text and "saves 0.808 ms replayed" in text
    # 4 steps x 202 us of launches, 4 x (10 + 88) us of host work; no kernel on the path.
    assert "critical path, decode (1.20 ms): launches 0.808 ms, host work 0.392 ms" in text
    assert render(analysis, "text").count("reproduced each of the 4 steps") == 1


def test_timeline_has_the_critical_path_lane(analysis):
    """Fails if the lane is missing, drawn from the streams instead of the critical path, or off the
    step's clock: the host closes each step, so its path is host work before the first call (10 us),
    the launches (202 us) and host work to the marker's end (88 us), and no kernel."""
    for tl in analysis.timelines:
        lane = next(x for x in tl["lanes"] if x["kind"] == "critical")
        assert lane["name"] == "critical path"
        got = [(round(a * 1e3, 3), round(b * 1e3, 3), tl["keys"][k]) for a, b, k, _, _ in lane["segments"]]
        assert got == [
            (0.0, FIRST_US, "host"),
            (FIRST_US, FIRST_US + LAUNCH_US, "launch"),
            (FIRST_US + LAUNCH_US, STEP_US, "host"),
        ]
        assert TAIL_US == STEP_US - FIRST_US - LAUNCH_US


def test_timeline_chart_colours_the_critical_lane(analysis):
    """Fails if the HTML timeline drops the lane's segments or gives them another lane's legend."""
    pytest.importorskip("bokeh")
    from tracekit.report import charts

    data = analysis.to_dict()
    item = json.dumps(charts.step_timeline(data, 0)["item"])
    assert "critical path: launch" in item and "critical path: host" in item


def test_annotate_writes_the_critical_path_track(trace_path, tmp_path):
    """Fails if annotate writes no "critical path" track, or its slices are not each step's
    segments: 11 per step (host, 5 launch calls, 4 dispatch gaps, host) tiling its 300 us."""
    out = tmp_path / "a.json.gz"
    r = CliRunner().invoke(main, ["annotate", str(trace_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert f"{STEPS * 11} critical-path segments" in r.output
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    named = [
        e
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"] == "critical path"
    ]
    assert len(named) == 1
    pid, tid = named[0]["pid"], named[0]["tid"]
    slices = [e for e in events if e.get("ph") == "X" and e.get("pid") == pid and e.get("tid") == tid]
    assert len(slices) == STEPS * 11
    for step in range(STEPS):
        mine = [e for e in slices if e["args"]["step"] == step]
        assert sum(e["dur"] for e in mine) == pytest.approx(STEP_US)
        assert [e["args"]["kind"] for e in mine].count("launch") == 9
        assert min(e["ts"] for e in mine) == pytest.approx(step * 1000.0)


def test_mcp_tool_returns_the_phases(trace_path):
    """Fails if the MCP tool does not replay the asked changes or loses the per-phase figures; a bad
    word is one sentence (TracekitError), as the CLI's."""
    from tracekit.errors import TracekitError
    from tracekit.serve.cache import AnalysisCache, Confinement
    from tracekit.serve.tools import Tools

    tools = Tools(AnalysisCache(Confinement([str(trace_path.parent)])))
    got = tools.whatif(str(trace_path), remove="launch")
    d = got["phases"]["decode"]
    assert d["measured_ms"] == pytest.approx(1.2) and d["saving_ms"] == pytest.approx(0.808)
    assert got["books"]["reproduced"] is True
    assert got["critical_path_ms"]["decode"]["launch"] == pytest.approx(0.808)
    with pytest.raises(TracekitError, match="--speed takes"):
        tools.whatif(str(trace_path), speed="gemm=7")
