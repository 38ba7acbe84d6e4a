"""``collect()``: build or load a workload, time it, profile it, calibrate, write trace + sidecar."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tracekit import markers
from tracekit.errors import TracekitError

DEFAULT_DIR = "tracekit-traces"
TORCH_MISSING = (
    "collecting needs PyTorch, which is not installed: install the torch build for your machine "
    "(https://pytorch.org/get-started), then pip install 'tracekit[collect]'"
)
TRANSFORMERS_MISSING = (
    "collecting a built-in preset or --model needs Hugging Face transformers: pip install 'tracekit[collect]'"
)

# Defaults for --model runs (presets carry their own).
MODEL_DEFAULTS = {"batch_size": 1, "prompt_len": 128, "new_tokens": 32}
# Unprofiled timing runs: as many as fit in this many seconds, between 1 and 5 (at least 3 when a
# run is short); the median run is kept.
TIMING_BUDGET_S = 1.0


@dataclass
class CollectOptions:
    """Everything ``tracekit collect`` can be told. ``preset`` defaults to ``tiny``."""

    preset: str | None = None
    model: str | None = None
    script: Sequence[str] | None = None
    batch_size: int | None = None
    prompt_len: int | None = None
    new_tokens: int | None = None
    dtype: str = "auto"
    device: str = "auto"
    warmup: int = 1
    compile: bool = False
    cuda_graphs: bool = False
    skip_steps: int = 0
    record_steps: int | None = None
    profiler_warmup: int = 1
    calibrate: bool = True
    output: str | None = None
    force: bool = False
    seed: int = 0
    layers: int | None = None
    threads: int | None = None  # CPU intra-op threads (torch.set_num_threads); None: torch's default
    progress: bool | None = None  # None: show a bar when stderr is a terminal


@dataclass
class CollectResult:
    trace_path: str
    sidecar_path: str
    sidecar: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def require_torch():
    try:
        import torch  # only whether it imports
    except ImportError:
        raise TracekitError(TORCH_MISSING) from None
    return torch


def require_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise TracekitError(TRANSFORMERS_MISSING) from None


# -- output path ---------------------------------------------------------------------------


def run_timestamp() -> str:
    """The local time that names a collected run's default output files."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _taken(trace_path: str) -> bool:
    return os.path.exists(trace_path) or os.path.exists(markers.sidecar_path_for(trace_path))


def resolve_output(output: str | None, stem: str, force: bool) -> str:
    """The trace path to write: ``output`` as given, or a unique default name.

    A folder (existing, or ending in a separator) gets a default name inside it; a file name
    without ``.json``/``.json.gz`` gets ``.pt.trace.json.gz`` added. An existing trace (or its
    sidecar) is never overwritten unless ``force``.
    """
    if output is None or output.endswith(("/", os.sep)) or os.path.isdir(output):
        folder = output or DEFAULT_DIR
        base = os.path.join(folder, f"{stem}-{run_timestamp()}")
        path = base + markers.TRACE_SUFFIX
        n = 2
        while _taken(path):
            path = f"{base}-{n}{markers.TRACE_SUFFIX}"
            n += 1
    else:
        path = output if output.endswith((".json", ".json.gz")) else output + markers.TRACE_SUFFIX
        if _taken(path) and not force:
            which = path if os.path.exists(path) else markers.sidecar_path_for(path)
            raise TracekitError(f"{which} already exists: pass --force to overwrite it, or choose another -o path")
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise TracekitError(f"cannot create the output folder {parent}: {e.strerror}") from None
    from tracekit.report.output import probe

    probe(parent, path)  # before the (possibly long) run: permission bits lie, /sys takes no files
    return path


def tmp_trace_path(path: str) -> str:
    folder, name = os.path.split(os.path.abspath(path))
    suffix = ".json.gz" if path.endswith(".gz") else ".json"
    return os.path.join(folder, f".{name}.tmp{os.getpid()}{suffix}")


# -- progress ------------------------------------------------------------------------------


class Progress:
    """A tqdm bar on stderr counting forward passes; silent when disabled."""

    def __init__(self, enabled: bool | None, total: int):
        self.bar = None
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="fwd", file=sys.stderr, dynamic_ncols=True, leave=False)

    def stage(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(text)
            self.bar.refresh()

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# -- the workload run ------------------------------------------------------------------------


def check_counts(opts: CollectOptions) -> None:
    """One clear error for a count option below its least value (--batch-size 0, ...)."""
    for name, value, low in (
        ("--batch-size", opts.batch_size, 1),
        ("--prompt-len", opts.prompt_len, 1),
        ("--new-tokens", opts.new_tokens, 1),
        ("--warmup", opts.warmup, 0),
        ("--skip-steps", opts.skip_steps, 0),
        ("--record-steps", opts.record_steps, 1),
        ("--profiler-warmup", opts.profiler_warmup, 0),
        ("--layers", opts.layers, 1),
        ("--threads", opts.threads, 1),
    ):
        if value is not None and value < low:
            raise TracekitError(f"{name} must be at least {low}, not {value}")


def collect(opts: CollectOptions) -> CollectResult:
    """Run ``tracekit collect``: returns where the trace and sidecar went, and the sidecar."""
    check_counts(opts)
    chosen = [n for n, v in (("--preset", opts.preset), ("--model", opts.model), ("a script", opts.script)) if v]
    if len(chosen) > 1:
        raise TracekitError(f"choose one workload: {' and '.join(chosen)} were both given")
    saved_threads = None
    try:
        if opts.threads is not None:
            torch = require_torch()
            saved_threads = torch.get_num_threads()
            torch.set_num_threads(opts.threads)
        if opts.script:
            return _collect_script(opts)
        return _collect_generation(opts)
    finally:
        if saved_threads is not None:
            torch.set_num_threads(saved_threads)


@dataclass(frozen=True)
class GenerationPlan:
    """What a generation run will do, settled from the options before anything is built."""

    preset: Any  # workloads.Preset, or None for --model
    batch: int
    prompt_len: int
    new_tokens: int
    stem: str  # the default file name's stem


def plan_generation(opts: CollectOptions) -> GenerationPlan:
    """The preset (or checkpoint) and the sizes of the run; one sentence for bad choices."""
    from tracekit.collect import workloads

    if opts.model:
        preset = None
        defaults = MODEL_DEFAULTS
        stem_name = os.path.basename(os.path.normpath(opts.model)) or "model"
        if not os.path.isdir(os.path.expanduser(opts.model)):
            raise TracekitError(f"--model {opts.model}: no such folder (give a Hugging Face checkpoint folder)")
        if opts.layers is not None:
            raise TracekitError("--layers applies to the built-in presets, not to --model")
    else:
        preset = workloads.get_preset(opts.preset or "tiny")
        defaults = {"batch_size": preset.batch_size, "prompt_len": preset.prompt_len, "new_tokens": preset.new_tokens}
        stem_name = preset.name
    batch = opts.batch_size or defaults["batch_size"]
    prompt_len = opts.prompt_len or defaults["prompt_len"]
    new_tokens = opts.new_tokens or defaults["new_tokens"]
    if opts.skip_steps >= new_tokens:
        raise TracekitError(f"--skip-steps {opts.skip_steps} leaves none of the {new_tokens} decode steps to record")
    return GenerationPlan(preset, batch, prompt_len, new_tokens, f"{stem_name}-bs{batch}-p{prompt_len}-n{new_tokens}")


def workload_info(wl, opts: CollectOptions, plan: GenerationPlan, device: str, dtype) -> dict[str, Any]:
    """The sidecar's ``workload`` entry."""
    from tracekit.collect import workloads

    info = {
        "kind": wl.kind,
        "preset": wl.preset,
        "model_path": wl.model_path,
        "model_config": workloads.config_dict(wl.config),
        "architecture": wl.architecture,
        "parameters": wl.parameters,
        "dtype": workloads.short_dtype(dtype),
        "batch_size": plan.batch,
        "prompt_len": plan.prompt_len,
        "new_tokens": plan.new_tokens,
        "device": device,
        "compile": bool(opts.compile or opts.cuda_graphs),
        "cuda_graphs": bool(opts.cuda_graphs),
    }
    if opts.layers is not None:
        info["layers_override"] = opts.layers
    return info


def measure(
    gen,
    opts: CollectOptions,
    progress: Progress,
    tmp: str,
    trace_meta: dict[str, str],
    agree: Callable[[bool], bool] | None = None,
):
    """Warm up, time unprofiled runs, then profile one run into ``tmp``.

    Returns (median plain run, number of plain runs, profiled run, schedule). ``agree`` turns
    this process's "time another run?" into the decision every process acts on (the ranks of a
    tensor-parallel run must run the same number of generations, or one waits forever in a
    collective); None: decide alone.
    """
    from tracekit.collect import runner

    # Warm-up: allocator, kernels, library init, torch.compile.
    for k in range(opts.warmup):
        progress.stage(f"warm-up {k + 1}/{opts.warmup}")
        gen.run(mark=False, on_step=progress.step)

    # Wall clock without the profiler: the median of a few runs (by total time).
    progress.stage("timing")
    plain_runs: list[runner.RunTiming] = []
    t_budget = time.perf_counter() + TIMING_BUDGET_S
    with runner.quiet_gc():
        while True:
            plain_runs.append(gen.run(mark=True, on_step=progress.step if not plain_runs else None))
            fastest = min(r.wall_ms for r in plain_runs) / 1e3
            more = not (
                len(plain_runs) >= 5
                or ((len(plain_runs) >= 3 or fastest > 0.25) and time.perf_counter() + fastest > t_budget)
            )
            if agree is not None:
                more = agree(more)
            if not more:
                break
    plain = sorted(plain_runs, key=lambda r: r.wall_ms)[len(plain_runs) // 2]

    # The profiled run.
    progress.stage("profiling")
    schedule = runner.Schedule(opts.skip_steps, opts.record_steps, opts.profiler_warmup)
    try:
        with runner.quiet_gc():
            prof = runner.profiled_run(gen, schedule, tmp, on_step=progress.step, metadata=trace_meta)
    except BaseException:
        _remove(tmp)
        raise
    return plain, len(plain_runs), prof, schedule


def timing_info(
    plain, n_plain: int, prof, schedule, opts: CollectOptions, device: str, new_tokens: int
) -> dict[str, Any]:
    """The sidecar's ``timing`` entry."""
    from tracekit.collect import runner

    return {
        "ttft_ms": plain.ttft_ms,
        "tpot_ms": plain.tpot_ms,
        "wall_ms": plain.wall_ms,
        "profiled_wall_ms": prof.wall_ms,
        "profiled_ttft_ms": prof.ttft_ms,
        "profiled_tpot_ms": prof.tpot_ms,
        "profiler_overhead_ratio": runner.recorded_ratio(prof, plain, schedule, new_tokens),
        "timed_runs": n_plain,
        "warmup_runs": opts.warmup,
        "synchronized": device.startswith("cuda"),
        "method": (
            "perf_counter around each marked step of tracekit's generation loop; median (by total time) "
            f"of {n_plain} unprofiled run(s) after {opts.warmup} warm-up run(s)"
            + ("; torch.cuda.synchronize() ends every step" if device.startswith("cuda") else "")
        ),
    }


def measurement_notes(dev_info: dict[str, Any], device: str, ratio: float | None) -> list[str]:
    """Warnings about the measurement, as sentences (the sidecar's ``notes``)."""
    from tracekit.analysis.measurement import busy_sentence

    notes = []
    if device == "cpu" and (sentence := busy_sentence(dev_info)):
        notes.append(sentence)
    if ratio is not None and device == "cpu" and ratio >= 3.0:
        notes.append(f"the profiler slowed this CPU run {ratio:.1f}x (more than the 3x expected)")
    return notes


def _collect_generation(opts: CollectOptions) -> CollectResult:
    from tracekit.collect import workloads

    plan = plan_generation(opts)
    preset, batch, prompt_len, new_tokens = plan.preset, plan.batch, plan.prompt_len, plan.new_tokens
    torch = require_torch()
    require_transformers()
    # Check the output before the (possibly long) run.
    trace_path = resolve_output(opts.output, plan.stem, opts.force)
    from tracekit.collect import contention, runner, sidecar
    from tracekit.collect.calibrate import calibrate

    device = workloads.resolve_device(opts.device)
    dtype = workloads.resolve_dtype(opts.dtype, device)
    if opts.cuda_graphs and not device.startswith("cuda"):
        raise TracekitError("--cuda-graphs needs a CUDA/ROCm device, and this run is on the CPU")
    torch.manual_seed(opts.seed)

    forwards = new_tokens + 1
    progress = Progress(opts.progress, total=(opts.warmup + 2) * forwards)
    try:
        what = preset.name if preset else opts.model
        progress.stage(f"building {what} on {device}")
        if opts.model:  # (else the plan's preset)
            wl = workloads.load_local(opts.model, device, dtype)
        else:
            wl = workloads.load_preset(preset.name, device, dtype, layers=opts.layers, seed=opts.seed)
        gen = runner.Generator(
            wl, batch, prompt_len, new_tokens, compile=opts.compile, cuda_graphs=opts.cuda_graphs, seed=opts.seed
        )
        dev_info = sidecar.device_info(device)
        info = workload_info(wl, opts, plan, device, dtype)
        tmp = tmp_trace_path(trace_path)
        # Other processes' CPU use over the timed runs and the calibration (collect.contention).
        window = contention.Window()
        plain, n_plain, prof, schedule = measure(gen, opts, progress, tmp, trace_metadata(info, trace_path))

        calibration = None
        if opts.calibrate:
            progress.stage("calibrating")
            del gen, wl  # free the model's memory first
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            calibration = calibrate(device, dtype, device_name=dev_info.get("name"))
        if dev_info.get("type") == "cpu":
            dev_info["contention"] = window.result(dev_info.get("threads"), dev_info.get("cores"))

        timing = timing_info(plain, n_plain, prof, schedule, opts, device, new_tokens)
        notes = measurement_notes(dev_info, device, timing["profiler_overhead_ratio"])
        data = sidecar.build(info, dev_info, timing, calibration, schedule.describe(new_tokens))
        data["notes"] = notes
        progress.stage("writing")
        finish(tmp, trace_path, data, opts.force)
    finally:
        progress.close()
    return CollectResult(trace_path, markers.sidecar_path_for(trace_path), data, notes)


def _collect_script(opts: CollectOptions) -> CollectResult:
    from tracekit.collect.script import parse_command, run_target

    target = parse_command(opts.script or ())
    torch = require_torch()
    trace_path = resolve_output(opts.output, target.stem, opts.force)
    from tracekit.collect import runner, sidecar, workloads
    from tracekit.collect.calibrate import calibrate

    device = workloads.resolve_device(opts.device)
    dtype = workloads.resolve_dtype(opts.dtype, device)
    dev_info = sidecar.device_info(device)
    workload_info = {
        "kind": "script",
        "preset": None,
        "model_path": None,
        "model_config": None,
        "architecture": None,
        "parameters": None,
        "dtype": workloads.short_dtype(dtype) if opts.dtype != "auto" else None,
        "batch_size": None,
        "prompt_len": None,
        "new_tokens": None,
        "device": device,
        "compile": None,
        "cuda_graphs": None,
        "script": target.path if target.path is not None else f"-m {target.module}",
        "argv": list(target.argv[1:]),
    }
    tmp = tmp_trace_path(trace_path)
    prof = runner.make_profiler(torch.device(device).type)
    try:
        with runner.running(prof, trace_metadata(workload_info, trace_path)):
            wall = run_target(target)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        prof.export_chrome_trace(tmp)
    except BaseException:
        _remove(tmp)
        raise
    calibration = calibrate(device, dtype, device_name=dev_info.get("name")) if opts.calibrate else None
    timing = {
        "ttft_ms": None,
        "tpot_ms": None,
        "wall_ms": None,
        "profiled_wall_ms": wall,
        "profiled_ttft_ms": None,
        "profiled_tpot_ms": None,
        "profiler_overhead_ratio": None,
        "method": "the script ran once, under the profiler; TTFT/TPOT come from its markers in the trace",
    }
    schedule = {
        "skip_decode_steps": 0,
        "profiler_warmup_steps": 0,
        "record_decode_steps": None,
        "prefill_recorded": True,
    }
    data = sidecar.build(workload_info, dev_info, timing, calibration, schedule)
    finish(tmp, trace_path, data, opts.force)
    return CollectResult(trace_path, markers.sidecar_path_for(trace_path), data, [])


# -- helpers -------------------------------------------------------------------------------


def trace_metadata(workload: dict[str, Any], trace_path: str) -> dict[str, str]:
    """A small summary stored inside the trace itself (top-level key ``tracekit``)."""
    from tracekit import __version__

    keep = (
        "kind",
        "preset",
        "model_path",
        "architecture",
        "parameters",
        "dtype",
        "batch_size",
        "prompt_len",
        "new_tokens",
        "device",
        "script",
    )
    summary = {k: workload.get(k) for k in keep if k in workload}
    return {
        "tracekit": json.dumps(
            {
                "version": __version__,
                "sidecar": os.path.basename(markers.sidecar_path_for(trace_path)),
                "workload": summary,
            }
        )
    }


def finish(tmp: str, trace_path: str, data: dict[str, Any], force: bool) -> None:
    from tracekit.collect import sidecar

    if not force and _taken(trace_path):  # something appeared while we ran
        _remove(tmp)
        raise TracekitError(f"{trace_path} appeared while collecting: pass --force to overwrite it")
    try:
        sidecar.write(markers.sidecar_path_for(trace_path), data)
        os.replace(tmp, trace_path)
    except OSError as e:
        # The run is done and recorded: never lose it to a failing last step.
        raise TracekitError(
            f"could not move the recorded trace to {trace_path} ({e.strerror or e}); it is kept at {tmp}"
        ) from None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
