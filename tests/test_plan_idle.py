"""``tracekit plan`` sizes from what production would see (issue 25, item 5): a one-off blocking
copy of the profiled step is reported and left out of every step's cost (``--keep-idle`` keeps
it), figures print plainly, the HTML method reads as text, and a trace of mixed steps alone
plans from their split. Expectations are worked from the analyses' step dicts, not from plan."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import read_real, real_trace_path, unheld, unheld_trace_path

from tracekit.analysis.analyze import analyze
from tracekit.cli import main
from tracekit.cli.common import load_model_option
from tracekit.whatif.fit import PhaseCosts, fit_costs
from tracekit.whatif.plan import Demand, Slo, plan

NOT_SYNC = ("launch", "host", "wait", "unattributed")


@pytest.fixture(scope="module")
def serving_pair():
    """The SGLang Qwen3-8B MI300X extend and decode traces, analysed with their model, each with a
    one-off copy that blocked the host (``conftest.unheld``: as recorded, the copies waited on the
    previous batch, which is no part of the steps)."""
    model = load_model_option("qwen3-8b", None)
    return model, [analyze(unheld(read_real(k)), model=model) for k in ("mi300x_extend", "mi300x_decode")]


def _only(a, phase):
    steps = [s for s in a.to_dict()["steps"] if s["phase"] == phase]
    assert len(steps) == 1
    return steps[0]


def test_a_one_off_blocking_copy_is_left_out_of_the_decode_step_cost(serving_pair):
    """Bug: the profiled decode step's 463 ms blocking hipMemcpyWithStream is carried into every
    decode step of the plan (a decode step of one request "takes 471 ms")."""
    model, analyses = serving_pair
    s = _only(analyses[1], "decode")
    # The trace: 9.77 ms of GPU work, 463 ms of it blocked in sync, the rest per-kernel overhead.
    assert s["idle_by_cause"]["sync"] > 400 and s["gpu_busy_ms"] < 12
    steady = s["gpu_busy_ms"] + sum(s["idle_by_cause"][c] for c in NOT_SYNC)
    assert steady == pytest.approx(10.79, abs=0.01)
    costs = fit_costs(analyses, model)
    # At the measured batch and context the fit reproduces the measured step, less the copy.
    b, ctx = s["batch"], s["kv_tokens"] / s["batch"]
    assert costs.decode_s(b, ctx) * 1e3 == pytest.approx(steady, rel=1e-6)
    assert costs.decode_s(1, 2048 + 128) * 1e3 < 20  # not 471 ms
    kept = fit_costs(analyses, model, keep_idle=True)
    assert kept.decode_s(b, ctx) * 1e3 == pytest.approx(s["duration_ms"], rel=1e-6)
    assert kept.decode_s(1, 2048 + 128) * 1e3 > 463
    # The prefill step's blocking copy (493 ms beside 493 ms of GPU work) likewise.
    p = _only(analyses[0], "prefill")
    over = sum(p["idle_by_cause"][c] for c in NOT_SYNC)
    assert costs.basis["prefill_overhead_ms"] == pytest.approx(over, rel=1e-6)
    assert kept.basis["prefill_overhead_ms"] == pytest.approx(p["gpu_idle_ms"], rel=1e-6)


def test_the_note_and_json_name_the_left_out_idle(serving_pair, tmp_path):
    """Bug: the one-off copy is left out (or kept) in silence: the plan's notes and JSON must say
    how large it is, its cause and call, and that --keep-idle keeps it."""
    s = _only(serving_pair[1][1], "decode")
    pre, dec = (str(unheld_trace_path(k, tmp_path)) for k in ("mi300x_extend", "mi300x_decode"))
    args = [
        "plan",
        pre,
        dec,
        "--model",
        "qwen3-8b",
        "--isl",
        "2048",
        "--osl",
        "256",
        "--rate",
        "2",
        "--ttft-slo",
        "2s",
        "--tpot-slo",
        "50ms",
    ]
    out = {}
    for name, extra in (("default", []), ("kept", ["--keep-idle"])):
        for ext in ("json", "txt", "md", "html"):
            path = tmp_path / f"{name}.{ext}"
            r = CliRunner().invoke(main, [*args, *extra, "-o", str(path)])
            assert r.exit_code == 0, r.output
            out[name, ext] = path.read_text()
    d = json.loads(out["default", "json"])
    row = next(o for o in d["costs"]["one_off_idle"] if o["phase"] == "decode")
    assert row["cause"] == "sync" and row["excluded"] and row["call"] == "hipMemcpyWithStream"
    assert row["ms"] == pytest.approx(s["idle_by_cause"]["sync"], rel=1e-9)
    note = next(n for n in d["notes"] if n.startswith("the decode step's"))
    assert "463 ms" in note and "hipMemcpyWithStream" in note and "sync" in note and "left out" in note
    assert "--keep-idle keeps it" in note
    # Under 50 ms a step, one replica meets the 50 ms TPOT SLO; with the copy kept, none does.
    assert d["costs"]["decode_step_ms_batch1"] < 20 and d["recommended"] is not None
    k = json.loads(out["kept", "json"])
    assert k["costs"]["decode_step_ms_batch1"] > 463 and k["recommended"] is None
    assert any("463 ms" in n and "--keep-idle" in n and "kept" in n for n in k["notes"])
    for ext in ("txt", "md", "html"):
        assert "463 ms" in out["default", ext] and "hipMemcpyWithStream" in out["default", ext], ext
        assert "one-off decode idle" in out["default", ext], ext


def test_recurring_sync_is_per_step_work_and_kept():
    """Bug: every step's sync counted as a one-off (so real per-step blocking is planned away),
    or an outlier among many steady steps kept."""
    from tracekit.whatif.fit import one_off_idle

    steady = {"gpu_busy_ms": 10.0, "duration_ms": 11.0, "idle_by_cause": {"sync": 0.02, "launch": 0.98}}
    blocked = {"gpu_busy_ms": 10.0, "duration_ms": 30.0, "idle_by_cause": {"sync": 19.0, "launch": 1.0}}
    one = one_off_idle([blocked] + [steady] * 9, "decode")
    assert one["excluded"] and one["steps"] == 1 and one["per_step_ms"] == [19.0] + [0.0] * 9
    every = one_off_idle([blocked] * 10, "decode")
    assert not every["excluded"] and every["steps"] == 10 and "recurs" in every["reason"]
    small = {"gpu_busy_ms": 0.1, "duration_ms": 0.2, "idle_by_cause": {"sync": 0.09}}  # a copy's latency
    assert one_off_idle([small], "decode")["steps"] == 0


def test_missing_prints_plain_figures(tmp_path):
    """Bug: figures of four digits print as "1.74e+03 ms" (the :.3g format) in the missing lines:
    a 32,768-token prompt's prefill (1.7 s) against a 1 s TTFT SLO."""
    pre, dec = str(real_trace_path("mi300x_extend")), str(real_trace_path("mi300x_decode"))
    args = [
        "plan",
        pre,
        dec,
        "--model",
        "qwen3-8b",
        "--isl",
        "32768",
        "--osl",
        "256",
        "--rate",
        "1",
        "--ttft-slo",
        "1s",
        "--tpot-slo",
        "50ms",
        "-o",
        str(tmp_path / "p.txt"),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    text = (tmp_path / "p.txt").read_text()
    assert "e+0" not in text and "e+0" not in r.output
    assert re.search(r"a prefill of 32,768 tokens alone takes \d,\d{3} ms .* TTFT SLO of 1,000 ms", text), text


def test_the_recommendation_prints_plain_figures():
    """Bug: the recommendation reads "TTFT 2.25e+03 ms". A 2 s prefill (2 ms a token, 1,000
    tokens) at 0.1 requests/s on one colocated replica: rho = 0.2, TTFT = 2 + 0.2 x 2 / (2 x 0.8)
    + half a 10 ms decode step = 2.255 s; TPOT = 10 ms / 0.8 = 12.5 ms."""
    c = PhaseCosts(lambda n: 2e-3 * n, lambda b, ctx: 0.01, device="test GPU")
    p = plan(c, Demand(0.1, 1000, 100), Slo(5.0, 0.05), max_gpus=1)
    assert p.recommended == "colocated"
    assert "TTFT 2,255 ms, TPOT 12.5 ms" in p.why and "e+0" not in p.why
    reasons = [r for o in plan(c, Demand(0.1, 1000, 100), Slo(1.0, 0.05), max_gpus=1).options for r in o.reasons]
    assert "TTFT 2,255 ms is over the SLO of 1,000 ms" in reasons, reasons


def test_the_html_method_section_is_text_not_markup(serving_pair, tmp_path):
    """Bug: the method (the docstring) is shown with its markup: ``code``, **bold**, "- " bullets
    as literal characters in paragraphs."""
    pre, dec = str(real_trace_path("mi300x_extend")), str(real_trace_path("mi300x_decode"))
    path = tmp_path / "p.html"
    r = CliRunner().invoke(
        main,
        [
            "plan",
            pre,
            dec,
            "--model",
            "qwen3-8b",
            "--isl",
            "2048",
            "--osl",
            "256",
            "--rate",
            "2",
            "--ttft-slo",
            "2s",
            "--tpot-slo",
            "50ms",
            "-o",
            str(path),
        ],
    )
    assert r.exit_code == 0, r.output
    html = path.read_text()
    method = html[html.index("<h2>Method</h2>") :]
    method = method[: method.index("</section>")]
    for raw in ("&lt;", "``", "**", '<p class="note">- '):
        assert raw not in method, raw
    assert "<ul" in method and "<li><code>prefill_s(n)</code>" in method and "<strong>Phase costs</strong>" in method


def _only_window(trace, a: int, b: int):
    """The trace cut to [a, b): ops and Python frames overlapping it (outer frames begun earlier
    kept), other events starting in it; kernel-to-launch and -op links renumbered."""
    keep, remap = {}, {}
    for n in ("kernels", "runtime", "cpu_ops", "annotations", "python"):
        t = getattr(trace, n)
        s, e = t["start_ns"].to_numpy(), t["end_ns"].to_numpy()
        keep[n] = np.flatnonzero((s < b) & (e > a) if n in ("cpu_ops", "python") else (s >= a) & (s < b))
    for n in ("runtime", "cpu_ops"):
        m = np.full(len(getattr(trace, n)), -1, dtype=np.int64)
        m[keep[n]] = np.arange(len(keep[n]))
        remap[n] = m
    out = {}
    for n, rows in keep.items():
        t = getattr(trace, n).iloc[rows].reset_index(drop=True).copy()
        if n in ("kernels", "runtime"):
            for col, target in (("launch", "runtime"), ("op", "cpu_ops")):
                if col in t:
                    v = t[col].to_numpy()
                    t[col] = np.where(v >= 0, remap[target][np.maximum(v, 0)], -1)
        out[n] = t
    return dataclasses.replace(trace, **out)


@pytest.fixture(scope="module")
def mixed_only():
    """rtx3090_vllm cut to its one mixed step (execute_new_2_cached_2: 2 new requests prefill
    10 tokens beside 2 running ones decoding 2)."""
    t = read_real("rtx3090_vllm")
    ann = t.annotations
    rows = ann[ann["name"].astype(str) == "execute_new_2_cached_2"]
    return _only_window(t, int(rows["start_ns"].min()), int(rows["end_ns"].max()) + 500_000)


def test_a_trace_of_mixed_steps_alone_plans_from_their_split(mixed_only):
    """Bug: a trace holding only mixed steps is refused ("no prefill step"), or its phase costs
    are the whole step's instead of each side's part."""
    a = analyze(mixed_only)
    d = a.to_dict()
    assert [s["phase"] for s in d["steps"]] == ["mixed"]
    s = d["steps"][0]
    sp = s["split"]
    assert (sp["prefill"]["tokens"], sp["decode"]["requests"]) == (10, 2)
    costs = fit_costs([a], None)
    assert costs.basis["prefill_steps"] == 1 and costs.basis["decode_steps"] == 1
    # Each part: its GPU time, and the step's idle in proportion to it (nothing here is a one-off).
    idle = s["duration_ms"] - s["gpu_busy_ms"]
    for side in ("prefill", "decode"):
        frac = sp[side]["gpu_ms"] / s["gpu_busy_ms"]
        assert costs.basis[f"{side}_overhead_ms"] == pytest.approx(idle * frac, rel=1e-6)
    assert costs.prefill_s(10) * 1e3 == pytest.approx(sp["prefill"]["gpu_ms"] * (1 + idle / s["gpu_busy_ms"]), rel=1e-6)
    assert costs.decode_s(2, 100) * 1e3 == pytest.approx(
        sp["decode"]["gpu_ms"] * (1 + idle / s["gpu_busy_ms"]), rel=1e-6
    )
    p = plan(costs, Demand(1.0, 512, 64), Slo(1.0, 0.05), max_gpus=4)
    assert p.recommended in ("colocated", "disaggregated")
    # With the model the CLI would pass, the split parts plan too.
    model = load_model_option("gpt-oss-20b", None)
    am = analyze(mixed_only, model=model)
    withmodel = fit_costs([am], model)
    assert withmodel.basis["prefill_steps"] == 1 and withmodel.prefill_s(512) > costs.prefill_s(10)
