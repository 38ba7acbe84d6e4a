"""A mixed (chunked-prefill) step's decode side by its marginal cost (issue 45, item 4): what the
decode tokens add to the step (their GEMM rows, attention, KV reads and writes), what they share
(the weight reads the prefill chunk pays anyway), and no bound, MFU or MBU for a decode side that
rides on a step its prefill chunk bounds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from conftest import read_real

from tracekit.analysis import analyze
from tracekit.analysis.analyze import measure
from tracekit.analysis.steps.mixed import PASSENGER_REASON, split_mixed
from tracekit.frameworks import BatchSide

# gpt-oss-120b (tracekit/models/registry.json): hidden 2880, 64 query and 8 KV heads of 64, vocab
# 201,088, 36 layers alternating sliding-window (128) and full attention. At TP 8 a rank holds 8
# query heads and 1 KV head: QKV projects 2880 -> (8 + 2*1) x 64 = 640, o_proj 8 x 64 = 512 -> 2880,
# the LM head 2880 -> 201,088 / 8 = 25,136 columns; weights and activations bf16 (2 bytes).
HIDDEN, QKV_N, O_K, VOCAB_RANK, LAYERS, BF16 = 2880, 640, 512, 201088 // 8, 36, 2
# The B200 trace's one eager prefill step of 888 tokens, annotated as a chunked-prefill step: 851
# prompt tokens of one request over no cached prefix beside 37 decode requests of 1,000 keys each.
CHUNK = "execute_888_context_1(sq851sk851sqsq724201sqsk724201)_generation_37(sq37sk37000sqsq37sqsk37000)"
# A small chunk beside a large decode batch: 16 prompt tokens and 872 decode requests.
SMALL_CHUNK = "execute_888_context_1(sq16sk16sqsq256sqsk256)_generation_872(sq872sk872000sqsq872sqsk872000)"


def _annotated(name: str):
    trace = read_real("b200_vllm")
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    names[pd.Series(names).str.startswith("execute_").to_numpy()] = name  # its CPU and GPU spans
    ann["name"] = pd.Categorical(names)
    return dataclasses.replace(trace, annotations=ann)


# Every kernel priced by the model (the trace's recorded shapes aside): what the decode tokens
# add comes from the model's work without them.
MODEL = dict(model="gpt-oss-120b", costs="model")


def test_decode_rows_of_a_layer_gemm_are_its_marginal_flops_and_bytes():
    """A GEMM the model matched to a layer by its grid (QKV, K=2880 N=640; the LM head over the
    logit tokens): the 37 decode tokens add 2*37*K*N FLOPs and their rows' activations,
    37*(K+N)*2 bytes, and share the K*N weights the prefill chunk reads anyway. Fails if the
    decode side is given a token share of the weight bytes (37/888 of K*N*2 per GEMM), or if the
    grid is matched at one side's tokens (it was launched for all 888: the QKV GEMMs then went
    unmatched and their weights were shared by duration, 105 MB instead of 132.7 MB)."""
    parts, _ = measure(_annotated(CHUNK), **MODEL)
    w, m = parts.work, parts.split.marginal
    note = w["cost_note"].astype(str)
    qkv = np.flatnonzero(note.str.startswith("qkv_proj:").to_numpy() & (w["step"] == 0).to_numpy())
    assert len(qkv) == LAYERS
    assert m.flops[qkv].sum() == pytest.approx(2 * 37 * HIDDEN * QKV_N * LAYERS)
    assert m.bytes[qkv].sum() == pytest.approx(37 * (HIDDEN + QKV_N) * BF16 * LAYERS)
    assert m.shared_bytes[qkv].sum() == pytest.approx(HIDDEN * QKV_N * BF16 * LAYERS)
    o = np.flatnonzero(note.str.startswith("o_proj:").to_numpy())
    assert m.shared_bytes[o].sum() == pytest.approx(O_K * HIDDEN * BF16 * LAYERS)
    # The LM head computes one logit token per request: the 37 decode requests add 37 rows.
    lm = np.flatnonzero((w["component"].astype(str) == "lm_head").to_numpy())
    assert m.flops[lm].sum() == pytest.approx(2 * 37 * HIDDEN * VOCAB_RANK)
    # A compute-bound GEMM's time grows with its rows: the decode rows add 37/888 of it.
    compute = qkv[(w["bound"].to_numpy()[qkv] == "compute")]
    assert len(compute) and np.allclose(m.decode_time[compute], 37 / 888)


def test_a_chunked_prefill_steps_decode_side_is_a_passenger_without_bound_or_mfu():
    """The issue's case: a step of a large prefill chunk and a few decode tokens. Fails if the
    decode side gets the bound, MFU or MBU of kernels the chunk sets (the old report: "Decode: 88%
    of kernel time is compute-bound", decode MFU 12.4%), if the step does not state what its
    decode tokens add, or if the time split stops summing to the step."""
    d = analyze(_annotated(CHUNK), **MODEL).to_dict()
    [step] = d["steps"]
    split, m = step["split"], step["split"]["decode_marginal"]
    assert split["prefill"]["gpu_ms"] + split["decode"]["gpu_ms"] == pytest.approx(step["gpu_busy_ms"])
    assert m["passenger"] is True
    kernel_ms = step["compute_ms"] + step["memory_ms"] + step["interconnect_ms"] + step["unknown_ms"]
    assert m["prefill_own_ms"] >= 0.5 * kernel_ms
    # Decode attention over 37 x 1,000 keys: 18 full layers score 37,000 pairs, 18 sliding ones
    # 37 x 128; 2 x 8 heads x pairs x (64 + 64) FLOPs; the KV read 1 head x 128 bytes a key (the
    # kernels name an FP8 KV cache), and in each of the 36 layers 37 queries and outputs of 8 x 128 bf16.
    full, window = 37 * 1000, 37 * 128
    att = m["by_part"]["attention"]
    assert att["flops"] == pytest.approx(2 * 8 * (full + window) * 128 * 18)
    assert att["bytes"] == pytest.approx(18 * ((full + window) * 128 + 2 * 37 * 8 * 128 * 2))
    assert m["flops"] == pytest.approx(sum(p["flops"] for p in m["by_part"].values()))
    assert 0 < m["ms"] < split["decode"]["gpu_ms"] + m["ms"]
    dec = d["phases"]["decode"]
    assert dec["mfu"] is None and dec["mbu"] is None
    assert dec["mfu_reason"] == PASSENGER_REASON and d["provenance"]["reasons"]["decode_mfu"] == PASSENGER_REASON
    assert dec["passenger"]["mixed_steps"] == 1 and dec["passenger"]["whole_phase"]
    assert dec["passenger"]["marginal_ms"] == pytest.approx(m["ms"])
    # The books keep the decode part's kernel time by bound; the finding does not call it a bound.
    assert sum(dec["passenger"]["by_bound"].values()) == pytest.approx(dec["kernel_ms"])
    bound = [f for f in d["findings"] if f["id"] == "phase-bound" and f["phase"] == "decode"]
    assert bound and "no bound of its own" in bound[0]["text"]
    assert not any(f["id"] == "decode-batch" for f in d["findings"])
    assert "mixed_marginal" in d["provenance"]["formulas"] and "passenger" in d["provenance"]["formulas"]


def test_a_small_chunk_beside_a_large_decode_batch_keeps_its_decode_figures():
    """The other side of the rule: 16 prompt tokens beside 872 decode requests add little to a
    step of 888 tokens, so the step is not bound by its chunk. Fails if every mixed step's
    decode side is taken for a passenger (its MFU and MBU withheld) whatever its chunk."""
    d = analyze(_annotated(SMALL_CHUNK), **MODEL).to_dict()
    m = d["steps"][0]["split"]["decode_marginal"]
    assert m["passenger"] is False
    assert d["phases"]["decode"]["mfu"] is not None and d["phases"]["decode"]["passenger"] is None


def test_decode_rows_of_a_recorded_shape_gemm_are_its_marginal_flops_and_bytes():
    """Without the model: the trace records the shapes of its GEMMs (aten::addmm of [888, K] x
    [K, N] + bias, 36 layers each of QKV 2880 -> 640, o_proj 512 -> 2880 and the router 2880 ->
    128). Re-priced at 851 rows, each gives the 37 decode rows 2*37*K*N FLOPs and 37*(K+N)*2 bytes;
    its weights and bias are shared. Fails if a recorded GEMM's decode rows are priced by token
    share of its bytes, or if a split step with recorded shapes reports no marginal cost."""
    d = analyze(_annotated(CHUNK)).to_dict()
    m = d["steps"][0]["split"]["decode_marginal"]
    shapes = [(HIDDEN, QKV_N), (O_K, HIDDEN), (HIDDEN, 128)]
    assert m["flops"] == pytest.approx(sum(2 * 37 * k * n for k, n in shapes) * LAYERS)
    assert m["bytes"] == pytest.approx(sum(37 * (k + n) * BF16 for k, n in shapes) * LAYERS)
    assert m["shared_bytes"] == pytest.approx(sum((k * n + n) * BF16 for k, n in shapes) * LAYERS)
    # The rest of the step (MoE, attention, collectives) has no work without the decode tokens
    # here: whether the chunk bounds the step is not known, and the decode side keeps its figures.
    assert m["covered_share"] < 0.5 and m["passenger"] is None and "not known" in m["reason"]
    assert d["phases"]["decode"]["passenger"] is None and d["phases"]["decode"]["mfu"] is not None
    # With the model beside the shapes, the MoE and attention ops take the model's split of their
    # work: the step is covered and its chunk bounds it.
    m = analyze(_annotated(CHUNK), model="gpt-oss-120b").to_dict()["steps"][0]["split"]["decode_marginal"]
    assert m["covered_share"] > 0.8 and m["passenger"] is True


def test_without_model_or_shapes_the_marginal_cost_says_why():
    """The GB10 decode trace records no shapes; one step annotated as a chunked-prefill step.
    Fails if such a step reports a marginal cost (nothing says which of its bytes are weights)
    or calls its decode side a passenger."""
    trace = read_real("gb10_vllm")
    ann = trace.annotations.copy()
    names = ann["name"].astype(str).to_numpy().copy()
    names[np.flatnonzero((ann["side"] == "cpu").to_numpy())[3]] = (
        "execute_516_context_1(sq512sk2048sqsq262144sqsk1048576)_generation_4(sq4sk4004sqsq4sqsk4004)"
    )
    ann["name"] = pd.Categorical(names)
    d = analyze(dataclasses.replace(trace, annotations=ann)).to_dict()
    m = d["steps"][3]["split"]["decode_marginal"]
    assert m["ms"] is None and m["passenger"] is None and "--model" in m["reason"]
    assert d["phases"]["decode"]["passenger"] is None


def _rows_step(gemm_alone_bytes: float):
    """One split step (P=96 prefill + D=32 decode tokens) of two kernels: a GEMM of K=N=1024 and a
    KV-cache write, priced by hand (bf16), against peaks of 100 TFLOP/s and 1 TB/s."""
    P, D, K, N = 96, 32, 1024, 1024
    T = P + D
    W = K * N * 2
    f_gemm, b_gemm = 2 * T * K * N, W + T * (K + N) * 2
    kv = 256 * 2 * 2  # per token: 256 K/V elements read and written at 2 bytes
    steps = pd.DataFrame(
        {
            "phase": ["mixed"],
            "prefill_side": [BatchSide(1, P)],
            "decode_side": [BatchSide(D, D)],
            "gpu_busy_ns": [20_000.0],
        }
    )
    work = pd.DataFrame(
        {
            "step": [0, 0],
            "dur_ns": [16_000, 4_000],
            "flops": [float(f_gemm), 0.0],
            "bytes": [float(b_gemm), float(T * kv)],
            "peak_flops": [1e14, 1e14],
            "peak_bw": [1e12, 1e12],
            "component": ["linear", "kv_write"],
        }
    )
    alone = {
        "prefill": (np.array([P / T, 0.0]), np.array([gemm_alone_bytes(P) / b_gemm, P / T])),
        "decode": (np.array([D / T, 0.0]), np.array([gemm_alone_bytes(D) / b_gemm, D / T])),
    }
    return steps, work, alone, dict(P=P, D=D, K=K, N=N, T=T, W=W, f=f_gemm, b=b_gemm, kv=kv)


def test_hand_rows_marginal_time_is_at_each_kernels_achieved_fraction_of_its_roof():
    """Two hand-priced kernels. The GEMM at T=128 rows needs max(2*128*1024^2 / 100 TFLOP/s =
    2.68 us, (2 MiB weights + 128*2048*2 B) / 1 TB/s = 2.62 us); without the 32 decode rows its
    FLOPs need 2.01 us and its bytes 2.49 us: the decode rows add 0.19 us of its 2.68 us roof time,
    taken at its own achieved fraction (16 us for 2.68). Fails if the marginal time is taken by
    tokens (32/128 of each kernel), if the shared bytes are not the weights, or if a step whose
    weight reads dominate (either side alone would read them) is called bound by its chunk."""
    steps, work, alone, h = _rows_step(lambda s: 1024 * 1024 * 2 + s * 2048 * 2)
    split = split_mixed(steps, work, np.array(["gemm", "kv_cache"], dtype=object), alone=alone)
    m = split.by_step[0]["decode_marginal"]
    roof = max(h["f"] / 1e14, h["b"] / 1e12)
    without = max(h["f"] * 96 / 128 / 1e14, (h["W"] + 96 * 2048 * 2) / 1e12)
    gemm_ms = 16_000 * (1 - without / roof) / 1e6
    kv_ms = 4_000 * (32 / 128) / 1e6  # no FLOPs: its time scales with its bytes, with the tokens
    assert m["ms"] == pytest.approx(gemm_ms + kv_ms)
    assert m["flops"] == pytest.approx(2 * 32 * 1024 * 1024)
    assert m["bytes"] == pytest.approx(32 * 2048 * 2 + 32 * h["kv"])
    assert m["shared_bytes"] == pytest.approx(h["W"])
    assert m["by_part"]["gemm_rows"]["ms"] == pytest.approx(gemm_ms)
    assert m["by_part"]["kv_writes"]["ms"] == pytest.approx(kv_ms)
    assert m["covered_share"] == 1.0
    # The prefill tokens add 2.68 - max(0.67, 2.23) us of the GEMM and 3/4 of the KV write:
    # 5.7 of 20 us. The weight reads, which either side alone would pay, hold the rest: the
    # step is not bound by its chunk, and its decode side keeps its figures.
    decode_alone = max(h["f"] * 32 / 128 / 1e14, (h["W"] + 32 * 2048 * 2) / 1e12)
    own_ms = (16_000 * (1 - decode_alone / roof) + 4_000 * 96 / 128) / 1e6
    assert m["prefill_own_ms"] == pytest.approx(own_ms)
    assert m["passenger"] is False and split.passenger.tolist() == [False]
    # The time split is unchanged by it: its parts are the step's busy time.
    assert split.by_step[0]["prefill"]["gpu_ms"] + split.by_step[0]["decode"]["gpu_ms"] == pytest.approx(0.02)


def test_a_merge_of_windows_keeps_the_passenger_out_of_decode_mfu():
    """``tracekit split`` reports merge the windows' analyses (analysis.merge). Fails if the
    merged decode phase gives the passenger decode side back an MFU or MBU, or loses what its
    decode tokens added."""
    from tracekit.analysis.merge import merge

    trace = _annotated(CHUNK)
    a = analyze(trace, **MODEL)
    one = a.to_dict()["phases"]["decode"]
    _, match = measure(trace, **MODEL)
    merged = merge([a], spec=match.spec).to_dict()["phases"]["decode"]
    assert merged["mfu"] is None and merged["mbu"] is None and merged["mfu_reason"] == PASSENGER_REASON
    assert merged["passenger"]["marginal_ms"] == pytest.approx(one["passenger"]["marginal_ms"])
    assert merged["passenger"]["kernel_ms"] == pytest.approx(one["passenger"]["kernel_ms"])


def test_the_reports_state_what_a_mixed_steps_decode_requests_cost():
    """Fails if the text, Markdown or HTML report of a chunked-prefill step does not say what its
    decode requests cost and that its decode side, a passenger, has no bound of its own."""
    from tracekit.report.render_html import HtmlRenderer
    from tracekit.report.render_md import MarkdownRenderer
    from tracekit.report.render_text import TextRenderer
    from tracekit.report.view import mixed_lines

    d = analyze(_annotated(CHUNK), **MODEL).to_dict()
    m = d["steps"][0]["split"]["decode_marginal"]
    [line] = mixed_lines(d)
    assert line.startswith("step 0: 851 prefill + 37 decode tokens; its decode tokens add ")
    assert f"{m['share'] * 100:.3g}% of its kernel time" in line
    assert "weight reads the prefill chunk pays anyway" in line and "passenger, with no bound, MFU or MBU" in line
    for r in (TextRenderer(), MarkdownRenderer(), HtmlRenderer()):
        out = r.render_data(d)
        assert "what their decode requests cost" in out and "its decode tokens add" in out, r.name


def test_a_projection_retimes_what_the_decode_tokens_add():
    """A projection onto another GPU changes each kernel's time (whatif.project, steps.mixed.retimed).
    Fails if the projected step keeps the measured GPU's marginal time, or if its split parts no
    longer sum to its projected busy time."""
    from tracekit.whatif.project import project

    trace = _annotated(CHUNK)
    measured = analyze(trace, **MODEL).to_dict()["steps"][0]["split"]["decode_marginal"]
    p = project(trace, "h100", **MODEL)
    for basis, a in p.projected.items():
        step = a.to_dict()["steps"][0]
        m = step["split"]["decode_marginal"]
        assert m["flops"] == pytest.approx(measured["flops"])  # the same work on either GPU
        assert m["ms"] != pytest.approx(measured["ms"]), basis
        parts = step["split"]["prefill"]["gpu_ms"] + step["split"]["decode"]["gpu_ms"]
        assert parts == pytest.approx(step["gpu_busy_ms"])
