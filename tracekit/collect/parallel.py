"""``tracekit collect --tp N``: the built-in model tensor-parallel over N processes, one trace per rank.

tracekit starts the ranks itself (no torchrun): N copies of ``python -m
tracekit.collect.parallel_rank`` that join one ``torch.distributed`` group over a free localhost
port, gloo on the CPU and NCCL on GPUs (rank r on ``cuda:r``). Each rank builds its shard of
the preset the way Megatron-style tensor parallelism splits a Llama:

- q/k/v and gate/up projections are column-parallel (each rank holds heads/N query heads,
  KV heads/N key/value heads and intermediate/N MLP columns),
- o_proj and down_proj are row-parallel, each followed by an all-reduce (sum) of its output:
  two all-reduces per layer, as in vLLM and SGLang,
- embeddings, norms and lm_head are replicated; every rank uses the same seed, so the
  replicated weights agree and every rank picks the same tokens.

A rank's model is the preset's config with the head counts and intermediate size divided by
N (and an explicit ``head_dim``, which must not change), so each rank's trace holds exactly the
per-rank GEMM shapes of a real TP run. Each rank runs ``collector.measure``, the same warm-up,
timing and profiled prefill + decode loop as a single-process collect, with tracekit's phase
markers; the ranks agree (rank 0 decides) how many timing runs to make. The profiler records
``distributedInfo`` (rank, world size, backend) in each trace because the group is
initialised before it starts.

Nothing in the output folder is written until every rank has finished: the ranks record into
a hidden scratch folder inside it, and the parent process moves the traces and writes the
sidecars at the end. A rank that fails ends the run: the other ranks are stopped, the scratch
folder removed, and the error names the rank. A rank also exits when its parent disappears,
so no rank outlives an interrupted run.

This module is the parent: the checks before anything starts, starting the ranks and waiting
for them, and writing the folder. One rank's process (joining the group, building its shard,
measuring) is ``tracekit.collect.parallel_rank``; the two share ``rank_trace_name``,
``result_path`` and ``shard_sizes`` from here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tracekit import markers
from tracekit.errors import TracekitError

_SCRATCH_PREFIX = ".tracekit-tp-"
_POLL_S = 0.05
# After the first rank fails, how long to wait for the others' reports: a rank whose peer died
# fails too ("connection closed"), and the earliest error is the cause.
_GRACE_S = 1.0
_TERM_WAIT_S = 5.0
_UNSUPPORTED = {
    "script": "--tp runs the built-in presets; a script that starts its own ranks is profiled per rank by the "
    "script itself (torch.profiler in each rank), not with --tp",
    "model": "--tp shards the built-in presets only; sharding a checkpoint from --model is not supported "
    "(use --preset with --layers to match its shapes)",
    "compile": "--tp does not support --compile or --cuda-graphs yet: the all-reduce hooks run eagerly",
}


@dataclass
class ParallelResult:
    """Where a tensor-parallel collect went: the folder and one ``CollectResult`` per rank."""

    folder: str
    ranks: list  # [CollectResult], by rank
    backend: str
    notes: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def trace_paths(self) -> list[str]:
        return [r.trace_path for r in self.ranks]


def rank_trace_name(rank: int) -> str:
    """The file name of rank ``rank``'s trace, in the output folder and the scratch folder."""
    return f"rank{rank}{markers.TRACE_SUFFIX}"


# -- checks before anything starts -------------------------------------------------------------


def check_tp(tp, opts) -> None:
    """One sentence for a ``--tp`` this run cannot do."""
    if isinstance(tp, bool) or not isinstance(tp, int):
        raise TracekitError(f"--tp must be a whole number of ranks, not {tp!r}")
    if tp < 1:
        raise TracekitError(f"--tp must be at least 1, not {tp}")
    if opts.script:
        raise TracekitError(_UNSUPPORTED["script"])
    if opts.model:
        raise TracekitError(_UNSUPPORTED["model"])
    if opts.compile or opts.cuda_graphs:
        raise TracekitError(_UNSUPPORTED["compile"])


def shard_sizes(cfg, tp: int) -> dict[str, int]:
    """Per-rank head counts, intermediate size and head_dim of ``cfg`` (a config or its dict)
    split over ``tp`` ranks."""
    get: Callable[[str], Any] = cfg.get if isinstance(cfg, dict) else (lambda k: getattr(cfg, k, None))
    heads = int(get("num_attention_heads"))
    kv = int(get("num_key_value_heads") or heads)
    inter = int(get("intermediate_size"))
    head_dim = int(get("head_dim") or int(get("hidden_size")) // heads)
    bad = [
        f"{what} ({n})"
        for what, n in (("attention heads", heads), ("KV heads", kv), ("intermediate size", inter))
        if n % tp
    ]
    if bad:
        listed = bad[0] if len(bad) == 1 else f"{', '.join(bad[:-1])} or {bad[-1]}"
        raise TracekitError(
            f"--tp {tp} does not divide the model's {listed}: choose a --tp that divides "
            f"{heads} heads, {kv} KV heads and intermediate size {inter}"
        )
    return {
        "num_attention_heads": heads // tp,
        "num_key_value_heads": kv // tp,
        "intermediate_size": inter // tp,
        "head_dim": head_dim,
    }


def resolve_folder(output: str | None, stem: str, force: bool, tp: int) -> tuple[str, bool]:
    """The folder the rank traces go to, and whether this run creates it.

    Default: a unique folder under ./tracekit-traces/. A folder that already holds traces other
    than this run's rank files is refused (a folder is read as one run); this run's rank files
    are overwritten only with ``force``.
    """
    from tracekit.collect.collector import DEFAULT_DIR, run_timestamp
    from tracekit.report.output import probe
    from tracekit.trace.decode import list_trace_files

    if output is None:
        base = os.path.join(DEFAULT_DIR, f"{stem}-{run_timestamp()}")
        folder, n = base, 2
        while os.path.exists(folder):
            folder = f"{base}-{n}"
            n += 1
    else:
        folder = output.rstrip("/" + os.sep) or output
        if folder.endswith((".json", ".json.gz", ".json.zst")):
            raise TracekitError(
                f"with --tp, -o names a folder for the {tp} rank traces, not a trace file ({output}): give a folder"
            )
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise TracekitError(f"-o {output} is a file; with --tp, -o names a folder for the rank traces")
    created = not os.path.exists(folder)
    if not created:
        ours = {rank_trace_name(r) for r in range(tp)}
        ours_side = {os.path.basename(markers.sidecar_path_for(n)) for n in ours}
        present = [os.path.basename(p) for p in list_trace_files(folder)]
        others = [n for n in present if n not in ours]
        if others:
            raise TracekitError(
                f"{folder} already holds other traces ({', '.join(others[:3])}"
                f"{' and more' if len(others) > 3 else ''}), which would be read as part of this "
                "run: choose a new or empty -o folder"
            )
        clash = sorted(set(present) | (ours_side & set(os.listdir(folder))))
        if clash and not force:
            raise TracekitError(
                f"{folder} already holds {', '.join(clash[:2])}{' and more' if len(clash) > 2 else ''}: "
                "pass --force to overwrite them, or choose another -o folder"
            )
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise TracekitError(f"cannot create the output folder {folder}: {e.strerror}") from None
    probe(folder, os.path.join(folder, rank_trace_name(0)))
    return folder, created


def free_port() -> int:
    """A TCP port nobody listens on at 127.0.0.1 now (rank 0 binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the parent: start the ranks, wait, write the folder ----------------------------------------


def collect_tp(opts, tp: int, announce: Callable[[str], None] | None = None) -> ParallelResult:
    """Run ``opts`` (a ``CollectOptions`` naming a preset) tensor-parallel over ``tp`` ranks.

    ``announce`` gets one line once every check has passed and the ranks are about to start."""
    from tracekit.collect import collector, workloads

    check_tp(tp, opts)
    collector.check_counts(opts)
    plan = collector.plan_generation(opts)
    torch = collector.require_torch()
    collector.require_transformers()
    import torch.distributed as dist

    if not dist.is_available():
        raise TracekitError(f"--tp needs torch.distributed, which this torch build ({torch.__version__}) lacks")
    shard_sizes(plan.preset.config, tp)  # refuse before starting anything (no transformers import needed)
    device = workloads.resolve_device(opts.device)
    workloads.resolve_dtype(opts.dtype, device)  # a bad --dtype is refused here, not in every rank
    if device.startswith("cuda"):
        if ":" in device:
            raise TracekitError(f"with --tp, rank r runs on cuda:r: pass --device cuda, not --device {device}")
        n_gpus = torch.cuda.device_count()
        if n_gpus < tp:
            raise TracekitError(
                f"--tp {tp} needs {tp} GPUs (one per rank) and this machine has {n_gpus}: "
                f"use --tp {n_gpus} or less, or --device cpu"
            )
        if not dist.is_nccl_available():
            raise TracekitError("--tp on GPUs needs NCCL (RCCL on ROCm), which this torch build lacks")
        backend = "nccl"
    else:
        if not dist.is_gloo_available():
            raise TracekitError("--tp on the CPU needs the gloo backend, which this torch build lacks")
        backend = "gloo"
    threads = opts.threads
    if threads is None and backend == "gloo":
        threads = max(1, (os.cpu_count() or 1) // tp)  # the ranks share the cores; more threads only stall

    stem = f"{plan.preset.name}-tp{tp}-bs{plan.batch}-p{plan.prompt_len}-n{plan.new_tokens}"
    folder, created = resolve_folder(opts.output, stem, opts.force, tp)
    scratch = os.path.abspath(os.path.join(folder, f"{_SCRATCH_PREFIX}{os.getpid()}"))
    os.makedirs(scratch, exist_ok=True)
    job = {
        "options": {**dataclasses.asdict(opts), "threads": threads, "progress": False, "output": None},
        "tp": tp,
        "backend": backend,
        "device": device,
        "folder": folder,
        "parent": os.getpid(),
    }
    if announce is not None:
        announce(
            f"starting {tp} tensor-parallel rank{'s' if tp != 1 else ''} of the {plan.preset.name} preset "
            f"({backend} on {device}{f', {threads} thread(s) each' if backend == 'gloo' else ''}) into {folder}"
        )
    try:
        results = _run_ranks(scratch, job, tp)
        out = _write_folder(folder, scratch, results, opts)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        if created:
            try:
                os.rmdir(folder)  # only if still empty: never remove what someone put there
            except OSError:
                pass
        raise
    shutil.rmtree(scratch, ignore_errors=True)
    return ParallelResult(folder=folder, ranks=out, backend=backend, notes=sorted({n for r in out for n in r.notes}))


def _run_ranks(scratch: str, job: dict[str, Any], tp: int, attempts: int = 3) -> list[dict[str, Any]]:
    for attempt in range(attempts):
        job = {**job, "port": free_port()}
        try:
            return _start_and_wait(scratch, job, tp)
        except _PortTaken:
            if attempt == attempts - 1:
                raise TracekitError(
                    "could not start the ranks: the free localhost port tracekit picked was taken each time; try again"
                ) from None
    raise AssertionError("unreachable")  # pragma: no cover


class _PortTaken(Exception):
    pass


def _start_and_wait(scratch: str, job: dict[str, Any], tp: int) -> list[dict[str, Any]]:
    job_path = os.path.join(scratch, "job.json")
    with open(job_path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    for r in range(tp):
        _remove(result_path(scratch, r))
    env = dict(os.environ)
    # The ranks import this tracekit, wherever it was imported from (an installed wheel or a checkout).
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if job["backend"] == "gloo" and "GLOO_SOCKET_IFNAME" not in env:
        # Every rank is on this machine: talk over loopback, whatever the host name resolves to.
        loopback = _loopback_interface()
        if loopback:
            env["GLOO_SOCKET_IFNAME"] = loopback
    threads = job["options"].get("threads")
    if threads:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for r in range(tp):
            log = open(os.path.join(scratch, f"rank{r}.log"), "wb")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tracekit.collect.parallel_rank", scratch, str(r)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        failed_at = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c == 0 for c in codes):
                break
            if any(c not in (None, 0) for c in codes):
                if failed_at is None:
                    failed_at = time.monotonic()
                if all(c is not None for c in codes) or time.monotonic() - failed_at > _GRACE_S:
                    break
            time.sleep(_POLL_S)
    finally:
        # Ranks still running are stopped here, by this process: their exit says nothing of the cause.
        stopped = {r for r, p in enumerate(procs) if p.poll() is None}
        _stop(procs)
        for log in logs:
            log.close()
    codes = [p.returncode for p in procs]
    if all(c == 0 for c in codes):
        results = [res for r in range(tp) if (res := _read_result(scratch, r)) is not None]
        if len(results) == tp:
            return results
    failures = []
    for r, c in enumerate(codes):
        res = _read_result(scratch, r)
        if res is not None and res.get("ok") is False:
            # An error a rank wrote itself counts, stopped or not; the earliest is the cause.
            failures.append((False, res.get("time", float("inf")), r, res.get("error") or "failed"))
        elif c not in (None, 0):
            failures.append((r in stopped, float("inf"), r, _exit_reason(c, os.path.join(scratch, f"rank{r}.log"))))
        elif res is None:
            failures.append((r in stopped, float("inf"), r, "it exited without writing its result"))
    failures.sort()
    _, _, rank, error = failures[0]
    if "address already in use" in error.lower() or "eaddrinuse" in error.lower():
        raise _PortTaken()
    raise TracekitError(f"rank {rank} of {tp} failed: {error}")


def _loopback_interface() -> str | None:
    try:
        names = {name for _, name in socket.if_nameindex()}
    except (OSError, AttributeError):  # pragma: no cover - not on every platform
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def _stop(procs: list[subprocess.Popen]) -> None:
    """End every rank still running: SIGTERM, then SIGKILL; reap them all."""
    for p in procs:
        if p.poll() is None:
            try:
                p.terminate()
            except OSError:
                pass
    deadline = time.monotonic() + _TERM_WAIT_S
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _exit_reason(code: int, log_path: str) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the process was killed by {name}{hint}"
    last = ""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("USDT")]
        last = lines[-1][:300] if lines else ""
    except OSError:
        pass
    return f"the process exited with status {code}" + (f" ({last})" if last else "")


def result_path(scratch: str, rank: int) -> str:
    """Where rank ``rank`` writes its result (or error) for the parent, in the scratch folder."""
    return os.path.join(scratch, f"rank{rank}.result.json")


def _read_result(scratch: str, rank: int) -> dict[str, Any] | None:
    try:
        with open(result_path(scratch, rank), encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_folder(folder: str, scratch: str, results: list[dict[str, Any]], opts) -> list:
    """Sidecars and traces into ``folder``, once every rank has succeeded; rank 0's calibration
    is every rank's (the ranks share one machine and ran with the same threads)."""
    from tracekit.collect.collector import CollectResult, finish

    calibration = results[0]["sidecar"].get("calibration")
    out = []
    for r, res in enumerate(results):
        data = res["sidecar"]
        if r and calibration is not None:
            data["calibration"] = {**calibration, "shared_from_rank": 0}
        path = os.path.join(folder, rank_trace_name(r))
        finish(res["trace_tmp"], path, data, opts.force)
        out.append(CollectResult(path, markers.sidecar_path_for(path), data, list(data.get("notes") or [])))
    return out


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
