"""How much a compared figure moves by chance: its value over one or several runs of a side,
and the bootstrap interval (and standard error) of its change.

``tracekit.compare.verdicts`` asks this module three things per headline figure:

* ``side_value(runs, key)``: the figure of one side. One run: the run's own figure. Several
  runs of the same workload: a per-step figure (TPOT, decode step time, decode tokens/s) is
  computed on the **pooled steps** of all the runs (percentiles and means over every step;
  tokens/s as all tokens over all step time), a figure measured once per run (TTFT, MFU, MBU,
  idle shares) is the **median of the per-run figures**. ``value_basis`` says which.
* ``change_interval(key, before_runs, after_runs)``: the 95 % interval of the change. One run
  per side: a circular block bootstrap of each run's steps (the spread *within* the run; a
  shift of a whole run is not in it). Several runs on a side: a **hierarchical bootstrap**:
  each resample draws that side's runs with replacement, then blocks of steps within each
  drawn run, and pools them; so a shift of a whole run, which moves one run's steps together,
  is in the interval.
* ``step_noise(key, ...)``: the standard error of the change that compare's verdicts use.

Everything is seeded, so the same traces always give the same interval.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Sequence

import numpy as np

from tracekit.analysis.model import Analysis

BOOTSTRAP = 1000  # resamples for the noise of TPOT percentiles and for each change's interval
INTERVAL = 0.95  # the confidence of the interval reported with each per-step change
# Largest (resamples x pooled steps) array built at once by the hierarchical bootstrap: a side of
# several long serving runs would otherwise need gigabytes at once.
CHUNK_CELLS = 4_000_000

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


def metric_value(a: Analysis, key: str) -> float | None:
    """One run's headline figure ``key`` (``tracekit.compare.verdicts.HEADLINE``), or None."""
    m = a.metrics
    if key.startswith("tpot_"):
        return (m.get("tpot_ms") or {}).get(key[5:])
    for phase in ("prefill", "decode"):
        if key.startswith(f"{phase}_step_"):
            return (m.get(f"{phase}_step_ms") or {}).get(key[len(phase) + 6 :])
    if key.endswith("_idle_share"):
        return (m.get("idle_share") or {}).get(key[: -len("_idle_share")])
    return m.get(key)


def per_step(key: str) -> bool:
    """Whether ``key`` is computed from per-step decode times (and so can have an interval)."""
    return key.startswith(("tpot_", "decode_step_")) or key == "decode_tokens_per_s"


def step_series(a: Analysis, key: str) -> np.ndarray:
    """The per-step times (ms) a figure is computed from: the decode steps of a request-level run
    (``tpot_series_ms``), every step holding decode work for the decode step time. Decode tokens/s
    uses the TPOT steps where the run has them, else (a serving-engine trace, which has no TPOT)
    the decode step series, the same steps its tokens/s is measured over."""
    m = a.metrics
    if key.startswith("decode_step_"):
        series = m.get("decode_step_series_ms") or m.get("tpot_series_ms")
    else:
        series = m.get("tpot_series_ms") or (m.get("decode_step_series_ms") if key == "decode_tokens_per_s" else None)
    return np.asarray(series or [], dtype=float)


def side_series(runs: Sequence[Analysis], key: str) -> list[np.ndarray] | None:
    """Each run's step series for ``key`` when there are enough steps to resample: one run needs
    2 steps; several runs need 1 each (the runs themselves then carry the variation)."""
    if not per_step(key) or any(metric_value(a, key) is None for a in runs):
        return None
    series = [step_series(a, key) for a in runs]
    need = 2 if len(runs) == 1 else 1
    return series if all(len(s) >= need for s in series) else None


def side_value(runs: Sequence[Analysis], key: str) -> float | None:
    """The side's figure: the run's own with one run; with several, pooled steps for a per-step
    figure, else the median of the per-run figures (None when a run lacks it)."""
    if len(runs) == 1:
        return metric_value(runs[0], key)
    values = [v for v in (metric_value(a, key) for a in runs) if v is not None]
    if len(values) < len(runs):
        return None
    series = side_series(runs, key)
    if series is None:
        return float(np.median(values))
    if key == "decode_tokens_per_s":
        # All tokens over all step time: each run's tokens are its rate times its step time.
        time = np.array([s.sum() for s in series])
        return float((np.array(values) * time).sum() / time.sum()) if time.sum() > 0 else None
    pooled = np.concatenate(series)
    stat = key.rsplit("_", 1)[-1]
    return float(pooled.mean()) if stat == "mean" else float(np.percentile(pooled, PERCENTILES[stat]))


def value_basis(runs: Sequence[Analysis], key: str) -> str:
    """How the side's figure was made, for the JSON's ``headline[].basis``."""
    if len(runs) == 1:
        return "one run"
    if side_series(runs, key) is not None:
        n = sum(len(s) for s in side_series(runs, key) or [])
        what = "all tokens over all step time" if key == "decode_tokens_per_s" else "over the pooled steps"
        return f"{len(runs)} runs: {what} ({n} steps)"
    return f"{len(runs)} runs: median of the per-run figures"


def interval_basis(nb: Sequence[int], na: Sequence[int]) -> str:
    """What an interval resampled, given the step counts of each side's runs."""

    def side(n: Sequence[int]) -> str:
        return f"{sum(n)} steps" if len(n) == 1 else f"{len(n)} runs ({sum(n)} steps)"

    if len(nb) == 1 and len(na) == 1:
        return (
            f"within-run bootstrap of {sum(nb)} and {sum(na)} steps (circular blocks of each run's steps); "
            "a shift of a whole run is not in it: give several runs per side for that"
        )
    return (
        f"hierarchical bootstrap of {side(nb)} and {side(na)}: a side's runs drawn with replacement, "
        "then blocks of steps within each; run-to-run spread included"
    )


# --- resampling --------------------------------------------------------------------------


def block_indices(n: int, rng: np.random.Generator) -> np.ndarray:
    """``BOOTSTRAP`` resamples of ``n`` step indices, drawn as circular blocks of about sqrt(n)
    consecutive steps. Steps are not independent: a stretch of slow steps (another process on
    the core, a clock change) lasts many steps, and resampling single steps would shuffle it
    into every resample and make the interval too narrow; whole blocks keep such stretches."""
    length = max(1, math.ceil(math.sqrt(n)))
    blocks = math.ceil(n / length)
    starts = rng.integers(0, n, (BOOTSTRAP, blocks, 1))
    return ((starts + np.arange(length)) % n).reshape(BOOTSTRAP, blocks * length)[:, :n]


def _replicates(
    key: str, runs: Sequence[Analysis], series: list[np.ndarray], resampled: list[np.ndarray], rng: np.random.Generator
) -> np.ndarray:
    """The side's figure on each of ``BOOTSTRAP`` resamples (``resampled[r]``: run r's block
    resamples, BOOTSTRAP x n_r). One run: row b is resample b. Several: resample b draws the runs
    with replacement and takes, for the j-th draw, its row ``rows[b, j]`` (a random permutation
    per draw, so a run drawn twice contributes two different block resamples)."""
    stat = key.rsplit("_", 1)[-1]
    if len(runs) == 1:
        rb, s = resampled[0], series[0]
        if key == "decode_tokens_per_s":
            # tokens / total step time: a resample's rate scales with 1 / its mean step time.
            return metric_value(runs[0], key) * s.mean() / rb.mean(axis=1)
        return rb.mean(axis=1) if stat == "mean" else np.percentile(rb, PERCENTILES[stat], axis=1)
    r = len(runs)
    pick = rng.integers(0, r, (BOOTSTRAP, r))
    rows = np.stack([rng.permutation(BOOTSTRAP) for _ in range(r)], axis=1)
    counts = np.array([len(s) for s in series], dtype=float)
    if stat == "mean" or key == "decode_tokens_per_s":
        sums = np.stack([x.sum(axis=1) for x in resampled])  # runs x resamples
        time = sums[pick, rows].sum(axis=1)
        if key == "decode_tokens_per_s":
            # Each run's tokens per step stay as measured; the step time is what was resampled.
            per_step_tokens = np.array([metric_value(a, key) * s.mean() for a, s in zip(runs, series)])
            return (per_step_tokens[pick] * counts[pick]).sum(axis=1) / time
        return time / counts[pick].sum(axis=1)
    width = max(len(s) for s in series)
    padded = np.full((r, BOOTSTRAP, width), np.inf)  # padding sorts last and is never reached
    for i, x in enumerate(resampled):
        padded[i, :, : x.shape[1]] = x
    n = counts[pick].sum(axis=1).astype(int)
    out = np.empty(BOOTSTRAP)
    step = max(1, CHUNK_CELLS // (r * width))
    for lo in range(0, BOOTSTRAP, step):
        hi = min(BOOTSTRAP, lo + step)
        pooled = np.sort(padded[pick[lo:hi], rows[lo:hi], :].reshape(hi - lo, r * width), axis=1)
        out[lo:hi] = _sorted_percentile(pooled, n[lo:hi], PERCENTILES[stat])
    return out


def _sorted_percentile(x: np.ndarray, n: np.ndarray, q: float) -> np.ndarray:
    """Per row of ``x`` (sorted, the first ``n[row]`` values real), numpy's default (linear)
    percentile ``q``: what ``np.percentile`` gives on those values, without a Python loop."""
    pos = q / 100 * (n - 1)
    below = np.floor(pos).astype(int)
    above = np.minimum(below + 1, n - 1)
    rows = np.arange(len(x))
    lo, hi = x[rows, below], x[rows, above]
    return lo + (hi - lo) * (pos - below)


# Student's t at 97.5 % (two-sided 95 %) by degrees of freedom; beyond 30, 1.96 + 2.4 / df is
# within 0.002 of it. Only for INTERVAL = 0.95.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """Student's t quantile for a two-sided 95 % interval with ``df`` degrees of freedom."""
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def _run_t_half_width(key: str, before: Sequence[Analysis], after: Sequence[Analysis]) -> float | None:
    """Half-width of the Student-t 95 % interval of the change in the mean of the per-run figures
    (pooled variance of both sides' runs, Rb + Ra - 2 degrees of freedom), or None with one run per
    side. A bootstrap cannot draw a run it has not seen: with 2 or 3 runs a side it understates the
    run-to-run spread, which this bound does not."""
    vb = np.array([metric_value(a, key) for a in before], dtype=float)
    va = np.array([metric_value(a, key) for a in after], dtype=float)
    df = len(vb) + len(va) - 2
    if df < 1 or not (np.isfinite(vb).all() and np.isfinite(va).all()):
        return None
    ss = ((vb - vb.mean()) ** 2).sum() + ((va - va.mean()) ** 2).sum()
    return t975(df) * math.sqrt(ss / df * (1 / len(vb) + 1 / len(va)))


def _estimate(key: str, before: Sequence[Analysis], after: Sequence[Analysis]) -> dict[str, Any] | None:
    """The change's interval and standard error (see ``change_interval`` and ``step_noise``)."""
    vb, va = side_value(before, key), side_value(after, key)
    sb, sa = side_series(before, key), side_series(after, key)
    if vb is None or va is None or sb is None or sa is None:
        return None
    rng = np.random.default_rng(0)
    # Blocks first, runs after: with one run per side the draws are those of the within-run
    # bootstrap alone, so a single-run comparison's interval does not depend on this code path.
    # The sides draw in an order set by their data, not by which is "before": swapped runs give
    # the negated interval and the same verdicts.
    swap = _draw_second(sb) < _draw_second(sa)
    (s1, r1), (s2, r2) = ((sa, after), (sb, before)) if swap else ((sb, before), (sa, after))
    d1 = [s[block_indices(len(s), rng)] for s in s1]
    d2 = [s[block_indices(len(s), rng)] for s in s2]
    x1, x2 = _replicates(key, r1, s1, d1, rng), _replicates(key, r2, s2, d2, rng)
    xb, xa = (x2, x1) if swap else (x1, x2)
    nb, na = [len(s) for s in sb], [len(s) for s in sa]
    tail = (1 - INTERVAL) / 2 * 100
    lo_hi = (tail, 100 - tail)
    delta = [float(x) for x in np.percentile(xa - xb, lo_hi)]
    rel = [float(x) for x in np.percentile(xa / xb - 1, lo_hi)] if np.all(xb > 0) else None
    basis = interval_basis(nb, na)
    half = _run_t_half_width(key, before, after) if len(before) > 1 or len(after) > 1 else None
    if half is not None and (va - vb - half < delta[0] or va - vb + half > delta[1]):
        # Widened to the t interval of the per-run figures where that is wider, on either end.
        delta = [min(delta[0], va - vb - half), max(delta[1], va - vb + half)]
        if rel is not None and vb > 0:
            rel = [min(rel[0], delta[0] / vb), max(rel[1], delta[1] / vb)]
        df = len(before) + len(after) - 2
        basis += (
            f"; widened to the Student-t interval of the per-run figures ({df} degree{'s' * (df != 1)} of "
            "freedom), which is wider: with few runs a bootstrap understates the run-to-run spread"
        )
    several = len(before) > 1 or len(after) > 1
    # With several runs, the standard error the verdicts use is the one the interval implies.
    noise = (delta[1] - delta[0]) / (2 * 1.96) if several else None
    return {
        "interval": {
            "level": INTERVAL,
            "delta": delta,
            "relative": rel,
            "basis": basis,
            "runs": {"before": len(nb), "after": len(na)},
        },
        "noise": noise,
        "steps": (nb, na),
    }


def change_interval(
    key: str, before: Analysis | Sequence[Analysis], after: Analysis | Sequence[Analysis]
) -> dict[str, Any] | None:
    """The ``INTERVAL`` (95 %) bootstrap interval of a per-step figure's change, or None for a
    figure measured once per run (or a side with too few steps).

    ``delta`` is [low, high] in the figure's unit, ``relative`` the same for (after / before - 1),
    both from the pairwise changes of ``BOOTSTRAP`` seeded resamples of each side (see the module
    text: within-run with one run per side, hierarchical with several, widened to the Student-t
    interval of the per-run figures where that is wider); ``basis`` says which."""
    before, after = as_runs(before), as_runs(after)
    if not per_step(key):
        return None
    est = _estimate(key, before, after)
    return est["interval"] if est else None


def step_noise(
    key: str, before: Analysis | Sequence[Analysis], after: Analysis | Sequence[Analysis]
) -> tuple[float | None, str]:
    """Standard error of the change from the per-step samples of both sides, and a sentence saying
    what it is based on (or why there is none). One run per side: from the step variance (means,
    tokens/s) or a bootstrap of the steps (percentiles); several runs: the one the change's
    interval implies (its width over 2 x 1.96), which holds the run-to-run spread too."""
    before, after = as_runs(before), as_runs(after)
    if not per_step(key):
        return None, "one value per run"
    sb, sa = side_series(before, key), side_series(after, key)
    if sb is None or sa is None:
        return None, "fewer than 2 decode steps in a run, so no step-to-step variation"
    if len(before) > 1 or len(after) > 1:
        est = _estimate(key, before, after)
        if est is None:
            return None, "a run lacks the figure"
        nb, na = est["steps"]
        return est["noise"], (
            f"run-to-run and step-to-step variation of {len(nb)} and {len(na)} runs "
            f"({sum(nb)} and {sum(na)} decode steps; from the change's 95% interval)"
        )
    (s_b,), (s_a,), (run_b,), (run_a,) = sb, sa, before, after  # one run per side from here on
    steps = f"step-to-step variation of {len(s_b)} and {len(s_a)} decode steps"
    if key in ("tpot_mean", "decode_step_mean"):
        return math.sqrt(s_b.var(ddof=1) / len(s_b) + s_a.var(ddof=1) / len(s_a)), steps
    if key == "decode_tokens_per_s":
        # The rate is tokens over total step time: the relative error of the mean step time carries over.
        b = abs(metric_value(run_b, key) or 0.0)
        a = abs(metric_value(run_a, key) or 0.0)
        rb = (s_b.std(ddof=1) / s_b.mean()) if s_b.mean() > 0 else 0.0
        ra = (s_a.std(ddof=1) / s_a.mean()) if s_a.mean() > 0 else 0.0
        return math.sqrt((b * rb) ** 2 / len(s_b) + (a * ra) ** 2 / len(s_a)), steps
    q = PERCENTILES[key.rsplit("_", 1)[-1]]
    return _bootstrap_se(s_b, s_a, q), f"{steps} (bootstrap of the p{q:g})"


def change_figures(
    key: str, before: Sequence[Analysis], after: Sequence[Analysis]
) -> tuple[float | None, str, dict[str, Any] | None]:
    """(standard error, its basis, interval) of the change: ``step_noise`` and ``change_interval``
    with the bootstrap run once."""
    if (len(before) > 1 or len(after) > 1) and per_step(key):
        est = _estimate(key, before, after)
        if est is not None:
            nb, na = est["steps"]
            return (
                est["noise"],
                (
                    f"run-to-run and step-to-step variation of {len(nb)} and {len(na)} runs "
                    f"({sum(nb)} and {sum(na)} decode steps; from the change's 95% interval)"
                ),
                est["interval"],
            )
    noise, basis = step_noise(key, before, after)
    return noise, basis, change_interval(key, before, after)


def _bootstrap_se(sb: np.ndarray, sa: np.ndarray, q: float) -> float:
    rng = np.random.default_rng(0)
    first, second = (sa, sb) if _draw_second([sb]) < _draw_second([sa]) else (sb, sa)  # as in _estimate
    d1 = np.percentile(first[rng.integers(0, len(first), (BOOTSTRAP, len(first)))], q, axis=1)
    d2 = np.percentile(second[rng.integers(0, len(second), (BOOTSTRAP, len(second)))], q, axis=1)
    return float(np.std(d2 - d1, ddof=1))


def _draw_second(series: Sequence[np.ndarray]) -> bytes:
    """A side's key for the order the sides draw their resamples in: a digest of its step times.
    The side with the smaller key draws second; equal data draw in the given order."""
    h = hashlib.blake2b(digest_size=16)
    for x in series:
        h.update(np.ascontiguousarray(x, dtype=np.float64).tobytes())
        h.update(b"|")
    return h.digest()


def as_runs(x: Analysis | Sequence[Analysis]) -> list[Analysis]:
    """One analysis or several runs of one side, as a non-empty list."""
    runs = [x] if isinstance(x, Analysis) else list(x)
    if not runs:
        raise ValueError("a side of a comparison needs at least one run")
    return runs
