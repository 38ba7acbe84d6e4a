"""The checks of benchmarks/gpu_check.sh that need Python: one collected run's figures against
what they should be. Each prints tab-separated rows ``check<TAB>PASS|FAIL<TAB>figure``.

    python benchmarks/gpu_check.py ceilings NAME.tracekit.json
        the sidecar's measured matmul FLOP/s and copy bandwidth against the spec database row of
        the GPU it names (tracekit.specs.lookup, as calibration does): each within the band
        calibration calls plausible (GPU_PLAUSIBLE to PEAK_TOLERANCE of the datasheet peak), the
        ratio to the datasheet peak and to the row's achievable ceiling printed; and the
        calibration's own verdict (checks.reliable).
    python benchmarks/gpu_check.py report NAME.report.json NAME.tracekit.json MODE
        the JSON report of the run: the GPU found in the spec database, one prefill step and the
        decode steps the run asked for at its batch, decode steps replayed as CUDA graphs exactly
        when MODE is graphs, MFU and MBU shown and at most 1; TTFT and TPOT p50 as figures.

Exit status 0 whatever the checks say (the rows say it); 2 on a usage error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PASS, FAIL = "PASS", "FAIL"


def _row(check: str, ok: bool, figure: str) -> str:
    return f"{check}\t{PASS if ok else FAIL}\t{figure}"


def _load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def ceilings(sidecar_path: str) -> list[str]:
    from tracekit.collect.calibrate import GPU_PLAUSIBLE, PEAK_TOLERANCE
    from tracekit.errors import TracekitError
    from tracekit.specs.lookup import lookup

    sidecar = _load(sidecar_path)
    cal = sidecar.get("calibration")
    if not cal:
        return [_row("ceilings", False, "the sidecar has no calibration (collect ran with --no-calibrate?)")]
    name = cal.get("device_name") or (sidecar.get("device") or {}).get("name")
    try:
        match = lookup({"name": name or ""})
    except TracekitError as e:
        match = None
        reason = str(e)
    else:
        reason = match.reason or ""
    rows = []
    spec = match.spec if match is not None else None
    rows.append(_row("spec row", spec is not None, f"{name!r} -> {spec.key}" if spec else f"{name!r}: {reason}"))
    dtype = cal.get("dtype") or "bf16"
    measured_flops = (cal.get("matmul_flops") or {}).get(dtype)
    measured_bw = cal.get("copy_bandwidth")
    band = f"{GPU_PLAUSIBLE:.0%}-{PEAK_TOLERANCE:.0%} of peak"
    if spec is not None:
        peak = spec.peak_flops(dtype, "matrix")
        if peak and measured_flops:
            ratio = measured_flops / peak
            achievable = peak * spec.achievable_compute_factor
            rows.append(
                _row(
                    f"matmul {dtype} vs spec",
                    GPU_PLAUSIBLE <= ratio <= PEAK_TOLERANCE,
                    f"{measured_flops / 1e12:.4g} TFLOP/s = {ratio:.2f} x peak {peak / 1e12:.4g}"
                    f" ({measured_flops / achievable:.2f} x achievable; pass: {band})",
                )
            )
        else:
            rows.append(_row(f"matmul {dtype} vs spec", False, f"measured {measured_flops}, {spec.key} peak {peak}"))
        bw = spec.peak_bandwidth
        if bw and measured_bw:
            ratio = measured_bw / bw
            achievable = spec.achievable_bandwidth or bw
            rows.append(
                _row(
                    "copy bandwidth vs spec",
                    GPU_PLAUSIBLE <= ratio <= PEAK_TOLERANCE,
                    f"{measured_bw / 1e9:.4g} GB/s = {ratio:.2f} x peak {bw / 1e9:.4g}"
                    f" ({measured_bw / achievable:.2f} x achievable; pass: {band})",
                )
            )
        else:
            rows.append(_row("copy bandwidth vs spec", False, f"measured {measured_bw}, {spec.key} peak {bw}"))
    checks = cal.get("checks") or {}
    problems = "; ".join(checks.get("problems") or []) or "plausible and settled"
    rows.append(
        _row("calibration reliable", bool(checks.get("reliable")), f"{checks.get('attempts')} rounds: {problems}")
    )
    return rows


def report(report_path: str, sidecar_path: str, mode: str) -> list[str]:
    doc = _load(report_path)
    workload = _load(sidecar_path).get("workload") or {}
    rows = []
    device = doc.get("device") or {}
    rows.append(
        _row(
            "report GPU row",
            device.get("type") != "cpu" and bool(device.get("spec_key")),
            f"{device.get('name')!r} -> {device.get('spec_key')} ({device.get('how') or device.get('reason')})",
        )
    )
    steps = doc.get("steps") or []
    prefill = [s for s in steps if s.get("phase") == "prefill"]
    decode = [s for s in steps if s.get("phase") == "decode"]
    want_decode = workload.get("new_tokens")
    rows.append(
        _row(
            "steps",
            len(prefill) == 1 and (want_decode is None or len(decode) == want_decode),
            f"{len(prefill)} prefill, {len(decode)} decode (asked for 1 and {want_decode})",
        )
    )
    batch = workload.get("batch_size")
    batches = sorted({s.get("batch") for s in steps if s.get("batch") is not None})
    rows.append(_row("batch", batches == [batch], f"steps' batch {batches}, asked for {batch}"))
    replayed = sum(bool(s.get("graph_replay")) for s in decode)
    want_graphs = mode == "graphs"
    rows.append(
        _row(
            "graph replay",
            bool(decode) and (replayed == len(decode) if want_graphs else replayed == 0),
            f"{replayed} of {len(decode)} decode steps replayed as graphs ({'all' if want_graphs else 'none'} expected)",
        )
    )
    over = []
    shown = []
    for phase, figures in (doc.get("phases") or {}).items():
        for key in ("mfu", "mbu"):
            v = (figures or {}).get(key)
            if v is not None:
                shown.append(f"{phase} {key.upper()} {v:.2f}")
                if v > 1:
                    over.append(f"{phase} {key}")
    rows.append(_row("MFU/MBU <= 1", bool(shown) and not over, ", ".join(shown) or "none shown"))
    metrics = doc.get("metrics") or {}
    ttft = metrics.get("ttft_ms")
    tpot = (metrics.get("tpot_ms") or {}).get("p50")
    rows.append(
        _row(
            "latency",
            ttft is not None and tpot is not None,
            f"TTFT {ttft:.3g} ms, TPOT p50 {tpot:.3g} ms" if ttft is not None and tpot is not None else "missing",
        )
    )
    return rows


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "ceilings":
        rows = ceilings(argv[1])
    elif len(argv) == 4 and argv[0] == "report":
        rows = report(argv[1], argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
