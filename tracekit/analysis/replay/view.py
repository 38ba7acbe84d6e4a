"""The replay's part of an analysis (``Analysis.replay``): its books, the critical path by kind
per phase, and what would help, replayed: each finding's what-if alone, and all of them together
(replayed together, never added up).

JSON keys (``replay``):

- ``books``: ``steps`` (per step ``measured_ms``, ``replayed_ms`` unchanged, relative ``error``,
  ``unexplained_ms``), ``max_error``, ``reproduced`` (every step within 2%), ``unexplained_ms``,
  ``max_unexplained_share``, the latency models (``launch_latency_us``, ``device_gap_us`` per
  eager/graph) and their ``samples``;
- ``critical_path``: per phase, ms of the steps' critical paths by kind (kernel, launch, host, sync,
  queue, unexplained) and ``kernel_by_category``;
- ``what_would_help``: per finding with a what-if, ``finding``, ``phase``, ``whatif`` (sentences),
  ``saving_ms`` and the phase's replayed figures (``measured_ms``, ``replayed_ms``, ``ttft_ms`` /
  ``tpot_p50_ms`` / ``step_p50_ms`` / ``tokens_per_s`` as {measured, replayed});
- ``together``: every finding's what-if replayed at once, the same figures per phase, and
  ``sum_of_parts_ms`` per phase beside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracekit.analysis.replay import critical as cp
from tracekit.analysis.replay.changes import Change
from tracekit.analysis.replay.replay import StepReplay


def replay_view(replayer: StepReplay, findings: list) -> dict[str, Any]:
    books = replayer.books()
    out: dict[str, Any] = {"books": books, "critical_path": _critical(replayer), "what_would_help": []}
    changes: list[Change] = []
    parts: dict[str | None, float] = {}
    for f in findings:
        if not f.whatif or f.at_stake_basis != "replayed":
            continue
        o = replayer.run(f.whatif)
        out["what_would_help"].append(
            {
                "finding": f.id,
                "phase": f.phase,
                "whatif": [c.describe() for c in f.whatif],
                "saving_ms": f.at_stake_ms,
                "figures": o.phases.get(f.phase),
                "unpriced_kernels": o.unpriced or None,
            }
        )
        changes += f.whatif
        parts[f.phase] = parts.get(f.phase, 0.0) + (f.at_stake_ms or 0.0)
    if len(out["what_would_help"]) > 1:
        o = replayer.run(changes)
        out["together"] = {"whatif": [c.describe() for c in changes], "phases": o.phases, "sum_of_parts_ms": parts}
    return out


def _critical(replayer: StepReplay) -> dict[str, Any]:
    steps = replayer.steps
    if not len(steps):
        return {}
    tot = replayer.critical_totals()
    weights = replayer._weights()
    cats = _kernel_categories(replayer)
    out: dict[str, dict[str, Any]] = {}
    for p, w in weights.items():
        if not w.any():
            continue
        row: dict[str, Any] = {k: float((w * tot[k].to_numpy()).sum()) / 1e6 for k in cp.KINDS}
        by_cat: dict[str, float] = {}
        for i in np.flatnonzero(w > 0):
            for c, v in cats[i].items():
                by_cat[c] = by_cat.get(c, 0.0) + w[i] * v / 1e6
        row["kernel_by_category"] = dict(sorted(by_cat.items(), key=lambda kv: -kv[1]))
        out[p] = row
    return out


def _kernel_categories(replayer: StepReplay) -> list[dict[str, float]]:
    out = []
    for i in range(len(replayer.steps)):
        d: dict[str, float] = {}
        for s in replayer.critical_path(i):
            if s.kind == cp.KERNEL:
                c = s.label.split(":", 1)[0]
                d[c] = d.get(c, 0.0) + (s.end_ns - s.start_ns)
        out.append(d)
    return out
