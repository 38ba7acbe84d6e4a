"""Hand-built CUDA-graph capture and replay traces, written the way vLLM writes them, for tests
whose expected FLOPs are worked out by arithmetic (``kineto.Doc`` plus graphs).

A capture trace (vLLM's ``capture_torch_profiler_dir``, one file per graph size, all named
``graph_capture_rank_0.<time>.pt.trace.json.gz``) holds a ``capture_<n>_<mode>`` range around
the capture run; each graph is a ``cudaStreamBeginCapture`` ... ``cudaStreamEndCapture`` pair
on the CPU thread with the ops (and their shapes) whose launch calls it recorded; no kernel
runs while a stream is captured, so those launch calls have no kernel. In PIECEWISE mode each
piece between two attention calls is its own graph, attention running eagerly between them.

A replay trace's graph launch is one ``cudaGraphLaunch`` whose correlation id every kernel it
replays carries; those kernels have no op and no shapes.
"""

from __future__ import annotations

from kineto import PID, STREAM, TID, Doc

BF16 = "c10::BFloat16"
H100 = "NVIDIA H100 80GB HBM3"
GEMM_KERNEL = "nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT"  # a cuBLAS GEMM kernel on Hopper
ATTENTION_OP = "vllm::unified_attention_with_output"
ATTENTION_KERNEL = "kernel_unified_attention_2d"


def linear(m: int, n: int, k: int) -> tuple[str, list, list]:
    """``aten::linear`` of an [m, k] input by an [n, k] weight, no bias: 2 * m * n * k FLOPs."""
    return "aten::linear", [[m, k], [n, k], []], [BF16, BF16, ""]


class GraphDoc(Doc):
    def call(
        self, name: str, ts: float, dur: float = 1.0, ext: int | None = None, tid: int = TID, kernel: str | None = None
    ) -> int:
        """A CUDA runtime call with no kernel (a launch during stream capture, a capture mark);
        ``kernel``: the kernel the launch call names, as ROCm's do."""
        self._corr += 1
        args = {"cbid": 0, "correlation": self._corr}
        if ext is not None:
            args["External id"] = ext
        if kernel is not None:
            args["kernel"] = kernel
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )
        return self._corr

    def captured_op(self, op: tuple[str, list, list], ts: float, kernel: str | None = None) -> float:
        """An op and the launch call it made while its stream was captured (naming ``kernel``
        when given); returns the time after."""
        name, dims, types = op
        ext = self.op(name, ts, 8.0, dims=dims, types=types)
        self.call("cudaLaunchKernel", ts + 2.0, 3.0, ext=ext, kernel=kernel)
        return ts + 10.0

    def graph(self, ops: list, ts: float, kernel: str | None = None) -> float:
        """One captured graph of ``ops``; returns the time after its end of capture."""
        self.call("cudaStreamBeginCapture", ts)
        t = ts + 2.0
        for op in ops:
            t = self.captured_op(op, t, kernel)
        self.call("cudaStreamEndCapture", t)
        return t + 2.0

    def graph_launch(self, ts: float, kernels: list[tuple[str, float, float]], grid=(132, 1, 1)) -> None:
        """A ``cudaGraphLaunch`` at ``ts`` and the kernels it replays, (name, GPU start, duration) each."""
        c = self.call("cudaGraphLaunch", ts, 5.0)
        for name, gpu_ts, gpu_dur in kernels:
            self.events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": STREAM,
                    "ts": gpu_ts,
                    "dur": gpu_dur,
                    "args": {
                        "device": 0,
                        "stream": STREAM,
                        "correlation": c,
                        "grid": list(grid),
                        "block": [384, 1, 1],
                        "registers per thread": 168,
                        "shared memory": 0,
                    },
                }
            )


def capture_trace(
    size: int, mode: str | None, pieces: list[list], eager=None, device: str = H100, kernel: str | None = None
) -> GraphDoc:
    """The capture trace of one graph size: a ``capture_<size>_<mode>`` range (none when ``mode``
    is None) holding one graph per piece, the op ``eager`` (if any) run eagerly between two
    pieces (its kernel runs); each launch call names ``kernel`` when given (ROCm)."""
    doc = GraphDoc(device)
    t = 100.0
    start = t
    for i, piece in enumerate(pieces):
        t = doc.graph(piece, t, kernel)
        if eager is not None and i < len(pieces) - 1:
            name, dims, types = eager
            ext = doc.op(name, t, 8.0, dims=dims, types=types)
            doc.kernel(ATTENTION_KERNEL, t + 2.0, t + 5.0, 3.0, ext=ext)
            t += 10.0
    if mode is not None:
        doc.annotation(f"capture_{size}_{mode}", start - 1.0, t - start + 2.0)
    return doc


def replay_step(doc: GraphDoc, annotation: str, pieces: list[list[tuple[str, float]]], t: float, eager=None) -> float:
    """One engine step replaying ``pieces`` (each one graph launch of (kernel, duration µs)
    kernels), the op ``eager`` (if any) launching an attention kernel between two pieces.
    Returns the time after the step."""
    start = t
    gpu = t + 20.0
    for i, piece in enumerate(pieces):
        kernels = []
        for name, dur in piece:
            kernels.append((name, gpu, dur))
            gpu += dur + 1.0
        doc.graph_launch(t, kernels)
        t += 10.0
        if eager is not None and i < len(pieces) - 1:
            name, dims, types = eager
            ext = doc.op(name, t, 8.0, dims=dims, types=types)
            doc.kernel(ATTENTION_KERNEL, t + 2.0, gpu, 20.0, ext=ext)
            gpu += 21.0
            t += 10.0
    end = max(t, gpu) + 10.0
    doc.annotation(annotation, start - 1.0, end - start)
    return end + 10.0


def execute_name(tokens: int, prefill: bool) -> str:
    """vLLM's detailed step annotation of one request of ``tokens`` prefill tokens (a fresh
    prompt: keys = queries), or of ``tokens`` decode requests of one token over 1,024 keys."""
    if prefill:
        t = tokens
        return f"execute_{t}_context_1(sq{t}sk{t}sqsq{t * t}sqsk{t * t})_generation_0(sq0sk0sqsq0sqsk0)"
    return (
        f"execute_{tokens}_context_0(sq0sk0sqsq0sqsk0)_generation_{tokens}(sq{tokens}sk{tokens * 1024}"
        f"sqsq{tokens}sqsk{tokens * 1024})"
    )
