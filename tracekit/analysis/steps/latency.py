"""Latency figures from the steps table: step times, TTFT/TPOT, throughput, busy/idle.

Step duration is from the CPU start of the step (or the end of the previous step's
work, when the GPU runs behind) to whichever ends last, the CPU range or the step's
last GPU work: that is when the step's token exists; less the time in it the device spent
on work the trace did not record while the step's work waited (``steps.held``), so a step
is measured from the point its own work could start. A figure the trace cannot
support is None, with the reason in ``reasons``; never 0.

Two readings of the same steps, chosen by where the steps came from:

- **request** (tracekit's markers, a user's loop, inferred passes): the steps are one
  batch of sequences from prompt to last token, so the first prefill step is the time
  to first token (TTFT) and each decode step a time per output token (TPOT).
- **engine** (vLLM / SGLang annotations or step frames, the launch pattern): a
  continuous-batching engine's steps serve many requests at different stages, so the
  first prefill step is no request's TTFT. The figures are per-phase step times:
  ``prefill_step_ms`` over the steps holding prefill work and ``decode_step_ms`` (the
  inter-token latency a decoding request sees) over the steps holding decode work, mixed
  steps counting in both; TTFT and TPOT are None, with that reason.

Split mixed steps (``split``) count in each phase's time, busy and idle by the share of
their GPU time that phase holds, so the phases sum to the run; tokens/s per phase is that
phase's tokens over the durations of the steps that hold them (a mixed step's whole
duration: its tokens exist only when it ends).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracekit import frameworks
from tracekit.analysis.steps.segment import DECODE, MIXED, PREFILL, Segmentation

NS_PER_MS = 1e6
REQUEST, ENGINE = "request", "engine steps"

_ENGINE_TTFT = (
    "a serving engine's prefill step is no request's time to first token (requests are batched "
    "continuously); see the prefill step time"
)
_ENGINE_TPOT = "a serving engine's decode steps are read as inter-token latency; see the decode step time"


@dataclass
class Latency:
    semantics: str = REQUEST
    ttft_ms: float | None = None
    tpot_ms: dict[str, float] | None = None  # mean, p50, p90, p99
    # Per decode step, in step order: the series the "decode over time" chart shows.
    tpot_series_ms: list[float] = field(default_factory=list)
    # Per-phase step times (mean, p50, p90, p99) over the steps holding that phase's work.
    prefill_step_ms: dict[str, float] | None = None
    decode_step_ms: dict[str, float] | None = None
    decode_step_series_ms: list[float] = field(default_factory=list)
    # Least-squares slope of decode step time against step index (ms per step):
    # the cost of the growing KV cache, plus noise.
    tpot_slope_ms_per_step: float | None = None
    tpot_growth: float | None = None  # last-quarter median over first-quarter median, minus 1
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float | None = None
    launch_overhead_ms_per_decode_step: float | None = None
    launch_overhead_share_of_decode: float | None = None
    # Per phase: {"steps", "mixed_steps", "time_ms", "gpu_busy_ms", "gpu_idle_ms", "busy_share", "idle_share"}.
    phases: dict[str, dict[str, float | None]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)


def _stats(d: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(d.mean()),
        "p50": float(np.percentile(d, 50)),
        "p90": float(np.percentile(d, 90)),
        "p99": float(np.percentile(d, 99)),
    }


@dataclass(frozen=True)
class Quarter:
    rows: np.ndarray  # positions in the series
    median: float


def quarters(series: np.ndarray) -> tuple[Quarter, Quarter]:
    """The first and last quarter of a step series (at least one step each) and their medians:
    what the step-time trend (``tpot_growth``) and the finding naming its cause compare."""
    n = len(series)
    q = max(1, n // 4)
    head, tail = np.arange(q), np.arange(n - q, n)
    return Quarter(head, float(np.median(series[head]))), Quarter(tail, float(np.median(series[tail])))


def decode_steps(steps, engine: bool) -> np.ndarray:
    """Positions of the steps whose times make the decode series: the decode steps of a
    request-level run; every step holding decode work (mixed ones too) of an engine's."""
    phase = steps["phase"].to_numpy()
    return np.flatnonzero((phase == DECODE) | ((phase == MIXED) & engine))


def step_weights(steps, prefill_fraction: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per phase, each step's share in it: 1 for the phase's own steps, a split mixed step's
    prefill or decode fraction, 0 otherwise."""
    frac = np.full(len(steps), np.nan) if prefill_fraction is None else np.asarray(prefill_fraction, dtype=float)
    split = ~np.isnan(frac)
    phase = steps["phase"].to_numpy()
    return {
        PREFILL: np.where(phase == PREFILL, 1.0, np.where(split, frac, 0.0)),
        DECODE: np.where(phase == DECODE, 1.0, np.where(split, 1.0 - frac, 0.0)),
        MIXED: ((phase == MIXED) & ~split).astype(float),
        "unknown": (phase == "unknown").astype(float),
    }


def latency(
    seg: Segmentation, prefill_fraction: np.ndarray | None = None, launch_ns: np.ndarray | None = None
) -> Latency:
    """``prefill_fraction``: per step, the prefill share of a split mixed step (NaN otherwise);
    ``launch_ns``: per step, the GPU idle time caused by kernel launches (``analysis.waiting.idle``)."""
    out = Latency()
    steps = seg.steps
    why = out.reasons
    if not len(steps):
        reason = "no inference steps were found" + (f" ({seg.notes[0]})" if seg.notes else "")
        for key in (
            "ttft_ms",
            "tpot_ms",
            "decode_tokens_per_s",
            "prefill_tokens_per_s",
            "launch_overhead_ms_per_decode_step",
            "prefill_step_ms",
            "decode_step_ms",
        ):
            why[key] = reason
        return out
    engine = seg.source in frameworks.ENGINE_SOURCES
    out.semantics = ENGINE if engine else REQUEST
    frac = np.full(len(steps), np.nan) if prefill_fraction is None else np.asarray(prefill_fraction, dtype=float)
    split = ~np.isnan(frac)
    phase = steps["phase"].to_numpy()
    dur_ms = steps["duration_ns"].to_numpy() / NS_PER_MS
    weight = step_weights(steps, prefill_fraction)
    holds = {PREFILL: (phase == PREFILL) | (phase == MIXED), DECODE: (phase == DECODE) | (phase == MIXED)}

    # Per-phase step times: every step holding the phase's work, mixed ones whole.
    for p, key in ((PREFILL, "prefill_step_ms"), (DECODE, "decode_step_ms")):
        d = dur_ms[holds[p]]
        if len(d):
            setattr(out, key, _stats(d))
        else:
            why[key] = f"the trace holds no step with {p} work"
    out.decode_step_series_ms = [float(x) for x in dur_ms[holds[DECODE]]]

    pre = np.flatnonzero(phase == PREFILL)
    dec = np.flatnonzero(phase == DECODE)
    if engine:
        why["ttft_ms"], why["tpot_ms"] = _ENGINE_TTFT, _ENGINE_TPOT
    elif len(pre):
        out.ttft_ms = float(dur_ms[pre[0]])
    else:
        why["ttft_ms"] = "the trace holds no prefill step"
    series = dur_ms[decode_steps(steps, engine)]  # the TPOT series, or the engine's decode step times
    if len(dec) and not engine:
        out.tpot_series_ms = [float(x) for x in series]
        out.tpot_ms = _stats(series)
    elif not engine:
        why["tpot_ms"] = "the trace holds no decode step"
    if len(series) >= 3:
        out.tpot_slope_ms_per_step = float(np.polyfit(np.arange(len(series)), series, 1)[0])
        # Quarter medians, not means: one stalled step (a sync, the profiler's flush at the end)
        # in a quarter of a short run would otherwise read as a trend.
        first, last = quarters(series)
        out.tpot_growth = float(last.median / first.median - 1) if first.median > 0 else None
    elif len(series):
        why["tpot_slope_ms_per_step"] = "fewer than 3 decode steps: no trend"

    _throughput(out, steps, phase, split, weight, dur_ms)
    if len(dec) or split.any():
        if seg.device_type == "gpu":
            launch = np.zeros(len(steps)) if launch_ns is None else np.asarray(launch_ns, dtype=float)
            gap_ms = launch[holds[DECODE]] / NS_PER_MS
            d = dur_ms[holds[DECODE]]
            out.launch_overhead_ms_per_decode_step = float(gap_ms.mean())
            out.launch_overhead_share_of_decode = float(gap_ms.sum() / d.sum()) if d.sum() > 0 else None
        else:
            why["launch_overhead_ms_per_decode_step"] = "a CPU-only trace has no device waiting on kernel launches"
    else:
        why["launch_overhead_ms_per_decode_step"] = "the trace holds no decode step"

    busy_ns = steps["gpu_busy_ns"].to_numpy().astype(float)
    idle_ns = steps["gpu_idle_ns"].to_numpy().astype(float)
    for p, w in weight.items():
        if not w.any():
            continue
        busy = float((w * busy_ns).sum())
        idle = float((w * idle_ns).sum())
        window = busy + idle
        out.phases[p] = {
            "steps": int((phase == p).sum()) if p != MIXED else int(((phase == MIXED) & ~split).sum()),
            "mixed_steps": int(split.sum()) if p in (PREFILL, DECODE) else 0,
            "time_ms": float((w * dur_ms).sum()),
            "gpu_busy_ms": busy / NS_PER_MS,
            "gpu_idle_ms": idle / NS_PER_MS,
            "busy_share": busy / window if window else None,
            "idle_share": idle / window if window else None,
            # Out of the steps' time: the device on other work (steps.table's previous_ns, unrecorded_ns).
            **{
                f"{c}_ms": float((w * steps[f"{c}_ns"].to_numpy(dtype=float)).sum()) / NS_PER_MS
                for c in ("previous", "unrecorded", "next")
                if f"{c}_ns" in steps
            },
        }
    return out


def _throughput(out: Latency, steps, phase, split, weight, dur_ms) -> None:
    """Tokens/s per phase: the phase's tokens (split mixed steps: that side's) over the durations
    of the steps holding them."""
    why = out.reasons
    for p, attr, label in (
        (PREFILL, "prefill_tokens_per_s", "prompt tokens"),
        (DECODE, "decode_tokens_per_s", "tokens generated"),
    ):
        mine = np.flatnonzero((phase == p) | split)
        if not len(mine):
            why[attr] = f"the trace holds no {p} step"
            continue
        counts: list[float] = []
        # Columns read once as arrays: a serving run has thousands of steps, and a pandas
        # scalar lookup per step cost more than the rest of the analysis of one.
        sides = steps[f"{p}_side"].tolist()
        batch = steps["batch"].to_numpy(dtype=float)
        step_tokens = steps["tokens"].to_numpy(dtype=float)
        for i in mine.tolist():
            side = sides[i]
            if phase[i] == p:
                if p == DECODE:
                    n = batch[i] if not np.isnan(batch[i]) else step_tokens[i]
                else:
                    n = step_tokens[i]
                if np.isnan(n) and side is not None and side.tokens is not None:
                    n = side.tokens
            else:
                n = side.tokens if side is not None and side.tokens is not None else np.nan
            counts.append(n)
        tokens = np.array(counts, dtype=float)
        # Over the whole duration of every step holding them: a mixed step's tokens exist
        # only when the whole step has run, not after its phase's share of the GPU time.
        secs = float(dur_ms[mine].sum()) / 1e3
        if np.isnan(tokens).any() or secs <= 0:
            why[attr] = (
                f"the number of {label} per {p} step is not in the trace"
                if p == PREFILL
                else "the batch size of the decode steps is not in the trace"
            )
            continue
        setattr(out, attr, float(tokens.sum() / secs))
