"""Reports: renderers and their view-models, the JSON contract, output paths, the CLI.

Browser checks are in ``test_report_browser.py``, hostile content in
``test_report_hostile.py``.
"""

from __future__ import annotations

import json
import os
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, SHARED_TRACES, all_real_traces, read_real, with_device_name

from tracekit import formatting as fmt
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.report import choose, default_output, headline_view, render, report_stem, write_atomic
from tracekit.report.render_html import HtmlRenderer
from tracekit.report.templating import md_code, md_text, script_json, template_dirs

SAMPLES = ("tiny-bs1", "tiny-bs8")


def _sample_path(name: str) -> Path:
    path = SAMPLE_TRACES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent (regenerate with sample_traces/regenerate.sh)")
    return path


_ANALYSES: dict = {}


def _analysis(key: str):
    """Analysis of a real trace (by conftest key) or a sample trace (by name), cached."""
    from tracekit import read_trace
    from tracekit.analysis import analyze

    if key not in _ANALYSES:
        trace = read_trace(str(_sample_path(key))) if key in SAMPLES else read_real(key)
        _ANALYSES[key] = analyze(trace)
    return _ANALYSES[key]


# --- formatting and escaping helpers -----------------------------------------------------


@pytest.mark.parametrize(
    "x, text",
    [
        (35.0026, "35.0"),
        (9.119, "9.12"),
        (0.412, "0.412"),
        (255524.01, "255,524"),
        (0, "0"),
        (None, "—"),
        (1.0, "1.00"),
    ],
)
def test_num(x, text):
    assert fmt.num(x) == text


def test_units():
    assert fmt.pct(0.1663) == "16.6%" and fmt.pct(0.000175) == "0.0175%" and fmt.pct(None) == "—"
    assert fmt.flops(989.4e12) == "989 TFLOP/s" and fmt.bandwidth(3.35e12) == "3.35 TB/s"
    assert fmt.ms(0.0441) == "0.0441 ms" and fmt.count(12345) == "12,345"


def test_script_json_cannot_close_a_script_element():
    value = {"name": "</script><script>alert(1)</script>", "sep": "\u2028\u2029", "amp": "&lt;", "comment": "<!--"}
    text = str(script_json(value))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_markdown_escaping():
    assert md_text("a|b <i>x</i> *y* _z_") == "a\\|b \\<i\\>x\\</i\\> \\*y\\* \\_z\\_"
    assert md_code("k<T>|x") == "`k<T>\\|x`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("`start") == "`` `start ``"


def test_templates_are_found():
    dirs = template_dirs()
    assert dirs and all((Path(d) / "report.html.j2").is_file() for d in dirs)


# --- choosing a renderer and an output path ----------------------------------------------


@pytest.mark.parametrize(
    "fmt_, path, name",
    [
        (None, "x.html", "html"),
        (None, "x.HTM", "html"),
        (None, "x.json", "json"),
        (None, "a/b.md", "md"),
        (None, "x.txt", "text"),
        ("json", "x.html", "json"),
        (None, None, "html"),
        ("md", "-", "md"),
        (None, "-", "html"),
    ],
)
def test_choose_renderer(fmt_, path, name):
    assert choose(fmt_, path).name == name


def test_choose_rejects_unknown_extension():
    with pytest.raises(TracekitError, match="cannot tell the report format"):
        choose(None, "report.pdf")


def test_default_output_name():
    assert default_output("/x/y/tiny-bs1.pt.trace.json.gz", ".html") == os.path.join("reports", "tiny-bs1.html")
    assert default_output("traces/run-ranks/", ".json") == os.path.join("reports", "run-ranks.json")
    assert report_stem("v100_ddp_train_large.json.gz") == "v100_ddp_train_large"


def test_write_atomic_leaves_no_partial_file(tmp_path):
    target = tmp_path / "r.html"
    target.write_text("old")

    class Boom(str):
        def encode(self, *a, **k):
            raise RuntimeError("render failed half way")

    with pytest.raises(RuntimeError):
        write_atomic(str(target), Boom("new"))
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert write_atomic(str(target), "new") == 3 and target.read_text() == "new"
    with pytest.raises(TracekitError, match="does not exist"):
        write_atomic(str(tmp_path / "missing" / "r.html"), "x")


# --- view-models --------------------------------------------------------------------------


def test_headline_view_model_cpu_sample():
    a = _analysis("tiny-bs1")
    d = a.to_dict()
    figs = {f["key"]: f for f in headline_view.headline(d)}
    assert set(figs) >= {
        "ttft_ms",
        "tpot_p50",
        "tpot_p90",
        "decode_tokens_per_s",
        "prefill_mfu",
        "decode_mbu",
        "idle_share.prefill",
        "idle_share.decode",
    }
    assert figs["ttft_ms"]["value"] == fmt.ms(d["metrics"]["ttft_ms"])
    assert figs["tpot_p50"]["value"] == fmt.ms(d["metrics"]["tpot_ms"]["p50"])
    assert figs["prefill_mfu"]["raw"] == d["metrics"]["prefill_mfu"]
    # Each figure says what it is measured against.
    assert all(f["note"] for f in figs.values())
    assert "measured on this machine" in figs["decode_mbu"]["note"]
    assert figs["idle_share.decode"]["label"].startswith("CPU idle")  # a CPU trace says CPU, not GPU


def test_headline_missing_figures_carry_the_reason():
    d = _analysis("h100_hf").to_dict()
    figs = {f["key"]: f for f in headline_view.headline(d)}
    assert figs["tpot_p50"]["missing"] and figs["tpot_p50"]["value"] == fmt.MISSING
    assert figs["tpot_p50"]["note"] == d["provenance"]["reasons"]["tpot_ms"]
    assert figs["decode_mbu"]["note"] == d["provenance"]["reasons"]["decode_mbu"]
    assert not figs["prefill_mfu"]["missing"] and "bf16 matrix peak of H100" in figs["prefill_mfu"]["note"]


def test_html_view_model_sections():
    vm = HtmlRenderer().view_model(_analysis("tiny-bs8").to_dict())
    assert [p["phase"] for p in vm["phases"]] == ["prefill", "decode"]
    assert vm["breakdown"]["charts"] == ["tk-chart-bound", "tk-chart-category"]
    assert vm["decode"]["chart"] == "tk-chart-decode" and vm["decode"]["reason"] is None
    assert [r["chart"] for r in vm["rooflines"]] == ["tk-chart-roofline-0", "tk-chart-roofline-1"]
    assert len(vm["chart_items"]) == 5
    assert [t["phase"] for t in vm["top_kernels"]] == ["prefill", "decode"]
    row = vm["top_kernels"][0]["rows"][0]
    assert set(row) >= {
        "name",
        "short_name",
        "category",
        "calls",
        "total",
        "mean",
        "share",
        "bound",
        "achieved",
        "roof",
    }
    q = vm["quality"]
    assert q["formulas"] and q["thresholds"] and q["peaks"]
    assert any(lack["key"] == "gpu" and lack["effect"] for lack in q["lacks"])


def test_html_view_model_says_why_charts_are_missing():
    vm = HtmlRenderer().view_model(_analysis("h100_hf").to_dict())  # one prefill step, no decode
    assert vm["decode"]["chart"] is None and "no decode step" in vm["decode"]["reason"]
    from tracekit.analysis import analyze

    unknown = analyze(with_device_name(read_real("rtx4080_nanovllm")))  # GPU not in the database
    vm = HtmlRenderer().view_model(unknown.to_dict())
    assert vm["rooflines"][0]["chart"] is None and "--gpu" in vm["rooflines"][0]["reason"]
    vm = HtmlRenderer().view_model(_analysis("v100_ddp").to_dict())  # training
    assert "training run" in vm["no_phases"] and vm["phases"] == [] and vm["rooflines"] == []
    assert vm["breakdown"]["charts"] == ["tk-chart-category"]  # the whole trace by category
    assert vm["top_kernels"][0]["label"] == "Whole trace" and vm["top_kernels"][0]["rows"]
    assert "training run" in vm["decode"]["reason"]


def test_html_has_no_network_references():
    html = render(_analysis("tiny-bs1"), "html")
    assert "cdn.bokeh.org" not in html and "cdn.pydata.org" not in html
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html, re.IGNORECASE)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html)
    assert "default-src 'none'" in unescape(csp.group(1))  # the CSP forbids fetching anything


def test_no_renderer_template_computes(tmp_path):
    """Templates only print: no arithmetic on figures (a cheap guard on the rule)."""
    for d in template_dirs():
        for path in Path(d).glob("*.j2"):
            text = path.read_text()
            for expr in re.findall(r"{{(.*?)}}", text, re.DOTALL):
                assert not re.search(r"[^\w\s][*/+]|\s[*/+-]\s\d|\bsum\(|\|\s*(sum|round)\b", expr), (path.name, expr)


# --- the JSON contract ----------------------------------------------------------------------

_PHASES = {"prefill", "decode", "mixed", "unknown"}


def _check_contract(d: dict) -> None:
    assert d["schema_version"] == 1
    assert "name" in d["device"] and "spec" in d["device"]
    for s in d["steps"]:
        assert s["phase"] in _PHASES and isinstance(s["index"], int)
        assert s["gpu_busy_ms"] >= 0 and s["gpu_idle_ms"] >= 0
    for name, p in d["phases"].items():
        assert name in _PHASES
        assert set(p["by_bound"]) == {"compute", "memory", "interconnect", "unknown", "idle"}
        assert isinstance(p["by_category"], dict) and "gpu_time_ms" in p and "mfu" in p and "mbu" in p
    m = d["metrics"]
    assert {"ttft_ms", "tpot_ms", "decode_tokens_per_s"} <= set(m)
    assert m["tpot_ms"] is None or set(m["tpot_ms"]) == {"mean", "p50", "p90", "p99"}
    assert all(set(f) >= {"id", "text"} for f in d["findings"])
    prov = d["provenance"]
    assert "phase_source" in prov and "lacks" in prov
    # A figure that cannot be computed is null, with the reason under provenance.
    for key in ("ttft_ms", "tpot_ms", "decode_tokens_per_s", "prefill_mfu", "decode_mbu"):
        if m[key] is None:
            assert prov["reasons"].get(key), f"{key} is null without a reason"


REAL_AND_SAMPLES = all_real_traces() + list(SAMPLES)


@pytest.mark.parametrize("key", REAL_AND_SAMPLES)
def test_reports_render_for_every_trace(key):
    a = _analysis(key)
    d = a.to_dict()
    _check_contract(json.loads(render(a, "json")))
    html = render(a, "html")
    assert len(html) < 3_000_000, "reports stay small: top N rows and summarised series"
    assert html.count("<script") <= 3 and "</html>" in html
    vm = HtmlRenderer().view_model(d)
    for f in vm["headline"]:
        assert f'data-key="{f["key"]}"' in html
    md = render(a, "md")
    assert md.startswith("### tracekit:") and len(md) < 20_000
    assert render(a, "text")


class _Figures(HTMLParser):
    """The headline figures as the HTML shows them: {data-key: value text}."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, str] = {}
        self._key = None
        self._in_value = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-key" in a and "figure" in (a.get("class") or ""):
            self._key = a["data-key"]
        elif self._key and a.get("class") == "value":
            self._in_value = True

    def handle_data(self, data):
        if self._in_value:
            self.values[self._key] = self.values.get(self._key, "") + data

    def handle_endtag(self, tag):
        if self._in_value and tag == "div":
            self._in_value = False
            self._key = None


@pytest.mark.parametrize("key", ["tiny-bs1", "h100_hf", "mi300x_decode", "v100_ddp"])
def test_json_round_trips_to_the_html_headline(key, tmp_path):
    """Loading the JSON output back gives the same headline figures as the HTML shows."""
    a = _analysis(key)
    html_path, json_path = tmp_path / "r.html", tmp_path / "r.json"
    html_path.write_text(render(a, "html"), encoding="utf-8")
    json_path.write_text(render(a, "json"), encoding="utf-8")
    shown = _Figures()
    shown.feed(html_path.read_text(encoding="utf-8"))
    loaded = json.loads(json_path.read_text(encoding="utf-8"))
    from_json = {f["key"]: f["value"] for f in headline_view.headline(loaded)}
    assert shown.values == from_json
    # ... and the raw numbers are identical, not just their rounding.
    assert [f["raw"] for f in headline_view.headline(loaded)] == [f["raw"] for f in headline_view.headline(a.to_dict())]
    assert loaded["metrics"]["ttft_ms"] == a.metrics["ttft_ms"]


def test_json_is_stable_and_strict():
    a = _analysis("tiny-bs1")
    text = render(a, "json")
    assert text == render(a, "json")
    assert "NaN" not in text and "Infinity" not in text
    keys = list(json.loads(text))
    assert keys[:3] == ["schema_version", "source", "device"]


# --- the CLI --------------------------------------------------------------------------------


def test_cli_report_default_path_force_and_formats(tmp_path, monkeypatch):
    trace = str(_sample_path("tiny-bs1"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["report", trace])
    assert res.exit_code == 0, res.output
    out = tmp_path / "reports" / "tiny-bs1.html"
    assert out.exists() and f"wrote {os.path.join('reports', 'tiny-bs1.html')}" in res.output
    assert "next:" in res.output
    # A rerun replaces the file tracekit named itself, and says so; an explicit -o needs --force.
    res = runner.invoke(main, ["report", trace])
    assert res.exit_code == 0 and f"replaced {os.path.join('reports', 'tiny-bs1.html')}" in res.output
    res = runner.invoke(main, ["report", trace, "-o", "s.md"])
    assert res.exit_code == 0 and (tmp_path / "s.md").read_text().startswith("### tracekit:")
    before = (tmp_path / "s.md").stat().st_mtime_ns
    res = runner.invoke(main, ["report", trace, "-o", "s.md"])
    assert res.exit_code == 2 and "already exists" in res.output and "--force" in res.output
    assert (tmp_path / "s.md").stat().st_mtime_ns == before
    assert runner.invoke(main, ["report", trace, "-o", "s.md", "--force"]).exit_code == 0
    res = runner.invoke(main, ["report", trace, "--format", "json"])
    assert (
        res.exit_code == 0 and json.loads((tmp_path / "reports" / "tiny-bs1.json").read_text())["schema_version"] == 1
    )
    res = runner.invoke(main, ["report", trace, "-f", "json", "-o", "-"])
    assert res.exit_code == 0 and json.loads(res.output)["schema_version"] == 1
    res = runner.invoke(main, ["report", trace, "-o", "x.pdf"])
    assert res.exit_code == 2 and "cannot tell the report format" in res.output
    res = runner.invoke(main, ["report", trace, "-o", "nowhere/x.html"])
    assert res.exit_code == 2 and "does not exist" in res.output
    leftovers = [p.name for p in tmp_path.rglob(".tracekit-*")]
    assert leftovers == []


def test_cli_report_bad_input_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    res = CliRunner().invoke(main, ["report", str(bad)])
    assert res.exit_code == 2 and res.output.startswith("tracekit: error:") and "Traceback" not in res.output
    assert not (tmp_path / "reports" / "bad.html").exists()
    res = CliRunner().invoke(main, ["report", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "no such file" in res.output


def test_cli_report_gpu_option_prices_an_unknown_device(tmp_path, monkeypatch):
    path = SHARED_TRACES / "rtx4080laptop_nano-vllm_decode.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["report", str(path), "-f", "json", "-o", "-", "--gpu", "RTX 4090"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["device"]["spec"]


def test_cli_summary_shows_headline_and_phase_table():
    trace = str(_sample_path("tiny-bs8"))
    res = CliRunner().invoke(main, ["summary", trace])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "events" in out  # the reader's facts stay
    assert "headline figures" in out and "TTFT" in out and "TPOT p50" in out and "Decode MBU" in out
    assert re.search(r"Prefill\s+1\s", out) and re.search(r"Decode\s+16\s", out)  # the phase table
    assert "spec row   AMD EPYC" in out


def test_cli_summary_keeps_reader_facts_for_gpu_traces():
    path = SHARED_TRACES / "h100_hf-qwen1.5-0.5b_forward_bs16.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    res = CliRunner().invoke(main, ["summary", str(path)])
    assert res.exit_code == 0, res.output
    assert "NVIDIA H100 80GB HBM3" in res.output and "top 10 kernels" in res.output
    assert "sm90_xmma_gemm" in res.output and "Prefill MFU" in res.output


def test_cli_summary_training_trace_says_so():
    path = SHARED_TRACES / "mi250_rocm6.2_toy_train.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    res = CliRunner().invoke(main, ["summary", str(path)])
    assert res.exit_code == 0, res.output
    assert "training run" in res.output


def test_templates_are_found_in_an_installed_layout(tmp_path):
    """In a wheel, templates/ is shipped as tracekit/templates (pyproject force-include)."""
    import shutil
    import subprocess
    import sys

    import tracekit

    pkg = Path(tracekit.__file__).parent
    shutil.copytree(pkg, tmp_path / "tracekit", ignore=shutil.ignore_patterns("__pycache__"))
    for d in template_dirs():
        shutil.copytree(d, tmp_path / "tracekit" / "templates", dirs_exist_ok=True)
    code = (
        "import tracekit.report.templating as t, tracekit.report as r;"
        "print(t.template_dirs()[0]);"
        "print(r.get_renderer('md').render_data.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        check=True,
    ).stdout
    assert out.splitlines()[0] == str(tmp_path / "tracekit" / "templates")


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def test_roofline_hover_data_has_name_shapes_time_and_roof():
    from tracekit.report import charts

    d = _analysis("tiny-bs8").to_dict()
    chart = charts.roofline(d, "decode", 0)
    assert chart.get("item"), chart
    text = set(_strings(chart["item"]))
    assert {"@label", "@kernel", "@shapes", "@time", "@roof"} <= text  # the tooltip fields
    shapes = [p["shapes"] for p in d["roofline"]["decode"]["points"] if p["shapes"]]
    assert shapes and shapes[0] in text  # e.g. "[8, 1, 256] fp32, [688, 256] fp32"
    assert any(s.endswith("%") for s in text)  # % of roof, formatted


def test_decode_chart_summarises_long_runs():
    from tracekit.report import charts

    d = _analysis("tiny-bs1").to_dict()
    decode = [s for s in d["steps"] if s["phase"] == "decode"]
    d["steps"] = [dict(decode[i % len(decode)], index=i + 1) for i in range(5000)]
    chart = charts.decode_steps(d)
    assert chart["note"] == "5,000 decode steps: one in every 3 is shown."
    assert len(json.dumps(chart["item"])) < 600_000
