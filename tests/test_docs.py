"""The documentation: the README's and the quick start's commands run as written, the site builds
strictly, and the example notebook runs.

The shell commands run in a temporary folder laid out like the repository's neighbourhood: the
checkout's `sample_traces/` linked in, and `../shared` beside it when the checkout has one, so
the paths the docs show resolve as they would for a reader at the repository root.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DOCS_WITH_COMMANDS = [ROOT / "README.md", ROOT / "docs" / "quickstart.md"]
TRACEKIT = Path(sys.executable).parent / "tracekit"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Commands shown in those shell blocks that this test does not run, each with the reason.
NOT_RUN = {
    "make demo": "installs a virtual environment and torch; `tracekit collect --threads 1` and "
    "`tracekit report` of a sample trace, which it runs, are run here",
    "make test": "is the suite this test is part of: it would recurse",
    "make docs": "is test_docs_build_strictly below, run here as mkdocs build --strict",
    "make bench": "the benchmarks take minutes and print figures, they check nothing here",
    "make fuzz FUZZ_SECONDS=300": "a five-minute campaign; CI runs a shorter one of its own",
}

_FENCE = re.compile(r"^```(\w*)\s*$")
_EXIT = re.compile(r"exit(?:s| status)?\s+(\d+)")


def shell_commands(path: Path) -> list[tuple[str, int]]:
    """(command, expected exit status) for each command in the file's ```bash, ```sh and
    ```console blocks. Continuation lines are joined, comments dropped, `$ ` prompts removed;
    a comment saying "exit N" / "exits N" / "exit status N" sets the expected status (default 0)."""
    out: list[tuple[str, int]] = []
    lang = None
    pending = ""
    for line in path.read_text().splitlines():
        m = _FENCE.match(line)
        if m:
            lang = None if lang is not None else m.group(1)
            pending = ""
            continue
        if lang not in ("bash", "sh", "console"):
            continue
        if lang == "console":
            if not line.startswith("$ ") and not pending:
                continue  # output lines
            line = line[2:] if line.startswith("$ ") else line
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = pending + line
        pending = ""
        words = shlex.split(text, comments=True)
        if not words:
            continue
        comment = text[len(text.split("#", 1)[0]) :] if "#" in text else ""
        m = _EXIT.search(comment)
        out.append((shlex.join(words), int(m.group(1)) if m else 0))
    return out


def _all_commands() -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    for path in DOCS_WITH_COMMANDS:
        for cmd, status in shell_commands(path):
            seen.setdefault(cmd, status)  # `tracekit collect` is shown twice: run once
    return list(seen.items())


def test_the_parser_reads_the_blocks_as_a_reader_would(tmp_path):
    """Bug caught: a parser that missed continuation lines, kept comments or read ```python
    blocks, so that the commands it ran were not the ones the docs show."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```bash\ntracekit report a.json \\\n    --format json   # a comment\nmake test  # exit status 2\n```\n"
        "```python\ntracekit.analyze(t)\n```\n"
        "```console\n$ tracekit gpus\nGPU  key\n```\n"
    )
    assert shell_commands(doc) == [("tracekit report a.json --format json", 0), ("make test", 2), ("tracekit gpus", 0)]


def test_the_readme_is_a_landing_page_whose_first_commands_set_up():
    """Bug caught: the README growing back into a manual, or another command put before
    `make demo` and `make test` (CI's .ci/run runs `make test`, the README's test command)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    first = shell_commands(ROOT / "README.md")[:2]
    assert [c for c, _ in first] == ["make demo", "make test"]


def test_every_command_in_the_readme_and_quick_start_is_run_or_excused():
    """Bug caught: a command added to the docs that this test silently skips (a `make` target
    not in NOT_RUN, or a tool other than tracekit), so nothing checks that it works."""
    cmds = [c for c, _ in _all_commands()]
    assert any(c.startswith("tracekit ") for c in cmds)
    strays = [c for c in cmds if not c.startswith("tracekit ") and c not in NOT_RUN]
    assert not strays, f"commands neither run nor excused in NOT_RUN: {strays}"


def test_the_readme_links_resolve():
    """Bug caught: a README link to a docs page that moved or was never written (MkDocs checks
    the site's own links, not the README's)."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert targets
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (ROOT / t).exists()]
    assert not missing, missing


def test_every_docs_page_is_in_the_nav():
    """Bug caught: a page under docs/ that the site builds but no menu reaches (MkDocs only says
    so at INFO level, which --strict lets pass)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    pages += [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs" / "examples").glob("*.py")]
    missing = [p for p in pages if not re.search(rf":\s*{re.escape(p)}\s*$", nav, re.M)]
    assert not missing, missing


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory):
    """A folder where the docs' relative paths resolve: sample_traces/ here, ../shared beside."""
    base = tmp_path_factory.mktemp("docs-commands")
    work = base / "repo"
    work.mkdir()
    (work / "sample_traces").symlink_to(ROOT / "sample_traces")
    if SHARED.is_dir():
        (base / "shared").symlink_to(SHARED)
    return work


@pytest.mark.parametrize("cmd,status", _all_commands(), ids=[c for c, _ in _all_commands()])
def test_a_documented_command_runs_as_written(cmd, status, reader_folder):
    """Bug caught: a command in the README or the quick start that fails as written (a renamed
    option, a sample trace that moved, a path that does not resolve, a wrong exit status)."""
    if cmd in NOT_RUN:
        pytest.skip(f"`{cmd}` is not run: {NOT_RUN[cmd]}")
    if "../shared/" in cmd and not SHARED.is_dir():
        if IN_CI:
            pytest.fail(f"`{cmd}` needs ../shared/traces, which CI lays beside the checkout")
        pytest.skip(f"`{cmd}` reads ../shared/traces, which is not beside this checkout")
    words = shlex.split(cmd)
    env = dict(os.environ, TRACEKIT_CACHE_DIR=str(reader_folder.parent / "cache"), PYTHONUNBUFFERED="1")
    start = time.monotonic()
    r = subprocess.run(
        [str(TRACEKIT), *words[1:]], cwd=reader_folder, env=env, capture_output=True, text=True, timeout=300
    )
    took = time.monotonic() - start
    assert r.returncode == status, (
        f"`{cmd}` exited {r.returncode} (the docs say {status}) after {took:.1f} s\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    )


def test_docs_build_strictly(tmp_path):
    """Bug caught: a broken link, a missing page, a docstring mkdocstrings cannot read, a
    notebook cell that fails, a CLI reference that the lazily loading command group left
    without its subcommands or that prints click's UNSET sentinel as a default, or a theme that
    fetches web fonts. Runs under CI=true whatever is installed (it fails there without
    MkDocs, since the test extra holds the docs extra)."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("MkDocs is not installed, but CI must build the docs (the test extra holds tracekit[docs])")
        pytest.skip("MkDocs is not installed (pip install -e '.[docs]'); CI runs this test")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "WARNING -" not in r.stderr, r.stderr[-3000:]

    from tracekit.cli import COMMANDS

    cli = (site / "cli" / "index.html").read_text()
    missing = [name for name in COMMANDS if f'id="tracekit-{name}"' not in cli]
    assert not missing, f"the CLI reference lacks {missing}"
    assert cli.count("--help") >= len(COMMANDS)  # each command's options table, not only its name
    # An option without a default shows none, not click's sentinel (docs/_hooks/cli_defaults.py).
    assert "Sentinel." not in cli
    assert "fonts.googleapis" not in cli  # the site reads offline: no web fonts

    notebook = (site / "examples" / "analysis" / "index.html").read_text()
    assert "jp-OutputArea" in notebook and "Traceback" not in notebook  # executed, without errors

    api = (site / "api" / "index.html").read_text()
    for name in ("trace.reader.read_trace", "analysis.analyze.analyze", "analysis.model.Analysis"):
        assert f'id="tracekit.{name}"' in api, name


def test_the_example_notebook_runs(tmp_path):
    """Bug caught: the notebook broken by a change to tracekit (a renamed column, key or
    function) while the docs build is skipped, e.g. on a machine without MkDocs."""
    env = dict(os.environ, TRACEKIT_CACHE_DIR=str(tmp_path / "cache"), MPLBACKEND="Agg")
    r = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "analysis.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    if SHARED.is_dir():
        assert "rtx3090_vllm" in r.stdout  # the shared trace, not the fallback
    else:
        assert "using the sample trace instead" in r.stdout
