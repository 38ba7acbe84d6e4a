"""Engine grammars (tracekit/frameworks): every step annotation form, malformed ones, step
frames, graph-capture ranges and per-rank file names."""

from __future__ import annotations

import pytest

from tracekit import frameworks
from tracekit.frameworks import BatchSide, sglang, vllm


@pytest.mark.parametrize(
    "name, phase, prefill, decode, tokens, batch",
    [
        # vLLM detailed form: all four sums on both sides.
        (
            "execute_16_context_0(sq0sk0sqsq0sqsk0)_generation_16(sq16sk8193sqsq16sqsk8193)",
            "decode",
            BatchSide(0, 0, 0, 0, 0),
            BatchSide(16, 16, 8193, 16, 8193),
            16,
            16,
        ),
        (
            "execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)",
            "prefill",
            BatchSide(15, 15360, 15360, 15728640, 15728640),
            BatchSide(0, 0, 0, 0, 0),
            15360,
            15,
        ),
        # A chunked-prefill (mixed) step: one 512-token chunk over a 1536-token prefix, 7 decodes.
        (
            "execute_519_context_1(sq512sk2048sqsq262144sqsk1048576)_generation_7(sq7sk7007sqsq7sqsk7007)",
            "mixed",
            BatchSide(1, 512, 2048, 262144, 1048576),
            BatchSide(7, 7, 7007, 7, 7007),
            519,
            8,
        ),
        # Older form: tokens and sum of squares, or tokens alone.
        (
            "execute_context_1(888_788544)_generation_0(0)",
            "prefill",
            BatchSide(1, 888, None, 788544, None),
            BatchSide(0, 0),
            888,
            1,
        ),
        ("execute_context_0(0)_generation_4(4)", "decode", BatchSide(0, 0), BatchSide(4, 4), 4, 4),
        (
            "execute_context_2(100_5000)_generation_3(3)",
            "mixed",
            BatchSide(2, 100, None, 5000),
            BatchSide(3, 3),
            103,
            5,
        ),
    ],
)
def test_vllm_execute_annotations(name, phase, prefill, decode, tokens, batch):
    a = frameworks.parse_annotation(name)
    assert a.source == frameworks.SOURCE_VLLM and a.problem is None
    assert (a.phase, a.prefill, a.decode, a.tokens, a.batch) == (phase, prefill, decode, tokens, batch)


def test_attention_pairs_follow_causal_attention():
    # One request of q=512 new tokens over k=2048 keys: 512*2048 - 512*511/2 pairs.
    side = BatchSide(1, 512, 2048, 512 * 512, 512 * 2048)
    assert side.attention_pairs() == 512 * 2048 - 512 * 511 / 2
    # Without sum_qk: no cached prefix, q(q+1)/2 pairs per request.
    assert BatchSide(1, 888, None, 888 * 888).attention_pairs() == 888 * 889 / 2
    # Decode: one query per request, one pair per key.
    assert BatchSide(16, 16, 8193).attention_pairs() == 8193
    assert BatchSide(4, 4).attention_pairs() is None  # keys not stated


@pytest.mark.parametrize(
    "name, problem",
    [
        ("execute_context_x(1)_generation_1(1)", "does not follow"),
        ("execute_context_1(sq5sk3)_generation_0(0)", "contradict"),  # fewer keys than queries
        ("execute_9_context_1(sq5)_generation_1(sq1)", "add up to 6"),
        ("execute_context_1(five)_generation_0(0)", "are not sq/sk"),
        ("execute_context_1(5)_generation_0(0)tail", "trailing"),
        ("step[WARMUP bs=2]", "is not step["),
        ("step[DECODE bs=8 toks=2]", "fewer tokens than requests"),
    ],
)
def test_malformed_annotations_are_steps_with_a_problem_never_a_crash(name, problem):
    a = frameworks.parse_annotation(name)
    assert a is not None and problem in a.problem


@pytest.mark.parametrize(
    "counts, dropped",
    [
        # Two requests of 3 and 5 new tokens over 10 and 20 keys: Σq 8, Σk 30, Σq² 34, Σqk 130.
        ("sq8sk30sqsq34sqsk130", None),
        ("sq8sk30sqsq35sqsk130", "sum_q2"),  # odd: q² - q is even for every q, so Σq² - Σq is even
        ("sq8sk30sqsq66sqsk130", "sum_q2"),  # more than (Σq)² = 64
        ("sq8sk30sqsq30sqsk130", "sum_q2"),  # under (Σq)²/n = 32: two requests cannot be that even
        ("sq8sk30sqsq34sqsk250", "sum_qk"),  # more than Σq·Σk = 240
    ],
)
def test_sums_of_squares_that_no_batch_can_have_are_dropped(counts, dropped):
    # Bug caught: a Σq² that breaks arithmetic priced attention with half-pairs or more pairs than
    # the batch has; each bound is a property of any integers q_i >= 1, not of a trace.
    a = frameworks.parse_annotation(f"execute_context_2({counts})_generation_0(0)")
    assert a.phase == "prefill" and a.prefill.tokens == 8 and a.prefill.kv_tokens == 30
    got = {"sum_q2": a.prefill.sum_q2, "sum_qk": a.prefill.sum_qk}
    for key, value in {"sum_q2": 34, "sum_qk": 130}.items():
        if key == dropped:
            assert got[key] is None and "contradict" in a.problem and key in a.problem
        elif dropped != "sum_q2" or key != "sum_qk":
            assert got[key] == value
    if dropped is None:
        assert a.problem is None


def test_malformed_counts_are_dropped_not_trusted():
    a = frameworks.parse_annotation("execute_context_1(sq5sk3)_generation_0(0)")
    assert a.phase == "prefill" and a.prefill.tokens == 5 and a.prefill.kv_tokens is None


@pytest.mark.parametrize(
    "name, phase, tokens, batch",
    [
        ("step[EXTEND bs=15 toks=15360]", "prefill", 15360, 15),
        ("step[PREFILL bs=2 toks=100]", "prefill", 100, 2),
        ("step[DECODE bs=32]", "decode", 32, 32),
        ("step[MIXED bs=4 toks=300]", "mixed", 300, 4),
    ],
)
def test_sglang_step_annotations(name, phase, tokens, batch):
    a = frameworks.parse_annotation(name)
    assert a.source == frameworks.SOURCE_SGLANG and a.problem is None
    assert (a.phase, a.tokens, a.batch) == (phase, tokens, batch)
    if phase == "mixed":
        assert a.prefill is None and a.decode is None  # SGLang does not say how a mixed step splits


def test_tracekit_markers_carry_kv_counts():
    a = frameworks.parse_annotation("tracekit::decode#3 bs=8 kv=8224")
    assert a.source == frameworks.SOURCE_MARKERS and a.phase == "decode"
    assert a.decode == BatchSide(8, 8, 8224) and a.decode.attention_pairs() == 8224
    p = frameworks.parse_annotation("tracekit::prefill bs=2 tokens=64")
    assert p.prefill.sum_q2 == 2 * 32 * 32 and p.prefill.attention_pairs() == 2 * 32 * 33 / 2


@pytest.mark.parametrize(
    "name",
    [
        "ProfilerStep#3",
        "capture_32_DECODE",
        "decoder_layer",
        "nccl:all_reduce",
        "step[IDLE]",
        "tracekit::generate",
        "execute_context_0(0)_generation_0(0)",
        "x",
    ],
)
def test_names_that_are_not_steps(name):
    assert frameworks.parse_annotation(name) is None


def test_user_ranges_name_a_phase_without_counts():
    a = frameworks.parse_annotation("my_prefill")
    assert (a.phase, a.source, a.prefill, a.tokens) == ("prefill", frameworks.SOURCE_USER, None, None)


def test_step_frames():
    assert (
        frameworks.step_frame_source("vllm/v1/worker/gpu_model_runner.py(3758): execute_model")
        == frameworks.SOURCE_VLLM_FRAMES
    )
    assert (
        frameworks.step_frame_source("vllm/worker/model_runner.py(1650): execute_model")
        == frameworks.SOURCE_VLLM_FRAMES
    )
    # The executor and worker frames of the same name enclose the step; they are not steps.
    assert frameworks.step_frame_source("vllm/v1/executor/uniproc_executor.py(105): execute_model") is None
    assert frameworks.step_frame_source("vllm/v1/worker/gpu_worker.py(807): execute_model") is None
    assert (
        frameworks.step_frame_source(
            "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py(445): forward_batch_generation"
        )
        == frameworks.SOURCE_SGLANG_FRAMES
    )
    assert frameworks.step_frame_source("torch/nn/modules/module.py(1779): _call_impl") is None


def test_graph_capture_ranges():
    assert frameworks.capture("capture_32_DECODE") == (32, "DECODE")
    assert frameworks.capture("capture_x") is None


@pytest.mark.parametrize(
    "name, rank, extra",
    [
        ("1782799835.6885648-TP-3-DECODE.trace.json.gz", 3, {"stage": "DECODE"}),
        ("1782799835.6885648-TP-1-DP-2-EP-5.trace.json.gz", 1, {"dp": 2, "ep": 5}),
        ("myrun-1782799835.6-TP-0-EXTEND.trace.json.gz", 0, {"stage": "EXTEND"}),
        ("rank0.1776116491109655086.pt.trace.json.gz", 0, {}),
        ("0a1b-rank-7.177611649.pt.trace.json.gz", 7, {}),
    ],
)
def test_per_rank_file_names(name, rank, extra):
    info = frameworks.rank_from_path("/some/folder/" + name)
    assert info["rank"] == rank and info["source"]
    for k, v in extra.items():
        assert info[k] == v


def test_world_size_from_the_runs_other_files():
    files = [f"1782799835.6885648-TP-{r}-DECODE.trace.json.gz" for r in range(4)]
    others = files + ["1782799835.6885648-TP-0-EXTEND.trace.json.gz", "999.1-TP-9-DECODE.trace.json.gz"]
    info = frameworks.rank_from_path(files[2], others)
    assert (info["rank"], info["world_size"]) == (2, 4)  # another stage or profile is another run
    assert "world_size" not in frameworks.rank_from_path(files[2])
    assert frameworks.rank_from_path("h100_hf-qwen1.5-0.5b_forward_bs16.json.gz") is None


# Every per-rank file-name form the engines write, as a function of the rank: vLLM's worker
# (``<instance>-rank-<r>.<time>``), older builds and forks (``rank<r>.<time>``, ``rank_<r>``,
# ``_rank<r>``), SGLang's ``<id>-TP-<r>[-DP-..][-PP-..][-EP-..][-STAGE]``. Each rank's file has its
# own time stamp, as each worker writes its own.
RANK_NAME_FORMS = [
    ("vllm rank<N>", lambda r: f"rank{r}.17761164911096550{80 + r}.pt.trace.json.gz"),
    ("vllm -rank-N", lambda r: f"1765516657148888380-rank-{r}.17655167004994981{10 + r}.pt.trace.json.gz"),
    ("vllm rank-N", lambda r: f"rank-{r}.1765516700.pt.trace.json"),
    ("vllm _rank_N", lambda r: f"llama70b_rank_{r}.pt.trace.json.gz"),
    ("vllm .rankN", lambda r: f"worker.rank{r}.17655167{r}.pt.trace.json.gz"),
    ("sglang TP", lambda r: f"1782799835.6885648-TP-{r}.trace.json.gz"),
    ("sglang TP stage", lambda r: f"1782799835.6885648-TP-{r}-DECODE.trace.json.gz"),
    ("sglang TP DP EP", lambda r: f"1782799835.6885648-TP-{r}-DP-0-EP-{r}.trace.json.gz"),
    ("sglang TP PP stage .pt", lambda r: f"run-1782799835.6-TP-{r}-PP-1-EXTEND.pt.trace.json.gz"),
]


@pytest.mark.parametrize("form, name", RANK_NAME_FORMS, ids=[f for f, _ in RANK_NAME_FORMS])
def test_every_per_rank_name_form_gives_rank_and_world_size(form, name):
    """Four files of one run named in each engine form: each gives its own rank and, from its
    siblings, world size 4; a file of another run beside them does not count. Fails if any form
    loses its rank or its world size (the run key of a form taking in the rank or time stamp)."""
    files = [f"/run/{name(r)}" for r in range(4)]
    for r, path in enumerate(files):
        info = frameworks.rank_from_path(path, files)
        assert info is not None, path
        assert (info["rank"], info.get("world_size")) == (r, 4), (form, path, info)
        assert info["source"]
        alone = frameworks.rank_from_path(path)
        assert alone["rank"] == r and "world_size" not in alone  # no siblings: world size unknown
    # Two ranks of this run beside all four of another run (other instance or profile id): 2, not 6.
    other = [f"/run/x{name(r)}" if not name(r)[0].isdigit() else f"/run/9{name(r)}" for r in range(4)]
    info = frameworks.rank_from_path(files[1], files[:2] + other)
    assert info.get("world_size") == 2, (form, info)


def test_world_size_from_vllm_file_names_when_the_traces_do_not_state_it(tmp_path):
    """Read a folder of two vLLM-named rank files whose documents carry no distributedInfo: the
    trace's ranks and world size come from the names. Fails if the reader drops the world size
    the names give."""
    from kineto import Doc

    from tracekit import read_trace

    for r in range(2):
        doc = Doc(device="NVIDIA A100-SXM4-80GB")
        doc.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", 0.0, 5.0, 10.0 + r)
        doc.write(tmp_path / f"1765516657148888380-rank-{r}.17655167{r}.pt.trace.json.gz")
    one = read_trace(tmp_path / "1765516657148888380-rank-1.176551671.pt.trace.json.gz")
    assert (one.distributed["rank"], one.distributed["world_size"]) == (1, 2)
    both = read_trace(tmp_path)
    assert sorted(set(both.kernels["rank"].tolist())) == [0, 1]


def test_engine_modules_own_their_grammar():
    # Segmentation never matches engine strings itself: the modules answer.
    assert vllm.is_candidate("execute_context_1(1)_generation_0(0)") and not vllm.is_candidate("step[DECODE]")
    assert sglang.is_candidate("step[DECODE bs=1]")
