"""Many traces at once: the batch driver and the ``Fleet`` value it returns.

``run_batch`` submits one task per trace (a path goes out, a row comes back), keeps at
most one task per worker slot in flight, and collects rows as they complete. A folder of
several files is first analysed file by file; when ``check_one_run`` (tracekit.trace.runs)
says the files are the ranks of one run, the folder is analysed once more as that run and
its row replaces theirs; otherwise the files' rows stand, each noting why. Each trace has a
time limit (``default_timeout``, or the caller's): past it, its row says ``timeout`` and its
worker is stopped. Rows go to ``on_row`` as they finish, so a caller can keep them on disk
before the batch ends (``tracekit.batch.journal``).

``Fleet`` holds the rows in input order and marks outliers (``OUTLIER_METRICS``): a value
beyond Tukey's fences, 1.5 interquartile ranges outside the quartiles of that column's
values over the fleet's analysed rows, taken on a log scale (times and rates are
ratio-scale: twice as slow is as far as half as slow), with at least ``MIN_FOR_OUTLIERS``
values in the column.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from tracekit import __version__
from tracekit.batch.executors import TimedOut
from tracekit.batch.inputs import Item
from tracekit.batch.rows import COLUMNS, ERROR, OK, TIMEOUT, analyse_path, error_row
from tracekit.errors import TracekitError

OUTLIER_METRICS = ("prefill_step_p50_ms", "decode_step_p50_ms", "prefill_tokens_per_s", "decode_tokens_per_s")
MIN_FOR_OUTLIERS = 4
IQR_FENCE = 1.5
OUTLIER_RULE = (
    f"beyond {IQR_FENCE} interquartile ranges outside the quartiles (Tukey's fences) of the column's "
    f"values over the analysed traces, on a log scale; columns with fewer than {MIN_FOR_OUTLIERS} values "
    "mark none"
)


@dataclass
class Fleet:
    """The batch table: one row per trace, in input order."""

    rows: list[dict[str, Any]]
    executor: str = ""
    seconds: float | None = None
    outlier_rule: str = OUTLIER_RULE
    columns: tuple[str, ...] = field(default=COLUMNS)
    # False for the rows an interrupted batch had finished (some traces have no row).
    complete: bool = True

    def __post_init__(self) -> None:
        mark_outliers(self.rows)

    @property
    def errors(self) -> int:
        return sum(r["status"] == ERROR for r in self.rows)

    @property
    def timeouts(self) -> int:
        return sum(r["status"] == TIMEOUT for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "kind": "tracekit.fleet",
            "tracekit_version": __version__,
            "executor": self.executor,
            "seconds": self.seconds,
            "traces": len(self.rows),
            "errors": self.errors,
            "timeouts": self.timeouts,
            "complete": self.complete,
            "outlier_rule": self.outlier_rule,
            "columns": list(self.columns),
            "rows": [dict(r) for r in self.rows],
        }


def mark_outliers(rows: list[dict[str, Any]]) -> None:
    """Set each row's ``outliers`` to the ``OUTLIER_METRICS`` columns where it is an outlier
    (comma-separated, "" for none; ``None`` on error rows)."""
    flagged: dict[int, list[str]] = {i: [] for i, r in enumerate(rows) if r["status"] == OK}
    for col in OUTLIER_METRICS:
        vals = [
            (i, math.log10(v))
            for i, r in enumerate(rows)
            if r["status"] == OK and isinstance(v := r.get(col), (int, float)) and v > 0 and math.isfinite(v)
        ]
        if len(vals) < MIN_FOR_OUTLIERS:
            continue
        q1, q3 = _quartiles(sorted(v for _, v in vals))
        lo, hi = q1 - IQR_FENCE * (q3 - q1), q3 + IQR_FENCE * (q3 - q1)
        for i, v in vals:
            if v < lo or v > hi:
                flagged[i].append(col)
    for i, r in enumerate(rows):
        r["outliers"] = ",".join(flagged[i]) if i in flagged else None


def _quartiles(s: list[float]) -> tuple[float, float]:
    """First and third quartiles, linear interpolation (numpy's default)."""

    def q(p: float) -> float:
        x = p * (len(s) - 1)
        lo = math.floor(x)
        return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (x - lo)

    return q(0.25), q(0.75)


# --- the driver ----------------------------------------------------------------------

# The default time limit of one trace: generous for any trace that finishes (reading and
# analysing runs at about 0.25-0.5 s per MB of gzipped trace, 15-35 ms per MB of JSON, on
# the shared traces and a 4 GB synthetic one), short enough that a hung one ends.
TIMEOUT_BASE_S = 600.0
TIMEOUT_PER_MB_S = 10.0  # per MB on disk (compressed); 0.5 s per MB of JSON at gzip's ~20x
COMPRESSED = (".gz", ".zst")


def default_timeout(paths: list[str]) -> float:
    """The default limit for a trace of ``paths`` (one file, or one run's ranks):
    ``TIMEOUT_BASE_S`` plus ``TIMEOUT_PER_MB_S`` per MB on disk, an uncompressed file's MB
    counting a twentieth (JSON compresses about 20x)."""
    mb = sum(_size(p) / (1 if p.endswith(COMPRESSED) else 20) for p in paths) / 1e6
    return round(TIMEOUT_BASE_S + TIMEOUT_PER_MB_S * mb, 1)


class Interrupted(Exception):
    """The batch was stopped (Ctrl-C, SIGTERM) before every trace was done: ``rows`` holds the
    rows finished by then, in input order, and ``total`` the traces there were."""

    def __init__(self, rows: list[dict[str, Any]], total: int):
        super().__init__(f"interrupted after {len(rows)} of {total} traces")
        self.rows, self.total = rows, total
        self.fleet: Fleet | None = None  # the rows as a Fleet (complete=False), set by analyse_items


def run_batch(
    items: list[Item],
    executor,
    progress: Callable[[int, int], None] | None = None,
    *,
    timeout: float | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Rows for ``items`` (``tracekit.batch.inputs.expand``), in their order, analysed on
    ``executor`` (``tracekit.batch.executors``). ``progress(done, total)`` is called as rows
    complete (``total`` shrinks when a folder turns out to be one run), ``on_row(row)`` with each
    row as it finishes (a folder's files one by one, before the folder is found to be one run).

    ``timeout``: seconds per trace (None: ``default_timeout`` of its size; 0: no limit); a trace
    past it is a ``timeout`` row and its worker is stopped. A ``KeyboardInterrupt`` (Ctrl-C, or a
    SIGTERM the caller turns into one) stops every worker and raises ``Interrupted`` with the
    rows finished so far."""
    from tracekit.trace.runs import check_one_run

    # Tasks: (slot, path, note, member-of-group index or None, files). Slots index the final rows.
    queue: list[tuple] = []
    final: dict[tuple, dict] = {}
    groups: dict[int, dict] = {}
    for gi, item in enumerate(items):
        if item.is_group:
            groups[gi] = {"item": item, "rows": {}, "keys": {}}
            queue += [((gi, k), f, None, gi, [f]) for k, f in enumerate(item.files)]
        else:
            queue.append(((gi, 0), item.path, None, None, [item.path]))
    # Largest first: the long traces start early and the small ones fill in around them.
    queue.sort(key=lambda task: -_size(task[1]))
    total = len(queue)
    done = 0
    pending: dict = {}

    def limit(files: list[str]) -> float | None:
        return default_timeout(files) if timeout is None else (timeout or None)

    def fill() -> None:
        while queue and len(pending) < executor.slots:
            task = queue.pop(0)
            pending[executor.submit(analyse_path, task[1], task[2], timeout=limit(task[4]))] = task

    def collect(fut, task) -> tuple[dict, Any]:
        slot, path, note, group, files = task
        try:
            return executor.result(fut)
        except TimedOut as e:
            msg = f"timed out: not analysed within {e.limit_s:g} s (--timeout), so {e.what}"
            return error_row(path, msg, note=note, seconds=e.limit_s, status=TIMEOUT), None
        except Exception as e:  # noqa: BLE001 - a lost worker is one error row, not the end
            msg = executor.died(e) or f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            return error_row(path, msg, note=note), None

    try:
        fill()
        while pending:
            finished, _ = executor.wait_first(set(pending))
            for fut in finished:
                task = pending.pop(fut)
                slot, path, note, group = task[:4]
                row, key = collect(fut, task)
                if on_row:
                    on_row(row)
                if group is None:
                    final[slot] = row
                    done += 1
                else:
                    g = groups[group]
                    g["rows"][slot], g["keys"][slot] = row, key
                    if len(g["rows"]) == len(g["item"].files):
                        verdict = _one_run(g, check_one_run)
                        if verdict is None:  # the ranks of one run: analysed again, together, as one trace
                            total -= len(g["item"].files) - 1
                            g["whole"] = True
                            queue.insert(
                                0,
                                (
                                    (group, 0),
                                    g["item"].path,
                                    f"the ranks of one run: {len(g['item'].files)} files",
                                    None,
                                    g["item"].files,
                                ),
                            )
                        else:
                            for s, r in g["rows"].items():
                                r["note"] = verdict
                                final[s] = r
                                done += 1
                if progress:
                    progress(done, total)
            fill()
    except KeyboardInterrupt:
        raise Interrupted(_so_far(final, groups), total) from None
    return [final[s] for s in sorted(final)]


def _so_far(final: dict, groups: dict) -> list[dict[str, Any]]:
    """The rows finished when a batch stops: the final ones, and the rows of a folder's files
    analysed before the folder was decided (or while it was analysed again as one run)."""
    rows = dict(final)
    for gi, g in groups.items():
        if g.get("whole") and (gi, 0) in final:  # the run's row stands for its files
            continue
        for s, r in g["rows"].items():
            if s not in rows:
                if r.get("note") is None:
                    r["note"] = "analysed on its own; the batch stopped before its folder was taken as one run or not"
                rows[s] = r
    return [rows[s] for s in sorted(rows)]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _one_run(group: dict, check) -> str | None:
    """None when the group's files are one run's ranks, else why they are taken one by one."""
    folder = group["item"].path
    unread = [r["name"] for r in group["rows"].values() if r["status"] != OK]
    if unread:
        return (
            f"analysed file by file, not as one run: {', '.join(unread[:3])}{' and others' if len(unread) > 3 else ''} "
            f"in {folder} could not be analysed"
        )
    try:
        check(folder, [group["keys"][s] for s in sorted(group["keys"])])
    except TracekitError as e:
        why = e.message.split("; analyse them one by one")[0]  # the advice is what batch does
        return f"analysed file by file, not as one run: {why}"
    except Exception as e:  # noqa: BLE001 - RunKey lacks something check_one_run came to need
        return f"analysed file by file: internal error deciding whether {folder} is one run ({type(e).__name__}: {e})"
    return None
