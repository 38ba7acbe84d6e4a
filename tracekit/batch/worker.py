"""Traces analysed in a process beside a Dask worker, ended at a time limit: what a Dask task runs.

A Dask worker's thread cannot be stopped, and its process may not start ``multiprocessing``
children (it is daemonic), so each worker thread keeps one child, ``python -m
tracekit.batch.worker``, that analyses the traces it is sent one at a time (tracekit imported
once, not per trace). A task sends the path and waits for the row; when the limit passes
(counted from when the child is ready, so its start-up is not the trace's time) the child is
killed, ``Late`` comes back, and the next task starts a fresh child. The worker thread is free
again at once.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, cast

# The child's first frame: tracekit is imported. Past STARTUP_WAIT_S without it, it counts as hung.
READY = b"R"
STARTUP_WAIT_S = 120.0
_HEADER = struct.Struct("!Q")  # each frame: its length, then a pickle
_mine = threading.local()  # this worker thread's child


@dataclass(frozen=True)
class Late:
    """The analysis ran past ``limit_s`` and its process was killed."""

    limit_s: float


def analyse_limited(path: str, note: str | None, limit_s: float):
    """``tracekit.batch.rows.analyse_path(path, note)`` in this thread's child: its value, or ``Late``."""
    proc: subprocess.Popen[bytes] | None = getattr(_mine, "proc", None)
    if proc is None or proc.poll() is not None:
        proc = _mine.proc = subprocess.Popen(
            [sys.executable, "-m", "tracekit.batch.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        if _frame(_pipes(proc)[1].fileno(), time.monotonic() + STARTUP_WAIT_S) != READY:
            _drop(proc)
            return Late(limit_s)
    data = pickle.dumps((path, note))
    stdin, stdout = _pipes(proc)
    try:
        stdin.write(_HEADER.pack(len(data)) + data)
        out = _frame(stdout.fileno(), time.monotonic() + limit_s)
    except OSError:  # the child is gone (broken pipe)
        out = None
    if out is Late:
        _drop(proc)
        return Late(limit_s)
    if out is None:
        code = proc.poll()
        _drop(proc)
        raise RuntimeError(
            f"the analysis process on the Dask worker died (exit status {code}: killed, e.g. out of memory, or crashed)"
        )
    return pickle.loads(out)


def _frame(fd: int, deadline: float):
    """One frame from ``fd`` by ``deadline``: its bytes, None at end-of-file, ``Late`` past it."""
    buf = b""
    need = _HEADER.size
    header = True
    while True:
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return Late
            chunk = os.read(fd, need - len(buf))
            if not chunk:
                return None
            buf += chunk
        if not header:
            return buf[:need]
        need, buf, header = _HEADER.unpack(buf[:need])[0], buf[need:], False


def _pipes(proc: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    """(stdin, stdout) of the child: it is always started with both piped."""
    return cast("IO[bytes]", proc.stdin), cast("IO[bytes]", proc.stdout)


def _drop(proc) -> None:
    proc.kill()
    proc.wait()
    for f in (proc.stdin, proc.stdout):
        f.close()
    _mine.proc = None


def _send(out, data: bytes) -> None:
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


def main() -> None:
    import tracekit.analysis  # noqa: F401 - imported before the clock starts
    from tracekit.batch.rows import analyse_path

    parent = os.getppid()

    def orphaned() -> None:
        # A worker killed or closed mid-trace cannot kill this process; it ends itself.
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=orphaned, daemon=True).start()
    out, inp = sys.stdout.buffer, sys.stdin.buffer
    sys.stdout = sys.stderr  # nothing the analysis prints can corrupt a frame
    _send(out, READY)
    while True:
        header = inp.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the worker went: so does this process
        path, note = pickle.loads(inp.read(_HEADER.unpack(header)[0]))
        _send(out, pickle.dumps(analyse_path(path, note)))


if __name__ == "__main__":
    main()
