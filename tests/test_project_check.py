"""``tracekit project SOURCE --to GPU --check TARGET_TRACE``: the projection beside the same workload
measured on the target, and refusals when the two traces are not the same work."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import read_real, real_trace_path

from tracekit.analysis.analyze import analyze
from tracekit.cli import main
from tracekit.errors import TracekitError
from tracekit.specs import cpu_entry
from tracekit.whatif.check import check
from tracekit.whatif.project import project

MOE = "qwen3-30b-a3b"
PAIRS = [("b300_qwen3_moe", "mi300x_qwen3_moe", "mi300x"), ("mi300x_qwen3_moe", "b300_qwen3_moe", "b300")]


def _by_category(work, phase):
    w = work[work["phase"].astype(str) == phase]
    return (w.groupby(w["category"].astype(str), observed=True)["dur_ns"].sum() / 1e6).to_dict()


@pytest.mark.parametrize("src, dst, gpu", PAIRS)
def test_check_measures_the_target_and_errors_are_projected_over_measured(src, dst, gpu):
    """Fails if the check's measured side is not the target trace's own figures (e.g. the
    source's, or the projection's), or if an error is not projected / measured - 1."""
    pj = project(read_real(src), gpu, model=MOE)
    target = analyze(read_real(dst), model=MOE)
    c = check(pj, target).to_dict()
    assert list(c["phases"]) == ["decode"]
    d = c["phases"]["decode"]
    # Oracle from the target's steps table: busy time of its decode steps, per step.
    steps = target.steps[target.steps["phase"] == "decode"]
    assert d["steps"] == len(steps) == 1
    assert d["measured_ms"] == pytest.approx(steps["gpu_busy_ns"].sum() / 1e6 / len(steps), rel=1e-9)
    assert d["measured_ms"] != pytest.approx(pj.phases["decode"]["measured_gpu_busy_ms"], rel=0.05)  # not the source
    assert d["projected_ms"] == pytest.approx(pj.phases["decode"]["projected_gpu_busy_ms"], rel=1e-9)
    assert d["error"] == pytest.approx(d["projected_ms"] / d["measured_ms"] - 1, rel=1e-9)
    low, high = pj.phases["decode"]["projected_gpu_busy_ms_range"]
    assert d["range_ms"] == pytest.approx([low, high], rel=1e-9)  # one decode step
    assert d["inside"] == (low <= d["measured_ms"] <= high)
    # Per category: kernel time of each side's own work table, summed here.
    meas, proj = _by_category(target.work, "decode"), _by_category(pj.projected["central"].work, "decode")
    for cat in ("moe", "gemm", "attention", "normalization"):
        row = c["categories"]["decode"][cat]
        assert row["measured_ms"] == pytest.approx(meas[cat], rel=1e-6), cat
        assert row["projected_ms"] == pytest.approx(proj[cat], rel=1e-6), cat
        assert row["error"] == pytest.approx(proj[cat] / meas[cat] - 1, rel=1e-6), cat
    # Kernels of the same name in both runs, each with its own measured time on the target.
    names = set(target.work["name"].astype(str)) & set(pj.source.work["name"].astype(str))
    assert c["kernels"]["decode"] and {k["name"] for k in c["kernels"]["decode"]} <= names
    top = c["kernels"]["decode"][0]
    w = target.work[(target.work["name"].astype(str) == top["name"]) & (target.work["phase"] == "decode")]
    assert top["measured_ms"] == pytest.approx(w["dur_ns"].sum() / 1e6, rel=1e-9)
    # The headline names the category furthest off in ms.
    worst = max(c["categories"]["decode"].items(), key=lambda kv: abs(kv[1]["projected_ms"] - kv[1]["measured_ms"]))[0]
    assert f"most of the error is {worst} in decode" in c["headline"]
    assert f"{d['error']:+.0%}" in c["headline"]


def test_check_cli_json_text_markdown_html(tmp_path):
    """Fails if --check is not wired into the CLI, its JSON lacks the check object, or a
    renderer drops the side-by-side table."""
    src, dst = str(real_trace_path("b300_qwen3_moe")), str(real_trace_path("mi300x_qwen3_moe"))
    out = tmp_path / "c.json"
    r = CliRunner().invoke(main, ["project", src, "--to", "mi300x", "--model", MOE, "--check", dst, "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    d = data["check"]["phases"]["decode"]
    assert d["error"] == pytest.approx(d["projected_ms"] / d["measured_ms"] - 1)
    assert d["projected_ms"] == pytest.approx(data["phases"]["decode"]["projected_gpu_busy_ms"])
    assert "check:" in r.output and data["check"]["headline"] in r.output
    for fmt, needle in (("text", "kernel time by category"), ("md", "kernel time by category"), ("html", 'id="check"')):
        res = CliRunner().invoke(
            main,
            [
                "project",
                src,
                "--to",
                "mi300x",
                "--model",
                MOE,
                "--check",
                dst,
                "-f",
                fmt,
                "-o",
                str(tmp_path / f"c.{fmt}"),
            ],
        )
        assert res.exit_code == 0, res.output
        text = (tmp_path / f"c.{fmt}").read_text()
        assert needle in text and data["check"]["headline"].split(";")[0] in text, fmt


@pytest.mark.parametrize(
    "other, said",
    [
        # Qwen3-8B decode at batch 32, not Qwen3-30B-A3B at batch 16.
        (
            "mi300x_decode",
            "decode step 1 of 1 has different batch (requests) (16 in the source, 32 in the target trace)",
        ),
        # The source's own GPU: nothing was measured on the target.
        ("b300_qwen3_moe", "the device the source was measured on"),
        # A prefill (extend) step against a decode step.
        ("mi300x_extend", "different phases (decode in the source, prefill in the target trace)"),
    ],
)
def test_check_refuses_other_work_naming_the_figure(other, said):
    """Fails if --check compares runs of different work (batch, phases) or the source's own GPU
    instead of refusing with one sentence that names the differing figure and its values."""
    r = CliRunner().invoke(
        main,
        [
            "project",
            str(real_trace_path("b300_qwen3_moe")),
            "--to",
            "mi300x",
            "--check",
            str(real_trace_path(other)),
            "-f",
            "json",
            "-o",
            "-",
        ],
    )
    assert r.exit_code == 2, r.output
    assert said in r.output and "Traceback" not in r.output and r.output.count("\n") == 1


def test_check_refuses_a_target_trace_of_another_gpu():
    """Fails if a projection onto one GPU is checked against a trace measured on another."""
    pj = project(read_real("b300_qwen3_moe"), "h100-sxm")
    with pytest.raises(TracekitError, match=r"it is onto H100.*measured on MI300X"):
        check(pj, analyze(read_real("mi300x_qwen3_moe")))


# -- a pair recorded here: the tiny preset on the CPU at 1 and 2 threads ---------------------------


@pytest.fixture(scope="module")
def cpu_pair(tmp_path_factory):
    """Two `tracekit collect` runs of one workload at 1 and 2 CPU threads, and a spec file for each
    from its own calibration (vendor CPU, so a CPU trace may be projected onto it)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("cpu_pair")
    runs = {}
    for threads in (1, 2):
        name = tmp / f"t{threads}"
        r = CliRunner().invoke(
            main,
            [
                "collect",
                "--preset",
                "tiny",
                "-b",
                "1",
                "-p",
                "16",
                "-n",
                "3",
                "--warmup",
                "1",
                "--threads",
                str(threads),
                "--no-progress",
                "-o",
                str(name),
            ],
        )
        assert r.exit_code == 0, r.output
        cal = json.loads((tmp / f"t{threads}.tracekit.json").read_text())["calibration"]
        spec = tmp / f"cpu{threads}.json"
        spec.write_text(json.dumps(cpu_entry(cal, f"CPU {threads} threads")))
        runs[threads] = (str(tmp / f"t{threads}.pt.trace.json.gz"), str(spec))
    return runs


def test_check_on_a_recorded_cpu_pair(cpu_pair, tmp_path):
    """Fails if a CPU trace cannot be projected onto another CPU's spec file and checked against
    the run recorded there, or if the measured side is not that run's own analysis."""
    from tracekit import read_trace

    (t1, spec1), (t2, spec2) = cpu_pair[1], cpu_pair[2]
    out = tmp_path / "c.json"
    r = CliRunner().invoke(main, ["project", t1, "--spec-file", spec1, "--to", spec2, "--check", t2, "-o", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    target = analyze(read_trace(t2), spec_file=spec2)
    assert data["target"]["spec"] == "CPU 2 threads" and set(data["check"]["phases"]) == {"prefill", "decode"}
    for phase, f in data["check"]["phases"].items():
        steps = target.steps[target.steps["phase"] == phase]
        assert f["steps"] == len(steps)
        assert f["measured_ms"] == pytest.approx(steps["gpu_busy_ns"].sum() / 1e6 / len(steps), rel=1e-9), phase
        assert f["error"] == pytest.approx(f["projected_ms"] / f["measured_ms"] - 1, rel=1e-9)
    gemm = data["check"]["categories"]["decode"]["gemm"]
    assert gemm["measured_ms"] == pytest.approx(_by_category(target.work, "decode")["gemm"], rel=1e-6)
    # CPU ops keep their names on both runs: the per-name table is full.
    assert "aten::mm" in {k["name"] for k in data["check"]["kernels"]["decode"]}
    # The same spec file on both sides is the same device: refused.
    same = CliRunner().invoke(
        main, ["project", t1, "--spec-file", spec2, "--to", spec2, "--check", t2, "-f", "json", "-o", "-"]
    )
    assert same.exit_code == 2 and "the device the source was measured on" in same.output
