"""Advice: findings that name a cause and suggest something to try, each with ``action``
(what to try), ``sum_ms`` (the time the cause involves over the trace's steps of that phase) and
``at_stake_ms`` (what trying it saves: its what-if replayed on the steps' dependencies,
``analysis.replay``; the sum where no replay is possible), computed only from evidence in the trace. Every number is one the report's tables
show: idle by cause and the largest idle intervals, kernel time by category, bound and dtype.

| id               | fires when (per phase)                                                | sum_ms (the time involved; at_stake_ms is what its what-if saves, replayed) |
|------------------|------------------------------------------------------------------------|-------------------------------------------|
| host-sync        | idle caused by synchronising calls >= SYNC_SHARE of the phase's time   | the idle of the largest such call          |
| launch-bound     | launches are the largest idle cause and >= LAUNCH_SHARE of the time    | launch idle; CUDA graphs suggested only for decode steps that do not replay one |
| host-bound       | host work is the largest idle cause and >= HOST_SHARE of the time      | host idle                                  |
| gpu-waits        | waiting on streams/events is the largest cause and >= WAIT_SHARE       | none (no action the trace supports)        |
| fuse-elementwise | elementwise/normalization/activation/RoPE >= FUSION_SHARE of kernel time, the run not compiled | per run of back-to-back such kernels, all but its longest kernel |
| decode-batch     | memory-bound decode GEMMs >= DECODE_GEMM_SHARE of decode kernel time, the decode sides of mixed steps bound by their prefill chunks (passengers) aside | their time minus what their FLOPs need at the achievable compute peak |
| decode-overhead-bound | CPU-only run: decode time between compute ops >= CPU_OVERHEAD_SHARE, not compiled | that time |
| fp8-weights      | memory-bound decode GEMMs on weights stored at 16 bits (``weight_precisions``) >= FP8_SHARE of decode kernel time, and the GPU has an FP8 matrix peak | half their time (FP8 halves the weight bytes) |

Advice whose time at stake is under MIN_AT_STAKE of its phase's time is not given (a
two-kernel trace has "fusible chains" too). The list is ordered by time at stake, largest first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit import frameworks
from tracekit.analysis.model import Finding
from tracekit.analysis.pricing import taxonomy as tx
from tracekit.analysis.pricing.kernel_names import mixed_activation
from tracekit.analysis.replay import changes as ch
from tracekit.analysis.steps.mixed import phase_weights
from tracekit.analysis.waiting.idle import LAUNCH_GAP_NS

if TYPE_CHECKING:
    from tracekit.analysis.model import Analysis

SYNC_SHARE = 0.05
LAUNCH_SHARE = 0.20
HOST_SHARE = 0.20
WAIT_SHARE = 0.20
FUSION_SHARE = 0.20
DECODE_GEMM_SHARE = 0.30
FP8_SHARE = 0.20
CPU_OVERHEAD_SHARE = 0.30
MIN_AT_STAKE = 0.01

FUSIBLE = (tx.ELEMENTWISE, tx.NORMALIZATION, tx.ACTIVATION, tx.ROPE)
_MATRIX = (tx.GEMM, tx.MOE)
_SIXTEEN_BIT = ("bf16", "fp16")
# Kernels torch.compile (Inductor) generated: pointwise, reduction and persistent-reduction.
_INDUCTOR = re.compile(r"^triton_(poi|red|per)_")
_PHASE = {"unknown": "unclassified", "mixed": "mixed"}

THRESHOLDS = {
    "host-sync": f"synchronising calls cause >= {SYNC_SHARE:.0%} of a phase's time as GPU idle",
    "launch-bound": f"kernel launches are the largest idle cause and >= {LAUNCH_SHARE:.0%} of a phase's time",
    "host-bound": f"host work is the largest idle cause and >= {HOST_SHARE:.0%} of a phase's time",
    "gpu-waits": f"waiting on streams/events is the largest idle cause and >= {WAIT_SHARE:.0%} of a phase's time",
    "fuse-elementwise": f"elementwise, normalization, activation and RoPE kernels >= {FUSION_SHARE:.0%} of a phase's "
    "kernel time in a run not compiled with torch.compile",
    "decode-batch": f"memory-bound decode GEMMs >= {DECODE_GEMM_SHARE:.0%} of decode kernel time",
    "decode-overhead-bound": f"CPU-only run: decode time between compute ops >= {CPU_OVERHEAD_SHARE:.0%}",
    "fp8-weights": f"memory-bound 16-bit decode GEMMs >= {FP8_SHARE:.0%} of decode kernel time on a GPU with an FP8 peak",
}


def advice(a: Analysis) -> list[Finding]:
    out: list[Finding] = []
    for phase, p in a.phases.items():
        if a.device.get("type") == "gpu":
            out += _idle(a, phase, p)
        out += _fusion(a, phase, p)
    if a.device.get("type") == "cpu" and "decode" in a.phases:
        out += _cpu_overhead(a, a.phases["decode"])
    if "decode" in a.phases:
        out += _decode_weights(a, a.phases["decode"])
    _replayed(a, out)

    # Too little time involved is noise, whatever a replay then saves (it may save nothing: the
    # work behind a removed sync still runs); the advice stays and says what it would save.
    def kept(f: Finding) -> bool:
        if f.at_stake_ms is None or f.phase is None:  # advice with time at stake always names its phase
            return True
        involved = f.sum_ms if f.sum_ms is not None else f.at_stake_ms
        return involved >= MIN_AT_STAKE * (a.phases[f.phase].get("time_ms") or 0.0)

    out = [f for f in out if kept(f)]
    return sorted(out, key=lambda f: -(f.at_stake_ms or 0.0))


# --- idle ----------------------------------------------------------------------------


def _idle(a: Analysis, phase: str, p: dict) -> list[Finding]:
    causes, time = p.get("idle_by_cause") or {}, p.get("time_ms") or 0.0
    if not causes or time <= 0:
        return []
    out = []
    top = p.get("idle_top") or []
    name = _PHASE.get(phase, phase)
    steps = a.steps[a.steps["phase"] == phase] if len(a.steps) else a.steps
    n = max(int(p.get("steps") or 0) + int(p.get("mixed_steps") or 0), 1)
    sync = next((r for r in top if r["cause"] == "sync"), None)
    if causes["sync"] >= SYNC_SHARE * time and sync is not None:
        at_stake = (sync["share"] or 0.0) * time
        where = _where(sync)
        text = (
            f"{where} blocked the host for {_ms(sync['ms'])}, {sync['share']:.0%} of the {name} steps' time; "
            "the GPU was idle meanwhile"
        )
        if causes["sync"] > 1.05 * at_stake:
            text += f" (all synchronising calls: {_ms(causes['sync'])})"
        out.append(
            Finding(
                "host-sync",
                text + ".",
                "warning",
                phase,
                _sync_action(sync),
                at_stake,
                whatif=[ch.Change(ch.SYNC, name=sync.get("call") or None)],
            )
        )
    largest = max(("launch", "host", "wait"), key=lambda c: causes[c])
    if causes[largest] < max(causes.values()):
        return out  # sync or unattributed idle is larger: the cause to name is that one
    share = causes[largest] / time
    graphs = bool(steps["graph_replay"].any()) if len(steps) else False
    if largest == "launch" and share >= LAUNCH_SHARE:
        kernels = float(steps["kernels"].mean()) if len(steps) else 0.0
        text = (
            f"{name.capitalize()} is launch-bound: the GPU waits for kernel launches {share:.0%} of the {name} steps' "
            f"time ({_ms(causes['launch'] / n)} per step, {kernels:,.0f} kernels per step)"
        )
        action = None
        if graphs:
            launch = next((r for r in top if r["cause"] == "launch"), None)
            text += ", although the steps replay a graph: the launches outside it are what the GPU waits for"
            if launch is not None and launch.get("op"):
                text += f" (largest: {_where(launch)})"
        elif phase == "decode":
            action = (
                'capture the decode step in a CUDA graph (torch.compile mode="reduce-overhead", '
                "torch.cuda.CUDAGraph; serving engines: keep their CUDA graphs on, e.g. no --enforce-eager)"
            )
        else:
            action = "launch fewer, larger kernels: fuse them (torch.compile) or put more tokens in each step"
        out.append(
            Finding(
                "launch-bound",
                text + ".",
                "warning",
                phase,
                action,
                causes["launch"] if action else None,
                whatif=[ch.Change(ch.LAUNCH)] if action else None,
            )
        )
    elif largest == "host" and share >= HOST_SHARE:
        host = next((r for r in top if r["cause"] == "host"), None)
        text = (
            f"The GPU waits for host work between launches {share:.0%} of the {name} steps' time "
            f"({_ms(causes['host'] / n)} per step)"
        )
        if host is not None and host.get("stack"):
            text += f"; the largest: {_where(host)}, {_ms(host['ms'])}"
        out.append(
            Finding(
                "host-bound",
                text + ".",
                "warning",
                phase,
                "overlap that host work with the GPU's (asynchronous scheduling) or move it out of the step",
                causes["host"],
                whatif=[
                    ch.Change(
                        ch.HOST,
                        value=float(LAUNCH_GAP_NS),
                        label=f"host work between launches cut to the dispatch floor ({LAUNCH_GAP_NS / 1e3:g} us)",
                    )
                ],
            )
        )
    elif largest == "wait" and share >= WAIT_SHARE:
        out.append(
            Finding(
                "gpu-waits",
                f"Kernels of the {name} steps were issued but waited {share:.0%} of the steps' time before starting: "
                "on another stream, an event, or inside graph replays the device's own kernel-to-kernel latency.",
                "info",
                phase,
            )
        )
    return out


def _replayed(a: Analysis, found: list[Finding]) -> None:
    """Each finding's time at stake becomes its what-if's replayed saving over its phase's steps
    (``analysis.replay``): no more than the steps could lose, where the sum of the time involved
    overlaps with other causes and with work the step does not wait for."""
    replayer = getattr(a, "replayer", None)
    for f in found:
        if f.at_stake_ms is None:
            continue
        f.sum_ms = f.at_stake_ms
        if replayer is None or not f.whatif:
            f.at_stake_basis = "sum"
            continue
        f.at_stake_ms = max(replayer.saving_ms(f.whatif, f.phase), 0.0)
        f.at_stake_basis = "replayed"


def _where(row: dict) -> str:
    """call in op, under frame: as much of it as the trace names."""
    parts = []
    if row.get("call"):
        parts.append(str(row["call"]))
    if row.get("op"):
        parts.append(("in " if parts else "") + str(row["op"]))
    frame = next((s for s in reversed(row.get("stack") or []) if ".py(" in s), None)
    if frame:
        parts.append(("under " if parts else "") + frame)
    return " ".join(parts) if parts else "host work"


def _sync_action(row: dict) -> str:
    call, op = (row.get("call") or "").lower(), row.get("op") or ""
    frame = next((s for s in reversed(row.get("stack") or []) if ".py(" in s), None)
    at = f" in {frame}" if frame else ""
    if "memcpy" in call or op in ("aten::copy_", "aten::to", "aten::_to_copy"):
        return (
            f"make the copy{at} asynchronous (pinned host memory and non_blocking=True), keep the data on the "
            "GPU, or move the copy out of the step"
        )
    if "synchronize" in call:
        return f"drop the synchronize{at} or move it out of the step"
    return f"avoid reading GPU values on the host{at} (.item(), .tolist(), nonzero) inside the step"


def _cpu_overhead(a: Analysis, p: dict) -> list[Finding]:
    """A CPU-only run: the time between compute ops is Python and framework dispatch."""
    share, idle = p.get("idle_share") or 0.0, p.get("gpu_idle_ms") or 0.0
    if share < CPU_OVERHEAD_SHARE:
        return []
    w, _ = _phase_units(a, "decode")
    action = None if compiled(a, w) else "torch.compile the model (fewer, fused ops) or decode a larger batch per step"
    return [
        Finding(
            "decode-overhead-bound",
            f"Decode is overhead-bound: {share:.0%} of each decode step passes between compute ops "
            "(Python and framework dispatch).",
            "warning",
            "decode",
            action,
            idle if action else None,
            whatif=[ch.Change(ch.HOST, value=0.0, label="no time between compute ops")] if action else None,
        )
    ]


# --- fusion --------------------------------------------------------------------------


def _phase_units(a: Analysis, phase: str) -> tuple[pd.DataFrame, np.ndarray]:
    w = a.work
    weight = phase_weights(w["phase"].to_numpy(), w["prefill_share"].to_numpy(), phase)
    keep = weight > 0
    return w[keep], weight[keep]


def compiled(a: Analysis, w: pd.DataFrame) -> bool:
    """The run was compiled: the collect sidecar says so, or Inductor-generated kernels ran."""
    side = (a.workload or {}).get("workload") or {}
    if side.get("compile") or side.get("cuda_graphs"):
        return True
    names = pd.unique(w["name"].astype(str))
    return any(_INDUCTOR.match(n) for n in names)


def _fusion(a: Analysis, phase: str, p: dict) -> list[Finding]:
    if not _fusible_enough(p):
        return []
    w, weight = _phase_units(a, phase)
    if compiled(a, w):
        return []
    found = fusion_finding(phase, p, *fusable_runs(w, weight))
    for f in found:
        rows = fused_away(w)
        f.whatif = [
            ch.Change(
                ch.DURATIONS,
                rows=rows,
                durations=np.zeros(len(rows), np.int64),
                drop_launches=True,
                label="each chain of fusible kernels run as one kernel as long as its longest, launched once",
            )
        ]
    return found


def _fusible_enough(p: dict) -> bool:
    kernel = p.get("kernel_ms") or 0.0
    return kernel > 0 and _fusible_ms(p) >= FUSION_SHARE * kernel


def _fusible_ms(p: dict) -> float:
    cats = p.get("by_category") or {}
    return sum(cats.get(c, 0.0) for c in FUSIBLE)


def fusion_finding(phase: str, p: dict, saved: float, runs: int, count: int) -> list[Finding]:
    """The fusion advice of one phase (its figures ``p``) from its chains of fusible kernels
    (``fusable_runs``: ms saved, chains, kernels); none where little of the kernel time is fusible
    or nothing is saved. A merge of windows calls it with the windows' chains summed."""
    if not _fusible_enough(p) or saved <= 0:
        return []
    fusible_ms, kernel = _fusible_ms(p), p["kernel_ms"]
    name = _PHASE.get(phase, phase)
    text = (
        f"Elementwise, normalization, activation and RoPE kernels are {fusible_ms / kernel:.0%} of {name} kernel "
        f"time ({_ms(fusible_ms)}); {count:,} of them run back to back in {runs:,} chains that could each be one "
        "kernel, saving up to all but each chain's longest kernel"
    )
    return [
        Finding(
            "fuse-elementwise",
            text + ".",
            "info",
            phase,
            "fuse them: torch.compile the model, or use fused kernels (RMSNorm with the residual add, "
            "SiLU-and-mul, RoPE)",
            saved,
        )
    ]


def fusable_runs(w: pd.DataFrame, weight: np.ndarray) -> tuple[float, int, int]:
    """(ms a fused chain could save, chains, kernels in them): chains are two or more
    fusible kernels back to back on one stream within one step; fused, a chain still costs at
    least its longest kernel, so what it can save is the rest."""
    if not len(w):
        return 0.0, 0, 0
    o = np.lexsort((w["start_ns"].to_numpy(), w["stream"].to_numpy(), w["step"].to_numpy()))
    fus = np.isin(w["category"].to_numpy()[o], FUSIBLE)
    step, stream = w["step"].to_numpy()[o], w["stream"].to_numpy()[o]
    ms = w["dur_ns"].to_numpy()[o] * weight[o] / 1e6
    new = np.ones(len(o), dtype=bool)
    new[1:] = ~fus[:-1] | (step[1:] != step[:-1]) | (stream[1:] != stream[:-1])
    chain = np.cumsum(new)[fus]
    if not len(chain):
        return 0.0, 0, 0
    ms_f = ms[fus]
    size = np.bincount(chain)
    total = np.bincount(chain, weights=ms_f)
    longest = np.zeros(len(size))
    np.maximum.at(longest, chain, ms_f)
    multi = size >= 2
    return float((total - longest)[multi].sum()), int(multi.sum()), int(size[multi].sum())


def fused_away(w: pd.DataFrame) -> np.ndarray:
    """Work rows (``w``'s index) a fused chain would not run: every kernel of a chain of two or
    more but its longest (the chains of ``fusable_runs``)."""
    if not len(w):
        return np.zeros(0, np.int64)
    o = np.lexsort((w["start_ns"].to_numpy(), w["stream"].to_numpy(), w["step"].to_numpy()))
    fus = np.isin(w["category"].to_numpy()[o], FUSIBLE)
    step, stream = w["step"].to_numpy()[o], w["stream"].to_numpy()[o]
    new = np.ones(len(o), dtype=bool)
    new[1:] = ~fus[:-1] | (step[1:] != step[:-1]) | (stream[1:] != stream[:-1])
    rows = w.index.to_numpy()[o][fus]
    chain = np.cumsum(new)[fus]
    dur = w["dur_ns"].to_numpy()[o][fus]
    size = np.bincount(chain)
    # Per chain, its longest kernel stays (the first of equals).
    by = np.lexsort((-dur, chain))
    first = np.ones(len(by), bool)
    first[1:] = chain[by][1:] != chain[by][:-1]
    keep = np.zeros(len(rows), bool)
    keep[by[first]] = True
    return rows[(size[chain] >= 2) & ~keep].astype(np.int64)


# --- decode weights ------------------------------------------------------------------


def _decode_weights(a: Analysis, p: dict) -> list[Finding]:
    kernel = p.get("kernel_ms") or 0.0
    if kernel <= 0:
        return []
    w, weight = _phase_units(a, "decode")
    mem = (
        np.isin(w["category"].to_numpy(), _MATRIX)
        & (w["bound"].to_numpy() == "memory")
        & w["flops"].notna().to_numpy()
        & (w["unit"].to_numpy() == "matrix")
    )
    if not mem.any():
        return []
    m = w[mem]
    f = weight[mem]
    ms = m["dur_ns"].to_numpy() * f / 1e6
    out = []
    # The decode parts of mixed steps bound by their prefill chunks already share the chunk's
    # weight reads (analysis.steps.mixed): no batch advice rests on them.
    own = ~m["passenger"].to_numpy(dtype=bool) if "passenger" in m else np.ones(len(m), dtype=bool)
    own_kernel = kernel - ((p.get("passenger") or {}).get("kernel_ms") or 0.0)
    mem_ms = float(ms[own].sum())
    if own_kernel > 0 and mem_ms >= DECODE_GEMM_SHARE * own_kernel:
        mo, fo = m[own], f[own]
        flops = mo["flops"].to_numpy() * fo
        peak = np.where(
            np.isnan(mo["achievable_flops"].to_numpy()), mo["peak_flops"].to_numpy(), mo["achievable_flops"].to_numpy()
        )
        need_ms = float(np.nansum(flops / peak)) * 1e3
        at_stake = mem_ms - need_ms
        intensity = float(np.nansum(flops) / np.nansum(mo["bytes"].to_numpy() * fo))
        ridge = float(np.nanmedian(mo["ridge"].to_numpy()))
        tokens = _decode_tokens(a)
        per = f" for {tokens:,.3g} token{'s' if tokens != 1 else ''} per step" if tokens else ""
        text = (
            f"Decode GEMMs read their weights{per}: {_ms(mem_ms)} ({mem_ms / own_kernel:.0%} of decode kernel "
            f"time) is memory-bound at {intensity:,.3g} FLOP/byte against a ridge of {ridge:,.3g}; a larger batch "
            f"shares each weight read among more tokens (at the achievable compute peak their FLOPs need "
            f"{_ms(need_ms)})"
        )
        if at_stake > 0:
            need = mo["flops"].to_numpy() / peak * 1e9
            out.append(
                Finding(
                    "decode-batch",
                    text + ".",
                    "info",
                    "decode",
                    _batch_action(a),
                    at_stake,
                    whatif=[
                        ch.Change(
                            ch.DURATIONS,
                            rows=mo.index.to_numpy(),
                            durations=np.minimum(np.nan_to_num(need, nan=np.inf), mo["dur_ns"].to_numpy()).astype(
                                np.int64
                            ),
                            label="memory-bound decode GEMMs at the time their FLOPs need",
                        )
                    ],
                )
            )
    stored = weight_precisions(a, m)
    sixteen = np.isin(stored, _SIXTEEN_BIT)
    ms16 = float(ms[sixteen].sum())
    fp8 = ((a.device.get("peak_flops") or {}).get("matrix") or {}).get("fp8")
    if fp8 and ms16 >= FP8_SHARE * kernel:
        dtypes = "/".join(sorted(set(stored[sixteen].tolist())))
        text = (
            f"Decode GEMMs are memory-bound on {dtypes} weights ({_ms(ms16)}, {ms16 / kernel:.0%} of decode kernel "
            f"time) and {a.device.get('spec')} has an FP8 matrix peak: FP8 weights halve the bytes they read"
        )
        narrow = pd.Series(ms[~sixteen]).groupby(stored[~sixteen]).sum().sort_values(ascending=False)
        if len(narrow):
            # Kernels already on narrower weights gain nothing from FP8 (MXFP4's bytes would double).
            text += (
                "; not counted: "
                + ", ".join(f"{_ms(v)} on {k} weights" for k, v in narrow.items())
                + ", which FP8 would not shrink"
            )
        out.append(
            Finding(
                "fp8-weights",
                text + ".",
                "info",
                "decode",
                "serve FP8 weights: an FP8 checkpoint, or the engine's online FP8 quantisation "
                "(vLLM and SGLang: --quantization fp8)",
                ms16 / 2,
                whatif=[
                    ch.Change(
                        ch.DURATIONS,
                        rows=m.index.to_numpy()[sixteen],
                        durations=(m["dur_ns"].to_numpy()[sixteen] // 2).astype(np.int64),
                        label="16-bit decode GEMMs at half their time (FP8 weights)",
                    )
                ],
            )
        )
    return out


# The model's weight classes a dense GEMM the model priced ("linear") may belong to.
_LINEAR_CLASSES = ("attention", "linear_attention", "mlp", "shared_experts")


def weight_precisions(a: Analysis, m: pd.DataFrame) -> np.ndarray:
    """Per GEMM unit of ``m``: the precision its weights are stored at, which sets the bytes it
    reads (its ``dtype`` is the rate its MMA runs at: a Marlin MXFP4 x bf16 MoE GEMM runs at the
    bf16 rate on 4-bit weights). A name stating 16-bit activations x narrow weights says
    "sub-16-bit"; else a unit the model priced has its component's stored precision (a dense GEMM
    nothing matched: each dense class's, joined where they differ), any other its dtype."""
    out = m["dtype"].astype(str).to_numpy().astype(object)
    prec = (a.model or {}).get("precision") or {}
    by_comp = {
        "experts": {prec.get("experts")},
        "lm_head": {prec.get("lm_head")},
        "linear": {prec[c] for c in _LINEAR_CLASSES if c in prec},
    }
    model = m["cost_source"].astype(str).to_numpy() == "model"
    comp = m["component"].astype(str).to_numpy()
    for i in np.flatnonzero(model):
        kinds = by_comp.get(comp[i], set()) - {None}
        if len(kinds) == 1:
            out[i] = kinds.pop()
        elif kinds:
            out[i] = "/".join(sorted(kinds))
    # The name is the kernel's own word: 16-bit activations x narrow weights, whatever the model says.
    names = m["name"].astype(str)
    said = {n: mixed_activation(n) is not None for n in pd.unique(names)}
    mixed = names.map(said).to_numpy(dtype=bool)
    out[mixed & np.isin(out, _SIXTEEN_BIT)] = "sub-16-bit"
    return out


def _decode_tokens(a: Analysis) -> float | None:
    s = a.steps[a.steps["phase"] == "decode"] if len(a.steps) else a.steps
    if not len(s):
        return None
    n = s["batch"].where(s["batch"].notna(), s["tokens"])
    return float(n.mean()) if n.notna().all() else None


def _batch_action(a: Analysis) -> str:
    src = a.phase_source
    if src in (frameworks.SOURCE_VLLM, frameworks.SOURCE_VLLM_FRAMES):
        more = "more concurrent requests (vLLM: --max-num-seqs, and enough requests to fill it)"
    elif src in (frameworks.SOURCE_SGLANG, frameworks.SOURCE_SGLANG_FRAMES):
        more = "more concurrent requests (SGLang: --max-running-requests, and enough requests to fill it)"
    else:
        more = "a larger batch of sequences per decode step"
    return f"raise the decode batch: {more}"


def _ms(ms: float) -> str:
    return f"{ms / 1e3:.3g} s" if ms >= 1e3 else f"{ms:.3g} ms"
