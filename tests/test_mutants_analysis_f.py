"""Behaviours of tracekit.analysis that surviving mutants (seed 29) showed no test pinned: how a
comparison says a side's figure was made when it has one run and the other side several, the
activation width a MoE model with dense layers is priced at, the sentence for attention kernels of
a kind the model has no layers of, the "no grid" value (-1) of a CPU-only trace's work table, and
what the merge's step-inference rows keep of a window's annotations. Expected figures are hand
arithmetic on hand-built analyses, work tables and traces, the model registry's own sizes
(DeepSeek-R1: 3 dense layers of width 18432, 8 routed experts of width 2048 per token) and the
trace model's documented -1 for "no grid"."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLE_TRACES, bare_analysis
from kineto import STREAM, Doc

from tracekit import read_trace
from tracekit.analysis.model import Analysis
from tracekit.analysis.pricing import model_costs as mcosts
from tracekit.analysis.pricing import model_fit, taxonomy
from tracekit.analysis.steps.segment import segment
from tracekit.analysis.windows import _StepRows
from tracekit.compare.comparison import compare
from tracekit.models import costs as mc
from tracekit.models import load_model


def _run(series) -> Analysis:
    """A request-level run whose decode steps (TPOT) are ``series`` ms; everything else empty."""
    s = np.asarray(series, dtype=float)
    return bare_analysis(
        {
            "tpot_series_ms": list(s),
            "tpot_ms": {
                "mean": float(s.mean()),
                "p50": float(np.percentile(s, 50)),
                "p90": float(np.percentile(s, 90)),
            },
        }
    )


# --- spread: the bases of a one-run side beside a several-runs side -------------------------------

ONE = [10.0, 11.0, 12.0, 13.0]  # one run of 4 steps
SEVERAL = [[14.0, 15.0, 16.0], [15.0, 16.0, 17.0, 18.0]]  # two runs, 3 + 4 = 7 steps


def test_a_one_run_side_says_one_run_beside_a_side_of_two():
    """catches: the one-run test of ``value_basis`` lost (``len(runs) < 1``), so a side of one
    run of 4 steps is described as "1 runs: over the pooled steps (4 steps)" in the JSON's
    headline basis instead of "one run"."""
    f = compare(_run(ONE), [_run(s) for s in SEVERAL]).figure("tpot_mean")
    assert f["basis"]["before"] == "one run"
    assert f["basis"]["after"] == "2 runs: over the pooled steps (7 steps)"  # 3 + 4 steps pooled


# --- model_costs: a MoE model with dense layers prices activations at the dense width ------------


def _one_step_of(names_and_categories, tokens: int):
    """A work table of one decode step of ``tokens`` tokens holding the given kernels (1 us each,
    no grids), with its category array and the step's sides as the cost model takes them."""
    names = [n for n, _ in names_and_categories]
    work = pd.DataFrame(
        {
            "name": pd.Categorical(names),
            "step": np.zeros(len(names), np.int64),
            "dur_ns": np.full(len(names), 1000, np.int64),
            "start_ns": np.arange(len(names), dtype=np.int64) * 2000,
        }
    )
    category = np.array([c for _, c in names_and_categories], dtype=object)
    steps = pd.DataFrame({"step": [0], "phase": ["decode"], "tokens": [float(tokens)], "batch": [float(tokens)]})
    sides = [{"decode": mc.Side(float(tokens), float(tokens), None, None, float(tokens))}]
    return work, category, steps, sides


def test_an_activation_kernel_of_a_model_with_dense_layers_is_priced_at_the_dense_width():
    """catches: the MoE-only test ``experts and no dense layer`` turned into ``or``, so DeepSeek-R1
    (3 dense layers of its 61) prices its activation kernels at the routed width top_k x expert
    width = 8 x 2048 = 16384 instead of the dense MLP's 18432."""
    model = load_model("deepseek-r1")
    assert model.count(mlp="dense") == 3 and model.intermediate == 18432  # the registry's sizes
    work, category, steps, sides = _one_step_of([("act_and_mul_kernel", taxonomy.ACTIVATION)], tokens=16)
    out = mcosts.price(model, 1, steps, work, category, "tracekit markers", sides=sides)
    # SiLU-and-multiply: 5 FLOPs per output element (silu ~4, the product 1); reads gate and up
    # (2 x 2 bf16 bytes), writes the product (2 bytes): 6 bytes per element, 18432 per token.
    assert out.flops[0] == pytest.approx(5 * 18432 * 16)
    assert out.bytes[0] == pytest.approx(6 * 18432 * 16)
    # A model of MoE layers only (gpt-oss-20b: 24 of 24) is priced at its routed width 4 x 2880.
    oss = load_model("gpt-oss-20b")
    assert oss.count(mlp="dense") == 0 and oss.top_k == 4 and oss.expert_intermediate == 2880
    out = mcosts.price(oss, 1, steps, work, category, "tracekit markers", sides=sides)
    assert out.flops[0] == pytest.approx(5 * 4 * 2880 * 16)


# --- model_costs: attention kernels of a kind the model has no layers of ------------------------


def test_linear_attention_kernels_on_a_model_without_linear_layers_are_named():
    """catches: the "has no such layers" test inverted (``sel.any() and want``), so a trace running
    linear-attention (gated DeltaNet) kernels under --model Llama-3.1-8B (32 full-attention layers,
    no linear ones) passes the layer check silently."""
    llama = load_model("llama-3.1-8b-instruct")
    assert llama.count(attention="linear") == 0 and llama.n_layers == 32
    per_step = {"flash_fwd_kernel": 32, "chunk_gated_delta_rule_fwd_kernel": 24}
    names = [n for n, c in per_step.items() for _ in range(c)] * 3
    step = np.repeat(np.arange(3), sum(per_step.values()))
    work = pd.DataFrame({"step": step.astype(np.int64), "name": pd.Categorical(names)})
    comp = np.array(["attention" if n == "flash_fwd_kernel" else "linear_attention" for n in names], dtype=object)
    problem = model_fit.layer_check(llama, work, comp, pd.DataFrame({"step": range(3)}))
    assert problem is not None and "linear attention kernels" in problem and "no such layers" in problem, problem
    # The full-attention kernels fit its 32 layers: that is the only problem said.
    assert "does not fit" not in problem


# --- segment: a CPU-only trace's work table has no grid -------------------------------------------


def test_a_cpu_only_traces_work_table_says_no_grid_as_minus_one():
    """catches: the grid and block columns of a CPU-only trace's work table (its leaf ops, which
    launch nothing) filled with False (0, a zero-sized grid) instead of the trace model's -1 for
    "the trace has no grid"."""
    path = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    seg = segment(read_trace(str(path)))
    assert seg.device_type == "cpu" and len(seg.work)
    for g in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
        values = seg.work[g].to_numpy()
        assert values.dtype != bool and (values == -1).all(), (g, values[:5])


# --- merge: the step-relevant rows keep the ProfilerStep ranges only ------------------------------


def test_the_step_rows_of_a_window_keep_only_its_cpu_side_profiler_steps(tmp_path):
    """catches: the ProfilerStep filter of ``_StepRows.add`` joined with ``+`` (logical or) instead
    of ``&``, so the light trace gathered over every window (meant to hold a row per launch and the
    ProfilerStep ranges, not every event) keeps each CPU-side annotation too (a serving trace has
    thousands: one per layer per step) and the GPU side's ProfilerStep ranges. Step inference
    filters them out again, so this is the light trace's size, which is the class's purpose."""
    d = Doc()
    d.annotation("ProfilerStep#1", 0.0, 100.0)
    d.annotation("decoder_layer", 10.0, 20.0)
    ext = d.op("aten::mm", 12.0, 5.0)
    d.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 13.0, 30.0, 10.0, ext=ext)
    d.events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "ProfilerStep#1",
            "pid": 0,
            "tid": STREAM,
            "ts": 30.0,
            "dur": 10.0,
            "args": {},
        }
    )
    t = read_trace(str(d.write(tmp_path / "w.json")))
    assert len(t.annotations) == 3  # the trace holds all three ranges
    rows = _StepRows()
    rows.add(t, 0)
    ann = rows.trace().annotations
    assert list(ann["name"].astype(str)) == ["ProfilerStep#1"] and list(ann["side"].astype(str)) == ["cpu"]
