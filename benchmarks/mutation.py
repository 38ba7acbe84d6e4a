"""Mutation campaign over tracekit's packages (``PACKAGES``: specs to whatif, and trace, report, batch, serve, collect, cli).

    python benchmarks/mutation.py --sample 40 --seed 27 --json /tmp/mutation.json   # a seeded sample
    python benchmarks/mutation.py --all                                           # every mutant (hours)
    python benchmarks/mutation.py --ci                                            # CI's fixed set
    python benchmarks/mutation.py --list                                          # count mutants only
    python benchmarks/mutation.py --rescore /tmp/mutation.json                    # a saved run, today's equivalents

What it does: cosmic-ray's own generator enumerates every mutant of every module in the
packages (each of its operators at each place it applies: a replaced operator, number, boolean,
comparison, an added ``not``, a removed decorator, a loop that never runs...). Mutants inside type
annotations are left out and counted apart: this code has ``from __future__ import annotations``,
so ``str | None`` -> ``str - None`` never runs and would only be noise. A mutant is applied to a
private copy of the tree (the checkout is never written) and tests run against it with
``pytest -x``: a failing or erroring run kills it, a run past the time limit is a timeout, a
passing run lets it survive. The tests are, first, the files kept by hand for its module
(``MODULE_TESTS`` below, else its package's ``PACKAGE_TESTS``, after the package's own
``test_mutants_*`` files), then every other test of the whole suite that executes the mutated
statement, quickest first, up to ``--covering-seconds`` of them (slower ones left out can only
miss kills). That second set is read from a coverage map (benchmarks/coverage_map.py:
one run of the whole suite under coverage.py with a context per test, ~30 min here, cached in
.mutation-cache/ under a digest of tracekit/ and tests/), the selection mutmut makes. A mutant of
a module-level constant or a class attribute runs at import, in no test's context: it meets the
tests that run a line of tracekit reading the name it binds (``bound_names``). A kill by a
test of that set counts only if that test, run alone on the unmutated tree, passes. Each result
says which test killed it and whether the hand-kept files alone would have (``by_lists``), so one
run gives both rates; ``--lists-only`` runs the hand-kept files alone, as runs before seed 34 did.
The unmutated hand-kept files run first, once each; if they fail or skip everything there is no
campaign to run, and the script says so.

What a sample estimates: ``--sample N`` runs N mutants per package drawn uniformly at random
(``--seed``) from all of that package's mutants. Its kill rate estimates the kill rate of the full
campaign (``--all``) over that package, with the 95% Wilson interval printed beside it for the
sampling error. It says nothing about mutants outside cosmic-ray's operators, and a survivor in
the sample stands for roughly total/sampled survivors like it in the package.

Kill rate = (killed + timeouts) / (sampled - errors); an error is a mutant that could not be
applied or a test run that pytest itself refused (usage error, nothing collected). Mutation score =
(killed + timeouts) / (sampled - errors - equivalent), the usual definition: a survivor listed in
benchmarks/mutation-equivalent.json (each with its reason, argued in mutation-survivors.md) is one
no test can kill, so it leaves the denominator. The Wilson interval is the score's.

``--ci`` runs the fixed list in benchmarks/mutation-ci.json (a few mutants of every package, from
its hottest modules where they had kills, each killed when the list was written, each named by
its module, operator, function and source line so that edits elsewhere do not move it). An entry
that names the test that killed it (``test``) meets that test alone (all of them run once first,
unmutated, and must pass); older entries meet their module's hand-kept files. CI fails when any
of them survives, or when fewer than half of them can still be found (the code moved on: refresh
the list with ``--write-ci N``, N per package of a run, or ``--write-ci N --ci-from RUN.json ...``
from saved runs; packages the run did not sample keep their entries, less the stale ones).

Why cosmic-ray and not mutmut: mutmut 3 starts every run with the whole test suite, twice (its
stats pass and a clean run), and picks the tests itself; here the whole suite is tens of minutes
on two cores, and the map from module to tests is ours to keep. cosmic-ray's operators and its
``use_mutation`` apply one named mutant at a time, against whatever command we choose.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# compare and whatif were part of analysis until the stage folders (issue #28): runs before that
# counted their mutants under analysis.
PACKAGES = (
    "tracekit/specs",
    "tracekit/frameworks",
    "tracekit/models",
    "tracekit/analysis",
    "tracekit/compare",
    "tracekit/whatif",
    # Sampled from issue 51 (part 5) on: the reader every figure rests on, the report's
    # view-models, and the commands around them.
    "tracekit/trace",
    "tracekit/report",
    "tracekit/batch",
    "tracekit/serve",
    "tracekit/collect",
    "tracekit/cli",
)
CI_FILE = ROOT / "benchmarks" / "mutation-ci.json"
# Survivors judged equivalent (no input tells them from the original), each with the reason; the
# reasons are argued in benchmarks/mutation-survivors.md. They stay in every run (a test that kills
# one later simply kills it) but leave the denominator of the mutation score.
EQUIVALENT_FILE = ROOT / "benchmarks" / "mutation-equivalent.json"

# Which tests cover each package's modules: fast, direct tests first (pytest -x stops at the
# first failure, so a mutant that a quick test kills costs seconds).
PACKAGE_TESTS = {
    "tracekit/specs": ["test_specs.py", "test_spec_file.py", "test_roofline.py", "test_ceilings.py", "test_project.py"],
    "tracekit/frameworks": ["test_frameworks.py", "test_segment.py", "test_serving.py", "test_step_tokens.py"],
    "tracekit/models": ["test_models.py", "test_model_params_oracle.py", "test_grid_shapes.py", "test_model_fit.py"],
    "tracekit/analysis": [
        "test_roofline.py",
        "test_segment.py",
        "test_costs.py",
        "test_serving.py",
        "test_taxonomy.py",
        "test_idle.py",
        "test_report_oracle.py",
    ],
    # compare and whatif mutants were killed by tests written when they were analysis modules.
    "tracekit/compare": [
        "test_mutants_analysis_d.py",
        "test_mutants_analysis_e.py",
        "test_mutants_analysis_f.py",
        "test_mutants_analysis_h.py",
        "test_compare.py",
        "test_compare_gates.py",
    ],
    "tracekit/whatif": [
        "test_mutants_plan.py",
        "test_mutants_analysis_b.py",
        "test_mutants_analysis_d.py",
        "test_plan.py",
        "test_plan_idle.py",
        "test_project.py",
        "test_project_check.py",
    ],
    # Issue 51 part 5: the packages sampled from then on (their own test_mutants_<package>*.py run
    # first, as for every package).
    "tracekit/trace": [
        "test_reader_bad_input.py",
        "test_held.py",
        "test_richer_trace.py",
        "test_clock_below_zero.py",
        "test_links_parents.py",
        "test_reader_stream.py",
        "test_reader_truncated.py",
        "test_reader.py",
    ],
    # The view-models (analysis -> the figures a report shows) first: the JSON oracle and the
    # renderings of real and sample traces.
    "tracekit/report": [
        "test_steps_view.py",
        "test_report_oracle.py",
        "test_estimates.py",
        "test_report.py",
        "test_serving.py",
    ],
    "tracekit/batch": ["test_batch.py"],
    "tracekit/serve": ["test_mcp.py", "test_replay_render.py"],
    # test_collect.py's torch.compile test stays skipped (TRACEKIT_TEST_COMPILE unset).
    "tracekit/collect": ["test_collect_contracts.py", "test_collect.py", "test_collect_tp.py", "test_outputs.py"],
    "tracekit/cli": [
        "test_mutants_cli.py",
        "test_cli_contracts.py",
        "test_runs.py",
        "test_history.py",
        "test_cli_summary.py",
        "test_whatif_cli.py",
        "test_outputs.py",
        "test_save_factors.py",
        "test_cli_words.py",
    ],
}
# Modules whose own tests live elsewhere than their package's set (derived from what each test
# file imports, plus the end-to-end tests that run the module through analyze()).
OP_COST_TESTS = ["test_mutants_op_costs.py", "test_op_dtypes.py", "test_costs.py", "test_roofline.py", "test_models.py"]
MODEL_COST_TESTS = ["test_model_fit.py", "test_grid_shapes.py", "test_models.py"]
MODULE_TESTS = {
    "tracekit/specs/factors.py": ["test_project.py", "test_specs.py"],
    "tracekit/specs/measured.py": ["test_specs.py", "test_estimates.py", "test_ceilings.py"],
    "tracekit/analysis/findings/advice.py": ["test_findings_oracle.py", "test_idle.py", "test_wording.py"],
    "tracekit/analysis/books.py": ["test_books.py"],
    "tracekit/analysis/pricing/capture.py": ["test_capture_batch.py", "test_models.py"],
    "tracekit/analysis/pricing/ceilings.py": ["test_ceilings.py"],
    "tracekit/whatif/check.py": ["test_project_check.py"],
    # The op cost models, split by kind of op, share one test set; so do the model-cost modules.
    **{
        f"tracekit/analysis/pricing/{m}.py": OP_COST_TESTS
        for m in ("op_costs", "op_args", "matrix_ops", "vector_ops", "engine_ops")
    },
    "tracekit/analysis/steps/evidence.py": ["test_serving.py", "test_step_tokens.py", "test_taxonomy.py"],
    "tracekit/analysis/findings/rules.py": [
        "test_findings_oracle.py",
        "test_idle.py",
        "test_wording.py",
        "test_roofline.py",
        "test_tpot_growth.py",
    ],
    "tracekit/analysis/pricing/grid_shapes.py": ["test_grid_shapes.py"],
    "tracekit/analysis/hta.py": ["test_hta.py"],
    "tracekit/analysis/waiting/idle.py": [
        "test_idle_split_oracle.py",
        "test_idle.py",
        "test_plan_idle.py",
        "test_report_oracle.py",
    ],
    "tracekit/analysis/waiting/host.py": [
        "test_idle_split_oracle.py",
        "test_idle.py",
        "test_plan_idle.py",
        "test_report_oracle.py",
        "test_termination.py",
    ],
    "tracekit/analysis/steps/latency.py": [
        "test_latency_oracle.py",
        "test_segment.py",
        "test_serving.py",
        "test_report_oracle.py",
        "test_tpot_growth.py",
    ],
    "tracekit/analysis/merge.py": ["test_windows.py"],
    "tracekit/analysis/windows.py": ["test_mutants_analysis_f.py", "test_windows.py"],
    "tracekit/analysis/model.py": ["test_compare.py", "test_model_fit.py"],
    **{
        f"tracekit/analysis/pricing/{m}.py": MODEL_COST_TESTS
        for m in ("model_costs", "kernel_names", "gemm_layers", "model_fit")
    },
    "tracekit/compare/movers.py": ["test_compare.py"],
    "tracekit/analysis/ranks.py": ["test_ranks.py"],
    # roofline.py held attribution, the above-roof check and dtype refinement until they were split.
    **{
        f"tracekit/analysis/pricing/{m}.py": [
            "test_roofline.py",
            "test_estimates.py",
            "test_idle.py",
            "test_report_oracle.py",
        ]
        for m in ("roofline", "attribution", "above_roof", "dtypes")
    },
    # segment.py held the work table, the step ranges and the steps table until they were split.
    **{
        f"tracekit/analysis/steps/{m}.py": [
            "test_segment.py",
            "test_serving.py",
            "test_step_tokens.py",
            "test_roofline.py",
            "test_report_oracle.py",
        ]
        for m in ("segment", "work", "ranges", "table")
    },
    "tracekit/analysis/pricing/stated_weights.py": ["test_stated_weights.py"],
    "tracekit/analysis/steps/step_tokens.py": ["test_step_tokens.py", "test_serving.py"],
    "tracekit/analysis/pricing/taxonomy.py": ["test_taxonomy.py", "test_grid_shapes.py"],
    "tracekit/analysis/steps/timeline.py": [
        "test_timeline_segments_oracle.py",
        "test_idle.py",
        "test_termination.py",
        "test_report_oracle.py",
    ],
    "tracekit/analysis/truncation.py": ["test_reader_truncated.py"],
    "tracekit/models/costs.py": ["test_models.py", "test_model_params_oracle.py", "test_model_fit.py"],
    "tracekit/models/registry.py": ["test_models.py", "test_grid_shapes.py"],
    # tracekit/trace: the cache, the rank files, the run check, the summary and the window split
    # have test files of their own.
    "tracekit/trace/cache.py": ["test_cache.py", "test_reader.py"],
    "tracekit/trace/links.py": ["test_links_parents.py", "test_reader.py"],
    "tracekit/trace/parallel.py": ["test_ranks_parallel.py", "test_reader.py"],
    "tracekit/trace/runs.py": ["test_runs.py", "test_reader.py"],
    "tracekit/trace/summary.py": ["test_reader_bad_input.py", "test_cli_summary.py", "test_cache.py"],
    **{
        f"tracekit/trace/{m}.py": ["test_termination.py", "test_windows.py"]
        for m in ("windows", "window_edges", "window_events", "window_survey")
    },
    # tracekit/report: modules with test files of their own (test_ranks.py is left out: its
    # two-process gloo test times a sleep and fails on a loaded machine without any mutant).
    **{f"tracekit/report/{m}.py": ["test_annotate.py"] for m in ("annotate", "annotate_critical")},
    "tracekit/report/fleet.py": ["test_batch.py"],
    "tracekit/report/hta_view.py": ["test_hta.py"],
    "tracekit/report/replay_view.py": ["test_replay_render.py"],
    "tracekit/report/headline_view.py": ["test_report_oracle.py", "test_idle.py", "test_first_hour.py"],
    **{
        f"tracekit/report/{m}.py": ["test_project.py", "test_plan.py", "test_whatif_cli.py"]
        for m in ("project", "plan", "whatif")
    },
    **{
        # (test_compare.py is left out: a collect test in it compares timings and failed unmutated here)
        f"tracekit/report/compare/{m}.py": ["test_report_contracts.py", "test_mutants_compare.py", "test_wording.py"]
        for m in ("view", "charts", "junit")
    },
    # The charts read back against the analysis (an entry here replaces the package's list: kept after it).
    "tracekit/report/charts.py": ["test_report_contracts.py", *PACKAGE_TESTS["tracekit/report"]],
    # tracekit/collect: the calibration and the GPU database's measured ceilings.
    "tracekit/collect/calibrate.py": ["test_collect_contracts.py", "test_ceilings.py", "test_specs.py"],
    "tracekit/collect/parallel_rank.py": ["test_collect_tp.py"],
    "tracekit/collect/parallel.py": ["test_collect_contracts.py", "test_collect_tp.py"],
    # tracekit/cli: commands whose own tests sit beside the feature they drive.
    "tracekit/cli/cached.py": ["test_cache.py"],
    "tracekit/cli/gpus.py": ["test_specs.py"],
    "tracekit/cli/collect.py": ["test_collect.py", "test_ceilings.py"],
    "tracekit/cli/batch.py": ["test_batch.py"],
    "tracekit/cli/mcp.py": ["test_mcp.py"],
    "tracekit/cli/annotate.py": ["test_annotate.py"],
    "tracekit/cli/compare.py": ["test_outputs.py", "test_compare_gates.py"],
    **{
        f"tracekit/cli/{m}.py": ["test_plan.py", "test_plan_idle.py", "test_project_check.py"]
        for m in ("plan", "project")
    },
    "tracekit/cli/split.py": ["test_windows.py"],
    "tracekit/cli/models.py": ["test_models.py"],
}
# Where CI's fixed set is drawn from: the modules every report's figures pass through. ``--write-ci``
# picks per package, from these modules first and from the package's others where none of these
# has a kill, so that every package of PACKAGES has mutants in the list.
HOT = (
    "tracekit/analysis/pricing/roofline.py",
    "tracekit/analysis/pricing/attribution.py",
    "tracekit/analysis/steps/segment.py",
    "tracekit/analysis/steps/table.py",
    "tracekit/analysis/steps/ranges.py",
    "tracekit/analysis/pricing/model_costs.py",
    "tracekit/models/costs.py",
    "tracekit/specs/lookup.py",
    "tracekit/frameworks/vllm.py",
    "tracekit/frameworks/markers.py",
    "tracekit/compare/comparison.py",
    "tracekit/compare/movers.py",
    "tracekit/whatif/plan.py",
    "tracekit/whatif/project.py",
    "tracekit/trace/reader.py",
    "tracekit/trace/columns.py",
    "tracekit/trace/decode.py",
    "tracekit/report/view.py",
    "tracekit/report/headline_view.py",
    "tracekit/report/steps_view.py",
    "tracekit/batch/rows.py",
    "tracekit/serve/tools.py",
    "tracekit/collect/collector.py",
    "tracekit/cli/common.py",
)


@dataclass
class Mutant:
    module: str  # path from the repository root
    operator: str  # cosmic-ray operator name
    occurrence: int  # cosmic-ray's index of this operator's positions in the module
    line: int
    col: int
    definition: str  # enclosing function or class ("" at module level)
    source: str  # the source line, stripped
    nth: int = 0  # index among mutants with the same module, operator, definition and source line

    @property
    def key(self) -> str:
        """A name that survives edits to other lines (CI's fixed list is kept by it)."""
        return f"{self.module}::{self.definition}::{self.operator}::{self.source}::{self.nth}"

    @property
    def package(self) -> str:
        return next(p for p in PACKAGES if self.module.startswith(p + "/"))


def tests_for(module: str) -> list[str]:
    package = next(p for p in PACKAGES if module.startswith(p + "/"))
    tests = MODULE_TESTS.get(module) or PACKAGE_TESTS[package]
    # The tests written to kill a package's mutants (tests/test_mutants_<package>*.py) are quick and
    # aimed at exactly this, so they run first for every module of their package.
    own = sorted(p.name for p in (ROOT / "tests").glob(f"test_mutants_{package.rsplit('/', 1)[1]}*.py"))
    return [t for t in dict.fromkeys(own + tests) if (ROOT / "tests" / t).exists()]


def tree_digest() -> str:
    """Names the state of the code and tests a coverage map was built from."""
    h = hashlib.sha256()
    for folder in ("tracekit", "tests"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            h.update(p.relative_to(ROOT).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:20]


def statement_lines(source: str, line: int, col: int) -> range:
    """The lines whose execution means the mutated code ran: the innermost statement holding the
    mutant; for a compound statement only its header (its body runs without the mutated condition
    in the ``else`` case too, but not without the header), except a def or class, where a mutant in a
    decorator or a default runs at import, in no test, and the tests that call the body are the
    ones that can see it."""
    pos, best = (line, col), None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.stmt):
            start = min(
                [(node.lineno, node.col_offset)]
                + [(d.lineno, d.col_offset) for d in getattr(node, "decorator_list", [])]
            )
            if start <= pos < (node.end_lineno, node.end_col_offset) and (best is None or start >= best[0]):
                best = (start, node)
    if best is None:
        return range(line, line + 1)
    (first, _), node = best
    body = getattr(node, "body", None)
    if body and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return range(first, max(first, body[0].lineno - 1) + 1)
    return range(first, node.end_lineno + 1)


def bound_names(source: str, line: int, col: int) -> set[str]:
    """The names bound by the module-level statement holding a position, when it runs only at
    import: an assignment's targets, or a class's name for a statement of the class body outside
    its methods (a dataclass field's default). Empty for anything else (a function's body runs
    in the tests that call it, and the coverage map sees that)."""
    pos = (line, col)
    for node in ast.parse(source).body:
        start = min(
            [(node.lineno, node.col_offset)] + [(d.lineno, d.col_offset) for d in getattr(node, "decorator_list", [])]
        )
        if not start <= pos < (node.end_lineno, node.end_col_offset):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if isinstance(node, ast.ClassDef):
            in_method = any(
                isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.lineno <= line <= b.end_lineno
                for b in node.body
            )
            return set() if in_method else {node.name}
        return set()
    return set()


class CoverageMap:
    """Which tests of the whole suite execute which lines (built by benchmarks/coverage_map.py)."""

    def __init__(self, data: dict, copy: Path):
        self.tests, self.lines, self.copy = data["tests"], data["lines"], copy
        self.sources: dict[str, str] = {}  # read from the copy, unmutated: the checkout may change meanwhile
        self._refs: dict[str, list[tuple[str, int]]] | None = None

    def readers(self, names: set[str], depth: int = 3) -> set[int]:
        """The tests that run a line reading any of ``names``; where a name is read only by
        another module-level statement (a table built from tables at import), the readers of the
        names that statement binds, ``depth`` levels on."""
        refs, ids, onward = self.references(), set(), set()
        for name in names:
            for module, n in refs.get(name, ()):
                found = self.lines.get(module, {}).get(str(n), ())
                ids.update(found)
                if not found and depth > 0:
                    if module not in self.sources:
                        self.sources[module] = (self.copy / module).read_text()
                    onward |= bound_names(self.sources[module], n, 0) - names
        if onward:
            ids |= self.readers(onward, depth - 1)
        return ids

    def references(self) -> dict[str, list[tuple[str, int]]]:
        """name -> (module, line) of every line of tracekit that reads a name or an attribute of
        that name (read from the copy before any mutant is applied to it)."""
        if self._refs is None:
            refs: dict[str, list[tuple[str, int]]] = {}
            for path in sorted((self.copy / "tracekit").rglob("*.py")):
                module = path.relative_to(self.copy).as_posix()
                for node in ast.walk(ast.parse(path.read_text())):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                        refs.setdefault(node.id, []).append((module, node.lineno))
                    elif isinstance(node, ast.Attribute):
                        refs.setdefault(node.attr, []).append((module, node.lineno))
            self._refs = refs
        return self._refs

    @classmethod
    def build(cls, copy: Path, path: str | None = None) -> "CoverageMap":
        if path:  # a map built earlier (--coverage-map): for surveys; lines moved since then match wrongly
            return cls(json.loads(Path(path).read_text()), copy)
        cache = ROOT / ".mutation-cache" / f"coverage-{tree_digest()}.json"
        if not cache.exists():
            print("building the coverage map: the whole suite under coverage.py, one context per test...", flush=True)
            cache.parent.mkdir(exist_ok=True)
            env = {
                **os.environ,
                "PYTHONPATH": f"{copy}{os.pathsep}{copy / 'benchmarks'}",
                "TRACEKIT_COVERAGE_MAP": str(cache),
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            t0 = time.perf_counter()
            p = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "coverage_map", "-p", "no:cacheprovider"],
                cwd=copy,
                env=env,
                capture_output=True,
                text=True,
            )
            tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
            # pytest's 2-4 (interrupted, e.g. by a collection error; internal error; usage error):
            # the suite did not run whole, so a map from it would leave most mutants untested.
            if p.returncode in (2, 3, 4):
                cache.unlink(missing_ok=True)
                sys.exit(f"mutation: the coverage run stopped before the suite ran ({tail[0]}).")
            if not cache.exists():
                sys.exit(f"mutation: the coverage run wrote no map ({tail[0]}).")
            print(f"  coverage map in {time.perf_counter() - t0:.0f} s ({tail[0]})", flush=True)
        return cls(json.loads(cache.read_text()), copy)

    def covering(self, m: Mutant, skip_files: set[str], budget: float) -> tuple[list[dict], int]:
        """The passing tests, outside skip_files, that run the mutated statement, quickest first, as
        many as fit in budget seconds (as timed in the coverage run), and how many there were."""
        if m.module not in self.sources:
            self.sources[m.module] = (self.copy / m.module).read_text()
        by_line = self.lines.get(m.module, {})
        ids = {i for n in statement_lines(self.sources[m.module], m.line, m.col) for i in by_line.get(str(n), ())}
        if not ids:
            # A module-level constant (or a class attribute) runs at import, in no test's context:
            # its readers are the tests that run a line reading the name it binds.
            ids = self.readers(bound_names(self.sources[m.module], m.line, m.col))
        tests = [self.tests[i] for i in ids]
        tests = [t for t in tests if t["outcome"] == "passed" and t["id"].split("::")[0] not in skip_files]
        tests.sort(key=lambda t: (t.get("seconds", 0.0), t["id"]))
        # A survivor runs every test it is given: the budget bounds a sample's hours. Leaving the
        # slowest out can only miss kills, so the score it gives is a lower bound.
        spent, chosen = 0.0, []
        for t in tests:
            spent += t.get("seconds", 0.0)
            if spent > budget:
                break
            chosen.append(t)
        return chosen, len(tests)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) positions of every annotation: mutants there are never executed."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    annotations.append(arg.annotation)
            if node.returns is not None:
                annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for n in annotations:
            spans.append(((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset)))
    return spans


def enumerate_mutants(modules: list[str], root: Path = ROOT) -> tuple[list[Mutant], int]:
    """Every mutant of these modules (in the tree at ``root``) by cosmic-ray's generator, and how
    many were annotations."""
    mutants, skipped = [], 0
    for module in modules:
        ms, n = module_mutants(module, root)
        mutants += ms
        skipped += n
    return mutants, skipped


def module_mutants(module: str, root: Path = ROOT) -> tuple[list[Mutant], int]:
    """One module's mutants, cached under .mutation-cache/ by the module's text (parsing is slow)."""
    import hashlib
    from importlib.metadata import version

    text = (root / module).read_text()
    digest = hashlib.sha256(f"{version('cosmic-ray')}\n{module}\n{text}".encode()).hexdigest()[:20]
    cache = ROOT / ".mutation-cache" / f"{digest}.json"
    if cache.exists():
        d = json.loads(cache.read_text())
        return [Mutant(**m) for m in d["mutants"]], d["annotations"]
    from cosmic_ray.commands import init
    from cosmic_ray.work_db import WorkDB, use_db

    with tempfile.TemporaryDirectory() as tmp, use_db(str(Path(tmp) / "session.sqlite"), WorkDB.Mode.create) as db:
        init([root / module], db, {})
        items = [item.mutations[0] for item in db.pending_work_items]
    lines, spans = text.splitlines(), annotation_spans(text)
    mutants, skipped, seen = [], 0, Counter()
    for spec in sorted(items, key=lambda s: (s.operator_name, s.occurrence)):
        pos = tuple(spec.start_pos)
        if any(start <= pos < end for start, end in spans):
            skipped += 1
            continue
        src = lines[pos[0] - 1].strip()
        base = (spec.definition_name or "", spec.operator_name, src)
        mutants.append(
            Mutant(
                module, spec.operator_name, spec.occurrence, pos[0], pos[1], spec.definition_name or "", src, seen[base]
            )
        )
        seen[base] += 1
    cache.parent.mkdir(exist_ok=True)
    cache.write_text(json.dumps({"mutants": [asdict(m) for m in mutants], "annotations": skipped}))
    return mutants, skipped


def modules_of(package: str, root: Path = ROOT) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in (root / package).rglob("*.py") if p.name != "__init__.py")


def make_copy(tmp: Path) -> Path:
    """A private tree to mutate: code and tests copied, data linked, ../shared beside it."""
    copy = tmp / "repo"
    copy.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "tracekit", copy / "tracekit", ignore=ignore)
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    # Linked, not copied: data the tests read, and the documentation test_docs.py runs the commands
    # of (it reads README.md at collection, so a copy without it collects nothing from that file).
    for name in (
        "sample_traces",
        "templates",
        "benchmarks",
        "README.md",
        "docs",
        "mkdocs.yml",
        "Makefile",
        "CHANGELOG.md",
    ):
        if (ROOT / name).exists():
            (copy / name).symlink_to(ROOT / name)
    if (ROOT.parent / "shared").exists():  # tests find the real traces at ROOT.parent/shared
        (tmp / "shared").symlink_to(ROOT.parent / "shared")
    return copy


class Runner:
    """Runs test sets in the copy: once clean (the baseline), then once per mutant."""

    def __init__(self, copy: Path, timeout_factor: float, coverage: CoverageMap | None = None, budget: float = 0.0):
        self.copy, self.factor, self.coverage, self.budget = copy, timeout_factor, coverage, budget
        self.env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
        self.baseline: dict[str, float] = {}
        self.alone: dict[str, bool] = {}  # node id -> passes on its own, unmutated
        import threading

        self.clean_lock = threading.Lock()  # twins share it: each file runs clean once, not once per job

    def twin(self, copy: Path) -> "Runner":
        """A runner of another copy of the same tree (``--jobs``): the coverage map's tables, the
        clean runs' times and the passes-alone answers are shared, since the trees are the same."""
        other = Runner(
            copy,
            self.factor,
            CoverageMap({"tests": self.coverage.tests, "lines": self.coverage.lines}, copy) if self.coverage else None,
            self.budget,
        )
        other.baseline, other.alone, other.clean_lock = self.baseline, self.alone, self.clean_lock
        return other

    def pytest(self, tests: list[str], timeout: float | None, ids: tuple[str, ...] = ()) -> tuple[str, float, str]:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            *(f"tests/{t}" for t in tests),
            *ids,
        ]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(
                cmd,
                cwd=self.copy,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return "timeout", time.perf_counter() - t0, ""
        dt = time.perf_counter() - t0
        tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
        # pytest: 0 all passed, 1 a test failed, 2 interrupted (an import or collection error),
        # 3 internal error, 4 usage error, 5 nothing collected.
        outcome = {0: "survived", 1: "killed", 2: "killed"}.get(p.returncode, "error")
        # -ra lists the failure as "FAILED tests/x.py::test - why" (or ERROR): which test killed it.
        failed = next(
            (
                ln.split()[1]
                for ln in (p.stdout + p.stderr).splitlines()
                if ln.startswith(("FAILED ", "ERROR ")) and len(ln.split()) > 1
            ),
            "",
        )
        return outcome, dt, failed or tail[0]

    def passes_alone(self, nodeid: str) -> bool:
        if nodeid not in self.alone:
            self.alone[nodeid] = self.pytest([], None, (nodeid,))[0] == "survived"
        return self.alone[nodeid]

    def clean(self, tests: list[str]) -> float:
        """Seconds the unmutated tests take; each file runs clean once, and must pass."""
        with self.clean_lock:
            return self._clean(tests)

    def _clean(self, tests: list[str]) -> float:
        for t in tests:
            if t not in self.baseline:
                outcome, dt, tail = self.pytest([t], None)
                if outcome != "survived":
                    sys.exit(f"mutation: the unmutated tests/{t} does not pass ({tail}); fix it first.")
                if " passed" not in tail:
                    sys.exit(f"mutation: the unmutated tests/{t} ran nothing ({tail}).")
                print(f"  baseline {dt:6.1f} s  tests/{t}  ({tail})", flush=True)
                self.baseline[t] = dt
        return sum(self.baseline[t] for t in tests)

    def mutant(self, m: Mutant, only: tuple[str, ...] = ()) -> dict:
        """One mutant against its tests; ``only``: these test node ids alone instead (CI's list,
        whose baseline ``run_ci`` ran; the limit is then 60 s)."""
        import cosmic_ray.plugins
        from cosmic_ray.mutating import use_mutation

        tests = [] if only else [t for t in tests_for(m.module) if (self.copy / "tests" / t).exists()]  # as copied
        extra, covering = (
            self.coverage.covering(m, {f"tests/{t}" for t in tests}, self.budget) if self.coverage else ([], 0)
        )
        extra = extra or [{"id": t} for t in only]
        # pytest's start-up and collection are not in the per-test seconds: 30 s for them.
        limit = max(
            60.0, self.factor * (self.clean(tests) + sum(t.get("seconds", 0.0) for t in extra)) + 30 * bool(extra)
        )
        operator = cosmic_ray.plugins.get_operator(m.operator)()
        try:
            with use_mutation(self.copy / m.module, operator, m.occurrence) as (original, mutated):
                if mutated is None:
                    outcome, dt, tail, diff = "error", 0.0, "cosmic-ray applied nothing", ""
                else:
                    diff = changed_line(original, mutated)
                    outcome, dt, tail = self.pytest(tests, limit, tuple(t["id"] for t in extra))
        except Exception as e:  # noqa: BLE001 - an operator that fails on this node (cosmic-ray 8.7's
            # ExceptionReplacer on some except clauses) is one mutant that could not be applied
            outcome, dt, tail, diff = "error", 0.0, f"cosmic-ray could not apply it ({type(e).__name__}: {e})", ""
        by_lists = outcome == "killed" and (bool(only) or tail.split("::")[0].removeprefix("tests/") in tests)
        if outcome == "killed" and not by_lists and "::" in tail and not self.passes_alone(tail):
            outcome, tail = "error", f"{tail} fails on its own without the mutant: no evidence"
        return {
            **asdict(m),
            "key": m.key,
            "package": m.package,
            "outcome": outcome,
            "seconds": round(dt, 2),
            "mutated": diff,
            "tests": tests,
            "covering": covering,
            "covering_run": len(extra),
            "pytest": tail,
            "by_lists": by_lists or (outcome == "timeout" and not extra),
        }


def run_all(runners: list[Runner], todo: list[Mutant], equivalent: dict[str, str], progress=None) -> list[dict]:
    """Every mutant of ``todo`` through the first idle runner (each owns a copy of the tree, so
    one mutant never sees another's edit); results in ``todo``'s order, whatever order they end in.
    ``progress`` is called with the results so far (in that order) after each one."""
    import queue
    import threading

    idle: queue.Queue = queue.Queue()
    for r in runners:
        idle.put(r)
    results: list[dict | None] = [None] * len(todo)
    done, lock = [0], threading.Lock()

    def one(i: int, m: Mutant) -> None:
        runner = idle.get()
        try:
            r = runner.mutant(m)
        finally:
            idle.put(runner)
        if r["outcome"] == "survived" and m.key in equivalent:
            r.update(outcome="equivalent", why=equivalent[m.key])
        results[i] = r
        with lock:
            done[0] += 1
            print(
                f"  [{done[0]}/{len(todo)}] {r['outcome']:8} {r['seconds']:6.1f} s  {m.module}:{m.line} "
                f"{m.operator.removeprefix('core/')}",
                flush=True,
            )
            if progress is not None:
                progress([x for x in results if x is not None])

    if len(runners) == 1:
        for i, m in enumerate(todo):
            one(i, m)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(runners)) as pool:
            for f in [pool.submit(one, i, m) for i, m in enumerate(todo)]:
                f.result()
    return [r for r in results if r is not None]


def changed_line(original: str, mutated: str) -> str:
    """The first mutated line, as it reads after the mutation."""
    for a, b in zip(original.splitlines(), mutated.splitlines()):
        if a != b:
            return b.strip()
    return ""


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion k/n (sound near 0 and 1, unlike p +- z*se)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def equivalent_keys() -> dict[str, str]:
    if not EQUIVALENT_FILE.exists():
        return {}
    return {m["key"]: m["why"] for m in json.loads(EQUIVALENT_FILE.read_text())["mutants"]}


def summarise(results: list[dict], totals: dict[str, int], annotations: dict[str, int]) -> dict:
    """Per package: the kill rate over every sampled mutant, and the mutation score, which leaves out
    the survivors listed as equivalent (the usual definition: killed / non-equivalent mutants)."""
    out = {}
    for pkg in totals:
        rs = [r for r in results if r["package"] == pkg]
        c = Counter(r["outcome"] for r in rs)
        k = c["killed"] + c["timeout"]
        n = len(rs) - c["error"]
        n_score = n - c["equivalent"]
        lo, hi = wilson(k, n_score)
        # What the hand-kept files alone killed (runs before seed 34 had nothing else); a run made
        # with --lists-only, or saved before results said, has no by_lists: every kill is theirs.
        k_lists = sum(1 for r in rs if r["outcome"] in ("killed", "timeout") and r.get("by_lists", True))
        out[pkg] = {
            "mutants": totals[pkg],
            "annotation_mutants_left_out": annotations[pkg],
            "sampled": len(rs),
            "killed": c["killed"],
            "survived": c["survived"],
            "equivalent": c["equivalent"],
            "timeouts": c["timeout"],
            "errors": c["error"],
            "kill_rate": k / n if n else None,
            "score": k / n_score if n_score else None,
            "wilson95": [lo, hi],
            "score_lists_only": k_lists / n_score if n_score else None,
        }
    return out


def report(summary: dict, results: list[dict]) -> None:
    print(
        f"\n{'package':22} {'mutants':>8} {'sampled':>8} {'killed':>7} {'survived':>8} {'equiv':>6} "
        f"{'timeouts':>8} {'errors':>6}  kill rate  score (95% Wilson)  hand-kept files alone"
    )
    pct = lambda v: "-" if v is None else f"{100 * v:5.1f}%"  # noqa: E731
    for pkg, s in summary.items():
        lo, hi = s["wilson95"]
        print(
            f"{pkg:22} {s['mutants']:8} {s['sampled']:8} {s['killed']:7} {s['survived']:8} {s['equivalent']:6} "
            f"{s['timeouts']:8} {s['errors']:6}  {pct(s['kill_rate']):>9}  {pct(s['score'])} "
            f"({100 * lo:.1f}-{100 * hi:.1f}%)  {pct(s.get('score_lists_only')):>10}"
        )
    survivors = [r for r in results if r["outcome"] == "survived"]
    print(f"\nsurvivors ({len(survivors)}):")
    for r in survivors:
        print(f"  {r['module']}:{r['line']}  {r['operator'].removeprefix('core/')}  in {r['definition'] or '<module>'}")
        print(f"      {r['source']}\n   -> {r['mutated']}")


def run_ci(runner: Runner, args) -> int:
    listed = json.loads(CI_FILE.read_text())["mutants"]
    modules = sorted({m["module"] for m in listed})
    found = {m.key: m for m in enumerate_mutants(modules, runner.copy)[0]}
    live = [(found[m["key"]], m) for m in listed if m["key"] in found]
    stale = [m["key"] for m in listed if m["key"] not in found]
    for key in stale:
        print(f"  stale (its line changed): {key}")
    t0 = time.perf_counter()
    # An entry naming the test that killed it (``test``, a pytest node id) meets that test alone:
    # all of them run once, together, on the unmutated tree first, and must pass there.
    nodes = sorted({e["test"] for _, e in live if e.get("test")})
    if nodes:
        outcome, dt, tail = runner.pytest([], None, tuple(nodes))
        if outcome != "survived":
            print(f"mutation --ci: the listed tests do not pass unmutated ({tail}); fix them first.")
            return 1
        print(f"  baseline {dt:6.1f} s  {len(nodes)} listed tests  ({tail})", flush=True)
    survived = []
    for i, (m, e) in enumerate(live, 1):
        r = runner.mutant(m, (e["test"],) if e.get("test") else ())
        print(
            f"  [{i}/{len(live)}] {r['outcome']:8} {r['seconds']:6.1f} s  {m.module}:{m.line} {m.operator}", flush=True
        )
        if r["outcome"] in ("survived", "error"):
            survived.append(r)
    packages = {m.package for m, _ in live}
    print(
        f"mutation --ci: {len(live) - len(survived)}/{len(live)} killed in {time.perf_counter() - t0:.0f} s "
        f"({len(stale)} stale; {len(packages)}/{len(PACKAGES)} packages)"
    )
    if survived:
        for r in survived:
            print(f"  {r['outcome']}: {r['module']}:{r['line']} {r['source']!r} -> {r['mutated']!r}")
        print("mutation --ci: a mutant that the tests used to kill now survives: a test lost its teeth.")
        return 1
    if len(live) < len(listed) / 2:
        print(
            "mutation --ci: most of the fixed mutants no longer exist; refresh benchmarks/mutation-ci.json "
            "with --write-ci."
        )
        return 1
    return 0


def write_ci(results: list[dict], per_package: int, meta: dict, copy: Path) -> None:
    """CI's fixed list from runs' results: per package of these results, the ``per_package``
    quickest kills by a hand-kept file (CI runs no coverage map), from HOT modules first, each
    with the test that killed it, which CI then runs alone against it. Packages these results do
    not hold keep the entries they had, less those whose line is gone (stale)."""
    old = json.loads(CI_FILE.read_text())["mutants"] if CI_FILE.exists() else []
    fresh: dict[str, list[dict]] = {}
    for r in results:
        test = r["pytest"]  # the node id pytest -ra named ("" or its last line when it named none)
        if r["outcome"] == "killed" and r.get("by_lists", True) and "::" in test and test.count("[") == test.count("]"):
            fresh.setdefault(r["package"], []).append(r)
    keep = []
    for rs in fresh.values():
        rs.sort(key=lambda r: (r["module"] not in HOT, r["seconds"], r["key"]))  # quick kills keep CI short
        keep += [{**r, "test": r["pytest"]} for r in rs[:per_package]]
    others = [e for e in old if not any(e["module"].startswith(p + "/") for p in fresh)]
    alive = {m.key for m in enumerate_mutants(sorted({e["module"] for e in others}), copy)[0]}
    keep += [e for e in others if e["key"] in alive]
    keep.sort(key=lambda r: (PACKAGES.index(next(p for p in PACKAGES if r["module"].startswith(p + "/"))), r["key"]))
    fields = ("key", "module", "line", "operator", "mutated", "seconds", "test")
    CI_FILE.write_text(
        json.dumps({**meta, "mutants": [{k: r[k] for k in fields if k in r} for r in keep]}, indent=1) + "\n"
    )
    print(
        f"wrote {len(keep)} mutants ({len({e['module'].split('/')[1] for e in keep})} packages) to {CI_FILE.relative_to(ROOT)}"
    )


def rescore(path: Path) -> int:
    """Print a saved run's summary with today's equivalents list: a survivor argued equivalent after
    the run leaves the score's denominator; nothing is rerun, so the kills are the run's own."""
    saved = json.loads(path.read_text())
    results, equivalent = saved["results"], equivalent_keys()
    for r in results:
        if r["outcome"] == "survived" and r["key"] in equivalent:
            r.update(outcome="equivalent", why=equivalent[r["key"]])
    totals = {p: s["mutants"] for p, s in saved["summary"].items()}
    annotations = {p: s["annotation_mutants_left_out"] for p, s in saved["summary"].items()}
    print(
        f"{saved.get('command', path)} ({saved.get('date', '?')}), rescored with "
        f"{EQUIVALENT_FILE.relative_to(ROOT)} as it is now:"
    )
    report(summarise(results, totals, annotations), results)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=40, help="mutants per package (default 40)")
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--all", action="store_true", help="every mutant (the full campaign)")
    ap.add_argument("--packages", nargs="+", default=list(PACKAGES), choices=PACKAGES)
    ap.add_argument("--modules", nargs="+", help="only these modules (paths from the repository root)")
    ap.add_argument("--keys", help="a JSON file of results: rerun exactly those mutants (e.g. survivors)")
    ap.add_argument("--json", help="write the summary and every result here")
    ap.add_argument("--list", action="store_true", help="count the mutants and stop")
    ap.add_argument("--ci", action="store_true", help="run CI's fixed set (benchmarks/mutation-ci.json)")
    ap.add_argument(
        "--write-ci",
        type=int,
        metavar="N",
        help="write N of this run's killed mutants per package (hot modules first) into CI's fixed set, "
        "keeping the entries of the packages this run did not sample",
    )
    ap.add_argument(
        "--ci-from",
        nargs="+",
        metavar="JSON",
        help="with --write-ci: take the kills from these saved runs (--json) instead of running anything",
    )
    ap.add_argument(
        "--lists-only",
        action="store_true",
        help="only the hand-kept test files, no coverage map (as runs before seed 34)",
    )
    ap.add_argument(
        "--covering-seconds",
        type=float,
        default=180.0,
        help="per mutant, run the covering tests, quickest first, up to this many seconds of them "
        "(default 180; the rest are left out, so the score is a lower bound)",
    )
    ap.add_argument("--timeout-factor", type=float, default=4.0, help="a mutant's limit: this x the clean run")
    ap.add_argument(
        "--coverage-map",
        metavar="JSON",
        help="use this coverage map (one .mutation-cache/coverage-*.json) instead of the current tree's; "
        "for surveys while the tree changes: a line that moved since it was built meets the wrong tests",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="mutants run at once, each in its own copy of the tree (default 1; on a shared machine "
        "more jobs than idle cores slows every test and can turn kills into timeouts)",
    )
    ap.add_argument(
        "--without-tests",
        nargs="+",
        default=[],
        metavar="FILE",
        help="test files (names under tests/) left out of the private copies: to measure a sample "
        "on the suite as it was before the tests written for its survivors",
    )
    ap.add_argument(
        "--rescore",
        metavar="JSON",
        help="a saved run (--json): its summary again, with survivors argued equivalent since then as such",
    )
    args = ap.parse_args(argv)
    if args.rescore:
        return rescore(Path(args.rescore))
    if args.ci_from:
        if not args.write_ci:
            ap.error("--ci-from needs --write-ci N")
        saved = [json.loads(Path(f).read_text()) for f in args.ci_from]
        meta = {
            "date": time.strftime("%Y-%m-%d"),
            "command": "benchmarks/mutation.py --write-ci {} from: {}".format(
                args.write_ci, "; ".join(f"{d.get('command', '?')} ({d.get('date', '?')})" for d in saved)
            ),
        }
        write_ci([r for d in saved for r in d["results"]], args.write_ci, meta, ROOT)
        return 0
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        print("mutation: cosmic-ray is not installed; install the test extra (pip install -e '.[test]').")
        return 2

    with tempfile.TemporaryDirectory(prefix="tracekit-mutation-") as tmp:
        copy = make_copy(Path(tmp))
        for name in args.without_tests:
            (copy / "tests" / name).unlink()
        if args.ci:  # CI's fixed set was killed by the hand-kept files; it needs no coverage map
            return run_ci(Runner(copy, args.timeout_factor), args)
        coverage = None if args.lists_only or args.list else CoverageMap.build(copy, args.coverage_map)
        runner = Runner(copy, args.timeout_factor, coverage, args.covering_seconds)
        # Mutants are drawn from the copy, the code they are applied to: the working tree may be
        # edited while the coverage map builds (a run drawn from it once mutated lines the copy lacked).
        modules = {p: [m for m in modules_of(p, copy) if not args.modules or m in args.modules] for p in args.packages}
        t0 = time.perf_counter()
        population, totals, annotations = {}, {}, {}
        for pkg, mods in modules.items():
            population[pkg], annotations[pkg] = enumerate_mutants(mods, copy) if mods else ([], 0)
            totals[pkg] = len(population[pkg])
        print(
            f"enumerated {sum(totals.values())} mutants in {time.perf_counter() - t0:.0f} s "
            f"({sum(annotations.values())} in annotations left out): "
            + ", ".join(f"{p} {n}" for p, n in totals.items()),
            flush=True,
        )
        if args.list:
            return 0
        if args.keys:
            wanted = {r["key"] for r in json.loads(Path(args.keys).read_text())["results"]}
            chosen = {p: [m for m in ms if m.key in wanted] for p, ms in population.items()}
        elif args.all:
            chosen = population
        else:  # one generator per package, so that adding a package does not change another's sample
            chosen = {
                p: sorted(
                    random.Random(f"{args.seed}:{p}").sample(ms, min(args.sample, len(ms))),
                    key=lambda m: (m.module, m.occurrence, m.operator),
                )
                for p, ms in population.items()
            }
        equivalent = equivalent_keys()
        # The packages take turns (one mutant of each, then the next of each...), so a run stopped
        # partway has measured every package alike instead of the first ones whole.
        todo = [m for row in itertools.zip_longest(*chosen.values()) for m in row if m is not None]
        runners = [runner] + [runner.twin(make_copy(Path(tmp) / f"job{j}")) for j in range(1, max(1, args.jobs))]
        for r in runners[1:]:
            for name in args.without_tests:
                (r.copy / "tests" / name).unlink()
        meta = {
            "seed": args.seed,
            "sample": None if args.all else args.sample,
            "date": time.strftime("%Y-%m-%d"),
            "command": " ".join(["benchmarks/mutation.py", *(argv if argv is not None else sys.argv[1:])]),
        }

        def save(results: list[dict], path: str | None = args.json) -> None:
            if path:
                summary = summarise(results, totals, annotations)
                Path(path).write_text(
                    json.dumps(
                        {**meta, "seconds": round(time.perf_counter() - t0), "summary": summary, "results": results},
                        indent=1,
                    )
                )

        # The results so far go to FILE.partial as they come (``--rescore`` reads it), so a run
        # stopped partway (a test file that no longer passes clean stops it) keeps what it measured.
        results = run_all(
            runners, todo, equivalent, (lambda done: save(done, args.json + ".partial")) if args.json else None
        )
        summary = summarise(results, totals, annotations)
        report(summary, results)
        save(results)
        if args.json and Path(args.json + ".partial").exists():
            Path(args.json + ".partial").unlink()
        if args.write_ci:
            write_ci(results, args.write_ci, meta, copy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
