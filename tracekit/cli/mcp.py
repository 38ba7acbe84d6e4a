"""``tracekit mcp [--allow DIR]...``: serve tracekit's analyses to a coding agent over MCP (stdio)."""

from __future__ import annotations

import sys

import click

from tracekit.errors import TracekitError


@click.command("mcp")
@click.option(
    "--allow",
    multiple=True,
    metavar="DIR",
    type=click.Path(exists=True, file_okay=False, dir_okay=True, path_type=str),
    help="A folder whose traces the tools may read (repeatable; default: the current folder). Paths "
    "are resolved, symlinks and '..' included, before they are checked.",
)
@click.option(
    "--cache",
    "cache_size",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    metavar="N",
    help="Analyses kept in memory (each trace is read once while unchanged).",
)
def command(allow: tuple[str, ...], cache_size: int) -> None:
    """Serve tracekit over the Model Context Protocol on stdin/stdout, for a coding agent to start
    (Claude Code: claude mcp add tracekit -- tracekit mcp --allow ./traces). Tools: summary, steps,
    kernels, idle, explain, compare, project; each answers compact JSON. The session ends when the
    client closes stdin."""
    try:
        import mcp  # noqa: F401  (the SDK is an extra)
    except ImportError:
        raise TracekitError("tracekit mcp needs the MCP SDK: pip install 'tracekit[mcp]'") from None
    if sys.stdin.isatty():
        click.echo(
            "tracekit mcp speaks MCP on stdin/stdout: an agent starts it (see docs/mcp.md, "
            "'Agents (MCP)'); Ctrl-D ends it.",
            err=True,
        )
    from tracekit.serve.server import serve

    serve(list(allow), cache_size)
