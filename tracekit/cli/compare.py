"""``tracekit compare BEFORE AFTER [-o FILE] [--before-run PATH ...] [--after-run PATH ...]``: what
changed between two runs (or two sets of repeated runs), phase by phase."""

from __future__ import annotations

import json
import os
import shlex
import sys

import click

from tracekit.cli.common import (
    check_device_options,
    deliver,
    device_options,
    device_settings,
    model_options,
    model_settings,
    output_options,
    output_target,
    read_with_progress,
)
from tracekit.errors import TracekitError

SUMMARY_LINES = 6  # sentences printed after writing a report file


@click.command("compare")
@click.argument("before", type=click.Path(dir_okay=True, file_okay=True, path_type=str))
@click.argument("after", type=click.Path(dir_okay=True, file_okay=True, path_type=str))
@output_options("reports/compare-<before>-vs-<after>.<format>")
@click.option(
    "--fail-if",
    "gates",
    multiple=True,
    metavar="EXPR",
    help="Exit with status 1 when the after run crosses a threshold, e.g. 'tpot_p50>+5%', "
    "'decode_step_p50>+5%' (engine traces), 'decode_tokens_per_s<-3%', 'ttft_ms>+2ms', "
    "'decode_mbu<-2pp'. May repeat; a gate on a figure a run lacks exits 2.",
)
@click.option(
    "--before-run",
    "before_runs",
    multiple=True,
    metavar="PATH",
    type=click.Path(dir_okay=True, file_okay=True, path_type=str),
    help="Another run of the baseline (the same workload as BEFORE, collected the same way). May repeat: "
    "with several runs a side, each change's interval includes the run-to-run spread.",
)
@click.option(
    "--after-run",
    "after_runs",
    multiple=True,
    metavar="PATH",
    type=click.Path(dir_okay=True, file_okay=True, path_type=str),
    help="Another run of the change (the same workload as AFTER). May repeat.",
)
@click.option(
    "--junit",
    "junit",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=str),
    help="Also write the gates' verdicts as JUnit XML (one testcase per gate) for CI to show, even when gates fail.",
)
@click.option(
    "--project-before",
    metavar="GPU",
    help="Compare the before run as projected onto GPU (see `tracekit project`), not as measured.",
)
@click.option("--project-after", metavar="GPU", help="Compare the after run as projected onto GPU.")
@device_options("before")
@device_options("after")
@model_options
def command(
    before: str,
    after: str,
    output: str | None,
    fmt: str | None,
    force: bool,
    gates: tuple[str, ...],
    before_runs: tuple[str, ...],
    after_runs: tuple[str, ...],
    junit: str | None,
    project_before: str | None,
    project_after: str | None,
    **options,
) -> None:
    """Compare two runs: BEFORE (the baseline) and AFTER (the change), each a trace file or a
    folder of per-rank traces. Shows context differences that make the comparison unfair
    first, then headline deltas with a verdict per figure (better, worse, within noise),
    per-phase time by bound and category, and kernels matched by category and op, each run
    against its own GPU's roofline. With --fail-if it gates CI: exit status 1 when a gate fails,
    that is when the change is beyond the threshold and so is its whole 95% interval (a change
    past the threshold whose interval reaches back across it is reported as noise and passes).
    --before-run/--after-run add repeated runs of a side: the headline figures then pool every
    run's steps, and the intervals resample runs as well as steps, so a shift of a whole run
    counts as noise; phases and kernels are shown for BEFORE and AFTER."""
    from tracekit.compare.comparison import compare, context_sentence
    from tracekit.compare.gates import parse_gate, suggested_gate
    from tracekit.report.compare import choose
    from tracekit.report.output import DEFAULT_DIR, report_stem

    parsed = [parse_gate(g) for g in gates]  # a bad expression fails before any slow read
    sides = {"before": [before, *before_runs], "after": [after, *after_runs]}
    inputs = sides["before"] + sides["after"]
    if junit:
        from tracekit.report.compare.junit import check_target

        check_target(junit, (*inputs, output))
    _check_inputs(sides)
    from tracekit.specs.lookup import spec_by_name

    targets = {
        side: spec_by_name(g, option=f"--project-{side}") if g else None
        for side, g in (("before", project_before), ("after", project_after))
    }
    renderer, path, replacing = output_target(
        output,
        fmt,
        choose,
        lambda ext: os.path.join(DEFAULT_DIR, f"compare-{report_stem(before)}-vs-{report_stem(after)}{ext}"),
        force,
    )
    if path is not None and any(os.path.abspath(path) == os.path.abspath(p) for p in inputs):
        raise TracekitError(f"{path}: that is one of compare's input traces; name another output file")
    settings = model_settings(options)  # the same model prices both runs
    # Each side's device and graph capture. A bad --gpu-* or --spec-file-* fails before the reads
    # too: both sides' are checked before either side's capture is read.
    for side in sides:
        check_device_options(
            options[f"gpu_{side}"], options[f"spec_file_{side}"], f"--gpu-{side}", f"--spec-file-{side}"
        )
    on = {side: device_settings(options, side) for side in sides}

    def analyse(p: str, side: str):
        return _side(_read(p), targets[side], **on[side], **settings)

    b_all = [analyse(p, "before") for p in sides["before"]]
    a_all = [analyse(p, "after") for p in sides["after"]]
    b_note, a_note = b_all[0][1], a_all[0][1]
    comparison = compare([x for x, _ in b_all], [x for x, _ in a_all])
    # A projected side is the projection's central estimate: say its range where the summary is read.
    comparison.summary += [f"{side}: {n}" for side, n in (("before", b_note), ("after", a_note)) if n]
    # Judged before rendering, so that every format shows each gate's verdict and interval.
    comparison.gates = [g.evaluate(comparison) for g in parsed]
    to_terminal = path is None
    # Messages go to stderr when stdout carries the report itself.
    say = (lambda m: click.echo(m, err=True)) if to_terminal else click.echo
    deliver(renderer.render(comparison), path, output is None, replacing)
    if not to_terminal:
        lines = [s for s in [context_sentence(comparison), *comparison.summary] if s]
        for line in lines[:SUMMARY_LINES]:
            click.echo(f"  {line}")
        if len(lines) > SUMMARY_LINES:
            click.echo(f"  ... {len(lines) - SUMMARY_LINES} more in the report")
        click.echo(_next_step(renderer.name, before, after, path, suggested_gate(comparison)))
    if junit:
        from tracekit.report.compare.junit import write_junit

        write_junit(comparison.gates, junit)
        say(f"wrote {junit} (JUnit XML, {len(parsed)} gate{'s' if len(parsed) != 1 else ''})")
    if parsed:
        # A gate on a figure a run lacks can neither hold nor fail: a usage error (exit 2), not a regression.
        absent = [m for m in (g.missing(comparison) for g in parsed) if m]
        if absent:
            for m in absent[:-1]:
                click.echo(f"tracekit: error: {m}", err=True)
            raise TracekitError(absent[-1])
        failures = [f for f in (g.check(comparison) for g in parsed) if f]
        if failures:
            for f in failures:
                click.echo(f"tracekit: gate failed: {f}", err=True)
            sys.exit(1)
        for g in comparison.gates:
            if g["verdict"] == "noise":
                say(f"gate within noise: {g['sentence']}")
        say(f"gates passed ({len(parsed)})")


def _check_inputs(sides: dict[str, list[str]]) -> None:
    """Every input exists, and no run is given twice on one side (a copy of a run would pass for
    a repeat and shrink the run-to-run spread): checked before the slow reads, one sentence each."""
    for side, paths in sides.items():
        seen: dict[str, str] = {}
        for i, p in enumerate(paths):
            name = f"--{side}-run {p}" if i else p
            if not os.path.exists(p):
                raise TracekitError(f"{name}: no such file or folder")
            key = os.path.realpath(p)
            if key in seen:
                raise TracekitError(
                    f"{name}: the same trace as {seen[key]}; the runs of one side must be separate runs"
                )
            seen[key] = name


def _side(trace, target, **options):
    """One side of the comparison: the run as measured, or as projected onto ``target`` (the
    projection's central estimate, with the sentence that states its range)."""
    from tracekit.analysis import analyze

    if target is None:
        return analyze(trace, **options), None
    from tracekit.whatif.project import project

    projection = project(trace, target, **options)
    return projection.projected["central"], projection.range_note()


def _read(path: str):
    try:
        return read_with_progress(path)
    except TracekitError as e:
        if _is_report_json(path):
            raise TracekitError(
                f"{path} is a tracekit report (JSON), not a trace: compare needs the traces themselves, "
                "because it matches kernels by op across the runs"
            ) from None
        raise e


def _is_report_json(path: str) -> bool:
    """A saved ``tracekit report --format json`` (or compare JSON): small, with our keys."""
    try:
        if os.path.isdir(path) or os.path.getsize(path) > 50_000_000:
            return False
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and "schema_version" in data and ("metrics" in data or "headline" in data)


def _next_step(name: str, before: str, after: str, path: str, gate: str | None) -> str:
    q = shlex.quote
    pair = f"{q(before)} {q(after)}"
    if name == "html":
        # The suggested gate is on a figure both runs have, so it does not fail for want of it.
        ci = f", or gate CI with: tracekit compare {pair} --fail-if {q(gate)}" if gate else ""
        return f"next: open {q(path)} in a browser (it works offline){ci}"
    if name == "md":
        return f"next: paste {q(path)} into a pull request; the full report with charts: tracekit compare {pair}"
    if name == "json":
        return f"next: the keys are schema_version, kind, before, after, method, context, headline, phases, kernels, summary, suggested_gate; for people: tracekit compare {pair}"
    return f"next: tracekit compare {pair} for the HTML report with charts"
