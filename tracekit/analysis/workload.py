"""Which model, tensor-parallel degree and device spec a trace is priced with, and what the report says of them.

Takes the trace and the user's options (``--model``/``--weights``, ``--tp``, ``--gpu``/``--spec-file``,
the CPU peaks) and gives ``choose_model``, ``choose_tp`` and ``device_spec`` for pricing, and the
report's views of them: ``describe_model`` (``Analysis.model``), ``describe_device`` and
``describe_workload`` (what ``tracekit collect`` recorded of the run).
"""

from __future__ import annotations

from typing import Any

from tracekit.analysis import truncation
from tracekit.errors import TracekitError
from tracekit.models import ModelSpec, load_model
from tracekit.models.costs import parameters
from tracekit.models.registry import from_sidecar
from tracekit.specs import SpecMatch, cpu_lookup, with_calibration
from tracekit.specs.identify import identify
from tracekit.trace.model import Trace

# --- model ---------------------------------------------------------------------------


def resolve_model(trace: Trace, model=None, weights: str | None = None) -> ModelSpec | None:
    """The model that prices ``trace``: ``model`` (a spec, registry name or path) or the config
    its collect sidecar recorded; None without either."""
    return choose_model(trace, model, weights)[0]


def choose_model(trace: Trace, model, weights: str | None) -> tuple[ModelSpec | None, str | None]:
    """The model to price by, and how it was chosen."""
    if isinstance(model, ModelSpec):
        return model, "given"
    if isinstance(model, str):
        return load_model(model, weights=weights), "--model"
    if weights is not None:
        raise TracekitError("--weights says how a model's weights are stored: pass --model too")
    try:
        collected = from_sidecar(trace.sidecar)
    except TracekitError:
        collected = None  # an unusual recorded config: the run is still analysed from its shapes
    return (collected, "the config tracekit collect recorded with the trace") if collected else (None, None)


def choose_tp(trace: Trace, tp: int | None) -> tuple[int, str]:
    """Tensor-parallel degree of the run, and where it came from."""
    if tp is not None:
        if tp < 1:
            raise TracekitError(f"--tp must be at least 1, not {tp}")
        return int(tp), "--tp"
    world = (trace.distributed or {}).get("world_size")
    if isinstance(world, int) and world >= 1:
        return world, "distributedInfo's world size (pass --tp if the run was data- or expert-parallel)"
    if trace.sidecar:
        return 1, "tracekit collect runs one process"
    return 1, "assumed 1: the trace has no distributedInfo (pass --tp)"


def describe_model(
    spec: ModelSpec | None, how: str | None, tp: int, tp_how: str, costs: str, mcosts, asked
) -> dict[str, Any] | None:
    """What the report says about the model that priced the kernels (``Analysis.model``)."""
    if spec is None:
        return None
    out: dict[str, Any] = {
        "name": spec.name,
        "source": spec.source,
        "chosen_by": how,
        "summary": spec.summary(),
        "parameters": parameters(spec),
        "tp": tp,
        "tp_source": tp_how,
        "precision": {
            c: spec.weight(c).name
            for c in ("attention", "linear_attention", "mlp", "experts", "shared_experts", "lm_head")
            if _has(spec, c)
        },
        "precision_source": spec.precision_source,
        "costs": costs,
    }
    if mcosts is not None:
        out["kv_cache_dtype"] = mcosts.kv_dtype
        out["kv_cache_how"] = mcosts.kv_how
        out["layer_check"] = mcosts.layer_check
        out["withheld"] = mcosts.withheld
        out["dtype_conflicts"] = {c: {"kernels": k, "model": m} for c, (k, m) in mcosts.dtype_conflicts.items()}
        # {component: the formula and numbers of its estimated bytes} (experts touched, KV read).
        out["estimates"] = dict(mcosts.estimates)
    return out


def _has(spec: ModelSpec, cls: str) -> bool:
    from tracekit.models.config import DENSE, LINEAR, MOE

    return {
        "linear_attention": spec.count(attention=LINEAR) > 0,
        "mlp": spec.count(mlp=DENSE) > 0,
        "experts": spec.count(mlp=MOE) > 0,
        "shared_experts": bool(spec.shared_intermediate),
    }.get(cls, True)


# --- device --------------------------------------------------------------------------


def device_spec(trace: Trace, gpu, spec_file, cpu_flops, cpu_bw) -> SpecMatch:
    """The spec row ``trace`` is priced against: its GPU identified (or ``gpu``/``spec_file``), or its CPU."""
    if trace.has_gpu or gpu or spec_file:
        props, note = trace.device_resolution()
        names = trace.kernels["name"].cat.categories if hasattr(trace.kernels["name"], "cat") else trace.kernels["name"]
        match = identify(props, note, (str(n) for n in names), gpu=gpu, spec_file=spec_file)
        if match.spec is not None and trace.sidecar:
            # Measured ceilings from collect become the achievable roof; peaks stay.
            match = SpecMatch(with_calibration(match.spec, trace.sidecar), match.how, match.reason, match.notes)
        return match
    # A user-given CPU matmul peak is one rate for every floating-point dtype.
    flops = {d: cpu_flops for d in ("fp32", "bf16", "fp16")} if cpu_flops else None
    return cpu_lookup(trace.sidecar or {}, matmul_flops=flops, bandwidth=cpu_bw)


def describe_device(trace: Trace, device_type: str, match: SpecMatch) -> dict[str, Any]:
    """What the report says about the device and the spec row that priced it (``Analysis.device``)."""
    spec = match.spec
    name = (
        trace.device_name()
        if device_type == "gpu"
        else ((trace.sidecar or {}).get("device") or {}).get("name") or "CPU"
    )
    reason = match.reason
    if device_type == "cpu" and truncation.gpu_events_lost(trace):
        # A GPU trace cut before its kernels is not a CPU trace: its device's work is unknown.
        device_type, name, spec, reason = "unknown", trace.device_name(), None, truncation.device_unknown_reason(trace)
    return {
        "name": name,
        "type": device_type,
        "spec": None if spec is None else spec.name,
        "spec_key": None if spec is None else spec.key,
        "how": match.how,
        "reason": reason,
        # Fields of the trace's deviceProperties that no GPU can have, ignored (specs.lookup).
        "notes": list(match.notes),
        "peak_basis": None if spec is None else spec.peak_basis,
        "peak_bandwidth": None if spec is None else spec.peak_bandwidth,
        "achievable_bandwidth": None if spec is None else spec.achievable_bandwidth,
        "achievable_bandwidth_basis": None if spec is None else spec.achievable_bandwidth_basis,
        # The spec row's compute peaks (FLOP/s by unit and dtype), as used for the roofline.
        "peak_flops": None if spec is None else {"matrix": dict(spec.matrix_flops), "vector": dict(spec.vector_flops)},
        # The spec row's L2 cache (MB): data that fits can beat the DRAM bandwidth roof.
        "l2_cache_mb": None if spec is None else spec.l2_cache_mb,
    }


def describe_workload(trace: Trace) -> dict[str, Any] | None:
    """The run as ``tracekit collect`` recorded it in the sidecar (``Analysis.workload``); None without one."""
    side = trace.sidecar
    if not side:
        return None
    keep = ("workload", "versions", "device", "timing", "calibration", "schedule", "created")
    return {k: side.get(k) for k in keep if k in side}
