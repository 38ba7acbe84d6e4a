"""``tracekit summary TRACE``: what the reader found, then the headline figures and phase table."""

from __future__ import annotations

import click

from tracekit.cli.common import check_device_options, model_options, read_with_progress, trace_argument, stated_figures
from tracekit.trace.summary import summarize


@click.command("summary")
@trace_argument
@click.option("--top", default=10, show_default=True, help="How many kernels to list by total time.")
@click.option("--gpu", metavar="NAME", help="Price the kernels against this GPU's spec row (see `tracekit gpus`).")
@click.option("--spec-file", type=click.Path(exists=True, dir_okay=False), metavar="PATH",
              help="The device's peaks from a JSON, CSV or TOML file (a `tracekit gpus --json` row works as is).")
@model_options
def command(trace: str, top: int, gpu: str | None, spec_file: str | None, model: str | None, tp: int | None,
            weights: str | None, costs: str,
            model_force: bool = False) -> None:
    """Print what a trace holds (device, event counts, top kernels), then its headline
    figures (TTFT, TPOT, tokens/s, MFU, MBU, idle) and the prefill/decode phase table."""
    from tracekit.analysis import analyze
    from tracekit.report.render_text import TextRenderer

    from tracekit.cli.common import load_model_option

    check_device_options(gpu, spec_file)  # before the read and before the first line is printed
    spec_model = load_model_option(model, weights)
    t = read_with_progress(trace)
    click.echo(summarize(t, top=top))
    analysis = analyze(t, gpu=gpu, spec_file=spec_file, model=spec_model, tp=tp, costs=costs,
                       model_force=model_force, stated=stated_figures(),
                       weights=weights if spec_model is None else None)
    click.echo("")
    click.echo(TextRenderer(show_header=False).render(analysis).rstrip("\n"))
    click.echo("")
    click.echo(f"next: tracekit report {trace} (HTML with charts), or --format json / md", err=True)
