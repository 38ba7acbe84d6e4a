"""``tracekit gpus``: list the GPU spec database, or show what a device name resolves to."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal, localcontext

import click

from tracekit.specs import GpuSpec, SpecMatch, all_specs, match_device

COLUMNS = (
    "GPU",
    "key",
    "vendor",
    "memory GB",
    "bandwidth TB/s",
    "bf16 TFLOP/s",
    "fp16 TFLOP/s",
    "fp8 TFLOP/s",
    "fp4 TFLOP/s",
    "fp32 vector TFLOP/s",
    "ridge bf16 FLOP/B",
    "link GB/s",
    "achievable compute/bw",
    "device names",
)
FOOTER = (
    "Matrix rates are dense (no 2:4 sparsity) with FP32 accumulate; the ridge point is bf16 matrix "
    "peak / bandwidth; link is the GPU-to-GPU interconnect (NVLink, Infinity Fabric) per direction. Achievable = factor x datasheet peak (sources: tracekit gpus --json). "
    "A GPU not listed is reported as unknown: pass --gpu KEY or a spec file."
)


def _number(value: float | None, scale: float, fmt: str) -> str:
    """``value / scale`` in ``fmt``; a fixed-point figure rounds its half up as the decimal reads
    (1,555 GB/s is 1.56 TB/s: binary floating point holds 1.555 as 1.55499... and printed 1.55)."""
    if value is None:
        return "-"
    if not fmt.endswith("f"):
        return format(value / scale, fmt)
    with localcontext() as ctx:
        ctx.rounding = ROUND_HALF_UP
        return format(Decimal(repr(value / scale)), fmt)


def table_row(spec: GpuSpec) -> tuple[str, ...]:
    """One listing row as text, in COLUMNS order."""
    return (
        spec.name,
        spec.key,
        spec.vendor,
        _number(spec.memory_gb, 1, "g"),
        _number(spec.peak_bandwidth, 1e12, ".2f"),
        _number(spec.peak_flops("bf16", "matrix"), 1e12, ",.1f"),
        _number(spec.peak_flops("fp16", "matrix"), 1e12, ",.1f"),
        _number(spec.matrix_flops.get("fp8"), 1e12, ",.1f"),
        _number(spec.matrix_flops.get("fp4"), 1e12, ",.1f"),
        _number(spec.peak_flops("fp32", "vector"), 1e12, ",.1f"),
        _number(spec.ridge_point("bf16", "matrix"), 1, ".0f"),
        _number(spec.interconnect_bandwidth, 1e9, ",.0f"),
        f"{spec.achievable_compute_factor:.2f}/{spec.achievable_bandwidth_factor:.2f}",
        "; ".join(spec.device_names) or "(none observed; use --gpu)",
    )


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Left-aligned text columns, numbers right-aligned."""
    numeric = {i for i, c in enumerate(COLUMNS) if c.endswith(("GB", "TB/s", "GB/s", "TFLOP/s", "FLOP/B"))}
    widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]

    def line(row: tuple[str, ...]) -> str:
        cells = (c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        return "  ".join(cells).rstrip()

    return "\n".join([line(COLUMNS), line(tuple("-" * w for w in widths)), *map(line, rows)])


def match_view(name: str, match: SpecMatch) -> dict:
    """What ``--match`` reports, as plain data."""
    return {
        "device_name": name,
        "known": match.known,
        "how": match.how,
        "reason": match.reason,
        "spec": match.spec.to_dict() if match.spec else None,
    }


def _match_text(view: dict) -> str:
    if not view["known"]:
        return f"{view['device_name']!r}: unknown: {view['reason']}"
    spec = view["spec"]
    return f"{view['device_name']!r} -> {spec['name']} ({spec['key']}), by {view['how']}"


@click.command("gpus")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output, SI units (FLOP/s, bytes/s).")
@click.option(
    "--match",
    "device_name",
    metavar="NAME",
    help="Show which row a deviceProperties name resolves to and how (name only: no fallback on "
    "compute capability, SMs and memory).",
)
def command(as_json: bool, device_name: str | None) -> None:
    """List the GPU spec database: dense peaks, bandwidth, ridge point and device names."""
    if device_name is not None:
        view = match_view(device_name, match_device({"name": device_name}, all_specs()))
        click.echo(json.dumps(view, indent=2) if as_json else _match_text(view))
        return
    specs = all_specs()
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in specs], indent=2))
        return
    click.echo(format_table([table_row(s) for s in specs]))
    click.echo()
    click.echo(FOOTER)
