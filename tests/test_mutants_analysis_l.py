"""Behaviours of tracekit.analysis that surviving mutants of the seed-35 sample showed no test
pinned: a step's bytes, attention pairs per layer, the launch a launch-bound finding names, a
timeline's step duration.
Expected values are hand arithmetic over hand-built tables, never the output under test."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis.analyze import _steps_with_attribution


def test_a_steps_bytes_are_its_priced_kernels_and_unknown_when_none_is_priced():
    """catches: the per-step byte sum's min_count changed: 0 gives a step whose only kernel has
    unknown bytes 0 bytes (and so an MBU of 0) instead of unknown; 2 leaves a step of one priced
    kernel unknown. Three steps of 1 us: step 0 has kernels of 1,000 B and unknown bytes (its
    priced part, 1,000 B), step 1 one kernel of unknown cost, step 2 one kernel of 7,000 B: at a
    7 GB/s peak, 7,000 B in 1 us is 7 GB/s, an MBU of 1."""
    steps = pd.DataFrame({"step": [0, 1, 2], "duration_ns": [1000, 1000, 1000]})
    work = pd.DataFrame(
        {
            "step": [0, 0, 1, 2],
            "dur_ns": [100, 200, 300, 400],
            "flops": [1e6, 2e6, np.nan, 5e6],
            "bytes": [1e3, np.nan, np.nan, 7e3],
            "bound": ["compute", "memory", "memory", "memory"],
            "category": "gemm",
        }
    )
    out = _steps_with_attribution(steps, work, types.SimpleNamespace(peak_bandwidth=7e9))
    assert out["bytes"].iloc[0] == 1000.0 and np.isnan(out["bytes"].iloc[1]) and out["bytes"].iloc[2] == 7000.0
    assert np.isnan(out["flops"].iloc[1]) and out["flops"].iloc[2] == 5e6
    assert np.isnan(out["mbu"].iloc[1]) and out["mbu"].iloc[2] == pytest.approx(1.0, rel=1e-12)
    assert out["unknown_cost_ms"].tolist() == pytest.approx([0.0, 300 / 1e6, 0.0])


def test_attention_per_layer_sums_the_sides_and_averages_over_the_layers_windows():
    """catches: a side's pairs taken as a remainder (`geo[0] % count / n` for `geo[0] * count / n`):
    with one kind of layer the pairs came out 0, and vLLM's unified attention op,
    priced from them, did no FLOPs. By hand: a prefill of 2 requests x 5 tokens (15 causal pairs
    each: 30) and a decode of 1 request over 100 keys (100 pairs) on one layer kind: 130 pairs, 110
    keys. With 1 full layer and 3 sliding ones of window 10, the decode's sliding layers score and
    read 10 keys and the prefill (5 keys a request, inside the window) is as before: pairs
    30 + (100 + 3 x 10) / 4 = 62.5, keys 10 + 32.5 = 42.5."""
    from tracekit.analysis.pricing.model_costs import attention_per_layer
    from tracekit.models import costs as mc
    from tracekit.models.config import DENSE, FULL, SLIDING, Layer, ModelSpec

    sides = {
        "prefill": mc.Side(requests=2, tokens=10, kv_tokens=10, pairs=30, logit_tokens=2),
        "decode": mc.Side(requests=1, tokens=1, kv_tokens=100, pairs=100, logit_tokens=1),
    }
    assert attention_per_layer(None, sides) == (130.0, 110.0, "")
    m = ModelSpec(
        name="tiny",
        source="hand-built",
        model_type="test",
        hidden=64,
        vocab=100,
        heads=4,
        kv_heads=4,
        head_dim=16,
        v_head_dim=16,
        intermediate=128,
        layers=(Layer(FULL, DENSE),) + (Layer(SLIDING, DENSE, window=10),) * 3,
    )
    pairs, keys, note = attention_per_layer(m, sides)
    assert (pairs, keys) == (pytest.approx(62.5), pytest.approx(42.5))
    assert note == " (averaged over the model's 4 layers, sliding windows [10])"


def test_a_launch_bound_graph_replay_names_its_largest_launch():
    """catches: the launch named in a launch-bound finding picked as the first top idle row that is
    not a launch (`!=` for `==`), so a graph-replaying decode's finding named a host copy as the
    launch the GPU waits for. Decode: 10 ms, 6 ms of it waiting for launches (60%, over the 20%
    bar), the top idle rows a host copy (1 ms) then the launches of aten::mm (6 ms)."""
    from conftest import bare_analysis

    from tracekit.analysis.findings import advice

    a = bare_analysis()
    a.steps = pd.DataFrame({"phase": ["decode"] * 4, "graph_replay": [True] * 4, "kernels": [100] * 4})
    a.phases = {
        "decode": {
            "time_ms": 10.0,
            "steps": 4,
            "idle_by_cause": {"sync": 0.0, "launch": 6.0, "host": 1.0, "wait": 0.5, "unattributed": 0.0},
            "idle_top": [
                {"cause": "host", "call": "cudaMemcpyAsync", "op": "aten::copy_", "ms": 1.0, "share": 0.1},
                {"cause": "launch", "call": "cudaLaunchKernel", "op": "aten::mm", "ms": 6.0, "share": 0.6},
            ],
        }
    }
    found = [f for f in advice._idle(a, "decode", a.phases["decode"]) if f.id == "launch-bound"]
    assert len(found) == 1
    assert "although the steps replay a graph" in found[0].text
    assert found[0].text.endswith("(largest: cudaLaunchKernel in aten::mm).")


@pytest.mark.parametrize("key", ["gb10_vllm", "mi300x_decode"])
def test_a_timelines_step_lasts_what_the_steps_table_says(key):
    """catches: a timeline's duration converted from ns by anything but 1e6 (e.g. 999,999: 1e-6
    off, unseen at any tolerance a plot would need): one step's duration is written in two places
    of one report, and one set of books means the two are the same number, ns / 1e6 exactly."""
    from conftest import read_real

    from tracekit.analysis import analyze

    a = analyze(read_real(key))
    d = a.to_dict()
    by_index = {s["index"]: s for s in d["steps"]}
    ns = dict(zip(a.steps["step"], a.steps["duration_ns"]))
    assert d["timelines"]
    for tl in d["timelines"]:
        assert tl["duration_ms"] == by_index[tl["step"]]["duration_ms"] == ns[tl["step"]] / 1e6


@pytest.mark.parametrize("have, said", [((1, 3, 4), "lacks window 2 of 4"), ((1, 4), "lacks windows 2, 3 of 4")])
def test_a_split_missing_windows_names_them_in_the_right_number(tmp_path, have, said):
    """catches: the plural's count wrong (`> 2` for `> 1`): two missing windows read "window 2, 3"."""
    from tracekit.analysis.windows import window_paths
    from tracekit.errors import TracekitError

    for i in have:
        (tmp_path / f"run.window-{i}-of-4.json.gz").write_bytes(b"")
    with pytest.raises(TracekitError) as e:
        window_paths(str(tmp_path))
    assert said + ": a merged report needs every window" in e.value.message, e.value.message
