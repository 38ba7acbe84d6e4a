"""``tracekit report TRACE [-o FILE]``: one trace (or a folder of per-rank traces, or the windows
``tracekit split`` wrote: one merged report of the run) to a report."""

from __future__ import annotations

import os
import shlex
import sys

import click

from tracekit.cli.common import (
    device_options,
    device_settings,
    human_size,
    model_options,
    model_settings,
    read_with_progress,
    trace_argument,
)
from tracekit.errors import TracekitError

FORMATS = ("html", "json", "md", "text")


@click.command("report")
@trace_argument
@click.option(
    "-o",
    "--output",
    metavar="FILE",
    help="Where to write (default: reports/<trace name>.<format>); '-' writes to stdout.",
)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="Output format (default: from FILE's extension .html/.json/.md/.txt, else html).",
)
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@click.option(
    "--with-hta",
    is_flag=True,
    help="Also run HolisticTraceAnalysis on the same files and add its temporal and idle-time breakdowns, "
    "communication/computation overlap and kernel-launch statistics (needs: pip install 'tracekit[hta]').",
)
@device_options()
@model_options
def command(trace: str, output: str | None, fmt: str | None, force: bool, with_hta: bool, **options) -> None:
    """Write a report of TRACE: a self-contained HTML page with charts (opens offline),
    the whole analysis as JSON for scripts and CI, or a Markdown summary for pull requests."""
    from tracekit.analysis import analyze
    from tracekit.cli.cached import document_key, get_json, put_json
    from tracekit.cli.common import stated_figures
    from tracekit.report import choose, default_output, write_atomic
    from tracekit.report.output import check_output, is_stream, refuse_folder

    to_stdout = output == "-"
    refuse_folder(output)
    renderer = choose(fmt, None if output and is_stream(output) else output)
    path = output if output else default_output(trace, renderer.extension)
    replacing = False if to_stdout else check_output(path, force=force, ours=output is None)  # before the slow read
    if not os.path.exists(trace):
        raise TracekitError(f"{trace}: no such file or folder")
    settings = model_settings(options)  # so does a bad --model
    if with_hta:
        from tracekit.analysis.hta import require

        require()  # a missing extra fails before the slow read too
    # The analysis of an unchanged trace with the same options, as its JSON document (all a
    # renderer reads), comes from the cache on the second look (tracekit.cli.cached).
    key = document_key("analysis", [trace], {**options, "stated": stated_figures()})
    data = get_json("analysis", key)
    if data is None:
        settings.update(device_settings(options))  # a bad --gpu or --spec-file; then the capture's read
    split_windows = _windows(trace)
    files = split_windows or _files(trace)
    if data is None:
        if split_windows:
            # The windows of one split (tracekit split): analysed one at a time, merged into one report.
            from tracekit.analysis.windows import analyse_windows

            analysis = analyse_windows(split_windows, read_with_progress, **settings)
        else:
            t = read_with_progress(trace)
            analysis = analyze(t, **settings)
            files = t.metadata.get("files") or [t.path]
        data = analysis.to_dict()
        put_json("analysis", key, data, trace)
    if with_hta:
        from tracekit.analysis.hta import run_hta

        if sys.stderr.isatty():  # HTA parses ~10 MB/s on its own: say what the wait is
            click.echo("running HolisticTraceAnalysis on the same files...", err=True)
        data["hta"] = run_hta(files)
    text = renderer.render_data(data)
    if to_stdout:
        click.echo(text, nl=False)
        return
    size = write_atomic(path, text, make_parent=output is None)
    click.echo(f"{'replaced' if replacing else 'wrote'} {path} ({human_size(size)})")
    if not is_stream(path):
        click.echo(_next_step(renderer.name, trace, path))


def _files(trace: str) -> list[str]:
    """The trace files a read of ``trace`` reads, as the reader names them (for HTA)."""
    if not os.path.isdir(trace):
        return [trace]
    from tracekit.trace.decode import list_trace_files

    return list_trace_files(trace)


def _windows(trace: str) -> list[str] | None:
    """A folder holding the windows of one split, in order; None for anything else."""
    if not os.path.isdir(trace):
        return None
    from tracekit.analysis.windows import window_paths

    return window_paths(trace)


def _next_step(name: str, trace: str, path: str) -> str:
    q = shlex.quote
    if name == "html":
        return f"next: open {q(path)} in a browser (it works offline), or run: tracekit report {q(trace)} --format md"
    if name == "json":
        return f"next: the keys are documented in docs/json-schema.md; for people: tracekit report {q(trace)}"
    if name == "md":
        return f"next: paste {q(path)} into a pull request; the full report with charts: tracekit report {q(trace)}"
    return f"next: tracekit report {q(trace)} for the HTML report with charts"
