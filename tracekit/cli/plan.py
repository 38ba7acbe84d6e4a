"""``tracekit plan TRACE... --isl N --osl N --rate R --ttft-slo T --tpot-slo T``: size a deployment."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

import click

from tracekit.cli.common import (
    deliver,
    model_options,
    output_options,
    output_target,
    read_with_progress,
    stated_figures,
)
from tracekit.errors import TracekitError

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s|us)\s*$", re.IGNORECASE)


def duration_s(text: str, what: str) -> float:
    """``500ms``, ``0.5s``, ``800us`` -> seconds; a bare number is refused (ms or s?)."""
    m = _DURATION.match(text or "")
    if not m:
        raise TracekitError(f"{what} {text!r} needs a unit: e.g. 500ms or 0.5s")
    value, unit = float(m.group(1)), m.group(2).lower()
    seconds = value * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]
    if seconds <= 0:
        raise TracekitError(f"{what} must be positive, not {text!r}")
    return seconds


@click.command("plan")
@click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=True, file_okay=True, path_type=str))
@click.option("--isl", type=click.IntRange(min=1), required=True, metavar="N", help="Prompt tokens per request.")
@click.option("--osl", type=click.IntRange(min=1), required=True, metavar="N", help="Output tokens per request.")
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    required=True,
    metavar="R",
    help="Requests per second to serve.",
)
@click.option("--ttft-slo", required=True, metavar="TIME", help="Time-to-first-token objective, e.g. 500ms.")
@click.option("--tpot-slo", required=True, metavar="TIME", help="Time-per-output-token objective, e.g. 50ms.")
@click.option(
    "--gpu",
    metavar="NAME",
    help="The GPU to plan for; runs measured on another are projected onto it (see `tracekit project`).",
)
@click.option(
    "--max-gpus",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    metavar="N",
    help="The most GPUs an option may use.",
)
@click.option(
    "--kv-link",
    type=click.FloatRange(min=0, min_open=True),
    metavar="GB/S",
    help="Bandwidth that carries a prompt's KV cache from prefill to decode GPUs (disaggregated).",
)
@click.option(
    "--keep-idle",
    is_flag=True,
    help="Keep GPU idle the trace shows as a one-off blocking copy or sync (longer than its step's GPU "
    "work, not recurring) in every step's cost; by default it is left out and named in the notes.",
)
@output_options("reports/plan-<trace name>.<format>")
@model_options
def command(
    traces: tuple[str, ...],
    isl: int,
    osl: int,
    rate: float,
    ttft_slo: str,
    tpot_slo: str,
    gpu: str | None,
    max_gpus: int,
    kv_link: float | None,
    keep_idle: bool,
    output: str | None,
    fmt: str | None,
    force: bool,
    model: str | None,
    tp: int | None,
    weights: str | None,
    costs: str,
    model_force: bool = False,
) -> None:
    """Size a colocated and a disaggregated (prefill and decode on separate GPUs) deployment
    from the phase costs measured in TRACE(s): prefill time as a function of prompt tokens and
    decode step time as a function of batch and context, fitted from the run's steps and the
    model's roofline. Reports, per option, GPUs per phase, capacity against demand, expected
    TTFT and TPOT at that load, whether the SLOs are met and goodput per GPU, and recommends
    the cheapest that meets them.

    \b
    Example:
      tracekit plan prefill.json.gz decode.json.gz --model qwen3-8b --isl 2048 --osl 256 \\
          --rate 4 --ttft-slo 500ms --tpot-slo 50ms --kv-link 50
    """
    from tracekit.analysis.analyze import analyze
    from tracekit.analysis.workload import resolve_model
    from tracekit.cli.common import load_model_option
    from tracekit.report.output import DEFAULT_DIR, report_stem
    from tracekit.report.plan import choose
    from tracekit.specs.lookup import spec_by_name
    from tracekit.whatif.fit import fit_costs
    from tracekit.whatif.plan import Demand, Slo, plan
    from tracekit.whatif.project import project

    slo = Slo(duration_s(ttft_slo, "--ttft-slo"), duration_s(tpot_slo, "--tpot-slo"))
    target = spec_by_name(gpu) if gpu else None
    renderer, path, replacing = output_target(
        output, fmt, choose, lambda ext: os.path.join(DEFAULT_DIR, f"plan-{report_stem(traces[0])}{ext}"), force
    )
    for p in traces:
        if not os.path.exists(p):
            raise TracekitError(f"{p}: no such file or folder")
    spec_model = load_model_option(model, weights)
    read = [read_with_progress(p) for p in traces]
    spec_model = spec_model or resolve_model(read[0])
    options: dict[str, Any] = dict(
        model=spec_model, tp=tp, costs=costs, weights=None, model_force=model_force, stated=stated_figures()
    )
    analyses, projected = [], []
    for t in read:
        a = analyze(t, **options)
        if target is not None and a.device.get("spec_key") != target.key:
            # The projection compare --project-before uses too: its central estimate, its range said.
            projection = project(t, target, **options)
            a = projection.projected["central"]
            projected.append(projection.range_note())
        analyses.append(a)
    spec = target
    if spec is None and analyses[0].device.get("type") == "gpu" and analyses[0].device.get("spec_key"):
        spec = spec_by_name(analyses[0].device["spec_key"])
    # A model a trace contradicts (its figures withheld) does not extrapolate the plan either.
    withheld = next(((a.model or {}).get("withheld") for a in analyses if (a.model or {}).get("withheld")), None)
    if withheld:
        click.echo(f"warning: planned without the model: {withheld}", err=True)
    phase_costs = fit_costs(
        analyses,
        None if withheld else spec_model,
        memory_gb=spec.memory_gb if spec is not None else None,
        keep_idle=keep_idle,
    )
    phase_costs.notes.extend(projected)
    result = plan(
        phase_costs,
        Demand(rate, isl, osl),
        slo,
        max_gpus=max_gpus,
        kv_link=kv_link * 1e9 if kv_link else None,
        inputs={
            "traces": list(traces),
            "name": report_stem(traces[0]),
            "max_gpus": max_gpus,
            "model": spec_model.name if spec_model is not None else None,
            "gpu": target.key if target is not None else None,
            "keep_idle": keep_idle,
        },
    )
    deliver(renderer.render(result), path, output is None, replacing)
    to_terminal = path is None
    if to_terminal:
        return
    click.echo(f"  {result.why}")
    for m in result.missing:
        click.echo(f"  missing: {m}")
    # Only an HTML page opens in a browser; JSON, Markdown and text are read where they are.
    where = "open it in a browser" if renderer.name == "html" else "read it"
    click.echo(f"next: {where} ({shlex.quote(path)}), or print it: tracekit plan ... -f text")
