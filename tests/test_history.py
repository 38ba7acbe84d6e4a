"""KV tokens from the run's history (issue 45, item 2): a default vLLM trace states each step's
requests but not their keys; the trace holds the prefills that admitted the requests and every
step since, so each decode step's keys are those requests' prompts plus the tokens decoded since."""

from __future__ import annotations

import pytest
from conftest import read_real

from tracekit.analysis.analyze import analyze
from tracekit.analysis.steps import history
from tracekit.analysis.steps.segment import segment
from tracekit.cli.common import load_model_option


def test_decode_steps_take_their_requests_context_from_the_history():
    """Bug: the shared RTX 3090 vLLM trace's decode steps left ``kv_tokens`` unknown although it
    holds the prefills of all four requests (steps 0 and 1) and every token decoded since, so
    attention was priced at keys no context reaches and capped at the roof. By hand, from the
    trace's own counts: step 0 admits 2 requests with p0 prompt tokens; step 1 decodes those 2
    (p0 + 2 keys) and admits 2 more with p1; step n >= 2 decodes all 4: p0 + 2 + p1 + 4(n - 1)
    keys; step 16 runs 2 of the 4, which the trace does not name: half the 80 keys written by
    step 15, plus their 2 new tokens, at a lower confidence."""
    s = segment(read_real("rtx3090_vllm")).steps
    p0, p1 = int(s.at[0, "tokens"]), s.at[1, "prefill_side"].tokens
    assert (s.at[0, "batch"], s.at[1, "prefill_side"].requests, s.at[1, "decode_side"].requests) == (2, 2, 2)
    assert s.at[1, "decode_side"].kv_tokens == p0 + 2
    for n in range(2, 16):
        assert s.at[n, "kv_tokens"] == p0 + 2 + p1 + 4 * (n - 1), n
        assert s.at[n, "decode_side"].kv_tokens == s.at[n, "kv_tokens"]
        assert s.at[n, "kv_tokens_confidence"] == 1.0 and s.at[n, "kv_tokens_source"].startswith(history.HISTORY_SOURCE)
    written = p0 + 2 + p1 + 4 * 14  # by step 15
    assert s.at[16, "batch"] == 2 and s.at[16, "kv_tokens"] == written * 2 / 4 + 2
    assert s.at[16, "kv_tokens_confidence"] == history.SHRUNK_CONFIDENCE
    assert "which requests finished" in s.at[16, "kv_tokens_source"]


def test_decode_attention_follows_the_kv_arithmetic():
    """Bug: with the keys unknown, decode attention's bytes were capped at the roof and its FLOPs
    derived from the capped bytes. With the history's keys K, one layer of a decode step of T
    tokens does 4*Hq*d*K FLOPs and reads the KV (2*Hkv*d*K elements, bf16) plus its queries and
    outputs (2*T*Hq*d elements)."""
    model = load_model_option("gpt-oss-20b", None)
    a = analyze(read_real("rtx3090_vllm"), model=model)
    w = a.work
    hq, hkv, d, layers = model.heads, model.kv_heads, model.head_dim, len(model.layers)
    for n in (5, 16):
        k = a.steps.at[n, "kv_tokens"]
        t = a.steps.at[n, "tokens"]
        att = w[(w["step"] == n) & (w["category"] == "attention")]
        assert att["flops"].sum() == pytest.approx(4 * hq * d * k * layers, rel=1e-9)
        assert att["bytes"].sum() == pytest.approx((2 * hkv * d * k + 2 * t * hq * d) * 2 * layers, rel=1e-9)
    assert "keys each request attends to are not in the trace" not in (a.model.get("estimates") or {}).get(
        "attention", ""
    )


def test_capped_attention_derives_no_flops():
    """Bug: where nothing describes a decode step's keys (the shared MI300X SGLang decode trace with
    its annotations stripped, as a default profile of a run begun before the trace), attention was
    priced at more keys than any context holds and capped at the bandwidth roof, and its FLOPs were
    cut by the same factor: FLOPs derived from a capped figure (issue 45: 27.8 GFLOP a step where
    the KV arithmetic gives 0.69). The bytes stay a labelled upper bound; the FLOPs are unknown."""
    import dataclasses

    t = read_real("mi300x_decode")
    a = analyze(dataclasses.replace(t, annotations=t.annotations.iloc[0:0]), model="qwen3-8b")
    capped = a.work[(a.work["model_check"] == "capped").to_numpy()]
    assert len(capped) and set(capped["component"].astype(str)) == {"attention"}
    assert set(capped["estimate"].astype(str)) == {"upper"} and capped["bytes"].notna().all()
    assert capped["flops"].isna().all()
    assert "its FLOPs are not known" in set(capped["cost_reason"].astype(str)).pop()
