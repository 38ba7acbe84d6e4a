"""Collectives on another GPU: time from the interconnect, efficiency from the source trace.

A collective of S bytes over N ranks cannot finish faster than its latency-bandwidth bound

    T = (base + steps x hop) + traffic / B

with ``base`` the library's start-up latency per call, ``hop`` the latency of one step over a
link, ``B`` the bandwidth per direction one rank of the group has (``tracekit.specs.links``:
links to N - 1 peers on a mesh, every link on a switch), and per algorithm (the alpha-beta model
of Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005; step counts as NCCL's tuner counts them, NVIDIA/nccl src/graph/tuning.cc):

==============  ==================  =============================  ======================
collective      algorithm           steps                          traffic per rank
==============  ==================  =============================  ======================
all-reduce      ring                2 (N - 1)                      2 (N - 1) / N x S
all-reduce      tree                2 (N - 1) (one node: a chain)  2 x S (tuning.cc: algBw = busBw / 2)
all-reduce      one-shot            1                              (N - 1) x S (reads every peer's buffer)
all-reduce      two-shot            2                              2 (N - 1) / N x S
all-gather,     ring                N - 1                          (N - 1) / N x S (S: the whole output)
reduce-scatter  one-shot (direct)   1                              (N - 1) / N x S
all-to-all      any                 N - 1                          (N - 1) / N x S
==============  ==================  =============================  ======================

The bound assumes the library spreads its traffic over every link the group has (RCCL runs
several rings over the xGMI mesh, NCCL several channels over NVLink); what it reaches of that
is its *efficiency*: bound / measured time on the source. The efficiency transfers to the
target, the time does not: a collective takes T_target / efficiency there. Each collective's
projected time therefore splits into a latency part and a bandwidth part, and the larger says
which term dominates (small decode all-reduces: latency).

Message sizes: tracekit's pricing records a collective's per-rank ring traffic, 2 (N - 1) / N of
the all-reduced tensor, whether from recorded shapes (``analysis.pricing.engine_ops``) or from
the model (``models.costs``, ``--model`` and ``--tp``); S is recovered from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracekit.specs.links import GroupLink

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL = "all_reduce", "all_gather", "reduce_scatter", "all_to_all"
COLLECTIVES = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL)
RING, TREE, ONE_SHOT, TWO_SHOT = "ring", "tree", "one_shot", "two_shot"
ALGORITHMS = (RING, TREE, ONE_SHOT, TWO_SHOT)
LATENCY, BANDWIDTH = "latency", "bandwidth"

# Kernel names as the libraries write them: NCCL/RCCL "ncclDevKernel_AllGather_RING_LL",
# vLLM's custom all-reduce "cross_device_reduce_1stage/2stage", SGLang/AITER "one_shot"/"two_shot",
# PyTorch symmetric memory "one_shot_all_reduce", "two_shot_all_reduce_", "multimem_all_reduce_".
_KIND = (
    (ALL_TO_ALL, re.compile(r"all_?to_?all|alltoall|all2all|sendrecv", re.I)),
    (ALL_GATHER, re.compile(r"all_?gather", re.I)),
    (REDUCE_SCATTER, re.compile(r"reduce_?scatter", re.I)),
)
_ALGORITHM = (
    (TREE, re.compile(r"tree", re.I)),
    (ONE_SHOT, re.compile(r"one_?shot|1stage|1_stage", re.I)),
    # NVLink SHARP (multimem) reduces in the switch then broadcasts: two passes, each
    # peer's share once, the traffic of a two-shot all-reduce.
    (TWO_SHOT, re.compile(r"two_?shot|2stage|2_stage|multimem|nvls", re.I)),
)


def classify(name: str) -> tuple[str, str]:
    """(collective, algorithm) a kernel's name states; all-reduce and ring where it says
    nothing (what tracekit's pricing assumes for a collective it prices)."""
    kind = next((k for k, rx in _KIND if rx.search(name)), ALL_REDUCE)
    alg = next((a for a, rx in _ALGORITHM if rx.search(name)), RING)
    if kind != ALL_REDUCE and alg in (TREE, TWO_SHOT):
        alg = RING  # NCCL runs only rings for these (tuning.cc); two passes only make sense for a reduce
    return kind, alg


def steps_and_traffic(kind: str, alg: str, n: int) -> tuple[float, float]:
    """(steps, traffic per rank as a multiple of the message size S) of the table above."""
    if kind == ALL_REDUCE:
        return {
            RING: (2 * (n - 1), 2 * (n - 1) / n),
            TREE: (2 * (n - 1), 2.0),
            ONE_SHOT: (1, float(n - 1)),
            TWO_SHOT: (2, 2 * (n - 1) / n),
        }[alg]
    if kind in (ALL_GATHER, REDUCE_SCATTER):
        return (1, (n - 1) / n) if alg == ONE_SHOT else (n - 1, (n - 1) / n)
    return n - 1, (n - 1) / n


@dataclass(frozen=True)
class Bound:
    """A collective's latency-bandwidth bound on one group, seconds."""

    latency: float
    bandwidth: float

    @property
    def total(self) -> float:
        return self.latency + self.bandwidth

    @property
    def dominant(self) -> str:
        return LATENCY if self.latency >= self.bandwidth else BANDWIDTH


def bound(kind: str, alg: str, message_bytes: float, link: GroupLink) -> Bound:
    steps, traffic = steps_and_traffic(kind, alg, link.ranks)
    return Bound(link.base_latency + steps * link.hop_latency, traffic * message_bytes / link.bandwidth)


def message_bytes(priced_bytes: np.ndarray, n: int) -> np.ndarray:
    """S from the per-rank ring traffic tracekit's pricing records, 2 (N - 1) / N x S."""
    return priced_bytes / (2 * (n - 1) / n)


@dataclass
class CommProjection:
    """Per collective unit (rows of ``index`` in the work table): its bound on each side, its
    efficiency on the source, its projected time and that time's latency and bandwidth parts."""

    index: np.ndarray
    kind: np.ndarray
    algorithm: np.ndarray
    message: np.ndarray  # bytes
    measured: np.ndarray  # s
    bound_src: np.ndarray  # s
    lat_src: np.ndarray
    lat_tgt: np.ndarray  # s, the target bound's latency part
    bw_tgt: np.ndarray
    efficiency: np.ndarray  # bound_src / measured (from a factors file where one is given)
    projected: np.ndarray  # s
    src_link: GroupLink
    tgt_link: GroupLink
    notes: list[str] = field(default_factory=list)


def project_collectives(
    names: np.ndarray,
    priced_bytes: np.ndarray,
    dur_s: np.ndarray,
    index: np.ndarray,
    src_link: GroupLink,
    tgt_link: GroupLink,
    efficiency: dict[str, float] | None = None,
) -> CommProjection:
    """Each collective's time on the target: its target bound over its source efficiency.
    ``efficiency`` (collective kind -> fraction of the bound, from ``--factors``) replaces the
    source's own where given: what a check measured on the target itself."""
    n = src_link.ranks
    msg = message_bytes(priced_bytes, n)
    classes = [classify(str(x)) for x in names]
    kinds = np.array([k for k, _ in classes], dtype=object)
    algs = np.array([a for _, a in classes], dtype=object)
    b_s = [bound(k, a, s, src_link) for k, a, s in zip(kinds, algs, msg)]
    b_t = [bound(k, a, s, tgt_link) for k, a, s in zip(kinds, algs, msg)]
    bound_src = np.array([b.total for b in b_s])
    lat_src = np.array([b.latency for b in b_s])
    lat_t, bw_t = np.array([b.latency for b in b_t]), np.array([b.bandwidth for b in b_t])
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.where(dur_s > 0, bound_src / dur_s, np.nan)
    notes = []
    if efficiency:
        learnt = np.array([efficiency.get(k, np.nan) for k in kinds], dtype=float)
        eff = np.where(np.isnan(learnt), eff, learnt)
    over = np.flatnonzero(eff > 1)
    if len(over):
        notes.append(
            f"{len(over)} collective(s) ran faster than their latency-bandwidth bound on the source "
            f"({src_link.describe()}): the link or group size assumed is too small for them; their "
            "projection keeps the measured ratio"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        projected = np.where(eff > 0, (lat_t + bw_t) / eff, dur_s)
    return CommProjection(
        index, kinds, algs, msg, dur_s, bound_src, lat_src, lat_t, bw_t, eff, projected, src_link, tgt_link, notes
    )


def summary(cp: CommProjection, rows: np.ndarray) -> dict[str, Any] | None:
    """The communication term of the units ``rows`` (a mask over ``cp.index``), for a report:
    measured and projected ms, the projected time's latency and bandwidth parts (at the
    efficiency each collective reached), which dominates, and the links assumed."""
    if not rows.any():
        return None
    eff = cp.efficiency[rows]
    safe = np.where(eff > 0, eff, np.nan)
    lat_ms = float(np.nansum(cp.lat_tgt[rows] / safe) * 1e3)
    bw_ms = float(np.nansum(cp.bw_tgt[rows] / safe) * 1e3)
    measured_ms = float(cp.measured[rows].sum() * 1e3)
    bound_ms = float(cp.bound_src[rows].sum() * 1e3)
    lat_src_ms = float(cp.lat_src[rows].sum() * 1e3)
    kinds = {
        f"{k} ({a})": int(c)
        for (k, a), c in zip(
            *np.unique(
                np.stack([cp.kind[rows].astype(str), cp.algorithm[rows].astype(str)], axis=1),
                axis=0,
                return_counts=True,
            )
        )
    }
    msg = cp.message[rows]
    return {
        "collectives": int(rows.sum()),
        "by_kind": kinds,
        "message_bytes": [float(msg.min()), float(np.median(msg)), float(msg.max())],
        "measured_ms": measured_ms,
        "projected_ms": float(cp.projected[rows].sum() * 1e3),
        "latency_ms": lat_ms,
        "bandwidth_ms": bw_ms,
        "dominant": LATENCY if lat_ms >= bw_ms else BANDWIDTH,
        "source_bound_ms": bound_ms,
        "source_latency_ms": lat_src_ms,
        "source_bandwidth_ms": bound_ms - lat_src_ms,
        "efficiency": bound_ms / measured_ms if measured_ms else None,
        "source_link": cp.src_link.to_dict(),
        "target_link": cp.tgt_link.to_dict(),
    }


def efficiencies(cp: CommProjection, rows: np.ndarray) -> dict[str, float]:
    """Time-weighted efficiency per collective kind (sum of bounds / sum of measured times)."""
    out = {}
    for k in np.unique(cp.kind[rows].astype(str)):
        sel = rows & (cp.kind.astype(str) == k)
        m = cp.measured[sel].sum()
        if m > 0:
            out[str(k)] = float(cp.bound_src[sel].sum() / m)
    return out
