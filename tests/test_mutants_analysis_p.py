"""Behaviours of tracekit.analysis that surviving mutants of the seed-40 module survey and the
seed-41 sample showed no test pinned. Expected figures are hand arithmetic on hand-built inputs and
the model registry's own sizes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis.pricing import model_costs as mcosts
from tracekit.analysis.pricing import taxonomy
from tracekit.models import costs as mc
from tracekit.models import load_model

# --- model_costs: a sampler with no recorded shapes, priced by the model ------------------------


def test_a_sampler_without_shapes_reads_every_logit_token_in_fp32():
    """catches: the sampler's logit bytes ``* 4.0`` (fp32) turned into ``// 4.0``, so a sampler
    kernel of a trace without shapes is priced as reading a quarter-byte per logit, and its
    intensity (FLOPs / bytes) reads 16x too high: a memory-bound reduction drawn as compute-bound.
    Llama-3.1-8B's vocabulary is 128,256 (its config); a decode step of 8 requests has 8 logit
    tokens, so argmax reads 8 x 128,256 fp32 logits = 4,104,192 bytes and does one compare each."""
    model = load_model("llama-3.1-8b-instruct")
    assert model.vocab == 128256
    names = ["void at::native::reduce_kernel<512, 1, ArgMaxOps<float>>"]
    work = pd.DataFrame(
        {
            "name": pd.Categorical(names),
            "step": np.zeros(1, np.int64),
            "dur_ns": np.full(1, 5000, np.int64),
            "start_ns": np.zeros(1, np.int64),
        }
    )
    category = np.array([taxonomy.SAMPLING], dtype=object)
    steps = pd.DataFrame({"step": [0], "phase": ["decode"], "tokens": [8.0], "batch": [8.0]})
    sides = [{"decode": mc.Side(8.0, 8.0, None, None, 8.0)}]
    out = mcosts.price(model, 1, steps, work, category, "tracekit markers", sides=sides)
    assert out.component[0] == "sampling"
    assert out.flops[0] == pytest.approx(8 * 128256)
    assert out.bytes[0] == pytest.approx(8 * 128256 * 4)  # 4,104,192: fp32 logits
    assert out.unit[0] == mc.VECTOR and out.reason[0] is None
