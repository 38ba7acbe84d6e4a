"""Segmentation: steps and phases from markers, framework annotations, or evidence alone."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from conftest import all_real_traces, read_real

from tracekit import frameworks, markers
from tracekit.analysis.steps import segment as seg
from tracekit.analysis.steps import table
from tracekit.analysis.steps.latency import latency

TRAINING = ["a100_dlrm", "a100_nccl", "a100_torchrec", "mi250_toy", "v100_ddp", "v100_pt19", "v100_ns"]


@pytest.mark.parametrize("key", all_real_traces())
def test_every_real_trace_segments(key):
    s = seg.segment(read_real(key))
    assert s.run_kind in (seg.RUN_INFERENCE, seg.RUN_TRAINING, seg.RUN_EMPTY)
    assert len(s.work) == len(read_real(key).kernels)
    steps = s.steps
    # Every step's numbers are consistent with the work assigned to it.
    for st in steps.itertuples():
        mine = s.work[s.work["step"] == st.step]
        assert st.kernels == len(mine)
        if len(mine):
            assert st.gpu_start_ns == mine["start_ns"].min()
            assert st.gpu_end_ns == mine["end_ns"].max()
            assert 0 < st.gpu_busy_ns <= st.gpu_end_ns - st.gpu_start_ns
            # The books, from a plain union of the step's kernels clipped to its window:
            # fails if busy counts work outside the step, or idle leaves out the lead-in
            # before the first kernel or the tail after the last (the old "GPU window" idle).
            assert st.end_ns == max(st.cpu_end_ns, st.gpu_end_ns) and st.begin_ns >= st.cpu_start_ns
            # The window less the device's time on unrecorded work the step's work waited on
            # (steps.held): no recorded work runs then, so busy is unchanged.
            assert st.duration_ns == st.end_ns - st.begin_ns - st.unrecorded_ns - st.next_ns
            assert st.previous_ns == st.begin_ns - st.cpu_start_ns
            assert st.gpu_busy_ns == _union(mine["start_ns"], mine["end_ns"], st.begin_ns, st.end_ns)
            assert st.gpu_idle_ns == st.duration_ns - st.gpu_busy_ns >= 0
    # A unit takes its step's phase; one outside every step is in no phase (not "unknown", which
    # would put it in the unknown phase's figures beside steps it is not part of).
    step_of = s.work["step"].to_numpy()
    phase_of = s.work["phase"].astype(str).to_numpy()
    assert (phase_of[step_of < 0] == seg.OUTSIDE).all()
    if len(steps):
        inside = step_of >= 0
        assert (phase_of[inside] == steps["phase"].to_numpy()[step_of[inside]]).all()
    assert set(phase_of) <= set(seg.PHASES) | {seg.OUTSIDE}


def _union(starts, ends, lo, hi) -> int:
    """Length of the union of [start, end) intervals clipped to [lo, hi), by a plain sweep."""
    total, cur_s, cur_e = 0, None, None
    for a, b in sorted(zip(np.clip(starts, lo, hi).tolist(), np.clip(ends, lo, hi).tolist())):
        if cur_e is None or a > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


@pytest.mark.parametrize("key", TRAINING)
def test_training_traces_are_not_inference(key):
    s = seg.segment(read_real(key))
    assert s.run_kind == seg.RUN_TRAINING
    assert len(s.steps) == 0
    assert (s.work["step"] == -1).all()


def test_sglang_extend_is_one_prefill_step():
    s = seg.segment(read_real("mi300x_extend"))
    assert list(s.steps["phase"]) == ["prefill"]
    st = s.steps.iloc[0]
    assert st["source"] == seg.SOURCE_SGLANG
    assert (st["tokens"], st["batch"]) == (15360, 15)
    assert not st["graph_replay"]


def test_sglang_decode_is_one_graph_replayed_decode_step():
    s = seg.segment(read_real("mi300x_decode"))
    assert list(s.steps["phase"]) == ["decode"]
    st = s.steps.iloc[0]
    assert st["graph_replay"]
    assert st["batch"] == 32
    # The 544 graph-replayed kernels belong to the step through their one launch.
    replayed = s.work[s.work["graph"]]
    assert len(replayed) == 544 and (replayed["step"] == 0).all()


def test_hf_h100_forward_is_prefill_from_shapes():
    s = seg.segment(read_real("h100_hf"))
    assert list(s.steps["phase"]) == ["prefill"]
    st = s.steps.iloc[0]
    assert st["source"] == seg.SOURCE_INFERRED
    assert "559 tokens per sequence" in st["evidence"]
    assert (st["tokens"], st["batch"]) == (16 * 559, 16)
    # The forward's GPU work (the kernels launched inside it) is all prefill.
    launched = s.work["issue_ns"] >= 0
    assert (s.work.loc[launched, "phase"] == "prefill").all()


def test_nano_vllm_decode_inferred_from_split_kv_kernel():
    s = seg.segment(read_real("rtx4080_nanovllm"))
    assert list(s.steps["phase"]) == ["decode"]
    assert "splitkv" in s.steps.iloc[0]["evidence"]


def test_weak_evidence_stays_unknown():
    # A non-LLM transformer: shapes do not name a token axis, no phase kernels.
    s = seg.segment(read_real("a100_particle"))
    assert set(s.steps["phase"]) == {"unknown"}
    assert "too little evidence" in s.steps.iloc[0]["evidence"]


def _strip_annotations(trace):
    empty = trace.annotations.iloc[0:0]
    return dataclasses.replace(trace, annotations=empty)


def _phase_agreement(a: seg.Segmentation, b: seg.Segmentation) -> float:
    w = a.work["dur_ns"].to_numpy()
    same = a.work["phase"].to_numpy() == b.work["phase"].to_numpy()
    return float(w[same].sum() / w.sum())


@pytest.mark.parametrize("key", ["mi300x_extend", "mi300x_decode"])
def test_annotation_free_path_agrees(key):
    trace = read_real(key)
    annotated = seg.segment(trace)
    # Without annotations the steps are SGLang's forward_batch_generation frames; without
    # those too, passes found from the token embedding or module spans.
    frames = seg.segment(_strip_annotations(trace))
    assert frames.source == seg.SOURCE_SGLANG_FRAMES
    assert _phase_agreement(annotated, frames) >= 0.95
    bare = seg.segment(dataclasses.replace(_strip_annotations(trace), python=trace.python.iloc[0:0]))
    assert bare.source == seg.SOURCE_INFERRED
    assert _phase_agreement(annotated, bare) >= 0.95


# --- hand-built rows -----------------------------------------------------------------


def test_busy_union_merges_streams():
    # Two overlapping kernels on two streams, then two gaps: busy is the union.
    starts = np.array([0, 5, 20, 40])
    ends = np.array([10, 12, 30, 50])
    busy, g0, g1 = table._busy(starts, ends)
    assert busy == 12 + 10 + 10
    assert (g0, g1) == (0, 50)


@pytest.mark.parametrize(
    "name, phase, tokens, batch",
    [
        ("step[EXTEND bs=15 toks=15360]", "prefill", 15360, 15),
        ("step[DECODE bs=32]", "decode", 32, 32),  # one new token per request
        ("step[MIXED bs=4 toks=300]", "mixed", 300, 4),
        ("execute_context_2(100)_generation_0(0)", "prefill", 100, 2),
        ("execute_context_0(0)_generation_8(8)", "decode", 8, 8),
        ("execute_context_1(50)_generation_3(3)", "mixed", 53, 4),
        (
            "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)",
            "decode",
            32,
            32,
        ),
        ("my_prefill", "prefill", None, None),
        ("decode_step_7", "decode", None, None),
    ],
)
def test_framework_annotation_names(name, phase, tokens, batch):
    parsed = frameworks.parse_annotation(name)
    assert parsed is not None and parsed.phase == phase and parsed.problem is None
    assert parsed.tokens == tokens and parsed.batch == batch


@pytest.mark.parametrize(
    "name", ["ProfilerStep#3", "capture_32_DECODE", "decoder_layer", "nccl:all_reduce", "step[IDLE]"]
)
def test_names_that_are_not_steps(name):
    assert frameworks.parse_annotation(name) is None


# --- a real CPU run recorded in the test -----------------------------------------------


def _tiny_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=256,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    return torch, model


def _run(torch, model, batch: int, prompt: int, steps: int, mark: bool):
    """Prefill + greedy decode loop; returns (wall TTFT ms, wall per-step ms)."""
    from torch.profiler import record_function

    ids = torch.randint(0, 512, (batch, prompt))

    def rng(name):
        return record_function(name) if mark else _null()

    # transformers renamed past_key_values to cache (5.x); accept both.
    import inspect

    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    wall = []
    with torch.inference_mode():
        t = time.perf_counter()
        with rng(markers.prefill_name(batch, batch * prompt)):
            out = model(input_ids=ids, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        ttft = (time.perf_counter() - t) * 1e3
        cache = out[kw]
        for i in range(steps):
            t = time.perf_counter()
            with rng(markers.decode_name(i, batch)):
                out = model(input_ids=nxt, use_cache=True, **{kw: cache})
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            wall.append((time.perf_counter() - t) * 1e3)
            cache = out[kw]
    return ttft, wall


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    torch, model = _tiny_llama()
    from torch.profiler import ProfilerActivity, profile

    from tracekit import read_trace

    _run(torch, model, 2, 32, 2, mark=False)  # warm up
    path = tmp_path_factory.mktemp("cpu") / "run.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        ttft, tpot = _run(torch, model, 2, 32, 6, mark=True)
    prof.export_chrome_trace(str(path))
    return read_trace(path), ttft, tpot


def test_cpu_run_steps_and_latency_match_wall_clock(cpu_run):
    trace, ttft, tpot = cpu_run
    assert not trace.has_gpu
    s = seg.segment(trace)
    assert s.device_type == "cpu" and s.source == seg.SOURCE_MARKERS
    assert list(s.steps["phase"]) == ["prefill"] + ["decode"] * len(tpot)
    lat = latency(s)
    assert lat.ttft_ms == pytest.approx(ttft, rel=0.10)
    assert lat.tpot_ms["mean"] == pytest.approx(float(np.mean(tpot)), rel=0.10)
    assert lat.decode_tokens_per_s == pytest.approx(2 * len(tpot) / (sum(lat.tpot_series_ms) / 1e3))


def test_cpu_run_without_markers_reaches_same_phases(cpu_run):
    trace, _, tpot = cpu_run
    annotated = seg.segment(trace)
    bare = seg.segment(_strip_annotations(trace))
    assert bare.source == seg.SOURCE_INFERRED
    assert list(bare.steps["phase"]) == ["prefill"] + ["decode"] * len(tpot)
    assert _phase_agreement(annotated, bare) >= 0.95
    # On a CPU trace the "kernels" are leaf aten ops; the GEMMs are among them.
    assert bare.work["name"].astype(str).isin(["aten::addmm", "aten::mm", "aten::bmm"]).any()


def test_module_anchors_on_a_thread_without_ops_still_segment():
    """Found by the fuzz campaign: nn.Module frames on a thread that ran no op or runtime
    call (a mangled tid) made the pass boundaries ask for the span of an empty thread."""
    t = _strip_annotations(read_real("rtx4080_nanovllm"))
    py = t.python.copy()
    lonely = int(max(t.cpu_ops["tid"].max(), t.runtime["tid"].max(), py["tid"].max())) + 1
    py.loc[py["name"].astype(str).str.startswith("nn.Module: "), "tid"] = lonely
    s = seg.segment(dataclasses.replace(t, python=py))
    assert s.source == seg.SOURCE_INFERRED and len(s.steps) > 0


def test_launches_on_a_steps_first_and_last_instant_belong_to_it(tmp_path):
    """Three decode steps annotated [100, 200], [250, 350], [400, 500] us on one thread, each with
    kernels launched at its first instant, inside, and at its last instant, and one launched in
    the gap between two steps. By construction the step of each kernel is the range that holds its
    launch, ends included; the gap's belongs to none. Fails on an off-by-one at the range edges
    (a searchsorted side that drops or shifts launches at a step's start or end)."""
    from kineto import Doc

    from tracekit import read_trace

    doc = Doc()
    ranges = [(100.0, 200.0), (250.0, 350.0), (400.0, 500.0)]
    expected = {}
    for i, (a, b) in enumerate(ranges):
        doc.annotation("execute_context_0(0)_generation_2(2)", a, b - a)
        for t in (a, (a + b) / 2, b):
            expected[t] = i
    expected[225.0] = -1  # between steps 0 and 1
    for t in sorted(expected):
        doc.kernel("void vllm::rms_norm_kernel<c10::BFloat16>", t, t + 5.0, 3.0, launch_dur=0.0)
    trace = read_trace(doc.write(tmp_path / "edges.json"))
    s = seg.segment(trace)
    assert len(s.steps) == 3 and set(s.steps["phase"]) == {"decode"}
    issue_us = s.work["issue_ns"].to_numpy() / 1e3
    got = dict(zip(np.round(issue_us - issue_us.min() + 100.0, 3).tolist(), s.work["step"].tolist()))
    assert got == expected
    assert s.steps["kernels"].tolist() == [3, 3, 3]
