"""Contracts of the CLI's shared helpers (tracekit/cli/common.py) and of `tracekit collect`'s
closing lines (tracekit/cli/collect.py), written from outside the code: docs/cli.md,
docs/collecting.md, docs/exit-codes.md and docs/ranks.md, the click --help texts, the helpers'
docstrings, and hand arithmetic on hand-built sidecars. Each docstring names the bug it catches.

Nothing here profiles a run or analyses a trace: `collect` and `collect_tp` are stubbed (as in
tests/test_mutants_cli.py), refusals happen before any read, and the option helpers are called
directly or through a small command of their own."""

from __future__ import annotations

import json
import os
import sys

import click
import pytest
from click.testing import CliRunner
from conftest import SAMPLE_TRACES

from tracekit.cli import main
from tracekit.errors import TracekitError

BS1 = SAMPLE_TRACES / "tiny-bs1.pt.trace.json.gz"


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _refused(result, *named):
    """Bad usage (docs/exit-codes.md): exit status 2, the reason on stderr, no traceback."""
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    for word in named:
        assert word in result.stderr, result.stderr


# --- --tokens / --batch / --jobs: the option callbacks -------------------------------------------


def _probe_command():
    """A command with the shared analysis options, which prints what they left for the analysis:
    the stated figures and the --jobs chosen for its reads."""
    from tracekit.cli.common import model_options, stated_figures
    from tracekit.trace import parallel

    @click.command()
    @model_options
    def probe(**options):
        click.echo(json.dumps({"stated": stated_figures(), "jobs": parallel._chosen}))

    return probe


def _probe(*args):
    result = CliRunner().invoke(_probe_command(), [str(a) for a in args])
    return result, (json.loads(result.stdout) if result.exit_code == 0 else None)


def test_stated_tokens_and_batch_reach_the_analysis_by_phase():
    """catches: --tokens/--batch figures filed under the wrong phase or the wrong option, or a bare
    N not meaning every step. --help: `[PHASE=]N`, "no PHASE: every step"; analyze()'s docstring:
    stated is {"tokens": {phase: n}, "batch": {phase: n}}, phase "all" for every step."""
    result, got = _probe("--tokens", "prefill=2048", "--tokens", "decode=16", "--batch", "8", "--batch", "mixed=3")
    assert result.exit_code == 0, result.output
    assert got["stated"] == {"tokens": {"prefill": 2048, "decode": 16}, "batch": {"all": 8, "mixed": 3}}


def test_no_stated_figures_is_none():
    """catches: a command without --tokens or --batch handing the analysis an empty table (or
    one empty option) instead of nothing: stated_figures' docstring says None when none were given."""
    result, got = _probe()
    assert result.exit_code == 0, result.output
    assert got["stated"] is None
    _, got = _probe("--batch", "decode=4")
    assert got["stated"] == {"batch": {"decode": 4}}


@pytest.mark.parametrize(
    "option, value",
    [("--batch", "decode=0"), ("--batch", "x"), ("--tokens", "bogus=3"), ("--tokens", "decode="), ("--tokens", "1.5")],
)
def test_a_bad_stated_figure_is_refused_naming_its_own_option(option, value):
    """catches: a malformed --batch refused under the name --tokens (or taken): the value must be
    [PHASE=]N, PHASE a phase --help names and N a whole number above 0; bad usage exits 2 naming the
    option typed (docs/exit-codes.md), before any trace is read."""
    result, _ = _probe(option, value)
    assert result.exit_code == 2, result.output
    assert option in result.output and "Traceback" not in result.output
    other = "--tokens" if option == "--batch" else "--batch"
    assert f"'{other}'" not in result.output and f"for {other}" not in result.output


def test_jobs_holds_for_the_command_and_is_undone_after_it():
    """catches: --jobs not reaching the reads, or left set for the next command run in the same
    process. jobs_option's docstring: how many processes read a folder "for this run"; --help:
    "1 reads the files one by one" (so 0 is bad usage, exit 2)."""
    from tracekit.trace import parallel

    assert parallel._chosen is None
    result, got = _probe("--jobs", "3")
    assert result.exit_code == 0, result.output
    assert got["jobs"] == 3
    assert parallel._chosen is None
    _, got = _probe()
    assert got["jobs"] is None
    result, _ = _probe("--jobs", "0")
    assert result.exit_code == 2 and "--jobs" in result.output


# --- --gpu / --spec-file / --graph-capture / --cpu-*: device options ---------------------------


def _spec_file(tmp_path):
    """A `tracekit gpus --json` row, which --spec-file's help says works as is."""
    rows = json.loads(CliRunner().invoke(main, ["gpus", "--json"]).stdout)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(rows[0]), encoding="utf-8")
    return path


def test_gpu_and_spec_file_together_is_one_sentence_of_bad_usage(tmp_path):
    """catches: --gpu and --spec-file both taken (one silently winning). check_device_options'
    docstring: both given fails in one sentence naming the options; exit 2 (docs/exit-codes.md)."""
    result = _run("summary", BS1, "--gpu", "h100-sxm", "--spec-file", _spec_file(tmp_path))
    _refused(result, "--gpu", "--spec-file", "not both")
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1


def test_device_options_check_the_gpu_name_and_the_spec_file(tmp_path):
    """catches: the --gpu name or the --spec-file left unchecked until after the slow read, or a
    bad name reported under another option. check_device_options' docstring: a --gpu not in the
    database or a malformed --spec-file fails in one sentence naming the option as typed; a known
    name and a readable file pass."""
    from tracekit.cli.common import check_device_options

    check_device_options()
    check_device_options("h100-sxm")
    check_device_options(spec_file=str(_spec_file(tmp_path)))
    with pytest.raises(TracekitError) as e:
        check_device_options("no-such-gpu", option="--gpu-after", spec_option="--spec-file-after")
    assert "--gpu-after" in e.value.message and "no-such-gpu" in e.value.message
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(TracekitError) as e:
        check_device_options(spec_file=str(broken))
    assert str(broken) in e.value.message
    with pytest.raises(TracekitError) as e:
        check_device_options("h100-sxm", str(broken), option="--gpu-before", spec_option="--spec-file-before")
    assert "--gpu-before" in e.value.message and "--spec-file-before" in e.value.message


def test_device_settings_hands_each_option_to_its_analysis_keyword():
    """catches: a device option given to the wrong keyword of analyze() (the matmul peak as the
    bandwidth, the other side's values). --help: --cpu-flops is the matmul peak (FLOP/S),
    --cpu-bandwidth the memory bandwidth (BYTES/S); analyze() takes cpu_matmul_flops and
    cpu_bandwidth; with side (compare's before/after) each is that side's own; no capture is None."""
    from tracekit.cli.common import device_settings

    values = {
        "gpu": "h100-sxm",
        "spec_file": None,
        "graph_capture": (),
        "cpu_flops": 2e11,
        "cpu_bandwidth": 3e10,
    }
    assert device_settings(values) == {
        "gpu": "h100-sxm",
        "spec_file": None,
        "capture": None,
        "cpu_matmul_flops": 2e11,
        "cpu_bandwidth": 3e10,
    }
    sides = {f"{k}_{side}": v for side in ("before", "after") for k, v in values.items()}
    sides.update({"gpu_before": "a100-sxm4-40gb", "cpu_flops_before": 1e11, "cpu_bandwidth_before": 1e10})
    after = device_settings(sides, "after")
    assert (after["gpu"], after["cpu_matmul_flops"], after["cpu_bandwidth"]) == ("h100-sxm", 2e11, 3e10)
    before = device_settings(sides, "before")
    assert (before["gpu"], before["cpu_matmul_flops"], before["cpu_bandwidth"]) == ("a100-sxm4-40gb", 1e11, 1e10)
    with pytest.raises(TracekitError) as e:
        device_settings({**sides, "gpu_after": "no-such-gpu"}, "after")
    assert "--gpu-after" in e.value.message


def test_a_capture_folder_without_traces_is_refused_naming_the_option(tmp_path, monkeypatch):
    """catches: an empty capture folder taken as no capture at all (the graph-replayed kernels then
    priced without shapes, silently). read_captures' docstring: a folder gives every trace file in
    it; one with none is bad input, one sentence naming the option as typed and the folder."""
    from tracekit.cli import common

    monkeypatch.setattr(common, "read_with_progress", lambda path: pytest.fail(f"read {path}"))
    empty = tmp_path / "captures"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a trace", encoding="utf-8")
    with pytest.raises(TracekitError) as e:
        common.read_captures([str(empty)], "--graph-capture-after")
    assert e.value.message.startswith(f"--graph-capture-after {empty}")
    assert common.read_captures(()) == [] and common.read_captures(None) == []


def test_a_capture_named_twice_is_read_once_and_a_folder_gives_each_file(tmp_path, monkeypatch):
    """catches: a capture file named both itself and through its folder read (and priced) twice,
    or a folder's files not each read. read_captures' docstring: every trace file in a folder,
    each read on its own; the comment: named twice (itself and its folder): read once."""
    from tracekit.cli import common

    reads = []
    monkeypatch.setattr(common, "read_with_progress", lambda path: reads.append(os.path.basename(path)) or path)
    folder = tmp_path / "capture"
    folder.mkdir()
    for name in ("graph-bs1.json", "graph-bs8.json.gz"):
        (folder / name).write_bytes(b"")
    got = common.read_captures([str(folder / "graph-bs1.json"), str(folder)])
    assert sorted(reads) == ["graph-bs1.json", "graph-bs8.json.gz"]
    assert len(got) == 2


def test_a_bad_capture_file_is_one_sentence_naming_the_option(tmp_path):
    """catches: a capture that is not a trace failing without the option that named it (the user
    gave several trace paths: which one is wrong?). read_captures' docstring: a bad file fails in
    one sentence naming it; device_settings: naming the option as typed."""
    from tracekit.cli.common import read_captures

    broken = tmp_path / "capture.json"
    broken.write_text('{"traceEvents": [', encoding="utf-8")
    with pytest.raises(TracekitError) as e:
        read_captures([str(broken)], "--graph-capture-before")
    assert e.value.message.startswith("--graph-capture-before: ")
    assert "\n" not in e.value.message


@pytest.mark.parametrize("option", ["--cpu-bandwidth", "--cpu-flops"])
def test_a_cpu_peak_of_zero_or_below_is_bad_usage(option):
    """catches: a CPU peak of 0 or below accepted (every kernel then priced at an infinite time).
    --help: FLOP/S and BYTES/S are rates; exit 2 naming the option (docs/exit-codes.md)."""
    for value in ("0", "-1e9"):
        _refused(_run("summary", BS1, option, value), option)
    _refused(_run("compare", BS1, BS1, f"{option}-after", "0"), f"{option}-after")


def test_a_folder_as_spec_file_is_bad_usage(tmp_path):
    """catches: --spec-file taking a folder. --help: the device peaks in a JSON, CSV or TOML file;
    a folder is bad usage, exit 2 naming the option (docs/exit-codes.md)."""
    _refused(_run("summary", BS1, "--spec-file", tmp_path), "--spec-file")


def test_each_side_of_compare_gets_its_own_device_options():
    """catches: compare's sides sharing one option name, or their help losing the side.
    device_options' docstring: with side (compare's before and after) each option is
    --gpu-before ..., for that side's runs; without, the command's own (report)."""
    with click.Context(main) as ctx:
        report, compare = main.get_command(ctx, "report"), main.get_command(ctx, "compare")
    names = {o for p in compare.params for o in p.opts}
    for base in ("--gpu", "--spec-file", "--graph-capture", "--cpu-flops", "--cpu-bandwidth"):
        assert {f"{base}-before", f"{base}-after"} <= names, base
        assert base in {o for p in report.params for o in p.opts}
    helps = {p.opts[0]: p.help for p in compare.params}
    assert "the after run's kernels" in helps["--gpu-after"]
    assert "the before run's kernels" in helps["--spec-file-before"]
    assert "the before run's kernels" in helps["--graph-capture-before"]
    report_gpu = [p.help for p in report.params if "--gpu" in p.opts][0]
    assert "the kernels" in report_gpu and "run's" not in report_gpu


def test_weights_go_to_the_model_when_there_is_one():
    """catches: --weights dropped, or given both to --model and to the trace's own model.
    model_settings' docstring: --weights goes to the model when there is one, else to the trace's
    own (sidecar) model; --tp, --costs and --model-force pass through as given."""
    from tracekit.cli.common import model_settings

    values = {"model": None, "weights": "fp8", "tp": 2, "costs": "shapes", "model_force": True}
    got = model_settings(values)
    assert (got["model"], got["weights"], got["tp"], got["costs"], got["model_force"]) == (
        None,
        "fp8",
        2,
        "shapes",
        True,
    )
    assert got["stated"] is None
    got = model_settings({**values, "model": "llama-3.1-8b-instruct"})
    assert got["model"] is not None and got["weights"] is None
    assert "--weights fp8" in got["model"].precision_source


# --- read_with_progress: stages on stderr for a big trace in a terminal ---------------------------


def test_no_stage_bar_when_stderr_is_not_a_terminal(monkeypatch, tmp_path):
    """catches: the stage bar drawn into a file or pipe (a log, a CI job) for a big trace, or a
    big folder of ranks taken for a small one. read_with_progress' docstring: stages show "when it
    is big and stderr is a terminal"; a folder is as big as its files together. Two sparse
    5 GB rank files make a 10 GB folder (the size test_mutants_cli takes as big)."""
    import io

    import tracekit.trace
    from tracekit.cli import common

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    hooks = []
    monkeypatch.setattr(tracekit.trace, "read_trace", lambda path, progress=None: hooks.append(progress) or path)
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in (0, 1):
        with open(folder / f"rank{r}.pt.trace.json", "wb") as f:
            f.truncate(5 * 10**9)
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    common.read_with_progress(str(folder), cached=False)
    assert hooks == [None] and pipe.getvalue() == ""
    monkeypatch.setattr(sys, "stderr", Terminal())
    common.read_with_progress(str(folder), cached=False)
    assert hooks[1] is not None


# --- output targets: -o / -f / --force --------------------------------------------------------


def _target(output, fmt, force=False, default="reports/x"):
    from tracekit.cli.common import output_target
    from tracekit.report import choose

    renderer, path, replacing = output_target(output, fmt, choose, lambda ext: default + ext, force)
    return renderer.name, path, replacing


def test_dash_and_text_without_o_print_to_the_terminal(tmp_path, monkeypatch):
    """catches: `-o -` or `-f text` (without -o) writing a file, or another format without -o
    printing. --help: "'-' writes to stdout"; "text without -o prints to the terminal"; -f's
    default is from FILE's extension, else html; other formats go to the default file."""
    monkeypatch.chdir(tmp_path)
    assert _target("-", None) == ("html", None, False)
    assert _target("-", "json") == ("json", None, False)
    assert _target(None, "text") == ("text", None, False)
    assert _target(None, "md") == ("md", "reports/x.md", False)
    assert _target(None, None) == ("html", "reports/x.html", False)
    assert os.listdir(tmp_path) == []


def test_the_format_comes_from_the_extension_unless_f_says(tmp_path):
    """catches: -o's extension ignored, or -f overruled by it. --help: "Output format (default:
    from FILE's extension, else html)"; an extension no format has is bad input naming --format."""
    assert _target(str(tmp_path / "r.json"), None)[:2] == ("json", str(tmp_path / "r.json"))
    assert _target(str(tmp_path / "r.md"), None)[0] == "md"
    assert _target(str(tmp_path / "r.txt"), None)[0] == "text"
    assert _target(str(tmp_path / "r.json"), "md")[0] == "md"
    with pytest.raises(TracekitError) as e:
        _target(str(tmp_path / "r.xyz"), None)
    assert "--format" in e.value.message


def test_a_named_file_is_never_overwritten_without_force(tmp_path):
    """catches: -o FILE overwriting an existing file without --force, or --force not allowing it.
    docs/exit-codes.md: a file you name with -o is never overwritten without --force (refused before
    any slow work); --help: --force "Overwrite FILE if it exists"."""
    out = tmp_path / "r.md"
    assert _target(str(out), None) == ("md", str(out), False)
    out.write_text("mine", encoding="utf-8")
    with pytest.raises(TracekitError) as e:
        _target(str(out), None)
    assert str(out) in e.value.message and "--force" in e.value.message
    assert out.read_text(encoding="utf-8") == "mine"
    assert _target(str(out), None, force=True) == ("md", str(out), True)


def test_tracekits_own_default_file_is_replaced_on_a_rerun(tmp_path, monkeypatch):
    """catches: a rerun refused because its own default file exists, or a missing reports/ folder
    refused. docs/exit-codes.md: files tracekit names itself in reports/ are replaced on a rerun;
    output_target's docstring: the default path is checked (and its folder is tracekit's to make)."""
    monkeypatch.chdir(tmp_path)
    assert _target(None, "md") == ("md", "reports/x.md", False)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "x.md").write_text("old", encoding="utf-8")
    assert _target(None, "md") == ("md", "reports/x.md", True)


def test_a_folder_or_missing_folder_as_o_is_refused_at_once(tmp_path):
    """catches: -o naming a folder, or a file in a folder that does not exist, accepted until the
    write at the end. docs/exit-codes.md: a folder where a file is needed and a missing parent
    folder are refused at once."""
    with pytest.raises(TracekitError) as e:
        _target(str(tmp_path), None)
    assert str(tmp_path) in e.value.message and "folder" in e.value.message
    with pytest.raises(TracekitError) as e:
        _target(str(tmp_path / "nowhere" / "r.md"), None)
    assert "does not exist" in e.value.message


def test_dev_null_is_written_as_is_in_the_format_f_names():
    """catches: `-o /dev/null` refused (no extension to tell a format from) or replaced through a
    rename. docs/exit-codes.md: -o /dev/null (any device or pipe) is written as is; output_target's
    docstring: a stream takes the format from -f, default html."""
    if not os.path.exists(os.devnull) or os.path.isfile(os.devnull):
        pytest.skip("no device file here")
    assert _target(os.devnull, None) == ("html", os.devnull, False)
    assert _target(os.devnull, "json") == ("json", os.devnull, False)


def test_deliver_prints_or_writes_and_says_replaced_only_on_a_rerun(tmp_path, capsys):
    """catches: the printed document given an extra newline, the default folder not created, or
    "replaced" said of a first write. deliver's docstring: print text (no path) or write it and
    say where, creating the default folder; a rerun replacing tracekit's own default file says so.
    2,400 bytes is 2 kB by hand (SI, whole kB)."""
    from tracekit.cli.common import deliver

    deliver("doc\n", None, made_default=True)
    assert capsys.readouterr().out == "doc\n"
    path = tmp_path / "reports" / "r.md"
    deliver("x" * 2400, str(path), made_default=True)
    assert capsys.readouterr().out == f"wrote {path} (2 kB)\n"
    deliver("y" * 2400, str(path), made_default=True, replacing=True)
    assert capsys.readouterr().out == f"replaced {path} (2 kB)\n"
    assert path.read_text(encoding="utf-8") == "y" * 2400
    with pytest.raises(TracekitError):
        deliver("z", str(tmp_path / "missing" / "r.md"), made_default=False)


# --- tracekit collect: its arguments --------------------------------------------------------------


def _stub_collect(monkeypatch, tmp_path, sidecar, notes=()):
    """Replace the profiling run: record the options, return paths under tmp_path."""
    import tracekit.collect
    from tracekit.collect.collector import CollectResult

    seen = []

    def fake(opts):
        seen.append(opts)
        return CollectResult(
            str(tmp_path / "run.pt.trace.json.gz"), str(tmp_path / "run.tracekit.json"), sidecar, list(notes)
        )

    monkeypatch.setattr(tracekit.collect, "collect", fake)
    return seen


def test_collect_hands_its_options_to_the_run(tmp_path, monkeypatch):
    """catches: collect's options reaching the run swapped or negated (calibrating with
    --no-calibrate, -p as the batch). --help: -b sequences per batch, -p prompt tokens, -n decode
    steps, --no-calibrate skips measuring the ceilings (so they are measured by default)."""
    seen = _stub_collect(monkeypatch, tmp_path, {})
    monkeypatch.chdir(tmp_path)
    result = _run("collect", "--preset", "8b", "-b", "16", "-p", "2048", "-n", "128", "--seed", "7")
    assert result.exit_code == 0, result.output
    o = seen[0]
    assert (o.preset, o.batch_size, o.prompt_len, o.new_tokens, o.seed, o.calibrate) == ("8b", 16, 2048, 128, 7, True)
    assert o.script is None
    result = _run("collect", "--no-calibrate", "--threads", "1", "--layers", "2")
    assert result.exit_code == 0, result.output
    assert (seen[1].calibrate, seen[1].threads, seen[1].layers) == (False, 1, 2)


def test_collect_runs_a_script_with_the_arguments_after_the_dashes(tmp_path, monkeypatch):
    """catches: a script's arguments lost or reordered. docs/collecting.md: `tracekit collect --
    python my_script.py ARGS` (or --script) runs your own code; --script's help: arguments after --."""
    seen = _stub_collect(monkeypatch, tmp_path, {"workload": {"kind": "script"}})
    monkeypatch.chdir(tmp_path)
    result = _run("collect", "--", "python", "my_script.py", "--requests", "8")
    assert result.exit_code == 0, result.output
    assert list(seen[0].script) == ["python", "my_script.py", "--requests", "8"]
    result = _run("collect", "--script", "bench.py", "--", "--requests", "8")
    assert result.exit_code == 0, result.output
    assert list(seen[1].script) == ["bench.py", "--requests", "8"]


@pytest.mark.parametrize(
    "args, named",
    [
        (["8b"], "--preset 8b"),
        (["--preset", "tiny", "--", "python", "x.py"], "python x.py"),
        (["--model", "./ckpt", "--", "python", "x.py"], "python x.py"),
    ],
)
def test_collect_refuses_stray_arguments_in_one_sentence(tmp_path, monkeypatch, args, named):
    """catches: `tracekit collect 8b` (a preset without --preset) or a preset/--model run with a
    script's arguments running something else than asked. --help: the preset is --preset NAME;
    a script runs after -- on its own. Bad usage: exit 2, one sentence naming what was typed,
    nothing profiled (docs/exit-codes.md)."""
    seen = _stub_collect(monkeypatch, tmp_path, {})
    monkeypatch.chdir(tmp_path)
    result = _run("collect", *args)
    _refused(result, named)
    assert len(result.stderr.strip().splitlines()) == 1
    assert seen == []


def test_collects_closing_lines_name_the_files_and_a_next_command_that_runs(tmp_path, monkeypatch):
    """catches: the next step naming a path that does not lead to the trace from the current
    folder, or one that breaks in a shell, or the run's notes lost. docs/cli.md: `tracekit report
    TRACE`; the trace and sidecar paths are printed; a name with a space must be quoted to run as
    written."""
    import shlex

    sidecar = {"workload": {"kind": "script", "script": "x.py"}, "device": {"name": "cpu", "type": "cpu"}}
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "my runs"
    folder.mkdir()
    _stub_collect(monkeypatch, folder, sidecar, notes=["the machine was busy"])
    result = _run("collect", "--", "python", "x.py")
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    trace = folder / "run.pt.trace.json.gz"
    assert f"trace:   {trace}" in out and f"sidecar: {folder / 'run.tracekit.json'}" in out
    (nxt,) = [line for line in out if line.startswith("next:")]
    assert shlex.split(nxt.split(None, 1)[1]) == ["tracekit", "report", "my runs/run.pt.trace.json.gz"]
    assert "note: the machine was busy" in result.output
    # From a folder beside it, the path shown must still lead to the trace.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    trace.write_bytes(b"")
    result = _run("collect", "--", "python", "x.py")
    (nxt,) = [line for line in result.stdout.splitlines() if line.startswith("next:")]
    shown = shlex.split(nxt.split(None, 1)[1])[2]
    assert os.path.samefile(shown, trace)


def test_a_tensor_parallel_collect_states_each_ranks_shard(tmp_path, monkeypatch):
    """catches: the tensor-parallel line mixing up the shard's figures or the plural. docs/ranks.md:
    each rank holds heads/N query heads, KV heads/N key/value heads, intermediate/N MLP columns,
    and two all-reduces per layer per forward pass. By hand for Llama-3-8B shapes on 2 ranks: 32/2
    = 16 heads, 8/2 = 4 KV heads, 14336/2 = 7168 columns, 2 x 32 layers = 64 all-reduces; then
    `tracekit report FOLDER` as the next step."""
    from tracekit.collect import parallel
    from tracekit.collect.collector import CollectResult

    folder = tmp_path / "tp2"
    sidecar = {
        "workload": {
            "preset": "8b",
            "tensor_parallel": {
                "shard": {
                    "num_attention_heads": 32 // 2,
                    "num_key_value_heads": 8 // 2,
                    "intermediate_size": 14336 // 2,
                },
                "all_reduces_per_step": 2 * 32,
            },
        },
    }
    ranks = [
        CollectResult(str(folder / f"rank{r}.pt.trace.json.gz"), str(folder / f"rank{r}.tracekit.json"), sidecar)
        for r in (0, 1)
    ]
    told = []

    def fake_collect_tp(opts, tp, announce=None):
        announce("starting 2 ranks")
        told.append(tp)
        return parallel.ParallelResult(folder=str(folder), ranks=ranks, backend="nccl")

    monkeypatch.setattr(parallel, "collect_tp", fake_collect_tp)
    monkeypatch.chdir(tmp_path)
    result = _run("collect", "--preset", "8b", "--tp", "2", "-o", "tp2")
    assert result.exit_code == 0, result.output
    assert told == [2]
    assert "starting 2 ranks" in result.stderr
    lines = result.stdout.splitlines()
    assert (
        "tensor-parallel: 2 ranks over nccl, each with 16 heads, 4 KV heads and MLP width 7168; "
        "64 all-reduces per forward pass"
    ) in lines
    assert lines[-1].split() == ["next:", "tracekit", "report", "tp2"]


# --- tracekit collect: the summary of its sidecar --------------------------------------------------


def _lines(sc):
    from tracekit.cli.collect import summary_lines

    return summary_lines(json.loads(json.dumps(sc)))


def _gpu_run(**timing):
    return {
        "workload": {
            "kind": "model",
            "model_path": "./my-checkpoint",
            "parameters": 1_235_814_400,
            "dtype": "bf16",
            "batch_size": 16,
            "prompt_len": 2048,
            "new_tokens": 128,
        },
        "device": {"name": "NVIDIA H100 80GB HBM3", "type": "cuda"},
        "timing": timing,
    }


def test_a_model_run_names_its_checkpoint_and_workload():
    """catches: a --model run named "None" (only presets named), or the workload's figures swapped.
    docs/collecting.md: --model profiles a local checkpoint folder; the sidecar holds workload and
    device. By hand: 1,235,814,400 parameters is 1.24B to three digits."""
    first = _lines(_gpu_run())[0]
    assert first == (
        "./my-checkpoint (1.24B parameters, bf16) on NVIDIA H100 80GB HBM3 (cuda): "
        "batch 16, prompt 2048, 128 decode steps"
    )


@pytest.mark.parametrize("count", [None, 0])
def test_an_unknown_parameter_count_is_not_shown_as_a_number(count):
    """catches: a sidecar without a parameter count summarised as "None parameters" or "0
    parameters" (a figure the run never had)."""
    sc = _gpu_run()
    sc["workload"]["parameters"] = count
    first = _lines(sc)[0]
    shown = first.split(" (", 1)[1].split(" parameters")[0]
    assert shown not in ("None", "0") and not shown[:1].isdigit()


def test_a_parameter_count_under_a_thousand_is_given_whole():
    """catches: a small count scaled into a unit (0.512K). By hand: 512 parameters is 512."""
    sc = _gpu_run()
    sc["workload"]["parameters"] = 512
    assert _lines(sc)[0].startswith("./my-checkpoint (512 parameters, bf16)")


def test_ttft_and_tpot_are_shown_only_together_and_from_the_median():
    """catches: the unprofiled TTFT/TPOT line printed with a figure the sidecar lacks, or TPOT p50
    not the median. By hand: TTFT 48.27 ms is 48.3 ms (three digits); the median of 7, 9, 8 and
    100 ms is (8 + 9) / 2 = 8.5 ms."""
    assert _lines(_gpu_run(ttft_ms=48.27, tpot_ms=[7.0, 9.0, 8.0, 100.0]))[1] == (
        "TTFT 48.3 ms, TPOT p50 8.50 ms, without the profiler"
    )
    for timing in ({"ttft_ms": 48.27}, {"tpot_ms": [7.0, 9.0]}):
        lines = _lines(_gpu_run(**timing))
        assert not any(line.startswith("TTFT") for line in lines), lines


@pytest.mark.parametrize(
    "ratio, measured", [(1.0, True), (1.25, True), (0.97, False)], ids=["exactly-1", "above", "below"]
)
def test_profiler_overhead_below_1_is_noise_and_1_or_more_is_measured(ratio, measured):
    """catches: the boundary of the overhead sentence moved (a ratio of exactly 1.00 called
    noise). The sentence's own rule: "below 1 is measurement noise"; 1.00 is not below 1. By hand:
    1.0 -> "1.00x", 1.25 -> "1.25x", 0.97 -> "0.97"."""
    lines = [line for line in _lines(_gpu_run(profiler_overhead_ratio=ratio)) if line.startswith("profiler")]
    if measured:
        assert lines == [f"profiler overhead: {ratio:.2f}x the unprofiled time of the recorded run"]
    else:
        assert len(lines) == 1 and "0.97" in lines[0] and "below 1 is measurement noise" in lines[0]
    assert not any(line.startswith("profiler") for line in _lines(_gpu_run()))


def test_the_busy_machine_caveat_is_for_cpu_runs():
    """catches: a GPU run's overhead withheld because its host's CPUs were busy, or a CPU run busy
    by its load average not flagged. busy_sentence's docstring: for a CPU run's device block;
    docs/collecting.md: a CPU run is timed with wall clocks, so other processes slow every time,
    and collect says so; "uptime's load well under the core count" is idle, so a load of 8 on 2
    cores is busy."""
    gpu = _gpu_run(profiler_overhead_ratio=1.25)
    gpu["device"]["contention"] = {"other_cores": 1.5, "busy": True}
    assert "profiler overhead: 1.25x the unprofiled time of the recorded run" in _lines(gpu)
    cpu = _gpu_run(profiler_overhead_ratio=1.25)
    cpu["device"] = {"name": "AMD EPYC", "type": "cpu", "cores": 2, "load_average_1m": 8.0}
    (line,) = [line for line in _lines(cpu) if line.startswith("profiler")]
    assert "busy machine" in line and "1.25" in line and "1.25x" not in line


def _calibrated(device, checks):
    sc = _gpu_run()
    sc["calibration"] = {
        "device": device,
        "dtype": "fp32",
        "matmul_flops": {"fp32": 2.5e11},
        "copy_bandwidth": 1.8e10,
        "checks": checks,
    }
    return sc


def test_a_gpus_measured_ceilings_read_with_si_prefixes_not_exponents():
    """catches: a fixed unit with three significant figures, which wrote a GPU's copy bandwidth as
    "3.35e+03 GB/s" and a B200's matmul as "2.25e+03 TFLOP/s". The house rule (tracekit/formatting.py:
    figures become text through its helpers, with SI prefixes) by hand: 3.35e12 B/s is 3.35 TB/s,
    2.25e15 FLOP/s is 2.25 PFLOP/s, 9.89e14 FLOP/s is 989 TFLOP/s, to three significant figures
    as every figure (8e12 B/s is 8.00 TB/s)."""
    for flops, bw, shown in (
        (2.25e15, 3.35e12, "2.25 PFLOP/s matmul (fp32), 3.35 TB/s copy"),
        (9.89e14, 8e12, "989 TFLOP/s matmul (fp32), 8.00 TB/s copy"),
    ):
        sc = _calibrated("cuda", {})
        sc["calibration"]["matmul_flops"] = {"fp32": flops}
        sc["calibration"]["copy_bandwidth"] = bw
        assert f"measured ceilings: {shown}" in _lines(sc)


def test_measured_ceilings_give_their_rounds_and_spread():
    """catches: the rounds or spreads misplaced or left out. docs/collecting.md: ceilings are
    measured in rounds until the best two agree within 10% (calibration.checks: the rounds and
    their spread). By hand: 2.5e11 FLOP/s is 250 GFLOP/s, 1.8e10 B/s is 18.0 GB/s (three figures); spreads 0.03 and
    0.08 are 3% and 8%, matmul's first as the ceilings are listed."""
    checks = {"attempts": 4, "spread": {"matmul_flops": 0.03, "copy_bandwidth": 0.08}, "plausible": True}
    assert _lines(_calibrated("cpu", {**checks, "stable": True}))[-1] == (
        "measured ceilings: 250 GFLOP/s matmul (fp32), 18.0 GB/s copy (best of 4 rounds; spread 3% and 8%)"
    )
    assert _lines(_calibrated("cpu", {}))[-1] == "measured ceilings: 250 GFLOP/s matmul (fp32), 18.0 GB/s copy"
    sc = _calibrated("cpu", {})
    sc["calibration"]["matmul_flops"] = {}
    assert not any("measured ceilings" in line for line in _lines(sc))


def test_implausible_gpu_ceilings_say_the_report_uses_the_datasheet():
    """catches: a GPU's implausible ceilings told the CPU's remedy. The report prices a GPU run
    whose measured ceilings are implausible against the datasheet row (docs/bounds.md: the
    datasheet peak, and an achievable ceiling measured by collect), and raises a CPU's to what the
    run achieved; the problems are listed, each once, with the number of measurements."""
    checks = {"attempts": 3, "plausible": False, "problems": ["matmul too low", "copy too low"]}
    gpu = [line for line in _lines(_calibrated("cuda", checks)) if "implausible" in line]
    assert len(gpu) == 1
    assert "after 3 measurements" in gpu[0] and "(matmul too low; copy too low)" in gpu[0]
    assert "datasheet" in gpu[0] and "raise" not in gpu[0]
    cpu = [line for line in _lines(_calibrated("cpu", checks)) if "implausible" in line]
    assert "datasheet" not in cpu[0] and "raise them to what the run achieved" in cpu[0]


def test_ceilings_that_did_not_settle_are_marked_unreliable():
    """catches: unsettled ceilings passed off as good. docs/collecting.md: ceilings that did not
    settle are marked unreliable; the line gives the rounds (5) and the problem."""
    checks = {"attempts": 5, "plausible": True, "stable": False, "problems": ["the 5 rounds did not settle"]}
    (line,) = [line for line in _lines(_calibrated("cuda", checks)) if "settle" in line]
    assert "in 5 rounds" in line and "(the 5 rounds did not settle)" in line and "unreliable" in line
    settled = _lines(_calibrated("cuda", {**checks, "stable": True, "problems": []}))
    assert not any("unreliable" in line or "implausible" in line for line in settled)
