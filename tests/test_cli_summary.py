"""``tracekit summary``, ``--version`` and ``--help`` through the click entry point."""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import real_trace_path

from tracekit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _expected(key: str) -> tuple[str, str, Decimal]:
    """(device name, top kernel by summed GPU time, its total in ms), straight from the JSON."""
    with gzip.open(real_trace_path(key), "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    busy: dict[str, Decimal] = defaultdict(Decimal)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and str(e.get("cat")).lower() == "kernel":
            busy[e["name"]] += Decimal(e["dur"])
    top = max(busy, key=busy.get)
    return doc["deviceProperties"][0]["name"], top, busy[top] / 1000


@pytest.mark.parametrize("key", ["mi300x_decode", "h100_hf", "rtx4080_nanovllm"])
def test_summary_prints_device_and_top_kernel(key):
    device, top, top_ms = _expected(key)
    result = CliRunner().invoke(main, ["summary", str(real_trace_path(key))])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(rf"^device\s+{re.escape(device)}\b", out, re.M)
    lines = out.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("top ") and "kernels by GPU time" in line)
    first = lines[heading + 1]
    # Long kernel names are shortened for the terminal; their start must be there.
    assert top[:80] in first
    assert f"{float(top_ms):.3f} ms" in first


def test_summary_top_option_limits_the_list():
    result = CliRunner().invoke(main, ["summary", "--top", "3", str(real_trace_path("mi300x_decode"))])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    heading = next(i for i, line in enumerate(lines) if "kernels by GPU time" in line)
    listed = [line for line in lines[heading + 1 :] if re.match(r"^\s+\d+\.\d{3} ms", line)]
    assert len(listed) == 3


def test_version_matches_the_package_metadata():
    # The installed distribution's version (pyproject reads it from tracekit/__init__.py at
    # build time): a --version that printed another constant, or a stale install, fails here.
    from importlib.metadata import version as installed_version

    version = installed_version("tracekit")
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"tracekit, version {version}"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_the_summary_command(flag):
    result = CliRunner().invoke(main, [flag])
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage:")
    assert re.search(r"^\s+summary\s+\S", result.stdout, re.M)


def test_summary_help():
    result = CliRunner().invoke(main, ["summary", "--help"])
    assert result.exit_code == 0
    assert "TRACE" in result.stdout and "--top" in result.stdout


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_subcommands_are_imported_only_when_run():
    """`tracekit summary` does not pay for the other commands' imports (Dask, torch, the
    HTML renderer's helpers): the group lists every command, and imports its module on use."""
    import ast
    import subprocess

    code = (
        "import sys, tracekit.cli as c; "
        "print(sorted(m for m in sys.modules if m.startswith('tracekit.cli.'))); "
        "print(c.main.list_commands(None))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "[]"
    assert out[1] == str(
        [
            "collect",
            "report",
            "compare",
            "summary",
            "batch",
            "split",
            "annotate",
            "project",
            "whatif",
            "plan",
            "gpus",
            "models",
            "mcp",
        ]
    )
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    assert re.findall(r"^  (\w+)  ", res.output, flags=re.M) == ast.literal_eval(out[1])


def _blas_threads_after(args: list[str], env_value: str | None) -> tuple[str, bool]:
    """(OPENBLAS_NUM_THREADS once ``tracekit ARGS`` has run in a fresh process, whether numpy
    was loaded before the command was chosen)."""
    import os
    import subprocess

    code = (
        "import os, sys; import tracekit.cli as c; early = 'numpy' in sys.modules\n"
        f"try:\n    c.main({args!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'), early)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    value, early = out.stdout.split()[-2:]
    return value, early == "True"


def test_analysis_commands_load_numpy_with_one_blas_thread():
    """numpy's OpenBLAS would start (and spin) a thread per core in every `tracekit summary`:
    the CLI asks for one before numpy loads, unless the user chose a number, and leaves
    `collect` (the user's model runs there) as it is."""
    assert _blas_threads_after(["gpus"], None) == ("1", False)
    assert _blas_threads_after(["summary", "--help"], None) == ("1", False)
    assert _blas_threads_after(["summary", "--help"], "3") == ("3", False)
    assert _blas_threads_after(["collect", "--help"], None) == ("unset", False)
