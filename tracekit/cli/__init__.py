"""The ``tracekit`` command. Each subcommand lives in its own module and is registered here.

Commands stay thin: parse options, call the library, print. Expected failures are
``TracekitError``: one sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys

import click

from tracekit import __version__
from tracekit.errors import TracekitError

# When the process ends, the interpreter's teardown runs the cyclic garbage collector over
# every object pandas, numpy and an analysis left (~0.2 s of CPU after a `tracekit summary`
# of a large trace). Nothing is left for it to do by then: atexit handlers (temporary
# folders, Dask clusters) have run, and memory goes back to the system with the process.
atexit.register(gc.freeze)

# The subcommands, in the order a user meets them: name -> the first sentence of its help,
# which `tracekit --help` lists (click shortens it to the terminal's width). The command is
# defined in the module tracekit.cli.<name>, imported only when that command runs, so
# `tracekit gpus` and `--help` start fast and `tracekit summary` pays for nothing the other
# commands need. The sentences are copies, so that listing the commands imports none of them
# (pandas alone costs more than the whole `--help`); tests/test_startup.py checks each one
# against its command's docstring.
COMMANDS = {
    "collect": "Profile an LLM inference run and write a trace plus a metadata sidecar.",
    "report": "Write a report of TRACE: a self-contained HTML page with charts (opens offline), the whole analysis "
    "as JSON for scripts and CI, or a Markdown summary for pull requests.",
    "compare": "Compare two runs: BEFORE (the baseline) and AFTER (the change), each a trace file or a folder of "
    "per-rank traces.",
    "summary": "Print what a trace holds (device, event counts, top kernels), then its headline figures (TTFT, TPOT, "
    "tokens/s, MFU, MBU, idle) and the prefill/decode phase table.",
    "batch": "Analyse every trace in PATHS (files, folders, globs) into one table, one row per trace: device, model, "
    "run kind, steps and step times per phase, tokens/s, MFU/MBU, idle share and its top cause, the top "
    "finding, and a status with the error of traces that failed.",
    "split": "Cut TRACE into windows of its time, each a trace file of its own, in two streamed passes whose memory "
    "does not grow with the trace: for traces too large to analyse whole.",
    "annotate": 'Write TRACE again with tracekit\'s analysis added as extra tracks: a "tracekit" process whose tracks '
    "hold each step (phase, tokens, batch, duration, GPU busy and idle) and each GPU-idle gap named by "
    "its cause and call, and tracekit_* args (category, bound, limiter, FLOPs, bytes, roof fraction, "
    "cost source) on every kernel.",
    "project": "Project TRACE onto another GPU: every kernel re-priced on the target's roofline at the fraction of "
    "the roof it reached where it was measured (compute-limited work with the peak FLOP/s for its "
    "dtype, memory-limited work with bandwidth, collectives with the interconnect), host and idle time "
    "as measured.",
    "whatif": "Replay TRACE's steps on their own dependencies with causes removed or kernels sped up, all together: "
    "per phase the measured and replayed step time, TTFT/TPOT p50, tokens/s and the saving, and how "
    "closely the unchanged replay reproduced the trace.",
    "plan": "Size a colocated and a disaggregated (prefill and decode on separate GPUs) deployment from the phase "
    "costs measured in TRACE(s): prefill time as a function of prompt tokens and decode step time as a "
    "function of batch and context, fitted from the run's steps and the model's roofline.",
    "gpus": "List the GPU spec database: dense peaks, bandwidth, ridge point and device names.",
    "models": "List the model architectures `--model` knows (each from a checkpoint's config.json, source given), "
    "or show what one name, config.json or checkpoint folder resolves to.",
    "mcp": "Serve tracekit over the Model Context Protocol on stdin/stdout, for a coding agent to start (Claude "
    "Code: claude mcp add tracekit -- tracekit mcp --allow ./traces).",
}


# Commands that run the user's model: their threading is the workload's, left as it is.
_RUNS_A_MODEL = ("collect",)


def _one_blas_thread() -> None:
    """Analysing a trace does no matrix algebra, but numpy's OpenBLAS starts a thread per core
    when it loads, and they spin (0.1-0.2 s of CPU per process on 2 cores, more on more).
    Set before numpy is first imported, and only where the user has not chosen a number."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class _Group(click.Group):
    _listing = False

    def list_commands(self, ctx) -> list[str]:
        return [*COMMANDS, *(c for c in super().list_commands(ctx) if c not in COMMANDS)]

    def format_commands(self, ctx, formatter) -> None:
        # The group's --help lists each command from COMMANDS' sentence, importing none of them.
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def get_command(self, ctx, name: str):
        if self._listing and name in COMMANDS and name not in self.commands:
            return click.Command(name, help=COMMANDS[name])
        if name in COMMANDS and name not in self.commands:
            if name not in _RUNS_A_MODEL:
                _one_blas_thread()
            module = importlib.import_module(f"tracekit.cli.{name}")
            self.add_command(module.command)
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TracekitError as e:
            click.echo(f"tracekit: error: {e.message}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("tracekit: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
def main() -> None:
    """Profile LLM inference and explain where the time goes, prefill vs decode."""
