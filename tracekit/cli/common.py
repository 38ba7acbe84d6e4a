"""Helpers the subcommands share: reading with progress, output-path rules."""

from __future__ import annotations

import os
import sys

import click

from tracekit.report.output import refuse_overwrite  # noqa: F401  (one rule for every command)
from tracekit.trace import Trace, read_trace

# Below this size a read takes well under a second: no progress display.
_PROGRESS_MIN_BYTES = 20_000_000


def read_with_progress(path: str) -> Trace:
    """Read a trace, showing its stages on stderr when it is big and stderr is a terminal."""
    size = _size(path)
    if size < _PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        return read_trace(path)
    from tqdm import tqdm

    stages = ["reading", "building tables", "linking kernels to launches and ops"]
    with tqdm(total=len(stages), desc=os.path.basename(path), unit="stage", file=sys.stderr, leave=False) as bar:

        def progress(stage: str) -> None:
            bar.set_postfix_str(stage)
            bar.update(1)

        return read_trace(path, progress=progress)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def trace_argument(f):
    return click.argument("trace", type=click.Path(dir_okay=True, file_okay=True, path_type=str))(f)


def human_size(n: int) -> str:
    """A written file's size for the "wrote ..." line."""
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{max(1, round(n / 1e3))} kB"
