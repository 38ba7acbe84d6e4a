"""The headline figures of a comparison and the verdict on each: ``better``, ``worse``, ``within
noise`` or ``not comparable``.

``headline_figure(key, before_runs, after_runs)`` gives one figure of the two sides (``HEADLINE``
names them) with its change, its noise and its verdict (the rules in
``tracekit.compare.comparison``'s docstring: ``NOISE_SIGMAS`` standard errors for figures with
per-step samples, ``FLAT_THRESHOLD`` / ``FLAT_POINTS`` for figures measured once per run);
``explain_disagreements`` says why an efficiency verdict disagrees with its latency's. ``num``
and ``fmt`` write the figures in compare's sentences.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from tracekit.analysis.model import Analysis
from tracekit.analysis.pricing.roofline import combined_estimate
from tracekit.compare.spread import as_runs, change_figures, metric_value, side_value, value_basis
from tracekit.formatting import num as fmt_num

NOISE_SIGMAS = 2.0  # standard errors of the difference under which a per-step figure's change counts as noise
FLAT_THRESHOLD = 0.02  # relative change below which a one-sample figure counts as noise
FLAT_POINTS = 0.01  # ... and, for shares (MFU, MBU, idle), absolute change below 1 point

# key -> (label, unit, better direction). Units: "ms", "tok/s", "" (a share, 0..1).
HEADLINE = {
    "ttft_ms": ("TTFT", "ms", "lower"),
    "tpot_p50": ("TPOT p50", "ms", "lower"),
    "tpot_p90": ("TPOT p90", "ms", "lower"),
    "tpot_mean": ("TPOT mean", "ms", "lower"),
    # Serving-engine runs: per-phase step times (the decode step time is the inter-token latency).
    "prefill_step_p50": ("prefill step p50", "ms", "lower"),
    "decode_step_p50": ("decode step p50", "ms", "lower"),
    "decode_step_p90": ("decode step p90", "ms", "lower"),
    "decode_step_mean": ("decode step mean", "ms", "lower"),
    "decode_tokens_per_s": ("decode tokens/s", "tok/s", "higher"),
    "prefill_tokens_per_s": ("prefill tokens/s", "tok/s", "higher"),
    "prefill_mfu": ("prefill MFU", "", "higher"),
    "decode_mbu": ("decode MBU", "", "higher"),
    "prefill_idle_share": ("prefill {word} idle", "", "lower"),
    "decode_idle_share": ("decode {word} idle", "", "lower"),
}


def headline_figure(
    key: str, before: Analysis | Sequence[Analysis], after: Analysis | Sequence[Analysis], word: str = "GPU"
) -> dict[str, Any]:
    """One headline figure of the two sides (each one run or several), with its verdict, noise
    and interval."""
    label, unit, better = HEADLINE[key]
    label = label.format(word=word)
    before, after = as_runs(before), as_runs(after)
    b, a = side_value(before, key), side_value(after, key)
    out: dict[str, Any] = {
        "key": key,
        "label": label,
        "unit": unit,
        "better": better,
        "before": b,
        "after": a,
        "delta": None,
        "relative": None,
        "verdict": "not comparable",
        "noise": None,
        "noise_basis": None,
        "interval": None,
        "reason": None,
        "disagreement": None,
        "basis": {"before": value_basis(before, key), "after": value_basis(after, key)},
        # What each side's figure is when it rests on bounded bytes ("upper": the MBU is at most it).
        "estimate": {"before": _estimate(before, key), "after": _estimate(after, key)},
    }
    if len(before) > 1 or len(after) > 1:
        # Each run's own figure, so that a reader sees the run-to-run spread the interval holds.
        out["runs"] = {"before": [metric_value(r, key) for r in before], "after": [metric_value(r, key) for r in after]}
    if b is None or a is None:
        missing = "before" if b is None else "after"
        out["reason"] = f"the {missing} run has no {label}"
        return out
    out["delta"] = a - b
    out["relative"] = (a - b) / b if b else None
    noise, basis, out["interval"] = change_figures(key, before, after)
    out["noise"] = noise
    if noise is not None:
        meaningful = abs(a - b) >= NOISE_SIGMAS * noise  # "changes under ... count as noise"
        out["noise_basis"] = (
            f"{basis}: changes under {NOISE_SIGMAS:g} standard errors ({fmt(NOISE_SIGMAS * noise, unit, delta=True)}) count as noise"
        )
        lo, hi = (out["interval"] or {}).get("delta") or (None, None)
        if meaningful and lo is not None and hi is not None and lo <= 0 <= hi:
            # One set of books: a verdict never contradicts its own interval. With one run a side the
            # standard error treats steps as independent; the interval's blocks keep their trend
            # (decode steps grow with the KV cache), so where it reaches 0 the change is not shown.
            meaningful = False
            out["noise_basis"] += (
                f"; so does one whose 95% interval ({fmt(lo, unit, delta=True)} to "
                f"{fmt(hi, unit, delta=True)}) reaches 0, as this one's does"
            )
    else:
        rel = out["relative"]
        meaningful = rel is None or abs(rel) >= FLAT_THRESHOLD
        text = f"changes under {FLAT_THRESHOLD:.0%}"
        if unit == "":
            meaningful = meaningful and abs(a - b) >= FLAT_POINTS
            text += f" or {FLAT_POINTS * 100:g} percentage point"
        out["noise_basis"] = f"{basis}: {text} count as noise (a fixed threshold, not a measured variation)"
    if not meaningful:
        out["verdict"] = "within noise"
    else:
        improved = (a < b) if better == "lower" else (a > b)
        out["verdict"] = "better" if improved else "worse"
    return out


# Headline figures built on a phase's bytes, and the phase whose ``mbu_estimate`` says what they are.
_ESTIMATED = {"decode_mbu": "decode"}


def _estimate(runs: Sequence[Analysis], key: str) -> str | None:
    """What a side's figure ``key`` is (``model_costs.ESTIMATES``: "upper", "lower", "model"), as
    each run's phase says it (``combined_estimate`` over the runs); None for an exact one."""
    phase = _ESTIMATED.get(key)
    if phase is None:
        return None
    kinds = [(r.phases.get(phase) or {}).get("mbu_estimate") for r in runs]
    return combined_estimate(kinds, [1.0] * len(kinds))


# An efficiency figure and the latency it should move with: (efficiency, latency, phase, work, peak).
_PAIRS = (
    ("prefill_mfu", ("ttft_ms", "prefill_step_p50"), "prefill", "flops", "matrix FLOP/s"),
    ("decode_mbu", ("tpot_p50", "decode_step_p50"), "decode", "bytes", "bandwidth"),
)


def explain_disagreements(headline: list[dict[str, Any]], before: Analysis, after: Analysis) -> None:
    """When an efficiency verdict disagrees with its latency's (MFU better while TTFT got worse),
    say why in the efficiency figure's ``disagreement``: MFU = work / time / peak, so the work counted
    or the peak it is measured against changed more than the time did."""
    by = {h["key"]: h for h in headline}
    for eff_key, lat_keys, phase, work, peak_name in _PAIRS:
        eff = by.get(eff_key)
        lat = next((by[k] for k in lat_keys if k in by and by[k]["verdict"] in ("better", "worse")), None)
        if eff is None or lat is None or eff["verdict"] not in ("better", "worse") or eff["verdict"] == lat["verdict"]:
            continue
        pb, pa = before.phases.get(phase) or {}, after.phases.get(phase) or {}
        parts = []
        wb, wa = pb.get(work), pa.get(work)
        if wb and wa and abs(wa / wb - 1) > FLAT_THRESHOLD:
            parts.append(
                f"the {'FLOPs' if work == 'flops' else 'bytes'} counted in the phase changed {wa / wb:.2g}x "
                "(different shapes, batch or model)"
            )
        kb, ka = _peak(before, work), _peak(after, work)
        if kb and ka and abs(ka / kb - 1) > FLAT_THRESHOLD:
            parts.append(
                f"the {peak_name} it is measured against changed {ka / kb:.2g}x (different spec rows or "
                "measured ceilings)"
            )
        text = f"{eff['label']} is {eff['verdict']} while {lat['label']} is {lat['verdict']}: " + (
            "; ".join(parts) if parts else "the phase's time counts idle and host time its latency does not"
        )
        eff["disagreement"] = text


def _peak(a: Analysis, work: str) -> float | None:
    dev = a.device or {}
    if work == "bytes":
        return dev.get("peak_bandwidth")
    matrix = (dev.get("peak_flops") or {}).get("matrix") or {}
    return max(matrix.values()) if matrix else None


def num(x: float) -> str:
    """Three significant digits, thousands separated, never exponent notation: 1,003 · 0.0768
    (``formatting.num``); a non-finite figure as Python writes it, not as missing."""
    return fmt_num(x) if math.isfinite(x) else str(x)


def fmt(v: float | None, unit: str, delta: bool = False) -> str:
    """``v`` in its unit as compare's sentences write it: 12.3 ms, 45.6% for a share, +1.2 pp as a change."""
    if v is None:
        return "n/a"
    sign = "+" if delta and v > 0 else ""
    if unit == "":
        return f"{sign}{num(v * 100)} pp" if delta else f"{num(v * 100)}%"
    return f"{sign}{num(v)} {unit}"
