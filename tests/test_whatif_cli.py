"""`tracekit whatif`: what-ifs replayed on a trace's steps, in every format, through the CLI.

Expected figures come from hand arithmetic on a hand-built trace (tests/replay_material.py) or from
`tracekit report --format json` of the same shared trace (the documented contract), never from the
code under test.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import real_trace_path
from replay_material import CALL_US, EVERY_US, KERNELS, LAUNCH_US, STEP_US, STEPS, launch_bound

from tracekit.cli import main


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(launch_bound(tmp_path_factory.mktemp("whatif") / "launch_bound.json"))


@pytest.fixture(scope="module")
def rtx():
    path = real_trace_path("rtx3090_vllm")
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared traces live in ../shared/traces)")
    return str(path)


def test_launch_removed_saves_exactly_the_launches(tiny):
    """Fails if the CLI drops --remove launch, replays the changes one by one, or reports the phase
    figures of another outcome: removing launch overhead saves each step's 5 launch calls and 4
    dispatch gaps, 5 x 2 + 4 x 48 = 202 us, and nothing else (the host's own work stays)."""
    r = _run("whatif", tiny, "--remove", "launch", "-f", "json", "-o", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "tracekit.whatif" and doc["schema_version"] == 1
    assert doc["changes"] == ["launch overhead removed (the step as one graph)"]
    d = doc["phases"]["decode"]
    per_step_us = KERNELS * CALL_US + (KERNELS - 1) * (EVERY_US - CALL_US)
    assert per_step_us == LAUNCH_US == 202.0
    assert d["steps"] == STEPS
    assert d["measured_ms"] == pytest.approx(STEPS * STEP_US / 1e3)
    assert d["saving_ms"] == pytest.approx(STEPS * per_step_us / 1e3)
    assert d["replayed_ms"] == pytest.approx(STEPS * (STEP_US - per_step_us) / 1e3)
    assert d["step_p50_ms"] == pytest.approx({"measured": 0.300, "replayed": 0.098})
    # One token per decode step: 4 tokens over the steps' time.
    assert d["tokens_per_s"]["replayed"] == pytest.approx(STEPS / (STEPS * 98e-6))
    assert doc["books"]["reproduced"] is True and doc["books"]["max_error"] == pytest.approx(0.0, abs=1e-9)


def test_text_prints_phase_table_and_books(tiny):
    """Fails if the terminal output loses the phase line (measured -> replayed, saving) or the books
    line saying how closely the unchanged replay reproduced the steps."""
    r = _run("whatif", tiny, "--remove", "launch")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("Decode"))
    assert "1.20 ms" in line and "0.392 ms" in line and "0.808 ms" in line, line
    assert "0.300 ms → 0.0980 ms" in line  # step p50
    assert "reproduced each of the 4 steps within 0%" in r.stdout
    assert "unexplained wait 0 ms" in r.stdout


@pytest.mark.parametrize(
    "fmt,marker",
    [("text", "Decode"), ("md", "| Decode |"), ("html", 'id="phases"'), ("json", '"kind": "tracekit.whatif"')],
)
def test_every_format_on_a_shared_trace(rtx, fmt, marker):
    """Fails if a format cannot render a real vLLM trace's replay, or its measured phase time is not
    the report's (the replay's books must start from the report's own step times)."""
    r = _run("whatif", rtx, "--remove", "launch,sync", "--speed", "gemm=0.8", "-f", fmt, "-o", "-")
    assert r.exit_code == 0, r.output
    assert marker in r.stdout
    if fmt == "json":
        report = json.loads(_run("report", rtx, "-f", "json", "-o", "-").stdout)
        doc = json.loads(r.stdout)
        assert set(doc["phases"]) == set(report["phases"])
        for p, fig in doc["phases"].items():
            assert fig["measured_ms"] == pytest.approx(report["phases"][p]["time_ms"], rel=1e-6)
            assert fig["saving_ms"] == pytest.approx(fig["measured_ms"] - fig["replayed_ms"], abs=1e-9)
        assert doc["books"]["max_error"] == pytest.approx(report["replay"]["books"]["max_error"])
        # The graph-replayed GEMMs have no cost in this trace without --model: the speed-up cannot reach them.
        assert doc["unpriced_kernels"]["gemm kernels at 80% of their roof"] > 0
    if fmt == "text":
        assert "of unknown cost kept their measured time" in r.stdout


def test_b300_savings_stay_within_what_the_steps_could_lose():
    """Fails if a removal's replayed saving exceeds the phase's time less the kernel time on its
    critical path (issue 48: what the steps could lose by removing waits)."""
    path = real_trace_path("b300_qwen3_moe")
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared traces live in ../shared/traces)")
    doc = json.loads(_run("whatif", str(path), "--remove", "launch,sync", "-f", "json", "-o", "-").stdout)
    for p, fig in doc["phases"].items():
        kernel_ms = doc["critical_path"][p]["kernel"]
        assert -1e-6 <= fig["saving_ms"] <= fig["measured_ms"] - kernel_ms + 1e-6, p


@pytest.mark.parametrize(
    "args,words",
    [
        (["--remove", "lunch"], "--remove takes launch, sync, overlap-comm"),
        (["--speed", "gemm=1.5"], "--speed takes TARGET=FRACTION"),
        (["--speed", "gemm"], "--speed takes TARGET=FRACTION"),
        (["--host-floor", "-3"], "--host-floor takes microseconds >= 0"),
        ([], "nothing to replay"),
    ],
)
def test_bad_words_are_one_sentence_before_the_read(tmp_path, args, words):
    """Fails if a bad --remove/--speed/--host-floor reaches the slow read (the trace here does not
    exist: the message must be about the option, not the file) or escapes as a traceback."""
    r = _run("whatif", str(tmp_path / "absent.json.gz"), *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines() if r.stderr else r.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.output, r.output


def test_never_overwrites_without_force(tiny, tmp_path):
    """Fails if -o replaces an existing file without --force (every command's rule)."""
    out = tmp_path / "w.md"
    out.write_text("mine")
    r = _run("whatif", tiny, "--remove", "launch", "-o", str(out))
    assert r.exit_code != 0 and out.read_text() == "mine"
    assert "Traceback" not in r.output
    r = _run("whatif", tiny, "--remove", "launch", "-o", str(out), "--force")
    assert r.exit_code == 0, r.output
    assert "| Decode |" in out.read_text()
