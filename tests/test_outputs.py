"""Where outputs go: checked before any slow work, never a traceback, nothing lost."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from conftest import real_trace_path

from tracekit.cli import main

SMALL = "b300_moe"  # a small real trace: quick to read


def _never(*_a, **_k):
    raise AssertionError("the trace was read before the output path was checked")


@pytest.mark.parametrize(
    "command, target", [("report", "/proc/x.html"), ("compare", "/sys/c.html"), ("project", "/proc/p.html")]
)
def test_unwritable_outputs_fail_before_reading(command, target, monkeypatch):
    import tracekit.cli.compare as cmp_cli
    import tracekit.cli.project as prj_cli
    import tracekit.cli.report as rep_cli

    for mod in (rep_cli, cmp_cli, prj_cli):
        monkeypatch.setattr(mod, "read_with_progress", _never)
    path = str(real_trace_path(SMALL))
    args = {"report": [path], "compare": [path, path], "project": [path, "--to", "h100-sxm"]}[command]
    r = CliRunner().invoke(main, [command, *args, "-o", target])
    assert r.exit_code == 2, r.output
    assert f"cannot write {target}" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_missing_parent_and_folder_targets(tmp_path):
    path = str(real_trace_path(SMALL))
    r = CliRunner().invoke(main, ["report", path, "-o", str(tmp_path / "no" / "such" / "r.html")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = CliRunner().invoke(main, ["report", path, "-o", str(tmp_path)])
    assert r.exit_code == 2 and "is a folder" in r.output


def test_dev_null_and_stdout_work():
    path = str(real_trace_path(SMALL))
    for args in (
        ["report", path, "-o", "/dev/null"],
        ["report", path, "-o", "/dev/null", "-f", "json"],
        ["compare", path, path, "-o", "/dev/null"],
    ):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")  # still the device
    out = CliRunner().invoke(main, ["report", path, "-o", "-", "-f", "json"])
    assert out.exit_code == 0 and out.output.lstrip().startswith("{")


def test_default_reports_are_replaced_explicit_files_are_not(tmp_path, monkeypatch):
    path = str(real_trace_path(SMALL))
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    first = runner.invoke(main, ["report", path])
    again = runner.invoke(main, ["report", path])
    assert first.exit_code == 0 and first.output.startswith("wrote reports/")
    assert again.exit_code == 0 and again.output.startswith("replaced reports/")
    assert runner.invoke(main, ["report", path, "-o", "mine.html"]).exit_code == 0
    kept = runner.invoke(main, ["report", path, "-o", "mine.html"])
    assert kept.exit_code == 2 and "--force" in kept.output
    assert runner.invoke(main, ["report", path, "-o", "mine.html", "--force"]).exit_code == 0


def test_a_rerun_gate_fails_the_same_way(tmp_path, monkeypatch):
    path = str(real_trace_path(SMALL))
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    # A gate on a figure the runs lack exits 2 saying so; a second run must fail the same way,
    # not on the report it wrote the first time.
    runs = [runner.invoke(main, ["compare", path, path, "--fail-if", "tpot_p50>+5%"]) for _ in range(2)]
    assert [r.exit_code for r in runs] == [2, 2]
    assert all("neither run has TPOT p50" in r.output and "--force" not in r.output for r in runs)


def test_collect_checks_its_output_before_running(monkeypatch):
    pytest.importorskip("torch")
    from tracekit.collect import workloads

    monkeypatch.setattr(workloads, "load_preset", _never)
    r = CliRunner().invoke(main, ["collect", "-o", "/sys/t"])
    assert r.exit_code == 2 and "cannot write /sys/t" in r.output and "Traceback" not in r.output


def test_collect_keeps_the_trace_when_the_last_move_fails(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from tracekit import read_trace
    from tracekit.collect import CollectOptions, collect
    from tracekit.errors import TracekitError

    real = os.replace

    def failing(src, dst):
        if str(dst).endswith(".pt.trace.json.gz"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(TracekitError) as e:
        collect(
            CollectOptions(
                preset="tiny",
                batch_size=1,
                prompt_len=8,
                new_tokens=2,
                output=str(tmp_path / "t"),
                progress=False,
                threads=1,
                calibrate=False,
                warmup=0,
            )
        )
    kept = str(e.value).rsplit("it is kept at ", 1)[1]
    assert "No space left" in str(e.value) and os.path.exists(kept)
    assert len(read_trace(kept).cpu_ops) > 0
