"""Where batch work runs: local processes (the standard library) or a Dask cluster.

Both offer the same three calls: ``submit(fn, *args)``, ``wait_first(futures)`` (the
finished ones and the rest) and ``close()``. This is the only module that imports Dask
(lazily): the base install runs batches on local processes without it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import warnings
from concurrent import futures as cf

from tracekit.errors import TracekitError

INSTALL_DASK = "Dask is not installed: pip install 'tracekit[batch]' (or pip install 'dask[distributed]')"
# More local processes than this rarely pay: each holds a whole trace in memory.
MAX_DEFAULT_JOBS = 8
# How long to try reaching a scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = "10s"


def default_jobs() -> int:
    """The CPUs this process may use, capped at ``MAX_DEFAULT_JOBS``."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_DEFAULT_JOBS))


class LocalProcesses:
    """``jobs`` worker processes of this machine, each analysing one trace at a time."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.description = f"{jobs} local process{'es' if jobs != 1 else ''}"
        self._pool = self._new_pool()

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        # forkserver: children start from a clean server that has tracekit imported once,
        # not from a fork of this (threaded) process.
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else None)
        if "forkserver" in methods:
            ctx.set_forkserver_preload(["tracekit.batch.rows", "tracekit.analysis"])
        return cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx)

    @property
    def slots(self) -> int:
        return self.jobs

    def submit(self, fn, *args):
        try:
            return self._pool.submit(fn, *args)
        except cf.process.BrokenProcessPool:
            # A worker died (killed, e.g. out of memory): its trace's row says so; the batch goes on.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            return self._pool.submit(fn, *args)

    def wait_first(self, pending):
        done, rest = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
        return done, rest

    @staticmethod
    def died(exc: BaseException) -> str | None:
        if isinstance(exc, cf.process.BrokenProcessPool):
            return "internal error: the worker process analysing this trace died (killed, e.g. out of memory)"
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskCluster:
    """A Dask cluster: ``local`` starts a ``distributed.LocalCluster`` of ``jobs`` worker
    processes with one thread each; ``tcp://HOST:PORT`` (any scheduler address) connects
    to a running one, whose workers must have tracekit installed."""

    def __init__(self, address: str, jobs: int):
        try:
            import distributed
        except ImportError:
            raise TracekitError(INSTALL_DASK) from None
        self._distributed = distributed
        self._cluster = None
        try:
            if address == "local":
                with warnings.catch_warnings():
                    # No dashboard; its HTTP server falls back to a free port when 8787 is taken.
                    warnings.filterwarnings("ignore", message="Port .* is already in use")
                    self._cluster = distributed.LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                                             dashboard_address=None, silence_logs=logging.ERROR)
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

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def wait_first(self, pending):
        done, rest = self._distributed.wait(list(pending), return_when="FIRST_COMPLETED")
        return set(done), set(rest)

    @staticmethod
    def died(exc: BaseException) -> str | None:
        if type(exc).__name__ == "KilledWorker":
            return "internal error: the Dask workers analysing this trace died (killed, e.g. out of memory)"
        return None

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text[:200]


def executor(dask: str | None, jobs: int):
    """The executor for ``--dask`` (None: local processes) with ``jobs`` workers."""
    return LocalProcesses(jobs) if dask is None else DaskCluster(dask, jobs)
