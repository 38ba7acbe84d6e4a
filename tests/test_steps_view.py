"""The report's steps table: each step's phase, tokens and batch with where each came from."""

from __future__ import annotations

import copy
import re

import pytest
from conftest import read_real
from test_step_tokens import strip_annotations

from tracekit.analysis import analyze
from tracekit.report import get_renderer


@pytest.fixture(scope="module")
def stripped_rtx3090() -> dict:
    return analyze(strip_annotations(read_real("rtx3090_vllm"))).to_dict()


def test_html_steps_table_shows_every_step_and_its_sources(stripped_rtx3090):
    """Bug: the evidence behind a default trace's tokens and batch reached only the JSON; or a
    row's figures taken from another step."""
    html = get_renderer("html").render_data(stripped_rtx3090)
    section = html.split('<section id="steps">')[1].split("</section>")[0]
    rows = re.findall(r'<tr data-phase="(\w+)"><td class="n">(\d+)</td>', section)
    assert [int(i) for _, i in rows] == list(range(17))
    assert [p for p, _ in rows] == [s["phase"] for s in stripped_rtx3090["steps"]]
    assert "reshape_and_cache_kernel_flash grid x = 12, one block per token" in section  # step 1's tokens
    assert "sampler softmax rows" in section and "ran in the previous step" in section


def test_a_long_run_shows_its_first_and_last_steps_and_says_how_many_are_left_out(stripped_rtx3090):
    """Bug: a run of thousands of steps rendered whole (a page of megabytes), or cut silently."""
    data = copy.deepcopy(stripped_rtx3090)
    data["steps"] = [dict(data["steps"][2], index=i) for i in range(50)]
    html = get_renderer("html").render_data(data)
    section = html.split('<section id="steps">')[1].split("</section>")[0]
    shown = [int(i) for i in re.findall(r'<tr data-phase="\w+"><td class="n">(\d+)</td>', section)]
    assert shown == [*range(12), *range(38, 50)]
    assert "26 more steps" in section
    md = get_renderer("md").render_data(data)
    assert "38 more steps" in md  # Markdown shows 12 of the 50


def test_trace_text_in_the_steps_table_is_escaped(stripped_rtx3090):
    """Bug: a step label or evidence from the trace put into the page as markup."""
    data = copy.deepcopy(stripped_rtx3090)
    data["steps"][0]["label"] = '<img src=x onerror="alert(1)">'
    data["steps"][0]["tokens_source"] = '"><script>alert(2)</script>'
    html = get_renderer("html").render_data(data)
    assert "<img src=x" not in html and "<script>alert(2)" not in html
    assert "&lt;img src=x" in html


def test_markdown_steps_name_the_kind_of_each_source(stripped_rtx3090):
    """Bug: Markdown readers (a pull request) cannot see where a default trace's counts came from."""
    md = get_renderer("md").render_data(stripped_rtx3090)
    row = next(line for line in md.splitlines() if line.startswith("| 1 | mixed"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:4] == ["12", "4"]
    assert cells[7] == "vLLM KV-cache writes, input-id/position copies"
    assert "sampler softmax rows" in cells[8]
