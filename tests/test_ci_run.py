"""CI runs what it claims: no Chromium is a failure, not a quiet skip (issue #27, part 3)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _stub_path(tmp_path: Path) -> Path:
    """A PATH holding only what .ci/run needs before its first real step, and an apt-get that fails."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("dirname",):
        (bin_ / tool).symlink_to(shutil.which(tool))
    apt = bin_ / "apt-get"
    apt.write_text("#!/bin/sh\necho 'E: Unable to locate package chromium' >&2\nexit 100\n")
    apt.chmod(0o755)
    return bin_


def test_ci_run_stops_when_chromium_cannot_be_installed(tmp_path):
    """Fails if .ci/run goes on (to `make test`, where the browser tests would skip) after the
    Chromium install failed, or says nothing about why."""
    bash = shutil.which("bash")
    r = subprocess.run(
        [bash, str(ROOT / ".ci" / "run")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(_stub_path(tmp_path)), "HOME": str(tmp_path)},
    )
    assert r.returncode != 0
    assert "chromium could not be installed" in r.stderr
    assert "make" not in r.stdout + r.stderr  # stopped before `make test` (absent from PATH here)


def test_browser_tests_fail_without_chromium_under_ci(tmp_path):
    """Fails if, with CI=true and no Chromium on the machine, the browser tests skip (a green CI
    that never opened a page) instead of failing with the reason."""
    site = tmp_path / "site"
    site.mkdir()
    # Hide every Chromium from find_chromium (it asks shutil.which, absolute paths included).
    (site / "sitecustomize.py").write_text(
        "import shutil\n_which = shutil.which\n"
        "shutil.which = lambda name, *a, **k: None if 'chrom' in str(name) else _which(name, *a, **k)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "hostile",
        str(ROOT / "tests" / "test_compare_browser.py"),
    ]
    ci = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**env, "CI": "true"}, timeout=300)
    assert ci.returncode == 1, ci.stdout[-2000:]
    assert "CI=true but no Chromium was found" in ci.stdout
    # Outside CI the same run skips with its reason: the failure above is CI's, not a broken test.
    env.pop("CI", None)
    local = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout[-2000:]
