"""A stated figure that contradicts the trace's stronger evidence becomes a note naming both, and
the stronger evidence wins with its reason (issue 46): a step's tokens as its eagerly launched
KV-cache write grids count them (SGLang's ``store_kvcache`` launches one block per token written,
so grid x is the rows the GPU ran; an engine pads a batch) over the tokens its annotation states.
A grid replayed from a CUDA/HIP graph is the size the graph was captured at, not the step's own,
and never overrules.

The shared SGLang traces are rewritten as in tests/test_engine_sums.py (``_relabelled``): their
step range renamed, the vLLM-style range beside it renamed away. The extend step's
``store_kvcache`` launches run eagerly with grid (15,360, 1, 1); the decode step's run inside a
replayed HIP graph (the ROCm trace records no grid for them, so the test gives them the grid a
graph captured at 32 requests launches: (32, 1, 1))."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from test_engine_sums import _relabelled as relabelled

from tracekit.analysis.steps import step_tokens as st
from tracekit.analysis.steps.segment import segment
from tracekit.analysis.steps.table import ANNOTATION_SOURCE
from tracekit.frameworks import BatchSide

GRID = 15360  # the extend step's store_kvcache grid x: 15 requests of 1,024 tokens


def with_kv_write_grid(trace, x: int, graph: bool = True):
    """The trace with its replayed store_kvcache launches given grid (x, 1, 1), and run eagerly
    where ``graph`` is False."""
    k = trace.kernels.copy()
    rows = (k["name"].astype(str).str.contains("store_kvcache") & k["graph"]).to_numpy()
    assert rows.any()
    k.loc[rows, ["grid_x", "grid_y", "grid_z"]] = (x, 1, 1)
    k.loc[rows, "graph"] = graph
    return dataclasses.replace(trace, kernels=k)


def _step(trace):
    [step] = segment(trace).steps.to_dict("records")
    return step


def test_an_eager_kv_write_grid_wins_over_the_stated_tokens():
    """The extend step labelled as stating 15,000 tokens: its eager store_kvcache grid counts
    15,360, so the step's tokens and its prefill side's are 15,360, its tokens_source is the grid,
    and its evidence names both figures and why; its requests stay as stated. Bug caught: the
    annotation's figure always stood, and the grid's count was only a note."""
    step = _step(relabelled("mi300x_extend", "step[EXTEND bs=15 toks=15000]"))
    assert step["tokens"] == GRID and step["batch"] == 15
    assert "store_kvcache" in step["tokens_source"] and f"{GRID:,}" in step["tokens_source"]
    assert step["prefill_side"] == BatchSide(requests=15, tokens=GRID)
    assert "the annotation states 15,000 tokens" in step["evidence"]
    assert f"count {GRID:,}: the grid is what the GPU ran" in step["evidence"]
    assert f"so {GRID:,} is used" in step["evidence"]
    # A grid of fewer rows than the stated requests contradicts them too (each request computes
    # a token at least): the stated tokens stand, with the note.
    few = _step(relabelled("mi300x_extend", "step[EXTEND bs=16000 toks=16000]"))
    assert few["tokens"] == 16000 and few["tokens_source"] == ANNOTATION_SOURCE
    assert f"count {GRID:,} tokens where the annotation states 16,000" in few["evidence"]


def test_the_sums_the_grid_count_contradicts_are_dropped_with_a_note():
    """The label states 15 requests of 1,000 tokens over no cached prefix: Σq² = 15 x 1000² =
    15,000,000 and 15,000 keys. With the grid's 15,360 tokens, Σq² is below its least value
    15,360²/15 = 15,728,640 (requests of one length) and the keys are fewer than the tokens: both
    are dropped (base.consistent), and the note says so. Bug caught: the grid did not win, so
    nothing was checked again."""
    label = "step[EXTEND bs=15 toks=15000 c_sq=15000 c_sqsq=15000000 c_sqsk=15000000 c_sk=15000]"
    step = _step(relabelled("mi300x_extend", label))
    side = step["prefill_side"]
    assert step["tokens"] == GRID and (side.requests, side.tokens) == (15, GRID)
    assert side.sum_q2 is None and side.kv_tokens is None
    assert f"with the grid's {GRID:,} tokens, its prefill side's counts contradict each other" in step["evidence"]
    assert "sum_q2" in step["evidence"] and "kv_tokens" in step["evidence"]


def test_a_mixed_step_keeps_its_stated_total_and_sides_with_a_note():
    """A MIXED label of 15 context requests of 1,000 tokens and 32 decode requests: 15,032 tokens,
    where the grid counts 15,360. How the grid's rows split between the sides is not known, so the
    step keeps 15,032 and its sides as stated, and the note names both figures. Bug caught: the
    disagreement was a bare note that did not say why the stated figure stands."""
    label = (
        "step[MIXED bs=47 c=15 g=32 c_sq=15000 c_sk=15000 c_sqsq=15000000 c_sqsk=15000000 "
        "g_sq=32 g_sk=32800 g_sqsq=32 g_sqsk=32800]"
    )
    step = _step(relabelled("mi300x_extend", label))
    assert step["phase"] == "mixed" and step["tokens"] == 15032 and step["tokens_source"] == ANNOTATION_SOURCE
    assert step["prefill_side"] == BatchSide(15, 15000, 15000, 15000000, 15000000)
    assert step["decode_side"] == BatchSide(32, 32, 32800, 32, 32800)
    assert "the annotation states 15,032 tokens" in step["evidence"]
    assert f"count {GRID:,}: the grid is what the GPU ran, but how its rows split" in step["evidence"]


def test_a_grid_replayed_from_a_graph_does_not_overrule():
    """The decode step labelled with 24 requests (one token each), its store_kvcache launches
    replayed from a graph captured at 32 (grid x = 32): the step keeps 24 tokens, and the note says
    the grid is the captured size. The same launches run eagerly do overrule (32 tokens): the
    graph flag is what decides. Bug caught: a replayed grid's padded size read as a plain
    contradiction of the annotation (and, were grids to win, it would have won)."""
    trace = relabelled("mi300x_decode", "step[DECODE bs=24]")
    replayed = _step(with_kv_write_grid(trace, 32))
    assert replayed["tokens"] == 24 and replayed["tokens_source"] == ANNOTATION_SOURCE
    assert replayed["decode_side"] == BatchSide(requests=24, tokens=24)
    assert "replayed from a graph" in replayed["evidence"]
    assert "the annotation's figure is kept" in replayed["evidence"]
    eager = _step(with_kv_write_grid(trace, 32, graph=False))
    assert eager["tokens"] == 32 and eager["batch"] == 24
    assert eager["decode_side"] == BatchSide(requests=24, tokens=32)


@pytest.mark.parametrize(
    "rows, launched, replayed",
    [
        # Two eager sources agree (vLLM's KV write and rotary grids, one block per token).
        ([("reshape_and_cache_flash_kernel", 20, False), ("vllm::rotary_embedding_kernel", 20, False)], True, False),
        # They disagree: no figure is strong enough to overrule.
        ([("reshape_and_cache_flash_kernel", 20, False), ("vllm::rotary_embedding_kernel", 24, False)], False, False),
        # One of them was replayed from a graph.
        ([("reshape_and_cache_flash_kernel", 20, True), ("vllm::rotary_embedding_kernel", 20, False)], False, True),
    ],
)
def test_a_tokens_figure_says_whether_eager_grids_agree_on_it(rows, launched, replayed):
    """Bug caught: the evidence's figure did not say whether it rests on eagerly launched grids
    that agree (the rows the GPU ran) or on a graph's replayed, padded grid."""
    kernels = st_kernels(rows)
    [c] = st.step_counts(kernels, np.zeros(len(kernels), dtype=np.int64), 1, ["vLLM execute_model frames"])
    assert (c.tokens.launched, c.tokens.replayed) == (launched, replayed)


def st_kernels(rows):
    """A kernel table of one step: (name, grid x, replayed from a graph) per launch."""
    return pd.DataFrame(
        {
            "name": pd.Categorical([r[0] for r in rows]),
            "kind": "kernel",
            "start_ns": np.arange(len(rows), dtype=np.int64) * 1000,
            "grid_x": [r[1] for r in rows],
            "grid_y": 1,
            "grid_z": 1,
            "graph": [r[2] for r in rows],
        }
    )
