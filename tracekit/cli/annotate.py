"""``tracekit annotate TRACE -o OUT.json.gz``: the trace, unchanged, plus tracekit's reading of it
as tracks Perfetto shows (steps, GPU idle by cause) and roofline args on every kernel."""

from __future__ import annotations

import os

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


@click.command("annotate")
@trace_argument
@click.option(
    "-o",
    "--output",
    metavar="FILE|DIR",
    help="Where to write: a .json or .json.gz file (gzip by its suffix); for a folder of traces "
    "(ranks, split windows), a folder (default: reports/<trace name>.tracekit.json.gz, or "
    "reports/<folder name>-annotated/).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@device_options()
@model_options
def command(trace: str, output: str | None, force: bool, **options) -> None:
    """Write TRACE again with tracekit's analysis added as extra tracks: a "tracekit" process whose
    tracks hold each step (phase, tokens, batch, duration, GPU busy and idle) and each GPU-idle
    gap named by its cause and call, and tracekit_* args (category, bound, limiter, FLOPs, bytes,
    roof fraction, cost source) on every kernel. A "critical path" track holds each step's critical
    path from the step replay: the host work, launches, queueing and kernels that set its duration.
    Every original event is kept as it was.
    Open the result in https://ui.perfetto.dev or chrome://tracing.

    A folder is annotated file by file into an output folder: one file per rank, each analysed
    on its own; or the windows `tracekit split` wrote, each analysed in order as `tracekit
    report DIR` reads them, its steps numbered as the whole run's."""
    from tracekit.report.output import check_output, default_output, report_stem
    from tracekit.trace import decode

    if not os.path.exists(trace):
        raise TracekitError(f"{trace}: no such file or folder")
    options = {**model_settings(options), **device_settings(options)}
    if os.path.isdir(trace):
        files = decode.list_trace_files(trace)
        if not files:
            raise TracekitError(f"{trace} is a directory with no trace files (*.json, *.json.gz, *.json.zst)")
        out_dir = output or os.path.join("reports", f"{report_stem(trace)}-annotated")
        if os.path.exists(out_dir) and not os.path.isdir(out_dir):
            raise TracekitError(f"{out_dir} is a file; annotating a folder of traces writes a folder (give -o DIR)")
        targets = [os.path.join(out_dir, _annotated_name(f)) for f in files]
        for src, dst in zip(files, targets):
            _refuse_input(src, dst)
            if os.path.isdir(out_dir):
                check_output(dst, force=force, ours=False)  # before any slow work
        os.makedirs(out_dir, exist_ok=True)
        from tracekit.analysis.windows import window_paths

        windows = window_paths(trace)
        if windows is not None:  # split's windows: read as `report DIR` reads them, in order
            from tracekit.report.annotate import annotate_windows

            dst_of = dict(zip(files, targets))
            for src, doc, counts in annotate_windows(windows, read_with_progress, options):
                dst = dst_of[src]
                _write(src, dst, doc, counts, replacing=os.path.isfile(dst), force=force)
        else:
            for src, dst in zip(files, targets):
                _one(src, dst, options, replacing=os.path.isfile(dst), force=force)
        click.echo(f"next: open the files of {out_dir} in https://ui.perfetto.dev (one per rank or window)", err=True)
        return
    path = output or default_output(trace, ".tracekit.json.gz")
    if not path.lower().endswith((".json", ".json.gz")):
        raise TracekitError(f"{path}: the output is a Chrome trace, so name it .json or .json.gz")
    _refuse_input(trace, path)
    replacing = check_output(path, force=force, ours=output is None)
    _one(trace, path, options, replacing, make_parent=output is None, force=force)
    click.echo(f'next: open {path} in https://ui.perfetto.dev (tracks under the process "tracekit")', err=True)


def _one(src: str, dst: str, options: dict, replacing: bool, make_parent: bool = False, force: bool = False) -> None:
    from tracekit.report.annotate import annotate_file

    doc, counts = annotate_file(src, read_with_progress, options)
    _write(src, dst, doc, counts, replacing, make_parent, force)


def _write(
    src: str, dst: str, doc, counts: dict, replacing: bool, make_parent: bool = False, force: bool = False
) -> None:
    from tracekit import markers
    from tracekit.report import write_atomic
    from tracekit.report.annotate import dump_document

    size = write_atomic(dst, dump_document(doc, dst), make_parent=make_parent)
    click.echo(
        f"{'replaced' if replacing else 'wrote'} {dst} ({human_size(size)}): {counts['steps']} steps, "
        f"{counts['idle']:,} idle gaps, {counts.get('critical', 0):,} critical-path segments, tracekit args on "
        f"{counts['kernels']:,} kernels"
    )
    # tracekit collect's sidecar (device, calibration, workload) goes along, so that the
    # annotated copy reads back with the analysis of the original.
    side, copy = markers.sidecar_path_for(src), markers.sidecar_path_for(dst)
    if os.path.isfile(side) and side != copy and (force or not os.path.exists(copy)):
        with open(side, "rb") as f:
            write_atomic(copy, f.read())
        click.echo(f"wrote {copy} (the sidecar of {os.path.basename(src)})")


def _annotated_name(src: str) -> str:
    from tracekit.report.output import report_stem

    return report_stem(src) + ".tracekit.json.gz"


def _refuse_input(src: str, dst: str) -> None:
    """The input is never the output, even with --force: the annotated copy replaces nothing it reads."""
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise TracekitError(f"{dst} is the input trace; annotate never overwrites it (give -o another name)")
