"""``tracekit collect``: profile an inference run, write a trace and its metadata sidecar."""

from __future__ import annotations

import os
import shlex

import click

from tracekit.errors import TracekitError

_PRESET_HELP = "tiny (CPU, seconds), 1b (Llama-3.2-1B shapes), 8b (Llama-3-8B shapes)"


@click.command(
    "collect",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=(
        "\b\nExamples:\n"
        "  tracekit collect                                # tiny Llama on this machine, then: tracekit report\n"
        "  tracekit collect --preset 8b -b 16 -p 2048 -n 128\n"
        "  tracekit collect --model ./my-checkpoint --dtype bf16\n"
        "  tracekit collect --tp 2 -o tp2/                 # 2 tensor-parallel ranks, then: tracekit report tp2/\n"
        "  tracekit collect -- python serve_bench.py --requests 8   # your own code, marked with tracekit.phase"
    ),
)
@click.option(
    "--preset", metavar="NAME", default=None, help=f"Built-in model, random weights [default: tiny]: {_PRESET_HELP}."
)
@click.option("--model", "model_path", metavar="PATH", default=None, help="A Hugging Face checkpoint folder on disk.")
@click.option(
    "--script", metavar="FILE", default=None, help="Run this Python file under the profiler (arguments after --)."
)
@click.option("-b", "--batch-size", type=int, default=None, help="Sequences per batch [default: the preset's].")
@click.option("-p", "--prompt-len", type=int, default=None, help="Prompt tokens per sequence [default: the preset's].")
@click.option(
    "-n",
    "--new-tokens",
    type=int,
    default=None,
    help="Decode steps, one token per sequence each [default: the preset's].",
)
@click.option(
    "--dtype", default="auto", show_default=True, help="auto (bf16 on a GPU, fp32 on the CPU), fp32, bf16 or fp16."
)
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="auto (CUDA/ROCm GPU if present, else CPU), cpu, cuda or cuda:N.",
)
@click.option("--warmup", type=int, default=1, show_default=True, help="Unprofiled warm-up generations first.")
@click.option("--compile", "compile_", is_flag=True, help="torch.compile the decode step (static KV cache).")
@click.option("--cuda-graphs", is_flag=True, help="Replay decode as CUDA graphs (torch.compile mode reduce-overhead).")
@click.option(
    "--skip-steps",
    type=int,
    default=0,
    show_default=True,
    help="Decode steps to run before recording starts (long runs).",
)
@click.option("--record-steps", type=int, default=None, help="Decode steps to record [default: all].")
@click.option(
    "--profiler-warmup",
    type=int,
    default=1,
    show_default=True,
    help="Profiler warm-up steps before recording (with --skip-steps).",
)
@click.option(
    "--tp",
    type=int,
    default=None,
    metavar="N",
    help="Run the preset tensor-parallel over N processes (gloo on the CPU, NCCL on N GPUs); "
    "-o is then a folder that gets one trace and sidecar per rank.",
)
@click.option("--layers", type=int, default=None, help="Override a preset's layer count (smaller runs of big shapes).")
@click.option(
    "--threads", type=int, default=None, help="CPU threads for torch (torch.set_num_threads) [default: torch's]."
)
@click.option("--no-calibrate", is_flag=True, help="Skip measuring this device's matmul FLOP/s and copy bandwidth.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the random weights and prompts.")
@click.option(
    "-o",
    "--output",
    metavar="PATH",
    default=None,
    help="Trace file or folder [default: ./tracekit-traces/<unique name>].",
)
@click.option("--force", is_flag=True, help="Overwrite an existing trace.")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr [default: when it is a terminal].")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- python SCRIPT [ARGS]...]")
def command(
    preset,
    model_path,
    script,
    batch_size,
    prompt_len,
    new_tokens,
    dtype,
    device,
    warmup,
    compile_,
    cuda_graphs,
    skip_steps,
    record_steps,
    profiler_warmup,
    tp,
    layers,
    threads,
    no_calibrate,
    seed,
    output,
    force,
    progress,
    command,
) -> None:
    """Profile an LLM inference run and write a trace plus a metadata sidecar.

    With no arguments, builds the tiny Llama preset (random weights, no download) on this
    machine's GPU or CPU, runs prefill and decode under torch.profiler with each phase
    marked, and writes <name>.pt.trace.json.gz and <name>.tracekit.json (workload, versions,
    wall-clock TTFT/TPOT, profiler overhead, measured device ceilings).
    """
    argv = list(command)
    if script is not None:
        argv = [script, *argv]
    elif argv and preset is None and model_path is None and argv[0] in _preset_names():
        raise TracekitError(f"to choose a preset, write --preset {argv[0]}")
    if argv and (preset or model_path) and script is None:
        raise TracekitError(
            f"unexpected arguments {shlex.join(argv)!r}: a script runs on its own (tracekit collect -- python SCRIPT)"
        )

    from tracekit.collect import collect
    from tracekit.collect.collector import CollectOptions

    opts = CollectOptions(
        preset=preset,
        model=model_path,
        script=argv or None,
        batch_size=batch_size,
        prompt_len=prompt_len,
        new_tokens=new_tokens,
        dtype=dtype,
        device=device,
        warmup=warmup,
        compile=compile_,
        cuda_graphs=cuda_graphs,
        skip_steps=skip_steps,
        record_steps=record_steps,
        profiler_warmup=profiler_warmup,
        calibrate=not no_calibrate,
        output=output,
        force=force,
        seed=seed,
        layers=layers,
        threads=threads,
        progress=progress,
    )
    if tp is not None:
        _collect_tp(opts, tp)
        return
    if opts.script:
        click.echo(f"tracekit: profiling {shlex.join(opts.script)}", err=True)
    result = collect(opts)
    for line in summary_lines(result.sidecar):
        click.echo(line)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"trace:   {result.trace_path}")
    click.echo(f"sidecar: {result.sidecar_path}")
    click.echo(f"next:    tracekit report {shlex.quote(_display(result.trace_path))}")


def _collect_tp(opts, tp: int) -> None:
    from tracekit.collect.parallel import collect_tp

    result = collect_tp(opts, tp, announce=lambda line: click.echo(f"tracekit: {line}", err=True))
    first = result.ranks[0].sidecar
    for line in summary_lines(first):
        click.echo(line)
    tpi = (first.get("workload") or {}).get("tensor_parallel") or {}
    shard = tpi.get("shard") or {}
    click.echo(
        f"tensor-parallel: {tp} rank{'s' if tp != 1 else ''} over {result.backend}, each with "
        f"{shard.get('num_attention_heads')} heads, {shard.get('num_key_value_heads')} KV heads and MLP width "
        f"{shard.get('intermediate_size')}; {tpi.get('all_reduces_per_step')} all-reduces per forward pass"
    )
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    folder = _display(result.folder)
    names = f"{os.path.basename(result.trace_paths[0])}" + (
        f" .. {os.path.basename(result.trace_paths[-1])}" if tp > 1 else ""
    )
    click.echo(f"wrote {tp} rank trace{'s' if tp != 1 else ''} to {folder} ({names}, each with its sidecar)")
    click.echo(f"next:    tracekit report {shlex.quote(folder)}")


def _preset_names() -> tuple[str, ...]:
    from tracekit.collect.workloads import PRESETS

    return tuple(PRESETS)


def _display(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def summary_lines(sc: dict) -> list[str]:
    """A few lines on what was collected, from the sidecar."""
    from tracekit import formatting as fmt
    from tracekit.analysis.figures import unprofiled_timing
    from tracekit.analysis.measurement import busy_sentence

    w, t, dev = sc.get("workload", {}), sc.get("timing", {}), sc.get("device", {})
    lines = []
    if w.get("kind") == "script":
        lines.append(f"ran {w.get('script')} on {dev.get('name')} ({dev.get('type')})")
        if t.get("profiled_wall_ms") is not None:
            lines.append(f"wall time under the profiler: {t['profiled_wall_ms']:.1f} ms")
    else:
        what = w.get("preset") or w.get("model_path")
        params = w.get("parameters")
        lines.append(
            f"{what} ({_count(params)} parameters, {w.get('dtype')}) on {dev.get('name')} ({dev.get('type')}): "
            f"batch {w.get('batch_size')}, prompt {w.get('prompt_len')}, {w.get('new_tokens')} decode steps"
        )
        # The same computation `summary` and `report` show (one value per figure).
        figs = unprofiled_timing(t) or {}
        if figs.get("ttft_ms") is not None and figs.get("tpot_p50_ms") is not None:
            lines.append(
                f"TTFT {fmt.ms(figs['ttft_ms'])}, TPOT p50 {fmt.ms(figs['tpot_p50_ms'])}, without the profiler"
            )
        ratio = t.get("profiler_overhead_ratio")
        if ratio is not None and busy_sentence(dev if dev.get("type") == "cpu" else {}):
            lines.append(
                f"profiler overhead: not measurable on a busy machine (profiled / unprofiled {ratio:.2f} "
                "is the other processes' noise as much as the profiler's cost)"
            )
        elif ratio is not None:
            lines.append(
                f"profiler overhead: {ratio:.2f}x the unprofiled time of the recorded run"
                if ratio >= 1
                else f"profiler overhead: none measurable (profiled / unprofiled {ratio:.2f}: below 1 is "
                "measurement noise)"
            )
    cal = sc.get("calibration")
    if cal:
        flops = next(iter(cal.get("matmul_flops", {}).values()), None)
        bw = cal.get("copy_bandwidth")
        checks = cal.get("checks") or {}
        if flops and bw:
            spread = checks.get("spread") or {}
            how = (
                f" (best of {checks['attempts']} rounds; spread {spread['matmul_flops']:.0%} and "
                f"{spread['copy_bandwidth']:.0%})"
                if spread and checks.get("attempts")
                else ""
            )
            lines.append(
                # SI prefixes, not a fixed unit: a GPU's 3,350 GB/s read "3.35e+03 GB/s" with .3g
                f"measured ceilings: {fmt.flops(flops)} matmul ({cal.get('dtype')}), {fmt.bandwidth(bw)} copy{how}"
            )
        if checks.get("plausible") is False:
            lines.append(
                f"the ceilings stayed implausible after {checks.get('attempts')} measurements "
                f"({'; '.join(checks.get('problems') or [])}): the machine is busy; "
                + (
                    "the report will raise them to what the run achieved"
                    if cal.get("device") == "cpu"
                    else "the report will use the datasheet row instead"
                )
            )
        elif checks.get("stable") is False:
            lines.append(
                f"the ceilings did not settle in {checks.get('attempts')} rounds "
                f"({'; '.join(checks.get('problems') or [])}): the report marks them unreliable"
            )
    return lines


def _count(n) -> str:
    if not n:
        return "?"
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)
