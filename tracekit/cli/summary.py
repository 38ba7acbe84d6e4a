"""``tracekit summary TRACE``: what the reader found, in the terminal."""

from __future__ import annotations

import click

from tracekit.cli.common import read_with_progress, trace_argument
from tracekit.trace.summary import summarize


@click.command("summary")
@trace_argument
@click.option("--top", default=10, show_default=True, help="How many kernels to list by total time.")
def command(trace: str, top: int) -> None:
    """Print what a trace holds: device, time span, event counts, top kernels."""
    t = read_with_progress(trace)
    click.echo(summarize(t, top=top))
