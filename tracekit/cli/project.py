"""``tracekit project TRACE --to GPU``: what a measured run would do on another GPU."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

import click

from tracekit.cli.common import (
    deliver,
    device_options,
    device_settings,
    model_options,
    model_settings,
    output_options,
    output_target,
    read_with_progress,
    trace_argument,
)
from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.whatif.check import CheckedProjection


@click.command("project")
@trace_argument
@click.option(
    "--to",
    "to",
    required=True,
    metavar="GPU",
    help="The GPU to project onto: a name or key from `tracekit gpus` (e.g. mi300x, h100-sxm, b200), or a "
    "spec file (JSON, CSV or TOML, as for --spec-file; vendor CPU for a CPU trace).",
)
@output_options("reports/<trace name>-on-<gpu>.<format>")
@click.option(
    "--check",
    "check_trace",
    metavar="TARGET_TRACE",
    help="A trace of the same workload measured on the target GPU: show projected beside measured, per "
    "phase, kernel category and kernel name, with the error (refused when the work differs).",
)
@click.option(
    "--save-factors",
    "save_factors",
    metavar="FILE",
    help="With --check: write the per-category fractions of the roof and the collectives' efficiencies "
    "both GPUs measured, with the pair they came from (JSON), for --factors.",
)
@click.option(
    "--factors",
    "factors_file",
    metavar="FILE",
    help="Use the fractions and efficiencies a --save-factors file measured (where it measured both GPUs' "
    "vendor classes) instead of the published table's; the report says so.",
)
@device_options()
@model_options
def command(
    trace: str,
    to: str,
    output: str | None,
    fmt: str | None,
    force: bool,
    check_trace: str | None,
    save_factors: str | None,
    factors_file: str | None,
    **options,
) -> None:
    """Project TRACE onto another GPU: every kernel re-priced on the target's roofline at the
    fraction of the roof it reached where it was measured (compute-limited work with the
    peak FLOP/s for its dtype, memory-limited work with bandwidth, collectives with the
    interconnect), host and idle time as measured. Gives GPU busy time, step time, TTFT/TPOT
    or step latency and tokens/s per phase: a central estimate and a range, from how each kind of
    kernel reaches its roof on each vendor class, widened by the time of unknown cost.

    \b
    Example:
      tracekit project b300_decode.json.gz --to mi300x --model qwen3-30b-a3b
      tracekit project b300_decode.json.gz --to mi300x --check mi300x_decode.json.gz
    """
    from tracekit.report.output import DEFAULT_DIR, report_stem
    from tracekit.report.project import choose, confidence_lines
    from tracekit.specs import load_spec_file
    from tracekit.specs.lookup import spec_by_name
    from tracekit.whatif.project import project

    # A bad --to fails before the slow read; a path that exists is a spec file.
    to_file = to if os.path.isfile(to) else None
    target = load_spec_file(to_file) if to_file else spec_by_name(to, option="--to")
    from tracekit.whatif import learnt as learnt_mod

    if save_factors is not None:
        if check_trace is None:
            raise TracekitError("--save-factors needs --check TARGET_TRACE: the factors are what the pair measured")
        from tracekit.report.output import check_output

        check_output(save_factors, force=force, ours=False)  # refused before the slow work, as -o is
    learnt = learnt_mod.load(factors_file) if factors_file is not None else None
    renderer, path, replacing = output_target(
        output, fmt, choose, lambda ext: os.path.join(DEFAULT_DIR, f"{report_stem(trace)}-on-{target.key}{ext}"), force
    )
    for path_ in (trace, check_trace):
        if path_ is not None and not os.path.exists(path_):
            raise TracekitError(f"{path_}: no such file or folder")
    settings = model_settings(options)
    # The measured run's device and graph capture: the source's only, never the --check trace's.
    measured_on = device_settings(options)
    source_trace = read_with_progress(trace)
    projection = project(source_trace, target, learnt=learnt, **measured_on, **settings)
    checked: CheckedProjection | None = None
    if check_trace is not None:
        from tracekit.analysis import analyze
        from tracekit.whatif.check import CheckedProjection, check

        # The target trace is analysed as the source was (same model, costs), on its own GPU: the
        # spec file given as --to when there is one, else the GPU its trace names.
        on_target = analyze(read_with_progress(check_trace), spec_file=to_file, **settings)
        checked = CheckedProjection(projection, check(projection, on_target))
        if save_factors is not None:
            from tracekit.analysis.workload import choose_tp

            ranks = choose_tp(source_trace, settings.get("tp"))[0]
            from tracekit.report import write_atomic

            write_atomic(save_factors, learnt_mod.dumps(learnt_mod.from_check(projection, on_target, ranks)))
            click.echo(
                f"wrote {save_factors} (use it with: tracekit project TRACE --to GPU --factors "
                f"{shlex.quote(save_factors)})"
            )
    deliver(renderer.render(projection if checked is None else checked), path, output is None, replacing)
    to_terminal = path is None
    if to_terminal:
        return
    for line in confidence_lines(projection.to_dict()):
        click.echo(f"  {line}")
    if checked is not None:
        click.echo(f"  check: {checked.check.headline}")
    q = shlex.quote
    # compare's --project-before takes a GPU from the database, not a spec file: offered only then.
    there = (
        ""
        if to_file
        else (
            f", or compare with a run measured there: tracekit compare {q(trace)} OTHER_TRACE "
            f"--project-before {q(target.key)}"
        )
    )
    click.echo(f"next: open {q(path)} in a browser{there}")
