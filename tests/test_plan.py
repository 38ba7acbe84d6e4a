"""``tracekit plan``: colocated vs disaggregated sizing, checked against answers worked by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, real_trace_path, unheld_trace_path

from tracekit.cli import main
from tracekit.whatif.fit import PhaseCosts
from tracekit.whatif.plan import Demand, Slo, plan


def _linear(prefill_per_token: float, decode_base: float, decode_per_request: float, **kw) -> PhaseCosts:
    """A replica whose prefill takes prefill_per_token x n and whose decode step takes
    decode_base + decode_per_request x batch: answers can be worked out by hand."""
    return PhaseCosts(
        lambda n: prefill_per_token * n, lambda b, ctx: decode_base + decode_per_request * b, device="test GPU", **kw
    )


def _by_name(p):
    return {o.name: o for o in p.options}


def test_disaggregation_wins_when_prefill_steals_decode_time():
    # Prefill 0.2 s per 1000-token prompt, decode step 20 ms + 0.2 ms per request; 4 requests/s
    # of 100 output tokens; TPOT <= 30 ms.
    c = _linear(2e-4, 0.02, 2e-4)
    p = plan(c, Demand(4.0, 1000, 100), Slo(1.0, 0.03), max_gpus=16)
    o = _by_name(p)
    # Colocated, n replicas: rho = 0.8/n of each replica's time prefills; TPOT = a / ((1 - rho) - b k)
    # with k = rate/n x osl: TPOT(n) = 0.02 / (1 - 0.88/n) -> n=2: 35.7 ms (over), n=3: 28.3 ms.
    assert o["colocated"].total_gpus == 3
    assert o["colocated"].tpot_s == pytest.approx(0.02 / (1 - 0.88 / 3), rel=1e-6)
    # Disaggregated 1 + 1: prefill rho = 0.8, M/D/1 TTFT = 0.2 + 0.8 x 0.2 / (2 x 0.2) = 0.6 s;
    # decode TPOT = 0.02 / (1 - 0.0002 x 4 x 100) = 21.7 ms.
    d = o["disaggregated"]
    assert (d.prefill_replicas, d.decode_replicas) == (1, 1)
    assert d.ttft_s == pytest.approx(0.6, rel=1e-6)
    assert d.tpot_s == pytest.approx(0.02 / 0.92, rel=1e-6)
    assert p.recommended == "disaggregated" and "fewest GPUs" in p.why and "colocated needs 3" in p.why
    assert d.goodput_per_gpu > 0 and o["colocated"].goodput_per_gpu > 0


def test_colocation_wins_when_prefill_is_light():
    # The same decode, prefill 20x cheaper: one colocated replica meets both SLOs.
    c = _linear(1e-5, 0.02, 2e-4)
    p = plan(c, Demand(4.0, 1000, 100), Slo(1.0, 0.03), max_gpus=16)
    o = _by_name(p)
    # rho = 4 x 0.01 = 0.04; TPOT = 0.02 / (1 - 0.04 - 0.08) = 22.7 ms.
    assert o["colocated"].total_gpus == 1
    assert o["colocated"].tpot_s == pytest.approx(0.02 / 0.88, rel=1e-6)
    assert o["disaggregated"].total_gpus == 2
    assert p.recommended == "colocated"


def test_nothing_meets_and_the_plan_says_what_is_missing():
    c = _linear(2e-4, 0.02, 2e-4)
    p = plan(c, Demand(4.0, 1000, 100), Slo(0.1, 0.03), max_gpus=8)
    assert p.recommended is None and not any(o.meets_slo for o in p.options)
    assert any("a prefill of 1,000 tokens alone takes 200 ms" in m and "TTFT SLO of 100 ms" in m for m in p.missing)
    d = p.to_dict()
    assert d["recommended"] is None and d["missing"]


def test_kv_cache_must_fit():
    # 1 MB of KV cache per token, 1100 tokens per request: 1.1 GB a request, 9 GB of room.
    c = _linear(1e-5, 0.02, 2e-4, kv_bytes_per_token=1e6, weights_bytes=0.0, memory_bytes=10e9)
    p = plan(c, Demand(40.0, 1000, 100), Slo(1.0, 0.05), max_gpus=16)
    for o in p.options:
        if o.meets_slo:
            assert o.batch <= 9e9 / 1.1e9 + 1e-9
    too_small = _linear(1e-5, 0.02, 2e-4, kv_bytes_per_token=1e6, weights_bytes=0.0, memory_bytes=2e9)
    one = plan(too_small, Demand(40.0, 1000, 100), Slo(1.0, 0.05), max_gpus=2)
    assert any("does not fit" in r for o in one.options for r in o.reasons)


def test_transfer_time_counts_in_disaggregated_ttft():
    c = _linear(2e-4, 0.02, 2e-4, kv_bytes_per_token=1e5)
    slow = plan(c, Demand(1.0, 1000, 100), Slo(5.0, 0.05), kv_link=1e9)
    fast = plan(c, Demand(1.0, 1000, 100), Slo(5.0, 0.05), kv_link=1e12)
    # 1000 tokens x 100 kB over 1 GB/s: 0.1 s more.
    assert _by_name(slow)["disaggregated"].ttft_s - _by_name(fast)["disaggregated"].ttft_s == pytest.approx(
        0.1 - 1e-4, rel=1e-3
    )


def test_plan_on_the_sample_trace(tmp_path):
    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(
        main,
        [
            "plan",
            str(path),
            "--isl",
            "64",
            "--osl",
            "16",
            "--rate",
            "5",
            "--ttft-slo",
            "100ms",
            "--tpot-slo",
            "20ms",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["kind"] == "tracekit.plan" and d["recommended"] in ("colocated", "disaggregated")
    assert {"prefill_tokens_per_s", "decode_tokens_per_s"} <= set(d["demand"])
    for o in d["options"]:
        assert {
            "name",
            "prefill_gpus",
            "decode_gpus",
            "total_gpus",
            "prefill_capacity_tokens_per_s",
            "decode_capacity_tokens_per_s",
            "ttft_ms",
            "tpot_ms",
            "meets_slo",
            "goodput_per_gpu",
        } <= set(o)
    # Fitted from the run: the decode step of one request is near the measured one.
    assert d["costs"]["decode_step_ms_batch1"] > 0 and d["costs"]["decode_steps"] == 16


def test_plan_on_a_serving_pair_and_its_pages(tmp_path):
    # A pair whose steps hold a one-off blocking copy (``unheld``: as recorded, the copies waited on
    # the previous batch, which is no part of the steps and no idle, so nothing is left out).
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
        "1s",
        "--kv-link",
        "50",
    ]
    for ext in ("html", "md", "txt"):
        r = CliRunner().invoke(main, [*args, "-o", str(tmp_path / f"p.{ext}")])
        assert r.exit_code == 0, r.output
    html = (tmp_path / "p.html").read_text()
    assert 'id="tk-chart-capacity"' in html and "Recommended" in html
    text = (tmp_path / "p.txt").read_text()
    # The steps' one-off blocking host copies are left out of the costs, and the notes say so.
    assert "left out of the decode cost as a one-off" in text and "sync" in text
    # As recorded, the steps are measured from their own work: no copy to leave out.
    real = [str(real_trace_path(k)) for k in ("mi300x_extend", "mi300x_decode")]
    r = CliRunner().invoke(main, ["plan", *real, *args[3:], "-o", str(tmp_path / "real.txt")])
    assert r.exit_code == 0, r.output
    assert "one-off" not in (tmp_path / "real.txt").read_text()


@pytest.mark.parametrize("bad, message", [("500", "needs a unit"), ("-5ms", "needs a unit"), ("0ms", "positive")])
def test_plan_refuses_unitless_slos(bad, message, tmp_path):
    path = str(real_trace_path("mi300x_decode"))
    r = CliRunner().invoke(
        main,
        [
            "plan",
            path,
            "--isl",
            "8",
            "--osl",
            "8",
            "--rate",
            "1",
            "--ttft-slo",
            bad,
            "--tpot-slo",
            "50ms",
            "-o",
            str(tmp_path / "x.html"),
        ],
    )
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_plan_needs_both_phases(tmp_path):
    r = CliRunner().invoke(
        main,
        [
            "plan",
            str(real_trace_path("mi300x_decode")),
            "--isl",
            "8",
            "--osl",
            "8",
            "--rate",
            "1",
            "--ttft-slo",
            "1s",
            "--tpot-slo",
            "50ms",
            "-o",
            str(tmp_path / "x.html"),
        ],
    )
    assert r.exit_code == 2 and "no prefill step" in r.output


def test_plan_for_another_gpu_goes_through_project(tmp_path):
    pre, dec = str(real_trace_path("mi300x_extend")), str(real_trace_path("mi300x_decode"))
    base = [
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
        "1s",
    ]
    here, there = tmp_path / "mi300x.json", tmp_path / "b300.json"
    assert CliRunner().invoke(main, [*base, "-o", str(here)]).exit_code == 0
    r = CliRunner().invoke(main, [*base, "--gpu", "b300", "-o", str(there)])
    assert r.exit_code == 0, r.output
    a, b = json.loads(here.read_text())["costs"], json.loads(there.read_text())["costs"]
    assert a["device"] == "MI300X" and b["device"] == "B300 (HGX)"
    # B300's faster GEMMs shorten the prefill; its larger memory holds the same weights.
    assert b["prefill_ms_at_isl"] < a["prefill_ms_at_isl"] and b["memory_bytes"] > a["memory_bytes"]
