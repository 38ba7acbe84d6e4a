"""Engine conventions in tracekit/frameworks that earlier tests let drift (mutation survivors):
what a causal prefill's attention pairs are, a prefill marker's default keys, and which launch
grids of vLLM/SGLang kernels count a step's tokens.

Expected figures come from the formats: causal attention scores q*k - q(q-1)/2 query-key pairs
per request; a prefill with no cache attends its own tokens (kv = tokens); vLLM's
``reshape_and_cache*`` and rotary kernels and SGLang's ``store_kvcache`` launch a 1-D grid of
one block per token; vLLM copies T int32 input ids (4T bytes) and T int64 positions (8T bytes)
host to device each step.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import read_real

from tracekit import frameworks
from tracekit.analysis.steps import segment as seg
from tracekit.analysis.steps import step_tokens as st
from tracekit.frameworks import BatchSide

VLLM_FRAMES = "vLLM execute_model frames"
SGLANG_FRAMES = "SGLang forward_batch_generation frames"
ROTARY = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, int, int)"
STORE_KV = "store_kvcache"
HTOD = "Memcpy HtoD (Pinned -> Device)"


def one_step(rows: list[tuple[str, str, tuple[int, int, int], int]]) -> pd.DataFrame:
    """A kernel table of one step: (kind, name, grid, bytes) per row, as the reader lays it out."""
    return pd.DataFrame(
        {
            "name": pd.Categorical([r[1] for r in rows]),
            "kind": [r[0] for r in rows],
            "start_ns": np.arange(len(rows), dtype=np.int64) * 1000,
            "grid_x": [r[2][0] for r in rows],
            "grid_y": [r[2][1] for r in rows],
            "grid_z": [r[2][2] for r in rows],
            "bytes": [r[3] for r in rows],
        }
    )


def counts(rows, source=VLLM_FRAMES) -> st.StepCounts:
    kernels = one_step(rows)
    [c] = st.step_counts(kernels, np.zeros(len(kernels), dtype=np.int64), 1, [source])
    return c


# --- base.BatchSide.attention_pairs -----------------------------------------------------------


def test_a_prefill_side_with_keys_but_no_square_sums_has_unknown_attention_pairs():
    """catches: a prefill side (more tokens than requests) with kv stated but no sum of q^2 priced
    as kv_tokens pairs, the decode rule (one query per request), undercounting its attention.

    3 requests of 10 new tokens over 30 keys: each request scores q_i*k_i - q_i(q_i-1)/2 >= k_i
    pairs, with equality only for q_i = 1; here some q_i >= 2, so the pairs exceed 30, and how
    much depends on the split, which the annotation does not state."""
    # A tracekit prefill marker of uneven prompts (10 tokens do not split evenly over 3).
    m = frameworks.parse_annotation("tracekit::prefill bs=3 tokens=10 kv=30")
    assert m.prefill.sum_q2 is None and m.prefill.kv_tokens == 30
    assert m.prefill.attention_pairs() is None
    # vLLM's detailed form without sqsq/sqsk: the same unknown.
    v = frameworks.parse_annotation("execute_10_context_3(sq10sk30)_generation_0(sq0sk0)")
    assert v.prefill == BatchSide(3, 10, 30) and v.prefill.attention_pairs() is None
    # (Two splits of that side: q=(4,3,3), k=(12,9,9) scores 42+24+24 = 90 pairs;
    # q=(8,1,1), k=(10,10,10) scores 52+10+10 = 72: not 30, and not one figure.)
    # The decode rule stays: one query per request scores one pair per key.
    assert BatchSide(requests=4, tokens=4, kv_tokens=4100).attention_pairs() == 4100.0


# --- markers: a prefill marker's default keys -----------------------------------------------


def test_a_prefill_marker_without_kv_attends_its_own_tokens():
    """catches: a tracekit::prefill marker with no kv= losing its default kv_tokens = tokens (a
    prefill with no cache attends exactly the tokens it computes), so the model-based attention
    cost had no keys, and sum_qk (q*k with k = q) went missing with it."""
    a = frameworks.parse_annotation("tracekit::prefill bs=2 tokens=64")
    assert a.phase == "prefill"
    # Two prompts of 32 tokens: keys 2 * 32 = 64; sum q*k = 2 * 32 * 32.
    assert a.prefill.kv_tokens == 64
    assert a.prefill.sum_qk == 2 * 32 * 32
    # A decode marker gets no invented keys: its cache length is not its token count.
    d = frameworks.parse_annotation("tracekit::decode#1 bs=2")
    assert d.decode.tokens == 2 and d.decode.kv_tokens is None


# --- SGLang store_kvcache: a 1-D grid only --------------------------------------------------


def test_sglang_store_kvcache_counts_tokens_only_from_a_one_dimensional_grid():
    """catches: an SGLang store_kvcache launch with grid y > 1 read as one block per token
    (grid x = tokens), outvoting the step's input copies with a figure that is not its tokens.

    The convention is a 1-D grid (x = tokens, y = z = 1); a (100, 8, 1) launch splits its work
    otherwise, so the step's tokens come from its 40-token input copies (160 and 320 bytes)."""
    assert frameworks.kv_write_tokens(STORE_KV, (100, 1, 1)) == (100, "SGLang")
    assert frameworks.kv_write_tokens(STORE_KV, (100, 8, 1)) is None
    c = counts(
        [
            ("kernel", STORE_KV, (100, 8, 1), 0),
            ("memcpy", HTOD, (0, 0, 0), 4 * 40),
            ("memcpy", HTOD, (0, 0, 0), 8 * 40),
        ],
        SGLANG_FRAMES,
    )
    assert c.tokens.value == 40 and "input-id/position copies" in c.tokens.source
    assert "store_kvcache" not in (c.tokens.note or "")
    # The 1-D launch does count, and outweighs the copies (weight 3 against 2).
    c = counts(
        [
            ("kernel", STORE_KV, (100, 1, 1), 0),
            ("memcpy", HTOD, (0, 0, 0), 4 * 40),
            ("memcpy", HTOD, (0, 0, 0), 8 * 40),
        ],
        SGLANG_FRAMES,
    )
    assert c.tokens.value == 100 and "store_kvcache grid x = 100" in c.tokens.source


# --- vLLM input-id / position copies --------------------------------------------------------


def test_vllm_input_copies_of_an_odd_token_count_give_its_tokens():
    """catches: the 4-byte alignment test of the input-id copy done as a bit test (s & 4), which
    drops every T with 4T not a multiple of 8 (any odd T) and admits copies of 2 bytes.

    37 tokens: int32 ids 4 * 37 = 148 bytes, int64 positions 8 * 37 = 296 bytes."""
    assert frameworks.input_copy_tokens([148, 296]) == [37]
    assert frameworks.input_copy_tokens([20, 40, 12, 24]) == [3, 5]  # two candidate pairs
    assert frameworks.input_copy_tokens([2, 4]) == []  # 2 bytes is no int32 array
    c = counts([("memcpy", HTOD, (0, 0, 0), 148), ("memcpy", HTOD, (0, 0, 0), 296)])
    assert c.tokens.value == 37 and "148 and 296 bytes" in c.tokens.source


# --- vLLM KV-cache writes and rotary embedding ----------------------------------------------


def test_vllm_kv_write_with_an_empty_grid_counts_no_tokens():
    """catches: a reshape_and_cache launch with grid x = 0 (no blocks: nothing written, or a
    grid the trace lost) read as a step of 0 tokens instead of no count."""
    name = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
    assert frameworks.kv_write_tokens(name, (12, 1, 1)) == (12, "vLLM")
    assert frameworks.kv_write_tokens(name, (0, 1, 1)) is None
    assert frameworks.kv_write_tokens("void vllm::concat_and_cache_mla_kernel<float>", (0, 1, 1)) is None


def test_vllm_rotary_embedding_counts_one_block_per_token():
    """catches: vLLM's rotary embedding grid (T, 1, 1), one block per token, not read, so a
    step whose only token evidence is that kernel kept no tokens; and a 3-D launch read as one."""
    assert frameworks.per_token_kernel(ROTARY, (37, 1, 1)) == (37, "vLLM")
    assert frameworks.per_token_kernel(ROTARY, (37, 1, 2)) is None
    c = counts([("kernel", ROTARY, (37, 1, 1), 0)])
    assert c.tokens.value == 37 and "per-token kernel" in c.tokens.source
    c = counts([("kernel", ROTARY, (37, 1, 2), 0)])
    assert c.tokens.value is None and c.tokens.source == st.NO_TOKENS


# --- base.BatchSide: empty sides and merging two annotations -------------------------------


def test_a_side_with_no_requests_or_no_tokens_scores_no_attention_pairs():
    """catches: an empty side (no requests, or no new tokens) scoring anything but 0 query-key
    pairs: a count of pairs is never negative, and an empty batch computes no attention."""
    assert BatchSide(requests=0, tokens=0).attention_pairs() == 0.0
    assert BatchSide(requests=3, tokens=0, kv_tokens=300).attention_pairs() == 0.0
    assert BatchSide(requests=0).attention_pairs() == 0.0
    # vLLM's execute_new_0_cached_3: no new requests, so the prefill side is empty.
    a = frameworks.parse_annotation("execute_new_0_cached_3")
    assert a.phase == "decode" and a.prefill.attention_pairs() == 0.0


def test_merging_two_annotations_of_a_step_keeps_this_sides_own_counts():
    """catches: merged() overwriting the counts this side states with the other annotation's,
    instead of only filling the ones it lacks (a nested range's stated tokens replaced by the
    outer range's)."""
    mine = BatchSide(requests=2, tokens=10)
    other = BatchSide(requests=3, tokens=12, kv_tokens=40)
    # requests and tokens stated here stay; kv_tokens, absent here, comes from the other.
    assert mine.merged(other) == BatchSide(requests=2, tokens=10, kv_tokens=40)
    # Nothing stated on the other side: nothing changes, and no field is blanked.
    assert mine.merged(BatchSide()) == mine
    assert BatchSide().merged(other) == other


# --- vLLM execute_new_N_cached_M: the prefill side's tokens ---------------------------------


def test_vllm_new_cached_step_with_one_new_request_gets_its_prefill_tokens_from_the_step():
    """catches: execute_new_1_cached_M read as a prefill side of 0 tokens (it states no token
    count, and a new request prefills at least one), so the step's tokens never fill it in and
    its prefill is priced as no work; and execute_new_0_cached_M's empty side not stated as 0.

    rtx3090_vllm's mixed step (execute_new_2_cached_2) writes 12 KV-cache entries; renamed to one
    new request beside the 2 running ones, that request prefills 12 - 2 = 10 of them."""
    one = frameworks.parse_annotation("execute_new_1_cached_2")
    assert one.phase == "mixed" and one.prefill.requests == 1 and one.prefill.tokens is None
    assert one.decode == BatchSide(requests=2, tokens=2)
    none = frameworks.parse_annotation("execute_new_0_cached_4")
    assert none.prefill == BatchSide(requests=0, tokens=0) and none.tokens == 4
    trace = read_real("rtx3090_vllm")
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    names[names == "execute_new_2_cached_2"] = "execute_new_1_cached_2"
    ann["name"] = pd.Categorical(names)
    steps = seg.segment(dataclasses.replace(trace, annotations=ann)).steps
    assert steps["label"][1] == "execute_new_1_cached_2" and steps["phase"][1] == "mixed"
    assert steps["tokens"][1] == 12
    assert steps["prefill_side"][1] == BatchSide(requests=1, tokens=10)
    # Its keys come from the run's history (steps.history): step 0's 12 prompt tokens and 2 new ones.
    assert steps["decode_side"][1] == BatchSide(requests=2, tokens=2, kv_tokens=14)


# --- seed 29 (r3fw) -----------------------------------------------------------------------

RESHAPE_CACHE = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>"
PAGED_V1 = (
    "void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128, "
    "(vllm::Fp8KVCacheDataType)0, false>(unsigned short*, unsigned short const*)"
)
PAGED_V2 = (
    "void vllm::paged_attention_v2_kernel<unsigned short, unsigned short, 128, 16, 128, "
    "(vllm::Fp8KVCacheDataType)0, false, 512>(float*, float*, unsigned short*)"
)
PAGED_LL4MI = (
    "void paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0, 16, 128, 256, true, 4>(__hip_bfloat16 const*)"
)


def test_vllm_step_whose_stated_total_is_below_its_parts_is_reported():
    """catches: an execute_<T>_... annotation whose total T is smaller than its parts' tokens
    accepted in silence (only a total above the parts flagged), so a step stating fewer tokens
    than its context and generation counts add up to is priced without a note.

    1 context request of 4 tokens + 2 generation requests of 1 token each = 6 tokens."""
    low = frameworks.parse_annotation("execute_5_context_1(sq4sk4)_generation_2(sq2sk40)")
    assert low.phase == "mixed" and low.tokens == 5  # the stated total is kept
    assert low.problem is not None and "schedules 5 tokens" in low.problem and "add up to 6" in low.problem
    high = frameworks.parse_annotation("execute_7_context_1(sq4sk4)_generation_2(sq2sk40)")
    assert high.problem is not None and "schedules 7 tokens" in high.problem and "add up to 6" in high.problem
    ok = frameworks.parse_annotation("execute_6_context_1(sq4sk4)_generation_2(sq2sk40)")
    assert ok.tokens == 6 and ok.problem is None


def test_vllm_kv_write_counts_tokens_only_from_a_one_dimensional_grid():
    """catches: a vLLM reshape_and_cache launch with grid z > 1 read as one block per token
    (grid x = tokens), outvoting the step's input copies with a figure that is not its tokens.

    reshape_and_cache* launch grid(num_tokens), y = z = 1; a (100, 1, 2) launch is not that,
    so the step's tokens come from its 40-token input copies (160 and 320 bytes)."""
    assert frameworks.kv_write_tokens(RESHAPE_CACHE, (100, 1, 1)) == (100, "vLLM")
    assert frameworks.kv_write_tokens(RESHAPE_CACHE, (100, 1, 2)) is None
    c = counts(
        [
            ("kernel", RESHAPE_CACHE, (100, 1, 2), 0),
            ("memcpy", HTOD, (0, 0, 0), 4 * 40),
            ("memcpy", HTOD, (0, 0, 0), 8 * 40),
        ]
    )
    assert c.tokens.value == 40 and "input-id/position copies" in c.tokens.source


def test_a_step_with_one_decode_request_is_a_decode_step():
    """catches: a generation (decode) side of a single request not counted as holding requests,
    so a batch-1 decode step parsed as an empty step (no step at all) and a chunked-prefill
    step beside one running request read as a pure prefill."""
    one = frameworks.parse_annotation("execute_context_0(0)_generation_1(1)")
    assert one is not None and one.phase == "decode" and (one.tokens, one.batch) == (1, 1)
    new = frameworks.parse_annotation("execute_new_0_cached_1")
    assert new is not None and new.phase == "decode" and new.decode == BatchSide(requests=1, tokens=1)
    # 1 context request of 100 tokens beside 1 generation request: 101 tokens, 2 requests.
    mixed = frameworks.parse_annotation("execute_context_1(100)_generation_1(1)")
    assert mixed.phase == "mixed" and (mixed.tokens, mixed.batch) == (101, 2)
    assert frameworks.parse_annotation("execute_new_1_cached_1").phase == "mixed"
    # No requests on either side: an empty step, not a step.
    assert frameworks.parse_annotation("execute_context_0(0)_generation_0(0)") is None


def test_a_prefill_marker_gets_square_sums_only_when_its_tokens_split_evenly():
    """catches: the even-split test of a tracekit::prefill marker done as a bit test
    (tokens & bs == 0), which gives 3 prompts of 3 tokens no sum of q^2 and invents one for
    5 tokens over 2 prompts (which cannot all have one length).

    bs=3 tokens=9: three prompts of 3, sum q^2 = 3 * 9 = 27; each scores 3*3 - 3*2/2 = 6
    query-key pairs, 18 in all."""
    even = frameworks.parse_annotation("tracekit::prefill bs=3 tokens=9")
    assert even.prefill.sum_q2 == 27 and even.prefill.sum_qk == 27
    assert even.prefill.attention_pairs() == 18.0
    odd = frameworks.parse_annotation("tracekit::prefill bs=2 tokens=5")
    assert odd.prefill.sum_q2 is None and odd.prefill.sum_qk is None
    assert odd.prefill.attention_pairs() is None


def test_vllm_paged_attention_v1_v2_sequences_are_grid_y():
    """catches: the sequences of a paged_attention_v1/v2 launch read off another axis than y:
    vLLM launches them grid(num_heads, num_seqs[, partitions]), so x is the heads.

    32 heads, 4 sequences, 3 partitions: 4 sequences, i.e. 4 requests in the step."""
    assert frameworks.decode_attention_sequences(PAGED_V1, (32, 4, 1)) == 4
    assert frameworks.decode_attention_sequences(PAGED_V2, (32, 4, 3)) == 4
    c = counts([("kernel", PAGED_V2, (32, 4, 3), 0)])
    assert c.requests.value == 4 and "4 sequences" in c.requests.source


def test_rocm_paged_attention_ll4mi_sequences_are_grid_x():
    """catches: the sequences of a ROCm paged_attention_ll4mi launch read off another axis than
    x: vLLM launches it grid(num_seqs, max_num_partitions, num_kv_heads).

    4 sequences, 3 partitions, 8 KV heads: 4 sequences, i.e. 4 requests in the step."""
    assert frameworks.decode_attention_sequences(PAGED_LL4MI, (4, 3, 8)) == 4
    c = counts([("kernel", PAGED_LL4MI, (4, 3, 8), 0)])
    assert c.requests.value == 4 and "4 sequences" in c.requests.source


def test_sglang_extend_annotation_states_the_prefill_side():
    """catches: SGLang's step[EXTEND bs=.. toks=..] giving no prefill side, so a step the engine
    described as 15 requests of 15360 tokens carried no batch side into the steps table (and the
    report's per-step prefill counts) when no vLLM-style annotation wraps it.

    mi300x_sglang's extend step, with its execute_... wrapper renamed away: only the SGLang
    annotation is left, and it says bs=15 toks=15360."""
    a = frameworks.parse_annotation("step[EXTEND bs=15 toks=15360]")
    assert a.phase == "prefill" and a.prefill == BatchSide(requests=15, tokens=15360) and a.decode is None
    assert frameworks.parse_annotation("step[PREFILL bs=2 toks=64]").prefill == BatchSide(requests=2, tokens=64)
    trace = read_real("mi300x_extend")
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    wrapper = np.char.startswith(names.astype(str), "execute_")
    assert wrapper.any()
    names[wrapper] = "not_a_step"
    ann["name"] = pd.Categorical(names)
    steps = seg.segment(dataclasses.replace(trace, annotations=ann)).steps
    assert list(steps["label"]) == ["step[EXTEND bs=15 toks=15360]"]
    assert steps["source"][0] == seg.SOURCE_SGLANG
    assert steps["prefill_side"][0] == BatchSide(requests=15, tokens=15360)


# --- seed 30 (r5s) ---------------------------------------------------------------------------------


def test_store_kvcache_with_an_empty_grid_counts_no_tokens():
    """catches: an SGLang store_kvcache launch with grid x = 0 (no blocks: no launch the format
    can carry, e.g. a hand-built kernel table) read as a KV write of 0 tokens, a vote for a
    0-token step, instead of no evidence. One block per token: x = 100 is 100 tokens."""
    assert frameworks.kv_write_tokens(STORE_KV, (100, 1, 1)) == (100, "SGLang")
    assert frameworks.kv_write_tokens(STORE_KV, (0, 1, 1)) is None


def test_sglang_per_request_kernel_with_an_empty_z_axis_counts_no_requests():
    """catches: an SGLang one-program-per-request kernel (alloc_decode_kernel, grid (bs, 1, 1))
    counted as bs requests when its grid's z axis is 0 (no programs at all), so a step of a
    hand-built kernel table got 4 requests from a launch that ran nothing."""
    assert frameworks.per_request_kernel("alloc_decode_kernel", (4, 1, 0)) is None
    c = counts([("kernel", "alloc_decode_kernel", (4, 1, 0), 0)], SGLANG_FRAMES)
    assert c.requests.value is None
    # The 1-D grid it really launches: 4 programs, 4 requests.
    assert counts([("kernel", "alloc_decode_kernel", (4, 1, 1), 0)], SGLANG_FRAMES).requests.value == 4


# --- seed 32 ---------------------------------------------------------------------------------------


def test_vllm_rotary_embedding_of_a_one_token_step_counts_one_token():
    """catches: a rotary embedding launch of one block (grid (1, 1, 1)) read as no evidence
    (`x > 1` for `x > 0`), so a decode step of one request - one new token - whose only token
    evidence is that kernel kept no tokens. One block per token: x = 1 is 1 token."""
    assert frameworks.per_token_kernel(ROTARY, (1, 1, 1)) == (1, "vLLM")
    c = counts([("kernel", ROTARY, (1, 1, 1), 0)])
    assert c.tokens.value == 1 and "per-token kernel" in c.tokens.source


# --- seed 33 ---------------------------------------------------------------------------------------


def test_malformed_new_cached_annotation_quotes_its_first_120_characters():
    """catches: the execute_new_N_cached_M problem quoting 121 characters of a long malformed name
    instead of the 120 every other step-annotation problem quotes (vLLM's detailed form, SGLang,
    unread step names), so the same long name was cut at two places in one report."""
    name = "execute_new_" + "x" * 200
    got = frameworks.parse_annotation(name)
    # 12 characters of "execute_new_" + 108 x's = the first 120 characters, quoted by repr
    assert got.problem == "vLLM step annotation 'execute_new_" + "x" * 108 + "' does not follow execute_new_N_cached_M"


# --- seed 34 ---------------------------------------------------------------------------------------


def test_tracekit_prefill_marker_without_tokens_states_no_tokens():
    """catches: a ``tracekit::prefill bs=2`` marker (no tokens=) given tokens = 2, one per request,
    as only a decode step may be (`m.phase is not DECODE` for `==`): a prefill of two requests can
    be of any length, and two tokens would price it as a decode-sized batch. A decode marker
    without tokens= computes one per request: 8 requests, 8 tokens."""
    p = frameworks.parse_annotation("tracekit::prefill bs=2")
    assert p.phase == "prefill" and p.prefill.requests == 2 and p.prefill.tokens is None and p.tokens is None
    d = frameworks.parse_annotation("tracekit::decode#3 bs=8")
    assert d.decode.tokens == 8 and d.tokens == 8


def test_tracekit_prefill_marker_stating_keys_equal_to_tokens_keeps_sum_qk():
    """catches: keys compared with tokens by identity (`kv is tokens` for `==`): 1,024 stated twice
    is two int objects, so a prefill marker with tokens=1024 kv=1024 lost its sum of q·k. Two
    requests of 512 with no cached prefix: Σq² = Σqk = 2 * 512² = 524,288, and causal attention
    scores 2 * 512 * 513 / 2 = 262,656 pairs."""
    a = frameworks.parse_annotation("tracekit::prefill bs=2 tokens=1024 kv=1024")
    assert a.prefill.sum_q2 == 524_288 and a.prefill.sum_qk == 524_288
    assert a.prefill.attention_pairs() == 2 * 512 * 513 / 2


# --- seed 35 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(128, 2, 1), (128, 1, 2)])
def test_a_rotary_launch_covers_one_token_a_block_only_on_a_one_dimensional_grid(grid):
    """catches: the grid's y or z extent allowed above 1 (`>=` for `==`): vLLM's rotary kernel
    runs one block per token on an (x, 1, 1) grid, and a grid of more than one row or layer is not
    that layout, so its x extent is not a token count."""
    from tracekit.frameworks.vllm import per_token_kernel

    name = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, ...)"
    assert per_token_kernel(name, (128, 1, 1)) == 128
    assert per_token_kernel(name, grid) is None
