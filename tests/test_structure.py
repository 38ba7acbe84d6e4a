"""The package's shape: public seams, modules of one job, arrows that run one way.

Read from the source with ``ast``, so that a multi-line or relative import counts the same as a
one-line absolute one (a grep for ``^from tracekit... import _x`` misses both), and so that the
test needs nothing imported. Each check first asserts it found what it walks, so that a wrong
root or a parse that finds nothing fails rather than passing on an empty set.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tracekit"
# 500 lines as the code was first written; x1.25 since it was formatted (issue 51): ruff format
# spread the same code over a median 12% (90th percentile 27%) more lines per module.
MAX_LINES = 625


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for __init__)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _base(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        package = package.rsplit(".", 1)[0]
    return f"{package}.{node.module}" if node.module else package


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of import nodes that sit under ``if TYPE_CHECKING:`` (never run, so no circle)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for sub in ast.walk(inner):
                    skip.add(id(sub))
    return skip


def _imports(module: str):
    """(target module, imported name or None, bound local name, runs at import or call) per import."""
    tree = ast.parse(MODULES[module].read_text())
    typing_only = _type_checking_only(tree)
    for node in ast.walk(tree):
        runs = id(node) not in typing_only
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tracekit"):
                    yield alias.name, None, alias.asname or alias.name, runs
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            if not base.startswith("tracekit"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:  # `from package import module`
                    yield sub, None, alias.asname or alias.name, runs
                else:
                    yield base, alias.name, alias.asname or alias.name, runs


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_walk_finds_the_package():
    # Bug caught: a moved root or a glob that finds nothing would make every check below vacuous.
    assert len(MODULES) > 100
    assert "tracekit.analysis.analyze" in MODULES
    assert any(target == "tracekit.analysis.model" for target, *_ in _imports("tracekit.analysis.analyze"))


def test_no_private_name_crosses_a_module():
    # A seam one module uses from another is public and documented, or it moves to where it is
    # used. Caught: `from ..idle import _Coverage`, also split over lines or relative, and
    # `idle._name_mask` read through an imported module.
    crossings = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        bound_modules = {}
        for target, name, local, _ in _imports(module):
            if name is None:
                # A plain `import a.b` binds `a`, not the module: its dotted name never matches a Name.
                bound_modules[local] = target
            elif _private(name) and target != module:
                crossings.append(f"{module} imports {target}.{name}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound_modules
                and bound_modules[node.value.id] != module
            ):
                crossings.append(f"{module} reads {bound_modules[node.value.id]}.{node.attr}")
    assert not sorted(set(crossings)), "private names used across modules:\n" + "\n".join(sorted(set(crossings)))


def test_the_private_check_sees_what_it_should():
    # The check above is only as good as its parse: a relative, multi-line import of a private
    # name must be seen as one. Caught: `_base` resolving relative imports from the wrong package.
    node = ast.parse("from ..analysis.waiting.idle import (\n    CAUSES,\n    _Coverage,\n)").body[0]
    assert _base("tracekit.whatif.project", node) == "tracekit.analysis.waiting.idle"
    assert _base("tracekit.analysis", ast.parse("from .model import _x").body[0]) == "tracekit.analysis.model"
    assert [a.name for a in node.names if _private(a.name)] == ["_Coverage"]


def test_no_module_is_over_the_line_limit():
    # Modules of one job: a file past 500 lines has always turned out to hold two.
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _graph() -> dict[str, set[str]]:
    graph = {name: set() for name in MODULES}
    for module in MODULES:
        for target, _, _, runs in _imports(module):
            if runs and target in MODULES and target != module:
                graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative so it terminates
    on any graph without recursion limits)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle():
    # Caught: a finder that never reports (the check below would pass on anything).
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    # Imports made inside functions count: a lazy import that only hides a circle still ties the
    # two modules together. Imports under TYPE_CHECKING never run and do not count.
    graph = _graph()
    assert sum(len(v) for v in graph.values()) > 200
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_pipeline_arrows_run_one_way():
    # cli -> compare/whatif -> analysis -> trace/frameworks/models/specs: analysis never builds on
    # comparing or projecting, nothing below the CLI and the renderers on them, and the lower
    # layers never on analysis. Caught: whatif.plan importing tracekit.report for its numbers.
    graph = _graph()
    wrong = []
    for module, targets in graph.items():
        for target in targets:
            if module.startswith("tracekit.analysis") and target.startswith(
                ("tracekit.compare", "tracekit.whatif", "tracekit.cli", "tracekit.report")
            ):
                wrong.append(f"{module} -> {target}")
            # Comparing and projecting build documents that the renderers and the CLI show.
            if module.startswith(("tracekit.compare", "tracekit.whatif")) and target.startswith(
                ("tracekit.cli", "tracekit.report")
            ):
                wrong.append(f"{module} -> {target}")
            if module.startswith(
                ("tracekit.trace", "tracekit.frameworks", "tracekit.models", "tracekit.specs")
            ) and target.startswith(("tracekit.analysis", "tracekit.compare", "tracekit.whatif", "tracekit.cli")):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "arrows against the pipeline:\n" + "\n".join(sorted(wrong))


def test_every_module_says_its_job():
    # A newcomer finds a stage by its folder's docstring (what it takes and gives) and a module's
    # job by its own. Caught: a new module or stage folder added without one.
    silent = [name for name, path in MODULES.items() if not ast.get_docstring(ast.parse(path.read_text()))]
    assert not silent, f"modules without a docstring: {silent}"
    for stage in ("steps", "pricing", "waiting", "findings"):
        doc = ast.get_docstring(ast.parse(MODULES[f"tracekit.analysis.{stage}"].read_text()))
        assert "Takes" in doc and "gives" in doc, f"analysis.{stage} does not say what it takes and gives"
