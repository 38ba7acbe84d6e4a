"""Hostile trace content: names with ``<script>``, ``</script>``, quotes and ``</div>`` must
reach every report format inert (escaped), in the page and inside the embedded chart
data, and no output path may come from trace content.

The browser half of this (no alert, no console error, no request) is in
``test_report_browser.py``; it reuses ``make_hostile_trace``.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES

# Each payload carries a marker that must never appear as live markup.
HOSTILE = (
    "</script><script>window.__tkPwned=1;alert(1)</script>",
    '"\'><img src=x onerror="window.__tkPwned=2" id=tk-pwned-img>',
    "</div></td></table><b id=tk-pwned-b>x</b><!--",
    "\u2028\u2029`${alert(3)}`",
)
HOSTILE_ALL = " ".join(HOSTILE)
# Markup that would be live if any payload escaped.
LIVE = ("<script>window.__tkPwned", "<img src=x", "<b id=tk-pwned-b>", "id=tk-pwned-img>")
FILE_NAME = "hostile \"'<i id=tk-pwned-file>.pt.trace.json.gz"
SIDECAR_NAME = "hostile \"'<i id=tk-pwned-file>.tracekit.json"


def make_hostile_trace(folder: Path) -> Path:
    """A copy of the tiny bs=1 sample trace whose phase annotations, some op names, the
    sidecar's workload and versions, and the file name itself carry hostile strings.

    Phase markers become SGLang-style ``step[DECODE bs=1] <payload>`` (SGLang labels allow
    trailing text), so the step labels in the decode chart's data are hostile too."""
    src = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    side = SAMPLE_TRACES / "tiny-bs1.tracekit.json"
    if not src.exists() or not side.exists():
        pytest.skip("sample_traces/tiny-bs1 is absent (regenerate with sample_traces/regenerate.sh)")
    with gzip.open(src, "rt") as f:
        data = json.load(f)
    renamed = {"aten::cat": "aten::cat" + HOSTILE[0], "aten::result_type": HOSTILE[1] + HOSTILE[2] + HOSTILE[3]}
    for ev in data["traceEvents"]:
        name = ev.get("name", "")
        if ev.get("cat") == "user_annotation":
            m = re.match(r"tracekit::(prefill|decode)", name)
            if m:
                kind = "EXTEND bs=1 toks=64" if m.group(1) == "prefill" else "DECODE bs=1"
                ev["name"] = f"step[{kind}] {HOSTILE_ALL}"
        elif ev.get("cat") == "cpu_op" and name in renamed:
            ev["name"] = renamed[name]
    data.pop("tracekit", None)  # the trace's own marker metadata: the annotations are SGLang's now
    out = folder / FILE_NAME
    with gzip.open(out, "wt") as f:
        json.dump(data, f)
    sidecar = json.loads(side.read_text())
    sidecar["workload"]["model_path"] = HOSTILE_ALL
    sidecar["versions"]["torch"] = HOSTILE[0]
    sidecar.pop("markers", None)
    (folder / SIDECAR_NAME).write_text(json.dumps(sidecar))
    return out


def hostile_analysis(folder: Path):
    from tracekit import read_trace
    from tracekit.analysis import analyze

    return analyze(read_trace(str(make_hostile_trace(folder))))


def _walk_strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk_strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk_strings(v)
    elif isinstance(value, str):
        yield value


_COUNTER = itertools.count()


def _poison(value):
    """Every string in a JSON-contract dict gets a hostile suffix (keys and the few
    enumerations renderers switch on are kept)."""
    if isinstance(value, dict):
        return {k: (v if k in ("phase", "severity", "bound", "unit", "type") else _poison(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v) for v in value]
    if isinstance(value, str):
        return value + HOSTILE[next(_COUNTER) % len(HOSTILE)]
    return value


def _outside_code(md: str) -> str:
    """Markdown with code spans (where '<' is literal text) and escaped '\\<' removed."""
    return re.sub(r"(`+)(?:.+?)\1", "", md).replace("\\<", "")


def _assert_inert_html(html: str) -> None:
    for live in LIVE:
        assert live not in html, f"live markup {live!r} reached the page"
    assert "<i id=tk-pwned-file>" not in html
    # Exactly our three script elements: chart data, Bokeh, the loader.
    assert len(re.findall(r"<script\b", html, re.IGNORECASE)) <= 3
    # The JSON block has no raw '<' at all, so '</script' cannot end it early.
    m = re.search(r'<script type="application/json" id="tk-charts">(.*?)</script>', html, re.DOTALL)
    if m:
        assert "<" not in m.group(1) and ">" not in m.group(1) and "\u2028" not in m.group(1)


# --- end to end: a hostile trace file through read, analyze, render --------------------


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    return folder, hostile_analysis(folder)


def test_hostile_strings_reach_the_analysis(hostile):
    _, a = hostile
    d = a.to_dict()
    labels = [s["label"] for s in d["steps"]]
    assert all(HOSTILE_ALL in label for label in labels) and len(labels) == 17
    names = [r["name"] for r in d["top_kernels"]["decode"]]
    assert any(HOSTILE[0] in n for n in names)
    # Every renamed op reaches the analysis (whether it ranks among the top kernels depends
    # on the sample's timings).
    work = set(a.work["name"].astype(str))
    assert any(HOSTILE[2] in n for n in work)
    assert d["workload"]["workload"]["model_path"] == HOSTILE_ALL


def test_html_escapes_hostile_trace_content(hostile):
    from tracekit.report import render

    _, a = hostile
    html = render(a, "html")
    _assert_inert_html(html)
    # The payloads are in the page, escaped, where a person reads them ...
    assert "&lt;/script&gt;&lt;script&gt;window.__tkPwned=1;alert(1)&lt;/script&gt;" in html
    assert "&lt;/div&gt;&lt;/td&gt;&lt;/table&gt;&lt;b id=tk-pwned-b&gt;" in html
    assert "&#34;&#39;&gt;&lt;img src=x" in html  # in attributes (title=...) quotes are escaped too
    assert "&lt;i id=tk-pwned-file&gt;" in html
    # ... and in the chart data, JSON-escaped, decoding back to the exact strings.
    m = re.search(r'<script type="application/json" id="tk-charts">(.*?)</script>', html, re.DOTALL)
    items = json.loads(m.group(1))
    strings = set(_walk_strings(items))
    assert any(HOSTILE_ALL in s for s in strings), "step labels should be in the decode chart's data"


def assert_markdown_tables_intact(md: str) -> None:
    """Every unescaped '|' is a cell border: each table row keeps its header's column count."""
    width = None
    for line in md.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        width = width or cells
        assert cells == width, f"a name split a Markdown table row: {line}"


def test_markdown_and_text_escape_hostile_content(hostile):
    from tracekit.report import render

    _, a = hostile
    md = render(a, "md")
    assert "<" not in _outside_code(md), "a raw '<' in Markdown text could become HTML"
    assert_markdown_tables_intact(md)
    text = render(a, "text")
    assert "\u2028" not in text and "\x1b" not in text


def test_json_keeps_hostile_strings_verbatim(hostile):
    from tracekit.report import render

    _, a = hostile
    loaded = json.loads(render(a, "json"))
    assert loaded["workload"]["workload"]["model_path"] == HOSTILE_ALL


def test_default_output_never_comes_from_trace_content(hostile, tmp_path, monkeypatch):
    from tracekit.cli import main

    folder, _ = hostile
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["report", str(folder / FILE_NAME)])
    assert res.exit_code == 0, res.output
    written = list((tmp_path / "reports").iterdir())
    assert [p.name for p in written] == ["hostile_i_id_tk-pwned-file.html"]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in written)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == written


@pytest.mark.parametrize(
    "name, stem",
    [
        ("../../etc/passwd", "passwd"),
        ("/tmp/run.pt.trace.json.gz", "run"),
        ("..", "report"),
        (".hidden.json", "hidden"),
        ("a b<script>.json.gz", "a_b_script"),
        ("ranks/", "ranks"),
        ("x" * 300 + ".json", "x" * 100),
        ("\u2028.json", "report"),
        ("résumé.json", "r_sum"),
    ],
)
def test_report_stem_is_sanitised(name, stem):
    from tracekit.report import default_output, report_stem

    assert report_stem(name) == stem
    out = default_output(name, ".html")
    assert Path(out).parent == Path("reports") and ".." not in Path(out).parts


# --- every string in the contract poisoned: no renderer field is missed -------------------


def test_every_string_field_is_escaped_in_html(hostile):
    from tracekit.report.render_html import HtmlRenderer

    _, a = hostile
    poisoned = _poison(a.to_dict())
    html = HtmlRenderer(include_js=False).render_data(poisoned)
    _assert_inert_html(html)


def test_every_string_field_is_escaped_in_markdown(hostile):
    from tracekit.report.render_md import MarkdownRenderer

    _, a = hostile
    md = MarkdownRenderer().render_data(_poison(a.to_dict()))
    assert "<" not in _outside_code(md)


def test_sample_copy_is_untouched(tmp_path):
    # make_hostile_trace writes only into its folder.
    before = {p.name: p.stat().st_mtime_ns for p in SAMPLE_TRACES.iterdir()} if SAMPLE_TRACES.exists() else {}
    make_hostile_trace(tmp_path)
    after = {p.name: p.stat().st_mtime_ns for p in SAMPLE_TRACES.iterdir()}
    assert before == after
    shutil.rmtree(tmp_path, ignore_errors=True)
