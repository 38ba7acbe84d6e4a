"""Shared test fixtures: where the real traces live, and skipping when they don't."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

# Every analysis the suite runs (in process or through the CLI's subprocesses) raises when
# its books do not balance (tracekit.analysis.books), instead of carrying a note.
os.environ["TRACEKIT_STRICT_BOOKS"] = "1"

# The cache of read traces and analyses (tracekit.cache) never touches the user's own: the
# session's processes share a folder of their own until ``_own_cache`` gives each test an
# empty one, so no test sees what another kept and the suite runs the same in any order.
_SESSION_CACHE = tempfile.mkdtemp(prefix="tracekit-test-cache-")
atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)
os.environ["TRACEKIT_CACHE_DIR"] = _SESSION_CACHE
os.environ.pop("TRACEKIT_NO_CACHE", None)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACES = ROOT.parent / "shared" / "traces"
SAMPLE_TRACES = ROOT / "sample_traces"

# Short names for the real traces in ../shared/traces (see PROVENANCE.md there).
REAL = {
    "h100_hf": "h100_hf-qwen1.5-0.5b_forward_bs16.json.gz",
    "mi300x_hf": "mi300x_hf-qwen1.5-0.5b_forward_bs16.json.gz",
    "mi300x_extend": "mi300x_sglang-qwen3-8b_extend-step.json.gz",
    "mi300x_decode": "mi300x_sglang-qwen3-8b_decode-step_hipgraph.json.gz",
    "mi300x_capture": "mi300x_sglang-qwen3-8b_decode_graph-capture.json.gz",
    "rtx4080_nanovllm": "rtx4080laptop_nano-vllm_decode.json.gz",
    "a100_particle": "a100_particle-transformer_inference_bs8.pt.trace.json.gz",
    "a100_torchrec": "a100_torchrec_train_cudagraphs.json.gz",
    "a100_dlrm": "a100_dlrm_train.json.gz",
    "a100_nccl": "a100_nccl_train.json.gz",
    "a100_triton": "a100_triton_tiny.json.gz",
    "b300_moe": "b300_moe-microbench.json.gz",
    "mi250_toy": "mi250_rocm6.2_toy_train.json.gz",
    "v100_ddp": "v100_ddp_train_large.json.gz",
    "v100_pt19": "v100_resnet50_train_pt1.9-schema.pt.trace.json.gz",
    "v100_ns": "v100_resnet_ns-timestamps.pt.trace.json.gz",
    # Serving traces as engines record them (see PROVENANCE.md).
    "b200_vllm": "b200_vllm-gpt-oss-120b-tp8_prefill-eager.json.gz",
    "gb10_vllm": "gb10_vllm-qwen3.5-27b-nvfp4_decode-10steps.pt.trace.json.gz",
    "b300_qwen3_moe": "b300_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
    "mi300x_qwen3_moe": "mi300x_sglang-qwen3-30b-a3b_decode-bs16_graph.json.gz",
    "rtx3090_vllm": "rtx3090_vllm-gpt-oss-20b_decode-new-cached.pt.trace.json.gz",
}


def real_trace_path(key: str) -> Path:
    """Path of a real trace from ../shared/traces, or skip the test with the reason."""
    path = SHARED_TRACES / REAL[key]
    if not path.exists():
        pytest.skip(f"real trace {path} is absent (../shared/traces is not beside this checkout)")
    return path


def all_real_traces() -> list[str]:
    return sorted(REAL)


_CACHE: dict = {}


def read_real(key: str):
    """Read a real trace once per test session (reading is the slow part of many tests)."""
    from tracekit import read_trace

    path = real_trace_path(key)
    if key not in _CACHE:
        _CACHE[key] = read_trace(path)
    return _CACHE[key]


# A GPU that tracekit's database does not hold: tests of "unknown device" behaviour
# rename a real trace's device to it.
UNKNOWN_GPU = "NVIDIA GeForce RTX 4070 Laptop GPU"


def with_device_name(trace, name: str = UNKNOWN_GPU):
    """A copy of a trace whose deviceProperties name another GPU (the events are unchanged)."""
    import dataclasses

    return dataclasses.replace(trace, devices={d: {**p, "name": name} for d, p in trace.devices.items()})


# -- a real tensor-parallel run, collected once per session ------------------------------------

# `tracekit collect --tp 2` of the tiny preset on this machine (gloo on the CPU): small prompt,
# 4 decode steps, so that the two rank processes finish in seconds.
TP2_ARGS = ["--tp", "2", "--preset", "tiny", "-b", "1", "-p", "16", "-n", "4", "--warmup", "1", "--no-progress"]


@pytest.fixture(scope="session")
def tp2_collect(tmp_path_factory):
    """(folder, CLI result) of one real ``tracekit collect --tp 2`` run; skips without torch."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from click.testing import CliRunner

    from tracekit.cli import main

    folder = tmp_path_factory.mktemp("tp2") / "run"
    result = CliRunner().invoke(main, ["collect", *TP2_ARGS, "-o", str(folder)])
    assert result.exit_code == 0, result.output
    return folder, result


@pytest.fixture(scope="session")
def tp2_run(tp2_collect):
    """The folder of a real ``collect --tp 2`` run: rank0/rank1 .pt.trace.json.gz plus sidecars."""
    return tp2_collect[0]


def bare_analysis(metrics=None, device=None):
    """An Analysis holding only ``metrics`` and the device, every table empty: for tests of what
    compare and spread make of a run's figures, where the figures are the test's own."""
    import pandas as pd

    from tracekit.analysis.model import Analysis

    work = ["phase", "category", "op_name", "name", "dur_ns", "roof_fraction", "unit", "dtype", "flops", "bound"]
    return Analysis(
        source={"name": "x.json", "path": "x.json"},
        device=device or {"name": "GPU A", "type": "gpu", "spec": "A"},
        workload=None,
        run_kind="inference",
        phase_source="tracekit markers",
        steps=pd.DataFrame(columns=["phase", "tokens", "batch"]),
        work=pd.DataFrame(columns=work),
        phases={},
        metrics=metrics or {},
        findings=[],
        provenance={},
    )


# The kernel of SGLang's overlap scheduler that waits (a stream wait on an event recorded before
# the profile) on the previous batch, which the shared MI300X traces did not record.
HELD_KERNEL = "resolve_future_token_ids"


def unheld(trace):
    """A copy of a trace whose ``HELD_KERNEL`` kernels have lost their launch (as a kernel whose
    call the trace lacks): nothing then shows that the device held them back for unrecorded work
    (``tracekit.analysis.steps.held``), so the synchronous copy queued behind them reads as a copy
    that blocked the host while the GPU idled. A real trace with a one-off blocking copy, for the
    sync cause, its advice and the plan's one-off idle."""
    import dataclasses

    k = trace.kernels
    held = k["name"].astype(str).str.contains(HELD_KERNEL).to_numpy()
    return dataclasses.replace(trace, kernels=k.assign(launch=np.where(held, -1, k["launch"].to_numpy())))


def unheld_trace_path(key: str, folder: Path) -> Path:
    """``unheld`` as a trace file in ``folder``: the ``HELD_KERNEL`` kernels' correlation ids match
    no call."""
    import gzip
    import json

    doc = json.loads(gzip.open(real_trace_path(key)).read())
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and HELD_KERNEL in e.get("name", ""):
            e["args"]["correlation"] = -1
    path = folder / f"unheld-{key}.json"
    path.write_text(json.dumps(doc))
    return path
