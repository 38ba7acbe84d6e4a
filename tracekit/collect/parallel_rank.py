"""One rank of ``tracekit collect --tp N``: the process ``tracekit.collect.parallel`` starts per rank.

``python -m tracekit.collect.parallel_rank SCRATCH RANK`` reads the run's ``job.json`` from the
scratch folder, joins the ``torch.distributed`` group, builds this rank's shard of the preset
(q/k/v and gate/up column-parallel, o_proj and down_proj row-parallel with an all-reduce of
their output), runs ``collector.measure`` into the scratch folder, and writes its result (the
sidecar's data and the trace's path) or its error, as one line, to ``rank<r>.result.json``
for the parent. It exits when its parent disappears, so no rank outlives an interrupted run.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from tracekit.collect.parallel import rank_trace_name, result_path, shard_sizes
from tracekit.errors import TracekitError

# Fault injection for tests: the rank named here raises inside its first all-reduce, while
# its peers wait in theirs (the case that must not leave a process behind).
FAIL_RANK_ENV = "TRACEKIT_TP_FAIL_RANK"
_INIT_TIMEOUT_S = 600


def _watch_parent(parent: int) -> None:
    """Exit when the process that started this rank is gone (killed, or ended without us)."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(70)

    threading.Thread(target=watch, name="tracekit-parent-watch", daemon=True).start()


def _first_line(e: BaseException) -> str:
    if isinstance(e, TracekitError):
        return e.message if hasattr(e, "message") else str(e)
    text = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


def rank_main(scratch: str, rank: int) -> int:
    """The body of one rank process; its result (or error) goes to ``rank<r>.result.json``."""
    with open(os.path.join(scratch, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    _watch_parent(int(job["parent"]))
    try:
        result = _rank_run(job, rank, scratch)
        payload = {"ok": True, **result}
        code = 0
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the parent as one line
        payload = {"ok": False, "error": _first_line(e), "time": time.time()}
        code = 1
    tmp = result_path(scratch, rank) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, default=str)
    os.replace(tmp, result_path(scratch, rank))
    return code


def _rank_run(job: dict[str, Any], rank: int, scratch: str) -> dict[str, Any]:
    import datetime

    import torch
    import torch.distributed as dist

    from tracekit.collect import collector, runner, sidecar, workloads
    from tracekit.collect.calibrate import calibrate

    opts = collector.CollectOptions(**job["options"])
    tp, backend = int(job["tp"]), job["backend"]
    if opts.threads:
        torch.set_num_threads(int(opts.threads))
    device = job["device"]
    if device.startswith("cuda"):
        device = f"cuda:{rank}"
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{job['port']}",
        rank=rank,
        world_size=tp,
        timeout=datetime.timedelta(seconds=_INIT_TIMEOUT_S),
    )
    try:
        plan = collector.plan_generation(opts)
        dtype = workloads.resolve_dtype(opts.dtype, device)
        torch.manual_seed(opts.seed)
        wl, full_cfg, shard = _load_shard(plan.preset, tp, device, dtype, opts.layers, opts.seed)
        fail = os.environ.get(FAIL_RANK_ENV)
        _add_all_reduces(wl.model, fail_here=fail is not None and fail.strip() == str(rank))
        gen = runner.Generator(wl, plan.batch, plan.prompt_len, plan.new_tokens, seed=opts.seed)
        dev_info = sidecar.device_info(device)
        info = collector.workload_info(wl, opts, plan, device, dtype)
        full_params = workloads.count_parameters(workloads.build_from_config(full_cfg, "meta", dtype))
        n_layers = int(full_cfg.num_hidden_layers)
        info.update(
            {
                "model_config": workloads.config_dict(full_cfg),  # the whole model: analysis divides by the TP degree
                "parameters": full_params,
                "tensor_parallel": {
                    "world_size": tp,
                    "rank": rank,
                    "backend": backend,
                    "shard": shard,
                    "parameters_per_rank": wl.parameters,
                    "all_reduces_per_step": 2 * n_layers,
                    "scheme": "q/k/v and gate/up column-parallel, o_proj and down_proj row-parallel, each followed by "
                    "an all-reduce (sum); embeddings, norms and lm_head replicated",
                },
            }
        )
        final_path = os.path.join(job["folder"], rank_trace_name(rank))
        tmp = os.path.join(scratch, rank_trace_name(rank))
        comm_device = torch.device(device) if backend == "nccl" else torch.device("cpu")

        def agree(more: bool) -> bool:
            flag = torch.tensor([1 if more else 0], dtype=torch.int32, device=comm_device)
            dist.broadcast(flag, src=0)
            return bool(flag.item())

        progress = collector.Progress(False, 0)
        plain, n_plain, prof, schedule = collector.measure(
            gen, opts, progress, tmp, collector.trace_metadata(info, final_path), agree=agree
        )
        # Every rank's trace is written: the cores are free for calibration.
        if backend == "nccl":
            dist.barrier(device_ids=[rank])
        else:
            dist.barrier()
    finally:
        dist.destroy_process_group()
    calibration = None
    if opts.calibrate and rank == 0:
        del gen, wl
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        calibration = calibrate(device, dtype, device_name=dev_info.get("name"))
        calibration["measured_on"] = f"rank 0, after every rank had finished recording; shared by all {tp} ranks"
    timing = collector.timing_info(plain, n_plain, prof, schedule, opts, device, plan.new_tokens)
    notes = collector.measurement_notes(dev_info, device, timing["profiler_overhead_ratio"])
    data = sidecar.build(info, dev_info, timing, calibration, schedule.describe(plan.new_tokens))
    data["notes"] = notes
    return {"sidecar": data, "trace_tmp": tmp}


def _load_shard(preset, tp: int, device: str, dtype, layers: int | None, seed: int):
    """This rank's shard of ``preset``: (Workload, the full config, the shard's sizes)."""
    from transformers import LlamaConfig

    from tracekit.collect import workloads

    full = workloads.preset_config(preset, layers)
    shard = shard_sizes(full, tp)
    kw = {**full.to_dict(), **shard}
    cfg = LlamaConfig(**{k: v for k, v in kw.items() if k not in ("transformers_version", "model_type")})
    cfg.architectures = ["LlamaForCausalLM"]
    model = workloads.build_from_config(cfg, device, dtype, seed=seed)
    wl = workloads.Workload(
        model=model,
        config=cfg,
        kind="preset",
        preset=preset.name,
        model_path=None,
        device=device,
        dtype=dtype,
        parameters=workloads.count_parameters(model),
        architecture="LlamaForCausalLM",
        vocab_size=int(cfg.vocab_size),
        info={"layers_override": layers, "tensor_parallel": tp},
    )
    return wl, full, shard


def _add_all_reduces(model, fail_here: bool = False) -> int:
    """An all-reduce (sum) of every row-parallel projection's output: o_proj and down_proj."""
    import torch.distributed as dist

    def hook(_module, _inputs, output):
        if fail_here:
            raise RuntimeError(f"injected failure ({FAIL_RANK_ENV})")
        dist.all_reduce(output)
        return output

    n = 0
    for name, module in model.named_modules():
        if name.endswith((".o_proj", ".down_proj")):
            module.register_forward_hook(hook)
            n += 1
    if not n:  # pragma: no cover - the presets are Llamas
        raise TracekitError("found no o_proj/down_proj projections to all-reduce in the model")
    return n


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(
            "usage: python -m tracekit.collect.parallel_rank SCRATCH_FOLDER RANK (started by tracekit collect --tp)",
            file=sys.stderr,
        )
        return 2
    return rank_main(argv[0], int(argv[1]))


if __name__ == "__main__":
    sys.exit(main())
