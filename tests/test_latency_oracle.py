"""The report's latency metrics, recomputed from its own steps table by the definitions in
docs/json-schema.md and ``provenance.formulas``.

The steps table itself is checked against the raw trace events elsewhere
(tests/test_report_oracle.py); here every headline latency figure must follow from it:

- ``decode_step_ms`` / ``prefill_step_ms``: mean and the 50th, 90th and 99th percentiles
  (linear interpolation between closest ranks) of the durations of the steps holding that
  phase's work, mixed steps whole; ``decode_step_series_ms`` those durations in step order;
- request-level runs: ``ttft_ms`` is the first prefill step's duration, ``tpot_ms`` the
  statistics of the decode steps' durations; engine runs give neither;
- ``tpot_growth``: the median of the last quarter of the decode series over the first
  quarter's (a quarter is at least one step), minus 1; ``tpot_slope_ms_per_step`` the least
  squares slope of the series against the step index (3 steps or more);
- tokens/s of a phase: its tokens (a decode step's batch, one token per request; a prefill
  step's tokens; a split mixed step's side) over the durations of the steps holding them;
- launch overhead per decode step: the launch-caused idle of the steps holding decode work,
  averaged; its share: their sum over those steps' durations.

Fails if a figure is taken over the wrong steps (mixed ones left out, prefill ones let in), in
the wrong unit, by another percentile rule, or from another phase's tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import SAMPLE_TRACES, read_real

from tracekit import read_trace
from tracekit.analysis import analyze

SERVING = [
    "rtx3090_vllm",
    "gb10_vllm",
    "b300_qwen3_moe",
    "mi300x_qwen3_moe",
    "mi300x_extend",
    "mi300x_decode",
    "rtx4080_nanovllm",
    "b200_vllm",
    "h100_hf",
]
SAMPLES = ["tiny-bs1", "tiny-bs8"]


def _percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), written out."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _stats(xs: list[float]) -> dict[str, float]:
    return {
        "mean": sum(xs) / len(xs),
        "p50": _percentile(xs, 50),
        "p90": _percentile(xs, 90),
        "p99": _percentile(xs, 99),
    }


def _slope(ys: list[float]) -> float:
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def _close(got, want, rel=1e-9):
    if want is None:
        return got is None
    if isinstance(want, dict):
        return got is not None and set(got) == set(want) and all(_close(got[k], want[k], rel) for k in want)
    if isinstance(want, list):
        return got is not None and len(got) == len(want) and all(_close(g, w, rel) for g, w in zip(got, want))
    return got is not None and math.isclose(got, want, rel_tol=rel, abs_tol=1e-12)


def _report(key: str) -> dict:
    if key in SAMPLES:
        path = SAMPLE_TRACES / f"{key}.pt.trace.json.gz"
        if not path.exists():
            pytest.skip(f"{path} is absent")
        return analyze(read_trace(str(path))).to_dict()
    return analyze(read_real(key)).to_dict()


def _tokens(s: dict, phase: str) -> float | None:
    if s["phase"] == phase:
        n = s["batch"] if phase == "decode" and s["batch"] is not None else s["tokens"]
        return n if n is not None else (s.get(phase) or {}).get("tokens")
    side = (s.get("split") or {}).get(phase)
    return side.get("tokens") if side else None


@pytest.mark.parametrize("key", SERVING + SAMPLES)
def test_latency_metrics_follow_from_the_steps(key):
    d = _report(key)
    steps, m = d["steps"], d["metrics"]
    engine = m["latency_semantics"] == "engine steps"
    holds = {p: [s for s in steps if s["phase"] in (p, "mixed")] for p in ("prefill", "decode")}
    for p in ("prefill", "decode"):
        durations = [s["duration_ms"] for s in holds[p]]
        assert _close(m[f"{p}_step_ms"], _stats(durations) if durations else None), p
    assert _close(m["decode_step_series_ms"], [s["duration_ms"] for s in holds["decode"]])

    prefill = [s for s in steps if s["phase"] == "prefill"]
    decode = [s["duration_ms"] for s in steps if s["phase"] == "decode"]
    series = [s["duration_ms"] for s in steps if s["phase"] == "decode" or (engine and s["phase"] == "mixed")]
    if engine:
        assert m["ttft_ms"] is None and m["tpot_ms"] is None and m["tpot_series_ms"] == []
    else:
        assert _close(m["ttft_ms"], prefill[0]["duration_ms"] if prefill else None)
        assert _close(m["tpot_ms"], _stats(decode) if decode else None)
        assert _close(m["tpot_series_ms"], decode)
    if len(series) >= 3:
        q = max(1, len(series) // 4)
        first, last = float(np.median(series[:q])), float(np.median(series[-q:]))
        assert _close(m["tpot_growth"], last / first - 1)
        assert _close(m["tpot_slope_ms_per_step"], _slope(series), rel=1e-6)
    else:
        assert m["tpot_growth"] is None and m["tpot_slope_ms_per_step"] is None

    for p in ("prefill", "decode"):
        mine = [s for s in steps if s["phase"] == p or s.get("split")]
        tokens = [_tokens(s, p) for s in mine]
        want = None
        if mine and all(t is not None for t in tokens):
            want = sum(tokens) / (sum(s["duration_ms"] for s in mine) / 1e3)
        assert _close(m[f"{p}_tokens_per_s"], want), (p, m[f"{p}_tokens_per_s"], want)

    gpu = d["device"].get("type") == "gpu"
    if gpu and (decode or any(s.get("split") for s in steps)):
        gaps = [s["launch_gap_ms"] for s in holds["decode"]]
        assert _close(m["launch_overhead_ms_per_decode_step"], sum(gaps) / len(gaps))
        assert _close(m["launch_overhead_share_of_decode"], sum(gaps) / sum(s["duration_ms"] for s in holds["decode"]))
    else:
        assert m["launch_overhead_ms_per_decode_step"] is None


def test_a_decode_step_generates_one_token_per_request_whatever_tokens_it_computed():
    """A decode step that computed more tokens than it has requests (draft tokens verified, as
    speculative decoding does) still yields one token per request: decode tokens/s counts the
    batch. The tiny-bs8 sample with its decode markers restated as ``tokens=16``: the same 8 per
    step over the same durations. Fails if the step's computed tokens are counted instead."""
    import dataclasses

    path = SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    trace = read_trace(str(path))
    ann = trace.annotations.copy()
    names = ann["name"].astype(str)
    restated = names.str.replace(r"^(tracekit::decode#\d+ bs=8) tokens=8", r"\1 tokens=16", regex=True)
    assert (restated != names).sum() == 16
    ann["name"] = restated.astype("category")
    d = analyze(dataclasses.replace(trace, annotations=ann)).to_dict()
    decode = [s for s in d["steps"] if s["phase"] == "decode"]
    assert {s["tokens"] for s in decode} == {16} and {s["batch"] for s in decode} == {8}
    want = 8 * len(decode) / (sum(s["duration_ms"] for s in decode) / 1e3)
    assert d["metrics"]["decode_tokens_per_s"] == pytest.approx(want, rel=1e-12)
