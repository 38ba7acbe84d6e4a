"""``tracekit batch PATHS... [-o FILE]``: many traces analysed in parallel into one table."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import TYPE_CHECKING

import click

from tracekit.cli.common import human_size
from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.report.base import Renderer

DEFAULT = "reports/fleet.html"
STREAM_FORMATS = ("csv", "json")


@click.command("batch")
@click.argument("paths", nargs=-1, required=True, metavar="PATHS...")
@click.option(
    "-o",
    "--output",
    "outputs",
    multiple=True,
    metavar="FILE",
    help=f"Where to write, by extension: .csv, .parquet, .json or .html (the fleet page); repeat for "
    f"several (default: {DEFAULT}); '-' writes CSV (or --format json) to stdout.",
)
@click.option("-f", "--format", "fmt", type=click.Choice(STREAM_FORMATS), help="The format of '-o -' (default csv).")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    metavar="N",
    help="Worker processes (default: the CPUs, at most 8); on --dask local, the cluster's workers.",
)
@click.option(
    "--dask",
    metavar="local|ADDRESS",
    help="Run on a Dask cluster: 'local' starts one on this machine, tcp://HOST:PORT uses a running "
    "scheduler whose workers have tracekit installed (needs tracekit[batch]).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Seconds one trace may take; past it its worker is stopped and its row says timeout (default: "
    "600 s plus 10 s per MB of trace file, compressed; 0: no limit).",
)
@click.pass_context
def command(
    ctx: click.Context,
    paths: tuple[str, ...],
    outputs: tuple[str, ...],
    fmt: str | None,
    force: bool,
    jobs: int | None,
    dask: str | None,
    timeout: float | None,
) -> None:
    """Analyse every trace in PATHS (files, folders, globs) into one table, one row per trace:
    device, model, run kind, steps and step times per phase, tokens/s, MFU/MBU, idle share and
    its top cause, the top finding, and a status with the error of traces that failed.

    A folder holding the ranks of one run is one trace; a folder of unrelated traces gives a row
    per file. A trace that fails is a row with its error, one past --timeout a row saying so,
    never the end of the batch. Rows reach the CSV and JSON outputs as they finish (with only
    HTML or Parquet asked for, NAME.partial.csv beside the first), so a batch stopped by Ctrl-C,
    SIGTERM or a kill leaves the rows it finished. Exit status: 0 when every trace was analysed,
    1 when some rows are errors or timeouts (the table is still written), 2 for bad usage (no
    trace matched, an output that cannot be written), 130/143 when interrupted (SIGINT/SIGTERM)."""
    from tracekit.batch import Interrupted, analyse_items, expand
    from tracekit.batch.executors import default_jobs
    from tracekit.report import fleet as render

    targets = _targets(outputs or (DEFAULT,), fmt, force, made_default=not outputs)
    items = expand(list(paths))  # a path that matches nothing fails here, before any work
    jobs = jobs or default_jobs()
    to_stdout = any(path is None for _, path, _ in targets)
    say = (lambda m: click.echo(m, err=True)) if to_stdout else click.echo
    journals, scratch = _journals(targets, make_parent=not outputs)
    bar = _bar(sum(len(i.files) or 1 for i in items))
    stopped_by: list[int] = []
    previous = _on_sigterm(stopped_by)
    try:
        fleet = analyse_items(
            items,
            jobs=jobs,
            dask=dask,
            progress=bar.update if bar else None,
            timeout=timeout,
            on_row=lambda row: [j.add(row) for j in journals],
        )
    except Interrupted as e:
        if bar:
            bar.close()
            bar = None
        _interrupted(e, targets, journals, scratch, say)
        ctx.exit(128 + (stopped_by[0] if stopped_by else signal.SIGINT))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        for j in journals:
            j.close()
        if bar:
            bar.close()
    data = fleet.to_dict()
    for renderer, path, replacing in targets:
        size = render.write_fleet(data, renderer, path, make_parent=not outputs)
        if path is not None:
            say(f"{'replaced' if replacing and not outputs else 'wrote'} {path} ({human_size(size)})")
    pages = [p for r, p, _ in targets if p is not None and r.name == "html"]
    if scratch:  # the whole table is written: the rows kept while it ran have done their job
        os.remove(scratch)
    ok = len(fleet.rows) - fleet.errors - fleet.timeouts
    late = f", {fleet.timeouts} timed out" if fleet.timeouts else ""
    say(
        f"{len(fleet.rows)} trace(s) on {fleet.executor} in {fleet.seconds} s: {ok} analysed, {fleet.errors} "
        f"error(s){late}{' (see the status and error columns)' if fleet.errors or fleet.timeouts else ''}"
    )
    if pages:
        say(
            f"next: open {shlex.quote(pages[0])} in a browser (it works offline); every column: "
            f"tracekit batch ... -o fleet.csv"
        )
    if fleet.errors or fleet.timeouts:
        ctx.exit(1)


def _journals(targets, make_parent: bool):
    """Where rows go as they finish: every CSV and JSON file output; with none (HTML or
    Parquet only), a scratch CSV beside the first file output, removed once the whole table is
    written. Standard output and devices get the table at the end only."""
    from tracekit import __version__
    from tracekit.batch.journal import CsvJournal, JsonJournal, journal_path
    from tracekit.report.output import is_stream

    files = [(r.name, p) for r, p, _ in targets if p is not None and not is_stream(p)]
    if make_parent and files:
        os.makedirs(os.path.dirname(os.path.abspath(files[0][1])), exist_ok=True)
    head = {"schema_version": 1, "kind": "tracekit.fleet", "tracekit_version": __version__}
    journals = [
        CsvJournal(p) if name == "csv" else JsonJournal(p, head) for name, p in files if name in ("csv", "json")
    ]
    if journals or not files:
        return journals, None
    scratch = journal_path(files[0][1])
    return [CsvJournal(scratch)], scratch


def _on_sigterm(stopped_by: list[int]):
    """SIGTERM (a scheduler's or CI's stop) as Ctrl-C is: the batch stops and keeps its rows.
    Returns the handler it replaced (None when signals cannot be set here: not the main thread)."""

    def stop(signum, _frame):
        stopped_by.append(signum)
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:
        return None


def _interrupted(e, targets, journals, scratch, say) -> None:
    """Leave the finished rows of an interrupted batch in input order in the files that held
    them as they finished; the page and Parquet, which would look whole, are not written."""
    from tracekit.report import fleet as render

    for j in journals:
        j.close()
    data = e.fleet.to_dict()
    kept = []
    for j in journals:
        render.write_fleet(data, render.get_renderer(j.kind), j.path)
        kept.append(j.path)
    skipped = [p if p is not None else "standard output" for r, p, _ in targets if p not in kept]
    rows = len(e.fleet.rows)
    where = f": {'their rows are' if rows != 1 else 'its row is'} in {', '.join(kept)}" if kept and rows else ""
    say(
        f"interrupted after {rows} of {e.total} trace(s){where}"
        f"{'; not written: ' + ', '.join(skipped) + ' (a batch that finishes writes them)' if skipped else ''}"
    )


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


def _targets(
    outputs: tuple[str, ...], fmt: str | None, force: bool, made_default: bool
) -> list[tuple[Renderer, str | None, bool]]:
    """(renderer, path or None for stdout, replacing) per ``-o``, each checked before the slow work."""
    from tracekit.report import fleet as render
    from tracekit.report.output import check_output, is_stream, refuse_folder

    if fmt and "-" not in outputs:
        raise TracekitError("--format chooses the format of '-o -' only; a file's extension chooses its own")
    out: list[tuple[Renderer, str | None, bool]] = []
    seen = set()
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
