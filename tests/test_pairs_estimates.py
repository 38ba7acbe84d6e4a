"""Attention of a side whose annotation does not state the sum of q² (issue 46): estimated at
requests of one length, the same way in the mixed split and in the model's pricing, and labelled.

Causal attention over request i's q_i new tokens and k_i keys scores q_i·k_i - q_i(q_i - 1)/2
query-key pairs, so a side scores Σqk - (Σq² - Σq)/2. Requests of one length have Σq² = (Σq)²/n,
its least value (Cauchy-Schwarz), and, over equal contexts, Σqk = Σq·Σk/n. Expected figures are
hand arithmetic; Qwen3-8B's attention does 4 x 32 heads x 128 x 36 layers = 589,824 FLOPs a pair
(tracekit/models/registry.json)."""

from __future__ import annotations

import numpy as np
import pytest
from test_grid_over_stated import relabelled

from tracekit import read_trace
from tracekit.analysis.analyze import measure
from tracekit.analysis.pricing import model_costs, taxonomy
from tracekit.frameworks import BatchSide
from tracekit.models import load_model

QWEN3_8B = load_model("qwen3-8b")
PER_PAIR = 4 * QWEN3_8B.heads * QWEN3_8B.head_dim * QWEN3_8B.n_layers
NEW_CACHED = "/work/shared/traces/rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz"


def test_a_vllm_new_cached_mixed_steps_attention_is_split_by_estimated_pairs():
    """The vLLM ``execute_new_2_cached_2`` step of the shared RTX 3090 trace: 2 new requests of 10
    tokens in all (the step's 12 counted tokens less its 2 decode tokens) beside 2 running requests
    of 14 keys (the run's history). At one length, the new requests score 2 x 5·6/2 = 30 pairs and
    the decode requests 14 (one per key): attention's prefill share is 30/44, the rest of the work's
    10/12 by tokens, and the split's basis says the pairs are an estimate. Bug caught: a side with
    no Σq² split attention by tokens (10/12), as though a prefill token cost what a decode token does."""
    parts, _ = measure(read_trace(NEW_CACHED))
    steps = parts.seg.steps
    [i] = np.flatnonzero((steps["phase"] == "mixed").to_numpy()).tolist()
    assert steps.at[i, "prefill_side"] == BatchSide(requests=2, tokens=10)
    assert steps.at[i, "decode_side"] == BatchSide(requests=2, tokens=2, kv_tokens=14)
    w = parts.work
    mine = (w["step"] == i).to_numpy()
    attention = mine & (w["category"].astype(str) == taxonomy.ATTENTION).to_numpy()
    assert attention.any()
    np.testing.assert_allclose(w["prefill_share"].to_numpy()[attention], 30 / 44)
    np.testing.assert_allclose(w["prefill_share"].to_numpy()[mine & ~attention], 10 / 12)
    assert "estimate" in parts.split.by_step[i]["basis"] and "(Σq)²/n" in parts.split.by_step[i]["basis"]


@pytest.mark.parametrize(
    "side, prefill, pairs",
    [
        # No keys stated: a prefill of no cached prefix, ((Σq)²/n + Σq)/2 = (100/2 + 10)/2.
        (BatchSide(requests=2, tokens=10), True, 30.0),
        # Keys stated, no sums: 15 requests of 1,024 tokens over 2,048 keys each score
        # 1024·2048 - 1024·1023/2 = 1,573,376 pairs: 23,600,640 in all.
        (BatchSide(requests=15, tokens=15360, kv_tokens=30720), True, 23600640.0),
        # Keys and Σqk stated: Σqk - ((Σq)²/n - Σq)/2 = 40 - (18 - 6)/2 = 34.
        (BatchSide(requests=2, tokens=6, kv_tokens=12, sum_qk=40), True, 34.0),
        # A decode side of 4 requests verifying 4 tokens each over 40 keys each: 160 x 16/4 - (64 - 16)/2.
        (BatchSide(requests=4, tokens=16, kv_tokens=160), False, 616.0),
        # A decode side without keys: its context is unknown; stated pairs need no estimate.
        (BatchSide(requests=4, tokens=16), False, None),
        (BatchSide(requests=2, tokens=12, kv_tokens=20, sum_q2=80, sum_qk=120), True, None),
    ],
)
def test_estimated_pairs_hand_arithmetic(side, prefill, pairs):
    """Bug caught: no estimate existed for a side that states its keys but not Σq² (the model
    left its attention unpriced) or for either side of a mixed split."""
    assert model_costs.estimated_pairs(side, prefill) == pairs


def _attention_flops(label: str):
    parts, _ = measure(relabelled("mi300x_extend", label), model=QWEN3_8B, costs="model")
    w = parts.work
    att = (w["component"].astype(str) == "attention").to_numpy()
    assert att.any()
    return float(np.nansum(w["flops"].to_numpy()[att])), parts.model_view


def test_a_side_with_keys_but_no_square_sums_gets_the_equal_length_estimate_labelled():
    """The SGLang extend step (15 requests, 15,360 tokens) labelled with its keys (30,720: a cached
    prefix of 1,024 a request) and no Σq²: its attention is priced at requests of one length,
    23,600,640 pairs x 589,824 FLOPs, exactly what the same step stating the sums of 15 requests of
    1,024 tokens over 2,048 keys gets (Σq² = 15 x 1024², Σqk = 15 x 1024 x 2048), and the model
    view's estimates say how. Bug caught: a side that stated its keys but not Σq² got no attention
    cost at all (the model said the keys were missing)."""
    estimated, view = _attention_flops("step[EXTEND bs=15 toks=15360 c_sk=30720]")
    stated, _ = _attention_flops(
        f"step[EXTEND bs=15 toks=15360 c_sq=15360 c_sqsq={15 * 1024**2} c_sqsk={15 * 1024 * 2048} c_sk=30720]"
    )
    assert estimated == pytest.approx(PER_PAIR * 23600640, rel=1e-9)
    assert estimated == pytest.approx(stated, rel=1e-9)
    assert model_costs.PAIRS_ESTIMATE_BASIS in view["estimates"]["attention"]
