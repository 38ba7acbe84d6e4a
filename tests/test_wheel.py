"""The wheel works on its own (issue 51, part 4): built, installed into a fresh virtual environment
outside the checkout, and run from there.

The sdist is built from the checkout and the wheel from the sdist (``python -m build
--no-isolation``: no network; hatchling comes from this environment), so a file the sdist leaves
out is missing from the wheel too. The wheel goes into a new virtual environment in the test's
temporary folder with ``pip install --no-deps --no-index``. The runtime dependencies come from
this environment without the network: a ``.pth`` file in the new environment's site-packages names
this environment's site-packages, which appends that folder to ``sys.path`` but does not process
the ``.pth`` files inside it, so the editable install's path to the checkout is not followed and
only the installed wheel can be imported as ``tracekit``. Every command runs with its working
directory in the temporary folder, outside the checkout.

Runs in ``make test``: it skips only when ``build`` or ``hatchling`` is not installed and ``CI`` is
unset; under ``CI=true`` their absence is a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE_TRACES

import tracekit

pytestmark = pytest.mark.slow

SAMPLE = "tiny-bs8"


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    reason = f"{module} is not installed (pip install -e '.[test]')"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true but {reason}: the wheel test must run in CI")
    pytest.skip(reason)


def _clean_env(cwd: Path) -> dict[str, str]:
    """This process's environment without anything that points Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PWD"] = str(cwd)
    return env


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, cwd=cwd, env=_clean_env(cwd), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


class Installed:
    """The built distributions and the virtual environment the wheel was installed into."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.dist = base / "dist"
        self.venv = base / "venv"
        self.work = base / "work"
        self.work.mkdir()
        self.python = self.venv / "bin" / "python"
        self.tracekit = self.venv / "bin" / "tracekit"

    @property
    def wheel(self) -> Path:
        (whl,) = self.dist.glob("tracekit-*.whl")
        return whl

    @property
    def sdist(self) -> Path:
        (tgz,) = self.dist.glob("tracekit-*.tar.gz")
        return tgz

    def site_packages(self) -> Path:
        out = _run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], self.work)
        return Path(out.stdout.strip())


def _our_site_packages() -> list[str]:
    return sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    _require("build")
    _require("hatchling")
    inst = Installed(tmp_path_factory.mktemp("wheel"))
    # sdist from the checkout, then the wheel from the sdist.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(inst.dist), str(ROOT)], inst.work)
    # A venv of the base interpreter, without pip (installed with this environment's pip below).
    _run([sys.executable, "-m", "venv", "--without-pip", str(inst.venv)], inst.work)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(inst.python),
            "--disable-pip-version-check",
            "install",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
            str(inst.wheel),
        ],
        inst.work,
    )
    # The runtime dependencies from this environment: its site-packages appended to sys.path.
    (inst.site_packages() / "zz_tracekit_test_deps.pth").write_text("".join(f"{p}\n" for p in _our_site_packages()))
    shutil.copy(SAMPLE_TRACES / f"{SAMPLE}.pt.trace.json.gz", inst.work)
    shutil.copy(SAMPLE_TRACES / f"{SAMPLE}.tracekit.json", inst.work)
    return inst


def _package_files() -> set[str]:
    """Every file the installed package needs besides its modules: data under tracekit/ and the
    top-level templates/ (force-included as tracekit/templates)."""
    found = set()
    for folder, dirs, files in os.walk(ROOT / "tracekit"):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".pyc", ".pyo")):
                found.add((Path(folder) / name).relative_to(ROOT).as_posix())
    found |= {f"tracekit/templates/{p.name}" for p in (ROOT / "templates").iterdir() if p.is_file()}
    return found


def test_wheel_holds_every_package_file(installed):
    """Fails if a file of the package is missing from the wheel: the report templates (the
    force-include of templates/ as tracekit/templates dropped), the GPU spec database, the
    category factors or links tables (tracekit/specs/*.json), the model registry
    (tracekit/models/registry.json), or a module a new subpackage added; and if the sdist lacks
    the top-level templates/ the wheel is built from."""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = sorted(_package_files() - names)
    assert not missing, f"not in {installed.wheel.name}: {missing}"
    with tarfile.open(installed.sdist) as tar:
        top = f"tracekit-{tracekit.__version__}/"
        sdist_names = {n.removeprefix(top) for n in tar.getnames()}
    assert {f"templates/{p.name}" for p in (ROOT / "templates").iterdir()} <= sdist_names
    assert {"README.md", "pyproject.toml", "CHANGELOG.md"} <= sdist_names


def test_installed_package_is_the_wheel_not_the_checkout(installed):
    """Fails if the checkout leaks into the new environment (then every other check here would
    test the checkout, not the wheel): tracekit imported from outside the new venv, the checkout
    on sys.path, or the templates found through the checkout's templates/ fallback. Also fails if
    a data file the code opens through importlib.resources (the spec database, category factors,
    links, the model registry) cannot be read from the installed package."""
    probe = """
import json, sys
import tracekit
from tracekit.models import registry
from tracekit.report.templating import template_dirs
from tracekit.specs import database, factors, links
print(json.dumps({
    "file": tracekit.__file__,
    "path": sys.path,
    "templates": template_dirs(),
    "gpus": len(database.all_specs()),
    "factors": bool(factors.table()),
    "links": bool(links.table()),
    "models": len(registry.registry_entries()),
}))
"""
    out = json.loads(_run([str(installed.python), "-c", probe], installed.work).stdout)
    venv = installed.venv.resolve()
    assert Path(out["file"]).resolve().is_relative_to(venv), out["file"]
    checkout = ROOT.resolve()
    # Inside the checkout only the folders the .pth appended (this environment's site-packages,
    # which is .venv/ of the checkout when the tests run there): never the checkout itself.
    appended = {Path(p).resolve() for p in _our_site_packages()}
    on_path = [p for p in out["path"] if p and Path(p).resolve().is_relative_to(checkout)]
    assert {Path(p).resolve() for p in on_path} <= appended, f"the checkout {checkout} is on sys.path: {out['path']}"
    assert checkout not in {Path(p).resolve() for p in out["path"] if p}
    assert out["templates"] and all(Path(t).resolve().is_relative_to(venv) for t in out["templates"]), out["templates"]
    assert out["gpus"] > 10 and out["models"] > 10 and out["factors"] and out["links"]


def test_installed_report_and_summary_run_outside_the_checkout(installed):
    """Fails if the installed command line cannot report a trace from a folder outside the
    checkout: the console script missing (project.scripts), a runtime dependency not declared
    (an import error), templates missing or unreadable from the wheel (report and summary
    render through Jinja2 templates), the spec database missing (the CPU spec row), or Bokeh's
    inline resources not found."""
    trace = f"{SAMPLE}.pt.trace.json.gz"
    work = installed.work
    _run([str(installed.tracekit), "report", trace, "-o", "out.html"], work)
    html = (work / "out.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html>")
    assert f'<meta name="generator" content="tracekit {tracekit.__version__}">' in html
    assert "TTFT" in html and len(html) > 50_000  # the page with its charts, not an error stub
    _run([str(installed.tracekit), "report", trace, "--format", "md", "-o", "out.md"], work)
    assert "TTFT" in (work / "out.md").read_text(encoding="utf-8")
    summary = _run([str(installed.tracekit), "summary", trace], work).stdout
    assert trace in summary and "TTFT" in summary and "headline figures" in summary


def test_one_version_everywhere(installed):
    """Fails if the version has more than one source and they drift: pyproject.toml states a
    version of its own instead of reading tracekit/__init__.py (dynamic, tool.hatch.version), or
    the wheel's file name, its metadata, importlib.metadata in the installed environment and
    `tracekit --version` disagree with tracekit.__version__."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "tracekit/__init__.py"
    init = (ROOT / "tracekit" / "__init__.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "([^"]+)"$', init, flags=re.M) == [tracekit.__version__]

    version = tracekit.__version__
    assert installed.wheel.name.startswith(f"tracekit-{version}-")
    assert installed.sdist.name == f"tracekit-{version}.tar.gz"
    metadata = zipfile.ZipFile(installed.wheel).read(f"tracekit-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata
    probe = "import importlib.metadata as m, tracekit; print(m.version('tracekit'), tracekit.__version__)"
    assert _run([str(installed.python), "-c", probe], installed.work).stdout.split() == [version, version]
    out = _run([str(installed.tracekit), "--version"], installed.work).stdout
    assert out.strip() == f"tracekit, version {version}"


def test_distributions_pass_twine_check(installed):
    """Fails if PyPI would refuse the distributions' metadata, e.g. a README that does not render
    as the long description, or a missing name or version."""
    _require("twine")
    r = _run(
        [sys.executable, "-m", "twine", "check", "--strict", str(installed.wheel), str(installed.sdist)], installed.work
    )
    assert r.stdout.count("PASSED") == 2, r.stdout
