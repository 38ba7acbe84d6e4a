"""Nothing above its roof, anywhere (issue 44, items 3 and 9): no renderer of a report (HTML,
JSON, Markdown, text, summary) or of a comparison (HTML, JSON, Markdown, text) shows a figure
above 100% of its roof (beyond ``ROOF_TOLERANCE``) as achieved. A figure above its roof is
withheld where it is computed and listed as such, with why.

Checked on a run ``tracekit collect`` records here (the demo's tiny preset), on the two
committed sample traces and on their comparison, which shows ``aten::result_type`` at 939% ->
3,979% and ``aten::add`` at 150% -> 139% of its own roof without the rule. Every figure is read
back from the rendered output, not from the value that made it.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, bare_analysis

from tracekit.analysis.pricing.roofline import ROOF_TOLERANCE
from tracekit.cli import main

LIMIT = 1 + ROOF_TOLERANCE
# Figures in the pages carry three significant digits: a figure at its limit may read up to
# half a unit in the last digit above it.
SHOWN = LIMIT * 1.005
SAMPLES = [str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"), str(SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")]
# JSON keys whose value is a fraction of a datasheet or measured peak (a roof).
ROOF_KEYS = {"roof_fraction", "mfu", "mbu", "prefill_mfu", "decode_mbu", "before_roof", "after_roof"}
_SI = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_RATE = re.compile(r"([\d,.]+) ([kMGTP]?)(FLOP/s|B/s)")
_PCT = re.compile(r"([\d,.]+)%")


@pytest.fixture(scope="module")
def demo_trace(tmp_path_factory):
    """A run of the demo's workload (the tiny preset) recorded on this machine by ``tracekit collect``."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("demo") / "demo"
    r = CliRunner().invoke(
        main,
        [
            "collect",
            "--preset",
            "tiny",
            "-b",
            "1",
            "-p",
            "16",
            "-n",
            "3",
            "--warmup",
            "1",
            "--threads",
            "1",
            "--no-progress",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    return str(out) + ".pt.trace.json.gz"


def _run(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def _render(kind: str, paths: list[str], fmt: str, tmp_path) -> str:
    out = tmp_path / f"{kind}.{fmt}"
    _run(kind, *paths, "-f", fmt, "-o", str(out), "--force")
    return out.read_text()


def _rate(text: str, unit: str) -> float | None:
    """The achieved rate in ``unit`` (FLOP/s or B/s) a cell shows, as a number."""
    m = next((m for m in _RATE.finditer(text) if m.group(3) == unit), None)
    return float(m.group(1).replace(",", "")) * _SI[m.group(2)] if m else None


def _pcts(text: str) -> list[float]:
    return [float(x.replace(",", "")) / 100 for x in _PCT.findall(text)]


def _walk(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{path}.{k}")
            if k in ROOF_KEYS and isinstance(v, (int, float)):
                yield f"{path}.{k}", v
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")


def _peaks(report: dict) -> tuple[float, float]:
    dev = report["device"]
    flops = [f for unit in (dev.get("peak_flops") or {}).values() for f in unit.values()]
    return dev["peak_bandwidth"], max(flops)


def _check_report_json(d: dict) -> None:
    over = [(p, v) for p, v in _walk(d) if v > LIMIT]
    assert not over, f"fractions of a roof above it: {over[:5]}"
    bw, flops = _peaks(d)
    rows = [r for rs in d["top_kernels"].values() for r in rs] + d["overall"]["top_kernels"]
    for r in rows:
        if r.get("roof_withheld") and r["roof_withheld"]["why"] == "above":
            assert r["achieved_gbps"] is None and r["achieved_tflops"] is None and r["roof_fraction"] is None, r
            continue
        assert (r["achieved_gbps"] or 0) * 1e9 <= bw * LIMIT, f"{r['name']}: {r['achieved_gbps']} GB/s over the peak"
        assert (r["achieved_tflops"] or 0) * 1e12 <= flops * LIMIT, f"{r['name']}: {r['achieved_tflops']} TFLOP/s"
    for phase, roof in d["roofline"].items():
        for q in roof["points"]:
            if q["above_roof"]:
                assert q["achieved_flops"] is None and q["roof_fraction"] is None, q
            elif q["achieved_flops"] is not None:
                assert q["achieved_flops"] <= q["roof_flops"] * LIMIT, f"{phase}: {q['label']} drawn above its roof"


def _cells(html: str, table_class: str) -> list[list[str]]:
    """The text of each body row's cells of every ``<table class=table_class>``."""
    rows = []
    for table in re.findall(rf'<table class="{table_class}"[^>]*>(.*?)</table>', html, re.S):
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("</thead>")[-1], re.S):
            rows.append([re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)])
    return rows


def _check_kernel_cells(achieved: str, roof: str, bw: float, flops: float, where: str) -> None:
    """One top-kernel row of a page: its achieved rates under the peaks unless it says it is above its roof."""
    if roof == "above roof":
        assert achieved == "above roof", f"{where}: an above-roof row shows {achieved!r} as achieved"
        return
    assert all(x <= SHOWN for x in _pcts(roof)), f"{where}: {roof} of roof"
    assert (_rate(achieved, "B/s") or 0) <= bw * SHOWN, f"{where}: {achieved} over the {bw:.3g} B/s peak"
    assert (_rate(achieved, "FLOP/s") or 0) <= flops * SHOWN, f"{where}: {achieved} over every compute peak"


def _check_roofline_charts(html: str, bw: float, flops: float) -> None:
    """Each roofline chart's points, as the page's hover text gives them: achieved FLOP/s at most
    the roof at their intensity (the highest roof there, min(peak, intensity x bandwidth))."""
    items = json.loads(re.search(r'<script type="application/json" id="tk-charts">(.*?)</script>', html, re.S).group(1))
    found = 0

    def sources(o):
        if isinstance(o, list) and o and all(isinstance(e, list) and len(e) == 2 for e in o):
            keys = dict((e[0], e[1]) for e in o if isinstance(e[0], str))
            if isinstance(keys.get("achieved"), list) and isinstance(keys.get("intensity"), list):
                yield keys  # a data source's columns (the hover tool's list names them as strings)
        for v in o.values() if isinstance(o, dict) else o if isinstance(o, list) else []:
            yield from sources(v)

    for item in items:
        if not item["target_id"].startswith("tk-chart-roofline-"):
            continue
        for src in sources(item["doc"]):
            for ach, inten in zip(src["achieved"], src["intensity"]):
                found += 1
                x = float(inten.split()[0].replace(",", ""))
                assert _rate(ach, "FLOP/s") <= min(flops, x * bw) * SHOWN * 1.005, f"point at {inten} drawn at {ach}"
    assert found, "no roofline point found in the page"


def _check_report_pages(path: str, tmp_path) -> None:
    d = json.loads(_render("report", [path], "json", tmp_path))
    _check_report_json(d)
    bw, flops = _peaks(d)
    html = _render("report", [path], "html", tmp_path)
    rows = _cells(html, "kernels")
    assert rows
    for cells in rows:  # Kernel, Category, Calls, Total, Mean, Share, Bound, Limiter, Achieved, Of roof, Priced by
        _check_kernel_cells(cells[8], cells[9], bw, flops, f"html {cells[0]}")
    _check_roofline_charts(html, bw, flops)
    md = _render("report", [path], "md", tmp_path)
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in md.splitlines()
        if line.startswith("| `") and line.count("|") == 10
    ]
    assert rows
    for cells in rows:  # Kernel, Category, Calls, Total, Share, Bound, Limiter, Achieved, Of roof
        _check_kernel_cells(cells[7], cells[8], bw, flops, f"md {cells[0]}")
    for text in (_render("report", [path], "text", tmp_path), _run("summary", path)):
        # The phase table's MFU and MBU columns (the last two of each phase's row) and the headline's.
        lines = text.splitlines()
        head = next(
            i for i, line in enumerate(lines) if line.split()[:1] == ["phase"] and line.rstrip().endswith("MBU")
        )
        table = [
            line for line in lines[head + 1 : head + 5] if line.split()[:1] in (["Prefill"], ["Decode"], ["Mixed"])
        ]
        assert table
        shown = [x for line in table for x in _pcts(" ".join(line.split()[-2:]))]
        shown += [x for line in text.splitlines() if re.search(r"\b(MFU|MBU)\b", line) for x in _pcts(line)[:1]]
        assert all(x <= SHOWN for x in shown), text


def test_report_of_a_collected_demo_run_shows_nothing_above_its_roof(demo_trace, tmp_path):
    """Fails if a report of the demo run draws a roofline point above its roof (the demo's
    aten::to at 11.77 GFLOP/s against a roof of 1.19 GFLOP/s at its intensity), shows a top
    kernel's achieved bandwidth over the peak ("789 MFLOP/s · 97.1 GB/s" against 9.51 GB/s), or
    any roof fraction, MFU or MBU above 100%, in any of HTML, JSON, Markdown, text or summary."""
    _check_report_pages(demo_trace, tmp_path)


@pytest.mark.parametrize("name", ["tiny-bs1", "tiny-bs8"])
def test_reports_of_the_sample_traces_show_nothing_above_their_roof(name, tmp_path):
    """Fails as the demo's does; the sample traces (collected on a CPU) hold kernels whose bytes
    counted would move faster than the measured bandwidth (aten::to, aten::result_type)."""
    _check_report_pages(str(SAMPLE_TRACES / f"{name}.pt.trace.json.gz"), tmp_path)


def test_compare_of_the_sample_traces_shows_nothing_above_its_roof(tmp_path):
    """Fails if compare shows a kernel group's or a category's "% of own roof" above 100%
    (``aten::result_type 939% -> 3,979%``, ``aten::add 150% -> 139%``, which ``report`` withholds)
    in any of JSON, text, Markdown or HTML, or draws a roof bar above 100%, or lists a withheld
    fraction without why."""
    d = json.loads(_render("compare", SAMPLES, "json", tmp_path))
    over = [(p, v) for p, v in _walk(d) if v > LIMIT]
    assert not over, f"fractions of a roof above it: {over[:5]}"
    for phase in d["phases"].values():
        shares = [v for side in ("before", "after") for v in phase["roof"][side].values()]
        assert all(v <= LIMIT for v in shares)
    rows = [r for k in d["kernels"].values() for r in k["movers"]]
    withheld = [r[f"{s}_roof_withheld"] for r in rows for s in ("before", "after") if r[f"{s}_roof_withheld"]]
    assert withheld and all(w["why"] == "above" and "above its roof" in w["reason"] for w in withheld)

    text = _render("compare", SAMPLES, "text", tmp_path)
    pairs = re.findall(r"(\S+%|—|above roof|capped) -> (\S+%|—|above roof|capped)\s*$", text, re.M)
    assert pairs and "above roof -> above roof" in text
    assert all(x <= SHOWN for a, b in pairs for x in _pcts(f"{a} {b}")), pairs
    # The explanation's sentences: "at 81% of the roof (was 62%)".
    said = re.findall(r"at ([\d,.]+%) of (?:the|\S+'s) roof \(was ([\d,.]+%)", text)
    assert all(x <= SHOWN for pair in said for x in _pcts(" ".join(pair))), said

    md = _render("compare", SAMPLES, "md", tmp_path)
    pairs = re.findall(r"\| (\S+%|—|above roof|capped) → (\S+%|—|above roof|capped) \|", md)
    assert pairs and all(x <= SHOWN for a, b in pairs for x in _pcts(f"{a} {b}")), pairs
    assert "above its roof, so not shown as achieved" in md

    html = _render("compare", SAMPLES, "html", tmp_path)
    cells = [c for t in ("roof", "movers", "new", "vanished") for row in _cells(html, t) for c in row]
    assert any(c.endswith("%") for c in cells)
    # In these tables only the roof columns hold percentages (times are in ms, speed-ups in x).
    assert all(x <= SHOWN for c in cells for x in _pcts(c)), [c for c in cells if "%" in c]
    items = json.loads(re.search(r'<script type="application/json" id="tk-charts">(.*?)</script>', html, re.S).group(1))
    bars = [e[1] for item in items if item["target_id"].endswith("-roof") for e in _pairs(item["doc"]) if e[0] == "y"]
    assert bars and all(y <= LIMIT for ys in bars for y in ys), bars


def _pairs(o):
    """Every [key, value] pair of a Bokeh document's serialised maps."""
    if isinstance(o, list):
        if len(o) == 2 and isinstance(o[0], str) and isinstance(o[1], list):
            yield o
        for v in o:
            yield from _pairs(v)
    elif isinstance(o, dict):
        for v in o.values():
            yield from _pairs(v)


def _moe_analysis(mbu: float, estimate: str | None, routing_roof: float):
    """A decode run whose MoE category is a routed-experts kernel capped at the roof (9 ms) and a
    routing kernel at ``routing_roof`` of it (1 ms), and whose decode MBU is ``mbu`` (``estimate``)."""
    work = pd.DataFrame(
        {
            "phase": ["decode", "decode"],
            "category": ["moe", "moe"],
            "op_name": ["moe::experts", "moe::experts"],
            "name": ["fused_moe_kernel", "moe_align_block_size"],
            "dur_ns": [9e6, 1e6],
            "roof_fraction": [float("nan"), routing_roof],
            "unit": ["matrix", "vector"],
            "dtype": ["bf16", "bf16"],
            "flops": [1e9, 1e6],
            "bytes": [9e-3 * 3.35e12, 1e3],
            "bound": ["memory", "memory"],
            "model_check": ["capped", None],
        }
    )
    a = bare_analysis({"decode_mbu": mbu}, {"name": "GPU A", "type": "gpu", "spec": "A"})
    a.work = work
    a.phases = {"decode": {"steps": 1, "mbu": mbu, "mbu_estimate": estimate}}
    return a


def test_compare_keeps_bounds_marked_and_capped_units_unmeasured():
    """Fails if compare drops the MBU's "≤" mark that the report shows ("≤ 43.6%" became
    "43.6% -> 50.0%"), or shows the MoE category's fraction of its roof over its routing kernel
    alone (the "0.753% of own roof" of its capped routed experts) as a measured fraction."""
    from tracekit.compare.comparison import compare
    from tracekit.report.compare import render_comparison

    c = compare(_moe_analysis(0.436, "upper", 0.00753), _moe_analysis(0.5, "upper", 0.00753))
    mbu = c.figure("decode_mbu")
    assert mbu["estimate"] == {"before": "upper", "after": "upper"}
    roof = c.phases["decode"]["roof"]
    assert "moe" not in roof["before"] and roof["withheld"]["before"]["moe"]["why"] == "capped"
    text = render_comparison(c, "text")
    md = render_comparison(c, "md")
    page = render_comparison(c, "html")
    for out in (text, md, page):
        assert "≤ 43.6%" in out and "≤ 50.0%" in out
        assert "0.753%" not in out
    assert "capped -> capped" in text
    # An exact MBU stays unmarked.
    exact = render_comparison(compare(_moe_analysis(0.436, None, 0.2), _moe_analysis(0.5, None, 0.2)), "text")
    assert "≤" not in exact and "43.6%" in exact
