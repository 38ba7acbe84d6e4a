"""Every field an engine states in its step annotation drives the analysis (issue 46, items 1,
4 and 6): SGLang's roofline fields (``c_``/``g_`` sums folded into ``step[...]``), the bounds
that any batch's sums obey, ATOM's ``prefill[...]``/``decode[...]`` labels, and the sentence
that names the option a richer trace needs.

The shared traces are rewritten the way each engine writes its labels today: their ``step[...]``
range renamed, and the vLLM-style ``execute_...`` range the older SGLang build wrote beside it
renamed to a name that states nothing, so that only the rewritten label speaks for the step.
Expected figures are hand arithmetic from the model's config (tracekit/models/registry.json,
Qwen3-8B: 36 layers, 32 query and 8 KV heads of 128, bf16)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import read_real

from tracekit import frameworks
from tracekit.analysis import analyze
from tracekit.analysis.analyze import measure
from tracekit.analysis.steps.segment import segment
from tracekit.frameworks import BatchSide
from tracekit.models import load_model

QWEN3_8B = load_model("qwen3-8b")
BF16 = 2  # bytes per KV element: the model's dtype, and no kernel name of these traces says FP8 KV


def _relabelled(key: str, step_label: str):
    """The shared trace with its step range renamed ``step_label``; the ``execute_...`` range
    beside it (SGLang's first roofline build) renamed to a name that states no step."""
    trace = read_real(key)
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    s = pd.Series(names)
    step = s.str.startswith("step[").to_numpy()
    assert step.any()
    names[step] = step_label
    names[s.str.startswith("execute_").to_numpy()] = "engine_range"
    ann["name"] = pd.Categorical(names)
    return dataclasses.replace(trace, annotations=ann)


def _attention(key: str, label: str) -> tuple[float, float]:
    """(FLOPs, bytes) the model gives the step's attention kernels."""
    parts, _ = measure(_relabelled(key, label), model=QWEN3_8B, costs="model")
    w = parts.work
    att = (w["component"].astype(str) == "attention").to_numpy()
    assert att.any()
    return float(np.nansum(w["flops"].to_numpy()[att])), float(np.nansum(w["bytes"].to_numpy()[att]))


# --- SGLang's roofline fields -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, phase, prefill, decode, tokens, batch",
    [
        # The examples: the first roofline build (no c_sq/g_sq in a one-mode step) ...
        (
            "step[EXTEND bs=1 toks=1025 c_sqsq=1050625 c_sqsk=1050625 c_sk=1025]",
            "prefill",
            BatchSide(1, 1025, 1025, 1050625, 1050625),
            None,
            1025,
            1,
        ),
        (
            "step[DECODE bs=64 g_sqsq=64 g_sqsk=100032 g_sk=100032]",
            "decode",
            None,
            BatchSide(64, 64, 100032, 64, 100032),
            64,
            64,
        ),
        (
            "step[MIXED bs=66 c=2 g=64 c_sq=2048 c_sk=2048 c_sqsq=2097152 c_sqsk=2097152 g_sq=64 g_sk=65600 "
            "g_sqsq=64 g_sqsk=65600]",
            "mixed",
            BatchSide(2, 2048, 2048, 2097152, 2097152),
            BatchSide(64, 64, 65600, 64, 65600),
            2112,
            66,
        ),
        # ... and SGLang's own test strings (the unit tests of sgl-project/sglang#24911, build_step_span_name
        # with detailed annotations on): a prefix of 2 and 6 cached tokens, and speculative decoding's 4
        # query tokens per request.
        (
            "step[EXTEND bs=2 toks=12 c_sq=12 c_sqsq=80 c_sqsk=120 c_sk=20]",
            "prefill",
            BatchSide(2, 12, 20, 80, 120),
            None,
            12,
            2,
        ),
        ("step[DECODE bs=2 g_sq=2 g_sqsq=2 g_sqsk=30 g_sk=30]", "decode", None, BatchSide(2, 2, 30, 2, 30), 2, 2),
        (
            "step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]",
            "mixed",
            BatchSide(1, 5, 8, 25, 40),
            BatchSide(1, 1, 12, 1, 12),
            6,
            2,
        ),
        ("step[DECODE bs=2 g_sq=8 g_sqsq=32 g_sqsk=120 g_sk=30]", "decode", None, BatchSide(2, 8, 30, 32, 120), 8, 2),
        # A MIXED step whose generation group is empty is a prefill.
        (
            "step[MIXED bs=1 c=1 g=0 c_sq=3 c_sk=3 c_sqsq=9 c_sqsk=9 g_sq=0 g_sk=0 g_sqsq=0 g_sqsk=0]",
            "prefill",
            BatchSide(1, 3, 3, 9, 9),
            BatchSide(0, 0, 0, 0, 0),
            3,
            1,
        ),
    ],
)
def test_sglang_roofline_fields_are_the_steps_sides(name, phase, prefill, decode, tokens, batch):
    """Bug caught: tracekit read only ``bs`` and ``toks`` of a ``step[...]`` name, so SGLang's
    stated keys and sums never reached the pricing, and a MIXED step stayed one unsplit phase."""
    a = frameworks.parse_annotation(name)
    assert a.source == frameworks.SOURCE_SGLANG and a.problem is None
    assert (a.phase, a.prefill, a.decode, a.tokens, a.batch) == (phase, prefill, decode, tokens, batch)


@pytest.mark.parametrize(
    "name, problem",
    [
        ("step[EXTEND bs=2 toks=12 c_sq=11 c_sqsq=80 c_sqsk=120 c_sk=20]", "c_sq=11"),
        ("step[DECODE bs=2 g_sqsq=3 g_sqsk=30 g_sk=30]", "sum_q2"),  # two one-token queries: Σq² is 2
        ("step[MIXED bs=5 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]", "bs=5"),
    ],
)
def test_sglang_fields_that_contradict_are_noted_and_not_trusted(name, problem):
    """Bug caught: fields read without the checks vLLM's detailed form gets (they were not read
    at all before): a group's sums that contradict its own counts or the base label."""
    a = frameworks.parse_annotation(name)
    assert a.problem is not None and problem in a.problem
    side = a.prefill if a.prefill is not None and a.prefill.requests else a.decode
    if "sum_q2" in problem or "c_sq" in problem:
        assert side.sum_q2 is None


def test_a_stated_decode_g_sk_moves_the_kv_bytes_by_its_tokens():
    """The SGLang Qwen3-8B decode step (32 requests) as current SGLang writes it. Its KV read is
    the stated keys times 2 (K and V) x 36 layers x 8 KV heads x 128 x 2 bytes = 147,456 bytes a
    key: halving g_sk from the 32,785 keys the trace's own annotation stated moves the attention
    bytes by 16,385 of them. Bug caught: g_sk was ignored, the keys unknown, and both labels got
    the same capped upper bound."""
    per_key = 2 * QWEN3_8B.n_layers * QWEN3_8B.kv_heads * QWEN3_8B.head_dim * BF16
    assert per_key == 147456
    _, full = _attention("mi300x_decode", "step[DECODE bs=32 g_sqsq=32 g_sqsk=32785 g_sk=32785]")
    _, half = _attention("mi300x_decode", "step[DECODE bs=32 g_sq=32 g_sqsq=32 g_sqsk=16400 g_sk=16400]")
    assert full - half == pytest.approx((32785 - 16400) * per_key, rel=0.05)
    # A decode step's attention reads every key once: the KV read is most of its bytes.
    assert full == pytest.approx(32785 * per_key, rel=0.05)


def test_a_stated_cached_prefix_moves_attention_flops_by_the_causal_arithmetic():
    """The SGLang Qwen3-8B extend step (15 requests of 1,024 new tokens) over a cached prefix of
    1,024 tokens each: Σq = 15,360, Σq² = 15 x 1024², Σk = 30,720, Σqk = 15 x 1024 x 2048. Causal
    pairs = Σqk - (Σq² - Σq)/2; FLOPs = 4 x 32 heads x 128 x pairs x 36 layers. Bug caught:
    c_sqsk and c_sk were ignored, so a prefix added no attention work."""
    q, q2 = 15360, 15 * 1024 * 1024

    def pairs(qk: int) -> float:
        return qk - (q2 - q) / 2

    per_pair = 4 * QWEN3_8B.heads * QWEN3_8B.head_dim * QWEN3_8B.n_layers
    no_prefix, _ = _attention("mi300x_extend", f"step[EXTEND bs=15 toks={q} c_sqsq={q2} c_sqsk={q2} c_sk={q}]")
    prefix, _ = _attention(
        "mi300x_extend", f"step[EXTEND bs=15 toks={q} c_sq={q} c_sqsq={q2} c_sqsk={15 * 1024 * 2048} c_sk=30720]"
    )
    assert no_prefix == pytest.approx(per_pair * pairs(q2), rel=0.05)
    assert prefix - no_prefix == pytest.approx(per_pair * (pairs(15 * 1024 * 2048) - pairs(q2)), rel=0.05)


def test_a_sglang_mixed_step_with_its_groups_is_split_between_the_phases():
    """The extend step rewritten as a MIXED step: 15 context requests (14 of 1,024 tokens and one
    of 992, 15,328 in all, the step's KV writes still 15,360) beside 32 decode requests of 1,025
    keys. Bug caught: a MIXED step's c=/g= groups were not read, so the step stayed one unsplit
    ``mixed`` phase and the phase table gave its time to neither prefill nor decode."""
    c_q2 = 14 * 1024**2 + 992**2
    label = (
        f"step[MIXED bs=47 c=15 g=32 c_sq=15328 c_sk=15328 c_sqsq={c_q2} c_sqsk={c_q2} "
        "g_sq=32 g_sk=32800 g_sqsq=32 g_sqsk=32800]"
    )
    d = analyze(_relabelled("mi300x_extend", label)).to_dict()
    [step] = d["steps"]
    split = step["split"]
    assert (split["prefill"]["requests"], split["prefill"]["tokens"], split["prefill"]["kv_tokens"]) == (
        15,
        15328,
        15328,
    )
    assert (split["decode"]["requests"], split["decode"]["tokens"], split["decode"]["kv_tokens"]) == (32, 32, 32800)
    assert split["prefill"]["gpu_ms"] + split["decode"]["gpu_ms"] == pytest.approx(step["gpu_busy_ms"])
    phases = d["phases"]
    assert phases["prefill"]["mixed_steps"] == 1 and phases["decode"]["mixed_steps"] == 1
    assert phases["prefill"]["gpu_busy_ms"] > 0 and phases["decode"]["gpu_busy_ms"] > 0
    assert phases["prefill"]["gpu_busy_ms"] + phases["decode"]["gpu_busy_ms"] == pytest.approx(step["gpu_busy_ms"])


# --- bounds every batch's sums obey (base.consistent, vLLM and SGLang alike) --------------------


@pytest.mark.parametrize(
    "at_bound, beyond, dropped",
    [
        # Two requests, 8 new tokens: the most uneven split is 7 + 1, Σq² <= 7² + 1² = 50.
        (
            "execute_context_2(sq8sk30sqsq50sqsk130)_generation_0(0)",
            "execute_context_2(sq8sk30sqsq52sqsk130)_generation_0(0)",
            "sum_q2",
        ),
        # Four decode requests, one token each: Σq² is 4, whatever the keys.
        (
            "execute_context_0(0)_generation_4(sq4sk40sqsq4sqsk40)",
            "execute_context_0(0)_generation_4(sq4sk40sqsq6sqsk40)",
            "sum_q2",
        ),
        # Σqk <= (Σq - n + 1)(Σk - n + 1) + n - 1 = 7 x 29 + 1 = 204 (one request holds all but one
        # token and key of each): 230 is under the old bound Σq·Σk = 240 but no batch reaches it.
        (
            "execute_context_2(sq8sk30sqsq34sqsk204)_generation_0(0)",
            "execute_context_2(sq8sk30sqsq34sqsk230)_generation_0(0)",
            "sum_qk",
        ),
        # Σqk >= Σk (every request has a query): requests of 4 and 4 tokens over 40 keys score
        # 4 x 40 = 160; 36 is above their Σq² (32) yet below their keys.
        (
            "execute_context_2(sq8sk40sqsq32sqsk160)_generation_0(0)",
            "execute_context_2(sq8sk40sqsq32sqsk36)_generation_0(0)",
            "sum_qk",
        ),
    ],
)
def test_sums_beyond_the_tight_bounds_are_dropped(at_bound, beyond, dropped):
    """Bug caught: the check accepted a Σq² up to (Σq)² and a Σqk up to Σq·Σk, bounds no batch of
    n requests (each at least one token) reaches, a decode side's Σq² other than its tokens, and
    a Σqk below its keys. Sums at each bound (a batch that has them) stay."""
    for name, bad in ((at_bound, None), (beyond, dropped)):
        a = frameworks.parse_annotation(name)
        side = a.prefill if a.prefill.requests else a.decode
        if bad is None:
            assert a.problem is None and side.sum_q2 is not None and side.sum_qk is not None
        else:
            assert getattr(side, bad) is None and "contradict" in a.problem and bad in a.problem


# --- ATOM ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, phase, prefill, decode, tokens, batch",
    [
        # ATOM pull request #477's examples (ATOM_ENABLE_DETAILED_ANNOTATION=1).
        (
            "prefill[bs=1 tok=1024 ctx=1024 sqsq=1048576 sqsk=1048576 sk=1024]",
            "prefill",
            BatchSide(1, 1024, 1024, 1048576, 1048576),
            None,
            1024,
            1,
        ),
        (
            "decode[bs=64 tok=64 d=64 sqsq=64 sqsk=65600 sk=65600]",
            "decode",
            None,
            BatchSide(64, 64, 65600, 64, 65600),
            64,
            64,
        ),
        # Native labels (atom/model_engine/run_labels.py): a graph padded above the real batch ...
        ("decode[bs=117/128 tok=117 d=117]", "decode", None, BatchSide(117, 117), 117, 117),
        # ... two prefills with no cached prefix (their context lengths add up to the tokens) ...
        (
            "prefill[bs=2 tok=14721 ctx=[7803, 6918]]",
            "prefill",
            BatchSide(2, 14721, 14721, 7803**2 + 6918**2, 7803**2 + 6918**2),
            None,
            14721,
            2,
        ),
        # ... a context list cut past five requests ...
        ("prefill[bs=6 tok=17408 ctx=[4096, 4096, 4096]...+3]", "prefill", BatchSide(6, 17408), None, 17408, 6),
        # ... speculative decoding, 3 draft tokens: 4 query tokens per request ...
        (
            "decode[bs=32 tok=128 d=32 spec=3 sqsq=512 sqsk=262144 sk=65536]",
            "decode",
            None,
            BatchSide(32, 128, 65536, 512, 262144),
            128,
            32,
        ),
        # ... and prefill requests replayed beside decode ones, two-batch overlap on.
        ("decode[bs=128 tok=384 p=2 d=126 tbo=1]", "mixed", BatchSide(2, 258), BatchSide(126, 126), 384, 128),
    ],
)
def test_atom_step_labels(name, phase, prefill, decode, tokens, batch):
    """Bug caught: ATOM's labels were read by no grammar (the user-range grammar took ``decode``
    from the name and no counts), so its stated batch, tokens and sums were lost."""
    a = frameworks.parse_annotation(name)
    assert a.source == frameworks.SOURCE_ATOM and a.problem is None
    assert (a.phase, a.prefill, a.decode, a.tokens, a.batch) == (phase, prefill, decode, tokens, batch)


@pytest.mark.parametrize(
    "name",
    ["dummy_decode[bs=4 tok=4 d=4]", "dummy_prefill[bs=1 tok=16 ctx=16]", "dummy_eager_decode[bs=2 tok=2 ctx=[3, 4]]"],
)
def test_atom_dummy_forwards_are_not_steps(name):
    """Bug caught: the user-range grammar read ATOM's data-parallel dummies and warmup as
    prefill or decode steps."""
    assert frameworks.parse_annotation(name) is None


def test_an_unread_atom_label_is_named():
    """Bug caught: an ATOM-shaped label of a kind no grammar reads went unmentioned."""
    assert "ATOM" in frameworks.unread_step_name("verify[bs=4 tok=16]")
    assert frameworks.unread_step_name("decode[bs=4 tok=4 d=4]") is None


def test_a_shared_trace_with_atom_labels_is_analysed_end_to_end():
    """The SGLang Qwen3-8B decode step relabelled as ATOM writes it with detailed annotation:
    ATOM's source, the decode phase, its batch and keys, and the KV read of the stated keys
    (32,785 x 147,456 bytes). Bug caught: no ATOM grammar, so the step came from a user range
    without counts and its keys were unknown."""
    trace = _relabelled("mi300x_decode", "decode[bs=32 tok=32 d=32 sqsq=32 sqsk=32785 sk=32785]")
    seg = segment(trace)
    assert seg.source == frameworks.SOURCE_ATOM
    [step] = seg.steps.itertuples()
    assert (step.phase, step.tokens, step.batch, step.kv_tokens) == ("decode", 32, 32, 32785)
    _, nbytes = _attention("mi300x_decode", "decode[bs=32 tok=32 d=32 sqsq=32 sqsk=32785 sk=32785]")
    assert nbytes == pytest.approx(32785 * 2 * 36 * 8 * 128 * BF16, rel=0.05)
    prefill = segment(_relabelled("mi300x_extend", "prefill[bs=15 tok=15360 ctx=[1024, 1024, 1024]...+12]"))
    assert (prefill.source, prefill.steps["phase"].tolist(), prefill.steps["tokens"].tolist()) == (
        frameworks.SOURCE_ATOM,
        ["prefill"],
        [15360],
    )


# --- the option a richer trace needs ------------------------------------------------------------


@pytest.mark.parametrize(
    "source, names, says",
    [
        (frameworks.SOURCE_SGLANG, ["step[DECODE bs=32]", "step[EXTEND bs=15 toks=15360]"], "roofline_annotations"),
        (frameworks.SOURCE_SGLANG, ["step[MIXED bs=4]"], "roofline_annotations"),
        (frameworks.SOURCE_SGLANG, ["step[DECODE bs=2 g_sq=2 g_sqsq=2 g_sqsk=30 g_sk=30]"], None),
        (frameworks.SOURCE_VLLM, ["execute_new_1_cached_3"], "detailed_trace_annotation"),
        (frameworks.SOURCE_VLLM, ["execute_context_1(888_788544)_generation_0(0)"], "detailed_trace_annotation"),
        (
            frameworks.SOURCE_VLLM,
            ["execute_16_context_0(sq0sk0sqsq0sqsk0)_generation_16(sq16sk8193sqsq16sqsk8193)"],
            None,
        ),
        (frameworks.SOURCE_ATOM, ["decode[bs=64 tok=64 d=64]"], "ATOM_ENABLE_DETAILED_ANNOTATION=1"),
        (frameworks.SOURCE_ATOM, ["decode[bs=64 tok=64 d=64 sqsq=64 sqsk=65600 sk=65600]"], None),
        # A native prefill whose context lengths imply every sum needs nothing more.
        (frameworks.SOURCE_ATOM, ["prefill[bs=2 tok=14721 ctx=[7803, 6918]]"], None),
        (frameworks.SOURCE_MARKERS, ["tracekit::decode bs=8"], None),
    ],
)
def test_richer_trace_hint_names_the_engines_option(source, names, says):
    """Bug caught: nothing told a user whose steps lack the attention sums which engine option
    records them (there was no such sentence to surface)."""
    hint = frameworks.richer_trace_hint(source, names)
    if says is None:
        assert hint is None
    else:
        assert says in hint and "estimated" in hint
