"""The ``tracekit`` command. Each subcommand lives in its own module and is registered here.

Commands stay thin: parse options, call the library, print. Expected failures are
``TracekitError``: one sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import atexit
import gc
import importlib
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
COMMANDS = ("collect", "report", "compare", "summary", "batch", "project", "plan", "gpus", "models")


class _Group(click.Group):
    def list_commands(self, ctx) -> list[str]:
        return [*COMMANDS, *(c for c in super().list_commands(ctx) if c not in COMMANDS)]

    def get_command(self, ctx, name: str):
        if name in COMMANDS and name not in self.commands:
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
