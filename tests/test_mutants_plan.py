"""``tracekit.whatif.plan``'s serving model and ``tracekit.whatif.fit``'s fit, checked number by number against answers
worked by hand from the formulas in the module's docstring (M/D/1 prefill wait, Little's law
decode batch, the memory bound, capacity and goodput). The phase costs are hand-built linear
functions, so every figure below is hand arithmetic, not a value read back from plan."""

from __future__ import annotations

import pytest

from tracekit.whatif.fit import PhaseCosts, one_off_idle
from tracekit.whatif.plan import Demand, Slo, evaluate, plan

# A replica whose prefill of n tokens takes 1e-4 n s and whose decode step of b requests at mean
# context ctx takes 10 ms + 1e-6 b ctx (so both the batch and the context matter).
D = Demand(2.0, 1000, 100)  # context = 1000 + 100 / 2 = 1050: a decode step = 0.01 + 1.05e-3 b


def _costs(**kw) -> PhaseCosts:
    return PhaseCosts(lambda n: 1e-4 * n, lambda b, ctx: 0.01 + 1e-6 * b * ctx, device="test GPU", **kw)


def _memory() -> dict:
    # 10 GB, 1 GB of weights: room 0.9 x 10 - 1 = 8 GB; 1 MB a token x 1100 tokens = 1.1 GB a request,
    # so 8 / 1.1 = 7.2727 requests fit.
    return {"kv_bytes_per_token": 1e6, "weights_bytes": 1e9, "memory_bytes": 10e9}


def test_colocated_option_figures_worked_by_hand():
    """catches: a wrong M/D/1 wait, a wrong share of decode time left by prefill, the Little's-law
    batch, the half decode step in colocated TTFT, or prefill/decode capacity mis-summed."""
    o = evaluate("colocated", _costs(), D, Slo(1.0, 0.03), 1, 1, None)
    # Prefill: S = 0.1 s, rho = 2 x 0.1 = 0.2. Decode gets 0.8 of the time; k = 2 x 100 = 200 requests
    # per second of TPOT: t = (0.01 + 1.05e-3 x 200 t) / 0.8 -> 0.59 t = 0.01 -> t = 1/59 s.
    t = 0.01 / 0.59
    assert o.tpot_s == pytest.approx(t, rel=1e-7)
    assert o.batch == pytest.approx(200 * t, rel=1e-7)
    # TTFT = S + rho S / (2 (1 - rho)) + half the decode step at that batch (0.8 t).
    assert o.ttft_s == pytest.approx(0.1 + 0.2 * 0.1 / 1.6 + 0.4 * t, rel=1e-7)
    # Capacity: 1 x 1000 / 0.1 prompt tokens/s; decode at the largest batch within 30 ms:
    # 0.01 + 1.05e-3 b = 0.03 -> b = 19.048, so 19.048 / 0.03 tokens/s.
    assert o.prefill_capacity == pytest.approx(10000.0, rel=1e-9)
    assert o.decode_capacity == pytest.approx((0.02 / 1.05e-3) / 0.03, rel=1e-6)
    assert o.meets_slo and o.reasons == []
    assert (o.prefill_replicas, o.decode_replicas, o.total_gpus) == (1, 1, 1)
    d = o.to_dict()
    assert d["prefill_gpus"] == 1 and d["decode_gpus"] == 1 and d["total_gpus"] == 1 and d["shared"] is True
    assert d["ttft_ms"] == pytest.approx(o.ttft_s * 1e3) and d["tpot_ms"] == pytest.approx(t * 1e3, rel=1e-7)


def test_disaggregated_option_figures_worked_by_hand():
    """catches: the KV transfer left out of (or misweighted in) disaggregated TTFT, the decode
    replicas' rate split wrongly, or the GPU count of a split deployment wrong."""
    c = _costs(kv_bytes_per_token=1e6)
    o = evaluate("disaggregated", c, D, Slo(1.0, 0.03), 2, 3, 1e10)
    # Each of 2 prefill replicas: rate 1, rho = 0.1; TTFT = 0.1 + 0.1 x 0.1 / 1.8 + 1000 x 1e6 / 1e10.
    assert o.ttft_s == pytest.approx(0.1 + 0.01 / 1.8 + 0.1, rel=1e-7)
    # Each of 3 decode replicas: rate 2/3, k = 200/3 requests per second of TPOT; at ~11 ms that is
    # under one request in flight, and a step holds at least one: TPOT = decode_s(1) = 11.05 ms.
    assert o.tpot_s == pytest.approx(0.01105, rel=1e-9)
    assert o.batch == 1.0
    assert o.prefill_capacity == pytest.approx(2 * 10000.0, rel=1e-9)
    assert o.decode_capacity == pytest.approx(3 * (0.02 / 1.05e-3) / 0.03, rel=1e-6)
    assert o.total_gpus == 5 and o.meets_slo
    d = o.to_dict()
    assert (d["prefill_gpus"], d["decode_gpus"], d["total_gpus"], d["shared"]) == (2, 3, 5, False)
    # Without a link (or for colocated) no transfer is added.
    none = evaluate("disaggregated", c, D, Slo(1.0, 0.03), 2, 3, None)
    assert none.ttft_s == pytest.approx(0.1 + 0.01 / 1.8, rel=1e-7)


def test_tensor_parallel_replicas_count_their_gpus():
    """catches: GPUs counted per replica instead of replicas x TP."""
    o = evaluate("disaggregated", _costs(tp=4), D, Slo(1.0, 0.03), 2, 3, None)
    d = o.to_dict()
    assert (d["prefill_gpus"], d["decode_gpus"], d["total_gpus"]) == (8, 12, 20)
    co = evaluate("colocated", _costs(tp=4), D, Slo(1.0, 0.03), 2, 2, None)
    assert co.total_gpus == 8 and co.to_dict()["decode_gpus"] == 8


def test_memory_bounds_the_decode_capacity_and_the_batch():
    """catches: the memory room computed without MEMORY_USE or the weights, the KV cache sized
    without the output tokens, or the decode capacity not capped by what fits."""
    c = _costs(**_memory())
    o = evaluate("colocated", c, D, Slo(1.0, 0.03), 1, 1, None)
    # 7.2727 requests fit; a step of them takes 0.01 + 1.05e-3 x 7.2727 = 17.64 ms (within 30 ms),
    # so the capacity is 7.2727 / 0.017636 tokens/s.
    fit = 8e9 / 1.1e9
    assert o.decode_capacity == pytest.approx(fit / (0.01 + 1.05e-3 * fit), rel=1e-9)
    # One disaggregated decode replica at rate 4: t = 0.01 / (1 - 0.42) = 17.24 ms, batch 400 t = 6.9
    # fits; at rate 5: t = 0.01 / 0.475 = 21.05 ms, batch 10.5 does not.
    ok = evaluate("disaggregated", c, Demand(4.0, 1000, 100), Slo(10.0, 0.03), 1, 1, None)
    assert ok.batch == pytest.approx(400 * 0.01 / 0.58, rel=1e-7) and ok.meets_slo
    full = evaluate("disaggregated", c, Demand(5.0, 1000, 100), Slo(10.0, 0.03), 1, 1, None)
    assert full.batch == pytest.approx(500 * 0.01 / 0.475, rel=1e-7)
    assert not full.meets_slo
    assert full.reasons == [
        "the KV cache of 10.5 requests x 1100 tokens per decode replica does not fit beside "
        "the weights in 90% of its memory"
    ], full.reasons


def test_over_capacity_and_over_slo_reasons():
    """catches: an over-capacity prefill (rho >= 1) still given a TTFT, a decode with more work
    than time given a TPOT, or SLO breaches not reported."""
    c = _costs()
    # Colocated at 10 req/s: rho = 1 exactly, over capacity: no TTFT, no TPOT.
    o = evaluate("colocated", c, Demand(10.0, 1000, 100), Slo(1.0, 0.03), 1, 1, None)
    assert o.ttft_s is None and o.tpot_s is None and not o.meets_slo
    assert o.reasons and o.reasons[0].startswith(
        "prefill is over capacity: 10.0 requests/s per replica, each taking 100 ms"
    )
    # Disaggregated decode at 10 req/s on one replica: 1.05e-3 x 1000 > 1, no steady state.
    d = evaluate("disaggregated", c, Demand(10.0, 1000, 100), Slo(1.0, 0.03), 2, 1, None)
    assert d.tpot_s is None and "decode is over capacity" in d.reasons
    assert d.ttft_s == pytest.approx(0.1 + 0.5 * 0.1 / 1.0, rel=1e-7)  # rho = 5 x 0.1 = 0.5
    # Colocated where prefill fits but decode does not in what is left: at rate 5, rho = 0.5 leaves
    # 0.5 of the time, and decode's batch term alone needs 1.05e-3 x 500 = 0.525 of it: no fixed point.
    e = evaluate("colocated", c, Demand(5.0, 1000, 100), Slo(1.0, 0.03), 1, 1, None)
    assert e.tpot_s is None and e.ttft_s is None
    assert e.reasons == ["decode is over capacity once prefills take their share of each replica"]
    # TPOT 1/59 s = 16.9 ms against a 15 ms SLO; TTFT 0.1125 + 0.4 / 59 = 119 ms against 100 ms.
    tight = evaluate("colocated", c, D, Slo(1.0, 0.015), 1, 1, None)
    assert tight.reasons == ["TPOT 16.9 ms is over the SLO of 15.0 ms"], tight.reasons
    ttft = evaluate("colocated", c, D, Slo(0.1, 0.03), 1, 1, None)
    assert len(ttft.reasons) == 1 and ttft.reasons[0].startswith("TTFT 119") and "SLO of 100 ms" in ttft.reasons[0]


def test_goodput_is_the_highest_rate_within_the_slos():
    """catches: goodput not bisected to the rate where an SLO starts to fail, or not per GPU,
    or counted in input tokens."""
    # One colocated replica at rate r: rho = 0.1 r, TPOT = 0.01 / (1 - 0.1 r - 0.105 r) <= 0.03
    # -> r <= (2/3) / 0.205 = 3.252 req/s; x 100 output tokens over 1 GPU.
    p = plan(_costs(), Demand(1.0, 1000, 100), Slo(10.0, 0.03), max_gpus=1)
    (o,) = p.options
    assert o.name == "colocated" and o.meets_slo
    assert o.goodput_per_gpu == pytest.approx((2 / 3) / 0.205 * 100, rel=1e-5)
    # With the memory of _memory(), the batch r x 100 x TPOT = r / (1 - 0.205 r) reaches 7.2727 first:
    # r = 7.2727 / (1 + 0.205 x 7.2727).
    fit = 8e9 / 1.1e9
    m = plan(_costs(**_memory()), Demand(1.0, 1000, 100), Slo(10.0, 0.03), max_gpus=1)
    assert m.options[0].goodput_per_gpu == pytest.approx(fit / (1 + 0.205 * fit) * 100, rel=1e-5)


def test_plan_recommends_the_fewest_gpus_and_reports_both():
    """catches: the colocated search not stopping at the first size that meets the SLOs, the
    disaggregated search not starting at two replicas, or the recommendation not the cheapest."""
    # Rate 4: colocated n replicas: rho = 0.4/n, TPOT = 0.01 / (1 - 0.82/n) <= 0.03 -> n >= 1.23: n = 2.
    # Disaggregated 1 + 1: decode t = 0.01 / (1 - 0.42) = 17.2 ms, prefill rho 0.4: both met at 2.
    p = plan(_costs(), Demand(4.0, 1000, 100), Slo(1.0, 0.03), max_gpus=8)
    co, dis = p.options
    assert co.name == "colocated" and co.total_gpus == 2
    assert co.tpot_s == pytest.approx(0.01 / (1 - 0.82 / 2), rel=1e-7)
    assert dis.name == "disaggregated" and (dis.prefill_replicas, dis.decode_replicas) == (1, 1)
    assert dis.tpot_s == pytest.approx(0.01 / 0.58, rel=1e-7)
    # A tie at 2 GPUs goes to the higher goodput per GPU. Colocated: each replica to r = (2/3) / 0.205
    # (above), 2 r x 100 / 2 GPUs = 325.2. Disaggregated: decode TPOT 0.01 / (1 - 0.105 r) <= 0.03 ->
    # r = (2/3) / 0.105 (prefill TTFT 187 ms there), r x 100 / 2 GPUs = 317.5.
    assert co.goodput_per_gpu == pytest.approx((2 / 3) / 0.205 * 100, rel=1e-5)
    assert dis.goodput_per_gpu == pytest.approx((2 / 3) / 0.105 * 100 / 2, rel=1e-5)
    assert p.recommended == "colocated"
    assert p.why == (
        "Colocated on 2 GPUs meets both SLOs (TTFT 119 ms, TPOT 16.9 ms) with the fewest GPUs; "
        "disaggregated needs as many, with less goodput per GPU (317 against 325 output tokens/s)."
    )
    d = p.to_dict()
    assert d["demand"] == {"requests_per_s": 4.0, "prefill_tokens_per_s": 4000.0, "decode_tokens_per_s": 400.0}
    assert d["inputs"]["ttft_slo_ms"] == pytest.approx(1000.0) and d["inputs"]["tpot_slo_ms"] == pytest.approx(30.0)
    assert d["costs"]["prefill_ms_at_isl"] == pytest.approx(100.0)
    assert d["costs"]["decode_step_ms_batch1"] == pytest.approx(10.0 + 1.05, rel=1e-9)
    # One GPU allowed: no disaggregated option at all.
    one = plan(_costs(), Demand(1.0, 1000, 100), Slo(1.0, 0.03), max_gpus=1)
    assert [o.name for o in one.options] == ["colocated"] and one.recommended == "colocated"


def test_a_one_off_needs_both_thresholds_and_at_most_half_the_steps():
    """catches: the one-off test taking either threshold alone (half the GPU busy, 1 ms), or the
    share rule letting through more than half of the steps."""

    def step(sync, busy=10.0):
        return {"gpu_busy_ms": busy, "duration_ms": busy + sync, "idle_by_cause": {"sync": sync}}

    # 6 ms against 10 ms busy: over 1 ms, over half of 10; 4 ms: under half; 0.9 ms over half of 1 ms
    # busy but under 1 ms.
    assert one_off_idle([step(6.0)], "decode")["steps"] == 1
    assert one_off_idle([step(5.0)], "decode")["steps"] == 0  # exactly half is not over it
    assert one_off_idle([step(4.0)], "decode")["steps"] == 0
    assert one_off_idle([step(0.9, busy=1.0)], "decode")["steps"] == 0
    assert one_off_idle([step(1.0, busy=1.0)], "decode")["steps"] == 0  # exactly 1 ms is not over it
    # Two of four steps (half) is a one-off; three of four recurs.
    half = one_off_idle([step(6.0)] * 2 + [step(0.0)] * 2, "prefill")
    assert half["excluded"] and half["per_step_ms"] == [6.0, 6.0, 0.0, 0.0] and half["ms"] == 12.0
    assert half["busy_ms"] == 20.0 and half["reason"].endswith("2 of the 4 prefill steps do not show it")
    most = one_off_idle([step(6.0)] * 3 + [step(0.0)], "prefill")
    assert not most["excluded"] and most["per_step_ms"] == [0.0] * 4 and most["ms"] == 18.0
    assert most["reason"].startswith("3 of the 4 prefill steps block in sync")


class _Run:
    """The parts of an Analysis that fit_costs reads: its view's steps, the device, no model."""

    def __init__(self, steps, phases=None, model=None, device=None, workload=None):
        self._view = {"steps": steps, "phases": phases or {}}
        self.device = device or {
            "name": "Test GPU",
            "spec": "Test GPU",
            "peak_flops": {"matrix": {"bf16": 1e15}},
            "peak_bandwidth": 1e12,
        }
        self.model = model
        self.workload = workload

    def to_dict(self):
        return self._view


def _step(phase, busy, duration, idle=None, **kw):
    return {
        "phase": phase,
        "kernels": 5,
        "gpu_busy_ms": busy,
        "duration_ms": duration,
        "gpu_idle_ms": duration - busy,
        "idle_by_cause": idle or {"launch": duration - busy},
        **kw,
    }


def _measured():
    """Two prefills (1000 tokens in 20 ms busy of 25, 500 in 10 of 13) and two decodes (batch 4:
    4 TFLOP, 2 GB in 8 ms busy of 10; batch 8: 8 TFLOP, 2 GB in 16 of 19), on a 1 PFLOP/s, 1 TB/s GPU."""
    return [
        _step("prefill", 20.0, 25.0, tokens=1000),
        _step("prefill", 10.0, 13.0, tokens=500),
        _step("decode", 8.0, 10.0, batch=4, tokens=4, flops=4e12, bytes=2e9),
        _step("decode", 16.0, 19.0, batch=8, tokens=8, flops=8e12, bytes=2e9),
    ]


def test_fit_without_a_model_scales_the_measured_steps():
    """catches: prefill not priced per measured token, the decode efficiency or per-request FLOPs
    misfitted, the overhead not the mean time outside GPU busy, or memory not per replica."""
    from tracekit.whatif.fit import fit_costs

    c = fit_costs([_Run(_measured())], None, memory_gb=80.0)
    # Prefill: 30 ms busy over 1500 tokens = 20 us a token; overhead mean(5, 3) = 4 ms.
    assert c.basis["prefill_overhead_ms"] == pytest.approx(4.0)
    assert c.prefill_s(2000) == pytest.approx(0.004 + 2000 * 2e-5, rel=1e-9)
    # Decode: roofline max(FLOPs / 1e15, bytes / 1e12) = 4 ms and 8 ms against 24 ms busy: 2x;
    # 1 TFLOP per request, 2 GB a step; overhead mean(2, 3) = 2.5 ms.
    assert c.basis["decode_busy_over_roofline"] == pytest.approx(2.0)
    assert c.basis["decode_overhead_ms"] == pytest.approx(2.5)
    assert c.decode_s(1, 500) == pytest.approx(0.0025 + 2 * 0.002, rel=1e-9)  # bytes-bound
    assert c.decode_s(6, 500) == pytest.approx(0.0025 + 2 * 0.006, rel=1e-9)  # FLOP-bound
    assert (c.basis["prefill_steps"], c.basis["decode_steps"]) == (2, 2)
    assert c.memory_bytes == 80e9 and c.kv_bytes_per_token is None and c.tp == 1 and c.device == "Test GPU"
    assert any("decode FLOPs scale with the batch" in n for n in c.notes)
    assert not any("memory is unknown" in n for n in c.notes)
    assert any("memory is unknown" in n for n in fit_costs([_Run(_measured())], None).notes)


def test_a_gpu_with_only_an_fp16_matrix_peak_prices_decode_flops_at_it():
    """catches: plan without a model dividing by a missing bf16 peak on a V100 or T4 (their spec
    rows list fp16 matrix peaks only; it raised TypeError), or dropping the FLOPs there."""
    from tracekit.specs import lookup
    from tracekit.whatif.fit import fit_costs

    v100 = lookup({"name": "Tesla V100-SXM2-32GB"}).spec
    assert "bf16" not in v100.matrix_flops  # the case this test is about
    fp16 = v100.matrix_flops["fp16"]
    # The device as the analysis writes it (analysis/workload.py): peaks by unit, then dtype.
    peaks = {"matrix": dict(v100.matrix_flops), "vector": dict(v100.vector_flops)}
    device = {"name": v100.name, "spec": v100.name, "peak_flops": peaks, "peak_bandwidth": v100.peak_bandwidth}
    c = fit_costs([_Run(_measured(), device=device)], None)
    # Same steps as above: roofline max(FLOPs / fp16 peak, 2 GB / bandwidth) per decode step.
    roof = [max(4e12 / fp16, 2e9 / v100.peak_bandwidth), max(8e12 / fp16, 2e9 / v100.peak_bandwidth)]
    assert c.basis["decode_busy_over_roofline"] == pytest.approx(0.024 / sum(roof))


def test_when_nothing_meets_the_closest_split_is_shown_and_the_missing_says_why():
    """catches: the disaggregated option shown when none meets being the farthest split (or not
    the largest size), and the missing lines not naming each option's first reason."""
    # 12 req/s: a prefill replica's rho = 1.2 / x, a decode replica's batch term 1.05e-3 x 1200 / y.
    # Within 3 GPUs: 1 + 2 has prefill over capacity (no TTFT) and TPOT 0.01 / 0.37 = 27 ms, 1.35x
    # the 20 ms SLO; 2 + 1 has decode over capacity (no TPOT) and TTFT 0.1 + 0.6 x 0.1 / 0.8 = 175 ms,
    # 0.175x the 1 s SLO: each one phase short, 2 + 1 the nearer.
    p = plan(_costs(), Demand(12.0, 1000, 100), Slo(1.0, 0.02), max_gpus=3)
    co, dis = p.options
    assert (dis.prefill_replicas, dis.decode_replicas) == (2, 1)
    assert dis.ttft_s == pytest.approx(0.175, rel=1e-7) and dis.tpot_s is None
    # Colocated at 3 replicas, 4 req/s each: rho 0.4, TPOT = 0.01 / (0.6 - 0.42) = 55.6 ms.
    assert co.total_gpus == 3 and co.tpot_s == pytest.approx(0.01 / 0.18, rel=1e-7)
    assert p.recommended is None and p.why == "No option meets both SLOs within --max-gpus 3."
    assert co.goodput_per_gpu == 0.0 and dis.goodput_per_gpu == 0.0
    assert p.missing == [
        "the demand (12.0 requests/s) needs more than --max-gpus 3: colocated: TPOT 55.6 ms is "
        "over the SLO of 20.0 ms; disaggregated: decode is over capacity"
    ]


def test_missing_names_a_step_over_its_slo_and_weights_with_no_room():
    """catches: the single-request decode step or a weights-full replica not reported as what
    stands between the demand and the SLOs."""
    # A decode step of one request at 1,050 tokens of context: 10 + 1.05 = 11.05 ms > 10 ms; 10 GB of
    # weights in 10 GB: 0.9 x 10 - 10 < 0, no room.
    c = _costs(kv_bytes_per_token=1e6, weights_bytes=10e9, memory_bytes=10e9)
    p = plan(c, D, Slo(1.0, 0.01), max_gpus=2)
    assert p.recommended is None
    assert p.missing == [
        "a decode step of one request at 1,050 tokens of context takes 11.1 ms on test GPU, over "
        "the TPOT SLO of 10.0 ms",
        "the weights leave no room for one request's KV cache on a replica",
    ]
    # A single request's step already over the SLO: a decode replica gives one token per 11.05 ms
    # (the colocated option shown at 2 replicas: twice that).
    assert p.options[0].decode_replicas == 2
    assert p.options[0].decode_capacity == pytest.approx(2 / 0.01105, rel=1e-9)


def _mixed_run():
    """One mixed step: 20 ms of GPU work in 40 ms (8 ms launch, 12 ms sync idle), split 15 ms
    prefill (300 tokens of 2 requests) and 5 ms decode (4 requests). The sync's largest interval
    is a cudaMemcpy under aten::copy_."""
    s = _step(
        "mixed",
        20.0,
        40.0,
        idle={"launch": 8.0, "sync": 12.0},
        tokens=304,
        batch=6,
        split={"prefill": {"gpu_ms": 15.0, "tokens": 300, "requests": 2}, "decode": {"gpu_ms": 5.0, "requests": 4}},
    )
    top = {
        "cause": "sync",
        "ms": 9.0,
        "call": "cudaMemcpy",
        "op": "aten::copy_",
        "stack": ["serve.py(10): step", "model.py(42): forward", "<built-in method copy_>"],
    }
    small = {"cause": "sync", "ms": 1.0, "call": "cudaStreamSynchronize", "op": None, "stack": []}
    return _Run([s], phases={"prefill": {"idle_top": [small, top, {"cause": "launch", "ms": 50.0}]}})


def test_a_mixed_step_splits_into_parts_and_their_one_off_sync_is_left_out():
    """catches: a mixed step's part given the whole step's duration or idle instead of its share,
    the one-off threshold of a part not scaled by its share, or the notes misnaming the one-off."""
    from tracekit.whatif.fit import fit_costs

    c = fit_costs([_mixed_run()], None)
    # Prefill part: 15/20 = 0.75 of the step: 30 ms, 9 ms sync (over half of 15 ms busy and over
    # 0.75 ms): a one-off of its only step. Overhead 30 - 15 - 9 = 6 ms; 15 ms / 300 tokens a token.
    assert c.basis["prefill_overhead_ms"] == pytest.approx(6.0)
    assert c.prefill_s(1000) == pytest.approx(0.006 + 1000 * 15e-3 / 300, rel=1e-9)
    # Decode part: 0.25: 10 ms, 3 ms sync (over 2.5 ms, over 0.25 ms), overhead 10 - 5 - 3 = 2 ms;
    # without FLOPs (a part's are the whole step's) the step is its measured 5 ms at any batch.
    assert c.basis["decode_overhead_ms"] == pytest.approx(2.0)
    assert c.decode_s(1, 100) == pytest.approx(0.007, rel=1e-9) and c.decode_s(64, 100) == pytest.approx(0.007)
    assert c.notes[0] == (
        "2 parts of mixed steps counted by their split (each side's share of the step's GPU time, duration and idle)"
    )
    pre = (
        "the prefill step's 9.00 ms of GPU idle blocked in cudaMemcpy (aten::copy_, model.py(42): forward) "
        "(idle cause sync) is left out of the prefill cost as a one-off: the GPU ran none of the 15.0 ms of "
        "kernels of the step meanwhile, and a synchronous copy of a step's inputs blocks for microseconds, so "
        "it waited on something else; the run holds one prefill step, so nothing shows it recurring; "
        "--keep-idle keeps it"
    )
    dec = (
        "the decode step's 3.00 ms of GPU idle blocked in a synchronising call (idle cause sync) is left out "
        "of the decode cost as a one-off"
    )
    assert pre in c.notes, c.notes
    assert any(n.startswith(dec) for n in c.notes), c.notes
    rows = {r["phase"]: r for r in c.basis["one_off_idle"]}
    assert rows["prefill"]["ms"] == pytest.approx(9.0) and rows["prefill"]["busy_ms"] == pytest.approx(15.0)
    assert rows["prefill"]["call"] == "cudaMemcpy" and rows["decode"]["call"] is None
    assert "per_step_ms" not in rows["prefill"]
    # 6 and 2 ms outside GPU work beside 15 and 5 ms of it: no "outside GPU work" note.
    assert not any("outside GPU work" in n for n in c.notes), c.notes

    kept = fit_costs([_mixed_run()], None, keep_idle=True)
    # Kept: the parts' whole time outside GPU work, 15 ms and 5 ms: equal to (not over) their busy
    # time, so no "outside GPU work" note.
    assert kept.basis["prefill_overhead_ms"] == pytest.approx(15.0)
    assert kept.basis["decode_overhead_ms"] == pytest.approx(5.0)
    assert kept.basis["keep_idle"] is True
    assert any(
        n.startswith("the prefill step's 9.00 ms")
        and "is kept in the prefill cost (--keep-idle), though it looks a one-off: the GPU ran none" in n
        for n in kept.notes
    ), kept.notes
    assert not any("outside GPU work" in n for n in kept.notes)


def test_a_parts_one_off_threshold_is_its_share_of_a_millisecond():
    """catches: a mixed part's 1 ms threshold not scaled by the part's share of its step."""
    # A quarter of a step (2.5 of 10 ms): 0.9 ms sync is over half its 1 ms of GPU work and over 0.25 ms.
    part = {"gpu_busy_ms": 1.0, "duration_ms": 2.5, "whole_duration_ms": 10.0, "idle_by_cause": {"sync": 0.9}}
    assert one_off_idle([part], "decode")["steps"] == 1
    assert one_off_idle([{**part, "whole_duration_ms": 2.5}], "decode")["steps"] == 0


def test_steps_mostly_outside_gpu_work_are_noted_with_their_top_cause():
    """catches: the note on steps spending more time outside GPU work than in it missing, given
    for steps that do not, or naming the wrong idle cause."""
    from tracekit.whatif.fit import fit_costs

    slow = _step("prefill", 10.0, 40.0, idle={"host": 20.0, "launch": 10.0}, tokens=1000)
    c = fit_costs([_Run([slow] + _measured()[2:])], None)
    # 30 ms outside GPU work beside 10 ms busy; decode 2.5 ms beside 12 ms: only prefill is noted.
    assert (
        "the measured prefill steps spend 30.0 ms each outside GPU work (10.0 ms busy), mostly GPU idle caused "
        "by host; the plan keeps it (tracekit report names what it is)"
    ) in c.notes, c.notes
    assert not any("measured decode steps spend" in n for n in c.notes)


@pytest.fixture(scope="module")
def qwen3_8b():
    from tracekit.cli.common import load_model_option

    return load_model_option("qwen3-8b", None)


def _one_each(model=None):
    """One prefill of one 1024-token request (40 ms busy of 46 ms) and one decode step of 8
    requests at 1000 tokens of context each (12 ms busy of 15 ms)."""
    return _Run(
        [
            _step("prefill", 40.0, 46.0, tokens=1024, batch=1),
            _step("decode", 12.0, 15.0, tokens=8, batch=8, decode={"requests": 8, "kv_tokens": 8000}),
        ],
        model=model,
    )


def test_fit_with_a_model_reproduces_the_measured_steps_and_sizes_the_kv_cache(qwen3_8b):
    """catches: the model fit not reproducing a measured step at its own tokens and batch, the KV
    cache's bytes per token not those of the model (or its FP8 cache, or per replica over TP), or
    the memory not the replica's."""
    from tracekit.whatif.fit import fit_costs

    c = fit_costs([_one_each({"tp": 1, "kv_cache_dtype": "bf16"})], qwen3_8b, memory_gb=192.0)
    # At the measured step's own tokens the fit is overhead + busy: 6 + 40 ms, and 3 + 12 ms.
    assert c.prefill_s(1024) == pytest.approx(0.046, rel=1e-9)
    assert c.decode_s(8, 1000) == pytest.approx(0.015, rel=1e-9)
    # Longer prompts and larger batches cost more.
    assert c.prefill_s(4096) > c.prefill_s(1024) and c.decode_s(64, 1000) > c.decode_s(8, 1000)
    # Qwen3-8B (its config.json): 36 layers x 8 KV heads x (128 + 128) K and V dims x 2 bytes (bf16).
    assert c.kv_bytes_per_token == 36 * 8 * 256 * 2
    assert c.weights_bytes == pytest.approx(8.19e9 * 2, rel=2e-3)  # 8.19 B parameters in bf16
    assert c.memory_bytes == 192e9 and c.tp == 1
    assert c.basis["prefill_busy_over_roofline"] > 0 and c.basis["decode_busy_over_roofline"] > 0
    # An FP8 KV cache holds a byte a value; over TP 2 a replica holds both ranks' halves, and the
    # memory of both GPUs.
    f8 = fit_costs([_one_each({"tp": 2, "kv_cache_dtype": "fp8_e4m3"})], qwen3_8b, memory_gb=192.0)
    assert f8.kv_bytes_per_token == 36 * 8 * 256 * 1 and f8.tp == 2 and f8.memory_bytes == 2 * 192e9
    assert f8.weights_bytes == pytest.approx(8.19e9 * 2, rel=2e-3)
    given = fit_costs([_one_each({"tp": 1, "kv_cache_dtype": "fp8"})], qwen3_8b, kv_bytes=4.0)
    assert given.kv_bytes_per_token == 36 * 8 * 256 * 4


def test_a_decode_step_without_kv_tokens_takes_its_context_from_the_workload(qwen3_8b):
    """catches: the mean context of a decode step that does not state its KV tokens not taken as
    the workload's prompt + half its new tokens (or the batch alone when that is unknown too)."""
    from tracekit.whatif.fit import fit_costs

    steps = [_step("prefill", 40.0, 46.0, tokens=1024, batch=1), _step("decode", 12.0, 15.0, tokens=8, batch=8)]
    work = {"workload": {"prompt_len": 2000, "new_tokens": 200}}
    c = fit_costs([_Run(steps, model={"tp": 1}, workload=work)], qwen3_8b)
    # 8 requests at 2000 + 200 / 2 = 2100 tokens of context: the measured 15 ms there, more at 4000.
    assert c.decode_s(8, 2100) == pytest.approx(0.015, rel=1e-9)
    assert c.decode_s(8, 4000) > c.decode_s(8, 2100)
    bare = fit_costs([_Run(steps, model={"tp": 1})], qwen3_8b)
    # Nothing says the context: one token of KV cache a request.
    assert bare.decode_s(8, 1) == pytest.approx(0.015, rel=1e-9)


def test_the_why_names_what_the_other_option_needs():
    """catches: the recommendation's sentence misnaming the other option's size or its failure,
    or a split deployment's prefill + decode GPUs."""
    # Rate 2 (D): one colocated replica meets (TTFT 119 ms, TPOT 1/59 s); disaggregated 1 + 1 meets
    # too (TPOT 0.01 / 0.79) but on two GPUs.
    p = plan(_costs(), D, Slo(1.0, 0.03), max_gpus=4)
    assert p.why == (
        "Colocated on 1 GPU meets both SLOs (TTFT 119 ms, TPOT 16.9 ms) with the fewest GPUs; "
        "disaggregated needs 2 (prefill and decode each need their own replicas)."
    )
    # Prefill 0.2 s a 1000-token prompt, decode 20 ms + 0.2 ms a request, 4 req/s, within 2 GPUs:
    # colocated on 2: rho 0.4, TPOT t = (0.02 + 0.04 t) / 0.6 = 35.7 ms (over 30 ms); disaggregated 1 + 1:
    # TTFT 0.2 + 0.8 x 0.2 / 0.4 = 600 ms, TPOT 0.02 / 0.92 = 21.7 ms.
    c = PhaseCosts(lambda n: 2e-4 * n, lambda b, ctx: 0.02 + 2e-4 * b, device="test GPU")
    q = plan(c, Demand(4.0, 1000, 100), Slo(1.0, 0.03), max_gpus=2)
    assert q.recommended == "disaggregated"
    assert q.why == (
        "Disaggregated on 2 GPUs (1 prefill + 1 decode) meets both SLOs (TTFT 600 ms, TPOT 21.7 ms) "
        "with the fewest GPUs; colocated does not meet them within --max-gpus 2 (TPOT 35.7 ms is over "
        "the SLO of 30.0 ms)."
    )
    assert q.missing == []


def test_the_closest_split_counts_phases_over_capacity_then_the_worst_slo_ratio():
    """catches: the shortfall not counting a decode over capacity as a phase short, or the
    TTFT/TPOT ratios against their SLOs mis-computed, so a farther split is shown."""
    # 12 req/s (see above). Within 4 GPUs: 2 + 2 has both phases (TTFT 175 ms, TPOT 27 ms over 20 ms);
    # 3 + 1 has decode over capacity: one phase short, so 2 + 2 is the nearer.
    p = plan(_costs(), Demand(12.0, 1000, 100), Slo(1.0, 0.02), max_gpus=4)
    assert p.recommended is None
    assert (p.options[1].prefill_replicas, p.options[1].decode_replicas) == (2, 2)
    # Within 3 GPUs both splits are one phase short: 1 + 2 at TPOT 27.03 ms, 2 + 1 at TTFT 175 ms.
    # Against 100 ms / 20 ms SLOs: 1.75 against 1.35, 1 + 2 nearer; against 100 ms / 10 ms: 1.75
    # against 2.70, 2 + 1 nearer.
    a = plan(_costs(), Demand(12.0, 1000, 100), Slo(0.1, 0.02), max_gpus=3).options[1]
    assert (a.prefill_replicas, a.decode_replicas) == (1, 2)
    b = plan(_costs(), Demand(12.0, 1000, 100), Slo(0.1, 0.01), max_gpus=3).options[1]
    assert (b.prefill_replicas, b.decode_replicas) == (2, 1)


def test_the_why_counts_a_split_in_gpus_over_tensor_parallel_replicas():
    """catches: the recommendation's "N prefill + M decode" counting replicas, not replicas x TP."""
    # The disaggregated case above at TP 2 within 4 GPUs: one prefill and one decode replica.
    c = PhaseCosts(lambda n: 2e-4 * n, lambda b, ctx: 0.02 + 2e-4 * b, device="test GPU", tp=2)
    q = plan(c, Demand(4.0, 1000, 100), Slo(1.0, 0.03), max_gpus=4)
    assert q.why.startswith("Disaggregated on 4 GPUs (2 prefill + 2 decode) meets both SLOs"), q.why


# --- seed 34 -------------------------------------------------------------------------------------


def test_the_closest_split_counts_both_phases_over_capacity_as_two_short():
    """catches: the phases short counted with `|` for `+` (True | True is 1, not 2), so a split
    with both phases over capacity ties one with one phase over and wins on its empty SLO ratio.
    At 19.5 requests/s within 3 GPUs (the costs above): 1 + 2 has prefill over capacity (19.5/s
    against one replica's 1 / 0.1 s = 10/s) and decode too (9.75/s a replica: k = 975 requests per
    second of TPOT, and 1.05e-3 x 975 = 1.02 > 1, so the step outgrows the time); 2 + 1 has prefill
    within capacity (rho = 0.975) and only decode over. 2 + 1 is the nearer."""
    p = plan(_costs(), Demand(19.5, 1000, 100), Slo(1.0, 0.02), max_gpus=3)
    assert p.recommended is None
    closest = p.options[1]
    assert (closest.prefill_replicas, closest.decode_replicas) == (2, 1)
    assert closest.ttft_s == pytest.approx(0.1 + 0.975 * 0.1 / (2 * 0.025), rel=1e-9) and closest.tpot_s is None


def test_a_decode_replica_near_its_capacity_reaches_its_steady_state():
    """catches: the fixed point's tolerance made absolute (`1e-9 // t` is 0, leaving 1e-12 s), so
    near capacity the iteration runs out before it converges and the replica is called over
    capacity. At 9.1429 requests/s a replica (k = 914.29, so 1.05e-3 k = 0.96) the TPOT solves
    t = 0.01 + 0.96 t: t = 0.01 / 0.04 = 250 ms, and the batch is k t = 228.6. The iteration's error
    shrinks 0.96x a step: about 430 steps to a relative 1e-9, 564 to an absolute 1e-12 s."""
    rate = 0.96 / 1.05e-3 / 100
    o = evaluate("disaggregated", _costs(), Demand(rate, 1000, 100), Slo(10.0, 1.0), 1, 1, None)
    assert o.tpot_s == pytest.approx(0.25, rel=1e-6)
    assert o.batch == pytest.approx(rate * 100 * 0.25, rel=1e-6)
    assert o.meets_slo
