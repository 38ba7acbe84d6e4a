"""``tracekit summary TRACE``: what the reader found, then the headline figures and phase table."""

from __future__ import annotations

import click

from tracekit.cli.common import (
    device_options,
    device_settings,
    model_options,
    model_settings,
    read_with_progress,
    trace_argument,
)


@click.command("summary")
@trace_argument
@click.option("--top", default=10, show_default=True, help="How many kernels to list by total time.")
@device_options()
@model_options
def command(trace: str, top: int, **options) -> None:
    """Print what a trace holds (device, event counts, top kernels), then its headline
    figures (TTFT, TPOT, tokens/s, MFU, MBU, idle) and the prefill/decode phase table."""
    from tracekit.cli.cached import document_key, get_text, put_text
    from tracekit.cli.common import stated_figures

    # The second look at an unchanged trace with the same options prints what the first printed,
    # from the cache (tracekit.cli.cached), without reading or analysing it again.
    key = document_key("summary", [trace], {**options, "top": top, "stated": stated_figures()})
    text = get_text("summary", key)
    if text is None:
        text = _summary(trace, top, options)
        put_text("summary", key, text, trace)
    click.echo(text, nl=False)
    click.echo(f"next: tracekit report {trace} (HTML with charts), or --format json / md", err=True)


def _summary(trace: str, top: int, options: dict) -> str:
    from tracekit.analysis import analyze
    from tracekit.report.quality_view import priced_instead
    from tracekit.report.render_text import TextRenderer
    from tracekit.trace.summary import summarize

    # Before the slow read and before the first line is printed: a bad option fails alone.
    settings = {**model_settings(options), **device_settings(options)}
    t = read_with_progress(trace)
    analysis = analyze(t, **settings)
    # What each gap in the trace takes away depends on the analysis (the model prices what shapes cannot).
    head = summarize(t, top=top, effects=priced_instead(analysis.model, analysis.phases))
    body = TextRenderer(show_header=False).render(analysis).rstrip("\n")
    return f"{head}\n\n{body}\n\n"
