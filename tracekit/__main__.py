"""``python -m tracekit``: the same CLI as the ``tracekit`` command (handy in a venv without its scripts on PATH)."""

from tracekit.cli import main

main()
