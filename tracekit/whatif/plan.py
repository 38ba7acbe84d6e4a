"""Deployment planning from measured phase costs: colocated or disaggregated, and how many GPUs.

**Phase costs** (``PhaseCosts``), fitted from a run's steps (``fit_costs``):

- ``prefill_s(n)``: one prefill of ``n`` prompt tokens = ``overhead_p + eff_p x R_p(n)``, where
  ``R_p`` is the roofline time of the model's work for those tokens (summed over components,
  each ``max(FLOPs / peak for its dtype, bytes / bandwidth)``), ``eff_p`` the measured prefill
  steps' GPU busy time over their roofline time, and ``overhead_p`` their mean time outside
  GPU busy (host work, idle), one-off idle left out (below).
- ``decode_s(b, L)``: one decode step of ``b`` requests at mean context ``L``, likewise: weights
  read once per step, the KV cache per request, FLOPs per token.
- One-off idle: a step's sync idle (the host blocked in a synchronising call while the GPU
  ran none of the step's work) over half the step's GPU busy time and over 1 ms waited on
  something other than the step's kernels (a synchronous copy of a step's inputs blocks for
  microseconds): a blocking copy or synchronize of the profiled moment, not per-step work.
  When at most half of a phase's steps show it (or the phase has one step), it is left out of
  that phase's overhead, and the notes say how much, where and why; ``--keep-idle`` keeps it.
  Shown by most of the steps, it is per-step work and kept. Launch, host and wait idle
  (per-kernel overhead) is always kept.
- A mixed step counts as a prefill and a decode part, by its split: each side's GPU time,
  and its duration and idle in that proportion.
- Without a model the measured FLOPs and bytes scale instead (prefill with tokens, decode FLOPs
  with the batch, its bytes fixed: the KV cache's growth is then not modelled; said in notes).

**Serving** ``rate`` requests/s of ``isl`` prompt and ``osl`` output tokens, per replica (one copy
of the model over ``tp`` GPUs, as measured):

- *disaggregated*, ``x`` prefill and ``y`` decode replicas: a prefill replica serves ``rate / x``
  requests one at a time (utilisation ``rho = rate / x * S``, ``S = prefill_s(isl)``), so
  ``TTFT = S + rho S / (2 (1 - rho))`` (M/D/1 wait) + the KV transfer (``isl`` x KV bytes per
  token / ``kv_link``). A decode replica holds ``C = rate / y * osl * TPOT`` requests (Little's
  law) and ``TPOT = decode_s(max(1, C), isl + osl / 2)``: the fixed point.
- *colocated*, ``n`` replicas: each prefills ``rate / n`` requests/s between its decode steps,
  which get the remaining ``1 - rho`` of its time: ``TPOT = decode_s(C, L) / (1 - rho)``; TTFT
  also waits half a decode step (the one running when the request arrives).
- The KV cache of ``C`` requests x ``(isl + osl)`` tokens plus the weights must fit in
  ``MEMORY_USE`` of the replica's memory.

Capacity: prefill, replicas x ``isl / S`` tokens/s; decode, replicas x the most tokens/s one
replica gives within memory and the TPOT SLO. ``goodput_per_gpu``: output tokens/s per GPU at
the highest request rate at which the option still meets both SLOs. Recommended: the option
meeting both SLOs with the fewest GPUs (ties: the higher goodput per GPU, then colocated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tracekit.analysis.model import Analysis, json_safe
from tracekit.errors import TracekitError
from tracekit.models import ModelSpec
from tracekit.models.costs import Missing, Side, kv_bytes_per_token, step_costs, weight_bytes
from tracekit.report import formatting as fmt

SCHEMA_VERSION = 1
KIND = "tracekit.plan"
MEMORY_USE = 0.9  # of a replica's GPU memory, for weights and the KV cache
MAX_GPUS = 64
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


@dataclass(frozen=True)
class Demand:
    rate: float  # requests/s
    isl: int
    osl: int

    @property
    def context(self) -> float:
        return self.isl + self.osl / 2


@dataclass(frozen=True)
class Slo:
    ttft_s: float
    tpot_s: float


@dataclass
class Option:
    name: str
    prefill_replicas: int
    decode_replicas: int
    tp: int
    ttft_s: float | None
    tpot_s: float | None
    batch: float | None  # requests per decode replica
    prefill_capacity: float  # tokens/s
    decode_capacity: float  # tokens/s
    meets_slo: bool
    reasons: list[str]
    goodput_per_gpu: float = 0.0

    @property
    def total_gpus(self) -> int:
        replicas = self.prefill_replicas if self.name == "colocated" else self.prefill_replicas + self.decode_replicas
        return replicas * self.tp

    def to_dict(self) -> dict[str, Any]:
        shared = self.name == "colocated"
        return {
            "name": self.name,
            "prefill_gpus": self.prefill_replicas * self.tp,
            "decode_gpus": self.decode_replicas * self.tp,
            "total_gpus": self.total_gpus,
            "shared": shared,
            "prefill_capacity_tokens_per_s": self.prefill_capacity,
            "decode_capacity_tokens_per_s": self.decode_capacity,
            "ttft_ms": None if self.ttft_s is None else self.ttft_s * 1e3,
            "tpot_ms": None if self.tpot_s is None else self.tpot_s * 1e3,
            "decode_batch": self.batch,
            "meets_slo": self.meets_slo,
            "goodput_per_gpu": self.goodput_per_gpu,
            "reasons": self.reasons,
        }


@dataclass
class Plan:
    costs: PhaseCosts
    demand: Demand
    slo: Slo
    options: list[Option]
    recommended: str | None
    why: str
    missing: list[str]
    inputs: dict[str, Any]
    kv_link: float | None

    def to_dict(self) -> dict[str, Any]:
        c, d = self.costs, self.demand
        return json_safe({
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "inputs": {**self.inputs, "isl": d.isl, "osl": d.osl, "rate": d.rate, "ttft_slo_ms": self.slo.ttft_s * 1e3,
                       "tpot_slo_ms": self.slo.tpot_s * 1e3,
                       "kv_link_gbps": None if self.kv_link is None else self.kv_link / 1e9},
            "costs": {"device": c.device, "tp": c.tp, "prefill_ms_at_isl": c.prefill_s(d.isl) * 1e3,
                      "decode_step_ms_batch1": c.decode_s(1, d.context) * 1e3,
                      "kv_bytes_per_token": c.kv_bytes_per_token, "weights_bytes": c.weights_bytes,
                      "memory_bytes": c.memory_bytes, **c.basis},
            "demand": {"requests_per_s": d.rate, "prefill_tokens_per_s": d.rate * d.isl,
                       "decode_tokens_per_s": d.rate * d.osl},
            "options": [o.to_dict() for o in self.options],
            "recommended": self.recommended,
            "why": self.why,
            "missing": self.missing,
            "notes": list(c.notes),
            "method": __doc__.split("\n\n", 1)[1].strip(),
        })


# --- the serving model ---------------------------------------------------------------


def _max_batch(c: PhaseCosts, d: Demand) -> float:
    """Requests whose KV cache fits in one replica beside its weights (inf when unknown)."""
    if not (c.memory_bytes and c.kv_bytes_per_token):
        return math.inf
    room = c.memory_bytes * MEMORY_USE - (c.weights_bytes or 0.0)
    return max(room, 0.0) / (c.kv_bytes_per_token * (d.isl + d.osl))


def _tpot(c: PhaseCosts, d: Demand, rate: float, share: float) -> tuple[float | None, float | None]:
    """(TPOT, batch) of one decode replica receiving ``rate`` requests/s with ``share`` of its
    time for decoding; None when no steady state exists (more work than time)."""
    if share <= 0:
        return None, None
    k = rate * d.osl  # requests in flight per second of TPOT
    t = c.decode_s(1, d.context) / share
    for _ in range(500):
        nxt = c.decode_s(max(1.0, k * t), d.context) / share
        if nxt > 1e4:
            return None, None
        if abs(nxt - t) <= 1e-12 + 1e-9 * t:
            return nxt, max(1.0, k * nxt)
        t = nxt
    return None, None


def _prefill(c: PhaseCosts, d: Demand, rate: float) -> tuple[float, float]:
    """(service time, utilisation) of one prefill replica receiving ``rate`` requests/s."""
    s = c.prefill_s(d.isl)
    return s, rate * s


def _decode_capacity(c: PhaseCosts, d: Demand, tpot_slo: float) -> float:
    """Tokens/s of one decode replica at the largest batch within memory and the TPOT SLO."""
    cap = _max_batch(c, d)
    if c.decode_s(1, d.context) > tpot_slo:
        return 1.0 / c.decode_s(1, d.context)
    lo, hi = 1.0, min(cap, 1e7)
    if c.decode_s(hi, d.context) <= tpot_slo:
        return hi / c.decode_s(hi, d.context)
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if c.decode_s(mid, d.context) <= tpot_slo else (lo, mid)
    return lo / c.decode_s(lo, d.context)


def evaluate(name: str, c: PhaseCosts, d: Demand, slo: Slo, x: int, y: int, kv_link: float | None) -> Option:
    """The option with ``x`` prefill and ``y`` decode replicas (colocated: ``x`` shared)."""
    reasons = []
    s, rho = _prefill(c, d, d.rate / x)
    transfer = 0.0
    if name == "disaggregated" and kv_link and c.kv_bytes_per_token:
        transfer = d.isl * c.kv_bytes_per_token / kv_link
    ttft = tpot = batch = None
    if rho >= 1:
        reasons.append(f"prefill is over capacity: {fmt.num(d.rate / x)} requests/s per replica, each taking "
                       f"{fmt.ms(s * 1e3)}")
    if name == "colocated":
        if rho < 1:
            tpot, batch = _tpot(c, d, d.rate / x, 1 - rho)
            if tpot is None:
                reasons.append("decode is over capacity once prefills take their share of each replica")
            else:
                ttft = s + rho * s / (2 * (1 - rho)) + c.decode_s(batch, d.context) / 2
    else:
        tpot, batch = _tpot(c, d, d.rate / y, 1.0)
        if rho < 1:
            ttft = s + rho * s / (2 * (1 - rho)) + transfer
        if tpot is None:
            reasons.append("decode is over capacity")
    if batch is not None and batch > _max_batch(c, d):
        reasons.append(f"the KV cache of {fmt.num(batch)} requests x {d.isl + d.osl} tokens per decode replica does not fit "
                       f"beside the weights in {MEMORY_USE:.0%} of its memory")
    if ttft is not None and ttft > slo.ttft_s:
        reasons.append(f"TTFT {fmt.ms(ttft * 1e3)} is over the SLO of {fmt.ms(slo.ttft_s * 1e3)}")
    if tpot is not None and tpot > slo.tpot_s:
        reasons.append(f"TPOT {fmt.ms(tpot * 1e3)} is over the SLO of {fmt.ms(slo.tpot_s * 1e3)}")
    decode_reps = x if name == "colocated" else y
    return Option(name, x, decode_reps, c.tp, ttft, tpot, batch, x * d.isl / s,
                  decode_reps * _decode_capacity(c, d, slo.tpot_s), not reasons, reasons)


def _goodput(o: Option, c: PhaseCosts, d: Demand, slo: Slo, kv_link: float | None) -> float:
    """Output tokens/s per GPU at the highest request rate the option serves within the SLOs."""
    def meets(rate: float) -> bool:
        return evaluate(o.name, c, Demand(rate, d.isl, d.osl), slo, o.prefill_replicas, o.decode_replicas,
                        kv_link).meets_slo

    hi = max(o.prefill_capacity / d.isl, 1e-9)
    if not meets(1e-9 * hi):
        return 0.0
    lo = 1e-9 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo * d.osl / o.total_gpus


def plan(c: PhaseCosts, d: Demand, slo: Slo, *, max_gpus: int = MAX_GPUS, kv_link: float | None = None,
         inputs: dict[str, Any] | None = None) -> Plan:
    """Size a colocated and a disaggregated deployment; recommend the cheapest that meets the SLOs."""
    if d.rate <= 0 or d.isl <= 0 or d.osl <= 0:
        raise TracekitError("--rate, --isl and --osl must be positive")
    replicas = max_gpus // c.tp
    if replicas < 1:
        raise TracekitError(f"--max-gpus {max_gpus} is below one replica of the measured run (TP {c.tp})")
    options = []
    coloc = None
    for n in range(1, replicas + 1):
        coloc = evaluate("colocated", c, d, slo, n, n, kv_link)
        if coloc.meets_slo:
            break
    options.append(coloc)
    disagg = None
    if replicas >= 2:
        best = None
        for total in range(2, replicas + 1):
            found = [evaluate("disaggregated", c, d, slo, x, total - x, kv_link) for x in range(1, total)]
            meeting = [o for o in found if o.meets_slo]
            if meeting:
                best = max(meeting, key=lambda o: _goodput(o, c, d, slo, kv_link))
                break
            best = found
        if isinstance(best, list):  # none met: the split closest to meeting at the largest size
            best = min(best, key=lambda o: _shortfall(o, slo))
        disagg = best
        options.append(disagg)
    for o in options:
        o.goodput_per_gpu = _goodput(o, c, d, slo, kv_link) if o.meets_slo else 0.0
    meeting = [o for o in options if o.meets_slo]
    rec = min(meeting, key=lambda o: (o.total_gpus, -o.goodput_per_gpu, o.name != "colocated")) if meeting else None
    return Plan(c, d, slo, options, rec.name if rec else None, _why(rec, options, max_gpus),
                [] if rec else _missing(c, d, slo, options, max_gpus), inputs or {}, kv_link)


def _shortfall(o: Option, slo: Slo) -> tuple[int, float]:
    """How far an option is from meeting the SLOs: phases over capacity, then the worst SLO ratio."""
    over = (o.ttft_s is None) + (o.tpot_s is None)
    worst = max((o.ttft_s or 0) / slo.ttft_s, (o.tpot_s or 0) / slo.tpot_s)
    return over, worst


def _why(rec: Option | None, options: list[Option], max_gpus: int) -> str:
    if rec is None:
        return f"No option meets both SLOs within --max-gpus {max_gpus}."
    parts = {"colocated": "colocated", "disaggregated": "disaggregated"}
    text = f"{parts[rec.name].capitalize()} on {rec.total_gpus} GPU{'s' if rec.total_gpus != 1 else ''}"
    if rec.name == "disaggregated":
        text += f" ({rec.prefill_replicas * rec.tp} prefill + {rec.decode_replicas * rec.tp} decode)"
    text += f" meets both SLOs (TTFT {fmt.ms(rec.ttft_s * 1e3)}, TPOT {fmt.ms(rec.tpot_s * 1e3)}) with the fewest GPUs"
    for o in options:
        if o is rec:
            continue
        if o.meets_slo and o.total_gpus == rec.total_gpus:
            text += (f"; {o.name} needs as many, with less goodput per GPU ({fmt.num(o.goodput_per_gpu)} against "
                     f"{fmt.num(rec.goodput_per_gpu)} output tokens/s)")
        elif o.meets_slo:
            text += f"; {o.name} needs {o.total_gpus}" + (
                " (prefills interleaved with decode steps take decode's time)" if o.name == "colocated" else
                " (prefill and decode each need their own replicas)")
        else:
            text += f"; {o.name} does not meet them within --max-gpus {max_gpus} ({o.reasons[0]})"
    return text + "."


def _missing(c: PhaseCosts, d: Demand, slo: Slo, options: list[Option], max_gpus: int) -> list[str]:
    """What stands between the demand and the SLOs, most basic first."""
    out = []
    s = c.prefill_s(d.isl)
    if s > slo.ttft_s:
        out.append(f"a prefill of {fmt.count(d.isl)} tokens alone takes {fmt.ms(s * 1e3)} on {c.device}, over the TTFT SLO of "
                   f"{fmt.ms(slo.ttft_s * 1e3)}: a faster GPU (tracekit project), more tensor parallelism or shorter "
                   "prompts")
    t1 = c.decode_s(1, d.context)
    if t1 > slo.tpot_s:
        out.append(f"a decode step of one request at {fmt.count(round(d.context))} tokens of context takes {fmt.ms(t1 * 1e3)} on "
                   f"{c.device}, over the TPOT SLO of {fmt.ms(slo.tpot_s * 1e3)}")
    if _max_batch(c, d) < 1:
        out.append("the weights leave no room for one request's KV cache on a replica")
    if not out:
        out.append(f"the demand ({fmt.num(d.rate)} requests/s) needs more than --max-gpus {max_gpus}: "
                   + "; ".join(f"{o.name}: {o.reasons[0]}" for o in options if o.reasons))
    return out


# --- fitting the phase costs from measured runs ----------------------------------------


def fit_costs(analyses: list[Analysis], model: ModelSpec | None, memory_gb: float | None = None,
              kv_bytes: float | None = None, keep_idle: bool = False) -> PhaseCosts:
    """Phase costs of one replica from the prefill and decode steps of ``analyses``, all on
    one device; ``model`` gives the roofline of other token counts and batches. One-off idle
    (``one_off_idle``) is left out of the phases' overhead unless ``keep_idle``."""
    views = [a.to_dict() for a in analyses]
    pre = [(a, s) for a, v in zip(analyses, views) for s in _steps(v, "prefill")]
    dec = [(a, s) for a, v in zip(analyses, views) for s in _steps(v, "decode")]
    if not pre or not dec:
        missing = "prefill" if not pre else "decode"
        raise TracekitError(f"plan needs prefill and decode steps (in one trace or across several); the traces hold "
                            f"no {missing} step")
    a0 = analyses[0]
    mixed = sum(bool(s.get("mixed_part")) for _, s in pre + dec)
    devices = {a.device.get("spec") or a.device.get("name") for a in analyses}
    if len(devices) > 1:
        raise TracekitError(f"the traces ran on different GPUs ({', '.join(sorted(map(str, devices)))}); "
                            "pass --gpu NAME to project them all onto one")
    peaks = a0.device.get("peak_flops") or {}
    bw = a0.device.get("peak_bandwidth")
    if not (peaks and bw):
        raise TracekitError(f"plan needs the device's peaks, and {a0.device.get('name')} has none "
                            f"({a0.device.get('reason') or 'no spec row'}); pass --gpu NAME")
    tp = int((a0.model or {}).get("tp") or 1)
    notes: list[str] = []
    if mixed:
        notes.append(f"{mixed} part{'s' if mixed != 1 else ''} of mixed steps counted by their split (each side's "
                     "share of the step's GPU time, duration and idle)")
    kvb = kv_bytes or (1.0 if str((a0.model or {}).get("kv_cache_dtype") or "").startswith("fp8") else 2.0)

    def peak(dtype: str, unit: str) -> float | None:
        by = peaks.get(unit) or {}
        return by.get(dtype) or by.get("bf16") or by.get("fp32")

    def roof(side: Side) -> float:
        total = 0.0
        for w in step_costs(model, side, tp=tp, kv_bytes=kvb, act_dtype=model.dtype).values():
            if isinstance(w, Missing):
                continue
            f = peak(w.dtype, w.unit)
            total += max(w.flops / f if f else 0.0, w.bytes / bw)
        return total

    basis: dict[str, Any] = {}
    if model is not None:
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

            notes.append("without a model the decode step time is taken as the measured one at every batch; "
                         "pass --model NAME to scale it")
        else:
            f = peak("bf16", "matrix")
            per_req_flops = float((flops_d / b_d).mean())
            fixed_bytes = float(bytes_d.mean())
            eff_d = float(busy_d.sum() / sum(max(fl / f, by / bw) for fl, by in zip(flops_d, bytes_d)))

            def decode_s(b: float, ctx: float) -> float:
                return over_d + eff_d * max(per_req_flops * b / f, fixed_bytes / bw)

            notes.append("without a model decode FLOPs scale with the batch and its bytes stay as measured (the KV "
                         "cache's growth is not modelled); pass --model NAME")
        notes.append("without a model prefill time scales linearly with the prompt (attention's quadratic part is "
                     "not modelled)")
        basis["fit"] = "measured time per prompt token (prefill) and the measured decode steps"
        kv_tok = weights = None
    one_off = {phase: one_off_idle([s for _, s in steps], phase, _sync_sources(views, phase))
               for phase, steps in (("prefill", pre), ("decode", dec))}
    left_out = {phase: ([0.0] * len(steps) if keep_idle or not one_off[phase]["excluded"] else one_off[phase]["per_step_ms"])
                for phase, steps in (("prefill", pre), ("decode", dec))}
    over_p = _overhead(pre, left_out["prefill"])
    over_d = _overhead(dec, left_out["decode"])
    # Busy time over roofline time: how much slower than the roof the measured steps ran.
    basis.update({"prefill_steps": len(pre), "decode_steps": len(dec), "prefill_busy_over_roofline": eff_p,
                  "decode_busy_over_roofline": eff_d, "prefill_overhead_ms": over_p * 1e3,
                  "decode_overhead_ms": over_d * 1e3, "keep_idle": keep_idle,
                  "one_off_idle": [{k: v for k, v in one_off[p].items() if k != "per_step_ms"}
                                   for p in ("prefill", "decode") if one_off[p]["steps"]]})
    for phase in ("prefill", "decode"):
        if one_off[phase]["steps"]:
            notes.append(_one_off_note(one_off[phase], keep_idle))
    for phase, over, steps in (("prefill", over_p, pre), ("decode", over_d, dec)):
        busy = float(np.mean([s["gpu_busy_ms"] for _, s in steps])) / 1e3
        if over > busy:
            causes = {}
            for _, s in steps:
                for k, v in (s.get("idle_by_cause") or {}).items():
                    causes[k] = causes.get(k, 0.0) + v
            top = max(causes, key=causes.get) if causes and max(causes.values()) > 0 else None
            notes.append(f"the measured {phase} steps spend {fmt.ms(over * 1e3)} each outside GPU work "
                         f"({fmt.ms(busy * 1e3)} busy){f', mostly GPU idle caused by {top}' if top else ''}; the plan "
                         "keeps it (tracekit report names what it is)")
    memory = memory_gb * 1e9 * tp if memory_gb else None
    if memory is None:
        notes.append(f"{a0.device.get('spec') or a0.device.get('name')}'s memory is unknown: the KV cache is not "
                     "checked against it")
    return PhaseCosts(prefill_s, decode_s, str(a0.device.get("spec") or a0.device.get("name")), tp, kv_tok, weights,
                      memory, basis, notes)


def _overhead(steps: list[tuple[Analysis, dict]], left_out_ms: list[float]) -> float:
    """Mean seconds per step outside GPU busy, less each step's one-off idle."""
    return float(np.mean([max(s["duration_ms"] - s["gpu_busy_ms"] - x, 0.0)
                          for (_, s), x in zip(steps, left_out_ms)])) / 1e3


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
        among = (f"the run holds one {phase} step, so nothing shows it recurring" if n == 1 else
                 f"{n - shown} of the {n} {phase} steps do not show it")
        reason = (f"the GPU ran none of the {fmt.ms(busy)} of kernels of the step{'s' if shown != 1 else ''} meanwhile, "
                  "and a synchronous copy of a step's inputs blocks for microseconds, so it waited on something "
                  f"else; {among}")
    else:
        reason = (f"{shown} of the {n} {phase} steps block in sync for over half their GPU work: it recurs, so it is "
                  "per-step work")
    top = max((r for r in sources or [] if r.get("cause") == "sync"), key=lambda r: r.get("ms") or 0.0, default=None)
    frames = [f for f in (top or {}).get("stack") or [] if ".py(" in f]
    return {"phase": phase, "steps": shown, "of_steps": n, "cause": "sync", "ms": float(sum(per_step)),
            "busy_ms": float(busy), "per_step_ms": per_step if excluded else [0.0] * n, "excluded": excluded,
            "reason": reason, "call": (top or {}).get("call"), "op": (top or {}).get("op"),
            "frame": frames[-1] if frames else None}


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
    steps = f"the {o['phase']} step's" if o["of_steps"] == 1 else f"{o['steps']} of the {o['of_steps']} {o['phase']} steps'"
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
            out.append({**s, "phase": phase, "mixed_part": True, "gpu_busy_ms": side["gpu_ms"],
                        "whole_duration_ms": s["duration_ms"],
                        "duration_ms": s["duration_ms"] * frac, "gpu_idle_ms": s["gpu_idle_ms"] * frac,
                        "idle_by_cause": {k: v * frac for k, v in (s.get("idle_by_cause") or {}).items()},
                        "tokens": side.get("tokens"), "batch": side.get("requests"),
                        phase: {k: v for k, v in side.items() if k != "gpu_ms"}, other: None,
                        "flops": None, "bytes": None})
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
        pairs = r * (n / r) * (n / r + 1) / 2  # each request's prompt from scratch
    return Side(r, n, float(kv) if kv else n, float(pairs), r)


def _decode_side(s: dict, a: Analysis) -> Side:
    side = s.get("decode") or {}
    b = _batch(s)
    kv = side.get("kv_tokens")
    if not kv:
        work = ((a.workload or {}).get("workload") or {})
        ctx = (work.get("prompt_len") or 0) + (work.get("new_tokens") or 0) / 2
        kv = b * ctx if ctx else b
    return Side(b, b, float(kv), float(kv), b)
