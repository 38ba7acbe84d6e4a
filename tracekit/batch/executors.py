"""Where batch work runs: local processes (the standard library) or a Dask cluster.

Both offer the same calls: ``submit(fn, *args, timeout=None)`` (a handle), ``wait_first(handles)``
(the finished ones and the rest), ``result(handle)`` (the value, or the task's exception:
``TimedOut`` past its ``timeout``, ``WorkerDied`` when the process under it was lost) and
``close()`` (which stops whatever is still running). This is the only module that imports Dask
(lazily): the base install runs batches on local processes without it.

A time limit must really end the work: a trace stuck in a loop of Python or numpy (or blocked
reading a file that never ends) cannot be interrupted from inside its process, so each trace
with a limit runs in a process of its own that is killed at its deadline: locally, the
executor's worker process; on Dask, a child process of the worker (``tracekit.batch.worker``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
import warnings
from concurrent import futures as cf
from dataclasses import dataclass
from multiprocessing import connection
from typing import cast

from tracekit.errors import TracekitError

INSTALL_DASK = "Dask is not installed: pip install 'tracekit[batch]' (or pip install 'dask[distributed]')"
# More local processes than this rarely pay: each holds a whole trace in memory.
MAX_DEFAULT_JOBS = 8
# How long to try reaching a scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = "10s"
# How long a killed process may take to go.
KILL_WAIT_S = 10.0


class TimedOut(Exception):
    """A task ran past its time limit; ``what`` says what became of its worker."""

    def __init__(self, limit_s: float, what: str):
        super().__init__(f"ran past {limit_s:g} s")
        self.limit_s, self.what = limit_s, what


class WorkerDied(Exception):
    """The process running a task ended without a result (killed, e.g. out of memory)."""


def default_jobs() -> int:
    """The CPUs this process may use, capped at ``MAX_DEFAULT_JOBS``."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_DEFAULT_JOBS))


@dataclass
class _Running:
    process: multiprocessing.process.BaseProcess
    reader: connection.Connection
    deadline: float | None
    limit_s: float | None


def _work(send, fn, args) -> None:
    """A worker process: run ``fn(*args)`` and send back ``(True, value)`` or ``(False, exception)``."""
    # Ctrl-C reaches the whole process group; the parent decides and stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out = (True, fn(*args))
    except BaseException as e:  # noqa: BLE001 - whatever it was goes back to the parent
        out = (False, e)
    try:
        send.send(out)
    except Exception as e:  # noqa: BLE001 - an exception that does not pickle: its text does
        send.send((False, RuntimeError(f"{type(out[1]).__name__}: {out[1]} (unpicklable: {e})")))
    send.close()


class LocalProcesses:
    """At most ``jobs`` processes of this machine, each analysing one trace and then exiting:
    one process per trace, so that a trace past its time limit is ended by killing its process
    (nothing else can stop a loop in numpy), and a crash or an out-of-memory kill costs that
    trace's row only."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.description = f"{jobs} local process{'es' if jobs != 1 else ''}"
        # forkserver: children start from a clean server that has tracekit imported once,
        # not from a fork of this (threaded) process; starting one costs milliseconds.
        methods = multiprocessing.get_all_start_methods()
        self._ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else None)
        if "forkserver" in methods:
            self._ctx.set_forkserver_preload(["tracekit.batch.rows", "tracekit.analysis"])
        self._running: dict[cf.Future, _Running] = {}

    @property
    def slots(self) -> int:
        return self.jobs

    def submit(self, fn, *args, timeout: float | None = None) -> cf.Future:
        reader, writer = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_work, args=(writer, fn, args), daemon=True)
        proc.start()
        writer.close()  # the child holds the only writer: its death reads as end-of-file here
        fut: cf.Future = cf.Future()
        fut.set_running_or_notify_cancel()
        deadline = time.monotonic() + timeout if timeout else None
        self._running[fut] = _Running(proc, reader, deadline, timeout)
        return fut

    def wait_first(self, pending):
        pending = set(pending)
        while True:
            done = {f for f in pending if f.done()}
            if done:
                return done, pending - done
            self._poll([f for f in pending if f in self._running])

    def _poll(self, futs: list[cf.Future]) -> None:
        """Wait for a result, a death or the nearest deadline, and settle what it was."""
        deadlines = [d for f in futs if (d := self._running[f].deadline) is not None]
        wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        handles = [self._running[f].reader for f in futs] + [self._running[f].process.sentinel for f in futs]
        ready = set(connection.wait(handles, timeout=wait_s))
        now = time.monotonic()
        for f in futs:
            run = self._running[f]
            if run.reader in ready or run.process.sentinel in ready:
                try:
                    ok, value = run.reader.recv()
                except (EOFError, OSError):
                    run.process.join(KILL_WAIT_S)
                    self._settle(f, exc=WorkerDied(_exit_text(run.process.exitcode)))
                else:
                    run.process.join(KILL_WAIT_S)  # it has sent its row and is exiting
                    self._settle(f, value=value) if ok else self._settle(f, exc=value)
            elif run.deadline is not None and now >= run.deadline:
                # (a deadline is only set with its limit)
                self._settle(f, exc=TimedOut(cast(float, run.limit_s), "its worker process was killed"))

    def _settle(self, fut: cf.Future, *, value=None, exc: BaseException | None = None) -> None:
        """Record a task's outcome; its process, if still there (timed out, cancelled), is killed."""
        run = self._running.pop(fut)
        _stop(run.process)
        run.reader.close()
        if exc is None:
            fut.set_result(value)
        else:
            fut.set_exception(exc)

    @staticmethod
    def result(fut: cf.Future):
        return fut.result()

    @staticmethod
    def died(exc: BaseException) -> str | None:
        if isinstance(exc, WorkerDied):
            return (
                f"internal error: the worker process analysing this trace died without a result ({exc}): "
                "killed, e.g. out of memory, or crashed"
            )
        return None

    def close(self) -> None:
        """Stop every process still running (an interrupted batch) and wait for them to go."""
        for fut in list(self._running):
            self._settle(fut, exc=cf.CancelledError())


def _stop(proc) -> None:
    if proc.is_alive():
        proc.kill()
    proc.join(KILL_WAIT_S)
    try:
        proc.close()
    except ValueError:  # pragma: no cover - still running after KILL_WAIT_S: the OS has it
        pass


def _exit_text(code: int | None) -> str:
    if code is None:
        return "it did not exit"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


class DaskCluster:
    """A Dask cluster: ``local`` starts a ``distributed.LocalCluster`` of ``jobs`` worker
    processes with one thread each; ``tcp://HOST:PORT`` (any scheduler address) connects
    to a running one, whose workers must have tracekit installed.

    With a time limit, a task analyses its trace in a child process of the worker and kills it
    when the limit passes (``tracekit.batch.worker``): a worker thread stuck in a loop could not
    be stopped, and the worker stays free for the next trace."""

    def __init__(self, address: str, jobs: int):
        try:
            import distributed
        except ImportError:
            raise TracekitError(INSTALL_DASK) from None
        self._distributed = distributed
        self._cluster = None
        self._live: set = set()  # submitted, not yet collected
        try:
            if address == "local":
                with warnings.catch_warnings():
                    # No dashboard; its HTTP server falls back to a free port when 8787 is taken.
                    warnings.filterwarnings("ignore", message="Port .* is already in use")
                    self._cluster = distributed.LocalCluster(
                        n_workers=jobs,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.ERROR,
                    )
                self.client = distributed.Client(self._cluster)
                self.description = f"a local Dask cluster of {jobs} worker process{'es' if jobs != 1 else ''}"
            else:
                self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
                self.description = f"the Dask cluster at {address}"
        except (OSError, TimeoutError, ValueError, RuntimeError) as e:
            self.close()
            what = "start a local Dask cluster" if address == "local" else f"reach the Dask scheduler at {address}"
            raise TracekitError(f"cannot {what}: {_short(e)}") from None
        threads = sum(self.client.nthreads().values())
        if not threads:
            self.close()
            raise TracekitError(f"the Dask cluster at {address} has no workers: start some (dask worker {address})")
        self._slots = threads

    @property
    def slots(self) -> int:
        # One trace per worker thread in flight: with one-thread workers, one trace per worker.
        return self._slots

    def submit(self, fn, *args, timeout: float | None = None):
        if timeout:
            from tracekit.batch.rows import analyse_path
            from tracekit.batch.worker import analyse_limited

            if fn is not analyse_path:
                raise ValueError("on Dask, only analyse_path takes a time limit")
            fut = self.client.submit(analyse_limited, *args, timeout, pure=False)
        else:
            fut = self.client.submit(fn, *args, pure=False)
        self._live.add(fut)
        return fut

    def wait_first(self, pending):
        done, rest = self._distributed.wait(list(pending), return_when="FIRST_COMPLETED")
        return set(done), set(rest)

    def result(self, fut):
        from tracekit.batch.worker import Late

        self._live.discard(fut)
        value = fut.result()
        if isinstance(value, Late):
            raise TimedOut(value.limit_s, "its analysis process on the Dask worker was killed")
        return value

    @staticmethod
    def died(exc: BaseException) -> str | None:
        if type(exc).__name__ == "KilledWorker":
            return "internal error: the Dask workers analysing this trace died (killed, e.g. out of memory)"
        return None

    def close(self) -> None:
        """Cancel what is still running (an interrupted batch), then let go of the cluster."""
        client = getattr(self, "client", None)
        if client is not None:
            running = [f for f in self._live if not f.done()]
            if running:
                try:
                    client.cancel(running)
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            client.close()
        if self._cluster is not None:
            self._cluster.close()


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:200]


def executor(dask: str | None, jobs: int):
    """The executor for ``--dask`` (None: local processes) with ``jobs`` workers."""
    return LocalProcesses(jobs) if dask is None else DaskCluster(dask, jobs)
