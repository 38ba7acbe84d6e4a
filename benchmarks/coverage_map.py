"""pytest plugin for benchmarks/mutation.py: which tests execute which lines of tracekit.

    TRACEKIT_COVERAGE_MAP=/tmp/map.json python -m pytest -p coverage_map tests   # benchmarks/ on sys.path

With the variable set, the run measures tracekit's lines with coverage.py, one coverage context
per test (its node id, setup and teardown included), and at the end writes a JSON map:
``{"tests": [{"id", "seconds", "outcome"}, ...], "lines": {module: {line: [test index, ...]}}}``.
Without the variable the plugin does nothing. It is the selection mutmut makes ("the tests that
cover the mutated line"), built once per campaign from the whole suite, so that a mutant meets
every test that runs its line and not only the files a hand-kept list names.

What it cannot see: lines run only in a child process (a test that runs ``tracekit`` as a
subprocess, Dask workers) and lines run at import, which happen once, in whichever test or
collection step imported the module first. mutation.py keeps its hand-kept lists for those.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

_state: dict = {}


def pytest_configure(config):
    out = os.environ.get("TRACEKIT_COVERAGE_MAP")
    if not out:
        return
    import coverage

    # The package to measure: tracekit, or another for this plugin's own test.
    source = os.environ.get("TRACEKIT_COVERAGE_SOURCE", "tracekit")
    cov = coverage.Coverage(data_file=None, source=[source], config_file=False)
    cov.start()
    _state.update(cov=cov, out=Path(out), root=Path(config.rootpath), tests={})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if "cov" not in _state:
        yield
        return
    _state["cov"].switch_context(item.nodeid)
    t0 = time.perf_counter()
    _state["tests"].setdefault(item.nodeid, {"outcome": "passed"})
    yield
    _state["tests"][item.nodeid]["seconds"] = round(time.perf_counter() - t0, 4)
    _state["cov"].switch_context("")


def pytest_runtest_logreport(report):
    # A test counts as selectable only if every phase passed: a failing or skipped test would
    # "kill" or ignore every mutant it was given.
    if "cov" in _state and (report.failed or report.skipped):
        _state["tests"].setdefault(report.nodeid, {})["outcome"] = "failed" if report.failed else "skipped"


def pytest_unconfigure(config):
    cov = _state.pop("cov", None)
    if cov is None:
        return
    cov.stop()
    data = cov.get_data()
    tests = _state["tests"]
    index = {nodeid: i for i, nodeid in enumerate(tests)}
    lines = {}
    for filename in data.measured_files():
        try:
            module = Path(filename).resolve().relative_to(_state["root"].resolve()).as_posix()
        except ValueError:
            continue
        by_line = {}
        for line, contexts in data.contexts_by_lineno(filename).items():
            ids = sorted(index[c] for c in contexts if c in index)
            if ids:
                by_line[str(line)] = ids
        lines[module] = by_line
    _state["out"].write_text(json.dumps({"tests": [{"id": k, **v} for k, v in tests.items()], "lines": lines}))
