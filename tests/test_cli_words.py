"""Messages that name the user's own words (issue 44, items 5 and 8): the flag they typed, close
matches that include longer names sharing what they typed, next steps that work, help examples
that fit their option, and the same analysis options on every command that analyses."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES, real_trace_path

from tracekit.cli import main
from tracekit.errors import TracekitError

TINY = str(SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz")


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


# --- the flag the user typed ------------------------------------------------------------------


def test_project_to_names_to_not_gpu():
    """Bug: `project TRACE --to mi300` answered "--gpu 'mi300' is not in tracekit's GPU database";
    the flag was --to."""
    r = _run("project", TINY, "--to", "mi300")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--to 'mi300' is not in tracekit's GPU database" in r.output and "--gpu" not in r.output
    assert "'MI300X'" in r.output


@pytest.mark.parametrize("flag", ["--project-before", "--project-after"])
def test_compare_project_side_names_its_flag(flag):
    """Bug: compare's --project-before/--project-after named --gpu in their error."""
    r = _run("compare", TINY, TINY, flag, "mi300")
    assert r.exit_code == 2 and f"{flag} 'mi300'" in r.output and "--gpu" not in r.output


def test_gpu_and_spec_file_together_name_the_options_typed(tmp_path):
    """Bug: compare --gpu-before with --spec-file-before was refused as "pass either --gpu or a
    GPU spec file" (neither flag the user typed)."""
    spec = tmp_path / "gpu.json"
    spec.write_text("{}")
    r = _run("compare", TINY, TINY, "--gpu-before", "h100-sxm", "--spec-file-before", str(spec))
    assert r.exit_code == 2 and "pass either --gpu-before or --spec-file-before, not both" in r.output


def test_models_show_names_show():
    """Bug: `tracekit models --show qwen3-30b` answered "--model 'qwen3-30b' ..."."""
    r = _run("models", "--show", "qwen3-30b")
    assert r.exit_code == 2 and "--show 'qwen3-30b'" in r.output and "--model" not in r.output


def test_batch_without_a_phase_is_labelled_as_typed():
    """Bug: `--batch 1` (every phase) was credited as "--batch decode=1", words the user never typed."""
    r = _run("report", TINY, "-f", "json", "-o", "-", "--batch", "1")
    assert r.exit_code == 0, r.output
    sources = {s["batch_source"] for s in json.loads(r.stdout)["steps"]}
    assert sources == {"stated by the user (--batch 1)"}


# --- close matches include longer names sharing the prefix ------------------------------------


def test_model_suggestions_include_the_longer_name_typed_short():
    """Bug: --model qwen3-30b suggested qwen3-32b, qwen3-0.6b, qwen3-8b, qwen3-4b, but not
    qwen3-30b-a3b, the model whose name it begins."""
    r = _run("summary", TINY, "--model", "qwen3-30b")
    assert r.exit_code == 2
    hint = r.output.split("did you mean", 1)[1]
    assert hint.lstrip().startswith("qwen3-30b-a3b, qwen3-30b-a3b-fp8")
    # A Hugging Face id, cut short, finds it too.
    assert "qwen3-30b-a3b" in _run("summary", TINY, "--model", "Qwen/Qwen3-30B").output


def test_gpu_suggestions_include_near_spellings():
    """Bug: a GPU name with a typo (mi300xx) suggested nothing: only rows containing it were offered."""
    from tracekit.specs.lookup import spec_by_name

    with pytest.raises(TracekitError) as e:
        spec_by_name("mi300xx")
    assert "did you mean 'MI300X'" in e.value.message


# --- next steps that work ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, words",
    [
        (b"meeting notes, not a trace\n", "is not JSON"),
        (b'{"a": 1}', "has no traceEvents"),
    ],
)
def test_split_of_a_non_trace_gives_the_readers_sentence(tmp_path, content, words):
    """Bug: `split notes.txt` said "(tracekit report reads it whole)", and report then refused
    the file as not JSON: the next step it named did not work."""
    bad = tmp_path / "notes.txt"
    bad.write_bytes(content)
    r = _run("split", str(bad), "-o", str(tmp_path / "w"))
    assert r.exit_code == 2 and words in r.output and "tracekit report" not in r.output
    assert "Traceback" not in r.output


def test_split_sends_only_a_readable_trace_to_report(monkeypatch, tmp_path):
    """The report hint stays for a real trace the stream cannot cut: report does read it."""
    from tracekit import read_trace
    from tracekit.analysis import windows
    from tracekit.trace.window_events import NotSplittable

    def cannot(path, *a, **k):
        raise NotSplittable(path)

    monkeypatch.setattr(windows.win, "split", cannot)
    with pytest.raises(NotSplittable) as e:
        windows.split_keeping_steps(str(TINY), str(tmp_path / "w"), read_trace)
    assert f"tracekit report {TINY}" in e.value.message


def test_project_onto_a_spec_file_offers_no_compare_that_refuses_it(tmp_path):
    """Bug: `project TRACE --to my-gpu.json` ended "next: ... tracekit compare TRACE OTHER_TRACE
    --project-before my-gpu", which compare refuses (--project-before takes a GPU of the database)."""
    from tracekit.specs.lookup import spec_by_name

    row = spec_by_name("h100-sxm").to_dict()
    spec = tmp_path / "my-gpu.json"
    spec.write_text(json.dumps({**row, "key": "my-gpu", "name": "My GPU"}))
    r = _run("project", str(real_trace_path("mi300x_decode")), "--to", str(spec), "-o", str(tmp_path / "p.html"))
    assert r.exit_code == 0, r.output
    assert "next: open" in r.output and "--project-before" not in r.output


# --- help examples that fit their option ------------------------------------------------------


def _example(help_text: str, option: str) -> list[str]:
    flat = " ".join(help_text.split())
    m = re.search(rf"{option} \[PHASE=\]N .*?e\.g\. ((?:{option} (?:[a-z]+=)?\d+ ?)+)", flat)
    assert m, f"no example for {option} in the help"
    return m.group(1).split()


def test_batch_and_tokens_help_examples_fit_their_options():
    """Bug: --help offered `--batch prefill=1049` (a prompt's token count) as --batch's example:
    --batch counts requests, and the example was --tokens' own."""
    text = _run("report", "--help").output
    batch, tokens = _example(text, "--batch"), _example(text, "--tokens")
    assert batch != [w.replace("--tokens", "--batch") for w in tokens]
    values = {opt: dict(v.split("=") for v in ex[1::2]) for opt, ex in (("batch", batch), ("tokens", tokens))}
    # A step holds at least one token per request; a decode step exactly one.
    assert int(values["batch"]["prefill"]) < int(values["tokens"]["prefill"])
    assert values["batch"]["decode"] == values["tokens"]["decode"]
    # And the command takes them as written.
    assert _run("summary", TINY, *batch, *tokens).exit_code == 0


# --- the same analysis options on every command that analyses -----------------------------------


def _options(command: str) -> set[str]:
    from tracekit.cli import main as group

    ctx = group.make_context("tracekit", [command, "--help"], resilient_parsing=True)
    cmd = group.get_command(ctx, command)
    return {o for p in cmd.params for o in p.opts if o.startswith("--")}


ANALYSIS = {
    "--gpu",
    "--spec-file",
    "--graph-capture",
    "--cpu-flops",
    "--cpu-bandwidth",
    "--model",
    "--tp",
    "--weights",
    "--costs",
    "--model-force",
    "--batch",
    "--tokens",
}


@pytest.mark.parametrize("command", ["report", "summary", "annotate", "project"])
def test_every_analysing_command_takes_every_analysis_option(command):
    """Bug: `summary` had no --graph-capture (only `report` took it), nor --cpu-flops/--cpu-bandwidth;
    annotate and project lacked them too."""
    assert ANALYSIS <= _options(command), ANALYSIS - _options(command)


def test_compare_takes_each_device_option_per_side():
    """compare prices each run on its own device: the device options come per side, the model ones once."""
    per_side = {"--gpu", "--spec-file", "--graph-capture", "--cpu-flops", "--cpu-bandwidth"}
    want = {f"{o}-{side}" for o in per_side for side in ("before", "after")} | (ANALYSIS - per_side)
    assert want <= _options("compare"), want - _options("compare")


def test_summary_graph_capture_reaches_the_analysis():
    """summary --graph-capture prices the graph-replayed kernels as report does: the capture's
    shapes change the figures, and summary prints report's."""
    trace, capture = str(real_trace_path("mi300x_decode")), str(real_trace_path("mi300x_capture"))

    def figures(*args):
        r = _run(*args)
        assert r.exit_code == 0, r.output
        return r.stdout.strip().splitlines()[-8:]

    with_capture = figures("summary", trace, "--graph-capture", capture)
    assert with_capture == figures("report", trace, "--graph-capture", capture, "-f", "text", "-o", "-")
    assert with_capture != figures("summary", trace)


# --- the rank line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dist, line",
    [
        ({"backend": "nccl", "rank": ""}, None),
        ({"rank": 3}, "rank       3 (world size not stated)"),
        ({"rank": "x", "world_size": 8}, "rank       unknown (world size 8)"),
        ({"rank": 3, "world_size": 8}, "rank       3 of 8"),
    ],
)
def test_summary_rank_line_without_question_marks(tmp_path, dist, line):
    """Bug: an RTP-LLM trace (distributedInfo without a usable rank or world size) printed
    "rank        of ?"."""
    with gzip.open(TINY, "rt") as f:
        doc = json.load(f)
    doc["distributedInfo"] = dist
    path = tmp_path / "rtp.json"
    path.write_text(json.dumps(doc))
    r = _run("summary", str(path))
    assert r.exit_code == 0, r.output
    ranks = [ln for ln in r.stdout.splitlines() if ln.startswith("rank ")]
    assert "?" not in "".join(ranks)
    assert ranks == ([line] if line else [])


# --- one decode step --------------------------------------------------------------------------


def test_one_decode_step_is_a_sentence_not_a_chart():
    """Bug: with one decode step, "Decode over time" drew one bar on an axis from -3 to 3 (steps
    that do not exist); the figures of that step are said in a sentence instead."""
    from conftest import read_real

    from tracekit.analysis import analyze
    from tracekit.report.charts import decode_steps

    data = analyze(read_real("mi300x_decode")).to_dict()
    assert len([s for s in data["steps"] if s["phase"] in ("decode", "mixed")]) == 1
    chart = decode_steps(data)
    assert "item" not in chart and "id" not in chart
    assert chart["reason"].startswith("One decode step (step 0), so nothing changes over time: it took ")
    assert "GPU busy" in chart["reason"]
