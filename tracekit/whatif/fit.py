"""The phase costs of one replica, fitted from the measured steps of a run: ``fit_costs(analyses,
model) -> PhaseCosts``, the prefill time of a prompt and the decode step time of a batch at a
context, with the KV cache, weights and memory that size a replica.

Each phase's time is its measured overhead (time outside GPU busy, one-off idle left out:
``one_off_idle``) plus its measured efficiency x the roofline time of the model's work (or, with
no model, the measured time scaled by tokens and batch). ``tracekit.whatif.plan`` sizes a
deployment from them; its docstring states the whole method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tracekit import formatting as fmt
from tracekit.analysis.model import Analysis
from tracekit.errors import TracekitError
from tracekit.models import ModelSpec
from tracekit.models.costs import Missing, Side, equal_length_pairs, kv_bytes_per_token, step_costs, weight_bytes

# Sync idle is the host blocked while the GPU runs none of the step's work. A synchronous copy of a
# step's inputs (kilobytes) blocks for tens of microseconds; sync idle over half the step's GPU busy
# time and over a millisecond is a wait on something else. Shown by at most ONE_OFF_SHARE of a
# phase's steps (or in its only step), it is a one-off of the profiled moment.
ONE_OFF_SYNC_OVER_BUSY = 0.5
ONE_OFF_SYNC_MIN_MS = 1.0
ONE_OFF_SHARE = 0.5


@dataclass
class PhaseCosts:
    """How long one prefill and one decode step take on one replica, and what fits in it."""

    prefill_s: Callable[[float], float]  # prompt tokens of one request -> seconds
    decode_s: Callable[[float, float], float]  # (batch, mean context) -> seconds per step
    device: str
    tp: int = 1
    kv_bytes_per_token: float | None = None  # per replica
    weights_bytes: float | None = None  # per replica
    memory_bytes: float | None = None  # per replica
    basis: dict[str, Any] = field(default_factory=dict)  # how each was fitted, for the report
    notes: list[str] = field(default_factory=list)


def fit_costs(
    analyses: list[Analysis],
    model: ModelSpec | None,
    memory_gb: float | None = None,
    kv_bytes: float | None = None,
    keep_idle: bool = False,
) -> PhaseCosts:
    """Phase costs of one replica from the prefill and decode steps of ``analyses``, all on
    one device; ``model`` gives the roofline of other token counts and batches. One-off idle
    (``one_off_idle``) is left out of the phases' overhead unless ``keep_idle``."""
    views = [a.to_dict() for a in analyses]
    pre = [(a, s) for a, v in zip(analyses, views) for s in _steps(v, "prefill")]
    dec = [(a, s) for a, v in zip(analyses, views) for s in _steps(v, "decode")]
    if not pre or not dec:
        missing = "prefill" if not pre else "decode"
        raise TracekitError(
            f"plan needs prefill and decode steps (in one trace or across several); the traces hold no {missing} step"
        )
    a0 = analyses[0]
    mixed = sum(bool(s.get("mixed_part")) for _, s in pre + dec)
    devices = {a.device.get("spec") or a.device.get("name") for a in analyses}
    if len(devices) > 1:
        raise TracekitError(
            f"the traces ran on different GPUs ({', '.join(sorted(map(str, devices)))}); "
            "pass --gpu NAME to project them all onto one"
        )
    peaks = a0.device.get("peak_flops") or {}
    bw = a0.device.get("peak_bandwidth")
    if not (peaks and bw):
        raise TracekitError(
            f"plan needs the device's peaks, and {a0.device.get('name')} has none "
            f"({a0.device.get('reason') or 'no spec row'}); pass --gpu NAME"
        )
    tp = int((a0.model or {}).get("tp") or 1)
    notes: list[str] = []
    if mixed:
        notes.append(
            f"{mixed} part{'s' if mixed != 1 else ''} of mixed steps counted by their split (each side's "
            "share of the step's GPU time, duration and idle)"
        )
    kvb = kv_bytes or (1.0 if str((a0.model or {}).get("kv_cache_dtype") or "").startswith("fp8") else 2.0)

    def peak(dtype: str, unit: str) -> float | None:
        # A GPU without bf16 (V100, T4: their rows list fp16 matrix peaks only) runs half-precision
        # work in fp16, at that peak; fp32 only where neither half type is listed.
        by = peaks.get(unit) or {}
        return by.get(dtype) or by.get("bf16") or by.get("fp16") or by.get("fp32")

    basis: dict[str, Any] = {}
    kv_tok: float | None
    weights: float | None
    if model is not None:

        def roof(side: Side) -> float:
            total = 0.0
            for w in step_costs(model, side, tp=tp, kv_bytes=kvb, act_dtype=model.dtype).values():
                if isinstance(w, Missing):
                    continue
                f = peak(w.dtype, w.unit)
                total += max(w.flops / f if f else 0.0, w.bytes / bw)
            return total

        rp = [roof(_prefill_side(s)) for _, s in pre]
        rd = [roof(_decode_side(s, a)) for a, s in dec]
        eff_p = sum(s["gpu_busy_ms"] for _, s in pre) / 1e3 / sum(rp)
        eff_d = sum(s["gpu_busy_ms"] for _, s in dec) / 1e3 / sum(rd)

        def prefill_s(n: float) -> float:
            return over_p + eff_p * roof(Side(1, n, n, n * (n + 1) / 2, 1))

        def decode_s(b: float, ctx: float) -> float:
            return over_d + eff_d * roof(Side(b, b, b * ctx, b * ctx, b))

        basis["fit"] = f"the roofline of {model.name} at {a0.device.get('spec')}'s peaks x the measured efficiency"
        kv_tok = kv_bytes_per_token(model, tp, kvb) * tp  # a replica holds all ranks' shares
        weights = weight_bytes(model, tp) * tp
    else:
        n_p = np.array([s["tokens"] or 0 for _, s in pre], dtype=float)
        busy_p = np.array([s["gpu_busy_ms"] for _, s in pre]) / 1e3
        per_token = busy_p.sum() / n_p.sum() if n_p.sum() else None
        if per_token is None:
            raise TracekitError("the prefill steps do not say how many tokens they hold; pass --model NAME")
        flops_d = np.array([s.get("flops") or np.nan for _, s in dec], dtype=float)
        bytes_d = np.array([s.get("bytes") or np.nan for _, s in dec], dtype=float)
        b_d = np.array([_batch(s) for _, s in dec], dtype=float)
        busy_d = np.array([s["gpu_busy_ms"] for _, s in dec]) / 1e3
        eff_p = eff_d = None

        def prefill_s(n: float) -> float:
            return over_p + per_token * n

        if np.isnan(flops_d).any() or np.isnan(bytes_d).any():
            mean_busy = float(busy_d.mean())

            def decode_s(b: float, ctx: float) -> float:
                return over_d + mean_busy

            notes.append(
                "without a model the decode step time is taken as the measured one at every batch; "
                "pass --model NAME to scale it"
            )
        else:
            f = peak("bf16", "matrix")

            def compute_s(flops: float) -> float:
                # No half or fp32 matrix peak listed: FLOPs are not counted, as in roof().
                return flops / f if f else 0.0

            per_req_flops = float((flops_d / b_d).mean())
            fixed_bytes = float(bytes_d.mean())
            eff_d = float(busy_d.sum() / sum(max(compute_s(fl), by / bw) for fl, by in zip(flops_d, bytes_d)))

            def decode_s(b: float, ctx: float) -> float:
                return over_d + eff_d * max(compute_s(per_req_flops * b), fixed_bytes / bw)

            notes.append(
                "without a model decode FLOPs scale with the batch and its bytes stay as measured (the KV "
                "cache's growth is not modelled); pass --model NAME"
            )
        notes.append(
            "without a model prefill time scales linearly with the prompt (attention's quadratic part is not modelled)"
        )
        basis["fit"] = "measured time per prompt token (prefill) and the measured decode steps"
        kv_tok = weights = None
    one_off = {
        phase: one_off_idle([s for _, s in steps], phase, _sync_sources(views, phase))
        for phase, steps in (("prefill", pre), ("decode", dec))
    }
    left_out = {
        phase: ([0.0] * len(steps) if keep_idle or not one_off[phase]["excluded"] else one_off[phase]["per_step_ms"])
        for phase, steps in (("prefill", pre), ("decode", dec))
    }
    over_p = _overhead(pre, left_out["prefill"])
    over_d = _overhead(dec, left_out["decode"])
    # Busy time over roofline time: how much slower than the roof the measured steps ran.
    basis.update(
        {
            "prefill_steps": len(pre),
            "decode_steps": len(dec),
            "prefill_busy_over_roofline": eff_p,
            "decode_busy_over_roofline": eff_d,
            "prefill_overhead_ms": over_p * 1e3,
            "decode_overhead_ms": over_d * 1e3,
            "keep_idle": keep_idle,
            "one_off_idle": [
                {k: v for k, v in one_off[p].items() if k != "per_step_ms"}
                for p in ("prefill", "decode")
                if one_off[p]["steps"]
            ],
        }
    )
    for phase in ("prefill", "decode"):
        if one_off[phase]["steps"]:
            notes.append(_one_off_note(one_off[phase], keep_idle))
    for phase, over, steps in (("prefill", over_p, pre), ("decode", over_d, dec)):
        busy = float(np.mean([s["gpu_busy_ms"] for _, s in steps])) / 1e3
        if over > busy:
            causes: dict[str, float] = {}
            for _, s in steps:
                for k, v in (s.get("idle_by_cause") or {}).items():
                    causes[k] = causes.get(k, 0.0) + v
            top = max(causes, key=causes.__getitem__) if causes and max(causes.values()) > 0 else None
            notes.append(
                f"the measured {phase} steps spend {fmt.ms(over * 1e3)} each outside GPU work "
                f"({fmt.ms(busy * 1e3)} busy){f', mostly GPU idle caused by {top}' if top else ''}; the plan "
                "keeps it (tracekit report names what it is)"
            )
    memory = memory_gb * 1e9 * tp if memory_gb else None
    if memory is None:
        notes.append(
            f"{a0.device.get('spec') or a0.device.get('name')}'s memory is unknown: the KV cache is not "
            "checked against it"
        )
    return PhaseCosts(
        prefill_s,
        decode_s,
        str(a0.device.get("spec") or a0.device.get("name")),
        tp,
        kv_tok,
        weights,
        memory,
        basis,
        notes,
    )


def _overhead(steps: list[tuple[Analysis, dict]], left_out_ms: list[float]) -> float:
    """Mean seconds per step outside GPU busy, less each step's one-off idle."""
    return (
        float(np.mean([max(s["duration_ms"] - s["gpu_busy_ms"] - x, 0.0) for (_, s), x in zip(steps, left_out_ms)]))
        / 1e3
    )


def one_off_idle(steps: list[dict[str, Any]], phase: str, sources: list[dict] | None = None) -> dict[str, Any]:
    """The sync idle of ``phase``'s steps that is no per-step work.

    A step's sync idle is the host blocked in a synchronising call while the GPU ran none of
    the step's work. A synchronous copy of a step's inputs blocks for microseconds, so sync
    idle over ``ONE_OFF_SYNC_OVER_BUSY`` of the step's GPU busy time and over
    ``ONE_OFF_SYNC_MIN_MS`` waited on something other than the step's kernels: a blocking copy
    or synchronize of the profiled moment (GPU work from before the profile, an allocation,
    a first transfer), not what every step of a steady run does. Such sync is ``excluded``
    when at most ``ONE_OFF_SHARE`` of the phase's steps show it or the phase has one step
    (nothing shows it recurring); shown by more, it is per-step work and kept. Launch, host
    and wait idle are per-kernel overhead and never one-off here.

    Returns ``phase``, ``steps`` (how many show it), ``of_steps``, ``ms`` (their sync idle),
    ``busy_ms`` (their GPU busy), ``per_step_ms`` (each step's sync idle to leave out, 0
    where none), ``excluded``, ``reason``, and the largest sync interval's ``call``, ``op``
    and ``frame`` from ``sources`` (the phase's ``idle_top`` rows)."""
    per_step = []
    for s in steps:
        sync = float((s.get("idle_by_cause") or {}).get("sync") or 0.0)
        large = sync > ONE_OFF_SYNC_OVER_BUSY * s["gpu_busy_ms"] and sync > ONE_OFF_SYNC_MIN_MS * _part(s)
        per_step.append(sync if large else 0.0)
    shown = sum(x > 0 for x in per_step)
    n = len(steps)
    excluded = shown > 0 and (n == 1 or shown <= ONE_OFF_SHARE * n)
    busy = sum(s["gpu_busy_ms"] for s, x in zip(steps, per_step) if x > 0)
    if not shown:
        reason = None
    elif excluded:
        among = (
            f"the run holds one {phase} step, so nothing shows it recurring"
            if n == 1
            else f"{n - shown} of the {n} {phase} steps do not show it"
        )
        reason = (
            f"the GPU ran none of the {fmt.ms(busy)} of kernels of the step{'s' if shown != 1 else ''} meanwhile, "
            "and a synchronous copy of a step's inputs blocks for microseconds, so it waited on something "
            f"else; {among}"
        )
    else:
        reason = (
            f"{shown} of the {n} {phase} steps block in sync for over half their GPU work: it recurs, so it is "
            "per-step work"
        )
    top = max((r for r in sources or [] if r.get("cause") == "sync"), key=lambda r: r.get("ms") or 0.0, default=None)
    frames = [f for f in (top or {}).get("stack") or [] if ".py(" in f]
    return {
        "phase": phase,
        "steps": shown,
        "of_steps": n,
        "cause": "sync",
        "ms": float(sum(per_step)),
        "busy_ms": float(busy),
        "per_step_ms": per_step if excluded else [0.0] * n,
        "excluded": excluded,
        "reason": reason,
        "call": (top or {}).get("call"),
        "op": (top or {}).get("op"),
        "frame": frames[-1] if frames else None,
    }


def _part(s: dict[str, Any]) -> float:
    """The share of its step a (mixed) step part holds: its duration over the whole step's."""
    whole = s.get("whole_duration_ms")
    return s["duration_ms"] / whole if whole else 1.0


def _sync_sources(views: list[dict[str, Any]], phase: str) -> list[dict]:
    """The ``idle_top`` rows of ``phase`` over the analyses, to name a one-off sync's call."""
    return [r for v in views for r in ((v.get("phases") or {}).get(phase) or {}).get("idle_top") or []]


def _one_off_note(o: dict[str, Any], keep_idle: bool) -> str:
    """One sentence: the one-off idle of a phase, how large, where, and whether the plan keeps it."""
    where = ", ".join(x for x in (o["op"], o["frame"]) if x)
    call = o["call"] or "a synchronising call"
    steps = (
        f"the {o['phase']} step's" if o["of_steps"] == 1 else f"{o['steps']} of the {o['of_steps']} {o['phase']} steps'"
    )
    head = f"{steps} {fmt.ms(o['ms'])} of GPU idle blocked in {call}{f' ({where})' if where else ''} (idle cause sync)"
    if not o["excluded"]:
        return f"{head} is kept in the {o['phase']} cost: {o['reason']}"
    if keep_idle:
        return f"{head} is kept in the {o['phase']} cost (--keep-idle), though it looks a one-off: {o['reason']}"
    return f"{head} is left out of the {o['phase']} cost as a one-off: {o['reason']}; --keep-idle keeps it"


def _steps(view: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    """The steps of ``phase`` with GPU work in an analysis' ``view`` (``to_dict()``), and the
    ``phase`` part of every split mixed step: its share of the step's busy time, duration and
    idle causes, with that side's batch. Its FLOPs and bytes are the whole step's, so they
    are left out (the fit then works from times)."""
    out = []
    for s in view["steps"]:
        if not s["kernels"] or s["gpu_busy_ms"] <= 0:
            continue
        if s["phase"] == phase:
            out.append(s)
        elif s["phase"] == "mixed" and s.get("split") and (s["split"].get(phase) or {}).get("gpu_ms"):
            side = s["split"][phase]
            frac = side["gpu_ms"] / s["gpu_busy_ms"]
            other = "decode" if phase == "prefill" else "prefill"
            out.append(
                {
                    **s,
                    "phase": phase,
                    "mixed_part": True,
                    "gpu_busy_ms": side["gpu_ms"],
                    "whole_duration_ms": s["duration_ms"],
                    "duration_ms": s["duration_ms"] * frac,
                    "gpu_idle_ms": s["gpu_idle_ms"] * frac,
                    "idle_by_cause": {k: v * frac for k, v in (s.get("idle_by_cause") or {}).items()},
                    "tokens": side.get("tokens"),
                    "batch": side.get("requests"),
                    phase: {k: v for k, v in side.items() if k != "gpu_ms"},
                    other: None,
                    "flops": None,
                    "bytes": None,
                }
            )
    return out


def _batch(s: dict) -> float:
    side = s.get("decode") or {}
    return float(s.get("batch") or side.get("requests") or s.get("tokens") or 1)


def _prefill_side(s: dict) -> Side:
    side = s.get("prefill") or {}
    n = float(side.get("tokens") or s.get("tokens") or 0)
    r = float(side.get("requests") or s.get("batch") or 1)
    kv = side.get("kv_tokens")
    pairs = side.get("sum_qk")
    if pairs is not None and side.get("sum_q2") is not None:
        pairs = side["sum_qk"] - (side["sum_q2"] - n) / 2
    else:
        pairs = equal_length_pairs(r, n)  # each request's prompt from scratch, of one length
    return Side(r, n, float(kv) if kv else n, float(pairs), r)


def _decode_side(s: dict, a: Analysis) -> Side:
    side = s.get("decode") or {}
    b = _batch(s)
    kv = side.get("kv_tokens")
    if not kv:
        work = (a.workload or {}).get("workload") or {}
        ctx = (work.get("prompt_len") or 0) + (work.get("new_tokens") or 0) / 2
        kv = b * ctx if ctx else b
    return Side(b, b, float(kv), float(kv), b)
