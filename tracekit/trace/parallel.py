"""The files of a folder of per-rank traces, read on several processes at once.

Tensor- and expert-parallel runs write 8 to 64 rank files of hundreds of MB each. Until
``reader`` checks that they are one run and merges them, the files are independent, so each
is read by a process of its own and only its ``Trace`` (the tables, about a fifth of the
file's JSON) comes back. This process reads too: it takes files from the end of the list
while the pool's processes take them from the start, so ``jobs`` processes in all read at
once, and a pool that is slow to start (spawn imports tracekit afresh) leaves nobody idle.

The result is the list a one-by-one read gives, in file order, and so is a failure: the
first file in order that fails raises its own error (a ``TracekitError`` sentence crosses
the process boundary as it is). A process of the pool that dies (killed, out of memory)
is one sentence too.

How many at once (``jobs_for``): ``jobs`` when given, else what ``--jobs`` chose for the
running command (``choose_jobs``), else $TRACEKIT_JOBS, else one per usable CPU; never
more than the files, never more than memory allows (below), and one in a daemonic process
(a batch or Dask worker may not start processes; its batch already keeps every CPU busy).
Without a number from the user, a folder of less than ``MIN_PARALLEL_BYTES`` of JSON is
read here alone: it reads in a fraction of a second, less than starting processes costs.

Memory: this process holds every rank's tables, as a one-by-one read does (the merge needs
them all). Each other process holds one file's read at a time (tables plus one chunk of
text, about a third of its JSON, and the pickled tables on their way back), so the pool
adds at most ``jobs - 1`` of those: ``jobs`` is capped so that they fit in
``MEMORY_SHARE`` of the machine's memory.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import TYPE_CHECKING, Callable, Literal, TypeVar, cast

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import SynchronizedArray

T = TypeVar("T")
JOBS_ENV = "TRACEKIT_JOBS"
# A folder's JSON bytes below which it is read in this process alone (the shared V100 trace,
# 47 MB of JSON, reads in ~0.3 s; a pool costs ~0.01 s to fork, ~0.5 s to spawn).
MIN_PARALLEL_BYTES = 40_000_000
# JSON bytes per byte of a gzip or zstd trace file: Kineto traces compress 10-20x; the high
# end, so that the memory cap below errs on the safe side.
COMPRESSION = 20
# One read's peak in another process, per byte of its file's JSON: the tables and a chunk of
# text (``limits``: about a third), plus the pickled tables sent back.
READ_PEAK_OF_JSON = 0.6
# The share of the machine's memory the pool's reads may take on top of this process.
MEMORY_SHARE = 0.25

_chosen: int | None = None


def choose_jobs(jobs: int | None) -> None:
    """What ``--jobs`` chose for the running command (None: back to the default)."""
    global _chosen
    _chosen = jobs


def jobs_for(files: list[str], jobs: int | None = None) -> int:
    """How many processes read ``files`` at once (1: this process alone; ``jobs`` 0: one per CPU)."""
    import multiprocessing

    stated = jobs if jobs is not None else _chosen if _chosen is not None else _env_jobs()
    if len(files) < 2 or multiprocessing.current_process().daemon:
        return 1
    sizes = [_json_bytes(f) for f in files]
    if stated is None and sum(sizes) < MIN_PARALLEL_BYTES:
        return 1
    n = min(stated or usable_cpus(), len(files))
    memory = _memory_bytes()
    if memory and n > 1:
        n = min(n, 1 + int(memory * MEMORY_SHARE // max(1.0, max(sizes) * READ_PEAK_OF_JSON)))
    return max(1, n)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def read_files(read_one: Callable[[str, object], T], files: list[str], jobs: int, progress=None) -> list[T]:
    """``[read_one(f, progress) for f in files]``, read by ``jobs`` processes (this one among
    them). ``read_one`` must pickle (a module-level function, or a ``functools.partial`` of
    one): the pool's processes call it with no progress callback."""
    if jobs <= 1 or len(files) < 2:
        return [read_one(f, progress) for f in files]
    import tempfile
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = _context()
    # Which files are left, shared with the pool: [first, last]. The pool's processes take
    # the first, this one the last, one file at a claim, so every process stays busy to the
    # end (queued tasks would leave this process waiting on a file it could have read).
    ends = ctx.Array("q", [0, len(files) - 1])
    # Each read comes back through a file of this folder, not the pool's pipe: a pipe holds
    # 64 kB, and this process reads it only when its busy main thread lets go of the GIL, so
    # a worker handing over a rank's tables (~10 MB) stood idle ~50 ms per file (measured).
    spool = tempfile.TemporaryDirectory(prefix="tracekit-ranks-")
    pool = ProcessPoolExecutor(
        min(jobs, len(files)) - 1, mp_context=ctx, initializer=_share, initargs=(ends, spool.name)
    )
    try:
        futures = [pool.submit(_read_first, read_one, files) for _ in files]
        done: dict[int, tuple[Literal[True], T] | tuple[Literal[False], Exception]] = {}
        while (i := _claim(ends, first=False)) is not None:
            try:
                done[i] = (True, read_one(files[i], progress))
            except Exception as e:  # noqa: BLE001 - raised below, in file order
                # The pool reads on up to here: an earlier file's error comes first, as it would
                # one by one.
                done[i] = (False, e)
                break
        for fut in futures:
            try:
                got = fut.result()
            except BrokenProcessPool:
                raise TracekitError(
                    f"{os.path.dirname(files[0]) or '.'}: a process reading its trace files ended without a result "
                    f"(killed, e.g. out of memory): read them one at a time with --jobs 1 (or {JOBS_ENV}=1)"
                ) from None
            if got is not None:
                i, how, value = got
                if how == _FAILED:
                    done[i] = (False, value)
                    continue
                done[i] = (True, _unspool(value) if how == _SPOOLED else value)
                if progress:
                    progress(f"read {os.path.basename(files[i])}")
        out: list[T] = []
        for i in range(len(files)):
            result = done[i]  # every file up to the first that failed was read
            if not result[0]:
                raise result[1]
            out.append(result[1])
        return out
    finally:
        # On a failure, the pool's processes go as soon as their file is read; nothing waits.
        pool.shutdown(wait=False, cancel_futures=True)
        spool.cleanup()


# In a process of the pool: the shared [first, last] of the files left, and the folder its
# reads go back through (``_share``).
_ends: SynchronizedArray[int] | None = None
_spool = ""
# How a read came back from the pool (``_read_first``).
_SPOOLED, _PIPED, _FAILED = "spooled", "piped", "failed"


def _share(ends, spool: str) -> None:
    global _ends, _spool
    _ends, _spool = ends, spool


def _unspool(path: str):
    with open(path, "rb") as f:
        value = pickle.load(f)
    os.remove(path)  # held in memory now: the disk copy would only double it
    return value


def _claim(ends: SynchronizedArray[int], first: bool) -> int | None:
    """The first (or last) file nobody has taken, now taken; None when none is left."""
    with ends.get_lock():
        if ends[0] > ends[1]:
            return None
        end = 0 if first else 1
        i = ends[end]
        ends[end] = i + 1 if first else i - 1
        return i


def _read_first(read_one, files: list[str]):
    """A task of the pool: (index, how, value) of the first file left, None when no file is left.
    ``how`` is _SPOOLED (value: the file its read was written to), _PIPED (value: the read itself,
    when the spool could not be written) or _FAILED (value: the error; then no file after it is
    taken: none of them will be needed)."""
    ends = cast("SynchronizedArray[int]", _ends)  # (set by ``_share`` as the process started)
    i = _claim(ends, first=True)
    if i is None:
        return None
    try:
        value = read_one(files[i], None)
    except Exception as e:  # noqa: BLE001 - the file's own error, raised in file order by the caller
        with ends.get_lock():
            ends[0] = ends[1] + 1
        return i, _FAILED, e
    path = os.path.join(_spool, f"{i}.pickle")
    try:
        with open(path, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:  # no room in the temporary folder: the pipe, slower, still carries it
        return i, _PIPED, value
    return i, _SPOOLED, path


def _context():
    """How the pool's processes start. fork starts one in milliseconds with tracekit already
    imported, but a lock another thread holds at the fork stays held in the child forever:
    only from a process running one thread, and not on macOS, whose system libraries are not
    fork-safe. Else spawn: a fresh interpreter imports the reader (~0.5 s) while this process
    reads. Not forkserver: its first start blocks the caller until the server has imported
    tracekit (0.75 s measured), time in which this process would read nothing."""
    import multiprocessing
    import threading

    if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _env_jobs() -> int | None:
    raw = os.environ.get(JOBS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise TracekitError(f"{JOBS_ENV} must be a whole number of processes above 0, not {raw!r}")
    return int(raw)


def _json_bytes(path: str) -> float:
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0.0  # the read words what is wrong with the file
    return float(size * COMPRESSION if path.endswith((".gz", ".zst")) else size)


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
