"""The names a script imports from ``tracekit`` itself: each resolves, and each is the stage it names.

The top-level names are resolved lazily from where each now lives (``tracekit._HOMES``), so a
module moved without its entry there would only fail when a user first asked for the name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "tiny-bs8.pt.trace.json.gz"


def test_every_exported_name_resolves():
    # Caught: an entry in __all__ whose module moved (ImportError or AttributeError on first use),
    # and a name missing from dir(tracekit), where tab completion looks.
    for name in tracekit.__all__:
        assert getattr(tracekit, name) is not None, name
        assert name in dir(tracekit), name
    with pytest.raises(AttributeError):
        tracekit.not_a_name  # noqa: B018


@pytest.fixture(scope="module")
def analysis():
    return tracekit.analyze(tracekit.read_trace(str(SAMPLE)))


def test_analyze_is_the_pipeline_the_command_line_runs(analysis, tmp_path):
    # Caught: tracekit.analyze bound to another function (merge's, a stage's) than the one
    # `tracekit report` runs: the two documents would differ.
    out = tmp_path / "r.json"
    subprocess.run(
        [sys.executable, "-m", "tracekit", "report", str(SAMPLE), "--format", "json", "-o", str(out)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    assert json.loads(json.dumps(analysis.to_dict(), default=str)) == json.loads(out.read_text())


def test_compare_of_a_run_with_itself_changes_nothing(analysis):
    # x - x = 0 for every headline figure both sides have. Caught: the compare package's
    # ``compare`` bound to something that does not subtract the two runs.
    from tracekit.compare import compare

    doc = compare(analysis, analysis).to_dict()
    assert doc["kind"] == "tracekit.comparison"
    both = [f for f in doc["headline"] if f["before"] is not None]
    assert both, "the sample run has headline figures"
    for f in both:
        assert f["after"] == f["before"] and f["delta"] == 0, f["key"]
        assert f["verdict"] != "worse", f["key"]
