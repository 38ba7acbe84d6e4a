"""benchmarks/gpu_check.sh (issue 51, part 6): on this CPU machine it says it found no GPU and
exits 0 with its plan; with a GPU assumed and a stand-in `tracekit collect` it runs every step,
goes on past a failed or hung one, and its table says what held."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE_TRACES

SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
BASH = shutil.which("bash")
TRACEKIT = Path(sys.executable).with_name("tracekit")

PRESETS = ("tiny", "8b")
BATCHES = (1, 16)
MODES = {"eager": None, "graphs": "--cuda-graphs", "compiled": "--compile"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CHECK_")}
    env.update({"PYTHON": sys.executable, "TRACEKIT": str(TRACEKIT), **extra})
    return env


def _torch_sees_a_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_script_parses():
    """Fails if the script has a bash syntax error (it would only show on a GPU machine)."""
    r = subprocess.run([BASH, "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(_torch_sees_a_gpu(), reason="this machine has a GPU: the script would run its checks")
def test_without_a_gpu_it_says_so_and_exits_0(tmp_path):
    """Fails if, on a machine without a GPU, the script fails (a CPU CI job would go red), does not
    say in its first line that it found no GPU, writes anything, or leaves out its plan."""
    out = tmp_path / "out"
    r = subprocess.run(
        [BASH, str(SCRIPT), str(out)], capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("gpu_check: found no GPU (") and first.endswith("so nothing was run."), first
    assert "Plan: 12 runs" in r.stdout
    assert not out.exists()


def test_without_torch_or_smi_tools_there_is_no_gpu(tmp_path):
    """Fails if the fallback breaks: a Python that cannot import torch, with neither nvidia-smi nor
    rocm-smi on PATH, must read as no GPU (exit 0), not as a failure."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("dirname", "timeout", "sed", "cat", "date", "mkdir"):
        if shutil.which(tool):
            (bin_ / tool).symlink_to(shutil.which(tool))
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    no_torch.chmod(0o755)
    r = subprocess.run(
        [BASH, str(SCRIPT), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(PATH=str(bin_), PYTHON=str(no_torch)),
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "found no GPU" in r.stdout and "neither nvidia-smi nor rocm-smi" in r.stdout


def test_dry_run_plan_names_every_preset_batch_and_mode(tmp_path):
    """Fails if the plan leaves out a combination of preset (tiny, 8b), batch (1, 16) and mode
    (eager, CUDA graphs, compiled), or a run's collect command lacks its batch or mode flag."""
    r = subprocess.run(
        [BASH, str(SCRIPT), "--dry-run", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(),
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("  ") and " collect " in line}
    for preset in PRESETS:
        for batch in BATCHES:
            for mode, flag in MODES.items():
                name = f"{preset}-bs{batch}-{mode}"
                assert name in lines, f"{name} missing from the plan:\n{r.stdout}"
                words = lines[name].split()
                assert words[words.index("--preset") + 1] == preset
                assert words[words.index("--batch-size") + 1] == str(batch)
                assert words[words.index("--output") + 1] == f"{tmp_path / 'o'}/{name}"
                for other in ("--cuda-graphs", "--compile"):
                    assert (other in words) == (other == flag), (name, words)
    assert len(lines) == len(PRESETS) * len(BATCHES) * len(MODES)


STAND_IN = """#!/usr/bin/env bash
# A stand-in tracekit: `collect` writes a sample trace and a sidecar that says an H100 measured
# plausible ceilings (compiled runs fail, CUDA-graph runs hang); everything else is the real one.
set -euo pipefail
if [ "$1" != collect ]; then exec {tracekit} "$@"; fi
out=""; prev=""
for a in "$@"; do if [ "$prev" = --output ]; then out=$a; fi; prev=$a; done
case " $* " in
  *" --compile "*) echo "torch._dynamo: compile failed (stand-in)" >&2; exit 1 ;;
  *" --cuda-graphs "*) exec sleep 60 ;;
esac
cp {trace} "$out.pt.trace.json.gz"
cp {sidecar} "$out.tracekit.json"
"""


@pytest.mark.slow
def test_on_a_gpu_every_step_runs_and_failures_are_rows(tmp_path):
    """With the GPU assumed and a stand-in collect: fails if a failed collect (compiled) or a hung
    one (CUDA graphs, past the step limit) stops the script instead of becoming a FAIL row; if the
    run that worked lacks its ceiling checks against the H100 row, its report, JSON checks or
    summary; if the exact command is not recorded beside the trace; or if the script exits 0
    although checks failed."""
    sidecar = json.loads((SAMPLE_TRACES / "tiny-bs8.tracekit.json").read_text())
    sidecar["calibration"].update(
        device="cuda",
        device_name="NVIDIA H100 80GB HBM3",
        dtype="bf16",
        matmul_flops={"bf16": 650e12},
        copy_bandwidth=2.9e12,
        checks={"reliable": True, "problems": [], "attempts": 3},
    )
    (tmp_path / "h100.tracekit.json").write_text(json.dumps(sidecar))
    stand_in = tmp_path / "tracekit"
    stand_in.write_text(
        STAND_IN.format(
            tracekit=TRACEKIT,
            trace=SAMPLE_TRACES / "tiny-bs8.pt.trace.json.gz",
            sidecar=tmp_path / "h100.tracekit.json",
        )
    )
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    env = _env(
        TRACEKIT=str(stand_in),
        GPU_CHECK_ASSUME_GPU="1",
        GPU_CHECK_PRESETS="tiny",
        GPU_CHECK_BATCHES="8",
        GPU_CHECK_MODES="eager graphs compiled",
        GPU_CHECK_COLLECT_TIMEOUT="5",
    )
    r = subprocess.run(
        [BASH, str(SCRIPT), str(out)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=400
    )
    assert r.returncode == 1, r.stdout + r.stderr
    rows = [line.split("\t") for line in (out / "results.tsv").read_text().splitlines()[1:]]
    result = {(run, check): res for run, check, res, _ in rows}
    figure = {(run, check): fig for run, check, _, fig in rows}
    ok = "tiny-bs8-eager"
    for check in (
        "collect",
        "spec row",
        "matmul bf16 vs spec",
        "copy bandwidth vs spec",
        "calibration reliable",
        "report html",
        "report json",
        "steps",
        "batch",
        "graph replay",
        "latency",
        "summary",
    ):
        assert result.get((ok, check)) == "PASS", (check, rows)
    assert "0.66 x peak" in figure[(ok, "matmul bf16 vs spec")]
    # The sample is a CPU trace beside a sidecar that says H100: the report finds no GPU row and
    # shows no MFU or MBU, failures the table must show.
    assert result[(ok, "report GPU row")] == "FAIL"
    assert result[(ok, "MFU/MBU <= 1")] == "FAIL" and figure[(ok, "MFU/MBU <= 1")] == "none shown"
    assert result[("tiny-bs8-compiled", "collect")] == "FAIL"
    assert "compile failed (stand-in)" in figure[("tiny-bs8-compiled", "collect")]
    assert result[("tiny-bs8-graphs", "collect")] == "FAIL"
    assert "timed out after 5 s" in figure[("tiny-bs8-graphs", "collect")]
    assert [check for run, check, *_ in rows if run != ok] == ["collect", "collect"]  # nothing after a failed collect
    for suffix in (".pt.trace.json.gz", ".tracekit.json", ".html", ".report.json", ".summary.txt"):
        assert (out / f"{ok}{suffix}").is_file(), suffix
    command = (out / f"{ok}.command").read_text().splitlines()
    assert command[0].startswith(f"# {ok}: collected by benchmarks/gpu_check.sh")
    assert command[1].split()[1:3] == ["collect", "--preset"] and f"--output {out}/{ok}" in command[1]
    table = (out / "table.txt").read_text()
    assert table in r.stdout and "checks failed" in table and "tiny-bs8-compiled" in table
