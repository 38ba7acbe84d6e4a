"""SGLang's speculative-decoding forward modes in ``step[...]`` names.

``ForwardMode`` (sgl-project/sglang ``python/sglang/srt/model_executor/forward_batch_info.py``):
TARGET_VERIFY "verify a batch in the target model", DRAFT_EXTEND / DRAFT_EXTEND_V2 "extend a
batch in the draft model", SPLIT_PREFILL "split prefill for PD multiplexing", PREBUILT (a
disaggregated decode worker's batch whose KV cache arrived: no forward runs) and, in older
builds, DUMMY_FIRST (a dummy batch that starts the overlap scheduler's pipeline).
``build_step_span_name`` writes ``step[<mode.name> bs=N``; the detailed suffix writes TARGET_VERIFY's
sums as ``g_`` fields of ``num_tokens_per_req`` query tokens a request (``_decode_query_width``)
and DRAFT_EXTEND_V2's as extend-shaped ``c_`` fields."""

from __future__ import annotations

import numpy as np
import pytest
from test_grid_over_stated import relabelled

from tracekit import frameworks
from tracekit.analysis.analyze import measure
from tracekit.analysis.steps.segment import segment
from tracekit.frameworks import BatchSide
from tracekit.models import load_model

QWEN3_8B = load_model("qwen3-8b")
PER_PAIR = 4 * QWEN3_8B.heads * QWEN3_8B.head_dim * QWEN3_8B.n_layers


@pytest.mark.parametrize(
    "name, phase, decode, prefill, tokens, batch",
    [
        # 2 requests verifying 4 draft tokens each over 15 keys each: Σq = 8, Σq² = 2 x 16, Σqk = 2 x 4 x 15.
        (
            "step[TARGET_VERIFY bs=2 g_sq=8 g_sqsq=32 g_sqsk=120 g_sk=30]",
            "decode",
            BatchSide(2, 8, 30, 32, 120),
            None,
            8,
            2,
        ),
        ("step[TARGET_VERIFY bs=4 toks=16]", "decode", BatchSide(4, 16), None, 16, 4),
        # Without a count, the tokens are open: several a request, not one.
        ("step[TARGET_VERIFY bs=4]", "decode", BatchSide(4), None, None, 4),
        # The draft model over the accepted tokens: extend-shaped c_ fields, requests already decoding.
        (
            "step[DRAFT_EXTEND_V2 bs=2 c_sq=8 c_sqsq=32 c_sqsk=120 c_sk=30]",
            "decode",
            BatchSide(2, 8, 30, 32, 120),
            None,
            8,
            2,
        ),
        ("step[DRAFT_EXTEND bs=3]", "decode", BatchSide(3), None, None, 3),
        ("step[SPLIT_PREFILL bs=3 toks=96]", "prefill", None, BatchSide(3, 96), 96, 3),
    ],
)
def test_speculative_forward_modes_are_read(name, phase, decode, prefill, tokens, batch):
    """Bug caught: these modes were read as a malformed annotation (phase unknown, counts lost)."""
    a = frameworks.parse_annotation(name)
    assert a.source == frameworks.SOURCE_SGLANG and a.problem is None
    assert (a.phase, a.decode, a.prefill, a.tokens, a.batch) == (phase, decode, prefill, tokens, batch)


def test_modes_that_run_no_forward_are_not_steps_and_unknown_modes_are_still_noted():
    """PREBUILT and DUMMY_FIRST run no forward: like IDLE, not steps. A mode SGLang does not have
    stays a malformed annotation, with its note. Bug caught: PREBUILT and DUMMY_FIRST were read as
    malformed steps."""
    for name in ("step[PREBUILT bs=8]", "step[DUMMY_FIRST bs=0]", "step[IDLE bs=0]"):
        assert frameworks.parse_annotation(name) is None
    a = frameworks.parse_annotation("step[SIDEWAYS bs=2]")
    assert a.phase == "unknown" and "SIDEWAYS" in a.problem


def test_a_verify_step_without_a_count_takes_the_grids_tokens_not_one_a_request():
    """The extend step relabelled ``step[TARGET_VERIFY bs=15]``: a decode-phase step of 15
    requests whose tokens its label leaves open; its eager store_kvcache grid counts 15,360, and
    the decode side takes them. Relabelled on the decode step (no grid recorded), the tokens stay
    unknown rather than one a request. Bug caught: the label was malformed, the step's phase came
    from the evidence alone, and it had no decode side."""
    [step] = segment(relabelled("mi300x_extend", "step[TARGET_VERIFY bs=15]")).steps.to_dict("records")
    assert (step["phase"], step["batch"], step["tokens"]) == ("decode", 15, 15360)
    assert "store_kvcache" in step["tokens_source"]
    assert step["decode_side"] == BatchSide(requests=15, tokens=15360)
    [step] = segment(relabelled("mi300x_decode", "step[TARGET_VERIFY bs=32]")).steps.to_dict("records")
    assert (step["phase"], step["batch"]) == ("decode", 32) and np.isnan(step["tokens"])


def test_a_verify_steps_attention_is_priced_from_its_g_fields():
    """The decode step relabelled as 32 requests verifying 4 draft tokens each over 1,028 keys
    each: Σq = 128, Σq² = 32 x 16 = 512, Σk = 32,896, Σqk = 4 x 32,896 = 131,584, so 131,584 -
    (512 - 128)/2 = 131,392 query-key pairs x 589,824 FLOPs each. Bug caught: the label was
    malformed, so the step had no tokens and the model priced none of its attention."""
    label = "step[TARGET_VERIFY bs=32 g_sq=128 g_sqsq=512 g_sqsk=131584 g_sk=32896]"
    parts, _ = measure(relabelled("mi300x_decode", label), model=QWEN3_8B, costs="model")
    w = parts.work
    att = (w["component"].astype(str) == "attention").to_numpy()
    assert att.any()
    assert float(np.nansum(w["flops"].to_numpy()[att])) == pytest.approx(PER_PAIR * 131392, rel=1e-9)
