"""Is a folder of traces one run? Only the ranks of one run may be merged into one timeline.

A folder holding unrelated traces (nightly profiles, several GPUs, a copy of the same file)
merged into one "run" gives nonsense: a 43-hour span, bound shares adding up to more than
100%. Files are one run when

- no two are the same trace (a copy) or claim the same rank,
- each says which rank it is (``distributedInfo``, or the engine's per-rank file name) and
  they agree on the world size,
- they ran on one GPU type, and
- their time spans overlap (the ranks of a run are profiled together).

``check_one_run`` raises ``TracekitError`` saying which condition fails and what to do.
"""

from __future__ import annotations

import os
from typing import cast

from tracekit.errors import TracekitError
from tracekit.trace.model import Trace
from tracekit.trace.windows import WINDOW_NAME

_ONE_BY_ONE = (
    "analyse them one by one (tracekit report FILE) or all at once (tracekit batch FOLDER, a row per "
    "trace), or put each run's ranks in a folder of their own"
)


def fingerprint(t: Trace) -> tuple:
    """What tells a copy from a rank without hashing gigabytes: the rank a file states (files
    stating different ranks are never copies, however alike: hand-built or synthetic ranks can
    match in everything else), then its decompressed size, event count and first and last
    timestamps to the nanosecond, which two real ranks never share."""
    rank = (t.distributed or {}).get("rank")
    return (rank if isinstance(rank, int) else repr(rank)), t.n_bytes, t.n_events, t.start_ns, t.end_ns


def check_one_run(folder: str, parts: list[Trace]) -> None:
    """Refuse to merge ``parts`` (read from ``folder``) unless they are the ranks of one run."""
    if len(parts) < 2:
        return
    names = [os.path.basename(t.path) for t in parts]
    if all(WINDOW_NAME.search(n) for n in names):
        raise TracekitError(
            f"{folder} holds {len(parts)} windows of a trace (tracekit split), each a trace of its "
            "own, not ranks to merge into one timeline: tracekit report FOLDER gives one merged "
            "report of the run; " + _ONE_BY_ONE
        )
    seen: dict[tuple, str] = {}
    for name, fp in zip(names, map(fingerprint, parts)):
        if fp in seen:
            raise TracekitError(f"{folder}: {seen[fp]} and {name} are the same trace (identical files); remove one")
        seen[fp] = name
    ranks = [(t.distributed or {}).get("rank") for t in parts]
    missing = [n for n, r in zip(names, ranks) if not isinstance(r, int)]
    if missing:
        raise TracekitError(
            f"{folder} holds {len(parts)} traces but {', '.join(missing[:3])}"
            f"{' and others' if len(missing) > 3 else ''} say no rank: they may be unrelated runs; " + _ONE_BY_ONE
        )
    by_rank: dict[int, str] = {}
    for name, r in zip(names, cast("list[int]", ranks)):  # (none missing: all ints)
        if r in by_rank:
            raise TracekitError(
                f"{folder}: {by_rank[r]} and {name} are both rank {r}: they are different runs; " + _ONE_BY_ONE
            )
        by_rank[r] = name
    # As text: distributedInfo is untrusted, and a list, or 2 beside "2", must not break the check.
    worlds = {str(w) for t in parts if (w := (t.distributed or {}).get("world_size")) is not None}
    if len(worlds) > 1:
        listed = ", ".join(sorted(worlds, key=lambda w: (len(w), w)))  # shorter first: numbers in numeric order
        raise TracekitError(
            f"{folder}: the traces disagree on the world size ({listed}): "
            "they are ranks of different runs; " + _ONE_BY_ONE
        )
    gpus = {g for t in parts if t.has_gpu and (g := t.device_name()) is not None}
    if len(gpus) > 1:
        raise TracekitError(
            f"{folder}: the traces ran on different GPUs ({', '.join(sorted(gpus))}): they are not one "
            "run; " + _ONE_BY_ONE
        )
    start = max(t.start_ns for t in parts)
    end = min(t.end_ns for t in parts)
    if start > end:
        raise TracekitError(
            f"{folder}: the traces' time spans do not overlap (the ranks of a run are profiled "
            "together): they are separate runs; " + _ONE_BY_ONE
        )
