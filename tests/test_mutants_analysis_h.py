"""Mutation survivors of the seed-30 sample (round 5b): the step noise of decode tokens/s, the
noise a several-run comparison's interval implies, a gzip stream cut only in its trailer, and the
end times of a lane coarsened by time slices. Expected values are hand arithmetic or facts of
the input built here."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest
from conftest import real_trace_path

from tracekit import read_trace
from tracekit.analysis import truncation
from tracekit.analysis.model import Analysis
from tracekit.analysis.steps import timeline
from tracekit.compare import spread


def _decode(series) -> Analysis:
    """A one-run Analysis holding only decode step times (ms) and 8 tokens per step."""
    s = np.asarray(series, dtype=float)
    return Analysis(
        source={"name": "x.json", "path": "x.json"},
        device={"name": "GPU A", "type": "gpu", "spec": "A"},
        workload=None,
        run_kind="inference",
        phase_source="tracekit markers",
        steps=pd.DataFrame(columns=["phase", "tokens", "batch"]),
        work=pd.DataFrame(columns=["phase", "category", "op_name", "name", "dur_ns"]),
        phases={},
        metrics={
            "tpot_series_ms": list(s),
            "tpot_ms": {
                "mean": float(s.mean()),
                "p50": float(np.percentile(s, 50)),
                "p90": float(np.percentile(s, 90)),
            },
            "decode_tokens_per_s": 8 * 1e3 / float(s.mean()),
        },
        findings=[],
        provenance={},
    )


def test_tokens_per_s_noise_carries_each_sides_relative_step_error():
    """catches: the after side's term of the tokens/s standard error computed from a % (a
    remainder) instead of the rate times its relative step error."""
    # Before: steps 4 and 6 ms (mean 5, sd sqrt 2, relative sd sqrt(2)/5), 8 tokens -> 1600 tok/s.
    # After: steps 8 and 12 ms (mean 10, sd 2 sqrt 2, relative sd sqrt(2)/5) -> 800 tok/s.
    # SE^2 = 1600^2 * (2/25) / 2 + 800^2 * (2/25) / 2 = 102400 + 25600 = 128000.
    se, basis = spread.step_noise("decode_tokens_per_s", _decode([4, 6]), _decode([8, 12]))
    assert se == pytest.approx(math.sqrt(128_000), rel=1e-9)
    assert basis == "step-to-step variation of 2 and 2 decode steps"


def test_several_runs_noise_is_the_intervals_width_over_2_x_1_96():
    """catches: the several-run standard error taken as the interval's width over 2 % 1.96
    (0.04) rather than 2 x 1.96, which makes it ~100 times too large and every change noise."""
    before = [_decode([10.0, 10.2, 9.8, 10.1]), _decode([10.1, 9.9, 10.0, 10.2])]
    after = [_decode([10.3, 10.5, 10.1, 10.4]), _decode([10.4, 10.2, 10.3, 10.5])]
    se, basis = spread.step_noise("tpot_mean", before, after)
    assert "2 and 2 runs" in basis
    # Every step of both sides lies in 9.8..10.5 ms: no standard error of a change of means
    # can reach that 0.7 ms range.
    assert 0 < se < 0.7
    # The documented relation: a 95 % interval spans 2 x 1.96 standard errors.
    lo, hi = spread.change_interval("tpot_mean", before, after)["delta"]
    assert se == pytest.approx((hi - lo) / (2 * 1.96), rel=1e-9)


def test_json_cut_mid_write_marks_the_step_figures_partial(tmp_path):
    """catches: the "JSON is complete" test of a cut trace comparing the parsed and read byte
    counts by identity (``is not``): a trace cut mid-JSON (fewer bytes parsed than read, kernels
    kept) is then taken for a trailer-only cut and its step figures are not marked partial."""
    raw = gzip.decompress(real_trace_path("mi300x_extend").read_bytes())
    cut_at = int(len(raw) * 0.99)  # Kineto writes GPU activity last: a 99 % cut keeps kernels
    path = tmp_path / "late.json"
    path.write_bytes(raw[:cut_at])
    t = read_trace(path)
    cut = t.metadata["truncated"]
    assert cut["bytes_read"] == cut_at and cut["bytes_parsed"] < cut_at  # the tail is a broken event
    assert len(t.kernels) > 0 and not cut["gpu_events_lost"]
    why = truncation.partial_reason(t)
    assert why is not None and "cut mid-write" in why
    metrics: dict = {"tpot_ms": {"mean": 1.0}}
    phases: dict = {"decode": {}}
    truncation.mark_partial(t, metrics, phases, {})
    assert metrics["partial"]["reason"] == why and phases["decode"]["partial"] == why


def test_gzip_cut_only_in_its_trailer_leaves_the_step_figures_whole(tmp_path):
    """catches: a trailer-only cut (every byte of the JSON parsed) called partial, as when the
    byte counts' equality test is negated."""
    raw = gzip.decompress(real_trace_path("h100_hf").read_bytes())
    path = tmp_path / "trailer.json.gz"
    path.write_bytes(gzip.compress(raw, mtime=0)[:-4])  # the CRC is there, the length is not
    t = read_trace(path)
    cut = t.metadata["truncated"]
    assert cut["bytes_parsed"] == cut["bytes_read"] == len(raw)  # every byte of the JSON parsed
    assert truncation.partial_reason(t) is None
    metrics: dict = {"tpot_ms": {"mean": 1.0}}
    phases: dict = {"decode": {}}
    truncation.mark_partial(t, metrics, phases, {})
    assert "partial" not in metrics and "partial" not in phases["decode"]


def test_time_sliced_lane_ends_at_the_last_intervals_end_in_ms():
    """catches: a lane coarsened into time slices (``_buckets``) giving its segments' ends as
    nanoseconds minus 1e6 instead of milliseconds from the lane's start."""
    n = 3 * timeline.MAX_SEGMENTS  # alternating kinds: merging by kind cannot get under the cap
    base = 5_000_000_000  # the lane starts 5 s into the trace
    s = base + np.arange(n, dtype=np.int64) * 1000
    e = s + np.where(np.arange(n) % 2 == 0, 600, 400)
    key = np.array(["gemm" if i % 2 == 0 else "norm" for i in range(n)], dtype=object)
    label = np.array([f"k{i}" for i in range(n)], dtype=object)
    segs = timeline._segments(s, e, key, label, base, int(e[-1] - base))
    assert len(segs.start_ms) <= timeline.MAX_SEGMENTS
    assert sum(segs.count) == n  # coarsened, so no interval lost
    # The last interval starts at (n - 1) us and lasts 400 ns (n - 1 is odd): it ends at
    # 4.4994 ms after the lane's start; the first starts at 0.
    assert segs.start_ms[0] == 0.0
    assert segs.end_ms[-1] == pytest.approx(((n - 1) * 1000 + 400) / 1e6)
    assert all(0 <= a <= b <= segs.end_ms[-1] for a, b in zip(segs.start_ms, segs.end_ms))
