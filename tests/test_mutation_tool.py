"""benchmarks/mutation.py's choice of tests: the coverage map and the statement a mutant sits in.

The campaign's kill rate is only as good as the tests each mutant meets; these check the two
pieces that choose them on inputs whose answer is read off by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

mutation = pytest.importorskip("mutation")

SOURCE = """import math

@staticmethod
def f(a, b=2):
    if a > 1 and \\
       b < 3:
        return (a +
                b)
    elif a < 0:
        y = 1
    return 0

K = 5
"""


@pytest.mark.parametrize(
    "pos, lines",
    [
        ((5, 10), [5, 6]),  # the condition's first line: the if header, both of its lines, not the body
        ((6, 7), [5, 6]),  # its continuation line: the same header
        ((8, 16), [7, 8]),  # inside a two-line return: the whole statement
        ((9, 9), [9]),  # an elif is its own header
        ((3, 1), list(range(3, 12))),  # a decorator runs at import: the tests that call the body see it
        ((4, 11), list(range(3, 12))),  # so does a default
        ((13, 4), [13]),  # a module-level constant: its own line
    ],
)
def test_statement_lines_are_the_innermost_statement_or_its_header(pos, lines):
    # Bug caught: taking the mutant's own line misses a statement whose execution coverage records
    # on its first line; taking a whole if (body included) is right too, but a decorator's own
    # line is executed only at import and would select no test at all.
    assert list(mutation.statement_lines(SOURCE, *pos)) == lines


def test_covering_tests_skip_failures_and_listed_files_and_keep_to_the_budget():
    # Bug caught: a failing test in the selection "kills" every mutant; a listed file run twice
    # doubles a survivor's cost; a budget overrun makes a sample take hours.
    data = {
        "tests": [
            {"id": "tests/a.py::slow", "outcome": "passed", "seconds": 50.0},
            {"id": "tests/a.py::quick", "outcome": "passed", "seconds": 1.0},
            {"id": "tests/b.py::broken", "outcome": "failed", "seconds": 0.5},
            {"id": "tests/c.py::listed", "outcome": "passed", "seconds": 0.1},
            {"id": "tests/a.py::middle", "outcome": "passed", "seconds": 9.0},
        ],
        "lines": {"pkg/m.py": {"2": [0, 1, 2, 3, 4], "3": [1]}},
    }

    cmap = mutation.CoverageMap(data, Path("/nonexistent"))
    cmap.sources["pkg/m.py"] = "x = 1\ny = 2\nz = 3\n"
    m = mutation.Mutant("pkg/m.py", "op", 0, 2, 4, "", "y = 2")
    chosen, total = cmap.covering(m, {"tests/c.py"}, budget=20.0)
    assert total == 3  # quick, middle, slow: passing and not in a listed file
    assert [t["id"] for t in chosen] == ["tests/a.py::quick", "tests/a.py::middle"]  # 1 + 9 <= 20 < 1 + 9 + 50
    m3 = mutation.Mutant("pkg/m.py", "op", 0, 3, 0, "", "z = 3")
    assert [t["id"] for t in cmap.covering(m3, set(), budget=20.0)[0]] == ["tests/a.py::quick"]


def test_the_coverage_plugin_maps_each_line_to_the_tests_that_ran_it(tmp_path):
    # A toy package and three tests whose lines are known by reading them.
    # Bug caught: contexts not switched per test (every line would belong to the first test, or to
    # none), or a failing test written down as passing (it would then kill every mutant).
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text("")
    (tmp_path / "toy" / "mod.py").write_text(
        "def sign(x):\n"  # 1
        "    if x > 0:\n"  # 2
        "        return 'pos'\n"  # 3
        "    return 'neg'\n"  # 4
        "\n"
        "def other():\n"  # 6
        "    return 1\n"
    )  # 7
    (tmp_path / "test_toy.py").write_text(
        "from toy.mod import sign, other\n"
        "def test_pos():\n    assert sign(1) == 'pos'\n"
        "def test_neg():\n    assert sign(-1) == 'neg'\n"
        "def test_other_fails():\n    assert other() == 2\n"
    )
    out = tmp_path / "map.json"
    env = {
        **os.environ,
        "TRACEKIT_COVERAGE_MAP": str(out),
        "TRACEKIT_COVERAGE_SOURCE": "toy",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT / 'benchmarks'}",
    }
    pytest.importorskip("coverage")
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "coverage_map", "-p", "no:cacheprovider", "test_toy.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    d = json.loads(out.read_text())
    names = [t["id"].split("::")[1] for t in d["tests"]]
    assert names == ["test_pos", "test_neg", "test_other_fails"]
    assert [t["outcome"] for t in d["tests"]] == ["passed", "passed", "failed"]
    by_line = {int(k): sorted(names[i] for i in v) for k, v in d["lines"]["toy/mod.py"].items()}
    assert by_line[2] == ["test_neg", "test_pos"]
    assert by_line[3] == ["test_pos"]
    assert by_line[4] == ["test_neg"]
    assert by_line[7] == ["test_other_fails"]
    assert 1 not in by_line and 6 not in by_line  # def lines run at import, in no test


def test_mutants_are_drawn_from_the_tree_they_are_applied_to(tmp_path):
    """catches: mutants enumerated from the working tree while they are applied to the copy made at
    the start (seed 36's run drew a line added to rules.py after its copy was made, and cosmic-ray
    applied nothing there). A module of the copy that differs from the working tree's must give
    the copy's mutants: here its one comparison, ``a > 1``, has cosmic-ray's Gt operators."""
    pytest.importorskip("cosmic_ray")
    module = "tracekit/analysis/zz_only_in_copy.py"
    (tmp_path / "tracekit" / "analysis").mkdir(parents=True)
    (tmp_path / module).write_text("def f(a):\n    return a > 1\n")
    assert mutation.modules_of("tracekit/analysis", tmp_path) == [module]
    mutants, _ = mutation.enumerate_mutants([module], tmp_path)
    assert mutants and {m.line for m in mutants} == {2}
    assert any(m.operator == "core/ReplaceComparisonOperator_Gt_GtE" for m in mutants)
    assert not (ROOT / module).exists()


def test_jobs_run_each_mutant_once_on_a_runner_of_its_own_and_keep_the_order():
    """catches: ``--jobs`` results in the order the mutants finished rather than the sample's (a
    saved run would not line up with its seed), a mutant run twice or never, two mutants at once
    on one runner (one copy of the tree holding two edits), an equivalent survivor left as a
    survivor, or the results so far not handed on after each mutant. Fake runners take longer on earlier mutants, so they finish out of order."""
    import threading
    import time

    class FakeRunner:
        def __init__(self, name):
            self.name, self.busy, self.lock = name, 0, threading.Lock()

        def mutant(self, m):
            with self.lock:
                self.busy += 1
                assert self.busy == 1, "two mutants at once on one copy"
            time.sleep(0.02 * (5 - m.nth % 5))
            with self.lock:
                self.busy -= 1
            return {"key": m.key, "outcome": "survived", "seconds": 0.0, "runner": self.name}

    todo = [mutation.Mutant("tracekit/analysis/x.py", "core/Op", i, i, 0, "f", f"line {i}", i) for i in range(10)]
    equivalent = {todo[3].key: "argued"}
    runners = [FakeRunner("a"), FakeRunner("b"), FakeRunner("c")]
    seen: list[list[str]] = []
    out = mutation.run_all(runners, todo, equivalent, lambda done: seen.append([r["key"] for r in done]))
    assert [r["key"] for r in out] == [m.key for m in todo]
    # The results so far after each one (what a stopped run keeps): one more each time, in the sample's order.
    assert [len(x) for x in seen] == list(range(1, 11))
    assert all(x == [k for k in (m.key for m in todo) if k in x] for x in seen)
    assert out[3]["outcome"] == "equivalent" and out[3]["why"] == "argued"
    assert [r["outcome"] for i, r in enumerate(out) if i != 3] == ["survived"] * 9
    assert len({r["runner"] for r in out}) > 1  # the work was shared out


def test_a_constant_run_at_import_meets_the_tests_that_read_it(tmp_path):
    """catches: a mutant of a module-level table (a dtype's bytes) or of a dataclass field's
    default meeting no covering test, since both run at import, in no test's context: only the
    hand-kept files would see it, and a table no hand-kept file reads would look untested. The
    tests chosen are those that run a line reading the bound name, in its own module or another
    (by name or as an attribute); a test running neither reader is not chosen."""
    (tmp_path / "tracekit").mkdir()
    (tmp_path / "tracekit" / "tables.py").write_text(
        "SIZES = {'fp16': 2,\n         'fp32': 4}\n\n\nclass Tile:\n    depth: int = 1\n\n"
        "    def area(self):\n        return 2\n\n\ndef size(d):\n    return SIZES[d]\n"
    )
    (tmp_path / "tracekit" / "user.py").write_text(
        "from tracekit import tables\n\n\ndef bytes_of(d, n):\n    return tables.SIZES[d] * n\n\n\n"
        "def tile():\n    return tables.Tile()\n"
    )
    data = {
        "tests": [
            {"id": "tests/t.py::reads_here", "outcome": "passed", "seconds": 1.0},
            {"id": "tests/t.py::reads_there", "outcome": "passed", "seconds": 1.0},
            {"id": "tests/t.py::other", "outcome": "passed", "seconds": 1.0},
            {"id": "tests/t.py::makes_tiles", "outcome": "passed", "seconds": 1.0},
        ],
        "lines": {"tracekit/tables.py": {"13": [0], "9": [2]}, "tracekit/user.py": {"5": [1], "9": [3]}},
    }
    cmap = mutation.CoverageMap(data, tmp_path)
    in_table = mutation.Mutant("tracekit/tables.py", "core/NumberReplacer", 1, 2, 17, "", "'fp32': 4}")
    assert {t["id"] for t in cmap.covering(in_table, set(), 100.0)[0]} == {
        "tests/t.py::reads_here",
        "tests/t.py::reads_there",
    }
    default = mutation.Mutant("tracekit/tables.py", "core/NumberReplacer", 2, 6, 17, "Tile", "depth: int = 1")
    assert [t["id"] for t in cmap.covering(default, set(), 100.0)[0]] == ["tests/t.py::makes_tiles"]
    # A method's body is in the map as itself: its own tests, not every user of the class.
    in_method = mutation.Mutant("tracekit/tables.py", "core/NumberReplacer", 3, 9, 15, "area", "return 2")
    assert [t["id"] for t in cmap.covering(in_method, set(), 100.0)[0]] == ["tests/t.py::other"]


def test_a_table_read_only_by_another_table_meets_the_readers_of_that_one(tmp_path):
    """catches: a table another module merges into its own at import (``ALL = {**parts.SIZES}``)
    left with no test, because the only line reading it runs at import too: the tests are those
    reading the merged table."""
    (tmp_path / "tracekit").mkdir()
    (tmp_path / "tracekit" / "parts.py").write_text("SIZES = {'fp16': 2}\n")
    (tmp_path / "tracekit" / "merged.py").write_text(
        "from tracekit import parts\n\nALL = {**parts.SIZES,\n       'x': 1}\n\n\ndef size(d):\n    return ALL[d]\n"
    )
    data = {
        "tests": [
            {"id": "tests/t.py::sizes", "outcome": "passed", "seconds": 1.0},
            {"id": "tests/t.py::other", "outcome": "passed", "seconds": 1.0},
        ],
        "lines": {"tracekit/merged.py": {"8": [0]}, "tracekit/parts.py": {}},
    }
    cmap = mutation.CoverageMap(data, tmp_path)
    m = mutation.Mutant("tracekit/parts.py", "core/NumberReplacer", 0, 1, 18, "", "SIZES = {'fp16': 2}")
    assert [t["id"] for t in cmap.covering(m, set(), 100.0)[0]] == ["tests/t.py::sizes"]


def test_the_private_copy_collects_the_whole_suite(tmp_path):
    """catches: a private copy that lacks a file some test reads at collection. test_docs.py reads
    README.md when it is collected; a copy without it stopped the coverage run at collection
    (pytest's exit 2) and the campaign went on with a map of no test, so every mutant met only
    its hand-kept files. The copy must collect as many tests as the checkout, with no error."""

    def collected(where: Path) -> tuple[int, str]:
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--co", "-p", "no:cacheprovider", "tests"],
            cwd=where,
            env={**os.environ, "PYTHONPATH": str(where)},
            capture_output=True,
            text=True,
        )
        return p.returncode, p.stdout.strip().splitlines()[-1]

    copy = mutation.make_copy(tmp_path)
    rc, last = collected(copy)
    assert rc == 0, last
    assert last.split()[0] == collected(ROOT)[1].split()[0]
