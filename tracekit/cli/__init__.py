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

# The subcommands, in the order a user meets them: name -> the module under tracekit.cli
# that defines it. A command's module (and what it imports: pandas, the analysis, Jinja2)
# is imported only when that command runs, so `tracekit gpus` or `--help` start fast and
# `tracekit summary` pays for nothing the other commands need.
COMMANDS = ("collect", "report", "compare", "summary", "batch", "split", "annotate", "project", "plan", "gpus",
            "models", "mcp")


# Commands that run the user's model: their threading is the workload's, left as it is.
_RUNS_A_MODEL = ("collect",)


def _one_blas_thread() -> None:
    """Analysing a trace does no matrix algebra, but numpy's OpenBLAS starts a thread per core
    when it loads, and they spin (0.1-0.2 s of CPU per process on 2 cores, more on more).
    Set before numpy is first imported, and only where the user has not chosen a number."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class _Group(click.Group):
    def list_commands(self, ctx) -> list[str]:
        return [*COMMANDS, *(c for c in super().list_commands(ctx) if c not in COMMANDS)]

    def get_command(self, ctx, name: str):
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
