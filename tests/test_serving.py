"""Serving traces as vLLM and SGLang record them: steps, phases, batch splits, mixed steps,
engine step-time semantics, devices and ranks, on the real shared traces."""

from __future__ import annotations

import dataclasses
import gzip
import json

import numpy as np
import pandas as pd
import pytest
from conftest import read_real, real_trace_path

from tracekit import read_trace
from tracekit.analysis import analyze
from tracekit.analysis.steps import segment as seg
from tracekit.analysis.steps.evidence import structural_phases


def _data(trace):
    return analyze(trace).to_dict()


def _strip(trace, python: bool = False):
    out = dataclasses.replace(trace, annotations=trace.annotations.iloc[0:0])
    return dataclasses.replace(out, python=trace.python.iloc[0:0]) if python else out


# --- the shared serving traces ---------------------------------------------------------


def test_b200_vllm_prefill_is_one_request_of_888_tokens():
    d = _data(read_real("b200_vllm"))
    [step] = d["steps"]
    assert step["phase"] == "prefill" and step["source"] == seg.SOURCE_VLLM
    assert (step["tokens"], step["batch"]) == (888, 1)
    assert step["prefill"] == {"requests": 1, "tokens": 888, "kv_tokens": None, "sum_q2": 888 * 888, "sum_qk": None}
    assert d["device"]["spec_key"] == "b200"
    assert d["metrics"]["latency_semantics"] == "engine steps"
    assert d["metrics"]["prefill_step_ms"]["p50"] == pytest.approx(step["duration_ms"])
    assert d["metrics"]["prefill_tokens_per_s"] == pytest.approx(888 / (step["duration_ms"] / 1e3))


def test_gb10_vllm_is_ten_decode_steps_of_batch_4():
    d = _data(read_real("gb10_vllm"))
    steps = d["steps"]
    assert [s["phase"] for s in steps] == ["decode"] * 10
    assert all((s["batch"], s["tokens"], s["decode"]["requests"]) == (4, 4, 4) for s in steps)
    m = d["metrics"]
    # A serving engine's steps: no TTFT/TPOT, per-phase step times instead, and the reason why.
    assert m["ttft_ms"] is None and m["tpot_ms"] is None
    assert "serving engine" in d["provenance"]["reasons"]["ttft_ms"]
    durations = [s["duration_ms"] for s in steps]
    assert m["decode_step_ms"]["p50"] == pytest.approx(float(np.percentile(durations, 50)))
    # The GPU runs behind the CPU: a step's time starts when the previous step's work ended,
    # so the steps tile the run instead of counting the queue twice.
    span = steps[-1]["gpu_end_ms"] - steps[0]["cpu_start_ms"]
    assert sum(durations) == pytest.approx(span, rel=0.01)
    assert m["decode_tokens_per_s"] == pytest.approx(40 / (sum(durations) / 1e3))
    assert d["device"]["spec_key"] == "gb10"


@pytest.mark.parametrize("key", ["b300_qwen3_moe", "mi300x_qwen3_moe"])
def test_qwen3_moe_decode_is_one_step_of_batch_16(key):
    d = _data(read_real(key))
    [step] = d["steps"]
    assert step["phase"] == "decode" and step["graph_replay"]
    assert step["batch"] == 16
    # The nested SGLang and vLLM-style annotations of the step merge: the SGLang mode decides,
    # the vLLM-style counts give the KV tokens attention reads.
    assert step["source"] == seg.SOURCE_SGLANG
    assert step["decode"] == {"requests": 16, "tokens": 16, "kv_tokens": 8193, "sum_q2": 16, "sum_qk": 8193}


def test_sglang_qwen3_8b_set():
    extend = _data(read_real("mi300x_extend"))["steps"][0]
    assert (extend["phase"], extend["batch"], extend["tokens"]) == ("prefill", 15, 15360)
    assert extend["prefill"]["sum_q2"] == 15 * 1024 * 1024
    decode = _data(read_real("mi300x_decode"))["steps"][0]
    assert (decode["phase"], decode["batch"]) == ("decode", 32)
    assert decode["decode"]["kv_tokens"] == 32785


# --- steps without annotations -----------------------------------------------------------


def test_gb10_without_annotations_steps_come_from_execute_model():
    s = seg.segment(_strip(read_real("gb10_vllm")))
    assert s.source == seg.SOURCE_VLLM_FRAMES
    assert list(s.steps["phase"]) == ["decode"] * 10
    assert s.steps["label"].str.contains("gpu_model_runner.py").all()
    assert s.steps["evidence"].str.contains("graphs").all()


def test_gb10_without_annotations_or_python_steps_come_from_the_launch_pattern():
    full = seg.segment(read_real("gb10_vllm"))
    s = seg.segment(_strip(read_real("gb10_vllm"), python=True))
    assert s.source == seg.SOURCE_LAUNCHES
    assert list(s.steps["phase"]) == ["decode"] * 10
    # The cuts fall where the engine's steps begin: the same kernels in each step.
    assert (s.steps["kernels"].to_numpy() >= 0.95 * full.steps["kernels"].to_numpy()).all()
    same = (s.work["step"].to_numpy() == full.work["step"].to_numpy()) & (full.work["step"].to_numpy() >= 0)
    assert same.sum() >= 0.95 * (full.work["step"] >= 0).sum()


def test_a_step_frame_without_gpu_work_is_not_a_step():
    trace = _strip(read_real("gb10_vllm"))
    py = trace.python
    frame = py[py["name"].astype(str).str.contains("gpu_model_runner.py.*execute_model")].iloc[[-1]].copy()
    after = int(trace.kernels["end_ns"].max()) + 1_000_000
    frame["start_ns"], frame["end_ns"] = after, after + 5_000_000
    s = seg.segment(dataclasses.replace(trace, python=pd.concat([py, frame], ignore_index=True)))
    assert len(s.steps) == 10
    assert any("launched no GPU work" in n for n in s.notes)


def test_a_prefill_among_decodes_is_found_from_structure():
    # One SGLang Qwen3-8B run on MI300X: the eager extend step and the graph-replayed decode
    # step, annotations stripped, one after the other on one timeline.
    extend, decode = _strip(read_real("mi300x_extend")), _strip(read_real("mi300x_decode"))
    shift = int(extend.end_ns - decode.start_ns) + 1_000_000
    tables = {}
    for name in ("kernels", "runtime", "cpu_ops", "annotations", "python"):
        a, b = getattr(extend, name), getattr(decode, name).copy()
        for col in ("start_ns", "end_ns"):
            b[col] = b[col] + shift
        for col, target in (("launch", "runtime"), ("op", "cpu_ops")):
            if col in b:
                b[col] = np.where(b[col] >= 0, b[col] + len(getattr(extend, target)), -1)
        tables[name] = pd.concat([a, b], ignore_index=True)
        if "name" in tables[name]:
            tables[name]["name"] = tables[name]["name"].astype("category")
    merged = dataclasses.replace(extend, **tables)
    s = seg.segment(merged)
    assert s.source == seg.SOURCE_SGLANG_FRAMES
    assert list(s.steps["phase"]) == ["prefill", "decode"]


def test_structural_evidence_on_hand_built_steps():
    # Nine graph-replayed steps and one eager step whose GEMMs launch 20x the blocks.
    f = pd.DataFrame(
        {
            "kernels": [700] * 9 + [1300],
            "graph_share": [0.95] * 9 + [0.0],
            "gemm_launches": [300] * 10,
            "gemm_blocks": [40.0] * 9 + [800.0],
        }
    )
    engine = np.ones(10, dtype=bool)
    out = structural_phases(f, np.arange(10), engine)
    assert [out[i][0] for i in range(10)] == ["decode"] * 9 + ["prefill"]
    assert "20.0x the blocks" in out[9][1]
    # The same steps found from nn.Module spans of an arbitrary model: size is no evidence there.
    out = structural_phases(f.assign(graph_share=0.0), np.arange(10), np.zeros(10, dtype=bool))
    assert out == {}


# --- mixed steps ---------------------------------------------------------------------------


def _with_annotation(trace, step: int, name: str):
    ann = trace.annotations.copy()
    cpu = np.flatnonzero((ann["side"] == "cpu").to_numpy())
    names = ann["name"].astype(str).to_numpy().copy()
    names[cpu[step]] = name
    ann["name"] = pd.Categorical(names)
    return dataclasses.replace(trace, annotations=ann)


MIXED = "execute_516_context_1(sq512sk2048sqsq262144sqsk1048576)_generation_4(sq4sk4004sqsq4sqsk4004)"


def test_a_mixed_step_is_split_between_its_phases():
    # Real GB10 kernels; step 3's annotation says it also ran a 512-token prefill chunk.
    base = read_real("gb10_vllm")
    d = _data(_with_annotation(base, 3, MIXED))
    step = d["steps"][3]
    assert step["phase"] == "mixed"
    split = step["split"]
    assert split["prefill"]["tokens"] == 512 and split["decode"]["requests"] == 4
    assert split["prefill"]["kv_tokens"] == 2048 and split["decode"]["kv_tokens"] == 4004
    # The sum rule: the two parts are the step's GPU busy time.
    assert split["prefill"]["gpu_ms"] + split["decode"]["gpu_ms"] == pytest.approx(step["gpu_busy_ms"])
    # Non-attention work goes by tokens (512 of 516 are prefill); attention by query-key pairs,
    # of which the prefill chunk over its 2048 keys has far more than four decode queries.
    assert 512 / 516 - 1e-9 < split["prefill"]["gpu_ms"] / step["gpu_busy_ms"] < 1
    # Phase totals take the parts in: prefill is the mixed step's prefill part alone ...
    pre, dec = d["phases"]["prefill"], d["phases"]["decode"]
    assert "mixed" not in d["phases"]
    assert pre["steps"] == 0 and pre["mixed_steps"] == 1
    assert pre["gpu_busy_ms"] == pytest.approx(split["prefill"]["gpu_ms"])
    # ... and decode is the nine decode steps plus the decode part.
    nine = sum(s["gpu_busy_ms"] for i, s in enumerate(d["steps"]) if i != 3)
    assert dec["gpu_busy_ms"] == pytest.approx(nine + split["decode"]["gpu_ms"])
    assert pre["kernel_ms"] + dec["kernel_ms"] == pytest.approx(
        sum(p["kernel_ms"] for p in _data(base)["phases"].values())
    )
    # Decode step time counts the mixed step whole: decoding requests waited for all of it.
    assert d["metrics"]["decode_step_ms"]["p50"] == pytest.approx(
        float(np.percentile([s["duration_ms"] for s in d["steps"]], 50))
    )
    # Tokens/s over the step's whole duration: its 512 prompt tokens (and 4 decode tokens)
    # exist only when the whole step has run. Dividing by the phase's share of the step's
    # GPU time instead (the old figure) inflates decode tokens/s about a hundredfold here.
    assert d["metrics"]["prefill_tokens_per_s"] == pytest.approx(512 / (step["duration_ms"] / 1e3))
    others = sum(s["duration_ms"] for i, s in enumerate(d["steps"]) if i != 3)
    assert d["metrics"]["decode_tokens_per_s"] == pytest.approx(4 * 10 / ((others + step["duration_ms"]) / 1e3))


def test_mixed_figures_are_marked_in_the_report():
    from tracekit.report.view import phase_rows

    d = _data(_with_annotation(read_real("gb10_vllm"), 3, MIXED))
    rows = {r["phase"]: r for r in phase_rows(d)}
    assert "mixed" in rows["prefill"]["label"] and "mixed" in rows["decode"]["label"]
    assert "1 mixed step" in rows["decode"]["mixed_note"]
    # The steps column counts the mixed step (it used to read "0" for prefill).
    assert rows["prefill"]["steps"] == "0 + 1 mixed" and rows["decode"]["steps"] == "9 + 1 mixed"


def test_a_malformed_annotation_is_a_note_and_its_phase_comes_from_evidence():
    d = _data(_with_annotation(read_real("gb10_vllm"), 0, "execute_context_0(0)_generation_x(4)"))
    assert d["steps"][0]["phase"] == "decode"  # graphs replayed, as the other nine
    notes = d["provenance"]["notes"]
    assert any("does not follow" in n and "ignored" in n for n in notes)


# --- devices and ranks ----------------------------------------------------------------------


def _renumbered(trace, names):
    """The kernels ran on device 6; deviceProperties list devices 0-3 with these names."""
    props = next(iter(trace.devices.values()))
    devices = {i: {**props, "id": i, "name": n} for i, n in enumerate(names)}
    kernels = trace.kernels.assign(device=6)
    return dataclasses.replace(trace, devices=devices, kernels=kernels)


def test_renumbered_devices_resolve_when_all_listed_devices_agree():
    trace = _renumbered(read_real("mi300x_qwen3_moe"), ["AMD Instinct MI300X"] * 4)
    d = _data(trace)
    assert d["device"]["spec_key"] == "mi300x"
    assert "device 6" in d["device"]["how"] and "renumbered" in d["device"]["how"]


def test_renumbered_devices_of_different_parts_stay_unknown():
    trace = _renumbered(read_real("mi300x_qwen3_moe"), ["AMD Instinct MI300X"] * 3 + ["AMD Instinct MI325X"])
    d = _data(trace)
    assert d["device"]["spec"] is None and "not all the same part" in d["device"]["reason"]


@pytest.mark.parametrize(
    "key, tag, choices",
    [
        ("mi300x_qwen3_moe", "gfx942", ["--gpu mi300x", "--gpu mi325x"]),
        ("b300_qwen3_moe", "sm_103", ["--gpu b300"]),
        ("gb10_vllm", "sm_120", ["--gpu gb10", "--gpu rtx-5090"]),
    ],
)
def test_without_device_properties_kernel_tags_name_the_family(key, tag, choices):
    trace = dataclasses.replace(read_real(key), devices={})
    d = _data(trace)
    assert d["device"]["spec"] is None
    reason = d["device"]["reason"]
    assert tag in reason and all(c in reason for c in choices)


def test_rank_and_world_size_from_sglang_file_names(tmp_path):
    src = real_trace_path("b300_qwen3_moe")
    with gzip.open(src, "rt") as f:
        data = json.load(f)
    data.pop("distributedInfo")
    for rank in (0, 1):
        data["traceEvents"] = data["traceEvents"][: len(data["traceEvents"]) - rank]  # rank 1: not a copy
        with gzip.open(tmp_path / f"1782799835.6885648-TP-{rank}-DECODE.trace.json.gz", "wt") as f:
            json.dump(data, f)
    t = read_trace(tmp_path / "1782799835.6885648-TP-1-DECODE.trace.json.gz")
    assert (t.distributed["rank"], t.distributed["world_size"]) == (1, 2)
    assert "file name" in t.lacks["distributed"]
    both = read_trace(tmp_path)
    assert sorted(both.kernels["rank"].unique()) == [0, 1]
