"""The generation loop tracekit profiles, its wall-clock timing, and the profiler around it.

The loop is tracekit's own, not ``model.generate()``, so that every phase is marked
exactly: one prefill forward over the prompt that also picks the first token (greedy
argmax), then one forward per decode step with the KV cache, each producing one token per
sequence. ``new_tokens`` counts decode steps, so a trace holds one prefill range and
``new_tokens`` decode ranges, and each sequence ends with ``new_tokens + 1`` new tokens
(the prefill makes the first).

On a GPU every range ends with a device synchronisation (a server needs each token on the
host to stream it or stop), so the wall clock measures the GPU work and the CPU range
covers it. The same code runs with and without the profiler; only the profiler differs.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from tracekit import markers
from tracekit.errors import TracekitError


@dataclass
class RunTiming:
    """Wall-clock times of one generation, in milliseconds."""

    ttft_ms: float  # start of prefill -> first token on the host
    tpot_ms: list[float]  # one per decode step
    wall_ms: float  # the whole generation
    step_ms: list[float] = field(default_factory=list)  # [prefill, decode 0, decode 1, ...]


@dataclass(frozen=True)
class Schedule:
    """Which part of a long generation the trace records.

    ``skip_steps`` decode steps run unrecorded first (the prefill is recorded only when
    none are skipped), the profiler warms up over the last ``warmup_steps`` of them, then
    ``record_steps`` decode steps are recorded (all remaining ones when None).
    """

    skip_steps: int = 0
    record_steps: int | None = None
    warmup_steps: int = 1

    @property
    def records_everything(self) -> bool:
        return self.skip_steps == 0 and self.record_steps is None

    def window(self, new_tokens: int) -> tuple[bool, int, int]:
        """(prefill recorded, first recorded decode step, number of recorded decode steps)."""
        first = min(self.skip_steps, new_tokens)
        n = new_tokens - first if self.record_steps is None else min(self.record_steps, new_tokens - first)
        return self.skip_steps == 0, first, max(n, 0)

    def describe(self, new_tokens: int) -> dict[str, Any]:
        prefill, first, n = self.window(new_tokens)
        return {
            "skip_decode_steps": self.skip_steps,
            "profiler_warmup_steps": self.torch_schedule_args(new_tokens)["warmup"]
            if not self.records_everything
            else 0,
            "record_decode_steps": self.record_steps,
            "prefill_recorded": prefill,
            "recorded_decode_steps": [first, first + n - 1] if n else [],
            "decode_steps_total": new_tokens,
        }

    def torch_schedule_args(self, new_tokens: int) -> dict[str, int]:
        """Arguments of ``torch.profiler.schedule``; profiler step 0 is the prefill, k is decode k-1."""
        prefill, first, n = self.window(new_tokens)
        if prefill:
            return {"wait": 0, "warmup": 0, "active": 1 + n, "repeat": 1}
        first_active = first + 1
        warmup = max(0, min(self.warmup_steps, first_active))
        return {"wait": first_active - warmup, "warmup": warmup, "active": n, "repeat": 1}


def _nullcontext(_name: str):
    return contextlib.nullcontext()


class Generator:
    """A built model plus fixed random prompts; ``run()`` does one full greedy generation."""

    def __init__(
        self,
        workload,
        batch_size: int,
        prompt_len: int,
        new_tokens: int,
        compile: bool = False,
        cuda_graphs: bool = False,
        seed: int = 0,
    ):
        import torch

        if batch_size < 1 or prompt_len < 1 or new_tokens < 1:
            raise TracekitError(
                f"batch size, prompt length and new tokens must each be at least 1 "
                f"(got {batch_size}, {prompt_len}, {new_tokens})"
            )
        limit = getattr(workload.config, "max_position_embeddings", None)
        if limit and prompt_len + new_tokens + 1 > limit:
            raise TracekitError(
                f"prompt length {prompt_len} plus {new_tokens} new tokens exceeds the model's {limit} positions"
            )
        self.torch = torch
        self.workload = workload
        self.model = workload.model
        self.batch = batch_size
        self.prompt_len = prompt_len
        self.new_tokens = new_tokens
        self.device = torch.device(workload.device)
        self.is_cuda = self.device.type == "cuda"
        self.static_cache = bool(compile or cuda_graphs)

        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._has_cache_position = "cache_position" in params
        self._logits_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)

        gen = torch.Generator(device="cpu").manual_seed(seed)
        ids = torch.randint(0, workload.vocab_size, (batch_size, prompt_len), generator=gen)
        self.prompt = ids.to(self.device)
        # Positions prepared once, so the loop launches no host-to-device copies of its own.
        self._decode_pos = [
            torch.full((batch_size, 1), prompt_len + i, dtype=torch.long, device=self.device) for i in range(new_tokens)
        ]
        self._prefill_pos = torch.arange(prompt_len, device=self.device).unsqueeze(0).expand(batch_size, -1)
        self._decode_cpos = [torch.tensor([prompt_len + i], device=self.device) for i in range(new_tokens)]
        self._prefill_cpos = torch.arange(prompt_len, device=self.device)

        self._decode_forward = self.model.forward
        if compile or cuda_graphs:
            if cuda_graphs and not self.is_cuda:
                raise TracekitError("--cuda-graphs needs a CUDA/ROCm device (this run is on the CPU)")
            mode = "reduce-overhead" if cuda_graphs else "default"
            try:
                self._decode_forward = torch.compile(self.model.forward, mode=mode, dynamic=False)
            except Exception as e:  # noqa: BLE001
                raise TracekitError(f"torch.compile is not usable here ({str(e).splitlines()[0][:200]})") from None

    # -- pieces -----------------------------------------------------------------------

    def sync(self) -> None:
        if self.is_cuda:
            self.torch.cuda.synchronize(self.device)

    def _new_cache(self):
        if not self.static_cache:
            return None
        from transformers import StaticCache

        want = {
            "config": self.workload.config,
            "max_cache_len": self.prompt_len + self.new_tokens + 1,
            "max_batch_size": self.batch,
            "batch_size": self.batch,
            "device": self.device,
            "dtype": self.workload.dtype,
        }
        params = inspect.signature(StaticCache.__init__).parameters
        kwargs = {k: v for k, v in want.items() if k in params}
        return StaticCache(**kwargs)

    def _forward(self, fn, ids, cache, pos, cpos, prefill: bool):
        kw: dict[str, Any] = {"input_ids": ids, "use_cache": True, "position_ids": pos}
        if cache is not None:
            kw[self._cache_kw] = cache
        if self._has_cache_position:
            kw["cache_position"] = cpos
        if prefill and self._logits_kw:
            kw[self._logits_kw] = 1  # only the last position's logits, as generate() does
        out = fn(**kw)
        new_cache = getattr(out, "cache", None)
        if new_cache is None:
            new_cache = getattr(out, "past_key_values", None)
        # The model returns the cache to use next (the same object for in-place caches, a new
        # one for legacy tuples).
        return out.logits[:, -1, :].argmax(dim=-1, keepdim=True), (new_cache if new_cache is not None else cache)

    # -- the loop -----------------------------------------------------------------------

    def run(
        self,
        mark: bool = True,
        on_step: Callable[[], None] | None = None,
        between_steps: Callable[[], None] | None = None,
        mark_generate: bool = True,
    ) -> RunTiming:
        """One generation. ``on_step`` runs after each forward (outside the step's timer);
        ``between_steps`` too (the profiler's ``step()`` when a schedule is used)."""
        torch = self.torch
        rf = torch.profiler.record_function if mark else _nullcontext
        B, P = self.batch, self.prompt_len
        clock = time.perf_counter
        steps: list[float] = []
        outside = 0.0  # time spent in callbacks, not part of the generation
        cache = self._new_cache()
        with torch.inference_mode():
            self.sync()
            t_start = clock()
            with rf(markers.GENERATE) if mark_generate else contextlib.nullcontext():
                t0 = clock()
                with rf(markers.prefill_name(B, B * P, B * P)):
                    tok, cache = self._forward(
                        self.model.forward, self.prompt, cache, self._prefill_pos, self._prefill_cpos, True
                    )
                    self.sync()
                t1 = clock()
                steps.append(t1 - t0)
                for i in range(self.new_tokens):
                    t_cb = clock()
                    if between_steps is not None:
                        between_steps()
                    if on_step is not None:
                        on_step()
                    t0 = clock()
                    outside += t0 - t_cb
                    with rf(markers.decode_name(i, B, B, B * (P + i + 1))):
                        tok, cache = self._forward(
                            self._decode_forward, tok, cache, self._decode_pos[i], self._decode_cpos[i], False
                        )
                        self.sync()
                    steps.append(clock() - t0)
            t_cb = clock()
            if between_steps is not None:
                between_steps()
            if on_step is not None:
                on_step()
            t_end = clock()
            outside += t_end - t_cb
        ms = [s * 1e3 for s in steps]
        return RunTiming(
            ttft_ms=ms[0],
            tpot_ms=ms[1:],
            wall_ms=(t_end - t_start - outside) * 1e3,
            step_ms=ms,
        )


@contextlib.contextmanager
def quiet_gc():
    """No garbage collection pauses inside a measured run (as ``timeit`` does)."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def profiler_activities(device_type: str):
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if device_type == "cuda":
        acts.append(ProfilerActivity.CUDA)  # also HIP on ROCm builds
    return acts


def make_profiler(device_type: str, schedule_args: dict[str, int] | None = None, on_trace_ready=None):
    import torch

    kwargs: dict[str, Any] = dict(
        activities=profiler_activities(device_type),
        record_shapes=True,
        with_stack=False,
        profile_memory=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "profiler won't be using warmup" and similar
        if schedule_args is not None:
            kwargs["schedule"] = torch.profiler.schedule(**schedule_args)
            kwargs["on_trace_ready"] = on_trace_ready
        return torch.profiler.profile(**kwargs)


@contextlib.contextmanager
def quiet_stderr_fd():
    """Silence C-level writes to fd 2 (kineto prints ``USDT: ... profiler_start`` lines there)."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)
        finally:
            os.close(devnull)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def running(prof, metadata: dict[str, str] | None = None):
    """``with prof:`` with the profiler's start and stop chatter kept off the terminal.

    ``metadata`` ({key: JSON text}) becomes top-level keys of the exported trace."""
    late = {}
    for k, v in (metadata or {}).items():
        if hasattr(prof, "preset_metadata_json"):
            prof.preset_metadata_json(k, v)
        else:  # pragma: no cover - torch < 2.1
            late[k] = v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with quiet_stderr_fd():
            prof.__enter__()
        for k, v in late.items():
            prof.add_metadata_json(k, v)
        exc: tuple = (None, None, None)
        try:
            yield prof
        except BaseException:
            import sys

            exc = sys.exc_info()
            raise
        finally:
            with quiet_stderr_fd():
                prof.__exit__(*exc)


def quiet_step(prof) -> Callable[[], None]:
    def step() -> None:
        with quiet_stderr_fd():
            prof.step()

    return step


def profiled_run(
    gen: Generator,
    schedule: Schedule,
    export_to: str,
    on_step: Callable[[], None] | None = None,
    metadata: dict[str, str] | None = None,
) -> RunTiming:
    """Run one generation under ``torch.profiler`` and write its trace to ``export_to``."""
    exported: list[bool] = []

    def export(prof) -> None:
        if not exported:
            prof.export_chrome_trace(export_to)
            exported.append(True)

    if schedule.records_everything:
        prof = make_profiler(gen.device.type)
        with running(prof, metadata):
            timing = gen.run(mark=True, on_step=on_step)
        export(prof)
    else:
        prof = make_profiler(gen.device.type, schedule.torch_schedule_args(gen.new_tokens), export)
        with running(prof, metadata):
            timing = gen.run(mark=True, on_step=on_step, between_steps=quiet_step(prof), mark_generate=False)
        if not exported:  # pragma: no cover - the window always closes at the last step()
            export(prof)
    return timing


def recorded_ratio(profiled: RunTiming, plain: RunTiming, schedule: Schedule, new_tokens: int) -> float | None:
    """Profiled over unprofiled time of the steps the trace records (the whole run without a schedule)."""
    if schedule.records_everything:
        return profiled.wall_ms / plain.wall_ms if plain.wall_ms > 0 else None
    prefill, first, n = schedule.window(new_tokens)
    idx = ([0] if prefill else []) + [1 + first + k for k in range(n)]
    a = sum(profiled.step_ms[i] for i in idx)
    b = sum(plain.step_ms[i] for i in idx)
    return a / b if b > 0 else None
