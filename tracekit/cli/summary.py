"""``tracekit summary TRACE``: what the reader found, then the headline figures and phase table."""

from __future__ import annotations

import click

from tracekit.cli.common import read_with_progress, trace_argument
from tracekit.trace.summary import summarize


@click.command("summary")
@trace_argument
@click.option("--top", default=10, show_default=True, help="How many kernels to list by total time.")
@click.option("--gpu", metavar="NAME", help="Price the kernels against this GPU's spec row (see `tracekit gpus`).")
@click.option("--spec-file", type=click.Path(exists=True, dir_okay=False), metavar="PATH",
              help="A JSON or CSV file with the device's peaks, instead of the built-in database.")
def command(trace: str, top: int, gpu: str | None, spec_file: str | None) -> None:
    """Print what a trace holds (device, event counts, top kernels), then its headline
    figures (TTFT, TPOT, tokens/s, MFU, MBU, idle) and the prefill/decode phase table."""
    from tracekit.analysis import analyze
    from tracekit.report.render_text import TextRenderer

    t = read_with_progress(trace)
    click.echo(summarize(t, top=top))
    analysis = analyze(t, gpu=gpu, spec_file=spec_file)
    click.echo("")
    click.echo(TextRenderer(show_header=False).render(analysis).rstrip("\n"))
    click.echo("")
    click.echo(f"next: tracekit report {trace} (HTML with charts), or --format json / md", err=True)
