"""``tracekit compare``: verdicts against noise, context, kernel matching across GPUs, each run
against its own roofline, CI gates, the renderers and the CLI.

Two traces are collected here (the tiny preset on the CPU, batch 1 and batch 8; the batch-8
trace's time axis is then stretched so that its steps are longer by construction, not by the
machine's load); the real H100 and MI300X traces come from ``../shared/traces``. The browser check of a compare page
is in ``test_compare_browser.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, read_real, real_trace_path

from tracekit.analysis.model import Analysis
from tracekit.cli import main
from tracekit.compare.comparison import (
    Comparison,
    _kernel_movers,
    compare,
    context_sentence,
)
from tracekit.compare.gates import parse_gate
from tracekit.compare.verdicts import NOISE_SIGMAS, headline_figure
from tracekit.errors import TracekitError
from tracekit.report.compare import CompareHtml, CompareMarkdown, choose, render_comparison

# --- hand-built analyses ----------------------------------------------------------------

WORK_COLUMNS = ["phase", "category", "op_name", "name", "dur_ns", "roof_fraction", "unit", "dtype", "flops", "bound"]


def _analysis(metrics=None, work=None, device=None, phases=None, steps=None, **kw) -> Analysis:
    """An Analysis with only what a test sets; everything else empty."""
    base = dict(
        source={"name": "x.json", "path": "x.json"},
        device=device or {"name": "GPU A", "type": "gpu", "spec": "A"},
        workload=None,
        run_kind="inference",
        phase_source="tracekit markers",
        steps=steps if steps is not None else pd.DataFrame(columns=["phase", "tokens", "batch"]),
        work=work if work is not None else pd.DataFrame(columns=WORK_COLUMNS),
        phases=phases or {},
        metrics=metrics or {},
        findings=[],
        provenance={},
    )
    base.update(kw)
    return Analysis(**base)


def _decode(series) -> Analysis:
    s = np.asarray(series, dtype=float)
    return _analysis(
        {
            "tpot_series_ms": list(s),
            "tpot_ms": {
                "mean": float(s.mean()),
                "p50": float(np.percentile(s, 50)),
                "p90": float(np.percentile(s, 90)),
            },
            "decode_tokens_per_s": 8 * 1e3 / float(s.mean()),
        }
    )


def test_identical_runs_are_within_noise_everywhere():
    a = _analysis(
        {"ttft_ms": 10.0, "prefill_mfu": 0.4, "idle_share": {"decode": 0.3}, **_decode([5, 5.2, 4.9, 5.1]).metrics}
    )
    for key in (
        "ttft_ms",
        "tpot_p50",
        "tpot_p90",
        "tpot_mean",
        "decode_tokens_per_s",
        "prefill_mfu",
        "decode_idle_share",
    ):
        f = headline_figure(key, a, a)
        assert f["verdict"] == "within noise", (key, f)
        assert f["delta"] == 0


def test_per_step_figures_are_judged_against_step_to_step_noise():
    rng = np.random.default_rng(1)
    base = rng.normal(10.0, 1.0, 40)
    before = _decode(base)
    se = np.sqrt(2 * base.var(ddof=1) / len(base))  # standard error of the difference of means
    small = _decode(base + 0.5 * se)  # half a standard error slower: noise
    large = _decode(base + 4 * se)  # four standard errors slower: real
    f = headline_figure("tpot_mean", before, small)
    assert f["verdict"] == "within noise" and f["delta"] > 0
    assert f["noise"] == pytest.approx(se, rel=1e-6)
    assert "step-to-step variation of 40 and 40 decode steps" in f["noise_basis"]
    assert headline_figure("tpot_mean", before, large)["verdict"] == "worse"
    assert headline_figure("tpot_mean", large, before)["verdict"] == "better"
    # Tokens/s moves the other way and "higher is better".
    assert headline_figure("decode_tokens_per_s", before, large)["verdict"] == "worse"
    assert headline_figure("decode_tokens_per_s", large, before)["verdict"] == "better"
    assert headline_figure("decode_tokens_per_s", before, small)["verdict"] == "within noise"
    # Percentiles: bootstrap noise, same verdict direction.
    assert headline_figure("tpot_p50", before, small)["verdict"] == "within noise"
    assert "bootstrap of the p90" in headline_figure("tpot_p90", before, large)["noise_basis"]


def test_a_noisy_run_hides_a_difference_a_quiet_run_shows():
    rng = np.random.default_rng(2)
    quiet = rng.normal(10.0, 0.05, 30)
    noisy = rng.normal(10.0, 3.0, 30)
    # The same +0.3 ms shift is real against quiet steps, noise against noisy ones.
    assert headline_figure("tpot_mean", _decode(quiet), _decode(quiet + 0.3))["verdict"] == "worse"
    assert headline_figure("tpot_mean", _decode(noisy), _decode(noisy + 0.3))["verdict"] == "within noise"


def test_one_sample_figures_use_a_stated_fixed_threshold():
    b = _analysis({"ttft_ms": 100.0, "prefill_mfu": 0.30, "idle_share": {"prefill": 0.001}})
    near = _analysis({"ttft_ms": 101.0, "prefill_mfu": 0.305, "idle_share": {"prefill": 0.002}})
    far = _analysis({"ttft_ms": 110.0, "prefill_mfu": 0.36, "idle_share": {"prefill": 0.05}})
    assert headline_figure("ttft_ms", b, near)["verdict"] == "within noise"
    assert "fixed threshold" in headline_figure("ttft_ms", b, near)["noise_basis"]
    assert headline_figure("ttft_ms", b, far)["verdict"] == "worse"
    assert headline_figure("prefill_mfu", b, near)["verdict"] == "within noise"  # +1.7 %, +0.5 points
    assert headline_figure("prefill_mfu", b, far)["verdict"] == "better"
    # A share doubling from 0.1 % to 0.2 % is +100 % relative but 0.1 points: noise.
    assert headline_figure("prefill_idle_share", b, near)["verdict"] == "within noise"
    assert headline_figure("prefill_idle_share", b, far)["verdict"] == "worse"


def test_a_change_of_exactly_the_fixed_threshold_is_not_noise():
    """The rule says changes *under* 2% (or 1 percentage point for shares) count as noise, so a
    change of exactly that much is a verdict. Fails if the boundary is taken as noise (``>`` for
    ``>=``), or the other way round just under it. Exact in binary: 100 -> 102 ms is 2/100 of a
    relative change, the same double as 0.02; a share from 0 to 0.01 is exactly 1 point (its
    relative change has no base, so the points decide)."""
    b = _analysis({"ttft_ms": 100.0, "idle_share": {"prefill": 0.0}})
    at = _analysis({"ttft_ms": 102.0, "idle_share": {"prefill": 0.01}})
    under = _analysis({"ttft_ms": 101.99, "idle_share": {"prefill": 0.0099}})
    assert headline_figure("ttft_ms", b, at)["verdict"] == "worse"
    assert headline_figure("ttft_ms", b, under)["verdict"] == "within noise"
    assert headline_figure("prefill_idle_share", b, at)["verdict"] == "worse"
    assert headline_figure("prefill_idle_share", b, under)["verdict"] == "within noise"


def test_a_figure_missing_from_one_run_is_not_comparable():
    f = headline_figure("tpot_p50", _analysis({"ttft_ms": 1.0}), _decode([1, 2, 3]))
    assert f["verdict"] == "not comparable" and f["reason"] == "the before run has no TPOT p50"


def _work(rows):
    return pd.DataFrame(rows, columns=["phase", "category", "op_name", "name", "dur_ns", "roof_fraction"])


def test_kernels_are_matched_by_category_and_op_not_name():
    before = _analysis(
        work=_work(
            [
                ("decode", "gemm", "aten::mm", "sm90_xmma_gemm_bf16", 4000, 0.5),
                ("decode", "gemm", "aten::mm", "sm90_xmma_gemm_bf16", 4000, 0.7),
                ("decode", "attention", "aten::_flash_attention_forward", "flash_fwd_kernel", 1000, 0.2),
                ("decode", "elementwise", None, "some_fused_kernel<float>(float*)", 500, None),
            ]
        )
    )
    after = _analysis(
        work=_work(
            [
                ("decode", "gemm", "aten::mm", "Cijk_Alik_Bljk_BBS", 2000, 0.4),
                ("decode", "attention", "aiter::mha_batch_prefill", "ck_tile_fmha", 800, None),
                ("prefill", "gemm", "aten::mm", "Cijk_other", 9000, 0.9),  # other phase: not matched
            ]
        )
    )
    k = _kernel_movers("decode", before, after)
    (mm,) = [r for r in k["movers"] if r["status"] == "both"]
    # Groups only one run has are movers too, ranked with the rest by |change|: 6, 1, 0.8, 0.5 us.
    assert [(r["op"], r["status"]) for r in k["movers"]] == [
        ("aten::mm", "both"),
        ("aten::_flash_attention_forward", "gone"),
        ("aiter::mha_batch_prefill", "new"),
        ("(some_fused_kernel<>())", "gone"),
    ]
    assert (mm["op"], mm["category"]) == ("aten::mm", "gemm")
    assert (mm["before_kernel"], mm["after_kernel"]) == ("sm90_xmma_gemm_bf16", "Cijk_Alik_Bljk_BBS")
    assert mm["before_ms"] == pytest.approx(0.008) and mm["after_ms"] == pytest.approx(0.002)
    assert (mm["before_calls"], mm["after_calls"]) == (2, 1)
    assert mm["speedup"] == pytest.approx(4.0) and mm["per_call_speedup"] == pytest.approx(2.0)
    # Each side's roof is its own time-weighted fraction.
    assert mm["before_roof"] == pytest.approx(0.6) and mm["after_roof"] == pytest.approx(0.4)
    assert [r["op"] for r in k["new"]] == ["aiter::mha_batch_prefill"]
    assert {r["op"] for r in k["vanished"]} == {"aten::_flash_attention_forward", "(some_fused_kernel<>())"}
    # A phase only one run has: everything is new (or gone), nothing breaks.
    only = _kernel_movers("prefill", before, after)
    assert (
        only["movers"] == [] and only["vanished"] == [] and [r["after_kernel"] for r in only["new"]] == ["Cijk_other"]
    )
    assert _kernel_movers("prefill", after, before)["vanished"][0]["before_ms"] == pytest.approx(0.009)


# --- collected traces: batch 1 vs batch 8 -------------------------------------------------

BATCHES = (1, 8)
# 16 decode steps: enough for the step-to-step noise estimate to be tight on a shared CPU.
NEW = 16


# The after run's decode steps are made at least this much longer than the before run's longest.
SLOWER = 1.3


def _decode_step_us(doc: dict) -> list[float]:
    """Durations of the decode steps tracekit collect marked (``tracekit::decode#<i> ...``), raw."""
    return [
        e["dur"]
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("tracekit::decode#")
    ]


def _dilated(src: Path, dest_dir: Path, factor: float) -> Path:
    """A copy of a collected trace (and its sidecar) whose time axis is stretched by ``factor``
    from its first event: every step, op and gap ``factor`` times as long, nothing else changed."""
    import gzip
    import shutil

    from tracekit import markers

    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    timed = [e for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    for e in timed:
        e["ts"] = t0 + (e["ts"] - t0) * factor
        if isinstance(e.get("dur"), (int, float)):
            e["dur"] = e["dur"] * factor
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    with gzip.open(dest, "wt") as f:
        json.dump(doc, f)
    shutil.copy(markers.sidecar_path_for(str(src)), markers.sidecar_path_for(str(dest)))
    return dest


def _collect_pair(folder: Path) -> tuple[dict[int, Path], Comparison]:
    """Batch 1 and batch 8 collected here; the batch-8 trace's time axis is then stretched so
    that each of its decode steps is at least SLOWER x the batch-1 run's longest (a factor worked
    out from the raw marker durations, 1 when the recorded run already is). So "batch 8 takes
    longer per step" holds by construction, whatever the load on this CPU did to the timings;
    tokens per second still favour batch 8 as long as its steps are under 8x as long on average."""
    import gzip

    from tracekit import read_trace
    from tracekit.analysis import analyze
    from tracekit.collect import CollectOptions, collect

    paths = {}
    for batch in BATCHES:
        result = collect(
            CollectOptions(
                preset="tiny",
                batch_size=batch,
                prompt_len=32,
                new_tokens=NEW,
                output=str(folder / f"tiny-bs{batch}"),
                progress=False,
                threads=1,
                calibrate=False,
                seed=0,
                force=True,
            )
        )
        paths[batch] = Path(result.trace_path)
    steps = {}
    for batch in BATCHES:
        with gzip.open(paths[batch], "rt") as f:
            steps[batch] = _decode_step_us(json.load(f))
    factor = max(1.0, SLOWER * max(steps[1]) / min(steps[8]))
    paths[8] = _dilated(paths[8], folder / "slowed", factor)
    slowed = [d * factor for d in steps[8]]
    assert len(slowed) == len(steps[1]) == NEW and min(slowed) >= SLOWER * max(steps[1]) * (1 - 1e-9)
    assert np.mean(slowed) / 8 < np.mean(steps[1]), "batch 8's steps would be over 8x batch 1's"
    return paths, compare(analyze(read_trace(str(paths[1]))), analyze(read_trace(str(paths[8]))))


@pytest.fixture(scope="module")
def collected_pair(tmp_path_factory):
    """Two runs collected here, the tiny preset on the CPU: batch 1 and batch 8 (its steps made
    longer than batch 1's by construction: ``_collect_pair``)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("compare-collect")
    return _collect_pair(folder)


@pytest.fixture(scope="module")
def collected(collected_pair) -> dict[int, Path]:
    return collected_pair[0]


@pytest.fixture(scope="module")
def batch_comparison(collected_pair) -> Comparison:
    return collected_pair[1]


def test_batch_8_produces_more_tokens_per_second_and_longer_steps(batch_comparison):
    """Every batch-8 decode step is at least 1.3x the longest batch-1 step (by construction) and
    carries 8 tokens against 1: compare must call TPOT (mean and median) worse and decode tokens/s
    better. Fails if compare reads the direction of a figure wrongly, or its noise rule calls a
    separation of every step "within noise"."""
    c = batch_comparison
    tps, tpot = c.figure("decode_tokens_per_s"), c.figure("tpot_mean")
    steps = (c.before.metrics["tpot_series_ms"], c.after.metrics["tpot_series_ms"])  # shown if an assert fails
    assert tps["after"] > tps["before"] and tps["verdict"] == "better", (tps, steps)
    assert tpot["after"] > tpot["before"] and tpot["verdict"] == "worse", (tpot, steps)
    assert c.figure("tpot_p50")["verdict"] == "worse", (c.figure("tpot_p50"), steps)
    # Per step time grows in the decode phase's own figures too (same step count: totals).
    dec = c.phases["decode"]
    assert dec["steps"] == {"before": NEW, "after": NEW} and dec["time_ms"]["delta"] > 0
    batch = next(s for s in c.summary if s.startswith("Batch 1 → 8"))
    assert "decode produces more tokens per second" in batch
    assert "as a larger batch implies" in batch and "each decode step takes longer" in batch


def test_batch_difference_is_the_first_context_row(batch_comparison):
    ctx = batch_comparison.context
    assert ctx[0]["field"] == "batch" and (ctx[0]["before"], ctx[0]["after"]) == (1, 8)
    fields = [r["field"] for r in ctx]
    assert "device" not in fields and "dtype" not in fields and "prompt_len" not in fields
    assert context_sentence(batch_comparison).startswith("Not like for like: batch size 1 vs 8")


def test_every_format_says_what_the_batch_did(batch_comparison):
    html = render_comparison(batch_comparison, "html")
    md = render_comparison(batch_comparison, "md")
    text = render_comparison(batch_comparison, "text")
    for out in (html, md, text):
        assert "batch size" in out
    assert "decode produces more tokens per second" in html
    # Context comes first: the box precedes the headline table.
    assert html.index('id="context"') < html.index('id="headline"')
    assert re.search(r'<tr data-field="batch"><td><b>batch size</b></td><td>1</td><td>8</td>', html)
    assert re.search(r'data-key="decode_tokens_per_s" data-verdict="better"', html)
    assert "> - batch size: 1 → 8" in md
    assert re.search(r"\| decode tokens/s \|.*\| ✅ better \|", md)
    assert re.search(r"decode tokens/s .* better", text)


def test_json_is_the_comparison_contract(batch_comparison):
    data = json.loads(render_comparison(batch_comparison, "json"))
    assert data["schema_version"] == 1 and data["kind"] == "tracekit.comparison"
    assert set(data) == {
        "schema_version",
        "kind",
        "before",
        "after",
        "method",
        "context",
        "headline",
        "phases",
        "kernels",
        "summary",
        "suggested_gate",
        "gates",
    }
    assert data["before"]["workload"]["batch"] == 1 and data["after"]["workload"]["batch"] == 8
    assert data["method"]["noise_sigmas"] == NOISE_SIGMAS
    h = {x["key"]: x for x in data["headline"]}
    assert h["decode_tokens_per_s"]["verdict"] == "better"
    assert set(data["kernels"]["decode"]) == {"basis", "steps", "categories", "movers", "new", "vanished"}
    # The HTML shows the JSON's numbers.
    html = render_comparison(batch_comparison, "html")
    tps = CompareHtml(include_js=False).view_model(data)["headline"]
    assert next(x for x in tps if x["key"] == "decode_tokens_per_s")["after"] in html


def _cli(*args, cwd=None):
    return CliRunner().invoke(main, ["compare", *map(str, args)])


def test_gate_fails_when_the_after_run_is_slower(collected, tmp_path):
    out = tmp_path / "c.html"
    res = _cli(collected[1], collected[8], "-o", out, "--fail-if", "tpot_p50>+5%")
    assert res.exit_code == 1, res.output
    assert out.exists()  # the report is written before the gates are judged
    assert "gate failed: tpot_p50>+5%: TPOT p50 changed +" in res.stderr
    assert "gates passed" not in res.output


def test_gate_holds_when_swapped_or_loose(collected, tmp_path):
    res = _cli(
        collected[8], collected[1], "-o", tmp_path / "a.md", "--fail-if", "tpot_p50>+5%", "--fail-if", "ttft_ms>+1%"
    )
    assert res.exit_code == 0, res.output
    assert "gates passed (2)" in res.stdout
    res = _cli(collected[1], collected[8], "-o", tmp_path / "b.json", "--fail-if", "tpot_p50>+1000%")
    assert res.exit_code == 0, res.output
    # Absolute thresholds and "<" gates: batch 8 has far more tokens/s, so a drop gate holds...
    res = _cli(
        collected[1],
        collected[8],
        "-f",
        "text",
        "--fail-if",
        "decode_tokens_per_s<-5%",
        "--fail-if",
        "tpot_mean>+100ms",
    )
    assert res.exit_code == 0, res.output
    assert "gates passed" in res.stderr  # stdout carries the report
    # ... and fails the other way round.
    res = _cli(collected[8], collected[1], "-f", "json", "-o", "-", "--fail-if", "decode_tokens_per_s<-5%")
    assert res.exit_code == 1 and "decode tokens/s changed -" in res.stderr
    assert json.loads(res.stdout)["kind"] == "tracekit.comparison"


@pytest.mark.parametrize(
    "expr", ["tpot_p50>>5", "tpot_p50", "speed>+5%", "tpot_p50>+5tok/s", "ttft_ms>+2pp", "tpot_p50 > five%"]
)
def test_bad_gate_is_one_sentence_and_exit_2_before_reading(expr, tmp_path):
    # The traces do not exist: the gate is checked first.
    res = _cli(tmp_path / "missing-a.json", tmp_path / "missing-b.json", "--fail-if", expr)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: --fail-if") and "Traceback" not in res.output


@pytest.mark.parametrize(
    "text, metric, op, threshold, relative",
    [
        ("tpot_p50>+5%", "tpot_p50", ">", 0.05, True),
        ("tpot_p50>5%", "tpot_p50", ">", 0.05, True),
        (" decode_tokens_per_s < -3.5% ", "decode_tokens_per_s", "<", -0.035, True),
        ("ttft_ms>+2ms", "ttft_ms", ">", 2.0, False),
        ("ttft>+2ms", "ttft_ms", ">", 2.0, False),
        ("decode_mbu<-2pp", "decode_mbu", "<", -0.02, False),
        ("prefill_mfu<-0.02", "prefill_mfu", "<", -0.02, False),
        ("decode_tokens_per_s<-100tok/s", "decode_tokens_per_s", "<", -100.0, False),
    ],
)
def test_parse_gate(text, metric, op, threshold, relative):
    g = parse_gate(text)
    assert (g.metric, g.op, g.relative) == (metric, op, relative)
    assert g.threshold == pytest.approx(threshold)


@pytest.mark.parametrize("text", ["tpot_p50>+5", "ttft>+2", "decode_tokens_per_s<-100"])
def test_a_gate_without_a_unit_is_refused(text):
    # "+5" could be ms or %: guessing would gate on the wrong threshold.
    with pytest.raises(TracekitError, match="has no unit"):
        parse_gate(text)


def test_gate_check_on_hand_built_runs():
    b, a = _decode([10, 10.1, 9.9, 10.0]), _decode([11, 11.1, 10.9, 11.0])
    c = compare(b, a)
    assert parse_gate("tpot_p50>+5%").check(c).startswith("tpot_p50>+5%: TPOT p50 changed +10")
    assert parse_gate("tpot_p50>+15%").check(c) is None
    assert parse_gate("tpot_p50>+0.5ms").check(c) is not None
    assert parse_gate("tpot_p50>+2ms").check(c) is None
    assert parse_gate("decode_tokens_per_s<-5%").check(c) is not None  # ~ -9 %
    assert parse_gate("tpot_p50<-5%").check(compare(a, b)) is not None
    # A gate on a figure neither run has never passes silently: it says so, naming a gate that would work.
    gate = parse_gate("ttft_ms>+5%")
    assert (
        gate.missing(c)
        == gate.check(c)
        == (
            "--fail-if 'ttft_ms>+5%': neither run has TTFT, so the gate cannot be "
            "checked; gate on a figure both runs have, e.g. --fail-if 'tpot_p50>+5%'"
        )
    )
    assert parse_gate("tpot_p50>+5%").missing(c) is None
    with pytest.raises(TracekitError):
        parse_gate("tpot_p50>+5ms%")


def test_default_output_name_and_summary_lines(collected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = _cli(collected[1], collected[8])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("wrote reports/compare-tiny-bs1-vs-tiny-bs8.html (")
    assert "Not like for like: batch size 1 vs 8" in res.stdout
    assert "decode produces more tokens per second" in res.stdout
    assert (tmp_path / "reports" / "compare-tiny-bs1-vs-tiny-bs8.html").is_file()
    # A rerun replaces the file tracekit named itself, and says so (issue 13).
    again = _cli(collected[1], collected[8])
    assert again.exit_code == 0 and again.stdout.startswith("replaced reports/compare-tiny-bs1-vs-tiny-bs8.html (")


def test_a_saved_report_json_is_refused_with_a_sentence(collected, tmp_path):
    saved = tmp_path / "run.json"
    assert CliRunner().invoke(main, ["report", str(collected[1]), "-o", str(saved)]).exit_code == 0
    res = _cli(saved, collected[8], "-o", tmp_path / "x.html")
    assert res.exit_code == 2
    assert "is a tracekit report (JSON), not a trace" in res.stderr


def test_format_choice():
    assert choose(None, "x.md").name == "md" and choose("text", None).name == "text" and choose().name == "html"
    with pytest.raises(TracekitError):
        choose(None, "x.pdf")


# --- real traces: H100 Hugging Face prefill vs MI300X SGLang extend -----------------------


@pytest.fixture(scope="module")
def gpus():
    from tracekit.analysis import analyze

    h100, mi300x = analyze(read_real("h100_hf")), analyze(read_real("mi300x_extend"))
    return h100, mi300x, compare(h100, mi300x)


def _roof(a: Analysis, phase: str, category: str) -> float:
    """Time-weighted roof fraction of one category, straight from one analysis's work table."""
    w = a.work[(a.work["phase"] == phase) & (a.work["category"] == category) & a.work["roof_fraction"].notna()]
    return float((w["roof_fraction"] * w["dur_ns"]).sum() / w["dur_ns"].sum())


def _mm_roof_from_json(key: str, peak: float, bw: float) -> float:
    """Time-weighted roof fraction of a trace's aten::mm GEMM kernels, from the raw JSON alone:
    per aten::mm op, roof time = max(2*M*N*K / peak, 2 bytes x (M*K + K*N + M*N) / bw) from its
    Input Dims, all of it the GEMM kernel's: a memset the op also launched (cuBLAS on the H100)
    does none of the op's FLOPs and sets a few bytes (issue 47: kernels by their role, not their
    duration); the GEMM kernels' roof time over their duration."""
    import gzip
    from collections import defaultdict

    from conftest import real_trace_path

    with gzip.open(real_trace_path(key), "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    ops = {
        e["args"]["External id"]: e
        for e in events
        if e.get("cat") == "cpu_op" and e["name"] == "aten::mm" and "External id" in e.get("args", {})
    }
    launched = defaultdict(list)
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and e.get("args", {}).get("External id") in ops:
            launched[e["args"]["External id"]].append(e)
    roof = gemm_s = 0.0
    for ext, acts in launched.items():
        (m, k), (_, n) = ops[ext]["args"]["Input Dims"][:2]
        op_roof = max(2.0 * m * n * k / peak, 2.0 * (m * k + k * n + m * n) / bw)
        roof += op_roof
        gemm_s += sum(e["dur"] for e in acts if e["cat"] == "kernel") * 1e-6
    return roof / gemm_s


def test_gpu_context_calls_out_the_differences(gpus):
    _, _, c = gpus
    ctx = {r["field"]: r for r in c.context}
    assert [r["field"] for r in c.context][:3] == ["device", "spec row", "phases decided by"]
    assert (ctx["device"]["before"], ctx["device"]["after"]) == ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X")
    assert (ctx["spec row"]["before"], ctx["spec row"]["after"]) == ("H100 SXM", "MI300X")
    assert "annotations" in ctx["phases decided by"]["after"] and "inferred" in ctx["phases decided by"]["before"]
    assert (ctx["batch"]["before"], ctx["batch"]["after"]) == (16, 15)
    assert (ctx["prefill_tokens"]["before"], ctx["prefill_tokens"]["after"]) == (8944, 15360)
    # Qwen1.5-0.5B vs Qwen3-8B: the GEMM work per token gives the model size away.
    assert ctx["gemm_flops_per_token"]["after"] / ctx["gemm_flops_per_token"]["before"] > 10


def test_each_run_is_priced_against_its_own_gpu(gpus):
    h100, mi300x, c = gpus
    roof = c.phases["prefill"]["roof"]
    assert roof["before"]["gemm"] == pytest.approx(_roof(h100, "prefill", "gemm"))
    assert roof["after"]["gemm"] == pytest.approx(_roof(mi300x, "prefill", "gemm"))
    # Not vacuous: the H100 trace priced against the MI300X row gives another fraction.
    from tracekit.analysis import analyze

    h100_on_mi300x = analyze(read_real("h100_hf"), gpu="MI300X")
    assert h100_on_mi300x.device["spec"] == "MI300X"
    assert abs(_roof(h100_on_mi300x, "prefill", "gemm") - roof["before"]["gemm"]) > 0.05
    # The mover row carries both sides' own roofs and kernel names from both vendors.
    mm = next(r for r in c.kernels["prefill"]["movers"] if r["op"] == "aten::mm")
    assert mm["before_kernel"].startswith("sm90_") and mm["after_kernel"].startswith("Cijk_")
    # Against the raw trace and the datasheets (H100 SXM bf16 989.4 TFLOP/s, 3.35 TB/s; MI300X
    # 1307.4 TFLOP/s, 5.3 TB/s): 0.639 on the H100, 0.389 on the MI300X (_mm_roof_from_json).
    want_before = _mm_roof_from_json("h100_hf", 989.4e12, 3.35e12)
    want_after = _mm_roof_from_json("mi300x_extend", 1307.4e12, 5.3e12)
    assert (round(want_before, 3), round(want_after, 3)) == (0.639, 0.389)
    assert mm["before_roof"] == pytest.approx(want_before, rel=1e-6)
    assert mm["after_roof"] == pytest.approx(want_after, rel=1e-6)
    assert any("of MI300X's roof (was" in e and "H100 SXM's" in e for e in c.phases["prefill"]["explanation"])
    # MFU is each against its own peak too: the H100's alone, the MI300X's alone.
    assert c.figure("prefill_mfu")["before"] == h100.metrics["prefill_mfu"]
    assert c.figure("prefill_mfu")["after"] == mi300x.metrics["prefill_mfu"]


def test_gpu_comparison_renders(gpus, tmp_path):
    _, _, c = gpus
    html = render_comparison(c, "html")
    assert '<th class="n" title="before, against H100 SXM">Before (H100 SXM)</th>' in html
    assert "After (MI300X)" in html
    for field in ("device", "spec row", "phases decided by", "batch", "prefill_tokens"):
        assert f'<tr data-field="{field}">' in html
    vm = CompareHtml().view_model(c.to_dict())
    assert [p["phase"] for p in vm["phases"]] == ["prefill"]
    assert vm["phases"][0]["charts"]["bars"] == ["tk-cmp-prefill-bound", "tk-cmp-prefill-category"]
    assert vm["phases"][0]["charts"]["roof"] == "tk-cmp-prefill-roof"
    assert len(vm["chart_items"]) == 3
    md = render_comparison(c, "md")
    assert "> - spec row: H100 SXM → MI300X" in md
    res = _cli(real_trace_path("h100_hf"), real_trace_path("mi300x_extend"), "-o", tmp_path / "g.html")
    assert res.exit_code == 0, res.output


def test_per_step_basis_when_step_counts_differ():
    """16 vs 8 decode steps: tables are per step, so a run twice as long is not "twice as slow".
    Fails too if a side's time per step is not its time over its steps (``tb - nb``: 64 ms)."""

    def run(n, ms):
        return _analysis(
            phases={
                "decode": {
                    "steps": n,
                    "time_ms": n * ms,
                    "by_bound": {"memory": n * ms},
                    "by_category": {"gemm": n * ms},
                }
            }
        )

    c = compare(run(16, 5.0), run(8, 5.0))
    p = c.phases["decode"]
    assert p["basis"] == "per step"
    assert p["by_category"][0]["delta_ms"] == pytest.approx(0.0)
    assert "per step" in p["explanation"][0]
    # The phase's time per step: 16 x 5 ms over 16 steps and 8 x 5 over 8, 5 ms each; in total 80 and 40.
    assert p["time_ms"] == {
        "before": 80.0,
        "after": 40.0,
        "delta": -40.0,
        "before_per_step": 5.0,
        "after_per_step": 5.0,
    }
    uneven = compare(run(16, 5.0), run(8, 7.5)).phases["decode"]["time_ms"]
    assert (uneven["before_per_step"], uneven["after_per_step"]) == (5.0, 7.5)


# --- hostile content in one run ----------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_comparison(tmp_path_factory):
    from test_report_hostile import hostile_analysis

    from tracekit import read_trace
    from tracekit.analysis import analyze

    folder = tmp_path_factory.mktemp("hostile-compare")
    other = SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"
    if not other.exists():
        pytest.skip("sample_traces/tiny-bs8 is absent")
    return folder, compare(hostile_analysis(folder), analyze(read_trace(str(other))))


def test_hostile_names_stay_inert_in_every_format(hostile_comparison):
    from test_report_hostile import HOSTILE, _assert_inert_html, _outside_code, _poison, assert_markdown_tables_intact

    _, c = hostile_comparison
    data = c.to_dict()
    # The payloads reached the comparison: an op name, the file name.
    ops = [r["op"] for part in ("movers", "new", "vanished") for r in data["kernels"]["decode"][part]]
    assert any(HOSTILE[0] in op for op in ops)
    assert "<i id=tk-pwned-file>" in data["before"]["source"]["name"]
    html = render_comparison(c, "html")
    _assert_inert_html(html)
    assert "&lt;/script&gt;&lt;script&gt;window.__tkPwned=1" in html
    # Every string in the contract poisoned: no field of the page is left unescaped.
    _assert_inert_html(CompareHtml(include_js=False).render_data(_poison(data)))
    for md in (render_comparison(c, "md"), CompareMarkdown().render_data(_poison(data))):
        assert "<" not in _outside_code(md)
        assert_markdown_tables_intact(md)
    text = render_comparison(c, "text")
    assert "\u2028" not in text and "\x1b" not in text
    assert json.loads(render_comparison(c, "json")) == json.loads(json.dumps(data))  # verbatim


def test_default_name_never_comes_from_trace_content(hostile_comparison, tmp_path, monkeypatch):
    from test_report_hostile import FILE_NAME

    folder, _ = hostile_comparison
    monkeypatch.chdir(tmp_path)
    res = _cli(folder / FILE_NAME, SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz")
    assert res.exit_code == 0, res.output
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "reports/compare-hostile_i_id_tk-pwned-file-vs-tiny-bs8.html"
    ]


def test_gpu_options_price_each_side(tmp_path):
    """--gpu-before/--gpu-after choose each run's spec row independently."""
    res = _cli(
        real_trace_path("h100_hf"), real_trace_path("mi300x_extend"), "--gpu-before", "MI300X", "-f", "json", "-o", "-"
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["before"]["device"]["spec"] == "MI300X" and data["after"]["device"]["spec"] == "MI300X"
    fields = [r["field"] for r in data["context"]]
    assert "device" in fields and "spec row" not in fields


def test_batch_sentence_says_when_a_change_is_noise():
    def run(batch, series):
        a = _decode(series)
        a.metrics["decode_tokens_per_s"] = batch * 1e3 / float(np.mean(series))
        a.steps = pd.DataFrame({"phase": ["decode"], "tokens": [batch], "batch": [batch]})
        return a

    rng = np.random.default_rng(3)
    steps = rng.normal(5.0, 0.5, 20)
    c = compare(run(1, steps), run(8, steps + 0.01))  # same step time, 8x the tokens
    (sentence,) = [s for s in c.summary if s.startswith("Batch 1 → 8")]
    assert "decode produces more tokens per second" in sentence and "as a larger batch implies" in sentence
    assert "each decode step takes about as long (within noise" in sentence
    c = compare(run(8, steps), run(1, steps + 3))  # smaller batch yet slower steps: said
    (sentence,) = [s for s in c.summary if s.startswith("Batch 8 → 1")]
    assert "each decode step takes longer" in sentence and "which a smaller batch does not explain" in sentence


# --- fair comparisons (measured ceilings, threads, collect settings) --------------------


def _sample_with(**changes):
    import dataclasses

    from tracekit import read_trace

    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    t = read_trace(str(path))
    side = json.loads(json.dumps(t.sidecar))
    for dotted, value in changes.items():
        *keys, last = dotted.split(".")
        node = side
        for k in keys:
            node = node.setdefault(k, {})
        node[last] = value
    return dataclasses.replace(t, sidecar=side)


def test_different_ceilings_threads_and_settings_are_not_like_for_like():
    from tracekit.analysis import analyze

    base = analyze(_sample_with())
    same = compare(base, analyze(_sample_with()))
    assert same.context == []  # like for like
    other = analyze(
        _sample_with(
            **{
                "calibration.matmul_flops": {"fp32": 4.0e10},
                "device.threads": 2,
                "workload.compile": True,
                "schedule.skip_decode_steps": 3,
            }
        )
    )
    fields = {r["field"] for r in compare(base, other).context}
    assert {"ceiling_matmul", "threads", "compile", "schedule"} <= fields
    # Within 20% the ceilings count as the same machine.
    close = analyze(_sample_with(**{"calibration.matmul_flops": {"fp32": 0.9e11}}))
    assert "ceiling_matmul" not in {r["field"] for r in compare(base, close).context}


def test_an_efficiency_verdict_against_its_latency_says_why():
    import dataclasses

    from tracekit.analysis import analyze

    b = analyze(_sample_with())
    # The after run: TTFT 10% worse, yet MFU "better" because its peak fell 2.5x.
    dev = json.loads(json.dumps(b.device))
    dev["peak_flops"]["matrix"] = {k: v / 2.5 for k, v in dev["peak_flops"]["matrix"].items()}
    metrics = dict(b.metrics, ttft_ms=b.metrics["ttft_ms"] * 1.1, prefill_mfu=b.metrics["prefill_mfu"] * 2.27)
    a = dataclasses.replace(b, device=dev, metrics=metrics)
    c = compare(b, a)
    mfu = c.figure("prefill_mfu")
    assert mfu["verdict"] == "better" and c.figure("ttft_ms")["verdict"] == "worse"
    assert "while TTFT is worse" in mfu["disagreement"] and "0.4x" in mfu["disagreement"]
    from tracekit.report.compare import render_comparison

    assert mfu["disagreement"] in render_comparison(c, "text").replace("\n", " ")


# --- serving traces: movers by |Δ ms| with categories above, gates on figures both runs have ----------


def _raw_kernels(path) -> list[dict]:
    """The trace's own kernel events, read straight from the file (not through tracekit)."""
    import gzip

    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if str(e.get("cat", "")).lower() == "kernel" and e.get("ph") == "X"]


@pytest.fixture(scope="module")
def vendor_pair():
    from tracekit.analysis import analyze

    return compare(analyze(read_real("b300_qwen3_moe")), analyze(read_real("mi300x_qwen3_moe")))


def test_two_vendors_movers_are_the_moe_and_gemm_kernels_by_their_time(vendor_pair):
    """B300 vs MI300X, the same SGLang Qwen3-30B-A3B decode step: no kernel name in common and
    graph-replayed kernels without ops. Fails if movers are only groups both runs have (the old
    top movers were aten::argmax and aten::copy_ at microseconds while the 5.7 ms MoE GEMM was
    only "new"), or if categories are not the level that carries the change."""
    k = vendor_pair.kernels["decode"]
    cats = k["categories"]
    # The category level: moe moved most; its Δ is the phase table's (the analysis's own by-category sums).
    by_cat = {r["name"]: r["delta_ms"] for r in vendor_pair.phases["decode"]["by_category"]}
    assert cats[0]["category"] == "moe"
    assert cats[0]["delta_ms"] == pytest.approx(by_cat["moe"], rel=1e-9) and cats[0]["delta_ms"] > 2.0
    assert {c["category"]: c["delta_ms"] for c in cats} == pytest.approx(by_cat)
    # The kernel-group level: the MoE GEMMs and the GEMMs lead, each ranked by its own time.
    top = [(r["category"], r["status"]) for r in k["movers"][:4]]
    assert top == [("moe", "new"), ("moe", "gone"), ("gemm", "new"), ("gemm", "gone")], top
    # Hand check against the trace itself: every hipBLASLt GEMM (Cijk_*) of the MI300X step is one group.
    cijk = (
        sum(e["dur"] for e in _raw_kernels(real_trace_path("mi300x_qwen3_moe")) if e["name"].startswith("Cijk_")) / 1e3
    )
    gemm = next(r for r in k["movers"] if r["category"] == "gemm" and r["status"] == "new")
    assert gemm["op"].startswith("(Cijk_Alik_Bljk") and gemm["after_kernels"] == 4
    assert gemm["after_ms"] == pytest.approx(cijk, rel=1e-3)
    assert abs(k["movers"][0]["delta_ms"]) > 1.0  # not a microsecond op


def _slowed_gemm_pair(tmp_path, factor=1.2):
    """The B300 decode trace (after) and a copy whose nvjet GEMM kernels run 1/factor as long
    under another tile variant's name (before): after = before with its GEMMs 20% slower and renamed.
    Shortening kernels never makes them overlap; the rest of the trace is untouched."""
    import gzip

    src = real_trace_path("b300_qwen3_moe")
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    slowed = 0.0
    for e in doc["traceEvents"]:
        if str(e.get("cat", "")).lower() == "kernel" and str(e.get("name", "")).startswith("nvjet_sm103_tst_"):
            e["dur"] = e["dur"] / factor
            slowed += e["dur"] * (factor - 1)
            # nvjet_sm103_tst_64x16_64x16_4x1_... -> nvjet_sm103_tst_256x128_64x16_4x1_...: another tile
            e["name"] = re.sub(r"^nvjet_sm103_tst_\d+x\d+_", "nvjet_sm103_tst_256x128_", e["name"])
    before = tmp_path / "b300_gemm-fast.json.gz"
    with gzip.open(before, "wt") as f:
        json.dump(doc, f)
    return before, src, slowed / 1e3


def test_a_gemm_slowed_and_renamed_is_the_top_mover(tmp_path):
    """One trace with its GEMMs 20% slower under another cuBLAS tile name: the GEMM category is the
    top mover with the hand-computed Δ, and its kernels match as one family (status both), not as
    a "gone" and a "new" group. Fails if kernels match by their full name."""
    from tracekit import read_trace
    from tracekit.analysis import analyze

    before, after, slowed_ms = _slowed_gemm_pair(tmp_path)
    c = compare(analyze(read_trace(str(before))), analyze(read_trace(str(after))))
    k = c.kernels["decode"]
    assert k["categories"][0]["category"] == "gemm"
    assert k["categories"][0]["delta_ms"] == pytest.approx(slowed_ms, rel=1e-3)
    assert all(abs(cat["delta_ms"]) < 1e-9 for cat in k["categories"][1:])
    top = k["movers"][0]
    assert (top["op"], top["status"]) == ("(nvjet_sm103_tst)", "both")
    assert top["delta_ms"] == pytest.approx(slowed_ms, rel=1e-3) and top["speedup"] == pytest.approx(1 / 1.2, rel=1e-3)
    assert k["new"] == [] and k["vanished"] == []
    # Every format shows the category level with the GEMM family under it.
    text = render_comparison(c, "text")
    assert re.search(r"\n    gemm +\S+ ms +\S+ ms +\+\S+ ms", text) and "  (nvjet_sm103_tst)" in text
    assert "| **gemm** |" in render_comparison(c, "md")
    assert '<tbody data-category="gemm">' in render_comparison(c, "html")


def test_kernel_families_strip_templates_and_tile_suffixes():
    """Fails if a tile variant, a template instance or a mangled name makes a kernel another group."""
    from tracekit.compare.movers import kernel_family

    assert kernel_family("nvjet_sm103_tst_32x64_64x16_4x1_v_bz_splitK_TNN") == "nvjet_sm103_tst"
    assert kernel_family("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x256_MI16x16x1_SN") == kernel_family(
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x512_MI16x16x1_SN"
    )
    assert (
        kernel_family("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_kernel")
        == "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"
    )
    assert (
        kernel_family("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)")
        == "cutlass_80_tensorop_s1688gemm"
    )
    assert (
        kernel_family("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi8EEEvPT0_")
        == "aiter::add_rmsnorm_quant_kernel"
    )
    assert (
        kernel_family(
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
            "std::array<char*, 3> >(int, float)"
        )
        == "at::native::vectorized_elementwise_kernel<>()"
    )
    assert kernel_family("flash_fwd_splitkv_kernel") == "flash_fwd_splitkv_kernel"


def test_movers_are_per_step_when_step_counts_differ():
    """2 vs 4 decode steps of the same per-step work: no mover, per step. Fails if totals are
    compared (the after run would look 2x slower in every group)."""

    def run(n):
        rows = [("decode", "gemm", None, f"nvjet_sm90_tst_{64 * (1 + i % 2)}x8_kernel", 3000, None) for i in range(n)]
        return _analysis(work=_work(rows), phases={"decode": {"steps": n}})

    k = _kernel_movers("decode", run(2), run(4))
    assert k["basis"] == "per step" and k["steps"] == {"before": 2, "after": 4}
    (g,) = k["movers"]
    assert (g["op"], g["before_ms"], g["after_ms"], g["delta_ms"]) == ("(nvjet_sm90_tst)", 0.003, 0.003, 0.0)
    assert (g["before_calls"], g["after_calls"]) == (2, 4)


def test_engine_traces_suggest_a_gate_both_have_and_refuse_one_they_lack(tmp_path):
    """Engine-step traces have no TPOT: the suggested gate must name a figure both runs have
    (it used to be tpot_p50, which then always failed), and a gate on TPOT exits 2 with one
    sentence saying the figure is absent (it used to exit 1 as if the run had regressed)."""
    b, a = real_trace_path("b300_qwen3_moe"), real_trace_path("mi300x_qwen3_moe")
    res = _cli(b, a, "-o", tmp_path / "c.html")
    assert res.exit_code == 0, res.output
    suggested = re.search(r"--fail-if '([^']+)'", res.output).group(1)
    assert suggested == "decode_step_p50>+5%"
    data = json.loads(_cli(b, a, "-o", "-", "-f", "json").stdout)
    assert data["suggested_gate"] == suggested
    assert all(
        h["before"] is not None and h["after"] is not None for h in data["headline"] if h["key"] == "decode_step_p50"
    )
    # The suggested gate is checkable: it fails because MI300X is slower here (exit 1), not for want of data.
    res = _cli(b, a, "-o", tmp_path / "d.md", "--fail-if", suggested)
    assert res.exit_code == 1 and "gate failed: decode_step_p50>+5%: decode step p50 changed +" in res.stderr
    res = _cli(b, a, "-o", tmp_path / "e.md", "--fail-if", "tpot_p50>+5%")
    assert res.exit_code == 2, res.output
    (line,) = [x for x in res.stderr.splitlines() if x.strip()]
    assert line.startswith("tracekit: error: --fail-if 'tpot_p50>+5%': neither run has TPOT p50 (an engine trace")
    assert "gate on a figure both runs have, e.g. --fail-if 'decode_step_p50>+5%'" in line
    assert "Traceback" not in res.output
