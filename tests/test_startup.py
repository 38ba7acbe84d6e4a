"""Start-up: what each command imports, and what that costs against pandas' own import.

Every `tracekit` process pays its imports before it reads a byte: an MCP tool call that starts
a process, a `batch` worker, a CI gate. `--help` and `gpus` need neither pandas nor numpy;
`summary` needs pandas (the trace's tables are DataFrames) and Jinja2 (its text is a template)
but not the HTML renderer and its charts, Bokeh, Dask, torch or the other commands. The imports are read from
``python -X importtime`` in a fresh process, the times as a ratio to a bare
``python -c "import pandas"`` measured in the same test, so a slower CI machine moves both.
benchmarks/bench_startup.py prints the same figures.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import statistics
import subprocess
import sys
import time

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import COMMANDS, main

# Top-level packages no command below may import: the heavy optional ones and the ones only
# other commands use.
NEVER = {"bokeh", "dask", "distributed", "torch", "scipy", "mcp", "hta", "matplotlib", "tqdm"}
# What each command may import beyond the interpreter's own start-up and the standard library
# (third-party top-level packages), and of tracekit, which modules it must not import.
ALLOWED_HELP = {"click", "tracekit"}
ALLOWED_GPUS = {"click", "tracekit", "msgspec", "typing_extensions"}
# summary: pandas and whatever `import pandas` brings on this machine (numpy, pyarrow, dateutil
# ... measured), plus these.
ALLOWED_SUMMARY = {"click", "tracekit", "msgspec", "typing_extensions", "jinja2", "markupsafe", "isal", "zstandard"}
SUMMARY_MUST_NOT = (
    "tracekit.report.render_html",
    "tracekit.report.render_md",
    "tracekit.report.charts",
    "tracekit.report.compare",
    "tracekit.collect",
    "tracekit.compare",
    "tracekit.whatif",
    "tracekit.batch",
    "tracekit.serve",
    "tracekit.analysis.hta",
    "tracekit.cli.report",
)

# CPU time per command over a bare `import pandas` (median of RUNS, interleaved). Measured where
# they were set (2 cores, benchmarks/bench_startup.py): --help 0.13x (1.09x when it imported
# every command), gpus 0.20x, summary 1.48x (pandas, numpy and pyarrow are most of it; the rest is
# tracekit's own imports, the analysis and the template). The budgets leave room for slower CIs.
BUDGET = {"help": 0.4, "gpus": 0.6, "summary": 2.0}
RUNS = 5


def _env() -> dict[str, str]:
    # One BLAS thread, as `tracekit` sets it for itself, so that the pandas baseline does not
    # count OpenBLAS's spinning threads; bytecode written, so that a stale .pyc is compiled once
    # (the warm-up run) and not in every timed run; no cache of read traces, so that every run
    # is a first look (a second look that skips pandas is the cache's own test).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TRACEKIT_NO_CACHE": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _imported(argv: list[str]) -> set[str]:
    """Every module ``python -X importtime ARGV`` imported (dotted names)."""
    names = set()
    for line in _run(["-X", "importtime", *argv]).stderr.splitlines():
        if line.startswith("import time:"):
            own, _, name = line[len("import time:") :].split("|")
            if own.strip().isdigit():
                names.add(name.strip())
    assert "encodings" in names, "no -X importtime lines read"
    return names


def _tops(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> str:
    """A prefill step and three decode steps of four GEMMs each, shapes recorded (1 kB gzipped)."""
    from kineto import Doc

    d = Doc()
    t = 0.0
    for phase, tokens in (("prefill", 128), ("decode", 1), ("decode", 1), ("decode", 1)):
        d.annotation(f"tracekit::{phase} bs=1 tokens={tokens} kv=128", t, 400.0)
        for i in range(4):
            ts = t + 10.0 + 80.0 * i
            ext = d.op("aten::mm", ts - 1.0, 4.0, dims=[[tokens, 1024], [1024, 1024]], types=["c10::BFloat16"] * 2)
            d.kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", ts, ts + 5.0, 40.0, ext=ext)
        t += 500.0
    return str(d.write(tmp_path_factory.mktemp("startup") / "small.json.gz"))


@pytest.fixture(scope="module")
def baseline() -> set[str]:
    """What the interpreter imports for nothing (site, .pth hooks): never the command's doing."""
    return _tops(_imported(["-c", "pass"]))


def _third_party(names: set[str], baseline: set[str]) -> set[str]:
    # -X importtime also lists imports that failed (pickle tries Jython's `org`): a name that
    # cannot be found here was not loaded there.
    return {
        t
        for t in _tops(names) - baseline
        if t not in sys.stdlib_module_names and not t.startswith("_") and importlib.util.find_spec(t)
    }


def test_help_lists_every_command_without_importing_one(baseline):
    names = _imported(["-m", "tracekit", "--help"])
    assert _third_party(names, baseline) <= ALLOWED_HELP, _third_party(names, baseline) - ALLOWED_HELP
    assert not {n for n in names if n.startswith("tracekit.cli.")}, "--help imported a command's module"
    assert not _tops(names) & (NEVER | {"numpy", "pandas", "jinja2"})


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_commands_help_needs_no_pandas(command):
    # `tracekit report --help` builds the command's options, not its work.
    names = _imported(["-m", "tracekit", command, "--help"])
    assert not _tops(names) & (NEVER | {"numpy", "pandas", "jinja2"}), sorted(_tops(names) & {"numpy", "pandas"})


def test_gpus_imports_no_pandas_nor_numpy(baseline):
    names = _imported(["-m", "tracekit", "gpus"])
    assert _third_party(names, baseline) <= ALLOWED_GPUS, _third_party(names, baseline) - ALLOWED_GPUS
    assert not _tops(names) & (NEVER | {"numpy", "pandas", "jinja2"})


def test_summary_imports_pandas_and_no_renderer_it_does_not_print_with(baseline, small_trace):
    names = _imported(["-m", "tracekit", "summary", small_trace])
    pandas_brings = _third_party(_imported(["-c", "import pandas"]), baseline)
    extra = _third_party(names, baseline) - pandas_brings - ALLOWED_SUMMARY
    assert not extra, f"summary imports {sorted(extra)}"
    assert not _tops(names) & NEVER
    wrong = sorted(n for n in names if n.startswith(SUMMARY_MUST_NOT))
    assert not wrong, wrong


def _cpu_seconds(argv: list[str]) -> float:
    """The child's user + system CPU (wall time where the platform has no rusage)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        t = time.perf_counter()
        _run(argv)
        return time.perf_counter() - t
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    _run(argv)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.slow
def test_start_up_stays_within_its_budget_of_a_bare_pandas_import(small_trace):
    cases = {
        "pandas": ["-c", "import pandas"],
        "help": ["-m", "tracekit", "--help"],
        "gpus": ["-m", "tracekit", "gpus"],
        "summary": ["-m", "tracekit", "summary", small_trace],
    }
    for argv in cases.values():  # warm-up: bytecode written, files in the page cache
        _run(argv)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(RUNS):  # interleaved, so that a burst of load falls on every case alike
        for key, argv in cases.items():
            times[key].append(_cpu_seconds(argv))
    pandas = statistics.median(times.pop("pandas"))
    ratios = {k: statistics.median(v) / pandas for k, v in times.items()}
    over = {k: f"{r:.2f}x (budget {BUDGET[k]}x)" for k, r in ratios.items() if r > BUDGET[k]}
    assert not over, f"start-up over budget against `import pandas` ({pandas * 1e3:.0f} ms of CPU): {over}"


# --- the group's --help names each command by its own first sentence ---------------------------


@pytest.mark.parametrize("name", list(COMMANDS))
def test_listed_sentence_is_the_commands_own(name):
    # COMMANDS holds copies, so that --help imports no command; a docstring edited without its
    # copy would list stale help.
    command = importlib.import_module(f"tracekit.cli.{name}").command
    assert command.name == name
    assert COMMANDS[name] == command.get_short_help_str(limit=10**6), (
        f"copy {name}'s first sentence into COMMANDS (tracekit/cli/__init__.py)"
    )
    assert not command.hidden and not command.deprecated and command.short_help is None


def test_group_help_reads_as_if_it_had_imported_every_command():
    class InOrder(click.Group):  # click lists a group's commands sorted; tracekit in COMMANDS' order
        def list_commands(self, ctx):
            return list(COMMANDS)

    real = InOrder("tracekit", commands=[importlib.import_module(f"tracekit.cli.{n}").command for n in COMMANDS])
    fresh = type(main)("tracekit", params=main.params)  # tracekit's group with no command loaded yet
    for width in (50, 80, 120):
        expected = CliRunner().invoke(real, ["--help"], terminal_width=width).output.split("Commands:")[1]
        assert CliRunner().invoke(fresh, ["--help"], terminal_width=width).output.split("Commands:")[1] == expected
        assert CliRunner().invoke(main, ["--help"], terminal_width=width).output.split("Commands:")[1] == expected
    assert not fresh.commands, "listing loaded a command"
