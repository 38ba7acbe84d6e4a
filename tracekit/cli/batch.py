"""``tracekit batch PATHS... [-o FILE]``: many traces analysed in parallel into one table."""

from __future__ import annotations

import shlex
import sys

import click

from tracekit.cli.common import human_size
from tracekit.errors import TracekitError

DEFAULT = "reports/fleet.html"
STREAM_FORMATS = ("csv", "json")


@click.command("batch")
@click.argument("paths", nargs=-1, required=True, metavar="PATHS...")
@click.option("-o", "--output", "outputs", multiple=True, metavar="FILE",
              help=f"Where to write, by extension: .csv, .parquet, .json or .html (the fleet page); repeat for "
                   f"several (default: {DEFAULT}); '-' writes CSV (or --format json) to stdout.")
@click.option("-f", "--format", "fmt", type=click.Choice(STREAM_FORMATS), help="The format of '-o -' (default csv).")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), metavar="N",
              help="Worker processes (default: the CPUs, at most 8); on --dask local, the cluster's workers.")
@click.option("--dask", metavar="local|ADDRESS",
              help="Run on a Dask cluster: 'local' starts one on this machine, tcp://HOST:PORT uses a running "
                   "scheduler whose workers have tracekit installed (needs tracekit[batch]).")
@click.pass_context
def command(ctx: click.Context, paths: tuple[str, ...], outputs: tuple[str, ...], fmt: str | None, force: bool,
            jobs: int | None, dask: str | None) -> None:
    """Analyse every trace in PATHS (files, folders, globs) into one table, one row per trace:
    device, model, run kind, steps and step times per phase, tokens/s, MFU/MBU, idle share and
    its top cause, the top finding, and a status with the error of traces that failed.

    A folder holding the ranks of one run is one trace; a folder of unrelated traces gives a row
    per file. A trace that fails is a row with its error, never the end of the batch. Exit
    status: 0 when every trace was analysed, 1 when some rows are errors (the table is still
    written), 2 for bad usage (no trace matched, an output that cannot be written)."""
    from tracekit.batch import analyse_items, expand
    from tracekit.batch.executors import default_jobs
    from tracekit.report import fleet as render

    targets = _targets(outputs or (DEFAULT,), fmt, force, made_default=not outputs)
    items = expand(list(paths))  # a path that matches nothing fails here, before any work
    jobs = jobs or default_jobs()
    to_stdout = any(path is None for _, path, _ in targets)
    say = (lambda m: click.echo(m, err=True)) if to_stdout else click.echo
    bar = _bar(sum(len(i.files) or 1 for i in items))
    try:
        fleet = analyse_items(items, jobs=jobs, dask=dask, progress=bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    data = fleet.to_dict()
    for renderer, path, replacing in targets:
        size = render.write_fleet(data, renderer, path, make_parent=not outputs)
        if path is not None:
            say(f"{'replaced' if replacing and not outputs else 'wrote'} {path} ({human_size(size)})")
    pages = [p for r, p, _ in targets if p is not None and r.name == "html"]
    ok = len(fleet.rows) - fleet.errors
    say(f"{len(fleet.rows)} trace(s) on {fleet.executor} in {fleet.seconds} s: {ok} analysed, {fleet.errors} "
        f"error(s){' (see the status and error columns)' if fleet.errors else ''}")
    if pages:
        say(f"next: open {shlex.quote(pages[0])} in a browser (it works offline); every column: "
            f"tracekit batch ... -o fleet.csv")
    if fleet.errors:
        ctx.exit(1)


class _Bar:
    """tqdm on stderr, moved to ``done`` of ``total`` as rows complete."""

    def __init__(self, total: int):
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc="batch", unit="trace", file=sys.stderr)

    def update(self, done: int, total: int) -> None:
        if self._bar.total != total:
            self._bar.total = total
        self._bar.n = done
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def _bar(total: int) -> _Bar | None:
    return _Bar(total) if sys.stderr.isatty() else None


def _targets(outputs: tuple[str, ...], fmt: str | None, force: bool, made_default: bool):
    """(renderer, path or None for stdout, replacing) per ``-o``, each checked before the slow work."""
    from tracekit.report import fleet as render
    from tracekit.report.output import check_output, is_stream, refuse_folder

    if fmt and "-" not in outputs:
        raise TracekitError("--format chooses the format of '-o -' only; a file's extension chooses its own")
    out, seen = [], set()
    for o in outputs:
        if o in seen:
            raise TracekitError(f"-o {o} is given twice")
        seen.add(o)
        if o == "-":
            out.append((render.get_renderer(fmt or "csv"), None, False))
            continue
        refuse_folder(o)
        # A stream target (/dev/null) has no extension: CSV.
        renderer = render.choose(None, None if is_stream(o) else o, default="csv")
        render.check_parquet(renderer.name)
        out.append((renderer, o, check_output(o, force=force, ours=made_default)))
    if sum(p is None for _, p, _ in out) > 1:
        raise TracekitError("-o - is given twice")
    return out
