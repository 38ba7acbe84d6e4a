"""Tokens, batch and phase of engine steps from a default trace's own evidence (issue 24, items
1 and 2): the shared serving traces with their annotations stripped must come out as their
annotations state, and figures the evidence cannot tell are None with the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import read_real

from tracekit import frameworks
from tracekit.analysis.steps import evidence
from tracekit.analysis.steps import segment as seg
from tracekit.analysis.steps.table import ANNOTATION_SOURCE


def strip_annotations(trace, python: bool = False):
    """The trace as a default engine profile would hold it: no step (batch) annotations, and
    with ``python`` no Python stacks either."""
    out = dataclasses.replace(trace, annotations=trace.annotations.iloc[0:0])
    return dataclasses.replace(out, python=trace.python.iloc[0:0]) if python else out


def one_after_another(*traces):
    """One timeline holding each trace's events after the previous one's (links shifted)."""
    tables = {name: [] for name in ("kernels", "runtime", "cpu_ops", "annotations", "python")}
    shift, offsets = 0, {"runtime": 0, "cpu_ops": 0}
    for i, t in enumerate(traces):
        if i:
            shift += int(traces[i - 1].end_ns - t.start_ns) + 1_000_000
        for name in tables:
            table = getattr(t, name).copy()
            for col in ("start_ns", "end_ns"):
                table[col] = table[col] + shift
            for col, target in (("launch", "runtime"), ("op", "cpu_ops")):
                if col in table:
                    table[col] = np.where(table[col] >= 0, table[col] + offsets[target], -1)
            if "name" in table:
                table["name"] = table["name"].astype(str)
            tables[name].append(table)
        for target in offsets:
            offsets[target] += len(getattr(t, target))
    merged = {n: pd.concat(parts, ignore_index=True) for n, parts in tables.items()}
    for table in merged.values():
        if "name" in table:
            table["name"] = table["name"].astype("category")
    return dataclasses.replace(traces[0], **merged)


# --- vLLM's newer step annotation -------------------------------------------------------


def test_vllm_execute_new_cached_steps_hold_prefill_and_a_batch():
    """Bug: execute_new_N_cached_M ignored, the execute_model frames taken, all 17 steps called
    decode with no batch."""
    s = seg.segment(read_real("rtx3090_vllm"))
    steps = s.steps
    assert s.source == seg.SOURCE_VLLM
    assert len(steps) == 17  # the 18th range, execute_new_0_cached_0, computes nothing
    assert list(steps["label"][:2]) == ["execute_new_2_cached_0", "execute_new_2_cached_2"]
    assert list(steps["phase"]) == ["prefill", "mixed"] + ["decode"] * 15
    assert list(steps["batch"]) == [2, 4] + [4] * 14 + [2]
    # The annotation states no tokens: the KV-cache writes count them (12 in each admitting step).
    assert list(steps["tokens"][:2]) == [12, 12]
    assert "reshape_and_cache" in steps["tokens_source"][0]
    assert steps["tokens_source"][2] == ANNOTATION_SOURCE
    # The mixed step: 2 running requests decode 2 tokens, the 2 new ones prefill the other 10.
    assert steps["prefill_side"][1].tokens == 10 and steps["decode_side"][1].tokens == 2


def test_a_step_like_name_no_grammar_reads_is_named_in_a_note():
    """Bug: an annotation of an unknown grammar was dropped in silence."""
    trace = read_real("rtx3090_vllm")
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    names[names == "execute_new_0_cached_2"] = "execute_7_scheduled_3_waiting"
    ann["name"] = pd.Categorical(names)
    s = seg.segment(dataclasses.replace(trace, annotations=ann))
    assert any("'execute_7_scheduled_3_waiting'" in n and "no grammar" in n for n in s.notes)
    assert frameworks.unread_step_name("execute_model") is None


# --- stripped shared traces: the annotations' figures from the evidence -------------------


def test_stripped_gb10_is_ten_decode_steps_of_batch_4():
    """Bug: without annotations the batch of the decode steps was not found ("not in the trace")."""
    s = seg.segment(strip_annotations(read_real("gb10_vllm")))
    assert list(s.steps["phase"]) == ["decode"] * 10
    assert list(s.steps["tokens"]) == [4] * 10 and list(s.steps["batch"]) == [4] * 10
    assert s.steps["tokens_source"].str.contains("KV-cache writes").all()


def test_stripped_b200_is_one_prefill_of_888_tokens_of_one_request():
    """Bug: tokens of a default trace's prefill step missing; or its batch unknown although the
    LM head's recorded input is one row (the trace ends before the sampler: the logits rows are
    the only count of its requests). The annotation states 1 context request of 888 tokens."""
    s = seg.segment(strip_annotations(read_real("b200_vllm")))
    [step] = s.steps.to_dict("records")
    assert step["phase"] == "prefill" and step["tokens"] == 888
    assert "KV-cache writes (vllm::reshape_and_cache_flash_kernel" in step["tokens_source"]
    assert "grid x = 888, one block per token" in step["tokens_source"]
    assert "3,552 and 7,104 bytes" in step["tokens_source"]  # the input ids and positions agree
    assert step["batch"] == 1 and "logits rows" in step["batch_source"] and "aten::mm" in step["batch_source"]


def test_logits_rows_count_requests_only_when_fewer_than_the_tokens():
    """Bug: a forward that computes every token's logits (M = tokens) read as that many requests,
    or the rows read from the wrong Input Dims entry of addmm (its bias comes first)."""
    from tracekit.analysis.steps import step_tokens as st

    kernels = pd.DataFrame(
        {
            "name": pd.Categorical(
                ["ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", "void vllm::reshape_and_cache_kernel<x>(...)"]
            ),
            "kind": ["kernel", "kernel"],
            "start_ns": [10, 5],
            "grid_x": [4, 6],
            "grid_y": [1, 1],
            "grid_z": [1, 1],
            "op": [0, -1],
        }
    )
    step_of = np.array([0, 0])
    for op, dims, rows in (
        ("aten::mm", [[2, 64], [64, 1000]], 2),
        ("aten::addmm", [[1000], [3, 64], [64, 1000]], 3),
        ("aten::linear", [[1, 2, 64], [1000, 64]], 2),
    ):
        ops = pd.DataFrame({"name": [op]})
        got = st.last_gemm_rows(kernels, step_of, ops, lambda _o, d=dims: (d, None))
        assert got == {0: (rows, op)}
        [c] = st.step_counts(kernels, step_of, 1, ["vLLM execute_model frames"], logits_rows=got)
        assert c.tokens.value == 6 and c.requests.value == rows  # KV writes: 6 tokens; rows < 6
    [c] = st.step_counts(kernels, step_of, 1, ["vLLM execute_model frames"], logits_rows={0: (6, "aten::mm")})
    assert c.requests.value is None  # every token's logits: no count of requests


def test_stripped_mi300x_extend_is_a_prefill_of_15360_tokens():
    """Bug: SGLang's store_kvcache grid not read: the extend step's tokens unknown."""
    s = seg.segment(strip_annotations(read_real("mi300x_extend")))
    [step] = s.steps.to_dict("records")
    assert step["phase"] == "prefill" and step["tokens"] == 15360
    assert "store_kvcache" in step["tokens_source"]


def test_stripped_mi300x_extend_batch_is_its_15_requests():
    """Bug: SGLang's one-program-per-request kernel (create_flashinfer_kv_indices_triton, grid
    (bs,)) and the sampler's argmax (one output per request) not read: the extend step's batch,
    which its annotation states as 15, came out unknown."""
    s = seg.segment(strip_annotations(read_real("mi300x_extend")))
    [step] = s.steps.to_dict("records")
    assert step["batch"] == 15  # step[EXTEND bs=15 ...]
    assert "create_flashinfer_kv_indices_triton grid x = 15" in step["batch_source"]
    assert "sampler argmax rows" in step["batch_source"]


def test_stripped_mi300x_qwen3_moe_decode_counts_its_16_requests():
    """Bug: a graph-replayed ROCm decode step with no sampled-token readback (only DtoD copies)
    kept no count of its requests, so its tokens and batch (16/16 in the annotation) were
    unknown and --model priced 0.5% of its kernel time."""
    s = seg.segment(strip_annotations(read_real("mi300x_qwen3_moe")))
    [step] = s.steps.to_dict("records")
    assert step["phase"] == "decode" and step["batch"] == 16 and step["tokens"] == 16
    assert "per-request kernel" in step["batch_source"] and "argmax" in step["batch_source"]


def test_sampler_and_per_request_rules_read_only_their_kernels():
    """Bug: the argmax / per-request rules read a grid axis that is not the request count (a
    2-D launch of the per-request kernel, a name that merely contains the word)."""
    argmax = (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
        "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
        "long, 4, 4>)"
    )
    assert frameworks.sampler_rows(argmax, (16, 19, 1)) == (16, "argmax")  # grid y splits the vocabulary
    assert frameworks.sampler_rows(argmax.replace("ArgMaxOps", "SumOps"), (16, 1, 1)) is None
    assert frameworks.per_request_kernel("create_flashinfer_kv_indices_triton", (15, 1, 1)) == (15, "SGLang")
    assert frameworks.per_request_kernel("create_flashinfer_kv_indices_triton", (15, 2, 1)) is None
    assert frameworks.per_request_kernel("my_create_flashinfer_kv_indices_triton_v2", (15, 1, 1)) is None


def test_stripped_rtx3090_admitting_steps_have_prefill_work_and_their_batch():
    """Bug: vLLM V1 samples after the execute_model range, so the sampler's per-request softmax and
    argmax were not counted for the step; the two admitting steps (execute_new_2_cached_0,
    execute_new_2_cached_2) then had no batch (the int64/int32 readback readings tie) and no phase;
    or the second step called prefill although two of its four requests ran in the step before
    (the annotation: 2 new + 2 cached, mixed)."""
    s = seg.segment(strip_annotations(read_real("rtx3090_vllm")))
    steps = s.steps
    assert list(steps["batch"][:3]) == [2, 4, 4]  # the annotations: 2 new; 2 new + 2 cached; 4 cached
    assert list(steps["tokens"][:3]) == [12, 12, 4]
    assert steps["phase"][0] == "prefill" and steps["phase"][1] == "mixed"
    assert (steps["phase"][2:] == "decode").all()
    assert "sampler softmax rows" in steps["batch_source"][0]
    pre, dec = steps["prefill_side"][1], steps["decode_side"][1]
    # Hand arithmetic: 2 carried requests decode one token each; the 2 new hold 12 - 2 = 10.
    assert (pre.requests, pre.tokens, dec.requests, dec.tokens) == (2, 10, 2, 2)
    assert "ran in the previous step" in steps["evidence"][1]
    annotated = seg.segment(read_real("rtx3090_vllm")).steps
    assert list(annotated["phase"]) == list(steps["phase"])  # every step as the annotations state


def test_a_new_request_beside_carried_ones_is_mixed_only_in_vllm():
    """Bug: the carried-requests rule applied to SGLang, whose extend batches run apart from its
    running batch (a 1-request extend after a 4-request decode is prefill, not mixed), or to a
    step whose requests all ran before (a chunked prefill continuing)."""
    steps = pd.DataFrame(
        {
            "tid": [1, 1, 1],
            "cpu_start_ns": [0, 10, 20],
            "phase": ["decode", "prefill", "prefill"],
            "tokens": [4.0, 20.0, 30.0],
            "batch": [4.0, 5.0, 5.0],
            "evidence": ["", "", ""],
            "phase_confidence": [np.nan] * 3,
            "prefill_side": [None] * 3,
            "decode_side": [None] * 3,
            "source": [frameworks.SOURCE_VLLM_FRAMES] * 3,
        }
    )
    inferred = np.array([True, True, True])
    vllm = steps.copy()
    seg._carried_requests(vllm, inferred)
    # Step 1: 4 carried + 1 new (16 tokens); step 2: its 5 requests all ran in step 1: prefill.
    assert list(vllm["phase"]) == ["decode", "mixed", "prefill"]
    assert (vllm["prefill_side"][1].requests, vllm["prefill_side"][1].tokens) == (1, 16)
    sglang = steps.assign(source=frameworks.SOURCE_SGLANG_FRAMES)
    seg._carried_requests(sglang, inferred)
    assert list(sglang["phase"]) == ["decode", "prefill", "prefill"]
    stated = steps.copy()
    seg._carried_requests(stated, np.array([False, False, False]))  # annotated phases are not touched
    assert list(stated["phase"]) == ["decode", "prefill", "prefill"]


@pytest.mark.parametrize("key,batch", [("mi300x_decode", 32), ("b300_qwen3_moe", 16)])
def test_stripped_sglang_decode_batch_from_the_sampled_tokens(key, batch):
    """Bug: a graph-replayed decode step's batch not found (the replayed kernels have no shapes)."""
    s = seg.segment(strip_annotations(read_real(key)))
    [step] = s.steps.to_dict("records")
    assert step["phase"] == "decode" and step["batch"] == batch and step["tokens"] == batch
    assert "readback" in step["batch_source"]


def test_eager_prefill_with_a_decode_attention_kernel_among_replayed_decode_steps_is_prefill():
    """Bug (the 70B MI300X trace): the first decode-attention kernel name in an eager prefill
    step made it "decode"."""
    extend = strip_annotations(read_real("mi300x_extend"))
    k = extend.kernels.copy()
    names = k["name"].astype(str).to_numpy().copy()
    # Engines run a paged decode kernel in a prefill step too (the 70B step 0 did).
    attn = np.flatnonzero(pd.Series(names).str.contains("FmhaBatchPrefill").to_numpy())
    names[attn[0]] = "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>"
    k["name"] = pd.Categorical(names)
    extend = dataclasses.replace(extend, kernels=k)
    decode = strip_annotations(read_real("mi300x_decode"))
    s = seg.segment(one_after_another(extend, decode, decode, decode))
    assert list(s.steps["phase"]) == ["prefill", "decode", "decode", "decode"]
    ev = s.steps["evidence"][0]
    assert "decode attention kernel void paged_attention_ll4mi_QKV" in ev and "outweighed" in ev
    assert s.steps["phase_confidence"][0] > 0.5


# --- the vote ------------------------------------------------------------------------------


def test_counted_tokens_outweigh_a_decode_kernel_name():
    """Bug: the first phase flag won: a 1,049-token step of one request called decode."""
    b = evidence.Ballot()
    evidence.count_vote(b, 1049.0, 1.0)
    b.cast(evidence.DECODE, evidence.W_DECODE_NAME, "decode attention kernel paged_attention_ll4mi")
    phase, confidence, text = b.verdict()
    assert phase == "prefill" and confidence == pytest.approx(3 / 4)
    assert "1,049 tokens for 1 requests" in text and "outweighed" in text
    tie = evidence.Ballot()
    tie.cast(evidence.PREFILL, 1.0, "a")
    tie.cast(evidence.DECODE, 1.0, "b")
    assert tie.verdict()[0] == "unknown"


# --- figures the user states ---------------------------------------------------------------


def test_stated_batch_replaces_what_the_evidence_cannot_tell():
    """Bug: no way to state a step's batch when the trace does not hold it."""
    s = seg.segment(strip_annotations(read_real("b200_vllm")), stated={"batch": {"prefill": 1}})
    [step] = s.steps.to_dict("records")
    assert step["batch"] == 1 and step["batch_source"].startswith(seg.STATED_SOURCE)
    assert step["tokens"] == 888  # the evidence's figure stays where nothing was stated


def test_a_bad_stated_figure_is_one_sentence():
    """Bug: a malformed --tokens value gave a traceback or was ignored."""
    from tracekit.cli import main

    result = CliRunner().invoke(main, ["summary", "missing.json", "--tokens", "prefil=12"])
    assert result.exit_code == 2
    assert "is not [PHASE=]N" in result.output and "Traceback" not in result.output


def test_stripped_decode_attention_of_unknown_keys_is_memory_bound_with_an_upper_bound():
    """Bug: a graph-replayed decode step keeps no count of the keys its requests attend to, so
    decode attention (a quarter of mi300x_decode's kernel time) had unknown bound and --model
    priced 74% of it; its intensity does not depend on the keys, so it is memory-bound, with
    bytes an upper bound (capped at the roof) that holds against the annotation's stated keys."""
    from tracekit.analysis import analyze

    trace = read_real("mi300x_decode")
    stripped = analyze(strip_annotations(trace), model="qwen3-8b").work
    stated = analyze(trace, model="qwen3-8b").work
    att = stripped["name"].astype(str).str.contains("paged_attention_ll4mi").to_numpy()
    assert att.any()
    assert (stripped["bound"][att].astype(str) == "memory").all()
    assert (stripped["estimate"][att].astype(str) == "upper").all()
    assert "not in the trace" in str(stripped["bound_reason"][att].iloc[0])
    # An upper bound: at least the bytes the annotated keys (sk=32,785) give.
    assert stripped["bytes"][att].sum() >= stated["bytes"][att].sum()
    ins = (stripped["step"] >= 0).to_numpy()
    known = stripped["bound"].astype(str).isin(["compute", "memory", "interconnect"]).to_numpy()
    dur = stripped["dur_ns"].to_numpy()
    assert dur[known & ins].sum() / dur[ins].sum() >= 0.90


# The shared serving traces and the registry model each ran (PROVENANCE.md).
SERVING_MODELS = [
    ("b200_vllm", "gpt-oss-120b"),
    ("gb10_vllm", "qwen3.5-27b"),
    ("b300_qwen3_moe", "qwen3-30b-a3b"),
    ("mi300x_qwen3_moe", "qwen3-30b-a3b"),
    ("mi300x_decode", "qwen3-8b"),
    ("mi300x_extend", "qwen3-8b"),
    ("rtx3090_vllm", "gpt-oss-20b"),
]


@pytest.mark.parametrize("key,model", SERVING_MODELS)
def test_stripped_serving_trace_reads_as_annotated_and_the_model_alone_prices_it(key, model):
    """Issue 24's Done-when, on every shared serving trace: stripped of its batch annotations,
    its steps, phases, tokens and batch come out as the annotations state, and --model alone
    (no --tp, --weights, --tokens or --batch) gives >= 90% of in-step kernel time a known bound.
    Bugs: any evidence rule lost (a step's tokens or batch None, a mixed step read as prefill),
    or a quantised checkpoint's GEMMs priced by the registry's 16-bit weights (gb10: 15%)."""
    from tracekit.analysis import analyze

    trace = read_real(key)
    annotated = seg.segment(trace).steps
    a = analyze(strip_annotations(trace), model=model)
    got = a.steps
    assert len(got) == len(annotated)
    assert list(got["phase"]) == list(annotated["phase"])
    for col in ("tokens", "batch"):
        assert got[col].tolist() == annotated[col].tolist(), col
    w = a.work
    ins = (w["step"] >= 0).to_numpy()
    known = w["bound"].astype(str).isin(["compute", "memory", "interconnect"]).to_numpy()
    dur = w["dur_ns"].to_numpy()
    assert dur[known & ins].sum() >= 0.90 * dur[ins].sum()
