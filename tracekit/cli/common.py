"""Helpers the subcommands share: reading with progress, output-path rules."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from tracekit.errors import TracekitError
from tracekit.report.output import refuse_overwrite  # noqa: F401  (one rule for every command)

if TYPE_CHECKING:
    from tracekit.trace import Trace

# Below this size a read takes well under a second: no progress display.
_PROGRESS_MIN_BYTES = 20_000_000


def read_with_progress(path: str, cached: bool = True) -> Trace:
    """Read a trace, showing its stages on stderr when it is big and stderr is a terminal. An
    unchanged trace read before loads from the cache (``tracekit.trace.cache``) unless
    ``--no-cache``, $TRACEKIT_NO_CACHE or ``cached=False`` says otherwise."""
    if cached:
        from tracekit.cli.cached import cache_enabled
        from tracekit.trace.cache import read_cached

        return read_cached(path, lambda p: read_with_progress(p, cached=False), enabled=cache_enabled())
    # Here, not at the top: the reader brings pandas, which `tracekit batch`, `split` and every
    # command's --help do without (tests/test_startup.py).
    from tracekit.trace import read_trace

    size = _size(path)
    if size < _PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        return read_trace(path)
    from tqdm import tqdm

    # No monitor thread: a folder's ranks are read by processes forked from this one, which
    # tracekit.trace.parallel does only while this process runs a single thread.
    tqdm.monitor_interval = 0
    stages = ["reading", "building tables", "linking kernels to launches and ops"]
    with tqdm(total=len(stages), desc=os.path.basename(path), unit="stage", file=sys.stderr, leave=False) as bar:

        def progress(stage: str) -> None:
            bar.set_postfix_str(stage)
            bar.update(1)

        return read_trace(path, progress=progress)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def check_device_options(
    gpu: str | None = None, spec_file: str | None = None, option: str = "--gpu", spec_option: str = "--spec-file"
) -> None:
    """A bad ``--gpu`` (not in the database) or ``--spec-file`` (unreadable, malformed), or both
    given, fails in one sentence that names the options as typed (``option``, ``spec_option``:
    compare's ``--gpu-before`` ...), before the slow read and before anything is printed."""
    if gpu is None and spec_file is None:
        return
    from tracekit.specs import load_spec_file, spec_by_name

    if gpu is not None and spec_file is not None:
        raise TracekitError(f"pass either {option} or {spec_option}, not both")
    if gpu is not None:
        spec_by_name(gpu, option=option)
    elif spec_file is not None:
        load_spec_file(spec_file)


def trace_argument(f):
    return click.argument("trace", type=click.Path(dir_okay=True, file_okay=True, path_type=str))(f)


def human_size(n: int) -> str:
    """A written file's size for the "wrote ..." line."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{max(1, round(n / 1e3))} kB"


# --- every option that changes how a trace is analysed ------------------------------------
# Defined once here, so that each command that analyses a trace (report, summary, annotate,
# project, compare) takes the same options with the same help, and a new one reaches them all.


def device_options(side: str | None = None):
    """``--gpu``, ``--spec-file``, ``--graph-capture``, ``--cpu-flops`` and ``--cpu-bandwidth``: what
    the run ran on and what its graph-replayed kernels are. With ``side`` (compare's ``before``
    and ``after``) each is ``--gpu-before`` ..., for that side's runs."""
    end = f"-{side}" if side else ""
    kernels = f"the {side} run's kernels" if side else "the kernels"
    cpu = f"CPU traces ({side} run)" if side else "CPU traces"

    def wrap(f):
        f = click.option(
            f"--cpu-bandwidth{end}",
            type=click.FloatRange(min=0, min_open=True),
            metavar="BYTES/S",
            help=f"{cpu}: the memory bandwidth to price against, when the trace has no collect calibration.",
        )(f)
        f = click.option(
            f"--cpu-flops{end}",
            type=click.FloatRange(min=0, min_open=True),
            metavar="FLOP/S",
            help=f"{cpu}: the matmul peak to price against, when the trace has no collect calibration.",
        )(f)
        f = click.option(
            f"--graph-capture{end}",
            type=click.Path(exists=True),
            metavar="TRACE|DIR",
            multiple=True,
            help="The trace recorded while the CUDA/HIP graphs were captured: its ops give the shapes "
            f"of {kernels} replayed from the graphs (ROCm traces name the kernels needed to "
            "match them). Repeatable; a folder gives all its trace files (vLLM's and ATOM's "
            "capture folders: one file per graph size, each replay priced from its own size's).",
        )(f)
        f = click.option(
            f"--spec-file{end}",
            type=click.Path(exists=True, dir_okay=False),
            metavar="PATH",
            help=f"Price {kernels} against the device peaks in a JSON, CSV or TOML file (a "
            "`tracekit gpus --json` row works as is).",
        )(f)
        return click.option(
            f"--gpu{end}",
            metavar="NAME",
            help=f"Price {kernels} against this GPU's spec row, not the one the trace names (see `tracekit gpus`).",
        )(f)

    return wrap


def device_settings(values: dict, side: str | None = None) -> dict:
    """``analyze``'s device keywords from ``device_options``' values (the command's keyword
    arguments): a bad ``--gpu`` or ``--spec-file`` fails in one sentence naming the option as
    typed, and the graph-capture trace is read (after ``model_settings``, so that a bad option
    fails before this slow read). Call it after the output checks and before the trace's read."""
    end, key = (f"-{side}", f"_{side}") if side else ("", "")
    gpu, spec_file = values[f"gpu{key}"], values[f"spec_file{key}"]
    check_device_options(gpu, spec_file, option=f"--gpu{end}", spec_option=f"--spec-file{end}")
    captures = read_captures(values[f"graph_capture{key}"], f"--graph-capture{end}")
    return dict(
        gpu=gpu,
        spec_file=spec_file,
        capture=captures or None,
        cpu_matmul_flops=values[f"cpu_flops{key}"],
        cpu_bandwidth=values[f"cpu_bandwidth{key}"],
    )


def read_captures(paths, option: str = "--graph-capture") -> list[Trace]:
    """The graph-capture traces ``paths`` name (files, and folders: every trace file in each),
    each read on its own: a capture folder holds one file per graph size, all of rank 0, which
    a read of the folder as one run would refuse. A bad file fails in one sentence naming it."""
    from tracekit.trace.decode import list_trace_files

    files = []
    for path in paths or ():
        if os.path.isdir(path):
            found = list_trace_files(path)
            if not found:
                raise TracekitError(f"{option} {path}: the folder holds no trace files (*.json, *.json.gz, *.json.zst)")
            files += found
        else:
            files.append(path)
    out, seen = [], set()
    for f in files:
        if os.path.realpath(f) in seen:  # named twice (itself and its folder): read once
            continue
        seen.add(os.path.realpath(f))
        try:
            out.append(read_with_progress(f))
        except TracekitError as e:
            raise TracekitError(f"{option}: {e.message}") from None
    return out


def model_settings(values: dict) -> dict:
    """``analyze``'s model keywords from ``model_options``' values: a bad ``--model`` fails here,
    before the slow read; ``--weights`` goes to the model when there is one, else to the trace's
    own (sidecar) model."""
    spec_model = load_model_option(values["model"], values["weights"])
    return dict(
        model=spec_model,
        tp=values["tp"],
        costs=values["costs"],
        model_force=values["model_force"],
        weights=values["weights"] if spec_model is None else None,
        stated=stated_figures(),
    )


# --- the model-based cost options, shared by report, summary and compare ----------------

COSTS = ("auto", "shapes", "model")


def model_options(f):
    """``--model``, ``--tp``, ``--weights``, ``--costs`` and ``--model-force``: price kernels from the architecture.
    Also ``--no-cache`` and ``--jobs``: every command that reads traces takes these options, so they ride along."""
    from tracekit.cli.cached import no_cache_option
    from tracekit.models import WEIGHT_CHOICES

    f = no_cache_option(f)
    f = jobs_option(f)

    f = click.option(
        "--model-force",
        is_flag=True,
        help="Price by --model even where the trace contradicts it (another number of attention "
        "layers); without it those figures are withheld, with the reason.",
    )(f)
    f = click.option(
        "--costs",
        type=click.Choice(COSTS),
        default="auto",
        show_default=True,
        help="Where FLOPs and bytes come from: recorded shapes where present and the model "
        "elsewhere, or one of them only (--costs model cross-checks the model).",
    )(f)
    f = click.option(
        "--weights",
        type=click.Choice(WEIGHT_CHOICES),
        metavar="PRECISION",
        help="How the model's linear layers are stored when its config does not say "
        f"({', '.join(WEIGHT_CHOICES)}); LM head and embeddings stay at the config's dtype.",
    )(f)
    f = click.option(
        "--tp",
        type=click.IntRange(min=1),
        metavar="N",
        help="Tensor-parallel degree of the run (default: distributedInfo's world size).",
    )(f)
    # Each example is what that option counts: a prefill step of one 2,048-token prompt; a decode
    # step of 16 requests, which computes 16 tokens.
    for what, noun, example in (
        ("batch", "requests", "--batch prefill=1 --batch decode=16"),
        ("tokens", "tokens", "--tokens prefill=2048 --tokens decode=16"),
    ):
        f = click.option(
            f"--{what}",
            multiple=True,
            metavar="[PHASE=]N",
            callback=_stated_callback,
            expose_value=False,
            help=f"The {noun} of each step of a phase (prefill, decode, mixed; no PHASE: every step), "
            f"when the trace does not state them; repeatable, e.g. {example}. Replaces what the "
            "trace's evidence says.",
        )(f)
    f = click.option(
        "--model",
        metavar="NAME|PATH",
        help="The model that ran: a name from `tracekit models`, a config.json, or a checkpoint "
        "folder holding one. Prices the kernels that have no recorded shapes.",
    )(f)
    return f


def jobs_option(f):
    """``--jobs N``: how many processes read a folder of per-rank traces at once
    (``tracekit.trace.parallel``), for this run."""
    return click.option(
        "--jobs",
        type=click.IntRange(min=1),
        metavar="N",
        expose_value=False,
        callback=_jobs_callback,
        help="Processes that read a folder of per-rank traces at once (default: one per CPU for a "
        "large folder; also TRACEKIT_JOBS); 1 reads the files one by one. The report is the "
        "same either way.",
    )(f)


def _jobs_callback(ctx, param, value):
    if value is not None:
        # Set for the reads of this command only (read_trace takes it as its default), and
        # unset when the command ends: a command run in-process (tests, the MCP server) must not
        # leave it to the next.
        from tracekit.trace import parallel

        parallel.choose_jobs(value)
        ctx.call_on_close(lambda: parallel.choose_jobs(None))
    return None


_STATED_KEY = "tracekit.stated"
_PHASES = ("prefill", "decode", "mixed", "all")


def load_model_option(model: str | None, weights: str | None):
    """The ``ModelSpec`` that ``--model``/``--weights`` name, or None without ``--model``."""
    if model is None:
        return None
    from tracekit.models import load_model  # lazy: the model registry is not needed by every command

    return load_model(model, weights=weights)


def _stated_callback(ctx, param, values):
    table = {}
    for text in values:
        phase, _, number = text.rpartition("=")
        phase = phase.strip().lower() or "all"
        if phase not in _PHASES or not number.strip().isdigit() or int(number) < 1:
            raise click.BadParameter(
                f"{text!r} is not [PHASE=]N with PHASE one of prefill, decode, mixed and N a whole number above 0",
                param_hint=f"--{param.name}",
            )
        table[phase] = int(number)
    ctx.meta.setdefault(_STATED_KEY, {})[param.name] = table
    return None


def stated_figures() -> dict | None:
    """The ``--tokens`` / ``--batch`` figures of the running command, as ``analyze(stated=...)``
    takes them (``{"tokens": {phase: n}, "batch": {phase: n}}``), or None when none were given."""
    ctx = click.get_current_context(silent=True)
    got = {k: v for k, v in ((ctx.meta.get(_STATED_KEY) or {}) if ctx else {}).items() if v}
    return got or None


# --- where a document goes: a file, or the terminal ------------------------------------


def output_options(default: str, formats=("html", "json", "md", "text")):
    """``-o/--output``, ``-f/--format`` and ``--force``; ``default`` says where it goes without -o."""

    def wrap(f):
        f = click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")(f)
        f = click.option(
            "-f",
            "--format",
            "fmt",
            type=click.Choice(formats),
            help="Output format (default: from FILE's extension, else html). text without -o prints to the terminal.",
        )(f)
        return click.option(
            "-o", "--output", metavar="FILE", help=f"Where to write (default: {default}); '-' writes to stdout."
        )(f)

    return wrap


def output_target(output: str | None, fmt: str | None, choose, default_path, force: bool):
    """(renderer, path, replacing) for ``-o``/``-f``: ``-o -`` or ``-f text`` without ``-o``
    prints (path None); otherwise the path (``default_path(extension)`` without ``-o``) is
    checked before any slow work (``report.output.check_output``). A stream target such as
    ``/dev/null`` takes the format from ``-f`` (default html)."""
    from tracekit.report.output import check_output, is_stream, refuse_folder

    refuse_folder(output)
    if output == "-" or (output is None and fmt == "text"):
        return choose(fmt, None), None, False
    stream = output is not None and is_stream(output)
    renderer = choose(fmt, None if stream else output)
    path = output or default_path(renderer.extension)
    replacing = check_output(path, force=force, ours=output is None)
    return renderer, path, replacing


def deliver(text: str, path: str | None, made_default: bool, replacing: bool = False) -> None:
    """Print ``text`` (no path) or write it atomically and say where (creating the default
    folder); a rerun replacing tracekit's own default file says so."""
    from tracekit.report import write_atomic

    if path is None:
        click.echo(text, nl=False)
        return
    size = write_atomic(path, text, make_parent=made_default)
    click.echo(f"{'replaced' if replacing and made_default else 'wrote'} {path} ({human_size(size)})")
