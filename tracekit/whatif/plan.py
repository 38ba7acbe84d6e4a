"""Deployment planning from measured phase costs: colocated or disaggregated, and how many GPUs.
The phase costs are fitted from measured runs in ``tracekit.whatif.fit`` (``fit_costs``).

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
from dataclasses import dataclass
from typing import Any, cast

from tracekit import formatting as fmt
from tracekit.analysis.model import json_safe
from tracekit.errors import TracekitError
from tracekit.whatif.fit import PhaseCosts

SCHEMA_VERSION = 1
KIND = "tracekit.plan"
MEMORY_USE = 0.9  # of a replica's GPU memory, for weights and the KV cache
MAX_GPUS = 64


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
        return json_safe(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": KIND,
                "inputs": {
                    **self.inputs,
                    "isl": d.isl,
                    "osl": d.osl,
                    "rate": d.rate,
                    "ttft_slo_ms": self.slo.ttft_s * 1e3,
                    "tpot_slo_ms": self.slo.tpot_s * 1e3,
                    "kv_link_gbps": None if self.kv_link is None else self.kv_link / 1e9,
                },
                "costs": {
                    "device": c.device,
                    "tp": c.tp,
                    "prefill_ms_at_isl": c.prefill_s(d.isl) * 1e3,
                    "decode_step_ms_batch1": c.decode_s(1, d.context) * 1e3,
                    "kv_bytes_per_token": c.kv_bytes_per_token,
                    "weights_bytes": c.weights_bytes,
                    "memory_bytes": c.memory_bytes,
                    **c.basis,
                },
                "demand": {
                    "requests_per_s": d.rate,
                    "prefill_tokens_per_s": d.rate * d.isl,
                    "decode_tokens_per_s": d.rate * d.osl,
                },
                "options": [o.to_dict() for o in self.options],
                "recommended": self.recommended,
                "why": self.why,
                "missing": self.missing,
                "notes": list(c.notes),
                "method": __doc__.split("\n\n", 1)[1].strip(),
            }
        )


# --- the serving model ---------------------------------------------------------------


def _max_batch(c: PhaseCosts, d: Demand) -> float:
    """Requests whose KV cache fits in one replica beside its weights (inf when unknown)."""
    if not (c.memory_bytes and c.kv_bytes_per_token):
        return math.inf
    room = c.memory_bytes * MEMORY_USE - (c.weights_bytes or 0.0)
    return max(room, 0.0) / (c.kv_bytes_per_token * (d.isl + d.osl))


def _tpot(c: PhaseCosts, d: Demand, rate: float, share: float) -> tuple[float, float] | None:
    """(TPOT, batch) of one decode replica receiving ``rate`` requests/s with ``share`` of its
    time for decoding; None when no steady state exists (more work than time)."""
    if share <= 0:
        return None
    k = rate * d.osl  # requests in flight per second of TPOT
    t = c.decode_s(1, d.context) / share
    for _ in range(500):
        nxt = c.decode_s(max(1.0, k * t), d.context) / share
        if nxt > 1e4:
            return None
        if abs(nxt - t) <= 1e-12 + 1e-9 * t:
            return nxt, max(1.0, k * nxt)
        t = nxt
    return None


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
        reasons.append(
            f"prefill is over capacity: {fmt.num(d.rate / x)} requests/s per replica, each taking {fmt.ms(s * 1e3)}"
        )
    if name == "colocated":
        if rho < 1:
            steady = _tpot(c, d, d.rate / x, 1 - rho)
            if steady is None:
                reasons.append("decode is over capacity once prefills take their share of each replica")
            else:
                tpot, batch = steady
                ttft = s + rho * s / (2 * (1 - rho)) + c.decode_s(batch, d.context) / 2
    else:
        tpot, batch = _tpot(c, d, d.rate / y, 1.0) or (None, None)
        if rho < 1:
            ttft = s + rho * s / (2 * (1 - rho)) + transfer
        if tpot is None:
            reasons.append("decode is over capacity")
    if batch is not None and batch > _max_batch(c, d):
        reasons.append(
            f"the KV cache of {fmt.num(batch)} requests x {d.isl + d.osl} tokens per decode replica does not fit "
            f"beside the weights in {MEMORY_USE:.0%} of its memory"
        )
    if ttft is not None and ttft > slo.ttft_s:
        reasons.append(f"TTFT {fmt.ms(ttft * 1e3)} is over the SLO of {fmt.ms(slo.ttft_s * 1e3)}")
    if tpot is not None and tpot > slo.tpot_s:
        reasons.append(f"TPOT {fmt.ms(tpot * 1e3)} is over the SLO of {fmt.ms(slo.tpot_s * 1e3)}")
    decode_reps = x if name == "colocated" else y
    return Option(
        name,
        x,
        decode_reps,
        c.tp,
        ttft,
        tpot,
        batch,
        x * d.isl / s,
        decode_reps * _decode_capacity(c, d, slo.tpot_s),
        not reasons,
        reasons,
    )


def _goodput(o: Option, c: PhaseCosts, d: Demand, slo: Slo, kv_link: float | None) -> float:
    """Output tokens/s per GPU at the highest request rate the option serves within the SLOs."""

    def meets(rate: float) -> bool:
        return evaluate(
            o.name, c, Demand(rate, d.isl, d.osl), slo, o.prefill_replicas, o.decode_replicas, kv_link
        ).meets_slo

    hi = max(o.prefill_capacity / d.isl, 1e-9)
    if not meets(1e-9 * hi):
        return 0.0
    lo = 1e-9 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo * d.osl / o.total_gpus


def plan(
    c: PhaseCosts,
    d: Demand,
    slo: Slo,
    *,
    max_gpus: int = MAX_GPUS,
    kv_link: float | None = None,
    inputs: dict[str, Any] | None = None,
) -> Plan:
    """Size a colocated and a disaggregated deployment; recommend the cheapest that meets the SLOs."""
    if d.rate <= 0 or d.isl <= 0 or d.osl <= 0:
        raise TracekitError("--rate, --isl and --osl must be positive")
    replicas = max_gpus // c.tp
    if replicas < 1:
        raise TracekitError(f"--max-gpus {max_gpus} is below one replica of the measured run (TP {c.tp})")
    options: list[Option] = []
    for n in range(1, replicas + 1):  # at least once: replicas >= 1
        coloc = evaluate("colocated", c, d, slo, n, n, kv_link)
        if coloc.meets_slo:
            break
    options.append(coloc)
    disagg = None
    if replicas >= 2:
        best: Option | None = None
        found: list[Option] = []
        for total in range(2, replicas + 1):
            found = [evaluate("disaggregated", c, d, slo, x, total - x, kv_link) for x in range(1, total)]
            meeting = [o for o in found if o.meets_slo]
            if meeting:
                best = max(meeting, key=lambda o: _goodput(o, c, d, slo, kv_link))
                break
        if best is None:  # none met: the split closest to meeting at the largest size
            best = min(found, key=lambda o: _shortfall(o, slo))
        disagg = best
        options.append(disagg)
    for o in options:
        o.goodput_per_gpu = _goodput(o, c, d, slo, kv_link) if o.meets_slo else 0.0
    meeting = [o for o in options if o.meets_slo]
    rec = min(meeting, key=lambda o: (o.total_gpus, -o.goodput_per_gpu, o.name != "colocated")) if meeting else None
    return Plan(
        c,
        d,
        slo,
        options,
        rec.name if rec else None,
        _why(rec, options, max_gpus),
        [] if rec else _missing(c, d, slo, options, max_gpus),
        inputs or {},
        kv_link,
    )


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
    # An option meets the SLOs only with both figures (``evaluate`` gives a reason for each missing one).
    ttft, tpot = cast(float, rec.ttft_s), cast(float, rec.tpot_s)
    text += f" meets both SLOs (TTFT {fmt.ms(ttft * 1e3)}, TPOT {fmt.ms(tpot * 1e3)}) with the fewest GPUs"
    for o in options:
        if o is rec:
            continue
        if o.meets_slo and o.total_gpus == rec.total_gpus:
            text += (
                f"; {o.name} needs as many, with less goodput per GPU ({fmt.num(o.goodput_per_gpu)} against "
                f"{fmt.num(rec.goodput_per_gpu)} output tokens/s)"
            )
        elif o.meets_slo:
            text += f"; {o.name} needs {o.total_gpus}" + (
                " (prefills interleaved with decode steps take decode's time)"
                if o.name == "colocated"
                else " (prefill and decode each need their own replicas)"
            )
        else:
            text += f"; {o.name} does not meet them within --max-gpus {max_gpus} ({o.reasons[0]})"
    return text + "."


def _missing(c: PhaseCosts, d: Demand, slo: Slo, options: list[Option], max_gpus: int) -> list[str]:
    """What stands between the demand and the SLOs, most basic first."""
    out = []
    s = c.prefill_s(d.isl)
    if s > slo.ttft_s:
        out.append(
            f"a prefill of {fmt.count(d.isl)} tokens alone takes {fmt.ms(s * 1e3)} on {c.device}, over the TTFT SLO of "
            f"{fmt.ms(slo.ttft_s * 1e3)}: a faster GPU (tracekit project), more tensor parallelism or shorter "
            "prompts"
        )
    t1 = c.decode_s(1, d.context)
    if t1 > slo.tpot_s:
        out.append(
            f"a decode step of one request at {fmt.count(round(d.context))} tokens of context takes {fmt.ms(t1 * 1e3)} on "
            f"{c.device}, over the TPOT SLO of {fmt.ms(slo.tpot_s * 1e3)}"
        )
    if _max_batch(c, d) < 1:
        out.append("the weights leave no room for one request's KV cache on a replica")
    if not out:
        out.append(
            f"the demand ({fmt.num(d.rate)} requests/s) needs more than --max-gpus {max_gpus}: "
            + "; ".join(f"{o.name}: {o.reasons[0]}" for o in options if o.reasons)
        )
    return out
