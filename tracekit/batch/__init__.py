"""Many traces at once (``tracekit batch``): one summary row per trace, on local processes
or a Dask cluster. Each worker runs the same read -> analyse path as ``tracekit report``.

    from tracekit.batch import expand, analyse_many
    fleet = analyse_many(["nightly/"], jobs=4)            # or dask="local" / "tcp://host:8786"
    fleet.rows[0]["decode_step_p50_ms"]
"""

from __future__ import annotations

import time

from tracekit.batch.executors import default_jobs, executor
from tracekit.batch.fleet import (
    OUTLIER_METRICS,
    OUTLIER_RULE,
    Fleet,
    Interrupted,
    default_timeout,
    mark_outliers,
    run_batch,
)
from tracekit.batch.inputs import Item, expand
from tracekit.batch.rows import COLUMNS, analyse_path, row_from_analysis

__all__ = [
    "COLUMNS",
    "OUTLIER_METRICS",
    "OUTLIER_RULE",
    "Fleet",
    "Interrupted",
    "Item",
    "analyse_items",
    "analyse_many",
    "analyse_path",
    "default_jobs",
    "default_timeout",
    "executor",
    "expand",
    "mark_outliers",
    "row_from_analysis",
    "run_batch",
]


def analyse_many(
    paths: list[str],
    *,
    jobs: int | None = None,
    dask: str | None = None,
    progress=None,
    timeout: float | None = None,
    on_row=None,
) -> Fleet:
    """Analyse every trace in ``paths`` (files, folders, globs) into a ``Fleet``: on ``jobs``
    local processes, or on a Dask cluster (``dask``: ``"local"`` or a scheduler address).
    ``timeout``: seconds per trace (None: ``default_timeout`` of its size; 0: none);
    ``on_row(row)`` gets each row as it finishes. Raises ``Interrupted`` (with the finished
    rows) on Ctrl-C."""
    return analyse_items(expand(paths), jobs=jobs, dask=dask, progress=progress, timeout=timeout, on_row=on_row)


def analyse_items(
    items: list[Item],
    *,
    jobs: int | None = None,
    dask: str | None = None,
    progress=None,
    timeout: float | None = None,
    on_row=None,
) -> Fleet:
    """``analyse_many`` of inputs already expanded (``expand``)."""
    # No more workers than traces to analyse (a folder's files count one each).
    jobs = min(jobs or default_jobs(), max(1, sum(len(i.files) or 1 for i in items)))
    start = time.perf_counter()
    ex = executor(dask, jobs)
    try:
        rows = run_batch(items, ex, progress, timeout=timeout, on_row=on_row)
    except Interrupted as e:
        e.fleet = Fleet(e.rows, executor=ex.description, seconds=round(time.perf_counter() - start, 2), complete=False)
        raise
    finally:
        ex.close()
    return Fleet(rows, executor=ex.description, seconds=round(time.perf_counter() - start, 2))
