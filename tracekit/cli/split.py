"""``tracekit split TRACE [-o DIR]``: a trace too large to analyse at once, as windows of its time."""

from __future__ import annotations

import os
import sys

import click

from tracekit.cli.common import human_size


@click.command("split")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=str))
@click.option(
    "-o",
    "--output",
    "out_dir",
    metavar="DIR",
    help="The folder to write the windows into (default: reports/<trace name>-windows).",
)
@click.option(
    "--events",
    "max_events",
    type=click.IntRange(min=1),
    metavar="N",
    help="About how many CPU-side events (ops, runtime calls, annotations, Python frames) a window "
    "holds; its kernels come with them (default: 2,000,000, about 0.5-1 GB of JSON).",
)
@click.option("--force", is_flag=True, help="Replace the windows an earlier split wrote into DIR.")
def command(trace: str, out_dir: str | None, max_events: int | None, force: bool) -> None:
    """Cut TRACE into windows of its time, each a trace file of its own, in two streamed passes
    whose memory does not grow with the trace: for traces too large to analyse whole.

    Windows are cut only between the engine's steps (step annotations or step frames; when the
    trace names none, between the steps tracekit infers from it, as its report would), so each
    step is whole in one window with its
    kernels (a step longer than a window makes it grow); every window keeps the trace's device
    and rank metadata.
    `tracekit report DIR` gives one merged report of the whole run; `tracekit batch DIR` a row per window."""
    from tracekit import read_trace
    from tracekit.analysis.windows import split_keeping_steps
    from tracekit.trace import windows

    if out_dir is None:
        out_dir = os.path.join("reports", f"{windows.trace_stem(trace)}-windows")
    notes: list[str] = []
    with _Progress() as progress:
        # (A trace that names no steps is split twice: again between the steps inferred from its windows.)
        written = split_keeping_steps(
            trace,
            out_dir,
            read_trace,
            max_events=max_events or windows.DEFAULT_EVENTS,
            force=force,
            progress=progress,
            notes=notes,
        )
    size = sum(os.path.getsize(p) for p in written)
    click.echo(
        f"wrote {len(written)} window{'s' if len(written) != 1 else ''} of {trace} to {out_dir} ({human_size(size)})"
    )
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(
        f"next: tracekit report {out_dir} (one merged report of the run), or tracekit batch {out_dir} "
        "(a row per window)",
        err=True,
    )


class _Progress:
    """Each pass over the trace as a bar of decompressed bytes on a terminal's stderr (a split of
    a trace larger than memory takes minutes); elsewhere, a line per pass."""

    def __init__(self) -> None:
        self.bar = None
        self.stage: str | None = None

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if stage != self.stage:
            self.close()
            self.stage = stage
            if sys.stderr.isatty():
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=stage, unit="B", unit_scale=True, file=sys.stderr, leave=False)
            else:
                click.echo(stage, err=True)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
