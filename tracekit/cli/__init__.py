"""The ``tracekit`` command. Each subcommand lives in its own module and is registered here.

Commands stay thin: parse options, call the library, print. Expected failures are
``TracekitError``: one sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys

import click

from tracekit import __version__
from tracekit.errors import TracekitError


class _Group(click.Group):
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


def _register() -> None:
    # One place lists the subcommands, in the order a user meets them.
    from tracekit.cli import batch, collect, compare, gpus, models, plan, project, report, summary

    for module in (collect, report, compare, summary, batch, project, plan, gpus, models):
        main.add_command(module.command)


_register()
