"""``tracekit whatif TRACE --remove launch --speed gemm=0.8``: what the steps would take with causes
removed or work sped up, replayed on their own dependencies."""

from __future__ import annotations

import os
import shlex

import click

from tracekit.cli.common import (
    deliver,
    device_options,
    device_settings,
    model_options,
    model_settings,
    output_options,
    output_target,
    read_with_progress,
    trace_argument,
)
from tracekit.errors import TracekitError


@click.command("whatif")
@trace_argument
@click.option(
    "--remove",
    metavar="CAUSES",
    help="Causes to remove, comma-separated: launch (launch overhead: the step as one graph), sync "
    "(every synchronising call) or sync:NAME (calls whose name contains NAME), overlap-comm "
    "(communication hidden under compute).",
)
@click.option(
    "--speed",
    metavar="TARGET=F,...",
    help="Kernels of a category (gemm, attention, moe, ...) or whose name contains TARGET, run at "
    "fraction F of their roof where they ran slower, e.g. gemm=0.8,attention=0.7.",
)
@click.option(
    "--host-floor", type=float, metavar="US", help="Host work between two calls cut to at most US microseconds."
)
@output_options(
    "the terminal; with -f html/md/json, reports/<trace name>-whatif.<format>", formats=("text", "md", "html", "json")
)
@device_options()
@model_options
def command(
    trace: str,
    remove: str | None,
    speed: str | None,
    host_floor: float | None,
    output: str | None,
    fmt: str | None,
    force: bool,
    **options,
) -> None:
    """Replay TRACE's steps on their own dependencies with causes removed or kernels sped up, all
    together: per phase the measured and replayed step time, TTFT/TPOT p50, tokens/s and the
    saving, and how closely the unchanged replay reproduced the trace.

    \b
    Example:
      tracekit whatif decode.json.gz --remove launch,sync
      tracekit whatif decode.json.gz --speed gemm=0.8 --host-floor 5 -f html
    """
    from tracekit.analysis import analyze
    from tracekit.analysis.replay.changes import parse
    from tracekit.report.output import DEFAULT_DIR, report_stem
    from tracekit.report.whatif import choose, whatif

    changes = parse(remove, speed, host_floor)  # bad words fail before anything is read
    if not changes:
        raise TracekitError("nothing to replay: give --remove, --speed or --host-floor (e.g. --remove launch)")
    if output is None and fmt is None:
        fmt = "text"  # a what-if is read at the terminal unless a file is asked for
    renderer, path, replacing = output_target(
        output, fmt, choose, lambda ext: os.path.join(DEFAULT_DIR, f"{report_stem(trace)}-whatif{ext}"), force
    )
    if not os.path.exists(trace):
        raise TracekitError(f"{trace}: no such file or folder")
    settings = model_settings(options)
    settings.update(device_settings(options))
    doc = whatif(analyze(read_with_progress(trace), **settings), changes)
    deliver(renderer.render(doc), path, output is None, replacing)
    if path is not None:
        q = shlex.quote
        click.echo(f"next: the findings' own what-ifs, replayed, are in tracekit report {q(trace)}")
