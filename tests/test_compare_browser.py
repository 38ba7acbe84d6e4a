"""Compare pages in headless Chromium: every chart renders, nothing logs an error, nothing
is fetched, hostile names stay inert. Skips without Chromium (fails under CI=true), like test_report_browser.py
(whose driver it reuses); screenshots go to $TRACEKIT_SCREENSHOTS when set."""

from __future__ import annotations

import pytest
from conftest import SAMPLE_TRACES, read_real
from test_report_browser import FORBIDDEN_PROBE, Chromium, _check_page, _shots, chromium_path, needs_browser

from tracekit.analysis import analyze
from tracekit.compare.comparison import compare
from tracekit.report.compare import CompareHtml, render_comparison


def _sample(name: str):
    from tracekit import read_trace

    path = SAMPLE_TRACES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent (regenerate with sample_traces/regenerate.sh)")
    return read_trace(str(path))


CASES = {
    # H100 Hugging Face prefill vs MI300X SGLang extend: two GPUs, each on its own roof.
    "h100-vs-mi300x": lambda: (analyze(read_real("h100_hf")), analyze(read_real("mi300x_extend"))),
    # The CPU samples (calibrated, so they have roofs): prefill and decode, batch 1 vs 8.
    "tiny-bs1-vs-bs8": lambda: (analyze(_sample("tiny-bs1")), analyze(_sample("tiny-bs8"))),
}


@pytest.fixture(scope="module")
def browser():
    with Chromium(chromium_path()) as b:
        yield b


@needs_browser
@pytest.mark.parametrize("name", list(CASES))
def test_compare_page_renders_in_chromium(browser, tmp_path, name):
    before, after = CASES[name]()
    c = compare(before, after)
    expected = len(CompareHtml().view_model(c.to_dict())["chart_items"])
    assert expected >= 3  # per phase: time by bound, by category, % of roof
    page = tmp_path / f"compare-{name}.html"
    page.write_text(render_comparison(c, "html"), encoding="utf-8")
    shot = _shots(tmp_path) / f"compare-{name}.png"
    phase = next(iter(c.phases))
    run = browser.open(page, screenshot=shot, hover=f"tk-cmp-{phase}-roof")
    _check_page(run, expected, shot)
    # The roof chart's tooltip says whose roof each bar is against.
    assert run.tooltips, "hovering the roof chart showed no tooltip"
    spec = c.to_dict()["after"]["device"]["spec"]
    assert any(
        "against the roof of" in t and (spec in t or c.to_dict()["before"]["device"]["spec"] in t) for t in run.tooltips
    )


@needs_browser
def test_hostile_compare_page_is_inert_in_chromium(browser, tmp_path):
    from test_report_hostile import hostile_analysis

    c = compare(hostile_analysis(tmp_path), analyze(_sample("tiny-bs8")))
    expected = len(CompareHtml().view_model(c.to_dict())["chart_items"])
    page = tmp_path / "compare-hostile.html"
    page.write_text(render_comparison(c, "html"), encoding="utf-8")
    shot = _shots(tmp_path) / "compare-hostile.png"
    run = browser.open(page, screenshot=shot, evaluate={"forbidden": FORBIDDEN_PROBE})
    _check_page(run, expected, shot)
    assert run.evaluated["forbidden"] == {"pwned": None, "ids": [], "imgs": 0}
