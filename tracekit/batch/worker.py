"""One trace analysed in a process of its own, ended at a time limit: what a Dask task runs.

A Dask worker's thread cannot be stopped, and its process may not start ``multiprocessing``
children (it is daemonic), so a task with a limit starts ``python -m tracekit.batch.worker``,
hands it the path on stdin, and kills it when the limit passes (counted from when the task
starts, so time queued behind other tasks does not count). The worker thread is free again at
once; the row comes back, or ``Late`` saying the limit passed.
"""

from __future__ import annotations

import pickle
import select
import subprocess
import sys
from dataclasses import dataclass

# The child's first byte: tracekit is imported, the clock starts. Past STARTUP_WAIT_S without
# it, the child counts as hung too.
READY = b"R"
STARTUP_WAIT_S = 120.0


@dataclass(frozen=True)
class Late:
    """The analysis ran past ``limit_s`` and its process was killed."""

    limit_s: float


def analyse_limited(path: str, note: str | None, limit_s: float):
    """``tracekit.batch.rows.analyse_path(path, note)`` in a child process: its value, or ``Late``.
    The limit counts from when the child has imported tracekit (as a local worker, started from
    a server that has it imported, begins), so a slow start-up is not the trace's time."""
    proc = subprocess.Popen([sys.executable, "-m", "tracekit.batch.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], STARTUP_WAIT_S)
        if not ready or proc.stdout.read(1) != READY:
            raise subprocess.TimeoutExpired(proc.args, STARTUP_WAIT_S)
        out, _ = proc.communicate(pickle.dumps((path, note)), timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Late(limit_s)
    if proc.returncode != 0 or not out:
        raise RuntimeError(f"the analysis process on the Dask worker died (exit status {proc.returncode}: killed, "
                           "e.g. out of memory, or crashed)")
    return pickle.loads(out)


def main() -> None:
    import tracekit.analysis  # noqa: F401 - imported before the clock starts
    from tracekit.batch.rows import analyse_path

    result = sys.stdout.buffer
    result.write(READY)
    result.flush()
    path, note = pickle.loads(sys.stdin.buffer.read())
    sys.stdout = sys.stderr  # nothing the analysis prints can corrupt the result
    result.write(pickle.dumps(analyse_path(path, note)))
    result.flush()


if __name__ == "__main__":
    main()
